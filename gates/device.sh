#!/usr/bin/env bash
# Runs ON the device machine (the `device` tool), from the repository root:
#   bash gates/device.sh            (PHASE=<top phase with sources> unless PHASE is set)
# Builds with -arch=sm_90 (minfer + gate programs only: the GPU host has no Criterion),
# synthesizes the models the gates need into /tmp, runs every device gate of the built
# phases (make gate-7a .. gate-<PHASE>, each at its own PHASE; phases 7a .. 7e, 8a, 8b),
# compute-sanitizer memcheck on gate_7a, then the benches, and writes to $OUT:
#   gate-<phase>-<YYYYMMDD>.json   one summary per phase at its own build (<= 6 phases)
#   logs.tgz                       build log, every gate log, regression JSONs, nvidia-smi
# The device tool returns at most 8 files, so nothing else goes to $OUT.
set -u
cd "$(dirname "$0")/.."
# ---- real model files, brought over several calls of one warm machine ----
# One call carries at most 64 MiB, so a real GGUF travels as 60 MiB pieces (split -b 60M -d
# into the git-ignored .dev/, named <base>.NN, plus .dev/sums.txt from sha256sum):
#   bash gates/device.sh stash        moves the carried pieces to $STASH (kept between calls)
#   REAL_MODELS=1 bash gates/device.sh   assembles every complete file whose sha256 matches
#                                       and hands them to gate_7c (MINFER_GATE_REAL_MODELS)
STASH=${STASH:-/root/minfer-stash}
if [ "${1:-}" = stash ]; then
    mkdir -p "$STASH"
    for f in .dev/*; do [ -f "$f" ] && mv -f "$f" "$STASH/"; done
    echo "stash: $(ls "$STASH" | wc -l) files, $(du -sh "$STASH" | cut -f1): $(ls "$STASH" | tr '\n' ' ')"
    exit 0
fi
assemble_real() {   # prints the colon-joined paths of the verified files
    local dir=/root/minfer-real list="" b f want got
    mkdir -p "$dir"
    [ -f "$STASH/sums.txt" ] || return 0
    while read -r want f; do
        b=$(basename "$f")
        case "$b" in SmolLM2*) pre=smol ;; Qwen2.5-Coder-0.5B*) pre=q05 ;; Qwen2.5-Coder-1.5B*) pre=q15 ;; *) continue ;; esac
        compgen -G "$STASH/$pre.*" >/dev/null || continue
        cat "$STASH"/$pre.* >"$dir/$b"
        got=$(sha256sum "$dir/$b" | cut -d' ' -f1)
        if [ "$got" = "$want" ]; then list="$list${list:+:}$dir/$b"
        else echo "real model $b: incomplete or corrupt ($(ls "$STASH"/$pre.* | wc -l) pieces, sha256 $got)" >&2; rm -f "$dir/$b"; fi
    done <"$STASH/sums.txt"
    echo "$list"
}
OUT=${OUT:-/tmp/minfer-out}
mkdir -p "$OUT"
WORK=/tmp/minfer-device
LOGS=$WORK/logs
rm -rf "$WORK"
mkdir -p "$LOGS" "$WORK/models" "$WORK/res"
day=$(date -u +%Y%m%d)
t_start=$(date +%s)
JOBS=${JOBS:-16}
# the GPU host has no repo venv; the benches' JSON snippets need only the standard library
export MINFER_PYTHON=${MINFER_PYTHON:-python3}
export MINFER_BENCH_DIR=${MINFER_BENCH_DIR:-$OUT}   # bench JSON lines written by gates come back with the results
export MINFER_GATE_TIMEOUT=${MINFER_GATE_TIMEOUT:-300}   # a hung gate ends; the rest of the run still reports
BD=${BD:-/tmp/minfer-build}
# extra make arguments; empty normally
read -r -a XMAKE <<<"${EXTRA_MAKE_ARGS:-}"
# WNO_ERROR=1: compiler warnings are reported (warnings.txt, the summary) but not fatal, so a
# warning that only this host's gcc emits cannot cost a whole device run
# (a wrapper, because the flag must come after the Makefile's -Werror to win)
if [ -n "${WNO_ERROR:-}" ]; then
    read -r -a cc_words <<<"${CC:-cc}"
    real_cc=$(command -v "${cc_words[0]}")
    printf '#!/bin/sh\nexec %s %s "$@" -Wno-error\n' "$real_cc" "${cc_words[*]:1}" >"$WORK/cc-wno-error"
    chmod +x "$WORK/cc-wno-error"
    export CC=$WORK/cc-wno-error
fi

if [ -z "${PHASE:-}" ]; then   # the top phase whose directory has sources
    PHASE=7a
    for pd in 7b:phase7b_ops 7c:phase7c_wiring 7d:phase7d_graphs 7e:phase7e_perf 8a:phase8a_decode 8b:phase8b_batch; do
        { compgen -G "${pd#*:}/*.c" || compgen -G "${pd#*:}/*.cu"; } >/dev/null && PHASE=${pd%%:*}
    done
fi
PHASES=""
for p in 7a 7b 7c 7d 7e 8a 8b; do PHASES="$PHASES $p"; [ "$p" = "$PHASE" ] && break; done
# FROM_PHASE=7d: build and gate only the phases from 7d on (the rest of a suite split over
# two calls of one machine: PHASE=7c first, then FROM_PHASE=7d)
if [ -n "${FROM_PHASE:-}" ]; then
    PHASES=$(echo "$PHASES" | tr ' ' '\n' | awk -v f="$FROM_PHASE" 'NF && $1 >= f' | tr '\n' ' ')
fi

# The device's copy of .git has been seen to lag the working tree (benches run outside this
# script recorded the session's starting commit), so the caller should pass MINFER_COMMIT.
[ -n "${MINFER_COMMIT:-}" ] || echo "device.sh: MINFER_COMMIT not set; the commit read from this copy's git may be stale" >&2
# Without it: HEAD with -dirty where the tracked files differ from it (as the bench facts and the
# gates read it), so a lagging copy cannot pass for its checkout's commit.
head_commit() {
    local h
    h=$(git rev-parse --short=12 HEAD 2>/dev/null) || return 1
    if git diff --quiet HEAD -- 2>/dev/null; then echo "$h"; else echo "$h-dirty"; fi
}
export MINFER_COMMIT=${MINFER_COMMIT:-$(head_commit || cat .commit 2>/dev/null || echo unknown)}
status_line() { echo "[device.sh $(( $(date +%s) - t_start ))s] $*"; }
pack() {
    cp "$WORK"/res/*/*.json "$LOGS"/ 2>/dev/null
    tar czf "$OUT/logs.tgz" -C "$WORK" logs 2>/dev/null
}

{ nvidia-smi; echo; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv; \
  echo; nvcc --version; gcc --version | head -1; uname -a; echo "commit $MINFER_COMMIT"; } >"$LOGS/machine.txt" 2>&1
status_line "phase $PHASE (phases:$PHASES), commit $MINFER_COMMIT, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# TOP_ONLY=1: build only PHASE and run every gate up to it at that build (the regression
# suite of the phase contract) instead of one build + gate run per phase; GATE_PHASES="7c 7d"
# limits which phases' gates run (to split the suite over two calls of one warm machine).
if [ -n "${TOP_ONLY:-}" ]; then
    BUILD_PHASES=$PHASE
else
    BUILD_PHASES=$PHASES
fi
# ---- build: each phase at its own PHASE, into $BD-<phase> (what make gate-<phase> uses) ----
for p in $BUILD_PHASES; do
    if ! make --no-print-directory PHASE=$p BUILD=$BD-$p CUDA_ARCH=sm_90 "${XMAKE[@]}" -j"$JOBS" all >"$LOGS/build-$p.log" 2>&1; then
        status_line "BUILD FAILED at PHASE=$p (log: build-$p.log):"
        grep -E 'error|Error' "$LOGS/build-$p.log" | head -30
        pack
        exit 1
    fi
    status_line "built PHASE=$p: $(grep -E '^minfer: ' "$LOGS/build-$p.log" | head -1)"
    grep -E 'warning:' "$LOGS/build-$p.log" | sort -u >>"$LOGS/warnings.txt"
    nw=$(grep -cE 'warning:' "$LOGS/build-$p.log")
    [ "$nw" -gt 0 ] && { status_line "$nw compiler warnings at PHASE=$p:"; grep -E 'warning:' "$LOGS/build-$p.log" | sort -u | head -10 | cut -c1-220; }
done
MINFER=$BD-$PHASE/minfer

# ---- models (synthetic, seeded): tiny shapes of each architecture + one real shape ----
MODELS=""
synth() { # shape type
    local f=$WORK/models/$1-$2.gguf
    if "$MINFER" synth --shape "$1" --type "$2" -o "$f" >>"$LOGS/synth.log" 2>&1; then
        MODELS="$MODELS${MODELS:+:}$f"
    else
        status_line "synth $1 $2 failed (see synth.log)"
    fi
}
synth tiny-qwen2 q4_0
synth tiny-llama q8_0
synth tiny-qwen3 q4_k_m
synth qwen2.5-0.5b q4_0
status_line "models: ${MODELS:-none}"
export MINFER_GATE_MODELS=$MODELS

if [ -n "${REAL_MODELS:-}" ]; then
    MINFER_GATE_REAL_MODELS=$(assemble_real 2>>"$LOGS/synth.log")
    export MINFER_GATE_REAL_MODELS
    status_line "real model files: ${MINFER_GATE_REAL_MODELS:-none complete}"
fi

# ---- PROFILE=1: per-op and per-weight-shape times of the 7B (MINFER_PROFILE=2, synchronized
# after every node, graphs off), prefill 2048 and decode, first, on a quiet GPU ----
if [ -n "${PROFILE:-}" ] && [ -x "$MINFER" ]; then
    M7=/tmp/minfer-7b-qwen2.5-7b-q4_k_m.gguf   # the path the gates synthesize to (reused by them)
    [ -f "$M7" ] || "$MINFER" synth --shape qwen2.5-7b --type q4_k_m -o "$M7" >>"$LOGS/synth.log" 2>&1
    for pr in "pp:-p 2048 -n 1" "tg:-p 8 -n 64"; do
        read -r -a pa <<<"${pr#*:}"
        MINFER_NO_CUDA_GRAPH=1 MINFER_PROFILE=2 timeout 300 "$MINFER" bench -m "$M7" --backend cuda "${pa[@]}" -r 1 \
            >"$LOGS/profile-${pr%%:*}.log" 2>&1
        status_line "profile ${pr%%:*} (${pr#*:}): rc $?"
    done
    cat "$LOGS"/profile-pp.log "$LOGS"/profile-tg.log >"$OUT/profile-7b.txt"
    grep -E 'sched profile|^  ' "$LOGS/profile-tg.log" | head -40
fi

# ---- NCU=1: Nsight Compute kernel durations of 7B decode steps (graphs off, every kernel
# timed alone) and one full-section profile of a prefill matmul kernel, for the perf work ----
NCU_BIN=$(command -v ncu 2>/dev/null || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ -n "${NCU:-}" ] && [ -n "$NCU_BIN" ] && [ -x "$MINFER" ]; then
    M7=/tmp/minfer-7b-qwen2.5-7b-q4_k_m.gguf
    [ -f "$M7" ] || "$MINFER" synth --shape qwen2.5-7b --type q4_k_m -o "$M7" >>"$LOGS/synth.log" 2>&1
    # bench -p 8 -n 8 -r 1 runs a warm-up and a timed pass; skip the first pass's launches
    if [ -z "${NCU_NO_DECODE:-}" ]; then   # NCU_NO_DECODE=1: only the prefill kernel below
        MINFER_NO_CUDA_GRAPH=1 timeout 400 "$NCU_BIN" --metrics gpu__time_duration.sum --csv --launch-skip ${NCU_SKIP:-3400} \
            --launch-count ${NCU_COUNT:-3000} "$MINFER" bench -m "$M7" --backend cuda -p 8 -n 8 -r 1 \
            >"$OUT/ncu-decode.csv" 2>"$LOGS/ncu-decode.err"
        status_line "ncu decode kernels: rc $?, $(grep -c gpu__time_duration "$OUT/ncu-decode.csv") rows"
    fi
    # NCU_KERNEL: the prefill kernel to profile in full (default the f16 prefill GEMM, e13; kernel_gemm_int8 for e7)
    MINFER_NO_CUDA_GRAPH=1 timeout 300 "$NCU_BIN" --set full -k regex:${NCU_KERNEL:-kernel_gemm_f16} --launch-skip 4 --launch-count 1 \
        "$MINFER" bench -m "$M7" --backend cuda -p 2048 -n 1 -r 1 >"$OUT/ncu-prefill.txt" 2>&1
    status_line "ncu ${NCU_KERNEL:-kernel_gemm_f16}: rc $?"
fi

# ---- device gates ----
overall=0
if [ -n "${TOP_ONLY:-}" ]; then
    mkdir -p "$WORK/res/$PHASE" "$LOGS/gates-$PHASE"
    MINFER_GATE_PHASES=${GATE_PHASES:-} MINFER_GATE_RESULTS=$WORK/res/$PHASE MINFER_GATE_LOGS=$LOGS/gates-$PHASE \
        bash gates/run_device_gates.sh "$BD-$PHASE" "$PHASE" >"$LOGS/gate-$PHASE.log" 2>&1 || overall=1
    status_line "gates at PHASE=$PHASE (${GATE_PHASES:-all}): $(tail -1 "$LOGS/gate-$PHASE.log")"
    grep -E '^[0-9a-z]+/gate_' "$LOGS/gate-$PHASE.log"
    grep -E '^FAIL' "$LOGS/gates-$PHASE"/*.log 2>/dev/null | head -20
    for j in "$WORK/res/$PHASE"/gate-*.json; do [ -f "$j" ] && cp "$j" "$OUT/"; done
else
# make gate-<p> for every built phase (earlier gates = regression)
for p in $PHASES; do
    mkdir -p "$WORK/res/$p" "$LOGS/gates-$p"
    MINFER_GATE_RESULTS=$WORK/res/$p MINFER_GATE_LOGS=$LOGS/gates-$p \
        make --no-print-directory gate-$p BUILD=$BD CUDA_ARCH=sm_90 "${XMAKE[@]}" >"$LOGS/gate-$p.log" 2>&1 || overall=1
    status_line "make gate-$p: $(tail -1 "$LOGS/gate-$p.log")"
    grep -E '^FAIL' "$LOGS/gates-$p"/*.log 2>/dev/null | head -20
    # the phase's own gate at its own build is the record; regression runs stay in the logs
    for j in "$WORK/res/$p"/gate-$p-*.json; do [ -f "$j" ] && cp "$j" "$OUT/"; done
done
fi

# ---- compute-sanitizer memcheck on gate_7a (quick mode: sizes to 64 MiB, no child runs) ----
SAN_LOG=$LOGS/sanitizer-memcheck.log
G7A=$BD-7a/gates/7a/gate_7a
[ -n "${TOP_ONLY:-}" ] && G7A=$BD-$PHASE/gates/7a/gate_7a
[ -n "${NO_MEMCHECK:-}" ] && G7A=/nonexistent
CSAN=$(command -v compute-sanitizer 2>/dev/null || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$CSAN" ] && [ -x "$G7A" ]; then
    t0=$(date +%s%N)
    MINFER_GATE_QUICK=1 MINFER_GATE_SANITIZER=1 MINFER_GATE_MODELS=${MODELS%%:*} MINFER_LOG=0 \
        "$CSAN" --tool memcheck --leak-check full --error-exitcode 9 "$G7A" >"$SAN_LOG" 2>&1
    san_rc=$?
    san_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    san_sum=$(grep -E 'ERROR SUMMARY' "$SAN_LOG" | tail -1)
    san_gate=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$SAN_LOG" | tail -1)
    status_line "compute-sanitizer memcheck: rc $san_rc, ${san_sum:-no summary}; gate under it: ${san_gate:-none}"
    # add the result to gate 7a's summary as one more test
    J=$(ls "$OUT"/gate-7a-*.json 2>/dev/null | head -1)
    if [ -n "$J" ]; then
        python3 - "$J" "$san_rc" "$san_ms" "${san_sum:-no ERROR SUMMARY line}" "${san_gate:-}" <<'PY'
import json, sys
path, rc, ms, summ, gate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
d = json.load(open(path))
ok = rc == 0 and "0 errors" in summ and gate != "" and " 0 failed" in gate
d["tests"].append({"name": "compute_sanitizer_memcheck", "status": "pass" if ok else "fail",
                   "detail": f"compute-sanitizer --tool memcheck --leak-check full on gate_7a (quick): rc {rc}; {summ}; gate: {gate}",
                   "ms": ms})
d["passed" if ok else "failed"] += 1
json.dump(d, open(path, "w"), indent=1)
PY
    fi
else
    status_line "compute-sanitizer or gate_7a missing: memcheck not run"
fi

# ---- benches (NO_BENCH=1 skips them): later phases add theirs here (bench_* programs, minfer bench) ----
# BENCHES: none in phase 7a.
# 7b (added by cuda7b): the phase's baseline on the 7B shape, synthetic qwen2.5-7b Q4_K_M.
# Until 7c makes weights resident, every forward copies the 4.7 GB of weights host->device
# (~0.7 s/token measured), so tg128 x (1 warm-up + 3 reps) takes ~6 minutes.
if [ -z "${NO_BENCH:-}" ] && [ "$PHASE" != 7a ] && [ -x "$MINFER" ]; then
    M7=/tmp/minfer-7b-qwen2.5-7b-q4_k_m.gguf   # the path gate_7b synthesizes to (reused)
    [ -f "$M7" ] || "$MINFER" synth --shape qwen2.5-7b --type q4_k_m -o "$M7" >>"$LOGS/synth.log" 2>&1
    timeout ${BENCH7B_TIMEOUT:-900} "$MINFER" bench -m "$M7" --backend cuda -p 512,2048 -n 128 -r 3 \
        --json "$OUT/bench-7b-qwen2.5-7b-q4_k_m.jsonl" >"$LOGS/bench-7b.log" 2>&1
    status_line "bench 7B Q4_K_M (cuda): rc $?, $(grep -c tok_s "$OUT/bench-7b-qwen2.5-7b-q4_k_m.jsonl" 2>/dev/null || echo 0) records"
    grep -E '^\| ' "$LOGS/bench-7b.log" | tail -4
fi
# 7e (added by cuda7e; at PHASE=8a and 8b too): make bench-era-a, bench-7e, bench-phases on the top
# build above, $BD-$PHASE ($BD-7e, $BD-8a or $BD-8b; bench-phases builds a missing PHASE=7b..7e itself,
# e.g. under TOP_ONLY=1, with -j$JOBS, and benches every phase from 7b up to PHASE). Their
# records go to one file, $MINFER_BENCH_DIR/bench-7e-records.jsonl at either phase (each record
# names its phase; the tool returns at most 8 files); NO_BENCH_7E=1 skips them. Budget ~3 minutes
# in all (each one under its own timeout).
# BENCHES="vs_peer:$BD-<PHASE>:560" (with .carry/peer carried, from `tools/bench_peer.sh fetch`):
# minfer and llama.cpp's llama-bench on the same files, side by side (DEPTHS=0,4096,... for -d).
# The per-kernel roofline ladder is a program of the build: $BD-$PHASE/gates/7e/bench_roofline --json F.
if { [ "$PHASE" = 7e ] || [ "$PHASE" = 8a ] || [ "$PHASE" = 8b ]; } && [ -x "$BD-$PHASE/minfer" ] && [ -z "${NO_BENCH_7E:-}" ] && [ -z "${NO_BENCH:-}" ]; then
    export BENCH_JSON=${MINFER_BENCH_DIR:-$LOGS}/bench-7e-records.jsonl
    bench_phases=""   # bench-phases: every CUDA layer from 7b up to the top one built here
    for p in 7b 7c 7d 7e 8a 8b; do bench_phases="$bench_phases${bench_phases:+ }$p"; [ "$p" = "$PHASE" ] && break; done
    # at PHASE=8b its own bench comes first: many sequences a step (tools/bench_8b.sh, ~3 minutes)
    def_benches="era_a:$BD-$PHASE:100 7e:$BD-$PHASE:200 phases:$BD:420"
    [ "$PHASE" = 8b ] && def_benches="8b:$BD-$PHASE:300 $def_benches"
    for b in ${BENCHES:-$def_benches}; do
        IFS=: read -r bn barg bto <<<"$b"
        PHASES=$bench_phases JOBS=$JOBS timeout "$bto" bash "tools/bench_$bn.sh" "$barg" >"$LOGS/bench-$bn.log" 2>&1
        status_line "bench-$bn: rc $?"
        grep -E '^\| ' "$LOGS/bench-$bn.log" | grep -vE '^\| (---|model \| type)' | tail -24
    done
    unset BENCH_JSON
fi

pack
status_line "done; files in $OUT:"
ls -la "$OUT"
for j in "$OUT"/gate-*.json; do
    [ -f "$j" ] || continue
    python3 - "$j" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{sys.argv[1].split('/')[-1]}: {d['gpu']} driver {d['driver']} phase {d['phase']}: "
      f"{d['passed']} passed, {d['failed']} failed, {d['skipped']} skipped")
for t in d["tests"]:
    print(f"  {t['status']:4} {t['name']:34} {t['ms']:9.1f} ms  {t['detail'][:150]}")
PY
done
exit $overall

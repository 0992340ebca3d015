#!/usr/bin/env bash
# make bench-phases (device): the same tests at every CUDA layer, so the gain of each layer is one
# figure (results/plot.py). In one call: builds PHASE=7b, 7c, 7d, 7e, 8a and 8b (each of the last
# two once its directory has sources) side by side ($BD-<phase>), synthesizes the two benchmark models once (qwen2.5-0.5b
# Q4_0 and qwen2.5-7b Q4_K_M, the files gates/device.sh makes), runs `minfer bench` pp512, pp2048
# and tg128 on both models at each phase, and the CPU backend (the top binary, --backend cpu)
# within a minute per model.
# Each test is its own `minfer bench` call, so every finished test has appended its JSON line
# to $JSON and printed its row, whatever happens to the next one.
#
# What keeps it short (measured on the 16-core H200 host: ~5.5 minutes in all; results/README.md):
# - the top phase is built first with -j$JOBS; a lower phase's build dir is seeded from it (cp -a,
#   dependency files repointed), so `make PHASE=7b BUILD=$BD-7b $BD-7b/minfer` only regenerates
#   the phase list and relinks (objects do not depend on PHASE); an existing dir is updated by make.
# - PHASE=7b copies every weight host -> device on each forward (no resident weights before 7c):
#   its runs use -r 1 (its 7B tg128 is still the longest test, ~2.5 minutes with the warm-up).
#   TG_SLOW=16 shortens 7b's decode on model files over 1 GiB to tg16 (the per-token cost is that
#   copy, the same at any length; the record then says tg16 and the plot labels the bar).
# - the CPU backend gets CPU_TIMEOUT seconds per model for all its tests; a test that does not fit
#   is left out (the plot says "not measured" in its place).
# - order: the top phase (8b, 8a or 7e) down to 7c, the CPU, then 7b (over half the time), so a caller's
#   time cap loses 7b first.
#
#   usage: tools/bench_phases.sh [BD]          (default BD /tmp/minfer-phases -> /tmp/minfer-phases-7b ...)
#   env:   BENCH_JSON   output (default $OUT/bench-phases.jsonl when OUT is set, else results/bench-phases.jsonl)
#          PHASES       "7b 7c 7d 7e [8a [8b]]"     MODELS  colon list (default the two synthetic models)
#          TESTS        "pp512 pp2048 tg128"   REPS    3 (7b: 1)      JOBS   16
#          CPU_MODELS   colon list or "none" (default: MODELS)   CPU_TIMEOUT 60 (per model)
#          TEST_TIMEOUT 240 (one bench call)   TG_SLOW (unset)         CUDA_ARCH sm_90
#   device tool: MINFER_COMMIT=<sha> bash tools/bench_phases.sh      (timeout_s 600)
#   then:        .venv/bin/python results/plot.py <files_at>/bench-phases.jsonl
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s)
say() { echo "[bench-phases +$(( $(date +%s) - t0 ))s] $*"; }
. tools/bench_models.sh
BD=${1:-${BD:-/tmp/minfer-phases}}
if [ -n "${BENCH_JSON:-}" ]; then JSON=$BENCH_JSON
elif [ -n "${OUT:-}" ]; then JSON=$OUT/bench-phases.jsonl
else JSON=results/bench-phases.jsonl; fi
# default: every CUDA layer whose directory has sources (8a's phase8a_decode/, 8b's phase8b_batch/)
if [ -z "${PHASES:-}" ]; then
    PHASES="7b 7c 7d 7e"
    for pd in 8a:phase8a_decode 8b:phase8b_batch; do
        { compgen -G "${pd#*:}/*.c" || compgen -G "${pd#*:}/*.cu"; } >/dev/null && PHASES="$PHASES ${pd%%:*}"
    done
fi
TESTS=${TESTS:-pp512 pp2048 tg128}
REPS=${REPS:-3}
JOBS=${JOBS:-16}
CPU_TIMEOUT=${CPU_TIMEOUT:-60}
TEST_TIMEOUT=${TEST_TIMEOUT:-240}
TG_SLOW=${TG_SLOW:-}
ARCH=${CUDA_ARCH:-sm_90}
LOGD=$(mktemp -d /tmp/minfer-bench-phases-XXXXXX)
mkdir -p "$(dirname "$JSON")"
read -r -a plist <<<"$PHASES"
top=${plist[${#plist[@]}-1]}

# ---- builds: the top phase first (full -j), the lower ones seeded from it ----
build() {   # phase
    local p=$1 dir=$BD-$1 seed=$BD-$top
    if [ ! -d "$dir" ] && [ "$p" != "$top" ] && [ -d "$seed" ]; then
        cp -a "$seed" "$dir"
        # the copied dependency files name the seed's targets: repoint them, or a later header
        # change would not rebuild this dir's objects
        find "$dir" -name '*.d' -exec sed -i "s#$seed/#$dir/#g" {} +
    fi
    if ! make --no-print-directory PHASE="$p" BUILD="$dir" CUDA_ARCH="$ARCH" -j"$JOBS" "$dir/minfer" \
        >"$LOGD/build-$p.log" 2>&1; then
        say "build of PHASE=$p failed ($LOGD/build-$p.log):"
        grep -E 'error|Error' "$LOGD/build-$p.log" | head -20
        return 1
    fi
    say "built PHASE=$p ($dir/minfer)"
}
build "$top" || exit 1
for p in "${plist[@]}"; do [ "$p" = "$top" ] || build "$p" || exit 1; done
TOP=$BD-$top/minfer

# ---- models: synthesized once (or the copies the gates left in /tmp) ----
if [ -z "${MODELS:-}" ]; then bench_models "$TOP" || exit 1; fi
IFS=: read -r -a mlist <<<"$MODELS"
CPU_MODELS=${CPU_MODELS:-$MODELS}
say "models: ${mlist[*]}; output $JSON"

# ---- one bench call per test: prints its row, appends its JSON line ----
rc=0
bench_one() {   # label binary model backend test reps [timeout]
    local label=$1 bin=$2 m=$3 be=$4 t=$5 r=$6 to=${7:-$TEST_TIMEOUT} n args log
    n=${t#??}
    case $t in pp*) args=(-p "$n" -n 0) ;; tg*) args=(-p 0 -n "$n") ;; *) say "unknown test $t"; return 1 ;; esac
    log=$LOGD/bench-$label-$(basename "$m" .gguf)-$t.log
    if timeout "$to" "$bin" bench -m "$m" --backend "$be" "${args[@]}" -r "$r" --json "$JSON" >"$log" 2>&1; then
        grep -E '^\| ' "$log" | grep -vE '^\| (model|---) ' | sed "s/^/[$label] /"
    else
        local e=$?
        say "$label $(basename "$m") $t: failed (rc $e; 124: over its ${to}s):"
        tail -3 "$log"
        rc=1
    fi
}
big() { [ "$(stat -c %s "$1")" -gt $((1 << 30)) ]; }

run_phase() {   # phase
    local p=$1 m t r tt
    for m in "${mlist[@]}"; do
        for t in $TESTS; do
            r=$REPS tt=$t
            if [ "$p" = 7b ]; then
                r=1
                [ -n "$TG_SLOW" ] && case $t in tg*) big "$m" && tt=tg$TG_SLOW ;; esac
            fi
            bench_one "$p" "$BD-$p/minfer" "$m" cuda "$tt" "$r"
        done
    done
    say "PHASE=$p done"
}
run_cpu() {
    local m t start left
    [ "$CPU_MODELS" != none ] || return 0
    IFS=: read -r -a clist <<<"$CPU_MODELS"
    for m in "${clist[@]}"; do
        start=$(date +%s)
        for t in $TESTS; do
            left=$(( CPU_TIMEOUT - ($(date +%s) - start) ))
            if [ "$left" -le 0 ]; then say "cpu $(basename "$m"): over ${CPU_TIMEOUT}s, $t left out"; continue; fi
            bench_one cpu "$TOP" "$m" cpu "$t" 1 "$left"
        done
    done
}
# cheapest and most wanted first, the slow 7b last: a caller's time cap (gates/device.sh runs
# this under `timeout`) then loses the fewest rows
for (( i = ${#plist[@]} - 1; i >= 0; i-- )); do [ "${plist[i]}" = 7b ] || run_phase "${plist[i]}"; done
run_cpu
for p in "${plist[@]}"; do [ "$p" = 7b ] && run_phase 7b; done

# ---- summary: the last record per model, test and phase (standard-library Python) ----
PY=${MINFER_PYTHON:-}
[ -n "$PY" ] || { [ -x .venv/bin/python ] && PY=.venv/bin/python || PY=python3; }
"$PY" - "$JSON" $PHASES <<'PY' || true
import json, sys
path, phases = sys.argv[1], ["cpu"] + sys.argv[2:]
last = {}
for line in open(path):
    if line.strip():
        r = json.loads(line)
        ph = "cpu" if r.get("backend") == "cpu" else r.get("phase")
        last[(r.get("model"), r.get("test"), ph)] = r
print("| model | test | " + " | ".join(phases) + " |")
print("| --- | --- |" + " ---: |" * len(phases))
for m in sorted({k[0] for k in last}):
    for t in sorted({k[1] for k in last if k[0] == m}):
        cells = [last.get((m, t, p), {}).get("tok_s") for p in phases]
        print(f"| {m} | {t} | " + " | ".join(f"{v:,.1f}" if v else "-" for v in cells) + " |")
PY
say "done in $(( $(date +%s) - t0 ))s; records appended to $JSON (logs: $LOGD)"
exit $rc

#!/usr/bin/env bash
# make bench-phases (device): builds PHASE=7b, 7c, 7d, 7e side by side (BD-<phase>, the dirs
# make gate-<phase> and gates/device.sh use; an existing build is reused) and runs
# `minfer bench` of each on the same models, so the gain of every layer is one table.
# 7b copies every weight host -> device each forward (no resident weights until 7c), so
# its decode is measured over 8 tokens and one rep only (~0.6 s/token on the 7B).
#   usage: tools/bench_phases.sh [BD]      env: BENCH_JSON (default results/bench-phases.jsonl),
#          MODELS (colon list; default synthetic qwen2.5-0.5b q4_0 and qwen2.5-7b q4_k_m),
#          PP (512), TG (64), REPS (2), JOBS (make -j, 2)
set -u
cd "$(dirname "$0")/.."
. tools/bench_models.sh
BD=${1:-${BD:-build}}
PY=$(bench_python) || exit 1
JSON=${BENCH_JSON:-results/bench-phases.jsonl}
PP=${PP:-512}
TG=${TG:-64}
REPS=${REPS:-2}
JOBS=${JOBS:-2}
say() { echo "[bench-phases $(date -u +%H:%M:%S)] $*"; }
mkdir -p "$(dirname "$JSON")"
for p in 7b 7c 7d 7e; do
    if [ ! -x "$BD-$p/minfer" ]; then
        say "building PHASE=$p into $BD-$p"
        make --no-print-directory PHASE=$p BUILD="$BD-$p" -j"$JOBS" all >"/tmp/minfer-bench-phases-build-$p.log" 2>&1 ||
            { say "build of PHASE=$p failed (/tmp/minfer-bench-phases-build-$p.log)"; exit 1; }
    fi
done
TOP=$BD-7e/minfer
if [ -z "${MODELS:-}" ]; then bench_models "$TOP" || exit 1; fi
rc=0
IFS=: read -r -a mlist <<<"$MODELS"
for m in "${mlist[@]}"; do
    for p in 7b 7c 7d 7e; do
        if [ "$p" = 7b ]; then args=(-p "$PP" -n 8 -r 1); else args=(-p "$PP" -n "$TG" -r "$REPS"); fi
        say "PHASE=$p $(basename "$m"): minfer bench ${args[*]}"
        log=/tmp/minfer-bench-phases-$p.log
        if ! "$BD-$p/minfer" bench -m "$m" --backend cuda "${args[@]}" --json "$JSON" >"$log" 2>&1; then
            say "PHASE=$p $(basename "$m") failed:"
            tail -3 "$log"
            rc=1
        fi
        grep -E '^\| ' "$log" | grep -vE '^\| (model|---) '
    done
done
"$PY" - "$JSON" <<'PY'
import json, sys, collections
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
last = collections.OrderedDict()
for r in recs:
    if r.get("backend") == "cuda":
        last[(r["model"], r["test"], r["phase"])] = r
models = sorted({k[0] for k in last})
print("| model | test | 7b | 7c | 7d | 7e | 7e / 7b |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for m in models:
    for t in sorted({k[1] for k in last if k[0] == m}):
        v = [last.get((m, t, p), {}).get("tok_s") for p in ("7b", "7c", "7d", "7e")]
        ratio = f"{v[3] / v[0]:.1f}x" if v[0] and v[3] else "-"
        print(f"| {m} | {t} | " + " | ".join(f"{x:,.1f}" if x else "-" for x in v) + f" | {ratio} |")
PY
say "records appended to $JSON"
exit $rc

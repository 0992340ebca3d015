#!/usr/bin/env bash
# 8a's gate and the A/B of some items in one device call, the shortest evidence for items written
# since the last device run (the device tool; 30 minutes of device time a session):
#   MINFER_COMMIT=<sha> ITEMS=d12,d13 bash tools/check_8a.sh OUT
# builds PHASE=8b for sm_90 into $BUILD (default /tmp/minfer-check-8a), synthesizes the gate's tiny
# models and the 0.5B and 7B, then writes to OUT:
#   gate-8a-<commit>.json                 gate_8a (every case; the 7B's with the model)
#   bench-8a-items-<commit>.jsonl          bench_7e --only ITEMS -p 512 -n 128 -r 5, both models
#   ncu-step-<model>-<commit>.txt          with NCU=1: 16 decode steps under Nsight Compute (graphs
#                                          off, clocks and caches left alone), summed per kernel
#   trace-<model>-<commit>.txt             with TRACE=1: 32 decode steps as the GPU ran them (graphs
#                                          on; gates/8a/bench_trace, where CUPTI is found)
#   bench-8a-depth-items-<commit>.jsonl    with DEPTHS=4096,32768: tg128 of the 7B at those depths
#                                          with all on and each of ITEMS off, alternated twice
#                                          (items that act only at depth: d4, d21, d22, d32-d35)
# and prints each part's summary as it finishes. MINFER_COMMIT names the tree (the device's copy
# of the working tree may carry another commit's git metadata).
set -u
cd "$(dirname "$0")/.."
say() { echo "[check-8a $(date -u +%H:%M:%S)] $*"; }
. tools/bench_models.sh
OUT=${1:?usage: MINFER_COMMIT=<sha> ITEMS=d12,d13 tools/check_8a.sh OUT}
BUILD=${BUILD:-/tmp/minfer-check-8a}
C=${MINFER_COMMIT:?set MINFER_COMMIT to the commit of the tree}
ITEMS=${ITEMS:?set ITEMS (comma list of 8a items)}
export MINFER_PYTHON=${MINFER_PYTHON:-python3}
mkdir -p "$OUT"
t0=$(date +%s)
if ! make --no-print-directory PHASE=8b BUILD="$BUILD" CUDA_ARCH=sm_90 -j"${JOBS:-16}" "$BUILD/minfer" \
        "$BUILD/gates/8a/gate_8a" "$BUILD/gates/7e/bench_7e" >"$BUILD.log" 2>&1; then
    grep -E 'error' "$BUILD.log" | head -20
    exit 1
fi
say "built in $(($(date +%s) - t0)) s"
MINFER=$BUILD/minfer
tiny=""
for s in "tiny-qwen2 q4_0" "tiny-llama q8_0" "tiny-qwen3 q4_k_m"; do
    set -- $s
    f=/tmp/minfer-check-$1-$2.gguf
    [ -f "$f" ] || "$MINFER" synth --shape "$1" --type "$2" -o "$f" >/dev/null || { say "synth $1 $2 failed"; exit 1; }
    tiny="$tiny$f:"
done
M5=$(bench_model "$MINFER" qwen2.5-0.5b q4_0) && M7=$(bench_model "$MINFER" qwen2.5-7b q4_k_m) || exit 1
say "models ready in $(($(date +%s) - t0)) s"
rc=0
MINFER_GATE_MODELS="$tiny$M5" MINFER_GATE_JSON="$OUT/gate-8a-$C.json" MINFER_GATE_TIMEOUT=300 \
    timeout 400 "$BUILD/gates/8a/gate_8a" >"$BUILD-gate.log" 2>&1 || rc=1
grep -E '^FAIL' "$BUILD-gate.log" | head -20
say "gate_8a: $(tail -1 "$BUILD-gate.log") ($(($(date +%s) - t0)) s)"
"$BUILD/gates/7e/bench_7e" --only "$ITEMS" -p 512 -n 128 -r 5 --json "$OUT/bench-8a-items-$C.jsonl" "$M7" "$M5" 2>&1 |
    grep -E '^\|' || rc=1
say "items $ITEMS measured ($(($(date +%s) - t0)) s)"
if [ -n "${DEPTHS:-}" ]; then
    for round in 1 2; do
        for off in none ${ITEMS//,/ }; do
            MINFER_PERF_OFF=$off "$MINFER" bench -m "$M7" -p 0 -n 128 -d "$DEPTHS" -r 3 \
                --json "$OUT/bench-8a-depth-items-$C.jsonl" 2>&1 | grep -E '^\| .*tg128' | sed "s/^/$off off, round $round: /"
        done
    done
    say "depths $DEPTHS measured ($(($(date +%s) - t0)) s)"
fi
if [ -n "${NCU:-}" ]; then
    for m in "$M5" "$M7"; do
        k=$("$MINFER" bench -m "$m" -p 0 -n 8 -r 1 2>&1 | sed -n 's/.*tg8: \([0-9]*\) kernels per decode step.*/\1/p' | head -1)
        [ -n "$k" ] || { say "no kernel count for $(basename "$m")"; continue; }
        csv=$BUILD-ncu.csv
        # skip the load, the prompt and the first steps; then exactly 16 steps of k kernels
        MINFER_NO_CUDA_GRAPH=1 timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
            --csv --launch-skip $((8 * k)) --launch-count $((16 * k)) "$MINFER" bench -m "$m" -p 0 -n 32 -r 1 >"$csv" 2>/dev/null
        name=$(basename "$m" .gguf)
        "$MINFER_PYTHON" tools/ncu_step_sum.py "$csv" get_rows >"$OUT/ncu-step-${name#minfer-7b-}-$C.txt" 2>&1
        head -14 "$OUT/ncu-step-${name#minfer-7b-}-$C.txt"
    done
    say "ncu done ($(($(date +%s) - t0)) s)"
fi
if [ -n "${TRACE:-}" ]; then
    if make --no-print-directory PHASE=8b BUILD="$BUILD" CUDA_ARCH=sm_90 "$BUILD/gates/8a/bench_trace" >>"$BUILD.log" 2>&1; then
        for m in "$M5" "$M7"; do
            name=$(basename "$m" .gguf)
            timeout 120 "$BUILD/gates/8a/bench_trace" "$m" -p 32 -n 32 >"$OUT/trace-${name#minfer-7e-}-$C.txt" 2>&1
            head -30 "$OUT/trace-${name#minfer-7e-}-$C.txt"
        done
    else
        say "bench_trace not built (no CUPTI found by the Makefile)"
    fi
    say "trace done ($(($(date +%s) - t0)) s)"
fi
exit $rc

#!/usr/bin/env bash
# 8a's evidence in one device call, on one build (PHASE=8a): every 8a item off vs on
# (gates/7e/bench_7e --only: A B A B in one process), the session's graph reuse off vs on
# (MINFER_NO_GRAPH_REUSE=1, alternating processes), decode at depth, and greedy `minfer run`
# (the path that returns token ids). Records append to OUT/bench-8a-*.jsonl; tables to stdout.
#   usage: tools/bench_8a.sh BUILD [OUT]     env: ITEMS (the declared 8a items, e.g. d1,d2),
#          DEPTHS (0,4096,32768), ROUNDS (3), TG (128)
set -u
cd "$(dirname "$0")/.."
say() { echo "[bench-8a $(date -u +%H:%M:%S)] $*"; }
. tools/bench_models.sh
BUILD=${1:?usage: tools/bench_8a.sh BUILD [OUT]}
OUT=${2:-results}
MINFER=$BUILD/minfer
ITEMS=${ITEMS:-d1,d2}
TG=${TG:-128}
mkdir -p "$OUT"
[ -x "$MINFER" ] && [ -x "$BUILD/gates/7e/bench_7e" ] || { say "$BUILD lacks minfer or bench_7e: build PHASE=8a first"; exit 1; }
M5=$(bench_model "$MINFER" qwen2.5-0.5b q4_0) && M7=$(bench_model "$MINFER" qwen2.5-7b q4_k_m) || exit 1
rc=0
say "items $ITEMS off vs on (bench_7e --only)"
"$BUILD/gates/7e/bench_7e" --only "$ITEMS" -p 512 -n "$TG" -r 5 --json "$OUT/bench-8a-items.jsonl" "$M7" "$M5" || rc=1
say "graph reuse off vs on, ${ROUNDS:-3} rounds"
for r in $(seq 1 "${ROUNDS:-3}"); do
    for m in "$M5" "$M7"; do
        MINFER_NO_GRAPH_REUSE=1 "$MINFER" bench -m "$m" -p 0 -n "$TG" -r 3 --json "$OUT/bench-8a-reuse.jsonl" | grep -E '^\| .*tg' | sed 's/^/reuse off  /'
        "$MINFER" bench -m "$m" -p 0 -n "$TG" -r 3 --json "$OUT/bench-8a-reuse.jsonl" | grep -E '^\| .*tg' | sed 's/^/reuse on   /'
    done
done
say "depth ${DEPTHS:-0,4096,32768} on the 7B"
"$MINFER" bench -m "$M7" -p 0 -n "$TG" -d "${DEPTHS:-0,4096,32768}" -r 2 --json "$OUT/bench-8a-depth.jsonl" | grep -E '^\|' || rc=1
say "greedy minfer run (token ids back), 0.5B and 7B"
ids=$(seq -s, 11 42)
for m in "$M5" "$M7"; do
    "$MINFER" run -m "$m" --tokens "$ids" -n "$TG" --ignore-eos 2>/dev/null | tail -1 | sed "s|^|$(basename "$m"): |"
done
exit $rc

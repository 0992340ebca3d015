#!/usr/bin/env bash
# 8a's evidence in one device call, on one build (PHASE=8a): every 8a item off vs on
# (gates/7e/bench_7e --only: A B A B in one process), the session's graph reuse off vs on
# (MINFER_NO_GRAPH_REUSE=1, alternating processes), decode at depth on both models (split-KV in
# a 32k and a 4k context, and 7d's kernel in the 4k one), greedy `minfer run` (the path that
# returns token ids), and the one-token matmul ladder (bench_roofline). Records append to
# OUT/bench-8a-*.jsonl and OUT/roofline.jsonl; tables to stdout.
#   usage: tools/bench_8a.sh BUILD [OUT]     env: ITEMS (the declared 8a items, e.g. d1,d2),
#          DEPTHS (0,4096,32768), ROUNDS (3), TG (128), NO_LADDER=1
set -u
cd "$(dirname "$0")/.."
say() { echo "[bench-8a $(date -u +%H:%M:%S)] $*"; }
. tools/bench_models.sh
BUILD=${1:?usage: tools/bench_8a.sh BUILD [OUT]}
OUT=${2:-results}
MINFER=$BUILD/minfer
ITEMS=${ITEMS:-d1,d2,d3,d4,d6,d7,d8,d10}
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
D=${DEPTHS:-0,4096,32768}
say "depth $D: split-KV in the context the deepest test needs; ${D%,*} in that and in 7d's kernel"
for m in "$M7" "$M5"; do
    "$MINFER" bench -m "$m" -p 0 -n "$TG" -d "$D" -r 2 --json "$OUT/bench-8a-depth.jsonl" | grep -E '^\| .*tg' | sed 's/^/split-KV  /' || rc=1
    "$MINFER" bench -m "$m" -p 0 -n "$TG" -d "${D%,*}" -r 2 --json "$OUT/bench-8a-depth.jsonl" | grep -E '^\| .*tg' | sed 's/^/split-KV  /'
    MINFER_PERF_OFF=d4 "$MINFER" bench -m "$m" -p 0 -n "$TG" -d "${D%,*}" -r 2 --json "$OUT/bench-8a-depth.jsonl" | grep -E '^\| .*tg' | sed 's/^/7d kernel /'
done
say "greedy minfer run (token ids back), 0.5B and 7B"
ids=$(seq -s, 11 42)
for m in "$M5" "$M7"; do
    "$MINFER" run -m "$m" --tokens "$ids" -n "$TG" --ignore-eos 2>/dev/null | tail -1 | sed "s|^|$(basename "$m"): |"
done
if [ -z "${NO_LADDER:-}" ]; then
    say "the one-token matmul ladder (bench_roofline)"
    "$BUILD/gates/7e/bench_roofline" --json "$OUT/roofline.jsonl" | grep -E '^\|' || rc=1
fi
exit $rc

#!/usr/bin/env bash
# 8b's item A/B in one device call: `minfer bench --batch` with every item on, then each item of
# ITEMS off (MINFER_PERF_OFF), in turn, for ROUNDS rounds (A B C A B C ...), on the synthetic
# qwen2.5-0.5b Q4_0 and qwen2.5-7b Q4_K_M; one JSON line a row (its `switches` field names what
# was off) appends to OUT/bench-8b-items.jsonl. Rows print as they finish, prefixed by what was off.
# Set MINFER_COMMIT to the tree's commit where the checkout's git may be stale (a device copy).
#   usage: tools/bench_8b_items.sh BUILD ITEMS [OUT]     (ITEMS: b27,b28 ...; OUT default
#          $MINFER_BENCH_DIR, else results/)   env: BATCH (1,4,64), PP (512), TG (64), ROUNDS (2),
#          MODELS (colon list; default the two synthetic models), BACKEND (cuda), BENCH_TIMEOUT (120)
set -u
cd "$(dirname "$0")/.."
say() { echo "[bench-8b-items $(date -u +%H:%M:%S)] $*"; }
. tools/bench_models.sh
BUILD=${1:?usage: tools/bench_8b_items.sh BUILD ITEMS [OUT]}
ITEMS=${2:?usage: tools/bench_8b_items.sh BUILD ITEMS [OUT]}
OUT=${3:-${MINFER_BENCH_DIR:-results}}
MINFER=$BUILD/minfer
[ -x "$MINFER" ] || { say "$MINFER missing: build PHASE=8b first"; exit 1; }
mkdir -p "$OUT"
JSON=$OUT/bench-8b-items.jsonl
if [ -z "${MODELS:-}" ]; then bench_models "$MINFER" || exit 1; fi
IFS=: read -r -a mlist <<<"$MODELS"
IFS=, read -r -a ilist <<<"$ITEMS"
rc=0
for ((round = 1; round <= ${ROUNDS:-2}; round++)); do
    for m in "${mlist[@]}"; do
        for off in none "${ilist[@]}"; do
            o=$off; [ "$off" = none ] && o=
            MINFER_PERF_OFF=$o timeout "${BENCH_TIMEOUT:-120}" "$MINFER" bench -m "$m" --batch "${BATCH:-1,4,64}" \
                -p "${PP:-512}" -n "${TG:-64}" --backend "${BACKEND:-cuda}" --json "$JSON" 2>&1 |
                grep --line-buffered -E '^\| +[0-9]|minfer:' | sed -u "s|^|$(basename "$m") off=$off |"
            e=${PIPESTATUS[0]}
            [ "$e" -eq 0 ] || { say "$(basename "$m") off=$off: rc $e (124: over ${BENCH_TIMEOUT:-120} s)"; rc=1; }
        done
    done
    say "round $round done"
done
say "records: $JSON ($(wc -l <"$JSON" 2>/dev/null || echo 0) lines)"
exit $rc

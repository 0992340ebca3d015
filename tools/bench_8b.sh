#!/usr/bin/env bash
# 8b's evidence in one device call: llama-batched-bench's table for the batched steps of phase 8b
# (`minfer bench --batch`: B sequences, PP prompt tokens each in batched steps of --ubatch tokens,
# then TG steps of one token a sequence) on the synthetic qwen2.5-0.5b Q4_0 and qwen2.5-7b Q4_K_M,
# the KV pool and every step on the device. Rows print as each B ends; one JSON line a row (S_PP,
# S_TG, the KV pool's size, the peak device memory) appends to OUT/bench-8b-batched.jsonl.
# Budget: about 3 minutes after the build (the 7B's B = 64 row is the longest: 32k prompt tokens).
#   usage: tools/bench_8b.sh BUILD [OUT]     (OUT default $MINFER_BENCH_DIR, else results/)   env: BATCH (1,4,16,32,64), PP (512), TG (128),
#          MODELS (colon list; default the two synthetic models), BENCH_TIMEOUT (240 a model)
set -u
cd "$(dirname "$0")/.."
say() { echo "[bench-8b $(date -u +%H:%M:%S)] $*"; }
. tools/bench_models.sh
BUILD=${1:?usage: tools/bench_8b.sh BUILD [OUT]}
OUT=${2:-${MINFER_BENCH_DIR:-results}}
MINFER=$BUILD/minfer
mkdir -p "$OUT"
JSON=$OUT/bench-8b-batched.jsonl
[ -x "$MINFER" ] || { say "$MINFER missing: build PHASE=8b first"; exit 1; }
if [ -z "${MODELS:-}" ]; then bench_models "$MINFER" || exit 1; fi
IFS=: read -r -a mlist <<<"$MODELS"
rc=0
for m in "${mlist[@]}"; do
    say "$(basename "$m"): --batch ${BATCH:-1,4,16,32,64} -p ${PP:-512} -n ${TG:-128} --backend cuda"
    timeout "${BENCH_TIMEOUT:-240}" "$MINFER" bench -m "$m" --batch "${BATCH:-1,4,16,32,64}" -p "${PP:-512}" \
        -n "${TG:-128}" --backend cuda --json "$JSON" 2>&1 | grep --line-buffered -E '^\||^  B = |minfer:'
    e=${PIPESTATUS[0]}
    [ "$e" -eq 0 ] || { say "$(basename "$m"): rc $e (124: over ${BENCH_TIMEOUT:-240} s)"; rc=1; }
done
say "records: $JSON ($(wc -l <"$JSON" 2>/dev/null || echo 0) lines)"
exit $rc

#!/usr/bin/env bash
# make bench-7e (device): every switch item on vs off and MINFER_NO_CUDA_GRAPH on vs off, in one
# run per model (gates/7e/bench_7e: A B A B ..., medians, ratio off/on), for the 0.5B and
# 7B shapes (synthetic qwen2.5-0.5b Q4_0, qwen2.5-7b Q4_K_M).
#   usage: tools/bench_7e.sh [BUILD]      env: BENCH_JSON (default results/bench-7e.jsonl),
#          MODELS (colon list), PP (512), TG (64), REPS (3)
set -u
cd "$(dirname "$0")/.."
. tools/bench_models.sh
BUILD=${1:-${BUILD:-build}}
B7E=$BUILD/gates/7e/bench_7e
JSON=${BENCH_JSON:-results/bench-7e.jsonl}
say() { echo "[bench-7e $(date -u +%H:%M:%S)] $*"; }
[ -x "$B7E" ] || { say "$B7E missing: build PHASE=7e first (make BUILD=$BUILD)"; exit 1; }
mkdir -p "$(dirname "$JSON")"
if [ -z "${MODELS:-}" ]; then bench_models "$BUILD/minfer" || exit 1; fi
IFS=: read -r -a mlist <<<"$MODELS"
say "bench_7e -p ${PP:-512} -n ${TG:-64} -r ${REPS:-3} on ${mlist[*]}"
"$B7E" -p "${PP:-512}" -n "${TG:-64}" -r "${REPS:-3}" --json "$JSON" "${mlist[@]}"
rc=$?
say "records appended to $JSON (rc $rc)"
exit $rc

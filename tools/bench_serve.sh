#!/usr/bin/env bash
# `minfer serve` under load on the device: the 7B synthetic Q4_K_M on CUDA with --parallel 64, then
# tools/load_serve.py (the official openai client, from the wheels in .carry/serve-wheels) with
# 64 concurrent streaming clients for 512 requests; the summary (requests/s, tokens/s, TTFT and
# inter-token latency p50/p99, failures) to OUT/serve-load.json. The GPU machine has no network:
# carry .carry/serve-wheels (tools/fetch_serve_deps.sh) and, where the image lacks the headers,
# .carry/serve-debs for the build.
#   usage: tools/bench_serve.sh BUILD [OUT]   env: CLIENTS (64), REQUESTS (512), MAX_TOKENS (128),
#          PARALLEL (64), CTX (1024), PORT (8090), MODEL (default: the synthetic 7B), BACKEND (cuda),
#          TEMPERATURE (0: greedy; above 0 the requests sample with the server's top-k 40, top-p
#          0.95, min-p 0.05), SUMMARY (serve-load.json)
set -u
cd "$(dirname "$0")/.."
say() { echo "[bench-serve $(date -u +%H:%M:%S)] $*"; }
. tools/bench_models.sh
BUILD=${1:?usage: tools/bench_serve.sh BUILD [OUT]}
OUT=${2:-results}
MINFER=$BUILD/minfer
mkdir -p "$OUT"
"$MINFER" serve --help >/dev/null 2>&1 || { say "$MINFER has no serve (libmicrohttpd/jansson missing at build)"; exit 1; }
M=${MODEL:-$(bench_model "$MINFER" qwen2.5-7b q4_k_m)} || exit 1
# the client's venv, made by the interpreter the device scripts use (MINFER_PYTHON, as gates/device.sh)
PY=${MINFER_PYTHON:-.venv/bin/python}
VENV=${SERVE_VENV:-/tmp/serve-venv}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import openai" 2>/dev/null; then
    "$PY" -m venv "$VENV" && "$VENV/bin/pip" install -q --no-index --find-links .carry/serve-wheels openai \
        || { say "openai client: install from .carry/serve-wheels failed (python $("$PY" -V 2>&1))"; exit 1; }
fi
PORT=${PORT:-8090}
LOG=$OUT/serve-server.log
"$MINFER" serve -m "$M" --backend "${BACKEND:-cuda}" --parallel "${PARALLEL:-64}" -c "${CTX:-1024}" --queue 1024 --port "$PORT" \
    --metrics >"$LOG" 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null; wait $SRV 2>/dev/null' EXIT
for i in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    kill -0 $SRV 2>/dev/null || { say "server exited:"; tail -5 "$LOG"; exit 1; }
    sleep 0.5
done
say "serving $(basename "$M"); ${CLIENTS:-64} clients, ${REQUESTS:-512} requests, max_tokens ${MAX_TOKENS:-128}, temperature ${TEMPERATURE:-0}"
"$VENV/bin/python" tools/load_serve.py --url "http://127.0.0.1:$PORT/v1" -c "${CLIENTS:-64}" -n "${REQUESTS:-512}" \
    --max-tokens "${MAX_TOKENS:-128}" --temperature "${TEMPERATURE:-0}" --json "$OUT/${SUMMARY:-serve-load.json}"
rc=$?
curl -s "http://127.0.0.1:$PORT/metrics" | grep -v '^#' | head -20
exit $rc

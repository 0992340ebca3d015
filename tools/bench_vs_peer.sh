#!/usr/bin/env bash
# minfer and llama.cpp on the same files in one call: `minfer bench` then llama-bench
# (tools/bench_peer.sh) on the synthetic 0.5B Q4_0 and 7B Q4_K_M, the same tests and depths;
# every minfer record gets the peer's number beside it ("peer_tok_s", "vs_peer") and both
# engines' records go to OUT. Prints the side-by-side table.
#   usage: tools/bench_vs_peer.sh MINFER_BUILD [OUT.jsonl]   (default $BENCH_JSON, else results/bench-vs-peer.jsonl)
#   env: PP (512,2048), TG (128), DEPTHS (0), REPS (3), BACKEND (cuda), THREADS (CPU threads, both engines),
#        PEER_BUILD (/tmp/peer-build: built here
#        when missing; needs .carry/peer from `tools/bench_peer.sh fetch`), MODELS (colon list)
set -u
cd "$(dirname "$0")/.."
. tools/bench_models.sh
say() { echo "[bench-vs-peer $(date -u +%H:%M:%S)] $*"; }
BUILD=${1:?usage: tools/bench_vs_peer.sh MINFER_BUILD [OUT.jsonl]}
OUTF=${2:-${BENCH_JSON:-results/bench-vs-peer.jsonl}}
PY=$(bench_python) || exit 1
PB=${PEER_BUILD:-/tmp/peer-build}
PP=${PP:-512,2048} TG=${TG:-128} DEPTHS=${DEPTHS:-0} REPS=${REPS:-3} BACKEND=${BACKEND:-cuda}
thr=()
[ -n "${THREADS:-}" ] && thr=(-t "$THREADS")
[ -x "$BUILD/minfer" ] || { say "$BUILD/minfer missing"; exit 1; }
if [ ! -x "$PB/bin/llama-bench" ]; then
    bash tools/bench_peer.sh build "$PB" || exit 1
fi
if [ -z "${MODELS:-}" ]; then bench_models "$BUILD/minfer" || exit 1; fi
IFS=: read -r -a mlist <<<"$MODELS"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$OUTF")"
rc=0
for m in "${mlist[@]}"; do
    say "minfer: $(basename "$m") -p $PP -n $TG -d $DEPTHS"
    "$BUILD/minfer" bench -m "$m" --backend "$BACKEND" "${thr[@]}" -p "$PP" -n "$TG" -d "$DEPTHS" -r "$REPS" \
        --json "$tmp/minfer.jsonl" |
        grep -E '^\| .*(pp|tg)[0-9]' || rc=1
    say "llama.cpp: $(basename "$m")"
    bash tools/bench_peer.sh run "$PB" "$tmp/peer.jsonl" "$m" -p "$PP" -n "$TG" -d "$DEPTHS" -r "$REPS" "${thr[@]}" || rc=1
done
"$PY" - "$tmp/minfer.jsonl" "$tmp/peer.jsonl" "$OUTF" <<'PY'
import json, os, sys
mine = [json.loads(l) for l in open(sys.argv[1])] if os.path.exists(sys.argv[1]) else []
peer = [json.loads(l) for l in open(sys.argv[2])] if os.path.exists(sys.argv[2]) else []
key = lambda r: (r["model"], r["test"], int(r.get("depth", 0)))
by = {key(r): r for r in peer}
print("| model | test | minfer tok/s | llama.cpp tok/s | minfer / llama.cpp |")
print("| --- | --- | ---: | ---: | ---: |")
with open(sys.argv[3], "a") as f:
    for r in mine:
        p = by.get(key(r))
        if p:
            r["peer_tok_s"], r["peer_version"] = p["tok_s"], p.get("peer_version", "")
            r["vs_peer"] = round(r["tok_s"] / p["tok_s"], 4) if p["tok_s"] > 0 else None
        f.write(json.dumps(r) + "\n")
        d = " @ d%d" % r["depth"] if r.get("depth") else ""
        print("| %s | %s%s | %.1f | %s | %s |" % (r["model"], r["test"], d, r["tok_s"],
              "%.1f" % p["tok_s"] if p else "-", "x%.2f" % r["vs_peer"] if p and r.get("vs_peer") else "-"))
    for p in peer:
        f.write(json.dumps(p) + "\n")
PY
say "records appended to $OUTF (rc $rc)"
exit $rc

#!/usr/bin/env bash
# Before/after on one GPU, in one call: builds BASE (a source tree, e.g. `git archive REV |
# tar -x -C .carry/base`) and this tree, each at its own top phase (its Makefile's default
# PHASE: 7e, 8a or 8b, the top its tree has; AB_PHASE=7e builds both at that phase), then
# on the synthetic 0.5B Q4_0 and 7B Q4_K_M files runs `minfer bench` pp512, pp2048 and tg128 in
# ROUNDS alternating rounds (base, head, base, head, ...), and compares the decode logits of both
# builds byte for byte (greedy run, 16 prompt tokens + 32 generated, every row). Prints the
# medians and ratios.
#   usage: tools/bench_ab.sh BASE_DIR [ROUNDS]     env: OUT (results dir, default results/),
#          AB_LABELS="base head" (commit labels in the JSON), JOBS (make -j, default 16),
#          HEAD_BUILD (a top-phase build of this tree to use instead of building one), AB_PHASE
set -u
cd "$(dirname "$0")/.."
. tools/bench_models.sh
say() { echo "[bench-ab $(date -u +%H:%M:%S)] $*"; }
BASE=${1:?usage: tools/bench_ab.sh BASE_DIR [ROUNDS]}
ROUNDS=${2:-4}
OUTD=${OUT:-results}
read -r LB LH <<<"${AB_LABELS:-base head}"
JSON=$OUTD/bench-ab.jsonl
PY=$(bench_python) || exit 1
mkdir -p "$OUTD"
build() {   # src build-dir
    env -u PHASE make --no-print-directory -s -C "$1" ${AB_PHASE:+PHASE=$AB_PHASE} BUILD="$2" -j"${JOBS:-16}" "$2/minfer" >"$2.log" 2>&1 ||
        { say "build of $1 failed:"; grep -E 'error' "$2.log" | head; exit 1; }
}
build "$BASE" /tmp/ab-base
if [ -n "${HEAD_BUILD:-}" ]; then rm -rf /tmp/ab-head; ln -s "$HEAD_BUILD" /tmp/ab-head; else build . /tmp/ab-head; fi
say "built base ($LB) and head ($LH)"
bench_models /tmp/ab-head/minfer || exit 1
IFS=: read -r -a mlist <<<"$MODELS"
# logits: the same greedy run on both builds, compared byte for byte
toks=$(seq -s, 101 116)
for m in "${mlist[@]}"; do
    for b in base head; do
        /tmp/ab-$b/minfer run -m "$m" --backend cuda --tokens "$toks" -n 32 --ignore-eos \
            --dump-logits "/tmp/ab-$b-$(basename "$m").milg" >/dev/null 2>"/tmp/ab-$b-run.log" ||
            { say "run failed ($b, $m):"; tail -3 "/tmp/ab-$b-run.log"; }
    done
    "$PY" - "/tmp/ab-base-$(basename "$m").milg" "/tmp/ab-head-$(basename "$m").milg" "$(basename "$m")" <<'PY'
import struct, sys
a, b, name = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read(), sys.argv[3]
_, _, nv, nr = struct.unpack("<4sIII", a[:16])
if a == b:
    print(f"logits {name}: bit-identical, {nr} rows x {nv}")
else:
    fa = struct.unpack(f"<{(len(a) - 16) // 4}f", a[16:]); fb = struct.unpack(f"<{(len(b) - 16) // 4}f", b[16:])
    diffs = [i for i in range(min(len(fa), len(fb))) if struct.pack("<f", fa[i]) != struct.pack("<f", fb[i])]
    i = diffs[0] if diffs else -1
    print(f"logits {name}: DIFFER in {len(diffs)} of {len(fa)} values; first at row {i // nv} col {i % nv}: "
          f"base {fa[i]!r} head {fb[i]!r}" if diffs else f"logits {name}: sizes differ {len(a)} vs {len(b)}")
PY
done
for r in $(seq 1 "$ROUNDS"); do
    for b in base head; do
        lab=$LB; [ $b = head ] && lab=$LH
        for m in "${mlist[@]}"; do
            MINFER_COMMIT="$lab" /tmp/ab-$b/minfer bench -m "$m" --backend cuda -p 512,2048 -n 128 -r 3 \
                --json "$JSON" 2>/dev/null | grep -E '^\| .*(pp|tg)[0-9]' | sed "s/^/round $r $b /"
        done
    done
done
"$PY" - "$JSON" "$LB" "$LH" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
lb, lh = sys.argv[2], sys.argv[3]
by = {}
for r in rows:
    if r.get("commit") in (lb, lh) and not r.get("depth", 0):
        by.setdefault((r.get("model"), r.get("test"), r["commit"]), []).append(r["tok_s"])
print(f"| model | test | {lb} tok/s | {lh} tok/s | {lh}/{lb} |")
print("| --- | --- | ---: | ---: | ---: |")
for (m, t) in sorted({(k[0], k[1]) for k in by}):
    a, b = by.get((m, t, lb)), by.get((m, t, lh))
    if a and b:
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"| {m} | {t} | {ma:,.0f} ({len(a)}) | {mb:,.0f} ({len(b)}) | {mb / ma:.3f} |")
PY

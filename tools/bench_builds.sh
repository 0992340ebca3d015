#!/usr/bin/env bash
# A/B of build-time switches on the GPU (the device tool): the tree built as is and once more per
# define list, then tg128 of both synthetic models (`minfer bench -p 0 -n 128 -r 3`), every build in
# turn, ROUNDS times (default 2):
#   MINFER_COMMIT=<sha> bash tools/bench_builds.sh OUT "-DMI_PDL_TRIGGER=0" "-DMI_PDL_TRIGGER=2"
# Each variant builds PHASE=8b for sm_90 with NVDEFS=<its defines> into a folder of its own
# (/tmp/minfer-builds-N; the default build /tmp/minfer-builds-0). Records go to
# OUT/bench-builds-<commit>.jsonl, each labelled MINFER_BUILD_DEFS=<its defines, or "none">
# (an environment variable the bench records among its switches), and print as they finish.
set -u
cd "$(dirname "$0")/.."
say() { echo "[bench-builds $(date -u +%H:%M:%S)] $*"; }
. tools/bench_models.sh
OUT=${1:?usage: MINFER_COMMIT=<sha> bash tools/bench_builds.sh OUT "-DNAME=VALUE ..." ...}
shift
[ $# -ge 1 ] || { echo "bench_builds: give at least one define list" >&2; exit 2; }
C=${MINFER_COMMIT:?set MINFER_COMMIT to the commit of the tree}
mkdir -p "$OUT"
defs=("" "$@")
t0=$(date +%s)
for i in "${!defs[@]}"; do
    b=/tmp/minfer-builds-$i
    if ! make --no-print-directory PHASE=8b BUILD="$b" CUDA_ARCH=sm_90 NVDEFS="${defs[$i]}" -j"${JOBS:-16}" \
            "$b/minfer" >"$b.log" 2>&1; then
        grep -E "error:|Error " "$b.log" | head -10
        say "build $i (${defs[$i]:-none}) failed"
        exit 1
    fi
    say "built $i (${defs[$i]:-none}) in $(($(date +%s) - t0)) s"
done
M5=$(bench_model /tmp/minfer-builds-0/minfer qwen2.5-0.5b q4_0) &&
    M7=$(bench_model /tmp/minfer-builds-0/minfer qwen2.5-7b q4_k_m) || exit 1
J=$OUT/bench-builds-$C.jsonl
rc=0
for round in $(seq 1 "${ROUNDS:-2}"); do
    for i in "${!defs[@]}"; do
        label=${defs[$i]:-none}
        for m in "$M5" "$M7"; do
            MINFER_BUILD_DEFS="$label" /tmp/minfer-builds-$i/minfer bench -m "$m" -p 0 -n 128 -r 3 --json "$J" 2>&1 |
                grep -E '^\| .*tg128' | sed "s/^/round $round, $label: /" || rc=1
        done
    done
done
say "done in $(($(date +%s) - t0)) s"
exit $rc

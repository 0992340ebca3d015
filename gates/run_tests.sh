#!/usr/bin/env bash
# `make test` driver: runs every CPU test and gate, then the device gates of the built
# phases (which report "skipped: no CUDA device" without a GPU), and prints one
# closing line "N passed, N failed, N skipped". Exit status is non-zero on any failure.
#   Criterion binaries:  BUILD/tests/test_*
#   Python gates:        gates/common/py_*.py  (argument: BUILD; last line "N passed, N failed[, N skipped]")
#   Shell gates:         gates/common/sh_*.sh  (same contract)
#   Device gates:        gates/run_device_gates.sh BUILD
BUILD=${1:-build}
cd "$(dirname "$0")/.."
export MINFER_BUILD=$BUILD
# Python gates run in the venv that tools/setup_deps.sh makes (`make deps`); its bin/ goes first
# on PATH so a gate that starts `python3` from a shell script gets the same interpreter.
PY=${MINFER_PYTHON:-$PWD/.venv/bin/python}
if [ ! -x "$PY" ]; then
    echo "run_tests: no Python venv at $PY: run \`make deps\` (or make test) first" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
export MINFER_PYTHON=$PY PATH="$(dirname "$PY"):$PATH"
P=0; F=0; S=0; failed_names=()
logdir=$BUILD/test-logs; mkdir -p "$logdir"

count_line() { # parse "N passed, N failed[, N skipped]" from a log
    local line; line=$(grep -E '^([A-Za-z_-]+: )?[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -z "$line" ]; then echo "0 0 0"; return; fi
    local p f s
    p=$(echo "$line" | sed -E 's/.*\b([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.*\b([0-9]+) failed.*/\1/')
    s=$(echo "$line" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+' || echo 0)
    echo "$p $f ${s:-0}"
}

run_one() { # name, command...
    local name=$1; shift
    local log="$logdir/$name.log"
    local t0=$(date +%s)
    "$@" >"$log" 2>&1; local rc=$?
    local dt=$(( $(date +%s) - t0 ))
    read -r p f s < <(count_line "$log")
    if grep -q 'Synthesis: Tested:' "$log"; then   # Criterion's closing line
        local syn; syn=$(grep 'Synthesis: Tested:' "$log" | tail -1)
        p=$(echo "$syn" | sed -E 's/.*Passing: ([0-9]+).*/\1/')
        f=$(( $(echo "$syn" | sed -E 's/.*Failing: ([0-9]+).*/\1/') + $(echo "$syn" | sed -E 's/.*Crashing: ([0-9]+).*/\1/') ))
        s=0
    fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi     # a crash or bad exit is a failure
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ]; then f=1; echo "  (no result line)" >>"$log"; fi
    P=$((P+p)); F=$((F+f)); S=$((S+s))
    printf '%-40s %4d passed %3d failed %3d skipped  %4ds\n' "$name" "$p" "$f" "$s" "$dt"
    if [ "$f" -ne 0 ]; then failed_names+=("$name"); echo "---- $log (tail)"; tail -25 "$log"; echo "----"; fi
}

for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t" --jobs 2
done
for t in gates/common/py_*.py; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t" .py)" "$PY" "$t" "$BUILD"
done
for t in gates/common/sh_*.sh; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t" .sh)" bash "$t" "$BUILD"
done
if [ -x gates/run_device_gates.sh ]; then
    run_one device-gates bash gates/run_device_gates.sh "$BUILD"
fi
echo
[ ${#failed_names[@]} -eq 0 ] || echo "failed: ${failed_names[*]}"
echo "$P passed, $F failed, $S skipped"
[ "$F" -eq 0 ]

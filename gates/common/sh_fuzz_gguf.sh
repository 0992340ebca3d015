#!/usr/bin/env bash
# Gate: the GGUF reader's libFuzzer target runs for MINFER_FUZZ_SECONDS (default 60) with
# no finding. Argument: BUILD (the fuzz build goes to BUILD-fuzz). clang and its libFuzzer
# runtime are test dependencies that tools/setup_deps.sh installs, so their absence is a
# failure, not a skip.
set -uo pipefail   # not -e: run_fuzz.sh's exit status is the result
cd "$(dirname "$0")/../.."
FUZZ_BUILD=${FUZZ_BUILD:-${1:-build}-fuzz} bash gates/common/fuzz/run_fuzz.sh "${MINFER_FUZZ_SECONDS:-60}"
rc=$?
case $rc in
    0) echo "1 passed, 0 failed" ;;
    77) echo "FAIL: clang/libFuzzer unavailable (make deps / tools/setup_deps.sh installs clang and libclang-rt-dev)"
        echo "0 passed, 1 failed"; rc=1 ;;
    *) echo "0 passed, 1 failed"; rc=1 ;;
esac
exit $rc

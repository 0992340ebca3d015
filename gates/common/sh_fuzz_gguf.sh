#!/usr/bin/env bash
# Gate: the GGUF reader's libFuzzer target runs for MINFER_FUZZ_SECONDS (default 60) with
# no finding. Skipped (not passed) when clang/libFuzzer is unavailable. Argument: BUILD
# (the fuzz build goes to BUILD-fuzz).
cd "$(dirname "$0")/../.."
FUZZ_BUILD=${FUZZ_BUILD:-${1:-build}-fuzz} bash gates/common/fuzz/run_fuzz.sh "${MINFER_FUZZ_SECONDS:-60}"
rc=$?
case $rc in
    0) echo "1 passed, 0 failed" ;;
    77) echo "skipped: clang/libFuzzer unavailable"; echo "0 passed, 0 failed, 1 skipped"; rc=0 ;;
    *) echo "0 passed, 1 failed"; rc=1 ;;
esac
exit $rc

#!/usr/bin/env bash
# Gate: the model-level libFuzzer target (GGUF -> model -> tokenizer -> one decode step)
# runs for MINFER_FUZZ_SECONDS (default 60) with no finding. Argument: BUILD (the fuzz
# build goes to BUILD-fuzz). clang and libFuzzer are test dependencies: missing is a failure.
set -uo pipefail   # not -e: run_fuzz_model.sh's exit status is the result
cd "$(dirname "$0")/../.."
FUZZ_BUILD=${FUZZ_BUILD:-${1:-build}-fuzz} bash gates/common/fuzz/run_fuzz_model.sh "${MINFER_FUZZ_SECONDS:-60}"
rc=$?
case $rc in
    0) echo "1 passed, 0 failed" ;;
    77) echo "FAIL: clang/libFuzzer unavailable (make deps / tools/setup_deps.sh installs clang and libclang-rt-dev)"
        echo "0 passed, 1 failed"; rc=1 ;;
    *) echo "0 passed, 1 failed"; rc=1 ;;
esac
exit $rc

#!/usr/bin/env bash
# Gate: both libFuzzer targets (gates/common/fuzz/run_fuzz.sh: the GGUF reader, and GGUF ->
# model -> tokenizer -> one decode step) each run for MINFER_FUZZ_SECONDS (default 60) with
# no finding. Argument: BUILD (the fuzz builds go to BUILD-fuzz). clang and its libFuzzer
# runtime are test dependencies that tools/setup_deps.sh installs, so their absence is a
# failure, not a skip.
set -uo pipefail   # not -e: each run_fuzz.sh exit status is a result
cd "$(dirname "$0")/../.."
P=0; F=0
for target in gguf model; do
    FUZZ_BUILD=${FUZZ_BUILD:-${1:-build}-fuzz} bash gates/common/fuzz/run_fuzz.sh "$target" "${MINFER_FUZZ_SECONDS:-60}"
    case $? in
        0) P=$((P + 1)) ;;
        77) echo "FAIL fuzz_$target: clang/libFuzzer unavailable (make deps / tools/setup_deps.sh installs clang and libclang-rt-dev)"
            F=$((F + 1)) ;;
        *) echo "FAIL fuzz_$target"; F=$((F + 1)) ;;
    esac
done
echo "$P passed, $F failed"
[ "$F" -eq 0 ]

#!/usr/bin/env bash
# Builds the model-level libFuzzer target (fuzz_model.c: GGUF -> model -> tokenizer -> one
# decode step on the CPU) with clang (fuzzer + ASan + UBSan) and runs it for N seconds
# (default 60) over the committed seed models in gates/common/fuzz/corpus_model.
#   bash gates/common/fuzz/run_fuzz_model.sh [SECONDS]
# Exit: 0 no finding; 1 a finding (crash-/leak-/timeout-/oom- reproducer under $FUZZ_BUILD)
# or a build error; 77 clang or libFuzzer unavailable. New inputs go to a scratch corpus
# under $FUZZ_BUILD; the committed corpus is only read.
set -u
SECONDS_TO_RUN=${1:-60}
cd "$(dirname "$0")/../../.."
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
CLANG=${CLANG:-$(command -v clang || command -v clang-18 || command -v clang-17 || command -v clang-16 || command -v clang-15 || command -v clang-14)}
if [ -z "$CLANG" ]; then
    echo "fuzz_model: clang not found"
    exit 77
fi
OBJ=$FUZZ_BUILD/obj-model
mkdir -p "$OBJ" "$FUZZ_BUILD/scratch-corpus-model"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' > "$FUZZ_BUILD/probe.c"
if ! "$CLANG" -fsanitize=fuzzer "$FUZZ_BUILD/probe.c" -o "$FUZZ_BUILD/probe" 2>/dev/null; then
    echo "fuzz_model: $CLANG cannot link -fsanitize=fuzzer (libFuzzer / compiler-rt missing)"
    exit 77
fi
FLAGS="-std=c11 -g -O1 -I. -D_GNU_SOURCE -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
# Everything the load/tokenize/decode path runs is built instrumented with clang, except
# the quant kernels and the AVX2/AVX-512 op files: those use builtins and intrinsics older
# clang lacks, so they are built plainly with the project's C compiler (no coverage, no
# sanitizer) with the Makefile's ISA flags.
QCC=${QCC:-$(command -v gcc || echo "$CLANG")}
QFLAGS="-std=c11 -g -O1 -I. -D_GNU_SOURCE -fno-strict-aliasing -ffp-contract=off"
AVX2="-mavx2 -mfma -mf16c"
AVX512="$AVX2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16"
rm -f "$OBJ"/*.o "$FUZZ_BUILD/libmodel.a"
printf '%s\n' '#include "common/backend/backend.h"' 'const char *mi_build_phase = "cpu";' \
    'void mi_phases_install(void) {}' > "$FUZZ_BUILD/phases_cpu.c"
srcs=$(find common -name '*.c' | sort)
build_one() {
    local s=$1 o="$OBJ/$(echo "$1" | tr / _).o" cmd
    case "$s" in
        *_avx512.c) cmd=("$QCC" $QFLAGS $AVX512) ;;
        *_avx2.c) cmd=("$QCC" $QFLAGS $AVX2) ;;
        common/quant/*) cmd=("$QCC" $QFLAGS) ;;
        *) cmd=("$CLANG" $FLAGS) ;;
    esac
    "${cmd[@]}" -c "$s" -o "$o" || { echo "fuzz_model: compiling $s failed"; return 1; }
}
export -f build_one
export OBJ QCC QFLAGS AVX2 AVX512 CLANG FLAGS
if ! printf '%s\n' $srcs "$FUZZ_BUILD/phases_cpu.c" | xargs -P 2 -I{} bash -c 'build_one {}'; then
    exit 1
fi
ar rcs "$FUZZ_BUILD/libmodel.a" "$OBJ"/*.o
if ! "$CLANG" $FLAGS -fsanitize=fuzzer gates/common/fuzz/fuzz_model.c "$FUZZ_BUILD/libmodel.a" -lm -pthread \
        -o "$FUZZ_BUILD/fuzz_model"; then
    echo "fuzz_model: linking failed"
    exit 1
fi
rm -f "$FUZZ_BUILD"/model-crash-* "$FUZZ_BUILD"/model-leak-* "$FUZZ_BUILD"/model-timeout-* "$FUZZ_BUILD"/model-oom-*
echo "fuzz_model: running for ${SECONDS_TO_RUN}s over gates/common/fuzz/corpus_model ($(ls gates/common/fuzz/corpus_model | wc -l) seeds)"
"$FUZZ_BUILD/fuzz_model" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 \
    -max_len=600000 -print_final_stats=1 -artifact_prefix="$FUZZ_BUILD/model-" \
    "$FUZZ_BUILD/scratch-corpus-model" gates/common/fuzz/corpus_model >"$FUZZ_BUILD/fuzz_model.log" 2>&1
rc=$?
# the engine's own rejection messages ("minfer: ...") are expected and many: show the
# fuzzer's progress lines, its stats, and on a finding the report
grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::' "$FUZZ_BUILD/fuzz_model.log"
[ "$rc" -eq 0 ] || grep -v '^minfer' "$FUZZ_BUILD/fuzz_model.log" | grep -v '^"' | tail -60
if [ "$rc" -ne 0 ]; then
    echo "fuzz_model: FINDING (exit $rc); reproducer(s): $(ls "$FUZZ_BUILD"/model-crash-* "$FUZZ_BUILD"/model-leak-* "$FUZZ_BUILD"/model-timeout-* "$FUZZ_BUILD"/model-oom-* 2>/dev/null | tr '\n' ' ')"
    exit 1
fi
echo "fuzz_model: no finding in ${SECONDS_TO_RUN}s"
exit 0

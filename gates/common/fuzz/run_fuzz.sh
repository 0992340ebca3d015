#!/usr/bin/env bash
# Builds one libFuzzer target with clang (fuzzer + ASan + UBSan) and runs it for N seconds
# (default 60) over its committed seed corpus:
#   gguf   fuzz_gguf.c: the GGUF reader alone                      corpus/
#   model  fuzz_model.c: GGUF -> model -> tokenizer -> one decode   corpus_model/
#   bash gates/common/fuzz/run_fuzz.sh TARGET [SECONDS]     (make fuzz FUZZ_SECONDS=N runs both)
# Exit: 0 no finding; 1 a finding (TARGET-crash-/leak-/timeout-/oom- reproducer under
# $FUZZ_BUILD) or a build error; 2 a bad argument; 77 clang or libFuzzer unavailable. New
# inputs go to a scratch corpus under $FUZZ_BUILD; the committed corpus is only read.
set -u
TARGET=${1:-}
SECONDS_TO_RUN=${2:-60}
cd "$(dirname "$0")/../../.."
case $TARGET in
    gguf)  SRCS=$(ls common/gguf/*.c common/core/*.c common/quant/*.c); CORPUS=gates/common/fuzz/corpus; MAX_LEN=65536 ;;
    model) SRCS=$(find common -name '*.c' | sort); CORPUS=gates/common/fuzz/corpus_model; MAX_LEN=600000 ;;
    *) echo "usage: run_fuzz.sh gguf|model [SECONDS]"; exit 2 ;;
esac
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
CLANG=${CLANG:-$(command -v clang || command -v clang-19 || command -v clang-18 || command -v clang-17 || command -v clang-16 || command -v clang-15 || command -v clang-14)}
if [ -z "$CLANG" ]; then
    echo "fuzz_$TARGET: clang not found"
    exit 77
fi
OBJ=$FUZZ_BUILD/obj-$TARGET
mkdir -p "$OBJ" "$FUZZ_BUILD/scratch-corpus-$TARGET"
# libFuzzer present? (some clang packages ship without compiler-rt)
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' > "$FUZZ_BUILD/probe.c"
if ! "$CLANG" -fsanitize=fuzzer "$FUZZ_BUILD/probe.c" -o "$FUZZ_BUILD/probe" 2>/dev/null; then
    echo "fuzz_$TARGET: $CLANG cannot link -fsanitize=fuzzer (libFuzzer / compiler-rt missing)"
    exit 77
fi
FLAGS="-std=c11 -g -O1 -I. -D_GNU_SOURCE -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
# What is fuzzed is built instrumented with clang, except the quant kernels and the
# AVX2/AVX-512 op files: those use builtins and intrinsics older clang lacks
# (__builtin_cpu_supports("f16c")), so they are built plainly with the project's C
# compiler (no coverage, no sanitizer) with the Makefile's ISA flags.
QCC=${QCC:-$(command -v gcc || echo "$CLANG")}
QFLAGS="-std=c11 -g -O1 -I. -D_GNU_SOURCE -fno-strict-aliasing -ffp-contract=off"
AVX2="-mavx2 -mfma -mf16c"
AVX512="$AVX2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16"
rm -f "$OBJ"/*.o "$FUZZ_BUILD/lib$TARGET.a"
# the CPU-only build's generated phase list (the Makefile writes it for a real build)
printf '%s\n' '#include "common/backend/backend.h"' 'const char *mi_build_phase = "cpu";' \
    'void mi_phases_install(void) {}' > "$FUZZ_BUILD/phases_cpu.c"
[ "$TARGET" = model ] && SRCS="$SRCS $FUZZ_BUILD/phases_cpu.c"
build_one() {
    local s=$1 o="$OBJ/$(echo "$1" | tr / _).o" cmd
    case "$s" in
        *_avx512.c) cmd=("$QCC" $QFLAGS $AVX512) ;;
        *_avx2.c) cmd=("$QCC" $QFLAGS $AVX2) ;;
        common/quant/*) cmd=("$QCC" $QFLAGS) ;;
        *) cmd=("$CLANG" $FLAGS) ;;
    esac
    "${cmd[@]}" -c "$s" -o "$o" || { echo "fuzz: compiling $s failed"; return 1; }
}
export -f build_one
export OBJ QCC QFLAGS AVX2 AVX512 CLANG FLAGS
if ! printf '%s\n' $SRCS | xargs -P 2 -I{} bash -c 'build_one {}'; then
    exit 1
fi
ar rcs "$FUZZ_BUILD/lib$TARGET.a" "$OBJ"/*.o
if ! "$CLANG" $FLAGS -fsanitize=fuzzer "gates/common/fuzz/fuzz_$TARGET.c" "$FUZZ_BUILD/lib$TARGET.a" -lm -pthread \
        -o "$FUZZ_BUILD/fuzz_$TARGET"; then
    echo "fuzz_$TARGET: linking failed"
    exit 1
fi
P=$FUZZ_BUILD/$TARGET-
rm -f "$P"crash-* "$P"leak-* "$P"timeout-* "$P"oom-*
echo "fuzz_$TARGET: running for ${SECONDS_TO_RUN}s over $CORPUS ($(ls "$CORPUS" | wc -l) seeds)"
"$FUZZ_BUILD/fuzz_$TARGET" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 \
    -max_len=$MAX_LEN -print_final_stats=1 -artifact_prefix="$P" \
    "$FUZZ_BUILD/scratch-corpus-$TARGET" "$CORPUS" >"$FUZZ_BUILD/fuzz_$TARGET.log" 2>&1
rc=$?
# the engine's own rejection messages ("minfer: ...") are expected and many: show the
# fuzzer's progress lines, its stats, and on a finding the report
grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::' "$FUZZ_BUILD/fuzz_$TARGET.log"
if [ "$rc" -ne 0 ]; then
    grep -v '^minfer' "$FUZZ_BUILD/fuzz_$TARGET.log" | grep -v '^"' | tail -60
    echo "fuzz_$TARGET: FINDING (exit $rc); reproducer(s): $(ls "$P"crash-* "$P"leak-* "$P"timeout-* "$P"oom-* 2>/dev/null | tr '\n' ' ')"
    exit 1
fi
echo "fuzz_$TARGET: no finding in ${SECONDS_TO_RUN}s"
exit 0

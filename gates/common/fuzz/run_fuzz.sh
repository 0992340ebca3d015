#!/usr/bin/env bash
# Builds the GGUF reader's libFuzzer target with clang (fuzzer + ASan + UBSan) from the
# sources it needs and runs it for N seconds (default 60) over the committed corpus.
#   bash gates/common/fuzz/run_fuzz.sh [SECONDS]     (make fuzz FUZZ_SECONDS=N)
# Exit: 0 no finding; 1 a finding (crash-* reproducer under $FUZZ_BUILD) or build error;
# 77 clang or libFuzzer unavailable (reported, not a pass). New inputs found during the run
# go to a scratch corpus under $FUZZ_BUILD; the committed corpus is only read.
set -u
SECONDS_TO_RUN=${1:-60}
cd "$(dirname "$0")/../../.."
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
CLANG=${CLANG:-$(command -v clang || command -v clang-18 || command -v clang-17 || command -v clang-16 || command -v clang-15 || command -v clang-14)}
if [ -z "$CLANG" ]; then
    echo "fuzz: clang not found: libFuzzer target not built (skipped)"
    exit 77
fi
mkdir -p "$FUZZ_BUILD/obj" "$FUZZ_BUILD/scratch-corpus"
# libFuzzer present? (some clang packages ship without compiler-rt)
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' > "$FUZZ_BUILD/probe.c"
if ! "$CLANG" -fsanitize=fuzzer "$FUZZ_BUILD/probe.c" -o "$FUZZ_BUILD/probe" 2>/dev/null; then
    echo "fuzz: $CLANG cannot link -fsanitize=fuzzer (libFuzzer / compiler-rt missing): skipped"
    exit 77
fi
FLAGS="-std=c11 -g -O1 -I. -D_GNU_SOURCE -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
# The reader and what it calls (error reporting) are built instrumented with clang. The
# type table it consults lives in common/quant with the kernels; those are built plainly
# (no coverage, no sanitizer) with the project's C compiler, since they are not what is
# fuzzed and use builtins older clang lacks (__builtin_cpu_supports("f16c")).
QCC=${QCC:-$(command -v gcc || echo "$CLANG")}
QFLAGS="-std=c11 -g -O1 -I. -D_GNU_SOURCE -fno-strict-aliasing"
rm -f "$FUZZ_BUILD"/obj/*.o "$FUZZ_BUILD/libdeps.a"
for s in common/gguf/*.c common/core/*.c common/quant/*.c; do
    [ -f "$s" ] || continue
    o="$FUZZ_BUILD/obj/$(echo "$s" | tr / _).o"
    case "$s" in
        common/quant/*_avx512.c) cmd=("$QCC" $QFLAGS -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16) ;;
        common/quant/*_avx2.c) cmd=("$QCC" $QFLAGS -mavx2 -mfma -mf16c) ;;
        common/quant/*) cmd=("$QCC" $QFLAGS) ;;
        *) cmd=("$CLANG" $FLAGS) ;;
    esac
    if ! "${cmd[@]}" -c "$s" -o "$o"; then
        echo "fuzz: compiling $s failed"
        exit 1
    fi
done
ar rcs "$FUZZ_BUILD/libdeps.a" "$FUZZ_BUILD"/obj/*.o
if ! "$CLANG" $FLAGS -fsanitize=fuzzer gates/common/fuzz/fuzz_gguf.c "$FUZZ_BUILD/libdeps.a" -lm -pthread \
        -o "$FUZZ_BUILD/fuzz_gguf"; then
    echo "fuzz: linking fuzz_gguf failed"
    exit 1
fi
echo "fuzz: running fuzz_gguf for ${SECONDS_TO_RUN}s over gates/common/fuzz/corpus ($(ls gates/common/fuzz/corpus | wc -l) seeds)"
"$FUZZ_BUILD/fuzz_gguf" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$FUZZ_BUILD/" \
    "$FUZZ_BUILD/scratch-corpus" gates/common/fuzz/corpus 2>&1 | tail -25
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
    echo "fuzz: FINDING (exit $rc); reproducer(s): $(ls "$FUZZ_BUILD"/crash-* "$FUZZ_BUILD"/leak-* "$FUZZ_BUILD"/timeout-* "$FUZZ_BUILD"/oom-* 2>/dev/null | tr '\n' ' ')"
    exit 1
fi
echo "fuzz: no finding in ${SECONDS_TO_RUN}s"
exit 0

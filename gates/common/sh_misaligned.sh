#!/usr/bin/env bash
# Gate: legal but odd GGUF files under the sanitizers. general.alignment 1 and 2 put
# tensor data at addresses the kernels cannot read through their typed pointers; the
# reader must hand out aligned data. For every weight type (pure synth models, plus a
# q4_k_m mix and a qwen2 model with biases), the file re-written at alignment 1 and 2
# must run (prefill GEMM, decode matvec, get_rows, elementwise) under ASan+UBSan with no
# report and give logits bit-identical to the alignment-32 original; quantize must read
# a misaligned input like the aligned one. Then gate_quant_nonfinite feeds every
# quantizer and kernel NaN/Inf/huge rows. Argument: BUILD; the sanitizer build goes to
# BUILD-san (shared with the bad-input campaign: same make line). MINFER_ROOT=DIR runs
# it against another checkout (to show a fault there).
HERE=$(cd "$(dirname "$0")" && pwd)
cd "${MINFER_ROOT:-$HERE/../..}" || exit 1
B=${1:-build}
S=$B-san
PY=${MINFER_PYTHON:-$HERE/../../.venv/bin/python}   # the venv make test sets up; no fallback
P=0; F=0
fail() { F=$((F + 1)); [ "$F" -le 20 ] && echo "FAIL $*"; }
pass() { P=$((P + 1)); }

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
if ! make --no-print-directory SAN=1 PHASE=cpu BUILD="$S" -j2 all >"$T/build.log" 2>&1; then
    tail -20 "$T/build.log"
    echo "0 passed, 1 failed"
    exit 1
fi
export ASAN_OPTIONS=abort_on_error=0:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# run CMD...: under the SAN build, no sanitizer report, exit 0
san() {
    local log=$T/log
    "$@" >"$log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ] || grep -qE 'runtime error|AddressSanitizer|LeakSanitizer' "$log"; then
        fail "$(basename "$1") ${*:2} (exit $rc):"
        grep -m3 -E 'runtime error|ERROR|SUMMARY|minfer:' "$log" | sed 's/^/    /'
        return 1
    fi
    return 0
}

TOK=$(seq -s, 1 40)   # a 40-token prompt: prefill takes the batched path, then 2 decode steps
logits() { # model out
    san "$S/minfer" run -m "$1" --tokens "$TOK" -n 2 --ignore-eos -t 2 --backend cpu --dump-logits "$2"
}

models=()
for ty in f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k; do models+=("tiny-llama:$ty:--pure"); done
models+=("tiny-llama:q4_k_m:" "tiny-qwen2:q8_0:--pure" "tiny-qwen3:q6_k:--pure")
for m in "${models[@]}"; do
    IFS=: read -r shape ty pure <<<"$m"
    ref=$T/$shape.$ty.a32.gguf
    if ! san "$S/minfer" synth --shape "$shape" --type "$ty" $pure -o "$ref"; then continue; fi
    logits "$ref" "$ref.lg" || continue
    for a in 1 2; do
        mis=$T/$shape.$ty.a$a.gguf
        if ! "$PY" "$HERE/gguf_realign.py" "$ref" "$mis" "$a" >"$T/py.log" 2>&1; then
            fail "realign $shape $ty to $a:"; tail -3 "$T/py.log"; continue
        fi
        san "$S/minfer" info "$mis" || continue
        logits "$mis" "$mis.lg" || continue
        if cmp -s "$ref.lg" "$mis.lg"; then pass; else fail "$shape $ty: logits at alignment $a differ from alignment 32"; fi
    done
done

# quantize reads (dequantizes) a misaligned input exactly as the aligned one
for ty in f16 q8_0; do
    ref=$T/tiny-llama.$ty.a32.gguf mis=$T/tiny-llama.$ty.a1.gguf
    [ -f "$ref" ] && [ -f "$mis" ] || { fail "quantize $ty: inputs missing"; continue; }
    for q in q4_k q6_k; do
        san "$S/minfer" quantize "$ref" "$T/qa.gguf" "$q" || continue
        san "$S/minfer" quantize "$mis" "$T/qm.gguf" "$q" || continue
        logits "$T/qa.gguf" "$T/qa.lg" && logits "$T/qm.gguf" "$T/qm.lg" || continue
        if cmp -s "$T/qa.lg" "$T/qm.lg"; then pass; else fail "quantize $ty -> $q: misaligned input gives other weights"; fi
    done
done

# quantizers and kernels on non-finite rows: SAN build, then the plain one when built
for g in "$S/gates/common/gate_quant_nonfinite" "$B/gates/common/gate_quant_nonfinite"; do
    [ -x "$g" ] || { [ "$g" = "${S}/gates/common/gate_quant_nonfinite" ] && fail "$g not built"; continue; }
    if san "$g"; then pass; else sed -n '1,10p' "$T/log" | sed 's/^/    /'; fi
done

echo "$P passed, $F failed"
[ "$F" -eq 0 ]

# Sourced by tools/bench_*.sh: the synthetic benchmark models, shared with the device gates.
# bench_model MINFER SHAPE TYPE prints the path of SHAPE TYPE, reusing the copy a gate left
# in /tmp (gate 7b's name first, then 7e's) and synthesizing it there when neither exists;
# bench_models MINFER sets MODELS to the default pair (0.5B Q4_0 and 7B Q4_K_M).
bench_model() {
    local f=/tmp/minfer-7b-$2-$3.gguf
    [ -f "$f" ] || f=/tmp/minfer-7e-$2-$3.gguf
    if [ ! -f "$f" ]; then
        say "synthesizing $2 $3 -> $f" >&2
        "$1" synth --shape "$2" --type "$3" -o "$f" >/dev/null || { say "synth of $2 $3 failed" >&2; return 1; }
    fi
    echo "$f"
}
bench_models() {
    local a b
    a=$(bench_model "$1" qwen2.5-0.5b q4_0) && b=$(bench_model "$1" qwen2.5-7b q4_k_m) || return 1
    MODELS="$a:$b"
}
# bench_python prints the interpreter for the scripts' JSON post-processing: $MINFER_PYTHON (the
# Makefile sets it to the repo venv), else .venv/bin/python; on a host without the venv (the GPU
# machine) say MINFER_PYTHON=python3: these snippets use only the standard library.
bench_python() {
    local py=${MINFER_PYTHON:-.venv/bin/python}
    if [ ! -x "$py" ] && ! command -v "$py" >/dev/null; then
        echo "bench: no Python at $py: run \`make venv\`, or set MINFER_PYTHON" >&2
        return 1
    fi
    echo "$py"
}

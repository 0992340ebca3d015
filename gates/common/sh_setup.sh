#!/usr/bin/env bash
# Gate: set-up (issue #13, items 2, 3 and the build banner). Argument: BUILD.
#  - tools/setup_deps.sh stops with exit 1 and shows pip's own error when pip fails, and
#    remakes a venv that has no pip, then is quiet when all is present (run on a temp copy
#    of the script with MINFER_VENV in a temp dir: the repo's .venv is not touched);
#  - no py gate passes or skips when a Python package is missing (each py_*.py is run with a
#    bare venv's python: one that reports a missing module must exit non-zero);
#  - the fuzz gate fails (not skips) when clang/libFuzzer is unavailable;
#  - `make -n run` fetches only the default model; `make models` and `make test` all of them;
#  - the Makefile, run_tests.sh, the bench scripts and fetch_models.py use the venv's python;
#  - the build banner has no empty "not yet implemented:" list.
# Last line: "N passed, N failed".
set -euo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/../.."
P=0; F=0
ok()   { echo "ok    $1"; P=$((P+1)); }
fail() { echo "FAIL  $1"; shift; for l in "$@"; do echo "$l" | tail -15 | sed 's/^/      /'; done; F=$((F+1)); }
T=$(mktemp -d /tmp/minfer-setup-XXXXXX)
trap 'rm -rf "$T"' EXIT
# a make started from here must not inherit the outer `make test`'s flags and variables
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MINFER_PYTHON make --no-print-directory "$@"; }
unset PYTHONPATH

# ---- setup_deps.sh on a temp copy: pip failure is shown and fatal ----
mkdir -p "$T/repo/tools"
cp tools/setup_deps.sh "$T/repo/tools/"
# a package no index has, and no index or local wheel directory to look in: pip must fail
echo 'minfer-no-such-package==0.0.0' >"$T/repo/tools/requirements.txt"
set +e
out=$(env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL MINFER_VENV="$T/venv1" PIP_NO_INDEX=1 \
      bash "$T/repo/tools/setup_deps.sh" python 2>&1); rc=$?
set -e
if [ "$rc" -ne 0 ] && grep -qiE 'no matching distribution|could not find a version' <<<"$out" &&
   grep -q 'ERROR' <<<"$out"; then
    ok "setup_deps.sh: a failing pip install stops set-up (exit $rc) with pip's error shown"
else
    fail "setup_deps.sh: a failing pip install must exit non-zero and show pip's error (exit $rc)" "$out"
fi

# ---- an incomplete venv (no pip) is made again, then set-up is quiet ----
printf '# nothing\n' >"$T/repo/tools/requirements.txt"
python3 -m venv --without-pip "$T/venv2"
set +e
out=$(MINFER_VENV="$T/venv2" bash "$T/repo/tools/setup_deps.sh" python 2>&1); rc=$?
set -e
if [ "$rc" -eq 0 ] && "$T/venv2/bin/python" -m pip --version >/dev/null 2>&1; then
    ok "setup_deps.sh: a venv without pip is made again"
else
    fail "setup_deps.sh: a venv without pip must be made again (exit $rc)" "$out"
fi
set +e
out=$(MINFER_VENV="$T/venv2" bash "$T/repo/tools/setup_deps.sh" python 2>&1); rc=$?
set -e
if [ "$rc" -eq 0 ] && [ -z "$out" ]; then
    ok "setup_deps.sh: quiet and exit 0 when all is present"
else
    fail "setup_deps.sh: a second run must print nothing and exit 0 (exit $rc)" "$out"
fi

# ---- py gates with a python that lacks the packages: a failure, never a pass or a skip ----
python3 -m venv --without-pip "$T/bare"
bad=()
for g in gates/common/py_*.py; do
    set +e
    out=$(timeout 300 "$T/bare/bin/python" "$g" "$BUILD" 2>&1); rc=$?
    set -e
    # a gate that needs none of the packages may pass; one that notices a missing one must fail
    if [ "$rc" -eq 0 ] && grep -qiE 'no module named|not installed|ImportError|ModuleNotFoundError|pip install' <<<"$out"; then
        bad+=("$(basename "$g"): exit 0 with a package missing: $(grep -iE 'module|install|import' <<<"$out" | head -1) / $(tail -1 <<<"$out")")
    fi
done
if [ ${#bad[@]} -eq 0 ]; then
    ok "every py gate fails when its Python packages are missing"
else
    fail "py gates that pass or skip with the Python packages missing" "$(printf '%s\n' "${bad[@]}")"
fi

# ---- the fuzz gate with no usable clang: a failure ----
set +e
out=$(CLANG=/bin/false FUZZ_BUILD="$T/fuzz" MINFER_FUZZ_SECONDS=1 bash gates/common/sh_fuzz.sh "$BUILD" 2>&1); rc=$?
set -e
if [ "$rc" -ne 0 ] && [ "$(tail -1 <<<"$out")" = "0 passed, 2 failed" ]; then
    ok "sh_fuzz: clang/libFuzzer unavailable is a failure"
else
    fail "sh_fuzz: clang/libFuzzer unavailable must fail, not skip (exit $rc)" "$out"
fi

# ---- which models each make target fetches ----
fetch_lines() { mk -n "$1" BUILD="$BUILD" MINFER_NO_NVCC=1 2>&1 | grep 'fetch_models\.py' || true; }
run_f=$(fetch_lines run)
if [ -n "$run_f" ] && ! grep -qv 'MINFER_MODELS=default' <<<"$run_f"; then
    ok "make run fetches only the default model"
else
    fail "make run must fetch only the default model (MINFER_MODELS=default)" "${run_f:-no fetch_models.py line in make -n run}"
fi
for t in models test; do
    f=$(fetch_lines $t)
    if [ -n "$f" ] && ! grep -q 'MINFER_MODELS=default' <<<"$f"; then
        ok "make $t fetches every model"
    else
        fail "make $t must fetch every model" "${f:-no fetch_models.py line in make -n $t}"
    fi
done

# ---- the venv's python everywhere (a bare python3 may lack pip and the packages) ----
sys_py=$(grep -nE '(^|[[:space:];&|(])python3 ' Makefile gates/run_tests.sh tools/bench_*.sh results/bench-cpu.sh 2>/dev/null |
         grep -vE '^[^:]+:[0-9]+:[[:space:]]*#' || true)
if [ -z "$sys_py" ] && ! grep -q 'sys.executable, "-m", "pip"' tools/fetch_models.py &&
   grep -qxE '/?\.venv/?' .gitignore; then
    ok "Makefile, run_tests.sh, bench scripts, fetch_models.py use the venv; .venv is git-ignored"
else
    fail "system python3 still used (or .venv not git-ignored)" "$sys_py"
fi

# ---- build banner: no empty "not yet implemented:" ----
# NVCC=/bin/true: the banner's CUDA branch without a CUDA toolkit
banner=$(mk -s info BUILD="$BUILD" NVCC=/bin/true 2>&1)
if grep -qE 'not yet implemented:[[:space:]]*$' <<<"$banner"; then
    fail "build banner prints an empty 'not yet implemented:' list" "$banner"
else
    ok "build banner: no empty 'not yet implemented:' list"
fi

echo "$P passed, $F failed"
[ "$F" -eq 0 ]

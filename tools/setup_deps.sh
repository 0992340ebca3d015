#!/usr/bin/env bash
# Installs what the build and the tests need, once, and says so when it does; quiet when all
# is present. Any failure stops here with the tool's own error shown (exit 1).
#   bash tools/setup_deps.sh          everything `make test` needs:
#                                      apt: libcriterion-dev, clang + its libFuzzer runtime,
#                                           libmicrohttpd-dev + libjansson-dev (minfer serve),
#                                           python3 and python3-venv (when missing)
#                                      .venv: the packages of tools/requirements.txt
#   bash tools/setup_deps.sh python   only the Python side (`make run`, `make models`)
# The Python packages go into a virtual environment inside the repository (MINFER_VENV,
# default .venv), never into the system Python: Debian's is "externally managed" (PEP 668)
# and refuses pip. The venv is (re)made when it is missing, broken or has no pip, and
# updated when tools/requirements.txt changes (a stamp in the venv records what it holds).
set -euo pipefail
# an unexpected failure must not end the script silently
trap 'echo "minfer setup: ERROR: tools/setup_deps.sh line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR
cd "$(dirname "$0")/.."
MODE=${1:-all}
case $MODE in all|python) ;; *) echo "usage: tools/setup_deps.sh [all|python]" >&2; exit 2 ;; esac
VENV=${MINFER_VENV:-.venv}
REQ=tools/requirements.txt

say() { echo "minfer setup: $*"; }
die() { echo "minfer setup: ERROR: $*" >&2; exit 1; }

# ---- apt: system packages ----
SUDO=()
[ "$(id -u)" = 0 ] || SUDO=(sudo)
apt_updated=0
apt_update() {
    [ "$apt_updated" = 1 ] && return 0
    command -v apt-get >/dev/null || die "apt-get not found: install by hand: $*"
    if [ ${#SUDO[@]} -gt 0 ] && ! command -v sudo >/dev/null; then
        die "not root and no sudo: run as root: apt-get install $*"
    fi
    "${SUDO[@]}" apt-get update -qq || die "apt-get update failed (output above)"
    apt_updated=1
}
apt_install() {
    apt_update "$@"
    say "apt-get install $*"
    # stdout is dpkg's unpack log; errors go to stderr and stay visible
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
        || die "apt-get install $* failed (output above)"
}
apt_has() { # package has an install candidate (after apt_update)
    local c; c=$(apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: *//p')
    [ -n "$c" ] && [ "$c" != "(none)" ]
}

fuzzer_links() { # clang links a libFuzzer target (the fuzz gate needs exactly this)
    local clang d rc
    clang=$(command -v clang) || return 1
    # fast path: the runtime library is where this clang looks for it (name: clang >= 15
    # per-target directory / older lib/linux with the arch suffix)
    d=$("$clang" --print-runtime-dir 2>/dev/null) || d=
    if [ -n "$d" ] && { [ -f "$d/libclang_rt.fuzzer.a" ] || [ -f "$d/libclang_rt.fuzzer-x86_64.a" ] ||
                        [ -f "$d/libclang_rt.fuzzer-$(uname -m).a" ]; }; then
        return 0
    fi
    d=$(mktemp -d)
    echo 'int LLVMFuzzerTestOneInput(const unsigned char *p, unsigned long n) { (void)p; (void)n; return 0; }' >"$d/p.c"
    "$clang" -fsanitize=fuzzer "$d/p.c" -o "$d/p" >/dev/null 2>&1; rc=$?
    rm -rf "$d"
    return $rc
}

need=()
if [ "$MODE" = all ]; then
    [ -f /usr/include/criterion/criterion.h ] || need+=(libcriterion-dev)
    # `minfer serve`: HTTP and JSON (the Makefile links them into build/minfer only)
    [ -f /usr/include/microhttpd.h ] || need+=(libmicrohttpd-dev)
    [ -f /usr/include/jansson.h ] || need+=(libjansson-dev)
fi
command -v python3 >/dev/null || need+=(python3)
# Debian splits ensurepip (needed by `python3 -m venv`) into python3-venv
if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    need+=(python3-venv)
fi
if [ "$MODE" = all ] && ! fuzzer_links; then
    # The libFuzzer runtime: Debian 12 and 13 (and Ubuntu 24.04) have the unversioned
    # libclang-rt-dev of the default toolchain beside clang. Elsewhere take the runtime of
    # the installed clang's version (libclang-rt-N-dev), or clang alone where it ships it.
    command -v clang >/dev/null || need+=(clang)
    apt_update "${need[@]}" libclang-rt-dev
    if apt_has libclang-rt-dev; then
        need+=(libclang-rt-dev)
    elif command -v clang >/dev/null; then
        v=$(clang -dumpversion | cut -d. -f1)
        apt_has "libclang-rt-$v-dev" && need+=("libclang-rt-$v-dev")
    fi
fi
if [ ${#need[@]} -gt 0 ]; then
    apt_install "${need[@]}"
fi
if [ "$MODE" = all ] && ! fuzzer_links; then
    # clang came without the runtime and no unversioned package exists: its versioned one
    v=$(clang -dumpversion | cut -d. -f1)
    apt_update "libclang-rt-$v-dev"
    apt_has "libclang-rt-$v-dev" || die "clang $v cannot link -fsanitize=fuzzer and apt has no libclang-rt-$v-dev"
    apt_install "libclang-rt-$v-dev"
    fuzzer_links || die "clang still cannot link -fsanitize=fuzzer after installing libclang-rt-$v-dev"
fi

# ---- the Python virtual environment ----
# module names to check = the requirement names (they coincide for these packages)
mods=$(awk '{ sub(/#.*/, ""); sub(/[<>=!~;[ ].*/, ""); if ($0 != "") printf "%s ", $0 }' "$REQ")
want_stamp="$(python3 -c 'import sys; print(sys.version.split()[0])') $(sha256sum "$REQ" | cut -d' ' -f1)"
venv_works() { # runs, and has pip (a venv made while ensurepip was missing has none)
    [ -x "$VENV/bin/python" ] &&
        "$VENV/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("pip") is None)' 2>/dev/null
}
if ! venv_works; then
    if [ -e "$VENV" ]; then
        say "$VENV is incomplete (no working python or pip): making it again"
        rm -rf "$VENV"
    else
        say "python3 -m venv $VENV"
    fi
    python3 -m venv "$VENV" || die "python3 -m venv $VENV failed (output above)"
    venv_works || die "$VENV was made but has no working pip"
fi
have_stamp=
if [ -f "$VENV/.minfer-requirements" ]; then have_stamp=$(cat "$VENV/.minfer-requirements"); fi
mods_present() {
    "$VENV/bin/python" - $mods <<'PY'
import importlib.util, sys
sys.exit(0 if all(importlib.util.find_spec(m) for m in sys.argv[1:]) else 1)
PY
}
if [ "$have_stamp" != "$want_stamp" ] || ! mods_present; then
    if [ -n "$mods" ]; then
        say "pip install -r $REQ (into $VENV): $mods"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ" \
            || die "pip install -r $REQ failed (output above)"
        # each module must import, not only be found
        "$VENV/bin/python" -c "import $(echo $mods | tr ' ' ',')" \
            || die "$VENV: the packages of $REQ were installed but do not import (output above)"
    fi
    echo "$want_stamp" >"$VENV/.minfer-requirements"
fi

#!/usr/bin/env bash
# Gate: no data race under ThreadSanitizer. Builds the CPU library with -fsanitize=thread
# into BUILD-tsan (incremental after the first run), links gates/common/tsan_sessions.c
# and runs it: the thread pool under load (tasks of 1..64 chunks back to back, 4 threads)
# and sessions on one shared model decoding concurrently (results checked against a lone
# session). Passes with the program's checks ok and zero ThreadSanitizer reports.
# MINFER_TSAN_SRC=DIR builds another checkout's sources (to show a tree's behaviour).
# Usage: sh_tsan.sh BUILD     Last line: "N passed, N failed"
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SRC=${MINFER_TSAN_SRC:-$ROOT}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
OUT=$BUILD-tsan
P=0; F=0
ok() { P=$((P+1)); echo "ok   $1"; }
bad() { F=$((F+1)); echo "FAIL $1"; }
finish() { echo "$P passed, $F failed"; exit $(( F > 0 )); }

if ! echo 'int main(void){return 0;}' | cc -fsanitize=thread -x c - -o "${TMPDIR:-/tmp}/mi-tsan-probe.$$" 2>/dev/null; then
    bad "the C compiler cannot build with -fsanitize=thread (libtsan missing)"
    finish
fi
rm -f "${TMPDIR:-/tmp}/mi-tsan-probe.$$"
mkdir -p "$OUT"
# CFLAGS from the environment: the Makefile appends its own flags to them. An outer
# make's variables (make test CFLAGS=...) must not reach this build: MAKEFLAGS is dropped.
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL CFLAGS="-fsanitize=thread" LDFLAGS="-fsanitize=thread" \
     make -s -j2 -C "$SRC" PHASE=cpu BUILD="$OUT" lib >"$OUT/build.log" 2>&1; then
    bad "TSan build of $SRC (log: $OUT/build.log)"; tail -20 "$OUT/build.log"; finish
fi
if ! cc -std=c11 -O1 -g -fsanitize=thread -pthread -D_GNU_SOURCE -I"$SRC" -o "$OUT/tsan_sessions" \
        "$ROOT/gates/common/tsan_sessions.c" "$OUT/libminfer.a" -lm 2>"$OUT/link.log"; then
    bad "linking tsan_sessions (log: $OUT/link.log)"; tail -20 "$OUT/link.log"; finish
fi
ok "TSan build"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mi-tsan.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if ! "$BUILD/minfer" synth --shape tiny-llama --type q8_0 -o "$tmp/m.gguf" >"$tmp/synth.log" 2>&1; then
    bad "synth a tiny model"; cat "$tmp/synth.log"; finish
fi

export TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1 history_size=4"
export MINFER_DISABLE_CUDA=1
run() { timeout 300 "$@" "$OUT/tsan_sessions" "$tmp/m.gguf" >"$tmp/out.log" 2>&1; echo $?; }
rc=$(run)
# some kernels place mappings where TSan's shadow cannot live: without address
# randomization the layout is the one TSan expects
if grep -q "unexpected memory mapping\|ThreadSanitizer: failed to" "$tmp/out.log"; then
    rc=$(run setarch "$(uname -m)" -R)
fi
n_rep=$(grep -c "^WARNING: ThreadSanitizer" "$tmp/out.log")
grep -q "^thread pool: ok" "$tmp/out.log" && ok "thread pool results" || bad "thread pool results"
grep -q "^shared sessions: ok" "$tmp/out.log" && ok "shared-model sessions results" || bad "shared-model sessions results"
if [ "$n_rep" -eq 0 ] && [ "$rc" -ne 66 ]; then
    ok "zero ThreadSanitizer reports (exit $rc)"
else
    bad "$n_rep ThreadSanitizer report(s), exit $rc; the first:"
    awk '/^WARNING: ThreadSanitizer/{on=1} on{print; if (++n > 40) exit}' "$tmp/out.log"
    grep -h "^SUMMARY: ThreadSanitizer" "$tmp/out.log" | sort | uniq -c | head -20
fi
[ "$rc" -eq 0 ] || [ "$rc" -eq 66 ] || { echo "exit status $rc; output tail:"; tail -20 "$tmp/out.log"; }
finish

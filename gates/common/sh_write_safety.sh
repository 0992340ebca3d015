#!/usr/bin/env bash
# Gate: `quantize` and `synth` never damage an existing file. IN == OUT is refused however
# it is spelt (./, symbolic link, hard link, dir/..); a SIGKILL or SIGTERM mid-write, a full
# disk (small tmpfs) and a read-only directory (read-only bind mount) leave an existing OUT
# byte-identical; a device node (a private copy of /dev/full) given to quantize, synth or
# `run --dump-logits` is refused, never unlinked;
# a `minfer run` reading a model keeps running while another process quantizes into its
# path. The mount and mknod cases need root and are skipped (with the reason) otherwise;
# as root the gate re-runs itself in a private mount namespace so no mount outlives it.
# Argument: BUILD. Last line: "N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
B=$(realpath "$BUILD")/minfer
ROOT=0; [ "$(id -u)" = 0 ] && ROOT=1
if [ $ROOT = 1 ] && [ -z "${MINFER_WS_PRIVATE_NS:-}" ] && unshare --mount --propagation private true 2>/dev/null; then
    MINFER_WS_PRIVATE_NS=1 exec unshare --mount --propagation private bash "$0" "$@"
fi

P=0; F=0; S=0
pass() { P=$((P+1)); echo "ok   $1"; }
fail() { F=$((F+1)); echo "FAIL $1: $2"; }
skip() { S=$((S+1)); echo "SKIP $1: $2"; }
[ -x "$B" ] || { echo "no $B"; echo "0 passed, 1 failed"; exit 1; }

T=$(mktemp -d /tmp/minfer_ws.XXXXXX)
MOUNTS=()
cleanup() {
    for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
cd "$T" || exit 1

"$B" synth --shape tiny-llama --type q8_0 -o m.gguf >setup.log 2>&1 &&
    "$B" synth --shape smollm2-135m --type q8_0 -o big.gguf >>setup.log 2>&1 ||
    { cat setup.log; echo "0 passed, 1 failed"; exit 1; }
cp m.gguf m.orig

opens() { "$B" info "$1" >/dev/null 2>&1; }
# a non-zero exit that is not a crash (a signal gives 128+N)
clean_fail() { [ "$1" -ne 0 ] && [ "$1" -lt 128 ]; }
temps() { ls -A "${1:-.}" | grep '\.tmp\.' || true; }
describe() { # what is at $1, for failure messages
    if [ -e "$1" ] || [ -L "$1" ]; then stat -c '%F, %s bytes' "$1"; else echo "missing"; fi
}

# ---- IN and OUT the same file, however spelt ----
mkdir sub
ln -s m.gguf link.gguf
ln m.gguf hard.gguf
same_case() { # label IN OUT
    "$B" quantize "$2" "$3" q4_0 >log 2>&1
    local rc=$?
    if clean_fail $rc && grep -q "same file" log && cmp -s m.gguf m.orig && opens m.gguf; then
        pass "same file: $1"
    else
        fail "same file: $1" "rc=$rc, m.gguf: $(describe m.gguf), stderr: $(tail -1 log)"
    fi
    cp m.orig m.gguf   # in place, so the hard link still shares it
}
same_case "identical path" m.gguf m.gguf
same_case "./ path" m.gguf ./m.gguf
same_case "symbolic link" m.gguf link.gguf
same_case "IN through a symbolic link" link.gguf m.gguf
same_case "hard link" m.gguf hard.gguf
same_case "dir/.." m.gguf sub/../m.gguf
same_case "absolute path" m.gguf "$T/m.gguf"

"$B" quantize m.gguf sub q4_0 >log 2>&1; rc=$?
if clean_fail $rc && [ -d sub ] && [ -z "$(temps sub)" ]; then pass "OUT a directory: refused"
else fail "OUT a directory: refused" "rc=$rc, $(tail -1 log)"; fi

# ---- killed mid-write (SIGINT is ignored by background jobs of a script, so SIGTERM
# stands for a caught signal) ----
# Waits until the write has visibly started (a temporary file growing, or OUT changed).
wait_started() { # pid out
    local i=0
    while [ $i -lt 1500 ] && kill -0 "$1" 2>/dev/null; do
        local t; t=$(ls -A . | grep "^\.$2\.tmp\." | head -1)
        if [ -n "$t" ] && [ "$(stat -c %s "$t" 2>/dev/null || echo 0)" -gt 1048576 ]; then return 0; fi
        if [ -e "$2" ] && ! cmp -s "$2" m.orig; then return 0; fi
        sleep 0.02; i=$((i+1))
    done
    return 1
}
kill_case() { # signal label
    cp m.orig out.gguf
    "$B" synth --shape smollm2-135m --type f32 -o out.gguf >log 2>&1 &
    local pid=$!
    wait_started $pid out.gguf; local started=$?
    kill -"$1" $pid 2>/dev/null; wait $pid 2>/dev/null
    local left; left=$(temps)
    if [ $started -ne 0 ]; then
        fail "$2: existing OUT intact" "the write never started (or ended before the signal): $(tail -1 log)"
    elif cmp -s out.gguf m.orig && opens out.gguf; then
        pass "$2: existing OUT intact"
    else
        fail "$2: existing OUT intact" "out.gguf: $(describe out.gguf) (was $(stat -c %s m.orig) bytes)"
    fi
    if [ "$1" = KILL ]; then
        # a SIGKILL cannot be caught: a stray temporary file may stay, but recognisably named
        if [ -z "$left" ] || echo "$left" | grep -qx '\.out\.gguf\.tmp\.[A-Za-z0-9]\{6\}'; then
            pass "$2: only a recognisable temporary file may remain"
        else fail "$2: only a recognisable temporary file may remain" "left: $left"; fi
    else
        if [ -z "$left" ]; then pass "$2: temporary file removed"
        else fail "$2: temporary file removed" "left: $left"; fi
    fi
    rm -f .out.gguf.tmp.*
}
kill_case KILL "SIGKILL mid-write"
kill_case TERM "SIGTERM mid-write"

rm -f new.gguf
"$B" synth --shape smollm2-135m --type f32 -o new.gguf >log 2>&1 &
pid=$!
wait_started $pid new.gguf; started=$?
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
if [ $started -eq 0 ] && [ ! -e new.gguf ]; then pass "SIGKILL mid-write: no partial new OUT"
else fail "SIGKILL mid-write: no partial new OUT" "started=$started, new.gguf: $(describe new.gguf)"; fi
rm -f .new.gguf.tmp.*

# ---- permissions ----
cp m.orig priv.gguf; chmod 600 priv.gguf
"$B" synth --shape tiny-llama --type q4_0 -o priv.gguf >log 2>&1; rc=$?
if [ $rc -eq 0 ] && [ "$(stat -c %a priv.gguf)" = 600 ]; then pass "replacing keeps OUT's permissions"
else fail "replacing keeps OUT's permissions" "rc=$rc, mode $(stat -c %a priv.gguf)"; fi
rm -f fresh.gguf; touch ref.mode
"$B" synth --shape tiny-llama --type q4_0 -o fresh.gguf >log 2>&1; rc=$?
if [ $rc -eq 0 ] && [ "$(stat -c %a fresh.gguf)" = "$(stat -c %a ref.mode)" ]; then pass "new OUT has a new file's mode"
else fail "new OUT has a new file's mode" "rc=$rc, mode $(stat -c %a fresh.gguf 2>/dev/null), touch gives $(stat -c %a ref.mode)"; fi

# ---- OUT a symbolic link to a regular file: the target is replaced, the link kept ----
cp m.orig target.gguf; ln -s target.gguf tl.gguf
"$B" synth --shape tiny-llama --type q4_0 -o tl.gguf >log 2>&1; rc=$?
if [ $rc -eq 0 ] && [ -L tl.gguf ] && ! cmp -s target.gguf m.orig && opens target.gguf && [ -z "$(temps)" ]; then
    pass "OUT a symbolic link: target replaced, link kept"
else fail "OUT a symbolic link: target replaced, link kept" "rc=$rc, tl.gguf: $(describe tl.gguf)"; fi

# ---- a reader keeps running while its file is replaced ----
cp big.gguf r.gguf
"$B" run -m r.gguf -p "hello" -n 48 --ignore-eos -t 1 >run.out 2>run.err &
rpid=$!
i=0; while [ $i -lt 600 ] && [ ! -s run.out ] && kill -0 $rpid 2>/dev/null; do sleep 0.05; i=$((i+1)); done
"$B" quantize m.gguf r.gguf q4_0 >log 2>&1; qrc=$?
wait $rpid; rrc=$?
if [ $qrc -eq 0 ] && [ $rrc -eq 0 ] && [ -s run.out ] && "$B" info r.gguf 2>&1 | grep -q tiny; then
    pass "minfer run survives its file being quantized into"
else fail "minfer run survives its file being quantized into" "quantize rc=$qrc ($(tail -1 log)), run rc=$rrc ($(tail -1 run.err))"; fi

# ---- full disk, read-only directory, device node (root only) ----
if [ $ROOT = 0 ]; then
    skip "ENOSPC on a small tmpfs" "not root (mount needs it)"
    skip "read-only bind mount" "not root (mount needs it)"
    skip "device node OUT" "not root (mknod needs it)"
else
    mkdir small
    if mount -t tmpfs -o size=8m tmpfs small 2>log; then
        MOUNTS+=("$T/small")
        nospace_case() { # label command...
            local label=$1; shift
            cp m.orig small/out.gguf
            "$@" >log 2>&1; local rc=$?
            if clean_fail $rc && grep -qi "no space" log && cmp -s small/out.gguf m.orig && opens small/out.gguf &&
               [ "$(ls -A small)" = out.gguf ]; then pass "ENOSPC: $label"
            else fail "ENOSPC: $label" "rc=$rc, out.gguf: $(describe small/out.gguf), dir: $(ls -A small | tr '\n' ' '), stderr: $(tail -1 log)"; fi
        }
        nospace_case "synth keeps the existing OUT" "$B" synth --shape tiny-qwen3 --type f32 -o small/out.gguf
        nospace_case "quantize keeps the existing OUT" "$B" quantize m.gguf small/out.gguf f32
        "$B" synth --shape tiny-qwen3 --type f32 -o small/new.gguf >log 2>&1; rc=$?
        if clean_fail $rc && [ ! -e small/new.gguf ] && [ -z "$(temps small)" ]; then pass "ENOSPC: no partial new OUT"
        else fail "ENOSPC: no partial new OUT" "rc=$rc, dir: $(ls -A small | tr '\n' ' ')"; fi
    else
        skip "ENOSPC on a small tmpfs" "mount -t tmpfs not permitted: $(head -1 log)"
    fi

    mkdir ro; cp m.orig ro/out.gguf
    if mount --bind ro ro 2>log && MOUNTS+=("$T/ro") && mount -o remount,bind,ro ro 2>>log; then
        "$B" synth --shape tiny-llama --type q4_0 -o ro/out.gguf >log 2>&1; rc=$?
        if clean_fail $rc && grep -qi "read-only" log && cmp -s ro/out.gguf m.orig; then pass "read-only directory: clean refusal, OUT intact"
        else fail "read-only directory: clean refusal, OUT intact" "rc=$rc, out.gguf: $(describe ro/out.gguf), stderr: $(tail -1 log)"; fi
    else
        skip "read-only bind mount" "mount --bind not permitted: $(head -1 log)"
    fi

    # a private copy of /dev/full (same major/minor): a write error there must not unlink it
    if mknod full c 1 7 2>log; then
        ln -s full full.link
        for cmd in "quantize m.gguf full q4_0" "synth --shape tiny-llama --type q8_0 -o full" \
                   "quantize m.gguf full.link q4_0" "run -m m.gguf -p hi -n 1 -t 1 --dump-logits full"; do
            rm -f full; mknod full c 1 7   # afresh: a failed case must not spoil the next
            before=$(stat -c '%F %t:%T %i' full)
            # shellcheck disable=SC2086
            "$B" $cmd >log 2>&1; rc=$?
            after=$(stat -c '%F %t:%T %i' full 2>/dev/null || echo missing)
            if clean_fail $rc && [ "$after" = "$before" ] && [ -L full.link ] && [ -z "$(temps)" ]; then
                pass "device node OUT ($cmd): refused, not unlinked"
            else fail "device node OUT ($cmd): refused, not unlinked" "rc=$rc, before '$before', after '$after', stderr: $(tail -1 log)"; fi
            [ -L full.link ] || ln -s full full.link
        done
    else
        skip "device node OUT" "mknod not permitted: $(head -1 log)"
    fi
fi

echo "$P passed, $F failed, $S skipped"
[ $F -eq 0 ]

#!/usr/bin/env python3
"""Gate: what a file or a flag claims is checked before it is allocated, and a forward
that yields NaN/Inf logits says so.
- A few-MiB GGUF whose tensors share one data range but whose hyper-parameters claim
  enough wide layers for a KV cache over twice this machine's memory: `minfer run` must
  refuse quickly (exit 1, small max RSS) with a message naming the KV cache, the bytes
  needed and available (MiB/GiB/TiB) and the flag to change (-c N_CTX).
- `-c 16777216` on a smaller file of the same kind: refused the same way, naming the
  context; with --kv f32 the message also names --kv f16; `bench -p 1048576` likewise.
- A graph whose workspace exceeds what RLIMIT_AS leaves (8192 tokens, wide heads, one
  graph): refused by the scheduler before allocating, naming the workspace.
- Control: the same writer with a small shape runs (exit 0), so the refusals above are
  the memory check, not a broken file.
- All weights NaN: `minfer run` exits 1 with "logits are not finite" (not greedy token 0).
A child's address space is capped (RLIMIT_AS) so a build without the check fails
allocating instead of filling the machine.
Usage: py_resource_guard.py BUILD"""
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shared_range_gguf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
MINFER = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "minfer")
AS_CAP = 16 << 30
SIZE = re.compile(r"\d+\.\d (MiB|GiB|TiB)")

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok   %s" % name)
    else:
        failed += 1
        print("FAIL %s %s" % (name, detail))


def mem_total():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 64 << 30


def cap_as(limit=AS_CAP):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run(model, *args, timeout=120, tokens="1,2,3", as_cap=AS_CAP, env=None):
    """(rc, stderr, seconds, max RSS in MiB of the children so far)."""
    t0 = time.time()
    p = subprocess.Popen([MINFER, "run", "-m", model, "--tokens", tokens, "-n", "2", "-t", "2"] + list(args),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=cap_as(as_cap),
                         env=dict(os.environ, MINFER_DISABLE_CUDA="1", **(env or {})))
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return -9, err.decode(errors="replace") + "\n(timed out)", time.time() - t0, 0
    # wait4 is done by communicate(); read this child's peak from /usr/bin/time-free rusage
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return p.returncode, err.decode(errors="replace"), time.time() - t0, ru.ru_maxrss / 1024.0


def refused(name, rc, err, dt, rss, want):
    last = [l for l in err.splitlines() if l.strip()][-1:] or [""]
    msg = last[0]
    ok = rc == 1 and dt < 20 and rss < 1024 and SIZE.search(msg) is not None and \
        "available" in msg and all(w in msg for w in want)
    check(name, ok, "rc=%s %.1fs maxrss %.0f MiB, wanted %s in the last line: %r" % (rc, dt, rss, want, msg))


def main():
    if not os.access(MINFER, os.X_OK):
        print("no binary %s" % MINFER)
        print("0 passed, 1 failed")
        return 1
    tmp = tempfile.mkdtemp(prefix="mi-resguard-")
    # refusals first: RUSAGE_CHILDREN's peak then covers only them
    # each layer's f16 KV at the default context (4096): 2 x 4096 x 16384 x 2 B = 256 MiB
    per_layer = 2 * 4096 * 16384 * 2
    n_layer = max(64, -(-2 * mem_total() // per_layer))
    huge = os.path.join(tmp, "huge.gguf")
    size = shared_range_gguf.write(huge, n_layer, 64, 128, 128, 128, 128, 256, 1 << 20)
    check("huge file is small (%d layers in %.1f MiB)" % (n_layer, size / 1048576.0), size < 16 << 20)
    rc, err, dt, rss = run(huge)
    refused("KV cache over twice the machine's memory (default context)", rc, err, dt, rss,
            ["KV cache", "-c N_CTX", "%d layers" % n_layer])

    wide = os.path.join(tmp, "wide.gguf")
    shared_range_gguf.write(wide, 64, 64, 128, 128, 128, 128, 256, 1 << 20)
    rc, err, dt, rss = run(wide, "-c", "16777216")
    refused("-c 16777216", rc, err, dt, rss, ["KV cache", "-c N_CTX", "16777216"])
    rc, err, dt, rss = run(wide, "-c", "16777216", "--kv", "f32")
    refused("-c 16777216 --kv f32", rc, err, dt, rss, ["KV cache", "-c N_CTX", "--kv f16"])

    # bench sizes the context from -p and -n: the same check, printed, exit 1
    t0 = time.time()
    p = subprocess.run([MINFER, "bench", "-m", wide, "-p", "1048576", "-n", "1", "-r", "1", "-t", "2"],
                       capture_output=True, text=True, preexec_fn=cap_as(), timeout=120,
                       env=dict(os.environ, MINFER_DISABLE_CUDA="1"))
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    refused("bench -p 1048576", p.returncode, p.stderr, time.time() - t0, rss, ["KV cache", "1048576", "-p"])

    # the graph's workspace: 8192 tokens of 512 heads x 128 in one graph (MINFER_UBATCH=0)
    # need ~4 GiB; under a 2 GiB address-space limit the scheduler refuses before allocating
    ws = os.path.join(tmp, "ws.gguf")
    shared_range_gguf.write(ws, 1, 64, 512, 1, 128, 128, 256, 1 << 16)
    rc, err, dt, rss = run(ws, "-c", "8192", tokens=",".join(["1"] * 8192), as_cap=2 << 30,
                           env={"MINFER_UBATCH": "0"})
    refused("graph workspace over the address-space limit (ulimit -v)", rc, err, dt, rss,
            ["workspace", "fewer tokens per graph"])

    small = os.path.join(tmp, "small.gguf")
    shared_range_gguf.write(small, 2, 64, 4, 2, 16, 128, 256, 512)
    rc, err, dt, rss = run(small)
    check("control: a small shared-range file runs", rc == 0, "rc=%s: %s" % (rc, err[-400:]))

    nan = os.path.join(tmp, "nan.gguf")
    shared_range_gguf.write(nan, 2, 64, 4, 2, 16, 128, 256, 512, fill=float("nan"))
    rc, err, dt, rss = run(nan)
    check("NaN weights: run fails saying the logits are not finite", rc == 1 and "logits are not finite" in err,
          "rc=%s: %r" % (rc, err[-300:]))
    inf = os.path.join(tmp, "inf.gguf")
    shared_range_gguf.write(inf, 2, 64, 4, 2, 16, 128, 256, 512, fill=float("inf"))
    rc, err, dt, rss = run(inf, "-n", "0")
    check("Inf weights: a prompt alone fails the same way", rc == 1 and "logits are not finite" in err,
          "rc=%s: %r" % (rc, err[-300:]))
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

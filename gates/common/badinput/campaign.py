"""Runs every file of a gen.py manifest through `minfer info`, `minfer run` and `minfer
quantize` (a sanitizer build), two at a time, and judges each command:
  hang      it ran past the per-command timeout
  sanitizer ASan/UBSan/LSan reported (stderr), whatever the exit status
  crash     killed by a signal, or a sanitizer's exit status
  unclear   non-zero exit without a readable message on stderr
  accepted  exit 0: a failure when `run` accepts a file that must be rejected, or when an
            unmutated base is not accepted by all three
  rejected  non-zero exit with a message
One pass per category (and one for the bases) when none of its files fails.

    python campaign.py MINFER MANIFEST WORKDIR [--timeout S] [--jobs N]
"""
import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

SAN_MARKS = ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer", "ERROR: UndefinedBehaviorSanitizer")
SAN_EXIT = {86, 87, 23}
ENV = dict(os.environ,
           ASAN_OPTIONS="detect_leaks=1:exitcode=86:allocator_may_return_null=1:max_allocation_size_mb=3072"
                        ":handle_abort=1:symbolize=1",
           UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=87",
           LSAN_OPTIONS="exitcode=23", MINFER_NO_PROGRESS="1")


def commands(minfer, path, tmp):
    return {"info": [minfer, "info", path],
            "run": [minfer, "run", "-m", path, "-p", "hi", "-n", "2", "-t", "1"],
            "quantize": [minfer, "quantize", path, os.path.join(tmp, "out.gguf"), "q8_0"]}


def judge(rc, err, timed_out):
    if timed_out:
        return "hang"
    if any(m in err for m in SAN_MARKS):
        return "sanitizer"
    if rc < 0 or rc in SAN_EXIT or rc >= 128:
        return "crash"
    if rc == 0:
        return "accepted"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if not lines or not lines[-1].isprintable() or len(lines[-1]) > 2000:
        return "unclear"
    return "rejected"


def run_file(minfer, item, timeout):
    tmp = tempfile.mkdtemp(prefix="badin-")
    out = {}
    try:
        for name, cmd in commands(minfer, item["path"], tmp).items():
            t0 = time.time()
            try:
                p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   timeout=timeout, env=ENV, cwd=tmp)
                rc, err, to = p.returncode, p.stderr.decode(errors="replace"), False
            except subprocess.TimeoutExpired as e:
                rc, err, to = -9, (e.stderr or b"").decode(errors="replace"), True
            out[name] = (judge(rc, err, to), rc, err, time.time() - t0, cmd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return item, out


def failure(item, res):
    """Why this file fails the gate, or None."""
    for name, (v, rc, err, dt, cmd) in res.items():
        if v in ("hang", "sanitizer", "crash", "unclear"):
            return name, v
    if item.get("must_accept") and any(r[0] != "accepted" for r in res.values()):
        bad = [n for n, r in res.items() if r[0] != "accepted"][0]
        return bad, "base not accepted"
    if item["must_reject"] and res["run"][0] == "accepted":
        return "run", "invalid file accepted"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("minfer")
    ap.add_argument("manifest")
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--messages", help="write every rejection's last stderr line here (for review)")
    a = ap.parse_args()
    a.minfer = os.path.abspath(a.minfer)   # commands run in a temporary directory
    items = [json.loads(ln) for ln in open(a.manifest)]
    for it in items:
        it["path"] = os.path.abspath(it["path"])
    cols = ["rejected", "accepted", "crash", "sanitizer", "hang", "unclear"]
    table = collections.OrderedDict()
    fails, slow, msgs = [], [], []
    t0 = time.time()
    with ThreadPoolExecutor(a.jobs) as ex:
        for item, res in ex.map(lambda it: run_file(a.minfer, it, a.timeout), items):
            row = table.setdefault(item["category"], collections.Counter())
            row["files"] += 1
            for v, *_ in res.values():
                row[v] += 1
            f = failure(item, res)
            if f:
                row["FAILED"] += 1
                fails.append((item, f, res[f[0]]))
            slow.extend((r[3], n, item["path"]) for n, r in res.items())
            msgs.extend(f"{item['category']}\t{n}\t{[ln for ln in r[2].splitlines() if ln.strip()][-1]}"
                        for n, r in res.items() if r[0] == "rejected")
    print(f"bad-input campaign: {len(items)} files x (info, run, quantize) in {time.time() - t0:.0f}s, "
          f"timeout {a.timeout:.0f}s per command")
    print(f"{'category':14s} {'files':>5s} " + " ".join(f"{c:>9s}" for c in cols) + f" {'FAILED':>7s}")
    total = collections.Counter()
    for cat, row in table.items():
        total.update(row)
        print(f"{cat:14s} {row['files']:5d} " + " ".join(f"{row[c]:9d}" for c in cols) + f" {row['FAILED']:7d}")
    print(f"{'total':14s} {total['files']:5d} " + " ".join(f"{total[c]:9d}" for c in cols) + f" {total['FAILED']:7d}")
    print("(counts per command; a file fails on a crash, sanitizer report, hang, unclear rejection, "
          "an invalid file accepted by run, or a base not accepted)")
    slow.sort(reverse=True)
    print("slowest commands: " + ", ".join(f"{n} {os.path.basename(p)} {t:.1f}s" for t, n, p in slow[:3]))
    for item, (cmd_name, why), (v, rc, err, dt, cmd) in fails[:15]:
        print(f"\nFAIL {item['category']}: {why} ({cmd_name}, exit {rc}): {item['what']}")
        print("  reproduce: " + " ".join(cmd))
        tail = [ln for ln in err.splitlines() if ln.strip()][-12:]
        for ln in tail:
            print("    " + ln[:300])
    if len(fails) > 15:
        print(f"\n... and {len(fails) - 15} more failures")
    if a.messages:
        with open(a.messages, "w") as f:
            f.write("\n".join(msgs) + "\n")
    passed = sum(1 for row in table.values() if not row["FAILED"])
    failed = len(table) - passed
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

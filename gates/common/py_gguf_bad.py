#!/usr/bin/env python3
"""Gate: corrupted GGUF files. Starting from a valid small file written by the PyPI gguf
writer (and a few variants of it), builds 40+ broken files: truncation inside every
section, bad magic/version, unknown value/element/tensor types, n_dims out of range,
zero and overflowing dimensions, offsets past the end / misaligned / wrapping, huge
string/array/key lengths, duplicate keys and tensor names, bad general.alignment, deep
nesting, control bytes in names, a missing required key (info --require). For each,
`BUILD/minfer info FILE` must exit with status 1 (not 0, not a signal), print nothing
on stdout and exactly one line "minfer: FILE: ..." on stderr.
Usage: py_gguf_bad.py BUILD"""
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_testfiles  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
MINFER = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "minfer")


def walk(data):
    """Offsets of every header item of a GGUF image (only the types the base uses)."""
    o = {"kv": [], "ti": []}
    pos = 24
    n_t, n_kv = struct.unpack_from("<QQ", data, 8)
    for _ in range(n_kv):
        kv = {"klen": pos}
        (kl,) = struct.unpack_from("<Q", data, pos)
        kv["key"] = data[pos + 8:pos + 8 + kl].decode()
        pos += 8 + kl
        kv["type"] = pos
        (vt,) = struct.unpack_from("<I", data, pos)
        pos += 4
        kv["val"] = pos
        if vt == 8:
            (sl,) = struct.unpack_from("<Q", data, pos)
            pos += 8 + sl
        elif vt == 9:
            et, n = struct.unpack_from("<IQ", data, pos)
            kv["n"] = pos + 4
            pos += 12
            kv["elems"] = pos
            for _ in range(n):
                assert et == 8
                (sl,) = struct.unpack_from("<Q", data, pos)
                pos += 8 + sl
        else:
            pos += {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[vt]
        o["kv"].append(kv)
    for _ in range(n_t):
        ti = {"nlen": pos}
        (nl,) = struct.unpack_from("<Q", data, pos)
        ti["name"] = data[pos + 8:pos + 8 + nl].decode()
        pos += 8 + nl
        ti["ndims"] = pos
        (nd,) = struct.unpack_from("<I", data, pos)
        pos += 4
        ti["dims"] = pos
        pos += 8 * nd
        ti["type"] = pos
        pos += 4
        ti["off"] = pos
        pos += 8
        o["ti"].append(ti)
    o["end_infos"] = pos
    o["data"] = (pos + 31) // 32 * 32
    return o


def patch(data, off, fmt, *vals):
    b = bytearray(data)
    struct.pack_into(fmt, b, off, *vals)
    return bytes(b)


def kv_by(o, key):
    return next(k for k in o["kv"] if k["key"] == key)


def ti_by(o, name):
    return next(t for t in o["ti"] if t["name"] == name)


def cases(tmp):
    base_path = os.path.join(tmp, "base.gguf")
    gguf_testfiles.write_small(base_path)
    base = open(base_path, "rb").read()
    o = walk(base)
    name_kv, tok_kv = kv_by(o, "general.name"), kv_by(o, "tokenizer.ggml.tokens")
    ta, tb = ti_by(o, "a.weight"), ti_by(o, "b.weight")   # a: F32 [32, 2]; b: Q4_0 [64, 2]
    b_end = o["data"] + struct.unpack_from("<Q", base, tb["off"])[0] + 72
    c = []
    # truncations, one inside each section
    for what, n in [("empty file", 0), ("inside magic", 2), ("inside version", 6), ("inside counts", 16),
                    ("inside first key length", 27), ("inside a key", tok_kv["klen"] + 12),
                    ("inside a value type", o["kv"][1]["type"] + 2), ("inside a string value", name_kv["val"] + 10),
                    ("inside a string array", tok_kv["elems"] + 9), ("inside a tensor name", ta["nlen"] + 10),
                    ("inside tensor dims", ta["dims"] + 5), ("inside tensor type", tb["type"] + 1),
                    ("inside tensor offset", tb["off"] + 3), ("before the data section", o["end_infos"]),
                    ("inside the first tensor's data", o["data"] + 100), ("last tensor 1 byte short", b_end - 1)]:
        c.append((f"truncated {what}", base[:n], []))
    c.append(("bad magic", b"GGML" + base[4:], []))
    c.append(("text file", b"hello, this is not a model\n" * 4, []))
    c.append(("version 1", patch(base, 4, "<I", 1), []))
    c.append(("version 4", patch(base, 4, "<I", 4), []))
    c.append(("big-endian version", patch(base, 4, ">I", 3), []))
    c.append(("n_kv 2^63", patch(base, 16, "<Q", 1 << 63), []))
    c.append(("n_tensors 2^64-1", patch(base, 8, "<Q", 2**64 - 1), []))
    c.append(("n_kv one too many", patch(base, 16, "<Q", len(o["kv"]) + 1), []))
    c.append(("n_tensors one too many", patch(base, 8, "<Q", len(o["ti"]) + 1), []))
    c.append(("unknown value type 13", patch(base, o["kv"][1]["type"], "<I", 13), []))
    c.append(("unknown array element type", patch(base, tok_kv["val"], "<I", 77), []))
    c.append(("string length 2^63", patch(base, name_kv["val"], "<Q", 1 << 63), []))
    c.append(("string length 2^64-1", patch(base, name_kv["val"], "<Q", 2**64 - 1), []))
    c.append(("array length 2^61", patch(base, tok_kv["n"], "<Q", 1 << 61), []))
    c.append(("key length 2^40", patch(base, o["kv"][1]["klen"], "<Q", 1 << 40), []))
    c.append(("tensor name length huge", patch(base, tb["nlen"], "<Q", 2**64 - 9), []))
    c.append(("unknown tensor type 99", patch(base, ta["type"], "<I", 99), []))
    c.append(("removed tensor type 4 (Q4_2)", patch(base, tb["type"], "<I", 4), []))
    c.append(("n_dims 5", patch(base, ta["ndims"], "<I", 5), []))
    c.append(("n_dims 0", patch(base, ta["ndims"], "<I", 0), []))
    c.append(("n_dims 2^32-1", patch(base, ta["ndims"], "<I", 2**32 - 1), []))
    c.append(("dimension 0", patch(base, ta["dims"] + 8, "<Q", 0), []))
    c.append(("element count overflow", patch(base, ta["dims"], "<QQ", 1 << 32, 1 << 32), []))
    c.append(("dimension 2^63", patch(base, ta["dims"], "<Q", 1 << 63), []))
    c.append(("row not a multiple of the Q4_0 block", patch(base, tb["dims"], "<Q", 33), []))
    c.append(("tensor larger than the file", patch(base, ta["dims"] + 8, "<Q", 1 << 40), []))
    c.append(("offset past the end", patch(base, tb["off"], "<Q", 1 << 20), []))
    c.append(("offset misaligned", patch(base, tb["off"], "<Q", struct.unpack_from("<Q", base, tb["off"])[0] + 4), []))
    c.append(("offset wraps around 2^64", patch(base, tb["off"], "<Q", 2**64 - 32), []))
    dup_t = bytearray(base)
    dup_t[tb["nlen"] + 8] = ord("a")
    c.append(("duplicate tensor name", bytes(dup_t), []))
    dup_k = bytearray(base)   # llama.rope.freq_base -> general.architecture (same length)
    k = kv_by(o, "llama.rope.freq_base")
    dup_k[k["klen"] + 8:k["klen"] + 28] = b"general.architecture"
    c.append(("duplicate key", bytes(dup_k), []))
    nul = bytearray(base)
    nul[ta["nlen"] + 9] = 0
    c.append(("NUL byte in a tensor name", bytes(nul), []))
    c.append(("missing required key general.architecture",
              base.replace(b"general.architecture", b"general.architecturX", 1), ["--require", "general.architecture"]))
    rnd = bytearray(base)
    seed = 12345
    for i in range(24, o["end_infos"]):   # garble the whole header after the counts
        seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
        rnd[i] = seed >> 16 & 255
    c.append(("garbled header", bytes(rnd), []))
    # variants written by the gguf writer itself
    def var(fname, extra):
        path = os.path.join(tmp, fname)
        gguf_testfiles.write_small(path, extra)
        return open(path, "rb").read()
    c.append(("general.alignment 0", var("a0.gguf", lambda w: w.add_uint32("general.alignment", 0)), []))
    c.append(("general.alignment 48", var("a48.gguf", lambda w: w.add_uint32("general.alignment", 48)), []))
    c.append(("general.alignment a string", var("as.gguf", lambda w: w.add_string("general.alignment", "32")), []))
    deep = 1
    for _ in range(40):
        deep = [deep]
    c.append(("arrays nested 40 deep", var("deep.gguf", lambda w: w.add_array("x.deep", deep)), []))
    c.append(("newline in a key", var("nl.gguf", lambda w: w.add_uint32("bad\nkey", 1)), []))
    return c


def main():
    if not os.access(MINFER, os.X_OK):
        print(f"FAIL: {MINFER} not built")
        print("0 passed, 1 failed")
        return 1
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="gguf_bad_") as tmp:
        all_cases = cases(tmp)
        for i, (label, data, args) in enumerate(all_cases):
            path = os.path.join(tmp, f"bad{i:02d}.gguf")
            with open(path, "wb") as f:
                f.write(data)
            p = subprocess.run([MINFER, "info", path] + args, capture_output=True, timeout=20)
            err = p.stderr.decode(errors="replace")
            lines = err.splitlines()
            problems = []
            if p.returncode < 0:
                problems.append(f"killed by signal {-p.returncode}")
            elif p.returncode != 1:
                problems.append(f"exit {p.returncode}, want 1")
            if len(lines) != 1 or not err.endswith("\n"):
                problems.append(f"{len(lines)} stderr lines, want 1")
            elif not lines[0].startswith(f"minfer: {path}: "):
                problems.append("stderr line is not 'minfer: FILE: message'")
            if p.stdout:
                problems.append(f"{len(p.stdout)} bytes on stdout")
            msg = lines[0].replace(f"minfer: {path}: ", "") if lines else ""
            if problems:
                failed += 1
                print(f"FAIL {i:2d} {label}: {'; '.join(problems)}; stderr: {err[:300]!r}")
            else:
                passed += 1
                print(f"ok   {i:2d} {label:42s} -> {msg}")
        p = subprocess.run([MINFER, "info", os.path.join(tmp, "does-not-exist.gguf")], capture_output=True)
        ok = p.returncode == 1 and len(p.stderr.decode().splitlines()) == 1
        print(f"{'ok  ' if ok else 'FAIL'} -- missing file -> {p.stderr.decode().strip()}")
        passed += ok
        failed += not ok
    print(f"{len(all_cases)} corrupted files")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

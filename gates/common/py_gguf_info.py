#!/usr/bin/env python3
"""Gate: `minfer info --json` agrees with the PyPI gguf package's GGUFReader on every
metadata key (type, value / array type, length, contents or hash) and every tensor
(name, type, shape, offset, bytes), on:
  - files written by gguf's GGUFWriter (every value type, alignment 32/64, a v2 header),
  - a file written by our writer (BUILD/gates/common/gate_gguf_write), checked by GGUFReader,
  - tiny files from `minfer synth` (when built),
  - every models/*.gguf (skipped when there are none) and the files named in
    MINFER_GGUF_EXTRA (colon-separated, e.g. written by `minfer synth`).
Also: peak RSS of `minfer info` on the largest file (real or a 2 GB sparse synthetic one)
stays under 100 MB: the reader maps the file and touches only the header.
Usage: py_gguf_info.py BUILD"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import gguf  # noqa: E402
from gguf import GGUFValueType as VT  # noqa: E402
import gguf_testfiles  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
MINFER = os.path.join(ROOT, BUILD, "minfer") if not os.path.isabs(BUILD) else os.path.join(BUILD, "minfer")
GATE_WRITE = os.path.join(os.path.dirname(MINFER), "gates", "common", "gate_gguf_write")
SMALL = 64          # must match INFO_SMALL_ARRAY in tools/cmd_info.c
RSS_LIMIT_MB = 100

VT_NAME = {VT.UINT8: "u8", VT.INT8: "i8", VT.UINT16: "u16", VT.INT16: "i16", VT.UINT32: "u32",
           VT.INT32: "i32", VT.FLOAT32: "f32", VT.BOOL: "bool", VT.STRING: "str", VT.ARRAY: "arr",
           VT.UINT64: "u64", VT.INT64: "i64", VT.FLOAT64: "f64"}
PSEUDO = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}

passed = failed = skipped = 0


def same_scalar(got, want, vt):
    if vt in (VT.FLOAT32, VT.FLOAT64):
        want = float(want)
        if isinstance(got, str):
            return False
        if math.isnan(want):
            return isinstance(got, float) and math.isnan(got)
        if vt == VT.FLOAT32:
            return np.float32(got) == np.float32(want)
        return float(got) == want
    if vt == VT.BOOL:
        return bool(got) == bool(want) and isinstance(got, bool)
    return int(got) == int(want)


def flatten(values):
    out = []
    for v in values:
        if isinstance(v, dict):
            if "values" not in v:
                return None
            sub = flatten(v["values"])
            if sub is None:
                return None
            out += sub
        else:
            out.append(v)
    return out


def compare_field(key, field, ours, errs):
    """field: GGUFReader ReaderField; ours: the dict from our --json."""
    vt = field.types[0]
    if ours["type"] != VT_NAME[vt]:
        errs.append(f"kv {key}: type got {ours['type']} want {VT_NAME[vt]}")
        return
    if vt == VT.STRING:
        want = bytes(field.parts[field.data[0]]).decode("utf-8", "surrogateescape")
        if ours["value"] != want:
            errs.append(f"kv {key}: value got {ours['value']!r} want {want!r}")
        return
    if vt != VT.ARRAY:
        want = field.parts[field.data[0]][0]
        if not same_scalar(ours["value"], want, vt):
            errs.append(f"kv {key}: value got {ours['value']!r} want {want!r}")
        return
    # arrays: parts = [klen, key, vtype, elem type, count, ...elements]
    elem = VT(int(field.parts[3][0]))
    n = int(field.parts[4][0])
    if ours["elem"] != VT_NAME[elem] or ours["n"] != n:
        errs.append(f"kv {key}: array got {ours['elem']} x {ours['n']} want {VT_NAME[elem]} x {n}")
        return
    leaf_type = field.types[-1]
    if elem == VT.STRING:
        want = [bytes(field.parts[i]) for i in field.data]
    elif elem == VT.ARRAY:
        want = [bytes(field.parts[i]) if leaf_type == VT.STRING else field.parts[i][0] for i in field.data]
    else:
        want = [field.parts[i][0] for i in field.data]
    if "values" in ours:
        got = ours["values"]
        if elem == VT.ARRAY:
            got = flatten(got)
            if got is None:
                return   # a long inner array: counts compared above
        if len(got) != len(want):
            errs.append(f"kv {key}: {len(got)} values, want {len(want)}")
            return
        for i, (g, w) in enumerate(zip(got, want)):
            if leaf_type == VT.STRING:
                ok = g == w.decode("utf-8", "surrogateescape")
            else:
                ok = same_scalar(g, w, leaf_type)
            if not ok:
                errs.append(f"kv {key}[{i}]: got {g!r} want {w!r}")
                return
        return
    if ours.get("crc32") is None:
        return
    if elem == VT.STRING:
        h = zlib.crc32(b"".join(struct.pack("<Q", len(s)) + s for s in want))
    else:
        h = zlib.crc32(b"".join(field.parts[i].tobytes() for i in field.data))
    if ours["crc32"] != f"{h:08x}":
        errs.append(f"kv {key}: crc32 got {ours['crc32']} want {h:08x}")


def compare_file(path, extra_check=None):
    global passed, failed
    name = os.path.relpath(path, ROOT) if path.startswith(ROOT) else os.path.basename(path)
    errs = []
    try:
        r = gguf.GGUFReader(path)
    except Exception as e:  # the reference cannot read it: nothing to compare
        print(f"FAIL {name}: GGUFReader: {e}")
        failed += 1
        return
    p = subprocess.run([MINFER, "info", "--json", path], capture_output=True)
    if p.returncode != 0:
        print(f"FAIL {name}: minfer info exit {p.returncode}: {p.stderr.decode(errors='replace').strip()}")
        failed += 1
        return
    d = json.loads(p.stdout.decode("utf-8", "surrogateescape"))
    version = int(r.fields["GGUF.version"].parts[0][0])
    for what, got, want in [("version", d["version"], version), ("alignment", d["alignment"], int(r.alignment)),
                            ("data_offset", d["data_offset"], r.data_offset)]:
        if got != want:
            errs.append(f"{what}: got {got} want {want}")
    fields = [(k, f) for k, f in r.fields.items() if k not in PSEUDO]
    ours = {kv["key"]: kv for kv in d["kv"]}
    if len(d["kv"]) != len(fields):
        errs.append(f"n_kv: got {len(d['kv'])} want {len(fields)}")
    for i, (k, f) in enumerate(fields):
        if i < len(d["kv"]) and d["kv"][i]["key"] != k:
            errs.append(f"kv #{i}: key got {d['kv'][i]['key']!r} want {k!r}")
        if k not in ours:
            errs.append(f"kv {k}: missing")
            continue
        compare_field(k, f, ours[k], errs)
    if len(d["tensors"]) != len(r.tensors):
        errs.append(f"n_tensors: got {len(d['tensors'])} want {len(r.tensors)}")
    for i, (g, t) in enumerate(zip(d["tensors"], r.tensors)):
        want = {"name": t.name, "type_id": int(t.tensor_type), "shape": [int(x) for x in t.shape],
                "abs_offset": int(t.data_offset), "nbytes": int(t.n_bytes), "n_elements": int(t.n_elements)}
        for k, w in want.items():
            if g[k] != w:
                errs.append(f"tensor {i} ({t.name}) {k}: got {g[k]} want {w}")
    if extra_check:
        extra_check(r, errs)
    if errs:
        failed += 1
        print(f"FAIL {name}: {len(errs)} mismatches; first:")
        for e in errs[:10]:
            print("   ", e)
    else:
        passed += 1
        print(f"ok   {name}: {len(fields)} keys, {len(r.tensors)} tensors agree")


def check_our_writer(r, errs):
    """Values our writer was given (gate_gguf_write.c), read by GGUFReader."""
    want = {"v.u8": 200, "v.i8": -100, "v.u16": 60000, "v.i16": -30000, "v.u32": 4000000000,
            "v.i32": -2000000000, "v.u64": 2**64 - 1, "v.i64": -2**63, "v.replaced": 42, "v.bool": True}
    for k, v in want.items():
        f = r.fields.get(k)
        if f is None or f.parts[f.data[0]][0] != v:
            errs.append(f"writer: {k} got {None if f is None else f.parts[f.data[0]][0]} want {v}")
    if "v.f32" not in r.fields or r.fields["v.f32"].parts[-1][0] != np.float32(0.1):
        errs.append("writer: v.f32")
    if "v.str" not in r.fields or r.fields["v.str"].contents() != "caf\u00e9 \"q\"\n":
        errs.append("writer: v.str")
    if "v.arr_str" not in r.fields or r.fields["v.arr_str"].contents() != ["x", "", "\u4e2d"]:
        errs.append("writer: v.arr_str")
    for i, t in enumerate(r.tensors):
        data = np.asarray(t.data).view(np.uint8).reshape(-1)
        expect = ((31 * i + np.arange(data.size)) & 255).astype(np.uint8)
        if not np.array_equal(data, expect):
            j = int(np.argmax(data != expect))
            errs.append(f"writer: tensor {t.name} byte {j}: got {data[j]} want {expect[j]}")


_RSS_PROBE = """
import os, sys
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ,
                     file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
_, status, ru = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), ru.ru_maxrss)
"""


def peak_rss_kb(cmd):
    """Exit code and peak RSS (KB) of cmd. Linux charges a process with the peak RSS of the
    address space it exec'd from, and this Python holds big test data. /usr/bin/time forks
    from its own small image, so its figure is cmd's alone; without it a fresh small Python
    spawns cmd and the figure includes that Python's ~10 MB (an upper bound)."""
    if os.access("/usr/bin/time", os.X_OK):
        p = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        return p.returncode, int(p.stderr.strip().splitlines()[-1])
    p = subprocess.run([sys.executable, "-c", _RSS_PROBE] + cmd, capture_output=True, text=True)
    rc, kb = p.stdout.split()
    return int(rc), int(kb)


def main():
    global passed, failed, skipped
    if not os.access(MINFER, os.X_OK):
        print(f"FAIL: {MINFER} not built")
        print("0 passed, 1 failed")
        return 1
    with tempfile.TemporaryDirectory(prefix="gguf_info_") as tmp:
        synth = []
        for fname, kw in [("full.gguf", {}), ("full_align64.gguf", {"alignment": 64}),
                          ("full_v2.gguf", {"version": 2})]:
            path = os.path.join(tmp, fname)
            gguf_testfiles.write_full(path, **kw)
            synth.append(path)
        path = os.path.join(tmp, "small.gguf")
        gguf_testfiles.write_small(path)
        synth.append(path)
        for path in synth:
            compare_file(path)
        if os.access(GATE_WRITE, os.X_OK):
            for align in (0, 64):
                path = os.path.join(tmp, f"ours_align{align}.gguf")
                p = subprocess.run([GATE_WRITE, path, str(align)], capture_output=True, text=True)
                if p.returncode != 0:
                    print(f"FAIL our writer: {p.stderr.strip()}")
                    failed += 1
                    continue
                compare_file(path, check_our_writer)
        else:
            print(f"skip our writer -> GGUFReader: {GATE_WRITE} not built (make gates)")
            skipped += 1

        models = sorted(os.path.join(ROOT, "models", f) for f in os.listdir(os.path.join(ROOT, "models"))
                        if f.endswith(".gguf")) if os.path.isdir(os.path.join(ROOT, "models")) else []
        # files from `minfer synth` (our writer, real tensor layouts), when that command is built
        if subprocess.run([MINFER, "synth", "--list"], capture_output=True).returncode == 0:
            for shape, mix in [("tiny-llama", "q4_k_m"), ("tiny-qwen2", "q4_0"), ("tiny-qwen3", "q8_0")]:
                path = os.path.join(tmp, f"synth-{shape}-{mix}.gguf")
                p = subprocess.run([MINFER, "synth", "--shape", shape, "--type", mix, "-o", path],
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    print(f"FAIL minfer synth {shape} {mix}: {p.stderr.strip()[:300]}")
                    failed += 1
                else:
                    compare_file(path)
        else:
            print("skip minfer synth files: synth not built into this binary")
            skipped += 1
        extra = os.environ.get("MINFER_GGUF_EXTRA", "")   # more files, e.g. a 7B synth file
        models += [p for p in extra.split(":") if p.endswith(".gguf") and os.path.isfile(p)]
        if not models:
            print("skip real files: no models/*.gguf (make models)")
            skipped += 1
        for m in models:
            compare_file(m)

        # peak RSS: on the largest real file and on a 2 GB synthetic file (sparse: its
        # tensor data is a hole, so only a reader that copies it would pay for it)
        big = os.path.join(tmp, "big_sparse.gguf")
        gguf_testfiles.write_big_sparse(big)
        _, floor_kb = peak_rss_kb(["/bin/true"])   # what the measurement itself contributes
        for path in [big] + ([max(models, key=os.path.getsize)] if models else []):
            rc, kb = peak_rss_kb([MINFER, "info", path])
            size_mb = os.path.getsize(path) / 2**20
            ok = rc == 0 and kb < RSS_LIMIT_MB * 1024
            print(f"{'ok  ' if ok else 'FAIL'} peak RSS of minfer info on {os.path.basename(path)} "
                  f"({size_mb:.0f} MiB): {kb / 1024:.1f} MB (limit {RSS_LIMIT_MB} MB, exit {rc}; "
                  f"/bin/true measures {floor_kb / 1024:.1f} MB)")
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

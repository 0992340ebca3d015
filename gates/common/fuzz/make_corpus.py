#!/usr/bin/env python3
"""Regenerates the committed seed corpus of fuzz_gguf (gates/common/fuzz/corpus/): valid
files from the gguf PyPI writer and from ours (gate_gguf_write), and every corrupted case
of py_gguf_bad.py. Usage: make_corpus.py BUILD  (BUILD holds gates/common/gate_gguf_write)"""
import hashlib
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import gguf_testfiles  # noqa: E402
import py_gguf_bad  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
OUT = os.path.join(HERE, "corpus")


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    seeds = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, kw in [("full", {}), ("full_align64", {"alignment": 64}), ("full_v2", {"version": 2})]:
            p = os.path.join(tmp, name)
            gguf_testfiles.write_full(p, long_arrays=False, **kw)
            seeds.append(("valid_" + name, open(p, "rb").read()))
        p = os.path.join(tmp, "small")
        gguf_testfiles.write_small(p)
        seeds.append(("valid_small", open(p, "rb").read()))
        gw = os.path.join(ROOT, BUILD, "gates", "common", "gate_gguf_write")
        for align in (0, 64):
            p = os.path.join(tmp, f"ours{align}")
            subprocess.run([gw, p, str(align)], check=True)
            seeds.append((f"valid_ours_align{align}", open(p, "rb").read()))
        for label, data, _ in py_gguf_bad.cases(tmp):
            seeds.append(("bad_" + re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_"), data))
    total = 0
    for name, data in seeds:
        with open(os.path.join(OUT, f"{name}_{hashlib.sha1(data).hexdigest()[:8]}"), "wb") as f:
            f.write(data)
        total += len(data)
    print(f"{len(seeds)} seeds, {total} bytes in {OUT}")


if __name__ == "__main__":
    main()

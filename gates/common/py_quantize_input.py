#!/usr/bin/env python3
"""Gate for what `minfer quantize` tells the user about its input: NaN/Inf weights (F32,
F16, a 1D norm, a Q8_0 block with a NaN scale; copied or requantized) are refused with a
message naming the file, the tensor, the value and its row and column, and nothing is
written; an input that cannot be opened is named; sizes are printed in binary units
(MiB/GiB) by quantize and synth; a note says how many tensors fall back from the mix's
types and to which; a note says when an already quantized file is requantized.
Usage: py_quantize_input.py BUILD"""
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import gguf
from gguf import quants

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth_ref as R  # noqa: E402

rep = R.Report("py_quantize_input")
MINFER = R.minfer_bin(sys.argv)
TMP = tempfile.mkdtemp(prefix="minfer_qin_")


def path(name):
    return os.path.join(TMP, name)


def write_gguf(name, tensors):
    """tensors: (name, array) or (name, raw block bytes as uint8 [rows, bytes per row], GGMLQuantizationType)."""
    w = gguf.GGUFWriter(path(name), "llama")
    for t in tensors:
        if len(t) == 2:
            w.add_tensor(t[0], t[1])
        else:
            w.add_tensor(t[0], t[1], raw_dtype=t[2])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path(name)


def quantize(src, dst, mix):
    return R.run([MINFER, "quantize", src, dst, mix])


def leftovers(d=TMP):
    return [f for f in os.listdir(d) if ".tmp." in f]


rng = np.random.default_rng(7)


def weights(rows, cols, dtype=np.float32):
    return (rng.standard_normal((rows, cols)) * 0.02).astype(dtype)


# ---- non-finite input ----
good = weights(4, 64)
nan_f32 = good.copy()
nan_f32[2, 5] = np.nan
inf_f16 = weights(3, 64, np.float16)
inf_f16[1, 7] = np.inf
norm = np.ones(64, dtype=np.float32)
norm[9] = -np.inf
q8 = quants.quantize(weights(2, 64), gguf.GGMLQuantizationType.Q8_0)
q8 = np.ascontiguousarray(q8).view(np.uint8).reshape(-1).copy()
q8[34:36] = np.frombuffer(np.float16(np.nan).tobytes(), dtype=np.uint8)  # 2nd block's scale (row 0, cols 32..63)

cases = [
    ("F32 NaN", write_gguf("nan_f32.gguf", [("blk.0.attn_q.weight", nan_f32)]), "q4_0",
     "blk.0.attn_q.weight", "NaN", 2, 5),
    ("F16 +Inf", write_gguf("inf_f16.gguf", [("blk.0.attn_q.weight", good), ("blk.0.ffn_up.weight", inf_f16)]),
     "q8_0", "blk.0.ffn_up.weight", "+Inf", 1, 7),
    ("F16 +Inf kept as F16", path("inf_f16.gguf"), "f16", "blk.0.ffn_up.weight", "+Inf", 1, 7),
    ("1D norm -Inf", write_gguf("inf_norm.gguf", [("blk.0.attn_norm.weight", norm), ("blk.0.attn_q.weight", good)]),
     "q4_0", "blk.0.attn_norm.weight", "-Inf", 0, 9),
    ("Q8_0 NaN scale, copied", write_gguf("nan_q8.gguf", [("blk.0.attn_k.weight", q8.reshape(2, 68),
                                                          gguf.GGMLQuantizationType.Q8_0)]),
     "q8_0", "blk.0.attn_k.weight", "NaN", 0, 32),
    ("Q8_0 NaN scale, requantized", path("nan_q8.gguf"), "q4_0", "blk.0.attn_k.weight", "NaN", 0, 32),
]
for tag, src, mix, tname, what, row, col in cases:
    out = path("out.gguf")
    r = quantize(src, out, mix)
    msg = [ln for ln in r.stderr.splitlines() if "non-finite" in ln]
    want = "tensor '%s' holds a non-finite value (%s) at row %d, column %d" % (tname, what, row, col)
    rep.ok(0 < r.returncode < 128, tag + ": refused with an error exit", "rc %d, stderr %r" % (r.returncode, r.stderr[-300:]))
    rep.ok(bool(msg) and want in msg[0] and src in msg[0], tag + ": message names file, tensor, value, row, column",
           "want %r in %r" % (want, msg[:1] or r.stderr[-300:]))
    rep.ok(not os.path.exists(out) and not leftovers(), tag + ": nothing written",
           "out exists: %s, leftovers %r" % (os.path.exists(out), leftovers()))
    if os.path.exists(out):
        os.unlink(out)

ctl = write_gguf("good.gguf", [("blk.0.attn_q.weight", good), ("blk.0.attn_norm.weight", np.ones(64, np.float32))])
r = quantize(ctl, path("good_q4.gguf"), "q4_0")
rep.ok(r.returncode == 0 and os.path.exists(path("good_q4.gguf")), "finite input quantizes",
       "rc %d, %r" % (r.returncode, r.stderr[-300:]))

# ---- unreadable input is named ----
missing = path("no/such/model.gguf")
r = quantize(missing, path("x.gguf"), "q4_0")
rep.ok(r.returncode != 0 and missing in r.stderr, "missing IN: message names the file", repr(r.stderr))
junk = path("junk.gguf")
with open(junk, "wb") as f:
    f.write(b"not a gguf file at all" * 10)
r = quantize(junk, path("x.gguf"), "q4_0")
rep.ok(r.returncode != 0 and junk in r.stderr, "corrupt IN: message names the file", repr(r.stderr))

# ---- sizes in binary units ----
decimal = re.compile(r"\d GB\b|GB/s")
m_f32 = path("tl_f32.gguf")
r = R.run([MINFER, "synth", "--shape", "tiny-llama", "--type", "f32", "-o", m_f32])
rep.ok(r.returncode == 0 and "MiB" in r.stderr and not decimal.search(r.stderr), "synth prints sizes in MiB/GiB",
       repr(r.stderr[-400:]))
r = quantize(m_f32, path("tl_q8.gguf"), "q8_0")
rep.ok(r.returncode == 0 and "MiB" in r.stderr and not decimal.search(r.stderr), "quantize prints sizes in MiB/GiB",
       repr(r.stderr[-400:]))
for line in r.stderr.splitlines():
    if " -> " in line and "tensors" in line:
        mib = re.findall(r"([0-9.]+) MiB", line)
        want = os.path.getsize(m_f32)
        rep.ok(len(mib) == 2 and abs(float(mib[0]) * 1048576 - want) < 0.1 * want, "quantize size is MiB of 2^20 bytes",
               "%r vs input %d bytes" % (line, want))

# ---- fallback note ----
q2 = path("q2_f32.gguf")
R.run([MINFER, "synth", "--shape", "tiny-qwen2", "--type", "f32", "-o", q2])
r = quantize(q2, path("q2_k.gguf"), "q4_k_m")
m = re.search(r"note: (\d+) of (\d+) tensors fall back to other types.*?:((?: [A-Z0-9_]+->[A-Z0-9_]+ x\d+,?)+)", r.stderr)
if rep.ok(r.returncode == 0 and m is not None, "q4_k_m fallback: note printed", repr(r.stderr[-500:])):
    rd = gguf.GGUFReader(q2)
    # every 2D weight wants a 256-block K type under q4_k_m; those with shorter rows fall back
    want_n = sum(1 for t in rd.tensors if len(t.shape) >= 2 and int(t.shape[0]) % 256)
    pairs = {a: int(b) for a, b in re.findall(r"([A-Z0-9_]+->[A-Z0-9_]+) x(\d+)", m.group(3))}
    rep.ok(int(m.group(1)) == want_n and int(m.group(2)) == len(rd.tensors) and sum(pairs.values()) == want_n,
           "q4_k_m fallback: count", "note %r, want %d of %d" % (m.group(0), want_n, len(rd.tensors)))
    rep.ok(set(pairs) <= {"Q4_K->Q5_0", "Q6_K->Q8_0"} and "Q4_K->Q5_0" in pairs, "q4_k_m fallback: types",
           repr(pairs))
r = quantize(m_f32, path("tl_k.gguf"), "q4_k_m")
rep.ok(r.returncode == 0 and "fall back" not in r.stderr, "no fallback note when every row fits", repr(r.stderr[-300:]))

# ---- requantization note ----
r = quantize(path("tl_q8.gguf"), path("tl_q8_q4.gguf"), "q4_0")
rep.ok(r.returncode == 0 and re.search(r"note: .*tl_q8\.gguf is already quantized; \d+ tensors are requantized from Q8_0",
                                       r.stderr) is not None, "requantizing a Q8_0 file: note", repr(r.stderr[-400:]))
r = quantize(m_f32, path("tl_q4.gguf"), "q4_0")
rep.ok(r.returncode == 0 and "already quantized" not in r.stderr, "F32 input: no requantization note",
       repr(r.stderr[-300:]))
r = quantize(path("tl_q8.gguf"), path("tl_q8_q8.gguf"), "q8_0")
rep.ok(r.returncode == 0 and "already quantized" not in r.stderr, "Q8_0 -> q8_0 copies: no requantization note",
       repr(r.stderr[-300:]))

shutil.rmtree(TMP, ignore_errors=True)
rep.done()

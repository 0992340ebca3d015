#!/usr/bin/env python3
"""Gate for `minfer quantize`: tiny F32 synth models are quantized to every type and mix;
per-tensor types are checked against the independent rule in synth_ref.py, Q4_0..Q8_0 and
BF16/F16 tensors must be bit-identical to the PyPI gguf package's quantizer on the same
data, K-quant tensors (dequantized by gguf.quants) must be within relative-RMSE bounds;
requantization (Q8_0 -> Q4_0, Q6_K -> Q4_0) must equal gguf's quantize(dequantize(src));
metadata is copied with general.file_type updated. The mix rule is also checked against
the real llama.cpp-made Q4_K_M files of models/ (types of every tensor), and a real file
is requantized. Usage: py_quantize.py BUILD"""
import os
import sys
import tempfile

import numpy as np
import gguf
from gguf import quants

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth_ref as R  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
rep = R.Report("py_quantize")
MINFER = R.minfer_bin(sys.argv)
TMP = tempfile.mkdtemp(prefix="minfer_quant_")
EXACT = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16")
# relative RMSE (rms(deq - x) / rms(x)) bounds on N(0, 0.02)-like data; uniform-step
# estimates are ~0.07 (4 bit), ~0.035 (5 bit), ~0.017 (6 bit) with 256-blocks of 16/32
RMSE_BOUND = {"Q4_K": 0.09, "Q5_K": 0.045, "Q6_K": 0.022, "F16": 1e-3}


def quantize(src, dst, mix, pure=False, dry=False):
    cmd = [MINFER, "quantize"] + (["--pure"] if pure else []) + (["--dry-run"] if dry else []) + [src, dst, mix]
    return R.run(cmd)


def tensors(path):
    r = gguf.GGUFReader(path)
    return r, {t.name: t for t in r.tensors}


def raw(t):
    return np.asarray(t.data).reshape(-1).view(np.uint8)


def check_quantized(tag, src_t, out_path, mix, pure, order):
    """Compare every tensor of out_path with the F32 source tensors src_t."""
    r, got = tensors(out_path)
    want_t = R.expected_types(mix, pure, order)
    bad_type = [(n, got[n].tensor_type.name, want_t[n]) for n, _ in order if n in got and got[n].tensor_type.name != want_t[n]]
    rep.ok(set(got) == set(src_t), tag + " same tensor set", "")
    rep.ok(not bad_type, tag + " types per mix rule", "first (name, got, want): %r" % bad_type[:3])
    rep.ok(R.field(r, "general.file_type") == R.file_type(mix), tag + " general.file_type",
           "got %r want %r" % (R.field(r, "general.file_type"), R.file_type(mix)))
    mism, over = [], []
    for name, t in got.items():
        x = np.asarray(src_t[name].data, dtype=np.float32)
        tn = t.tensor_type.name
        if tn in EXACT:
            want = quants.quantize(x, t.tensor_type).reshape(-1).view(np.uint8)
            g = raw(t)
            if g.shape != want.shape or not np.array_equal(g, want):
                i = int(np.argmax(g != want)) if g.shape == want.shape else -1
                mism.append((name, tn, "byte %d got %s want %s" % (i, g[i] if i >= 0 else "?", want[i] if i >= 0 else "?")))
        elif tn == "F32":
            if not np.array_equal(np.asarray(t.data, dtype=np.float32).reshape(-1), x.reshape(-1)):
                mism.append((name, tn, "F32 copy differs"))
        else:
            d = quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(-1).astype(np.float64)
            xx = x.reshape(-1).astype(np.float64)
            e = float(np.sqrt(np.mean((d - xx) ** 2)) / np.sqrt(np.mean(xx ** 2)))
            if not (e <= RMSE_BOUND[tn]):
                over.append((name, tn, round(e, 4)))
    rep.ok(not mism, tag + " Q4_0..Q8_0/BF16 bit-identical to gguf.quants", "first: %r" % mism[:3])
    rep.ok(not over, tag + " K-quant/F16 relative RMSE within bounds", "first (name, type, rmse): %r" % over[:3])
    return r


def check_meta_copied(tag, src_path, out_path):
    kv_s, _ = R.read_kv(src_path)
    kv_o, _ = R.read_kv(out_path)
    diff = [(k, kv_o.get(k), v) for k, v in kv_s.items() if k != "general.file_type" and kv_o.get(k) != v]
    rep.ok(not diff, tag + " metadata copied", "first (key, got, want): %r" % diff[:3])


def main():
    if not rep.ok(os.access(MINFER, os.X_OK), "minfer binary", MINFER + " not built"):
        rep.done()
    for shape_name in ("tiny-llama", "tiny-qwen2", "tiny-qwen3"):
        src = os.path.join(TMP, shape_name + "-source.gguf")
        p = R.run([MINFER, "synth", "--shape", shape_name, "--type", "f32", "--seed", "3", "-o", src])
        if not rep.ok(p.returncode == 0, shape_name + " f32 synth", p.stderr[-300:]):
            continue
        sr, src_t = tensors(src)
        order = [(t.name, R.tensor_ne(t)) for t in sr.tensors]
        for mix in R.MIXES:
            for pure in ((False, True) if mix in ("q4_0", "q8_0", "q4_k_m", "q6_k") else (False,)):
                tag = "%s -> %s%s" % (shape_name, mix, " --pure" if pure else "")
                out = os.path.join(TMP, "%s-%s%s.gguf" % (shape_name, mix, "-pure" if pure else ""))
                p = quantize(src, out, mix, pure)
                if not rep.ok(p.returncode == 0, tag + " runs", p.stderr[-300:]):
                    continue
                check_quantized(tag, src_t, out, mix, pure, order)
                if mix == "q4_k_m" and not pure:
                    check_meta_copied(tag, src, out)
        # requantization: from a quantized file, result = quantize(dequantize(src)) exactly
        for frm in ("q8_0", "q6_k"):
            a = os.path.join(TMP, "%s-%s-pure.gguf" % (shape_name, frm))
            b = os.path.join(TMP, "%s-%s-to-q4_0.gguf" % (shape_name, frm))
            if not os.path.exists(a):
                continue
            p = quantize(a, b, "q4_0", pure=True)
            tag = "%s %s -> q4_0 (requantize)" % (shape_name, frm)
            if not rep.ok(p.returncode == 0, tag + " runs", p.stderr[-300:]):
                continue
            _, ta = tensors(a)
            _, tb = tensors(b)
            mism = []
            for name, t in tb.items():
                if t.tensor_type.name != "Q4_0":
                    continue
                x = quants.dequantize(np.asarray(ta[name].data), ta[name].tensor_type)
                want = quants.quantize(x.astype(np.float32), t.tensor_type).reshape(-1).view(np.uint8)
                if not np.array_equal(raw(t), want):
                    mism.append(name)
            rep.ok(not mism, tag + " equals gguf quantize(dequantize(src))", "first: %r" % mism[:3])
        # same type in and out: tensors copied byte for byte
        a = os.path.join(TMP, "%s-q4_0-pure.gguf" % shape_name)
        b = os.path.join(TMP, "%s-q4_0-again.gguf" % shape_name)
        if os.path.exists(a) and quantize(a, b, "q4_0", pure=True).returncode == 0:
            _, ta = tensors(a)
            _, tb = tensors(b)
            rep.ok(all(np.array_equal(raw(ta[n]), raw(tb[n])) for n in ta), shape_name + " q4_0 -> q4_0 copies bytes", "")
        for f in os.listdir(TMP):
            os.unlink(os.path.join(TMP, f))

    # the rule against real llama.cpp Q4_K_M files (tensor order as stored in them)
    for real in ("Qwen2.5-Coder-0.5B-Instruct-AWQ.Q4_K_M.gguf", "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf"):
        path = os.path.join(ROOT, "models", real)
        tag = "q4_k_m plan vs real " + real
        if not os.path.exists(path):
            rep.skip(tag, "models/%s not present (make models)" % real)
            continue
        _, ts = R.read_kv(path)
        p = quantize(path, os.path.join(TMP, "unused.gguf"), "q4_k_m", dry=True)
        plan = dict(line.split() for line in p.stdout.splitlines() if line.strip())
        bad = [(n, plan.get(n), R.QT(v[0]).name) for n, v in ts.items() if plan.get(n) != R.QT(v[0]).name]
        rep.ok(p.returncode == 0 and not bad, tag, "first (name, ours, real): %r" % bad[:3])
        want = R.expected_types("q4_k_m", False, [(n, v[1]) for n, v in ts.items()])
        bad = [(n, want[n], R.QT(v[0]).name) for n, v in ts.items() if want[n] != R.QT(v[0]).name]
        rep.ok(not bad, tag + " (python rule)", "first (name, rule, real): %r" % bad[:3])

    # a real file requantized: SmolLM2 Q4_1 -> Q8_0, against gguf's quantize(dequantize())
    real = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.exists(real):
        out = os.path.join(TMP, "smollm-q8_0.gguf")
        p = quantize(real, out, "q8_0")
        if rep.ok(p.returncode == 0, "real SmolLM2 Q4_1 -> q8_0 runs", p.stderr[-300:]):
            _, ta = tensors(real)
            _, tb = tensors(out)
            names = ["token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight", "blk.3.attn_norm.weight"]
            mism = []
            for n in names:
                x = quants.dequantize(np.asarray(ta[n].data), ta[n].tensor_type).astype(np.float32)
                t = tb[n]
                if t.tensor_type.name == "F32":
                    ok = np.array_equal(np.asarray(t.data).reshape(-1), x.reshape(-1))
                elif ta[n].tensor_type == t.tensor_type:
                    ok = np.array_equal(raw(t), raw(ta[n]))
                else:
                    ok = np.array_equal(raw(t), quants.quantize(x, t.tensor_type).reshape(-1).view(np.uint8))
                if not ok:
                    mism.append((n, t.tensor_type.name))
            rep.ok(not mism, "real SmolLM2 -> q8_0 tensors equal gguf quantize(dequantize())", "first: %r" % mism[:3])
            check_meta_copied("real SmolLM2 -> q8_0", real, out)
            os.unlink(out)
    else:
        rep.skip("real SmolLM2 requantize", "models/SmolLM2-135M-Instruct.Q4_1.gguf not present (make models)")

    # bad input: clear message, non-zero exit, never a crash
    garbled = os.path.join(TMP, "garbled.gguf")
    with open(garbled, "wb") as f:
        f.write(b"GGUF\x03\x00\x00\x00" + bytes(range(256)) * 4)
    x = os.path.join(TMP, "x.gguf")
    for args, what in (([os.path.join(TMP, "missing.gguf"), x, "q4_0"], "missing input"),
                       ([garbled, x, "q4_0"], "garbled input"),
                       ([garbled, x, "q3_zz"], "unknown type"),
                       ([garbled, garbled, "q4_0"], "same in and out"),
                       ([garbled, x], "missing argument")):
        p = R.run([MINFER, "quantize"] + args)
        rep.ok(p.returncode > 0 and p.stderr.strip() != "", "bad input: " + what,
               "rc %d stderr %r" % (p.returncode, p.stderr[-200:]))
    for f in os.listdir(TMP):
        os.unlink(os.path.join(TMP, f))
    os.rmdir(TMP)
    rep.done()


if __name__ == "__main__":
    main()

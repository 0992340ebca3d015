#!/usr/bin/env python3
"""Gate for `minfer synth`: each file is read back with the PyPI gguf package and checked
against an independent statement of the shape, tensor list and type-mix rule
(synth_ref.py): every tensor present with the right shape and type, metadata keys and
values, every block's fp16 scales finite (tiny shapes: full dequantize with gguf.quants),
a valid BPE vocab (every merge's parts and result are tokens; HF tokenizers round-trips
text with it), seed determinism, file size, and bad-input exits. Where the real model
files of models/ are present, the shapes' hyper-parameters are compared with them.
Usage: py_synth.py BUILD"""
import hashlib
import os
import sys
import tempfile

import numpy as np
import gguf
from gguf import quants

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth_ref as R  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
rep = R.Report("py_synth")
MINFER = R.minfer_bin(sys.argv)
TMP = tempfile.mkdtemp(prefix="minfer_synth_")

# block layout facts for the scale check: offsets of the fp16 scale fields per block
SCALE_OFFS = {"Q4_0": [0], "Q5_0": [0], "Q8_0": [0], "Q4_1": [0, 2], "Q5_1": [0, 2],
              "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


def synth(shape, mix, out, seed=None, pure=False):
    cmd = [MINFER, "synth", "--shape", shape, "--type", mix, "-o", out]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if pure:
        cmd.append("--pure")
    return R.run(cmd)


def check_vocab(tag, r, s):
    toks = R.field(r, "tokenizer.ggml.tokens")
    merges = R.field(r, "tokenizer.ggml.merges")
    ttype = R.field(r, "tokenizer.ggml.token_type")
    if not rep.ok(toks is not None and merges is not None and ttype is not None, tag + " vocab keys", "missing"):
        return
    rep.ok(len(toks) == s["n_vocab"], tag + " vocab size", "got %d want %d" % (len(toks), s["n_vocab"]))
    rep.ok(len(ttype) == len(toks), tag + " token_type size", "%d vs %d" % (len(ttype), len(toks)))
    rep.ok(len(set(toks)) == len(toks), tag + " tokens unique", "%d duplicates" % (len(toks) - len(set(toks))))
    index = {t: i for i, t in enumerate(toks)}
    # the 256 byte tokens of GPT-2's byte-to-unicode map
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    missing = [chr(c) for c in cs if chr(c) not in index]
    rep.ok(not missing, tag + " 256 byte tokens", "missing %r" % missing[:5])
    bad = []
    for k, m in enumerate(merges):
        parts = m.split(" ")
        if len(parts) != 2 or parts[0] not in index or parts[1] not in index or parts[0] + parts[1] not in index:
            bad.append((k, m))
            if len(bad) > 3:
                break
    rep.ok(not bad, tag + " merges valid (parts and result are tokens)", "first bad: %r" % bad[:3])
    specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
    got = {toks[i] for i in range(len(toks)) if int(ttype[i]) == 3}
    rep.ok(got == specials, tag + " control tokens", "got %r" % sorted(got))
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        v = R.field(r, key)
        rep.ok(v is not None and 0 <= int(v) < len(toks) and toks[int(v)] in specials, tag + " " + key, "value %r" % v)
    eos = R.field(r, "tokenizer.ggml.eos_token_id")
    rep.ok(eos is not None and toks[int(eos)] == "<|im_end|>", tag + " eos is <|im_end|>", repr(eos))
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, decoders
        vocab = {t: i for i, t in enumerate(toks)}
        mlist = [tuple(m.split(" ")) for m in merges]
        tk = Tokenizer(models.BPE(vocab=vocab, merges=mlist))
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        text = "The quick brown fox: int main() { return 0; } caf\u00e9 \u4f60\u597d 2048!"
        ids = tk.encode(text).ids
        back = tk.decode(ids)
        rep.ok(back == text, tag + " HF tokenizers round trip", "got %r" % back)
        rep.ok(len(ids) < len(text.encode()), tag + " merges compress text", "%d ids for %d bytes" % (len(ids), len(text.encode())))
    except ImportError as e:   # a test dependency (make deps): missing is a failure, not a skip
        rep.ok(False, tag + " HF tokenizers round trip", "test dependency missing: %s" % e)


def check_meta(tag, r, s, mix, shape_name):
    a = s["arch"]
    want = {"general.architecture": a, f"{a}.context_length": s["n_ctx"], f"{a}.embedding_length": s["n_embd"],
            f"{a}.block_count": s["n_layer"], f"{a}.feed_forward_length": s["n_ff"],
            f"{a}.attention.head_count": s["n_head"], f"{a}.attention.head_count_kv": s["n_head_kv"],
            "general.file_type": R.file_type(mix), "general.alignment": 32, "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.pre": s["pre"]}
    if a == "qwen3":
        want[f"{a}.attention.key_length"] = s["head_dim"]
        want[f"{a}.attention.value_length"] = s["head_dim"]
    bad = [(k, R.field(r, k), v) for k, v in want.items() if R.field(r, k) != v]
    rep.ok(not bad, tag + " metadata values", "first (key, got, want): %r" % bad[:3])
    for k, v in ((f"{a}.attention.layer_norm_rms_epsilon", s["eps"]), (f"{a}.rope.freq_base", s["theta"])):
        got = R.field(r, k)
        rep.ok(got is not None and abs(got - v) <= 1e-6 * abs(v), tag + " " + k, "got %r want %r" % (got, v))
    rep.ok(R.field(r, "general.name") is not None, tag + " general.name", "missing")


def check_tensors(tag, r, shape_name, mix, pure, full_dequant):
    exp = dict(R.expected_tensors(shape_name))
    got = {t.name: t for t in r.tensors}
    missing, extra = sorted(set(exp) - set(got)), sorted(set(got) - set(exp))
    rep.ok(not missing and not extra, tag + " tensor set", "missing %r extra %r" % (missing[:3], extra[:3]))
    bad_shape = [(n, R.tensor_ne(got[n]), exp[n]) for n in exp if n in got and R.tensor_ne(got[n]) != exp[n]]
    rep.ok(not bad_shape, tag + " tensor shapes", "first (name, got, want): %r" % bad_shape[:3])
    order = [(t.name, R.tensor_ne(t)) for t in r.tensors]
    want_t = R.expected_types(mix, pure, order)
    bad_type = [(n, got[n].tensor_type.name, want_t[n]) for n, _ in order if got[n].tensor_type.name != want_t[n]]
    rep.ok(not bad_type, tag + " tensor types per mix rule", "first (name, got, want): %r" % bad_type[:3])
    nonfinite, badstat = [], []
    for t in r.tensors:
        tn = t.tensor_type.name
        raw = np.asarray(t.data)
        if full_dequant:
            d = quants.dequantize(raw, t.tensor_type).astype(np.float64)
            if not np.isfinite(d).all():
                nonfinite.append(t.name)
                continue
            std, mean = float(d.std()), float(d.mean())
            is_norm = t.name.endswith("norm.weight")
            ok = (0.9 < mean < 1.1) if is_norm else (0.005 < std < 0.08 and abs(mean) < 0.01)
            if not ok:
                badstat.append((t.name, tn, round(mean, 4), round(std, 4)))
        elif tn in SCALE_OFFS:
            bsz = gguf.GGML_QUANT_SIZES[t.tensor_type][1]
            blocks = raw.reshape(-1).view(np.uint8).reshape(-1, bsz)
            for off in SCALE_OFFS[tn]:
                sc = np.ascontiguousarray(blocks[:, off:off + 2]).view(np.float16)
                if not np.isfinite(sc).all():
                    nonfinite.append(t.name)
        elif tn in ("F16", "BF16", "F32"):
            d = quants.dequantize(raw, t.tensor_type)
            if not np.isfinite(d).all():
                nonfinite.append(t.name)
    rep.ok(not nonfinite, tag + " finite scales/values", "first non-finite tensors: %r" % nonfinite[:3])
    if full_dequant:
        rep.ok(not badstat, tag + " weight statistics (std ~0.02, mean ~0; norms ~1)", "first: %r" % badstat[:3])


def check_file(shape_name, mix, pure=False, full_dequant=True, size_mib=None, seed=None):
    tag = "%s/%s%s" % (shape_name, mix, "/pure" if pure else "")
    out = os.path.join(TMP, "%s-%s%s.gguf" % (shape_name, mix, "-pure" if pure else ""))
    p = synth(shape_name, mix, out, seed=seed, pure=pure)
    if not rep.ok(p.returncode == 0 and os.path.exists(out), tag + " synth runs", p.stderr.strip()[-300:]):
        return None
    try:
        r = gguf.GGUFReader(out)
    except Exception as e:  # noqa: BLE001
        rep.ok(False, tag + " gguf.GGUFReader opens it", repr(e))
        return None
    s = R.shape(shape_name)
    check_meta(tag, r, s, mix, shape_name)
    check_tensors(tag, r, shape_name, mix, pure, full_dequant)
    check_vocab(tag, r, s)
    if size_mib is not None:
        mib = os.path.getsize(out) / 2**20
        rep.ok(abs(mib - size_mib) <= 0.02 * size_mib, tag + " file size", "%.1f MiB, expected ~%.1f" % (mib, size_mib))
    return out


def check_file_light(shape_name, mix, size_mib=None):
    """Big vocab files: metadata, tensor set/shapes/types and size from the fast header
    reader (gguf.GGUFReader takes seconds per 150k-token vocab; one such file is read fully)."""
    tag = "%s/%s (header)" % (shape_name, mix)
    out = os.path.join(TMP, "%s-%s.gguf" % (shape_name, mix))
    p = synth(shape_name, mix, out)
    if not rep.ok(p.returncode == 0 and os.path.exists(out), tag + " synth runs", p.stderr.strip()[-300:]):
        return
    kv, ts = R.read_kv(out)
    s = R.shape(shape_name)
    a = s["arch"]
    want = {"general.architecture": a, f"{a}.embedding_length": s["n_embd"], f"{a}.block_count": s["n_layer"],
            f"{a}.feed_forward_length": s["n_ff"], f"{a}.attention.head_count": s["n_head"],
            f"{a}.attention.head_count_kv": s["n_head_kv"], "general.file_type": R.file_type(mix),
            "tokenizer.ggml.tokens": ("array", s["n_vocab"])}
    bad = [(k, kv.get(k), v) for k, v in want.items() if kv.get(k) != v]
    rep.ok(not bad, tag + " metadata", "first (key, got, want): %r" % bad[:3])
    exp = dict(R.expected_tensors(shape_name))
    rep.ok(set(exp) == set(ts), tag + " tensor set", "missing %r extra %r" % (sorted(set(exp) - set(ts))[:3], sorted(set(ts) - set(exp))[:3]))
    bad = [(n, ts[n][1], exp[n]) for n in exp if n in ts and ts[n][1] != exp[n]]
    rep.ok(not bad, tag + " tensor shapes", "first: %r" % bad[:3])
    want_t = R.expected_types(mix, False, [(n, v[1]) for n, v in ts.items()])
    bad = [(n, R.QT(v[0]).name, want_t[n]) for n, v in ts.items() if R.QT(v[0]).name != want_t[n]]
    rep.ok(not bad, tag + " tensor types per mix rule", "first (name, got, want): %r" % bad[:3])
    if size_mib is not None:
        mib = os.path.getsize(out) / 2**20
        rep.ok(abs(mib - size_mib) <= 0.02 * size_mib, tag + " file size", "%.1f MiB, expected ~%.1f" % (mib, size_mib))
    os.unlink(out)


def compare_with_real(shape_name, real_file):
    """The shape's hyper-parameters against a real GGUF of that shape (independent facts)."""
    path = os.path.join(ROOT, "models", real_file)
    tag = "%s vs real %s" % (shape_name, real_file)
    if not os.path.exists(path):
        rep.skip(tag, "models/%s not present (make models)" % real_file)
        return
    kv, ts = R.read_kv(path)
    s = R.shape(shape_name)
    a = s["arch"]
    pairs = [("general.architecture", a), (f"{a}.embedding_length", s["n_embd"]), (f"{a}.block_count", s["n_layer"]),
             (f"{a}.feed_forward_length", s["n_ff"]), (f"{a}.attention.head_count", s["n_head"]),
             (f"{a}.attention.head_count_kv", s["n_head_kv"]), (f"{a}.context_length", s["n_ctx"]),
             ("tokenizer.ggml.pre", s["pre"]), ("tokenizer.ggml.tokens", ("array", s["n_vocab"]))]
    bad = [(k, kv.get(k), v) for k, v in pairs if kv.get(k) != v]
    for k, v in ((f"{a}.rope.freq_base", s["theta"]), (f"{a}.attention.layer_norm_rms_epsilon", s["eps"])):
        g = kv.get(k)
        if g is None or abs(g - v) > 1e-6 * v:
            bad.append((k, g, v))
    rep.ok(not bad, tag + " hyper-parameters", "first (key, real, ours): %r" % bad[:3])
    rep.ok(ts["blk.0.attn_k.weight"][1][1] == s["n_head_kv"] * s["head_dim"], tag + " head_dim", "")


def main():
    if not rep.ok(os.access(MINFER, os.X_OK), "minfer binary", MINFER + " not built"):
        rep.done()
    # tiny shapes: every mix, full dequantize
    for shape_name in ("tiny-llama", "tiny-qwen2", "tiny-qwen3"):
        for mix in R.MIXES:
            check_file(shape_name, mix)
        check_file(shape_name, "q4_k_m", pure=True)
        check_file(shape_name, "q4_0", pure=True)
    # determinism: same seed same bytes, other seed other bytes
    h = []
    for k, seed in enumerate((7, 7, 8)):
        out = os.path.join(TMP, "det%d.gguf" % k)
        synth("tiny-qwen3", "q4_k_m", out, seed=seed)
        h.append(hashlib.sha256(open(out, "rb").read()).hexdigest() if os.path.exists(out) else str(k))
    rep.ok(h[0] == h[1], "same seed, same file", "%s vs %s" % (h[0][:12], h[1][:12]))
    ht = []
    for k, nt in enumerate((1, 3)):
        out = os.path.join(TMP, "thr%d.gguf" % k)
        R.run([MINFER, "synth", "--shape", "smollm2-135m", "--type", "q4_k", "--seed", "5", "--threads", str(nt), "-o", out])
        ht.append(hashlib.sha256(open(out, "rb").read()).hexdigest() if os.path.exists(out) else str(k))
    rep.ok(ht[0] == ht[1], "same file with 1 or 3 threads", "%s vs %s" % (ht[0][:12], ht[1][:12]))
    rep.ok(h[0] != h[2], "other seed, other file", h[0][:12])
    # real shapes: one big-vocab file read fully (scale fields checked without a full
    # dequantize), the rest through the header reader
    for shape_name, mix in (("qwen2.5-0.5b", "q4_k_m"), ("smollm2-135m", "q4_1")):
        out = check_file(shape_name, mix, full_dequant=False)
        if out:
            os.unlink(out)
    check_file_light("qwen2.5-0.5b", "q4_0", size_mib=330.0)
    check_file_light("qwen3-0.6b", "q8_0")
    check_file_light("qwen2.5-1.5b", "q4_k_m")
    compare_with_real("smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf")
    compare_with_real("qwen2.5-0.5b", "Qwen2.5-Coder-0.5B-Instruct-AWQ.Q4_K_M.gguf")
    compare_with_real("qwen2.5-1.5b", "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf")
    # bad input: clear message, non-zero exit, no crash
    for args, what in ((["--shape", "nope", "--type", "q4_0", "-o", os.path.join(TMP, "x.gguf")], "unknown shape"),
                       (["--shape", "tiny-llama", "--type", "q3_xx", "-o", os.path.join(TMP, "x.gguf")], "unknown type"),
                       (["--shape", "tiny-llama", "--type", "q4_0"], "missing -o"),
                       (["--shape", "tiny-llama", "--type", "q4_0", "-o", "/nonexistent_dir/x.gguf"], "unwritable path"),
                       (["--seed", "abc", "--shape", "tiny-llama", "--type", "q4_0", "-o", os.path.join(TMP, "x.gguf")], "bad seed")):
        p = R.run([MINFER, "synth"] + args)
        rep.ok(p.returncode not in (0,) and p.returncode > 0 and p.stderr.strip() != "", "bad input: " + what,
               "rc %d stderr %r" % (p.returncode, p.stderr[-200:]))
    for f in os.listdir(TMP):
        os.unlink(os.path.join(TMP, f))
    os.rmdir(TMP)
    rep.done()


if __name__ == "__main__":
    main()

"""Seeded generation of corrupt GGUF files for the bad-input campaign (sh_bad_input.sh).

Bases: tiny llama / qwen2 / qwen3 models small enough to mutate hundreds of times, each
with a real byte-level BPE tokenizer (the vocab, merges and special tokens of the
matching `minfer synth` tiny shape), written here in F32 and re-quantized by `minfer
quantize` so quantized blocks are well formed. Every mutation breaks one thing in one
category and says whether a reader must reject the result (must_reject) or may accept
it (the file can still be a valid model, e.g. random weights or an extra key).

    python gen.py MINFER OUTDIR [--per-category N] [--seed S]
writes OUTDIR/bases/*.gguf, OUTDIR/files/<category>-<n>.gguf and OUTDIR/manifest.jsonl.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys

import numpy as np

sys.setrecursionlimit(20000)   # deeply nested arrays are written recursively

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ggufmodel import (Gguf, Tensor, parse, serialize, tensor_nbytes, VT_U8, VT_I8, VT_U16,  # noqa: E402
                       VT_U32, VT_I32, VT_F32, VT_BOOL, VT_STR, VT_ARR, VT_U64, VT_I64, VT_F64)

# name, synth shape (for its tokenizer), arch, E, layers, heads, kv heads, key_length or 0, ff, mix
BASES = [
    ("llama", "tiny-llama", "llama", 64, 2, 4, 2, 0, 128, "q4_0"),
    ("qwen2", "tiny-qwen2", "qwen2", 64, 1, 2, 1, 0, 96, "q5_1"),
    ("qwen3", "tiny-qwen3", "qwen3", 256, 1, 2, 1, 64, 256, "q4_k_m"),
]


def build_model(tok_kvs, arch, E, L, H, Hkv, kl, F, ctx=128, n_rot=0, ttype=0, seed=0):
    """A model with the given tokenizer keys and hyper-parameters, weights F32 (ttype 0)
    or F16 (1; norms and biases stay F32), small random values."""
    rng = np.random.default_rng(seed)
    g = Gguf()
    g.set("general.architecture", VT_STR, arch.encode())
    for k, vt, v in tok_kvs:
        g.kvs.append([k, vt, v])
    g.set("general.name", VT_STR, f"badinput {arch} E{E} L{L} H{H}/{Hkv} F{F}".encode())
    hd = kl or E // H
    a = arch
    g.set(f"{a}.block_count", VT_U32, L)
    g.set(f"{a}.context_length", VT_U32, ctx)
    g.set(f"{a}.embedding_length", VT_U32, E)
    g.set(f"{a}.feed_forward_length", VT_U32, F)
    g.set(f"{a}.attention.head_count", VT_U32, H)
    g.set(f"{a}.attention.head_count_kv", VT_U32, Hkv)
    if kl:
        g.set(f"{a}.attention.key_length", VT_U32, kl)
        g.set(f"{a}.attention.value_length", VT_U32, kl)
    if n_rot:
        g.set(f"{a}.rope.dimension_count", VT_U32, n_rot)
    g.set(f"{a}.attention.layer_norm_rms_epsilon", VT_F32, 1e-5)
    g.set(f"{a}.rope.freq_base", VT_F32, 10000.0)
    V = len(g.get("tokenizer.ggml.tokens")[1])

    def w(name_, *shape_):   # GGUF ne order: ne0 first
        arr = (rng.standard_normal(tuple(reversed(shape_))) * 0.05).astype(np.float32)
        if ttype == 1 and len(shape_) == 2:
            g.tensors.append(Tensor(name_.encode(), list(shape_), 1, arr.astype(np.float16).tobytes()))
        else:
            g.tensors.append(Tensor(name_.encode(), list(shape_), 0, arr.tobytes()))

    def ones(name_, n):
        g.tensors.append(Tensor(name_.encode(), [n], 0, np.ones(n, np.float32).tobytes()))

    w("token_embd.weight", E, V)
    ones("output_norm.weight", E)
    for il in range(L):
        p = f"blk.{il}."
        ones(p + "attn_norm.weight", E)
        w(p + "attn_q.weight", E, hd * H)
        w(p + "attn_k.weight", E, hd * Hkv)
        w(p + "attn_v.weight", E, hd * Hkv)
        if arch == "qwen2":
            for t, n in (("q", hd * H), ("k", hd * Hkv), ("v", hd * Hkv)):
                w(p + f"attn_{t}.bias", n)
        if arch == "qwen3":
            ones(p + "attn_q_norm.weight", hd)
            ones(p + "attn_k_norm.weight", hd)
        w(p + "attn_output.weight", hd * H, E)
        ones(p + "ffn_norm.weight", E)
        w(p + "ffn_gate.weight", E, F)
        w(p + "ffn_up.weight", E, F)
        w(p + "ffn_down.weight", F, E)
    return g


def micro_model(minfer, work, name, shape, arch, E, L, H, Hkv, kl, F, mix):
    """A tiny model with `shape`'s tokenizer, written in F32, then quantized to `mix` by minfer."""
    synth = os.path.join(work, f"synth-{shape}.gguf")
    if not os.path.exists(synth):
        subprocess.run([minfer, "synth", "--shape", shape, "--type", "q8_0", "-o", synth],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(synth, "rb") as f:
        src = parse(f.read())
    tok = [kv for kv in src.kvs if kv[0].startswith(b"tokenizer.") or kv[0] == b"general.alignment"]
    g = build_model(tok, arch, E, L, H, Hkv, kl, F, seed=E * 31 + L)
    f32 = os.path.join(work, f"{name}-f32.gguf")
    with open(f32, "wb") as f:
        f.write(serialize(g)[0])
    out = os.path.join(work, f"{name}-{mix}.gguf")
    subprocess.run([minfer, "quantize", f32, out, mix], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out, "rb") as f:
        return parse(f.read())


def odd_model(g, rng):
    """A valid model of odd but legal hyper-parameters (tiny or non-power-of-two sizes, a
    context of a token or two, partial RoPE) with g's tokenizer: kernels see row lengths
    and head sizes no real model has."""
    tok = [kv for kv in g.kvs if kv[0].startswith(b"tokenizer.")]
    arch = rng.choice(["llama", "qwen2", "qwen3"])
    hd = rng.choice([2, 4, 6, 10, 34, 130])
    H = rng.choice([1, 2, 3, 5])
    Hkv = rng.choice([1, H])
    E = rng.choice([2, 3, 8, 18, 66, hd * H])
    F = rng.choice([1, 2, 3, 33, 257])
    kl = 0 if E == hd * H and rng.random() < .5 else hd
    n_rot = rng.choice([0, 2, hd])
    ctx = rng.choice([1, 2, 3, 8, 128])
    L = rng.choice([1, 2, 3])
    ttype = rng.choice([0, 1])
    m = build_model(tok, arch, E, L, H, Hkv, kl, F, ctx=ctx, n_rot=n_rot, ttype=ttype, seed=rng.randrange(1 << 30))
    return ser(m), False, f"valid odd model: {arch} E={E} L={L} H={H}/{Hkv} hd={hd} F={F} n_rot={n_rot} ctx={ctx} type={ttype}"


# ---------------- mutations: each takes (g, rng) and returns (bytes, must_reject, what) ----------------
U64 = 2**64 - 1
HUGE = [2**31, 2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, U64]


def ser(g):
    return serialize(g)[0]


def patch(b, at, fmt, v):
    b = bytearray(b)
    struct.pack_into(fmt, b, at, v)
    return bytes(b)


def kv_of(g, rng, want=None):
    idx = [i for i, kv in enumerate(g.kvs) if want is None or want(kv)]
    return rng.choice(idx)


def m_header(g, rng):
    b, off = serialize(g)
    c = rng.randrange(9)
    if c == 0:
        return patch(b, 0, "<4s", rng.choice([b"GGUG", b"gguf", b"FUGG", b"\0\0\0\0", bytes(rng.randrange(256) for _ in range(4))])), True, "bad magic"
    if c == 1:
        v = rng.choice([0, 1, 4, 5, 0x7fffffff, 0xffffffff, 0x03000000])
        return patch(b, 4, "<I", v), True, f"version {v}"
    if c == 2:
        return patch(b, 4, "<I", 2), False, "version 2"
    if c == 3:
        v = rng.choice(HUGE + [len(g.tensors) + 1, len(g.tensors) + 1000])
        return patch(b, off["n_tensors"], "<Q", v), True, f"n_tensors {v}"
    if c == 4:
        v = rng.randrange(0, len(g.tensors))
        return patch(b, off["n_tensors"], "<Q", v), False, f"n_tensors {v} (fewer)"
    if c == 5:
        v = rng.choice(HUGE + [len(g.kvs) + 1, len(g.kvs) + 50])
        return patch(b, off["n_kv"], "<Q", v), True, f"n_kv {v}"
    if c == 6:
        v = rng.randrange(0, len(g.kvs))
        return patch(b, off["n_kv"], "<Q", v), True, f"n_kv {v} (fewer: key bytes read as tensor infos)"
    if c == 7:
        return b[:24] + bytes(rng.randrange(256) for _ in range(64)) + b[88:], False, "random bytes after the header"
    n = rng.randrange(1, 24)
    b = bytearray(b)
    for _ in range(n):
        b[rng.randrange(4, 24)] = rng.randrange(256)
    return bytes(b), False, f"{n} random header bytes"


def m_strings(g, rng):
    b, off = serialize(g)
    c = rng.randrange(10)
    i = rng.randrange(len(g.kvs))
    if c == 0:
        v = rng.choice(HUGE + [len(b), len(b) - off[f"kv{i}.key"]])
        return patch(b, off[f"kv{i}.key"], "<Q", v), True, f"key {i} length {v}"
    if c == 1:
        v = len(g.kvs[i][0]) + rng.choice([-3, -1, 1, 2, 7])
        return patch(b, off[f"kv{i}.key"], "<Q", max(v, 0)), False, f"key {i} length off by {v - len(g.kvs[i][0])}"
    if c == 2:
        j = kv_of(g, rng, lambda kv: kv[1] == VT_STR)
        v = rng.choice(HUGE + [len(b)])
        return patch(b, off[f"kv{j}.value"], "<Q", v), True, f"string value {g.kvs[j][0]!r} length {v}"
    if c == 3:
        g = g.copy()
        k = bytearray(g.kvs[i][0])
        k[rng.randrange(len(k))] = rng.choice([0, 0xff, 0xc3, 0x80, 0x0a, 0x1b])
        g.kvs[i][0] = bytes(k)
        return ser(g), False, "key with a NUL / invalid UTF-8 / control byte"
    if c == 4:
        g = g.copy()
        g.kvs[i][0] = rng.choice([b"", b"x" * 70000, b"general.name\0hidden"])
        return ser(g), False, "empty, 70000-byte or NUL-embedded key"
    if c == 5:
        g = g.copy()
        j = rng.randrange(len(g.kvs))
        g.kvs.append(list(g.kvs[j]))
        return ser(g), True, f"duplicate key {g.kvs[j][0]!r}"
    if c == 6:
        g = g.copy()
        j = kv_of(g, rng, lambda kv: kv[1] == VT_STR)
        g.kvs[j][2] = rng.choice([b"", b"\xff\xfe\x00bad", b"\0", b"A" * 300000, bytes(range(256))])
        return ser(g), False, f"string value {g.kvs[j][0]!r} replaced by odd bytes"
    if c == 7:
        t = rng.randrange(len(g.tensors))
        v = rng.choice(HUGE + [0, len(g.tensors[t].name) + 1, len(g.tensors[t].name) - 1])
        return patch(b, off[f"ti{t}.name"], "<Q", v), v not in (0,), f"tensor {t} name length {v}"
    if c == 8:
        g = g.copy()
        t = rng.choice(g.tensors)
        t.name = rng.choice([b"", b"t" * 200, t.name + b"\0x", b"\xff" + t.name[1:]])
        return ser(g), False, "odd tensor name"
    g = g.copy()
    g.set("general.architecture", VT_STR, rng.choice([b"llama\0", b"LLAMA", b"", b"llama" * 20, b"\x1b[31mred", b"qwen2\xff"]))
    return ser(g), True, "garbled architecture string"


def m_arrays(g, rng):
    b, off = serialize(g)
    arrs = [i for i, kv in enumerate(g.kvs) if kv[1] == VT_ARR]
    i = rng.choice(arrs)
    et, items = g.kvs[i][2]
    at = off[f"kv{i}.value"]
    c = rng.randrange(8)
    if c == 0:
        v = rng.choice(HUGE + [len(items) + 1, 2**61, len(b)])
        return patch(b, at + 4, "<Q", v), True, f"array {g.kvs[i][0]!r} count {v}"
    if c == 1:
        v = rng.randrange(0, len(items))
        return patch(b, at + 4, "<Q", v), True, f"array {g.kvs[i][0]!r} count {v} (fewer)"
    if c == 2:
        v = rng.choice([13, 14, 255, 0xffff, 0xffffffff, VT_ARR])
        return patch(b, at, "<I", v), True, f"array {g.kvs[i][0]!r} element type {v}"
    if c == 3:
        v = rng.choice([VT_U8, VT_I8, VT_U16, VT_U32, VT_I32, VT_F32, VT_U64, VT_F64, VT_BOOL, VT_STR])
        return patch(b, at, "<I", v), v != et, f"array {g.kvs[i][0]!r} element type {et} -> {v}"
    if c == 4 and et == VT_STR:
        k = rng.randrange(len(items))
        p = at + 12 + sum(8 + len(s) for s in items[:k])
        v = rng.choice(HUGE + [len(items[k]) + 1])
        return patch(b, p, "<Q", v), True, f"array {g.kvs[i][0]!r} string {k} length {v}"
    g = g.copy()
    key = g.kvs[i][0]
    if c == 5:   # nested arrays, deep
        depth = rng.choice([2, 8, 64, 65, 200, 1500])
        v = (VT_U8, [1])
        for _ in range(depth):
            v = (VT_ARR, [v])
        g.kvs[i][2] = v
        return ser(g), depth > 64, f"array {key!r} nested {depth} deep"
    if c == 6:
        g.kvs[i][2] = (et, [])
        return ser(g), False, f"array {key!r} empty"
    g.kvs[i] = [key, rng.choice([VT_U32, VT_STR, VT_F32, VT_BOOL]), None]
    g.kvs[i][2] = {VT_U32: 7, VT_STR: b"tokens", VT_F32: 1.0, VT_BOOL: True}[g.kvs[i][1]]
    return ser(g), False, f"array {key!r} replaced by a scalar"


def m_alignment(g, rng):
    g = g.copy()
    c = rng.randrange(4)
    if c == 0:
        a = rng.choice([1, 2, 4, 8, 16, 64, 128, 256, 4096, 65536])
        g.set("general.alignment", VT_U32, a)
        return ser(g), False, f"alignment {a} (valid, data re-laid out)"
    if c == 1:
        a = rng.choice([0, 3, 5, 24, 48, 100, 2**31, 2**32 - 1, 2**17])
        g.set("general.alignment", VT_U32, a)
        g.layout_align = 32
        return ser(g), True, f"alignment {a}"
    if c == 2:
        vt, v = rng.choice([(VT_U64, 32), (VT_I32, 32), (VT_U8, 32), (VT_STR, b"32"), (VT_F32, 32.0), (VT_BOOL, True), (VT_ARR, (VT_U32, [32]))])
        g.set("general.alignment", vt, v)
        g.layout_align = 32
        return ser(g), vt in (VT_STR, VT_F32, VT_BOOL, VT_ARR), f"alignment 32 of type {vt}"
    a = rng.choice([64, 128, 256])
    g.set("general.alignment", VT_U32, a)
    g.layout_align = 32   # stated alignment differs from the layout actually used
    b, off = serialize(g)
    starts = [off["data"]] + [off[k] - off["data"] for k in off if k.startswith("tensor")]
    bad = any(x % a for x in starts)   # the 32-byte layout may happen to satisfy `a` too
    return b, bad, f"alignment {a} stated, data laid out at 32"


def m_tensor_infos(g, rng):
    b, off = serialize(g)
    t = rng.randrange(len(g.tensors))
    c = rng.randrange(10)
    if c == 0:
        v = rng.choice([0, 5, 8, 2**31, 2**32 - 1])
        return patch(b, off[f"ti{t}.n_dims"], "<I", v), True, f"tensor {t} n_dims {v}"
    if c == 1:
        v = rng.choice([4, 5, 31, 39, 40, 1000, 2**31, 2**32 - 1, 16, 17, 18, 19, 20, 21, 22, 23, 29])
        return patch(b, off[f"ti{t}.type"], "<I", v), True, f"tensor {t} type {v}"
    if c == 2:
        v = rng.choice([0, 1, 2, 8, 30, 24, 26])
        return patch(b, off[f"ti{t}.type"], "<I", v), False, f"tensor {t} type {g.tensors[t].type} -> {v}"
    if c == 3:
        v = rng.choice(HUGE + [len(b), len(b) - off["data"], 1, 31, 33])
        return patch(b, off[f"ti{t}.offset"], "<Q", v), True, f"tensor {t} offset {v}"
    if c == 4:
        o = struct.unpack_from("<Q", b, off[f"ti{t}.offset"])[0]
        v = o + rng.choice([-64, -32, 32, 64, 4096]) if o >= 64 else o + 32
        return patch(b, off[f"ti{t}.offset"], "<Q", v), False, f"tensor {t} offset shifted to {v} (aligned, in range or not)"
    g = g.copy()
    if c == 5:
        s = rng.randrange(len(g.tensors))
        g.tensors[t].name = g.tensors[s].name if s != t else g.tensors[(t + 1) % len(g.tensors)].name
        return ser(g), True, f"tensor {t} duplicates a name"
    if c == 6:
        name = g.tensors[t].name
        del g.tensors[t]
        return ser(g), True, f"tensor {name!r} missing"
    if c == 7:
        g.tensors.append(Tensor(rng.choice([b"blk.9.attn_q.weight", b"extra.weight", b"blk.-1.ffn_up.weight"]), [32, 2], 0, bytes(256)))
        return ser(g), False, "extra unknown tensor"
    if c == 8:   # every tensor points at the first one's data
        for x in g.tensors:
            x.offset = 0
        return ser(g), True, "all tensors at offset 0"
    rng.shuffle(g.tensors)
    return ser(g), False, "tensor infos in another order"


def m_shapes(g, rng):
    b, off = serialize(g)
    t = rng.randrange(len(g.tensors))
    T = g.tensors[t]
    c = rng.randrange(7)
    if c == 0:
        d = rng.randrange(len(T.dims))
        v = rng.choice([0, U64, 2**32, 2**63, 2**62, 2**31 + 1])
        return patch(b, off[f"ti{t}.dims"] + 8 * d, "<Q", v), True, f"tensor {t} ne[{d}] {v}"
    if c == 1:
        d = rng.randrange(len(T.dims))
        v = T.dims[d] * rng.choice([2, 3]) if rng.random() < .5 else max(1, T.dims[d] // 2)
        return patch(b, off[f"ti{t}.dims"] + 8 * d, "<Q", v), False, f"tensor {t} ne[{d}] {T.dims[d]} -> {v}"
    if c == 2 and len(T.dims) == 2:
        b = patch(b, off[f"ti{t}.dims"], "<Q", T.dims[1])
        return patch(b, off[f"ti{t}.dims"] + 8, "<Q", T.dims[0]), T.dims[0] != T.dims[1], f"tensor {t} ne swapped"
    g = g.copy()
    T = g.tensors[t]
    if c == 3:   # overflowing element count with a valid-looking per-dim value
        T.dims = [2**32, 2**32, 2**1, 1][:max(2, len(T.dims))]
        return ser(g), True, f"tensor {t} element count overflows"
    if c == 4:   # ne0 not a multiple of the block size
        T.dims[0] += rng.choice([1, 7, 16])
        return ser(g), True, f"tensor {t} ne0 not a block multiple"
    if c == 5:   # a consistent re-shape: vocab rows (token_embd) or a weight grown/shrunk with matching data
        E = g.tensors[0]
        T = g.tensor("token_embd.weight") or E
        rows = rng.choice([1, 2, 3, 100, T.dims[1] - 1, T.dims[1] + 5])
        T.dims = [T.dims[0], rows]
        T.data = bytes(tensor_nbytes(T.type, T.dims))
        return ser(g), False, f"token_embd rows {rows} (vocab size differs from the tokenizer)"
    T.dims = T.dims + [1] * rng.randrange(1, 3)   # trailing dims of 1: legal
    return ser(g), False, f"tensor {t} with extra dims of 1"


def m_hparams(g, rng):
    g = g.copy()
    a = g.get("general.architecture").decode()
    keys = ["block_count", "embedding_length", "feed_forward_length", "attention.head_count",
            "attention.head_count_kv", "context_length", "attention.key_length", "attention.value_length",
            "rope.dimension_count"]
    c = rng.randrange(10)
    if c >= 8:
        return odd_model(g, rng)
    if c <= 2:
        k = f"{a}.{rng.choice(keys)}"
        v = rng.choice([0, 1, 2, 3, 7, 33, 4096, 4097, 2**24 + 1, 2**31 - 1, 2**32 - 1])
        g.set(k, VT_U32, v)
        return ser(g), False, f"{k} = {v}"
    if c == 3:
        k = f"{a}.{rng.choice(keys)}"
        vt, v = rng.choice([(VT_I32, -1), (VT_I64, -2**63), (VT_U64, 2**64 - 1), (VT_U64, 2**40), (VT_I8, -5),
                            (VT_F32, 64.0), (VT_STR, b"64"), (VT_BOOL, True), (VT_ARR, (VT_U32, [64]))])
        g.set(k, vt, v)
        return ser(g), vt not in (VT_U64, VT_I32, VT_I64, VT_I8) or (v if isinstance(v, int) else 0) != 64, f"{k} = {v!r} (type {vt})"
    if c == 4:
        k = f"{a}." + rng.choice(["attention.layer_norm_rms_epsilon", "rope.freq_base"])
        v = rng.choice([float("nan"), float("inf"), -float("inf"), 0.0, -1.0, 1e-45, 1e38, 2.0])
        g.set(k, rng.choice([VT_F32, VT_F64]), v)
        return ser(g), False, f"{k} = {v}"
    if c == 5:
        k = f"{a}." + rng.choice(keys + ["attention.layer_norm_rms_epsilon"])
        g.remove(k)
        return ser(g), False, f"{k} removed"
    if c == 6:
        arch = rng.choice(["llama", "qwen2", "qwen3", "gpt2", "mamba", "bert"])
        g.set("general.architecture", VT_STR, arch.encode())
        return ser(g), arch not in ("llama", "qwen2", "qwen3"), f"architecture {a} -> {arch} (keys keep their prefix)"
    # many layers sharing the first layer's tensors (legal GGUF; claims memory)
    L = rng.choice([8, 40, 100])
    g.set(f"{a}.block_count", VT_U32, L)
    g.set(f"{a}.context_length", VT_U32, rng.choice([128, 4096]))
    layer0 = [t for t in g.tensors if t.name.startswith(b"blk.0.")]
    b, off = serialize(g)
    base_idx = {t.name: i for i, t in enumerate(g.tensors)}
    for il in range(1, L):
        for t in layer0:
            c2 = Tensor(t.name.replace(b"blk.0.", f"blk.{il}.".encode()), t.dims, t.type, b"")
            c2.offset = off[f"tensor{base_idx[t.name]}"] - off["data"]
            g.tensors.append(c2)
    return ser(g), False, f"{L} layers sharing one layer's data"


def m_tokenizer(g, rng):
    g = g.copy()
    tok = g.get("tokenizer.ggml.tokens")[1]
    V = len(tok)
    c = rng.randrange(12)
    if c == 0:
        v = rng.choice([b"llama", b"bert", b"none", b"", b"gpt2\0", b"GPT2", b"t5", b"\x1b]0;title\x07\x1b[2J"])
        g.set("tokenizer.ggml.model", VT_STR, v)
        return ser(g), False, f"tokenizer.ggml.model {v!r}"
    if c == 1:
        v = rng.choice([b"", b"unknown-pre", b"llama3", b"qwen2", b"gpt2", b"deepseek-llm", b"\xff", b"\x1b[31mred\r\n"])
        g.set("tokenizer.ggml.pre", VT_STR, v)
        return ser(g), False, f"tokenizer.ggml.pre {v!r}"
    if c == 2:
        k = rng.choice(["tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type", "tokenizer.ggml.model", "tokenizer.ggml.pre"])
        g.remove(k)
        return ser(g), False, f"{k} removed"
    if c == 3:
        n = rng.choice([0, 1, 2, 3, V // 2, V - 1, V + 1, V + 300])
        new = list(tok[:n]) + [b"<x%d>" % i for i in range(max(0, n - V))]
        g.set("tokenizer.ggml.tokens", VT_ARR, (VT_STR, new))
        return ser(g), False, f"{n} tokens for {V} token_type entries"
    if c == 4:
        new = list(tok)
        for _ in range(rng.randrange(1, 6)):
            new[rng.randrange(V)] = rng.choice([b"", b"\xff\xfe", b"\xc3", b"a\0b", b"x" * 100000, new[rng.randrange(V)], b"<|im_end|>"])
        g.set("tokenizer.ggml.tokens", VT_ARR, (VT_STR, new))
        return ser(g), False, "empty / invalid UTF-8 / huge / duplicate tokens"
    if c == 5:
        tt = list(g.get("tokenizer.ggml.token_type", (VT_I32, [1] * V))[1])
        for _ in range(rng.randrange(1, 8)):
            tt[rng.randrange(V)] = rng.choice([-1, 0, 2, 3, 4, 5, 6, 7, 99, 2**31 - 1, -2**31])
        g.set("tokenizer.ggml.token_type", VT_ARR, (VT_I32, tt))
        return ser(g), False, "odd token types"
    if c == 6:
        tt = g.get("tokenizer.ggml.token_type", (VT_I32, [1] * V))[1]
        et, v = rng.choice([(VT_F32, [1.0] * len(tt)), (VT_U8, [1] * len(tt)), (VT_I32, tt[:-1]), (VT_I32, tt + [1]), (VT_I32, [3] * len(tt)), (VT_I32, [])])
        g.set("tokenizer.ggml.token_type", VT_ARR, (et, v))
        return ser(g), False, "token_type of another type or length, or all control"
    if c == 7:
        mg = list(g.get("tokenizer.ggml.merges")[1])
        for _ in range(rng.randrange(1, 5)):
            j = rng.randrange(len(mg)) if mg else 0
            bad = rng.choice([b"", b"ab", b"a b c", b" ", b"a  b", b"\xff \xfe", b"zzzz yyyy", b"h e", tok[0] + b" " + tok[1], b"\xc4\xa0 \xc4\xa0", b"\x1b[2J \x07"])
            if mg:
                mg[j] = bad
            else:
                mg.append(bad)
        g.set("tokenizer.ggml.merges", VT_ARR, (VT_STR, mg))
        return ser(g), False, "garbled merges"
    if c == 8:
        mg = list(g.get("tokenizer.ggml.merges")[1])
        mg = rng.choice([[], mg * 2, mg[::-1], mg[:1], [mg[0]] * 5000])
        g.set("tokenizer.ggml.merges", VT_ARR, (VT_STR, mg))
        return ser(g), False, f"{len(mg)} merges (empty, doubled, reversed or repeated)"
    if c == 9:
        k = rng.choice(["bos", "eos", "eot", "unknown", "padding", "eom"])
        vt, v = rng.choice([(VT_U32, V), (VT_U32, V + 1), (VT_U32, 2**32 - 1), (VT_U32, 2**31), (VT_I32, -1), (VT_I32, -2**31),
                            (VT_U64, 2**40), (VT_STR, b"1"), (VT_F32, 1.0), (VT_U8, 0), (VT_U32, 0)])
        g.set(f"tokenizer.ggml.{k}_token_id", vt, v)
        return ser(g), False, f"{k}_token_id = {v!r} (type {vt})"
    if c == 10:
        k = rng.choice(["add_bos_token", "add_eos_token"])
        vt, v = rng.choice([(VT_BOOL, True), (VT_U32, 1), (VT_STR, b"true"), (VT_U8, 2)])
        g.set(f"tokenizer.ggml.{k}", vt, v)
        if rng.random() < .5:
            g.remove("tokenizer.ggml.bos_token_id")
        return ser(g), False, f"{k} = {v!r} (type {vt})"
    v = rng.choice([b"", b"{% for", b"\xff\xfe\x00", b"{{" * 50000, b"<|im_start|>" * 1000, bytes(range(256))])
    if rng.random() < .85:
        g.set("tokenizer.chat_template", VT_STR, v)
    else:
        g.set("tokenizer.chat_template", VT_U32, 5)
    return ser(g), False, "odd chat template"


def m_data(g, rng):
    b, off = serialize(g)
    b = bytearray(b)
    t = rng.randrange(len(g.tensors))
    s = off[f"tensor{t}"]
    n = len(g.tensors[t].data)
    c = rng.randrange(6)
    if c == 0:
        b[s:s + n] = bytes(rng.randrange(256) for _ in range(n))
        what = "random bytes"
    elif c == 1:
        b[s:s + n] = b"\xff" * n
        what = "all 0xff (NaN in f16 and f32)"
    elif c == 2:
        b[s:s + n] = bytes(n)
        what = "all zero"
    elif c == 3 and g.tensors[t].type == 0:
        vals = rng.choice([float("nan"), float("inf"), -float("inf"), 3e38, 1e-45])
        for k in range(0, n, 4 * rng.choice([1, 7, 64])):
            struct.pack_into("<f", b, s + k, vals)
        what = f"f32 {vals}"
    elif c == 4:
        for _ in range(rng.randrange(1, 50)):
            b[s + rng.randrange(n)] ^= 1 << rng.randrange(8)
        what = "bit flips"
    else:
        for k in range(0, n - 1, rng.choice([18, 20, 34, 144, 210, 2])):
            struct.pack_into("<H", b, s + k, rng.choice([0x7c00, 0xfc00, 0x7e00, 0x7bff]))
        what = "f16 Inf/NaN/max at block-scale positions"
    return bytes(b), False, f"tensor {g.tensors[t].name.decode(errors='replace')}: {what}"


def m_truncation(g, rng):
    b, off = serialize(g)
    c = rng.randrange(6)
    if c == 0:
        n = rng.randrange(0, 24)
    elif c == 1:
        k = rng.choice([k for k in off if k.startswith("kv")])
        n = off[k] + rng.choice([0, 1, 3, 7])
    elif c == 2:
        k = rng.choice([k for k in off if k.startswith("ti")])
        n = off[k] + rng.choice([0, 1, 3, 7])
    elif c == 3:
        n = off["data"] + rng.choice([-1, 0, 1, 100])
    elif c == 4:
        n = len(b) - rng.choice([1, 2, 31, 32, 33, 4096])
    else:
        n = rng.randrange(len(b))
    n = max(0, min(n, len(b) - 1))
    return b[:n], True, f"truncated to {n} of {len(b)} bytes"


def regressions(bases):
    """Files that once got through: each (category, base, bytes, must_reject, what)."""
    out = []
    for bname, g in bases:
        a = g.get("general.architecture").decode()
        for vt, v in ((VT_I64, -2**63), (VT_I32, -1), (VT_U32, 0)):
            m = g.copy()
            m.set(f"{a}.attention.key_length", vt, v)
            out.append(("hparams", bname, ser(m), True, f"{a}.attention.key_length = {v} (type {vt}; was read as absent)"))
    return out


CATEGORIES = [("header", m_header), ("strings", m_strings), ("arrays", m_arrays), ("alignment", m_alignment),
              ("tensor_infos", m_tensor_infos), ("shapes", m_shapes), ("hparams", m_hparams),
              ("tokenizer", m_tokenizer), ("data", m_data), ("truncation", m_truncation)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("minfer")
    ap.add_argument("outdir")
    ap.add_argument("--per-category", type=int, default=55)
    ap.add_argument("--seed", type=int, default=13)
    a = ap.parse_args()
    bdir, fdir = os.path.join(a.outdir, "bases"), os.path.join(a.outdir, "files")
    os.makedirs(bdir, exist_ok=True)
    os.makedirs(fdir, exist_ok=True)
    bases = [(spec[0], micro_model(a.minfer, bdir, *spec)) for spec in BASES]
    with open(os.path.join(a.outdir, "manifest.jsonl"), "w") as man:
        for bi, (bname, g) in enumerate(bases):   # the unmutated bases must pass
            path = os.path.join(fdir, f"base-{bname}.gguf")
            with open(path, "wb") as f:
                f.write(ser(g))
            man.write(json.dumps({"path": path, "category": "base", "base": bname, "must_reject": False,
                                  "what": "unmutated base", "must_accept": True}) + "\n")
        for ci, (cat, fn) in enumerate(CATEGORIES):
            rng = random.Random(a.seed * 1000 + ci)
            for k in range(a.per_category):
                bname, g = bases[k % len(bases)] if k % 5 else bases[2 if cat in ("alignment", "data") else 0]
                data, must_reject, what = fn(g, rng)
                path = os.path.join(fdir, f"{cat}-{k:03d}-{bname}.gguf")
                with open(path, "wb") as f:
                    f.write(data)
                man.write(json.dumps({"path": path, "category": cat, "base": bname,
                                      "must_reject": must_reject, "what": what}) + "\n")
        for k, (cat, bname, data, must_reject, what) in enumerate(regressions(bases)):
            path = os.path.join(fdir, f"{cat}-regression-{k:02d}-{bname}.gguf")
            with open(path, "wb") as f:
                f.write(data)
            man.write(json.dumps({"path": path, "category": cat, "base": bname,
                                  "must_reject": must_reject, "what": what}) + "\n")


if __name__ == "__main__":
    main()

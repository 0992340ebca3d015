"""Llama GGUFs whose tensors all share one data range (legal GGUF: tensor infos may point
at overlapping bytes), so a file of a few MiB can describe any number of wide layers.
Written byte by byte (not with the gguf package's writer, which gives every tensor its
own bytes). Used by py_resource_guard.py; not a gate itself."""
import struct

import numpy as np

ALIGN = 32
F32, F16 = 0, 1


def _str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _kv_u32(k, v):
    return _str(k) + struct.pack("<II", 4, v)


def _kv_f32(k, v):
    return _str(k) + struct.pack("<If", 6, v)


def _kv_str(k, v):
    return _str(k) + struct.pack("<I", 8) + _str(v)


def write(path, n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train, fill=None, seed=1):
    """fill: None for small random values, or a float (e.g. nan) every element takes.
    Every tensor is F16 (norms F32) at offset 0 of one range sized for the largest."""
    qd, kvd = head_dim * n_head, head_dim * n_head_kv
    tensors = [("token_embd.weight", [n_embd, n_vocab], F16), ("output_norm.weight", [n_embd], F32)]
    for il in range(n_layer):
        p = "blk.%d." % il
        tensors += [(p + "attn_norm.weight", [n_embd], F32), (p + "attn_q.weight", [n_embd, qd], F16),
                    (p + "attn_k.weight", [n_embd, kvd], F16), (p + "attn_v.weight", [n_embd, kvd], F16),
                    (p + "attn_output.weight", [qd, n_embd], F16), (p + "ffn_norm.weight", [n_embd], F32),
                    (p + "ffn_gate.weight", [n_embd, n_ff], F16), (p + "ffn_up.weight", [n_embd, n_ff], F16),
                    (p + "ffn_down.weight", [n_ff, n_embd], F16)]
    kvs = [_kv_str("general.architecture", "llama"), _kv_str("general.name", "shared-range test model"),
           _kv_u32("llama.block_count", n_layer), _kv_u32("llama.context_length", n_ctx_train),
           _kv_u32("llama.embedding_length", n_embd), _kv_u32("llama.feed_forward_length", n_ff),
           _kv_u32("llama.attention.head_count", n_head), _kv_u32("llama.attention.head_count_kv", n_head_kv),
           _kv_u32("llama.attention.key_length", head_dim), _kv_u32("llama.attention.value_length", head_dim),
           _kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5), _kv_f32("llama.rope.freq_base", 10000.0)]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    largest = 0
    for name, ne, typ in tensors:
        head += _str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        head += struct.pack("<IQ", typ, 0)
        largest = max(largest, int(np.prod(ne)) * (4 if typ == F32 else 2))
    head += b"\0" * (-len(head) % ALIGN)
    # one range read as F16 by some tensors and F32 by others: F32 words of two equal F16
    # halves keep both readings small (or both NaN for the fill)
    n16 = (largest + 1) // 2
    if fill is None:
        h = (np.random.default_rng(seed).standard_normal(n16 // 2 + 1) * 0.05).astype(np.float16)
        data = np.repeat(h, 2)[:n16]
    else:
        data = np.full(n16, fill, dtype=np.float16)
    with open(path, "wb") as f:
        f.write(head)
        f.write(data.tobytes())
    return len(head) + data.nbytes

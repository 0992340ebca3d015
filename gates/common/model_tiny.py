"""Tiny random llama / qwen2 / qwen3 GGUFs written with the PyPI gguf writer (no minfer
code involved), for the model gates: a second, fully independent source of test models
next to `minfer synth`, and the way to make broken files (missing tensor, unknown
architecture, missing key). Types: f32, f16, q8_0, q4_0, q4_1, q5_0, q5_1 (what
gguf.quants can quantize). Shapes mirror the synth tiny-* shapes."""
import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

SHAPES = {
    # vocab, embd, layers, heads, kv heads, head_dim, ff, ctx, rope base, eps, tied
    "llama": dict(V=512, E=256, L=4, H=4, Hkv=2, hd=64, F=512, ctx=512, base=10000.0, eps=1e-5, tied=False),
    "qwen2": dict(V=384, E=128, L=4, H=4, Hkv=2, hd=32, F=256, ctx=512, base=1000000.0, eps=1e-6, tied=True),
    "qwen3": dict(V=1000, E=256, L=4, H=4, Hkv=2, hd=128, F=512, ctx=512, base=1000000.0, eps=1e-6, tied=True),
}
TYPES = {"f32": QT.F32, "f16": QT.F16, "q8_0": QT.Q8_0, "q4_0": QT.Q4_0, "q4_1": QT.Q4_1,
         "q5_0": QT.Q5_0, "q5_1": QT.Q5_1}


def write_tiny(path, arch, typ="f32", seed=1, drop=(), arch_name=None, drop_keys=()):
    """Write a tiny model. drop: tensor names to leave out; arch_name: the
    general.architecture string to write instead of arch; drop_keys: metadata key
    suffixes (e.g. 'block_count') to leave out."""
    s = SHAPES[arch]
    rng = np.random.default_rng(seed)
    an = arch_name or arch
    w = gguf.GGUFWriter(path, an)
    w.add_name("tiny %s (python writer)" % arch)
    kv = {
        "block_count": s["L"], "context_length": s["ctx"], "embedding_length": s["E"],
        "feed_forward_length": s["F"], "attention.head_count": s["H"],
        "attention.head_count_kv": s["Hkv"],
    }
    for k, v in kv.items():
        if k not in drop_keys:
            w.add_uint32("%s.%s" % (an, k), v)
    if "attention.layer_norm_rms_epsilon" not in drop_keys:
        w.add_float32("%s.attention.layer_norm_rms_epsilon" % an, s["eps"])
    w.add_float32("%s.rope.freq_base" % an, s["base"])
    if arch == "qwen3" or s["hd"] * s["H"] != s["E"]:
        w.add_uint32("%s.attention.key_length" % an, s["hd"])
        w.add_uint32("%s.attention.value_length" % an, s["hd"])
    qt = TYPES[typ]

    def mat(name, K, M):
        if name in drop:
            return
        x = (rng.standard_normal((M, K)) / np.sqrt(K)).astype(np.float32)
        if qt == QT.F32:
            w.add_tensor(name, x)
        elif qt == QT.F16:
            w.add_tensor(name, x.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(x, qt), raw_dtype=qt)

    def vec(name, n, scale=0.1, center=1.0):
        if name in drop:
            return
        w.add_tensor(name, (center + scale * rng.standard_normal(n)).astype(np.float32))

    E, F, hd = s["E"], s["F"], s["hd"]
    qd, kvd = hd * s["H"], hd * s["Hkv"]
    # embeddings larger than the other weights so the residual stream starts O(1)
    if "token_embd.weight" not in drop:
        x = rng.standard_normal((s["V"], E)).astype(np.float32)
        if qt == QT.F32:
            w.add_tensor("token_embd.weight", x)
        elif qt == QT.F16:
            w.add_tensor("token_embd.weight", x.astype(np.float16))
        else:
            w.add_tensor("token_embd.weight", gguf.quants.quantize(x, qt), raw_dtype=qt)
    vec("output_norm.weight", E)
    if not s["tied"]:
        mat("output.weight", E, s["V"])
    for il in range(s["L"]):
        p = "blk.%d." % il
        vec(p + "attn_norm.weight", E)
        mat(p + "attn_q.weight", E, qd)
        mat(p + "attn_k.weight", E, kvd)
        mat(p + "attn_v.weight", E, kvd)
        if arch == "qwen2":
            vec(p + "attn_q.bias", qd, 0.2, 0.0)
            vec(p + "attn_k.bias", kvd, 0.2, 0.0)
            vec(p + "attn_v.bias", kvd, 0.2, 0.0)
        if arch == "qwen3":
            vec(p + "attn_q_norm.weight", hd)
            vec(p + "attn_k_norm.weight", hd)
        mat(p + "attn_output.weight", qd, E)
        vec(p + "ffn_norm.weight", E)
        mat(p + "ffn_gate.weight", E, F)
        mat(p + "ffn_up.weight", E, F)
        mat(p + "ffn_down.weight", F, E)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return s

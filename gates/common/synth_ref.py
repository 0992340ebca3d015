"""Shared by py_synth.py and py_quantize.py: an independent Python statement of the
model shapes, the GGUF tensor list, the llama.cpp type-mix rule, and a small test
reporter. Block sizes and file-type numbers come from the PyPI gguf package, not from
minfer; hyper-parameters are written from the models' HF config.json facts."""
import os
import subprocess
import sys

import numpy as np
import gguf

QT = gguf.GGMLQuantizationType

# name: arch, vocab, embd, layers, heads, kv, head_dim, ff, ctx, theta, eps, tied, pre
SHAPES = {
    "tiny-llama": ("llama", 512, 256, 4, 4, 2, 64, 512, 512, 10000.0, 1e-5, False, "smollm"),
    "tiny-qwen2": ("qwen2", 384, 128, 4, 4, 2, 32, 256, 512, 1e6, 1e-6, True, "qwen2"),
    "tiny-qwen3": ("qwen3", 1000, 256, 4, 4, 2, 128, 512, 512, 1e6, 1e-6, True, "qwen2"),
    "smollm2-135m": ("llama", 49152, 576, 30, 9, 3, 64, 1536, 8192, 100000.0, 1e-5, True, "smollm"),
    "smollm2-360m": ("llama", 49152, 960, 32, 15, 5, 64, 2560, 8192, 100000.0, 1e-5, True, "smollm"),
    "smollm2-1.7b": ("llama", 49152, 2048, 24, 32, 32, 64, 8192, 8192, 130000.0, 1e-5, True, "smollm"),
    "qwen2.5-0.5b": ("qwen2", 151936, 896, 24, 14, 2, 64, 4864, 32768, 1e6, 1e-6, True, "qwen2"),
    "qwen2.5-1.5b": ("qwen2", 151936, 1536, 28, 12, 2, 128, 8960, 32768, 1e6, 1e-6, True, "qwen2"),
    "qwen2.5-3b": ("qwen2", 151936, 2048, 36, 16, 2, 128, 11008, 32768, 1e6, 1e-6, True, "qwen2"),
    "qwen2.5-7b": ("qwen2", 152064, 3584, 28, 28, 4, 128, 18944, 32768, 1e6, 1e-6, False, "qwen2"),
    "qwen3-0.6b": ("qwen3", 151936, 1024, 28, 16, 8, 128, 3072, 40960, 1e6, 1e-6, True, "qwen2"),
    "qwen3-1.7b": ("qwen3", 151936, 2048, 28, 16, 8, 128, 6144, 40960, 1e6, 1e-6, True, "qwen2"),
    "qwen3-4b": ("qwen3", 151936, 2560, 36, 32, 8, 128, 9728, 40960, 1e6, 1e-6, True, "qwen2"),
    "qwen3-8b": ("qwen3", 151936, 4096, 36, 32, 8, 128, 12288, 40960, 1e6, 1e-6, False, "qwen2"),
}
FIELDS = ("arch", "n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv", "head_dim", "n_ff", "n_ctx",
          "theta", "eps", "tied", "pre")


def shape(name):
    return dict(zip(FIELDS, SHAPES[name]))


def expected_tensors(name):
    """[(tensor name, (ne0, ne1) or (ne0,))] in any order."""
    s = shape(name)
    E, V, F, hd = s["n_embd"], s["n_vocab"], s["n_ff"], s["head_dim"]
    Q, KV = s["n_head"] * hd, s["n_head_kv"] * hd
    out = [("token_embd.weight", (E, V)), ("output_norm.weight", (E,))]
    if not s["tied"]:
        out.append(("output.weight", (E, V)))
    for i in range(s["n_layer"]):
        b = "blk.%d." % i
        out += [(b + "attn_norm.weight", (E,)), (b + "ffn_norm.weight", (E,)),
                (b + "attn_q.weight", (E, Q)), (b + "attn_k.weight", (E, KV)), (b + "attn_v.weight", (E, KV)),
                (b + "attn_output.weight", (Q, E)), (b + "ffn_gate.weight", (E, F)),
                (b + "ffn_up.weight", (E, F)), (b + "ffn_down.weight", (F, E))]
        if s["arch"] == "qwen2":
            out += [(b + "attn_q.bias", (Q,)), (b + "attn_k.bias", (KV,)), (b + "attn_v.bias", (KV,))]
        if s["arch"] == "qwen3":
            out += [(b + "attn_q_norm.weight", (hd,)), (b + "attn_k_norm.weight", (hd,))]
    return out


# mix name -> (base type, llama_ftype member name, q4_k_m-style layer picks)
MIXES = {
    "f32": ("F32", "ALL_F32", False), "f16": ("F16", "MOSTLY_F16", False), "bf16": ("BF16", "MOSTLY_BF16", False),
    "q4_0": ("Q4_0", "MOSTLY_Q4_0", False), "q4_1": ("Q4_1", "MOSTLY_Q4_1", False),
    "q5_0": ("Q5_0", "MOSTLY_Q5_0", False), "q5_1": ("Q5_1", "MOSTLY_Q5_1", False),
    "q8_0": ("Q8_0", "MOSTLY_Q8_0", False),
    "q4_k": ("Q4_K", "MOSTLY_Q4_K_S", False), "q4_k_s": ("Q4_K", "MOSTLY_Q4_K_S", False),
    "q4_k_m": ("Q4_K", "MOSTLY_Q4_K_M", True),
    "q5_k": ("Q5_K", "MOSTLY_Q5_K_S", False), "q5_k_s": ("Q5_K", "MOSTLY_Q5_K_S", False),
    "q5_k_m": ("Q5_K", "MOSTLY_Q5_K_M", True),
    "q6_k": ("Q6_K", "MOSTLY_Q6_K", False),
}
FLOATS = ("F32", "F16", "BF16")


def file_type(mix):
    return int(gguf.LlamaFileType[MIXES[mix][1]])


def block(tname):
    return gguf.GGML_QUANT_SIZES[QT[tname]][0]


def _fits(tname, ne0):
    if ne0 % block(tname) == 0:
        return tname
    alt = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}.get(tname)
    if alt and ne0 % block(alt) == 0:
        return alt
    return "F16"


def expected_types(mix, pure, tensors):
    """tensors: [(name, ne)] in FILE ORDER. Returns {name: type name} by llama.cpp's rule:
    attn_v / ffn_down counters run over the tensors in file order."""
    base, _, picks = MIXES[mix]
    names = [n for n, _ in tensors]
    has_output = "output.weight" in names
    n_v = sum(n.endswith(".attn_v.weight") for n in names)
    n_d = sum(n.endswith(".ffn_down.weight") for n in names)

    def more(i, n):
        return i < n // 8 or i >= (7 * n) // 8 or (i - n // 8) % 3 == 2

    out, iv, idn = {}, 0, 0
    for name, ne in tensors:
        t = base
        if len(ne) == 1:
            t = "F32"
        else:
            if not pure and base not in FLOATS:
                if name == "output.weight" or (name == "token_embd.weight" and not has_output):
                    t = "Q8_0" if ne[0] % 256 else (base if base == "Q8_0" else "Q6_K")
                elif picks and name.endswith(".attn_v.weight") and more(iv, n_v):
                    t = "Q6_K"
                elif picks and name.endswith(".ffn_down.weight") and more(idn, n_d):
                    t = "Q6_K"
            if t not in FLOATS:
                t = _fits(t, ne[0])
        out[name] = t
        iv += name.endswith(".attn_v.weight")
        idn += name.endswith(".ffn_down.weight")
    return out


def field(r, key):
    f = r.fields.get(key)
    if f is None:
        return None
    return f.contents()


def tensor_ne(t):
    return tuple(int(x) for x in t.shape)


def run(cmd, timeout=600):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)


class Report:
    def __init__(self, name):
        self.name, self.p, self.f, self.s = name, 0, 0, 0

    def ok(self, cond, what, detail=""):
        if cond:
            self.p += 1
        else:
            self.f += 1
            print("FAIL %s: %s" % (what, detail), flush=True)
        return cond

    def skip(self, what, why):
        self.s += 1
        print("SKIP %s: %s" % (what, why), flush=True)

    def done(self):
        print("%d passed, %d failed, %d skipped" % (self.p, self.f, self.s))
        sys.exit(1 if self.f else 0)


def minfer_bin(argv):
    build = argv[1] if len(argv) > 1 else os.environ.get("MINFER_BUILD", "build")
    return os.path.join(build, "minfer")


def read_kv(path):
    """Fast metadata-only GGUF reader (scalars; arrays as their length) for big real files,
    where gguf.GGUFReader spends seconds building per-token fields. Also returns the tensor
    infos as {name: (type id, ne tuple)}."""
    import struct
    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    with open(path, "rb") as f:
        buf = f.read(64 << 20)
    pos = [0]

    def take(fmt):
        v = struct.unpack_from("<" + fmt, buf, pos[0])
        pos[0] += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        n = take("Q")
        s = buf[pos[0]:pos[0] + n].decode("utf-8", "replace")
        pos[0] += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            if et == 8:
                for _ in range(n):
                    pos[0] += 8 + struct.unpack_from("<Q", buf, pos[0])[0]
            elif et in sizes:
                pos[0] += n * struct.calcsize(sizes[et])
            else:
                for _ in range(n):
                    value(et)
            return ("array", n)
        return take(sizes[t])

    assert take("I") == 0x46554747, "not a GGUF file"
    take("I")
    n_t, n_kv = take("Q"), take("Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("I"))
    tensors = {}
    for _ in range(n_t):
        name = string()
        nd = take("I")
        ne = tuple(take("Q") for _ in range(nd))
        tensors[name] = (take("I"), ne)
        take("Q")
    return kv, tensors

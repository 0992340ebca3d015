"""Independent NumPy forward pass of the llama / qwen2 / qwen3 decoders, for the gates.

Reads the GGUF with the PyPI `gguf` package and dequantizes with gguf.quants (none of
minfer's C code is involved), computes in float64, and can optionally mimic two
rounding steps of the engine so that comparisons can be tight:
  - kv_f16:   K and V are rounded to IEEE half when stored (minfer's default F16 cache)
  - act_quant: a matmul's activations are quantized to the weight type's dot-product
               format first (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for
               K-quants; F32 for F32/F16/BF16) -- mi_type_traits.vec_dot_type
Every intermediate is recorded under the name minfer gives the node (blk.3.attn_q ...)
so the per-op taps of MINFER_DEBUG_LAYERS can be compared one by one.
"""
import struct

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

ACT_TYPE = {
    QT.Q4_0: "q8_0", QT.Q5_0: "q8_0", QT.Q8_0: "q8_0",
    QT.Q4_1: "q8_1", QT.Q5_1: "q8_1",
    QT.Q2_K: "q8_k", QT.Q3_K: "q8_k", QT.Q4_K: "q8_k", QT.Q5_K: "q8_k", QT.Q6_K: "q8_k",
    QT.F16: "f32", QT.BF16: "f32", QT.F32: "f32",   # minfer's F16/BF16 dots take F32 activations
}


def _f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float64)


def _bf16(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16   # round to nearest even
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def quant_act(x, kind):
    """Round-trip activations x [n, K] through the dot-product format `kind`.
    Q8_0/Q8_1: per 32, d = amax/127 (float32), q = round(x/d) (half away from zero),
    dequantized with d stored as half. Q8_K: per 256, d = -max/127 where max is the
    signed value of largest magnitude, q = round(x * (-127/max)) capped at 127, d float32.
    For Q8_1 the block sum s = half(d*sum(q)) enters the Q4_1/Q5_1 dot through the
    weight minimum; that is mimicked separately (q8_1_sums)."""
    if kind == "f32":
        return x
    if kind == "f16":
        return _f16(x)
    if kind == "bf16":
        return _bf16(x)
    x32 = np.asarray(x, dtype=np.float32)
    n, K = x32.shape
    if kind in ("q8_0", "q8_1"):
        b = x32.reshape(n, K // 32, 32)
        amax = np.abs(b).max(axis=2, keepdims=True)
        d = (amax / np.float32(127)).astype(np.float32)
        inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
        q = b * inv
        q = np.sign(q) * np.floor(np.abs(q) + np.float32(0.5))   # roundf: half away from zero
        return (q.astype(np.float64) * _f16(d)).reshape(n, K)
    if kind == "q8_k":
        b = x32.reshape(n, K // 256, 256)
        idx = np.abs(b).argmax(axis=2)[..., None]
        mx = np.take_along_axis(b, idx, axis=2).astype(np.float32)
        safe = np.where(mx != 0, mx, 1).astype(np.float32)
        iscale = np.where(mx != 0, np.float32(-127) / safe, 0).astype(np.float32)
        v = (b * iscale).astype(np.float32)
        q = np.minimum(np.round(v), 127)   # nearest_int in ggml: round half to even
        d = np.where(iscale != 0, np.float32(1) / np.where(iscale != 0, iscale, 1), 0).astype(np.float32)
        return (q.astype(np.float64) * d.astype(np.float64)).reshape(n, K)
    raise ValueError(kind)


class Weight:
    def __init__(self, t):
        self.name = t.name
        self.type = QT(t.tensor_type)
        self.ne = [int(v) for v in t.shape]
        w = gguf.quants.dequantize(t.data, self.type)
        self.w = np.asarray(w, dtype=np.float64).reshape(self.ne[::-1] if len(self.ne) > 1 else self.ne)
        self.raw = t.data
        self._qw = None

    def matmul(self, x, act_quant):
        """W [K, M] (numpy [M, K]) @ x [n, K] -> [n, M]"""
        if not act_quant:
            return x @ self.w.T
        kind = ACT_TYPE.get(self.type, "f32")
        xa = quant_act(x, kind)
        y = xa @ self.w.T
        if kind == "q8_1":
            # the dot uses half(d_a * sum(q_a)) for the weight-minimum term instead of
            # the exact d_a*sum(q_a): correct y by m_w * (s_half - s_exact) per block
            y = y + self._q8_1_correction(x)
        return y

    def _q8_1_correction(self, x):
        x32 = np.asarray(x, dtype=np.float32)
        n, K = x32.shape
        b = x32.reshape(n, K // 32, 32)
        amax = np.abs(b).max(axis=2)
        d = (amax / np.float32(127)).astype(np.float32)
        inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
        q = b * inv[..., None]
        q = np.sign(q) * np.floor(np.abs(q) + np.float32(0.5))
        qs = q.sum(axis=2)
        s_half = _f16((d * qs).astype(np.float32))
        s_exact = _f16(d) * qs
        if self._qw is None:
            # per-block minimum m of the weight rows (Q4_1: bytes 2..3, Q5_1: bytes 2..3)
            bs = gguf.GGML_QUANT_SIZES[self.type][1]
            blocks = np.asarray(self.raw, dtype=np.uint8).reshape(self.ne[1], -1, bs)
            self._qw = blocks[:, :, 2:4].copy().view(np.float16).astype(np.float64)[..., 0]  # [M, K/32]
        return (s_half - s_exact) @ self._qw.T


class Model:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        self.reader = r
        f = r.fields

        def get(key, default=None, required=True):
            if key not in f:
                if required and default is None:
                    raise KeyError(key)
                return default
            return f[key].contents()

        self.arch = get("general.architecture")
        a = self.arch
        self.n_layer = int(get(a + ".block_count"))
        self.n_embd = int(get(a + ".embedding_length"))
        self.n_head = int(get(a + ".attention.head_count"))
        self.n_head_kv = int(get(a + ".attention.head_count_kv", self.n_head))
        self.head_dim = int(get(a + ".attention.key_length", self.n_embd // self.n_head))
        self.n_rot = int(get(a + ".rope.dimension_count", self.head_dim))
        self.eps = float(get(a + ".attention.layer_norm_rms_epsilon"))
        self.freq_base = float(get(a + ".rope.freq_base", 10000.0))
        self.neox = a in ("qwen2", "qwen3")
        self.t = {t.name: Weight(t) for t in r.tensors}
        self.tied = "output.weight" not in self.t
        self.n_vocab = self.t["token_embd.weight"].ne[1]

    def W(self, name):
        return self.t[name]

    def rope(self, x, pos):
        """x [n, hd*H]: rotate the first n_rot dims of each head by pos * base^(-2i/n_rot)."""
        n = x.shape[0]
        hd, nr = self.head_dim, self.n_rot
        xh = x.reshape(n, -1, hd).copy()
        i = np.arange(nr // 2, dtype=np.float64)
        inv = self.freq_base ** (-2.0 * i / nr)
        ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]   # [n, nr/2]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        if self.neox:
            x0, x1 = xh[:, :, : nr // 2].copy(), xh[:, :, nr // 2: nr].copy()
            xh[:, :, : nr // 2] = x0 * c - x1 * s
            xh[:, :, nr // 2: nr] = x0 * s + x1 * c
        else:
            x0, x1 = xh[:, :, 0:nr:2].copy(), xh[:, :, 1:nr:2].copy()
            xh[:, :, 0:nr:2] = x0 * c - x1 * s
            xh[:, :, 1:nr:2] = x0 * s + x1 * c
        return xh.reshape(n, -1)

    def rms(self, x, w, group=None):
        n = x.shape[0]
        g = group or x.shape[1]
        xr = x.reshape(n, -1, g)
        y = xr / np.sqrt((xr * xr).mean(axis=2, keepdims=True) + self.eps) * w
        return y.reshape(n, -1)

    def forward(self, tokens, kv_f16=True, act_quant=False, taps=None):
        """Logits [n, n_vocab] of every position of `tokens` (one causal batch from 0).
        taps: dict filled with name -> [n, dim] intermediates."""
        T = lambda name, v: taps.__setitem__(name, v) if taps is not None else None
        tokens = np.asarray(tokens, dtype=np.int64)
        n = len(tokens)
        pos = np.arange(n)
        hd, Hq, Hkv = self.head_dim, self.n_head, self.n_head_kv
        x = self.W("token_embd.weight").w[tokens]
        T("inp_embd", x)
        mask = np.triu(np.full((n, n), -np.inf), k=1)
        for il in range(self.n_layer):
            p = "blk.%d." % il
            cur = self.rms(x, self.W(p + "attn_norm.weight").w)
            T(p + "attn_norm", cur)
            q = self.W(p + "attn_q.weight").matmul(cur, act_quant)
            k = self.W(p + "attn_k.weight").matmul(cur, act_quant)
            v = self.W(p + "attn_v.weight").matmul(cur, act_quant)
            if self.arch == "qwen2":
                q = q + self.W(p + "attn_q.bias").w
                k = k + self.W(p + "attn_k.bias").w
                v = v + self.W(p + "attn_v.bias").w
            T(p + "attn_q", q); T(p + "attn_k", k); T(p + "attn_v", v)
            if self.arch == "qwen3":
                q = self.rms(q, self.W(p + "attn_q_norm.weight").w, hd)
                k = self.rms(k, self.W(p + "attn_k_norm.weight").w, hd)
                T(p + "attn_q_norm", q); T(p + "attn_k_norm", k)
            q = self.rope(q, pos)
            k = self.rope(k, pos)
            T(p + "attn_q_rope", q); T(p + "attn_k_rope", k)
            if kv_f16:
                k, v = _f16(k), _f16(v)
            qh = q.reshape(n, Hq, hd).transpose(1, 0, 2)           # [Hq, n, hd]
            kh = k.reshape(n, Hkv, hd).transpose(1, 0, 2)
            vh = v.reshape(n, Hkv, hd).transpose(1, 0, 2)
            rep = Hq // Hkv
            kh = np.repeat(kh, rep, axis=0)
            vh = np.repeat(vh, rep, axis=0)
            sc = qh @ kh.transpose(0, 2, 1) / np.sqrt(hd) + mask
            sc = np.exp(sc - sc.max(axis=2, keepdims=True))
            sc /= sc.sum(axis=2, keepdims=True)
            att = (sc @ vh).transpose(1, 0, 2).reshape(n, Hq * hd)
            T(p + "attn", att)
            o = self.W(p + "attn_output.weight").matmul(att, act_quant)
            T(p + "attn_output", o)
            x = x + o
            T(p + "ffn_inp", x)
            cur = self.rms(x, self.W(p + "ffn_norm.weight").w)
            T(p + "ffn_norm", cur)
            g = self.W(p + "ffn_gate.weight").matmul(cur, act_quant)
            u = self.W(p + "ffn_up.weight").matmul(cur, act_quant)
            T(p + "ffn_gate", g); T(p + "ffn_up", u)
            a = g / (1.0 + np.exp(-g)) * u
            T(p + "ffn_swiglu", a)
            d = self.W(p + "ffn_down.weight").matmul(a, act_quant)
            T(p + "ffn_down", d)
            x = x + d
            T(p + "out", x)
        x = self.rms(x, self.W("output_norm.weight").w)
        T("output_norm", x)
        out = self.W("token_embd.weight" if self.tied else "output.weight")
        return out.matmul(x, act_quant)


def nmse(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    den = float((want * want).sum())
    return float(((got - want) ** 2).sum()) / (den if den > 0 else 1.0)


def read_logits(path):
    """minfer --dump-logits file: 'MILG', u32 version (1), u32 n_vocab, u32 n_rows, then
    n_rows rows of n_vocab float32 (prompt positions, then one per generated step)."""
    with open(path, "rb") as fh:
        hdr = fh.read(16)
        if len(hdr) != 16 or hdr[:4] != b"MILG":
            raise ValueError("%s: not a minfer logits dump" % path)
        ver, nv, nr = struct.unpack("<III", hdr[4:])
        if ver != 1:
            raise ValueError("%s: logits dump version %d" % (path, ver))
        data = np.frombuffer(fh.read(), dtype="<f4")
    if data.size != nv * nr:
        raise ValueError("%s: %d floats, header says %d x %d" % (path, data.size, nv, nr))
    return data.reshape(nr, nv)


def read_taps(path):
    """MINFER_DEBUG_LAYERS file: records of u32 name_len, name, u32 ne0, u32 ne1, u32 n_past,
    then ne0*ne1 float32. Returns a list of (name, n_past, array [ne1, ne0])."""
    out = []
    with open(path, "rb") as fh:
        buf = fh.read()
    o = 0
    while o + 4 <= len(buf):
        (ln,) = struct.unpack_from("<I", buf, o); o += 4
        name = buf[o:o + ln].decode(); o += ln
        ne0, ne1, npast = struct.unpack_from("<III", buf, o); o += 12
        cnt = ne0 * ne1
        arr = np.frombuffer(buf, dtype="<f4", count=cnt, offset=o).reshape(ne1, ne0)
        o += 4 * cnt
        out.append((name, npast, arr))
    return out


def check_ops(m, T, tokens, kv_f16, wants=None):
    """Teacher-forced per-op check: recompute every tapped op of one whole-sequence batch
    from minfer's OWN inputs (taps T: name -> [n, dim]) and return [(name, nmse)] in graph
    order. Inputs are bit-identical, so even the activation quantization rounds the same
    way: any op above ~1e-9 is a real difference in that op."""
    T = {k: np.asarray(v, dtype=np.float64) for k, v in T.items()}
    n = T["inp_embd"].shape[0]
    pos = np.arange(n)
    hd, Hq, Hkv = m.head_dim, m.n_head, m.n_head_kv
    out = []

    def chk(name, want):
        if name in T:
            out.append((name, nmse(T[name], want)))
            if wants is not None:
                wants[name] = want

    def attn(q, k, v):
        if kv_f16:
            k, v = _f16(k), _f16(v)
        qh = q.reshape(n, Hq, hd).transpose(1, 0, 2)
        kh = np.repeat(k.reshape(n, Hkv, hd).transpose(1, 0, 2), Hq // Hkv, axis=0)
        vh = np.repeat(v.reshape(n, Hkv, hd).transpose(1, 0, 2), Hq // Hkv, axis=0)
        sc = qh @ kh.transpose(0, 2, 1) / np.sqrt(hd) + np.triu(np.full((n, n), -np.inf), k=1)
        sc = np.exp(sc - sc.max(axis=2, keepdims=True))
        sc /= sc.sum(axis=2, keepdims=True)
        return (sc @ vh).transpose(1, 0, 2).reshape(n, Hq * hd)

    W = lambda name: m.W(name)
    chk("inp_embd", W("token_embd.weight").w[np.asarray(tokens, dtype=np.int64)])
    prev = T["inp_embd"]
    for il in range(m.n_layer):
        p = "blk.%d." % il
        if p + "out" not in T:
            break
        chk(p + "attn_norm", m.rms(prev, W(p + "attn_norm.weight").w))
        xn = T[p + "attn_norm"]
        for nm in ("q", "k", "v"):
            y = W(p + "attn_%s.weight" % nm).matmul(xn, True)
            if m.arch == "qwen2":
                y = y + W(p + "attn_%s.bias" % nm).w
            chk(p + "attn_" + nm, y)
        q, k = T[p + "attn_q"], T[p + "attn_k"]
        if m.arch == "qwen3":
            chk(p + "attn_q_norm", m.rms(q, W(p + "attn_q_norm.weight").w, hd))
            chk(p + "attn_k_norm", m.rms(k, W(p + "attn_k_norm.weight").w, hd))
            q, k = T[p + "attn_q_norm"], T[p + "attn_k_norm"]
        chk(p + "attn_q_rope", m.rope(q, pos))
        chk(p + "attn_k_rope", m.rope(k, pos))
        chk(p + "attn", attn(T[p + "attn_q_rope"], T[p + "attn_k_rope"], T[p + "attn_v"]))
        chk(p + "attn_output", W(p + "attn_output.weight").matmul(T[p + "attn"], True))
        chk(p + "ffn_inp", prev + T[p + "attn_output"])
        chk(p + "ffn_norm", m.rms(T[p + "ffn_inp"], W(p + "ffn_norm.weight").w))
        chk(p + "ffn_gate", W(p + "ffn_gate.weight").matmul(T[p + "ffn_norm"], True))
        chk(p + "ffn_up", W(p + "ffn_up.weight").matmul(T[p + "ffn_norm"], True))
        g = T[p + "ffn_gate"]
        chk(p + "ffn_swiglu", g / (1.0 + np.exp(-g)) * T[p + "ffn_up"])
        chk(p + "ffn_down", W(p + "ffn_down.weight").matmul(T[p + "ffn_swiglu"], True))
        chk(p + "out", T[p + "ffn_inp"] + T[p + "ffn_down"])
        prev = T[p + "out"]
    if "output_norm" in T and T["output_norm"].shape[0] == n:
        chk("output_norm", m.rms(prev, W("output_norm.weight").w))
    return out

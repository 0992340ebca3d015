#!/usr/bin/env python3
"""Quant formats vs the PyPI gguf package (an independent reference).

Usage: py_quant_ref.py BUILD [--models DIR]   (DIR default models/, or $MINFER_MODELS_DIR)
Drives BUILD/gates/common/gate_quant_io and checks:
  1. dequantize == gguf.quants.dequantize bit for bit, random blocks (finite scales) of every type;
  2. quantize == gguf.quants.quantize byte for byte for Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 (and BF16, F16)
     on random data; any mismatching block is counted, printed and classified, never dropped;
  3. every tensor of every DIR/*.gguf (rows sampled in big tensors, every tensor covered):
     dequantize bit for bit, and quantize of its values into the five legacy types bit for bit;
  4. K-quants (Q4_K Q5_K Q6_K): our quantizer's RMSE, on data the real files' own blocks were
     made from (their values plus a uniform sub-step jitter), is no worse than those blocks';
     on random data it must beat a plain min/max (no search) quantizer.
Last line: "N passed, N failed, N skipped"; exit status 1 on any failure.
"""
import os, struct, subprocess, sys, tempfile, time
import numpy as np
try:
    import gguf
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as GT
except ImportError as e:  # the independent reference is required: no silent pass
    print(f"the PyPI gguf package is needed ({e}); run tools/setup_deps.sh")
    print("0 passed, 1 failed")
    sys.exit(1)

T0 = time.time()
PASS = FAIL = SKIP = 0
RNG = np.random.default_rng(20261129)
WEIGHT_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
LEGACY = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
KQ = ["Q4_K", "Q5_K", "Q6_K"]
# byte offsets of the fp16 scale fields inside one block (they must be finite in random blocks)
SCALE_OFFS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
              "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


def check(name, ok, detail=""):
    global PASS, FAIL
    if ok:
        PASS += 1
        print(f"PASS {name} {detail}")
    else:
        FAIL += 1
        print(f"FAIL {name} {detail}")


def skip(name, why):
    global SKIP
    SKIP += 1
    print(f"SKIP {name}: {why}")


def bsize(t):
    return GGML_QUANT_SIZES[GT[t]]


class Tool:
    def __init__(self, build):
        self.exe = os.path.join(build, "gates", "common", "gate_quant_io")
        if not os.access(self.exe, os.X_OK):
            print(f"gate_quant_io not built: {self.exe}")
            print("0 passed, 1 failed")
            sys.exit(1)
        self.tmp = tempfile.mkdtemp(prefix="quantio")

    def run(self, cmd, t, data, out_dtype):
        i, o = os.path.join(self.tmp, "in"), os.path.join(self.tmp, "out")
        data.tofile(i)
        r = subprocess.run([self.exe, cmd, t, i, o], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"gate_quant_io {cmd} {t}: {r.stderr.strip()}")
        return np.fromfile(o, dtype=out_dtype)

    def dequant(self, t, raw):
        return self.run("dequant", t, np.ascontiguousarray(raw).view(np.uint8), np.float32)

    def quant(self, t, x):
        return self.run("quant", t, np.ascontiguousarray(x, dtype=np.float32), np.uint8)


def ref_dequant(t, raw):
    return gguf.quants.dequantize(raw.view(np.uint8), GT[t]).astype(np.float32).reshape(-1)


def ref_quant(t, x):
    return np.ascontiguousarray(gguf.quants.quantize(x.astype(np.float32), GT[t])).view(np.uint8).reshape(-1)


def first_bits_mismatch(got, want, k=5):
    g, w = got.view(np.uint32), want.view(np.uint32)
    bad = np.nonzero(g != w)[0]
    return bad, ", ".join(f"(i={i}, got={got[i]!r}, want={want[i]!r})" for i in bad[:k])


def compare_dequant(name, tool, t, raw):
    got, want = tool.dequant(t, raw), ref_dequant(t, raw)
    if got.shape != want.shape:
        check(name, False, f"size got {got.shape} want {want.shape}")
        return
    bad, first = first_bits_mismatch(got, want)
    check(name, len(bad) == 0, f"{want.size} values" + (f", {len(bad)} differ: {first}" if len(bad) else ""))


def classify_quant_mismatch(t, x, got, want):
    """Why two quantized blocks differ: a rounding tie (x/d within 1 ulp of .5), else 'other'."""
    bs, ts = bsize(t)
    nb = x.size // bs
    g, w = got.reshape(nb, ts), want.reshape(nb, ts)
    badb = np.nonzero((g != w).any(axis=1))[0]
    ties = 0
    for b in badb:
        blk = x[b * bs:(b + 1) * bs].astype(np.float32)
        d = np.float32(np.frombuffer(w[b, :2].tobytes(), np.float16)[0])
        if d != 0:
            r = blk / d
            frac = np.abs(r - np.floor(r) - np.float32(0.5))
            ties += int((frac <= np.abs(r) * np.float32(2 ** -22)).any())
    return badb, ties


def exact_ties(t, x):
    """Elements whose pre-rounding value lands exactly on a rounding boundary (.5 for roundf,
    an integer for trunc(v + .5)), evaluated in f32 as ggml does: shows the tie path is exercised."""
    if t not in LEGACY:
        return 0
    b = x.reshape(-1, 32).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        if t in ("Q4_0", "Q5_0"):
            imax = np.abs(b).argmax(axis=1)[:, None]
            d = np.take_along_axis(b, imax, 1) / np.float32(-8 if t == "Q4_0" else -16)
            idv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
            v = b * idv + np.float32(8.5 if t == "Q4_0" else 16.5)
            return int(((v == np.floor(v)) & (d != 0)).sum())
        if t in ("Q4_1", "Q5_1"):
            mn, mx = b.min(axis=1, keepdims=True), b.max(axis=1, keepdims=True)
            d = (mx - mn) / np.float32(15 if t == "Q4_1" else 31)
            idv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
            v = (b - mn) * idv + np.float32(0.5)
            return int(((v == np.floor(v)) & (d != 0)).sum())
        d = np.abs(b).max(axis=1, keepdims=True) / np.float32(127)
        idv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
        v = np.abs(b * idv)
        return int((v - np.floor(v) == np.float32(0.5)).sum())


def compare_quant(name, tool, t, x):
    got, want = tool.quant(t, x), ref_quant(t, x)
    if got.shape != want.shape:
        check(name, False, f"size got {got.shape} want {want.shape}")
        return
    if t in ("F16", "BF16"):
        bad = np.nonzero(got != want)[0]
        check(name, len(bad) == 0, f"{x.size} values, {len(bad)} bytes differ " +
              ", ".join(f"(byte={i}, got={got[i]}, want={want[i]})" for i in bad[:5]))
        return
    badb, ties = classify_quant_mismatch(t, x, got, want)
    bs, ts = bsize(t)
    detail = (f"{x.size // bs} blocks ({exact_ties(t, x)} values exactly at a rounding boundary), "
              f"{len(badb)} differ ({ties} at a rounding tie, {len(badb) - ties} other)")
    for b in badb[:3]:  # first mismatches: (block, byte in block, got, want)
        j = int(np.nonzero(got[b * ts:(b + 1) * ts] != want[b * ts:(b + 1) * ts])[0][0])
        detail += f"; (block {b}, byte {j}, got {got[b * ts + j]}, want {want[b * ts + j]})"
    # A difference is only excusable when it is a counted rounding tie; there are none expected
    # because both sides evaluate the same f32 expressions (see docs/QUANT.md), so any is a failure.
    check(name, len(badb) == 0, detail)


def random_blocks(t, nb):
    bs, ts = bsize(t)
    if t == "F32":
        x = RNG.standard_normal(nb * bs).astype(np.float32) * np.float32(10.0) ** RNG.integers(-30, 30, nb * bs)
        return x.astype(np.float32).view(np.uint8)
    if t in ("F16", "BF16"):
        u = RNG.integers(0, 1 << 16, nb * bs, dtype=np.uint32).astype(np.uint16)
        expmask, shift = (0x7C00, 10) if t == "F16" else (0x7F80, 7)
        u[(u & expmask) == expmask] &= np.uint16(0xBFFF)  # no inf/nan: clear the top exponent bit
        return u.view(np.uint8)
    raw = RNG.integers(0, 256, (nb, ts), dtype=np.uint8)
    for off in SCALE_OFFS[t]:
        mag = np.float32(2.0) ** RNG.uniform(-20, 4, nb).astype(np.float32)  # includes fp16 subnormals
        sc = (mag * RNG.choice([-1, 1], nb)).astype(np.float16)
        raw[:, off:off + 2] = sc.view(np.uint8).reshape(nb, 2)
    return raw.reshape(-1)


def random_data(nb, bs):
    """Mixed distributions incl. zero, constant and integer-grid (tie-prone) blocks."""
    n = nb * bs
    x = RNG.standard_normal(n).astype(np.float32)
    kind = RNG.integers(0, 7, nb)
    for b in range(nb):
        s = slice(b * bs, (b + 1) * bs)
        if kind[b] == 1:
            x[s] = RNG.uniform(-1, 1, bs) * np.float32(10.0) ** RNG.integers(-6, 4)
        elif kind[b] == 2:
            x[s] = RNG.integers(-16, 17, bs).astype(np.float32) * np.float32(0.25)  # exact grid: ties
        elif kind[b] == 3:
            x[s] = 0.0 if RNG.random() < 0.5 else np.float32(RNG.standard_normal())
        elif kind[b] == 4:
            x[s] = RNG.standard_t(3, bs)  # heavy tails
        elif kind[b] == 5:  # extreme -8 or -16 steps, the rest on half steps: x/d lands on .5 exactly
            step = np.float32(2.0) ** RNG.integers(-8, 3)
            x[s] = (RNG.integers(-15, 15, bs).astype(np.float32) + np.float32(0.5)) * step
            x[b * bs + RNG.integers(0, bs)] = np.float32(-8 if RNG.random() < 0.5 else -16) * step
    return x.astype(np.float32)


# ---------------- minimal lenient GGUF reader (tolerates truncated files) ----------------
def gguf_tensors(path):
    with open(path, "rb") as f:
        buf = f.read(64 << 20)
    size = os.path.getsize(path)
    pos = [0]

    def rd(fmt):
        v = struct.unpack_from("<" + fmt, buf, pos[0])
        pos[0] += struct.calcsize("<" + fmt)
        return v[0]

    def rstr():
        n = rd("Q")
        s = buf[pos[0]:pos[0] + n]
        pos[0] += n
        return s.decode("utf-8", "replace")
    scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def rval(vt):
        if vt in scal:
            return rd(scal[vt])
        if vt == 8:
            return rstr()
        if vt == 9:
            et, n = rd("I"), rd("Q")
            if et in scal:
                pos[0] += n * struct.calcsize(scal[et])
                return None
            for _ in range(n):
                rval(et)
            return None
        raise ValueError(f"bad kv type {vt}")
    if buf[:4] != b"GGUF":
        raise ValueError("not a GGUF file")
    pos[0] = 4
    rd("I")
    nt, nkv = rd("Q"), rd("Q")
    align = 32
    for _ in range(nkv):
        k = rstr()
        v = rval(rd("I"))
        if k == "general.alignment":
            align = v
    infos = []
    for _ in range(nt):
        name = rstr()
        nd = rd("I")
        dims = [rd("Q") for _ in range(nd)]
        infos.append((name, dims, rd("I"), rd("Q")))
    data0 = (pos[0] + align - 1) // align * align
    out = []
    for name, dims, tid, off in infos:
        tname = GT(tid).name if tid in GT._value2member_map_ else str(tid)
        out.append((name, dims, tname, data0 + off, size))
    return out


def sample_rows(path, dims, t, start, fsize, max_rows):
    bs, ts = bsize(t)
    ne0 = dims[0]
    nrows = int(np.prod(dims[1:])) if len(dims) > 1 else 1
    rb = ne0 // bs * ts
    avail = min(nrows, max(0, (fsize - start) // rb))  # a split/partial file holds a prefix
    if avail == 0:
        return None, False
    rows = np.unique(np.linspace(0, avail - 1, min(avail, max_rows)).astype(np.int64))
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=start, shape=(avail, rb))
    return np.ascontiguousarray(mm[rows]).reshape(-1), avail < nrows


# ---------------- K-quant RMSE ----------------
def k_steps(t, raw):
    """|effective sub-block step| for every element of blocks raw (as gguf decodes them)."""
    bs, ts = bsize(t)
    blk = raw.reshape(-1, ts)
    nb = blk.shape[0]
    if t == "Q6_K":
        d = blk[:, 208:210].copy().view(np.float16).astype(np.float32)
        sc = blk[:, 192:208].view(np.int8).astype(np.float32)
        return np.abs(np.repeat(d * sc, 16, axis=1)).reshape(-1)
    d = blk[:, 0:2].copy().view(np.float16).astype(np.float32)
    sc, _ = gguf.quants.Q4_K.get_scale_min(blk[:, 4:16].copy())
    return np.abs(np.repeat(d * sc.astype(np.float32), 32, axis=1)).reshape(-1)


def naive_k_rmse(t, x):
    """RMSE of a plain K quantizer (no search): per sub-block min/max grid, 6-bit (8-bit for
    Q6_K) scales by rounding, q by rounding; fp16 super-block scales. The baseline to beat."""
    if t == "Q6_K":
        xs = x.reshape(-1, 16, 16)
        imax = np.abs(xs).argmax(axis=2)
        mx = np.take_along_axis(xs, imax[..., None], 2)[..., 0]
        a = mx / -32
        ia = np.abs(a).argmax(axis=1)
        amax = np.take_along_axis(a, ia[:, None], 1)
        d = (amax / -128).astype(np.float16).astype(np.float32)
        ls = np.clip(np.round(np.divide(a, d, out=np.zeros_like(a), where=d != 0)), -128, 127)
        dl = (d * ls)[..., None]
        q = np.clip(np.round(np.divide(xs, dl, out=np.zeros_like(xs), where=dl != 0)), -32, 31)
        y = dl * q
    else:
        nmax = 15 if t == "Q4_K" else 31
        xs = x.reshape(-1, 8, 32)
        lo = np.minimum(xs.min(axis=2), 0)
        hi = xs.max(axis=2)
        a, m = (hi - lo) / nmax, -lo
        d = (a.max(axis=1, keepdims=True) / 63).astype(np.float16).astype(np.float32)
        dm = (m.max(axis=1, keepdims=True) / 63).astype(np.float16).astype(np.float32)
        ls = np.clip(np.round(np.divide(a, d, out=np.zeros_like(a), where=d != 0)), 0, 63)
        lm = np.clip(np.round(np.divide(m, dm, out=np.zeros_like(m), where=dm != 0)), 0, 63)
        dl, ml = (d * ls)[..., None], (dm * lm)[..., None]
        q = np.clip(np.round(np.divide(xs + ml, dl, out=np.zeros_like(xs), where=dl != 0)), 0, nmax)
        y = dl * q - ml
    return float(np.sqrt(np.mean((y.reshape(-1) - x) ** 2)))


def rmse(a, b):
    return float(np.sqrt(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)))


def kquant_real(tool, t, raw, label):
    """raw: real K blocks. Data = their values + uniform jitter within each element's step
    (a stand-in for the weights the file was quantized from)."""
    x = ref_dequant(t, raw)
    jit = (RNG.random(x.size, dtype=np.float32) - np.float32(0.5)) * k_steps(t, raw)
    w = (x + jit).astype(np.float32)
    file_rmse = rmse(x, w)
    ours = rmse(ref_dequant(t, tool.quant(t, w)), w)
    check(f"kquant-rmse {t} {label}", ours <= file_rmse,
          f"{x.size // 256} blocks: ours {ours:.4e} vs file blocks {file_rmse:.4e} (ratio {ours / file_rmse:.3f})")
    # round trip of the file's own values (exactly representable in the format): the search
    # should (nearly) find the file's grid again; bound: a tenth of a quantization error
    rt = ref_dequant(t, tool.quant(t, x))
    rt_rmse = rmse(rt, x)
    check(f"kquant-roundtrip {t} {label}", rt_rmse <= 0.1 * file_rmse,
          f"requantizing the file's values: rmse {rt_rmse:.3e} (<= 0.1 x {file_rmse:.3e}), "
          f"{float(np.mean(rt == x)) * 100:.2f}% of values reproduced exactly")


def main():
    args = sys.argv[1:]
    if not args:
        print("usage: py_quant_ref.py BUILD [--models DIR]")
        print("0 passed, 1 failed")
        return 1
    build = args[0]
    mdir = os.environ.get("MINFER_MODELS_DIR", "models")
    if "--models" in args:
        mdir = args[args.index("--models") + 1]
    tool = Tool(build)

    # 1. random blocks, dequantize
    for t in WEIGHT_TYPES:
        nb = {1: 65536, 32: 4096, 256: 1024}[bsize(t)[0]]
        compare_dequant(f"dequant-random {t}", tool, t, random_blocks(t, nb))

    # 2. random data, quantize
    for t in LEGACY:
        compare_quant(f"quant-random {t}", tool, t, random_data(20000, 32))
    for t in ("F16", "BF16"):
        compare_quant(f"quant-random {t}", tool, t, random_data(2000, 32))

    # 3. real files
    files = sorted(os.path.join(mdir, f) for f in os.listdir(mdir) if f.endswith(".gguf")) if os.path.isdir(mdir) else []
    if not files:
        skip("real-model tensors", f"no *.gguf in {mdir}")
    kreal = {t: [] for t in KQ}
    for path in files:
        try:
            tensors = gguf_tensors(path)
        except Exception as e:  # a garbled file is not our concern here, but it is reported
            skip(f"file {os.path.basename(path)}", f"unreadable header: {e}")
            continue
        per_type, n_t, n_trunc, n_part, other = {}, 0, 0, 0, set()
        for name, dims, t, start, fsize in tensors:
            if t not in WEIGHT_TYPES:
                other.add(t)
                continue
            raw, partial = sample_rows(path, dims, t, start, fsize, 48)
            if raw is None:
                n_trunc += 1
                continue
            n_part += partial
            per_type.setdefault(t, []).append(raw)
            n_t += 1
        base = os.path.basename(path)
        if n_trunc:
            skip(f"{base}: {n_trunc} tensors", "extend past the end of the file (split/partial file)")
        if other:
            skip(f"{base}: types {sorted(other)}", "not in the supported weight types")
        print(f"  {base}: {n_t} tensors sampled ({n_part} only partly present), types {sorted(per_type)}")
        for t, parts in per_type.items():
            raw = np.concatenate(parts)
            compare_dequant(f"dequant-file {base} {t}", tool, t, raw)
            if t in KQ:
                kreal[t].append(raw)
            # real values into every legacy type: ours vs gguf's quantize
            vals = ref_dequant(t, raw)
            vals = vals[: vals.size // 32 * 32][: 32 * 40000]
            if np.isfinite(vals).all():
                for qt in LEGACY:
                    compare_quant(f"quant-file {base} {t}->{qt}", tool, qt, vals)

    # 4. K-quants: real blocks, then random data vs a no-search baseline
    for t in KQ:
        if kreal[t]:
            raw = np.concatenate(kreal[t])
            ts = bsize(t)[1]
            nb = raw.size // ts
            pick = np.sort(RNG.choice(nb, min(nb, 3000), replace=False))
            kquant_real(tool, t, raw.reshape(nb, ts)[pick].reshape(-1), "real blocks")
        else:
            skip(f"kquant-rmse {t} real blocks", "no model file with this type present")
        for dist in ("normal", "heavy", "edge"):
            if dist == "edge":  # zero, constant, single-spike and tiny blocks: must stay finite and not lose
                x = random_data(1500 * 8, 32)
                x[: 256 * 100] = 0.0
                x[256 * 100: 256 * 200] = np.float32(0.75)
                x[256 * 200: 256 * 300] = np.float32(-2.5)
                x[256 * 300: 256 * 400: 97] = np.float32(40.0)
                x[256 * 400: 256 * 500] *= np.float32(1e-6)
            else:
                x = (RNG.standard_normal(256 * 1500) if dist == "normal" else RNG.standard_t(3, 256 * 1500)).astype(np.float32)
            y = ref_dequant(t, tool.quant(t, x))
            ours, base = rmse(y, x), naive_k_rmse(t, x)
            ok = bool(np.isfinite(y).all()) and (ours < base if dist != "edge" else ours <= base * 1.0001)
            check(f"kquant-rmse {t} random {dist}", ok,
                  f"ours {ours:.4e} vs no-search baseline {base:.4e} (ratio {ours / base:.3f})"
                  + ("" if np.isfinite(y).all() else " NON-FINITE output"))
    print(f"time {time.time() - T0:.1f}s")
    print(f"{PASS} passed, {FAIL} failed, {SKIP} skipped")
    return 1 if FAIL else 0


if __name__ == "__main__":
    sys.exit(main())

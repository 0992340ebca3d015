# Host emulation (NumPy) of kernel_gemm_f16_small in phase8b_batch/gemm_f16_small.cu (items b12, b13):
# a run of Q4_0 matmuls of one x cut into bands of 16 RG rows (the row groups from the launcher's rule),
# a grid of at most 132 blocks each taking band after band into its two buffers in turn, each band's
# rows as the aligned 16-byte windows that cover them (each row's data at its slot + (src & 15)), every
# token's f16 activations (groups of four as (e0, e2, e1, e3)) at a stride of 32 mod 128 bytes, the row
# groups and K parts of the 8 warps, each lane's Q4_0 words turned into f16 weights by the kernel's bit
# operations (low nibbles elements 4 tig .., high nibbles 16 + 4 tig .., OR 0x6400, subtract 1032; the high
# nibbles masked in place, 1024 + 16 L, then x / 16 - 72; one rounded multiply by d), the fragments per the PTX ISA tables of gates/7e/ptx_frag.py, every warp's
# sums through shared memory (every slot written once a band, inside its region) and the epilogue over
# the block's threads adding the parts in part order. Checked against a direct formula from ggml's Q4_0
# definition with the same f16 roundings (must agree to float64 noise) and reported against the exact
# product. CPU only: python3 gates/8b/emu_gemm_f16_small.py
import os, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emu_gemm_f16s import h, halves, mma   # noqa: E402

rng = np.random.default_rng(812)
THREADS, SMS = 256, 132
UB = 18   # bytes of a unit of the weight type run() emulates: Q4_0 18, Q8_0 34 (run() sets it)


SMEM_LIMIT = 232448   # an H200 block's opt-in shared memory


def wslot(K): return 16 * ((((K // 32) * UB + 30) // 16) | 1)
def astride(K): return 2 * K + (160 - (2 * K) % 128) % 128
def x_bytes(K, NT): return 8 * NT * astride(K)
def band_bytes(K, RG): return 16 * RG * wslot(K)
def smem_bytes(K, RG, NT): return x_bytes(K, NT) + 2 * band_bytes(K, RG) + 8 * NT * 4 * 32 * 4
def bands(ms, RG): return sum((m + 16 * RG - 1) // (16 * RG) for m in ms)
def slices(K): return 1 if K <= 1024 else (K // 32 + 27) // 28   # sk_slices


def plan(ms, K, NT, S):   # sk_make_plan: (ku, RG, G)
    ku = (K // 32 + S - 1) // S
    Ks, per = 32 * ku, max(SMS // S, 1)
    best, best_cost = 0, None
    for rg in (1, 2, 4):
        if smem_bytes(Ks, rg, NT) > SMEM_LIMIT: break
        b, kp = bands(ms, rg), 8 // rg
        if b <= per: best = rg; break
        cost = (b + per - 1) // per * ((ku + kp - 1) // kp)
        if best_cost is None or cost <= best_cost: best, best_cost = rg, cost
    assert best, "no band fits shared memory"
    return ku, best, min(bands(ms, best), per)


def make_q4_0(K, M):
    raw = rng.integers(0, 256, size=(M, K // 32, UB), dtype=np.uint8)
    d = rng.uniform(0.005, 0.05, size=(M, K // 32)).astype(np.float16)
    raw[:, :, 0:2] = d.view(np.uint8).reshape(M, K // 32, 2)
    return raw.reshape(M, K // 32 * UB)


def make_q8_0(K, M):
    raw = rng.integers(0, 256, size=(M, K // 32, 34), dtype=np.uint8)
    d = rng.uniform(0.0005, 0.005, size=(M, K // 32)).astype(np.float16)
    raw[:, :, 0:2] = d.view(np.uint8).reshape(M, K // 32, 2)
    return raw.reshape(M, K // 32 * 34)


def ref_weights_q8(W, K):   # [M, K]: ggml's Q8_0 (q d), with the kernel's f16 rounding, and exact
    M = W.shape[0]
    blk = W.reshape(M, K // 32, 34)
    d = blk[:, :, 0:2].copy().view(np.float16).astype(np.float64)[:, :, 0]
    q = blk[:, :, 2:].view(np.int8).astype(np.float64)
    we = (q * d[:, :, None]).reshape(M, K)
    return h(we), we


def ref_weights(W, K):   # [M, K]: ggml's Q4_0, with the kernel's f16 rounding of (L - 8) d, and exact
    M = W.shape[0]
    blk = W.reshape(M, K // 32, UB)
    d = blk[:, :, 0:2].copy().view(np.float16).astype(np.float64)[:, :, 0]
    qs = blk[:, :, 2:].astype(np.int64)
    L = np.concatenate([qs & 15, qs >> 4], axis=2) - 8   # elements 0..15 low nibbles, 16..31 high
    we = (L * d[:, :, None]).reshape(M, K)
    return h(we), we


def run(K, ms, N, woff, q8=False):
    global UB
    UB = 34 if q8 else 18
    NT = 2 if N <= 16 else 4 if N <= 32 else 8
    S = slices(K)
    assert S == 1 or len(ms) == 1, "a K split is one matmul's"
    ku, RG, G = plan(ms, K, NT, S); KP = 8 // RG; BM = 16 * RG
    Ws = [(make_q8_0 if q8 else make_q4_0)(K, M) for M in ms]
    biases = [rng.uniform(-0.5, 0.5, size=M).astype(np.float32) for M in ms]
    x = rng.uniform(-1, 1, size=(N, K)).astype(np.float32)
    X = x.reshape(N, K // 4, 4)[:, :, [0, 2, 1, 3]].astype(np.float16).reshape(N, K)   # kernel_act_f16's pairs
    Xb = X.view(np.uint8).reshape(N, 2 * K)
    wrow = K // 32 * UB
    mems, bases = [], []   # each weight in its own allocation, at +woff for the odd ones
    for s_, W in enumerate(Ws):
        off = woff * (s_ & 1)
        mem = np.zeros(off + W.size + 16, np.uint8)
        mem[off:off + W.size] = W.reshape(-1)
        mems.append(mem); bases.append(off)
    band0 = np.cumsum([0] + [(M + BM - 1) // BM for M in ms])
    nb = int(band0[-1])
    Ks = 32 * ku
    ws, ast = wslot(Ks), astride(Ks)
    lane = np.arange(32); gid, tig = lane >> 2, lane & 3
    size = smem_bytes(Ks, RG, NT)
    assert size <= SMEM_LIMIT, "more shared memory than an H200 block may have"
    sa, sw0, red0 = 0, x_bytes(Ks, NT), x_bytes(Ks, NT) + 2 * band_bytes(Ks, RG)
    parts = [[np.full((N, M), np.nan) for M in ms] for z in range(S)]
    for block in range(G * S):
        z = block // G; u0 = z * ku; nu = min(ku, K // 32 - u0)
        sm = np.zeros(size, np.uint8)
        for n in range(N):   # the slice's columns of token n
            assert sa + n * ast + 64 * nu <= sw0 and (sa + n * ast) % 16 == 0, "a token row outside x's region or misaligned"
            sm[sa + n * ast:sa + n * ast + 64 * nu] = Xb[n, 64 * u0:64 * (u0 + nu)]
        for it, b in enumerate(range(block - z * G, nb, G)):
            s_ = int(np.searchsorted(band0, b, side='right') - 1)   # sk_seg
            m0, M, mem, base = (b - int(band0[s_])) * BM, ms[s_], mems[s_], bases[s_]
            sw = sw0 + (it & 1) * band_bytes(Ks, RG)
            offs = np.zeros(BM, np.int64)
            for r in range(BM):   # gs_window: the row's slice at its slot + (src & 15), inside the slot
                if m0 + r >= M: continue
                src = base + (m0 + r) * wrow + UB * u0
                offs[r] = src & 15
                assert offs[r] + UB * nu <= ws and sw + (r + 1) * ws <= red0, "a row past its slot or its buffer"
                sm[sw + r * ws + offs[r]:sw + r * ws + offs[r] + UB * nu] = mem[src:src + UB * nu]
            def ld16(p): return sm[p].astype(np.uint32) | (sm[p + 1].astype(np.uint32) << 8)
            def ld32(p): return ld16(p) | (ld16(p + 2) << 16)   # ld_u32_a2
            def ld64(p):   # uint2 at byte addresses p [lane] -> 4 halves [lane, 4]
                return np.stack([sm[p[i]:p[i] + 8].view(np.float16).astype(np.float64) for i in range(32)])
            acc = np.zeros((8, NT, 32, 4))
            for warp in range(8):
                rg, kp = warp % RG, warp // RG
                r0 = rg * 16 + gid
                upp = (nu + KP - 1) // KP
                ka, kb = kp * upp, min(kp * upp + upp, nu)
                w0, w1 = sw + r0 * ws + offs[r0], sw + (r0 + 8) * ws + offs[r0 + 8]
                for k in range(ka, kb):
                    d0 = ld16(w0 + UB * k).astype(np.uint16).view(np.float16).astype(np.float64)
                    d1 = ld16(w1 + UB * k).astype(np.uint16).view(np.float16).astype(np.float64)
                    if q8:   # deq_q80: __byte_perm(v ^ 0x80808080, 0x64646464, sel), minus 1152, times d
                        l0, l1 = ld32(w0 + UB * k + 2 + 4 * tig), ld32(w1 + UB * k + 2 + 4 * tig)
                        h0, h1 = ld32(w0 + UB * k + 18 + 4 * tig), ld32(w1 + UB * k + 18 + 4 * tig)
                        def deq8(v, d, shift):   # bytes shift and shift + 2 of v
                            x = v ^ 0x80808080
                            hv = 0x64006400 | ((x >> (8 * shift)) & 0xFF) | (((x >> (8 * shift + 16)) & 0xFF) << 16)
                            lo, hi = halves(hv)
                            return np.stack([h((lo - 1152.0) * d), h((hi - 1152.0) * d)], axis=1)
                        A1 = np.concatenate([deq8(l0, d0, 0), deq8(l1, d1, 0), deq8(l0, d0, 1), deq8(l1, d1, 1)], axis=1)
                        A2 = np.concatenate([deq8(h0, d0, 0), deq8(h1, d1, 0), deq8(h0, d0, 1), deq8(h1, d1, 1)], axis=1)
                    else:
                        v0, v1 = ld32(w0 + UB * k + 2 + 4 * tig), ld32(w1 + UB * k + 2 + 4 * tig)
                        def deq(v, d, high=False):   # deq_q40: high nibbles masked in place (1024 + 16 L), x / 16 - 72
                            if high:
                                lo, hi = halves((v & 0x00F000F0) | 0x64006400)
                                lo, hi = h(lo * 0.0625 - 72.0), h(hi * 0.0625 - 72.0)
                            else:
                                lo, hi = halves((v & 0x000F000F) | 0x64006400)
                                lo, hi = lo - 1032.0, hi - 1032.0
                            return np.stack([h(lo * d), h(hi * d)], axis=1)
                        A1 = np.concatenate([deq(v0, d0), deq(v1, d1), deq(v0 >> 8, d0), deq(v1 >> 8, d1)], axis=1)
                        A2 = np.concatenate([deq(v0, d0, True), deq(v1, d1, True), deq(v0 >> 8, d0, True),
                                             deq(v1 >> 8, d1, True)], axis=1)
                    for nt in range(NT):
                        bp = sa + gid * ast + 8 * tig + nt * 8 * ast + 64 * k
                        acc[warp, nt] = mma(acc[warp, nt], A1, ld64(bp))
                        acc[warp, nt] = mma(acc[warp, nt], A2, ld64(bp + 32))
            red = {}   # every warp's sums: [part][row group][nt][i][lane] as float indices
            for warp in range(8):
                rg, kp = warp % RG, warp // RG
                for nt in range(NT):
                    for i in range(4):
                        for l in range(32):
                            ix = ((kp * RG + rg) * NT * 4 + nt * 4 + i) * 32 + l
                            assert ix not in red and red0 + 4 * ix + 4 <= size, "a sum slot written twice or outside"
                            red[ix] = acc[warp, nt, l, i]
            Y, bias = parts[z][s_], (biases[s_] if S == 1 else np.zeros(M))
            for e in range(RG * NT * 4 * 32):   # the epilogue over the block's threads: parts in order
                l, i, nt, g = e & 31, (e >> 5) & 3, (e >> 7) % NT, e // (NT * 128)
                m = m0 + g * 16 + (l >> 2) + (i >> 1) * 8
                n = nt * 8 + 2 * (l & 3) + (i & 1)
                if m >= M or n >= N: continue
                v = red[(g * NT * 4 + nt * 4 + i) * 32 + l]
                for q in range(1, KP): v = v + red[((q * RG + g) * NT * 4 + nt * 4 + i) * 32 + l]
                assert np.isnan(Y[n, m]), "output written twice"
                Y[n, m] = v + bias[m]
    Ys = parts[0]
    if S > 1:   # kernel_split_sum: the slices in order, then the bias
        Y = parts[0][0]
        for z in range(1, S): Y = Y + parts[z][0]
        Ys = [Y + biases[0]]
    ok, err, nmse = True, 0.0, 0.0
    for W, bias, Y, M in zip(Ws, biases, Ys, ms):
        assert not np.isnan(Y).any(), "an output never written"
        wr, we = (ref_weights_q8 if q8 else ref_weights)(W, K)
        ref = x.astype(np.float16).astype(np.float64) @ wr.T + bias
        exact = x.astype(np.float64) @ we.T + bias
        e = float(np.max(np.abs(Y - ref) / (np.abs(ref) + 1e-3)))
        ns = float(((Y - exact) ** 2).sum() / (exact ** 2).sum())
        ok, err, nmse = ok and e <= 1e-9 and ns <= 1e-5, max(err, e), max(nmse, ns)
    print(f"{'q8_0' if q8 else 'q4_0'} K={K} M={'+'.join(map(str, ms))} N={N} (NT {NT}, {S} K slices of {ku} units, {RG} row groups x "
          f"{KP} K parts, {nb} bands on {G} blocks a slice, {size} B shared) tensors at +{woff}: max rel err vs the same roundings {err:.3g}, "
          f"nmse vs the exact product {nmse:.3g}")
    return ok


def main():
    ok = [
        run(896, [130], 64, 0),   # the 0.5B's K, rows past a band, NT 8, one row group x 8 parts
        run(896, [2200], 33, 2),  # two row groups x 4 parts (138 bands of 16 > 132), a 2-byte-aligned tensor
        run(1024, [5000], 17, 4),  # four row groups x 2 parts, NT 4, the largest K
        run(256, [40], 9, 0),     # NT 2, one unit a part
        run(32, [20], 12, 6),     # one unit: parts 1..7 empty
        run(896, [96, 32, 32], 64, 0),   # a run of q, k, v (bias each), one band a block
        run(64, [9000, 333], 24, 2),     # 150 bands of 64 on 132 blocks: band after band, both buffers
        run(1024, [300, 20, 130, 7], 40, 4),   # four matmuls, rows past their bands, the largest K
        run(4864, [96], 64, 0),   # the 0.5B's down: 6 K slices (the last short), bands of 16
        run(1088, [40], 17, 2),   # K just past 1024: 2 slices of 17 units
        run(32, [30000, 6000], 9, 2),   # 563 bands of 64: five a block, the two buffers in turn
        run(896, [96, 32], 3, 2),        # b21: 3 rows (gate + up of a step of three sequences)
        run(896, [140], 64, 0, q8=True),   # Q8_0 (b16): the 0.5B's head's K
        run(1024, [300, 20], 17, 2, q8=True),   # a run, the largest K, a 2-byte-aligned tensor
    ]
    if not all(ok):
        print("emulation does not match the reference"); raise SystemExit(1)
    print(f"{len(ok)} cases match the direct formula")


if __name__ == "__main__":
    main()

# Host emulation (NumPy) of kernel_gemm_f16_small in phase8b_batch/gemm_f16_small.cu (item b12): the
# block's rows as the aligned 16-byte windows that cover them (each row's data at its slot + (src & 15)),
# every token's f16 activations (groups of four as (e0, e2, e1, e3)) at a stride of 32 mod 128 bytes,
# the row groups and K parts of the 8 warps, each lane's Q4_0 words turned into f16 weights by the
# kernel's bit operations (low nibbles elements 4 tig .., high nibbles 16 + 4 tig .., OR 0x6400,
# subtract 1032, one rounded multiply by d), the fragments per the PTX ISA tables of
# gates/7e/ptx_frag.py, the K parts' hand-over through shared memory in part order (every slot
# written once, inside the block's shared memory) and the epilogue's rows and tokens. Checked against
# a direct formula from ggml's Q4_0 definition with the same f16 roundings (must agree to float64
# noise) and reported against the exact product. CPU only: python3 gates/8b/emu_gemm_f16_small.py
import os, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emu_gemm_f16s import h, halves, mma   # noqa: E402

rng = np.random.default_rng(812)
UB, THREADS, SMS = 18, 256, 132


def wslot(K): return 16 * ((((K // 32) * UB + 30) // 16) | 1)
def astride(K): return 2 * K + (160 - (2 * K) % 128) % 128
def smem_bytes(K, RG, NT): return max(16 * RG * wslot(K) + 8 * NT * astride(K), (8 - RG) * NT * 4 * 32 * 4)
def pick_rg(M):   # sk_rg: the smallest row-group count whose blocks fit one wave
    for rg in (1, 2):
        if (M + 16 * rg - 1) // (16 * rg) <= SMS: return rg
    return 4


def make_q4_0(K, M):
    raw = rng.integers(0, 256, size=(M, K // 32, UB), dtype=np.uint8)
    d = rng.uniform(0.005, 0.05, size=(M, K // 32)).astype(np.float16)
    raw[:, :, 0:2] = d.view(np.uint8).reshape(M, K // 32, 2)
    return raw.reshape(M, K // 32 * UB)


def ref_weights(W, K):   # [M, K]: ggml's Q4_0, with the kernel's f16 rounding of (L - 8) d, and exact
    M = W.shape[0]
    blk = W.reshape(M, K // 32, UB)
    d = blk[:, :, 0:2].copy().view(np.float16).astype(np.float64)[:, :, 0]
    qs = blk[:, :, 2:].astype(np.int64)
    L = np.concatenate([qs & 15, qs >> 4], axis=2) - 8   # elements 0..15 low nibbles, 16..31 high
    we = (L * d[:, :, None]).reshape(M, K)
    return h(we), we


def run(K, M, N, woff):
    NT = 2 if N <= 16 else 4 if N <= 32 else 8
    RG = pick_rg(M); KP = 8 // RG; BM = 16 * RG
    W = make_q4_0(K, M)
    bias = rng.uniform(-0.5, 0.5, size=M).astype(np.float32)
    x = rng.uniform(-1, 1, size=(N, K)).astype(np.float32)
    X = x.reshape(N, K // 4, 4)[:, :, [0, 2, 1, 3]].astype(np.float16).reshape(N, K)   # kernel_act_f16_pairs
    Xb = X.view(np.uint8).reshape(N, 2 * K)
    wrow, ws, ast, nu = K // 32 * UB, wslot(K), astride(K), K // 32
    mem = np.zeros(woff + M * wrow + 16, np.uint8)
    mem[woff:woff + M * wrow] = W.reshape(-1)
    lane = np.arange(32); gid, tig = lane >> 2, lane & 3
    size = smem_bytes(K, RG, NT)
    assert size <= 227 * 1024, "more shared memory than an H200 block may have"
    Y = np.full((N, M), np.nan)
    for m0 in range(0, M, BM):
        sm = np.zeros(size, np.uint8)
        sw, sa = 0, BM * ws
        offs = np.zeros(BM, np.int64)
        for r in range(BM):   # gs_window: the row at its slot + (src & 15), inside the slot
            if m0 + r >= M: continue
            src = woff + (m0 + r) * wrow
            offs[r] = src & 15
            assert offs[r] + wrow <= ws, "a row past its slot"
            sm[sw + r * ws + offs[r]:sw + r * ws + offs[r] + wrow] = mem[src:src + wrow]
        for n in range(N):
            assert sa + n * ast + 2 * K <= size and (sa + n * ast) % 16 == 0, "a token row outside or misaligned"
            sm[sa + n * ast:sa + n * ast + 2 * K] = Xb[n]
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
                v0, v1 = ld32(w0 + UB * k + 2 + 4 * tig), ld32(w1 + UB * k + 2 + 4 * tig)
                def deq(v, d):   # deq_q40
                    lo, hi = halves((v & 0x000F000F) | 0x64006400)
                    return np.stack([h((lo - 1032.0) * d), h((hi - 1032.0) * d)], axis=1)
                A1 = np.concatenate([deq(v0, d0), deq(v1, d1), deq(v0 >> 8, d0), deq(v1 >> 8, d1)], axis=1)
                A2 = np.concatenate([deq(v0 >> 4, d0), deq(v1 >> 4, d1), deq(v0 >> 12, d0), deq(v1 >> 12, d1)], axis=1)
                for nt in range(NT):
                    bp = sa + gid * ast + 8 * tig + nt * 8 * ast + 64 * k
                    acc[warp, nt] = mma(acc[warp, nt], A1, ld64(bp))
                    acc[warp, nt] = mma(acc[warp, nt], A2, ld64(bp + 32))
        red = {}   # the hand-over: [part - 1][row group][nt][i][lane] as float indices
        for warp in range(RG, 8):
            rg, kp = warp % RG, warp // RG
            for nt in range(NT):
                for i in range(4):
                    for l in range(32):
                        ix = (((kp - 1) * RG + rg) * NT * 4 + nt * 4 + i) * 32 + l
                        assert ix not in red and 4 * ix + 4 <= size, "a hand-over slot written twice or outside"
                        red[ix] = acc[warp, nt, l, i]
        for rg in range(RG):   # part 0's warps: add parts 1.. in order, write
            r0 = rg * 16 + gid
            for q in range(1, KP):
                for nt in range(NT):
                    for i in range(4):
                        acc[rg, nt, :, i] += [red[(((q - 1) * RG + rg) * NT * 4 + nt * 4 + i) * 32 + l] for l in range(32)]
            for nt in range(NT):
                for i in range(4):
                    m = m0 + r0 + (i >> 1) * 8
                    n = nt * 8 + 2 * tig + (i & 1)
                    ok = (m < M) & (n < N)
                    assert np.isnan(Y[n[ok], m[ok]]).all(), "output written twice"
                    Y[n[ok], m[ok]] = acc[rg, nt, ok, i] + bias[m[ok]]
    assert not np.isnan(Y).any(), "an output never written"
    wr, we = ref_weights(W, K)
    ref = x.astype(np.float16).astype(np.float64) @ wr.T + bias
    exact = x.astype(np.float64) @ we.T + bias
    err = np.max(np.abs(Y - ref) / (np.abs(ref) + 1e-3))
    nmse = float(((Y - exact) ** 2).sum() / (exact ** 2).sum())
    print(f"q4_0 K={K} M={M} N={N} (NT {NT}, {RG} row groups x {KP} K parts, {(M + BM - 1) // BM} blocks, "
          f"{size} B shared) tensor at +{woff}: max rel err vs the same roundings {err:.3g}, nmse vs the exact product {nmse:.3g}")
    return bool(err <= 1e-9) and nmse <= 1e-5


def main():
    ok = [
        run(896, 130, 64, 0),    # the 0.5B's K, rows past a band, NT 8, one row group x 8 parts
        run(896, 2200, 33, 2),   # two row groups x 4 parts (138 bands of 16 > 132), a 2-byte-aligned tensor
        run(1024, 5000, 17, 4),  # four row groups x 2 parts, NT 4, the largest K
        run(256, 40, 9, 0),      # NT 2, one unit a part
        run(32, 20, 12, 6),      # one unit: parts 1..7 empty
    ]
    if not all(ok):
        print("emulation does not match the reference"); raise SystemExit(1)
    print(f"{len(ok)} cases match the direct formula")


if __name__ == "__main__":
    main()

# Host emulation (NumPy) of kernel_gemm_f16s in phase8b_batch/gemm_f16_stream.cu (item b6): the f16
# activations in groups stored as (e0, e2, e1, e3) by kernel_act_f16_pairs, the ring's activation rows
# of 544 bytes, the stage's f16 scales, each lane's 32-bit level words turned into f16 weights by the
# kernel's bit operations (OR 0x6400, subtract 1024 or 1056, one rounded multiply-add), the fragments
# per the PTX ISA tables of gates/7e/ptx_frag.py (mma.m16n8k16), the epilogue's rows and tokens, and
# the K split. Checked against a direct formula from ggml's Q4_K / Q6_K definitions with the same
# f16 roundings (must agree to float64 noise) and reported against the exact product. A wrong element
# order in either operand, a wrong byte offset or scale index shows as an O(1) error.
# CPU only: python3 gates/8b/emu_gemm_f16s.py
import os, sys
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "7e"))
from ptx_frag import A_row, A_col, B_row, B_col, C_row, C_col   # noqa: E402

rng = np.random.default_rng(86)
BM, ASLOT = 128, 544
Q4_K, Q6_K = "q4_k", "q6_k"
WB = {Q4_K: 144, Q6_K: 210}


def h(x):  # round to f16, as float64
    return np.float16(x).astype(np.float64)


def make_weights(wt, K, M):
    nb = K // 256
    raw = rng.integers(0, 256, size=(M, nb, WB[wt]), dtype=np.uint8)
    def put16(off, lo, hi):
        v = rng.uniform(lo, hi, size=(M, nb)).astype(np.float16)
        raw[:, :, off:off + 2] = v.view(np.uint8).reshape(M, nb, 2)
    if wt == Q4_K: put16(0, 0.01, 0.1); put16(2, 0.0, 0.05)
    else: put16(208, 0.005, 0.05)
    return raw.reshape(M, nb * WB[wt])


def q4k_scale_min(sc, j):   # ggml get_scale_min_k4
    if j < 4: return sc[j] & 63, sc[j + 4] & 63
    return (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4), (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)


def ref_weights(wt, W, K):
    """[M, K]: ggml's dequantization with the kernel's f16 roundings (f16 scale and min, one rounding of
    the product), and without them (exact), from the formats' definitions"""
    M = W.shape[0]
    wr, we = np.zeros((M, K)), np.zeros((M, K))
    for m in range(M):
        for b in range(K // 256):
            blk = W[m, b * WB[wt]:(b + 1) * WB[wt]].astype(np.int64)
            y0 = 256 * b
            if wt == Q4_K:
                d = float(W[m, b * 144:b * 144 + 2].view(np.float16)[0]); dmin = float(W[m, b * 144 + 2:b * 144 + 4].view(np.float16)[0])
                for j in range(8):
                    sc, mn = q4k_scale_min(blk[4:16], j)
                    q = (blk[16 + 32 * (j // 2):48 + 32 * (j // 2)] >> (4 * (j % 2))) & 15
                    S, Mn = h(np.float32(d) * np.float32(sc)), h(-(np.float32(dmin) * np.float32(mn)))
                    wr[m, y0 + 32 * j:y0 + 32 * j + 32] = h(q * S + Mn)
                    we[m, y0 + 32 * j:y0 + 32 * j + 32] = d * sc * q - dmin * mn
            else:
                d = float(W[m, b * 210 + 208:b * 210 + 210].view(np.float16)[0])
                ql, qh, scl = blk[0:128], blk[128:192], W[m, b * 210 + 192:b * 210 + 208].view(np.int8).astype(np.int64)
                for half in range(2):
                    L, H = ql[64 * half:64 * half + 64], qh[32 * half:32 * half + 32]
                    for l in range(32):
                        vals = [((L[l] & 15) | (((H[l] >> 0) & 3) << 4)) - 32, ((L[l + 32] & 15) | (((H[l] >> 2) & 3) << 4)) - 32,
                                ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32, ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32]
                        for g in range(4):
                            e, sc = y0 + 128 * half + 32 * g + l, scl[8 * half + 2 * g + l // 16]
                            wr[m, e] = h(vals[g] * h(np.float32(d) * np.float32(sc)))
                            we[m, e] = d * sc * vals[g]
    return wr, we


def stream_chunk(M, N, nst, slots, wbytes, SPLIT_MAX=32):   # stream_ring.cuh
    bands = (M + BM - 1) // BM
    wave = slots * BM * wbytes
    best, best_chunk = 1e300, nst
    for s in range(1, min(SPLIT_MAX, nst) + 1):
        chunk = (nst + s - 1) // s
        if s > 1 and chunk < 2: break
        se = (nst + chunk - 1) // chunk
        if se != s: continue
        t = float((bands * se + slots - 1) // slots) * chunk
        if se > 1: t += 2.0 + se * N * M * 8.0 / wave
        if t < best - 1e-9: best, best_chunk = t, chunk
    return best_chunk, (nst + best_chunk - 1) // best_chunk


def halves(words):   # uint32 -> (low f16, high f16) as float64
    w = np.asarray(words, dtype=np.uint32)
    return (w & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float64), (w >> 16).astype(np.uint16).view(np.float16).astype(np.float64)


def deq(v, s, m, wt):   # deq_q4 / deq_q6 on each lane's word v (uint32) -> 2 f16 values [lane, 2]
    if wt == Q4_K:
        lo, hi = halves((v & 0x000F000F) | 0x64006400)
        return np.stack([h((lo - 1024.0) * s + m), h((hi - 1024.0) * s + m)], axis=1)
    lo, hi = halves((v & 0x00FF00FF) | 0x64006400)
    return np.stack([h((lo - 1056.0) * s), h((hi - 1056.0) * s)], axis=1)


def mma(D, A8, B4):   # D [lane, 4] += A [16, 16] @ B [16, 8] from the lanes' elements
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    A[A_row, A_col] = A8; B[B_row, B_col] = B4
    C = A @ B
    return D + C[C_row, C_col]


def run(wt, K, M, N, woff, chunk=None):
    NT = 2 if N <= 16 else 4 if N <= 32 else 8
    NTOK, NTW = 8 * NT, NT // 2   # n-tiles a warp: 16 warps, row group w & 7, token half w >> 3
    W = make_weights(wt, K, M)
    x = rng.uniform(-1, 1, size=(N, K)).astype(np.float32)
    # kernel_act_f16_pairs: every group of four as (e0, e2, e1, e3)
    X = x.reshape(N, K // 4, 4)[:, :, [0, 2, 1, 3]].astype(np.float16).reshape(N, K)
    Xb = X.view(np.uint8).reshape(-1)
    wrow = K // 256 * WB[wt]
    mem = np.zeros(woff + M * wrow + 16, np.uint8)
    mem[woff:woff + M * wrow] = W.reshape(-1)
    nst = K // 256
    if chunk is None: chunk, S = stream_chunk(M, N, nst, 132, WB[wt])
    else: S = (nst + chunk - 1) // chunk
    lane = np.arange(32); gid, tig = lane >> 2, lane & 3
    Y = np.zeros((S, N, M)); Y[:] = np.nan
    for bx in range((M + BM - 1) // BM):
        m0 = bx * BM
        for z in range(S):
            acc = np.zeros((16, NTW, 32, 4))
            for st in range(z * chunk, min((z + 1) * chunk, nst)):
                wo = st * WB[wt]
                # the ring slot: each row's stage at offset (src & 15) of a 16-byte window; tokens at 544 bytes
                wslot = 16 * (((WB[wt] + 30) // 16) | 1)
                rw = np.zeros(BM * wslot, np.uint8); ra = np.zeros(NTOK * ASLOT, np.uint8)
                offs = np.zeros(BM, np.int64)
                for r in range(BM):
                    if m0 + r >= M: continue
                    src = woff + (m0 + r) * wrow + wo
                    offs[r] = src & 15
                    rw[r * wslot + offs[r]:r * wslot + offs[r] + WB[wt]] = mem[src:src + WB[wt]]
                for n in range(N):
                    for c in range(32):
                        a = (n * K + st * 256) * 2 + 16 * c
                        ra[n * ASLOT + 16 * c:n * ASLOT + 16 * c + 16] = Xb[a:a + 16]
                # the stage's scales: sS, sM per [unit][row]
                sS = np.zeros((8, BM)); sM = np.zeros((8, BM))
                for r in range(BM):
                    if m0 + r >= M: continue
                    b = r * wslot + offs[r]
                    if wt == Q4_K:
                        d = float(rw[b:b + 2].view(np.float16)[0]); dmin = float(rw[b + 2:b + 4].view(np.float16)[0])
                        for k in range(8):
                            sc, mn = q4k_scale_min(rw[b + 4:b + 16].astype(np.int64), k)
                            sS[k, r] = h(np.float32(d) * np.float32(sc)); sM[k, r] = h(-(np.float32(dmin) * np.float32(mn)))
                    else:
                        d = float(rw[b + 208:b + 210].view(np.float16)[0]); scl = rw[b + 192:b + 208].view(np.int8)
                        for k in range(8):
                            sS[k, r] = h(np.float32(d) * np.float32(scl[2 * k])); sM[k, r] = h(np.float32(d) * np.float32(scl[2 * k + 1]))
                def ld32(base):   # little-endian words of rw at byte addresses base [lane]
                    return sum(rw[base + i].astype(np.uint32) << (8 * i) for i in range(4)).astype(np.uint32)
                for warp in range(16):
                    r0, n0 = (warp & 7) * 16 + gid, (warp >> 3) * NTW * 8
                    w0, w1 = r0 * wslot + offs[r0], (r0 + 8) * wslot + offs[r0 + 8]
                    for k in range(8):
                        s0, s1, t0, t1 = sS[k, r0], sS[k, r0 + 8], sM[k, r0], sM[k, r0 + 8]
                        if wt == Q4_K:
                            o, sft = 16 + 32 * (k >> 1) + 4 * tig, (k & 1) * 4
                            v0, v1 = ld32(w0 + o) >> sft, ld32(w1 + o) >> sft
                            v2, v3 = ld32(w0 + o + 16) >> sft, ld32(w1 + o + 16) >> sft
                            A1 = [deq(v0, s0, t0, wt), deq(v1, s1, t1, wt), deq(v0 >> 8, s0, t0, wt), deq(v1 >> 8, s1, t1, wt)]
                            A2 = [deq(v2, s0, t0, wt), deq(v3, s1, t1, wt), deq(v2 >> 8, s0, t0, wt), deq(v3 >> 8, s1, t1, wt)]
                        else:
                            n_, q = k >> 2, k & 3
                            ol, oh, ls, hs = 64 * n_ + (q & 1) * 32 + 4 * tig, 128 + 32 * n_ + 4 * tig, (q >> 1) * 4, 2 * q
                            Q6V = lambda w, e: ((ld32(w + ol + e) >> ls) & 0x0F0F0F0F) | (((ld32(w + oh + e) >> hs) & 0x03030303) << 4)
                            v0, v1, v2, v3 = Q6V(w0, 0), Q6V(w1, 0), Q6V(w0, 16), Q6V(w1, 16)
                            A1 = [deq(v0, s0, 0, wt), deq(v1, s1, 0, wt), deq(v0 >> 8, s0, 0, wt), deq(v1 >> 8, s1, 0, wt)]
                            A2 = [deq(v2, t0, 0, wt), deq(v3, t1, 0, wt), deq(v2 >> 8, t0, 0, wt), deq(v3 >> 8, t1, 0, wt)]
                        A1 = np.concatenate(A1, axis=1); A2 = np.concatenate(A2, axis=1)   # [lane, 8]: regs a0..a3, two halves each
                        for nt in range(NTW):
                            bp = (n0 + gid) * ASLOT + 8 * tig + nt * 8 * ASLOT + 64 * k
                            def ld64(p):   # uint2 at byte addresses p -> 4 halves [lane, 4] (b0 low, b0 high, b1 low, b1 high)
                                return np.stack([ra[p[i]:p[i] + 8].view(np.float16).astype(np.float64) for i in range(32)])
                            acc[warp, nt] = mma(acc[warp, nt], A1, ld64(bp))
                            acc[warp, nt] = mma(acc[warp, nt], A2, ld64(bp + 32))
            for warp in range(16):
                for nt in range(NTW):
                    for i in range(4):
                        m = m0 + (warp & 7) * 16 + gid + (i >> 1) * 8
                        n = (warp >> 3) * NTW * 8 + nt * 8 + 2 * tig + (i & 1)
                        ok = (m < M) & (n < N)
                        assert np.isnan(Y[z, n[ok], m[ok]]).all(), "output written twice"
                        Y[z, n[ok], m[ok]] = acc[warp, nt, ok, i]
    Yt = Y.sum(axis=0)
    wr, we = ref_weights(wt, W, K)
    ref = x.astype(np.float16).astype(np.float64) @ wr.T
    exact = x.astype(np.float64) @ we.T
    err = np.max(np.abs(Yt - ref) / (np.abs(ref) + 1e-3)) if not np.isnan(Yt).any() else float("nan")
    nmse = float(((Yt - exact) ** 2).sum() / (exact ** 2).sum())
    print(f"{wt} K={K} M={M} N={N} (NT {NT}) tensor at +{woff} splits {S} (chunk {chunk} of {nst}): "
          f"max rel err vs the same roundings {err:.3g}, nmse vs the exact product {nmse:.3g}")
    return bool(err <= 1e-9) and nmse <= 1e-5


ok = [
    run(Q4_K, 512, 130, 64, 0),              # two bands (rows past M), NT 8
    run(Q4_K, 768, 40, 33, 4, chunk=2),      # split 2 + 1, a 4-byte-aligned tensor
    run(Q6_K, 512, 20, 17, 6),               # 210-byte super-blocks, tensor at +6, NT 4
    run(Q6_K, 768, 16, 64, 2, chunk=1),      # three splits of one stage
    run(Q4_K, 256, 9, 9, 0),                 # NT 2, one stage, a band of 9 rows
]
if not all(ok):
    print("emulation does not match the reference"); raise SystemExit(1)
print(f"{len(ok)} cases match the direct formula")

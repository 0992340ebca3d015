# Host emulation (NumPy) of kernel_gemm_stream's index math in phase8b_batch/gemm_int8_stream.cu, line by
# line: the 16-byte windows each thread copies into the cp.async ring (the tensor's first and last bytes byte
# by byte), ring slots and the wait per stage (run twice: copies landing at issue, and only at the wait, so a
# slot overwritten while read or read before it landed both show), the stage's scale pass, each warp's A and
# B fragments unpacked from the raw bytes in shared memory per the PTX ISA layouts (m16n8k32 s8; Q6_K two
# m16n8k16), the epilogue's expressions, split ranges and the ordered sum; all against a direct formula from
# the formats' definitions (ggml's dequantization), on raw Q4_K / Q6_K / Q4_0 / Q8_0 rows with misaligned
# tensors, edges of M, N, K and partial stages. CPU only: python3 gates/8b/emu_gemm_stream.py
import numpy as np

rng = np.random.default_rng(8)
BM, THREADS, U, NMAX = 128, 256, 8, 64
Q4_0, Q8_0, Q4_K, Q6_K = 'q4_0', 'q8_0', 'q4_k', 'q6_k'
BYTES = {Q4_0: 18, Q8_0: 34, Q4_K: 144, Q6_K: 210}
UNITS = {Q4_0: 1, Q8_0: 1, Q4_K: 8, Q6_K: 8}
ACT_K = {Q4_0: False, Q8_0: False, Q4_K: True, Q6_K: True}
AK, A8 = 292, 36


def fmt(wt):
    wbytes = BYTES[wt] if UNITS[wt] == 8 else 8 * BYTES[wt]
    abytes = AK if ACT_K[wt] else 8 * A8
    wch = ((wbytes + 30) // 16) | 1
    ach = ((abytes + 30) // 16) | 1
    return wbytes, abytes, wch, ach


def f16(mem, p): return float(mem[p:p + 2].view(np.float16)[0])
def f32(mem, p): return float(mem[p:p + 4].view(np.float32)[0])
def i8(mem, p): return int(mem[p:p + 1].view(np.int8)[0])
def i16(mem, p): return int(mem[p:p + 2].view(np.int16)[0])


def ld32(mem, p):   # little-endian 32-bit words at byte addresses p (array), as 4 uint8 lanes [.., 4]
    p = np.asarray(p)
    return np.stack([mem[p + i] for i in range(4)], axis=-1).astype(np.int64)


# ---------------- raw data ----------------
def make_weights(wt, K, M):
    nb = K // 32 // UNITS[wt]
    wrow = nb * BYTES[wt]
    raw = rng.integers(0, 256, size=(M, nb, BYTES[wt]), dtype=np.uint8)
    def put16(off, lo, hi):
        v = rng.uniform(lo, hi, size=(M, nb)).astype(np.float16)
        raw[:, :, off:off + 2] = v.view(np.uint8).reshape(M, nb, 2)
    if wt == Q4_K: put16(0, 0.01, 0.1); put16(2, 0.0, 0.05)
    elif wt == Q6_K: put16(208, 0.005, 0.05)
    else: put16(0, -0.1, 0.1)
    return raw.reshape(M, wrow), wrow


def make_act(wt, K, N):
    if ACT_K[wt]:
        nsb = K // 256
        qs = rng.integers(-128, 128, size=(N, nsb, 256)).astype(np.int8)
        d = rng.uniform(0.001, 0.02, size=(N, nsb)).astype(np.float32)
        bs = qs.astype(np.int64).reshape(N, nsb, 16, 16).sum(-1).astype(np.int16)
        raw = np.concatenate([d.view(np.uint8).reshape(N, nsb, 4), qs.view(np.uint8),
                              bs.view(np.uint8).reshape(N, nsb, 32)], axis=2)
        return raw.reshape(N, nsb * AK), nsb * AK
    nb = K // 32
    qs = rng.integers(-128, 128, size=(N, nb, 32)).astype(np.int8)
    d = rng.uniform(0.001, 0.02, size=(N, nb)).astype(np.float16)
    s = np.zeros((N, nb), np.float16)
    raw = np.concatenate([d.view(np.uint8).reshape(N, nb, 2), s.view(np.uint8).reshape(N, nb, 2),
                          qs.view(np.uint8)], axis=2)
    return raw.reshape(N, nb * A8), nb * A8


# ---------------- the direct formula: ggml's dequantization, unit by unit ----------------
def ref_all(wt, W, Ar, K):
    """y [N, M]: the sum over units of 7e's scaled unit dots, from the formats' definitions (float64):
    integer levels q and per-element integer scales of every weight, per-unit float coefficients"""
    M, N, nu = W.shape[0], Ar.shape[0], K // 32
    q = np.zeros((M, K), np.int64); sci = np.ones((M, K), np.int64)
    wd = np.zeros((M, nu)); wm = np.zeros((M, nu))
    h16 = lambda x: x.copy().view(np.float16).astype(np.float64)[..., 0]
    if wt in (Q4_0, Q8_0):
        blk = W.reshape(M, nu, BYTES[wt])
        wd[:] = h16(blk[:, :, 0:2])
        if wt == Q4_0:
            qs = blk[:, :, 2:18].astype(np.int64)
            q[:] = np.concatenate([qs & 15, qs >> 4], axis=2).reshape(M, K) - 8
        else:
            q[:] = blk[:, :, 2:34].view(np.int8).astype(np.int64).reshape(M, K)
    elif wt == Q4_K:
        blk = W.reshape(M, K // 256, 144)
        d, dmin, sc = h16(blk[:, :, 0:2]), h16(blk[:, :, 2:4]), blk[:, :, 4:16].astype(np.int64)
        for j in range(8):
            if j < 4: scale, mn = sc[:, :, j] & 63, sc[:, :, j + 4] & 63
            else: scale, mn = (sc[:, :, j + 4] & 0xF) | ((sc[:, :, j - 4] >> 6) << 4), (sc[:, :, j + 4] >> 4) | ((sc[:, :, j] >> 6) << 4)
            wd[:, j::8] = d * scale; wm[:, j::8] = dmin * mn
            qq = (blk[:, :, 16 + 32 * (j // 2):48 + 32 * (j // 2)].astype(np.int64) >> (4 * (j % 2))) & 15
            q.reshape(M, K // 256, 256)[:, :, 32 * j:32 * j + 32] = qq
    else:   # Q6_K as dequantize_row_q6_K walks a super-block: two halves of 128, four groups of 32
        blk = W.reshape(M, K // 256, 210)
        ql, qh, scl = blk[:, :, 0:128].astype(np.int64), blk[:, :, 128:192].astype(np.int64), blk[:, :, 192:208].view(np.int8).astype(np.int64)
        wd[:] = np.repeat(h16(blk[:, :, 208:210]), 8, axis=1)
        qv, sv = q.reshape(M, K // 256, 256), sci.reshape(M, K // 256, 256)
        for half in range(2):
            L, H = ql[:, :, 64 * half:64 * half + 64], qh[:, :, 32 * half:32 * half + 32]
            for l in range(32):
                vals = [((L[:, :, l] & 15) | (((H[:, :, l] >> 0) & 3) << 4)) - 32,
                        ((L[:, :, l + 32] & 15) | (((H[:, :, l] >> 2) & 3) << 4)) - 32,
                        ((L[:, :, l] >> 4) | (((H[:, :, l] >> 4) & 3) << 4)) - 32,
                        ((L[:, :, l + 32] >> 4) | (((H[:, :, l] >> 6) & 3) << 4)) - 32]
                for g in range(4):
                    e = 128 * half + 32 * g + l
                    qv[:, :, e] = vals[g]; sv[:, :, e] = scl[:, :, 8 * half + 2 * g + l // 16]
    if ACT_K[wt]:
        act = Ar.reshape(N, K // 256, AK)
        a = act[:, :, 4:260].view(np.int8).astype(np.int64).reshape(N, K)
        ad = np.repeat(act[:, :, 0:4].copy().view(np.float32).astype(np.float64)[..., 0], 8, axis=1)
        bs = act[:, :, 260:292].view(np.int16).astype(np.int64).reshape(N, K // 256, 8, 2).sum(-1).reshape(N, nu)
    else:
        act = Ar.reshape(N, nu, A8)
        a = act[:, :, 4:36].view(np.int8).astype(np.int64).reshape(N, K)
        ad = h16(act[:, :, 0:2])
    isum = np.einsum('mue,nue->nmu', (q * sci).reshape(M, nu, 32), a.reshape(N, nu, 32)).astype(np.float64)
    if wt == Q4_K: return (ad[:, None, :] * (wd[None] * isum - wm[None] * bs[:, None, :].astype(np.float64))).sum(-1)
    return (ad[:, None, :] * wd[None] * isum).sum(-1)


# ---------------- the kernel ----------------
def stream_chunk(M, N, nst, slots, wbytes, SPLIT_MAX=32, cap=None):
    """cap (b48): {s: blocks resident at once when a split of s runs in clusters of s}"""
    bands = (M + BM - 1) // BM
    wave = slots * BM * wbytes
    best, best_chunk = 1e300, nst
    for s in range(1, min(SPLIT_MAX, nst) + 1):
        chunk = (nst + s - 1) // s
        if s > 1 and chunk < 2: break
        se = (nst + chunk - 1) // chunk
        if se != s: continue
        at_once = cap[se] if cap and 2 <= se <= 8 and 0 < cap.get(se, 0) < slots else slots
        t = float((bands * se + at_once - 1) // at_once) * chunk
        if se > 1: t += 2.0 + se * N * M * 8.0 / wave
        if t < best - 1e-9: best, best_chunk = t, chunk
    return best_chunk, (nst + best_chunk - 1) // best_chunk


def frag_A(wt, smem, w0, w1, k, tig):
    """a0..a3 of the 32 lanes (rows r0 / r0 + 8 at byte addresses w0 / w1 of smem), as int8 values [lane, 4]"""
    def word(w, o): return ld32(smem, w + o)
    if wt == Q4_K:
        o, sft = 16 + 32 * (k >> 1) + 4 * tig, (k & 1) * 4
        f = lambda w, e: (word(w, o + e) >> sft) & 15
    elif wt == Q6_K:
        n, r = k >> 2, k & 3
        ol, oh, ls, hs = 64 * n + (r & 1) * 32 + 4 * tig, 128 + 32 * n + 4 * tig, (r >> 1) * 4, 2 * r
        f = lambda w, e: (((word(w, ol + e) >> ls) & 15) | (((word(w, oh + e) >> hs) & 3) << 4)) - 32
    elif wt == Q4_0:
        o = 18 * k + 2 + 4 * tig
        f = lambda w, e: (((word(w, o) >> (4 if e else 0)) & 15) - 8)
    else:
        o = 34 * k + 2 + 4 * tig
        f = lambda w, e: ((word(w, o + e) + 128) & 255) - 128
    return f(w0, 0), f(w1, 0), f(w0, 16), f(w1, 16)


def mma(A_regs, B_regs, kdim):
    """PTX ISA fragments: A m16 x kdim (a0 row gid, a1 row gid+8, [a2, a3 the same at col + 16]), B kdim x n8
    (b0 rows 4 tig.., b1 rows 16 + 4 tig..; col gid); D c0,c1 row gid cols 2 tig, 2 tig + 1; c2,c3 row gid + 8"""
    lane = np.arange(32); gid, tig = lane >> 2, lane & 3
    A = np.zeros((16, kdim), np.int64); B = np.zeros((kdim, 8), np.int64)
    for reg, v in enumerate(A_regs):
        rows = gid + 8 * (reg & 1); cols = 4 * tig[:, None] + np.arange(4)[None, :] + 16 * (reg >> 1)
        A[rows[:, None], cols] = v
    for reg, v in enumerate(B_regs):
        rows = 4 * tig[:, None] + np.arange(4)[None, :] + 16 * reg
        B[rows, gid[:, None]] = v
    D = A @ B
    return np.stack([D[gid, 2 * tig], D[gid, 2 * tig + 1], D[gid + 8, 2 * tig], D[gid + 8, 2 * tig + 1]], axis=1)


def run(wt, K, M, N, woff, chunk=None, slots=132, early=False, NS=3):   # NS: the ring's stages (2: item b5)
    wbytes, abytes, wch, ach = fmt(wt)
    W, wrow = make_weights(wt, K, M)
    Ar, arow = make_act(wt, K, N)
    NT = 2 if N <= 16 else 4 if N <= 32 else 8
    NTOK = NT * 8
    # global memory: the weights at byte woff of an allocation, the activations 256-aligned after them
    wbase = woff
    abase = (wbase + M * wrow + 255 + 64) // 256 * 256
    gmem = rng.integers(0, 256, size=abase + N * arow + 64, dtype=np.uint8)
    gmem[wbase:wbase + M * wrow] = W.reshape(-1)
    gmem[abase:abase + N * arow] = Ar.reshape(-1)
    wend, aend = wbase + M * wrow, abase + N * arow
    nunits = K // 32
    nst = (nunits + U - 1) // U
    if chunk is None: chunk, S = stream_chunk(M, N, nst, slots, wbytes)
    S = (nst + chunk - 1) // chunk
    ring_w, ring_a = NS * BM * wch * 16, NS * NTOK * ach * 16
    bands = (M + BM - 1) // BM
    part = np.full((S, N, M), np.nan)
    touched = np.zeros_like(gmem, dtype=bool)   # every weight / activation byte a window copies
    for z in range(S):
        for bx in range(bands):
            m0 = bx * BM
            sb, se = z * chunk, min(z * chunk + chunk, nst)
            nsb = se - sb
            smem = np.zeros(ring_w + ring_a, np.uint8)
            groups, cur = [], []

            def window(slot, src, n, c, lo, hi):
                a = (src & ~15) + 16 * c
                if a >= src + n: return
                if a >= lo and a + 16 <= hi:
                    cur.append((slot + 16 * c, a))
                    touched[a:a + 16] = True
                    if early: smem[slot + 16 * c:slot + 16 * c + 16] = gmem[a:a + 16]
                else:
                    for b in range(16):
                        if lo <= a + b < hi: smem[slot + 16 * c + b] = gmem[a + b]; touched[a + b] = True

            def issue(st, p):
                wo, ao = st * wbytes, st * abytes
                wn, an = min(wbytes, wrow - wo), min(abytes, arow - ao)
                rw, ra = p * BM * wch * 16, ring_w + p * NTOK * ach * 16
                for tid in range(THREADS):
                    for i in range(tid, BM * wch, THREADS):
                        r, c = i // wch, i % wch
                        if m0 + r < M: window(rw + r * wch * 16, wbase + (m0 + r) * wrow + wo, wn, c, wbase, wend)
                    for i in range(tid, NTOK * ach, THREADS):
                        n, c = i // ach, i % ach
                        if n < N: window(ra + n * ach * 16, abase + n * arow + ao, an, c, abase, aend)

            def commit():
                nonlocal cur
                groups.append(cur); cur = []

            def wait(k):   # all but the newest k groups land
                for g in range(len(groups) - k):
                    for dst, src in groups[g]: smem[dst:dst + 16] = gmem[src:src + 16]
                    groups[g] = []

            acc = np.zeros((8, 32, NT, 4))
            for p in range(NS - 1):
                if p < nsb: issue(sb + p, p)
                commit()
            for s in range(nsb):
                st, p = sb + s, s % NS
                wait(NS - 2)
                if s + NS - 1 < nsb: issue(st + NS - 1, (s + NS - 1) % NS)
                commit()
                u0 = st * U
                nu = min(nunits - u0, U)
                rw, ra = p * BM * wch * 16, ring_w + p * NTOK * ach * 16
                wo, ao = st * wbytes, st * abytes
                sWd = np.zeros((U, BM)); sWm = np.zeros((U, BM)); sWl = np.ones((U, BM), np.int64); sWh = np.ones((U, BM), np.int64)
                sAd = np.zeros((U, NMAX)); sAs = np.zeros((U, NMAX))
                for i in range(U * BM):
                    r, k = i % BM, i // BM
                    if k >= nu or m0 + r >= M: continue
                    b = rw + r * wch * 16 + ((wbase + (m0 + r) * wrow + wo) & 15)
                    if wt == Q4_K:
                        sc = smem[b + 4:b + 16].astype(np.int64)
                        if k < 4: scale, mn = sc[k] & 63, sc[k + 4] & 63
                        else: scale, mn = (sc[k + 4] & 0xF) | ((sc[k - 4] >> 6) << 4), (sc[k + 4] >> 4) | ((sc[k] >> 6) << 4)
                        sWd[k, r] = f16(smem, b) * scale; sWm[k, r] = f16(smem, b + 2) * mn
                    elif wt == Q6_K:
                        sWd[k, r] = f16(smem, b + 208); sWl[k, r] = i8(smem, b + 192 + 2 * k); sWh[k, r] = i8(smem, b + 193 + 2 * k)
                    else:
                        sWd[k, r] = f16(smem, b + k * BYTES[wt])
                for i in range(U * NTOK):
                    n, k = i % NTOK, i // NTOK
                    if k >= nu or n >= N: continue
                    b = ra + n * ach * 16 + ((abase + n * arow + ao) & 15)
                    if ACT_K[wt]:
                        sAd[k, n] = f32(smem, b); sAs[k, n] = float(i16(smem, b + 260 + 4 * k) + i16(smem, b + 262 + 4 * k))
                    else:
                        sAd[k, n] = f16(smem, b + k * A8)
                lane = np.arange(32); gid, tig = lane >> 2, lane & 3
                for warp in range(8):
                    r0 = warp * 16 + gid
                    w0 = rw + r0 * wch * 16 + ((wbase + (m0 + r0) * wrow + wo) & 15)
                    w1 = rw + (r0 + 8) * wch * 16 + ((wbase + (m0 + r0 + 8) * wrow + wo) & 15)
                    aoff = [(nt * 8 + gid) * ach * 16 + ((abase + (nt * 8 + gid) * arow + ao) & 15) for nt in range(NT)]
                    for k in range(nu):
                        a0, a1, a2, a3 = frag_A(wt, smem, w0[:, None], w1[:, None], k, tig[:, None])
                        bo = 4 + 32 * k + 4 * tig if ACT_K[wt] else A8 * k + 4 + 4 * tig
                        wd0, wd1, wm0, wm1 = sWd[k, r0], sWd[k, r0 + 8], sWm[k, r0], sWm[k, r0 + 8]
                        for nt in range(NT):
                            bp = ra + aoff[nt] + bo
                            b0 = (ld32(smem, bp[:, None]) + 128) % 256 - 128
                            b1 = (ld32(smem, bp[:, None] + 16) + 128) % 256 - 128
                            b0, b1 = b0[:, 0, :], b1[:, 0, :]
                            t0 = nt * 8 + 2 * tig
                            adx, ady = sAd[k, t0], sAd[k, t0 + 1]
                            if wt == Q6_K:
                                lo = mma([a0[:, 0], a1[:, 0]], [b0], 16); hi = mma([a2[:, 0], a3[:, 0]], [b1], 16)
                                sl0, sh0, sl1, sh1 = sWl[k, r0], sWh[k, r0], sWl[k, r0 + 8], sWh[k, r0 + 8]
                                acc[warp, :, nt, 0] += adx * (wd0 * (sl0 * lo[:, 0] + sh0 * hi[:, 0]))
                                acc[warp, :, nt, 1] += ady * (wd0 * (sl0 * lo[:, 1] + sh0 * hi[:, 1]))
                                acc[warp, :, nt, 2] += adx * (wd1 * (sl1 * lo[:, 2] + sh1 * hi[:, 2]))
                                acc[warp, :, nt, 3] += ady * (wd1 * (sl1 * lo[:, 3] + sh1 * hi[:, 3]))
                            else:
                                c = mma([a0[:, 0], a1[:, 0], a2[:, 0], a3[:, 0]], [b0, b1], 32)
                                if ACT_K[wt]:
                                    asx, asy = sAs[k, t0], sAs[k, t0 + 1]
                                    acc[warp, :, nt, 0] += adx * (wd0 * c[:, 0] - wm0 * asx)
                                    acc[warp, :, nt, 1] += ady * (wd0 * c[:, 1] - wm0 * asy)
                                    acc[warp, :, nt, 2] += adx * (wd1 * c[:, 2] - wm1 * asx)
                                    acc[warp, :, nt, 3] += ady * (wd1 * c[:, 3] - wm1 * asy)
                                else:
                                    acc[warp, :, nt, 0] += (wd0 * adx) * c[:, 0]
                                    acc[warp, :, nt, 1] += (wd0 * ady) * c[:, 1]
                                    acc[warp, :, nt, 2] += (wd1 * adx) * c[:, 2]
                                    acc[warp, :, nt, 3] += (wd1 * ady) * c[:, 3]
            wait(0)
            for warp in range(8):
                for ln in range(32):
                    gid, tig = ln >> 2, ln & 3
                    for nt in range(NT):
                        for i in range(4):
                            m = m0 + warp * 16 + gid + (i >> 1) * 8
                            n = nt * 8 + 2 * tig + (i & 1)
                            if m >= M or n >= N: continue
                            assert np.isnan(part[z, n, m]), 'output written twice'
                            part[z, n, m] = acc[warp, ln, nt, i]
    Y = part[0].copy()
    for z in range(1, S): Y += part[z]
    ref = ref_all(wt, W, Ar, K)
    all_w = touched[wbase:wend].all() and touched[abase:aend].all()
    err = np.max(np.abs(Y - ref) / (np.abs(ref) + 1e-3)) if not np.isnan(Y).any() else float('nan')
    ok = bool(err <= 1e-9) and all_w
    print(f'{wt} K={K} M={M} N={N} ring {NS} tensor at +{woff} splits {S} (chunk {chunk} of {nst} stages) copies land '
          f'{"at issue" if early else "at the wait"}: max rel err {err:.3g}{"" if all_w else ", NOT every byte copied"}')
    return ok


print('stream_chunk (7B shapes at N = 64, 132 slots; N = 16, 264):',
      [stream_chunk(M, N, K // 256, sl, 144)[1] for (K, M, N, sl) in
       ((3584, 3584, 64, 132), (3584, 512, 64, 132), (3584, 18944, 64, 132), (18944, 3584, 64, 132), (3584, 3584, 16, 264))])
# b48: q + k's 32 bands split 4 ways are 32 clusters of 4, one wave where the GPU keeps 32 resident,
# two where it keeps 31 (then the split of 3 wins)
print('stream_chunk, q + k at N = 64 with 32 and 31 clusters of 4 resident (b48):',
      [stream_chunk(4096, 64, 14, 132, 144, cap={4: 4 * c})[1] for c in (32, 31)])
ok = [
    run(Q4_K, 512, 130, 9, 0),                       # two bands (rows past M), N = 9
    run(Q4_K, 768, 129, 33, 4, chunk=2, early=True),  # split 2 + 1 stages, a 4-byte-aligned tensor
    run(Q6_K, 512, 131, 17, 6),                      # 210-byte blocks: windows misaligned, tensor at +6
    run(Q6_K, 768, 70, 64, 2, chunk=1, early=True),  # N = 64, three splits of one stage
    run(Q4_0, 320, 131, 16, 2),                      # 10 units: a partial last stage
    run(Q4_0, 352, 40, 40, 10, chunk=1, early=True),
    run(Q8_0, 288, 5, 12, 14),                       # 9 units; one band of 5 rows; the tensor's last window partial
    run(Q8_0, 512, 129, 64, 0, chunk=1),
    run(Q4_K, 1536, 20, 9, 0, chunk=6, early=True),   # the ring wraps: six stages through three slots
    run(Q6_K, 1280, 12, 10, 2, chunk=4),             # 4 + 1 stages
    run(Q8_0, 800, 7, 9, 6, chunk=4, early=True),    # 25 units: the fourth stage has one
    run(Q4_K, 1536, 20, 40, 0, chunk=6, early=True, NS=2),   # b5's 2-stage ring: six stages through two slots
    run(Q6_K, 1280, 12, 64, 2, chunk=5, NS=2),
    run(Q8_0, 800, 7, 33, 6, chunk=4, NS=2),         # a partial last stage
]
if not all(ok):
    print('emulation does not match the reference'); raise SystemExit(1)
print(f'{len(ok)} cases match the direct formula')

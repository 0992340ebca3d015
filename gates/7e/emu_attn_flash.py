# Host emulation (NumPy) of kernel_attn_flash in phase7e_perf/attn_flash.cu, lane by lane:
# cp.async staging (zero-filled rows, NaN where nothing is staged), Q f16 A fragments,
# ldmatrix (x4, with and without .trans) and mma.sync m16n8k16 f16 per the PTX ISA fragment
# formulas, causal masks, tile skips, the base-2 online softmax with quad shuffles, f16 P,
# the epilogue; vs a float64 softmax attention. Also checks ldmatrix alignment and that every
# ldmatrix phase is free of shared-memory bank conflicts.
# CPU only, no device: python3 gates/7e/emu_attn_flash.py (exit 1 when an error is above the bound).
import os
import sys
import numpy as np

rng = np.random.default_rng(10)
BQ, BK, PAD = 64, 64, 8
LOG2E = np.float32(1.4426950408889634)
F16, F32 = np.float16, np.float32

# PTX m16n8k16 fragment tables (lane, gid, tig, A/B/C rows and columns): ptx_frag.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptx_frag import lane, gid, tig, A_row, A_col, B_row, B_col, C_row, C_col  # noqa: E402

def mma(d, a, b0, b1):
    """d [32,4] f32 += A (a [4 regs,32,2] f16) @ B (b0, b1 [32,2] f16); returns the new d"""
    A = np.zeros((16, 16)); B = np.zeros((16, 8)); Cm = np.zeros((16, 8))
    A[A_row, A_col] = np.stack([a[i // 2][:, i % 2] for i in range(8)], 1).astype(np.float64)
    bb = (b0, b1)
    B[B_row, B_col] = np.stack([bb[i // 2][:, i % 2] for i in range(4)], 1).astype(np.float64)
    Cm[C_row, C_col] = d
    D = (A @ B + Cm).astype(F32)
    return D[C_row, C_col]

def ldmatrix_x4(sm, addr, trans):
    """sm flat f16 shared memory (element offsets), addr [32]: lane l -> row l&7 of matrix l>>3"""
    assert (addr % 8 == 0).all(), "ldmatrix rows must be 16-byte aligned"
    out = np.zeros((4, 32, 2), F16)
    for m in range(4):
        rows = addr[8 * m:8 * m + 8]
        words = ((rows * 2 // 4)[:, None] + np.arange(4)[None, :]) % 32
        assert len(set(words.ravel().tolist())) == 32, "bank conflict in an ldmatrix phase"
        M = np.stack([sm[r:r + 8] for r in rows])
        if not trans:
            out[m, :, 0] = M[gid, 2 * tig]; out[m, :, 1] = M[gid, 2 * tig + 1]
        else:
            out[m, :, 0] = M[2 * tig, gid]; out[m, :, 1] = M[2 * tig + 1, gid]
    return out

def kernel(q, kc, vc, N, n_past, HD, Hq, Hkv, scale):
    LD = HD + PAD; TILE = BK * LD; KS = HD // 16; NO = HD // 8
    qrow = HD * Hq; kvrow = HD * Hkv
    sl2 = F32(scale) * LOG2E
    o = np.full(N * qrow, np.nan, F32)
    gy = (N + BQ - 1) // BQ
    lm, lr = lane >> 3, lane & 7
    for hx in range(Hq):
        for by in range(gy):
            h = hx; i0 = (gy - 1 - by) * BQ; kvh = h // (Hq // Hkv)
            i_last = min(i0 + BQ, N) - 1; kv_len = n_past + i_last + 1
            ntiles = (kv_len + BK - 1) // BK
            sm = np.full(2 * 2 * TILE, np.nan, F16)     # NaN: what the kernel never staged
            def stage(buf, j0):
                CPR = HD // 8
                for c in range(BK * CPR):               # tid, tid + 128, ... covers every c once
                    r, ch = c // CPR, c % CPR
                    dk = buf * 2 * TILE + r * LD + ch * 8; dv = dk + TILE
                    kp = j0 + r
                    if kp < kv_len:
                        off = kp * kvrow + kvh * HD + ch * 8
                        assert off % 8 == 0
                        sm[dk:dk + 8] = kc[off:off + 8]; sm[dv:dv + 8] = vc[off:off + 8]
                    else:
                        sm[dk:dk + 8] = 0; sm[dv:dv + 8] = 0
            stage(0, 0)
            warps = []
            for warp in range(4):
                wq0 = i0 + warp * 16; r0 = wq0 + gid; r1 = r0 + 8
                qa = np.zeros((KS, 4, 32, 2), F16)
                for kk in range(KS):
                    c = kk * 16 + 2 * tig
                    for reg, rr, cc in ((0, r0, c), (1, r1, c), (2, r0, c + 8), (3, r1, c + 8)):
                        ok = rr < N
                        base = np.where(ok, rr, 0) * qrow + h * HD
                        qa[kk, reg, :, 0] = np.where(ok, q[base + cc], 0).astype(F16)
                        qa[kk, reg, :, 1] = np.where(ok, q[base + cc + 1], 0).astype(F16)
                st = dict(wq0=wq0, r0=r0, r1=r1, qa=qa, wactive=wq0 < N, wpos_first=n_past + wq0,
                          wpos_last=n_past + min(wq0 + 15, N - 1), pos0=n_past + r0, pos1=n_past + r1,
                          oacc=np.zeros((NO, 32, 4), F32), m0=np.full(32, -np.inf, F32), m1=np.full(32, -np.inf, F32),
                          l0=np.zeros(32, F32), l1=np.zeros(32, F32))
                warps.append(st)
            for jt in range(ntiles):
                if jt + 1 < ntiles: stage((jt + 1) & 1, (jt + 1) * BK)
                j0 = jt * BK
                for st in warps:
                    if not (st['wactive'] and j0 <= st['wpos_last']): continue
                    kb = (jt & 1) * 2 * TILE; vb = kb + TILE
                    s = np.zeros((8, 32, 4), F32)
                    for kk in range(KS):
                        for np_ in range(4):
                            b = ldmatrix_x4(sm, kb + ((2 * np_ + (lm >> 1)) * 8 + lr) * LD + kk * 16 + (lm & 1) * 8, False)
                            s[2 * np_] = mma(s[2 * np_], st['qa'][kk], b[0], b[1])
                            s[2 * np_ + 1] = mma(s[2 * np_ + 1], st['qa'][kk], b[2], b[3])
                    need_mask = j0 + BK - 1 > st['wpos_first']
                    for nt in range(8):
                        for e in range(4):
                            key = j0 + nt * 8 + 2 * tig + (e & 1)
                            v = s[nt, :, e] * sl2
                            pos = st['pos0'] if e < 2 else st['pos1']
                            s[nt, :, e] = np.where(need_mask & (key > pos), -np.inf, v)
                    mx0 = np.maximum(st['m0'], np.max(np.maximum(s[:, :, 0], s[:, :, 1]), axis=0))
                    mx1 = np.maximum(st['m1'], np.max(np.maximum(s[:, :, 2], s[:, :, 3]), axis=0))
                    for x in (1, 2):   # __shfl_xor_sync within the quad
                        mx0 = np.maximum(mx0, mx0[lane ^ x]); mx1 = np.maximum(mx1, mx1[lane ^ x])
                    mu0 = np.where(mx0 == -np.inf, F32(0), mx0); mu1 = np.where(mx1 == -np.inf, F32(0), mx1)
                    with np.errstate(invalid='ignore'):
                        al0 = np.exp2(st['m0'] - mu0).astype(F32); al1 = np.exp2(st['m1'] - mu1).astype(F32)
                    st['m0'], st['m1'] = mx0, mx1
                    pa = np.zeros((4, 4, 32, 2), F16)
                    ls0 = np.zeros(32, F32); ls1 = np.zeros(32, F32)
                    for kk in range(4):
                        for hf in range(2):
                            nt = 2 * kk + hf
                            p00 = np.exp2(s[nt, :, 0] - mu0).astype(F16); p01 = np.exp2(s[nt, :, 1] - mu0).astype(F16)
                            p10 = np.exp2(s[nt, :, 2] - mu1).astype(F16); p11 = np.exp2(s[nt, :, 3] - mu1).astype(F16)
                            ls0 = ls0 + (p00.astype(F32) + p01.astype(F32)); ls1 = ls1 + (p10.astype(F32) + p11.astype(F32))
                            pa[kk, 2 * hf, :, 0] = p00; pa[kk, 2 * hf, :, 1] = p01
                            pa[kk, 2 * hf + 1, :, 0] = p10; pa[kk, 2 * hf + 1, :, 1] = p11
                    st['l0'] = st['l0'] * al0 + ls0; st['l1'] = st['l1'] * al1 + ls1
                    oacc = st['oacc']
                    oacc[:, :, 0] *= al0; oacc[:, :, 1] *= al0; oacc[:, :, 2] *= al1; oacc[:, :, 3] *= al1
                    for kk in range(4):
                        for np_ in range(NO // 2):
                            b = ldmatrix_x4(sm, vb + (kk * 16 + (lm & 1) * 8 + lr) * LD + (2 * np_ + (lm >> 1)) * 8, True)
                            oacc[2 * np_] = mma(oacc[2 * np_], pa[kk], b[0], b[1])
                            oacc[2 * np_ + 1] = mma(oacc[2 * np_ + 1], pa[kk], b[2], b[3])
            for st in warps:
                l0, l1 = st['l0'], st['l1']
                for x in (1, 2):
                    l0 = l0 + l0[lane ^ x]; l1 = l1 + l1[lane ^ x]
                inv0 = np.where(l0 > 0, F32(1) / np.where(l0 > 0, l0, 1), 0).astype(F32)
                inv1 = np.where(l1 > 0, F32(1) / np.where(l1 > 0, l1, 1), 0).astype(F32)
                r0, r1 = st['r0'], st['r1']
                for nt in range(NO):
                    c = nt * 8 + 2 * tig
                    for rr, inv, e0 in ((r0, inv0, 0), (r1, inv1, 2)):
                        ok = rr < N
                        base = rr[ok] * qrow + h * HD + c[ok]
                        o[base] = (st['oacc'][nt, ok, e0] * inv[ok]).astype(F32)
                        o[base + 1] = (st['oacc'][nt, ok, e0 + 1] * inv[ok]).astype(F32)
    return o

def run(hd, Hq, Hkv, N, n_past, amp=1.0):
    n_ctx = n_past + N + 5; row = hd * Hkv; qd = hd * Hq
    q = (amp * rng.uniform(-1, 1, N * qd)).astype(F32)
    kc = rng.uniform(-1, 1, n_ctx * row).astype(F16); vc = rng.uniform(-1, 1, n_ctx * row).astype(F16)
    kc[(n_past + N) * row:] = np.nan; vc[(n_past + N) * row:] = np.nan   # never read
    scale = 1 / np.sqrt(hd)
    K = kc.astype(np.float64).reshape(n_ctx, row); V = vc.astype(np.float64).reshape(n_ctx, row)
    Q = q.astype(np.float64).reshape(N, qd)
    ref = np.zeros((N, qd))
    for h in range(Hq):
        kvh = h // (Hq // Hkv)
        Kh = K[:, kvh * hd:(kvh + 1) * hd]; Vh = V[:, kvh * hd:(kvh + 1) * hd]
        for i in range(N):
            last = n_past + i
            s = scale * (Kh[:last + 1] @ Q[i, h * hd:(h + 1) * hd])
            p = np.exp(s - s.max()); ref[i, h * hd:(h + 1) * hd] = (p @ Vh[:last + 1]) / p.sum()
    o = kernel(q, kc, vc, N, n_past, hd, Hq, Hkv, scale).reshape(N, qd).astype(np.float64)
    err = np.abs(o - ref)
    mx = err.max() if not np.isnan(o).any() else np.inf
    nmse = ((o - ref) ** 2).sum() / (ref ** 2).sum()
    rel = mx / np.abs(ref).max()
    return mx, rel, nmse

failed = passed = 0
cases = [(hd, Hq, Hkv, N, n_past, 1.0) for hd in (64, 128) for (Hq, Hkv) in ((7, 1), (2, 2))
         for N in (16, 17, 100, 130) for n_past in (0, 37)]
cases += [(128, 2, 1, 130, 37, 20.0), (64, 1, 1, 100, 5, 20.0)]   # peaked softmax: the running max moves
for hd, Hq, Hkv, N, n_past, amp in cases:
    mx, rel, nmse = run(hd, Hq, Hkv, N, n_past, amp)
    # f16 rounding of Q and P: ~1e-4 relative on unit-scale data; the peaked cases carry the
    # f16 error of Q amplified by |q| (logit error ~ |s| 2^-11), so only the NMSE bound applies
    ok = nmse <= 1e-5 and (rel <= 1e-3 or amp != 1.0)
    print(f"hd {hd:3d} Hq {Hq} Hkv {Hkv} N {N:3d} n_past {n_past:2d} amp {amp:4.1f}: max abs err {mx:.3g} "
          f"(rel {rel:.3g}), nmse {nmse:.3g} {'ok' if ok else 'FAIL'}")
    passed += ok; failed += not ok
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

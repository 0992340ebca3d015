# Host emulation (NumPy) of kernel_gemm_int8's indexing in phase7e_perf/gemm_int8_kernel.cuh, line by line:
# staging, mma.sync m16n8k16 s8 fragments per the PTX ISA layout, epilogue; vs a direct formula. With a
# chunk, the SPLIT form of 8b (phase8b_batch/gemm_int8_split.cu): block z sums units [z chunk, (z+1) chunk)
# into part[z], and the parts are added in z order.
# CPU only, no device: python3 gates/7e/emu_gemm_int8.py (prints the max error per case).
# Host emulation of kernel_gemm_int8's indexing (stage, fragments per PTX m16n8k16 s8 layout, epilogue)
import numpy as np
rng = np.random.default_rng(1)
BM=BN=64; BK=4
def run(M, N, nunits, kind, chunk=0):
    wq = rng.integers(-32, 32, size=(M, nunits, 32)).astype(np.int64)
    wd = rng.standard_normal((M, nunits)); wmn = rng.standard_normal((M, nunits))
    sl = rng.integers(-30, 30, size=(M, nunits)); sh = rng.integers(-30, 30, size=(M, nunits))
    if kind != 'K': sl[:] = 1; sh[:] = 1
    aq = rng.integers(-127, 128, size=(N, nunits, 32)).astype(np.int64)
    ad = rng.standard_normal((N, nunits)); as_ = rng.standard_normal((N, nunits))
    # reference
    ref = np.zeros((N, M))
    for n in range(N):
        for m in range(M):
            s = 0.0
            for u in range(nunits):
                lo = int(np.dot(wq[m,u,:16], aq[n,u,:16])); hi = int(np.dot(wq[m,u,16:], aq[n,u,16:]))
                if kind == 'K': s += ad[n,u]*(wd[m,u]*(sl[m,u]*lo + sh[m,u]*hi) - wmn[m,u]*as_[n,u])
                elif kind == '1': s += wd[m,u]*ad[n,u]*(lo+hi) + wmn[m,u]*as_[n,u]
                else: s += wd[m,u]*ad[n,u]*(lo+hi)
            ref[n,m] = s
    S = (nunits + chunk - 1)//chunk if chunk else 1
    part = np.full((S, N, M), np.nan)
    for bz in range(S):
      ub = bz*chunk if chunk else 0
      ue = min(ub + chunk, nunits) if chunk else nunits
      for bx in range((M+BM-1)//BM):
        for by in range((N+BN-1)//BN):
            m0, n0 = bx*BM, by*BN
            acc = np.zeros((4, 32, 2, 4, 4))  # warp, lane, mt, nt, i
            for u0 in range(ub, ue, BK):
                sW = np.zeros((64, 144), np.int64); sA = np.zeros((64, 144), np.int64)
                sWd = np.zeros((BK,64)); sWm = np.zeros((BK,64)); sWl = np.zeros((BK,64),np.int64); sWh=np.zeros((BK,64),np.int64)
                sAd = np.zeros((BK,64)); sAs = np.zeros((BK,64))
                for tid in range(128):
                    for e in range(2):
                        i = tid + 128*e; r = i & 63; k = i >> 6
                        m = m0 + r; u = u0 + k
                        if m < M and u < ue:
                            sW[r, k*32:k*32+32] = wq[m,u]; sWd[k][r]=wd[m,u]; sWm[k][r]=wmn[m,u]; sWl[k][r]=sl[m,u]; sWh[k][r]=sh[m,u]
                        n = n0 + r
                        if n < N and u < ue:
                            sA[r, k*32:k*32+32] = aq[n,u]; sAd[k][r]=ad[n,u]; sAs[k][r]=as_[n,u]
                for warp in range(4):
                    wm, wn = warp >> 1, warp & 1
                    for k in range(BK):
                        c = np.zeros((2, 2, 4, 32, 4), np.int64)  # h mt nt lane i
                        for h in range(2):
                            for mt in range(2):
                                for nt in range(4):
                                    A = np.zeros((16,16), np.int64); B = np.zeros((16,8), np.int64)
                                    for lane in range(32):
                                        gid, tig = lane >> 2, lane & 3
                                        col = k*32 + h*16 + tig*4
                                        row = wm*32 + mt*16 + gid
                                        a0 = sW[row, col:col+4]; a1 = sW[row+8, col:col+4]
                                        b0 = sA[wn*32 + nt*8 + gid, col:col+4]
                                        for ii in range(4):  # PTX layout
                                            A[gid, tig*4+ii] = a0[ii]; A[gid+8, tig*4+ii] = a1[ii]; B[tig*4+ii, gid] = b0[ii]
                                    D = A @ B
                                    for lane in range(32):
                                        gid, tig = lane >> 2, lane & 3
                                        for ii in range(4):
                                            c[h, mt, nt, lane, ii] = D[gid + 8*(ii>>1), 2*tig + (ii&1)]
                        for lane in range(32):
                            gid, tig = lane >> 2, lane & 3
                            for mt in range(2):
                                for hr in range(2):
                                    rl = wm*32 + mt*16 + gid + hr*8
                                    for nt in range(4):
                                        for cc in range(2):
                                            ii = hr*2 + cc; tl = wn*32 + nt*8 + tig*2 + cc
                                            lo, hi = c[0,mt,nt,lane,ii], c[1,mt,nt,lane,ii]
                                            if kind == 'K': v = sAd[k][tl]*(sWd[k][rl]*(sWl[k][rl]*lo + sWh[k][rl]*hi) - sWm[k][rl]*sAs[k][tl])
                                            elif kind == '1': v = sWd[k][rl]*sAd[k][tl]*(lo+hi) + sWm[k][rl]*sAs[k][tl]
                                            else: v = sWd[k][rl]*sAd[k][tl]*(lo+hi)
                                            acc[warp, lane, mt, nt, ii] += v
            for warp in range(4):
                wm, wn = warp >> 1, warp & 1
                for lane in range(32):
                    gid, tig = lane >> 2, lane & 3
                    for mt in range(2):
                        for nt in range(4):
                            for ii in range(4):
                                m = m0 + wm*32 + mt*16 + gid + (ii>>1)*8
                                n = n0 + wn*32 + nt*8 + tig*2 + (ii&1)
                                if m < M and n < N: part[bz, n, m] = acc[warp, lane, mt, nt, ii]
    Y = part[0].copy()
    for bz in range(1, S): Y += part[bz]
    err = np.nanmax(np.abs(Y-ref)) if not np.isnan(Y).any() else float('nan')
    print(kind, M, N, nunits, 'max abs err', err, 'nan' if np.isnan(Y).any() else 'all written')
    return bool(err <= 1e-9)   # nan (an output never written) fails too
ok = [run(70, 66, 6, 'K'), run(65, 9, 5, '1'), run(64, 70, 4, '0'),
      run(70, 17, 10, 'K', chunk=4), run(65, 9, 13, '1', chunk=8)]
if not all(ok):
    print('emulation does not match the reference'); raise SystemExit(1)

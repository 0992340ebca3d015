# Host emulation (NumPy) of kernel_attn_tiled's indexing in phase7e_perf/attn_tiled.cu, line by line: staging,
# causal masks, tile skips, online softmax; vs a float64 softmax.
# CPU only, no device: python3 gates/7e/emu_attn_tiled.py (prints the max error per case).
import numpy as np
rng = np.random.default_rng(2)
def run(hd, Hq, Hkv, N, n_past):
    n_ctx = n_past + N + 5; row = hd*Hkv; qd = hd*Hq
    q = rng.uniform(-1,1,(N, qd)).astype(np.float32); kc = rng.uniform(-1,1,(n_ctx, row)).astype(np.float32); vc = rng.uniform(-1,1,(n_ctx,row)).astype(np.float32)
    kc[n_past+N:] = np.nan; vc[n_past+N:] = np.nan   # never read
    scale = 1/np.sqrt(hd)
    ref = np.zeros((N, qd))
    for i in range(N):
        for h in range(Hq):
            kvh = h // (Hq//Hkv); last = n_past+i
            s = scale * (kc[:last+1, kvh*hd:(kvh+1)*hd].astype(np.float64) @ q[i, h*hd:(h+1)*hd])
            p = np.exp(s - s.max()); ref[i, h*hd:(h+1)*hd] = (p @ vc[:last+1, kvh*hd:(kvh+1)*hd]) / p.sum()
    o = np.full((N, qd), np.nan)
    BQ, BK = 16, 32
    for bx in range((N+BQ-1)//BQ):
        for h in range(Hq):
            i0 = bx*BQ; kvh = h // (Hq//Hkv)
            sQ = np.zeros((BQ, hd))
            for qi in range(BQ):
                if i0+qi < N: sQ[qi] = q[i0+qi, h*hd:(h+1)*hd]
            i_last = min(i0+BQ, N) - 1; kv_len = n_past + i_last + 1
            m = np.full((4,4), -np.inf); l = np.zeros((4,4)); acc = np.zeros((4,4,hd))
            for j0 in range(0, kv_len, BK):
                sK = np.zeros((BK, hd)); sV = np.zeros((BK, hd))
                for j in range(BK):
                    kp = j0 + j
                    if kp < kv_len: sK[j] = kc[kp, kvh*hd:(kvh+1)*hd]; sV[j] = vc[kp, kvh*hd:(kvh+1)*hd]
                for warp in range(4):
                    for r in range(4):
                        qi = warp*4 + r; i = i0 + qi
                        if i >= N: continue
                        pos = n_past + i
                        if j0 > pos: continue
                        s = sK @ sQ[qi]   # lanes
                        vis = (j0 + np.arange(BK)) <= pos
                        s = np.where(vis, scale*s, -np.inf)
                        mn = max(m[warp,r], s.max())
                        p = np.where(vis, np.exp(s - mn), 0.0)
                        alpha = np.exp(m[warp,r] - mn)
                        l[warp,r] = l[warp,r]*alpha + p.sum()
                        acc[warp,r] = acc[warp,r]*alpha + p @ sV
                        m[warp,r] = mn
            for warp in range(4):
                for r in range(4):
                    i = i0 + warp*4 + r
                    if i < N: o[i, h*hd:(h+1)*hd] = acc[warp,r] / l[warp,r]
    err = np.abs(o-ref).max()
    print(hd, Hq, Hkv, N, n_past, 'max err', err, 'nan' if np.isnan(o).any() else 'ok')
    return bool(err <= 1e-9 and not np.isnan(o).any())
ok = [run(64, 4, 2, 37, 0), run(32, 3, 1, 16, 45), run(64, 2, 2, 50, 31)]
if not all(ok):
    print('emulation does not match the reference'); raise SystemExit(1)

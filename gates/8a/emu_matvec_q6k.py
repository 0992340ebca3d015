# Host emulation (NumPy) of kernel_matvec_q6k in phase8a_decode/matvec_q6k_exact.cu, line by line:
# the activation staged into its shared layout (q6s_put), each octet's word loads from floor4 of its
# super-block (words t + 8j, lane 0 also word 48), the neighbour shuffle and funnel shift, the
# 16-byte activation reads (n ^ h), the eight 4-element dots, the octet's reduce-scatter and the
# unit a lane finishes, the per-lane (it, g) accumulation, the xor butterfly and the grid-stride
# row cover (blocks of 8 warps, and of 32 with item d12). Checked against a direct decode of the GGUF Q6_K blocks (ggml's dequantize order):
# every unit finished exactly once with the reference's integer sum and bit-identical float
# value, rows within float rounding of a float64 sum, every row written once, no word read outside
# [floor4(super-block), super-block end) and the lead words inside the tensor, the activation reads
# free of bank conflicts per 8-lane phase. Then negative controls: a wrong neighbour or a wrong
# layout must fail. CPU only.
import os
import sys
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "7e"))
from matvec_q4k_emu_lib import WARPS, AK, Checks, make_act, rng  # noqa: E402

C = Checks()
check = C.check
SB = 210
U = 2
M32 = 0xFFFFFFFF


def f16(b2):
    return np.ascontiguousarray(b2).view(np.float16)[..., 0].astype(np.float32)


def make_q6k(M, nsb):
    b = rng.integers(0, 256, size=(M, nsb, SB), dtype=np.uint8)
    d = (rng.uniform(1e-3, 2e-2, M * nsb) * rng.choice([-1.0, 1.0], M * nsb)).astype(np.float16)
    b[:, :, 208:210] = d.view(np.uint8).reshape(M, nsb, 2)
    return b


def ref_units(w, qs):
    """[M, nsb, 8] integer unit sums: sc * (q - 32) . a per 16 elements, ggml's element order"""
    M, nsb, _ = w.shape
    ql, qh = w[..., 0:128].astype(np.int64), w[..., 128:192].astype(np.int64)
    sc = w[..., 192:208].view(np.int8).astype(np.int64)
    q = np.zeros((M, nsb, 256), np.int64)
    for n in range(2):
        for l in range(32):
            L, H = ql[..., 64 * n:64 * n + 64], qh[..., 32 * n:32 * n + 32]
            q[..., 128 * n + l] = (L[..., l] & 0xF) | (((H[..., l] >> 0) & 3) << 4)
            q[..., 128 * n + l + 32] = (L[..., l + 32] & 0xF) | (((H[..., l] >> 2) & 3) << 4)
            q[..., 128 * n + l + 64] = (L[..., l] >> 4) | (((H[..., l] >> 4) & 3) << 4)
            q[..., 128 * n + l + 96] = (L[..., l + 32] >> 4) | (((H[..., l] >> 6) & 3) << 4)
    prod = ((q - 32) * qs.astype(np.int64)[None]).reshape(M, nsb, 16, 16).sum(axis=3)
    return (prod * sc).reshape(M, nsb, 8, 2).sum(axis=3)


def unit_value(d8, wd, isum, bsum):
    """mi7b_unit_dot for Q8_K with w.m = 0, float32 step by step (no contraction)"""
    d8, wd = np.float32(d8), np.float32(wd)
    return np.float32(d8 * np.float32(np.float32(wd * np.float32(isum)) - np.float32(np.float32(0.0) * np.float32(bsum))))


def stage(raw, nsb, bad_layout=False):
    words = raw.view("<u4")
    sq = np.zeros(nsb * 64, np.uint64)
    sd = np.zeros(nsb, np.float32)
    sbs = np.zeros(nsb * 8, np.uint64)
    for i, v in enumerate(words):
        s, o = divmod(i, AK // 4)
        if o == 0:
            sd[s] = np.uint32(v).view(np.float32)
        elif o <= 64:
            w = o - 1
            n, r, t = w >> 5, (w >> 3) & 3, w & 7
            sq[s * 64 + t * 8 + 4 * ((n ^ (t >> 2)) if not bad_layout else n) + r] = v
        else:
            sbs[s * 8 + o - 65] = v
    return sq, sd, sbs


def dp4a(a, b):
    av = np.array([a], np.uint32).view(np.int8).astype(np.int64)
    bv = np.array([b], np.uint32).view(np.int8).astype(np.int64)
    return int((av * bv).sum())


def run(M, nsb, base, grid, bad_neighbour=False, bad_layout=False, warps=WARPS):
    """the kernel over M rows: the tensor at byte offset base (4-aligned) of a flat memory, blocks
    of `warps` warps (8, or 32 with item d12)"""
    w = make_q6k(M, nsb)
    raw, d8, qs, bs = make_act(nsb)
    ref = ref_units(w, qs)
    mem = np.zeros(base + M * nsb * SB + 8, np.uint8)
    mem[base:base + M * nsb * SB] = w.reshape(-1)
    words = mem[:len(mem) // 4 * 4].view("<u4")
    sq, sd, sbs = stage(raw, nsb, bad_layout)
    seen = np.zeros((M, nsb, 8), np.int64)
    writes = np.zeros(M, np.int64)
    bad = []
    wrow = nsb * SB
    nit = (nsb + 4 * U - 1) // (4 * U)
    lanes_t = np.arange(32) & 7
    u_of = 4 * (lanes_t & 1) + 2 * ((lanes_t >> 1) & 1) + (lanes_t >> 2)
    check("unit map is a bijection per octet", sorted(u_of[:8]) == list(range(8)), str(u_of[:8]))
    for warp_id in range(grid * warps):
        row = warp_id
        while row < M:
            acc = np.zeros(32, np.float32)
            for it in range(nit):
                for g in range(U):
                    # ---- loads (per lane) ----
                    wv = np.zeros((32, 7), np.uint64)
                    S = np.zeros(32, np.int64)
                    on = np.zeros(32, bool)
                    for lane in range(32):
                        q, t = lane >> 3, lane & 7
                        s = it * 4 * U + 4 * g + q
                        on[lane] = s < nsb
                        S[lane] = base + row * wrow + (s if s < nsb else 0) * SB
                        if s < nsb:
                            A = S[lane] & ~3
                            for j in range(6):
                                a = A + 4 * (t + 8 * j)
                                if a + 4 > S[lane] + SB or a < base:
                                    bad.append(("word", row, s, j))
                                wv[lane, j] = words[a // 4]
                            if t == 0:
                                if A + 196 > S[lane] + SB:
                                    bad.append(("word48", row, s))
                                wv[lane, 6] = words[(A + 192) // 4]
                    # ---- neighbour shuffle, funnel ----
                    T = np.zeros((32, 6), np.uint64)
                    for lane in range(32):
                        t = lane & 7
                        src = (lane & 24) | ((t + 1) & 7)
                        if bad_neighbour:
                            src = (lane & 24) | ((t + 7) & 7)
                        for j in range(6):
                            nx = wv[src, j + 1] if (src & 7) == 0 else wv[src, j]
                            sh = int((S[lane] & 2) * 8)
                            T[lane, j] = ((int(nx) << 32 | int(wv[lane, j])) >> sh) & M32
                    # ---- dots ----
                    p = np.zeros((32, 8), np.int64)
                    phases = {}
                    for lane in range(32):
                        q, t = lane >> 3, lane & 7
                        s = it * 4 * U + 4 * g + q
                        s = s if s < nsb else 0
                        h = t >> 2
                        for n in range(2):
                            v4 = s * 16 + 2 * t + (n ^ h)
                            phases.setdefault((n, q), []).append(((v4 * 4) // 4) % 8)
                            a = [int(sq[v4 * 4 + k]) for k in range(4)]
                            qa, qb, hb = int(T[lane, 2 * n]), int(T[lane, 2 * n + 1]), int(T[lane, 4 + n])
                            m4, m2 = 0x0F0F0F0F, 0x30303030
                            p[lane, 4 * n + 0] = dp4a((qa & m4) | ((hb << 4) & m2), a[0])
                            p[lane, 4 * n + 1] = dp4a((qb & m4) | ((hb << 2) & m2), a[1])
                            p[lane, 4 * n + 2] = dp4a(((qa >> 4) & m4) | (hb & m2), a[2])
                            p[lane, 4 * n + 3] = dp4a(((qb >> 4) & m4) | ((hb >> 2) & m2), a[3])
                    for key, quads in phases.items():   # one 8-lane phase: eight distinct bank quads
                        if len(set(quads)) != 8:
                            bad.append(("bank", key, quads))
                    # ---- reduce-scatter ----
                    k4 = np.zeros((32, 4), np.int64)
                    for lane in range(32):
                        b0 = lane & 1
                        for i in range(4):
                            recv = p[lane ^ 1, i] if (lane ^ 1) & 1 else p[lane ^ 1, 4 + i]
                            k4[lane, i] = (p[lane, 4 + i] if b0 else p[lane, i]) + recv
                    k2 = np.zeros((32, 2), np.int64)
                    for lane in range(32):
                        b1 = (lane >> 1) & 1
                        for i in range(2):
                            pb1 = ((lane ^ 2) >> 1) & 1
                            recv = k4[lane ^ 2, i] if pb1 else k4[lane ^ 2, 2 + i]
                            k2[lane, i] = (k4[lane, 2 + i] if b1 else k4[lane, i]) + recv
                    for lane in range(32):
                        q, t = lane >> 3, lane & 7
                        h = t >> 2
                        ph = ((lane ^ 4) & 7) >> 2
                        other = k2[lane ^ 4, 0] if ph else k2[lane ^ 4, 1]
                        lo = other if h else k2[lane, 0]
                        hi = k2[lane, 1] if h else other
                        s = it * 4 * U + 4 * g + q
                        if s >= nsb:
                            continue
                        u = int(u_of[lane])
                        bsw = int(sbs[s * 8 + u])
                        bs_lo = np.int64(np.array([bsw & 0xFFFF], np.uint16).view(np.int16)[0])
                        bs_hi = np.int64(np.array([bsw >> 16], np.uint16).view(np.int16)[0])
                        sc = w[row, s, 192 + 2 * u:194 + 2 * u].view(np.int8).astype(np.int64)
                        isum = int(sc[0] * (lo - 32 * bs_lo) + sc[1] * (hi - 32 * bs_hi))
                        seen[row, s, u] += 1
                        if isum != ref[row, s, u]:
                            bad.append(("isum", row, s, u, isum, int(ref[row, s, u])))
                        wd = f16(w[row, s, 208:210])
                        v = unit_value(sd[s], wd, isum, bs_lo + bs_hi)
                        vref = unit_value(d8[s], wd, ref[row, s, u], int(bs[s, 2 * u]) + int(bs[s, 2 * u + 1]))
                        if v.view(np.uint32) != vref.view(np.uint32):
                            bad.append(("value", row, s, u))
                        acc[lane] = np.float32(acc[lane] + v)
            tot = acc.copy()
            for off in (16, 8, 4, 2, 1):
                tot = (tot + tot[np.arange(32) ^ off]).astype(np.float32)
            wd_all = f16(w[row, :, 208:210]).astype(np.float64)
            exact = float((d8.astype(np.float64)[:, None] * wd_all[:, None] * ref[row].astype(np.float64)).sum())
            scale = float((np.abs(d8.astype(np.float64)[:, None] * wd_all[:, None] * ref[row])).sum()) + 1e-30
            if abs(float(tot[0]) - exact) > 1e-5 * scale:
                bad.append(("row", row, float(tot[0]), exact))
            writes[row] += 1
            row += grid * warps
    return bad, seen, writes


def case(name, M, nsb, base, grid, warps=WARPS):
    bad, seen, writes = run(M, nsb, base, grid, warps=warps)
    check(f"{name}: every unit once", (seen == 1).all(), f"counts {np.unique(seen)}")
    check(f"{name}: every row written once", (writes == 1).all(), f"{np.unique(writes)}")
    check(f"{name}: loads, banks, unit sums, values, rows", not bad, str(bad[:3]))


case("K=3584 (7B v / head rows), aligned base", 11, 14, 256, 1)
case("K=1280, odd super-blocks per row (rows 2 mod 4)", 9, 5, 64, 2)
case("K=256, one super-block a row", 7, 1, 128, 1)
case("K=4608, three iterations", 3, 18, 16, 1)
case("K=1280 in blocks of 32 warps (d12), rows past one wave", 70, 5, 32, 2, warps=32)
# negative controls: each must report a mismatch
state = C.save()
b1, _, _ = run(3, 14, 256, 1, bad_neighbour=True)
b2, _, _ = run(3, 14, 256, 1, bad_layout=True)
C.restore(state)
check("negative control: a wrong neighbour is caught", any(x[0] == "isum" for x in b1), str(b1[:1]))
check("negative control: staging without the xor is caught", bool(b2), "no mismatch reported")
sys.exit(C.report())

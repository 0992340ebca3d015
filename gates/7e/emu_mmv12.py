# Host emulation (NumPy) of kernel_mmv12 in phase7e_perf/mmv12_exact.cu (item e12), line by line:
# activation staging into the permuted shared layout, the lane map (octet q of the warp owns
# super-block it*4U + 4g + q, lane t = lane & 7 loads 16 bytes of its quants), Q6_K's aligned
# 16-byte loads + realign16, the half-dot swap with lane t^1, the per-unit float expression,
# the per-lane (it, g) accumulation, the xor butterfly and the grid-stride row cover.
# Checked against a direct NumPy decode of the GGUF Q4_K / Q6_K blocks: every unit computed
# exactly once and bit-identical to the reference's unit value, row sums within float rounding,
# every row written once, no 16-byte chunk outside [floor16(tensor), tensor end). Item e14
# (quant_act14: x quantized in the kernel) against kernel_quant_q8_k's bytes (below). CPU only.
import sys
import numpy as np

WARPS = 8
AK = 292
rng = np.random.default_rng(12)
passed = failed = 0
first_bad = []


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        if len(first_bad) < 10:
            first_bad.append(f"{name}: {detail}")
            print(f"  MISMATCH {name}: {detail}")


# ---------------- test data (GGUF block layouts) ----------------
def rand_f16(n, lo, hi):
    return (rng.uniform(lo, hi, n) * rng.choice([-1.0, 1.0], n)).astype(np.float16)


def make_q4k(M, nsb):
    b = rng.integers(0, 256, size=(M, nsb, 144), dtype=np.uint8)
    b[:, :, 0:2] = rand_f16(M * nsb, 1e-3, 2e-2).view(np.uint8).reshape(M, nsb, 2)
    b[:, :, 2:4] = rand_f16(M * nsb, 1e-3, 2e-2).view(np.uint8).reshape(M, nsb, 2)
    return b


def make_q6k(M, nsb):
    b = rng.integers(0, 256, size=(M, nsb, 210), dtype=np.uint8)
    b[:, :, 208:210] = rand_f16(M * nsb, 1e-3, 2e-2).view(np.uint8).reshape(M, nsb, 2)
    return b


def make_act(nsb):
    """one Q8_K row: per block f32 d, int8 qs[256], int16 bsums[16] (sums of 16 qs)"""
    d = rng.uniform(1e-3, 1e-2, nsb).astype(np.float32)
    qs = rng.integers(-127, 128, size=(nsb, 256)).astype(np.int8)
    bs = qs.astype(np.int16).reshape(nsb, 16, 16).sum(axis=2).astype(np.int16)
    raw = np.zeros((nsb, AK), np.uint8)
    raw[:, 0:4] = d.view(np.uint8).reshape(nsb, 4)
    raw[:, 4:260] = qs.view(np.uint8)
    raw[:, 260:292] = bs.view(np.uint8).reshape(nsb, 32)
    return raw.reshape(-1), d, qs, bs


# ---------------- direct reference: unit values from the GGUF layouts ----------------
def f16(b2):  # [..., 2] uint8 -> float32
    return np.ascontiguousarray(b2).view(np.float16)[..., 0].astype(np.float32)


def ref_units_q4k(w, d8, qs, bs):
    M, nsb, _ = w.shape
    d, dmin, sc, qb = f16(w[..., 0:2]), f16(w[..., 2:4]), w[..., 4:16].astype(np.int64), w[..., 16:144].astype(np.int64)
    scale = np.zeros((M, nsb, 8), np.int64)
    mins = np.zeros((M, nsb, 8), np.int64)
    for j in range(8):
        if j < 4:
            scale[..., j] = sc[..., j] & 63
            mins[..., j] = sc[..., j + 4] & 63
        else:
            scale[..., j] = (sc[..., j + 4] & 0xF) | ((sc[..., j - 4] >> 6) << 4)
            mins[..., j] = (sc[..., j + 4] >> 4) | ((sc[..., j] >> 6) << 4)
    q = np.zeros((M, nsb, 256), np.int64)
    for c in range(4):  # 64 elements per 32 qs bytes: low nibbles then high nibbles
        q[..., 64 * c:64 * c + 32] = qb[..., 32 * c:32 * c + 32] & 0xF
        q[..., 64 * c + 32:64 * c + 64] = qb[..., 32 * c:32 * c + 32] >> 4
    a = qs.astype(np.int64)[None]
    isum = (q * a).reshape(M, nsb, 8, 32).sum(axis=3)
    bsum = bs.astype(np.int64).reshape(nsb, 8, 2).sum(axis=2)[None]
    wd = d[..., None] * scale.astype(np.float32)
    wm = dmin[..., None] * mins.astype(np.float32)
    return d8[None, :, None] * (wd * isum.astype(np.float32) - wm * bsum.astype(np.float32))


def ref_units_q6k(w, d8, qs, bs):
    M, nsb, _ = w.shape
    ql, qh = w[..., 0:128].astype(np.int64), w[..., 128:192].astype(np.int64)
    sc = w[..., 192:208].view(np.int8).astype(np.int64)
    d = f16(w[..., 208:210])
    q = np.zeros((M, nsb, 256), np.int64)
    scl = np.zeros((M, nsb, 256), np.int64)
    for n in range(2):
        for l in range(32):
            h = qh[..., 32 * n + l]
            e = 128 * n + l
            q[..., e] = (ql[..., 64 * n + l] & 0xF) | (((h >> 0) & 3) << 4)
            q[..., e + 32] = (ql[..., 64 * n + 32 + l] & 0xF) | (((h >> 2) & 3) << 4)
            q[..., e + 64] = (ql[..., 64 * n + l] >> 4) | (((h >> 4) & 3) << 4)
            q[..., e + 96] = (ql[..., 64 * n + 32 + l] >> 4) | (((h >> 6) & 3) << 4)
            for r in range(4):
                scl[..., e + 32 * r] = sc[..., 8 * n + l // 16 + 2 * r]
    q -= 32
    a = qs.astype(np.int64)[None]
    isum = (scl * q * a).reshape(M, nsb, 8, 32).sum(axis=3)
    bsum = bs.astype(np.int64).reshape(nsb, 8, 2).sum(axis=2)[None]
    wd = np.broadcast_to(d[..., None], isum.shape)
    return d8[None, :, None] * (wd * isum.astype(np.float32) - np.float32(0.0) * bsum.astype(np.float32))


# ---------------- emulation helpers (32-bit words, int32 dp4a) ----------------
M32 = np.uint64(0xFFFFFFFF)


def bytes_s8(w):  # uint64 word [...] -> int64 [..., 4] signed bytes
    b = (w[..., None] >> np.array([0, 8, 16, 24], np.uint64)) & np.uint64(0xFF)
    b = b.astype(np.int64)
    return np.where(b >= 128, b - 256, b)


def dp4a(a, b, c):
    return c + (bytes_s8(a) * bytes_s8(b)).sum(axis=-1)


def vsub4_20(x):  # __vsub4(x, 0x20202020): bytewise x - 32 mod 256
    b = (x[..., None] >> np.array([0, 8, 16, 24], np.uint64)) & np.uint64(0xFF)
    b = (b.astype(np.int64) - 32) & 0xFF
    return (b.astype(np.uint64) << np.array([0, 8, 16, 24], np.uint64)).sum(axis=-1).astype(np.uint64)


class Mem:
    """the device tensor at byte address `base` (allocation starts at 0); records chunk reads"""

    def __init__(self, data, base):
        self.buf = rng.integers(0, 256, size=base + len(data) + 64, dtype=np.uint8)  # garbage around it
        self.buf[base:base + len(data)] = data
        self.lo16, self.end = base & ~15, base + len(data)
        self.bad = 0

    def ld16(self, addr, on):  # [M,32] addresses -> [M,32,4] uint64 words (0 where not on)
        a = np.where(on, addr, self.lo16)
        self.bad += int(np.count_nonzero(on & ((a & 15) != 0)))
        self.bad += int(np.count_nonzero(on & ((a < self.lo16) | (a + 16 > self.end))))
        b = self.buf[a[..., None] + np.arange(16)].astype(np.uint64)
        w = b.reshape(*a.shape, 4, 4) << np.array([0, 8, 16, 24], np.uint64)
        return np.where(on[..., None], w.sum(axis=-1), np.uint64(0))

    def ld_u16(self, addr, on):
        a = np.where(on, addr, self.lo16)
        self.bad += int(np.count_nonzero(on & (((a & 1) != 0) | (a < self.lo16) | (a + 2 > self.end))))
        v = self.buf[a].astype(np.uint64) | (self.buf[a + 1].astype(np.uint64) << np.uint64(8))
        return np.where(on, v, np.uint64(0))


def act_perm(wt, v):
    return v ^ ((v & 8) >> (2 if wt == "q4k" else 1))


def stage_act(wt, raw, nsb):
    """stage_act12: word i of the 292-byte blocks -> sq (permuted uint4), sd, sbs"""
    words = raw.view("<u4").astype(np.uint64)
    sqw = np.zeros(nsb * 64, np.uint64)
    sd = np.zeros(nsb, np.float32)
    sbs = np.zeros(nsb * 8, np.uint64)
    i = np.arange(nsb * 73)
    s, o = i // 73, i % 73
    m0, mq, mb = o == 0, (o >= 1) & (o <= 64), o >= 65
    sd[s[m0]] = words[i[m0]].astype(np.uint32).view(np.float32)
    oq = o[mq] - 1
    sqw[s[mq] * 64 + act_perm(wt, oq >> 2) * 4 + (oq & 3)] = words[i[mq]]
    sbs[s[mb] * 8 + (o[mb] - 65)] = words[i[mb]]
    return sqw.reshape(nsb * 16, 4), sd, sbs


def unit_value(d8, wd, wm, isum, bsw):
    lo = (bsw & np.uint64(0xFFFF)).astype(np.int64)
    hi = (bsw >> np.uint64(16)).astype(np.int64)
    bsum = np.where(lo >= 32768, lo - 65536, lo) + np.where(hi >= 32768, hi - 65536, hi)
    return d8 * (wd * isum.astype(np.float32) - wm * bsum.astype(np.float32))


def half(bits):
    return bits.astype(np.uint16).view(np.float16).astype(np.float32)


def shfl_xor(v, m):
    return v[:, np.arange(32) ^ m]


def realign16(x, y, sh):  # x, y [M,32,4] words; sh [M,32] even
    w = np.concatenate([x, y], axis=-1)
    k = (sh >> 2)[..., None]
    bits = ((sh & 3) * 8).astype(np.uint64)[..., None]
    v = np.where((k & 2) != 0, w[..., 2:8], w[..., 0:6])
    u = np.where((k & 1) != 0, v[..., 1:6], v[..., 0:5])
    wide = u[..., 0:4] | (u[..., 1:5] << np.uint64(32))
    return (wide >> bits) & M32


def lane_values(wt, mem, rowaddr, s, on, t, sq, sd, sbs):
    """one group of one weight: loads at the lane's addresses, then the lane's unit value;
    returns value [M,32], unit index [M,32]"""
    sc = np.where(on, s, 0)
    aq = lambda v: sq[sc * 16 + act_perm(wt, v)]  # [M,32,4]
    if wt == "q4k":
        sb = rowaddr[:, None] + s * 144
        H = mem.ld16(sb, on)
        Q = mem.ld16(sb + 16 + 16 * t, on)
        c, h = t >> 1, t & 1
        a0, a1 = aq(4 * c + h), aq(4 * c + 2 + h)
        m4 = np.uint64(0x0F0F0F0F)
        pa = np.zeros(on.shape, np.int64)
        pb = np.zeros(on.shape, np.int64)
        for k in range(4):
            pa = dp4a(Q[..., k] & m4, a0[..., k], pa)
            pb = dp4a((Q[..., k] >> np.uint64(4)) & m4, a1[..., k], pb)
        recv = shfl_xor(np.where(h == 1, pa, pb), 1)
        isum = np.where(h == 1, recv + pb, pa + recv)
        j = t
        shb = (8 * (t & 3)).astype(np.uint64)
        by, bz, bw = [(H[..., i] >> shb) & np.uint64(0xFF) for i in (1, 2, 3)]
        by, bz, bw = by.astype(np.int64), bz.astype(np.int64), bw.astype(np.int64)
        scv = np.where(j < 4, by & 63, (bw & 0xF) | ((by >> 6) << 4))
        mnv = np.where(j < 4, bz & 63, (bw >> 4) | ((bz >> 6) << 4))
        wd = half(H[..., 0] & np.uint64(0xFFFF)) * scv.astype(np.float32)
        wm = half(H[..., 0] >> np.uint64(16)) * mnv.astype(np.float32)
        v = unit_value(sd[sc], wd, wm, isum, sbs[sc * 8 + j])
        return v, j
    # q6k
    n, p, h = t >> 2, (t >> 1) & 1, t & 1
    sb = rowaddr[:, None] + s * 210
    sh = sb & 15
    a = sb - sh
    l0, l1 = mem.ld16(a + 16 * t, on), mem.ld16(a + 16 * t + 16, on)
    h0 = mem.ld16(a + 128 + 32 * n + 16 * h, on)
    h1 = mem.ld16(a + 128 + 32 * n + 16 * h + 16, on)
    scd = mem.ld_u16(sb + 192 + 8 * n + 2 * (p + 2 * h), on) | (mem.ld_u16(sb + 208, on) << np.uint64(16))
    sh = np.where(on, sh, 0)
    ql, qh = realign16(l0, l1, sh), realign16(h0, h1, sh)
    a1, a2 = aq(8 * n + 2 * p + h), aq(8 * n + 2 * p + 4 + h)
    m4 = np.uint64(0x0F0F0F0F)
    hs1, hs2 = (2 * p).astype(np.uint64), (2 * p + 4).astype(np.uint64)
    lev = lambda l, qw, hs: vsub4_20(l | (((qw >> hs) & np.uint64(0x03030303)) << np.uint64(4)))
    p1 = np.zeros(on.shape, np.int64)
    p2 = np.zeros(on.shape, np.int64)
    for k in range(4):
        p1 = dp4a(lev(ql[..., k] & m4, qh[..., k], hs1), a1[..., k], p1)
        p2 = dp4a(lev((ql[..., k] >> np.uint64(4)) & m4, qh[..., k], hs2), a2[..., k], p2)
    recv = shfl_xor(np.where(h == 1, p1, p2), 1)
    lo, hi = np.where(h == 1, recv, p1), np.where(h == 1, p2, recv)
    s8 = lambda x: np.where(x >= 128, x - 256, x)
    sc_lo = s8((scd & np.uint64(0xFF)).astype(np.int64))
    sc_hi = s8(((scd >> np.uint64(8)) & np.uint64(0xFF)).astype(np.int64))
    isum = sc_lo * lo + sc_hi * hi
    wd = half(scd >> np.uint64(16))
    j = 4 * n + p + 2 * h
    v = unit_value(sd[sc], wd, np.float32(0.0), isum, sbs[sc * 8 + j])
    return v, j


def warp_sum(v):
    for off in (16, 8, 4, 2, 1):
        v = (v + shfl_xor(v, off)).astype(np.float32)
    return v


def emulate(wt, U, mems, nsb, M, sq, sd, sbs, bias):
    """kernel_mmv12 for every row at once (a row's result does not depend on which warp
    runs it); returns per-weight row sums [NS][M], output y, and the unit coverage"""
    NS = len(mems)
    wrow = nsb * (144 if wt == "q4k" else 210)
    lane = np.arange(32)
    q, t = np.broadcast_to(lane >> 3, (M, 32)), np.broadcast_to(lane & 7, (M, 32))
    nit = (nsb + 4 * U - 1) // (4 * U)
    acc = [np.zeros((M, 32), np.float32) for _ in range(NS)]
    seen = [np.zeros((M, nsb, 8), np.int64) for _ in range(NS)]
    got_units = [np.zeros((M, nsb, 8), np.float32) for _ in range(NS)]
    rows = np.arange(M)
    for it in range(nit):
        for g in range(U):
            s = it * 4 * U + 4 * g + q
            on = s < nsb
            for k in range(NS):
                v, j = lane_values(wt, mems[k], mems[k].base + rows * wrow, s, on, t, sq, sd, sbs)
                v = v.astype(np.float32)
                acc[k] = np.where(on, acc[k] + v, acc[k]).astype(np.float32)
                mi, li = np.nonzero(on)
                np.add.at(seen[k], (mi, s[mi, li], j[mi, li]), 1)
                got_units[k][mi, s[mi, li], j[mi, li]] = v[mi, li]
    sums = [warp_sum(a)[:, 0] for a in acc]
    y = sums[0] + bias if bias is not None else sums[0]
    return sums, y, seen, got_units


def grid_cover(M, sm=132, occ=4):
    nb = min((M + WARPS - 1) // WARPS, sm * occ)
    stride = nb * WARPS
    cnt = np.zeros(M, np.int64)
    for gw in range(nb * WARPS):
        cnt[np.arange(gw, M, stride)] += 1
    return cnt


def run_case(wt, K, M, fused, off, U=0):
    nsb = K // 256
    # u_default() of mmv12_exact.cu; the other built values through mi7e_mmv12_u
    U = U or {("q4k", False): 4, ("q4k", True): 2, ("q6k", False): 2, ("q6k", True): 1}[(wt, fused)]
    name = f"{wt}_K{K}_M{M}{'_fused' if fused else ''}_off{off}_U{U}"
    raw, d8, qs, bs = make_act(nsb)
    sq, sd, sbs = stage_act(wt, raw, nsb)
    # staging: the staged layout read back through act_perm equals the blocks
    ok = np.array_equal(sd, d8)
    for v in range(16):
        ok &= np.array_equal(sq[np.arange(nsb) * 16 + act_perm(wt, v)].astype(np.uint32).view(np.int8).reshape(nsb, 16),
                             qs[:, 16 * v:16 * v + 16])
    ok &= np.array_equal(sbs.astype(np.uint32).view(np.int16).reshape(nsb, 16), bs)
    check(name + " stage", ok, "staged activation differs from the Q8_K blocks")
    mems, refs = [], []
    for _ in range(2 if fused else 1):
        w = make_q4k(M, nsb) if wt == "q4k" else make_q6k(M, nsb)
        mem = Mem(w.reshape(-1), 256 + off)
        mem.base = 256 + off
        mems.append(mem)
        refs.append(ref_units_q4k(w, d8, qs, bs) if wt == "q4k" else ref_units_q6k(w, d8, qs, bs))
    bias = None if fused else rng.uniform(-0.5, 0.5, M).astype(np.float32)
    sums, y, seen, got = emulate(wt, U, mems, nsb, M, sq, sd, sbs, bias)
    for k in range(len(mems)):
        once = np.all(seen[k] == 1)
        check(name + f" w{k} cover", once, f"units computed {seen[k].min()}..{seen[k].max()} times (want 1)")
        eq = np.array_equal(got[k].view(np.uint32), refs[k].astype(np.float32).view(np.uint32))
        if not eq:
            i = np.argwhere(got[k].view(np.uint32) != refs[k].astype(np.float32).view(np.uint32))[0]
            check(name + f" w{k} units", False, f"unit (row, sb, j) {tuple(i)} got {got[k][tuple(i)]!r} want {refs[k][tuple(i)]!r}")
        else:
            check(name + f" w{k} units", True)
        want = refs[k].astype(np.float64).sum(axis=(1, 2))
        scale = np.abs(refs[k].astype(np.float64)).sum(axis=(1, 2)) + 1e-30
        err = np.abs(sums[k].astype(np.float64) - want) / scale
        i = int(np.argmax(err))
        check(name + f" w{k} rowsum", err.max() < 1e-5, f"row {i} got {sums[k][i]!r} want {want[i]!r} (rel {err.max():.3g})")
        check(name + f" w{k} bounds", mems[k].bad == 0, f"{mems[k].bad} loads outside the tensor or misaligned")
    if bias is not None:
        check(name + " bias", np.array_equal(y, (sums[0] + bias).astype(np.float32)), "bias add differs")
    cnt = grid_cover(M)
    check(name + " rows", np.all(cnt == 1), f"rows written {cnt.min()}..{cnt.max()} times")


def negative_control():
    """the checks can fail: a wrong realign offset (sh ignored) must be caught"""
    global realign16
    good = realign16
    realign16 = lambda x, y, sh: good(x, y, np.zeros_like(sh))
    global passed, failed
    p0, f0 = passed, failed
    saved = list(first_bad)
    run_case("q6k", 256, 7, False, 2)
    caught = failed > f0
    passed, failed = p0, f0
    first_bad[:] = saved
    realign16 = good
    return caught


# ---------------- the kernel's own lane code, compiled for the host ----------------
# phase7e_perf/mmv12_exact.cu up to its kernel (load_*, value_*, realign16, stage_act12) built
# with g++ against stub intrinsics (a two-pass __shfl_xor_sync: pass 1 records every lane's
# operand, pass 2 reads the partner's), driven through the kernel's loop by a small C++ main;
# its unit values must equal the reference's and its row sums the emulation's, bit for bit.
# Skipped (not passed) without g++ or the CUDA headers (vector_types.h).
HOST_FP16 = r"""/* host stub for the e12 host harness */
#pragma once
#include <stdint.h>
#include <string.h>
struct __half { unsigned short b; };
static inline __half __ushort_as_half(unsigned short b) { __half h; h.b = b; return h; }
static inline float __half2float(__half h) { _Float16 f; memcpy(&f, &h.b, 2); return (float)f; }
"""
HOST_RT = r"""/* host stub for the e12 host harness: the device intrinsics the e12 lane code uses */
#pragma once
#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
struct hdim { unsigned x, y, z; };
extern hdim threadIdx, blockDim, blockIdx, gridDim;
extern int g_pass, g_lane, g_sent[32];
static inline uint4 __ldg(const uint4 *p) { return *p; }
static inline unsigned short __ldg(const unsigned short *p) { return *p; }
static inline unsigned int __ldg(const unsigned int *p) { return *p; }
static inline int __ldg(const int *p) { return *p; }
static inline int __dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
}
static inline unsigned __vsub4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int k = 0; k < 4; k++) r |= (((a >> (8 * k)) - (b >> (8 * k))) & 0xFFu) << (8 * k);
    return r;
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)((((uint64_t)hi << 32) | lo) >> (s & 31));
}
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
/* two-pass shuffle: pass 1 records each lane's operand, pass 2 reads the partner's */
static inline int __shfl_xor_sync(unsigned, int v, int m) {
    if (g_pass == 1) { g_sent[g_lane] = v; return 0; }
    return g_sent[g_lane ^ m];
}
static inline float __shfl_xor_sync(unsigned, float v, int m) { (void)m; return v; }   /* unused by the lane code */
static inline void __syncthreads(void) {}
"""
HOST_MAIN = r"""/* host harness: runs the e12 lane code of phase7e_perf/mmv12_exact.cu (load_*, value_*, realign16,
 * stage_act12, compiled for the host) through the kernel's loop; writes units and row sums. */
#include "dev_only.inc"
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include <algorithm>
hdim threadIdx, blockDim, blockIdx, gridDim;
int g_pass, g_lane, g_sent[32];

template <int WT>
static void run(const uint8_t *W, int64_t M, int nsb, int U, const uint8_t *A, float *units, float *sums) {
    typedef q12<WT> Q;
    std::vector<uint4> smem((size_t)nsb * 292 / 16 + 2), other(smem.size());
    uint4 *sq = smem.data();
    float *sd = (float *)(sq + (size_t)nsb * 16);
    uint32_t *sbs = (uint32_t *)(sd + nsb);
    blockDim.x = 256;
    for (unsigned th = 0; th < 256; th++) { threadIdx.x = th; stage_act12<WT, 4>(A, nsb, sq, sd, sbs); }
    /* the other batch sizes and the word path (A + 4: not 16-byte aligned) stage the same bytes */
    std::vector<uint8_t> shifted((size_t)nsb * 292 + 32);
    uint8_t *A4 = shifted.data() + (16 - ((uintptr_t)shifted.data() & 15)) + 4;
    memcpy(A4, A, (size_t)nsb * 292);
    for (int variant = 0; variant < 4; variant++) {
        std::fill(other.begin(), other.end(), make_uint4(0, 0, 0, 0));
        uint4 *oq = other.data();
        float *od = (float *)(oq + (size_t)nsb * 16);
        uint32_t *ob = (uint32_t *)(od + nsb);
        const uint8_t *src = variant & 2 ? A4 : A;
        for (unsigned th = 0; th < 256; th++) {
            threadIdx.x = th;
            if (variant & 1) stage_act12<WT, 1>(src, nsb, oq, od, ob);
            else stage_act12<WT, 2>(src, nsb, oq, od, ob);
        }
        if (memcmp(oq, sq, (size_t)nsb * 292)) { fprintf(stderr, "staging variant %d differs\n", variant); exit(5); }
    }
    const size_t wrow = (size_t)nsb * Q::bytes;
    const int nit = (nsb + 4 * U - 1) / (4 * U);
    for (int64_t row = 0; row < M; row++) {
        float acc[32] = {0};
        for (int it = 0; it < nit; it++)
            for (int g = 0; g < U; g++) {
                typename Q::raw r[32];
                float v[32];
                for (int pass = 1; pass <= 2; pass++) {
                    g_pass = pass;
                    for (int lane = 0; lane < 32; lane++) {
                        g_lane = lane;
                        const int q = lane >> 3, t = lane & 7, s = it * 4 * U + 4 * g + q;
                        if (pass == 1) {
                            if (s < nsb) Q::load(r[lane], W + (size_t)row * wrow + (size_t)s * Q::bytes, t);
                            else Q::zero(r[lane]);
                        }
                        v[lane] = Q::value(r[lane], sq, sd, sbs, s < nsb ? s : 0, t);
                    }
                }
                for (int lane = 0; lane < 32; lane++) {
                    const int q = lane >> 3, t = lane & 7, s = it * 4 * U + 4 * g + q;
                    if (s >= nsb) continue;
                    acc[lane] += v[lane];
                    const int j = WT == MI_TYPE_Q4_K ? t : 4 * (t >> 2) + ((t >> 1) & 1) + 2 * (t & 1);
                    units[((size_t)row * nsb + s) * 8 + j] = v[lane];
                }
            }
        for (int off = 16; off >= 1; off >>= 1) {
            float n[32];
            for (int l = 0; l < 32; l++) n[l] = acc[l] + acc[l ^ off];
            memcpy(acc, n, sizeof acc);
        }
        sums[row] = acc[0];
    }
}

int main(int argc, char **argv) {
    /* args: wt(12|14) K M U off wfile afile outfile */
    if (argc != 9) return 2;
    const int wt = atoi(argv[1]), U = atoi(argv[4]);
    const int64_t K = atoll(argv[2]), M = atoll(argv[3]);
    const size_t off = (size_t)atoll(argv[5]);
    const int nsb = (int)(K / 256);
    const size_t wbytes = (size_t)M * nsb * (wt == MI_TYPE_Q4_K ? 144 : 210);
    uint8_t *buf = (uint8_t *)aligned_alloc(256, (wbytes + off + 256 + 255) / 256 * 256);
    FILE *f = fopen(argv[6], "rb");
    if (!f || fread(buf + off, 1, wbytes, f) != wbytes) return 3;
    fclose(f);
    std::vector<uint8_t> A((size_t)nsb * 292);
    f = fopen(argv[7], "rb");
    if (!f || fread(A.data(), 1, A.size(), f) != A.size()) return 4;
    fclose(f);
    std::vector<float> units((size_t)M * nsb * 8, __builtin_nanf("")), sums(M);
    if (wt == MI_TYPE_Q4_K) run<MI_TYPE_Q4_K>(buf + off, M, nsb, U, A.data(), units.data(), sums.data());
    else run<MI_TYPE_Q6_K>(buf + off, M, nsb, U, A.data(), units.data(), sums.data());
    f = fopen(argv[8], "wb");
    fwrite(units.data(), 4, units.size(), f);
    fwrite(sums.data(), 4, sums.size(), f);
    fclose(f);
    free(buf);
    return 0;
}
"""
skipped = 0


def host_harness():
    global skipped
    import os, shutil, subprocess, tempfile
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", ".."))
    cxx = shutil.which("g++")
    cuda_inc = [d for d in (os.environ.get("CUDA_HOME", "") + "/include", "/usr/local/cuda/include")
                if os.path.exists(os.path.join(d, "vector_functions.h"))]
    if not cxx or not cuda_inc:
        skipped += 1
        print("skip host_harness: no g++ or CUDA headers")
        return
    src = open(os.path.join(root, "phase7e_perf", "mmv12_exact.cu")).read()
    marker = "/* ---------------- kernel ----------------"
    if marker not in src:
        check("host_harness source", False, "mmv12_exact.cu lost its kernel marker: update emu_mmv12.py")
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "fake"))
        open(os.path.join(tmp, "fake", "cuda_fp16.h"), "w").write(HOST_FP16)
        open(os.path.join(tmp, "fake", "cuda_runtime.h"), "w").write(HOST_RT)
        open(os.path.join(tmp, "dev_only.inc"), "w").write(src[:src.index(marker)])
        open(os.path.join(tmp, "host.cpp"), "w").write(HOST_MAIN)
        exe = os.path.join(tmp, "host")
        r = subprocess.run([cxx, "-std=c++17", "-O1", "-w", "-I" + os.path.join(tmp, "fake"), "-I" + tmp, "-I" + root,
                            "-I" + cuda_inc[0], "-o", exe, os.path.join(tmp, "host.cpp")], capture_output=True, text=True)
        if r.returncode != 0:
            check("host_harness build", False, r.stderr.strip().splitlines()[:3])
            return
        hcases = [("q4k", 256, 7, 0), ("q4k", 3584, 33, 0), ("q4k", 18944, 9, 0), ("q6k", 256, 9, 2),
                  ("q6k", 3584, 33, 6), ("q6k", 18944, 9, 14), ("q6k", 18944, 5, 4)]
        for wt, K, M, off in hcases:
            for U in ((4, 2) if wt == "q4k" else (2, 1)):
                name = f"host_{wt}_K{K}_M{M}_U{U}_off{off}"
                nsb = K // 256
                raw, d8, qs, bs = make_act(nsb)
                w = make_q4k(M, nsb) if wt == "q4k" else make_q6k(M, nsb)
                ref = (ref_units_q4k if wt == "q4k" else ref_units_q6k)(w, d8, qs, bs).astype(np.float32)
                wf, af, of = (os.path.join(tmp, x) for x in ("w.bin", "a.bin", "o.bin"))
                w.reshape(-1).tofile(wf)
                raw.tofile(af)
                r = subprocess.run([exe, "12" if wt == "q4k" else "14", str(K), str(M), str(U), str(off), wf, af, of],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    check(name, False, f"harness exit {r.returncode}: {r.stderr.strip()}")
                    continue
                out = np.fromfile(of, np.float32)
                units, sums = out[:M * nsb * 8].reshape(M, nsb, 8), out[M * nsb * 8:]
                sq, sd, sbs = stage_act(wt, raw, nsb)
                mem = Mem(w.reshape(-1), 256 + off)
                mem.base = 256 + off
                esums = emulate(wt, U, [mem], nsb, M, sq, sd, sbs, None)[0][0].astype(np.float32)
                ue = units.view(np.uint32) != ref.view(np.uint32)
                if ue.any():
                    i = tuple(np.argwhere(ue)[0])
                    check(name + " units", False, f"unit (row, sb, j) {i} got {units[i]!r} want {ref[i]!r}")
                else:
                    check(name + " units", True)
                se = sums.view(np.uint32) != esums.view(np.uint32)
                i = int(np.argmax(se)) if se.any() else 0
                check(name + " rowsum", not se.any(), f"row {i} got {sums[i]!r} want (emulation) {esums[i]!r}")


# ---------------- e14: the activation quantized inside the kernel (quant_act14) ----------------
# 7b's kernel_quant_q8_k and e14's quant_act14 (which calls q8k_quant_warp, phase7e_perf/quant_q8k.cuh)
# with the same lane map (lane l: elements 8l .. 8l+7 of a super-block); they differ in which warp
# takes which super-block and where the bytes go. Emulated here: q8k_quant_warp lane by lane (float32,
# the xor-butterfly max, fminf/fmaxf's NaN rule), kernel_quant_q8_k's stores into the 292-byte blocks,
# checked against a direct whole-block formula (quant_k.c's convention); then quant_act14's batches,
# loads and stores into the shared layout, required byte-equal to stage_act12 of the 7b blocks, every
# shared byte written once, every load 16-byte aligned inside x.
QIN_NB = 2  # quant_act14<WT, 2> in kernel_mmv12


def fmaxf(a, b):  # IEEE maxNum as CUDA's fmaxf: a NaN operand yields the other
    return np.fmax(a, b).astype(np.float32)


def fminf(a, b):
    return np.fmin(a, b).astype(np.float32)


def q8k_quant_warp(v, rnd=np.rint):
    """v float32 [..., 32, 8] (lane, element) -> d [...], q words uint64 [..., 32, 2], pair [..., 32]"""
    amax = np.zeros(v.shape[:-1], np.float32)
    for e in range(8):
        amax = fmaxf(amax, np.abs(v[..., e]))
    for off in (16, 8, 4, 2, 1):
        amax = fmaxf(amax, amax[..., np.arange(32) ^ off])
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        iscale = np.where(amax != 0, np.float32(127.0) / amax, np.float32(0)).astype(np.float32)
        c = fmaxf(np.float32(-127), fminf(np.float32(127), (v * iscale[..., None]).astype(np.float32)))
        lev = rnd(c).astype(np.int64)
        d = np.where(iscale != 0, np.float32(1.0) / iscale, np.float32(0)).astype(np.float32)
    byt = (lev & 0xFF).astype(np.uint64)
    q = (byt.reshape(*byt.shape[:-1], 2, 4) << np.array([0, 8, 16, 24], np.uint64)).sum(axis=-1).astype(np.uint64)
    part = lev.sum(axis=-1)
    pair = part + part[..., np.arange(32) ^ 1]
    return d[..., 0], q, pair


def quant_7b(x, rnd=np.rint):
    """kernel_quant_q8_k: warp g = super-block g, its stores into the 292-byte blocks"""
    nsb = len(x) // 256
    out = np.zeros((nsb, AK), np.uint8)
    d, q, pair = q8k_quant_warp(x.reshape(nsb, 32, 8), rnd)
    out[:, 0:4] = d.astype(np.float32).view(np.uint8).reshape(nsb, 4)
    out[:, 4:260] = q.astype(np.uint32).view(np.uint8).reshape(nsb, 256)  # qw[2*lane + i] = q[i]
    out[:, 260:292] = pair[:, 0::2].astype(np.int16).view(np.uint8).reshape(nsb, 32)  # even lanes: bsums[lane >> 1]
    return out.reshape(-1)


def quant_direct(x):
    """quant_k.c's mi_quant_q8_k on the whole block (no lanes): the independent reference"""
    nsb = len(x) // 256
    out = np.zeros((nsb, AK), np.uint8)
    for s in range(nsb):
        b = x[256 * s:256 * s + 256]
        fin = b[~np.isnan(b)]
        amax = np.float32(np.abs(fin).max()) if len(fin) else np.float32(0)
        amax = max(amax, np.float32(0))
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            iscale = np.float32(127.0) / amax if amax != 0 else np.float32(0)
            d = np.float32(1.0) / iscale if iscale != 0 else np.float32(0)
            prod = (b * iscale).astype(np.float32)
        prod = np.where(np.isnan(prod), np.float32(127), np.clip(prod, -127, 127))
        qs = np.rint(prod).astype(np.int64)
        out[s, 0:4] = np.array([d], np.float32).view(np.uint8)
        out[s, 4:260] = qs.astype(np.int8).view(np.uint8)
        out[s, 260:292] = qs.reshape(16, 16).sum(axis=1).astype(np.int16).view(np.uint8)
    return out.reshape(-1)


def quant14(wt, x, nb=QIN_NB, perm=None):
    """quant_act14 for every warp of a block: returns the shared words (sq, sd, sbs as stage_act
    gives them), the per-byte write counts and the number of bad loads"""
    perm = perm or act_perm
    nsb = len(x) // 256
    sqw = np.zeros(nsb * 64, np.uint64)
    sd = np.zeros(nsb, np.float32)
    sbs16 = np.zeros(nsb * 16, np.uint64)  # the int16 halves of the sbs words
    wq, wd, wb = np.zeros(nsb * 64, np.int64), np.zeros(nsb, np.int64), np.zeros(nsb * 16, np.int64)
    bad = 0
    lane = np.arange(32)
    for w in range(WARPS):
        for s0 in range(w, nsb, nb * WARPS):
            batch = []
            for b in range(nb):  # every load of the batch first
                s = s0 + b * WARPS
                if s >= nsb:
                    batch.append(None)
                    continue
                v = np.zeros((32, 8), np.float32)
                for h in range(2):  # two float4 loads: float index s*256 + 8*lane + 4h
                    fi = s * 256 + 8 * lane + 4 * h
                    bad += int(np.count_nonzero(((4 * fi) & 15) != 0)) + int(np.count_nonzero((fi < 0) | (fi + 4 > len(x))))
                    v[:, 4 * h:4 * h + 4] = x[fi[:, None] + np.arange(4)]
                batch.append((s, v))
            for item in batch:
                if item is None:
                    continue
                s, v = item
                d, q, pair = q8k_quant_warp(v)
                u2 = s * 32 + perm(wt, lane >> 1) * 2 + (lane & 1)  # uint2 index
                for i in range(2):
                    sqw[2 * u2 + i] = q[:, i]
                    np.add.at(wq, 2 * u2 + i, 1)
                ev = lane[0::2]
                sbs16[s * 16 + (ev >> 1)] = pair[0::2].astype(np.int64) & 0xFFFF
                np.add.at(wb, s * 16 + (ev >> 1), 1)
                sd[s] = d
                wd[s] += 1
    sbs = sbs16[0::2] | (sbs16[1::2] << np.uint64(16))
    return sqw.reshape(nsb * 16, 4), sd, sbs, (wq, wd, wb), bad


def edge_x(K):
    """random row with super-blocks at the quantizer's edges (cycled over the row)"""
    nsb = K // 256
    x = (rng.standard_normal(K) * rng.choice([1e-3, 1.0, 30.0], K)).astype(np.float32)
    for s in range(nsb):
        b = x[256 * s:256 * s + 256]
        kind = s % 10
        i = np.arange(256)
        if kind == 0:  # amax 127: iscale 1, every other value a tie (nearest-even)
            b[:] = (i % 254 - 127) + 0.5
            b[0] = 127.0
        elif kind == 1:  # all zero: d = 0, levels 0
            b[:] = 0.0
        elif kind == 2:  # amax is a negative element: level -127 (never -128)
            b[:] = rng.uniform(-1, 1, 256)
            b[77] = -3.0
        elif kind == 3:  # ties after scaling by a power of two: amax 63.5 -> iscale 2
            b[:] = (i % 127 - 63) * 0.25 + 0.125
            b[5] = -63.5
        elif kind == 4:  # -0.0, and values that land just beside +-126.5 / +-127
            b[:] = rng.choice([-0.0, 0.0, 126.5, -126.5, 126.49999, -126.50001, 127.0, -127.0], 256)
        elif kind == 5:  # subnormals and tiny values
            b[:] = rng.uniform(-1, 1, 256) * np.float32(1e-38)
        elif kind == 6:  # a NaN (amax ignores it, its level is 127) among normal values
            b[:] = rng.uniform(-2, 2, 256)
            b[13] = np.nan
        elif kind == 7:  # an infinity: iscale 0, d 0, inf*0 = NaN -> 127
            b[:] = rng.uniform(-2, 2, 256)
            b[200] = -np.inf
        elif kind == 8:  # large magnitudes
            b[:] = rng.uniform(-1, 1, 256) * np.float32(3e38)
    return x


def run_quant14(wt, K, kind):
    nsb = K // 256
    name = f"quant14_{wt}_K{K}_{kind}"
    x = edge_x(K) if kind == "edge" else rng.uniform(-1, 1, K).astype(np.float32) * np.float32(rng.choice([1e-3, 1, 1e3]))
    ref7b = quant_7b(x)
    direct = quant_direct(x)
    eq = np.array_equal(ref7b, direct)
    i = int(np.argmax(ref7b != direct)) if not eq else 0
    check(name + " 7b_vs_direct", eq, f"byte {i} (block {i // AK}, offset {i % AK}) got {ref7b[i]} want {direct[i]}")
    sq_ref, sd_ref, sbs_ref = stage_act(wt, ref7b, nsb)
    sq, sd, sbs, (wq, wd, wb), bad = quant14(wt, x)
    same = (np.array_equal(sq, sq_ref) and np.array_equal(sd.view(np.uint32), sd_ref.view(np.uint32))
            and np.array_equal(sbs, sbs_ref))
    if not same:
        where = ("qs" if not np.array_equal(sq, sq_ref) else "d" if not np.array_equal(sd.view(np.uint32), sd_ref.view(np.uint32))
                 else "bsums")
        check(name + " bytes", False, f"shared {where} differs from stage_act12 of kernel_quant_q8_k's blocks")
    else:
        check(name + " bytes", True)
    check(name + " once", wq.min() == 1 and wq.max() == 1 and wd.min() == 1 and wd.max() == 1 and wb.min() == 1
          and wb.max() == 1, f"writes per word qs {wq.min()}..{wq.max()}, d {wd.min()}..{wd.max()}, "
          f"bsums {wb.min()}..{wb.max()} (want 1)")
    check(name + " loads", bad == 0, f"{bad} float4 loads misaligned or outside x")
    # the half-warp of a 64-bit store (lanes 16h .. 16h+15) covers 128 contiguous bytes: conflict-free
    lane = np.arange(32)
    u2 = act_perm(wt, lane >> 1) * 2 + (lane & 1)
    ok = all(sorted(u2[16 * h:16 * h + 16].tolist()) == list(range(16 * h, 16 * h + 16)) for h in range(2))
    check(name + " banks", ok, "a half-warp's 8-byte stores do not cover 128 contiguous bytes")


def negative_control_quant14():
    """the checks can fail: half away from zero instead of nearest-even, a missing act_perm"""
    global passed, failed
    p0, f0 = passed, failed
    saved = list(first_bad)
    x = edge_x(3584)
    a = quant_7b(x, rnd=lambda c: np.trunc(c + np.copysign(0.5, c)))
    ties = not np.array_equal(a, quant_direct(x))
    nsb = 3584 // 256
    sq_ref = stage_act("q4k", quant_7b(x), nsb)[0]
    noperm = not np.array_equal(quant14("q4k", x, perm=lambda wt, v: v)[0], sq_ref)
    passed, failed = p0, f0
    first_bad[:] = saved
    return ties and noperm


# ---------------- e14's real code on the host: quant_act14 and kernel_quant_q8_k ----------------
# The source of quant_act14 (mmv12_exact.cu, with everything before it) and of kernel_quant_q8_k
# (mm_quant.cu, its function text) compiled with g++: every lane a std::thread, shuffles through a
# barrier-synchronized exchange (so warp_max's five dependent rounds run as on the device), float
# arithmetic IEEE single (SSE, no contraction). The 7b blocks must equal quant_direct's bytes and
# e14's shared row stage_act12's copy of them. Skipped (not passed) without g++ / CUDA headers.
HOSTQ_RT = r"""/* host stub for the e14 quantization harness: one std::thread per lane */
#pragma once
#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <barrier>
struct hdim { unsigned x, y, z; };
extern thread_local hdim threadIdx;
extern hdim blockDim, blockIdx, gridDim;
extern std::barrier<> *g_bar;
extern uint32_t g_slot[32];
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int m) {
    static_assert(sizeof(T) == 4, "32-bit shuffles only");
    const int l = (int)(threadIdx.x & 31);
    uint32_t b;
    memcpy(&b, &v, 4);
    g_slot[l] = b;
    g_bar->arrive_and_wait();
    const uint32_t r = g_slot[l ^ m];
    g_bar->arrive_and_wait();
    T o;
    memcpy(&o, &r, 4);
    return o;
}
static inline float4 __ldg(const float4 *p) { return *p; }
static inline uint4 __ldg(const uint4 *p) { return *p; }
static inline unsigned short __ldg(const unsigned short *p) { return *p; }
static inline unsigned int __ldg(const unsigned int *p) { return *p; }
static inline int __ldg(const int *p) { return *p; }
static inline int __dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
}
static inline unsigned __vsub4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int k = 0; k < 4; k++) r |= (((a >> (8 * k)) - (b >> (8 * k))) & 0xFFu) << (8 * k);
    return r;
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)((((uint64_t)hi << 32) | lo) >> (s & 31));
}
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline void __syncthreads(void) {}
"""
HOSTQ_MAIN = r"""/* host harness: quant_act14 (e14) and kernel_quant_q8_k (7b) run lane by lane on threads */
#include "dev_only.inc"
#include <stdio.h>
#include <stdlib.h>
#include <thread>
#include <vector>
thread_local hdim threadIdx;
hdim blockDim, blockIdx, gridDim;
std::barrier<> *g_bar;
uint32_t g_slot[32];
#include "quant7b.inc"

/* one warp: 32 threads with threadIdx.x = 32 w + lane, running f */
template <class F> static void warp_run(int w, F f) {
    std::barrier<> bar(32);
    g_bar = &bar;
    std::vector<std::thread> th;
    for (int l = 0; l < 32; l++)
        th.emplace_back([=] { threadIdx.x = 32u * (unsigned)w + (unsigned)l; f(); });
    for (auto &t : th) t.join();
}

int main(int argc, char **argv) {
    /* args: wt(12|14) K xfile outfile: writes the 7b blocks (nsb * 292) then e14's shared row */
    if (argc != 5) return 2;
    const int wt = atoi(argv[1]);
    const int64_t K = atoll(argv[2]);
    const int nsb = (int)(K / 256);
    float *x = (float *)aligned_alloc(64, (size_t)K * 4);
    FILE *f = fopen(argv[3], "rb");
    if (!f || fread(x, 4, (size_t)K, f) != (size_t)K) return 3;
    fclose(f);
    std::vector<uint8_t> blocks((size_t)nsb * 292, 0xAA);
    std::vector<uint4> smem((size_t)nsb * 292 / 16 + 2);
    memset(smem.data(), 0xAA, smem.size() * 16);
    uint4 *sq = smem.data();
    float *sd = (float *)(sq + (size_t)nsb * 16);
    uint32_t *sbs = (uint32_t *)(sd + nsb);
    /* 7b: one block of one warp, grid-stride over every super-block */
    gridDim.x = 1;
    blockDim.x = 32;
    blockIdx.x = 0;
    warp_run(0, [&] { kernel_quant_q8_k(x, blocks.data(), K, nsb); });
    /* e14: the 8 warps of a block (independent until the kernel's barrier) */
    blockDim.x = 256;
    for (int w = 0; w < 8; w++)
        warp_run(w, [&] {
            if (wt == MI_TYPE_Q4_K) quant_act14<MI_TYPE_Q4_K, 2>(x, nsb, sq, sd, sbs);
            else quant_act14<MI_TYPE_Q6_K, 2>(x, nsb, sq, sd, sbs);
        });
    f = fopen(argv[4], "wb");
    fwrite(blocks.data(), 1, blocks.size(), f);
    fwrite(smem.data(), 1, (size_t)nsb * 292, f);
    fclose(f);
    free(x);
    return 0;
}
"""


def host_quant14():
    global skipped
    import os, shutil, subprocess, tempfile
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", ".."))
    cxx = shutil.which("g++")
    cuda_inc = [d for d in (os.environ.get("CUDA_HOME", "") + "/include", "/usr/local/cuda/include")
                if os.path.exists(os.path.join(d, "vector_functions.h"))]
    if not cxx or not cuda_inc:
        skipped += 1
        print("skip host_quant14: no g++ or CUDA headers")
        return
    src = open(os.path.join(root, "phase7e_perf", "mmv12_exact.cu")).read()
    q7 = open(os.path.join(root, "phase7b_ops", "mm_quant.cu")).read()
    m_end, k_beg, k_end = "/* FUSED = false", "__global__ void kernel_quant_q8_k", "/* ---------------- matmul"
    if m_end not in src or k_beg not in q7 or k_end not in q7 or "quant_act14" not in src[:src.index(m_end)]:
        check("host_quant14 source", False, "quant_act14 / kernel_quant_q8_k markers moved: update emu_mmv12.py")
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "fake"))
        open(os.path.join(tmp, "fake", "cuda_fp16.h"), "w").write(HOST_FP16)
        open(os.path.join(tmp, "fake", "cuda_runtime.h"), "w").write(HOSTQ_RT)
        open(os.path.join(tmp, "dev_only.inc"), "w").write(src[:src.index(m_end)])
        body = q7[q7.index(k_beg):q7.index(k_end)].replace("__global__ void", "static void", 1)
        open(os.path.join(tmp, "quant7b.inc"), "w").write(body)
        open(os.path.join(tmp, "hostq.cpp"), "w").write(HOSTQ_MAIN)
        exe = os.path.join(tmp, "hostq")
        r = subprocess.run([cxx, "-std=c++20", "-O1", "-w", "-pthread", "-ffp-contract=off", "-I" + os.path.join(tmp, "fake"),
                            "-I" + tmp, "-I" + root, "-I" + cuda_inc[0], "-o", exe, os.path.join(tmp, "hostq.cpp")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            check("host_quant14 build", False, r.stderr.strip().splitlines()[:3])
            return
        for wt in ("q4k", "q6k"):
            for K in (256, 3584, 18944):
                for kind in ("random", "edge"):
                    name = f"hostq_{wt}_K{K}_{kind}"
                    nsb = K // 256
                    x = edge_x(K) if kind == "edge" else rng.uniform(-1, 1, K).astype(np.float32)
                    xf, of = os.path.join(tmp, "x.bin"), os.path.join(tmp, "o.bin")
                    x.astype(np.float32).tofile(xf)
                    r = subprocess.run([exe, "12" if wt == "q4k" else "14", str(K), xf, of], capture_output=True,
                                       text=True)
                    if r.returncode != 0:
                        check(name, False, f"harness exit {r.returncode}: {r.stderr.strip()}")
                        continue
                    out = np.fromfile(of, np.uint8)
                    b7, sh = out[:nsb * AK], out[nsb * AK:]
                    want = quant_direct(x)
                    i = int(np.argmax(b7 != want))
                    check(name + " 7b", np.array_equal(b7, want),
                          f"byte {i} (block {i // AK}, offset {i % AK}) got {b7[i]} want {want[i]}")
                    sq, sd, sbs = stage_act(wt, want, nsb)
                    ref = np.concatenate([sq.astype(np.uint32).view(np.uint8).reshape(-1), sd.view(np.uint8),
                                          sbs.astype(np.uint32).view(np.uint8)])
                    i = int(np.argmax(sh != ref))
                    check(name + " e14", np.array_equal(sh, ref), f"shared byte {i} got {sh[i]} want {ref[i]}")


cases = []
for K in (256, 3584, 18944):
    for M in (1, 7, 512, 1000):
        cases.append(("q4k", K, M, False, 0))
        cases.append(("q6k", K, M, False, [0, 2, 6, 14, 8, 4, 10, 12][len(cases) // 2 % 8]))
for K, M in ((3584, 512), (256, 7), (18944, 7)):
    cases.append(("q4k", K, M, True, 0))
    cases.append(("q6k", K, M, True, 10))
cases += [("q4k", 3584, 512, False, 0, 2), ("q4k", 18944, 7, False, 0, 2), ("q6k", 18944, 7, False, 6, 1),
          ("q6k", 3584, 100, False, 2, 1), ("q4k", 3584, 512, True, 0, 1)]
print("emulating negative control ...", flush=True)
import contextlib, io
with contextlib.redirect_stdout(io.StringIO()):
    caught = negative_control()
check("negative_control_realign", caught, "a broken realign went unnoticed")
for c in cases:
    run_case(*c)
print("emulating e14's in-kernel quantization ...", flush=True)
check("negative_control_quant14", negative_control_quant14(), "a wrong tie rule or a missing act_perm went unnoticed")
for wt in ("q4k", "q6k"):
    for K in (256, 3584, 18944):
        for kind in ("random", "edge"):
            run_quant14(wt, K, kind)
host_harness()
host_quant14()
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)

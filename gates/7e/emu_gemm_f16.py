# Host emulation (NumPy) of the f16 prefill GEMM kernels in phase7e_perf/gemm_f16_kernels.cuh, mirroring their index
# expressions: kernel_act_f16 (per-token power-of-two scale), kernel_dequant_f16 (7b's unit_unpack
# byte for byte, then the unit formula; vs gguf.quants.dequantize), every kernel_gemm_f16<BN, BK, ST, NW>
# of the k_gemm_variants table thread by thread (cp.async staging in LA / LB passes of RPP rows with the
# swz<BK> swizzle and zero fill, the ST-stage commit/wait ring, ldmatrix.x4 lane addresses, PTX
# m16n8k16 fragments, epilogue) and the launcher's chunk loop and variant choice; vs a float64
# product. Checks coverage, alignment, shared-memory hazards, bank conflicts of the ldmatrix and
# cp.async phases, and that every variant accumulates each output over the same k16 steps in the
# same order (the gate compares variants bit for bit). CPU only: python3 gates/7e/emu_gemm_f16.py.
import math
import os
import re
import sys
import time
import numpy as np
from gguf import GGMLQuantizationType as GT
from gguf.quants import dequantize as gguf_dequantize

t_start = time.time()
rng = np.random.default_rng(13)
F16, F32 = np.float16, np.float32
G_BM, G_BK = 128, 32          # G_BK: the k granularity every shape must meet (mi7e_gemm_f16_supported)
GEMM_F16_DEFAULT_BK, GEMM_F16_DEFAULT_NW = 64, 8
# k_gemm_variants: index (bn == 128) * 4 + (bk == 64) * 2 + (nw == 4) -> (BN, BK, ST, NW)
K_GEMM_VARIANTS = [(64, 32, 4, 8), (64, 32, 4, 4), (64, 64, 3, 8), (64, 64, 3, 4),
         (128, 32, 4, 8), (128, 32, 4, 4), (128, 64, 3, 8), (128, 64, 3, 4)]
CHUNK_DEFAULT = 144 << 20
SMS = 132   # mi7e_sm_count() fallback; an H200 has 132 SMs
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SRC = os.path.join(ROOT, "phase7e_perf", "gemm_f16_kernels.cuh")      # kernels, defaults
LIB_TAB = os.path.join(ROOT, "phase7e_perf", "gemm_f16.cu")            # the library's variants (8 warps)
GATE_TAB = os.path.join(ROOT, "gates", "7e", "gemm_f16_variants.cu")   # the gate's: all eight

passed = failed = skipped = 0


def check(name, ok, bad=None):
    """bad: list of (index, got, want) of the first mismatches"""
    global passed, failed
    if ok:
        passed += 1
        print(f"ok    {name}")
    else:
        failed += 1
        print(f"FAIL  {name}")
        for i, g, w in (bad or [])[:5]:
            print(f"      index {i}: got {g!r}, want {w!r}")


def first_bad(mask, got, want, n=5):
    idx = np.flatnonzero(mask)[:n]
    return [(int(i), got.ravel()[i].item(), want.ravel()[i].item()) for i in idx]


# PTX m16n8k16 fragment tables (lane, gid, tig, A/B/C rows and columns): ptx_frag.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptx_frag import lane, gid, tig, A_row, A_col, B_row, B_col, C_row, C_col  # noqa: E402
K16 = np.arange(16)


def mma(d, a, b0, b1, ta, tb0, tb1):
    """mma.sync m16n8k16 row.col f32.f16.f16.f32 for W warps at once: d [W,32,4] f32,
    a [W,32,4 regs,2 halves] f16, b0/b1 [W,32,2] f16 -> new d [W,32,4] f32 (f64 sum, one f32 rounding).
    ta / tb0 / tb1: the global k index each fragment half was staged from (-1: zero fill). Also
    -> step [W,32,4]: the k16 step s this mma added to each output element, when its A row and B
    column both carry k = 16 s + j at position j (else -1)"""
    W = d.shape[0]
    A = np.zeros((W, 16, 16)); B = np.zeros((W, 16, 8)); Cm = np.zeros((W, 16, 8))
    A[:, A_row, A_col] = a.reshape(W, 32, 8).astype(np.float64)   # element i = reg i//2, half i%2
    B[:, B_row, B_col] = np.stack([b0, b1], 2).reshape(W, 32, 4).astype(np.float64)
    Cm[:, C_row, C_col] = d
    D = (A @ B + Cm).astype(F32)
    TA = np.full((W, 16, 16), -9, np.int64); TB = np.full((W, 16, 8), -9, np.int64)
    TA[:, A_row, A_col] = ta.reshape(W, 32, 8)
    TB[:, B_row, B_col] = np.stack([tb0, tb1], 2).reshape(W, 32, 4)
    tar = TA[:, C_row, :]                       # [W,32,4,16]: k of A row r at position j
    tbc = TB.transpose(0, 2, 1)[:, C_col, :]    # [W,32,4,16]: k of B column c at position j
    ok = (tar == tbc).all(-1) & (tar == tar[..., :1] + K16).all(-1) & (tar[..., 0] % 16 == 0)
    return D[:, C_row, C_col], np.where(ok, tar[..., 0] // 16, -1)


# ---------------- shared memory with cp.async groups and hazard tracking ----------------
class Smem:
    """state per half: 0 never staged, 1 cp.async in flight, 2 landed (this thread's wait), 3 visible
    to all threads (after __syncthreads). A read needs 3; a cp.async may not target a half that is in
    flight or that a warp read since the last barrier (write-after-read race). Each half also carries
    the global k index it was staged from (tag; -1 for zero fill)."""

    def __init__(self, nbytes):
        self.nbytes = nbytes
        self.v = np.full(nbytes // 2, np.nan, F16)
        self.t = np.full(nbytes // 2, -5, np.int64)
        self.state = np.zeros(nbytes // 2, np.int8)
        self.read = np.zeros(nbytes // 2, bool)
        self.open, self.groups = [], []
        self.errors = {"cp.async dst not 16-byte aligned / out of smem": 0, "cp.async src not 16-byte aligned / out of bounds": 0,
                       "cp.async races an in-flight copy or an unsynchronized read": 0, "ldmatrix row not 16-byte aligned / out of smem": 0,
                       "ldmatrix reads unstaged / in-flight / unsynchronized smem": 0}
        self.phases = self.conflicts = self.st_phases = self.st_conflicts = 0

    def cp16(self, dst, vals, tags):
        """one cp.async per thread (all threads of the block, in tid order): dst [T] byte addresses,
        vals [T,8] f16 (zeros for src-size 0), tags [T,8]. A 16-byte shared store is served per
        quarter warp: the 8 threads of one phase must hit 8 distinct 16-byte columns of a 128-byte line."""
        grp = np.sort(((dst // 16) % 8).reshape(-1, 8), axis=1)
        self.st_phases += grp.shape[0]
        self.st_conflicts += int((np.diff(grp, axis=1) == 0).any(axis=1).sum())
        bad = (dst % 16 != 0) | (dst < 0) | (dst + 16 > self.nbytes)
        self.errors["cp.async dst not 16-byte aligned / out of smem"] += int(bad.sum())
        idx = (dst[~bad] // 2)[:, None] + np.arange(8)
        if len(np.unique(idx)) != idx.size or (self.state[idx] == 1).any() or self.read[idx].any():
            self.errors["cp.async races an in-flight copy or an unsynchronized read"] += 1
        self.state[idx] = 1
        self.open.append((idx, vals[~bad], tags[~bad]))

    def commit(self):
        self.groups.append(self.open); self.open = []

    def wait(self, n):   # cp.async.wait_group n: all but the newest n groups complete
        while len(self.groups) > n:
            for idx, vals, tags in self.groups.pop(0):
                self.v[idx] = vals; self.t[idx] = tags; self.state[idx] = 2

    def sync(self):
        self.state[self.state == 2] = 3; self.read[:] = False

    def ldm4(self, addr):
        """ldmatrix.sync.aligned.m8n8.x4.b16 for W warps: addr [W,32] byte addresses ->
        [W,32,4,2] values and tags: lane l holds row l/4, elements 2(l%4), +1 of matrix i (rows from
        lanes 8i..8i+7). Each matrix is one phase: its 8 rows must hit 8 distinct 16-byte columns."""
        W = addr.shape[0]
        out = np.zeros((W, 32, 4, 2), F16); tag = np.zeros((W, 32, 4, 2), np.int64)
        for i in range(4):
            rows = addr[:, 8 * i:8 * i + 8]
            bad = (rows % 16 != 0) | (rows < 0) | (rows + 16 > self.nbytes)
            self.errors["ldmatrix row not 16-byte aligned / out of smem"] += int(bad.sum())
            rows = np.clip(rows, 0, self.nbytes - 16)
            grp = np.sort((rows // 16) % 8, axis=1)   # 16-byte column of each 128-byte line
            self.phases += W
            self.conflicts += int((np.diff(grp, axis=1) == 0).any(axis=1).sum())
            idx = (rows // 2)[:, :, None] + np.arange(8)   # [W,8 rows,8 halves]
            if (self.state[idx] != 3).any():
                self.errors["ldmatrix reads unstaged / in-flight / unsynchronized smem"] += 1
            self.read[idx] = True
            M, Tg = self.v[idx], self.t[idx]
            out[:, :, i, 0] = M[:, gid, 2 * tig]; out[:, :, i, 1] = M[:, gid, 2 * tig + 1]
            tag[:, :, i, 0] = Tg[:, gid, 2 * tig]; tag[:, :, i, 1] = Tg[:, gid, 2 * tig + 1]
        return out, tag


# ---------------- kernel_act_f16 ----------------
def kernel_act_f16(x):
    """x [N,K] f32 -> xh [N,K] f16, inv_s [N] f32 (256 threads per token, warp_max + red[8])"""
    N, K = x.shape
    nst = -(-K // 256)
    pad = np.zeros((N, nst * 256), F32); pad[:, :K] = np.abs(x)
    part = np.fmax.reduce(pad.reshape(N, nst, 256), axis=1)   # thread tid: k = tid, tid + 256, ...
    w = part.reshape(N, 8, 32)
    for off in (16, 8, 4, 2, 1):
        w = np.fmax(w, w[:, :, lane ^ off])   # warp_max
    red = w[:, :, 0]
    amax = red[:, 0]
    for i in range(1, 8):
        amax = np.fmax(amax, red[:, i])
    sh = np.zeros(N, np.int64)
    pos = amax > 0
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.where(np.isfinite(amax), np.frexp(amax)[1].astype(np.int64) - 1, 127)   # ilogbf
    sh[pos] = np.clip(14 - e[pos], -120, 120)
    s = np.ldexp(F32(1), sh).astype(F32)
    with np.errstate(over="ignore", invalid="ignore"):
        xh = (x * s[:, None]).astype(F32).astype(F16)
    return xh, np.ldexp(F32(1), -sh).astype(F32)


# ---------------- kernel_dequant_f16 (dev7b.cuh unit_unpack, then unit_to_f16) ----------------
QT = {  # name: (unit bytes, units per block, gguf type)
    "Q4_0": (18, 1, GT.Q4_0), "Q4_1": (20, 1, GT.Q4_1), "Q5_0": (22, 1, GT.Q5_0), "Q5_1": (24, 1, GT.Q5_1),
    "Q8_0": (34, 1, GT.Q8_0), "Q4_K": (144, 8, GT.Q4_K), "Q5_K": (176, 8, GT.Q5_K), "Q6_K": (210, 8, GT.Q6_K),
    "F16": (64, 1, GT.F16)}


def row_size(wt, K):
    by, un, _ = QT[wt]
    return K // (32 * un) * by


class Mem:
    """device bytes at byte address base (alignment checks use base + offset)"""

    def __init__(self, b, base):
        self.b = b.astype(np.int64); self.base = base; self.misaligned = 0; self.oob = 0

    def u8(self, off):
        if (off < 0).any() or (off >= len(self.b)).any():
            self.oob += 1; off = np.clip(off, 0, len(self.b) - 1)
        return self.b[off]

    def u32(self, off, align):   # ld_u32_a2 (align 2) or *(const uint32_t *) (align 4)
        self.misaligned += int(((self.base + off) % align != 0).sum())
        return self.u8(off) | self.u8(off + 1) << 8 | self.u8(off + 2) << 16 | self.u8(off + 3) << 24

    def f16(self, off):   # ld_f16
        self.misaligned += int(((self.base + off) % 2 != 0).sum())
        return (self.u8(off) | self.u8(off + 1) << 8).astype(np.uint16).view(F16).astype(F32)


def vsub4(a, b):   # __vsub4: per-byte subtraction mod 256
    r = 0
    for k in range(4):
        r |= (((a >> 8 * k) & 0xFF) - ((b >> 8 * k) & 0xFF) & 0xFF) << 8 * k
    return r


def qh_bits4(qh, first):
    b = (qh >> first) & 0xF
    return ((b & 1) << 4) | ((b & 2) << 11) | ((b & 4) << 18) | ((b & 8) << 25)


def unit_unpack(wt, mem, row, u):
    """row [T] byte offset of the weight row, u [T] unit -> q [T,8] (4 levels per int), d, m, sc_lo, sc_hi"""
    T = len(u)
    m = np.zeros(T, F32); sc_lo = np.ones(T, np.int64); sc_hi = np.ones(T, np.int64)
    q = np.zeros((T, 8), np.int64)
    if wt in ("Q4_0", "Q4_1"):
        off = 2 if wt == "Q4_0" else 4
        b = row + u * QT[wt][0]
        d = mem.f16(b)
        if wt == "Q4_1": m = mem.f16(b + 2)
        for i in range(4):
            v = mem.u32(b + off + 4 * i, 2)
            lo, hi = v & 0x0F0F0F0F, (v >> 4) & 0x0F0F0F0F
            q[:, i] = vsub4(lo, 0x08080808) if wt == "Q4_0" else lo
            q[:, i + 4] = vsub4(hi, 0x08080808) if wt == "Q4_0" else hi
    elif wt in ("Q5_0", "Q5_1"):
        off = 2 if wt == "Q5_0" else 4
        b = row + u * QT[wt][0]
        d = mem.f16(b)
        if wt == "Q5_1": m = mem.f16(b + 2)
        qh = mem.u32(b + off, 2)
        for i in range(4):
            v = mem.u32(b + off + 4 + 4 * i, 2)
            lo = (v & 0x0F0F0F0F) | qh_bits4(qh, 4 * i)
            hi = ((v >> 4) & 0x0F0F0F0F) | qh_bits4(qh, 16 + 4 * i)
            q[:, i] = vsub4(lo, 0x10101010) if wt == "Q5_0" else lo
            q[:, i + 4] = vsub4(hi, 0x10101010) if wt == "Q5_0" else hi
    elif wt == "Q8_0":
        b = row + u * 34
        d = mem.f16(b)
        for i in range(8):
            q[:, i] = mem.u32(b + 2 + 4 * i, 2)
    elif wt in ("Q4_K", "Q5_K"):
        b = row + (u >> 3) * QT[wt][0]
        j = u & 7; c = j >> 1; shift = (j & 1) * 4
        s = b + 4   # k4_scale_min
        lo4 = j < 4
        sj, sj4 = mem.u8(s + j), mem.u8(s + j + 4)   # s[j], s[j + 4]
        sjm4 = mem.u8(s + np.where(lo4, j, j - 4))
        sc = np.where(lo4, sj & 63, (sj4 & 0xF) | ((sjm4 >> 6) << 4))
        mn = np.where(lo4, sj4 & 63, (sj4 >> 4) | ((sj >> 6) << 4))
        d = (mem.f16(b) * sc.astype(F32)).astype(F32)
        m = (mem.f16(b + 2) * mn.astype(F32)).astype(F32)
        qs = b + (16 if wt == "Q4_K" else 48) + 32 * c
        for i in range(8):
            v = (mem.u32(qs + 4 * i, 4) >> shift) & 0x0F0F0F0F
            if wt == "Q5_K":
                h = mem.u32(b + 16 + 4 * i, 4)
                v |= ((h >> j) & 0x01010101) << 4
            q[:, i] = v
    elif wt == "Q6_K":
        b = row + (u >> 3) * 210
        j = u & 7; n = j >> 2; r = j & 3
        ql = b + 64 * n + (r & 1) * 32
        qh = b + 128 + 32 * n
        lshift, hshift = (r >> 1) * 4, 2 * r
        sc = b + 192 + 8 * n + 2 * r
        d = mem.f16(b + 208)
        sc_lo = mem.u8(sc).astype(np.uint8).view(np.int8).astype(np.int64)
        sc_hi = mem.u8(sc + 1).astype(np.uint8).view(np.int8).astype(np.int64)
        for i in range(8):
            lv = (mem.u32(ql + 4 * i, 2) >> lshift) & 0x0F0F0F0F
            hv = ((mem.u32(qh + 4 * i, 2) >> hshift) & 0x03030303) << 4
            q[:, i] = vsub4(lv | hv, 0x20202020)
    return q, d, m, sc_lo, sc_hi


def unit_to_f16(wt, mem, row, u):
    """-> h [T,32] f16"""
    if wt == "F16":
        src = row + u * 64   # (const uint16_t *)row + u * 32
        mem.misaligned += int(((mem.base + src) % 2 != 0).sum())
        e2 = src[:, None] + 2 * np.arange(32)
        return (mem.u8(e2) | mem.u8(e2 + 1) << 8).astype(np.uint16).view(F16)
    q, d, m, sc_lo, sc_hi = unit_unpack(wt, mem, row, u)
    e = np.arange(32)
    qe = ((q[:, e >> 2] >> (8 * (e & 3))) & 0xFF).astype(np.uint8).view(np.int8).astype(np.int64)  # (int)(int8_t)
    d = d[:, None]; m = m[:, None]
    if wt in ("Q4_1", "Q5_1"): v = d * qe.astype(F32) + m
    elif wt in ("Q4_K", "Q5_K"): v = d * qe.astype(F32) - m
    elif wt == "Q6_K": v = d * (np.where(e < 16, sc_lo[:, None], sc_hi[:, None]) * qe).astype(F32)
    else: v = d * qe.astype(F32)
    return v.astype(F32).astype(F16)


def kernel_dequant_f16(wt, mem, wrow, Mc, nunits, out, out_base, grid):
    """grid-stride over t = unit of the chunk; out: f16 flat, writes counted in a side array"""
    total = Mc * nunits
    cnt = np.zeros(total, np.int64)
    stride = grid * 256
    g = np.arange(stride)
    misal = 0
    for it in range(-(-total // stride)):
        t = g + it * stride
        t = t[t < total]
        mm = t // nunits; u = t - mm * nunits
        h = unit_to_f16(wt, mem, mm * wrow, u)
        dst = out_base + t * 64   # uint4 *dst = out + t * 32 halves; 4 stores of 16 bytes
        misal += int((dst % 16 != 0).sum())
        out[t[:, None] * 32 + np.arange(32)] = h
        np.add.at(cnt, t, 1)
    return cnt, misal


def dequant_launch_grid(mc, K):   # launch_dequant
    b = (mc * (K // 32) + 255) // 256
    return b if b < 16384 else 16384


# ---------------- kernel_gemm_f16<BN, BK, ST, NW> ----------------
def swz(BK, row, c):   # half offset of (row, 16-byte chunk c) in a BK-half shared row
    return row * 32 + ((c ^ ((row >> 1) & 3)) << 3) if BK == 32 else row * 64 + ((c ^ (row & 7)) << 3)


def gemm_smem_bytes(bn, bk, st):   # G_SMEM
    return st * (G_BM + bn) * bk * 2


def kernel_gemm_f16(var, Wh, w_base, Xh, x_base, inv_s, bias, bias_off, Y, Ycnt, Yseq, y_off, ldy, Mc, N, K, grid, stats):
    """one launch of kernel_gemm_f16<var>: every block of grid (gx, gy), every thread; Wh / Xh flat f16
    operand buffers at byte addresses w_base / x_base, Y flat f32 with y_off = the launcher's y + m0,
    bias flat with bias_off = bias + m0 (or None). Yseq [len(Y), K/16]: the k16 steps each output
    accumulated, in order."""
    BN, BK, ST, NW = var
    CPR = BK // 8                    # 16-byte chunks per shared row
    RPP = NW * 32 // CPR             # rows one pass of the block stages
    LA, LB = G_BM // RPP, BN // RPP  # passes per stage: weights, tokens
    WNW = NW // 2                    # warps along the tokens
    WN = BN // WNW; NT = WN // 8; NP = NT // 2
    T = NW * 32
    tid = np.arange(T); ln = tid & 31; warp = tid >> 5
    wm, wn = warp // WNW, warp % WNW
    KT = K // BK
    KS = Yseq.shape[1]
    lr, lc = tid // CPR, tid % CPR
    smem_bytes = gemm_smem_bytes(BN, BK, ST)
    sA0, sB0 = 0, 2 * ST * G_BM * BK   # byte addresses (sB = gemm_sh + ST * G_BM * BK halves)
    L = np.arange(32)
    wmw, wnw = np.arange(NW)[:, None] // WNW, np.arange(NW)[:, None] % WNW   # per warp, [NW,1]
    arow = wmw * 64 + (L & 15); achk = L >> 4
    brow = wnw * WN + (L & 7) + ((L >> 4) << 3); bchk = (L >> 3) & 1
    g_, t_ = ln >> 2, ln & 3
    for by in range(grid[1]):
        for bx in range(grid[0]):
            n0, m0 = bx * BN, by * G_BM
            sm = Smem(smem_bytes)
            srcA = lr * K + lc * 8 + m0 * K   # element offsets into Wh / Xh
            srcB = lr * K + lc * 8 + n0 * K
            okA = np.zeros(T, np.int64); okB = np.zeros(T, np.int64)
            for i in range(LA): okA |= (m0 + lr + RPP * i < Mc).astype(np.int64) << i
            for i in range(LB): okB |= (n0 + lr + RPP * i < N).astype(np.int64) << i

            def fetch(buf, base, src, ok, lim):
                """cp.async.cg 16 bytes (src-size 16) or zero fill (src-size 0, reads nothing)"""
                bad = ok & (((base + 2 * src) % 16 != 0) | (src < 0) | (src + 8 > lim))
                sm.errors["cp.async src not 16-byte aligned / out of bounds"] += int(bad.sum())
                s = np.clip(src, 0, len(buf) - 8)[:, None] + np.arange(8)
                vals = np.where(ok[:, None], buf[s], F16(0)).astype(F16)
                return vals, np.where(ok[:, None], s % K, -1)   # operand rows are K halves long

            def load_stage(st, kt):
                k0 = kt * BK
                for i in range(LA):
                    ok = ((okA >> i) & 1) == 1
                    sm.cp16(sA0 + 2 * (st * G_BM * BK + swz(BK, lr + RPP * i, lc)),
                            *fetch(Wh, w_base, np.where(ok, srcA + RPP * i * K + k0, 0), ok, Mc * K))
                for i in range(LB):
                    ok = ((okB >> i) & 1) == 1
                    sm.cp16(sB0 + 2 * (st * BN * BK + swz(BK, lr + RPP * i, lc)),
                            *fetch(Xh, x_base, np.where(ok, srcB + RPP * i * K + k0, 0), ok, N * K))

            acc = np.zeros((4, NT, NW, 32, 4), F32)   # [mt][nt] x (warp, lane, i)
            seq = np.full((4, NT, NW, 32, 4, KS), -2, np.int64)
            nseq = 0   # every (mt, nt) runs one mma per k16 step
            for s in range(ST - 1):
                if s < KT: load_stage(s, s)
                sm.commit()
            for kt in range(KT):
                sm.wait(ST - 2)
                sm.sync()
                nk = kt + ST - 1
                if nk < KT: load_stage(nk % ST, nk)
                sm.commit()
                st = kt % ST
                a_base = sA0 + 2 * (st * G_BM * BK)
                b_base = sB0 + 2 * (st * BN * BK)
                for kk in range(BK // 16):
                    af = [sm.ldm4(a_base + 2 * swz(BK, arow + mt * 16, kk * 2 + achk)) for mt in range(4)]
                    bf = [sm.ldm4(b_base + 2 * swz(BK, brow + np_ * 16, kk * 2 + bchk)) for np_ in range(NP)]
                    for mt in range(4):
                        for nt in range(NT):
                            (bv, bt), (av, at) = bf[nt >> 1], af[mt]
                            c0, c1 = (nt & 1) * 2, (nt & 1) * 2 + 1
                            acc[mt, nt], step = mma(acc[mt, nt], av, bv[:, :, c0], bv[:, :, c1], at, bt[:, :, c0], bt[:, :, c1])
                            if nseq < KS: seq[mt, nt, ..., nseq] = step
                            else: stats["more mma steps than K/16"] += 1
                    nseq += 1
            sm.wait(0)
            # epilogue, every thread at once
            for nt in range(NT):
                for j in range(2):
                    n = n0 + wn * WN + nt * 8 + t_ * 2 + j
                    for mt in range(4):
                        for h in range(2):
                            m = m0 + wm * 64 + mt * 16 + g_ + h * 8
                            ok = (n < N) & (m < Mc)
                            v = (acc[mt, nt, warp[ok], ln[ok], h * 2 + j] * inv_s[n[ok]]).astype(F32)
                            if bias is not None: v = (v + bias[bias_off + m[ok]]).astype(F32)
                            idx = y_off + n[ok] * ldy + m[ok]
                            inb = (idx >= 0) & (idx < len(Y))
                            stats["y out of bounds"] += int((~inb).sum())
                            Y[idx[inb]] = v[inb]
                            np.add.at(Ycnt, idx[inb], 1)
                            Yseq[idx[inb]] = seq[mt, nt, warp[ok][inb], ln[ok][inb], h * 2 + j]
            for k, c in sm.errors.items():
                stats[k] += c
            stats["phases"] += sm.phases; stats["conflicts"] += sm.conflicts
            stats["st_phases"] += sm.st_phases; stats["st_conflicts"] += sm.st_conflicts


def chunk_rows(K, M, cb):   # chunk_rows: the chunk option, clamped to MI7E_GEMM_F16_CHUNK
    cb = cb if 0 < cb < CHUNK_DEFAULT else CHUNK_DEFAULT
    r = (cb // (K * 2)) // G_BM * G_BM
    if r < G_BM: r = G_BM
    return r if r < M else M


def tile_bn(gm, N, force):
    return force if force else (128 if gm * ((N + 127) // 128) >= 2 * SMS else 64)


def pick_variant(K, gm, N, bn_force=0, bk_force=0, nw_force=0):
    """the launcher's choice; the forces are gate_gemm_f16_opts' tile / depth / warps
    (0, or a valid value)"""
    bn = tile_bn(gm, N, bn_force)
    bk = 32 if K % 64 else (bk_force if bk_force else GEMM_F16_DEFAULT_BK)
    nw = nw_force if nw_force else GEMM_F16_DEFAULT_NW
    return K_GEMM_VARIANTS[(4 if bn == 128 else 0) + (2 if bk == 64 else 0) + (1 if nw == 4 else 0)]


STAT_KEYS = ("y out of bounds", "phases", "conflicts", "st_phases", "st_conflicts", "more mma steps than K/16",
             "cp.async dst not 16-byte aligned / out of smem", "cp.async src not 16-byte aligned / out of bounds",
             "cp.async races an in-flight copy or an unsynchronized read", "ldmatrix row not 16-byte aligned / out of smem",
             "ldmatrix reads unstaged / in-flight / unsynchronized smem", "dequant misaligned/oob", "dequant coverage")


def mi7e_gemm_f16(wt, wbytes, w_base, x, bias, K, M, N, chunk_bytes=0, bn_force=0, bk_force=0, nw_force=0):
    """the launcher: act_f16, then per chunk dequant_f16 (or the direct F16 operand) and gemm_f16.
    -> y flat [N*M] f32, write counts, k16 sequences [N*M, K/16], stats, launches"""
    stats = {k: 0 for k in STAT_KEYS}
    xh, inv_s = kernel_act_f16(x)
    Xh = xh.ravel()
    al = lambda b: (b + 255) & ~255
    wh_base = al(N * K * 2) + al(N * 4)   # workspace offset (256-byte aligned workspace at 0)
    wrow = row_size(wt, K)
    direct = wt == "F16" and w_base % 16 == 0
    rows = M if direct else chunk_rows(K, M, chunk_bytes or CHUNK_DEFAULT)
    wh = np.full(rows * K, np.nan, F16)
    Y = np.full(N * M, np.nan, F32); Ycnt = np.zeros(N * M, np.int64)
    Yseq = np.full((N * M, K // 16), -3, np.int64)
    launches = []
    for m0 in range(0, M, rows):
        mc = M - m0 if M - m0 < rows else rows
        wc_base = w_base + m0 * wrow
        mem = Mem(wbytes[m0 * wrow:], wc_base)
        if direct:
            op, op_base = wbytes[m0 * wrow:].view(F16), wc_base   # 16-byte aligned F16 weights as they are
        else:
            wh[:] = np.nan
            cnt, mis = kernel_dequant_f16(wt, mem, wrow, mc, K // 32, wh, wh_base, dequant_launch_grid(mc, K))
            stats["dequant misaligned/oob"] += mis + mem.misaligned + mem.oob
            stats["dequant coverage"] += int((cnt != 1).sum())
            op, op_base = wh, wh_base
        gm = (mc + G_BM - 1) // G_BM
        var = pick_variant(K, gm, N, bn_force, bk_force, nw_force)
        grid = ((N + var[0] - 1) // var[0], gm)
        launches.append((m0, mc, var, grid))
        kernel_gemm_f16(var, op, op_base, Xh, 0, inv_s, bias, m0, Y, Ycnt, Yseq, m0, M, mc, N, K, grid, stats)
    return Y, Ycnt, Yseq, stats, launches, xh, inv_s

# ---------------- random weights ----------------
def rand_f16_bytes(n, lo=-3, hi=0):
    v = (rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(lo, hi, n)).astype(F16)
    return v.view(np.uint8).reshape(n, 2)


def rand_weights(wt, M, K):
    """random blocks of a row-major [M, K] tensor with finite, moderate f16 scales"""
    if wt == "F16":
        return rng.uniform(-1, 1, M * K).astype(F16).view(np.uint8).copy()
    by, un, _ = QT[wt]
    nb = M * K // (32 * un)
    b = rng.integers(0, 256, (nb, by), dtype=np.uint8)
    if wt == "Q6_K":
        b[:, 208:210] = rand_f16_bytes(nb)
    else:
        b[:, 0:2] = rand_f16_bytes(nb)
        if wt in ("Q4_1", "Q5_1", "Q4_K", "Q5_K"): b[:, 2:4] = rand_f16_bytes(nb)
    tiny = rng.random(nb) < 0.1   # some blocks with f16-subnormal results
    if wt == "Q6_K": b[tiny, 208:210] = rand_f16_bytes(int(tiny.sum()), -8, -6)
    else: b[tiny, 0:2] = rand_f16_bytes(int(tiny.sum()), -8, -6)
    return b.ravel().copy()


def gguf_ref(wt, wbytes, M, K):   # independent decode -> float32 [M, K]
    if wt == "F16":
        return wbytes.view(F16).astype(F32).reshape(M, K)
    return gguf_dequantize(wbytes.reshape(M, row_size(wt, K)), QT[wt][2]).astype(F32).reshape(M, K)


# ================= 1. kernel_act_f16 =================
print("-- kernel_act_f16")
K = 300
x = rng.standard_normal((9, K)).astype(F32)
x[1] *= F32(1e5 / np.abs(x[1]).max())                   # max exactly 1e5
x[2] *= F32(1e-6 / np.abs(x[2]).max())                  # max 1e-6
x[3] = 0                                                # all-zero row
x[4] = (rng.standard_normal(K) * 10.0 ** rng.uniform(-8, 4, K)).astype(F32)   # wide dynamic range
x[5] *= F32(3e38 / np.abs(x[5]).max())                  # near f32 max
x[6] = 0; x[6, 7] = F32(-65504 * 4)                     # one large element, rest zero
x[7, K - 1] = F32(1e3)                                  # max in the last element (tail of the thread loop)
x[8] *= F32(1e-40 / np.abs(x[8]).max())                 # f32-subnormal max: shift clamped to 120 (no check of precision)
xh, inv_s = kernel_act_f16(x)
sh_ref = np.zeros(9, np.int64)
for n in range(9):
    amax = float(np.max(np.abs(x[n].astype(np.float64))))
    if amax > 0:
        sh_ref[n] = min(120, max(-120, 14 - (math.frexp(amax)[1] - 1)))
want_inv = np.array([2.0 ** -s for s in sh_ref])
check("act_f16: inv_s = 2^-(14 - ilogb(max|x|)) per token, 1 for the zero row",
      (inv_s.astype(np.float64) == want_inv).all(), first_bad(inv_s != want_inv, inv_s, want_inv))
want_xh = (x.astype(np.float64) * 2.0 ** sh_ref[:, None]).astype(F16)   # one rounding: exact product
check("act_f16: xh = f16(x * 2^shift) (bit-exact)", (xh == want_xh).all(), first_bad(xh != want_xh, xh, want_xh))
check("act_f16: no f16 overflow (every xh finite, row with max 1e5 and 3e38 included)", np.isfinite(xh).all(),
      first_bad(~np.isfinite(xh), xh, want_xh))
mx = np.abs(xh.astype(np.float64)).max(axis=1)
nz = np.abs(x).max(axis=1) > 0
unclamped = np.abs(sh_ref) < 120
sel = nz & unclamped
check("act_f16: largest |xh| of every non-zero, unclamped token in [2^14, 2^15]", ((mx[sel] >= 2 ** 14) & (mx[sel] <= 2 ** 15)).all(),
      [(int(i), mx[i], "[16384, 32768]") for i in np.flatnonzero(sel & ((mx < 2 ** 14) | (mx > 2 ** 15)))])
back = xh.astype(np.float64) * inv_s[:, None].astype(np.float64)
xa = np.abs(x.astype(np.float64))
normal = (xa >= np.abs(x).max(axis=1, keepdims=True) * 2.0 ** -27) & unclamped[:, None]   # x*s f16-normal
relerr = np.where(normal, np.abs(back - x) / np.where(xa > 0, xa, 1), 0)
check("act_f16: |xh*inv_s - x| <= 2^-11 |x| wherever x*s is f16-normal (1e-6 row keeps its precision)",
      (relerr <= 2.0 ** -11).all(), first_bad(relerr > 2.0 ** -11, back, x))
check("act_f16: zero row -> xh 0, inv_s 1", (xh[3] == 0).all() and inv_s[3] == 1)

# ================= 2. kernel_dequant_f16 =================
print("-- kernel_dequant_f16 vs gguf.quants.dequantize")
for wt in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "F16"):
    Kd = 512 if QT[wt][1] == 8 else 256
    Md = 37 if QT[wt][1] == 8 else 70
    wb = rand_weights(wt, Md, Kd)
    want = gguf_ref(wt, wb, Md, Kd).astype(F16)
    for grid in (None, 1):   # the launcher's grid, and one block (several grid-stride iterations)
        g = dequant_launch_grid(Md, Kd) if grid is None else grid
        out = np.full(Md * Kd, np.nan, F16)
        mem = Mem(wb, 256)
        cnt, mis = kernel_dequant_f16(wt, mem, row_size(wt, Kd), Md, Kd // 32, out, 256, g)
        got = out.reshape(Md, Kd)
        ulp = np.spacing(np.abs(want)).astype(np.float64)
        bad = ~(np.abs(got.astype(np.float64) - want.astype(np.float64)) <= ulp)
        ok = not bad.any() and (cnt == 1).all() and mis + mem.misaligned + mem.oob == 0
        exact = int((got == want).sum())
        check(f"dequant_f16 {wt:4s} K {Kd} M {Md} grid {g:3d}: f16 = f16(gguf) within 1 ulp ({exact}/{got.size} "
              f"bit-exact), every unit once, loads aligned", ok, first_bad(bad, got, want))


# ================= 3. kernel_gemm_f16: the variant table against the source =================
print("-- kernel_gemm_f16 variants: the tables in gemm_f16.cu (library) and gates/7e/gemm_f16_variants.cu (gate), "
      "the defaults in gemm_f16_kernels.cuh")
ENT_RE = (r"\{\s*kernel_gemm_f16<\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+)\s*>\s*,\s*(\d+)\s*,\s*G_SMEM\(\s*(\d+),\s*(\d+),"
          r"\s*(\d+)\s*\)\s*\}|\{\s*NULL\s*,\s*\d+\s*,\s*0\s*\}")


def table(path):
    """the gemm_variants initializer of a file, entry by entry (None: an entry without a kernel)"""
    src = open(path).read()
    tab = re.search(r"gemm_variants\s+\w+\s*=\s*\{\{(.*?)\}\s*,\s*false\s*\}\s*;", src, re.S)
    ents = re.finditer(ENT_RE, tab.group(1)) if tab else []
    return [tuple(int(v) for v in e.groups()) if e.group(1) else None for e in ents]


if all(os.path.exists(f) for f in (SRC, LIB_TAB, GATE_TAB)):
    want = [v + (v[3], v[0], v[1], v[2]) for v in K_GEMM_VARIANTS]
    got = table(GATE_TAB)
    check(f"the gate's table = the emulated one (BN, BK, ST, NW), nw, G_SMEM(BN, BK, ST) by index "
          f"(bn == 128) * 4 + (bk == 64) * 2 + (nw == 4) ({len(got)} entries parsed)", got == want,
          [(i, g, w) for i, (g, w) in enumerate(zip(got + [None] * 8, want)) if g != w])
    got = table(LIB_TAB)
    want_lib = [w if w[3] == GEMM_F16_DEFAULT_NW else None for w in want]
    check(f"the library's table holds exactly the {GEMM_F16_DEFAULT_NW}-warp variants at the same indices "
          f"({len(got)} entries parsed)", got == want_lib,
          [(i, g, w) for i, (g, w) in enumerate(zip(got + [None] * 8, want_lib)) if g != w])
    src = open(SRC).read()
    dflt = {k: re.search(rf"#define {k} (\d+)", src) for k in ("GEMM_F16_DEFAULT_BK", "GEMM_F16_DEFAULT_NW", "G_BM", "G_BK")}
    gotd = {k: int(m.group(1)) if m else None for k, m in dflt.items()}
    wantd = {"GEMM_F16_DEFAULT_BK": GEMM_F16_DEFAULT_BK, "GEMM_F16_DEFAULT_NW": GEMM_F16_DEFAULT_NW, "G_BM": G_BM, "G_BK": G_BK}
    check(f"gemm_f16_kernels.cuh defines {gotd} = the emulation's", gotd == wantd)
else:
    skipped += 3
    print(f"skip  {SRC}, {LIB_TAB} or {GATE_TAB} not found: the tables and defaults are not compared with the source")
for var in K_GEMM_VARIANTS:
    BN, BK, ST, NW = var
    sb = gemm_smem_bytes(BN, BK, ST)
    # __launch_bounds__(NW * 32, 2): two blocks per SM must fit 228 KB (1 KB reserved per block), one <= 227 KB
    check(f"variant {var}: {sb // 1024} KB shared per block, two blocks per SM fit (2 x (smem + 1 KB) <= 228 KB)",
          sb <= 227 * 1024 and 2 * (sb + 1024) <= 228 * 1024)


# ================= 4. kernel_gemm_f16 through the launcher =================
def reference(wt, wb, x, bias, K, M, N):
    """f64 product of the f16 operands (independent of the emulated kernels), its error bound, and W.x"""
    Wd = gguf_ref(wt, wb, M, K).astype(np.float64)
    Wh16 = Wd.astype(F16).astype(np.float64)
    sh_ref = np.array([min(120, max(-120, 14 - (math.frexp(float(np.abs(r).max()))[1] - 1))) for r in x.astype(np.float64)])
    Xh16 = (x.astype(np.float64) * 2.0 ** sh_ref[:, None]).astype(F16).astype(np.float64)
    isr = 2.0 ** -sh_ref[:, None]
    b64 = bias.astype(np.float64)[None, :] if bias is not None else 0.0
    ref = Xh16 @ Wh16.T * isr + b64
    mag = np.abs(Xh16) @ np.abs(Wh16).T * isr + np.abs(b64)
    tol = (K / 16 + 2) * 2.0 ** -24 * mag + 1e-30   # one f32 rounding per mma, epilogue
    return ref, tol, x.astype(np.float64) @ Wd.T + b64


def make_case(wt, K, M, N, has_bias):
    wb = rand_weights(wt, M, K)
    x = rng.standard_normal((N, K)).astype(F32)
    if N > 2: x[1] *= F32(1e4); x[2] *= F32(1e-5)   # tokens of very different scale
    bias = rng.standard_normal(M).astype(F32) if has_bias else None
    return wb, x, bias


def gemm_checks(out, wt, K, M, N, ref, tol, exact, want_bk, want_nw):
    """-> [(name, ok, bad)] for one launcher call"""
    Y, Ycnt, Yseq, stats, launches = out[:5]
    y = Y.reshape(N, M).astype(np.float64)
    err = np.abs(y - ref)
    bad = ~(err <= tol)
    nmse = ((y - exact) ** 2).sum() / (exact ** 2).sum()
    cov_bad = Ycnt != 1
    seq_bad = (Yseq != np.arange(K // 16)).any(axis=1)
    hz = {k: v for k, v in stats.items() if k not in ("phases", "conflicts", "st_phases", "st_conflicts") and v}
    vars_ = sorted({l[2] for l in launches})
    vok = all(K % v[1] == 0 and v[1] == want_bk and v[3] == want_nw and v[2] == (4 if v[1] == 32 else 3) for v in vars_)
    return [
        (f"variant {vars_} (want BK {want_bk}, NW {want_nw}; K % BK == 0, ST {{32: 4, 64: 3}})", vok, None),
        (f"y vs f64 product of the f16 operands (max err/tol {np.max(err / tol):.3g})", not bad.any(), first_bad(bad, y, ref)),
        (f"NMSE vs exact W.x {nmse:.3g} <= 1e-6 (MI7E_GEMM_F16_NMSE)", nmse <= 1e-6, None),
        ("every y element written exactly once, none outside y", not cov_bad.any() and stats["y out of bounds"] == 0,
         first_bad(cov_bad, Ycnt, np.ones_like(Ycnt))),
        (f"every y element accumulated k16 steps 0..{K // 16 - 1} once each, in order",
         not seq_bad.any() and not stats["more mma steps than K/16"],
         [(int(i), Yseq[i].tolist(), list(range(K // 16))) for i in np.flatnonzero(seq_bad)[:5]]),
        (f"cp.async 16-byte aligned src/dst, no smem race, no unstaged read, dequant ok {hz if hz else ''}", not hz, None),
        (f"{stats['phases']} ldmatrix phases / {stats['st_phases']} cp.async store phases, "
         f"{stats['conflicts']} / {stats['st_conflicts']} with a bank conflict",
         stats["conflicts"] == 0 and stats["st_conflicts"] == 0 and stats["phases"] > 0 and stats["st_phases"] > 0, None)]


print("-- kernel_gemm_f16 (every block, every thread) through mi7e_gemm_f16's chunk loop")
cases = [  # wt, K, M, N, bias, chunk bytes, forced (bn, bk, nw), weight base address, wanted (bk, nw)
    ("Q4_0", 96, 130, 70, True, 0, (64, 64, 0), 256, (32, 8)),        # K % 64 != 0: BK 64 asked, 32 taken
    ("Q4_0", 96, 130, 70, True, 0, (128, 0, 4), 256, (32, 4)),
    ("Q4_K", 256, 300, 70, True, 128 * 256 * 2, (128, 64, 8), 256, (64, 8)),   # 3 chunks: 128, 128, 44 rows; KT 4 wraps 3 stages
    ("Q4_K", 256, 300, 70, False, 256 * 256 * 2, (64, 32, 4), 256, (32, 4)),   # 2 chunks: 256, 44 rows; KT 8 wraps 4 stages
    ("Q6_K", 256, 64, 9, False, 0, (0, 0, 0), 256, (GEMM_F16_DEFAULT_BK, GEMM_F16_DEFAULT_NW)),   # M, N below one tile
    ("F16", 160, 200, 130, True, 0, (0, 0, 0), 256, (32, GEMM_F16_DEFAULT_NW)),     # direct operand, KT 5 wraps the ring
    ("F16", 32, 129, 1, True, 128 * 32 * 2, (128, 0, 4), 258, (32, 4)),        # misaligned: dequant copy, KT 1, 2 chunks
    ("Q5_K", 256, 128, 128, True, 0, (128, 64, 4), 256, (64, 4)),              # exact tiles
    ("Q8_0", 64, 17, 3, True, 0, (64, 64, 8), 256, (64, 8)),                   # KT 1 < stages - 1
    ("Q8_0", 64, 17, 3, True, 0, (64, 32, 4), 256, (32, 4)),                   # KT 2 < stages - 1
]
for wt, K, M, N, has_bias, cb, (bnf, bkf, nwf), wbase, (wbk, wnw) in cases:
    wb, x, bias = make_case(wt, K, M, N, has_bias)
    out = mi7e_gemm_f16(wt, wb, wbase, x, bias, K, M, N, cb, bnf, bkf, nwf)
    ref, tol, exact = reference(wt, wb, x, bias, K, M, N)
    desc = f"{wt:4s} K {K:3d} M {M:3d} N {N:3d} chunks {[(l[1], l[2], l[3]) for l in out[4]]}"
    for name, ok, bad in gemm_checks(out, wt, K, M, N, ref, tol, exact, wbk, wnw):
        check(f"gemm_f16 {desc}: {name}", ok, bad)

# ================= 5. every variant on the same inputs: same k16 sequence, same bits =================
print("-- every (BN, BK, NW) forced on the same inputs: all checks, then bitwise equality across variants")
for wt, K, M, N, cb in (("Q4_0", 64, 150, 75, 0), ("F16", 96, 150, 75, 0), ("Q8_0", 192, 300, 75, 128 * 192 * 2),
                        ("Q5_0", 320, 150, 75, 0)):
    wb, x, bias = make_case(wt, K, M, N, True)
    ref, tol, exact = reference(wt, wb, x, bias, K, M, N)
    runs = []
    for bnf in (64, 128):
        for bkf in (32, 64):
            for nwf in (8, 4):
                out = mi7e_gemm_f16(wt, wb, 256, x, bias, K, M, N, cb, bnf, bkf, nwf)
                wbk = 32 if K % 64 else bkf
                res = gemm_checks(out, wt, K, M, N, ref, tol, exact, wbk, nwf)
                fails = [r for r in res if not r[1]]
                desc = (f"gemm_f16 {wt:4s} K {K:3d} M {M} N {N} forced ({bnf}, {bkf}, {nwf}) -> "
                        f"{sorted({l[2] for l in out[4]})} x {len(out[4])} chunk(s)")
                check(f"{desc}: variant, value, NMSE, coverage, k16 order, hazards, conflicts"
                      + (f" -- {fails[0][0]}" if fails else ""), not fails, fails[0][2] if fails else None)
                runs.append(((bnf, bkf, nwf), out))
    (v0, o0), rest = runs[0], runs[1:]
    w = ~np.isnan(o0[0])
    for v, o in rest:
        same_seq = (o[2] == o0[2]).all(axis=1)
        same_bits = o[0].view(np.uint32) == o0[0].view(np.uint32)
        check(f"gemm_f16 {wt:4s} K {K:3d}: forced {v} vs {v0}: every output the same k16 sequence, y bit-identical",
              same_seq.all() and same_bits.all() and w.all(),
              first_bad(~same_bits, o[0], o0[0]) or [(int(i), o[2][i].tolist(), o0[2][i].tolist())
                                                    for i in np.flatnonzero(~same_seq)[:5]])

# ================= 6. the launcher's tile choice (documented, not checked) =================
print(f"-- tile choice: bn = 128 when gm * ceil(N/128) >= 2 * SMs ({SMS} SMs), else 64; BK 64 (3 stages) when K % 64 == 0")
for M, N in ((4096, 512), (11008, 512), (4096, 2048), (896, 128), (151936, 64)):
    gm = (M + G_BM - 1) // G_BM
    print(f"   M {M:6d} N {N:5d}: gm {gm:4d}, 128-token blocks {gm * ((N + 127) // 128):5d} -> variant {pick_variant(4096, gm, N)}")

print(f"runtime {time.time() - t_start:.1f} s")
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
sys.exit(1 if failed else 0)

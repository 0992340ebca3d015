# Host emulation (NumPy) of kernel_matvec_q4k in phase7e_perf/matvec_q4k_kernel.cuh, line by line:
# activation staging into the permuted shared layout, the lane map (octet q of the warp owns
# super-block it*4U + 4g + q, lane t = lane & 7 loads 16 bytes of its quants), the half-dot swap
# with lane t^1, the per-unit float expression, the per-lane (it, g) accumulation, the xor
# butterfly and the grid-stride row cover. Checked against a direct NumPy decode of the GGUF Q4_K
# blocks: every unit computed exactly once and bit-identical to the reference's unit value, row
# sums within float rounding, every row written once, no 16-byte chunk outside
# [floor16(tensor), tensor end). The QX form (quant_act_shared: x quantized in the kernel) is
# emu_matvec_q4k_qx.py; shared pieces in matvec_q4k_emu_lib.py. CPU only.
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from matvec_q4k_emu_lib import (WARPS, Checks, HOST_FP16, HOST_INTRINSICS, act_perm, host_tools, make_act,  # noqa: E402
                                make_q4k, rng, stage_act)

C = Checks()
check = C.check


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


# ---------------- emulation helpers (32-bit words, int32 dp4a) ----------------
M32 = np.uint64(0xFFFFFFFF)


def bytes_s8(w):  # uint64 word [...] -> int64 [..., 4] signed bytes
    b = (w[..., None] >> np.array([0, 8, 16, 24], np.uint64)) & np.uint64(0xFF)
    b = b.astype(np.int64)
    return np.where(b >= 128, b - 256, b)


def dp4a(a, b, c):
    return c + (bytes_s8(a) * bytes_s8(b)).sum(axis=-1)


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

def unit_value(d8, wd, wm, isum, bsw):
    lo = (bsw & np.uint64(0xFFFF)).astype(np.int64)
    hi = (bsw >> np.uint64(16)).astype(np.int64)
    bsum = np.where(lo >= 32768, lo - 65536, lo) + np.where(hi >= 32768, hi - 65536, hi)
    return d8 * (wd * isum.astype(np.float32) - wm * bsum.astype(np.float32))


def half(bits):
    return bits.astype(np.uint16).view(np.float16).astype(np.float32)


def shfl_xor(v, m):
    return v[:, np.arange(32) ^ m]


def lane_values(mem, rowaddr, s, on, t, sq, sd, sbs):
    """one group of one weight: loads at the lane's addresses, then the lane's unit value;
    returns value [M,32], unit index [M,32]"""
    sc = np.where(on, s, 0)
    aq = lambda v: sq[sc * 16 + act_perm(v)]  # [M,32,4]
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
    recv = half_swap(np.where(h == 1, pa, pb))
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


def half_swap(v):
    """__shfl_xor_sync(.., 1): each lane receives its partner t^1's half dot"""
    return shfl_xor(v, 1)


def warp_sum(v):
    for off in (16, 8, 4, 2, 1):
        v = (v + shfl_xor(v, off)).astype(np.float32)
    return v


def emulate(U, mems, nsb, M, sq, sd, sbs, bias):
    """kernel_matvec_q4k for every row at once (a row's result does not depend on which warp
    runs it); returns per-weight row sums [NS][M], output y, and the unit coverage"""
    NS = len(mems)
    wrow = nsb * 144
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
                v, j = lane_values(mems[k], mems[k].base + rows * wrow, s, on, t, sq, sd, sbs)
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


def run_case(K, M, fused, off):
    nsb = K // 256
    U = 2 if fused else 4   # the kernel's U (kernel_matvec_q4k)
    name = f"q4k_K{K}_M{M}{'_fused' if fused else ''}_off{off}_U{U}"
    raw, d8, qs, bs = make_act(nsb)
    sq, sd, sbs = stage_act(raw, nsb)
    # staging: the staged layout read back through act_perm equals the blocks
    ok = np.array_equal(sd, d8)
    for v in range(16):
        ok &= np.array_equal(sq[np.arange(nsb) * 16 + act_perm(v)].astype(np.uint32).view(np.int8).reshape(nsb, 16),
                             qs[:, 16 * v:16 * v + 16])
    ok &= np.array_equal(sbs.astype(np.uint32).view(np.int16).reshape(nsb, 16), bs)
    check(name + " stage", ok, "staged activation differs from the Q8_K blocks")
    mems, refs = [], []
    for _ in range(2 if fused else 1):
        w = make_q4k(M, nsb)
        mem = Mem(w.reshape(-1), 256 + off)
        mem.base = 256 + off
        mems.append(mem)
        refs.append(ref_units_q4k(w, d8, qs, bs))
    bias = None if fused else rng.uniform(-0.5, 0.5, M).astype(np.float32)
    sums, y, seen, got = emulate(U, mems, nsb, M, sq, sd, sbs, bias)
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
    """the checks can fail: a lane that keeps its own half dot instead of its partner's must be caught"""
    global half_swap
    good = half_swap
    half_swap = lambda v: v
    saved = C.save()
    run_case(256, 7, False, 0)
    caught = C.failed > saved[1]
    C.restore(saved)
    half_swap = good
    return caught


# ---------------- the kernel's own lane code, compiled for the host ----------------
# phase7e_perf/matvec_q4k_kernel.cuh up to its kernel (load_q4k, value_q4k, stage_act) built
# with g++ against stub intrinsics (a two-pass __shfl_xor_sync: pass 1 records every lane's
# operand, pass 2 reads the partner's), driven through the kernel's loop by a small C++ main;
# its unit values must equal the reference's and its row sums the emulation's, bit for bit.
# Skipped (not passed) without g++ or the CUDA headers (vector_types.h).
HOST_RT = r"""/* host stub for the matvec_q4k host harness: the device intrinsics its lane code uses */
#pragma once
#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
struct hdim { unsigned x, y, z; };
extern hdim threadIdx, blockDim, blockIdx, gridDim;
extern int g_pass, g_lane, g_sent[32];
@INTRINSICS@
/* two-pass shuffle: pass 1 records each lane's operand, pass 2 reads the partner's */
static inline int __shfl_xor_sync(unsigned, int v, int m) {
    if (g_pass == 1) { g_sent[g_lane] = v; return 0; }
    return g_sent[g_lane ^ m];
}
static inline float __shfl_xor_sync(unsigned, float v, int m) { (void)m; return v; }   /* unused by the lane code */
static inline void __syncthreads(void) {}
""".replace("@INTRINSICS@\n", HOST_INTRINSICS)
HOST_MAIN = r"""/* host harness: runs the lane code of phase7e_perf/matvec_q4k_kernel.cuh (load_q4k, value_q4k,
 * stage_act, compiled for the host) through the kernel's loop; writes units and row sums. */
#include "dev_only.inc"
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include <algorithm>
hdim threadIdx, blockDim, blockIdx, gridDim;
int g_pass, g_lane, g_sent[32];

static void run(const uint8_t *W, int64_t M, int nsb, int U, const uint8_t *A, float *units, float *sums) {
    std::vector<uint4> smem((size_t)nsb * 292 / 16 + 2), other(smem.size());
    uint4 *sq = smem.data();
    float *sd = (float *)(sq + (size_t)nsb * 16);
    uint32_t *sbs = (uint32_t *)(sd + nsb);
    blockDim.x = 256;
    for (unsigned th = 0; th < 256; th++) { threadIdx.x = th; stage_act<4>(A, nsb, sq, sd, sbs); }
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
            if (variant & 1) stage_act<1>(src, nsb, oq, od, ob);
            else stage_act<2>(src, nsb, oq, od, ob);
        }
        if (memcmp(oq, sq, (size_t)nsb * 292)) { fprintf(stderr, "staging variant %d differs\n", variant); exit(5); }
    }
    const size_t wrow = (size_t)nsb * 144;
    const int nit = (nsb + 4 * U - 1) / (4 * U);
    for (int64_t row = 0; row < M; row++) {
        float acc[32] = {0};
        for (int it = 0; it < nit; it++)
            for (int g = 0; g < U; g++) {
                raw_q4k r[32];
                float v[32];
                for (int pass = 1; pass <= 2; pass++) {
                    g_pass = pass;
                    for (int lane = 0; lane < 32; lane++) {
                        g_lane = lane;
                        const int q = lane >> 3, t = lane & 7, s = it * 4 * U + 4 * g + q;
                        if (pass == 1) {
                            if (s < nsb) load_q4k(r[lane], W + (size_t)row * wrow + (size_t)s * 144, t);
                            else zero_q4k(r[lane]);
                        }
                        v[lane] = value_q4k(r[lane], sq, sd, sbs, s < nsb ? s : 0, t);
                    }
                }
                for (int lane = 0; lane < 32; lane++) {
                    const int q = lane >> 3, t = lane & 7, s = it * 4 * U + 4 * g + q;
                    if (s >= nsb) continue;
                    acc[lane] += v[lane];
                    units[((size_t)row * nsb + s) * 8 + t] = v[lane];
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
    /* args: K M U off wfile afile outfile */
    if (argc != 8) return 2;
    const int U = atoi(argv[3]);
    const int64_t K = atoll(argv[1]), M = atoll(argv[2]);
    const size_t off = (size_t)atoll(argv[4]);
    const int nsb = (int)(K / 256);
    const size_t wbytes = (size_t)M * nsb * 144;
    uint8_t *buf = (uint8_t *)aligned_alloc(256, (wbytes + off + 256 + 255) / 256 * 256);
    FILE *f = fopen(argv[5], "rb");
    if (!f || fread(buf + off, 1, wbytes, f) != wbytes) return 3;
    fclose(f);
    std::vector<uint8_t> A((size_t)nsb * 292);
    f = fopen(argv[6], "rb");
    if (!f || fread(A.data(), 1, A.size(), f) != A.size()) return 4;
    fclose(f);
    std::vector<float> units((size_t)M * nsb * 8, __builtin_nanf("")), sums(M);
    run(buf + off, M, nsb, U, A.data(), units.data(), sums.data());
    f = fopen(argv[7], "wb");
    fwrite(units.data(), 4, units.size(), f);
    fwrite(sums.data(), 4, sums.size(), f);
    fclose(f);
    free(buf);
    return 0;
}
"""

def host_harness():
    root, cxx, cuda_inc = host_tools()
    if not cxx or not cuda_inc:
        C.skip("host_harness: no g++ or CUDA headers")
        return
    src = open(os.path.join(root, "phase7e_perf", "matvec_q4k_kernel.cuh")).read()
    marker = "/* ---------------- kernel ----------------"
    if marker not in src:
        check("host_harness source", False, "matvec_q4k_kernel.cuh lost its kernel marker: update emu_matvec_q4k.py")
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "fake"))
        open(os.path.join(tmp, "fake", "cuda_fp16.h"), "w").write(HOST_FP16)
        open(os.path.join(tmp, "fake", "cuda_runtime.h"), "w").write(HOST_RT)
        open(os.path.join(tmp, "dev_only.inc"), "w").write(src[:src.index(marker)] + "\n#endif\n")   # the header guard
        open(os.path.join(tmp, "host.cpp"), "w").write(HOST_MAIN)
        exe = os.path.join(tmp, "host")
        r = subprocess.run([cxx, "-std=c++17", "-O1", "-w", "-I" + os.path.join(tmp, "fake"), "-I" + tmp, "-I" + root,
                            "-I" + cuda_inc[0], "-o", exe, os.path.join(tmp, "host.cpp")], capture_output=True, text=True)
        if r.returncode != 0:
            check("host_harness build", False, r.stderr.strip().splitlines()[:3])
            return
        hcases = [(256, 7, 0), (3584, 33, 0), (18944, 9, 0)]
        for K, M, off in hcases:
            for U in (4, 2):   # unfused, fused
                name = f"host_q4k_K{K}_M{M}_U{U}_off{off}"
                nsb = K // 256
                raw, d8, qs, bs = make_act(nsb)
                w = make_q4k(M, nsb)
                ref = ref_units_q4k(w, d8, qs, bs).astype(np.float32)
                wf, af, of = (os.path.join(tmp, x) for x in ("w.bin", "a.bin", "o.bin"))
                w.reshape(-1).tofile(wf)
                raw.tofile(af)
                r = subprocess.run([exe, str(K), str(M), str(U), str(off), wf, af, of], capture_output=True, text=True)
                if r.returncode != 0:
                    check(name, False, f"harness exit {r.returncode}: {r.stderr.strip()}")
                    continue
                out = np.fromfile(of, np.float32)
                units, sums = out[:M * nsb * 8].reshape(M, nsb, 8), out[M * nsb * 8:]
                sq, sd, sbs = stage_act(raw, nsb)
                mem = Mem(w.reshape(-1), 256 + off)
                mem.base = 256 + off
                esums = emulate(U, [mem], nsb, M, sq, sd, sbs, None)[0][0].astype(np.float32)
                ue = units.view(np.uint32) != ref.view(np.uint32)
                if ue.any():
                    i = tuple(np.argwhere(ue)[0])
                    check(name + " units", False, f"unit (row, sb, j) {i} got {units[i]!r} want {ref[i]!r}")
                else:
                    check(name + " units", True)
                se = sums.view(np.uint32) != esums.view(np.uint32)
                i = int(np.argmax(se)) if se.any() else 0
                check(name + " rowsum", not se.any(), f"row {i} got {sums[i]!r} want (emulation) {esums[i]!r}")


cases = []
for K in (256, 3584, 18944):
    for M in (1, 7, 512, 1000):
        cases.append((K, M, False, 0))
for K, M in ((3584, 512), (256, 7), (18944, 7)):
    cases.append((K, M, True, 0))
print("emulating negative control ...", flush=True)
with contextlib.redirect_stdout(io.StringIO()):
    caught = negative_control()
check("negative_control_half_swap", caught, "a broken half-dot swap went unnoticed")
for c in cases:
    run_case(*c)
host_harness()
sys.exit(C.report())

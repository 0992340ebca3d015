# Host emulation (NumPy) of the QX form of phase7e_perf/matvec_q4k_kernel.cuh: quant_act_shared,
# kernel_matvec_q4k's in-kernel quantization of x into its shared Q8_K row (quant_q8_k_warp,
# phase7b_ops/quant_act.cuh), against 7b's kernel_quant_q8_k bytes and a direct whole-block formula;
# then the real quant_act_shared and kernel_quant_q8_k sources compiled with g++ on the host. The
# plain form is emu_matvec_q4k.py; shared pieces (stage_act's layout, the counter) in
# matvec_q4k_emu_lib.py. CPU only.
import os
import subprocess
import sys
import tempfile
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from matvec_q4k_emu_lib import AK, WARPS, Checks, HOST_FP16, HOST_INTRINSICS, act_perm, host_tools, rng, stage_act  # noqa: E402

C = Checks()
check = C.check


# ---------------- the activation quantized inside the kernel (quant_act_shared) ----------------
# 7b's kernel_quant_q8_k and the QX kernel's quant_act_shared both call quant_q8_k_warp
# (phase7b_ops/quant_act.cuh) with the same lane map (lane l: elements 8l .. 8l+7 of a super-block);
# they differ in which warp takes which super-block and where the bytes go. Emulated here:
# quant_q8_k_warp lane by lane (float32, the xor-butterfly max, fminf/fmaxf's NaN rule),
# kernel_quant_q8_k's stores into the 292-byte blocks, checked against a direct whole-block formula
# (quant_k.c's convention); then quant_act_shared's batches, loads and stores into the shared layout,
# required byte-equal to stage_act of the 7b blocks, every shared byte written once, every load
# 16-byte aligned inside x.
QX_NB = 2  # quant_act_shared<2> in kernel_matvec_q4k


def fmaxf(a, b):  # IEEE maxNum as CUDA's fmaxf: a NaN operand yields the other
    return np.fmax(a, b).astype(np.float32)


def fminf(a, b):
    return np.fmin(a, b).astype(np.float32)


def quant_q8_k_warp(v, rnd=np.rint):
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
    d, q, pair = quant_q8_k_warp(x.reshape(nsb, 32, 8), rnd)
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


def quant_shared(x, nb=QX_NB, perm=None):
    """quant_act_shared for every warp of a block: returns the shared words (sq, sd, sbs as stage_act
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
                d, q, pair = quant_q8_k_warp(v)
                u2 = s * 32 + perm(lane >> 1) * 2 + (lane & 1)  # uint2 index
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


def run_quant_shared(K, kind):
    nsb = K // 256
    name = f"quant_shared_q4k_K{K}_{kind}"
    x = edge_x(K) if kind == "edge" else rng.uniform(-1, 1, K).astype(np.float32) * np.float32(rng.choice([1e-3, 1, 1e3]))
    ref7b = quant_7b(x)
    direct = quant_direct(x)
    eq = np.array_equal(ref7b, direct)
    i = int(np.argmax(ref7b != direct)) if not eq else 0
    check(name + " 7b_vs_direct", eq, f"byte {i} (block {i // AK}, offset {i % AK}) got {ref7b[i]} want {direct[i]}")
    sq_ref, sd_ref, sbs_ref = stage_act(ref7b, nsb)
    sq, sd, sbs, (wq, wd, wb), bad = quant_shared(x)
    same = (np.array_equal(sq, sq_ref) and np.array_equal(sd.view(np.uint32), sd_ref.view(np.uint32))
            and np.array_equal(sbs, sbs_ref))
    if not same:
        where = ("qs" if not np.array_equal(sq, sq_ref) else "d" if not np.array_equal(sd.view(np.uint32), sd_ref.view(np.uint32))
                 else "bsums")
        check(name + " bytes", False, f"shared {where} differs from stage_act of kernel_quant_q8_k's blocks")
    else:
        check(name + " bytes", True)
    check(name + " once", wq.min() == 1 and wq.max() == 1 and wd.min() == 1 and wd.max() == 1 and wb.min() == 1
          and wb.max() == 1, f"writes per word qs {wq.min()}..{wq.max()}, d {wd.min()}..{wd.max()}, "
          f"bsums {wb.min()}..{wb.max()} (want 1)")
    check(name + " loads", bad == 0, f"{bad} float4 loads misaligned or outside x")
    # the half-warp of a 64-bit store (lanes 16h .. 16h+15) covers 128 contiguous bytes: conflict-free
    lane = np.arange(32)
    u2 = act_perm(lane >> 1) * 2 + (lane & 1)
    ok = all(sorted(u2[16 * h:16 * h + 16].tolist()) == list(range(16 * h, 16 * h + 16)) for h in range(2))
    check(name + " banks", ok, "a half-warp's 8-byte stores do not cover 128 contiguous bytes")


def negative_control_quant_shared():
    """the checks can fail: half away from zero instead of nearest-even, a missing act_perm"""
    saved = C.save()
    x = edge_x(3584)
    a = quant_7b(x, rnd=lambda c: np.trunc(c + np.copysign(0.5, c)))
    ties = not np.array_equal(a, quant_direct(x))
    nsb = 3584 // 256
    sq_ref = stage_act(quant_7b(x), nsb)[0]
    noperm = not np.array_equal(quant_shared(x, perm=lambda v: v)[0], sq_ref)
    C.restore(saved)
    return ties and noperm


# ---------------- the real code on the host: quant_act_shared and kernel_quant_q8_k ----------------
# The source of quant_act_shared (matvec_q4k_kernel.cuh, with everything before it, quant_act.cuh
# included) and of kernel_quant_q8_k (mm_quant.cu, its function text) compiled with g++: every lane
# a std::thread, shuffles through a barrier-synchronized exchange (so warp_max's five dependent
# rounds run as on the device), float arithmetic IEEE single (SSE, no contraction). The 7b blocks
# must equal quant_direct's bytes and the QX shared row stage_act's copy of them. Skipped (not
# passed) without g++ / CUDA headers.
HOSTQ_RT = r"""/* host stub for the in-kernel quantization harness: one std::thread per lane */
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
@INTRINSICS@
static inline void __syncthreads(void) {}
""".replace("@INTRINSICS@\n", HOST_INTRINSICS)
HOSTQ_MAIN = r"""/* host harness: quant_act_shared (QX) and kernel_quant_q8_k (7b) run lane by lane on threads */
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
    /* args: K xfile outfile: writes the 7b blocks (nsb * 292) then the QX shared row */
    if (argc != 4) return 2;
    const int64_t K = atoll(argv[1]);
    const int nsb = (int)(K / 256);
    float *x = (float *)aligned_alloc(64, (size_t)K * 4);
    FILE *f = fopen(argv[2], "rb");
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
    /* QX: the 8 warps of a block (independent until the kernel's barrier) */
    blockDim.x = 256;
    for (int w = 0; w < 8; w++) warp_run(w, [&] { quant_act_shared<2, false>(x, nullptr, nsb, sq, sd, sbs, nullptr, 1.0f); });
    f = fopen(argv[3], "wb");
    fwrite(blocks.data(), 1, blocks.size(), f);
    fwrite(smem.data(), 1, (size_t)nsb * 292, f);
    fclose(f);
    free(x);
    return 0;
}
"""


def host_quant_shared():
    root, cxx, cuda_inc = host_tools()
    if not cxx or not cuda_inc:
        C.skip("host_quant_shared: no g++ or CUDA headers")
        return
    src = open(os.path.join(root, "phase7e_perf", "matvec_q4k_kernel.cuh")).read()
    q7 = open(os.path.join(root, "phase7b_ops", "mm_quant.cu")).read()
    m_end, k_beg, k_end = "/* FUSED = false", "__global__ void kernel_quant_q8_k", "/* ---------------- matmul"
    if m_end not in src or k_beg not in q7 or k_end not in q7 or "quant_act_shared" not in src[:src.index(m_end)]:
        check("host_quant_shared source", False,
              "quant_act_shared / kernel_quant_q8_k markers moved: update emu_matvec_q4k_qx.py")
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "fake"))
        open(os.path.join(tmp, "fake", "cuda_fp16.h"), "w").write(HOST_FP16)
        open(os.path.join(tmp, "fake", "cuda_runtime.h"), "w").write(HOSTQ_RT)
        open(os.path.join(tmp, "dev_only.inc"), "w").write(src[:src.index(m_end)] + "\n#endif\n")   # the header guard
        body = q7[q7.index(k_beg):q7.index(k_end)].replace("__global__ void", "static void", 1)
        open(os.path.join(tmp, "quant7b.inc"), "w").write(body)
        open(os.path.join(tmp, "hostq.cpp"), "w").write(HOSTQ_MAIN)
        exe = os.path.join(tmp, "hostq")
        r = subprocess.run([cxx, "-std=c++20", "-O1", "-w", "-pthread", "-ffp-contract=off", "-I" + os.path.join(tmp, "fake"),
                            "-I" + tmp, "-I" + root, "-I" + cuda_inc[0], "-o", exe, os.path.join(tmp, "hostq.cpp")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            check("host_quant_shared build", False, r.stderr.strip().splitlines()[:3])
            return
        for K in (256, 3584, 18944):
            for kind in ("random", "edge"):
                name = f"hostq_q4k_K{K}_{kind}"
                nsb = K // 256
                x = edge_x(K) if kind == "edge" else rng.uniform(-1, 1, K).astype(np.float32)
                xf, of = os.path.join(tmp, "x.bin"), os.path.join(tmp, "o.bin")
                x.astype(np.float32).tofile(xf)
                r = subprocess.run([exe, str(K), xf, of], capture_output=True, text=True)
                if r.returncode != 0:
                    check(name, False, f"harness exit {r.returncode}: {r.stderr.strip()}")
                    continue
                out = np.fromfile(of, np.uint8)
                b7, sh = out[:nsb * AK], out[nsb * AK:]
                want = quant_direct(x)
                i = int(np.argmax(b7 != want))
                check(name + " 7b", np.array_equal(b7, want),
                      f"byte {i} (block {i // AK}, offset {i % AK}) got {b7[i]} want {want[i]}")
                sq, sd, sbs = stage_act(want, nsb)
                ref = np.concatenate([sq.astype(np.uint32).view(np.uint8).reshape(-1), sd.view(np.uint8),
                                      sbs.astype(np.uint32).view(np.uint8)])
                i = int(np.argmax(sh != ref))
                check(name + " qx", np.array_equal(sh, ref), f"shared byte {i} got {sh[i]} want {ref[i]}")


print("emulating the in-kernel quantization ...", flush=True)
check("negative_control_quant_shared", negative_control_quant_shared(),
      "a wrong tie rule or a missing act_perm went unnoticed")
for K in (256, 3584, 18944):
    for kind in ("random", "edge"):
        run_quant_shared(K, kind)
host_quant_shared()
sys.exit(C.report())

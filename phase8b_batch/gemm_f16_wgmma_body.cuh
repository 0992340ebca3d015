/* The block of b22's wgmma matmul (gemm_f16_wgmma_sm90a.cu, whose head comment describes the
 * kernel): the ring's sizes, a stage's dequantization and products, a piece's end, b33's cluster
 * sums, and the body every form of the kernel runs (fw_body). Device code for sm_90a: included
 * only by gemm_f16_wgmma_sm90a.cu. */
#ifndef MI_GEMM_F16_WGMMA_BODY_CUH
#define MI_GEMM_F16_WGMMA_BODY_CUH
#include <cooperative_groups.h>
#include <cuda.h>   /* CUtensorMap */
#include <cuda_fp16.h>
#include <stdint.h>
#include "phase7a_skeleton/cuda_pdl.cuh"
#include "phase8b_batch/batch8b.h"
#include "phase8b_batch/f16s_common.cuh"
#include "phase8b_batch/hopper_async.cuh"
#include "phase8b_batch/stream_ring.cuh"

#define FW_THREADS 512
/* tokens a block: 33..64 rows. At 16 and 32 (m64n16k16, m64n32k16) the same kernel measured
 * slower than b6's mma.sync one on the 7B (results/notes/PHASE8B.md) */
#define FW_BN 64
#define FW_SLOT_A(bn) ((bn) * FS_SB * 2)   /* a stage's activations: bn tokens x 256 halves */
/* The ring: fw_ring<WT>::ah stages loading ahead of the one computed, in fw_ring<WT>::ns slots:
 * four for Q4_K, three for Q6_K (whose 240-byte row slots leave no room for a fourth). The slot
 * written at stage s's barrier takes stage s + ah and held stage s + ah - ns, whose products must
 * be done: the stage before (s - 1) at the least, s - 2 with b32 (a stage's products run on while
 * the next dequantizes), which needs ns >= ah + 2. Q6_K loads one stage ahead, so that its three
 * slots take b32: measured faster than two ahead without it (results/notes/PHASE8B.md). */
template <int WT> struct fw_ring {
    static constexpr int ns = WT == MI_TYPE_Q4_K ? 4 : 3;
    static constexpr int ah = WT == MI_TYPE_Q4_K ? 2 : 1;
    static constexpr bool ov = ns >= ah + 2;   /* b32's forms exist */
};

template <int WT, int BN> struct fw_smem {
    static constexpr int ns = fw_ring<WT>::ns;
    static constexpr size_t ring_a = (size_t)ns * FW_SLOT_A(BN);   /* first: 1024-aligned slots */
    static constexpr size_t ring_w = (size_t)ns * FS_BM * fs_fmt<WT>::wslot;
    static constexpr size_t scales = 2 * 8 * FS_BM * sizeof(__half2);
    static constexpr size_t bars = 2 * ns * sizeof(uint64_t);        /* TM: a slot's full mbarrier; b39: its empty one */
    static constexpr size_t bytes = 1024 + ring_a + ring_w + scales + bars;   /* + room to align the base */
};
/* TM: a weight stage as the bulk copy writes it, rows of the super-block's bytes back to back */
#define FW_TM_WROW 144
/* b40: a run's weight maps, one a segment (f16s_run) */
struct fw_run_maps {
    CUtensorMap tw[MI8A_RUN_MAX];
};

#ifdef FW_HAVE_WGMMA   /* the device helpers exist only where the kernel body does */
/* b31: row thread tid's Q6_K stage st of band rows m0 .. into its slot row (rw, at shared address
 * srw): one bulk copy of the 16-byte windows that cover it, to where gs_window's copies put them,
 * its bytes (and extra) arrived with on bar; a row whose windows reach outside the tensor by
 * gs_window's cp.async (no bytes), a row past M nothing */
template <int WT>
static __device__ __forceinline__ void fw_row_bulk(uint8_t *rw, uint32_t srw, const uint8_t *W, size_t wrow, int64_t M,
                                                   int64_t m0, int st, uint32_t bar, uint32_t extra, int tid) {
    using F = fs_fmt<WT>;
    const int64_t m = m0 + tid;
    const uint8_t *src = W + (size_t)m * wrow + (size_t)st * F::wbytes, *end = W + (size_t)M * wrow;
    const uint8_t *a = (const uint8_t *)((uintptr_t)src & ~(uintptr_t)15);
    const uint8_t *e = (const uint8_t *)(((uintptr_t)src + F::wbytes + 15) & ~(uintptr_t)15);
    const bool bulk = m < M && a >= W && e <= end;
    const uint32_t n = bulk ? (uint32_t)(e - a) : 0u;
    fw_bar_expect(bar, n + extra);
    if (bulk) fw_bulk(srw + (uint32_t)tid * F::wslot, a, n, bar);
    else if (m < M)
        for (int c = 0; c < F::wch; c++) gs_window(rw + tid * F::wslot, src, F::wbytes, c, W, end);
}

/* a 32-bit shuffle of a half2: the builtin, which the compiler may schedule, where __half2's own
 * is an opaque asm statement */
static __device__ __forceinline__ __half2 fw_shfl_h2(__half2 v, int src) {
    const uint32_t u = __shfl_sync(0xffffffffu, *reinterpret_cast<uint32_t *>(&v), src);
    return *reinterpret_cast<const __half2 *>(&u);
}

/* Q4_K units k (even) and k + 1 of rows r0 (w0) and r0 + 8 (w1), their scales from the quad's
 * lanes k & 3 and (k & 3) + 1 (fw_stage_mma's QS): fs_unit_frags's operations on the low and the
 * high nibbles of the one chunk both units read, its four words loaded once */
static __device__ __forceinline__ void fw_pair_frags_q4k(const uint8_t *w0, const uint8_t *w1, int k, int lane,
                                                         __half2 qs0, __half2 qs1, __half2 qm0, __half2 qm1,
                                                         uint32_t (&Alo)[2][4], uint32_t (&Ahi)[2][4]) {
    const int tig = lane & 3, o = 16 + 32 * (k >> 1) + 4 * tig;
    const uint32_t v0 = *(const uint32_t *)(w0 + o), v1 = *(const uint32_t *)(w1 + o);
    const uint32_t v2 = *(const uint32_t *)(w0 + o + 16), v3 = *(const uint32_t *)(w1 + o + 16);
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int src = (lane & ~3) | ((k + u) & 3);
        const __half2 s0 = fw_shfl_h2(qs0, src), s1 = fw_shfl_h2(qs1, src);
        const __half2 t0 = fw_shfl_h2(qm0, src), t1 = fw_shfl_h2(qm1, src);
        uint32_t (&A)[2][4] = u ? Ahi : Alo;
        if (u) q4_unit_frags<true>(v0, v1, v2, v3, s0, s1, t0, t1, A[0], A[1]);   /* unit k + 1: the high nibbles */
        else q4_unit_frags<false>(v0, v1, v2, v3, s0, s1, t0, t1, A[0], A[1]);
    }
}

/* every wgmma of the warpgroup done; the compiler moves no use of the accumulators d (written
 * asynchronously) above this point */
template <int ND> static __device__ __forceinline__ void fw_mma_done(float (&d)[ND]) {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
    for (int i = 0; i < ND; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* A warp's part of a stage's products: its rows r0, r0 + 8 (their super-blocks at w0, w1 in the
 * ring) x units k0 .. k0 + 3 dequantized into registers, two units at a time, each pair's four
 * wgmma (a k16 step each, B from the activation slot at shared address rb) issued and committed
 * while the next pair dequantizes. QS: lane tig of a quad computes unit k0 + tig's scales of the
 * quad's rows and the quad shares them by shuffles; else from sS, sM.
 * OV (item b32): the stage's second pair's products are left running; before each pair's
 * dequantization only the group committed last may still run (the pair's registers were read by
 * the group before it), so the tensor cores work across the stage's barrier instead of draining
 * at its end. The caller waits for all (fw_mma_done) before it reads d. Without OV every group
 * is waited for here. The same products in the same order on the same accumulators
 * either way: the same bits. */
template <int WT, bool QS, int ND, int CB, bool OV>
static __device__ __forceinline__ void fw_stage_mma(float (&d)[ND], const uint8_t *w0, const uint8_t *w1, int k0,
                                                    int lane, int r0, uint32_t rb, const __half2 *sS,
                                                    const __half2 *sM, uint32_t rel) {
    const int tig = lane & 3;
    __half2 qs0, qs1, qm0, qm1;   /* QS: unit k0 + tig's scales of rows r0 and r0 + 8 */
    if (QS) {
        fs_pair_scales<WT>(w0, w1, k0 + tig, qs0, qs1, qm0, qm1);
    }
    uint32_t A[4][2][4];   /* units k0 .. k0 + 3, two k16 steps each */
    /* the slot's descriptor; a k16 step's is it plus its offset / 16 (shared addresses stay under
     * 2^18, so the start field never carries into the next) */
    const uint64_t db = fw_desc(rb);
    const uint32_t dlo = (uint32_t)db, dhi = (uint32_t)(db >> 32);
#pragma unroll
    for (int half = 0; half < 2; half++) {
        if (OV) asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        if (OV && half == 1 && rel && lane == 0) fw_bar_arrive(rel);   /* b39: the stage before is read */
        if (QS && WT == MI_TYPE_Q4_K) {   /* the pair's units 2c, 2c + 1 share their 32-byte chunk: one load */
            fw_pair_frags_q4k(w0, w1, k0 + 2 * half, lane, qs0, qs1, qm0, qm1, A[2 * half], A[2 * half + 1]);
        } else
#pragma unroll
        for (int kk = 2 * half; kk < 2 * half + 2; kk++) {
            const int k = k0 + kk;
            if (QS) {
                const int src = (lane & ~3) | kk;   /* the quad's lane that computed unit k */
                fs_unit_frags<WT>(w0, w1, k, tig, __shfl_sync(0xffffffffu, qs0, src), __shfl_sync(0xffffffffu, qs1, src),
                                  __shfl_sync(0xffffffffu, qm0, src), __shfl_sync(0xffffffffu, qm1, src), A[kk][0],
                                  A[kk][1]);
            } else {
                fs_unit_frags<WT>(w0, w1, k, tig, sS[k * FS_BM + r0], sS[k * FS_BM + r0 + 8], sM[k * FS_BM + r0],
                                  sM[k * FS_BM + r0 + 8], A[kk][0], A[kk][1]);
            }
        }
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 2 * half; kk < 2 * half + 2; kk++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int j = 2 * (k0 + kk) + h;   /* the k16 step of the stage */
                fw_mma(d, A[kk][h], dlo + (((uint32_t)(j >> 2) * CB + (uint32_t)(j & 3) * 32) >> 4), dhi);
            }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    }
    if (!OV) fw_mma_done(d);
}

/* an output: its sum v + bias (the matmul's), then + R (b36: the residual add after it, one
 * float addition, which commutes: the two kernels' bits) */
static __device__ __forceinline__ float fw_out(float v, const float *__restrict__ bias, const float *__restrict__ R,
                                               int64_t m, int64_t n, int64_t M) {
    const float y = bias ? v + bias[m] : v;
    return R ? y + R[(size_t)n * M + m] : y;
}

/* A piece's K halves: warpgroups 2, 3 (K half 1) hand their ND accumulators d to warpgroups 0, 1
 * through red (the stage's activation slot, free until its next copy), which add them to theirs;
 * d cleared in warpgroups 2, 3. Every thread of the block calls it (two barriers). */
template <int ND> static __device__ __forceinline__ void fw_khalves(float (&d)[ND], float *red, int wg) {
    __syncthreads();   /* every warpgroup's products of the slot are done */
    if (wg >= 2)
#pragma unroll
        for (int i = 0; i < ND; i++) red[i * 128] = d[i], d[i] = 0.0f;
    __syncthreads();
    if (wg < 2)
#pragma unroll
        for (int i = 0; i < ND; i++) d[i] = d[i] + red[i * 128];
}

/* A piece's end: the K halves added (fw_khalves), warpgroups 0, 1 write rows r0, r0 + 8 of band
 * rows m0 .. to Y (a whole band, + bias, + R where given: item b36's residual) or to the
 * piece's slot of part; d cleared. Every thread of the block calls it. */
template <int ND>
static __device__ __forceinline__ void fw_piece_out(float (&d)[ND], float *red, int wg, int tig, int r0, int64_t m0,
                                                    int64_t M, int64_t N, bool whole, const float *__restrict__ bias,
                                                    const float *__restrict__ R, float *__restrict__ Y,
                                                    float *__restrict__ slot) {
    fw_khalves(d, red, wg);
    if (wg < 2) {
        /* accumulator i: tokens 8 (i / 4) + 2 tig + (i & 1), row r0 + 8 ((i / 2) & 1) */
#pragma unroll
        for (int i = 0; i < ND; i++) {
            const float v = d[i];
            const int r = r0 + ((i >> 1) & 1) * 8;
            const int64_t m = m0 + r, n = 8 * (i >> 2) + 2 * tig + (i & 1);
            if (m < M && n < N) {
                if (whole) Y[(size_t)n * M + m] = fw_out(v, bias, R, m, n, M);
                else slot[(size_t)n * FS_BM + r] = v;
            }
            d[i] = 0.0f;
        }
    }
}
/* b33: a K split's band summed inside its cluster (the band's S blocks, rank c its chunk c, each run
 * one piece). The K halves added (fw_khalves), each block leaves its piece's sums in its
 * shared memory (out, [token][row], at one offset in every block), the cluster waits for all, and block c
 * adds elements c / S .. (c + 1) / S of the band's 64 x 128 from every block's copy in chunk
 * order, + bias: the fixup's additions in the fixup's order, without its launch or the partials'
 * trip through global memory. The cluster waits again before any block exits. */
template <int ND>
static __device__ __forceinline__ void fw_cluster_out(float (&d)[ND], float *red, float *out, int wg, int tig, int r0,
                                                      int64_t m0, int64_t M, int64_t N, const float *__restrict__ bias,
                                                      const float *__restrict__ R, float *__restrict__ Y) {
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    fw_khalves(d, red, wg);
    if (wg < 2)
#pragma unroll
        for (int i = 0; i < ND; i++) {
            const int r = r0 + ((i >> 1) & 1) * 8, n = 8 * (i >> 2) + 2 * tig + (i & 1);
            out[n * FS_BM + r] = d[i];
            d[i] = 0.0f;
        }
    cl.sync();
    const int S = (int)cl.num_blocks(), c = (int)cl.block_rank();
    const float *src[8];
#pragma unroll
    for (int j = 0; j < 8; j++) src[j] = j < S ? cl.map_shared_rank(out, j) : out;
    constexpr int E = FW_BN * FS_BM;
    for (int e = c * E / S + (int)threadIdx.x; e < (c + 1) * E / S; e += FW_THREADS) {
        const int n = e / FS_BM, r = e % FS_BM;
        const int64_t m = m0 + r;
        if (m >= M || n >= N) continue;
        const float rr = R ? R[(size_t)n * M + m] : 0.0f;   /* b36: its load issued before the sums' */
        float v = src[0][e];
#pragma unroll
        for (int j = 1; j < 8; j++)   /* unrolled: src stays in registers */
            if (j < S) v += src[j][e];
        const float y = bias ? v + bias[m] : v;
        Y[(size_t)n * M + m] = R ? y + rr : y;
    }
    cl.sync();
}
#endif

/* Y [N, M] for the bands a run covers whole, part [slot][N][FS_BM] for its other pieces, as
 * kernel_gemm_f16s (the same plan, slots and fixup). X: kernel_act_f16's copy, evens then odds.
 * QS (item b25): no block-wide scale pass and its barrier: lane tig of a quad computes unit
 * k0 + tig's scales of the quad's two rows and the quad shares them by shuffles (the same
 * operations, so the same halves); and Q4_K rows of a 16-byte-aligned tensor are copied as their
 * 9 whole chunks, without the window logic. */
#ifdef FW_HAVE_WGMMA
/* Block p's work (the kernels below: one form, or b49's run of two formats, which picks a block's
 * form by its band). The tensor maps are the kernel's own parameters, passed by reference. */
template <int WT, int BN, bool QS, bool TM, int OV, bool CL, bool RN>
static __device__ __forceinline__ void fw_body(const uint8_t *__restrict__ W, size_t wrow, int64_t M,
                                               const uint8_t *__restrict__ X, int64_t K, int64_t N, const f16s_plan &pl,
                                               const float *__restrict__ bias, const float *__restrict__ R,
                                               float *__restrict__ Y, float *__restrict__ part, const CUtensorMap &tm_x,
                                               const CUtensorMap &tm_w, bool tma_w, bool bulk_w, const f16s_run &run,
                                               const fw_run_maps &rmaps, const int p) {
    using F = fs_fmt<WT>;
    using SM = fw_smem<WT, BN>;
    constexpr int NS = SM::ns, AH = fw_ring<WT>::ah;
    static_assert(AH + (OV ? 2 : 1) <= NS, "a slot loaded while its last stage's products may read it");
    static_assert(!CL || SM::ring_w >= (size_t)BN * FS_BM * sizeof(float), "b33's sums fit the weight ring");
    static_assert(!RN || (TM && QS), "b40's runs: weights by their maps (Q4_K) or by rows in bulk (Q6_K)");
    constexpr int SLOT = FW_SLOT_A(BN), CB = BN * 128;   /* a column block of 64 k: BN tokens x 128 bytes */
    constexpr int ND = BN / 2;                           /* accumulators a thread: 64 rows x BN tokens / 128 */
    extern __shared__ __align__(16) uint8_t fw_sh[];
    const uint32_t sh0 = (uint32_t)__cvta_generic_to_shared(fw_sh), sa0 = (sh0 + 1023u) & ~1023u;
    uint8_t *ring_a = fw_sh + (sa0 - sh0), *ring_w = ring_a + SM::ring_a;
    __half2 *sS = (__half2 *)(ring_w + SM::ring_w), *sM = sS + 8 * FS_BM;
    const uint32_t bar0 = sa0 + (uint32_t)(SM::ring_a + SM::ring_w + SM::scales);   /* TM: slot q's at bar0 + 8 q */
    const uint32_t ebar0 = bar0 + 8u * NS;                                           /* b39: slot q's empty one */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    const int gid = lane >> 2, tig = lane & 3;
    fs_walk wk(pl, p, K);
    /* b49: a Q6_K segment of a run, its rows by bulk copies: the block's band (a K split keeps a
     * block in one) gives the segment's weights, rows and first band; elsewhere W, M and band 0 */
    const uint8_t *Wr = W;
    int64_t Mr = M, br = 0;
    if constexpr (RN && WT == MI_TYPE_Q6_K) {
        const int sg = run.seg(f16s_run_start(pl, (int64_t)p) / pl.nst);
        Wr = f16s_run::pick(run.W, sg), Mr = f16s_run::pick(run.M, sg), br = f16s_run::pick(run.band0, sg);
    }

    /* b25: Q4_K rows 16-byte aligned (wrow = 144 K / 256 is a multiple of 16): whole chunks */
    const bool whole_rows = QS && WT == MI_TYPE_Q4_K && ((uintptr_t)W & 15) == 0;
    /* TM: weights by the bulk copy (the launcher checked the tensor as whole_rows does): a slot's
     * rows FW_TM_WROW bytes apart and from their first byte, else F::wslot apart from the window
     * offset of their address */
    const bool wt_tma = TM && WT == MI_TYPE_Q4_K && (RN || tma_w);
    const int wstride = wt_tma ? FW_TM_WROW : F::wslot;
    /* b31: Q6_K rows (not 16-byte multiples, so no tensor map) by one bulk copy a row of the
     * 16-byte windows that cover its super-block, landing where b25's window copies put them;
     * each of the band's FS_BM row threads arrives on the slot's mbarrier with its bytes (a row
     * whose windows reach outside the tensor, or past M, with none: gs_window's cp.async) */
    const bool wq_bulk = TM && WT == MI_TYPE_Q6_K && bulk_w;
    /* b39 (OV 2): no block-wide barrier a stage. A warp arrives on a slot's empty mbarrier once its
     * products of that slot are done (its wait before the next stage's second pair); thread 0 waits
     * for the slot's 16 arrivals before the bulk copies refill it, and every thread waits for the
     * copies on the slot's full mbarrier. Where a stage's weights come by each thread's copies
     * (no weight tensor map), the barrier stays. */
    const bool eb = OV == 2 && wt_tma;
    if (TM) {
        if (tid == 0) {
            for (int q = 0; q < NS; q++) fw_bar_init(bar0 + 8u * q, wq_bulk ? FS_BM : 1);
            if (OV == 2)
                for (int q = 0; q < NS; q++) fw_bar_init(ebar0 + 8u * q, FW_THREADS / 32);
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        }
        __syncthreads();
    }
    /* band b's stage st into ring slot q: its weights (issue_w), then its activations (issue_x) */
    auto issue_w = [&](int64_t b, int st, int q) {
        uint8_t *rw = ring_w + (size_t)q * FS_BM * F::wslot;
        if (wq_bulk) {
            if (tid < FS_BM)
                fw_row_bulk<WT>(rw, sa0 + (uint32_t)(SM::ring_a + (size_t)q * FS_BM * F::wslot), Wr, wrow, Mr, (b - br) * FS_BM, st,
                                bar0 + 8u * q, tid == 0 ? 4u * CB : 0u, tid);
            return;
        }
        if (TM && tid == 0) {
            const uint32_t bar = bar0 + 8u * q;
            fw_bar_expect(bar, 4u * CB + (wt_tma ? FS_BM * FW_TM_WROW : 0u));
            const CUtensorMap *map = &tm_w;
            int64_t m0b = b * FS_BM;   /* RN: the band's first row in its segment, from that segment's map */
            if (RN) {
                const int sg = run.locate(b, &m0b);
#pragma unroll
                for (int k = 0; k < MI8A_RUN_MAX; k++)
                    if (k == sg) map = &rmaps.tw[k];
            }
            if (wt_tma)
                fw_tma_2d(sa0 + (uint32_t)(SM::ring_a + (size_t)q * FS_BM * F::wslot), map, st * FW_TM_WROW,
                          (int)m0b, bar);
        }
        if (wt_tma) return;
        if (whole_rows) {
            const int64_t m0 = b * FS_BM;
            for (int i = tid; i < FS_BM * (F::wbytes / 16); i += FW_THREADS) {
                const int r = i / (F::wbytes / 16), c = i - r * (F::wbytes / 16);
                if (m0 + r < M)
                    async_copy16(rw + r * F::wslot + 16 * c, W + (size_t)(m0 + r) * wrow + (size_t)st * F::wbytes + 16 * c);
            }
        } else {
            fs_copy_weights<WT>(rw, W, wrow, M, b * FS_BM, (size_t)st * F::wbytes, tid, FW_THREADS);
        }
    };
    auto issue_x = [&](int st, int q) {
        if (TM) {
            if (tid == 0)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    fw_tma_2d(sa0 + (uint32_t)q * SLOT + (uint32_t)c * CB, &tm_x, st * FS_SB + 64 * c, 0, bar0 + 8u * q);
            return;
        }
        uint8_t *ra = ring_a + (size_t)q * SLOT;
        /* token n's 16-byte chunk c of the stage. Tokens N .. BN - 1 are not copied: their columns of
         * the products (each reads its own token only) are never stored */
        for (int i = tid; i < BN * 32; i += FW_THREADS) {
            const int n = i >> 5, c = i & 31;
            if (n < N)
                async_copy16(ra + (c >> 3) * CB + n * 128 + (((c & 7) ^ (n & 7)) << 4),
                             X + ((size_t)n * K + (size_t)st * FS_SB) * 2 + 16 * c);
        }
    };
    auto issue_next = [&](int q) {
        issue_w(wk.ib, wk.is, q);
        issue_x(wk.is, q);
        wk.loaded();
    };

    float d[ND];
#pragma unroll
    for (int i = 0; i < ND; i++) d[i] = 0.0f;

    /* the ring's first stages: their weights (which no kernel writes) before the programmatic wait
     * (b29: the kernel before may still run), their activations after it; one commit group a
     * slot as in the loop (group 0 holds the first slots' weights and slot 0's activations) */
    int pst[AH];
#pragma unroll
    for (int q = 0; q < AH; q++) {
        pst[q] = wk.is;
        if (q < wk.len) {
            issue_w(wk.ib, wk.is, q);
            wk.loaded();
        }
    }
    MI_PDL_ENTRY();
#pragma unroll
    for (int q = 0; q < AH; q++) {
        if (q < wk.len) issue_x(pst[q], q);
        async_commit();
    }
    const int r0 = 64 * (wg & 1) + 16 * (warp & 3) + gid;   /* the warp's rows r0 and r0 + 8 of the band */
    const int k0 = 4 * (wg >> 1);                            /* its first unit of a stage */
    for (int s = 0; s < wk.len; s++) {
        const int q = s % NS;
        async_wait<AH - 1>();   /* this thread's copies of unit s have landed */
        if (TM) fw_bar_wait(bar0 + 8u * q, (uint32_t)(s / NS) & 1u);   /* and the slot's bulk copies */
        /* make them visible to the async proxy (wgmma) before the barrier publishes them */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        if (eb) {   /* b39: stage s + AH's slot held stage s + AH - NS: its 16 warps' arrivals */
            const int t = s + AH;
            if (t < wk.len) {
                if (tid == 0 && t >= NS) {
                    fw_bar_wait(ebar0 + 8u * (uint32_t)(t % NS), (uint32_t)(t / NS - 1) & 1u);
                    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                }
                issue_next(t % NS);
            }
        } else {
            /* everyone's have; every warp's products of unit s - 1 are done (with OV: of s - 2), so
             * slot (s + AH) % NS is free (fw_ring) */
            __syncthreads();
            if (s + AH < wk.len) issue_next((s + AH) % NS);
        }
        async_commit();

        const int64_t m0 = wk.cb * FS_BM;
        const uint8_t *rw = ring_w + (size_t)q * FS_BM * F::wslot;
        const size_t wo = (size_t)wk.cs * F::wbytes;
        if (!QS) {
            fs_stage_scales<WT>(rw, W, wrow, m0, wo, M, sS, sM, tid, FW_THREADS);
            __syncthreads();
        }

        const int64_t mr = m0 - br * FS_BM;   /* the band's first row in its weights (b49: its segment's) */
        const uint8_t *w0 = rw + r0 * wstride + (wt_tma ? 0 : ((uintptr_t)(Wr + (size_t)(mr + r0) * wrow + wo) & 15));
        const uint8_t *w1 =
            rw + (r0 + 8) * wstride + (wt_tma ? 0 : ((uintptr_t)(Wr + (size_t)(mr + r0 + 8) * wrow + wo) & 15));
        const uint32_t rel = eb && s > 0 ? ebar0 + 8u * (uint32_t)((s + NS - 1) % NS) : 0u;
        fw_stage_mma<WT, QS, ND, CB, OV != 0>(d, w0, w1, k0, lane, r0, sa0 + (uint32_t)q * SLOT, sS, sM, rel);

        if (wk.piece_ends(s)) {
            if (OV) fw_mma_done(d);
            /* the piece's outputs: RN, its band's segment's rows, bias and output */
            int64_t om0 = m0, oM = M;
            const float *ob = bias;
            float *oY = Y;
            if (RN) {
                const int sg = run.locate(wk.cb, &om0);
                oM = f16s_run::pick(run.M, sg), ob = f16s_run::pick(run.bias, sg), oY = f16s_run::pick(run.Y, sg);
            }
            /* K half 1 to K half 0 through activation slot q, free until stage s + 2's copy:
             * [warpgroup & 1][i][thread of the warpgroup], BN KB = the slot */
            float *red = (float *)(ring_a + (size_t)q * SLOT) + (wg & 1) * (128 * ND) + (tid & 127);
            if (CL)   /* b33: the run's one piece. Its sums go to the weight ring's start: the same offset in
                       * every block of the cluster (a block's last slot q depends on its run's length), and
                       * free: no copy is issued past the last stage, whose weights are dequantized */
                fw_cluster_out<ND>(d, red, (float *)ring_w, wg, tig, r0, om0, oM, N, ob, R, oY);
            else
                fw_piece_out<ND>(d, red, wg, tig, r0, om0, oM, N, !wk.head && wk.cs == wk.nst - 1, ob, R, oY,
                                 part + (size_t)(2 * p + (wk.head ? 0 : 1)) * (size_t)N * FS_BM);
            wk.head = false;
        }
        wk.computed();
    }
    if (OV) fw_mma_done(d);   /* the run's last unit ended a piece: nothing is running */
    async_wait<0>();          /* no copy outlives the block (the last commits are empty) */
}
#endif
#endif

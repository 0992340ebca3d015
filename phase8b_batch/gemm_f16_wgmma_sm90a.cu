/* b6's matmul (gemm_f16_stream.cu) on Hopper's warpgroup MMA: the same bands, plan, weight ring
 * and dequantization into f16 fragments (f16s_common.cuh), but a warp's fragments are the A
 * operand of wgmma.mma_async (m64nBNk16, A from registers) and the activations its B operand,
 * which the tensor cores read from shared memory through a matrix descriptor.
 *
 * Why: at 64 rows b6 issues, per stage and multiprocessor, ~1,000 mma.sync m16n8k16 among ~7,700
 * warp instructions, not memory-bound. Here a warp issues, per 16 rows x 16 k, its share of one
 * wgmma instead of BN / 8 mma.sync and as many 64-bit fragment loads of the activations.
 * Measured on the 7B at 64 rows: +3% over b6; what holds a stage now is the work around the
 * products (the copies' address math, the scales, the dequantization, two barriers), not the
 * products (results/notes/PHASE8B.md).
 *
 * Block: 512 threads, four warpgroups over a band of 128 rows; warpgroup g takes rows 64 (g & 1)
 * .. + 63 and units 4 (g >> 1) .. + 3 of every stage (b11's K halves), the two halves added at
 * each piece's end through the stage's activation slot. Per stage a warp dequantizes its 16 rows
 * x 4 units into registers (two k16 steps a unit) and issues 8 wgmma in two commit groups, so
 * the second pair of units dequantizes while the first pair's products run; both are waited for
 * before the next stage's barrier frees their slot.
 *
 * Activations: f16, each 16-element group stored as its 8 even elements, then its 8 odd ones
 * (kernel_act_f16's evens-then-odds form): k position 2 tig + j of a k16 step holds element 4 tig + 2 j and
 * position 8 + 2 tig + j element 4 tig + 1 + 2 j, the order fs_unit_frags' registers carry. In
 * shared memory a stage is 4 column blocks of 64 k (128 bytes a token), each the canonical
 * 128-byte-swizzle K-major layout of 7e's prefill kernel (phase7e_perf/gemm_f16_wgmma_sm90a.cu):
 * 16-byte chunk c of token n at c ^ (n & 7), 8-token groups 1024 bytes apart, blocks 1024-aligned;
 * a k16 step starts 32 bytes further inside its column block.
 *
 * TM (item b28): a stage's activations come as four bulk tensor copies (TMA: one a 64-k column
 * block, the 128-byte swizzle done by the copy engine, tokens past N filled with zeros) and, for
 * Q4_K rows of a 16-byte aligned tensor, its weights as one more (128 rows x 144 bytes, rows 144
 * bytes apart in the slot), all issued by one thread and completing on the slot's mbarrier,
 * instead of 2,048 + 1,152 16-byte cp.async whose addresses every thread computes. The same bytes
 * reach the same places for the products (the weight rows only sit closer: 36 words apart, which
 * keeps a quad's loads on distinct banks), so the same bits come out.
 *
 * Error: b6's roundings (weights, scales and activations to f16, f32 sums over all of K); the order
 * of the products inside one wgmma is the hardware's, so the sums are not b6's bits: bound by the
 * exact product like b6 (gate_8b_matmul_f16). A fixed plan and fixed orders: bit-identical run
 * to run. Built for sm_90a only (Makefile: *_sm90a.cu); elsewhere the kernel body is empty and
 * mi8b_gemm_f16w_occupancy says 0. */
#include <cooperative_groups.h>
#include <cuda.h>   /* CUtensorMap and its encoder's types (the encoder itself comes through the runtime) */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>
#include "phase7a_skeleton/cuda_check.h"
#include "phase7a_skeleton/cuda_pdl.cuh"
#include "phase8b_batch/batch8b.h"
#include "phase8b_batch/f16s_common.cuh"
#include "phase8b_batch/hopper_async.cuh"
#include "phase8b_batch/x_f16_copy.cuh"
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
template <int WT, int BN, bool QS, bool TM, int OV, bool CL, bool RN>
__global__ void __launch_bounds__(FW_THREADS, 1)
kernel_gemm_f16w(const uint8_t *__restrict__ W, size_t wrow, int64_t M, const uint8_t *__restrict__ X, int64_t K,
                 int64_t N, const f16s_plan pl, const float *__restrict__ bias, const float *__restrict__ R,
                 float *__restrict__ Y,
                 float *__restrict__ part, const __grid_constant__ CUtensorMap tm_x,
                 const __grid_constant__ CUtensorMap tm_w, bool tma_w, bool bulk_w, const f16s_run run,
                 const __grid_constant__ fw_run_maps rmaps) {
#ifdef FW_HAVE_WGMMA
    using F = fs_fmt<WT>;
    using SM = fw_smem<WT, BN>;
    constexpr int NS = SM::ns, AH = fw_ring<WT>::ah;
    static_assert(AH + (OV ? 2 : 1) <= NS, "a slot loaded while its last stage's products may read it");
    static_assert(!CL || SM::ring_w >= (size_t)BN * FS_BM * sizeof(float), "b33's sums fit the weight ring");
    static_assert(!RN || (TM && QS && WT == MI_TYPE_Q4_K), "b40's runs: Q4_K weights by their maps");
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
    const int p = blockIdx.x;
    fs_walk wk(pl, p, K);

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
                fw_row_bulk<WT>(rw, sa0 + (uint32_t)(SM::ring_a + (size_t)q * FS_BM * F::wslot), W, wrow, M, b * FS_BM, st,
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

        const uint8_t *w0 = rw + r0 * wstride + (wt_tma ? 0 : ((uintptr_t)(W + (size_t)(m0 + r0) * wrow + wo) & 15));
        const uint8_t *w1 =
            rw + (r0 + 8) * wstride + (wt_tma ? 0 : ((uintptr_t)(W + (size_t)(m0 + r0 + 8) * wrow + wo) & 15));
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
#endif
}

/* ---------------- launchers ---------------- */

/* TM's tensor maps: cuTensorMapEncodeTiled from the driver through the runtime (no link to
 * libcuda), asked for once; NULL where this runtime or driver has none */
typedef CUresult (*fw_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static fw_encode_fn fw_encoder(void) {
    static fw_encode_fn fn = NULL;
    static int asked = 0;
    if (!asked) {
        asked = 1;
        void *f = NULL;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
#else
        const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &q);
#endif
        if (e == cudaSuccess && q == cudaDriverEntryPointSuccess) fn = (fw_encode_fn)f;
        else (void)cudaGetLastError();
    }
    return fn;
}
/* x's f16 copy [N][K] as 64 x 64 boxes (a stage's column block: 128 bytes of k by BN tokens) in
 * the 128-byte swizzle; rows past N read as zeros */
static bool fw_map_x(CUtensorMap *tm, const void *xh, int64_t K, int64_t N) {
    const fw_encode_fn enc = fw_encoder();
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)N}, strides[1] = {(cuuint64_t)K * 2};
    const cuuint32_t box[2] = {64, FW_BN}, step[2] = {1, 1};
    return enc && ((uintptr_t)xh & 15) == 0 &&
           enc(tm, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)xh, dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
/* Q4_K rows [M][wrow bytes] as boxes of FS_BM rows x one super-block (144 bytes); rows past M
 * read as zeros. The tensor 16-byte aligned (wrow = 144 K / 256 is a multiple of 16) */
static bool fw_map_w(CUtensorMap *tm, const void *w, size_t wrow, int64_t M) {
    const fw_encode_fn enc = fw_encoder();
    const cuuint64_t dims[2] = {(cuuint64_t)wrow, (cuuint64_t)M}, strides[1] = {(cuuint64_t)wrow};
    const cuuint32_t box[2] = {FW_TM_WROW, FS_BM}, step[2] = {1, 1};
    return enc && ((uintptr_t)w & 15) == 0 && wrow % 16 == 0 &&
           enc(tm, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void *)w, dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* the kernel of a form: b25 (QS), b28 (TM), b32 (OV: with TM, where fw_ring has its slots),
 * b33 (CL: with TM, launched in clusters of a K split's chunks) */
typedef void (*fw_kernel_fn)(const uint8_t *, size_t, int64_t, const uint8_t *, int64_t, int64_t, const f16s_plan,
                             const float *, const float *, float *, float *, const CUtensorMap, const CUtensorMap, bool,
                             bool, const f16s_run, const fw_run_maps);
/* rn (b40): a run of Q4_K matmuls, in the b32 forms only (TM and OV) */
template <int WT> static fw_kernel_fn fw_kernel(bool qs, bool tm, bool ov, bool cl, bool eb = false, bool rn = false) {
    if constexpr (fw_ring<WT>::ov && WT == MI_TYPE_Q4_K)
        if (tm && ov && rn) {
            if (eb) return cl ? kernel_gemm_f16w<WT, FW_BN, true, true, 2, true, true> : kernel_gemm_f16w<WT, FW_BN, true, true, 2, false, true>;
            return cl ? kernel_gemm_f16w<WT, FW_BN, true, true, 1, true, true> : kernel_gemm_f16w<WT, FW_BN, true, true, 1, false, true>;
        }
    if (rn) return NULL;
    if constexpr (fw_ring<WT>::ov)
        if (tm && ov) {
            if (eb) return cl ? kernel_gemm_f16w<WT, FW_BN, true, true, 2, true, false> : kernel_gemm_f16w<WT, FW_BN, true, true, 2, false, false>;
            return cl ? kernel_gemm_f16w<WT, FW_BN, true, true, 1, true, false> : kernel_gemm_f16w<WT, FW_BN, true, true, 1, false, false>;
        }
    if (tm) return cl ? kernel_gemm_f16w<WT, FW_BN, true, true, 0, true, false>
                      : kernel_gemm_f16w<WT, FW_BN, true, true, 0, false, false>;
    if (qs) return kernel_gemm_f16w<WT, FW_BN, true, false, 0, false, false>;
    return kernel_gemm_f16w<WT, FW_BN, false, false, 0, false, false>;
}

/* blocks a multiprocessor holds for kernel k (0: no sm_90a image here, or it does not fit); the
 * first call raises the kernel's shared memory limit */
template <int WT> static int fw_occupancy_of(fw_kernel_fn k) {
    int n = 0;
#ifdef MI_BUILT_SM90A
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major != 9 ||
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fw_smem<WT, FW_BN>::bytes) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, FW_THREADS, fw_smem<WT, FW_BN>::bytes) != cudaSuccess)
        n = 0;
#else
    (void)k;
#endif
    (void)cudaGetLastError();
    return n;
}

/* of every form (one plan for each), asked once */
template <int WT> static int fw_occupancy(void) {
    static int bps = -1;
    if (bps < 0) {
        bps = 1 << 30;
        for (int f = 0; f < 32; f++) {   /* every form (b39's and b40's too): each one's shared memory raised */
            const fw_kernel_fn k = fw_kernel<WT>(f & 1, f & 2, f & 4, false, f & 8, f & 16);
            if (!k) continue;
            const int b = fw_occupancy_of<WT>(k);
            bps = b < bps ? b : bps;
        }
    }
    return bps;
}

int mi8b_gemm_f16w_occupancy(mi_type wt, int64_t N) {
    if (N <= FW_BN / 2 || N > FW_BN) return 0;
    (void)fw_encoder();   /* asked for with the plan, not first inside a stream capture */
    return wt == MI_TYPE_Q4_K ? fw_occupancy<MI_TYPE_Q4_K>() : wt == MI_TYPE_Q6_K ? fw_occupancy<MI_TYPE_Q6_K>() : 0;
}

/* b33: how many clusters of S blocks of the form's CL kernel this GPU keeps resident at once (0:
 * none fit; asked once per S, at the plan, not inside a stream capture); S <= 8, the portable
 * cluster size */
template <int WT> static int fw_clusters_max(bool ov, int S) {
    static int fit[2][9];   /* 0: not asked yet, -1: none fit, else the count (written once, whole) */
    if (S < 2 || S > 8) return 0;
    int &f = fit[ov][S];
    if (f == 0) {
        int got = -1;
#ifdef MI_BUILT_SM90A
        if (fw_occupancy<WT>() >= 1) {
            const fw_kernel_fn k = fw_kernel<WT>(true, true, ov, true);
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute a[1];
            a[0].id = cudaLaunchAttributeClusterDimension;
            a[0].val.clusterDim.x = (unsigned)S, a[0].val.clusterDim.y = 1, a[0].val.clusterDim.z = 1;
            cfg.gridDim = dim3((unsigned)S), cfg.blockDim = dim3(FW_THREADS);
            cfg.dynamicSmemBytes = fw_smem<WT, FW_BN>::bytes;
            cfg.attrs = a, cfg.numAttrs = 1;
            int n = 0;
            /* b39's and b40's forms of the kernel: the same resources, their shared memory raised too */
            bool raised = true;
            for (int e = 0; e < 4; e++) {
                const fw_kernel_fn ke = fw_kernel<WT>(true, true, ov, true, e & 1, e & 2);
                if (ke && cudaFuncSetAttribute(ke, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)fw_smem<WT, FW_BN>::bytes) != cudaSuccess)
                    raised = false;
            }
            if (raised && cudaOccupancyMaxActiveClusters(&n, k, &cfg) == cudaSuccess && n >= 1) got = n;
        }
#endif
        (void)cudaGetLastError();
        f = got;   /* a caller meanwhile asks again, never reads a half-made answer */
    }
    return f > 0 ? f : 0;
}

static uint64_t g_empty_bars_launches;   /* b39's kernel launched (its weights' map may still fall back) */
extern "C" uint64_t mi8b_f16w_empty_bars_launches(void) { return g_empty_bars_launches; }
/* cl (b33): in clusters of the plan's S blocks, with the programmatic attribute where pdl */
/* rn (b40): the run's table and maps, whose kernel takes its weights, rows and outputs from them */
template <int WT>
static void fw_launch(cudaStream_t st, bool qs, bool tm, bool ov, bool cl, const uint8_t *wb, size_t wrow, int64_t M,
                      const uint8_t *xb, int64_t K, int64_t N, const f16s_plan &pl, const float *bias,
                      const float *res, float *y, float *part, const CUtensorMap &tx, const CUtensorMap &tw, bool tma_w, bool bulk_w,
                      const f16s_run &run, const fw_run_maps &rmaps, bool rn) {
    const bool eb = mi8b_f16w_empty_bars_on();
    const fw_kernel_fn k = fw_kernel<WT>(qs, tm, ov, cl, eb, rn);
    g_empty_bars_launches += k == fw_kernel<WT>(qs, tm, ov, cl, true, rn) && k != fw_kernel<WT>(qs, tm, ov, cl, false, rn);
    const bool pdl = mi8b_pdl_on();
    if (!cl) {
        (void)pdl_launch(pdl, k, dim3((unsigned)pl.P), dim3(FW_THREADS), fw_smem<WT, FW_BN>::bytes, st, wb, wrow, M, xb, K,
                         N, pl, bias, res, y, part, tx, tw, tm && tma_w, tm && bulk_w, run, rmaps);
        return;
    }
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute a[2];
    a[0].id = cudaLaunchAttributeClusterDimension;
    a[0].val.clusterDim.x = (unsigned)pl.S, a[0].val.clusterDim.y = 1, a[0].val.clusterDim.z = 1;
    a[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3((unsigned)pl.P), cfg.blockDim = dim3(FW_THREADS);
    cfg.dynamicSmemBytes = fw_smem<WT, FW_BN>::bytes, cfg.stream = st;
    cfg.attrs = a, cfg.numAttrs = pdl ? 2 : 1;
    (void)cudaLaunchKernelEx(&cfg, k, wb, wrow, M, xb, K, N, pl, bias, res, y, part, tx, tw, tm && tma_w,
                             tm && bulk_w, run, rmaps);
}

/* the clusters of a split of S that b33's sums would run in, resident at once (0: no sums) */
static int fw_sum_clusters(mi_type wt, int64_t N, int S) {
    if (!mi8b_f16w_cluster_sum_on() || !mi8b_f16w_tma_on() || !mi8b_f16w_quad_scales_on() || S < 2 ||
        mi8b_gemm_f16w_occupancy(wt, N) < 1)
        return 0;
    const bool ov = mi8b_f16w_overlap_on();
    return wt == MI_TYPE_Q4_K ? fw_clusters_max<MI_TYPE_Q4_K>(ov, S)
                              : fw_clusters_max<MI_TYPE_Q6_K>(ov && fw_ring<MI_TYPE_Q6_K>::ov, S);
}
bool mi8b_gemm_f16w_sums_bands(mi_type wt, int64_t N, const f16s_plan &pl) { return fw_sum_clusters(wt, N, pl.S) > 0; }
int mi8b_gemm_f16w_cluster_blocks(mi_type wt, int64_t N, int S) { return fw_sum_clusters(wt, N, S) * S; }

mi_status mi8b_gemm_f16w(cudaStream_t st, mi_type wt, const void *w, const float *x, void *xh, const float *bias,
                         const float *res, float *y, int64_t K, int64_t M, int64_t N, const f16s_plan &pl, float *part, bool x_ready,
                         bool cl) {
    if (mi8b_gemm_f16w_occupancy(wt, N) < 1 || K % FS_SB)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_f16w: no sm_90a kernel here, or type %s, K = %lld, N = %lld",
                      mi_type_name(wt), (long long)K, (long long)N);
    if (!x_ready) MI_TRY(launch_act_f16(st, x, xh, K, N, true));   /* b30: else the node before left it in xh */
    const size_t wrow = mi_row_size(wt, K);
    const uint8_t *wb = (const uint8_t *)w, *xb = (const uint8_t *)xh;
    const bool qs = mi8b_f16w_quad_scales_on();
    /* b28 (with b25's form): the activations by the bulk copy where their map encodes, and Q4_K
     * weights too where theirs does; else b25's copies */
    CUtensorMap tx, tw;
    memset(&tx, 0, sizeof tx);
    memset(&tw, 0, sizeof tw);
    const bool tm = qs && mi8b_f16w_tma_on() && fw_map_x(&tx, xh, K, N);
    const bool tma_w = tm && wt == MI_TYPE_Q4_K && fw_map_w(&tw, w, wrow, M);
    const bool ov = mi8b_f16w_overlap_on();   /* b32, with b28's form, where fw_ring has its slots */
    /* b33: the caller asked (mi8b_gemm_f16w_sums_bands) and skips the fixup; the x map's failure
     * to encode (no TM) cannot be absorbed then */
    if (cl && !tm)
        return mi_err(MI_ERR_DEVICE, "mi8b_gemm_f16w: the activations' tensor map did not encode for a cluster sum");
    static f16s_run no_run;
    static fw_run_maps no_maps;
    if (wt == MI_TYPE_Q4_K)
        fw_launch<MI_TYPE_Q4_K>(st, qs, tm, ov, cl, wb, wrow, M, xb, K, N, pl, bias, res, y, part, tx, tw, tma_w, false,
                                no_run, no_maps, false);
    else
        fw_launch<MI_TYPE_Q6_K>(st, qs, tm, ov, cl, wb, wrow, M, xb, K, N, pl, bias, res, y, part, tx, tw, false,
                                mi8b_f16w_q6_bulk_on(), no_run, no_maps, false);
    MI_CU_CHECK_LAUNCH("kernel_gemm_f16w");
    return MI_OK;
}

/* b40: whether a run of Q4_K matmuls at N rows can be one launch here (the b32 forms with the
 * weights by their maps: b22, b25, b28, b32 on, an sm_90a image) */
bool mi8b_gemm_f16w_run_supported(mi_type wt, int64_t N) {
    return wt == MI_TYPE_Q4_K && mi8b_gemm_f16w_occupancy(wt, N) >= 1 && mi8b_f16w_quad_scales_on() &&
           mi8b_f16w_tma_on() && mi8b_f16w_overlap_on();
}

mi_status mi8b_gemm_f16w_run(cudaStream_t st, mi_type wt, const f16s_run &run, const float *x, void *xh, int64_t K,
                             int64_t N, const f16s_plan &pl, float *part, bool x_ready, bool cl) {
    if (!mi8b_gemm_f16w_run_supported(wt, N) || K % FS_SB || run.n < 1 || run.n > MI8A_RUN_MAX)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_f16w_run: %d matmuls of type %s, K = %lld, N = %lld", run.n,
                      mi_type_name(wt), (long long)K, (long long)N);
    const size_t wrow = mi_row_size(wt, K);
    CUtensorMap tx;
    fw_run_maps maps;
    memset(&tx, 0, sizeof tx);
    memset(&maps, 0, sizeof maps);
    if (!fw_map_x(&tx, xh, K, N))
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_f16w_run: the activations' tensor map did not encode");
    for (int s = 0; s < run.n; s++)
        if (!fw_map_w(&maps.tw[s], run.W[s], wrow, run.M[s]))
            return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_f16w_run: matmul %d's weights: no tensor map (not 16-byte aligned?)", s);
    if (!x_ready) MI_TRY(launch_act_f16(st, x, xh, K, N, true));
    fw_launch<MI_TYPE_Q4_K>(st, true, true, true, cl, run.W[0], wrow, run.M[0], (const uint8_t *)xh, K, N, pl, NULL, NULL,
                            NULL, part, tx, maps.tw[0], true, false, run, maps, true);
    MI_CU_CHECK_LAUNCH("kernel_gemm_f16w (run)");
    return MI_OK;
}

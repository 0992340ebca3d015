/* Item d18: 7e's one-token Q4_K kernel body (matvec_q4k_kernel.cuh) with its weights brought in
 * by bulk copies into a ring of shared-memory stages a warp, instead of 16-byte loads into
 * registers. 7e's warps hold one iteration of loads in registers and issue the next only after
 * computing on it, so an SM has at most ~45 KB in flight and none while it computes: the big
 * matmuls read at 50-55% of the H200's bandwidth. Here lane 0 of a warp keeps the next
 * NST - 1 iterations in flight (cp.async.bulk, completion counted by an mbarrier a stage) while
 * the warp computes on the oldest, and no register holds them.
 *
 * A job is one iteration of 7e's lane map (iteration `it` of a row: super-blocks it*4U ..
 * it*4U+4U-1, of the gate and the up row when FUSED); a stage holds its bytes, each weight's share
 * contiguous (super-block 4g+q of the iteration at (4g+q)*144). Lane (q, t) reads its 16 header
 * bytes and its 16 quant bytes from there and computes value_q4k on them exactly as 7e's lane
 * does on its registers, adding in the same (it, g) order; the activation row is quantized (and
 * normalized) in the block as 7e's QX / NORM forms do it. So every row equals 7e's, bit for bit,
 * whatever the grid, the warps a block or the stages.
 *
 * One block an SM (the rings take most of its shared memory), its warp count chosen so the rows
 * spread evenly over the warps (bulk_plan). Include only from *_exact.cu (--fmad=false). */
#ifndef MI_MATVEC_Q4K_BULK_CUH
#define MI_MATVEC_Q4K_BULK_CUH
#include "phase7e_perf/matvec_q4k_kernel.cuh"
#include "common/core/mi_settings.h"

#define BULK_MAX_WARPS 32
#define BULK_MAX_STAGES 4
#define BULK_SB 144                        /* bytes of a Q4_K super-block */
#define BULK_STAGE (2 * 4 * 2 * BULK_SB)   /* a job's bytes: NS * 4U * 144, the same fused (2 x 8) and not (16) */

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
/* lane 0's arrival, announcing the bytes the stage's copies will bring */
__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    asm volatile(
        "{\n .reg .pred p;\n"
        "BULK_WAIT_%=:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra BULK_WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
}
/* bytes (a multiple of 16, both addresses 16-byte aligned) from global into shared memory */
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

/* shared memory of a launch: the barriers, the rings, then 7e's activation row (q4k_smem) */
__host__ __device__ static inline size_t bulk_bars_bytes(int warps, int nst) { return ((size_t)warps * nst * 8 + 127) & ~(size_t)127; }
static inline size_t bulk_smem(int warps, int nst, int64_t K, bool norm) {
    return bulk_bars_bytes(warps, nst) + (size_t)warps * nst * BULK_STAGE + q4k_smem(K, norm);
}

/* FUSED, NORM, RES, PDL, Rows: as matvec_q4k_rows (QX always: x is f32 and quantized here).
 * nst: stages a warp. Warp w of block b takes rows b*W + w, then + gridDim.x*W, ... */
template <bool FUSED, bool NORM, bool RES, bool PDL, class Rows>
__device__ __forceinline__ void matvec_q4k_bulk_rows(const Rows &rows, int64_t M, int nsb, int nst,
                                                     const float *__restrict__ X, const float *__restrict__ nw,
                                                     float eps, const float *__restrict__ R) {
    constexpr int U = FUSED ? 2 : 4, NS = FUSED ? 2 : 1;
    constexpr int PART = 4 * U * BULK_SB;   /* one weight's share of a stage */
    static_assert(NS * PART == BULK_STAGE, "a stage holds one job");
    extern __shared__ __align__(128) uint8_t smem_bulk[];
    const int W = blockDim.x >> 5, w = threadIdx.x >> 5, lane = threadIdx.x & 31, q = lane >> 3, t = lane & 7;
    uint64_t *bars = (uint64_t *)smem_bulk + (size_t)w * nst;
    uint8_t *ring = smem_bulk + bulk_bars_bytes(W, nst) + (size_t)w * nst * BULK_STAGE;
    uint4 *sq = (uint4 *)(smem_bulk + bulk_bars_bytes(W, nst) + (size_t)W * nst * BULK_STAGE);
    float *sd = (float *)(sq + (size_t)nsb * 16);
    uint32_t *sbs = (uint32_t *)(sd + nsb);
    const size_t wrow = (size_t)nsb * BULK_SB;
    const int nit = (nsb + 4 * U - 1) / (4 * U);
    const int64_t G = (int64_t)gridDim.x * W, row0 = (int64_t)blockIdx.x * W + w;
    const int64_t njobs = row0 < M ? ((M - 1 - row0) / G + 1) * nit : 0;

    /* lane 0: job j's bytes into stage j % nst. The stage was last read by this warp's lanes
     * before the __syncwarp that precedes the call; the proxy fence orders those reads before the
     * copy's writes. */
    auto issue = [&](int64_t j) {
        const int s = (int)(j % nst), it = (int)(j % nit);
        const int64_t row = row0 + (j / nit) * G;
        const int nsbj = min(4 * U, nsb - it * 4 * U);
        const uint32_t bytes = (uint32_t)nsbj * BULK_SB;
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        mbar_expect_tx(bars + s, bytes * NS);
#pragma unroll
        for (int k = 0; k < NS; k++)
            bulk_copy(ring + (size_t)s * BULK_STAGE + k * PART, rows.w(k, row, wrow) + (size_t)it * PART, bytes,
                      bars + s);
    };
    if (lane == 0) {
        for (int s = 0; s < nst; s++) mbar_init(bars + s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    if constexpr (PDL) pdl_trigger();
    if (lane == 0)   /* weights only: in flight while the kernel before finishes and x is quantized */
        for (int64_t j = 0; j < nst && j < njobs; j++) issue(j);
    if constexpr (NORM) {
        for (int i = threadIdx.x * 32; i < nsb * 256; i += blockDim.x * 32)
            asm volatile("prefetch.global.L1 [%0];" ::"l"(nw + i));
    }
    if constexpr (PDL) pdl_wait();
    float scale = 1.0f;
    float *sx = NORM ? q4k_norm_row(sbs, nsb) : NULL;
    if constexpr (NORM) scale = norm_scale_block(X, (int64_t)nsb * 256, eps, sx);
    quant_act_shared<2, NORM>(X, sx, nsb, sq, sd, sbs, nw, scale, W);
    __syncthreads();

    float acc[NS];
#pragma unroll
    for (int k = 0; k < NS; k++) acc[k] = 0.0f;
    for (int64_t j = 0; j < njobs; j++) {   /* warp-uniform */
        const int s = (int)(j % nst), it = (int)(j % nit);
        mbar_wait(bars + s, (uint32_t)((j / nst) & 1));
        const uint8_t *stage = ring + (size_t)s * BULK_STAGE;
#pragma unroll
        for (int g = 0; g < U; g++) {
            const int sbi = it * 4 * U + 4 * g + q;
            const bool on = sbi < nsb;
#pragma unroll
            for (int k = 0; k < NS; k++) {
                raw_q4k r;
                if (on) {
                    const uint8_t *p = stage + k * PART + (4 * g + q) * BULK_SB;
                    r.h = *(const uint4 *)p;
                    r.q = *(const uint4 *)(p + 16 + 16 * t);
                } else {
                    zero_q4k(r);
                }
                const float v = value_q4k(r, sq, sd, sbs, on ? sbi : 0, t);   /* all lanes: shuffles */
                if (on) acc[k] += v;
            }
        }
        __syncwarp();
        if (lane == 0 && j + nst < njobs) issue(j + nst);
        if (it == nit - 1) {
            const int64_t row = row0 + (j / nit) * G;
            const float s0 = warp_sum(acc[0]);
            const float s1 = FUSED ? warp_sum(acc[NS - 1]) : 0.0f;
            if (lane == 0) {
                const float y = FUSED ? mi_canon_swiglu(s0, s1) : rows.add_bias(row, s0);
                *rows.y(row) = RES ? R[row] + y : y;
            }
#pragma unroll
            for (int k = 0; k < NS; k++) acc[k] = 0.0f;
        }
    }
}

template <bool FUSED, bool NORM, bool RES, class Rows>
__global__ void __launch_bounds__(BULK_MAX_WARPS * 32, 1)
kernel_matvec_q4k_bulk(const Rows rows, int64_t M, int nsb, int nst, const float *__restrict__ X,
                       const float *__restrict__ nw, float eps, const float *__restrict__ R) {
    matvec_q4k_bulk_rows<FUSED, NORM, RES, true, Rows>(rows, M, nsb, nst, X, nw, eps, R);
}

/* A launch's shape: one block an SM; warps a block so that the rows an SM spread evenly over
 * them (at most BULK_MAX_WARPS); stages a warp as many as its jobs use and shared memory holds
 * (at most BULK_MAX_STAGES). */
struct bulk_plan_t {
    int warps, nst;
    size_t smem;
    int64_t grid;
};
static inline bool bulk_plan(int64_t M, int64_t K, bool fused, bool norm, bulk_plan_t *p) {
    static int smem_max = -1;
    if (smem_max < 0) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
            v = 48 << 10;
        (void)cudaGetLastError();
        smem_max = v;
    }
    static long max_warps = -1, max_stages = -1;   /* MINFER_BULK_WARPS, _STAGES: for measurements */
    const int mw = (int)mi_setting_int_once("MINFER_BULK_WARPS", 1, BULK_MAX_WARPS, BULK_MAX_WARPS, &max_warps);
    const int ms = (int)mi_setting_int_once("MINFER_BULK_STAGES", 1, BULK_MAX_STAGES, BULK_MAX_STAGES, &max_stages);
    const int64_t nsm = mi7e_sm_count(), per_sm = (M + nsm - 1) / nsm;
    const int64_t per_warp = (per_sm + mw - 1) / mw;
    const int u4 = fused ? 8 : 16, nsb = (int)(K / 256), nit = (nsb + u4 - 1) / u4;
    int warps = (int)((per_sm + per_warp - 1) / per_warp);
    const int64_t jobs = per_warp * nit;
    for (; warps >= 1; warps--) {
        int nst = jobs < ms ? (int)jobs : ms;
        while (nst >= 1 && bulk_smem(warps, nst, K, norm) > (size_t)smem_max) nst--;
        if (nst >= (jobs > 1 && ms > 1 ? 2 : 1)) {
            p->warps = warps;
            p->nst = nst;
            p->smem = bulk_smem(warps, nst, K, norm);
            p->grid = (M + warps - 1) / warps < nsm ? (M + warps - 1) / warps : nsm;
            return true;
        }
    }
    return false;
}

/* one instantiation's launch: its shared-memory limit raised once */
template <bool FUSED, bool NORM, bool RES, class Rows>
static mi_status launch_q4k_bulk(cudaStream_t st, const Rows &rows, int64_t K, int64_t M, const float *x,
                                 const float *nw, float eps, const float *r, bool pdl) {
    bulk_plan_t p;
    if (!bulk_plan(M, K, FUSED, NORM, &p))
        return mi_err(MI_ERR_UNSUPPORTED, "d18: no ring of shared memory fits K = %lld", (long long)K);
    static size_t raised = 0;
    if (p.smem > raised) {
        MI_CU_CHECK(cudaFuncSetAttribute(kernel_matvec_q4k_bulk<FUSED, NORM, RES, Rows>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p.smem));
        raised = p.smem;
    }
    MI_CU_CHECK(pdl_launch(pdl, kernel_matvec_q4k_bulk<FUSED, NORM, RES, Rows>, dim3((unsigned)p.grid),
                           dim3((unsigned)(p.warps * 32)), p.smem, st, rows, M, (int)(K / 256), p.nst, x, nw, eps, r));
    MI_CU_CHECK_LAUNCH("kernel_matvec_q4k_bulk");
    return MI_OK;
}

#endif

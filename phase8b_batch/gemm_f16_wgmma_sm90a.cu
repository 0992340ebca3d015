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

#include "phase8b_batch/gemm_f16_wgmma_body.cuh"

template <int WT, int BN, bool QS, bool TM, int OV, bool CL, bool RN>
__global__ void __launch_bounds__(FW_THREADS, 1)
kernel_gemm_f16w(const uint8_t *__restrict__ W, size_t wrow, int64_t M, const uint8_t *__restrict__ X, int64_t K,
                 int64_t N, const f16s_plan pl, const float *__restrict__ bias, const float *__restrict__ R,
                 float *__restrict__ Y,
                 float *__restrict__ part, const __grid_constant__ CUtensorMap tm_x,
                 const __grid_constant__ CUtensorMap tm_w, bool tma_w, bool bulk_w, const f16s_run run,
                 const __grid_constant__ fw_run_maps rmaps) {
#ifdef FW_HAVE_WGMMA
    fw_body<WT, BN, QS, TM, OV, CL, RN>(W, wrow, M, X, K, N, pl, bias, R, Y, part, tm_x, tm_w, tma_w, bulk_w, run, rmaps,
                                        (int)blockIdx.x);
#endif
}

/* b49: a run of Q4_K matmuls then Q6_K ones of one x (the 7B's q and k, then a Q6_K v) in one
 * launch: the run's bands 0 .. band6 - 1 Q4_K (rows of wrow4 bytes, by their maps), the rest
 * Q6_K (rows of wrow6 bytes, each by one bulk copy); a block takes its band's form. A K split
 * (pl.S >= 1), so that no block's run crosses a band, let alone a format. */
template <int BN, int OV, bool CL>
__global__ void __launch_bounds__(FW_THREADS, 1)
kernel_gemm_f16w_mixed(size_t wrow4, size_t wrow6, int64_t band6, const uint8_t *__restrict__ X, int64_t K, int64_t N,
                       const f16s_plan pl, float *__restrict__ part, const __grid_constant__ CUtensorMap tm_x,
                       const f16s_run run, const __grid_constant__ fw_run_maps rmaps) {
#ifdef FW_HAVE_WGMMA
    const int p = (int)blockIdx.x;
    if (f16s_run_start(pl, (int64_t)p) / pl.nst >= band6)
        fw_body<MI_TYPE_Q6_K, BN, true, true, OV, CL, true>(NULL, wrow6, 0, X, K, N, pl, NULL, NULL, NULL, part, tm_x,
                                                           tm_x, false, true, run, rmaps, p);
    else
        fw_body<MI_TYPE_Q4_K, BN, true, true, OV, CL, true>(NULL, wrow4, 0, X, K, N, pl, NULL, NULL, NULL, part, tm_x,
                                                           tm_x, true, false, run, rmaps, p);
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
#ifdef MI_BUILT_SM90A
/* clusters of S blocks of kernel k (threads FW_THREADS, smem bytes of dynamic shared memory, its
 * limit raised already) the GPU keeps resident at once; 0 where none fit */
static int fw_cluster_count(const void *k, size_t smem, int S) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute a[1];
    a[0].id = cudaLaunchAttributeClusterDimension;
    a[0].val.clusterDim.x = (unsigned)S, a[0].val.clusterDim.y = 1, a[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3((unsigned)S), cfg.blockDim = dim3(FW_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = a, cfg.numAttrs = 1;
    int n = 0;
    return cudaOccupancyMaxActiveClusters(&n, k, &cfg) == cudaSuccess && n >= 1 ? n : 0;
}
#endif
template <int WT> static int fw_clusters_max(bool ov, int S) {
    static int fit[2][9];   /* 0: not asked yet, -1: none fit, else the count (written once, whole) */
    if (S < 2 || S > 8) return 0;
    int &f = fit[ov][S];
    if (f == 0) {
        int got = -1;
#ifdef MI_BUILT_SM90A
        if (fw_occupancy<WT>() >= 1) {
            /* b39's and b40's forms of the kernel: the same resources, their shared memory raised too */
            bool raised = true;
            for (int e = 0; e < 4; e++) {
                const fw_kernel_fn ke = fw_kernel<WT>(true, true, ov, true, e & 1, e & 2);
                if (ke && cudaFuncSetAttribute(ke, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)fw_smem<WT, FW_BN>::bytes) != cudaSuccess)
                    raised = false;
            }
            const int n = raised ? fw_cluster_count((const void *)fw_kernel<WT>(true, true, ov, true), fw_smem<WT, FW_BN>::bytes, S) : 0;
            if (n >= 1) got = n;
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

/* the clusters of each split s in [s0, s1] that b33's sums would run in, resident at once, into
 * n[s] (0: no sums); the items read once for all of them */
static void fw_sum_clusters(mi_type wt, int64_t N, int s0, int s1, int *n) {
    const bool on = mi8b_f16w_cluster_sum_on() && mi8b_f16w_tma_on() && mi8b_f16w_quad_scales_on() &&
                    mi8b_gemm_f16w_occupancy(wt, N) >= 1;
    const bool ov = on && mi8b_f16w_overlap_on();
    for (int s = s0; s <= s1; s++)
        n[s] = !on || s < 2                ? 0
               : wt == MI_TYPE_Q4_K ? fw_clusters_max<MI_TYPE_Q4_K>(ov, s)
                                    : fw_clusters_max<MI_TYPE_Q6_K>(ov && fw_ring<MI_TYPE_Q6_K>::ov, s);
}
bool mi8b_gemm_f16w_sums_bands(mi_type wt, int64_t N, const f16s_plan &pl) {
    int n[9] = {0};
    if (pl.S < 2 || pl.S > 8) return false;
    fw_sum_clusters(wt, N, pl.S, pl.S, n);
    return n[pl.S] > 0;
}
void mi8b_gemm_f16w_cluster_blocks(mi_type wt, int64_t N, int64_t cap[9]) {
    int n[9] = {0};
    fw_sum_clusters(wt, N, 2, 8, n);
    for (int s = 0; s <= 8; s++) cap[s] = (int64_t)n[s] * s;
}

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

/* a run's tensor maps: x's copy (*tx) and the Q4_K weights of its first n4 matmuls (rows of wrow
 * bytes); who names the caller in the error */
static mi_status fw_run_maps_make(const char *who, const f16s_run &run, int n4, const void *xh, int64_t K, int64_t N,
                                  size_t wrow, CUtensorMap *tx, fw_run_maps *maps) {
    memset(tx, 0, sizeof *tx);
    memset(maps, 0, sizeof *maps);
    if (!fw_map_x(tx, xh, K, N)) return mi_err(MI_ERR_UNSUPPORTED, "%s: the activations' tensor map did not encode", who);
    for (int s = 0; s < n4; s++)
        if (!fw_map_w(&maps->tw[s], run.W[s], wrow, run.M[s]))
            return mi_err(MI_ERR_UNSUPPORTED, "%s: matmul %d's weights: no tensor map (not 16-byte aligned?)", who, s);
    return MI_OK;
}

mi_status mi8b_gemm_f16w_run(cudaStream_t st, mi_type wt, const f16s_run &run, const float *x, void *xh, int64_t K,
                             int64_t N, const f16s_plan &pl, float *part, bool x_ready, bool cl) {
    if (!mi8b_gemm_f16w_run_supported(wt, N) || K % FS_SB || run.n < 1 || run.n > MI8A_RUN_MAX)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_f16w_run: %d matmuls of type %s, K = %lld, N = %lld", run.n,
                      mi_type_name(wt), (long long)K, (long long)N);
    const size_t wrow = mi_row_size(wt, K);
    CUtensorMap tx;
    fw_run_maps maps;
    MI_TRY(fw_run_maps_make("mi8b_gemm_f16w_run", run, run.n, xh, K, N, wrow, &tx, &maps));
    if (!x_ready) MI_TRY(launch_act_f16(st, x, xh, K, N, true));
    fw_launch<MI_TYPE_Q4_K>(st, true, true, true, cl, run.W[0], wrow, run.M[0], (const uint8_t *)xh, K, N, pl, NULL, NULL,
                            NULL, part, tx, maps.tw[0], true, false, run, maps, true);
    MI_CU_CHECK_LAUNCH("kernel_gemm_f16w (run)");
    return MI_OK;
}

/* ---- b49: a run of Q4_K matmuls then Q6_K ones in one launch (kernel_gemm_f16w_mixed) ---- */
typedef void (*fw_mixed_fn)(size_t, size_t, int64_t, const uint8_t *, int64_t, int64_t, const f16s_plan, float *,
                            const CUtensorMap, const f16s_run, const fw_run_maps);
/* the larger of the two forms' shared memory: each block lays out its own form's in it */
static constexpr size_t FW_MIXED_SMEM = fw_smem<MI_TYPE_Q4_K, FW_BN>::bytes > fw_smem<MI_TYPE_Q6_K, FW_BN>::bytes
                                            ? fw_smem<MI_TYPE_Q4_K, FW_BN>::bytes
                                            : fw_smem<MI_TYPE_Q6_K, FW_BN>::bytes;
/* eb: b39's empty barriers for the Q4_K blocks (OV 2; the Q6_K blocks keep the barrier a stage) */
static fw_mixed_fn fw_mixed_kernel(bool eb, bool cl) {
    if (eb) return cl ? kernel_gemm_f16w_mixed<FW_BN, 2, true> : kernel_gemm_f16w_mixed<FW_BN, 2, false>;
    return cl ? kernel_gemm_f16w_mixed<FW_BN, 1, true> : kernel_gemm_f16w_mixed<FW_BN, 1, false>;
}
/* clusters of S of form (eb, cl) resident at once (cl false: S = 1, blocks a multiprocessor
 * holds x 1); 0 where the form does not fit. Asked once per form and S; the first call raises the
 * form's shared memory limit */
static int fw_mixed_fit(bool eb, bool cl, int S) {
    static int fit[2][2][9];   /* 0: not asked, -1: does not fit, else the count */
    if (S < 1 || S > 8 || (cl && S < 2)) return 0;
    int &f = fit[eb][cl][S];
    if (f == 0) {
        int got = -1;
#ifdef MI_BUILT_SM90A
        const fw_mixed_fn k = fw_mixed_kernel(eb, cl);
        int n = 0;
        if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)FW_MIXED_SMEM) == cudaSuccess) {
            if (!cl) {
                if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, FW_THREADS, FW_MIXED_SMEM) == cudaSuccess && n >= 1)
                    got = n;
            } else if ((n = fw_cluster_count((const void *)k, FW_MIXED_SMEM, S)) >= 1) {
                got = n;
            }
        }
#else
        (void)eb, (void)cl;
#endif
        (void)cudaGetLastError();
        f = got;
    }
    return f > 0 ? f : 0;
}

static uint64_t g_mixed_launches;
uint64_t mi8b_gemm_f16w_mixed_launches(void) { return g_mixed_launches; }

/* b49 at N rows: both formats' wgmma kernels run here, with the b32 forms fed by bulk copies (b22,
 * b25, b28, b31, b32 on) and the mixed kernel fits a multiprocessor */
bool mi8b_gemm_f16w_mixed_supported(int64_t N) {
    return mi8b_gemm_f16w_occupancy(MI_TYPE_Q4_K, N) >= 1 && mi8b_gemm_f16w_occupancy(MI_TYPE_Q6_K, N) >= 1 &&
           mi8b_f16w_quad_scales_on() && mi8b_f16w_tma_on() && mi8b_f16w_overlap_on() && mi8b_f16w_q6_bulk_on() &&
           fw_mixed_fit(mi8b_f16w_empty_bars_on(), false, 1) >= 1;
}
/* every cluster size's answer asked (where the workspace is sized: not first inside a capture) */
void mi8b_gemm_f16w_mixed_ready(void) {
    for (int e = 0; e < 2; e++)
        for (int S = 1; S <= 8; S++) (void)fw_mixed_fit(e, S > 1, S);
}
/* b33's sums for plan pl in the mixed kernel: its clusters of pl.S fit */
bool mi8b_gemm_f16w_mixed_sums_bands(int64_t N, const f16s_plan &pl) {
    return mi8b_gemm_f16w_sums_bands(MI_TYPE_Q4_K, N, pl) && mi8b_gemm_f16w_sums_bands(MI_TYPE_Q6_K, N, pl) &&
           fw_mixed_fit(mi8b_f16w_empty_bars_on(), true, pl.S) >= 1;
}

mi_status mi8b_gemm_f16w_run_mixed(cudaStream_t st, const f16s_run &run, int n4, const float *x, void *xh, int64_t K,
                                   int64_t N, const f16s_plan &pl, float *part, bool x_ready, bool cl) {
    if (!mi8b_gemm_f16w_mixed_supported(N) || K % FS_SB || pl.S < 1 || n4 < 1 || n4 >= run.n || run.n > MI8A_RUN_MAX)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_f16w_run_mixed: %d Q4_K of %d matmuls, K = %lld, N = %lld, split %d",
                      n4, run.n, (long long)K, (long long)N, pl.S);
    const size_t wrow4 = mi_row_size(MI_TYPE_Q4_K, K), wrow6 = mi_row_size(MI_TYPE_Q6_K, K);
    CUtensorMap tx;
    fw_run_maps maps;
    MI_TRY(fw_run_maps_make("mi8b_gemm_f16w_run_mixed", run, n4, xh, K, N, wrow4, &tx, &maps));
    if (!x_ready) MI_TRY(launch_act_f16(st, x, xh, K, N, true));
    const bool eb = mi8b_f16w_empty_bars_on();
    const fw_mixed_fn k = fw_mixed_kernel(eb, cl);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute a[2];
    int na = 0;
    if (cl) {
        a[na].id = cudaLaunchAttributeClusterDimension;
        a[na].val.clusterDim.x = (unsigned)pl.S, a[na].val.clusterDim.y = 1, a[na].val.clusterDim.z = 1;
        na++;
    }
    if (mi8b_pdl_on()) {
        a[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        a[na].val.programmaticStreamSerializationAllowed = 1;
        na++;
    }
    cfg.gridDim = dim3((unsigned)pl.P), cfg.blockDim = dim3(FW_THREADS);
    cfg.dynamicSmemBytes = FW_MIXED_SMEM, cfg.stream = st;
    cfg.attrs = a, cfg.numAttrs = (unsigned)na;
    (void)cudaLaunchKernelEx(&cfg, k, wrow4, wrow6, run.band0[n4], (const uint8_t *)xh, K, N, pl, part, tx, run, maps);
    MI_CU_CHECK_LAUNCH("kernel_gemm_f16w_mixed");
    g_mixed_launches++;
    return MI_OK;
}

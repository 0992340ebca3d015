/* One-token (N <= 8) quantized matmul and fused FFN head with staged weight rows. A block of
 * 4 warps copies RB whole, contiguous weight rows into shared memory with 16-byte coalesced
 * loads, 8 in flight per thread (7b's warp-per-row kernel reads 2-4 bytes per lane straight
 * from global memory and peaks at ~1.2 TB/s), then each warp dots one staged row at a time in
 * 7b's order: lane l takes units l, l+32, ... (7b's unit_unpack of dev7b.cuh, on the shared
 * copy), xor-butterfly. Activations are quantized exactly as 7b and the CPU do
 * (mi7b_quantize_act), so integer block dots equal the CPU's (docs/PHASE7E.md).
 * Built with --fmad=false (_exact): the SwiGLU epilogue is mi_canon_swiglu, bit for bit. */
#include "phase7e_perf/matvec_staged.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7a_skeleton/cuda_pdl.cuh"

/* ---------------- kernel ----------------
 * Block b stages rows b*RB .. b*RB+RB-1 (one region, or one per weight when fused), then dots
 * them (matvec_staged.cuh); A holds the N quantized activation rows, arow bytes apart, read
 * through the read-only cache. */
template <int WT, int NC, bool FUSED>
__global__ void __launch_bounds__(MMV_THREADS)
kernel_matvec_staged(const uint8_t *__restrict__ W, const uint8_t *__restrict__ W2, size_t wrow, int64_t M,
                     const uint8_t *__restrict__ A, size_t arow, const float *__restrict__ bias,
                     float *__restrict__ Y, int64_t N, int64_t nunits, int RB, size_t region) {
    MI_PDL_ENTRY();
    extern __shared__ uint4 smem[];
    const int64_t m0 = (int64_t)blockIdx.x * RB;
    const int rows = (int)(M - m0 < RB ? M - m0 : RB);
    const size_t nbytes = (size_t)rows * wrow, total = (size_t)M * wrow;
    size_t lead = 0, lead2 = 0;
    if (FUSED)
        stage_pair(smem, W + (size_t)m0 * wrow, W, W + total, smem + region / 16, W2 + (size_t)m0 * wrow, W2,
                   W2 + total, nbytes, &lead, &lead2);
    else
        lead = stage_bytes(smem, W + (size_t)m0 * wrow, nbytes, W, W + total);
    __syncthreads();
    staged_rows_dot<WT, NC, FUSED, true>((const uint8_t *)smem + lead, (const uint8_t *)smem + region + lead2, wrow, M,
                                         m0, rows, RB, A, arow, bias, Y, N, nunits);
}

/* ---------------- launchers ---------------- */

/* bytes of one weight row, 0 when the type has no quantized dot on the device */
static size_t staged_wrow(mi_type wt, int64_t K) {
    return mi7b_act_row_bytes(wt, K) > 0 ? mi_row_size(wt, K) : 0;
}

extern "C" bool mi7e_matvec_staged_supported(mi_type wt, int64_t K, int64_t N) {
    const size_t wrow = staged_wrow(wt, K);
    return wrow > 0 && wrow <= MMV_ROW_MAX && N >= 1 && N <= MI7E_MATVEC_MAX_N;
}

extern "C" size_t mi7e_matvec_staged_workspace(mi_type wt, int64_t K, int64_t N) {
    return mi7b_act_row_bytes(wt, K) * (size_t)(N > 0 ? N : 0);
}

template <int WT, bool FUSED>
static mi_status launch_staged(cudaStream_t st, const uint8_t *w, const uint8_t *w2, const uint8_t *a, size_t arow,
                               const float *bias, float *y, int64_t K, int64_t M, int64_t N) {
    const size_t wrow = mi_row_size((mi_type)WT, K);
    const int regions = FUSED ? 2 : 1;
    const int rb = staged_rows_per_block(wrow, regions, M);
    const size_t region = staged_region(rb, wrow);
    const size_t smem = region * (size_t)regions;
    if (smem > MMV_SMEM_MAX)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_matvec_staged: row of %zu bytes too large to stage", wrow);
    const int64_t nb = (M + rb - 1) / rb;
    if (nb > 0x7fffffff) return mi_err(MI_ERR_INVALID, "mi7e_matvec_staged: M = %lld too large", (long long)M);
    const int64_t nunits = K / 32;
    if (N == 1) {
        MI_CU_CHECK(MI_PDL_LAUNCH((kernel_matvec_staged<WT, 1, FUSED>), (unsigned)nb, MMV_THREADS, smem, st, w, w2, wrow,
                                  M, a, arow, bias, y, N, nunits, rb, region));
        MI_CU_CHECK_LAUNCH("kernel_matvec_staged<NC=1>");
    } else {
        MI_CU_CHECK(MI_PDL_LAUNCH((kernel_matvec_staged<WT, MI7E_MATVEC_MAX_N, FUSED>), (unsigned)nb, MMV_THREADS, smem,
                                  st, w, w2, wrow, M, a, arow, bias, y, N, nunits, rb, region));
        MI_CU_CHECK_LAUNCH("kernel_matvec_staged<NC=8>");
    }
    return MI_OK;
}

/* the staged matmul on x's quantized rows xq (a supported shape) */
static mi_status staged_on_quantized(void *stream, mi_type wt, const void *w, const void *xq, const float *bias, float *y,
                                     int64_t K, int64_t M, int64_t N) {
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *wb = (const uint8_t *)w, *a = (const uint8_t *)xq;
    const size_t arow = mi7b_act_row_bytes(wt, K);
    MI_QTYPE_DISPATCH(wt, WT, return launch_staged<WT, false>(st, wb, NULL, a, arow, bias, y, K, M, N));
}

extern "C" mi_status mi7e_matvec_staged(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                        float *y, int64_t K, int64_t M, int64_t N, void *workspace) {
    if (!mi7e_matvec_staged_supported(wt, K, N) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_matvec_staged: type %s, K = %lld, N = %lld", mi_type_name(wt),
                      (long long)K, (long long)N);
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, N, workspace));
    return staged_on_quantized(stream, wt, w, workspace, bias, y, K, M, N);
}

extern "C" mi_status mi7e_matvec_staged_quantized(void *stream, mi_type wt, const void *w, const void *xq,
                                                  const float *bias, float *y, int64_t K, int64_t M, int64_t N) {
    if (!mi7e_matvec_staged_supported(wt, K, N) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_matvec_staged: type %s, K = %lld, N = %lld", mi_type_name(wt),
                      (long long)K, (long long)N);
    if (!xq) return mi_err(MI_ERR_INTERNAL, "mi7e_matvec_staged: no quantized activations");
    return staged_on_quantized(stream, wt, w, xq, bias, y, K, M, N);
}

extern "C" mi_status mi7e_ffn_staged(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                                     int64_t K, int64_t F, int64_t N, void *workspace) {
    if (!mi7e_matvec_staged_supported(wt, K, N) || F <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_ffn_staged: type %s, K = %lld, N = %lld", mi_type_name(wt),
                      (long long)K, (long long)N);
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, N, workspace));
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *g = (const uint8_t *)wg, *u = (const uint8_t *)wu, *a = (const uint8_t *)workspace;
    const size_t arow = mi7b_act_row_bytes(wt, K);
    MI_QTYPE_DISPATCH(wt, WT, return launch_staged<WT, true>(st, g, u, a, arow, NULL, y, K, F, N));
}

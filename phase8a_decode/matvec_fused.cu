/* One-token (N = 1) quantized matmul with its neighbours folded in: the RMS norm that feeds it
 * (NORM: x is normalized while it is quantized) and the residual add that follows it (RES:
 * y = r + W @ x). A block of 8 warps first quantizes x into shared memory with 7b's quantizer
 * (quant_act.cuh), then each warp dots whole weight rows in 7b's order: lane l takes units l,
 * l + 32, ... of the row (mi7b_unit_dot on the shared copy), then the xor butterfly. That is
 * kernel_mm_q's order and expression, and this file is built like mm_quant.cu (no --fmad=false),
 * so y equals 7b's matmul bit for bit; the norm is written with explicit round-to-nearest
 * operations (__fmul_rn, __fadd_rn: never contracted), so it is MI_OP_RMS_NORM's canonical
 * arithmetic (docs/NUMERICS.md) and x's quantized bytes equal those of the unfused path. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/quant_act.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"
#include "phase8a_decode/decode8a.h"
#include "phase8a_decode/run_rows.cuh"
#include "common/core/mi_canon.h"
#include "phase7a_skeleton/cuda_pdl.cuh"

#define FZ_THREADS 256
#define FZ_WARPS (FZ_THREADS / 32)
#define FZ_SMEM_MAX (46u << 10)   /* x, w, the quantized row; under 48 KB: no opt-in attribute */

/* The block's prologue, every step one memory round trip at most:
 *  1. each warp asks L2 for the weight bytes of its rows (prefetch.global.L2), so the weights
 *     stream from HBM while x is prepared;
 *  2. the block copies x (and the norm weight) into shared memory, all loads in flight at once;
 *  3. NORM: every warp computes the scale itself from the shared copy in the canonical order
 *     (lane j sums x[i]^2 for i = j, j + 32, ..., then the butterfly): the same bits in every
 *     warp, no second barrier;
 *  4. the warps quantize x' block by block into shared memory (7b's quantizer functions).
 * Then each warp dots its rows in 7b's order. Shared memory: x, [w,] the quantized row. */
/* one weight's rows (a run's rows: run_rows.cuh, item d13) */
struct fz_rows_one {
    const uint8_t *W;
    size_t wrow;
    const float *bias;
    float *Y;
    __device__ __forceinline__ const uint8_t *w(int64_t m) const { return W + (size_t)m * wrow; }
    __device__ __forceinline__ float add_bias(int64_t m, float s) const { return bias ? s + bias[m] : s; }
    __device__ __forceinline__ float *y(int64_t m) const { return Y + m; }
};

/* steps 2-4 of the prologue: x (and the norm weight) copied into shared memory sx (sw), the
 * norm's scale computed by every warp, x' quantized block by block into As; the block's barrier
 * at the end */
template <int WT, bool NORM>
__device__ __forceinline__ void fz_quantize_x(int64_t K, const float *__restrict__ X, const float *__restrict__ nw,
                                              float eps, float *sx, float *sw, uint8_t *As) {
    constexpr int AT = wtraits<WT>::act;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int64_t i = threadIdx.x; i < K; i += FZ_THREADS) {   /* 2 */
        sx[i] = __ldg(X + i);
        if (NORM) sw[i] = __ldg(nw + i);
    }
    __syncthreads();
    float scale = 1.0f;
    if constexpr (NORM) {   /* 3 */
        float acc = 0.0f;
#pragma unroll 8
        for (int64_t i = lane; i < K; i += 32) acc = __fadd_rn(acc, __fmul_rn(sx[i], sx[i]));
        for (int off = 16; off >= 1; off >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, off));
        scale = mi_canon_rms_scale(acc, K, eps);
    }
    if constexpr (AT == MI_TYPE_Q8_K) {   /* 4 */
        for (int64_t b = warp; b < K / 256; b += FZ_WARPS) {   /* warp-uniform */
            float v[8];
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const int64_t i = b * 256 + 8 * lane + e;
                v[e] = NORM ? __fmul_rn(__fmul_rn(sx[i], scale), sw[i]) : sx[i];
            }
            quant_q8_k_values(v, As + (size_t)b * AK_BYTES, lane);
        }
    } else {
        for (int64_t b = warp; b < K / 32; b += FZ_WARPS) {
            const int64_t i = b * 32 + lane;
            quant_q8_1_value(NORM ? __fmul_rn(__fmul_rn(sx[i], scale), sw[i]) : sx[i], As + (size_t)b * A8_BYTES, lane);
        }
    }
    __syncthreads();
}

/* QX (item d31): x comes quantized (Aq, 7b's quantizer's row, written by the kernel before):
 * steps 2-4 are skipped and the dots read Aq through the read-only cache.
 * ahead (item d37): each lane also unpacks the first unit it dots (unit lane of the warp's first
 * row) into registers before the wait, so the first dots need no round trip after the prologue
 * (at the 0.5B's K = 896 a row is 28 units: the whole row). The same unit, the same values. */
template <int WT, bool NORM, bool RES, class Rows, bool QX = false>
__device__ __forceinline__ void matvec_fused_rows(const Rows &rowmap, size_t wrow, int64_t M, int64_t K,
                                                  const float *__restrict__ X, const float *__restrict__ nw, float eps,
                                                  const float *__restrict__ R, int rows, bool ahead,
                                                  const uint8_t *__restrict__ Aq = NULL) {
    extern __shared__ uint4 smem_fz[];
    float *sx = (float *)smem_fz, *sw = sx + K;
    uint8_t *As = (uint8_t *)(sx + (NORM ? 2 : 1) * K);
    const uint8_t *A = QX ? Aq : As;
    constexpr int AT = wtraits<WT>::act;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t m0 = (int64_t)blockIdx.x * rows;
    const int64_t nunits = K / 32;
    pdl_trigger_early();
    wunit w0;   /* ahead: unit lane of the warp's first row */
    const bool have0 = ahead && warp < rows && m0 + warp < M && lane < nunits;
    if (have0) unit_unpack<WT>(rowmap.w(m0 + warp), lane, w0);
    for (int r = warp; r < rows && m0 + r < M; r += FZ_WARPS) {   /* 1 */
        const uint8_t *wr = rowmap.w(m0 + r);
        for (size_t b = (size_t)lane * 128; b < wrow; b += 32 * 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(wr + b));
    }
    pdl_wait_trigger();   /* x, r: the kernels before this one wrote them (d6) */
    if constexpr (!QX) fz_quantize_x<WT, NORM>(K, X, nw, eps, sx, sw, As);   /* 2-4 */
    for (int r = warp; r < rows; r += FZ_WARPS) {
        const int64_t m = m0 + r;
        if (m >= M) break;   /* warp-uniform; no barrier follows */
        const uint8_t *wr = rowmap.w(m);
        float acc = 0.0f;
        for (int64_t u = lane; u < nunits; u += 32) {
            wunit w;
            if (have0 && r == warp && u == lane) w = w0;
            else unit_unpack<WT>(wr, u, w);
            acc += mi7b_unit_dot<AT, QX>(w, A, u);
        }
        const float s = warp_sum(acc);
        if (lane == 0) {
            const float y = rowmap.add_bias(m, s);
            *rowmap.y(m) = RES ? R[m] + y : y;
        }
    }
}

template <int WT, bool NORM, bool RES>
__global__ void __launch_bounds__(FZ_THREADS)
kernel_matvec_fused(const uint8_t *__restrict__ W, size_t wrow, int64_t M, int64_t K, const float *__restrict__ X,
                    const float *__restrict__ nw, float eps, const float *__restrict__ bias,
                    const float *__restrict__ R, float *__restrict__ Y, int rows, bool ahead) {
    const fz_rows_one rowmap = {W, wrow, bias, Y};
    matvec_fused_rows<WT, NORM, RES>(rowmap, wrow, M, K, X, nw, eps, R, rows, ahead);
}

/* shared memory of a launch: x, the norm weight (NORM), the quantized row */
static size_t fused_smem(mi_type wt, int64_t K, bool norm) {
    return (size_t)K * sizeof(float) * (norm ? 2 : 1) + mi7b_act_row_bytes(wt, K);
}

extern "C" bool mi8a_matvec_fused_supported(mi_type wt, int64_t K, int64_t M) {
    if (mi7b_act_row_bytes(wt, K) == 0 || fused_smem(wt, K, true) > FZ_SMEM_MAX || M <= 0) return false;
    return K < MI8A_FUSED_MAX_K && M <= MI8A_FUSED_MAX_M;
}

/* rows per block: 8 warps' worth at least, more when M would give over two blocks per SM */
static int fused_rows(int64_t M) {
    int64_t r = M / (2 * (int64_t)mi7e_sm_count());
    if (r < FZ_WARPS) r = FZ_WARPS;
    if (r > 8 * FZ_WARPS) r = 8 * FZ_WARPS;
    return (int)r;
}

template <int WT>
static mi_status launch_fused(cudaStream_t st, const uint8_t *w, int64_t K, int64_t M, const float *x,
                              const float *nw, float eps, const float *bias, const float *r, float *y) {
    const size_t wrow = mi_row_size((mi_type)WT, K), smem = fused_smem((mi_type)WT, K, nw != NULL);
    const int rows = fused_rows(M);
    const int64_t nb = (M + rows - 1) / rows;
    if (nb > 0x7fffffff) return mi_err(MI_ERR_INVALID, "mi8a_matvec_fused: M = %lld too large", (long long)M);
    const bool pdl = mi8a_pdl_on();
    void (*k)(const uint8_t *, size_t, int64_t, int64_t, const float *, const float *, float, const float *,
              const float *, float *, int, bool) = nw && r ? kernel_matvec_fused<WT, true, true>
                                             : nw    ? kernel_matvec_fused<WT, true, false>
                                             : r     ? kernel_matvec_fused<WT, false, true>
                                                     : kernel_matvec_fused<WT, false, false>;
    MI_CU_CHECK(pdl_launch(pdl, k, dim3((unsigned)nb), dim3(FZ_THREADS), smem, st, w, wrow, M, K, x, nw, eps, bias, r, y,
                           rows, mi8a_unit_ahead_on()));
    MI_CU_CHECK_LAUNCH("kernel_matvec_fused");
    return MI_OK;
}

extern "C" mi_status mi8a_matvec_fused(void *stream, mi_type wt, const void *w, const float *x, const float *nw,
                                       float eps, const float *bias, const float *r, float *y, int64_t K, int64_t M) {
    if (!mi8a_matvec_fused_supported(wt, K, M))
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_matvec_fused: type %s, K = %lld, M = %lld", mi_type_name(wt),
                      (long long)K, (long long)M);
    if (!w || !x || !y) return mi_err(MI_ERR_INVALID, "mi8a_matvec_fused: null pointer");
    const cudaStream_t st = (cudaStream_t)stream;
    MI_QTYPE_DISPATCH(wt, WT, return launch_fused<WT>(st, (const uint8_t *)w, K, M, x, nw, eps, bias, r, y));
}

/* d31: the same rows on x already quantized (xq) */
template <int WT, bool RES>
__global__ void __launch_bounds__(FZ_THREADS)
kernel_matvec_fused_qx(const uint8_t *__restrict__ W, size_t wrow, int64_t M, int64_t K, const uint8_t *__restrict__ Aq,
                       const float *__restrict__ bias, const float *__restrict__ R, float *__restrict__ Y, int rows,
                       bool ahead) {
    const fz_rows_one rowmap = {W, wrow, bias, Y};
    matvec_fused_rows<WT, false, RES, fz_rows_one, true>(rowmap, wrow, M, K, NULL, NULL, 0.0f, R, rows, ahead, Aq);
}

template <int WT>
static mi_status launch_fused_qx(cudaStream_t st, const uint8_t *w, const uint8_t *xq, const float *bias, const float *r,
                                 float *y, int64_t K, int64_t M) {
    const size_t wrow = mi_row_size((mi_type)WT, K);
    const int rows = fused_rows(M);
    const int64_t nb = (M + rows - 1) / rows;
    const bool pdl = mi8a_pdl_on(), ahead = mi8a_unit_ahead_on();
    if (r)
        MI_CU_CHECK(pdl_launch(pdl, kernel_matvec_fused_qx<WT, true>, dim3((unsigned)nb), dim3(FZ_THREADS), 0, st, w,
                               wrow, M, K, xq, bias, r, y, rows, ahead));
    else
        MI_CU_CHECK(pdl_launch(pdl, kernel_matvec_fused_qx<WT, false>, dim3((unsigned)nb), dim3(FZ_THREADS), 0, st, w,
                               wrow, M, K, xq, bias, r, y, rows, ahead));
    MI_CU_CHECK_LAUNCH("kernel_matvec_fused_qx");
    return MI_OK;
}

extern "C" mi_status mi8a_matvec_fused_qx(void *stream, mi_type wt, const void *w, const void *xq, const float *bias,
                                          const float *r, float *y, int64_t K, int64_t M) {
    if (!mi8a_matvec_fused_supported(wt, K, M))
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_matvec_fused_qx: type %s, K = %lld, M = %lld", mi_type_name(wt),
                      (long long)K, (long long)M);
    if (!w || !xq || !y || ((uintptr_t)xq & 3)) return mi_err(MI_ERR_INVALID, "mi8a_matvec_fused_qx: null or unaligned");
    const uint8_t *wb = (const uint8_t *)w, *a = (const uint8_t *)xq;
    MI_QTYPE_DISPATCH(wt, WT, return launch_fused_qx<WT>((cudaStream_t)stream, wb, a, bias, r, y, K, M));
}

/* ---- d13: a run of one-token matmuls of one x (the 0.5B's q, k, v) in one launch: every block
 * quantizes x as above, then its warps dot the run's rows (run_rows.cuh) in 7b's order, so each
 * output equals 7b's matmul bit for bit; one kernel where 7b takes a quantization and one
 * launch a weight. */
template <int WT, bool NORM>
__global__ void __launch_bounds__(FZ_THREADS)
kernel_matvec_fused_run(const run_rows rowmap, int64_t M, int64_t K, const float *__restrict__ X,
                        const float *__restrict__ nw, float eps, int rows, bool ahead) {
    matvec_fused_rows<WT, NORM, false>(rowmap, rowmap.wrow, M, K, X, nw, eps, NULL, rows, ahead);
}

/* nw: d17, x RMS-normalized with weight nw first (NORM's prologue above) */
template <int WT>
static mi_status launch_fused_run(cudaStream_t st, const run_rows &rowmap, int64_t M, int64_t K, const float *x,
                                  const float *nw, float eps) {
    const size_t smem = fused_smem((mi_type)WT, K, nw != NULL);
    const int rows = fused_rows(M);
    const int64_t nb = (M + rows - 1) / rows;
    if (nw)
        MI_CU_CHECK(pdl_launch(mi8a_pdl_on(), kernel_matvec_fused_run<WT, true>, dim3((unsigned)nb), dim3(FZ_THREADS),
                               smem, st, rowmap, M, K, x, nw, eps, rows, mi8a_unit_ahead_on()));
    else
        MI_CU_CHECK(pdl_launch(mi8a_pdl_on(), kernel_matvec_fused_run<WT, false>, dim3((unsigned)nb), dim3(FZ_THREADS),
                               smem, st, rowmap, M, K, x, nw, eps, rows, mi8a_unit_ahead_on()));
    MI_CU_CHECK_LAUNCH("kernel_matvec_fused_run");
    return MI_OK;
}

extern "C" mi_status mi8a_matvec_fused_run(void *stream, mi_type wt, const mi8a_run_seg *seg, int n, const float *x,
                                           const float *nw, float eps, int64_t K) {
    if (!seg || !x || n < 1 || n > MI8A_RUN_MAX) return mi_err(MI_ERR_INVALID, "mi8a_matvec_fused_run: %d weights", n);
    run_rows rowmap;
    int64_t M = 0;
    if (!run_rows_make(&rowmap, seg, n, mi_row_size(wt, K), &M))
        return mi_err(MI_ERR_INVALID, "mi8a_matvec_fused_run: a weight null or without rows");
    if (!mi8a_matvec_fused_supported(wt, K, M))
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_matvec_fused_run: type %s, K = %lld, %lld rows", mi_type_name(wt),
                      (long long)K, (long long)M);
    MI_QTYPE_DISPATCH(wt, WT, return launch_fused_run<WT>((cudaStream_t)stream, rowmap, M, K, x, nw, eps));
}

/* Quantized matmul W [K, M] (Q4_0..Q6_K) @ x F32 [K, N] (+ bias [M]) -> y F32 [M, N].
 * Step 1 quantizes x exactly as the CPU reference does (Q8_0 / Q8_1 / Q8_K, quant_ref.c
 * arithmetic), so every integer dot product equals the CPU's; only the float sum over
 * units is done in this kernel's own (fixed) order. Step 2: one warp per weight row,
 * lane l takes units l, l+32, ... of the row, NC token columns at once, then a
 * xor-butterfly. No atomics: repeated runs are bit-identical. Kernels first, launchers last. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/quant_act.cuh"
#include "phase7b_ops/mm_rows.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7a_skeleton/cuda_pdl.cuh"

/* Device activation layouts (workspace): Q8_0 and Q8_1 both use the 36-byte Q8_1 block
 * (d, s, qs[32]) so that the int8 data is 4-byte aligned; for Q8_0 weights s is unused
 * and (d, qs) are bit-identical to the CPU's Q8_0 block. Q8_K is ggml's 292-byte block. */

/* ---------------- activation quantizers (quant_act.cuh) ---------------- */

/* one warp per 32-element block */
__global__ void kernel_quant_q8_1(const float *__restrict__ x, uint8_t *__restrict__ a,
                                  int64_t K, int64_t n_blocks_total) {
    MI_PDL_ENTRY();
    const int lane = threadIdx.x & 31;
    const int64_t nb = K / 32;
    for (int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; g < n_blocks_total;
         g += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        const int64_t n = g / nb, ib = g % nb;
        quant_q8_1_block(x + n * K + ib * 32, a + (size_t)g * A8_BYTES, lane);
    }
}

/* one warp per 256-element super-block */
__global__ void kernel_quant_q8_k(const float *__restrict__ x, uint8_t *__restrict__ a,
                                  int64_t K, int64_t n_blocks_total) {
    MI_PDL_ENTRY();
    const int lane = threadIdx.x & 31;
    const int64_t nb = K / 256;
    for (int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; g < n_blocks_total;
         g += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        const int64_t n = g / nb, ib = g % nb;
        quant_q8_k_block(x + n * K + ib * 256, a + (size_t)g * AK_BYTES, lane);
    }
}

/* ---------------- matmul: warp per row, NC columns (mm_rows.cuh) ---------------- */

template <int WT, int NC>
__global__ void kernel_mm_q(const uint8_t *__restrict__ W, size_t wrow, const uint8_t *__restrict__ A,
                            size_t arow, const float *__restrict__ bias, float *__restrict__ Y,
                            int64_t M, int64_t N, int64_t nunits) {
    MI_PDL_ENTRY();
    const int64_t m = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int64_t n0 = (int64_t)blockIdx.y * NC;
    if (m >= M) return; /* whole warps leave together: no block barrier follows */
    const mm_rows_one rows = {W, wrow, bias, Y, M};
    mm_q_row<WT, NC>(rows, m, A, arow, N, n0, nunits);
}

/* ---------------- launchers ---------------- */

static int64_t wt_block(mi_type wt) {
    switch (wt) {
    case MI_TYPE_Q4_0: case MI_TYPE_Q4_1: case MI_TYPE_Q5_0: case MI_TYPE_Q5_1: case MI_TYPE_Q8_0:
        return 32;
    case MI_TYPE_Q4_K: case MI_TYPE_Q5_K: case MI_TYPE_Q6_K:
        return 256;
    default:
        return 0;
    }
}
extern "C" mi_status mi7b_matmul_float(void *stream, mi_type wt, const void *w, const float *x,
                                       const float *bias, float *y, int64_t K, int64_t M, int64_t N);
extern "C" bool mi7b_matmul_float_supported(mi_type wt, int64_t K);

extern "C" bool mi7b_matmul_supported(mi_type wt, int64_t K) {
    if (wt == MI_TYPE_F32 || wt == MI_TYPE_F16 || wt == MI_TYPE_BF16)
        return mi7b_matmul_float_supported(wt, K);
    const int64_t bk = wt_block(wt);
    return bk > 0 && K > 0 && K % bk == 0;
}

extern "C" size_t mi7b_act_row_bytes(mi_type wt, int64_t K) {
    const int64_t bk = wt_block(wt);
    if (bk == 0 || K <= 0 || K % bk != 0) return 0;
    return bk == 256 ? (size_t)(K / 256) * AK_BYTES : (size_t)(K / 32) * A8_BYTES;
}

extern "C" size_t mi7b_matmul_workspace(mi_type wt, int64_t K, int64_t N) {
    return mi7b_act_row_bytes(wt, K) * (size_t)(N > 0 ? N : 0);
}

extern "C" mi_status mi7b_quantize_act(void *stream, mi_type wt, const float *x, int64_t K, int64_t N,
                                       void *dst) {
    const int64_t bk = wt_block(wt);
    if (bk == 0 || K <= 0 || K % bk != 0 || N <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7b_quantize_act: %s, K = %lld, N = %lld", mi_type_name(wt),
                      (long long)K, (long long)N);
    if (!dst) return mi_err(MI_ERR_INTERNAL, "mi7b_quantize_act: no workspace for %s", mi_type_name(wt));
    cudaStream_t st = (cudaStream_t)stream;
    const int64_t nblk = N * (K / bk);
    const int threads = 256;
    const unsigned qgrid = mi7b_blocks(nblk * 32, threads);
    if (bk == 256) {
        MI_CU_CHECK(MI_PDL_LAUNCH(kernel_quant_q8_k, qgrid, threads, 0, st, x, (uint8_t *)dst, K, nblk));
        MI_CU_CHECK_LAUNCH("kernel_quant_q8_k");
    } else {
        MI_CU_CHECK(MI_PDL_LAUNCH(kernel_quant_q8_1, qgrid, threads, 0, st, x, (uint8_t *)dst, K, nblk));
        MI_CU_CHECK_LAUNCH("kernel_quant_q8_1");
    }
    return MI_OK;
}

template <int WT>
static mi_status launch_mm(cudaStream_t st, const uint8_t *w, const uint8_t *a, size_t arow,
                           const float *bias, float *y, int64_t K, int64_t M, int64_t N) {
    const size_t wrow = (size_t)(K / (32 * wtraits<WT>::units)) * wtraits<WT>::bytes;
    const int64_t nunits = K / 32;
    if (N == 1) {
        const int warps = 4;
        dim3 grid((unsigned)((M + warps - 1) / warps), 1);
        MI_CU_CHECK(MI_PDL_LAUNCH((kernel_mm_q<WT, 1>), grid, 32 * warps, 0, st, w, wrow, a, arow, bias, y, M, N,
                                  nunits));
        MI_CU_CHECK_LAUNCH("kernel_mm_q<NC=1>");
    } else {
        /* 8 warps share the same 8 activation columns: they hit L1 for each other */
        const int warps = 8, nc = 8;
        const int64_t gy = (N + nc - 1) / nc;
        if (gy > 65535) return mi_err(MI_ERR_INVALID, "mi7b_matmul: N = %lld too large", (long long)N);
        dim3 grid((unsigned)((M + warps - 1) / warps), (unsigned)gy);
        MI_CU_CHECK(MI_PDL_LAUNCH((kernel_mm_q<WT, 8>), grid, 32 * warps, 0, st, w, wrow, a, arow, bias, y, M, N,
                                  nunits));
        MI_CU_CHECK_LAUNCH("kernel_mm_q<NC=8>");
    }
    return MI_OK;
}

extern "C" mi_status mi7b_matmul_quantized(void *stream, mi_type wt, const void *w, const void *xq, const float *bias,
                                           float *y, int64_t K, int64_t M, int64_t N) {
    if (!mi7b_act_row_bytes(wt, K) || !mi7b_matmul_supported(wt, K) || M <= 0 || N <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7b_matmul_quantized: type %s with K = %lld", mi_type_name(wt),
                      (long long)K);
    if (!xq) return mi_err(MI_ERR_INTERNAL, "mi7b_matmul_quantized: no quantized activations");
    const uint8_t *wb = (const uint8_t *)w, *a = (const uint8_t *)xq;
    const size_t arow = mi7b_act_row_bytes(wt, K);
    MI_QTYPE_DISPATCH(wt, WT, return launch_mm<WT>((cudaStream_t)stream, wb, a, arow, bias, y, K, M, N));
}

extern "C" mi_status mi7b_matmul(void *stream, mi_type wt, const void *w, const float *x,
                                 const float *bias, float *y, int64_t K, int64_t M, int64_t N,
                                 void *workspace) {
    if (wt == MI_TYPE_F32 || wt == MI_TYPE_F16 || wt == MI_TYPE_BF16)
        return mi7b_matmul_float(stream, wt, w, x, bias, y, K, M, N);
    if (!mi7b_matmul_supported(wt, K) || M <= 0 || N <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7b_matmul: type %s with K = %lld", mi_type_name(wt),
                      (long long)K);
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, N, workspace));
    cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *a = (const uint8_t *)workspace;
    const size_t arow = mi7b_act_row_bytes(wt, K);
    const uint8_t *wb = (const uint8_t *)w;
    MI_QTYPE_DISPATCH(wt, WT, return launch_mm<WT>(st, wb, a, arow, bias, y, K, M, N));
}

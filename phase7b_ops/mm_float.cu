/* Float-weight matmul: W [K, M] (F32 | F16 | BF16) @ x F32 [K, N] (+ bias [M]) -> y F32 [M, N].
 * Weights are widened exactly to F32 and multiplied with unquantized F32 activations, as
 * the CPU reference does; F32 accumulation in a fixed order (no atomics), so repeated runs
 * are bit-identical. N <= 8: one warp per row; otherwise a 64 x 64 shared-memory tile. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"

template <int WT>
__device__ __forceinline__ float wload(const void *w, size_t i) {
    if (WT == MI_TYPE_F32) return ((const float *)w)[i];
    if (WT == MI_TYPE_F16) return __half2float(__ushort_as_half(((const uint16_t *)w)[i]));
    return __uint_as_float((uint32_t)((const uint16_t *)w)[i] << 16);
}

template <int WT, int NC>
__global__ void kernel_mm_f_rows(const void *__restrict__ W, const float *__restrict__ X,
                                 const float *__restrict__ bias, float *__restrict__ Y,
                                 int64_t K, int64_t M, int64_t N) {
    const int lane = threadIdx.x & 31;
    const int64_t m = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int64_t n0 = (int64_t)blockIdx.y * NC;
    if (m >= M) return;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
    for (int64_t k = lane; k < K; k += 32) {
        const float wv = wload<WT>(W, (size_t)m * K + k);
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (n0 + c < N) acc[c] += wv * X[(size_t)(n0 + c) * K + k];
    }
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const float s = warp_sum(acc[c]);
        if (lane == 0 && n0 + c < N) Y[(size_t)(n0 + c) * M + m] = bias ? s + bias[m] : s;
    }
}

/* 64 (rows of W) x 64 (tokens) tile, 256 threads, 4 x 4 outputs each, K in steps of 16 */
#define TM 64
#define TN 64
#define TK 16
template <int WT>
__global__ void kernel_mm_f_tile(const void *__restrict__ W, const float *__restrict__ X,
                                 const float *__restrict__ bias, float *__restrict__ Y,
                                 int64_t K, int64_t M, int64_t N) {
    __shared__ float ws[TK][TM + 1];
    __shared__ float xs[TK][TN + 1];
    const int tid = threadIdx.x;
    const int tr = tid / 16, tc = tid % 16; /* 16 x 16 threads, each 4 x 4 */
    const int64_t m0 = (int64_t)blockIdx.x * TM, n0 = (int64_t)blockIdx.y * TN;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += TK) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int idx = tid + 256 * e;   /* 0 .. 1023 = 64 rows x 16 k */
            const int r = idx / TK, kk = idx % TK;
            const int64_t m = m0 + r, n = n0 + r, k = k0 + kk;
            ws[kk][r] = (m < M && k < K) ? wload<WT>(W, (size_t)m * K + k) : 0.0f;
            xs[kk][r] = (n < N && k < K) ? X[(size_t)n * K + k] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = ws[kk][tr * 4 + i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = xs[kk][tc * 4 + j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t m = m0 + tr * 4 + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t n = n0 + tc * 4 + j;
            if (n < N) Y[(size_t)n * M + m] = bias ? acc[i][j] + bias[m] : acc[i][j];
        }
    }
}

template <int WT>
static mi_status launch_mm_f(cudaStream_t st, const void *w, const float *x, const float *bias,
                             float *y, int64_t K, int64_t M, int64_t N) {
    if (N <= 8) {
        const int warps = 4;
        dim3 grid((unsigned)((M + warps - 1) / warps), 1);
        if (N == 1) {
            kernel_mm_f_rows<WT, 1><<<grid, 32 * warps, 0, st>>>(w, x, bias, y, K, M, N);
        } else {
            kernel_mm_f_rows<WT, 8><<<grid, 32 * warps, 0, st>>>(w, x, bias, y, K, M, N);
        }
        MI_CU_CHECK_LAUNCH("kernel_mm_f_rows");
        return MI_OK;
    }
    const int64_t gy = (N + TN - 1) / TN;
    if (gy > 65535) return mi_err(MI_ERR_INVALID, "mi7b_matmul: N = %lld too large", (long long)N);
    dim3 grid((unsigned)((M + TM - 1) / TM), (unsigned)gy);
    kernel_mm_f_tile<WT><<<grid, 256, 0, st>>>(w, x, bias, y, K, M, N);
    MI_CU_CHECK_LAUNCH("kernel_mm_f_tile");
    return MI_OK;
}

extern "C" bool mi7b_matmul_float_supported(mi_type wt, int64_t K) {
    return (wt == MI_TYPE_F32 || wt == MI_TYPE_F16 || wt == MI_TYPE_BF16) && K > 0;
}

extern "C" mi_status mi7b_matmul_float(void *stream, mi_type wt, const void *w, const float *x,
                                       const float *bias, float *y, int64_t K, int64_t M, int64_t N) {
    cudaStream_t st = (cudaStream_t)stream;
    if (K <= 0 || M <= 0 || N <= 0) return mi_err(MI_ERR_INVALID, "mi7b_matmul: empty shape");
    switch (wt) {
    case MI_TYPE_F32: return launch_mm_f<MI_TYPE_F32>(st, w, x, bias, y, K, M, N);
    case MI_TYPE_F16: return launch_mm_f<MI_TYPE_F16>(st, w, x, bias, y, K, M, N);
    case MI_TYPE_BF16: return launch_mm_f<MI_TYPE_BF16>(st, w, x, bias, y, K, M, N);
    default: return mi_err(MI_ERR_UNSUPPORTED, "mi7b_matmul_float: type %s", mi_type_name(wt));
    }
}

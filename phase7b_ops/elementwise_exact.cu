/* Elementwise ops, bit-identical to the CPU backend: ADD and MUL (one IEEE op per element,
 * a [D, 1] operand broadcast over columns), SILU and SWIGLU through mi_canon.h (no libm
 * exp). Built with --fmad=false. Grid-stride loops; each element written once. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "common/core/mi_canon.h"
#include "phase7a_skeleton/cuda_pdl.cuh"

/* a [D, N] op b [D, bN] -> y [D, N], bN = N or 1 */
template <int OP>
__global__ void kernel_binary(const float *__restrict__ a, const float *__restrict__ b,
                              float *__restrict__ y, int64_t D, int64_t n, bool bcast) {
    MI_PDL_ENTRY();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float bv = b[bcast ? i % D : i];
        y[i] = OP == 0 ? a[i] + bv : a[i] * bv;
    }
}

__global__ void kernel_silu(const float *__restrict__ x, float *__restrict__ y, int64_t n) {
    MI_PDL_ENTRY();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = mi_canon_silu(x[i]);
}

__global__ void kernel_swiglu(const float *__restrict__ g, const float *__restrict__ u,
                              float *__restrict__ y, int64_t n) {
    MI_PDL_ENTRY();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = mi_canon_swiglu(g[i], u[i]);
}

extern "C" mi_status mi7b_binary(void *stream, int op, const float *a, const float *b, float *y,
                                 int64_t D, int64_t N, int64_t bN) {
    const int64_t n = D * N;
    if (n <= 0) return mi_err(MI_ERR_INVALID, "mi7b_binary: empty shape");
    if (bN != N && bN != 1) return mi_err(MI_ERR_INVALID, "mi7b_binary: bad broadcast");
    const int threads = 256;
    const unsigned grid = mi7b_blocks(n, threads);
    cudaStream_t st = (cudaStream_t)stream;
    if (op == 0) MI_CU_CHECK(MI_PDL_LAUNCH(kernel_binary<0>, grid, threads, 0, st, a, b, y, D, n, bN != N));
    else MI_CU_CHECK(MI_PDL_LAUNCH(kernel_binary<1>, grid, threads, 0, st, a, b, y, D, n, bN != N));
    MI_CU_CHECK_LAUNCH(op == 0 ? "kernel_binary<add>" : "kernel_binary<mul>");
    return MI_OK;
}

extern "C" mi_status mi7b_silu(void *stream, const float *x, float *y, int64_t n) {
    if (n <= 0) return mi_err(MI_ERR_INVALID, "mi7b_silu: empty shape");
    MI_CU_CHECK(MI_PDL_LAUNCH(kernel_silu, mi7b_blocks(n, 256), 256, 0, (cudaStream_t)stream, x, y, n));
    MI_CU_CHECK_LAUNCH("kernel_silu");
    return MI_OK;
}

extern "C" mi_status mi7b_swiglu(void *stream, const float *g, const float *u, float *y, int64_t n) {
    if (n <= 0) return mi_err(MI_ERR_INVALID, "mi7b_swiglu: empty shape");
    MI_CU_CHECK(MI_PDL_LAUNCH(kernel_swiglu, mi7b_blocks(n, 256), 256, 0, (cudaStream_t)stream, g, u, y, n));
    MI_CU_CHECK_LAUNCH("kernel_swiglu");
    return MI_OK;
}

/* RMS norm, whole-row and per-head (qwen3 q/k norm), bit-identical to the CPU backend.
 * The canonical order of docs/NUMERICS.md: one warp per row of G elements, lane j sums
 * x[i]*x[i] for i = j, j+32, ... in increasing i, xor-butterfly 16..1, mi_canon_rms_scale,
 * y = (x*scale)*w. Built with --fmad=false (the *_exact.cu rule in the Makefile). */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "common/core/mi_canon.h"
#include "phase7a_skeleton/cuda_pdl.cuh"

/* x [G, rows], w [G] -> y [G, rows]; warps stride over rows */
__global__ void kernel_rms_norm(const float *__restrict__ x, const float *__restrict__ w,
                                float *__restrict__ y, int64_t G, int64_t rows, float eps) {
    MI_PDL_ENTRY();
    const int lane = threadIdx.x & 31;
    const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows; r += warps) {
        const float *xr = x + (size_t)r * G;
        float acc = 0.0f;
        for (int64_t i = lane; i < G; i += 32) {
            const float sq = xr[i] * xr[i];
            acc = acc + sq;
        }
        for (int off = 16; off >= 1; off >>= 1) acc = acc + __shfl_xor_sync(0xffffffffu, acc, off);
        const float scale = mi_canon_rms_scale(acc, G, eps);
        float *yr = y + (size_t)r * G;
        for (int64_t i = lane; i < G; i += 32) yr[i] = (xr[i] * scale) * w[i];
    }
}

extern "C" mi_status mi7b_rms_norm(void *stream, const float *x, const float *w, float *y,
                                   int64_t G, int64_t rows, float eps) {
    if (G <= 0 || rows <= 0) return mi_err(MI_ERR_INVALID, "mi7b_rms_norm: empty shape");
    const int threads = 256;
    MI_CU_CHECK(MI_PDL_LAUNCH(kernel_rms_norm, mi7b_blocks(rows * 32, threads), threads, 0, (cudaStream_t)stream, x, w,
                              y, G, rows, eps));
    MI_CU_CHECK_LAUNCH("kernel_rms_norm");
    return MI_OK;
}

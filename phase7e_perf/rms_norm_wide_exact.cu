/* RMS norm with its loads in flight. 7b's kernel (one warp per row, lane j sums x[i]^2 for
 * i = j, j+32, ...) issues one load per add, so a single decode row waits one memory latency
 * per element: 17 us for the 7B's 3584-element row, 57 norms a token, about a fifth of a
 * decode step (MINFER_PROFILE=2 on the H200). Here a row gets a block: all of its loads go out
 * at once into shared memory, warp 0 then sums in the same increasing-i order from there, so
 * the canonical order of docs/NUMERICS.md is kept and the result is bit-identical to 7b's and
 * to the CPU's (4.8 us a 3584-element row vs 7b's 11.7 us, back-to-back launches on the H200;
 * a warp with eight __ldg loads in flight measured 21.5 us, with plain loads 13.4 us, so rows
 * too long for shared memory use 7b's kernel). Built with --fmad=false (the *_exact.cu rule),
 * as 7b's norm is. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"
#include "common/core/mi_canon.h"
#include "phase7e_perf/rms_row_scale.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"

/* One block per row: the whole block copies the row into shared memory (every load in
 * flight at once), warp 0 sums it in the canonical order from shared memory, the block
 * writes y. For rows of at most NRM_SMEM_MAX floats. */
#define NRM_BLOCK 256
#define NRM_SMEM_MAX 12280   /* the row and s_scale within the 48 KB a launch gets without opting in */
__global__ void __launch_bounds__(NRM_BLOCK)
kernel_rms_norm_wide(const float *__restrict__ x, const float *__restrict__ w, float *__restrict__ y, int64_t G,
                      int64_t rows, float eps) {
    MI_PDL_ENTRY();
    extern __shared__ float sx[];
    __shared__ float s_scale;
    const int tid = threadIdx.x, lane = tid & 31;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + (size_t)r * G;
#pragma unroll 4
        for (int64_t i = tid; i < G; i += NRM_BLOCK) sx[i] = xr[i];
        __syncthreads();
        if (tid < 32) rms_row_scale_warp0(sx, G, eps, lane, &s_scale);
        __syncthreads();
        const float scale = s_scale;
        float *yr = y + (size_t)r * G;
#pragma unroll 4
        for (int64_t i = tid; i < G; i += NRM_BLOCK) yr[i] = (sx[i] * scale) * w[i];
        __syncthreads();   /* sx and s_scale are reused by the next row */
    }
}

/* Rows that fit shared memory take the block form; longer rows take 7b's kernel (the one-warp
 * forms measured no faster than 7b's, see the file comment). */
extern "C" mi_status mi7e_rms_norm(void *stream, const float *x, const float *w, float *y, int64_t G, int64_t rows,
                                   float eps) {
    if (G <= 0 || rows <= 0) return mi_err(MI_ERR_INVALID, "mi7e_rms_norm: empty shape");
    if (G > NRM_SMEM_MAX) return mi7b_rms_norm(stream, x, w, y, G, rows, eps);
    const unsigned blocks = (unsigned)(rows < 65535 * 4 ? rows : 65535 * 4);
    MI_CU_CHECK(MI_PDL_LAUNCH(kernel_rms_norm_wide, blocks, NRM_BLOCK, (size_t)G * sizeof(float), (cudaStream_t)stream,
                              x, w, y, G, rows, eps));
    MI_CU_CHECK_LAUNCH("kernel_rms_norm_wide");
    return MI_OK;
}

/* The canonical RMS scale of a row staged in shared memory (docs/NUMERICS.md), as 7e's wide norm,
 * 8b's norm into x's f16 copy and the norm forms of the one-token Q4_K and Q6_K kernels
 * (matvec_q4k_kernel.cuh's norm_scale_block) compute it: warp 0, lane j summing sx[i]^2 for
 * i = j, j + 32, ... in increasing i, the xor butterfly over the lanes, then mi_canon_rms_scale;
 * lane 0 writes it to *scale. One function, so these kernels' norms are the same bits by
 * construction.
 * Include from *_exact.cu files only (built with --fmad=false: the squares are not contracted). */
#ifndef MI_RMS_ROW_SCALE_CUH
#define MI_RMS_ROW_SCALE_CUH
#include <stdint.h>
#include "common/core/mi_canon.h"

__device__ __forceinline__ void rms_row_scale_warp0(const float *sx, int64_t G, float eps, int lane, float *scale) {
    float acc = 0.0f;
#pragma unroll 16
    for (int64_t i = lane; i < G; i += 32) {
        const float sq = sx[i] * sx[i];
        acc = acc + sq;
    }
    for (int off = 16; off >= 1; off >>= 1) acc = acc + __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) *scale = mi_canon_rms_scale(acc, G, eps);
}
#endif

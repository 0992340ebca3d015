/* Item b35: a batch's FFN at 9..64 rows is its gate and up matmuls, 7b's SwiGLU (y = silu (g) u,
 * mi_canon_swiglu) and the down projection, which reads y as x's f16 copy made by its own copy
 * kernel. Here the
 * SwiGLU writes y and, beside it, that copy (x_f16_copy.cuh): the activation and the copy in one
 * launch. The same function on the same operands, built like 7b's (*_exact.cu: no contraction),
 * and each y rounded to f16 as the copy kernel rounds it: the same y and the same halves. */
#include <cuda_fp16.h>
#include "common/core/mi_canon.h"
#include "phase7b_ops/dev7b.cuh"
#include "phase8b_batch/batch8b.h"
#include "phase8b_batch/x_f16_copy.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"

/* a thread a group of 16 elements (rows of F % 16 == 0 elements: no group crosses a row) */
__global__ void __launch_bounds__(256)
kernel_swiglu_y_f16(const float *__restrict__ g, const float *__restrict__ u, float *__restrict__ y,
                    __half *__restrict__ xh, int64_t groups, bool eo) {
    MI_PDL_ENTRY();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < groups; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 *g4 = (const float4 *)(g + 16 * i), *u4 = (const float4 *)(u + 16 * i);
        float v[16];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float4 a = g4[j], b = u4[j];
            v[4 * j] = mi_canon_swiglu(a.x, b.x), v[4 * j + 1] = mi_canon_swiglu(a.y, b.y);
            v[4 * j + 2] = mi_canon_swiglu(a.z, b.z), v[4 * j + 3] = mi_canon_swiglu(a.w, b.w);
        }
        float4 *yo = (float4 *)(y + 16 * i);
#pragma unroll
        for (int j = 0; j < 4; j++) yo[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
        x_f16_store16(xh + 16 * i, v, eo);
    }
}

extern "C" mi_status mi8b_swiglu_y_f16(void *stream, const float *g, const float *u, float *y, void *xh, int64_t F,
                                       int64_t N, bool eo) {
    if (F < 16 || F % 16 || N < 1) return mi_err(MI_ERR_UNSUPPORTED, "mi8b_swiglu_y_f16: rows of %lld", (long long)F);
    if (!g || !u || !y || !xh) return mi_err(MI_ERR_INVALID, "mi8b_swiglu_y_f16: null pointer");
    if (((uintptr_t)g | (uintptr_t)u | (uintptr_t)y | (uintptr_t)xh) & 15)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_swiglu_y_f16: operands not 16-byte aligned");
    const int64_t groups = F * N / 16;
    const unsigned gb = (unsigned)((groups + 255) / 256 < 65535 ? (groups + 255) / 256 : 65535);
    (void)pdl_launch(mi8b_pdl_on(), kernel_swiglu_y_f16, dim3(gb), dim3(256), 0, (cudaStream_t)stream, g, u, y,
                     (__half *)xh, groups, eo);
    MI_CU_CHECK_LAUNCH("kernel_swiglu_y_f16");
    return MI_OK;
}

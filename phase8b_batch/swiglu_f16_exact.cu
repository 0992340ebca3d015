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

/* a thread four consecutive elements at a time (rows of F % 16 == 0 elements: no 16-element group of
 * the copy crosses a row) */
__global__ void __launch_bounds__(256)
kernel_swiglu_y_f16(const float4 *__restrict__ g, const float4 *__restrict__ u, float4 *__restrict__ y,
                    __half *__restrict__ xh, int64_t quads, bool eo) {
    MI_PDL_ENTRY();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 a = g[i], b = u[i];
        const float4 v = make_float4(mi_canon_swiglu(a.x, b.x), mi_canon_swiglu(a.y, b.y), mi_canon_swiglu(a.z, b.z),
                                     mi_canon_swiglu(a.w, b.w));
        y[i] = v;
        x_f16_store4(xh, 4 * i, v, eo);
    }
}

extern "C" mi_status mi8b_swiglu_y_f16(void *stream, const float *g, const float *u, float *y, void *xh, int64_t F,
                                       int64_t N, bool eo) {
    if (F < 16 || F % 16 || N < 1) return mi_err(MI_ERR_UNSUPPORTED, "mi8b_swiglu_y_f16: rows of %lld", (long long)F);
    if (!g || !u || !y || !xh) return mi_err(MI_ERR_INVALID, "mi8b_swiglu_y_f16: null pointer");
    if (((uintptr_t)g | (uintptr_t)u | (uintptr_t)y | (uintptr_t)xh) & 15)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_swiglu_y_f16: operands not 16-byte aligned");
    const int64_t quads = F * N / 4;
    const unsigned gb = (unsigned)((quads + 255) / 256 < 65535 ? (quads + 255) / 256 : 65535);
    (void)pdl_launch(mi8b_pdl_on(), kernel_swiglu_y_f16, dim3(gb), dim3(256), 0, (cudaStream_t)stream,
                     (const float4 *)g, (const float4 *)u, (float4 *)y, (__half *)xh, quads, eo);
    MI_CU_CHECK_LAUNCH("kernel_swiglu_y_f16");
    return MI_OK;
}

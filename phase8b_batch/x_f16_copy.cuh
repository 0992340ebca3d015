/* x's f16 copy, in either form the batch's f16 matmuls read (mi8b_f16s_x_form): b22's evens then
 * odds of each 16-element group, or b6's and b12's pairs, each four elements as (e0, e2, e1, e3).
 * Each element rounded to f16 once. The copy kernel below writes it, and so do the ops that make x
 * (b34, b35, b37) beside their output, with the same stores: the same halves. A warp's threads on
 * consecutive quads write whole 32-byte groups between them. */
#ifndef MI_X_F16_COPY_CUH
#define MI_X_F16_COPY_CUH
#include <stdint.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "common/core/mi_err.h"
#include "phase7a_skeleton/cuda_check.h"
#include "phase7a_skeleton/cuda_pdl.cuh"
#include "phase8b_batch/batch8b.h"

/* four consecutive elements e .. e + 3 (e a multiple of 4) */
__device__ __forceinline__ void x_f16_store4(__half *xh, int64_t e, float4 y, bool eo) {
    const __half2 a = __floats2half2_rn(y.x, y.z), b = __floats2half2_rn(y.y, y.w);
    if (eo) {
        __half2 *g = (__half2 *)(xh + (e & ~(int64_t)15)) + ((e & 15) >> 2);
        g[0] = a;   /* evens 4j, 4j + 2 at halves 2j, 2j + 1 */
        g[4] = b;   /* odds 4j + 1, 4j + 3 at 8 + 2j, 8 + 2j + 1 */
    } else {
        __half2 *g = (__half2 *)(xh + e);
        g[0] = a, g[1] = b;
    }
}
/* one element: column c of a row of x (xh: the row's copy) */
__device__ __forceinline__ void x_f16_store1(__half *xh, int64_t c, float y, bool eo) {
    const int64_t at = eo ? (c & ~(int64_t)15) + ((c & 1) ? 8 : 0) + ((c & 15) >> 1)   /* evens, then odds */
                          : (c & ~(int64_t)3) + (((c & 1) << 1) | ((c >> 1) & 1));     /* e0, e2, e1, e3 */
    xh[at] = __float2half_rn(y);
}

/* x F32 [N][K] -> its f16 copy in form eo (K % 16 == 0 for evens-then-odds, % 4 for pairs), a thread
 * four consecutive elements at a time; x read as float4 where 16-byte aligned */
static __global__ void kernel_act_f16(const float *__restrict__ x, __half *__restrict__ xh, int64_t quads, bool eo,
                                      bool aligned) {
    MI_PDL_ENTRY();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += (int64_t)gridDim.x * blockDim.x) {
        const float *p = x + 4 * i;
        const float4 v = aligned ? *(const float4 *)p : make_float4(p[0], p[1], p[2], p[3]);
        x_f16_store4(xh, 4 * i, v, eo);
    }
}

static inline mi_status launch_act_f16(cudaStream_t st, const float *x, void *xh, int64_t K, int64_t N, bool eo) {
    const int64_t quads = K * N / 4;
    const unsigned gb = (unsigned)((quads + 255) / 256 < 4096 ? (quads + 255) / 256 : 4096);
    (void)pdl_launch(mi8b_pdl_on(), kernel_act_f16, dim3(gb), dim3(256), 0, st, x, (__half *)xh, quads, eo,
                     ((uintptr_t)x & 15) == 0);
    MI_CU_CHECK_LAUNCH("kernel_act_f16");
    return MI_OK;
}
#endif

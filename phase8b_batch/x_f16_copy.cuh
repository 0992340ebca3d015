/* A group of 16 consecutive elements of x stored as x's f16 copy, in either form the batch's f16
 * matmuls read (mi8b_f16s_x_form): b22's evens then odds (kernel_act_f16_evens_odds) or b6's
 * pairs, each four elements as (e0, e2, e1, e3) (kernel_act_f16_pairs). Each element rounded to
 * f16 once, as those kernels round it, so a producer that writes the copy beside x gives the
 * copy kernel's halves. */
#ifndef MI_X_F16_COPY_CUH
#define MI_X_F16_COPY_CUH
#include <stdint.h>
#include <cuda_fp16.h>

__device__ __forceinline__ void x_f16_store16(__half *xh, const float (&y)[16], bool eo) {
    __half2 o[8];
    if (eo) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            o[j] = __floats2half2_rn(y[4 * j], y[4 * j + 2]);
            o[4 + j] = __floats2half2_rn(y[4 * j + 1], y[4 * j + 3]);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            o[2 * j] = __floats2half2_rn(y[4 * j], y[4 * j + 2]);
            o[2 * j + 1] = __floats2half2_rn(y[4 * j + 1], y[4 * j + 3]);
        }
    }
    uint4 *q = (uint4 *)xh;
    q[0] = *(const uint4 *)&o[0];
    q[1] = *(const uint4 *)&o[4];
}
#endif

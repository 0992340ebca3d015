/* Four consecutive elements of x (e .. e + 3, e a multiple of 4) stored into x's f16 copy, in
 * either form the batch's f16 matmuls read (mi8b_f16s_x_form): b22's evens then odds of each
 * 16-element group (kernel_act_f16_evens_odds) or b6's pairs, each four elements as (e0, e2, e1,
 * e3) (kernel_act_f16_pairs). Each element rounded to f16 once, as those kernels round it, so a
 * producer that writes the copy beside x gives the copy kernel's halves. A warp's threads on
 * consecutive quads write whole 32-byte groups between them. */
#ifndef MI_X_F16_COPY_CUH
#define MI_X_F16_COPY_CUH
#include <stdint.h>
#include <cuda_fp16.h>

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
#endif

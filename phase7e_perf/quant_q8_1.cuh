/* The Q8_0 / Q8_1 activation block of one warp, for 7e's kernels that quantize x themselves
 * (e16: mmv16.cu, and the QIN forms of e2 / e5 in mmv7e_exact.cu). The arithmetic and lane map
 * of 7b's kernel_quant_q8_1 (mm_quant.cu; a copy, so that no 7e change reaches layer 7b):
 * lane = element, amax by the xor-butterfly max, d = amax / 127, q = roundf of the clamped
 * x / d, s = sum(q) * d; the 36-byte block layout (f16 d, f16 s, int8 qs[32]) of dev7b.cuh.
 * No product meets an add, so the bits do not depend on the file's --fmad. */
#ifndef MI_QUANT_Q8_1_CUH
#define MI_QUANT_Q8_1_CUH
#include "phase7b_ops/dev7b.cuh"

/* the whole warp, converged: x = the block's 32 floats, blk = its 36 bytes */
__device__ __forceinline__ void q81_quant_block(const float *x, uint8_t *blk, int lane) {
    const float v = x[lane];
    const float amax = warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    /* round_q8 of quant_ref.c: clamp, then roundf (half away from zero) */
    const float c = fmaxf(-127.0f, fminf(127.0f, v * id));
    const int q = (int)roundf(c);
    const int sum = warp_sum_i(q);
    blk[4 + lane] = (uint8_t)(int8_t)q;
    if (lane == 0) {
        ((uint16_t *)blk)[0] = mi_f32_to_f16(d);
        ((uint16_t *)blk)[1] = mi_f32_to_f16((float)sum * d);
    }
}

#endif

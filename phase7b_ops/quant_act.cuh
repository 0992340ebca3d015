/* The activation quantizer of every quantized matmul on the device, as warp-level functions:
 * x F32 -> the dot format of the weight type (Q8_0 / Q8_1 in 36-byte blocks, Q8_K in
 * 292-byte blocks; dev7b.cuh has the layouts), with the CPU reference's arithmetic
 * (quant_ref.c, quant_k.c), so every integer block dot equals the CPU's. 7b's
 * mi7b_quantize_act runs them over workspace rows; a kernel that quantizes x itself calls
 * the same functions, so its bytes are these bytes. No product meets an add here, so the
 * bits do not depend on the including file's --fmad. */
#ifndef MI_QUANT_ACT_CUH
#define MI_QUANT_ACT_CUH
#include "phase7b_ops/dev7b.cuh"

/* One 32-element block by the whole warp, converged: lane = element, v = the lane's element of the 32
 * floats, blk = its 36 bytes (f16 d, f16 s, int8 qs[32]). d = amax / 127, q = roundf of the
 * clamped x / d (quant_ref.c's round_q8: half away from zero), s = sum(q) * d. */
__device__ __forceinline__ void quant_q8_1_value(float v, uint8_t *blk, int lane) {
    const float amax = warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float c = fmaxf(-127.0f, fminf(127.0f, v * id));
    const int q = (int)roundf(c);
    const int sum = warp_sum_i(q);
    blk[4 + lane] = (uint8_t)(int8_t)q;
    if (lane == 0) {
        ((uint16_t *)blk)[0] = mi_f32_to_f16(d);
        ((uint16_t *)blk)[1] = mi_f32_to_f16((float)sum * d);
    }
}
/* the same with the lane's element read from x (x[lane]) */
__device__ __forceinline__ void quant_q8_1_block(const float *x, uint8_t *blk, int lane) {
    quant_q8_1_value(x[lane], blk, lane);
}

/* One 256-element super-block by the whole warp, converged: lane l holds elements 8l .. 8l+7
 * in v. quant_k.c's convention: iscale = 127/amax, d = 1/iscale (0 for an all-zero block),
 * level = nearest-even (rintf) of x*iscale clamped to [-127, 127] (so -128 never occurs).
 * Out: q, the lane's 8 levels packed 4 per word (element 8l + 4i + k in byte k of q[i]: the
 * byte order of qs[]); *pair, on every lane, the sum of elements 16(l>>1) .. 16(l>>1)+15
 * (= bsums[l >> 1]). Returns d. amax is a max (exact in any order) and the divisions are
 * IEEE-rounded (div.rn / rcp.rn). */
__device__ __forceinline__ float quant_q8_k_warp(const float v[8], uint32_t q[2], int *pair) {
    float amax = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) amax = fmaxf(amax, fabsf(v[e]));
    amax = warp_max(amax);
    const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
    int part = 0;
    q[0] = q[1] = 0u;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const float c = fmaxf(-127.0f, fminf(127.0f, v[e] * iscale));
        const int l = (int)rintf(c);
        q[e >> 2] |= ((uint32_t)l & 0xFFu) << (8 * (e & 3));
        part += l;
    }
    /* bsums[j] = elements 16j .. 16j+15 = lanes 2j and 2j+1 */
    *pair = part + __shfl_xor_sync(0xffffffffu, part, 1);
    return iscale != 0.0f ? 1.0f / iscale : 0.0f;
}

/* The same super-block written as its 292-byte block blk (f32 d, int8 qs[256], int16
 * bsums[16]); blk is 4-byte aligned (292 = 4 * 73). */
__device__ __forceinline__ void quant_q8_k_values(const float v[8], uint8_t *blk, int lane) {
    uint32_t q[2];
    int pair;
    const float d = quant_q8_k_warp(v, q, &pair);
    uint32_t *qs = (uint32_t *)(blk + 4 + 8 * lane);
    qs[0] = q[0];
    qs[1] = q[1];
    if ((lane & 1) == 0) ((int16_t *)(blk + 4 + 256))[lane >> 1] = (int16_t)pair;
    if (lane == 0) *(float *)blk = d;
}
/* the same with lane l's elements read from x (x[8l .. 8l+7]) */
__device__ __forceinline__ void quant_q8_k_block(const float *x, uint8_t *blk, int lane) {
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = x[8 * lane + e];
    quant_q8_k_values(v, blk, lane);
}

#endif

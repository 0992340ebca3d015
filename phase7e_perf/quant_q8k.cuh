/* Q8_K quantization of one 256-element super-block by one warp, for 7e's e14 (mmv12_exact.cu:
 * the blocks written straight into the kernel's shared memory). The same arithmetic and lane map
 * as 7b's kernel_quant_q8_k (mm_quant.cu), which stays untouched so that a 7e change cannot
 * reach layer 7b: gates/7e/emu_mmv14.py compiles both on the host and requires equal bytes (CI),
 * and gate_7e requires e14 bit-identical to e12 on the device. */
#ifndef MI_QUANT_Q8K_CUH
#define MI_QUANT_Q8K_CUH
#include "phase7b_ops/dev7b.cuh"

/* The whole warp, converged: lane l holds elements 8l .. 8l+7 of the super-block in v.
 * quant_k.c's convention: iscale = 127/amax, d = 1/iscale (0 for an all-zero block), level =
 * nearest-even (rintf) of x*iscale clamped to [-127, 127] (so -128 never occurs).
 * Out: q, the lane's 8 levels packed 4 per word (element 8l + 4i + k in byte k of q[i]: the
 * byte order of qs[]); *pair, on every lane, the sum of elements 16(l>>1) .. 16(l>>1)+15
 * (= bsums[l >> 1]). Returns d. Bits do not depend on the file's --fmad: amax is a max (exact
 * in any order), the divisions are IEEE-rounded (div.rn / rcp.rn) and no product meets an add. */
__device__ __forceinline__ float q8k_quant_warp(const float v[8], uint32_t q[2], int *pair) {
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

#endif

/* What the f16 tensor-core matmuls of a batch (gemm_f16_stream.cu, gemm_f16_small.cu) share: the
 * mma and the dequantization of packed levels into f16 fragment halves. They read x's f16 copy in
 * pairs (x_f16_copy.cuh), each group of four elements as (e0, e2, e1, e3), so that one 64-bit shared load
 * gives a lane's two B registers for the k order the level words unpack to (gemm_f16_stream.cu's
 * header says why). */
#ifndef MI_F16_FRAG_CUH
#define MI_F16_FRAG_CUH
#include <stdint.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "common/core/mi_err.h"
#include "phase7a_skeleton/cuda_pdl.cuh"
#include "phase8b_batch/batch8b.h"
#include "phase8b_batch/x_f16_copy.cuh"

__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* a unit (two k16 steps: A1, A2) times one n-tile of 8 tokens, whose B registers for the two steps
 * are the 64-bit shared loads at bp and bp + 32 (the activations' stored order, above) */
__device__ __forceinline__ void mma_f16_unit(float (&d)[4], const uint32_t (&A1)[4], const uint32_t (&A2)[4],
                                             const uint8_t *bp) {
    const uint2 b = *(const uint2 *)bp, c = *(const uint2 *)(bp + 32);
    mma_f16_16816(d, A1, b.x, b.y);
    mma_f16_16816(d, A2, c.x, c.y);
}

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t *>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2 *>(&u); }
__device__ __forceinline__ __half2 h2_const(uint16_t bits) { return __half2half2(__ushort_as_half(bits)); }

/* (a & B) | C, B and C constants, as one LOP3: written in C it compiles to two (an AND, then an OR
 * with the second constant) */
template <uint32_t B, uint32_t C> __device__ __forceinline__ uint32_t and_or(uint32_t a) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(a), "n"(B), "n"(C));
    return r;
}
/* (a & B) | c, c in a register, as one LOP3 */
template <uint32_t B> __device__ __forceinline__ uint32_t and_or_r(uint32_t a, uint32_t c) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(a), "n"(B), "r"(c));
    return r;
}

/* The nibble pair at bits [0, 4) and [16, 20) of v (HI: [4, 8) and [20, 24)) as the f16 pair L - Z,
 * exactly. Masked in place under 1024's exponent (0x6400) the low nibbles give 1024 + L and the
 * high ones 1024 + 16 L: 1024 + L - (1024 + Z) and (1024 + 16 L) / 16 - (64 + Z) are both L - Z
 * exactly, so either nibble costs one LOP3 and one f16 operation, without shifting the high one
 * down first. */
template <bool HI, int Z> __device__ __forceinline__ __half2 nib_levels(uint32_t v) {
    static_assert(Z >= 0 && Z < 64, "the f16 constants below hold 1024 + Z and 64 + Z exactly");
    if (HI)
        return __hfma2(bits_h2(and_or<0x00F000F0u, 0x64006400u>(v)), h2_const(0x2C00),   /* x 1/16 */
                       h2_const((uint16_t)(0xD400 + 16 * Z)));                           /* - (64 + Z) */
    return __hsub2(bits_h2(and_or<0x000F000Fu, 0x64006400u>(v)), h2_const((uint16_t)(0x6400 + Z)));
}
/* the nibble pair of v (nib_levels) as f16 Q4_K weights: L s + m, m = -dmin min */
template <bool HI> __device__ __forceinline__ uint32_t deq_q4(uint32_t v, __half2 s, __half2 m) {
    return h2_bits(__hfma2(nib_levels<HI, 0>(v), s, m));
}
/* bytes 0 and 2 of v (HI: 1 and 3), each a Q6_K level L < 64, as f16 weights (L - 32) s: the bytes
 * masked in place under 1024's exponent give 1024 + L. (One PRMT would place them too, but it takes
 * one immediate, and ptxas then reloads the selector into a register for each.) */
template <bool HI> __device__ __forceinline__ uint32_t deq_q6(uint32_t v, __half2 s) {
    const uint32_t h = and_or<0x00FF00FFu, 0x64006400u>(HI ? v >> 8 : v);
    return h2_bits(__hmul2(__hsub2(bits_h2(h), h2_const(0x6420)), s));
}
/* the nibble pair of v (nib_levels) as f16 Q4_0 weights: (L - 8) d */
template <bool HI> __device__ __forceinline__ uint32_t deq_q40(uint32_t v, __half2 d) {
    return h2_bits(__hmul2(nib_levels<HI, 8>(v), d));
}

#endif

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
/* the levels in bits [0, 4) and [16, 20) of v (Q4_K) as f16 weights: L s + m, m = -dmin min */
__device__ __forceinline__ uint32_t deq_q4(uint32_t v, __half2 s, __half2 m) {
    uint32_t h = (v & 0x000F000Fu) | 0x64006400u;
    return h2_bits(__hfma2(__hsub2(*reinterpret_cast<__half2 *>(&h), __half2half2(__ushort_as_half(0x6400))), s, m));
}
/* the levels in bits [0, 6) and [16, 22) of v (Q6_K) as f16 weights: (L - 32) s */
__device__ __forceinline__ uint32_t deq_q6(uint32_t v, __half2 s) {
    uint32_t h = (v & 0x00FF00FFu) | 0x64006400u;
    return h2_bits(__hmul2(__hsub2(*reinterpret_cast<__half2 *>(&h), __half2half2(__ushort_as_half(0x6420))), s));
}

/* the levels in bits [0, 4) and [16, 20) of v (Q4_0) as f16 weights: (L - 8) d */
__device__ __forceinline__ uint32_t deq_q40(uint32_t v, __half2 d) {
    uint32_t h = (v & 0x000F000Fu) | 0x64006400u;
    return h2_bits(__hmul2(__hsub2(*reinterpret_cast<__half2 *>(&h), __half2half2(__ushort_as_half(0x6408))), d));
}

#endif

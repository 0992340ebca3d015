/* One token's RMS norm and the activation quantization of the matmul it feeds in one kernel
 * (item d16): 7e's staged matmuls and 7b's warp-per-row matmul read x quantized by 7b's
 * quantizer, so a norm before them was two kernels of a few microseconds each (the norm, then
 * the quantizer), mostly launch and ramp for a row of a few KB. Here one block copies the row
 * into shared memory, warp 0 sums its squares in the canonical order (7e's wide norm, the loop
 * as written there), the block scales it as MI_OP_RMS_NORM does, y = (x * scale) * w, in place,
 * and its warps quantize y with 7b's warp functions (quant_act.cuh) into the bytes
 * mi7b_quantize_act writes for the weight type (Q8_0/Q8_1 in 36-byte blocks, Q8_K in 292-byte
 * blocks). Built with --fmad=false (the *_exact.cu rule), as both kernels it replaces are. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/quant_act.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase8a_decode/decode8a.h"
#include "common/core/mi_canon.h"
#include "phase7a_skeleton/cuda_pdl.cuh"

#define NQ_BLOCK 256

/* x [G], w [G] -> a: the quantized row of rms_norm(x, w); K256: Q8_K super-blocks, else 32-element blocks */
template <bool K256>
__global__ void __launch_bounds__(NQ_BLOCK)
kernel_norm_quant(const float *__restrict__ x, const float *__restrict__ w, uint8_t *__restrict__ a, int64_t G,
                  float eps) {
    MI_PDL_ENTRY();
    extern __shared__ float sx[];
    __shared__ float s_scale;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
#pragma unroll 4
    for (int64_t i = tid; i < G; i += NQ_BLOCK) sx[i] = x[i];
    __syncthreads();
    if (tid < 32) {
        float acc = 0.0f;
#pragma unroll 16
        for (int64_t i = lane; i < G; i += 32) {
            const float sq = sx[i] * sx[i];
            acc = acc + sq;
        }
        for (int off = 16; off >= 1; off >>= 1) acc = acc + __shfl_xor_sync(0xffffffffu, acc, off);
        if (lane == 0) s_scale = mi_canon_rms_scale(acc, G, eps);
    }
    __syncthreads();
    const float scale = s_scale;
#pragma unroll 4
    for (int64_t i = tid; i < G; i += NQ_BLOCK) sx[i] = (sx[i] * scale) * w[i];
    __syncthreads();
    const int64_t bk = K256 ? 256 : 32, nb = G / bk;
    for (int64_t g = warp; g < nb; g += NQ_BLOCK / 32) {
        if (K256) quant_q8_k_block(sx + g * 256, a + (size_t)g * AK_BYTES, lane);
        else quant_q8_1_block(sx + g * 32, a + (size_t)g * A8_BYTES, lane);
    }
}

extern "C" bool mi8a_norm_quant_supported(mi_type wt, int64_t K) {
    return mi7b_act_row_bytes(wt, K) > 0 && K <= MI8A_NORM_QUANT_MAX_K;
}

extern "C" mi_status mi8a_norm_quant(void *stream, mi_type wt, const float *x, const float *w, float eps, int64_t K,
                                     void *xq) {
    if (!mi8a_norm_quant_supported(wt, K) || !xq)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_norm_quant: %s, K = %lld", mi_type_name(wt), (long long)K);
    const bool k256 = K % 256 == 0 && mi7b_act_row_bytes(wt, K) == (size_t)(K / 256) * AK_BYTES;
    const size_t smem = (size_t)K * sizeof(float);
    if (k256)
        MI_CU_CHECK(MI_PDL_LAUNCH(kernel_norm_quant<true>, 1, NQ_BLOCK, smem, (cudaStream_t)stream, x, w, (uint8_t *)xq,
                                  K, eps));
    else
        MI_CU_CHECK(MI_PDL_LAUNCH(kernel_norm_quant<false>, 1, NQ_BLOCK, smem, (cudaStream_t)stream, x, w,
                                  (uint8_t *)xq, K, eps));
    MI_CU_CHECK_LAUNCH("kernel_norm_quant");
    return MI_OK;
}

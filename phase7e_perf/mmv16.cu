/* Phase 7e item e16: the one-token matmul of the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0) below e2's K range, with x quantized inside the kernel.
 *
 * Why: on the 0.5B's decode (K = 896) the MATMUL node falls to 7b's warp-per-row kernel, which
 * is two launches: mi7b_quantize_act, then the dot kernel. q, k, v and o are four such nodes a
 * layer, and in a replayed graph each launch costs a few microseconds of gap. e16 is the same
 * two steps in one kernel: every block first quantizes x (K / 32 blocks of 36 bytes, 3.5 KB at
 * K = 896, read from L2) into shared memory with kernel_quant_q8_1's arithmetic and lane map
 * (a warp per 32-element block, lane = element), then each warp dots whole rows in 7b's order
 * (lane l: units l, l + 32, ...; mi7b_unit_dot; xor-butterfly; + bias). Same expressions in the
 * same order, so the result is meant to equal 7b's bit for bit (gate_7e compares; both files are
 * built with the default --fmad, like mm_quant.cu). */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"
#include "phase7e_perf/quant_q8_1.cuh"

#define M16_WARPS 4
#define M16_MAX_K 16384   /* 18 KB of shared activation blocks */

/* W [K, M] rows of wrow bytes; rows m = blockIdx.x * M16_WARPS + warp, + gridDim.x * M16_WARPS, ... */
template <int WT>
__global__ void __launch_bounds__(M16_WARPS * 32)
kernel_mmv16(const uint8_t *__restrict__ W, size_t wrow, const float *__restrict__ x, const float *__restrict__ bias,
             float *__restrict__ Y, int64_t M, int64_t nunits) {
    extern __shared__ __align__(16) uint8_t m16_act[];   /* nunits x 36 bytes (the Q8_1 layout of 7b) */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int64_t u = warp; u < nunits; u += M16_WARPS) q81_quant_block(x + u * 32, m16_act + (size_t)u * A8_BYTES, lane);
    __syncthreads();
    for (int64_t m = (int64_t)blockIdx.x * M16_WARPS + warp; m < M; m += (int64_t)gridDim.x * M16_WARPS) {
        const uint8_t *wr = W + (size_t)m * wrow;
        float acc = 0.0f;
        for (int64_t u = lane; u < nunits; u += 32) {
            wunit w;
            unit_unpack<WT>(wr, u, w);
            acc += mi7b_unit_dot<wtraits<WT>::act>(w, m16_act, u);
        }
        const float s = warp_sum(acc);
        if (lane == 0) Y[m] = bias ? s + bias[m] : s;
    }
}

extern "C" bool mi7e_mmv16_supported(mi_type wt, int64_t K, int64_t N) {
    switch (wt) {
    case MI_TYPE_Q4_0: case MI_TYPE_Q4_1: case MI_TYPE_Q5_0: case MI_TYPE_Q5_1: case MI_TYPE_Q8_0:
        break;
    default:
        return false;
    }
    return N == 1 && K > 0 && K % 32 == 0 && K <= M16_MAX_K;
}

template <int WT>
static mi_status m16_launch(cudaStream_t st, const uint8_t *w, const float *x, const float *bias, float *y, int64_t K,
                            int64_t M) {
    const size_t wrow = (size_t)(K / 32) * wtraits<WT>::bytes;
    const int64_t nunits = K / 32;
    /* a warp per row as 7b, but at most 4 blocks an SM: each block quantizes x once, so fewer
     * blocks quantize it fewer times; the rows are strided over them */
    int64_t blocks = (M + M16_WARPS - 1) / M16_WARPS;
    const int64_t cap = 4 * (int64_t)mi7e_sm_count();
    if (blocks > cap) blocks = cap;
    kernel_mmv16<WT><<<(unsigned)blocks, M16_WARPS * 32, (size_t)nunits * A8_BYTES, st>>>(w, wrow, x, bias, y, M, nunits);
    MI_CU_CHECK_LAUNCH("kernel_mmv16");
    return MI_OK;
}

/* W [K, M] @ x F32 [K, 1] (+ bias [M]) -> y [M, 1]; no workspace */
extern "C" mi_status mi7e_mmv16(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                                int64_t K, int64_t M) {
    if (!mi7e_mmv16_supported(wt, K, 1) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_mmv16: type %s, K = %lld, M = %lld", mi_type_name(wt), (long long)K,
                      (long long)M);
    cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *wb = (const uint8_t *)w;
    switch (wt) {
    case MI_TYPE_Q4_0: return m16_launch<MI_TYPE_Q4_0>(st, wb, x, bias, y, K, M);
    case MI_TYPE_Q4_1: return m16_launch<MI_TYPE_Q4_1>(st, wb, x, bias, y, K, M);
    case MI_TYPE_Q5_0: return m16_launch<MI_TYPE_Q5_0>(st, wb, x, bias, y, K, M);
    case MI_TYPE_Q5_1: return m16_launch<MI_TYPE_Q5_1>(st, wb, x, bias, y, K, M);
    case MI_TYPE_Q8_0: return m16_launch<MI_TYPE_Q8_0>(st, wb, x, bias, y, K, M);
    default: return mi_err(MI_ERR_UNSUPPORTED, "mi7e_mmv16: type %s", mi_type_name(wt));
    }
}

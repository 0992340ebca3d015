/* The second kernel of a matmul split over K (gemm_int8_split.cu, gemm_int8_stream.cu): block z
 * of the first wrote its partial sums to part [z][N][M]; this adds them in z order, then the
 * bias, so a fixed split count gives the same bits every run. */
#ifndef MI_SPLIT_SUM_CUH
#define MI_SPLIT_SUM_CUH
#include <stdint.h>
#include <cuda_runtime.h>
#include "phase8b_batch/batch8b.h"

/* y [n][m] = sum over z of part [z][n][m], z ascending, then + bias [m]. AHEAD (item b8): a
 * thread's partials are loaded eight at a time, all in flight together, and added in z order:
 * the same sums as one dependent load after another, without a round trip each. */
template <bool AHEAD>
__global__ void kernel_split_sum(const float *__restrict__ part, const float *__restrict__ bias, float *__restrict__ Y,
                                 int64_t M, int64_t N, int S) {
    const int64_t MN = M * N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < MN; i += (int64_t)gridDim.x * blockDim.x) {
        float s = part[i];
        if (!AHEAD) {
            for (int z = 1; z < S; z++) s += part[(size_t)z * MN + i];
            Y[i] = bias ? s + bias[i % M] : s;
            continue;
        }
        for (int z0 = 1; z0 < S; z0 += 8) {
            float v[8];
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = z0 + j < S ? part[(size_t)(z0 + j) * MN + i] : 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++)
                if (z0 + j < S) s += v[j];
        }
        Y[i] = bias ? s + bias[i % M] : s;
    }
}

/* kernel_split_sum's launch (b8 read at each launch), grid-stride, at most 4096 blocks of 256 */
static inline void split_sum_launch(cudaStream_t st, const float *part, const float *bias, float *y, int64_t M,
                                    int64_t N, int S);
/* grid for kernel_split_sum over M x N outputs (grid-stride, at most 4096 blocks of 256) */
static inline unsigned split_sum_blocks(int64_t M, int64_t N) {
    int64_t nb = (M * N + 255) / 256;
    if (nb > 4096) nb = 4096;
    return (unsigned)(nb < 1 ? 1 : nb);
}
static inline void split_sum_launch(cudaStream_t st, const float *part, const float *bias, float *y, int64_t M,
                                    int64_t N, int S) {
    if (mi8b_sums_ahead_on()) kernel_split_sum<true><<<split_sum_blocks(M, N), 256, 0, st>>>(part, bias, y, M, N, S);
    else kernel_split_sum<false><<<split_sum_blocks(M, N), 256, 0, st>>>(part, bias, y, M, N, S);
}
#endif

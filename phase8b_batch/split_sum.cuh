/* The second kernel of a matmul split over K (gemm_int8_split.cu, gemm_int8_stream.cu): block z
 * of the first wrote its partial sums to part [z][N][M]; this adds them in z order, then the
 * bias, so a fixed split count gives the same bits every run. */
#ifndef MI_SPLIT_SUM_CUH
#define MI_SPLIT_SUM_CUH
#include <stdint.h>
#include <cuda_runtime.h>
#include "phase7a_skeleton/cuda_pdl.cuh"

/* y [n][m] = sum over z of part [z][n][m], z ascending, then + bias [m] */
static __global__ void kernel_split_sum(const float *__restrict__ part, const float *__restrict__ bias,
                                        float *__restrict__ Y, int64_t M, int64_t N, int S) {
    MI_PDL_ENTRY();   /* b29 where its launcher says so (the K split of gemm_f16_small.cu); else nothing */
    const int64_t MN = M * N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < MN; i += (int64_t)gridDim.x * blockDim.x) {
        float s = part[i];
        for (int z = 1; z < S; z++) s += part[(size_t)z * MN + i];
        Y[i] = bias ? s + bias[i % M] : s;
    }
}

/* grid for kernel_split_sum over M x N outputs (grid-stride, at most 4096 blocks of 256) */
static inline unsigned split_sum_blocks(int64_t M, int64_t N) {
    int64_t nb = (M * N + 255) / 256;
    if (nb > 4096) nb = 4096;
    return (unsigned)(nb < 1 ? 1 : nb);
}
#endif

/* 7b's quantized matmul row: a warp computes row m of W @ x for NC token columns, lane l taking
 * units l, l+32, ... of the row (unit_unpack, mi7b_unit_dot), then the xor butterfly, then the
 * bias. Shared by 7b's kernel (mm_quant.cu) and by higher phases that launch rows of several
 * weights at once: Rows says where row m's weight, bias and outputs are. Include from files built
 * as mm_quant.cu is (default contraction), so the same expressions give the same bits. */
#ifndef MI_MM_ROWS_CUH
#define MI_MM_ROWS_CUH
#include "phase7b_ops/dev7b.cuh"

/* one weight [K, M], its bias, outputs Y [N, M] */
struct mm_rows_one {
    const uint8_t *W;
    size_t wrow;
    const float *bias;
    float *Y;
    int64_t M;
    __device__ __forceinline__ const uint8_t *w(int64_t m) const { return W + (size_t)m * wrow; }
    __device__ __forceinline__ float *y(int64_t c, int64_t m) const { return Y + (size_t)c * M + m; }
    __device__ __forceinline__ float add_bias(int64_t m, float s) const { return bias ? s + bias[m] : s; }
};

template <int WT, int NC, class Rows>
__device__ __forceinline__ void mm_q_row(const Rows &rows, int64_t m, const uint8_t *__restrict__ A, size_t arow,
                                         int64_t N, int64_t n0, int64_t nunits) {
    const int lane = threadIdx.x & 31;
    const uint8_t *wr = rows.w(m);
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
    for (int64_t u = lane; u < nunits; u += 32) {
        wunit w;
        unit_unpack<WT>(wr, u, w);
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (n0 + c < N) acc[c] += mi7b_unit_dot<wtraits<WT>::act>(w, A + (size_t)(n0 + c) * arow, u);
    }
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const float s = warp_sum(acc[c]);
        if (lane == 0 && n0 + c < N) *rows.y(n0 + c, m) = rows.add_bias(m, s);
    }
}

#endif

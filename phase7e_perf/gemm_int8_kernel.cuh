/* The int8 tensor-core matmul kernel of gemm_int8.cu (7e), shared with 8b's split form:
 * W [K, M] (quantized) @ A (x quantized, 7b's activation rows) for a tile of 64 weight rows x
 * 64 tokens. SPLIT = false: the whole K, y [N, M] (+ bias) written once. SPLIT = true: block z
 * of gridDim.z takes units [z chunk, (z + 1) chunk) and writes its partial sums to part [z][N][M]
 * (no bias); a second kernel adds the parts in z order (phase8b_batch/gemm_int8_split.cu). Each
 * unit's int32 dot is exact; only the float sum over units is split. */
#ifndef MI_GEMM_INT8_KERNEL_CUH
#define MI_GEMM_INT8_KERNEL_CUH
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"

#define MQ_BM 64
#define MQ_BN 64
#define MQ_BK 4                        /* units (32 elements) per stage */
#define MQ_ROW (MQ_BK * 32 + 16)       /* bytes per staged row: 144 = 36 words, conflict-free fragments */

__device__ __forceinline__ void mma_s8_16816(int (&d)[4], int a0, int a1, int b0) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0), "r"(0), "r"(0), "r"(0));
}

/* y [N, M]: block (bx, by) takes weight rows 64 bx .. 64 bx + 63 and tokens 64 by .. 64 by + 63;
 * each output is written once (no atomics: repeated runs are bit-identical) */
template <int WT, bool SPLIT = false>
__global__ void __launch_bounds__(128)
kernel_gemm_int8(const uint8_t *__restrict__ W, size_t wrow, const uint8_t *__restrict__ A, size_t arow,
                 const float *__restrict__ bias, float *__restrict__ Y, int64_t M, int64_t N, int64_t nunits,
                 int64_t chunk = 0, float *__restrict__ part = NULL) {
    constexpr int AT = wtraits<WT>::act;
    __shared__ __align__(16) int8_t sW[MQ_BM][MQ_ROW];
    __shared__ __align__(16) int8_t sA[MQ_BN][MQ_ROW];
    __shared__ float sWd[MQ_BK][MQ_BM], sWm[MQ_BK][MQ_BM];
    __shared__ int sWl[MQ_BK][MQ_BM], sWh[MQ_BK][MQ_BM];
    __shared__ float sAd[MQ_BK][MQ_BN], sAs[MQ_BK][MQ_BN];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gid = lane >> 2, tig = lane & 3;
    const int wm = warp >> 1, wn = warp & 1;
    const int64_t m0 = (int64_t)blockIdx.x * MQ_BM, n0 = (int64_t)blockIdx.y * MQ_BN;

    float acc[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.0f;

    const int64_t ub = SPLIT ? (int64_t)blockIdx.z * chunk : 0;
    const int64_t ue = SPLIT ? (ub + chunk < nunits ? ub + chunk : nunits) : nunits;
    for (int64_t u0 = ub; u0 < ue; u0 += MQ_BK) {
        /* ---- stage: 64 rows x 4 units of W, 64 tokens x 4 units of A ---- */
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int i = tid + 128 * e, r = i & 63, k = i >> 6;
            const int64_t m = m0 + r, u = u0 + k;
            wunit w;
            if (m < M && u < ue) {
                unit_unpack<WT>(W + (size_t)m * wrow, u, w);
            } else {
#pragma unroll
                for (int q = 0; q < 8; q++) w.q[q] = 0;
                w.d = w.m = 0.0f;
                w.sc_lo = w.sc_hi = 0;
            }
            int4 *dst = (int4 *)&sW[r][k * 32];
            dst[0] = make_int4(w.q[0], w.q[1], w.q[2], w.q[3]);
            dst[1] = make_int4(w.q[4], w.q[5], w.q[6], w.q[7]);
            sWd[k][r] = w.d;
            sWm[k][r] = w.m;
            sWl[k][r] = w.sc_lo;
            sWh[k][r] = w.sc_hi;

            const int64_t n = n0 + r;
            int q[8];
            float ad = 0.0f, as = 0.0f;
            if (n < N && u < ue) {
                const int *aq;
                if (AT == MI_TYPE_Q8_K) {
                    const uint8_t *sb = A + (size_t)n * arow + (size_t)(u >> 3) * AK_BYTES;
                    const int j = (int)(u & 7);
                    const int16_t *bs = (const int16_t *)(sb + 4 + 256);
                    aq = (const int *)(sb + 4 + 32 * j);
                    ad = *(const float *)sb;
                    as = (float)((int)bs[2 * j] + (int)bs[2 * j + 1]);
                } else {
                    const uint8_t *b = A + (size_t)n * arow + (size_t)u * A8_BYTES;
                    aq = (const int *)(b + 4);
                    ad = ld_f16(b);
                    as = ld_f16(b + 2);
                }
#pragma unroll
                for (int t = 0; t < 8; t++) q[t] = __ldg(aq + t);
            } else {
#pragma unroll
                for (int t = 0; t < 8; t++) q[t] = 0;
            }
            int4 *da = (int4 *)&sA[r][k * 32];
            da[0] = make_int4(q[0], q[1], q[2], q[3]);
            da[1] = make_int4(q[4], q[5], q[6], q[7]);
            sAd[k][r] = ad;
            sAs[k][r] = as;
        }
        __syncthreads();

        /* ---- tensor cores: per unit two k16 halves (lo, hi), then the float scaling ---- */
#pragma unroll
        for (int k = 0; k < MQ_BK; k++) {
            int c[2][2][4][4];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int a[2][2], b[4];
                const int col = k * 32 + h * 16 + tig * 4;
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    const int row = wm * 32 + mt * 16 + gid;
                    a[mt][0] = *(const int *)&sW[row][col];
                    a[mt][1] = *(const int *)&sW[row + 8][col];
                }
#pragma unroll
                for (int nt = 0; nt < 4; nt++) b[nt] = *(const int *)&sA[wn * 32 + nt * 8 + gid][col];
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int nt = 0; nt < 4; nt++) mma_s8_16816(c[h][mt][nt], a[mt][0], a[mt][1], b[nt]);
            }
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const int rl = wm * 32 + mt * 16 + gid + hr * 8;
                    const float wd = sWd[k][rl], wmn = sWm[k][rl];
                    const int sl = sWl[k][rl], sh = sWh[k][rl];
#pragma unroll
                    for (int nt = 0; nt < 4; nt++) {
#pragma unroll
                        for (int cc = 0; cc < 2; cc++) {
                            const int i = hr * 2 + cc;
                            const int tl = wn * 32 + nt * 8 + tig * 2 + cc;
                            const int lo = c[0][mt][nt][i], hi = c[1][mt][nt][i];
                            const float ad = sAd[k][tl];
                            if (AT == MI_TYPE_Q8_K) {
                                acc[mt][nt][i] += ad * (wd * (float)(sl * lo + sh * hi) - wmn * sAs[k][tl]);
                            } else if (AT == MI_TYPE_Q8_1) {
                                acc[mt][nt][i] += (wd * ad) * (float)(lo + hi) + wmn * sAs[k][tl];
                            } else {
                                acc[mt][nt][i] += (wd * ad) * (float)(lo + hi);
                            }
                        }
                    }
                }
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int64_t m = m0 + wm * 32 + mt * 16 + gid + (i >> 1) * 8;
                const int64_t n = n0 + wn * 32 + nt * 8 + tig * 2 + (i & 1);
                if (m >= M || n >= N) continue;
                if (SPLIT) part[((size_t)blockIdx.z * N + n) * M + m] = acc[mt][nt][i];
                else Y[(size_t)n * M + m] = bias ? acc[mt][nt][i] + bias[m] : acc[mt][nt][i];
            }
}

#endif

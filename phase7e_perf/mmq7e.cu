/* Phase 7e item e7: tensor-core prefill matmul, W [K, M] (quantized) @ x F32 [K, N]
 * (+ bias [M]) -> y F32 [M, N] for N > 8. x is quantized once exactly as 7b and the CPU
 * do (Q8_0/Q8_1/Q8_K, mi7b_quantize_act); weight units are unpacked to int8 with 7b's
 * unit_unpack into shared memory; the integer block dots run on the int8 tensor cores
 * (mma.sync m16n8k16 s8.s8.s32, two per 32-element unit so Q6_K's 16-element scales
 * apply), and each unit's int32 dot is scaled in float as the CPU does. The integer dots
 * are exact, so the result is within the 7b matmul bound (NMSE <= 1e-6 vs the CPU).
 * Tile: 64 weight rows x 64 tokens x 4 units per stage, 4 warps (2 x 2), each 32 x 32.
 *
 * Item e11 (unpack once): unit_unpack runs once per (row, unit) per 64-token tile, so a
 * 2048-token prefill unpacks every weight 32 times; on the 7B that ALU work, not the
 * tensor cores, bounds the kernel (~70 TOP/s, MINFER_PROFILE=2 on the H200). With e11 a
 * first kernel unpacks a chunk of rows once into the workspace (int8 units + their scales,
 * 48 bytes per 32 weights), and the same tile kernel stages those bytes instead of calling
 * unit_unpack. The staged values and every float operation are the same as without e11,
 * so the two results are bit-identical. Chunks of about 16 MB keep the unpacked rows in
 * the 60 MB L2 for the tile kernel that follows. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7e_perf/perf7e.h"
#include "phase7b_ops/ops7b.h"

#define A8_BYTES 36
#define AK_BYTES 292
#define MQ_BM 64
#define MQ_BN 64
#define MQ_BK 4                        /* units (32 elements) per stage */
#define MQ_ROW (MQ_BK * 32 + 16)       /* bytes per staged row: 144 = 36 words, conflict-free fragments */

__device__ __forceinline__ void mma_s8_16816(int (&d)[4], int a0, int a1, int b0) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0), "r"(0), "r"(0), "r"(0));
}

/* Item e11's first kernel: rows [0, M) of W -> Wq (32 int8 per unit, row-major over
 * (row, unit)) and Ws (d, m, sc_lo, sc_hi per unit); one thread per unit */
template <int WT>
__global__ void kernel_unpack7e(const uint8_t *__restrict__ W, size_t wrow, int64_t M, int64_t nunits,
                                int4 *__restrict__ Wq, float4 *__restrict__ Ws) {
    const int64_t total = M * nunits;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = t / nunits, u = t - m * nunits;
        wunit w;
        unit_unpack<WT>(W + (size_t)m * wrow, u, w);
        Wq[2 * t] = make_int4(w.q[0], w.q[1], w.q[2], w.q[3]);
        Wq[2 * t + 1] = make_int4(w.q[4], w.q[5], w.q[6], w.q[7]);
        Ws[t] = make_float4(w.d, w.m, __int_as_float(w.sc_lo), __int_as_float(w.sc_hi));
    }
}

/* PRE = false: W is the quantized tensor (unit_unpack per tile); PRE = true: Wq/Ws hold
 * rows [0, M) unpacked by kernel_unpack7e. Y [N, ldy] receives columns m of this call. */
template <int WT, bool PRE>
__global__ void __launch_bounds__(128)
kernel_mmq7e(const uint8_t *__restrict__ W, size_t wrow, const int4 *__restrict__ Wq, const float4 *__restrict__ Ws,
             const uint8_t *__restrict__ A, size_t arow, const float *__restrict__ bias, float *__restrict__ Y,
             int64_t ldy, int64_t M, int64_t N, int64_t nunits) {
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

    for (int64_t u0 = 0; u0 < nunits; u0 += MQ_BK) {
        /* ---- stage: 64 rows x 4 units of W, 64 tokens x 4 units of A ---- */
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int i = tid + 128 * e, r = i & 63, k = i >> 6;
            const int64_t m = m0 + r, u = u0 + k;
            wunit w;
            if (PRE && m < M && u < nunits) {
                const int64_t t = m * nunits + u;
                const int4 q0 = __ldg(Wq + 2 * t), q1 = __ldg(Wq + 2 * t + 1);
                const float4 sc = __ldg(Ws + t);
                w.q[0] = q0.x; w.q[1] = q0.y; w.q[2] = q0.z; w.q[3] = q0.w;
                w.q[4] = q1.x; w.q[5] = q1.y; w.q[6] = q1.z; w.q[7] = q1.w;
                w.d = sc.x;
                w.m = sc.y;
                w.sc_lo = __float_as_int(sc.z);
                w.sc_hi = __float_as_int(sc.w);
            } else if (m < M && u < nunits) {
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
            if (n < N && u < nunits) {
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
                if (m < M && n < N) Y[(size_t)n * ldy + m] = bias ? acc[mt][nt][i] + bias[m] : acc[mt][nt][i];
            }
}

/* ---------------- launchers ---------------- */

extern "C" bool mi7e_mmq_supported(mi_type wt, int64_t K, int64_t N) {
    switch (wt) {
    case MI_TYPE_Q4_0: case MI_TYPE_Q4_1: case MI_TYPE_Q5_0: case MI_TYPE_Q5_1: case MI_TYPE_Q8_0:
    case MI_TYPE_Q4_K: case MI_TYPE_Q5_K: case MI_TYPE_Q6_K:
        break;
    default:
        return false;
    }
    return mi7b_act_row_bytes(wt, K) > 0 && N > MI7E_MMV_MAX_N && (N + MQ_BN - 1) / MQ_BN <= 65535;
}

/* e11: rows unpacked per chunk, a multiple of the 64-row tile, about MQ_CHUNK_BYTES */
#define MQ_CHUNK_BYTES ((size_t)16 << 20)
#define MQ_UNIT_BYTES 48   /* 32 int8 + float4 of scales */
static int64_t chunk_rows(int64_t K, int64_t M) {
    const size_t per_row = (size_t)(K / 32) * MQ_UNIT_BYTES;
    int64_t r = (int64_t)(MQ_CHUNK_BYTES / (per_row ? per_row : 1)) / MQ_BM * MQ_BM;
    if (r < MQ_BM) r = MQ_BM;
    return r < M ? r : (M + MQ_BM - 1) / MQ_BM * MQ_BM;
}
static size_t act_bytes_aligned(mi_type wt, int64_t K, int64_t N) {
    return (mi7b_act_row_bytes(wt, K) * (size_t)(N > 0 ? N : 0) + 255) & ~(size_t)255;
}

extern "C" size_t mi7e_mmq_workspace(mi_type wt, int64_t K, int64_t N) {
    return mi7b_act_row_bytes(wt, K) * (size_t)(N > 0 ? N : 0);
}

extern "C" size_t mi7e_mmq_pre_workspace(mi_type wt, int64_t K, int64_t M, int64_t N) {
    if (K <= 0 || M <= 0) return mi7e_mmq_workspace(wt, K, N);
    return act_bytes_aligned(wt, K, N) + (size_t)chunk_rows(K, M) * (size_t)(K / 32) * MQ_UNIT_BYTES;
}

template <int WT>
static mi_status launch_mmq(cudaStream_t st, const uint8_t *w, const uint8_t *a, size_t arow, const float *bias,
                            float *y, int64_t K, int64_t M, int64_t N, uint8_t *pre) {
    const size_t wrow = mi_row_size((mi_type)WT, K);
    const int64_t nunits = K / 32, gy = (N + MQ_BN - 1) / MQ_BN;
    if (gy > 65535 || (M + MQ_BM - 1) / MQ_BM > 0x7fffffff)
        return mi_err(MI_ERR_INVALID, "mi7e_mmq: M = %lld, N = %lld too large", (long long)M, (long long)N);
    if (!pre) {
        const int64_t gx = (M + MQ_BM - 1) / MQ_BM;
        kernel_mmq7e<WT, false><<<dim3((unsigned)gx, (unsigned)gy), 128, 0, st>>>(w, wrow, NULL, NULL, a, arow, bias, y,
                                                                                 M, M, N, nunits);
        MI_CU_CHECK_LAUNCH("kernel_mmq7e");
        return MI_OK;
    }
    const int64_t rows = chunk_rows(K, M);
    int4 *wq = (int4 *)pre;
    float4 *ws = (float4 *)(pre + (size_t)rows * (size_t)nunits * 32);
    for (int64_t m0 = 0; m0 < M; m0 += rows) {
        const int64_t mc = M - m0 < rows ? M - m0 : rows;
        const int64_t units = mc * nunits;
        const unsigned ublocks = (unsigned)((units + 255) / 256 < 8192 ? (units + 255) / 256 : 8192);   /* grid-stride */
        kernel_unpack7e<WT><<<ublocks, 256, 0, st>>>(w + (size_t)m0 * wrow, wrow, mc, nunits, wq, ws);
        MI_CU_CHECK_LAUNCH("kernel_unpack7e");
        const int64_t gx = (mc + MQ_BM - 1) / MQ_BM;
        kernel_mmq7e<WT, true><<<dim3((unsigned)gx, (unsigned)gy), 128, 0, st>>>(
            NULL, wrow, wq, ws, a, arow, bias ? bias + m0 : NULL, y + m0, M, mc, N, nunits);
        MI_CU_CHECK_LAUNCH("kernel_mmq7e<pre>");
    }
    return MI_OK;
}

/* pre: e11, unpack once (the workspace then has room for mi7e_mmq_pre_workspace bytes) */
extern "C" mi_status mi7e_mmq(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                              int64_t K, int64_t M, int64_t N, void *workspace, bool pre) {
    if (!mi7e_mmq_supported(wt, K, N) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_mmq: type %s, K = %lld, N = %lld", mi_type_name(wt), (long long)K,
                      (long long)N);
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, N, workspace));
    cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *wb = (const uint8_t *)w, *a = (const uint8_t *)workspace;
    const size_t arow = mi7b_act_row_bytes(wt, K);
    uint8_t *pw = pre ? (uint8_t *)workspace + act_bytes_aligned(wt, K, N) : NULL;
    switch (wt) {
    case MI_TYPE_Q4_0: return launch_mmq<MI_TYPE_Q4_0>(st, wb, a, arow, bias, y, K, M, N, pw);
    case MI_TYPE_Q4_1: return launch_mmq<MI_TYPE_Q4_1>(st, wb, a, arow, bias, y, K, M, N, pw);
    case MI_TYPE_Q5_0: return launch_mmq<MI_TYPE_Q5_0>(st, wb, a, arow, bias, y, K, M, N, pw);
    case MI_TYPE_Q5_1: return launch_mmq<MI_TYPE_Q5_1>(st, wb, a, arow, bias, y, K, M, N, pw);
    case MI_TYPE_Q8_0: return launch_mmq<MI_TYPE_Q8_0>(st, wb, a, arow, bias, y, K, M, N, pw);
    case MI_TYPE_Q4_K: return launch_mmq<MI_TYPE_Q4_K>(st, wb, a, arow, bias, y, K, M, N, pw);
    case MI_TYPE_Q5_K: return launch_mmq<MI_TYPE_Q5_K>(st, wb, a, arow, bias, y, K, M, N, pw);
    case MI_TYPE_Q6_K: return launch_mmq<MI_TYPE_Q6_K>(st, wb, a, arow, bias, y, K, M, N, pw);
    default: return mi_err(MI_ERR_UNSUPPORTED, "mi7e_mmq: type %s", mi_type_name(wt));
    }
}

/* A batch's matmul at 9..64 rows that streams the weights: y [N, M] = W [K, M] (quantized) @ x
 * [K, N] (+ bias) for Q4_K, Q6_K, Q4_0 and Q8_0 weights. A block owns a band of GS_BM weight rows
 * and every token; the raw bytes of the band go through an NS-stage cp.async ring in shared
 * memory, one stage a super-block (8 units, 256 elements) of every row, alongside the same K
 * range of the N quantized activation rows (7b's Q8_K / Q8_0 layouts, mi7b_quantize_act). Each
 * of the 8 warps unpacks its 16 rows from shared memory straight into int8 mma fragments
 * (m16n8k32 per unit; Q6_K two m16n8k16 for its two 16-element scales) and scales each unit's
 * exact int32 dot in float with 7e's expressions (gemm_int8_kernel.cuh), so the result is
 * within 7b's matmul bound. When the bands are too few for the GPU, K is split over blocks
 * (partials summed in split order by split_sum.cuh): a fixed split for a shape, bitwise run to
 * run. The index math is emulated on the host by gates/8b/emu_gemm_stream.py. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"
#include "phase8b_batch/batch8b.h"
#include "phase8b_batch/split_sum.cuh"
#include "phase8b_batch/stream_ring.cuh"

#define GS_BM 128        /* weight rows a block: 8 warps of 16 */
#define GS_THREADS 256
/* Ring stages NS: 3 (two in flight while one is computed), or 2 at 33..64 tokens (item b5: one in
 * flight, but the smaller ring lets two blocks share a multiprocessor: at 64 tokens a Q4_K block of
 * 3 stages holds 152 KB and runs alone, 8 warps to hide every latency). Only where two blocks then
 * fit (Q4_K, Q4_0: 106 KB; Q6_K's and Q8_0's wider rows stay one a multiprocessor). */
#define GS_U 8           /* units (32 elements) a stage: one K-quant super-block */
#define GS_NMAX 64       /* tokens a block at most (8 mma n-tiles) */

/* Bytes of one stage of a weight row and of an activation row, and their ring slots: a row's
 * stage is copied as the aligned 16-byte windows that cover it (rows of Q6_K, Q4_0 and Q8_0 and
 * activation rows are not 16-byte aligned), so a slot holds up to 15 bytes before the data; an
 * odd count of 16-byte chunks puts rows gid 0..7 on distinct banks for the fragment loads. */
template <int WT> struct gs_fmt {
    static constexpr int act = wtraits<WT>::act;
    static constexpr int wbytes = wtraits<WT>::units == 8 ? wtraits<WT>::bytes : 8 * wtraits<WT>::bytes;
    static constexpr int abytes = act == MI_TYPE_Q8_K ? AK_BYTES : 8 * A8_BYTES;
    static constexpr int wch = ((wbytes + 30) / 16) | 1;   /* chunks a weight slot */
    static constexpr int ach = ((abytes + 30) / 16) | 1;
    static constexpr int wslot = 16 * wch, aslot = 16 * ach;
};

/* shared memory of kernel_gemm_stream<WT, NT, NS>: the ring, then the stage's scales */
template <int WT, int NT, int NS> struct gs_smem {
    static constexpr size_t ring_w = (size_t)NS * GS_BM * gs_fmt<WT>::wslot;
    static constexpr size_t ring_a = (size_t)NS * NT * 8 * gs_fmt<WT>::aslot;
    static constexpr size_t wsc = (size_t)GS_U * GS_BM * 4, asc = (size_t)GS_U * GS_NMAX * 4;
    static constexpr size_t bytes = ring_w + ring_a + 4 * wsc + 2 * asc;
};

__device__ __forceinline__ void mma_s8_16832(int (&d)[4], int a0, int a1, int a2, int a3, int b0, int b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
}
__device__ __forceinline__ void mma_s8_16816s(int (&d)[4], int a0, int a1, int b0) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0), "r"(0), "r"(0), "r"(0));
}

/* (float)x, exact for |x| < 2^22 (the unit dots of Q4_K, Q4_0, Q8_0), at full rate */
__device__ __forceinline__ float i2f_small(int x) { return __int_as_float(x + 0x4B400000) - 12582912.0f; }

/* Y [N, M] (or part [z][N][M] when part != NULL): block (bx, z) takes weight rows GS_BM bx ..
 * and stages [z chunk, (z + 1) chunk) of the nst = ceil(nunits / 8) stages. Warp w computes
 * rows 16 w .. 16 w + 15 of the band for tokens 0 .. 8 NT - 1; each output is written once. */
template <int WT, int NT, int NS>
__global__ void __launch_bounds__(GS_THREADS, 2)
kernel_gemm_stream(const uint8_t *__restrict__ W, size_t wrow, int64_t M, const uint8_t *__restrict__ A, size_t arow,
                   int64_t N, int64_t nunits, int64_t chunk, const float *__restrict__ bias, float *__restrict__ Y,
                   float *__restrict__ part) {
    using F = gs_fmt<WT>;
    using SM = gs_smem<WT, NT, NS>;
    constexpr int AT = F::act, NTOK = NT * 8;
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t *ring_w = smem, *ring_a = smem + SM::ring_w;
    float *sWd = (float *)(ring_a + SM::ring_a), *sWm = sWd + GS_U * GS_BM;  /* [unit][row] */
    int *sWl = (int *)(sWm + GS_U * GS_BM), *sWh = sWl + GS_U * GS_BM;         /* Q6_K's scales */
    float *sAd = (float *)(sWh + GS_U * GS_BM), *sAs = sAd + GS_U * GS_NMAX;   /* [unit][token] */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gid = lane >> 2, tig = lane & 3;
    const int64_t m0 = (int64_t)blockIdx.x * GS_BM;
    const int64_t nst = (nunits + GS_U - 1) / GS_U;
    const int64_t sb = (int64_t)blockIdx.y * chunk;
    const int64_t se = sb + chunk < nst ? sb + chunk : nst;
    const int nsb = (int)(se - sb);
    const uint8_t *wend = W + (size_t)M * wrow, *aend = A + (size_t)N * arow;

    /* ---- copy stage st (absolute) into ring slot p: every thread a share of the windows ---- */
    auto issue = [&](int64_t st, int p) {
        const size_t wo = (size_t)st * F::wbytes, ao = (size_t)st * F::abytes;
        const int wn = (int)(wrow - wo < (size_t)F::wbytes ? wrow - wo : (size_t)F::wbytes);
        const int an = (int)(arow - ao < (size_t)F::abytes ? arow - ao : (size_t)F::abytes);
        uint8_t *rw = ring_w + (size_t)p * GS_BM * F::wslot, *ra = ring_a + (size_t)p * NTOK * F::aslot;
        for (int i = tid; i < GS_BM * F::wch; i += GS_THREADS) {
            const int r = i / F::wch, c = i - r * F::wch;
            if (m0 + r < M) gs_window(rw + r * F::wslot, W + (size_t)(m0 + r) * wrow + wo, wn, c, W, wend);
        }
        for (int i = tid; i < NTOK * F::ach; i += GS_THREADS) {
            const int n = i / F::ach, c = i - n * F::ach;
            if (n < N) gs_window(ra + n * F::aslot, A + (size_t)n * arow + ao, an, c, A, aend);
        }
    };

    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[nt][i] = 0.0f;

#pragma unroll
    for (int p = 0; p < NS - 1; p++) {
        if (p < nsb) issue(sb + p, p);
        async_commit();
    }
    for (int s = 0; s < nsb; s++) {
        const int64_t st = sb + s;
        const int p = s % NS;
        async_wait<NS - 2>();   /* this thread's copies of stage s have landed */
        __syncthreads();           /* everyone's have; everyone is done with stage s - 1's slot */
        if (s + NS - 1 < nsb) issue(st + NS - 1, (s + NS - 1) % NS);
        async_commit();

        const int64_t u0 = st * GS_U;
        const int nu = (int)(nunits - u0 < GS_U ? nunits - u0 : GS_U);   /* units of this stage */
        const uint8_t *rw = ring_w + (size_t)p * GS_BM * F::wslot, *ra = ring_a + (size_t)p * NTOK * F::aslot;
        const size_t wo = (size_t)st * F::wbytes, ao = (size_t)st * F::abytes;

        /* ---- the stage's scales, as unit_unpack and 7e's staging compute them ---- */
        for (int i = tid; i < GS_U * GS_BM; i += GS_THREADS) {
            const int r = i % GS_BM, k = i / GS_BM;
            if (k >= nu || m0 + r >= M) continue;
            const uint8_t *b = rw + r * F::wslot + ((uintptr_t)(W + (size_t)(m0 + r) * wrow + wo) & 15);
            float d, mn = 0.0f;
            int sl = 1, sh = 1;
            if (WT == MI_TYPE_Q4_K) {
                int sc, m;
                k4_scale_min(b + 4, k, &sc, &m);
                d = ld_f16(b) * (float)sc;
                mn = ld_f16(b + 2) * (float)m;
            } else if (WT == MI_TYPE_Q6_K) {
                d = ld_f16(b + 208);
                sl = ((const int8_t *)(b + 192))[2 * k];
                sh = ((const int8_t *)(b + 192))[2 * k + 1];
            } else {
                d = ld_f16(b + k * wtraits<WT>::bytes);
            }
            sWd[k * GS_BM + r] = d;
            sWm[k * GS_BM + r] = mn;
            sWl[k * GS_BM + r] = sl;
            sWh[k * GS_BM + r] = sh;
        }
        for (int i = tid; i < GS_U * NTOK; i += GS_THREADS) {
            const int n = i % NTOK, k = i / NTOK;
            if (k >= nu || n >= N) continue;
            const uint8_t *b = ra + n * F::aslot + ((uintptr_t)(A + (size_t)n * arow + ao) & 15);
            if (AT == MI_TYPE_Q8_K) {
                const int16_t *bs = (const int16_t *)(b + 4 + 256);
                sAd[k * GS_NMAX + n] = *(const float *)b;
                sAs[k * GS_NMAX + n] = (float)((int)bs[2 * k] + (int)bs[2 * k + 1]);
            } else {
                sAd[k * GS_NMAX + n] = ld_f16(b + k * A8_BYTES);
            }
        }
        __syncthreads();

        /* ---- tensor cores: the warp's rows r0 = 16 warp + gid and r0 + 8 ---- */
        const int r0 = warp * 16 + gid;
        const uint8_t *w0 = rw + r0 * F::wslot + ((uintptr_t)(W + (size_t)(m0 + r0) * wrow + wo) & 15);
        const uint8_t *w1 = rw + (r0 + 8) * F::wslot + ((uintptr_t)(W + (size_t)(m0 + r0 + 8) * wrow + wo) & 15);
        int aoff[NT];   /* token gid of each n-tile: its data in the slot */
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int n = nt * 8 + gid;
            aoff[nt] = n * F::aslot + (int)((uintptr_t)(A + (size_t)n * arow + ao) & 15);
        }
        for (int k = 0; k < nu; k++) {
            int a0, a1, a2, a3;   /* A fragment: rows r0, r0 + 8; elements 4 tig .. and 16 + 4 tig .. */
            if (WT == MI_TYPE_Q4_K) {
                const int o = 16 + 32 * (k >> 1) + 4 * tig, sft = (k & 1) * 4;
                a0 = (int)((*(const uint32_t *)(w0 + o) >> sft) & 0x0F0F0F0Fu);
                a1 = (int)((*(const uint32_t *)(w1 + o) >> sft) & 0x0F0F0F0Fu);
                a2 = (int)((*(const uint32_t *)(w0 + o + 16) >> sft) & 0x0F0F0F0Fu);
                a3 = (int)((*(const uint32_t *)(w1 + o + 16) >> sft) & 0x0F0F0F0Fu);
            } else if (WT == MI_TYPE_Q6_K) {
                const int n = k >> 2, r = k & 3;
                const int ol = 64 * n + (r & 1) * 32 + 4 * tig, oh = 128 + 32 * n + 4 * tig;
                const int ls = (r >> 1) * 4, hs = 2 * r;
#define Q6W(w, e)                                                                                   \
    (int)__vsub4(((ld_u32_a2((w) + ol + (e)) >> ls) & 0x0F0F0F0Fu) |                             \
                     (((ld_u32_a2((w) + oh + (e)) >> hs) & 0x03030303u) << 4),                     \
                 0x20202020)
                a0 = Q6W(w0, 0);
                a1 = Q6W(w1, 0);
                a2 = Q6W(w0, 16);
                a3 = Q6W(w1, 16);
#undef Q6W
            } else if (WT == MI_TYPE_Q4_0) {
                const int o = 18 * k + 2 + 4 * tig;
                const uint32_t v0 = ld_u32_a2(w0 + o), v1 = ld_u32_a2(w1 + o);
                a0 = (int)__vsub4(v0 & 0x0F0F0F0Fu, 0x08080808);
                a1 = (int)__vsub4(v1 & 0x0F0F0F0Fu, 0x08080808);
                a2 = (int)__vsub4((v0 >> 4) & 0x0F0F0F0Fu, 0x08080808);
                a3 = (int)__vsub4((v1 >> 4) & 0x0F0F0F0Fu, 0x08080808);
            } else {   /* Q8_0 */
                const int o = 34 * k + 2 + 4 * tig;
                a0 = (int)ld_u32_a2(w0 + o);
                a1 = (int)ld_u32_a2(w1 + o);
                a2 = (int)ld_u32_a2(w0 + o + 16);
                a3 = (int)ld_u32_a2(w1 + o + 16);
            }
            const float wd0 = sWd[k * GS_BM + r0], wd1 = sWd[k * GS_BM + r0 + 8];
            const float wm0 = sWm[k * GS_BM + r0], wm1 = sWm[k * GS_BM + r0 + 8];
            int sl0 = 1, sh0 = 1, sl1 = 1, sh1 = 1;
            if (WT == MI_TYPE_Q6_K) {
                sl0 = sWl[k * GS_BM + r0];
                sh0 = sWh[k * GS_BM + r0];
                sl1 = sWl[k * GS_BM + r0 + 8];
                sh1 = sWh[k * GS_BM + r0 + 8];
            }
            const int bo = AT == MI_TYPE_Q8_K ? 4 + 32 * k + 4 * tig : A8_BYTES * k + 4 + 4 * tig;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const uint8_t *bp = ra + aoff[nt] + bo;   /* B fragment: token 8 nt + gid */
                const int b0 = *(const int *)bp, b1 = *(const int *)(bp + 16);
                const float2 ad = *(const float2 *)&sAd[k * GS_NMAX + nt * 8 + 2 * tig];
                if (WT == MI_TYPE_Q6_K) {
                    int lo[4], hi[4];
                    mma_s8_16816s(lo, a0, a1, b0);
                    mma_s8_16816s(hi, a2, a3, b1);
                    /* 7e: ad * (wd * (float)(sl lo + sh hi) - wmn * as), wmn = 0 for Q6_K */
                    acc[nt][0] += ad.x * (wd0 * (float)(sl0 * lo[0] + sh0 * hi[0]));
                    acc[nt][1] += ad.y * (wd0 * (float)(sl0 * lo[1] + sh0 * hi[1]));
                    acc[nt][2] += ad.x * (wd1 * (float)(sl1 * lo[2] + sh1 * hi[2]));
                    acc[nt][3] += ad.y * (wd1 * (float)(sl1 * lo[3] + sh1 * hi[3]));
                } else {
                    int c[4];
                    mma_s8_16832(c, a0, a1, a2, a3, b0, b1);   /* lo + hi of 7e, one exact sum */
                    if (AT == MI_TYPE_Q8_K) {
                        const float2 as = *(const float2 *)&sAs[k * GS_NMAX + nt * 8 + 2 * tig];
                        acc[nt][0] += ad.x * (wd0 * i2f_small(c[0]) - wm0 * as.x);
                        acc[nt][1] += ad.y * (wd0 * i2f_small(c[1]) - wm0 * as.y);
                        acc[nt][2] += ad.x * (wd1 * i2f_small(c[2]) - wm1 * as.x);
                        acc[nt][3] += ad.y * (wd1 * i2f_small(c[3]) - wm1 * as.y);
                    } else {
                        acc[nt][0] += (wd0 * ad.x) * i2f_small(c[0]);
                        acc[nt][1] += (wd0 * ad.y) * i2f_small(c[1]);
                        acc[nt][2] += (wd1 * ad.x) * i2f_small(c[2]);
                        acc[nt][3] += (wd1 * ad.y) * i2f_small(c[3]);
                    }
                }
            }
        }
    }
    async_wait<0>();   /* no copy outlives the block (the last commits are empty) */

#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int64_t m = m0 + warp * 16 + gid + (i >> 1) * 8;
            const int64_t n = nt * 8 + 2 * tig + (i & 1);
            if (m >= M || n >= N) continue;
            if (part) part[((size_t)blockIdx.y * N + n) * M + m] = acc[nt][i];
            else Y[(size_t)n * M + m] = bias ? acc[nt][i] + bias[m] : acc[nt][i];
        }
}

/* ---------------- launchers ---------------- */

static bool stream_type(mi_type wt) {
    return wt == MI_TYPE_Q4_K || wt == MI_TYPE_Q6_K || wt == MI_TYPE_Q4_0 || wt == MI_TYPE_Q8_0;
}
static int stream_nt(int64_t N) { return N <= 16 ? 2 : N <= 32 ? 4 : 8; }

/* blocks of kernel_gemm_stream<WT, NT, NS> a multiprocessor holds (its shared memory sets it);
 * the first call also raises the kernel's dynamic shared memory limit, once, before any launch */
template <int WT, int NT, int NS> static int stream_occupancy(void) {
    static int bps = 0;
    if (bps == 0) {
        int n = 1;
        if (cudaFuncSetAttribute(kernel_gemm_stream<WT, NT, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)gs_smem<WT, NT, NS>::bytes) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel_gemm_stream<WT, NT, NS>, GS_THREADS,
                                                          gs_smem<WT, NT, NS>::bytes) != cudaSuccess || n < 1) {
            (void)cudaGetLastError();
            n = 1;
        }
        bps = n;
    }
    return bps;
}
static int occupancy(mi_type wt, int64_t N, int stages) {
    const int nt = stream_nt(N);
#define OCC_(T)                                                                                                  \
    case T:                                                                                                      \
        return stages == 2 ? stream_occupancy<T, 8, 2>()                                                         \
               : nt == 2   ? stream_occupancy<T, 2, 3>()                                                         \
               : nt == 4   ? stream_occupancy<T, 4, 3>()                                                         \
                           : stream_occupancy<T, 8, 3>();
    switch (wt) {
        OCC_(MI_TYPE_Q4_K)
        OCC_(MI_TYPE_Q6_K)
        OCC_(MI_TYPE_Q4_0)
        OCC_(MI_TYPE_Q8_0)
    default: return 1;
    }
#undef OCC_
}

static int64_t stream_wbytes(mi_type wt) {
    return wt == MI_TYPE_Q4_K ? 144 : wt == MI_TYPE_Q6_K ? 210 : wt == MI_TYPE_Q4_0 ? 8 * 18 : 8 * 34;
}

extern "C" bool mi8b_gemm_stream_supported(mi_type wt, int64_t K, int64_t M, int64_t N, int stages) {
    return stream_type(wt) && N >= MI8B_STREAM_MIN_N && N <= MI8B_STREAM_MAX_N && M >= 1 &&
           mi7b_act_row_bytes(wt, K) > 0 && (M + GS_BM - 1) / GS_BM <= 0x7fffffff &&
           (stages == 3 || (stages == 2 && stream_nt(N) == 8 && occupancy(wt, N, 2) >= 2));
}

extern "C" int mi8b_gemm_stream_splits(mi_type wt, int64_t K, int64_t M, int64_t N, int stages) {
    if (!mi8b_gemm_stream_supported(wt, K, M, N, stages)) return 1;
    int S = 1;
    stream_chunk(M, N, (K / 32 + GS_U - 1) / GS_U, (int64_t)mi7e_sm_count() * occupancy(wt, N, stages),
                 stream_wbytes(wt), GS_BM, &S, NULL);
    return S;
}

static size_t stream_act_bytes(mi_type wt, int64_t K, int64_t N) {
    return (mi7b_act_row_bytes(wt, K) * (size_t)N + 255) & ~(size_t)255;
}

extern "C" size_t mi8b_gemm_stream_workspace(mi_type wt, int64_t K, int64_t M, int64_t N, int stages) {
    if (!mi8b_gemm_stream_supported(wt, K, M, N, stages)) return 0;
    const int S = mi8b_gemm_stream_splits(wt, K, M, N, stages);
    return stream_act_bytes(wt, K, N) + (S > 1 ? (size_t)S * (size_t)M * (size_t)N * sizeof(float) : 0);
}

template <int WT, int NT, int NS>
static mi_status launch_stream(cudaStream_t st, const uint8_t *w, const uint8_t *a, size_t arow, const float *bias,
                               float *y, int64_t K, int64_t M, int64_t N, float *part) {
    const size_t wrow = mi_row_size((mi_type)WT, K);
    const int64_t nunits = K / 32, nst = (nunits + GS_U - 1) / GS_U, bands = (M + GS_BM - 1) / GS_BM;
    int S = 1;
    const int64_t chunk = stream_chunk(M, N, nst, (int64_t)mi7e_sm_count() * stream_occupancy<WT, NT, NS>(),
                                       stream_wbytes((mi_type)WT), GS_BM, &S, NULL);
    kernel_gemm_stream<WT, NT, NS><<<dim3((unsigned)bands, (unsigned)S), GS_THREADS, gs_smem<WT, NT, NS>::bytes, st>>>(
        w, wrow, M, a, arow, N, nunits, chunk, bias, y, S > 1 ? part : NULL);
    MI_CU_CHECK_LAUNCH("kernel_gemm_stream");
    if (S > 1) {
        kernel_split_sum<<<split_sum_blocks(M, N), 256, 0, st>>>(part, bias, y, M, N, S);
        MI_CU_CHECK_LAUNCH("kernel_split_sum");
    }
    return MI_OK;
}

template <int WT>
static mi_status launch_stream_n(cudaStream_t st, const uint8_t *w, const uint8_t *a, size_t arow, const float *bias,
                                 float *y, int64_t K, int64_t M, int64_t N, float *part, int stages) {
    if (stages == 2) return launch_stream<WT, 8, 2>(st, w, a, arow, bias, y, K, M, N, part);
    switch (stream_nt(N)) {
    case 2: return launch_stream<WT, 2, 3>(st, w, a, arow, bias, y, K, M, N, part);
    case 4: return launch_stream<WT, 4, 3>(st, w, a, arow, bias, y, K, M, N, part);
    default: return launch_stream<WT, 8, 3>(st, w, a, arow, bias, y, K, M, N, part);
    }
}

extern "C" mi_status mi8b_gemm_stream(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                      float *y, int64_t K, int64_t M, int64_t N, int stages, void *workspace) {
    if (!mi8b_gemm_stream_supported(wt, K, M, N, stages))
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_stream: type %s, K = %lld, M = %lld, N = %lld, %d stages",
                      mi_type_name(wt), (long long)K, (long long)M, (long long)N, stages);
    if (!w || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi8b_gemm_stream: null pointer");
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, N, workspace));
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *a = (const uint8_t *)workspace, *wb = (const uint8_t *)w;
    float *part = (float *)((uint8_t *)workspace + stream_act_bytes(wt, K, N));
    const size_t arow = mi7b_act_row_bytes(wt, K);
    switch (wt) {
    case MI_TYPE_Q4_K: return launch_stream_n<MI_TYPE_Q4_K>(st, wb, a, arow, bias, y, K, M, N, part, stages);
    case MI_TYPE_Q6_K: return launch_stream_n<MI_TYPE_Q6_K>(st, wb, a, arow, bias, y, K, M, N, part, stages);
    case MI_TYPE_Q4_0: return launch_stream_n<MI_TYPE_Q4_0>(st, wb, a, arow, bias, y, K, M, N, part, stages);
    case MI_TYPE_Q8_0: return launch_stream_n<MI_TYPE_Q8_0>(st, wb, a, arow, bias, y, K, M, N, part, stages);
    default: return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_stream: weight type %s", mi_type_name(wt));
    }
}

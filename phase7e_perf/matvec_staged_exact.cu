/* One-token (N <= 8) quantized matmul and fused FFN head with staged weight rows. A block of
 * 4 warps copies RB whole, contiguous weight rows into shared memory with 16-byte coalesced
 * loads, 8 in flight per thread (7b's warp-per-row kernel reads 2-4 bytes per lane straight
 * from global memory and peaks at ~1.2 TB/s), then each warp dots one staged row at a time in
 * 7b's order: lane l takes units l, l+32, ... (7b's unit_unpack of dev7b.cuh, on the shared
 * copy), xor-butterfly. Activations are quantized exactly as 7b and the CPU do
 * (mi7b_quantize_act), so integer block dots equal the CPU's (docs/PHASE7E.md).
 * Built with --fmad=false (_exact): the SwiGLU epilogue is mi_canon_swiglu, bit for bit. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"
#include "common/core/mi_canon.h"
#include "phase7a_skeleton/cuda_pdl.cuh"

#define MMV_THREADS 128
#define MMV_SMEM_MAX (46u << 10)   /* under the 48 KB default: no opt-in attribute needed */
#define MMV_ROW_MAX ((size_t)22 << 10)   /* largest weight row (bytes) staged; fused = 2 rows */

/* ---------------- staging: n bytes at src -> shared dst, 16-byte loads ----------------
 * dst receives the bytes from floor16(src) on; the return value is src's offset in dst,
 * so a staged row keeps its global alignment mod 16 (unit_unpack's loads stay aligned).
 * A chunk that reaches outside the tensor [tb, te) is read byte by byte (never a read
 * past the allocation, clean under compute-sanitizer). Every thread of the block calls it. */
/* A range [src, src + n) seen as 16-byte chunks from floor16(src): chunks [lo, hi) lie
 * wholly inside the tensor [tb, te) and are copied with 16-byte loads; the first and the
 * last chunk may reach outside it and are then copied byte by byte (stage_edges). */
struct stage_range {
    uintptr_t a0;   /* floor16(src) */
    int nch, lo, hi;
};
__device__ __forceinline__ stage_range stage_range_of(const uint8_t *src, size_t n, const uint8_t *tb,
                                                      const uint8_t *te) {
    const uintptr_t s = (uintptr_t)src, a0 = s & ~(uintptr_t)15, a1 = (s + n + 15) & ~(uintptr_t)15;
    stage_range r;
    r.a0 = a0;
    r.nch = (int)((a1 - a0) >> 4);
    r.lo = a0 < (uintptr_t)tb ? 1 : 0;
    r.hi = a1 > (uintptr_t)te ? r.nch - 1 : r.nch;
    return r;
}

/* The chunks of a range that reach outside the tensor (at most the first and the last),
 * byte by byte; thread 0 only. */
__device__ __forceinline__ void stage_edges(uint4 *__restrict__ dst, const stage_range &r, const uint8_t *tb,
                                            const uint8_t *te) {
    if (threadIdx.x != 0) return;
    for (int e = 0; e < 2; e++) {
        const int i = e == 0 ? 0 : r.nch - 1;
        if (i >= r.lo && i < r.hi) continue;          /* loaded whole */
        if (e == 1 && r.nch == 1 && r.lo == 1) continue;   /* chunk 0 already done */
        uint8_t *d = (uint8_t *)(dst + i);
        for (int b = 0; b < 16; b++) {
            const uint8_t *p = (const uint8_t *)(r.a0 + 16 * (uintptr_t)i + b);
            d[b] = (p >= tb && p < te) ? *p : 0;
        }
    }
}

__device__ __forceinline__ size_t stage_bytes(uint4 *__restrict__ dst, const uint8_t *src, size_t n,
                                              const uint8_t *tb, const uint8_t *te) {
    const stage_range r = stage_range_of(src, n, tb, te);
    const int T = blockDim.x, tid = threadIdx.x;
    const uint4 *g = (const uint4 *)r.a0;
    for (int i = r.lo + tid; i < r.hi; i += 8 * T) {
        uint4 v[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (i + j * T < r.hi) v[j] = __ldg(g + i + j * T);
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (i + j * T < r.hi) dst[i + j * T] = v[j];
    }
    stage_edges(dst, r, tb, te);
    return (size_t)((uintptr_t)src - r.a0);
}

/* Both weights of the fused FFN at once: every load of the two ranges is issued before
 * the first store, so a block waits one memory round trip, not two (two stage_bytes calls
 * would serialise them). Same bytes in shared memory as two stage_bytes calls. */
__device__ __forceinline__ void stage_pair(uint4 *__restrict__ d1, const uint8_t *s1, const uint8_t *tb1,
                                           const uint8_t *te1, uint4 *__restrict__ d2, const uint8_t *s2,
                                           const uint8_t *tb2, const uint8_t *te2, size_t n, size_t *lead1,
                                           size_t *lead2) {
    const stage_range r1 = stage_range_of(s1, n, tb1, te1), r2 = stage_range_of(s2, n, tb2, te2);
    const int T = blockDim.x, tid = threadIdx.x;
    const uint4 *g1 = (const uint4 *)r1.a0, *g2 = (const uint4 *)r2.a0;
    const int first = r1.lo < r2.lo ? r1.lo : r2.lo, last = r1.hi > r2.hi ? r1.hi : r2.hi;
    for (int i = first + tid; i < last; i += 4 * T) {
        uint4 v[4], w[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int c = i + j * T;
            if (c >= r1.lo && c < r1.hi) v[j] = __ldg(g1 + c);
            if (c >= r2.lo && c < r2.hi) w[j] = __ldg(g2 + c);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int c = i + j * T;
            if (c >= r1.lo && c < r1.hi) d1[c] = v[j];
            if (c >= r2.lo && c < r2.hi) d2[c] = w[j];
        }
    }
    stage_edges(d1, r1, tb1, te1);
    stage_edges(d2, r2, tb2, te2);
    *lead1 = (size_t)((uintptr_t)s1 - r1.a0);
    *lead2 = (size_t)((uintptr_t)s2 - r2.a0);
}

/* ---------------- kernel ----------------
 * FUSED = false: Y [M, N] = W @ x (+ bias).  FUSED = true: Y [M, N] = swiglu(Wg @ x, Wu @ x).
 * Block b stages rows b*RB .. b*RB+RB-1 (one region, or one per weight when fused); A holds
 * the N quantized activation rows, arow bytes apart, read through the read-only cache. */
template <int WT, int NC, bool FUSED>
__global__ void __launch_bounds__(MMV_THREADS)
kernel_matvec_staged(const uint8_t *__restrict__ W, const uint8_t *__restrict__ W2, size_t wrow, int64_t M,
                     const uint8_t *__restrict__ A, size_t arow, const float *__restrict__ bias,
                     float *__restrict__ Y, int64_t N, int64_t nunits, int RB, size_t region) {
    MI_PDL_ENTRY();
    extern __shared__ uint4 smem[];
    const int64_t m0 = (int64_t)blockIdx.x * RB;
    const int rows = (int)(M - m0 < RB ? M - m0 : RB);
    const size_t nbytes = (size_t)rows * wrow, total = (size_t)M * wrow;
    size_t lead = 0, lead2 = 0;
    if (FUSED)
        stage_pair(smem, W + (size_t)m0 * wrow, W, W + total, smem + region / 16, W2 + (size_t)m0 * wrow, W2,
                   W2 + total, nbytes, &lead, &lead2);
    else
        lead = stage_bytes(smem, W + (size_t)m0 * wrow, nbytes, W, W + total);
    __syncthreads();
    const uint8_t *base = (const uint8_t *)smem + lead;
    const uint8_t *base2 = (const uint8_t *)smem + region + lead2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (RB == 1) {
        /* one (long) row per block: every warp takes a share, thread t units t, t+128, ...,
         * then the warp sums are added in warp order (fixed: repeated runs are bit-identical).
         * Keyed on RB, not on rows, so a row's order depends only on (K, type, M), and the
         * fused and unfused FFN see the same order whenever both stage more than one row. */
        __shared__ float red[2][MMV_THREADS / 32][NC];
        float acc[NC], acc2[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) acc[c] = acc2[c] = 0.0f;
        for (int64_t u = threadIdx.x; u < nunits; u += blockDim.x) {
            wunit w;
            unit_unpack<WT>(base, u, w);
#pragma unroll
            for (int c = 0; c < NC; c++)
                if (c < N) acc[c] += mi7b_unit_dot<wtraits<WT>::act, true>(w, A + (size_t)c * arow, u);
            if (FUSED) {
                wunit w2;
                unit_unpack<WT>(base2, u, w2);
#pragma unroll
                for (int c = 0; c < NC; c++)
                    if (c < N) acc2[c] += mi7b_unit_dot<wtraits<WT>::act, true>(w2, A + (size_t)c * arow, u);
            }
        }
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const float s = warp_sum(acc[c]), s2 = FUSED ? warp_sum(acc2[c]) : 0.0f;
            if (lane == 0) {
                red[0][warp][c] = s;
                red[1][warp][c] = s2;
            }
        }
        __syncthreads();
        if (threadIdx.x < NC && threadIdx.x < N) {
            const int c = threadIdx.x;
            float s = red[0][0][c], s2 = red[1][0][c];
            for (int k = 1; k < nw; k++) {
                s += red[0][k][c];
                s2 += red[1][k][c];
            }
            if (FUSED) Y[(size_t)c * M + m0] = mi_canon_swiglu(s, s2);
            else Y[(size_t)c * M + m0] = bias ? s + bias[m0] : s;
        }
        return;
    }
    for (int r = warp; r < rows; r += nw) {
        const uint8_t *wr = base + (size_t)r * wrow;
        const uint8_t *wr2 = base2 + (size_t)r * wrow;
        float acc[NC], acc2[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) acc[c] = acc2[c] = 0.0f;
        for (int64_t u = lane; u < nunits; u += 32) {
            wunit w;
            unit_unpack<WT>(wr, u, w);
#pragma unroll
            for (int c = 0; c < NC; c++)
                if (c < N) acc[c] += mi7b_unit_dot<wtraits<WT>::act, true>(w, A + (size_t)c * arow, u);
            if (FUSED) {
                wunit w2;
                unit_unpack<WT>(wr2, u, w2);
#pragma unroll
                for (int c = 0; c < NC; c++)
                    if (c < N) acc2[c] += mi7b_unit_dot<wtraits<WT>::act, true>(w2, A + (size_t)c * arow, u);
            }
        }
        const int64_t m = m0 + r;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const float s = warp_sum(acc[c]);
            if (FUSED) {
                const float s2 = warp_sum(acc2[c]);
                if (lane == 0 && c < N) Y[(size_t)c * M + m] = mi_canon_swiglu(s, s2);
            } else if (lane == 0 && c < N) {
                Y[(size_t)c * M + m] = bias ? s + bias[m] : s;
            }
        }
    }
}

/* ---------------- launchers ---------------- */

/* bytes of one weight row, 0 when the type has no quantized dot on the device */
static size_t staged_wrow(mi_type wt, int64_t K) {
    return mi7b_act_row_bytes(wt, K) > 0 ? mi_row_size(wt, K) : 0;
}

extern "C" bool mi7e_matvec_staged_supported(mi_type wt, int64_t K, int64_t N) {
    const size_t wrow = staged_wrow(wt, K);
    return wrow > 0 && wrow <= MMV_ROW_MAX && N >= 1 && N <= MI7E_MATVEC_MAX_N;
}

extern "C" size_t mi7e_matvec_staged_workspace(mi_type wt, int64_t K, int64_t N) {
    return mi7b_act_row_bytes(wt, K) * (size_t)(N > 0 ? N : 0);
}

/* rows per block: about 16 KB of weights per region, but enough blocks to cover the SMs twice */
static int staged_rows_per_block(size_t wrow, int regions, int64_t M) {
    int64_t rb = (int64_t)((16u << 10) / ((size_t)regions * wrow));
    if (rb > 32) rb = 32;
    const int64_t cover = M / (2 * (int64_t)mi7e_sm_count());
    if (rb > cover) rb = cover;
    if (rb < 1) rb = 1;
    return (int)rb;
}

template <int WT, bool FUSED>
static mi_status launch_staged(cudaStream_t st, const uint8_t *w, const uint8_t *w2, const uint8_t *a, size_t arow,
                               const float *bias, float *y, int64_t K, int64_t M, int64_t N) {
    const size_t wrow = mi_row_size((mi_type)WT, K);
    const int regions = FUSED ? 2 : 1;
    const int rb = staged_rows_per_block(wrow, regions, M);
    const size_t region = ((size_t)rb * wrow + 32 + 15) & ~(size_t)15;
    const size_t smem = region * (size_t)regions;
    if (smem > MMV_SMEM_MAX)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_matvec_staged: row of %zu bytes too large to stage", wrow);
    const int64_t nb = (M + rb - 1) / rb;
    if (nb > 0x7fffffff) return mi_err(MI_ERR_INVALID, "mi7e_matvec_staged: M = %lld too large", (long long)M);
    const int64_t nunits = K / 32;
    if (N == 1) {
        MI_CU_CHECK(MI_PDL_LAUNCH((kernel_matvec_staged<WT, 1, FUSED>), (unsigned)nb, MMV_THREADS, smem, st, w, w2, wrow,
                                  M, a, arow, bias, y, N, nunits, rb, region));
        MI_CU_CHECK_LAUNCH("kernel_matvec_staged<NC=1>");
    } else {
        MI_CU_CHECK(MI_PDL_LAUNCH((kernel_matvec_staged<WT, MI7E_MATVEC_MAX_N, FUSED>), (unsigned)nb, MMV_THREADS, smem,
                                  st, w, w2, wrow, M, a, arow, bias, y, N, nunits, rb, region));
        MI_CU_CHECK_LAUNCH("kernel_matvec_staged<NC=8>");
    }
    return MI_OK;
}

extern "C" mi_status mi7e_matvec_staged(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                        float *y, int64_t K, int64_t M, int64_t N, void *workspace) {
    if (!mi7e_matvec_staged_supported(wt, K, N) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_matvec_staged: type %s, K = %lld, N = %lld", mi_type_name(wt),
                      (long long)K, (long long)N);
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, N, workspace));
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *wb = (const uint8_t *)w, *a = (const uint8_t *)workspace;
    const size_t arow = mi7b_act_row_bytes(wt, K);
    MI_QTYPE_DISPATCH(wt, WT, return launch_staged<WT, false>(st, wb, NULL, a, arow, bias, y, K, M, N));
}

extern "C" mi_status mi7e_ffn_staged(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                                     int64_t K, int64_t F, int64_t N, void *workspace) {
    if (!mi7e_matvec_staged_supported(wt, K, N) || F <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_ffn_staged: type %s, K = %lld, N = %lld", mi_type_name(wt),
                      (long long)K, (long long)N);
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, N, workspace));
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *g = (const uint8_t *)wg, *u = (const uint8_t *)wu, *a = (const uint8_t *)workspace;
    const size_t arow = mi7b_act_row_bytes(wt, K);
    MI_QTYPE_DISPATCH(wt, WT, return launch_staged<WT, true>(st, g, u, a, arow, NULL, y, K, F, N));
}

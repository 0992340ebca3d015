/* Phase 7e items e2 and e5: one-token (N <= 8) quantized matmul and fused FFN head with
 * staged weight rows. A block of 4 warps copies RB whole, contiguous weight rows into
 * shared memory with 16-byte coalesced loads, 8 in flight per thread (the 7b kernel reads
 * 2-4 bytes per lane straight from global memory and peaks at ~1.2 TB/s), then each warp
 * dots one staged row at a time in 7b's order: lane l takes units l, l+32, ... (the 7b
 * unit_unpack of dev7b.cuh, on the shared copy), xor-butterfly. Activations are quantized
 * exactly as 7b and the CPU do, so integer block dots equal the CPU's (docs/PHASE7E.md).
 * Built with --fmad=false (_exact): the SwiGLU epilogue is mi_canon_swiglu, bit for bit. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"
#include "common/core/mi_canon.h"
#include "phase7e_perf/quant_q8_1.cuh"

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
 * the first store, so a block waits one memory round trip, not two (stage_bytes twice
 * serialised them). Same bytes in shared memory as two stage_bytes calls. */
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

/* ---------------- e2 / e5 kernel ----------------
 * FUSED = false: Y [M, N] = W @ x (+ bias).  FUSED = true: Y [M, N] = swiglu(Wg @ x, Wu @ x).
 * Block b stages rows b*RB .. b*RB+RB-1 (one region, or one per weight when fused).
 * QIN (e16; N = 1, the 32-element formats): the block quantizes x (X) itself into shared memory
 * at byte act_off, with 7b's Q8_1 arithmetic (q81_quant_block), and dots from there instead of
 * the workspace row A: the same bytes, so the same results, one launch fewer. */
template <int WT, int NC, bool FUSED, bool QIN>
__global__ void __launch_bounds__(MMV_THREADS)
kernel_mmv7e(const uint8_t *__restrict__ W, const uint8_t *__restrict__ W2, size_t wrow, int64_t M,
             const uint8_t *__restrict__ A_, size_t arow, const float *__restrict__ bias, float *__restrict__ Y,
             int64_t N, int64_t nunits, int RB, size_t region, const float *__restrict__ X, size_t act_off) {
    extern __shared__ uint4 smem[];
    static_assert(!QIN || (NC == 1 && (wtraits<WT>::act == MI_TYPE_Q8_0 || wtraits<WT>::act == MI_TYPE_Q8_1)),
                  "QIN: one token, 32-element formats");
    constexpr bool LDG = !QIN;   /* the activation: read-only global cache, or shared memory */
    const uint8_t *A = QIN ? (const uint8_t *)smem + act_off : A_;
    if (QIN) {   /* warp w quantizes blocks w, w + 4, ...; the staging barrier below publishes them */
        const int ql = threadIdx.x & 31;
        for (int64_t u = threadIdx.x >> 5; u < nunits; u += MMV_THREADS / 32)
            q81_quant_block(X + u * 32, (uint8_t *)smem + act_off + (size_t)u * A8_BYTES, ql);
    }
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
                if (c < N) acc[c] += mi7b_unit_dot<wtraits<WT>::act, LDG>(w, A + (size_t)c * arow, u);
            if (FUSED) {
                wunit w2;
                unit_unpack<WT>(base2, u, w2);
#pragma unroll
                for (int c = 0; c < NC; c++)
                    if (c < N) acc2[c] += mi7b_unit_dot<wtraits<WT>::act, LDG>(w2, A + (size_t)c * arow, u);
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
                if (c < N) acc[c] += mi7b_unit_dot<wtraits<WT>::act, LDG>(w, A + (size_t)c * arow, u);
            if (FUSED) {
                wunit w2;
                unit_unpack<WT>(wr2, u, w2);
#pragma unroll
                for (int c = 0; c < NC; c++)
                    if (c < N) acc2[c] += mi7b_unit_dot<wtraits<WT>::act, LDG>(w2, A + (size_t)c * arow, u);
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
static size_t e7_wrow(mi_type wt, int64_t K) {
    return mi7b_act_row_bytes(wt, K) > 0 ? mi_row_size(wt, K) : 0;
}

extern "C" bool mi7e_mmv_supported(mi_type wt, int64_t K, int64_t N) {
    const size_t wrow = e7_wrow(wt, K);
    return wrow > 0 && wrow <= MMV_ROW_MAX && N >= 1 && N <= MI7E_MMV_MAX_N;
}

extern "C" size_t mi7e_mmv_workspace(mi_type wt, int64_t K, int64_t N) {
    return mi7b_act_row_bytes(wt, K) * (size_t)(N > 0 ? N : 0);
}

/* rows per block: about 16 KB of weights per region, but enough blocks to cover the SMs twice */
static int mmv_rows_per_block(size_t wrow, int regions, int64_t M) {
    int64_t rb = (int64_t)((16u << 10) / ((size_t)regions * wrow));
    if (rb > 32) rb = 32;
    const int64_t cover = M / (2 * (int64_t)mi7e_sm_count());
    if (rb > cover) rb = cover;
    if (rb < 1) rb = 1;
    return (int)rb;
}

/* shared bytes of x quantized in the block (QIN): the 36-byte blocks, 16-byte rounded */
static size_t qin_bytes(int64_t K) { return ((size_t)(K / 32) * A8_BYTES + 15) & ~(size_t)15; }

/* x: the f32 activation for QIN (N = 1, 32-element formats), else NULL (a: its quantized rows) */
template <int WT, bool FUSED>
static mi_status launch_mmv(cudaStream_t st, const uint8_t *w, const uint8_t *w2, const uint8_t *a, size_t arow,
                            const float *bias, float *y, int64_t K, int64_t M, int64_t N, const float *x = NULL) {
    const size_t wrow = mi_row_size((mi_type)WT, K);
    const int regions = FUSED ? 2 : 1;
    const int rb = mmv_rows_per_block(wrow, regions, M);
    const size_t region = ((size_t)rb * wrow + 32 + 15) & ~(size_t)15;
    const size_t smem = region * (size_t)regions;
    if (smem > MMV_SMEM_MAX) return mi_err(MI_ERR_UNSUPPORTED, "mi7e_mmv: row of %zu bytes too large to stage", wrow);
    const int64_t nb = (M + rb - 1) / rb;
    if (nb > 0x7fffffff) return mi_err(MI_ERR_INVALID, "mi7e_mmv: M = %lld too large", (long long)M);
    const int64_t nunits = K / 32;
    constexpr bool Q32 = wtraits<WT>::act == MI_TYPE_Q8_0 || wtraits<WT>::act == MI_TYPE_Q8_1;
    if constexpr (Q32) {
        if (x) {   /* the caller checked smem + qin_bytes(K) <= MMV_SMEM_MAX (mi7e_mmv_qin_fits) */
            kernel_mmv7e<WT, 1, FUSED, true><<<(unsigned)nb, MMV_THREADS, smem + qin_bytes(K), st>>>(
                w, w2, wrow, M, NULL, 0, bias, y, 1, nunits, rb, region, x, smem);
            MI_CU_CHECK_LAUNCH("kernel_mmv7e<QIN>");
            return MI_OK;
        }
    }
    if (N == 1) {
        kernel_mmv7e<WT, 1, FUSED, false><<<(unsigned)nb, MMV_THREADS, smem, st>>>(w, w2, wrow, M, a, arow, bias, y, N,
                                                                                 nunits, rb, region, NULL, 0);
        MI_CU_CHECK_LAUNCH("kernel_mmv7e<NC=1>");
    } else {
        kernel_mmv7e<WT, MI7E_MMV_MAX_N, FUSED, false><<<(unsigned)nb, MMV_THREADS, smem, st>>>(
            w, w2, wrow, M, a, arow, bias, y, N, nunits, rb, region, NULL, 0);
        MI_CU_CHECK_LAUNCH("kernel_mmv7e<NC=8>");
    }
    return MI_OK;
}

/* QIN applies: one token, a 32-element format, and the staged rows plus x's blocks fit */
static bool mmv_qin_fits(mi_type wt, int64_t K, int64_t M, int64_t N, bool fused) {
    if (N != 1) return false;
    switch (wt) {
    case MI_TYPE_Q4_0: case MI_TYPE_Q4_1: case MI_TYPE_Q5_0: case MI_TYPE_Q5_1: case MI_TYPE_Q8_0:
        break;
    default:
        return false;
    }
    const size_t wrow = mi_row_size(wt, K);
    const int regions = fused ? 2 : 1;
    const int rb = mmv_rows_per_block(wrow, regions, M);
    const size_t region = ((size_t)rb * wrow + 32 + 15) & ~(size_t)15;
    return region * (size_t)regions + qin_bytes(K) <= MMV_SMEM_MAX;
}

template <bool FUSED>
static mi_status mmv_dispatch(cudaStream_t st, mi_type wt, const uint8_t *w, const uint8_t *w2, const uint8_t *a,
                              size_t arow, const float *bias, float *y, int64_t K, int64_t M, int64_t N,
                              const float *x = NULL) {
    switch (wt) {
    case MI_TYPE_Q4_0: return launch_mmv<MI_TYPE_Q4_0, FUSED>(st, w, w2, a, arow, bias, y, K, M, N, x);
    case MI_TYPE_Q4_1: return launch_mmv<MI_TYPE_Q4_1, FUSED>(st, w, w2, a, arow, bias, y, K, M, N, x);
    case MI_TYPE_Q5_0: return launch_mmv<MI_TYPE_Q5_0, FUSED>(st, w, w2, a, arow, bias, y, K, M, N, x);
    case MI_TYPE_Q5_1: return launch_mmv<MI_TYPE_Q5_1, FUSED>(st, w, w2, a, arow, bias, y, K, M, N, x);
    case MI_TYPE_Q8_0: return launch_mmv<MI_TYPE_Q8_0, FUSED>(st, w, w2, a, arow, bias, y, K, M, N, x);
    case MI_TYPE_Q4_K: return launch_mmv<MI_TYPE_Q4_K, FUSED>(st, w, w2, a, arow, bias, y, K, M, N);
    case MI_TYPE_Q5_K: return launch_mmv<MI_TYPE_Q5_K, FUSED>(st, w, w2, a, arow, bias, y, K, M, N);
    case MI_TYPE_Q6_K: return launch_mmv<MI_TYPE_Q6_K, FUSED>(st, w, w2, a, arow, bias, y, K, M, N);
    default: return mi_err(MI_ERR_UNSUPPORTED, "mi7e_mmv: type %s", mi_type_name(wt));
    }
}

extern "C" mi_status mi7e_mmv(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                              int64_t K, int64_t M, int64_t N, void *workspace) {
    if (!mi7e_mmv_supported(wt, K, N) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_mmv: type %s, K = %lld, N = %lld", mi_type_name(wt), (long long)K,
                      (long long)N);
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, N, workspace));
    return mmv_dispatch<false>((cudaStream_t)stream, wt, (const uint8_t *)w, NULL, (const uint8_t *)workspace,
                               mi7b_act_row_bytes(wt, K), bias, y, K, M, N);
}

extern "C" mi_status mi7e_ffn(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                              int64_t K, int64_t F, int64_t N, void *workspace) {
    if (!mi7e_mmv_supported(wt, K, N) || F <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_ffn: type %s, K = %lld, N = %lld", mi_type_name(wt), (long long)K,
                      (long long)N);
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, N, workspace));
    return mmv_dispatch<true>((cudaStream_t)stream, wt, (const uint8_t *)wg, (const uint8_t *)wu,
                              (const uint8_t *)workspace, mi7b_act_row_bytes(wt, K), NULL, y, K, F, N);
}

/* ---------------- e16: the same kernels with x quantized in the block (QIN) ----------------
 * One token and a 32-element format whose staged rows and x's blocks fit the shared budget;
 * anything else takes the plain path (quantize into the workspace, then the kernel): the same
 * bits either way, so the caller needs no second rule. */
extern "C" mi_status mi7e_mmv_qin(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                                  int64_t K, int64_t M, int64_t N, void *workspace) {
    if (!mi7e_mmv_supported(wt, K, N) || M <= 0 || !mmv_qin_fits(wt, K, M, N, false))
        return mi7e_mmv(stream, wt, w, x, bias, y, K, M, N, workspace);
    return mmv_dispatch<false>((cudaStream_t)stream, wt, (const uint8_t *)w, NULL, NULL, 0, bias, y, K, M, 1, x);
}

extern "C" mi_status mi7e_ffn_qin(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                                  int64_t K, int64_t F, int64_t N, void *workspace) {
    if (!mi7e_mmv_supported(wt, K, N) || F <= 0 || !mmv_qin_fits(wt, K, F, N, true))
        return mi7e_ffn(stream, wt, wg, wu, x, y, K, F, N, workspace);
    return mmv_dispatch<true>((cudaStream_t)stream, wt, (const uint8_t *)wg, (const uint8_t *)wu, NULL, 0, NULL, y, K, F,
                              1, x);
}

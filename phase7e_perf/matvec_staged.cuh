/* The staged-row one-token matmul's pieces (matvec_staged_exact.cu), shared with a later phase's
 * kernels that prepare the activation row themselves (8a's staged FFN with the norm and the
 * quantization in the block): the staging of whole weight rows into shared memory, the dots of
 * the staged rows in 7b's order, and the launch shape (rows a block, the shared regions). One
 * body, so a kernel that includes it computes the staged kernel's bits. Include from a file
 * built with --fmad=false (*_exact.cu), as the staged kernel is: the unit dots and the SwiGLU
 * epilogue are mi_canon's expressions only without contraction. */
#ifndef MI_MATVEC_STAGED_CUH
#define MI_MATVEC_STAGED_CUH
#include "phase7b_ops/dev7b.cuh"
#include "phase7e_perf/perf7e.h"
#include "common/core/mi_canon.h"

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

/* ---------------- the dots of the staged rows ----------------
 * FUSED = false: Y [M, N] = W @ x (+ bias).  FUSED = true: Y [M, N] = swiglu(Wg @ x, Wu @ x).
 * The block's rows m0 .. m0 + rows - 1 are staged at base (and base2 when fused), wrow bytes
 * apart; A holds the N quantized activation rows, arow bytes apart, read through the read-only
 * cache when LDG (global memory) and plainly otherwise (a copy in shared memory). Every thread
 * of the block calls it after the barrier that ends the staging. */
template <int WT, int NC, bool FUSED, bool LDG>
__device__ __forceinline__ void staged_rows_dot(const uint8_t *__restrict__ base, const uint8_t *__restrict__ base2,
                                                size_t wrow, int64_t M, int64_t m0, int rows, int RB,
                                                const uint8_t *__restrict__ A, size_t arow,
                                                const float *__restrict__ bias, float *__restrict__ Y, int64_t N,
                                                int64_t nunits) {
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

/* ---------------- the launch shape ---------------- */

/* rows per block: about 16 KB of weights per region, but enough blocks to cover the SMs twice */
static inline int staged_rows_per_block(size_t wrow, int regions, int64_t M) {
    int64_t rb = (int64_t)((16u << 10) / ((size_t)regions * wrow));
    if (rb > 32) rb = 32;
    const int64_t cover = M / (2 * (int64_t)mi7e_sm_count());
    if (rb > cover) rb = cover;
    if (rb < 1) rb = 1;
    return (int)rb;
}
/* bytes of one shared region: rb staged rows, the lead of an unaligned start, 16-byte rounded */
static inline size_t staged_region(int rb, size_t wrow) { return ((size_t)rb * wrow + 32 + 15) & ~(size_t)15; }

#endif

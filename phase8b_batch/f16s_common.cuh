/* What b6's two Q4_K / Q6_K matmuls of a batch share (gemm_f16_stream.cu with mma.sync,
 * gemm_f16_wgmma_sm90a.cu with wgmma): the bands and their ring slots, how the units are cut into
 * runs (the plan), a stage's scales rounded to f16 once, and a unit's weights dequantized into
 * f16 fragment registers. */
#ifndef MI_F16S_COMMON_CUH
#define MI_F16S_COMMON_CUH
#include <stdint.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "common/core/mi_err.h"
#include "phase7b_ops/dev7b.cuh"
#include "phase8b_batch/f16_frag.cuh"
#include "phase8b_batch/stream_ring.cuh"
#include "phase8a_decode/decode8a.h"

#define FS_BM 128        /* weight rows a block (a band) */
#define FS_NS 3          /* ring stages: two in flight while one is computed */
#define FS_SB 256        /* elements a stage: one super-block */

template <int WT> struct fs_fmt {
    static constexpr int wbytes = WT == MI_TYPE_Q4_K ? 144 : 210;   /* a super-block */
    static constexpr int wch = ((wbytes + 30) / 16) | 1;            /* 16-byte windows a slot; odd: rows on distinct banks */
    static constexpr int wslot = 16 * wch;
};

/* How the units (band x super-block, band-major) are cut into runs, one block a run: stream-K
 * (S == 0: P runs of units / P, one a resident block) or a K split (S >= 1: run p takes chunk
 * stages of band p / S from stage (p % S) chunk, the last chunk of a band what is left; P = bands
 * x S; S == 1: whole bands). gemm_f16_stream.cu's f16s_choose_plan picks one per shape. */
typedef struct {
    int64_t units, nst, chunk;
    int P, S;
} f16s_plan;

/* the first unit of run p; run p is [start (p), start (p + 1)). I: int64_t, or uint32_t where
 * units x (P + 1) < 2^32 (f16s_plan_narrow: every products' and quotients' range), whose division
 * is a few instructions where int64_t's is a long dependent sequence */
template <typename I> __host__ __device__ __forceinline__ I f16s_run_start_t(const f16s_plan &pl, I p) {
    const I units = (I)pl.units, P = (I)pl.P, S = (I)pl.S, nst = (I)pl.nst, chunk = (I)pl.chunk;
    if (S == 0) return p * units / P;
    const I z = (p % S) * chunk;
    return (p / S) * nst + (z < nst ? z : nst);
}
/* the run holding unit u: the last p with f16s_run_start (p) <= u (no run is empty) */
template <typename I> __host__ __device__ __forceinline__ I f16s_run_of_t(const f16s_plan &pl, I u) {
    const I units = (I)pl.units, P = (I)pl.P, S = (I)pl.S, nst = (I)pl.nst, chunk = (I)pl.chunk;
    if (S == 0) return ((u + 1) * P - 1) / units;
    const I j = (u % nst) / chunk;
    return (u / nst) * S + (j < S - 1 ? j : S - 1);
}
__host__ __device__ __forceinline__ bool f16s_plan_narrow(const f16s_plan &pl) {
    return (uint64_t)pl.units * (uint64_t)(pl.P + 1) < ((uint64_t)1 << 32) && pl.nst * (int64_t)(pl.S + 1) < (1ll << 31);
}
__host__ __device__ __forceinline__ int64_t f16s_run_start(const f16s_plan &pl, int64_t p) {
    return f16s_run_start_t<int64_t>(pl, p);
}
__host__ __device__ __forceinline__ int64_t f16s_run_of(const f16s_plan &pl, int64_t u) {
    return f16s_run_of_t<int64_t>(pl, u);
}

/* Item b40: a run of Q4_K matmuls of one x (q, k and a Q4_K v; gate and up) as one matmul of
 * their bands: segment s owns bands band0[s] .. band0[s + 1] - 1 (its M[s] rows in bands of
 * FS_BM, the last one short where M[s] is not a multiple), its weights W[s], bias and output Y[s]
 * [N][M[s]]. The plan cuts the run's bands as one weight's; a band lies in one segment. */
struct f16s_run {
    const uint8_t *W[MI8A_RUN_MAX];
    const float *bias[MI8A_RUN_MAX];
    float *Y[MI8A_RUN_MAX];
    int64_t M[MI8A_RUN_MAX];
    int64_t band0[MI8A_RUN_MAX + 1];
    int n;
    /* the segment of band b, by compares and selects with constant indices (a kernel parameter
     * indexed at run time would be copied to local memory) */
    __device__ __forceinline__ int seg(int64_t b) const {
        int s = 0;
#pragma unroll
        for (int k = 1; k < MI8A_RUN_MAX; k++)
            if (k < n && b >= band0[k]) s = k;
        return s;
    }
    template <class T, int L> __device__ __forceinline__ static T pick(const T (&a)[L], int i) {
        T v = a[0];
#pragma unroll
        for (int k = 1; k < L; k++)
            if (i == k) v = a[k];
        return v;
    }
    /* band b's segment, and in *m0 the band's first row in that segment's matmul */
    __device__ __forceinline__ int locate(int64_t b, int64_t *m0) const {
        const int s = seg(b);
        *m0 = (b - pick(band0, s)) * FS_BM;
        return s;
    }
};

/* Item b42: a run's cut bands left for the node after it. A gate/up run whose SwiGLU follows it
 * (8b's pass marks the two: MI_MM_FIXUP_NEXT, MI_SWIGLU_FIXUP) does not launch the fixup; the
 * SwiGLU sums each cut band's pieces as kernel_f16s_fixup does (f16s_band_cut), as it reads the
 * gate and up values. rec: what it needs of the run (its plan, table and partials). */
struct f16s_fixup_rec {
    f16s_plan pl;
    f16s_run run;
    const float *part;
    int64_t N;
};
/* band b is cut (a run boundary falls inside it): its pieces are slot 2p - 1 (the run holding its
 * first unit), then slots 2q for q = p .. hi, kernel_f16s_fixup's block p - 1's sum */
template <typename I> __device__ __forceinline__ bool f16s_band_cut(const f16s_plan &pl, I b, I &p, I &hi) {
    const I nst = (I)pl.nst, u0 = b * nst;
    p = f16s_run_of_t<I>(pl, u0) + 1;
    if (p >= (I)pl.P || f16s_run_start_t<I>(pl, p) >= u0 + nst) return false;
    hi = f16s_run_of_t<I>(pl, u0 + nst - 1);
    return true;
}
/* the record of the run whose outputs are g and u (segments 0 and 1), launched on stream st and
 * not yet summed, taken into *out (*taken: whether one was left); MI_ERR_INTERNAL where one was
 * left for other operands (kept) */
mi_status f16s_fixup_take(cudaStream_t st, const float *g, const float *u, f16s_fixup_rec *out, bool *taken);

/* Block p's walk through its run of the plan: the unit to load next (band ib, stage is) and the
 * unit computed (band cb, stage cs) both step through the run in unit order, across band edges;
 * head: the piece in progress began inside its band (the run's first piece). */
struct fs_walk {
    int64_t ib, cb;
    int is, cs, nst, len;
    bool head;
    __device__ __forceinline__ fs_walk(const f16s_plan &pl, int p, int64_t K) {
        const int64_t u0 = f16s_run_start(pl, p);
        nst = (int)(K / FS_SB);
        len = (int)(f16s_run_start(pl, p + 1) - u0);
        ib = cb = u0 / nst;
        is = cs = (int)(u0 - ib * nst);
        head = cs != 0;
    }
    __device__ __forceinline__ void loaded() {
        if (++is == nst) is = 0, ib++;
    }
    __device__ __forceinline__ void computed() {
        if (++cs == nst) cs = 0, cb++;
    }
    /* the unit computed ends a piece: its band's last stage or the run's last unit (s) */
    __device__ __forceinline__ bool piece_ends(int s) const { return cs == nst - 1 || s == len - 1; }
};

/* Band m0's stage at byte wo of each row into ring slot rw (row r at r wslot, its bytes from
 * (address & 15) on: gs_window), by the block's nthreads threads; rows past M are not copied */
template <int WT>
__device__ __forceinline__ void fs_copy_weights(uint8_t *rw, const uint8_t *W, size_t wrow, int64_t M, int64_t m0,
                                                size_t wo, int tid, int nthreads) {
    using F = fs_fmt<WT>;
    const uint8_t *wend = W + (size_t)M * wrow;
    for (int i = tid; i < FS_BM * F::wch; i += nthreads) {
        const int r = i / F::wch, c = i - r * F::wch;
        if (m0 + r < M) gs_window(rw + r * F::wslot, W + (size_t)(m0 + r) * wrow + wo, F::wbytes, c, W, wend);
    }
}

/* Unit k's scales of the row whose super-block is at b: Q4_K d sc into s and -dmin m into m; Q6_K
 * d sc of the unit's two 16-element halves. Rounded to f16 once. */
template <int WT>
__device__ __forceinline__ void fs_unit_scales(const uint8_t *b, int k, __half2 &s, __half2 &m) {
    if (WT == MI_TYPE_Q4_K) {
        int sc, mn;
        k4_scale_min(b + 4, k, &sc, &mn);
        s = __float2half2_rn(ld_f16(b) * (float)sc);
        m = __float2half2_rn(-(ld_f16(b + 2) * (float)mn));
    } else {
        const float d = ld_f16(b + 208);
        s = __float2half2_rn(d * (float)((const int8_t *)(b + 192))[2 * k]);
        m = __float2half2_rn(d * (float)((const int8_t *)(b + 192))[2 * k + 1]);
    }
}

/* Unit k's scales of two rows at once (super-blocks at b0, b1): fs_unit_scales' values, from
 * each row's codes packed into the two halves of one word (six bits under 1024's exponent, Q6_K's
 * int8 offset by 128: exactly 1024 + code, 1152 + code) and one f16 multiply of the pair by the
 * rows' d (-dmin): the exact product rounded once to f16, as fs_unit_scales' f32 product (exact:
 * at most 19 bits) rounded to f16 is, so the same halves in a third of the instructions. */
template <int WT>
__device__ __forceinline__ void fs_pair_scales(const uint8_t *b0, const uint8_t *b1, int k, __half2 &s0, __half2 &s1,
                                               __half2 &m0, __half2 &m1) {
    auto pair = [&](int o) { return (uint32_t)b0[o] | ((uint32_t)b1[o] << 16); };   /* byte o of both rows */
    auto half_at = [](const uint8_t *p) { return __ushort_as_half(*(const uint16_t *)p); };
    __half2 S, M;
    if (WT == MI_TYPE_Q4_K) {
        uint32_t sc, mn;
        if (k < 4) {
            sc = and_or<0x003F003Fu, 0x64006400u>(pair(4 + k));
            mn = and_or<0x003F003Fu, 0x64006400u>(pair(8 + k));
        } else {   /* low four bits from byte k + 4, high two from the top of bytes k - 4 (sc) and k (min) */
            const uint32_t a = pair(8 + k);
            sc = and_or_r<0x000F000Fu>(a, and_or<0x00300030u, 0x64006400u>(pair(k) >> 2));
            mn = and_or_r<0x000F000Fu>(a >> 4, and_or<0x00300030u, 0x64006400u>(pair(k + 4) >> 2));
        }
        const __half2 d = __halves2half2(half_at(b0), half_at(b1)), dm = __halves2half2(half_at(b0 + 2), half_at(b1 + 2));
        S = __hmul2(d, __hsub2(bits_h2(sc), h2_const(0x6400)));
        M = __hmul2(__hneg2(dm), __hsub2(bits_h2(mn), h2_const(0x6400)));
    } else {
        const __half2 d = __halves2half2(half_at(b0 + 208), half_at(b1 + 208));
        S = __hmul2(d, __hsub2(bits_h2((pair(192 + 2 * k) ^ 0x00800080u) | 0x64006400u), h2_const(0x6480)));
        M = __hmul2(d, __hsub2(bits_h2((pair(193 + 2 * k) ^ 0x00800080u) | 0x64006400u), h2_const(0x6480)));
    }
    s0 = __low2half2(S), s1 = __high2half2(S), m0 = __low2half2(M), m1 = __high2half2(M);
}

/* A stage's scales, by the block's nthreads threads: unit k of row r of the band in ring slot rw
 * (stage bytes wo of each row) into sS [k][r] and sM [k][r] */
template <int WT>
__device__ __forceinline__ void fs_stage_scales(const uint8_t *rw, const uint8_t *W, size_t wrow, int64_t m0, size_t wo,
                                                int64_t M, __half2 *sS, __half2 *sM, int tid, int nthreads) {
    using F = fs_fmt<WT>;
    for (int i = tid; i < 8 * FS_BM; i += nthreads) {
        const int r = i % FS_BM, k = i / FS_BM;
        if (m0 + r >= M) continue;
        const uint8_t *b = rw + r * F::wslot + ((uintptr_t)(W + (size_t)(m0 + r) * wrow + wo) & 15);
        fs_unit_scales<WT>(b, k, sS[k * FS_BM + r], sM[k * FS_BM + r]);
    }
}

/* A Q4_K unit's fragments from its four level words (v0, v2: row gid's elements 4 tig .. and
 * 16 + 4 tig .., v1, v3 row gid + 8's), the low nibbles (HI: the high ones) of each byte pair:
 * fs_unit_frags' register order; s0, t0 row gid's scale and min, s1, t1 row gid + 8's */
template <bool HI>
__device__ __forceinline__ void q4_unit_frags(uint32_t v0, uint32_t v1, uint32_t v2, uint32_t v3, __half2 s0,
                                              __half2 s1, __half2 t0, __half2 t1, uint32_t (&A1)[4],
                                              uint32_t (&A2)[4]) {
    A1[0] = deq_q4<HI>(v0, s0, t0), A1[1] = deq_q4<HI>(v1, s1, t1);
    A1[2] = deq_q4<HI>(v0 >> 8, s0, t0), A1[3] = deq_q4<HI>(v1 >> 8, s1, t1);
    A2[0] = deq_q4<HI>(v2, s0, t0), A2[1] = deq_q4<HI>(v3, s1, t1);
    A2[2] = deq_q4<HI>(v2 >> 8, s0, t0), A2[3] = deq_q4<HI>(v3 >> 8, s1, t1);
}

/* Unit k (32 elements) of two rows (w0: row gid, w1: row gid + 8 of a 16-row group, each its
 * super-block in the ring) as the A registers of two k16 steps: A1 elements 4 tig .. + 3, A2
 * 16 + 4 tig .. + 3. Register 0 / 2 of a step holds elements (4 tig, 4 tig + 2) / (4 tig + 1,
 * 4 tig + 3) of row gid, 1 / 3 the same of row gid + 8 (gemm_f16_stream.cu's header: the k order
 * the level words unpack to). s0, t0: row gid's scale and min (Q6_K: its halves' scales), s1, t1
 * row gid + 8's. */
template <int WT>
__device__ __forceinline__ void fs_unit_frags(const uint8_t *w0, const uint8_t *w1, int k, int tig, __half2 s0,
                                              __half2 s1, __half2 t0, __half2 t1, uint32_t (&A1)[4],
                                              uint32_t (&A2)[4]) {
    if (WT == MI_TYPE_Q4_K) {   /* unit k: the low nibbles of its chunk where k is even, the high ones where odd */
        const int o = 16 + 32 * (k >> 1) + 4 * tig;
        const uint32_t v0 = *(const uint32_t *)(w0 + o), v1 = *(const uint32_t *)(w1 + o);
        const uint32_t v2 = *(const uint32_t *)(w0 + o + 16), v3 = *(const uint32_t *)(w1 + o + 16);
        if (k & 1) q4_unit_frags<true>(v0, v1, v2, v3, s0, s1, t0, t1, A1, A2);
        else q4_unit_frags<false>(v0, v1, v2, v3, s0, s1, t0, t1, A1, A2);
    } else {   /* Q6_K: unit k is quarter k & 3 of half k >> 2; 16-element halves scaled by s and t */
        const int n = k >> 2, q = k & 3;
        const int ol = 64 * n + (q & 1) * 32 + 4 * tig, oh = 128 + 32 * n + 4 * tig;
        const int ls = (q >> 1) * 4, hs = 2 * q;
        /* a word of four levels: the low nibbles (ql >> ls) and the two high bits (bits hs, hs + 1
         * of each qh byte) moved to bits 4, 5 of the byte */
        auto q6v = [&](const uint8_t *w, int e) {
            const uint32_t qh = ld_u32_a2(w + oh + e);
            return and_or_r<0x0F0F0F0Fu>(ld_u32_a2(w + ol + e) >> ls, (hs <= 4 ? qh << (4 - hs) : qh >> 2) & 0x30303030u);
        };
        const uint32_t v0 = q6v(w0, 0), v1 = q6v(w1, 0), v2 = q6v(w0, 16), v3 = q6v(w1, 16);
        A1[0] = deq_q6<false>(v0, s0), A1[1] = deq_q6<false>(v1, s1);
        A1[2] = deq_q6<true>(v0, s0), A1[3] = deq_q6<true>(v1, s1);
        A2[0] = deq_q6<false>(v2, t0), A2[1] = deq_q6<false>(v3, t1);
        A2[2] = deq_q6<true>(v2, t0), A2[3] = deq_q6<true>(v3, t1);
    }
}

/* Item b22 (gemm_f16_wgmma_sm90a.cu): the same matmul on wgmma at 33..64 rows. The blocks a
 * multiprocessor holds for the kernel that takes N rows of wt (0: no sm_90a image on this build
 * or device, or rows or a type it does not take); the matmul for plan pl (y and part as kernel_gemm_f16s writes them,
 * res added to the outputs it writes whole where given (b36); xh:
 * K x N halves of workspace for x's f16 copy), without the fixup of cut bands. */
int mi8b_gemm_f16w_occupancy(mi_type wt, int64_t N);
mi_status mi8b_gemm_f16w(cudaStream_t st, mi_type wt, const void *w, const float *x, void *xh, const float *bias,
                         const float *res, float *y, int64_t K, int64_t M, int64_t N, const f16s_plan &pl, float *part, bool x_ready,
                         bool cl);
/* Item b33: whether the wgmma kernel sums plan pl's cut bands itself (a K split of 2..8 chunks, in
 * clusters of a band's chunks that fit this GPU): then mi8b_gemm_f16w is called with cl and the
 * fixup is not launched */
bool mi8b_gemm_f16w_sums_bands(mi_type wt, int64_t N, const f16s_plan &pl);
/* Item b48: cap[S], S = 2..8: the blocks that b33's clusters of S keep resident at once (clusters
 * x S; 0 where a split of S takes no cluster sums); cap[0], cap[1] 0 */
void mi8b_gemm_f16w_cluster_blocks(mi_type wt, int64_t N, int64_t cap[9]);
/* Item b40: a run of Q4_K matmuls of one x (f16s_run) as one launch of the wgmma kernel under plan
 * pl over the run's bands (xh: x's f16 copy, made first unless x_ready; part and cl as for
 * mi8b_gemm_f16w, no bias inside cut bands: the fixup adds it). Supported: Q4_K at N rows where
 * the b32 forms run with the weights by tensor maps; each segment's map must encode. */
bool mi8b_gemm_f16w_run_supported(mi_type wt, int64_t N);
/* Item b49: a run whose segments 0 .. n4 - 1 are Q4_K and the rest Q6_K (the 7B's q, k and a Q6_K
 * v) as one launch under a K split plan pl (pl.S >= 1) over the run's bands, each block in its
 * band's form; part and cl as for mi8b_gemm_f16w_run (cl: mi8b_gemm_f16w_mixed_sums_bands).
 * Supported: both formats' b32 forms at N rows, Q6_K rows in bulk (b31). */
bool mi8b_gemm_f16w_mixed_supported(int64_t N);
bool mi8b_gemm_f16w_mixed_sums_bands(int64_t N, const f16s_plan &pl);
void mi8b_gemm_f16w_mixed_ready(void);   /* its fit and cluster checks asked, before any capture */
mi_status mi8b_gemm_f16w_run_mixed(cudaStream_t st, const f16s_run &run, int n4, const float *x, void *xh, int64_t K,
                                   int64_t N, const f16s_plan &pl, float *part, bool x_ready, bool cl);
uint64_t mi8b_gemm_f16w_mixed_launches(void);
mi_status mi8b_gemm_f16w_run(cudaStream_t st, mi_type wt, const f16s_run &run, const float *x, void *xh, int64_t K,
                             int64_t N, const f16s_plan &pl, float *part, bool x_ready, bool cl);
#endif

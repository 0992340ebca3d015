/* The one-token Q6_K matmul with streaming rows (item d11): y [M] = r [M] + (W [K, M] @ x + bias),
 * r and bias optional. x is quantized once by 7b's quantizer (Q8_K, as the CPU does); each block
 * copies that row into shared memory, and each warp streams its rows straight from global memory
 * into registers while the other warps compute: no staging of weights, no block barrier per row.
 *
 * Alignment: a Q6_K super-block is 210 bytes, so only 2-byte alignment holds and 16- or even
 * 4-byte loads of its fields are not legal. An octet of lanes reads a super-block as the
 * 4-byte-aligned words from floor4 of its start (word k of lane t is k = t + 8j, so every load
 * instruction of a warp reads 32 contiguous bytes an octet), and each lane shifts its word with
 * its neighbour's (a shuffle and a funnel shift, by 0 or 16 bits) into the super-block's own
 * word k. No read leaves the super-block's bytes but the first word's two leading ones (inside
 * the tensor when its base is 4-byte aligned).
 *
 * Lane map: a warp works on one row at a time; iteration `it` covers super-blocks it*4U ..
 * it*4U+4U-1 of the row in U groups of 4, octet q of group g owning super-block
 * s = it*4U + 4g + q. Lane t of the octet holds ql words t, t+8, t+16, t+24 and qh words 32+t,
 * 40+t: elements 4t..4t+3 of all eight 32-element units of the super-block, so it computes the
 * eight units' integer dots over its four elements (levels 0..63, their -32 taken out with the
 * activation's 16-element sums, which Q8_K carries). A reduce-scatter over the octet (7 shuffles)
 * leaves lane t with both 16-element halves of unit u(t) = 4(t&1) + 2((t>>1)&1) + (t>>2): the
 * exact integer the CPU forms for that unit, scaled as mi7b_unit_dot does (one float expression,
 * --fmad=false). Each lane adds its unit values in (it, g) order and the warp's lanes are summed by
 * the xor butterfly: the order depends on (K, U) only, never on the grid; it differs from 7b's
 * and 7e's (which add a row's units in another order), so results agree with them and with the
 * CPU to rounding, not bit for bit. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"
#include "phase7e_perf/matvec_q4k_kernel.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"
#include "phase8a_decode/decode8a.h"

#define Q6S_THREADS 256
/* U = 2 keeps 64 registers and 32 warps an SM; a build with -DQ6S_U=4 -DQ6S_MIN_BLOCKS=3 gives the
 * variant that measured slower (results/notes/PHASE8A.md) */
#ifndef Q6S_MIN_BLOCKS
#define Q6S_MIN_BLOCKS 4               /* 32 warps per SM: registers <= 64 */
#endif
#ifndef Q6S_U
#define Q6S_U 2                        /* super-block groups per lane and iteration */
#endif
#define Q6S_SMEM_MAX (46u << 10)       /* the activation row; under 48 KB: no opt-in attribute */
#define Q6S_SB 210                     /* bytes per Q6_K super-block */
#define Q6S_FULL 0xffffffffu

/* The Q8_K row in shared memory: levels as uint32 [nsb][64], word (n, r, t) of super-block s
 * (bytes 128n + 32r + 4t: unit 4n + r, lane t's four elements) at t*8 + 4*(n ^ (t >> 2)) + r, so
 * lane t reads each half n as one 16-byte load and an octet's eight loads hit eight distinct bank
 * quads; d f32 [nsb]; the 16-element sums as int16 pairs [nsb][8] (word u = unit u's two halves). */
__device__ __forceinline__ int q6s_level_slot(int s, int w) {   /* level word w (0..63) of super-block s */
    const int n = w >> 5, r = (w >> 3) & 3, t = w & 7;
    return s * 64 + t * 8 + 4 * (n ^ (t >> 2)) + r;
}
__device__ __forceinline__ void q6s_put(uint32_t *sq, float *sd, uint32_t *sbs, int i, uint32_t v) {
    const int s = i / (AK_BYTES / 4), o = i - s * (AK_BYTES / 4);
    if (o == 0) {
        sd[s] = __uint_as_float(v);
    } else if (o <= 64) {
        sq[q6s_level_slot(s, o - 1)] = v;
    } else {
        sbs[s * 8 + (o - 65)] = v;
    }
}

/* one super-block's bytes as a lane loads them: words t + 8j (j < 6) from floor4 of its start,
 * word 48 (lane 0 only: its neighbour's last funnel), the scale pair of the unit the lane
 * finishes and d (2-byte loads) */
struct raw_q6k {
    uint32_t w[7];
    uint32_t scp, dh;
};

__device__ __forceinline__ void load_q6k(raw_q6k &r, const uint8_t *sb, int t, int u) {
    const uint32_t *a = (const uint32_t *)((uintptr_t)sb & ~(uintptr_t)3);
#pragma unroll
    for (int j = 0; j < 6; j++) r.w[j] = __ldg(a + t + 8 * j);
    r.w[6] = t == 0 ? __ldg(a + 48) : 0u;
    r.scp = __ldg((const unsigned short *)(sb + 192 + 2 * u));
    r.dh = __ldg((const unsigned short *)(sb + 208));
}
__device__ __forceinline__ void zero_q6k(raw_q6k &r) {
#pragma unroll
    for (int j = 0; j < 7; j++) r.w[j] = 0u;
    r.scp = r.dh = 0u;
}

/* Lane t's contribution to super-block s and, after the octet's reduce-scatter, the value of
 * unit u = u(t): d8 * (d * isum - 0 * bsum), mi7b_unit_dot's expression for Q6_K (w.m = 0).
 * sh: the super-block's start mod 4, in bits (0 or 16). Every lane calls it (shuffles). */
__device__ __forceinline__ float value_q6k(const raw_q6k &r, const uint32_t *sq, const float *sd,
                                           const uint32_t *sbs, int s, int t, int u, int sh) {
    const int src = (threadIdx.x & 24) | ((t + 1) & 7);
    uint32_t T[6];
#pragma unroll
    for (int j = 0; j < 6; j++) {   /* the word after w[j] is the neighbour's w[j], or lane 0's w[j + 1] for lane 7 */
        const uint32_t nx = __shfl_sync(Q6S_FULL, t == 0 ? r.w[j + 1] : r.w[j], src);
        T[j] = __funnelshift_r(r.w[j], nx, sh);
    }
    const uint4 *aq = (const uint4 *)(sq + (size_t)s * 64) + 2 * t;
    const int h = t >> 2;
    int p[8];
#pragma unroll
    for (int n = 0; n < 2; n++) {
        const uint4 a = aq[n ^ h];
        const uint32_t qa = T[2 * n], qb = T[2 * n + 1], hb = T[4 + n];
        const uint32_t m4 = 0x0F0F0F0Fu, m2 = 0x30303030u;
        p[4 * n + 0] = __dp4a((int)((qa & m4) | ((hb << 4) & m2)), (int)a.x, 0);
        p[4 * n + 1] = __dp4a((int)((qb & m4) | ((hb << 2) & m2)), (int)a.y, 0);
        p[4 * n + 2] = __dp4a((int)(((qa >> 4) & m4) | (hb & m2)), (int)a.z, 0);
        p[4 * n + 3] = __dp4a((int)(((qb >> 4) & m4) | ((hb >> 2) & m2)), (int)a.w, 0);
    }
    /* reduce-scatter: partners t^1 and t^2 (same half) halve the units twice, t^4 swaps halves */
    const bool b0 = t & 1, b1 = (t >> 1) & 1;
    int k4[4], k2[2];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int recv = __shfl_xor_sync(Q6S_FULL, b0 ? p[i] : p[4 + i], 1);
        k4[i] = (b0 ? p[4 + i] : p[i]) + recv;
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int recv = __shfl_xor_sync(Q6S_FULL, b1 ? k4[i] : k4[2 + i], 2);
        k2[i] = (b1 ? k4[2 + i] : k4[i]) + recv;
    }
    /* k2[0], k2[1]: this half's sums of units u & ~1 and u | 1; lane h keeps unit (u & ~1) + h */
    const int other = __shfl_xor_sync(Q6S_FULL, h ? k2[0] : k2[1], 4);
    const int lo = h ? other : k2[0], hi = h ? k2[1] : other;   /* unit u's two halves, levels 0..63 */
    const uint32_t bsw = sbs[s * 8 + u];
    const int bs_lo = (int)(int16_t)(bsw & 0xFFFFu), bs_hi = (int)(int16_t)(bsw >> 16);
    const int sc_lo = (int)(int8_t)(r.scp & 0xFFu), sc_hi = (int)(int8_t)(r.scp >> 8);
    const int isum = sc_lo * (lo - 32 * bs_lo) + sc_hi * (hi - 32 * bs_hi);
    const int bsum = bs_lo + bs_hi;
    const float wd = __half2float(__ushort_as_half((unsigned short)r.dh)), wm = 0.0f;
    return sd[s] * (wd * (float)isum - wm * (float)bsum);
}

/* PDL: the kernel may be launched as a programmatic dependent: it lets the next kernel launch,
 * issues its first weight loads, and only then waits for the kernels before it (the activation,
 * r). NORM (item d43): the activation is X in f32, RMS-normalized with weight nw and eps and
 * quantized in the block, as 7e's Q4_K kernel's NORM form does it (norm_scale_block, then
 * quant_act_rows into this kernel's layout): the bytes of the norm kernel's output quantized by
 * 7b's quantizer, so the results equal the unfused path's bit for bit. QX (item d44): X in f32
 * quantized in the block without a norm (the downs' x: no quantizer launch before them); the
 * same bytes as 7b's quantizer's. TH threads a block (256, or MI8A_WIDE_THREADS with item d12:
 * one block an SM). Warp w of block b takes rows b*W + w, then + gridDim.x*W, ... (W = TH / 32;
 * at most one resident wave);
 * SPREAD (item d40): rows w*gridDim.x + b, then the same stride, on a grid of a block a row up
 * to the wave, so no SM is left without rows. A row's arithmetic and order depend on neither. */
template <bool RES, bool PDL, int TH, bool SPREAD = false, bool NORM = false, bool QX = NORM>
__global__ void __launch_bounds__(TH, TH == MI8A_WIDE_THREADS ? 1 : Q6S_MIN_BLOCKS)
kernel_matvec_q6k(const uint8_t *__restrict__ W, int64_t M, int nsb, const uint8_t *__restrict__ A,
                  const float *__restrict__ bias, float *__restrict__ Y, const float *__restrict__ R,
                  const float *__restrict__ X, const float *__restrict__ nw, float eps) {
    constexpr int U = Q6S_U;
    extern __shared__ uint4 smem_q6s[];
    uint32_t *sq = (uint32_t *)smem_q6s;
    float *sd = (float *)(sq + (size_t)nsb * 64);
    uint32_t *sbs = (uint32_t *)(sd + nsb);
    const int lane = threadIdx.x & 31, q = lane >> 3, t = lane & 7;
    const int u = 4 * (t & 1) + 2 * ((t >> 1) & 1) + (t >> 2);
    const size_t wrow = (size_t)nsb * Q6S_SB;
    const int nit = (nsb + 4 * U - 1) / (4 * U);
    constexpr int WARPS = TH / 32;
    const int64_t stride = (int64_t)gridDim.x * WARPS;
    int64_t row = SPREAD ? (int64_t)(threadIdx.x >> 5) * gridDim.x + blockIdx.x
                         : (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
    int it = 0;
    raw_q6k r[U];

#define Q6S_LOAD()                                                                          \
    do {                                                                                    \
        _Pragma("unroll") for (int g = 0; g < U; g++) {                                     \
            const int s = it * 4 * U + 4 * g + q;                                           \
            if (s < nsb) load_q6k(r[g], W + (size_t)row * wrow + (size_t)s * Q6S_SB, t, u); \
            else zero_q6k(r[g]);                                                            \
        }                                                                                   \
    } while (0)

    if constexpr (PDL) pdl_trigger_early();
    if (row < M) Q6S_LOAD();   /* in flight while the activation is staged */
    if constexpr (NORM) {   /* the norm weight into L1 while x is awaited */
        for (int i = threadIdx.x * 32; i < nsb * 256; i += TH * 32) asm volatile("prefetch.global.L1 [%0];" ::"l"(nw + i));
    }
    if constexpr (PDL) pdl_wait_trigger();
    if constexpr (QX) {
        auto put = [=](int s, int l, uint32_t q0, uint32_t q1) {
            sq[q6s_level_slot(s, 2 * l)] = q0;
            sq[q6s_level_slot(s, 2 * l + 1)] = q1;
        };
        if constexpr (NORM) {
            float *sx = q4k_norm_row(sbs, nsb);
            const float scale = norm_scale_block(X, (int64_t)nsb * 256, eps, sx);
            quant_act_rows<2, true, WARPS>(X, sx, nsb, sd, sbs, nw, scale, put);
        } else {
            quant_act_rows<2, false, WARPS>(X, NULL, nsb, sd, sbs, NULL, 1.0f, put);
        }
    } else {
        stage_words<4>(A, nsb * (AK_BYTES / 4), [=](int i, uint32_t v) { q6s_put(sq, sd, sbs, i, v); });
    }
    __syncthreads();
    float acc = 0.0f;
    while (row < M) {   /* warp-uniform */
#pragma unroll
        for (int g = 0; g < U; g++) {
            const int s = it * 4 * U + 4 * g + q;
            const bool on = s < nsb;
            const int sh = (int)(((uintptr_t)W + (size_t)row * wrow + (size_t)(on ? s : 0) * Q6S_SB) & 2u) * 8;
            const float v = value_q6k(r[g], sq, sd, sbs, on ? s : 0, t, u, sh);   /* all lanes: shuffles */
            if (on) acc += v;
        }
        if (++it == nit) {
            const float s0 = warp_sum(acc);
            if (lane == 0) {
                const float y = bias ? s0 + bias[row] : s0;
                Y[row] = RES ? R[row] + y : y;
            }
            acc = 0.0f;
            it = 0;
            row += stride;
        }
        if (row < M) Q6S_LOAD();
    }
#undef Q6S_LOAD
}

/* the Q8_K row, and x's copy for the norm (NORM: q4k_norm_row's place) */
static size_t q6s_smem(int64_t K, bool norm = false) {
    return (size_t)(K / 256) * AK_BYTES + (norm ? (size_t)K * sizeof(float) + 16 : 0);
}

extern "C" bool mi8a_matvec_q6k_supported(mi_type wt, int64_t K) {
    return wt == MI_TYPE_Q6_K && K > 0 && K % 256 == 0 && q6s_smem(K) <= Q6S_SMEM_MAX;
}

extern "C" size_t mi8a_matvec_q6k_workspace(int64_t K) { return mi7b_act_row_bytes(MI_TYPE_Q6_K, K); }

/* one launch: a = x quantized beforehand (QX false), else x in f32 prepared in the block (QX;
 * NORM: normalized with nw and eps first) */
template <bool RES, int TH, bool SPREAD = false, bool NORM = false, bool QX = NORM>
static mi_status launch_q6k(cudaStream_t st, const uint8_t *w, const uint8_t *a, const float *x, const float *nw,
                            float eps, const float *bias, float *y, int64_t K, int64_t M, const float *r, bool pdl) {
    static wave_cache occ;   /* per instantiation */
    const size_t smem = q6s_smem(K, NORM);
    auto kernel = kernel_matvec_q6k<RES, true, TH, SPREAD, NORM, QX>;
    const int64_t nb = wave_blocks(occ, kernel, TH, smem, M, SPREAD);
    MI_CU_CHECK(pdl_launch(pdl, kernel, dim3((unsigned)nb), dim3(TH), smem, st, w, M, (int)(K / 256), a, bias, y, r, x,
                           nw, eps));
    MI_CU_CHECK_LAUNCH("kernel_matvec_q6k");
    return MI_OK;
}

extern "C" mi_status mi8a_matvec_q6k(void *stream, const void *w, const float *x, const float *bias, const float *r,
                                     float *y, int64_t K, int64_t M, void *ws) {
    if (!mi8a_matvec_q6k_supported(MI_TYPE_Q6_K, K) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_matvec_q6k: K = %lld, M = %lld", (long long)K, (long long)M);
    if (!w || !x || !y || !ws) return mi_err(MI_ERR_INVALID, "mi8a_matvec_q6k: null pointer");
    if ((uintptr_t)w & 3u) return mi_err(MI_ERR_UNSUPPORTED, "mi8a_matvec_q6k: weights not 4-byte aligned");
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *wb = (const uint8_t *)w, *a = (const uint8_t *)ws;
    const bool pdl = mi8a_pdl_on();
    constexpr int WIDE = MI8A_WIDE_THREADS;
    if (K >= MI8A_WIDE_K && !((uintptr_t)x & 15u) && mi8a_launch_item_on("d44")) {   /* x quantized in the block */
        if (r) return launch_q6k<true, WIDE, true, false, true>(st, wb, NULL, x, NULL, 0.0f, bias, y, K, M, r, pdl);
        return launch_q6k<false, WIDE, true, false, true>(st, wb, NULL, x, NULL, 0.0f, bias, y, K, M, NULL, pdl);
    }
    MI_TRY(mi7b_quantize_act(stream, MI_TYPE_Q6_K, x, K, 1, ws));
    if (K >= MI8A_WIDE_K && mi8a_launch_item_on("d40")) {   /* d12's block, the rows over every SM */
        if (r) return launch_q6k<true, WIDE, true>(st, wb, a, NULL, NULL, 0.0f, bias, y, K, M, r, pdl);
        return launch_q6k<false, WIDE, true>(st, wb, a, NULL, NULL, 0.0f, bias, y, K, M, NULL, pdl);
    }
    if (mi8a_wide_on(K)) {   /* d12: one block of 32 warps an SM */
        if (r) return launch_q6k<true, WIDE>(st, wb, a, NULL, NULL, 0.0f, bias, y, K, M, r, pdl);
        return launch_q6k<false, WIDE>(st, wb, a, NULL, NULL, 0.0f, bias, y, K, M, NULL, pdl);
    }
    if (r) return launch_q6k<true, Q6S_THREADS>(st, wb, a, NULL, NULL, 0.0f, bias, y, K, M, r, pdl);
    return launch_q6k<false, Q6S_THREADS>(st, wb, a, NULL, NULL, 0.0f, bias, y, K, M, NULL, pdl);
}

/* d43: the same rows after the RMS norm of x (weight nw), applied while x is quantized in the
 * block; one block of 32 warps an SM with the rows spread over every SM (the 7B's v: 512 rows
 * on every SM, one prologue an SM). x and nw 16-byte aligned. */
extern "C" bool mi8a_matvec_q6k_norm_supported(int64_t K) {
    return mi8a_matvec_q6k_supported(MI_TYPE_Q6_K, K) && q6s_smem(K, true) <= Q6S_SMEM_MAX;
}

extern "C" mi_status mi8a_matvec_q6k_norm(void *stream, const void *w, const float *x, const float *nw, float eps,
                                          const float *bias, float *y, int64_t K, int64_t M) {
    if (!mi8a_matvec_q6k_norm_supported(K) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_matvec_q6k_norm: K = %lld, M = %lld", (long long)K, (long long)M);
    if (!w || !x || !nw || !y) return mi_err(MI_ERR_INVALID, "mi8a_matvec_q6k_norm: null pointer");
    if (((uintptr_t)w & 3u) || ((uintptr_t)x & 15u) || ((uintptr_t)nw & 15u))
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_matvec_q6k_norm: weights not 4-byte or x, norm weight not 16-byte aligned");
    return launch_q6k<false, MI8A_WIDE_THREADS, true, true>((cudaStream_t)stream, (const uint8_t *)w, NULL, x, nw, eps,
                                                             bias, y, K, M, NULL, mi8a_pdl_on());
}

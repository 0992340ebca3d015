/* AVX-512 VNNI register-blocked GEMM for Q4_0, Q5_0 and Q8_0 weights x Q8_0 activations (prefill).
 * A 4-row x 4-token block keeps 16 accumulators in registers: each weight block pair is
 * unpacked once for 4 tokens and each activation pair is loaded once for 4 rows, where
 * the per-call vec_dot redoes both for every (row, token). Activations are repacked once
 * per node: int8 codes contiguous, the Q8_0 scale spread over its 8 int32 lanes, and the
 * "-8 x sum of 4 codes" term of Q4_0's offset precomputed as the dpbusd start value.
 * Q5_0 codes (0..31, offset 16) reuse the Q4_0 start value doubled.
 * Q8_0 weights are signed, so there the activations are stored offset by +128 (u8) and
 * the start value is -128 x sum of 4 weight codes, computed per weight block pair.
 * Same integers and scales as the vec_dot path; only the float summation order differs. */
#include "cpu_backend.h"
#include <immintrin.h>
#include <string.h>

/* per token and block pair (64 elements): 64 B codes, 64 B scales (16 floats), 64 B init */
size_t cpu_gemm_act_bytes(int64_t K) { return (size_t)(K / 64) * 192; }

void cpu_gemm_pack_act(mi_type wtype, const void *q8_row, void *dst, int64_t K) {
    const mi_block_q8_0 *b = q8_row;
    char *o = dst;
    const __m512i eight = _mm512_set1_epi8(8), flip = _mm512_set1_epi8((char)0x80);
    for (int64_t p = 0; p < K / 64; p++, b += 2, o += 192) {
        __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[0].qs)),
                                       _mm256_loadu_si256((const __m256i *)b[1].qs), 1);
        __m512 d = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(_cvtsh_ss(b[0].d)), _mm512_set1_ps(_cvtsh_ss(b[1].d)));
        _mm512_storeu_ps(o + 64, d);
        if (wtype == MI_TYPE_Q8_0) {
            _mm512_storeu_si512(o, _mm512_xor_si512(a, flip));   /* a + 128 as u8 */
        } else {
            _mm512_storeu_si512(o, a);
            __m512i s8 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, a);
            _mm512_storeu_si512(o + 128, _mm512_sub_epi32(_mm512_setzero_si512(), s8));
        }
    }
}

static inline __attribute__((always_inline)) __m512i unpack_q8_0(const mi_block_q8_0 *b, __m512 *dw, __m512i *init) {
    __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[0].qs)),
                                   _mm256_loadu_si256((const __m256i *)b[1].qs), 1);
    *dw = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(_cvtsh_ss(b[0].d)), _mm512_set1_ps(_cvtsh_ss(b[1].d)));
    __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), w);
    *init = _mm512_sub_epi32(_mm512_setzero_si512(), s);
    return w;
}

static inline __attribute__((always_inline)) __m512i unpack_q4_0(const mi_block_q4_0 *b, __m512 *dw) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m128i q0 = _mm_loadu_si128((const __m128i *)b[0].qs), q1 = _mm_loadu_si128((const __m128i *)b[1].qs);
    __m512i x = _mm512_inserti32x4(_mm512_castsi128_si512(q0), q0, 1);
    x = _mm512_inserti32x4(x, q1, 2);
    x = _mm512_inserti32x4(x, q1, 3);
    __m512i lo = _mm512_and_si512(x, m4), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
    *dw = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(_cvtsh_ss(b[0].d)), _mm512_set1_ps(_cvtsh_ss(b[1].d)));
    return _mm512_mask_blend_epi64(0xCC, lo, hi);   /* [lo0 hi0 lo1 hi1]: element order */
}

static inline __attribute__((always_inline)) __m512i unpack_q5_0(const mi_block_q5_0 *b, __m512 *dw) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m128i q0 = _mm_loadu_si128((const __m128i *)b[0].qs), q1 = _mm_loadu_si128((const __m128i *)b[1].qs);
    __m512i x = _mm512_inserti32x4(_mm512_castsi128_si512(q0), q0, 1);
    x = _mm512_inserti32x4(x, q1, 2);
    x = _mm512_inserti32x4(x, q1, 3);
    __m512i lo = _mm512_and_si512(x, m4), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
    *dw = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(_cvtsh_ss(b[0].d)), _mm512_set1_ps(_cvtsh_ss(b[1].d)));
    uint32_t h0, h1;
    memcpy(&h0, b[0].qh, 4);
    memcpy(&h1, b[1].qh, 4);
    __mmask64 hb = (__mmask64)h0 | ((__mmask64)h1 << 32);   /* bit k = 5th bit of element k */
    __m512i w = _mm512_mask_blend_epi64(0xCC, lo, hi);
    return _mm512_mask_add_epi8(w, hb, w, _mm512_set1_epi8(16));
}

/* R rows x T tokens; y[t*M + r] = sum (+ bias) */
/* q8w: 0 = Q4_0, 1 = Q8_0, 2 = Q5_0 (a compile-time constant after inlining) */
static inline __attribute__((always_inline)) void block_rt(const int q8w, const char *w, size_t w_rb, int64_t r0, int R,
                                                           const char *act, size_t act_stride, int64_t t0, int T,
                                                           int64_t K, float *y, int64_t M, const float *bias) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
    const int64_t np = K / 64;
    for (int64_t p = 0; p < np; p++) {
        __m512i wv[4], winit[4];
        __m512 dw[4];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            if (q8w == 1)
                wv[i] = unpack_q8_0((const mi_block_q8_0 *)(w + (size_t)(r0 + i) * w_rb) + 2 * p, &dw[i], &winit[i]);
            else if (q8w == 2)
                wv[i] = unpack_q5_0((const mi_block_q5_0 *)(w + (size_t)(r0 + i) * w_rb) + 2 * p, &dw[i]);
            else
                wv[i] = unpack_q4_0((const mi_block_q4_0 *)(w + (size_t)(r0 + i) * w_rb) + 2 * p, &dw[i]);
        }
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            const char *ap = act + (size_t)(t0 + j) * act_stride + (size_t)p * 192;
            __m512i a = _mm512_loadu_si512(ap);
            __m512 da = _mm512_loadu_ps(ap + 64);
            __m512i init = q8w == 1 ? _mm512_setzero_si512() : _mm512_loadu_si512(ap + 128);
            if (q8w == 2) init = _mm512_slli_epi32(init, 1);   /* -16 x sum for Q5_0 */
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                /* dpbusd(start, u8, s8): Q4_0 codes are the u8 side, Q8_0 activations (+128) are */
                __m512i s = q8w == 1 ? _mm512_dpbusd_epi32(winit[i], a, wv[i]) : _mm512_dpbusd_epi32(init, wv[i], a);
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[i], da), acc[i][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            float v = _mm512_reduce_add_ps(acc[i][j]);
            y[(size_t)(t0 + j) * (size_t)M + (size_t)(r0 + i)] = bias ? v + bias[r0 + i] : v;
        }
}

#define TILE_LOOPS(Q8W)                                                                                       \
    do {                                                                                                    \
        int64_t r = r0;                                                                                     \
        for (; r + 4 <= r1; r += 4) {                                                                       \
            int64_t t = t0;                                                                                 \
            for (; t + 4 <= t1; t += 4) block_rt(Q8W, wc, w_rb, r, 4, ac, act_stride, t, 4, K, y, M, bias); \
            for (; t < t1; t++) block_rt(Q8W, wc, w_rb, r, 4, ac, act_stride, t, 1, K, y, M, bias);         \
        }                                                                                                   \
        for (; r < r1; r++) {                                                                               \
            int64_t t = t0;                                                                                 \
            for (; t + 4 <= t1; t += 4) block_rt(Q8W, wc, w_rb, r, 1, ac, act_stride, t, 4, K, y, M, bias); \
            for (; t < t1; t++) block_rt(Q8W, wc, w_rb, r, 1, ac, act_stride, t, 1, K, y, M, bias);         \
        }                                                                                                   \
    } while (0)

void cpu_gemm_tile(mi_type wtype, const void *w, size_t w_rb, int64_t r0, int64_t r1, const void *act,
                   size_t act_stride, int64_t t0, int64_t t1, int64_t K, float *y, int64_t M, const float *bias) {
    const char *wc = w, *ac = act;
    if (wtype == MI_TYPE_Q8_0)
        TILE_LOOPS(1);
    else if (wtype == MI_TYPE_Q5_0)
        TILE_LOOPS(2);
    else
        TILE_LOOPS(0);
}

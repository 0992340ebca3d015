/* AVX2 + FMA + F16C kernels: weight x activation dot products for every weight
 * type, and the activation quantizers (bit-identical to the scalar ones). Dots
 * keep the scalar reference's exact int32 per-block sums; only the f32
 * accumulation order differs (lanes), see docs/QUANT.md for the tolerance.
 * Compiled with -mavx2 -mfma -mf16c; only called after a cpuid check. */
#include <immintrin.h>
#include <math.h>
#include <string.h>
#include "common/quant/quant_impl.h"

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hsum4(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); } /* exact, like mi_f16_to_f32 */

/* 16 packed bytes -> 32 nibbles: low lane = low nibbles (elements 0..15), high = high (16..31) */
static inline __m256i nibbles32(const uint8_t *p) {
    /* broadcast load (no shuffle uop), then only the high lane shifted */
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
}

/* bit j of the 32-bit qh -> 0x10 in byte j (the fifth bit of Q5 element j) */
static inline __m256i fifth_bits(const uint8_t qh[4]) {
    uint32_t u;
    memcpy(&u, qh, 4);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)u),
        _mm256_setr_epi64x(0x0000000000000000LL, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

/* sum of signed w (bytes) x a (bytes) in 8 int32 lanes; |w| <= 128 as unsigned, a != -128 */
static inline __m256i dot_s8(__m256i w, __m256i a) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* unsigned w (<= 63) x signed a in 8 int32 lanes */
static inline __m256i dot_u8(__m256i w, __m256i a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
}

/* ---------------- float weights ---------------- */

static void dot_f32(int64_t n, float *s, const void *w, const void *a) {
    const float *x = w, *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    float sum = hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

static void dot_f16(int64_t n, float *s, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8)));
        acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(y + i + 8), acc1);
    }
    float sum = hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += h2f(x[i]) * y[i];
    *s = sum;
}

static inline __m256 bf16x8(const uint16_t *p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static void dot_bf16(int64_t n, float *s, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(bf16x8(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(bf16x8(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    float sum = hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += mi_bf16_to_f32(x[i]) * y[i];
    *s = sum;
}

/* ---------------- 32-element blocks ---------------- */

/* fp16 field at byte offset off of 4 consecutive blocks (stride bytes apart) -> 4 floats */
static inline __m128 f16x4(const void *base, size_t stride, size_t off) {
    const uint8_t *p = (const uint8_t *)base + off;
    uint16_t h[4];
    for (int k = 0; k < 4; k++) memcpy(&h[k], p + k * stride, 2);
    __m128i v;
    memcpy(&v, h, 8); /* low 64 bits; the rest is not converted */
    return _mm_cvtph_ps(v);
}

/* one block's 32 weight codes, per type: signed for the _0 types (the offset taken off), unsigned
 * for the _1 types (their minimum is the block's second fp16) */
static inline __m256i codes_q4_0(const mi_block_q4_0 *x) { return _mm256_sub_epi8(nibbles32(x->qs), _mm256_set1_epi8(8)); }
static inline __m256i codes_q4_1(const mi_block_q4_1 *x) { return nibbles32(x->qs); }
static inline __m256i codes_q5_0(const mi_block_q5_0 *x) {
    return _mm256_sub_epi8(_mm256_or_si256(nibbles32(x->qs), fifth_bits(x->qh)), _mm256_set1_epi8(16));
}
static inline __m256i codes_q5_1(const mi_block_q5_1 *x) { return _mm256_or_si256(nibbles32(x->qs), fifth_bits(x->qh)); }
static inline __m256i codes_q8_0(const mi_block_q8_0 *x) { return _mm256_loadu_si256((const __m256i *)x->qs); }

/* signed codes w against an activation block: dot_s8 with |w| (w's part) given */
static inline __m256i dot_s8_abs(__m256i w, __m256i wabs, __m256i a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(a, w)), _mm256_set1_epi16(1));
}

/* int32 lanes of one block's integer dot, per type */
static inline __m256i one_q4_0(const mi_block_q4_0 *x, const mi_block_q8_0 *y) {
    return dot_s8(codes_q4_0(x), _mm256_loadu_si256((const __m256i *)y->qs));
}
static inline __m256i one_q4_1(const mi_block_q4_1 *x, const mi_block_q8_1 *y) {
    return dot_u8(codes_q4_1(x), _mm256_loadu_si256((const __m256i *)y->qs));
}
static inline __m256i one_q5_0(const mi_block_q5_0 *x, const mi_block_q8_0 *y) {
    return dot_s8(codes_q5_0(x), _mm256_loadu_si256((const __m256i *)y->qs));
}
static inline __m256i one_q5_1(const mi_block_q5_1 *x, const mi_block_q8_1 *y) {
    return dot_u8(codes_q5_1(x), _mm256_loadu_si256((const __m256i *)y->qs));
}
static inline __m256i one_q8_0(const mi_block_q8_0 *x, const mi_block_q8_0 *y) {
    return dot_s8(codes_q8_0(x), _mm256_loadu_si256((const __m256i *)y->qs));
}

/* 4 blocks per iteration: their fp16 scales converted together (and m*s for the _1 types,
 * offset 2 in both blocks), then one broadcast per block. */
#define DOT_BLOCKS32(NAME, WT, AT, ONE, HAS_MIN)                                                         \
    static void NAME(int64_t n, float *s, const void *w, const void *a) {                                 \
        const WT *x = w;                                                                                  \
        const AT *y = a;                                                                                  \
        const int64_t nb = n / 32;                                                                        \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                                    \
        __m128 accm = _mm_setzero_ps();                                                                   \
        int64_t i = 0;                                                                                    \
        for (; i + 4 <= nb; i += 4) {                                                                     \
            float sc[4];                                                                                  \
            _mm_storeu_ps(sc, _mm_mul_ps(f16x4(x + i, sizeof *x, 0), f16x4(y + i, sizeof *y, 0)));        \
            if (HAS_MIN) accm = _mm_fmadd_ps(f16x4(x + i, sizeof *x, 2), f16x4(y + i, sizeof *y, 2), accm); \
            acc0 = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[0]), _mm256_cvtepi32_ps(ONE(x + i, y + i)), acc0); \
            acc1 = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[1]), _mm256_cvtepi32_ps(ONE(x + i + 1, y + i + 1)), acc1); \
            acc0 = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[2]), _mm256_cvtepi32_ps(ONE(x + i + 2, y + i + 2)), acc0); \
            acc1 = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[3]), _mm256_cvtepi32_ps(ONE(x + i + 3, y + i + 3)), acc1); \
        }                                                                                                 \
        float tail = 0.0f;                                                                                \
        for (; i < nb; i++) {                                                                             \
            const uint16_t *hx = (const uint16_t *)(x + i), *hy = (const uint16_t *)(y + i);              \
            acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(hx[0]) * h2f(hy[0])), _mm256_cvtepi32_ps(ONE(x + i, y + i)), acc0); \
            if (HAS_MIN) tail += h2f(hx[1]) * h2f(hy[1]);                                                 \
        }                                                                                                 \
        *s = hsum8(_mm256_add_ps(acc0, acc1)) + hsum4(accm) + tail;                                       \
    }

/* The four-row form of DOT_BLOCKS32's NAME: for each activation row, NAME's float operations in
 * NAME's order (the scales' products, the fmadds into the two accumulators alternately, the tail,
 * the final sums), so each s[r] is NAME's bits; a weight block's codes (and for the signed types
 * |w|) are made once for the four rows. The integer sums are those of ONE: dot_s8(w, a) is
 * dot_s8_abs(w, |w|, a), dot_u8 takes the codes as they are. */
#define DOT4_BLOCKS32(NAME4, WT, AT, CODES, SIGNED, HAS_MIN)                                              \
    static void NAME4(int64_t n, float *s, const void *w, const void *a, size_t stride) {                 \
        const WT *x = w;                                                                                  \
        const AT *y[4];                                                                                   \
        for (int r = 0; r < 4; r++) y[r] = (const AT *)((const char *)a + (size_t)r * stride);             \
        const int64_t nb = n / 32;                                                                        \
        __m256 acc[4][2];                                                                                 \
        __m128 accm[4];                                                                                   \
        for (int r = 0; r < 4; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps(), accm[r] = _mm_setzero_ps(); \
        int64_t i = 0;                                                                                    \
        for (; i + 4 <= nb; i += 4) {                                                                     \
            const __m128 xd = f16x4(x + i, sizeof *x, 0);                                                 \
            float sc[4][4];                                                                               \
            for (int r = 0; r < 4; r++) {                                                                 \
                _mm_storeu_ps(sc[r], _mm_mul_ps(xd, f16x4(y[r] + i, sizeof *y[r], 0)));                   \
                if (HAS_MIN) accm[r] = _mm_fmadd_ps(f16x4(x + i, sizeof *x, 2), f16x4(y[r] + i, sizeof *y[r], 2), accm[r]); \
            }                                                                                             \
            for (int j = 0; j < 4; j++) {                                                                 \
                const __m256i c = CODES(x + i + j), cabs = SIGNED ? _mm256_sign_epi8(c, c) : c;           \
                for (int r = 0; r < 4; r++) {                                                             \
                    const __m256i ya = _mm256_loadu_si256((const __m256i *)y[r][i + j].qs);               \
                    const __m256i d = SIGNED ? dot_s8_abs(c, cabs, ya) : dot_u8(c, ya);                   \
                    acc[r][j & 1] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[r][j]), _mm256_cvtepi32_ps(d), acc[r][j & 1]); \
                }                                                                                         \
            }                                                                                             \
        }                                                                                                 \
        float tail[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                                         \
        for (; i < nb; i++) {                                                                             \
            const uint16_t *hx = (const uint16_t *)(x + i);                                               \
            const __m256i c = CODES(x + i), cabs = SIGNED ? _mm256_sign_epi8(c, c) : c;                   \
            for (int r = 0; r < 4; r++) {                                                                 \
                const uint16_t *hy = (const uint16_t *)(y[r] + i);                                        \
                const __m256i ya = _mm256_loadu_si256((const __m256i *)y[r][i].qs);                       \
                const __m256i d = SIGNED ? dot_s8_abs(c, cabs, ya) : dot_u8(c, ya);                       \
                acc[r][0] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(hx[0]) * h2f(hy[0])), _mm256_cvtepi32_ps(d), acc[r][0]); \
                if (HAS_MIN) tail[r] += h2f(hx[1]) * h2f(hy[1]);                                          \
            }                                                                                             \
        }                                                                                                 \
        for (int r = 0; r < 4; r++) s[r] = hsum8(_mm256_add_ps(acc[r][0], acc[r][1])) + hsum4(accm[r]) + tail[r]; \
    }

DOT_BLOCKS32(dot_q4_0, mi_block_q4_0, mi_block_q8_0, one_q4_0, 0)
DOT_BLOCKS32(dot_q4_1, mi_block_q4_1, mi_block_q8_1, one_q4_1, 1)
DOT_BLOCKS32(dot_q5_0, mi_block_q5_0, mi_block_q8_0, one_q5_0, 0)
DOT_BLOCKS32(dot_q5_1, mi_block_q5_1, mi_block_q8_1, one_q5_1, 1)
DOT_BLOCKS32(dot_q8_0, mi_block_q8_0, mi_block_q8_0, one_q8_0, 0)
DOT4_BLOCKS32(dot4_q4_0, mi_block_q4_0, mi_block_q8_0, codes_q4_0, 1, 0)
DOT4_BLOCKS32(dot4_q4_1, mi_block_q4_1, mi_block_q8_1, codes_q4_1, 0, 1)
DOT4_BLOCKS32(dot4_q5_0, mi_block_q5_0, mi_block_q8_0, codes_q5_0, 1, 0)
DOT4_BLOCKS32(dot4_q5_1, mi_block_q5_1, mi_block_q8_1, codes_q5_1, 0, 1)
DOT4_BLOCKS32(dot4_q8_0, mi_block_q8_0, mi_block_q8_0, codes_q8_0, 1, 0)

/* ---------------- K-quants ---------------- */

/* Q4_K/Q5_K 12-byte packed scales -> 8 scales (bytes 0..7) and 8 mins (bytes 8..15) */
/* Q4_K/Q5_K 12 packed bytes -> 8 six-bit scales (bytes 0..7) and 8 mins (bytes 8..15),
 * in registers. With w0..w2 the three little-endian words of the packed bytes:
 * scales 0-3 = w0 & 0x3f.., scales 4-7 = (w2 & 0x0f..) | ((w0 >> 2) & 0x30..),
 * mins 0-3 = w1 & 0x3f.., mins 4-7 = ((w2 >> 4) & 0x0f..) | ((w1 >> 2) & 0x30..).
 * Reads 16 bytes from the 12: the block continues past them. */
static inline __m128i k4_unpack(const uint8_t *scales) {
    const __m128i u = _mm_loadu_si128((const __m128i *)scales);
    const __m128i p = _mm_srlv_epi32(_mm_shuffle_epi32(u, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4));
    const __m128i q = _mm_srli_epi32(_mm_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0)), 2);
    return _mm_or_si128(_mm_and_si128(p, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f)),
                        _mm_and_si128(q, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
}

/* word k of v in all 16 lanes */
static inline __m256i bcast_word(__m128i v, int k) {
    const __m128i idx = _mm_set1_epi16((short)(((2 * k + 1) << 8) | (2 * k)));
    return _mm256_broadcastsi128_si256(_mm_shuffle_epi8(v, idx));
}

static inline __m128i k4_mins(__m128i sm, const int16_t bsums[16]) {
    const __m128i b0 = _mm_loadu_si128((const __m128i *)bsums), b1 = _mm_loadu_si128((const __m128i *)(bsums + 8));
    const __m128i m = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    return _mm_madd_epi16(m, _mm_hadd_epi16(b0, b1));
}

/* chunk c (64 elements) of a Q4_K / Q5_K block: its low and high 32 codes (Q5_K's fifth bits added) */
static inline void k4_codes(const mi_block_q4_k *x, int c, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c));
    *lo = _mm256_and_si256(q, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
}
static inline void k5_codes(const mi_block_q5_k *x, int c, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), b16 = _mm256_set1_epi8(0x10);
    const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c)), qh = _mm256_loadu_si256((const __m256i *)x->qh);
    const __m256i blo = _mm256_set1_epi8((char)(1 << (2 * c))), bhi = _mm256_set1_epi8((char)(1 << (2 * c + 1)));
    *lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, blo), blo), b16));
    *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                          _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bhi), bhi), b16));
}

static void dot_q4_k(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q4_k *x = w;
    const mi_block_q8_k *y = a;
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        const __m128i sm = k4_unpack(x[i].scales), sc16 = _mm_cvtepu8_epi16(sm);
        const float d = h2f(x[i].d) * y[i].d, dmin = h2f(x[i].dmin) * y[i].d;
        accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_mins(sm, y[i].bsums)), accm);
        __m256i isum = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i lo, hi;
            k4_codes(x + i, c, &lo, &hi);
            const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c)));
            const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c + 32)));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(plo, bcast_word(sc16, 2 * c)));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(phi, bcast_word(sc16, 2 * c + 1)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), acc);
    }
    *s = hsum8(acc) - hsum4(accm);
}

static void dot_q5_k(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q5_k *x = w;
    const mi_block_q8_k *y = a;
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        const __m128i sm = k4_unpack(x[i].scales), sc16 = _mm_cvtepu8_epi16(sm);
        const float d = h2f(x[i].d) * y[i].d, dmin = h2f(x[i].dmin) * y[i].d;
        accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_mins(sm, y[i].bsums)), accm);
        __m256i isum = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i lo, hi;
            k5_codes(x + i, c, &lo, &hi);
            const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c)));
            const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c + 32)));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(plo, bcast_word(sc16, 2 * c)));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(phi, bcast_word(sc16, 2 * c + 1)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), acc);
    }
    *s = hsum8(acc) - hsum4(accm);
}

/* dot_q4_k / dot_q5_k (block type BT, chunk codes CODES) for four activation rows a + r stride: each
 * row's float operations the one-row kernel's in its order (the integer block sums are exact in any
 * order), so each s[r] is its bits; a block's scales and a chunk's codes and scale words are made
 * once for the four rows */
#define DOT4_K45(NAME4, BT, CODES)                                                                          \
    static void NAME4(int64_t n, float *s, const void *w, const void *a, size_t stride) {                   \
        const BT *x = w;                                                                                    \
        const mi_block_q8_k *y[4];                                                                          \
        for (int r = 0; r < 4; r++) y[r] = (const mi_block_q8_k *)((const char *)a + (size_t)r * stride);   \
        __m256 acc[4];                                                                                      \
        __m128 accm[4];                                                                                     \
        for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps(), accm[r] = _mm_setzero_ps();               \
        for (int64_t i = 0; i < n / MI_QK_K; i++) {                                                         \
            const __m128i sm = k4_unpack(x[i].scales), sc16 = _mm_cvtepu8_epi16(sm);                        \
            __m256i isum[4];                                                                                \
            for (int r = 0; r < 4; r++) {                                                                   \
                const float dmin = h2f(x[i].dmin) * y[r][i].d;                                              \
                accm[r] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_mins(sm, y[r][i].bsums)), accm[r]); \
                isum[r] = _mm256_setzero_si256();                                                           \
            }                                                                                               \
            for (int c = 0; c < 4; c++) {                                                                   \
                __m256i lo, hi;                                                                             \
                CODES(x + i, c, &lo, &hi);                                                                  \
                const __m256i slo = bcast_word(sc16, 2 * c), shi = bcast_word(sc16, 2 * c + 1);             \
                for (int r = 0; r < 4; r++) {                                                               \
                    const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[r][i].qs + 64 * c))); \
                    const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[r][i].qs + 64 * c + 32))); \
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(plo, slo));                       \
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(phi, shi));                       \
                }                                                                                           \
            }                                                                                               \
            for (int r = 0; r < 4; r++)                                                                     \
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * y[r][i].d), _mm256_cvtepi32_ps(isum[r]), acc[r]); \
        }                                                                                                   \
        for (int r = 0; r < 4; r++) s[r] = hsum8(acc[r]) - hsum4(accm[r]);                                  \
    }
DOT4_K45(dot4_q4_k, mi_block_q4_k, k4_codes)
DOT4_K45(dot4_q5_k, mi_block_q5_k, k5_codes)

/* int8 scales k, k+1 (bytes of sc) -> 16 int16 lanes: 8 x sc[k], 8 x sc[k+1] */
static inline __m256i q6_scale_pair(__m128i sc, int k) {
    const __m128i idx = _mm_set_epi8(k + 1, k + 1, k + 1, k + 1, k + 1, k + 1, k + 1, k + 1, k, k, k, k, k, k, k, k);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, idx));
}

/* half h of a Q6_K block: its 128 six-bit codes as four 32-byte groups (elements 32 g .. of the half) */
static inline void q6_half_codes(const mi_block_q6_k *x, int h, __m256i q[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const uint8_t *ql = x->ql + 64 * h;
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
}

static void dot_q6_k(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q6_k *x = w;
    const mi_block_q8_k *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        const __m128i sc = _mm_loadu_si128((const __m128i *)x[i].scales);
        /* the -32 offset: 32 * sum_s sc_s * bsums_s */
        const __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), _mm256_cvtepi8_epi16(sc));
        __m256i isum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6_half_codes(x + i, h, q);
            for (int g = 0; g < 4; g++) {
                const __m256i p = _mm256_maddubs_epi16(q[g], _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * g)));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, q6_scale_pair(sc, 8 * h + 2 * g)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * y[i].d), _mm256_cvtepi32_ps(isum), acc);
    }
    *s = hsum8(acc);
}

/* ---------------- activation quantizers (bit-identical to quant_ref.c / quant_k.c) ---------------- */

/* dot_q6_k for four activation rows a + r stride, each s[r] its bits; a half's codes and scale
 * pairs made once for the four rows (the integer block sums are exact in any order) */
static void dot4_q6_k(int64_t n, float *s, const void *w, const void *a, size_t stride) {
    const mi_block_q6_k *x = w;
    const mi_block_q8_k *y[4];
    for (int r = 0; r < 4; r++) y[r] = (const mi_block_q8_k *)((const char *)a + (size_t)r * stride);
    __m256 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        const __m128i sc = _mm_loadu_si128((const __m128i *)x[i].scales);
        __m256i isum[4];
        for (int r = 0; r < 4; r++) {
            const __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[r][i].bsums), _mm256_cvtepi8_epi16(sc));
            isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
        }
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6_half_codes(x + i, h, q);
            for (int g = 0; g < 4; g++) {
                const __m256i sp = q6_scale_pair(sc, 8 * h + 2 * g);
                for (int r = 0; r < 4; r++) {
                    const __m256i p = _mm256_maddubs_epi16(q[g], _mm256_loadu_si256((const __m256i *)(y[r][i].qs + 128 * h + 32 * g)));
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, sp));
                }
            }
        }
        for (int r = 0; r < 4; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * y[r][i].d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
    }
    for (int r = 0; r < 4; r++) s[r] = hsum8(acc[r]);
}

static inline float absmax8(__m256 m) {
    __m128 v = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    v = _mm_max_ps(v, _mm_movehl_ps(v, v));
    v = _mm_max_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

/* |x| folded into m; max(|x|, m) order makes a nan element ignored, as fmaxf */
static inline __m256 fold_abs(__m256 m, __m256 x) {
    return _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), m);
}

/* roundf(clamp(v, -127, 127)) as int32 lanes (half away from zero) */
static inline __m256i round_q8x8(__m256 v) {
    v = _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(127.0f)), _mm256_set1_ps(-127.0f));
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
    const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 one = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
    return _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(up, one)));
}

/* 32 int32 in 4 vectors -> 32 int8 in order */
static inline void store_i8x32(int8_t *dst, __m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    _mm256_storeu_si256((__m256i *)dst, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

static inline float q8_block(const float *x, int8_t *qs, int *sum) {
    __m256 v[4], m = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        m = fold_abs(m, v[k]);
    }
    const float d = absmax8(m) / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int k = 0; k < 4; k++) q[k] = round_q8x8(_mm256_mul_ps(v[k], id));
    if (sum) {
        const __m256i t = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i u = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0x4E));
        u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0xB1));
        *sum = _mm_cvtsi128_si32(u);
    }
    store_i8x32(qs, q[0], q[1], q[2], q[3]);
    return d;
}

static void quant_q8_0(const float *src, void *dst, int64_t n) {
    mi_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / MI_QK8_0; i++) b[i].d = mi_f32_to_f16(q8_block(src + 32 * i, b[i].qs, NULL));
}

static void quant_q8_1(const float *src, void *dst, int64_t n) {
    mi_block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / MI_QK8_1; i++) {
        int sum;
        const float d = q8_block(src + 32 * i, b[i].qs, &sum);
        b[i].d = mi_f32_to_f16(d);
        b[i].s = mi_f32_to_f16((float)sum * d);
    }
}

static void quant_q8_k(const float *src, void *dst, int64_t n) {
    mi_block_q8_k *b = dst;
    for (int64_t i = 0; i < n / MI_QK_K; i++, src += MI_QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++) m = fold_abs(m, _mm256_loadu_ps(src + 8 * k));
        const float amax = absmax8(m);
        const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
        b[i].d = iscale != 0.0f ? 1.0f / iscale : 0.0f;
        const __m256 is = _mm256_set1_ps(iscale);
        for (int k = 0; k < 32; k += 4) {
            __m256i q[4];
            for (int j = 0; j < 4; j++) {
                __m256 v = _mm256_mul_ps(_mm256_loadu_ps(src + 8 * (k + j)), is);
                v = _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(127.0f)), _mm256_set1_ps(-127.0f));
                q[j] = _mm256_cvtps_epi32(v); /* MXCSR default: nearest even, as nearbyintf */
            }
            store_i8x32(b[i].qs + 8 * k, q[0], q[1], q[2], q[3]);
        }
        for (int g = 0; g < 16; g++) { /* bsums: pairs of bytes -> int16, then 8 lanes summed */
            const __m128i v = _mm_loadu_si128((const __m128i *)(b[i].qs + 16 * g));
            __m128i t = _mm_madd_epi16(_mm_cvtepi8_epi16(v), _mm_set1_epi16(1));
            t = _mm_add_epi32(t, _mm_madd_epi16(_mm_cvtepi8_epi16(_mm_srli_si128(v, 8)), _mm_set1_epi16(1)));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
            b[i].bsums[g] = (int16_t)_mm_cvtsi128_si32(t);
        }
    }
}

void mi_quant_fill_avx2(mi_quant_kernels *k) {
    k->dot[MI_TYPE_F32] = dot_f32;
    k->dot[MI_TYPE_F16] = dot_f16;
    k->dot[MI_TYPE_BF16] = dot_bf16;
    k->dot[MI_TYPE_Q4_0] = dot_q4_0;
    k->dot[MI_TYPE_Q4_1] = dot_q4_1;
    k->dot[MI_TYPE_Q5_0] = dot_q5_0;
    k->dot[MI_TYPE_Q5_1] = dot_q5_1;
    k->dot[MI_TYPE_Q8_0] = dot_q8_0;
    k->dot[MI_TYPE_Q4_K] = dot_q4_k;
    k->dot[MI_TYPE_Q5_K] = dot_q5_k;
    k->dot[MI_TYPE_Q6_K] = dot_q6_k;
    k->dot4[MI_TYPE_Q4_0] = dot4_q4_0;
    k->dot4[MI_TYPE_Q4_1] = dot4_q4_1;
    k->dot4[MI_TYPE_Q5_0] = dot4_q5_0;
    k->dot4[MI_TYPE_Q5_1] = dot4_q5_1;
    k->dot4[MI_TYPE_Q8_0] = dot4_q8_0;
    k->dot4[MI_TYPE_Q4_K] = dot4_q4_k;
    k->dot4[MI_TYPE_Q5_K] = dot4_q5_k;
    k->dot4[MI_TYPE_Q6_K] = dot4_q6_k;
    k->quant[MI_TYPE_Q8_0] = quant_q8_0;
    k->quant[MI_TYPE_Q8_1] = quant_q8_1;
    k->quant[MI_TYPE_Q8_K] = quant_q8_k;
}

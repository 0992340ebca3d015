/* AVX-512 (F/BW/VL/DQ + VNNI) kernels: dot products and activation quantizers.
 * Same contract as quant_avx2.c: exact int32 block sums (vpdpbusd for u8 x s8,
 * vpmaddubsw + vpdpwssd where a per-sub-block scale is applied), f32 lanes for
 * the scaling; activation quantizers byte-identical to the scalar ones.
 * Compiled with the Makefile's AVX512 flags; only called after a cpuid check. */
#include <immintrin.h>
#include <math.h>
#include <string.h>
#include "common/quant/quant_impl.h"

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hsum16(__m512 v) {
    return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

/* two 16-byte nibble arrays -> 64 bytes [a low, a high, b low, b high] (element order of 2 blocks) */
static inline __m512i nib2(const uint8_t *qa, const uint8_t *qb) {
    /* [qa, qa, qb, qb] by two broadcast loads, then the odd 16-byte lanes shifted: no shuffles */
    const __m512i z = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)qa)), 0xFF00,
                                                  _mm_loadu_si128((const __m128i *)qb));
    return _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFF00FF00u, z, 4), _mm512_set1_epi8(0x0F));
}

static inline __m256i nib1(const uint8_t *q) {
    const __m128i v = _mm_loadu_si128((const __m128i *)q);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}

static inline __m512i load2(const int8_t *a, const int8_t *b) {
    return _mm512_mask_broadcast_i64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)), 0xF0,
                                       _mm256_loadu_si256((const __m256i *)b));
}

static inline uint32_t qh32(const uint8_t qh[4]) {
    uint32_t u;
    memcpy(&u, qh, 4);
    return u;
}

/* ---------------- float weights ---------------- */

static void dot_f32(int64_t n, float *s, const void *w, const void *a) {
    const float *x = w, *y = a;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), acc1);
    }
    float sum = hsum16(_mm512_add_ps(acc0, acc1));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

static void dot_f16(int64_t n, float *s, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
        const __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16)));
        acc0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(y + i), acc0);
        acc1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(y + i + 16), acc1);
    }
    float sum = hsum16(_mm512_add_ps(acc0, acc1));
    for (; i < n; i++) sum += h2f(x[i]) * y[i];
    *s = sum;
}

static inline __m512 bf16x16(const uint16_t *p) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

static void dot_bf16(int64_t n, float *s, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(bf16x16(x + i), _mm512_loadu_ps(y + i), acc0);
        acc1 = _mm512_fmadd_ps(bf16x16(x + i + 16), _mm512_loadu_ps(y + i + 16), acc1);
    }
    float sum = hsum16(_mm512_add_ps(acc0, acc1));
    for (; i < n; i++) sum += mi_bf16_to_f32(x[i]) * y[i];
    *s = sum;
}

/* ---------------- 32-element blocks: 8 per iteration, two per zmm ---------------- */

/* The fp16 scales of 4 consecutive blocks (d, and m or s when the type has one)
 * are picked out of two 64-byte loads by one word permute (vpermt2w) and
 * converted together: 8 floats [d0..d3, m0..m3]. The loads stay inside the 4
 * blocks (the second starts at min(64, 4*stride - 64)). */
typedef struct { __m512i idx; int z1; } fields4;

static inline fields4 fields4_make(int stride, int has_m) {
    fields4 f;
    int16_t v[32] = {0};
    f.z1 = 4 * stride - 64 < 64 ? 4 * stride - 64 : 64;
    for (int k = 0; k < 8; k++) {
        if (k >= 4 && !has_m) break;
        const int off = stride * (k % 4) + 2 * (k / 4);
        v[k] = (int16_t)(off + 2 <= 64 ? off / 2 : 32 + (off - f.z1) / 2);
    }
    f.idx = _mm512_loadu_si512(v);
    return f;
}

static inline __m256 fields4_get(const void *base, fields4 f) {
    const char *p = base;
    const __m512i v = _mm512_permutex2var_epi16(_mm512_loadu_si512(p), f.idx, _mm512_loadu_si512(p + f.z1));
    return _mm256_cvtph_ps(_mm512_castsi512_si128(v));
}

/* A block pair's weight codes (zmm) and a single block's (ymm), per type, apart from the
 * activations, so a four-row dot makes them once: c the codes as dpbusd's unsigned operand (|w| for
 * Q8_0, whose signs are neg), ready for any activation block. */
typedef struct { __m512i c; __mmask64 neg; } codes2;
typedef struct { __m256i c, w; } codes1;
static inline codes2 c2_q4_0(const mi_block_q4_0 *x) { return (codes2){nib2(x[0].qs, x[1].qs), 0}; }
static inline codes2 c2_q4_1(const mi_block_q4_1 *x) { return (codes2){nib2(x[0].qs, x[1].qs), 0}; }
/* Q5: the 32 qh bits of each block are a byte mask adding 16 */
static inline __m512i q5_2(const uint8_t *qa, const uint8_t qha[4], const uint8_t *qb, const uint8_t qhb[4]) {
    const __mmask64 k = (__mmask64)qh32(qha) | ((__mmask64)qh32(qhb) << 32);
    const __m512i q = nib2(qa, qb);
    return _mm512_mask_add_epi8(q, k, q, _mm512_set1_epi8(16));
}
static inline codes2 c2_q5_0(const mi_block_q5_0 *x) { return (codes2){q5_2(x[0].qs, x[0].qh, x[1].qs, x[1].qh), 0}; }
static inline codes2 c2_q5_1(const mi_block_q5_1 *x) { return (codes2){q5_2(x[0].qs, x[0].qh, x[1].qs, x[1].qh), 0}; }
static inline codes2 c2_q8_0(const mi_block_q8_0 *x) {
    const __m512i w = load2(x[0].qs, x[1].qs);
    return (codes2){_mm512_abs_epi8(w), _mm512_movepi8_mask(w)};
}

/* Block-pair integer sums for each type (16 int32 lanes: 8 per block) from the pair's codes. */
static inline __m512i d2_q4_0(codes2 w, const mi_block_q8_0 *y) {
    const __m512i a = load2(y[0].qs, y[1].qs), z = _mm512_setzero_si512();
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(z, w.c, a), _mm512_dpbusd_epi32(z, _mm512_set1_epi8(8), a));
}
static inline __m512i d2_q4_1(codes2 w, const mi_block_q8_1 *y) {
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.c, load2(y[0].qs, y[1].qs));
}
static inline __m512i d2_q5_0(codes2 w, const mi_block_q8_0 *y) {
    const __m512i a = load2(y[0].qs, y[1].qs), z = _mm512_setzero_si512();
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(z, w.c, a), _mm512_dpbusd_epi32(z, _mm512_set1_epi8(16), a));
}
static inline __m512i d2_q5_1(codes2 w, const mi_block_q8_1 *y) {
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.c, load2(y[0].qs, y[1].qs));
}
/* Q8_0 x Q8_0: dpbusd(|w|, a with w's sign); a is never -128 (our quantizers clamp to 127) */
static inline __m512i d2_q8_0(codes2 w, const mi_block_q8_0 *y) {
    const __m512i a = load2(y[0].qs, y[1].qs);
    const __m512i as = _mm512_mask_sub_epi8(a, w.neg, _mm512_setzero_si512(), a);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.c, as);
}
#define PAIR_OF(T)                                                                                \
    static inline __m512i pair_##T(const mi_block_##T *x, const void *y) { return d2_##T(c2_##T(x), y); }
PAIR_OF(q4_0)
PAIR_OF(q4_1)
PAIR_OF(q5_0)
PAIR_OF(q5_1)
PAIR_OF(q8_0)

/* Single trailing block (ymm, AVX512VL VNNI): its codes, then int32 lanes of its dot */
static inline codes1 c1_q4_0(const mi_block_q4_0 *x) { return (codes1){nib1(x->qs), _mm256_setzero_si256()}; }
static inline codes1 c1_q4_1(const mi_block_q4_1 *x) { return (codes1){nib1(x->qs), _mm256_setzero_si256()}; }
static inline __m256i q5_1blk(const uint8_t *q, const uint8_t qh[4]) {
    const __m256i v = nib1(q);
    return _mm256_mask_add_epi8(v, (__mmask32)qh32(qh), v, _mm256_set1_epi8(16));
}
static inline codes1 c1_q5_0(const mi_block_q5_0 *x) { return (codes1){q5_1blk(x->qs, x->qh), _mm256_setzero_si256()}; }
static inline codes1 c1_q5_1(const mi_block_q5_1 *x) { return (codes1){q5_1blk(x->qs, x->qh), _mm256_setzero_si256()}; }
static inline codes1 c1_q8_0(const mi_block_q8_0 *x) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)x->qs);
    return (codes1){_mm256_abs_epi8(w), w};
}
static inline __m256i d1_q4_0(codes1 w, const mi_block_q8_0 *y) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)y->qs), z = _mm256_setzero_si256();
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(z, w.c, a), _mm256_dpbusd_epi32(z, _mm256_set1_epi8(8), a));
}
static inline __m256i d1_q4_1(codes1 w, const mi_block_q8_1 *y) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w.c, _mm256_loadu_si256((const __m256i *)y->qs));
}
static inline __m256i d1_q5_0(codes1 w, const mi_block_q8_0 *y) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)y->qs), z = _mm256_setzero_si256();
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(z, w.c, a), _mm256_dpbusd_epi32(z, _mm256_set1_epi8(16), a));
}
static inline __m256i d1_q5_1(codes1 w, const mi_block_q8_1 *y) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w.c, _mm256_loadu_si256((const __m256i *)y->qs));
}
static inline __m256i d1_q8_0(codes1 w, const mi_block_q8_0 *y) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)y->qs);
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w.c, _mm256_sign_epi8(a, w.w));
}
#define ONE_OF(T)                                                                                 \
    static inline __m256i one_##T(const mi_block_##T *x, const void *y) { return d1_##T(c1_##T(x), y); }
ONE_OF(q4_0)
ONE_OF(q4_1)
ONE_OF(q5_0)
ONE_OF(q5_1)
ONE_OF(q8_0)

/* One dot kernel per type from the pieces above. HAS_MIN: Q4_1/Q5_1 add mw*sa per block. */
#define DOT_BLOCKS32(NAME, WT, AT, PAIR, ONE, HAS_MIN)                                                     \
    static void NAME(int64_t n, float *s, const void *w, const void *a) {                                   \
        const WT *x = w;                                                                                    \
        const AT *y = a;                                                                                    \
        const int64_t nb = n / 32;                                                                          \
        const fields4 fx = fields4_make((int)sizeof(WT), HAS_MIN), fy = fields4_make((int)sizeof(AT), HAS_MIN); \
        const __m512i i01 = _mm512_inserti64x4(_mm512_set1_epi32(0), _mm256_set1_epi32(1), 1);              \
        const __m512i i23 = _mm512_inserti64x4(_mm512_set1_epi32(2), _mm256_set1_epi32(3), 1);              \
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();                                      \
        __m256 accm = _mm256_setzero_ps();                                                                  \
        int64_t i = 0;                                                                                      \
        for (; i + 4 <= nb; i += 4) {                                                                       \
            const __m256 sx = fields4_get(x + i, fx), sy = fields4_get(y + i, fy);                          \
            const __m512 s8 = _mm512_castps256_ps512(_mm256_mul_ps(sx, sy)); /* dx*dy (0..3), mx*sy (4..7) */ \
            if (HAS_MIN) accm = _mm256_add_ps(accm, _mm512_castps512_ps256(s8));                             \
            acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(PAIR(x + i, y + i)), _mm512_permutexvar_ps(i01, s8), acc0); \
            acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(PAIR(x + i + 2, y + i + 2)), _mm512_permutexvar_ps(i23, s8), acc1); \
        }                                                                                                   \
        float tail = 0.0f;                                                                                  \
        for (; i < nb; i++) {                                                                               \
            const uint16_t *hx = (const uint16_t *)(x + i), *hy = (const uint16_t *)(y + i);                \
            const __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(ONE(x + i, y + i)), _mm256_set1_ps(h2f(hx[0]) * h2f(hy[0]))); \
            tail += hsum8(p) + (HAS_MIN ? h2f(hx[1]) * h2f(hy[1]) : 0.0f);                                  \
        }                                                                                                   \
        /* the m*s products sit in lanes 4..7 of accm */                                                    \
        const float msum = HAS_MIN ? hsum8(_mm256_blend_ps(_mm256_setzero_ps(), accm, 0xF0)) : 0.0f;        \
        *s = hsum16(_mm512_add_ps(acc0, acc1)) + msum + tail;                                               \
    }

DOT_BLOCKS32(dot_q4_0, mi_block_q4_0, mi_block_q8_0, pair_q4_0, one_q4_0, 0)
DOT_BLOCKS32(dot_q4_1, mi_block_q4_1, mi_block_q8_1, pair_q4_1, one_q4_1, 1)
DOT_BLOCKS32(dot_q5_0, mi_block_q5_0, mi_block_q8_0, pair_q5_0, one_q5_0, 0)
DOT_BLOCKS32(dot_q5_1, mi_block_q5_1, mi_block_q8_1, pair_q5_1, one_q5_1, 1)
DOT_BLOCKS32(dot_q8_0, mi_block_q8_0, mi_block_q8_0, pair_q8_0, one_q8_0, 0)

/* The four-row form of DOT_BLOCKS32's NAME (T its type): for each activation row NAME's float
 * operations in NAME's order (a block quad's scale products, the pairs' fmadds into the two
 * accumulators, the tail's products and sums, the final sums), so each s[r] is NAME's bits; a
 * block pair's (and a tail block's) weight codes are made once for the four rows. */
#define DOT4_BLOCKS32(NAME4, T, AT, HAS_MIN)                                                                \
    static void NAME4(int64_t n, float *s, const void *w, const void *a, size_t stride) {                   \
        const mi_block_##T *x = w;                                                                          \
        const AT *y[4];                                                                                     \
        for (int r = 0; r < 4; r++) y[r] = (const AT *)((const char *)a + (size_t)r * stride);               \
        const int64_t nb = n / 32;                                                                          \
        const fields4 fx = fields4_make((int)sizeof(mi_block_##T), HAS_MIN), fy = fields4_make((int)sizeof(AT), HAS_MIN); \
        const __m512i i01 = _mm512_inserti64x4(_mm512_set1_epi32(0), _mm256_set1_epi32(1), 1);              \
        const __m512i i23 = _mm512_inserti64x4(_mm512_set1_epi32(2), _mm256_set1_epi32(3), 1);              \
        __m512 acc0[4], acc1[4];                                                                            \
        __m256 accm[4];                                                                                     \
        for (int r = 0; r < 4; r++) acc0[r] = acc1[r] = _mm512_setzero_ps(), accm[r] = _mm256_setzero_ps();  \
        int64_t i = 0;                                                                                      \
        for (; i + 4 <= nb; i += 4) {                                                                       \
            const __m256 sx = fields4_get(x + i, fx);                                                       \
            const codes2 p0 = c2_##T(x + i), p1 = c2_##T(x + i + 2);                                        \
            for (int r = 0; r < 4; r++) {                                                                   \
                const __m512 s8 = _mm512_castps256_ps512(_mm256_mul_ps(sx, fields4_get(y[r] + i, fy)));    \
                if (HAS_MIN) accm[r] = _mm256_add_ps(accm[r], _mm512_castps512_ps256(s8));                   \
                acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d2_##T(p0, y[r] + i)), _mm512_permutexvar_ps(i01, s8), acc0[r]); \
                acc1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d2_##T(p1, y[r] + i + 2)), _mm512_permutexvar_ps(i23, s8), acc1[r]); \
            }                                                                                               \
        }                                                                                                   \
        float tail[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                                           \
        for (; i < nb; i++) {                                                                               \
            const uint16_t *hx = (const uint16_t *)(x + i);                                                 \
            const codes1 c = c1_##T(x + i);                                                                 \
            for (int r = 0; r < 4; r++) {                                                                   \
                const uint16_t *hy = (const uint16_t *)(y[r] + i);                                          \
                const __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(d1_##T(c, y[r] + i)), _mm256_set1_ps(h2f(hx[0]) * h2f(hy[0]))); \
                tail[r] += hsum8(p) + (HAS_MIN ? h2f(hx[1]) * h2f(hy[1]) : 0.0f);                           \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < 4; r++) {                                                                       \
            const float msum = HAS_MIN ? hsum8(_mm256_blend_ps(_mm256_setzero_ps(), accm[r], 0xF0)) : 0.0f; \
            s[r] = hsum16(_mm512_add_ps(acc0[r], acc1[r])) + msum + tail[r];                                \
        }                                                                                                   \
    }

DOT4_BLOCKS32(dot4_q4_0, q4_0, mi_block_q8_0, 0)
DOT4_BLOCKS32(dot4_q4_1, q4_1, mi_block_q8_1, 1)
DOT4_BLOCKS32(dot4_q5_0, q5_0, mi_block_q8_0, 0)
DOT4_BLOCKS32(dot4_q5_1, q5_1, mi_block_q8_1, 1)
DOT4_BLOCKS32(dot4_q8_0, q8_0, mi_block_q8_0, 0)

/* ---------------- K-quants: 64 elements per zmm ---------------- */

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

static inline __m128i k4_mins(__m128i sm, const int16_t bsums[16]) {
    const __m128i b0 = _mm_loadu_si128((const __m128i *)bsums), b1 = _mm_loadu_si128((const __m128i *)(bsums + 8));
    const __m128i m = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    return _mm_madd_epi16(m, _mm_hadd_epi16(b0, b1));
}

/* word-lane index vectors: chunk c of a Q4_K/Q5_K block -> 16 x scale 2c, 16 x scale 2c+1 */
static inline __m512i k4_idx(int c) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * c))), _mm256_set1_epi16((short)(2 * c + 1)), 1);
}

/* 32 bytes of a chunk -> [low nibbles | high nibbles] = elements 64c .. 64c+63 */
static inline __m512i k4_chunk(const uint8_t *q) {
    const __m512i z = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)q));
    return _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFFFF0000u, z, 4), _mm512_set1_epi8(0x0F));
}

static void dot_q4_k(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q4_k *x = w;
    const mi_block_q8_k *y = a;
    const __m512i i0 = k4_idx(0), i1 = k4_idx(1), i2 = k4_idx(2), i3 = k4_idx(3);
    __m512 acc = _mm512_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        const __m128i sm = k4_unpack(x[i].scales);
        const float d = h2f(x[i].d) * y[i].d, dmin = h2f(x[i].dmin) * y[i].d;
        accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_mins(sm, y[i].bsums)), accm);
        const __m512i sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
        const __m512i *q8 = (const __m512i *)y[i].qs;
        __m512i s0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(k4_chunk(x[i].qs), _mm512_loadu_si512(q8)),
                                         _mm512_permutexvar_epi16(i0, sc));
        __m512i s1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(k4_chunk(x[i].qs + 32), _mm512_loadu_si512(q8 + 1)),
                                         _mm512_permutexvar_epi16(i1, sc));
        s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(k4_chunk(x[i].qs + 64), _mm512_loadu_si512(q8 + 2)),
                                 _mm512_permutexvar_epi16(i2, sc));
        s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(k4_chunk(x[i].qs + 96), _mm512_loadu_si512(q8 + 3)),
                                 _mm512_permutexvar_epi16(i3, sc));
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc);
    }
    __m128 m = accm;
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    *s = hsum16(acc) - _mm_cvtss_f32(m);
}

static void dot_q5_k(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q5_k *x = w;
    const mi_block_q8_k *y = a;
    __m512i idx[4], bit[4];
    for (int c = 0; c < 4; c++) {
        idx[c] = k4_idx(c);
        bit[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << (2 * c)))),
                                    _mm256_set1_epi8((char)(1 << (2 * c + 1))), 1);
    }
    const __m512i b16 = _mm512_set1_epi8(16);
    __m512 acc = _mm512_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        const __m128i sm = k4_unpack(x[i].scales);
        const float d = h2f(x[i].d) * y[i].d, dmin = h2f(x[i].dmin) * y[i].d;
        accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_mins(sm, y[i].bsums)), accm);
        const __m512i sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[i].qh));
        const __m512i *q8 = (const __m512i *)y[i].qs;
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        for (int c = 0; c < 4; c += 2) {
            __m512i q0 = k4_chunk(x[i].qs + 32 * c), q1 = k4_chunk(x[i].qs + 32 * c + 32);
            q0 = _mm512_mask_add_epi8(q0, _mm512_test_epi8_mask(qh, bit[c]), q0, b16);
            q1 = _mm512_mask_add_epi8(q1, _mm512_test_epi8_mask(qh, bit[c + 1]), q1, b16);
            s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(q0, _mm512_loadu_si512(q8 + c)), _mm512_permutexvar_epi16(idx[c], sc));
            s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(q1, _mm512_loadu_si512(q8 + c + 1)),
                                     _mm512_permutexvar_epi16(idx[c + 1], sc));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc);
    }
    __m128 m = accm;
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    *s = hsum16(acc) - _mm_cvtss_f32(m);
}

/* chunk c (64 elements) of a Q4_K / Q5_K block as 64 codes (Q5_K's fifth bits added) */
static inline __m512i k4_codes(const mi_block_q4_k *x, int c) { return k4_chunk(x->qs + 32 * c); }
static inline __m512i k5_codes(const mi_block_q5_k *x, int c) {
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->qh));
    const __m512i bit = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << (2 * c)))),
                                           _mm256_set1_epi8((char)(1 << (2 * c + 1))), 1);
    const __m512i q = k4_chunk(x->qs + 32 * c);
    return _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bit), q, _mm512_set1_epi8(16));
}

/* dot_q4_k / dot_q5_k (block type BT, chunk codes CODES) for four activation rows a + r stride: each
 * row's float operations the one-row kernel's in its order (the integer sums exact in any order),
 * so each s[r] is its bits; a block's scales, mins' unpacking, codes and permuted scales are made
 * once for the four rows */
#define DOT4_K45(NAME4, BT, CODES)                                                                          \
    static void NAME4(int64_t n, float *s, const void *w, const void *a, size_t stride) {                   \
        const BT *x = w;                                                                                    \
        const mi_block_q8_k *y[4];                                                                          \
        for (int r = 0; r < 4; r++) y[r] = (const mi_block_q8_k *)((const char *)a + (size_t)r * stride);   \
        __m512 acc[4];                                                                                      \
        __m128 accm[4];                                                                                     \
        for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps(), accm[r] = _mm_setzero_ps();              \
        for (int64_t i = 0; i < n / MI_QK_K; i++) {                                                         \
            const __m128i sm = k4_unpack(x[i].scales);                                                      \
            const __m512i sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));                               \
            __m512i q[4], cs[4];                                                                            \
            for (int c = 0; c < 4; c++) q[c] = CODES(x + i, c), cs[c] = _mm512_permutexvar_epi16(k4_idx(c), sc); \
            for (int r = 0; r < 4; r++) {                                                                   \
                const mi_block_q8_k *yr = y[r] + i;                                                         \
                const float d = h2f(x[i].d) * yr->d, dmin = h2f(x[i].dmin) * yr->d;                         \
                accm[r] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_mins(sm, yr->bsums)), accm[r]); \
                const __m512i *q8 = (const __m512i *)yr->qs;                                                \
                __m512i s0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(q[0], _mm512_loadu_si512(q8)), cs[0]); \
                __m512i s1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(q[1], _mm512_loadu_si512(q8 + 1)), cs[1]); \
                s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(q[2], _mm512_loadu_si512(q8 + 2)), cs[2]);    \
                s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(q[3], _mm512_loadu_si512(q8 + 3)), cs[3]);    \
                acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc[r]); \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < 4; r++) {                                                                       \
            __m128 m = accm[r];                                                                             \
            m = _mm_add_ps(m, _mm_movehl_ps(m, m));                                                         \
            m = _mm_add_ss(m, _mm_movehdup_ps(m));                                                          \
            s[r] = hsum16(acc[r]) - _mm_cvtss_f32(m);                                                       \
        }                                                                                                   \
    }
DOT4_K45(dot4_q4_k, mi_block_q4_k, k4_codes)
DOT4_K45(dot4_q5_k, mi_block_q5_k, k5_codes)

static inline __m512i q6_idx(int g) {
    int16_t v[32];
    for (int w = 0; w < 32; w++) v[w] = (int16_t)(4 * g + w / 8);
    return _mm512_loadu_si512(v);
}

/* Q6_K: per half, ql (64 B) low nibbles = elements 0..63, high nibbles = 64..127;
 * qh bits 0-1 / 2-3 / 4-5 / 6-7 of byte l are the top bits of elements l, l+32, l+64, l+96.
 * Half h's codes: q0 = elements 0..63 of the half, q1 = 64..127. */
static inline void q6_half_codes(const mi_block_q6_k *x, int h, __m512i *q0, __m512i *q1) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* per-word shift counts: first 32 bytes of qh shifted left 4 / 2 (elements 0..63), or right 0 / 2 (64..127) */
    const __m512i sh_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i sh_hi = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    const __m512i ql = _mm512_loadu_si512(x->ql + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qh + 32 * h)));
    *q0 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, sh_lo), m30));
    *q1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(_mm512_srlv_epi16(qh, sh_hi), m30));
}
static void dot_q6_k(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q6_k *x = w;
    const mi_block_q8_k *y = a;
    __m512i idx[4]; /* group G = 64 elements = sub-blocks 4G..4G+3: word w -> scale 4G + w/8 */
    for (int g = 0; g < 4; g++) idx[g] = q6_idx(g);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m512i sc = _mm512_castsi256_si512(sc16);
        const __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), sc16);
        __m512i isum = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(_mm256_slli_epi32(corr, 5)));
        const __m512i *q8 = (const __m512i *)y[i].qs;
        for (int h = 0; h < 2; h++) {
            __m512i q0, q1;
            q6_half_codes(x + i, h, &q0, &q1);
            isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q0, _mm512_loadu_si512(q8 + 2 * h)), _mm512_permutexvar_epi16(idx[2 * h], sc));
            isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q1, _mm512_loadu_si512(q8 + 2 * h + 1)),
                                       _mm512_permutexvar_epi16(idx[2 * h + 1], sc));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(h2f(x[i].d) * y[i].d), _mm512_cvtepi32_ps(isum), acc);
    }
    *s = hsum16(acc);
}

/* dot_q6_k for four activation rows a + r stride, each s[r] its bits (its operations in its order);
 * a block's codes and permuted scales made once for the four rows */
static void dot4_q6_k(int64_t n, float *s, const void *w, const void *a, size_t stride) {
    const mi_block_q6_k *x = w;
    const mi_block_q8_k *y[4];
    for (int r = 0; r < 4; r++) y[r] = (const mi_block_q8_k *)((const char *)a + (size_t)r * stride);
    __m512i idx[4];
    for (int g = 0; g < 4; g++) idx[g] = q6_idx(g);
    __m512 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m512i sc = _mm512_castsi256_si512(sc16);
        __m512i q[4], c[4];
        for (int h = 0; h < 2; h++) {
            q6_half_codes(x + i, h, &q[2 * h], &q[2 * h + 1]);
            c[2 * h] = _mm512_permutexvar_epi16(idx[2 * h], sc);
            c[2 * h + 1] = _mm512_permutexvar_epi16(idx[2 * h + 1], sc);
        }
        for (int r = 0; r < 4; r++) {
            const mi_block_q8_k *yr = y[r] + i;
            const __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)yr->bsums), sc16);
            __m512i isum = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(_mm256_slli_epi32(corr, 5)));
            const __m512i *q8 = (const __m512i *)yr->qs;
            for (int k = 0; k < 4; k++)
                isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q[k], _mm512_loadu_si512(q8 + k)), c[k]);
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(h2f(x[i].d) * yr->d), _mm512_cvtepi32_ps(isum), acc[r]);
        }
    }
    for (int r = 0; r < 4; r++) s[r] = hsum16(acc[r]);
}

/* ---------------- activation quantizers (bit-identical to the scalar ones) ---------------- */

static inline __m512 fold_abs(__m512 m, __m512 x) { return _mm512_max_ps(_mm512_abs_ps(x), m); }

static inline __m512 clamp127(__m512 v) {
    return _mm512_max_ps(_mm512_min_ps(v, _mm512_set1_ps(127.0f)), _mm512_set1_ps(-127.0f));
}

/* roundf (half away from zero) of an in-range vector, as int32 */
static inline __m512i roundf_i32(__m512 v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 one = _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));
    return _mm512_cvttps_epi32(_mm512_mask_add_ps(t, up, t, one));
}

static inline float reduce_max(__m512 m) {
    __m256 v = _mm256_max_ps(_mm512_castps512_ps256(m), _mm512_extractf32x8_ps(m, 1));
    __m128 u = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    u = _mm_max_ps(u, _mm_movehl_ps(u, u));
    u = _mm_max_ss(u, _mm_movehdup_ps(u));
    return _mm_cvtss_f32(u);
}

static inline float q8_block(const float *x, int8_t *qs, int *sum) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float d = reduce_max(fold_abs(fold_abs(_mm512_setzero_ps(), v0), v1)) / 127.0f;
    const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    const __m512i q0 = roundf_i32(clamp127(_mm512_mul_ps(v0, id))), q1 = roundf_i32(clamp127(_mm512_mul_ps(v1, id)));
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(qs + 16), _mm512_cvtsepi32_epi8(q1));
    if (sum) *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
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
        __m512 m = _mm512_setzero_ps();
        for (int k = 0; k < 16; k++) m = fold_abs(m, _mm512_loadu_ps(src + 16 * k));
        const float amax = reduce_max(m);
        const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
        b[i].d = iscale != 0.0f ? 1.0f / iscale : 0.0f;
        const __m512 is = _mm512_set1_ps(iscale);
        for (int k = 0; k < 16; k++) { /* 16 elements = one bsums group */
            const __m512i q = _mm512_cvtps_epi32(clamp127(_mm512_mul_ps(_mm512_loadu_ps(src + 16 * k), is)));
            _mm_storeu_si128((__m128i *)(b[i].qs + 16 * k), _mm512_cvtsepi32_epi8(q));
            b[i].bsums[k] = (int16_t)_mm512_reduce_add_epi32(q);
        }
    }
}

void mi_quant_fill_avx512(mi_quant_kernels *k) {
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

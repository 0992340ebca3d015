/* AVX-512 VNNI GEMM for Q4_0, Q5_0, Q8_0 (x Q8_0), Q4_1, Q5_1 (x Q8_1) and Q4_K, Q6_K (x Q8_K)
 * weights (prefill).
 * Rows are interleaved so one zmm lane = one weight row: for a chunk of 16 rows each
 * 32-element block is repacked (once per chunk, into per-thread scratch) as 8 vectors
 * Z_k whose lane holds elements 4k..4k+3 of its row. An activation block then costs 8
 * vpdpbusd with its 4 codes broadcast, and one scale step for 16 rows at once, where a
 * per-(row, token) kernel pays unpacking, a horizontal sum and a scale per block.
 * The integer block sums and the scales are those of the vec_dot path (exact); only the
 * float summation order differs (docs/NUMERICS.md). Lanes hold rows in the order of a 4x4
 * transpose, perm(p) = 4*(p%4) + p/4, undone by one permute at the store.
 * K-quants (Q4_K, Q6_K x Q8_K) use the same lanes per 256-element super-block: codes as
 * u8 (0..15 / 0..63), one float scale per 16 elements and row, and the mins (Q4_K) or the
 * -32 offset (Q6_K) applied through the activations' 16-element sums (bsums). */
#include "cpu_backend.h"
#include <immintrin.h>
#include <string.h>

#define GR 16            /* rows per group (lanes) */
#define GT 8             /* tokens per register block */
#define ACT_BLK 48       /* per token and block: 32 codes, float d, int -8*sum, int -16*sum, pad */
#define W_BLK 640        /* per block of a row group: 8 x 64 B codes, 64 B scales, 64 B start values */


/* Q8_0 activation row -> packed row. Q8_0 weights are the signed side of vpdpbusd, so
 * their activations are stored +128 (as u8); Q4_0/Q5_0 codes are the unsigned side and
 * take the activations as they are, with the offset (8 or 16) folded into the start value. */
/* Q8_1 rows (for Q4_1 / Q5_1 weights): codes as they are, d and s = d * sum(codes) as floats;
 * the weights' min m enters as m * s per block */
static void pack_act32_q8_1(const void *q8_row, void *dst, int64_t K) {
    const mi_block_q8_1 *b = q8_row;
    char *o = dst;
    for (int64_t i = 0; i < K / 32; i++, b++, o += ACT_BLK) {
        memcpy(o, b->qs, 32);
        float d = _cvtsh_ss(b->d), sa = _cvtsh_ss(b->s);
        memcpy(o + 32, &d, 4);
        memcpy(o + 36, &sa, 4);
    }
}

static void pack_act32(mi_type wtype, const void *q8_row, void *dst, int64_t K) {
    if (wtype == MI_TYPE_Q4_1 || wtype == MI_TYPE_Q5_1) {
        pack_act32_q8_1(q8_row, dst, K);
        return;
    }
    const mi_block_q8_0 *b = q8_row;
    char *o = dst;
    for (int64_t i = 0; i < K / 32; i++, b++, o += ACT_BLK) {
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) {
            sum += b->qs[j];
            o[j] = wtype == MI_TYPE_Q8_0 ? (char)(uint8_t)(b->qs[j] + 128) : (char)b->qs[j];
        }
        float d = _cvtsh_ss(b->d);
        int32_t i8 = -8 * sum, i16 = -16 * sum;
        memcpy(o + 32, &d, 4);
        memcpy(o + 36, &i8, 4);
        memcpy(o + 40, &i16, 4);
    }
}

static inline int perm(int p) { return 4 * (p % 4) + p / 4; }

/* 16 rows x 16 bytes (4 dwords) -> Q[k] lane p = dword k of row perm(p) */
static inline void transpose16x4(const __m128i *rows, __m512i Q[4]) {
    __m512i A[4];
    for (int j = 0; j < 4; j++) {
        __m512i x = _mm512_castsi128_si512(rows[4 * j]);
        x = _mm512_inserti32x4(x, rows[4 * j + 1], 1);
        x = _mm512_inserti32x4(x, rows[4 * j + 2], 2);
        A[j] = _mm512_inserti32x4(x, rows[4 * j + 3], 3);
    }
    __m512i T0 = _mm512_unpacklo_epi32(A[0], A[1]), T1 = _mm512_unpackhi_epi32(A[0], A[1]);
    __m512i T2 = _mm512_unpacklo_epi32(A[2], A[3]), T3 = _mm512_unpackhi_epi32(A[2], A[3]);
    Q[0] = _mm512_unpacklo_epi64(T0, T2);
    Q[1] = _mm512_unpackhi_epi64(T0, T2);
    Q[2] = _mm512_unpacklo_epi64(T1, T3);
    Q[3] = _mm512_unpackhi_epi64(T1, T3);
}

/* Repack rows r0..r0+n (n <= 16) of all blocks into ws. */
static void repack(mi_type wt, const char *w, size_t w_rb, int64_t r0, int n, int64_t nb, char *ws) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i bsel = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0x00000000);
    const __m512i bbit = _mm512_set1_epi32(0x08040201);
    for (int64_t b = 0; b < nb; b++) {
        char *o = ws + (size_t)b * W_BLK;
        __m128i lo[GR], hi[GR];   /* in row order; dw and qh below are in lane order */
        float dw[GR], mw[GR];
        uint32_t qh[GR];
        for (int r = 0; r < GR; r++) {
            if (r >= n) {
                lo[r] = hi[r] = _mm_setzero_si128();
                continue;
            }
            const char *row = w + (size_t)(r0 + r) * w_rb;
            if (wt == MI_TYPE_Q8_0) {
                const mi_block_q8_0 *x = (const mi_block_q8_0 *)row + b;
                lo[r] = _mm_loadu_si128((const __m128i *)x->qs);
                hi[r] = _mm_loadu_si128((const __m128i *)(x->qs + 16));
            } else if (wt == MI_TYPE_Q5_0) {
                lo[r] = _mm_loadu_si128((const __m128i *)((const mi_block_q5_0 *)row + b)->qs);
            } else if (wt == MI_TYPE_Q4_1) {
                lo[r] = _mm_loadu_si128((const __m128i *)((const mi_block_q4_1 *)row + b)->qs);
            } else if (wt == MI_TYPE_Q5_1) {
                lo[r] = _mm_loadu_si128((const __m128i *)((const mi_block_q5_1 *)row + b)->qs);
            } else {
                lo[r] = _mm_loadu_si128((const __m128i *)((const mi_block_q4_0 *)row + b)->qs);
            }
        }
        for (int p = 0; p < GR; p++) {
            int r = perm(p);
            dw[p] = mw[p] = 0.0f;
            qh[p] = 0;
            if (r >= n) continue;
            const char *row = w + (size_t)(r0 + r) * w_rb;
            if (wt == MI_TYPE_Q8_0) {
                dw[p] = _cvtsh_ss(((const mi_block_q8_0 *)row + b)->d);
            } else if (wt == MI_TYPE_Q5_0) {
                const mi_block_q5_0 *x = (const mi_block_q5_0 *)row + b;
                dw[p] = _cvtsh_ss(x->d);
                memcpy(&qh[p], x->qh, 4);
            } else if (wt == MI_TYPE_Q4_1) {
                const mi_block_q4_1 *x = (const mi_block_q4_1 *)row + b;
                dw[p] = _cvtsh_ss(x->d);
                mw[p] = _cvtsh_ss(x->m);
            } else if (wt == MI_TYPE_Q5_1) {
                const mi_block_q5_1 *x = (const mi_block_q5_1 *)row + b;
                dw[p] = _cvtsh_ss(x->d);
                mw[p] = _cvtsh_ss(x->m);
                memcpy(&qh[p], x->qh, 4);
            } else {
                dw[p] = _cvtsh_ss(((const mi_block_q4_0 *)row + b)->d);
            }
        }
        __m512i Z[8], Q[4];
        transpose16x4(lo, Q);
        if (wt == MI_TYPE_Q8_0) {
            for (int k = 0; k < 4; k++) Z[k] = Q[k];
            transpose16x4(hi, Q);
            for (int k = 0; k < 4; k++) Z[4 + k] = Q[k];
            __m512i s = _mm512_setzero_si512();
            for (int k = 0; k < 8; k++) s = _mm512_dpbusd_epi32(s, _mm512_set1_epi8((char)0x80), Z[k]);
            _mm512_storeu_si512(o + 576, _mm512_sub_epi32(_mm512_setzero_si512(), s));
        } else {
            /* byte j of qs: element j in the low nibble, element j+16 in the high one */
            for (int k = 0; k < 4; k++) {
                Z[k] = _mm512_and_si512(Q[k], m4);
                Z[4 + k] = _mm512_and_si512(_mm512_srli_epi16(Q[k], 4), m4);
            }
            if (wt == MI_TYPE_Q5_0 || wt == MI_TYPE_Q5_1) {
                __m512i H = _mm512_loadu_si512(qh);
                for (int k = 0; k < 8; k++) {   /* bit 4k+j of qh -> 0x10 on byte j of Z[k] */
                    __m512i t = _mm512_shuffle_epi8(_mm512_srli_epi32(H, 4 * k), bsel);
                    __mmask64 m = _mm512_test_epi8_mask(t, bbit);
                    Z[k] = _mm512_mask_add_epi8(Z[k], m, Z[k], _mm512_set1_epi8(16));
                }
            }
        }
        for (int k = 0; k < 8; k++) _mm512_storeu_si512(o + 64 * k, Z[k]);
        _mm512_storeu_ps(o + 512, _mm512_loadu_ps(dw));
        if (wt == MI_TYPE_Q4_1 || wt == MI_TYPE_Q5_1) _mm512_storeu_ps(o + 576, _mm512_loadu_ps(mw));
    }
}

/* One row group (16 lanes) x T tokens over all blocks. */
static inline __attribute__((always_inline)) void group_tokens(const int wt, const char *ws, int64_t nb,
                                                               const char *act, size_t act_stride, int64_t t0,
                                                               int T, __m512 *acc) {
#pragma GCC unroll 8
    for (int j = 0; j < T; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *o = ws + (size_t)b * W_BLK;
        __m512i Z[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) Z[k] = _mm512_loadu_si512(o + 64 * k);
        __m512 dw = _mm512_loadu_ps(o + 512);
        __m512i winit = wt == 1 ? _mm512_loadu_si512(o + 576) : _mm512_setzero_si512();
        __m512 mw = wt >= 3 ? _mm512_loadu_ps(o + 576) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            const char *a = act + (size_t)(t0 + j) * act_stride + (size_t)b * ACT_BLK;
            int32_t ini;
            memcpy(&ini, a + (wt == 2 ? 40 : 36), 4);
            __m512i s = wt == 1 ? winit : wt >= 3 ? _mm512_setzero_si512() : _mm512_set1_epi32(ini);
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                int32_t a4;
                memcpy(&a4, a + 4 * k, 4);
                s = wt == 1 ? _mm512_dpbusd_epi32(s, _mm512_set1_epi32(a4), Z[k])
                            : _mm512_dpbusd_epi32(s, Z[k], _mm512_set1_epi32(a4));
            }
            float da;
            memcpy(&da, a + 32, 4);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[j]);
            if (wt >= 3) {   /* + m_w * s_a (s_a = d_a * sum of the block's codes) */
                float sa;
                memcpy(&sa, a + 36, 4);
                acc[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sa), acc[j]);
            }
        }
    }
}

#define GROUP(WT)                                                                                        \
    do {                                                                                                 \
        int64_t t = t0;                                                                                  \
        for (; t + GT <= t1; t += GT) {                                                                  \
            group_tokens(WT, ws, nb, ac, act_stride, t, GT, acc);                                        \
            for (int j = 0; j < GT; j++) store(acc[j], y + (size_t)(t + j) * (size_t)M + r, rm, bias, r); \
        }                                                                                                \
        for (; t < t1; t++) {                                                                            \
            group_tokens(WT, ws, nb, ac, act_stride, t, 1, acc);                                         \
            store(acc[0], y + (size_t)t * (size_t)M + r, rm, bias, r);                                   \
        }                                                                                                \
    } while (0)

static inline void store(__m512 v, float *dst, __mmask16 m, const float *bias, int64_t r) {
    const __m512i idx = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);   /* perm */
    v = _mm512_permutexvar_ps(idx, v);
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + r));
    _mm512_mask_storeu_ps(dst, m, v);
}

static void tile32(mi_type wtype, const void *w, size_t w_rb, int64_t r0, int64_t r1, const void *act,
                   size_t act_stride, int64_t t0, int64_t t1, int64_t K, float *y, int64_t M, const float *bias,
                   void *wscratch) {
    const char *ac = act;
    char *ws = (char *)(((uintptr_t)wscratch + 63) & ~(uintptr_t)63);
    int64_t nb = K / 32;
    __m512 acc[GT];
    for (int64_t r = r0; r < r1; r += GR) {
        int n = r1 - r < GR ? (int)(r1 - r) : GR;
        __mmask16 rm = (__mmask16)((1u << n) - 1);
        repack(wtype, w, w_rb, r, n, nb, ws);
            if (wtype == MI_TYPE_Q8_0)
            GROUP(1);
        else if (wtype == MI_TYPE_Q5_0)
            GROUP(2);
        else if (wtype == MI_TYPE_Q4_1 || wtype == MI_TYPE_Q5_1)
            GROUP(3);
        else
            GROUP(0);
    }
}

/* ---------------- K-quants: Q4_K, Q6_K x Q8_K ---------------- */

#define ACTK_BLK 384     /* per token and super-block: 256 codes, float d, pad, 16 float bsums */
#define WK_BLK 6144      /* per super-block of a row group: 8 x 8 x 64 B codes, 16 x 64 B scales, 16 x 64 B mins */

static void pack_actk(const void *q8k_row, void *dst, int64_t K) {
    const mi_block_q8_k *b = q8k_row;
    char *o = dst;
    for (int64_t i = 0; i < K / 256; i++, b++, o += ACTK_BLK) {
        memcpy(o, b->qs, 256);
        memcpy(o + 256, &b->d, 4);
        float bs[16];
        for (int g = 0; g < 16; g++) bs[g] = (float)b->bsums[g];
        memcpy(o + 264, bs, sizeof bs);
    }
}

/* Q4_K 6-bit scale and min of sub-block j (the GGUF packing of scales[12]) */
static inline void k4_scale_min(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* One row's super-block as 256 u8 codes in element order, 16 scales and 16 min weights:
 * value(e) = sc16[g] * code(e) - mn16[g] with g = e / 16 (mn applied through bsums). */
static void unpack_k(mi_type wt, const char *blk, uint8_t *codes, float *sc16, float *mn16) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    if (wt == MI_TYPE_Q4_K) {
        const mi_block_q4_k *x = (const mi_block_q4_k *)blk;
        for (int j = 0; j < 4; j++) {   /* 32 bytes: low nibbles sub-block 2j, high 2j+1 */
            __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * j));
            _mm256_storeu_si256((__m256i *)(codes + 64 * j), _mm256_and_si256(q, m4));
            _mm256_storeu_si256((__m256i *)(codes + 64 * j + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
        }
        float d = _cvtsh_ss(x->d), dmin = _cvtsh_ss(x->dmin);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            k4_scale_min(x->scales, j, &sc, &m);
            sc16[2 * j] = sc16[2 * j + 1] = d * (float)sc;
            mn16[2 * j] = mn16[2 * j + 1] = dmin * (float)m;
        }
    } else {   /* Q6_K: code = ql nibble | 2 bits of qh << 4, value d * sc * (code - 32) */
        const mi_block_q6_k *x = (const mi_block_q6_k *)blk;
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
            uint8_t *c = codes + 128 * h;
            __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4);
            __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4);
            __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4);
            __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4);
            _mm256_storeu_si256((__m256i *)c, _mm256_or_si256(_mm256_and_si256(l0, m4), h0));
            _mm256_storeu_si256((__m256i *)(c + 32), _mm256_or_si256(_mm256_and_si256(l1, m4), h1));
            _mm256_storeu_si256((__m256i *)(c + 64), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), h2));
            _mm256_storeu_si256((__m256i *)(c + 96), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h3));
        }
        float d = _cvtsh_ss(x->d);
        for (int g = 0; g < 16; g++) {
            sc16[g] = d * (float)x->scales[g];
            mn16[g] = 32.0f * sc16[g];
        }
    }
}

static void repack_k(mi_type wt, const char *w, size_t w_rb, int64_t r0, int n, int64_t nsb, char *ws) {
    size_t bsz = wt == MI_TYPE_Q4_K ? sizeof(mi_block_q4_k) : sizeof(mi_block_q6_k);
    _Alignas(64) uint8_t codes[GR][256];
    _Alignas(64) float sc[GR][16], mn[GR][16];
    for (int64_t b = 0; b < nsb; b++) {
        char *o = ws + (size_t)b * WK_BLK;
        for (int r = 0; r < GR; r++) {
            if (r < n) {
                unpack_k(wt, w + (size_t)(r0 + r) * w_rb + (size_t)b * bsz, codes[r], sc[r], mn[r]);
            } else {
                memset(codes[r], 0, 256);
                memset(sc[r], 0, sizeof sc[r]);
                memset(mn[r], 0, sizeof mn[r]);
            }
        }
        for (int s = 0; s < 8; s++) {   /* 32-element sub-block s -> 8 lane vectors */
            __m128i lo[GR], hi[GR];
            for (int r = 0; r < GR; r++) {
                lo[r] = _mm_loadu_si128((const __m128i *)(codes[r] + 32 * s));
                hi[r] = _mm_loadu_si128((const __m128i *)(codes[r] + 32 * s + 16));
            }
            __m512i Q[4];
            transpose16x4(lo, Q);
            for (int k = 0; k < 4; k++) _mm512_storeu_si512(o + 512 * s + 64 * k, Q[k]);
            transpose16x4(hi, Q);
            for (int k = 0; k < 4; k++) _mm512_storeu_si512(o + 512 * s + 64 * (4 + k), Q[k]);
        }
        for (int g = 0; g < 16; g++) {
            float vs[GR], vm[GR];
            for (int p = 0; p < GR; p++) {
                vs[p] = sc[perm(p)][g];
                vm[p] = mn[perm(p)][g];
            }
            _mm512_storeu_ps(o + 4096 + 64 * g, _mm512_loadu_ps(vs));
            _mm512_storeu_ps(o + 5120 + 64 * g, _mm512_loadu_ps(vm));
        }
    }
}

static inline __attribute__((always_inline)) void group_tokens_k(const char *ws, int64_t nsb, const char *act,
                                                                 size_t act_stride, int64_t t0, int T, __m512 *acc) {
#pragma GCC unroll 8
    for (int j = 0; j < T; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        const char *o = ws + (size_t)b * WK_BLK;
        __m512 sum[GT], mins[GT];
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) sum[j] = mins[j] = _mm512_setzero_ps();
        for (int s = 0; s < 8; s++) {
            __m512i Z[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) Z[k] = _mm512_loadu_si512(o + 512 * s + 64 * k);
            __m512 sc0 = _mm512_loadu_ps(o + 4096 + 64 * (2 * s)), sc1 = _mm512_loadu_ps(o + 4096 + 64 * (2 * s + 1));
            __m512 mn0 = _mm512_loadu_ps(o + 5120 + 64 * (2 * s)), mn1 = _mm512_loadu_ps(o + 5120 + 64 * (2 * s + 1));
#pragma GCC unroll 8
            for (int j = 0; j < T; j++) {
                const char *a = act + (size_t)(t0 + j) * act_stride + (size_t)b * ACTK_BLK + 32 * s;
                __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    int32_t a0, a1;
                    memcpy(&a0, a + 4 * k, 4);
                    memcpy(&a1, a + 16 + 4 * k, 4);
                    s0 = _mm512_dpbusd_epi32(s0, Z[k], _mm512_set1_epi32(a0));
                    s1 = _mm512_dpbusd_epi32(s1, Z[4 + k], _mm512_set1_epi32(a1));
                }
                const float *bs = (const float *)(act + (size_t)(t0 + j) * act_stride + (size_t)b * ACTK_BLK + 264);
                sum[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), sc0, sum[j]);
                sum[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), sc1, sum[j]);
                mins[j] = _mm512_fmadd_ps(mn0, _mm512_set1_ps(bs[2 * s]), mins[j]);
                mins[j] = _mm512_fmadd_ps(mn1, _mm512_set1_ps(bs[2 * s + 1]), mins[j]);
            }
        }
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            float da;
            memcpy(&da, act + (size_t)(t0 + j) * act_stride + (size_t)b * ACTK_BLK + 256, 4);
            acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(da), _mm512_sub_ps(sum[j], mins[j]), acc[j]);
        }
    }
}

static void tilek(mi_type wtype, const void *w, size_t w_rb, int64_t r0, int64_t r1, const void *act,
                  size_t act_stride, int64_t t0, int64_t t1, int64_t K, float *y, int64_t M, const float *bias,
                  void *wscratch) {
    const char *ac = act;
    char *ws = (char *)(((uintptr_t)wscratch + 63) & ~(uintptr_t)63);
    int64_t nsb = K / 256;
    __m512 acc[GT];
    for (int64_t r = r0; r < r1; r += GR) {
        int n = r1 - r < GR ? (int)(r1 - r) : GR;
        __mmask16 rm = (__mmask16)((1u << n) - 1);
        repack_k(wtype, w, w_rb, r, n, nsb, ws);
        int64_t t = t0;
        for (; t + GT <= t1; t += GT) {
            group_tokens_k(ws, nsb, ac, act_stride, t, GT, acc);
            for (int j = 0; j < GT; j++) store(acc[j], y + (size_t)(t + j) * (size_t)M + r, rm, bias, r);
        }
        for (; t < t1; t++) {
            group_tokens_k(ws, nsb, ac, act_stride, t, 1, acc);
            store(acc[0], y + (size_t)t * (size_t)M + r, rm, bias, r);
        }
    }
}

/* ---------------- entry points ---------------- */

static bool is_k(mi_type t) { return t == MI_TYPE_Q4_K || t == MI_TYPE_Q6_K; }

size_t cpu_gemm_act_bytes(mi_type wtype, int64_t K) {
    return is_k(wtype) ? (size_t)(K / 256) * ACTK_BLK : (size_t)(K / 32) * ACT_BLK;
}

size_t cpu_gemm_w_scratch(mi_type wtype, int64_t K) {
    return (is_k(wtype) ? (size_t)(K / 256) * WK_BLK : (size_t)(K / 32) * W_BLK) + 64;
}

void cpu_gemm_pack_act(mi_type wtype, const void *act_row, void *dst, int64_t K) {
    if (is_k(wtype))
        pack_actk(act_row, dst, K);
    else
        pack_act32(wtype, act_row, dst, K);
}

void cpu_gemm_tile(mi_type wtype, const void *w, size_t w_rb, int64_t r0, int64_t r1, const void *act,
                   size_t act_stride, int64_t t0, int64_t t1, int64_t K, float *y, int64_t M, const float *bias,
                   void *wscratch) {
    if (is_k(wtype))
        tilek(wtype, w, w_rb, r0, r1, act, act_stride, t0, t1, K, y, M, bias, wscratch);
    else
        tile32(wtype, w, w_rb, r0, r1, act, act_stride, t0, t1, K, y, M, bias, wscratch);
}

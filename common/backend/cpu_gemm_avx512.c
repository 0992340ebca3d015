/* AVX-512 VNNI GEMM for Q4_0, Q5_0 and Q8_0 weights x Q8_0 activations (prefill).
 * Rows are interleaved so one zmm lane = one weight row: for a chunk of 16 rows each
 * 32-element block is repacked (once per chunk, into per-thread scratch) as 8 vectors
 * Z_k whose lane holds elements 4k..4k+3 of its row. An activation block then costs 8
 * vpdpbusd with its 4 codes broadcast, and one scale step for 16 rows at once, where a
 * per-(row, token) kernel pays unpacking, a horizontal sum and a scale per block.
 * The integer block sums and the scales are those of the vec_dot path (exact); only the
 * float summation order differs (docs/NUMERICS.md). Lanes hold rows in the order of a 4x4
 * transpose, perm(p) = 4*(p%4) + p/4, undone by one permute at the store. */
#include "cpu_backend.h"
#include <immintrin.h>
#include <string.h>

#define GR 16            /* rows per group (lanes) */
#define GT 8             /* tokens per register block */
#define ACT_BLK 48       /* per token and block: 32 codes, float d, int -8*sum, int -16*sum, pad */
#define W_BLK 640        /* per block of a row group: 8 x 64 B codes, 64 B scales, 64 B start values */

size_t cpu_gemm_act_bytes(int64_t K) { return (size_t)(K / 32) * ACT_BLK; }
size_t cpu_gemm_w_scratch(int64_t K) { return (size_t)(K / 32) * W_BLK + 64; }

/* Q8_0 activation row -> packed row. Q8_0 weights are the signed side of vpdpbusd, so
 * their activations are stored +128 (as u8); Q4_0/Q5_0 codes are the unsigned side and
 * take the activations as they are, with the offset (8 or 16) folded into the start value. */
void cpu_gemm_pack_act(mi_type wtype, const void *q8_row, void *dst, int64_t K) {
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
        float dw[GR];
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
            } else {
                lo[r] = _mm_loadu_si128((const __m128i *)((const mi_block_q4_0 *)row + b)->qs);
            }
        }
        for (int p = 0; p < GR; p++) {
            int r = perm(p);
            dw[p] = 0.0f;
            qh[p] = 0;
            if (r >= n) continue;
            const char *row = w + (size_t)(r0 + r) * w_rb;
            if (wt == MI_TYPE_Q8_0) {
                dw[p] = _cvtsh_ss(((const mi_block_q8_0 *)row + b)->d);
            } else if (wt == MI_TYPE_Q5_0) {
                const mi_block_q5_0 *x = (const mi_block_q5_0 *)row + b;
                dw[p] = _cvtsh_ss(x->d);
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
            if (wt == MI_TYPE_Q5_0) {
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
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            const char *a = act + (size_t)(t0 + j) * act_stride + (size_t)b * ACT_BLK;
            int32_t ini;
            memcpy(&ini, a + (wt == 2 ? 40 : 36), 4);
            __m512i s = wt == 1 ? winit : _mm512_set1_epi32(ini);
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

void cpu_gemm_tile(mi_type wtype, const void *w, size_t w_rb, int64_t r0, int64_t r1, const void *act,
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
        else
            GROUP(0);
    }
}

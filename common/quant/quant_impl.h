/* Internal to common/quant: the per-type scalar reference functions and the
 * per-ISA kernel tables that types.c dispatches to. Not a public header: the
 * rest of the engine goes through mi_types.h only. */
#ifndef MI_QUANT_IMPL_H
#define MI_QUANT_IMPL_H
#include "common/quant/mi_types.h"
#include "common/core/mi_fp16.h"

/* ---- scalar reference: plain and 32-element block formats (quant_ref.c) ---- */
void mi_dequant_f16(const void *src, float *dst, int64_t n);
void mi_dequant_bf16(const void *src, float *dst, int64_t n);
void mi_dequant_q4_0(const void *src, float *dst, int64_t n);
void mi_dequant_q4_1(const void *src, float *dst, int64_t n);
void mi_dequant_q5_0(const void *src, float *dst, int64_t n);
void mi_dequant_q5_1(const void *src, float *dst, int64_t n);
void mi_dequant_q8_0(const void *src, float *dst, int64_t n);
void mi_dequant_q8_1(const void *src, float *dst, int64_t n);
void mi_quant_f16(const float *src, void *dst, int64_t n);
void mi_quant_bf16(const float *src, void *dst, int64_t n);
void mi_quant_q4_0(const float *src, void *dst, int64_t n);
void mi_quant_q4_1(const float *src, void *dst, int64_t n);
void mi_quant_q5_0(const float *src, void *dst, int64_t n);
void mi_quant_q5_1(const float *src, void *dst, int64_t n);
/* activation quantizers (also the Q8_0 weight quantizer) */
void mi_quant_q8_0(const float *src, void *dst, int64_t n);
void mi_quant_q8_1(const float *src, void *dst, int64_t n);
void mi_quant_q8_k(const float *src, void *dst, int64_t n);

/* ---- scalar reference: K-quants (quant_k.c) ---- */
void mi_dequant_q4_k(const void *src, float *dst, int64_t n);
void mi_dequant_q5_k(const void *src, float *dst, int64_t n);
void mi_dequant_q6_k(const void *src, float *dst, int64_t n);
void mi_dequant_q8_k(const void *src, float *dst, int64_t n);
void mi_quant_q4_k(const float *src, void *dst, int64_t n);
void mi_quant_q5_k(const float *src, void *dst, int64_t n);
void mi_quant_q6_k(const float *src, void *dst, int64_t n);
/* Q4_K/Q5_K packed 6-bit scales: sub-block j (0..7) -> scale, min */
static inline void mi_k4_scale_min(const uint8_t *q, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q6_K values (q - 32, in -32..31) in element order. Per half h (128 elements):
 * element 128h + 32g + l (g = 0..3, l = 0..31) takes its low 4 bits from
 * ql[64h + 32(g & 1) + l] (low nibble for g < 2, high for g >= 2) and its top
 * 2 bits from bits 2g..2g+1 of qh[32h + l]. Scale index = element / 16. */
static inline void mi_q6_unpack(const mi_block_q6_k *b, int8_t q[256]) {
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                const int lo = (b->ql[64 * h + 32 * (g & 1) + l] >> (4 * (g >> 1))) & 0xF;
                const int hi = (b->qh[32 * h + l] >> (2 * g)) & 3;
                q[128 * h + 32 * g + l] = (int8_t)((lo | (hi << 4)) - 32);
            }
}

/* ---- scalar reference dots (dot_ref.c): weight row x activation row ---- */
void mi_dot_f32_ref(int64_t n, float *s, const void *w, const void *a);
void mi_dot_f16_ref(int64_t n, float *s, const void *w, const void *a);
void mi_dot_bf16_ref(int64_t n, float *s, const void *w, const void *a);
void mi_dot_q4_0_ref(int64_t n, float *s, const void *w, const void *a);
void mi_dot_q4_1_ref(int64_t n, float *s, const void *w, const void *a);
void mi_dot_q5_0_ref(int64_t n, float *s, const void *w, const void *a);
void mi_dot_q5_1_ref(int64_t n, float *s, const void *w, const void *a);
void mi_dot_q8_0_ref(int64_t n, float *s, const void *w, const void *a);
void mi_dot_q4_k_ref(int64_t n, float *s, const void *w, const void *a);
void mi_dot_q5_k_ref(int64_t n, float *s, const void *w, const void *a);
void mi_dot_q6_k_ref(int64_t n, float *s, const void *w, const void *a);

/* ---- SIMD tables: indexed by type id; NULL where the ISA file has no kernel ---- */
typedef struct {
    mi_vec_dot_fn dot[MI_TYPE_COUNT];     /* by weight type */
    mi_vec_dot4_fn dot4[MI_TYPE_COUNT];   /* the four-row form of dot[t], where written */
    mi_quantize_fn quant[MI_TYPE_COUNT];  /* by activation type (Q8_0, Q8_1, Q8_K) */
} mi_quant_kernels;
void mi_quant_fill_avx2(mi_quant_kernels *k);   /* quant_avx2.c */
void mi_quant_fill_avx512(mi_quant_kernels *k); /* quant_avx512.c */

/* Q8_0 rounding (ggml's roundf: half away from zero) is what the SIMD
 * quantizers reproduce bit for bit. */
#endif

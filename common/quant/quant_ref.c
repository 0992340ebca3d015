/* Scalar reference conversions for the plain float formats (F16, BF16) and the
 * 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1). These are the
 * definitions every SIMD kernel and the CUDA code are checked against; the
 * arithmetic (operation order, f32 everywhere, no FMA) reproduces ggml's
 * reference quantizer, hence the PyPI gguf package, bit for bit. */
#include <math.h>
#include <string.h>
#include "common/quant/quant_impl.h"

/* ---------------- plain formats ---------------- */

void mi_dequant_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = mi_f16_to_f32(h[i]);
}

void mi_dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = mi_bf16_to_f32(h[i]);
}

void mi_quant_f16(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = mi_f32_to_f16(src[i]);
}

void mi_quant_bf16(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = mi_f32_to_bf16(src[i]);
}

/* ---------------- helpers ---------------- */

/* The element with the largest magnitude, sign kept; first one on ties (ggml). */
static float signed_absmax(const float *x, int k) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < k; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* trunc(v) clamped to [0, hi]; equals ggml's MIN(hi, (int8_t)v) for every v
 * its quantizers produce (v >= 0.5) and stays defined for inf/nan input. */
static inline int trunc_clamp(float v, int hi) {
    if (!(v >= 0.0f)) return 0;
    if (v >= (float)(hi + 1)) return hi;
    return (int)v;
}

/* roundf (half away from zero) of v clamped to [-127, 127]; the clamp never
 * changes a finite in-range value and keeps nan/inf defined (nan -> 127). */
static inline int8_t round_q8(float v) {
    v = fmaxf(-127.0f, fminf(127.0f, v));
    return (int8_t)roundf(v);
}

/* ---------------- Q4_0: x = d * (q - 8), d = max / -8 ---------------- */

void mi_dequant_q4_0(const void *src, float *dst, int64_t n) {
    const mi_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / MI_QK4_0; i++, dst += MI_QK4_0) {
        const float d = mi_f16_to_f32(b[i].d);
        for (int j = 0; j < MI_QK4_0 / 2; j++) {
            dst[j] = d * (float)((b[i].qs[j] & 0xF) - 8);
            dst[j + MI_QK4_0 / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

void mi_quant_q4_0(const float *src, void *dst, int64_t n) {
    mi_block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / MI_QK4_0; i++, src += MI_QK4_0) {
        /* the signed extreme maps to q = 0 (value -8*d): one more level on its side */
        const float d = signed_absmax(src, MI_QK4_0) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = mi_f32_to_f16(d);
        for (int j = 0; j < MI_QK4_0 / 2; j++) {
            const int q0 = trunc_clamp(src[j] * id + 8.5f, 15);
            const int q1 = trunc_clamp(src[j + MI_QK4_0 / 2] * id + 8.5f, 15);
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ---------------- Q4_1: x = d * q + m, d = (max - min) / 15 ---------------- */

void mi_dequant_q4_1(const void *src, float *dst, int64_t n) {
    const mi_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / MI_QK4_1; i++, dst += MI_QK4_1) {
        const float d = mi_f16_to_f32(b[i].d), m = mi_f16_to_f32(b[i].m);
        for (int j = 0; j < MI_QK4_1 / 2; j++) {
            dst[j] = d * (float)(b[i].qs[j] & 0xF) + m;
            dst[j + MI_QK4_1 / 2] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

static void minmax(const float *x, int k, float *mn, float *mx) {
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < k; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

void mi_quant_q4_1(const float *src, void *dst, int64_t n) {
    mi_block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / MI_QK4_1; i++, src += MI_QK4_1) {
        float lo, hi;
        minmax(src, MI_QK4_1, &lo, &hi);
        const float d = (hi - lo) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = mi_f32_to_f16(d);
        b[i].m = mi_f32_to_f16(lo);
        for (int j = 0; j < MI_QK4_1 / 2; j++) {
            const int q0 = trunc_clamp((src[j] - lo) * id + 0.5f, 15);
            const int q1 = trunc_clamp((src[j + MI_QK4_1 / 2] - lo) * id + 0.5f, 15);
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ---------------- Q5_0 / Q5_1: fifth bit of element j is bit j of qh ---------------- */

static inline uint32_t load_qh(const uint8_t qh[4]) {
    uint32_t u;
    memcpy(&u, qh, 4); /* little-endian, as on disk */
    return u;
}

void mi_dequant_q5_0(const void *src, float *dst, int64_t n) {
    const mi_block_q5_0 *b = src;
    for (int64_t i = 0; i < n / MI_QK5_0; i++, dst += MI_QK5_0) {
        const float d = mi_f16_to_f32(b[i].d);
        const uint32_t qh = load_qh(b[i].qh);
        for (int j = 0; j < MI_QK5_0 / 2; j++) {
            const int q0 = (b[i].qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
            const int q1 = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            dst[j] = d * (float)(q0 - 16);
            dst[j + MI_QK5_0 / 2] = d * (float)(q1 - 16);
        }
    }
}

void mi_quant_q5_0(const float *src, void *dst, int64_t n) {
    mi_block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / MI_QK5_0; i++, src += MI_QK5_0) {
        const float d = signed_absmax(src, MI_QK5_0) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        b[i].d = mi_f32_to_f16(d);
        for (int j = 0; j < MI_QK5_0 / 2; j++) {
            const int q0 = trunc_clamp(src[j] * id + 16.5f, 31);
            const int q1 = trunc_clamp(src[j + MI_QK5_0 / 2] * id + 16.5f, 31);
            b[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(b[i].qh, &qh, 4);
    }
}

void mi_dequant_q5_1(const void *src, float *dst, int64_t n) {
    const mi_block_q5_1 *b = src;
    for (int64_t i = 0; i < n / MI_QK5_1; i++, dst += MI_QK5_1) {
        const float d = mi_f16_to_f32(b[i].d), m = mi_f16_to_f32(b[i].m);
        const uint32_t qh = load_qh(b[i].qh);
        for (int j = 0; j < MI_QK5_1 / 2; j++) {
            const int q0 = (b[i].qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
            const int q1 = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            dst[j] = d * (float)q0 + m;
            dst[j + MI_QK5_1 / 2] = d * (float)q1 + m;
        }
    }
}

void mi_quant_q5_1(const float *src, void *dst, int64_t n) {
    mi_block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / MI_QK5_1; i++, src += MI_QK5_1) {
        float lo, hi;
        minmax(src, MI_QK5_1, &lo, &hi);
        const float d = (hi - lo) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        b[i].d = mi_f32_to_f16(d);
        b[i].m = mi_f32_to_f16(lo);
        for (int j = 0; j < MI_QK5_1 / 2; j++) {
            const int q0 = trunc_clamp((src[j] - lo) * id + 0.5f, 31);
            const int q1 = trunc_clamp((src[j + MI_QK5_1 / 2] - lo) * id + 0.5f, 31);
            b[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(b[i].qh, &qh, 4);
    }
}

/* ---------------- Q8_0 / Q8_1: x = d * q, d = amax / 127, q = roundf(x / d) ---------------- */

void mi_dequant_q8_0(const void *src, float *dst, int64_t n) {
    const mi_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / MI_QK8_0; i++, dst += MI_QK8_0) {
        const float d = mi_f16_to_f32(b[i].d);
        for (int j = 0; j < MI_QK8_0; j++) dst[j] = d * (float)b[i].qs[j];
    }
}

static float absmax(const float *x, int k) {
    float amax = 0.0f;
    for (int j = 0; j < k; j++) amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

void mi_quant_q8_0(const float *src, void *dst, int64_t n) {
    mi_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / MI_QK8_0; i++, src += MI_QK8_0) {
        const float d = absmax(src, MI_QK8_0) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = mi_f32_to_f16(d);
        for (int j = 0; j < MI_QK8_0; j++) b[i].qs[j] = round_q8(src[j] * id);
    }
}

/* Q8_1 dequantizes like Q8_0; s is only used by the dot product. */
void mi_dequant_q8_1(const void *src, float *dst, int64_t n) {
    const mi_block_q8_1 *b = src;
    for (int64_t i = 0; i < n / MI_QK8_1; i++, dst += MI_QK8_1) {
        const float d = mi_f16_to_f32(b[i].d);
        for (int j = 0; j < MI_QK8_1; j++) dst[j] = d * (float)b[i].qs[j];
    }
}

/* s = fp16(d * sum(qs)) with d the f32 scale before its fp16 rounding (ggml). */
void mi_quant_q8_1(const float *src, void *dst, int64_t n) {
    mi_block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / MI_QK8_1; i++, src += MI_QK8_1) {
        const float d = absmax(src, MI_QK8_1) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        b[i].d = mi_f32_to_f16(d);
        for (int j = 0; j < MI_QK8_1; j++) {
            b[i].qs[j] = round_q8(src[j] * id);
            sum += b[i].qs[j];
        }
        b[i].s = mi_f32_to_f16((float)sum * d);
    }
}

/* Scalar reference dot products: one weight row x one activation row in the
 * weight type's vec_dot_type. The arithmetic is the contract the SIMD and CUDA
 * kernels mirror (docs/QUANT.md): per block an exact int32 sum of q_w * q_a,
 * then one f32 scaling per block, accumulated in f32 in block order. */
#include "common/quant/quant_impl.h"

/* w [n] . a [n] -> s, f32 accumulation in index order */
void mi_dot_f32_ref(int64_t n, float *s, const void *w, const void *a) {
    const float *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

void mi_dot_f16_ref(int64_t n, float *s, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += mi_f16_to_f32(x[i]) * y[i];
    *s = sum;
}

void mi_dot_bf16_ref(int64_t n, float *s, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += mi_bf16_to_f32(x[i]) * y[i];
    *s = sum;
}

/* Q4_0 x Q8_0: sum += (dw*da) * sum_j (q_j - 8) * a_j */
void mi_dot_q4_0_ref(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q4_0 *x = w;
    const mi_block_q8_0 *y = a;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / MI_QK4_0; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j];
            isum += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        sum += (mi_f16_to_f32(x[i].d) * mi_f16_to_f32(y[i].d)) * (float)isum;
    }
    *s = sum;
}

/* Q4_1 x Q8_1: sum += (dw*da) * sum_j q_j * a_j + mw * sa   (sa = da * sum_j a_j) */
void mi_dot_q4_1_ref(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q4_1 *x = w;
    const mi_block_q8_1 *y = a;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / MI_QK4_1; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (x[i].qs[j] & 0xF) * y[i].qs[j];
            isum += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        sum += (mi_f16_to_f32(x[i].d) * mi_f16_to_f32(y[i].d)) * (float)isum
             + mi_f16_to_f32(x[i].m) * mi_f16_to_f32(y[i].s);
    }
    *s = sum;
}

static inline uint32_t qh32(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) | ((uint32_t)qh[3] << 24);
}

/* Q5_0 x Q8_0: as Q4_0 with 5-bit q and offset 16 */
void mi_dot_q5_0_ref(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q5_0 *x = w;
    const mi_block_q8_0 *y = a;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / MI_QK5_0; i++) {
        const uint32_t qh = qh32(x[i].qh);
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = (x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
            const int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            isum += (q0 - 16) * y[i].qs[j] + (q1 - 16) * y[i].qs[j + 16];
        }
        sum += (mi_f16_to_f32(x[i].d) * mi_f16_to_f32(y[i].d)) * (float)isum;
    }
    *s = sum;
}

/* Q5_1 x Q8_1: as Q4_1 with 5-bit q */
void mi_dot_q5_1_ref(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q5_1 *x = w;
    const mi_block_q8_1 *y = a;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / MI_QK5_1; i++) {
        const uint32_t qh = qh32(x[i].qh);
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = (x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
            const int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            isum += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
        }
        sum += (mi_f16_to_f32(x[i].d) * mi_f16_to_f32(y[i].d)) * (float)isum
             + mi_f16_to_f32(x[i].m) * mi_f16_to_f32(y[i].s);
    }
    *s = sum;
}

/* Q8_0 x Q8_0 */
void mi_dot_q8_0_ref(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q8_0 *x = w;
    const mi_block_q8_0 *y = a;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / MI_QK8_0; i++) {
        int32_t isum = 0;
        for (int j = 0; j < MI_QK8_0; j++) isum += x[i].qs[j] * y[i].qs[j];
        sum += (mi_f16_to_f32(x[i].d) * mi_f16_to_f32(y[i].d)) * (float)isum;
    }
    *s = sum;
}

/* Q4_K x Q8_K, per super-block:
 *   isum = sum_s sc_s * sum_{l in s} q_l * a_l        (8 sub-blocks of 32, exact int32)
 *   msum = sum_s m_s * (bsums[2s] + bsums[2s+1])     (exact int32)
 *   sum += (dw * da) * isum - (dminw * da) * msum */
void mi_dot_q4_k_ref(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q4_k *x = w;
    const mi_block_q8_k *y = a;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        int32_t isum = 0, msum = 0;
        for (int sb = 0; sb < 8; sb++) {
            uint8_t sc, m;
            mi_k4_scale_min(x[i].scales, sb, &sc, &m);
            const uint8_t *q = x[i].qs + 32 * (sb / 2);
            const int8_t *q8 = y[i].qs + 32 * sb;
            const int shift = 4 * (sb & 1);
            int32_t ss = 0;
            for (int l = 0; l < 32; l++) ss += ((q[l] >> shift) & 0xF) * q8[l];
            isum += sc * ss;
            msum += m * (y[i].bsums[2 * sb] + y[i].bsums[2 * sb + 1]);
        }
        const float d = mi_f16_to_f32(x[i].d) * y[i].d, dmin = mi_f16_to_f32(x[i].dmin) * y[i].d;
        sum += d * (float)isum - dmin * (float)msum;
    }
    *s = sum;
}

/* Q5_K x Q8_K: as Q4_K with the fifth bit of sub-block sb's element l in bit sb of qh[l] */
void mi_dot_q5_k_ref(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q5_k *x = w;
    const mi_block_q8_k *y = a;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        int32_t isum = 0, msum = 0;
        for (int sb = 0; sb < 8; sb++) {
            uint8_t sc, m;
            mi_k4_scale_min(x[i].scales, sb, &sc, &m);
            const uint8_t *q = x[i].qs + 32 * (sb / 2);
            const int8_t *q8 = y[i].qs + 32 * sb;
            const int shift = 4 * (sb & 1);
            int32_t ss = 0;
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> shift) & 0xF) | (((x[i].qh[l] >> sb) & 1) << 4);
                ss += v * q8[l];
            }
            isum += sc * ss;
            msum += m * (y[i].bsums[2 * sb] + y[i].bsums[2 * sb + 1]);
        }
        const float d = mi_f16_to_f32(x[i].d) * y[i].d, dmin = mi_f16_to_f32(x[i].dmin) * y[i].d;
        sum += d * (float)isum - dmin * (float)msum;
    }
    *s = sum;
}

/* Q6_K x Q8_K, per super-block: isum = sum_s sc_s * sum_{l in s} (q_l - 32) * a_l
 * over 16 sub-blocks of 16; sum += (dw * da) * isum. Element order: mi_q6_unpack. */
void mi_dot_q6_k_ref(int64_t n, float *s, const void *w, const void *a) {
    const mi_block_q6_k *x = w;
    const mi_block_q8_k *y = a;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        int8_t q[MI_QK_K];
        mi_q6_unpack(&x[i], q);
        int32_t isum = 0;
        for (int sb = 0; sb < 16; sb++) {
            int32_t ss = 0;
            for (int j = 0; j < 16; j++) ss += q[16 * sb + j] * y[i].qs[16 * sb + j];
            isum += x[i].scales[sb] * ss;
        }
        sum += (mi_f16_to_f32(x[i].d) * y[i].d) * (float)isum;
    }
    *s = sum;
}

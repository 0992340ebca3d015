/* Scalar reference for the 256-element super-block formats: Q4_K, Q5_K, Q6_K
 * (weights) and Q8_K (activations). Dequantization is ggml's arithmetic bit for
 * bit ((d*sc)*q - dmin*m, f32). The weight quantizers are our own
 * error-minimising search: fit each sub-block by least squares over a sweep of
 * candidate scales, quantize the sub-block scales, then locally re-search the
 * quantized scales and refit the super-block scales (see docs/QUANT.md). */
#include <math.h>
#include <string.h>
#include "common/quant/quant_impl.h"

/* nearest integer of v clamped to [lo, hi]; half to even; nan -> lo */
static inline int near_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)nearbyintf(v);
}

/* ================= dequantize ================= */

void mi_dequant_q4_k(const void *src, float *dst, int64_t n) {
    const mi_block_q4_k *b = src;
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        const float d = mi_f16_to_f32(b[i].d), dmin = mi_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        /* 4 chunks of 64: 32 low nibbles (sub-block 2c) then 32 high (2c+1) */
        for (int c = 0; c < 4; c++, q += 32) {
            for (int h = 0; h < 2; h++) {
                uint8_t sc, m;
                mi_k4_scale_min(b[i].scales, 2 * c + h, &sc, &m);
                const float dl = d * (float)sc, ml = dmin * (float)m;
                for (int l = 0; l < 32; l++) *dst++ = dl * (float)((q[l] >> (4 * h)) & 0xF) - ml;
            }
        }
    }
}

void mi_dequant_q5_k(const void *src, float *dst, int64_t n) {
    const mi_block_q5_k *b = src;
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        const float d = mi_f16_to_f32(b[i].d), dmin = mi_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        /* as Q4_K; the fifth bit of element l of sub-block s is bit s of qh[l] */
        for (int c = 0; c < 4; c++, q += 32) {
            for (int h = 0; h < 2; h++) {
                const int s = 2 * c + h;
                uint8_t sc, m;
                mi_k4_scale_min(b[i].scales, s, &sc, &m);
                const float dl = d * (float)sc, ml = dmin * (float)m;
                for (int l = 0; l < 32; l++) {
                    const int v = ((q[l] >> (4 * h)) & 0xF) | (((b[i].qh[l] >> s) & 1) << 4);
                    *dst++ = dl * (float)v - ml;
                }
            }
        }
    }
}

void mi_dequant_q6_k(const void *src, float *dst, int64_t n) {
    const mi_block_q6_k *b = src;
    for (int64_t i = 0; i < n / MI_QK_K; i++) {
        const float d = mi_f16_to_f32(b[i].d);
        int8_t q[MI_QK_K];
        mi_q6_unpack(&b[i], q);
        for (int e = 0; e < MI_QK_K; e++) *dst++ = d * (float)b[i].scales[e / 16] * (float)q[e];
    }
}

void mi_dequant_q8_k(const void *src, float *dst, int64_t n) {
    const mi_block_q8_k *b = src;
    for (int64_t i = 0; i < n / MI_QK_K; i++)
        for (int j = 0; j < MI_QK_K; j++) *dst++ = b[i].d * (float)b[i].qs[j];
}

/* ================= Q8_K activations ================= */

/* d = amax/127 as 1/(127/amax); q = nearest-even(x * 127/amax); bsums = sums
 * of 16. Unlike ggml's q8_K (which scales by the signed extreme) d >= 0 always;
 * it is an in-memory format only, so this is our own convention. */
void mi_quant_q8_k(const float *src, void *dst, int64_t n) {
    mi_block_q8_k *b = dst;
    for (int64_t i = 0; i < n / MI_QK_K; i++, src += MI_QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < MI_QK_K; j++) amax = fmaxf(amax, fabsf(src[j]));
        const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
        b[i].d = iscale != 0.0f ? 1.0f / iscale : 0.0f;
        for (int j = 0; j < MI_QK_K; j++) {
            /* clamp first (also maps nan to 127 like the SIMD min/max pair) */
            const float v = fmaxf(-127.0f, fminf(127.0f, src[j] * iscale));
            b[i].qs[j] = (int8_t)nearbyintf(v);
        }
        for (int g = 0; g < MI_QK_K / 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += b[i].qs[16 * g + j];
            b[i].bsums[g] = (int16_t)s;
        }
    }
}

/* ================= Q4_K / Q5_K quantizer ================= */

#define NSTEP 12 /* candidate scales per sub-block: 2*NSTEP+1 around (hi-lo)/nmax */

/* Least-squares fit of x ~ a*q - m (a >= 0, m >= 0) to one sub-block of k
 * values over a sweep of candidate grids; returns the fitted a and m. */
static void fit_asym(const float *x, int k, int nmax, float *a_out, float *m_out) {
    float lo = 0.0f, hi = -INFINITY;
    for (int j = 0; j < k; j++) {
        lo = fminf(lo, x[j]); /* offset only downward: m >= 0 in the format */
        hi = fmaxf(hi, x[j]);
    }
    if (!(hi > lo)) { /* constant (non-positive) block, or nan */
        *a_out = 0.0f;
        *m_out = lo == lo ? -lo : 0.0f;
        return;
    }
    float best_a = (hi - lo) / (float)nmax, best_m = -lo;
    double best_err = INFINITY, sx = 0, sxx = 0;
    for (int j = 0; j < k; j++) {
        sx += x[j];
        sxx += (double)x[j] * x[j];
    }
    for (int s = -NSTEP; s <= NSTEP; s++) {
        const float iscale = ((float)nmax + 0.08f * (float)s) / (hi - lo);
        double sq = 0, sqq = 0, sqx = 0;
        for (int j = 0; j < k; j++) {
            const int q = near_clamp((x[j] - lo) * iscale, 0, nmax);
            sq += q;
            sqq += (double)q * q;
            sqx += (double)q * x[j];
        }
        const double det = k * sqq - sq * sq;
        if (det <= 0) continue;
        double a = (k * sqx - sq * sx) / det, b = (sqq * sx - sq * sqx) / det;
        if (b > 0) { /* the format cannot shift upward: refit with b = 0 */
            b = 0;
            a = sqx / sqq;
        }
        if (a < 0) continue;
        /* sum (a q + b - x)^2 expanded over the sums above */
        const double err = a * a * sqq + k * b * b + sxx + 2 * a * b * sq - 2 * a * sqx - 2 * b * sx;
        if (err < best_err) {
            best_err = err;
            best_a = (float)a;
            best_m = (float)-b;
        }
    }
    *a_out = best_a;
    *m_out = best_m;
}

/* Given the effective sub-block scale dl and offset ml (as the dequantizer
 * forms them), choose each q by rounding and return the squared error. */
static float requant_asym(const float *x, int k, int nmax, float dl, float ml, uint8_t *q) {
    float err = 0.0f;
    const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
    for (int j = 0; j < k; j++) {
        const int v = near_clamp((x[j] + ml) * idl, 0, nmax);
        const float e = dl * (float)v - ml - x[j]; /* error of the value the dequantizer forms */
        q[j] = (uint8_t)v;
        err += e * e;
    }
    return err;
}

/* For fixed super-block d/dmin, pick each sub-block's 6-bit (sc, m) near the
 * rounded ones minimising that sub-block's error. Returns total error. */
static float choose_sub_scales(const float *x, int nmax, float d, float dmin, uint8_t ls[8], uint8_t lm[8],
                               uint8_t q[256]) {
    float total = 0.0f;
    for (int s = 0; s < 8; s++) {
        const int ls0 = ls[s], lm0 = lm[s];
        float best = INFINITY;
        uint8_t qb[32];
        for (int a = ls0 - 1; a <= ls0 + 1; a++) {
            for (int m = lm0 - 1; m <= lm0 + 1; m++) {
                if (a < 0 || a > 63 || m < 0 || m > 63) continue;
                const float e = requant_asym(x + 32 * s, 32, nmax, d * (float)a, dmin * (float)m, qb);
                if (e < best) {
                    best = e;
                    ls[s] = (uint8_t)a;
                    lm[s] = (uint8_t)m;
                    memcpy(q + 32 * s, qb, 32);
                }
            }
        }
        /* non-finite or huge input makes every error inf or nan, so none was taken:
         * keep the rounded scales, and q must still be written */
        if (!(best < INFINITY))
            best = requant_asym(x + 32 * s, 32, nmax, d * (float)ls0, dmin * (float)lm0, q + 32 * s);
        total += best;
    }
    return total;
}

static void pack_k4_scales(uint8_t out[12], const uint8_t ls[8], const uint8_t lm[8]) {
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)((ls[j] & 63) | ((ls[j + 4] >> 4) << 6));
        out[j + 4] = (uint8_t)((lm[j] & 63) | ((lm[j + 4] >> 4) << 6));
        out[j + 8] = (uint8_t)((ls[j + 4] & 0xF) | ((lm[j + 4] & 0xF) << 4));
    }
}

/* One super-block of Q4_K (nmax 15) or Q5_K (nmax 31): scales, q values 0..nmax. */
static void quant_k_asym_block(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out, uint8_t scales[12],
                               uint8_t q[256]) {
    float a[8], m[8], amax = 0.0f, mmax = 0.0f;
    for (int s = 0; s < 8; s++) {
        fit_asym(x + 32 * s, 32, nmax, &a[s], &m[s]);
        amax = fmaxf(amax, a[s]);
        mmax = fmaxf(mmax, m[s]);
    }
    uint8_t ls[8], lm[8];
    uint16_t dh = mi_f32_to_f16(amax / 63.0f), mh = mi_f32_to_f16(mmax / 63.0f);
    float d = mi_f16_to_f32(dh), dmin = mi_f16_to_f32(mh);
    for (int s = 0; s < 8; s++) {
        ls[s] = (uint8_t)near_clamp(d > 0 ? a[s] / d : 0.0f, 0, 63);
        lm[s] = (uint8_t)near_clamp(dmin > 0 ? m[s] / dmin : 0.0f, 0, 63);
    }
    float err = choose_sub_scales(x, nmax, d, dmin, ls, lm, q);

    /* refit d, dmin by least squares on x ~ d*(ls*q) - dmin*lm with q, ls, lm fixed */
    for (int iter = 0; iter < 2; iter++) {
        double s11 = 0, s12 = 0, s22 = 0, b1 = 0, b2 = 0;
        for (int e = 0; e < 256; e++) {
            const double u = (double)ls[e / 32] * q[e], v = -(double)lm[e / 32];
            s11 += u * u; s12 += u * v; s22 += v * v;
            b1 += u * x[e]; b2 += v * x[e];
        }
        const double det = s11 * s22 - s12 * s12;
        if (!(det > 0)) break;
        const double nd = (b1 * s22 - b2 * s12) / det, nm = (s11 * b2 - s12 * b1) / det;
        if (!(nd >= 0) || !(nm >= 0)) break;
        uint8_t ls2[8], lm2[8], q2[256];
        memcpy(ls2, ls, 8);
        memcpy(lm2, lm, 8);
        const uint16_t dh2 = mi_f32_to_f16((float)nd), mh2 = mi_f32_to_f16((float)nm);
        const float e2 = choose_sub_scales(x, nmax, mi_f16_to_f32(dh2), mi_f16_to_f32(mh2), ls2, lm2, q2);
        if (!(e2 < err)) break;
        err = e2;
        dh = dh2; mh = mh2;
        memcpy(ls, ls2, 8);
        memcpy(lm, lm2, 8);
        memcpy(q, q2, 256);
    }
    *d_out = dh;
    *dmin_out = mh;
    pack_k4_scales(scales, ls, lm);
}

void mi_quant_q4_k(const float *src, void *dst, int64_t n) {
    mi_block_q4_k *b = dst;
    for (int64_t i = 0; i < n / MI_QK_K; i++, src += MI_QK_K) {
        uint8_t q[256];
        quant_k_asym_block(src, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) b[i].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
}

void mi_quant_q5_k(const float *src, void *dst, int64_t n) {
    mi_block_q5_k *b = dst;
    for (int64_t i = 0; i < n / MI_QK_K; i++, src += MI_QK_K) {
        uint8_t q[256];
        quant_k_asym_block(src, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
                b[i].qs[32 * c + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                b[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
        }
    }
}

/* ================= Q6_K quantizer ================= */

/* Least-squares symmetric fit x ~ a*q, q in [-32, 31], over candidate grids
 * that put the signed extreme on the -32 side (one more level there). */
static float fit_sym(const float *x, int k) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < k; j++)
        if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
    if (!(amax > 0.0f)) return 0.0f;
    float best_a = max / -32.0f;
    double best_gain = -1;
    for (int s = -NSTEP; s <= NSTEP; s++) {
        const float iscale = -(32.0f + 0.08f * (float)s) / max;
        double sqx = 0, sqq = 0;
        for (int j = 0; j < k; j++) {
            const int q = near_clamp(x[j] * iscale, -32, 31);
            sqx += (double)q * x[j];
            sqq += (double)q * q;
        }
        /* error = sum x^2 - sqx^2/sqq: maximise the subtracted gain */
        if (sqq > 0 && sqx * sqx / sqq > best_gain) {
            best_gain = sqx * sqx / sqq;
            best_a = (float)(sqx / sqq);
        }
    }
    return best_a;
}

static float requant_sym(const float *x, int k, float dl, int8_t *q) {
    float err = 0.0f;
    const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
    for (int j = 0; j < k; j++) {
        const int v = near_clamp(x[j] * idl, -32, 31);
        const float e = dl * (float)v - x[j];
        q[j] = (int8_t)v;
        err += e * e;
    }
    return err;
}

static float choose_sym_scales(const float *x, float d, int8_t ls[16], int8_t q[256]) {
    float total = 0.0f;
    for (int s = 0; s < 16; s++) {
        const int l0 = ls[s];
        float best = INFINITY;
        int8_t qb[16];
        for (int a = l0 - 1; a <= l0 + 1; a++) {
            if (a < -128 || a > 127) continue;
            const float e = requant_sym(x + 16 * s, 16, d * (float)a, qb);
            if (e < best) {
                best = e;
                ls[s] = (int8_t)a;
                memcpy(q + 16 * s, qb, 16);
            }
        }
        /* as in choose_sub_scales: with every error inf or nan, keep l0 and still write q */
        if (!(best < INFINITY)) best = requant_sym(x + 16 * s, 16, d * (float)l0, q + 16 * s);
        total += best;
    }
    return total;
}

void mi_quant_q6_k(const float *src, void *dst, int64_t n) {
    mi_block_q6_k *b = dst;
    for (int64_t i = 0; i < n / MI_QK_K; i++, src += MI_QK_K) {
        float a[16], amax = 0.0f, max = 0.0f;
        for (int s = 0; s < 16; s++) {
            a[s] = fit_sym(src + 16 * s, 16);
            if (fabsf(a[s]) > amax) { amax = fabsf(a[s]); max = a[s]; }
        }
        /* int8 scales: the signed extreme goes to -128 */
        uint16_t dh = amax > 0.0f ? mi_f32_to_f16(max / -128.0f) : 0; /* +0, not -0, for a zero block */
        float d = mi_f16_to_f32(dh);
        int8_t ls[16], q[256];
        for (int s = 0; s < 16; s++) ls[s] = (int8_t)near_clamp(d != 0.0f ? a[s] / d : 0.0f, -128, 127);
        float err = choose_sym_scales(src, d, ls, q);
        for (int iter = 0; iter < 2; iter++) { /* refit d on x ~ d*(ls*q) */
            double num = 0, den = 0;
            for (int e = 0; e < 256; e++) {
                const double u = (double)ls[e / 16] * q[e];
                num += u * src[e];
                den += u * u;
            }
            if (!(den > 0)) break;
            const uint16_t dh2 = mi_f32_to_f16((float)(num / den));
            int8_t ls2[16], q2[256];
            memcpy(ls2, ls, 16);
            const float e2 = choose_sym_scales(src, mi_f16_to_f32(dh2), ls2, q2);
            if (!(e2 < err)) break;
            err = e2;
            dh = dh2;
            memcpy(ls, ls2, 16);
            memcpy(q, q2, 256);
        }
        b[i].d = dh;
        memcpy(b[i].scales, ls, 16);
        memset(b[i].qh, 0, sizeof b[i].qh);
        memset(b[i].ql, 0, sizeof b[i].ql);
        for (int h = 0; h < 2; h++) /* inverse of mi_q6_unpack */
            for (int g = 0; g < 4; g++)
                for (int l = 0; l < 32; l++) {
                    const int v = q[128 * h + 32 * g + l] + 32;
                    b[i].ql[64 * h + 32 * (g & 1) + l] |= (uint8_t)((v & 0xF) << (4 * (g >> 1)));
                    b[i].qh[32 * h + l] |= (uint8_t)((v >> 4) << (2 * g));
                }
    }
}

/* Canonical arithmetic shared by the CPU backend and the CUDA kernels, so that
 * elementwise ops and RMS norm are bit-identical across backends (docs/NUMERICS.md).
 * Rules that make this hold: no FMA contraction anywhere in these paths (host
 * -ffp-contract=off, nvcc --fmad=false), IEEE division and sqrt (nvcc defaults
 * -prec-div=true -prec-sqrt=true), no libm transcendental (glibc and CUDA differ):
 * exp is evaluated here with plain + and * in a fixed order. */
#ifndef MI_CANON_H
#define MI_CANON_H
#include <stdint.h>
#include <math.h>
#include "mi_fp16.h"

/* Lanes of the canonical RMS reduction: lane j sums x[i]^2 for i = j, j+32, ...
 * in increasing i; lanes are then combined by the tree
 *   for off in 16, 8, 4, 2, 1: p[j] = p[j] + p[j + off]  (j < off)
 * which is exactly what a warp's xor-butterfly produces (IEEE + is commutative). */
#define MI_CANON_LANES 32

/* exp(x) to ~2 ulp with a fixed sequence of IEEE operations.
 * x = n*ln2 + r, |r| <= ln2/2 (Cody-Waite split of ln2), degree-6 polynomial for e^r,
 * then scale by 2^n through the exponent bits (two steps to reach subnormals). */
MI_HD float mi_canon_expf(float x) {
    if (x != x) return x;
    if (x > 88.72283f) return mi_bits_f32(0x7f800000u);
    if (x < -103.97208f) return 0.0f;
    const float log2e = 1.44269504f;
    const float ln2_hi = 0.693145752f;    /* exact in 16 bits: n*ln2_hi exact for |n| < 2^8 */
    const float ln2_lo = 1.42860677e-06f;
    float n = rintf(x * log2e);
    float r = x - n * ln2_hi;
    r = r - n * ln2_lo;
    /* Taylor/minimax-close coefficients 1/k! ; Horner, fixed order */
    float p = 1.3888889e-03f;              /* 1/720 */
    p = p * r + 8.3333333e-03f;            /* 1/120 */
    p = p * r + 4.1666667e-02f;            /* 1/24 */
    p = p * r + 1.6666667e-01f;            /* 1/6 */
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t ni = (int32_t)n;
    /* split 2^n into two representable factors so n down to -150 works */
    int32_t n1 = ni / 2, n2 = ni - n1;
    float s1 = mi_bits_f32((uint32_t)(n1 + 127) << 23);
    float s2 = mi_bits_f32((uint32_t)(n2 + 127) << 23);
    return (p * s1) * s2;
}

/* silu(x) = x / (1 + e^-x) */
MI_HD float mi_canon_silu(float x) { return x / (1.0f + mi_canon_expf(-x)); }

/* y = silu(g) * u */
MI_HD float mi_canon_swiglu(float g, float u) { return mi_canon_silu(g) * u; }

/* Scale of RMS norm from the reduced sum of squares of a row of n elements. */
MI_HD float mi_canon_rms_scale(float sumsq, int64_t n, float eps) {
    float mean = sumsq / (float)n;
    return 1.0f / sqrtf(mean + eps);
}

/* Host reference of the canonical sum of squares (the CUDA kernel mirrors it per warp). */
static inline float mi_canon_sumsq_host(const float *x, int64_t n) {
    float p[MI_CANON_LANES];
    for (int j = 0; j < MI_CANON_LANES; j++) {
        float acc = 0.0f;
        for (int64_t i = j; i < n; i += MI_CANON_LANES) {
            float sq = x[i] * x[i];
            acc = acc + sq;
        }
        p[j] = acc;
    }
    for (int off = MI_CANON_LANES / 2; off >= 1; off /= 2)
        for (int j = 0; j < off; j++) p[j] = p[j] + p[j + off];
    return p[0];
}

/* RoPE angle for rotation pair i (0 <= i < n_rot/2) at position pos, as cos/sin.
 * inv_freq = freq_base^(-2i/n_rot) is evaluated in double and rounded once to
 * float; theta = (float)pos * inv_freq is one IEEE float multiply; cos/sin are
 * evaluated in double on theta and rounded to float. Both libms are within ~1 ulp
 * in double, so the float results agree except when a double lands within ~2^-28
 * relative of a float rounding boundary (docs/NUMERICS.md: "near-identical" tier).
 * The rotation itself is y0 = x0*c - x1*s, y1 = x0*s + x1*c, no FMA. */
MI_HD void mi_canon_rope_cs(int32_t pos, int i, int n_rot, float freq_base, float *c, float *s) {
    float inv_freq = (float)pow((double)freq_base, -2.0 * (double)i / (double)n_rot);
    float theta = (float)pos * inv_freq;
    *c = (float)cos((double)theta);
    *s = (float)sin((double)theta);
}

#endif

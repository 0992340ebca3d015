/* AVX-512 versions of the canonical SiLU / SwiGLU (mi_canon.h): the same IEEE operations
 * in the same order as mi_canon_expf lane by lane (separate mul and add, no FMA,
 * round-half-even rint, truncating n/2), so results are bit-identical to the scalar
 * reference and hence to the CUDA kernels (docs/NUMERICS.md). */
#include "cpu_backend.h"
#include <immintrin.h>
#include <math.h>

static inline __m512 canon_exp(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504f), ln2_hi = _mm512_set1_ps(0.693145752f),
                 ln2_lo = _mm512_set1_ps(1.42860677e-06f);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, ln2_hi));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, ln2_lo));
    __m512 p = _mm512_set1_ps(1.3888889e-03f);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3333333e-03f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1666667e-02f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666667e-01f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0.5f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    /* out-of-range lanes may hold garbage n: clamp before building exponents (result replaced below) */
    __m512i ni = _mm512_cvttps_epi32(_mm512_max_ps(_mm512_min_ps(n, _mm512_set1_ps(200.0f)), _mm512_set1_ps(-200.0f)));
    __m512i n1 = _mm512_srai_epi32(_mm512_add_epi32(ni, _mm512_srli_epi32(ni, 31)), 1);   /* C's ni / 2 */
    __m512i n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
    __mmask16 hi = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283f), _CMP_GT_OQ);
    __mmask16 lo = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.97208f), _CMP_LT_OQ);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    y = _mm512_mask_mov_ps(y, hi, _mm512_castsi512_ps(_mm512_set1_epi32(0x7f800000)));
    y = _mm512_mask_mov_ps(y, lo, _mm512_setzero_ps());
    return _mm512_mask_mov_ps(y, nan, x);
}

static inline __m512 canon_silu(__m512 x) {
    __m512 e = canon_exp(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

void cpu_silu_avx512(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, canon_silu(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

void cpu_swiglu_avx512(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 s = canon_silu(_mm512_maskz_loadu_ps(m, g + i));
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + i)));
    }
}

/* ---- attention, prefill path (tolerance tier: FMA and lane-order sums are fine here) ----
 * One (head, query) item: scores for 16 keys at a time from K stored transposed
 * (KT[d][j], row length ld), softmax with the canonical exp, then V rows accumulated in
 * two interleaved register sets (even / odd keys) to keep the FMA chains short. */
static inline __attribute__((always_inline)) void attn_pv(const int HD, const float *sc, const float *V,
                                                          int64_t v_stride, int64_t n, float inv, float *out) {
    __m512 a0[8], a1[8];
#pragma GCC unroll 8
    for (int k = 0; k < HD / 16; k++) a0[k] = a1[k] = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) {
        __m512 p0 = _mm512_set1_ps(sc[j]), p1 = _mm512_set1_ps(sc[j + 1]);
        const float *v0 = V + (size_t)j * (size_t)v_stride, *v1 = v0 + v_stride;
#pragma GCC unroll 8
        for (int k = 0; k < HD / 16; k++) {
            a0[k] = _mm512_fmadd_ps(p0, _mm512_loadu_ps(v0 + 16 * k), a0[k]);
            a1[k] = _mm512_fmadd_ps(p1, _mm512_loadu_ps(v1 + 16 * k), a1[k]);
        }
    }
    if (j < n) {
        __m512 p0 = _mm512_set1_ps(sc[j]);
        const float *v0 = V + (size_t)j * (size_t)v_stride;
#pragma GCC unroll 8
        for (int k = 0; k < HD / 16; k++) a0[k] = _mm512_fmadd_ps(p0, _mm512_loadu_ps(v0 + 16 * k), a0[k]);
    }
#pragma GCC unroll 8
    for (int k = 0; k < HD / 16; k++)
        _mm512_storeu_ps(out + 16 * k, _mm512_mul_ps(_mm512_add_ps(a0[k], a1[k]), _mm512_set1_ps(inv)));
}

bool cpu_attn_item_avx512(const float *q, const float *KT, int64_t ld, const float *V, int64_t v_stride, int64_t n,
                          int64_t hd, float scale, float *sc, float *out) {
    if (hd != 64 && hd != 128) return false;
    const __m512 ninf = _mm512_set1_ps(-INFINITY), vs = _mm512_set1_ps(scale);
    __m512 vmax = ninf;
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        __mmask16 m = n - j0 >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j0)) - 1);
        __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
        const float *kt = KT + j0;
        for (int64_t d = 0; d < hd; d += 2) {
            c0 = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_loadu_ps(kt + (size_t)d * (size_t)ld), c0);
            c1 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 1]), _mm512_loadu_ps(kt + (size_t)(d + 1) * (size_t)ld), c1);
        }
        __m512 s = _mm512_mask_mov_ps(ninf, m, _mm512_mul_ps(_mm512_add_ps(c0, c1), vs));
        _mm512_storeu_ps(sc + j0, s);
        vmax = _mm512_max_ps(vmax, s);
    }
    __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vmax)), vsum = _mm512_setzero_ps();
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        __m512 p = canon_exp(_mm512_sub_ps(_mm512_loadu_ps(sc + j0), mx));   /* -inf lanes -> 0 */
        _mm512_storeu_ps(sc + j0, p);
        vsum = _mm512_add_ps(vsum, p);
    }
    float inv = 1.0f / _mm512_reduce_add_ps(vsum);
    if (hd == 64)
        attn_pv(64, sc, V, v_stride, n, inv, out);
    else
        attn_pv(128, sc, V, v_stride, n, inv, out);
    return true;
}

/* ---- attention, decode path on an F16 cache: no conversion pass over the whole context ----
 * Scores one key at a time (F16C conversion in the loads), softmax with the canonical exp,
 * V rows accumulated the same way. hd must be a multiple of 16 and at most 256. */
/* key j's row: j itself, or through a block table (rows table[j / B] * B + j % B); the keys are
 * taken a run of contiguous rows at a time, in increasing j either way */
static inline int64_t run_of(const int32_t *table, int64_t B, int64_t n, int64_t j0, int64_t *row0) {
    if (!table) {
        *row0 = j0;
        return n - j0;
    }
    *row0 = (int64_t)table[j0 / B] * B + j0 % B;
    const int64_t end = (j0 / B + 1) * B;
    return (end < n ? end : n) - j0;
}

bool cpu_attn_item_f16_paged_avx512(const float *q, const uint16_t *K, const uint16_t *V, int64_t stride, int64_t n,
                                    int64_t hd, float scale, float *sc, float *out, const int32_t *table, int64_t B) {
    if (hd % 16 != 0 || hd > 256) return false;
    const int nv = (int)(hd / 16);
    __m512 qv[16];
    for (int k = 0; k < nv; k++) qv[k] = _mm512_loadu_ps(q + 16 * k);
    float mx = -INFINITY;
    for (int64_t j0 = 0, r0, m; j0 < n; j0 += m) {
        m = run_of(table, B, n, j0, &r0);
        for (int64_t jj = 0; jj < m; jj++) {
            const uint16_t *kr = K + (size_t)(r0 + jj) * (size_t)stride;
            __m512 a = _mm512_setzero_ps();
            for (int k = 0; k < nv; k++)
                a = _mm512_fmadd_ps(qv[k], _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + 16 * k))), a);
            float s = _mm512_reduce_add_ps(a) * scale;
            sc[j0 + jj] = s;
            if (s > mx) mx = s;
        }
    }
    const __m512 vm = _mm512_set1_ps(mx);
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        __mmask16 m = n - j0 >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j0)) - 1);
        __m512 p = canon_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sc + j0), vm));
        p = _mm512_maskz_mov_ps(m, p);
        _mm512_mask_storeu_ps(sc + j0, m, p);
        vsum = _mm512_add_ps(vsum, p);
    }
    float inv = 1.0f / _mm512_reduce_add_ps(vsum);
    __m512 acc[16];
    for (int k = 0; k < nv; k++) acc[k] = _mm512_setzero_ps();
    for (int64_t j0 = 0, r0, m; j0 < n; j0 += m) {
        m = run_of(table, B, n, j0, &r0);
        for (int64_t jj = 0; jj < m; jj++) {
            const uint16_t *vr = V + (size_t)(r0 + jj) * (size_t)stride;
            __m512 p = _mm512_set1_ps(sc[j0 + jj]);
            for (int k = 0; k < nv; k++)
                acc[k] = _mm512_fmadd_ps(p, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 16 * k))), acc[k]);
        }
    }
    for (int k = 0; k < nv; k++) _mm512_storeu_ps(out + 16 * k, _mm512_mul_ps(acc[k], _mm512_set1_ps(inv)));
    return true;
}

bool cpu_attn_item_f16_avx512(const float *q, const uint16_t *K, const uint16_t *V, int64_t stride, int64_t n,
                              int64_t hd, float scale, float *sc, float *out) {
    return cpu_attn_item_f16_paged_avx512(q, K, V, stride, n, hd, scale, sc, out, NULL, 0);
}

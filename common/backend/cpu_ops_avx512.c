/* AVX-512 versions of the canonical SiLU / SwiGLU (mi_canon.h): the same IEEE operations
 * in the same order as mi_canon_expf lane by lane (separate mul and add, no FMA,
 * round-half-even rint, truncating n/2), so results are bit-identical to the scalar
 * reference and hence to the CUDA kernels (docs/NUMERICS.md). */
#include "cpu_backend.h"
#include <immintrin.h>

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

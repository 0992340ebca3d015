/* bench_e1: the CPU side of the 7e difference study (docs/PHASE7E.md, item e1): where a
 * quantized matmul's differences come from, per weight type, K = 3584, M = 256, N = 4:
 *  reorder: NMSE scalar-dot vs AVX-512-dot (same quantized activations, other f32 summation order)
 *  actq:    NMSE scalar-dot (Q8 activations) vs double dot of dequantized W x float x
 *  wq:      NMSE double(dequant W, x) vs double(original float W, x): the weight format itself */
#include "common/quant/mi_types.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static unsigned long long s = 12345;
static float fr(void) /* xorshift64*, uniform in [-1, 1) */ { s ^= s >> 12; s ^= s << 25; s ^= s >> 27; return (float)(((s * 0x2545F4914F6CDD1DULL) >> 11) * (1.0 / 9007199254740992.0)) * 2.f - 1.f; }
int main(void) {
    mi_type ts[] = {MI_TYPE_Q4_0, MI_TYPE_Q4_1, MI_TYPE_Q5_0, MI_TYPE_Q5_1, MI_TYPE_Q8_0, MI_TYPE_Q4_K, MI_TYPE_Q5_K, MI_TYPE_Q6_K};
    const int64_t K = 3584, M = 256, N = 4;
    float *wf = malloc(K * M * 4), *x = malloc(K * N * 4), *wd = malloc(K * 4);
    for (int64_t i = 0; i < K * M; i++) wf[i] = fr() * ((i % 97) == 0 ? 4.f : 1.f);
    for (int64_t i = 0; i < K * N; i++) x[i] = fr();
    printf("| type | reorder (scalar vs AVX-512 f32 sums) | activation quantization | weight format |\n| --- | ---: | ---: | ---: |\n");
    for (int ti = 0; ti < 8; ti++) {
        mi_type t = ts[ti];
        size_t rb = mi_row_size(t, K);
        unsigned char *w = malloc(rb * M);
        for (int64_t m = 0; m < M; m++) mi_quantize_row(t, wf + m * K, w + rb * m, K);
        mi_type vt = mi_type_get(t)->vec_dot_type;
        size_t ar = mi_row_size(vt, K);
        unsigned char *aq = malloc(ar * N);
        mi_quantize_fn qa = mi_get_quantize_act(vt, MI_ISA_SCALAR);
        for (int64_t n = 0; n < N; n++) qa(x + n * K, aq + ar * n, K);
        mi_vec_dot_fn d0 = mi_get_vec_dot(t, MI_ISA_SCALAR), d1 = mi_get_vec_dot(t, MI_ISA_AVX512);
        if (!d1) d1 = mi_get_vec_dot(t, MI_ISA_AVX2);   /* a host without AVX-512 */
        if (!d1) d1 = d0;
        double e_re = 0, e_aq = 0, e_wq = 0, den = 0, den2 = 0;
        for (int64_t m = 0; m < M; m++) {
            mi_dequantize_row(t, w + rb * m, wd, K);
            for (int64_t n = 0; n < N; n++) {
                float a, b;
                d0(K, &a, w + rb * m, aq + ar * n);
                d1(K, &b, w + rb * m, aq + ar * n);
                double ref = 0, reff = 0;
                for (int64_t k = 0; k < K; k++) { ref += (double)wd[k] * x[n * K + k]; reff += (double)wf[m * K + k] * x[n * K + k]; }
                e_re += ((double)a - b) * ((double)a - b);
                e_aq += ((double)a - ref) * ((double)a - ref);
                e_wq += (ref - reff) * (ref - reff);
                den += ref * ref;
                den2 += reff * reff;
            }
        }
        printf("| %s | %.2g | %.2g | %.2g |\n", mi_type_name(t), e_re / den, e_aq / den, e_wq / den2);
        free(w); free(aq);
    }
    return 0;
}

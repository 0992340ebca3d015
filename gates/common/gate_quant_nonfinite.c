/* Every quantizer, dequantizer, activation quantizer and dot kernel on rows holding
 * NaN, +-Inf, huge (1e38, FLT_MAX) and subnormal values: the result may be any bits,
 * but it must be defined. Run from sh_misaligned.sh in the SAN build (where UBSan aborts
 * on a negative shift or an out-of-range conversion) and in the plain build. Each
 * quantizer also runs twice, once after filling the stack with 0x00 and once with 0x80
 * bytes: outputs that differ read uninitialised memory.
 *   gate_quant_nonfinite      prints failures and "N passed, N failed"; exit 1 on failure */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/quant/mi_types.h"

#define N 512   /* two K-quant super-blocks, sixteen 32-blocks */

static int g_pass, g_fail;

static void check(int ok, const char *what, const char *type, const char *pat, const char *isa) {
    if (ok) {
        g_pass++;
        return;
    }
    if (g_fail++ < 20) printf("FAIL %s: %s, row '%s'%s%s\n", what, type, pat, isa ? ", isa " : "", isa ? isa : "");
}

/* Leave a recognisable pattern where the next call's stack frame will be. */
__attribute__((noinline)) static void dirty_stack(unsigned char v) {
    volatile unsigned char buf[64 * 1024];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = v;
}

static const char *const k_pat[] = {"all nan", "all +inf", "all -inf", "+-inf alternating", "nan every 7th",
                                    "inf every 13th", "+-1e38", "+-FLT_MAX", "one 3e38 among small",
                                    "subnormals", "-nan and -0", "nan first, then finite"};
#define N_PAT (int)(sizeof k_pat / sizeof *k_pat)

static void fill(float *x, int p) {
    unsigned s = 12345u + (unsigned)p;
    for (int i = 0; i < N; i++) {
        s = s * 1103515245u + 12345u;
        const float r = (float)((int)(s >> 9 & 0xffff) - 32768) / 4096.0f;   /* [-8, 8) */
        switch (p) {
        case 0: x[i] = NAN; break;
        case 1: x[i] = INFINITY; break;
        case 2: x[i] = -INFINITY; break;
        case 3: x[i] = i & 1 ? INFINITY : -INFINITY; break;
        case 4: x[i] = i % 7 == 3 ? NAN : r; break;
        case 5: x[i] = i % 13 == 5 ? (i & 2 ? -INFINITY : INFINITY) : r; break;
        case 6: x[i] = r < 0 ? -1e38f : 1e38f; break;
        case 7: x[i] = i & 1 ? -FLT_MAX : FLT_MAX; break;
        case 8: x[i] = i % 64 == 17 ? 3e38f : r * 1e-3f; break;
        case 9: x[i] = r * 1e-41f; break;
        case 10: x[i] = i & 1 ? -NAN : -0.0f; break;
        default: x[i] = i % 32 == 0 ? NAN : r; break;
        }
    }
}

int main(void) {
    static const mi_type types[] = {MI_TYPE_F16, MI_TYPE_BF16, MI_TYPE_Q4_0, MI_TYPE_Q4_1, MI_TYPE_Q5_0,
                                    MI_TYPE_Q5_1, MI_TYPE_Q8_0, MI_TYPE_Q8_1, MI_TYPE_Q4_K, MI_TYPE_Q5_K,
                                    MI_TYPE_Q6_K, MI_TYPE_Q8_K};
    static const mi_isa isas[] = {MI_ISA_SCALAR, MI_ISA_AVX2, MI_ISA_AVX512};
    _Alignas(64) static float x[N], y[N];
    _Alignas(64) static unsigned char q1[N * 4], q2[N * 4], a1[N * 4], a2[N * 4];
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const mi_type t = types[ti];
        const mi_type_traits *tr = mi_type_get((int)t);
        const size_t rb = mi_row_size(t, N);
        for (int p = 0; p < N_PAT; p++) {
            fill(x, p);
            dirty_stack(0x00);
            mi_quantize_row(t, x, q1, N);
            dirty_stack(0x80);
            mi_quantize_row(t, x, q2, N);
            check(!memcmp(q1, q2, rb), "quantize reads uninitialised memory", tr->name, k_pat[p], NULL);
            mi_dequantize_row(t, q1, y, N);
            g_pass++;
            for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
                const mi_isa isa = isas[k];
                /* the activation side: Q8_0, Q8_1, Q8_K quantizers of this ISA */
                const mi_quantize_fn qa = mi_get_quantize_act(t, isa);
                if (qa && t != MI_TYPE_F32) {
                    dirty_stack(0x00);
                    qa(x, a1, N);
                    dirty_stack(0x80);
                    qa(x, a2, N);
                    check(!memcmp(a1, a2, rb), "activation quantizer reads uninitialised memory", tr->name,
                          k_pat[p], mi_isa_name(isa));
                }
                /* the weight side: this type's dot with its activation type */
                const mi_vec_dot_fn dot = mi_get_vec_dot(t, isa);
                const mi_quantize_fn qd = mi_get_quantize_act(tr->vec_dot_type, isa);
                if (!dot || !qd) continue;
                qd(x, a1, N);
                float s = 0.0f;
                dot(N, &s, q1, a1);
                g_pass++;
            }
        }
    }
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail != 0;
}

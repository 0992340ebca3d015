/* Type traits (one table indexed by GGUF type id), whole-row dequantize /
 * quantize, and run-time selection of the dot-product and activation-quantizer
 * kernels by ISA (cpuid, overridable with MINFER_ISA=scalar|avx2|avx512). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "common/core/mi_err.h"
#include "common/core/mi_settings.h"
#include "common/quant/quant_impl.h"

#define PLAIN(nm, sz, sup) {nm, 1, sz, false, sup, MI_TYPE_F32}
#define QUANT(nm, bs, sz, sup, vdt) {nm, bs, sz, true, sup, vdt}

static const mi_type_traits k_traits[MI_TYPE_COUNT] = {
    [MI_TYPE_F32] = PLAIN("F32", 4, true),
    [MI_TYPE_F16] = PLAIN("F16", 2, true),
    [MI_TYPE_BF16] = PLAIN("BF16", 2, true),
    [MI_TYPE_Q4_0] = QUANT("Q4_0", MI_QK4_0, sizeof(mi_block_q4_0), true, MI_TYPE_Q8_0),
    [MI_TYPE_Q4_1] = QUANT("Q4_1", MI_QK4_1, sizeof(mi_block_q4_1), true, MI_TYPE_Q8_1),
    [MI_TYPE_Q5_0] = QUANT("Q5_0", MI_QK5_0, sizeof(mi_block_q5_0), true, MI_TYPE_Q8_0),
    [MI_TYPE_Q5_1] = QUANT("Q5_1", MI_QK5_1, sizeof(mi_block_q5_1), true, MI_TYPE_Q8_1),
    [MI_TYPE_Q8_0] = QUANT("Q8_0", MI_QK8_0, sizeof(mi_block_q8_0), true, MI_TYPE_Q8_0),
    [MI_TYPE_Q8_1] = QUANT("Q8_1", MI_QK8_1, sizeof(mi_block_q8_1), true, MI_TYPE_Q8_1),
    /* Q2_K / Q3_K: known sizes (so a file's offsets can be checked) but not supported */
    [MI_TYPE_Q2_K] = QUANT("Q2_K", MI_QK_K, 84, false, MI_TYPE_Q8_K),
    [MI_TYPE_Q3_K] = QUANT("Q3_K", MI_QK_K, 110, false, MI_TYPE_Q8_K),
    [MI_TYPE_Q4_K] = QUANT("Q4_K", MI_QK_K, sizeof(mi_block_q4_k), true, MI_TYPE_Q8_K),
    [MI_TYPE_Q5_K] = QUANT("Q5_K", MI_QK_K, sizeof(mi_block_q5_k), true, MI_TYPE_Q8_K),
    [MI_TYPE_Q6_K] = QUANT("Q6_K", MI_QK_K, sizeof(mi_block_q6_k), true, MI_TYPE_Q8_K),
    [MI_TYPE_Q8_K] = QUANT("Q8_K", MI_QK_K, sizeof(mi_block_q8_k), true, MI_TYPE_Q8_K),
    [MI_TYPE_I8] = PLAIN("I8", 1, false),
    [MI_TYPE_I16] = PLAIN("I16", 2, false),
    [MI_TYPE_I32] = PLAIN("I32", 4, false),
    [MI_TYPE_I64] = PLAIN("I64", 8, false),
    [MI_TYPE_F64] = PLAIN("F64", 8, false),
};

_Static_assert(sizeof(mi_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(mi_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(mi_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(mi_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(mi_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(mi_block_q8_1) == 36, "q8_1 layout");
_Static_assert(sizeof(mi_block_q4_k) == 144, "q4_k layout");
_Static_assert(sizeof(mi_block_q5_k) == 176, "q5_k layout");
_Static_assert(sizeof(mi_block_q6_k) == 210, "q6_k layout");
_Static_assert(sizeof(mi_block_q8_k) == 292, "q8_k layout");

const mi_type_traits *mi_type_get(int type_id) {
    if (type_id < 0 || type_id >= MI_TYPE_COUNT || !k_traits[type_id].name) return NULL;
    return &k_traits[type_id];
}

const char *mi_type_name(int type_id) {
    const mi_type_traits *t = mi_type_get(type_id);
    return t ? t->name : "?";
}

int mi_type_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < MI_TYPE_COUNT; i++)
        if (k_traits[i].name && strcasecmp(k_traits[i].name, name) == 0) return i;
    return -1;
}

size_t mi_row_size(mi_type t, int64_t n) {
    const mi_type_traits *tr = mi_type_get((int)t);
    if (!tr || n < 0 || n % tr->blck_size != 0) return 0;
    return (size_t)(n / tr->blck_size) * tr->type_size;
}

size_t mi_type_align(mi_type t) {
    switch (t) {
    case MI_TYPE_F32: return _Alignof(float);
    case MI_TYPE_F16: case MI_TYPE_BF16: case MI_TYPE_I16: return _Alignof(uint16_t);
    case MI_TYPE_Q4_0: return _Alignof(mi_block_q4_0);
    case MI_TYPE_Q4_1: return _Alignof(mi_block_q4_1);
    case MI_TYPE_Q5_0: return _Alignof(mi_block_q5_0);
    case MI_TYPE_Q5_1: return _Alignof(mi_block_q5_1);
    case MI_TYPE_Q8_0: return _Alignof(mi_block_q8_0);
    case MI_TYPE_Q8_1: return _Alignof(mi_block_q8_1);
    case MI_TYPE_Q2_K: case MI_TYPE_Q3_K: return _Alignof(uint16_t);   /* ggml's blocks hold fp16 scales */
    case MI_TYPE_Q4_K: return _Alignof(mi_block_q4_k);
    case MI_TYPE_Q5_K: return _Alignof(mi_block_q5_k);
    case MI_TYPE_Q6_K: return _Alignof(mi_block_q6_k);
    case MI_TYPE_Q8_K: return _Alignof(mi_block_q8_k);
    case MI_TYPE_I32: return _Alignof(int32_t);
    case MI_TYPE_I64: return _Alignof(int64_t);
    case MI_TYPE_F64: return _Alignof(double);
    default: return 1;
    }
}

void mi_dequantize_row(mi_type t, const void *src, float *dst, int64_t n) {
    switch (t) {
    case MI_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case MI_TYPE_F16: mi_dequant_f16(src, dst, n); break;
    case MI_TYPE_BF16: mi_dequant_bf16(src, dst, n); break;
    case MI_TYPE_Q4_0: mi_dequant_q4_0(src, dst, n); break;
    case MI_TYPE_Q4_1: mi_dequant_q4_1(src, dst, n); break;
    case MI_TYPE_Q5_0: mi_dequant_q5_0(src, dst, n); break;
    case MI_TYPE_Q5_1: mi_dequant_q5_1(src, dst, n); break;
    case MI_TYPE_Q8_0: mi_dequant_q8_0(src, dst, n); break;
    case MI_TYPE_Q8_1: mi_dequant_q8_1(src, dst, n); break;
    case MI_TYPE_Q4_K: mi_dequant_q4_k(src, dst, n); break;
    case MI_TYPE_Q5_K: mi_dequant_q5_k(src, dst, n); break;
    case MI_TYPE_Q6_K: mi_dequant_q6_k(src, dst, n); break;
    case MI_TYPE_Q8_K: mi_dequant_q8_k(src, dst, n); break;
    default: MI_ASSERT(!"mi_dequantize_row: unsupported type (check traits->supported first)");
    }
}

void mi_quantize_row(mi_type t, const float *src, void *dst, int64_t n) {
    switch (t) {
    case MI_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case MI_TYPE_F16: mi_quant_f16(src, dst, n); break;
    case MI_TYPE_BF16: mi_quant_bf16(src, dst, n); break;
    case MI_TYPE_Q4_0: mi_quant_q4_0(src, dst, n); break;
    case MI_TYPE_Q4_1: mi_quant_q4_1(src, dst, n); break;
    case MI_TYPE_Q5_0: mi_quant_q5_0(src, dst, n); break;
    case MI_TYPE_Q5_1: mi_quant_q5_1(src, dst, n); break;
    case MI_TYPE_Q8_0: mi_quant_q8_0(src, dst, n); break;
    case MI_TYPE_Q8_1: mi_quant_q8_1(src, dst, n); break;
    case MI_TYPE_Q4_K: mi_quant_q4_k(src, dst, n); break;
    case MI_TYPE_Q5_K: mi_quant_q5_k(src, dst, n); break;
    case MI_TYPE_Q6_K: mi_quant_q6_k(src, dst, n); break;
    case MI_TYPE_Q8_K: mi_quant_q8_k(src, dst, n); break;
    default: MI_ASSERT(!"mi_quantize_row: unsupported type (check traits->supported first)");
    }
}

/* ---------------- kernel selection ---------------- */

static void f32_as_act(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

static mi_quant_kernels g_tab[3];
static int g_have[3];   /* ISA usable on this CPU */
static mi_isa g_best;   /* after MINFER_ISA */

static void init_tables(void) {
    mi_quant_kernels *s = &g_tab[MI_ISA_SCALAR];
    s->dot[MI_TYPE_F32] = mi_dot_f32_ref;
    s->dot[MI_TYPE_F16] = mi_dot_f16_ref;
    s->dot[MI_TYPE_BF16] = mi_dot_bf16_ref;
    s->dot[MI_TYPE_Q4_0] = mi_dot_q4_0_ref;
    s->dot[MI_TYPE_Q4_1] = mi_dot_q4_1_ref;
    s->dot[MI_TYPE_Q5_0] = mi_dot_q5_0_ref;
    s->dot[MI_TYPE_Q5_1] = mi_dot_q5_1_ref;
    s->dot[MI_TYPE_Q8_0] = mi_dot_q8_0_ref;
    s->dot[MI_TYPE_Q4_K] = mi_dot_q4_k_ref;
    s->dot[MI_TYPE_Q5_K] = mi_dot_q5_k_ref;
    s->dot[MI_TYPE_Q6_K] = mi_dot_q6_k_ref;
    s->quant[MI_TYPE_F32] = f32_as_act;
    s->quant[MI_TYPE_Q8_0] = mi_quant_q8_0;
    s->quant[MI_TYPE_Q8_1] = mi_quant_q8_1;
    s->quant[MI_TYPE_Q8_K] = mi_quant_q8_k;
    g_have[MI_ISA_SCALAR] = 1;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    g_have[MI_ISA_AVX2] = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
    /* every flag the *_avx512.c files are compiled with that the code may use */
    g_have[MI_ISA_AVX512] = g_have[MI_ISA_AVX2] && __builtin_cpu_supports("avx512f") &&
                            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
#endif
    if (g_have[MI_ISA_AVX2]) mi_quant_fill_avx2(&g_tab[MI_ISA_AVX2]);
    if (g_have[MI_ISA_AVX512]) mi_quant_fill_avx512(&g_tab[MI_ISA_AVX512]);
    g_best = g_have[MI_ISA_AVX512] ? MI_ISA_AVX512 : g_have[MI_ISA_AVX2] ? MI_ISA_AVX2 : MI_ISA_SCALAR;
    const char *env = mi_setting("MINFER_ISA");   /* read once: the tables are chosen once per process */
    if (env && *env) {
        mi_isa want = MI_ISA_BEST;
        if (!strcasecmp(env, "scalar")) want = MI_ISA_SCALAR;
        else if (!strcasecmp(env, "avx2")) want = MI_ISA_AVX2;
        else if (!strcasecmp(env, "avx512")) want = MI_ISA_AVX512;
        else mi_log("MINFER_ISA=%s not understood (scalar|avx2|avx512): using %s", env, mi_isa_name(g_best));
        if (want != MI_ISA_BEST) {
            if (g_have[want]) g_best = want;
            else mi_log("MINFER_ISA=%s: not supported by this CPU, using %s", env, mi_isa_name(g_best));
        }
    }
}

#include <pthread.h>
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void ensure_init(void) { pthread_once(&g_once, init_tables); }

mi_isa mi_cpu_best_isa(void) {
    ensure_init();
    return g_best;
}

const char *mi_isa_name(mi_isa isa) {
    switch (isa) {
    case MI_ISA_SCALAR: return "scalar";
    case MI_ISA_AVX2: return "avx2";
    case MI_ISA_AVX512: return "avx512";
    case MI_ISA_BEST: return "best";
    }
    return "?";
}

/* An ISA level without its own kernel for a type uses the next lower level's. */
mi_vec_dot_fn mi_get_vec_dot(mi_type t, mi_isa isa) {
    ensure_init();
    if ((int)t < 0 || (int)t >= MI_TYPE_COUNT) return NULL;
    if (isa == MI_ISA_BEST) isa = g_best;
    if ((int)isa < 0 || (int)isa > MI_ISA_AVX512 || !g_have[isa]) return NULL;
    for (int l = (int)isa; l >= 0; l--)
        if (g_tab[l].dot[t]) return g_tab[l].dot[t];
    return NULL;
}

mi_vec_dot4_fn mi_get_vec_dot4(mi_type t, mi_isa isa) {
    ensure_init();
    if ((int)t < 0 || (int)t >= MI_TYPE_COUNT) return NULL;
    if (isa == MI_ISA_BEST) isa = g_best;
    if ((int)isa < 0 || (int)isa > MI_ISA_AVX512 || !g_have[isa]) return NULL;
    for (int l = (int)isa; l >= 0; l--)   /* the level whose dot[t] mi_get_vec_dot gives: its own four-row form */
        if (g_tab[l].dot[t]) return g_tab[l].dot4[t];
    return NULL;
}

mi_quantize_fn mi_get_quantize_act(mi_type act_type, mi_isa isa) {
    ensure_init();
    if ((int)act_type < 0 || (int)act_type >= MI_TYPE_COUNT) return NULL;
    if (isa == MI_ISA_BEST) isa = g_best;
    if ((int)isa < 0 || (int)isa > MI_ISA_AVX512 || !g_have[isa]) return NULL;
    for (int l = (int)isa; l >= 0; l--)
        if (g_tab[l].quant[act_type]) return g_tab[l].quant[act_type];
    return NULL;
}

/* SIMD kernels vs the scalar reference (Criterion). Every AVX2 / AVX-512 dot
 * product equals the scalar dot within DOT_RTOL * sum_i |w_i * a_i| (both from
 * the dequantized rows) for every weight type and several row lengths; the
 * SIMD activation quantizers are byte-identical to the scalar ones; a four-row dot gives each row
 * its one-row dot's bits. An ISA the CPU lacks is skipped, never passed. Also: type traits and
 * dispatch. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/core/mi_fp16.h"
#include "common/quant/mi_types.h"

/* Per-block integer sums are exact in every kernel; only the f32 accumulation
 * order (lanes vs sequential) and FMA rounding differ: a few ulps per block
 * against the magnitude of the terms. 1e-5 leaves ~100x margin over the
 * largest difference seen (see docs/QUANT.md). */
#define DOT_RTOL 1e-5

static const mi_type k_wtypes[] = {MI_TYPE_F32, MI_TYPE_F16, MI_TYPE_BF16, MI_TYPE_Q4_0, MI_TYPE_Q4_1, MI_TYPE_Q5_0,
                                   MI_TYPE_Q5_1, MI_TYPE_Q8_0, MI_TYPE_Q4_K, MI_TYPE_Q5_K, MI_TYPE_Q6_K};
static const int64_t k_lens[] = {1, 7, 33, 32, 96, 160, 256, 480, 512, 896, 4096, 4864, 11008};

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float rndu(void) { return (float)(rnd() & 0xFFFFFF) / 16777216.0f; }
static float rndn(void) { /* Box-Muller */
    const float u = rndu() + 1e-7f, v = rndu();
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

static void fill_gauss(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = rndn() * scale;
}

/* random raw blocks: random bytes, fp16 scale fields replaced by finite values */
static void fill_raw(mi_type t, void *dst, int64_t n) {
    const mi_type_traits *tr = mi_type_get(t);
    const size_t bytes = mi_row_size(t, n);
    uint8_t *p = dst;
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)rnd();
    const int64_t nb = n / tr->blck_size;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = p + (size_t)b * tr->type_size;
        int offs[2] = {-1, -1};
        switch (t) {
        case MI_TYPE_Q4_0: case MI_TYPE_Q5_0: case MI_TYPE_Q8_0: offs[0] = 0; break;
        case MI_TYPE_Q4_1: case MI_TYPE_Q5_1: case MI_TYPE_Q4_K: case MI_TYPE_Q5_K: offs[0] = 0; offs[1] = 2; break;
        case MI_TYPE_Q6_K: offs[0] = 208; break;
        default: break;
        }
        for (int k = 0; k < 2; k++) {
            if (offs[k] < 0) continue;
            const uint16_t h = mi_f32_to_f16((rndu() - 0.5f) * 0.02f);
            memcpy(blk + offs[k], &h, 2);
        }
    }
    if (t == MI_TYPE_F32) for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = rndn();
    if (t == MI_TYPE_F16) for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = mi_f32_to_f16(rndn());
    if (t == MI_TYPE_BF16) for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = mi_f32_to_bf16(rndn());
}

/* sum |w_i a_i| from the dequantized rows, plus |m * s| per block for the _1 types */
static double abs_scale(mi_type t, const void *w, mi_type at, const void *a, int64_t n) {
    float *wf = malloc((size_t)n * 4), *af = malloc((size_t)n * 4);
    mi_dequantize_row(t, w, wf, n);
    mi_dequantize_row(at, a, af, n);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)wf[i] * af[i]);
    if (t == MI_TYPE_Q4_1 || t == MI_TYPE_Q5_1) {
        const mi_type_traits *tr = mi_type_get(t);
        for (int64_t b = 0; b < n / 32; b++) {
            uint16_t m;
            memcpy(&m, (const uint8_t *)w + (size_t)b * tr->type_size + 2, 2);
            s += fabs((double)mi_f16_to_f32(m) * mi_f16_to_f32(((const mi_block_q8_1 *)a)[b].s));
        }
    }
    free(wf);
    free(af);
    return s;
}

static void check_dots(mi_isa isa) {
    if (!mi_get_vec_dot(MI_TYPE_Q4_0, isa)) cr_skip_test("%s not supported by this CPU", mi_isa_name(isa));
    double worst = 0;
    int cases = 0;
    for (size_t ti = 0; ti < sizeof k_wtypes / sizeof *k_wtypes; ti++) {
        const mi_type t = k_wtypes[ti];
        const mi_type_traits *tr = mi_type_get(t);
        const mi_type at = tr->vec_dot_type;
        mi_vec_dot_fn ref = mi_get_vec_dot(t, MI_ISA_SCALAR), simd = mi_get_vec_dot(t, isa);
        cr_assert(ref && simd, "no dot for %s", tr->name);
        for (size_t li = 0; li < sizeof k_lens / sizeof *k_lens; li++) {
            const int64_t n = k_lens[li];
            if (n % tr->blck_size || n % mi_type_get(at)->blck_size) continue;
            for (int rep = 0; rep < 6; rep++) {
                float *x = malloc((size_t)n * 4);
                void *w = malloc(mi_row_size(t, n)), *a = malloc(mi_row_size(at, n));
                if (rep % 2 == 0) { /* realistic: quantized gaussian weights */
                    fill_gauss(x, n, 0.05f);
                    mi_quantize_row(t, x, w, n);
                } else {
                    fill_raw(t, w, n);
                }
                fill_gauss(x, n, rep < 4 ? 1.0f : 30.0f);
                mi_quantize_row(at, x, a, n);
                float got, want;
                ref(n, &want, w, a);
                simd(n, &got, w, a);
                const double scale = abs_scale(t, w, at, a, n);
                const double err = fabs((double)got - want), rel = scale > 0 ? err / scale : err;
                if (rel > worst) worst = rel;
                cases++;
                cr_expect(rel <= DOT_RTOL, "%s dot %s n=%lld rep=%d: got %.9g want %.9g (err %.3g, %.3g of sum|wa| %.6g)",
                          mi_isa_name(isa), tr->name, (long long)n, rep, got, want, err, rel, scale);
                free(x);
                free(w);
                free(a);
            }
        }
    }
    cr_log_info("%s: %d dot cases, worst |simd-scalar| / sum|w*a| = %.3g (tolerance %.1g)", mi_isa_name(isa), cases,
                worst, DOT_RTOL);
}

/* Four-row dots: each of the four results is, bit for bit, the one-row dot of the same type and
 * isa on that row (the activation rows strided, with a gap after each), over every length of the
 * list the type takes (tails of 1..3 blocks after the groups of four) and both weight kinds.
 * An isa without a four-row form for a type is named; with none at all the test is skipped. */
static void check_dot4(mi_isa isa) {
    if (!mi_get_vec_dot(MI_TYPE_Q4_0, isa)) cr_skip_test("%s not supported by this CPU", mi_isa_name(isa));
    int cases = 0, types = 0;
    for (size_t ti = 0; ti < sizeof k_wtypes / sizeof *k_wtypes; ti++) {
        const mi_type t = k_wtypes[ti];
        const mi_type_traits *tr = mi_type_get(t);
        const mi_type at = tr->vec_dot_type;
        mi_vec_dot_fn one = mi_get_vec_dot(t, isa);
        mi_vec_dot4_fn four = mi_get_vec_dot4(t, isa);
        if (!four) continue;
        types++;
        for (size_t li = 0; li < sizeof k_lens / sizeof *k_lens; li++) {
            const int64_t n = k_lens[li];
            if (n % tr->blck_size || n % mi_type_get(at)->blck_size) continue;
            for (int rep = 0; rep < 4; rep++) {
                const size_t arb = mi_row_size(at, n), stride = arb + 64 * (size_t)(rep + 1);
                float *x = malloc((size_t)n * 4);
                void *w = malloc(mi_row_size(t, n));
                char *a = calloc(4, stride);
                if (rep % 2 == 0) {
                    fill_gauss(x, n, 0.05f);
                    mi_quantize_row(t, x, w, n);
                } else {
                    fill_raw(t, w, n);
                }
                for (int r = 0; r < 4; r++) {
                    fill_gauss(x, n, rep < 2 ? 1.0f : 30.0f);
                    mi_quantize_row(at, x, a + (size_t)r * stride, n);
                }
                float got[4], want[4];
                four(n, got, w, a, stride);
                for (int r = 0; r < 4; r++) one(n, &want[r], w, a + (size_t)r * stride);
                cases++;
                cr_expect(!memcmp(got, want, sizeof got),
                          "%s dot4 %s n=%lld rep=%d: %.9g %.9g %.9g %.9g, one row at a time %.9g %.9g %.9g %.9g",
                          mi_isa_name(isa), tr->name, (long long)n, rep, got[0], got[1], got[2], got[3], want[0],
                          want[1], want[2], want[3]);
                free(x);
                free(w);
                free(a);
            }
        }
    }
    if (!types) cr_skip_test("%s: no four-row dot", mi_isa_name(isa));
    cr_log_info("%s: %d four-row dot cases over %d types, each row bit for bit its one-row dot", mi_isa_name(isa), cases,
                types);
}

static void check_act_quant(mi_isa isa) {
    if (!mi_get_quantize_act(MI_TYPE_Q8_0, isa)) cr_skip_test("%s not supported by this CPU", mi_isa_name(isa));
    const mi_type acts[] = {MI_TYPE_Q8_0, MI_TYPE_Q8_1, MI_TYPE_Q8_K};
    const int64_t n = 4096;
    float *x = malloc(n * 4);
    for (int rep = 0; rep < 40; rep++) {
        fill_gauss(x, n, powf(10.0f, (float)(rep % 9) - 4.0f));
        if (rep % 5 == 1) /* block max 127 -> scale 1: many exact .5 ties */
            for (int64_t i = 0; i < n; i++) x[i] = (i % 32 == 0) ? 127.0f : (float)((int)(rnd() % 255) - 127) + 0.5f * (float)(rnd() & 1);
        if (rep % 5 == 2) /* zero blocks and constant blocks */
            for (int64_t i = 0; i < n; i++) x[i] = (i / 256) % 2 ? 0.0f : -3.25f;
        if (rep % 5 == 3) /* subnormal and huge magnitudes */
            for (int64_t i = 0; i < n; i++) x[i] *= (i / 64) % 2 ? 1e-38f : 1e30f;
        for (size_t k = 0; k < 3; k++) {
            mi_quantize_fn ref = mi_get_quantize_act(acts[k], MI_ISA_SCALAR), simd = mi_get_quantize_act(acts[k], isa);
            cr_assert(ref && simd);
            const size_t bytes = mi_row_size(acts[k], n);
            uint8_t *want = calloc(1, bytes), *got = calloc(1, bytes);
            ref(x, want, n);
            simd(x, got, n);
            size_t first = bytes;
            for (size_t i = 0; i < bytes; i++)
                if (got[i] != want[i]) { first = i; break; }
            cr_expect(first == bytes, "%s quantize %s rep %d: byte %zu got %u want %u", mi_isa_name(isa),
                      mi_type_name(acts[k]), rep, first, first < bytes ? got[first] : 0, first < bytes ? want[first] : 0);
            free(want);
            free(got);
        }
    }
    free(x);
}

Test(quant_simd, dot_avx2) { check_dots(MI_ISA_AVX2); }
Test(quant_simd, dot_avx512) { check_dots(MI_ISA_AVX512); }
Test(quant_simd, dot_best) { check_dots(MI_ISA_BEST); }
Test(quant_simd, dot4_avx2) { check_dot4(MI_ISA_AVX2); }
Test(quant_simd, dot4_avx512) { check_dot4(MI_ISA_AVX512); }
Test(quant_simd, dot4_best) { check_dot4(MI_ISA_BEST); }
Test(quant_simd, act_quant_avx2) { check_act_quant(MI_ISA_AVX2); }
Test(quant_simd, act_quant_avx512) { check_act_quant(MI_ISA_AVX512); }

/* Block sizes are ggml's published layouts (independent facts). */
Test(quant_types, traits) {
    const struct { int id; const char *name; int64_t bs; size_t ts; int vdt; } want[] = {
        {0, "F32", 1, 4, 0}, {1, "F16", 1, 2, 0}, {30, "BF16", 1, 2, 0}, {2, "Q4_0", 32, 18, 8}, {3, "Q4_1", 32, 20, 9},
        {6, "Q5_0", 32, 22, 8}, {7, "Q5_1", 32, 24, 9}, {8, "Q8_0", 32, 34, 8}, {12, "Q4_K", 256, 144, 15},
        {13, "Q5_K", 256, 176, 15}, {14, "Q6_K", 256, 210, 15}, {15, "Q8_K", 256, 292, 15}, {9, "Q8_1", 32, 36, 9}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const mi_type_traits *t = mi_type_get(want[i].id);
        cr_assert(t, "type %d unknown", want[i].id);
        cr_expect_str_eq(t->name, want[i].name);
        cr_expect_eq(t->blck_size, want[i].bs, "%s blck_size", want[i].name);
        cr_expect_eq(t->type_size, want[i].ts, "%s type_size", want[i].name);
        cr_expect_eq((int)t->vec_dot_type, want[i].vdt, "%s vec_dot_type", want[i].name);
        cr_expect(t->supported);
        cr_expect_eq(mi_type_from_name(want[i].name), want[i].id);
        cr_expect(mi_get_vec_dot(want[i].id, MI_ISA_SCALAR) || want[i].id == 9 || want[i].id == 15);
    }
    const int bad[] = {-1, 4, 5, 16, 23, 29, 31, 39, 40, 1000};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_expect_null(mi_type_get(bad[i]), "id %d should be unknown", bad[i]);
        cr_expect_str_eq(mi_type_name(bad[i]), "?");
        cr_expect_null(mi_get_vec_dot((mi_type)bad[i], MI_ISA_BEST));
    }
    cr_expect_eq(mi_type_from_name("q4_k"), 12);
    cr_expect_eq(mi_type_from_name("nope"), -1);
    cr_expect_eq(mi_row_size(MI_TYPE_Q4_K, 4096), 16 * 144u);
    cr_expect_eq(mi_row_size(MI_TYPE_Q4_K, 100), 0u);
    cr_expect_eq(mi_row_size(MI_TYPE_F16, 7), 14u);
}

/* MINFER_ISA forces a level (Criterion runs each test in its own process, so the
 * one-time kernel selection sees this test's environment). */
Test(quant_types, env_isa_scalar) {
    setenv("MINFER_ISA", "scalar", 1);
    cr_expect_eq(mi_cpu_best_isa(), MI_ISA_SCALAR);
    cr_expect_eq(mi_get_vec_dot(MI_TYPE_Q4_K, MI_ISA_BEST), mi_get_vec_dot(MI_TYPE_Q4_K, MI_ISA_SCALAR));
    cr_expect_eq(mi_get_quantize_act(MI_TYPE_Q8_K, MI_ISA_BEST), mi_get_quantize_act(MI_TYPE_Q8_K, MI_ISA_SCALAR));
}

Test(quant_types, env_isa_avx2) {
    setenv("MINFER_ISA", "avx2", 1);
    if (!mi_get_vec_dot(MI_TYPE_Q4_0, MI_ISA_AVX2)) cr_skip_test("avx2 not supported by this CPU");
    cr_expect_eq(mi_cpu_best_isa(), MI_ISA_AVX2);
    cr_expect_eq(mi_get_vec_dot(MI_TYPE_Q6_K, MI_ISA_BEST), mi_get_vec_dot(MI_TYPE_Q6_K, MI_ISA_AVX2));
    cr_expect_neq(mi_get_vec_dot(MI_TYPE_Q6_K, MI_ISA_BEST), mi_get_vec_dot(MI_TYPE_Q6_K, MI_ISA_SCALAR));
}

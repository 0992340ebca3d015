/* The gates' helpers (gates/gate_util.h): MINFER_GATE_ONLY's exact names and name*
 * prefixes, gu_begin's answer, and a test left out being neither printed nor counted nor in
 * the summary's list (so a partial device run's JSON never reads as more than it ran). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include "gates/gate_util.h"
#include "common/quant/mi_types.h"

Test(gate_util, selection_names_and_prefixes) {
    unsetenv("MINFER_GATE_ONLY");
    cr_assert(gu_selected("anything"), "unset: every test");
    setenv("MINFER_GATE_ONLY", "", 1);
    cr_assert(gu_selected("anything"), "empty: every test");
    setenv("MINFER_GATE_ONLY", "rope_kv_pass,attn_step_*,model_", 1);
    cr_assert(gu_selected("rope_kv_pass"));
    cr_assert(!gu_selected("rope_kv_pass2"), "a name without * is exact");
    cr_assert(!gu_selected("rope_kv"), "nor a prefix of a listed name");
    cr_assert(gu_selected("attn_step_f16_hd64"));
    cr_assert(gu_selected("attn_step_"), "the prefix itself");
    cr_assert(!gu_selected("attn_ste"));
    cr_assert(!gu_selected("model_qwen2.5-0.5b_q4_0"), "model_ has no *: exact only");
    cr_assert(gu_selected("model_"));
    setenv("MINFER_GATE_ONLY", "*", 1);
    cr_assert(gu_selected("x") && gu_selected(""), "* alone: every test");
    unsetenv("MINFER_GATE_ONLY");
}

Test(gate_util, left_out_tests_not_recorded) {
    gu_run r;
    gu_init(&r, "gate-test", "cpu");
    setenv("MINFER_GATE_ONLY", "kept*", 1);
    cr_assert(gu_begin(&r, "kept_one"));
    gu_pass(&r, "ran");
    cr_assert(!gu_begin(&r, "other"));
    gu_fail(&r, "must not count");
    cr_assert(gu_begin(&r, "kept_two"));
    gu_skip(&r, "counts");
    unsetenv("MINFER_GATE_ONLY");
    cr_assert_eq(r.passed, 1);
    cr_assert_eq(r.failed, 0, "the left-out test's failure must not count");
    cr_assert_eq(r.skipped, 1);
    cr_assert_eq(r.n, 2);
    cr_assert_str_eq(r.tests[0].name, "kept_one");
    cr_assert_str_eq(r.tests[1].name, "kept_two");
}

/* gu_make_weights draws its floats in one sequence and quantizes blocks of rows over threads:
 * the same bytes, and the same seed afterwards, as drawing and quantizing row by row */
Test(gate_util, make_weights_same_bytes_as_row_by_row) {
    const mi_type types[] = {MI_TYPE_Q4_K, MI_TYPE_Q4_0, MI_TYPE_Q6_K};
    const int64_t K = 512, M = 4096 + 37;   /* past one block of rows */
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        unsigned long long a = 42 + i, b = 42 + i;
        size_t wb = 0;
        uint8_t *w = gu_make_weights(&a, types[i], K, M, 1.0f, &wb);
        const size_t rb = mi_row_size(types[i], K);
        uint8_t *ref = malloc(rb * (size_t)M);
        float *row = malloc((size_t)K * 4);
        for (int64_t m = 0; m < M; m++) {
            for (int64_t k = 0; k < K; k++) row[k] = gu_frand(&b, -1.f, 1.f) * (k % 97 == 0 ? 4.f : 1.f);
            mi_quantize_row(types[i], row, ref + rb * (size_t)m, K);
        }
        cr_assert_eq(wb, rb * (size_t)M);
        cr_assert_eq(gu_first_diff(w, ref, wb), (size_t)-1, "%s: bytes differ", mi_type_name(types[i]));
        cr_assert_eq(a, b, "%s: the seed must advance as row by row", mi_type_name(types[i]));
        free(w); free(ref); free(row);
    }
}

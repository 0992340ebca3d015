/* Device check of item e16 (phase7e_perf/mmv16.cu) for gate_7e: the one-token matmul of the
 * 32-element formats with x quantized inside the kernel, against the CPU scalar dot (x
 * quantized the CPU's way): NMSE <= 1e-6, every output written (NaN poison), a repeat run
 * bitwise equal, and whether it equals 7b's kernel (mi7b_matmul: quantize + warp per row)
 * bit for bit, which is its design; then refusals, and a timing of 7b vs e16 on the 0.5B's
 * decode shapes (cudaEvent, median of 20 calls; a measurement, fails only on an error).
 * Header-only, included once: mmv16_check(&R, S). */
#ifndef MI_MMV16_CHECK_H
#define MI_MMV16_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "gates/gate_util.h"
#include "gates/7e/dev7e.h"
#include "common/quant/mi_types.h"
#include "common/core/mi_canon.h"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"

static unsigned long long m16_seed = 0xe16;

/* off: byte offset of the weights' device base (2: the 2-byte alignment of Q4_0 / Q5_0 / Q8_0 blocks) */
static void m16_case(gu_run *R, cudaStream_t S, mi_type t, int64_t K, int64_t M, bool with_bias, size_t off) {
    char name[96];
    snprintf(name, sizeof name, "e16_%s_K%lld_M%lld%s%s", mi_type_name(t), (long long)K, (long long)M,
             with_bias ? "_bias" : "", off ? "_unaligned" : "");
    if (!gu_selected(name)) return;
    gu_begin(R, name);
    if (!mi7e_mmv16_supported(t, K, 1)) {
        gu_fail(R, "the kernel refuses a shape it is meant to cover");
        return;
    }
    size_t wb = 0;
    uint8_t *w = (uint8_t *)gu_make_weights(&m16_seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(&m16_seed, (size_t)K, -1.f, 1.f), *bias = gu_rand_f32(&m16_seed, (size_t)M, -0.5f, 0.5f);
    const size_t ny = (size_t)M;
    float *ref = (float *)malloc(ny * 4), *got = (float *)malloc(ny * 4), *got2 = (float *)malloc(ny * 4),
          *g7b = (float *)malloc(ny * 4);
    cpu_matmul(t, w, x, with_bias ? bias : NULL, ref, K, M, 1);
    void *b1, *b2, *b3;
    void *dw = dev_up_at(w, wb, off, &b1);
    float *dx = (float *)dev_up_at(x, (size_t)K * 4, 0, &b2), *db = (float *)dev_up_at(bias, (size_t)M * 4, 0, &b3);
    void *ws = NULL;
    CK(cudaMalloc(&ws, mi7b_matmul_workspace(t, K, 1)));
    float *dy = (float *)dev_poison(ny * 4);
    const float *hb = with_bias ? db : NULL;
    mi_status st = mi7e_mmv16(S, t, dw, dx, hb, dy, K, M);
    if (st == MI_OK) { dev_down_on(S, got, dy, ny * 4); CK(cudaMemset(dy, 0xFF, ny * 4)); }
    if (st == MI_OK) st = mi7e_mmv16(S, t, dw, dx, hb, dy, K, M);
    if (st == MI_OK) { dev_down_on(S, got2, dy, ny * 4); CK(cudaMemset(dy, 0xFF, ny * 4)); }
    if (st == MI_OK) st = mi7b_matmul(S, t, dw, dx, hb, dy, K, M, 1, ws);
    if (st == MI_OK) dev_down_on(S, g7b, dy, ny * 4);
    if (st != MI_OK) {
        gu_fail(R, "launch: %s", mi_errmsg());
    } else {
        const double e = gu_nmse(got, ref, ny), e7b = gu_nmse(got, g7b, ny);
        const bool rep = memcmp(got, got2, ny * 4) == 0, same7b = memcmp(got, g7b, ny * 4) == 0;
        const size_t bad = first_bad(got, ref, ny, 1e-3, 1e-3);
        if (!(e <= 1e-6) || !rep) {
            if (bad != (size_t)-1) printf("    %s: index %zu got %.9g want %.9g\n", name, bad, got[bad], ref[bad]);
            gu_fail(R, "nmse vs cpu %.3g (bound 1e-6), repeat %s, vs 7b %.3g", e, rep ? "bitwise" : "DIFFERS", e7b);
        } else {
            gu_pass(R, "nmse vs cpu %.3g, vs 7b's kernel %s (%.3g), repeat bitwise", e,
                    same7b ? "bit-identical" : "NOT bit-identical", e7b);
        }
    }
    free(w); free(x); free(bias); free(ref); free(got); free(got2); free(g7b);
    cudaFree(b1); cudaFree(b2); cudaFree(b3); cudaFree(ws); cudaFree(dy);
}

/* e16 on e2 / e5 (QIN): mi7e_mmv_qin / mi7e_ffn_qin against mi7e_mmv / mi7e_ffn (bitwise, the
 * design) and against the CPU (NMSE <= 1e-6); fused: gate/up + mi_canon_swiglu */
static void m16_qin_case(gu_run *R, cudaStream_t S, mi_type t, int64_t K, int64_t M, bool fused, bool with_bias,
                         size_t off) {
    char name[96];
    snprintf(name, sizeof name, "e16_%s_qin_%s_K%lld_M%lld%s%s", fused ? "e5" : "e2", mi_type_name(t), (long long)K,
             (long long)M, with_bias ? "_bias" : "", off ? "_unaligned" : "");
    if (!gu_selected(name)) return;
    gu_begin(R, name);
    size_t wb = 0;
    uint8_t *w = (uint8_t *)gu_make_weights(&m16_seed, t, K, M, 1.0f, &wb);
    uint8_t *w2 = fused ? (uint8_t *)gu_make_weights(&m16_seed, t, K, M, 1.0f, &wb) : NULL;
    float *x = gu_rand_f32(&m16_seed, (size_t)K, -1.f, 1.f), *bias = gu_rand_f32(&m16_seed, (size_t)M, -0.5f, 0.5f);
    const size_t ny = (size_t)M;
    float *ref = (float *)malloc(ny * 4), *got = (float *)malloc(ny * 4), *plain = (float *)malloc(ny * 4);
    cpu_matmul(t, w, x, with_bias && !fused ? bias : NULL, ref, K, M, 1);
    if (fused) {
        float *u = (float *)malloc(ny * 4);
        cpu_matmul(t, w2, x, NULL, u, K, M, 1);
        for (size_t i = 0; i < ny; i++) ref[i] = mi_canon_swiglu(ref[i], u[i]);
        free(u);
    }
    void *b1, *b2 = NULL, *b3, *b4;
    void *dw = dev_up_at(w, wb, off, &b1), *dw2 = fused ? dev_up_at(w2, wb, off, &b2) : NULL;
    float *dx = (float *)dev_up_at(x, (size_t)K * 4, 0, &b3), *db = (float *)dev_up_at(bias, (size_t)M * 4, 0, &b4);
    void *ws = NULL;
    CK(cudaMalloc(&ws, mi7e_mmv_workspace(t, K, 1)));
    CK(cudaMemset(ws, 0xFF, mi7e_mmv_workspace(t, K, 1)));   /* QIN must not read it */
    float *dy = (float *)dev_poison(ny * 4);
    const float *hb = with_bias && !fused ? db : NULL;
    mi_status st = fused ? mi7e_ffn_qin(S, t, dw, dw2, dx, dy, K, M, 1, ws) : mi7e_mmv_qin(S, t, dw, dx, hb, dy, K, M, 1, ws);
    if (st == MI_OK) { dev_down_on(S, got, dy, ny * 4); CK(cudaMemset(dy, 0xFF, ny * 4)); }
    if (st == MI_OK) st = fused ? mi7e_ffn(S, t, dw, dw2, dx, dy, K, M, 1, ws) : mi7e_mmv(S, t, dw, dx, hb, dy, K, M, 1, ws);
    if (st == MI_OK) dev_down_on(S, plain, dy, ny * 4);
    if (st != MI_OK) {
        gu_fail(R, "launch: %s", mi_errmsg());
    } else {
        const double e = gu_nmse(got, ref, ny);
        const bool same = memcmp(got, plain, ny * 4) == 0;
        if (!(e <= 1e-6) || !same) {
            const size_t bad = first_bad(got, plain, ny, 0.0, 0.0);
            if (bad != (size_t)-1) printf("    %s: index %zu got %.9g, %s %.9g\n", name, bad, got[bad],
                                          fused ? "e5" : "e2", plain[bad]);
            gu_fail(R, "nmse vs cpu %.3g (bound 1e-6); %s", e, same ? "equal to the plain kernel" : "DIFFERS from the plain kernel");
        } else {
            gu_pass(R, "bit-identical to %s with the workspace quantization; nmse vs cpu %.3g", fused ? "e5" : "e2", e);
        }
    }
    free(w); free(w2); free(x); free(bias); free(ref); free(got); free(plain);
    cudaFree(b1); if (b2) cudaFree(b2); cudaFree(b3); cudaFree(b4); cudaFree(ws); cudaFree(dy);
}

/* the timed call: which 0 7b's matmul (quantize + kernel), 1 e16's small-K kernel, 2 / 3 e2
 * plain / with x quantized inside, 4 / 5 the same for the e5 fused FFN (gate and up = w) */
typedef struct {
    int which;
    mi_type t;
    const void *w;
    const float *x;
    float *y;
    int64_t K, M;
    void *ws;
} m16_args;
static mi_status m16_call(cudaStream_t S, const void *p) {
    const m16_args *a = (const m16_args *)p;
    switch (a->which) {
    case 0: return mi7b_matmul(S, a->t, a->w, a->x, NULL, a->y, a->K, a->M, 1, a->ws);
    case 1: return mi7e_mmv16(S, a->t, a->w, a->x, NULL, a->y, a->K, a->M);
    case 2: return mi7e_mmv(S, a->t, a->w, a->x, NULL, a->y, a->K, a->M, 1, a->ws);
    case 3: return mi7e_mmv_qin(S, a->t, a->w, a->x, NULL, a->y, a->K, a->M, 1, a->ws);
    case 4: return mi7e_ffn(S, a->t, a->w, a->w, a->x, a->y, a->K, a->M, 1, a->ws);
    default: return mi7e_ffn_qin(S, a->t, a->w, a->w, a->x, a->y, a->K, a->M, 1, a->ws);
    }
}

/* calls wa (labelled la) and wb (lb) on one shape: median of 20 calls each after 3, each call
 * alone (a measurement: fails only on an error) */
static void m16_timing(gu_run *R, cudaStream_t S, const char *name, int wa, const char *la, int wb, const char *lb,
                       mi_type t, int64_t K, int64_t M) {
    if (!gu_selected(name)) return;
    gu_begin(R, name);
    size_t wbytes = 0;
    uint8_t *w = (uint8_t *)gu_make_weights(&m16_seed, t, K, M, 1.0f, &wbytes);
    float *x = gu_rand_f32(&m16_seed, (size_t)K, -1.f, 1.f);
    void *b1, *b2;
    void *dw = dev_up_at(w, wbytes, 0, &b1);
    float *dx = (float *)dev_up_at(x, (size_t)K * 4, 0, &b2);
    void *ws = NULL;
    CK(cudaMalloc(&ws, mi7b_matmul_workspace(t, K, 1)));
    float *dy = (float *)dev_poison((size_t)M * 4);
    m16_args a = {wa, t, dw, dx, dy, K, M, ws};
    mi_status st;
    const float ta = dev_time_median(S, 3, 20, m16_call, &a, &st);
    a.which = wb;
    const float tb = st == MI_OK ? dev_time_median(S, 3, 20, m16_call, &a, &st) : -1.0f;
    if (st != MI_OK) gu_fail(R, "launch: %s", mi_errmsg());
    else
        gu_pass(R, "%.2f MB: %s %.4f ms, %s %.4f ms (x%.2f; median of 20, each call alone)", (double)wbytes / 1e6, la,
                ta, lb, tb, tb > 0 ? ta / tb : 0.0);
    free(w); free(x);
    cudaFree(b1); cudaFree(b2); cudaFree(ws); cudaFree(dy);
}

static void mmv16_check(gu_run *R, cudaStream_t S) __attribute__((unused));
static void mmv16_check(gu_run *R, cudaStream_t S) {
    static const mi_type types[5] = {MI_TYPE_Q4_0, MI_TYPE_Q4_1, MI_TYPE_Q5_0, MI_TYPE_Q5_1, MI_TYPE_Q8_0};
    for (int i = 0; i < 5; i++) {
        const mi_type t = types[i];
        m16_case(R, S, t, 32, 1, false, 0);
        m16_case(R, S, t, 896, 896, true, 0);
        m16_case(R, S, t, 896, 128, false, 0);
        m16_case(R, S, t, 1024, 1001, true, 2);   /* a block-aligned but not 4-aligned base */
        m16_case(R, S, t, 4864, 896, false, 0);
        m16_case(R, S, t, 16384, 33, true, 0);    /* the largest K */
    }
    for (int i = 0; i < 5; i++) {
        const mi_type t = types[i];
        m16_qin_case(R, S, t, 4864, 896, false, false, 0);    /* the 0.5B's FFN down */
        m16_qin_case(R, S, t, 2048, 1001, false, true, 2);
        m16_qin_case(R, S, t, 896, 4864, true, false, 0);     /* the 0.5B's FFN gate / up */
        m16_qin_case(R, S, t, 896, 70, true, false, 2);
    }
    /* x's blocks do not fit beside two staged rows: the plain path, the same bits */
    m16_qin_case(R, S, MI_TYPE_Q8_0, 19968, 40, true, false, 0);
    gu_begin(R, "e16_supported");
    const bool ok = mi7e_mmv16_supported(MI_TYPE_Q4_0, 896, 1) && !mi7e_mmv16_supported(MI_TYPE_Q4_K, 1024, 1) &&
                    !mi7e_mmv16_supported(MI_TYPE_Q4_0, 896, 2) && !mi7e_mmv16_supported(MI_TYPE_Q4_0, 48, 1) &&
                    !mi7e_mmv16_supported(MI_TYPE_Q4_0, 16416, 1) && !mi7e_mmv16_supported(MI_TYPE_F16, 896, 1) &&
                    mi7e_mmv16(S, MI_TYPE_Q4_K, NULL, NULL, NULL, NULL, 1024, 8) == MI_ERR_UNSUPPORTED;
    if (ok) gu_pass(R, "Q4_0 K 896 N 1 accepted; Q4_K, N = 2, K = 48, K = 16416, F16 refused (MI_ERR_UNSUPPORTED)");
    else gu_fail(R, "a shape outside the kernel was accepted, or an inside one refused");
    /* the 0.5B's decode shapes (Qwen2.5-0.5B: hidden 896, kv 128, ffn 4864) */
    static const char *const k7b = "7b (quantize + kernel)";
    m16_timing(R, S, "e16_time_attn_q_o_Q4_0_K896_M896", 0, k7b, 1, "e16", MI_TYPE_Q4_0, 896, 896);
    m16_timing(R, S, "e16_time_attn_k_v_Q4_0_K896_M128", 0, k7b, 1, "e16", MI_TYPE_Q4_0, 896, 128);
    m16_timing(R, S, "e16_time_ffn_down_Q4_0_K4864_M896", 0, k7b, 1, "e16", MI_TYPE_Q4_0, 4864, 896);
    m16_timing(R, S, "e16_time_e2_qin_Q4_0_K4864_M896", 2, "e2 plain (quantize + kernel)", 3,
               "e2 with x quantized inside", MI_TYPE_Q4_0, 4864, 896);
    m16_timing(R, S, "e16_time_e5_qin_Q4_0_K896_M4864", 4, "e5 plain (quantize + kernel)", 5,
               "e5 with x quantized inside", MI_TYPE_Q4_0, 896, 4864);
}

#endif

/* gate_8a's cases for the one-token kernels that quantize x (and apply the RMS norm before it) in
 * every block: matvec_staged_quant_exact.cu (7e's staged kernels, items d23, d24) and d11's Q6_K
 * kernel with items d25 and d26, against the work they replace done by the kernels before them (7e's RMS
 * norm, 7b's quantizer, then the same matmul): bit for bit; against the CPU reference: NMSE <=
 * 1e-6; against themselves on a second run: bit for bit. */
#include "gates/8a/kernels8a.h"
#include "gates/7e/dev7e.h"
#include "phase8a_decode/decode8a.h"
#include "phase7e_perf/perf7e.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "common/core/mi_canon.h"
#include "common/quant/mi_types.h"
#include <stdlib.h>
#include <string.h>

static gu_run *g_r;
static cudaStream_t S;
static unsigned long long *g_seed;
static const float EPS = 1e-6f;

/* got against the lower phases' output (old), the CPU's (ref) and a second run (got2) */
static void judge(const char *name, const float *got, const float *got2, const float *old, const float *ref, size_t n) {
    const double e_cpu = gu_nmse(got, ref, n);
    const size_t d_old = gu_first_diff(got, old, n * 4), d_rep = gu_first_diff(got, got2, n * 4);
    if (e_cpu <= 1e-6 && d_old == (size_t)-1 && d_rep == (size_t)-1) {
        gu_pass(g_r, "bit-identical to the lower phases' kernels and to itself; nmse vs cpu %.3g", e_cpu);
        return;
    }
    const size_t i = d_old != (size_t)-1 ? d_old / 4 : first_bad(got, ref, n, 1e-3, 1.0);
    if (i != (size_t)-1 && i < n) printf("    %s: row %zu got %.9g lower phases %.9g cpu %.9g\n", name, i, got[i], old[i], ref[i]);
    gu_fail(g_r, "nmse vs cpu %.3g (bound 1e-6); vs the lower phases' kernels %s; repeat %s", e_cpu,
            d_old == (size_t)-1 ? "bitwise" : "DIFFERS", d_rep == (size_t)-1 ? "bitwise" : "DIFFERS");
}

/* d24: y = W @ x + r, against 7e's staged kernel with r as its bias (7b's quantizer first) */
static void quant_case(mi_type t, int64_t K, int64_t M) {
    char name[96];
    snprintf(name, sizeof name, "staged_quant_%s_K%lld_M%lld", mi_type_name(t), (long long)K, (long long)M);
    gu_begin(g_r, name);
    if (!mi8a_staged_quant_supported(t, K, M, false)) { gu_fail(g_r, "the kernel refuses a shape it is meant to cover"); return; }
    size_t wb;
    uint8_t *w = gu_make_weights(g_seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(g_seed, (size_t)K, -2.f, 2.f), *r = gu_rand_f32(g_seed, (size_t)M, -1.f, 1.f);
    float *ref = malloc((size_t)M * 4), *got = malloc((size_t)M * 4), *got2 = malloc((size_t)M * 4);
    float *old = malloc((size_t)M * 4);
    cpu_matmul(t, w, x, r, ref, K, M, 1);
    void *bw, *bx, *br;
    void *dw = dev_up_at(w, wb, 0, &bw);
    float *dx = dev_up_at(x, (size_t)K * 4, 0, &bx), *dr = dev_up_at(r, (size_t)M * 4, 0, &br);
    float *dy = dev_poison((size_t)M * 4);
    void *ws = dev_poison(mi7e_matvec_staged_workspace(t, K, 1) + 64);
    mi_status st = mi8a_matvec_staged_quant(S, t, dw, dx, dr, dy, K, M);
    if (st == MI_OK) { dev_down_on(S, got, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    if (st == MI_OK) st = mi8a_matvec_staged_quant(S, t, dw, dx, dr, dy, K, M);
    if (st == MI_OK) { dev_down_on(S, got2, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    if (st == MI_OK) st = mi7e_matvec_staged(S, t, dw, dx, dr, dy, K, M, 1, ws);
    if (st == MI_OK) dev_down_on(S, old, dy, (size_t)M * 4);
    if (st != MI_OK) gu_fail(g_r, "launch: %s", mi_errmsg());
    else judge(name, got, got2, old, ref, (size_t)M);
    free(w); free(x); free(r); free(ref); free(got); free(got2); free(old);
    cudaFree(bw); cudaFree(bx); cudaFree(br); cudaFree(dy); cudaFree(ws);
}

/* d23: y = swiglu(Wg @ x', Wu @ x'), x' = rms_norm(x, nw), against 7e's RMS norm, then 7e's staged FFN */
static void ffn_norm_case(mi_type t, int64_t K, int64_t F) {
    char name[96];
    snprintf(name, sizeof name, "staged_norm_ffn_%s_K%lld_F%lld", mi_type_name(t), (long long)K, (long long)F);
    gu_begin(g_r, name);
    if (!mi8a_staged_quant_supported(t, K, F, true)) { gu_fail(g_r, "the kernel refuses a shape it is meant to cover"); return; }
    size_t wb;
    uint8_t *wg = gu_make_weights(g_seed, t, K, F, 1.0f, &wb), *wu = gu_make_weights(g_seed, t, K, F, 1.0f, NULL);
    float *x = gu_rand_f32(g_seed, (size_t)K, -2.f, 2.f), *nw = gu_rand_f32(g_seed, (size_t)K, 0.5f, 1.5f);
    float *xn = malloc((size_t)K * 4), *g = malloc((size_t)F * 4), *u = malloc((size_t)F * 4);
    float *got = malloc((size_t)F * 4), *got2 = malloc((size_t)F * 4), *old = malloc((size_t)F * 4);
    const float scale = mi_canon_rms_scale(mi_canon_sumsq_host(x, K), K, EPS);
    for (int64_t i = 0; i < K; i++) xn[i] = (x[i] * scale) * nw[i];
    cpu_matmul(t, wg, xn, NULL, g, K, F, 1);
    cpu_matmul(t, wu, xn, NULL, u, K, F, 1);
    for (int64_t i = 0; i < F; i++) g[i] = mi_canon_swiglu(g[i], u[i]);
    void *bg, *bu, *bx, *bn;
    void *dwg = dev_up_at(wg, wb, 0, &bg), *dwu = dev_up_at(wu, wb, 0, &bu);
    float *dx = dev_up_at(x, (size_t)K * 4, 0, &bx), *dnw = dev_up_at(nw, (size_t)K * 4, 0, &bn);
    float *dxn = dev_poison((size_t)K * 4), *dy = dev_poison((size_t)F * 4);
    void *ws = dev_poison(mi7e_matvec_staged_workspace(t, K, 1) + 64);
    mi_status st = mi8a_ffn_staged_norm(S, t, dwg, dwu, dx, dnw, EPS, dy, K, F);
    if (st == MI_OK) { dev_down_on(S, got, dy, (size_t)F * 4); CK(cudaMemset(dy, 0xFF, (size_t)F * 4)); }
    if (st == MI_OK) st = mi8a_ffn_staged_norm(S, t, dwg, dwu, dx, dnw, EPS, dy, K, F);
    if (st == MI_OK) { dev_down_on(S, got2, dy, (size_t)F * 4); CK(cudaMemset(dy, 0xFF, (size_t)F * 4)); }
    if (st == MI_OK) st = mi7e_rms_norm(S, dx, dnw, dxn, K, 1, EPS);
    if (st == MI_OK) st = mi7e_ffn_staged(S, t, dwg, dwu, dxn, dy, K, F, 1, ws);
    if (st == MI_OK) dev_down_on(S, old, dy, (size_t)F * 4);
    if (st != MI_OK) gu_fail(g_r, "launch: %s", mi_errmsg());
    else judge(name, got, got2, old, g, (size_t)F);
    free(wg); free(wu); free(x); free(nw); free(xn); free(g); free(u); free(got); free(got2); free(old);
    cudaFree(bg); cudaFree(bu); cudaFree(bx); cudaFree(bn); cudaFree(dxn); cudaFree(dy); cudaFree(ws);
}

/* d25, d26: d11's Q6_K kernel, x (normalized when norm) quantized in every block, against the
 * chain it replaces: 7e's RMS norm (norm), then the same kernel with d25 off (7b's quantizer
 * first); xoff: x and nw 4 bytes past a 16-byte boundary, where the kernel falls back to that
 * chain itself (still bit for bit) */
static void q6k_case(int64_t K, int64_t M, bool norm, bool res, size_t xoff) {
    char name[96];
    const mi_type t = MI_TYPE_Q6_K;
    snprintf(name, sizeof name, "q6k_quant_in_block_K%lld_M%lld%s%s%s", (long long)K, (long long)M, norm ? "_norm" : "",
             res ? "_res" : "", xoff ? "_unaligned" : "");
    gu_begin(g_r, name);
    if (!mi8a_matvec_q6k_supported(t, K) || (norm && !mi8a_matvec_q6k_norm_supported(K))) {
        gu_fail(g_r, "the kernel refuses a shape it is meant to cover");
        return;
    }
    size_t wb;
    uint8_t *w = gu_make_weights(g_seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(g_seed, (size_t)K, -2.f, 2.f), *nw = gu_rand_f32(g_seed, (size_t)K, 0.5f, 1.5f);
    float *r = gu_rand_f32(g_seed, (size_t)M, -1.f, 1.f), *xn = malloc((size_t)K * 4);
    float *ref = malloc((size_t)M * 4), *got = malloc((size_t)M * 4), *got2 = malloc((size_t)M * 4);
    float *old = malloc((size_t)M * 4);
    const float scale = mi_canon_rms_scale(mi_canon_sumsq_host(x, K), K, EPS);
    for (int64_t i = 0; i < K; i++) xn[i] = norm ? (x[i] * scale) * nw[i] : x[i];
    cpu_matmul(t, w, xn, res ? r : NULL, ref, K, M, 1);
    void *bw, *bx, *bn, *br;
    void *dw = dev_up_at(w, wb, 0, &bw);
    float *dx = dev_up_at(x, (size_t)K * 4, xoff, &bx), *dnw = dev_up_at(nw, (size_t)K * 4, xoff, &bn);
    float *dr = dev_up_at(r, (size_t)M * 4, 0, &br), *dy = dev_poison((size_t)M * 4);
    float *dxn = dev_poison((size_t)K * 4);
    void *ws = dev_poison(mi8a_matvec_q6k_workspace(K) + 64);
    const float *pn = norm ? dnw : NULL, *pr = res ? dr : NULL;
    mi_status st = mi_cuda_items_set_off("");
    if (st == MI_OK) st = mi8a_matvec_q6k(S, dw, dx, pn, EPS, NULL, pr, dy, K, M, ws);
    if (st == MI_OK) { dev_down_on(S, got, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    if (st == MI_OK) st = mi8a_matvec_q6k(S, dw, dx, pn, EPS, NULL, pr, dy, K, M, ws);
    if (st == MI_OK) { dev_down_on(S, got2, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    if (st == MI_OK && norm) st = mi7e_rms_norm(S, dx, dnw, dxn, K, 1, EPS);
    if (st == MI_OK) st = mi_cuda_items_set_off("d25");
    if (st == MI_OK) st = mi8a_matvec_q6k(S, dw, norm ? dxn : dx, NULL, 0.0f, NULL, pr, dy, K, M, ws);
    if (st == MI_OK) dev_down_on(S, old, dy, (size_t)M * 4);
    mi_cuda_items_set_off("");
    if (st != MI_OK) gu_fail(g_r, "launch: %s", mi_errmsg());
    else judge(name, got, got2, old, ref, (size_t)M);
    free(w); free(x); free(nw); free(r); free(xn); free(ref); free(got); free(got2); free(old);
    cudaFree(bw); cudaFree(bx); cudaFree(bn); cudaFree(br); cudaFree(dy); cudaFree(dxn); cudaFree(ws);
}

void kernels8a_quant_in_block(gu_run *run, cudaStream_t stream, unsigned long long *seed) {
    g_r = run;
    S = stream;
    g_seed = seed;
    const mi_type all[] = {MI_TYPE_Q4_0, MI_TYPE_Q4_1, MI_TYPE_Q5_0, MI_TYPE_Q5_1, MI_TYPE_Q8_0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        quant_case(all[i], 2080, 300);        /* K not a multiple of 256; a last block of fewer rows */
        ffn_norm_case(all[i], 1024, 1000);
    }
    quant_case(MI_TYPE_Q4_0, 4864, 896);      /* the 0.5B's down */
    quant_case(MI_TYPE_Q4_0, 8960, 1536);     /* the 1.5B's down */
    quant_case(MI_TYPE_Q8_0, 18944, 200);     /* a row past 16 KB: one row a block (RB = 1) */
    ffn_norm_case(MI_TYPE_Q4_0, 896, 4864);   /* the 0.5B's FFN */
    ffn_norm_case(MI_TYPE_Q4_0, 1536, 8960);  /* the 1.5B's */
    ffn_norm_case(MI_TYPE_Q8_0, 896, 4864);
    q6k_case(3584, 512, false, false, 0);     /* the 7B's v */
    q6k_case(3584, 512, true, false, 0);      /* the same with its norm folded */
    q6k_case(18944, 3584, false, true, 0);    /* the 7B's down + residual (d12's blocks of 32 warps) */
    q6k_case(3584, 4096, true, false, 0);     /* the output head's rows after the final norm */
    q6k_case(8960, 300, true, true, 0);       /* the longest row the norm form takes */
    q6k_case(3584, 512, true, false, 4);      /* x and nw not 16-byte aligned: the fallback */
    q6k_case(3584, 512, false, true, 4);
}

/* gate_8a's cases for ffn_staged_norm_exact.cu (item d23): 7e's staged one-token FFN with the RMS
 * norm and x's quantization in every block, against the launches it replaces (7e's RMS norm, then
 * 7e's staged FFN with 7b's quantizer): bit for bit; against the CPU reference: NMSE <= 1e-6;
 * against itself on a second run: bit for bit. */
#include "gates/8a/kernels8a.h"
#include "gates/7e/dev7e.h"
#include "phase8a_decode/decode8a.h"
#include "phase7e_perf/perf7e.h"
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

/* d23: y = swiglu(Wg @ x', Wu @ x'), x' = rms_norm(x, nw), against 7e's RMS norm, then 7e's staged FFN */
static void ffn_norm_case(mi_type t, int64_t K, int64_t F) {
    char name[96];
    snprintf(name, sizeof name, "staged_norm_ffn_%s_K%lld_F%lld", mi_type_name(t), (long long)K, (long long)F);
    gu_begin(g_r, name);
    if (!mi8a_ffn_staged_norm_supported(t, K, F)) { gu_fail(g_r, "the kernel refuses a shape it is meant to cover"); return; }
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

void kernels8a_ffn_staged(gu_run *run, cudaStream_t stream, unsigned long long *seed) {
    g_r = run;
    S = stream;
    g_seed = seed;
    const mi_type all[] = {MI_TYPE_Q4_0, MI_TYPE_Q4_1, MI_TYPE_Q5_0, MI_TYPE_Q5_1, MI_TYPE_Q8_0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ffn_norm_case(all[i], 1024, 1000);
    ffn_norm_case(MI_TYPE_Q4_0, 896, 4864);    /* the 0.5B's FFN */
    ffn_norm_case(MI_TYPE_Q4_0, 1536, 8960);   /* the 1.5B's */
    ffn_norm_case(MI_TYPE_Q8_0, 896, 4864);
    ffn_norm_case(MI_TYPE_Q8_0, 8960, 300);    /* a row past 8 KB: one row a block (RB = 1), x's copy past 48 KB */
    ffn_norm_case(MI_TYPE_Q4_0, 2080, 257);    /* K not a multiple of 256; a last block of fewer rows */
}

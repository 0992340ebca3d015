/* gate_8a's kernel cases: each of 8a's kernels alone on the device, against the same work done by
 * lower phases' kernels (bit for bit where the arithmetic is the same, within rounding where only
 * the order of the sums differs), against the CPU reference and against itself on a second run.
 * The attention cases are attn8a.c; the whole-model tests, the passes and main are gate_8a.c. */
#include "gates/8a/kernels8a.h"
#include "gates/7e/dev7e.h"
#include "phase8a_decode/decode8a.h"
#include "phase7e_perf/perf7e.h"
#include "phase7b_ops/ops7b.h"
#include "phase7d_graphs/graphs7d.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "common/core/mi_canon.h"
#include "common/graph/graph.h"
#include "common/core/mi_fp16.h"
#include "common/quant/mi_types.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static gu_run *g_r;
static cudaStream_t S;
static unsigned long long *g_seed;
static const float EPS = 1e-6f;

static void bind(gu_run *run, cudaStream_t stream, unsigned long long *seed) {
    g_r = run;
    S = stream;
    g_seed = seed;
}

static void dev_down(void *h, const void *d, size_t n) { dev_down_on(S, h, d, n); }

/* the CPU's RMS norm of one row: canonical sum of squares, then (x * scale) * w */
static void host_norm(const float *x, const float *w, float *y, int64_t K) {
    const float scale = mi_canon_rms_scale(mi_canon_sumsq_host(x, K), K, EPS);
    for (int64_t i = 0; i < K; i++) y[i] = (x[i] * scale) * w[i];
}

/* unfused on the device: [rms norm] -> matmul (7b's, or 7e's Q4_K _qx when q4k) -> [+ r] */
static mi_status unfused(mi_type t, bool q4k, const void *dw, const float *dx, const float *dnw, const float *db,
                         const float *dr, float *dxn, float *dy0, float *dy, int64_t K, int64_t M, void *ws) {
    const float *in = dx;
    if (dnw) {
        MI_TRY(mi7e_rms_norm(S, dx, dnw, dxn, K, 1, EPS));
        in = dxn;
    }
    float *mm_out = dr ? dy0 : dy;
    if (q4k) MI_TRY(mi7e_matvec_q4k_qx(S, t, dw, in, db, mm_out, K, M, ws));
    else MI_TRY(mi7b_matmul(S, t, dw, in, db, mm_out, K, M, 1, ws));
    if (dr) MI_TRY(mi7b_binary(S, 0, dr, dy0, dy, M, 1, 1));
    return MI_OK;
}

static void fused_case(mi_type t, bool q4k, int64_t K, int64_t M, bool norm, bool bias, bool res) {
    char name[128];
    snprintf(name, sizeof name, "fused_%s_%s_K%lld_M%lld%s%s%s", q4k ? "q4k" : "rows", mi_type_name(t), (long long)K,
             (long long)M, norm ? "_norm" : "", bias ? "_bias" : "", res ? "_res" : "");
    if (!gu_begin(g_r, name)) return;
    const bool ok = q4k ? mi8a_matvec_q4k_fused_supported(t, K, norm) : mi8a_matvec_fused_supported(t, K, M);
    if (!ok) { gu_fail(g_r, "the kernel refuses a shape it is meant to cover"); return; }
    size_t wb;
    uint8_t *w = gu_make_weights(g_seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(g_seed, (size_t)K, -2.f, 2.f), *nw = gu_rand_f32(g_seed, (size_t)K, 0.5f, 1.5f);
    float *b = gu_rand_f32(g_seed, (size_t)M, -0.5f, 0.5f), *r = gu_rand_f32(g_seed, (size_t)M, -1.f, 1.f);
    float *xn = malloc((size_t)K * 4), *ref = malloc((size_t)M * 4), *got = malloc((size_t)M * 4);
    float *got2 = malloc((size_t)M * 4), *old = malloc((size_t)M * 4);
    if (norm) host_norm(x, nw, xn, K);
    else memcpy(xn, x, (size_t)K * 4);
    cpu_matmul(t, w, xn, bias ? b : NULL, ref, K, M, 1);
    if (res)
        for (int64_t m = 0; m < M; m++) ref[m] = r[m] + ref[m];
    void *bw, *bx, *bn, *bb, *br;
    void *dw = dev_up_at(w, wb, 0, &bw);
    float *dx = dev_up_at(x, (size_t)K * 4, 0, &bx), *dnw = dev_up_at(nw, (size_t)K * 4, 0, &bn);
    float *db = dev_up_at(b, (size_t)M * 4, 0, &bb), *dr = dev_up_at(r, (size_t)M * 4, 0, &br);
    float *dxn = dev_poison((size_t)K * 4), *dy0 = dev_poison((size_t)M * 4), *dy = dev_poison((size_t)M * 4);
    void *ws = dev_poison(mi7b_matmul_workspace(t, K, 1) + 64);
    const float *pn = norm ? dnw : NULL, *pb = bias ? db : NULL, *pr = res ? dr : NULL;
#define RUN_FUSED() (q4k ? mi8a_matvec_q4k_fused(S, t, dw, dx, pn, EPS, pb, pr, dy, K, M) \
                         : mi8a_matvec_fused(S, t, dw, dx, pn, EPS, pb, pr, dy, K, M))
    mi_status st = RUN_FUSED();
    if (st == MI_OK) { dev_down(got, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    if (st == MI_OK) st = RUN_FUSED();
#undef RUN_FUSED
    if (st == MI_OK) { dev_down(got2, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    /* d12's blocks (Q4_K rows of MI8A_WIDE_K or more, no norm) against the unfused 7e kernel, which
     * runs blocks of 256: bit for bit */
    if (st == MI_OK) st = unfused(t, q4k, dw, dx, pn, pb, pr, dxn, dy0, dy, K, M, ws);
    if (st == MI_OK) dev_down(old, dy, (size_t)M * 4);
    if (st != MI_OK) {
        gu_fail(g_r, "launch: %s", mi_errmsg());
    } else {
        const double e_cpu = gu_nmse(got, ref, (size_t)M);
        const size_t d_old = gu_first_diff(got, old, (size_t)M * 4), d_rep = gu_first_diff(got, got2, (size_t)M * 4);
        if (!(e_cpu <= 1e-6) || d_old != (size_t)-1 || d_rep != (size_t)-1) {
            const size_t i = d_old != (size_t)-1 ? d_old / 4 : first_bad(got, ref, (size_t)M, 1e-3, 1.0);
            if (i != (size_t)-1 && i < (size_t)M)
                printf("    %s: row %zu fused %.9g unfused %.9g cpu %.9g\n", name, i, got[i], old[i], ref[i]);
            gu_fail(g_r, "nmse vs cpu %.3g (bound 1e-6); vs unfused %s; repeat %s", e_cpu,
                    d_old == (size_t)-1 ? "bitwise" : "DIFFERS", d_rep == (size_t)-1 ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(g_r, "bit-identical to the unfused kernels and to itself; nmse vs cpu %.3g", e_cpu);
        }
    }
    free(w); free(x); free(nw); free(b); free(r); free(xn); free(ref); free(got); free(got2); free(old);
    cudaFree(bw); cudaFree(bx); cudaFree(bn); cudaFree(bb); cudaFree(br);
    cudaFree(dxn); cudaFree(dy0); cudaFree(dy); cudaFree(ws);
}

/* The norm-folded FFN head against 7e's RMS norm, then the FFN kernel it replaces: d1's Q4_K form
 * (t = Q4_K) against 7e's fused FFN with x quantized in the kernel; d23's staged form (staged)
 * against 7e's staged FFN (7b's quantizer first). Bit for bit; NMSE <= 1e-6 against the CPU; bit
 * for bit against itself on a second run. */
static mi_status ffn_fused_run(mi_type t, bool staged, const void *wg, const void *wu, const float *x, const float *nw,
                               float *y, int64_t K, int64_t F) {
    return staged ? mi8a_ffn_staged_norm(S, t, wg, wu, x, nw, EPS, y, NULL, K, F)
                  : mi8a_ffn_q4k_fused(S, t, wg, wu, x, nw, EPS, y, K, F);
}
static void ffn_case(mi_type t, bool staged, int64_t K, int64_t F) {
    char name[96];
    if (staged) snprintf(name, sizeof name, "staged_norm_ffn_%s_K%lld_F%lld", mi_type_name(t), (long long)K, (long long)F);
    else snprintf(name, sizeof name, "fused_q4k_ffn_K%lld_F%lld_norm", (long long)K, (long long)F);
    if (!gu_begin(g_r, name)) return;
    if (staged && !mi8a_ffn_staged_norm_supported(t, K, F, false)) {
        gu_fail(g_r, "the kernel refuses a shape it is meant to cover");
        return;
    }
    size_t wb;
    uint8_t *wg = gu_make_weights(g_seed, t, K, F, 1.0f, &wb), *wu = gu_make_weights(g_seed, t, K, F, 1.0f, NULL);
    float *x = gu_rand_f32(g_seed, (size_t)K, -2.f, 2.f), *nw = gu_rand_f32(g_seed, (size_t)K, 0.5f, 1.5f);
    float *xn = malloc((size_t)K * 4), *g = malloc((size_t)F * 4), *u = malloc((size_t)F * 4);
    float *got = malloc((size_t)F * 4), *got2 = malloc((size_t)F * 4), *old = malloc((size_t)F * 4);
    host_norm(x, nw, xn, K);
    cpu_matmul(t, wg, xn, NULL, g, K, F, 1);
    cpu_matmul(t, wu, xn, NULL, u, K, F, 1);
    for (int64_t i = 0; i < F; i++) g[i] = mi_canon_swiglu(g[i], u[i]);
    void *bg, *bu, *bx, *bn;
    void *dwg = dev_up_at(wg, wb, 0, &bg), *dwu = dev_up_at(wu, wb, 0, &bu);
    float *dx = dev_up_at(x, (size_t)K * 4, 0, &bx), *dnw = dev_up_at(nw, (size_t)K * 4, 0, &bn);
    float *dxn = dev_poison((size_t)K * 4), *dy = dev_poison((size_t)F * 4);
    const size_t wsb = staged ? mi7e_matvec_staged_workspace(t, K, 1) : mi7b_matmul_workspace(t, K, 1);
    void *ws = dev_poison(wsb + 64);
    mi_status st = ffn_fused_run(t, staged, dwg, dwu, dx, dnw, dy, K, F);
    if (st == MI_OK) { dev_down(got, dy, (size_t)F * 4); CK(cudaMemset(dy, 0xFF, (size_t)F * 4)); }
    if (st == MI_OK) st = ffn_fused_run(t, staged, dwg, dwu, dx, dnw, dy, K, F);
    if (st == MI_OK) { dev_down(got2, dy, (size_t)F * 4); CK(cudaMemset(dy, 0xFF, (size_t)F * 4)); }
    if (st == MI_OK) st = mi7e_rms_norm(S, dx, dnw, dxn, K, 1, EPS);
    if (st == MI_OK) st = staged ? mi7e_ffn_staged(S, t, dwg, dwu, dxn, dy, K, F, 1, ws)
                                 : mi7e_ffn_q4k_qx(S, t, dwg, dwu, dxn, dy, K, F, ws);
    if (st == MI_OK) dev_down(old, dy, (size_t)F * 4);
    /* d29 (F % 32 == 0): y again with its quantized row, against y above and 7b's quantizer of it */
    const bool q = staged && F % 32 == 0 && mi8a_ffn_staged_norm_supported(t, K, F, true);
    size_t d_q = (size_t)-1, d_qy = (size_t)-1;
    if (st == MI_OK && q) {
        const size_t qb = (size_t)(F / 32) * 36;
        uint8_t *yq = dev_poison(qb), *yr = dev_poison(qb), *hq = malloc(qb), *hr = malloc(qb);
        float *gq = malloc((size_t)F * 4);
        CK(cudaMemset(dy, 0xFF, (size_t)F * 4));
        st = mi8a_ffn_staged_norm(S, t, dwg, dwu, dx, dnw, EPS, dy, yq, K, F);
        if (st == MI_OK) st = mi7b_quantize_act(S, t, dy, F, 1, yr);
        if (st == MI_OK) {
            dev_down(gq, dy, (size_t)F * 4);
            dev_down(hq, yq, qb);
            dev_down(hr, yr, qb);
            d_qy = gu_first_diff(gq, got, (size_t)F * 4);
            d_q = gu_first_diff(hq, hr, qb);
        }
        free(hq); free(hr); free(gq);
        cudaFree(yq); cudaFree(yr);
    }
    if (st != MI_OK) {
        gu_fail(g_r, "launch: %s", mi_errmsg());
    } else if (d_q != (size_t)-1 || d_qy != (size_t)-1) {
        gu_fail(g_r, "d29: y %s the plain form's; its quantized row %s 7b's quantizer's (first byte %zd)",
                d_qy == (size_t)-1 ? "equals" : "DIFFERS from", d_q == (size_t)-1 ? "equals" : "DIFFERS from",
                (ssize_t)d_q);
    } else {
        const double e_cpu = gu_nmse(got, g, (size_t)F);
        const size_t d_old = gu_first_diff(got, old, (size_t)F * 4), d_rep = gu_first_diff(got, got2, (size_t)F * 4);
        if (!(e_cpu <= 1e-6) || d_old != (size_t)-1 || d_rep != (size_t)-1) {
            const size_t i = d_old != (size_t)-1 ? d_old / 4 : first_bad(got, g, (size_t)F, 1e-3, 1.0);
            if (i != (size_t)-1 && i < (size_t)F)
                printf("    %s: row %zu fused %.9g unfused %.9g cpu %.9g\n", name, i, got[i], old[i], g[i]);
            gu_fail(g_r, "nmse vs cpu %.3g (bound 1e-6); vs unfused %s; repeat %s", e_cpu,
                    d_old == (size_t)-1 ? "bitwise" : "DIFFERS", d_rep == (size_t)-1 ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(g_r, "bit-identical to 7e's norm + %s FFN and to itself; nmse vs cpu %.3g%s", staged ? "staged" : "fused",
                    e_cpu, q ? "; d29: the same y and 7b's quantizer's bytes of it" : "");
        }
    }
    free(wg); free(wu); free(x); free(nw); free(xn); free(g); free(u); free(got); free(got2); free(old);
    cudaFree(bg); cudaFree(bu); cudaFree(bx); cudaFree(bn); cudaFree(dxn); cudaFree(dy); cudaFree(ws);
}

/* d31: d2's matmul + residual on x quantized by 7b's quantizer beforehand (what the attention
 * hands it) against the same kernel quantizing x itself: bit for bit */
static void fused_qx_case(mi_type t, int64_t K, int64_t M) {
    char name[96];
    snprintf(name, sizeof name, "fused_qx_%s_K%lld_M%lld", mi_type_name(t), (long long)K, (long long)M);
    if (!gu_begin(g_r, name)) return;
    size_t wb;
    uint8_t *w = gu_make_weights(g_seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(g_seed, (size_t)K, -2.f, 2.f), *r = gu_rand_f32(g_seed, (size_t)M, -1.f, 1.f);
    float *y1 = malloc((size_t)M * 4), *y2 = malloc((size_t)M * 4);
    void *bw, *bx, *br;
    const void *dw = dev_up_at(w, wb, 0, &bw);
    const float *dx = dev_up_at(x, (size_t)K * 4, 0, &bx), *dr = dev_up_at(r, (size_t)M * 4, 0, &br);
    float *dy = dev_poison((size_t)M * 4);
    void *ws = dev_poison(mi7b_act_row_bytes(t, K) + 64);
    mi_status st = mi8a_matvec_fused(S, t, dw, dx, NULL, 0.0f, NULL, dr, dy, K, M);
    if (st == MI_OK) { dev_down(y1, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    if (st == MI_OK) st = mi7b_quantize_act(S, t, dx, K, 1, ws);
    if (st == MI_OK) st = mi8a_matvec_fused_qx(S, t, dw, ws, NULL, dr, dy, K, M);
    if (st == MI_OK) dev_down(y2, dy, (size_t)M * 4);
    const size_t d = st == MI_OK ? gu_first_diff(y1, y2, (size_t)M * 4) : 0;
    if (st != MI_OK) gu_fail(g_r, "launch: %s", mi_errmsg());
    else if (d != (size_t)-1) gu_fail(g_r, "row %zu: %.9g from x, %.9g from its quantized row", d / 4, y1[d / 4], y2[d / 4]);
    else gu_pass(g_r, "bit for bit the kernel that quantizes x itself");
    free(w); free(x); free(r); free(y1); free(y2);
    cudaFree(bw); cudaFree(bx); cudaFree(br); cudaFree(dy); cudaFree(ws);
}

void kernels8a_fused(gu_run *run, cudaStream_t stream, unsigned long long *seed) {
    bind(run, stream, seed);
    const mi_type all[] = {MI_TYPE_Q4_0, MI_TYPE_Q4_1, MI_TYPE_Q5_0, MI_TYPE_Q5_1, MI_TYPE_Q8_0,
                           MI_TYPE_Q4_K, MI_TYPE_Q5_K, MI_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        fused_case(all[i], false, 1024, 96, true, true, false);   /* q/k/v with bias */
        fused_case(all[i], false, 1024, 200, false, false, true);   /* o / down + residual */
    }
    fused_case(MI_TYPE_Q4_0, false, 896, 896, true, true, true);     /* 0.5B q */
    fused_case(MI_TYPE_Q4_0, false, 1536, 8960, true, false, false); /* 1.5B ffn gate */
    fused_case(MI_TYPE_Q6_K, false, 1536, 256, true, true, false);   /* 1.5B v */
    fused_case(MI_TYPE_Q4_K, true, 3584, 1024, true, true, false);   /* 7B q's rows */
    fused_case(MI_TYPE_Q4_K, true, 3584, 512, true, true, false);    /* 7B k */
    fused_case(MI_TYPE_Q4_K, true, 3584, 1024, false, false, true);  /* 7B o's rows */
    fused_case(MI_TYPE_Q4_K, true, 18944, 256, false, false, true);  /* 7B down's rows */
    fused_case(MI_TYPE_Q4_K, true, 512, 300, true, true, true);
    fused_case(MI_TYPE_Q4_K, true, 8960, 1536, true, false, true);  /* the longest row the norm form takes */
    ffn_case(MI_TYPE_Q4_K, false, 3584, 2048);   /* 7B's rows */
    ffn_case(MI_TYPE_Q4_K, false, 1024, 1000);
    /* d23's staged form: every 32-element format, the 0.5B's and 1.5B's shapes, one row a block past
     * 8 KB rows (x's copy then in opt-in shared memory), K not a multiple of 256 */
    const mi_type staged[] = {MI_TYPE_Q4_0, MI_TYPE_Q4_1, MI_TYPE_Q5_0, MI_TYPE_Q5_1, MI_TYPE_Q8_0};
    for (size_t i = 0; i < sizeof staged / sizeof staged[0]; i++) ffn_case(staged[i], true, 1024, 1000);
    ffn_case(MI_TYPE_Q4_0, true, 896, 4864);
    ffn_case(MI_TYPE_Q4_0, true, 1536, 8960);
    ffn_case(MI_TYPE_Q8_0, true, 896, 4864);
    ffn_case(MI_TYPE_Q8_0, true, 8960, 300);
    ffn_case(MI_TYPE_Q4_0, true, 2080, 257);
    ffn_case(MI_TYPE_Q5_1, true, 1024, 96);     /* d29: three blocks of 32 rows */
    fused_qx_case(MI_TYPE_Q4_0, 896, 896);      /* d31: the 0.5B's o, the tiny llama's, edges */
    fused_qx_case(MI_TYPE_Q8_0, 256, 256);
    fused_qx_case(MI_TYPE_Q5_1, 1024, 200);
    fused_qx_case(MI_TYPE_Q4_1, 2016, 97);
    ffn_case(MI_TYPE_Q8_0, true, 1024, 1056);
}

/* d13: the rows of n weights of one x in one launch against a launch of each weight (the kernel
 * the run replaces: 8a's Q4_K streaming kernel, or 7b's warp-per-row matmul when rows): bit for
 * bit; against the CPU: NMSE <= 1e-6; against itself on a second run: bit for bit */
/* rows: 7b's order, through matvec_fused's run kernel where it takes the shapes (as d13's last
 * node chooses), else 7b's quantizer and 7b's row body */
/* dnw: d17, x normalized in the run's kernel (weight dnw) */
static mi_status run_launch(mi_type t, bool rows, const mi8a_run_seg *seg, int n, const float *dx, const float *dnw,
                            int64_t K, void *ws) {
    if (!rows) return mi8a_matvec_q4k_run(S, t, seg, n, dx, dnw, EPS, K);
    int64_t M = 0;
    for (int i = 0; i < n; i++) M += seg[i].M;
    if (mi8a_matvec_fused_supported(t, K, M)) return mi8a_matvec_fused_run(S, t, seg, n, dx, dnw, EPS, K);
    if (dnw) return mi_err(MI_ERR_UNSUPPORTED, "d17 takes no 7b-order run matvec_fused does not");
    MI_TRY(mi7b_quantize_act(S, t, dx, K, 1, ws));
    return mi8a_matmul_rows_run(S, t, seg, n, ws, K);
}
/* norm (d17): the run normalizes x itself; the launches a weight read 7e's norm of x, the CPU
 * reference the CPU's */
static void run_case(mi_type t, bool rows, int64_t K, int n, const int64_t *Ms, bool bias, bool norm) {
    char name[96];
    snprintf(name, sizeof name, "run_%s_%s_K%lld_n%d_M%lld%s%s", rows ? "rows" : "q4k", mi_type_name(t), (long long)K, n,
             (long long)Ms[0], bias ? "_bias" : "", norm ? "_norm" : "");
    if (!gu_begin(g_r, name)) return;
    void *ws = dev_poison(mi7b_matmul_workspace(t, K, 1) + 64);
    float *x = gu_rand_f32(g_seed, (size_t)K, -2.f, 2.f), *nw = gu_rand_f32(g_seed, (size_t)K, 0.5f, 1.5f);
    float *xr = malloc((size_t)K * 4);   /* what the matmuls read: x, or its norm */
    if (norm) host_norm(x, nw, xr, K);
    else memcpy(xr, x, (size_t)K * 4);
    void *bx, *bnw;
    float *dx = dev_up_at(x, (size_t)K * 4, 0, &bx), *dnw = dev_up_at(nw, (size_t)K * 4, 0, &bnw);
    float *dxn = dev_poison((size_t)K * 4);
    mi_status st = norm ? mi7e_rms_norm(S, dx, dnw, dxn, K, 1, EPS) : MI_OK;
    const float *dxr = norm ? dxn : dx;
    mi8a_run_seg seg[MI8A_RUN_MAX];
    uint8_t *w[MI8A_RUN_MAX];
    float *b[MI8A_RUN_MAX], *ref[MI8A_RUN_MAX], *got[MI8A_RUN_MAX], *got2[MI8A_RUN_MAX], *one[MI8A_RUN_MAX];
    void *bw[MI8A_RUN_MAX], *bb[MI8A_RUN_MAX];
    float *dy[MI8A_RUN_MAX];
    for (int i = 0; i < n; i++) {
        size_t wb;
        const int64_t M = Ms[i];
        w[i] = gu_make_weights(g_seed, t, K, M, 1.0f, &wb);
        b[i] = gu_rand_f32(g_seed, (size_t)M, -0.5f, 0.5f);
        ref[i] = malloc((size_t)M * 4), got[i] = malloc((size_t)M * 4), got2[i] = malloc((size_t)M * 4);
        one[i] = malloc((size_t)M * 4);
        cpu_matmul(t, w[i], xr, bias ? b[i] : NULL, ref[i], K, M, 1);
        const void *dw = dev_up_at(w[i], wb, 0, &bw[i]);
        const float *db = dev_up_at(b[i], (size_t)M * 4, 0, &bb[i]);
        dy[i] = dev_poison((size_t)M * 4);
        seg[i] = (mi8a_run_seg){dw, bias ? db : NULL, dy[i], M};
    }
    if (st == MI_OK) st = run_launch(t, rows, seg, n, dx, norm ? dnw : NULL, K, ws);
    for (int i = 0; i < n && st == MI_OK; i++) {
        dev_down(got[i], dy[i], (size_t)Ms[i] * 4);
        CK(cudaMemset(dy[i], 0xFF, (size_t)Ms[i] * 4));
    }
    if (st == MI_OK) st = run_launch(t, rows, seg, n, dx, norm ? dnw : NULL, K, ws);
    for (int i = 0; i < n && st == MI_OK; i++) {
        dev_down(got2[i], dy[i], (size_t)Ms[i] * 4);
        CK(cudaMemset(dy[i], 0xFF, (size_t)Ms[i] * 4));
    }
    for (int i = 0; i < n && st == MI_OK; i++) {
        st = rows ? mi7b_matmul(S, t, seg[i].w, dxr, seg[i].bias, dy[i], K, Ms[i], 1, ws)
                  : mi8a_matvec_q4k_fused(S, t, seg[i].w, dxr, NULL, 0.0f, seg[i].bias, NULL, dy[i], K, Ms[i]);
        if (st == MI_OK) dev_down(one[i], dy[i], (size_t)Ms[i] * 4);
    }
    double worst = 0;
    int differ = -1, differ2 = -1;
    for (int i = 0; i < n && st == MI_OK; i++) {
        const double e = gu_nmse(got[i], ref[i], (size_t)Ms[i]);
        if (e > worst || e != e) worst = e;
        if (differ < 0 && gu_first_diff(got[i], one[i], (size_t)Ms[i] * 4) != (size_t)-1) differ = i;
        if (differ2 < 0 && gu_first_diff(got[i], got2[i], (size_t)Ms[i] * 4) != (size_t)-1) differ2 = i;
    }
    if (st != MI_OK) gu_fail(g_r, "launch: %s", mi_errmsg());
    else if (!(worst <= 1e-6) || differ >= 0 || differ2 >= 0)
        gu_fail(g_r, "nmse vs cpu %.3g (bound 1e-6); vs a launch a weight: %s (weight %d); repeat %s", worst,
                differ < 0 ? "bitwise" : "DIFFERS", differ, differ2 < 0 ? "bitwise" : "DIFFERS");
    else gu_pass(g_r, "%d weights in one launch: bit-identical to a launch each and to itself; nmse vs cpu %.3g", n,
                 worst);
    for (int i = 0; i < n; i++) {
        free(w[i]); free(b[i]); free(ref[i]); free(got[i]); free(got2[i]); free(one[i]);
        cudaFree(bw[i]); cudaFree(bb[i]); cudaFree(dy[i]);
    }
    free(x), free(nw), free(xr);
    cudaFree(bx), cudaFree(bnw), cudaFree(dxn);
    cudaFree(ws);
}

void kernels8a_run(gu_run *run, cudaStream_t stream, unsigned long long *seed) {
    bind(run, stream, seed);
    const int64_t qkv[3] = {3584, 512, 512}, qk[2] = {3584, 512}, odd[4] = {77, 300, 8, 1024};
    const int64_t qkv05[3] = {896, 128, 128};
    run_case(MI_TYPE_Q4_K, false, 3584, 3, qkv, true, false);    /* the 7B's q, k, v (Q4_K layers) */
    run_case(MI_TYPE_Q4_K, false, 3584, 2, qk, true, false);     /* q, k (the layers whose v is Q6_K) */
    run_case(MI_TYPE_Q4_K, false, 1024, 4, odd, false, false);   /* uneven segments, rows not a multiple of a block's 8 */
    run_case(MI_TYPE_Q4_K, false, 18944, 3, qkv, false, false);  /* four iterations a row */
    run_case(MI_TYPE_Q4_0, true, 896, 3, qkv05, true, false);    /* the 0.5B's q, k, v on 7b's kernel */
    run_case(MI_TYPE_Q8_0, true, 1024, 4, odd, false, false);
    run_case(MI_TYPE_Q6_K, true, 1536, 2, qk, true, false);      /* a K-quant on 7b's kernel */
    run_case(MI_TYPE_Q4_K, false, 3584, 3, qkv, true, true);     /* d17: the 7B's q, k, v with the attention norm */
    run_case(MI_TYPE_Q4_K, false, 3584, 2, qk, true, true);
    run_case(MI_TYPE_Q4_0, true, 896, 3, qkv05, true, true);     /* the 0.5B's */
    run_case(MI_TYPE_Q8_0, true, 1024, 4, odd, false, true);
    run_case(MI_TYPE_Q4_0, true, 2048, 3, qkv05, true, false);   /* rows too long for matvec_fused: 7b's body */
    run_case(MI_TYPE_Q4_K, true, 4096, 2, qk, false, false);
}

/* d11's Q6_K kernel against the CPU (nmse), against itself on a second run (bitwise) and against
 * 7e's staged kernel plus 7b's add (the same integer unit sums added in another order: within
 * rounding); bases 4-byte aligned, rows of an odd number of super-blocks 2 mod 4 */
static void q6k_case(int64_t K, int64_t M, bool bias, bool res) {
    char name[96];
    snprintf(name, sizeof name, "q6k_K%lld_M%lld%s%s", (long long)K, (long long)M, bias ? "_bias" : "",
             res ? "_res" : "");
    if (!gu_begin(g_r, name)) return;
    const mi_type t = MI_TYPE_Q6_K;
    if (!mi8a_matvec_q6k_supported(t, K)) { gu_fail(g_r, "the kernel refuses a shape it is meant to cover"); return; }
    size_t wb;
    uint8_t *w = gu_make_weights(g_seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(g_seed, (size_t)K, -2.f, 2.f), *b = gu_rand_f32(g_seed, (size_t)M, -0.5f, 0.5f);
    float *r = gu_rand_f32(g_seed, (size_t)M, -1.f, 1.f);
    float *ref = malloc((size_t)M * 4), *got = malloc((size_t)M * 4), *got2 = malloc((size_t)M * 4);
    float *old = malloc((size_t)M * 4);
    cpu_matmul(t, w, x, bias ? b : NULL, ref, K, M, 1);
    if (res)
        for (int64_t m = 0; m < M; m++) ref[m] = r[m] + ref[m];
    void *bw, *bx, *bb, *br;
    void *dw = dev_up_at(w, wb, 0, &bw);
    float *dx = dev_up_at(x, (size_t)K * 4, 0, &bx), *db = dev_up_at(b, (size_t)M * 4, 0, &bb);
    float *dr = dev_up_at(r, (size_t)M * 4, 0, &br);
    float *dy0 = dev_poison((size_t)M * 4), *dy = dev_poison((size_t)M * 4);
    const size_t wsb = mi8a_matvec_q6k_workspace(K) > mi7e_matvec_staged_workspace(t, K, 1)
                           ? mi8a_matvec_q6k_workspace(K) : mi7e_matvec_staged_workspace(t, K, 1);
    void *ws = dev_poison(wsb + 64);
    const float *pb = bias ? db : NULL, *pr = res ? dr : NULL;
    mi_status st = mi8a_matvec_q6k(S, dw, dx, pb, pr, dy, K, M, ws);
    if (st == MI_OK) { dev_down(got, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    if (st == MI_OK) st = mi8a_matvec_q6k(S, dw, dx, pb, pr, dy, K, M, ws);
    if (st == MI_OK) { dev_down(got2, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    /* rows long enough for d12: the kernel in blocks of 256 threads on 7b's quantizer's row (d12,
     * d40 and d44 off) gives the same bits as one block an SM quantizing x itself (d44) */
    const bool wide = K >= MI8A_WIDE_K;
    size_t d_narrow = (size_t)-1;
    if (st == MI_OK && wide) {
        st = mi_cuda_items_set_off("d12,d40,d44");
        if (st == MI_OK) st = mi8a_matvec_q6k(S, dw, dx, pb, pr, dy, K, M, ws);
        mi_cuda_items_set_off("");
        if (st == MI_OK) { dev_down(old, dy, (size_t)M * 4); d_narrow = gu_first_diff(got, old, (size_t)M * 4); }
    }
    if (st == MI_OK) st = mi7e_matvec_staged(S, t, dw, dx, pb, res ? dy0 : dy, K, M, 1, ws);
    if (st == MI_OK && res) st = mi7b_binary(S, 0, dr, dy0, dy, M, 1, 1);
    if (st == MI_OK) dev_down(old, dy, (size_t)M * 4);
    if (st != MI_OK) {
        gu_fail(g_r, "launch: %s", mi_errmsg());
    } else {
        const double e_cpu = gu_nmse(got, ref, (size_t)M), e_old = gu_nmse(got, old, (size_t)M);
        const size_t d_rep = gu_first_diff(got, got2, (size_t)M * 4);
        if (!(e_cpu <= 1e-6) || !(e_old <= 1e-6) || d_rep != (size_t)-1 || d_narrow != (size_t)-1) {
            const size_t i = first_bad(got, ref, (size_t)M, 1e-3, 1.0);
            if (i != (size_t)-1 && i < (size_t)M) printf("    %s: row %zu got %.9g staged %.9g cpu %.9g\n", name, i, got[i], old[i], ref[i]);
            gu_fail(g_r, "nmse vs cpu %.3g, vs 7e's staged %.3g (bound 1e-6); repeat %s; d12 off %s", e_cpu, e_old,
                    d_rep == (size_t)-1 ? "bitwise" : "DIFFERS", d_narrow == (size_t)-1 ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(g_r, "nmse vs cpu %.3g, vs 7e's staged kernel %.3g; repeat bitwise%s", e_cpu, e_old,
                    wide ? "; blocks of 256 on 7b's quantizer (d12, d40, d44 off) bitwise" : "");
        }
    }
    free(w); free(x); free(b); free(r); free(ref); free(got); free(got2); free(old);
    cudaFree(bw); cudaFree(bx); cudaFree(bb); cudaFree(br); cudaFree(dy0); cudaFree(dy); cudaFree(ws);
}

/* d43's Q6_K form with the norm folded in against 7e's RMS norm followed by d11's kernel (on 7b's
 * quantizer's row): bit for bit; against itself on a second run: bit for bit */
static void q6k_norm_case(int64_t K, int64_t M, bool bias) {
    char name[96];
    snprintf(name, sizeof name, "q6k_norm_K%lld_M%lld%s", (long long)K, (long long)M, bias ? "_bias" : "");
    if (!gu_begin(g_r, name)) return;
    const mi_type t = MI_TYPE_Q6_K;
    if (!mi8a_matvec_q6k_norm_supported(K)) { gu_fail(g_r, "the kernel refuses a shape it is meant to cover"); return; }
    size_t wb;
    uint8_t *w = gu_make_weights(g_seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(g_seed, (size_t)K, -2.f, 2.f), *nw = gu_rand_f32(g_seed, (size_t)K, 0.5f, 1.5f);
    float *b = gu_rand_f32(g_seed, (size_t)M, -0.5f, 0.5f);
    float *got = malloc((size_t)M * 4), *got2 = malloc((size_t)M * 4), *want = malloc((size_t)M * 4);
    void *bw, *bx, *bn, *bb;
    void *dw = dev_up_at(w, wb, 0, &bw);
    float *dx = dev_up_at(x, (size_t)K * 4, 0, &bx), *dnw = dev_up_at(nw, (size_t)K * 4, 0, &bn);
    float *db = dev_up_at(b, (size_t)M * 4, 0, &bb), *dxn = dev_poison((size_t)K * 4), *dy = dev_poison((size_t)M * 4);
    void *ws = dev_poison(mi8a_matvec_q6k_workspace(K) + 64);
    const float *pb = bias ? db : NULL;
    mi_status st = mi8a_matvec_q6k_norm(S, dw, dx, dnw, EPS, pb, dy, K, M);
    if (st == MI_OK) { dev_down(got, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    if (st == MI_OK) st = mi8a_matvec_q6k_norm(S, dw, dx, dnw, EPS, pb, dy, K, M);
    if (st == MI_OK) { dev_down(got2, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    if (st == MI_OK) st = mi7e_rms_norm(S, dx, dnw, dxn, K, 1, EPS);
    if (st == MI_OK) st = mi_cuda_items_set_off("d44");
    if (st == MI_OK) st = mi8a_matvec_q6k(S, dw, dxn, pb, NULL, dy, K, M, ws);
    mi_cuda_items_set_off("");
    if (st == MI_OK) dev_down(want, dy, (size_t)M * 4);
    if (st != MI_OK) {
        gu_fail(g_r, "launch: %s", mi_errmsg());
    } else {
        const size_t d = gu_first_diff(got, want, (size_t)M * 4), d_rep = gu_first_diff(got, got2, (size_t)M * 4);
        if (d != (size_t)-1 || d_rep != (size_t)-1) {
            if (d != (size_t)-1) printf("    %s: row %zu got %.9g unfused %.9g\n", name, d / 4, got[d / 4], want[d / 4]);
            gu_fail(g_r, "against the norm kernel then d11's: %s; repeat %s", d == (size_t)-1 ? "bitwise" : "DIFFERS",
                    d_rep == (size_t)-1 ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(g_r, "bit for bit the norm kernel followed by d11's kernel; repeat bitwise");
        }
    }
    free(w); free(x); free(nw); free(b); free(got); free(got2); free(want);
    cudaFree(bw); cudaFree(bx); cudaFree(bn); cudaFree(bb); cudaFree(dxn); cudaFree(dy); cudaFree(ws);
}

void kernels8a_q6k(gu_run *run, cudaStream_t stream, unsigned long long *seed) {
    bind(run, stream, seed);
    q6k_norm_case(3584, 512, true);        /* 7B v (Q6_K layers) */
    q6k_norm_case(3584, 1000, false);      /* 7B output head's rows */
    q6k_norm_case(1280, 77, true);         /* odd super-blocks a row */
    q6k_norm_case(256, 33, false);
    q6k_norm_case(8960, 64, false);        /* about the longest row its shared memory takes */
    q6k_case(3584, 512, false, false);     /* 7B v (Q6_K layers) */
    q6k_case(18944, 256, false, true);     /* 7B down's rows + residual */
    q6k_case(3584, 1000, false, false);    /* 7B output head's rows */
    q6k_case(1536, 256, true, false);      /* 1.5B v with bias */
    q6k_case(1280, 77, true, true);        /* odd super-blocks a row: rows 2 mod 4 */
    q6k_case(256, 33, false, true);
}

/* d8's RoPE against 7b's kernel (bit for bit) and the CPU's canonical angle (mi_canon_rope_cs,
 * bit for bit), and against itself on a second run: N tokens at positions spread over 0..65535
 * with the edges, every pair of every head. */
static void rope_case(int64_t hd, int64_t H, int64_t N, int n_rot, int mode, float base) {
    char name[128];
    snprintf(name, sizeof name, "rope_pairs_hd%lld_H%lld_N%lld_rot%d_%s_base%g", (long long)hd, (long long)H,
             (long long)N, n_rot, mode == MI_ROPE_NEOX ? "neox" : "normal", base);
    if (!gu_begin(g_r, name)) return;
    const size_t n = (size_t)(hd * H * N);
    float *x = gu_rand_f32(g_seed, n, -4.f, 4.f), *ref = malloc(n * 4), *got = malloc(n * 4), *got2 = malloc(n * 4),
          *old = malloc(n * 4);
    int32_t *pos = malloc((size_t)N * 4);
    for (int64_t t = 0; t < N; t++)
        pos[t] = t == 0 ? 0 : t == 1 ? 1 : t == 2 ? 65535 : (int32_t)(gu_rng(g_seed) % 65536u);
    const int half = n_rot / 2;
    for (int64_t t = 0; t < N; t++)
        for (int64_t h = 0; h < H; h++) {
            const float *xh = x + (size_t)(t * H + h) * (size_t)hd;
            float *y = ref + (size_t)(t * H + h) * (size_t)hd;
            for (int i = 0; i < half; i++) {
                float c, sn;
                mi_canon_rope_cs(pos[t], i, n_rot, base, &c, &sn);
                const int i0 = mode == MI_ROPE_NEOX ? i : 2 * i, i1 = mode == MI_ROPE_NEOX ? i + half : 2 * i + 1;
                const float a = xh[i0] * c, b = xh[i1] * sn, d = xh[i0] * sn, e = xh[i1] * c;
                y[i0] = a - b;
                y[i1] = d + e;
            }
            for (int64_t d = n_rot; d < hd; d++) y[d] = xh[d];
        }
    void *bx, *bp;
    float *dx = dev_up_at(x, n * 4, 0, &bx), *dy = dev_poison(n * 4);
    int32_t *dp = dev_up_at(pos, (size_t)N * 4, 0, &bp);
    mi_status st = mi8a_rope_pairs(S, dx, dp, dy, hd, H, N, mode, n_rot, base);
    if (st == MI_OK) { dev_down(got, dy, n * 4); CK(cudaMemset(dy, 0xFF, n * 4)); }
    if (st == MI_OK) st = mi8a_rope_pairs(S, dx, dp, dy, hd, H, N, mode, n_rot, base);
    if (st == MI_OK) { dev_down(got2, dy, n * 4); CK(cudaMemset(dy, 0xFF, n * 4)); }
    if (st == MI_OK) st = mi7b_rope(S, dx, dp, dy, hd, H, N, mode, n_rot, base);
    if (st == MI_OK) dev_down(old, dy, n * 4);
    if (st != MI_OK) {
        gu_fail(g_r, "launch: %s", mi_errmsg());
    } else {
        const size_t d_old = gu_first_diff(got, old, n * 4), d_cpu = gu_first_diff(got, ref, n * 4),
                     d_rep = gu_first_diff(got, got2, n * 4), d_7b = gu_first_diff(old, ref, n * 4);
        if (d_old != (size_t)-1 || d_rep != (size_t)-1 || d_cpu != (size_t)-1) {
            const size_t i = (d_old != (size_t)-1 ? d_old : d_cpu != (size_t)-1 ? d_cpu : d_rep) / 4;
            printf("    %s: element %zu (token %zu, dim %zu) d8 %.9g 7b %.9g cpu %.9g\n", name, i, i / (size_t)(hd * H),
                   i % (size_t)hd, got[i], old[i], ref[i]);
            gu_fail(g_r, "vs 7b's kernel %s, vs the CPU's angle %s (7b vs CPU %s), repeat %s",
                    d_old == (size_t)-1 ? "bitwise" : "DIFFERS", d_cpu == (size_t)-1 ? "bitwise" : "DIFFERS",
                    d_7b == (size_t)-1 ? "bitwise" : "differs", d_rep == (size_t)-1 ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(g_r, "%zu elements bit-identical to 7b's kernel, to the CPU's angle and to itself", n);
        }
    }
    free(x); free(ref); free(got); free(got2); free(old); free(pos);
    cudaFree(bx); cudaFree(bp); cudaFree(dy);
}

void kernels8a_rope(gu_run *run, cudaStream_t stream, unsigned long long *seed) {
    bind(run, stream, seed);
    rope_case(64, 14, 1, 64, MI_ROPE_NEOX, 1000000.0f);     /* the 0.5B's q, one token */
    rope_case(64, 2, 1, 64, MI_ROPE_NEOX, 1000000.0f);      /* its k */
    rope_case(128, 28, 1, 128, MI_ROPE_NEOX, 1000000.0f);   /* the 7B's q */
    rope_case(128, 4, 512, 128, MI_ROPE_NEOX, 1000000.0f);  /* its k over a prompt */
    rope_case(64, 9, 300, 64, MI_ROPE_NORMAL, 10000.0f);    /* llama order, base 1e4 */
    rope_case(128, 8, 1024, 128, MI_ROPE_NORMAL, 500000.0f);/* Llama 3's base */
    rope_case(128, 3, 17, 64, MI_ROPE_NEOX, 10000.0f);      /* partial rotation: dims 64..127 copied */
    rope_case(80, 5, 33, 32, MI_ROPE_NORMAL, 10000.0f);
}

/* d14's one launch against the four it replaces (d8's RoPE of q and of k, 7b's stores of the
 * rotated k and of v; with a device n_past, 7d's stores): q's and k's RoPE outputs and both whole
 * caches bit for bit (rows other than n_past keep their contents), and against itself on a
 * second run. The caches start as random rows. */
static void rope_kv_case(int64_t hd, int64_t Hq, int64_t Hkv, int n_rot, int mode, float base, mi_type ct,
                         int64_t n_past, int64_t n_ctx, bool dev_np) {
    char name[128];
    snprintf(name, sizeof name, "rope_kv_hd%lld_Hq%lld_Hkv%lld_rot%d_%s_%s_past%lld%s", (long long)hd, (long long)Hq,
             (long long)Hkv, n_rot, mode == MI_ROPE_NEOX ? "neox" : "normal", mi_type_name(ct), (long long)n_past,
             dev_np ? "_dev" : "");
    if (!gu_begin(g_r, name)) return;
    const int64_t nq = hd * Hq, row = hd * Hkv;
    const size_t es = ct == MI_TYPE_F16 ? 2 : 4, cb = (size_t)(row * n_ctx) * es;
    float *q = gu_rand_f32(g_seed, (size_t)nq, -4.f, 4.f), *k = gu_rand_f32(g_seed, (size_t)row, -4.f, 4.f),
          *v = gu_rand_f32(g_seed, (size_t)row, -4.f, 4.f);
    uint8_t *c0 = malloc(cb);
    for (size_t i = 0; i < cb; i++) c0[i] = (uint8_t)(gu_rng(g_seed) & 0x3Bu);   /* finite halves and floats */
    int32_t pos = (int32_t)(n_past + 7), np32 = (int32_t)n_past;
    void *bq, *bk, *bv, *bp, *bn, *bkc, *bvc;
    float *dq = dev_up_at(q, (size_t)nq * 4, 0, &bq), *dk = dev_up_at(k, (size_t)row * 4, 0, &bk);
    float *dv = dev_up_at(v, (size_t)row * 4, 0, &bv);
    int32_t *dp = dev_up_at(&pos, 4, 0, &bp), *dnp = dev_up_at(&np32, 4, 0, &bn);
    void *dkc = dev_up_at(c0, cb, 0, &bkc), *dvc = dev_up_at(c0, cb, 0, &bvc);
    float *dyq = dev_poison((size_t)nq * 4), *dyk = dev_poison((size_t)row * 4);
    float *yq[3] = {malloc((size_t)nq * 4), malloc((size_t)nq * 4), malloc((size_t)nq * 4)};
    float *yk[3] = {malloc((size_t)row * 4), malloc((size_t)row * 4), malloc((size_t)row * 4)};
    uint8_t *ck[3] = {malloc(cb), malloc(cb), malloc(cb)}, *cv[3] = {malloc(cb), malloc(cb), malloc(cb)};
    mi8a_rope_kv_io io = {dq, dk, dv, dyq, dyk, dkc, dvc, dp, dev_np ? dnp : NULL, dev_np ? dnp : NULL,
                          dev_np ? -1 : n_past, dev_np ? -1 : n_past, n_ctx, n_ctx};
    mi_status st = MI_OK;
    for (int r = 0; r < 3 && st == MI_OK; r++) {   /* 0, 1: d14 twice; 2: the four launches */
        CK(cudaMemcpy(dkc, c0, cb, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dvc, c0, cb, cudaMemcpyHostToDevice));
        CK(cudaMemset(dyq, 0xFF, (size_t)nq * 4));
        CK(cudaMemset(dyk, 0xFF, (size_t)row * 4));
        if (r < 2) {
            st = mi8a_rope_kv(S, &io, ct, hd, Hq, Hkv, mode, n_rot, base);
        } else {
            st = mi8a_rope_pairs(S, dq, dp, dyq, hd, Hq, 1, mode, n_rot, base);
            if (st == MI_OK) st = mi8a_rope_pairs(S, dk, dp, dyk, hd, Hkv, 1, mode, n_rot, base);
            if (st == MI_OK)
                st = dev_np ? mi7d_kv_store(S, dyk, dkc, ct, row, 1, dnp, n_ctx) : mi7b_kv_store(S, dyk, dkc, ct, row, 1, n_past);
            if (st == MI_OK)
                st = dev_np ? mi7d_kv_store(S, dv, dvc, ct, row, 1, dnp, n_ctx) : mi7b_kv_store(S, dv, dvc, ct, row, 1, n_past);
        }
        if (st == MI_OK) {
            dev_down(yq[r], dyq, (size_t)nq * 4);
            dev_down(yk[r], dyk, (size_t)row * 4);
            dev_down(ck[r], dkc, cb);
            dev_down(cv[r], dvc, cb);
        }
    }
    if (st != MI_OK) {
        gu_fail(g_r, "launch: %s", mi_errmsg());
    } else {
        const size_t dq4 = gu_first_diff(yq[0], yq[2], (size_t)nq * 4), dk4 = gu_first_diff(yk[0], yk[2], (size_t)row * 4),
                     dck = gu_first_diff(ck[0], ck[2], cb), dcv = gu_first_diff(cv[0], cv[2], cb);
        const bool rep = !memcmp(yq[0], yq[1], (size_t)nq * 4) && !memcmp(yk[0], yk[1], (size_t)row * 4) &&
                         !memcmp(ck[0], ck[1], cb) && !memcmp(cv[0], cv[1], cb);
        const bool wrote = memcmp(ck[2], c0, cb) && memcmp(cv[2], c0, cb);   /* the reference stored something */
        if (dq4 != (size_t)-1 || dk4 != (size_t)-1 || dck != (size_t)-1 || dcv != (size_t)-1 || !rep || !wrote)
            gu_fail(g_r, "vs d8 + the stores: q RoPE %s (first byte %zd), k RoPE %s (%zd), K cache %s (%zd), V cache %s "
                         "(%zd); repeat %s; reference wrote the caches: %s", dq4 == (size_t)-1 ? "bitwise" : "DIFFERS",
                    (ssize_t)dq4, dk4 == (size_t)-1 ? "bitwise" : "DIFFERS", (ssize_t)dk4,
                    dck == (size_t)-1 ? "bitwise" : "DIFFERS", (ssize_t)dck, dcv == (size_t)-1 ? "bitwise" : "DIFFERS",
                    (ssize_t)dcv, rep ? "bitwise" : "DIFFERS", wrote ? "yes" : "NO");
        else
            gu_pass(g_r, "q and k RoPE and both caches (%lld rows) bit-identical to d8's RoPE and %s stores, and to "
                         "itself", (long long)n_ctx, dev_np ? "7d's" : "7b's");
    }
    free(q), free(k), free(v), free(c0);
    for (int r = 0; r < 3; r++) free(yq[r]), free(yk[r]), free(ck[r]), free(cv[r]);
    cudaFree(bq), cudaFree(bk), cudaFree(bv), cudaFree(bp), cudaFree(bn), cudaFree(bkc), cudaFree(bvc);
    cudaFree(dyq), cudaFree(dyk);
}

void kernels8a_rope_kv(gu_run *run, cudaStream_t stream, unsigned long long *seed) {
    bind(run, stream, seed);
    rope_kv_case(128, 28, 4, 128, MI_ROPE_NEOX, 1000000.0f, MI_TYPE_F16, 9, 64, true);    /* the 7B's step */
    rope_kv_case(128, 28, 4, 128, MI_ROPE_NEOX, 1000000.0f, MI_TYPE_F16, 63, 64, false);  /* the last row */
    rope_kv_case(64, 14, 2, 64, MI_ROPE_NEOX, 1000000.0f, MI_TYPE_F16, 0, 32, true);      /* the 0.5B's */
    rope_kv_case(64, 8, 4, 64, MI_ROPE_NORMAL, 10000.0f, MI_TYPE_F32, 5, 16, false);      /* llama order, F32 */
    rope_kv_case(128, 6, 2, 64, MI_ROPE_NEOX, 10000.0f, MI_TYPE_F16, 30, 40, true);       /* partial rotation */
    rope_kv_case(80, 5, 5, 32, MI_ROPE_NORMAL, 500000.0f, MI_TYPE_F32, 3, 8, true);
}

static int32_t host_argmax(const float *x, int64_t V) {
    int64_t best = -1;
    float bv = 0.0f;
    for (int64_t i = 0; i < V; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > bv)) {
            bv = x[i];
            best = i;
        }
    return (best >= 0 && isfinite(bv)) ? (int32_t)best : -1;
}

/* rows of V (x on the device, at byte offset off from a 16-byte boundary) through mi8a_argmax with
 * the items in off_items off; the first row whose index is not the rule's, or -1 (-2: the launch
 * failed, its message in mi_errmsg) */
static int argmax_rows_check(const float *x, int64_t V, int64_t N, size_t off, const char *off_items, int32_t *got,
                             const int32_t *want) {
    void *bx;
    float *dx = dev_up_at(x, (size_t)(V * N) * 4, off, &bx);
    int32_t *dout = dev_poison((size_t)N * sizeof *got);
    mi_status st = mi_cuda_items_set_off(off_items);
    if (st == MI_OK) st = mi8a_argmax(S, dx, dout, V, N);
    if (st == MI_OK) dev_down(got, dout, (size_t)N * sizeof *got);
    mi_cuda_items_set_off("");
    cudaFree(bx);
    cudaFree(dout);
    if (st != MI_OK) return -2;
    for (int k = 0; k < N; k++)
        if (got[k] != want[k]) return k;
    return -1;
}

void kernels8a_argmax(gu_run *run, cudaStream_t stream, unsigned long long *seed) {
    bind(run, stream, seed);
    if (!gu_begin(g_r, "argmax_rows")) return;
    /* V not a multiple of 4: the rows start at every 4-byte offset from a 16-byte boundary */
    const int64_t V = 151937, N = 12;
    float *x = gu_rand_f32(g_seed, (size_t)(V * N), -30.f, 30.f);
    float *r;
    r = x + 1 * V; r[5] = r[77] = r[150000] = 99.f;                     /* ties: the first */
    r = x + 2 * V; for (int64_t i = 0; i < V; i++) r[i] = NAN;           /* all NaN: -1 */
    r = x + 3 * V; r[9] = NAN; r[10] = 1e9f;                             /* NaN never wins */
    r = x + 4 * V; r[123] = INFINITY;                                    /* an infinite max: -1 */
    r = x + 5 * V; for (int64_t i = 0; i < V; i++) r[i] = -INFINITY; r[V - 1] = -1.f;   /* the last */
    r = x + 6 * V; for (int64_t i = 0; i < V; i++) r[i] = 0.0f; r[3] = -0.0f;   /* equal zeros: 0 */
    r = x + 7 * V; for (int64_t i = 0; i < V; i++) r[i] = -INFINITY;     /* no finite max: -1 */
    r = x + 0 * V; r[100] = r[140000] = 60.f;                          /* ties far apart */
    r = x + 8 * V; r[V - 1] = 50.f;                                      /* the last element */
    /* d45's chunks (L = 18,996 at this V, the first ending at a0 + L, a0 = 3 or 2 for row 9 at the
     * two offsets below): a tie across the first edge, a tie inside the last chunk's scalar tail,
     * the max in the first chunk's scalar head */
    r = x + 9 * V; r[18997] = r[18998] = r[18999] = 70.f;
    r = x + 10 * V; r[V - 2] = r[V - 1] = 80.f;
    r = x + 11 * V; r[1] = 90.f;
    /* d45 off (one block a row) and on (a cluster a row; the same where the build or device lacks
     * clusters), at the first offset and at 4 bytes past a boundary; then the shapes whose chunks
     * are empty or partial (V below the split's 8 x 4), aligned vocabularies, one row */
    static const struct { int64_t V, N; size_t off; } shapes[] = {
        {151937, 12, 0}, {151937, 12, 4}, {152064, 3, 0}, {151936, 1, 12}, {37, 5, 8}, {3, 2, 4}, {1, 1, 0}};
    int32_t want[12], got[12];
    int bad = -1, si = 0, form = 0;
    for (si = 0; si < (int)(sizeof shapes / sizeof *shapes) && bad == -1; si++) {
        const int64_t Vs = shapes[si].V, Ns = shapes[si].N;
        for (int64_t k = 0; k < Ns; k++) want[k] = host_argmax(x + k * Vs, Vs);   /* x's first Vs * Ns values */
        for (form = 0; form < 2 && bad == -1; form++)
            bad = argmax_rows_check(x, Vs, Ns, shapes[si].off, form ? "" : "d45", got, want);
    }
    if (bad == -2) gu_fail(g_r, "V = %lld, d45 %s: launch: %s", (long long)shapes[si - 1].V, form - 1 ? "on" : "off",
                           mi_errmsg());
    else if (bad >= 0)
        gu_fail(g_r, "V = %lld, N = %lld, +%zu bytes, d45 %s: row %d: %d, want %d", (long long)shapes[si - 1].V,
                (long long)shapes[si - 1].N, shapes[si - 1].off, form - 1 ? "on" : "off", bad, got[bad], want[bad]);
    else gu_pass(g_r, "%d shapes (V 1..152,064, 1..12 rows, rows at every 4-byte offset; ties, NaN, infinities, "
                      "d45's chunk edges, random), d45 off and on: every index the rule's", si);
    free(x);
}

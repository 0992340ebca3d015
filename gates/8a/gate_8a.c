/* gate_8a: phase 8a's fused decode kernels and fusion pass on the device.
 *  fused_*   each fused kernel against the same work done unfused on the device (7e's RMS
 *            norm, then 7b's matmul or 7e's Q4_K streaming matmul, then 7b's add): bit for bit;
 *            against the CPU reference (scalar dots of the canonically normalized x): NMSE
 *            <= 1e-6; and against itself on a second run: bit for bit
 *  model_*   a whole model, prefill + teacher-forced decode steps, with d1 and d2 on against
 *            both off: the fusion pass fused nodes, each decode step launched fewer kernels,
 *            the logits are bit-identical (every fused kernel computes exactly the unfused
 *            kernels' arithmetic in their order)
 * Every earlier gate runs at PHASE=8a too (make gate-8a). */
#include "gates/gate_util.h"
#include "gates/7e/dev7e.h"
#include "phase8a_decode/decode8a.h"
#include "phase7e_perf/perf7e.h"
#include "phase7b_ops/ops7b.h"
#include "phase7c_wiring/wiring7c.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "common/model/mi.h"
#include "common/backend/backend.h"
#include "common/backend/sched.h"
#include "common/graph/graph.h"
#include "common/core/mi_canon.h"
#include "common/core/mi_fp16.h"
#include "common/sampler/sampler.h"
#include "common/quant/mi_types.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

static gu_run R;
static cudaStream_t S;
static unsigned long long g_seed = 0x8a8a8a8aULL;
static char g_minfer[2048];
static const float EPS = 1e-6f;

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
    gu_begin(&R, name);
    const bool ok = q4k ? mi8a_matvec_q4k_fused_supported(t, K, norm) : mi8a_matvec_fused_supported(t, K, M);
    if (!ok) { gu_fail(&R, "the kernel refuses a shape it is meant to cover"); return; }
    size_t wb;
    uint8_t *w = gu_make_weights(&g_seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(&g_seed, (size_t)K, -2.f, 2.f), *nw = gu_rand_f32(&g_seed, (size_t)K, 0.5f, 1.5f);
    float *b = gu_rand_f32(&g_seed, (size_t)M, -0.5f, 0.5f), *r = gu_rand_f32(&g_seed, (size_t)M, -1.f, 1.f);
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
    if (st == MI_OK) st = unfused(t, q4k, dw, dx, pn, pb, pr, dxn, dy0, dy, K, M, ws);
    if (st == MI_OK) dev_down(old, dy, (size_t)M * 4);
    if (st != MI_OK) {
        gu_fail(&R, "launch: %s", mi_errmsg());
    } else {
        const double e_cpu = gu_nmse(got, ref, (size_t)M);
        const size_t d_old = gu_first_diff(got, old, (size_t)M * 4), d_rep = gu_first_diff(got, got2, (size_t)M * 4);
        if (!(e_cpu <= 1e-6) || d_old != (size_t)-1 || d_rep != (size_t)-1) {
            const size_t i = d_old != (size_t)-1 ? d_old / 4 : first_bad(got, ref, (size_t)M, 1e-3, 1.0);
            if (i != (size_t)-1 && i < (size_t)M)
                printf("    %s: row %zu fused %.9g unfused %.9g cpu %.9g\n", name, i, got[i], old[i], ref[i]);
            gu_fail(&R, "nmse vs cpu %.3g (bound 1e-6); vs unfused %s; repeat %s", e_cpu,
                    d_old == (size_t)-1 ? "bitwise" : "DIFFERS", d_rep == (size_t)-1 ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(&R, "bit-identical to the unfused kernels and to itself; nmse vs cpu %.3g", e_cpu);
        }
    }
    free(w); free(x); free(nw); free(b); free(r); free(xn); free(ref); free(got); free(got2); free(old);
    cudaFree(bw); cudaFree(bx); cudaFree(bn); cudaFree(bb); cudaFree(br);
    cudaFree(dxn); cudaFree(dy0); cudaFree(dy); cudaFree(ws);
}

/* norm-folded FFN head on Q4_K vs 7e's RMS norm + 7e's fused FFN (x quantized in the kernel) */
static void ffn_case(int64_t K, int64_t F) {
    char name[96];
    snprintf(name, sizeof name, "fused_q4k_ffn_K%lld_F%lld_norm", (long long)K, (long long)F);
    gu_begin(&R, name);
    const mi_type t = MI_TYPE_Q4_K;
    size_t wb;
    uint8_t *wg = gu_make_weights(&g_seed, t, K, F, 1.0f, &wb), *wu = gu_make_weights(&g_seed, t, K, F, 1.0f, NULL);
    float *x = gu_rand_f32(&g_seed, (size_t)K, -2.f, 2.f), *nw = gu_rand_f32(&g_seed, (size_t)K, 0.5f, 1.5f);
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
    void *ws = dev_poison(mi7b_matmul_workspace(t, K, 1) + 64);
    mi_status st = mi8a_ffn_q4k_fused(S, t, dwg, dwu, dx, dnw, EPS, dy, K, F);
    if (st == MI_OK) { dev_down(got, dy, (size_t)F * 4); CK(cudaMemset(dy, 0xFF, (size_t)F * 4)); }
    if (st == MI_OK) st = mi8a_ffn_q4k_fused(S, t, dwg, dwu, dx, dnw, EPS, dy, K, F);
    if (st == MI_OK) { dev_down(got2, dy, (size_t)F * 4); CK(cudaMemset(dy, 0xFF, (size_t)F * 4)); }
    if (st == MI_OK) st = mi7e_rms_norm(S, dx, dnw, dxn, K, 1, EPS);
    if (st == MI_OK) st = mi7e_ffn_q4k_qx(S, t, dwg, dwu, dxn, dy, K, F, ws);
    if (st == MI_OK) dev_down(old, dy, (size_t)F * 4);
    if (st != MI_OK) {
        gu_fail(&R, "launch: %s", mi_errmsg());
    } else {
        const double e_cpu = gu_nmse(got, g, (size_t)F);
        const size_t d_old = gu_first_diff(got, old, (size_t)F * 4), d_rep = gu_first_diff(got, got2, (size_t)F * 4);
        if (!(e_cpu <= 1e-6) || d_old != (size_t)-1 || d_rep != (size_t)-1)
            gu_fail(&R, "nmse vs cpu %.3g (bound 1e-6); vs unfused %s; repeat %s", e_cpu,
                    d_old == (size_t)-1 ? "bitwise" : "DIFFERS", d_rep == (size_t)-1 ? "bitwise" : "DIFFERS");
        else
            gu_pass(&R, "bit-identical to 7e's norm + fused FFN and to itself; nmse vs cpu %.3g", e_cpu);
    }
    free(wg); free(wu); free(x); free(nw); free(xn); free(g); free(u); free(got); free(got2); free(old);
    cudaFree(bg); cudaFree(bu); cudaFree(bx); cudaFree(bn); cudaFree(dxn); cudaFree(dy); cudaFree(ws);
}

static void test_kernels(void) {
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
    ffn_case(3584, 2048);   /* 7B's rows */
    ffn_case(1024, 1000);
}

/* d11's Q6_K kernel against the CPU (nmse), against itself on a second run (bitwise) and against
 * 7e's staged kernel plus 7b's add (the same integer unit sums added in another order: within
 * rounding); bases 4-byte aligned, rows of an odd number of super-blocks 2 mod 4 */
static void q6k_case(int64_t K, int64_t M, bool bias, bool res) {
    char name[96];
    snprintf(name, sizeof name, "q6k_K%lld_M%lld%s%s", (long long)K, (long long)M, bias ? "_bias" : "",
             res ? "_res" : "");
    gu_begin(&R, name);
    const mi_type t = MI_TYPE_Q6_K;
    if (!mi8a_matvec_q6k_supported(t, K)) { gu_fail(&R, "the kernel refuses a shape it is meant to cover"); return; }
    size_t wb;
    uint8_t *w = gu_make_weights(&g_seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(&g_seed, (size_t)K, -2.f, 2.f), *b = gu_rand_f32(&g_seed, (size_t)M, -0.5f, 0.5f);
    float *r = gu_rand_f32(&g_seed, (size_t)M, -1.f, 1.f);
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
    if (st == MI_OK) st = mi7e_matvec_staged(S, t, dw, dx, pb, res ? dy0 : dy, K, M, 1, ws);
    if (st == MI_OK && res) st = mi7b_binary(S, 0, dr, dy0, dy, M, 1, 1);
    if (st == MI_OK) dev_down(old, dy, (size_t)M * 4);
    if (st != MI_OK) {
        gu_fail(&R, "launch: %s", mi_errmsg());
    } else {
        const double e_cpu = gu_nmse(got, ref, (size_t)M), e_old = gu_nmse(got, old, (size_t)M);
        const size_t d_rep = gu_first_diff(got, got2, (size_t)M * 4);
        if (!(e_cpu <= 1e-6) || !(e_old <= 1e-6) || d_rep != (size_t)-1) {
            const size_t i = first_bad(got, ref, (size_t)M, 1e-3, 1.0);
            if (i != (size_t)-1 && i < (size_t)M) printf("    %s: row %zu got %.9g staged %.9g cpu %.9g\n", name, i, got[i], old[i], ref[i]);
            gu_fail(&R, "nmse vs cpu %.3g, vs 7e's staged %.3g (bound 1e-6); repeat %s", e_cpu, e_old,
                    d_rep == (size_t)-1 ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(&R, "nmse vs cpu %.3g, vs 7e's staged kernel %.3g; repeat bitwise", e_cpu, e_old);
        }
    }
    free(w); free(x); free(b); free(r); free(ref); free(got); free(got2); free(old);
    cudaFree(bw); cudaFree(bx); cudaFree(bb); cudaFree(br); cudaFree(dy0); cudaFree(dy); cudaFree(ws);
}

static void test_q6k(void) {
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
    gu_begin(&R, name);
    const size_t n = (size_t)(hd * H * N);
    float *x = gu_rand_f32(&g_seed, n, -4.f, 4.f), *ref = malloc(n * 4), *got = malloc(n * 4), *got2 = malloc(n * 4),
          *old = malloc(n * 4);
    int32_t *pos = malloc((size_t)N * 4);
    for (int64_t t = 0; t < N; t++)
        pos[t] = t == 0 ? 0 : t == 1 ? 1 : t == 2 ? 65535 : (int32_t)(gu_rng(&g_seed) % 65536u);
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
        gu_fail(&R, "launch: %s", mi_errmsg());
    } else {
        const size_t d_old = gu_first_diff(got, old, n * 4), d_cpu = gu_first_diff(got, ref, n * 4),
                     d_rep = gu_first_diff(got, got2, n * 4), d_7b = gu_first_diff(old, ref, n * 4);
        if (d_old != (size_t)-1 || d_rep != (size_t)-1 || d_cpu != (size_t)-1) {
            const size_t i = (d_old != (size_t)-1 ? d_old : d_cpu != (size_t)-1 ? d_cpu : d_rep) / 4;
            printf("    %s: element %zu (token %zu, dim %zu) d8 %.9g 7b %.9g cpu %.9g\n", name, i, i / (size_t)(hd * H),
                   i % (size_t)hd, got[i], old[i], ref[i]);
            gu_fail(&R, "vs 7b's kernel %s, vs the CPU's angle %s (7b vs CPU %s), repeat %s",
                    d_old == (size_t)-1 ? "bitwise" : "DIFFERS", d_cpu == (size_t)-1 ? "bitwise" : "DIFFERS",
                    d_7b == (size_t)-1 ? "bitwise" : "differs", d_rep == (size_t)-1 ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(&R, "%zu elements bit-identical to 7b's kernel, to the CPU's angle and to itself", n);
        }
    }
    free(x); free(ref); free(got); free(got2); free(old); free(pos);
    cudaFree(bx); cudaFree(bp); cudaFree(dy);
}

static void test_rope(void) {
    rope_case(64, 14, 1, 64, MI_ROPE_NEOX, 1000000.0f);     /* the 0.5B's q, one token */
    rope_case(64, 2, 1, 64, MI_ROPE_NEOX, 1000000.0f);      /* its k */
    rope_case(128, 28, 1, 128, MI_ROPE_NEOX, 1000000.0f);   /* the 7B's q */
    rope_case(128, 4, 512, 128, MI_ROPE_NEOX, 1000000.0f);  /* its k over a prompt */
    rope_case(64, 9, 300, 64, MI_ROPE_NORMAL, 10000.0f);    /* llama order, base 1e4 */
    rope_case(128, 8, 1024, 128, MI_ROPE_NORMAL, 500000.0f);/* Llama 3's base */
    rope_case(128, 3, 17, 64, MI_ROPE_NEOX, 10000.0f);      /* partial rotation: dims 64..127 copied */
    rope_case(80, 5, 33, 32, MI_ROPE_NORMAL, 10000.0f);
}

/* ---------------- the fusion pass on the CPU (runs without a device) ----------------
 * A hand-built layer: h = rms_norm(x), q = Wq h + b, k = Wk h, o = Wo q, y = (x + o) * k, and
 * (extra_reader) + h, a second reader of h that no fused form takes. Run by a [cpu] scheduler unfused and after
 * mi8a_fuse_decode with the CPU backend as the target (it runs the fused ops too): outputs
 * bit-identical; the norm folded into q and k and the add into o at N = 1; the norm kept when
 * a reader cannot take it; nothing fused at N = 3. Checks the graph rewrite, not a kernel. */
static mi_tensor *leaf_w(const char *name, mi_type t, int64_t K, int64_t M, void **mem) {
    mi_tensor *l = calloc(1, sizeof *l);
    int64_t ne[2] = {K, M};
    tensor_init(l, name, t, 2, ne);
    l->flags = MI_T_WEIGHT;
    *mem = t == MI_TYPE_F32 ? (void *)gu_rand_f32(&g_seed, (size_t)(K * M), 0.5f, 1.5f)
                            : gu_make_weights(&g_seed, t, K, M, 1.0f, NULL);
    l->data = *mem;
    return l;
}

/* fuse: 0 no pass, else the pass folding a norm into at most `fuse` readers */
static int fuse_layer(int64_t N, bool extra_reader, int fuse, float *out, int *n_fused) {
    enum { K = 256, M = 256 };
    void *mq, *mk, *mo, *mn, *mb;
    mi_tensor *wq = leaf_w("wq", MI_TYPE_Q4_0, K, M, &mq), *wk = leaf_w("wk", MI_TYPE_Q4_K, K, M, &mk);
    mi_tensor *wo = leaf_w("wo", MI_TYPE_Q8_0, M, K, &mo), *wn = leaf_w("norm", MI_TYPE_F32, K, 1, &mn);
    mi_tensor *bq = leaf_w("bq", MI_TYPE_F32, M, 1, &mb);
    float *xin = gu_rand_f32(&g_seed, (size_t)(K * N), -1.f, 1.f);
    mi_backend *cpu = NULL;
    mi_sched *sc = NULL;
    mi_graph *g = graph_new(64);
    int rc = 1;
    if (mi_backend_cpu_new(2, &cpu) == MI_OK && sched_new(&cpu, 1, &sc) == MI_OK && g) {
        mi_tensor *x = graph_input(g, "x", MI_TYPE_F32, K, N, xin);
        mi_tensor *h = graph_rms_norm(g, x, wn, K, 1e-6f);
        mi_tensor *q = graph_matmul(g, wq, h, bq), *k = graph_matmul(g, wk, h, NULL);
        mi_tensor *y = graph_add(g, x, graph_matmul(g, wo, q, NULL));
        y = graph_mul(g, y, k);   /* a reader of k that is no residual add */
        if (extra_reader) y = graph_add(g, y, h);
        y->flags |= MI_T_OUTPUT;
        g->output = y;
        *n_fused = fuse ? mi8a_fuse_decode_with(g, cpu, fuse) : 0;
        if (sched_compute(sc, g) == MI_OK && sched_read(sc, y, out, 0, mi_nbytes(y)) == MI_OK) rc = 0;
    }
    graph_free(g);
    if (sc) sched_free(sc);
    if (cpu) cpu->iface->destroy(cpu);
    free(mq); free(mk); free(mo); free(mn); free(mb); free(xin);
    free(wq); free(wk); free(wo); free(wn); free(bq);
    return rc;
}

static void test_fusion_pass_cpu(void) {
    gu_begin(&R, "fusion_pass_cpu");
    static float a[256 * 3], b[256 * 3];
    int nf = 0, nf1 = 0, nf2 = 0, nf3 = 0;
    const unsigned long long seed = g_seed;
    const char *err = NULL;
    if (fuse_layer(1, false, 0, a, &nf) || (g_seed = seed, fuse_layer(1, false, 8, b, &nf))) err = "run failed";
    else if (nf != 3) err = "want 3 fusions with up to 8 readers (norm into q and k, add into o)";
    else if (memcmp(a, b, sizeof(float) * 256)) err = "fused output differs from unfused";
    else if ((g_seed = seed, fuse_layer(1, false, 1, b, &nf1))) err = "run failed (one reader)";
    else if (nf1 != 1) err = "want only the add fused when a norm of two readers may go into one";
    else if (memcmp(a, b, sizeof(float) * 256)) err = "fused output differs from unfused (one reader)";
    else if ((g_seed = seed, fuse_layer(1, true, 0, a, &nf2)) || (g_seed = seed, fuse_layer(1, true, 8, b, &nf2)))
        err = "run failed (extra reader)";
    else if (nf2 != 1) err = "want only the add fused when the norm has a reader no fused form takes";
    else if (memcmp(a, b, sizeof(float) * 256)) err = "fused output differs from unfused (extra reader)";
    else if (fuse_layer(3, false, 8, b, &nf3)) err = "run failed (N = 3)";
    else if (nf3 != 0) err = "fused a 3-token graph";
    if (err) gu_fail(&R, "%s (%s; fusions %d / %d / %d / %d)", err, mi_errmsg(), nf, nf1, nf2, nf3);
    else gu_pass(&R, "norm into 2 matmuls and 1 residual add fused at N = 1 (up to 8 readers), only the add with "
                     "one, output bit-identical on the CPU backend; the norm kept when another reader needs it; "
                     "nothing fused at N = 3");
}

/* d7's marks: three one-token Q8_0 matmuls of one x in a row are marked first / next / next
 * (the dispatch gives them d7's kernels in place of 7b's), a fourth of another x starts no run,
 * and the CPU backend, which ignores the marks, computes the same bits as without the pass. */
static int shared_x_graph(bool pass, int marks[4], float *out) {
    enum { K = 256, M = 64 };
    void *mem[4];
    mi_tensor *w[4];
    for (int i = 0; i < 4; i++) w[i] = leaf_w("w", MI_TYPE_Q8_0, K, M, &mem[i]);
    float *xin = gu_rand_f32(&g_seed, K, -1.f, 1.f), *x2in = gu_rand_f32(&g_seed, K, -1.f, 1.f);
    mi_backend *cpu = NULL;
    mi_sched *sc = NULL;
    mi_graph *g = graph_new(64);
    int rc = 1;
    if (mi_backend_cpu_new(1, &cpu) == MI_OK && sched_new(&cpu, 1, &sc) == MI_OK && g) {
        mi_tensor *x = graph_input(g, "x", MI_TYPE_F32, K, 1, xin), *x2 = graph_input(g, "x2", MI_TYPE_F32, K, 1, x2in);
        mi_tensor *mm[4];   /* in this order in the graph */
        for (int i = 0; i < 4; i++) mm[i] = graph_matmul(g, w[i], i < 3 ? x : x2, NULL);
        /* products, not sums: the pass would fold a sum into the matmul before it (d2) */
        mi_tensor *y = graph_mul(g, graph_mul(g, mm[0], mm[1]), graph_mul(g, mm[2], mm[3]));
        y->flags |= MI_T_OUTPUT;
        g->output = y;
        if (pass) mi8a_fuse_decode_with(g, cpu, 1);
        for (int i = 0; i < 4; i++) marks[i] = mi_matmul_shared_x(mm[i]);
        if (sched_compute(sc, g) == MI_OK && sched_read(sc, y, out, 0, mi_nbytes(y)) == MI_OK) rc = 0;
    }
    graph_free(g);
    if (sc) sched_free(sc);
    if (cpu) cpu->iface->destroy(cpu);
    for (int i = 0; i < 4; i++) free(mem[i]), free(w[i]);
    free(xin);
    free(x2in);
    return rc;
}

static void test_shared_x_pass(void) {
    gu_begin(&R, "shared_x_pass");
    float a[64], b[64];
    int m0[4], m1[4], m2[4];
    const unsigned long long seed = g_seed;
    mi_status st = mi_cuda_items_set_off("");
    int rc = st == MI_OK ? shared_x_graph(false, m0, a) : 1;
    g_seed = seed;
    if (!rc) rc = shared_x_graph(true, m1, b);
    if (!rc) st = mi_cuda_items_set_off("d7");
    g_seed = seed;
    float c[64];
    if (!rc && st == MI_OK) rc = shared_x_graph(true, m2, c);
    mi_cuda_items_set_off("");
    const bool want = m1[0] == MI_MM_X_FIRST && m1[1] == MI_MM_X_NEXT && m1[2] == MI_MM_X_NEXT && m1[3] == 0;
    if (rc || st != MI_OK) gu_fail(&R, "run failed: %s", mi_errmsg());
    else if (!want || m2[0] || m2[1] || m2[2] || m2[3] || memcmp(a, b, sizeof a))
        gu_fail(&R, "marks %d %d %d %d (want 1 2 2 0), with d7 off %d %d %d %d (want 0), CPU output %s", m1[0], m1[1],
                m1[2], m1[3], m2[0], m2[1], m2[2], m2[3], memcmp(a, b, sizeof a) ? "DIFFERS" : "bit-identical");
    else gu_pass(&R, "three matmuls of one x marked first / next / next, one of another x none, nothing with d7 off; "
                     "CPU output bit-identical to the unpassed graph");
}

/* d10's flags: a one-token step narrower than MI8A_PDL_MIN_EMBD gets none, a wider one and a
 * step of several tokens get MI_T_EARLY on every node */
static int early_flags(int64_t K, int64_t N) {
    void *mn;
    mi_tensor *wn = leaf_w("norm", MI_TYPE_F32, K, 1, &mn);
    mi_backend *cpu = NULL;
    mi_graph *g = graph_new(16);
    int flagged = -1;
    if (mi_backend_cpu_new(1, &cpu) == MI_OK && g) {
        mi_tensor *x = graph_input(g, "x", MI_TYPE_F32, K, N, NULL);
        mi_tensor *y = graph_add(g, graph_rms_norm(g, x, wn, K, 1e-6f), x);
        y->flags |= MI_T_OUTPUT;
        g->output = y;
        mi8a_fuse_decode_with(g, cpu, 1);
        flagged = 0;
        for (int i = 0; i < g->n_nodes; i++) flagged += (g->nodes[i]->flags & MI_T_EARLY) != 0;
        flagged = flagged == 0 ? 0 : flagged == g->n_nodes ? 1 : 2;
    }
    graph_free(g);
    if (cpu) cpu->iface->destroy(cpu);
    free(mn);
    free(wn);
    return flagged;
}

static void test_early_flags(void) {
    gu_begin(&R, "early_flags_pass");
    const int narrow = early_flags(896, 1), wide = early_flags(3584, 1), prompt = early_flags(896, 5);
    if (narrow != 0 || wide != 1 || prompt != 1)
        gu_fail(&R, "flagged (0 none, 1 all, 2 some): one token at 896 %d (want 0), at 3584 %d (want 1), five tokens "
                    "at 896 %d (want 1)", narrow, wide, prompt);
    else gu_pass(&R, "one token at 896: no node flagged; at 3584 and five tokens at 896: every node");
}

/* ---------------- whole models ---------------- */

/* The model test named <what>_<shape>_<type>: its synthetic file (gu_model_path), skipped when
 * there is none, begun and loaded; NULL when it cannot run (skip or failure recorded). */
static mi_model *begin_model_test(const char *what, const char *shape, const char *type) {
    char path[2048], label[96];
    snprintf(label, sizeof label, "%s_%.30s_%.20s", what, shape, type);
    if (gu_model_path(g_minfer, "8a", shape, type, path, sizeof path)) {
        gu_skip_named(&R, label, "model not available (synth failed or not given)");
        return NULL;
    }
    gu_begin(&R, label);
    mi_model *m = NULL;
    if (mi_model_load(path, &m) != MI_OK) {
        gu_fail(&R, "load %s: %s", path, mi_errmsg());
        return NULL;
    }
    return m;
}

#define PROMPT 24
#define STEPS 8
static int64_t g_stream_ctx = 128;   /* the streams' context: 8192 takes d4's split attention */
/* prefill PROMPT fixed ids, then STEPS fixed single tokens; the logits of every step, the
 * kernels the last decode step launched, the fusions the pass made */
static mi_status run_stream(mi_model *m, float *out, int64_t V, int64_t *kernels, uint64_t *fused) {
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = "cuda";
    p.n_ctx = g_stream_ctx;
    mi_session *s = NULL;
    mi7c_pass_stats a, b;
    mi7c_pass_stats_get(&a);
    MI_TRY(mi_session_new(m, &p, &s));
    int32_t ids[PROMPT + STEPS];
    unsigned long long st = 8;
    for (int i = 0; i < PROMPT + STEPS; i++) ids[i] = (int32_t)(gu_rng(&st) % (unsigned long long)V);
    mi_status rc = mi_session_decode(s, ids, PROMPT, false);
    for (int i = 0; i <= STEPS && rc == MI_OK; i++) {
        memcpy(out + (size_t)i * (size_t)V, mi_logits(s, NULL), (size_t)V * 4);
        if (i < STEPS) rc = mi_session_decode(s, &ids[PROMPT + i], 1, false);
    }
    *kernels = mi_session_step_kernels(s);
    mi_session_free(s);
    mi7c_pass_stats_get(&b);
    *fused = b.fused_more - a.fused_more;
    return rc;
}

/* bound < 0: bit-identical required; q4k: Q4_K weights, so d1 (norm folding) must have run too */
static void test_model(const char *shape, const char *type, double bound, bool q4k) {
    mi_model *m = begin_model_test("model", shape, type);
    if (!m) return;
    const int64_t V = mi_model_hparams(m)->n_vocab;
    const size_t nl = (size_t)(STEPS + 1) * (size_t)V;
    float *on = malloc(nl * 4), *off = malloc(nl * 4);
    int64_t k_on = -1, k_off = -1;
    uint64_t f_on = 0, f_off = 0;
    const uint64_t d1 = mi_cuda_item_runs("d1"), d2 = mi_cuda_item_runs("d2");
    mi_status st = mi_cuda_items_set_off("");
    if (st == MI_OK) st = run_stream(m, on, V, &k_on, &f_on);
    const uint64_t d1_runs = mi_cuda_item_runs("d1") - d1, d2_runs = mi_cuda_item_runs("d2") - d2;
    if (st == MI_OK) st = mi_cuda_items_set_off("d1,d2");
    if (st == MI_OK) st = run_stream(m, off, V, &k_off, &f_off);
    mi_cuda_items_set_off("");
    if (st != MI_OK) {
        gu_fail(&R, "%s", mi_errmsg());
    } else {
        double worst = 0;
        int same = 0;
        for (int k = 0; k <= STEPS; k++) {
            const float *a = on + (size_t)k * (size_t)V, *b = off + (size_t)k * (size_t)V;
            const double e = gu_nmse(a, b, (size_t)V);
            if (e > worst || e != e) worst = e;
            same += memcmp(a, b, (size_t)V * 4) == 0;
        }
        const bool logits_ok = bound < 0 ? same == STEPS + 1 : worst <= bound;
        char why[320];
        snprintf(why, sizeof why, "fusions %llu (off: %llu), d1/d2 kernel runs %llu/%llu, kernels per decode step "
                 "%lld (off: %lld); logits nmse %.3g, %d/%d steps bit-identical (%s)", (unsigned long long)f_on,
                 (unsigned long long)f_off, (unsigned long long)d1_runs, (unsigned long long)d2_runs,
                 (long long)k_on, (long long)k_off, worst, same, STEPS + 1,
                 bound < 0 ? "bit-identical required" : "bound");
        if (f_on == 0 || f_off != 0 || (q4k && !d1_runs) || !d2_runs || k_on < 0 || k_off < 0 || k_on >= k_off ||
            !logits_ok)
            gu_fail(&R, "%s", why);
        else gu_pass(&R, "%s", why);
    }
    free(on);
    free(off);
    mi_model_free(m);
}

/* ---------------- argmax (d3) ----------------
 * Rows with ties, NaN, infinities and random rows of the vocabulary's size against the rule
 * computed here on the host (graph.h: first largest, NaN never wins, -1 without a finite max). */
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

static void test_argmax(void) {
    gu_begin(&R, "argmax_rows");
    const int64_t V = 151936, N = 12;
    float *x = gu_rand_f32(&g_seed, (size_t)(V * N), -30.f, 30.f);
    float *r;
    r = x + 1 * V; r[5] = r[77] = r[150000] = 99.f;                     /* ties: the first */
    r = x + 2 * V; for (int64_t i = 0; i < V; i++) r[i] = NAN;           /* all NaN: -1 */
    r = x + 3 * V; r[9] = NAN; r[10] = 1e9f;                             /* NaN never wins */
    r = x + 4 * V; r[123] = INFINITY;                                    /* an infinite max: -1 */
    r = x + 5 * V; for (int64_t i = 0; i < V; i++) r[i] = -INFINITY; r[V - 1] = -1.f;   /* the last */
    r = x + 6 * V; for (int64_t i = 0; i < V; i++) r[i] = 0.0f; r[3] = -0.0f;   /* equal zeros: 0 */
    r = x + 7 * V; for (int64_t i = 0; i < V; i++) r[i] = -INFINITY;     /* no finite max: -1 */
    int32_t want[12], got[12];
    for (int64_t k = 0; k < N; k++) want[k] = host_argmax(x + k * V, V);
    void *bx;
    float *dx = dev_up_at(x, (size_t)(V * N) * 4, 0, &bx);
    int32_t *dout = dev_poison(sizeof got);
    mi_status st = mi8a_argmax(S, dx, dout, V, N);
    if (st == MI_OK) dev_down(got, dout, sizeof got);
    int bad = -1;
    for (int k = 0; k < N && st == MI_OK && bad < 0; k++)
        if (got[k] != want[k]) bad = k;
    if (st != MI_OK) gu_fail(&R, "launch: %s", mi_errmsg());
    else if (bad >= 0) gu_fail(&R, "row %d: %d, want %d", bad, got[bad], want[bad]);
    else gu_pass(&R, "%lld rows of %lld (ties, NaN, infinities, random): every index the rule's", (long long)N,
                 (long long)V);
    free(x);
    cudaFree(bx);
    cudaFree(dout);
}

/* greedy decode on the device against the sampler's argmax of the logits a logits session gives */
static void test_greedy_model(const char *shape, const char *type) {
    mi_model *m = begin_model_test("greedy", shape, type);
    if (!m) return;
    const int64_t V = mi_model_hparams(m)->n_vocab;
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = "cuda";
    p.n_ctx = 128;
    mi_session *a = NULL, *b = NULL;
    mi_status st = mi_session_new(m, &p, &a);
    if (st == MI_OK) st = mi_session_new(m, &p, &b);
    const uint64_t d3 = mi_cuda_item_runs("d3");
    int32_t prompt[PROMPT];
    unsigned long long sd = 3;
    for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)(gu_rng(&sd) % (unsigned long long)V);
    int32_t ta = 0, tb = 0;
    int same = 0, steps = 16;
    if (st == MI_OK) st = mi_session_decode(a, prompt, PROMPT, false);
    if (st == MI_OK) st = mi_session_decode_greedy(b, prompt, PROMPT, &tb);
    for (int i = 0; st == MI_OK && i <= steps; i++) {
        ta = mi_sample_greedy(mi_logits(a, NULL), V);
        if (ta != tb) break;
        same++;
        if (i < steps) st = mi_session_decode(a, &ta, 1, false);
        if (st == MI_OK && i < steps) st = mi_session_decode_greedy(b, &tb, 1, &tb);
    }
    const int64_t k_greedy = b ? mi_session_step_kernels(b) : -1;
    const uint64_t d3_runs = mi_cuda_item_runs("d3") - d3;
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (same != steps + 1 || !d3_runs)
        gu_fail(&R, "greedy ids equal the sampler's for %d of %d steps (then %d vs %d); d3 kernel runs %llu", same,
                steps + 1, tb, ta, (unsigned long long)d3_runs);
    else gu_pass(&R, "prompt + %d steps: every greedy id equals the sampler's argmax of the logits; d3 kernel runs %llu, "
                     "%lld kernels a greedy step", steps, (unsigned long long)d3_runs, (long long)k_greedy);
    if (a) mi_session_free(a);
    if (b) mi_session_free(b);
    mi_model_free(m);
}

/* ---------------- split-KV attention (d4) ----------------
 * One token against caches of random F16 (or F32) rows at several depths: against a host
 * reference in double (NMSE <= 1e-8), against 7b's kernel (NMSE <= 1e-8), against itself with
 * n_past from a device int (7d's step params): bit for bit, and on a second run: bit for bit. */
static void host_attn(const float *q, const float *K, const float *V, double *o, int64_t n_kv, int hd, int Hq, int Hkv,
                      float scale) {
    const int G = Hq / Hkv;
    double *sc = malloc(sizeof(double) * (size_t)n_kv);
    for (int h = 0; h < Hq; h++) {
        const int kvh = h / G;
        double mx = -INFINITY, l = 0;
        for (int64_t t = 0; t < n_kv; t++) {
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[h * hd + i] * K[t * (int64_t)hd * Hkv + kvh * hd + i];
            sc[t] = d * scale;
            if (sc[t] > mx) mx = sc[t];
        }
        for (int i = 0; i < hd; i++) o[h * hd + i] = 0;
        for (int64_t t = 0; t < n_kv; t++) {
            const double p = exp(sc[t] - mx);
            l += p;
            for (int i = 0; i < hd; i++) o[h * hd + i] += p * V[t * (int64_t)hd * Hkv + kvh * hd + i];
        }
        for (int i = 0; i < hd; i++) o[h * hd + i] /= l;
    }
    free(sc);
}

/* off: the K and V caches start off bytes past an allocation (4: not 16-byte aligned, so the
 * kernel reads V from global memory instead of staging it in shared memory) */
static void split_case(mi_type ct, int hd, int Hq, int Hkv, int64_t n_ctx, int64_t n_past, size_t off, int gb) {
    char name[128];
    snprintf(name, sizeof name, "attn_split_%s_hd%d_Hq%d_Hkv%d_ctx%lld_past%lld%s_gb%d", mi_type_name(ct), hd, Hq, Hkv,
             (long long)n_ctx, (long long)n_past, off ? "_unaligned" : "", gb);
    gu_begin(&R, name);
    const size_t row = (size_t)hd * Hkv, cells = row * (size_t)n_ctx, esz = ct == MI_TYPE_F16 ? 2 : 4;
    const float scale = 1.0f / sqrtf((float)hd);
    float *q = gu_rand_f32(&g_seed, (size_t)hd * Hq, -1.f, 1.f);
    float *K = gu_rand_f32(&g_seed, cells, -1.f, 1.f), *V = gu_rand_f32(&g_seed, cells, -1.f, 1.f);
    void *kh = malloc(cells * esz), *vh = malloc(cells * esz);
    for (size_t i = 0; i < cells; i++) {   /* the cache's values, as the reference sees them */
        if (ct == MI_TYPE_F16) {
            ((uint16_t *)kh)[i] = mi_f32_to_f16(K[i]);
            ((uint16_t *)vh)[i] = mi_f32_to_f16(V[i]);
            K[i] = mi_f16_to_f32(((uint16_t *)kh)[i]);
            V[i] = mi_f16_to_f32(((uint16_t *)vh)[i]);
        } else {
            ((float *)kh)[i] = K[i];
            ((float *)vh)[i] = V[i];
        }
    }
    const size_t no = (size_t)hd * Hq;
    double *ref = malloc(sizeof(double) * no);
    host_attn(q, K, V, ref, n_past + 1, hd, Hq, Hkv, scale);
    float *a = malloc(no * 4), *b = malloc(no * 4), *c7 = malloc(no * 4), *dv = malloc(no * 4), *refd = malloc(no * 4);
    for (size_t i = 0; i < no; i++) refd[i] = (float)ref[i];
    void *bq, *bk, *bv, *bnp;
    float *dq = dev_up_at(q, no * 4, 0, &bq);
    void *dk = dev_up_at(kh, cells * esz, off, &bk), *dvv = dev_up_at(vh, cells * esz, off, &bv);
    const int32_t np32 = (int32_t)n_past;
    int32_t *dnp = dev_up_at(&np32, 4, 0, &bnp);
    float *dout = dev_poison(no * 4);
    void *ws = dev_poison(mi8a_attn_split_workspace(n_ctx, hd, Hq, Hkv));
    mi_status st = mi8a_attn_split(S, dq, dk, dvv, ct, dout, NULL, n_past, n_ctx, hd, Hq, Hkv, scale, gb, ws);
    if (st == MI_OK) { dev_down(a, dout, no * 4); CK(cudaMemset(dout, 0xFF, no * 4)); }
    if (st == MI_OK) st = mi8a_attn_split(S, dq, dk, dvv, ct, dout, NULL, n_past, n_ctx, hd, Hq, Hkv, scale, gb, ws);
    if (st == MI_OK) { dev_down(b, dout, no * 4); CK(cudaMemset(dout, 0xFF, no * 4)); }
    if (st == MI_OK) st = mi8a_attn_split(S, dq, dk, dvv, ct, dout, dnp, 0, n_ctx, hd, Hq, Hkv, scale, gb, ws);
    if (st == MI_OK) { dev_down(dv, dout, no * 4); CK(cudaMemset(dout, 0xFF, no * 4)); }
    if (st == MI_OK) st = mi7b_attn(S, dq, dk, dvv, ct, dout, 1, n_past, hd, Hq, Hkv, scale);
    if (st == MI_OK) dev_down(c7, dout, no * 4);
    if (st != MI_OK) {
        gu_fail(&R, "launch: %s", mi_errmsg());
    } else {
        const double e_ref = gu_nmse(a, refd, no), e_7b = gu_nmse(a, c7, no);
        const bool rep = !memcmp(a, b, no * 4), devnp = !memcmp(a, dv, no * 4);
        if (!(e_ref <= 1e-8) || !(e_7b <= 1e-8) || !rep || !devnp) {
            const size_t i = first_bad(a, refd, no, 1e-4, 1e-3);
            if (i != (size_t)-1) printf("    %s: first mismatch %zu got %.9g want %.9g (7b %.9g)\n", name, i, a[i], refd[i], c7[i]);
            gu_fail(&R, "nmse vs reference %.3g, vs 7b %.3g (bound 1e-8); repeat %s; device n_past %s", e_ref, e_7b,
                    rep ? "bitwise" : "DIFFERS", devnp ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(&R, "%d splits; nmse vs reference %.3g, vs 7b %.3g; repeat and device n_past bitwise",
                    mi8a_attn_split_count(n_ctx, Hkv), e_ref, e_7b);
        }
    }
    free(q); free(K); free(V); free(kh); free(vh); free(ref); free(a); free(b); free(c7); free(dv); free(refd);
    cudaFree(bq); cudaFree(bk); cudaFree(bv); cudaFree(bnp); cudaFree(dout); cudaFree(ws);
}

static void test_attn_split(void) {
    const int64_t past7[] = {0, 1, 127, 128, 1000, 8191, 32767};
    for (size_t i = 0; i < sizeof past7 / sizeof past7[0]; i++) split_case(MI_TYPE_F16, 128, 28, 4, 32768, past7[i], 0, 0);
    split_case(MI_TYPE_F16, 128, 28, 4, 32768, 20000, 4, 0);   /* V from global memory */
    split_case(MI_TYPE_F16, 128, 28, 4, 32768, 9000, 0, 3);    /* head groups 3 + 3 + 1 */
    split_case(MI_TYPE_F16, 128, 28, 4, 32768, 9000, 0, 7);    /* the whole group a block */
    split_case(MI_TYPE_F16, 64, 14, 2, 8192, 5000, 0, 0);      /* the 0.5B's heads */
    split_case(MI_TYPE_F32, 64, 8, 8, 8192, 3000, 0, 0);       /* no GQA, F32 cache */
    split_case(MI_TYPE_F16, 256, 16, 1, 8192, 700, 0, 2);      /* one KV head, the widest head */
    split_case(MI_TYPE_F16, 128, 32, 2, 8192, 4000, 0, 16);    /* G = 16: no room to stage V */
}

/* An item through a whole model, on against off, in a context of ctx positions: the logits of
 * every step with every item on (twice with `again`), then with the item off; each side's count
 * (launches(), or the item's kernel runs when launches is NULL) and kernels a step. */
typedef struct {
    int64_t V, k_on, k_off;
    float *on, *again, *off;
    uint64_t n_on, n_off;
} item_ab;

static uint64_t ab_count(const char *item, uint64_t (*launches)(void)) {
    return launches ? launches() : mi_cuda_item_runs(item);
}
static mi_status item_ab_run(mi_model *m, const char *item, int64_t ctx, uint64_t (*launches)(void), bool again,
                             item_ab *ab) {
    ab->V = mi_model_hparams(m)->n_vocab;
    const size_t nl = (size_t)(STEPS + 1) * (size_t)ab->V;
    ab->on = malloc(nl * 4), ab->off = malloc(nl * 4), ab->again = again ? malloc(nl * 4) : NULL;
    ab->k_on = ab->k_off = -1;
    uint64_t f = 0;
    g_stream_ctx = ctx;
    const uint64_t c0 = ab_count(item, launches);
    mi_status st = mi_cuda_items_set_off("");
    if (st == MI_OK) st = run_stream(m, ab->on, ab->V, &ab->k_on, &f);
    if (st == MI_OK && again) st = run_stream(m, ab->again, ab->V, &ab->k_on, &f);
    const uint64_t c1 = ab_count(item, launches);
    if (st == MI_OK) st = mi_cuda_items_set_off(item);
    if (st == MI_OK) st = run_stream(m, ab->off, ab->V, &ab->k_off, &f);
    ab->n_on = c1 - c0;
    ab->n_off = ab_count(item, launches) - c1;
    mi_cuda_items_set_off("");
    g_stream_ctx = 128;
    return st;
}
static void item_ab_free(item_ab *ab) {
    free(ab->on);
    free(ab->again);
    free(ab->off);
}
/* steps whose logits are bit-identical in a and b; *first: the first that is not in either pair
 * (a, b) or (a, c) (c may be NULL) */
static int same_steps(const float *a, const float *b, const float *c, int64_t V, int *same_c, int *first) {
    int same = 0;
    *first = -1;
    if (same_c) *same_c = 0;
    for (int k = 0; k <= STEPS; k++) {
        const size_t o = (size_t)k * (size_t)V;
        const bool eb = !memcmp(a + o, b + o, (size_t)V * 4), ec = c ? !memcmp(a + o, c + o, (size_t)V * 4) : true;
        same += eb;
        if (same_c) *same_c += ec;
        if ((!eb || !ec) && *first < 0) *first = k;
    }
    return same;
}

/* One item in a whole model, on against off, logits within the bound (the order of the sums
 * differs): d4 in a context of 8192 positions, so decode takes the split attention (the 0.5B:
 * 1e-6); d11's Q6_K rows on the 7B, whose random weights turn a last-bit difference into other
 * 8-bit activation codes layer after layer: gate_7e's bound for it (5e-2; two CPU ISAs differ by
 * ~1e-2 there, gate_7c). */
static void test_item_model(const char *what, const char *item, int64_t ctx, const char *shape, const char *type,
                            double bound) {
    mi_model *m = begin_model_test(what, shape, type);
    if (!m) return;
    item_ab ab;
    const mi_status st = item_ab_run(m, item, ctx, NULL, false, &ab);
    double worst = 0;
    for (int k = 0; st == MI_OK && k <= STEPS; k++) {
        const double e = gu_nmse(ab.on + (size_t)k * (size_t)ab.V, ab.off + (size_t)k * (size_t)ab.V, (size_t)ab.V);
        if (e > worst || e != e) worst = e;
    }
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (!ab.n_on || !(worst <= bound))
        gu_fail(&R, "%s kernel runs %llu; logits nmse on vs off %.3g (bound %.0e)", item, (unsigned long long)ab.n_on,
                worst, bound);
    else gu_pass(&R, "context %lld: %s kernel runs %llu, kernels per step %lld (off: %lld); logits nmse on vs off "
                     "%.3g <= %.0e", (long long)ctx, item, (unsigned long long)ab.n_on, (long long)ab.k_on,
                 (long long)ab.k_off, worst, bound);
    item_ab_free(&ab);
    mi_model_free(m);
}

/* Programmatic dependent launch, d6 (8a's kernels) and d10 (the lower phases' small kernels):
 * the same kernels, only their launches overlap, so the logits must be bit-identical to the item
 * off, and to a second run with it on (a kernel that read an earlier kernel's output before its
 * wait would show as a difference here, run to run), with the same kernels a step and the
 * item's launches counted. A context of 8192 so split-KV attention (d4) takes part. */
static void test_pdl_model(const char *what, const char *item, uint64_t (*launches)(void), const char *shape,
                           const char *type) {
    mi_model *m = begin_model_test(what, shape, type);
    if (!m) return;
    item_ab ab;
    const mi_status st = item_ab_run(m, item, 8192, launches, true, &ab);
    int same_again = 0, first = -1;
    const int same_off = st == MI_OK ? same_steps(ab.on, ab.off, ab.again, ab.V, &same_again, &first) : 0;
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (!ab.n_on || ab.n_off || same_off != STEPS + 1 || same_again != STEPS + 1 || ab.k_on != ab.k_off)
        gu_fail(&R, "%s launches on %llu, off %llu; kernels a step %lld (off: %lld); steps bit-identical to %s off "
                    "%d/%d, run to run %d/%d (first difference at step %d)", item, (unsigned long long)ab.n_on,
                (unsigned long long)ab.n_off, (long long)ab.k_on, (long long)ab.k_off, item, same_off, STEPS + 1,
                same_again, STEPS + 1, first);
    else gu_pass(&R, "context 8192: %llu %s launches in two runs (off: 0), kernels per step %lld; every step's logits "
                     "bit-identical to %s off and run to run (%d steps)",
                 (unsigned long long)ab.n_on, item, (long long)ab.k_on, item, STEPS + 1);
    item_ab_free(&ab);
    mi_model_free(m);
}

/* An item whose kernels compute exactly what they replace, through a whole model: the logits
 * with it on equal those with it off bit for bit at every step, and its kernels ran; kernels a
 * step fewer (kernels < 0), as many (0) or more (> 0) than with it off.
 *   d7  one quantized x for a run of matmuls: the first of the 0.5B's q, k, v (and the tiny
 *       llama's) quantizes x, the others read its copy
 *   d8  RoPE a thread per pair */
static void test_bitwise_item_model(const char *what, const char *item, int kernels, const char *shape,
                                    const char *type) {
    mi_model *m = begin_model_test(what, shape, type);
    if (!m) return;
    item_ab ab;
    const mi_status st = item_ab_run(m, item, 128, NULL, false, &ab);
    int first = -1;
    const int same = st == MI_OK ? same_steps(ab.on, ab.off, NULL, ab.V, NULL, &first) : 0;
    const int64_t k_on = ab.k_on, k_off = ab.k_off;
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (!ab.n_on || same != STEPS + 1 || (kernels < 0 ? !(k_on < k_off) : kernels > 0 ? !(k_on > k_off) : k_on != k_off))
        gu_fail(&R, "%s kernel runs %llu, kernels a step %lld (off: %lld), steps bit-identical to %s off %d/%d (first "
                    "difference at step %d)", item, (unsigned long long)ab.n_on, (long long)k_on, (long long)k_off,
                item, same, STEPS + 1, first);
    else gu_pass(&R, "%s kernel runs %llu, kernels a step %lld (off: %lld); every step's logits bit-identical to %s "
                     "off (%d steps)", item, (unsigned long long)ab.n_on, (long long)k_on, (long long)k_off, item,
                 STEPS + 1);
    item_ab_free(&ab);
    mi_model_free(m);
}

/* The session's reused one-token graph on the device (session.c): the stream with reuse against
 * one that builds every step anew (MINFER_NO_GRAPH_REUSE=1), logits bit for bit at every step and
 * the same kernels a step; then, in one session, the items switched between steps, so the reused
 * graph must be rebuilt under the new choices (the hook epoch): a stale one would hold fused
 * nodes no candidate takes any more and fail, and every step equals a fresh build's. */
static void test_graph_reuse(const char *shape, const char *type) {
    mi_model *m = begin_model_test("graph_reuse", shape, type);
    if (!m) return;
    const int64_t V = mi_model_hparams(m)->n_vocab;
    const size_t nl = (size_t)(STEPS + 1) * (size_t)V;
    float *reuse = malloc(nl * 4), *fresh = malloc(nl * 4);
    int64_t k_reuse = -1, k_fresh = -1;
    uint64_t f = 0;
    mi_status st = run_stream(m, reuse, V, &k_reuse, &f);
    setenv("MINFER_NO_GRAPH_REUSE", "1", 1);
    if (st == MI_OK) st = run_stream(m, fresh, V, &k_fresh, &f);
    unsetenv("MINFER_NO_GRAPH_REUSE");
    int same = 0;
    for (int k = 0; st == MI_OK && k <= STEPS; k++)
        same += !memcmp(reuse + (size_t)k * (size_t)V, fresh + (size_t)k * (size_t)V, (size_t)V * 4);
    /* one session, d1/d2 switched off and on again between steps: each step equals a fresh build's */
    int switched_same = 0;
    if (st == MI_OK) {
        mi_session_params p;
        mi_session_params_default(&p);
        p.backend = "cuda";
        p.n_ctx = 64;
        mi_session *a = NULL, *b = NULL;
        st = mi_session_new(m, &p, &a);
        setenv("MINFER_NO_GRAPH_REUSE", "1", 1);
        if (st == MI_OK) st = mi_session_new(m, &p, &b);
        unsetenv("MINFER_NO_GRAPH_REUSE");
        const char *offs[4] = {"", "d1,d2", "d2", ""};
        for (int i = 0; st == MI_OK && i < 8; i++) {
            const int32_t t = (int32_t)(i * 7 + 3);
            st = mi_cuda_items_set_off(offs[i % 4]);
            if (st == MI_OK) st = mi_session_decode(a, &t, 1, false);
            if (st == MI_OK) st = mi_session_decode(b, &t, 1, false);
            if (st == MI_OK) switched_same += !memcmp(mi_logits(a, NULL), mi_logits(b, NULL), (size_t)V * 4);
        }
        mi_cuda_items_set_off("");
        if (a) mi_session_free(a);
        if (b) mi_session_free(b);
    }
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (same != STEPS + 1 || k_reuse != k_fresh || switched_same != 8)
        gu_fail(&R, "reused vs fresh: %d/%d steps bit-identical, kernels a step %lld vs %lld; items switched between "
                    "steps: %d/8 bit-identical", same, STEPS + 1, (long long)k_reuse, (long long)k_fresh, switched_same);
    else gu_pass(&R, "reused vs fresh graphs: %d/%d steps bit-identical, %lld kernels a step both; items switched "
                     "between steps: 8/8 bit-identical", same, STEPS + 1, (long long)k_reuse);
    free(reuse);
    free(fresh);
    mi_model_free(m);
}

int main(int argc, char **argv) {
    (void)argc;
    gu_init(&R, "gate-8a", "8a");
    gu_minfer_path(argv[0], g_minfer, sizeof g_minfer);
    mi_phases_install();
    test_fusion_pass_cpu();
    test_shared_x_pass();
    test_early_flags();
    if (!dev_gate_start(&R, "gate_8a", &S)) return gu_finish(&R);
    test_kernels();
    test_rope();
    test_q6k();
    test_model("tiny-qwen2", "q4_0", -1, false);
    test_model("tiny-llama", "q8_0", -1, false);
    test_model("tiny-qwen3", "q4_k_m", -1, false);
    test_model("qwen2.5-0.5b", "q4_0", -1, false);
    test_graph_reuse("qwen2.5-0.5b", "q4_0");
    test_argmax();
    test_attn_split();
    test_item_model("split", "d4", 8192, "qwen2.5-0.5b", "q4_0", 1e-6);
    test_greedy_model("qwen2.5-0.5b", "q4_0");
    test_pdl_model("pdl", "d6", mi8a_pdl_launches, "qwen2.5-0.5b", "q4_0");
    test_bitwise_item_model("shared_x", "d7", -1, "tiny-llama", "q8_0");
    test_bitwise_item_model("shared_x", "d7", -1, "qwen2.5-0.5b", "q4_0");
    test_pdl_model("pdl_small", "d10", mi8a_pdl_small_launches, "tiny-llama", "q8_0");
    test_pdl_model("pdl_small", "d10", mi8a_pdl_small_launches, "qwen2.5-0.5b", "q4_0");
    test_bitwise_item_model("rope_pairs", "d8", 0, "tiny-llama", "q8_0");
    test_bitwise_item_model("rope_pairs", "d8", 0, "qwen2.5-0.5b", "q4_0");
    const char *no7 = getenv("MINFER_GATE_NO_7B");
    if (no7 && *no7 && strcmp(no7, "0")) gu_skip_named(&R, "model_qwen2.5-7b_q4_k_m", "MINFER_GATE_NO_7B set");
    else {
        test_model("qwen2.5-7b", "q4_k_m", -1, true);
        test_pdl_model("pdl", "d6", mi8a_pdl_launches, "qwen2.5-7b", "q4_k_m");
        test_bitwise_item_model("rope_pairs", "d8", 0, "qwen2.5-7b", "q4_k_m");
        test_item_model("q6k", "d11", 128, "qwen2.5-7b", "q4_k_m", 5e-2);
        test_pdl_model("pdl_small", "d10", mi8a_pdl_small_launches, "qwen2.5-7b", "q4_k_m");
    }
    cudaStreamDestroy(S);
    return gu_finish(&R);
}

/* Device check of the Q4_K streaming kernels (phase7e_perf/matvec_q4k_exact.cu; items e12 and
 * e14) for gate_7e: the one-token matmul and fused FFN against the CPU scalar dot of
 * common/quant (x quantized the same way): NMSE <= 1e-6, every output written (NaN poison),
 * repeat runs bitwise equal, and NMSE vs the staged kernel (e2 / e5) reported. The _qx forms
 * (x quantized in the kernel, e14) on every case: bit-identical to the plain forms, with x
 * 16-byte aligned and not (the plain path), the workspace poisoned before them (they must not
 * read it) and the output NaN-poisoned; two cases have x with the quantizer's edges (ties, a
 * zero block, a negative amax). Then one timing per 7B decode shape, staged vs q4k vs q4k_qx
 * (cudaEvent, median of 20 calls, quantization of x included in the first two; a measurement,
 * but the _qx form must still equal the plain one bit for bit there). */
#include "gates/7e/matvec_q4k_check.h"
#include "gates/7e/dev7e.h"
#include "common/core/mi_fp16.h"
#include "common/core/mi_canon.h"
#include "common/quant/mi_types.h"
#include "phase7e_perf/perf7e.h"
#include "phase7e_perf/matvec_q4k.h"

#define MC_NMSE_BOUND 1e-6
/* What the cases share: the run record, the stream, this check's own seeded data stream */
typedef struct {
    gu_run *R;
    cudaStream_t S;
    unsigned long long seed;
    bool xedge;   /* mc_case: x with the Q8_K quantizer's edge cases (mc_edge_x) */
} mc_ctx;

/* Super-blocks of x that reach the quantizer's edges: amax exactly 127 (iscale 1, d 1) with
 * every other value a half-integer (ties: nearest-even), an all-zero block (d 0), a block whose
 * amax is a negative element (level -127), values that land on +-127 after scaling, and large
 * (1e5) and small (1e-20) magnitudes. */
static void mc_edge_x(float *x, int64_t K) {
    const int64_t nsb = K / 256;
    for (int64_t s = 0; s < nsb; s++) {
        float *b = x + s * 256;
        for (int i = 0; i < 256; i++) {
            switch (s % 6) {
            case 0: b[i] = i == 0 ? 127.0f : (float)(i % 254 - 127) + 0.5f; break;
            case 1: b[i] = 0.0f; break;
            case 2: b[i] = i == 77 ? -3.0f : (float)(i % 7) * 0.25f - 0.75f; break;
            case 3: b[i] = (i & 1) ? 2.5f : -2.5f; break;
            case 4: b[i] = b[i] * 1e5f; break;
            default: b[i] = b[i] * 1e-20f; break;
            }
        }
    }
}

/* M rows of random Q4_K super-blocks: every bit pattern of the quants and scales, with the
 * f16 super-block scales (d, dmin) set to small finite values. The big shapes use it
 * (quantizing 68M floats would take the gate minutes); small shapes use gu_make_weights. */
static uint8_t *mc_random_blocks(unsigned long long *seed, int64_t K, int64_t M, size_t *bytes) {
    const size_t rb = mi_row_size(MI_TYPE_Q4_K, K), n = rb * (size_t)M, nb = n / 144;
    uint8_t *w = (uint8_t *)malloc(n);
    gu_fill(w, n, gu_rng(seed));
    for (size_t i = 0; i < nb; i++)
        for (int k = 0; k < 2; k++) {
            const uint16_t h = mi_f32_to_f16(gu_frand(seed, -0.02f, 0.02f));
            memcpy(w + i * 144 + 2 * k, &h, 2);
        }
    *bytes = n;
    return w;
}

/* One correctness case: unfused (bias optional) or fused (M = F); `off` shifts the weights'
 * device base (not 16-byte aligned: the fallback to the staged kernel). */
static void mc_case(mc_ctx *c, int64_t K, int64_t M, bool fused, bool with_bias, size_t off) {
    gu_run *R = c->R;
    cudaStream_t S = c->S;
    const mi_type t = MI_TYPE_Q4_K;
    char name[128];
    snprintf(name, sizeof name, "e12_%s_%s_K%lld_M%lld%s%s%s", fused ? "ffn" : "mmv", mi_type_name(t), (long long)K,
             (long long)M, with_bias ? "_bias" : "", off ? "_unaligned" : "", c->xedge ? "_xedge" : "");
    gu_begin(R, name);
    if (!mi7e_matvec_q4k_supported(t, K, 1)) {
        gu_fail(R, "the kernel refuses a shape it is meant to cover");
        return;
    }
    const bool big = (double)K * (double)M > 4e6;
    size_t wb = 0;
    uint8_t *w = big ? mc_random_blocks(&c->seed, K, M, &wb)
                     : (uint8_t *)gu_make_weights(&c->seed, t, K, M, 1.0f, &wb);
    uint8_t *w2 = NULL;
    if (fused)
        w2 = big ? mc_random_blocks(&c->seed, K, M, &wb) : (uint8_t *)gu_make_weights(&c->seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(&c->seed, (size_t)K, -1.f, 1.f), *bias = gu_rand_f32(&c->seed, (size_t)M, -0.5f, 0.5f);
    if (c->xedge) mc_edge_x(x, K);
    const size_t ny = (size_t)M;
    float *ref = (float *)malloc(ny * 4), *got = (float *)malloc(ny * 4), *got2 = (float *)malloc(ny * 4),
          *old = (float *)malloc(ny * 4), *g14 = (float *)malloc(ny * 4), *g14u = (float *)malloc(ny * 4);
    if (fused) {
        float *u = (float *)malloc(ny * 4);
        cpu_matmul(t, w, x, NULL, ref, K, M, 1);
        cpu_matmul(t, w2, x, NULL, u, K, M, 1);
        for (size_t i = 0; i < ny; i++) ref[i] = mi_canon_swiglu(ref[i], u[i]);
        free(u);
    } else {
        cpu_matmul(t, w, x, with_bias ? bias : NULL, ref, K, M, 1);
    }
    void *b1, *b2 = NULL, *b3, *b4, *b5;
    void *dw = dev_up_at(w, wb, off, &b1), *dw2 = fused ? dev_up_at(w2, wb, off, &b2) : NULL;
    float *dx = (float *)dev_up_at(x, (size_t)K * 4, 0, &b3), *db = (float *)dev_up_at(bias, (size_t)M * 4, 0, &b4);
    float *dx4 = (float *)dev_up_at(x, (size_t)K * 4, 4, &b5);   /* not 16-byte aligned: _qx takes the plain path */
    const size_t ws_b = mi7e_matvec_staged_workspace(t, K, 1) > mi7e_matvec_q4k_workspace(t, K)
                            ? mi7e_matvec_staged_workspace(t, K, 1)
                            : mi7e_matvec_q4k_workspace(t, K);
    void *ws = NULL;
    CK(cudaMalloc(&ws, ws_b));
    CK(cudaMemset(ws, 0xFF, ws_b));
    float *dy = (float *)dev_poison(ny * 4);
#define MC_RUN12() (fused ? mi7e_ffn_q4k(S, t, dw, dw2, dx, dy, K, M, ws) \
                          : mi7e_matvec_q4k(S, t, dw, dx, with_bias ? db : NULL, dy, K, M, ws))
    mi_status st = MC_RUN12();
    if (st == MI_OK) { dev_down_on(S, got, dy, ny * 4); CK(cudaMemset(dy, 0xFF, ny * 4)); }
    if (st == MI_OK) st = MC_RUN12();
    if (st == MI_OK) { dev_down_on(S, got2, dy, ny * 4); CK(cudaMemset(dy, 0xFF, ny * 4)); }
#undef MC_RUN12
    /* the plain form's output (got) is the reference of the _qx form */
    mi_status st14 = st;
#define MC_RUN14(xx) (fused ? mi7e_ffn_q4k_qx(S, t, dw, dw2, (xx), dy, K, M, ws) \
                            : mi7e_matvec_q4k_qx(S, t, dw, (xx), with_bias ? db : NULL, dy, K, M, ws))
    if (st14 == MI_OK) { CK(cudaMemset(ws, 0xFF, ws_b)); st14 = MC_RUN14(dx); }
    if (st14 == MI_OK) { dev_down_on(S, g14, dy, ny * 4); CK(cudaMemset(dy, 0xFF, ny * 4)); }
    if (st14 == MI_OK) { CK(cudaMemset(ws, 0xFF, ws_b)); st14 = MC_RUN14(dx4); }
    if (st14 == MI_OK) { dev_down_on(S, g14u, dy, ny * 4); CK(cudaMemset(dy, 0xFF, ny * 4)); }
#undef MC_RUN14
    if (st == MI_OK)
        st = fused ? mi7e_ffn_staged(S, t, dw, dw2, dx, dy, K, M, 1, ws)
                   : mi7e_matvec_staged(S, t, dw, dx, with_bias ? db : NULL, dy, K, M, 1, ws);
    if (st == MI_OK) dev_down_on(S, old, dy, ny * 4);
    if (st != MI_OK) {
        gu_fail(R, "launch: %s", mi_errmsg());
    } else {
        const double e_cpu = gu_nmse(got, ref, ny), e_old = gu_nmse(got, old, ny);
        const bool rep = memcmp(got, got2, ny * 4) == 0, same_old = memcmp(got, old, ny * 4) == 0;
        if (!(e_cpu <= MC_NMSE_BOUND) || !rep) {
            size_t i = 0;
            double worst = -1;
            for (size_t k = 0; k < ny; k++) {
                const double d = fabs((double)got[k] - (double)ref[k]);
                if (d != d) { i = k; break; }   /* a NaN (unwritten output) first */
                if (d > worst) { worst = d; i = k; }
            }
            printf("    %s: worst index %zu got %.9g want %.9g (e2/e5 %.9g)\n", name, i, got[i], ref[i], old[i]);
            gu_fail(R, "nmse vs cpu %.3g (bound %g), vs e2/e5 %.3g, repeat %s", e_cpu, MC_NMSE_BOUND, e_old,
                    rep ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(R, "nmse vs cpu %.3g, vs e2/e5 %.3g (%s), repeat bitwise", e_cpu, e_old,
                    same_old ? "bit-identical" : "not bit-identical");
        }
    }
    /* e14: the same case, bit for bit against e12 */
    char name14[144];
    snprintf(name14, sizeof name14, "e14%s", name + 3);
    gu_begin(R, name14);
    if (st != MI_OK) {
        gu_fail(R, "e12 / e2 launch failed: %s", mi_errmsg());
    } else if (st14 != MI_OK) {
        gu_fail(R, "launch: %s", mi_errmsg());
    } else {
        const bool a = memcmp(g14, got, ny * 4) == 0, b = memcmp(g14u, got, ny * 4) == 0;
        if (a && b) {
            gu_pass(R, "bit-identical to e12 (x aligned, and x + 4 bytes: e12's path), workspace poisoned, nmse vs "
                       "cpu %.3g", gu_nmse(g14, ref, ny));
        } else {
            const float *g = a ? g14u : g14;
            size_t i = 0;
            while (i < ny && !memcmp(&g[i], &got[i], 4)) i++;
            printf("    %s: first difference index %zu got %.9g want (e12) %.9g\n", name14, i, g[i], got[i]);
            gu_fail(R, "not bit-identical to e12 (x aligned: %s, x + 4: %s); nmse vs e12 %.3g", a ? "same" : "DIFFERS",
                    b ? "same" : "DIFFERS", gu_nmse(g, got, ny));
        }
    }
    free(w); free(w2); free(x); free(bias); free(ref); free(got); free(got2); free(old); free(g14); free(g14u);
    cudaFree(b1); if (b2) cudaFree(b2); cudaFree(b3); cudaFree(b4); cudaFree(b5); cudaFree(ws); cudaFree(dy);
}

/* the timed call: the staged kernel (e2 / e5), the q4k kernel (e12) or its _qx form (e14) */
enum { MC_STAGED, MC_Q4K, MC_Q4K_QX };
typedef struct {
    int which;
    bool fused;
    const void *w, *w2;
    const float *x;
    float *y;
    int64_t K, M;
    void *ws;
} mc_args;
static mi_status mc_call(cudaStream_t S, const void *p) {
    const mc_args *a = (const mc_args *)p;
    const mi_type t = MI_TYPE_Q4_K;
    if (a->which == MC_STAGED)
        return a->fused ? mi7e_ffn_staged(S, t, a->w, a->w2, a->x, a->y, a->K, a->M, 1, a->ws)
                        : mi7e_matvec_staged(S, t, a->w, a->x, NULL, a->y, a->K, a->M, 1, a->ws);
    if (a->which == MC_Q4K_QX)
        return a->fused ? mi7e_ffn_q4k_qx(S, t, a->w, a->w2, a->x, a->y, a->K, a->M, a->ws)
                        : mi7e_matvec_q4k_qx(S, t, a->w, a->x, NULL, a->y, a->K, a->M, a->ws);
    return a->fused ? mi7e_ffn_q4k(S, t, a->w, a->w2, a->x, a->y, a->K, a->M, a->ws)
                    : mi7e_matvec_q4k(S, t, a->w, a->x, NULL, a->y, a->K, a->M, a->ws);
}
/* median ms of 20 calls after 3 warm-up calls; 0 on an error (its status in *st) */
static float mc_time(cudaStream_t S, int which, bool fused, const void *w, const void *w2, const float *x, float *y,
                     int64_t K, int64_t M, void *ws, mi_status *st) {
    const mc_args a = {which, fused, w, w2, x, y, K, M, ws};
    const float r = dev_time_median(S, 3, 20, mc_call, &a, st);
    return *st == MI_OK ? r : 0.0f;
}

/* staged (e2 / e5), q4k (e12) and q4k_qx (e14) on one 7B shape; the _qx output must equal the
 * plain one bit for bit */
static void mc_timing(mc_ctx *c, const char *what, int64_t K, int64_t M, bool fused) {
    gu_run *R = c->R;
    cudaStream_t S = c->S;
    const mi_type t = MI_TYPE_Q4_K;
    char name[128];
    snprintf(name, sizeof name, "e12_time_%s_%s_K%lld_M%lld", what, mi_type_name(t), (long long)K, (long long)M);
    gu_begin(R, name);
    size_t wb = 0;
    uint8_t *w = mc_random_blocks(&c->seed, K, M, &wb), *w2 = fused ? mc_random_blocks(&c->seed, K, M, &wb) : NULL;
    float *x = gu_rand_f32(&c->seed, (size_t)K, -1.f, 1.f);
    void *b1, *b2 = NULL, *b3;
    void *dw = dev_up_at(w, wb, 0, &b1), *dw2 = fused ? dev_up_at(w2, wb, 0, &b2) : NULL;
    float *dx = (float *)dev_up_at(x, (size_t)K * 4, 0, &b3);
    void *ws = NULL;
    CK(cudaMalloc(&ws, mi7e_matvec_staged_workspace(t, K, 1) + mi7e_matvec_q4k_workspace(t, K)));
    float *dy = (float *)dev_poison((size_t)M * 4);
    mi_status st;
    float *y12 = (float *)malloc((size_t)M * 4), *y14 = (float *)malloc((size_t)M * 4);
    const float t2 = mc_time(S, MC_STAGED, fused, dw, dw2, dx, dy, K, M, ws, &st);
    float t12 = 0.0f, t14 = 0.0f;
    if (st == MI_OK) t12 = mc_time(S, MC_Q4K, fused, dw, dw2, dx, dy, K, M, ws, &st);
    if (st == MI_OK) { dev_down_on(S, y12, dy, (size_t)M * 4); CK(cudaMemset(dy, 0xFF, (size_t)M * 4)); }
    if (st == MI_OK) t14 = mc_time(S, MC_Q4K_QX, fused, dw, dw2, dx, dy, K, M, ws, &st);
    if (st == MI_OK) dev_down_on(S, y14, dy, (size_t)M * 4);
    const double gb = (double)wb * (fused ? 2 : 1) / 1e9;
    if (st != MI_OK) {
        gu_fail(R, "launch: %s", mi_errmsg());
    } else {
        const bool same = memcmp(y12, y14, (size_t)M * 4) == 0;
        printf("    %s: %.1f MB weights, %s %.4f ms (%.0f GB/s), e12 %.4f ms (%.0f GB/s, x%.2f), e14 %.4f ms "
               "(%.0f GB/s, x%.2f vs e12)%s\n", name, gb * 1e3, fused ? "e5" : "e2", t2, gb / (t2 * 1e-3), t12,
               gb / (t12 * 1e-3), t12 > 0 ? t2 / t12 : 0.0, t14, gb / (t14 * 1e-3), t14 > 0 ? t12 / t14 : 0.0,
               same ? "" : " e14 NOT bit-identical to e12");
        if (!same)
            gu_fail(R, "e14's output differs from e12's on this shape");
        else
            gu_pass(R, "%.1f MB: %s %.4f ms %.0f GB/s, e12 %.4f ms %.0f GB/s, e14 %.4f ms %.0f GB/s, bit-identical to "
                    "e12 (median of 20, x quantization included)", gb * 1e3, fused ? "e5" : "e2", t2,
                    gb / (t2 * 1e-3), t12, gb / (t12 * 1e-3), t14, gb / (t14 * 1e-3));
    }
    free(w); free(w2); free(x); free(y12); free(y14);
    cudaFree(b1); if (b2) cudaFree(b2); cudaFree(b3); cudaFree(ws); cudaFree(dy);
}

void matvec_q4k_check(gu_run *R, cudaStream_t S) {
    mc_ctx c = {R, S, 0xe12, false};
    mc_case(&c, 3584, 3584, false, false, 0);
    mc_case(&c, 3584, 512, false, false, 0);
    mc_case(&c, 18944, 3584, false, false, 0);
    mc_case(&c, 3584, 18944, true, false, 0);
    mc_case(&c, 256, 1, false, false, 0);
    mc_case(&c, 3584, 1000, false, true, 0);
    mc_case(&c, 256, 7, true, false, 0);
    mc_case(&c, 18944, 512, false, true, 0);
    mc_case(&c, 3584, 1000, true, false, 0);
    /* base 4 mod 16: goes to the staged kernel */
    mc_case(&c, 3584, 512, false, true, 4);
    /* x at the quantizer's edges (the _qx forms quantize it in the kernel), unfused and fused */
    c.xedge = true;
    mc_case(&c, 3584, 512, false, true, 0);
    mc_case(&c, 3584, 512, true, false, 0);
    c.xedge = false;
    gu_begin(R, "e12_supported");
    const bool ok = mi7e_matvec_q4k_supported(MI_TYPE_Q4_K, 18944, 1) &&
                    mi7e_matvec_q4k_supported(MI_TYPE_Q4_K, 256, 1) &&
                    !mi7e_matvec_q4k_supported(MI_TYPE_Q6_K, 256, 1) &&
                    !mi7e_matvec_q4k_supported(MI_TYPE_Q4_K, 3584, 2) &&
                    !mi7e_matvec_q4k_supported(MI_TYPE_Q8_0, 3584, 1) &&
                    !mi7e_matvec_q4k_supported(MI_TYPE_Q4_K, 300, 1) &&
                    !mi7e_matvec_q4k_supported(MI_TYPE_Q4_K, 256 * 200, 1);
    if (ok) gu_pass(R, "Q4_K N = 1 accepted; Q6_K, N = 2, Q8_0, K = 300, K = 51200 refused");
    else gu_fail(R, "mi7e_matvec_q4k_supported accepts or refuses the wrong shapes");
    /* 7B (Qwen2.5-7B) decode shapes */
    mc_timing(&c, "ffn_gate_up", 3584, 18944, true);
    mc_timing(&c, "ffn_down", 18944, 3584, false);
    mc_timing(&c, "attn_q_o", 3584, 3584, false);
}

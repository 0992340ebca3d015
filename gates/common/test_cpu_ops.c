/* CPU backend ops vs naive references written here (double precision where it
 * matters): elementwise exact, RMS norm bit-identical to the canonical order, RoPE both
 * modes, matmul per weight type by NMSE vs dequantized-weights x float activations,
 * attention vs a naive softmax with n_past > 0 and GQA, KV store, get_rows, slices. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/backend/sched.h"
#include "common/core/mi_canon.h"

/* ---- helpers ---- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float *rand_vec(size_t n, float scale) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}

/* a leaf on the CPU backend with given data (not owned) */
static mi_tensor *leaf(const char *name, mi_type type, int64_t ne0, int64_t ne1, void *data) {
    mi_tensor *t = calloc(1, sizeof *t);
    int64_t ne[2] = {ne0, ne1};
    tensor_init(t, name, type, 2, ne);
    t->data = data;
    return t;
}

typedef struct {
    mi_backend *cpu;
    mi_sched *s;
} env;

static env env_new(int n_threads) {
    env e;
    cr_assert_eq(mi_backend_cpu_new(n_threads, &e.cpu), MI_OK, "%s", mi_errmsg());
    cr_assert_eq(sched_new(&e.cpu, 1, &e.s), MI_OK, "%s", mi_errmsg());
    return e;
}
static void env_free(env *e) {
    sched_free(e->s);
    e->cpu->iface->destroy(e->cpu);
}

/* compute g and copy out `out` (F32) into a fresh array */
static float *run(env *e, mi_graph *g, mi_tensor *out) {
    out->flags |= MI_T_OUTPUT;
    g->output = out;
    mi_status st = sched_compute(e->s, g);
    cr_assert_eq(st, MI_OK, "compute: %s", mi_errmsg());
    size_t nb = mi_nbytes(out);
    float *r = malloc(nb);
    cr_assert_eq(sched_read(e->s, out, r, 0, nb), MI_OK, "%s", mi_errmsg());
    return r;
}

static double nmse(const float *got, const double *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d;
        den += want[i] * want[i];
    }
    return den > 0 ? num / den : num;
}

static void expect_bits(const float *got, const float *want, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4) != 0)
            cr_assert_fail("%s: first mismatch at %zu: got %.9g want %.9g", what, i, (double)got[i], (double)want[i]);
}

/* ---- elementwise ---- */

Test(cpu_ops, add_mul_broadcast_exact) {
    env e = env_new(2);
    const int64_t D = 300, N = 70;   /* large enough to use the pool */
    float *a = rand_vec((size_t)(D * N), 3), *b = rand_vec((size_t)(D * N), 3), *c = rand_vec((size_t)D, 3);
    for (int op = 0; op < 2; op++)
        for (int bc = 0; bc < 2; bc++) {
            mi_graph *g = graph_new(16);
            mi_tensor *xa = graph_input(g, "a", MI_TYPE_F32, D, N, a);
            mi_tensor *xb = bc ? graph_input(g, "c", MI_TYPE_F32, D, 1, c) : graph_input(g, "b", MI_TYPE_F32, D, N, b);
            mi_tensor *y = op ? graph_mul(g, xa, xb) : graph_add(g, xa, xb);
            cr_assert_not_null(y, "%s", mi_errmsg());
            float *r = run(&e, g, y);
            for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < D; i++) {
                    double x0 = a[n * D + i], x1 = bc ? c[i] : b[n * D + i];
                    float want = (float)(op ? x0 * x1 : x0 + x1);   /* exact in double, one rounding */
                    if (memcmp(&r[n * D + i], &want, 4))
                        cr_assert_fail("%s bc=%d at (%lld,%lld): got %.9g want %.9g", op ? "mul" : "add", bc,
                                       (long long)i, (long long)n, (double)r[n * D + i], (double)want);
                }
            free(r);
            graph_free(g);
        }
    free(a);
    free(b);
    free(c);
    env_free(&e);
}

Test(cpu_ops, silu_swiglu) {
    env e = env_new(2);
    const int64_t D = 257, N = 40;
    size_t n = (size_t)(D * N);
    float *a = rand_vec(n, 12), *b = rand_vec(n, 2);
    a[0] = -100.0f; a[1] = 100.0f; a[2] = 0.0f; a[3] = -87.0f; a[4] = 1e-30f;
    /* range edges of the canonical exp (overflow, underflow, subnormal results), inf, nan */
    const float sp[8] = {88.72283f, 88.7229f, -103.97208f, -103.9721f, 95.0f, INFINITY, -INFINITY, NAN};
    for (int i = 0; i < 8; i++) a[8 + i] = -sp[i];
    for (size_t i = 16; i < 16 + 2000; i++) a[i] = -110.0f + 0.105f * (float)(i - 16);
    mi_graph *g = graph_new(16);
    mi_tensor *xa = graph_input(g, "a", MI_TYPE_F32, D, N, a);
    mi_tensor *xb = graph_input(g, "b", MI_TYPE_F32, D, N, b);
    mi_tensor *s = graph_silu(g, xa);
    mi_tensor *w = graph_swiglu(g, xa, xb);
    s->flags |= MI_T_OUTPUT;
    float *rw = run(&e, g, w);
    float *rs = malloc(n * 4);
    cr_assert_eq(sched_read(e.s, s, rs, 0, n * 4), MI_OK);
    /* bit-identical to the canonical scalar definition (what the CUDA kernels mirror) */
    for (size_t i = 0; i < n; i++) {
        float cs = mi_canon_silu(a[i]), cw = mi_canon_swiglu(a[i], b[i]);
        cr_assert(memcmp(&rs[i], &cs, 4) == 0, "silu %zu (x=%.9g): got %.9g canon %.9g", i, (double)a[i], (double)rs[i],
                  (double)cs);
        cr_assert(memcmp(&rw[i], &cw, 4) == 0, "swiglu %zu: got %.9g canon %.9g", i, (double)rw[i], (double)cw);
    }
    for (size_t i = 0; i < n; i++) {
        if (i >= 8 && i < 16) continue;   /* the special values below */
        double sd = (double)a[i] / (1.0 + exp(-(double)a[i]));
        double wd = sd * (double)b[i];
        cr_assert(fabs(rs[i] - sd) <= 4e-7 * fabs(sd) + 1e-35, "silu %zu: got %.9g want %.9g", i, (double)rs[i], sd);
        cr_assert(fabs(rw[i] - wd) <= 6e-7 * fabs(wd) + 1e-35, "swiglu %zu: got %.9g want %.9g", i, (double)rw[i], wd);
    }
    free(rs);
    free(rw);
    graph_free(g);
    free(a);
    free(b);
    env_free(&e);
}

/* ---- RMS norm (whole rows and per head) ---- */

Test(cpu_ops, rms_norm_canonical_and_per_head) {
    env e = env_new(2);
    const int64_t D = 896, N = 19;
    const int64_t groups[3] = {896, 64, 37 * 0 + 128};
    float *x = rand_vec((size_t)(D * N), 4);
    for (int gi = 0; gi < 3; gi++) {
        int64_t G = groups[gi];
        float *w = rand_vec((size_t)G, 2);
        mi_tensor *lw = leaf("w", MI_TYPE_F32, G, 1, w);
        mi_graph *g = graph_new(16);
        mi_tensor *in = graph_input(g, "x", MI_TYPE_F32, D, N, x);
        mi_tensor *y = graph_rms_norm(g, in, lw, G, 1e-6f);
        cr_assert_not_null(y, "%s", mi_errmsg());
        float *r = run(&e, g, y);
        float *canon = malloc((size_t)(D * N) * 4);
        double max_rel = 0;
        for (int64_t row = 0; row < D * N / G; row++) {
            const float *xr = x + row * G;
            float sc = mi_canon_rms_scale(mi_canon_sumsq_host(xr, G), G, 1e-6f);
            double ss = 0;
            for (int64_t i = 0; i < G; i++) ss += (double)xr[i] * xr[i];
            double scd = 1.0 / sqrt(ss / (double)G + 1e-6);
            for (int64_t i = 0; i < G; i++) {
                float t = xr[i] * sc;
                canon[row * G + i] = t * w[i];
                double want = (double)xr[i] * scd * w[i];
                double rel = fabs(r[row * G + i] - want) / (fabs(want) + 1e-6);
                if (rel > max_rel) max_rel = rel;
            }
        }
        cr_assert(max_rel < 2e-6, "group %lld: max rel err %.3g vs double", (long long)G, max_rel);
        expect_bits(r, canon, (size_t)(D * N), "rms_norm vs mi_canon order");
        free(canon);
        free(r);
        graph_free(g);
        free(w);
        free(lw);
    }
    free(x);
    env_free(&e);
}

/* ---- RoPE ---- */

Test(cpu_ops, rope_normal_and_neox) {
    env e = env_new(2);
    const int hd = 64, H = 3, n_rot = 48;   /* n_rot < hd: dims >= n_rot pass through */
    const int64_t N = 5;
    int32_t pos[5] = {0, 1, 7, 100, 4095};
    float *x = rand_vec((size_t)(hd * H * N), 1);
    mi_tensor *lp = leaf("pos", MI_TYPE_I32, N, 1, pos);
    for (int m = 0; m < 2; m++) {
        int mode = m ? MI_ROPE_NEOX : MI_ROPE_NORMAL;
        mi_graph *g = graph_new(16);
        mi_tensor *in = graph_input(g, "x", MI_TYPE_F32, hd * H, N, x);
        mi_tensor *y = graph_rope(g, in, lp, hd, mode, n_rot, 10000.0f);
        cr_assert_not_null(y, "%s", mi_errmsg());
        float *r = run(&e, g, y);
        for (int64_t n = 0; n < N; n++)
            for (int h = 0; h < H; h++) {
                const float *xv = x + n * hd * H + h * hd;
                const float *rv = r + n * hd * H + h * hd;
                for (int i = 0; i < n_rot / 2; i++) {
                    double th = pos[n] * pow(10000.0, -2.0 * i / n_rot);
                    int i0 = m ? i : 2 * i, i1 = m ? i + n_rot / 2 : 2 * i + 1;
                    double y0 = xv[i0] * cos(th) - xv[i1] * sin(th);
                    double y1 = xv[i0] * sin(th) + xv[i1] * cos(th);
                    /* float theta carries pos * 2^-24 relative error: tolerance grows with pos */
                    double tol = 1e-6 + 4e-7 * fabs(th);
                    cr_assert(fabs(rv[i0] - y0) < tol && fabs(rv[i1] - y1) < tol,
                              "mode %d pos %d head %d pair %d: got (%.7g, %.7g) want (%.7g, %.7g)", mode, pos[n], h, i,
                              (double)rv[i0], (double)rv[i1], y0, y1);
                }
                for (int i = n_rot; i < hd; i++) cr_assert_eq(rv[i], xv[i], "pass-through dim %d changed", i);
            }
        free(r);
        graph_free(g);
    }
    free(lp);
    free(x);
    env_free(&e);
}

/* ---- matmul per weight type ---- */

typedef struct {
    mi_type t;
    double max_nmse;   /* vs dequantized weights x float activations, in double */
} mm_case;

static void matmul_case(env *e, mi_type type, double max_nmse, int64_t K, int64_t M, int64_t N, bool with_bias,
                        float **out_keep) {
    float *wf = rand_vec((size_t)(K * M), 1), *xf = rand_vec((size_t)(K * N), 1), *bias = rand_vec((size_t)M, 1);
    size_t rb = mi_row_size(type, K);
    cr_assert(rb > 0);
    char *wq = malloc(rb * (size_t)M);
    float *wd = malloc((size_t)(K * M) * 4);
    for (int64_t m = 0; m < M; m++) {
        mi_quantize_row(type, wf + m * K, wq + (size_t)m * rb, K);
        mi_dequantize_row(type, wq + (size_t)m * rb, wd + m * K, K);
    }
    mi_tensor *lw = leaf("w", type, K, M, wq), *lb = leaf("b", MI_TYPE_F32, M, 1, bias);
    mi_graph *g = graph_new(16);
    mi_tensor *in = graph_input(g, "x", MI_TYPE_F32, K, N, xf);
    mi_tensor *y = graph_matmul(g, lw, in, with_bias ? lb : NULL);
    cr_assert_not_null(y, "%s", mi_errmsg());
    float *r = run(e, g, y);
    double *want = malloc((size_t)(M * N) * sizeof *want);
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += (double)wd[m * K + k] * xf[n * K + k];
            want[n * M + m] = s + (with_bias ? bias[m] : 0.0);
        }
    double err = nmse(r, want, (size_t)(M * N));
    cr_log_info("matmul %-5s K=%lld M=%lld N=%lld bias=%d: NMSE %.3g (limit %.1g)", mi_type_name(type), (long long)K,
                (long long)M, (long long)N, with_bias, err, max_nmse);
    cr_assert(err <= max_nmse, "matmul %s N=%lld: NMSE %.3g > %.1g (first: got %.6g want %.6g)", mi_type_name(type),
              (long long)N, err, max_nmse, (double)r[0], want[0]);
    if (out_keep)
        *out_keep = r;
    else
        free(r);
    free(want);
    graph_free(g);
    free(lw);
    free(lb);
    free(wq);
    free(wd);
    free(wf);
    free(xf);
    free(bias);
}

/* Limits: F32/F16/BF16 weights see only float summation order; quantized types add the
 * Q8_0/Q8_1/Q8_K activation rounding (about 1e-5 NMSE for uniform inputs) on top. */
static const mm_case k_mm[] = {
    {MI_TYPE_F32, 1e-10}, {MI_TYPE_F16, 1e-10}, {MI_TYPE_BF16, 1e-10}, {MI_TYPE_Q4_0, 1e-4},
    {MI_TYPE_Q4_1, 1e-4},  {MI_TYPE_Q5_0, 1e-4}, {MI_TYPE_Q5_1, 1e-4},  {MI_TYPE_Q8_0, 1e-4},
    {MI_TYPE_Q4_K, 1e-4},  {MI_TYPE_Q5_K, 1e-4}, {MI_TYPE_Q6_K, 1e-4},
};

Test(cpu_ops, matmul_every_type_decode_and_prefill) {
    env e = env_new(2);
    for (size_t i = 0; i < sizeof k_mm / sizeof k_mm[0]; i++) {
        matmul_case(&e, k_mm[i].t, k_mm[i].max_nmse, 512, 77, 1, true, NULL);
        matmul_case(&e, k_mm[i].t, k_mm[i].max_nmse, 512, 45, 37, i % 2 == 0, NULL);
    }
    env_free(&e);
}

Test(cpu_ops, matmul_thread_count_invariant) {
    /* each output element is computed by one thread in a fixed order: 1 vs 2 threads bit-equal */
    float *r1, *r2;
    env e1 = env_new(1), e2 = env_new(2);
    uint64_t seed = g_rng;
    matmul_case(&e1, MI_TYPE_Q4_K, 1e-4, 1024, 130, 40, true, &r1);
    g_rng = seed;
    matmul_case(&e2, MI_TYPE_Q4_K, 1e-4, 1024, 130, 40, true, &r2);
    expect_bits(r1, r2, 130 * 40, "1 vs 2 threads");
    free(r1);
    free(r2);
    env_free(&e1);
    env_free(&e2);
}

/* ---- KV store + attention ---- */

static float f16_round(float v) { return (float)(_Float16)v; }

static void attn_case(env *e, mi_type kv_type, int64_t n_past, int64_t N, int hd) {
    const int Hq = 6, Hkv = 2;
    const int64_t n_ctx = 64, row = (int64_t)hd * Hkv;
    const float scale = 1.0f / sqrtf((float)hd);
    size_t es = kv_type == MI_TYPE_F16 ? 2 : 4;
    void *kc = calloc((size_t)(row * n_ctx), es), *vc = calloc((size_t)(row * n_ctx), es);
    float *kd = calloc((size_t)(row * n_ctx), 4), *vd = calloc((size_t)(row * n_ctx), 4);   /* reference copy */
    for (int64_t i = 0; i < row * n_past; i++) {
        kd[i] = frand() * 2;
        vd[i] = frand();
        if (kv_type == MI_TYPE_F16) {
            kd[i] = f16_round(kd[i]);
            vd[i] = f16_round(vd[i]);
            _Float16 a = (_Float16)kd[i], b = (_Float16)vd[i];
            memcpy((uint16_t *)kc + i, &a, 2);
            memcpy((uint16_t *)vc + i, &b, 2);
        } else {
            ((float *)kc)[i] = kd[i];
            ((float *)vc)[i] = vd[i];
        }
    }
    float *q = rand_vec((size_t)(hd * Hq * N), 2), *kn = rand_vec((size_t)(row * N), 2), *vn = rand_vec((size_t)(row * N), 1);
    for (int64_t i = 0; i < row * N; i++) {
        kd[row * n_past + i] = kv_type == MI_TYPE_F16 ? f16_round(kn[i]) : kn[i];
        vd[row * n_past + i] = kv_type == MI_TYPE_F16 ? f16_round(vn[i]) : vn[i];
    }
    mi_tensor *lk = leaf("cache_k", kv_type, row, n_ctx, kc), *lv = leaf("cache_v", kv_type, row, n_ctx, vc);
    lk->flags |= MI_T_PERSIST;
    lv->flags |= MI_T_PERSIST;
    mi_graph *g = graph_new(16);
    mi_tensor *iq = graph_input(g, "q", MI_TYPE_F32, hd * Hq, N, q);
    mi_tensor *ik = graph_input(g, "k", MI_TYPE_F32, row, N, kn);
    mi_tensor *iv = graph_input(g, "v", MI_TYPE_F32, row, N, vn);
    mi_tensor *sk = graph_kv_store(g, ik, lk, n_past), *sv = graph_kv_store(g, iv, lv, n_past);
    cr_assert(sk && sv, "%s", mi_errmsg());
    mi_tensor *o = graph_attn(g, iq, sk, sv, n_past, hd, Hq, Hkv, scale);
    cr_assert_not_null(o, "%s", mi_errmsg());
    float *r = run(e, g, o);
    /* cache rows n_past.. hold the new rows (F16 by IEEE round-to-nearest-even), others untouched */
    for (int64_t i = 0; i < row * n_ctx; i++) {
        float got = kv_type == MI_TYPE_F16 ? (float)((_Float16 *)kc)[i] : ((float *)kc)[i];
        float want = i < row * (n_past + N) ? kd[i] : 0.0f;
        cr_assert(memcmp(&got, &want, 4) == 0, "K cache elem %lld: got %.7g want %.7g", (long long)i, (double)got,
                  (double)want);
    }
    double *want = malloc((size_t)(hd * Hq * N) * sizeof *want);
    double *p = malloc((size_t)n_ctx * sizeof *p);
    for (int64_t i = 0; i < N; i++)
        for (int h = 0; h < Hq; h++) {
            int kvh = h / (Hq / Hkv);
            int64_t n = n_past + i + 1;
            double mx = -1e300, sum = 0;
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int d = 0; d < hd; d++) s += (double)q[i * hd * Hq + h * hd + d] * kd[j * row + kvh * hd + d];
                p[j] = s * scale;
                if (p[j] > mx) mx = p[j];
            }
            for (int64_t j = 0; j < n; j++) sum += (p[j] = exp(p[j] - mx));
            for (int d = 0; d < hd; d++) {
                double acc = 0;
                for (int64_t j = 0; j < n; j++) acc += p[j] * vd[j * row + kvh * hd + d];
                want[i * hd * Hq + h * hd + d] = acc / sum;
            }
        }
    double err = nmse(r, want, (size_t)(hd * Hq * N));
    cr_log_info("attn %s hd=%d n_past=%lld N=%lld: NMSE %.3g", mi_type_name(kv_type), hd, (long long)n_past,
                (long long)N, err);
    cr_assert(err < 1e-10, "attn %s n_past=%lld N=%lld: NMSE %.3g (got %.7g want %.7g at 0)", mi_type_name(kv_type),
              (long long)n_past, (long long)N, err, (double)r[0], want[0]);
    free(want);
    free(p);
    free(r);
    graph_free(g);
    free(lk);
    free(lv);
    free(kc);
    free(vc);
    free(kd);
    free(vd);
    free(q);
    free(kn);
    free(vn);
}

Test(cpu_ops, attention_gqa_with_past) {
    env e = env_new(2);
    attn_case(&e, MI_TYPE_F16, 9, 1, 32);     /* decode */
    attn_case(&e, MI_TYPE_F16, 13, 7, 32);    /* prefill continuing a context */
    attn_case(&e, MI_TYPE_F32, 5, 11, 32);
    attn_case(&e, MI_TYPE_F32, 0, 1, 32);
    /* head_dim 64/128 with N >= 8: the transposed-K AVX-512 path where available */
    attn_case(&e, MI_TYPE_F16, 20, 37, 64);
    attn_case(&e, MI_TYPE_F32, 3, 17, 128);
    attn_case(&e, MI_TYPE_F16, 0, 8, 64);
    attn_case(&e, MI_TYPE_F16, 21, 1, 128);
    env_free(&e);
}

/* ---- get_rows, slice ---- */

Test(cpu_ops, get_rows_and_slice) {
    env e = env_new(2);
    const int64_t E = 256, V = 50;
    int32_t ids[6] = {3, 0, 49, 3, 17, 8};
    mi_tensor *lid = leaf("ids", MI_TYPE_I32, 6, 1, ids);
    const mi_type types[] = {MI_TYPE_F32, MI_TYPE_F16, MI_TYPE_Q4_0, MI_TYPE_Q8_0, MI_TYPE_Q4_K, MI_TYPE_Q6_K};
    float *tf = rand_vec((size_t)(E * V), 1);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        mi_type t = types[ti];
        size_t rb = mi_row_size(t, E);
        char *tab = malloc(rb * (size_t)V);
        for (int64_t v = 0; v < V; v++) mi_quantize_row(t, tf + v * E, tab + (size_t)v * rb, E);
        mi_tensor *lt = leaf("tab", t, E, V, tab);
        mi_graph *g = graph_new(16);
        mi_tensor *y = graph_get_rows(g, lt, lid);
        mi_tensor *sl = graph_slice_rows(g, y, 2, 3);
        cr_assert(y && sl, "%s", mi_errmsg());
        y->flags |= MI_T_OUTPUT;
        float *r = run(&e, g, sl);
        float *full = malloc((size_t)(E * 6) * 4);
        cr_assert_eq(sched_read(e.s, y, full, 0, (size_t)(E * 6) * 4), MI_OK);
        float *row = malloc((size_t)E * 4);
        for (int i = 0; i < 6; i++) {
            if (t == MI_TYPE_F32) memcpy(row, tf + ids[i] * E, (size_t)E * 4);
            else if (t == MI_TYPE_F16)
                for (int64_t k = 0; k < E; k++) row[k] = (float)(_Float16)tf[ids[i] * E + k];
            else
                mi_dequantize_row(t, tab + (size_t)ids[i] * rb, row, E);
            expect_bits(full + i * E, row, (size_t)E, mi_type_name(t));
            if (i >= 2 && i < 5) expect_bits(r + (i - 2) * E, row, (size_t)E, "slice_rows");
        }
        free(row);
        free(full);
        free(r);
        graph_free(g);
        free(lt);
        free(tab);
    }
    /* an id outside the table is an error, not a crash */
    ids[1] = 50;
    mi_tensor *lt = leaf("tab", MI_TYPE_F32, E, V, tf);
    mi_graph *g = graph_new(16);
    mi_tensor *y = graph_get_rows(g, lt, lid);
    y->flags |= MI_T_OUTPUT;
    cr_assert_neq(sched_compute(e.s, g), MI_OK);
    cr_assert(strstr(mi_errmsg(), "id 50") != NULL, "message: %s", mi_errmsg());
    graph_free(g);
    free(lt);
    free(tf);
    free(lid);
    env_free(&e);
}

/* ---- fused FFN_SWIGLU (phase 7c fusion) ---- */

Test(cpu_ops, ffn_swiglu_equals_unfused) {
    /* same dot kernels and the canonical swiglu: bit-identical to matmul, matmul, swiglu
     * (Q5_K weights take the per-call vec_dot path in both graphs: no GEMM for them) */
    env e = env_new(2);
    const int64_t K = 256, F = 96, N = 9;
    size_t rb = mi_row_size(MI_TYPE_Q5_K, K);
    char *wg = malloc(rb * F), *wu = malloc(rb * F);
    float *tmp = rand_vec((size_t)K, 1), *x = rand_vec((size_t)(K * N), 1);
    for (int64_t f = 0; f < F; f++) {
        for (int64_t k = 0; k < K; k++) tmp[k] = frand();
        mi_quantize_row(MI_TYPE_Q5_K, tmp, wg + (size_t)f * rb, K);
        for (int64_t k = 0; k < K; k++) tmp[k] = frand();
        mi_quantize_row(MI_TYPE_Q5_K, tmp, wu + (size_t)f * rb, K);
    }
    mi_tensor *lg = leaf("w_gate", MI_TYPE_Q5_K, K, F, wg), *lu = leaf("w_up", MI_TYPE_Q5_K, K, F, wu);
    mi_graph *g1 = graph_new(16);
    mi_tensor *x1 = graph_input(g1, "x", MI_TYPE_F32, K, N, x);
    mi_tensor *ref = graph_swiglu(g1, graph_matmul(g1, lg, x1, NULL), graph_matmul(g1, lu, x1, NULL));
    float *r1 = run(&e, g1, ref);
    mi_graph *g2 = graph_new(16);
    mi_tensor *x2 = graph_input(g2, "x", MI_TYPE_F32, K, N, x);
    int64_t ne[2] = {F, N};
    mi_tensor *fu = graph_new_node(g2, MI_OP_FFN_SWIGLU, MI_TYPE_F32, 2, ne, "ffn");
    fu->src[0] = lg;
    fu->src[1] = lu;
    fu->src[2] = x2;
    float *r2 = run(&e, g2, fu);
    expect_bits(r2, r1, (size_t)(F * N), "ffn_swiglu vs unfused");
    free(r1);
    free(r2);
    graph_free(g1);
    graph_free(g2);
    free(lg);
    free(lu);
    free(wg);
    free(wu);
    free(tmp);
    free(x);
    env_free(&e);
}

/* ---- the decode fusions (NORM_MATMUL, NORM_FFN_SWIGLU, MATMUL_ADD): the CPU runs them with the
 * unfused nodes' arithmetic, so each is bit-identical to its unfused graph ---- */

static char *quant_rows(mi_type t, int64_t K, int64_t M) {
    size_t rb = mi_row_size(t, K);
    char *w = malloc(rb * (size_t)M);
    float *tmp = rand_vec((size_t)K, 1);
    for (int64_t m = 0; m < M; m++) {
        for (int64_t k = 0; k < K; k++) tmp[k] = frand();
        mi_quantize_row(t, tmp, w + (size_t)m * rb, K);
    }
    free(tmp);
    return w;
}

/* op: the fused op; N tokens; weights of type t [K, M] (FFN: gate and up) */
static void fused_case(mi_op op, mi_type t, int64_t K, int64_t M, int64_t N) {
    env e = env_new(2);
    const bool ffn = op == MI_OP_NORM_FFN_SWIGLU, norm = op != MI_OP_MATMUL_ADD;
    char *w = quant_rows(t, K, M), *w2 = quant_rows(t, K, M);
    float *x = rand_vec((size_t)(K * N), 1), *nw = rand_vec((size_t)K, 1), *b = rand_vec((size_t)M, 1);
    float *r = rand_vec((size_t)(M * N), 1);
    for (int64_t k = 0; k < K; k++) nw[k] = 0.5f + fabsf(nw[k]);
    mi_tensor *lw = leaf("w", t, K, M, w), *lw2 = leaf("w2", t, K, M, w2), *ln = leaf("norm", MI_TYPE_F32, K, 1, nw);
    mi_tensor *lb = leaf("bias", MI_TYPE_F32, M, 1, b);
    mi_graph *g1 = graph_new(16);
    mi_tensor *x1 = graph_input(g1, "x", MI_TYPE_F32, K, N, x), *ref;
    mi_tensor *h1 = norm ? graph_rms_norm(g1, x1, ln, K, 1e-6f) : x1;
    if (ffn) ref = graph_swiglu(g1, graph_matmul(g1, lw, h1, NULL), graph_matmul(g1, lw2, h1, NULL));
    else if (norm) ref = graph_matmul(g1, lw, h1, lb);
    else ref = graph_add(g1, graph_input(g1, "r", MI_TYPE_F32, M, N, r), graph_matmul(g1, lw, h1, NULL));
    float *r1 = run(&e, g1, ref);
    mi_graph *g2 = graph_new(16);
    mi_tensor *x2 = graph_input(g2, "x", MI_TYPE_F32, K, N, x);
    mi_tensor *r2in = norm ? NULL : graph_input(g2, "r", MI_TYPE_F32, M, N, r);
    int64_t ne[2] = {M, N};
    mi_tensor *fu = graph_new_node(g2, op, MI_TYPE_F32, 2, ne, "fused");
    fu->src[0] = lw;
    if (ffn) {
        fu->src[1] = lw2;
        fu->src[2] = x2;
    } else {
        fu->src[1] = x2;
        fu->src[2] = norm ? lb : r2in;
    }
    if (norm) {
        fu->src[3] = ln;
        mi_tensor_set_pf(fu, 1, 1e-6f);
    }
    float *r2 = run(&e, g2, fu);
    expect_bits(r2, r1, (size_t)(M * N), mi_op_name(op));
    free(r1); free(r2);
    graph_free(g1); graph_free(g2);
    free(lw); free(lw2); free(ln); free(lb);
    free(w); free(w2); free(x); free(nw); free(b); free(r);
    env_free(&e);
}

Test(cpu_ops, decode_fusions_equal_unfused) {
    fused_case(MI_OP_NORM_MATMUL, MI_TYPE_Q4_0, 256, 48, 1);
    fused_case(MI_OP_NORM_MATMUL, MI_TYPE_Q4_K, 512, 40, 5);   /* N >= 4: the GEMM path */
    fused_case(MI_OP_NORM_FFN_SWIGLU, MI_TYPE_Q4_K, 256, 64, 1);
    fused_case(MI_OP_NORM_FFN_SWIGLU, MI_TYPE_Q8_0, 128, 33, 3);
    fused_case(MI_OP_MATMUL_ADD, MI_TYPE_Q6_K, 256, 72, 1);
    fused_case(MI_OP_MATMUL_ADD, MI_TYPE_Q4_0, 256, 72, 6);
}

/* ARGMAX: the first largest value, NaN never wins; -1 without a finite largest value */
Test(cpu_ops, argmax_rule) {
    env e = env_new(2);
    enum { V = 7, N = 5 };
    const float nan = NAN, inf = INFINITY;
    float x[N * V] = {
        1, 3, 2, 3, -1, 0, 3,                /* ties: the first, 1 */
        nan, -5, nan, -4, -4, nan, -6,       /* NaN never wins: 3 */
        nan, nan, nan, nan, nan, nan, nan,   /* no finite maximum: -1 */
        0, inf, 1, 2, 3, 4, 5,               /* an infinite largest value: -1 */
        -inf, -3, -inf, -2, -9, -2, -8,      /* -inf is only small: 3 */
    };
    const int32_t want[N] = {1, 3, -1, -1, 3};
    mi_graph *g = graph_new(8);
    mi_tensor *in = graph_input(g, "x", MI_TYPE_F32, V, N, x);
    mi_tensor *am = graph_argmax(g, in);
    cr_assert_not_null(am, "%s", mi_errmsg());
    cr_assert_eq(am->type, MI_TYPE_I32);
    am->flags |= MI_T_OUTPUT;
    g->output = am;
    cr_assert_eq(sched_compute(e.s, g), MI_OK, "%s", mi_errmsg());
    int32_t got[N];
    cr_assert_eq(sched_read(e.s, am, got, 0, sizeof got), MI_OK, "%s", mi_errmsg());
    for (int r = 0; r < N; r++) cr_assert_eq(got[r], want[r], "row %d: %d, want %d", r, got[r], want[r]);
    graph_free(g);
    env_free(&e);
}

Test(cpu_ops, gemm_path_thread_invariant_and_tails) {
    /* Q4_0 with N >= 4 takes the register-blocked GEMM on AVX-512 machines: odd row and
     * token counts exercise its 4x4 / 4x1 / 1x4 / 1x1 blocks; K % 64 != 0 falls back */
    float *r1, *r2;
    env e1 = env_new(1), e2 = env_new(2);
    uint64_t seed = g_rng;
    matmul_case(&e1, MI_TYPE_Q4_0, 1e-4, 1024, 135, 43, true, &r1);
    g_rng = seed;
    matmul_case(&e2, MI_TYPE_Q4_0, 1e-4, 1024, 135, 43, true, &r2);
    expect_bits(r1, r2, 135 * 43, "gemm 1 vs 2 threads");
    free(r1);
    free(r2);
    matmul_case(&e2, MI_TYPE_Q4_0, 1e-4, 96, 21, 6, false, NULL);
    matmul_case(&e2, MI_TYPE_Q8_0, 1e-4, 1024, 37, 35, true, NULL);
    matmul_case(&e2, MI_TYPE_Q5_0, 1e-4, 1024, 37, 35, true, NULL);
    matmul_case(&e2, MI_TYPE_Q4_1, 1e-4, 1024, 37, 35, true, NULL);
    matmul_case(&e2, MI_TYPE_Q5_1, 1e-4, 96, 21, 9, false, NULL);
    matmul_case(&e2, MI_TYPE_Q6_K, 1e-4, 768, 37, 35, true, NULL);
    env_free(&e1);
    env_free(&e2);
}

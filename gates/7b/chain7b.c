/* gate_7b's graphs on both schedulers, and its attention and whole-layer cases (docs/PHASE7B.md),
 * split out of gates/7b/gate_7b.c: gate7b_env hands them the run, the backends and the seed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gates/7b/chain7b.h"
#include "common/backend/backend.h"
#include "common/graph/graph.h"
#include "common/quant/mi_types.h"
#include "phase7a_skeleton/cuda_backend.h"

static gu_run *g_r;
static mi_backend *g_cuda;
static mi_sched *g_sg, *g_sc;
static unsigned long long *g_seed;
static int g_self;

void gate7b_env_set(const gate7b_env *e) {
    g_r = e->r;
    g_cuda = e->cuda;
    g_sg = e->sg;
    g_sc = e->sc;
    g_seed = e->seed;
    g_self = e->self;
}

mi_tensor *gate7b_leaf(const char *name, mi_type t, int64_t ne0, int64_t ne1, void *data) {
    mi_tensor *x = calloc(1, sizeof *x);
    int64_t ne[2] = {ne0, ne1};
    tensor_init(x, name, t, 2, ne);
    x->data = data;
    x->flags |= MI_T_WEIGHT;
    return x;
}

int gate7b_run_both(gate7b_build build, void *arg, float *gpu_out, float *gpu_out2, float *cpu_out, size_t n,
                    int *not_cuda) {
    for (int pass = 0; pass < 2; pass++) {
        mi_sched *s = pass == 0 ? g_sg : g_sc;
        mi_graph *g = graph_new(256);
        mi_tensor *out = g ? build(g, arg, pass == 0) : NULL;
        if (!out) { printf("    build: %s\n", mi_errmsg()); graph_free(g); return 1; }
        out->flags |= MI_T_OUTPUT;
        g->output = out;
        const int reps = (pass == 0 && gpu_out2) ? 2 : 1;
        for (int r = 0; r < reps; r++) {
            float *dst = pass == 1 ? cpu_out : r == 0 ? gpu_out : gpu_out2;
            if (sched_compute(s, g) != MI_OK || sched_read(s, out, dst, 0, n * 4) != MI_OK) {
                printf("    compute (%s): %s\n", pass == 0 ? "cuda" : "cpu", mi_errmsg());
                graph_free(g);
                return 1;
            }
        }
        if (pass == 0) {
            *not_cuda = 0;
            for (int i = 0; i < g->n_nodes; i++) {
                const mi_tensor *t = g->nodes[i];
                if (t->op == MI_OP_NONE || t->op == MI_OP_INPUT || t->op == MI_OP_COPY) continue;
                if (t->backend != 0) {
                    if (*not_cuda < 3) printf("    node %s (%s) ran on backend %d, not cuda\n", t->name, mi_op_name(t->op), t->backend);
                    (*not_cuda)++;
                }
            }
        }
        graph_free(g);
    }
    return 0;
}

int gate7b_run_cpu(gate7b_build build, void *arg, float *out, size_t n) {
    mi_graph *g = graph_new(256);
    mi_tensor *t = g ? build(g, arg, 0) : NULL;
    if (!t) { printf("    build: %s\n", mi_errmsg()); graph_free(g); return 1; }
    t->flags |= MI_T_OUTPUT;
    g->output = t;
    const int bad = sched_compute(g_sc, g) != MI_OK || sched_read(g_sc, t, out, 0, n * 4) != MI_OK;
    if (bad) printf("    compute (cpu, exact chain): %s\n", mi_errmsg());
    graph_free(g);
    return bad;
}

/* ---------------- KV store + attention, n_past growing; whole-layer chain ---------------- */
typedef struct {
    mi_tensor *kc[2], *vc[2];   /* caches: [0] on cuda (GPU run), [1] on host (CPU run) */
    int64_t n_past, N;
    int hd, Hq, Hkv;
    float *q, *k, *v;
    /* layer chain only */
    int layer;
    int64_t E, F;
    float *x;
    mi_tensor *attn_norm, *wq, *wk, *wv, *bq, *bk, *bv, *qn, *kn, *wo, *ffn_norm, *wg, *wu, *wdn;
    int32_t *pos;
} kv_arg;

static mi_tensor *build_attn(mi_graph *g, void *p, int on_gpu) {
    kv_arg *a = p;
    const int c = on_gpu ? 0 : 1;
    const float scale = 1.0f / sqrtf((float)a->hd);
    if (!a->layer) {
        mi_tensor *q = graph_input(g, "q", MI_TYPE_F32, (int64_t)a->hd * a->Hq, a->N, a->q);
        mi_tensor *k = graph_input(g, "k", MI_TYPE_F32, (int64_t)a->hd * a->Hkv, a->N, a->k);
        mi_tensor *v = graph_input(g, "v", MI_TYPE_F32, (int64_t)a->hd * a->Hkv, a->N, a->v);
        mi_tensor *ks = graph_kv_store(g, k, a->kc[c], a->n_past), *vs = graph_kv_store(g, v, a->vc[c], a->n_past);
        if (!ks || !vs) return NULL;
        return graph_attn(g, q, ks, vs, a->n_past, a->hd, a->Hq, a->Hkv, scale);
    }
    /* a qwen3-style layer with qwen2's QKV bias as well: every op of the three architectures */
    mi_tensor *x = graph_input(g, "x", MI_TYPE_F32, a->E, a->N, a->x);
    mi_tensor *pos = graph_input(g, "pos", MI_TYPE_I32, a->N, 1, a->pos);
    mi_tensor *h = graph_rms_norm(g, x, a->attn_norm, a->E, 1e-6f);
    mi_tensor *q = graph_matmul(g, a->wq, h, a->bq), *k = graph_matmul(g, a->wk, h, a->bk);
    mi_tensor *v = graph_matmul(g, a->wv, h, a->bv);
    q = graph_rms_norm(g, q, a->qn, a->hd, 1e-6f);
    k = graph_rms_norm(g, k, a->kn, a->hd, 1e-6f);
    q = graph_rope(g, q, pos, a->hd, MI_ROPE_NEOX, a->hd, 1000000.f);
    k = graph_rope(g, k, pos, a->hd, MI_ROPE_NEOX, a->hd, 1000000.f);
    mi_tensor *ks = graph_kv_store(g, k, a->kc[c], a->n_past), *vs = graph_kv_store(g, v, a->vc[c], a->n_past);
    if (!ks || !vs) return NULL;
    mi_tensor *o = graph_attn(g, q, ks, vs, a->n_past, a->hd, a->Hq, a->Hkv, scale);
    mi_tensor *x2 = graph_add(g, x, graph_matmul(g, a->wo, o, NULL));
    mi_tensor *h2 = graph_rms_norm(g, x2, a->ffn_norm, a->E, 1e-6f);
    mi_tensor *f = graph_swiglu(g, graph_matmul(g, a->wg, h2, NULL), graph_matmul(g, a->wu, h2, NULL));
    mi_tensor *y = graph_add(g, x2, graph_matmul(g, a->wdn, f, NULL));
    return graph_mul(g, y, a->ffn_norm);   /* a broadcast MUL too */
}

/* caches: [0] a persistent CUDA region (backend index 0 of the [cuda, cpu] scheduler), [1] host */
static int make_caches(kv_arg *a, mi_type ct, int64_t n_ctx, const char *tag) {
    const int64_t row = (int64_t)a->hd * a->Hkv;
    mi_cuda_ctx *cc = mi_cuda_ctx_of(g_cuda);
    for (int kv = 0; kv < 2; kv++)
        for (int c = 0; c < 2; c++) {
            char nm[64];
            snprintf(nm, sizeof nm, "%s.%s", tag, kv ? "v" : "k");
            mi_tensor *t = gate7b_leaf(nm, ct, row, n_ctx, NULL);
            t->flags = MI_T_PERSIST;
            const size_t bytes = mi_row_size(ct, row) * (size_t)n_ctx;
            if (c == 0 && g_self) {
                t->data = calloc(1, bytes);
                t->backend = 0;
            } else if (c == 0) {
                if (mi_cuda_region_get(cc, nm, bytes, &t->data) != MI_OK) return 1;
                t->backend = 0;
            } else {
                t->data = calloc(1, bytes);
            }
            (kv ? a->vc : a->kc)[c] = t;
        }
    return 0;
}
static void free_caches(kv_arg *a) {
    if (g_self) {
        free(a->kc[0]->data);
        free(a->vc[0]->data);
    } else {
        mi_cuda_ctx *cc = mi_cuda_ctx_of(g_cuda);
        mi_cuda_region_free(cc, a->kc[0]->name);
        mi_cuda_region_free(cc, a->vc[0]->name);
    }
    free(a->kc[1]->data); free(a->vc[1]->data);
    free(a->kc[0]); free(a->vc[0]); free(a->kc[1]); free(a->vc[1]);
}
/* compare the GPU cache rows 0..rows-1 with the CPU's, byte for byte */
static size_t cmp_cache(const mi_tensor *gc, const mi_tensor *hc, int64_t rows) {
    const size_t bytes = mi_row_size(gc->type, gc->ne[0]) * (size_t)rows;
    uint8_t *buf = malloc(bytes);
    size_t bad = 0;
    if (g_cuda->iface->read(g_cuda, buf, gc->data, bytes) != MI_OK) bad = bytes;
    else if (gu_first_diff(buf, hc->data, bytes) != (size_t)-1) {
        for (size_t i = 0; i < bytes; i++) bad += buf[i] != ((const uint8_t *)hc->data)[i];
        printf("    kv cache %s: first differing byte %zu\n", gc->name, gu_first_diff(buf, hc->data, bytes));
    }
    free(buf);
    return bad;
}

void gate7b_kv_attn(mi_type ct, int hd, int Hq, int Hkv) {
    kv_arg a = {0};
    a.hd = hd;
    a.Hq = Hq;
    a.Hkv = Hkv;
    const int64_t n_ctx = 512, steps[] = {6, 1, 1, 9, 1, 200, 1, 2};
    char name[96];
    snprintf(name, sizeof name, "kv_attn_%s_hd%d_Hq%d_Hkv%d", mi_type_name(ct), hd, Hq, Hkv);
    gu_begin(g_r, name);
    if (make_caches(&a, ct, n_ctx, "gate7b.attn")) { gu_fail(g_r, "cache: %s", mi_errmsg()); return; }
    double worst = 0;
    size_t kvbad = 0;
    int fail = 0, nc_all = 0;
    for (size_t s = 0; s < sizeof steps / sizeof steps[0] && !fail; s++) {
        a.N = steps[s];
        a.q = gu_rand_f32(g_seed, (size_t)(a.N * hd * Hq), -2.f, 2.f);
        a.k = gu_rand_f32(g_seed, (size_t)(a.N * hd * Hkv), -1.f, 1.f);
        a.v = gu_rand_f32(g_seed, (size_t)(a.N * hd * Hkv), -1.f, 1.f);
        const size_t n = (size_t)(a.N * hd * Hq);
        float *gg = malloc(n * 4), *cc = malloc(n * 4);
        int nc = 0;
        if (gate7b_run_both(build_attn, &a, gg, NULL, cc, n, &nc)) fail = 1;
        else {
            const double e = gu_nmse(gg, cc, n);
            if (e > worst) worst = e;
            nc_all += nc;
            kvbad += cmp_cache(a.kc[0], a.kc[1], a.n_past + a.N) + cmp_cache(a.vc[0], a.vc[1], a.n_past + a.N);
        }
        a.n_past += a.N;
        free(a.q); free(a.k); free(a.v); free(gg); free(cc);
    }
    if (fail) gu_fail(g_r, "graph failed: %s", mi_errmsg());
    else if (nc_all) gu_fail(g_r, "%d node(s) not on cuda", nc_all);
    else if (kvbad || worst > 1e-6) gu_fail(g_r, "kv cache bytes differing %zu; worst attention nmse %.3g (<= 1e-6)", kvbad, worst);
    else gu_pass(g_r, "n_past 0..%lld in 8 steps: KV cache bit-identical to the CPU's, worst nmse %.3g (<= 1e-6)",
                  (long long)a.n_past, worst);
    free_caches(&a);
}

/* A layer's weights dequantized into F32 leaves: the exact chain's (the CPU then multiplies
 * float activations, no 8-bit codes) */
static mi_tensor *dequant_leaf(const mi_tensor *w, void **buf) {
    const int64_t K = w->ne[0], M = w->ne[1];
    const size_t rb = mi_row_size(w->type, K);
    float *f = malloc((size_t)(K * M) * 4);
    for (int64_t m = 0; m < M; m++) mi_dequantize_row(w->type, (const uint8_t *)w->data + rb * (size_t)m, f + m * K, K);
    *buf = f;
    return gate7b_leaf(w->name, MI_TYPE_F32, K, M, f);
}

/* The chain of a qwen3-style layer with qwen2's biases over four steps of 7, 1, 1 and 5 tokens,
 * the device against the CPU. Where every matmul quantizes x as the CPU does, they agree within
 * 1e-6. A later phase may run some of them in another tier (8b's f16 kernels from 2 rows, b21:
 * float activations rounded to f16, docs/NUMERICS.md); then each step must be as close as the
 * CPU to the exact chain (the same ops on the CPU with the weights dequantized to F32), within
 * 2x (steps after a cache written in the other tier differ by the rounding of x's codes, either
 * way), and within 4x the CPU's distance from it of the CPU itself, as the matmul cases ask. */
void gate7b_layer_chain(mi_type wt) {
    kv_arg a = {0};
    a.layer = 1;
    a.hd = 128;
    a.Hq = 8;
    a.Hkv = 2;
    a.E = 1024;
    a.F = 2816;
    const int64_t E = a.E, F = a.F, QD = (int64_t)a.hd * a.Hq, KD = (int64_t)a.hd * a.Hkv;
    void *bufs[24];
    int nb = 0;
#define W(var, K, M) (bufs[nb] = gu_make_weights(g_seed, wt, K, M, 1.0f / sqrtf((float)(K)), NULL), a.var = gate7b_leaf(#var, wt, K, M, bufs[nb++]))
#define V(var, n, lo, hi) (bufs[nb] = gu_rand_f32(g_seed, (size_t)(n), lo, hi), a.var = gate7b_leaf(#var, MI_TYPE_F32, n, 1, bufs[nb++]))
    W(wq, E, QD); W(wk, E, KD); W(wv, E, KD); W(wo, QD, E); W(wg, E, F); W(wu, E, F); W(wdn, F, E);
    V(attn_norm, E, 0.8f, 1.2f); V(ffn_norm, E, 0.8f, 1.2f); V(qn, a.hd, 0.8f, 1.2f); V(kn, a.hd, 0.8f, 1.2f);
    V(bq, QD, -0.1f, 0.1f); V(bk, KD, -0.1f, 0.1f); V(bv, KD, -0.1f, 0.1f);
#undef W
#undef V
    kv_arg x = a;   /* the exact chain: the same leaves but the weights, its own caches */
    mi_tensor **ws[] = {&x.wq, &x.wk, &x.wv, &x.wo, &x.wg, &x.wu, &x.wdn};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) *ws[i] = dequant_leaf(*ws[i], &bufs[nb++]);
    char name[64];
    snprintf(name, sizeof name, "layer_chain_%s", mi_type_name(wt));
    gu_begin(g_r, name);
    if (make_caches(&a, MI_TYPE_F16, 64, "gate7b.layer") || make_caches(&x, MI_TYPE_F16, 64, "gate7b.layer_exact")) {
        gu_fail(g_r, "cache: %s", mi_errmsg());
        return;
    }
    const int64_t steps[] = {7, 1, 1, 5};
    double worst = 0, e_s[4] = {0}, dev_s[4] = {0}, cpu_s[4] = {0};
    int fail = 0, nc_all = 0, cpu_arith = 1, tier_ok = 1;
    for (int s = 0; s < 4 && !fail; s++) {
        a.N = x.N = steps[s];
        a.x = x.x = gu_rand_f32(g_seed, (size_t)(E * a.N), -1.f, 1.f);
        a.pos = x.pos = malloc((size_t)a.N * 4);
        for (int64_t i = 0; i < a.N; i++) a.pos[i] = (int32_t)(a.n_past + i);
        const size_t n = (size_t)(E * a.N);
        float *gg = malloc(n * 4), *cc = malloc(n * 4), *ee = malloc(n * 4);
        int nc = 0;
        if (gate7b_run_both(build_attn, &a, gg, NULL, cc, n, &nc) || gate7b_run_cpu(build_attn, &x, ee, n)) fail = 1;
        else {
            /* the K/V rows went through matmuls: compared through the layer's output, not bytes */
            e_s[s] = gu_nmse(gg, cc, n);
            dev_s[s] = gu_nmse(gg, ee, n);
            cpu_s[s] = gu_nmse(cc, ee, n);
            if (e_s[s] > worst) worst = e_s[s];
            if (e_s[s] > 1e-6) {
                cpu_arith = 0;
                if (dev_s[s] > 2 * cpu_s[s] || e_s[s] > 4 * cpu_s[s]) tier_ok = 0;
            }
            nc_all += nc;
        }
        a.n_past += a.N;
        x.n_past = a.n_past;
        free(a.x); free(a.pos); free(gg); free(cc); free(ee);
    }
    char by[320];
    snprintf(by, sizeof by, "by step (N %lld, %lld, %lld, %lld): vs the CPU %.3g %.3g %.3g %.3g; vs the exact chain: "
             "device %.3g %.3g %.3g %.3g, CPU %.3g %.3g %.3g %.3g", (long long)steps[0], (long long)steps[1],
             (long long)steps[2], (long long)steps[3], e_s[0], e_s[1], e_s[2], e_s[3], dev_s[0], dev_s[1], dev_s[2],
             dev_s[3], cpu_s[0], cpu_s[1], cpu_s[2], cpu_s[3]);
    if (fail) gu_fail(g_r, "graph failed: %s", mi_errmsg());
    else if (nc_all) gu_fail(g_r, "%d node(s) not on cuda", nc_all);
    else if (cpu_arith)
        gu_pass(g_r, "rms_norm, matmul+bias, q/k norm, rope, kv_store, attn, add, swiglu, mul over 4 steps "
                     "(n_past 0..14): worst nmse %.3g (<= 1e-6), every node on cuda; %s", worst, by);
    else if (tier_ok)
        gu_pass(g_r, "worst nmse %.3g vs the CPU (> 1e-6: not the CPU's arithmetic), every such step within 2x the CPU's "
                     "distance from the exact chain and 4x it from the CPU; %s", worst, by);
    else gu_fail(g_r, "worst nmse %.3g vs the CPU (> 1e-6) and a step past 2x the CPU's distance from the exact chain or "
                      "4x it from the CPU; %s", worst, by);
    free_caches(&a);
    free_caches(&x);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    mi_tensor *ls[] = {a.attn_norm, a.wq, a.wk, a.wv, a.bq, a.bk, a.bv, a.qn, a.kn, a.wo, a.ffn_norm, a.wg, a.wu, a.wdn,
                       x.wq, x.wk, x.wv, x.wo, x.wg, x.wu, x.wdn};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) free(ls[i]);
}


/* Scheduler: assignment with a fake second backend that supports only ADD/MUL/SILU
 * (splits and boundary copies as expected, results bit-equal to a CPU-only run),
 * liveness reuse (fewer bytes, no two live tensors overlap, poisoned buffers give the
 * same results), persistent KV regions untouched by re-allocation, no re-allocation for
 * the same shape, errors propagated with the node's name. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/backend/sched.h"
#include "common/core/mi_canon.h"

/* ---------------- fake device backend ----------------
 * Its memory is host memory in fact, but it declares host_memory = false so the
 * scheduler must go through write/read (and the bounce path) like for a GPU. */
typedef struct {
    int n_alloc, n_exec, n_write, n_read;
} fake_ctx;

static const char *fake_name(mi_backend *be) { return "fake"; }
static bool fake_supports(mi_backend *be, mi_tensor *n) {
    return n->op == MI_OP_ADD || n->op == MI_OP_MUL || n->op == MI_OP_SILU;
}
static mi_status fake_alloc(mi_backend *be, size_t size, mi_buffer **out) {
    mi_buffer *b = calloc(1, sizeof *b);
    b->base = malloc(size);
    memset(b->base, 0xff, size);   /* NaN poison: a read of unwritten bytes shows */
    b->size = size;
    b->backend = be;
    ((fake_ctx *)be->ctx)->n_alloc++;
    *out = b;
    return MI_OK;
}
static void fake_free(mi_backend *be, mi_buffer *b) {
    free(b->base);
    free(b);
}
static mi_status fake_write(mi_backend *be, void *d, const void *s, size_t n) {
    ((fake_ctx *)be->ctx)->n_write++;
    memcpy(d, s, n);
    return MI_OK;
}
static mi_status fake_read(mi_backend *be, void *d, const void *s, size_t n) {
    ((fake_ctx *)be->ctx)->n_read++;
    memcpy(d, s, n);
    return MI_OK;
}
static mi_status fake_exec(mi_backend *be, mi_tensor *t) {
    ((fake_ctx *)be->ctx)->n_exec++;
    if (strcmp(t->name, "boom") == 0) return mi_err(MI_ERR_DEVICE, "fake kernel failed");
    int64_t D = t->ne[0], N = t->ne[1];
    const float *a = t->src[0]->data;
    float *y = t->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < D; i++) {
            float x = a[n * D + i];
            if (t->op == MI_OP_SILU) {
                y[n * D + i] = mi_canon_silu(x);
            } else {
                const float *b = t->src[1]->data;
                float v = b[(t->src[1]->ne[1] == 1 ? 0 : n * D) + i];
                y[n * D + i] = t->op == MI_OP_ADD ? x + v : x * v;
            }
        }
    return MI_OK;
}
static mi_status fake_sync(mi_backend *be) { return MI_OK; }
static void fake_destroy(mi_backend *be) {
    free(be->ctx);
    free(be);
}
static const mi_backend_iface fake_iface = {
    .name = fake_name, .supports = fake_supports, .buffer_alloc = fake_alloc, .buffer_free = fake_free,
    .write = fake_write, .read = fake_read, .copy = fake_write, .execute_node = fake_exec,
    .synchronize = fake_sync, .destroy = fake_destroy,
};
static mi_backend *fake_new(void) {
    mi_backend *be = calloc(1, sizeof *be);
    be->iface = &fake_iface;
    be->ctx = calloc(1, sizeof(fake_ctx));
    be->host_memory = false;
    return be;
}

/* ---------------- CPU with counted, poisoned buffers ---------------- */
static mi_backend_iface g_cpu_counted;
static const mi_backend_iface *g_cpu_orig;
static int g_cpu_allocs;
static mi_status counted_alloc(mi_backend *be, size_t size, mi_buffer **out) {
    g_cpu_allocs++;
    MI_TRY(g_cpu_orig->buffer_alloc(be, size, out));
    memset((*out)->base, 0xff, size);
    return MI_OK;
}
static mi_backend *cpu_counted(void) {
    mi_backend *be;
    cr_assert_eq(mi_backend_cpu_new(2, &be), MI_OK, "%s", mi_errmsg());
    g_cpu_orig = be->iface;
    g_cpu_counted = *be->iface;
    g_cpu_counted.buffer_alloc = counted_alloc;
    be->iface = &g_cpu_counted;
    return be;
}

static uint64_t g_rng = 12345;
static float frand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(g_rng >> 40) / 16777216.0 * 2.0 - 1.0);
}
static float *rvec(size_t n) {
    float *v = malloc(n * 4);
    for (size_t i = 0; i < n; i++) v[i] = frand();
    return v;
}
static mi_tensor *leaf(const char *name, mi_type t, int64_t ne0, int64_t ne1, void *data) {
    mi_tensor *x = calloc(1, sizeof *x);
    int64_t ne[2] = {ne0, ne1};
    tensor_init(x, name, t, 2, ne);
    x->data = data;
    return x;
}

/* ---------------- mixed graph ---------------- */
enum { D = 64, NT = 5, M = 32 };
typedef struct {
    float *x, *y, *w, *W, *bias;
    mi_tensor *lw, *lW, *lb;
} mixed_data;

static mixed_data mixed_new(void) {
    mixed_data d;
    d.x = rvec(D * NT);
    d.y = rvec(D * NT);
    d.w = rvec(D);
    d.W = rvec(D * M);
    d.bias = rvec(M);
    d.lw = leaf("norm_w", MI_TYPE_F32, D, 1, d.w);
    d.lW = leaf("W", MI_TYPE_F32, D, M, d.W);
    d.lb = leaf("bias", MI_TYPE_F32, M, 1, d.bias);
    return d;
}

static mi_graph *mixed_graph(mixed_data *d, const char *add_name) {
    mi_graph *g = graph_new(32);
    mi_tensor *x = graph_input(g, "x", MI_TYPE_F32, D, NT, d->x);
    mi_tensor *y = graph_input(g, "y", MI_TYPE_F32, D, NT, d->y);
    mi_tensor *a = graph_add(g, x, y);          /* fake: copies x, y */
    if (add_name) snprintf(a->name, sizeof a->name, "%s", add_name);
    mi_tensor *b = graph_mul(g, a, x);          /* fake: reuses the copy of x */
    mi_tensor *n = graph_rms_norm(g, b, d->lw, D, 1e-6f);   /* cpu: copy b */
    mi_tensor *c = graph_silu(g, n);            /* fake: copy n */
    mi_tensor *e = graph_mul(g, c, b);          /* fake: b already there */
    mi_tensor *m = graph_matmul(g, d->lW, e, NULL);   /* cpu: copy e */
    mi_tensor *o = graph_add(g, m, d->lb);      /* fake: copy m, copy of the bias leaf */
    o->flags |= MI_T_OUTPUT;
    g->output = o;
    return g;
}

static float *compute(mi_backend **be, int n_be, mi_graph *g, mi_sched_stats *st) {
    mi_sched *s;
    cr_assert_eq(sched_new(be, n_be, &s), MI_OK);
    cr_assert_eq(sched_compute(s, g), MI_OK, "%s", mi_errmsg());
    float *r = malloc((size_t)M * NT * 4);
    cr_assert_eq(sched_read(s, g->output, r, 0, (size_t)M * NT * 4), MI_OK, "%s", mi_errmsg());
    if (st) *st = *sched_stats(s);
    sched_free(s);
    return r;
}

Test(sched, splits_copies_and_results_match_cpu_only) {
    mixed_data d = mixed_new();
    mi_backend *cpu, *fake = fake_new();
    cr_assert_eq(mi_backend_cpu_new(2, &cpu), MI_OK);
    mi_graph *g1 = mixed_graph(&d, NULL);
    float *ref = compute(&cpu, 1, g1, NULL);
    mi_graph *g2 = mixed_graph(&d, NULL);
    mi_backend *both[2] = {fake, cpu};
    mi_sched_stats st;
    float *got = compute(both, 2, g2, &st);
    /* splits: [cpu x y] [fake cx cy add mul] [cpu cb norm] [fake cn silu mul] [cpu ce matmul] [fake cm cbias add] */
    cr_assert_eq(st.n_splits, 6, "splits %d", st.n_splits);
    cr_assert_eq(st.n_copies, 7, "copies %d", st.n_copies);
    const mi_op want_ops[] = {MI_OP_INPUT, MI_OP_INPUT, MI_OP_COPY, MI_OP_COPY, MI_OP_ADD, MI_OP_MUL,
                              MI_OP_COPY, MI_OP_RMS_NORM, MI_OP_COPY, MI_OP_SILU, MI_OP_MUL, MI_OP_COPY,
                              MI_OP_MATMUL, MI_OP_COPY, MI_OP_COPY, MI_OP_ADD};
    const int want_be[] = {1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0};
    cr_assert_eq(g2->n_nodes, 16);
    for (int i = 0; i < 16; i++) {
        cr_assert_eq(g2->nodes[i]->op, want_ops[i], "node %d is %s", i, mi_op_name(g2->nodes[i]->op));
        cr_assert_eq(g2->nodes[i]->backend, want_be[i], "node %d on %d", i, g2->nodes[i]->backend);
        cr_assert_eq(g2->nodes[i]->id, i);
        for (int j = 0; j < MI_MAX_SRC; j++) {
            const mi_tensor *sr = g2->nodes[i]->src[j];
            if (!sr || g2->nodes[i]->op == MI_OP_COPY) continue;
            int sb = sr->backend < 0 ? 1 : sr->backend;
            cr_assert_eq(sb, g2->nodes[i]->backend, "node %d reads src %s from another backend", i, sr->name);
        }
    }
    for (int i = 0; i < M * NT; i++)
        cr_assert(memcmp(&got[i], &ref[i], 4) == 0, "out %d: got %.9g want %.9g", i, (double)got[i], (double)ref[i]);
    fake_ctx *fc = fake->ctx;
    cr_assert_eq(fc->n_write, 5, "host->fake writes %d (x, y, n, m, bias)", fc->n_write);
    cr_assert_eq(fc->n_read, 3, "fake->host reads %d (b, e, output)", fc->n_read);
    free(ref);
    free(got);
    graph_free(g1);
    graph_free(g2);
    cpu->iface->destroy(cpu);
    fake->iface->destroy(fake);
}

Test(sched, node_error_propagates_with_context) {
    mixed_data d = mixed_new();
    mi_backend *cpu, *fake = fake_new();
    cr_assert_eq(mi_backend_cpu_new(1, &cpu), MI_OK);
    mi_backend *both[2] = {fake, cpu};
    mi_sched *s;
    cr_assert_eq(sched_new(both, 2, &s), MI_OK);
    mi_graph *g = mixed_graph(&d, "boom");
    mi_status st = sched_compute(s, g);
    cr_assert_eq(st, MI_ERR_DEVICE);
    cr_assert(strstr(mi_errmsg(), "boom") && strstr(mi_errmsg(), "add") && strstr(mi_errmsg(), "fake") &&
                  strstr(mi_errmsg(), "fake kernel failed"),
              "message: %s", mi_errmsg());
    /* nothing after the failing node ran: the fake executed nothing else, the CPU never ran the norm */
    cr_assert_eq(((fake_ctx *)fake->ctx)->n_exec, 1);
    graph_free(g);
    sched_free(s);
    cpu->iface->destroy(cpu);
    fake->iface->destroy(fake);
}

Test(sched, kv_store_must_run_where_the_cache_lives) {
    mi_backend *cpu, *fake = fake_new();
    cr_assert_eq(mi_backend_cpu_new(1, &cpu), MI_OK);
    mi_backend *both[2] = {fake, cpu};
    mi_sched *s;
    cr_assert_eq(sched_new(both, 2, &s), MI_OK);
    float *kc = calloc(16 * 8, 4), *k = rvec(16);
    mi_tensor *lk = leaf("cache_k", MI_TYPE_F32, 16, 8, kc);
    lk->backend = 0;   /* cache on the fake, which cannot run KV_STORE */
    mi_graph *g = graph_new(8);
    mi_tensor *ik = graph_input(g, "k", MI_TYPE_F32, 16, 1, k);
    cr_assert_not_null(graph_kv_store(g, ik, lk, 0));
    cr_assert_eq(sched_assign(s, g), MI_ERR_UNSUPPORTED);
    cr_assert(strstr(mi_errmsg(), "cache_k"), "message: %s", mi_errmsg());
    graph_free(g);
    sched_free(s);
    free(kc);
    free(k);
    free(lk);
    cpu->iface->destroy(cpu);
    fake->iface->destroy(fake);
}

/* ---------------- liveness ---------------- */

/* A ladder: t_{i+1} = f(t_i, t_{i-3}) keeps a few tensors alive at once. */
static mi_graph *ladder(float *x, int len, int64_t rows) {
    mi_graph *g = graph_new(len + 8);
    mi_tensor *hist[4];
    mi_tensor *t = graph_input(g, "x", MI_TYPE_F32, 48, rows, x);
    for (int k = 0; k < 4; k++) hist[k] = t;
    for (int i = 0; i < len; i++) {
        mi_tensor *n = (i % 3 == 0) ? graph_silu(g, t) : (i % 3 == 1) ? graph_add(g, t, hist[i % 4]) : graph_mul(g, t, hist[(i + 1) % 4]);
        hist[i % 4] = t;
        t = n;
    }
    t->flags |= MI_T_OUTPUT;
    g->output = t;
    return g;
}

static void check_no_live_overlap(const mi_graph *g) {
    int n = g->n_nodes;
    int *last = malloc((size_t)n * sizeof *last);
    for (int i = 0; i < n; i++) last[i] = (g->nodes[i]->flags & MI_T_OUTPUT) ? n : i;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < MI_MAX_SRC; j++)
            if (g->nodes[i]->src[j] && g->nodes[i]->src[j]->op != MI_OP_NONE) {
                int id = g->nodes[i]->src[j]->id;
                if (last[id] < i) last[id] = i;
            }
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            if (b > last[a]) continue;   /* a is dead when b is born */
            const char *pa = g->nodes[a]->data, *pb = g->nodes[b]->data;
            size_t na = mi_nbytes(g->nodes[a]), nb = mi_nbytes(g->nodes[b]);
            cr_assert(pa + na <= pb || pb + nb <= pa, "live tensors #%d and #%d overlap", a, b);
            cr_assert_eq((uintptr_t)pa % 256, (uintptr_t)((char *)g->nodes[0]->data) % 256, "alignment");
        }
    free(last);
}

Test(sched, liveness_reuse_saves_bytes_without_overlap) {
    float *x = rvec(48 * 7);
    mi_backend *cpu = cpu_counted();
    mi_sched *s;
    cr_assert_eq(sched_new(&cpu, 1, &s), MI_OK);
    mi_graph *g = ladder(x, 60, 7);
    cr_assert_eq(sched_compute(s, g), MI_OK, "%s", mi_errmsg());
    const mi_sched_stats *st = sched_stats(s);
    cr_log_info("ladder: %zu B with reuse, %zu B without", st->alloc_bytes[0], st->naive_bytes[0]);
    cr_assert(st->alloc_bytes[0] * 4 < st->naive_bytes[0], "reuse saved too little: %zu vs %zu", st->alloc_bytes[0],
              st->naive_bytes[0]);
    check_no_live_overlap(g);
    float *got = malloc(48 * 7 * 4);
    cr_assert_eq(sched_read(s, g->output, got, 0, 48 * 7 * 4), MI_OK);
    /* reference without the scheduler */
    float *h[4], *t = malloc(48 * 7 * 4);
    memcpy(t, x, 48 * 7 * 4);
    for (int k = 0; k < 4; k++) h[k] = t;
    for (int i = 0; i < 60; i++) {
        float *n = malloc(48 * 7 * 4);
        for (int e = 0; e < 48 * 7; e++)
            n[e] = (i % 3 == 0) ? mi_canon_silu(t[e]) : (i % 3 == 1) ? t[e] + h[i % 4][e] : t[e] * h[(i + 1) % 4][e];
        h[i % 4] = t;   /* leaks intermediate arrays on purpose: small, test-only */
        t = n;
    }
    for (int e = 0; e < 48 * 7; e++)
        cr_assert(memcmp(&got[e], &t[e], 4) == 0, "elem %d: got %.9g want %.9g", e, (double)got[e], (double)t[e]);
    /* same graph shape again: no new buffer, same addresses */
    int allocs = g_cpu_allocs;
    mi_graph *g2 = ladder(x, 60, 7);
    cr_assert_eq(sched_alloc(s, g2), MI_OK);
    cr_assert_eq(g_cpu_allocs, allocs, "re-allocated for the same shape");
    for (int i = 0; i < g->n_nodes; i++) cr_assert_eq(g->nodes[i]->data, g2->nodes[i]->data);
    /* dump names splits and reuse */
    FILE *f = tmpfile();
    sched_dump(s, g2, f);
    rewind(f);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    cr_assert(strstr(buf, "split 0") && strstr(buf, "reuses #") && strstr(buf, "without"), "dump:\n%s", buf);
    graph_free(g);
    graph_free(g2);
    sched_free(s);
    cpu->iface->destroy(cpu);
    free(got);
    free(x);
}

/* ---------------- persistent regions ---------------- */

Test(sched, persistent_kv_untouched_by_reallocation) {
    mi_backend *cpu = cpu_counted();
    mi_sched *s;
    cr_assert_eq(sched_new(&cpu, 1, &s), MI_OK);
    const int64_t row = 32, n_ctx = 64;
    mi_buffer *kvbuf;
    cr_assert_eq(cpu->iface->buffer_alloc(cpu, (size_t)(row * n_ctx) * 4, &kvbuf), MI_OK);
    float *kc = kvbuf->base;
    for (int64_t i = 0; i < row * n_ctx; i++) kc[i] = (float)i;
    mi_tensor *lk = leaf("cache_k", MI_TYPE_F32, row, n_ctx, kc);
    lk->flags |= MI_T_PERSIST;
    float *k = rvec((size_t)(row * 40)), *q = rvec((size_t)(row * 40));
    int64_t n_past = 0;
    for (int step = 0; step < 3; step++) {
        int64_t N = step == 0 ? 2 : step == 1 ? 30 : 2;   /* step 1 grows the graph buffer */
        int allocs = g_cpu_allocs;
        mi_graph *g = graph_new(16);
        mi_tensor *ik = graph_input(g, "k", MI_TYPE_F32, row, N, k);
        mi_tensor *iq = graph_input(g, "q", MI_TYPE_F32, row, N, q);
        mi_tensor *ks = graph_kv_store(g, ik, lk, n_past);
        mi_tensor *o = graph_attn(g, iq, ks, ks, n_past, 16, 2, 2, 0.25f);
        cr_assert_not_null(o, "%s", mi_errmsg());
        o->flags |= MI_T_OUTPUT;
        g->output = o;
        cr_assert_eq(sched_compute(s, g), MI_OK, "%s", mi_errmsg());
        cr_assert_eq(ks->data, (void *)kc, "kv_store must alias the cache");
        if (step == 1) cr_assert_gt(g_cpu_allocs, allocs, "bigger graph should grow the buffer");
        if (step == 2) cr_assert_eq(g_cpu_allocs, allocs, "smaller graph must fit the grown buffer");
        n_past += N;
        for (int64_t r = 0; r < n_ctx; r++)
            for (int64_t i = 0; i < row; i++) {
                float want = r < n_past ? (r < 2 ? k[r * row + i] : r < 32 ? k[(r - 2) * row + i] : k[(r - 32) * row + i])
                                        : (float)(r * row + i);
                cr_assert(memcmp(&kc[r * row + i], &want, 4) == 0, "step %d cache row %lld elem %lld: %.7g want %.7g",
                          step, (long long)r, (long long)i, (double)kc[r * row + i], (double)want);
            }
        graph_free(g);
    }
    sched_free(s);
    cpu->iface->buffer_free(cpu, kvbuf);
    cpu->iface->destroy(cpu);
    free(lk);
    free(k);
    free(q);
}

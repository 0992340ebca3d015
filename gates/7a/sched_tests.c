/* gate_7a, graphs + scheduler: a graph crossing CUDA->CPU and CPU->CUDA gives the
 * CPU-only result bit for bit (and the dump shows its splits), and persistent device memory
 * (a KV buffer, a named region) survives graph re-allocations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gates/7a/gate7a.h"
#include "common/graph/graph.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "phase7a_skeleton/cuda_dev.h"
#include "phase7a_skeleton/cuda_dispatch.h"

/* A byte-copy SLICE_ROWS installed by this gate only, so that a CUDA node consumes a
 * CPU node: the graph then crosses CPU->CUDA as well as CUDA->CPU. */
static size_t g_ws_need = ((size_t)3 << 20) + 5;
static int g_ws_checked;
static bool gate_slice_supports(const mi_tensor *n) { return n->op == MI_OP_SLICE_ROWS && n->src[0]->type == MI_TYPE_F32; }
static size_t gate_slice_ws(const mi_tensor *n) { (void)n; return g_ws_need; }
static mi_status gate_slice_exec(mi_cuda_ctx *c, const mi_tensor *node, void *ws) {
    size_t have = 0;
    void *w = mi_cuda_workspace(c, &have);
    if (!ws || ws != w || have < g_ws_need)
        return mi_err(MI_ERR_INTERNAL, "workspace %p (%zu B) not sized before execution", ws, have);
    g_ws_checked++;
    const mi_tensor *s = node->src[0];
    size_t row = (size_t)s->ne[0] * sizeof(float);
    return mi_cudev_d2d_async(node->data, (const char *)s->data + row * (size_t)mi_slice_first(node), mi_nbytes(node),
                              mi_cuda_stream(c));
}
static const mi_cuda_kernel k_gate_slice = {"gate_7a: slice rows, checks its workspace", NULL, gate_slice_supports,
                                            gate_slice_exec, gate_slice_ws, 0};

typedef struct { mi_graph *g; mi_tensor *in, *a, *s, *o; } split_graph;

static mi_status build_split_graph(split_graph *sg, const float *x, int64_t D, int64_t N) {
    memset(sg, 0, sizeof *sg);
    sg->g = graph_new(64);
    if (!sg->g) return mi_err(MI_ERR_NOMEM, "graph_new");
    sg->in = graph_input(sg->g, "x", MI_TYPE_F32, D, N, x);
    sg->a = sg->in ? graph_silu(sg->g, sg->in) : NULL;
    sg->s = sg->a ? graph_slice_rows(sg->g, sg->a, 1, N - 2) : NULL;
    sg->o = sg->s ? graph_silu(sg->g, sg->s) : NULL;
    if (!sg->o) return mi_err_ctx(MI_ERR_INTERNAL, "building the split graph");
    /* every node the test reads back is an output: the allocator must not reuse it */
    sg->in->flags |= MI_T_OUTPUT;
    sg->a->flags |= MI_T_OUTPUT;
    sg->s->flags |= MI_T_OUTPUT;
    sg->o->flags |= MI_T_OUTPUT;
    sg->g->output = sg->o;
    return MI_OK;
}

void gate7a_input(float *x, int64_t n, unsigned long long seed) {
    unsigned long long s = seed;
    for (int64_t i = 0; i < n; i++) x[i] = (float)((double)(gu_rng(&s) >> 11) / 9007199254740992.0 * 8.0 - 4.0);
    if (n > 3) { x[0] = -0.0f; x[1] = 1e-40f; x[2] = -3.5e-39f; }   /* signed zero, subnormals */
}

void gate7a_split_boundary(gate7a *ctx) {
    gu_begin(&ctx->run, "split_boundary");
    mi_cuda_add_kernel(MI_OP_SLICE_ROWS, &k_gate_slice);   /* in front of any phase's own */
    const int64_t D = 67, N = 9;
    float x[67 * 9], ref[67 * 7], got[67 * 7], in_back[67 * 9], a_rows[67 * 7], s_back[67 * 7];
    gate7a_input(x, D * N, 99);
    split_graph g1 = {0}, g2 = {0};
    mi_sched *s1 = NULL, *s2 = NULL;
    mi_backend *cpu_only[1] = {ctx->cpu}, *both[2] = {ctx->cuda, ctx->cpu};
    char *dump = NULL;
    size_t dump_n = 0;
    CHECK_OK(sched_new(cpu_only, 1, &s1), "sched_new cpu");
    CHECK_OK(build_split_graph(&g1, x, D, N), "graph");
    CHECK_OK(sched_compute(s1, g1.g), "compute cpu-only");
    CHECK_OK(sched_read(s1, g1.o, ref, 0, sizeof ref), "read cpu-only");
    CHECK_OK(sched_new(both, 2, &s2), "sched_new cuda+cpu");
    CHECK_OK(build_split_graph(&g2, x, D, N), "graph");
    g_ws_checked = 0;
    CHECK_OK(sched_compute(s2, g2.g), "compute cuda+cpu");
    CHECK(g2.in->backend == ctx->cuda->index && g2.s->backend == ctx->cuda->index && g2.a->backend == ctx->cpu->index &&
          g2.o->backend == ctx->cpu->index, "assignment: input %d slice %d silu %d out %d (cuda=%d cpu=%d)",
          g2.in->backend, g2.s->backend, g2.a->backend, g2.o->backend, ctx->cuda->index, ctx->cpu->index);
    CHECK(g_ws_checked == 1, "the CUDA slice node ran %d times", g_ws_checked);
    CHECK_OK(sched_read(s2, g2.o, got, 0, sizeof got), "read output");
    CHECK_OK(sched_read(s2, g2.in, in_back, 0, sizeof in_back), "read input node (device)");
    CHECK_OK(sched_read(s2, g2.a, a_rows, (size_t)D * sizeof(float), sizeof a_rows), "read silu rows (host)");
    CHECK_OK(sched_read(s2, g2.s, s_back, 0, sizeof s_back), "read slice (device)");
    size_t bad = gu_first_diff(in_back, x, sizeof x);
    CHECK(bad == (size_t)-1, "input on the device differs from the host at byte %zu", bad);
    bad = gu_first_diff(s_back, a_rows, sizeof s_back);
    CHECK(bad == (size_t)-1, "CPU->CUDA crossing: slice differs from the CPU rows at byte %zu", bad);
    for (size_t i = 0; i < sizeof got / sizeof got[0]; i++) {
        uint32_t gb, rb;
        memcpy(&gb, &got[i], 4);
        memcpy(&rb, &ref[i], 4);
        CHECK(gb == rb, "output [%zu]: got %.9g (0x%08x) want %.9g (0x%08x)", i, got[i], gb, ref[i], rb);
    }
    const mi_sched_stats *st = sched_stats(s2);
    CHECK(st->n_splits >= 4 && st->n_copies >= 3, "expected >= 4 splits and >= 3 copies, got %d and %d",
          st->n_splits, st->n_copies);
    gu_pass(&ctx->run, "input->cuda, silu->cpu, slice->cuda, silu->cpu: %d splits, %d copies (%zu B); both crossings and "
            "the output bit-identical to the CPU-only run; workspace sized at split_begin",
            st->n_splits, st->n_copies, st->bytes_copied);

    /* the dump shows backends, splits and copies */
    gu_begin(&ctx->run, "dump_graph");
    {
        FILE *f = open_memstream(&dump, &dump_n);
        CHECK(f, "open_memstream");
        sched_dump(s2, g2.g, f);
        fclose(f);
        int has_cuda = strstr(dump, "cuda") != NULL;
        int has_copy = strstr(dump, "COPY") != NULL || strstr(dump, "copy") != NULL;
        int has_split = strstr(dump, "split") != NULL || strstr(dump, "SPLIT") != NULL;
        CHECK(has_cuda && has_copy && has_split, "dump lacks%s%s%s:\n%.600s", has_cuda ? "" : " 'cuda'",
              has_copy ? "" : " copies", has_split ? "" : " splits", dump);
        int lines = 0;
        for (char *p = dump; *p; p++) lines += *p == '\n';
        gu_pass(&ctx->run, "MINFER_DUMP_GRAPH output names cuda, splits and copies (%d lines)", lines);
    }
done:
    mi_cuda_remove_kernel(MI_OP_SLICE_ROWS, &k_gate_slice);
    free(dump);
    if (s1) sched_free(s1);
    if (s2) sched_free(s2);
    if (g1.g) graph_free(g1.g);
    if (g2.g) graph_free(g2.g);
    if (ctx->run.n && strcmp(ctx->run.tests[ctx->run.n - 1].name, "dump_graph"))
        gu_skip_named(&ctx->run, "dump_graph", "split_boundary failed first");
}

/* One graph shape whose CUDA Input gets a pool block of about D*N*4 bytes. */
mi_status gate7a_run_shape(mi_sched *s, int64_t D, int64_t N, const float *x, void **in_ptr) {
    mi_graph *g = graph_new(16);
    if (!g) return mi_err(MI_ERR_NOMEM, "graph_new");
    mi_tensor *in = graph_input(g, "x", MI_TYPE_F32, D, N, x);
    mi_tensor *o = in ? graph_silu(g, in) : NULL;
    mi_status st = o ? MI_OK : mi_err(MI_ERR_INTERNAL, "graph build");
    if (st == MI_OK) {
        o->flags |= MI_T_OUTPUT;
        g->output = o;
        st = sched_compute(s, g);
    }
    if (st == MI_OK && in->backend != sched_backend(s, 0)->index)
        st = mi_err(MI_ERR_INTERNAL, "input not placed on cuda");
    float probe[4];
    if (st == MI_OK) st = sched_read(s, o, probe, 0, sizeof probe);
    if (in_ptr) *in_ptr = in ? in->data : NULL;
    graph_free(g);
    return st;
}

void gate7a_kv_persist(gate7a *ctx) {
    gu_begin(&ctx->run, "kv_persist");
    mi_sched *s = NULL;
    mi_buffer *kv = NULL;
    mi_backend *be = NULL;   /* its own pool, so earlier tests' cached blocks do not blur the generation */
    mi_backend *both[2] = {NULL, ctx->cpu};
    mi_cuda_ctx *c = NULL;
    size_t kvn = ((size_t)3 << 20) + 17, rn = ((size_t)5 << 20) + 3;
    unsigned char *hk = malloc(kvn), *hr = malloc(rn), *back = malloc(rn > kvn ? rn : kvn);
    float *xbig = malloc(((size_t)4096 * 6144 + 64) * sizeof(float));
    void *region = NULL, *again = NULL, *kv_base = NULL;
    int n_gen_changes = 0, n_runs = 0;
    CHECK(hk && hr && back && xbig, "host memory");
    CHECK_OK(mi_cuda_backend_new(ctx->dev, &be), "fresh backend");
    both[0] = be;
    c = mi_cuda_ctx_of(be);
    gate7a_input(xbig, (int64_t)4096 * 6144, 5);
    CHECK_OK(be->iface->buffer_alloc(be, kvn, &kv), "KV buffer (as the session allocates it)");
    kv_base = kv->base;
    CHECK_OK(mi_cuda_region_get(c, "gate_kv_region", rn, &region), "region");
    gu_fill(hk, kvn, 71);
    gu_fill(hr, rn, 72);
    CHECK_OK(be->iface->write(be, kv->base, hk, kvn), "write KV");
    CHECK_OK(be->iface->write(be, region, hr, rn), "write region");
    CHECK_OK(sched_new(both, 2, &s), "sched_new");
    /* shapes: small, small, big (pool must grow), big, small, trim, big, bigger (grows
     * again), big, small */
    static const int64_t shp[][2] = {{64, 4}, {64, 4}, {4096, 4096}, {4096, 4096}, {64, 4}, {0, 0},
                                     {4096, 2048}, {4096, 6144}, {4096, 4096}, {64, 4}};
    struct { int64_t D, N; uint64_t gen; void *p; } runs[16];
    for (size_t i = 0; i < sizeof shp / sizeof shp[0]; i++) {
        if (shp[i][0] == 0) {
            mi_cuda_pool_trim(mi_cuda_pool_of(c));
            continue;
        }
        void *p = NULL;
        CHECK_OK(gate7a_run_shape(s, shp[i][0], shp[i][1], xbig, &p), "graph run");
        uint64_t gen = be->iface->generation(be);
        runs[n_runs].D = shp[i][0];
        runs[n_runs].N = shp[i][1];
        runs[n_runs].gen = gen;
        runs[n_runs].p = p;
        if (n_runs && gen != runs[n_runs - 1].gen) n_gen_changes++;
        /* same shape, same generation => same address (what a captured graph relies on) */
        for (int j = 0; j < n_runs; j++)
            if (runs[j].D == runs[n_runs].D && runs[j].N == runs[n_runs].N && runs[j].gen == gen)
                CHECK(runs[j].p == p, "run %d and %d: same shape and generation %llu but input moved %p -> %p",
                      j, n_runs, (unsigned long long)gen, runs[j].p, p);
        n_runs++;
    }
    CHECK(runs[1].gen == runs[0].gen && runs[1].p == runs[0].p,
          "re-running the same graph changed generation (%llu -> %llu) or address",
          (unsigned long long)runs[0].gen, (unsigned long long)runs[1].gen);
    CHECK(runs[2].gen != runs[1].gen, "the pool grew for a 64 MiB input but the generation stayed %llu",
          (unsigned long long)runs[1].gen);
    CHECK(kv->base == kv_base, "the KV buffer moved");
    CHECK_OK(mi_cuda_region_get(c, "gate_kv_region", rn, &again), "region again");
    CHECK(again == region, "region lookup gave %p, first %p", again, region);
    {
        void *other = NULL;
        mi_status st = mi_cuda_region_get(c, "gate_kv_region", rn + 1, &other);
        CHECK(st == MI_ERR_INVALID && !other, "region with a different size: %s", mi_status_name(st));
    }
    CHECK_OK(be->iface->read(be, back, kv->base, kvn), "read KV");
    size_t bad = gu_first_diff(back, hk, kvn);
    CHECK(bad == (size_t)-1, "KV buffer changed at byte %zu after graph re-allocation", bad);
    CHECK_OK(be->iface->read(be, back, region, rn), "read region");
    bad = gu_first_diff(back, hr, rn);
    CHECK(bad == (size_t)-1, "region changed at byte %zu after graph re-allocation", bad);
    gu_pass(&ctx->run, "%d graph allocations (%d generation changes, a trim in between): KV buffer (%zu B) and named "
            "region (%zu B) bit-identical; same shape + same generation always the same address",
            n_runs, n_gen_changes, kvn, rn);
done:
    if (s) sched_free(s);
    if (kv) be->iface->buffer_free(be, kv);
    if (region) mi_cuda_region_free(c, "gate_kv_region");
    if (be) be->iface->destroy(be);
    free(hk);
    free(hr);
    free(back);
    free(xbig);
}

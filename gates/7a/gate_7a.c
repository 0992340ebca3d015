/* Phase 7a device gate: the CUDA device layer, buffer pool, host<->device copies,
 * split boundaries, persistent (KV) regions, whole-model parity with Input on CUDA,
 * and the failure paths (MINFER_DISABLE_CUDA, no device, injected cudaMalloc failure).
 * Plain C; prints one line per test and "N passed, N failed, N skipped"; JSON summary
 * to $MINFER_GATE_JSON. Env: MINFER_GATE_MODELS=a.gguf:b.gguf, MINFER_GATE_QUICK=1 (sizes to
 * 64 MiB, no child processes), MINFER_GATE_SANITIZER=1, MINFER_GATE_ONLY=name,name. */
#include "gates/gate_util.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "phase7a_skeleton/cuda_dev.h"
#include "common/backend/sched.h"
#include "common/model/mi.h"
#include <stdint.h>
#include <unistd.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

static gu_run R;
static const char *g_only;   /* MINFER_GATE_ONLY=name[,name]: run only these tests (debugging) */
static mi_backend *g_cuda, *g_cpu;   /* shared backends for the tests that need no fresh pool */
static int g_dev, g_quick;
static char g_self[4096];

#define CHECK(cond, ...) do { if (!(cond)) { gu_fail(&R, __VA_ARGS__); goto done; } } while (0)
#define CHECK_OK(expr, what) do { mi_status st__ = (expr); \
    if (st__ != MI_OK) { gu_fail(&R, "%s: %s", (what), mi_errmsg()); goto done; } } while (0)

static const char *const k_tests[] = {
    "device_props", "error_text", "supports_input_only", "pool_roundtrip", "pool_generation",
    "copy_across", "split_boundary", "dump_graph", "kv_persist", "whole_model", "disable_cuda",
    "no_device", "fail_malloc",
};

/* Higher phases install kernels; the 7a claims (Input on CUDA, everything else on the
 * CPU) are tested with the op table emptied again, so this gate means the same at 7b..7e. */
static struct { mi_cuda_exec_fn e; mi_cuda_supports_fn s; mi_cuda_workspace_fn w; } g_saved_ops[MI_OP_COUNT];
static int ops_input_only(void) {
    int n = 0;
    for (int op = MI_OP_NONE + 1; op < MI_OP_COUNT; op++) {
        if (op == MI_OP_INPUT) continue;
        mi_cuda_get_op((mi_op)op, &g_saved_ops[op].e, &g_saved_ops[op].s, &g_saved_ops[op].w);
        n += g_saved_ops[op].e != NULL;
        mi_cuda_set_op((mi_op)op, NULL, NULL, NULL);
    }
    return n;
}
static void ops_restore(void) {
    for (int op = MI_OP_NONE + 1; op < MI_OP_COUNT; op++)
        if (op != MI_OP_INPUT) mi_cuda_set_op((mi_op)op, g_saved_ops[op].e, g_saved_ops[op].s, g_saved_ops[op].w);
}

/* Poison a device range with a byte and wait for it. */
static mi_status dev_poison(mi_backend *be, void *p, size_t n, int byte) {
    mi_cuda_ctx *c = mi_cuda_ctx_of(be);
    MI_TRY(mi_cudev_memset_async(p, byte, n, mi_cuda_stream(c)));
    return mi_cudev_stream_sync(mi_cuda_stream(c));
}

/* Random bytes that never equal either poison, so an unwritten byte always shows. */
static void fill_avoid(unsigned char *p, size_t n, unsigned long long seed, int p1, int p2) {
    gu_fill(p, n, seed);
    for (size_t i = 0; i < n; i++)
        if (p[i] == (unsigned char)p1 || p[i] == (unsigned char)p2) p[i] = 0x11;
}

/* ---------------------------------------------------------------- device ---- */
static void t_device_props(void) {
    gu_begin(&R, "device_props");
    const mi_cudev_props *p = mi_cuda_props(mi_cuda_ctx_of(g_cuda));
    char desc[512];
    mi_cudev_props_str(p, desc, sizeof desc);
    CHECK(p->name[0] && p->sm_count > 0 && p->total_mem > ((size_t)1 << 30) && p->l2_bytes > 0 &&
          p->peak_bw_gbs > 1.0 && p->cc_major >= 3, "implausible properties: %s", desc);
    gu_pass(&R, "%s; driver %s, cuda runtime %d, free %.1f GiB", desc, R.driver, p->runtime_version,
            (double)p->free_mem / (1 << 30));
done:;
}

/* A failing call's message carries the call text, the CUDA text, file and line; the
 * error is not sticky (the next call works). */
static void t_error_text(void) {
    gu_begin(&R, "error_text");
    const char *san = getenv("MINFER_GATE_SANITIZER");
    if (san && *san && strcmp(san, "0")) {   /* the sanitizer would count the deliberate API error */
        gu_skip(&R, "deliberate API error not provoked under compute-sanitizer");
        return;
    }
    mi_status st = mi_cudev_select(100000);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", mi_errmsg());
    CHECK(st == MI_ERR_DEVICE, "cudaSetDevice(100000) returned %s", mi_status_name(st));
    CHECK(strstr(msg, "cudaSetDevice") && strstr(msg, "failed:") && strstr(msg, "cuda_dev.c:"),
          "message lacks call/file:line: '%s'", msg);
    CHECK_OK(mi_cudev_select(g_dev), "re-selecting the device");
    void *p = NULL;
    CHECK_OK(mi_cudev_malloc(&p, 4096), "allocation after the error");
    mi_cudev_free(p);
    gu_pass(&R, "'%s'", msg);
done:;
}

static void t_supports(void) {
    gu_begin(&R, "supports_input_only");
    int top7a = !strcmp(mi_build_phase, "7a");
    mi_tensor a, b, n;
    int64_t ne[2] = {64, 4};
    tensor_init(&a, "a", MI_TYPE_F32, 2, ne);
    tensor_init(&b, "b", MI_TYPE_F32, 2, ne);
    a.op = b.op = MI_OP_SILU;
    int wrong = 0;
    char bad[256] = "";
    for (int op = MI_OP_NONE; op < MI_OP_COUNT; op++) {
        tensor_init(&n, "n", MI_TYPE_F32, 2, ne);
        n.op = (mi_op)op;
        n.src[0] = &a;
        n.src[1] = &b;
        bool s = g_cuda->iface->supports(g_cuda, &n);
        bool want = op == MI_OP_INPUT;
        if (op == MI_OP_INPUT || top7a) {
            if (s != want) {
                wrong++;
                size_t l = strlen(bad);
                snprintf(bad + l, sizeof bad - l, " %s=%d", mi_op_name((mi_op)op), (int)s);
            }
        }
    }
    CHECK(!wrong, "supports() wrong for:%s", bad);
    if (top7a) gu_pass(&R, "Input only, all %d other ops refused", MI_OP_COUNT - 2);
    else gu_pass(&R, "Input accepted (ops of phase %s installed above 7a not judged here)", mi_build_phase);
done:;
}

/* ------------------------------------------------------------------ pool ---- */
static void t_pool_roundtrip(void) {
    gu_begin(&R, "pool_roundtrip");
    static const size_t sizes[] = {1, 2, 3, 7, 255, 256, 257, 4095, 4097, 65537, (1u << 20) - 1,
                                   (1u << 20) + 13, (16u << 20) + 5, (64u << 20) + 3,
                                   (255u << 20) + 3, (size_t)1 << 30};
    const size_t n_sizes = sizeof sizes / sizeof sizes[0];
    size_t maxsz = g_quick ? ((size_t)64 << 20) + 3 : (size_t)1 << 30;
    unsigned char *h = malloc(maxsz), *r = malloc(maxsz), *want = malloc(maxsz);
    mi_buffer *b = NULL;
    int n_done = 0, n_off = 0;
    double gbs_w = 0, gbs_r = 0;
    CHECK(h && r && want, "host allocation of 3 x %zu bytes failed", maxsz);
    for (size_t si = 0; si < n_sizes; si++) {
        size_t n = sizes[si];
        if (n > maxsz) continue;
        CHECK_OK(g_cuda->iface->buffer_alloc(g_cuda, n, &b), "buffer_alloc");
        CHECK(b->base && b->size >= n, "buffer of %zu bytes: base %p size %zu", n, b->base, b->size);
        unsigned char *d = (unsigned char *)b->base;
        /* whole buffer: poison device and host, write, read, compare every byte */
        fill_avoid(h, n, 1000 + si, 0xA5, 0x3C);
        CHECK_OK(dev_poison(g_cuda, d, n, 0xA5), "poison");
        memset(r, 0x3C, n);
        double t0 = gu_now_ms();
        CHECK_OK(g_cuda->iface->write(g_cuda, d, h, n), "write");
        CHECK_OK(g_cuda->iface->synchronize(g_cuda), "synchronize");
        double t1 = gu_now_ms();
        CHECK_OK(g_cuda->iface->read(g_cuda, r, d, n), "read");
        double t2 = gu_now_ms();
        if (n == sizes[n_sizes - 1] || (g_quick && n == maxsz)) {
            gbs_w = (double)n / ((t1 - t0) * 1e6);
            gbs_r = (double)n / ((t2 - t1) * 1e6);
        }
        size_t bad = gu_first_diff(r, h, n);
        CHECK(bad == (size_t)-1, "size %zu: byte %zu got 0x%02x want 0x%02x", n, bad, r[bad], h[bad]);
        /* odd offsets: write a sub-range into a poisoned buffer, read the whole buffer and
         * an odd sub-range back; outside the range the poison must survive */
        if (n >= 8) {
            size_t offs[3] = {1, n / 3 | 1, n - 3};
            for (int k = 0; k < 3; k++) {
                size_t off = offs[k], len = (n - off) / 2 + 1;
                if (off + len > n) len = n - off;
                fill_avoid(h, len, 5000 + si * 7 + (size_t)k, 0xA5, 0x3C);
                CHECK_OK(dev_poison(g_cuda, d, n, 0xA5), "poison");
                CHECK_OK(g_cuda->iface->write(g_cuda, d + off, h, len), "write at offset");
                memset(want, 0xA5, n);
                memcpy(want + off, h, len);
                memset(r, 0x3C, n);
                CHECK_OK(g_cuda->iface->read(g_cuda, r, d, n), "read");
                bad = gu_first_diff(r, want, n);
                CHECK(bad == (size_t)-1, "size %zu, write at offset %zu len %zu: byte %zu got 0x%02x want 0x%02x",
                      n, off, len, bad, r[bad], want[bad]);
                size_t roff = off / 2 | 1, rlen = n - roff > 2 ? n - roff - 1 : n - roff;
                memset(r, 0x3C, rlen + 1);
                CHECK_OK(g_cuda->iface->read(g_cuda, r, d + roff, rlen), "read at offset");
                bad = gu_first_diff(r, want + roff, rlen);
                CHECK(bad == (size_t)-1, "size %zu, read at offset %zu len %zu: byte %zu got 0x%02x want 0x%02x",
                      n, roff, rlen, bad, r[bad], want[roff + bad]);
                CHECK(r[rlen] == 0x3C, "size %zu: read at offset %zu wrote past its %zu bytes", n, roff, rlen);
                n_off++;
            }
        }
        g_cuda->iface->buffer_free(g_cuda, b);
        b = NULL;
        n_done++;
    }
    /* pinned host memory: the truly asynchronous path */
    {
        size_t n = ((size_t)8 << 20) + 5;
        void *ph = NULL, *pr = NULL;
        CHECK_OK(mi_cudev_host_alloc(&ph, n), "cudaMallocHost");
        mi_status st = mi_cudev_host_alloc(&pr, n);
        if (st != MI_OK) mi_cudev_host_free(ph);
        CHECK_OK(st, "cudaMallocHost");
        fill_avoid(ph, n, 77, 0xA5, 0x3C);
        memset(pr, 0x3C, n);
        st = g_cuda->iface->buffer_alloc(g_cuda, n, &b);
        if (st == MI_OK) st = dev_poison(g_cuda, b->base, n, 0xA5);
        if (st == MI_OK) st = g_cuda->iface->write(g_cuda, b->base, ph, n);
        if (st == MI_OK) st = g_cuda->iface->read(g_cuda, pr, b->base, n);
        size_t bad = st == MI_OK ? gu_first_diff(pr, ph, n) : 0;
        mi_cudev_host_free(ph);
        mi_cudev_host_free(pr);
        CHECK_OK(st, "pinned round trip");
        CHECK(bad == (size_t)-1, "pinned round trip: first difference at byte %zu", bad);
        g_cuda->iface->buffer_free(g_cuda, b);
        b = NULL;
    }
    gu_pass(&R, "%d sizes 1 B .. %s, %d offset cases, pinned 8 MiB ok; largest: write %.1f GB/s, read %.1f GB/s (pageable)",
            n_done, g_quick ? "64 MiB (quick)" : "1 GiB", n_off, gbs_w, gbs_r);
done:
    if (b) g_cuda->iface->buffer_free(g_cuda, b);
    free(h);
    free(r);
    free(want);
}

typedef struct { char *p; size_t n; unsigned long long seed; } live_blk;

static int blk_cmp(const void *a, const void *b) {
    const live_blk *x = a, *y = b;
    return x->p < y->p ? -1 : x->p > y->p;
}

/* The generation changes exactly when an allocation hands out an address not handed
 * out before; live blocks never overlap and keep their contents. */
static void t_pool_generation(void) {
    gu_begin(&R, "pool_generation");
    mi_backend *be = NULL;
    mi_buffer *bufs[4] = {0};
    enum { MAXLIVE = 64, MAXSEEN = 4096 };
    mi_buffer *live[MAXLIVE];
    live_blk lb[MAXLIVE];
    void *seen[MAXSEEN];
    int n_live = 0, n_seen = 0, n_bumps = 0, n_reuse = 0, n_ops = 0;
    unsigned char *h = NULL, *r = NULL;
    CHECK_OK(mi_cuda_backend_new(g_dev, &be), "fresh backend");
    const mi_backend_iface *f = be->iface;
    uint64_t g0 = f->generation(be);
    static const size_t seq[4] = {1000, 5000, 3u << 20, 77};
    void *addr[4];
    for (int i = 0; i < 4; i++) CHECK_OK(f->buffer_alloc(be, seq[i], &bufs[i]), "alloc");
    for (int i = 0; i < 4; i++) addr[i] = bufs[i]->base;
    uint64_t g1 = f->generation(be);
    CHECK(g1 != g0, "first allocations left the generation at %llu", (unsigned long long)g0);
    for (int i = 0; i < 4; i++) { f->buffer_free(be, bufs[i]); bufs[i] = NULL; }
    CHECK(f->generation(be) == g1, "freeing changed the generation");
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 4; i++) CHECK_OK(f->buffer_alloc(be, seq[i], &bufs[i]), "alloc");
        for (int i = 0; i < 4; i++)
            CHECK(bufs[i]->base == addr[i], "round %d: request %d moved %p -> %p", round, i, addr[i], bufs[i]->base);
        CHECK(f->generation(be) == g1, "same requests, same addresses, but the generation changed");
        for (int i = round ? 3 : 0; round ? i >= 0 : i < 4; i += round ? -1 : 1) {   /* free order varies */
            f->buffer_free(be, bufs[i]);
            bufs[i] = NULL;
        }
    }
    CHECK_OK(f->buffer_alloc(be, (size_t)200 << 20, &bufs[0]), "alloc 200 MiB");
    for (int i = 0; i < 4; i++) CHECK(bufs[0]->base != addr[i], "200 MiB block at an old address");
    CHECK(f->generation(be) != g1, "a new 200 MiB block left the generation unchanged");
    f->buffer_free(be, bufs[0]);
    bufs[0] = NULL;
    for (int i = 0; i < 4; i++) seen[n_seen++] = addr[i];

    /* random alloc/free; each block gets its own bytes, checked at the end */
    h = malloc((size_t)8 << 20);
    r = malloc((size_t)8 << 20);
    CHECK(h && r, "host memory");
    unsigned long long rs = 12345;
    for (n_ops = 0; n_ops < 400; n_ops++) {
        int do_alloc = n_live == 0 || (n_live < MAXLIVE && gu_rng(&rs) % 100 < 55);
        if (do_alloc) {
            unsigned long long k = gu_rng(&rs);
            size_t n = k % 10 < 7 ? 1 + (size_t)(gu_rng(&rs) % 65536) : 1 + (size_t)(gu_rng(&rs) % (8u << 20));
            uint64_t gb = f->generation(be);
            mi_buffer *nb = NULL;
            CHECK_OK(f->buffer_alloc(be, n, &nb), "random alloc");
            uint64_t ga = f->generation(be);
            int is_new = 1;
            for (int i = 0; i < n_seen; i++) if (seen[i] == nb->base) { is_new = 0; break; }
            CHECK((ga != gb) == is_new, "op %d: %s address %p but generation %llu -> %llu", n_ops,
                  is_new ? "new" : "reused", nb->base, (unsigned long long)gb, (unsigned long long)ga);
            if (is_new) { n_bumps++; if (n_seen < MAXSEEN) seen[n_seen++] = nb->base; }
            else n_reuse++;
            live[n_live] = nb;
            lb[n_live] = (live_blk){ nb->base, n, (unsigned long long)n_ops + 1 };
            gu_fill(h, n, lb[n_live].seed);
            CHECK_OK(f->write(be, nb->base, h, n), "write");
            CHECK_OK(f->synchronize(be), "sync");
            n_live++;
        } else {
            int i = (int)(gu_rng(&rs) % (unsigned)n_live);
            uint64_t gb = f->generation(be);
            f->buffer_free(be, live[i]);
            CHECK(f->generation(be) == gb, "op %d: free changed the generation", n_ops);
            live[i] = live[n_live - 1];
            lb[i] = lb[n_live - 1];
            n_live--;
        }
    }
    {
        live_blk sorted[MAXLIVE];
        memcpy(sorted, lb, (size_t)n_live * sizeof *lb);
        qsort(sorted, (size_t)n_live, sizeof *sorted, blk_cmp);
        for (int i = 0; i + 1 < n_live; i++)
            CHECK(sorted[i].p + sorted[i].n <= sorted[i + 1].p, "live blocks overlap: %p+%zu > %p",
                  (void *)sorted[i].p, sorted[i].n, (void *)sorted[i + 1].p);
        for (int i = 0; i < n_live; i++) {
            gu_fill(h, lb[i].n, lb[i].seed);
            CHECK_OK(f->read(be, r, lb[i].p, lb[i].n), "read");
            size_t bad = gu_first_diff(r, h, lb[i].n);
            CHECK(bad == (size_t)-1, "live block %p (%zu B) corrupted at byte %zu", (void *)lb[i].p, lb[i].n, bad);
        }
    }
    uint64_t gt = f->generation(be);
    size_t trimmed = mi_cuda_pool_trim(mi_cuda_pool_of(mi_cuda_ctx_of(be)));
    CHECK(f->generation(be) == gt, "trim changed the generation");
    gu_pass(&R, "same requests -> same addresses and generation; %d random ops: %d new addresses (each changed "
            "the generation), %d reuses (none did); %d live blocks disjoint and intact; trim gave back %.1f MiB",
            n_ops, n_bumps, n_reuse, n_live, (double)trimmed / (1 << 20));
done:
    for (int i = 0; i < 4; i++) if (bufs[i]) be->iface->buffer_free(be, bufs[i]);
    if (be) {
        for (int i = 0; i < n_live; i++) be->iface->buffer_free(be, live[i]);
        be->iface->destroy(be);
    }
    free(h);
    free(r);
}

static void t_copy_across(void) {
    gu_begin(&R, "copy_across");
    static const size_t sizes[] = {1, 3, 4097, (1u << 20) + 7, (64u << 20) + 1};
    mi_buffer *a = NULL, *b = NULL;
    size_t maxn = (64u << 20) + 1 + 16;
    unsigned char *h = malloc(maxn), *r = malloc(maxn);
    int n_ok = 0;
    CHECK(h && r, "host memory");
    CHECK_OK(g_cuda->iface->buffer_alloc(g_cuda, maxn, &a), "alloc");
    CHECK_OK(g_cuda->iface->buffer_alloc(g_cuda, maxn, &b), "alloc");
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si], off = si & 1 ? 3 : 0;
        unsigned char *da = (unsigned char *)a->base + off, *db = (unsigned char *)b->base + 5;
        fill_avoid(h, n, 300 + si, 0xA5, 0x3C);
        /* CPU -> CUDA */
        CHECK_OK(dev_poison(g_cuda, a->base, maxn, 0xA5), "poison");
        CHECK_OK(sched_copy_across(g_cuda, da, g_cpu, h, n), "copy_across cpu->cuda");
        memset(r, 0x3C, n);
        CHECK_OK(g_cuda->iface->read(g_cuda, r, da, n), "read");
        size_t bad = gu_first_diff(r, h, n);
        CHECK(bad == (size_t)-1, "cpu->cuda %zu B: byte %zu got 0x%02x want 0x%02x", n, bad, r[bad], h[bad]);
        /* CUDA -> CUDA (same backend) */
        CHECK_OK(dev_poison(g_cuda, b->base, maxn, 0xA5), "poison");
        CHECK_OK(g_cuda->iface->copy(g_cuda, db, da, n), "copy");
        /* CUDA -> CPU */
        memset(r, 0x3C, n + 1);
        CHECK_OK(sched_copy_across(g_cpu, r, g_cuda, db, n), "copy_across cuda->cpu");
        bad = gu_first_diff(r, h, n);
        CHECK(bad == (size_t)-1, "cuda->cpu %zu B: byte %zu got 0x%02x want 0x%02x", n, bad, r[bad], h[bad]);
        CHECK(r[n] == 0x3C, "cuda->cpu %zu B wrote past the end", n);
        n_ok++;
    }
    gu_pass(&R, "%d sizes (1 B .. 64 MiB+1, odd offsets): cpu->cuda, cuda->cuda, cuda->cpu bit-identical", n_ok);
done:
    if (a) g_cuda->iface->buffer_free(g_cuda, a);
    if (b) g_cuda->iface->buffer_free(g_cuda, b);
    free(h);
    free(r);
}

/* ------------------------------------------------------- graphs + sched ---- */
/* A byte-copy SLICE_ROWS installed by this gate only, so that a CUDA node consumes a
 * CPU node: the graph then crosses CPU->CUDA as well as CUDA->CPU. */
static size_t g_ws_need = ((size_t)3 << 20) + 5;
static int g_ws_checked;
static bool gate_slice_supports(const mi_tensor *n) { return n->op == MI_OP_SLICE_ROWS && n->src[0]->type == MI_TYPE_F32; }
static size_t gate_slice_ws(const mi_tensor *n) { (void)n; return g_ws_need; }
static mi_status gate_slice_exec(mi_cuda_ctx *c, mi_tensor *node, void *ws) {
    size_t have = 0;
    void *w = mi_cuda_workspace(c, &have);
    if (!ws || ws != w || have < g_ws_need)
        return mi_err(MI_ERR_INTERNAL, "workspace %p (%zu B) not sized before execution", ws, have);
    g_ws_checked++;
    const mi_tensor *s = node->src[0];
    size_t row = (size_t)s->ne[0] * sizeof(float);
    return mi_cudev_d2d_async(node->data, (const char *)s->data + row * (size_t)node->p[0], mi_nbytes(node),
                              mi_cuda_stream(c));
}

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

static void make_input(float *x, int64_t n, unsigned long long seed) {
    unsigned long long s = seed;
    for (int64_t i = 0; i < n; i++) x[i] = (float)((double)(gu_rng(&s) >> 11) / 9007199254740992.0 * 8.0 - 4.0);
    if (n > 3) { x[0] = -0.0f; x[1] = 1e-40f; x[2] = -3.5e-39f; }   /* signed zero, subnormals */
}

static void t_split_boundary(void) {
    gu_begin(&R, "split_boundary");
    mi_cuda_exec_fn oe; mi_cuda_supports_fn os; mi_cuda_workspace_fn ow;
    mi_cuda_get_op(MI_OP_SLICE_ROWS, &oe, &os, &ow);
    mi_cuda_set_op(MI_OP_SLICE_ROWS, gate_slice_exec, gate_slice_supports, gate_slice_ws);
    const int64_t D = 67, N = 9;
    float x[67 * 9], ref[67 * 7], got[67 * 7], in_back[67 * 9], a_rows[67 * 7], s_back[67 * 7];
    make_input(x, D * N, 99);
    split_graph g1 = {0}, g2 = {0};
    mi_sched *s1 = NULL, *s2 = NULL;
    mi_backend *cpu_only[1] = {g_cpu}, *both[2] = {g_cuda, g_cpu};
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
    CHECK(g2.in->backend == g_cuda->index && g2.s->backend == g_cuda->index && g2.a->backend == g_cpu->index &&
          g2.o->backend == g_cpu->index, "assignment: input %d slice %d silu %d out %d (cuda=%d cpu=%d)",
          g2.in->backend, g2.s->backend, g2.a->backend, g2.o->backend, g_cuda->index, g_cpu->index);
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
    gu_pass(&R, "input->cuda, silu->cpu, slice->cuda, silu->cpu: %d splits, %d copies (%zu B); both crossings and "
            "the output bit-identical to the CPU-only run; workspace sized at split_begin",
            st->n_splits, st->n_copies, st->bytes_copied);

    /* the dump shows backends, splits and copies */
    gu_begin(&R, "dump_graph");
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
        gu_pass(&R, "MINFER_DUMP_GRAPH output names cuda, splits and copies (%d lines)", lines);
    }
done:
    mi_cuda_set_op(MI_OP_SLICE_ROWS, oe, os, ow);
    free(dump);
    if (s1) sched_free(s1);
    if (s2) sched_free(s2);
    if (g1.g) graph_free(g1.g);
    if (g2.g) graph_free(g2.g);
    if (R.n && strcmp(R.tests[R.n - 1].name, "dump_graph"))
        gu_skip_named(&R, "dump_graph", "split_boundary failed first");
}

/* One graph shape whose CUDA Input gets a pool block of about D*N*4 bytes. */
static mi_status run_shape(mi_sched *s, int64_t D, int64_t N, const float *x, void **in_ptr) {
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

static void t_kv_persist(void) {
    gu_begin(&R, "kv_persist");
    mi_sched *s = NULL;
    mi_buffer *kv = NULL;
    mi_backend *be = NULL;   /* its own pool, so earlier tests' cached blocks do not blur the generation */
    mi_backend *both[2] = {NULL, g_cpu};
    mi_cuda_ctx *c = NULL;
    size_t kvn = ((size_t)3 << 20) + 17, rn = ((size_t)5 << 20) + 3;
    unsigned char *hk = malloc(kvn), *hr = malloc(rn), *back = malloc(rn > kvn ? rn : kvn);
    float *xbig = malloc(((size_t)4096 * 6144 + 64) * sizeof(float));
    void *region = NULL, *again = NULL, *kv_base = NULL;
    int n_gen_changes = 0, n_runs = 0;
    CHECK(hk && hr && back && xbig, "host memory");
    CHECK_OK(mi_cuda_backend_new(g_dev, &be), "fresh backend");
    both[0] = be;
    c = mi_cuda_ctx_of(be);
    make_input(xbig, (int64_t)4096 * 6144, 5);
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
        CHECK_OK(run_shape(s, shp[i][0], shp[i][1], xbig, &p), "graph run");
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
    gu_pass(&R, "%d graph allocations (%d generation changes, a trim in between): KV buffer (%zu B) and named "
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

/* ------------------------------------------------------------ whole model ---- */
static uint64_t fnv64(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ULL; }
    return h;
}

/* Prompt of 7 tokens (all logits), then 3 single-token steps; logits concatenated. */
static mi_status model_logits(const char *path, const char *backend, float **out, size_t *n_out, char *used, size_t used_n) {
    *out = NULL;
    *n_out = 0;
    mi_model *m = NULL;
    mi_session *s = NULL;
    float *acc = NULL;
    MI_TRY(mi_model_load(path, &m));
    const mi_hparams *hp = mi_model_hparams(m);
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = backend;
    p.n_ctx = 64;
    mi_status st = mi_session_new(m, &p, &s);
    size_t nv = (size_t)hp->n_vocab, total = nv * 10, have = 0;
    if (st == MI_OK) {
        snprintf(used, used_n, "%s", mi_session_backend(s));
        acc = malloc(total * sizeof *acc);
        if (!acc) st = mi_err(MI_ERR_NOMEM, "logits");
    }
    int32_t toks[7];
    for (int i = 0; i < 7; i++) toks[i] = (int32_t)((i * 37 + 11) % hp->n_vocab);
    if (st == MI_OK) st = mi_session_decode(s, toks, 7, true);
    for (int step = 0; step < 4 && st == MI_OK; step++) {
        int64_t rows = 0;
        const float *l = mi_logits(s, &rows);
        memcpy(acc + have, l, (size_t)rows * nv * sizeof *acc);
        have += (size_t)rows * nv;
        if (step < 3) {
            int32_t t = (int32_t)((step * 101 + 5) % hp->n_vocab);
            st = mi_session_decode(s, &t, 1, false);
        }
    }
    mi_session_free(s);
    mi_model_free(m);
    if (st != MI_OK) { free(acc); return st; }
    *out = acc;
    *n_out = have;
    return MI_OK;
}

static int child_main(const char *mode, const char *model) {
    mi_phases_install();
    ops_input_only();
    if (!strcmp(mode, "probe")) {
        mi_backend *be = NULL;
        mi_status st = mi_backend_create("cuda", &be);
        if (st != MI_OK) { fprintf(stderr, "error: %s\n", mi_errmsg()); return 1; }
        be->iface->destroy(be);
        printf("backend=cuda\n");
        return 0;
    }
    float *l = NULL;
    size_t n = 0;
    char used[16] = "?";
    mi_status st = model_logits(model, mode, &l, &n, used, sizeof used);
    if (st != MI_OK) { fprintf(stderr, "error: %s\n", mi_errmsg()); return 1; }
    printf("backend=%s hash=%016llx n=%zu\n", used, (unsigned long long)fnv64(l, n * sizeof *l), n);
    free(l);
    return 0;
}

/* Run this program as a child with extra environment; collect its output. Returns the
 * exit code, or -signal if it died from one. */
extern char **environ;

static int run_child(const char *const *env_kv, const char *mode, const char *model, char *out, size_t out_n) {
    /* the environment is built before fork: between fork and exec a child of a threaded
     * process (CUDA runtime, CPU pool) may only make async-signal-safe calls */
    int n_env = 0, n_kv = 0;
    while (environ[n_env]) n_env++;
    while (env_kv[2 * n_kv]) n_kv++;
    char **envp = calloc((size_t)(n_env + n_kv + 1), sizeof *envp);
    char *kvbuf = calloc((size_t)n_kv + 1, 512);
    if (!envp || !kvbuf) { free(envp); free(kvbuf); return -1000; }
    int w = 0;
    for (int i = 0; i < n_env; i++) {
        int replaced = 0;
        for (int k = 0; k < n_kv; k++) {
            size_t l = strlen(env_kv[2 * k]);
            if (!strncmp(environ[i], env_kv[2 * k], l) && environ[i][l] == '=') replaced = 1;
        }
        if (!replaced) envp[w++] = environ[i];
    }
    for (int k = 0; k < n_kv; k++) {
        char *kv = kvbuf + 512 * (size_t)k;
        snprintf(kv, 512, "%s=%s", env_kv[2 * k], env_kv[2 * k + 1]);
        envp[w++] = kv;
    }
    envp[w] = NULL;
    char *const argv[] = {g_self, (char *)"--child", (char *)mode, (char *)(model ? model : ""), NULL};
    int pfd[2];
    out[0] = 0;
    if (pipe(pfd)) { free(envp); free(kvbuf); return -1000; }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { close(pfd[0]); close(pfd[1]); free(envp); free(kvbuf); return -1000; }
    if (pid == 0) {
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        close(pfd[0]);
        close(pfd[1]);
        execve(g_self, argv, envp);
        _exit(127);
    }
    close(pfd[1]);
    free(envp);
    free(kvbuf);
    size_t have = 0;
    for (;;) {
        char tmp[4096];
        ssize_t k = read(pfd[0], tmp, sizeof tmp);
        if (k <= 0) break;
        size_t take = (size_t)k < out_n - 1 - have ? (size_t)k : out_n - 1 - have;
        memcpy(out + have, tmp, take);
        have += take;
    }
    out[have] = 0;
    close(pfd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) return -WTERMSIG(status);
    return WEXITSTATUS(status);
}

static int count_str(const char *h, const char *n) {
    int c = 0;
    for (const char *p = h; (p = strstr(p, n)); p += strlen(n)) c++;
    return c;
}

static void last_line(const char *s, char *buf, size_t n) {
    size_t len = strlen(s);
    while (len && (s[len - 1] == '\n' || s[len - 1] == ' ')) len--;
    size_t b = len;
    while (b && s[b - 1] != '\n') b--;
    size_t k = len - b < n - 1 ? len - b : n - 1;
    memcpy(buf, s + b, k);
    buf[k] = 0;
}

#define MAX_MODELS 8
static char *g_models[MAX_MODELS];
static int g_n_models;
static uint64_t g_cpu_hash[MAX_MODELS];
static size_t g_cpu_n[MAX_MODELS];

static void t_whole_model(void) {
    if (!g_n_models) { gu_skip_named(&R, "whole_model", "no model (MINFER_GATE_MODELS unset)"); return; }
    for (int mi = 0; mi < g_n_models; mi++) {
        char name[96];
        const char *base = strrchr(g_models[mi], '/');
        snprintf(name, sizeof name, "whole_model:%s", base ? base + 1 : g_models[mi]);
        gu_begin(&R, name);
        float *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        char ua[16], ub[16];
        double t0 = gu_now_ms();
        CHECK_OK(model_logits(g_models[mi], "cpu", &a, &na, ua, sizeof ua), "cpu run");
        double t1 = gu_now_ms();
        CHECK_OK(model_logits(g_models[mi], "cuda", &b, &nb, ub, sizeof ub), "cuda run");
        double t2 = gu_now_ms();
        g_cpu_hash[mi] = fnv64(a, na * sizeof *a);
        g_cpu_n[mi] = na;
        CHECK(!strcmp(ua, "cpu") && !strcmp(ub, "cuda"), "sessions ran on %s and %s", ua, ub);
        CHECK(na == nb && na > 0, "logit counts %zu vs %zu", na, nb);
        {
            size_t nbad = 0, first = 0;
            for (size_t i = 0; i < na; i++) {
                uint32_t x, y;
                memcpy(&x, &a[i], 4);
                memcpy(&y, &b[i], 4);
                if (x != y) { if (!nbad) first = i; nbad++; }
            }
            CHECK(nbad == 0, "%zu of %zu logits differ; first [%zu]: got %.9g want %.9g", nbad, na, first,
                  b[first], a[first]);
        }
        gu_pass(&R, "%zu logits (7-token prompt + 3 steps) bit-identical, hash %016llx; cpu %.0f ms, cuda-enabled %.0f ms",
                na, (unsigned long long)g_cpu_hash[mi], t1 - t0, t2 - t1);
    done:
        free(a);
        free(b);
    }
}

static void t_disable_cuda(void) {
    gu_begin(&R, "disable_cuda");
    mi_backend *be = NULL;
    float *l = NULL;
    setenv("MINFER_DISABLE_CUDA", "1", 1);
    mi_status st = mi_backend_create("cuda", &be);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", mi_errmsg());
    if (st == MI_OK) be->iface->destroy(be);
    CHECK(st == MI_ERR_DEVICE && strstr(msg, "MINFER_DISABLE_CUDA"), "create gave %s '%s'", mi_status_name(st), msg);
    if (g_n_models && g_cpu_n[0]) {
        size_t n = 0;
        char used[16];
        CHECK_OK(model_logits(g_models[0], "auto", &l, &n, used, sizeof used), "auto session");
        CHECK(!strcmp(used, "cpu"), "auto session ran on %s", used);
        CHECK(n == g_cpu_n[0] && fnv64(l, n * sizeof *l) == g_cpu_hash[0], "logits differ from the CPU run");
        gu_pass(&R, "create refused ('%s'); --backend auto ran on the CPU with the CPU logits", msg);
    } else {
        gu_pass(&R, "create refused ('%s'); no model for the session part", msg);
    }
done:
    unsetenv("MINFER_DISABLE_CUDA");
    free(l);
}

static void t_no_device(void) {
    gu_begin(&R, "no_device");
    if (g_quick) { gu_skip(&R, "child processes not run in quick mode"); return; }
    static const char *const env[] = {"CUDA_VISIBLE_DEVICES", "", NULL};
    char out[16384], tail[512];
    int rc = run_child(env, "probe", NULL, out, sizeof out);
    last_line(out, tail, sizeof tail);
    CHECK(rc == 1 && strstr(out, "no CUDA device"), "probe without a device: rc %d, '%s'", rc, tail);
    if (g_n_models && g_cpu_n[0]) {
        char want[64];
        snprintf(want, sizeof want, "backend=cpu hash=%016llx", (unsigned long long)g_cpu_hash[0]);
        rc = run_child(env, "auto", g_models[0], out, sizeof out);
        last_line(out, tail, sizeof tail);
        CHECK(rc == 0 && strstr(out, want), "auto without a device: rc %d, '%s'", rc, tail);
        int says = count_str(out, "CUDA unavailable") + count_str(out, "no CUDA device");
        CHECK(says >= 1 && says <= 2 && count_str(out, "CUDA unavailable") <= 1,
              "auto without a device should say so once; said %d times", says);
        rc = run_child(env, "cuda", g_models[0], out, sizeof out);
        last_line(out, tail, sizeof tail);
        CHECK(rc == 1 && strstr(out, "no CUDA device"), "--backend cuda without a device: rc %d, '%s'", rc, tail);
        gu_pass(&R, "CUDA_VISIBLE_DEVICES='': create says 'no CUDA device'; auto runs on the CPU with the CPU "
                "logits, saying so once; cuda ends in a clear error: '%s'", tail);
    } else {
        gu_pass(&R, "CUDA_VISIBLE_DEVICES='': create says 'no CUDA device' (no model for the session part)");
    }
done:;
}

static void t_fail_malloc(void) {
    gu_begin(&R, "fail_malloc");
    mi_backend *be = NULL;
    mi_buffer *b = NULL;
    mi_sched *s = NULL;
    int n_clean = 0, n_err = 0;
    float x[64 * 4];
    make_input(x, 64 * 4, 3);
    CHECK_OK(mi_cuda_backend_new(g_dev, &be), "fresh backend");
    mi_cudev_fail_malloc_at(1);
    mi_status st = be->iface->buffer_alloc(be, 1000, &b);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", mi_errmsg());
    CHECK(st == MI_ERR_DEVICE && !b && strstr(msg, "cudaMalloc") && strstr(msg, "injected"),
          "injected failure gave %s '%s'", mi_status_name(st), msg);
    CHECK_OK(be->iface->buffer_alloc(be, 1000, &b), "the allocation after the injected failure");
    be->iface->buffer_free(be, b);
    b = NULL;
    be->iface->destroy(be);
    be = NULL;
    /* through the scheduler: the graph allocation fails cleanly, then works */
    {
        mi_backend *bes[2];
        CHECK_OK(mi_cuda_backend_new(g_dev, &be), "fresh backend");
        bes[0] = be;
        bes[1] = g_cpu;
        CHECK_OK(sched_new(bes, 2, &s), "sched_new");
        mi_cudev_fail_malloc_at(1);
        st = run_shape(s, 64, 4, x, NULL);
        CHECK(st != MI_OK && strstr(mi_errmsg(), "cudaMalloc"), "graph run with a failing cudaMalloc: %s '%s'",
              mi_status_name(st), mi_errmsg());
        mi_cudev_fail_malloc_at(0);
        CHECK_OK(run_shape(s, 64, 4, x, NULL), "graph run after the failure");
    }
    mi_cudev_fail_malloc_at(0);
    if (!g_quick && g_n_models && g_cpu_n[0]) {
        char want[64], out[16384], tail[512];
        snprintf(want, sizeof want, "hash=%016llx", (unsigned long long)g_cpu_hash[0]);
        for (int n = 1; n <= 3; n++) {
            char nstr[16];
            snprintf(nstr, sizeof nstr, "%d", n);
            const char *env[] = {"MINFER_CUDA_FAIL_MALLOC", nstr, NULL};
            int rc = run_child(env, "cuda", g_models[0], out, sizeof out);
            last_line(out, tail, sizeof tail);
            CHECK(rc >= 0, "MINFER_CUDA_FAIL_MALLOC=%d: the run died from signal %d: '%s'", n, -rc, tail);
            if (rc == 0) {
                CHECK(strstr(out, want), "MINFER_CUDA_FAIL_MALLOC=%d: clean exit but logits differ: '%s'", n, tail);
                n_clean++;
            } else {
                CHECK(rc == 1 && strstr(out, "cudaMalloc"), "MINFER_CUDA_FAIL_MALLOC=%d: rc %d without a clear "
                      "message: '%s'", n, rc, tail);
                n_err++;
            }
        }
        gu_pass(&R, "in-process: clear error then recovery (pool and scheduler); whole model with the 1st..3rd "
                "cudaMalloc failing: %d clear errors, %d clean runs, no crash ('%s')", n_err, n_clean, msg);
    } else {
        gu_pass(&R, "in-process: clear error then recovery (pool and scheduler): '%s'", msg);
    }
done:
    mi_cudev_fail_malloc_at(0);
    if (s) sched_free(s);
    if (b && be) be->iface->buffer_free(be, b);
    if (be) be->iface->destroy(be);
}

static int want(const char *fn) {
    return !g_only || strstr(g_only, fn + 2) != NULL;
}
#define RUN(fn) do { if (want(#fn)) fn(); } while (0)

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "--child")) return child_main(argv[2], argc >= 4 ? argv[3] : "");
    signal(SIGPIPE, SIG_IGN);
    ssize_t k = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (k <= 0) snprintf(g_self, sizeof g_self, "%s", argv[0]);
    else g_self[k] = 0;
    g_only = getenv("MINFER_GATE_ONLY");
    if (g_only && !*g_only) g_only = NULL;
    const char *q = getenv("MINFER_GATE_QUICK");
    g_quick = q && *q && strcmp(q, "0");
    const char *ms = getenv("MINFER_GATE_MODELS");
    static char mbuf[4096];
    if (ms && *ms) {
        snprintf(mbuf, sizeof mbuf, "%s", ms);
        for (char *t = strtok(mbuf, ":"); t && g_n_models < MAX_MODELS; t = strtok(NULL, ":"))
            if (*t) g_models[g_n_models++] = t;
    }
    gu_init(&R, "gate_7a", mi_build_phase);
    mi_phases_install();
    int n = 0;
    mi_err_clear();
    mi_cudev_count(&n);
    const char *dv = getenv("MINFER_CUDA_DEVICE");
    g_dev = dv && *dv ? atoi(dv) : 0;
    mi_status st = MI_OK;
    if (n > 0) st = mi_backend_create("cuda", &g_cuda);
    if (n == 0 || st != MI_OK) {
        char why[600];
        if (n == 0) {
            const char *reason = mi_errmsg();
            if (reason && *reason) snprintf(why, sizeof why, "no CUDA device (%s)", reason);
            else snprintf(why, sizeof why, "no CUDA device");
        } else {
            snprintf(why, sizeof why, "%s", mi_errmsg());
        }
        printf("skipped: %s\n", why);
        for (size_t i = 0; i < sizeof k_tests / sizeof k_tests[0]; i++) gu_skip_named(&R, k_tests[i], why);
        return gu_finish(&R);
    }
    mi_cudev_driver_str(R.driver, sizeof R.driver);
    snprintf(R.gpu, sizeof R.gpu, "%s", mi_cuda_props(mi_cuda_ctx_of(g_cuda))->name);
    st = mi_backend_cpu_new(0, &g_cpu);
    if (st != MI_OK) {
        gu_begin(&R, "setup");
        gu_fail(&R, "CPU backend: %s", mi_errmsg());
        return gu_finish(&R);
    }
    /* the scheduler sets index; tests that use a backend outside a scheduler keep them apart */
    g_cuda->index = 0;
    g_cpu->index = 1;
    printf("gate_7a: phase %s, %s, driver %s%s\n", mi_build_phase, R.gpu, R.driver, g_quick ? ", quick" : "");

    RUN(t_device_props);
    RUN(t_error_text);
    RUN(t_supports);
    int n_cleared = ops_input_only();
    if (n_cleared) printf("gate_7a: %d op kernels of higher phases set aside: the 7a claims are tested\n", n_cleared);
    RUN(t_pool_roundtrip);
    RUN(t_pool_generation);
    RUN(t_copy_across);
    RUN(t_split_boundary);
    RUN(t_kv_persist);
    RUN(t_whole_model);
    RUN(t_disable_cuda);
    RUN(t_no_device);
    RUN(t_fail_malloc);

    ops_restore();
    g_cpu->iface->destroy(g_cpu);
    g_cuda->iface->destroy(g_cuda);
    return gu_finish(&R);
}

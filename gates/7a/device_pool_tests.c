/* gate_7a, device layer and buffer pool: device properties, error text, what CUDA supports
 * at 7a, byte-exact round trips at odd sizes and offsets, the pool's generation and reuse,
 * and copies between backends. */
#include <stdlib.h>
#include <string.h>
#include "gates/7a/gate7a.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "phase7a_skeleton/cuda_dev.h"

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
void gate7a_device_props(gate7a *ctx) {
    gu_begin(&ctx->run, "device_props");
    const mi_cudev_props *p = mi_cuda_props(mi_cuda_ctx_of(ctx->cuda));
    char desc[512];
    mi_cudev_props_str(p, desc, sizeof desc);
    CHECK(p->name[0] && p->sm_count > 0 && p->total_mem > ((size_t)1 << 30) && p->l2_bytes > 0 &&
          p->peak_bw_gbs > 1.0 && p->cc_major >= 3, "implausible properties: %s", desc);
    gu_pass(&ctx->run, "%s; driver %s, cuda runtime %d, free %.1f GiB", desc, ctx->run.driver, p->runtime_version,
            (double)p->free_mem / (1 << 30));
done:;
}

/* A failing call's message carries the call text, the CUDA text, file and line; the
 * error is not sticky (the next call works). */
void gate7a_error_text(gate7a *ctx) {
    gu_begin(&ctx->run, "error_text");
    const char *san = getenv("MINFER_GATE_SANITIZER");
    if (san && *san && strcmp(san, "0")) {   /* the sanitizer would count the deliberate API error */
        gu_skip(&ctx->run, "deliberate API error not provoked under compute-sanitizer");
        return;
    }
    mi_status st = mi_cudev_select(100000);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", mi_errmsg());
    CHECK(st == MI_ERR_DEVICE, "cudaSetDevice(100000) returned %s", mi_status_name(st));
    CHECK(strstr(msg, "cudaSetDevice") && strstr(msg, "failed:") && strstr(msg, "cuda_dev.c:"),
          "message lacks call/file:line: '%s'", msg);
    CHECK_OK(mi_cudev_select(ctx->dev), "re-selecting the device");
    void *p = NULL;
    CHECK_OK(mi_cudev_malloc(&p, 4096), "allocation after the error");
    mi_cudev_free(p);
    gu_pass(&ctx->run, "'%s'", msg);
done:;
}

void gate7a_supports(gate7a *ctx) {
    gu_begin(&ctx->run, "supports_input_only");
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
        bool s = ctx->cuda->iface->supports(ctx->cuda, &n);
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
    if (top7a) gu_pass(&ctx->run, "Input only, all %d other ops refused", MI_OP_COUNT - 2);
    else gu_pass(&ctx->run, "Input accepted (ops of phase %s installed above 7a not judged here)", mi_build_phase);
done:;
}

/* ------------------------------------------------------------------ pool ---- */
void gate7a_pool_roundtrip(gate7a *ctx) {
    gu_begin(&ctx->run, "pool_roundtrip");
    static const size_t sizes[] = {1, 2, 3, 7, 255, 256, 257, 4095, 4097, 65537, (1u << 20) - 1,
                                   (1u << 20) + 13, (16u << 20) + 5, (64u << 20) + 3,
                                   (255u << 20) + 3, (size_t)1 << 30};
    const size_t n_sizes = sizeof sizes / sizeof sizes[0];
    size_t maxsz = ctx->quick ? ((size_t)64 << 20) + 3 : (size_t)1 << 30;
    unsigned char *h = malloc(maxsz), *r = malloc(maxsz), *want = malloc(maxsz);
    mi_buffer *b = NULL;
    int n_done = 0, n_off = 0;
    double gbs_w = 0, gbs_r = 0;
    CHECK(h && r && want, "host allocation of 3 x %zu bytes failed", maxsz);
    for (size_t si = 0; si < n_sizes; si++) {
        size_t n = sizes[si];
        if (n > maxsz) continue;
        CHECK_OK(ctx->cuda->iface->buffer_alloc(ctx->cuda, n, &b), "buffer_alloc");
        CHECK(b->base && b->size >= n, "buffer of %zu bytes: base %p size %zu", n, b->base, b->size);
        unsigned char *d = (unsigned char *)b->base;
        /* whole buffer: poison device and host, write, read, compare every byte */
        fill_avoid(h, n, 1000 + si, 0xA5, 0x3C);
        CHECK_OK(dev_poison(ctx->cuda, d, n, 0xA5), "poison");
        memset(r, 0x3C, n);
        double t0 = gu_now_ms();
        CHECK_OK(ctx->cuda->iface->write(ctx->cuda, d, h, n), "write");
        CHECK_OK(ctx->cuda->iface->synchronize(ctx->cuda), "synchronize");
        double t1 = gu_now_ms();
        CHECK_OK(ctx->cuda->iface->read(ctx->cuda, r, d, n), "read");
        double t2 = gu_now_ms();
        if (n == sizes[n_sizes - 1] || (ctx->quick && n == maxsz)) {
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
                CHECK_OK(dev_poison(ctx->cuda, d, n, 0xA5), "poison");
                CHECK_OK(ctx->cuda->iface->write(ctx->cuda, d + off, h, len), "write at offset");
                memset(want, 0xA5, n);
                memcpy(want + off, h, len);
                memset(r, 0x3C, n);
                CHECK_OK(ctx->cuda->iface->read(ctx->cuda, r, d, n), "read");
                bad = gu_first_diff(r, want, n);
                CHECK(bad == (size_t)-1, "size %zu, write at offset %zu len %zu: byte %zu got 0x%02x want 0x%02x",
                      n, off, len, bad, r[bad], want[bad]);
                size_t roff = off / 2 | 1, rlen = n - roff > 2 ? n - roff - 1 : n - roff;
                memset(r, 0x3C, rlen + 1);
                CHECK_OK(ctx->cuda->iface->read(ctx->cuda, r, d + roff, rlen), "read at offset");
                bad = gu_first_diff(r, want + roff, rlen);
                CHECK(bad == (size_t)-1, "size %zu, read at offset %zu len %zu: byte %zu got 0x%02x want 0x%02x",
                      n, roff, rlen, bad, r[bad], want[roff + bad]);
                CHECK(r[rlen] == 0x3C, "size %zu: read at offset %zu wrote past its %zu bytes", n, roff, rlen);
                n_off++;
            }
        }
        ctx->cuda->iface->buffer_free(ctx->cuda, b);
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
        st = ctx->cuda->iface->buffer_alloc(ctx->cuda, n, &b);
        if (st == MI_OK) st = dev_poison(ctx->cuda, b->base, n, 0xA5);
        if (st == MI_OK) st = ctx->cuda->iface->write(ctx->cuda, b->base, ph, n);
        if (st == MI_OK) st = ctx->cuda->iface->read(ctx->cuda, pr, b->base, n);
        size_t bad = st == MI_OK ? gu_first_diff(pr, ph, n) : 0;
        mi_cudev_host_free(ph);
        mi_cudev_host_free(pr);
        CHECK_OK(st, "pinned round trip");
        CHECK(bad == (size_t)-1, "pinned round trip: first difference at byte %zu", bad);
        ctx->cuda->iface->buffer_free(ctx->cuda, b);
        b = NULL;
    }
    gu_pass(&ctx->run, "%d sizes 1 B .. %s, %d offset cases, pinned 8 MiB ok; largest: write %.1f GB/s, read %.1f GB/s (pageable)",
            n_done, ctx->quick ? "64 MiB (quick)" : "1 GiB", n_off, gbs_w, gbs_r);
done:
    if (b) ctx->cuda->iface->buffer_free(ctx->cuda, b);
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
void gate7a_pool_generation(gate7a *ctx) {
    gu_begin(&ctx->run, "pool_generation");
    mi_backend *be = NULL;
    mi_buffer *bufs[4] = {0};
    enum { MAXLIVE = 64, MAXSEEN = 4096 };
    mi_buffer *live[MAXLIVE];
    live_blk lb[MAXLIVE];
    void *seen[MAXSEEN];
    int n_live = 0, n_seen = 0, n_bumps = 0, n_reuse = 0, n_ops = 0;
    unsigned char *h = NULL, *r = NULL;
    CHECK_OK(mi_cuda_backend_new(ctx->dev, &be), "fresh backend");
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
    gu_pass(&ctx->run, "same requests -> same addresses and generation; %d random ops: %d new addresses (each changed "
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

void gate7a_copy_across(gate7a *ctx) {
    gu_begin(&ctx->run, "copy_across");
    static const size_t sizes[] = {1, 3, 4097, (1u << 20) + 7, (64u << 20) + 1};
    mi_buffer *a = NULL, *b = NULL;
    size_t maxn = (64u << 20) + 1 + 16;
    unsigned char *h = malloc(maxn), *r = malloc(maxn);
    int n_ok = 0;
    CHECK(h && r, "host memory");
    CHECK_OK(ctx->cuda->iface->buffer_alloc(ctx->cuda, maxn, &a), "alloc");
    CHECK_OK(ctx->cuda->iface->buffer_alloc(ctx->cuda, maxn, &b), "alloc");
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si], off = si & 1 ? 3 : 0;
        unsigned char *da = (unsigned char *)a->base + off, *db = (unsigned char *)b->base + 5;
        fill_avoid(h, n, 300 + si, 0xA5, 0x3C);
        /* CPU -> CUDA */
        CHECK_OK(dev_poison(ctx->cuda, a->base, maxn, 0xA5), "poison");
        CHECK_OK(sched_copy_across(ctx->cuda, da, ctx->cpu, h, n), "copy_across cpu->cuda");
        memset(r, 0x3C, n);
        CHECK_OK(ctx->cuda->iface->read(ctx->cuda, r, da, n), "read");
        size_t bad = gu_first_diff(r, h, n);
        CHECK(bad == (size_t)-1, "cpu->cuda %zu B: byte %zu got 0x%02x want 0x%02x", n, bad, r[bad], h[bad]);
        /* CUDA -> CUDA (same backend) */
        CHECK_OK(dev_poison(ctx->cuda, b->base, maxn, 0xA5), "poison");
        CHECK_OK(ctx->cuda->iface->copy(ctx->cuda, db, da, n), "copy");
        /* CUDA -> CPU */
        memset(r, 0x3C, n + 1);
        CHECK_OK(sched_copy_across(ctx->cpu, r, ctx->cuda, db, n), "copy_across cuda->cpu");
        bad = gu_first_diff(r, h, n);
        CHECK(bad == (size_t)-1, "cuda->cpu %zu B: byte %zu got 0x%02x want 0x%02x", n, bad, r[bad], h[bad]);
        CHECK(r[n] == 0x3C, "cuda->cpu %zu B wrote past the end", n);
        n_ok++;
    }
    gu_pass(&ctx->run, "%d sizes (1 B .. 64 MiB+1, odd offsets): cpu->cuda, cuda->cuda, cuda->cpu bit-identical", n_ok);
done:
    if (a) ctx->cuda->iface->buffer_free(ctx->cuda, a);
    if (b) ctx->cuda->iface->buffer_free(ctx->cuda, b);
    free(h);
    free(r);
}

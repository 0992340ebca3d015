/* The CUDA backend (phase 7a): the backend interface over the device layer and the
 * buffer pool. It executes Input nodes itself (an async host->device copy on the
 * backend stream); every other op runs the kernel the dispatch chooses
 * (cuda_dispatch.c), whose candidates the phases above add. With none, supports() is
 * true for Input only. */
#include "cuda_backend.h"
#include "cuda_dev.h"
#include "cuda_pool.h"
#include "common/core/mi_settings.h"
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <pthread.h>

typedef struct cuda_region {
    char name[MI_NAME_MAX];
    void *ptr;
    size_t size;
    struct cuda_region *next;
} cuda_region;

struct mi_cuda_ctx {
    mi_backend *be;
    int device;
    mi_cudev_props props;
    void *stream;
    mi_cuda_pool *pool;
    void *workspace;          /* pool block, sized at split_begin */
    size_t workspace_size;
    cuda_region *regions;
    void *read_ev;            /* recorded behind the last queued read (cuda_read_begin); made at its first */
    struct mi_cuda_ctx *next_live;
};

/* Input: host bytes -> the node's device buffer, queued on the backend stream.
 * Pageable host_src is staged by the runtime before the call returns; a pinned one
 * must stay untouched until the stream reaches the copy (docs/PHASE7A.md). */
static mi_status exec_input(mi_cuda_ctx *c, const mi_tensor *node, void *workspace) {
    (void)workspace;
    size_t n = mi_nbytes(node);
    if (n == 0) return MI_OK;
    if (!node->host_src)
        return mi_err(MI_ERR_INVALID, "cuda: input node '%s' has no host data", node->name);
    if (!node->data)
        return mi_err(MI_ERR_INTERNAL, "cuda: input node '%s' was not allocated", node->name);
    mi_status st = mi_cudev_h2d_async(node->data, node->host_src, n, c->stream);
    if (st != MI_OK) return mi_err_ctx(st, "cuda: input '%s' (%zu bytes)", node->name, n);
    return MI_OK;
}

/* ---- live contexts, so mi_cuda_ctx_of can tell a CUDA backend from any other ---- */
static pthread_mutex_t g_live_mu = PTHREAD_MUTEX_INITIALIZER;
static mi_cuda_ctx *g_live;

mi_cuda_ctx *mi_cuda_ctx_of(mi_backend *be) {
    if (!be) return NULL;
    mi_cuda_ctx *found = NULL;
    pthread_mutex_lock(&g_live_mu);
    for (mi_cuda_ctx *c = g_live; c; c = c->next_live)
        if (c == be->ctx && c->be == be) { found = c; break; }
    pthread_mutex_unlock(&g_live_mu);
    return found;
}

void *mi_cuda_stream(mi_cuda_ctx *c) { return c->stream; }
int mi_cuda_device_id(mi_cuda_ctx *c) { return c->device; }
const mi_cudev_props *mi_cuda_props(mi_cuda_ctx *c) { return &c->props; }
mi_cuda_pool *mi_cuda_pool_of(mi_cuda_ctx *c) { return c->pool; }

void *mi_cuda_workspace(mi_cuda_ctx *c, size_t *size) {
    if (size) *size = c->workspace_size;
    return c->workspace;
}

mi_status mi_cuda_workspace_reserve(mi_cuda_ctx *c, size_t n) {
    if (n <= c->workspace_size) return MI_OK;
    /* grow by at least half again, so a slowly growing need does not re-allocate each time */
    size_t want = c->workspace_size + c->workspace_size / 2;
    if (want < n) want = n;
    if (want < ((size_t)1 << 20)) want = (size_t)1 << 20;
    /* the old block goes back to the pool; work already queued on the stream that still
     * reads it is ordered before any later user of the block (one stream) */
    if (c->workspace) {
        MI_TRY(mi_cuda_pool_release(c->pool, c->workspace));
        c->workspace = NULL;
        c->workspace_size = 0;
    }
    void *p = NULL;
    mi_status st = mi_cuda_pool_alloc(c->pool, want, &p);
    if (st != MI_OK) return mi_err_ctx(st, "cuda: workspace of %zu bytes", want);
    c->workspace = p;
    c->workspace_size = want;
    return MI_OK;
}

/* ---- persistent regions ---- */
mi_status mi_cuda_region_get(mi_cuda_ctx *c, const char *name, size_t size, void **out) {
    *out = NULL;
    for (cuda_region *r = c->regions; r; r = r->next) {
        if (strcmp(r->name, name)) continue;
        if (r->size != size)
            return mi_err(MI_ERR_INVALID, "cuda: region '%s' exists with %zu bytes, asked for %zu",
                          name, r->size, size);
        *out = r->ptr;
        return MI_OK;
    }
    cuda_region *r = calloc(1, sizeof *r);
    if (!r) return mi_err(MI_ERR_NOMEM, "cuda: out of host memory");
    snprintf(r->name, sizeof r->name, "%s", name);
    r->size = size;
    MI_TRY(mi_cudev_select(c->device));
    mi_status st = mi_cudev_malloc(&r->ptr, size);
    if (st != MI_OK) {
        free(r);
        return mi_err_ctx(st, "cuda: region '%s'", name);
    }
    r->next = c->regions;
    c->regions = r;
    *out = r->ptr;
    return MI_OK;
}

void mi_cuda_region_free(mi_cuda_ctx *c, const char *name) {
    for (cuda_region **pp = &c->regions; *pp; pp = &(*pp)->next) {
        cuda_region *r = *pp;
        if (strcmp(r->name, name)) continue;
        /* cudaFree waits for queued work on the device, so no kernel still uses it */
        mi_cudev_free(r->ptr);
        *pp = r->next;
        free(r);
        return;
    }
}

int mi_cuda_region_count(mi_cuda_ctx *c) {
    int n = 0;
    for (cuda_region *r = c->regions; r; r = r->next) n++;
    return n;
}

/* ---- the backend interface ---- */
static mi_cuda_ctx *ctx(mi_backend *be) { return (mi_cuda_ctx *)be->ctx; }

static const char *cuda_name(mi_backend *be) { (void)be; return "cuda"; }

static bool cuda_supports(mi_backend *be, mi_tensor *node) {
    (void)be;
    if (!node || (int)node->op <= (int)MI_OP_NONE || (int)node->op >= (int)MI_OP_COUNT) return false;
    if (node->op == MI_OP_INPUT) return true;
    return mi_cuda_choose(node) != NULL;   /* the choice is made here, at assignment, and kept */
}

static mi_status cuda_buffer_alloc(mi_backend *be, size_t size, mi_buffer **out) {
    *out = NULL;
    mi_cuda_ctx *c = ctx(be);
    mi_buffer *b = calloc(1, sizeof *b);
    if (!b) return mi_err(MI_ERR_NOMEM, "cuda: out of host memory");
    mi_status st = mi_cudev_select(c->device);
    if (st == MI_OK) st = mi_cuda_pool_alloc(c->pool, size, &b->base);
    if (st != MI_OK) {
        free(b);
        return st;
    }
    b->backend = be;
    b->size = size;
    *out = b;
    return MI_OK;
}

static void cuda_buffer_free(mi_backend *be, mi_buffer *buf) {
    if (!buf) return;
    if (mi_cuda_pool_release(ctx(be)->pool, buf->base) != MI_OK) mi_log("warning: %s", mi_errmsg());
    free(buf);
}

static uint64_t cuda_generation(mi_backend *be) { return mi_cuda_pool_generation(ctx(be)->pool); }

static mi_status cuda_write(mi_backend *be, void *dst, const void *host_src, size_t n) {
    return mi_cudev_h2d_async(dst, host_src, n, ctx(be)->stream);
}

static mi_status cuda_read(mi_backend *be, void *host_dst, const void *src, size_t n) {
    mi_cuda_ctx *c = ctx(be);
    MI_TRY(mi_cudev_d2h_async(host_dst, src, n, c->stream));
    return mi_cudev_stream_sync(c->stream);   /* the contract: complete on return */
}

/* a read queued behind the stream's work and an event behind it, so that the host can queue the
 * next step before it waits for this read alone (host_dst page-locked: the copy is the DMA's) */
static mi_status cuda_read_begin(mi_backend *be, void *host_dst, const void *src, size_t n) {
    mi_cuda_ctx *c = ctx(be);
    if (!c->read_ev) MI_TRY(mi_cudev_event_new(&c->read_ev));
    MI_TRY(mi_cudev_d2h_async(host_dst, src, n, c->stream));
    return mi_cudev_event_record(c->read_ev, c->stream);
}

static mi_status cuda_read_wait(mi_backend *be) {
    mi_cuda_ctx *c = ctx(be);
    return c->read_ev ? mi_cudev_event_sync(c->read_ev) : MI_OK;
}

/* page-locked: a decode step's logits row crosses by DMA, not through the driver's staging */
static void *cuda_host_alloc(mi_backend *be, size_t size) {
    void *p = NULL;
    if (mi_cudev_select(ctx(be)->device) != MI_OK || mi_cudev_host_alloc(&p, size) != MI_OK) {
        mi_err_clear();
        return NULL;
    }
    return p;
}

static void cuda_host_free(mi_backend *be, void *p) {
    (void)be;
    mi_cudev_host_free(p);
}

static mi_status cuda_copy(mi_backend *be, void *dst, const void *src, size_t n) {
    return mi_cudev_d2d_async(dst, src, n, ctx(be)->stream);
}

static mi_status cuda_split_begin(mi_backend *be, const mi_graph *g, const mi_split *s) {
    mi_cuda_ctx *c = ctx(be);
    size_t need = 0;
    for (int i = s->first; i < s->first + s->n; i++) {
        mi_tensor *t = g->nodes[i];
        if ((int)t->op <= (int)MI_OP_INPUT || (int)t->op >= (int)MI_OP_COUNT) continue;
        const mi_cuda_kernel *k = mi_cuda_choose(t);   /* made at assignment: a cached read */
        if (k && k->workspace) {
            size_t b = k->workspace(t);
            if (b > need) need = b;
        }
    }
    return mi_cuda_workspace_reserve(c, need);
}

static mi_status cuda_execute_node(mi_backend *be, mi_tensor *node) {
    mi_cuda_ctx *c = ctx(be);
    if ((int)node->op <= (int)MI_OP_NONE || (int)node->op >= (int)MI_OP_COUNT)
        return mi_err(MI_ERR_INTERNAL, "cuda: node '%s' has no executable op", node->name);
    if (node->op == MI_OP_INPUT) return exec_input(c, node, c->workspace);
    /* never synchronize here (hard rule 3): the kernel only enqueues */
    mi_status st = mi_cuda_dispatch_run(c, node, c->workspace);
    if (st != MI_OK) return mi_err_ctx(st, "cuda: %s '%s'", mi_op_name(node->op), node->name);
    return MI_OK;
}

static mi_status cuda_synchronize(mi_backend *be) { return mi_cudev_stream_sync(ctx(be)->stream); }

static void ctx_release(mi_cuda_ctx *c) {
    if (!c) return;
    pthread_mutex_lock(&g_live_mu);
    for (mi_cuda_ctx **pp = &g_live; *pp; pp = &(*pp)->next_live)
        if (*pp == c) { *pp = c->next_live; break; }
    pthread_mutex_unlock(&g_live_mu);
    if (c->stream && mi_cudev_stream_sync(c->stream) != MI_OK) mi_log("warning: %s", mi_errmsg());
    if (c->read_ev) mi_cudev_event_free(c->read_ev);
    while (c->regions) mi_cuda_region_free(c, c->regions->name);
    mi_cuda_pool_free(c->pool);   /* the workspace is a pool block */
    mi_cudev_stream_free(c->stream);
    free(c);
}

static void cuda_destroy(mi_backend *be) {
    if (!be) return;
    ctx_release(ctx(be));
    free(be);
}

/* Device memory a buffer may take: the device's free bytes plus the pool's cached
 * blocks, which the pool hands out again before it asks the device. */
static mi_status cuda_memory(mi_backend *be, size_t *avail, size_t *total) {
    mi_cuda_ctx *c = ctx(be);
    MI_TRY(mi_cudev_mem_info(c->device, avail, total));
    mi_cuda_pool_stats ps;
    mi_cuda_pool_stats_get(c->pool, &ps);
    *avail += ps.cached;
    return MI_OK;
}

static const mi_backend_iface g_cuda_iface = {
    .name = cuda_name,
    .supports = cuda_supports,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .generation = cuda_generation,
    .write = cuda_write,
    .read = cuda_read,
    .copy = cuda_copy,
    .read_begin = cuda_read_begin,
    .read_wait = cuda_read_wait,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .split_begin = cuda_split_begin,
    .execute_node = cuda_execute_node,
    .split_end = NULL,
    .synchronize = cuda_synchronize,
    .destroy = cuda_destroy,
    .memory = cuda_memory,
};

mi_status mi_cuda_backend_new(int device, mi_backend **out) {
    *out = NULL;
    if (mi_setting_on("MINFER_DISABLE_CUDA"))
        return mi_err(MI_ERR_DEVICE, "CUDA disabled by MINFER_DISABLE_CUDA=1");
    int n = 0;
    mi_err_clear();   /* mi_cudev_count leaves its reason in the message */
    MI_TRY(mi_cudev_count(&n));
    if (n == 0) {
        char why[512];   /* a copy: mi_err() writes the buffer mi_errmsg() points at */
        snprintf(why, sizeof why, "%s", mi_errmsg());
        if (why[0]) return mi_err(MI_ERR_DEVICE, "no CUDA device found (%s)", why);
        return mi_err(MI_ERR_DEVICE, "no CUDA device found");
    }
    if (device < 0 || device >= n)
        return mi_err(MI_ERR_INVALID, "CUDA device %d does not exist (%d device%s)", device, n,
                      n == 1 ? "" : "s");
    mi_cuda_ctx *c = calloc(1, sizeof *c);
    mi_backend *be = calloc(1, sizeof *be);
    if (!c || !be) {
        free(c);
        free(be);
        return mi_err(MI_ERR_NOMEM, "cuda: out of host memory");
    }
    c->device = device;
    mi_status st = mi_cudev_select(device);
    if (st == MI_OK) st = mi_cudev_props_get(device, &c->props);
    if (st == MI_OK) st = mi_cudev_stream_new(&c->stream);
    if (st == MI_OK) st = mi_cuda_pool_new(0, &c->pool);
    if (st != MI_OK) {
        ctx_release(c);
        free(be);
        return mi_err_ctx(st, "cuda: opening device %d", device);
    }
    c->be = be;
    be->iface = &g_cuda_iface;
    be->ctx = c;
    be->host_memory = false;
    be->index = -1;
    pthread_mutex_lock(&g_live_mu);
    c->next_live = g_live;
    g_live = c;
    pthread_mutex_unlock(&g_live_mu);

    static int said;   /* once per process: which device the engine runs on */
    if (!said) {
        said = 1;
        char desc[512];
        mi_cudev_props_str(&c->props, desc, sizeof desc);
        mi_log("cuda: device %d: %s", device, desc);
    }
    *out = be;
    return MI_OK;
}

/* The registry's create function: MINFER_CUDA_DEVICE=N picks the device (default 0). */
static mi_status cuda_create(mi_backend **out) {
    int dev = 0;
    const char *e = mi_setting("MINFER_CUDA_DEVICE");
    if (e && *e) {
        char *end = NULL;
        long v = strtol(e, &end, 10);
        if (*end || v < 0 || v > 1024)
            return mi_err(MI_ERR_INVALID, "MINFER_CUDA_DEVICE='%s' is not a device number", e);
        dev = (int)v;
    }
    return mi_cuda_backend_new(dev, out);
}

void mi_phase7a_install(void) {
    mi_backend_register("cuda", cuda_create);
}

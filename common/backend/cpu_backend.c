/* The CPU backend: host memory (64-byte aligned), a persistent thread pool, and one
 * switch over the ops of graph.h. Scratch for quantized activations and attention is
 * sized at split_begin, so execute_node never allocates. */
#include "cpu_backend.h"
#include "common/core/mi_settings.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#define CPU_ALIGN 64

static mi_cpu_ctx *ctx_of(mi_backend *be) { return be->ctx; }

static const char *cpu_name(mi_backend *be) {
    (void)be;
    return "cpu";
}

static bool type_readable(mi_type t) {
    const mi_type_traits *tr = mi_type_get(t);
    return tr && tr->supported;
}

static bool cpu_supports(mi_backend *be, mi_tensor *n) {
    (void)be;
    switch (n->op) {
    case MI_OP_INPUT:
    case MI_OP_ADD:
    case MI_OP_MUL:
    case MI_OP_RMS_NORM:
    case MI_OP_SILU:
    case MI_OP_SWIGLU:
    case MI_OP_SLICE_ROWS:
    case MI_OP_COPY:
    case MI_OP_ARGMAX:
    case MI_OP_TOPK:
        return true;
    case MI_OP_ROPE:
        return mi_rope_n_rot(n) <= 1024;
    case MI_OP_KV_STORE:
    case MI_OP_ATTN:
    case MI_OP_KV_SCATTER:
    case MI_OP_ATTN_PAGED:
        return true;
    case MI_OP_GET_ROWS:
        return type_readable(n->src[0]->type);
    case MI_OP_NORM_MATMUL:
    case MI_OP_NORM_FFN_SWIGLU:
    case MI_OP_MATMUL:
    case MI_OP_MATMUL_ADD:
    case MI_OP_FFN_SWIGLU: {
        const bool norm = n->op == MI_OP_NORM_MATMUL || n->op == MI_OP_NORM_FFN_SWIGLU;
        if (norm && (!n->src[3] || n->src[3]->type != MI_TYPE_F32)) return false;
        const mi_tensor *w = n->src[0];
        const bool ffn = n->op == MI_OP_FFN_SWIGLU || n->op == MI_OP_NORM_FFN_SWIGLU;
        const mi_tensor *w2 = ffn ? n->src[1] : NULL;
        if (!type_readable(w->type) || !mi_get_vec_dot(w->type, MI_ISA_BEST)) return false;
        mi_type vdt = mi_type_get(w->type)->vec_dot_type;
        if (vdt != MI_TYPE_F32 && !mi_get_quantize_act(vdt, MI_ISA_BEST)) return false;
        if (w2 && (!type_readable(w2->type) || mi_type_get(w2->type)->vec_dot_type != vdt ||
                   !mi_get_vec_dot(w2->type, MI_ISA_BEST)))
            return false;
        return true;
    }
    default:
        return false;
    }
}

static mi_status cpu_buffer_alloc(mi_backend *be, size_t size, mi_buffer **out) {
    *out = NULL;
    mi_buffer *b = calloc(1, sizeof *b);
    size_t sz = (size + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (sz == 0) sz = CPU_ALIGN;
    void *p = b ? aligned_alloc(CPU_ALIGN, sz) : NULL;
    if (!p) {
        free(b);
        return mi_err(MI_ERR_NOMEM, "cpu: cannot allocate %zu bytes", size);
    }
    b->backend = be;
    b->base = p;
    b->size = size;
    ctx_of(be)->generation++;
    *out = b;
    return MI_OK;
}

static void cpu_buffer_free(mi_backend *be, mi_buffer *buf) {
    if (!buf) return;
    free(buf->base);
    free(buf);
    ctx_of(be)->generation++;
}

static uint64_t cpu_generation(mi_backend *be) { return ctx_of(be)->generation; }

static mi_status cpu_memcpy(mi_backend *be, void *dst, const void *src, size_t n) {
    (void)be;
    if (n) memcpy(dst, src, n);
    return MI_OK;
}

static mi_status grow(void **p, size_t *have, size_t need) {
    if (need <= *have) return MI_OK;
    need = need + need / 4 + 4096;   /* headroom: decode steps grow the context by one */
    void *n = aligned_alloc(CPU_ALIGN, (need + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN);
    if (!n) return mi_err(MI_ERR_NOMEM, "cpu: cannot allocate %zu bytes of scratch", need);
    free(*p);
    *p = n;
    *have = need;
    return MI_OK;
}

void cpu_scratch_need(const mi_cpu_ctx *c, const mi_tensor *node, size_t *q, size_t *a) {
    *q = *a = 0;
    if (node->op == MI_OP_MATMUL || node->op == MI_OP_FFN_SWIGLU || node->op == MI_OP_NORM_MATMUL ||
        node->op == MI_OP_NORM_FFN_SWIGLU || node->op == MI_OP_MATMUL_ADD) {
        *q = cpu_matmul_scratch(node);
        *a = cpu_matmul_wscratch(c, node);
    }
    if (node->op == MI_OP_ATTN) *a = cpu_attn_scratch(c, node);
    if (node->op == MI_OP_ATTN_PAGED) cpu_attn_paged_scratch(c, node, q, a);
}

static mi_status cpu_split_begin(mi_backend *be, const mi_graph *g, const mi_split *s) {
    mi_cpu_ctx *c = ctx_of(be);
    size_t q = 0, a = 0;
    for (int i = s->first; i < s->first + s->n; i++) {
        size_t nq, na;
        cpu_scratch_need(c, g->nodes[i], &nq, &na);
        if (nq > q) q = nq;
        if (na > a) a = na;
    }
    c->q_src = NULL;   /* a new split: memory of earlier tensors may have been reused */
    MI_TRY(grow(&c->qbuf, &c->qbuf_size, q));
    MI_TRY(grow(&c->abuf, &c->abuf_size, a));
    return MI_OK;
}

static mi_status cpu_execute(mi_backend *be, mi_tensor *t) {
    mi_cpu_ctx *c = ctx_of(be);
    if (!t->data) return mi_err(MI_ERR_INTERNAL, "cpu: node %s (%s) has no memory", t->name, mi_op_name(t->op));
    for (int i = 0; i < MI_MAX_SRC; i++)
        if (t->src[i] && !t->src[i]->data)
            return mi_err(MI_ERR_INTERNAL, "cpu: node %s (%s): source %s has no memory", t->name, mi_op_name(t->op),
                          t->src[i]->name);
    switch (t->op) {
    case MI_OP_INPUT: return cpu_op_input(c, t);
    case MI_OP_GET_ROWS: return cpu_op_get_rows(c, t);
    case MI_OP_MATMUL:
    case MI_OP_FFN_SWIGLU: return cpu_op_matmul(c, t);
    case MI_OP_NORM_MATMUL:
    case MI_OP_NORM_FFN_SWIGLU:
    case MI_OP_MATMUL_ADD: return cpu_op_matmul_fused(c, t);
    case MI_OP_ADD:
    case MI_OP_MUL: return cpu_op_binary(c, t);
    case MI_OP_RMS_NORM: return cpu_op_rms_norm(c, t);
    case MI_OP_ROPE: return cpu_op_rope(c, t);
    case MI_OP_SILU:
    case MI_OP_SWIGLU: return cpu_op_unary(c, t);
    case MI_OP_KV_STORE: return cpu_op_kv_store(c, t);
    case MI_OP_ATTN: return cpu_op_attn(c, t);
    case MI_OP_KV_SCATTER: return cpu_op_kv_scatter(c, t);
    case MI_OP_ATTN_PAGED: return cpu_op_attn_paged(c, t);
    case MI_OP_SLICE_ROWS: return cpu_op_slice_rows(c, t);
    case MI_OP_COPY: return cpu_op_copy(c, t);
    case MI_OP_ARGMAX: return cpu_op_argmax(c, t);
    case MI_OP_TOPK: return cpu_op_topk(c, t);
    default: return mi_err(MI_ERR_UNSUPPORTED, "cpu: op %s not supported", mi_op_name(t->op));
    }
}

static mi_status cpu_synchronize(mi_backend *be) {
    (void)be;   /* execute_node returns when its work is done */
    return MI_OK;
}

static void cpu_destroy(mi_backend *be) {
    if (!be) return;
    mi_cpu_ctx *c = ctx_of(be);
    if (c) {
        threadpool_free(c->tp);
        free(c->qbuf);
        free(c->abuf);
        free(c);
    }
    free(be);
}

/* A "Key: N kB" line of /proc/meminfo, in bytes; 0 when absent. */
static size_t meminfo_bytes(const char *text, const char *key) {
    const char *p = strstr(text, key);
    if (!p) return 0;
    unsigned long long kb = strtoull(p + strlen(key), NULL, 10);
    return (size_t)kb * 1024;
}

/* A number in a one-line cgroup file; 0 when absent or "max" (no limit). */
static size_t cgroup_bytes(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = "";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return (buf[0] >= '0' && buf[0] <= '9') ? (size_t)strtoull(buf, NULL, 10) : 0;
}

/* Host memory a new allocation may take: MemAvailable (free memory plus what the kernel
 * can reclaim), capped by the cgroup's limit when one is set (a container's ceiling may
 * be lower than the machine's) and by what RLIMIT_AS leaves. Without /proc, sysconf's
 * free pages. */
static mi_status cpu_memory(mi_backend *be, size_t *avail, size_t *total) {
    (void)be;
    *avail = *total = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char text[4096];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = 0;
        *avail = meminfo_bytes(text, "MemAvailable:");
        *total = meminfo_bytes(text, "MemTotal:");
    }
    long page = sysconf(_SC_PAGESIZE);
    if (!*avail) {
        long pages = sysconf(_SC_AVPHYS_PAGES);
        if (pages > 0 && page > 0) *avail = (size_t)pages * (size_t)page;
    }
    if (!*total) {
        long pages = sysconf(_SC_PHYS_PAGES);
        if (pages > 0 && page > 0) *total = (size_t)pages * (size_t)page;
    }
    /* the cgroup's usage counts page cache (the mapped model) too, so only its limit caps */
    size_t lim = cgroup_bytes("/sys/fs/cgroup/memory.max");
    if (lim && lim < *total) *total = lim;
    if (*avail > *total) *avail = *total;
    /* an address-space limit (ulimit -v) leaves this process what it has not mapped yet */
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        unsigned long long vm_pages = 0;
        FILE *sf = fopen("/proc/self/statm", "r");
        if (sf) {
            if (fscanf(sf, "%llu", &vm_pages) != 1) vm_pages = 0;
            fclose(sf);
        }
        const size_t cap = (size_t)rl.rlim_cur, vm = (size_t)vm_pages * (size_t)(page > 0 ? page : 4096);
        const size_t left = vm < cap ? cap - vm : 0;
        if (left < *avail) *avail = left;
    }
    if (!*avail || !*total) return mi_err(MI_ERR_UNSUPPORTED, "cpu: the free host memory is unknown");
    return MI_OK;
}

static const mi_backend_iface g_cpu_iface = {
    .name = cpu_name,
    .supports = cpu_supports,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .generation = cpu_generation,
    .write = cpu_memcpy,
    .read = cpu_memcpy,
    .copy = cpu_memcpy,
    .split_begin = cpu_split_begin,
    .execute_node = cpu_execute,
    .split_end = NULL,
    .synchronize = cpu_synchronize,
    .destroy = cpu_destroy,
    .memory = cpu_memory,
};

mi_threadpool *mi_backend_cpu_pool(mi_backend *cpu) { return ((mi_cpu_ctx *)cpu->ctx)->tp; }

mi_status mi_backend_cpu_new(int n_threads, mi_backend **out) {
    *out = NULL;
    if (n_threads <= 0) {
        long v = 0;
        MI_TRY(mi_setting_int("MINFER_THREADS", 0, 1024, 0, &v));
        n_threads = (int)v;
    }
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    mi_backend *be = calloc(1, sizeof *be);
    mi_cpu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return mi_err(MI_ERR_NOMEM, "cpu backend: out of memory");
    }
    be->iface = &g_cpu_iface;
    be->ctx = c;
    be->host_memory = true;
    be->index = -1;
    c->n_threads = n_threads;
    c->isa = mi_cpu_best_isa();
    c->no_gemm = mi_setting_on("MINFER_NO_GEMM");
    c->no_dot4 = mi_setting_on("MINFER_NO_DOT4");
    mi_status st = threadpool_new(n_threads, &c->tp);
    if (st != MI_OK) {
        free(c);
        free(be);
        return st;
    }
    *out = be;
    return MI_OK;
}

/* The scheduler: backend assignment by supports() in priority order, splits with
 * boundary MI_OP_COPY nodes, per-backend allocation with liveness-based reuse (best-fit
 * free list, 256-byte alignment, one buffer per backend grown only when too small), and
 * split-by-split execution. Decisions are made before execution; a node that fails
 * returns its error with context, never falls back mid-graph. */
#include "sched.h"
#include "common/core/mi_progress.h"
#include "common/core/mi_settings.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SCHED_MAX_BE 8
#define SCHED_ALIGN 256

struct mi_sched {
    mi_backend *be[SCHED_MAX_BE];
    int n;
    mi_buffer *buf[SCHED_MAX_BE];
    uint64_t epoch;                  /* bumped whenever a graph buffer moves */
    mi_sched_stats stats;
    bool pending[SCHED_MAX_BE];      /* device backends with queued writes out of host memory */
    bool no_reuse;                   /* MINFER_SCHED_NOREUSE=1: every tensor its own bytes */
    int dump;                        /* MINFER_DUMP_GRAPH */
    bool profile;                    /* MINFER_PROFILE=1: time per op (synchronizing), printed at sched_free */
    double prof_s[MI_OP_COUNT];
    long prof_n[MI_OP_COUNT];
    /* MINFER_PROFILE=2 also: per weight-reading node shape (op, weight type, K, M, N),
     * with the weight bytes read, so a matmul's time reads as GB/s */
    struct { int op, type; int64_t k, m, n; size_t bytes; double s; long cnt; } prof_shape[48];
    int n_prof_shape;
    int profile_level;
    /* allocation record of the last allocated graph (for the dump) */
    const mi_graph *rec_graph;
    size_t *rec_off;                 /* [n_nodes] offset in the backend buffer, SIZE_MAX = none */
    int *rec_reuse;                  /* [n_nodes] node whose freed bytes this one took first, -1 */
    int rec_cap;
};

mi_status sched_new(mi_backend **backends, int n_backends, mi_sched **out) {
    *out = NULL;
    if (n_backends < 1 || n_backends > SCHED_MAX_BE)
        return mi_err(MI_ERR_INVALID, "sched_new: %d backends (1..%d)", n_backends, SCHED_MAX_BE);
    mi_sched *s = calloc(1, sizeof *s);
    if (!s) return mi_err(MI_ERR_NOMEM, "sched_new: out of memory");
    for (int i = 0; i < n_backends; i++) {
        if (!backends[i] || !backends[i]->iface) {
            free(s);
            return mi_err(MI_ERR_INVALID, "sched_new: backend %d is NULL", i);
        }
        s->be[i] = backends[i];
        backends[i]->index = i;
    }
    s->n = n_backends;
    s->epoch = 1;
    s->no_reuse = mi_setting_on("MINFER_SCHED_NOREUSE");
    long prof = 0, dump = 0;
    mi_status st = mi_setting_int("MINFER_PROFILE", 0, 2, 0, &prof);
    if (st == MI_OK) st = mi_setting_int("MINFER_DUMP_GRAPH", 0, 2, 0, &dump);
    if (st != MI_OK) {
        free(s);
        return st;
    }
    s->profile_level = (int)prof;
    s->profile = prof > 0;
    s->dump = (int)dump;
    *out = s;
    return MI_OK;
}

void sched_free(mi_sched *s) {
    if (!s) return;
    if (s->profile) {
        double tot = 0;
        for (int o = 0; o < MI_OP_COUNT; o++) tot += s->prof_s[o];
        fprintf(stderr, "sched profile (MINFER_PROFILE=1, per op, backend synchronized after each node):\n");
        for (int o = 0; o < MI_OP_COUNT; o++)
            if (s->prof_n[o])
                fprintf(stderr, "  %-10s %8ld nodes %9.3f ms %5.1f%%  %7.1f us/node\n", mi_op_name((mi_op)o), s->prof_n[o],
                        1e3 * s->prof_s[o], tot > 0 ? 100.0 * s->prof_s[o] / tot : 0.0, 1e6 * s->prof_s[o] / (double)s->prof_n[o]);
        if (s->n_prof_shape)
            fprintf(stderr, "sched profile by weight shape (MINFER_PROFILE=2; weight bytes / time, launch + sync included):\n");
        for (int i = 0; i < s->n_prof_shape; i++) {
            const double t = s->prof_shape[i].s, c = (double)s->prof_shape[i].cnt;
            fprintf(stderr, "  %-11s %-5s K %6lld M %6lld N %5lld %6ld nodes %9.3f ms %5.1f%% %8.1f us/node %7.1f GB/s\n",
                    mi_op_name((mi_op)s->prof_shape[i].op), mi_type_name((mi_type)s->prof_shape[i].type),
                    (long long)s->prof_shape[i].k, (long long)s->prof_shape[i].m, (long long)s->prof_shape[i].n,
                    s->prof_shape[i].cnt, 1e3 * t, tot > 0 ? 100.0 * t / tot : 0.0, 1e6 * t / c,
                    t > 0 ? (double)s->prof_shape[i].bytes * c / t / 1e9 : 0.0);
        }
    }
    for (int i = 0; i < s->n; i++)
        if (s->buf[i]) s->be[i]->iface->buffer_free(s->be[i], s->buf[i]);
    free(s->rec_off);
    free(s->rec_reuse);
    free(s);
}

int sched_n_backends(const mi_sched *s) { return s->n; }
mi_backend *sched_backend(const mi_sched *s, int i) { return (i >= 0 && i < s->n) ? s->be[i] : NULL; }
const mi_sched_stats *sched_stats(const mi_sched *s) { return &s->stats; }

mi_status sched_check_fit(mi_backend *be, size_t need, const char *what, const char *hint) {
    if (!be->iface->memory) return MI_OK;
    if (mi_setting_on("MINFER_NO_MEMCHECK")) return MI_OK;
    size_t avail = 0, total = 0;
    if (be->iface->memory(be, &avail, &total) != MI_OK) {
        mi_err_clear();   /* unknown: the allocation itself will say if it fails */
        return MI_OK;
    }
    if (need <= avail) return MI_OK;
    char sn[32], sa[32], st[32];
    mi_fmt_bytes(sn, sizeof sn, (double)need);
    mi_fmt_bytes(sa, sizeof sa, (double)avail);
    mi_fmt_bytes(st, sizeof st, (double)total);
    return mi_err(MI_ERR_NOMEM, "%s needs %s of %s memory, but only %s of %s is available%s%s", what, sn,
                  be->host_memory ? "host" : be->iface->name(be), sa, st, hint ? "; " : "", hint ? hint : "");
}

/* A leaf without an owner-set backend lives in host memory: the CPU (last) backend. */
static int backend_of(const mi_sched *s, const mi_tensor *t) { return t->backend >= 0 ? t->backend : s->n - 1; }

static const char *be_name(const mi_sched *s, int b) {
    return (b >= 0 && b < s->n) ? s->be[b]->iface->name(s->be[b]) : "?";
}

static bool in_graph(const mi_graph *g, const mi_tensor *t) {
    return t->op != MI_OP_NONE && t->id >= 0 && t->id < g->n_nodes && g->nodes[t->id] == t;
}

/* ---------------- assignment, splits, copies ---------------- */

/* KV_STORE and KV_SCATTER write in place into the cache (src1) and alias it */
static bool writes_cache(const mi_tensor *t) { return t->op == MI_OP_KV_STORE || t->op == MI_OP_KV_SCATTER; }

static mi_status assign_node(mi_sched *s, mi_tensor *t) {
    if (writes_cache(t)) {
        /* writes in place into the cache: must run where the cache lives */
        const mi_tensor *cache = t->src[1];
        int b = backend_of(s, cache);
        if (b >= s->n)
            return mi_err(MI_ERR_INVALID, "%s %s: cache %s on backend %d of %d", mi_op_name(t->op), t->name, cache->name, b,
                          s->n);
        if (!s->be[b]->iface->supports(s->be[b], t))
            return mi_err(MI_ERR_UNSUPPORTED, "%s %s: cache %s lives on %s, which cannot run it", mi_op_name(t->op),
                          t->name, cache->name, be_name(s, b));
        t->backend = b;
        t->data = cache->data;
        t->flags |= MI_T_ALIAS;
        return MI_OK;
    }
    for (int b = 0; b < s->n; b++)
        if (s->be[b]->iface->supports(s->be[b], t)) {
            t->backend = b;
            return MI_OK;
        }
    return mi_err(MI_ERR_UNSUPPORTED, "no backend supports node %s (%s %s [%lld, %lld])", t->name, mi_op_name(t->op),
                  mi_type_name(t->type), (long long)t->ne[0], (long long)t->ne[1]);
}

typedef struct {
    mi_tensor *src, *copy;
} copy_ent;

mi_status sched_assign(mi_sched *s, mi_graph *g) {
    mi_graph_sched_state *gs = graph_sched_state(g);
    if (gs->sched == s) return MI_OK;
    if (gs->sched) return mi_err(MI_ERR_INVALID, "sched_assign: graph already assigned by another scheduler");
    int n0 = g->n_nodes;
    for (int i = 0; i < n0; i++) {
        mi_tensor *t = g->nodes[i];
        t->id = i;
        if (t->op == MI_OP_NONE) continue;
        for (int j = 0; j < MI_MAX_SRC; j++) {
            const mi_tensor *sr = t->src[j];
            if (!sr || sr->op != MI_OP_NONE) continue;
            if (backend_of(s, sr) >= s->n)
                return mi_err(MI_ERR_INVALID, "leaf %s: backend %d outside the scheduler's %d", sr->name, sr->backend, s->n);
            if (!sr->data) return mi_err(MI_ERR_INVALID, "leaf %s (input of %s) has no data", sr->name, t->name);
        }
        mi_status st = assign_node(s, t);
        if (st != MI_OK) return st;
    }
    /* copies: per split, one COPY per (source on another backend) */
    mi_tensor **old = malloc((size_t)n0 * sizeof *old);
    copy_ent *ce = malloc((size_t)(n0 * MI_MAX_SRC + 1) * sizeof *ce);
    int *ce_split = malloc((size_t)(n0 * MI_MAX_SRC + 1) * sizeof *ce_split);
    if (!old || !ce || !ce_split) {
        free(old);
        free(ce);
        free(ce_split);
        return mi_err(MI_ERR_NOMEM, "sched_assign: out of memory");
    }
    memcpy(old, g->nodes, (size_t)n0 * sizeof *old);
    int n_ce = 0, split = -1, split_first_ce = 0, prev_be = INT_MIN;
    mi_status st = MI_OK;
    for (int i = 0; i < n0 && st == MI_OK; i++) {
        mi_tensor *t = old[i];
        if (t->op == MI_OP_NONE) continue;
        if (t->backend != prev_be) {
            split++;
            split_first_ce = n_ce;
            prev_be = t->backend;
        }
        for (int j = 0; j < MI_MAX_SRC; j++) {
            mi_tensor *sr = t->src[j];
            if (!sr || backend_of(s, sr) == t->backend) continue;
            if (writes_cache(t) && j == 1) continue;   /* the cache itself, same backend */
            mi_tensor *cp = NULL;
            for (int k = split_first_ce; k < n_ce; k++)
                if (ce[k].src == sr) cp = ce[k].copy;
            if (!cp) {
                char nm[MI_NAME_MAX];
                snprintf(nm, sizeof nm, "copy:%.40s>%s", sr->name, be_name(s, t->backend));
                cp = graph_new_node(g, MI_OP_COPY, sr->type, MI_MAX_DIMS, sr->ne, nm);
                if (!cp) {
                    st = mi_err_ctx(MI_ERR_NOMEM, "sched_assign: copy of %s", sr->name);
                    break;
                }
                cp->src[0] = sr;
                cp->backend = t->backend;
                ce[n_ce].src = sr;
                ce[n_ce].copy = cp;
                ce_split[n_ce] = split;
                n_ce++;
            }
            t->src[j] = cp;
        }
    }
    if (st == MI_OK) {
        /* new order: each split's copies, then its nodes */
        int w = 0, k = 0;
        split = -1;
        prev_be = INT_MIN;
        for (int i = 0; i < n0; i++) {
            mi_tensor *t = old[i];
            if (t->op != MI_OP_NONE && t->backend != prev_be) {
                split++;
                prev_be = t->backend;
                while (k < n_ce && ce_split[k] == split) g->nodes[w++] = ce[k++].copy;
            }
            g->nodes[w++] = t;
        }
        MI_ASSERT(w == n0 + n_ce && k == n_ce);
        for (int i = 0; i < g->n_nodes; i++) g->nodes[i]->id = i;
        gs->sched = s;
        gs->alloc_epoch = 0;
        s->stats.n_copies = n_ce;
    }
    free(old);
    free(ce);
    free(ce_split);
    graph_touch(g);   /* backends and boundary copies changed */
    return st;
}

/* ---------------- allocation ---------------- */

typedef struct {
    size_t off, size;
} fblock;

typedef struct {
    fblock *b;
    int n, cap;
    size_t top;          /* high-water mark */
    size_t naive;
} fl_t;

static size_t align_up(size_t x) { return (x + SCHED_ALIGN - 1) / SCHED_ALIGN * SCHED_ALIGN; }

/* best fit among the free blocks; else from the top (extending a free block that ends there) */
static size_t fl_alloc(fl_t *f, size_t size) {
    int best = -1;
    for (int i = 0; i < f->n; i++)
        if (f->b[i].size >= size && (best < 0 || f->b[i].size < f->b[best].size)) best = i;
    if (best >= 0) {
        size_t off = f->b[best].off;
        f->b[best].off += size;
        f->b[best].size -= size;
        if (f->b[best].size == 0) {
            memmove(&f->b[best], &f->b[best + 1], (size_t)(f->n - best - 1) * sizeof *f->b);
            f->n--;
        }
        return off;
    }
    if (f->n > 0 && f->b[f->n - 1].off + f->b[f->n - 1].size == f->top) {
        size_t off = f->b[f->n - 1].off;
        f->top = off + size;
        f->n--;
        return off;
    }
    size_t off = f->top;
    f->top += size;
    return off;
}

static bool fl_free(fl_t *f, size_t off, size_t size) {
    int i = 0;
    while (i < f->n && f->b[i].off < off) i++;
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 64;
        fblock *nb = realloc(f->b, (size_t)cap * sizeof *nb);
        if (!nb) return false;
        f->b = nb;
        f->cap = cap;
    }
    memmove(&f->b[i + 1], &f->b[i], (size_t)(f->n - i) * sizeof *f->b);
    f->b[i] = (fblock){off, size};
    f->n++;
    if (i + 1 < f->n && f->b[i].off + f->b[i].size == f->b[i + 1].off) {   /* merge right */
        f->b[i].size += f->b[i + 1].size;
        memmove(&f->b[i + 1], &f->b[i + 2], (size_t)(f->n - i - 2) * sizeof *f->b);
        f->n--;
    }
    if (i > 0 && f->b[i - 1].off + f->b[i - 1].size == f->b[i].off) {       /* merge left */
        f->b[i - 1].size += f->b[i].size;
        memmove(&f->b[i], &f->b[i + 1], (size_t)(f->n - i - 1) * sizeof *f->b);
        f->n--;
    }
    return true;
}

static bool needs_memory(const mi_tensor *t) {
    return t->op != MI_OP_NONE && !(t->flags & (MI_T_PERSIST | MI_T_ALIAS));
}

mi_status sched_alloc(mi_sched *s, mi_graph *g) {
    MI_TRY(sched_assign(s, g));
    int n = g->n_nodes;
    int *last = malloc((size_t)(n + 1) * sizeof *last);
    if (n + 1 > s->rec_cap) {
        free(s->rec_off);
        free(s->rec_reuse);
        s->rec_off = malloc((size_t)(n + 1) * sizeof *s->rec_off);
        s->rec_reuse = malloc((size_t)(n + 1) * sizeof *s->rec_reuse);
        s->rec_cap = n + 1;
    }
    fl_t fl[SCHED_MAX_BE];
    memset(fl, 0, sizeof fl);
    if (!last || !s->rec_off || !s->rec_reuse) {
        free(last);
        s->rec_cap = 0;
        return mi_err(MI_ERR_NOMEM, "sched_alloc: out of memory");
    }
    for (int i = 0; i < n; i++) last[i] = -1;
    for (int i = 0; i < n; i++) {
        const mi_tensor *t = g->nodes[i];
        for (int j = 0; j < MI_MAX_SRC; j++)
            if (t->src[j] && in_graph(g, t->src[j])) last[t->src[j]->id] = i;
    }
    for (int i = 0; i < n; i++) {
        const mi_tensor *t = g->nodes[i];
        if ((t->flags & MI_T_OUTPUT) || t == g->output) last[i] = INT_MAX;
    }
    /* freed-by record (node, offset) in release order, to name reuse in the dump */
    mi_status st = MI_OK;
    int *freed_by = malloc((size_t)(n + 1) * sizeof *freed_by);   /* node freed at step i */
    size_t *freed_off = malloc((size_t)(n + 1) * sizeof *freed_off);
    int n_freed = 0;
    if (!freed_by || !freed_off) st = mi_err(MI_ERR_NOMEM, "sched_alloc: out of memory");
    for (int i = 0; i < n && st == MI_OK; i++) {
        mi_tensor *t = g->nodes[i];
        s->rec_off[i] = SIZE_MAX;
        s->rec_reuse[i] = -1;
        if (!needs_memory(t)) continue;
        int b = t->backend;
        if (b < 0 || b >= s->n) {
            st = mi_err(MI_ERR_INTERNAL, "sched_alloc: node %s has no backend", t->name);
            break;
        }
        size_t sz = align_up(mi_nbytes(t));
        fl[b].naive += sz;
        size_t off = fl_alloc(&fl[b], sz);
        s->rec_off[i] = off;
        for (int k = n_freed - 1; k >= 0; k--)
            if (g->nodes[freed_by[k]]->backend == b && freed_off[k] == off) {
                s->rec_reuse[i] = freed_by[k];
                break;
            }
        if (s->no_reuse) continue;
        /* release sources whose last consumer is this node, then the node itself if unused */
        for (int j = 0; j <= MI_MAX_SRC; j++) {
            mi_tensor *r = j < MI_MAX_SRC ? t->src[j] : t;
            if (!r || !in_graph(g, r) || !needs_memory(r)) continue;
            int id = r->id;
            bool due = j < MI_MAX_SRC ? last[id] == i : last[id] == -1;
            if (!due) continue;
            bool dup = false;
            for (int q = 0; q < j; q++) dup |= t->src[q] == r;
            if (dup) continue;
            if (!fl_free(&fl[r->backend], s->rec_off[id], align_up(mi_nbytes(r)))) {
                st = mi_err(MI_ERR_NOMEM, "sched_alloc: out of memory");
                break;
            }
            freed_by[n_freed] = id;
            freed_off[n_freed] = s->rec_off[id];
            n_freed++;
        }
    }
    /* grow buffers that are too small */
    for (int b = 0; b < s->n && st == MI_OK; b++) {
        size_t need = fl[b].top;
        s->stats.alloc_bytes[b] = need;
        s->stats.naive_bytes[b] = fl[b].naive;
        if (need == 0 || (s->buf[b] && s->buf[b]->size >= need)) continue;
        mi_backend *be = s->be[b];
        if (s->buf[b]) be->iface->buffer_free(be, s->buf[b]);
        s->buf[b] = NULL;
        s->epoch++;
        st = sched_check_fit(be, need, "the graph's workspace",
                             "use fewer tokens per graph (a shorter prompt; n_ubatch or MINFER_UBATCH)");
        if (st != MI_OK) break;
        st = be->iface->buffer_alloc(be, need, &s->buf[b]);
        if (st != MI_OK) st = mi_err_ctx(st, "sched_alloc: %zu bytes on %s", need, be_name(s, b));
    }
    if (st == MI_OK) {
        for (int i = 0; i < n; i++) {
            mi_tensor *t = g->nodes[i];
            if (needs_memory(t))
                t->data = (char *)s->buf[t->backend]->base + s->rec_off[i];
            else if (writes_cache(t))
                t->data = t->src[1]->data;
        }
        graph_sched_state(g)->alloc_epoch = s->epoch;
        s->rec_graph = g;
        graph_touch(g);   /* new data pointers */
    }
    for (int b = 0; b < SCHED_MAX_BE; b++) free(fl[b].b);
    free(last);
    free(freed_by);
    free(freed_off);
    /* MINFER_DUMP_GRAPH=1 is served by the caller (the session dumps after compute);
     * =2 also prints here, at every allocation */
    if (st == MI_OK && s->dump >= 2) sched_dump(s, g, stderr);
    return st;
}

/* ---------------- execution ---------------- */

mi_status sched_copy_across(mi_backend *dst_be, void *dst, mi_backend *src_be, const void *src, size_t n) {
    if (n == 0) return MI_OK;
    if (dst_be == src_be) return dst_be->iface->copy(dst_be, dst, src, n);
    if (dst_be->host_memory) return src_be->iface->read(src_be, dst, src, n);
    if (src_be->host_memory) return dst_be->iface->write(dst_be, dst, src, n);
    /* two device backends: bounce through host memory; the write may be asynchronous,
     * so the bounce buffer lives until the destination has consumed it */
    void *tmp = malloc(n);
    if (!tmp) return mi_err(MI_ERR_NOMEM, "copy across: %zu byte bounce buffer", n);
    mi_status st = src_be->iface->read(src_be, tmp, src, n);
    if (st == MI_OK) st = dst_be->iface->write(dst_be, dst, tmp, n);
    if (st == MI_OK) st = dst_be->iface->synchronize(dst_be);
    free(tmp);
    return st;
}

mi_status sched_compute(mi_sched *s, mi_graph *g) {
    double t = mi_now_s(), t1;
    mi_graph_sched_state *gs = graph_sched_state(g);
    if (gs->sched != s) MI_TRY(sched_assign(s, g));
    if (gs->alloc_epoch != s->epoch) MI_TRY(sched_alloc(s, g));
    s->stats.n_splits = 0;
    s->stats.bytes_copied = 0;
    s->stats.s_split_begin = s->stats.s_nodes = s->stats.s_split_end = 0;
    s->stats.s_prepare = mi_now_s() - t;
    int n_copies = 0;
    int i = 0;
    while (i < g->n_nodes) {
        mi_split sp = {g->nodes[i]->backend, i, 0};
        while (i + sp.n < g->n_nodes && g->nodes[i + sp.n]->backend == sp.backend) sp.n++;
        i += sp.n;
        s->stats.n_splits++;
        if (sp.backend < 0 || sp.backend >= s->n) {
            if (g->nodes[sp.first]->op == MI_OP_NONE) continue;
            return mi_err(MI_ERR_INTERNAL, "sched_compute: node %s has no backend", g->nodes[sp.first]->name);
        }
        mi_backend *be = s->be[sp.backend];
        if (be->host_memory) {
            /* host memory of this split may be reused: finish device reads out of it first */
            for (int b = 0; b < s->n; b++)
                if (s->pending[b]) {
                    MI_TRY(s->be[b]->iface->synchronize(s->be[b]));
                    s->pending[b] = false;
                }
        }
        t = mi_now_s();
        if (be->iface->split_begin) {
            mi_status st = be->iface->split_begin(be, g, &sp);
            if (st != MI_OK) return mi_err_ctx(st, "split at node %d on %s", sp.first, be_name(s, sp.backend));
        }
        s->stats.s_split_begin += (t1 = mi_now_s()) - t;
        t = t1;
        for (int k = sp.first; k < sp.first + sp.n; k++) {
            mi_tensor *t = g->nodes[k];
            if (t->op == MI_OP_NONE || (t->op == MI_OP_INPUT && (t->flags & MI_T_FED))) continue;
            mi_status st;
            double t0 = s->profile ? mi_now_s() : 0.0;
            if (t->op == MI_OP_COPY && t->src[0] && backend_of(s, t->src[0]) != t->backend) {
                mi_backend *sb = s->be[backend_of(s, t->src[0])];
                size_t nb = mi_nbytes(t);
                st = sched_copy_across(be, t->data, sb, t->src[0]->data, nb);
                if (!be->host_memory && sb->host_memory) s->pending[sp.backend] = true;
                s->stats.bytes_copied += nb;
                n_copies++;
            } else {
                st = be->iface->execute_node(be, t);
            }
            if (st == MI_OK && s->profile) {
                st = be->iface->synchronize(be);
                const double dt = mi_now_s() - t0;
                s->prof_s[t->op] += dt;
                s->prof_n[t->op]++;
                const mi_tensor *w = t->src[0];
                const bool ffn = t->op == MI_OP_FFN_SWIGLU;
                if (s->profile_level >= 2 && w && (w->flags & MI_T_WEIGHT) && (t->op == MI_OP_MATMUL || ffn)) {
                    const mi_tensor *x = ffn ? t->src[2] : t->src[1];
                    const int64_t n = x ? mi_nelements(x) / x->ne[0] : 0;
                    int i = 0;
                    for (; i < s->n_prof_shape; i++)
                        if (s->prof_shape[i].op == (int)t->op && s->prof_shape[i].type == (int)w->type &&
                            s->prof_shape[i].k == w->ne[0] && s->prof_shape[i].m == w->ne[1] && s->prof_shape[i].n == n)
                            break;
                    if (i == s->n_prof_shape && i < (int)(sizeof s->prof_shape / sizeof s->prof_shape[0])) {
                        s->n_prof_shape++;
                        s->prof_shape[i].op = (int)t->op;
                        s->prof_shape[i].type = (int)w->type;
                        s->prof_shape[i].k = w->ne[0];
                        s->prof_shape[i].m = w->ne[1];
                        s->prof_shape[i].n = n;
                        s->prof_shape[i].bytes = mi_nbytes(w) + (ffn && t->src[1] ? mi_nbytes(t->src[1]) : 0);
                        s->prof_shape[i].s = 0;
                        s->prof_shape[i].cnt = 0;
                    }
                    if (i < s->n_prof_shape) {
                        s->prof_shape[i].s += dt;
                        s->prof_shape[i].cnt++;
                    }
                }
            }
            if (st != MI_OK)
                return mi_err_ctx(st, "node #%d %s (%s) on %s", k, t->name, mi_op_name(t->op), be_name(s, sp.backend));
        }
        s->stats.s_nodes += (t1 = mi_now_s()) - t;
        t = t1;
        if (be->iface->split_end) {
            mi_status st = be->iface->split_end(be, g, &sp);
            if (st != MI_OK) return mi_err_ctx(st, "end of split at node %d on %s", sp.first, be_name(s, sp.backend));
        }
        s->stats.s_split_end += mi_now_s() - t;
    }
    s->stats.n_copies = n_copies;
    return MI_OK;
}

/* bytes offset .. + n of t: its backend and their address there (who: the caller, for the message) */
static mi_status read_span(const mi_sched *s, const mi_tensor *t, size_t offset, size_t n, const char *who,
                           mi_backend **be, const void **src) {
    if (!t || !t->data) return mi_err(MI_ERR_INVALID, "%s: tensor %s has no data", who, t ? t->name : "(null)");
    const size_t nb = mi_nbytes(t);
    if (offset > nb || n > nb - offset)
        return mi_err(MI_ERR_INVALID, "%s: bytes %zu..%zu outside %s (%zu bytes)", who, offset, offset + n, t->name, nb);
    const int b = backend_of(s, t);
    if (b >= s->n) return mi_err(MI_ERR_INVALID, "%s: %s on backend %d of %d", who, t->name, b, s->n);
    *be = s->be[b];
    *src = (const char *)t->data + offset;
    return MI_OK;
}

mi_status sched_read(mi_sched *s, const mi_tensor *t, void *host_dst, size_t offset, size_t n) {
    mi_backend *be;
    const void *src;
    MI_TRY(read_span(s, t, offset, n, "sched_read", &be, &src));
    MI_TRY(be->iface->synchronize(be));
    return be->iface->read(be, host_dst, src, n);
}

bool sched_reads_ahead(const mi_sched *s, const mi_tensor *t) {
    const int b = t ? backend_of(s, t) : s->n;
    return b < s->n && s->be[b]->iface->read_begin && s->be[b]->iface->read_wait;
}

mi_status sched_read_begin(mi_sched *s, const mi_tensor *t, void *host_dst, size_t offset, size_t n) {
    if (!sched_reads_ahead(s, t)) return sched_read(s, t, host_dst, offset, n);
    mi_backend *be;
    const void *src;
    MI_TRY(read_span(s, t, offset, n, "sched_read_begin", &be, &src));
    return be->iface->read_begin(be, host_dst, src, n);
}

mi_status sched_read_wait(mi_sched *s, const mi_tensor *t) {
    return sched_reads_ahead(s, t) ? s->be[backend_of(s, t)]->iface->read_wait(s->be[backend_of(s, t)]) : MI_OK;
}

mi_status sched_compute_fed(mi_sched *s, mi_graph *g, mi_tensor *in, const mi_tensor *src, size_t n) {
    if (!in || in->op != MI_OP_INPUT || !in->data || !src || !src->data || mi_nbytes(in) != n || mi_nbytes(src) < n ||
        backend_of(s, in) >= s->n || backend_of(s, src) >= s->n)
        return mi_err(MI_ERR_INVALID, "sched_compute_fed: %s <- %s, %zu bytes", in ? in->name : "(null)",
                      src ? src->name : "(null)", n);
    const char *pi = in->data, *ps = src->data;
    if (pi != ps && pi < ps + n && ps < pi + n)
        return mi_err(MI_ERR_UNSUPPORTED, "sched_compute_fed: %s and %s overlap", in->name, src->name);
    if (pi != ps)   /* the same bytes (the allocator's reuse): no copy */
        MI_TRY(sched_copy_across(s->be[backend_of(s, in)], in->data, s->be[backend_of(s, src)], src->data, n));
    in->flags |= MI_T_FED;
    const mi_status st = sched_compute(s, g);
    in->flags &= ~MI_T_FED;
    return st;
}

void sched_dump(const mi_sched *s, const mi_graph *g, void *file) {
    FILE *f = file ? (FILE *)file : stderr;
    bool rec = s->rec_graph == g;
    int split = -1, prev = INT_MIN;
    fprintf(f, "sched: %d nodes, %d backends\n", g->n_nodes, s->n);
    for (int i = 0; i < g->n_nodes; i++) {
        const mi_tensor *t = g->nodes[i];
        if (t->backend != prev) {
            int cnt = 0;
            while (i + cnt < g->n_nodes && g->nodes[i + cnt]->backend == t->backend) cnt++;
            fprintf(f, "-- split %d: %s, nodes %d..%d\n", ++split, be_name(s, t->backend), i, i + cnt - 1);
            prev = t->backend;
        }
        fprintf(f, "  #%-4d %-10s %-5s [%lld, %lld] %-28s", i, mi_op_name(t->op), mi_type_name(t->type),
                (long long)t->ne[0], (long long)t->ne[1], t->name);
        if (t->flags & MI_T_ALIAS)
            fprintf(f, " alias of %s", t->src[1] ? t->src[1]->name : "?");
        else if (rec && s->rec_off[i] != SIZE_MAX)
            fprintf(f, " @%-10zu %8zu B", s->rec_off[i], mi_nbytes(t));
        if (rec && s->rec_reuse[i] >= 0) fprintf(f, " reuses #%d", s->rec_reuse[i]);
        if (t->op == MI_OP_COPY && t->src[0])
            fprintf(f, " copy from %s (%s)", be_name(s, backend_of(s, t->src[0])), t->src[0]->name);
        fputc('\n', f);
    }
    for (int b = 0; b < s->n; b++)
        fprintf(f, "backend %d %s: %zu B with reuse, %zu B without (%.1f%%)\n", b, be_name(s, b),
                s->stats.alloc_bytes[b], s->stats.naive_bytes[b],
                s->stats.naive_bytes[b] ? 100.0 * (double)s->stats.alloc_bytes[b] / (double)s->stats.naive_bytes[b] : 0.0);
    fprintf(f, "splits %d, copies %d\n", split + 1, s->stats.n_copies);
}

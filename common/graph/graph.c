/* Compute graph: tensor arena, node builders with shape checks, names and dump.
 * Builders reject impossible shapes here (NULL + mi_err message) so that no backend
 * ever sees one at execution time. Arena chunks never move: node pointers are stable. */
#include "graph.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct arena_chunk {
    struct arena_chunk *next;
    int cap, n;
    mi_tensor t[];
} arena_chunk;

/* The public mi_graph is the first member, so a graph pointer is also a graph_priv one. */
typedef struct {
    mi_graph g;
    arena_chunk *extra;          /* overflow chunks once the first block is full */
    mi_graph_sched_state sched;
    uint64_t version;            /* graph_version: unique in the process, moved by graph_touch */
} graph_priv;

static atomic_uint_fast64_t g_versions;

static const char *const g_op_names[MI_OP_COUNT] = {
    [MI_OP_NONE] = "none",         [MI_OP_INPUT] = "input",       [MI_OP_GET_ROWS] = "get_rows",
    [MI_OP_MATMUL] = "matmul",     [MI_OP_ADD] = "add",           [MI_OP_MUL] = "mul",
    [MI_OP_RMS_NORM] = "rms_norm", [MI_OP_ROPE] = "rope",         [MI_OP_SILU] = "silu",
    [MI_OP_SWIGLU] = "swiglu",     [MI_OP_KV_STORE] = "kv_store", [MI_OP_ATTN] = "attn",
    [MI_OP_SLICE_ROWS] = "slice_rows", [MI_OP_COPY] = "copy",    [MI_OP_FFN_SWIGLU] = "ffn_swiglu",
    [MI_OP_NORM_MATMUL] = "norm_matmul", [MI_OP_NORM_FFN_SWIGLU] = "norm_ffn_swiglu", [MI_OP_MATMUL_ADD] = "matmul_add",
    [MI_OP_ARGMAX] = "argmax", [MI_OP_TOPK] = "topk",     [MI_OP_KV_SCATTER] = "kv_scatter", [MI_OP_ATTN_PAGED] = "attn_paged",
};

const char *mi_op_name(mi_op op) {
    if ((int)op < 0 || op >= MI_OP_COUNT || !g_op_names[op]) return "?";
    return g_op_names[op];
}

size_t mi_nbytes(const mi_tensor *t) {
    size_t row = mi_row_size(t->type, t->ne[0]);
    return row * (size_t)t->ne[1] * (size_t)t->ne[2] * (size_t)t->ne[3];
}

mi_graph_sched_state *graph_sched_state(mi_graph *g) { return &((graph_priv *)g)->sched; }

uint64_t graph_version(const mi_graph *g) { return ((const graph_priv *)g)->version; }
void graph_touch(mi_graph *g) { ((graph_priv *)g)->version = atomic_fetch_add(&g_versions, 1) + 1; }

mi_graph *graph_new(int max_nodes) {
    if (max_nodes < 16) max_nodes = 16;
    graph_priv *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    mi_graph *g = &p->g;
    g->cap_nodes = max_nodes;
    g->nodes = calloc((size_t)max_nodes, sizeof *g->nodes);
    /* room for the scheduler's boundary copies without a second chunk in the usual case */
    g->cap_arena = max_nodes + max_nodes / 2 + 16;
    g->arena = calloc((size_t)g->cap_arena, sizeof *g->arena);
    if (!g->nodes || !g->arena) {
        free(g->nodes);
        free(g->arena);
        free(p);
        return NULL;
    }
    graph_touch(g);
    return g;
}

void graph_free(mi_graph *g) {
    if (!g) return;
    graph_priv *p = (graph_priv *)g;
    for (arena_chunk *c = p->extra; c;) {
        arena_chunk *n = c->next;
        free(c);
        c = n;
    }
    free(g->nodes);
    free(g->arena);
    free(p);
}

static mi_tensor *arena_take(mi_graph *g) {
    if (g->n_arena < g->cap_arena) return &g->arena[g->n_arena++];
    graph_priv *p = (graph_priv *)g;
    if (!p->extra || p->extra->n == p->extra->cap) {
        int cap = g->cap_arena;
        arena_chunk *c = calloc(1, sizeof *c + (size_t)cap * sizeof(mi_tensor));
        if (!c) return NULL;
        c->cap = cap;
        c->next = p->extra;
        p->extra = c;
    }
    return &p->extra->t[p->extra->n++];
}

static void tensor_set_strides(mi_tensor *t) {
    const mi_type_traits *tr = mi_type_get(t->type);
    t->nb[0] = tr ? tr->type_size : 0;
    t->nb[1] = mi_row_size(t->type, t->ne[0]);
    t->nb[2] = t->nb[1] * (size_t)t->ne[1];
    t->nb[3] = t->nb[2] * (size_t)t->ne[2];
}

/* Names are written without printf: a decode step builds a few hundred nodes, and snprintf
 * of their names would be most of the host time of that build (results/notes/PHASE8A.md). */
static char *name_put(char *d, const char *end, const char *s) {
    while (*s && d < end) *d++ = *s++;
    return d;
}
static char *name_put_int(char *d, const char *end, long long v) {
    char buf[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do buf[n++] = (char)('0' + u % 10); while ((u /= 10) && n < 23);
    if (v < 0 && d < end) *d++ = '-';
    while (n > 0 && d < end) *d++ = buf[--n];
    return d;
}

void mi_tensor_set_name(mi_tensor *t, const char *name) {
    char *end = name_put(t->name, t->name + sizeof t->name - 1, name ? name : "");
    *end = 0;
}

void mi_tensor_set_name_layer(mi_tensor *t, int layer, const char *what) {
    char *d = t->name, *end = t->name + sizeof t->name - 1;
    d = name_put(d, end, "blk.");
    d = name_put_int(d, end, layer);
    d = name_put(d, end, ".");
    *name_put(d, end, what) = 0;
}

void tensor_init(mi_tensor *t, const char *name, mi_type type, int n_dims, const int64_t *ne) {
    memset(t, 0, sizeof *t);
    t->type = type;
    for (int i = 0; i < MI_MAX_DIMS; i++) t->ne[i] = (i < n_dims && ne) ? ne[i] : 1;
    tensor_set_strides(t);
    t->op = MI_OP_NONE;
    t->backend = -1;
    t->id = -1;
    mi_tensor_set_name(t, name);
}

mi_tensor *graph_new_node(mi_graph *g, mi_op op, mi_type type, int n_dims, const int64_t *ne, const char *name) {
    if (!g) {
        mi_err(MI_ERR_INVALID, "graph_new_node: NULL graph");
        return NULL;
    }
    if (n_dims < 1 || n_dims > MI_MAX_DIMS) {
        mi_err(MI_ERR_INVALID, "%s: %d dims (1..%d allowed)", mi_op_name(op), n_dims, MI_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < n_dims; i++) {
        if (ne[i] <= 0) {
            mi_err(MI_ERR_INVALID, "%s: dim %d is %lld (must be > 0)", mi_op_name(op), i, (long long)ne[i]);
            return NULL;
        }
    }
    if (!mi_type_get(type) || mi_row_size(type, ne[0]) == 0) {
        mi_err(MI_ERR_INVALID, "%s: type %s with row length %lld", mi_op_name(op), mi_type_name(type),
               (long long)ne[0]);
        return NULL;
    }
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes * 2;
        mi_tensor **nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
        if (!nn) {
            mi_err(MI_ERR_NOMEM, "graph: cannot grow node list to %d", cap);
            return NULL;
        }
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    mi_tensor *t = arena_take(g);
    if (!t) {
        mi_err(MI_ERR_NOMEM, "graph: arena full");
        return NULL;
    }
    tensor_init(t, NULL, type, n_dims, ne);
    t->op = op;
    t->id = g->n_nodes;
    if (name && name[0]) {
        mi_tensor_set_name(t, name);
    } else {   /* "<op>-<id>" */
        char *end = t->name + sizeof t->name - 1, *d = name_put(t->name, end, mi_op_name(op));
        d = name_put(d, end, "-");
        *name_put_int(d, end, t->id) = 0;
    }
    g->nodes[g->n_nodes++] = t;
    return t;
}

/* ---- shape checks ---- */

#define BAD(...) do { mi_err(MI_ERR_INVALID, __VA_ARGS__); return NULL; } while (0)

static bool is_2d(const mi_tensor *t) { return t->ne[2] == 1 && t->ne[3] == 1; }

static bool check_f32_2d(const char *op, const char *what, const mi_tensor *t) {
    if (!t) {
        mi_err(MI_ERR_INVALID, "%s: %s is NULL", op, what);
        return false;
    }
    if (t->type != MI_TYPE_F32) {
        mi_err(MI_ERR_INVALID, "%s: %s (%s) must be F32, is %s", op, what, t->name, mi_type_name(t->type));
        return false;
    }
    if (!is_2d(t)) {
        mi_err(MI_ERR_INVALID, "%s: %s (%s) must be 2-D", op, what, t->name);
        return false;
    }
    return true;
}

static mi_tensor *node2(mi_graph *g, mi_op op, mi_type type, int64_t ne0, int64_t ne1) {
    int64_t ne[2] = {ne0, ne1};
    return graph_new_node(g, op, type, 2, ne, NULL);
}

mi_tensor *graph_input_of(const mi_graph *g, const void *host_src) {
    for (int i = 0; g && i < g->n_nodes; i++)
        if (g->nodes[i]->op == MI_OP_INPUT && g->nodes[i]->host_src == host_src) return g->nodes[i];
    return NULL;
}

mi_tensor *graph_input(mi_graph *g, const char *name, mi_type type, int64_t ne0, int64_t ne1, const void *host_src) {
    int64_t ne[2] = {ne0, ne1};
    mi_tensor *t = graph_new_node(g, MI_OP_INPUT, type, 2, ne, name);
    if (!t) return NULL;
    t->flags |= MI_T_INPUT;
    t->host_src = host_src;
    return t;
}

mi_tensor *graph_get_rows(mi_graph *g, mi_tensor *table, mi_tensor *ids) {
    if (!table || !ids) BAD("get_rows: NULL operand");
    if (!is_2d(table)) BAD("get_rows: table %s must be 2-D", table->name);
    const mi_type_traits *tr = mi_type_get(table->type);
    if (!tr || !tr->supported) BAD("get_rows: table %s has unsupported type %s", table->name, mi_type_name(table->type));
    if (ids->type != MI_TYPE_I32) BAD("get_rows: ids %s must be I32, is %s", ids->name, mi_type_name(ids->type));
    if (ids->ne[1] != 1 || !is_2d(ids)) BAD("get_rows: ids %s must be 1-D", ids->name);
    mi_tensor *t = node2(g, MI_OP_GET_ROWS, MI_TYPE_F32, table->ne[0], ids->ne[0]);
    if (!t) return NULL;
    t->src[0] = table;
    t->src[1] = ids;
    return t;
}

/* W [K, M] @ x [K, N] (+ bias [M]) -> [M, N] */
mi_tensor *graph_matmul(mi_graph *g, mi_tensor *w, mi_tensor *x, mi_tensor *bias) {
    if (!w) BAD("matmul: weight is NULL");
    if (!check_f32_2d("matmul", "x", x)) return NULL;
    if (!is_2d(w)) BAD("matmul: weight %s must be 2-D", w->name);
    const mi_type_traits *tr = mi_type_get(w->type);
    if (!tr || !tr->supported) BAD("matmul: weight %s has unsupported type %s", w->name, mi_type_name(w->type));
    if (mi_row_size(w->type, w->ne[0]) == 0)
        BAD("matmul: weight %s row %lld is not a multiple of the %s block %lld", w->name, (long long)w->ne[0],
            tr->name, (long long)tr->blck_size);
    if (x->ne[0] != w->ne[0])
        BAD("matmul: %s [%lld, %lld] @ %s [%lld, %lld]: inner dims differ", w->name, (long long)w->ne[0],
            (long long)w->ne[1], x->name, (long long)x->ne[0], (long long)x->ne[1]);
    if (bias) {
        if (bias->type != MI_TYPE_F32) BAD("matmul: bias %s must be F32", bias->name);
        if (bias->ne[0] != w->ne[1] || mi_nelements(bias) != w->ne[1])
            BAD("matmul: bias %s has %lld elements, weight %s has %lld rows", bias->name,
                (long long)mi_nelements(bias), w->name, (long long)w->ne[1]);
    }
    mi_tensor *t = node2(g, MI_OP_MATMUL, MI_TYPE_F32, w->ne[1], x->ne[1]);
    if (!t) return NULL;
    t->src[0] = w;
    t->src[1] = x;
    t->src[2] = bias;
    return t;
}

static mi_tensor *binary(mi_graph *g, mi_op op, mi_tensor *a, mi_tensor *b) {
    const char *n = mi_op_name(op);
    if (!check_f32_2d(n, "a", a) || !check_f32_2d(n, "b", b)) return NULL;
    if (b->ne[0] != a->ne[0] || (b->ne[1] != a->ne[1] && b->ne[1] != 1))
        BAD("%s: %s [%lld, %lld] and %s [%lld, %lld] do not broadcast", n, a->name, (long long)a->ne[0],
            (long long)a->ne[1], b->name, (long long)b->ne[0], (long long)b->ne[1]);
    mi_tensor *t = node2(g, op, MI_TYPE_F32, a->ne[0], a->ne[1]);
    if (!t) return NULL;
    t->src[0] = a;
    t->src[1] = b;
    return t;
}

mi_tensor *graph_add(mi_graph *g, mi_tensor *a, mi_tensor *b) { return binary(g, MI_OP_ADD, a, b); }
mi_tensor *graph_mul(mi_graph *g, mi_tensor *a, mi_tensor *b) { return binary(g, MI_OP_MUL, a, b); }

mi_tensor *graph_rms_norm(mi_graph *g, mi_tensor *x, mi_tensor *w, int64_t group, float eps) {
    if (!check_f32_2d("rms_norm", "x", x)) return NULL;
    if (!w || w->type != MI_TYPE_F32) BAD("rms_norm: weight must be F32");
    if (group <= 0 || x->ne[0] % group != 0)
        BAD("rms_norm: group %lld does not divide row %lld of %s", (long long)group, (long long)x->ne[0], x->name);
    if (mi_nelements(w) != group)
        BAD("rms_norm: weight %s has %lld elements, group is %lld", w->name, (long long)mi_nelements(w),
            (long long)group);
    if (!(eps >= 0.0f)) BAD("rms_norm: eps %g must be >= 0", (double)eps);
    if (group > INT32_MAX) BAD("rms_norm: group too large");
    mi_tensor *t = node2(g, MI_OP_RMS_NORM, MI_TYPE_F32, x->ne[0], x->ne[1]);
    if (!t) return NULL;
    t->src[0] = x;
    t->src[1] = w;
    t->p[0] = (int32_t)group;
    mi_tensor_set_pf(t, 1, eps);
    return t;
}

mi_tensor *graph_rope(mi_graph *g, mi_tensor *x, mi_tensor *pos, int head_dim, int mode, int n_rot, float freq_base) {
    if (!check_f32_2d("rope", "x", x)) return NULL;
    if (!pos || pos->type != MI_TYPE_I32 || mi_nelements(pos) != x->ne[1])
        BAD("rope: positions must be I32 [%lld]", (long long)x->ne[1]);
    if (head_dim <= 0 || x->ne[0] % head_dim != 0)
        BAD("rope: head_dim %d does not divide row %lld of %s", head_dim, (long long)x->ne[0], x->name);
    if (mode != MI_ROPE_NORMAL && mode != MI_ROPE_NEOX) BAD("rope: unknown mode %d", mode);
    if (n_rot <= 0 || n_rot > head_dim || n_rot % 2 != 0)
        BAD("rope: n_rot %d must be even and in 1..head_dim (%d)", n_rot, head_dim);
    if (!(freq_base > 0.0f)) BAD("rope: freq_base %g must be > 0", (double)freq_base);
    mi_tensor *t = node2(g, MI_OP_ROPE, MI_TYPE_F32, x->ne[0], x->ne[1]);
    if (!t) return NULL;
    t->src[0] = x;
    t->src[1] = pos;
    t->p[0] = head_dim;
    t->p[1] = mode;
    t->p[2] = n_rot;
    mi_tensor_set_pf(t, 3, freq_base);
    return t;
}

mi_tensor *graph_silu(mi_graph *g, mi_tensor *x) {
    if (!check_f32_2d("silu", "x", x)) return NULL;
    mi_tensor *t = node2(g, MI_OP_SILU, MI_TYPE_F32, x->ne[0], x->ne[1]);
    if (!t) return NULL;
    t->src[0] = x;
    return t;
}

mi_tensor *graph_swiglu(mi_graph *g, mi_tensor *gate, mi_tensor *up) {
    if (!check_f32_2d("swiglu", "gate", gate) || !check_f32_2d("swiglu", "up", up)) return NULL;
    if (gate->ne[0] != up->ne[0] || gate->ne[1] != up->ne[1])
        BAD("swiglu: gate %s [%lld, %lld] and up %s [%lld, %lld] differ", gate->name, (long long)gate->ne[0],
            (long long)gate->ne[1], up->name, (long long)up->ne[0], (long long)up->ne[1]);
    mi_tensor *t = node2(g, MI_OP_SWIGLU, MI_TYPE_F32, gate->ne[0], gate->ne[1]);
    if (!t) return NULL;
    t->src[0] = gate;
    t->src[1] = up;
    return t;
}

static bool kv_type_ok(mi_type t) { return t == MI_TYPE_F16 || t == MI_TYPE_F32; }

mi_tensor *graph_kv_store(mi_graph *g, mi_tensor *x, mi_tensor *cache, int64_t n_past) {
    if (!check_f32_2d("kv_store", "x", x)) return NULL;
    if (!cache || !is_2d(cache)) BAD("kv_store: cache must be a 2-D tensor");
    if (!kv_type_ok(cache->type)) BAD("kv_store: cache %s type %s (F16 or F32 only)", cache->name, mi_type_name(cache->type));
    if (cache->ne[0] != x->ne[0])
        BAD("kv_store: row %lld of %s != cache row %lld", (long long)x->ne[0], x->name, (long long)cache->ne[0]);
    if (n_past < 0 || n_past + x->ne[1] > cache->ne[1] || n_past > INT32_MAX)
        BAD("kv_store: rows %lld..%lld past the cache length %lld", (long long)n_past,
            (long long)(n_past + x->ne[1] - 1), (long long)cache->ne[1]);
    mi_tensor *t = node2(g, MI_OP_KV_STORE, cache->type, cache->ne[0], cache->ne[1]);
    if (!t) return NULL;
    t->src[0] = x;
    t->src[1] = cache;
    t->p[0] = (int32_t)n_past;
    t->flags |= MI_T_ALIAS;
    t->data = cache->data;
    t->backend = cache->backend;
    return t;
}

mi_tensor *graph_kv_scatter(mi_graph *g, mi_tensor *x, mi_tensor *cache, mi_tensor *rows) {
    if (!check_f32_2d("kv_scatter", "x", x)) return NULL;
    if (!cache || !is_2d(cache)) BAD("kv_scatter: cache must be a 2-D tensor");
    if (!kv_type_ok(cache->type)) BAD("kv_scatter: cache %s type %s (F16 or F32 only)", cache->name, mi_type_name(cache->type));
    if (cache->ne[0] != x->ne[0])
        BAD("kv_scatter: row %lld of %s != cache row %lld", (long long)x->ne[0], x->name, (long long)cache->ne[0]);
    if (!rows || rows->type != MI_TYPE_I32 || rows->ne[0] != x->ne[1] || mi_nrows(rows) != 1)
        BAD("kv_scatter: rows must be I32 [%lld]", (long long)x->ne[1]);
    mi_tensor *t = node2(g, MI_OP_KV_SCATTER, cache->type, cache->ne[0], cache->ne[1]);
    if (!t) return NULL;
    t->src[0] = x;
    t->src[1] = cache;
    t->src[2] = rows;
    t->flags |= MI_T_ALIAS;
    t->data = cache->data;
    t->backend = cache->backend;
    return t;
}

mi_tensor *graph_attn_paged(mi_graph *g, mi_tensor *q, mi_tensor *k, mi_tensor *v, mi_tensor *seqs, int n_seqs,
                            int64_t block, int64_t max_kv, int64_t max_rows, int head_dim, int n_head, int n_head_kv,
                            float scale) {
    if (!k || !v || k->op != MI_OP_KV_SCATTER || v->op != MI_OP_KV_SCATTER) BAD("attn_paged: K and V must be kv_scatter nodes");
    if (n_seqs < 1 || block < 1 || block > INT32_MAX || max_kv < 1 || max_kv > INT32_MAX || max_rows < 1 ||
        max_rows > INT32_MAX)
        BAD("attn_paged: %d sequences, block %lld, n_kv %lld, rows %lld", n_seqs, (long long)block, (long long)max_kv,
            (long long)max_rows);
    if (!seqs || seqs->type != MI_TYPE_I32 || mi_nrows(seqs) != 1 || seqs->ne[0] < (int64_t)n_seqs * MI_PAGED_FIELDS)
        BAD("attn_paged: the sequences table must be I32 of at least %d ints", n_seqs * MI_PAGED_FIELDS);
    mi_tensor *t = graph_attn(g, q, k, v, 0, head_dim, n_head, n_head_kv, scale);   /* ATTN's checks */
    if (!t) return NULL;
    t->op = MI_OP_ATTN_PAGED;
    t->src[3] = seqs;
    t->p[0] = n_seqs;
    t->p[5] = (int32_t)block;
    t->p[6] = (int32_t)max_kv;
    t->p[7] = (int32_t)max_rows;
    return t;
}

mi_tensor *graph_attn(mi_graph *g, mi_tensor *q, mi_tensor *k, mi_tensor *v, int64_t n_past,
                      int head_dim, int n_head, int n_head_kv, float scale) {
    if (!check_f32_2d("attn", "q", q)) return NULL;
    if (!k || !v) BAD("attn: K or V is NULL");
    if (head_dim <= 0 || n_head <= 0 || n_head_kv <= 0 || n_head % n_head_kv != 0)
        BAD("attn: heads %d / kv heads %d / head_dim %d invalid (GQA needs Hq %% Hkv == 0)", n_head, n_head_kv,
            head_dim);
    if (q->ne[0] != (int64_t)head_dim * n_head)
        BAD("attn: q %s row %lld != head_dim %d x %d heads", q->name, (long long)q->ne[0], head_dim, n_head);
    const mi_tensor *kv[2] = {k, v};
    for (int i = 0; i < 2; i++) {
        if (!kv_type_ok(kv[i]->type) || !is_2d(kv[i])) BAD("attn: %s must be an F16/F32 2-D cache", kv[i]->name);
        if (kv[i]->ne[0] != (int64_t)head_dim * n_head_kv)
            BAD("attn: %s row %lld != head_dim %d x %d kv heads", kv[i]->name, (long long)kv[i]->ne[0], head_dim,
                n_head_kv);
        if (n_past < 0 || n_past + q->ne[1] > kv[i]->ne[1] || n_past > INT32_MAX)
            BAD("attn: positions up to %lld exceed the cache length %lld of %s", (long long)(n_past + q->ne[1]),
                (long long)kv[i]->ne[1], kv[i]->name);
    }
    if (!(scale > 0.0f) && !(scale < 0.0f)) BAD("attn: scale must be finite and non-zero");
    mi_tensor *t = node2(g, MI_OP_ATTN, MI_TYPE_F32, q->ne[0], q->ne[1]);
    if (!t) return NULL;
    t->src[0] = q;
    t->src[1] = k;
    t->src[2] = v;
    t->p[0] = (int32_t)n_past;
    t->p[1] = head_dim;
    t->p[2] = n_head;
    t->p[3] = n_head_kv;
    mi_tensor_set_pf(t, 4, scale);
    return t;
}

mi_tensor *graph_slice_rows(mi_graph *g, mi_tensor *x, int64_t first, int64_t count) {
    if (!x || !is_2d(x)) BAD("slice_rows: x must be 2-D");
    if (first < 0 || count <= 0 || first + count > x->ne[1] || first > INT32_MAX || count > INT32_MAX)
        BAD("slice_rows: rows %lld..%lld outside %s with %lld rows", (long long)first,
            (long long)(first + count - 1), x->name, (long long)x->ne[1]);
    mi_tensor *t = node2(g, MI_OP_SLICE_ROWS, x->type, x->ne[0], count);
    if (!t) return NULL;
    t->src[0] = x;
    t->p[0] = (int32_t)first;
    t->p[1] = (int32_t)count;
    return t;
}

mi_tensor *graph_argmax(mi_graph *g, mi_tensor *x) {
    if (!check_f32_2d("argmax", "x", x)) return NULL;
    mi_tensor *t = node2(g, MI_OP_ARGMAX, MI_TYPE_I32, 1, x->ne[1]);
    if (!t) return NULL;
    t->src[0] = x;
    return t;
}

mi_tensor *graph_topk(mi_graph *g, mi_tensor *x, mi_tensor *scale, int64_t k) {
    if (!check_f32_2d("topk", "x", x) || !check_f32_2d("topk", "scale", scale)) return NULL;
    if (scale->ne[0] != 1 || scale->ne[1] != x->ne[1])
        BAD("topk: scale %s is [%lld, %lld], want [1, %lld]", scale->name, (long long)scale->ne[0],
            (long long)scale->ne[1], (long long)x->ne[1]);
    if (k < 1 || k > MI_TOPK_MAX || k >= x->ne[0] || x->ne[0] > (1 << 24))
        BAD("topk: K = %lld over rows of %lld (want 1 <= K <= %d, K < rows <= 2^24)", (long long)k,
            (long long)x->ne[0], MI_TOPK_MAX);
    mi_tensor *t = node2(g, MI_OP_TOPK, MI_TYPE_F32, 2 * k, x->ne[1]);
    if (!t) return NULL;
    t->src[0] = x;
    t->src[1] = scale;
    t->p[0] = (int32_t)k;
    return t;
}

/* ---- dump ---- */

mi_status graph_set_n_past(mi_graph *g, int64_t n_past) {
    for (int i = 0; i < g->n_nodes; i++) {
        mi_tensor *t = g->nodes[i];
        if (t->op != MI_OP_ATTN && t->op != MI_OP_KV_STORE) continue;
        const int64_t rows = t->src[0]->ne[1];   /* the step's tokens (ATTN: q, KV_STORE: new rows) */
        const mi_tensor *cache = t->op == MI_OP_KV_STORE ? t->src[1] : t->src[1]->src[1];
        if (n_past < 0 || n_past > INT32_MAX || !cache || n_past + rows > cache->ne[1])
            return mi_err(MI_ERR_INVALID, "%s %s: positions up to %lld exceed the cache length %lld", mi_op_name(t->op),
                          t->name, (long long)(n_past + rows), (long long)(cache ? cache->ne[1] : 0));
        t->p[0] = (int32_t)n_past;
    }
    return MI_OK;
}

void graph_dump(const mi_graph *g, void *file) {
    FILE *f = file ? (FILE *)file : stderr;
    fprintf(f, "graph: %d nodes\n", g->n_nodes);
    for (int i = 0; i < g->n_nodes; i++) {
        const mi_tensor *t = g->nodes[i];
        fprintf(f, "  #%-4d %-10s %-5s [%lld, %lld] be=%d %s%s%s%s %-24s <-", i, mi_op_name(t->op),
                mi_type_name(t->type), (long long)t->ne[0], (long long)t->ne[1], t->backend,
                (t->flags & MI_T_INPUT) ? "I" : "", (t->flags & MI_T_OUTPUT) ? "O" : "",
                (t->flags & MI_T_PERSIST) ? "P" : "", (t->flags & MI_T_ALIAS) ? "A" : "", t->name);
        for (int j = 0; j < MI_MAX_SRC; j++) {
            const mi_tensor *s = t->src[j];
            if (!s) continue;
            if (s->op == MI_OP_NONE)
                fprintf(f, " %s(leaf be=%d)", s->name, s->backend);
            else
                fprintf(f, " #%d", s->id);
        }
        fputc('\n', f);
    }
}

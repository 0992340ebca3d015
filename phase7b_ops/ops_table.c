/* Phase 7b's kernels as dispatch candidates, one per op: supports() (exactly what the
 * kernel implements: op x types x shapes, decided before execution), run() (reads the
 * node's shapes and pointers, calls one launcher of ops7b.h on the backend stream, never
 * synchronizes) and, where needed, the workspace size. mi_phase7b_install() adds them to
 * the dispatch (phase7a_skeleton/cuda_dispatch.h); they are the last candidate of each
 * op. Shapes: common/graph/graph.h. */
#include "phase7b_ops/ops7b.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "common/graph/graph.h"
#include "phase7a_skeleton/cuda_dispatch.h"

#define nrows mi_nrows
static bool is_f32(const mi_tensor *t) { return t && t->type == MI_TYPE_F32; }
static bool is_kv(const mi_tensor *t) { return t && (t->type == MI_TYPE_F16 || t->type == MI_TYPE_F32); }

/* ---------------- MATMUL: W [K, M] @ x [K, N] (+ bias [M]) -> [M, N] ---------------- */
bool mi7b_matmul_node_supported(const mi_tensor *n) {
    const mi_tensor *w = n->src[0], *x = n->src[1], *b = n->src[2];
    if (!w || !is_f32(x) || !is_f32(n) || w->ne[0] != x->ne[0]) return false;
    if (w->ne[2] != 1 || w->ne[3] != 1) return false;
    if (b && (!is_f32(b) || b->ne[0] != w->ne[1])) return false;
    if (nrows(x) > 65535 * 8) return false;   /* grid.y limit of the 8-column kernels */
    return mi7b_matmul_supported(w->type, w->ne[0]);
}
static size_t ws_matmul(const mi_tensor *n) {
    return mi7b_matmul_workspace(n->src[0]->type, n->src[0]->ne[0], nrows(n->src[1]));
}
static mi_status ex_matmul(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0], *x = n->src[1], *b = n->src[2];
    return mi7b_matmul(mi_cuda_stream(c), w->type, w->data, x->data, b ? b->data : NULL, n->data,
                       w->ne[0], w->ne[1], nrows(x), ws);
}

/* ---------------- ADD / MUL: [D, N] op [D, N] | [D, 1] ---------------- */
static bool sup_binary(const mi_tensor *n) {
    const mi_tensor *a = n->src[0], *b = n->src[1];
    if (!is_f32(a) || !is_f32(b) || !is_f32(n) || a->ne[0] != b->ne[0]) return false;
    return nrows(b) == nrows(a) || nrows(b) == 1;
}
static mi_status ex_binary(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    const mi_tensor *a = n->src[0], *b = n->src[1];
    return mi7b_binary(mi_cuda_stream(c), n->op == MI_OP_ADD ? 0 : 1, a->data, b->data, n->data,
                       a->ne[0], nrows(a), nrows(b));
}

/* ---------------- RMS_NORM: x [D, N], w [G], rows of G = p[0] ---------------- */
bool mi7b_rms_node_supported(const mi_tensor *n) {
    const mi_tensor *x = n->src[0], *w = n->src[1];
    const int64_t G = mi_norm_group(n);
    return is_f32(x) && is_f32(w) && is_f32(n) && G > 0 && x->ne[0] % G == 0 && w->ne[0] == G;
}
static mi_status ex_rms(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    const mi_tensor *x = n->src[0];
    const int64_t G = mi_norm_group(n);
    return mi7b_rms_norm(mi_cuda_stream(c), x->data, n->src[1]->data, n->data, G,
                         mi_nelements(x) / G, mi_norm_eps(n));
}

/* ---------------- ROPE: x [hd*H, N], pos I32 [N] ---------------- */
bool mi7b_rope_node_supported(const mi_tensor *n) {
    const mi_tensor *x = n->src[0], *pos = n->src[1];
    const int64_t hd = mi_rope_head_dim(n);
    const int mode = mi_rope_mode(n), n_rot = mi_rope_n_rot(n);
    if (!is_f32(x) || !is_f32(n) || !pos || pos->type != MI_TYPE_I32) return false;
    if (hd <= 0 || x->ne[0] % hd != 0 || pos->ne[0] != nrows(x)) return false;
    return (mode == MI_ROPE_NORMAL || mode == MI_ROPE_NEOX) && n_rot > 0 && n_rot <= hd && n_rot % 2 == 0;
}
static mi_status ex_rope(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    const mi_tensor *x = n->src[0];
    const int64_t hd = mi_rope_head_dim(n);
    return mi7b_rope(mi_cuda_stream(c), x->data, n->src[1]->data, n->data, hd, x->ne[0] / hd, nrows(x),
                     mi_rope_mode(n), mi_rope_n_rot(n), mi_rope_freq_base(n));
}

/* ---------------- SILU, SWIGLU ---------------- */
static bool sup_silu(const mi_tensor *n) { return is_f32(n->src[0]) && is_f32(n); }
static mi_status ex_silu(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    return mi7b_silu(mi_cuda_stream(c), n->src[0]->data, n->data, mi_nelements(n));
}
static bool sup_swiglu(const mi_tensor *n) {
    return is_f32(n->src[0]) && is_f32(n->src[1]) && is_f32(n) &&
           mi_nelements(n->src[0]) == mi_nelements(n->src[1]);
}
static mi_status ex_swiglu(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    return mi7b_swiglu(mi_cuda_stream(c), n->src[0]->data, n->src[1]->data, n->data, mi_nelements(n));
}

/* ---------------- KV_STORE: x [row, N] -> cache rows n_past.. (node aliases cache) ---------------- */
bool mi7b_kv_store_node_supported(const mi_tensor *n) {
    const mi_tensor *x = n->src[0], *cache = n->src[1];
    return is_f32(x) && is_kv(cache) && x->ne[0] == cache->ne[0] && mi_node_n_past(n) >= 0 &&
           mi_node_n_past(n) + nrows(x) <= cache->ne[1];
}
static mi_status ex_kv_store(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    const mi_tensor *x = n->src[0], *cache = n->src[1];
    return mi7b_kv_store(mi_cuda_stream(c), x->data, cache->data, cache->type, x->ne[0], nrows(x), mi_node_n_past(n));
}

/* ---------------- ATTN: q [hd*Hq, N], K, V caches -> [hd*Hq, N] ---------------- */
bool mi7b_attn_node_supported(const mi_tensor *n) {
    const mi_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    const int64_t hd = mi_attn_head_dim(n), Hq = mi_attn_n_head(n), Hkv = mi_attn_n_head_kv(n),
                  n_past = mi_node_n_past(n);
    if (!is_f32(q) || !is_f32(n) || !is_kv(k) || !is_kv(v) || k->type != v->type) return false;
    if (q->ne[0] != hd * Hq || k->ne[0] != hd * Hkv || v->ne[0] != hd * Hkv) return false;
    if (n_past < 0 || n_past + nrows(q) > k->ne[1] || n_past + nrows(q) > v->ne[1]) return false;
    return mi7b_attn_supported(hd, Hq, Hkv, k->type) && nrows(q) <= 65535;
}
static mi_status ex_attn(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    const mi_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    return mi7b_attn(mi_cuda_stream(c), q->data, k->data, v->data, k->type, n->data, nrows(q), mi_node_n_past(n),
                     mi_attn_head_dim(n), mi_attn_n_head(n), mi_attn_n_head_kv(n), mi_attn_scale(n));
}

/* ---------------- GET_ROWS: table [E, V], ids I32 [N] -> F32 [E, N] ---------------- */
static bool sup_get_rows(const mi_tensor *n) {
    const mi_tensor *t = n->src[0], *ids = n->src[1];
    return t && ids && ids->type == MI_TYPE_I32 && is_f32(n) && t->ne[2] == 1 && t->ne[3] == 1 &&
           nrows(ids) == 1 && ids->ne[0] <= 65535 && mi7b_get_rows_supported(t->type, t->ne[0]);
}
static mi_status ex_get_rows(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    const mi_tensor *t = n->src[0], *ids = n->src[1];
    return mi7b_get_rows(mi_cuda_stream(c), t->type, t->data, t->ne[0], t->ne[1], ids->data, n->data,
                         ids->ne[0]);
}

/* ---------------- SLICE_ROWS: [D, N] -> rows p[0] .. p[0]+p[1]-1 ---------------- */
static bool sup_slice(const mi_tensor *n) {
    const mi_tensor *x = n->src[0];
    return x && x->type == n->type && x->ne[0] == n->ne[0] && x->ne[2] == 1 && x->ne[3] == 1 &&
           mi_slice_first(n) >= 0 && mi_slice_count(n) > 0 && mi_slice_first(n) + mi_slice_count(n) <= x->ne[1] &&
           mi_row_size(x->type, x->ne[0]) > 0;
}
static mi_status ex_slice(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    const mi_tensor *x = n->src[0];
    const size_t row = mi_row_size(x->type, x->ne[0]);
    return mi7b_copy(mi_cuda_stream(c), n->data, (const char *)x->data + row * (size_t)mi_slice_first(n),
                     row * (size_t)mi_slice_count(n));
}

static const mi_cuda_kernel k_matmul = {"matmul, warp per row (quantized: x in the CPU's Q8 format)", NULL,
                                         mi7b_matmul_node_supported, ex_matmul, ws_matmul, 0};
const mi_cuda_kernel *mi7b_matmul_kernel(void) { return &k_matmul; }
static const mi_cuda_kernel k_binary = {"add / mul, elementwise with broadcast", NULL, sup_binary, ex_binary, NULL, 0};
static const mi_cuda_kernel k_rms = {"RMS norm, one warp per row", NULL, mi7b_rms_node_supported, ex_rms, NULL, 0};
static const mi_cuda_kernel k_rope = {"RoPE", NULL, mi7b_rope_node_supported, ex_rope, NULL, 0};
static const mi_cuda_kernel k_silu = {"SiLU", NULL, sup_silu, ex_silu, NULL, 0};
static const mi_cuda_kernel k_swiglu = {"SwiGLU", NULL, sup_swiglu, ex_swiglu, NULL, 0};
static const mi_cuda_kernel k_kv_store = {"KV store, n_past from the node", NULL, mi7b_kv_store_node_supported, ex_kv_store, NULL, 0};
static const mi_cuda_kernel k_attn = {"attention, one block per query and head", NULL, mi7b_attn_node_supported, ex_attn, NULL, 0};
static const mi_cuda_kernel k_get_rows = {"embedding rows (get_rows)", NULL, sup_get_rows, ex_get_rows, NULL, 0};
static const mi_cuda_kernel k_slice = {"slice rows (copy)", NULL, sup_slice, ex_slice, NULL, 0};

void mi_phase7b_install(void) {
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_matmul);
    mi_cuda_add_kernel(MI_OP_ADD, &k_binary);
    mi_cuda_add_kernel(MI_OP_MUL, &k_binary);
    mi_cuda_add_kernel(MI_OP_RMS_NORM, &k_rms);
    mi_cuda_add_kernel(MI_OP_ROPE, &k_rope);
    mi_cuda_add_kernel(MI_OP_SILU, &k_silu);
    mi_cuda_add_kernel(MI_OP_SWIGLU, &k_swiglu);
    mi_cuda_add_kernel(MI_OP_KV_STORE, &k_kv_store);
    mi_cuda_add_kernel(MI_OP_ATTN, &k_attn);
    mi_cuda_add_kernel(MI_OP_GET_ROWS, &k_get_rows);
    mi_cuda_add_kernel(MI_OP_SLICE_ROWS, &k_slice);
}

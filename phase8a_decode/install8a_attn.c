/* The one-token RoPE, KV store and attention candidates of phase 8a (items d4, d8, d14, d20,
 * d30, d31 and the split's launch-time items); mi_phase8a_install (install8a.c) adds them. */
#include "phase8a_decode/install8a.h"
#include "phase8a_decode/decode8a.h"
#include "common/core/mi_settings.h"
#include "phase7b_ops/ops7b.h"
#include "phase7c_wiring/wiring7c.h"
#include "phase7d_graphs/graphs7d.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "common/graph/graph.h"
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

/* ROPE, any number of tokens: d8's kernel, on 7b's node contract */
static bool sup_rope_pairs(const mi_tensor *n) {
    return mi7b_rope_node_supported(n) && mi8a_rope_pairs_supported(mi_rope_head_dim(n), mi_rope_n_rot(n), mi_rope_mode(n));
}
static mi_status run_rope_pairs(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *x = n->src[0];
    const int64_t hd = mi_rope_head_dim(n);
    return mi8a_rope_pairs(mi_cuda_stream(c), x->data, n->src[1]->data, n->data, hd, x->ne[0] / hd, mi_nrows(x),
                           mi_rope_mode(n), mi_rope_n_rot(n), mi_rope_freq_base(n));
}
const mi_cuda_kernel mi8a_k_rope_pairs = {"RoPE, a thread per pair, inverse frequencies from the host", "d8",
                                            sup_rope_pairs, run_rope_pairs, NULL, 0};

/* ROPE and KV_STORE marked by the pass (d14): a one-token step's q RoPE, k RoPE and K store
 * (MI_RKV_DEFER) launch nothing and leave what they would compute in a thread-local record; the
 * V store (MI_RKV_LAST) launches d14's kernel for all four. The nodes run back to back on one
 * thread; the last checks the record (same context, its three predecessors in order, the K
 * store reading the k RoPE, its own src[2] and src[3] the RoPEs' inputs) and fails the step
 * rather than leave an output unwritten. Memory: the RoPEs' inputs are the last's sources and
 * their outputs are read after it (fusion8a.c), so everything it reads and writes is allocated
 * while it runs; a captured graph replays the launch, n_past read from the step params. */
static _Thread_local struct {
    const mi_cuda_ctx *c;
    int n, last_id;
    const mi_tensor *k_rope;
    mi8a_rope_kv_io io;
    int64_t Hq;
} g_rkv;

static bool rkv_shape_ok(const mi_tensor *rope, const mi_tensor *store) {
    const int64_t hd = mi_rope_head_dim(rope);
    return hd > 0 && mi8a_rope_kv_supported(hd, rope->src[0]->ne[0] / hd, store->src[0]->ne[0] / hd,
                                            mi_rope_n_rot(rope), mi_rope_mode(rope), store->src[1]->type);
}
/* a RoPE's own part of the rule (its heads as q's; k's heads and the cache type are the V store's
 * to check, in rkv_shape_ok) */
static bool sup_rkv_rope(const mi_tensor *n) {
    const mi_tensor *x = n->src[0];
    const int64_t hd = mi_rope_head_dim(n);
    return mi_rope_kv_role(n) == MI_RKV_DEFER && sup_rope_pairs(n) && mi_nrows(x) == 1 &&
           mi8a_rope_kv_supported(hd, x->ne[0] / hd, 1, mi_rope_n_rot(n), mi_rope_mode(n), MI_TYPE_F16);
}
static bool rkv_store_ok(const mi_tensor *n, int role) {
    const mi_tensor *x = n->src[0], *cache = n->src[1];
    return mi_rope_kv_role(n) == role && x && cache && mi_nrows(x) == 1 && mi7b_kv_store_node_supported(n) &&
           (cache->type == MI_TYPE_F16 || cache->type == MI_TYPE_F32);
}
static bool sup_rkv_store(const mi_tensor *n) { return rkv_store_ok(n, MI_RKV_DEFER); }
static bool sup_rkv_last(const mi_tensor *n) { return rkv_store_ok(n, MI_RKV_LAST) && n->src[2] && n->src[3]; }
static bool rkv_follows(const mi_cuda_ctx *c, const mi_tensor *n, int have) {
    return g_rkv.n == have && g_rkv.c == c && g_rkv.last_id == n->id - 1;
}
static mi_status run_rkv_rope(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const bool is_k = rkv_follows(c, n, 1);
    if (!is_k) g_rkv.n = 0, g_rkv.c = c;   /* the q RoPE starts the record */
    float *const y = n->data;
    const float *const x = n->src[0]->data;
    if (is_k) g_rkv.io.k = x, g_rkv.io.k_rope = y, g_rkv.k_rope = n;
    else g_rkv.io.q = x, g_rkv.io.q_rope = y, g_rkv.io.pos = n->src[1]->data,
         g_rkv.Hq = n->src[0]->ne[0] / mi_rope_head_dim(n);
    g_rkv.n++;
    g_rkv.last_id = n->id;
    return MI_OK;
}
/* a store's part of the record: its cache, its n_past (the step-params slot or the node's) and
 * the cache's rows */
static void rkv_store_take(mi_cuda_ctx *c, const mi_tensor *n, void **cache, const int32_t **np_dev, int64_t *np,
                           int64_t *n_ctx) {
    *cache = n->src[1]->data;
    *np_dev = mi_cuda_step_param(c, n);
    *np = mi_node_n_past(n);
    *n_ctx = n->src[1]->ne[1];
}
static mi_status run_rkv_store(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    if (!rkv_follows(c, n, 2) || n->src[0] != g_rkv.k_rope) {
        g_rkv.n = 0;
        return MI_OK;   /* the last finds the record incomplete and fails the step */
    }
    rkv_store_take(c, n, &g_rkv.io.cache_k, &g_rkv.io.n_past_k_dev, &g_rkv.io.n_past_k, &g_rkv.io.n_ctx_k);
    g_rkv.n++;
    g_rkv.last_id = n->id;
    return MI_OK;
}
static mi_status run_rkv_last(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const bool ok = rkv_follows(c, n, 3) && n->src[2]->data == g_rkv.io.q && n->src[3]->data == g_rkv.io.k;
    g_rkv.n = 0;
    if (!ok)
        return mi_err(MI_ERR_INTERNAL, "d14: the V store %s (#%d) found no record of the RoPE and K store before it",
                      n->name, n->id);
    const mi_tensor *rope = g_rkv.k_rope;
    if (!rkv_shape_ok(rope, n))
        return mi_err(MI_ERR_INTERNAL, "d14: node %s (#%d): shapes its kernel does not take", n->name, n->id);
    mi8a_rope_kv_io io = g_rkv.io;
    io.v = n->src[0]->data;
    rkv_store_take(c, n, &io.cache_v, &io.n_past_v_dev, &io.n_past_v, &io.n_ctx_v);
    const int64_t hd = mi_rope_head_dim(rope);
    return mi8a_rope_kv(mi_cuda_stream(c), &io, n->src[1]->type, hd, g_rkv.Hq, rope->src[0]->ne[0] / hd,
                        mi_rope_mode(rope), mi_rope_n_rot(rope), mi_rope_freq_base(rope));
}
const mi_cuda_kernel mi8a_k_rkv_rope = {"RoPE, one token: computed by its step's V store (d14's kernel)", "d8,d14",
                                          sup_rkv_rope, run_rkv_rope, NULL, 0};
const mi_cuda_kernel mi8a_k_rkv_store = {"KV store, one token: done by its step's V store (d14's kernel)", "d8,d14",
                                           sup_rkv_store, run_rkv_store, NULL, MI_CUDA_K_STEP_PARAMS};
const mi_cuda_kernel mi8a_k_rkv_last = {"V store, one token: q's and k's RoPE and the K and V stores in one launch",
                                          "d8,d14", sup_rkv_last, run_rkv_last, NULL, MI_CUDA_K_STEP_PARAMS};

/* d30: the V store (MI_RKV_ATTN) completes the record and launches nothing either; the attention
 * right after it (mi_attn_does_rkv) launches the one kernel for all five */
static bool sup_rkv_attn_store(const mi_tensor *n) { return rkv_store_ok(n, MI_RKV_ATTN) && n->src[1]->type == MI_TYPE_F16; }
static mi_status run_rkv_attn_store(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    if (!rkv_follows(c, n, 3)) {
        g_rkv.n = 0;
        return MI_OK;   /* the attention finds the record incomplete and fails the step */
    }
    g_rkv.io.v = n->src[0]->data;
    rkv_store_take(c, n, &g_rkv.io.cache_v, &g_rkv.io.n_past_v_dev, &g_rkv.io.n_past_v, &g_rkv.io.n_ctx_v);
    g_rkv.n++;
    g_rkv.last_id = n->id;
    return MI_OK;
}
const mi_cuda_kernel mi8a_k_rkv_attn_store = {"V store, one token: done by the attention after it (d30)",
                                                "d8,d14,d30", sup_rkv_attn_store, run_rkv_attn_store, NULL,
                                                MI_CUDA_K_STEP_PARAMS};
/* an upper layer's candidates for a step of many sequences' four (mi8a_rope_kv_rows_add) */
static const mi_cuda_kernel *g_rkv_rows[3];
void mi8a_rope_kv_rows_add(const mi_cuda_kernel *rope_defer, const mi_cuda_kernel *store_defer,
                           const mi_cuda_kernel *store_last) {
    g_rkv_rows[0] = rope_defer, g_rkv_rows[1] = store_defer, g_rkv_rows[2] = store_last;
}
const struct mi_cuda_kernel *mi8a_rope_kv_kernel(const mi_tensor *n, int role) {
    if (role == MI_RKV_ROWS_DEFER || role == MI_RKV_ROWS_LAST) {
        if (n->op == MI_OP_ROPE) return role == MI_RKV_ROWS_DEFER ? g_rkv_rows[0] : NULL;
        if (n->op != MI_OP_KV_SCATTER) return NULL;
        return role == MI_RKV_ROWS_DEFER ? g_rkv_rows[1] : g_rkv_rows[2];
    }
    if (n->op == MI_OP_ROPE) return role == MI_RKV_DEFER ? &mi8a_k_rkv_rope : NULL;
    if (n->op != MI_OP_KV_STORE) return NULL;
    return role == MI_RKV_DEFER ? &mi8a_k_rkv_store : role == MI_RKV_LAST ? &mi8a_k_rkv_last
                                              : role == MI_RKV_ATTN ? &mi8a_k_rkv_attn_store : NULL;
}
const struct mi_cuda_kernel *mi8a_rope_pairs_kernel(void) { return &mi8a_k_rope_pairs; }

/* ATTN, one token, a cache of MI8A_SKV_MIN_CTX positions or more: split over the sequence.
 * MINFER_SKV_MIN_CTX=N moves the threshold (benches measure where the split pays). */
static int64_t skv_min_ctx(void) {
    static long v = -1;
    return mi_setting_int_once("MINFER_SKV_MIN_CTX", 1, INT32_MAX, MI8A_SKV_MIN_CTX, &v);
}
/* MINFER_SKV_GB=N: query heads a block (mi8a_attn_split's heads_a_block; 0: its rule) */
static int skv_heads_a_block(void) {
    static long v = -1;
    return (int)mi_setting_int_once("MINFER_SKV_GB", 1, 64, 0, &v);
}
static bool sup_attn_split(const mi_tensor *n) {
    const mi_tensor *q = n->src[0], *k = n->src[1];
    return q && k && mi_nrows(q) == 1 && k->ne[1] >= skv_min_ctx() &&
           mi8a_attn_split_supported(mi_attn_head_dim(n), mi_attn_n_head(n), mi_attn_n_head_kv(n), k->type) &&
           mi7b_attn_node_supported(n);
}
static size_t ws_attn_split(const mi_tensor *n) {
    return mi8a_attn_split_workspace(n->src[1]->ne[1], mi_attn_head_dim(n), mi_attn_n_head(n), mi_attn_n_head_kv(n));
}
static mi_status run_attn_split(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    return mi8a_attn_split(mi_cuda_stream(c), q->data, k->data, v->data, k->type, n->data, mi_cuda_step_param(c, n),
                           mi_node_n_past(n), k->ne[1], mi_attn_head_dim(n), mi_attn_n_head(n), mi_attn_n_head_kv(n),
                           mi_attn_scale(n), skv_heads_a_block(), ws);
}
const mi_cuda_kernel mi8a_k_attn_split = {"attention, one token, split over the KV sequence", "d4", sup_attn_split,
                                            run_attn_split, ws_attn_split, MI_CUDA_K_STEP_PARAMS};

/* ATTN, one token, caches the split does not take: 7b's arithmetic with its loads in flight.
 * The cache's address is known at assignment (a persistent region), so alignment is part of
 * the rule; n_past from the step params as 7d's candidate. */
static bool sup_attn_step(const mi_tensor *n) {
    const mi_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    return q && k && v && mi_nrows(q) == 1 && k->data && v->data &&
           mi8a_attn_step_supported(mi_attn_head_dim(n), mi_attn_n_head(n), mi_attn_n_head_kv(n), k->type, k->data,
                                    v->data) &&
           mi7b_attn_node_supported(n);
}
/* d31: where the pass marked the attention (mi_attn_quant_out) and d31 is on, its output's
 * quantized row goes to the start of the workspace for the o projection run next */
static _Atomic uint64_t g_quant_out_launches;
static void *attn_quant_out(const mi_tensor *n, void *ws) {
    mi_cuda_ws_copy_clear();
    if (!mi_attn_quant_out(n) || !mi_cuda_item_on("d31") || !ws || ((uintptr_t)ws & 3)) return NULL;
    g_quant_out_launches++;
    return ws;
}
uint64_t mi8a_quant_out_launches(void) { return g_quant_out_launches; }
static size_t ws_attn_quant_out(const mi_tensor *n) {
    return mi_attn_quant_out(n) ? (size_t)(mi_attn_head_dim(n) * mi_attn_n_head(n) / 32) * 36 : 0;
}
static mi_status run_attn_step(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    void *oq = attn_quant_out(n, ws);
    MI_TRY(mi8a_attn_step(mi_cuda_stream(c), q->data, k->data, v->data, k->type, n->data, oq, mi_cuda_step_param(c, n),
                          mi_node_n_past(n), k->ne[1], mi_attn_head_dim(n), mi_attn_n_head(n), mi_attn_n_head_kv(n),
                          mi_attn_scale(n)));
    if (oq) mi_cuda_ws_copy_made(MI_WS_COPY_Q8_1, n->data, oq, mi_attn_head_dim(n) * mi_attn_n_head(n), 1);
    return MI_OK;
}
const mi_cuda_kernel mi8a_k_attn_step = {"attention, one token, a tile's loads in flight (7b's arithmetic)", "d20",
                                           sup_attn_step, run_attn_step, ws_attn_quant_out, MI_CUDA_K_STEP_PARAMS};

/* d30: the attention marked by the pass (mi_attn_does_rkv) after its step's RoPEs and stores,
 * whose work it does first: the record of the four (d14's) must be complete and end right before
 * it, with src[3..5] the inputs it holds; else the step fails rather than read a q's RoPE no
 * kernel wrote */
static bool sup_attn_step_rkv(const mi_tensor *n) {
    const mi_tensor *k = n->src[1], *v = n->src[2];
    if (!mi_attn_does_rkv(n) || !n->src[3] || !n->src[4] || !n->src[5] || !k || !v ||
        !mi8a_attn_step_rkv_supported(mi_attn_head_dim(n), mi_attn_n_head(n), mi_attn_n_head_kv(n),
                                      (int)mi_attn_head_dim(n), MI_ROPE_NEOX, k->type, k->data, v->data))
        return false;
    mi_tensor plain = *n;   /* only where the attention alone would run on d20's kernel (not the split's caches) */
    plain.p[5] = 0;
    plain.src[3] = plain.src[4] = plain.src[5] = plain.src[6] = NULL;
    return mi_cuda_choice(&plain) == &mi8a_k_attn_step;
}
static mi_status run_attn_step_rkv(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const bool ok = rkv_follows(c, n, 4) && n->src[3]->data == g_rkv.io.q && n->src[4]->data == g_rkv.io.k &&
                    n->src[5]->data == g_rkv.io.v && n->src[0]->data == g_rkv.io.q_rope;
    g_rkv.n = 0;
    if (!ok)
        return mi_err(MI_ERR_INTERNAL, "d30: the attention %s (#%d) found no record of the RoPEs and stores before it",
                      n->name, n->id);
    const mi_tensor *rope = g_rkv.k_rope, *k = n->src[1];
    const int64_t hd = mi_attn_head_dim(n);
    if (mi_rope_head_dim(rope) != hd || g_rkv.Hq != mi_attn_n_head(n) || rope->src[0]->ne[0] != hd * mi_attn_n_head_kv(n))
        return mi_err(MI_ERR_INTERNAL, "d30: node %s (#%d): the RoPEs' heads are not the attention's", n->name, n->id);
    void *oq = attn_quant_out(n, ws);
    MI_TRY(mi8a_attn_step_rkv(mi_cuda_stream(c), &g_rkv.io, mi_rope_mode(rope), mi_rope_n_rot(rope),
                              mi_rope_freq_base(rope), k->type, n->data, oq, mi_cuda_step_param(c, n),
                              mi_node_n_past(n), k->ne[1], hd, mi_attn_n_head(n), mi_attn_n_head_kv(n),
                              mi_attn_scale(n)));
    if (oq) mi_cuda_ws_copy_made(MI_WS_COPY_Q8_1, n->data, oq, hd * mi_attn_n_head(n), 1);
    return MI_OK;
}
const mi_cuda_kernel mi8a_k_attn_step_rkv = {"attention, one token, doing its step's RoPE of q and k and its K and V "
                                               "stores first", "d20,d8,d14,d30", sup_attn_step_rkv, run_attn_step_rkv,
                                               ws_attn_quant_out, MI_CUDA_K_STEP_PARAMS};
const struct mi_cuda_kernel *mi8a_attn_rkv_kernel(void) { return &mi8a_k_attn_step_rkv; }
const struct mi_cuda_kernel *mi8a_attn_step_kernel(void) { return &mi8a_k_attn_step; }

/* Phase 7d's ATTN and KV_STORE candidates: when the split being run has a step-params slot
 * for the node (a decode split of a wrapped backend), n_past is read on the device from
 * that slot (attn_kv_step.cu), so the node's kernel is the same every step and a captured
 * graph survives KV growth; without a slot (graphs off, prefill) n_past comes from the
 * node and 7b's launcher runs. supports() and the arithmetic are 7b's. */
#include "phase7d_graphs/graphs7d.h"
#include "phase7b_ops/ops7b.h"
#include "common/graph/graph.h"

static mi_status run_attn(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    const mi_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    const int32_t *np = mi_cuda_step_param(c, n);
    if (!np)
        return mi7b_attn(mi_cuda_stream(c), q->data, k->data, v->data, k->type, n->data, mi_nrows(q), mi_node_n_past(n),
                         mi_attn_head_dim(n), mi_attn_n_head(n), mi_attn_n_head_kv(n), mi_attn_scale(n));
    return mi7d_attn(mi_cuda_stream(c), q->data, k->data, v->data, k->type, n->data, mi_nrows(q), np, k->ne[1],
                     mi_attn_head_dim(n), mi_attn_n_head(n), mi_attn_n_head_kv(n), mi_attn_scale(n));
}

/* x [row, N] -> cache rows n_past .. n_past+N-1 (the node aliases the cache) */
static mi_status run_kv_store(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    const mi_tensor *x = n->src[0], *cache = n->src[1];
    const int32_t *np = mi_cuda_step_param(c, n);
    if (!np)
        return mi7b_kv_store(mi_cuda_stream(c), x->data, cache->data, cache->type, x->ne[0], mi_nrows(x),
                             mi_node_n_past(n));
    return mi7d_kv_store(mi_cuda_stream(c), x->data, cache->data, cache->type, x->ne[0], mi_nrows(x), np, cache->ne[1]);
}

static const mi_cuda_kernel k_attn = {"attention, n_past from the step params (decode) or the node", NULL, mi7b_attn_node_supported,
                                      run_attn, NULL, MI_CUDA_K_STEP_PARAMS};
static const mi_cuda_kernel k_kv_store = {"KV store, n_past from the step params (decode) or the node", NULL,
                                          mi7b_kv_store_node_supported, run_kv_store, NULL, MI_CUDA_K_STEP_PARAMS};

void g7_add_step_kernels(void) {
    mi_cuda_add_kernel(MI_OP_ATTN, &k_attn);
    mi_cuda_add_kernel(MI_OP_KV_STORE, &k_kv_store);
}

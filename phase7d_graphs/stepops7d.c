/* Phase 7d's ATTN and KV_STORE execs for the CUDA op table: when the split being run
 * has a step-params slot for the node (a decode split of a wrapped backend), n_past is
 * read on the device from that slot (ops7d.cu), so the node's kernel is the same every
 * step and a captured graph survives KV growth; otherwise the entry 7d replaced (7b's,
 * n_past from node->p[0]) runs. supports() and workspace stay the replaced entry's. */
#include "phase7d_graphs/graphs7d.h"
#include "common/graph/graph.h"

static mi_cuda_exec_fn g_attn_prev, g_kv_prev;

static int64_t nrows(const mi_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

/* q [hd*Hq, N], K/V (KV_STORE nodes aliasing the caches [hd*Hkv, n_ctx]) -> [hd*Hq, N] */
static mi_status ex_attn7d(mi_cuda_ctx *c, mi_tensor *n, void *ws) {
    const int32_t *np = mi_cuda_step_param(c, n);
    if (!np) {
        if (!g_attn_prev) return mi_err(MI_ERR_UNSUPPORTED, "cuda: ATTN '%s' has no kernel", n->name);
        return g_attn_prev(c, n, ws);
    }
    const mi_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    return mi7d_attn(mi_cuda_stream(c), q->data, k->data, v->data, k->type, n->data, nrows(q), np, k->ne[1],
                     n->p[1], n->p[2], n->p[3], mi_tensor_pf(n, 4));
}

/* x [row, N] -> cache rows n_past .. n_past+N-1 */
static mi_status ex_kv_store7d(mi_cuda_ctx *c, mi_tensor *n, void *ws) {
    const int32_t *np = mi_cuda_step_param(c, n);
    if (!np) {
        if (!g_kv_prev) return mi_err(MI_ERR_UNSUPPORTED, "cuda: KV_STORE '%s' has no kernel", n->name);
        return g_kv_prev(c, n, ws);
    }
    const mi_tensor *x = n->src[0], *cache = n->src[1];
    return mi7d_kv_store(mi_cuda_stream(c), x->data, cache->data, cache->type, x->ne[0], nrows(x), np, cache->ne[1]);
}

void m7d_install_step_ops(void) {
    mi_cuda_exec_fn ex = NULL;
    mi_cuda_supports_fn sup = NULL;
    mi_cuda_workspace_fn wsf = NULL;
    mi_cuda_get_op(MI_OP_ATTN, &ex, &sup, &wsf);
    if (ex && ex != ex_attn7d) {   /* install twice: keep the first replaced entry */
        g_attn_prev = ex;
        mi_cuda_set_op(MI_OP_ATTN, ex_attn7d, sup, wsf);
    }
    mi_cuda_get_op(MI_OP_KV_STORE, &ex, &sup, &wsf);
    if (ex && ex != ex_kv_store7d) {
        g_kv_prev = ex;
        mi_cuda_set_op(MI_OP_KV_STORE, ex_kv_store7d, sup, wsf);
    }
    mi_cuda_graph_register_step_op(ex_attn7d);
    mi_cuda_graph_register_step_op(ex_kv_store7d);
}

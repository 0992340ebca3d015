/* Phase 7c's install: fills the common hook table (model load/free, session open/close,
 * graph pass) and adds the fused FFN kernel to the CUDA dispatch. Nothing in common code
 * names these functions; they are reached only through mi_hooks and the dispatch. */
#include "phase7c_wiring/wiring7c.h"

/* FFN_SWIGLU: src0 W_gate [K, F], src1 W_up [K, F], src2 x F32 [K, N] -> F32 [F, N] */
bool mi7c_ffn_node_supported(const mi_tensor *n) {
    const mi_tensor *wg = n->src[0], *wu = n->src[1], *x = n->src[2];
    if (!wg || !wu || !x || x->type != MI_TYPE_F32 || n->type != MI_TYPE_F32) return false;
    if (wg->type != wu->type || wg->ne[0] != wu->ne[0] || wg->ne[1] != wu->ne[1] || wg->ne[0] != x->ne[0]) return false;
    if (wg->ne[2] != 1 || wg->ne[3] != 1 || x->ne[2] != 1 || x->ne[3] != 1) return false;
    if (n->ne[0] != wg->ne[1] || n->ne[1] != x->ne[1]) return false;
    return mi7c_ffn_supported(wg->type, wg->ne[0], x->ne[1]);
}
static size_t ws_ffn(const mi_tensor *n) { return mi7c_ffn_workspace(n->src[0]->type, n->src[0]->ne[0], n->src[2]->ne[1]); }
static mi_status ex_ffn(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *wg = n->src[0], *wu = n->src[1], *x = n->src[2];
    return mi7c_ffn_swiglu(mi_cuda_stream(c), wg->type, wg->data, wu->data, x->data, n->data, wg->ne[0], wg->ne[1],
                           x->ne[1], ws);
}

static const mi_cuda_kernel k_ffn = {"fused FFN gate/up + SwiGLU, warp per row, N <= 8", NULL, mi7c_ffn_node_supported, ex_ffn, ws_ffn, 0};

void mi_phase7c_install(void) {
    mi_hooks.model_loaded = m7c_model_loaded;
    mi_hooks.model_free = m7c_model_free;
    mi_hooks.session_open = m7c_session_open;
    mi_hooks.session_close = m7c_session_close;
    mi_hooks.graph_pass = m7c_graph_pass;
    mi_hooks.graph_epoch = m7c_graph_epoch;
    mi_cuda_add_kernel(MI_OP_FFN_SWIGLU, &k_ffn);
}

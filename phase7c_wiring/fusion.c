/* The fusion pass. matmul + bias needs none: MI_OP_MATMUL carries the bias as src2 and
 * the kernels add it in their epilogue. What it fuses is the FFN head:
 *   gate = W_gate @ h, up = W_up @ h, act = silu(gate) * up
 * becomes one MI_OP_FFN_SWIGLU node (src0 W_gate, src1 W_up, src2 h), which reads h
 * once and never writes gate/up to memory. Only where it pays and is safe: the CUDA
 * backend accepts the fused node (decode-sized batches, N <= MI7C_FUSE_MAX_N, quantized
 * weights of one type), gate and up feed nothing else and are not debug taps. */
#include "phase7c_wiring/wiring7c.h"
#include <stdlib.h>
#include <string.h>

static bool plain_matmul(const mi_tensor *t) {
    return t && t->op == MI_OP_MATMUL && !t->src[2] && !(t->flags & MI_T_OUTPUT);
}

int m7c_fuse_ffn(mi_graph *g, mi_backend *cuda) {
    const int n = g->n_nodes;
    int *uses = calloc((size_t)n + 1, sizeof *uses);
    bool *dead = calloc((size_t)n + 1, sizeof *dead);
    if (!uses || !dead) {   /* no memory for the pass: run the graph unfused */
        free(uses);
        free(dead);
        return 0;
    }
    for (int i = 0; i < n; i++) g->nodes[i]->id = i;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < MI_MAX_SRC; j++) {
            const mi_tensor *sr = g->nodes[i]->src[j];
            if (sr && sr->op != MI_OP_NONE && sr->id >= 0 && sr->id < n && g->nodes[sr->id] == sr) uses[sr->id]++;
        }
    int fused = 0;
    for (int i = 0; i < n; i++) {
        mi_tensor *act = g->nodes[i];
        if (act->op != MI_OP_SWIGLU) continue;
        mi_tensor *gate = act->src[0], *up = act->src[1];
        if (!plain_matmul(gate) || !plain_matmul(up) || gate == up) continue;
        if (uses[gate->id] != 1 || uses[up->id] != 1) continue;
        mi_tensor *h = gate->src[1], *wg = gate->src[0], *wu = up->src[0];
        if (up->src[1] != h || wg->type != wu->type || wg->ne[0] != wu->ne[0] || wg->ne[1] != wu->ne[1]) continue;
        if (h->ne[1] > MI7C_FUSE_MAX_N) continue;   /* prefill: the tiled matmuls win */
        mi_tensor probe = *act;
        probe.op = MI_OP_FFN_SWIGLU;
        probe.src[0] = wg;
        probe.src[1] = wu;
        probe.src[2] = h;
        probe.src[3] = NULL;
        if (!cuda->iface->supports(cuda, &probe)) continue;
        *act = probe;
        dead[gate->id] = dead[up->id] = true;
        fused++;
    }
    if (fused) {
        int w = 0;
        for (int i = 0; i < n; i++)
            if (!dead[i]) g->nodes[w++] = g->nodes[i];
        g->n_nodes = w;
        for (int i = 0; i < w; i++) g->nodes[i]->id = i;
    }
    free(uses);
    free(dead);
    return fused;
}

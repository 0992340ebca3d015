/* gates/support/dispatch_mask.h: a MATMUL dispatch without one weight type. */
#include "gates/support/dispatch_mask.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include <stdio.h>
#include <stdlib.h>

#define SAVED_MAX 64   /* above the dispatch's candidates per op: every one is masked */
static const mi_cuda_kernel *g_saved[SAVED_MAX];
static int g_n_saved;
static mi_type g_refused;
static bool g_active;

/* the first saved candidate that would run node (items on, supports) */
static const mi_cuda_kernel *saved_choice(const mi_tensor *n) {
    for (int i = 0; i < g_n_saved; i++) {
        const mi_cuda_kernel *k = g_saved[i];
        if (mi_cuda_items_on(k->items) && k->supports(n)) return k;
    }
    return NULL;
}
static bool sup_masked(const mi_tensor *n) { return n->src[0] && n->src[0]->type != g_refused && saved_choice(n); }
static size_t ws_masked(const mi_tensor *n) {
    const mi_cuda_kernel *k = saved_choice(n);
    return k && k->workspace ? k->workspace(n) : 0;
}
static mi_status run_masked(mi_cuda_ctx *c, const mi_tensor *n, void *ws) { return saved_choice(n)->run(c, n, ws); }
static const mi_cuda_kernel k_masked = {"gate: matmul without one weight type", NULL, sup_masked, run_masked, ws_masked, 0};

void gate_matmul_refuse(mi_type t) {
    if (g_active) gate_matmul_restore();
    g_n_saved = mi_cuda_kernels(MI_OP_MATMUL, g_saved, SAVED_MAX);
    if (g_n_saved > SAVED_MAX) {   /* a candidate left in place would still take the refused type */
        fprintf(stderr, "gate_matmul_refuse: %d MATMUL candidates, room for %d\n", g_n_saved, SAVED_MAX);
        abort();
    }
    for (int i = 0; i < g_n_saved; i++) mi_cuda_remove_kernel(MI_OP_MATMUL, g_saved[i]);
    g_refused = t;
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_masked);
    g_active = true;
}

void gate_matmul_restore(void) {
    if (!g_active) return;
    mi_cuda_remove_kernel(MI_OP_MATMUL, &k_masked);
    for (int i = g_n_saved - 1; i >= 0; i--) mi_cuda_add_kernel(MI_OP_MATMUL, g_saved[i]);
    g_active = false;
}

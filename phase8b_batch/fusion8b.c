/* Phase 8b's pass. b47: a decode step's RoPEs and scatters done by its paged attention (below).
 * b49: a Q6_K v joining the q + k run of its x (below).
 * b42: a batch step's gate/up run whose SwiGLU follows it. Where the two
 * matmuls of a run (8a's pass marks runs: d13) are read by nothing but the SWIGLU node right after
 * the run's last, and b35's SwiGLU takes that node, the last is marked MI_MM_FIXUP_NEXT and the
 * SwiGLU MI_SWIGLU_FIXUP: the run may leave its cut bands' partial sums to the SwiGLU, which sums
 * them as the fixup would while it reads the gate and up values (one launch fewer a layer). The
 * kernels decide at each step whether the run did (mi8b_gemm_f16s_run, mi8b_swiglu_fixup_f16).
 * Runs after 8a's pass (mi7c_add_fusion in install order). */
#include "phase8b_batch/batch8b.h"
#include "phase7c_wiring/wiring7c.h"
#include "common/graph/graph.h"

/* node t's references by the graph's nodes (as a source) */
static int uses_of(const mi_graph *g, const mi_tensor *t) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < MI_MAX_SRC; j++) n += g->nodes[i]->src[j] == t;
    return n;
}

static bool run_node(const mi_tensor *t, int role) {
    return t && t->op == MI_OP_MATMUL && mi_matmul_shared_x(t) == role && !(t->flags & MI_T_OUTPUT);
}

/* b47: a decode step's four marked by 8a's pass (q's RoPE, k's RoPE, the K scatter MI_RKV_ROWS_DEFER,
 * the V scatter MI_RKV_ROWS_LAST) followed right away by the paged attention of a decode step (one
 * row a sequence: p[7] 1, as many rows as sequences) reading q's RoPE and the two scatters, where
 * the RoPEs' outputs have no other reader and are not read back (b47's kernel writes neither)
 * and the dispatch gives both b47's kernels: the V scatter
 * becomes MI_RKV_ROWS_ATTN and the attention takes the RoPEs' inputs and v as src[4..6], so they
 * stay allocated until it runs. */
static int mark_attn_rkv_rows(mi_graph *g) {
    int marked = 0;
    for (int i = 4; i < g->n_nodes; i++) {
        mi_tensor *a = g->nodes[i], *const *q = &g->nodes[i - 4];
        if (a->op != MI_OP_ATTN_PAGED || a->p[7] != 1 || a->p[0] != a->src[0]->ne[1]) continue;
        if (q[0]->op != MI_OP_ROPE || q[1]->op != MI_OP_ROPE || q[2]->op != MI_OP_KV_SCATTER ||
            q[3]->op != MI_OP_KV_SCATTER || mi_rope_kv_role(q[0]) != MI_RKV_ROWS_DEFER ||
            mi_rope_kv_role(q[1]) != MI_RKV_ROWS_DEFER || mi_rope_kv_role(q[2]) != MI_RKV_ROWS_DEFER ||
            mi_rope_kv_role(q[3]) != MI_RKV_ROWS_LAST)
            continue;
        if (a->src[0] != q[0] || a->src[1] != q[2] || a->src[2] != q[3] || a->src[4] || a->src[5] || a->src[6] ||
            q[2]->src[0] != q[1] || uses_of(g, q[0]) != 1 || uses_of(g, q[1]) != 1 ||
            ((q[0]->flags | q[1]->flags) & MI_T_OUTPUT))   /* read back (a debug tap): b47 writes neither */
            continue;
        mi_tensor sv = *q[3], at = *a;   /* probes: the dispatch's answer for the marked pair */
        mi_rope_kv_set_role(&sv, MI_RKV_ROWS_ATTN);
        at.src[2] = &sv;
        at.src[4] = q[0]->src[0], at.src[5] = q[1]->src[0], at.src[6] = q[3]->src[0];
        if (!mi8b_rkv_attn_takes(&sv, &at)) continue;
        mi_rope_kv_set_role(q[3], MI_RKV_ROWS_ATTN);
        a->src[4] = at.src[4], a->src[5] = at.src[5], a->src[6] = at.src[6];
        marked++;
    }
    return marked;
}

/* b49: a run of Q4_K matmuls (8a's d13 marks: q and k) followed right away
 * by a plain Q6_K matmul of the same x and K (the 7B's Q6_K v), where the dispatch gives the
 * run's last the defer role's kernel and the Q6_K one the mixed run's last: the Q4_K last becomes
 * a defer node and the Q6_K one the run's last (mi8b_mixed_run_takes) */
static int mark_mixed_runs(mi_graph *g) {
    int marked = 0;
    if (!mi8b_f16s_mixed_on()) return 0;
    for (int i = 1; i + 1 < g->n_nodes; i++) {
        mi_tensor *k = g->nodes[i], *v = g->nodes[i + 1];
        if (!run_node(k, MI_MM_RUN_LAST) || !run_node(g->nodes[i - 1], MI_MM_RUN_DEFER) || !run_node(v, 0)) continue;
        if (k->src[0]->type != MI_TYPE_Q4_K || v->src[0]->type != MI_TYPE_Q6_K || v->src[1] != k->src[1] ||
            v->src[0]->ne[0] != k->src[0]->ne[0] || g->nodes[i - 1]->src[1] != k->src[1] || k->p[1] || v->p[1])
            continue;
        int defer = 0;   /* the run's nodes before k: with k and v at most MI8A_RUN_MAX (8a's record holds no more) */
        while (defer < i && run_node(g->nodes[i - 1 - defer], MI_MM_RUN_DEFER) && g->nodes[i - 1 - defer]->src[1] == k->src[1])
            defer++;
        if (defer + 2 > MI8A_RUN_MAX) continue;
        mi_tensor pk = *k, pv = *v;   /* probes: the dispatch's answer for the roles */
        pk.p[0] = MI_MM_RUN_DEFER;
        pv.p[0] = MI_MM_RUN_LAST;
        if (!mi8b_mixed_run_takes(&pk, &pv)) continue;
        k->p[0] = MI_MM_RUN_DEFER;
        v->p[0] = MI_MM_RUN_LAST;
        marked++;
    }
    return marked;
}

int mi8b_fuse_batch(mi_graph *g, mi_backend *cuda) {
    (void)cuda;
    int marked = mark_attn_rkv_rows(g) + mark_mixed_runs(g);
    /* b42 off (or b35, whose kernel takes the cut bands): no marks, so a graph built with it off
     * fuses nothing of it (the kernels also ask at each call) */
    if (!mi8b_f16s_fixup_next_on()) return marked;
    for (int i = 2; i < g->n_nodes; i++) {
        mi_tensor *sw = g->nodes[i], *up = g->nodes[i - 1], *gate = g->nodes[i - 2];
        if (sw->op != MI_OP_SWIGLU || sw->src[0] != gate || sw->src[1] != up) continue;
        /* a run of exactly these two: the gate its first (no DEFER of the same x before it) */
        if (!run_node(gate, MI_MM_RUN_DEFER) || !run_node(up, MI_MM_RUN_LAST) || gate->src[1] != up->src[1]) continue;
        if (i >= 3 && run_node(g->nodes[i - 3], MI_MM_RUN_DEFER) && g->nodes[i - 3]->src[1] == up->src[1]) continue;
        if (gate->src[0]->ne[1] != up->src[0]->ne[1] || !mi8b_swiglu_f16_takes(sw)) continue;
        if (uses_of(g, gate) != 1 || uses_of(g, up) != 1) continue;
        up->p[1] = MI_MM_FIXUP_NEXT;
        sw->p[0] = MI_SWIGLU_FIXUP;
        marked++;
    }
    return marked;
}

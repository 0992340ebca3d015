/* Phase 8a's fusion pass: fewer kernels per decode step. For one-token graphs (the residual
 * add also for a batch step's rows where 8b's kernels take it) it folds
 *   the residual add into the matmul before it:  add(r, matmul(W, x))  ->  matmul_add(W, x, r)
 *   the RMS norm into the matmul it feeds:       matmul(W, rms_norm(x, w))  ->  norm_matmul(W, x, w)
 *                                                ffn_swiglu(Wg, Wu, rms_norm(x, w)) -> norm_ffn_swiglu
 * A norm is folded only when every reader of it can take it (else the norm must run anyway and
 * folding it gains nothing) and it has at most MINFER_NORM_FOLD_READERS readers (default 1); nothing is folded across a debug tap or an output. A node is
 * rewritten only when the CUDA backend accepts its fused form (its supports(), which asks the
 * dispatch: items d1 and d2 off leave the graph as it was). The fused node takes the place
 * (and the name) of the node it replaces, so readers keep their pointers; the folded node
 * leaves the graph. Then it marks runs of matmuls sharing one quantized x (d7) and runs of
 * Q4_K matmuls of one x computed in one launch (d13; with the norm of x folded in where the run
 * alone reads it, d17), and a step's RoPE and KV stores done by one launch (d14), below. Runs after 7c's FFN fusion
 * (mi7c_add_fusion). */
#include "phase8a_decode/decode8a.h"
#include "phase7c_wiring/wiring7c.h"
#include "common/graph/graph.h"
#include "common/backend/backend.h"
#include "common/core/mi_settings.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "phase7b_ops/ops7b.h"
#include <stdlib.h>
#include <string.h>

#define MAX_READERS 8

typedef struct {
    mi_graph *g;
    mi_backend *cuda;
    int *uses;                        /* [n] references from other nodes */
    int (*readers)[MAX_READERS];      /* [n] the first MAX_READERS readers' node ids */
    bool *dead;
} pass;

static bool is_node(const pass *p, const mi_tensor *t) {
    return t && t->op != MI_OP_NONE && t->id >= 0 && t->id < p->g->n_nodes && p->g->nodes[t->id] == t;
}

static bool one_token(const mi_tensor *x) { return x && x->type == MI_TYPE_F32 && mi_nrows(x) == 1; }
/* the residual fold's x: one token, or on the CUDA backend a batch step's rows (8b's b36: its
 * kernel's supports() says which rows it takes). Not many rows for another target: the CPU runs
 * every fused op, but a batch's matmul carries what the CPU needs to compute each row as its
 * sequence alone (src3), which the fused node drops */
static bool residual_rows_ok(const pass *p, const mi_tensor *x) {
    if (one_token(x)) return true;
    return x && x->type == MI_TYPE_F32 && mi_nrows(x) > 1 && !strcmp(p->cuda->iface->name(p->cuda), "cuda");
}

static bool accepts(const pass *p, mi_tensor *probe) { return p->cuda->iface->supports(p->cuda, probe); }

/* add(r, matmul(W, x)) with the matmul read by nothing else */
static int fuse_residuals(pass *p) {
    int fused = 0;
    for (int i = 0; i < p->g->n_nodes; i++) {
        mi_tensor *a = p->g->nodes[i];
        if (a->op != MI_OP_ADD || p->dead[i]) continue;
        for (int side = 1; side >= 0; side--) {
            mi_tensor *mm = a->src[side], *r = a->src[1 - side];
            if (!is_node(p, mm) || mm->op != MI_OP_MATMUL || mm->src[2] || (mm->flags & MI_T_OUTPUT)) continue;
            if (p->uses[mm->id] != 1 || !residual_rows_ok(p, mm->src[1]) || !r || r->type != MI_TYPE_F32) continue;
            if (r->ne[0] != a->ne[0] || mi_nrows(r) != mi_nrows(a) || mm->ne[0] != a->ne[0] ||
                mi_nrows(mm) != mi_nrows(a) || mi_nrows(mm) != mi_nrows(mm->src[1]))
                continue;
            mi_tensor probe = *a;
            probe.op = MI_OP_MATMUL_ADD;
            memset(probe.p, 0, sizeof probe.p);
            probe.src[0] = mm->src[0];
            probe.src[1] = mm->src[1];
            probe.src[2] = r;
            probe.src[3] = NULL;
            if (!accepts(p, &probe)) continue;
            *a = probe;
            p->dead[mm->id] = true;
            fused++;
            break;
        }
    }
    return fused;
}

/* a reader of norm node nn in its fused form: matmul(W, nn) or ffn_swiglu(Wg, Wu, nn) */
static bool fused_reader(const mi_tensor *rd, const mi_tensor *nn, mi_tensor *out) {
    *out = *rd;
    if (rd->op == MI_OP_MATMUL && rd->src[1] == nn && rd->src[0] != nn && rd->src[2] != nn) {
        out->op = MI_OP_NORM_MATMUL;
    } else if (rd->op == MI_OP_FFN_SWIGLU && rd->src[2] == nn && rd->src[0] != nn && rd->src[1] != nn) {
        out->op = MI_OP_NORM_FFN_SWIGLU;
        out->src[2] = nn->src[0];
    } else {
        return false;
    }
    if (rd->op == MI_OP_MATMUL) out->src[1] = nn->src[0];
    out->src[3] = nn->src[1];
    memset(out->p, 0, sizeof out->p);
    out->p[1] = nn->p[1];   /* eps (mi_norm_eps -> mi_fused_norm_eps) */
    return true;
}

/* MINFER_NORM_FOLD_READERS=N: fold a norm into at most N readers (default 1). Each reader of a
 * folded norm computes it again in every block before its matmul, so folding one norm into q, k
 * and v trades one norm kernel for three longer prologues: on the 7B that made decode 3% slower
 * (results/notes/PHASE8A.md), while folding into the FFN's one fused reader pays. */
static int fold_readers_max(void) {
    static long v = -1;
    return (int)mi_setting_int_once("MINFER_NORM_FOLD_READERS", 1, MAX_READERS, 1, &v);
}

static int fuse_norms(pass *p, int max_readers) {
    int fused = 0;
    for (int i = 0; i < p->g->n_nodes; i++) {
        mi_tensor *nn = p->g->nodes[i];
        if (nn->op != MI_OP_RMS_NORM || p->dead[i] || (nn->flags & MI_T_OUTPUT)) continue;
        if (!one_token(nn->src[0]) || mi_norm_group(nn) != nn->ne[0] || !nn->src[1]) continue;
        const int nr = p->uses[i];
        if (nr < 1 || nr > max_readers) continue;
        mi_tensor probes[MAX_READERS];
        bool ok = true;
        for (int k = 0; k < nr && ok; k++) {
            const mi_tensor *rd = p->g->nodes[p->readers[i][k]];
            ok = !p->dead[rd->id] && fused_reader(rd, nn, &probes[k]) && accepts(p, &probes[k]);
        }
        if (!ok) continue;
        for (int k = 0; k < nr; k++) *p->g->nodes[p->readers[i][k]] = probes[k];
        p->dead[i] = true;
        fused += nr;
    }
    return fused;
}

/* d7: consecutive one-token matmuls of one x, each of which the dispatch gives to 7b's kernel
 * (the 0.5B's q, k and v): the first is marked to quantize x for the run, the rest to read its
 * copy, where the dispatch gives the marked nodes d7's kernels (item on, same shapes). Runs on
 * the compacted graph: a run is consecutive in the final order. */
static bool xq_role_ok(const mi_tensor *n, int role) {
    mi_tensor probe = *n;
    probe.p[0] = role;
    return mi_cuda_choice(&probe) == mi8a_shared_x_kernel(role);
}
static bool xq_candidate(const mi_tensor *n) {
    return n->op == MI_OP_MATMUL && one_token(n->src[1]) && n->src[0] && mi_matmul_shared_x(n) == 0 &&
           mi_cuda_choice(n) == mi7b_matmul_kernel();
}
static int mark_shared_x(mi_graph *g) {
    int marked = 0;
    for (int i = 0; i + 1 < g->n_nodes; i++) {
        mi_tensor *a = g->nodes[i];
        if (!xq_candidate(a) || !xq_role_ok(a, MI_MM_X_FIRST)) continue;
        int j = i + 1;
        for (; j < g->n_nodes; j++) {
            const mi_tensor *b = g->nodes[j];
            if (!xq_candidate(b) || b->src[1] != a->src[1] || b->src[0]->type != a->src[0]->type ||
                b->src[0]->ne[0] != a->src[0]->ne[0] || !xq_role_ok(b, MI_MM_X_NEXT))
                break;
        }
        if (j - i < 2) continue;
        a->p[0] = MI_MM_X_FIRST;
        for (int k = i + 1; k < j; k++) g->nodes[k]->p[0] = MI_MM_X_NEXT;
        marked += j - i;
        i = j - 1;
    }
    return marked;
}

/* the nodes marked dead[] (by node id) leave the graph; the rest keep their order and are
 * numbered again */
static void drop_dead(mi_graph *g, const bool *dead) {
    int w = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!dead[i]) g->nodes[w++] = g->nodes[i];
    g->n_nodes = w;
    for (int i = 0; i < w; i++) g->nodes[i]->id = i;
}

/* d13: consecutive one-token matmuls of one x and weight format that the dispatch gives to 8a's
 * Q4_K streaming kernel (the 7B's q, k and, where Q4_K, v) or to 7b's warp-per-row kernel (the
 * 0.5B's q, k, v): all but the last marked MI_MM_RUN_DEFER, the last MI_MM_RUN_LAST, where the
 * dispatch gives the marked nodes d13's kernels (item on, same shapes). At most MI8A_RUN_MAX a
 * run; no graph output in one. Before d7's marks, which then take the runs d13 leaves. */
static const struct mi_cuda_kernel *run_plain(const mi_tensor *n) {
    if (n->op != MI_OP_MATMUL || !n->src[1] || n->src[1]->type != MI_TYPE_F32 || !n->src[0] ||
        mi_matmul_shared_x(n) != 0 || (n->flags & MI_T_OUTPUT))
        return NULL;
    const struct mi_cuda_kernel *k = mi_cuda_choice(n);
    return mi8a_run_plain(k, one_token(n->src[1])) ? k : NULL;
}
static bool run_role_ok(const mi_tensor *n, int role, const struct mi_cuda_kernel *plain) {
    mi_tensor probe = *n;
    probe.p[0] = role;
    return mi_cuda_choice(&probe) == mi8a_run_kernel(role, plain, false);
}
/* d17: the run [i, j) reads x = rms_norm(x0, w), which is no output and no tap, and every other
 * reader of x is a one-token matmul that a NORM_MATMUL candidate takes (none takes the 7B's Q6_K
 * v beside a run of q and k, so that norm stays). x may have many rows where the dispatch gives
 * the run's nodes an upper layer's norm kernels (mi8a_run_add: 8b's b24); the probes decide. The
 * run's nodes become NORM_MATMUL of x0 (the norm's weight src[3], its eps pf(1)), each marked as
 * before, where the dispatch gives them d17's candidates; the other readers become NORM_MATMUL
 * too; the norm leaves the graph (dead[]). Every form applies MI_OP_RMS_NORM's arithmetic, so
 * the bits do not change. */
#define FOLD_MAX_OTHERS 4
static void as_norm_mm(mi_tensor *n, const mi_tensor *norm, int role) {
    n->op = MI_OP_NORM_MATMUL;
    n->src[1] = norm->src[0];
    n->src[3] = norm->src[1];
    mi_tensor_set_pf(n, 1, mi_norm_eps(norm));
    n->p[0] = role;
}
static bool other_reader_ok(const mi_tensor *n, const mi_tensor *norm) {
    if (n->op != MI_OP_MATMUL || n->p[0] != 0 || n->src[1] != norm || n->src[3] || (n->flags & MI_T_OUTPUT)) return false;
    mi_tensor probe = *n;
    as_norm_mm(&probe, norm, 0);
    return mi_cuda_choice(&probe) != NULL;
}
/* the readers of x outside [i, j) into others (at most FOLD_MAX_OTHERS); false when x cannot go */
static bool norm_readers(const mi_graph *g, const mi_tensor *x, int i, int j, mi_tensor **others, int *n_others) {
    *n_others = 0;
    if (!x || x->op != MI_OP_RMS_NORM || x->id < 0 || x->id >= g->n_nodes || g->nodes[x->id] != x ||
        (x->flags & MI_T_OUTPUT) || x == g->output || !x->src[0] || !x->src[1] || x->src[0]->type != MI_TYPE_F32 ||
        mi_norm_group(x) != x->ne[0])
        return false;
    int in_run = 0;
    for (int k = 0; k < g->n_nodes; k++)
        for (int s = 0; s < MI_MAX_SRC; s++)
            if (g->nodes[k]->src[s] == x) {
                if (k >= i && k < j) in_run++;
                else if (*n_others == FOLD_MAX_OTHERS || !other_reader_ok(g->nodes[k], x)) return false;
                else others[(*n_others)++] = g->nodes[k];
                break;
            }
    return in_run == j - i;
}
static bool fold_norm(mi_graph *g, int i, int j, const struct mi_cuda_kernel *plain, bool *dead) {
    mi_tensor *norm = g->nodes[i]->src[1], *others[FOLD_MAX_OTHERS];
    int n_others;
    if (!norm_readers(g, norm, i, j, others, &n_others)) return false;
    for (int k = i; k < j; k++) {
        mi_tensor probe = *g->nodes[k];
        const int role = k + 1 < j ? MI_MM_RUN_DEFER : MI_MM_RUN_LAST;
        as_norm_mm(&probe, norm, role);
        const struct mi_cuda_kernel *want = mi8a_run_kernel(role, plain, true);   /* NULL: runs of plain take no norm */
        if (!want || mi_cuda_choice(&probe) != want) return false;
    }
    for (int k = i; k < j; k++) as_norm_mm(g->nodes[k], norm, k + 1 < j ? MI_MM_RUN_DEFER : MI_MM_RUN_LAST);
    for (int k = 0; k < n_others; k++) as_norm_mm(others[k], norm, 0);
    dead[norm->id] = true;
    return true;
}
static int mark_runs(mi_graph *g) {
    int marked = 0;
    bool *dead = calloc((size_t)g->n_nodes + 1, sizeof *dead);   /* no memory: no norm folded */
    for (int k = 0; k < g->n_nodes; k++) g->nodes[k]->id = k;
    for (int i = 0; i + 1 < g->n_nodes; i++) {
        mi_tensor *a = g->nodes[i];
        const struct mi_cuda_kernel *plain = run_plain(a);
        if (!plain) continue;
        int j = i + 1;
        for (; j < g->n_nodes && j - i < MI8A_RUN_MAX; j++) {
            const mi_tensor *b = g->nodes[j];
            if (run_plain(b) != plain || b->src[1] != a->src[1] || b->src[0]->type != a->src[0]->type ||
                b->src[0]->ne[0] != a->src[0]->ne[0])
                break;
        }
        bool ok = j - i >= 2;
        for (int k = i; ok && k < j; k++)
            ok = run_role_ok(g->nodes[k], k + 1 < j ? MI_MM_RUN_DEFER : MI_MM_RUN_LAST, plain);
        if (!ok) continue;
        if (!dead || !fold_norm(g, i, j, plain, dead))
            for (int k = i; k < j; k++) g->nodes[k]->p[0] = k + 1 < j ? MI_MM_RUN_DEFER : MI_MM_RUN_LAST;
        marked += j - i;
        i = j - 1;
    }
    if (dead) {   /* the folded norms leave the graph */
        drop_dead(g, dead);
        free(dead);
    }
    return marked;
}

/* d14: a one-token step's q RoPE, k RoPE, K store of that k and V store, consecutive (the
 * builder's order), each of which the dispatch would give d14's kernel for its role, with both
 * RoPEs on d8's kernel alone (d14 repeats its arithmetic): the first three marked MI_RKV_DEFER,
 * the V store MI_RKV_LAST, which also takes the RoPEs' inputs as sources (src[2], src[3]): its
 * launch reads them, so the allocator must keep them until it runs (else the k RoPE's output
 * could be given the memory of q, whose last reader would be the deferred q RoPE). The q RoPE's
 * output is read by attention, after it; the k RoPE's only by the K store, and memory released
 * there can go only to nodes after the V store (the V store aliases its cache), which run after
 * the launch. Runs on the compacted graph. */
static bool rkv_role_ok(const mi_tensor *n, int role, mi_tensor *xq, mi_tensor *xk) {
    mi_tensor probe = *n;
    mi_rope_kv_set_role(&probe, role);
    if (role == MI_RKV_LAST) probe.src[2] = xq, probe.src[3] = xk;
    const struct mi_cuda_kernel *k = mi8a_rope_kv_kernel(n, role);
    return k && mi_cuda_choice(&probe) == k;
}
static bool rkv_quad(mi_tensor *const *q) {
    const mi_tensor *rq = q[0], *rk = q[1], *sk = q[2], *sv = q[3];
    if (rq->op != MI_OP_ROPE || rk->op != MI_OP_ROPE || sk->op != MI_OP_KV_STORE || sv->op != MI_OP_KV_STORE) return false;
    if (!one_token(rq->src[0]) || !one_token(rk->src[0]) || !one_token(sv->src[0]) || sk->src[0] != rk) return false;
    if (rq->src[1] != rk->src[1] || memcmp(rq->p, rk->p, 4 * sizeof rq->p[0])) return false;   /* positions, hd, mode, n_rot, base */
    const mi_tensor *ck = sk->src[1], *cv = sv->src[1];
    if (sv->src[2] || sv->src[3]) return false;
    if (!ck || !cv || ck->type != cv->type || ck->ne[0] != cv->ne[0] || sv->src[0]->ne[0] != ck->ne[0]) return false;
    if (mi_cuda_choice(rq) != mi8a_rope_pairs_kernel() || mi_cuda_choice(rk) != mi8a_rope_pairs_kernel()) return false;
    for (int k = 0; k < 4; k++)
        if (!rkv_role_ok(q[k], k < 3 ? MI_RKV_DEFER : MI_RKV_LAST, rq->src[0], rk->src[0])) return false;
    return true;
}
/* the same four of a step of many sequences (rows T >= 1, KV_SCATTER to the step's cache rows):
 * an upper layer's candidates (mi8a_rope_kv_rows_add), roles MI_RKV_ROWS_*, the V scatter holding
 * q's RoPE input as src[3] (its src[2] is the rows; k's input needs no slot, fusion's header) */
static bool rkv_rows_role_ok(const mi_tensor *n, int role, mi_tensor *xq) {
    mi_tensor probe = *n;
    mi_rope_kv_set_role(&probe, role);
    if (role == MI_RKV_ROWS_LAST) probe.src[3] = xq;
    const struct mi_cuda_kernel *k = mi8a_rope_kv_kernel(n, role);
    return k && mi_cuda_choice(&probe) == k;
}
static bool rkv_quad_rows(mi_tensor *const *q) {
    const mi_tensor *rq = q[0], *rk = q[1], *sk = q[2], *sv = q[3];
    if (rq->op != MI_OP_ROPE || rk->op != MI_OP_ROPE || sk->op != MI_OP_KV_SCATTER || sv->op != MI_OP_KV_SCATTER)
        return false;
    if (!rq->src[0] || !rk->src[0] || !sv->src[0] || sk->src[0] != rk || sv->src[3] || !sk->src[2] ||
        sk->src[2] != sv->src[2])
        return false;
    const int64_t T = mi_nrows(rq->src[0]);
    if (mi_nrows(rk->src[0]) != T || mi_nrows(sv->src[0]) != T || rq->src[0]->ne[1] != T) return false;
    if (rq->src[1] != rk->src[1] || memcmp(rq->p, rk->p, 4 * sizeof rq->p[0])) return false;   /* positions, hd, mode, n_rot, base */
    const mi_tensor *ck = sk->src[1], *cv = sv->src[1];
    if (!ck || !cv || ck->type != cv->type || ck->ne[0] != cv->ne[0] || sv->src[0]->ne[0] != ck->ne[0]) return false;
    if (mi_cuda_choice(rq) != mi8a_rope_pairs_kernel() || mi_cuda_choice(rk) != mi8a_rope_pairs_kernel()) return false;
    for (int k = 0; k < 4; k++)
        if (!rkv_rows_role_ok(q[k], k < 3 ? MI_RKV_ROWS_DEFER : MI_RKV_ROWS_LAST, rq->src[0])) return false;
    return true;
}
static int mark_rope_kv(mi_graph *g) {
    int marked = 0;
    for (int i = 0; i + 3 < g->n_nodes; i++) {
        mi_tensor **q = g->nodes + i;
        const bool rows = rkv_quad_rows(q);
        if (!rows && !rkv_quad(q)) continue;
        for (int k = 0; k < 4; k++)
            mi_rope_kv_set_role(q[k], k < 3 ? (rows ? MI_RKV_ROWS_DEFER : MI_RKV_DEFER) : (rows ? MI_RKV_ROWS_LAST : MI_RKV_LAST));
        if (rows) {   /* the V scatter's src[2] is the rows */
            q[3]->src[3] = q[0]->src[0];
        } else {
            q[3]->src[2] = q[0]->src[0];
            q[3]->src[3] = q[1]->src[0];
        }
        marked += 4;
        i += 3;
    }
    return marked;
}

/* d30: a one-token four marked above (the V store MI_RKV_LAST) followed right away by the
 * attention that reads q's RoPE and the two stores: where the dispatch gives the attention d30's
 * kernel, the V store becomes MI_RKV_ATTN and the attention does the four's work
 * (mi_attn_does_rkv). It takes the RoPEs' inputs and v as src[3..5], and k's RoPE, which it also
 * writes, as src[6], so they stay allocated until it runs: its output cannot be given their
 * memory (k's RoPE would otherwise be free once the K store, its last reader, has run). Only in graphs whose small kernels are not
 * programmatic dependents (no MI_T_EARLY, d10's rule): there d14's own launch costs a whole
 * launch, while as a programmatic dependent it overlaps the run before it and folding it into
 * the attention only puts its round trip in front of the attention's. Measured on the H200
 * (results/notes/PHASE8A.md): the 0.5B +2.8%, the 7B (early) -1.6%. */
static int mark_attn_rkv(mi_graph *g) {
    int marked = 0;
    for (int i = 0; i + 4 < g->n_nodes; i++) {
        mi_tensor **q = g->nodes + i, *a = q[4];
        if (a->flags & MI_T_EARLY) continue;
        if (mi_rope_kv_role(q[3]) != MI_RKV_LAST || q[3]->op != MI_OP_KV_STORE || a->op != MI_OP_ATTN ||
            a->src[0] != q[0] || a->src[1] != q[2] || a->src[2] != q[3] || a->src[3] || a->src[4] || a->src[5] ||
            a->src[6] || !one_token(a->src[0]))
            continue;
        mi_tensor sv = *q[3], at = *a;
        mi_rope_kv_set_role(&sv, MI_RKV_ATTN);
        mi_attn_set_rkv(&at);
        at.src[3] = q[0]->src[0], at.src[4] = q[1]->src[0], at.src[5] = q[3]->src[0], at.src[6] = q[1];
        if (mi_cuda_choice(&sv) != mi8a_rope_kv_kernel(q[3], MI_RKV_ATTN) || mi_cuda_choice(&at) != mi8a_attn_rkv_kernel())
            continue;
        mi_rope_kv_set_role(q[3], MI_RKV_ATTN);
        mi_attn_set_rkv(a);
        a->src[3] = at.src[3], a->src[4] = at.src[4], a->src[5] = at.src[5], a->src[6] = at.src[6];
        marked++;
        i += 4;
    }
    return marked;
}

/* d31: a one-token attention on d20's kernel (alone or with d30's work) whose next node is d2's
 * one-token matmul + residual of its output, with a weight of 32-element activation blocks (the
 * 0.5B's o projection): the attention may write its output quantized for it (mi_attn_quant_out;
 * the item is read at each launch) */
static int mark_attn_quant_out(mi_graph *g) {
    int marked = 0;
    for (int i = 0; i + 1 < g->n_nodes; i++) {
        mi_tensor *a = g->nodes[i], *o = g->nodes[i + 1];
        if (a->op != MI_OP_ATTN || !one_token(a->src[0]) || o->op != MI_OP_MATMUL_ADD || o->src[1] != a || !o->src[0])
            continue;
        const int64_t K = a->ne[0];
        if (K % 32 || mi7b_act_row_bytes(o->src[0]->type, K) != (size_t)(K / 32) * 36) continue;
        const struct mi_cuda_kernel *ka = mi_cuda_choice(a);
        if ((ka != mi8a_attn_step_kernel() && ka != mi8a_attn_rkv_kernel()) || mi_cuda_choice(o) != mi8a_add_fused_kernel())
            continue;
        mi_attn_set_quant_out(a);
        marked++;
    }
    return marked;
}

/* d10's hint (MI_T_EARLY on every node): every graph but the one-token steps of a model narrower
 * than MI8A_PDL_MIN_EMBD (MINFER_PDL_MIN_EMBD moves it, for measurements). Measured on the H200
 * (results/notes/PHASE8A.md), the small kernels as programmatic dependents: 7B (3,584 wide)
 * tg128 +5.6%, pp512 +1.1%; 0.5B (896) pp512 +2.4% but tg128 -7.6%. The width is the first RMS
 * norm's, read before the folds take norms out of the graph. */
static void mark_early(mi_graph *g) {
    static long min_embd = -1;
    const int64_t lim = mi_setting_int_once("MINFER_PDL_MIN_EMBD", 1, 1L << 30, MI8A_PDL_MIN_EMBD, &min_embd);
    int64_t width = -1, rows = 0;
    for (int i = 0; i < g->n_nodes && width < 0; i++) {
        const mi_tensor *t = g->nodes[i];
        if (t->op == MI_OP_RMS_NORM && t->src[0]) width = t->ne[0], rows = mi_nrows(t->src[0]);
    }
    if (rows == 1 && width < lim) return;
    for (int i = 0; i < g->n_nodes; i++) g->nodes[i]->flags |= MI_T_EARLY;
}

int mi8a_fuse_decode(mi_graph *g, mi_backend *cuda) { return mi8a_fuse_decode_with(g, cuda, fold_readers_max()); }

int mi8a_fuse_decode_with(mi_graph *g, mi_backend *cuda, int max_norm_readers) {
    mark_early(g);
    const int n = g->n_nodes;
    pass p = {g, cuda, calloc((size_t)n + 1, sizeof(int)), calloc((size_t)n + 1, sizeof *p.readers),
              calloc((size_t)n + 1, sizeof(bool))};
    int fused = 0;
    if (p.uses && p.readers && p.dead) {   /* no memory for the pass: the graph runs unfused */
        for (int i = 0; i < n; i++) g->nodes[i]->id = i;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < MI_MAX_SRC; j++) {
                const mi_tensor *sr = g->nodes[i]->src[j];
                if (!is_node(&p, sr)) continue;
                bool again = false;   /* a node reading sr twice counts once */
                for (int k = 0; k < j; k++) again = again || g->nodes[i]->src[k] == sr;
                if (again) continue;
                if (p.uses[sr->id] < MAX_READERS) p.readers[sr->id][p.uses[sr->id]] = i;
                p.uses[sr->id]++;
            }
        fused = fuse_residuals(&p) + fuse_norms(&p, max_norm_readers);
    }
    if (fused) drop_dead(g, p.dead);
    free(p.uses);
    free(p.readers);
    free(p.dead);
    mark_runs(g);
    mark_shared_x(g);
    mark_rope_kv(g);
    mark_attn_rkv(g);
    mark_attn_quant_out(g);
    return fused;
}

/* Phase 8a's items and kernels as dispatch candidates for the fused decode ops, and its fusion
 * pass (run by 7c's graph pass after the FFN fusion). A fused op has no lower-phase kernel:
 * turning its item off removes every candidate, so the fusion pass, which asks supports()
 * first, leaves the graph unfused. Each supports() is the kernel's own rule first (cheap),
 * then the node contract of the matmul it contains (7b's), so no fused node reaches a kernel
 * with a shape the unfused ops would refuse. */
#include "phase8a_decode/decode8a.h"
#include "phase8a_decode/install8a.h"
#include "common/core/mi_settings.h"
#include "phase7e_perf/perf7e.h"
#include "phase7b_ops/ops7b.h"
#include "phase7c_wiring/wiring7c.h"
#include "phase7d_graphs/graphs7d.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "common/graph/graph.h"
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const void *ptr(const mi_tensor *t) { return t ? t->data : NULL; }
static bool aligned16(const mi_tensor *t) { return t && !((uintptr_t)t->data & 15u); }
/* a one-row F32 operand of n elements (an activation has no data yet at assignment) */
static bool f32_vec(const mi_tensor *t, int64_t n) {
    return t && t->type == MI_TYPE_F32 && t->ne[0] == n && mi_nrows(t) == 1;
}

/* the matmul inside a fused node: W = src0, x = src1, bias = src2 (NORM_MATMUL) or none */
static bool matmul_part_ok(const mi_tensor *n, bool with_bias) {
    mi_tensor mm = *n;
    mm.op = MI_OP_MATMUL;
    if (!with_bias) mm.src[2] = NULL;
    mm.src[3] = NULL;
    return mi_nrows(n->src[1]) == 1 && mi7b_matmul_node_supported(&mm);
}

/* NORM_MATMUL: src0 W [K, M], src1 x [K, 1], src2 bias or NULL, src3 norm weight [K] */
static bool norm_mm_ok(const mi_tensor *n) {
    return n->src[0] && n->src[1] && f32_vec(n->src[3], n->src[0]->ne[0]) && n->src[3]->data && matmul_part_ok(n, true);
}
/* MATMUL_ADD: src0 W [K, M], src1 x [K, 1], src2 r [M, 1] */
static bool mm_add_ok(const mi_tensor *n) {
    return n->src[0] && n->src[1] && f32_vec(n->src[2], n->src[0]->ne[1]) && matmul_part_ok(n, false);
}
static bool q4k_rule(const mi_tensor *n, bool norm) {
    const mi_tensor *w = n->src[0];
    return w && mi8a_matvec_q4k_fused_supported(w->type, w->ne[0], norm) && aligned16(w);
}
static bool fused_rule(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return w && mi8a_matvec_fused_supported(w->type, w->ne[0], w->ne[1]);
}

static bool sup_norm_q4k(const mi_tensor *n) {
    return mi_matmul_shared_x(n) == 0 && q4k_rule(n, true) && aligned16(n->src[3]) && norm_mm_ok(n);
}
static bool sup_add_q4k(const mi_tensor *n) { return q4k_rule(n, false) && mm_add_ok(n); }
static bool sup_add_fused(const mi_tensor *n) { return fused_rule(n) && mm_add_ok(n); }

/* d29's and d31's quantized row: the node just run wrote the quantized row of its output (7b's
 * quantizer's 36-byte blocks) at the start of the workspace (the dispatch's record,
 * mi_cuda_ws_copy_*); the node run right after it reads that row when its weight reads x in
 * those blocks */
static bool yq_ready(const mi_tensor *w, const void *x, const void *ws) {
    const int64_t K = w->ne[0];
    return mi7b_act_row_bytes(w->type, K) == (size_t)(K / 32) * 36 && mi_cuda_ws_copy_ready(MI_WS_COPY_Q8_1, x, ws, K, 1);
}
static mi_status run_norm_q4k(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    return mi8a_matvec_q4k_fused(mi_cuda_stream(c), w->type, w->data, n->src[1]->data, n->src[3]->data,
                                 mi_fused_norm_eps(n), ptr(n->src[2]), NULL, n->data, w->ne[0], w->ne[1]);
}
static mi_status run_add_q4k(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    return mi8a_matvec_q4k_fused(mi_cuda_stream(c), w->type, w->data, n->src[1]->data, NULL, 0.0f, NULL,
                                 n->src[2]->data, n->data, w->ne[0], w->ne[1]);
}
/* x quantized by the attention right before it (d31's record): the same rows on that row */
static mi_status run_add_fused(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    const bool ready = yq_ready(w, n->src[1]->data, ws);
    mi_cuda_ws_copy_clear();
    if (ready)
        return mi8a_matvec_fused_qx(mi_cuda_stream(c), w->type, w->data, ws, NULL, n->src[2]->data, n->data, w->ne[0],
                                    w->ne[1]);
    return mi8a_matvec_fused(mi_cuda_stream(c), w->type, w->data, n->src[1]->data, NULL, 0.0f, NULL,
                             n->src[2]->data, n->data, w->ne[0], w->ne[1]);
}

/* MATMUL (W, x, bias), Q4_K, one token: 7e's e12 + e14 kernel itself, through 8a's launcher so
 * it can be launched as a programmatic dependent (d6) like the fused forms around it */
static bool sup_mm_q4k(const mi_tensor *n) {
    return q4k_rule(n, false) && n->src[1] && mi_nrows(n->src[1]) == 1 && mi7b_matmul_node_supported(n);
}
static mi_status run_mm_q4k(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    return mi8a_matvec_q4k_fused(mi_cuda_stream(c), w->type, w->data, n->src[1]->data, NULL, 0.0f, ptr(n->src[2]), NULL,
                                 n->data, w->ne[0], w->ne[1]);
}
static const mi_cuda_kernel k_mm_q4k = {"matmul, one token, Q4_K streaming rows, x quantized in the kernel, "
                                        "launched as a programmatic dependent", "e12,e14,d6", sup_mm_q4k, run_mm_q4k,
                                        NULL, 0};

/* MATMUL and MATMUL_ADD, Q6_K, one token: d11's streaming rows (x quantized once by 7b's
 * quantizer into the workspace, as 7e's staged kernel does) */
static bool q6k_rule(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return w && mi8a_matvec_q6k_supported(w->type, w->ne[0]) && !((uintptr_t)w->data & 3u);
}
static bool sup_mm_q6k(const mi_tensor *n) {
    return q6k_rule(n) && n->src[1] && mi_nrows(n->src[1]) == 1 && mi7b_matmul_node_supported(n);
}
static bool sup_add_q6k(const mi_tensor *n) { return q6k_rule(n) && mm_add_ok(n); }
static size_t ws_q6k(const mi_tensor *n) { return mi8a_matvec_q6k_workspace(n->src[0]->ne[0]); }
static mi_status run_mm_q6k(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    return mi8a_matvec_q6k(mi_cuda_stream(c), w->data, n->src[1]->data, ptr(n->src[2]), NULL, n->data, w->ne[0],
                           w->ne[1], ws);
}
static mi_status run_add_q6k(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    return mi8a_matvec_q6k(mi_cuda_stream(c), w->data, n->src[1]->data, NULL, n->src[2]->data, n->data, w->ne[0],
                           w->ne[1], ws);
}
/* NORM_MATMUL, Q6_K, one token (d43): the norm before it folded in, so the 7B's Q6_K v can take
 * the norm that d17 folds into the q/k run beside it */
static bool sup_norm_q6k(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return w && w->type == MI_TYPE_Q6_K && mi_matmul_shared_x(n) == 0 && mi8a_matvec_q6k_norm_supported(w->ne[0]) &&
           !((uintptr_t)w->data & 3u) && aligned16(n->src[3]) && norm_mm_ok(n);
}
static mi_status run_norm_q6k(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    return mi8a_matvec_q6k_norm(mi_cuda_stream(c), w->data, n->src[1]->data, n->src[3]->data, mi_fused_norm_eps(n),
                                ptr(n->src[2]), n->data, w->ne[0], w->ne[1]);
}
static const mi_cuda_kernel k_norm_mm_q6k = {"norm + matmul, one token, Q6_K streaming rows, x normalized and quantized "
                                             "in the block", "d1,d43,d11", sup_norm_q6k, run_norm_q6k, NULL, 0};
static const mi_cuda_kernel k_mm_q6k = {"matmul, one token, Q6_K streaming rows (an octet a super-block)", "d11",
                                        sup_mm_q6k, run_mm_q6k, ws_q6k, 0};
static const mi_cuda_kernel k_mm_add_q6k = {"matmul + residual add, one token, Q6_K streaming rows", "d2,d11",
                                            sup_add_q6k, run_add_q6k, ws_q6k, 0};

/* MATMUL marked by the pass as a run of one launch (d13): the nodes of a run of one x before its
 * last (MI_MM_RUN_DEFER) launch nothing and leave their weight, bias and output in a thread-local
 * record; the last (MI_MM_RUN_LAST) launches every row of the run at once, on 8a's Q4_K streaming
 * kernel (x quantized in the kernel) or in 7b's warp-per-row order (matvec_fused's kernel, x
 * quantized in each block; for rows of 2,048 or more 7b's quantizer, then 7b's row body),
 * whichever the run's nodes would take alone. The nodes of a split run back to back
 * on one thread, so the record is complete when the last runs; the last checks it (same context
 * and x, its predecessors' node ids) and fails the step rather than leave an output unwritten.
 * Outputs are allocated before any later node's and stay live past the run, so writing them at
 * the last node is safe; a captured graph replays the launches. */
static _Thread_local struct {
    const mi_cuda_ctx *c;
    const void *x;
    mi_type wt;
    int64_t K;
    int n, last_id;
    mi8a_run_seg seg[MI8A_RUN_MAX];
} g_run;

/* the plain Q4_K matmul's rule, with x 16-byte aligned (the run kernel reads x as float4) */
static bool run_q4k_ok(const mi_tensor *n) { return sup_mm_q4k(n) && aligned16(n->src[1]); }
static bool run_rows_ok(const mi_tensor *n) {
    const mi_tensor *w = n->src[0], *x = n->src[1];
    return w && x && mi_nrows(x) == 1 && mi7b_act_row_bytes(w->type, w->ne[0]) > 0 && mi7b_matmul_node_supported(n);
}
static bool sup_run_defer(const mi_tensor *n) {
    return mi_matmul_shared_x(n) == MI_MM_RUN_DEFER && (run_q4k_ok(n) || run_rows_ok(n));
}
static bool sup_run_last_q4k(const mi_tensor *n) { return mi_matmul_shared_x(n) == MI_MM_RUN_LAST && run_q4k_ok(n); }
static bool sup_run_last_rows(const mi_tensor *n) { return mi_matmul_shared_x(n) == MI_MM_RUN_LAST && run_rows_ok(n); }
/* d17: a run whose x the pass found normalized for it alone is a run of NORM_MATMUL nodes (x the
 * norm's input, src[3] its weight): the last applies the norm in every block of its kernel */
static bool run_norm_ok(const mi_tensor *n, int role) {
    return n->op == MI_OP_NORM_MATMUL && mi_matmul_shared_x(n) == role && n->src[0] && n->src[3] && n->src[3]->data &&
           f32_vec(n->src[3], n->src[0]->ne[0]);
}
/* a 7b-order run with its norm runs on matvec_fused's run kernel alone: rows it takes, each
 * matmul at most a MI8A_RUN_MAX-th of its rows so the run's total fits */
static bool run_rows_norm_ok(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return mi8a_matvec_fused_supported(w->type, w->ne[0], w->ne[1]) && w->ne[1] <= MI8A_FUSED_MAX_M / MI8A_RUN_MAX;
}
static bool sup_run_defer_norm(const mi_tensor *n) {
    if (!run_norm_ok(n, MI_MM_RUN_DEFER)) return false;
    const mi_tensor mm = mi_norm_matmul_part(n);
    return run_q4k_ok(&mm) || (run_rows_ok(&mm) && run_rows_norm_ok(n));
}
static bool sup_run_last_q4k_norm(const mi_tensor *n) {
    if (!run_norm_ok(n, MI_MM_RUN_LAST) || !q4k_rule(n, true) || !aligned16(n->src[3])) return false;
    const mi_tensor mm = mi_norm_matmul_part(n);
    return run_q4k_ok(&mm);
}
static bool sup_run_last_rows_norm(const mi_tensor *n) {
    if (!run_norm_ok(n, MI_MM_RUN_LAST) || !run_rows_norm_ok(n)) return false;
    const mi_tensor mm = mi_norm_matmul_part(n);
    return run_rows_ok(&mm);
}
/* the norm of a d17 run (NULL for a plain run) */
static const float *run_nw(const mi_tensor *n) { return n->op == MI_OP_NORM_MATMUL ? n->src[3]->data : NULL; }
static float run_eps(const mi_tensor *n) { return n->op == MI_OP_NORM_MATMUL ? mi_fused_norm_eps(n) : 0.0f; }
/* any_type: the node's weights may be of another format than the run's (8b's b49 closes a Q4_K
 * run with a Q6_K matmul) */
static bool run_follows_as(const mi_cuda_ctx *c, const mi_tensor *n, bool any_type) {
    const mi_tensor *w = n->src[0];
    return g_run.n > 0 && g_run.c == c && g_run.x == n->src[1]->data && (any_type || g_run.wt == w->type) &&
           g_run.K == w->ne[0] && g_run.last_id == n->id - 1;
}
static bool run_follows(const mi_cuda_ctx *c, const mi_tensor *n) { return run_follows_as(c, n, false); }
mi_status mi8a_run_record(mi_cuda_ctx *c, const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    if (!run_follows(c, n) || g_run.n >= MI8A_RUN_MAX - 1) g_run.n = 0;   /* a run starts here */
    g_run.c = c, g_run.x = n->src[1]->data, g_run.wt = w->type, g_run.K = w->ne[0], g_run.last_id = n->id;
    g_run.seg[g_run.n++] = (mi8a_run_seg){w->data, ptr(n->src[2]), n->data, w->ne[1]};
    return MI_OK;
}
static mi_status run_run_defer(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    return mi8a_run_record(c, n);
}
/* the run's weights with the last's appended (its count in *k), or an error: the record is gone */
static mi_status run_close_as(mi_cuda_ctx *c, const mi_tensor *n, int *k, bool any_type) {
    const mi_tensor *w = n->src[0];
    if (!run_follows_as(c, n, any_type))
        return mi_err(MI_ERR_INTERNAL, "d13: the run ending at node %s (#%d) found no record of the nodes before it",
                      n->name, n->id);
    g_run.seg[g_run.n++] = (mi8a_run_seg){w->data, ptr(n->src[2]), n->data, w->ne[1]};
    *k = g_run.n;
    g_run.n = 0;
    return MI_OK;
}
static mi_status run_close(mi_cuda_ctx *c, const mi_tensor *n, int *k) { return run_close_as(c, n, k, false); }
static mi_status run_run_last_q4k(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    int k;
    MI_TRY(run_close(c, n, &k));
    return mi8a_matvec_q4k_run(mi_cuda_stream(c), w->type, g_run.seg, k, n->src[1]->data, run_nw(n), run_eps(n),
                               w->ne[0]);
}
/* one kernel that quantizes x (d17: after the norm) in every block where matvec_fused takes the
 * shapes (short rows: the 0.5B's q, k, v), else 7b's quantizer and one launch of 7b's row body
 * for the run */
static mi_status run_run_last_rows(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    int k;
    MI_TRY(run_close(c, n, &k));
    int64_t M = 0;
    for (int i = 0; i < k; i++) M += g_run.seg[i].M;
    const float *nw = run_nw(n);
    if (mi8a_matvec_fused_supported(w->type, w->ne[0], M))
        return mi8a_matvec_fused_run(mi_cuda_stream(c), w->type, g_run.seg, k, n->src[1]->data, nw, run_eps(n),
                                     w->ne[0]);
    if (nw)   /* run_rows_norm_ok held for every node of the run */
        return mi_err(MI_ERR_INTERNAL, "d17: the run ending at node %s (#%d) has %lld rows, past the norm kernel's %d",
                      n->name, n->id, (long long)M, MI8A_FUSED_MAX_M);
    MI_TRY(mi7b_quantize_act(mi_cuda_stream(c), w->type, n->src[1]->data, w->ne[0], 1, ws));
    return mi8a_matmul_rows_run(mi_cuda_stream(c), w->type, g_run.seg, k, ws, w->ne[0]);
}
static size_t ws_run_rows(const mi_tensor *n) { return mi7b_matmul_workspace(n->src[0]->type, n->src[0]->ne[0], 1); }
static const mi_cuda_kernel k_run_defer = {"matmul, one token: its rows computed by its run's last node", "d13",
                                           sup_run_defer, run_run_defer, NULL, 0};
static const mi_cuda_kernel k_run_last_q4k = {"matmul, one token, Q4_K streaming rows of every matmul of its run in "
                                              "one launch", "e12,e14,d13", sup_run_last_q4k, run_run_last_q4k, NULL, 0};
static const mi_cuda_kernel k_run_last_rows = {"matmul, one token, warp per row, every matmul of its run in one launch "
                                               "(x quantized in each block, or once before it for long rows)", "d13", sup_run_last_rows, run_run_last_rows,
                                               ws_run_rows, 0};
static const mi_cuda_kernel k_run_defer_norm = {"norm + matmul, one token: its rows computed by its run's last node",
                                                "d13,d17", sup_run_defer_norm, run_run_defer, NULL, 0};
static const mi_cuda_kernel k_run_last_q4k_norm = {"norm + matmul, one token, Q4_K streaming rows of every matmul of its "
                                                   "run in one launch, the norm in every block", "e12,e14,d13,d17",
                                                   sup_run_last_q4k_norm, run_run_last_q4k, NULL, 0};
static const mi_cuda_kernel k_run_last_rows_norm = {"norm + matmul, one token, warp per row, every matmul of its run in "
                                                    "one launch, the norm in every block", "d13,d17",
                                                    sup_run_last_rows_norm, run_run_last_rows, ws_run_rows, 0};
/* the plain kernels a run replaces: 8a's Q4_K launcher (d6 on) or 7e's own (d6 off: the same
 * body, launched without the programmatic dependency, as the run kernel then is), and 7b's */
static bool plain_q4k(const struct mi_cuda_kernel *k) { return k == &k_mm_q4k || k == mi7e_matmul_q4k_kernel(); }
mi_status mi8a_run_take(mi_cuda_ctx *c, const mi_tensor *n, const mi8a_run_seg **seg, int *k) {
    MI_TRY(run_close(c, n, k));
    *seg = g_run.seg;
    return MI_OK;
}
mi_status mi8a_run_take_other(mi_cuda_ctx *c, const mi_tensor *n, const mi8a_run_seg **seg, int *k, mi_type *run_type) {
    *run_type = g_run.wt;
    MI_TRY(run_close_as(c, n, k, true));
    *seg = g_run.seg;
    return MI_OK;
}
/* the kernels of upper layers that take runs of many rows (mi8a_run_add) */
#define RUN_ADDED_MAX 4
static struct {
    const mi_cuda_kernel *plain, *defer, *last, *defer_norm, *last_norm;
} g_run_added[RUN_ADDED_MAX];
static int g_n_run_added;
void mi8a_run_add(const mi_cuda_kernel *plain, const mi_cuda_kernel *defer, const mi_cuda_kernel *last,
                  const mi_cuda_kernel *defer_norm, const mi_cuda_kernel *last_norm) {
    for (int i = 0; i < g_n_run_added; i++)
        if (g_run_added[i].plain == plain) return;   /* installs are idempotent */
    if (g_n_run_added == RUN_ADDED_MAX) abort();      /* a broken install, not input */
    g_run_added[g_n_run_added].plain = plain, g_run_added[g_n_run_added].defer = defer;
    g_run_added[g_n_run_added].last = last, g_run_added[g_n_run_added].defer_norm = defer_norm;
    g_run_added[g_n_run_added++].last_norm = last_norm;
}
static int run_added(const mi_cuda_kernel *k) {
    for (int i = 0; k && i < g_n_run_added; i++)
        if (g_run_added[i].plain == k) return i;
    return -1;
}
bool mi8a_run_plain(const struct mi_cuda_kernel *k, bool one_token) {
    return k && (run_added(k) >= 0 || (one_token && (plain_q4k(k) || k == mi7b_matmul_kernel())));
}
const struct mi_cuda_kernel *mi8a_run_kernel(int role, const struct mi_cuda_kernel *plain, bool norm) {
    const int a = run_added(plain);
    if (a >= 0) return role == MI_MM_RUN_DEFER ? (norm ? g_run_added[a].defer_norm : g_run_added[a].defer)
                     : role == MI_MM_RUN_LAST  ? (norm ? g_run_added[a].last_norm : g_run_added[a].last) : NULL;
    if (role == MI_MM_RUN_DEFER) return norm ? &k_run_defer_norm : &k_run_defer;
    if (role != MI_MM_RUN_LAST || !plain) return NULL;
    if (plain_q4k(plain)) return norm ? &k_run_last_q4k_norm : &k_run_last_q4k;
    return plain == mi7b_matmul_kernel() ? (norm ? &k_run_last_rows_norm : &k_run_last_rows) : NULL;
}

/* MATMUL marked by the pass as a run sharing x (mi_matmul_shared_x, d7), on 7b's kernel: the
 * first quantizes x into the workspace and leaves it there, each later one runs only 7b's
 * matmul kernel on that copy. The nodes of a run execute back to back on one stream and the
 * workspace is sized before a split's first node, so the copy is intact when they read it; the
 * host also checks it: the first records which node of which context quantized which x into
 * which workspace, and a later one that does not find its predecessor there (a run cut by a split, a node the
 * dispatch gave to another kernel) quantizes x itself. A captured graph replays the launches
 * that decision made. */
static _Thread_local struct {
    const mi_cuda_ctx *c;
    const void *x, *ws;
    mi_type wt;
    int64_t K;
    int id;   /* the node that ran last in the run */
} g_xq;

static bool xq_node_ok(const mi_tensor *n, int role) {
    const mi_tensor *w = n->src[0], *x = n->src[1];
    return mi_matmul_shared_x(n) == role && w && x && mi_nrows(x) == 1 && mi7b_act_row_bytes(w->type, w->ne[0]) > 0 &&
           mi7b_matmul_node_supported(n);
}
static bool sup_xq_first(const mi_tensor *n) { return xq_node_ok(n, MI_MM_X_FIRST); }
static bool sup_xq_next(const mi_tensor *n) { return xq_node_ok(n, MI_MM_X_NEXT); }
static size_t ws_xq(const mi_tensor *n) { return mi7b_matmul_workspace(n->src[0]->type, n->src[0]->ne[0], 1); }
static mi_status run_xq(mi_cuda_ctx *c, const mi_tensor *n, void *ws, bool first) {
    const mi_tensor *w = n->src[0], *x = n->src[1];
    const bool have = !first && g_xq.c == c && g_xq.x == x->data && g_xq.wt == w->type && g_xq.K == w->ne[0] &&
                      g_xq.ws == ws && g_xq.id == n->id - 1;
    if (!have) MI_TRY(mi7b_quantize_act(mi_cuda_stream(c), w->type, x->data, w->ne[0], 1, ws));
    g_xq.c = c, g_xq.x = x->data, g_xq.ws = ws, g_xq.wt = w->type, g_xq.K = w->ne[0], g_xq.id = n->id;
    return mi7b_matmul_quantized(mi_cuda_stream(c), w->type, w->data, ws, ptr(n->src[2]), n->data, w->ne[0], w->ne[1], 1);
}
static mi_status run_xq_first(mi_cuda_ctx *c, const mi_tensor *n, void *ws) { return run_xq(c, n, ws, true); }
static mi_status run_xq_next(mi_cuda_ctx *c, const mi_tensor *n, void *ws) { return run_xq(c, n, ws, false); }
static const mi_cuda_kernel k_xq_first = {"matmul, one token, warp per row, x quantized for the run of matmuls that "
                                          "read it", "d7", sup_xq_first, run_xq_first, ws_xq, 0};
static const mi_cuda_kernel k_xq_next = {"matmul, one token, warp per row, on x quantized by the run's first", "d7",
                                         sup_xq_next, run_xq_next, ws_xq, 0};
const struct mi_cuda_kernel *mi8a_shared_x_kernel(int role) {
    return role == MI_MM_X_FIRST ? &k_xq_first : role == MI_MM_X_NEXT ? &k_xq_next : NULL;
}


/* d6: read at each launch (a switch changes the dispatch epoch, so no captured graph outlives it) */
static _Atomic uint64_t g_pdl_launches;
bool mi8a_pdl_on(void) {
    if (!mi_cuda_item_on("d6")) return false;
    g_pdl_launches++;
    return true;
}
uint64_t mi8a_pdl_launches(void) { return g_pdl_launches; }

/* d12: read at each launch like d6 */
static _Atomic uint64_t g_wide_launches;
bool mi8a_wide_on(int64_t K) {
    if (K < MI8A_WIDE_K || !mi_cuda_item_on("d12")) return false;
    g_wide_launches++;
    return true;
}
uint64_t mi8a_wide_launches(void) { return g_wide_launches; }
/* d39-d42 and d44: read at each launch like d6; their launches counted per item (the gate's A/B) */
static _Atomic uint64_t g_item_launches[5];
static int launch_item_index(const char *item) {
    static const char *const items[5] = {"d39", "d40", "d41", "d42", "d44"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(item, items[i])) return i;
    abort();   /* a launcher names an item this list lacks */
}
bool mi8a_launch_item_on(const char *item) {
    const int i = launch_item_index(item);
    if (!mi_cuda_item_on(item)) return false;
    g_item_launches[i]++;
    return true;
}
uint64_t mi8a_launch_item_count(const char *item) { return g_item_launches[launch_item_index(item)]; }

/* d21: the split attention's K row whole in registers, read at each launch like d6 */
bool mi8a_skv_whole_row_on(void) { return mi_cuda_item_on("d21"); }
/* d22: the split attention on the tensor cores, read at each launch like d6 */
bool mi8a_skv_mma_on(void) { return mi_cuda_item_on("d22"); }
bool mi8a_skv_wide_combine_on(void) { return mi_cuda_item_on("d32"); }
bool mi8a_skv_one_wave_on(void) { return mi_cuda_item_on("d33"); }
bool mi8a_skv_packed_on(void) { return mi_cuda_item_on("d34"); }
bool mi8a_skv_warp_pipe_on(void) { return mi_cuda_item_on("d35"); }
static _Atomic uint64_t g_ahead_launches;
bool mi8a_unit_ahead_on(void) {   /* asked once a launch: counted where on */
    const bool on = mi_cuda_item_on("d37");
    if (on) g_ahead_launches++;
    return on;
}
uint64_t mi8a_unit_ahead_launches(void) { return g_ahead_launches; }

/* d10: the lower phases' small kernels (mi_cuda_pdl_small), read at each launch like d6 */
static _Atomic uint64_t g_pdl_small_launches;
static bool pdl_small_policy(const mi_tensor *node) {
    if (!node || !(node->flags & MI_T_EARLY) || !mi_cuda_item_on("d10")) return false;
    g_pdl_small_launches++;
    return true;
}
uint64_t mi8a_pdl_small_launches(void) { return g_pdl_small_launches; }

/* NORM_FFN_SWIGLU: src0 W_gate, src1 W_up [K, F], src2 x [K, 1], src3 norm weight [K]; the
 * FFN part is 7c's node contract */
static mi_tensor ffn_part(const mi_tensor *n) {
    mi_tensor ffn = *n;
    ffn.op = MI_OP_FFN_SWIGLU;
    ffn.src[3] = NULL;
    return ffn;
}
static bool sup_norm_ffn_q4k(const mi_tensor *n) {
    const mi_tensor *wg = n->src[0], *wu = n->src[1], *x = n->src[2];
    if (!wg || !wu || !x || !mi8a_matvec_q4k_fused_supported(wg->type, wg->ne[0], true) || !aligned16(wg) || !aligned16(wu))
        return false;
    if (mi_nrows(x) != 1 || !f32_vec(n->src[3], wg->ne[0]) || !aligned16(n->src[3])) return false;
    const mi_tensor ffn = ffn_part(n);
    return mi7c_ffn_node_supported(&ffn);
}
static mi_status run_norm_ffn_q4k(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *wg = n->src[0];
    return mi8a_ffn_q4k_fused(mi_cuda_stream(c), wg->type, wg->data, n->src[1]->data, n->src[2]->data,
                              n->src[3]->data, mi_fused_norm_eps(n), n->data, wg->ne[0], wg->ne[1]);
}

static const mi_cuda_kernel k_norm_mm_q4k = {"norm + matmul, one token, Q4_K streaming rows", "d1", sup_norm_q4k,
                                             run_norm_q4k, NULL, 0};
static const mi_cuda_kernel k_norm_ffn_q4k = {"norm + fused FFN, one token, Q4_K streaming rows", "d1",
                                              sup_norm_ffn_q4k, run_norm_ffn_q4k, NULL, 0};
static const mi_cuda_kernel k_mm_add_fused = {"matmul + residual add, one token, x quantized in the kernel", "d2",
                                              sup_add_fused, run_add_fused, NULL, 0};
static const mi_cuda_kernel k_mm_add_q4k = {"matmul + residual add, one token, Q4_K streaming rows", "d2",
                                            sup_add_q4k, run_add_q4k, NULL, 0};

/* d15: 7e's staged one-token matmul with the residual add after it. The candidate takes a node
 * only where the dispatch gives its plain part that very kernel, so the bits are that kernel's. */
static const mi_cuda_kernel *plain_matmul(const mi_tensor *n) {
    mi_tensor mm = *n;
    mm.op = MI_OP_MATMUL;
    mm.src[2] = NULL;
    mm.src[3] = NULL;
    mm.p[0] = 0;
    return mi_cuda_choice(&mm);
}
/* MATMUL_ADD on staged rows (d15): r + W @ x as the staged kernel's W @ x + bias with r as the
 * bias (one float add, commutative: the bits of the matmul followed by the add) */
static bool sup_add_staged(const mi_tensor *n) {
    return mm_add_ok(n) && plain_matmul(n) == mi7e_matmul_staged_kernel();
}
static size_t ws_add_staged(const mi_tensor *n) { return mi7e_matvec_staged_workspace(n->src[0]->type, n->src[0]->ne[0], 1); }

static mi_status run_add_staged(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    const bool ready = yq_ready(w, n->src[1]->data, ws);
    mi_cuda_ws_copy_clear();
    if (ready)
        return mi7e_matvec_staged_quantized(mi_cuda_stream(c), w->type, w->data, ws, n->src[2]->data, n->data, w->ne[0],
                                            w->ne[1], 1);
    return mi7e_matvec_staged(mi_cuda_stream(c), w->type, w->data, n->src[1]->data, n->src[2]->data, n->data, w->ne[0],
                              w->ne[1], 1, ws);
}
static const mi_cuda_kernel k_mm_add_staged = {"matmul + residual add, one token, staged weight rows (the residual "
                                               "as the kernel's bias)", "e2,d2,d15", sup_add_staged, run_add_staged,
                                               ws_add_staged, 0};

/* d23: NORM_FFN_SWIGLU on 7e's staged FFN, the norm and the quantization of x in every block,
 * where the dispatch gives the plain FFN that kernel (so its bits are the norm's, then that
 * kernel's) */
static bool sup_norm_ffn_staged(const mi_tensor *n) {
    const mi_tensor *wg = n->src[0], *wu = n->src[1], *x = n->src[2];
    if (!wg || !wu || !x || mi_nrows(x) != 1 || !f32_vec(n->src[3], wg->ne[0]) || !n->src[3]->data ||
        !mi8a_ffn_staged_norm_supported(wg->type, wg->ne[0], wg->ne[1], false))
        return false;
    const mi_tensor ffn = ffn_part(n);
    return mi7c_ffn_node_supported(&ffn) && mi_cuda_choice(&ffn) == mi7e_ffn_staged_kernel();
}
static mi_status run_norm_ffn_staged(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    const mi_tensor *wg = n->src[0];
    return mi8a_ffn_staged_norm(mi_cuda_stream(c), wg->type, wg->data, n->src[1]->data, n->src[2]->data,
                                n->src[3]->data, mi_fused_norm_eps(n), n->data, NULL, wg->ne[0], wg->ne[1]);
}
static const mi_cuda_kernel k_norm_ffn_staged = {"norm + fused FFN, one token, staged weight rows, the norm and x's "
                                                 "quantization in every block", "e5,d23", sup_norm_ffn_staged,
                                                 run_norm_ffn_staged, NULL, 0};

/* d29: the same, writing y's quantized row at the start of the workspace for the down
 * projection run next (d15's run_add_staged takes it through yq_ready); where the next node
 * reads something else the row is not read */
static bool sup_norm_ffn_staged_q(const mi_tensor *n) {
    const mi_tensor *wg = n->src[0];
    return sup_norm_ffn_staged(n) && mi8a_ffn_staged_norm_supported(wg->type, wg->ne[0], wg->ne[1], true);
}
static size_t ws_norm_ffn_staged_q(const mi_tensor *n) { return (size_t)(n->src[0]->ne[1] / 32) * 36; }
static mi_status run_norm_ffn_staged_q(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *wg = n->src[0];
    void *st = mi_cuda_stream(c);
    const float *x = n->src[2]->data, *nw = n->src[3]->data;
    mi_cuda_ws_copy_clear();
    if (((uintptr_t)n->data & 15) || ((uintptr_t)ws & 3))   /* the allocator's offsets are 256-byte aligned: not met */
        return mi8a_ffn_staged_norm(st, wg->type, wg->data, n->src[1]->data, x, nw, mi_fused_norm_eps(n), n->data, NULL,
                                    wg->ne[0], wg->ne[1]);
    MI_TRY(mi8a_ffn_staged_norm(st, wg->type, wg->data, n->src[1]->data, x, nw, mi_fused_norm_eps(n), n->data, ws,
                                wg->ne[0], wg->ne[1]));
    mi_cuda_ws_copy_made(MI_WS_COPY_Q8_1, n->data, ws, wg->ne[1], 1);
    return MI_OK;
}
static const mi_cuda_kernel k_norm_ffn_staged_q = {"norm + fused FFN, one token, staged weight rows, the norm and x's "
                                                   "quantization in every block, the output's quantized row for the "
                                                   "down projection", "e5,d23,d29", sup_norm_ffn_staged_q,
                                                   run_norm_ffn_staged_q, ws_norm_ffn_staged_q, 0};

/* ARGMAX: x F32 [V, N] -> I32 [1, N] */
static bool sup_argmax(const mi_tensor *n) {
    const mi_tensor *x = n->src[0];
    return x && x->type == MI_TYPE_F32 && n->type == MI_TYPE_I32 && x->ne[2] == 1 && x->ne[3] == 1 &&
           n->ne[0] == 1 && n->ne[1] == x->ne[1] && x->ne[0] <= INT32_MAX;
}
static mi_status run_argmax(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    return mi8a_argmax(mi_cuda_stream(c), n->src[0]->data, n->data, n->src[0]->ne[0], n->src[0]->ne[1]);
}
/* none: d45's cluster check made here, where workspaces are sized before any capture */
static size_t ws_argmax(const mi_tensor *n) {
    mi8a_argmax_ready();
    return 0;
}
static const mi_cuda_kernel k_argmax = {"argmax per row: one block a row, or a cluster of 8 (d45)", "d3", sup_argmax,
                                        run_argmax, ws_argmax, 0};

const struct mi_cuda_kernel *mi8a_add_fused_kernel(void) { return &k_mm_add_fused; }

void mi_phase8a_install(void) {
    mi_cuda_item_declare("d1", "RMS norm folded into the one-token matmuls it feeds (norm_matmul, norm_ffn_swiglu)");
    mi_cuda_item_declare("d2", "residual add folded into the one-token matmul before it (matmul_add)");
    mi_cuda_item_declare("d3", "greedy argmax on the device: only the token id crosses back (argmax)");
    mi_cuda_item_declare("d45", "d3's argmax with each row split over a cluster of 8 blocks, contiguous chunks read as "
                                "float4, the blocks' results combined through the cluster's shared memory");
    mi_cuda_add_kernel(MI_OP_ARGMAX, &k_argmax);
    mi_cuda_item_declare("d20", "one-token attention with a tile's K rows, V rows and q loaded together (7b's "
                                "arithmetic, bit for bit; F16 caches the split does not take)");
    mi_cuda_add_kernel(MI_OP_ATTN, &mi8a_k_attn_step);   /* behind the split: tried after it */
    mi_cuda_item_declare("d4", "one-token attention split over the KV sequence (caches of 512 positions or more)");
    mi_cuda_add_kernel(MI_OP_ATTN, &mi8a_k_attn_split);
    mi_cuda_item_declare("d21", "d4's split attention loads a thread's whole K row at once (one round trip a tile, "
                                "not four); read at each launch");
    mi_cuda_item_declare("d22", "d4's split attention on the tensor cores (F16 caches, hd 64 or 128): scores and value "
                                "sums as mma, q and the probabilities in two f16 parts; read at each launch");
    mi_cuda_item_declare("d32", "d4's merge of the split's partials with their loads in flight: a warp sums a run of "
                                "splits, the warps' sums added in warp order (read at each launch)");
    mi_cuda_item_declare("d33", "d22's split attention in one wave: no more splits than the blocks its SMs hold at "
                                "once (read at each launch)");
    mi_cuda_item_declare("d34", "d22's q and probabilities with their two f16 parts as the upper and lower rows of one "
                                "mma (GQA groups of 8 heads or fewer): half the mma and exponentials a tile (read at "
                                "each launch)");
    mi_cuda_item_declare("d35", "d22's tiles in a pipeline a warp, three tiles deep: each warp copies and waits for only "
                                "its own rows, no block barrier between tiles (read at each launch)");
    mi_cuda_item_declare("d6", "8a's one-token kernels launched as programmatic dependents: each lets the next launch "
                               "while it runs and issues its weight loads before it waits for the one before it");
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_mm_q4k);
    mi_cuda_item_declare("d7", "one x quantized once for a run of one-token matmuls that read it (the q, k and v "
                               "of 7b's warp-per-row kernel)");
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_xq_first);
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_xq_next);
    mi_cuda_item_declare("d8", "RoPE with a thread per rotated pair and the inverse frequencies computed once on the "
                               "host (7b's kernel: a thread per element, each with a double pow, cos and sin)");
    mi_cuda_add_kernel(MI_OP_ROPE, &mi8a_k_rope_pairs);
    mi_cuda_item_declare("d14", "one token's RoPE of q and k and the KV store of k and v in one launch (4 kernels a "
                                "layer become 1)");
    mi_cuda_add_kernel(MI_OP_ROPE, &mi8a_k_rkv_rope);
    mi_cuda_add_kernel(MI_OP_KV_STORE, &mi8a_k_rkv_store);
    mi_cuda_add_kernel(MI_OP_KV_STORE, &mi8a_k_rkv_last);
    mi_cuda_item_declare("d30", "d14's RoPE of q and k and K and V stores done by the one-token attention after them "
                                "(d20's kernel), which uses the current key's rows from registers (one launch a layer "
                                "fewer)");
    mi_cuda_add_kernel(MI_OP_KV_STORE, &mi8a_k_rkv_attn_store);
    mi_cuda_add_kernel(MI_OP_ATTN, &mi8a_k_attn_step_rkv);
    mi_cuda_item_declare("d39", "the one-token fused gate/up (Q4_K, norm folded) as one block of 32 warps an SM, its "
                                "rows spread over every SM (read at each launch)");
    mi_cuda_item_declare("d40", "d12's one-token downs (Q4_K and Q6_K) with their rows spread over every SM (read at "
                                "each launch)");
    mi_cuda_item_declare("d42", "d13's and d17's Q4_K runs (q, k, v) as one block of 32 warps an SM, their rows spread "
                                "over every SM (read at each launch)");
    mi_cuda_item_declare("d41", "one-token Q4_K matmuls without a norm of rows under 8,192 elements (o) as one block of 32 "
                                "warps an SM, their rows spread over every SM (read at each launch)");
    mi_cuda_item_declare("d37", "the one-token rows of 7b's order (d2's residual form, d13's runs, d31's o) unpack each "
                                "lane's first unit into registers before waiting for the kernel before them, not "
                                "only prefetched to L2 (read at each launch)");
    mi_cuda_item_declare("d31", "d20's attention writes its output's quantized row too where the pass marked it, and "
                                "the o projection after it (d2's kernel) reads that row instead of quantizing x in each "
                                "of its blocks (read at each launch)");
    mi_cuda_item_declare("d10", "the small kernels of a step (activation quantization, warp-per-row and staged matmuls, "
                                "norms, RoPE, KV store, attention, adds, argmax) launched as programmatic dependents");
    mi_cuda_pdl_set_policy(pdl_small_policy);
    mi_cuda_item_declare("d15", "the residual add after 7e's staged one-token matmul done by it, as its bias (the "
                                "0.5B's down projection)");
    mi_cuda_add_kernel(MI_OP_MATMUL_ADD, &k_mm_add_staged);
    mi_cuda_item_declare("d23", "the RMS norm and x's quantization in every block of 7e's staged one-token FFN (the "
                                "0.5B's FFN norm, quantizer and gate/up in one launch)");
    mi_cuda_add_kernel(MI_OP_NORM_FFN_SWIGLU, &k_norm_ffn_staged);
    mi_cuda_item_declare("d29", "d23's FFN writes its output's quantized row as well, and the staged down projection "
                                "after it (d15) reads it instead of launching 7b's quantizer (the 0.5B)");
    mi_cuda_add_kernel(MI_OP_NORM_FFN_SWIGLU, &k_norm_ffn_staged_q);
    /* added back to front: the last one added is tried first. The norm form of
     * matvec_fused.cu is not a candidate: on the 0.5B's q/k/v (K = 896) it is 3% slower
     * per token than the norm, quantization and 7b matmul it replaces (results/notes/PHASE8A.md);
     * it remains the Q4_K kernel's fallback for unaligned bases. */
    mi_cuda_add_kernel(MI_OP_NORM_MATMUL, &k_norm_mm_q4k);
    mi_cuda_add_kernel(MI_OP_NORM_FFN_SWIGLU, &k_norm_ffn_q4k);
    mi_cuda_add_kernel(MI_OP_MATMUL_ADD, &k_mm_add_fused);
    mi_cuda_add_kernel(MI_OP_MATMUL_ADD, &k_mm_add_q4k);
    mi_cuda_item_declare("d12", "one-token Q4_K and Q6_K matmuls of rows of 8,192 elements or more (the down "
                                "projections) as one block of 32 warps an SM: the activation row staged once an SM");
    mi_cuda_item_declare("d13", "a run of one-token matmuls of one x in one launch (the 7B's q, k and, where Q4_K, v "
                                "on Q4_K streaming rows; the 0.5B's q, k, v on 7b's warp-per-row kernel)");
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_run_defer);
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_run_last_rows);
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_run_last_q4k);   /* in front: a Q4_K run on 8a's kernel */
    mi_cuda_item_declare("d17", "the RMS norm before a d13 run, when the run's matmuls are its only readers, applied in "
                                "every block of the run's kernel (the q, k, v of the 7B and the 0.5B)");
    mi_cuda_add_kernel(MI_OP_NORM_MATMUL, &k_run_defer_norm);
    mi_cuda_add_kernel(MI_OP_NORM_MATMUL, &k_run_last_rows_norm);
    mi_cuda_add_kernel(MI_OP_NORM_MATMUL, &k_run_last_q4k_norm);
    mi_cuda_item_declare("d11", "one-token Q6_K matmuls (and their residual add) on streaming rows: an octet of lanes a "
                                "super-block, its 2-byte-aligned words shifted in registers, no staging");
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_mm_q6k);
    mi_cuda_add_kernel(MI_OP_MATMUL_ADD, &k_mm_add_q6k);
    mi_cuda_item_declare("d43", "one-token Q6_K matmuls with the RMS norm before them folded in (x normalized and "
                                "quantized in the block), so the 7B's Q6_K v takes the norm d17 folds into q and k");
    mi_cuda_add_kernel(MI_OP_NORM_MATMUL, &k_norm_mm_q6k);
    mi_cuda_item_declare("d44", "d12's one-token Q6_K downs quantize x in the block (one block an SM, rows spread), "
                                "without 7b's quantizer launched before them (read at each launch)");
    mi7c_add_fusion(mi8a_fuse_decode);
}

/* Phase 8b's matmul, norm, SwiGLU and top-k candidates for a step of many sequences, and
 * mi_phase8b_install, which adds them to the dispatch in their order with the paged ops'
 * candidates (install8b_attn.c). */
#include "phase7c_wiring/wiring7c.h"
#include "phase8b_batch/batch8b.h"
#include "phase8b_batch/install8b.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"
#include "common/graph/graph.h"
#include <stdint.h>

/* ---------------- MATMUL at 9..64 rows (a batch's decode step): split over K ---------------- */
static bool sup_mm_split(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return w && n->src[1] && mi8b_gemm_split_supported(w->type, w->ne[0], w->ne[1], mi_nrows(n->src[1])) &&
           mi7b_matmul_node_supported(n);
}
static size_t ws_mm_split(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return mi8b_gemm_split_workspace(w->type, w->ne[0], w->ne[1], mi_nrows(n->src[1]));
}
static mi_status run_mm_split(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    return mi8b_gemm_split(mi_cuda_stream(c), w->type, w->data, n->src[1]->data, n->src[2] ? n->src[2]->data : NULL,
                           n->data, w->ne[0], w->ne[1], mi_nrows(n->src[1]), ws);
}
static const mi_cuda_kernel k_mm_split = {"matmul, 9..64 rows, int8 tensor cores, K split over blocks", "e7,b1",
                                          sup_mm_split, run_mm_split, ws_mm_split, 0};

/* ---------------- MATMUL at 9..64 rows: the weights streamed through shared memory ---------------- */
/* b10: a weight of this many rows (an output head: the 0.5B's 151,936 at K = 896) fills the GPU
 * with whole bands many times at any K; the stream kernel takes it where 7e's prefill path
 * would convert all of it to f16 first, each step. */
#define STREAM_WIDE_M 32768
static bool stream_k_ok(const mi_tensor *w) {
    return w->ne[0] >= MI8B_STREAM_MIN_K || (w->ne[1] >= STREAM_WIDE_M && mi_cuda_item_on("b10"));
}
static bool sup_mm_stream_n(const mi_tensor *n, int stages) {
    const mi_tensor *w = n->src[0];
    return w && n->src[1] && stream_k_ok(w) &&
           mi8b_gemm_stream_supported(w->type, w->ne[0], w->ne[1], mi_nrows(n->src[1]), stages) &&
           mi7b_matmul_node_supported(n);
}
static size_t ws_mm_stream_n(const mi_tensor *n, int stages) {
    const mi_tensor *w = n->src[0];
    return mi8b_gemm_stream_workspace(w->type, w->ne[0], w->ne[1], mi_nrows(n->src[1]), stages);
}
static mi_status run_mm_stream_n(mi_cuda_ctx *c, const mi_tensor *n, void *ws, int stages) {
    const mi_tensor *w = n->src[0];
    return mi8b_gemm_stream(mi_cuda_stream(c), w->type, w->data, n->src[1]->data, n->src[2] ? n->src[2]->data : NULL,
                            n->data, w->ne[0], w->ne[1], mi_nrows(n->src[1]), stages, ws);
}
static bool sup_mm_stream(const mi_tensor *n) { return sup_mm_stream_n(n, 3); }
static size_t ws_mm_stream(const mi_tensor *n) { return ws_mm_stream_n(n, 3); }
static mi_status run_mm_stream(mi_cuda_ctx *c, const mi_tensor *n, void *ws) { return run_mm_stream_n(c, n, ws, 3); }
static const mi_cuda_kernel k_mm_stream = {
    "matmul, 9..64 rows, Q4_K/Q6_K/Q4_0/Q8_0 weights streamed by cp.async, int8 tensor cores", "b3", sup_mm_stream,
    run_mm_stream, ws_mm_stream, 0};
/* b5: the same at 33..64 rows through a 2-stage ring, two blocks a multiprocessor */
static bool sup_mm_stream2(const mi_tensor *n) { return sup_mm_stream_n(n, 2); }
static size_t ws_mm_stream2(const mi_tensor *n) { return ws_mm_stream_n(n, 2); }
static mi_status run_mm_stream2(mi_cuda_ctx *c, const mi_tensor *n, void *ws) { return run_mm_stream_n(c, n, ws, 2); }
static const mi_cuda_kernel k_mm_stream2 = {
    "matmul, 33..64 rows, weights streamed by cp.async through a 2-stage ring, int8 tensor cores", "b3,b5",
    sup_mm_stream2, run_mm_stream2, ws_mm_stream2, 0};

/* b21: read at each support check (a switch changes the dispatch epoch: choices are made again) */
bool mi8b_f16_small_n_on(void) { return mi_cuda_item_on("b21"); }

/* b6: Q4_K / Q6_K at 17..64 rows with f16 tensor cores (the weights dequantized in registers).
 * From 17 rows, or with b21 from 2 (9..16 went to b3's int8 kernel, 2..8 to 7e's staged rows). */
#define F16S_MIN_N 17
static bool sup_mm_f16s(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return w && n->src[1] && w->ne[0] >= MI8B_STREAM_MIN_K &&
           mi_nrows(n->src[1]) >= (mi8b_f16_small_n_on() ? MI8B_F16_MIN_N : F16S_MIN_N) &&
           mi8b_gemm_f16s_supported(w->type, w->ne[0], w->ne[1], mi_nrows(n->src[1])) && mi7b_matmul_node_supported(n);
}
static size_t ws_mm_f16s(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return mi8b_gemm_f16s_workspace(w->type, w->ne[0], w->ne[1], mi_nrows(n->src[1]));
}
static mi_status run_mm_f16s(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    return mi8b_gemm_f16s(mi_cuda_stream(c), w->type, w->data, n->src[1]->data, n->src[2] ? n->src[2]->data : NULL,
                          n->data, w->ne[0], w->ne[1], mi_nrows(n->src[1]), ws);
}
/* b11: read at each launch (a switch changes the dispatch epoch: no captured step outlives it) */
bool mi8b_f16s_khalf_on(void) { return mi_cuda_item_on("b11"); }
/* b22: read at each launch, as b11 */
bool mi8b_f16s_wgmma_on(void) { return mi_cuda_item_on("b22"); }
/* b25: read at each launch, as b22 */
bool mi8b_f16w_quad_scales_on(void) { return mi_cuda_item_on("b25"); }
/* b28: read at each launch, as b22 */
bool mi8b_f16w_tma_on(void) { return mi_cuda_item_on("b28"); }
/* b29: d10's policy (the node flagged, d10 on) and b29 on, read at each launch */
bool mi8b_pdl_on(void) { return mi_cuda_pdl_small() && mi_cuda_item_on("b29"); }
/* b30: read at each call */
bool mi8b_x_reuse_on(void) { return mi_cuda_item_on("b30"); }
/* b31: read at each launch, as b22 */
bool mi8b_f16w_q6_bulk_on(void) { return mi_cuda_item_on("b31"); }
/* b32: read at each launch, as b22 */
bool mi8b_f16w_overlap_on(void) { return mi_cuda_item_on("b32"); }
/* b33: read at each call, as b22 */
bool mi8b_f16w_cluster_sum_on(void) { return mi_cuda_item_on("b33"); }
/* b48: read at each plan */
bool mi8b_plan_clusters_on(void) { return mi_cuda_item_on("b48"); }
/* b49: read at each call; with b40, whose runs it extends */
bool mi8b_f16s_mixed_on(void) { return mi_cuda_item_on("b49") && mi_cuda_item_on("b40"); }
/* b42: read at each call (b35's kernel is the one that takes the run's cut bands) */
bool mi8b_f16s_fixup_next_on(void) { return mi_cuda_item_on("b42") && mi_cuda_item_on("b35"); }
/* b39: read at each launch, as b22 */
bool mi8b_f16w_empty_bars_on(void) { return mi_cuda_item_on("b39"); }
static const mi_cuda_kernel k_mm_f16s = {
    "matmul, 17..64 rows, Q4_K/Q6_K streamed by cp.async, dequantized to f16 tensor cores", "b6", sup_mm_f16s,
    run_mm_f16s, ws_mm_f16s, 0};

/* b40: a run of b6's / b22's Q4_K matmuls of one x (the pass's d13 marks, mi8a_run_add: q, k and
 * a Q4_K v; gate and up) in one launch: the nodes before the last record their matmul (and keep b30's
 * record of x's f16 copy alive), the last launches the run (or, where the run cannot be one
 * launch, each matmul as it would alone). Each node's workspace is its own matmul's, so the
 * split's workspace holds any of them alone; the run checks its own need against it. */
bool mi8b_f16s_run_on(void) { return mi_cuda_item_on("b40"); }
static bool f16s_run_ok(const mi_tensor *n, int role) {
    return n->op == MI_OP_MATMUL && mi_matmul_shared_x(n) == role && sup_mm_f16s(n) && n->src[0]->type == MI_TYPE_Q4_K &&
           mi8b_gemm_f16s_run_supported(MI_TYPE_Q4_K, mi_nrows(n->src[1]));
}
static bool sup_f16s_run_defer(const mi_tensor *n) { return f16s_run_ok(n, MI_MM_RUN_DEFER); }
static bool sup_f16s_run_last(const mi_tensor *n) { return f16s_run_ok(n, MI_MM_RUN_LAST); }
static mi_status run_f16s_run_defer(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    mi8b_f16s_x_carry(n->src[1]->data, ws, n->src[0]->ne[0], mi_nrows(n->src[1]));
    return mi8a_run_record(c, n);
}
static mi_status run_f16s_run_last(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    const mi8a_run_seg *seg;
    int k;
    size_t ws_bytes = 0;
    (void)mi_cuda_workspace(c, &ws_bytes);
    MI_TRY(mi8a_run_take(c, n, &seg, &k));
    return mi8b_gemm_f16s_run(mi_cuda_stream(c), w->type, seg, k, n->src[1]->data, w->ne[0], mi_nrows(n->src[1]), ws,
                              ws_bytes, mi_matmul_fixup_next(n));
}
/* b42: a run whose SwiGLU finishes its cut bands keeps its partials past the SwiGLU's f16 copy */
static size_t ws_f16s_run_last(const mi_tensor *n) {
    return ws_mm_f16s(n) + (mi_matmul_fixup_next(n) ? mi8b_f16s_x_bytes(n->src[0]->ne[1], mi_nrows(n->src[1])) : 0);
}
static const mi_cuda_kernel k_f16s_run_defer = {
    "matmul, 17..64 rows, Q4_K on b6's or b22's kernel: its rows computed by its run's last node", "b6,b40",
    sup_f16s_run_defer, run_f16s_run_defer, ws_mm_f16s, 0};
static const mi_cuda_kernel k_f16s_run_last = {
    "matmul, 17..64 rows, Q4_K on b6's or b22's kernel: every matmul of its run in one launch, one plan over their "
    "bands", "b6,b40", sup_f16s_run_last, run_f16s_run_last, ws_f16s_run_last, 0};

/* b49: a Q4_K run closed by a Q6_K matmul of the same x (8b's pass: the 7B's q, k and a Q6_K v),
 * all in one launch: the Q4_K nodes record as b40's defer nodes, this one takes their record and
 * launches the run (or, where it cannot be one launch, the Q4_K ones as their run and itself
 * alone: mi8b_gemm_f16s_run_mixed) */
static bool sup_f16s_run_mixed_last(const mi_tensor *n) {
    return n->op == MI_OP_MATMUL && mi_matmul_shared_x(n) == MI_MM_RUN_LAST && sup_mm_f16s(n) &&
           n->src[0]->type == MI_TYPE_Q6_K && mi8b_gemm_f16s_mixed_supported(mi_nrows(n->src[1]));   /* b49 on */
}
static mi_status run_f16s_run_mixed_last(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    const mi8a_run_seg *seg;
    int k;
    mi_type wt;
    size_t ws_bytes = 0;
    (void)mi_cuda_workspace(c, &ws_bytes);
    MI_TRY(mi8a_run_take_other(c, n, &seg, &k, &wt));
    if (wt != MI_TYPE_Q4_K || k < 2)
        return mi_err(MI_ERR_INTERNAL, "b49: the run closed by %s (#%d) is not of Q4_K matmuls", n->name, n->id);
    return mi8b_gemm_f16s_run_mixed(mi_cuda_stream(c), seg, k - 1, k, n->src[1]->data, w->ne[0], mi_nrows(n->src[1]), ws,
                                    ws_bytes);
}
/* the node's own workspace (each node's is its matmul's alone; the run checks its need), and the
 * kernel's one-time checks asked here, not first at a launch inside a capture */
static size_t ws_f16s_run_mixed_last(const mi_tensor *n) {
    mi8b_gemm_f16s_mixed_ready();
    return ws_mm_f16s(n);
}
static const mi_cuda_kernel k_f16s_run_mixed_last = {
    "matmul, 33..64 rows, Q6_K closing a run of Q4_K ones of one x: all of them in one launch of b22's kernel, each "
    "block in its band's format", "b22,b49", sup_f16s_run_mixed_last, run_f16s_run_mixed_last, ws_f16s_run_mixed_last, 0};
bool mi8b_mixed_run_takes(const mi_tensor *k_defer, const mi_tensor *v_last) {
    return mi_cuda_choice(k_defer) == &k_f16s_run_defer && mi_cuda_choice(v_last) == &k_f16s_run_mixed_last;
}

/* b36: MATMUL_ADD (8a's pass folds a batch's residual add into the matmul before it where this
 * takes it: the 7B's o and down projections) on b6's / b22's matmul, r added where the outputs
 * are stored */
static mi_tensor mm_add_part(const mi_tensor *n) {
    mi_tensor mm = *n;
    mm.op = MI_OP_MATMUL;
    mm.src[2] = NULL;
    mm.src[3] = NULL;
    mm.p[0] = 0;
    return mm;
}
static bool sup_mm_add_f16s(const mi_tensor *n) {
    const mi_tensor *w = n->src[0], *x = n->src[1], *r = n->src[2];
    if (!w || !x || !r || r->type != MI_TYPE_F32 || r->ne[0] != w->ne[1] || mi_nrows(r) != mi_nrows(x) ||
        mi_nelements(r) != r->ne[0] * mi_nrows(r))
        return false;
    const mi_tensor mm = mm_add_part(n);
    return sup_mm_f16s(&mm);
}
static size_t ws_mm_add_f16s(const mi_tensor *n) {
    const mi_tensor mm = mm_add_part(n);
    return ws_mm_f16s(&mm);
}
static mi_status run_mm_add_f16s(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    return mi8b_gemm_f16s_add(mi_cuda_stream(c), w->type, w->data, n->src[1]->data, n->src[2]->data, n->data, w->ne[0],
                              w->ne[1], mi_nrows(n->src[1]), ws);
}
static const mi_cuda_kernel k_mm_add_f16s = {
    "matmul + residual add, 17..64 rows, Q4_K/Q6_K on b6's / b22's kernels, the residual added where the outputs are "
    "stored", "b6,b36", sup_mm_add_f16s, run_mm_add_f16s, ws_mm_add_f16s, 0};

/* b12: Q4_0 (b16: and Q8_0) at K <= 1024 and 9..64 rows in one launch after x's f16 copy (the
 * 0.5B's q/k/v/o and gate/up, where b1 takes three launches and b3's ring has under four stages a
 * band to fill; b16: its Q8_0 head, which b3's stream kernel reads at ~0.7 TB/s) */
/* the fewest rows b12's and b15's kernels get: b3's and b1's 9, or with b21 2 */
static int64_t small_min_n(void) { return mi8b_f16_small_n_on() ? MI8B_F16_MIN_N : MI8B_STREAM_MIN_N; }
static bool sup_mm_small(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return w && n->src[1] && mi_nrows(n->src[1]) >= small_min_n() &&
           mi8b_gemm_f16_small_supported(w->type, w->ne[0], w->ne[1], mi_nrows(n->src[1])) &&
           mi7b_matmul_node_supported(n);
}
static size_t ws_mm_small(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return mi8b_gemm_f16_small_workspace(w->type, w->ne[0], w->ne[1], mi_nrows(n->src[1]));
}
static mi_status run_mm_small(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    return mi8b_gemm_f16_small(mi_cuda_stream(c), w->type, w->data, n->src[1]->data,
                               n->src[2] ? n->src[2]->data : NULL, n->data, w->ne[0], w->ne[1], mi_nrows(n->src[1]), ws);
}
static const mi_cuda_kernel k_mm_small = {
    "matmul, 9..64 rows, Q4_0 / Q8_0 at K <= 1024: whole K a block, dequantized to f16 tensor cores, one launch", "b12",
    sup_mm_small, run_mm_small, ws_mm_small, 0};

/* b19: read at each launch (a switch changes the dispatch epoch: no captured step outlives it) */
bool mi8b_small_xconv_on(void) { return mi_cuda_item_on("b19"); }
/* b16: read at each support check (a switch changes the dispatch epoch: choices are made again) */
bool mi8b_small_q8_on(void) { return mi_cuda_item_on("b16"); }

/* b15: Q4_0 past K = 1024 (the 0.5B's down) on the same kernel, K split into slices */
static bool sup_mm_ksplit(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return w && n->src[1] && mi_nrows(n->src[1]) >= small_min_n() &&
           mi8b_gemm_f16_ksplit_supported(w->type, w->ne[0], w->ne[1], mi_nrows(n->src[1])) &&
           mi7b_matmul_node_supported(n);
}
static size_t ws_mm_ksplit(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return mi8b_gemm_f16_ksplit_workspace(w->type, w->ne[0], w->ne[1], mi_nrows(n->src[1]));
}
static mi_status run_mm_ksplit(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    return mi8b_gemm_f16_ksplit(mi_cuda_stream(c), w->type, w->data, n->src[1]->data,
                                n->src[2] ? n->src[2]->data : NULL, n->data, w->ne[0], w->ne[1], mi_nrows(n->src[1]),
                                ws);
}
static const mi_cuda_kernel k_mm_ksplit = {
    "matmul, 9..64 rows, Q4_0 past K = 1024: b12's kernel over K slices, the slices summed in order", "b15",
    sup_mm_ksplit, run_mm_ksplit, ws_mm_ksplit, 0};

/* b21: FFN_SWIGLU (7c's pass makes it for a batch step of 2..8 rows) as its gate and up on b6's
 * kernel (Q4_K, Q6_K at K >= 2048) or as one run of b12's (Q4_0, Q8_0 at K <= 1024), then 7b's
 * SwiGLU: the two matmuls and the activation the fused node stands for, each weight read once
 * for all rows where 7e's staged FFN reads it once a row */
static bool ffn_shape_ok(const mi_tensor *n) {
    const mi_tensor *wg = n->src[0], *wu = n->src[1], *x = n->src[2];
    return wg && wu && x && x->type == MI_TYPE_F32 && n->type == MI_TYPE_F32 && wg->type == wu->type &&
           wg->ne[0] == wu->ne[0] && wg->ne[1] == wu->ne[1] && wg->ne[0] == x->ne[0] && wg->ne[2] == 1 &&
           wg->ne[3] == 1 && wu->ne[2] == 1 && wu->ne[3] == 1 && x->ne[2] == 1 && x->ne[3] == 1 &&
           n->ne[0] == wg->ne[1] && n->ne[1] == x->ne[1] && mi_nelements(n) == n->ne[0] * n->ne[1];
}
static bool ffn_on_f16s(const mi_tensor *n) {
    const mi_tensor *wg = n->src[0];
    return wg->ne[0] >= MI8B_STREAM_MIN_K && mi8b_gemm_f16s_supported(wg->type, wg->ne[0], wg->ne[1], n->ne[1]);
}
static bool sup_ffn_f16(const mi_tensor *n) {
    if (!mi8b_f16_small_n_on() || !ffn_shape_ok(n) || n->ne[1] < MI8B_F16_MIN_N) return false;
    const mi_tensor *wg = n->src[0];
    return ffn_on_f16s(n) || mi8b_gemm_f16_small_supported(wg->type, wg->ne[0], 2 * wg->ne[1], n->ne[1]);
}
static size_t ffn_part_bytes(const mi_tensor *n) {
    return ((size_t)n->ne[0] * (size_t)n->ne[1] * sizeof(float) + 255) & ~(size_t)255;
}
/* The workspace: the matmuls' first (where the node before leaves x's f16 copy: b34), then
 * gate's and up's outputs */
static size_t ffn_mm_bytes(const mi_tensor *n) {
    const mi_tensor *wg = n->src[0];
    const size_t mm = ffn_on_f16s(n) ? mi8b_gemm_f16s_workspace(wg->type, wg->ne[0], wg->ne[1], n->ne[1])
                                     : mi8b_gemm_f16_small_workspace(wg->type, wg->ne[0], wg->ne[1], n->ne[1]);
    return (mm + 255) & ~(size_t)255;
}
static size_t ws_ffn_f16(const mi_tensor *n) { return ffn_mm_bytes(n) + 2 * ffn_part_bytes(n); }
static mi_status run_ffn_f16(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *wg = n->src[0], *wu = n->src[1];
    const float *x = n->src[2]->data;
    const int64_t K = wg->ne[0], F = wg->ne[1], N = n->ne[1];
    float *g = (float *)((uint8_t *)ws + ffn_mm_bytes(n)), *u = (float *)((uint8_t *)g + ffn_part_bytes(n));
    void *st = mi_cuda_stream(c);
    if (ffn_on_f16s(n)) {
        MI_TRY(mi8b_gemm_f16s(st, wg->type, wg->data, x, NULL, g, K, F, N, ws));
        MI_TRY(mi8b_gemm_f16s(st, wu->type, wu->data, x, NULL, u, K, F, N, ws));
    } else {
        const mi8a_run_seg seg[2] = {{wg->data, NULL, g, F}, {wu->data, NULL, u, F}};
        MI_TRY(mi8b_gemm_f16_small_run(st, wg->type, seg, 2, x, K, N, ws));
    }
    return mi7b_swiglu(st, g, u, n->data, F * N);
}
static const mi_cuda_kernel k_ffn_f16 = {
    "fused FFN, 2..8 rows: gate and up on b6's or b12's f16 kernel (each weight read once for all rows), then SwiGLU",
    "b21", sup_ffn_f16, run_ffn_f16, ws_ffn_f16, 0};

/* b13: a run of such matmuls of one x (the pass's d13 marks, mi8a_run_add) in one launch: the
 * nodes before the last record their matmul, the last launches every one (x's f16 copy once) */
static bool sup_small_run_defer(const mi_tensor *n) {
    return mi_matmul_shared_x(n) == MI_MM_RUN_DEFER && sup_mm_small(n);
}
static bool sup_small_run_last(const mi_tensor *n) { return mi_matmul_shared_x(n) == MI_MM_RUN_LAST && sup_mm_small(n); }
static mi_status run_small_run_defer(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    return mi8a_run_record(c, n);
}
static mi_status run_small_run_last(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    const mi8a_run_seg *seg;
    int k;
    MI_TRY(mi8a_run_take(c, n, &seg, &k));
    return mi8b_gemm_f16_small_run(mi_cuda_stream(c), w->type, seg, k, n->src[1]->data, w->ne[0], mi_nrows(n->src[1]),
                                   ws);
}
static const mi_cuda_kernel k_small_run_defer = {"matmul, 9..64 rows, Q4_0 / Q8_0 at K <= 1024: its rows computed by its "
                                                 "run's last node", "b12,b13", sup_small_run_defer,
                                                 run_small_run_defer, NULL, 0};
static const mi_cuda_kernel k_small_run_last = {
    "matmul, 9..64 rows, Q4_0 / Q8_0 at K <= 1024: every matmul of its run in one launch after x's f16 copy", "b12,b13",
    sup_small_run_last, run_small_run_last, ws_mm_small, 0};

/* b24: a b13 run whose x = rms_norm(x0, w) the run alone reads (8a's pass folds it as d17 does,
 * mi8a_run_add): NORM_MATMUL nodes, x0 their src[1], the norm's weight src[3] and eps pf(1); the
 * last writes the norm straight into x's f16 copy, then launches the run as b13's last does */
static bool small_norm_ok(const mi_tensor *n, int role) {
    if (n->op != MI_OP_NORM_MATMUL || mi_matmul_shared_x(n) != role || !n->src[0] || !n->src[1]) return false;
    const mi_tensor *w = n->src[0], *nw = n->src[3];
    if (!nw || !nw->data || nw->type != MI_TYPE_F32 || nw->ne[0] != w->ne[0] || mi_nrows(nw) != 1 ||
        w->ne[0] % 4 || w->ne[0] > MI8B_NORM_F16_MAX_K)
        return false;
    const mi_tensor mm = mi_norm_matmul_part(n);
    return sup_mm_small(&mm);
}
static bool sup_small_run_defer_norm(const mi_tensor *n) { return small_norm_ok(n, MI_MM_RUN_DEFER); }
static bool sup_small_run_last_norm(const mi_tensor *n) { return small_norm_ok(n, MI_MM_RUN_LAST); }
static mi_status run_small_run_last_norm(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const mi_tensor *w = n->src[0];
    const mi8a_run_seg *seg;
    int k;
    MI_TRY(mi8a_run_take(c, n, &seg, &k));
    return mi8b_gemm_f16_small_run_norm(mi_cuda_stream(c), w->type, seg, k, n->src[1]->data, n->src[3]->data,
                                        mi_fused_norm_eps(n), w->ne[0], mi_nrows(n->src[1]), ws);
}
static const mi_cuda_kernel k_small_run_defer_norm = {
    "norm + matmul, 2..64 rows, Q4_0 / Q8_0 at K <= 1024: its rows computed by its run's last node", "b12,b13,b24",
    sup_small_run_defer_norm, run_small_run_defer, NULL, 0};
static const mi_cuda_kernel k_small_run_last_norm = {
    "norm + matmul, 2..64 rows, Q4_0 / Q8_0 at K <= 1024: the norm written as x's f16 copy, then every matmul of its "
    "run in one launch", "b12,b13,b24", sup_small_run_last_norm, run_small_run_last_norm, ws_mm_small, 0};

/* b34: an RMS norm over whole rows of 2..64 rows wide enough for b6's and b22's matmuls (the 7B's
 * attention and FFN norms), writing y and x's f16 copy for the next node's matmuls in one launch;
 * where the next node is no such matmul of y the copy is not read (b30's rule) */
static bool sup_norm_f16(const mi_tensor *n) {
    const mi_tensor *x = n->src[0], *w = n->src[1];
    if (!x || !w || x->type != MI_TYPE_F32 || w->type != MI_TYPE_F32 || n->type != MI_TYPE_F32 || !w->data) return false;
    const int64_t G = x->ne[0], N = mi_nrows(x);
    return mi_norm_group(n) == G && w->ne[0] == G && mi_nrows(w) == 1 && mi_nelements(n) == G * N && G >= MI8B_STREAM_MIN_K &&
           G % 16 == 0 && G <= MI8B_NORM_F16_MAX_K && N >= MI8B_F16_MIN_N && N <= MI8B_STREAM_MAX_N &&
           mi7b_rms_node_supported(n);
}
static size_t ws_norm_f16(const mi_tensor *n) { return mi8b_f16s_x_bytes(n->src[0]->ne[0], mi_nrows(n->src[0])); }
static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }
static mi_status run_norm_f16(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const int64_t G = n->src[0]->ne[0], N = mi_nrows(n->src[0]);
    void *st = mi_cuda_stream(c);
    if (!aligned16(n->data) || !aligned16(ws))   /* the allocator's offsets are 256-byte aligned: not met */
        return mi7e_rms_norm(st, n->src[0]->data, n->src[1]->data, n->data, G, N, mi_norm_eps(n));
    const bool eo = mi8b_f16s_x_form(N);
    MI_TRY(mi8b_rms_norm_y_f16(st, n->src[0]->data, n->src[1]->data, mi_norm_eps(n), n->data, ws, G, N, eo));
    mi8b_f16s_x_made(n->data, ws, G, N, eo);
    return MI_OK;
}
static const mi_cuda_kernel k_norm_f16 = {
    "RMS norm, 2..64 rows of 2,048..12,280: y and its f16 copy for b6's or b22's matmuls after it, one launch", "b34",
    sup_norm_f16, run_norm_f16, ws_norm_f16, 0};

/* b35: a SwiGLU of 2..64 rows wide enough for b6's and b22's matmuls (the 7B's, before its down
 * projection), writing y and x's f16 copy for the down in one launch */
static bool sup_swiglu_f16(const mi_tensor *n) {
    const mi_tensor *g = n->src[0], *u = n->src[1];
    if (!g || !u || g->type != MI_TYPE_F32 || u->type != MI_TYPE_F32 || n->type != MI_TYPE_F32) return false;
    const int64_t F = n->ne[0], N = mi_nrows(n);
    return g->ne[0] == F && u->ne[0] == F && mi_nrows(g) == N && mi_nrows(u) == N && mi_nelements(n) == F * N &&
           mi_nelements(g) == F * N && mi_nelements(u) == F * N && F >= MI8B_STREAM_MIN_K && F % 16 == 0 &&
           N >= MI8B_F16_MIN_N && N <= MI8B_STREAM_MAX_N;
}
bool mi8b_swiglu_f16_takes(const mi_tensor *n) { return sup_swiglu_f16(n); }
static size_t ws_swiglu_f16(const mi_tensor *n) { return mi8b_f16s_x_bytes(n->ne[0], mi_nrows(n)); }
/* b42: where the run before left its cut bands (8b's pass marked the two), the fused kernel sums
 * them; where it cannot (operands not aligned), the run's fixup first, then the plain path */
static mi_status run_swiglu_f16(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const int64_t F = n->ne[0], N = mi_nrows(n);
    const float *g = n->src[0]->data, *u = n->src[1]->data;
    void *st = mi_cuda_stream(c);
    const bool eo = mi8b_f16s_x_form(N);
    if (mi_swiglu_takes_fixup(n)) {
        const mi_status r = mi8b_swiglu_fixup_f16(st, g, u, n->data, ws, F, N, eo);
        if (r == MI_OK) {
            mi8b_f16s_x_made(n->data, ws, F, N, eo);
            return MI_OK;
        }
        if (r != MI_ERR_UNSUPPORTED) return r;
        mi_err_clear();
        MI_TRY(mi8b_f16s_fixup_flush(st, g, u));
    }
    if (!aligned16(g) || !aligned16(u) || !aligned16(n->data) || !aligned16(ws))
        return mi7b_swiglu(st, g, u, n->data, F * N);
    MI_TRY(mi8b_swiglu_y_f16(st, g, u, n->data, ws, F, N, eo));
    mi8b_f16s_x_made(n->data, ws, F, N, eo);
    return MI_OK;
}
static const mi_cuda_kernel k_swiglu_f16 = {
    "SwiGLU, 2..64 rows of 2,048 or more: y and its f16 copy for b6's or b22's matmul after it, one launch", "b35",
    sup_swiglu_f16, run_swiglu_f16, ws_swiglu_f16, 0};

/* ---------------- TOPK: a batch's top-k step, the candidates where the logits are ---------------- */
static bool sup_topk(const mi_tensor *n) {
    const mi_tensor *x = n->src[0], *sc = n->src[1];
    return x && sc && x->type == MI_TYPE_F32 && sc->type == MI_TYPE_F32 && n->type == MI_TYPE_F32 && x->ne[2] == 1 &&
           x->ne[3] == 1 && sc->ne[0] == 1 && sc->ne[1] == x->ne[1] && n->ne[0] == 2 * (int64_t)n->p[0] &&
           n->ne[1] == x->ne[1] && mi8b_topk_supported(x->ne[0], n->p[0]);
}
static mi_status run_topk(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    return mi8b_topk(mi_cuda_stream(c), n->src[0]->data, n->src[1]->data, n->data, n->src[0]->ne[0], n->p[0],
                     n->src[0]->ne[1]);
}
static const mi_cuda_kernel k_topk = {"top-k candidates per row, radix select, one block a row", "b4", sup_topk,
                                      run_topk, NULL, 0};

void mi_phase8b_install(void) {
    mi_cuda_add_kernel(MI_OP_KV_SCATTER, &mi8b_k_kv_scatter);
    mi_cuda_set_op_check(MI_OP_KV_SCATTER, mi8b_chk_kv_scatter);   /* in run()'s place on a replay */
    mi_cuda_set_op_check(MI_OP_ATTN_PAGED, mi8b_chk_attn_paged);
    mi_cuda_add_kernel(MI_OP_ATTN_PAGED, &mi8b_k_attn_paged);
    mi_cuda_item_declare("b20", "a step's q and k RoPE and its K and V scatters in one launch (8a's d14 over the "
                                "step's rows, each row to its cache row)");
    mi_cuda_add_kernel(MI_OP_ROPE, &mi8b_k_rkv_rope);
    mi_cuda_add_kernel(MI_OP_KV_SCATTER, &mi8b_k_rkv_store);
    mi_cuda_add_kernel(MI_OP_KV_SCATTER, &mi8b_k_rkv_last);
    mi8a_rope_kv_rows_add(&mi8b_k_rkv_rope, &mi8b_k_rkv_store, &mi8b_k_rkv_last);
    mi_cuda_item_declare("b1", "a batch's matmuls of 9..64 rows split over K, so the int8 tensor-core tiles fill the GPU");
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_mm_split);
    mi_cuda_item_declare("b2", "a step of many sequences captured into a CUDA graph once a shape and bucket, then replayed");
    mi_cuda_add_kernel(MI_OP_ATTN_PAGED, &mi8b_k_attn_paged_replay);
    mi_cuda_item_declare("b37", "a step's paged attention before b6's or b22's o projection writes its output's f16 "
                                "copy beside it, for the matmul to read (no copy kernel)");
    mi_cuda_add_kernel(MI_OP_ATTN_PAGED, &mi8b_k_attn_paged_f16);          /* in front of b2's */
    mi_cuda_add_kernel(MI_OP_ATTN_PAGED, &mi8b_k_attn_paged_f16_replay);   /* in front of b37's without b2 */
    mi_cuda_item_declare("b3", "a batch's matmuls of 9..64 rows stream the weights' raw bytes through a cp.async ring "
                               "into int8 tensor cores (Q4_K, Q6_K, Q4_0, Q8_0)");
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_mm_stream);   /* in front of b1 */
    mi_cuda_item_declare("b5", "b3's matmul at 33..64 rows through a 2-stage ring: two blocks a multiprocessor");
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_mm_stream2);   /* in front of b3 */
    mi_cuda_item_declare("b10", "b3's stream kernel also below K = 2048 for weights of 32,768 rows or more (an "
                                "output head), which would go to 7e's f16 path and its per-step conversion");
    mi_cuda_item_declare("b6", "a batch's Q4_K/Q6_K matmuls of 17..64 rows dequantize the streamed weights into f16 "
                               "tensor cores: float sums over all of K, no per-unit scaling");
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_mm_f16s);   /* in front of b5 */
    mi_cuda_item_declare("b36", "a batch's residual add folded into b6's / b22's matmul before it (MATMUL_ADD at "
                                "17..64 rows: the 7B's o and down projections), added where the outputs are stored");
    mi_cuda_add_kernel(MI_OP_MATMUL_ADD, &k_mm_add_f16s);
    mi_cuda_item_declare("b11", "b6's warps each take every token and half a stage's units: a row's unit "
                                "dequantized once, not by two warps, and twice the independent mma chains a warp");
    mi_cuda_item_declare("b22", "b6's matmul on Hopper's wgmma: a warp's dequantized f16 fragments are the A operand "
                                "from registers, the activations the B operand read from shared memory by the tensor "
                                "cores (one wgmma a warpgroup per 64 rows x 16 k, not 8 mma.sync and 8 fragment "
                                "loads a warp)");
    mi_cuda_item_declare("b25", "b22's stage without the block's scale pass and its barrier: each quad computes its rows' "
                                "scales and shares them by shuffles; Q4_K rows copied as whole 16-byte chunks");
    mi_cuda_item_declare("b28", "b25's stage fed by bulk tensor copies (TMA) completing on a slot's mbarrier: the "
                                "activations' four column blocks always, a band's Q4_K weights too, issued by one "
                                "thread instead of every thread's 16-byte cp.async");
    mi_cuda_item_declare("b29", "8b's kernels of a batched step launched as programmatic dependents (the f16 GEMMs "
                                "with their first stages' weights loading before the wait, their x copies and fixups, "
                                "the paged attention and its combine, the K split's sum, b24's norm)");
    mi_cuda_item_declare("b30", "b6's and b22's matmuls of one x in consecutive nodes (q, k, v; gate, up) convert x to "
                                "f16 once: the later ones read the copy the first left in the workspace");
    mi_cuda_item_declare("b31", "with b28, a stage's Q6_K weight rows as one bulk copy a row (the 16-byte windows "
                                "covering its 210 bytes) by the band's row threads, not 15 cp.async a row");
    mi_cuda_item_declare("b32", "with b28, a warpgroup's products of a stage left running while it dequantizes the "
                                "next (waited for before each pair's registers are reused and at a piece's end), not "
                                "drained before every stage's barrier (Q6_K's three ring slots take it by loading "
                                "one stage ahead, not two)");
    mi_cuda_item_declare("b33", "with b28, a K split's band summed by its chunks' blocks launched as one thread block "
                                "cluster, through each other's shared memory, instead of partials in global memory "
                                "and the fixup launch");
    mi_cuda_item_declare("b48", "with b33, the K split chosen with the blocks its clusters keep resident at once "
                                "(whole clusters of a GPC's multiprocessors), not one a multiprocessor: a split "
                                "whose clusters need a second wave is priced as such");
    mi_cuda_item_declare("b49", "with b40, a run of Q4_K matmuls then Q6_K ones of one x (the 7B's q, k and a Q6_K v) "
                                "in one launch of b22's kernel, each block in its band's format (8b's pass marks "
                                "such a run)");
    mi_cuda_item_declare("b39", "with b32 and Q4_K weights by the bulk copy, a stage's slot refilled once its warps "
                                "arrived on the slot's empty mbarrier (their products of it done): no block-wide "
                                "barrier a stage");
    mi_cuda_item_declare("b40", "a run of b6's / b22's Q4_K matmuls of one x (q, k and a Q4_K v; gate and up) in one "
                                "launch: one plan over the run's bands, one fixup, x's f16 copy once");
    mi_cuda_item_declare("b42", "with b40 and b35, a gate/up run's cut bands summed by the SwiGLU after it as it "
                                "reads them (8b's pass marks the pair), not by the fixup launch: the same sums");
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_f16s_run_defer);   /* in front of b6 (after b22 is declared) */
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_f16s_run_last);
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_f16s_run_mixed_last);
    mi8a_run_add(&k_mm_f16s, &k_f16s_run_defer, &k_f16s_run_last, NULL, NULL);
    mi_cuda_item_declare("b12", "a batch's Q4_0 matmuls at K <= 1024 in one launch after x's f16 copy: a band's rows "
                                "and every token over the whole K in shared memory, no K split");
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_mm_small);   /* in front of b1 and b3 */
    mi_cuda_item_declare("b13", "a run of b12's matmuls of one x (q, k, v; gate, up) in one launch, x's f16 copy "
                                "made once; a block takes band after band, the next band's rows loading meanwhile");
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_small_run_defer);
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_small_run_last);
    mi_cuda_item_declare("b24", "the RMS norm before a b13 run that alone reads it written straight into x's f16 copy "
                                "(one launch for the norm and the copy; 8a's d17 fold at 2..64 rows)");
    mi_cuda_add_kernel(MI_OP_NORM_MATMUL, &k_small_run_defer_norm);
    mi_cuda_add_kernel(MI_OP_NORM_MATMUL, &k_small_run_last_norm);
    mi8a_run_add(&k_mm_small, &k_small_run_defer, &k_small_run_last, &k_small_run_defer_norm, &k_small_run_last_norm);
    mi_cuda_item_declare("b15", "a batch's Q4_0 matmuls past K = 1024 (the 0.5B's down) on b12's kernel, K split "
                                "into slices of 896, the slices' sums added in order by a second kernel");
    mi_cuda_add_kernel(MI_OP_MATMUL, &k_mm_ksplit);   /* in front of b3 and b5 */
    mi_cuda_item_declare("b19", "b12's kernel converts x's float slice to f16 in each block (as the copy kernel "
                                "does, while the first bands' rows load), not after a copy kernel of its own");
    mi_cuda_item_declare("b21", "b6's and b12's f16 kernels from 2 rows (b6 from 17 without it), and a batch's fused "
                                "FFN at 2..8 rows as their gate and up, then SwiGLU, where 7e's staged rows read the "
                                "weights once a row");
    mi_cuda_add_kernel(MI_OP_FFN_SWIGLU, &k_ffn_f16);   /* in front of 7e's and 7c's */
    mi_cuda_item_declare("b34", "an RMS norm of 2..64 rows before b6's or b22's matmuls writes x's f16 copy beside "
                                "its output, for the matmuls to read (one launch for the norm and the copy)");
    mi_cuda_add_kernel(MI_OP_RMS_NORM, &k_norm_f16);   /* in front of 7e's */
    mi_cuda_item_declare("b35", "a SwiGLU of 2..64 rows before b6's or b22's down projection writes its f16 copy "
                                "beside its output, for the matmul to read (one launch for the activation and the copy)");
    mi_cuda_add_kernel(MI_OP_SWIGLU, &k_swiglu_f16);   /* in front of 7b's */
    mi_cuda_item_declare("b16", "b12's kernel takes Q8_0 weights too (the 0.5B's output head at K = 896, which b3's "
                                "stream kernel reads at a fraction of the bandwidth)");
    mi_cuda_item_declare("b7", "a step's paged attention on the tensor cores (F16 caches, hd 64 or 128): scores and "
                               "value sums as mma over 64-key tiles, q and the probabilities in two f16 parts");
    mi_cuda_item_declare("b17", "b7's paged attention takes as many splits as fill one wave of the blocks a "
                                "multiprocessor holds (its occupancy), rounded down, not about four blocks a multiprocessor");
    mi_cuda_item_declare("b27", "b7's paged attention looks up a tile's cache rows once a key (32-bit, one lane "
                                "a key, shuffled to the copies), not once a 16-byte copy in 64-bit arithmetic");
    mi_cuda_item_declare("b43", "b7's paged attention loads its 64-key tiles through three buffers, two tiles in flight "
                                "while one is used and one barrier a tile, not two buffers (one in flight, two "
                                "barriers), where three keep its blocks a multiprocessor");
    mi_cuda_item_declare("b44", "b7's paged attention for groups of 8 heads or fewer with q's and the probabilities' two "
                                "f16 parts as the upper and lower rows of one mma (8a's d34 layout): half the mma of a "
                                "tile, the softmax on one row a thread");
    mi_cuda_item_declare("b4", "a batch's top-k steps keep the logits on the device: each row's 64 best candidates "
                               "cross back (topk)");
    mi_cuda_add_kernel(MI_OP_TOPK, &k_topk);
    mi_cuda_item_declare("b47", "a decode step's paged attention does the step's q and k RoPE and its K and V scatters "
                                "(b20's launch) inside b7's kernel: q rotated into shared memory by each block, the "
                                "row's own key and value stored by the split that holds it, before its tiles read "
                                "them");
    mi_cuda_add_kernel(MI_OP_KV_SCATTER, &mi8b_k_rkv_attn_store);
    mi_cuda_add_kernel(MI_OP_ATTN_PAGED, &mi8b_k_attn_paged_rkv);
    mi_cuda_add_kernel(MI_OP_ATTN_PAGED, &mi8b_k_attn_paged_rkv_replay);      /* in front of b47's without b2 */
    mi_cuda_add_kernel(MI_OP_ATTN_PAGED, &mi8b_k_attn_paged_rkv_f16);         /* in front of b47's without b37 */
    mi_cuda_add_kernel(MI_OP_ATTN_PAGED, &mi8b_k_attn_paged_rkv_f16_replay);
    mi7c_add_fusion(mi8b_fuse_batch);
}

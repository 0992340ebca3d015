/* Phase 7e's items and kernels as dispatch candidates (phase7a_skeleton/cuda_dispatch.h).
 * Each candidate goes in front of the lower phases' for its op and names the item that
 * switches it (MINFER_PERF_OFF=e2,e7 removes those items' candidates). supports() is the
 * kernel's own shape rule (cheap tests first: it runs for every node at assignment) and then
 * the lower phase's node contract, so a choice never widens what the op accepts. docs/ARCHITECTURE.md has the resulting order per op and shape. */
#include "phase7e_perf/perf7e.h"
#include "phase7b_ops/ops7b.h"
#include "phase7c_wiring/wiring7c.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "common/graph/graph.h"

static const void *ptr(const mi_tensor *t) { return t ? t->data : NULL; }

/* ---------------- MATMUL: W [K, M] @ x [K, N] (+ bias [M]) -> [M, N] ---------------- */
#define MM_ARGS(n) (n)->src[0]->type, (n)->src[0]->data, (n)->src[1]->data, ptr((n)->src[2]), (n)->data, \
                   (n)->src[0]->ne[0], (n)->src[0]->ne[1]
static int64_t mm_n(const mi_tensor *n) { return mi_nrows(n->src[1]); }
static size_t mm_act_ws(const mi_tensor *n) {
    return mi7b_act_row_bytes(n->src[0]->type, n->src[0]->ne[0]) * (size_t)mm_n(n);
}

/* one token, Q4_K: every warp streams its own rows (matvec_q4k_exact.cu) */
static bool sup_mm_q4k(const mi_tensor *n) {
    return n->src[0] && n->src[0]->type == MI_TYPE_Q4_K && mi7e_matvec_q4k_supported(n->src[0]->type, n->src[0]->ne[0], mm_n(n)) &&
           mi7b_matmul_node_supported(n);
}
static size_t ws_mm_q4k(const mi_tensor *n) { return mi7e_matvec_q4k_workspace(n->src[0]->type, n->src[0]->ne[0]); }
static mi_status run_mm_q4k_qx(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    return mi7e_matvec_q4k_qx(mi_cuda_stream(c), MM_ARGS(n), ws);
}
static mi_status run_mm_q4k(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    return mi7e_matvec_q4k(mi_cuda_stream(c), MM_ARGS(n), ws);
}

/* N <= 8, K from MI7E_MATVEC_STAGED_MIN_K on: below it 7b's warp-per-row kernel is faster
 * (results/notes/PHASE7E.md has the measurement) */
static bool sup_mm_staged(const mi_tensor *n) {
    return n->src[0] && n->src[0]->ne[0] >= MI7E_MATVEC_STAGED_MIN_K &&
           mi7e_matvec_staged_supported(n->src[0]->type, n->src[0]->ne[0], mm_n(n)) && mi7b_matmul_node_supported(n);
}
static size_t ws_mm_staged(const mi_tensor *n) {
    return mi7e_matvec_staged_workspace(n->src[0]->type, n->src[0]->ne[0], mm_n(n));
}
static mi_status run_mm_staged(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    return mi7e_matvec_staged(mi_cuda_stream(c), MM_ARGS(n), mm_n(n), ws);
}

/* prefill from MI7E_GEMM_F16_MIN_N tokens: f16 tensor cores on weights dequantized once */
static bool sup_mm_f16(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return w && mm_n(n) >= MI7E_GEMM_F16_MIN_N && mi7e_gemm_f16_supported(w->type, w->ne[0], w->ne[1], mm_n(n)) &&
           mi7b_matmul_node_supported(n);
}
static bool sup_mm_f16_wgmma(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return sup_mm_f16(n) && mi7e_gemm_f16_wgmma_supported(w->type, w->ne[0], w->ne[1], mm_n(n));
}
static size_t ws_mm_f16(const mi_tensor *n) {
    const mi_tensor *w = n->src[0];
    return mi7e_gemm_f16_workspace(w->type, w->ne[0], w->ne[1], mm_n(n));
}
static mi_status run_mm_f16(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    return mi7e_gemm_f16(mi_cuda_stream(c), MM_ARGS(n), mm_n(n), ws);
}
static mi_status run_mm_f16_wgmma(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    return mi7e_gemm_f16_wgmma(mi_cuda_stream(c), MM_ARGS(n), mm_n(n), ws);
}

/* N > 8: int8 tensor cores on the CPU's activation quantization (same bound as 7b) */
static bool sup_mm_int8(const mi_tensor *n) {
    return n->src[0] && mm_n(n) > MI7E_MATVEC_MAX_N &&
           mi7e_gemm_int8_supported(n->src[0]->type, n->src[0]->ne[0], mm_n(n)) && mi7b_matmul_node_supported(n);
}
static size_t ws_mm_int8(const mi_tensor *n) {
    const size_t a = mi7e_gemm_int8_workspace(n->src[0]->type, n->src[0]->ne[0], mm_n(n)), b = mm_act_ws(n);
    return a > b ? a : b;
}
static mi_status run_mm_int8(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    return mi7e_gemm_int8(mi_cuda_stream(c), MM_ARGS(n), mm_n(n), ws);
}

/* ---------------- FFN_SWIGLU: W_gate, W_up [K, F], x [K, N] -> [F, N] ---------------- */
#define FFN_ARGS(n) (n)->src[0]->type, (n)->src[0]->data, (n)->src[1]->data, (n)->src[2]->data, (n)->data, \
                    (n)->src[0]->ne[0], (n)->src[0]->ne[1]
static bool sup_ffn_q4k(const mi_tensor *n) {
    const mi_tensor *wg = n->src[0];
    return wg && wg->type == MI_TYPE_Q4_K && n->src[1] && n->src[1]->type == MI_TYPE_Q4_K && n->src[2] &&
           mi7e_matvec_q4k_supported(wg->type, wg->ne[0], mi_nrows(n->src[2])) && mi7c_ffn_node_supported(n);
}
static size_t ws_ffn_q4k(const mi_tensor *n) { return mi7e_matvec_q4k_workspace(n->src[0]->type, n->src[0]->ne[0]); }
static mi_status run_ffn_q4k_qx(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    return mi7e_ffn_q4k_qx(mi_cuda_stream(c), FFN_ARGS(n), ws);
}
static mi_status run_ffn_q4k(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    return mi7e_ffn_q4k(mi_cuda_stream(c), FFN_ARGS(n), ws);
}
static bool sup_ffn_staged(const mi_tensor *n) {
    const mi_tensor *wg = n->src[0];
    return wg && n->src[2] && mi7e_matvec_staged_supported(wg->type, wg->ne[0], mi_nrows(n->src[2])) &&
           mi7c_ffn_node_supported(n);
}
static size_t ws_ffn_staged(const mi_tensor *n) {
    return mi7e_matvec_staged_workspace(n->src[0]->type, n->src[0]->ne[0], mi_nrows(n->src[2]));
}
static mi_status run_ffn_staged(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    return mi7e_ffn_staged(mi_cuda_stream(c), FFN_ARGS(n), mi_nrows(n->src[2]), ws);
}

/* ---------------- ATTN: prefill batches (N >= MI7E_ATTN_MIN_N), n_past from the node ----------------
 * Decode batches keep 7d's candidate, which reads n_past from the step params. */
#define ATTN_SHAPE(n) mi_attn_head_dim(n), mi_attn_n_head(n), mi_attn_n_head_kv(n), (n)->src[1]->type, mi_nrows((n)->src[0])
#define ATTN_ARGS(n) (n)->src[0]->data, (n)->src[1]->data, (n)->src[2]->data, (n)->src[1]->type, (n)->data, \
                     mi_nrows((n)->src[0]), mi_node_n_past(n), mi_attn_head_dim(n), mi_attn_n_head(n), \
                     mi_attn_n_head_kv(n), mi_attn_scale(n)
static bool sup_attn_flash(const mi_tensor *n) {
    return n->src[0] && n->src[1] && mi7e_attn_flash_supported(ATTN_SHAPE(n)) && mi7b_attn_node_supported(n);
}
static mi_status run_attn_flash(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    return mi7e_attn_flash(mi_cuda_stream(c), ATTN_ARGS(n));
}
static bool sup_attn_tiled(const mi_tensor *n) {
    return n->src[0] && n->src[1] && mi7e_attn_tiled_supported(ATTN_SHAPE(n)) && mi7b_attn_node_supported(n);
}
static mi_status run_attn_tiled(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    return mi7e_attn_tiled(mi_cuda_stream(c), ATTN_ARGS(n));
}

/* ---------------- RMS_NORM: 7b's contract and bits, eight loads in flight ---------------- */
static mi_status run_rms_wide(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    const mi_tensor *x = n->src[0];
    const int64_t G = mi_norm_group(n);
    return mi7e_rms_norm(mi_cuda_stream(c), x->data, n->src[1]->data, n->data, G, mi_nelements(x) / G, mi_norm_eps(n));
}

/* front to back within each op; install adds them back to front */
static const mi_cuda_kernel k_mm_q4k_qx = {"matmul, one token, Q4_K streaming rows, x quantized in the kernel",
                                           "e12,e14", sup_mm_q4k, run_mm_q4k_qx, ws_mm_q4k, 0};
static const mi_cuda_kernel k_mm_q4k = {"matmul, one token, Q4_K streaming rows", "e12", sup_mm_q4k, run_mm_q4k,
                                        ws_mm_q4k, 0};
static const mi_cuda_kernel k_mm_staged = {"matmul, N <= 8, staged weight rows", "e2", sup_mm_staged, run_mm_staged,
                                           ws_mm_staged, 0};
static const mi_cuda_kernel k_mm_f16_wgmma = {"matmul, prefill, f16 tensor cores (wgmma)", "e13,e15",
                                              sup_mm_f16_wgmma, run_mm_f16_wgmma, ws_mm_f16, 0};
static const mi_cuda_kernel k_mm_f16 = {"matmul, prefill, f16 tensor cores (mma.sync)", "e13", sup_mm_f16, run_mm_f16,
                                        ws_mm_f16, 0};
static const mi_cuda_kernel k_mm_int8 = {"matmul, N > 8, int8 tensor cores", "e7", sup_mm_int8, run_mm_int8,
                                         ws_mm_int8, 0};
static const mi_cuda_kernel k_ffn_q4k_qx = {"fused FFN, one token, Q4_K streaming rows, x quantized in the kernel",
                                            "e12,e14", sup_ffn_q4k, run_ffn_q4k_qx, ws_ffn_q4k, 0};
static const mi_cuda_kernel k_ffn_q4k = {"fused FFN, one token, Q4_K streaming rows", "e12", sup_ffn_q4k, run_ffn_q4k,
                                         ws_ffn_q4k, 0};
static const mi_cuda_kernel k_ffn_staged = {"fused FFN, N <= 8, staged weight rows", "e5", sup_ffn_staged,
                                            run_ffn_staged, ws_ffn_staged, 0};
static const mi_cuda_kernel k_attn_flash = {"attention, prefill, f16 tensor cores (flash)", "e10", sup_attn_flash,
                                            run_attn_flash, NULL, 0};
static const mi_cuda_kernel k_attn_tiled = {"attention, prefill, query tiles", "e8", sup_attn_tiled, run_attn_tiled,
                                            NULL, 0};
static const mi_cuda_kernel k_rms_wide = {"RMS norm, eight loads in flight", "e9", mi7b_rms_node_supported,
                                          run_rms_wide, NULL, 0};

const mi_cuda_kernel *mi7e_matmul_q4k_kernel(void) { return &k_mm_q4k_qx; }
const mi_cuda_kernel *mi7e_matmul_staged_kernel(void) { return &k_mm_staged; }
const mi_cuda_kernel *mi7e_ffn_staged_kernel(void) { return &k_ffn_staged; }

void mi_phase7e_install(void) {
    static const struct { const char *name, *what; } items[] = {
        {"e2", "one-token quantized matmul on staged weight rows (K >= 2048, N <= 8)"},
        {"e5", "fused FFN gate/up + SwiGLU on staged weight rows"},
        {"e7", "int8 tensor-core matmul for N > 8"},
        {"e8", "query-tiled prefill attention"},
        {"e9", "RMS norm with eight loads in flight"},
        {"e10", "f16 tensor-core (flash) prefill attention"},
        {"e12", "Q4_K one-token matmul and fused FFN, streaming rows"},
        {"e13", "f16 tensor-core prefill matmul on weights dequantized once per call"},
        {"e14", "e12 with x quantized inside the kernel"},
        {"e15", "e13 on Hopper's wgmma (sm_90a build, cc 9.0 device)"},
    };
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) mi_cuda_item_declare(items[i].name, items[i].what);
    const mi_cuda_kernel *mm[] = {&k_mm_int8, &k_mm_f16, &k_mm_f16_wgmma, &k_mm_staged, &k_mm_q4k, &k_mm_q4k_qx};
    for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) mi_cuda_add_kernel(MI_OP_MATMUL, mm[i]);
    const mi_cuda_kernel *ffn[] = {&k_ffn_staged, &k_ffn_q4k, &k_ffn_q4k_qx};
    for (size_t i = 0; i < sizeof ffn / sizeof ffn[0]; i++) mi_cuda_add_kernel(MI_OP_FFN_SWIGLU, ffn[i]);
    mi_cuda_add_kernel(MI_OP_ATTN, &k_attn_tiled);
    mi_cuda_add_kernel(MI_OP_ATTN, &k_attn_flash);
    mi_cuda_add_kernel(MI_OP_RMS_NORM, &k_rms_wide);
}

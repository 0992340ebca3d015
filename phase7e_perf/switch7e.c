/* Phase 7e's install and switch: MINFER_PERF_OFF=e2,e5,e7 (comma list, "all") turns items
 * off. The install keeps the op-table entries it finds (7b's MATMUL, 7c's FFN_SWIGLU) and
 * puts 7e entries in front of them that fall back to the kept entry whenever an item is
 * off or a shape is outside its kernel. Each switch state installs distinct exec function
 * pointers, so 7d's graph cache (keyed on the execs) never replays a kernel of another state. */
#include "phase7e_perf/perf7e.h"
#include "phase7e_perf/fattn7e.h"
#include "phase7e_perf/mmv12.h"
#include "phase7e_perf/gemm13.h"
#include "phase7b_ops/ops7b.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "common/graph/graph.h"
#include "phase7d_graphs/graphs7d.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Items off by default (MINFER_PERF_OFF unset): an item whose bench-7e ratio off/on is >= 1
 * (it does not pay) goes here, with the numbers in docs/PHASE7E.md. */
/* Every measured item pays where it runs (bench-7e at 99295c7 for e14 and e15, 125d6a5 for the
 * rest; docs/PHASE7E.md). e16 was written after the session's last device run: off until its
 * gate_7e cases and bench-7e A/B have run on a GPU. */
#define MI7E_DEFAULT_OFF "e16"

static const char *const g_names[MI7E_COUNT] = {"e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9", "e10", "e11", "e12", "e13",
                                               "e14", "e15", "e16"};
static unsigned g_off;   /* bit i: item i off */
static bool g_installed;

static mi_cuda_exec_fn g_mm_exec, g_ffn_exec, g_attn_exec, g_rms_exec;
static mi_cuda_supports_fn g_mm_sup, g_ffn_sup, g_rms_sup;
static mi_cuda_workspace_fn g_mm_ws, g_ffn_ws;

static _Atomic uint64_t g_n_e2, g_n_e5, g_n_e7, g_n_e8, g_n_e9, g_n_e10, g_n_e11, g_n_e12, g_n_e13, g_n_fb, g_n_e14, g_n_e16;

const char *mi7e_item_name(mi7e_item it) { return (unsigned)it < MI7E_COUNT ? g_names[it] : "?"; }
bool mi7e_item_on(mi7e_item it) { return (unsigned)it < MI7E_COUNT && !(g_off & (1u << it)); }

void mi7e_counters_get(mi7e_counters *out) {
    out->e2_launches = atomic_load(&g_n_e2);
    out->e5_launches = atomic_load(&g_n_e5);
    out->e7_launches = atomic_load(&g_n_e7);
    out->e8_launches = atomic_load(&g_n_e8);
    out->e9_launches = atomic_load(&g_n_e9);
    out->e10_launches = atomic_load(&g_n_e10);
    out->e11_launches = atomic_load(&g_n_e11);
    out->e12_launches = atomic_load(&g_n_e12);
    out->e13_launches = atomic_load(&g_n_e13);
    out->fallback_launches = atomic_load(&g_n_fb);
    out->e14_launches = atomic_load(&g_n_e14);
    out->e16_launches = atomic_load(&g_n_e16);
}

static int64_t nrows(const mi_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

/* ---------------- MATMUL: W [K, M] @ x [K, N] (+ bias [M]) -> [M, N] ---------------- */
static size_t ws_mm(const mi_tensor *n) {
    const mi_tensor *w = n->src[0], *x = n->src[1];
    size_t a = g_mm_ws ? g_mm_ws(n) : 0;
    size_t b = mi7b_act_row_bytes(w->type, w->ne[0]) * (size_t)nrows(x);
    /* e11's unpacked chunk, whatever the switch says now: the workspace is sized once
     * per split and an A/B may turn e11 on later */
    if (nrows(x) >= MI7E_PRE_MIN_N && mi7e_mmq_supported(w->type, w->ne[0], nrows(x))) {
        const size_t c = mi7e_mmq_pre_workspace(w->type, w->ne[0], w->ne[1], nrows(x));
        if (c > b) b = c;
    }
    /* e13's f16 operands, likewise sized whatever the switch says */
    if (nrows(x) >= MI7E_F16_MIN_N && mi7e_gemm13_supported(w->type, w->ne[0], w->ne[1], nrows(x))) {
        const size_t c = mi7e_gemm13_workspace(w->type, w->ne[0], w->ne[1], nrows(x));
        if (c > b) b = c;
    }
    return a > b ? a : b;
}

static mi_status mm_run(mi_cuda_ctx *c, mi_tensor *n, void *ws, bool e2, bool e7, bool e12, bool e14, bool e16) {
    const mi_tensor *w = n->src[0], *x = n->src[1], *b = n->src[2];
    const int64_t K = w->ne[0], M = w->ne[1], N = nrows(x);
    /* e12 takes Q4_K only: its Q6_K rows timed slower than e2's on the 7B (gate_7e, fe4988b:
     * output 0.222 vs 0.201 ms, FFN down 0.045 vs 0.039 ms; Q4_K 8 to 33% faster) */
    if (e12 && w->type == MI_TYPE_Q4_K && mi7e_mmv12_supported(w->type, K, N)) {
        atomic_fetch_add(&g_n_e12, 1);
        if (e14) {   /* e12 quantizing x in the kernel: same bits, one launch fewer */
            atomic_fetch_add(&g_n_e14, 1);
            return mi7e_mmv14(mi_cuda_stream(c), w->type, w->data, x->data, b ? b->data : NULL, n->data, K, M, ws);
        }
        return mi7e_mmv12(mi_cuda_stream(c), w->type, w->data, x->data, b ? b->data : NULL, n->data, K, M, ws);
    }
    /* e2 from MI7E_MMV_MIN_K on: bench-7e at 84a3ee1 measured it x1.09 on the 7B's decode (K 3584 /
     * 18944) but x0.975 on the 0.5B's (K 896 / 4864), where 7b's warp-per-row kernel wins */
    if (e2 && K >= MI7E_MMV_MIN_K && mi7e_mmv_supported(w->type, K, N)) {
        atomic_fetch_add(&g_n_e2, 1);
        if (e16) {   /* one token of a 32-element format: the kernel quantizes x itself (same bits) */
            atomic_fetch_add(&g_n_e16, 1);
            return mi7e_mmv_qin(mi_cuda_stream(c), w->type, w->data, x->data, b ? b->data : NULL, n->data, K, M, N, ws);
        }
        return mi7e_mmv(mi_cuda_stream(c), w->type, w->data, x->data, b ? b->data : NULL, n->data, K, M, N, ws);
    }
    /* e16: below e2's K the one-token matmul of the 32-element formats is 7b's kernel; e16 is the
     * same kernel with x quantized inside it (one launch instead of two) */
    if (e16 && mi7e_mmv16_supported(w->type, K, N)) {
        atomic_fetch_add(&g_n_e16, 1);
        return mi7e_mmv16(mi_cuda_stream(c), w->type, w->data, x->data, b ? b->data : NULL, n->data, K, M);
    }
    /* e13, like e11, is read per call (prefill splits are never captured) and takes the
     * prefill matmuls from MI7E_F16_MIN_N tokens on, before e7 */
    if (mi7e_item_on(MI7E_E13) && N >= MI7E_F16_MIN_N && mi7e_gemm13_supported(w->type, K, M, N)) {
        atomic_fetch_add(&g_n_e13, 1);
        return mi7e_gemm13(mi_cuda_stream(c), w->type, w->data, x->data, b ? b->data : NULL, n->data, K, M, N, ws);
    }
    if (e7 && mi7e_mmq_supported(w->type, K, N)) {
        atomic_fetch_add(&g_n_e7, 1);
        /* e11 is read per call: an N > 8 matmul never runs inside a captured (decode) split.
         * It pays only on long prompts (bench_7e on the H200, 7B: x1.10 at N = 2048, x0.81 at
         * N = 512, where the one-time unpack weighs more than the tiles it saves). */
        const bool pre = mi7e_item_on(MI7E_E11) && N >= MI7E_PRE_MIN_N;
        if (pre) atomic_fetch_add(&g_n_e11, 1);
        return mi7e_mmq(mi_cuda_stream(c), w->type, w->data, x->data, b ? b->data : NULL, n->data, K, M, N, ws, pre);
    }
    atomic_fetch_add(&g_n_fb, 1);
    return g_mm_exec(c, n, ws);
}
/* one exec per (e2, e7, e12, e14, e16) state: distinct pointers (see the file comment); index
 * e2 | e7 << 1 | e12 << 2 | e14 << 3 | e16 << 4, where e14 counts only with e12 on (it is a form
 * of e12: with e12 off it changes nothing, so it keeps the pointer of its e14-off state); entry 0
 * (all off) is 7b's own; the entries with e14 set and e12 clear are never used */
#define EX_MM(i) \
    static mi_status ex_mm_##i(mi_cuda_ctx *c, mi_tensor *n, void *ws) { \
        return mm_run(c, n, ws, (i) & 1, ((i) >> 1) & 1, ((i) >> 2) & 1, ((i) >> 3) & 1, ((i) >> 4) & 1); \
    }
EX_MM(1) EX_MM(2) EX_MM(3) EX_MM(4) EX_MM(5) EX_MM(6) EX_MM(7) EX_MM(12) EX_MM(13) EX_MM(14) EX_MM(15)
EX_MM(16) EX_MM(17) EX_MM(18) EX_MM(19) EX_MM(20) EX_MM(21) EX_MM(22) EX_MM(23) EX_MM(28) EX_MM(29) EX_MM(30)
EX_MM(31)
static const mi_cuda_exec_fn k_ex_mm[32] = {
    NULL,     ex_mm_1,  ex_mm_2,  ex_mm_3,  ex_mm_4,  ex_mm_5,  ex_mm_6,  ex_mm_7,  NULL,     NULL,     NULL,
    NULL,     ex_mm_12, ex_mm_13, ex_mm_14, ex_mm_15, ex_mm_16, ex_mm_17, ex_mm_18, ex_mm_19, ex_mm_20, ex_mm_21,
    ex_mm_22, ex_mm_23, NULL,     NULL,     NULL,     NULL,     ex_mm_28, ex_mm_29, ex_mm_30, ex_mm_31};

/* ---------------- FFN_SWIGLU: W_gate, W_up [K, F], x [K, N] -> [F, N] ----------------
 * e5 off: the CUDA backend refuses the fused node, so 7c's fusion pass (which asks
 * supports()) leaves gate, up and SwiGLU unfused: the off state is "no fusion". */
static bool sup_ffn(const mi_tensor *n) {
    if (!mi7e_item_on(MI7E_E5) || !g_ffn_sup || !g_ffn_sup(n)) return false;
    return true;   /* ex_ffn runs 7c's kernel where the staged kernel does not fit */
}
static size_t ws_ffn(const mi_tensor *n) {
    size_t a = g_ffn_ws ? g_ffn_ws(n) : 0;
    size_t b = mi7b_act_row_bytes(n->src[0]->type, n->src[0]->ne[0]) * (size_t)nrows(n->src[2]);
    return a > b ? a : b;
}
static mi_status ffn_run(mi_cuda_ctx *c, mi_tensor *n, void *ws, bool e12, bool e14, bool e16) {
    const mi_tensor *wg = n->src[0], *wu = n->src[1], *x = n->src[2];
    const int64_t K = wg->ne[0], F = wg->ne[1], N = nrows(x);
    if (e12 && wg->type == MI_TYPE_Q4_K && wu->type == MI_TYPE_Q4_K && mi7e_mmv12_supported(wg->type, K, N)) {
        atomic_fetch_add(&g_n_e12, 1);
        if (e14) {
            atomic_fetch_add(&g_n_e14, 1);
            return mi7e_ffn14(mi_cuda_stream(c), wg->type, wg->data, wu->data, x->data, n->data, K, F, ws);
        }
        return mi7e_ffn12(mi_cuda_stream(c), wg->type, wg->data, wu->data, x->data, n->data, K, F, ws);
    }
    if (mi7e_mmv_supported(wg->type, K, N)) {
        atomic_fetch_add(&g_n_e5, 1);
        if (e16) {   /* one token of a 32-element format: x quantized in the kernel (same bits) */
            atomic_fetch_add(&g_n_e16, 1);
            return mi7e_ffn_qin(mi_cuda_stream(c), wg->type, wg->data, wu->data, x->data, n->data, K, F, N, ws);
        }
        return mi7e_ffn(mi_cuda_stream(c), wg->type, wg->data, wu->data, x->data, n->data, K, F, N, ws);
    }
    atomic_fetch_add(&g_n_fb, 1);
    return g_ffn_exec(c, n, ws);
}
/* (e12 off / e12 on / e12 + e14 on) x (e16 off / on): six pointers, so a captured decode graph of
 * one state never replays in another */
static mi_status ex_ffn(mi_cuda_ctx *c, mi_tensor *n, void *ws) { return ffn_run(c, n, ws, false, false, false); }
static mi_status ex_ffn12(mi_cuda_ctx *c, mi_tensor *n, void *ws) { return ffn_run(c, n, ws, true, false, false); }
static mi_status ex_ffn14(mi_cuda_ctx *c, mi_tensor *n, void *ws) { return ffn_run(c, n, ws, true, true, false); }
static mi_status ex_ffn_16(mi_cuda_ctx *c, mi_tensor *n, void *ws) { return ffn_run(c, n, ws, false, false, true); }
static mi_status ex_ffn12_16(mi_cuda_ctx *c, mi_tensor *n, void *ws) { return ffn_run(c, n, ws, true, false, true); }
static mi_status ex_ffn14_16(mi_cuda_ctx *c, mi_tensor *n, void *ws) { return ffn_run(c, n, ws, true, true, true); }
static const mi_cuda_exec_fn k_ex_ffn[6] = {ex_ffn, ex_ffn12, ex_ffn14, ex_ffn_16, ex_ffn12_16, ex_ffn14_16};

/* ---------------- ATTN: q [hd*Hq, N], K, V -> [hd*Hq, N] ----------------
 * Prefill-sized batches (N >= 16) take the tiled kernel with n_past from the node; every
 * other batch goes to the entry found at install (7d's, which reads n_past from the device
 * step params inside a captured decode split, else 7b's). 7d captures only one-token
 * splits, so this exec is registered as a step op: for those it is exactly 7d's. */
static mi_status ex_attn(mi_cuda_ctx *c, mi_tensor *n, void *ws) {
    const mi_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    const int64_t N = nrows(q);
    if (mi7e_item_on(MI7E_E10) && mi7e_fattn_supported(n->p[1], n->p[2], n->p[3], k->type, N)) {
        atomic_fetch_add(&g_n_e10, 1);
        return mi7e_fattn(mi_cuda_stream(c), q->data, k->data, v->data, k->type, n->data, N, n->p[0], n->p[1],
                          n->p[2], n->p[3], mi_tensor_pf(n, 4));
    }
    if (mi7e_item_on(MI7E_E8) && mi7e_attn_supported(n->p[1], n->p[2], n->p[3], k->type, N)) {
        atomic_fetch_add(&g_n_e8, 1);
        return mi7e_attn(mi_cuda_stream(c), q->data, k->data, v->data, k->type, n->data, N, n->p[0], n->p[1], n->p[2],
                         n->p[3], mi_tensor_pf(n, 4));
    }
    return g_attn_exec(c, n, ws);
}

/* ---------------- RMS_NORM (e9): 7b's supports(); distinct exec when on (graphs) ---------------- */
static mi_status ex_rms7e(mi_cuda_ctx *c, mi_tensor *n, void *ws) {
    (void)ws;
    const mi_tensor *x = n->src[0];
    const int64_t G = n->p[0];
    atomic_fetch_add(&g_n_e9, 1);
    return mi7e_rms_norm(mi_cuda_stream(c), x->data, n->src[1]->data, n->data, G, mi_nelements(x) / G,
                         mi_tensor_pf(n, 1));
}

static void apply(void) {
    if (!g_installed) return;
    if (g_mm_exec) {
        const bool e12 = mi7e_item_on(MI7E_E12), e14 = e12 && mi7e_item_on(MI7E_E14);
        const int i = (mi7e_item_on(MI7E_E2) ? 1 : 0) | (mi7e_item_on(MI7E_E7) ? 2 : 0) | (e12 ? 4 : 0) | (e14 ? 8 : 0) |
                      (mi7e_item_on(MI7E_E16) ? 16 : 0);
        if (i)
            mi_cuda_set_op(MI_OP_MATMUL, k_ex_mm[i], g_mm_sup, ws_mm);
        else
            mi_cuda_set_op(MI_OP_MATMUL, g_mm_exec, g_mm_sup, g_mm_ws);   /* the 7b entry, untouched */
    }
    /* e5 off: the same entry, whose sup_ffn then refuses every node (no fusion) */
    if (g_ffn_exec && g_ffn_sup)
        mi_cuda_set_op(MI_OP_FFN_SWIGLU, k_ex_ffn[(mi7e_item_on(MI7E_E12) ? (mi7e_item_on(MI7E_E14) ? 2 : 1) : 0) +
                                                    (mi7e_item_on(MI7E_E16) ? 3 : 0)],
                       sup_ffn, ws_ffn);
    if (g_rms_exec) mi_cuda_set_op(MI_OP_RMS_NORM, mi7e_item_on(MI7E_E9) ? ex_rms7e : g_rms_exec, g_rms_sup, NULL);
    /* e15: e13's launcher reads it per call (prefill splits are never captured) */
    mi7e_gemm13_set_wgmma(mi7e_item_on(MI7E_E15));
    /* e6 off: Input nodes take the backend's pageable copy instead of 7d's pinned ring */
    mi_cuda_graph_set_input_staging(mi7e_item_on(MI7E_E6));
}

static mi_status parse_off(const char *list, unsigned *out) {
    unsigned m = 0;
    if (!list) list = "";
    const char *p = list;
    while (*p) {
        while (*p == ',' || *p == ' ') p++;
        if (!*p) break;
        size_t l = strcspn(p, ", ");
        if (l == 3 && !strncmp(p, "all", 3)) m = (1u << MI7E_COUNT) - 1;
        else if (l == 4 && !strncmp(p, "none", 4)) {}
        else if (l == 2 && !strncmp(p, "e1", 2)) {}   /* documentation item: nothing to switch */
        else {
            int found = -1;
            for (int i = 0; i < MI7E_COUNT; i++)
                if (strlen(g_names[i]) == l && !strncmp(p, g_names[i], l)) found = i;
            if (found < 0)
                return mi_err(MI_ERR_INVALID, "MINFER_PERF_OFF: unknown item '%.*s' (items: e2 .. e14, all)",
                              (int)l, p);
            m |= 1u << found;
        }
        p += l;
    }
    *out = m;
    return MI_OK;
}

mi_status mi7e_set_off(const char *list) {
    unsigned m;
    MI_TRY(parse_off(list, &m));
    g_off = m;
    apply();
    return MI_OK;
}

void mi7e_describe(char *buf, size_t n) {
    char on[64] = "", off[64] = "";
    for (int i = 0; i < MI7E_COUNT; i++) {
        char *d = mi7e_item_on((mi7e_item)i) ? on : off;
        size_t l = strlen(d);
        snprintf(d + l, sizeof on - l, "%s%s", l ? "," : "", g_names[i]);
    }
    snprintf(buf, n, "on: %s; off: %s", on[0] ? on : "none", off[0] ? off : "none");
}

void mi_phase7e_install(void) {
    if (g_installed) return;
    mi_cuda_get_op(MI_OP_MATMUL, &g_mm_exec, &g_mm_sup, &g_mm_ws);
    mi_cuda_get_op(MI_OP_FFN_SWIGLU, &g_ffn_exec, &g_ffn_sup, &g_ffn_ws);
    mi_cuda_get_op(MI_OP_RMS_NORM, &g_rms_exec, &g_rms_sup, NULL);
    mi_cuda_supports_fn attn_sup = NULL;
    mi_cuda_workspace_fn attn_ws = NULL;
    mi_cuda_get_op(MI_OP_ATTN, &g_attn_exec, &attn_sup, &attn_ws);
    if (g_attn_exec) {   /* one entry for both states: e8 is read per call (never inside a captured split) */
        mi_cuda_set_op(MI_OP_ATTN, ex_attn, attn_sup, attn_ws);
        mi_cuda_graph_register_step_op(ex_attn);
    }
    g_installed = true;
    unsigned m = 0;
    const char *e = getenv("MINFER_PERF_OFF");
    const bool explicit_off = e != NULL;
    if (!e) e = MI7E_DEFAULT_OFF;
    if (parse_off(e, &m) != MI_OK) {
        mi_log("warning: %s; every 7e item stays on", mi_errmsg());
        m = 0;
    }
    g_off = m;
    apply();
    if (m && explicit_off) {   /* the default state is not news: said only when asked for */
        char d[160];
        mi7e_describe(d, sizeof d);
        mi_log("phase 7e items: %s (MINFER_PERF_OFF=%s)", d, e);
    }
}

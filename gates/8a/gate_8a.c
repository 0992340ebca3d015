/* gate_8a: phase 8a's fusion pass and items through whole models on the device.
 *  kernel cases (kernels8a.c): each 8a kernel alone against lower phases' kernels, the CPU and
 *            itself (fused_*, q6k_*, rope_pairs_*, argmax_rows, attn_split_*)
 *  model_*   a whole model, prefill + teacher-forced decode steps, with d1 and d2 on against
 *            both off: the fusion pass fused nodes, each decode step launched fewer kernels,
 *            the logits are bit-identical (every fused kernel computes exactly the unfused
 *            kernels' arithmetic in their order)
 *  greedy_ahead_*  greedy decodes with the step queued ahead of the host's read against the same
 *            calls read first: tokens, positions and the last logits bit for bit
 *  item tests: one item on against off through a model (bit for bit, or within the bound where
 *            only the order of the sums differs), graph reuse; the passes on the host: passes8a.c
 * Every earlier gate runs at PHASE=8a too (make gate-8a). */
#include "gates/gate_util.h"
#include "gates/7e/dev7e.h"
#include "gates/8a/kernels8a.h"
#include "gates/8a/passes8a.h"
#include "phase8a_decode/decode8a.h"
#include "phase7e_perf/perf7e.h"
#include "phase7b_ops/ops7b.h"
#include "phase7c_wiring/wiring7c.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "common/model/mi.h"
#include "common/backend/backend.h"
#include "common/backend/sched.h"
#include "common/graph/graph.h"
#include "common/core/mi_canon.h"
#include "common/core/mi_fp16.h"
#include "common/sampler/sampler.h"
#include "common/quant/mi_types.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

static gu_run R;
static cudaStream_t S;
static unsigned long long g_seed = 0x8a8a8a8aULL;
static char g_minfer[2048];

/* ---------------- whole models ---------------- */

/* The model test named <what>_<shape>_<type>: its synthetic file (gu_model_path), skipped when
 * there is none, begun and loaded; NULL when it cannot run (skip or failure recorded). */
static mi_model *begin_model_test(const char *what, const char *shape, const char *type) {
    char path[2048], label[96];
    snprintf(label, sizeof label, "%s_%.30s_%.20s", what, shape, type);
    if (!gu_selected(label)) return NULL;   /* left out by MINFER_GATE_ONLY: no model made */
    if (gu_model_path(g_minfer, "8a", shape, type, path, sizeof path)) {
        gu_skip_named(&R, label, "model not available (synth failed or not given)");
        return NULL;
    }
    gu_begin(&R, label);
    mi_model *m = NULL;
    if (mi_model_load(path, &m) != MI_OK) {
        gu_fail(&R, "load %s: %s", path, mi_errmsg());
        return NULL;
    }
    return m;
}

#define PROMPT 24
#define STEPS 8
static int64_t g_stream_ctx = 128;   /* the streams' context: 8192 takes d4's split attention */
/* prefill PROMPT fixed ids, then STEPS fixed single tokens; the logits of every step, the
 * kernels the last decode step launched, the fusions the pass made */
static mi_status run_stream(mi_model *m, float *out, int64_t V, int64_t *kernels, uint64_t *fused) {
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = "cuda";
    p.n_ctx = g_stream_ctx;
    mi_session *s = NULL;
    mi7c_pass_stats a, b;
    mi7c_pass_stats_get(&a);
    MI_TRY(mi_session_new(m, &p, &s));
    int32_t ids[PROMPT + STEPS];
    unsigned long long st = 8;
    for (int i = 0; i < PROMPT + STEPS; i++) ids[i] = (int32_t)(gu_rng(&st) % (unsigned long long)V);
    mi_status rc = mi_session_decode(s, ids, PROMPT, false);
    for (int i = 0; i <= STEPS && rc == MI_OK; i++) {
        memcpy(out + (size_t)i * (size_t)V, mi_logits(s, NULL), (size_t)V * 4);
        if (i < STEPS) rc = mi_session_decode(s, &ids[PROMPT + i], 1, false);
    }
    *kernels = mi_session_step_kernels(s);
    mi_session_free(s);
    mi7c_pass_stats_get(&b);
    *fused = b.fused_more - a.fused_more;
    return rc;
}

/* The fusions on against off: d1 and d2, and the items whose candidates also take fused nodes
 * (d23's staged FFN with the norm; 8b's b36, a prompt's residual adds), so with them off the
 * pass fuses nothing. Where 8b is built its pass's own marks (b42, b49) are held off in both
 * runs: their gates are gate_8b's (b49 is within a bound, not bit for bit).
 * bound < 0: bit-identical required; q4k: Q4_K weights, so d1 (norm folding) must have run too */
static void test_model(const char *shape, const char *type, double bound, bool q4k) {
    mi_model *m = begin_model_test("model", shape, type);
    if (!m) return;
    const int64_t V = mi_model_hparams(m)->n_vocab;
    const size_t nl = (size_t)(STEPS + 1) * (size_t)V;
    float *on = malloc(nl * 4), *off = malloc(nl * 4);
    int64_t k_on = -1, k_off = -1;
    uint64_t f_on = 0, f_off = 0;
    const uint64_t d1 = mi_cuda_item_runs("d1"), d2 = mi_cuda_item_runs("d2");
    /* 8b's items where built: b36 (a prompt's residual adds on the CUDA target, by 8a's pass)
     * off in the second run; b42 (a gate/up run whose SwiGLU sums its cut bands) and b49 (q, k
     * and a Q6_K v in one run), by 8b's pass, off in both */
    char held[16] = "", off_list[64] = "d1,d2,d23";
    const char *item;
    for (int i = 0; mi_cuda_item_at(i, &item, NULL); i++) {
        if (!strcmp(item, "b42") || !strcmp(item, "b49")) strcat(strcat(held, *held ? "," : ""), item);
        if (!strcmp(item, "b36") || !strcmp(item, "b42") || !strcmp(item, "b49")) strcat(strcat(off_list, ","), item);
    }
    mi_status st = mi_cuda_items_set_off(held);
    if (st == MI_OK) st = run_stream(m, on, V, &k_on, &f_on);
    const uint64_t d1_runs = mi_cuda_item_runs("d1") - d1, d2_runs = mi_cuda_item_runs("d2") - d2;
    if (st == MI_OK) st = mi_cuda_items_set_off(off_list);
    if (st == MI_OK) st = run_stream(m, off, V, &k_off, &f_off);
    mi_cuda_items_set_off("");
    if (st != MI_OK) {
        gu_fail(&R, "%s", mi_errmsg());
    } else {
        double worst = 0;
        int same = 0;
        for (int k = 0; k <= STEPS; k++) {
            const float *a = on + (size_t)k * (size_t)V, *b = off + (size_t)k * (size_t)V;
            const double e = gu_nmse(a, b, (size_t)V);
            if (e > worst || e != e) worst = e;
            same += memcmp(a, b, (size_t)V * 4) == 0;
        }
        const bool logits_ok = bound < 0 ? same == STEPS + 1 : worst <= bound;
        char why[320];
        snprintf(why, sizeof why, "fusions %llu (off: %llu), d1/d2 kernel runs %llu/%llu, kernels per decode step "
                 "%lld (off: %lld); logits nmse %.3g, %d/%d steps bit-identical (%s)", (unsigned long long)f_on,
                 (unsigned long long)f_off, (unsigned long long)d1_runs, (unsigned long long)d2_runs,
                 (long long)k_on, (long long)k_off, worst, same, STEPS + 1,
                 bound < 0 ? "bit-identical required" : "bound");
        if (f_on == 0 || f_off != 0 || (q4k && !d1_runs) || !d2_runs || k_on < 0 || k_off < 0 || k_on >= k_off ||
            !logits_ok)
            gu_fail(&R, "%s", why);
        else gu_pass(&R, "%s", why);
    }
    free(on);
    free(off);
    mi_model_free(m);
}

/* ---------------- argmax (d3) ----------------
 * Rows with ties, NaN, infinities and random rows of the vocabulary's size against the rule
 * computed here on the host (graph.h: first largest, NaN never wins, -1 without a finite max). */
/* greedy decode on the device against the sampler's argmax of the logits a logits session gives */
static void test_greedy_model(const char *shape, const char *type) {
    mi_model *m = begin_model_test("greedy", shape, type);
    if (!m) return;
    const int64_t V = mi_model_hparams(m)->n_vocab;
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = "cuda";
    p.n_ctx = 128;
    mi_session *a = NULL, *b = NULL;
    mi_status st = mi_session_new(m, &p, &a);
    if (st == MI_OK) st = mi_session_new(m, &p, &b);
    const uint64_t d3 = mi_cuda_item_runs("d3");
    int32_t prompt[PROMPT];
    unsigned long long sd = 3;
    for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)(gu_rng(&sd) % (unsigned long long)V);
    int32_t ta = 0, tb = 0;
    int same = 0, steps = 16;
    if (st == MI_OK) st = mi_session_decode(a, prompt, PROMPT, false);
    if (st == MI_OK) st = mi_session_decode_greedy(b, prompt, PROMPT, &tb);
    for (int i = 0; st == MI_OK && i <= steps; i++) {
        ta = mi_sample_greedy(mi_logits(a, NULL), V);
        if (ta != tb) break;
        same++;
        if (i < steps) st = mi_session_decode(a, &ta, 1, false);
        if (st == MI_OK && i < steps) st = mi_session_decode_greedy(b, &tb, 1, &tb);
    }
    const int64_t k_greedy = b ? mi_session_step_kernels(b) : -1;
    const uint64_t d3_runs = mi_cuda_item_runs("d3") - d3;
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (same != steps + 1 || !d3_runs)
        gu_fail(&R, "greedy ids equal the sampler's for %d of %d steps (then %d vs %d); d3 kernel runs %llu", same,
                steps + 1, tb, ta, (unsigned long long)d3_runs);
    else gu_pass(&R, "prompt + %d steps: every greedy id equals the sampler's argmax of the logits; d3 kernel runs %llu, "
                     "%lld kernels a greedy step", steps, (unsigned long long)d3_runs, (long long)k_greedy);
    if (a) mi_session_free(a);
    if (b) mi_session_free(b);
    mi_model_free(m);
}

/* Greedy decode with the step queued ahead of the host's read (MINFER_STEP_AHEAD=1) against the
 * same calls read first: every token and position, through a logits step, another token than
 * the one drawn and a truncate (each leaves a queued step unread), and the last logits bit for
 * bit; most greedy decodes took a queued step. */
#define AH_CALLS 48
static mi_status ahead_run(mi_model *m, const char *mode, int32_t *tok, int64_t *pos, float *last, int64_t *taken) {
    const int64_t V = mi_model_hparams(m)->n_vocab;
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = "cuda";
    p.n_ctx = 128;
    mi_session *s = NULL;
    setenv("MINFER_STEP_AHEAD", mode, 1);
    mi_status st = mi_session_new(m, &p, &s);
    unsetenv("MINFER_STEP_AHEAD");
    if (st != MI_OK) return st;
    int32_t prompt[PROMPT], t = 0;
    unsigned long long sd = 5;
    for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)(gu_rng(&sd) % (unsigned long long)V);
    st = mi_session_decode_greedy(s, prompt, PROMPT, &t);
    for (int i = 0; st == MI_OK && i < AH_CALLS; i++) {
        const int32_t other = (int32_t)((t + 1) % V);
        if (i == 10) {
            st = mi_session_decode(s, &t, 1, false);
            if (st == MI_OK) t = mi_sample_greedy(mi_logits(s, NULL), V);
        } else if (i == 20) {
            st = mi_session_decode_greedy(s, &other, 1, &t);
        } else if (i == 30) {
            st = mi_session_truncate(s, mi_session_n_past(s) - 3);
            if (st == MI_OK) st = mi_session_decode_greedy(s, &prompt[2], 1, &t);
        } else {
            st = mi_session_decode_greedy(s, &t, 1, &t);
        }
        tok[i] = t;
        pos[i] = mi_session_n_past(s);
    }
    if (st == MI_OK) st = mi_session_decode(s, &t, 1, false);
    if (st == MI_OK) memcpy(last, mi_logits(s, NULL), (size_t)V * sizeof(float));
    *taken = mi_session_steps_ahead(s);
    mi_session_free(s);
    return st;
}

static void test_greedy_ahead_model(const char *shape, const char *type) {
    mi_model *m = begin_model_test("greedy_ahead", shape, type);
    if (!m) return;
    const int64_t V = mi_model_hparams(m)->n_vocab;
    int32_t t_on[AH_CALLS], t_off[AH_CALLS];
    int64_t p_on[AH_CALLS], p_off[AH_CALLS], k_on = 0, k_off = 0;
    float *l_on = malloc((size_t)V * 4), *l_off = malloc((size_t)V * 4);
    mi_status st = ahead_run(m, "0", t_off, p_off, l_off, &k_off);
    if (st == MI_OK) st = ahead_run(m, "1", t_on, p_on, l_on, &k_on);
    int bad = 0, first = -1;
    for (int i = 0; st == MI_OK && i < AH_CALLS; i++)
        if (t_on[i] != t_off[i] || p_on[i] != p_off[i]) bad++, first = first < 0 ? i : first;
    const bool same_last = st == MI_OK && !memcmp(l_on, l_off, (size_t)V * 4);
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (bad || !same_last)
        gu_fail(&R, "queued ahead: %d calls differ (first %d: token %d, %d read first); last logits %s", bad, first,
                first >= 0 ? t_on[first] : 0, first >= 0 ? t_off[first] : 0, same_last ? "equal" : "differ");
    else if (k_off || k_on < AH_CALLS / 2)
        gu_fail(&R, "greedy decodes that took a queued step: %lld (want >= %d), read first %lld (want 0)",
                (long long)k_on, AH_CALLS / 2, (long long)k_off);
    else gu_pass(&R, "prompt + %d calls (a logits step, another token, a truncate): every token and position equal, the "
                     "last logits bit for bit; %lld greedy decodes took a queued step", AH_CALLS, (long long)k_on);
    free(l_on);
    free(l_off);
    mi_model_free(m);
}

/* An item through a whole model, on against off, in a context of ctx positions: the logits of
 * every step with every item on (twice with `again`), then with the item off; each side's count
 * (launches(), or the item's kernel runs when launches is NULL) and kernels a step. */
typedef struct {
    int64_t V, k_on, k_off;
    float *on, *again, *off;
    uint64_t n_on, n_off;
} item_ab;

/* items off on both sides of an A/B (d7 is measured with d13 off: d13 takes its runs) */
static const char *g_ab_base = "";

static uint64_t ab_count(const char *item, uint64_t (*launches)(void)) {
    return launches ? launches() : mi_cuda_item_runs(item);
}
static mi_status item_ab_run(mi_model *m, const char *item, int64_t ctx, uint64_t (*launches)(void), bool again,
                             item_ab *ab) {
    ab->V = mi_model_hparams(m)->n_vocab;
    const size_t nl = (size_t)(STEPS + 1) * (size_t)ab->V;
    ab->on = malloc(nl * 4), ab->off = malloc(nl * 4), ab->again = again ? malloc(nl * 4) : NULL;
    ab->k_on = ab->k_off = -1;
    uint64_t f = 0;
    g_stream_ctx = ctx;
    const uint64_t c0 = ab_count(item, launches);
    char off[64];
    snprintf(off, sizeof off, "%s%s%s", g_ab_base, *g_ab_base ? "," : "", item);
    mi_status st = mi_cuda_items_set_off(g_ab_base);
    if (st == MI_OK) st = run_stream(m, ab->on, ab->V, &ab->k_on, &f);
    if (st == MI_OK && again) st = run_stream(m, ab->again, ab->V, &ab->k_on, &f);
    const uint64_t c1 = ab_count(item, launches);
    if (st == MI_OK) st = mi_cuda_items_set_off(off);
    if (st == MI_OK) st = run_stream(m, ab->off, ab->V, &ab->k_off, &f);
    ab->n_on = c1 - c0;
    ab->n_off = ab_count(item, launches) - c1;
    mi_cuda_items_set_off("");
    g_stream_ctx = 128;
    return st;
}
static void item_ab_free(item_ab *ab) {
    free(ab->on);
    free(ab->again);
    free(ab->off);
}
/* steps whose logits are bit-identical in a and b; *first: the first that is not in either pair
 * (a, b) or (a, c) (c may be NULL) */
static int same_steps(const float *a, const float *b, const float *c, int64_t V, int *same_c, int *first) {
    int same = 0;
    *first = -1;
    if (same_c) *same_c = 0;
    for (int k = 0; k <= STEPS; k++) {
        const size_t o = (size_t)k * (size_t)V;
        const bool eb = !memcmp(a + o, b + o, (size_t)V * 4), ec = c ? !memcmp(a + o, c + o, (size_t)V * 4) : true;
        same += eb;
        if (same_c) *same_c += ec;
        if ((!eb || !ec) && *first < 0) *first = k;
    }
    return same;
}

/* One item in a whole model, on against off, logits within the bound (the order of the sums
 * differs): d4 in a context of 8192 positions, so decode takes the split attention (the 0.5B:
 * 1e-6); d11's Q6_K rows on the 7B, whose random weights turn a last-bit difference into other
 * 8-bit activation codes layer after layer: gate_7e's bound for it (5e-2; two CPU ISAs differ by
 * ~1e-2 there, gate_7c). */
static void test_item_model(const char *what, const char *item, int64_t ctx, const char *shape, const char *type,
                            double bound) {
    mi_model *m = begin_model_test(what, shape, type);
    if (!m) return;
    item_ab ab;
    const mi_status st = item_ab_run(m, item, ctx, NULL, false, &ab);
    double worst = 0;
    for (int k = 0; st == MI_OK && k <= STEPS; k++) {
        const double e = gu_nmse(ab.on + (size_t)k * (size_t)ab.V, ab.off + (size_t)k * (size_t)ab.V, (size_t)ab.V);
        if (e > worst || e != e) worst = e;
    }
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (!ab.n_on || !(worst <= bound))
        gu_fail(&R, "%s kernel runs %llu; logits nmse on vs off %.3g (bound %.0e)", item, (unsigned long long)ab.n_on,
                worst, bound);
    else gu_pass(&R, "context %lld: %s kernel runs %llu, kernels per step %lld (off: %lld); logits nmse on vs off "
                     "%.3g <= %.0e", (long long)ctx, item, (unsigned long long)ab.n_on, (long long)ab.k_on,
                 (long long)ab.k_off, worst, bound);
    item_ab_free(&ab);
    mi_model_free(m);
}

/* An item that changes only how kernels launch or what they hand on, read at each launch:
 * programmatic dependent launch, d6 (8a's kernels) and d10 (the lower phases' small kernels), d12
 * (the long-row matmuls in blocks of 32 warps), d31 (the attention's quantized output for o).
 * The same arithmetic, so the logits must be bit-identical to the item off, and to a second run
 * with it on (a kernel that read an earlier kernel's output before its wait would show as a
 * difference here, run to run), with the same kernels a step and the item's launches counted.
 * The launch items at a context of 8192 so split-KV attention (d4) takes part; d31 at 128, where
 * d20's attention runs. */
static void test_launch_item_model(const char *what, const char *item, uint64_t (*launches)(void), int64_t ctx,
                                   const char *shape, const char *type) {
    mi_model *m = begin_model_test(what, shape, type);
    if (!m) return;
    item_ab ab;
    const mi_status st = item_ab_run(m, item, ctx, launches, true, &ab);
    int same_again = 0, first = -1;
    const int same_off = st == MI_OK ? same_steps(ab.on, ab.off, ab.again, ab.V, &same_again, &first) : 0;
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (!ab.n_on || ab.n_off || same_off != STEPS + 1 || same_again != STEPS + 1 || ab.k_on != ab.k_off)
        gu_fail(&R, "%s launches on %llu, off %llu; kernels a step %lld (off: %lld); steps bit-identical to %s off "
                    "%d/%d, run to run %d/%d (first difference at step %d)", item, (unsigned long long)ab.n_on,
                (unsigned long long)ab.n_off, (long long)ab.k_on, (long long)ab.k_off, item, same_off, STEPS + 1,
                same_again, STEPS + 1, first);
    else gu_pass(&R, "context %lld: %llu %s launches in two runs (off: 0), kernels per step %lld; every step's logits "
                     "bit-identical to %s off and run to run (%d steps)", (long long)ctx,
                 (unsigned long long)ab.n_on, item, (long long)ab.k_on, item, STEPS + 1);
    item_ab_free(&ab);
    mi_model_free(m);
}

/* An item whose kernels compute exactly what they replace, through a whole model: the logits
 * with it on equal those with it off bit for bit at every step, and its kernels ran; kernels a
 * step fewer (kernels < 0), as many (0) or more (> 0) than with it off.
 *   d7  one quantized x for a run of matmuls: the first of the 0.5B's q, k, v (and the tiny
 *       llama's) quantizes x, the others read its copy
 *   d8  RoPE a thread per pair
 *   d13 a run of matmuls of one x in one launch (the 7B's q, k, v on 8a's Q4_K kernel, the 0.5B's
 *       and the tiny llama's on 7b's) */
static void test_bitwise_launches_model(const char *what, const char *item, int kernels, const char *shape,
                                        const char *type, uint64_t (*launches)(void)) {
    mi_model *m = begin_model_test(what, shape, type);
    if (!m) return;
    item_ab ab;
    const mi_status st = item_ab_run(m, item, 128, launches, false, &ab);
    int first = -1;
    const int same = st == MI_OK ? same_steps(ab.on, ab.off, NULL, ab.V, NULL, &first) : 0;
    const int64_t k_on = ab.k_on, k_off = ab.k_off;
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (!ab.n_on || same != STEPS + 1 || (kernels < 0 ? !(k_on < k_off) : kernels > 0 ? !(k_on > k_off) : k_on != k_off))
        gu_fail(&R, "%s kernel runs %llu, kernels a step %lld (off: %lld), steps bit-identical to %s off %d/%d (first "
                    "difference at step %d)", item, (unsigned long long)ab.n_on, (long long)k_on, (long long)k_off,
                item, same, STEPS + 1, first);
    else gu_pass(&R, "%s kernel runs %llu, kernels a step %lld (off: %lld); every step's logits bit-identical to %s "
                     "off (%d steps)", item, (unsigned long long)ab.n_on, (long long)k_on, (long long)k_off, item,
                 STEPS + 1);
    item_ab_free(&ab);
    mi_model_free(m);
}
/* the item's kernel runs counted by the dispatch (its candidates carry the item) */
static void test_bitwise_item_model(const char *what, const char *item, int kernels, const char *shape,
                                    const char *type) {
    test_bitwise_launches_model(what, item, kernels, shape, type, NULL);
}

/* The session's reused one-token graph on the device (session.c): the stream with reuse against
 * one that builds every step anew (MINFER_NO_GRAPH_REUSE=1), logits bit for bit at every step and
 * the same kernels a step; then, in one session, the items switched between steps, so the reused
 * graph must be rebuilt under the new choices (the hook epoch): a stale one would hold fused
 * nodes no candidate takes any more and fail, and every step equals a fresh build's. */
static void test_graph_reuse(const char *shape, const char *type) {
    mi_model *m = begin_model_test("graph_reuse", shape, type);
    if (!m) return;
    const int64_t V = mi_model_hparams(m)->n_vocab;
    const size_t nl = (size_t)(STEPS + 1) * (size_t)V;
    float *reuse = malloc(nl * 4), *fresh = malloc(nl * 4);
    int64_t k_reuse = -1, k_fresh = -1;
    uint64_t f = 0;
    mi_status st = run_stream(m, reuse, V, &k_reuse, &f);
    setenv("MINFER_NO_GRAPH_REUSE", "1", 1);
    if (st == MI_OK) st = run_stream(m, fresh, V, &k_fresh, &f);
    unsetenv("MINFER_NO_GRAPH_REUSE");
    int same = 0;
    for (int k = 0; st == MI_OK && k <= STEPS; k++)
        same += !memcmp(reuse + (size_t)k * (size_t)V, fresh + (size_t)k * (size_t)V, (size_t)V * 4);
    /* one session, d1/d2 switched off and on again between steps: each step equals a fresh build's */
    int switched_same = 0;
    if (st == MI_OK) {
        mi_session_params p;
        mi_session_params_default(&p);
        p.backend = "cuda";
        p.n_ctx = 64;
        mi_session *a = NULL, *b = NULL;
        st = mi_session_new(m, &p, &a);
        setenv("MINFER_NO_GRAPH_REUSE", "1", 1);
        if (st == MI_OK) st = mi_session_new(m, &p, &b);
        unsetenv("MINFER_NO_GRAPH_REUSE");
        const char *offs[4] = {"", "d1,d2", "d2", ""};
        for (int i = 0; st == MI_OK && i < 8; i++) {
            const int32_t t = (int32_t)(i * 7 + 3);
            st = mi_cuda_items_set_off(offs[i % 4]);
            if (st == MI_OK) st = mi_session_decode(a, &t, 1, false);
            if (st == MI_OK) st = mi_session_decode(b, &t, 1, false);
            if (st == MI_OK) switched_same += !memcmp(mi_logits(a, NULL), mi_logits(b, NULL), (size_t)V * 4);
        }
        mi_cuda_items_set_off("");
        if (a) mi_session_free(a);
        if (b) mi_session_free(b);
    }
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (same != STEPS + 1 || k_reuse != k_fresh || switched_same != 8)
        gu_fail(&R, "reused vs fresh: %d/%d steps bit-identical, kernels a step %lld vs %lld; items switched between "
                    "steps: %d/8 bit-identical", same, STEPS + 1, (long long)k_reuse, (long long)k_fresh, switched_same);
    else gu_pass(&R, "reused vs fresh graphs: %d/%d steps bit-identical, %lld kernels a step both; items switched "
                     "between steps: 8/8 bit-identical", same, STEPS + 1, (long long)k_reuse);
    free(reuse);
    free(fresh);
    mi_model_free(m);
}

/* d39-d42 and d44 count their launches per item */
static uint64_t spread_ffn_launches(void) { return mi8a_launch_item_count("d39"); }
static uint64_t spread_down_launches(void) { return mi8a_launch_item_count("d40"); }
static uint64_t spread_o_launches(void) { return mi8a_launch_item_count("d41"); }
static uint64_t spread_run_launches(void) { return mi8a_launch_item_count("d42"); }
static uint64_t q6k_qx_launches(void) { return mi8a_launch_item_count("d44"); }

/* every case but the 7B's */
static void gate_small(void) {
    kernels8a_fused(&R, S, &g_seed);
    kernels8a_rope(&R, S, &g_seed);
    kernels8a_rope_kv(&R, S, &g_seed);
    kernels8a_q6k(&R, S, &g_seed);
    kernels8a_run(&R, S, &g_seed);
    test_model("tiny-qwen2", "q4_0", -1, false);
    test_model("tiny-llama", "q8_0", -1, false);
    test_model("tiny-qwen3", "q4_k_m", -1, false);
    test_model("qwen2.5-0.5b", "q4_0", -1, false);
    test_graph_reuse("qwen2.5-0.5b", "q4_0");
    kernels8a_argmax(&R, S, &g_seed);
    kernels8a_attn_split(&R, S, &g_seed);
    kernels8a_attn_step(&R, S, &g_seed);
    test_item_model("split", "d4", 8192, "qwen2.5-0.5b", "q4_0", 1e-6);
    test_item_model("split_short", "d4", 640, "qwen2.5-0.5b", "q4_0", 1e-6);   /* a cache just past the threshold */
    test_greedy_model("qwen2.5-0.5b", "q4_0");
    test_greedy_ahead_model("qwen2.5-0.5b", "q4_0");
    test_greedy_ahead_model("qwen2.5-7b", "q4_k_m");
    test_launch_item_model("pdl", "d6", mi8a_pdl_launches, 8192, "qwen2.5-0.5b", "q4_0");
    g_ab_base = "d13";
    test_bitwise_item_model("shared_x", "d7", -1, "tiny-llama", "q8_0");
    test_bitwise_item_model("shared_x", "d7", -1, "qwen2.5-0.5b", "q4_0");
    g_ab_base = "";
    test_bitwise_item_model("run", "d13", -1, "tiny-llama", "q8_0");
    test_bitwise_item_model("run", "d13", -1, "qwen2.5-0.5b", "q4_0");
    test_launch_item_model("pdl_small", "d10", mi8a_pdl_small_launches, 8192, "tiny-llama", "q8_0");
    test_launch_item_model("pdl_small", "d10", mi8a_pdl_small_launches, 8192, "qwen2.5-0.5b", "q4_0");
    test_bitwise_item_model("rope_kv", "d14", -1, "tiny-llama", "q8_0");
    test_bitwise_item_model("rope_kv", "d14", -1, "tiny-qwen3", "q4_k_m");
    test_bitwise_item_model("rope_kv", "d14", -1, "qwen2.5-0.5b", "q4_0");
    test_bitwise_item_model("attn_rope_kv", "d30", -1, "tiny-llama", "q8_0");
    test_bitwise_item_model("attn_rope_kv", "d30", -1, "tiny-qwen3", "q4_k_m");
    test_bitwise_item_model("attn_rope_kv", "d30", -1, "qwen2.5-0.5b", "q4_0");
    test_launch_item_model("attn_quant_out", "d31", mi8a_quant_out_launches, 128, "tiny-llama", "q8_0");
    test_launch_item_model("attn_quant_out", "d31", mi8a_quant_out_launches, 128, "qwen2.5-0.5b", "q4_0");
    test_launch_item_model("unit_ahead", "d37", mi8a_unit_ahead_launches, 128, "tiny-llama", "q8_0");
    test_launch_item_model("unit_ahead", "d37", mi8a_unit_ahead_launches, 128, "qwen2.5-0.5b", "q4_0");
    test_launch_item_model("spread_ffn", "d39", spread_ffn_launches, 128, "tiny-qwen3", "q4_k_m");
    test_launch_item_model("spread_o", "d41", spread_o_launches, 128, "tiny-qwen3", "q4_k_m");
    test_launch_item_model("spread_run", "d42", spread_run_launches, 128, "tiny-qwen3", "q4_k_m");
    test_bitwise_item_model("norm_q6k", "d43", -1, "tiny-qwen3", "q4_k_m");
    test_bitwise_item_model("staged_add", "d15", -1, "qwen2.5-0.5b", "q4_0");
    test_bitwise_item_model("staged_norm_ffn", "d23", -1, "qwen2.5-0.5b", "q4_0");
    test_bitwise_item_model("staged_ffn_quant_out", "d29", -1, "qwen2.5-0.5b", "q4_0");
    test_bitwise_item_model("run_norm", "d17", -1, "tiny-llama", "q8_0");
    test_bitwise_item_model("run_norm", "d17", -1, "qwen2.5-0.5b", "q4_0");
    g_ab_base = "d14";   /* d8 off turns d14 off too: the same kernels a step only without d14 */
    test_bitwise_item_model("rope_pairs", "d8", 0, "tiny-llama", "q8_0");
    test_bitwise_item_model("rope_pairs", "d8", 0, "qwen2.5-0.5b", "q4_0");
    g_ab_base = "";
}

/* the 7B's cases (MINFER_GATE_NO_7B=1 skips them, MINFER_GATE_ONLY_7B=1 runs them alone) */
static void gate_7b(void) {
    test_model("qwen2.5-7b", "q4_k_m", -1, true);
    test_launch_item_model("pdl", "d6", mi8a_pdl_launches, 8192, "qwen2.5-7b", "q4_k_m");
    g_ab_base = "d14";
    test_bitwise_item_model("rope_pairs", "d8", 0, "qwen2.5-7b", "q4_k_m");
    g_ab_base = "";
    test_bitwise_item_model("rope_kv", "d14", -1, "qwen2.5-7b", "q4_k_m");
    test_item_model("q6k", "d11", 128, "qwen2.5-7b", "q4_k_m", 5e-2);
    test_bitwise_item_model("run", "d13", -1, "qwen2.5-7b", "q4_k_m");
    test_bitwise_item_model("run_norm", "d17", -1, "qwen2.5-7b", "q4_k_m");
    g_ab_base = "d40";   /* d40 takes d12's launches */
    test_launch_item_model("wide", "d12", mi8a_wide_launches, 8192, "qwen2.5-7b", "q4_k_m");
    g_ab_base = "";
    test_launch_item_model("spread_ffn", "d39", spread_ffn_launches, 8192, "qwen2.5-7b", "q4_k_m");
    test_launch_item_model("spread_down", "d40", spread_down_launches, 8192, "qwen2.5-7b", "q4_k_m");
    test_launch_item_model("spread_o", "d41", spread_o_launches, 8192, "qwen2.5-7b", "q4_k_m");
    test_launch_item_model("spread_run", "d42", spread_run_launches, 8192, "qwen2.5-7b", "q4_k_m");
    test_bitwise_item_model("norm_q6k", "d43", -1, "qwen2.5-7b", "q4_k_m");
    test_bitwise_launches_model("q6k_quant_in_block", "d44", -1, "qwen2.5-7b", "q4_k_m", q6k_qx_launches);
    test_launch_item_model("pdl_small", "d10", mi8a_pdl_small_launches, 8192, "qwen2.5-7b", "q4_k_m");
}

int main(int argc, char **argv) {
    (void)argc;
    gu_init(&R, "gate-8a", "8a");
    gu_minfer_path(argv[0], g_minfer, sizeof g_minfer);
    mi_phases_install();
    passes8a_run(&R, &g_seed);
    if (!dev_gate_start(&R, "gate_8a", &S)) return gu_finish(&R);
    if (!gu_env_on("MINFER_GATE_ONLY_7B")) gate_small();
    if (gu_env_on("MINFER_GATE_NO_7B")) gu_skip_named(&R, "model_qwen2.5-7b_q4_k_m", "MINFER_GATE_NO_7B set");
    else gate_7b();
    cudaStreamDestroy(S);
    return gu_finish(&R);
}

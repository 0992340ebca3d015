/* gate_8b_topk: item b4, a batch's top-k steps on the device (phase8b_batch/topk.cu).
 *  topk_rows_K<k>   op level: rows of the Qwen2.5 vocabulary (random, many equal values across
 *                   the K-th place, NaN, infinities, -0 and +0, all -inf, rows scaled by 1 / temp)
 *                   through mi8b_topk against the sampler's own selection (mi_sample_top_k, which
 *                   the CPU's TOPK runs): every value and index bit for bit; a second run too
 *  batch_top_k_<model>  model level: two CUDA batches fed the same tokens, one returning logits and
 *                   one with no_logits, 6 samplers (top_k 1 .. 64, top-p and min-p on and off,
 *                   their own seeds) and a greedy sequence: every token equal, no logits crossed
 *                   from the no_logits batch, b4's kernel ran
 *  session_top_k_<model>  a CUDA session's top-k decode against its logits: every candidate the
 *                   sampler's selection, bit for bit; b4 ran
 * Runs at PHASE=8b with the other 8b gates (make gate-8b). */
#include "gates/gate_util.h"
#include "gates/7e/dev7e.h"
#include "phase8b_batch/batch8b.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "common/model/mi.h"
#include "common/model/mi_batch.h"
#include "common/backend/backend.h"
#include "common/sampler/sampler.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static gu_run R;
static cudaStream_t S;
static char g_minfer[2048];
static unsigned long long g_seed = 0x8b70b4ULL;

/* the rows: each row's values, then its scale */
static void make_rows(float *x, float *scale, int64_t V, int N) {
    for (int r = 0; r < N; r++) {
        float *row = x + (size_t)r * (size_t)V;
        scale[r] = r % 3 == 0 ? 1.0f : r % 3 == 1 ? 1.0f / 0.7f : 1.0f / 1.5f;
        for (int64_t i = 0; i < V; i++) row[i] = gu_frand(&g_seed, -20.f, 20.f);
        switch (r) {
        case 1:   /* 8 levels: thousands equal at the K-th place (the ordered collection) */
            for (int64_t i = 0; i < V; i++) row[i] = (float)(gu_rng(&g_seed) % 8);
            break;
        case 2:   /* NaN (as -inf) and infinities */
            for (int64_t i = 0; i < V; i += 97) row[i] = NAN;
            row[5] = INFINITY;
            row[6] = -INFINITY;
            row[70000] = INFINITY;
            break;
        case 3:   /* zeros of both signs: -0 ties with +0, on the index */
            for (int64_t i = 0; i < V; i++) row[i] = (gu_rng(&g_seed) & 1) ? 0.0f : -0.0f;
            for (int64_t i = 0; i < 10; i++) row[1000 * i + 3] = -1.0f;
            break;
        case 4:   /* all -inf but three */
            for (int64_t i = 0; i < V; i++) row[i] = -INFINITY;
            row[V - 1] = 1.0f;
            row[77] = 2.0f;
            row[3] = 1.0f;
            break;
        case 5:   /* all NaN */
            for (int64_t i = 0; i < V; i++) row[i] = NAN;
            break;
        case 6:   /* equal values exactly filling the K (the unordered collection) */
            for (int64_t i = 0; i < V; i++) row[i] = -5.0f;
            for (int64_t i = 0; i < 64; i++) row[2311 * i + 17] = 3.0f;
            break;
        default: break;
        }
    }
}

static void test_topk_rows(int64_t K) {
    char name[64];
    snprintf(name, sizeof name, "topk_rows_K%lld", (long long)K);
    if (!gu_selected(name)) return;
    gu_begin(&R, name);
    const int64_t V = 151936;
    const int N = 9;
    float *x = malloc((size_t)V * N * 4), *scale = malloc((size_t)N * 4);
    float *want = malloc((size_t)N * 2 * K * 4), *got = malloc((size_t)N * 2 * K * 4), *got2 = malloc((size_t)N * 2 * K * 4);
    mi_cand *cand = malloc((size_t)K * sizeof *cand);
    make_rows(x, scale, V, N);
    for (int r = 0; r < N; r++) {
        const int64_t m = mi_sample_top_k(x + (size_t)r * V, V, scale[r], K, cand);
        for (int64_t i = 0; i < m; i++) {
            want[(size_t)r * 2 * K + i] = cand[i].v;
            want[(size_t)r * 2 * K + K + i] = (float)cand[i].id;
        }
    }
    void *bx, *bs;
    float *dx = dev_up_at(x, (size_t)V * N * 4, 0, &bx), *ds = dev_up_at(scale, (size_t)N * 4, 0, &bs);
    float *dy = dev_poison((size_t)N * 2 * K * 4);
    mi_status st = mi8b_topk(S, dx, ds, dy, V, K, N);
    if (st == MI_OK) dev_down_on(S, got, dy, (size_t)N * 2 * K * 4);
    if (st == MI_OK) st = mi8b_topk(S, dx, ds, dy, V, K, N);
    if (st == MI_OK) dev_down_on(S, got2, dy, (size_t)N * 2 * K * 4);
    int bad = -1;
    for (size_t i = 0; st == MI_OK && bad < 0 && i < (size_t)N * 2 * K; i++)
        if (memcmp(&got[i], &want[i], 4)) bad = (int)i;
    if (st != MI_OK) gu_fail(&R, "launch: %s", mi_errmsg());
    else if (bad >= 0)
        gu_fail(&R, "row %d, %s %d: %.9g, want %.9g", bad / (int)(2 * K), bad % (2 * K) < K ? "value" : "index",
                (int)(bad % K), (double)got[bad], (double)want[bad]);
    else if (memcmp(got, got2, (size_t)N * 2 * K * 4)) gu_fail(&R, "a second run differs");
    else gu_pass(&R, "%d rows of %lld (random, 8 levels, NaN and infinities, signed zeros, all -inf, all NaN, ties "
                     "filling the K; scales 1, 1/0.7, 1/1.5): every value and index the sampler's, bit for bit; repeat "
                     "bitwise", N, (long long)V);
    free(x); free(scale); free(want); free(got); free(got2); free(cand);
    cudaFree(bx);
    cudaFree(bs);
    cudaFree(dy);
}

static void test_batch_top_k(const char *shape, const char *type) {
    char name[96], path[2048];
    snprintf(name, sizeof name, "batch_top_k_%s_%s", shape, type);
    if (!gu_selected(name)) return;
    if (gu_model_path(g_minfer, "8b", shape, type, path, sizeof path)) {
        gu_skip_named(&R, name, "model not available");
        return;
    }
    gu_begin(&R, name);
    mi_model *m = NULL;
    if (mi_model_load(path, &m) != MI_OK) {
        gu_fail(&R, "load: %s", mi_errmsg());
        return;
    }
    const int64_t V = mi_model_hparams(m)->n_vocab;
    enum { NS = 7, STEPS = 16 };
    const mi_sampler_params sps[NS] = {
        {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = 1},
        {.temp = 1.5f, .top_k = 64, .top_p = 1.0f, .min_p = 0.0f, .seed = 2},
        {.temp = 0.3f, .top_k = 5, .top_p = 0.9f, .min_p = 0.0f, .seed = 3},
        {.temp = 1.0f, .top_k = 1, .top_p = 1.0f, .min_p = 0.0f, .seed = 4},
        {.temp = 1.2f, .top_k = 64, .top_p = 0.5f, .min_p = 0.1f, .seed = 5},
        {.temp = 0.0f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = 6},
        {.temp = 0.9f, .top_k = 17, .top_p = 1.0f, .min_p = 0.2f, .seed = 7},
    };
    mi_batch_params bp;
    mi_batch_params_default(&bp);
    bp.n_seq_max = NS;
    bp.kv_tokens = 1024;
    bp.backend = "cuda";
    mi_batch *plain = NULL, *top = NULL;
    mi_status st = mi_batch_new(m, &bp, &plain);
    bp.no_logits = true;
    if (st == MI_OK) st = mi_batch_new(m, &bp, &top);
    int a[NS], c[NS], same = 0, n = 0, with_logits = 0;
    int32_t toks[32];
    const uint64_t b4 = mi_cuda_item_runs("b4");
    for (int i = 0; st == MI_OK && i < NS; i++) {
        for (int j = 0; j < 4 + 3 * i; j++) toks[j] = (int32_t)((13 + 7 * i + 5 * j) % V);
        st = mi_batch_seq_new(plain, &sps[i], &a[i]);
        if (st == MI_OK) st = mi_batch_seq_new(top, &sps[i], &c[i]);
        if (st == MI_OK) st = mi_batch_seq_add(plain, a[i], toks, 4 + 3 * i);
        if (st == MI_OK) st = mi_batch_seq_add(top, c[i], toks, 4 + 3 * i);
    }
    int first_bad_step = -1, first_bad_seq = -1;
    int32_t bad_got = 0, bad_want = 0;
    for (int step = 0; st == MI_OK && step < STEPS; step++) {
        int ran = 0;
        st = mi_batch_step(plain, 0, &ran);
        if (st == MI_OK) st = mi_batch_step(top, 0, &ran);
        for (int i = 0; st == MI_OK && i < NS; i++) {
            int32_t tp = -1, tt = -2;
            st = mi_batch_seq_next(plain, a[i], &tp);
            if (st == MI_OK) st = mi_batch_seq_next(top, c[i], &tt);
            if (tt == tp) same++;
            else if (first_bad_step < 0) {
                first_bad_step = step;
                first_bad_seq = i;
                bad_got = tt;
                bad_want = tp;
            }
            with_logits += mi_batch_seq_logits(top, c[i]) != NULL;
            n++;
            if (st == MI_OK) st = mi_batch_seq_add(plain, a[i], &tp, 1);
            if (st == MI_OK) st = mi_batch_seq_add(top, c[i], &tp, 1);   /* the plain stream drives both */
        }
    }
    const uint64_t b4_runs = mi_cuda_item_runs("b4") - b4;
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (same != n)
        gu_fail(&R, "%d of %d tokens equal; first at step %d, sequence %d (top_k %d): %d from the candidates, %d from "
                    "the logits", same, n, first_bad_step, first_bad_seq, sps[first_bad_seq].top_k, bad_got, bad_want);
    else if (with_logits || !b4_runs)
        gu_fail(&R, "%d logits rows returned by no_logits steps; b4 runs %llu", with_logits, (unsigned long long)b4_runs);
    else gu_pass(&R, "%d sequences (top_k 1 .. 64, one greedy), %d steps: every token equal to the draw from the "
                     "logits; no logits crossed; b4 runs %llu", NS, STEPS, (unsigned long long)b4_runs);
    if (plain) mi_batch_free(plain);
    if (top) mi_batch_free(top);
    mi_model_free(m);
}

/* a CUDA session's top-k decode (b4 where the logits are) against the same session's logits
 * and the sampler's selection: every candidate bit for bit, 12 steps */
static void test_session_top_k(const char *shape, const char *type) {
    char name[96], path[2048];
    snprintf(name, sizeof name, "session_top_k_%s_%s", shape, type);
    if (!gu_selected(name)) return;
    if (gu_model_path(g_minfer, "8b", shape, type, path, sizeof path)) {
        gu_skip_named(&R, name, "model not available");
        return;
    }
    gu_begin(&R, name);
    mi_model *m = NULL;
    if (mi_model_load(path, &m) != MI_OK) {
        gu_fail(&R, "load: %s", mi_errmsg());
        return;
    }
    const int64_t V = mi_model_hparams(m)->n_vocab, K = 40;
    const float scale = 1.0f / 0.8f;
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = "cuda";
    p.n_ctx = 256;
    mi_session *a = NULL, *b = NULL;
    mi_status st = mi_session_new(m, &p, &a);
    if (st == MI_OK) st = mi_session_new(m, &p, &b);
    mi_cand *want = malloc((size_t)K * sizeof *want);
    int32_t prompt[8], t = 0;
    for (int i = 0; i < 8; i++) prompt[i] = (int32_t)((19 + 23 * i) % V);
    const uint64_t b4 = mi_cuda_item_runs("b4");
    int bad_step = -1, steps = 12;
    if (st == MI_OK) st = mi_session_decode(a, prompt, 8, false);
    if (st == MI_OK) st = mi_session_decode_top(b, prompt, 8, scale, K);
    for (int i = 0; st == MI_OK && i < steps && bad_step < 0; i++) {
        int64_t k = 0;
        const float *top = mi_session_top(b, &k);
        mi_sample_top_k(mi_logits(a, NULL), V, scale, K, want);
        for (int64_t j = 0; top && k == K && j < K && bad_step < 0; j++)
            if (memcmp(&top[j], &want[j].v, 4) || (int32_t)top[K + j] != want[j].id) bad_step = i;
        if (!top || k != K) bad_step = i;
        t = want[i % 3].id;   /* a token among the candidates drives both */
        st = mi_session_decode(a, &t, 1, false);
        if (st == MI_OK) st = mi_session_decode_top(b, &t, 1, scale, K);
    }
    const uint64_t b4_runs = mi_cuda_item_runs("b4") - b4;
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (bad_step >= 0) gu_fail(&R, "step %d: the candidates differ from the sampler's selection of the logits", bad_step);
    else if (!b4_runs) gu_fail(&R, "b4 never ran: the selection ran on the host");
    else gu_pass(&R, "prompt + %d steps, K = %lld: every candidate bit for bit the sampler's selection of the "
                     "logits; b4 runs %llu", steps, (long long)K, (unsigned long long)b4_runs);
    free(want);
    if (a) mi_session_free(a);
    if (b) mi_session_free(b);
    mi_model_free(m);
}

int main(int argc, char **argv) {
    (void)argc;
    gu_init(&R, "gate-8b-topk", "8b");
    gu_minfer_path(argv[0], g_minfer, sizeof g_minfer);
    mi_phases_install();
    if (!dev_gate_start(&R, "gate_8b_topk", &S)) return gu_finish(&R);
    test_topk_rows(64);
    test_topk_rows(40);
    test_topk_rows(1);
    test_batch_top_k("tiny-qwen2", "q4_0");
    test_batch_top_k("qwen2.5-0.5b", "q4_0");
    test_session_top_k("qwen2.5-0.5b", "q4_0");
    cudaStreamDestroy(S);
    return gu_finish(&R);
}

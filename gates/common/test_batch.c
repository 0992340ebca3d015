/* Many sequences in one step (common/model/batch.c) against each sequence run alone, on the
 * CPU backend: bit for bit. Synthetic models (`minfer synth`, next to this test's binary): the
 * tiny shapes of three architectures and weight mixes, and the Qwen2.5 0.5B shape. Sequences join at different steps with prompts
 * of different lengths, decode one token a step, one ends and its id is taken by a new one; the
 * logits of every sequence at every step it runs must equal, byte for byte, those of a session
 * fed the same chunks. Also: a pool too small for everyone refuses only the sequence that cannot
 * grow (the others run and stay exact), blocks return when a sequence ends, and bad calls fail
 * with a message. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/model/mi_batch.h"
#include "gates/common/test_synth.h"

#define NSEQ 7      /* sequences over the run; at most NSEQ_OPEN open at once */
#define NSEQ_OPEN 6
#define STEPS 9

/* A CPU batch of n_seq sequences over kv positions on `threads` threads (no_logits as asked) */
static mi_batch *cpu_batch(mi_model *m, int n_seq, int64_t kv, int threads, bool no_logits) {
    mi_batch_params bp;
    mi_batch_params_default(&bp);
    bp.n_seq_max = n_seq;
    bp.kv_tokens = kv;
    bp.n_threads = threads;
    bp.no_logits = no_logits;
    mi_batch *b = NULL;
    cr_assert_eq(mi_batch_new(m, &bp, &b), MI_OK, "%s", mi_errmsg());
    return b;
}

/* sequence i: a prompt of 3 + 4i tokens, joining at step i / 2, then one token a step;
 * sequence 1 ends after step 4 and sequence 6 joins at step 6 in its place (ids are reused) */
static int64_t prompt_len(int i) { return 3 + 4 * (i % 6); }
static int join_step(int i) { return i == 6 ? 6 : i / 2; }
static int end_step(int i) { return i == 1 ? 4 : STEPS - 1; }
static int32_t tok(int i, int64_t j, int64_t V) { return (int32_t)((7 + 31 * i + 13 * j + (j * j) % 17) % V); }

/* The chunk sequence i feeds at step `step` (0 tokens: not running): the prompt at its join
 * step, then one token a step. */
static int64_t chunk(int i, int step, int32_t *out, int64_t V) {
    const int k = step - join_step(i);
    if (k < 0 || step > end_step(i)) return 0;
    const int64_t off = k == 0 ? 0 : prompt_len(i) + k - 1, n = k == 0 ? prompt_len(i) : 1;
    for (int64_t j = 0; j < n; j++) out[j] = tok(i, off + j, V);
    return n;
}

/* logits [STEPS][V] of sequence i alone (a session fed the same chunks); rows of steps it
 * does not run stay unset */
static void solo(mi_model *m, int i, float *out, int64_t V) {
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = "cpu";
    p.n_threads = 2;
    p.n_ubatch = 1000;
    mi_session *s = NULL;
    cr_assert_eq(mi_session_new(m, &p, &s), MI_OK, "%s", mi_errmsg());
    int32_t toks[64];
    for (int step = 0; step < STEPS; step++) {
        const int64_t n = chunk(i, step, toks, V);
        if (!n) continue;
        cr_assert_eq(mi_session_decode(s, toks, n, false), MI_OK, "%s", mi_errmsg());
        int64_t rows;
        memcpy(out + (size_t)step * (size_t)V, mi_logits(s, &rows), (size_t)V * sizeof(float));
    }
    mi_session_free(s);
}

static void independence(const char *shape, const char *type) {
    mi_model *m = test_synth(shape, type);
    const int64_t V = mi_model_hparams(m)->n_vocab;
    float *want = malloc((size_t)NSEQ * STEPS * (size_t)V * sizeof(float));
    for (int i = 0; i < NSEQ; i++) solo(m, i, want + (size_t)i * STEPS * (size_t)V, V);
    mi_batch *b = cpu_batch(m, NSEQ_OPEN, 512, 2, false);
    int id[NSEQ];
    int32_t toks[64];
    int compared = 0;
    for (int step = 0; step < STEPS; step++) {
        int expect_run = 0;
        for (int i = 0; i < NSEQ; i++) {
            const int64_t n = chunk(i, step, toks, V);
            if (!n) continue;
            if (step == join_step(i)) cr_assert_eq(mi_batch_seq_new(b, NULL, &id[i]), MI_OK, "%s", mi_errmsg());
            cr_assert_eq(mi_batch_seq_add(b, id[i], toks, n), MI_OK, "%s", mi_errmsg());
            expect_run++;
        }
        int ran = 0;
        cr_assert_eq(mi_batch_step(b, 0, &ran), MI_OK, "step %d: %s", step, mi_errmsg());
        cr_assert_eq(ran, expect_run, "step %d: %d sequences ran, %d expected", step, ran, expect_run);
        for (int i = 0; i < NSEQ; i++) {
            if (step < join_step(i) || step > end_step(i)) continue;
            const float *got = mi_batch_seq_logits(b, id[i]);
            cr_assert(got, "sequence %d has no logits at step %d", i, step);
            const float *w = want + ((size_t)i * STEPS + (size_t)step) * (size_t)V;
            for (int64_t v = 0; v < V; v++)
                cr_assert(!memcmp(&got[v], &w[v], sizeof(float)),
                          "%s %s: sequence %d, step %d, logit %lld: batch %.9g, alone %.9g", shape, type, i, step,
                          (long long)v, got[v], w[v]);
            int32_t next;
            cr_assert_eq(mi_batch_seq_next(b, id[i], &next), MI_OK);
            cr_assert_eq(next, mi_sample_greedy(w, V));
            compared++;
            if (step == end_step(i) && step < STEPS - 1) mi_batch_seq_free(b, id[i]);   /* ends early */
        }
    }
    cr_assert_eq(id[6], id[1], "the ended sequence's id is handed out again");
    cr_assert_gt(compared, 30);
    for (int i = 0; i < NSEQ; i++)
        if (i != 1) mi_batch_seq_free(b, id[i]);
    cr_assert_eq(mi_batch_kv_free_blocks(b), mi_batch_kv_blocks(b), "every block back in the pool");
    mi_batch_free(b);
    free(want);
    mi_model_free(m);
}

Test(batch, independence_qwen2_q4_0) { independence("tiny-qwen2", "q4_0"); }
Test(batch, independence_llama_q8_0) { independence("tiny-llama", "q8_0"); }
Test(batch, independence_qwen3_q4_k_m) { independence("tiny-qwen3", "q4_k_m"); }
Test(batch, independence_qwen2_5_0_5b_q4_0, .timeout = 600) { independence("qwen2.5-0.5b", "q4_0"); }

/* no_logits with sampled sequences: a step of greedy and top-k sequences ends in TOPK, and each
 * sampler's draw from its row's candidates is the draw it makes from the whole row. Two batches
 * fed the same: one returning logits, one no_logits; 6 samplers (top_k 1, 5, 40 and 64, top-p and
 * min-p on and off, temperatures 0.3 .. 1.5, their own seeds) and a greedy sequence, 12 steps:
 * every token equal, and the no_logits batch never returns logits. */
Test(batch, top_k_steps_draw_as_from_logits) {
    mi_model *m = test_synth("tiny-qwen2", "q4_0");
    const int64_t V = mi_model_hparams(m)->n_vocab;
    mi_batch *plain = cpu_batch(m, 8, 512, 2, false);
    mi_batch *top = cpu_batch(m, 8, 512, 2, true);
    enum { NS = 7 };
    const mi_sampler_params sps[NS] = {
        {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = 1},
        {.temp = 1.5f, .top_k = 64, .top_p = 1.0f, .min_p = 0.0f, .seed = 2},
        {.temp = 0.3f, .top_k = 5, .top_p = 0.9f, .min_p = 0.0f, .seed = 3},
        {.temp = 1.0f, .top_k = 1, .top_p = 1.0f, .min_p = 0.0f, .seed = 4},
        {.temp = 1.2f, .top_k = 64, .top_p = 0.5f, .min_p = 0.1f, .seed = 5},
        {.temp = 0.0f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = 6},   /* greedy */
        {.temp = 0.9f, .top_k = 17, .top_p = 1.0f, .min_p = 0.2f, .seed = 7},
    };
    int a[NS], c[NS];
    int32_t toks[16];
    for (int i = 0; i < NS; i++) {
        for (int j = 0; j < 3 + i; j++) toks[j] = (int32_t)((9 + 5 * i + 11 * j) % V);
        cr_assert_eq(mi_batch_seq_new(plain, &sps[i], &a[i]), MI_OK, "%s", mi_errmsg());
        cr_assert_eq(mi_batch_seq_new(top, &sps[i], &c[i]), MI_OK, "%s", mi_errmsg());
        cr_assert_eq(mi_batch_seq_add(plain, a[i], toks, 3 + i), MI_OK);
        cr_assert_eq(mi_batch_seq_add(top, c[i], toks, 3 + i), MI_OK);
    }
    for (int step = 0; step < 12; step++) {
        int ran = 0;
        cr_assert_eq(mi_batch_step(plain, 0, &ran), MI_OK, "%s", mi_errmsg());
        cr_assert_eq(mi_batch_step(top, 0, &ran), MI_OK, "%s", mi_errmsg());
        for (int i = 0; i < NS; i++) {
            int32_t tp, tt;
            cr_assert_eq(mi_batch_seq_next(plain, a[i], &tp), MI_OK, "%s", mi_errmsg());
            cr_assert_eq(mi_batch_seq_next(top, c[i], &tt), MI_OK, "%s", mi_errmsg());
            cr_assert_eq(tt, tp, "step %d sequence %d (top_k %d): %d from the candidates, %d from the logits", step,
                         i, sps[i].top_k, tt, tp);
            cr_assert_null(mi_batch_seq_logits(top, c[i]), "a top-k step returns no logits");
            cr_assert_eq(mi_batch_seq_add(plain, a[i], &tp, 1), MI_OK);
            cr_assert_eq(mi_batch_seq_add(top, c[i], &tt, 1), MI_OK);
        }
    }
    mi_batch_free(plain);
    mi_batch_free(top);
    mi_model_free(m);
}

/* A step's draws run on the CPU backend's workers: every sequence's token is the one its own
 * sampler (same parameters and seed, drawing in order) takes from its own row of logits, for 6
 * sampled sequences of different seeds and a greedy one, 4 threads, 10 steps. */
Test(batch, parallel_draws_match_each_sequences_sampler) {
    mi_model *m = test_synth("tiny-qwen2", "q4_0");
    const int64_t V = mi_model_hparams(m)->n_vocab;
    mi_batch *b = cpu_batch(m, 8, 512, 4, false);
    enum { NS = 7 };
    int id[NS];
    mi_sampler ref[NS];
    int32_t toks[16];
    for (int i = 0; i < NS; i++) {
        mi_sampler_params sp;
        mi_sampler_params_default(&sp);
        sp.temp = i == NS - 1 ? 0.0f : 0.7f + 0.1f * (float)i;   /* the last one greedy */
        sp.seed = 100 + (uint64_t)i;
        cr_assert_eq(mi_sampler_init(&ref[i], &sp, V), MI_OK);
        cr_assert_eq(mi_batch_seq_new(b, &sp, &id[i]), MI_OK, "%s", mi_errmsg());
        for (int j = 0; j < 4 + i; j++) toks[j] = (int32_t)((5 + 3 * i + 7 * j) % V);
        cr_assert_eq(mi_batch_seq_add(b, id[i], toks, 4 + i), MI_OK);
    }
    for (int step = 0; step < 10; step++) {
        int ran = 0;
        cr_assert_eq(mi_batch_step(b, 0, &ran), MI_OK, "%s", mi_errmsg());
        cr_assert_eq(ran, NS);
        for (int i = 0; i < NS; i++) {
            const float *row = mi_batch_seq_logits(b, id[i]);
            cr_assert_not_null(row);
            const int32_t want = mi_sampler_sample(&ref[i], row);
            int32_t got;
            cr_assert_eq(mi_batch_seq_next(b, id[i], &got), MI_OK, "%s", mi_errmsg());
            cr_assert_eq(got, want, "step %d sequence %d: drew %d, its own sampler %d", step, i, got, want);
            cr_assert_eq(mi_batch_seq_add(b, id[i], &got, 1), MI_OK);
        }
    }
    for (int i = 0; i < NS; i++) mi_sampler_free(&ref[i]);
    mi_batch_free(b);
    mi_model_free(m);
}

/* no_logits: a greedy step returns each sequence's argmax id, the same as the argmax of the
 * logits a plain batch returns; no logits then; a sampled sequence in the step brings them back */
Test(batch, no_logits_equals_logits_argmax) {
    mi_model *m = test_synth("tiny-qwen2", "q4_0");
    const int64_t V = mi_model_hparams(m)->n_vocab;
    mi_batch *plain = cpu_batch(m, 5, 256, 2, false);
    mi_batch *ids = cpu_batch(m, 5, 256, 2, true);
    int a[3], c[3];
    int32_t toks[16];
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 5 + 3 * i; j++) toks[j] = (int32_t)((11 + 7 * i + 5 * j) % V);
        cr_assert_eq(mi_batch_seq_new(plain, NULL, &a[i]), MI_OK);
        cr_assert_eq(mi_batch_seq_new(ids, NULL, &c[i]), MI_OK);
        cr_assert_eq(mi_batch_seq_add(plain, a[i], toks, 5 + 3 * i), MI_OK);
        cr_assert_eq(mi_batch_seq_add(ids, c[i], toks, 5 + 3 * i), MI_OK);
    }
    for (int step = 0; step < 4; step++) {
        int ran = 0;
        cr_assert_eq(mi_batch_step(plain, 0, &ran), MI_OK, "%s", mi_errmsg());
        cr_assert_eq(mi_batch_step(ids, 0, &ran), MI_OK, "%s", mi_errmsg());
        for (int i = 0; i < 3; i++) {
            int32_t tp, ti;
            cr_assert_eq(mi_batch_seq_next(plain, a[i], &tp), MI_OK);
            cr_assert_eq(mi_batch_seq_next(ids, c[i], &ti), MI_OK);
            cr_assert_eq(ti, tp, "step %d sequence %d: id %d, logits' argmax %d", step, i, ti, tp);
            cr_assert_eq(tp, mi_sample_greedy(mi_batch_seq_logits(plain, a[i]), V));
            cr_assert_null(mi_batch_seq_logits(ids, c[i]), "no logits in a no_logits step");
            cr_assert_eq(mi_batch_seq_add(plain, a[i], &tp, 1), MI_OK);
            cr_assert_eq(mi_batch_seq_add(ids, c[i], &ti, 1), MI_OK);
        }
    }
    /* a sampled sequence with top_k 40 joins: still no logits (a top-k step); one without a
     * top_k joins: the step returns logits for everyone */
    mi_sampler_params sp = {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 3};
    int d, e;
    cr_assert_eq(mi_batch_seq_new(ids, &sp, &d), MI_OK, "%s", mi_errmsg());
    cr_assert_eq(mi_batch_seq_add(ids, d, toks, 3), MI_OK);
    int ran = 0;
    cr_assert_eq(mi_batch_step(ids, 0, &ran), MI_OK, "%s", mi_errmsg());
    cr_assert_null(mi_batch_seq_logits(ids, c[0]));
    cr_assert_null(mi_batch_seq_logits(ids, d));
    sp.top_k = 0;
    cr_assert_eq(mi_batch_seq_new(ids, &sp, &e), MI_OK, "%s", mi_errmsg());
    cr_assert_eq(mi_batch_seq_add(ids, e, toks, 3), MI_OK);
    cr_assert_eq(mi_batch_step(ids, 0, &ran), MI_OK, "%s", mi_errmsg());
    cr_assert_not_null(mi_batch_seq_logits(ids, e));
    mi_batch_free(plain);
    mi_batch_free(ids);
    mi_model_free(m);
}

Test(batch, full_pool_refuses_one_sequence) {
    mi_model *m = test_synth("tiny-qwen2", "q4_0");
    const int64_t V = mi_model_hparams(m)->n_vocab;
    mi_batch *b = cpu_batch(m, 3, 64, 2, false);   /* 4 blocks of 16 */
    int a, c, big;
    int32_t toks[80];
    for (int j = 0; j < 80; j++) toks[j] = (int32_t)((5 + 3 * j) % V);
    cr_assert_eq(mi_batch_seq_new(b, NULL, &a), MI_OK);
    cr_assert_eq(mi_batch_seq_new(b, NULL, &big), MI_OK);
    cr_assert_eq(mi_batch_seq_new(b, NULL, &c), MI_OK);
    cr_assert_eq(mi_batch_seq_add(b, a, toks, 20), MI_OK);       /* 2 blocks */
    cr_assert_eq(mi_batch_seq_add(b, big, toks, 40), MI_OK);     /* 3 blocks: cannot fit after a */
    cr_assert_eq(mi_batch_seq_add(b, c, toks + 7, 10), MI_OK);   /* 1 block */
    int ran = 0;
    cr_assert_eq(mi_batch_step(b, 0, &ran), MI_OK, "%s", mi_errmsg());
    cr_assert_eq(ran, 2);
    cr_assert_eq(mi_batch_seq_status(b, big), MI_ERR_NOMEM);
    cr_assert(strstr(mi_errmsg(), "KV pool is full"), "message: %s", mi_errmsg());
    cr_assert_null(mi_batch_seq_logits(b, big));
    cr_assert_eq(mi_batch_seq_n_past(b, big), 0);
    cr_assert_eq(mi_batch_seq_status(b, a), MI_OK);
    cr_assert_eq(mi_batch_seq_n_past(b, a), 20);
    cr_assert_eq(mi_batch_seq_n_past(b, c), 10);
    /* a and c are exact despite their refused neighbour */
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = "cpu";
    p.n_threads = 2;
    mi_session *s = NULL;
    cr_assert_eq(mi_session_new(m, &p, &s), MI_OK);
    cr_assert_eq(mi_session_decode(s, toks + 7, 10, false), MI_OK);
    int64_t rows;
    cr_assert(!memcmp(mi_logits(s, &rows), mi_batch_seq_logits(b, c), (size_t)V * sizeof(float)));
    mi_session_free(s);
    /* once a ends, big fits and runs from its queue */
    mi_batch_seq_free(b, a);
    cr_assert_eq(mi_batch_step(b, 0, &ran), MI_OK, "%s", mi_errmsg());
    cr_assert_eq(ran, 1);
    cr_assert_eq(mi_batch_seq_n_past(b, big), 40);
    cr_assert_not_null(mi_batch_seq_logits(b, big));
    mi_batch_free(b);
    mi_model_free(m);
}

Test(batch, bad_calls) {
    mi_model *m = test_synth("tiny-qwen2", "q4_0");
    mi_batch_params bp;
    mi_batch_params_default(&bp);
    bp.n_seq_max = 1;
    bp.kv_tokens = 64;
    mi_batch *b = NULL;
    bp.backend = "cuda";   /* here without a device (or a CUDA build): a clear error */
    mi_status st = mi_batch_new(m, &bp, &b);
    if (st == MI_OK) mi_batch_free(b);
    else cr_assert(strstr(mi_errmsg(), "cuda"), "message: %s", mi_errmsg());
    bp.backend = "tpu";
    cr_assert_eq(mi_batch_new(m, &bp, &b), MI_ERR_INVALID);
    bp.backend = "cpu";
    bp.n_seq_max = 0;
    cr_assert_eq(mi_batch_new(m, &bp, &b), MI_ERR_INVALID);
    bp.n_seq_max = 1;
    bp.kv_tokens = (int64_t)1 << 40;   /* far past any host's memory: refused before allocating */
    cr_assert_eq(mi_batch_new(m, &bp, &b), MI_ERR_NOMEM);
    cr_assert(strstr(mi_errmsg(), "KV pool"), "message: %s", mi_errmsg());
    bp.kv_tokens = 64;
    cr_assert_eq(mi_batch_new(m, &bp, &b), MI_OK, "%s", mi_errmsg());
    int a, other;
    cr_assert_eq(mi_batch_seq_new(b, NULL, &a), MI_OK);
    cr_assert_eq(mi_batch_seq_new(b, NULL, &other), MI_ERR_NOMEM, "only one sequence");
    const int32_t bad = (int32_t)mi_model_hparams(m)->n_vocab;
    cr_assert_eq(mi_batch_seq_add(b, a, &bad, 1), MI_ERR_INVALID);
    cr_assert_eq(mi_batch_seq_add(b, 7, &bad, 1), MI_ERR_INVALID, "no such sequence");
    int32_t t;
    cr_assert_eq(mi_batch_seq_next(b, a, &t), MI_ERR_INVALID, "it has not run");
    int ran = -1;
    cr_assert_eq(mi_batch_step(b, 0, &ran), MI_OK, "an empty step is no error");
    cr_assert_eq(ran, 0);
    mi_batch_free(b);
    mi_model_free(m);
}

/* A seeded sampled sequence draws the same tokens whether its prompt goes in one step or is
 * split over steps by the token budget: the sampler draws once, after the prompt's last token
 * (a server feeds long prompts in pieces and must still equal `minfer run`). */
static void sampled_tokens(mi_model *m, int64_t budget, int32_t *out, int n) {
    const int64_t V = mi_model_hparams(m)->n_vocab;
    mi_batch *b = cpu_batch(m, 2, 256, 2, false);
    mi_sampler_params sp;
    mi_sampler_params_default(&sp);
    sp.temp = 1.0f;
    sp.seed = 42;
    int id;
    cr_assert_eq(mi_batch_seq_new(b, &sp, &id), MI_OK, "%s", mi_errmsg());
    int32_t toks[40];
    for (int j = 0; j < 40; j++) toks[j] = (int32_t)((11 + 7 * j) % V);
    cr_assert_eq(mi_batch_seq_add(b, id, toks, 40), MI_OK);
    int ran, steps = 0;
    while (mi_batch_seq_queued(b, id) > 0) {
        cr_assert_eq(mi_batch_step(b, budget, &ran), MI_OK, "%s", mi_errmsg());
        int32_t t;
        mi_status want = mi_batch_seq_queued(b, id) > 0 ? MI_ERR_INVALID : MI_OK;
        cr_assert_eq(mi_batch_seq_next(b, id, &t), want, "next only after the prompt's last token");
        steps++;
    }
    cr_assert_eq(steps, budget > 0 ? (int)((40 + budget - 1) / budget) : 1);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(mi_batch_seq_next(b, id, &out[i]), MI_OK, "%s", mi_errmsg());
        cr_assert_eq(mi_batch_seq_add(b, id, &out[i], 1), MI_OK);
        cr_assert_eq(mi_batch_step(b, budget, &ran), MI_OK, "%s", mi_errmsg());
    }
    mi_batch_free(b);
}

Test(batch, sampled_draw_ignores_the_budget) {
    mi_model *m = test_synth("tiny-qwen2", "q4_0");
    int32_t whole[8], split[8];
    sampled_tokens(m, 0, whole, 8);
    sampled_tokens(m, 16, split, 8);
    for (int i = 0; i < 8; i++) cr_assert_eq(split[i], whole[i], "token %d: budget 16 %d, whole prompt %d", i, split[i], whole[i]);
    mi_model_free(m);
}

/* Graph reuse (a step of the same bucket runs the last step's graph again): four sequences over
 * 140 steps, decoding across many block (16) and bucket (16, 32, 64, 128, 256) boundaries of
 * the longest sequence, one joining at step 40 and one ending after step 70. Every logit at
 * every step equals, byte for byte, that of the same batch building every step
 * (MINFER_NO_GRAPH_REUSE=1) and that of each sequence alone; most steps reuse. */
#define LONG_SEQS 4
#define LONG_STEPS 140
static int long_join(int i) { return i == 3 ? 40 : 0; }
static int long_end(int i) { return i == 1 ? 70 : LONG_STEPS - 1; }
static int64_t long_prompt(int i) { return 5 + 4 * i - (i == 3 ? 6 : 0); }   /* 5, 9, 13, 11 */
static int64_t long_chunk(int i, int step, int32_t *out, int64_t V) {
    const int k = step - long_join(i);
    if (k < 0 || step > long_end(i)) return 0;
    const int64_t off = k == 0 ? 0 : long_prompt(i) + k - 1, n = k == 0 ? long_prompt(i) : 1;
    for (int64_t j = 0; j < n; j++) out[j] = tok(i, off + j, V);
    return n;
}

/* logits [LONG_SEQS][LONG_STEPS][V] of the schedule run as one batch */
static void long_batch(mi_model *m, bool reuse, float *out, mi_batch_stats *stats) {
    const int64_t V = mi_model_hparams(m)->n_vocab;
    mi_batch_params bp;
    mi_batch_params_default(&bp);
    bp.n_seq_max = LONG_SEQS;
    bp.kv_tokens = 1024;
    bp.n_threads = 2;
    mi_batch *b = NULL;
    if (!reuse) setenv("MINFER_NO_GRAPH_REUSE", "1", 1);
    mi_status st = mi_batch_new(m, &bp, &b);
    unsetenv("MINFER_NO_GRAPH_REUSE");
    cr_assert_eq(st, MI_OK, "%s", mi_errmsg());
    int id[LONG_SEQS];
    int32_t toks[64];
    for (int step = 0; step < LONG_STEPS; step++) {
        for (int i = 0; i < LONG_SEQS; i++) {
            const int64_t n = long_chunk(i, step, toks, V);
            if (!n) continue;
            if (step == long_join(i)) cr_assert_eq(mi_batch_seq_new(b, NULL, &id[i]), MI_OK, "%s", mi_errmsg());
            cr_assert_eq(mi_batch_seq_add(b, id[i], toks, n), MI_OK, "%s", mi_errmsg());
        }
        int ran = 0;
        cr_assert_eq(mi_batch_step(b, 0, &ran), MI_OK, "step %d: %s", step, mi_errmsg());
        for (int i = 0; i < LONG_SEQS; i++) {
            if (step < long_join(i) || step > long_end(i)) continue;
            const float *got = mi_batch_seq_logits(b, id[i]);
            cr_assert(got, "sequence %d has no logits at step %d", i, step);
            memcpy(out + ((size_t)i * LONG_STEPS + (size_t)step) * (size_t)V, got, (size_t)V * sizeof(float));
            if (step == long_end(i) && step < LONG_STEPS - 1) mi_batch_seq_free(b, id[i]);
        }
    }
    mi_batch_get_stats(b, stats);
    mi_batch_free(b);
}

Test(batch, graph_reuse_across_buckets, .timeout = 600) {
    mi_model *m = test_synth("tiny-qwen2", "q4_0");
    const int64_t V = mi_model_hparams(m)->n_vocab;
    const size_t n = (size_t)LONG_SEQS * LONG_STEPS * (size_t)V;
    float *on = calloc(n, sizeof(float)), *off = calloc(n, sizeof(float)), *alone = calloc(n, sizeof(float));
    mi_batch_stats s_on, s_off;
    long_batch(m, true, on, &s_on);
    long_batch(m, false, off, &s_off);
    cr_assert_eq(s_on.steps, LONG_STEPS);
    cr_assert_eq(s_on.graph_builds + s_on.graph_reuses, LONG_STEPS);
    /* builds: the first prompt step, each bucket the longest sequence enters (32 .. 256), the
     * join (a mixed step, then a new sequence count), the end: 10 */
    cr_assert_leq(s_on.graph_builds, 12, "%lld graphs built in %d steps", (long long)s_on.graph_builds, LONG_STEPS);
    cr_assert_eq(s_off.graph_builds, LONG_STEPS, "MINFER_NO_GRAPH_REUSE=1 builds every step");
    cr_assert_eq(s_off.graph_reuses, 0);
    for (int i = 0; i < LONG_SEQS; i++) {   /* each alone, in a session fed the same chunks */
        mi_session_params p;
        mi_session_params_default(&p);
        p.backend = "cpu";
        p.n_threads = 2;
        mi_session *s = NULL;
        cr_assert_eq(mi_session_new(m, &p, &s), MI_OK, "%s", mi_errmsg());
        int32_t toks[64];
        for (int step = 0; step < LONG_STEPS; step++) {
            const int64_t k = long_chunk(i, step, toks, V);
            if (!k) continue;
            cr_assert_eq(mi_session_decode(s, toks, k, false), MI_OK, "%s", mi_errmsg());
            int64_t rows;
            memcpy(alone + ((size_t)i * LONG_STEPS + (size_t)step) * (size_t)V, mi_logits(s, &rows),
                   (size_t)V * sizeof(float));
        }
        mi_session_free(s);
    }
    for (size_t j = 0; j < n; j++) {
        const size_t row = j / (size_t)V;
        cr_assert(!memcmp(&on[j], &off[j], sizeof(float)), "sequence %zu, step %zu, logit %zu: reused %.9g, built %.9g",
                  row / LONG_STEPS, row % LONG_STEPS, j % (size_t)V, on[j], off[j]);
        cr_assert(!memcmp(&on[j], &alone[j], sizeof(float)), "sequence %zu, step %zu, logit %zu: batch %.9g, alone %.9g",
                  row / LONG_STEPS, row % LONG_STEPS, j % (size_t)V, on[j], alone[j]);
    }
    free(on);
    free(off);
    free(alone);
    mi_model_free(m);
}

/* A step queued ahead of the host's read (MINFER_STEP_AHEAD, common/model/batch_ahead.c): the
 * same greedy schedule through a batch that queues steps ahead (on the CPU, forced: 2) and one that
 * never does gives the same tokens, positions and sequence counts at every step, through
 * everything that makes a queued step wrong: a sequence freed while one is queued (its row
 * ignored), a new prompt arriving (a second step in the same call), a sequence fed another token
 * than the one it drew (its position given back, run again), one fed its token and more (the
 * rest in the second step), a step budget (once where a step is queued: taken in part), and the
 * pool's last blocks. Afterwards one step with
 * logits for everyone (a sampled sequence without top_k joins) must agree bit for bit: the KV
 * rows the queued steps wrote are the ones a plain step writes. A third of the steps at least
 * must have been queued ahead, some taken in part, none refused by the backend (a refusal would
 * hide a step queued with the wrong key), or the test proves nothing. */
#define AHEAD_OPEN 5
#define AHEAD_STEPS 24

typedef struct {
    int32_t next[AHEAD_OPEN][AHEAD_STEPS];
    int64_t n_past[AHEAD_OPEN][AHEAD_STEPS];
    int ran[AHEAD_STEPS];
    float *logits;   /* [AHEAD_OPEN][V]: the last step's */
    mi_batch_stats stats;
    int64_t free_blocks, blocks;
} ahead_run;

/* sequence i's chunk at step `step` from its last drawn token d: a prompt at its join step (0,
 * 0, 2, 9 and 9), then its token, but sequence 0 at step 12 is fed another one and sequence 2 at
 * step 15 its token and two more */
static int64_t ahead_chunk(int i, int step, int32_t d, int32_t *out, int64_t V) {
    static const int join[AHEAD_OPEN] = {0, 0, 2, 9, 9};
    if (step < join[i] || (i == 1 && step > 6)) return 0;   /* 1 ends after step 6 */
    if (step == join[i]) {
        const int64_t n = 4 + 5 * i;
        for (int64_t j = 0; j < n; j++) out[j] = tok(i, j, V);
        return n;
    }
    out[0] = i == 0 && step == 12 ? (d + 1) % (int32_t)V : d;
    if (i == 2 && step == 15) {
        out[1] = tok(i, 50, V), out[2] = tok(i, 51, V);
        return 3;
    }
    return 1;
}

/* noreuse: no liveness reuse in the scheduler, so the ids Input and the argmax output have
 * their own bytes and the queued step's ids cross by the copy (with reuse the output takes the
 * ids' bytes, which then need none) */
static void ahead_schedule(mi_model *m, const char *mode, bool noreuse, ahead_run *r) {
    const int64_t V = mi_model_hparams(m)->n_vocab;
    setenv("MINFER_STEP_AHEAD", mode, 1);
    if (noreuse) setenv("MINFER_SCHED_NOREUSE", "1", 1);
    mi_batch *b = cpu_batch(m, AHEAD_OPEN + 1, 192, 2, true);   /* 12 blocks: the sequences end holding 12 */
    unsetenv("MINFER_STEP_AHEAD");
    unsetenv("MINFER_SCHED_NOREUSE");
    int id[AHEAD_OPEN];
    int32_t drawn[AHEAD_OPEN] = {0}, toks[64];
    for (int step = 0; step < AHEAD_STEPS; step++) {
        for (int i = 0; i < AHEAD_OPEN; i++) {
            const int64_t n = ahead_chunk(i, step, drawn[i], toks, V);
            if (!n) continue;
            if (step == 0 || (i >= 2 && n > 3)) cr_assert_eq(mi_batch_seq_new(b, NULL, &id[i]), MI_OK, "%s", mi_errmsg());
            cr_assert_eq(mi_batch_seq_add(b, id[i], toks, n), MI_OK, "%s", mi_errmsg());
        }
        int ran = 0;
        /* a budget at steps 18 and 21 (where a step is queued ahead): fewer tokens than sequences */
        cr_assert_eq(mi_batch_step(b, step == 18 || step == 21 ? 2 : 0, &ran), MI_OK, "%s step %d: %s", mode, step, mi_errmsg());
        r->ran[step] = ran;
        for (int i = 0; i < AHEAD_OPEN; i++) {
            r->next[i][step] = -1;
            r->n_past[i][step] = -1;
            if (step < (i < 2 ? 0 : i == 2 ? 2 : 9) || (i == 1 && step > 6)) continue;
            r->n_past[i][step] = mi_batch_seq_n_past(b, id[i]);
            if (mi_batch_seq_next(b, id[i], &drawn[i]) == MI_OK) r->next[i][step] = drawn[i];
            else mi_err_clear();
            if (i == 1 && step == 6) mi_batch_seq_free(b, id[i]);
        }
    }
    /* one step with logits: a sampled sequence without top_k joins, and every sequence is fed
     * another token than it drew (a step queued ahead is given up whole) */
    mi_sampler_params sp = {.temp = 0.7f, .seed = 5};
    int e;
    cr_assert_eq(mi_batch_seq_new(b, &sp, &e), MI_OK, "%s", mi_errmsg());
    cr_assert_eq(mi_batch_seq_add(b, e, toks, 2), MI_OK);
    for (int i = 0; i < AHEAD_OPEN; i++) {
        const int32_t t = (drawn[i] + 3) % (int32_t)V;
        if (i != 1) cr_assert_eq(mi_batch_seq_add(b, id[i], &t, 1), MI_OK);
    }
    int ran = 0;
    cr_assert_eq(mi_batch_step(b, 0, &ran), MI_OK, "%s: %s", mode, mi_errmsg());
    r->logits = malloc((size_t)AHEAD_OPEN * (size_t)V * sizeof(float));
    for (int i = 0; i < AHEAD_OPEN; i++) {
        const float *l = i == 1 ? NULL : mi_batch_seq_logits(b, id[i]);
        if (i != 1) cr_assert_not_null(l, "%s: sequence %d has no logits", mode, i);
        if (l) memcpy(r->logits + (size_t)i * (size_t)V, l, (size_t)V * sizeof(float));
    }
    mi_batch_get_stats(b, &r->stats);
    for (int i = 0; i < AHEAD_OPEN; i++)
        if (i != 1) mi_batch_seq_free(b, id[i]);
    mi_batch_seq_free(b, e);
    r->free_blocks = mi_batch_kv_free_blocks(b);
    r->blocks = mi_batch_kv_blocks(b);
    mi_batch_free(b);
}

/* the schedule on a synthetic model with steps queued ahead (noreuse as ahead_schedule)
 * against it without. The tiny shapes' greedy tokens settle on one token at once, so a queued
 * step fed the token of the step before would pass unseen: the 0.5B's cycle through several. */
static void steps_ahead_vs_read_first(const char *shape, bool noreuse) {
    mi_model *m = test_synth(shape, "q4_0");
    const int64_t V = mi_model_hparams(m)->n_vocab;
    ahead_run off = {0}, on = {0};
    ahead_schedule(m, "0", noreuse, &off);
    ahead_schedule(m, "2", noreuse, &on);
    for (int step = 0; step < AHEAD_STEPS; step++) {
        cr_assert_eq(on.ran[step], off.ran[step], "step %d: %d sequences ran, %d without steps ahead", step, on.ran[step],
                     off.ran[step]);
        for (int i = 0; i < AHEAD_OPEN; i++) {
            cr_assert_eq(on.next[i][step], off.next[i][step], "step %d sequence %d: token %d, %d without steps ahead",
                         step, i, on.next[i][step], off.next[i][step]);
            cr_assert_eq(on.n_past[i][step], off.n_past[i][step], "step %d sequence %d: n_past %lld, %lld", step, i,
                         (long long)on.n_past[i][step], (long long)off.n_past[i][step]);
        }
    }
    for (int i = 0; i < AHEAD_OPEN; i++)
        for (int64_t v = 0; i != 1 && v < V; v++) {
            const size_t k = (size_t)i * (size_t)V + (size_t)v;
            cr_assert(!memcmp(&on.logits[k], &off.logits[k], sizeof(float)), "sequence %d logit %lld: %.9g, %.9g", i,
                      (long long)v, on.logits[k], off.logits[k]);
        }
    cr_assert_eq(off.stats.ahead_steps, 0);
    cr_assert_geq(on.stats.ahead_steps, AHEAD_STEPS / 3, "only %lld steps were queued ahead", (long long)on.stats.ahead_steps);
    cr_assert_geq(on.stats.ahead_dropped, 1, "no queued step was given up: the mismatch paths were not taken");
    cr_assert_geq(on.stats.ahead_partial, 1, "no queued step was taken in part: the mismatch paths were not taken");
    cr_assert_eq(on.stats.ahead_failed, 0, "%lld steps could not be queued", (long long)on.stats.ahead_failed);
    cr_assert_eq(on.free_blocks, on.blocks, "blocks left reserved: %lld of %lld free", (long long)on.free_blocks,
                 (long long)on.blocks);
    free(on.logits);
    free(off.logits);
    mi_model_free(m);
}

Test(batch, steps_queued_ahead_equal_steps_read_first) { steps_ahead_vs_read_first("tiny-qwen2", false); }
Test(batch, steps_queued_ahead_equal_steps_read_first_0_5b_ids_copied, .timeout = 600) {
    steps_ahead_vs_read_first("qwen2.5-0.5b", true);
}

/* Session API tests on a tiny random F32 llama written here with the GGUF writer:
 * chunked and appended decoding equal one batch (row NMSE < 1e-6), truncate + re-feed equals
 * the original rows, reset starts over, and bad calls fail cleanly without moving the
 * session. (Correctness of the numbers themselves: gates/common/py_forward_ref.py.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/model/mi.h"
#include "common/gguf/gguf.h"
#include "common/sampler/sampler.h"
#include "gates/common/test_synth.h"

enum { V = 64, E = 64, L = 2, H = 4, HKV = 2, HD = 16, F = 128, CTX = 32 };

static char g_path[256];
static float *g_bufs[64];
static int g_nbufs;

static uint64_t g_rng = 12345;
static float frand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

static void add(gguf_writer *w, const char *name, int64_t ne0, int64_t ne1, float scale, float center) {
    float *d = malloc((size_t)(ne0 * ne1) * sizeof *d);
    for (int64_t i = 0; i < ne0 * ne1; i++) d[i] = center + scale * frand();
    g_bufs[g_nbufs++] = d;
    int64_t ne[2] = {ne0, ne1};
    gguf_w_tensor(w, name, MI_TYPE_F32, ne1 > 1 ? 2 : 1, ne, d);
}

static void write_model(void) {
    snprintf(g_path, sizeof g_path, "/tmp/minfer_test_session_%d.gguf", (int)getpid());
    gguf_writer *w = gguf_writer_new();
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_u32(w, "llama.block_count", L);
    gguf_w_u32(w, "llama.context_length", CTX);
    gguf_w_u32(w, "llama.embedding_length", E);
    gguf_w_u32(w, "llama.feed_forward_length", F);
    gguf_w_u32(w, "llama.attention.head_count", H);
    gguf_w_u32(w, "llama.attention.head_count_kv", HKV);
    gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    add(w, "token_embd.weight", E, V, 2.0f, 0.0f);
    add(w, "output_norm.weight", E, 1, 0.2f, 1.0f);
    char nm[64];
    for (int il = 0; il < L; il++) {
#define T(s, a, b, sc, c) do { snprintf(nm, sizeof nm, "blk.%d." s ".weight", il); add(w, nm, a, b, sc, c); } while (0)
        T("attn_norm", E, 1, 0.2f, 1.0f);
        T("attn_q", E, H * HD, 0.25f, 0.0f);
        T("attn_k", E, HKV * HD, 0.25f, 0.0f);
        T("attn_v", E, HKV * HD, 0.25f, 0.0f);
        T("attn_output", H * HD, E, 0.25f, 0.0f);
        T("ffn_norm", E, 1, 0.2f, 1.0f);
        T("ffn_gate", E, F, 0.25f, 0.0f);
        T("ffn_up", E, F, 0.25f, 0.0f);
        T("ffn_down", F, E, 0.18f, 0.0f);
#undef T
    }
    cr_assert_eq(gguf_writer_write(w, g_path, NULL, NULL, NULL), MI_OK, "%s", mi_errmsg());
    gguf_writer_free(w);
}

static mi_model *g_m;

static void setup(void) {
    write_model();
    cr_assert_eq(mi_model_load(g_path, &g_m), MI_OK, "%s", mi_errmsg());
}
static void teardown(void) {
    mi_model_free(g_m);
    unlink(g_path);
    for (int i = 0; i < g_nbufs; i++) free(g_bufs[i]);
    g_nbufs = 0;
}

static mi_session *open_session(int64_t ubatch) {
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = "cpu";
    p.n_threads = 2;
    p.n_ubatch = ubatch;
    mi_session *s = NULL;
    cr_assert_eq(mi_session_new(g_m, &p, &s), MI_OK, "%s", mi_errmsg());
    return s;
}

static const int32_t toks[12] = {5, 17, 3, 60, 22, 9, 41, 8, 33, 2, 50, 11};

/* rows [12, V] of one whole batch */
static void one_batch(float *out) {
    mi_session *s = open_session(1000);
    cr_assert_eq(mi_session_decode(s, toks, 12, true), MI_OK, "%s", mi_errmsg());
    int64_t rows;
    const float *l = mi_logits(s, &rows);
    cr_assert_eq(rows, 12);
    memcpy(out, l, sizeof(float) * 12 * V);
    mi_session_free(s);
}

/* Row NMSE < 1e-6: bit-identical while both batch shapes use one kernel; another kernel
 * (GEMM vs dot) sums in another order, and the F16 cache can round such a last-bit
 * difference to the other half (the bound of gates/common/py_session.py). */
static void expect_rows(const float *got, const float *want, int n, const char *what) {
    for (int r = 0; r < n; r++) {
        double num = 0, den = 0;
        int worst = 0;
        for (int i = 0; i < V; i++) {
            double d = (double)got[r * V + i] - want[r * V + i];
            num += d * d;
            den += (double)want[r * V + i] * want[r * V + i];
            if (fabs(d) > fabs((double)got[r * V + worst] - want[r * V + worst])) worst = i;
        }
        cr_assert(num <= 1e-6 * den, "%s: row %d nmse %.3g; logit %d got %.9g want %.9g", what, r, num / den, worst,
                  got[r * V + worst], want[r * V + worst]);
    }
}

TestSuite(session, .init = setup, .fini = teardown);

Test(session, hparams_from_metadata) {
    const mi_hparams *hp = mi_model_hparams(g_m);
    cr_assert_eq(hp->arch, MI_ARCH_LLAMA);
    cr_assert_eq(hp->head_dim, HD);
    cr_assert_eq(hp->n_rot, HD);
    cr_assert_eq(hp->n_vocab, V);
    cr_assert(hp->tied_output, "no output.weight: tied");
    cr_assert_eq(hp->rope_mode, 0);
    cr_assert(fabsf(hp->rope_freq_base - 10000.0f) < 1e-3f, "default rope base");
}

Test(session, chunked_and_appended_equal_one_batch) {
    float *want = malloc(sizeof(float) * 12 * V), *got = malloc(sizeof(float) * 12 * V);
    one_batch(want);
    /* automatic micro-batches of 4 inside one call */
    mi_session *s = open_session(4);
    cr_assert_eq(mi_session_decode(s, toks, 12, true), MI_OK, "%s", mi_errmsg());
    expect_rows(mi_logits(s, NULL), want, 12, "ubatch 4");
    mi_session_free(s);
    /* appended calls of 5, 1, 6 tokens (last-row logits each) */
    s = open_session(1000);
    int cut[4] = {0, 5, 6, 12};
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(mi_session_decode(s, toks + cut[k], cut[k + 1] - cut[k], false), MI_OK, "%s", mi_errmsg());
        int64_t rows;
        const float *l = mi_logits(s, &rows);
        cr_assert_eq(rows, 1);
        expect_rows(l, want + (size_t)(cut[k + 1] - 1) * V, 1, "appended piece");
    }
    cr_assert_eq(mi_session_n_past(s), 12);
    mi_session_free(s);
    free(want);
    free(got);
}

Test(session, truncate_and_reset) {
    float *want = malloc(sizeof(float) * 12 * V);
    one_batch(want);
    mi_session *s = open_session(1000);
    int32_t wrong[4] = {1, 1, 1, 1};
    cr_assert_eq(mi_session_decode(s, toks, 6, false), MI_OK);
    cr_assert_eq(mi_session_decode(s, wrong, 4, false), MI_OK);
    cr_assert_eq(mi_session_truncate(s, 6), MI_OK);        /* drop the wrong tokens */
    cr_assert_eq(mi_session_decode(s, toks + 6, 6, true), MI_OK);
    expect_rows(mi_logits(s, NULL), want + 6 * V, 6, "after truncate");
    cr_assert_neq(mi_session_truncate(s, 13), MI_OK, "cannot truncate forward");
    mi_session_reset(s);
    cr_assert_eq(mi_session_n_past(s), 0);
    cr_assert_eq(mi_session_decode(s, toks, 12, true), MI_OK);
    expect_rows(mi_logits(s, NULL), want, 12, "after reset");
    mi_session_free(s);
    free(want);
}

Test(session, bad_calls_leave_the_session_unchanged) {
    mi_session *s = open_session(4);
    cr_assert_eq(mi_session_decode(s, toks, 10, false), MI_OK);
    int32_t many[CTX];
    for (int i = 0; i < CTX; i++) many[i] = i % V;
    cr_assert_neq(mi_session_decode(s, many, CTX - 5, false), MI_OK, "past the context must fail");
    cr_assert(strstr(mi_errmsg(), "exceeds the context"), "message: %s", mi_errmsg());
    cr_assert_eq(mi_session_n_past(s), 10);
    int32_t bad[2] = {3, V};
    cr_assert_neq(mi_session_decode(s, bad, 2, false), MI_OK);
    cr_assert(strstr(mi_errmsg(), "outside the vocabulary"), "message: %s", mi_errmsg());
    cr_assert_eq(mi_session_n_past(s), 10);
    cr_assert_neq(mi_session_decode(s, toks, 0, false), MI_OK);
    cr_assert_eq(mi_session_decode(s, many, CTX - 10, false), MI_OK, "exactly filling the context is fine: %s", mi_errmsg());
    cr_assert_eq(mi_session_n_past(s), CTX);
    mi_session_free(s);
}

/* A session runs its last one-token graph again at the next position (docs/PHASE8A.md):
 * one-token steps, a prompt piece in between (its arrays grow: the graph is rebuilt), a
 * truncate and a reset all give the logits of sessions that build every graph anew, bit for
 * bit, and a step past the context is refused as before. */
static void step_stream(float *out, int *n_out) {
    mi_session *s = open_session(1000);
    int k = 0;
    for (int i = 0; i < 4; i++) {   /* token by token */
        cr_assert_eq(mi_session_decode(s, toks + i, 1, false), MI_OK, "%s", mi_errmsg());
        memcpy(out + (size_t)k++ * V, mi_logits(s, NULL), sizeof(float) * V);
    }
    cr_assert_eq(mi_session_decode(s, toks + 4, 5, false), MI_OK, "%s", mi_errmsg());   /* a piece */
    memcpy(out + (size_t)k++ * V, mi_logits(s, NULL), sizeof(float) * V);
    for (int i = 9; i < 12; i++) {
        cr_assert_eq(mi_session_decode(s, toks + i, 1, false), MI_OK, "%s", mi_errmsg());
        memcpy(out + (size_t)k++ * V, mi_logits(s, NULL), sizeof(float) * V);
    }
    cr_assert_eq(mi_session_truncate(s, 3), MI_OK);
    for (int i = 3; i < 6; i++) {
        cr_assert_eq(mi_session_decode(s, toks + 11 - i, 1, false), MI_OK, "%s", mi_errmsg());
        memcpy(out + (size_t)k++ * V, mi_logits(s, NULL), sizeof(float) * V);
    }
    mi_session_reset(s);
    cr_assert_eq(mi_session_decode(s, toks + 7, 1, false), MI_OK, "%s", mi_errmsg());
    memcpy(out + (size_t)k++ * V, mi_logits(s, NULL), sizeof(float) * V);
    *n_out = k;
    mi_session_free(s);
}

Test(session, reused_step_graph_equals_fresh_builds) {
    float *reused = malloc(sizeof(float) * 16 * V), *fresh = malloc(sizeof(float) * 16 * V);
    int n1 = 0, n2 = 0;
    step_stream(reused, &n1);
    setenv("MINFER_NO_GRAPH_REUSE", "1", 1);
    step_stream(fresh, &n2);
    unsetenv("MINFER_NO_GRAPH_REUSE");
    cr_assert_eq(n1, n2);
    for (int r = 0; r < n1; r++)
        cr_assert(!memcmp(reused + (size_t)r * V, fresh + (size_t)r * V, sizeof(float) * V),
                  "step %d: the reused graph's logits differ from a fresh build's", r);
    /* the last position of the context: a reused graph is held to the cache length too */
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = "cpu";
    p.n_ctx = 3;
    mi_session *s = NULL;
    cr_assert_eq(mi_session_new(g_m, &p, &s), MI_OK, "%s", mi_errmsg());
    for (int i = 0; i < 3; i++) cr_assert_eq(mi_session_decode(s, toks + i, 1, false), MI_OK, "%s", mi_errmsg());
    cr_assert_neq(mi_session_decode(s, toks + 3, 1, false), MI_OK, "a step past the context must be refused");
    cr_assert_eq(mi_session_n_past(s), 3);
    mi_session_free(s);
    free(reused);
    free(fresh);
}

/* The greedy decode returns the sampler's greedy choice of the logits a logits decode gives,
 * step by step, in a session that also switches between the two (its reused graph is rebuilt
 * for each kind). */
Test(session, greedy_decode_equals_sampler_argmax) {
    mi_session *a = open_session(1000), *b = open_session(1000);
    int32_t ta = toks[0], tb = toks[0];
    cr_assert_eq(mi_session_decode(a, toks, 5, false), MI_OK, "%s", mi_errmsg());
    cr_assert_eq(mi_session_decode_greedy(b, toks, 5, &tb), MI_OK, "%s", mi_errmsg());
    ta = mi_sample_greedy(mi_logits(a, NULL), V);
    cr_assert_eq(tb, ta, "prompt: greedy %d, sampler %d", tb, ta);
    cr_assert_null(mi_logits(b, NULL), "a greedy decode keeps no logits");
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(mi_session_decode(a, &ta, 1, false), MI_OK, "%s", mi_errmsg());
        if (i % 3 == 2) {   /* b takes a logits step now and then */
            cr_assert_eq(mi_session_decode(b, &tb, 1, false), MI_OK, "%s", mi_errmsg());
            tb = mi_sample_greedy(mi_logits(b, NULL), V);
        } else {
            cr_assert_eq(mi_session_decode_greedy(b, &tb, 1, &tb), MI_OK, "%s", mi_errmsg());
        }
        ta = mi_sample_greedy(mi_logits(a, NULL), V);
        cr_assert_eq(tb, ta, "step %d: greedy %d, sampler %d", i, tb, ta);
    }
    mi_session_free(a);
    mi_session_free(b);
}

/* mi_session_decode_top: the last token's k best candidates where the logits are; a sampler's draw
 * from them equals its draw from the whole row (two samplers of one seed, 12 steps, top_k 7 and
 * 40, greedy steps and logits steps mixed in); the candidates are mi_sample_top_k's; bad k and
 * scales refused. */
Test(session, top_k_decode_equals_sampler_draw) {
    mi_session *a = open_session(1000), *b = open_session(1000);
    const int ks[2] = {7, 40};
    for (int c = 0; c < 2; c++) {
        mi_session_reset(a);
        mi_session_reset(b);
        mi_sampler_params sp;
        mi_sampler_params_default(&sp);
        sp.temp = 0.9f;
        sp.top_k = ks[c];
        sp.seed = 77 + (uint64_t)c;
        mi_sampler sa, sb;
        cr_assert_eq(mi_sampler_init(&sa, &sp, V), MI_OK);
        cr_assert_eq(mi_sampler_init(&sb, &sp, V), MI_OK);
        const float scale = 1.0f / sp.temp;
        mi_cand *want = malloc((size_t)V * sizeof *want);
        int32_t ta = toks[0], tb = toks[0];
        cr_assert_eq(mi_session_decode(a, toks, 5, false), MI_OK, "%s", mi_errmsg());
        cr_assert_eq(mi_session_decode_top(b, toks, 5, scale, sp.top_k), MI_OK, "%s", mi_errmsg());
        for (int i = 0; i < 12; i++) {
            int64_t k = 0;
            const float *top = mi_session_top(b, &k);
            cr_assert(top && k == sp.top_k, "step %d: %lld candidates", i, (long long)k);
            cr_assert_null(mi_logits(b, NULL), "a top-k decode keeps no logits");
            const int64_t m = mi_sample_top_k(mi_logits(a, NULL), V, scale, sp.top_k, want);
            cr_assert_eq(m, k);
            for (int64_t j = 0; j < k; j++) {
                cr_assert(top[j] == want[j].v && (int32_t)top[k + j] == want[j].id,
                          "step %d candidate %lld: %g / %d, want %g / %d", i, (long long)j, (double)top[j],
                          (int)top[k + j], (double)want[j].v, want[j].id);
            }
            ta = mi_sampler_sample(&sa, mi_logits(a, NULL));
            tb = mi_sampler_sample_top(&sb, top, k);
            cr_assert_eq(tb, ta, "step %d: %d from the candidates, %d from the logits", i, tb, ta);
            cr_assert_eq(mi_session_decode(a, &ta, 1, false), MI_OK, "%s", mi_errmsg());
            if (i == 4) {   /* other outputs between top-k steps: the step graph changes and comes back */
                int32_t g;
                cr_assert_eq(mi_session_decode_greedy(b, &tb, 1, &g), MI_OK, "%s", mi_errmsg());
                cr_assert_null(mi_session_top(b, NULL), "a greedy decode keeps no candidates");
                cr_assert_eq(mi_session_truncate(b, mi_session_n_past(b) - 1), MI_OK, "%s", mi_errmsg());
            }
            cr_assert_eq(mi_session_decode_top(b, &tb, 1, scale, sp.top_k), MI_OK, "%s", mi_errmsg());
        }
        free(want);
        mi_sampler_free(&sa);
        mi_sampler_free(&sb);
    }
    const float bad_scale[3] = {0.0f, -1.0f, INFINITY};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(mi_session_decode_top(b, toks, 1, bad_scale[i], 5), MI_ERR_INVALID, "scale %g", (double)bad_scale[i]);
    const int64_t bad_k[3] = {0, 257, V};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(mi_session_decode_top(b, toks, 1, 1.0f, bad_k[i]), MI_ERR_INVALID, "k %lld", (long long)bad_k[i]);
    mi_session_free(a);
    mi_session_free(b);
}

/* A greedy step queued ahead of the host's read (MINFER_STEP_AHEAD, forced on the CPU: 2): the
 * same schedule of greedy decodes through a session that queues ahead and one that does not
 * gives the same tokens and positions at every call, through every call that leaves a queued
 * step unread (a logits decode, a top-k decode, a truncate, another token than the one drawn,
 * two tokens at once), and the same last logits bit for bit (the cache rows the queued steps
 * wrote are a plain step's); most greedy decodes took a queued step. On this file's model and
 * on the 0.5B's shape, whose greedy tokens cycle through several (this model's settle on one,
 * where a queued step fed the token of the step before would pass unseen). */
#define AHEAD_CALLS 24
/* a CPU session of n_ctx positions with MINFER_STEP_AHEAD = mode, after a greedy decode of the
 * first three of toks (their draw in *t) */
static mi_session *ahead_session(mi_model *m, const char *mode, int64_t n_ctx, int32_t *t) {
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = "cpu";
    p.n_threads = 2;
    p.n_ctx = n_ctx;
    setenv("MINFER_STEP_AHEAD", mode, 1);
    mi_session *s = NULL;
    cr_assert_eq(mi_session_new(m, &p, &s), MI_OK, "%s", mi_errmsg());
    unsetenv("MINFER_STEP_AHEAD");
    cr_assert_eq(mi_session_decode_greedy(s, toks, 3, t), MI_OK, "%s", mi_errmsg());
    return s;
}
static void ahead_schedule(mi_model *m, const char *mode, int32_t *got, int64_t *n_past, float *last, int64_t *taken) {
    const int64_t nv = mi_model_hparams(m)->n_vocab;
    int32_t t = 0;
    mi_session *s = ahead_session(m, mode, 32, &t);
    for (int i = 0; i < AHEAD_CALLS; i++) {
        const int32_t two[2] = {t, (int32_t)((t + 5) % nv)}, other = (int32_t)((t + 1) % nv);
        mi_status st;
        if (i == 6) {   /* a logits step */
            st = mi_session_decode(s, &t, 1, false);
            if (st == MI_OK) t = mi_sample_greedy(mi_logits(s, NULL), nv);
        } else if (i == 9) {   /* a top-k step */
            st = mi_session_decode_top(s, &t, 1, 1.0f, 3);
            if (st == MI_OK) t = (int32_t)mi_session_top(s, NULL)[3];
        } else if (i == 12) {   /* back two positions, then on from a token there */
            st = mi_session_truncate(s, mi_session_n_past(s) - 2);
            if (st == MI_OK) st = mi_session_decode_greedy(s, &toks[4], 1, &t);
        } else if (i == 15) {   /* another token than the one drawn */
            st = mi_session_decode_greedy(s, &other, 1, &t);
        } else if (i == 18) {   /* two tokens at once */
            st = mi_session_decode_greedy(s, two, 2, &t);
        } else {
            st = mi_session_decode_greedy(s, &t, 1, &t);
        }
        cr_assert_eq(st, MI_OK, "%s: call %d: %s", mode, i, mi_errmsg());
        got[i] = t;
        n_past[i] = mi_session_n_past(s);
    }
    cr_assert_eq(mi_session_decode(s, &t, 1, false), MI_OK, "%s", mi_errmsg());
    memcpy(last, mi_logits(s, NULL), (size_t)nv * sizeof(float));
    *taken = mi_session_steps_ahead(s);
    mi_session_free(s);
}

static void greedy_ahead_vs_read_first(mi_model *m) {
    const int64_t nv = mi_model_hparams(m)->n_vocab;
    int32_t on[AHEAD_CALLS], off[AHEAD_CALLS];
    int64_t np_on[AHEAD_CALLS], np_off[AHEAD_CALLS], taken_on = 0, taken_off = 0;
    float *l_on = malloc((size_t)nv * sizeof(float)), *l_off = malloc((size_t)nv * sizeof(float));
    ahead_schedule(m, "0", off, np_off, l_off, &taken_off);
    ahead_schedule(m, "2", on, np_on, l_on, &taken_on);
    for (int i = 0; i < AHEAD_CALLS; i++) {
        cr_assert_eq(on[i], off[i], "call %d: token %d, %d read first", i, on[i], off[i]);
        cr_assert_eq(np_on[i], np_off[i], "call %d: n_past %lld, %lld", i, (long long)np_on[i], (long long)np_off[i]);
    }
    for (int64_t v = 0; v < nv; v++)
        cr_assert(!memcmp(&l_on[v], &l_off[v], sizeof(float)), "last logit %lld: %.9g, %.9g", (long long)v, l_on[v],
                  l_off[v]);
    cr_assert_eq(taken_off, 0);
    cr_assert_geq(taken_on, 10, "only %lld greedy decodes took a queued step", (long long)taken_on);
    free(l_on);
    free(l_off);
}

/* Greedy decodes up to the context's end with steps queued ahead (2) and without: the same
 * tokens, the decode that would pass the end refused the same way, and no step queued past it
 * (the one at the last position is never queued). */
static void ahead_to_ctx(const char *mode, int32_t *got, int *n_ok, mi_status *end, char *why, size_t why_n,
                         int64_t *taken) {
    int32_t t = 0;
    mi_session *s = ahead_session(g_m, mode, 16, &t);
    *n_ok = 0;
    *end = MI_OK;
    for (int i = 0; i < 20; i++) {
        const mi_status st = mi_session_decode_greedy(s, &t, 1, &t);
        if (st != MI_OK) {
            *end = st;
            snprintf(why, why_n, "%s", mi_errmsg());
            break;
        }
        got[(*n_ok)++] = t;
    }
    *taken = mi_session_steps_ahead(s);
    mi_session_free(s);
}
Test(session, greedy_steps_queued_ahead_to_the_context_end) {
    int32_t on[20], off[20];
    int n_on = 0, n_off = 0;
    mi_status e_on, e_off;
    char w_on[256] = "", w_off[256] = "";
    int64_t taken_on = 0, taken_off = 0;
    ahead_to_ctx("0", off, &n_off, &e_off, w_off, sizeof w_off, &taken_off);
    ahead_to_ctx("2", on, &n_on, &e_on, w_on, sizeof w_on, &taken_on);
    cr_assert_eq(n_on, n_off, "%d decodes before the end, %d read first", n_on, n_off);
    cr_assert_eq(n_off, 13, "%d decodes of a 3-token prompt in a context of 16", n_off);
    for (int i = 0; i < n_on; i++) cr_assert_eq(on[i], off[i], "decode %d: token %d, %d read first", i, on[i], off[i]);
    cr_assert_eq(e_on, MI_ERR_INVALID, "the decode past the end: %s", w_on);
    cr_assert_eq(e_on, e_off);
    cr_assert_str_eq(w_on, w_off);
    cr_assert_geq(taken_on, 8, "only %lld decodes took a queued step", (long long)taken_on);
}

Test(session, greedy_steps_queued_ahead_equal_steps_read_first) { greedy_ahead_vs_read_first(g_m); }
Test(session, greedy_steps_queued_ahead_equal_steps_read_first_0_5b, .timeout = 600) {
    mi_model *m = test_synth("qwen2.5-0.5b", "q4_0");
    greedy_ahead_vs_read_first(m);
    mi_model_free(m);
}

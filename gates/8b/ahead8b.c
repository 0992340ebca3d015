/* gate_8b's batch_ahead_* cases (ahead8b.h). */
#include "gates/8b/ahead8b.h"
#include "gates/8b/models8b.h"
#include "common/model/mi_batch.h"
#include "common/sampler/sampler.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static gu_run *run_;
static const char *minfer_;

/* ---------------- a step queued ahead of the host's read (common/model/batch_ahead.c) ---------------- */
/* nseq greedy sequences (no_logits) for `steps` steps, each fed what it drew; with perturb,
 * everything that makes a queued step wrong: sequence nseq / 2 freed after step steps / 3, a
 * new prompt at step steps / 2, sequence 0 fed another token at step 2 steps / 3. Then every
 * sequence fed another token with a sampled sequence joining, a step with logits. mode:
 * MINFER_STEP_AHEAD. feed (the reference): a batch read first, with logits at every step, fed
 * the one-token feeds another run recorded (so its rows see the same tokens), each row's argmax
 * and top-1 margin kept. */
typedef struct {
    int32_t *tok;     /* [nseq + 1][steps]: drawn (the reference: the logits' argmax), -1: none */
    int32_t *fed;     /* [nseq + 1][steps]: the one token fed at that step, -1: none (a prompt, or closed) */
    double *margin;   /* [nseq + 1][steps]: the reference's top-1 margin */
    double *rms;      /* [nseq + 1][steps]: the reference's logits' root mean square */
    int *ran;         /* [steps] */
    float *last;      /* [nseq + 1][V]: the last step's logits rows (0 where closed) */
    mi_batch_stats bs;
} ah_run;

static void ah_alloc(ah_run *r, int nseq, int steps, int64_t V) {
    const size_t nt = (size_t)(nseq + 1) * steps;
    memset(r, 0, sizeof *r);
    r->tok = calloc(nt, 4), r->fed = calloc(nt, 4), r->margin = calloc(nt, sizeof(double)), r->rms = calloc(nt, sizeof(double));
    r->ran = calloc((size_t)steps, sizeof(int)), r->last = calloc((size_t)(nseq + 1) * (size_t)V, sizeof(float));
}
static void ah_release(ah_run *r) { free(r->tok), free(r->fed), free(r->margin), free(r->rms), free(r->ran), free(r->last); }

static mi_status ah_schedule(mi_model *m, int nseq, int steps, const char *mode, bool perturb, const int32_t *feed,
                             ah_run *r) {
    const int64_t V = mi_model_hparams(m)->n_vocab;
    mi_batch_params bp;
    mi_batch_params_default(&bp);
    bp.n_seq_max = nseq + 2;
    bp.kv_tokens = (int64_t)(nseq + 2) * (steps + 64);
    bp.backend = "cuda";
    bp.no_logits = !feed;
    if (*mode) setenv("MINFER_STEP_AHEAD", mode, 1);
    mi_batch *b = NULL;
    mi_status st = mi_batch_new(m, &bp, &b);
    unsetenv("MINFER_STEP_AHEAD");
    if (st != MI_OK) return st;
    const int nall = nseq + 1, freed = perturb ? nseq / 2 : -1, joiner = nseq;
    int *id = calloc((size_t)nall, sizeof *id);
    int32_t *drawn = calloc((size_t)nall, sizeof *drawn), toks[64];
    bool *open = calloc((size_t)nall, sizeof *open);
    for (size_t i = 0; i < (size_t)nall * steps; i++) r->tok[i] = -1, r->fed[i] = feed ? feed[i] : -1;
    for (int step = 0; st == MI_OK && step < steps; step++) {
        for (int i = 0; st == MI_OK && i < nall; i++) {
            const size_t at = (size_t)i * steps + step;
            const bool joins = (i < nseq && step == 0) || (perturb && i == joiner && step == steps / 2);
            if (joins) {
                const int n = 1 + (i * 5) % 19;
                for (int j = 0; j < n; j++) toks[j] = models8b_tok(i, j, V);
                st = mi_batch_seq_new(b, NULL, &id[i]);
                if (st == MI_OK) st = mi_batch_seq_add(b, id[i], toks, n);
                open[i] = st == MI_OK;
            } else if (open[i]) {
                if (!feed) r->fed[at] = perturb && i == 0 && step == 2 * steps / 3 ? (drawn[i] + 1) % (int32_t)V : drawn[i];
                st = mi_batch_seq_add(b, id[i], &r->fed[at], 1);
            }
        }
        if (st == MI_OK) st = mi_batch_step(b, 0, &r->ran[step]);
        for (int i = 0; st == MI_OK && i < nall; i++) {
            if (!open[i]) continue;
            const size_t at = (size_t)i * steps + step;
            if (feed) {   /* the reference: the argmax of the row's logits, and its margin */
                const float *l = mi_batch_seq_logits(b, id[i]);
                if (!l) st = mi_err(MI_ERR_INTERNAL, "sequence %d has no logits at step %d", i, step);
                else {
                    double ss = 0;
                    for (int64_t v = 0; v < V; v++) ss += (double)l[v] * l[v];
                    drawn[i] = mi_sample_greedy(l, V), r->margin[at] = models8b_margin(l, V), r->rms[at] = sqrt(ss / (double)V);
                }
            } else {
                st = mi_batch_seq_next(b, id[i], &drawn[i]);
            }
            r->tok[at] = drawn[i];
            if (st == MI_OK && i == freed && step == steps / 3) mi_batch_seq_free(b, id[i]), open[i] = false;
        }
    }
    mi_sampler_params sp = {.temp = 0.7f, .seed = 5};
    int e = -1, ran = 0;
    if (st == MI_OK) st = mi_batch_seq_new(b, &sp, &e);
    if (st == MI_OK) st = mi_batch_seq_add(b, e, toks, 2);
    for (int i = 0; st == MI_OK && i < nall; i++) {
        const int32_t t = (drawn[i] + 3) % (int32_t)V;
        if (open[i]) st = mi_batch_seq_add(b, id[i], &t, 1);
    }
    if (st == MI_OK) st = mi_batch_step(b, 0, &ran);
    for (int i = 0; st == MI_OK && i < nall; i++) {
        const float *l = open[i] ? mi_batch_seq_logits(b, id[i]) : NULL;
        if (open[i] && !l) st = mi_err(MI_ERR_INTERNAL, "sequence %d has no logits in the last step", i);
        if (l) memcpy(r->last + (size_t)i * (size_t)V, l, (size_t)V * sizeof(float));
    }
    mi_batch_get_stats(b, &r->bs);
    mi_batch_free(b);
    free(id);
    free(drawn);
    free(open);
    return st;
}

/* A step taken whole is the step the host would have run: the steady schedule (every sequence
 * fed what it drew) against the same read first, every token, sequence count and last logits row
 * bit for bit. A step taken in part keeps rows computed among more rows than the host's step
 * would have had (batch_ahead.c): the perturbed schedule against a reference read first and fed
 * the same tokens, with logits at every step: the same sequence counts; each drawn token the
 * reference's argmax unless a near-tie (reported, not hidden): its margin within twice the logit
 * error the model bound allows a row (sqrt(bound) x the row's rms: rows computed among other rows
 * differ by up to that, as batch_* measure) or the last step's largest logit difference; the
 * last step's logits within the model bound (as batch_*).
 * Most steps queued ahead, some taken in part, some given up, none refused. */
static void test_steps_ahead(const char *shape, const char *type, int nseq, int steps) {
    char label[128];
    snprintf(label, sizeof label, "batch_ahead_%.30s_%.20s_%dseq", shape, type, nseq);
    mi_model *m = models8b_open(run_, minfer_, label, shape, type);
    if (!m) return;
    const int64_t V = mi_model_hparams(m)->n_vocab;
    const size_t nt = (size_t)(nseq + 1) * steps, nl = (size_t)(nseq + 1) * (size_t)V;
    ah_run on, off, pon, ref;
    ah_alloc(&on, nseq, steps, V), ah_alloc(&off, nseq, steps, V), ah_alloc(&pon, nseq, steps, V), ah_alloc(&ref, nseq, steps, V);
    mi_status st = ah_schedule(m, nseq, steps, "0", false, NULL, &off);
    if (st == MI_OK) st = ah_schedule(m, nseq, steps, "1", false, NULL, &on);
    if (st == MI_OK) st = ah_schedule(m, nseq, steps, "1", true, NULL, &pon);
    if (st == MI_OK) st = ah_schedule(m, nseq, steps, "0", true, pon.fed, &ref);
    /* steady: bit for bit */
    size_t bad = 0, first = nt;
    int bad_ran = 0;
    for (size_t j = 0; st == MI_OK && j < nt; j++)
        if (on.tok[j] != off.tok[j]) bad++, first = first < j ? first : j;
    for (int k = 0; st == MI_OK && k < steps; k++) bad_ran += on.ran[k] != off.ran[k];
    const size_t bad_last = st == MI_OK ? gu_first_diff(on.last, off.last, nl * sizeof(float)) : (size_t)-1;
    /* perturbed: the same counts, tokens but near-ties, the last logits in the bound */
    const double bound = strstr(shape, "7b") ? 5e-2 : strncmp(shape, "tiny", 4) ? 1e-5 : 1e-3;
    int p_ran = 0, ties = 0, unexplained = 0;
    double noise = 0, worst = 0;
    char tie_note[256] = "";
    size_t tl = 0;
    for (int k = 0; st == MI_OK && k < steps; k++) p_ran += pon.ran[k] != ref.ran[k];
    for (size_t j = 0; st == MI_OK && j < nl; j++) noise = fmax(noise, fabs((double)pon.last[j] - ref.last[j]));
    for (int i = 0; st == MI_OK && i <= nseq; i++) {
        const double e = gu_nmse(pon.last + (size_t)i * (size_t)V, ref.last + (size_t)i * (size_t)V, (size_t)V);
        if (e > worst || e != e) worst = e;
    }
    for (size_t j = 0; st == MI_OK && j < nt; j++) {
        if (pon.tok[j] == ref.tok[j]) continue;
        ties++;
        const double allowed = 2 * fmax(noise, sqrt(bound) * ref.rms[j]);
        if (!(ref.margin[j] <= allowed)) unexplained++;
        if (tl < sizeof tie_note - 60)
            tl += (size_t)snprintf(tie_note + tl, sizeof tie_note - tl, "%sseq %zu step %zu margin %.2g of %.2g",
                                   tl ? "; " : "", j / steps, j % steps, ref.margin[j], allowed);
    }
    const mi_batch_stats *ps = &pon.bs;
    if (st != MI_OK) gu_fail(run_, "%s", mi_errmsg());
    else if (bad || bad_ran || bad_last != (size_t)-1)
        gu_fail(run_, "steady schedule, steps queued ahead: %zu tokens differ (first: sequence %zu step %zu: %d, %d read "
                    "first), %d steps ran other sequence counts, last logits first differing byte %lld (-1: none)",
                bad, first / steps, first % steps, first < nt ? on.tok[first] : 0, first < nt ? off.tok[first] : 0, bad_ran,
                (long long)bad_last);
    else if (p_ran || unexplained || !(worst <= bound))
        gu_fail(run_, "perturbed schedule: %d steps ran other sequence counts; %d tokens differ from the reference's argmax, "
                    "%d not near-ties (%s); last logits nmse %.3g (bound %.0e), max |dlogit| %.3g",
                p_ran, ties, unexplained, tie_note, worst, bound, noise);
    else if (off.bs.ahead_steps || ref.bs.ahead_steps || on.bs.ahead_steps < steps / 2 || on.bs.ahead_partial ||
             ps->ahead_steps < steps / 2 || !ps->ahead_partial || !ps->ahead_dropped || on.bs.ahead_failed || ps->ahead_failed)
        gu_fail(run_, "steps queued ahead and taken: steady %lld (want >= %d, none in part: %lld), perturbed %lld (want >= "
                    "%d), of them in part %lld (want >= 1); given up %lld (want >= 1); refused %lld, %lld (want 0); read "
                    "first: %lld, %lld (want 0)",
                (long long)on.bs.ahead_steps, steps / 2, (long long)on.bs.ahead_partial, (long long)ps->ahead_steps,
                steps / 2, (long long)ps->ahead_partial, (long long)ps->ahead_dropped, (long long)on.bs.ahead_failed,
                (long long)ps->ahead_failed, (long long)off.bs.ahead_steps, (long long)ref.bs.ahead_steps);
    else
        gu_pass(run_, "%d sequences, %d steps: steady, every token, sequence count and last logits row bit for bit with "
                    "steps read first (%lld queued ahead and taken); perturbed (one freed, one joining, one fed another "
                    "token), %lld taken (%lld in part), %lld given up: sequence counts equal, tokens the reference's "
                    "argmax%s%s, last logits nmse %.3g <= %.0e",
                nseq, steps, (long long)on.bs.ahead_steps, (long long)ps->ahead_steps, (long long)ps->ahead_partial,
                (long long)ps->ahead_dropped, ties ? " but near-ties: " : "", tie_note, worst, bound);
    ah_release(&on), ah_release(&off), ah_release(&pon), ah_release(&ref);
    mi_model_free(m);
}

void ahead8b_run(gu_run *run, const char *minfer) {
    run_ = run;
    minfer_ = minfer;
    test_steps_ahead("tiny-qwen2", "q4_0", 5, 24);
    test_steps_ahead("qwen2.5-0.5b", "q4_0", 64, 30);
    test_steps_ahead("qwen2.5-7b", "q4_k_m", 64, 12);
}

/* The step queued ahead of the host's read (docs/PHASE8B.md, "A step queued ahead").
 *
 * A decode step on a device is queued in tens of microseconds and runs for milliseconds, but
 * the host can plan the next step only once it knows the tokens this one draws: read back,
 * drawn, handed to the caller, fed again. Meanwhile the device idles. When every sequence of an
 * all-greedy step drew and nothing else waits, the next step is known but for its token ids:
 * each sequence's own argmax. So that step is queued at once, its ids copied on the device from
 * this step's output into its ids Input (an Input flagged MI_T_FED, which the scheduler does
 * not copy from the host), and only then does the host wait for this step's ids.
 *
 * The caller does not see it: at its next mi_batch_step, each sequence of the queued step whose
 * queue starts with the token it drew counts that step as run; a sequence fed something else
 * gives its position back and runs in a step of its own, after the queued one, which overwrote
 * nothing it keeps (its KV row at that position is written again); a freed sequence's row is
 * ignored. The queued step's work is ordered before everything queued after it, so a freed
 * block or a rebuilt graph's buffer is written only after it.
 *
 * Bits: a step taken whole is the step the host would have run (the same graph on the same
 * inputs). A step taken in part (a sequence freed, fed another token, past the token budget)
 * gives the rows it keeps as computed among all of its rows, where the host would have run
 * fewer: on the CPU the same bits (a row's arithmetic does not depend on the others); on a
 * device within the batch's bound, not bit for bit, since the kernels' splits and forms follow
 * a step's rows (gate_8b's batch_ahead_*). Giving such a step up instead would waste a whole
 * step each time a sequence ends or joins. A step queued before the dispatch's items switched
 * is given up whole: it ran the kernels of before. */
#include "batch_internal.h"
#include "../backend/hooks.h"
#include "../core/mi_settings.h"
#include "../core/mi_progress.h"
#include <stdlib.h>
#include <string.h>

mi_status batch_ahead_init(mi_batch *b) {
    long mode = 0;
    MI_TRY(mi_setting_int("MINFER_STEP_AHEAD", 0, 2, 1, &mode));
    b->ahead.mode = (int)mode;
    b->ahead.seqs = malloc((size_t)b->n_seq_max * sizeof *b->ahead.seqs);
    b->ahead.held = malloc((size_t)b->n_seq_max * sizeof *b->ahead.held);
    b->ahead.ids = batch_host_alloc(b, (size_t)b->n_seq_max * sizeof *b->ahead.ids, &b->ahead.ids_pinned);
    return b->ahead.seqs && b->ahead.held && b->ahead.ids ? MI_OK : mi_err(MI_ERR_NOMEM, "out of memory");
}

void batch_ahead_free(mi_batch *b) {
    if (b->ahead.live) {   /* its work reads the pool, the graph's buffers and writes page-locked ids */
        for (int i = 0; i < b->n_backends; i++)
            if (b->backends[i]->iface->synchronize(b->backends[i]) != MI_OK) mi_log("warning: %s", mi_errmsg());
        batch_ahead_drop(b);
    }
    free(b->ahead.seqs);
    free(b->ahead.held);
    batch_host_free(b, b->ahead.ids, b->ahead.ids_pinned);
}

void batch_ahead_drop(mi_batch *b) {
    if (!b->ahead.live) return;
    for (int k = 0; k < b->ahead.S; k++) {
        const int id = b->ahead.seqs[k];
        if (id < 0) continue;
        kv_pool_truncate(&b->pool, &b->seq[id].kv, b->ahead.held[k]);
        b->seq[id].ahead_row = -1;
    }
    b->ahead.live = false;
    b->stats.ahead_dropped++;
}

void batch_ahead_forget_seq(mi_batch *b, int id) {
    batch_seq *s = &b->seq[id];
    if (!b->ahead.live || s->ahead_row < 0) return;
    b->ahead.seqs[s->ahead_row] = -1;
    s->ahead_row = -1;
}

static bool ahead_wanted(const mi_batch *b, const mi_graph *g) {
    if (b->ahead.mode == 0 || b->out != OUT_IDS || !g || g != b->step_graph || !g->output) return false;
    return b->ahead.mode == 2 || sched_reads_ahead(b->sched, g->output);
}

/* one more position for each sequence of the step (all or none); the largest n_pos after */
static bool reserve_one_each(mi_batch *b, int S, int64_t *max_kv) {
    const int64_t n_ctx_train = mi_model_hparams(b->m)->n_ctx_train;
    *max_kv = 0;
    for (int k = 0; k < S; k++) {
        mi_kv_seq *kv = &b->seq[b->in_step[k]].kv;
        b->ahead.held[k] = kv->n_pos;
        if (kv->n_pos + 1 > n_ctx_train || kv_pool_reserve(&b->pool, kv, kv->n_pos + 1) != MI_OK) {
            mi_err_clear();   /* the step that comes next meets it again and says so */
            for (int j = 0; j < k; j++) kv_pool_truncate(&b->pool, &b->seq[b->in_step[j]].kv, b->ahead.held[j]);
            return false;
        }
        if (kv->n_pos > *max_kv) *max_kv = kv->n_pos;
    }
    return true;
}

bool batch_ahead_queue(mi_batch *b, mi_graph *g, int S) {
    if (!ahead_wanted(b, g)) return false;
    for (int i = 0; i < b->n_seq_max; i++)   /* the next step is exactly this one's sequences, a token each */
        if (b->seq[i].used && b->seq[i].head != b->seq[i].n_queue) return false;
    mi_tensor *ids = graph_input_of(g, b->ids);
    const size_t n = (size_t)S * sizeof(int32_t);
    if (!ids || mi_nbytes(g->output) != n) return false;
    int64_t max_kv = 0;
    if (!reserve_one_each(b, S, &max_kv)) return false;
    /* the same graph: its key unchanged (the longest sequence still in its bucket) */
    const int64_t B = b->pool.block, kv = batch_kv_bucket(max_kv, b->pool.n_blocks * B);
    const mi_batch_layout K = {.n_seqs = S, .max_kv = kv, .seqs_len = (int64_t)S * (MI_PAGED_FIELDS + (kv + B - 1) / B),
                               .max_rows = 1};
    const step_key key = batch_step_key(b, &K, S, OUT_IDS);
    mi_status st = batch_key_eq(&key, &b->key) && S <= b->cap_tok && K.seqs_len <= b->cap_tab ? MI_OK : MI_ERR_INVALID;
    if (st == MI_OK) {
        mi_batch_layout L;
        batch_fill_step(b, S, max_kv, 1, true, &L);
        st = sched_compute_fed(b->sched, g, ids, g->output, n);
        batch_note_sched(b);
        if (st != MI_OK) {   /* the step read next reports a device that failed; counted and said once */
            if (!b->stats.ahead_failed) mi_log("warning: a step could not be queued ahead (%s); steps are read first", mi_errmsg());
            mi_err_clear();
            b->stats.ahead_failed++;
        }
    }
    if (st != MI_OK) {
        for (int k = 0; k < S; k++) kv_pool_truncate(&b->pool, &b->seq[b->in_step[k]].kv, b->ahead.held[k]);
        return false;
    }
    b->ahead.live = true;
    b->ahead.S = S;
    for (int k = 0; k < S; k++) {
        b->ahead.seqs[k] = b->in_step[k];
        b->seq[b->in_step[k]].ahead_row = k;
    }
    return true;
}

/* the queued step's sequences that take it: each fed the token it drew, in row (id) order while
 * the budget lasts (max_tokens > 0: plan_step's rule, a token each); the others' positions back.
 * *whole: every one of them does. */
static int ahead_accept(mi_batch *b, int64_t max_tokens, bool *whole) {
    int acc = 0;
    *whole = true;
    for (int k = 0; k < b->ahead.S; k++) {
        const int id = b->ahead.seqs[k];
        if (id < 0) {
            *whole = false;
            continue;
        }
        batch_seq *s = &b->seq[id];
        s->ahead_row = -1;
        if (s->drawn && s->head < s->n_queue && s->queue[s->head] == s->next && (max_tokens <= 0 || acc < max_tokens)) {
            acc++;
            continue;
        }
        *whole = false;
        kv_pool_truncate(&b->pool, &s->kv, b->ahead.held[k]);
        b->ahead.seqs[k] = -1;
    }
    return acc;
}

mi_status batch_ahead_take(mi_batch *b, int64_t max_tokens, int *n_run, bool *rest) {
    *n_run = 0;
    *rest = true;
    const double t0 = mi_now_s();
    mi_graph *g = b->step_graph;
    /* no graph to read it from, or the items switched since it was queued (the key's epoch):
     * every row given back; the queued work runs first, unread */
    if (!g || (!b->no_graph_reuse && mi_hook_graph_epoch(b->hook_state) != b->key.epoch)) {
        batch_ahead_drop(b);
        return MI_OK;
    }
    bool whole = false;
    const int S = b->ahead.S, acc = ahead_accept(b, max_tokens, &whole);
    b->ahead.live = false;
    if (!acc) {   /* nothing to take: the step is a normal one */
        b->stats.ahead_dropped++;
        return MI_OK;
    }
    /* its rows as the step's: in_step[k] the sequence of row k (-1: not taken), held the positions before */
    memcpy(b->in_step, b->ahead.seqs, (size_t)S * sizeof *b->in_step);
    memcpy(b->held, b->ahead.held, (size_t)S * sizeof *b->held);
    mi_status st = sched_read_begin(b->sched, g->output, b->ahead.ids, 0, (size_t)S * sizeof(int32_t));
    bool more = false;
    for (int k = 0; k < S; k++)
        if (b->in_step[k] >= 0) b->seq[b->in_step[k]].head++;
    for (int i = 0; i < b->n_seq_max && !more; i++) more = b->seq[i].used && b->seq[i].head != b->seq[i].n_queue;
    const double t1 = mi_now_s();
    bool queued = false;
    if (st == MI_OK && whole && !more) queued = batch_ahead_queue(b, g, S);   /* the steady state */
    const double t2 = mi_now_s();
    if (st == MI_OK) st = sched_read_wait(b->sched, g->output);
    const int64_t V = mi_model_hparams(b->m)->n_vocab;
    for (int k = 0; st == MI_OK && k < S; k++)   /* a row's argmax, as ARGMAX's rule */
        if (b->in_step[k] >= 0 && (b->ahead.ids[k] < 0 || b->ahead.ids[k] >= V))
            st = mi_err(MI_ERR_INVALID, "sequence %d: its logits have no finite maximum", b->in_step[k]);
    if (st != MI_OK) {   /* as a failed step: its tokens stay queued, its positions go back, its graph is not run again */
        if (queued) batch_ahead_drop(b);
        graph_free(b->step_graph);
        b->step_graph = NULL;
        for (int k = 0; k < S; k++) {
            if (b->in_step[k] < 0) continue;
            batch_seq *s = &b->seq[b->in_step[k]];
            s->head--;
            s->drawn = false;
            kv_pool_truncate(&b->pool, &s->kv, b->held[k]);
        }
        return mi_err_ctx(st, "a step of %d sequences queued ahead", acc);
    }
    const double t3 = mi_now_s();
    b->out = OUT_IDS;
    for (int k = 0; k < S; k++) {
        if (b->in_step[k] < 0) continue;
        batch_seq *s = &b->seq[b->in_step[k]];
        s->row = k;
        s->has_logits = false;
        s->drawn = s->head == s->n_queue;
        if (s->drawn) s->next = b->ahead.ids[k];
        s->ran = true;
    }
    b->stats.ahead_steps++;
    b->stats.ahead_partial += !whole;
    batch_note_step(b, t0, t1, t2, t3);
    *n_run = acc;
    *rest = more;
    return MI_OK;
}

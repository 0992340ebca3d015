/* Many sequences in one step (mi_batch.h): the sequences' queues, the KV pool, and one graph a
 * step built by model_build_graph with a batch layout (build.c): tokens ordered by sequence,
 * each with its position and cache row, ATTN_PAGED's table of the sequences and their block
 * tables, and each sequence's last row for its logits. A step of the same shape as the last
 * (its bucket: sequences, rows, output, hook epoch, longest sequence rounded up) runs the
 * last step's graph again: everything else a step changes is Input data. */
#include "batch_internal.h"
#include "../backend/hooks.h"
#include "../core/mi_settings.h"
#include "../core/mi_progress.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mi_batch_params_default(mi_batch_params *p) {
    memset(p, 0, sizeof *p);
    p->n_seq_max = 64;
    p->kv_tokens = 4096;
    p->block = 16;
    p->kv_type = MI_TYPE_F16;
    p->backend = "auto";
}

void mi_batch_free(mi_batch *b) {
    if (!b) return;
    batch_ahead_free(b);   /* waits for a step still queued */
    if (b->n_backends) batch_host_free(b, b->next_ids, b->next_ids_pinned);   /* before the backend that gave it goes */
    else free(b->next_ids);
    graph_free(b->step_graph);
    for (int i = 0; b->seq && i < b->n_seq_max; i++) mi_batch_seq_free(b, i);
    kv_pool_free(&b->pool);
    mi_hook_session_close(b->hook_state);
    if (b->sched) sched_free(b->sched);
    for (int i = 0; i < b->n_backends; i++) b->backends[i]->iface->destroy(b->backends[i]);   /* devices first */
    free(b->seq);
    free(b->logits);
    free(b->ids); free(b->pos); free(b->rows); free(b->solo); free(b->tab); free(b->last); free(b->ones);
    free(b->top);
    free(b->top_scale);
    free(b->in_step);
    free(b->draw);
    free(b->take);
    free(b->held);
    free(b);
}

/* The backend that runs the paged ops (KV_SCATTER, ATTN_PAGED): the pool lives there, so the
 * attention never reads the cache across backends. Probed with stand-in nodes of the real
 * shape, as a session probes for its cache; the CPU when no device takes them. */
static mi_backend *pool_backend(mi_batch *b, mi_type kv_type) {
    const mi_hparams *hp = mi_model_hparams(b->m);
    const int64_t row = hp->head_dim * hp->n_head_kv, qd = hp->head_dim * hp->n_head;
    mi_tensor cache, kn, q, slots, seqs, ks, att;
    const int64_t ne_c[2] = {row, 16}, ne_k[2] = {row, 1}, ne_q[2] = {qd, 1}, ne_i[2] = {1, 1},
                  ne_s[2] = {MI_PAGED_FIELDS + 1, 1};
    tensor_init(&cache, "probe_cache", kv_type, 2, ne_c);
    cache.flags = MI_T_PERSIST;
    tensor_init(&kn, "probe_k", MI_TYPE_F32, 2, ne_k);
    tensor_init(&q, "probe_q", MI_TYPE_F32, 2, ne_q);
    tensor_init(&slots, "probe_slots", MI_TYPE_I32, 2, ne_i);
    tensor_init(&seqs, "probe_seqs", MI_TYPE_I32, 2, ne_s);
    kn.op = q.op = MI_OP_ROPE;
    slots.op = seqs.op = MI_OP_INPUT;
    tensor_init(&ks, "probe_ks", kv_type, 2, ne_c);
    ks.op = MI_OP_KV_SCATTER;
    ks.flags = MI_T_ALIAS;
    ks.src[0] = &kn;
    ks.src[1] = &cache;
    ks.src[2] = &slots;
    tensor_init(&att, "probe_attn", MI_TYPE_F32, 2, ne_q);
    att.op = MI_OP_ATTN_PAGED;
    att.src[0] = &q;
    att.src[1] = &ks;
    att.src[2] = &ks;
    att.src[3] = &seqs;
    att.p[0] = 1;
    att.p[1] = (int32_t)hp->head_dim;
    att.p[2] = (int32_t)hp->n_head;
    att.p[3] = (int32_t)hp->n_head_kv;
    mi_tensor_set_pf(&att, 4, 1.0f);
    att.p[5] = 16;
    att.p[6] = 1;
    att.p[7] = 1;
    for (int i = 0; i < b->n_backends; i++) {
        mi_backend *be = b->backends[i];
        if (be->iface->supports(be, &ks) && be->iface->supports(be, &att)) return be;
    }
    return b->cpu;
}

mi_status mi_batch_new(mi_model *m, const mi_batch_params *pp, mi_batch **out) {
    *out = NULL;
    mi_batch_params p;
    if (pp) p = *pp;
    else mi_batch_params_default(&p);
    const char *be = p.backend ? p.backend : "auto";
    if (strcmp(be, "cpu") && strcmp(be, "cuda") && strcmp(be, "auto"))
        return mi_err(MI_ERR_INVALID, "unknown backend '%s' (use cpu, cuda or auto)", be);
    if (p.n_seq_max < 1 || p.n_seq_max > BATCH_MAX_SEQS)
        return mi_err(MI_ERR_INVALID, "n_seq_max %d outside 1..%d", p.n_seq_max, BATCH_MAX_SEQS);
    if (p.block < 1 || p.block > 4096) return mi_err(MI_ERR_INVALID, "KV block of %lld positions", (long long)p.block);
    if (p.kv_tokens < p.block) return mi_err(MI_ERR_INVALID, "a KV pool of %lld positions", (long long)p.kv_tokens);
    mi_batch *b = calloc(1, sizeof *b);
    if (!b) return mi_err(MI_ERR_NOMEM, "out of memory");
    b->m = m;
    b->n_seq_max = p.n_seq_max;
    const int64_t V = mi_model_hparams(m)->n_vocab;
    b->seq = calloc((size_t)p.n_seq_max, sizeof *b->seq);
    b->logits = malloc((size_t)p.n_seq_max * (size_t)V * sizeof(float));
    b->in_step = malloc((size_t)p.n_seq_max * sizeof *b->in_step);
    b->draw = malloc((size_t)p.n_seq_max * sizeof *b->draw);
    b->take = malloc((size_t)p.n_seq_max * sizeof *b->take);
    b->held = malloc((size_t)p.n_seq_max * sizeof *b->held);
    b->last = malloc((size_t)p.n_seq_max * sizeof *b->last);
    b->ones = malloc((size_t)p.n_seq_max * sizeof *b->ones);
    b->top = malloc((size_t)p.n_seq_max * 2 * BATCH_TOP_K * sizeof *b->top);
    b->top_scale = malloc((size_t)p.n_seq_max * sizeof *b->top_scale);
    b->no_logits = p.no_logits;
    b->no_graph_reuse = mi_setting_on("MINFER_NO_GRAPH_REUSE");
    mi_status st = b->seq && b->logits && b->in_step && b->draw && b->take && b->held && b->last && b->ones &&
                           b->top && b->top_scale
                       ? MI_OK
                       : mi_err(MI_ERR_NOMEM, "out of memory");
    for (int i = 0; st == MI_OK && i < p.n_seq_max; i++) b->ones[i] = 1;
    /* the session's backend choice (session.c): a device when asked for and usable, the CPU
     * always; the phase hooks place the weights; the pool lives where the paged ops run */
    mi_backend *cuda = NULL;
    bool guarded = false;
    if (st == MI_OK && strcmp(be, "cpu")) st = model_open_cuda(be, &cuda);
    if (st == MI_OK) st = mi_backend_cpu_new(p.n_threads, &b->cpu);
    if (st == MI_OK) {
        mi_load_guard_lock();
        guarded = true;
        st = mi_hook_session_open(m, be, &cuda, &b->hook_state);   /* may drop cuda */
    }
    if (cuda) b->backends[b->n_backends++] = cuda;
    if (b->cpu) b->backends[b->n_backends++] = b->cpu;
    if (st == MI_OK) st = sched_new(b->backends, b->n_backends, &b->sched);
    if (st == MI_OK) b->top_here = model_topk_where_logits(m, b->backends[0], BATCH_TOP_K);
    if (st == MI_OK) {   /* the argmax ids come back by DMA, behind the work queued after them (batch_ahead.c) */
        b->next_ids = batch_host_alloc(b, (size_t)p.n_seq_max * sizeof *b->next_ids, &b->next_ids_pinned);
        st = b->next_ids ? batch_ahead_init(b) : mi_err(MI_ERR_NOMEM, "out of memory");
    }
    mi_backend *pool_be = st == MI_OK ? pool_backend(b, p.kv_type) : NULL;
    const int64_t n_blocks = (p.kv_tokens + p.block - 1) / p.block;
    if (st == MI_OK) {   /* refuse a pool that cannot fit before allocating (and zeroing) it */
        char what[160];
        snprintf(what, sizeof what, "the batch's KV pool (%lld blocks of %lld positions)", (long long)n_blocks,
                 (long long)p.block);
        st = sched_check_fit(pool_be, kv_cache_size(mi_model_hparams(m), p.kv_type, n_blocks * p.block), what,
                             "ask for fewer KV positions (kv_tokens)");
    }
    if (st == MI_OK) st = kv_pool_init(&b->pool, mi_model_hparams(m), p.kv_type, p.block, n_blocks, pool_be);
    if (guarded) mi_load_guard_unlock();
    if (st != MI_OK) {
        mi_batch_free(b);
        return st;
    }
    *out = b;
    return MI_OK;
}

static batch_seq *seq_of(const mi_batch *b, int id) {
    return b && id >= 0 && id < b->n_seq_max && b->seq[id].used ? &b->seq[id] : NULL;
}

mi_status mi_batch_seq_new(mi_batch *b, const mi_sampler_params *sp, int *id) {
    for (int i = 0; i < b->n_seq_max; i++) {
        batch_seq *s = &b->seq[i];
        if (s->used) continue;
        memset(s, 0, sizeof *s);
        s->ahead_row = -1;
        s->greedy = !sp || sp->temp <= 0.0f;
        if (!s->greedy) MI_TRY(mi_sampler_init(&s->sampler, sp, mi_model_hparams(b->m)->n_vocab));
        s->used = true;
        *id = i;
        return MI_OK;
    }
    return mi_err(MI_ERR_NOMEM, "all %d sequences of the batch are open", b->n_seq_max);
}

void mi_batch_seq_free(mi_batch *b, int id) {
    batch_seq *s = seq_of(b, id);
    if (!s) return;
    batch_ahead_forget_seq(b, id);
    kv_pool_release(&b->pool, &s->kv);   /* a step queued ahead that writes its blocks runs before any later one */
    if (!s->greedy) mi_sampler_free(&s->sampler);
    free(s->queue);
    memset(s, 0, sizeof *s);
}

mi_status mi_batch_seq_add(mi_batch *b, int id, const int32_t *tokens, int64_t n) {
    batch_seq *s = seq_of(b, id);
    if (!s) return mi_err(MI_ERR_INVALID, "no open sequence %d", id);
    const int64_t V = mi_model_hparams(b->m)->n_vocab;
    if (n < 0 || (n && !tokens)) return mi_err(MI_ERR_INVALID, "sequence %d: %lld tokens", id, (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return mi_err(MI_ERR_INVALID, "token id %d at index %lld is outside the vocabulary (0..%lld)", tokens[i],
                          (long long)i, (long long)V - 1);
    if (s->head > 0) {   /* the consumed part goes */
        memmove(s->queue, s->queue + s->head, (size_t)(s->n_queue - s->head) * sizeof *s->queue);
        s->n_queue -= s->head;
        s->head = 0;
    }
    if (s->n_queue + n > s->cap) {
        int64_t cap = s->cap ? s->cap : 64;
        while (cap < s->n_queue + n) cap *= 2;
        int32_t *q = realloc(s->queue, (size_t)cap * sizeof *q);
        if (!q) return mi_err(MI_ERR_NOMEM, "out of memory for %lld queued tokens", (long long)cap);
        s->queue = q;
        s->cap = cap;
    }
    memcpy(s->queue + s->n_queue, tokens, (size_t)n * sizeof *tokens);
    s->n_queue += n;
    return MI_OK;
}

static mi_status grow(int32_t **p, int64_t n) {
    int32_t *q = realloc(*p, (size_t)(n > 0 ? n : 1) * sizeof *q);
    if (!q) return mi_err(MI_ERR_NOMEM, "out of memory for a step of %lld entries", (long long)n);
    *p = q;
    return MI_OK;
}

/* Pick the step's sequences and token counts (reserving their KV) and fill the inputs
 * (batch_fill_step). */
static mi_status plan_step(mi_batch *b, int64_t max_tokens, int *n_seqs, int64_t *n_tok, mi_batch_layout *L) {
    const int64_t n_ctx_train = mi_model_hparams(b->m)->n_ctx_train;
    int S = 0;
    int64_t T = 0, max_kv = 0, max_rows = 0;
    int64_t *take = b->take;
    for (int i = 0; i < b->n_seq_max; i++) {
        batch_seq *s = &b->seq[i];
        if (!s->used || s->n_queue == s->head || (max_tokens > 0 && T >= max_tokens)) continue;
        int64_t t = s->n_queue - s->head;
        if (max_tokens > 0 && t > max_tokens - T) t = max_tokens - T;
        const int64_t n_kv = s->kv.n_pos + t;
        mi_status st = n_kv > n_ctx_train
                           ? mi_err(MI_ERR_INVALID, "sequence %d: %lld positions exceed the trained context %lld", i,
                                    (long long)n_kv, (long long)n_ctx_train)
                           : kv_pool_reserve(&b->pool, &s->kv, n_kv);
        if (st != MI_OK) {   /* this sequence waits; the message stays with it */
            s->status = st;
            snprintf(s->why, sizeof s->why, "%s", mi_errmsg());
            mi_err_clear();
            continue;
        }
        take[S] = t;
        b->held[S] = n_kv - t;
        b->in_step[S++] = i;
        T += t;
        if (n_kv > max_kv) max_kv = n_kv;
        if (t > max_rows) max_rows = t;
    }
    *n_seqs = S;
    *n_tok = T;
    if (!S) return MI_OK;
    const int64_t B = b->pool.block, kv = batch_kv_bucket(max_kv, b->pool.n_blocks * B);
    const int64_t len = (int64_t)S * (MI_PAGED_FIELDS + (kv + B - 1) / B);
    if (T > b->cap_tok || len > b->cap_tab) {   /* the kept graph's Inputs point at the arrays about to move */
        graph_free(b->step_graph);
        b->step_graph = NULL;
    }
    if (T > b->cap_tok) {
        MI_TRY(grow(&b->ids, T));
        MI_TRY(grow(&b->pos, T));
        MI_TRY(grow(&b->rows, T));
        MI_TRY(grow(&b->solo, T));
        b->cap_tok = T;
    }
    if (len > b->cap_tab) {
        MI_TRY(grow(&b->tab, len));
        b->cap_tab = len;
    }
    batch_fill_step(b, S, max_kv, max_rows, false, L);
    return MI_OK;
}

/* the step failed: the sequences' reservations go back to what their caches hold */
static void unplan(mi_batch *b, int S) {
    for (int k = 0; k < S; k++) kv_pool_truncate(&b->pool, &b->seq[b->in_step[k]].kv, b->held[k]);
}

/* A sequence's next token from its row of logits or of top candidates. Each sequence draws
 * with its own sampler (its RNG and scratch), so rows draw on any thread in any order and the
 * tokens stay the same. */
static void draw_one(void *arg, int64_t i, int ith) {
    (void)ith;
    mi_batch *b = arg;
    const int k = b->draw[i];
    batch_seq *s = &b->seq[b->in_step[k]];
    if (b->out == OUT_TOP) {   /* values [K], then indices [K] (MI_OP_TOPK) */
        const float *y = b->top + (size_t)k * 2 * BATCH_TOP_K;
        if (s->greedy) {   /* the argmax: checked finite before the draws */
            s->next = (int32_t)y[BATCH_TOP_K];
            return;
        }
        s->next = mi_sampler_sample_top(&s->sampler, y, BATCH_TOP_K);
        return;
    }
    const int64_t V = mi_model_hparams(b->m)->n_vocab;
    const float *row = b->logits + (size_t)k * (size_t)V;
    s->next = s->greedy ? mi_sample_greedy(row, V) : mi_sampler_sample(&s->sampler, row);
}

/* The step's draws over the CPU backend's workers (idle between graph runs): a top-k draw
 * from logits scans the whole vocabulary, ~0.4 ms a row at 152k, which 64 rows a step would
 * spend on one thread. */
static void draw_rows(mi_batch *b, int n) {
    if (n > 1) threadpool_chunks(mi_backend_cpu_pool(b->cpu), draw_one, b, n);
    else if (n == 1) draw_one(b, 0, 0);
}

/* What the step's graph ends in (step_out), and for OUT_TOP each row's scale. A top-k step
 * serves sequences whose top_k fits BATCH_TOP_K: their candidates are the first top_k of the
 * row's BATCH_TOP_K (the same order), from which the sampler finishes the draw. */
static step_out step_output(mi_batch *b, int S, int64_t V) {
    if (!b->no_logits) return OUT_LOGITS;
    /* (where TOPK would run on the host, the logits cross anyway: the draws take them whole) */
    step_out out = OUT_IDS;
    for (int k = 0; k < S; k++) {
        const batch_seq *s = &b->seq[b->in_step[k]];
        const int top_k = s->sampler.p.top_k;
        b->top_scale[k] = s->greedy ? 1.0f : 1.0f / s->sampler.p.temp;   /* mi_sample_dist's 1 / temp */
        if (s->greedy) continue;
        /* (a temperature so small that 1 / temp is infinite makes 0 x inf: the whole row decides) */
        if (!b->top_here || top_k < 1 || top_k > BATCH_TOP_K || top_k >= V || !isfinite(b->top_scale[k]))
            return OUT_LOGITS;
        out = OUT_TOP;
    }
    return out;
}

/* One step of the sequences with tokens queued (a budget of max_tokens). may_ahead: an all-greedy
 * step whose sequences all drew may queue the step after it before its ids are read
 * (batch_ahead.c). */
static mi_status step_run(mi_batch *b, int64_t max_tokens, bool may_ahead, int *n_run) {
    *n_run = 0;
    const double t0 = mi_now_s();
    int S = 0;
    int64_t T = 0;
    mi_batch_layout L;
    mi_status st = plan_step(b, max_tokens, &S, &T, &L);
    if (st != MI_OK || S == 0) {
        if (st != MI_OK) unplan(b, S);
        return st;
    }
    const int64_t V = mi_model_hparams(b->m)->n_vocab;
    const step_out out = step_output(b, S, V);
    b->out = out;
    mi_build_args a = {.batch = &L, .ids = b->ids, .pos = b->pos, .n = T, .greedy = out == OUT_IDS,
                       .top_k = out == OUT_TOP ? BATCH_TOP_K : 0, .top_scale = b->top_scale};
    mi_graph *g = NULL;
    const step_key key = batch_step_key(b, &L, T, out);
    if (b->step_graph && batch_key_eq(&key, &b->key)) {
        g = b->step_graph;   /* passed, assigned and allocated already: only the Inputs' data moved */
        b->stats.graph_reuses++;
    } else {
        graph_free(b->step_graph);
        b->step_graph = NULL;
        st = model_build_graph(b->m, &b->pool.kv, &a, &g);
        if (st == MI_OK) st = mi_hook_graph_pass(b->hook_state, g);   /* device weights, fusions */
        if (st == MI_OK) b->stats.graph_builds++;
        if (st == MI_OK && !b->no_graph_reuse) {
            b->step_graph = g;
            b->key = key;
        }
    }
    const double t1 = mi_now_s();
    if (st == MI_OK) st = sched_compute(b->sched, g);
    batch_note_sched(b);
    /* the ids read behind the step, the queues advanced, and the step after it queued ahead
     * where it is exactly the next (batch_ahead.c); then the wait for the ids alone */
    const bool ahead = st == MI_OK && may_ahead && out == OUT_IDS && g == b->step_graph && b->ahead.mode != 0;
    bool advanced = false, queued = false;
    if (ahead) st = sched_read_begin(b->sched, g->output, b->next_ids, 0, (size_t)S * sizeof(int32_t));
    if (ahead && st == MI_OK) {
        for (int k = 0; k < S; k++) b->seq[b->in_step[k]].head += b->take[k];
        advanced = true;
        queued = batch_ahead_queue(b, g, S);
        st = sched_read_wait(b->sched, g->output);
    }
    const double t2 = mi_now_s();
    if (!ahead && st == MI_OK) {
        if (out == OUT_IDS) st = sched_read(b->sched, g->output, b->next_ids, 0, (size_t)S * sizeof(int32_t));
        else if (out == OUT_TOP) st = sched_read(b->sched, g->output, b->top, 0, (size_t)S * 2 * BATCH_TOP_K * sizeof(float));
        else st = sched_read(b->sched, g->output, b->logits, 0, (size_t)S * (size_t)V * sizeof(float));
    }
    for (int k = 0; st == MI_OK && out != OUT_LOGITS && k < S; k++) {   /* a greedy row's argmax, as ARGMAX's rule */
        const bool bad = out == OUT_IDS ? b->next_ids[k] < 0 || b->next_ids[k] >= V
                                        : b->seq[b->in_step[k]].greedy && !isfinite(b->top[(size_t)k * 2 * BATCH_TOP_K]);
        if (bad) st = mi_err(MI_ERR_INVALID, "sequence %d: its logits have no finite maximum", b->in_step[k]);
    }
    if (g == b->step_graph && st != MI_OK) b->step_graph = NULL;   /* a failed step's graph is not run again */
    if (g != b->step_graph) graph_free(g);
    if (st != MI_OK) {
        if (queued) batch_ahead_drop(b);
        for (int k = 0; advanced && k < S; k++) b->seq[b->in_step[k]].head -= b->take[k];
        unplan(b, S);
        return mi_err_ctx(st, "a step of %d sequences, %lld tokens", S, (long long)T);
    }
    const double t3 = mi_now_s();
    int n_draw = 0;
    for (int k = 0; k < S; k++) {
        batch_seq *s = &b->seq[b->in_step[k]];
        s->row = k;
        if (!advanced) s->head += b->take[k];
        s->has_logits = out == OUT_LOGITS;
        /* Draw only once the queue is empty: a prompt fed over several steps (a token budget)
         * must advance the sampler's RNG once, after its last token, as a session's caller
         * samples once after the whole prompt; else a seeded answer depends on the budget. */
        s->drawn = s->head == s->n_queue;
        if (s->drawn && out == OUT_IDS) s->next = b->next_ids[k];
        else if (s->drawn) b->draw[n_draw++] = k;
        s->ran = true;
    }
    draw_rows(b, n_draw);
    batch_note_step(b, t0, t1, t2, t3);
    *n_run = S;
    return MI_OK;
}

mi_status mi_batch_step(mi_batch *b, int64_t max_tokens, int *n_run) {
    *n_run = 0;
    for (int i = 0; i < b->n_seq_max; i++) {
        b->seq[i].ran = false;
        b->seq[i].status = MI_OK;
    }
    int n_ahead = 0;
    if (b->ahead.live) {   /* the step queued ahead: taken by the sequences fed what it drew */
        bool rest = true;
        MI_TRY(batch_ahead_take(b, max_tokens, &n_ahead, &rest));
        *n_run = n_ahead;
        if (!rest || (max_tokens > 0 && max_tokens <= n_ahead)) return MI_OK;
        if (max_tokens > 0) max_tokens -= n_ahead;
    }
    int n = 0;   /* the rest (new prompts, other tokens) in a step of its own, queued after it */
    const mi_status st = step_run(b, max_tokens, n_ahead == 0, &n);
    *n_run = n;
    if (n_ahead)   /* a sequence may have run in both */
        for (int i = *n_run = 0; i < b->n_seq_max; i++) *n_run += b->seq[i].ran;
    return st;
}

const float *mi_batch_seq_logits(const mi_batch *b, int id) {
    const batch_seq *s = seq_of(b, id);
    return s && s->ran && s->has_logits ? b->logits + (size_t)s->row * (size_t)mi_model_hparams(b->m)->n_vocab : NULL;
}

mi_status mi_batch_seq_next(const mi_batch *b, int id, int32_t *token) {
    const batch_seq *s = seq_of(b, id);
    if (!s || !s->ran) return mi_err(MI_ERR_INVALID, "sequence %d did not run in the last step", id);
    if (!s->drawn)
        return mi_err(MI_ERR_INVALID, "sequence %d still has %lld queued tokens: no next token drawn", id,
                      (long long)(s->n_queue - s->head));
    *token = s->next;
    return MI_OK;
}

mi_status mi_batch_seq_status(const mi_batch *b, int id) {
    const batch_seq *s = seq_of(b, id);
    if (!s) return mi_err(MI_ERR_INVALID, "no open sequence %d", id);
    if (s->status != MI_OK) return mi_err(s->status, "%s", s->why);
    return MI_OK;
}

int64_t mi_batch_seq_n_past(const mi_batch *b, int id) {
    const batch_seq *s = seq_of(b, id);
    if (!s) return -1;
    return s->ahead_row >= 0 ? b->ahead.held[s->ahead_row] : s->kv.n_pos;   /* the step queued ahead is not run yet */
}

int64_t mi_batch_seq_queued(const mi_batch *b, int id) {
    const batch_seq *s = seq_of(b, id);
    return s ? s->n_queue - s->head : -1;
}

const char *mi_batch_backend(const mi_batch *b) {
    return b->backends[0]->host_memory ? "cpu" : b->backends[0]->iface->name(b->backends[0]);
}

int64_t mi_batch_kv_free_blocks(const mi_batch *b) { return b->pool.n_free; }
size_t mi_batch_kv_bytes(const mi_batch *b) { return kv_cache_bytes(&b->pool.kv); }
bool mi_batch_kv_on_device(const mi_batch *b) { return b->pool.kv.be && !b->pool.kv.be->host_memory; }

mi_status mi_batch_device_memory(const mi_batch *b, size_t *used, size_t *total) {
    *used = *total = 0;
    mi_backend *dev = b->backends[0]->host_memory ? NULL : b->backends[0];
    if (!dev || !dev->iface->memory) return MI_OK;
    size_t avail = 0;
    MI_TRY(dev->iface->memory(dev, &avail, total));
    *used = avail < *total ? *total - avail : 0;
    return MI_OK;
}
int64_t mi_batch_kv_blocks(const mi_batch *b) { return b->pool.n_blocks; }
int64_t mi_batch_kv_tokens(const mi_batch *b) { return b->pool.n_blocks * b->pool.block; }
void mi_batch_get_stats(const mi_batch *b, mi_batch_stats *out) { *out = b->stats; }

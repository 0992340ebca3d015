/* A batch step's inputs and bookkeeping, shared by the step (batch.c) and the step queued ahead
 * (batch_ahead.c): the bucket of the longest sequence, the Inputs of a planned step, the key
 * that says whether the kept graph runs it, the stats, and host memory for the ids read back. */
#include "batch_internal.h"
#include "../backend/hooks.h"
#include "../core/mi_progress.h"
#include <stdlib.h>
#include <string.h>

/* The bucket of a step's longest sequence (n_kv positions): a power of two up to 256, then a
 * multiple of 256, at most the pool. A decode step keeps its graph (and on a device its
 * captured launches: the paged attention's splits come from this bound) until its longest
 * sequence crosses a bucket, every 256 positions at most; the sequences table is padded to
 * it, so its size does not move as a sequence takes a block. */
int64_t batch_kv_bucket(int64_t n_kv, int64_t pool) {
    int64_t k = 16;
    while (k < n_kv && k < 256) k *= 2;
    if (k < n_kv) k = (n_kv + 255) / 256 * 256;
    return k < pool ? k : pool > n_kv ? pool : n_kv;
}

/* The sequences table: S entries of MI_PAGED_FIELDS, then S block tables of ceil(kv / block)
 * entries each (the bucket's), sequence k's at a fixed offset; entries past a sequence's blocks
 * hold -1 and are never read (each reader takes ceil(n_kv / block) of them). The arrays hold
 * the step (plan_step grew them). */
void batch_fill_step(mi_batch *b, int S, int64_t max_kv, int64_t max_rows, bool one_each, mi_batch_layout *L) {
    const int64_t B = b->pool.block, kv = batch_kv_bucket(max_kv, b->pool.n_blocks * B), per_seq = (kv + B - 1) / B;
    int64_t r = 0;
    for (int k = 0; k < S; k++) {
        batch_seq *s = &b->seq[b->in_step[k]];
        const int64_t t = one_each ? 1 : b->take[k], n_past = s->kv.n_pos - t, nblk = (s->kv.n_pos + B - 1) / B;
        const int64_t off = (int64_t)S * MI_PAGED_FIELDS + k * per_seq;
        int32_t *f = b->tab + (size_t)k * MI_PAGED_FIELDS;
        f[MI_PAGED_FIRST] = (int32_t)r;
        f[MI_PAGED_ROWS] = (int32_t)t;
        f[MI_PAGED_NPAST] = (int32_t)n_past;
        f[MI_PAGED_TABLE] = (int32_t)off;
        memcpy(b->tab + off, s->kv.blocks, (size_t)nblk * sizeof(int32_t));
        for (int64_t j = nblk; j < per_seq; j++) b->tab[off + j] = -1;
        for (int64_t j = 0; j < t; j++, r++) {
            b->ids[r] = one_each ? 0 : s->queue[s->head + j];
            b->pos[r] = (int32_t)(n_past + j);
            b->rows[r] = (int32_t)kv_seq_row(&b->pool, &s->kv, n_past + j);
            b->solo[r] = (int32_t)t;
        }
        b->last[k] = (int32_t)(r - 1);
    }
    *L = (mi_batch_layout){.rows = b->rows, .seqs = b->tab, .solo = b->solo, .last = b->last, .ones = b->ones,
                           .n_seqs = S, .seqs_len = (int64_t)S * (MI_PAGED_FIELDS + per_seq), .block = B,
                           .max_kv = kv, .max_rows = max_rows};
}

step_key batch_step_key(const mi_batch *b, const mi_batch_layout *L, int64_t n_tok, step_out out) {
    return (step_key){.n_seqs = L->n_seqs, .n_tok = n_tok, .kv = L->max_kv, .seqs_len = L->seqs_len,
                      .max_rows = L->max_rows, .out = out,
                      .epoch = b->no_graph_reuse ? 0 : mi_hook_graph_epoch(b->hook_state)};
}

bool batch_key_eq(const step_key *x, const step_key *y) {
    return x->n_seqs == y->n_seqs && x->n_tok == y->n_tok && x->kv == y->kv && x->seqs_len == y->seqs_len &&
           x->max_rows == y->max_rows && x->out == y->out && x->epoch == y->epoch;
}

/* the scheduler's split counts and host times of its last compute, into the batch's */
void batch_note_sched(mi_batch *b) {
    const mi_sched_stats *ss = sched_stats(b->sched);
    b->stats.s_split_begin += ss->s_split_begin;
    b->stats.s_nodes += ss->s_nodes;
    b->stats.s_split_end += ss->s_split_end;
    b->stats.splits += ss->n_splits;
    b->stats.copies += ss->n_copies;
}

void batch_note_step(mi_batch *b, double t0, double t1, double t2, double t3) {
    b->stats.steps++;
    b->stats.s_prepare += t1 - t0;
    b->stats.s_compute += t2 - t1;
    b->stats.s_read += t3 - t2;
    b->stats.s_draw += mi_now_s() - t3;
}

void *batch_host_alloc(mi_batch *b, size_t n, bool *pinned) {
    mi_backend *be = b->backends[0];
    void *p = be->iface->host_alloc ? be->iface->host_alloc(be, n) : NULL;
    *pinned = p != NULL;
    return p ? p : malloc(n);
}

void batch_host_free(mi_batch *b, void *p, bool pinned) {
    if (p && pinned) b->backends[0]->iface->host_free(b->backends[0], p);
    else free(p);
}


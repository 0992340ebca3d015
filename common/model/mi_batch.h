/* Many sequences in one step (phase 8b, docs/PHASE8B.md): sequences share a model and a pool
 * of KV blocks; each step runs the queued tokens of every sequence as one graph (one GEMM over
 * all rows), and each sequence's logits are what it would get alone. Everything returns
 * mi_status; messages via mi_errmsg(). This version runs on the CPU backend. */
#ifndef MI_BATCH_H
#define MI_BATCH_H
#include <stdint.h>
#include "mi.h"
#include "../sampler/sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_batch mi_batch;

typedef struct {
    int n_seq_max;        /* sequences at once, 1..4096 (default 64) */
    int64_t kv_tokens;    /* positions the KV pool holds over all sequences (default 4096) */
    int64_t block;        /* positions a KV block (default 16) */
    mi_type kv_type;      /* MI_TYPE_F16 (default) or MI_TYPE_F32 */
    int n_threads;        /* CPU threads; <= 0: all cores */
    const char *backend;  /* "cpu" or "auto" (the CPU); "cuda" is refused until phase 8b's kernels */
} mi_batch_params;
void mi_batch_params_default(mi_batch_params *p);

mi_status mi_batch_new(mi_model *m, const mi_batch_params *p, mi_batch **out);
void mi_batch_free(mi_batch *b);

/* A new sequence; sp NULL or sp->temp <= 0: greedy. *id in 0 .. n_seq_max-1. MI_ERR_NOMEM when
 * n_seq_max are open. */
mi_status mi_batch_seq_new(mi_batch *b, const mi_sampler_params *sp, int *id);
/* Its KV blocks back to the pool at once; the id may be handed out again. */
void mi_batch_seq_free(mi_batch *b, int id);
/* Queue n tokens for the sequence (a prompt, or the next token to feed). */
mi_status mi_batch_seq_add(mi_batch *b, int id, const int32_t *tokens, int64_t n);

/* One step: every sequence with queued tokens takes up to max_tokens of them in all (its whole
 * queue while the budget lasts, sequences in id order; <= 0: no limit). A sequence whose KV
 * cannot grow (pool full, or past n_ctx_train) is left out with its own error
 * (mi_batch_seq_status) and its queue kept; the others run. *n_run: the sequences that ran. */
mi_status mi_batch_step(mi_batch *b, int64_t max_tokens, int *n_run);

/* After a step the sequence ran in: its last token's logits [n_vocab], and the next token
 * drawn by its own sampler (greedy: the argmax). NULL / MI_ERR_INVALID if it did not run.
 * The next token is drawn only when the step took the sequence's last queued token (a prompt
 * split over steps by the budget draws once, at its end, so a seeded sampler's tokens do not
 * depend on the budget); before that _next is MI_ERR_INVALID. */
const float *mi_batch_seq_logits(const mi_batch *b, int id);
mi_status mi_batch_seq_next(const mi_batch *b, int id, int32_t *token);
/* The error that kept the sequence out of the last step (MI_OK if it ran or had nothing). */
mi_status mi_batch_seq_status(const mi_batch *b, int id);
int64_t mi_batch_seq_n_past(const mi_batch *b, int id);
/* Tokens in the sequence's queue (-1: no such sequence). */
int64_t mi_batch_seq_queued(const mi_batch *b, int id);
/* KV blocks free in the pool, and its size. */
int64_t mi_batch_kv_free_blocks(const mi_batch *b);
int64_t mi_batch_kv_blocks(const mi_batch *b);

#ifdef __cplusplus
}
#endif
#endif

/* Many sequences in one step (phase 8b, docs/PHASE8B.md): sequences share a model and a pool
 * of KV blocks; each step runs the queued tokens of every sequence as one graph (one GEMM over
 * all rows), and each sequence's logits are what it would get alone. Everything returns
 * mi_status; messages via mi_errmsg(). The backends are chosen as a session's are (the device
 * for what it runs, the CPU for the rest; the KV pool lives where the paged KV ops run: on CUDA
 * from phase 8b on). */
#ifndef MI_BATCH_H
#define MI_BATCH_H
#include <stddef.h>
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
    const char *backend;  /* "cpu", "cuda" or "auto" (default), as mi_session_params */
    bool no_logits;       /* the caller reads tokens only, never logits: a step whose sequences
                             are all greedy ends in the argmax, one whose sequences are greedy or
                             sample with a top_k of 1..64 ends in each row's 64 best candidates,
                             from which each sampler finishes its draw (the token it draws from
                             the whole row); both run where the logits are (on a device, S ids or
                             S x 128 floats cross back instead of S x n_vocab floats). Other
                             steps, and every step when false (the default), return logits.
                             mi_batch_seq_logits is NULL after a step without them. */
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

/* After a step the sequence ran in: its last token's logits [n_vocab] (NULL after a step
 * without logits: no_logits), and the next token drawn by its own sampler (greedy: the argmax). NULL /
 * MI_ERR_INVALID if it did not run. The next token is drawn only when the step took the
 * sequence's last queued token (a prompt split over steps by the budget draws once, at its end,
 * so a seeded sampler's tokens do not depend on the budget); before that _next is
 * MI_ERR_INVALID. */
const float *mi_batch_seq_logits(const mi_batch *b, int id);
mi_status mi_batch_seq_next(const mi_batch *b, int id, int32_t *token);
/* The error that kept the sequence out of the last step (MI_OK if it ran or had nothing). */
mi_status mi_batch_seq_status(const mi_batch *b, int id);
int64_t mi_batch_seq_n_past(const mi_batch *b, int id);
/* Tokens in the sequence's queue (-1: no such sequence). */
int64_t mi_batch_seq_queued(const mi_batch *b, int id);
/* "cuda" when a device runs the batch's work, else "cpu". */
const char *mi_batch_backend(const mi_batch *b);
/* KV blocks free in the pool, and its size. */
int64_t mi_batch_kv_free_blocks(const mi_batch *b);
int64_t mi_batch_kv_blocks(const mi_batch *b);
/* Positions the pool holds (its blocks x the block size). */
int64_t mi_batch_kv_tokens(const mi_batch *b);
/* Bytes of the KV pool (K and V of every layer), and whether it lives on the device. */
size_t mi_batch_kv_bytes(const mi_batch *b);
bool mi_batch_kv_on_device(const mi_batch *b);
/* Device memory in use now (*used: the device's total less what a new allocation could take,
 * so other processes count too; *total: its size) where the batch runs on a device; 0 and 0
 * on the CPU. */
mi_status mi_batch_device_memory(const mi_batch *b, size_t *used, size_t *total);

/* Steps that ran, and how their graphs came: built (model build and the hooks' pass), or the
 * last step's graph run again (same sequences, rows, output, hook epoch and bucket of the
 * longest sequence; docs/PHASE8B.md). MINFER_NO_GRAPH_REUSE=1: every step builds. Where the
 * steps' time went, in seconds over them all: prepare (the plan, the graph built or reused),
 * compute (the scheduler's run: on a device the launches or the graph's replay, on the CPU the
 * whole computation), read (the output read back: on a device, the wait for the step), draw;
 * and compute's parts (mi_sched_stats): the backends' split set-up, issuing the nodes, their
 * split ends (a captured step's launch); and the scheduler's splits and cross-backend copies,
 * summed over the steps (a step on one device is one split with no copies; more means part of
 * it ran on another backend, the CPU); and the steps queued ahead of the host's read
 * (MINFER_STEP_AHEAD, docs/PHASE8B.md) that the next step took (ahead_steps; ahead_partial of
 * them with some of their rows given back: a sequence freed, fed another token than it drew, or
 * past the step's token budget), those given up whole (every row given back, or the dispatch's
 * items switched since), and those the backend refused to queue (ahead_failed: then the step
 * is read first, as without the setting). */
typedef struct {
    int64_t steps, graph_builds, graph_reuses, splits, copies;
    int64_t ahead_steps, ahead_partial, ahead_dropped, ahead_failed;
    double s_prepare, s_compute, s_read, s_draw;
    double s_split_begin, s_nodes, s_split_end;
} mi_batch_stats;
void mi_batch_get_stats(const mi_batch *b, mi_batch_stats *out);

#ifdef __cplusplus
}
#endif
#endif

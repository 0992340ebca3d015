/* The batch's state, shared by batch.c (the API, the plan, the step), batch_inputs.c (a step's
 * Inputs, key and stats) and batch_ahead.c (the step queued ahead of the host's read). Internal
 * to common/model. */
#ifndef MI_BATCH_INTERNAL_H
#define MI_BATCH_INTERNAL_H
#include "mi_batch.h"
#include "kv_pool.h"
#include "../backend/sched.h"

#define BATCH_MAX_SEQS 4096
#define BATCH_TOP_K 64   /* candidates a row in a top-k step: the largest top_k such a step serves */

/* What a step's graph ends in: each row's argmax (every sequence greedy), each row's
 * BATCH_TOP_K best candidates (every sequence greedy or sampling with a top_k up to it), or the
 * logits. The first two leave the logits where they were computed (no_logits). */
typedef enum { OUT_LOGITS, OUT_IDS, OUT_TOP } step_out;

/* What a step's graph is built from besides Input data: two steps with equal keys have the
 * same nodes, shapes and params (kv: the longest sequence's positions rounded up to its
 * bucket, ATTN_PAGED's p[6]; the sequences table is sized from it). */
typedef struct {
    int n_seqs;
    int64_t n_tok, kv, seqs_len, max_rows;
    step_out out;
    uint64_t epoch;
} step_key;

typedef struct {
    bool used, ran, greedy, has_logits;
    bool drawn;                  /* the last step drew its next token (its queue ran empty) */
    mi_kv_seq kv;
    int32_t *queue;              /* tokens waiting: [head, n_queue) */
    int64_t head, n_queue, cap;
    mi_sampler sampler;
    int32_t next;
    int row;                     /* its row of the last step's logits */
    int ahead_row;               /* its row of the step queued ahead (batch_ahead.c), -1: none */
    mi_status status;            /* what kept it out of the last step */
    char why[256];
} batch_seq;

struct mi_batch {
    mi_model *m;
    mi_backend *backends[2];     /* priority order: the device (if any), then the CPU */
    int n_backends;
    mi_backend *cpu;
    void *hook_state;            /* a phase's per-session state (hooks.h) */
    mi_sched *sched;
    mi_kv_pool pool;
    int n_seq_max;
    bool no_logits;              /* steps return ids or top candidates where they can (mi_batch_params) */
    bool top_here;               /* TOPK runs where the logits are (model_topk_where_logits) */
    step_out out;                /* what the last step's graph ended in */
    batch_seq *seq;
    float *logits;               /* [n_seq_max][n_vocab]: the last step's logits, one row a sequence that ran */
    int32_t *ids, *pos, *rows, *solo, *tab, *last, *ones;   /* the step's inputs */
    int32_t *next_ids;           /* [n_seq_max]: a step's argmax ids (OUT_IDS) */
    float *top;                  /* [n_seq_max][2 BATCH_TOP_K]: a step's candidates (OUT_TOP) */
    float *top_scale;            /* [n_seq_max]: each row's 1 / temperature for them (1: greedy) */
    int64_t cap_tok, cap_tab;
    int *in_step;                /* the sequences of the step, in row order */
    int *draw;                   /* the step's rows whose sequence draws from its logits */
    int64_t *take, *held;        /* per step sequence: its tokens, and the positions it held before */
    /* The last step's graph, built, passed, assigned and allocated, run again by a step of the
     * same key (its Inputs read the arrays above, which do not move while it is kept). NULL:
     * none yet, or MINFER_NO_GRAPH_REUSE. */
    mi_graph *step_graph;
    step_key key;
    bool no_graph_reuse;
    mi_batch_stats stats;
    bool next_ids_pinned;        /* next_ids from the device backend's host_alloc */
    /* The step queued ahead (batch_ahead.c): its sequences in row order (-1: freed since), the
     * positions each held before it, and the page-locked ids it reads back. mode:
     * MINFER_STEP_AHEAD (0 off; 1 where the backend reads behind queued work; 2 on any backend) */
    struct {
        bool live, ids_pinned;
        int mode, S;
        int *seqs;
        int64_t *held;
        int32_t *ids;
    } ahead;
};

/* batch_inputs.c */
/* The Inputs of the step of sequences in_step[0 .. S), each taking take[k] tokens (one each
 * where one_each), reserved already: ids from their queues, or zeros where one_each (the device
 * fills them: batch_ahead.c) */
void batch_fill_step(mi_batch *b, int S, int64_t max_kv, int64_t max_rows, bool one_each, mi_batch_layout *L);
int64_t batch_kv_bucket(int64_t n_kv, int64_t pool);
bool batch_key_eq(const step_key *x, const step_key *y);
step_key batch_step_key(const mi_batch *b, const mi_batch_layout *L, int64_t n_tok, step_out out);
/* the scheduler's split counts and host times of its last compute, into the batch's stats */
void batch_note_sched(mi_batch *b);
/* a step taken: its host times from t0 (prepare to t1, compute to t2, read to t3, draw to now) */
void batch_note_step(mi_batch *b, double t0, double t1, double t2, double t3);
/* page-locked host memory from the device backend where it gives some, else malloc */
void *batch_host_alloc(mi_batch *b, size_t n, bool *pinned);
void batch_host_free(mi_batch *b, void *p, bool pinned);

/* batch_ahead.c */
mi_status batch_ahead_init(mi_batch *b);
void batch_ahead_free(mi_batch *b);
/* After the step of in_step[0 .. S) (graph g, ending in their argmax) was queued, the read of
 * its ids queued behind it and their queues advanced: queue the next step, each of them fed the
 * token this one draws (copied on the device), when that is exactly the step that comes next.
 * True when it was queued. */
bool batch_ahead_queue(mi_batch *b, mi_graph *g, int S);
/* At a step (budget max_tokens) while one is queued ahead: the sequences fed the token it took
 * count it as run (*n_run of them, their next tokens drawn) and the others' positions in it go
 * back; when every one of them was and nothing else waits, the step after it is queued before
 * its ids are read. *rest: some sequence still has tokens queued, for a step of its own. */
mi_status batch_ahead_take(mi_batch *b, int64_t max_tokens, int *n_run, bool *rest);
/* The step queued ahead given up: its positions back (its work, queued, still runs: what comes
 * after it is ordered after it) */
void batch_ahead_drop(mi_batch *b);
/* sequence id freed: its row of the step queued ahead is dropped */
void batch_ahead_forget_seq(mi_batch *b, int id);

#endif

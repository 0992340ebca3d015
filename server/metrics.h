/* Serving counters (engine.c updates them under its lock after each step) and their
 * Prometheus text form for GET /metrics. The tokens-per-second gauge is a 10 s window of
 * per-second buckets, so it falls to 0 when the server goes idle instead of keeping the
 * rate of its last burst. */
#ifndef SRV_METRICS_H
#define SRV_METRICS_H
#include <stdint.h>

#define SRV_RATE_WINDOW 10   /* seconds the tokens/s gauge averages over */
#define SRV_RATE_BUCKETS 16  /* one a second, > SRV_RATE_WINDOW so the current second never wraps over the window */

/* How requests ended: the index of srv_metrics.finished */
enum { SRV_END_STOP, SRV_END_LENGTH, SRV_END_FAILED, SRV_END_CANCELLED, SRV_END_COUNT };

typedef struct {
    int64_t queue;            /* requests waiting for a sequence */
    int64_t running;          /* sequences in the batch */
    int64_t kv_used, kv_total;   /* KV blocks in use, in the pool */
    int64_t parallel, queue_max, n_ctx, block;
    uint64_t gen_tokens;      /* completion tokens generated */
    uint64_t prompt_tokens;   /* prompt tokens run through the model */
    uint64_t steps;           /* batch steps */
    uint64_t finished[SRV_END_COUNT];
    uint64_t rejected;        /* 503: queue full */
    int64_t bucket_sec[SRV_RATE_BUCKETS];
    uint64_t bucket_tok[SRV_RATE_BUCKETS];
} srv_metrics;

/* n generated tokens at time now (seconds, CLOCK_MONOTONIC) */
void metrics_add_tokens(srv_metrics *m, uint64_t n, double now);
/* generated tokens per second over the last SRV_RATE_WINDOW whole seconds before now */
double metrics_rate(const srv_metrics *m, double now);
/* Prometheus text exposition of a snapshot (malloc'd, NUL-terminated; NULL: out of memory) */
char *metrics_format(const srv_metrics *m, double now, const char *model);

#endif

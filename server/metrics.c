/* Serving metrics as Prometheus text (exposition format 0.0.4): one HELP and TYPE line per
 * family, counters end in _total. The engine owns the numbers; this file only keeps the
 * tokens/s buckets and prints. */
#include "server/metrics.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void metrics_add_tokens(srv_metrics *m, uint64_t n, double now) {
    const int64_t sec = (int64_t)now;
    const int i = (int)(sec % SRV_RATE_BUCKETS);
    if (m->bucket_sec[i] != sec) {   /* a bucket from an older lap of the ring starts over */
        m->bucket_sec[i] = sec;
        m->bucket_tok[i] = 0;
    }
    m->bucket_tok[i] += n;
}

double metrics_rate(const srv_metrics *m, double now) {
    const int64_t sec = (int64_t)now;
    uint64_t sum = 0;
    /* whole seconds only: the current one is still filling */
    for (int i = 0; i < SRV_RATE_BUCKETS; i++)
        if (m->bucket_sec[i] < sec && m->bucket_sec[i] >= sec - SRV_RATE_WINDOW) sum += m->bucket_tok[i];
    return (double)sum / SRV_RATE_WINDOW;
}

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) { b->oom = 1; return; }
        if ((size_t)n < b->cap - b->len) { b->len += (size_t)n; return; }
        size_t cap = b->cap * 2 + (size_t)n;
        char *q = realloc(b->p, cap);
        if (!q) { b->oom = 1; return; }
        b->p = q;
        b->cap = cap;
    }
}

static void family(sbuf *b, const char *name, const char *type, const char *help) {
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *metrics_format(const srv_metrics *m, double now, const char *model) {
    sbuf b = {malloc(4096), 0, 4096, 0};
    if (!b.p) return NULL;
    b.p[0] = 0;
    family(&b, "minfer_tokens_per_second", "gauge", "Completion tokens generated per second over the last 10 s.");
    put(&b, "minfer_tokens_per_second %.3f\n", metrics_rate(m, now));
    family(&b, "minfer_generated_tokens_total", "counter", "Completion tokens generated.");
    put(&b, "minfer_generated_tokens_total %llu\n", (unsigned long long)m->gen_tokens);
    family(&b, "minfer_prompt_tokens_total", "counter", "Prompt tokens run through the model.");
    put(&b, "minfer_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
    family(&b, "minfer_steps_total", "counter", "Batch steps run.");
    put(&b, "minfer_steps_total %llu\n", (unsigned long long)m->steps);
    family(&b, "minfer_queue_length", "gauge", "Requests waiting for a sequence.");
    put(&b, "minfer_queue_length %lld\n", (long long)m->queue);
    family(&b, "minfer_queue_limit", "gauge", "Waiting requests beyond which a request is answered 503.");
    put(&b, "minfer_queue_limit %lld\n", (long long)m->queue_max);
    family(&b, "minfer_running_sequences", "gauge", "Sequences in the running batch.");
    put(&b, "minfer_running_sequences %lld\n", (long long)m->running);
    family(&b, "minfer_parallel_sequences", "gauge", "Sequences the batch runs at once (--parallel).");
    put(&b, "minfer_parallel_sequences %lld\n", (long long)m->parallel);
    family(&b, "minfer_kv_blocks_used", "gauge", "KV cache blocks held by sequences.");
    put(&b, "minfer_kv_blocks_used %lld\n", (long long)m->kv_used);
    family(&b, "minfer_kv_blocks_total", "gauge", "KV cache blocks in the pool.");
    put(&b, "minfer_kv_blocks_total %lld\n", (long long)m->kv_total);
    family(&b, "minfer_kv_block_positions", "gauge", "Token positions a KV block holds.");
    put(&b, "minfer_kv_block_positions %lld\n", (long long)m->block);
    family(&b, "minfer_requests_total", "counter", "Requests that reached the engine, by how they ended.");
    static const char *const why[SRV_END_COUNT] = {"stop", "length", "error", "cancelled"};
    for (int i = 0; i < SRV_END_COUNT; i++)
        put(&b, "minfer_requests_total{finish=\"%s\"} %llu\n", why[i], (unsigned long long)m->finished[i]);
    family(&b, "minfer_requests_rejected_total", "counter", "Requests answered 503 because the queue was full.");
    put(&b, "minfer_requests_rejected_total %llu\n", (unsigned long long)m->rejected);
    family(&b, "minfer_info", "gauge", "The served model and context (labels); always 1.");
    /* the model id is a file name: keep label-safe characters only */
    char safe[128];
    size_t k = 0;
    for (const char *c = model; *c && k + 1 < sizeof safe; c++) safe[k++] = (*c == '"' || *c == '\\' || *c == '\n') ? '_' : *c;
    safe[k] = 0;
    put(&b, "minfer_info{model=\"%s\",n_ctx=\"%lld\"} 1\n", safe, (long long)m->n_ctx);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

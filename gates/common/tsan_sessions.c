/* Driven by sh_tsan.sh under ThreadSanitizer: (1) the thread pool under load: many tasks
 * of varied chunk counts back to back, every chunk run exactly once; (2) sessions on one
 * shared model decoding concurrently, each thread's logits equal to a lone session's.
 * TSan reports any data race; this program checks the results.
 * Usage: tsan_sessions MODEL.gguf */
#include "common/backend/threadpool.h"
#include "common/model/mi.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POOL_TASKS 20000
#define MAX_CHUNKS 64
#define N_SESS 3
#define N_PROMPT 8
#define N_GEN 6

static _Atomic int g_hits[MAX_CHUNKS];
static int g_plain[MAX_CHUNKS];   /* written without atomics: each chunk by its one runner */

static void chunk_fn(void *arg, int64_t c, int ith) {
    (void)ith;
    int task = *(const int *)arg;
    g_plain[c] = task;
    atomic_fetch_add_explicit(&g_hits[c], 1, memory_order_relaxed);
}

static int pool_stress(void) {
    mi_threadpool *tp = NULL;
    if (threadpool_new(4, &tp) != MI_OK) {
        fprintf(stderr, "threadpool_new: %s\n", mi_errmsg());
        return 1;
    }
    int bad = 0;
    for (int t = 0; t < POOL_TASKS && !bad; t++) {
        int n = 1 + (int)((unsigned)t * 2654435761u % MAX_CHUNKS);
        for (int c = 0; c < n; c++) atomic_store_explicit(&g_hits[c], 0, memory_order_relaxed);
        threadpool_chunks(tp, chunk_fn, &t, n);
        for (int c = 0; c < n && !bad; c++)
            if (atomic_load(&g_hits[c]) != 1 || g_plain[c] != t) {
                fprintf(stderr, "pool: task %d chunk %d ran %d time(s)\n", t, c, atomic_load(&g_hits[c]));
                bad = 1;
            }
    }
    threadpool_free(tp);
    return bad;
}

typedef struct {
    mi_model *m;
    float *logits;    /* [N_GEN * n_vocab]: the last row after each step */
    int64_t n_vocab;
    int rc;
} job;

static void *decode_job(void *p) {
    job *j = p;
    mi_session_params sp;
    mi_session_params_default(&sp);
    sp.backend = "cpu";
    sp.n_threads = 2;
    sp.n_ctx = 64;
    mi_session *s = NULL;
    if (mi_session_new(j->m, &sp, &s) != MI_OK) {
        fprintf(stderr, "session: %s\n", mi_errmsg());
        j->rc = 1;
        return NULL;
    }
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = (int32_t)((7 * i + 3) % j->n_vocab);
    mi_status st = mi_session_decode(s, prompt, N_PROMPT, false);
    for (int k = 0; k < N_GEN && st == MI_OK; k++) {
        const float *l = mi_logits(s, NULL);
        memcpy(j->logits + (size_t)k * (size_t)j->n_vocab, l, (size_t)j->n_vocab * sizeof(float));
        int32_t best = 0;
        for (int64_t v = 1; v < j->n_vocab; v++)
            if (l[v] > l[best]) best = (int32_t)v;
        st = mi_session_decode(s, &best, 1, false);
    }
    if (st != MI_OK) {
        fprintf(stderr, "decode: %s\n", mi_errmsg());
        j->rc = 1;
    }
    mi_session_free(s);
    return NULL;
}

static int shared_sessions(const char *path) {
    mi_model *m = NULL;
    if (mi_model_load(path, &m) != MI_OK) {
        fprintf(stderr, "load %s: %s\n", path, mi_errmsg());
        return 1;
    }
    const int64_t V = mi_model_hparams(m)->n_vocab;
    job jobs[N_SESS + 1];
    for (int i = 0; i <= N_SESS; i++) {
        jobs[i] = (job){m, calloc((size_t)(N_GEN * V), sizeof(float)), V, 0};
        if (!jobs[i].logits) return 1;
    }
    decode_job(&jobs[N_SESS]);   /* alone: the reference */
    pthread_t th[N_SESS];
    for (int i = 0; i < N_SESS; i++) pthread_create(&th[i], NULL, decode_job, &jobs[i]);
    for (int i = 0; i < N_SESS; i++) pthread_join(th[i], NULL);
    int bad = jobs[N_SESS].rc;
    for (int i = 0; i < N_SESS; i++) {
        bad |= jobs[i].rc;
        if (!jobs[i].rc && memcmp(jobs[i].logits, jobs[N_SESS].logits, (size_t)(N_GEN * V) * sizeof(float))) {
            fprintf(stderr, "session %d: logits differ from the lone session's\n", i);
            bad = 1;
        }
    }
    for (int i = 0; i <= N_SESS; i++) free(jobs[i].logits);
    mi_model_free(m);
    return bad;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: tsan_sessions MODEL.gguf\n");
        return 2;
    }
    int rc = pool_stress();
    printf("thread pool: %s\n", rc ? "FAIL" : "ok");
    int rc2 = shared_sessions(argv[1]);
    printf("shared sessions: %s\n", rc2 ? "FAIL" : "ok");
    return rc || rc2;
}

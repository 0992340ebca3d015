/* Thread pool behind the CPU backend: a generation counter publishes each task; workers
 * spin on it for a bounded time (the next op usually follows within microseconds), then
 * sleep on a condition variable so idle threads never burn a shared core. */
#include "threadpool.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Spin iterations before sleeping (~50-200 us); MINFER_SPIN overrides. */
#define SPIN_DEFAULT 20000

typedef struct {
    struct mi_threadpool *tp;
    int ith;
    pthread_t th;
} worker;

struct mi_threadpool {
    int n;
    worker *w;
    int spin;
    /* task publication */
    mi_task_fn fn;
    void *arg;
    int n_active;               /* threads taking part in the current task */
    atomic_uint gen;
    atomic_int n_done;
    atomic_int stop;
    pthread_mutex_t mtx;
    pthread_cond_t cv_task, cv_done;
};

static void *worker_main(void *p) {
    worker *w = p;
    mi_threadpool *tp = w->tp;
    unsigned last = atomic_load_explicit(&tp->gen, memory_order_acquire);
    for (;;) {
        unsigned g;
        int i = 0;
        while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == last && i < tp->spin) {
            cpu_relax();
            i++;
        }
        if (g == last) {
            pthread_mutex_lock(&tp->mtx);
            while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == last && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv_task, &tp->mtx);
            pthread_mutex_unlock(&tp->mtx);
        }
        if (atomic_load(&tp->stop)) break;
        last = g;
        if (w->ith < tp->n_active) {
            tp->fn(tp->arg, w->ith, tp->n_active);
            if (atomic_fetch_add_explicit(&tp->n_done, 1, memory_order_acq_rel) + 1 == tp->n_active - 1) {
                pthread_mutex_lock(&tp->mtx);
                pthread_cond_signal(&tp->cv_done);
                pthread_mutex_unlock(&tp->mtx);
            }
        }
    }
    return NULL;
}

mi_status threadpool_new(int n_threads, mi_threadpool **out) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    mi_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return mi_err(MI_ERR_NOMEM, "threadpool: out of memory");
    tp->n = n_threads;
    tp->spin = SPIN_DEFAULT;
    const char *e = getenv("MINFER_SPIN");
    if (e) tp->spin = atoi(e);
    pthread_mutex_init(&tp->mtx, NULL);
    pthread_cond_init(&tp->cv_task, NULL);
    pthread_cond_init(&tp->cv_done, NULL);
    tp->w = calloc((size_t)n_threads, sizeof *tp->w);
    if (!tp->w) {
        free(tp);
        return mi_err(MI_ERR_NOMEM, "threadpool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        tp->w[i].tp = tp;
        tp->w[i].ith = i;
        int rc = pthread_create(&tp->w[i].th, NULL, worker_main, &tp->w[i]);
        if (rc != 0) {
            tp->n = i;   /* join the ones started */
            threadpool_free(tp);
            return mi_err(MI_ERR_INTERNAL, "threadpool: pthread_create failed (%s)", strerror(rc));
        }
    }
    *out = tp;
    return MI_OK;
}

void threadpool_free(mi_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mtx);
    atomic_store(&tp->stop, 1);
    atomic_fetch_add(&tp->gen, 1);
    pthread_cond_broadcast(&tp->cv_task);
    pthread_mutex_unlock(&tp->mtx);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->w[i].th, NULL);
    pthread_mutex_destroy(&tp->mtx);
    pthread_cond_destroy(&tp->cv_task);
    pthread_cond_destroy(&tp->cv_done);
    free(tp->w);
    free(tp);
}

int threadpool_size(const mi_threadpool *tp) { return tp->n; }

void threadpool_run(mi_threadpool *tp, mi_task_fn fn, void *arg, int n) {
    if (n < 1 || n > tp->n) n = tp->n;
    if (n == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    tp->n_active = n;
    atomic_store_explicit(&tp->n_done, 0, memory_order_relaxed);
    pthread_mutex_lock(&tp->mtx);
    atomic_fetch_add_explicit(&tp->gen, 1, memory_order_release);
    pthread_cond_broadcast(&tp->cv_task);
    pthread_mutex_unlock(&tp->mtx);
    fn(arg, 0, n);
    int i = 0;
    while (atomic_load_explicit(&tp->n_done, memory_order_acquire) < n - 1 && i < tp->spin) {
        cpu_relax();
        i++;
    }
    if (atomic_load_explicit(&tp->n_done, memory_order_acquire) < n - 1) {
        pthread_mutex_lock(&tp->mtx);
        while (atomic_load_explicit(&tp->n_done, memory_order_acquire) < n - 1)
            pthread_cond_wait(&tp->cv_done, &tp->mtx);
        pthread_mutex_unlock(&tp->mtx);
    }
}

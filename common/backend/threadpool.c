/* Chunk-claiming thread pool (see threadpool.h). State word = (generation << 32) | next
 * chunk; a worker claims with a CAS that also checks the generation, so a late worker
 * can never take a chunk of a later task, and it reads fn/arg only after a successful
 * claim (the task cannot finish, hence cannot be replaced, while it holds a chunk).
 * Publication: the caller writes fn/arg, then release-stores the new generation; a
 * claim's acquire CAS reads that store (or a later claim of the same release sequence),
 * so fn/arg are visible. n_chunks is read before the claim, possibly while the caller
 * already writes the next task's count (the stale value only makes a CAS that fails on
 * the generation), so it is an atomic: relaxed, a plain load on x86 and ARM. */
#include "threadpool.h"
#include "common/core/mi_settings.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

typedef struct {
    struct mi_threadpool *tp;
    int ith;
    pthread_t th;
} worker;

struct mi_threadpool {
    int n;
    worker *w;
    int64_t spin_ns;               /* how long an idle worker spins before sleeping */
    mi_chunk_fn fn;
    void *arg;
    _Atomic int64_t n_chunks;
    /* claimed by every chunk: each on its own cache line so claims and completions do
     * not bounce one line between cores twice per chunk */
    _Alignas(64) _Atomic uint64_t state;   /* gen << 32 | next chunk */
    _Alignas(64) atomic_llong done;        /* chunks completed in the current task */
    _Alignas(64) char pad_;
    atomic_int n_sleeping;
    atomic_int stop;
    pthread_mutex_t mtx;
    pthread_cond_t cv;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Claim and run chunks of generation gen until none is left. */
static void work(mi_threadpool *tp, uint32_t gen, int ith) {
    for (;;) {
        uint64_t s = atomic_load_explicit(&tp->state, memory_order_acquire);
        if ((uint32_t)(s >> 32) != gen) return;
        uint32_t next = (uint32_t)s;
        if ((int64_t)next >= atomic_load_explicit(&tp->n_chunks, memory_order_relaxed)) return;
        if (!atomic_compare_exchange_weak_explicit(&tp->state, &s, s + 1, memory_order_acq_rel, memory_order_acquire))
            continue;
        tp->fn(tp->arg, (int64_t)next, ith);
        atomic_fetch_add_explicit(&tp->done, 1, memory_order_release);
    }
}

static void *worker_main(void *p) {
    worker *w = p;
    mi_threadpool *tp = w->tp;
    uint32_t seen = 0;
    for (;;) {
        uint32_t gen = (uint32_t)(atomic_load_explicit(&tp->state, memory_order_acquire) >> 32);
        if (gen == seen && !atomic_load_explicit(&tp->stop, memory_order_relaxed)) {
            int64_t t0 = now_ns();
            int i = 0;
            while ((gen = (uint32_t)(atomic_load_explicit(&tp->state, memory_order_acquire) >> 32)) == seen) {
                cpu_relax();
                if ((++i & 63) == 0 && now_ns() - t0 > tp->spin_ns) break;
            }
            if (gen == seen) {
                pthread_mutex_lock(&tp->mtx);
                atomic_fetch_add(&tp->n_sleeping, 1);
                while ((gen = (uint32_t)(atomic_load(&tp->state) >> 32)) == seen && !atomic_load(&tp->stop))
                    pthread_cond_wait(&tp->cv, &tp->mtx);
                atomic_fetch_sub(&tp->n_sleeping, 1);
                pthread_mutex_unlock(&tp->mtx);
            }
        }
        if (atomic_load(&tp->stop)) break;
        seen = gen;
        work(tp, gen, w->ith);
    }
    return NULL;
}

mi_status threadpool_new(int n_threads, mi_threadpool **out) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    long spin_us = 0;
    MI_TRY(mi_setting_int("MINFER_SPIN_US", 0, 10000000, 100, &spin_us));
    mi_threadpool *tp = aligned_alloc(64, (sizeof *tp + 63) / 64 * 64);   /* the atomics' lines */
    if (!tp) return mi_err(MI_ERR_NOMEM, "threadpool: out of memory");
    memset(tp, 0, sizeof *tp);
    tp->n = n_threads;
    tp->spin_ns = (int64_t)spin_us * 1000;
    pthread_mutex_init(&tp->mtx, NULL);
    pthread_cond_init(&tp->cv, NULL);
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
    atomic_fetch_add(&tp->state, (uint64_t)1 << 32);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mtx);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->w[i].th, NULL);
    pthread_mutex_destroy(&tp->mtx);
    pthread_cond_destroy(&tp->cv);
    free(tp->w);
    free(tp);
}

int threadpool_size(const mi_threadpool *tp) { return tp->n; }

void threadpool_chunks(mi_threadpool *tp, mi_chunk_fn fn, void *arg, int64_t n_chunks) {
    if (n_chunks <= 0) return;
    if (tp->n == 1 || n_chunks == 1) {
        for (int64_t c = 0; c < n_chunks; c++) fn(arg, c, 0);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store_explicit(&tp->n_chunks, n_chunks, memory_order_relaxed);
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    uint64_t s = atomic_load_explicit(&tp->state, memory_order_relaxed);
    uint32_t gen = (uint32_t)(s >> 32) + 1;
    atomic_store(&tp->state, (uint64_t)gen << 32);   /* seq_cst: pairs with n_sleeping below */
    if (atomic_load(&tp->n_sleeping) > 0) {
        pthread_mutex_lock(&tp->mtx);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mtx);
    }
    work(tp, gen, 0);
    /* chunks still running on workers: spin, then yield the core to them */
    int i = 0;
    while (atomic_load_explicit(&tp->done, memory_order_acquire) < n_chunks) {
        if (++i < 4096)
            cpu_relax();
        else
            sched_yield();
    }
    /* close the task: a worker holding a stale n_chunks must find nothing to claim */
    atomic_store(&tp->state, ((uint64_t)gen << 32) | 0xffffffffu);
}

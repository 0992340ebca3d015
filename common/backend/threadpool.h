/* Persistent worker threads for the CPU backend. threadpool_run(fn) runs fn on every
 * thread (the caller is thread 0) and returns when all are done: one barrier per call.
 * Workers spin briefly for the next call (decode issues hundreds per token), then sleep. */
#ifndef MI_THREADPOOL_H
#define MI_THREADPOOL_H
#include "../core/mi_err.h"

typedef struct mi_threadpool mi_threadpool;
/* ith in [0, nth): the part of the work this thread does. */
typedef void (*mi_task_fn)(void *arg, int ith, int nth);

/* n_threads >= 1 (1: no workers, run inline). */
mi_status threadpool_new(int n_threads, mi_threadpool **out);
void threadpool_free(mi_threadpool *tp);
int threadpool_size(const mi_threadpool *tp);
/* Run fn(arg, ith, n) on n threads; n <= size (n < 1 means all). Blocks until done. */
void threadpool_run(mi_threadpool *tp, mi_task_fn fn, void *arg, int n);

#endif

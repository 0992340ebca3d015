/* Persistent worker threads for the CPU backend. threadpool_chunks(fn, n) hands out
 * chunk indices 0..n-1 through one atomic counter; the caller works too and returns when
 * every chunk is done. Completion counts chunks, not threads: a worker the OS has not
 * scheduled yet simply finds no chunk left, so a busy (shared) machine costs throughput,
 * never a barrier stall. Idle workers spin briefly for the next call, then sleep. */
#ifndef MI_THREADPOOL_H
#define MI_THREADPOOL_H
#include <stdint.h>
#include "../core/mi_err.h"

typedef struct mi_threadpool mi_threadpool;
/* chunk in [0, n_chunks); ith in [0, size): the executing thread (for per-thread scratch). */
typedef void (*mi_chunk_fn)(void *arg, int64_t chunk, int ith);

/* n_threads >= 1 (1: no workers, everything runs on the caller). */
mi_status threadpool_new(int n_threads, mi_threadpool **out);
void threadpool_free(mi_threadpool *tp);
int threadpool_size(const mi_threadpool *tp);
/* Run fn for every chunk; blocks until all are done. n_chunks < 2^31. */
void threadpool_chunks(mi_threadpool *tp, mi_chunk_fn fn, void *arg, int64_t n_chunks);

#endif

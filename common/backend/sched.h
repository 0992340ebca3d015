/* The scheduler: assign each node a backend (first in priority order whose
 * supports() accepts it), cut the node list into splits, insert MI_OP_COPY nodes at
 * backend boundaries, allocate with liveness-based reuse, execute split by split. */
#ifndef MI_SCHED_H
#define MI_SCHED_H
#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_sched mi_sched;

typedef struct {
    int n_splits;
    int n_copies;           /* cross-backend copies in the last computed graph */
    size_t bytes_copied;
    size_t alloc_bytes[8];  /* graph buffer size per backend */
    size_t naive_bytes[8];  /* sum of node sizes without reuse, per backend */
} mi_sched_stats;

/* backends[0] is preferred; the last must be able to run every node (the CPU). */
mi_status sched_new(mi_backend **backends, int n_backends, mi_sched **out);
void sched_free(mi_sched *s);
int sched_n_backends(const mi_sched *s);
mi_backend *sched_backend(const mi_sched *s, int i);

/* Steps (each may be called on its own; sched_compute does all three if needed). */
mi_status sched_assign(mi_sched *s, mi_graph *g);
mi_status sched_alloc(mi_sched *s, mi_graph *g);
mi_status sched_compute(mi_sched *s, mi_graph *g);
/* Copy a (possibly device-resident) tensor to host memory. */
mi_status sched_read(mi_sched *s, const mi_tensor *t, void *host_dst, size_t offset, size_t n);
/* Copy n bytes between tensors' data on any two backends (used for boundary copies). */
mi_status sched_copy_across(mi_backend *dst_be, void *dst, mi_backend *src_be, const void *src, size_t n);
const mi_sched_stats *sched_stats(const mi_sched *s);
/* MINFER_DUMP_GRAPH=1 prints nodes, backends, splits, copies and buffer reuse. */
void sched_dump(const mi_sched *s, const mi_graph *g, void *file);

#ifdef __cplusplus
}
#endif
#endif

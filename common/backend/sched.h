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
    /* host seconds of the last sched_compute: assigning and allocating (when the graph needed
     * it), the backends' split_begin (a device's split set-up: workspace, graph key), issuing
     * the nodes (the CPU's whole computation; a device's launches, or on a replay its host
     * checks), their split_end (a replay's graph launch) */
    double s_prepare, s_split_begin, s_nodes, s_split_end;
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
/* The read queued behind the work queued so far (host_dst from the backend's host_alloc), and
 * the wait for it: work queued in between (the next step) is not waited for. A backend without
 * queued reads reads at once in sched_read_begin (sched_reads_ahead false). */
mi_status sched_read_begin(mi_sched *s, const mi_tensor *t, void *host_dst, size_t offset, size_t n);
mi_status sched_read_wait(mi_sched *s, const mi_tensor *t);
bool sched_reads_ahead(const mi_sched *s, const mi_tensor *t);
/* sched_compute of g with its Input `in` fed from the first n bytes of src (an output of the work
 * queued before, read on the device in queue order) instead of its host bytes: MI_ERR_UNSUPPORTED
 * where the two overlap without being the same bytes. */
mi_status sched_compute_fed(mi_sched *s, mi_graph *g, mi_tensor *in, const mi_tensor *src, size_t n);
/* Copy n bytes between tensors' data on any two backends (used for boundary copies). */
mi_status sched_copy_across(mi_backend *dst_be, void *dst, mi_backend *src_be, const void *src, size_t n);
const mi_sched_stats *sched_stats(const mi_sched *s);
/* Before allocating need bytes on be: MI_OK when they fit in the memory be reports as
 * available (or when it cannot tell, or MINFER_NO_MEMCHECK=1), else MI_ERR_NOMEM with a
 * message naming what, the bytes needed, available and total, and hint (may be NULL). */
mi_status sched_check_fit(mi_backend *be, size_t need, const char *what, const char *hint);
/* Nodes with backend, split boundaries, copies (and from where), buffer offsets and which
 * freed node's bytes each one reuses, per-backend bytes with and without reuse. Sessions
 * call it when MINFER_DUMP_GRAPH=1; MINFER_DUMP_GRAPH=2 also prints at every sched_alloc. */
void sched_dump(const mi_sched *s, const mi_graph *g, void *file);

/* Notes for backends (what the scheduler guarantees):
 * - assign: MI_OP_NONE leaves keep t->backend as set by their owner (-1 = host/CPU, the
 *   last backend); KV_STORE runs on its cache's backend and its data aliases the cache.
 * - a split handed to split_begin/execute may start with MI_OP_COPY nodes whose src lives
 *   on another backend: the scheduler performs those (sched_copy_across) and never passes
 *   them to execute_node; a COPY with a same-backend src goes to execute_node.
 * - allocation: one buffer per backend from buffer_alloc, replaced only when too small;
 *   offsets are 256-byte aligned; the same graph shape gets the same offsets. A buffer
 *   larger than the backend's memory() reports available is refused (sched_check_fit).
 * - sched_compute leaves device work queued; sched_read synchronizes the tensor's backend.
 * - an MI_OP_INPUT flagged MI_T_FED is skipped: its owner queued its bytes already.
 * - MINFER_PROFILE=1: per-op times (synchronizing after every node), printed by sched_free.
 * - MINFER_SCHED_NOREUSE=1: no liveness reuse (A/B, debugging). */

#ifdef __cplusplus
}
#endif
#endif

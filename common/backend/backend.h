/* The backend interface: a table of functions plus an opaque context. The scheduler
 * talks to backends only through this table; the CPU backend and the CUDA backend are
 * peers behind it. Optional entries may be NULL (marked "optional"). */
#ifndef MI_BACKEND_H
#define MI_BACKEND_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "../core/mi_err.h"
#include "../graph/graph.h"
#include "threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_backend mi_backend;

/* A block of backend memory. base is a host pointer for host backends, a device
 * pointer otherwise; the scheduler places tensors at base + offset. */
typedef struct mi_buffer {
    mi_backend *backend;
    void *base;
    size_t size;
    void *ctx;          /* backend private */
} mi_buffer;

/* A split: a run of consecutive nodes of one backend (graph->nodes[first .. first+n-1]). */
typedef struct mi_split {
    int backend;
    int first, n;
} mi_split;

typedef struct mi_backend_iface {
    const char *(*name)(mi_backend *be);
    /* May this backend execute node? Decided before execution, never during it. The
     * answer depends only on the node; a backend may keep the kernel it chose for the
     * node in node->kernel, so execution does not decide again. */
    bool (*supports)(mi_backend *be, mi_tensor *node);

    /* memory */
    mi_status (*buffer_alloc)(mi_backend *be, size_t size, mi_buffer **out);
    void (*buffer_free)(mi_backend *be, mi_buffer *buf);
    /* Pool generation: changes exactly when addresses handed out by the pool change (optional). */
    uint64_t (*generation)(mi_backend *be);
    /* host -> backend memory; may be asynchronous w.r.t. the host, ordered with execution */
    mi_status (*write)(mi_backend *be, void *dst, const void *host_src, size_t n);
    /* backend memory -> host; complete when it returns */
    mi_status (*read)(mi_backend *be, void *host_dst, const void *src, size_t n);
    /* Host memory that read() fills fastest (page-locked, for a GPU), or NULL where it has
     * none to give; freed with host_free (both optional: plain malloc is as good elsewhere). */
    void *(*host_alloc)(mi_backend *be, size_t size);
    void (*host_free)(mi_backend *be, void *p);
    /* backend memory -> backend memory, same backend; ordered with execution */
    mi_status (*copy)(mi_backend *be, void *dst, const void *src, size_t n);
    /* A read queued behind the work queued so far, returning at once (host_dst from host_alloc),
     * and the wait for the last one queued, which does not wait for work queued after it; so a
     * caller can queue the next step before it waits for this one's output (both optional:
     * without them the read is read()'s, complete when it returns) */
    mi_status (*read_begin)(mi_backend *be, void *host_dst, const void *src, size_t n);
    mi_status (*read_wait)(mi_backend *be);

    /* execution */
    mi_status (*split_begin)(mi_backend *be, const mi_graph *g, const mi_split *s);  /* optional */
    mi_status (*execute_node)(mi_backend *be, mi_tensor *node);
    mi_status (*split_end)(mi_backend *be, const mi_graph *g, const mi_split *s);    /* optional */
    mi_status (*synchronize)(mi_backend *be);
    void (*destroy)(mi_backend *be);
    /* Bytes a new buffer_alloc may take now (*avail) and the memory's size (*total), so
     * a caller can refuse a request that cannot fit before touching it (optional). */
    mi_status (*memory)(mi_backend *be, size_t *avail, size_t *total);
    /* Kernels one decode step launched, counted in the graph it last captured or replayed;
     * -1 when the backend has none to report (optional). */
    int64_t (*step_kernels)(mi_backend *be);
} mi_backend_iface;

struct mi_backend {
    const mi_backend_iface *iface;   /* may be replaced by a later phase's install (wrapping) */
    void *ctx;
    bool host_memory;                /* data pointers are host-addressable */
    int index;                       /* position in the scheduler's list, set by sched_new */
};

/* The CPU backend (common/backend/cpu_backend.c). n_threads <= 0: all cores. */
mi_status mi_backend_cpu_new(int n_threads, mi_backend **out);
/* Its worker pool, for host work between graph runs (a batch's per-sequence draws). */
mi_threadpool *mi_backend_cpu_pool(mi_backend *cpu);

/* Backend registry. Phases register their backends in their install function
 * (e.g. phase 7a registers "cuda"); common code creates them by name. */
typedef mi_status (*mi_backend_create_fn)(mi_backend **out);
void mi_backend_register(const char *name, mi_backend_create_fn create);
/* Returns MI_ERR_UNSUPPORTED with a message if no backend of that name was built in. */
mi_status mi_backend_create(const char *name, mi_backend **out);
bool mi_backend_available(const char *name);
/* The constructor registered under name (NULL if none): a later phase wraps an earlier
 * phase's backend by registering a constructor that calls this one. */
mi_backend_create_fn mi_backend_registered(const char *name);

/* Phase install: defined in a file generated by the Makefile that calls each built
 * phase's install function in phase order (7a, 7b, ...). Safe to call twice. */
void mi_phases_install(void);
extern const char *mi_build_phase;   /* "cpu", "7a" ... "7e" */

#ifdef __cplusplus
}
#endif
#endif

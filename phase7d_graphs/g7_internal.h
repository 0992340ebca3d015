/* Phase 7d internals shared by graphs7d.c (the wrapped backend: capture, replay, cache,
 * staging ring) and control7d.c (lock, counters, switches, test entry points, install).
 * Not for other phases: they use graphs7d.h. */
#ifndef MI_G7_INTERNAL_H
#define MI_G7_INTERNAL_H
#include "phase7d_graphs/graphs7d.h"
#include <cuda_runtime_api.h>
#include <pthread.h>

#define G7_CACHE_MAX 8                     /* graphs per backend (LRU) */
#define G7_MAX_SLOTS 4096                  /* step-param slots per split */
#define G7_RING_N 8                        /* staging ring: slots, one per split */
#define G7_RING_BYTES ((size_t)64 << 10)   /* bytes per ring slot */
#define G7_LOG_N 256
#define G7_BACKOFF_MAX 64

typedef struct {
    uint64_t a, b;
} g7_hash;

typedef struct {
    bool used;
    g7_hash shape;           /* split identity: ops, types, shapes, params, data pointers, execs */
    uint64_t gen;            /* pool generation at capture */
    void *ws;                /* workspace block and size at capture */
    size_t ws_size;
    cudaGraphExec_t exec;
    uint64_t last_use;
} g7_entry;

enum { M_NONE = 0, M_DIRECT, M_PENDING, M_CAPTURING, M_REPLAY };

typedef struct g7_state {
    mi_backend_iface iface;          /* our copy, installed as be->iface (first member) */
    const mi_backend_iface *orig;    /* the CUDA backend's own */
    mi_backend *be;
    mi_cuda_ctx *c;
    cudaStream_t stream;
    int device;
    uint64_t serial;                 /* wrap order, for the capture log */
    int32_t *dparams;                /* device [G7_MAX_SLOTS]: n_past per slot */
    char *ring;                      /* pinned [G7_RING_N][G7_RING_BYTES] */
    cudaEvent_t ring_ev[G7_RING_N];
    bool ring_armed[G7_RING_N];
    int ring_cur;
    size_t ring_fill;
    bool ring_dirty;
    cudaEvent_t sync_ev;
    /* the split in progress */
    int mode;
    const mi_graph *g;
    mi_split sp;
    int first_compute, n_compute;
    uint64_t split_serial, win_serial;
    g7_hash shape;
    uint64_t gen;
    void *ws;
    size_t ws_size;
    g7_entry *hit;
    const mi_tensor **slot_node;     /* [G7_MAX_SLOTS] */
    int n_slots, slot_cursor;
    bool staged;                     /* Inputs through the ring (graphs on when the split began) */
    bool npast_in_key;               /* an ATTN/KV_STORE without device n_past: p[0] is in the key */
    int fail_at;                     /* node id where an injected failure fires, -1 none */
    mi_graph_fail fail_mode;
    /* cache */
    g7_entry cache[G7_CACHE_MAX];
    uint64_t tick;
    /* backoff after a failed window: skip capture of this shape for bo_left splits */
    g7_hash bo_shape;
    int bo_left, bo_fails;
    struct g7_state *next;
} g7_state;

/* the list of wrapped backends; g7_list_mu is the outer lock, never taken under the stream lock */
extern pthread_mutex_t g7_list_mu;
extern g7_state *g7_states;
extern uint64_t g7_wrap_serial;
/* counters and the capture log (innermost lock) */
extern pthread_mutex_t g7_st_mu;
extern mi_cuda_graph_counters g7_st;
#define STAT_ADD(field, v) do { pthread_mutex_lock(&g7_st_mu); g7_st.field += (v); pthread_mutex_unlock(&g7_st_mu); } while (0)
void g7_log_append(const mi_cuda_graph_capture_rec *r, bool npast_in_key);

bool g7_take_fail(mi_graph_fail mode);
bool g7_is_step_exec(mi_cuda_exec_fn ex);
void g7_loud(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* graphs7d.c */
g7_state *g7_state_of(mi_backend *be);
int g7_cache_drop_all(g7_state *s);
void g7_maybe_free_retired(void);

#endif

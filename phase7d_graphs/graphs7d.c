/* Phase 7d: CUDA Graph capture/replay of decode splits, wrapped around the CUDA
 * backend's interface (split_begin / execute_node / split_end and every stream touch).
 * A decode split runs in one of three modes: REPLAY (a cached graph fits its key: one
 * cudaGraphLaunch), CAPTURE (a miss: the split's kernels are recorded once, the graph
 * is instantiated, cached and launched) or DIRECT (everything else). The split's head,
 * its Input nodes and boundary copies, always runs outside the graph, before it: Inputs
 * through a pinned staging ring, the ATTN/KV_STORE n_past values into the device step
 * params. docs/PHASE7D.md has the rules and why. */
#include "phase7d_graphs/graph_process.h"
#include "phase7d_graphs/staging_ring.h"
#include "phase7d_graphs/graph_cache.h"
#include "phase7d_graphs/split_key.h"
#include "phase7a_skeleton/cuda_check.h"
#include "phase7c_wiring/wiring7c.h"
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#define G7_MAX_SLOTS 4096                  /* step-param slots per split */
#define G7_BACKOFF_MAX 64

enum { M_NONE = 0, M_DIRECT, M_PENDING, M_CAPTURING, M_REPLAY };

/* The last eligible split's scan and key, kept under its graph's version (graph_version). A
 * step graph run again comes back with only its Inputs' data and its slots' n_past moved, so
 * the same version, split, dispatch epoch, pool generation and workspace give the same slots
 * and key: the scan, its hash over every node and the workspace sizing are skipped (tens of
 * microseconds of host time between two decode steps). A split with n_past in its key is
 * never kept. MINFER_GRAPH_KEY_EACH_STEP=1 turns this off. */
typedef struct {
    bool valid;
    uint64_t version, epoch, gen;
    mi_split sp;
    void *ws;
    size_t ws_size;
    int first_compute, n_compute, n_slots;
    g7_hash shape;
    const mi_tensor **slot_node;     /* [G7_MAX_SLOTS] */
} split_memo;

typedef struct g7_state {
    mi_backend_iface iface;          /* our copy, installed as be->iface (first member) */
    const mi_backend_iface *orig;    /* the CUDA backend's own */
    mi_backend *be;
    mi_cuda_ctx *c;
    cudaStream_t stream;
    int device;
    uint64_t serial;                 /* wrap order, for the capture log */
    int32_t *dparams;                /* device [G7_MAX_SLOTS]: n_past per slot */
    staging_ring ring;
    cudaEvent_t sync_ev;
    /* the split in progress */
    int mode;
    const mi_graph *g;
    mi_split sp;
    int first_compute, n_compute;
    uint64_t split_serial, win_serial;
    graph_key key;                   /* the split's: identity, pool generation, workspace */
    graph_entry *hit;
    const mi_tensor **slot_node;     /* [G7_MAX_SLOTS] */
    int n_slots, slot_cursor;
    bool staged;                     /* Inputs through the ring (graphs on when the split began) */
    bool npast_in_key;               /* an ATTN/KV_STORE without device n_past: p[0] is in the key */
    int fail_at;                     /* node id where an injected failure fires, -1 none */
    mi_graph_fail fail_mode;
    graph_cache cache;
    /* backoff after a failed window: skip capture of this shape for bo_left splits */
    g7_hash bo_shape;
    int bo_left, bo_fails;
    int64_t step_kernels;            /* kernels of the graph last captured or replayed, -1 none */
    split_memo memo;
    struct g7_state *next;
} g7_state;

/* the list of wrapped backends; g7_list_mu is the outer lock, never taken under the stream lock */
static pthread_mutex_t g7_list_mu = PTHREAD_MUTEX_INITIALIZER;
static g7_state *g7_states;
static uint64_t g7_wrap_serial;

/* the backend whose split this thread is executing (for mi_cuda_step_param) */
static _Thread_local g7_state *t_cur;

/* ---------------- wrapped backends ---------------- */
static mi_status w_split_begin(mi_backend *be, const mi_graph *g, const mi_split *sp);

static g7_state *g7_state_of(mi_backend *be) {
    if (!be || !be->iface || be->iface->split_begin != w_split_begin) return NULL;
    return (g7_state *)(void *)be->iface;   /* iface is the first member */
}

bool mi_cuda_graph_wrapped(mi_backend *be) { return g7_state_of(be) != NULL; }

static void lock(void) { mi_cuda_stream_lock(); }
static void unlock(void) { mi_cuda_stream_unlock(); }


/* ---------------- pinned staging ring (staging_ring.c) ---------------- */
static void *ring_put(g7_state *s, const void *src, size_t n) {
    void *p = staging_ring_reserve(&s->ring, n);
    if (p) memcpy(p, src, n);
    return p;
}

/* ---------------- execution helpers ---------------- */
static mi_status run_direct(g7_state *s, mi_tensor *node) {
    lock();
    g7_state *prev = t_cur;
    t_cur = s;
    mi_status st = s->orig->execute_node(s->be, node);
    t_cur = prev;
    unlock();
    return st;
}

/* Input: host bytes -> pinned ring -> device, async on the stream (hard rule 5).
 * Too large for the ring: the backend's own (pageable) copy, never inside a window. */
static mi_status run_input(g7_state *s, mi_tensor *node) {
    size_t n = mi_nbytes(node);
    if (!s->staged || n == 0 || !node->host_src || !node->data) return run_direct(s, node);
    void *p = ring_put(s, node->host_src, n);
    if (!p) return run_direct(s, node);
    lock();
    cudaError_t e = cudaMemcpyAsync(node->data, p, n, cudaMemcpyHostToDevice, s->stream);
    unlock();
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return mi_err(MI_ERR_DEVICE, "cuda: input '%s' (%zu bytes) through the staging ring: %s", node->name, n,
                      cudaGetErrorString(e));
    }
    STAT_ADD(staged_inputs, 1);
    return MI_OK;
}

/* the compute nodes first..last of the split, by direct launches (after a failed window
 * whose recorded work never ran) */
static mi_status run_region_direct(g7_state *s, int first, int last) {
    for (int i = first; i <= last; i++) {
        mi_tensor *t = s->g->nodes[i];
        if (t->op == MI_OP_NONE) continue;
        mi_status st = t->op == MI_OP_INPUT ? run_input(s, t) : run_direct(s, t);
        if (st != MI_OK) return mi_err_ctx(st, "node #%d %s (%s), run uncaptured", i, t->name, mi_op_name(t->op));
    }
    return MI_OK;
}

static void backoff_note(g7_state *s) {
    s->bo_shape = s->key.shape;
    s->bo_fails++;
    s->bo_left = s->bo_fails >= 7 ? G7_BACKOFF_MAX : 1 << (s->bo_fails - 1);
}

/* Make sure the stream is not left capturing (after any failure). */
static void ensure_not_capturing(g7_state *s) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s->stream, &cs) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    if (cs == cudaStreamCaptureStatusNone) return;
    g7_loud("stream still capturing after the window closed: ending it again");
    cudaGraph_t gr = NULL;
    (void)cudaStreamEndCapture(s->stream, &gr);
    if (gr) (void)cudaGraphDestroy(gr);
    (void)cudaGetLastError();
}

/* Abort the open window: end the capture, discard the graph, release the window's hold
 * on the stream lock. The caller runs the recorded nodes uncaptured. */
static void window_abort(g7_state *s, const mi_tensor *node, const char *why) {
    cudaGraph_t gr = NULL;
    cudaError_t e = cudaStreamEndCapture(s->stream, &gr);
    if (gr) (void)cudaGraphDestroy(gr);
    (void)cudaGetLastError();
    ensure_not_capturing(s);
    if (node)
        g7_loud("node #%d %s (%s) failed inside an open capture window: %s; window aborted (EndCapture: %s), the "
             "step runs uncaptured", node->id, node->name, mi_op_name(node->op), why, cudaGetErrorString(e));
    else
        g7_loud("capture window aborted: %s (EndCapture: %s)", why, cudaGetErrorString(e));
    s->mode = M_DIRECT;
    unlock();   /* the window's hold */
    STAT_ADD(aborted_windows, 1);
    backoff_note(s);
}

/* a window left open by a path that never reached split_end (an error return) */
static void abort_stale(g7_state *s, const char *where) {
    if (s->mode == M_CAPTURING) window_abort(s, NULL, where);
}

static mi_status window_begin(g7_state *s) {
    lock();   /* held until the window closes: the capture window is process-wide exclusive */
    cudaError_t e;
    const bool inj = g7_take_fail(MI_GRAPH_FAIL_BEGIN);
    if (inj) {
        /* a real refusal: the legacy stream cannot be captured */
        e = cudaStreamBeginCapture((cudaStream_t)0, cudaStreamCaptureModeThreadLocal);
        if (e == cudaSuccess) {
            cudaGraph_t gr = NULL;
            (void)cudaStreamEndCapture((cudaStream_t)0, &gr);
            if (gr) (void)cudaGraphDestroy(gr);
            e = cudaErrorStreamCaptureUnsupported;
        }
    } else {
        /* thread-local mode: other threads may keep using CUDA (their own streams) */
        e = cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        ensure_not_capturing(s);
        g7_loud("cudaStreamBeginCapture failed: %s%s; the step runs uncaptured", cudaGetErrorString(e),
             inj ? " (injected, MINFER_CUDA_GRAPH_FAIL=begin)" : "");
        unlock();
        STAT_ADD(begin_failures, 1);
        backoff_note(s);
        return MI_ERR_DEVICE;
    }
    s->mode = M_CAPTURING;
    s->win_serial = s->split_serial;
    s->fail_at = -1;
    s->fail_mode = MI_GRAPH_FAIL_NONE;
    if (g7_take_fail(MI_GRAPH_FAIL_NODE)) s->fail_mode = MI_GRAPH_FAIL_NODE;
    else if (g7_take_fail(MI_GRAPH_FAIL_SYNC)) s->fail_mode = MI_GRAPH_FAIL_SYNC;
    if (s->fail_mode != MI_GRAPH_FAIL_NONE) {   /* the middle compute node of the window */
        int want = s->n_compute / 2, k = 0;
        for (int i = s->first_compute; i < s->sp.first + s->sp.n; i++) {
            if (s->g->nodes[i]->op == MI_OP_NONE) continue;
            if (k++ == want) {
                s->fail_at = i;
                break;
            }
        }
    }
    return MI_OK;
}

static mi_status run_captured(g7_state *s, mi_tensor *node) {
    g7_state *prev = t_cur;
    t_cur = s;
    mi_status st = s->orig->execute_node(s->be, node);   /* only enqueues: recorded, not run */
    t_cur = prev;
    if (st == MI_OK && node->id == s->fail_at) {
        if (s->fail_mode == MI_GRAPH_FAIL_NODE) {
            st = mi_err(MI_ERR_DEVICE, "injected node failure (MINFER_CUDA_GRAPH_FAIL=node)");
        } else {
            /* what hard rule 3 forbids, done on purpose: a real error that invalidates the capture */
            cudaError_t e = cudaStreamSynchronize(s->stream);
            (void)cudaGetLastError();
            st = mi_err(MI_ERR_DEVICE, "cudaStreamSynchronize inside the window returned '%s' (injected, "
                        "MINFER_CUDA_GRAPH_FAIL=sync)", cudaGetErrorString(e));
        }
    }
    if (st == MI_OK) return MI_OK;
    char why[512];
    snprintf(why, sizeof why, "%s", mi_errmsg());
    window_abort(s, node, why);
    /* the nodes recorded so far never ran: run them now, uncaptured, this one included */
    return run_region_direct(s, s->first_compute, node->id);
}

/* the capture's record in the log; returns the graph's kernel nodes */
static int64_t log_capture(g7_state *s, cudaGraph_t gr) {
    mi_cuda_graph_capture_rec r;
    memset(&r, 0, sizeof r);
    r.backend_serial = s->serial;
    r.shape_hash = s->key.shape.a;
    r.generation = s->key.gen;
    r.compute_nodes = s->n_compute;
    size_t n = 0;
    if (cudaGraphGetNodes(gr, NULL, &n) == cudaSuccess && n > 0) {
        cudaGraphNode_t *nodes = malloc(n * sizeof *nodes);
        if (nodes && cudaGraphGetNodes(gr, nodes, &n) == cudaSuccess) {
            for (size_t i = 0; i < n; i++) {
                enum cudaGraphNodeType ty;
                if (cudaGraphNodeGetType(nodes[i], &ty) != cudaSuccess) {
                    r.others++;
                    continue;
                }
                if (ty == cudaGraphNodeTypeKernel) r.kernels++;
                else if (ty == cudaGraphNodeTypeMemcpy) r.memcpys++;
                else if (ty == cudaGraphNodeTypeMemset) r.memsets++;
                else r.others++;
            }
        }
        free(nodes);
    }
    (void)cudaGetLastError();
    r.graph_nodes = n;
    g7_log_append(&r, s->npast_in_key);
    return (int64_t)r.kernels;
}

/* Close the window at split_end: EndCapture, instantiate, cache, launch. Any failure:
 * nothing is cached and the split's compute nodes run uncaptured. */
static mi_status window_close(g7_state *s) {
    const int last = s->sp.first + s->sp.n - 1;
    cudaGraph_t gr = NULL;
    cudaGraphExec_t ex = NULL;
    cudaError_t e = cudaStreamEndCapture(s->stream, &gr);
    /* one window = one split of one step; a window that outlived its split would replay
     * later steps' work (double KV commits): never cached */
    const bool multi = s->win_serial != s->split_serial;
    if (e == cudaSuccess && gr && !multi) e = cudaGraphInstantiate(&ex, gr, 0);
    int64_t kernels = -1;
    if (e == cudaSuccess && ex && !multi) kernels = log_capture(s, gr);
    if (gr) (void)cudaGraphDestroy(gr);   /* the executable keeps what it needs */
    if (e != cudaSuccess) (void)cudaGetLastError();
    ensure_not_capturing(s);
    unlock();   /* the window's hold */
    s->mode = M_DIRECT;
    if (e != cudaSuccess || !ex || multi) {
        if (ex) {
            lock();
            (void)cudaGraphExecDestroy(ex);
            unlock();
        }
        if (multi) {
            g7_loud("a capture window spanned more than one step (split %llu..%llu): graph discarded",
                 (unsigned long long)s->win_serial, (unsigned long long)s->split_serial);
            STAT_ADD(multi_step_rejected, 1);
        } else {
            g7_loud("closing the capture window failed: %s; the step runs uncaptured", cudaGetErrorString(e));
            STAT_ADD(end_failures, 1);
        }
        backoff_note(s);
        return run_region_direct(s, s->first_compute, last);
    }
    graph_entry *en = graph_cache_insert(&s->cache, &s->key, ex, kernels);
    s->step_kernels = kernels;
    s->bo_fails = 0;
    s->bo_left = 0;
    lock();
    e = cudaGraphLaunch(ex, s->stream);
    unlock();
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        g7_loud("first launch of a new graph failed: %s; the step runs uncaptured", cudaGetErrorString(e));
        graph_cache_drop(en);
        STAT_ADD(end_failures, 1);
        backoff_note(s);
        return run_region_direct(s, s->first_compute, last);
    }
    s->mode = M_NONE;
    return MI_OK;
}

static mi_status replay(g7_state *s) {
    lock();
    cudaError_t e = cudaGraphLaunch(s->hit->exec, s->stream);
    unlock();
    graph_cache_touch(&s->cache, s->hit);
    if (e == cudaSuccess) {
        s->step_kernels = s->hit->kernels;
        STAT_ADD(replays, 1);
        return MI_OK;
    }
    (void)cudaGetLastError();
    g7_loud("cudaGraphLaunch failed: %s; graph dropped, the step runs uncaptured", cudaGetErrorString(e));
    graph_cache_drop(s->hit);
    s->hit = NULL;
    s->mode = M_DIRECT;
    return run_region_direct(s, s->first_compute, s->sp.first + s->sp.n - 1);
}

/* ---------------- the split: scan, key (split_key.c), step params ---------------- */
static bool split_scan(g7_state *s) {
    g7_scan sc;
    const bool ok = g7_split_scan(s->g, &s->sp, s->dparams, s->slot_node, G7_MAX_SLOTS, &sc);
    s->first_compute = sc.first_compute;
    s->n_compute = sc.n_compute;
    s->n_slots = sc.n_slots;
    s->slot_cursor = 0;
    s->npast_in_key = sc.npast_in_key;
    if (ok) s->key.shape = sc.shape;
    return ok;
}

/* n_past of every slot: host -> ring -> device params, queued before the split's work */
static mi_status params_fill(g7_state *s) {
    const size_t n = (size_t)s->n_slots * sizeof(int32_t);
    int32_t *p = staging_ring_reserve(&s->ring, n);
    if (!p) return mi_err(MI_ERR_INTERNAL, "cuda graph: %d step params do not fit the staging ring", s->n_slots);
    for (int i = 0; i < s->n_slots; i++) p[i] = (int32_t)mi_node_n_past(s->slot_node[i]);
    lock();
    cudaError_t e = cudaMemcpyAsync(s->dparams, p, n, cudaMemcpyHostToDevice, s->stream);
    unlock();
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return mi_err(MI_ERR_DEVICE, "cuda graph: step params upload: %s", cudaGetErrorString(e));
    }
    STAT_ADD(param_fills, 1);
    return MI_OK;
}

const int32_t *mi_cuda_step_param(mi_cuda_ctx *c, const mi_tensor *node) {
    g7_state *s = t_cur;
    if (!s || s->c != c || s->n_slots == 0) return NULL;
    for (int k = 0; k < s->n_slots; k++) {   /* nodes come in slot order: O(1) amortized */
        int j = (s->slot_cursor + k) % s->n_slots;
        if (s->slot_node[j] == node) {
            s->slot_cursor = j + 1;
            return s->dparams + j;
        }
    }
    return NULL;
}

/* ---------------- the split memo ---------------- */
static bool memo_holds(const g7_state *s, const mi_graph *g, const mi_split *sp) {
    const split_memo *m = &s->memo;
    if (!m->valid || g7_key_each_step() || !mi_cuda_graph_enabled()) return false;
    if (m->version != graph_version(g) || m->sp.backend != sp->backend || m->sp.first != sp->first || m->sp.n != sp->n)
        return false;
    if (m->epoch != mi_cuda_dispatch_epoch()) return false;
    if (m->gen != (s->orig->generation ? s->orig->generation(s->be) : 0)) return false;
    size_t ws_size = 0;
    void *ws = mi_cuda_workspace(s->c, &ws_size);
    return ws == m->ws && ws_size == m->ws_size;   /* the workspace only grows: its need was met */
}

static bool memo_restore(g7_state *s) {
    const split_memo *m = &s->memo;
    s->first_compute = m->first_compute;
    s->n_compute = m->n_compute;
    s->n_slots = m->n_slots;
    s->slot_cursor = 0;
    s->npast_in_key = false;
    memcpy(s->slot_node, m->slot_node, (size_t)m->n_slots * sizeof *s->slot_node);
    s->key.shape = m->shape;
    STAT_ADD(memo_splits, 1);
    return true;
}

/* after split_scan, with the key's generation and workspace filled in */
static void memo_keep(g7_state *s, const mi_graph *g, const mi_split *sp) {
    split_memo *m = &s->memo;
    m->valid = true;
    m->version = graph_version(g);
    m->sp = *sp;
    m->epoch = mi_cuda_dispatch_epoch();
    m->gen = s->key.gen;
    m->ws = s->key.ws;
    m->ws_size = s->key.ws_size;
    m->first_compute = s->first_compute;
    m->n_compute = s->n_compute;
    m->n_slots = s->n_slots;
    memcpy(m->slot_node, s->slot_node, (size_t)s->n_slots * sizeof *m->slot_node);
    m->shape = s->key.shape;
}

/* ---------------- the wrapped interface ---------------- */
static mi_status w_split_begin(mi_backend *be, const mi_graph *g, const mi_split *sp) {
    g7_state *s = g7_state_of(be);
    abort_stale(s, "a new split began while a window was open");
    s->mode = M_NONE;
    s->hit = NULL;
    s->n_slots = 0;
    s->g = NULL;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != s->device) MI_CU_CHECK(cudaSetDevice(s->device));
    MI_TRY(staging_ring_advance(&s->ring, s->stream));
    const bool known = memo_holds(s, g, sp);
    if (!known && s->orig->split_begin) {   /* sizes the workspace: may allocate, so before any window */
        lock();
        mi_status st = s->orig->split_begin(be, g, sp);
        unlock();
        if (st != MI_OK) return st;
    }
    s->g = g;
    s->sp = *sp;
    s->split_serial++;
    s->staged = mi_cuda_graph_enabled() && mi_cuda_graph_input_staging();
    const bool eligible = known ? memo_restore(s) : split_scan(s);
    s->key.gen = s->orig->generation ? s->orig->generation(be) : 0;
    s->key.ws = mi_cuda_workspace(s->c, &s->key.ws_size);
    if (!known && eligible && !s->npast_in_key) memo_keep(s, g, sp);
    if (s->n_slots) MI_TRY(params_fill(s));
    if (!eligible) {
        s->mode = M_DIRECT;
        return MI_OK;
    }
    s->hit = graph_cache_find(&s->cache, &s->key);
    if (s->hit) {
        s->mode = M_REPLAY;
    } else if (s->bo_left > 0 && g7_hash_eq(s->bo_shape, s->key.shape)) {
        s->bo_left--;
        s->mode = M_DIRECT;
        STAT_ADD(backoff_splits, 1);
    } else {
        s->mode = M_PENDING;
    }
    return MI_OK;
}

static mi_status w_execute_node(mi_backend *be, mi_tensor *node) {
    g7_state *s = g7_state_of(be);
    const int id = node->id;
    const bool in_split = s->mode != M_NONE && s->g && id >= s->sp.first && id < s->sp.first + s->sp.n &&
                          s->g->nodes[id] == node;
    if (!in_split) {
        abort_stale(s, "a node outside the split ran while a window was open");
        s->staged = mi_cuda_graph_enabled() && mi_cuda_graph_input_staging();
        return node->op == MI_OP_INPUT ? run_input(s, node) : run_direct(s, node);
    }
    if (id < s->first_compute || (node->op == MI_OP_INPUT && s->mode != M_CAPTURING))
        return node->op == MI_OP_INPUT ? run_input(s, node) : run_direct(s, node);
    switch (s->mode) {
    case M_REPLAY:   /* the graph runs it at split_end; the host checks its kernel's run() would make */
        return mi_cuda_op_check(node);
    case M_PENDING:
        if (window_begin(s) != MI_OK) {
            s->mode = M_DIRECT;
            return run_direct(s, node);
        }
        return run_captured(s, node);
    case M_CAPTURING:
        return run_captured(s, node);
    default:
        return run_direct(s, node);
    }
}

static mi_status w_split_end(mi_backend *be, const mi_graph *g, const mi_split *sp) {
    g7_state *s = g7_state_of(be);
    mi_status st = MI_OK;
    const int mode = s->mode;
    if (mode == M_CAPTURING) st = window_close(s);
    else if (mode == M_REPLAY) st = replay(s);
    if (s->mode == M_DIRECT || mode == M_DIRECT || mode == M_PENDING) STAT_ADD(direct_splits, 1);
    s->mode = M_NONE;
    s->g = NULL;
    if (st == MI_OK && s->orig->split_end) {
        lock();
        st = s->orig->split_end(be, g, sp);
        unlock();
    }
    return st;
}

static mi_status w_synchronize(mi_backend *be) {
    g7_state *s = g7_state_of(be);
    abort_stale(s, "synchronize while a window was open");
    lock();   /* the touch: an event record; the wait happens outside the lock */
    cudaError_t e = cudaEventRecord(s->sync_ev, s->stream);
    unlock();
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return mi_err(MI_ERR_DEVICE, "cudaEventRecord (synchronize) failed: %s", cudaGetErrorString(e));
    }
    MI_CU_CHECK(cudaEventSynchronize(s->sync_ev));
    return MI_OK;
}

/* a byte move of the backend's own under the stream lock; why: the stale window it aborts first (NULL: none) */
typedef mi_status (*bytes_fn)(mi_backend *, void *, const void *, size_t);
static mi_status locked_bytes(mi_backend *be, const char *why, bytes_fn fn, void *dst, const void *src, size_t n) {
    g7_state *s = g7_state_of(be);
    if (why) abort_stale(s, why);
    lock();
    mi_status st = fn(be, dst, src, n);
    unlock();
    return st;
}

static mi_status w_write(mi_backend *be, void *dst, const void *src, size_t n) {
    return locked_bytes(be, "a copy into the device while a window was open", g7_state_of(be)->orig->write, dst, src, n);
}

static mi_status w_read(mi_backend *be, void *dst, const void *src, size_t n) {
    abort_stale(g7_state_of(be), "a read while a window was open");
    MI_TRY(w_synchronize(be));   /* drain first, so the locked read does not wait on kernels */
    return locked_bytes(be, NULL, g7_state_of(be)->orig->read, dst, src, n);
}

static mi_status w_read_begin(mi_backend *be, void *dst, const void *src, size_t n) {
    return locked_bytes(be, "a read while a window was open", g7_state_of(be)->orig->read_begin, dst, src, n);
}

/* the wait on the read's event, outside the lock as w_synchronize's */
static mi_status w_read_wait(mi_backend *be) { return g7_state_of(be)->orig->read_wait(be); }

static mi_status w_copy(mi_backend *be, void *dst, const void *src, size_t n) {
    return locked_bytes(be, NULL, g7_state_of(be)->orig->copy, dst, src, n);
}

static mi_status w_buffer_alloc(mi_backend *be, size_t size, mi_buffer **out) {
    g7_state *s = g7_state_of(be);
    lock();
    mi_status st = s->orig->buffer_alloc(be, size, out);
    unlock();
    return st;
}

static void w_buffer_free(mi_backend *be, mi_buffer *buf) {
    g7_state *s = g7_state_of(be);
    lock();
    s->orig->buffer_free(be, buf);
    unlock();
}

static void state_release(g7_state *s) {
    if (s->sync_ev) MI_CU_WARN(cudaEventDestroy(s->sync_ev));
    staging_ring_free(&s->ring);
    free(s->slot_node);
    free(s->memo.slot_node);
    free(s);
}

static void w_destroy(mi_backend *be) {
    g7_state *s = g7_state_of(be);
    if (!s) return;
    pthread_mutex_lock(&g7_list_mu);   /* out of the list first: the list lock is never taken under the stream lock */
    for (g7_state **pp = &g7_states; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    pthread_mutex_unlock(&g7_list_mu);
    abort_stale(s, "backend destroyed while a window was open");
    lock();
    MI_CU_WARN(cudaStreamSynchronize(s->stream));   /* graphs and ring slots may be in flight */
    unlock();
    graph_cache_drop_all(&s->cache);
    const mi_backend_iface *orig = s->orig;
    be->iface = orig;
    lock();
    state_release(s);
    orig->destroy(be);   /* frees the step-params region with the context */
    unlock();
    graph_cache_free_retired();
}

static int64_t w_step_kernels(mi_backend *be) {
    const g7_state *s = g7_state_of(be);
    return s ? s->step_kernels : -1;
}

/* ---------------- wrap, create, install ---------------- */
mi_status mi_cuda_graph_wrap(mi_backend *be) {
    mi_cuda_ctx *c = mi_cuda_ctx_of(be);
    if (!c) return mi_err(MI_ERR_INVALID, "cuda graph: not a CUDA backend");
    if (g7_state_of(be)) return MI_OK;
    g7_state *s = calloc(1, sizeof *s);
    if (!s) return mi_err(MI_ERR_NOMEM, "cuda graph: out of host memory");
    s->slot_node = calloc(G7_MAX_SLOTS, sizeof *s->slot_node);
    s->memo.slot_node = calloc(G7_MAX_SLOTS, sizeof *s->memo.slot_node);
    s->be = be;
    s->c = c;
    s->stream = (cudaStream_t)mi_cuda_stream(c);
    s->device = mi_cuda_device_id(c);
    s->step_kernels = -1;
    s->orig = be->iface;
    mi_status st = s->slot_node && s->memo.slot_node ? MI_OK : mi_err(MI_ERR_NOMEM, "cuda graph: out of host memory");
    lock();
    if (st == MI_OK) st = mi_cudev_select(s->device);
    if (st == MI_OK) {
        void *p = NULL;
        st = mi_cuda_region_get(c, "7d.step_params", G7_MAX_SLOTS * sizeof(int32_t), &p);
        s->dparams = p;
    }
    if (st == MI_OK) st = staging_ring_init(&s->ring);
    if (st == MI_OK) {
        cudaError_t e = cudaEventCreateWithFlags(&s->sync_ev, cudaEventDisableTiming);
        if (e != cudaSuccess) st = mi_err(MI_ERR_DEVICE, "cuda graph: event: %s", cudaGetErrorString(e));
    }
    if (st != MI_OK) {
        (void)cudaGetLastError();
        if (s->dparams) mi_cuda_region_free(c, "7d.step_params");
        state_release(s);
        unlock();
        return mi_err_ctx(st, "cuda graph: wrapping the CUDA backend");
    }
    unlock();
    s->iface = *s->orig;
    s->iface.split_begin = w_split_begin;
    s->iface.execute_node = w_execute_node;
    s->iface.split_end = w_split_end;
    s->iface.synchronize = w_synchronize;
    s->iface.write = w_write;
    s->iface.read = w_read;
    s->iface.copy = w_copy;
    s->iface.read_begin = s->orig->read_begin && s->orig->read_wait ? w_read_begin : NULL;
    s->iface.read_wait = s->orig->read_begin && s->orig->read_wait ? w_read_wait : NULL;
    s->iface.buffer_alloc = w_buffer_alloc;
    s->iface.buffer_free = w_buffer_free;
    s->iface.destroy = w_destroy;
    s->iface.step_kernels = w_step_kernels;
    pthread_mutex_lock(&g7_list_mu);
    s->serial = ++g7_wrap_serial;
    s->next = g7_states;
    g7_states = s;
    pthread_mutex_unlock(&g7_list_mu);
    be->iface = &s->iface;
    return MI_OK;
}

/* ---------------- every wrapped backend: test entry points ---------------- */
int mi_cuda_graph_capturing_streams(void) {
    int n = 0;
    pthread_mutex_lock(&g7_list_mu);
    for (g7_state *s = g7_states; s; s = s->next) {
        lock();   /* waits for an open window of another thread to close */
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(s->stream, &cs) != cudaSuccess) (void)cudaGetLastError();
        else if (cs != cudaStreamCaptureStatusNone) n++;
        unlock();
    }
    pthread_mutex_unlock(&g7_list_mu);
    return n;
}

int mi_cuda_graph_flush(void) {
    int n = 0;
    pthread_mutex_lock(&g7_list_mu);
    for (g7_state *s = g7_states; s; s = s->next) n += graph_cache_drop_all(&s->cache);
    pthread_mutex_unlock(&g7_list_mu);
    graph_cache_free_retired();
    return n;
}

mi_status mi_cuda_graph_bump_generation(int *n_bumped) {
    int nb = 0;
    mi_status st = MI_OK;
    pthread_mutex_lock(&g7_list_mu);
    for (g7_state *s = g7_states; s && st == MI_OK; s = s->next) {
        lock();
        mi_cuda_pool *pool = mi_cuda_pool_of(s->c);
        const uint64_t g0 = mi_cuda_pool_generation(pool);
        /* a block the pool never handed out (a carve or a new chunk) changes the generation;
         * released at once, so the only lasting effect is the new generation */
        size_t size = ((size_t)8 << 20) + 256 * (size_t)s->serial;
        for (int tries = 0; tries < 6 && st == MI_OK && mi_cuda_pool_generation(pool) == g0; tries++, size *= 2) {
            void *p = NULL;
            st = mi_cuda_pool_alloc(pool, size, &p);
            if (st == MI_OK) st = mi_cuda_pool_release(pool, p);
        }
        if (mi_cuda_pool_generation(pool) != g0) nb++;
        unlock();
    }
    pthread_mutex_unlock(&g7_list_mu);
    if (n_bumped) *n_bumped = nb;
    return st;
}

/* Phase 7d: CUDA Graph capture and replay of decode steps (docs/PHASE7D.md). The install
 * wraps every CUDA backend made through the registry: a decode split is recorded once
 * into a CUDA graph and replayed with one cudaGraphLaunch per step; n_past reaches the
 * ATTN / KV_STORE kernels through a device "step params" buffer, so a growing KV cache
 * needs no recapture. Also the process-wide stream lock, counters and test switches.
 * Plain C; streams travel as void*. */
#ifndef MI_GRAPHS7D_H
#define MI_GRAPHS7D_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "common/backend/backend.h"
#include "phase7a_skeleton/cuda_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Counters, process-wide (all wrapped backends), since start or the last reset. */
typedef struct {
    uint64_t captures;            /* windows closed into an instantiated, cached graph */
    uint64_t recaptures;          /* captures that replaced a cached graph of the same shape
                                     whose pool generation or workspace had changed */
    uint64_t recaptures_generation; /* ... of which the pool generation had changed */
    uint64_t replays;             /* cudaGraphLaunch of a cached graph */
    uint64_t aborted_windows;     /* windows aborted by a node error (the step ran uncaptured) */
    uint64_t begin_failures;      /* cudaStreamBeginCapture failed (the step ran uncaptured) */
    uint64_t end_failures;        /* EndCapture / instantiate / launch of a new graph failed */
    uint64_t multi_step_rejected; /* a window that crossed a step boundary (never cached; must stay 0) */
    uint64_t direct_splits;       /* CUDA splits run by direct launches */
    uint64_t backoff_splits;      /* ... of which skipped capture after a recent failure */
    uint64_t npast_key_captures;  /* captures whose key holds n_past (ATTN/KV_STORE without device n_past) */
    uint64_t evictions;           /* cached graphs destroyed (LRU, replaced, flush, backend destroyed) */
    uint64_t cached;              /* graphs cached now, all backends */
    uint64_t staged_inputs;       /* Input copies through the pinned staging ring */
    uint64_t param_fills;         /* step-params uploads */
    uint64_t memo_splits;         /* decode splits that took the scan and key of the split before
                                     them (same graph version: the host skipped the hash) */
    uint64_t retired_freed_bytes; /* retired weight copies freed once no cached graph was left (7c) */
    uint64_t last_graph_nodes, max_graph_nodes;
} mi_cuda_graph_counters;
void mi_cuda_graph_stats(mi_cuda_graph_counters *out);
void mi_cuda_graph_stats_reset(void);   /* all but `cached` */

/* One record per successful capture (a ring of the last 256), oldest first. */
typedef struct {
    uint64_t backend_serial;      /* which wrapped backend (1, 2, ... in wrap order) */
    uint64_t shape_hash;          /* split identity without generation / workspace */
    uint64_t generation;          /* pool generation the graph was captured at */
    int compute_nodes;            /* graph nodes of the split inside the window */
    size_t graph_nodes, kernels, memcpys, memsets, others;   /* CUDA graph nodes by type */
} mi_cuda_graph_capture_rec;
int mi_cuda_graph_capture_log(mi_cuda_graph_capture_rec *out, int max);

/* On/off, process-wide, read at each split: default on unless MINFER_NO_CUDA_GRAPH=1.
 * Off: every split runs by direct launches (same kernels, same step params). */
void mi_cuda_graph_set_enabled(bool on);
bool mi_cuda_graph_enabled(void);

/* Input fills through the pinned staging ring: the dispatch item e6 (default on).
 * Off: an Input node is filled by the backend's own pageable copy, outside any window,
 * as with graphs off. Read at each split. The step params always use the ring. */
bool mi_cuda_graph_input_staging(void);

/* Failure injection (gate): MINFER_CUDA_GRAPH_FAIL=begin|node|sync[:COUNT] at install.
 * begin: cudaStreamBeginCapture fails (issued on the legacy stream, which CUDA refuses);
 * node: a node inside the window reports an error after its kernels were recorded;
 * sync: a node synchronizes its stream inside the window (a real CUDA error that
 * invalidates the capture, what hard rule 3 forbids). COUNT windows fail, < 0 = all. */
typedef enum { MI_GRAPH_FAIL_NONE = 0, MI_GRAPH_FAIL_BEGIN, MI_GRAPH_FAIL_NODE, MI_GRAPH_FAIL_SYNC } mi_graph_fail;
void mi_cuda_graph_set_fail(mi_graph_fail mode, int count);

/* Streams of wrapped backends that are capturing now (must be 0 between steps). */
int mi_cuda_graph_capturing_streams(void);
/* Destroy every cached graph of every backend (then frees retired weights); returns how many. */
int mi_cuda_graph_flush(void);
/* Test switch: make the pool generation of every wrapped backend change (a fresh pool
 * block is carved and released). *n_bumped: backends whose generation changed. */
mi_status mi_cuda_graph_bump_generation(int *n_bumped);

/* Wrap a CUDA backend made by mi_cuda_backend_new (the registry's "cuda" is wrapped
 * already). Idempotent. A failure leaves the backend unwrapped and working. */
mi_status mi_cuda_graph_wrap(mi_backend *be);
bool mi_cuda_graph_wrapped(mi_backend *be);

/* The process-wide stream lock (recursive). The capturer holds it from BeginCapture to
 * EndCapture; every other touch of a wrapped backend's stream (copies, launches, event
 * records, pool allocation) takes it per operation. Code outside the backend that
 * enqueues on a backend stream takes it too. */
void mi_cuda_stream_lock(void);
void mi_cuda_stream_unlock(void);

/* Step params: the device int32 holding node's n_past for the split being executed on
 * c, or NULL when none was assigned (the kernel then takes n_past from the node). Only
 * kernels flagged MI_CUDA_K_STEP_PARAMS (step_kernels.c) read it; for their nodes the
 * graph key leaves n_past out, so a growing KV cache replays the same graph. */
const int32_t *mi_cuda_step_param(mi_cuda_ctx *c, const mi_tensor *node);
/* Whether ATTN and KV_STORE have a candidate that reads n_past from the step params. */
bool mi_cuda_graph_npast_on_device(void);

/* Launchers (attn_kv_step.cu): 7b's ATTN / KV_STORE arithmetic with n_past read on the device.
 * q [hd*Hq, N], caches [hd*Hkv, n_ctx] (F16|F32) -> o [hd*Hq, N]; causal over 0..n_past+i */
mi_status mi7d_attn(void *stream, const float *q, const void *k, const void *v, mi_type ctype, float *o,
                    int64_t N, const int32_t *n_past_dev, int64_t n_ctx, int64_t hd, int64_t Hq, int64_t Hkv,
                    float scale);
/* x F32 [row, N] -> cache rows n_past .. n_past+N-1 (rows >= n_ctx dropped) */
mi_status mi7d_kv_store(void *stream, const float *x, void *cache, mi_type ctype, int64_t row, int64_t N,
                        const int32_t *n_past_dev, int64_t n_ctx);

void mi_phase7d_install(void);
/* step_kernels.c: add the ATTN / KV_STORE candidates that read n_past on the device */
void g7_add_step_kernels(void);

#ifdef __cplusplus
}
#endif
#endif

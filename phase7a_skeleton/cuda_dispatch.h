/* The CUDA dispatch: for each graph op, an ordered list of candidate kernels. Each phase's
 * install adds its candidates; a later phase adds faster ones in front and never wraps a
 * lower phase's function. For a node the first candidate whose switch items are all on
 * and whose supports() accepts the node runs; the choice is made once per node (at the
 * split's workspace sizing or its first execution) and kept in the node until the
 * dispatch epoch changes (a candidate added or removed, an item switched).
 *
 * Items are the named performance switches (docs/ARCHITECTURE.md lists them with what
 * each adds): MINFER_PERF_OFF=e2,e7 (or "all") removes the candidates of those items.
 * Plain C; streams travel as void*. */
#ifndef MI_CUDA_DISPATCH_H
#define MI_CUDA_DISPATCH_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "common/graph/graph.h"
#include "common/core/mi_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_cuda_ctx mi_cuda_ctx;

/* Enqueue the node's work on the backend stream (mi_cuda_stream); never synchronize. */
typedef mi_status (*mi_cuda_run_fn)(mi_cuda_ctx *c, const mi_tensor *node, void *workspace);
/* Pure: op x types x shapes x parameters; decided before execution. */
typedef bool (*mi_cuda_supports_fn)(const mi_tensor *node);
/* Device scratch bytes the kernel needs for node (e.g. its activations quantized). */
typedef size_t (*mi_cuda_workspace_fn)(const mi_tensor *node);
/* Host-side checks of the step's data a node reads (its Inputs' host bytes). */
typedef mi_status (*mi_cuda_check_fn)(const mi_tensor *node);

enum {
    /* reads n_past from the step params (mi_cuda_step_param) when the split has a slot for
     * the node, so a captured decode graph stays valid as the KV cache grows */
    MI_CUDA_K_STEP_PARAMS = 1u << 0,
    /* its launch (grid, arguments) depends only on the node's shapes, params and data
     * pointers, and whatever a step changes it reads from the device (Inputs): a split of a
     * step of many sequences whose ATTN_PAGED kernel carries it may be captured and replayed */
    MI_CUDA_K_REPLAYABLE = 1u << 1,
};

typedef struct mi_cuda_kernel {
    const char *name;                 /* what it does: "matmul, one token, Q4_K streaming" */
    const char *items;                /* switches that must all be on ("e12,e14"); NULL: none */
    mi_cuda_supports_fn supports;
    mi_cuda_run_fn run;
    mi_cuda_workspace_fn workspace;   /* NULL: none */
    unsigned flags;                   /* MI_CUDA_K_* */
} mi_cuda_kernel;

/* Put k in front of op's candidates (k must outlive the process' use of the dispatch;
 * adding the same k twice moves it to the front). Bumps the epoch. */
void mi_cuda_add_kernel(mi_op op, const mi_cuda_kernel *k);
/* Take k out of op's candidates (no-op if absent). Bumps the epoch. */
void mi_cuda_remove_kernel(mi_op op, const mi_cuda_kernel *k);
/* op's candidates, front first, whatever the items say; returns the count (may exceed max). */
int mi_cuda_kernels(mi_op op, const mi_cuda_kernel **out, int max);

/* The kernel that runs node: the cached choice if the epoch still holds, else the first
 * candidate with every item on that supports node (stored in the node). NULL: none. */
const mi_cuda_kernel *mi_cuda_choose(mi_tensor *node);
/* Choose (as mi_cuda_choose), count and run node's kernel; MI_ERR_UNSUPPORTED if none. */
mi_status mi_cuda_dispatch_run(mi_cuda_ctx *c, mi_tensor *node, void *workspace);
/* The same decision without touching the node (the backend's supports(), probes). */
const mi_cuda_kernel *mi_cuda_choice(const mi_tensor *node);
/* Changes whenever any choice may change; a captured graph keys on it. */
uint64_t mi_cuda_dispatch_epoch(void);
/* An op's host checks of its step data (the CPU op's rules), which its kernels' run() make
 * before they launch. A launch replayed from a captured graph calls no run(): the replay
 * calls mi_cuda_op_check in its place, so a bad table stays an error of the step. One check
 * an op (set again: replaced; NULL: none); mi_cuda_op_check is MI_OK for an op without. */
void mi_cuda_set_op_check(mi_op op, mi_cuda_check_fn f);
mi_status mi_cuda_op_check(const mi_tensor *node);
/* Runs of each kernel since start (launch count, not replays of a captured graph). */
uint64_t mi_cuda_kernel_runs(const mi_cuda_kernel *k);
/* Runs summed over every kernel carrying item (NULL: the kernels with no item). */
uint64_t mi_cuda_item_runs(const char *item);

/* ---- items ---- */
/* Declare a switch (name like "e2", what it adds). Idempotent. */
void mi_cuda_item_declare(const char *name, const char *what);
/* Turn off exactly the items in list ("e2,e7", "all", "" or "none" = all on). Unknown name:
 * MI_ERR_INVALID and nothing changes. Bumps the epoch when the set changes. */
mi_status mi_cuda_items_set_off(const char *list);
/* Whether item is on (an undeclared name is on). The first call applies MINFER_PERF_OFF. */
bool mi_cuda_item_on(const char *name);
/* Whether the launchers of the small kernels of a step (activation quantization, warp-per-row
 * matmul, norms, RoPE, KV store, attention, adds) launch them as programmatic dependents
 * (phase7a_skeleton/cuda_pdl.cuh): what the policy an upper phase set (8a's item d10) says for
 * the node being run (mi_cuda_dispatch_run's; NULL outside it), else no. Each of those kernels
 * triggers its dependents and waits for the kernel before it as its first two instructions, so a
 * launch with the attribute changes when it starts, never what it computes. */
bool mi_cuda_pdl_small(void);
void mi_cuda_pdl_set_policy(bool (*policy)(const mi_tensor *node));
/* The number of the run mi_cuda_dispatch_run is in on this thread (each run one more than the
 * one before it; 0 outside a run): a launcher can tell that two of its calls come from the same
 * node or from two nodes run one right after the other, with nothing launched between them but
 * its own kernels. */
uint64_t mi_cuda_dispatch_serial(void);
/* A copy of an activation x (K x N, in a form the caller names) left at the start of the
 * workspace by a run's kernels. Every node gets the same workspace, so that copy is still there
 * for the run the dispatch makes right after it, and for nothing later. A run that made one
 * records it once its launches went through; a run about to read x asks whether the copy is
 * there (made by this run or the one just before, of the same x, shape, workspace and form) and
 * else makes its own; a run that writes the workspace clears the record first. One record a
 * thread; a 7d capture records the decision its replays repeat. */
enum { MI_WS_COPY_F16_PAIRS = 1, MI_WS_COPY_F16_EVENS_ODDS = 2, MI_WS_COPY_Q8_1 = 3 };   /* 8b's f16 forms, 8a's 8-bit blocks */
void mi_cuda_ws_copy_made(int form, const void *x, const void *ws, int64_t K, int64_t N);
bool mi_cuda_ws_copy_ready(int form, const void *x, const void *ws, int64_t K, int64_t N);
void mi_cuda_ws_copy_clear(void);
/* Whether every item of a kernel's list ("e12,e14"; NULL or "" = none) is on. */
bool mi_cuda_items_on(const char *items);
/* "on: e2,e5; off: none" */
void mi_cuda_items_describe(char *buf, size_t n);
/* name and description of the i-th declared item (false past the end) */
bool mi_cuda_item_at(int i, const char **name, const char **what);

#ifdef __cplusplus
}
#endif
#endif

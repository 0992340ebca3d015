/* Phase 7c: model wiring for CUDA. What its files share, and what gates and later
 * phases (7d) may call: the resident weight registry, per-model placement, the fused
 * FFN kernel's launcher and the counters the gate reads. Plain C. */
#ifndef MI_WIRING7C_H
#define MI_WIRING7C_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "common/backend/hooks.h"
#include "common/model/mi.h"
#include "phase7a_skeleton/cuda_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- resident weight registry (weights.c): name -> one device copy ----
 * Same name and same size: the same copy (refcount + 1, nothing uploaded). Same name,
 * other size: a new copy takes the name; the old one moves to the retired list with
 * its holders' references and is never freed while a captured graph may point at it:
 * only mi7c_weights_free_retired() frees retired copies (7d calls it once no captured
 * graph can reference them), and only those whose holders have all released them. */
mi_status mi7c_weight_register(int device, const char *name, const void *host, size_t size, void *stream,
                               void **dev, bool *uploaded);
/* Drop one reference to the copy at dev registered as name; the last one frees it
 * (an active entry) or leaves it for mi7c_weights_free_retired (a retired one). */
void mi7c_weight_release(const char *name, void *dev);
size_t mi7c_weights_free_retired(void);
typedef struct {
    int n_entries, n_retired;
    size_t bytes, retired_bytes;
    uint64_t n_uploads, n_reuses, n_replaced;
    uint64_t bytes_uploaded;
} mi7c_weight_stats;
void mi7c_weights_stats(mi7c_weight_stats *out);

/* ---- per model (model7c.c) ---- */
/* Whether a loaded model's weights live on the device, and if not, why. */
bool mi7c_model_on_cuda(const mi_model *m, char *why, size_t n);
/* Eligibility (eligible7c.c): architecture and every weight type against the CUDA op
 * table, probed with stand-in nodes of the model's real shapes. */
bool mi7c_model_eligible(const mi_model *m, char *why, size_t n);

/* ---- internal: a model's device placement (model7c.c), used by session7c.c ---- */
typedef struct m7c_model m7c_model;
/* The placement of m (NULL if model_loaded never saw it); *on_cuda, device, why. */
m7c_model *m7c_model_find(const mi_model *m);
bool m7c_model_resident(const m7c_model *ms, int *device, char *why, size_t n);
/* Device copy of weight `name` (the GGUF tensor name), NULL if it has none. */
void *m7c_model_weight(const m7c_model *ms, const char *name);
const char *m7c_model_label(const m7c_model *ms);   /* file name, for messages */
bool m7c_model_upload_failed(const m7c_model *ms);

/* hooks (session7c.c, model7c.c) */
void m7c_model_loaded(struct mi_model *m, const char *path);
void m7c_model_free(struct mi_model *m);
mi_status m7c_session_open(struct mi_model *m, const char *want, mi_backend **cuda, void **state);
void m7c_session_close(void *state);
mi_status m7c_graph_pass(void *state, mi_graph *g);
uint64_t m7c_graph_epoch(void *state);
/* fusion.c: fuse gate/up/SwiGLU triples the CUDA backend can run; returns the count. */
int m7c_fuse_ffn(mi_graph *g, mi_backend *cuda);
/* More fusion passes, added by higher phases' installs: each runs after the FFN fusion, in
 * the order added, on every graph of a CUDA session (MINFER_NO_FUSION turns all off). A pass
 * rewrites only nodes the CUDA backend accepts in their fused form (its supports()) and
 * returns the number of fusions made. Up to MI7C_MAX_FUSIONS; adding one twice is a no-op. */
typedef int (*mi7c_fusion_fn)(mi_graph *g, mi_backend *cuda);
#define MI7C_MAX_FUSIONS 8
void mi7c_add_fusion(mi7c_fusion_fn fn);

/* ---- counters for gates (session7c.c) ---- */
typedef struct {
    uint64_t graphs;              /* graphs passed */
    uint64_t weight_srcs;         /* weight operands pointed at device copies */
    uint64_t host_weight_srcs;    /* weight operands left on the host (must stay 0) */
    uint64_t fused;               /* gate/up/SwiGLU triples fused */
    uint64_t fused_more;          /* fusions made by the passes of mi7c_add_fusion */
} mi7c_pass_stats;
void mi7c_pass_stats_get(mi7c_pass_stats *out);

/* ---- fused FFN kernel (ffn_fused.cu) ----
 * W_gate, W_up [K, F] (type wt) @ x F32 [K, N] -> silu(gate) * up F32 [F, N], N <= 8. */
#define MI7C_FUSE_MAX_N 8
bool mi7c_ffn_supported(mi_type wt, int64_t K, int64_t N);
size_t mi7c_ffn_workspace(mi_type wt, int64_t K, int64_t N);
mi_status mi7c_ffn_swiglu(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                          int64_t K, int64_t F, int64_t N, void *workspace);

/* The FFN_SWIGLU nodes 7c's kernel accepts (install7c.c); 7e's candidates take a subset. */
bool mi7c_ffn_node_supported(const mi_tensor *node);

void mi_phase7c_install(void);

#ifdef __cplusplus
}
#endif
#endif

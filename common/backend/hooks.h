/* Hooks: the few points where common code lets a CUDA phase add behaviour without
 * naming it (model load and free, session open and close, a graph pass after build).
 * A phase's install fills mi_hooks; a NULL entry means "no hook" and the plain
 * behaviour (CPU-only build, PHASE=7a/7b). Also the process-wide load guard. */
#ifndef MI_HOOKS_H
#define MI_HOOKS_H
#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mi_model;

typedef struct {
    /* After a model is bound (weight leaves point into the file mapping), with the load
     * guard held. May decide CUDA eligibility and upload the weights; it never fails the
     * load: a model that cannot live on the device runs on the CPU (the hook logs why). */
    void (*model_loaded)(struct mi_model *m, const char *path);
    /* Before a model's memory goes: release what model_loaded took (device weights). */
    void (*model_free)(struct mi_model *m);
    /* Session open, with the load guard held, after the session's backends exist and
     * before its scheduler and KV cache: *cuda (NULL when the session has no CUDA
     * backend) may be destroyed and set to NULL, making the session CPU-only. want is the
     * request ("auto", "cuda"); a failure is returned only when want is "cuda".
     * *state receives per-session state (may stay NULL). */
    mi_status (*session_open)(struct mi_model *m, const char *want, mi_backend **cuda, void **state);
    void (*session_close)(void *state);
    /* After model_build_graph, before the scheduler assigns backends: may rewrite the
     * graph (device copies of weights, fusions). state: from session_open. */
    mi_status (*graph_pass)(void *state, mi_graph *g);
    /* A number that changes whenever a graph graph_pass rewrote may no longer be valid (the
     * kernels a backend would choose changed, so its fusions may not be accepted any more);
     * a session rebuilds the decode graph it reuses when it differs. NULL: never changes. */
    uint64_t (*graph_epoch)(void *state);
} mi_hook_table;

extern mi_hook_table mi_hooks;

/* Wrappers common code calls: each is a no-op (MI_OK) when the hook is NULL. */
void mi_hook_model_loaded(struct mi_model *m, const char *path);
void mi_hook_model_free(struct mi_model *m);
mi_status mi_hook_session_open(struct mi_model *m, const char *want, mi_backend **cuda, void **state);
void mi_hook_session_close(void *state);
mi_status mi_hook_graph_pass(void *state, mi_graph *g);
uint64_t mi_hook_graph_epoch(void *state);

/* The load guard: one process-wide mutex held while a model's placement is decided
 * (model_loaded) and while a session chooses its backends and places its KV cache,
 * so those choices are made atomically (docs/PHASE7C.md). Not recursive. */
void mi_load_guard_lock(void);
void mi_load_guard_unlock(void);

#ifdef __cplusplus
}
#endif
#endif

/* The hook table (hooks.h) and the load guard. Phases fill mi_hooks in their install;
 * the wrappers below are what common code calls, so a missing hook costs one branch. */
#include "hooks.h"
#include <pthread.h>

mi_hook_table mi_hooks;

static pthread_mutex_t g_guard = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_install_once = PTHREAD_ONCE_INIT;

void mi_load_guard_lock(void) { pthread_mutex_lock(&g_guard); }
void mi_load_guard_unlock(void) { pthread_mutex_unlock(&g_guard); }

/* A library user who never called mi_phases_install still gets the phases' hooks
 * on the first load; pthread_once makes that safe from several threads. */
static void install_phases(void) { mi_phases_install(); }

void mi_hook_model_loaded(struct mi_model *m, const char *path) {
    pthread_once(&g_install_once, install_phases);
    if (!mi_hooks.model_loaded) return;
    mi_load_guard_lock();
    mi_hooks.model_loaded(m, path);
    mi_load_guard_unlock();
}

void mi_hook_model_free(struct mi_model *m) {
    if (mi_hooks.model_free) mi_hooks.model_free(m);
}

mi_status mi_hook_session_open(struct mi_model *m, const char *want, mi_backend **cuda, void **state) {
    *state = NULL;
    return mi_hooks.session_open ? mi_hooks.session_open(m, want, cuda, state) : MI_OK;
}

void mi_hook_session_close(void *state) {
    if (state && mi_hooks.session_close) mi_hooks.session_close(state);
}

mi_status mi_hook_graph_pass(void *state, mi_graph *g) {
    if (!state || !mi_hooks.graph_pass) return MI_OK;
    mi_status st = mi_hooks.graph_pass(state, g);
    graph_touch(g);   /* the pass rewrites nodes in place */
    return st;
}

uint64_t mi_hook_graph_epoch(void *state) {
    return (state && mi_hooks.graph_epoch) ? mi_hooks.graph_epoch(state) : 0;
}

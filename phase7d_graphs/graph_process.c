/* Phase 7d's process-wide side: the stream lock, counters and capture log, the on/off
 * and failure-injection switches. Nothing here knows a wrapped backend (graphs7d.c). */
#include "phase7d_graphs/graph_process.h"
#include "common/core/mi_settings.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

static pthread_mutex_t g_stream_mu;                              /* the stream lock (recursive) */
static pthread_once_t g_stream_once = PTHREAD_ONCE_INIT;

pthread_mutex_t g7_st_mu = PTHREAD_MUTEX_INITIALIZER;
mi_cuda_graph_counters g7_st;
static mi_cuda_graph_capture_rec g_log[G7_LOG_N];
static uint64_t g_log_n;
static mi_graph_fail g_fail_mode;
static int g_fail_left;

static int g_enabled = 1;

static void stream_lock_init(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&g_stream_mu, &a);
    pthread_mutexattr_destroy(&a);
}
void mi_cuda_stream_lock(void) {
    pthread_once(&g_stream_once, stream_lock_init);
    pthread_mutex_lock(&g_stream_mu);
}
void mi_cuda_stream_unlock(void) { pthread_mutex_unlock(&g_stream_mu); }


void mi_cuda_graph_stats(mi_cuda_graph_counters *out) {
    pthread_mutex_lock(&g7_st_mu);
    *out = g7_st;
    pthread_mutex_unlock(&g7_st_mu);
}

void mi_cuda_graph_stats_reset(void) {
    pthread_mutex_lock(&g7_st_mu);
    uint64_t cached = g7_st.cached;
    memset(&g7_st, 0, sizeof g7_st);
    g7_st.cached = cached;
    g_log_n = 0;
    pthread_mutex_unlock(&g7_st_mu);
}

int mi_cuda_graph_capture_log(mi_cuda_graph_capture_rec *out, int max) {
    pthread_mutex_lock(&g7_st_mu);
    uint64_t have = g_log_n < G7_LOG_N ? g_log_n : G7_LOG_N;
    int n = (int)(have < (uint64_t)max ? have : (uint64_t)max);
    for (int i = 0; i < n; i++) out[i] = g_log[(g_log_n - (uint64_t)n + (uint64_t)i) % G7_LOG_N];
    pthread_mutex_unlock(&g7_st_mu);
    return n;
}

void mi_cuda_graph_set_enabled(bool on) { __atomic_store_n(&g_enabled, on ? 1 : 0, __ATOMIC_RELAXED); }
bool mi_cuda_graph_enabled(void) { return __atomic_load_n(&g_enabled, __ATOMIC_RELAXED) != 0; }

bool mi_cuda_graph_input_staging(void) { return mi_cuda_item_on("e6"); }

static bool g_key_each_step;
bool g7_key_each_step(void) { return g_key_each_step; }

void mi_cuda_graph_set_fail(mi_graph_fail mode, int count) {
    pthread_mutex_lock(&g7_st_mu);
    g_fail_mode = mode;
    g_fail_left = count;
    pthread_mutex_unlock(&g7_st_mu);
}

bool g7_take_fail(mi_graph_fail mode) {
    bool r = false;
    pthread_mutex_lock(&g7_st_mu);
    if (g_fail_mode == mode && g_fail_left != 0) {
        if (g_fail_left > 0) g_fail_left--;
        r = true;
    }
    pthread_mutex_unlock(&g7_st_mu);
    return r;
}

/* n_past on the device: both ops have a candidate that reads the step params (the one
 * that runs for a decode node; the prefill candidates in front of it take N >= 16 only) */
static bool has_step_kernel(mi_op op) {
    const mi_cuda_kernel *k[16];
    const int n = mi_cuda_kernels(op, k, 16);
    for (int i = 0; i < n && i < 16; i++)
        if (k[i]->flags & MI_CUDA_K_STEP_PARAMS) return true;
    return false;
}
bool mi_cuda_graph_npast_on_device(void) { return has_step_kernel(MI_OP_ATTN) && has_step_kernel(MI_OP_KV_STORE); }

/* "loudly": an aborted window is an error line whatever MINFER_LOG says */
void g7_loud(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("minfer: cuda graph: ERROR: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void g7_log_append(const mi_cuda_graph_capture_rec *r, bool npast_in_key) {
    pthread_mutex_lock(&g7_st_mu);
    g_log[g_log_n % G7_LOG_N] = *r;
    g_log_n++;
    g7_st.captures++;
    if (npast_in_key) g7_st.npast_key_captures++;
    g7_st.last_graph_nodes = r->graph_nodes;
    if (r->graph_nodes > g7_st.max_graph_nodes) g7_st.max_graph_nodes = r->graph_nodes;
    pthread_mutex_unlock(&g7_st_mu);
}

/* MINFER_NO_CUDA_GRAPH, MINFER_CUDA_GRAPH_FAIL, MINFER_GRAPH_KEY_EACH_STEP: read once, at install */
void g7_parse_env(void) {
    if (mi_setting_on("MINFER_NO_CUDA_GRAPH")) mi_cuda_graph_set_enabled(false);
    g_key_each_step = mi_setting_on("MINFER_GRAPH_KEY_EACH_STEP");
    const char *e = mi_setting("MINFER_CUDA_GRAPH_FAIL");
    if (e && *e) {
        mi_graph_fail m = !strncmp(e, "begin", 5) ? MI_GRAPH_FAIL_BEGIN
                          : !strncmp(e, "node", 4) ? MI_GRAPH_FAIL_NODE
                          : !strncmp(e, "sync", 4) ? MI_GRAPH_FAIL_SYNC : MI_GRAPH_FAIL_NONE;
        const char *colon = strchr(e, ':');
        int count = colon ? atoi(colon + 1) : -1;
        if (m == MI_GRAPH_FAIL_NONE) mi_log("MINFER_CUDA_GRAPH_FAIL='%s' ignored (begin|node|sync[:COUNT])", e);
        else mi_cuda_graph_set_fail(m, count);
    }
}

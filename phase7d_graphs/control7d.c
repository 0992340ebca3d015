/* Phase 7d's process-wide side: the stream lock, counters and capture log, the on/off
 * and failure-injection switches, the registry of execs that read n_past on the device,
 * the test entry points that walk every wrapped backend, and the install (the
 * registry's "cuda" becomes 7a's backend wrapped by graphs7d.c). */
#include "phase7d_graphs/g7_internal.h"
#include "phase7a_skeleton/cuda_check.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

pthread_mutex_t g7_list_mu = PTHREAD_MUTEX_INITIALIZER;
g7_state *g7_states;
uint64_t g7_wrap_serial;

static pthread_mutex_t g_stream_mu;                              /* the stream lock (recursive) */
static pthread_once_t g_stream_once = PTHREAD_ONCE_INIT;

pthread_mutex_t g7_st_mu = PTHREAD_MUTEX_INITIALIZER;
mi_cuda_graph_counters g7_st;
static mi_cuda_graph_capture_rec g_log[G7_LOG_N];
static uint64_t g_log_n;
static mi_graph_fail g_fail_mode;
static int g_fail_left;

static int g_enabled = 1;

#define G7_MAX_STEP_OPS 8
static mi_cuda_exec_fn g_step_ops[G7_MAX_STEP_OPS];
static int g_n_step_ops;


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

static int g_input_staging = 1;
void mi_cuda_graph_set_input_staging(bool on) { __atomic_store_n(&g_input_staging, on ? 1 : 0, __ATOMIC_RELAXED); }
bool mi_cuda_graph_input_staging(void) { return __atomic_load_n(&g_input_staging, __ATOMIC_RELAXED) != 0; }

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

void mi_cuda_graph_register_step_op(mi_cuda_exec_fn exec) {
    if (!exec) return;
    for (int i = 0; i < g_n_step_ops; i++)
        if (g_step_ops[i] == exec) return;
    if (g_n_step_ops < G7_MAX_STEP_OPS) g_step_ops[g_n_step_ops++] = exec;
}

bool g7_is_step_exec(mi_cuda_exec_fn ex) {
    for (int i = 0; ex && i < g_n_step_ops; i++)
        if (g_step_ops[i] == ex) return true;
    return false;
}

bool mi_cuda_graph_npast_on_device(void) {
    mi_cuda_exec_fn a = NULL, k = NULL;
    mi_cuda_get_op(MI_OP_ATTN, &a, NULL, NULL);
    mi_cuda_get_op(MI_OP_KV_STORE, &k, NULL, NULL);
    return g7_is_step_exec(a) && g7_is_step_exec(k);
}

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

static void lock(void) { mi_cuda_stream_lock(); }
static void unlock(void) { mi_cuda_stream_unlock(); }

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
    for (g7_state *s = g7_states; s; s = s->next) n += g7_cache_drop_all(s);
    pthread_mutex_unlock(&g7_list_mu);
    g7_maybe_free_retired();
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

/* The registry's "cuda": whatever the phases below registered (7a's constructor, which
 * reads MINFER_CUDA_DEVICE), wrapped with capture/replay. */
static mi_backend_create_fn g7_inner;
static mi_status g7_create(mi_backend **out) {
    if (!g7_inner) return mi_err(MI_ERR_INTERNAL, "cuda graph: no CUDA backend registered below phase 7d");
    MI_TRY(g7_inner(out));
    if (mi_cuda_graph_wrap(*out) != MI_OK) {
        mi_log("cuda graph: %s: this backend runs without graphs", mi_errmsg());
        mi_err_clear();
    }
    return MI_OK;
}

static void parse_env(void) {
    const char *e = getenv("MINFER_NO_CUDA_GRAPH");
    if (e && *e && strcmp(e, "0") != 0) mi_cuda_graph_set_enabled(false);
    e = getenv("MINFER_CUDA_GRAPH_FAIL");
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

void mi_phase7d_install(void) {
    m7d_install_step_ops();
    parse_env();
    mi_backend_create_fn inner = mi_backend_registered("cuda");
    if (inner && inner != g7_create) g7_inner = inner;   /* a second install keeps the first inner */
    mi_backend_register("cuda", g7_create);
}

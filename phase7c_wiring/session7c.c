/* Sessions over a placed model (hooks session_open/close, graph_pass). A session takes
 * CUDA only when its model's weights are resident (decided once, at load); else an
 * "auto" session drops its CUDA backend and runs wholly on the CPU, and a "cuda" one is
 * refused with the reason. The graph pass points every weight operand at the device
 * copy (per-session shadow leaves: the model's own leaves stay host-bound, so CPU
 * sessions of the same model are untouched), checks the KV placement, then fuses. */
#include "phase7c_wiring/wiring7c.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "common/core/mi_settings.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

typedef struct {
    const mi_tensor *leaf;   /* the model's host-bound leaf */
    mi_tensor *shadow;       /* its device twin: same shape and name, data = device copy */
} shadow_ent;

typedef struct {
    m7c_model *ms;
    mi_backend *cuda;
    bool fuse;
    shadow_ent *map;         /* open addressing on the leaf pointer, cap a power of 2 */
    int cap, n;
} m7c_session;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static mi7c_pass_stats g_st;

void mi7c_pass_stats_get(mi7c_pass_stats *out) {
    pthread_mutex_lock(&g_mu);
    *out = g_st;
    pthread_mutex_unlock(&g_mu);
}

mi_status m7c_session_open(struct mi_model *m, const char *want, mi_backend **cuda, void **state) {
    *state = NULL;
    if (!*cuda) return MI_OK;   /* CPU session: nothing to place */
    const bool is_auto = strcmp(want, "cuda") != 0;
    m7c_model *ms = m7c_model_find(m);
    char why[400] = "no CUDA placement was made for this model";
    int dev = -1;
    bool ok = ms && m7c_model_resident(ms, &dev, why, sizeof why);
    mi_cuda_ctx *c = mi_cuda_ctx_of(*cuda);
    if (ok && (!c || mi_cuda_device_id(c) != dev)) {
        snprintf(why, sizeof why, "its weights are on CUDA device %d, the session's backend is on another", dev);
        ok = false;
    }
    if (!ok && is_auto) {
        /* the model already said why at load; an "auto" session follows that decision */
        (*cuda)->iface->destroy(*cuda);
        *cuda = NULL;
        return MI_OK;
    }
    if (!ok && !is_auto && mi_model_cpu_only(m)) {
        (*cuda)->iface->destroy(*cuda);
        *cuda = NULL;
        return mi_err(MI_ERR_INVALID, "backend 'cuda': %s was loaded with backend cpu; load it with cuda or auto",
                      ms ? m7c_model_label(ms) : "the model");
    }
    if (!ok && ms && m7c_model_upload_failed(ms)) {
        /* asked for CUDA, and the device could not take the weights: say so */
        (*cuda)->iface->destroy(*cuda);
        *cuda = NULL;
        return mi_err(MI_ERR_DEVICE, "backend 'cuda': %s cannot run on CUDA: %s", m7c_model_label(ms), why);
    }
    if (!ok) {
        /* An explicit "cuda" on a model CUDA cannot run wholly is a developer's override
         * (the earlier phases' gates run partial op tables this way): the scheduler puts
         * each op where supports() allows, and the weights stay in host memory. */
        mi_log("cuda: %s is not CUDA-resident (%s): --backend cuda runs the ops CUDA supports, the rest and "
               "the weights stay on the CPU", ms ? m7c_model_label(ms) : "the model", why);
        return MI_OK;
    }
    m7c_session *s = calloc(1, sizeof *s);
    if (!s) return mi_err(MI_ERR_NOMEM, "out of host memory");
    s->ms = ms;
    s->cuda = *cuda;
    s->fuse = !mi_setting_on("MINFER_NO_FUSION");
    s->cap = 1024;
    s->map = calloc((size_t)s->cap, sizeof *s->map);
    if (!s->map) {
        free(s);
        return mi_err(MI_ERR_NOMEM, "out of host memory");
    }
    *state = s;
    return MI_OK;
}

void m7c_session_close(void *state) {
    m7c_session *s = state;
    if (!s) return;
    for (int i = 0; i < s->cap; i++) free(s->map[i].shadow);
    free(s->map);
    free(s);
}

static size_t slot_of(const void *p, int cap) {
    uintptr_t h = (uintptr_t)p;
    h ^= h >> 17;
    h *= (uintptr_t)0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 7) & (size_t)(cap - 1);
}

static mi_status grow(m7c_session *s) {
    int cap = s->cap * 2;
    shadow_ent *nm = calloc((size_t)cap, sizeof *nm);
    if (!nm) return mi_err(MI_ERR_NOMEM, "out of host memory");
    for (int i = 0; i < s->cap; i++) {
        if (!s->map[i].leaf) continue;
        size_t k = slot_of(s->map[i].leaf, cap);
        while (nm[k].leaf) k = (k + 1) & (size_t)(cap - 1);
        nm[k] = s->map[i];
    }
    free(s->map);
    s->map = nm;
    s->cap = cap;
    return MI_OK;
}

/* The device twin of a weight leaf; made the first time the leaf is seen. Its address
 * stays fixed for the session's life (a captured graph may hold it). */
static mi_status shadow_of(m7c_session *s, const mi_tensor *leaf, mi_tensor **out) {
    size_t k = slot_of(leaf, s->cap);
    while (s->map[k].leaf) {
        if (s->map[k].leaf == leaf) {
            *out = s->map[k].shadow;
            return MI_OK;
        }
        k = (k + 1) & (size_t)(s->cap - 1);
    }
    void *dev = m7c_model_weight(s->ms, leaf->name);
    if (!dev) return mi_err(MI_ERR_INTERNAL, "cuda: weight '%s' has no device copy", leaf->name);
    mi_tensor *t = malloc(sizeof *t);
    if (!t) return mi_err(MI_ERR_NOMEM, "out of host memory");
    *t = *leaf;
    t->data = dev;
    t->backend = s->cuda->index;
    t->id = -1;
    s->map[k].leaf = leaf;
    s->map[k].shadow = t;
    if (++s->n * 2 > s->cap) MI_TRY(grow(s));
    *out = t;
    return MI_OK;
}

/* A graph this pass rewrote holds the fusions the dispatch accepted then: when its choices
 * change (an item switched, a candidate added), a session must rebuild the graph it reuses. */
uint64_t m7c_graph_epoch(void *state) {
    (void)state;
    return mi_cuda_dispatch_epoch();
}

static mi7c_fusion_fn g_fusions[MI7C_MAX_FUSIONS];
static int g_n_fusions;

void mi7c_add_fusion(mi7c_fusion_fn fn) {
    pthread_mutex_lock(&g_mu);
    bool have = false;
    for (int i = 0; i < g_n_fusions; i++) have = have || g_fusions[i] == fn;
    if (!have && fn && g_n_fusions < MI7C_MAX_FUSIONS) g_fusions[g_n_fusions++] = fn;
    pthread_mutex_unlock(&g_mu);
}

mi_status m7c_graph_pass(void *state, mi_graph *g) {
    m7c_session *s = state;
    if (!s) return MI_OK;
    uint64_t n_w = 0, n_host = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        mi_tensor *t = g->nodes[i];
        for (int j = 0; j < MI_MAX_SRC; j++) {
            mi_tensor *sr = t->src[j];
            if (!sr || sr->op != MI_OP_NONE || !(sr->flags & MI_T_WEIGHT)) continue;
            mi_tensor *sh = NULL;
            MI_TRY(shadow_of(s, sr, &sh));
            t->src[j] = sh;
            n_w++;
        }
        /* The KV cache lives where attention runs (session.c's probe, under the load guard).
         * An attention the CUDA backend runs over a cache on the CPU is the mix the guard
         * exists to prevent: refuse it here rather than copy the cache every step. */
        if (t->op == MI_OP_ATTN && t->src[1] && t->src[2] && t->src[1]->op == MI_OP_KV_STORE) {
            const mi_tensor *cache = t->src[1]->src[1];
            if (cache && cache->backend != s->cuda->index && s->cuda->iface->supports(s->cuda, t) &&
                s->cuda->iface->supports(s->cuda, t->src[1]) && s->cuda->iface->supports(s->cuda, t->src[2]))
                return mi_err(MI_ERR_INTERNAL, "cuda session: KV cache %s is not on the CUDA backend (placement mixed)",
                              cache->name);
        }
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < MI_MAX_SRC; j++) {
            const mi_tensor *sr = g->nodes[i]->src[j];
            if (sr && sr->op == MI_OP_NONE && (sr->flags & MI_T_WEIGHT) && sr->backend != s->cuda->index) n_host++;
        }
    int fused = s->fuse ? m7c_fuse_ffn(g, s->cuda) : 0, more = 0;
    pthread_mutex_lock(&g_mu);
    const int n_fusions = g_n_fusions;
    pthread_mutex_unlock(&g_mu);
    for (int i = 0; s->fuse && i < n_fusions; i++) more += g_fusions[i](g, s->cuda);
    pthread_mutex_lock(&g_mu);
    g_st.fused_more += (uint64_t)more;
    g_st.graphs++;
    g_st.weight_srcs += n_w;
    g_st.host_weight_srcs += n_host;
    g_st.fused += (uint64_t)fused;
    pthread_mutex_unlock(&g_mu);
    if (n_host) return mi_err(MI_ERR_INTERNAL, "cuda session: %llu weight operand(s) left on the host", (unsigned long long)n_host);
    return MI_OK;
}

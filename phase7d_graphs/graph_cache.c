/* phase7d_graphs/graph_cache.h */
#include "phase7d_graphs/graph_cache.h"
#include "phase7d_graphs/graph_process.h"
#include "phase7a_skeleton/cuda_check.h"
#include "phase7c_wiring/wiring7c.h"
#include <string.h>

void graph_cache_free_retired(void) {
    pthread_mutex_lock(&g7_st_mu);
    bool empty = g7_st.cached == 0;
    pthread_mutex_unlock(&g7_st_mu);
    /* 7c frees a replaced weight copy only when told no captured graph can hold it */
    if (!empty) return;
    size_t freed = mi7c_weights_free_retired();
    if (freed) STAT_ADD(retired_freed_bytes, freed);
}

void graph_cache_drop(graph_entry *e) {
    if (!e->used) return;
    mi_cuda_stream_lock();
    MI_CU_WARN(cudaGraphExecDestroy(e->exec));   /* an in-flight launch completes first */
    mi_cuda_stream_unlock();
    memset(e, 0, sizeof *e);
    pthread_mutex_lock(&g7_st_mu);
    g7_st.evictions++;
    g7_st.cached--;
    pthread_mutex_unlock(&g7_st_mu);
}

int graph_cache_drop_all(graph_cache *c) {
    int n = 0;
    for (int i = 0; i < GRAPH_CACHE_MAX; i++)
        if (c->e[i].used) {
            graph_cache_drop(&c->e[i]);
            n++;
        }
    return n;
}

static bool key_eq(const graph_key *x, const graph_key *y) {
    return g7_hash_eq(x->shape, y->shape) && x->gen == y->gen && x->ws == y->ws && x->ws_size == y->ws_size;
}

graph_entry *graph_cache_find(graph_cache *c, const graph_key *k) {
    for (int i = 0; i < GRAPH_CACHE_MAX; i++)
        if (c->e[i].used && key_eq(&c->e[i].key, k)) return &c->e[i];
    return NULL;
}

void graph_cache_touch(graph_cache *c, graph_entry *e) { e->last_use = ++c->tick; }

graph_entry *graph_cache_insert(graph_cache *c, const graph_key *k, cudaGraphExec_t exec, int64_t kernels) {
    for (int i = 0; i < GRAPH_CACHE_MAX; i++) {
        graph_entry *e = &c->e[i];
        if (!e->used || !g7_hash_eq(e->key.shape, k->shape)) continue;
        pthread_mutex_lock(&g7_st_mu);
        g7_st.recaptures++;
        if (e->key.gen != k->gen) g7_st.recaptures_generation++;
        pthread_mutex_unlock(&g7_st_mu);
        graph_cache_drop(e);
    }
    graph_entry *slot = NULL;
    for (int i = 0; i < GRAPH_CACHE_MAX && !slot; i++)
        if (!c->e[i].used) slot = &c->e[i];
    if (!slot) {
        slot = &c->e[0];
        for (int i = 1; i < GRAPH_CACHE_MAX; i++)
            if (c->e[i].last_use < slot->last_use) slot = &c->e[i];
        graph_cache_drop(slot);
    }
    slot->used = true;
    slot->key = *k;
    slot->exec = exec;
    slot->kernels = kernels;
    graph_cache_touch(c, slot);
    STAT_ADD(cached, 1);
    return slot;
}

/* Phase 7d's cache of captured graphs, one per wrapped backend: instantiated graphs keyed
 * on the split's identity (a 128-bit hash of its ops, types, shapes, parameters, data
 * pointers and the dispatch epoch), the pool generation and the workspace they were
 * captured with. LRU beyond GRAPH_CACHE_MAX. Callers hold no stream lock; the cache
 * takes it around each graph destroy. */
#ifndef MI_GRAPH_CACHE_H
#define MI_GRAPH_CACHE_H
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRAPH_CACHE_MAX 8

typedef struct {
    uint64_t a, b;
} g7_hash;
static inline bool g7_hash_eq(g7_hash x, g7_hash y) { return x.a == y.a && x.b == y.b; }

typedef struct {
    g7_hash shape;    /* split identity */
    uint64_t gen;     /* pool generation */
    void *ws;         /* workspace block and size */
    size_t ws_size;
} graph_key;

typedef struct {
    bool used;
    graph_key key;
    cudaGraphExec_t exec;
    uint64_t last_use;
    int64_t kernels;   /* kernel nodes of the captured graph */
} graph_entry;

typedef struct {
    graph_entry e[GRAPH_CACHE_MAX];
    uint64_t tick;
} graph_cache;

graph_entry *graph_cache_find(graph_cache *c, const graph_key *k);   /* exact key */
/* A new graph for k: an entry of the same shape (older generation or workspace) is
 * replaced and counted as a recapture; else a free or the least recently used entry. */
graph_entry *graph_cache_insert(graph_cache *c, const graph_key *k, cudaGraphExec_t exec, int64_t kernels);
void graph_cache_touch(graph_cache *c, graph_entry *e);
void graph_cache_drop(graph_entry *e);
int graph_cache_drop_all(graph_cache *c);   /* returns how many were dropped */
/* Free 7c's retired weight copies once no graph of any backend is cached (a captured
 * graph may still point at one). */
void graph_cache_free_retired(void);

#endif

/* The CUDA buffer pool (cuda_pool.h): sub-allocation from device chunks, reuse of
 * released blocks, and the generation counter that CUDA-graph capture (7d) compares
 * to know whether pointers baked into a captured graph are still valid. */
#include "cuda_pool.h"
#include "cuda_dev.h"
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

typedef struct {
    char *base;
    size_t size, used;     /* used: carve offset (blocks are carved from the front) */
    int n_live;
} pool_chunk;

typedef struct {
    char *base;
    size_t size;           /* aligned size (the request rounded up) */
    int chunk;             /* index into chunks */
    int live;
} pool_block;

struct mi_cuda_pool {
    pthread_mutex_t mu;
    size_t chunk_min;
    pool_chunk *chunks;
    int n_chunks, cap_chunks;
    pool_block *blocks;
    int n_blocks, cap_blocks;
    uint64_t generation;
    uint64_t n_device_allocs, n_reuses, n_carves;
};

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

mi_status mi_cuda_pool_new(size_t chunk_min, mi_cuda_pool **out) {
    *out = NULL;
    mi_cuda_pool *p = calloc(1, sizeof *p);
    if (!p) return mi_err(MI_ERR_NOMEM, "cuda pool: out of host memory");
    pthread_mutex_init(&p->mu, NULL);
    p->chunk_min = round_up(chunk_min ? chunk_min : ((size_t)64 << 20), (size_t)2 << 20);
    p->generation = 1;
    *out = p;
    return MI_OK;
}

void mi_cuda_pool_free(mi_cuda_pool *p) {
    if (!p) return;
    for (int i = 0; i < p->n_chunks; i++) mi_cudev_free(p->chunks[i].base);
    free(p->chunks);
    free(p->blocks);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* A cached block is reused only if it is not much larger than the request, so a
 * small request does not pin a huge block: at most 2x, or 1 MiB of slack. */
static int reuse_fits(size_t block, size_t want) {
    return block >= want && (block <= 2 * want || block - want <= ((size_t)1 << 20));
}

static mi_status push_block(mi_cuda_pool *p, char *base, size_t size, int chunk, void **ptr) {
    if (p->n_blocks == p->cap_blocks) {
        int cap = p->cap_blocks ? 2 * p->cap_blocks : 64;
        pool_block *nb = realloc(p->blocks, (size_t)cap * sizeof *nb);
        if (!nb) return mi_err(MI_ERR_NOMEM, "cuda pool: out of host memory");
        p->blocks = nb;
        p->cap_blocks = cap;
    }
    p->blocks[p->n_blocks++] = (pool_block){ base, size, chunk, 1 };
    p->chunks[chunk].n_live++;
    p->n_carves++;
    p->generation++;   /* an address nobody has been handed before */
    *ptr = base;
    return MI_OK;
}

static size_t trim_locked(mi_cuda_pool *p) {
    size_t freed = 0;
    int w = 0;
    int *remap = malloc((size_t)(p->n_chunks ? p->n_chunks : 1) * sizeof *remap);
    if (!remap) return 0;
    for (int i = 0; i < p->n_chunks; i++) {
        if (p->chunks[i].n_live == 0) {
            mi_cudev_free(p->chunks[i].base);
            freed += p->chunks[i].size;
            remap[i] = -1;
        } else {
            remap[i] = w;
            p->chunks[w++] = p->chunks[i];
        }
    }
    p->n_chunks = w;
    int bw = 0;
    for (int i = 0; i < p->n_blocks; i++) {
        int c = remap[p->blocks[i].chunk];
        if (c < 0) continue;
        p->blocks[bw] = p->blocks[i];
        p->blocks[bw++].chunk = c;
    }
    p->n_blocks = bw;
    free(remap);
    /* no generation change here: live addresses are untouched, and the next
     * allocation that cannot reuse a block changes it */
    return freed;
}

mi_status mi_cuda_pool_alloc(mi_cuda_pool *p, size_t size, void **ptr) {
    *ptr = NULL;
    if (size > SIZE_MAX / 4) return mi_err(MI_ERR_INVALID, "cuda pool: request of %zu bytes", size);
    size_t want = round_up(size ? size : 1, MI_CUDA_POOL_ALIGN);
    pthread_mutex_lock(&p->mu);
    mi_status st = MI_OK;

    /* 1. best cached fit: smallest block, then lowest address, so that the same
     *    sequence of requests after releasing everything gets the same addresses */
    int best = -1;
    for (int i = 0; i < p->n_blocks; i++) {
        pool_block *b = &p->blocks[i];
        if (b->live || !reuse_fits(b->size, want)) continue;
        if (best < 0 || b->size < p->blocks[best].size ||
            (b->size == p->blocks[best].size && b->base < p->blocks[best].base))
            best = i;
    }
    if (best >= 0) {
        p->blocks[best].live = 1;
        p->chunks[p->blocks[best].chunk].n_live++;
        p->n_reuses++;
        *ptr = p->blocks[best].base;
        goto out;
    }
    /* 2. carve from the free tail of an existing chunk (first fit in chunk order) */
    for (int c = 0; c < p->n_chunks; c++) {
        pool_chunk *ch = &p->chunks[c];
        if (ch->size - ch->used >= want) {
            st = push_block(p, ch->base + ch->used, want, c, ptr);
            if (st == MI_OK) ch->used += want;
            goto out;
        }
    }
    /* 3. a new chunk; on failure give back unused chunks once and retry */
    size_t csize = want > p->chunk_min ? round_up(want, (size_t)2 << 20) : p->chunk_min;
    void *mem = NULL;
    st = mi_cudev_malloc(&mem, csize);
    if (st != MI_OK && trim_locked(p) > 0) st = mi_cudev_malloc(&mem, csize);
    if (st != MI_OK) {
        mi_err_ctx(st, "cuda pool: allocating %zu bytes", size);
        goto out;
    }
    if (p->n_chunks == p->cap_chunks) {
        int cap = p->cap_chunks ? 2 * p->cap_chunks : 8;
        pool_chunk *nc = realloc(p->chunks, (size_t)cap * sizeof *nc);
        if (!nc) {
            mi_cudev_free(mem);
            st = mi_err(MI_ERR_NOMEM, "cuda pool: out of host memory");
            goto out;
        }
        p->chunks = nc;
        p->cap_chunks = cap;
    }
    p->chunks[p->n_chunks] = (pool_chunk){ mem, csize, 0, 0 };
    p->n_chunks++;
    p->n_device_allocs++;
    st = push_block(p, mem, want, p->n_chunks - 1, ptr);
    if (st == MI_OK) p->chunks[p->n_chunks - 1].used = want;
out:
    pthread_mutex_unlock(&p->mu);
    return st;
}

mi_status mi_cuda_pool_release(mi_cuda_pool *p, void *ptr) {
    if (!ptr) return MI_OK;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->n_blocks; i++) {
        pool_block *b = &p->blocks[i];
        if (b->base != ptr) continue;
        if (!b->live) break;
        b->live = 0;
        p->chunks[b->chunk].n_live--;
        pthread_mutex_unlock(&p->mu);
        return MI_OK;
    }
    pthread_mutex_unlock(&p->mu);
    return mi_err(MI_ERR_INVALID, "cuda pool: release of %p, which is not a live pool block", ptr);
}

uint64_t mi_cuda_pool_generation(const mi_cuda_pool *p) {
    pthread_mutex_lock((pthread_mutex_t *)&p->mu);
    uint64_t g = p->generation;
    pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
    return g;
}

size_t mi_cuda_pool_trim(mi_cuda_pool *p) {
    pthread_mutex_lock(&p->mu);
    size_t f = trim_locked(p);
    pthread_mutex_unlock(&p->mu);
    return f;
}

void mi_cuda_pool_stats_get(const mi_cuda_pool *p, mi_cuda_pool_stats *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock((pthread_mutex_t *)&p->mu);
    for (int i = 0; i < p->n_chunks; i++) out->reserved += p->chunks[i].size;
    for (int i = 0; i < p->n_blocks; i++) {
        if (p->blocks[i].live) { out->live += p->blocks[i].size; out->n_live++; }
        else out->cached += p->blocks[i].size;
    }
    out->n_chunks = p->n_chunks;
    out->n_blocks = p->n_blocks;
    out->generation = p->generation;
    out->n_device_allocs = p->n_device_allocs;
    out->n_reuses = p->n_reuses;
    out->n_carves = p->n_carves;
    pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
}

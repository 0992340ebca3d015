/* The KV block pool (kv_pool.h). The storage is a KV cache of n_blocks * block positions, so
 * every backend's KV code (allocation, zeroing, the persistent flag) is kv_cache_init's; the
 * pool adds the free list and the sequences' block tables. */
#include "kv_pool.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

mi_status kv_pool_init(mi_kv_pool *p, const mi_hparams *hp, mi_type type, int64_t block, int64_t n_blocks,
                       mi_backend *be) {
    memset(p, 0, sizeof *p);
    if (block < 1 || n_blocks < 1 || n_blocks > INT32_MAX || block > INT64_MAX / n_blocks)
        return mi_err(MI_ERR_INVALID, "KV pool of %lld blocks of %lld positions", (long long)n_blocks, (long long)block);
    p->free_ids = malloc((size_t)n_blocks * sizeof *p->free_ids);
    if (!p->free_ids) return mi_err(MI_ERR_NOMEM, "out of memory for the KV pool's free list");
    mi_status st = kv_cache_init(&p->kv, hp, type, block * n_blocks, be);
    if (st != MI_OK) {
        free(p->free_ids);
        p->free_ids = NULL;
        return mi_err_ctx(st, "the KV pool (%lld blocks of %lld positions)", (long long)n_blocks, (long long)block);
    }
    p->block = block;
    p->n_blocks = n_blocks;
    for (int64_t i = 0; i < n_blocks; i++) p->free_ids[i] = (int32_t)(n_blocks - 1 - i);   /* block 0 on top */
    p->n_free = n_blocks;
    return MI_OK;
}

void kv_pool_free(mi_kv_pool *p) {
    kv_cache_free(&p->kv);
    free(p->free_ids);
    memset(p, 0, sizeof *p);
}

mi_status kv_pool_reserve(mi_kv_pool *p, mi_kv_seq *s, int64_t n_pos) {
    if (n_pos < s->n_pos) return mi_err(MI_ERR_INVALID, "KV reserve of %lld positions below the %lld held",
                                        (long long)n_pos, (long long)s->n_pos);
    const int64_t need = (n_pos + p->block - 1) / p->block, more = need - s->n_blocks;
    if (more > p->n_free)
        return mi_err(MI_ERR_NOMEM,
                      "the KV pool is full: %lld more blocks of %lld positions needed for %lld positions, %lld of "
                      "%lld free",
                      (long long)more, (long long)p->block, (long long)n_pos, (long long)p->n_free,
                      (long long)p->n_blocks);
    if (need > s->cap) {
        int64_t cap = s->cap ? s->cap : 4;
        while (cap < need) cap *= 2;
        int32_t *b = realloc(s->blocks, (size_t)cap * sizeof *b);
        if (!b) return mi_err(MI_ERR_NOMEM, "out of memory for a block table of %lld blocks", (long long)cap);
        s->blocks = b;
        s->cap = cap;
    }
    for (int64_t i = 0; i < more; i++) s->blocks[s->n_blocks++] = p->free_ids[--p->n_free];
    s->n_pos = n_pos;
    return MI_OK;
}

void kv_pool_truncate(mi_kv_pool *p, mi_kv_seq *s, int64_t n_pos) {
    if (n_pos < 0) n_pos = 0;
    if (n_pos >= s->n_pos) return;
    const int64_t keep = (n_pos + p->block - 1) / p->block;
    while (s->n_blocks > keep) p->free_ids[p->n_free++] = s->blocks[--s->n_blocks];
    s->n_pos = n_pos;
}

void kv_pool_release(mi_kv_pool *p, mi_kv_seq *s) {
    kv_pool_truncate(p, s, 0);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}

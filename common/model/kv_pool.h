/* A pool of fixed-size KV blocks shared by many sequences (phase 8b, docs/PHASE8B.md): per
 * layer one K and one V region of n_blocks * block positions, allocated once, handed out a
 * block at a time as sequences grow and taken back when they end or shrink. Internal to
 * common/model (the batch API builds on it). */
#ifndef MI_KV_POOL_H
#define MI_KV_POOL_H
#include "model_internal.h"

typedef struct {
    mi_kv_cache kv;            /* the storage: rows 0 .. n_blocks * block - 1 per layer, K and V */
    int64_t block, n_blocks;   /* positions a block; blocks in the pool */
    int32_t *free_ids;         /* stack of free block ids: [0 .. n_free), lowest id on top */
    int64_t n_free;
} mi_kv_pool;

/* One sequence's blocks: position p lives in cache row blocks[p / block] * block + p % block. */
typedef struct {
    int32_t *blocks;
    int64_t n_blocks, cap;
    int64_t n_pos;             /* positions reserved: 0 .. n_pos - 1 */
} mi_kv_seq;

/* n_blocks of block positions (block >= 1), KV type F16 or F32, on backend be. */
mi_status kv_pool_init(mi_kv_pool *p, const mi_hparams *hp, mi_type type, int64_t block, int64_t n_blocks,
                       mi_backend *be);
void kv_pool_free(mi_kv_pool *p);
/* Room for positions 0 .. n_pos - 1 of s (n_pos >= s->n_pos). All or nothing: when the pool
 * has too few free blocks, MI_ERR_NOMEM naming what was needed and the pool's size, and s
 * unchanged. */
mi_status kv_pool_reserve(mi_kv_pool *p, mi_kv_seq *s, int64_t n_pos);
/* Keep positions 0 .. n_pos - 1 of s (n_pos <= s->n_pos); the blocks past them go back. */
void kv_pool_truncate(mi_kv_pool *p, mi_kv_seq *s, int64_t n_pos);
/* Every block of s back to the pool; s is empty (and may be reserved again). */
void kv_pool_release(mi_kv_pool *p, mi_kv_seq *s);

/* cache row of position pos of s (pos < s->n_pos) */
static inline int64_t kv_seq_row(const mi_kv_pool *p, const mi_kv_seq *s, int64_t pos) {
    return (int64_t)s->blocks[pos / p->block] * p->block + pos % p->block;
}

#endif

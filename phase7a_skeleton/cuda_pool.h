/* The CUDA buffer pool: device chunks from cudaMalloc, carved into 256-byte aligned
 * blocks; a released block is cached and handed out again to a request it fits
 * closely. Live blocks never move. The generation changes exactly when an allocation
 * hands out a block the pool has not handed out before (a carve or a new chunk);
 * reusing a cached block keeps it. See docs/PHASE7A.md. */
#ifndef MI_CUDA_POOL_H
#define MI_CUDA_POOL_H
#include <stddef.h>
#include <stdint.h>
#include "common/core/mi_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MI_CUDA_POOL_ALIGN 256u

typedef struct mi_cuda_pool mi_cuda_pool;

typedef struct {
    size_t reserved;      /* bytes in device chunks */
    size_t live;          /* bytes of blocks handed out and not released */
    size_t cached;        /* bytes of released blocks kept for reuse */
    int n_chunks, n_blocks, n_live;
    uint64_t generation;
    uint64_t n_device_allocs, n_reuses, n_carves;
} mi_cuda_pool_stats;

/* chunk_min: smallest cudaMalloc the pool makes (larger requests get their own chunk). */
mi_status mi_cuda_pool_new(size_t chunk_min, mi_cuda_pool **out);
void mi_cuda_pool_free(mi_cuda_pool *p);                 /* returns every chunk to the device */
mi_status mi_cuda_pool_alloc(mi_cuda_pool *p, size_t size, void **ptr);
/* Back to the cache; ptr must come from mi_cuda_pool_alloc. Returns MI_ERR_INVALID otherwise. */
mi_status mi_cuda_pool_release(mi_cuda_pool *p, void *ptr);
uint64_t mi_cuda_pool_generation(const mi_cuda_pool *p);
/* cudaFree every chunk that holds no live block; returns the bytes given back.
 * The caller must know no queued device work still uses the released blocks. */
size_t mi_cuda_pool_trim(mi_cuda_pool *p);
void mi_cuda_pool_stats_get(const mi_cuda_pool *p, mi_cuda_pool_stats *out);

#ifdef __cplusplus
}
#endif
#endif

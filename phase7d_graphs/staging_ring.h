/* Phase 7d's pinned staging ring: each split takes the next slot for its step params and
 * Input bytes, so a host->device copy inside a step reads pinned memory that stays
 * untouched until the stream has consumed it. A slot is reused only after the event
 * recorded when the next split began has completed, STAGING_RING_N splits later. */
#ifndef MI_STAGING_RING_H
#define MI_STAGING_RING_H
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include "common/core/mi_err.h"

#define STAGING_RING_N 8                        /* slots, one per split */
#define STAGING_RING_BYTES ((size_t)64 << 10)   /* bytes per slot */

typedef struct {
    char *buf;                         /* pinned [STAGING_RING_N][STAGING_RING_BYTES] */
    cudaEvent_t ev[STAGING_RING_N];
    bool armed[STAGING_RING_N];
    int cur;
    size_t fill;
    bool dirty;
} staging_ring;

mi_status staging_ring_init(staging_ring *r);   /* under the stream lock, device selected */
void staging_ring_free(staging_ring *r);
/* Close the current slot (record its event on stream if used) and move to the next,
 * waiting for that one's event first. Takes the stream lock for the record only. */
mi_status staging_ring_advance(staging_ring *r, cudaStream_t stream);
/* n bytes of the current slot (256-byte aligned), NULL if they do not fit. */
void *staging_ring_reserve(staging_ring *r, size_t n);

#endif

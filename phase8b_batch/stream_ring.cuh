/* What the two weight-streaming matmuls of a batch (gemm_int8_stream.cu, gemm_f16_stream.cu)
 * share: copying a row's stage into its ring slot, and the choice of a K split (split_cost.h; the
 * f16 kernel uses it where it does not take stream-K runs). */
#ifndef MI_STREAM_RING_CUH
#define MI_STREAM_RING_CUH
#include <stdint.h>
#include "phase8a_decode/async_copy.cuh"
#include "phase8b_batch/batch8b.h"
#include "phase8b_batch/split_cost.h"

/* Chunk c of the 16-byte windows covering [src, src + n): to slot + 16 c by cp.async, so byte b
 * of the data lands at slot + (src & 15) + b. A window reaching outside [lo, hi) (the first or
 * last bytes of the tensor) is copied byte by byte, its outside bytes left as they were. */
__device__ __forceinline__ void gs_window(uint8_t *slot, const uint8_t *src, int n, int c, const uint8_t *lo,
                                          const uint8_t *hi) {
    const uint8_t *a = (const uint8_t *)((uintptr_t)src & ~(uintptr_t)15) + 16 * c;
    if (a >= src + n) return;
    if (a >= lo && a + 16 <= hi) {
        async_copy16(slot + 16 * c, a);
    } else {
        for (int b = 0; b < 16; b++)
            if (a + b >= lo && a + b < hi) slot[16 * c + b] = a[b];
    }
}

#endif

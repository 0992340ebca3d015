/* phase7d_graphs/staging_ring.h */
#include "phase7d_graphs/staging_ring.h"
#include "phase7d_graphs/graphs7d.h"
#include "phase7a_skeleton/cuda_check.h"
#include <string.h>

mi_status staging_ring_init(staging_ring *r) {
    memset(r, 0, sizeof *r);
    MI_TRY(mi_cudev_host_alloc((void **)&r->buf, STAGING_RING_N * STAGING_RING_BYTES));
    for (int i = 0; i < STAGING_RING_N; i++) {
        cudaError_t e = cudaEventCreateWithFlags(&r->ev[i], cudaEventDisableTiming);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return mi_err(MI_ERR_DEVICE, "cuda graph: event: %s", cudaGetErrorString(e));
        }
    }
    return MI_OK;
}

void staging_ring_free(staging_ring *r) {
    for (int i = 0; i < STAGING_RING_N; i++)
        if (r->ev[i]) MI_CU_WARN(cudaEventDestroy(r->ev[i]));
    mi_cudev_host_free(r->buf);
    memset(r, 0, sizeof *r);
}

mi_status staging_ring_advance(staging_ring *r, cudaStream_t stream) {
    if (r->dirty) {
        mi_cuda_stream_lock();
        cudaError_t e = cudaEventRecord(r->ev[r->cur], stream);
        mi_cuda_stream_unlock();
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return mi_err(MI_ERR_DEVICE, "cuda graph: staging ring event: %s", cudaGetErrorString(e));
        }
        r->armed[r->cur] = true;
    }
    r->cur = (r->cur + 1) % STAGING_RING_N;
    if (r->armed[r->cur]) {   /* outside the stream lock: a wait, not a touch */
        MI_CU_CHECK(cudaEventSynchronize(r->ev[r->cur]));
        r->armed[r->cur] = false;
    }
    r->fill = 0;
    r->dirty = false;
    return MI_OK;
}

void *staging_ring_reserve(staging_ring *r, size_t n) {
    size_t off = (r->fill + 255) & ~(size_t)255;
    if (off > STAGING_RING_BYTES || n > STAGING_RING_BYTES - off) return NULL;
    r->fill = off + n;
    r->dirty = true;
    return r->buf + (size_t)r->cur * STAGING_RING_BYTES + off;
}

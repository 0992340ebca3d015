/* The thin device layer: a plain C header over the CUDA runtime (cudart, linked
 * statically). Every call is checked (cuda_check.h) and returns mi_status; the
 * message of a failure names the CUDA call, its error text, file and line.
 * Streams and events travel as void* so callers need no CUDA headers. */
#ifndef MI_CUDA_DEV_H
#define MI_CUDA_DEV_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "common/core/mi_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int id;
    char name[256];
    int cc_major, cc_minor;        /* compute capability */
    int sm_count;
    size_t total_mem, free_mem;    /* bytes; free_mem at the time of the query */
    size_t l2_bytes;
    size_t smem_per_block_optin;   /* max dynamic shared memory a block may opt into */
    int mem_clock_khz, bus_width_bits;
    double peak_bw_gbs;            /* 2 (DDR) * memory clock * bus width / 8, GB/s (1e9) */
    int driver_version, runtime_version;  /* e.g. 13000 */
} mi_cudev_props;

/* Number of CUDA devices. A machine without a driver or device gives n = 0 and MI_OK;
 * the reason (cudaGetDeviceCount's text) is kept in mi_errmsg(). */
mi_status mi_cudev_count(int *n);
mi_status mi_cudev_select(int id);                        /* cudaSetDevice */
mi_status mi_cudev_props_get(int id, mi_cudev_props *out);
/* Free and total memory of device id now (cudaMemGetInfo; makes id the current device). */
mi_status mi_cudev_mem_info(int id, size_t *free_b, size_t *total_b);
/* "NVIDIA H200, 132 SMs, 140.4 GiB, L2 60 MiB, 4915 GB/s peak, cc 9.0" */
void mi_cudev_props_str(const mi_cudev_props *p, char *buf, size_t n);
/* "580.159.04"-style driver text is not available from cudart; this gives "13.0". */
void mi_cudev_driver_str(char *buf, size_t n);

/* Device memory. The N-th call of mi_cudev_malloc fails (as if out of memory) when
 * MINFER_CUDA_FAIL_MALLOC=N is set, or after mi_cudev_fail_malloc_at(N). */
mi_status mi_cudev_malloc(void **p, size_t n);
void mi_cudev_free(void *p);
void mi_cudev_fail_malloc_at(long n);      /* test hook: N > 0 arms, 0 disarms; counter restarts */
long mi_cudev_malloc_calls(void);          /* calls since start or since the last fail_malloc_at */
/* Device bytes minfer holds right now through mi_cudev_malloc (pools, regions, resident
 * weights), and how many allocations: the exact figure a leak check compares, unlike
 * cudaMemGetInfo, which also moves with the driver's and runtime's own allocations. */
void mi_cudev_live(size_t *bytes, long *count);
/* Pinned (page-locked) host memory: truly asynchronous copies need it. */
mi_status mi_cudev_host_alloc(void **p, size_t n);
void mi_cudev_host_free(void *p);

/* Streams (non-blocking w.r.t. the legacy default stream). */
mi_status mi_cudev_stream_new(void **stream);
void mi_cudev_stream_free(void *stream);
mi_status mi_cudev_stream_sync(void *stream);

/* Async copies on a stream. Pageable host memory: the runtime stages it, so a
 * host->device source may be reused once the call returns; pinned memory must stay
 * untouched until the stream reaches the copy (docs/PHASE7A.md). */
mi_status mi_cudev_h2d_async(void *dst, const void *src, size_t n, void *stream);
mi_status mi_cudev_d2h_async(void *dst, const void *src, size_t n, void *stream);
mi_status mi_cudev_d2d_async(void *dst, const void *src, size_t n, void *stream);
mi_status mi_cudev_memset_async(void *dst, int byte, size_t n, void *stream);

/* Events (timing enabled). */
mi_status mi_cudev_event_new(void **ev);
void mi_cudev_event_free(void *ev);
mi_status mi_cudev_event_record(void *ev, void *stream);
mi_status mi_cudev_event_sync(void *ev);
mi_status mi_cudev_event_ms(void *start, void *end, float *ms);

/* Device-wide; only for tests and teardown. */
mi_status mi_cudev_device_sync(void);

#ifdef __cplusplus
}
#endif
#endif

/* The thin device layer over the CUDA runtime (cuda_dev.h). Nothing here keeps
 * state except the allocation counter behind the MINFER_CUDA_FAIL_MALLOC switch. */
#include "cuda_dev.h"
#include "cuda_check.h"
#include "common/core/mi_settings.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

mi_status mi_cudev_count(int *n) {
    *n = 0;
    int c = 0;
    cudaError_t e = cudaGetDeviceCount(&c);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        /* No driver or no device is a normal state for a CPU machine, not an error, and the
         * reason left in the message is said in plain words: without a driver the runtime
         * reports "CUDA driver version is insufficient", which reads like a broken install. */
        int drv = 0;
        if (e == cudaErrorNoDevice) mi_err_clear();   /* nothing to add to "no CUDA device found" */
        else if (e == cudaErrorInsufficientDriver && (cudaDriverGetVersion(&drv) != cudaSuccess || drv == 0))
            mi_err(MI_ERR_DEVICE, "no NVIDIA driver installed");
        else if (e == cudaErrorInsufficientDriver)
            mi_err(MI_ERR_DEVICE, "the NVIDIA driver supports CUDA %d.%d, this build needs %d.%d", drv / 1000,
                   drv % 1000 / 10, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
        else mi_err(MI_ERR_DEVICE, "%s", cudaGetErrorString(e));
        return MI_OK;
    }
    *n = c;
    return MI_OK;
}

mi_status mi_cudev_select(int id) {
    MI_CU_CHECK(cudaSetDevice(id));
    return MI_OK;
}

mi_status mi_cudev_mem_info(int id, size_t *free_b, size_t *total_b) {
    *free_b = *total_b = 0;
    MI_CU_CHECK(cudaSetDevice(id));
    MI_CU_CHECK(cudaMemGetInfo(free_b, total_b));
    return MI_OK;
}

mi_status mi_cudev_props_get(int id, mi_cudev_props *out) {
    memset(out, 0, sizeof *out);
    struct cudaDeviceProp p;
    MI_CU_CHECK(cudaGetDeviceProperties(&p, id));
    out->id = id;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sm_count = p.multiProcessorCount;
    out->total_mem = p.totalGlobalMem;
    out->l2_bytes = (size_t)p.l2CacheSize;
    out->smem_per_block_optin = p.sharedMemPerBlockOptin;
    out->bus_width_bits = p.memoryBusWidth;
    /* CUDA 13 dropped cudaDeviceProp::memoryClockRate; the attribute remains */
    MI_CU_CHECK(cudaDeviceGetAttribute(&out->mem_clock_khz, cudaDevAttrMemoryClockRate, id));
    out->peak_bw_gbs = 2.0 * (double)out->mem_clock_khz * 1e3 * (double)out->bus_width_bits / 8.0 / 1e9;
    MI_CU_CHECK(cudaDriverGetVersion(&out->driver_version));
    MI_CU_CHECK(cudaRuntimeGetVersion(&out->runtime_version));
    int cur = 0;
    MI_CU_CHECK(cudaGetDevice(&cur));
    if (cur == id) {
        size_t fr = 0, tot = 0;
        MI_CU_CHECK(cudaMemGetInfo(&fr, &tot));
        out->free_mem = fr;
    }
    return MI_OK;
}

void mi_cudev_props_str(const mi_cudev_props *p, char *buf, size_t n) {
    snprintf(buf, n, "%s, %d SMs, %.1f GiB, L2 %.0f MiB, %.0f GB/s peak, cc %d.%d", p->name,
             p->sm_count, (double)p->total_mem / (1024.0 * 1024 * 1024),
             (double)p->l2_bytes / (1024.0 * 1024), p->peak_bw_gbs, p->cc_major, p->cc_minor);
}

void mi_cudev_driver_str(char *buf, size_t n) {
    /* the kernel module's version line is what nvidia-smi prints; cudart only knows
     * the CUDA API level of the driver */
    buf[0] = 0;
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (f) {
        char line[512];
        if (fgets(line, sizeof line, f)) {
            /* "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release ..."
             * the first token made of digits and at least one dot is the version */
            for (char *k = strtok(line, " \t\n"); k; k = strtok(NULL, " \t\n")) {
                size_t len = strlen(k), dots = 0, digits = 0;
                for (size_t i = 0; i < len; i++) {
                    if (k[i] == '.') dots++;
                    else if (k[i] >= '0' && k[i] <= '9') digits++;
                }
                if (dots >= 1 && digits + dots == len && k[0] != '.' && len < n) {
                    memcpy(buf, k, len + 1);
                    break;
                }
            }
        }
        fclose(f);
    }
    if (!buf[0]) {
        int v = 0;
        if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0)
            snprintf(buf, n, "cuda %d.%d", v / 1000, (v % 1000) / 10);
        else
            snprintf(buf, n, "none");
        (void)cudaGetLastError();
    }
}

/* ---- allocation with failure injection ---- */
static pthread_mutex_t g_alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static long g_fail_at = -1;      /* -1: not yet read from the environment */
static long g_calls;
/* live allocations (pointer, size): a plain array, searched on free. minfer makes a few
 * hundred device allocations at most (pool chunks, regions, one per resident weight). */
typedef struct { void *p; size_t n; } live_rec;
static live_rec *g_live;
static long g_n_live, g_cap_live;
static size_t g_live_bytes;

static void live_add(void *p, size_t n) {
    pthread_mutex_lock(&g_alloc_mu);
    if (g_n_live == g_cap_live) {
        long cap = g_cap_live ? 2 * g_cap_live : 256;
        live_rec *nl = realloc(g_live, (size_t)cap * sizeof *nl);
        if (!nl) {   /* accounting only: the allocation itself stands */
            pthread_mutex_unlock(&g_alloc_mu);
            return;
        }
        g_live = nl;
        g_cap_live = cap;
    }
    g_live[g_n_live++] = (live_rec){ p, n };
    g_live_bytes += n;
    pthread_mutex_unlock(&g_alloc_mu);
}

static void live_remove(void *p) {
    pthread_mutex_lock(&g_alloc_mu);
    for (long i = g_n_live - 1; i >= 0; i--) {
        if (g_live[i].p != p) continue;
        g_live_bytes -= g_live[i].n;
        g_live[i] = g_live[--g_n_live];
        break;
    }
    pthread_mutex_unlock(&g_alloc_mu);
}

void mi_cudev_live(size_t *bytes, long *count) {
    pthread_mutex_lock(&g_alloc_mu);
    if (bytes) *bytes = g_live_bytes;
    if (count) *count = g_n_live;
    pthread_mutex_unlock(&g_alloc_mu);
}

void mi_cudev_fail_malloc_at(long n) {
    pthread_mutex_lock(&g_alloc_mu);
    g_fail_at = n > 0 ? n : 0;
    g_calls = 0;
    pthread_mutex_unlock(&g_alloc_mu);
}

long mi_cudev_malloc_calls(void) {
    pthread_mutex_lock(&g_alloc_mu);
    long c = g_calls;
    pthread_mutex_unlock(&g_alloc_mu);
    return c;
}

mi_status mi_cudev_malloc(void **p, size_t n) {
    *p = NULL;
    pthread_mutex_lock(&g_alloc_mu);
    if (g_fail_at < 0) {   /* read once: the count runs over the whole process */
        long v = 0;
        if (mi_setting_int("MINFER_CUDA_FAIL_MALLOC", 0, LONG_MAX, 0, &v) != MI_OK) {
            pthread_mutex_unlock(&g_alloc_mu);   /* a bad value fails every allocation, with its message */
            return MI_ERR_INVALID;
        }
        g_fail_at = v;
    }
    long call = ++g_calls;
    int inject = g_fail_at > 0 && call == g_fail_at;
    pthread_mutex_unlock(&g_alloc_mu);
    if (inject)
        return mi_err(MI_ERR_DEVICE, "cudaMalloc(%zu bytes) failed: out of memory (injected: "
                      "MINFER_CUDA_FAIL_MALLOC=%ld) at %s:%d", n, call, __FILE__, __LINE__);
    if (n == 0) n = 1;   /* a zero-byte request still gets a distinct, freeable address */
    cudaError_t e = cudaMalloc(p, n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return mi_err(MI_ERR_DEVICE, "cudaMalloc(%zu bytes) failed: %s at %s:%d", n,
                      cudaGetErrorString(e), __FILE__, __LINE__);
    }
    live_add(*p, n);
    return MI_OK;
}

void mi_cudev_free(void *p) {
    if (!p) return;
    live_remove(p);
    MI_CU_WARN(cudaFree(p));
}

mi_status mi_cudev_host_alloc(void **p, size_t n) {
    *p = NULL;
    MI_CU_CHECK(cudaMallocHost(p, n ? n : 1));
    return MI_OK;
}

void mi_cudev_host_free(void *p) {
    if (p) MI_CU_WARN(cudaFreeHost(p));
}

/* ---- streams, copies, events ---- */
mi_status mi_cudev_stream_new(void **stream) {
    cudaStream_t s = NULL;
    MI_CU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = s;
    return MI_OK;
}

void mi_cudev_stream_free(void *stream) {
    if (stream) MI_CU_WARN(cudaStreamDestroy((cudaStream_t)stream));
}

mi_status mi_cudev_stream_sync(void *stream) {
    MI_CU_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
    return MI_OK;
}

mi_status mi_cudev_h2d_async(void *dst, const void *src, size_t n, void *stream) {
    if (n == 0) return MI_OK;
    MI_CU_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, (cudaStream_t)stream));
    return MI_OK;
}

mi_status mi_cudev_d2h_async(void *dst, const void *src, size_t n, void *stream) {
    if (n == 0) return MI_OK;
    MI_CU_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, (cudaStream_t)stream));
    return MI_OK;
}

mi_status mi_cudev_d2d_async(void *dst, const void *src, size_t n, void *stream) {
    if (n == 0 || dst == src) return MI_OK;
    MI_CU_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
    return MI_OK;
}

mi_status mi_cudev_memset_async(void *dst, int byte, size_t n, void *stream) {
    if (n == 0) return MI_OK;
    MI_CU_CHECK(cudaMemsetAsync(dst, byte, n, (cudaStream_t)stream));
    return MI_OK;
}

mi_status mi_cudev_event_new(void **ev) {
    cudaEvent_t e = NULL;
    MI_CU_CHECK(cudaEventCreate(&e));
    *ev = e;
    return MI_OK;
}

void mi_cudev_event_free(void *ev) {
    if (ev) MI_CU_WARN(cudaEventDestroy((cudaEvent_t)ev));
}

mi_status mi_cudev_event_record(void *ev, void *stream) {
    MI_CU_CHECK(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream));
    return MI_OK;
}

mi_status mi_cudev_event_sync(void *ev) {
    MI_CU_CHECK(cudaEventSynchronize((cudaEvent_t)ev));
    return MI_OK;
}

mi_status mi_cudev_event_ms(void *start, void *end, float *ms) {
    MI_CU_CHECK(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end));
    return MI_OK;
}

mi_status mi_cudev_device_sync(void) {
    MI_CU_CHECK(cudaDeviceSynchronize());
    return MI_OK;
}

/* The one check macro for every CUDA runtime call and kernel launch (hard rule 6).
 * A failing call records "<call text> failed: <cuda message> at file:line" through
 * mi_err() and returns MI_ERR_DEVICE from the enclosing function; nothing aborts.
 * Usable from .c (gcc, cuda_runtime_api.h) and .cu (nvcc) files alike. */
#ifndef MI_CUDA_CHECK_H
#define MI_CUDA_CHECK_H
#include <cuda_runtime_api.h>
#include "common/core/mi_err.h"

/* The error is cleared with cudaGetLastError() after it is recorded, so a
 * non-sticky failure (e.g. an allocation) does not resurface at the next check. */
#define MI_CU_CHECK(call) do { \
    cudaError_t mi__ce = (call); \
    if (mi__ce != cudaSuccess) { \
        (void)cudaGetLastError(); \
        return mi_err(MI_ERR_DEVICE, "%s failed: %s at %s:%d", #call, \
                      cudaGetErrorString(mi__ce), __FILE__, __LINE__); \
    } } while (0)

/* After a kernel launch: a bad configuration shows up only in cudaGetLastError(). */
#define MI_CU_CHECK_LAUNCH(kernel_name) do { \
    cudaError_t mi__ce = cudaGetLastError(); \
    if (mi__ce != cudaSuccess) \
        return mi_err(MI_ERR_DEVICE, "launch of %s failed: %s at %s:%d", (kernel_name), \
                      cudaGetErrorString(mi__ce), __FILE__, __LINE__); \
    } while (0)

/* The same check for functions that cannot return mi_status (destructors): the
 * failure is logged once per call site, not returned. */
#define MI_CU_WARN(call) do { \
    cudaError_t mi__ce = (call); \
    if (mi__ce != cudaSuccess) { \
        (void)cudaGetLastError(); \
        mi_log("warning: %s failed: %s at %s:%d", #call, cudaGetErrorString(mi__ce), \
               __FILE__, __LINE__); \
    } } while (0)

#endif

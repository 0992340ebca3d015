/* What the CUDA backend (phase 7a) exposes to the phases above it. Higher phases
 * install behaviour through these entry points; 7a never names their symbols.
 * Plain C; cudaStream_t travels as void* so C files need no CUDA headers. */
#ifndef MI_CUDA_BACKEND_H
#define MI_CUDA_BACKEND_H
#include <stddef.h>
#include <stdbool.h>
#include "common/backend/backend.h"
#include "cuda_dev.h"
#include "cuda_pool.h"
#include "cuda_dispatch.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_cuda_ctx mi_cuda_ctx;

/* The CUDA context behind a backend, or NULL when be is not the CUDA backend. */
mi_cuda_ctx *mi_cuda_ctx_of(mi_backend *be);
void *mi_cuda_stream(mi_cuda_ctx *c);          /* cudaStream_t */
int mi_cuda_device_id(mi_cuda_ctx *c);

/* Kernels reach the backend through the dispatch (cuda_dispatch.h): each phase's install
 * adds candidates per op; 7a itself executes Input nodes only. */

/* Create a CUDA backend on a given device (mi_backend_create("cuda") uses
 * MINFER_CUDA_DEVICE, default 0). MI_ERR_DEVICE "no CUDA device" when there is none,
 * "CUDA disabled" when MINFER_DISABLE_CUDA=1. */
mi_status mi_cuda_backend_new(int device, mi_backend **out);
const mi_cudev_props *mi_cuda_props(mi_cuda_ctx *c);
mi_cuda_pool *mi_cuda_pool_of(mi_cuda_ctx *c);

/* The workspace sized at split_begin (largest need of the split's nodes); grows only
 * there, never inside execute_node. Growing it may change the pool generation. */
void *mi_cuda_workspace(mi_cuda_ctx *c, size_t *size);
/* Size the workspace to at least n bytes now (e.g. before a capture window). */
mi_status mi_cuda_workspace_reserve(mi_cuda_ctx *c, size_t n);

/* Named persistent regions: device memory outside the pool, untouched by graph
 * (re)allocation, pool trims and generation changes. Same name and size: the same
 * region again (idempotent); same name, other size: MI_ERR_INVALID (free it first). */
mi_status mi_cuda_region_get(mi_cuda_ctx *c, const char *name, size_t size, void **out);
void mi_cuda_region_free(mi_cuda_ctx *c, const char *name);
int mi_cuda_region_count(mi_cuda_ctx *c);

#ifdef __cplusplus
}
#endif
#endif

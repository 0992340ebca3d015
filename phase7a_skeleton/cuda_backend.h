/* What the CUDA backend (phase 7a) exposes to the phases above it. Higher phases
 * install behaviour through these entry points; 7a never names their symbols.
 * Plain C; cudaStream_t travels as void* so C files need no CUDA headers. */
#ifndef MI_CUDA_BACKEND_H
#define MI_CUDA_BACKEND_H
#include <stddef.h>
#include <stdbool.h>
#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_cuda_ctx mi_cuda_ctx;

/* The CUDA context behind a backend, or NULL when be is not the CUDA backend. */
mi_cuda_ctx *mi_cuda_ctx_of(mi_backend *be);
void *mi_cuda_stream(mi_cuda_ctx *c);          /* cudaStream_t */
int mi_cuda_device_id(mi_cuda_ctx *c);

/* Per-op table. 7a fills MI_OP_INPUT only; 7b installs the rest (7e may replace
 * entries with faster kernels). exec must enqueue work on the backend stream and
 * must not synchronize. supports() is pure: op x types x shapes. */
typedef mi_status (*mi_cuda_exec_fn)(mi_cuda_ctx *c, mi_tensor *node, void *workspace);
typedef bool (*mi_cuda_supports_fn)(const mi_tensor *node);
/* Device scratch bytes a node needs (e.g. its activations quantized to Q8_1); may be NULL. */
typedef size_t (*mi_cuda_workspace_fn)(const mi_tensor *node);
void mi_cuda_set_op(mi_op op, mi_cuda_exec_fn exec, mi_cuda_supports_fn supports,
                    mi_cuda_workspace_fn workspace);

#ifdef __cplusplus
}
#endif
#endif

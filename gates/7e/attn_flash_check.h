/* gate_7e's check of the flash attention kernel (item e10) against the query-tiled kernel
 * (e8); the cases, bounds and timing are described in attn_flash_check.c. */
#ifndef MI_ATTN_FLASH_CHECK_H
#define MI_ATTN_FLASH_CHECK_H
#include <cuda_runtime_api.h>
#include "gates/gate_util.h"

/* The whole e10 check on stream S, recorded in R: one test per shape, the refusals, the
 * misaligned-cache fallback, the 7B timing. */
void attn_flash_check(gu_run *R, cudaStream_t S);

#endif

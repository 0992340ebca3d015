/* gate_7e's check of the f16 tensor-core prefill matmul (item e13; its wgmma form, e15) against
 * the exact product; the cases, bounds and timings are described in gemm_f16_check.c. */
#ifndef MI_GEMM_F16_CHECK_H
#define MI_GEMM_F16_CHECK_H
#include <cuda_runtime_api.h>
#include "gates/gate_util.h"

/* The whole e13 / e15 check on stream S, recorded in R: every type and option on small shapes,
 * the scale rows, weight chunks, refusals, and the timings on the 7B prefill shapes. */
void gemm_f16_check(gu_run *R, cudaStream_t S);

#endif

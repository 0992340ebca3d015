/* gate_8a's check of the one-token matmul that streams rows through a per-warp copy ring
 * (phase8a_decode/matvec_stream.cu, item d5); the cases are described in matvec_stream_check.c. */
#ifndef MI_MATVEC_STREAM_CHECK_H
#define MI_MATVEC_STREAM_CHECK_H
#include <cuda_runtime_api.h>
#include "gates/gate_util.h"

/* Every case on stream S, recorded in R, with weights and inputs from *seed. */
void matvec_stream_check(gu_run *R, cudaStream_t S, unsigned long long *seed);

#endif

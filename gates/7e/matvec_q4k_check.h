/* gate_7e's check of the Q4_K streaming kernels (items e12 and e14) against the CPU scalar dot
 * and the staged kernel; the cases, bounds and timings are described in matvec_q4k_check.c. */
#ifndef MI_MATVEC_Q4K_CHECK_H
#define MI_MATVEC_Q4K_CHECK_H
#include <cuda_runtime_api.h>
#include "gates/gate_util.h"

/* The whole e12 / e14 check on stream S, recorded in R: the one-token matmul and fused FFN
 * cases, e12_supported, and the timings on the 7B decode shapes. */
void matvec_q4k_check(gu_run *R, cudaStream_t S);

#endif

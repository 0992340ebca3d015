/* gate_7d's op-level case (step_ops7d.c). */
#ifndef MI_GATE_STEP_OPS7D_H
#define MI_GATE_STEP_OPS7D_H
#include "gates/gate_util.h"

/* step_ops_match_7b: 7d's device-n_past ATTN / KV_STORE against 7b's kernels, bit for bit */
void step_ops7d_run(gu_run *run, unsigned long long *seed);

#endif

/* gate_8a's host cases (passes8a.c): 8a's graph passes on hand-built graphs through the CPU
 * backend; they record their tests in r and draw random inputs from *seed. */
#ifndef MI_GATE_PASSES8A_H
#define MI_GATE_PASSES8A_H
#include "gates/gate_util.h"

/* fusion_pass_cpu, marks (d7, d13), rope_kv_pass (d14), run_norm_pass_* (d17), staged_pass (d15),
 * early_flags_pass (d10) */
void passes8a_run(gu_run *r, unsigned long long *seed);

#endif

/* gate_8b's batch_ahead_* cases (ahead8b.c): greedy steps queued ahead of the host's read
 * (MINFER_STEP_AHEAD, common/model/batch_ahead.c) on the CUDA backend. */
#ifndef MI_GATE_AHEAD8B_H
#define MI_GATE_AHEAD8B_H
#include "gates/gate_util.h"

/* tiny qwen2 (5 sequences, 24 steps), the 0.5B (64, 30), the 7B (64, 12), the models gate 8b
 * synthesized next to minfer */
void ahead8b_run(gu_run *run, const char *minfer);

#endif

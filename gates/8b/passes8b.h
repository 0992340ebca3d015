/* gate_8b's host case of 8b's graph pass (passes8b.c): no device needed. */
#ifndef MI_GATE_PASSES8B_H
#define MI_GATE_PASSES8B_H
#include "gates/gate_util.h"
#include "common/backend/backend.h"

/* rkv_rows_pass: b47's marks on a decode step of many sequences, the CPU output unchanged;
 * split_cost: the K split's cost model (split_cost.h) on the 7B's shapes and b48's clusters */
void passes8b_run(gu_run *run, unsigned long long *seed, mi_backend *cpu);

#endif

/* gate_8b's op-level cases (paged8b.c): each records its tests in run and draws its random
 * inputs from *seed (shared with the rest of the gate). */
#ifndef MI_GATE_PAGED8B_H
#define MI_GATE_PAGED8B_H
#include <cuda_runtime_api.h>
#include "gates/gate_util.h"
#include "common/backend/backend.h"

/* host_checks: the host's check of a step's tables (install8b_attn.c), no device */
void paged8b_host_checks(gu_run *run, unsigned long long *seed);
/* cpu_reference: one paged step on the CPU backend against a double reference */
void paged8b_cpu_reference(gu_run *run, unsigned long long *seed, mi_backend *cpu);
/* paged_*, bad_*, rope_kv_rows_*, rkv_*: the step on the device against the CPU, then bad tables
 * and calls, then b20's and b47's launches */
void paged8b_device(gu_run *run, cudaStream_t stream, unsigned long long *seed, mi_backend *cpu, mi_backend *cuda);

#endif

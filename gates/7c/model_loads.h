/* gate_7c's loading tests: 8 threads x 100 loads of two models (parallel_loads) and a model
 * loaded for the CPU only (cpu_load_no_upload). Each records one test in r. */
#ifndef GATE_MODEL_LOADS_H
#define GATE_MODEL_LOADS_H
#include "gates/gate_util.h"

/* p0, p1: two model files; prompts drawn from *seed */
void test_parallel_loads(gu_run *r, unsigned long long *seed, const char *p0, const char *p1);
void test_cpu_load_no_upload(gu_run *r, const char *path);

#endif

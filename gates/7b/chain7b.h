/* What gate_7b (gates/7b/gate_7b.c) shares with its graph helpers and attention cases
 * (chain7b.c): each case records its tests in the run and draws its random inputs from the
 * gate's one seed, in the order the gate calls them. */
#ifndef MI_GATE_CHAIN7B_H
#define MI_GATE_CHAIN7B_H
#include <stddef.h>
#include <stdint.h>
#include "gates/gate_util.h"
#include "common/backend/sched.h"
#include "common/graph/graph.h"

typedef struct {
    gu_run *r;
    mi_backend *cuda;           /* the device backend (or, with self, a CPU standing in for it) */
    mi_sched *sg, *sc;          /* [cuda, cpu] and [cpu] */
    unsigned long long *seed;
    int self;                   /* MINFER_GATE_SELFTEST: no device, the harness alone */
} gate7b_env;
void gate7b_env_set(const gate7b_env *e);

typedef mi_tensor *(*gate7b_build)(mi_graph *g, void *arg, int on_gpu);
/* A weight/constant leaf in host memory (the CPU backend's; the scheduler copies it). */
mi_tensor *gate7b_leaf(const char *name, mi_type t, int64_t ne0, int64_t ne1, void *data);
/* Builds and runs the graph on [cuda, cpu] (twice where gpu_out2 is given, each result kept) and
 * on [cpu]. 0 on success; *not_cuda counts compute nodes of the device graph (other than inputs
 * and copies) that the scheduler did not give to CUDA. */
int gate7b_run_both(gate7b_build build, void *arg, float *gpu_out, float *gpu_out2, float *cpu_out, size_t n,
                    int *not_cuda);
/* The same graph on [cpu] alone (run_both's second pass). 0 on success. */
int gate7b_run_cpu(gate7b_build build, void *arg, float *out, size_t n);

/* kv_attn_*: KV store and attention over 8 steps with n_past growing, ct caches: the cache bytes
 * equal to the CPU's, attention within NMSE 1e-6 */
void gate7b_kv_attn(mi_type ct, int hd, int Hq, int Hkv);
/* layer_chain_*: a qwen3-style layer with qwen2's biases over 4 steps, wt weights, against the
 * CPU (and, where a step runs a later phase's f16 tier, against the exact chain) */
void gate7b_layer_chain(mi_type wt);
#endif

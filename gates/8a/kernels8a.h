/* gate_8a's kernel cases (kernels8a.c; the attention's in attn8a.c): each runs on stream s,
 * records its tests in r and draws its random inputs from *seed (shared with the rest of the
 * gate, so one seed fixes the run). */
#ifndef MI_GATE_KERNELS8A_H
#define MI_GATE_KERNELS8A_H
#include <cuda_runtime_api.h>
#include "gates/gate_util.h"

/* fused_*: the norm-folded and residual forms (every quantized format; Q4_K streaming) and the
 * norm-folded FFN head (Q4_K; staged_norm_ffn_*: d23's staged form), against the unfused kernels
 * bit for bit */
void kernels8a_fused(gu_run *r, cudaStream_t s, unsigned long long *seed);
/* run_q4k_*, run_rows_*: d13's one launch for several weights of one x against a launch each (8a's
 * Q4_K kernel, 7b's warp-per-row kernel), bit for bit */
void kernels8a_run(gu_run *r, cudaStream_t s, unsigned long long *seed);
/* q6k_*: d11's Q6_K kernel against the CPU and 7e's staged kernel */
void kernels8a_q6k(gu_run *r, cudaStream_t s, unsigned long long *seed);
/* rope_pairs_*: d8's RoPE against 7b's kernel and the CPU's angle, bit for bit */
void kernels8a_rope(gu_run *r, cudaStream_t s, unsigned long long *seed);
/* rope_kv_*: d14's one launch against d8's RoPE and the lower phases' KV stores, bit for bit */
void kernels8a_rope_kv(gu_run *r, cudaStream_t s, unsigned long long *seed);
/* argmax_rows: d3's argmax against the rule's index on ties, NaN and infinities */
void kernels8a_argmax(gu_run *r, cudaStream_t s, unsigned long long *seed);
/* attn_split_*: d4's split attention against a double reference and 7b's kernel */
void kernels8a_attn_split(gu_run *r, cudaStream_t s, unsigned long long *seed);
/* attn_step_*: d20's one-token attention against 7b's and 7d's kernels bit for bit */
void kernels8a_attn_step(gu_run *r, cudaStream_t s, unsigned long long *seed);

#endif

/* The paged ops' candidates of 8b (install8b_attn.c), which mi_phase8b_install (install8b.c)
 * adds to the dispatch in its order with the matmul ones. Include from phase8b_batch/install8b*.c
 * only. */
#ifndef MI_INSTALL8B_H
#define MI_INSTALL8B_H
#include "phase7a_skeleton/cuda_dispatch.h"

/* The fewest K at which a batch's matmuls of 9..64 rows stream their weights (b3's ring, b6's and
 * b22's f16 kernels), and so at which the ops before them write x's f16 copy (b34, b35, b37).
 * The ring pays off once a band streams enough super-blocks to hide its fill: at K = 896 (the
 * 0.5B's q/k/v/o and gate/up, under 4 stages a band) b1 is faster on every shape measured at 16
 * and 64 rows, from K = 3584 on the stream kernel wins (results/notes/PHASE8B.md, b3's table).
 * The kernel itself is correct at any K (gate stream_mm_*); this is the choice between the two. */
#define MI8B_STREAM_MIN_K 2048

extern const mi_cuda_kernel mi8b_k_kv_scatter;                 /* 7b's conversion, each row to its cache row */
extern const mi_cuda_kernel mi8b_k_rkv_rope;                   /* b20: q's and k's RoPE, deferred */
extern const mi_cuda_kernel mi8b_k_rkv_store;                  /* b20: the K scatter, deferred */
extern const mi_cuda_kernel mi8b_k_rkv_last;                   /* b20: the V scatter, launching all four */
extern const mi_cuda_kernel mi8b_k_rkv_attn_store;             /* b47: the V scatter, done by the attention */
extern const mi_cuda_kernel mi8b_k_attn_paged;                 /* b7, b17, b27, b43, b44 at launch */
extern const mi_cuda_kernel mi8b_k_attn_paged_replay;          /* b2 */
extern const mi_cuda_kernel mi8b_k_attn_paged_f16;             /* b37 */
extern const mi_cuda_kernel mi8b_k_attn_paged_f16_replay;      /* b2 + b37 */
extern const mi_cuda_kernel mi8b_k_attn_paged_rkv;             /* b47 */
extern const mi_cuda_kernel mi8b_k_attn_paged_rkv_replay;      /* b2 + b47 */
extern const mi_cuda_kernel mi8b_k_attn_paged_rkv_f16;         /* b37 + b47 */
extern const mi_cuda_kernel mi8b_k_attn_paged_rkv_f16_replay;  /* b2 + b37 + b47 */
/* the step's tables checked on the host, in run()'s place on a replay */
mi_status mi8b_chk_kv_scatter(const mi_tensor *n);
mi_status mi8b_chk_attn_paged(const mi_tensor *n);

#endif

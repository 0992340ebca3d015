/* The one-token RoPE, KV store and attention candidates of 8a (install8a_attn.c), which
 * mi_phase8a_install (install8a.c) adds to the dispatch in its order with the matmul ones.
 * Include from phase8a_decode/install8a*.c only. */
#ifndef MI_INSTALL8A_H
#define MI_INSTALL8A_H
#include "phase7a_skeleton/cuda_dispatch.h"

extern const mi_cuda_kernel mi8a_k_rope_pairs;        /* d8 */
extern const mi_cuda_kernel mi8a_k_rkv_rope;          /* d14: q's and k's RoPE, deferred */
extern const mi_cuda_kernel mi8a_k_rkv_store;         /* d14: the K store, deferred */
extern const mi_cuda_kernel mi8a_k_rkv_last;          /* d14: the V store, launching all four */
extern const mi_cuda_kernel mi8a_k_rkv_attn_store;    /* d30: the V store, done by the attention */
extern const mi_cuda_kernel mi8a_k_attn_split;        /* d4 (d21, d22, d32-d35 at launch) */
extern const mi_cuda_kernel mi8a_k_attn_step;         /* d20 (d31 where marked) */
extern const mi_cuda_kernel mi8a_k_attn_step_rkv;     /* d30 */

#endif

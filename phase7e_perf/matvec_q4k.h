/* Streaming one-token (N = 1) matmul for Q4_K weights, and the fused FFN gate/up + SwiGLU on
 * it. Every warp streams its own rows straight from global memory with 16-byte loads (no
 * block-wide staging barrier before compute); the Q8_K activation is staged once per block in
 * shared memory. Same per-unit arithmetic as mi7b_unit_dot (docs/PHASE7E.md); a fixed,
 * grid-independent summation order per row. The _qx forms quantize x inside the kernel (no
 * separate quantization launch), bit-identical to the plain forms. Plain C. */
#ifndef MI_MATVEC_Q4K_H
#define MI_MATVEC_Q4K_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "common/core/mi_err.h"
#include "common/quant/mi_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Q4_K, K % 256 == 0 (K <= 161 * 256: the activation row fits 46 KB of shared memory), N == 1 */
bool mi7e_matvec_q4k_supported(mi_type wt, int64_t K, int64_t N);
/* workspace bytes: one Q8_K activation row (equals mi7e_matvec_staged_workspace(wt, K, 1)) */
size_t mi7e_matvec_q4k_workspace(mi_type wt, int64_t K);
/* W [K, M] (Q4_K) @ x F32 [K, 1] (+ bias [M]) -> y [M, 1]. x is quantized into workspace by
 * mi7b_quantize_act first. A weight base not 16-byte aligned or a workspace not 4-byte aligned
 * goes to mi7e_matvec_staged instead. */
mi_status mi7e_matvec_q4k(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                          int64_t K, int64_t M, void *workspace);
/* W_gate, W_up [K, F] @ x [K, 1] -> mi_canon_swiglu(gate, up) [F, 1]; the gate and up rows of
 * one index are dotted by one warp (same fallback rule, to mi7e_ffn_staged). */
mi_status mi7e_ffn_q4k(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                       int64_t K, int64_t F, void *workspace);

/* mi7e_matvec_q4k / mi7e_ffn_q4k with x quantized inside the kernel, straight into its shared
 * Q8_K row, by 7b's quantizer (phase7b_ops/quant_act.cuh): one launch fewer, results
 * bit-identical. Same shapes, same workspace contract and fallbacks; the workspace is only
 * written on the fallback paths: an unaligned weight base or workspace goes to the staged
 * kernel, an x not 16-byte aligned to mi7e_matvec_q4k / mi7e_ffn_q4k. */
mi_status mi7e_matvec_q4k_qx(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                             int64_t K, int64_t M, void *workspace);
mi_status mi7e_ffn_q4k_qx(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                          int64_t K, int64_t F, void *workspace);

#ifdef __cplusplus
}
#endif
#endif

/* Phase 7e item e12: streaming one-token (N = 1) matmul for Q4_K and Q6_K weights, and the
 * fused FFN gate/up + SwiGLU on it. Every warp streams its own rows straight from global
 * memory with 16-byte loads (no block-wide staging barrier before compute); the Q8_K
 * activation is staged once per block in shared memory. Same per-unit arithmetic as
 * mi7b_unit_dot (docs/PHASE7E.md); a fixed, grid-independent summation order per row.
 * e14: the same kernels quantizing x themselves (no separate quantization launch). */
#ifndef MI_MMV12_H
#define MI_MMV12_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "common/core/mi_err.h"
#include "common/quant/mi_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Q4_K or Q6_K, K % 256 == 0 (K <= 161 * 256: the activation row fits 46 KB of shared
 * memory), N == 1. */
bool mi7e_mmv12_supported(mi_type wt, int64_t K, int64_t N);
/* workspace bytes: one Q8_K activation row (equals mi7e_mmv_workspace(wt, K, 1)) */
size_t mi7e_mmv12_workspace(mi_type wt, int64_t K);
/* W [K, M] (quantized) @ x F32 [K, 1] (+ bias [M]) -> y [M, 1]. x is quantized into workspace
 * by mi7b_quantize_act first. A Q4_K tensor whose base is not 16-byte aligned (Q6_K: not
 * 2-byte aligned) or a workspace not 4-byte aligned goes to e2 (mi7e_mmv) instead. */
mi_status mi7e_mmv12(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                     int64_t K, int64_t M, void *workspace);
/* W_gate, W_up [K, F] @ x [K, 1] -> mi_canon_swiglu(gate, up) [F, 1]; the gate and up rows of
 * one index are dotted by one warp (same fallback rule as mi7e_mmv12, to e5's mi7e_ffn). */
mi_status mi7e_ffn12(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                     int64_t K, int64_t F, void *workspace);
/* The same with an explicit U (super-block groups per lane and iteration; 0 = the default):
 * mmv Q4_K 2 or 4 (default 4), Q6_K 1 or 2 (2); ffn Q4_K 1 or 2 (2), Q6_K 1 (1). For the timing
 * study; each U has its own fixed summation order. MI_ERR_UNSUPPORTED for a U not built. */
mi_status mi7e_mmv12_u(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                       int64_t K, int64_t M, void *workspace, int u);
mi_status mi7e_ffn12_u(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                       int64_t K, int64_t F, void *workspace, int u);

/* Item e14: mi7e_mmv12 / mi7e_ffn12 (default U) with x quantized inside the kernel, straight
 * into its shared Q8_K row, by a copy of mi7b_quantize_act's Q8_K arithmetic (phase7e_perf/quant_q8k.cuh):
 * one launch fewer, results bit-identical to mi7e_mmv12 / mi7e_ffn12. Same shapes, same
 * workspace contract and fallbacks; the workspace is only written on the fallback paths: an
 * unaligned weight base or workspace goes to e2 / e5, Q6_K and an x not 16-byte aligned to
 * mi7e_mmv12 / mi7e_ffn12 (Q6_K is not built with the in-kernel quantization: docs/PHASE7E.md). */
mi_status mi7e_mmv14(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                     int64_t K, int64_t M, void *workspace);
mi_status mi7e_ffn14(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                     int64_t K, int64_t F, void *workspace);

#ifdef __cplusplus
}
#endif
#endif

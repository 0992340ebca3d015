/* Phase 7e item e13: f16 tensor-core prefill matmul. The weights of one call are dequantized
 * to f16 once (in row chunks, into the workspace), the activations are converted to f16 with
 * one exact power-of-two scale per token (no f16 overflow, no flush of small rows), and a
 * multistage cp.async / ldmatrix / mma.sync m16n8k16 GEMM accumulates in f32. Not the CPU's
 * arithmetic (no Q8 activation quantization): its bound is against the exact product of the
 * dequantized weights and the f32 activations (docs/PHASE7E.md, gate_7e's gemm13 checks). */
#ifndef MI_GEMM13_H
#define MI_GEMM13_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "common/core/mi_err.h"
#include "common/quant/mi_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* e13 is used from this many tokens on (bench_7e / gate_7e timings, docs/PHASE7E.md) */
#define MI7E_F16_MIN_N 64
/* NMSE bound against the exact f64 product of dequantized W and f32 x (f16 rounding of both
 * operands, f32 accumulation; measured ~1e-7, docs/PHASE7E.md) */
#define MI7E_GEMM13_NMSE 1e-6

/* Every quantized type of 7b's matmul (the 32-element units of dev7b.cuh) and F16;
 * K % 32 == 0, N >= 1, M >= 1. */
bool mi7e_gemm13_supported(mi_type wt, int64_t K, int64_t M, int64_t N);
/* workspace bytes for one call: x in f16 [N, K] + N scales + one f16 weight chunk (at most
 * MI7E_GEMM13_CHUNK bytes, or one 128-row tile if a row is longer) */
#define MI7E_GEMM13_CHUNK ((size_t)144 << 20)
size_t mi7e_gemm13_workspace(mi_type wt, int64_t K, int64_t M, int64_t N);
/* Test hook: the weight chunk size in bytes (0 = MI7E_GEMM13_CHUNK), so gate_7e can run a
 * multi-chunk call on a small matrix. Process-wide; not for use while calls are in flight. */
void mi7e_gemm13_set_chunk(size_t bytes);
/* Test hook: force 64- or 128-token tiles (0 = by grid size: 128 when that fills two blocks
 * per SM, else 64) so gate_7e checks both. Process-wide, like set_chunk. */
void mi7e_gemm13_set_tile(int bn);
/* Test hook: force a k depth of 32 (4 stages) or 64 (3 stages) per shared-memory stage where
 * K % 64 == 0 (0 = the default); for gate_7e's timing of both. */
void mi7e_gemm13_set_depth(int bk);
/* Test hook: force 8 warps (2 x 4, warp tiles of 64 x tile/4) or 4 warps (2 x 2, 64 x tile/2)
 * per block (0 = the default). Every variant runs the same k16 steps in the same order per
 * output, so all are bit-identical. */
void mi7e_gemm13_set_warps(int nw);
int mi7e_gemm13_default_warps(void);

/* ---- e15 (gemm15_sm90a.cu): the same GEMM on Hopper's wgmma.mma_async (sm_90a). Used by
 * mi7e_gemm13 in place of its mma.sync kernel when mi7e_gemm13_set_wgmma(1) (switch7e.c's
 * item e15), K % 64 == 0, no test hook forces an mma.sync variant, and the build has an
 * sm_90a image on a cc 9.0 device. Not bit-identical to mma.sync (the hardware's order of
 * products inside one wgmma); the same exact-product bound. */
bool mi7e_gemm15_available(void);
/* bn: tokens per tile, 64 or 128 (the caller's rule, mi7e_gemm13's) */
mi_status mi7e_gemm15_launch(void *stream, const void *wh, const void *xh, const float *inv_s, const float *bias,
                             float *y, int64_t ldy, int64_t Mc, int64_t N, int64_t K, int bn);
void mi7e_gemm13_set_wgmma(int on);
int mi7e_gemm13_get_wgmma(void);
/* W [K, M] (quantized) @ x F32 [K, N] (+ bias [M]) -> y F32 [M, N]. The workspace must hold
 * mi7e_gemm13_workspace bytes, 256-byte aligned. */
mi_status mi7e_gemm13(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                      int64_t K, int64_t M, int64_t N, void *workspace);

#ifdef __cplusplus
}
#endif
#endif

/* f16 tensor-core prefill matmul. The weights of one call are dequantized to f16 once (in row
 * chunks, into the workspace), the activations are converted to f16 with one exact
 * power-of-two scale per token (no f16 overflow, no flush of small rows), and a GEMM
 * accumulates in f32: a multistage cp.async / ldmatrix / mma.sync m16n8k16 kernel
 * (gemm_f16.cu), or on Hopper the same GEMM on wgmma.mma_async (gemm_f16_wgmma_sm90a.cu).
 * Not the CPU's arithmetic (no Q8 activation quantization): its bound is against the exact
 * product of the dequantized weights and the f32 activations (docs/PHASE7E.md, gate_7e's
 * gemm_f16 checks). Plain C. */
#ifndef MI_GEMM_F16_H
#define MI_GEMM_F16_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "common/core/mi_err.h"
#include "common/quant/mi_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the MATMUL dispatch uses these kernels from this many tokens on (bench_7e / gate_7e timings,
 * docs/PHASE7E.md) */
#define MI7E_GEMM_F16_MIN_N 64
/* NMSE bound against the exact f64 product of dequantized W and f32 x (f16 rounding of both
 * operands, f32 accumulation; measured ~1e-7, docs/PHASE7E.md) */
#define MI7E_GEMM_F16_NMSE 1e-6
/* the largest f16 weight chunk one call dequantizes at a time, in bytes (at least one
 * 128-row tile when a row is longer) */
#define MI7E_GEMM_F16_CHUNK ((size_t)144 << 20)

/* Every quantized type of 7b's matmul (the 32-element units of dev7b.cuh) and F16;
 * K % 32 == 0, N >= 1, M >= 1. */
bool mi7e_gemm_f16_supported(mi_type wt, int64_t K, int64_t M, int64_t N);
/* workspace bytes for one call of either kernel: x in f16 [N, K] + N scales + one f16 weight
 * chunk */
size_t mi7e_gemm_f16_workspace(mi_type wt, int64_t K, int64_t M, int64_t N);
/* W [K, M] (quantized or F16) @ x F32 [K, N] (+ bias [M]) -> y F32 [M, N], mma.sync kernel.
 * The workspace must hold mi7e_gemm_f16_workspace bytes, 256-byte aligned. */
mi_status mi7e_gemm_f16(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                        int64_t K, int64_t M, int64_t N, void *workspace);

/* The same GEMM on Hopper's wgmma.mma_async (k depth 64, the default tile rule): where the
 * build has an sm_90a image and the device is cc 9.0, and K % 64 == 0. Not bit-identical to
 * the mma.sync kernel (the hardware's order of products inside one wgmma); the same bound.
 * Same contract as mi7e_gemm_f16; MI_ERR_UNSUPPORTED where supported() says no. */
bool mi7e_gemm_f16_wgmma_supported(mi_type wt, int64_t K, int64_t M, int64_t N);
mi_status mi7e_gemm_f16_wgmma(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                              int64_t K, int64_t M, int64_t N, void *workspace);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* Between gemm_f16.cu and gemm_f16_wgmma_sm90a.cu only: whether the wgmma kernel can run here
 * (read once), and its launch on one chunk: Wh f16 [Mc, K], Xh f16 [N, K], inv_s [N] ->
 * y [N, ldy] rows 0 .. Mc-1 (+ bias), bn tokens per tile (64 or 128). */
extern "C" bool mi7e_gemm_f16_wgmma_available(void);
extern "C" mi_status mi7e_gemm_f16_wgmma_launch(void *stream, const void *wh, const void *xh, const float *inv_s,
                                                const float *bias, float *y, int64_t ldy, int64_t Mc, int64_t N,
                                                int64_t K, int bn);
#endif
#endif

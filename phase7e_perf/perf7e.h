/* Phase 7e: the C face of the faster kernels (extern "C" launchers). Each is one more
 * candidate for an op in the CUDA dispatch (phase7a_skeleton/cuda_dispatch.h), added by
 * mi_phase7e_install() with its switch item; this header names what each kernel computes,
 * its shape contract and its supports() rule. Plain C. */
#ifndef MI_PERF7E_H
#define MI_PERF7E_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "common/core/mi_err.h"
#include "common/quant/mi_types.h"
#include "phase7e_perf/matvec_q4k.h"
#include "phase7e_perf/gemm_f16.h"
#include "phase7e_perf/attn_flash.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- matvec_staged_exact.cu: staged-row matmul, W [K, M] (quantized) @ x F32 [K, N]
 * (+ bias [M]) -> [M, N], N <= 8. x is quantized once into workspace exactly as 7b / the CPU
 * do (Q8_0/Q8_1 in 36-byte blocks, Q8_K in 292-byte blocks), so every integer block dot
 * equals the CPU's. */
#define MI7E_MATVEC_MAX_N 8
#define MI7E_MATVEC_STAGED_MIN_K 2048   /* the MATMUL dispatch uses it from this K on (docs/PHASE7E.md) */
bool mi7e_matvec_staged_supported(mi_type wt, int64_t K, int64_t N);
size_t mi7e_matvec_staged_workspace(mi_type wt, int64_t K, int64_t N);
mi_status mi7e_matvec_staged(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                             int64_t K, int64_t M, int64_t N, void *workspace);
/* the same kernel on x already quantized (xq: 7b's quantizer's rows, as in the workspace above):
 * for a caller whose producer wrote x's quantized row itself */
mi_status mi7e_matvec_staged_quantized(void *stream, mi_type wt, const void *w, const void *xq, const float *bias,
                                       float *y, int64_t K, int64_t M, int64_t N);
/* W_gate, W_up [K, F] @ x [K, N] -> silu(gate) * up [F, N], N <= 8 (SwiGLU: mi_canon_swiglu);
 * same supports() and workspace as mi7e_matvec_staged */
mi_status mi7e_ffn_staged(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                          int64_t K, int64_t F, int64_t N, void *workspace);

/* ---- gemm_int8.cu: int8 tensor-core matmul for N > 8, same activation quantization and
 * the same bound as 7b's matmul (NMSE <= 1e-6 vs the CPU) */
bool mi7e_gemm_int8_supported(mi_type wt, int64_t K, int64_t N);
size_t mi7e_gemm_int8_workspace(mi_type wt, int64_t K, int64_t N);
mi_status mi7e_gemm_int8(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                         int64_t K, int64_t M, int64_t N, void *workspace);

/* ---- matvec_q4k_exact.cu (matvec_q4k.h): streaming one-token matmul / fused FFN for Q4_K;
 * gemm_f16.cu, gemm_f16_wgmma_sm90a.cu (gemm_f16.h): f16 tensor-core prefill matmul;
 * attn_flash.cu (attn_flash.h): tensor-core prefill attention */

/* ---- rms_norm_wide_exact.cu: RMS norm x [G, rows], w [G] -> y, 7b's canonical order with
 * every load of a row in flight; bit-identical to 7b's (rows longer than 12288 take 7b's kernel) */
mi_status mi7e_rms_norm(void *stream, const float *x, const float *w, float *y, int64_t G, int64_t rows, float eps);

/* ---- attn_tiled.cu: query-tiled attention for N >= MI7E_ATTN_MIN_N (prefill); 7b's semantics:
 * q [hd*Hq, N], caches [hd*Hkv, n_ctx] (F16|F32) -> o [hd*Hq, N], causal over 0..n_past+i */
#define MI7E_ATTN_MIN_N 16
bool mi7e_attn_tiled_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype, int64_t N);
mi_status mi7e_attn_tiled(void *stream, const float *q, const void *k, const void *v, mi_type ctype, float *o,
                          int64_t N, int64_t n_past, int64_t hd, int64_t Hq, int64_t Hkv, float scale);

/* Multiprocessors of the current device, read once (device7e.c): every 7e grid rule uses it */
int mi7e_sm_count(void);

/* adds the 7e kernels to the CUDA dispatch (called by the generated phases.c) */
void mi_phase7e_install(void);
/* the one-token Q4_K matmul with x quantized in the kernel (e12 + e14), for a later phase's
 * pass or candidate that recognizes the dispatch's choice (8a's runs of one x) */
const struct mi_cuda_kernel *mi7e_matmul_q4k_kernel(void);
/* the staged-row one-token matmul (e2), likewise (8a's residual add in its bias) */
const struct mi_cuda_kernel *mi7e_matmul_staged_kernel(void);
/* the staged-row fused FFN (e5), likewise (8a's norm folded into it) */
const struct mi_cuda_kernel *mi7e_ffn_staged_kernel(void);

#ifdef __cplusplus
}
#endif
#endif

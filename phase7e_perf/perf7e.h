/* Phase 7e: independently switchable performance items (docs/PHASE7E.md). The C face of
 * the 7e kernels (extern "C" launchers) and of the switch: MINFER_PERF_OFF=e2,e7,... (or
 * "all") lists the items to turn off; mi_phase7e_install() reads it and puts either the 7e
 * entry or the entry it found (7b / 7c) into the CUDA op table. Plain C. */
#ifndef MI_PERF7E_H
#define MI_PERF7E_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "common/core/mi_err.h"
#include "common/quant/mi_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The items. e1 (the difference study) is documentation, e3/e4/e6 are delivered by lower
 * phases and verified by gate_7e (docs/PHASE7E.md says why each has no kernel here). */
typedef enum {
    MI7E_E2 = 0,   /* staged-row one-token (N <= 8) quantized matmul */
    MI7E_E3,       /* embedding lookup on the device (7b GET_ROWS): verified, zero copies */
    MI7E_E4,       /* F32 x F32 matmul on the device (7b mm_float): verified */
    MI7E_E5,       /* fused FFN gate/up/SwiGLU with the staged-row kernel (7c's fusion pass) */
    MI7E_E6,       /* pinned staging ring for inputs (7d): verified through 7d's counter */
    MI7E_E7,       /* tensor-core (int8 mma.sync) prefill matmul */
    MI7E_E8,       /* query-tiled prefill attention */
    MI7E_E9,       /* RMS norm with its loads in flight (bit-identical to 7b's) */
    MI7E_E10,      /* tensor-core (mma f16) prefill attention */
    MI7E_E11,      /* prefill matmul: weights unpacked once per call, not once per token tile */
    MI7E_E12,      /* streaming one-token matmul / fused FFN for Q4_K */
    MI7E_E13,      /* f16 tensor-core prefill matmul on weights dequantized once per call */
    MI7E_E14,      /* e12 with x quantized inside the kernel (no quantization launch); needs e12 on */
    MI7E_E15,      /* e13's GEMM on wgmma.mma_async (sm_90a build, cc 9.0 device); needs e13 on */
    MI7E_E16,      /* one-token matmul of the 32-element formats below e2's K, x quantized in the kernel */
    MI7E_COUNT
} mi7e_item;

const char *mi7e_item_name(mi7e_item it);     /* "e2" ... */
bool mi7e_item_on(mi7e_item it);
/* Re-apply a switch list ("e2,e7", "all", "" = everything on) to the op table now (gates
 * use it for in-process A/B; the process default comes from MINFER_PERF_OFF at install).
 * Returns MI_ERR_INVALID for an unknown item name (nothing changed). */
mi_status mi7e_set_off(const char *list);
/* Which items the current table uses, e.g. "e2,e5,e7 on; off: none" (for logs / JSON). */
void mi7e_describe(char *buf, size_t n);

/* Counters (process-wide, since start): kernel launches per item. e14's launches are e12
 * launches too (counted in both: e14 is e12 quantizing x itself). */
typedef struct {
    uint64_t e2_launches, e5_launches, e7_launches, e8_launches, e9_launches, e10_launches, e11_launches,
        e12_launches, e13_launches, fallback_launches, e14_launches, e16_launches;
} mi7e_counters;
void mi7e_counters_get(mi7e_counters *out);

/* ---- e2: staged-row matmul, W [K, M] (quantized) @ x F32 [K, N] (+ bias [M]) -> [M, N], N <= 8.
 * x is quantized once into workspace exactly as 7b / the CPU do (Q8_0/Q8_1 in 36-byte
 * blocks, Q8_K in 292-byte blocks), so every integer block dot equals the CPU's. */
#define MI7E_MMV_MAX_N 8
#define MI7E_MMV_MIN_K 2048   /* the MATMUL entry uses e2 from this K on (switch7e.c, docs/PHASE7E.md) */
bool mi7e_mmv_supported(mi_type wt, int64_t K, int64_t N);
size_t mi7e_mmv_workspace(mi_type wt, int64_t K, int64_t N);
mi_status mi7e_mmv(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                   int64_t K, int64_t M, int64_t N, void *workspace);
/* e5: W_gate, W_up [K, F] @ x [K, N] -> silu(gate) * up [F, N], N <= 8 (SwiGLU: mi_canon_swiglu) */
mi_status mi7e_ffn(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                   int64_t K, int64_t F, int64_t N, void *workspace);

/* ---- e7: int8 tensor-core matmul for N > 8 (same activation quantization, same bound) */
bool mi7e_mmq_supported(mi_type wt, int64_t K, int64_t N);
size_t mi7e_mmq_workspace(mi_type wt, int64_t K, int64_t N);
/* pre (item e11): unpack the weights once per call into the workspace, which must then hold
 * mi7e_mmq_pre_workspace bytes; bit-identical to pre = false */
mi_status mi7e_mmq(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                   int64_t K, int64_t M, int64_t N, void *workspace, bool pre);
size_t mi7e_mmq_pre_workspace(mi_type wt, int64_t K, int64_t M, int64_t N);
#define MI7E_PRE_MIN_N 1024   /* e11 is used from this many tokens on (bench_7e, docs/PHASE7E.md) */

/* ---- e16 (mmv16.cu): W [K, M] (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) @ x F32 [K, 1] (+ bias) -> [M, 1],
 * K % 32 == 0, K <= 16384; 7b's warp-per-row kernel with x quantized inside (no workspace) */
bool mi7e_mmv16_supported(mi_type wt, int64_t K, int64_t N);
/* e16 on e2 / e5 (mmv7e_exact.cu): the same contract as mi7e_mmv / mi7e_ffn; for one token of a
 * 32-element format the kernel quantizes x itself (bit-identical, one launch fewer), else it is
 * mi7e_mmv / mi7e_ffn */
mi_status mi7e_mmv_qin(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                       int64_t K, int64_t M, int64_t N, void *workspace);
mi_status mi7e_ffn_qin(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                       int64_t K, int64_t F, int64_t N, void *workspace);
mi_status mi7e_mmv16(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                     int64_t K, int64_t M);

/* ---- e9: RMS norm x [G, rows], w [G] -> y, 7b's canonical order with eight loads in flight */
mi_status mi7e_rms_norm(void *stream, const float *x, const float *w, float *y, int64_t G, int64_t rows, float eps);
/* 0: the item's choice; 1: the block form only (gate_7e times it against 7b's kernel) */
mi_status mi7e_rms_norm_variant(void *stream, const float *x, const float *w, float *y, int64_t G, int64_t rows,
                                float eps, int variant);

/* ---- e8: query-tiled attention for N >= MI7E_ATTN_MIN_N (prefill); 7b's semantics:
 * q [hd*Hq, N], caches [hd*Hkv, n_ctx] (F16|F32) -> o [hd*Hq, N], causal over 0..n_past+i */
#define MI7E_ATTN_MIN_N 16
bool mi7e_attn_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype, int64_t N);
mi_status mi7e_attn(void *stream, const float *q, const void *k, const void *v, mi_type ctype, float *o,
                    int64_t N, int64_t n_past, int64_t hd, int64_t Hq, int64_t Hkv, float scale);

/* Shared by the two .cu files: quantize x [K, N] into the 7b activation layout. */

/* Multiprocessors of the current device, read once (device7e.c): every 7e grid rule uses it */
int mi7e_sm_count(void);

void mi_phase7e_install(void);

#ifdef __cplusplus
}
#endif
#endif

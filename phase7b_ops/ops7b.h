/* Phase 7b: the C face of the CUDA kernels. ops_table.c (plain C) reaches every kernel
 * only through these extern "C" launchers; each one picks its grid, enqueues on `stream`
 * (a cudaStream_t as void*), checks the launch and returns mi_status. None synchronizes.
 * Shapes follow common/graph/graph.h: ne[0] innermost, activations contiguous F32. */
#ifndef MI_OPS7B_H
#define MI_OPS7B_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "common/core/mi_err.h"
#include "common/quant/mi_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- bit-identical tier (built with --fmad=false; docs/NUMERICS.md) ---- */
/* x [G, rows] (rows = whole rows or heads*tokens), w [G] -> y [G, rows] */
mi_status mi7b_rms_norm(void *stream, const float *x, const float *w, float *y,
                        int64_t G, int64_t rows, float eps);
/* a [D, N] op b [D, bN] (bN = N or 1: broadcast) -> y [D, N]; op 0 = add, 1 = mul */
mi_status mi7b_binary(void *stream, int op, const float *a, const float *b, float *y,
                      int64_t D, int64_t N, int64_t bN);
mi_status mi7b_silu(void *stream, const float *x, float *y, int64_t n);
/* g [n], u [n] -> silu(g) * u */
mi_status mi7b_swiglu(void *stream, const float *g, const float *u, float *y, int64_t n);
/* table [E, V] of type t, ids I32 [N] -> y F32 [E, N]; an id outside [0, V) gives a row
 * of NaN (visible downstream), never an out-of-bounds read */
mi_status mi7b_get_rows(void *stream, mi_type t, const void *table, int64_t E, int64_t V,
                        const int32_t *ids, float *y, int64_t N);
bool mi7b_get_rows_supported(mi_type t, int64_t E);
/* new rows x F32 [row, N] -> cache rows n_past .. n_past+N-1 (F16: mi_f32_to_f16, or F32) */
mi_status mi7b_kv_store(void *stream, const float *x, void *cache, mi_type ctype,
                        int64_t row, int64_t N, int64_t n_past);

/* ---- tolerance tier ---- */
/* x [hd*H, N], pos I32 [N] -> y [hd*H, N]; mode MI_ROPE_NORMAL | MI_ROPE_NEOX */
mi_status mi7b_rope(void *stream, const float *x, const int32_t *pos, float *y,
                    int64_t hd, int64_t H, int64_t N, int mode, int n_rot, float freq_base);
/* q [hd*Hq, N], caches [hd*Hkv, n_ctx] (F16|F32) -> o [hd*Hq, N]; causal over 0..n_past+i */
mi_status mi7b_attn(void *stream, const float *q, const void *k, const void *v, mi_type ctype,
                    float *o, int64_t N, int64_t n_past, int64_t hd, int64_t Hq, int64_t Hkv,
                    float scale);
bool mi7b_attn_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype);

/* W [K, M] (type wt) @ x F32 [K, N] (+ bias F32 [M]) -> y F32 [M, N].
 * Quantized weights quantize x first into `workspace` (mi7b_matmul_workspace bytes)
 * in the CPU's activation format for that weight type. */
bool mi7b_matmul_supported(mi_type wt, int64_t K);
size_t mi7b_matmul_workspace(mi_type wt, int64_t K, int64_t N);
/* Bytes of one activation row of K elements in the dot format of weight type wt (0 for a
 * float or unknown type), and x F32 [K, N] -> that format at dst (N such rows). The same
 * quantizer feeds every quantized matmul of phases 7b, 7c and 7e. */
size_t mi7b_act_row_bytes(mi_type wt, int64_t K);
mi_status mi7b_quantize_act(void *stream, mi_type wt, const float *x, int64_t K, int64_t N, void *dst);
mi_status mi7b_matmul(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                      float *y, int64_t K, int64_t M, int64_t N, void *workspace);
/* The same matmul's second kernel alone, on x already in that format (xq: N rows of
 * mi7b_act_row_bytes, as mi7b_quantize_act writes them): bit-identical to mi7b_matmul. */
mi_status mi7b_matmul_quantized(void *stream, mi_type wt, const void *w, const void *xq, const float *bias,
                                float *y, int64_t K, int64_t M, int64_t N);

/* adds 7b's kernels to the CUDA dispatch (called by the generated phases.c) */
void mi_phase7b_install(void);
/* The nodes 7b's kernels accept (ops_table.c): op x types x shapes. A later phase's
 * candidate for the same op accepts a subset of these (its own rule on top). */
struct mi_tensor;
bool mi7b_matmul_node_supported(const struct mi_tensor *node);
bool mi7b_rms_node_supported(const struct mi_tensor *node);
bool mi7b_attn_node_supported(const struct mi_tensor *node);
bool mi7b_kv_store_node_supported(const struct mi_tensor *node);
bool mi7b_rope_node_supported(const struct mi_tensor *node);
/* 7b's MATMUL candidate: a later pass that replaces its work asks the dispatch whether it
 * is the one a node would run (mi_cuda_choice). */
struct mi_cuda_kernel;
const struct mi_cuda_kernel *mi7b_matmul_kernel(void);

/* byte copy on the stream (SLICE_ROWS, same-backend COPY) */
mi_status mi7b_copy(void *stream, void *dst, const void *src, size_t n);

#ifdef __cplusplus
}
#endif
#endif

/* The f16 GEMM with its choices forced (gemm_f16_variants.cu): the gate runs every variant
 * of the mma.sync kernel, the 4-warp layout the library does not build included, and a small
 * weight chunk to cross chunk boundaries on a small matrix. */
#ifndef GATE_GEMM_F16_VARIANTS_H
#define GATE_GEMM_F16_VARIANTS_H
#include <stddef.h>
#include <stdint.h>
#include "common/core/mi_err.h"
#include "common/quant/mi_types.h"
#ifdef __cplusplus
extern "C" {
#endif

/* 0 = the library's rule for each: tile 64 | 128 tokens, depth 32 | 64, warps 4 | 8, chunk
 * bytes (at most MI7E_GEMM_F16_CHUNK, so mi7e_gemm_f16_workspace suffices) */
typedef struct {
    int tile, depth, warps;
    size_t chunk;
} gate_gemm_f16_opts;

/* mi7e_gemm_f16 with the choices in o (NULL: the rule); MI_ERR_INVALID for a value not listed */
mi_status gate_gemm_f16_run(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                            int64_t K, int64_t M, int64_t N, void *workspace, const gate_gemm_f16_opts *o);

#ifdef __cplusplus
}
#endif
#endif

/* Tensor-core (mma.sync f16) prefill attention, the C face of phase7e_perf/attn_flash.cu.
 * Same semantics as mi7e_attn_tiled (perf7e.h): causal, GQA, query i (position n_past + i)
 * sees keys 0 .. n_past + i. Plain C. */
#ifndef MI_ATTN_FLASH_H
#define MI_ATTN_FLASH_H
#include <stdint.h>
#include <stdbool.h>
#include "common/core/mi_err.h"
#include "common/quant/mi_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* hd in {64, 128}, Hq % Hkv == 0, ctype F16 only, MI7E_ATTN_MIN_N (16) <= N <= 65535 * 64 */
bool mi7e_attn_flash_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype, int64_t N);
/* q F32 [hd*Hq, N], caches k, v F16 [hd*Hkv, n_ctx >= n_past + N] -> o F32 [hd*Hq, N].
 * Q and P are rounded to f16 for the tensor cores (accumulation in f32): the result
 * differs from mi7e_attn_tiled's by NMSE ~1e-7 on unit-scale data. Caches whose addresses
 * are not 16-byte aligned go to mi7e_attn_tiled instead. */
mi_status mi7e_attn_flash(void *stream, const float *q, const void *k, const void *v, mi_type ctype, float *o,
                          int64_t N, int64_t n_past, int64_t hd, int64_t Hq, int64_t Hkv, float scale);

#ifdef __cplusplus
}
#endif
#endif

/* What the split attention's kernels share (attn_split_kv.cu: the scalar kernel and the combine;
 * attn_split_mma.cu: the tensor-core kernel, item d22): which keys a split takes. The combine
 * reads the partials by the same rule, so every kernel that writes them must use it. */
#ifndef MI8A_ATTN_SPLIT_CUH
#define MI8A_ATTN_SPLIT_CUH
#include <stdint.h>
#include "phase8a_decode/decode8a.h"

/* n_kv of the step: keys 0 .. n_past, clamped to the cache */
__device__ __forceinline__ int64_t skv_n_kv(const int32_t *np_dev, int64_t np_host, int64_t n_ctx) {
    const int64_t n_kv = (np_dev ? (int64_t)np_dev[0] : np_host) + 1;
    return n_kv < n_ctx ? n_kv : n_ctx;
}

/* keys a split takes: the S splits share n_kv, none takes less than a tile of MI8A_SKV_T keys
 * (fewer, fuller blocks near the start of the context) */
__device__ __forceinline__ int64_t skv_chunk(int64_t n_kv, int S) {
    const int64_t c = (n_kv + S - 1) / S;
    return c > MI8A_SKV_T ? c : MI8A_SKV_T;
}

#endif

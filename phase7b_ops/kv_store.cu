/* KV_STORE: new K or V rows F32 [row, N] -> cache rows n_past .. n_past+N-1, converted
 * by mi_f32_to_f16 (round to nearest even, the CPU's conversion) or copied for an F32
 * cache. The node aliases the cache, so later ATTN nodes read what this wrote. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"

__global__ void kernel_kv_store_f16(const float *__restrict__ x, uint16_t *__restrict__ cache,
                                    int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        cache[i] = mi_f32_to_f16(x[i]);
}

__global__ void kernel_kv_store_f32(const float *__restrict__ x, float *__restrict__ cache, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        cache[i] = x[i];
}

extern "C" mi_status mi7b_kv_store(void *stream, const float *x, void *cache, mi_type ctype,
                                   int64_t row, int64_t N, int64_t n_past) {
    const int64_t n = row * N;
    if (n <= 0 || n_past < 0) return mi_err(MI_ERR_INVALID, "mi7b_kv_store: bad shape");
    cudaStream_t st = (cudaStream_t)stream;
    const unsigned grid = mi7b_blocks(n, 256);
    if (ctype == MI_TYPE_F16) {
        kernel_kv_store_f16<<<grid, 256, 0, st>>>(x, (uint16_t *)cache + (size_t)n_past * row, n);
        MI_CU_CHECK_LAUNCH("kernel_kv_store_f16");
    } else if (ctype == MI_TYPE_F32) {
        kernel_kv_store_f32<<<grid, 256, 0, st>>>(x, (float *)cache + (size_t)n_past * row, n);
        MI_CU_CHECK_LAUNCH("kernel_kv_store_f32");
    } else {
        return mi_err(MI_ERR_UNSUPPORTED, "mi7b_kv_store: cache type %s", mi_type_name(ctype));
    }
    return MI_OK;
}

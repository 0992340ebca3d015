/* KV_SCATTER: new K or V rows F32 [row, N] -> cache rows slots[i] of a batch's KV pool,
 * converted by mi_f32_to_f16 (round to nearest even: 7b's KV store and the CPU's conversion)
 * or copied for an F32 cache, so the rows equal what a session's cache holds, bit for bit.
 * One thread an element, a grid-stride loop; a slot outside the cache writes nothing. */
#include "phase7b_ops/dev7b.cuh"
#include "phase8b_batch/batch8b.h"

template <typename CT>
__device__ __forceinline__ CT kv_convert(float v);
template <>
__device__ __forceinline__ uint16_t kv_convert<uint16_t>(float v) { return mi_f32_to_f16(v); }
template <>
__device__ __forceinline__ float kv_convert<float>(float v) { return v; }

template <typename CT>
__global__ void kernel_kv_scatter(const float *__restrict__ x, CT *__restrict__ cache, const int32_t *__restrict__ slots,
                                  int64_t row, int64_t n, int64_t n_rows) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t r = i / row, e = i - r * row;
        const int64_t slot = slots[r];
        if (slot < 0 || slot >= n_rows) continue;
        cache[slot * row + e] = kv_convert<CT>(x[i]);
    }
}

extern "C" mi_status mi8b_kv_scatter(void *stream, const float *x, void *cache, mi_type ctype, int64_t row, int64_t N,
                                     const int32_t *slots, int64_t n_rows) {
    const int64_t n = row * N;
    if (row <= 0 || N <= 0 || n_rows <= 0 || !x || !cache || !slots)
        return mi_err(MI_ERR_INVALID, "mi8b_kv_scatter: %lld rows of %lld into a cache of %lld rows", (long long)N,
                      (long long)row, (long long)n_rows);
    const cudaStream_t st = (cudaStream_t)stream;
    const unsigned grid = mi7b_blocks(n, 256);
    if (ctype == MI_TYPE_F16) {
        kernel_kv_scatter<uint16_t><<<grid, 256, 0, st>>>(x, (uint16_t *)cache, slots, row, n, n_rows);
        MI_CU_CHECK_LAUNCH("kernel_kv_scatter<f16>");
    } else if (ctype == MI_TYPE_F32) {
        kernel_kv_scatter<float><<<grid, 256, 0, st>>>(x, (float *)cache, slots, row, n, n_rows);
        MI_CU_CHECK_LAUNCH("kernel_kv_scatter<f32>");
    } else {
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_kv_scatter: cache type %s", mi_type_name(ctype));
    }
    return MI_OK;
}

/* Attention and KV-cache store for a captured decode step: both read n_past from a device
 * int32 (the step-params slot that graphs7d.c fills by an async copy before each step), not
 * from a launch argument, so a captured decode graph stays valid while the KV cache grows: the
 * same kernel node reads a new n_past each replay. Attention runs 7b's own kernel body
 * (phase7b_ops/attn_core.cuh); the stores are 7b's conversion with a device n_past. gate_7d
 * checks both bit for bit against 7b on random data before it trusts a replay. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7d_graphs/graphs7d.h"

#include "phase7b_ops/attn_core.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"

#define A7_T MI7B_ATT_T
#define A7_MAX_HD MI7B_ATT_MAX_HD

/* q [hd*Hq, N], caches [hd*Hkv, n_ctx] -> o [hd*Hq, N]; 7b's body (attn_core.cuh) with
 * n_past = *n_past_dev read at run time; query i sees keys 0 .. n_past+i, clamped to n_ctx
 * so a bad slot value never reads past the cache */
template <typename KT>
__global__ void __launch_bounds__(A7_T) kernel_attn_dev(const float *__restrict__ Q, const KT *__restrict__ Kc,
                                                        const KT *__restrict__ Vc, float *__restrict__ O,
                                                        const int32_t *__restrict__ n_past_dev, int64_t n_ctx,
                                                        int hd, int Hq, int Hkv, float scale) {
    MI_PDL_ENTRY();
    int64_t n_kv = (int64_t)n_past_dev[0] + (int64_t)blockIdx.y + 1;
    if (n_kv > n_ctx) n_kv = n_ctx;
    mi7b_attn_body<KT>(Q, Kc, Vc, O, n_kv, hd, Hq, Hkv, scale);
}

/* x [row, N] -> cache rows n_past .. n_past+N-1 (n_past = *n_past_dev); rows past
 * n_ctx are dropped, so a bad slot value cannot write outside the cache */
__global__ void kernel_kv_store_dev_f16(const float *__restrict__ x, uint16_t *__restrict__ cache,
                                        const int32_t *__restrict__ n_past_dev, int64_t row, int64_t n,
                                        int64_t n_ctx) {
    MI_PDL_ENTRY();
    const int64_t n_past = n_past_dev[0];
    if (n_past < 0) return;
    const int64_t lim = (n_ctx - n_past) * row;
    uint16_t *dst = cache + (size_t)n_past * (size_t)row;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n && i < lim; i += stride)
        dst[i] = mi_f32_to_f16(x[i]);
}

__global__ void kernel_kv_store_dev_f32(const float *__restrict__ x, float *__restrict__ cache,
                                        const int32_t *__restrict__ n_past_dev, int64_t row, int64_t n,
                                        int64_t n_ctx) {
    MI_PDL_ENTRY();
    const int64_t n_past = n_past_dev[0];
    if (n_past < 0) return;
    const int64_t lim = (n_ctx - n_past) * row;
    float *dst = cache + (size_t)n_past * (size_t)row;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n && i < lim; i += stride)
        dst[i] = x[i];
}

extern "C" mi_status mi7d_attn(void *stream, const float *q, const void *k, const void *v, mi_type ctype,
                               float *o, int64_t N, const int32_t *n_past_dev, int64_t n_ctx, int64_t hd,
                               int64_t Hq, int64_t Hkv, float scale) {
    const bool ok = hd > 0 && hd <= A7_MAX_HD && hd % 2 == 0 && Hkv > 0 && Hq > 0 && Hq % Hkv == 0 &&
                    Hq <= 65535 && N > 0 && N <= 65535 && n_ctx > 0 && n_past_dev &&
                    (ctype == MI_TYPE_F16 || ctype == MI_TYPE_F32);
    if (!ok)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7d_attn: hd %lld, Hq %lld, Hkv %lld, N %lld, cache %s", (long long)hd,
                      (long long)Hq, (long long)Hkv, (long long)N, mi_type_name(ctype));
    dim3 grid((unsigned)Hq, (unsigned)N);
    cudaStream_t st = (cudaStream_t)stream;
    if (ctype == MI_TYPE_F16)
        MI_CU_CHECK(MI_PDL_LAUNCH(kernel_attn_dev<uint16_t>, grid, A7_T, 0, st, q, (const uint16_t *)k,
                                  (const uint16_t *)v, o, n_past_dev, n_ctx, (int)hd, (int)Hq, (int)Hkv, scale));
    else
        MI_CU_CHECK(MI_PDL_LAUNCH(kernel_attn_dev<float>, grid, A7_T, 0, st, q, (const float *)k, (const float *)v, o,
                                  n_past_dev, n_ctx, (int)hd, (int)Hq, (int)Hkv, scale));
    MI_CU_CHECK_LAUNCH("kernel_attn_dev");
    return MI_OK;
}

extern "C" mi_status mi7d_kv_store(void *stream, const float *x, void *cache, mi_type ctype, int64_t row,
                                   int64_t N, const int32_t *n_past_dev, int64_t n_ctx) {
    const int64_t n = row * N;
    if (n <= 0 || n_ctx <= 0 || !n_past_dev) return mi_err(MI_ERR_INVALID, "mi7d_kv_store: bad shape");
    cudaStream_t st = (cudaStream_t)stream;
    const unsigned grid = mi7b_blocks(n, 256);
    if (ctype == MI_TYPE_F16) {
        MI_CU_CHECK(MI_PDL_LAUNCH(kernel_kv_store_dev_f16, grid, 256, 0, st, x, (uint16_t *)cache, n_past_dev, row, n,
                                  n_ctx));
        MI_CU_CHECK_LAUNCH("kernel_kv_store_dev_f16");
    } else if (ctype == MI_TYPE_F32) {
        MI_CU_CHECK(MI_PDL_LAUNCH(kernel_kv_store_dev_f32, grid, 256, 0, st, x, (float *)cache, n_past_dev, row, n,
                                  n_ctx));
        MI_CU_CHECK_LAUNCH("kernel_kv_store_dev_f32");
    } else {
        return mi_err(MI_ERR_UNSUPPORTED, "mi7d_kv_store: cache type %s", mi_type_name(ctype));
    }
    return MI_OK;
}

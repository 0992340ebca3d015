/* Phase 7d: the two ops whose kernels used to take n_past as a launch argument (ATTN,
 * KV_STORE), rebuilt to read n_past from a device int32 (the step-params slot that
 * graphs7d.c fills by an async copy before each step). A captured decode graph then
 * stays valid while the KV cache grows: the same kernel node reads a new n_past each
 * replay. The arithmetic is 7b's, operation for operation (same tiles, same reduction
 * trees, same order), so the outputs are bit-identical to phase7b_ops/attn.cu and
 * kv_store.cu; gate_7d checks that on random data before it trusts a replay. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7d_graphs/graphs7d.h"

#define A7_T 128      /* keys per tile = threads per block */
#define A7_MAX_HD 256

__device__ __forceinline__ float2 a7_ld2(const uint16_t *p) { return __half22float2(*(const __half2 *)p); }
__device__ __forceinline__ float2 a7_ld2(const float *p) { return *(const float2 *)p; }
__device__ __forceinline__ float a7_ld1(const uint16_t *p) { return __half2float(__ushort_as_half(*p)); }
__device__ __forceinline__ float a7_ld1(const float *p) { return *p; }

/* block-wide reduction over the 4 warps; every thread gets the same value */
template <bool MAX>
__device__ __forceinline__ float a7_reduce(float v, float *red) {
    for (int off = 16; off >= 1; off >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = MAX ? fmaxf(v, o) : v + o;
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    return MAX ? fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3])) : (red[0] + red[1]) + (red[2] + red[3]);
}

/* q [hd*Hq, N], caches [hd*Hkv, n_ctx] -> o [hd*Hq, N]; one block per (head, query);
 * query i sees keys 0 .. n_past+i with n_past = *n_past_dev, read at run time */
template <typename KT>
__global__ void __launch_bounds__(A7_T) kernel_attn_dev(const float *__restrict__ Q, const KT *__restrict__ Kc,
                                                        const KT *__restrict__ Vc, float *__restrict__ O,
                                                        const int32_t *__restrict__ n_past_dev, int64_t n_ctx,
                                                        int hd, int Hq, int Hkv, float scale) {
    __shared__ float qs[A7_MAX_HD];
    __shared__ float ps[A7_T];
    __shared__ float red[8];
    const int h = blockIdx.x, tid = threadIdx.x;
    const int64_t i = blockIdx.y;
    const int64_t n_past = n_past_dev[0];
    const int kvh = h / (Hq / Hkv);
    int64_t n_kv = n_past + i + 1;
    if (n_kv > n_ctx) n_kv = n_ctx;   /* a bad slot value never reads past the cache */
    const size_t kvrow = (size_t)hd * Hkv;
    const float *qrow = Q + (size_t)i * hd * Hq + (size_t)h * hd;
    for (int d = tid; d < hd; d += A7_T) qs[d] = qrow[d];
    __syncthreads();

    float acc0 = 0.0f, acc1 = 0.0f; /* dims tid and tid + 128 */
    float m = -INFINITY, l = 0.0f;
    for (int64_t t0 = 0; t0 < n_kv; t0 += A7_T) {
        const int64_t t = t0 + tid;
        float s = -INFINITY;
        if (t < n_kv) {
            const KT *kr = Kc + (size_t)t * kvrow + (size_t)kvh * hd;
            float dot = 0.0f;
            for (int d = 0; d < hd; d += 2) {
                const float2 kv = a7_ld2(kr + d);
                dot += qs[d] * kv.x;
                dot += qs[d + 1] * kv.y;
            }
            s = scale * dot;
        }
        const float mt = a7_reduce<true>(s, red);
        const float m_new = fmaxf(m, mt);
        const float p = t < n_kv ? expf(s - m_new) : 0.0f;
        ps[tid] = p;
        const float lt = a7_reduce<false>(p, red + 4);
        const float corr = expf(m - m_new);
        l = l * corr + lt;
        m = m_new;
        const int tn = (int)(n_kv - t0 < A7_T ? n_kv - t0 : A7_T);
        const KT *vb = Vc + (size_t)t0 * kvrow + (size_t)kvh * hd;
        if (tid < hd) {
            float a = acc0 * corr;
            for (int tt = 0; tt < tn; tt++) a += ps[tt] * a7_ld1(vb + (size_t)tt * kvrow + tid);
            acc0 = a;
        }
        if (tid + A7_T < hd) {
            float a = acc1 * corr;
            for (int tt = 0; tt < tn; tt++) a += ps[tt] * a7_ld1(vb + (size_t)tt * kvrow + tid + A7_T);
            acc1 = a;
        }
        __syncthreads(); /* ps and red are rewritten by the next tile */
    }
    float *orow = O + (size_t)i * hd * Hq + (size_t)h * hd;
    if (tid < hd) orow[tid] = acc0 / l;
    if (tid + A7_T < hd) orow[tid + A7_T] = acc1 / l;
}

/* x [row, N] -> cache rows n_past .. n_past+N-1 (n_past = *n_past_dev); rows past
 * n_ctx are dropped, so a bad slot value cannot write outside the cache */
__global__ void kernel_kv_store_dev_f16(const float *__restrict__ x, uint16_t *__restrict__ cache,
                                        const int32_t *__restrict__ n_past_dev, int64_t row, int64_t n,
                                        int64_t n_ctx) {
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
        kernel_attn_dev<uint16_t><<<grid, A7_T, 0, st>>>(q, (const uint16_t *)k, (const uint16_t *)v, o, n_past_dev,
                                                         n_ctx, (int)hd, (int)Hq, (int)Hkv, scale);
    else
        kernel_attn_dev<float><<<grid, A7_T, 0, st>>>(q, (const float *)k, (const float *)v, o, n_past_dev, n_ctx,
                                                      (int)hd, (int)Hq, (int)Hkv, scale);
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
        kernel_kv_store_dev_f16<<<grid, 256, 0, st>>>(x, (uint16_t *)cache, n_past_dev, row, n, n_ctx);
        MI_CU_CHECK_LAUNCH("kernel_kv_store_dev_f16");
    } else if (ctype == MI_TYPE_F32) {
        kernel_kv_store_dev_f32<<<grid, 256, 0, st>>>(x, (float *)cache, n_past_dev, row, n, n_ctx);
        MI_CU_CHECK_LAUNCH("kernel_kv_store_dev_f32");
    } else {
        return mi_err(MI_ERR_UNSUPPORTED, "mi7d_kv_store: cache type %s", mi_type_name(ctype));
    }
    return MI_OK;
}

/* Causal GQA attention over the KV cache, any n_past, decode (N = 1) and prefill alike:
 * one block per (query head, query token), 128 threads; keys in tiles of 128 (thread t
 * scores key t0+t), an online softmax (running max and sum, rescaled per tile), then each
 * thread accumulates its output dims over the tile's keys in key order. Reductions are
 * fixed trees in shared memory: no atomics, repeated runs are bit-identical.
 * q [hd*Hq, N], K/V caches [hd*Hkv, n_ctx] (F16 | F32) -> o [hd*Hq, N]; query i sees keys
 * 0 .. n_past+i; KV head = h / (Hq/Hkv); score = scale * dot(q, k). */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"

#define ATT_T 128      /* keys per tile = threads per block */
#define ATT_MAX_HD 256

__device__ __forceinline__ float2 ld2(const uint16_t *p) {
    return __half22float2(*(const __half2 *)p);
}
__device__ __forceinline__ float2 ld2(const float *p) { return *(const float2 *)p; }
__device__ __forceinline__ float ld1(const uint16_t *p) { return __half2float(__ushort_as_half(*p)); }
__device__ __forceinline__ float ld1(const float *p) { return *p; }

/* block-wide reduction over 4 warps; every thread gets the same value */
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float *red) {
    for (int off = 16; off >= 1; off >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = MAX ? fmaxf(v, o) : v + o;
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    const float r = MAX ? fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]))
                        : (red[0] + red[1]) + (red[2] + red[3]);
    return r;
}

template <typename KT>
__global__ void __launch_bounds__(ATT_T) kernel_attn(const float *__restrict__ Q, const KT *__restrict__ Kc,
                                                     const KT *__restrict__ Vc, float *__restrict__ O,
                                                     int64_t n_past, int hd, int Hq, int Hkv, float scale) {
    __shared__ float qs[ATT_MAX_HD];
    __shared__ float ps[ATT_T];
    __shared__ float red[8];
    const int h = blockIdx.x, tid = threadIdx.x;
    const int64_t i = blockIdx.y;
    const int kvh = h / (Hq / Hkv);
    const int64_t n_kv = n_past + i + 1;
    const size_t kvrow = (size_t)hd * Hkv;
    const float *qrow = Q + (size_t)i * hd * Hq + (size_t)h * hd;
    for (int d = tid; d < hd; d += ATT_T) qs[d] = qrow[d];
    __syncthreads();

    float acc0 = 0.0f, acc1 = 0.0f; /* dims tid and tid + 128 */
    float m = -INFINITY, l = 0.0f;
    for (int64_t t0 = 0; t0 < n_kv; t0 += ATT_T) {
        const int64_t t = t0 + tid;
        float s = -INFINITY;
        if (t < n_kv) {
            const KT *kr = Kc + (size_t)t * kvrow + (size_t)kvh * hd;
            float dot = 0.0f;
            for (int d = 0; d < hd; d += 2) {
                const float2 kv = ld2(kr + d);
                dot += qs[d] * kv.x;
                dot += qs[d + 1] * kv.y;
            }
            s = scale * dot;
        }
        const float mt = block_reduce<true>(s, red);
        const float m_new = fmaxf(m, mt);
        const float p = t < n_kv ? expf(s - m_new) : 0.0f;
        ps[tid] = p;
        const float lt = block_reduce<false>(p, red + 4);
        const float corr = expf(m - m_new);
        l = l * corr + lt;
        m = m_new;
        const int tn = (int)(n_kv - t0 < ATT_T ? n_kv - t0 : ATT_T);
        const KT *vb = Vc + (size_t)t0 * kvrow + (size_t)kvh * hd;
        if (tid < hd) {
            float a = acc0 * corr;
            for (int tt = 0; tt < tn; tt++) a += ps[tt] * ld1(vb + (size_t)tt * kvrow + tid);
            acc0 = a;
        }
        if (tid + ATT_T < hd) {
            float a = acc1 * corr;
            for (int tt = 0; tt < tn; tt++) a += ps[tt] * ld1(vb + (size_t)tt * kvrow + tid + ATT_T);
            acc1 = a;
        }
        __syncthreads(); /* ps and red are rewritten by the next tile */
    }
    float *orow = O + (size_t)i * hd * Hq + (size_t)h * hd;
    if (tid < hd) orow[tid] = acc0 / l;
    if (tid + ATT_T < hd) orow[tid + ATT_T] = acc1 / l;
}

extern "C" bool mi7b_attn_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype) {
    return hd > 0 && hd <= ATT_MAX_HD && hd % 2 == 0 && Hkv > 0 && Hq > 0 && Hq % Hkv == 0 &&
           Hq <= 65535 && (ctype == MI_TYPE_F16 || ctype == MI_TYPE_F32);
}

extern "C" mi_status mi7b_attn(void *stream, const float *q, const void *k, const void *v, mi_type ctype,
                               float *o, int64_t N, int64_t n_past, int64_t hd, int64_t Hq, int64_t Hkv,
                               float scale) {
    if (!mi7b_attn_supported(hd, Hq, Hkv, ctype) || N <= 0 || N > 65535 || n_past < 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7b_attn: hd %lld, Hq %lld, Hkv %lld, N %lld", (long long)hd,
                      (long long)Hq, (long long)Hkv, (long long)N);
    dim3 grid((unsigned)Hq, (unsigned)N);
    cudaStream_t st = (cudaStream_t)stream;
    if (ctype == MI_TYPE_F16)
        kernel_attn<uint16_t><<<grid, ATT_T, 0, st>>>(q, (const uint16_t *)k, (const uint16_t *)v, o, n_past,
                                                      (int)hd, (int)Hq, (int)Hkv, scale);
    else
        kernel_attn<float><<<grid, ATT_T, 0, st>>>(q, (const float *)k, (const float *)v, o, n_past,
                                                   (int)hd, (int)Hq, (int)Hkv, scale);
    MI_CU_CHECK_LAUNCH("kernel_attn");
    return MI_OK;
}

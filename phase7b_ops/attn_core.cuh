/* The body of the causal GQA attention kernel, shared by 7b's kernel (n_past as a launch
 * argument) and 7d's (n_past read from device memory, so a captured graph stays valid as
 * the cache grows). One definition, so the two are the same arithmetic by construction.
 * One block per (query head h, query token i), MI7B_ATT_T threads; keys in tiles of
 * MI7B_ATT_T (thread t scores key t0+t), an online softmax (running max and sum, rescaled
 * per tile), then each thread accumulates its output dims over the tile's keys in key
 * order. Reductions are fixed trees: no atomics, repeated runs are bit-identical.
 * q [hd*Hq, N], K/V caches [hd*Hkv, n_ctx] (F16 | F32) -> o [hd*Hq, N]; query i sees
 * keys 0 .. n_kv-1; KV head = h / (Hq/Hkv); score = scale * dot(q, k). */
#ifndef MI7B_ATTN_CORE_CUH
#define MI7B_ATTN_CORE_CUH
#include <cuda_fp16.h>
#include <stdint.h>

#define MI7B_ATT_T 128      /* keys per tile = threads per block */
#define MI7B_ATT_MAX_HD 256

__device__ __forceinline__ float2 mi7b_ld2(const uint16_t *p) { return __half22float2(*(const __half2 *)p); }
__device__ __forceinline__ float2 mi7b_ld2(const float *p) { return *(const float2 *)p; }
__device__ __forceinline__ float mi7b_ld1(const uint16_t *p) { return __half2float(__ushort_as_half(*p)); }
__device__ __forceinline__ float mi7b_ld1(const float *p) { return *p; }

/* block-wide reduction over the 4 warps; every thread gets the same value */
template <bool MAX>
__device__ __forceinline__ float mi7b_block_reduce(float v, float *red) {
    for (int off = 16; off >= 1; off >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = MAX ? fmaxf(v, o) : v + o;
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    return MAX ? fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3])) : (red[0] + red[1]) + (red[2] + red[3]);
}

/* One tile's online softmax: s, this thread's key's score (valid: the key is below n_kv); p goes
 * to ps[tid], m and l move to the tile; returns the factor the accumulators are rescaled by.
 * Shared with 8a's one-token kernel (attn_step.cu), which must give the same bits. */
__device__ __forceinline__ float mi7b_attn_softmax(float s, bool valid, float *ps, float *red, float &m, float &l) {
    const float mt = mi7b_block_reduce<true>(s, red);
    const float m_new = fmaxf(m, mt);
    const float p = valid ? expf(s - m_new) : 0.0f;
    ps[threadIdx.x] = p;
    const float lt = mi7b_block_reduce<false>(p, red + 4);
    const float corr = expf(m - m_new);
    l = l * corr + lt;
    m = m_new;
    return corr;
}

/* acc * corr plus p[tt] * V[tt][d] over the tile's tn keys in key order; vb: the tile's first V
 * row (this head's dims), vstride: elements from one row to the next */
template <typename VT>
__device__ __forceinline__ float mi7b_attn_values(float acc, float corr, const float *ps, const VT *vb, size_t vstride,
                                                  int d, int tn) {
    float a = acc * corr;
    for (int tt = 0; tt < tn; tt++) a += ps[tt] * mi7b_ld1(vb + (size_t)tt * vstride + d);
    return a;
}

/* Attention of query i (blockIdx.y) of head h (blockIdx.x) over keys 0 .. n_kv-1. */
template <typename KT>
__device__ __forceinline__ void mi7b_attn_body(const float *__restrict__ Q, const KT *__restrict__ Kc,
                                               const KT *__restrict__ Vc, float *__restrict__ O, int64_t n_kv,
                                               int hd, int Hq, int Hkv, float scale) {
    __shared__ float qs[MI7B_ATT_MAX_HD];
    __shared__ float ps[MI7B_ATT_T];
    __shared__ float red[8];
    const int h = blockIdx.x, tid = threadIdx.x;
    const int64_t i = blockIdx.y;
    const int kvh = h / (Hq / Hkv);
    const size_t kvrow = (size_t)hd * Hkv;
    const float *qrow = Q + (size_t)i * hd * Hq + (size_t)h * hd;
    for (int d = tid; d < hd; d += MI7B_ATT_T) qs[d] = qrow[d];
    __syncthreads();

    float acc0 = 0.0f, acc1 = 0.0f; /* dims tid and tid + 128 */
    float m = -INFINITY, l = 0.0f;
    for (int64_t t0 = 0; t0 < n_kv; t0 += MI7B_ATT_T) {
        const int64_t t = t0 + tid;
        float s = -INFINITY;
        if (t < n_kv) {
            const KT *kr = Kc + (size_t)t * kvrow + (size_t)kvh * hd;
            float dot = 0.0f;
            for (int d = 0; d < hd; d += 2) {
                const float2 kv = mi7b_ld2(kr + d);
                dot += qs[d] * kv.x;
                dot += qs[d + 1] * kv.y;
            }
            s = scale * dot;
        }
        const float corr = mi7b_attn_softmax(s, t < n_kv, ps, red, m, l);
        const int tn = (int)(n_kv - t0 < MI7B_ATT_T ? n_kv - t0 : MI7B_ATT_T);
        const KT *vb = Vc + (size_t)t0 * kvrow + (size_t)kvh * hd;
        if (tid < hd) acc0 = mi7b_attn_values(acc0, corr, ps, vb, kvrow, tid, tn);
        if (tid + MI7B_ATT_T < hd) acc1 = mi7b_attn_values(acc1, corr, ps, vb, kvrow, tid + MI7B_ATT_T, tn);
        __syncthreads(); /* ps and red are rewritten by the next tile */
    }
    float *orow = O + (size_t)i * hd * Hq + (size_t)h * hd;
    if (tid < hd) orow[tid] = acc0 / l;
    if (tid + MI7B_ATT_T < hd) orow[tid + MI7B_ATT_T] = acc1 / l;
}

#endif

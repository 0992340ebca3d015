/* One-token attention split over the KV sequence (flash-decoding), for decode at depth.
 * 7b's kernel gives a query head one block that walks every key: at 32k keys the 7B's 28
 * blocks walk 256 tiles each while 104 SMs idle, and each of a GQA group's heads reads its KV
 * head again. Here block (kv head, split s) takes every query head of the group over keys
 * [s*chunk, (s+1)*chunk), chunk = ceil(n_kv / S), reading each K and V row once for the group:
 *   scores   thread t takes key t of a tile of MI8A_SKV_T keys: G dots over hd (K row read by
 *            the thread, q of the G heads from shared memory), scale * dot as 7b;
 *   softmax  online per head over the split's tiles (running max and sum, rescaled per tile);
 *   values   thread t accumulates dims t, t + T, ... of the G heads over the tile's keys in key
 *            order (V rows read coalesced by the block);
 * and writes its unnormalized partial (m, l, acc[hd]) per head. The combine kernel merges the S
 * partials of each head in split order: m* = max m_s, l = sum l_s e^(m_s - m*),
 * o = sum acc_s e^(m_s - m*) / l. Fixed orders throughout: repeated runs are bit-identical;
 * the sums run in another order than 7b's, so the result is within the attention bound of
 * docs/NUMERICS.md, not bit-identical to 7b. n_past comes from 7d's step params when the split
 * has a slot (a captured graph survives KV growth), else from the node. */
#include <cuda_fp16.h>
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/attn_core.cuh"
#include "phase7e_perf/perf7e.h"
#include "phase8a_decode/decode8a.h"

#define SKV_T MI8A_SKV_T   /* keys per tile = threads per block */
#define SKV_MAX_G 16

/* n_kv of the step: keys 0 .. n_past, clamped to the cache */
__device__ __forceinline__ int64_t skv_n_kv(const int32_t *np_dev, int64_t np_host, int64_t n_ctx) {
    const int64_t n_kv = (np_dev ? (int64_t)np_dev[0] : np_host) + 1;
    return n_kv < n_ctx ? n_kv : n_ctx;
}

template <typename KT>
__global__ void __launch_bounds__(SKV_T) kernel_attn_split(const float *__restrict__ Q, const KT *__restrict__ Kc,
                                                           const KT *__restrict__ Vc, float *__restrict__ part,
                                                           const int32_t *__restrict__ np_dev, int64_t np_host,
                                                           int64_t n_ctx, int hd, int Hq, int Hkv, int S, float scale) {
    extern __shared__ float skv_smem[];
    const int G = Hq / Hkv, kvh = blockIdx.x, s = blockIdx.y, tid = threadIdx.x;
    float *qs = skv_smem;                  /* [G][hd] */
    float *ps = qs + (size_t)G * hd;       /* [G][SKV_T] scores, then probabilities */
    float *mt = ps + (size_t)G * SKV_T;    /* [G] tile max */
    float *lt = mt + SKV_MAX_G;            /* [G] tile sum */
    const int64_t n_kv = skv_n_kv(np_dev, np_host, n_ctx);
    const int64_t chunk = (n_kv + S - 1) / S, k0 = (int64_t)s * chunk;
    const int64_t k1 = k0 + chunk < n_kv ? k0 + chunk : n_kv;
    const size_t kvrow = (size_t)hd * Hkv;
    const size_t pstride = (size_t)hd + 2;   /* per (head, split): m, l, acc[hd] */
    if (k0 >= k1) {   /* an empty split: a partial the combine gives weight 0 */
        for (int g = tid; g < G; g += SKV_T) {
            float *p = part + ((size_t)(kvh * G + g) * S + s) * pstride;
            p[0] = -INFINITY;
            p[1] = 0.0f;
        }
        return;
    }
    for (int i = tid; i < G * hd; i += SKV_T) qs[i] = Q[(size_t)kvh * G * hd + i];   /* heads kvh*G .. +G-1 */
    float m[SKV_MAX_G], l[SKV_MAX_G], acc[SKV_MAX_G][MI7B_ATT_MAX_HD / SKV_T];
#pragma unroll
    for (int g = 0; g < SKV_MAX_G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int j = 0; j < MI7B_ATT_MAX_HD / SKV_T; j++) acc[g][j] = 0.0f;
    }
    __syncthreads();
    const int lane = tid & 31, warp = tid >> 5, nw = SKV_T / 32;
    for (int64_t t0 = k0; t0 < k1; t0 += SKV_T) {
        const int64_t t = t0 + tid;
        const int tn = (int)(k1 - t0 < SKV_T ? k1 - t0 : SKV_T);
        /* scores of key t for the G heads */
        if (t < k1) {
            const KT *kr = Kc + (size_t)t * kvrow + (size_t)kvh * hd;
            float dot[SKV_MAX_G];
#pragma unroll
            for (int g = 0; g < SKV_MAX_G; g++) dot[g] = 0.0f;
#pragma unroll 8
            for (int d = 0; d < hd; d += 2) {
                const float2 kv = mi7b_ld2(kr + d);
#pragma unroll
                for (int g = 0; g < SKV_MAX_G; g++)
                    if (g < G) {
                        dot[g] += qs[g * hd + d] * kv.x;
                        dot[g] += qs[g * hd + d + 1] * kv.y;
                    }
            }
#pragma unroll
            for (int g = 0; g < SKV_MAX_G; g++)
                if (g < G) ps[g * SKV_T + tid] = scale * dot[g];
        }
        __syncthreads();
        /* tile max and, after the probabilities, tile sum per head: warp w takes heads w, w + nw, ... */
        for (int g = warp; g < G; g += nw) {
            float v = -INFINITY;
            for (int k = lane; k < tn; k += 32) v = fmaxf(v, ps[g * SKV_T + k]);
            for (int off = 16; off >= 1; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
            if (lane == 0) mt[g] = v;
        }
        __syncthreads();
        if (tid < tn) {
#pragma unroll
            for (int g = 0; g < SKV_MAX_G; g++) {   /* unrolled: m stays in registers (the same in every thread) */
                if (g >= G) break;
                ps[g * SKV_T + tid] = expf(ps[g * SKV_T + tid] - fmaxf(m[g], mt[g]));
            }
        }
        __syncthreads();
        for (int g = warp; g < G; g += nw) {
            float v = 0.0f;
            for (int k = lane; k < tn; k += 32) v += ps[g * SKV_T + k];
            for (int off = 16; off >= 1; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            if (lane == 0) lt[g] = v;
        }
        __syncthreads();
        const KT *vb = Vc + (size_t)t0 * kvrow + (size_t)kvh * hd;
#pragma unroll
        for (int g = 0; g < SKV_MAX_G; g++) {
            if (g >= G) break;
            const float m_new = fmaxf(m[g], mt[g]), corr = expf(m[g] - m_new);
            l[g] = l[g] * corr + lt[g];
            m[g] = m_new;
#pragma unroll
            for (int j = 0; j < MI7B_ATT_MAX_HD / SKV_T; j++) {
                const int d = tid + j * SKV_T;
                if (d < hd) {
                    float a = acc[g][j] * corr;
                    for (int k = 0; k < tn; k++) a += ps[g * SKV_T + k] * mi7b_ld1(vb + (size_t)k * kvrow + d);
                    acc[g][j] = a;
                }
            }
        }
        __syncthreads();   /* ps, mt, lt are rewritten by the next tile */
    }
#pragma unroll
    for (int g = 0; g < SKV_MAX_G; g++) {   /* unrolled: acc stays in registers */
        if (g >= G) break;
        float *p = part + ((size_t)(kvh * G + g) * S + s) * pstride;
        if (tid == 0) {
            p[0] = m[g];
            p[1] = l[g];
        }
#pragma unroll
        for (int j = 0; j < MI7B_ATT_MAX_HD / SKV_T; j++) {
            const int d = tid + j * SKV_T;
            if (d < hd) p[2 + d] = acc[g][j];
        }
    }
}

/* head h (blockIdx.x): merge its S partials in split order */
__global__ void kernel_attn_combine(const float *__restrict__ part, float *__restrict__ O, int hd, int S) {
    const int h = blockIdx.x;
    const size_t pstride = (size_t)hd + 2;
    const float *p = part + (size_t)h * S * pstride;
    float ms = -INFINITY;
    for (int s = 0; s < S; s++) ms = fmaxf(ms, p[(size_t)s * pstride]);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float l = 0.0f, o = 0.0f;
        for (int s = 0; s < S; s++) {
            const float *ps = p + (size_t)s * pstride;
            if (ps[1] == 0.0f) continue;   /* an empty split */
            const float w = expf(ps[0] - ms);
            l += ps[1] * w;
            o += ps[2 + d] * w;
        }
        O[(size_t)h * hd + d] = o / l;
    }
}

extern "C" int mi8a_attn_split_count(int64_t n_ctx, int64_t Hkv) {
    int64_t s = (n_ctx + MI8A_SKV_MIN_KEYS - 1) / MI8A_SKV_MIN_KEYS;   /* at least this many keys a split when full */
    const int64_t fill = (2 * (int64_t)mi7e_sm_count() + Hkv - 1) / Hkv;   /* about two blocks per SM */
    if (s > fill) s = fill;
    if (s > MI8A_SKV_MAX_SPLITS) s = MI8A_SKV_MAX_SPLITS;
    return s < 1 ? 1 : (int)s;
}

extern "C" bool mi8a_attn_split_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype) {
    return hd > 0 && hd <= MI7B_ATT_MAX_HD && hd % 2 == 0 && Hkv > 0 && Hq % Hkv == 0 && Hq / Hkv <= SKV_MAX_G &&
           Hkv <= 65535 && (ctype == MI_TYPE_F16 || ctype == MI_TYPE_F32);
}

extern "C" size_t mi8a_attn_split_workspace(int64_t n_ctx, int64_t hd, int64_t Hq, int64_t Hkv) {
    return (size_t)Hq * (size_t)mi8a_attn_split_count(n_ctx, Hkv) * ((size_t)hd + 2) * sizeof(float);
}

extern "C" mi_status mi8a_attn_split(void *stream, const float *q, const void *k, const void *v, mi_type ctype, float *o,
                                     const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx, int64_t hd, int64_t Hq,
                                     int64_t Hkv, float scale, void *workspace) {
    if (!mi8a_attn_split_supported(hd, Hq, Hkv, ctype) || n_ctx <= 0 || n_past < 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_attn_split: hd %lld, Hq %lld, Hkv %lld, cache %s", (long long)hd,
                      (long long)Hq, (long long)Hkv, mi_type_name(ctype));
    if (!q || !k || !v || !o || !workspace) return mi_err(MI_ERR_INVALID, "mi8a_attn_split: null pointer");
    const int S = mi8a_attn_split_count(n_ctx, Hkv), G = (int)(Hq / Hkv);
    const size_t smem = ((size_t)G * (size_t)hd + (size_t)G * SKV_T + 2 * SKV_MAX_G) * sizeof(float);
    if (smem > (46u << 10)) return mi_err(MI_ERR_UNSUPPORTED, "mi8a_attn_split: %zu bytes of shared memory", smem);
    const cudaStream_t st = (cudaStream_t)stream;
    float *part = (float *)workspace;
    const dim3 grid((unsigned)Hkv, (unsigned)S);
    if (ctype == MI_TYPE_F16)
        kernel_attn_split<uint16_t><<<grid, SKV_T, smem, st>>>(q, (const uint16_t *)k, (const uint16_t *)v, part,
                                                              n_past_dev, n_past, n_ctx, (int)hd, (int)Hq, (int)Hkv, S,
                                                              scale);
    else
        kernel_attn_split<float><<<grid, SKV_T, smem, st>>>(q, (const float *)k, (const float *)v, part, n_past_dev,
                                                           n_past, n_ctx, (int)hd, (int)Hq, (int)Hkv, S, scale);
    MI_CU_CHECK_LAUNCH("kernel_attn_split");
    kernel_attn_combine<<<(unsigned)Hq, 128, 0, st>>>(part, o, (int)hd, S);
    MI_CU_CHECK_LAUNCH("kernel_attn_combine");
    return MI_OK;
}

/* One-token attention split over the KV sequence (flash-decoding), for decode at depth.
 * 7b's kernel gives a query head one block that walks every key: at 32k keys the 7B's 28
 * blocks walk 256 tiles each while 104 SMs idle, and each of a GQA group's heads reads its KV
 * head again. Here block (kv head, head group z, split s) takes G of the group's query heads
 * (heads_a_block) over keys [s*chunk, (s+1)*chunk), chunk = max(ceil(n_kv / S), one tile),
 * reading each K and V row once for its G heads:
 *   scores   thread t takes key t of a tile of MI8A_SKV_T keys: G dots over hd (K row read by
 *            the thread, 16 bytes a load where the cache allows; q of the G heads from shared
 *            memory), scale * dot as 7b;
 *   softmax  online per head over the split's tiles (running max and sum, rescaled per tile);
 *   values   thread t accumulates dims t, t + T, ... of the G heads over the tile's keys in key
 *            order. F16 caches with hd <= 128 (VS): the tile's V rows are copied to shared
 *            memory (cp.async, issued before the scores, so the copy overlaps them); otherwise
 *            read from global memory, each V value once for the G heads, eight keys' loads in
 *            flight;
 * and writes its unnormalized partial (m, l, acc[hd]) per head (or, when its split is the only
 * one that holds keys, the output acc / l itself, and the combine returns). The combine merges the S
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
#include "phase8a_decode/async_copy.cuh"
#include "phase8a_decode/attn_split.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"

#define SKV_T MI8A_SKV_T   /* keys per tile = threads per block */
#define SKV_MAX_G 16
#define SKV_VS_MAX_HD 128  /* VS: the V tile (SKV_T x hd halves) fits 32 KB of shared memory */
#define SKV_HD_REGS (MI7B_ATT_MAX_HD / SKV_T)



/* two halves packed in a word (element 2i low) as floats, exactly */
__device__ __forceinline__ float2 skv_h2(uint32_t w) {
    return make_float2(__half2float(__ushort_as_half((unsigned short)(w & 0xFFFFu))),
                       __half2float(__ushort_as_half((unsigned short)(w >> 16))));
}

/* dot[g] += q_g[d] * k[d] over the K row kr, d in increasing order (pairs as 7b's ld2); GM: the
 * heads' slots compiled (>= G), so no unused slot issues instructions beyond G's next power of two */
/* one 16-byte chunk of the K row: dot[g] += q_g[d] * k[d] for its 8 dims, in increasing order */
template <int GM>
__device__ __forceinline__ void skv_chunk_dots(uint4 raw, const float *qs, int hd, int c, int G, float (&dot)[GM]) {
    const float2 kv[4] = {skv_h2(raw.x), skv_h2(raw.y), skv_h2(raw.z), skv_h2(raw.w)};
#pragma unroll
    for (int g = 0; g < GM; g++)
        if (g < G) {
            const float4 qa = *(const float4 *)(qs + g * hd + 8 * c), qb = *(const float4 *)(qs + g * hd + 8 * c + 4);
            dot[g] += qa.x * kv[0].x;
            dot[g] += qa.y * kv[0].y;
            dot[g] += qa.z * kv[1].x;
            dot[g] += qa.w * kv[1].y;
            dot[g] += qb.x * kv[2].x;
            dot[g] += qb.y * kv[2].y;
            dot[g] += qb.z * kv[3].x;
            dot[g] += qb.w * kv[3].y;
        }
}

/* WHOLE (item d21): the thread's K row loaded into registers at once (hd / 8 <= 16 loads in
 * flight, one round trip), then the dots; else four chunks in flight at a time (four round trips
 * a row of 128). The dots run in the same order either way. */
template <typename KT, bool VS, bool WHOLE, int GM>
__device__ __forceinline__ void skv_scores(const KT *__restrict__ kr, const float *qs, int hd, int G,
                                           float (&dot)[GM]) {
    if constexpr (VS && WHOLE) {
        constexpr int CMAX = SKV_VS_MAX_HD / 8;
        const uint4 *k4 = (const uint4 *)kr;
        uint4 raw[CMAX];
#pragma unroll
        for (int c = 0; c < CMAX; c++)
            if (c < hd / 8) raw[c] = __ldg(k4 + c);
#pragma unroll
        for (int c = 0; c < CMAX; c++)
            if (c < hd / 8) skv_chunk_dots<GM>(raw[c], qs, hd, c, G, dot);
    } else if constexpr (VS) {   /* F16, 16-byte aligned rows: 8 halves a load, q 8 floats a pair of loads */
        const uint4 *k4 = (const uint4 *)kr;
#pragma unroll 4
        for (int c = 0; c < hd / 8; c++) skv_chunk_dots<GM>(__ldg(k4 + c), qs, hd, c, G, dot);
    } else {
#pragma unroll 8
        for (int d = 0; d < hd; d += 2) {
            const float2 kv = mi7b_ld2(kr + d);
#pragma unroll
            for (int g = 0; g < GM; g++)
                if (g < G) {
                    dot[g] += qs[g * hd + d] * kv.x;
                    dot[g] += qs[g * hd + d + 1] * kv.y;
                }
        }
    }
}

template <typename KT, bool VS, bool WHOLE, int GM>
__global__ void __launch_bounds__(SKV_T) kernel_attn_split(const float *__restrict__ Q, const KT *__restrict__ Kc,
                                                           const KT *__restrict__ Vc, float *__restrict__ part,
                                                           float *__restrict__ O,
                                                           const int32_t *__restrict__ np_dev, int64_t np_host,
                                                           int64_t n_ctx, int hd, int Hq, int Hkv, int S, int GB,
                                                           float scale) {
    extern __shared__ uint4 skv_smem4[];
    /* block x = (kv head, head group z): query heads h0 .. h0 + G - 1 of the kv head's group */
    const int NZ = (Hq / Hkv + GB - 1) / GB, kvh = blockIdx.x / NZ, z = blockIdx.x - kvh * NZ;
    const int h0 = kvh * (Hq / Hkv) + z * GB, G = min(GB, Hq / Hkv - z * GB);
    const int s = blockIdx.y, tid = threadIdx.x;
    pdl_trigger_early();
    pdl_wait_trigger();   /* q, the caches and n_past: all written before this kernel (d6) */
    KT *vs = (KT *)skv_smem4;                                       /* VS: [SKV_T][hd] V tile */
    float *qs = (float *)(skv_smem4 + (VS ? (size_t)SKV_T * hd * sizeof(KT) / 16 : 0));   /* [G][hd] */
    float *ps = qs + (size_t)G * hd;       /* [G][SKV_T] scores, then probabilities */
    float *mt = ps + (size_t)G * SKV_T;    /* [G] tile max */
    float *lt = mt + SKV_MAX_G;            /* [G] tile sum */
    const int64_t n_kv = skv_n_kv(np_dev, np_host, n_ctx);
    const int64_t chunk = skv_chunk(n_kv, S), k0 = (int64_t)s * chunk;
    const int64_t k1 = k0 + chunk < n_kv ? k0 + chunk : n_kv;
    const size_t kvrow = (size_t)hd * Hkv;
    const size_t pstride = (size_t)hd + 2;   /* per (head, split): m, l, acc[hd] */
    if (k0 >= k1) {   /* an empty split: a partial the combine gives weight 0 */
        for (int g = tid; g < G; g += SKV_T) {
            float *p = part + ((size_t)(h0 + g) * S + s) * pstride;
            p[0] = -INFINITY;
            p[1] = 0.0f;
        }
        return;
    }
    for (int i = tid; i < G * hd; i += SKV_T) qs[i] = Q[(size_t)h0 * hd + i];
    constexpr int HR = VS ? 1 : SKV_HD_REGS;   /* dims a thread: VS has hd <= 128 = SKV_T */
    float m[GM], l[GM], acc[GM][HR];
#pragma unroll
    for (int g = 0; g < GM; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int j = 0; j < HR; j++) acc[g][j] = 0.0f;
    }
    __syncthreads();
    const int lane = tid & 31, warp = tid >> 5, nw = SKV_T / 32;
    for (int64_t t0 = k0; t0 < k1; t0 += SKV_T) {
        const int64_t t = t0 + tid;
        const int tn = (int)(k1 - t0 < SKV_T ? k1 - t0 : SKV_T);
        const KT *vb = Vc + (size_t)t0 * kvrow + (size_t)kvh * hd;
        if constexpr (VS) {   /* the tile's V rows -> vs, in flight during the scores */
            const int cpr = hd / 8;   /* 16-byte chunks a row */
            for (int i = tid; i < tn * cpr; i += SKV_T) {
                const int k = i / cpr, c = i - k * cpr;
                async_copy16(vs + (size_t)k * hd + 8 * c, vb + (size_t)k * kvrow + 8 * c);
            }
        }
        /* scores of key t for the G heads */
        if (t < k1) {
            float dot[GM];
#pragma unroll
            for (int g = 0; g < GM; g++) dot[g] = 0.0f;
            skv_scores<KT, VS, WHOLE, GM>(Kc + (size_t)t * kvrow + (size_t)kvh * hd, qs, hd, G, dot);
#pragma unroll
            for (int g = 0; g < GM; g++)
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
            for (int g = 0; g < GM; g++) {   /* unrolled: m stays in registers (the same in every thread) */
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
        if constexpr (VS) {
            async_commit();
            async_wait<0>();
        }
        __syncthreads();
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if (g >= G) break;
            const float m_new = fmaxf(m[g], mt[g]), corr = expf(m[g] - m_new);
            l[g] = l[g] * corr + lt[g];
            m[g] = m_new;
#pragma unroll
            for (int j = 0; j < HR; j++) acc[g][j] *= corr;
        }
        /* acc[g][j] += p_g[k] * V[k][d] in key order; each V value read once for the G heads */
#pragma unroll 8
        for (int k = 0; k < tn; k++) {
            float v[HR];
#pragma unroll
            for (int j = 0; j < HR; j++) {
                const int d = tid + j * SKV_T;
                v[j] = d < hd ? (VS ? mi7b_ld1(vs + (size_t)k * hd + d) : mi7b_ld1(vb + (size_t)k * kvrow + d)) : 0.0f;
            }
#pragma unroll
            for (int g = 0; g < GM; g++) {
                if (g >= G) break;
                const float p = ps[g * SKV_T + k];
#pragma unroll
                for (int j = 0; j < HR; j++) acc[g][j] += p * v[j];
            }
        }
        __syncthreads();   /* ps, mt, lt and vs are rewritten by the next tile */
    }
    if (chunk >= n_kv) {   /* the only split that holds keys: the output itself, the combine returns */
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if (g >= G) break;
#pragma unroll
            for (int j = 0; j < HR; j++) {
                const int d = tid + j * SKV_T;
                if (d < hd) O[(size_t)(h0 + g) * hd + d] = acc[g][j] / l[g];
            }
        }
        return;
    }
#pragma unroll
    for (int g = 0; g < GM; g++) {   /* unrolled: acc stays in registers */
        if (g >= G) break;
        float *p = part + ((size_t)(h0 + g) * S + s) * pstride;
        if (tid == 0) {
            p[0] = m[g];
            p[1] = l[g];
        }
#pragma unroll
        for (int j = 0; j < HR; j++) {
            const int d = tid + j * SKV_T;
            if (d < hd) p[2 + d] = acc[g][j];
        }
    }
}

/* head h (blockIdx.x): merge its partials in split order. Only the splits that hold keys are
 * read (SU of the S: the rest are empty by skv_chunk's rule). Their maxima and weights are read
 * by all threads at once (one round trip, not SU dependent ones), then each thread sums its
 * dims over the splits with the loads of eight splits in flight. */
__global__ void kernel_attn_combine(const float *__restrict__ part, float *__restrict__ O, int hd, int S,
                                    const int32_t *__restrict__ np_dev, int64_t np_host, int64_t n_ctx) {
    __shared__ float wsh[MI8A_SKV_MAX_SPLITS], lsh[MI8A_SKV_MAX_SPLITS], red[32];
    const int h = blockIdx.x, tid = threadIdx.x;
    pdl_trigger_early();
    pdl_wait_trigger();
    const size_t pstride = (size_t)hd + 2;
    const float *p = part + (size_t)h * S * pstride;
    const int64_t n_kv = skv_n_kv(np_dev, np_host, n_ctx), chunk = skv_chunk(n_kv, S);
    const int SU = (int)((n_kv + chunk - 1) / chunk);   /* <= S */
    if (SU == 1) return;   /* split 0 wrote the output */
    float mx = -INFINITY;
    for (int s = tid; s < SU; s += blockDim.x) mx = fmaxf(mx, p[(size_t)s * pstride]);
    for (int off = 16; off >= 1; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if ((tid & 31) == 0) red[tid >> 5] = mx;
    __syncthreads();
    float ms = -INFINITY;   /* the max is exact in any order */
    for (int w = 0; w < (int)(blockDim.x + 31) / 32; w++) ms = fmaxf(ms, red[w]);
    for (int s = tid; s < SU; s += blockDim.x) {
        const float *ps = p + (size_t)s * pstride;
        lsh[s] = ps[1];
        wsh[s] = ps[1] == 0.0f ? 0.0f : expf(ps[0] - ms);   /* an empty split: l = 0, never summed */
    }
    __syncthreads();
    for (int d = tid; d < hd; d += blockDim.x) {
        float l = 0.0f, o = 0.0f;
#pragma unroll 8
        for (int s = 0; s < SU; s++) {
            const float a = p[(size_t)s * pstride + 2 + d];
            if (lsh[s] == 0.0f) continue;   /* an empty split (its acc was never written) */
            const float w = wsh[s];
            l += lsh[s] * w;
            o += a * w;
        }
        O[(size_t)h * hd + d] = o / l;
    }
}

/* d32: the same merge with the partials' loads in flight. The maxima and weights as above, then
 * warp w of CMB_WARPS sums its own run of at most CMB_RUN splits [w SU / W, (w + 1) SU / W),
 * lane holding dims lane, lane + 32, ...: the run's loads are all issued before the first sum
 * (no split below SU is empty, so none is skipped), and the warps' sums are added in warp order.
 * One round trip to L2 where the kernel above makes SU / 8 dependent ones (16 at a 32k cache).
 * Fixed orders: bit-identical run to run; another order of the same sums. */
#define CMB_WARPS 16
#define CMB_RUN ((MI8A_SKV_MAX_SPLITS + CMB_WARPS - 1) / CMB_WARPS)
#define CMB_HR (MI7B_ATT_MAX_HD / 32)
__global__ void __launch_bounds__(CMB_WARPS * 32) kernel_attn_combine_wide(const float *__restrict__ part,
                                                                           float *__restrict__ O, int hd, int S,
                                                                           const int32_t *__restrict__ np_dev,
                                                                           int64_t np_host, int64_t n_ctx) {
    __shared__ float wsh[MI8A_SKV_MAX_SPLITS], lsh[MI8A_SKV_MAX_SPLITS], red[CMB_WARPS], lw[CMB_WARPS];
    __shared__ float ow[CMB_WARPS][MI7B_ATT_MAX_HD];
    const int h = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    pdl_trigger_early();
    pdl_wait_trigger();
    const size_t pstride = (size_t)hd + 2;
    const float *p = part + (size_t)h * S * pstride;
    const int64_t n_kv = skv_n_kv(np_dev, np_host, n_ctx), chunk = skv_chunk(n_kv, S);
    const int SU = (int)((n_kv + chunk - 1) / chunk);   /* <= S <= MI8A_SKV_MAX_SPLITS <= the threads */
    if (SU == 1) return;   /* split 0 wrote the output */
    const int s0 = warp * SU / CMB_WARPS, n = (warp + 1) * SU / CMB_WARPS - s0;   /* n <= CMB_RUN */
    float a[CMB_RUN][CMB_HR];   /* the run's values, loaded while the weights are worked out */
#pragma unroll
    for (int k = 0; k < CMB_RUN; k++)
#pragma unroll
        for (int j = 0; j < CMB_HR; j++)
            a[k][j] = k < n && lane + 32 * j < hd ? p[(size_t)(s0 + k) * pstride + 2 + lane + 32 * j] : 0.0f;
    const float m_s = tid < SU ? p[(size_t)tid * pstride] : -INFINITY, l_s = tid < SU ? p[(size_t)tid * pstride + 1] : 0.0f;
    float mx = m_s;
    for (int off = 16; off >= 1; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    float ms = -INFINITY;   /* the max is exact in any order */
    for (int w = 0; w < CMB_WARPS; w++) ms = fmaxf(ms, red[w]);
    if (tid < SU) {
        lsh[tid] = l_s;
        wsh[tid] = expf(m_s - ms);
    }
    __syncthreads();
    float acc[CMB_HR], l = 0.0f;
#pragma unroll
    for (int j = 0; j < CMB_HR; j++) acc[j] = 0.0f;
#pragma unroll
    for (int k = 0; k < CMB_RUN; k++) {
        if (k < n) {   /* warp-uniform */
            const float w = wsh[s0 + k];
            l += lsh[s0 + k] * w;
#pragma unroll
            for (int j = 0; j < CMB_HR; j++) acc[j] += a[k][j] * w;
        }
    }
#pragma unroll
    for (int j = 0; j < CMB_HR; j++)
        if (lane + 32 * j < hd) ow[warp][lane + 32 * j] = acc[j];
    if (lane == 0) lw[warp] = l;
    __syncthreads();
    for (int d = tid; d < hd; d += blockDim.x) {
        float o = 0.0f, lt = 0.0f;
        for (int w = 0; w < CMB_WARPS; w++) {
            o += ow[w][d];
            lt += lw[w];
        }
        O[(size_t)h * hd + d] = o / lt;
    }
}

extern "C" int mi8a_attn_split_count(int64_t n_ctx, int64_t Hkv) {
    int64_t s = (n_ctx + MI8A_SKV_MIN_KEYS - 1) / MI8A_SKV_MIN_KEYS;   /* at least this many keys a split when full */
    const int64_t fill = (4 * (int64_t)mi7e_sm_count() + Hkv - 1) / Hkv;   /* about four blocks per SM */
    if (s > fill) s = fill;
    if (s > MI8A_SKV_MAX_SPLITS) s = MI8A_SKV_MAX_SPLITS;
    return s < 1 ? 1 : (int)s;
}

/* d33: the tensor-core kernel's splits as one wave, no more blocks than its SMs hold at once
 * (the 7B's 4 kv heads at a 32k cache: 99 splits, 396 blocks in the 396 places, where 128
 * splits made 512 blocks: a second wave of 116). Never more than mi8a_attn_split_count, which
 * sizes the workspace. */
extern "C" int mi8a_attn_split_mma_count(int64_t n_ctx, int64_t hd, int64_t Hkv) {
    const int s = mi8a_attn_split_count(n_ctx, Hkv);
    if (!mi8a_skv_one_wave_on()) return s;
    const int64_t wave = (int64_t)mi8a_attn_split_mma_blocks_per_sm(hd) * mi7e_sm_count() / Hkv;
    return wave >= 1 && wave < s ? (int)wave : s;
}

extern "C" bool mi8a_attn_split_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype) {
    return hd > 0 && hd <= MI7B_ATT_MAX_HD && hd % 2 == 0 && Hkv > 0 && Hq % Hkv == 0 && Hq / Hkv <= SKV_MAX_G &&
           Hkv <= 65535 && (ctype == MI_TYPE_F16 || ctype == MI_TYPE_F32);
}

extern "C" size_t mi8a_attn_split_workspace(int64_t n_ctx, int64_t hd, int64_t Hq, int64_t Hkv) {
    return (size_t)Hq * (size_t)mi8a_attn_split_count(n_ctx, Hkv) * ((size_t)hd + 2) * sizeof(float);
}

/* query heads a block of the split takes: heads_a_block when given, else two under
 * MI8A_SKV_GROUP_CTX positions and the whole group from there; never more than the group */
static int split_heads_a_block(int64_t n_ctx, int G, int heads_a_block) {
    const int want = heads_a_block > 0 ? heads_a_block : n_ctx >= MI8A_SKV_GROUP_CTX ? G : MI8A_SKV_HEADS;
    return want < G ? want : G;
}

/* d22 takes the split where its blocks hold the whole group, as it was measured: the caches of
 * MI8A_SKV_GROUP_CTX positions and more (under them the scalar kernel's two heads a block give
 * short caches more blocks than one a kv head) */
extern "C" bool mi8a_attn_split_on_mma(int64_t n_ctx, int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype, const void *k,
                                       const void *v, int heads_a_block) {
    if (!mi8a_skv_mma_on() || !mi8a_attn_split_mma_supported(hd, Hq, Hkv, ctype, k, v)) return false;
    const int G = (int)(Hq / Hkv);
    return split_heads_a_block(n_ctx, G, heads_a_block) == G;
}

static mi_status launch_combine(cudaStream_t st, bool pdl, const float *part, float *o, int64_t hd, int64_t Hq, int S,
                                const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx) {
    if (mi8a_skv_wide_combine_on())
        MI_CU_CHECK(pdl_launch(pdl, kernel_attn_combine_wide, dim3((unsigned)Hq), dim3(CMB_WARPS * 32), 0, st, part, o,
                               (int)hd, S, n_past_dev, n_past, n_ctx));
    else
        MI_CU_CHECK(pdl_launch(pdl, kernel_attn_combine, dim3((unsigned)Hq), dim3(128), 0, st, part, o, (int)hd, S,
                               n_past_dev, n_past, n_ctx));
    return MI_OK;
}

extern "C" mi_status mi8a_attn_split(void *stream, const float *q, const void *k, const void *v, mi_type ctype, float *o,
                                     const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx, int64_t hd, int64_t Hq,
                                     int64_t Hkv, float scale, int heads_a_block, void *workspace) {
    if (!mi8a_attn_split_supported(hd, Hq, Hkv, ctype) || n_ctx <= 0 || n_past < 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_attn_split: hd %lld, Hq %lld, Hkv %lld, cache %s", (long long)hd,
                      (long long)Hq, (long long)Hkv, mi_type_name(ctype));
    if (!q || !k || !v || !o || !workspace) return mi_err(MI_ERR_INVALID, "mi8a_attn_split: null pointer");
    const int G = (int)(Hq / Hkv);
    if (mi8a_attn_split_on_mma(n_ctx, hd, Hq, Hkv, ctype, k, v, heads_a_block)) {   /* d22: tensor cores */
        const bool pdl = mi8a_pdl_on();
        const int S = mi8a_attn_split_mma_count(n_ctx, hd, Hkv);
        MI_TRY(mi8a_attn_split_mma_launch(stream, q, k, v, (float *)workspace, o, n_past_dev, n_past, n_ctx, hd, Hq, Hkv,
                                          S, scale, pdl));
        return launch_combine((cudaStream_t)stream, pdl, (const float *)workspace, o, hd, Hq, S, n_past_dev, n_past, n_ctx);
    }
    const int S = mi8a_attn_split_count(n_ctx, Hkv), GB = split_heads_a_block(n_ctx, G, heads_a_block);
    const int NZ = (G + GB - 1) / GB;
    const size_t esz = ctype == MI_TYPE_F16 ? 2 : 4;
    const size_t smem_f = ((size_t)GB * (size_t)hd + (size_t)GB * SKV_T + 2 * SKV_MAX_G) * sizeof(float);
    /* VS: F16, hd a multiple of 8 and at most 128, every row 16-byte aligned (cp.async), and the
     * V tile fits beside the scores */
    const bool vs = ctype == MI_TYPE_F16 && hd % 8 == 0 && hd <= SKV_VS_MAX_HD && (((uintptr_t)k | (uintptr_t)v) & 15u) == 0 &&
                    ((size_t)hd * Hkv * esz) % 16 == 0 && smem_f + (size_t)SKV_T * hd * esz <= (46u << 10);
    const size_t smem = (vs ? (size_t)SKV_T * hd * esz : 0) + smem_f;
    if (smem > (46u << 10)) return mi_err(MI_ERR_UNSUPPORTED, "mi8a_attn_split: %zu bytes of shared memory", smem);
    if ((int64_t)Hkv * NZ > INT32_MAX) return mi_err(MI_ERR_UNSUPPORTED, "mi8a_attn_split: %lld kv heads", (long long)Hkv);
    const cudaStream_t st = (cudaStream_t)stream;
    float *part = (float *)workspace;
    const dim3 grid((unsigned)(Hkv * NZ), (unsigned)S);
    const int GM = GB <= 1 ? 1 : GB <= 2 ? 2 : GB <= 4 ? 4 : GB <= 8 ? 8 : 16;
    const bool pdl = mi8a_pdl_on(), whole = mi8a_skv_whole_row_on();
#define SKV_LAUNCH(KT, VS, W, G_)                                                                                   \
    MI_CU_CHECK(pdl_launch(pdl, kernel_attn_split<KT, VS, W, G_>, grid, dim3(SKV_T), smem, st, q, (const KT *)k,      \
                           (const KT *)v, part, o, n_past_dev, n_past, n_ctx, (int)hd, (int)Hq, (int)Hkv, S, GB, scale))
#define SKV_LAUNCH_GM(KT, VS, W)                  \
    switch (GM) {                                 \
    case 1: SKV_LAUNCH(KT, VS, W, 1); break;      \
    case 2: SKV_LAUNCH(KT, VS, W, 2); break;      \
    case 4: SKV_LAUNCH(KT, VS, W, 4); break;      \
    case 8: SKV_LAUNCH(KT, VS, W, 8); break;      \
    default: SKV_LAUNCH(KT, VS, W, 16); break;    \
    }
    if (vs && whole) SKV_LAUNCH_GM(uint16_t, true, true)
    else if (vs) SKV_LAUNCH_GM(uint16_t, true, false)
    else if (ctype == MI_TYPE_F16) SKV_LAUNCH_GM(uint16_t, false, false)
    else SKV_LAUNCH_GM(float, false, false)
#undef SKV_LAUNCH_GM
#undef SKV_LAUNCH
    return launch_combine(st, pdl, part, o, hd, Hq, S, n_past_dev, n_past, n_ctx);
}

/* MI_OP_TOPK on the device: per row of x [V, N] the K best of f = x * scale (NaN as -inf) in
 * the sampler's order, larger first, then lower index (graph.h), so a batch's top-k step sends
 * back 2K floats a row instead of V. One block a row:
 *   1. radix select of the K-th best key over 4 passes of 8 bits (most significant first): each
 *      pass counts, in a 256-bin shared histogram, the elements that share the key prefix chosen
 *      so far, then walks the bins from the top to the one that holds the K-th. After the last
 *      pass the threshold key T is exact, `need` of the elements equal to T belong to the K, and
 *      the last histogram says how many there are.
 *   2. collection: every element above T (K - need of them, in any order); the elements equal to
 *      T all of them when exactly `need` exist, else the `need` of lowest index (a block scan in
 *      index order: many equal values, e.g. a row of -inf);
 *   3. the K ordered by rank (each candidate counts those before it: K <= 64).
 * The key of f maps floats to unsigned integers in their order, with -0 as +0 (the CPU compares
 * floats: -0 == +0 ties on the index). f itself is one IEEE multiply as on the CPU, and the
 * values written are f, so the output equals the CPU's TOPK bit for bit. */
#include "phase7b_ops/dev7b.cuh"
#include "phase8b_batch/batch8b.h"
#include <math.h>

#define TK_THREADS 512

__device__ __forceinline__ float tk_value(float x, float scale) {
    return __fmul_rn(x != x ? -INFINITY : x, scale);
}
__device__ __forceinline__ uint32_t tk_key(float f) {
    const uint32_t u = f == 0.0f ? 0u : __float_as_uint(f);   /* -0 as +0 */
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(TK_THREADS) kernel_topk(const float *__restrict__ x, const float *__restrict__ scale,
                                                           float *__restrict__ y, int64_t V, int K) {
    __shared__ int hist[256];
    __shared__ uint32_t s_prefix, s_mask;
    __shared__ int s_need, s_eq, s_gt, s_seen;
    __shared__ int warp_eq[TK_THREADS / 32];
    __shared__ uint32_t ck[MI8B_TOPK_MAX];
    __shared__ int ci[MI8B_TOPK_MAX];
    __shared__ float cv[MI8B_TOPK_MAX];
    const float *row = x + (size_t)blockIdx.x * (size_t)V;
    const float sc = scale[blockIdx.x];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (tid == 0) {
        s_prefix = 0;
        s_mask = 0;
        s_need = K;
    }
    /* ---- 1. the K-th best key, 8 bits a pass ---- */
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += TK_THREADS) hist[b] = 0;
        __syncthreads();
        const uint32_t prefix = s_prefix, mask = s_mask;
        /* logits crowd a few bins of the top byte: lanes of a warp that share a bin add once
         * (__match_any_sync), so the shared atomics do not serialize 32 deep */
        for (int64_t base = 0; base < V; base += TK_THREADS) {
            const int64_t i = base + tid;
            int bin = -1 - lane;   /* no bin: matches no other lane */
            if (i < V) {
                const uint32_t k = tk_key(tk_value(__ldg(row + i), sc));
                if ((k & mask) == prefix) bin = (int)((k >> shift) & 255);
            }
            const unsigned peers = __match_any_sync(0xffffffffu, bin);
            if (bin >= 0 && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
        }
        __syncthreads();
        if (tid == 0) {
            int need = s_need, b = 255;
            while (b > 0 && hist[b] < need) need -= hist[b--];
            s_need = need;
            s_eq = hist[b];   /* after the last pass: the elements equal to T */
            s_prefix = prefix | ((uint32_t)b << shift);
            s_mask = mask | (255u << shift);
        }
        __syncthreads();
    }
    /* ---- 2. collection ---- */
    const uint32_t T = s_prefix;
    const int need = s_need, n_gt = K - need;
    const bool all_eq = s_eq == need;
    if (tid == 0) {
        s_gt = 0;
        s_seen = 0;
    }
    __syncthreads();
    for (int64_t base = 0; base < V; base += TK_THREADS) {
        const int64_t i = base + tid;
        float f = 0.0f;
        uint32_t k = 0;
        if (i < V) {
            f = tk_value(__ldg(row + i), sc);
            k = tk_key(f);
        }
        const bool gt = i < V && k > T, eq = i < V && k == T;
        if (gt) {
            const int s = atomicAdd(&s_gt, 1);
            ck[s] = k;
            ci[s] = (int)i;
            cv[s] = f;
        }
        if (all_eq) {
            if (eq) {
                const int s = n_gt + atomicAdd(&s_seen, 1);
                ck[s] = k;
                ci[s] = (int)i;
                cv[s] = f;
            }
            continue;
        }
        /* the first `need` equal elements in index order: a block scan of the eq flags */
        const unsigned bal = __ballot_sync(0xffffffffu, eq);
        if (lane == 0) warp_eq[warp] = __popc(bal);
        __syncthreads();
        int before = s_seen + __popc(bal & ((1u << lane) - 1u)), total = 0;
        for (int w = 0; w < TK_THREADS / 32; w++) {
            before += w < warp ? warp_eq[w] : 0;
            total += warp_eq[w];
        }
        if (eq && before < need) {
            ck[n_gt + before] = k;
            ci[n_gt + before] = (int)i;
            cv[n_gt + before] = f;
        }
        __syncthreads();   /* every thread read s_seen and warp_eq */
        if (tid == 0) s_seen += total;
        __syncthreads();
        if (s_seen >= need && base + TK_THREADS < V) {
            /* the rest can only add elements above T: finish them without the scan */
            for (int64_t j = base + TK_THREADS + tid; j < V; j += TK_THREADS) {
                const float g = tk_value(__ldg(row + j), sc);
                const uint32_t kg = tk_key(g);
                if (kg > T) {
                    const int s = atomicAdd(&s_gt, 1);
                    ck[s] = kg;
                    ci[s] = (int)j;
                    cv[s] = g;
                }
            }
            break;
        }
    }
    __syncthreads();
    /* ---- 3. order: larger key first, then lower index ---- */
    float *out = y + (size_t)blockIdx.x * 2 * (size_t)K;
    if (tid < K) {
        const uint32_t k = ck[tid];
        const int i = ci[tid];
        int r = 0;
        for (int j = 0; j < K; j++) r += ck[j] > k || (ck[j] == k && ci[j] < i);
        out[r] = cv[tid];
        out[K + r] = (float)i;
    }
}

extern "C" bool mi8b_topk_supported(int64_t V, int64_t K) {
    return K >= 1 && K <= MI8B_TOPK_MAX && K < V && V <= (1 << 24);
}

extern "C" mi_status mi8b_topk(void *stream, const float *x, const float *scale, float *y, int64_t V, int64_t K,
                               int64_t N) {
    if (!mi8b_topk_supported(V, K) || N <= 0 || N > 0x7fffffff)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_topk: V = %lld, K = %lld, N = %lld", (long long)V, (long long)K,
                      (long long)N);
    if (!x || !scale || !y) return mi_err(MI_ERR_INVALID, "mi8b_topk: null pointer");
    kernel_topk<<<(unsigned)N, TK_THREADS, 0, (cudaStream_t)stream>>>(x, scale, y, V, (int)K);
    MI_CU_CHECK_LAUNCH("kernel_topk");
    return MI_OK;
}

/* One-token attention over an F16 cache with 7b's arithmetic, its loads in flight together.
 * 7b's body (phase7b_ops/attn_core.cuh), which 7d runs for a decode step, is bound by latency,
 * not bytes: a thread reads its key's K row four bytes at a time inside the dot's dependent
 * chain, and after the softmax it reads the tile's V column one key at a time, each load a
 * round trip to L2 or HBM. At the short caches of most decode steps (one tile of 128 keys) that
 * is 8-10 us a layer for a few tens of KB. Here, per tile of MI8A_AST_T keys:
 *   - the tile's V rows are copied to shared memory with cp.async, issued first;
 *   - thread t loads key t's whole K row into registers (16-byte loads, hd / 8 of them in flight);
 *   - q goes to shared memory (first tile) while those loads fly;
 * so a tile costs about one round trip to memory instead of dozens. The arithmetic is 7b's to
 * the operation: the same dot order over hd, the softmax and the value sums through 7b's own
 * device functions (mi7b_attn_softmax, mi7b_attn_values), so the output equals 7b's (and 7d's)
 * bit for bit. n_past comes from 7d's step params when the split has a slot, else from the node. Block per query head, MI8A_AST_T threads; hd 64 or 128. */
#include <cuda_fp16.h>
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/attn_core.cuh"
#include "phase8a_decode/decode8a.h"
#include "phase8a_decode/async_copy.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"

#define AST_T MI7B_ATT_T   /* keys per tile = threads per block, as 7b's body */

template <int HD>
__global__ void __launch_bounds__(AST_T) kernel_attn_step(const float *__restrict__ Q, const uint16_t *__restrict__ Kc,
                                                          const uint16_t *__restrict__ Vc, float *__restrict__ O,
                                                          const int32_t *__restrict__ np_dev, int64_t np_host,
                                                          int64_t n_ctx, int Hq, int Hkv, float scale) {
    constexpr int CH = HD / 8;   /* 16-byte chunks of a row */
    __shared__ float qs[HD];
    __shared__ __align__(16) uint16_t vs[AST_T * HD];
    __shared__ float ps[AST_T];
    __shared__ float red[8];
    MI_PDL_ENTRY();   /* q and the caches: written by the kernels before this one */
    int64_t n_kv = (np_dev ? (int64_t)np_dev[0] : np_host) + 1;
    if (n_kv > n_ctx) n_kv = n_ctx;
    const int h = blockIdx.x, tid = threadIdx.x;
    const int kvh = h / (Hq / Hkv);
    const size_t kvrow = (size_t)HD * Hkv;
    float acc = 0.0f, m = -INFINITY, l = 0.0f;
    for (int64_t t0 = 0; t0 < n_kv; t0 += AST_T) {
        const int tn = (int)(n_kv - t0 < AST_T ? n_kv - t0 : AST_T);
        const uint16_t *vb = Vc + (size_t)t0 * kvrow + (size_t)kvh * HD;
        for (int c = tid; c < tn * CH; c += AST_T)
            async_copy16(vs + (c / CH) * HD + (c % CH) * 8, vb + (size_t)(c / CH) * kvrow + (c % CH) * 8);
        async_commit();
        const int64_t t = t0 + tid;
        uint4 kr[CH];
        if (t < n_kv) {
            const uint4 *kp = (const uint4 *)(Kc + (size_t)t * kvrow + (size_t)kvh * HD);
#pragma unroll
            for (int j = 0; j < CH; j++) kr[j] = kp[j];
        }
        if (t0 == 0)
            for (int d = tid; d < HD; d += AST_T) qs[d] = Q[(size_t)h * HD + d];
        __syncthreads();
        float s = -INFINITY;
        if (t < n_kv) {
            float dot = 0.0f;
#pragma unroll
            for (int j = 0; j < CH; j++) {
                const __half2 *hp = (const __half2 *)&kr[j];
#pragma unroll
                for (int e = 0; e < 4; e++) {   /* dims d, d + 1 in 7b's order */
                    const float2 kv = __half22float2(hp[e]);
                    const int d = j * 8 + e * 2;
                    dot += qs[d] * kv.x;
                    dot += qs[d + 1] * kv.y;
                }
            }
            s = scale * dot;
        }
        const float corr = mi7b_attn_softmax(s, t < n_kv, ps, red, m, l);
        async_wait<0>();
        __syncthreads();   /* every thread's V rows landed */
        if (tid < HD) acc = mi7b_attn_values(acc, corr, ps, (const uint16_t *)vs, (size_t)HD, tid, tn);
        __syncthreads();   /* vs, ps and red are rewritten by the next tile */
    }
    if (tid < HD) O[(size_t)h * HD + tid] = acc / l;
}

extern "C" bool mi8a_attn_step_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype, const void *k,
                                         const void *v) {
    return ctype == MI_TYPE_F16 && (hd == 64 || hd == 128) && Hkv > 0 && Hq > 0 && Hq % Hkv == 0 && Hq <= 65535 &&
           (((uintptr_t)k | (uintptr_t)v) & 15u) == 0;
}

extern "C" mi_status mi8a_attn_step(void *stream, const float *q, const void *k, const void *v, mi_type ctype, float *o,
                                    const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx, int64_t hd, int64_t Hq,
                                    int64_t Hkv, float scale) {
    if (!mi8a_attn_step_supported(hd, Hq, Hkv, ctype, k, v) || n_ctx <= 0 || n_past < 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_attn_step: hd %lld, Hq %lld, Hkv %lld, cache %s", (long long)hd,
                      (long long)Hq, (long long)Hkv, mi_type_name(ctype));
    if (!q || !o) return mi_err(MI_ERR_INVALID, "mi8a_attn_step: null pointer");
    const cudaStream_t st = (cudaStream_t)stream;
    const dim3 grid((unsigned)Hq);
    if (hd == 64)
        MI_CU_CHECK(MI_PDL_LAUNCH(kernel_attn_step<64>, grid, AST_T, 0, st, q, (const uint16_t *)k, (const uint16_t *)v,
                                  o, n_past_dev, n_past, n_ctx, (int)Hq, (int)Hkv, scale));
    else
        MI_CU_CHECK(MI_PDL_LAUNCH(kernel_attn_step<128>, grid, AST_T, 0, st, q, (const uint16_t *)k, (const uint16_t *)v,
                                  o, n_past_dev, n_past, n_ctx, (int)Hq, (int)Hkv, scale));
    MI_CU_CHECK_LAUNCH("kernel_attn_step");
    return MI_OK;
}

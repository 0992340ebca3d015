/* d4's split attention on the tensor cores (item d22): the same grid of (kv head, split) blocks,
 * the same partials and the same combine (attn_split_kv.cu), with the scores and the value sums
 * done by mma.sync instead of scalar FMAs (attn_mma_tile.cuh: a warp takes 16 keys of a 64-key
 * tile, q and P in two f16 parts, the four warps merged in warp order). The scalar kernel spends
 * about 8 k instructions a warp on a tile of 128 keys (7 heads x 128 dims of dots and of value
 * sums, each fed by shared-memory loads) and runs at 14% of the DRAM rate at a 32k cache
 * (results/notes/PHASE8A.md). K and V tiles come by cp.async, two stages. Fixed orders
 * throughout: bit-identical run to run, within the attention bound of the reference (gate_8a's
 * attn_split cases), not 7b's bits. A block takes its kv head's whole group, so mi8a_attn_split
 * sends it the shapes where the scalar kernel's blocks do too (caches of MI8A_SKV_GROUP_CTX
 * positions and more: mi8a_attn_split_on_mma). */
#include <cuda_fp16.h>
#include <type_traits>
#include "phase7b_ops/dev7b.cuh"
#include "phase8a_decode/decode8a.h"
#include "phase8a_decode/async_copy.cuh"
#include "phase8a_decode/attn_split.cuh"
#include "phase8a_decode/attn_mma_tile.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"

template <int HD, bool PACKED>
__global__ void __launch_bounds__(MMA_THREADS, 3) kernel_attn_split_mma(const float *__restrict__ Q,
                                                                        const uint16_t *__restrict__ Kc,
                                                                        const uint16_t *__restrict__ Vc,
                                                                        float *__restrict__ part, float *__restrict__ O,
                                                                        const int32_t *__restrict__ np_dev,
                                                                        int64_t np_host, int64_t n_ctx, int Hq,
                                                                        int Hkv, int S, float scale) {
    constexpr int LD = MMA_LD(HD), CPR = HD / 8;
    extern __shared__ uint4 sm_smem4[];
    uint16_t *ks = (uint16_t *)sm_smem4;     /* [2][MMA_TK][LD] */
    uint16_t *vs = ks + 2 * MMA_TK * LD;     /* [2][MMA_TK][LD] */
    const int G = Hq / Hkv, kvh = blockIdx.x, h0 = kvh * G, s = blockIdx.y;
    const int tid = threadIdx.x, warp = tid >> 5;
    pdl_trigger_early();
    pdl_wait_trigger();   /* q, the caches and n_past: written before this kernel */
    const int64_t n_kv = skv_n_kv(np_dev, np_host, n_ctx);
    const int64_t chunk = skv_chunk(n_kv, S), k0 = (int64_t)s * chunk;
    const int64_t k1 = k0 + chunk < n_kv ? k0 + chunk : n_kv;
    const size_t pstride = (size_t)HD + 2;
    if (k0 >= k1) {   /* an empty split: weight 0 in the combine */
        for (int h = tid; h < G; h += MMA_THREADS) {
            float *p = part + ((size_t)(h0 + h) * S + s) * pstride;
            p[0] = -INFINITY;
            p[1] = 0.0f;
        }
        return;
    }
    const size_t kvrow = (size_t)HD * Hkv;
    const uint16_t *kb = Kc + (size_t)kvh * HD, *vb = Vc + (size_t)kvh * HD;
    /* a thread copies the 16 bytes at column cc of rows r0, r0 + RS, ... of a tile: the pointers
     * step by a constant, rows past k1 are zero-filled (from the head's row 0, nothing read) */
    constexpr int RS = MMA_THREADS / CPR, NP = MMA_TK / RS;
    const int r0 = tid / CPR, cc = tid - r0 * CPR;
    auto load = [&](int buf, int64_t t0) {
        const size_t step = (size_t)RS * kvrow;
        const uint16_t *kp = kb + (size_t)(t0 + r0) * kvrow + cc * 8, *vp = vb + (size_t)(t0 + r0) * kvrow + cc * 8;
        uint16_t *kd = ks + (buf * MMA_TK + r0) * LD + cc * 8, *vd = vs + (buf * MMA_TK + r0) * LD + cc * 8;
        const int64_t rest = k1 - t0 - r0;   /* this thread's rows of the tile that hold keys: j RS < left */
        const int left = rest < MMA_TK ? (int)rest : MMA_TK;
#pragma unroll
        for (int j = 0; j < NP; j++) {
            const bool ok = j * RS < left;
            cp16_or_zero(kd + j * RS * LD, ok ? kp + j * step : kb, ok);
            cp16_or_zero(vd + j * RS * LD, ok ? vp + j * step : vb, ok);
        }
        async_commit();
    };
    load(0, k0);
    typename std::conditional<PACKED, mma_state_packed<HD>, mma_state<HD>>::type st;   /* d34: packed (G <= 8) */
    mma_begin<HD>(st, Q + (size_t)h0 * HD, G);
    int buf = 0;
    for (int64_t t0 = k0; t0 < k1; t0 += MMA_TK, buf ^= 1) {
        if (t0 + MMA_TK < k1) {
            load(buf ^ 1, t0 + MMA_TK);
            async_wait<1>();
        } else {
            async_wait<0>();
        }
        __syncthreads();
        mma_keys<HD>(st, ks + (buf * MMA_TK + warp * 16) * LD, vs + (buf * MMA_TK + warp * 16) * LD, t0 + warp * 16,
                     k1, scale);
        __syncthreads();   /* this buffer is refilled by the next iteration's load */
    }
    const bool only = chunk >= n_kv;   /* the only split that holds keys: the output itself */
    mma_merge<HD>(st, (float *)sm_smem4, G, [&](int h, int d, float M, float L, float acc) {
        if (only) {
            O[(size_t)(h0 + h) * HD + d] = acc / L;
        } else {
            float *p = part + ((size_t)(h0 + h) * S + s) * pstride;
            if (d == 0) {
                p[0] = M;
                p[1] = L;
            }
            p[2 + d] = acc;
        }
    });
}

extern "C" bool mi8a_attn_split_mma_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype, const void *k,
                                              const void *v) {
    return ctype == MI_TYPE_F16 && (hd == 64 || hd == 128) && Hkv > 0 && Hq % Hkv == 0 && Hq / Hkv <= 16 &&
           (((uintptr_t)k | (uintptr_t)v) & 15u) == 0;
}

template <int HD> static size_t mma_smem() { return (size_t)4 * MMA_TK * (HD + 8) * 2; }   /* K, V; two stages */

/* more than 48 KB of dynamic shared memory (hd 128) is asked for once per instantiation */
template <int HD, bool PACKED> static cudaError_t mma_opt_in() {
    static bool opted;
    if (opted || mma_smem<HD>() <= (48u << 10)) return cudaSuccess;
    const cudaError_t e = cudaFuncSetAttribute(kernel_attn_split_mma<HD, PACKED>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)mma_smem<HD>());
    opted = e == cudaSuccess;
    return e;
}

template <int HD> static int mma_blocks_per_sm() {
    int n = 0;
    cudaError_t e = mma_opt_in<HD, false>();
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel_attn_split_mma<HD, false>, MMA_THREADS,
                                                          mma_smem<HD>());
    if (e != cudaSuccess || n < 1) {
        (void)cudaGetLastError();
        n = 1;
    }
    return n;
}

/* blocks of this kernel an SM holds at once (its shared memory and registers decide; both
 * variants are held to 3 by their launch bounds) */
extern "C" int mi8a_attn_split_mma_blocks_per_sm(int64_t hd) {
    static int per[2];   /* hd 64, hd 128: asked once */
    const int i = hd == 64 ? 0 : 1;
    if (!per[i]) per[i] = hd == 64 ? mma_blocks_per_sm<64>() : mma_blocks_per_sm<128>();
    return per[i];
}

template <int HD, bool PACKED>
static mi_status mma_launch(cudaStream_t st, bool pdl, dim3 grid, const float *q, const void *k, const void *v,
                            float *part, float *o, const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx, int64_t Hq,
                            int64_t Hkv, int S, float scale) {
    const cudaError_t e = mma_opt_in<HD, PACKED>();
    MI_CU_CHECK(e);
    MI_CU_CHECK(pdl_launch(pdl, kernel_attn_split_mma<HD, PACKED>, grid, dim3(MMA_THREADS), mma_smem<HD>(), st, q,
                           (const uint16_t *)k, (const uint16_t *)v, part, o, n_past_dev, n_past, n_ctx, (int)Hq,
                           (int)Hkv, S, scale));
    return MI_OK;
}

extern "C" mi_status mi8a_attn_split_mma_launch(void *stream, const float *q, const void *k, const void *v, float *part,
                                                float *o, const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx,
                                                int64_t hd, int64_t Hq, int64_t Hkv, int S, float scale, bool pdl) {
    const cudaStream_t st = (cudaStream_t)stream;
    const dim3 grid((unsigned)Hkv, (unsigned)S);
    const bool packed = Hq / Hkv <= 8 && mi8a_skv_packed_on();
    if (hd == 64)
        return packed ? mma_launch<64, true>(st, pdl, grid, q, k, v, part, o, n_past_dev, n_past, n_ctx, Hq, Hkv, S, scale)
                     : mma_launch<64, false>(st, pdl, grid, q, k, v, part, o, n_past_dev, n_past, n_ctx, Hq, Hkv, S, scale);
    return packed ? mma_launch<128, true>(st, pdl, grid, q, k, v, part, o, n_past_dev, n_past, n_ctx, Hq, Hkv, S, scale)
                 : mma_launch<128, false>(st, pdl, grid, q, k, v, part, o, n_past_dev, n_past, n_ctx, Hq, Hkv, S, scale);
}

/* d4's split attention on the tensor cores (item d22): the same grid of (kv head, split) blocks,
 * the same partials and the same combine (attn_split_kv.cu), with the scores and the value sums
 * done by mma.sync instead of scalar FMAs (attn_mma_tile.cuh: a warp takes 16 keys of a 64-key
 * tile, q and P in two f16 parts, packed into one mma's rows for groups of 8 heads or fewer (d34),
 * the four warps merged in warp order). The scalar kernel spends about 8 k instructions a warp on
 * a tile of 128 keys (7 heads x 128 dims of dots and of value sums, each fed by shared-memory
 * loads) and runs at 14% of the DRAM rate at a 32k cache (results/notes/PHASE8A.md). K and V
 * tiles come by cp.async: the block's two stages, or each warp's own three (d35). As many splits
 * as one wave of these blocks (d33, attn_split_kv.cu). Fixed orders
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

/* WST: 0, the block's pipeline (two stages of 64-key tiles, a block barrier before and after each
 * tile's products); 3 (item d35), each warp's own pipeline three tiles deep: a warp copies and
 * waits for only its 16 rows of each tile (the rows it computes on), so the four warps need no
 * barrier until the merge and drift apart, one in its score chain while another waits or
 * exponentiates. The same keys a warp in the same order: the same bits for the same splits (the
 * third stage's shared memory leaves an SM 2 blocks, not 3, so d33 makes fewer splits). */
template <int HD, bool PACKED, int WST>
__global__ void __launch_bounds__(MMA_THREADS, 3) kernel_attn_split_mma(const float *__restrict__ Q,
                                                                        const uint16_t *__restrict__ Kc,
                                                                        const uint16_t *__restrict__ Vc,
                                                                        float *__restrict__ part, float *__restrict__ O,
                                                                        const int32_t *__restrict__ np_dev,
                                                                        int64_t np_host, int64_t n_ctx, int Hq,
                                                                        int Hkv, int S, float scale) {
    constexpr int LD = MMA_LD(HD), CPR = HD / 8, NST = WST ? WST : 2;
    extern __shared__ uint4 sm_smem4[];
    uint16_t *ks = (uint16_t *)sm_smem4;       /* [NST][MMA_TK][LD] */
    uint16_t *vs = ks + NST * MMA_TK * LD;     /* [NST][MMA_TK][LD] */
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
    /* a thread copies the 16 bytes at column cc of rows r0, r0 + RS, ... of a tile (the block's
     * 64 rows, or with WST its warp's 16): the pointers step by a constant, rows past k1 are
     * zero-filled (from the head's row 0, nothing read) */
    constexpr int COPIERS = WST ? 32 : MMA_THREADS, ROWS = WST ? 16 : MMA_TK;
    constexpr int RS = COPIERS / CPR, NP = ROWS / RS;
    const int ct = WST ? (tid & 31) : tid, rbase = WST ? warp * 16 : 0;
    const int r0 = rbase + ct / CPR, cc = ct % CPR;
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
    };
    typename std::conditional<PACKED, mma_state_packed<HD>, mma_state<HD>>::type st;   /* d34: packed (G <= 8) */
    if constexpr (WST == 0) {
        load(0, k0);
        async_commit();
        mma_begin<HD>(st, Q + (size_t)h0 * HD, G);
        int buf = 0;
        for (int64_t t0 = k0; t0 < k1; t0 += MMA_TK, buf ^= 1) {
            if (t0 + MMA_TK < k1) {
                load(buf ^ 1, t0 + MMA_TK);
                async_commit();
                async_wait<1>();
            } else {
                async_wait<0>();
            }
            __syncthreads();
            mma_keys<HD>(st, ks + (buf * MMA_TK + warp * 16) * LD, vs + (buf * MMA_TK + warp * 16) * LD,
                         t0 + warp * 16, k1, scale);
            __syncthreads();   /* this buffer is refilled by the next iteration's load */
        }
    } else {
        /* tiles i + 1 .. i + WST - 1 in flight while tile i is computed; a group is committed every
         * step (empty past the end) so the wait's count stays the same */
#pragma unroll
        for (int i = 0; i < WST - 1; i++) {
            if (k0 + (int64_t)i * MMA_TK < k1) load(i, k0 + (int64_t)i * MMA_TK);
            async_commit();
        }
        mma_begin<HD>(st, Q + (size_t)h0 * HD, G);
        int buf = 0;
        for (int64_t t0 = k0; t0 < k1; t0 += MMA_TK) {
            const int64_t tn = t0 + (int64_t)(WST - 1) * MMA_TK;
            const int bn = buf + WST - 1 < WST ? buf + WST - 1 : buf - 1;   /* the buffer tile i - 1 used */
            if (tn < k1) load(bn, tn);
            async_commit();
            async_wait<WST - 1>();
            __syncwarp();
            mma_keys<HD>(st, ks + (buf * MMA_TK + warp * 16) * LD, vs + (buf * MMA_TK + warp * 16) * LD,
                         t0 + warp * 16, k1, scale);
            __syncwarp();   /* this buffer's rows are refilled by a later load of this warp */
            buf = buf + 1 < WST ? buf + 1 : 0;
        }
        __syncthreads();   /* every warp done with the tiles: the merge reuses their space */
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

/* K and V, NST stages (two for the block's pipeline) */
template <int HD, int WST> static size_t mma_smem() { return (size_t)2 * (WST ? WST : 2) * MMA_TK * (HD + 8) * 2; }

/* more than 48 KB of dynamic shared memory is asked for once per instantiation */
template <int HD, bool PACKED, int WST> static cudaError_t mma_opt_in() {
    static bool opted;
    if (opted || mma_smem<HD, WST>() <= (48u << 10)) return cudaSuccess;
    const cudaError_t e = cudaFuncSetAttribute(kernel_attn_split_mma<HD, PACKED, WST>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)mma_smem<HD, WST>());
    opted = e == cudaSuccess;
    return e;
}

template <int HD, int WST> static int mma_blocks_per_sm() {
    static int n;   /* asked once */
    if (n) return n;
    cudaError_t e = mma_opt_in<HD, false, WST>();
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel_attn_split_mma<HD, false, WST>, MMA_THREADS,
                                                          mma_smem<HD, WST>());
    if (e != cudaSuccess || n < 1) {
        (void)cudaGetLastError();
        n = 1;
    }
    return n;
}

/* the pipeline the items ask for: 0 (the block's) or 3 (d35: each warp's, three tiles deep) */
static int mma_wst(void) { return mi8a_skv_warp_pipe_on() ? 3 : 0; }

/* blocks of the kernel the items pick an SM holds at once (its shared memory and registers decide;
 * the packed and plain forms share launch bounds and shared memory) */
extern "C" int mi8a_attn_split_mma_blocks_per_sm(int64_t hd) {
    const int w = mma_wst();
    if (hd == 64) return w == 0 ? mma_blocks_per_sm<64, 0>() : mma_blocks_per_sm<64, 3>();
    return w == 0 ? mma_blocks_per_sm<128, 0>() : mma_blocks_per_sm<128, 3>();
}

template <int HD, bool PACKED, int WST>
static mi_status mma_launch(cudaStream_t st, bool pdl, dim3 grid, const float *q, const void *k, const void *v,
                            float *part, float *o, const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx, int64_t Hq,
                            int64_t Hkv, int S, float scale) {
    const cudaError_t e = mma_opt_in<HD, PACKED, WST>();
    MI_CU_CHECK(e);
    MI_CU_CHECK(pdl_launch(pdl, kernel_attn_split_mma<HD, PACKED, WST>, grid, dim3(MMA_THREADS), mma_smem<HD, WST>(),
                           st, q, (const uint16_t *)k, (const uint16_t *)v, part, o, n_past_dev, n_past, n_ctx, (int)Hq,
                           (int)Hkv, S, scale));
    return MI_OK;
}

template <int HD, bool PACKED>
static mi_status mma_launch_wst(int wst, cudaStream_t st, bool pdl, dim3 grid, const float *q, const void *k,
                                const void *v, float *part, float *o, const int32_t *n_past_dev, int64_t n_past,
                                int64_t n_ctx, int64_t Hq, int64_t Hkv, int S, float scale) {
    if (wst == 3)
        return mma_launch<HD, PACKED, 3>(st, pdl, grid, q, k, v, part, o, n_past_dev, n_past, n_ctx, Hq, Hkv, S, scale);
    return mma_launch<HD, PACKED, 0>(st, pdl, grid, q, k, v, part, o, n_past_dev, n_past, n_ctx, Hq, Hkv, S, scale);
}

extern "C" mi_status mi8a_attn_split_mma_launch(void *stream, const float *q, const void *k, const void *v, float *part,
                                                float *o, const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx,
                                                int64_t hd, int64_t Hq, int64_t Hkv, int S, float scale, bool pdl) {
    const cudaStream_t st = (cudaStream_t)stream;
    const dim3 grid((unsigned)Hkv, (unsigned)S);
    const bool packed = Hq / Hkv <= 8 && mi8a_skv_packed_on();
    const int w = mma_wst();
    if (hd == 64)
        return packed ? mma_launch_wst<64, true>(w, st, pdl, grid, q, k, v, part, o, n_past_dev, n_past, n_ctx, Hq, Hkv, S, scale)
                      : mma_launch_wst<64, false>(w, st, pdl, grid, q, k, v, part, o, n_past_dev, n_past, n_ctx, Hq, Hkv, S, scale);
    return packed ? mma_launch_wst<128, true>(w, st, pdl, grid, q, k, v, part, o, n_past_dev, n_past, n_ctx, Hq, Hkv, S, scale)
                  : mma_launch_wst<128, false>(w, st, pdl, grid, q, k, v, part, o, n_past_dev, n_past, n_ctx, Hq, Hkv, S, scale);
}

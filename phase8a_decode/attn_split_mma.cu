/* d4's split attention on the tensor cores (item d22): the same grid of (kv head, split) blocks,
 * the same partials and the same combine (attn_split_kv.cu), with the scores and the value sums
 * done by mma.sync instead of scalar FMAs. The scalar kernel spends about 8 k instructions a warp
 * on a tile of 128 keys (7 heads x 128 dims of dots and of value sums, each fed by shared-memory
 * loads) and runs at 14% of the DRAM rate at a 32k cache (results/notes/PHASE8A.md); here a warp
 * takes 16 keys of a 64-key tile:
 *   S[16 rows x 16 keys] = Q[16 x hd] K^T      m16n8k16, the group's heads as rows (G <= 16, the
 *                                              rest zero), K's rows from shared memory (ldmatrix)
 *   online softmax per row over the warp's keys (running max and sum in registers)
 *   O[16 x hd] += P[16 x 16 keys] V[16 x hd]   P from S's accumulators (the A layout is S's C
 *                                              layout), V's rows through ldmatrix.trans
 * q and P are f32 values: each is split into an f16 high part and an f16 remainder, and both
 * multiply the f16 cache (two mma a product), so the products carry about 22 bits; the sums are
 * the tensor cores' f32 accumulation. K and V tiles come by cp.async, two stages, rows padded by
 * 16 bytes so ldmatrix's eight row addresses fall in distinct banks. At the end the four warps'
 * states merge in warp order in shared memory. Fixed orders throughout: bit-identical run to run,
 * within the attention bound of the reference (gate_8a's attn_split cases), not 7b's bits. A block
 * takes its kv head's whole group, so mi8a_attn_split sends it the shapes where the scalar
 * kernel's blocks do too (caches of MI8A_SKV_GROUP_CTX positions and more: mi8a_attn_split_on_mma). */
#include <cuda_fp16.h>
#include "phase7b_ops/dev7b.cuh"
#include "phase8a_decode/decode8a.h"
#include "phase8a_decode/async_copy.cuh"
#include "phase8a_decode/attn_split.cuh"
#include "phase7e_perf/mma_f16.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"

#define SM_T 128   /* threads: four warps */
#define SM_TK 64   /* keys a tile: 16 a warp */

/* 16 bytes global -> shared, or 16 zero bytes when !ok (nothing read) */
__device__ __forceinline__ void cp16_or_zero(void *smem, const void *gmem, bool ok) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gmem), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *(uint32_t *)&h; }
/* x0, x1 -> their f16 pair and the f16 pair of what that leaves */
__device__ __forceinline__ void split2(float x0, float x1, uint32_t &hi, uint32_t &lo) {
    const __half2 h = __floats2half2_rn(x0, x1);
    const float2 hf = __half22float2(h);
    hi = h2_bits(h);
    lo = h2_bits(__floats2half2_rn(x0 - hf.x, x1 - hf.y));
}

template <int HD>
__global__ void __launch_bounds__(SM_T, 3) kernel_attn_split_mma(const float *__restrict__ Q,
                                                                 const uint16_t *__restrict__ Kc,
                                                                 const uint16_t *__restrict__ Vc,
                                                                 float *__restrict__ part, float *__restrict__ O,
                                                                 const int32_t *__restrict__ np_dev, int64_t np_host,
                                                                 int64_t n_ctx, int Hq, int Hkv, int S, float scale) {
    constexpr int LD = HD + 8, KS = HD / 16, NT = HD / 8, CPR = HD / 8;
    extern __shared__ uint4 sm_smem4[];
    uint16_t *ks = (uint16_t *)sm_smem4;     /* [2][SM_TK][LD] */
    uint16_t *vs = ks + 2 * SM_TK * LD;      /* [2][SM_TK][LD] */
    const int G = Hq / Hkv, kvh = blockIdx.x, h0 = kvh * G, s = blockIdx.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3, mi = lane >> 3;
    pdl_trigger_early();
    pdl_wait_trigger();   /* q, the caches and n_past: written before this kernel */
    const int64_t n_kv = skv_n_kv(np_dev, np_host, n_ctx);
    const int64_t chunk = skv_chunk(n_kv, S), k0 = (int64_t)s * chunk;
    const int64_t k1 = k0 + chunk < n_kv ? k0 + chunk : n_kv;
    const size_t pstride = (size_t)HD + 2;
    if (k0 >= k1) {   /* an empty split: weight 0 in the combine */
        for (int h = tid; h < G; h += SM_T) {
            float *p = part + ((size_t)(h0 + h) * S + s) * pstride;
            p[0] = -INFINITY;
            p[1] = 0.0f;
        }
        return;
    }
    const size_t kvrow = (size_t)HD * Hkv;
    const uint16_t *kb = Kc + (size_t)kvh * HD, *vb = Vc + (size_t)kvh * HD;
    auto load = [&](int buf, int64_t t0) {
        for (int i = tid; i < SM_TK * CPR; i += SM_T) {
            const int r = i / CPR, cc = i - r * CPR;
            const bool ok = t0 + r < k1;
            const size_t off = (size_t)(ok ? t0 + r : k0) * kvrow + (size_t)cc * 8;
            cp16_or_zero(ks + (buf * SM_TK + r) * LD + cc * 8, kb + off, ok);
            cp16_or_zero(vs + (buf * SM_TK + r) * LD + cc * 8, vb + off, ok);
        }
        async_commit();
    };
    load(0, k0);
    /* q as A fragments (rows g, g + 8: heads h0 + g, h0 + g + 8 while < G), high and low halves */
    uint32_t qh[KS][4], ql[KS][4];
#pragma unroll
    for (int k = 0; k < KS; k++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int row = g + (j & 1) * 8, col = k * 16 + 2 * c + (j >> 1) * 8;
            const float *qr = Q + (size_t)(h0 + row) * HD + col;
            const float x0 = row < G ? qr[0] : 0.0f, x1 = row < G ? qr[1] : 0.0f;
            split2(x0, x1, qh[k][j], ql[k][j]);
        }
    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};   /* rows g, g + 8 */
    int buf = 0;
    for (int64_t t0 = k0; t0 < k1; t0 += SM_TK, buf ^= 1) {
        if (t0 + SM_TK < k1) {
            load(buf ^ 1, t0 + SM_TK);
            async_wait<1>();
        } else {
            async_wait<0>();
        }
        __syncthreads();
        /* scores of the warp's 16 keys: n-tile 0 keys 0-7, n-tile 1 keys 8-15 */
        float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        const uint16_t *kt = ks + (buf * SM_TK + warp * 16) * LD;
#pragma unroll
        for (int k = 0; k < KS; k++) {
            uint32_t b[4];
            ldsm_x4(b, kt + ((mi >> 1) * 8 + (lane & 7)) * LD + k * 16 + (mi & 1) * 8);
            mma_f16_16816(sc[0], qh[k], b[0], b[1]);
            mma_f16_16816(sc[0], ql[k], b[0], b[1]);
            mma_f16_16816(sc[1], qh[k], b[2], b[3]);
            mma_f16_16816(sc[1], ql[k], b[2], b[3]);
        }
        const int64_t kw = t0 + warp * 16;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int64_t key = kw + n * 8 + 2 * c + (j & 1);
                sc[n][j] = key < k1 ? scale * sc[n][j] : -INFINITY;
                mx[j >> 1] = fmaxf(mx[j >> 1], sc[n][j]);
            }
        float corr[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) {   /* the four lanes of a quad hold one row's 16 keys */
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float mn = fmaxf(m_r[r], mx[r]);
            corr[r] = mn == -INFINITY ? 1.0f : expf(m_r[r] - mn);
            m_r[r] = mn;
        }
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float mn = m_r[j >> 1];
                sc[n][j] = mn == -INFINITY ? 0.0f : expf(sc[n][j] - mn);
                sum[j >> 1] += sc[n][j];
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
            sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
            l_r[r] = l_r[r] * corr[r] + sum[r];
        }
#pragma unroll
        for (int n = 0; n < NT; n++) {
            o[n][0] *= corr[0];
            o[n][1] *= corr[0];
            o[n][2] *= corr[1];
            o[n][3] *= corr[1];
        }
        /* P as the A fragment of 16 keys: a0 (g, keys 2c..), a1 (g+8, 2c..), a2 (g, 8+2c..), a3 (g+8, 8+2c..) */
        uint32_t ph[4], pl[4];
        split2(sc[0][0], sc[0][1], ph[0], pl[0]);
        split2(sc[0][2], sc[0][3], ph[1], pl[1]);
        split2(sc[1][0], sc[1][1], ph[2], pl[2]);
        split2(sc[1][2], sc[1][3], ph[3], pl[3]);
        const uint16_t *vt = vs + (buf * SM_TK + warp * 16) * LD;
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            uint32_t b[4];
            ldsm_x4_trans(b, vt + ((mi & 1) * 8 + (lane & 7)) * LD + n * 8 + (mi >> 1) * 8);
            mma_f16_16816(o[n], ph, b[0], b[1]);
            mma_f16_16816(o[n], pl, b[0], b[1]);
            mma_f16_16816(o[n + 1], ph, b[2], b[3]);
            mma_f16_16816(o[n + 1], pl, b[2], b[3]);
        }
        __syncthreads();   /* this buffer is refilled by the next iteration's load */
    }
    /* the four warps' states, merged in warp order: m, l [4][16], o [4][16][HD] over the tiles' space */
    float *wm = (float *)sm_smem4, *wl = wm + 4 * 16, *wo = wl + 4 * 16;
    if (c == 0) {
        wm[warp * 16 + g] = m_r[0];
        wm[warp * 16 + g + 8] = m_r[1];
        wl[warp * 16 + g] = l_r[0];
        wl[warp * 16 + g + 8] = l_r[1];
    }
#pragma unroll
    for (int n = 0; n < NT; n++) {
        float *r0 = wo + ((size_t)warp * 16 + g) * HD + n * 8 + 2 * c, *r1 = r0 + 8 * HD;
        r0[0] = o[n][0];
        r0[1] = o[n][1];
        r1[0] = o[n][2];
        r1[1] = o[n][3];
    }
    __syncthreads();
    const bool only = chunk >= n_kv;   /* the only split that holds keys: the output itself */
    for (int i = tid; i < G * HD; i += SM_T) {
        const int h = i / HD, d = i - h * HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, wm[w * 16 + h]);
        float L = 0.0f, acc = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            if (wl[w * 16 + h] == 0.0f) continue;   /* a warp that saw no key */
            const float e = expf(wm[w * 16 + h] - M);
            L += wl[w * 16 + h] * e;
            acc += wo[((size_t)w * 16 + h) * HD + d] * e;
        }
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
    }
}

extern "C" bool mi8a_attn_split_mma_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype, const void *k,
                                              const void *v) {
    return ctype == MI_TYPE_F16 && (hd == 64 || hd == 128) && Hkv > 0 && Hq % Hkv == 0 && Hq / Hkv <= 16 &&
           (((uintptr_t)k | (uintptr_t)v) & 15u) == 0;
}

extern "C" mi_status mi8a_attn_split_mma_launch(void *stream, const float *q, const void *k, const void *v, float *part,
                                                float *o, const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx,
                                                int64_t hd, int64_t Hq, int64_t Hkv, int S, float scale, bool pdl) {
    const cudaStream_t st = (cudaStream_t)stream;
    const dim3 grid((unsigned)Hkv, (unsigned)S);
    const size_t smem = (size_t)4 * SM_TK * (size_t)(hd + 8) * 2;   /* K and V, two stages */
    if (hd == 64) {
        MI_CU_CHECK(pdl_launch(pdl, kernel_attn_split_mma<64>, grid, dim3(SM_T), smem, st, q, (const uint16_t *)k,
                               (const uint16_t *)v, part, o, n_past_dev, n_past, n_ctx, (int)Hq, (int)Hkv, S, scale));
    } else {
        static bool opted;   /* more than 48 KB of dynamic shared memory: asked for once */
        if (!opted) {
            MI_CU_CHECK(cudaFuncSetAttribute(kernel_attn_split_mma<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem));
            opted = true;
        }
        MI_CU_CHECK(pdl_launch(pdl, kernel_attn_split_mma<128>, grid, dim3(SM_T), smem, st, q, (const uint16_t *)k,
                               (const uint16_t *)v, part, o, n_past_dev, n_past, n_ctx, (int)Hq, (int)Hkv, S, scale));
    }
    return MI_OK;
}

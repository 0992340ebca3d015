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
 * bit for bit. n_past comes from 7d's step params when the split has a slot, else from the node. Block per query head, MI8A_AST_T threads; hd 64 or 128.
 *
 * Item d30 (RKV): the same kernel also does the step's RoPE of q and k and its K and V stores,
 * which d14 launches as a kernel of their own just before it. Each block rotates its q head into
 * shared memory and its group's k head and v row into f16 rows as the stores would convert them;
 * it uses those rows for the current key instead of reading them back from the caches, and the
 * group's first block writes them to the caches (and q's and k's RoPE outputs). The rotation is
 * d8's (rope_rotate.cuh, rounded operation by operation although this file contracts), the
 * conversion the store's, so every value the attention reads is the one it read after d14.
 *
 * Item d31 (Oq): the kernel also writes its output's quantized row (7b's quantizer's 36-byte
 * blocks of 32) for the o projection after it. A head's hd outputs sit in its first hd / 32 warps,
 * a lane an element, so each of those warps quantizes one whole block with 7b's own function
 * (quant_q8_1_value): the o projection then reads x quantized instead of quantizing it in
 * each of its blocks. */
#include <cuda_fp16.h>
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/attn_core.cuh"
#include "phase7b_ops/quant_act.cuh"
#include "phase8a_decode/decode8a.h"
#include "phase8a_decode/async_copy.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"
#include "phase8a_decode/rope_rotate.cuh"
#include "common/graph/graph.h"

#define AST_T MI7B_ATT_T   /* keys per tile = threads per block, as 7b's body */

/* d30's part of a launch: the step's q, k, v and caches (d14's record), the RoPE's mode, its
 * rotated dims and inverse frequencies */
struct attn_rkv {
    mi8a_rope_kv_io io;
    int neox, n_rot;
    rope_freqs fq;
};
/* the kernel's last parameter: d30's, or nothing (the plain kernel's launch carries no table) */
template <bool RKV> struct rkv_param { attn_rkv r; };
template <> struct rkv_param<false> { int none; };

/* d30's prologue: q's head h rotated into qs (and q's RoPE output), the group's k head rotated and
 * its v row converted into kc and vc as the caches hold them; the group's first block (first)
 * writes k's RoPE output and the two rows to the caches at the stores' rows (a row outside its
 * cache is not written, as d14's kernel does). Returns in *kt / *vt the key whose K / V row is kc /
 * vc (-1: none). Ends with a barrier. */
template <int HD>
__device__ __forceinline__ void rkv_prologue(const attn_rkv &r, int h, int kvh, int Hkv, bool first, float *qs,
                                             uint16_t *kc, uint16_t *vc, int64_t *kt, int64_t *vt) {
    const mi8a_rope_kv_io &io = r.io;
    const int half = r.n_rot / 2, per = HD - half, tid = threadIdx.x;   /* per: pairs + kept dims of a head */
    const float pos = (float)io.pos[0];
    const int64_t npk = io.n_past_k_dev ? (int64_t)io.n_past_k_dev[0] : io.n_past_k;
    const int64_t npv = io.n_past_v_dev ? (int64_t)io.n_past_v_dev[0] : io.n_past_v;
    *kt = npk >= 0 && npk < io.n_ctx_k ? npk : -1;
    *vt = npv >= 0 && npv < io.n_ctx_v ? npv : -1;
    const size_t qh = (size_t)h * HD, kh = (size_t)kvh * HD;
    for (int u = tid; u < 2 * per; u += AST_T) {   /* q's pairs and kept dims, then k's */
        const bool is_k = u >= per;
        const int e = is_k ? u - per : u;
        const rope_elem re = rope_head_elem(is_k ? io.k + kh : io.q + qh, e, r.n_rot, r.neox, pos, r.fq);
        const int d0 = re.d0, d1 = re.d1;
        const float y0 = re.y0, y1 = re.y1;
        if (!is_k) {
            qs[d0] = y0;
            io.q_rope[qh + d0] = y0;
            if (d1 >= 0) qs[d1] = y1, io.q_rope[qh + d1] = y1;
        } else {
            kc[d0] = mi_f32_to_f16(y0);
            if (d1 >= 0) kc[d1] = mi_f32_to_f16(y1);
            if (first) {
                io.k_rope[kh + d0] = y0;
                if (d1 >= 0) io.k_rope[kh + d1] = y1;
            }
        }
    }
    for (int d = tid; d < HD; d += AST_T) vc[d] = mi_f32_to_f16(io.v[kh + d]);
    __syncthreads();
    if (first) {
        const size_t row = (size_t)HD * (size_t)Hkv;
        for (int d = tid; d < HD; d += AST_T) {
            if (*kt >= 0) ((uint16_t *)io.cache_k)[(size_t)*kt * row + kh + d] = kc[d];
            if (*vt >= 0) ((uint16_t *)io.cache_v)[(size_t)*vt * row + kh + d] = vc[d];
        }
    }
}

template <int HD, bool RKV>
__global__ void __launch_bounds__(AST_T) kernel_attn_step(const float *__restrict__ Q, const uint16_t *__restrict__ Kc,
                                                          const uint16_t *__restrict__ Vc, float *__restrict__ O,
                                                          const int32_t *__restrict__ np_dev, int64_t np_host,
                                                          int64_t n_ctx, int Hq, int Hkv, float scale,
                                                          uint8_t *__restrict__ Oq,
                                                          const __grid_constant__ rkv_param<RKV> rp) {
    constexpr int CH = HD / 8;   /* 16-byte chunks of a row */
    __shared__ float qs[HD];
    __shared__ __align__(16) uint16_t vs[AST_T * HD];
    __shared__ float ps[AST_T];
    __shared__ float red[8];
    __shared__ __align__(16) uint16_t kc[RKV ? HD : 8], vc[RKV ? HD : 8];   /* d30: the current key's rows */
    MI_PDL_ENTRY();   /* q and the caches: written by the kernels before this one */
    int64_t n_kv = (np_dev ? (int64_t)np_dev[0] : np_host) + 1;
    if (n_kv > n_ctx) n_kv = n_ctx;
    const int h = blockIdx.x, tid = threadIdx.x;
    const int kvh = h / (Hq / Hkv);
    const size_t kvrow = (size_t)HD * Hkv;
    int64_t kt = -1, vt = -1;   /* d30: the keys whose K / V rows are kc / vc */
    if constexpr (RKV) rkv_prologue<HD>(rp.r, h, kvh, Hkv, h % (Hq / Hkv) == 0, qs, kc, vc, &kt, &vt);
    float acc = 0.0f, m = -INFINITY, l = 0.0f;
    for (int64_t t0 = 0; t0 < n_kv; t0 += AST_T) {
        const int tn = (int)(n_kv - t0 < AST_T ? n_kv - t0 : AST_T);
        const uint16_t *vb = Vc + (size_t)t0 * kvrow + (size_t)kvh * HD;
        for (int c = tid; c < tn * CH; c += AST_T) {
            uint16_t *dst = vs + (c / CH) * HD + (c % CH) * 8;
            if (RKV && t0 + c / CH == vt) *(uint4 *)dst = *(const uint4 *)(vc + (c % CH) * 8);
            else async_copy16(dst, vb + (size_t)(c / CH) * kvrow + (c % CH) * 8);
        }
        async_commit();
        const int64_t t = t0 + tid;
        uint4 kr[CH];
        if (t < n_kv) {
            const uint4 *kp = RKV && t == kt ? (const uint4 *)kc : (const uint4 *)(Kc + (size_t)t * kvrow + (size_t)kvh * HD);
#pragma unroll
            for (int j = 0; j < CH; j++) kr[j] = kp[j];
        }
        if (!RKV && t0 == 0)
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
    if (tid < HD) {
        const float o = acc / l;
        O[(size_t)h * HD + tid] = o;
        if (Oq) quant_q8_1_value(o, Oq + ((size_t)h * HD + (tid & ~31)) / 32 * A8_BYTES, tid & 31);   /* d31 */
    }
}

extern "C" bool mi8a_attn_step_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype, const void *k,
                                         const void *v) {
    return ctype == MI_TYPE_F16 && (hd == 64 || hd == 128) && Hkv > 0 && Hq > 0 && Hq % Hkv == 0 && Hq <= 65535 &&
           (((uintptr_t)k | (uintptr_t)v) & 15u) == 0;
}

template <int HD, bool RKV>
static mi_status launch_step(cudaStream_t st, const float *q, const void *k, const void *v, float *o, void *oq,
                             const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx, int64_t Hq, int64_t Hkv,
                             float scale, const rkv_param<RKV> &rp) {
    if (oq && ((uintptr_t)oq & 3)) return mi_err(MI_ERR_INVALID, "mi8a_attn_step: quantized output not 4-byte aligned");
    MI_CU_CHECK(MI_PDL_LAUNCH((kernel_attn_step<HD, RKV>), dim3((unsigned)Hq), AST_T, 0, st, q, (const uint16_t *)k,
                              (const uint16_t *)v, o, n_past_dev, n_past, n_ctx, (int)Hq, (int)Hkv, scale,
                              (uint8_t *)oq, rp));
    MI_CU_CHECK_LAUNCH("kernel_attn_step");
    return MI_OK;
}

extern "C" mi_status mi8a_attn_step(void *stream, const float *q, const void *k, const void *v, mi_type ctype, float *o,
                                    void *oq, const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx, int64_t hd,
                                    int64_t Hq, int64_t Hkv, float scale) {
    if (!mi8a_attn_step_supported(hd, Hq, Hkv, ctype, k, v) || n_ctx <= 0 || n_past < 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_attn_step: hd %lld, Hq %lld, Hkv %lld, cache %s", (long long)hd,
                      (long long)Hq, (long long)Hkv, mi_type_name(ctype));
    if (!q || !o) return mi_err(MI_ERR_INVALID, "mi8a_attn_step: null pointer");
    const cudaStream_t st = (cudaStream_t)stream;
    const rkv_param<false> none = {0};
    return hd == 64 ? launch_step<64, false>(st, q, k, v, o, oq, n_past_dev, n_past, n_ctx, Hq, Hkv, scale, none)
                    : launch_step<128, false>(st, q, k, v, o, oq, n_past_dev, n_past, n_ctx, Hq, Hkv, scale, none);
}

extern "C" bool mi8a_attn_step_rkv_supported(int64_t hd, int64_t Hq, int64_t Hkv, int n_rot, int mode, mi_type ctype,
                                             const void *k, const void *v) {
    return mi8a_attn_step_supported(hd, Hq, Hkv, ctype, k, v) && mi8a_rope_kv_supported(hd, Hq, Hkv, n_rot, mode, ctype);
}

extern "C" mi_status mi8a_attn_step_rkv(void *stream, const mi8a_rope_kv_io *io, int mode, int n_rot, float freq_base,
                                        mi_type ctype, float *o, void *oq, const int32_t *n_past_dev,
                                        int64_t n_past, int64_t n_ctx, int64_t hd, int64_t Hq, int64_t Hkv,
                                        float scale) {
    if (!io || !mi8a_attn_step_rkv_supported(hd, Hq, Hkv, n_rot, mode, ctype, io->cache_k, io->cache_v) ||
        n_ctx <= 0 || n_past < 0 || io->n_ctx_k != n_ctx || io->n_ctx_v != n_ctx)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_attn_step_rkv: hd %lld, Hq %lld, Hkv %lld, n_rot %d, mode %d, cache %s",
                      (long long)hd, (long long)Hq, (long long)Hkv, n_rot, mode, mi_type_name(ctype));
    if (!io->q || !io->k || !io->v || !io->q_rope || !io->k_rope || !io->pos || !o)
        return mi_err(MI_ERR_INVALID, "mi8a_attn_step_rkv: null pointer");
    const cudaStream_t st = (cudaStream_t)stream;
    rkv_param<true> rp;
    rp.r.io = *io;
    rp.r.neox = mode == MI_ROPE_NEOX;
    rp.r.n_rot = n_rot;
    rp.r.fq = *mi8a_rope_freqs_for(freq_base, n_rot);
    const void *k = io->cache_k, *v = io->cache_v;
    return hd == 64 ? launch_step<64, true>(st, NULL, k, v, o, oq, n_past_dev, n_past, n_ctx, Hq, Hkv, scale, rp)
                    : launch_step<128, true>(st, NULL, k, v, o, oq, n_past_dev, n_past, n_ctx, Hq, Hkv, scale, rp);
}

/* RoPE with the angle of docs/NUMERICS.md (mi_canon_rope_cs), a thread per rotated pair
 * (item d8), and one token's RoPE of q and k with the KV store of k and v in one launch (d14).
 * 7b's kernel gives every output element a thread that computes the pair's
 * inverse frequency (a double pow), then cos and sin in double: at one token the launch is
 * a few blocks whose time is that chain of double-precision calls. Here the inverse
 * frequencies, which depend only on (base, n_rot), come with the launch, computed on the
 * host by the CPU's expression once per (base, n_rot); a thread takes one pair and
 * computes cos and sin once for both its elements. The products and the add are rounded
 * as 7b's (built without FMA contraction): bit-identical to 7b's kernel wherever the
 * host's pow and the device's round to the same float, which gate_8a checks for the
 * models' bases, and then equal to the CPU's. Dims >= n_rot are copied. */
#include "phase7b_ops/dev7b.cuh"
#include "phase8a_decode/decode8a.h"
#include "common/graph/graph.h"
#include <math.h>
#include <string.h>
#include "phase7a_skeleton/cuda_pdl.cuh"
#include "phase8a_decode/rope_rotate.cuh"

/* x [hd*H, N], pos [N] -> y. Thread t < pairs * H * N: pair t % half of head (t / half) % H of
 * token t / (half * H); threads past that copy the unrotated dims (hd - n_rot of each head). */
__global__ void kernel_rope_pairs(const float *__restrict__ x, const int32_t *__restrict__ pos,
                                  float *__restrict__ y, int64_t hd, int64_t H, int64_t N, int neox, int n_rot,
                                  const rope_freqs fq) {
    MI_PDL_ENTRY();
    const int64_t half = n_rot / 2, rot = half * H * N, pass = (hd - n_rot) * H * N;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < rot + pass; t += stride) {
        if (t >= rot) {
            const int64_t u = t - rot, w = hd - n_rot, d = n_rot + u % w, row = u / w;
            y[row * hd + d] = x[row * hd + d];
            continue;
        }
        const int64_t i = t % half, row = t / half, n = row / H;   /* row: head (token n, head row % H) */
        const int64_t d0 = neox ? i : 2 * i, d1 = neox ? i + half : 2 * i + 1;
        const float2 r = rope_rotate_pair(x + row * hd, d0, d1, (float)pos[n], fq.f[i]);
        y[row * hd + d0] = r.x;
        y[row * hd + d1] = r.y;
    }
}

/* the table for (base, n_rot): the CPU's expression (mi_canon_rope_cs), kept for the last
 * pair of values this thread launched with */
const rope_freqs *mi8a_rope_freqs_for(float base, int n_rot) {
    static thread_local rope_freqs tab;
    static thread_local float t_base = -1.0f;
    static thread_local int t_rot = 0;
    if (t_rot != n_rot || memcmp(&t_base, &base, sizeof base) != 0) {
        for (int i = 0; i < n_rot / 2; i++)
            tab.f[i] = (float)pow((double)base, -2.0 * (double)i / (double)n_rot);
        t_base = base;
        t_rot = n_rot;
    }
    return &tab;
}

extern "C" bool mi8a_rope_pairs_supported(int64_t hd, int n_rot, int mode) {
    return hd > 0 && n_rot > 0 && n_rot <= hd && n_rot % 2 == 0 && n_rot / 2 <= MI8A_ROPE_MAX_PAIRS &&
           (mode == MI_ROPE_NORMAL || mode == MI_ROPE_NEOX);
}

extern "C" mi_status mi8a_rope_pairs(void *stream, const float *x, const int32_t *pos, float *y, int64_t hd, int64_t H,
                                     int64_t N, int mode, int n_rot, float freq_base) {
    if (!mi8a_rope_pairs_supported(hd, n_rot, mode) || H <= 0 || N <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_rope_pairs: hd %lld, n_rot %d, mode %d", (long long)hd, n_rot, mode);
    const int64_t total = (int64_t)(n_rot / 2) * H * N + (hd - n_rot) * H * N;
    MI_CU_CHECK(MI_PDL_LAUNCH(kernel_rope_pairs, mi7b_blocks(total, 128), 128, 0, (cudaStream_t)stream, x, pos, y, hd,
                              H, N, mode == MI_ROPE_NEOX, n_rot, *mi8a_rope_freqs_for(freq_base, n_rot)));
    MI_CU_CHECK_LAUNCH("kernel_rope_pairs");
    return MI_OK;
}

/* ---------------- d14: q's and k's RoPE, the K and V stores, one token, one launch ----------------
 * Thread t takes, in this order: a rotated pair of one of the Hq + Hkv heads (q's heads, then
 * k's), an unrotated dim of one of them, or one element of v. A k element goes to k's RoPE output
 * and, converted as 7b's store converts it (mi_f32_to_f16, or copied for an F32 cache), to row
 * n_past of the K cache; v's to row n_past of the V cache. Every value is the one the four
 * kernels it replaces write: the pair is d8's expression, the store 7b's conversion of that
 * float. n_past comes from the device (7d's step params) where the split has a slot, else from
 * the node; a row at or past n_ctx is not written (7d's store drops it too). */
__device__ __forceinline__ void store_kv(void *cache, bool f16, int64_t i, float v) {
    if (f16) ((uint16_t *)cache)[i] = mi_f32_to_f16(v);
    else ((float *)cache)[i] = v;
}

/* Element u (< rot + pass) of one row's q and k heads, as kernel_rope_kv's threads take them: the
 * pair (u < rot) or the unrotated dim rotated / copied into q_rope or k_rope (x and y that row's q
 * or k, head-major), and a k element also stored into the K cache at kc (that row's cache row;
 * NULL: outside the cache, not written). */
__device__ __forceinline__ void rkv_qk_element(int64_t u, int64_t rot, int half, int w, int Hq, int hd, int neox,
                                               const rope_freqs &fq, float pos, const float *q, const float *k,
                                               float *q_rope, float *k_rope, void *kc, bool f16) {
    int64_t h, d0, d1 = -1;
    if (u < rot) {
        const int64_t i = u % half;
        h = u / half;
        d0 = neox ? i : 2 * i, d1 = neox ? i + half : 2 * i + 1;
    } else {
        const int64_t v = u - rot;
        h = v / w, d0 = (hd - w) + v % w;
    }
    const bool is_k = h >= Hq;
    const int64_t hh = is_k ? h - Hq : h;
    const float *xh = (is_k ? k : q) + hh * hd;
    float *yh = (is_k ? k_rope : q_rope) + hh * hd;
    float y0, y1 = 0.0f;
    if (d1 >= 0) {
        const float2 r = rope_rotate_pair(xh, d0, d1, pos, fq.f[u % half]);
        y0 = r.x, y1 = r.y;
        yh[d1] = y1;
    } else {
        y0 = xh[d0];
    }
    yh[d0] = y0;
    if (is_k && kc) {
        store_kv(kc, f16, hh * hd + d0, y0);
        if (d1 >= 0) store_kv(kc, f16, hh * hd + d1, y1);
    }
}

__global__ void kernel_rope_kv(const mi8a_rope_kv_io io, int hd, int Hq, int Hkv, int neox, int n_rot, int f16,
                               const rope_freqs fq) {
    MI_PDL_ENTRY();
    const int half = n_rot / 2, w = hd - n_rot, H = Hq + Hkv;
    const int64_t rot = (int64_t)half * H, pass = (int64_t)w * H, row = (int64_t)hd * Hkv;
    const int64_t npk = io.n_past_k_dev ? (int64_t)io.n_past_k_dev[0] : io.n_past_k;
    const int64_t npv = io.n_past_v_dev ? (int64_t)io.n_past_v_dev[0] : io.n_past_v;
    const bool k_in = npk >= 0 && npk < io.n_ctx_k, v_in = npv >= 0 && npv < io.n_ctx_v;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < rot + pass + row; t += stride) {
        if (t >= rot + pass) {   /* v */
            const int64_t j = t - rot - pass;
            if (v_in) store_kv(io.cache_v, f16, npv * row + j, io.v[j]);
            continue;
        }
        void *kc = k_in ? (void *)((uint8_t *)io.cache_k + (size_t)(npk * row) * (f16 ? 2 : 4)) : NULL;
        rkv_qk_element(t, rot, half, w, Hq, hd, neox, fq, (float)io.pos[0], io.q, io.k, io.q_rope, io.k_rope, kc, f16);
    }
}

/* d14's four over N rows: thread t takes row t / per, then as kernel_rope_kv within the row */
__global__ void kernel_rope_kv_rows(const mi8a_rope_kv_rows_io io, int hd, int Hq, int Hkv, int neox, int n_rot,
                                    int f16, const rope_freqs fq) {
    MI_PDL_ENTRY();
    const int half = n_rot / 2, w = hd - n_rot, H = Hq + Hkv;
    const int64_t rot = (int64_t)half * H, pass = (int64_t)w * H, row = (int64_t)hd * Hkv, per = rot + pass + row;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < per * io.N; t += stride) {
        const int64_t r = t / per, u = t - r * per;
        const int64_t slot = io.slots[r];
        if (u >= rot + pass) {   /* v */
            const int64_t j = u - rot - pass;
            if (slot >= 0 && slot < io.n_rows_v) store_kv(io.cache_v, f16, slot * row + j, io.v[r * row + j]);
            continue;
        }
        void *kc = slot >= 0 && slot < io.n_rows_k ? (void *)((uint8_t *)io.cache_k + (size_t)(slot * row) * (f16 ? 2 : 4))
                                                    : NULL;
        rkv_qk_element(u, rot, half, w, Hq, hd, neox, fq, (float)io.pos[r], io.q + r * Hq * hd, io.k + r * row,
                       io.q_rope + r * Hq * hd, io.k_rope + r * row, kc, f16);
    }
}

extern "C" bool mi8a_rope_kv_supported(int64_t hd, int64_t Hq, int64_t Hkv, int n_rot, int mode, mi_type ctype) {
    return mi8a_rope_pairs_supported(hd, n_rot, mode) && Hq > 0 && Hkv > 0 && (Hq + Hkv) * hd <= INT32_MAX &&
           (ctype == MI_TYPE_F16 || ctype == MI_TYPE_F32);
}

extern "C" mi_status mi8a_rope_kv(void *stream, const mi8a_rope_kv_io *io, mi_type ctype, int64_t hd, int64_t Hq,
                                  int64_t Hkv, int mode, int n_rot, float freq_base) {
    if (!mi8a_rope_kv_supported(hd, Hq, Hkv, n_rot, mode, ctype))
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_rope_kv: hd %lld, heads %lld + %lld, n_rot %d, mode %d, cache %s",
                      (long long)hd, (long long)Hq, (long long)Hkv, n_rot, mode, mi_type_name(ctype));
    const int64_t total = (int64_t)(n_rot / 2) * (Hq + Hkv) + (hd - n_rot) * (Hq + Hkv) + hd * Hkv;
    MI_CU_CHECK(MI_PDL_LAUNCH(kernel_rope_kv, mi7b_blocks(total, 128), 128, 0, (cudaStream_t)stream, *io, (int)hd,
                              (int)Hq, (int)Hkv, mode == MI_ROPE_NEOX, n_rot, ctype == MI_TYPE_F16,
                              *mi8a_rope_freqs_for(freq_base, n_rot)));
    MI_CU_CHECK_LAUNCH("kernel_rope_kv");
    return MI_OK;
}

extern "C" mi_status mi8a_rope_kv_rows(void *stream, const mi8a_rope_kv_rows_io *io, mi_type ctype, int64_t hd,
                                       int64_t Hq, int64_t Hkv, int mode, int n_rot, float freq_base) {
    if (!mi8a_rope_kv_supported(hd, Hq, Hkv, n_rot, mode, ctype) || io->N < 1 || io->N > INT32_MAX)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_rope_kv_rows: hd %lld, heads %lld + %lld, %lld rows, n_rot %d, cache %s",
                      (long long)hd, (long long)Hq, (long long)Hkv, (long long)io->N, n_rot, mi_type_name(ctype));
    const int64_t total = ((int64_t)(n_rot / 2) * (Hq + Hkv) + (hd - n_rot) * (Hq + Hkv) + hd * Hkv) * io->N;
    MI_CU_CHECK(MI_PDL_LAUNCH(kernel_rope_kv_rows, mi7b_blocks(total, 128), 128, 0, (cudaStream_t)stream, *io,
                              (int)hd, (int)Hq, (int)Hkv, mode == MI_ROPE_NEOX, n_rot, ctype == MI_TYPE_F16,
                              *mi8a_rope_freqs_for(freq_base, n_rot)));
    MI_CU_CHECK_LAUNCH("kernel_rope_kv_rows");
    return MI_OK;
}

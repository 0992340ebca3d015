/* Device helpers shared by the 7b kernels: warp reductions, 2-byte-aligned loads, and
 * the unpacking of one 32-element "unit" of every weight format (docs/QUANT.md layouts,
 * ggml's bit for bit). A unit is the common grain of the quantized matmul: one block of
 * the 32-element formats, one 32-element sub-block of a K-quant super-block. */
#ifndef MI_DEV7B_CUH
#define MI_DEV7B_CUH
#include <stdint.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "common/core/mi_err.h"
#include "common/core/mi_fp16.h"
#include "common/quant/mi_types.h"
#include "phase7a_skeleton/cuda_check.h"

#define MI7B_WARP 32

/* Elementwise grids: a grid-stride loop over at most this many blocks, so a launch
 * never exceeds the grid limit whatever the element count. */
static inline unsigned mi7b_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535) b = 65535;
    return (unsigned)b;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off >= 1; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ int warp_sum_i(int v) {
    for (int off = 16; off >= 1; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off >= 1; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

/* Blocks of Q4_0/Q5_0/Q8_0/Q6_K are 18/22/34/210 bytes: only 2-byte alignment holds. */
__device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t *p) {
    const uint16_t *h = (const uint16_t *)p;
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}
__device__ __forceinline__ float ld_f16(const uint8_t *p) {
    return __half2float(__ushort_as_half(*(const uint16_t *)p));
}

/* One unpacked weight unit: 32 integer levels packed 4 per int (element 4i+k in byte k
 * of q[i]), and the coefficients that turn integer dot products into floats:
 *   32-element formats:  y = d * q (+ m)           (m: Q4_1/Q5_1 only)
 *   Q4_K/Q5_K sub-block: y = d * q - m             (d = d*sc, m = dmin*min)
 *   Q6_K sub-block:      y = d * sc[half] * q      (two 16-element halves, sc_lo/sc_hi) */
struct wunit {
    int q[8];
    float d, m;
    int sc_lo, sc_hi;
};

template <int WT> struct wtraits;
template <> struct wtraits<MI_TYPE_Q4_0> { static const int bytes = 18, units = 1, act = MI_TYPE_Q8_0; };
template <> struct wtraits<MI_TYPE_Q4_1> { static const int bytes = 20, units = 1, act = MI_TYPE_Q8_1; };
template <> struct wtraits<MI_TYPE_Q5_0> { static const int bytes = 22, units = 1, act = MI_TYPE_Q8_0; };
template <> struct wtraits<MI_TYPE_Q5_1> { static const int bytes = 24, units = 1, act = MI_TYPE_Q8_1; };
template <> struct wtraits<MI_TYPE_Q8_0> { static const int bytes = 34, units = 1, act = MI_TYPE_Q8_0; };
template <> struct wtraits<MI_TYPE_Q4_K> { static const int bytes = 144, units = 8, act = MI_TYPE_Q8_K; };
template <> struct wtraits<MI_TYPE_Q5_K> { static const int bytes = 176, units = 8, act = MI_TYPE_Q8_K; };
template <> struct wtraits<MI_TYPE_Q6_K> { static const int bytes = 210, units = 8, act = MI_TYPE_Q8_K; };

/* The one type-to-template switch of the quantized kernels: for each weight type with a
 * wtraits entry (the 32-element formats and Q4_K, Q5_K, Q6_K), binds the constant int WT to
 * it and runs the statement (usually `return launch<WT>(...);`, which may contain commas);
 * any other type returns MI_ERR_UNSUPPORTED naming the function and the type. For use in a
 * function returning mi_status. */
#define MI_QTYPE_CASE_(T, WT, ...) \
    case T: {                      \
        constexpr int WT = T;      \
        __VA_ARGS__;               \
    } break;
#define MI_QTYPE_DISPATCH(wt, WT, ...)                                                            \
    switch (wt) {                                                                                 \
        MI_QTYPE_CASE_(MI_TYPE_Q4_0, WT, __VA_ARGS__)                                             \
        MI_QTYPE_CASE_(MI_TYPE_Q4_1, WT, __VA_ARGS__)                                             \
        MI_QTYPE_CASE_(MI_TYPE_Q5_0, WT, __VA_ARGS__)                                             \
        MI_QTYPE_CASE_(MI_TYPE_Q5_1, WT, __VA_ARGS__)                                             \
        MI_QTYPE_CASE_(MI_TYPE_Q8_0, WT, __VA_ARGS__)                                             \
        MI_QTYPE_CASE_(MI_TYPE_Q4_K, WT, __VA_ARGS__)                                             \
        MI_QTYPE_CASE_(MI_TYPE_Q5_K, WT, __VA_ARGS__)                                             \
        MI_QTYPE_CASE_(MI_TYPE_Q6_K, WT, __VA_ARGS__)                                             \
    default:                                                                                      \
        return mi_err(MI_ERR_UNSUPPORTED, "%s: weight type %s", __func__, mi_type_name((mi_type)(wt))); \
    }

/* Q4_K/Q5_K packed 6-bit scale and min of sub-block j (0..7). */
__device__ __forceinline__ void k4_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* 5th bits of elements 4i..4i+3 from a 32-bit qh word, as bit 4 of each byte. */
__device__ __forceinline__ int qh_bits4(uint32_t qh, int first) {
    uint32_t b = (qh >> first) & 0xFu;
    return (int)(((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25));
}

/* Unpack unit u (0-based along the row) of a weight row. */
template <int WT>
__device__ __forceinline__ void unit_unpack(const uint8_t *row, int64_t u, wunit &w) {
    w.m = 0.0f;
    w.sc_lo = 1;
    w.sc_hi = 1;
    if (WT == MI_TYPE_Q4_0 || WT == MI_TYPE_Q4_1) {
        const int off = WT == MI_TYPE_Q4_0 ? 2 : 4;
        const uint8_t *b = row + (size_t)u * wtraits<WT>::bytes;
        w.d = ld_f16(b);
        if (WT == MI_TYPE_Q4_1) w.m = ld_f16(b + 2);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t v = ld_u32_a2(b + off + 4 * i);
            int lo = (int)(v & 0x0F0F0F0Fu), hi = (int)((v >> 4) & 0x0F0F0F0Fu);
            w.q[i] = WT == MI_TYPE_Q4_0 ? (int)__vsub4(lo, 0x08080808) : lo;
            w.q[i + 4] = WT == MI_TYPE_Q4_0 ? (int)__vsub4(hi, 0x08080808) : hi;
        }
    } else if (WT == MI_TYPE_Q5_0 || WT == MI_TYPE_Q5_1) {
        const int off = WT == MI_TYPE_Q5_0 ? 2 : 4;
        const uint8_t *b = row + (size_t)u * wtraits<WT>::bytes;
        w.d = ld_f16(b);
        if (WT == MI_TYPE_Q5_1) w.m = ld_f16(b + 2);
        const uint32_t qh = ld_u32_a2(b + off);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t v = ld_u32_a2(b + off + 4 + 4 * i);
            int lo = (int)(v & 0x0F0F0F0Fu) | qh_bits4(qh, 4 * i);
            int hi = (int)((v >> 4) & 0x0F0F0F0Fu) | qh_bits4(qh, 16 + 4 * i);
            w.q[i] = WT == MI_TYPE_Q5_0 ? (int)__vsub4(lo, 0x10101010) : lo;
            w.q[i + 4] = WT == MI_TYPE_Q5_0 ? (int)__vsub4(hi, 0x10101010) : hi;
        }
    } else if (WT == MI_TYPE_Q8_0) {
        const uint8_t *b = row + (size_t)u * 34;
        w.d = ld_f16(b);
#pragma unroll
        for (int i = 0; i < 8; i++) w.q[i] = (int)ld_u32_a2(b + 2 + 4 * i);
    } else if (WT == MI_TYPE_Q4_K || WT == MI_TYPE_Q5_K) {
        const uint8_t *b = row + (size_t)(u >> 3) * wtraits<WT>::bytes;
        const int j = (int)(u & 7), c = j >> 1, shift = (j & 1) * 4;
        int sc, mn;
        k4_scale_min(b + 4, j, &sc, &mn);
        w.d = ld_f16(b) * (float)sc;
        w.m = ld_f16(b + 2) * (float)mn;
        const uint8_t *qs = b + (WT == MI_TYPE_Q4_K ? 16 : 48) + 32 * c;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int v = (int)((*(const uint32_t *)(qs + 4 * i) >> shift) & 0x0F0F0F0Fu);
            if (WT == MI_TYPE_Q5_K) {
                uint32_t h = *(const uint32_t *)(b + 16 + 4 * i);
                v |= (int)(((h >> j) & 0x01010101u) << 4);
            }
            w.q[i] = v;
        }
    } else if (WT == MI_TYPE_Q6_K) {
        const uint8_t *b = row + (size_t)(u >> 3) * 210;
        const int j = (int)(u & 7), n = j >> 2, r = j & 3;
        const uint8_t *ql = b + 64 * n + (r & 1) * 32;
        const uint8_t *qh = b + 128 + 32 * n;
        const int lshift = (r >> 1) * 4, hshift = 2 * r;
        const int8_t *sc = (const int8_t *)(b + 192) + 8 * n + 2 * r;
        w.d = ld_f16(b + 208);
        w.sc_lo = sc[0];
        w.sc_hi = sc[1];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint32_t lv = (ld_u32_a2(ql + 4 * i) >> lshift) & 0x0F0F0F0Fu;
            uint32_t hv = ((ld_u32_a2(qh + 4 * i) >> hshift) & 0x03030303u) << 4;
            w.q[i] = (int)__vsub4(lv | hv, 0x20202020);
        }
    }
}

/* Activation blocks in device memory (mi7b_quantize_act): 32-element formats as
 * d, s (f16 each), qs[32] (Q8_0 leaves s unused); Q8_K as d (f32), qs[256], bsums[16]. */
#define A8_BYTES 36
#define AK_BYTES 292

/* One weight unit (32 elements) . the matching activation unit, in the CPU reference's
 * order (docs/QUANT.md): exact int32 sums by dp4a, then the float scaling. Shared by the
 * 7b matmul, 7c's fused FFN and 7e's one-token matmul, so all three are one expression;
 * LDG reads the activation bytes through the read-only cache. */
template <int AT, bool LDG = false>
__device__ __forceinline__ float mi7b_unit_dot(const wunit &w, const uint8_t *arow, int64_t u) {
    if (AT == MI_TYPE_Q8_0 || AT == MI_TYPE_Q8_1) {
        const uint8_t *b = arow + (size_t)u * A8_BYTES;
        const int *aq = (const int *)(b + 4);
        int isum = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) isum = __dp4a(w.q[i], LDG ? __ldg(aq + i) : aq[i], isum);
        const float da = ld_f16(b);
        if (AT == MI_TYPE_Q8_0) return (w.d * da) * (float)isum;
        return (w.d * da) * (float)isum + w.m * ld_f16(b + 2);
    } else {
        const uint8_t *b = arow + (size_t)(u >> 3) * AK_BYTES;
        const int j = (int)(u & 7);
        const int *aq = (const int *)(b + 4 + 32 * j);
        const int16_t *bs = (const int16_t *)(b + 4 + 256);
        int lo = 0, hi = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) lo = __dp4a(w.q[i], LDG ? __ldg(aq + i) : aq[i], lo);
#pragma unroll
        for (int i = 4; i < 8; i++) hi = __dp4a(w.q[i], LDG ? __ldg(aq + i) : aq[i], hi);
        const int isum = w.sc_lo * lo + w.sc_hi * hi;
        const float d8 = *(const float *)b;
        const int bsum = (int)bs[2 * j] + (int)bs[2 * j + 1];
        return d8 * (w.d * (float)isum - w.m * (float)bsum);
    }
}

#endif

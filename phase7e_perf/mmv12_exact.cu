/* Phase 7e item e12: streaming one-token (N = 1) matmul for Q4_K / Q6_K and the fused FFN
 * gate/up + SwiGLU. Each warp streams whole rows straight from global memory with 16-byte
 * loads, every load of an iteration issued before the arithmetic that needs it; the Q8_K
 * activation is staged once per block in shared memory (the only barrier, and the first
 * iteration's weight loads are already in flight across it). Built with --fmad=false
 * (_exact): per unit the expression of mi7b_unit_dot, bit for bit (gates/7e/emu_mmv12.py).
 * Item e14 (QIN): the same kernel quantizes the f32 x into that shared row itself, with 7b's
 * Q8_K arithmetic (q8k_quant_warp), instead of reading a row mi7b_quantize_act wrote: one
 * launch fewer per call, bit-identical results. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7e_perf/quant_q8k.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"
#include "phase7e_perf/mmv12.h"
#include "common/core/mi_canon.h"

#define MMV12_THREADS 256
#define MMV12_WARPS (MMV12_THREADS / 32)
#define MMV12_MIN_BLOCKS 4                 /* 32 warps per SM: registers <= 64 */
#define MMV12_SMEM_MAX (46u << 10)         /* activation row; under 48 KB: no opt-in attribute */
#define MMV12_FULL 0xffffffffu

/* ---------------- lane map ----------------
 * A warp works on one row (fused: the gate row and the up row of one index) at a time.
 * Iteration `it` covers super-blocks it*4U .. it*4U+4U-1 of the row in U groups of 4;
 * in group g, lanes 8q..8q+7 (q = lane >> 3) own super-block s = it*4U + 4g + q, and
 * lane t = lane & 7 of that octet loads 16 bytes of its quants (Q4_K qs bytes 16t..16t+15,
 * Q6_K ql bytes 16t.. and the matching qh bytes), computes half of two units' integer dots,
 * swaps halves with lane t^1 and finishes one unit in float. Lanes whose s >= nsb (the
 * row's last iteration) load nothing and add nothing. Each lane adds its unit values in
 * (it, g) order; a row's lanes are then summed by the xor butterfly (warp_sum): the order
 * depends on (type, K, U) only, never on the grid. */

/* Shared activation (one Q8_K row of nsb super-blocks), rearranged from the 292-byte
 * blocks so quants are 16-byte aligned: q int8 [nsb][256] as uint4 [nsb][16] with uint4
 * index v stored at act_perm(v) (the octet's two 16-byte reads hit 8 distinct bank
 * quads), d f32 [nsb], bsums int16 pairs [nsb][8] (word j = bsums 2j, 2j+1). */
template <int WT> __device__ __forceinline__ int act_perm(int v) {
    return v ^ ((v & 8) >> (WT == MI_TYPE_Q4_K ? 2 : 1));
}

/* word i of the 292-byte blocks -> its place in the shared layout */
template <int WT> __device__ __forceinline__ void act_put(uint4 *sq, float *sd, uint32_t *sbs, int i, uint32_t v) {
    const int s = i / (AK_BYTES / 4), o = i - s * (AK_BYTES / 4);
    if (o == 0) sd[s] = __uint_as_float(v);
    else if (o <= 64) ((uint32_t *)sq)[s * 64 + act_perm<WT>((o - 1) >> 2) * 4 + ((o - 1) & 3)] = v;
    else sbs[s * 8 + (o - 65)] = v;
}

/* The whole activation row (nsb * 73 words) into shared memory. Loads are batched (NB
 * 16-byte loads per thread before the first store: 4 for Q4_K, 2 or 1 for Q6_K, whose first
 * weight loads hold more registers across it: no spills at 64 registers) so K = 18944 costs
 * two to five L2 round trips, not twenty, overlapping the first weight loads in flight. A
 * row not 16-byte aligned is read as words (2 NB per thread in flight). Every thread of
 * the block calls it. */
template <int WT, int NB>
__device__ __forceinline__ void stage_act12(const uint8_t *__restrict__ A, int nsb, uint4 *sq, float *sd,
                                            uint32_t *sbs) {
    const int n = nsb * (AK_BYTES / 4), T = blockDim.x, tid = threadIdx.x;
    const uint32_t *g = (const uint32_t *)A;
    if (!((uintptr_t)A & 15u)) {
        const int n4 = n >> 2;
        const uint4 *g4 = (const uint4 *)A;
        for (int c0 = tid; c0 < n4; c0 += NB * T) {
            uint4 v[NB];
#pragma unroll
            for (int j = 0; j < NB; j++)
                if (c0 + j * T < n4) v[j] = __ldg(g4 + c0 + j * T);
#pragma unroll
            for (int j = 0; j < NB; j++) {
                const int c = c0 + j * T;
                if (c < n4) {
                    act_put<WT>(sq, sd, sbs, 4 * c, v[j].x);
                    act_put<WT>(sq, sd, sbs, 4 * c + 1, v[j].y);
                    act_put<WT>(sq, sd, sbs, 4 * c + 2, v[j].z);
                    act_put<WT>(sq, sd, sbs, 4 * c + 3, v[j].w);
                }
            }
        }
        if (tid < n - 4 * n4) act_put<WT>(sq, sd, sbs, 4 * n4 + tid, __ldg(g + 4 * n4 + tid));
        return;
    }
    constexpr int NW = 2 * NB;
    for (int i0 = tid; i0 < n; i0 += NW * T) {
        uint32_t v[NW];
#pragma unroll
        for (int j = 0; j < NW; j++)
            if (i0 + j * T < n) v[j] = __ldg(g + i0 + j * T);
#pragma unroll
        for (int j = 0; j < NW; j++)
            if (i0 + j * T < n) act_put<WT>(sq, sd, sbs, i0 + j * T, v[j]);
    }
}

/* d8 * (w.d * isum - w.m * bsum): mi7b_unit_dot's float expression, same operands */
__device__ __forceinline__ float unit_value12(float d8, float wd, float wm, int isum, uint32_t bsw) {
    const int bsum = (int)(int16_t)(bsw & 0xFFFFu) + (int)(int16_t)(bsw >> 16);
    return d8 * (wd * (float)isum - wm * (float)bsum);
}

__device__ __forceinline__ uint4 ldg16(const uint8_t *p) { return __ldg((const uint4 *)p); }
__device__ __forceinline__ uint32_t ldg_u16(const uint8_t *p) { return (uint32_t)__ldg((const unsigned short *)p); }

/* ---------------- Q4_K: super-block = hdr (d, dmin, 12 scale bytes) + qs[128], 144 B ---- */
struct raw_q4k {
    uint4 h, q;   /* header, qs bytes 16t..16t+15 */
};

__device__ __forceinline__ void load_q4k(raw_q4k &r, const uint8_t *sb, int t) {
    r.h = ldg16(sb);
    r.q = ldg16(sb + 16 + 16 * t);
}

/* Lane t: qs bytes 16t.. are half h = t&1 (dp4a words 4h..4h+3) of the 32-byte chunk
 * c = t>>1 shared by unit 2c (low nibbles) and unit 2c+1 (high nibbles). Lane h = 0
 * finishes unit 2c, lane h = 1 unit 2c+1: the lane finishes unit j = t. */
__device__ __forceinline__ float value_q4k(const raw_q4k &r, const uint4 *sq, const float *sd,
                                           const uint32_t *sbs, int s, int t) {
    const int c = t >> 1, h = t & 1;
    const uint4 *aq = sq + (size_t)s * 16;
    const uint4 a0 = aq[act_perm<MI_TYPE_Q4_K>(4 * c + h)], a1 = aq[act_perm<MI_TYPE_Q4_K>(4 * c + 2 + h)];
    const uint32_t m4 = 0x0F0F0F0Fu;
    int pa = 0, pb = 0;
    pa = __dp4a((int)(r.q.x & m4), (int)a0.x, pa);
    pa = __dp4a((int)(r.q.y & m4), (int)a0.y, pa);
    pa = __dp4a((int)(r.q.z & m4), (int)a0.z, pa);
    pa = __dp4a((int)(r.q.w & m4), (int)a0.w, pa);
    pb = __dp4a((int)((r.q.x >> 4) & m4), (int)a1.x, pb);
    pb = __dp4a((int)((r.q.y >> 4) & m4), (int)a1.y, pb);
    pb = __dp4a((int)((r.q.z >> 4) & m4), (int)a1.z, pb);
    pb = __dp4a((int)((r.q.w >> 4) & m4), (int)a1.w, pb);
    const int recv = __shfl_xor_sync(MMV12_FULL, h ? pa : pb, 1);
    /* unit_unpack gives Q4_K sc_lo = sc_hi = 1: isum = lo + hi, exact in int32 */
    const int isum = h ? recv + pb : pa + recv;
    /* k4_scale_min(hdr + 4, j) on the register copy: bytes 4..7 = h.y, 8..11 = h.z, 12..15 = h.w */
    const int j = t, sh = 8 * (t & 3);
    const uint32_t by = (r.h.y >> sh) & 0xFFu, bz = (r.h.z >> sh) & 0xFFu, bw = (r.h.w >> sh) & 0xFFu;
    int sc, mn;
    if (j < 4) {
        sc = (int)(by & 63u);
        mn = (int)(bz & 63u);
    } else {
        sc = (int)((bw & 0xFu) | ((by >> 6) << 4));
        mn = (int)((bw >> 4) | ((bz >> 6) << 4));
    }
    const float wd = __half2float(__ushort_as_half((unsigned short)(r.h.x & 0xFFFFu))) * (float)sc;
    const float wm = __half2float(__ushort_as_half((unsigned short)(r.h.x >> 16))) * (float)mn;
    return unit_value12(sd[s], wd, wm, isum, sbs[s * 8 + j]);
}

/* ---------------- Q6_K: ql[128], qh[64], sc int8[16], d f16; 210 B, 2-byte aligned ----
 * 16-byte loads of the aligned-down address and the next chunk, realigned in registers
 * (the offset b & 15 is even and the same for the octet). Every chunk read lies inside
 * the super-block's aligned span [b & ~15, b + 208): never past the tensor (the d and
 * scale pairs, which end the super-block, are read as 2-byte loads). */
struct raw_q6k {
    uint4 l0, l1, h0, h1;   /* aligned chunks: ql at 16t, qh at 128 + 32n + 16h, each + next */
    uint32_t scd;           /* int8 scale pair of the lane's unit (bits 0..15), f16 d (16..31) */
    int sh;                 /* b & 15 */
};

/* bytes sh .. sh+15 of the 32 bytes x:y (sh even, 0..14) */
__device__ __forceinline__ uint4 realign16(const uint4 x, const uint4 y, int sh) {
    const int k = sh >> 2;
    const unsigned bits = (unsigned)(sh & 3) * 8u;
    const uint32_t w0 = x.x, w1 = x.y, w2 = x.z, w3 = x.w, w4 = y.x, w5 = y.y, w6 = y.z, w7 = y.w;
    /* shift by k words: first by 2 (bit 1 of k), then by 1 (bit 0) */
    const uint32_t v0 = (k & 2) ? w2 : w0, v1 = (k & 2) ? w3 : w1, v2 = (k & 2) ? w4 : w2, v3 = (k & 2) ? w5 : w3,
                   v4 = (k & 2) ? w6 : w4, v5 = (k & 2) ? w7 : w5;
    const uint32_t u0 = (k & 1) ? v1 : v0, u1 = (k & 1) ? v2 : v1, u2 = (k & 1) ? v3 : v2, u3 = (k & 1) ? v4 : v3,
                   u4 = (k & 1) ? v5 : v4;
    uint4 o;
    o.x = __funnelshift_r(u0, u1, bits);
    o.y = __funnelshift_r(u1, u2, bits);
    o.z = __funnelshift_r(u2, u3, bits);
    o.w = __funnelshift_r(u3, u4, bits);
    return o;
}

/* Lane t: n = t>>2 (128-element half), p = (t>>1)&1, h = t&1. ql bytes 16t.. are half h of
 * the ql chunk 2n+p shared by units j1 = 4n+p (low nibbles, qh bits 2p) and j2 = 4n+p+2
 * (high nibbles, qh bits 2p+4); the qh bytes are 128+32n+16h.. Lane h = 0 finishes j1,
 * h = 1 finishes j2: the lane's unit is j = 4n + p + 2h, its scale pair sc[8n + 2(p+2h)]. */
__device__ __forceinline__ void load_q6k(raw_q6k &r, const uint8_t *sb, int t) {
    const int n = t >> 2, p = (t >> 1) & 1, h = t & 1;
    const int sh = (int)((uintptr_t)sb & 15u);
    const uint8_t *a = sb - sh;
    r.sh = sh;
    r.l0 = ldg16(a + 16 * t);
    r.l1 = ldg16(a + 16 * t + 16);
    r.h0 = ldg16(a + 128 + 32 * n + 16 * h);
    r.h1 = ldg16(a + 128 + 32 * n + 16 * h + 16);
    r.scd = ldg_u16(sb + 192 + 8 * n + 2 * (p + 2 * h)) | (ldg_u16(sb + 208) << 16);
}

__device__ __forceinline__ int q6_level(uint32_t l, uint32_t qh, int hshift) {
    return (int)__vsub4(l | (((qh >> hshift) & 0x03030303u) << 4), 0x20202020u);
}

__device__ __forceinline__ float value_q6k(const raw_q6k &r, const uint4 *sq, const float *sd,
                                           const uint32_t *sbs, int s, int t) {
    const int n = t >> 2, p = (t >> 1) & 1, h = t & 1;
    const uint4 ql = realign16(r.l0, r.l1, r.sh), qh = realign16(r.h0, r.h1, r.sh);
    const uint4 *aq = sq + (size_t)s * 16;
    const uint4 a1 = aq[act_perm<MI_TYPE_Q6_K>(8 * n + 2 * p + h)];
    const uint4 a2 = aq[act_perm<MI_TYPE_Q6_K>(8 * n + 2 * p + 4 + h)];
    const uint32_t m4 = 0x0F0F0F0Fu;
    const int hs1 = 2 * p, hs2 = 2 * p + 4;
    int p1 = 0, p2 = 0;
    p1 = __dp4a(q6_level(ql.x & m4, qh.x, hs1), (int)a1.x, p1);
    p1 = __dp4a(q6_level(ql.y & m4, qh.y, hs1), (int)a1.y, p1);
    p1 = __dp4a(q6_level(ql.z & m4, qh.z, hs1), (int)a1.z, p1);
    p1 = __dp4a(q6_level(ql.w & m4, qh.w, hs1), (int)a1.w, p1);
    p2 = __dp4a(q6_level((ql.x >> 4) & m4, qh.x, hs2), (int)a2.x, p2);
    p2 = __dp4a(q6_level((ql.y >> 4) & m4, qh.y, hs2), (int)a2.y, p2);
    p2 = __dp4a(q6_level((ql.z >> 4) & m4, qh.z, hs2), (int)a2.z, p2);
    p2 = __dp4a(q6_level((ql.w >> 4) & m4, qh.w, hs2), (int)a2.w, p2);
    const int recv = __shfl_xor_sync(MMV12_FULL, h ? p1 : p2, 1);
    const int lo = h ? recv : p1, hi = h ? p2 : recv;
    const int sc_lo = (int)(int8_t)(r.scd & 0xFFu), sc_hi = (int)(int8_t)((r.scd >> 8) & 0xFFu);
    const int isum = sc_lo * lo + sc_hi * hi;
    const float wd = __half2float(__ushort_as_half((unsigned short)(r.scd >> 16)));
    return unit_value12(sd[s], wd, 0.0f, isum, sbs[s * 8 + 4 * n + p + 2 * h]);
}

template <int WT> struct q12;
template <> struct q12<MI_TYPE_Q4_K> {
    typedef raw_q4k raw;
    static const int bytes = 144;
    static __device__ __forceinline__ void load(raw &r, const uint8_t *sb, int t) { load_q4k(r, sb, t); }
    static __device__ __forceinline__ void zero(raw &r) { r.h = r.q = make_uint4(0, 0, 0, 0); }
    static __device__ __forceinline__ float value(const raw &r, const uint4 *sq, const float *sd,
                                                  const uint32_t *sbs, int s, int t) {
        return value_q4k(r, sq, sd, sbs, s, t);
    }
};
template <> struct q12<MI_TYPE_Q6_K> {
    typedef raw_q6k raw;
    static const int bytes = 210;
    static __device__ __forceinline__ void load(raw &r, const uint8_t *sb, int t) { load_q6k(r, sb, t); }
    static __device__ __forceinline__ void zero(raw &r) {
        r.l0 = r.l1 = r.h0 = r.h1 = make_uint4(0, 0, 0, 0);
        r.scd = 0;
        r.sh = 0;
    }
    static __device__ __forceinline__ float value(const raw &r, const uint4 *sq, const float *sd,
                                                  const uint32_t *sbs, int s, int t) {
        return value_q6k(r, sq, sd, sbs, s, t);
    }
};

/* ---------------- kernel ----------------
 * e14: the activation row quantized in the block from the f32 x [K] (K = 256 nsb, 16-byte
 * aligned), straight into stage_act12's shared layout. Warp w takes super-blocks w, w + 8, ...
 * in batches of NB (the batch's 16-byte loads all issued before the first reduction; x is
 * L2-resident after the first block reads it; NB = 2 keeps 64 registers without spills beside
 * the first weight loads of Q4_K in flight); lane l loads elements 8l .. 8l+7 and runs
 * q8k_quant_warp, the function behind 7b's kernel_quant_q8_k, with the same lane map, so d,
 * the levels and the bsums are those bytes bit for bit. Lane l's 8 level bytes are half
 * (l & 1) of uint4 l >> 1 of the super-block (act_perm: each half-warp stores 128 contiguous
 * bytes, conflict-free); even lanes store bsums[l >> 1] (16-bit halves of the sbs words);
 * lane 0 stores d. Warp-uniform loop: every lane reaches the shuffles. */
template <int WT, int NB>
__device__ __forceinline__ void quant_act14(const float *__restrict__ X, int nsb, uint4 *sq, float *sd,
                                            uint32_t *sbs) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int s0 = w; s0 < nsb; s0 += NB * MMV12_WARPS) {
        float v[NB][8];
#pragma unroll
        for (int b = 0; b < NB; b++) {
            const int s = s0 + b * MMV12_WARPS;
            float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
            if (s < nsb) {
                const float4 *p = (const float4 *)(X + (size_t)s * 256 + 8 * lane);
                lo = __ldg(p);
                hi = __ldg(p + 1);
            }
            v[b][0] = lo.x; v[b][1] = lo.y; v[b][2] = lo.z; v[b][3] = lo.w;
            v[b][4] = hi.x; v[b][5] = hi.y; v[b][6] = hi.z; v[b][7] = hi.w;
        }
#pragma unroll
        for (int b = 0; b < NB; b++) {
            const int s = s0 + b * MMV12_WARPS;
            if (s < nsb) {   /* warp-uniform */
                uint32_t q[2];
                int pair;
                const float d = q8k_quant_warp(v[b], q, &pair);
                ((uint2 *)sq)[(size_t)s * 32 + act_perm<WT>(lane >> 1) * 2 + (lane & 1)] = make_uint2(q[0], q[1]);
                if (!(lane & 1)) ((int16_t *)sbs)[(size_t)s * 16 + (lane >> 1)] = (int16_t)pair;
                if (lane == 0) sd[s] = d;
            }
        }
    }
}

/* FUSED = false: y [M] = W @ x (+ bias).  FUSED = true: y [M] = swiglu(Wg @ x, Wu @ x).
 * Warp w of block b takes rows b*8 + w, then + gridDim.x*8, ... (the grid is at most one
 * resident wave, so the activation is staged once per resident block). */
template <int WT, int U, bool FUSED, bool QIN>
__global__ void __launch_bounds__(MMV12_THREADS, MMV12_MIN_BLOCKS)
kernel_mmv12(const uint8_t *__restrict__ W, const uint8_t *__restrict__ W2, int64_t M, int nsb,
             const uint8_t *__restrict__ A, const float *__restrict__ X, const float *__restrict__ bias,
             float *__restrict__ Y) {
    typedef q12<WT> Q;
    constexpr int NS = FUSED ? 2 : 1;
    extern __shared__ uint4 smem12[];
    uint4 *sq = smem12;
    float *sd = (float *)(sq + (size_t)nsb * 16);
    uint32_t *sbs = (uint32_t *)(sd + nsb);
    const int lane = threadIdx.x & 31, q = lane >> 3, t = lane & 7;
    const size_t wrow = (size_t)nsb * Q::bytes;
    const int nit = (nsb + 4 * U - 1) / (4 * U);
    const int64_t stride = (int64_t)gridDim.x * MMV12_WARPS;
    int64_t row = (int64_t)blockIdx.x * MMV12_WARPS + (threadIdx.x >> 5);
    int it = 0;
    typename Q::raw r[NS][U];

#define MMV12_LOAD()                                                                  \
    do {                                                                              \
        _Pragma("unroll") for (int g = 0; g < U; g++) {                               \
            const int s = it * 4 * U + 4 * g + q;                                     \
            _Pragma("unroll") for (int k = 0; k < NS; k++) {                          \
                if (s < nsb) Q::load(r[k][g], (k ? W2 : W) + (size_t)row * wrow + (size_t)s * Q::bytes, t); \
                else Q::zero(r[k][g]);                                                \
            }                                                                         \
        }                                                                             \
    } while (0)

    if (row < M) MMV12_LOAD();   /* in flight while the activation is staged */
    if constexpr (QIN) quant_act14<WT, 2>(X, nsb, sq, sd, sbs);
    else stage_act12<WT, WT == MI_TYPE_Q4_K ? 4 : (FUSED ? 1 : 2)>(A, nsb, sq, sd, sbs);
    __syncthreads();
    float acc[NS];
#pragma unroll
    for (int k = 0; k < NS; k++) acc[k] = 0.0f;
    while (row < M) {   /* warp-uniform */
#pragma unroll
        for (int g = 0; g < U; g++) {
            const int s = it * 4 * U + 4 * g + q;
            const bool on = s < nsb;
#pragma unroll
            for (int k = 0; k < NS; k++) {
                const float v = Q::value(r[k][g], sq, sd, sbs, on ? s : 0, t);   /* all lanes: shuffles */
                if (on) acc[k] += v;
            }
        }
        if (++it == nit) {
            const float s0 = warp_sum(acc[0]);
            const float s1 = FUSED ? warp_sum(acc[NS - 1]) : 0.0f;
            if (lane == 0) {
                if (FUSED) Y[row] = mi_canon_swiglu(s0, s1);
                else Y[row] = bias ? s0 + bias[row] : s0;
            }
#pragma unroll
            for (int k = 0; k < NS; k++) acc[k] = 0.0f;
            it = 0;
            row += stride;
        }
        if (row < M) MMV12_LOAD();
    }
#undef MMV12_LOAD
}

/* ---------------- launchers ---------------- */

extern "C" bool mi7e_mmv12_supported(mi_type wt, int64_t K, int64_t N) {
    return (wt == MI_TYPE_Q4_K || wt == MI_TYPE_Q6_K) && N == 1 && K > 0 && K % 256 == 0 &&
           (size_t)(K / 256) * AK_BYTES <= MMV12_SMEM_MAX;
}

extern "C" size_t mi7e_mmv12_workspace(mi_type wt, int64_t K) { return mi7b_act_row_bytes(wt, K); }

template <int WT, int U, bool FUSED, bool QIN = false>
static mi_status launch12(cudaStream_t st, const uint8_t *w, const uint8_t *w2, const uint8_t *a, const float *bias,
                          float *y, int64_t K, int64_t M, const float *x = NULL) {
    static int occ_smem = -1, occ_blocks = 0;   /* per instantiation: occupancy at the last smem size */
    const int nsb = (int)(K / 256);
    const size_t smem = (size_t)nsb * AK_BYTES;
    if (occ_smem != (int)smem) {
        int b = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel_mmv12<WT, U, FUSED, QIN>, MMV12_THREADS, smem) !=
                cudaSuccess ||
            b < 1)
            b = 1;   /* the launch itself reports a configuration that cannot run */
        (void)cudaGetLastError();
        occ_blocks = b;
        occ_smem = (int)smem;
    }
    int64_t nb = (M + MMV12_WARPS - 1) / MMV12_WARPS;
    const int64_t wave = (int64_t)mi7e_sm_count() * occ_blocks;
    if (nb > wave) nb = wave;
    kernel_mmv12<WT, U, FUSED, QIN><<<(unsigned)nb, MMV12_THREADS, smem, st>>>(w, w2, M, nsb, a, x, bias, y);
    MI_CU_CHECK_LAUNCH(QIN ? "kernel_mmv12<QIN>" : "kernel_mmv12");
    return MI_OK;
}

/* 16-byte loads need a 16-byte aligned Q4_K base (rows are 144*K/256 bytes, a multiple of
 * 16); Q6_K needs 2; the workspace is read as 4-byte words */
static bool aligned12(mi_type wt, const void *w, const void *w2, const void *ws) {
    const uintptr_t m = wt == MI_TYPE_Q4_K ? 15u : 1u;
    return !((uintptr_t)w & m) && !((uintptr_t)w2 & m) && !((uintptr_t)ws & 3u);
}

/* Super-block groups per lane and iteration (U): the default per type keeps 64 registers (32
 * warps per SM) and fills the 7B rows (Q4_K K = 3584: 14 super-blocks, one iteration of 16
 * slots); the alternatives exist for the timing study (mi7e_mmv12_u). U fixes a row's
 * summation order, so results differ in the last bits between U values (each repeatable). */
static constexpr int u_default(mi_type wt, bool fused) {
    return wt == MI_TYPE_Q4_K ? (fused ? 2 : 4) : (fused ? 1 : 2);
}

extern "C" mi_status mi7e_mmv12_u(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                  float *y, int64_t K, int64_t M, void *workspace, int u) {
    if (!mi7e_mmv12_supported(wt, K, 1) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_mmv12: type %s, K = %lld, M = %lld", mi_type_name(wt), (long long)K,
                      (long long)M);
    if (!w || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi7e_mmv12: null pointer");
    if (u == 0) u = u_default(wt, false);
    const bool q4 = wt == MI_TYPE_Q4_K;
    if (q4 ? (u != 2 && u != 4) : (u != 1 && u != 2))
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_mmv12: U = %d not built for %s", u, mi_type_name(wt));
    if (!aligned12(wt, w, w, workspace)) return mi7e_mmv(stream, wt, w, x, bias, y, K, M, 1, workspace);
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, 1, workspace));
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *wb = (const uint8_t *)w, *ab = (const uint8_t *)workspace;
    if (q4)
        return u == 4 ? launch12<MI_TYPE_Q4_K, 4, false>(st, wb, wb, ab, bias, y, K, M)
                      : launch12<MI_TYPE_Q4_K, 2, false>(st, wb, wb, ab, bias, y, K, M);
    return u == 2 ? launch12<MI_TYPE_Q6_K, 2, false>(st, wb, wb, ab, bias, y, K, M)
                  : launch12<MI_TYPE_Q6_K, 1, false>(st, wb, wb, ab, bias, y, K, M);
}

extern "C" mi_status mi7e_ffn12_u(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                                  int64_t K, int64_t F, void *workspace, int u) {
    if (!mi7e_mmv12_supported(wt, K, 1) || F <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_ffn12: type %s, K = %lld, F = %lld", mi_type_name(wt), (long long)K,
                      (long long)F);
    if (!wg || !wu || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi7e_ffn12: null pointer");
    if (u == 0) u = u_default(wt, true);
    const bool q4 = wt == MI_TYPE_Q4_K;
    if (q4 ? (u != 1 && u != 2) : u != 1)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_ffn12: U = %d not built for %s", u, mi_type_name(wt));
    if (!aligned12(wt, wg, wu, workspace)) return mi7e_ffn(stream, wt, wg, wu, x, y, K, F, 1, workspace);
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, 1, workspace));
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *g = (const uint8_t *)wg, *up = (const uint8_t *)wu, *ab = (const uint8_t *)workspace;
    if (q4)
        return u == 2 ? launch12<MI_TYPE_Q4_K, 2, true>(st, g, up, ab, NULL, y, K, F)
                      : launch12<MI_TYPE_Q4_K, 1, true>(st, g, up, ab, NULL, y, K, F);
    return launch12<MI_TYPE_Q6_K, 1, true>(st, g, up, ab, NULL, y, K, F);
}

extern "C" mi_status mi7e_mmv12(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                                int64_t K, int64_t M, void *workspace) {
    return mi7e_mmv12_u(stream, wt, w, x, bias, y, K, M, workspace, 0);
}

extern "C" mi_status mi7e_ffn12(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                                int64_t K, int64_t F, void *workspace) {
    return mi7e_ffn12_u(stream, wt, wg, wu, x, y, K, F, workspace, 0);
}

/* ---------------- e14: the same kernels, x quantized inside (QIN) ----------------
 * Q4_K at the default U (u_default: mmv 4, ffn 2). Same contract and fallbacks as e12 (an
 * unaligned weight base or workspace goes to e2 / e5, which quantize into the workspace); an x
 * not 16-byte aligned, and Q6_K, take e12's own path (quantize, then the kernel): the same
 * bits. Q6_K is not built with QIN: its raw registers leave too few for x beside them (the
 * QIN instantiations spilled 8-20 bytes at 64 registers), and the switch gives e12 Q4_K only. */
static_assert(u_default(MI_TYPE_Q4_K, false) == 4 && u_default(MI_TYPE_Q4_K, true) == 2,
              "e14 is built at e12's default U (its results must equal mi7e_mmv12 / mi7e_ffn12)");

extern "C" mi_status mi7e_mmv14(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                                int64_t K, int64_t M, void *workspace) {
    if (!mi7e_mmv12_supported(wt, K, 1) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_mmv14: type %s, K = %lld, M = %lld", mi_type_name(wt), (long long)K,
                      (long long)M);
    if (!w || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi7e_mmv14: null pointer");
    if (!aligned12(wt, w, w, workspace)) return mi7e_mmv(stream, wt, w, x, bias, y, K, M, 1, workspace);
    if (wt != MI_TYPE_Q4_K || ((uintptr_t)x & 15u)) return mi7e_mmv12_u(stream, wt, w, x, bias, y, K, M, workspace, 0);
    const uint8_t *wb = (const uint8_t *)w;
    return launch12<MI_TYPE_Q4_K, 4, false, true>((cudaStream_t)stream, wb, wb, NULL, bias, y, K, M, x);
}

extern "C" mi_status mi7e_ffn14(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                                int64_t K, int64_t F, void *workspace) {
    if (!mi7e_mmv12_supported(wt, K, 1) || F <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_ffn14: type %s, K = %lld, F = %lld", mi_type_name(wt), (long long)K,
                      (long long)F);
    if (!wg || !wu || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi7e_ffn14: null pointer");
    if (!aligned12(wt, wg, wu, workspace)) return mi7e_ffn(stream, wt, wg, wu, x, y, K, F, 1, workspace);
    if (wt != MI_TYPE_Q4_K || ((uintptr_t)x & 15u)) return mi7e_ffn12_u(stream, wt, wg, wu, x, y, K, F, workspace, 0);
    const uint8_t *g = (const uint8_t *)wg, *up = (const uint8_t *)wu;
    return launch12<MI_TYPE_Q4_K, 2, true, true>((cudaStream_t)stream, g, up, NULL, NULL, y, K, F, x);
}

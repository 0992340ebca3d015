/* The streaming one-token Q4_K matmul kernel and its launcher, shared by 7e's launchers
 * (matvec_q4k_exact.cu) and the fused decode forms of higher phases (norm folded into the
 * activation quantization, residual add in the epilogue), so one kernel serves both.
 * Include only from files built with --fmad=false (*_exact.cu): the per-unit arithmetic is
 * mi7b_unit_dot's expression without contraction, and the norm is MI_OP_RMS_NORM's. */
#ifndef MI_MATVEC_Q4K_KERNEL_CUH
#define MI_MATVEC_Q4K_KERNEL_CUH
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/quant_act.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"
#include "common/core/mi_canon.h"
#include "phase7e_perf/rms_row_scale.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"

#define Q4K_THREADS 256
#define Q4K_WARPS (Q4K_THREADS / 32)
#define Q4K_MIN_BLOCKS 4                 /* 32 warps per SM: registers <= 64 */
/* A launch may instead take one block of Q4K_WIDE threads an SM (a higher phase's choice for
 * long rows): the same 32 warps an SM, but the activation row staged once an SM, not four times.
 * A row's arithmetic and order do not depend on the block size. */
#define Q4K_WIDE 1024
#define Q4K_MIN_BLOCKS_OF(th) ((th) == Q4K_WIDE ? 1 : Q4K_MIN_BLOCKS)
#define Q4K_SMEM_MAX (46u << 10)         /* activation row; under 48 KB: no opt-in attribute */
#define Q4K_FULL 0xffffffffu

/* ---------------- lane map ----------------
 * A warp works on one row (fused: the gate row and the up row of one index) at a time.
 * Iteration `it` covers super-blocks it*4U .. it*4U+4U-1 of the row in U groups of 4;
 * in group g, lanes 8q..8q+7 (q = lane >> 3) own super-block s = it*4U + 4g + q, and
 * lane t = lane & 7 of that octet loads 16 bytes of its quants (qs bytes 16t..16t+15),
 * computes half of two units' integer dots, swaps halves with lane t^1 and finishes one
 * unit in float. Lanes whose s >= nsb (the row's last iteration) load nothing and add
 * nothing. Each lane adds its unit values in (it, g) order; a row's lanes are then summed
 * by the xor butterfly (warp_sum): the order depends on (K, U) only, never on the grid.
 * U (super-block groups per lane and iteration) is 4 unfused, 2 fused: 64 registers (32
 * warps per SM), and one iteration of 16 slots covers a 7B row (K = 3584: 14 super-blocks). */

/* Shared activation (one Q8_K row of nsb super-blocks), rearranged from the 292-byte
 * blocks so quants are 16-byte aligned: q int8 [nsb][256] as uint4 [nsb][16] with uint4
 * index v stored at act_perm(v) (the octet's two 16-byte reads hit 8 distinct bank
 * quads), d f32 [nsb], bsums int16 pairs [nsb][8] (word j = bsums 2j, 2j+1). */
__device__ __forceinline__ int act_perm(int v) { return v ^ ((v & 8) >> 2); }

/* word i of the 292-byte blocks -> its place in the shared layout */
__device__ __forceinline__ void act_put(uint4 *sq, float *sd, uint32_t *sbs, int i, uint32_t v) {
    const int s = i / (AK_BYTES / 4), o = i - s * (AK_BYTES / 4);
    if (o == 0) sd[s] = __uint_as_float(v);
    else if (o <= 64) ((uint32_t *)sq)[s * 64 + act_perm((o - 1) >> 2) * 4 + ((o - 1) & 3)] = v;
    else sbs[s * 8 + (o - 65)] = v;
}

/* n words of an activation row into shared memory through put(i, word): loads are batched (NB
 * 16-byte loads per thread before the first store) so K = 18944 costs two L2 round trips, not
 * twenty, overlapping the first weight loads in flight. A row not 16-byte aligned is read as words
 * (2 NB per thread in flight). Every thread of the block calls it. */
template <int NB, typename Put>
__device__ __forceinline__ void stage_words(const uint8_t *__restrict__ A, int n, Put put) {
    const int T = blockDim.x, tid = threadIdx.x;
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
                    put(4 * c, v[j].x);
                    put(4 * c + 1, v[j].y);
                    put(4 * c + 2, v[j].z);
                    put(4 * c + 3, v[j].w);
                }
            }
        }
        if (tid < n - 4 * n4) put(4 * n4 + tid, __ldg(g + 4 * n4 + tid));
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
            if (i0 + j * T < n) put(i0 + j * T, v[j]);
    }
}

/* The whole Q8_K activation row (nsb * 73 words) into stage_act's shared layout (act_put). */
template <int NB>
__device__ __forceinline__ void stage_act(const uint8_t *__restrict__ A, int nsb, uint4 *sq, float *sd,
                                          uint32_t *sbs) {
    stage_words<NB>(A, nsb * (AK_BYTES / 4), [=](int i, uint32_t v) { act_put(sq, sd, sbs, i, v); });
}

/* d8 * (w.d * isum - w.m * bsum): mi7b_unit_dot's float expression, same operands */
__device__ __forceinline__ float unit_value(float d8, float wd, float wm, int isum, uint32_t bsw) {
    const int bsum = (int)(int16_t)(bsw & 0xFFFFu) + (int)(int16_t)(bsw >> 16);
    return d8 * (wd * (float)isum - wm * (float)bsum);
}

__device__ __forceinline__ uint4 ldg16(const uint8_t *p) { return __ldg((const uint4 *)p); }

/* ---------------- super-block = hdr (d, dmin, 12 scale bytes) + qs[128], 144 B ---------------- */
struct raw_q4k {
    uint4 h, q;   /* header, qs bytes 16t..16t+15 */
};

__device__ __forceinline__ void load_q4k(raw_q4k &r, const uint8_t *sb, int t) {
    r.h = ldg16(sb);
    r.q = ldg16(sb + 16 + 16 * t);
}
__device__ __forceinline__ void zero_q4k(raw_q4k &r) { r.h = r.q = make_uint4(0, 0, 0, 0); }

/* Lane t: qs bytes 16t.. are half h = t&1 (dp4a words 4h..4h+3) of the 32-byte chunk
 * c = t>>1 shared by unit 2c (low nibbles) and unit 2c+1 (high nibbles). Lane h = 0
 * finishes unit 2c, lane h = 1 unit 2c+1: the lane finishes unit j = t. */
__device__ __forceinline__ float value_q4k(const raw_q4k &r, const uint4 *sq, const float *sd,
                                           const uint32_t *sbs, int s, int t) {
    const int c = t >> 1, h = t & 1;
    const uint4 *aq = sq + (size_t)s * 16;
    const uint4 a0 = aq[act_perm(4 * c + h)], a1 = aq[act_perm(4 * c + 2 + h)];
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
    const int recv = __shfl_xor_sync(Q4K_FULL, h ? pa : pb, 1);
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
    return unit_value(sd[s], wd, wm, isum, sbs[s * 8 + j]);
}

/* ---------------- kernel ----------------
 * QX: the activation row quantized in the block from the f32 x [K] (K = 256 nsb, 16-byte
 * aligned), straight into stage_act's shared layout. Warp w of W takes super-blocks w, w + W,
 * ... in batches of NB (the batch's 16-byte loads all issued before the first reduction; x is
 * L2-resident after the first block reads it; NB = 2 keeps 64 registers without spills beside
 * the first weight loads in flight); lane l loads elements 8l .. 8l+7 and runs quant_q8_k_warp,
 * the function behind 7b's kernel_quant_q8_k, with the same lane map, so d, the levels and the
 * bsums are those bytes bit for bit. Lane l's 8 level bytes (level words 2l, 2l+1 of the
 * super-block) go where put(s, l, word 2l, word 2l+1) puts them (the kernel's layout); even
 * lanes store bsums[l >> 1] (16-bit halves of the sbs words); lane 0 stores d. Warp-uniform
 * loop: every lane reaches the shuffles. NORM: x is read from sx, the shared copy that
 * norm_scale_block made (no second trip to L2); nw from global memory. */
template <int NB, bool NORM, int W, class PutLevels>
__device__ __forceinline__ void quant_act_rows(const float *__restrict__ X, const float *sx, int nsb, float *sd,
                                               uint32_t *sbs, const float *__restrict__ nw, float scale,
                                               PutLevels put) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int s0 = w; s0 < nsb; s0 += NB * W) {
        float v[NB][8];
#pragma unroll
        for (int b = 0; b < NB; b++) {
            const int s = s0 + b * W;
            float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
            if (s < nsb) {
                if constexpr (NORM) {   /* the block's shared copy (norm_scale_block): generic loads */
                    const float4 *p = (const float4 *)(sx + (size_t)s * 256 + 8 * lane);
                    lo = p[0];
                    hi = p[1];
                } else {
                    const float4 *p = (const float4 *)(X + (size_t)s * 256 + 8 * lane);
                    lo = __ldg(p);
                    hi = __ldg(p + 1);
                }
            }
            v[b][0] = lo.x; v[b][1] = lo.y; v[b][2] = lo.z; v[b][3] = lo.w;
            v[b][4] = hi.x; v[b][5] = hi.y; v[b][6] = hi.z; v[b][7] = hi.w;
            if (NORM && s < nsb) {   /* rms_norm's y = (x * scale) * w, element by element */
                const float4 *pw = (const float4 *)(nw + (size_t)s * 256 + 8 * lane);
                const float4 wlo = __ldg(pw), whi = __ldg(pw + 1);
                const float w8[8] = {wlo.x, wlo.y, wlo.z, wlo.w, whi.x, whi.y, whi.z, whi.w};
#pragma unroll
                for (int e = 0; e < 8; e++) v[b][e] = (v[b][e] * scale) * w8[e];
            }
        }
#pragma unroll
        for (int b = 0; b < NB; b++) {
            const int s = s0 + b * W;
            if (s < nsb) {   /* warp-uniform */
                uint32_t q[2];
                int pair;
                const float d = quant_q8_k_warp(v[b], q, &pair);
                put(s, lane, q[0], q[1]);
                if (!(lane & 1)) ((int16_t *)sbs)[(size_t)s * 16 + (lane >> 1)] = (int16_t)pair;
                if (lane == 0) sd[s] = d;
            }
        }
    }
}

/* into stage_act's layout of the levels (act_perm: each half-warp stores 128 contiguous bytes) */
template <int NB, bool NORM, int W = Q4K_WARPS>
__device__ __forceinline__ void quant_act_shared(const float *__restrict__ X, const float *sx, int nsb, uint4 *sq,
                                                 float *sd, uint32_t *sbs, const float *__restrict__ nw, float scale) {
    quant_act_rows<NB, NORM, W>(X, sx, nsb, sd, sbs, nw, scale, [=](int s, int lane, uint32_t q0, uint32_t q1) {
        ((uint2 *)sq)[(size_t)s * 32 + act_perm(lane >> 1) * 2 + (lane & 1)] = make_uint2(q0, q1);
    });
}

/* The scale of RMS norm over x [K] in the canonical order (docs/NUMERICS.md): the block copies
 * x into shared memory sx (every load in flight at once, one barrier); warp 0 alone sums it
 * (rms_row_scale_warp0, the wide norm's function) and leaves the scale in shared memory for the
 * others (a second barrier). When every warp summed x itself, a block's warps issued the same
 * chain of K / 32 dependent adds eight times over (32 times an SM) and the prologue was
 * issue-bound. Bit-identical to the RMS norm kernels (this file is built with --fmad=false, as
 * they are). */
__device__ __forceinline__ float norm_scale_block(const float *__restrict__ X, int64_t K, float eps, float *sx) {
    __shared__ float s_scale;
    const float4 *x4 = (const float4 *)X;   /* K % 256 == 0, X 16-byte aligned */
    for (int64_t i = threadIdx.x; i < K / 4; i += blockDim.x) ((float4 *)sx)[i] = __ldg(x4 + i);
    __syncthreads();
    if (threadIdx.x < 32) rms_row_scale_warp0(sx, K, eps, threadIdx.x, &s_scale);
    __syncthreads();
    return s_scale;
}

/* NORM's copy of x: after the bsums, rounded up to 16 bytes (its float4 stores) */
__device__ __forceinline__ float *q4k_norm_row(uint32_t *sbs, int nsb) {
    return (float *)(((uintptr_t)(sbs + (size_t)nsb * 8) + 15) & ~(uintptr_t)15);
}

/* Where a launch's rows live. One weight (and the FFN's up weight W2), one bias, one output: */
struct q4k_rows_one {
    const uint8_t *W, *W2;
    const float *bias;
    float *Y;
    __device__ __forceinline__ const uint8_t *w(int k, int64_t row, size_t wrow) const {
        return (k ? W2 : W) + (size_t)row * wrow;
    }
    __device__ __forceinline__ float add_bias(int64_t row, float s) const { return bias ? s + bias[row] : s; }
    __device__ __forceinline__ float *y(int64_t row) const { return Y + row; }
};

/* FUSED = false: y [M] = W @ x (+ bias).  FUSED = true: y [M] = swiglu(Wg @ x, Wu @ x).
 * QX = false: A is x quantized by mi7b_quantize_act; QX = true: X is x in f32 (quantized here).
 * NORM (QX only): x is first RMS-normalized with weight nw and eps, as MI_OP_RMS_NORM would.
 * RES: y [M] = R [M] + the above (a residual add in the epilogue).
 * PDL: the kernel may be launched as a programmatic dependent (phase7a_skeleton/cuda_pdl.cuh):
 * it lets the next kernel launch at once, issues its first weight loads, and waits for the
 * kernel before it only then, before it reads x, the norm weight's partner or r.
 * Rows: where row m's weights, bias and output are (q4k_rows_one; a higher phase may give the
 * rows of several weights of one x). Warp w of block b takes rows b*W + w (W warps a block),
 * then + gridDim.x*W, ... (the grid is at most one resident wave, so the activation is staged
 * once per resident block). SPREAD: rows w*gridDim.x + b, then the same stride: consecutive
 * rows on consecutive blocks, so a grid of more warps than rows (wave_blocks' spread) leaves
 * no SM without rows. The row set and each row's arithmetic do not change. The body of the
 * kernels below. */
template <bool FUSED, bool QX, bool NORM, bool RES, bool PDL, class Rows, int TH = Q4K_THREADS, bool SPREAD = false>
__device__ __forceinline__ void matvec_q4k_rows(const Rows &rows, int64_t M, int nsb, const uint8_t *__restrict__ A,
                                                const float *__restrict__ X, const float *__restrict__ nw, float eps,
                                                const float *__restrict__ R) {
    static_assert(QX || !NORM, "the norm is applied while quantizing x in the kernel");
    constexpr int U = FUSED ? 2 : 4;   /* the lane map's U */
    constexpr int NS = FUSED ? 2 : 1;
    constexpr int SB = 144;            /* bytes per super-block */
    extern __shared__ uint4 smem_q4k[];
    uint4 *sq = smem_q4k;
    float *sd = (float *)(sq + (size_t)nsb * 16);
    uint32_t *sbs = (uint32_t *)(sd + nsb);
    const int lane = threadIdx.x & 31, q = lane >> 3, t = lane & 7;
    const size_t wrow = (size_t)nsb * SB;
    const int nit = (nsb + 4 * U - 1) / (4 * U);
    constexpr int WARPS = TH / 32;
    const int64_t stride = (int64_t)gridDim.x * WARPS;
    int64_t row = SPREAD ? (int64_t)(threadIdx.x >> 5) * gridDim.x + blockIdx.x
                         : (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
    int it = 0;
    raw_q4k r[NS][U];

#define Q4K_LOAD()                                                                    \
    do {                                                                              \
        _Pragma("unroll") for (int g = 0; g < U; g++) {                               \
            const int s = it * 4 * U + 4 * g + q;                                     \
            _Pragma("unroll") for (int k = 0; k < NS; k++) {                          \
                if (s < nsb) load_q4k(r[k][g], rows.w(k, row, wrow) + (size_t)s * SB, t); \
                else zero_q4k(r[k][g]);                                               \
            }                                                                         \
        }                                                                             \
    } while (0)

    if constexpr (PDL) pdl_trigger_early();
    if (row < M) Q4K_LOAD();   /* in flight while the activation is staged */
    if constexpr (NORM) {   /* the norm weight into L1 while x is awaited: quant_act_shared reads it */
        for (int i = threadIdx.x * 32; i < nsb * 256; i += TH * 32)
            asm volatile("prefetch.global.L1 [%0];" ::"l"(nw + i));
    }
    if constexpr (PDL) pdl_wait_trigger();
    float scale = 1.0f;
    float *sx = NORM ? q4k_norm_row(sbs, nsb) : NULL;
    if constexpr (NORM) scale = norm_scale_block(X, (int64_t)nsb * 256, eps, sx);
    if constexpr (QX) quant_act_shared<2, NORM, WARPS>(X, sx, nsb, sq, sd, sbs, nw, scale);
    else stage_act<4>(A, nsb, sq, sd, sbs);
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
                const float v = value_q4k(r[k][g], sq, sd, sbs, on ? s : 0, t);   /* all lanes: shuffles */
                if (on) acc[k] += v;
            }
        }
        if (++it == nit) {
            const float s0 = warp_sum(acc[0]);
            const float s1 = FUSED ? warp_sum(acc[NS - 1]) : 0.0f;
            if (lane == 0) {
                const float y = FUSED ? mi_canon_swiglu(s0, s1) : rows.add_bias(row, s0);
                *rows.y(row) = RES ? R[row] + y : y;
            }
#pragma unroll
            for (int k = 0; k < NS; k++) acc[k] = 0.0f;
            it = 0;
            row += stride;
        }
        if (row < M) Q4K_LOAD();
    }
#undef Q4K_LOAD
}

template <bool FUSED, bool QX, bool NORM = false, bool RES = false, bool PDL = false, int TH = Q4K_THREADS,
          bool SPREAD = false>
__global__ void __launch_bounds__(TH, Q4K_MIN_BLOCKS_OF(TH))
kernel_matvec_q4k(const uint8_t *__restrict__ W, const uint8_t *__restrict__ W2, int64_t M, int nsb,
                  const uint8_t *__restrict__ A, const float *__restrict__ X, const float *__restrict__ bias,
                  float *__restrict__ Y, const float *__restrict__ nw, float eps, const float *__restrict__ R) {
    const q4k_rows_one rows = {W, W2, bias, Y};
    matvec_q4k_rows<FUSED, QX, NORM, RES, PDL, q4k_rows_one, TH, SPREAD>(rows, M, nsb, A, X, nw, eps, R);
}

/* shared memory of a launch: the Q8_K row, and x for the norm's sum (NORM) */
static inline size_t q4k_smem(int64_t K, bool norm) {
    return (size_t)(K / 256) * AK_BYTES + (norm ? (size_t)K * sizeof(float) + 16 : 0);
}

/* The grid of a warp-per-row launch over M rows that stays within one resident wave: the rows'
 * blocks, at most the SMs times the blocks an SM holds at smem bytes (asked once per smem size;
 * the cache belongs to one kernel instantiation). spread (the SPREAD row map): a block for each
 * row up to the wave, so rows fewer than the wave's warps still reach every SM. */
struct wave_cache {
    int smem = -1, blocks = 0;
};
template <typename Kernel>
static inline int64_t wave_blocks(wave_cache &c, Kernel kernel, int threads, size_t smem, int64_t M,
                                  bool spread = false) {
    if (c.smem != (int)smem) {
        int b = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, threads, smem) != cudaSuccess || b < 1)
            b = 1;   /* the launch itself reports a configuration that cannot run */
        (void)cudaGetLastError();
        c.blocks = b;
        c.smem = (int)smem;
    }
    const int warps = threads / 32;
    const int64_t nb = spread ? M : (M + warps - 1) / warps, wave = (int64_t)mi7e_sm_count() * c.blocks;
    return nb < wave ? nb : wave;
}

/* a = x quantized into the workspace (QX = false) or x = the f32 activation (QX = true) */
/* PDL: launched with the programmatic attribute when pdl (the kernel built to take it) */
template <bool FUSED, bool QX, bool NORM = false, bool RES = false, bool PDL = false, int TH = Q4K_THREADS,
          bool SPREAD = false>
static mi_status launch_q4k(cudaStream_t st, const uint8_t *w, const uint8_t *w2, const uint8_t *a, const float *x,
                            const float *bias, float *y, int64_t K, int64_t M, const float *nw = NULL,
                            float eps = 0.0f, const float *r = NULL, bool pdl = false) {
    static wave_cache occ;   /* per instantiation */
    const int nsb = (int)(K / 256);
    const size_t smem = q4k_smem(K, NORM);
    const int64_t nb = wave_blocks(occ, kernel_matvec_q4k<FUSED, QX, NORM, RES, PDL, TH, SPREAD>, TH, smem, M, SPREAD);
    if constexpr (PDL) {
        MI_CU_CHECK(pdl_launch(pdl, kernel_matvec_q4k<FUSED, QX, NORM, RES, PDL, TH, SPREAD>, dim3((unsigned)nb), dim3(TH),
                               smem, st, w, w2, M, nsb, a, x, bias, y, nw, eps, r));
    } else {
        kernel_matvec_q4k<FUSED, QX, NORM, RES, false, TH, SPREAD><<<(unsigned)nb, TH, smem, st>>>(w, w2, M, nsb, a, x,
                                                                                                    bias, y, nw, eps, r);
    }
    MI_CU_CHECK_LAUNCH(QX ? "kernel_matvec_q4k<QX>" : "kernel_matvec_q4k");
    return MI_OK;
}

#endif

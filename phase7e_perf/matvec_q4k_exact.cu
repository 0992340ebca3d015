/* Streaming one-token (N = 1) matmul for Q4_K weights and the fused FFN gate/up + SwiGLU.
 * Each warp streams whole rows straight from global memory with 16-byte loads, every load of
 * an iteration issued before the arithmetic that needs it; the Q8_K activation is staged once
 * per block in shared memory (the only barrier, and the first iteration's weight loads are
 * already in flight across it). Built with --fmad=false (_exact): per unit the expression of
 * mi7b_unit_dot, bit for bit (gates/7e/emu_matvec_q4k.py). The QX form quantizes the f32 x
 * into that shared row itself, with 7b's Q8_K arithmetic (quant_q8_k_warp of quant_act.cuh),
 * instead of reading a row mi7b_quantize_act wrote: one launch fewer per call, bit-identical
 * results. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/quant_act.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"
#include "phase7e_perf/matvec_q4k.h"
#include "common/core/mi_canon.h"

#define Q4K_THREADS 256
#define Q4K_WARPS (Q4K_THREADS / 32)
#define Q4K_MIN_BLOCKS 4                 /* 32 warps per SM: registers <= 64 */
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

/* The whole activation row (nsb * 73 words) into shared memory. Loads are batched (NB
 * 16-byte loads per thread before the first store) so K = 18944 costs two L2 round trips,
 * not twenty, overlapping the first weight loads in flight. A row not 16-byte aligned is
 * read as words (2 NB per thread in flight). Every thread of the block calls it. */
template <int NB>
__device__ __forceinline__ void stage_act(const uint8_t *__restrict__ A, int nsb, uint4 *sq, float *sd,
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
                    act_put(sq, sd, sbs, 4 * c, v[j].x);
                    act_put(sq, sd, sbs, 4 * c + 1, v[j].y);
                    act_put(sq, sd, sbs, 4 * c + 2, v[j].z);
                    act_put(sq, sd, sbs, 4 * c + 3, v[j].w);
                }
            }
        }
        if (tid < n - 4 * n4) act_put(sq, sd, sbs, 4 * n4 + tid, __ldg(g + 4 * n4 + tid));
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
            if (i0 + j * T < n) act_put(sq, sd, sbs, i0 + j * T, v[j]);
    }
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
 * aligned), straight into stage_act's shared layout. Warp w takes super-blocks w, w + 8, ...
 * in batches of NB (the batch's 16-byte loads all issued before the first reduction; x is
 * L2-resident after the first block reads it; NB = 2 keeps 64 registers without spills beside
 * the first weight loads in flight); lane l loads elements 8l .. 8l+7 and runs quant_q8_k_warp,
 * the function behind 7b's kernel_quant_q8_k, with the same lane map, so d, the levels and the
 * bsums are those bytes bit for bit. Lane l's 8 level bytes are half (l & 1) of uint4 l >> 1 of
 * the super-block (act_perm: each half-warp stores 128 contiguous bytes, conflict-free); even
 * lanes store bsums[l >> 1] (16-bit halves of the sbs words); lane 0 stores d. Warp-uniform
 * loop: every lane reaches the shuffles. */
template <int NB>
__device__ __forceinline__ void quant_act_shared(const float *__restrict__ X, int nsb, uint4 *sq, float *sd,
                                                 uint32_t *sbs) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int s0 = w; s0 < nsb; s0 += NB * Q4K_WARPS) {
        float v[NB][8];
#pragma unroll
        for (int b = 0; b < NB; b++) {
            const int s = s0 + b * Q4K_WARPS;
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
            const int s = s0 + b * Q4K_WARPS;
            if (s < nsb) {   /* warp-uniform */
                uint32_t q[2];
                int pair;
                const float d = quant_q8_k_warp(v[b], q, &pair);
                ((uint2 *)sq)[(size_t)s * 32 + act_perm(lane >> 1) * 2 + (lane & 1)] = make_uint2(q[0], q[1]);
                if (!(lane & 1)) ((int16_t *)sbs)[(size_t)s * 16 + (lane >> 1)] = (int16_t)pair;
                if (lane == 0) sd[s] = d;
            }
        }
    }
}

/* FUSED = false: y [M] = W @ x (+ bias).  FUSED = true: y [M] = swiglu(Wg @ x, Wu @ x).
 * QX = false: A is x quantized by mi7b_quantize_act; QX = true: X is x in f32 (quantized here).
 * Warp w of block b takes rows b*8 + w, then + gridDim.x*8, ... (the grid is at most one
 * resident wave, so the activation is staged once per resident block). */
template <bool FUSED, bool QX>
__global__ void __launch_bounds__(Q4K_THREADS, Q4K_MIN_BLOCKS)
kernel_matvec_q4k(const uint8_t *__restrict__ W, const uint8_t *__restrict__ W2, int64_t M, int nsb,
                  const uint8_t *__restrict__ A, const float *__restrict__ X, const float *__restrict__ bias,
                  float *__restrict__ Y) {
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
    const int64_t stride = (int64_t)gridDim.x * Q4K_WARPS;
    int64_t row = (int64_t)blockIdx.x * Q4K_WARPS + (threadIdx.x >> 5);
    int it = 0;
    raw_q4k r[NS][U];

#define Q4K_LOAD()                                                                    \
    do {                                                                              \
        _Pragma("unroll") for (int g = 0; g < U; g++) {                               \
            const int s = it * 4 * U + 4 * g + q;                                     \
            _Pragma("unroll") for (int k = 0; k < NS; k++) {                          \
                if (s < nsb) load_q4k(r[k][g], (k ? W2 : W) + (size_t)row * wrow + (size_t)s * SB, t); \
                else zero_q4k(r[k][g]);                                               \
            }                                                                         \
        }                                                                             \
    } while (0)

    if (row < M) Q4K_LOAD();   /* in flight while the activation is staged */
    if constexpr (QX) quant_act_shared<2>(X, nsb, sq, sd, sbs);
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
                if (FUSED) Y[row] = mi_canon_swiglu(s0, s1);
                else Y[row] = bias ? s0 + bias[row] : s0;
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

/* ---------------- launchers ---------------- */

extern "C" bool mi7e_matvec_q4k_supported(mi_type wt, int64_t K, int64_t N) {
    return wt == MI_TYPE_Q4_K && N == 1 && K > 0 && K % 256 == 0 && (size_t)(K / 256) * AK_BYTES <= Q4K_SMEM_MAX;
}

extern "C" size_t mi7e_matvec_q4k_workspace(mi_type wt, int64_t K) { return mi7b_act_row_bytes(wt, K); }

/* a = x quantized into the workspace (QX = false) or x = the f32 activation (QX = true) */
template <bool FUSED, bool QX>
static mi_status launch_q4k(cudaStream_t st, const uint8_t *w, const uint8_t *w2, const uint8_t *a, const float *x,
                            const float *bias, float *y, int64_t K, int64_t M) {
    static int occ_smem = -1, occ_blocks = 0;   /* per instantiation: occupancy at the last smem size */
    const int nsb = (int)(K / 256);
    const size_t smem = (size_t)nsb * AK_BYTES;
    if (occ_smem != (int)smem) {
        int b = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel_matvec_q4k<FUSED, QX>, Q4K_THREADS, smem) !=
                cudaSuccess ||
            b < 1)
            b = 1;   /* the launch itself reports a configuration that cannot run */
        (void)cudaGetLastError();
        occ_blocks = b;
        occ_smem = (int)smem;
    }
    int64_t nb = (M + Q4K_WARPS - 1) / Q4K_WARPS;
    const int64_t wave = (int64_t)mi7e_sm_count() * occ_blocks;
    if (nb > wave) nb = wave;
    kernel_matvec_q4k<FUSED, QX><<<(unsigned)nb, Q4K_THREADS, smem, st>>>(w, w2, M, nsb, a, x, bias, y);
    MI_CU_CHECK_LAUNCH(QX ? "kernel_matvec_q4k<QX>" : "kernel_matvec_q4k");
    return MI_OK;
}

/* 16-byte loads need a 16-byte aligned base (rows are 144*K/256 bytes, a multiple of 16); the
 * workspace is read as 4-byte words */
static bool q4k_aligned(const void *w, const void *w2, const void *ws) {
    return !((uintptr_t)w & 15u) && !((uintptr_t)w2 & 15u) && !((uintptr_t)ws & 3u);
}

extern "C" mi_status mi7e_matvec_q4k(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                     float *y, int64_t K, int64_t M, void *workspace) {
    if (!mi7e_matvec_q4k_supported(wt, K, 1) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_matvec_q4k: type %s, K = %lld, M = %lld", mi_type_name(wt),
                      (long long)K, (long long)M);
    if (!w || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi7e_matvec_q4k: null pointer");
    if (!q4k_aligned(w, w, workspace)) return mi7e_matvec_staged(stream, wt, w, x, bias, y, K, M, 1, workspace);
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, 1, workspace));
    const uint8_t *wb = (const uint8_t *)w;
    return launch_q4k<false, false>((cudaStream_t)stream, wb, wb, (const uint8_t *)workspace, NULL, bias, y, K, M);
}

extern "C" mi_status mi7e_ffn_q4k(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                                  int64_t K, int64_t F, void *workspace) {
    if (!mi7e_matvec_q4k_supported(wt, K, 1) || F <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_ffn_q4k: type %s, K = %lld, F = %lld", mi_type_name(wt), (long long)K,
                      (long long)F);
    if (!wg || !wu || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi7e_ffn_q4k: null pointer");
    if (!q4k_aligned(wg, wu, workspace)) return mi7e_ffn_staged(stream, wt, wg, wu, x, y, K, F, 1, workspace);
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, 1, workspace));
    return launch_q4k<true, false>((cudaStream_t)stream, (const uint8_t *)wg, (const uint8_t *)wu,
                                   (const uint8_t *)workspace, NULL, NULL, y, K, F);
}

/* ---------------- the same kernels, x quantized inside (QX) ----------------
 * Same contract and fallbacks: an unaligned weight base or workspace goes to the staged kernel
 * (which quantizes into the workspace); an x not 16-byte aligned takes the path above
 * (quantize, then the kernel): the same bits either way. */
extern "C" mi_status mi7e_matvec_q4k_qx(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                        float *y, int64_t K, int64_t M, void *workspace) {
    if (!mi7e_matvec_q4k_supported(wt, K, 1) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_matvec_q4k_qx: type %s, K = %lld, M = %lld", mi_type_name(wt),
                      (long long)K, (long long)M);
    if (!w || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi7e_matvec_q4k_qx: null pointer");
    if (!q4k_aligned(w, w, workspace)) return mi7e_matvec_staged(stream, wt, w, x, bias, y, K, M, 1, workspace);
    if ((uintptr_t)x & 15u) return mi7e_matvec_q4k(stream, wt, w, x, bias, y, K, M, workspace);
    const uint8_t *wb = (const uint8_t *)w;
    return launch_q4k<false, true>((cudaStream_t)stream, wb, wb, NULL, x, bias, y, K, M);
}

extern "C" mi_status mi7e_ffn_q4k_qx(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, float *y,
                                     int64_t K, int64_t F, void *workspace) {
    if (!mi7e_matvec_q4k_supported(wt, K, 1) || F <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_ffn_q4k_qx: type %s, K = %lld, F = %lld", mi_type_name(wt),
                      (long long)K, (long long)F);
    if (!wg || !wu || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi7e_ffn_q4k_qx: null pointer");
    if (!q4k_aligned(wg, wu, workspace)) return mi7e_ffn_staged(stream, wt, wg, wu, x, y, K, F, 1, workspace);
    if ((uintptr_t)x & 15u) return mi7e_ffn_q4k(stream, wt, wg, wu, x, y, K, F, workspace);
    return launch_q4k<true, true>((cudaStream_t)stream, (const uint8_t *)wg, (const uint8_t *)wu, NULL, x, NULL, y, K,
                                  F);
}

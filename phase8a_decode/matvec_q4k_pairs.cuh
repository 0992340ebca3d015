/* Item d19: the one-token Q4_K matmul with a lane a pair of units. 7e's lane map
 * (matvec_q4k_kernel.cuh) gives a lane 16 quant bytes: half of two 32-weight units, finished by a
 * shuffle with its neighbour, and each lane decodes a scale and a min for the one unit it
 * finishes: about 80 instructions for 32 weights. The big matmuls run out of issue before they
 * run out of bytes in flight (bulk copies with more in flight did not read faster,
 * results/notes/PHASE8A.md), so here a lane takes a super-block's 32-byte chunk c whole: units
 * 2c (low nibbles) and 2c+1 (high nibbles), 16 dp4a and no shuffle, one header decoded for both.
 *
 * Lane map: lane l serves super-block 8g + (l >> 2) of iteration `it` (super-blocks it*8U ..
 * it*8U+8U-1, U groups g) and its chunk c = l & 3. A unit's value is 7e's (the same integer sum,
 * the same float expression: unit_value), so each unit equals 7e's bit for bit; a lane adds its
 * two units (2c, then 2c+1) in (it, g) order and the warp's lanes are summed by the xor
 * butterfly: another order of the same values than 7e's, so within rounding of it and of the CPU.
 * The order depends on (K, U) only, never on the grid. U is 1 fused (gate and up), 2 unfused: 24
 * registers of loads. The activation row, its norm and its quantization are 7e's, in the block.
 * Include only from *_exact.cu (--fmad=false). */
#ifndef MI_MATVEC_Q4K_PAIRS_CUH
#define MI_MATVEC_Q4K_PAIRS_CUH
#include "phase7e_perf/matvec_q4k_kernel.cuh"

struct raw_pair {
    uint4 h, q0, q1;   /* header; qs bytes 32c..32c+15 and 32c+16..32c+31 */
};
__device__ __forceinline__ void load_pair(raw_pair &r, const uint8_t *sb, int c) {
    r.h = ldg16(sb);
    r.q0 = ldg16(sb + 16 + 32 * c);
    r.q1 = ldg16(sb + 32 + 32 * c);
}
__device__ __forceinline__ void zero_pair(raw_pair &r) { r.h = r.q0 = r.q1 = make_uint4(0, 0, 0, 0); }

/* 6-bit scale and min of unit j (k4_scale_min on the header words: bytes 4..7 = h.y, 8..11 =
 * h.z, 12..15 = h.w) */
__device__ __forceinline__ void pair_scale_min(const uint4 &h, int j, int *sc, int *mn) {
    const int sh = 8 * (j & 3);
    const uint32_t by = (h.y >> sh) & 0xFFu, bz = (h.z >> sh) & 0xFFu, bw = (h.w >> sh) & 0xFFu;
    if (j < 4) {
        *sc = (int)(by & 63u);
        *mn = (int)(bz & 63u);
    } else {
        *sc = (int)((bw & 0xFu) | ((by >> 6) << 4));
        *mn = (int)((bw >> 4) | ((bz >> 6) << 4));
    }
}

/* acc + unit 2c + unit 2c+1 of super-block s (7e's unit values) */
__device__ __forceinline__ float pair_add(float acc, const raw_pair &r, const uint4 *sq, const float *sd,
                                          const uint32_t *sbs, int s, int c) {
    const uint4 *aq = sq + (size_t)s * 16;
    const uint4 a0 = aq[act_perm(4 * c)], a1 = aq[act_perm(4 * c + 1)];
    const uint4 a2 = aq[act_perm(4 * c + 2)], a3 = aq[act_perm(4 * c + 3)];
    const uint32_t m4 = 0x0F0F0F0Fu;
    int lo = 0, hi = 0;
    lo = __dp4a((int)(r.q0.x & m4), (int)a0.x, lo);
    lo = __dp4a((int)(r.q0.y & m4), (int)a0.y, lo);
    lo = __dp4a((int)(r.q0.z & m4), (int)a0.z, lo);
    lo = __dp4a((int)(r.q0.w & m4), (int)a0.w, lo);
    lo = __dp4a((int)(r.q1.x & m4), (int)a1.x, lo);
    lo = __dp4a((int)(r.q1.y & m4), (int)a1.y, lo);
    lo = __dp4a((int)(r.q1.z & m4), (int)a1.z, lo);
    lo = __dp4a((int)(r.q1.w & m4), (int)a1.w, lo);
    hi = __dp4a((int)((r.q0.x >> 4) & m4), (int)a2.x, hi);
    hi = __dp4a((int)((r.q0.y >> 4) & m4), (int)a2.y, hi);
    hi = __dp4a((int)((r.q0.z >> 4) & m4), (int)a2.z, hi);
    hi = __dp4a((int)((r.q0.w >> 4) & m4), (int)a2.w, hi);
    hi = __dp4a((int)((r.q1.x >> 4) & m4), (int)a3.x, hi);
    hi = __dp4a((int)((r.q1.y >> 4) & m4), (int)a3.y, hi);
    hi = __dp4a((int)((r.q1.z >> 4) & m4), (int)a3.z, hi);
    hi = __dp4a((int)((r.q1.w >> 4) & m4), (int)a3.w, hi);
    int sc0, mn0, sc1, mn1;
    pair_scale_min(r.h, 2 * c, &sc0, &mn0);
    pair_scale_min(r.h, 2 * c + 1, &sc1, &mn1);
    const float d = __half2float(__ushort_as_half((unsigned short)(r.h.x & 0xFFFFu)));
    const float dm = __half2float(__ushort_as_half((unsigned short)(r.h.x >> 16)));
    const float d8 = sd[s];
    const uint32_t *bs = sbs + (size_t)s * 8 + 2 * c;   /* the bsum words of units 2c, 2c+1 (4-byte aligned only) */
    acc += unit_value(d8, d * (float)sc0, dm * (float)mn0, lo, bs[0]);
    acc += unit_value(d8, d * (float)sc1, dm * (float)mn1, hi, bs[1]);
    return acc;
}

/* FUSED, NORM, RES, PDL, Rows, TH: as matvec_q4k_rows with QX (x f32, quantized in the block).
 * Warp w of block b takes rows b*WARPS + w, then + gridDim.x*WARPS, ... */
template <bool FUSED, bool NORM, bool RES, bool PDL, class Rows, int TH>
__device__ __forceinline__ void matvec_q4k_pairs_rows(const Rows &rows, int64_t M, int nsb, const float *__restrict__ X,
                                                      const float *__restrict__ nw, float eps,
                                                      const float *__restrict__ R) {
    constexpr int U = FUSED ? 1 : 2, NS = FUSED ? 2 : 1, SB = 144, WARPS = TH / 32;
    extern __shared__ uint4 smem_pairs[];
    uint4 *sq = smem_pairs;
    float *sd = (float *)(sq + (size_t)nsb * 16);
    uint32_t *sbs = (uint32_t *)(sd + nsb);
    const int lane = threadIdx.x & 31, sbl = lane >> 2, c = lane & 3;
    const size_t wrow = (size_t)nsb * SB;
    const int nit = (nsb + 8 * U - 1) / (8 * U);
    const int64_t stride = (int64_t)gridDim.x * WARPS;
    int64_t row = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
    int it = 0;
    raw_pair r[NS][U];

#define PAIRS_LOAD()                                                                    \
    do {                                                                                \
        _Pragma("unroll") for (int g = 0; g < U; g++) {                                 \
            const int s = it * 8 * U + 8 * g + sbl;                                     \
            _Pragma("unroll") for (int k = 0; k < NS; k++) {                            \
                if (s < nsb) load_pair(r[k][g], rows.w(k, row, wrow) + (size_t)s * SB, c); \
                else zero_pair(r[k][g]);                                                \
            }                                                                           \
        }                                                                               \
    } while (0)

    if constexpr (PDL) pdl_trigger();
    if (row < M) PAIRS_LOAD();   /* in flight while the activation is staged */
    if constexpr (NORM) {
        for (int i = threadIdx.x * 32; i < nsb * 256; i += TH * 32) asm volatile("prefetch.global.L1 [%0];" ::"l"(nw + i));
    }
    if constexpr (PDL) pdl_wait();
    float scale = 1.0f;
    float *sx = NORM ? q4k_norm_row(sbs, nsb) : NULL;
    if constexpr (NORM) scale = norm_scale_block(X, (int64_t)nsb * 256, eps, sx);
    quant_act_shared<2, NORM, WARPS>(X, sx, nsb, sq, sd, sbs, nw, scale);
    __syncthreads();
    float acc[NS];
#pragma unroll
    for (int k = 0; k < NS; k++) acc[k] = 0.0f;
    while (row < M) {   /* warp-uniform */
#pragma unroll
        for (int g = 0; g < U; g++) {
            const int s = it * 8 * U + 8 * g + sbl;
            if (s < nsb) {   /* no shuffle inside: lanes may differ */
#pragma unroll
                for (int k = 0; k < NS; k++) acc[k] = pair_add(acc[k], r[k][g], sq, sd, sbs, s, c);
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
        if (row < M) PAIRS_LOAD();
    }
#undef PAIRS_LOAD
}

template <bool FUSED, bool NORM, bool RES, class Rows, int TH>
__global__ void __launch_bounds__(TH, Q4K_MIN_BLOCKS_OF(TH))
kernel_matvec_q4k_pairs(const Rows rows, int64_t M, int nsb, const float *__restrict__ X, const float *__restrict__ nw,
                        float eps, const float *__restrict__ R) {
    matvec_q4k_pairs_rows<FUSED, NORM, RES, true, Rows, TH>(rows, M, nsb, X, nw, eps, R);
}

/* one launch in one resident wave, as 7e's (q4k_smem, wave_blocks) */
template <bool FUSED, bool NORM, bool RES, class Rows, int TH = Q4K_THREADS>
static mi_status launch_q4k_pairs(cudaStream_t st, const Rows &rows, int64_t K, int64_t M, const float *x,
                                  const float *nw, float eps, const float *r, bool pdl) {
    static wave_cache occ;   /* per instantiation */
    const size_t smem = q4k_smem(K, NORM);
    const int64_t nb = wave_blocks(occ, kernel_matvec_q4k_pairs<FUSED, NORM, RES, Rows, TH>, TH, smem, M);
    MI_CU_CHECK(pdl_launch(pdl, kernel_matvec_q4k_pairs<FUSED, NORM, RES, Rows, TH>, dim3((unsigned)nb), dim3(TH),
                           smem, st, rows, M, (int)(K / 256), x, nw, eps, r));
    MI_CU_CHECK_LAUNCH("kernel_matvec_q4k_pairs");
    return MI_OK;
}

#endif

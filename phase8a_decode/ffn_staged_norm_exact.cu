/* 7e's staged one-token fused FFN with the RMS norm before it and the activation's quantization
 * done in the block (item d23): the block stages its gate and up rows as 7e's kernel does
 * (matvec_staged.cuh) and, while those loads fly, copies x into shared memory, applies the norm
 * and quantizes x' there, instead of reading x' quantized by 7b's quantizer after a norm kernel.
 * The dots are 7e's body on the shared copy. The 0.5B's FFN norm, quantizer and gate/up become
 * one launch.
 *
 * Bits: the norm is MI_OP_RMS_NORM's canonical arithmetic (each warp sums x^2 as lane j over
 * i = j, j + 32, ..., then the butterfly; `(x * scale) * w`, explicit round-to-nearest), the
 * quantization gives 7b's quantizer's bytes (quant_q8_1_octet below), and the dots are
 * staged_rows_dot in the launch shape 7e's launcher picks, so the output equals 7e's RMS norm,
 * 7b's quantizer and 7e's staged FFN bit for bit. Built with --fmad=false, as 7e's file is.
 * Launched as a programmatic dependent (d6): the weight rows are staged before
 * griddepcontrol.wait (no kernel of the step writes them), x after it.
 *
 * Item d29: the kernel also writes y's quantized row (7b's quantizer's bytes) for the down
 * projection after it, so the down launches no quantizer. A block then takes 32 rows (a whole
 * 32-element activation block of y) with 8 warps, 4 rows a warp as with 16 rows on 4; after its
 * dots it reads its 32 outputs back and quantizes them. A row's dot is one warp's whatever the
 * block's rows, so y is the same bits either way.
 *
 * Measured and not kept: the same in-block quantization for the down projection (d15's staged
 * matmul, 299 blocks each quantizing the 4,864-element row) was 7-17% slower on the 0.5B than the
 * quantizer's own launch (results/notes/PHASE8A.md). */
#include "phase7e_perf/matvec_staged.cuh"
#include "phase7e_perf/matvec_q4k_kernel.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase8a_decode/decode8a.h"
#include "phase7a_skeleton/cuda_pdl.cuh"
#include "common/core/mi_fp16.h"

/* One 32-element activation block quantized by an octet of lanes (sub = lane & 7 holds elements
 * 4 sub .. 4 sub + 3 in v), in the bytes of 7b's quant_q8_1_value (quant_act.cuh): d = amax / 127,
 * q = roundf of the clamped v / d, s = sum(q) * d. amax is a maximum and the level sum an integer
 * sum, so neither depends on which lanes add what: a warp of 32 lanes a block and an octet give
 * the same bytes. blk is 4-byte aligned (36-byte blocks from an aligned base). Every lane of the
 * warp calls it (the shuffles are warp-wide; an octet past the end passes zeros and stores
 * nothing). */
__device__ __forceinline__ void quant_q8_1_octet(const float v[4], uint8_t *blk, int sub, bool store) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    for (int off = 4; off >= 1; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t packed = 0u;
    int sum = 0;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const float c = fmaxf(-127.0f, fminf(127.0f, v[e] * id));
        const int q = (int)roundf(c);
        packed |= ((uint32_t)q & 0xFFu) << (8 * e);
        sum += q;
    }
    for (int off = 4; off >= 1; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (!store) return;
    *(uint32_t *)(blk + 4 + 4 * sub) = packed;
    if (sub == 0) {
        ((uint16_t *)blk)[0] = mi_f32_to_f16(d);
        ((uint16_t *)blk)[1] = mi_f32_to_f16((float)sum * d);
    }
}

/* x [K] into shared memory sx with every load in flight: 7e's stage_words (matvec_q4k_kernel.cuh),
 * QX_NB 16-byte loads a thread before the first store (rows of up to 8,192 elements in one round
 * trip; a row not 16-byte aligned as words) */
#define QX_NB 16
__device__ __forceinline__ void stage_x(float *sx, const float *__restrict__ X, int64_t K) {
    stage_words<QX_NB>((const uint8_t *)X, (int)K, [=](int i, uint32_t v) { sx[i] = __uint_as_float(v); });
}

/* x [K] normalized with nw and quantized into A (K / 32 blocks of 36 bytes, shared
 * memory) by the whole block from its shared copy sx (one round trip for x): each warp sums the
 * squares itself in the canonical order, then octet o of the block takes blocks o, o + 16, ...,
 * reading 16 bytes a lane (a warp's four blocks are 512 contiguous bytes: no bank conflicts). */
__device__ __forceinline__ void quantize_x_block(const float *__restrict__ X, const float *__restrict__ nw, float eps,
                                                 int64_t K, float *sx, uint8_t *A) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane & 7;
    stage_x(sx, X, K);
    __syncthreads();
    float acc = 0.0f;   /* every warp the same bits: no second barrier */
#pragma unroll 8
    for (int64_t i = lane; i < K; i += 32) acc = __fadd_rn(acc, __fmul_rn(sx[i], sx[i]));
    for (int off = 16; off >= 1; off >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, off));
    const float scale = mi_canon_rms_scale(acc, K, eps);
    const int64_t nb = K / 32;
    const int octets = (int)(blockDim.x / 8);
    for (int64_t b0 = (int64_t)warp * 4; b0 < nb; b0 += octets) {   /* warp-uniform */
        const int64_t b = b0 + (lane >> 3);
        const bool in = b < nb;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (in) {
            const float4 xv = *(const float4 *)(sx + b * 32 + 4 * sub);
            const float xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
            for (int e = 0; e < 4; e++) v[e] = __fmul_rn(__fmul_rn(xs[e], scale), __ldg(nw + b * 32 + 4 * sub + e));
        }
        quant_q8_1_octet(v, A + (size_t)b * A8_BYTES, sub, in);
    }
}

/* bytes of the quantized row (36-byte blocks), 16-byte rounded so x's copy after it is aligned */
__host__ __device__ __forceinline__ size_t qx_arow(int64_t K) { return ((size_t)(K / 32) * A8_BYTES + 15) & ~(size_t)15; }

/* y's quantized row for the rows m0 .. m0 + rows - 1 the block just wrote (rows a multiple of 32,
 * m0 too): warp w takes activation blocks w, w + warps, ... with its first octet (the other
 * octets pass zeros). Y is read back after a barrier: the block's own global stores are visible
 * to it. */
__device__ __forceinline__ void quantize_y_rows(const float *__restrict__ Y, int64_t m0, int rows, uint8_t *Yq) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane & 7;
    const int nblk = rows / 32, warps = (int)(blockDim.x >> 5);
    for (int b = warp; b < nblk; b += warps) {   /* warp-uniform */
        const int64_t m = m0 + 32 * (int64_t)b;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (lane < 8) {
            const float4 yv = *(const float4 *)(Y + m + 4 * sub);
            v[0] = yv.x, v[1] = yv.y, v[2] = yv.z, v[3] = yv.w;
        }
        quant_q8_1_octet(v, Yq + (size_t)(m / 32) * A8_BYTES, sub, lane < 8);
    }
}

/* y [F] = swiglu(Wg @ x', Wu @ x'), x' = rms_norm(x, nw, eps): block b takes rows b*RB ..;
 * Yq (d29, else NULL): y quantized as well (RB and F multiples of 32, Y 16-byte aligned) */
template <int WT>
__global__ void __launch_bounds__(2 * MMV_THREADS)
kernel_ffn_staged_norm(const uint8_t *__restrict__ Wg, const uint8_t *__restrict__ Wu, size_t wrow, int64_t F,
                       int64_t K, const float *__restrict__ X, const float *__restrict__ nw, float eps,
                       float *__restrict__ Y, uint8_t *__restrict__ Yq, int RB, size_t region) {
    extern __shared__ uint4 smem[];
    pdl_trigger_early();
    const int64_t m0 = (int64_t)blockIdx.x * RB;
    const int rows = (int)(F - m0 < RB ? F - m0 : RB);
    const size_t nbytes = (size_t)rows * wrow, total = (size_t)F * wrow;
    size_t lead = 0, lead2 = 0;
    stage_pair(smem, Wg + (size_t)m0 * wrow, Wg, Wg + total, smem + region / 16, Wu + (size_t)m0 * wrow, Wu,
               Wu + total, nbytes, &lead, &lead2);
    pdl_wait_trigger();   /* x: the kernels before this one wrote it */
    uint8_t *A = (uint8_t *)smem + 2 * region;
    float *sx = (float *)(A + qx_arow(K));
    quantize_x_block(X, nw, eps, K, sx, A);
    __syncthreads();
    staged_rows_dot<WT, 1, true, false>((const uint8_t *)smem + lead, (const uint8_t *)smem + region + lead2, wrow, F,
                                        m0, rows, RB, A, (size_t)(K / 32) * A8_BYTES, NULL, Y, 1, K / 32);
    if (Yq) {
        __syncthreads();
        quantize_y_rows(Y, m0, rows, Yq);
    }
}

/* ---------------- launchers ---------------- */

/* shared memory past the two regions: the quantized row, rounded to 16 bytes, then x's copy */
#define QX_SMEM_MAX (200u << 10)   /* opt-in: two rows of the largest 7e stages (22 KB), the quantized x and x */

/* the launch shape of 7e's staged FFN for these rows, and its shared memory with the quantized x
 * and x's copy appended; 0 where the kernel does not take them (a format of 256-element
 * activation blocks, a row 7e does not stage, more shared memory than the limit). With y's
 * quantized row (yq, d29): 32 rows a block of 8 warps, F a multiple of 32. Any row count above
 * one gives a row the same dot (staged_rows_dot), so 7e's bits hold. */
#define QY_ROWS 32
static size_t ffn_smem(mi_type wt, int64_t K, int64_t F, bool yq, int *rb, size_t *region) {
    const size_t arow = mi7b_act_row_bytes(wt, K);
    if (!mi7e_matvec_staged_supported(wt, K, 1) || F <= 0 || K % 32 || arow != (size_t)(K / 32) * A8_BYTES) return 0;
    const size_t wrow = mi_row_size(wt, K);
    const int rb7e = staged_rows_per_block(wrow, 2, F);   /* 7e's launch shape: one row a block is another order */
    if (yq && (F % QY_ROWS || rb7e == 1)) return 0;
    *rb = yq ? QY_ROWS : rb7e;
    *region = staged_region(*rb, wrow);
    const size_t smem = *region * 2 + qx_arow(K) + (size_t)K * sizeof(float);
    return smem <= QX_SMEM_MAX && (F + *rb - 1) / *rb <= 0x7fffffff ? smem : 0;
}

extern "C" bool mi8a_ffn_staged_norm_supported(mi_type wt, int64_t K, int64_t F, bool yq) {
    int rb;
    size_t region;
    return ffn_smem(wt, K, F, yq, &rb, &region) > 0;
}

template <int WT>
static mi_status launch_ffn(cudaStream_t st, const uint8_t *wg, const uint8_t *wu, const float *x, const float *nw,
                            float eps, float *y, uint8_t *yq, int64_t K, int64_t F) {
    int rb;
    size_t region;
    const size_t smem = ffn_smem((mi_type)WT, K, F, yq != NULL, &rb, &region);
    if (!smem)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_ffn_staged_norm: type %s, K = %lld, F = %lld", mi_type_name((mi_type)WT),
                      (long long)K, (long long)F);
    const size_t wrow = mi_row_size((mi_type)WT, K);
    const int64_t nb = (F + rb - 1) / rb;
    static size_t opted = 0;   /* per instantiation: the shared memory opted into so far */
    if (smem > MMV_SMEM_MAX && smem > opted) {
        MI_CU_CHECK(cudaFuncSetAttribute(kernel_ffn_staged_norm<WT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem));
        opted = smem;
    }
    const unsigned threads = yq ? 2 * MMV_THREADS : MMV_THREADS;
    MI_CU_CHECK(pdl_launch(mi8a_pdl_on(), kernel_ffn_staged_norm<WT>, dim3((unsigned)nb), dim3(threads), smem, st, wg,
                           wu, wrow, F, K, x, nw, eps, y, yq, rb, region));
    MI_CU_CHECK_LAUNCH("kernel_ffn_staged_norm");
    return MI_OK;
}

extern "C" mi_status mi8a_ffn_staged_norm(void *stream, mi_type wt, const void *wg, const void *wu, const float *x,
                                          const float *nw, float eps, float *y, void *yq, int64_t K, int64_t F) {
    if (!wg || !wu || !x || !nw || !y) return mi_err(MI_ERR_INVALID, "mi8a_ffn_staged_norm: null pointer");
    if (yq && (((uintptr_t)y & 15) || ((uintptr_t)yq & 3)))
        return mi_err(MI_ERR_INVALID, "mi8a_ffn_staged_norm: y not 16-byte or its quantized row not 4-byte aligned");
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *g = (const uint8_t *)wg, *u = (const uint8_t *)wu;
    uint8_t *q = (uint8_t *)yq;
    switch (wt) {
    case MI_TYPE_Q4_0: return launch_ffn<MI_TYPE_Q4_0>(st, g, u, x, nw, eps, y, q, K, F);
    case MI_TYPE_Q4_1: return launch_ffn<MI_TYPE_Q4_1>(st, g, u, x, nw, eps, y, q, K, F);
    case MI_TYPE_Q5_0: return launch_ffn<MI_TYPE_Q5_0>(st, g, u, x, nw, eps, y, q, K, F);
    case MI_TYPE_Q5_1: return launch_ffn<MI_TYPE_Q5_1>(st, g, u, x, nw, eps, y, q, K, F);
    case MI_TYPE_Q8_0: return launch_ffn<MI_TYPE_Q8_0>(st, g, u, x, nw, eps, y, q, K, F);
    default: return mi_err(MI_ERR_UNSUPPORTED, "mi8a_ffn_staged_norm: type %s", mi_type_name(wt));
    }
}

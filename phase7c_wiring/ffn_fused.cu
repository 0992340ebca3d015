/* The fused FFN head for decode-sized batches: W_gate, W_up [K, F] @ x [K, N] ->
 * silu(gate) * up [F, N] in one pass over both weight rows, N <= 8. x is quantized once
 * (Q8_0/Q8_1/Q8_K, the CPU reference's arithmetic), then one warp per output row walks
 * the gate and up rows unit by unit in the same order as the 7b matmul (lane l: units
 * l, l+32, ...; xor-butterfly), and applies SwiGLU with every float op pinned (_rn), so
 * the result matches matmul + matmul + swiglu and gate/up never touch memory. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7c_wiring/wiring7c.h"

#define A8_BYTES 36    /* activation block for 32-element formats: d, s (f16), qs[32] */
#define AK_BYTES 292   /* Q8_K: d (f32), qs[256], bsums[16] */

/* x [K, N] -> Q8_1-layout blocks (Q8_0 uses the same bytes and ignores s); warp per block */
__global__ void kernel_ffn_quant8(const float *__restrict__ x, uint8_t *__restrict__ a, int64_t K, int64_t nblk) {
    const int lane = threadIdx.x & 31;
    const int64_t per_row = K / 32;
    for (int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; g < nblk;
         g += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        const float v = x[(g / per_row) * K + (g % per_row) * 32 + lane];
        const float amax = warp_max(fabsf(v));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const int q = (int)roundf(fmaxf(-127.0f, fminf(127.0f, v * id)));
        const int sum = warp_sum_i(q);
        uint8_t *blk = a + (size_t)g * A8_BYTES;
        blk[4 + lane] = (uint8_t)(int8_t)q;
        if (lane == 0) {
            ((uint16_t *)blk)[0] = mi_f32_to_f16(d);
            ((uint16_t *)blk)[1] = mi_f32_to_f16((float)sum * d);
        }
    }
}

/* x [K, N] -> Q8_K super-blocks; warp per 256 elements, lane owns 8 */
__global__ void kernel_ffn_quantk(const float *__restrict__ x, uint8_t *__restrict__ a, int64_t K, int64_t nblk) {
    const int lane = threadIdx.x & 31;
    const int64_t per_row = K / 256;
    for (int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; g < nblk;
         g += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        const float *xs = x + (g / per_row) * K + (g % per_row) * 256 + 8 * lane;
        float v[8], amax = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            v[e] = xs[e];
            amax = fmaxf(amax, fabsf(v[e]));
        }
        amax = warp_max(amax);
        const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
        uint8_t *blk = a + (size_t)g * AK_BYTES;
        int8_t *qs = (int8_t *)(blk + 4);
        int part = 0;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const int q = (int)rintf(fmaxf(-127.0f, fminf(127.0f, v[e] * iscale)));
            qs[8 * lane + e] = (int8_t)q;
            part += q;
        }
        const int other = __shfl_xor_sync(0xffffffffu, part, 1);
        if ((lane & 1) == 0) ((int16_t *)(blk + 4 + 256))[lane >> 1] = (int16_t)(part + other);
        if (lane == 0) *(float *)blk = iscale != 0.0f ? 1.0f / iscale : 0.0f;
    }
}

/* one weight unit . the matching activation unit (the 7b matmul's expression) */
template <int AT>
__device__ __forceinline__ float ffn_unit_dot(const wunit &w, const uint8_t *arow, int64_t u) {
    if (AT == MI_TYPE_Q8_0 || AT == MI_TYPE_Q8_1) {
        const uint8_t *b = arow + (size_t)u * A8_BYTES;
        const int *aq = (const int *)(b + 4);
        int isum = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) isum = __dp4a(w.q[i], aq[i], isum);
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
        for (int i = 0; i < 4; i++) lo = __dp4a(w.q[i], aq[i], lo);
#pragma unroll
        for (int i = 4; i < 8; i++) hi = __dp4a(w.q[i], aq[i], hi);
        const int isum = w.sc_lo * lo + w.sc_hi * hi;
        const float d8 = *(const float *)b;
        const int bsum = (int)bs[2 * j] + (int)bs[2 * j + 1];
        return d8 * (w.d * (float)isum - w.m * (float)bsum);
    }
}

/* mi_canon_swiglu's operation sequence (common/core/mi_canon.h) with each op pinned to
 * round-to-nearest, so this file needs no --fmad=false and still matches the CPU. */
__device__ __forceinline__ float rn_expf(float x) {
    if (x != x) return x;
    if (x > 88.72283f) return __int_as_float(0x7f800000);
    if (x < -103.97208f) return 0.0f;
    const float n = rintf(__fmul_rn(x, 1.44269504f));
    float r = __fsub_rn(x, __fmul_rn(n, 0.693145752f));
    r = __fsub_rn(r, __fmul_rn(n, 1.42860677e-06f));
    float p = 1.3888889e-03f;
    p = __fadd_rn(__fmul_rn(p, r), 8.3333333e-03f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1666667e-02f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666667e-01f);
    p = __fadd_rn(__fmul_rn(p, r), 0.5f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    const int ni = (int)n, n1 = ni / 2, n2 = ni - n1;
    return __fmul_rn(__fmul_rn(p, __int_as_float((n1 + 127) << 23)), __int_as_float((n2 + 127) << 23));
}
__device__ __forceinline__ float rn_swiglu(float g, float u) {
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, rn_expf(-g))), u);
}

/* warp per output row m; NC token columns per block row */
template <int WT, int NC>
__global__ void kernel_ffn_swiglu(const uint8_t *__restrict__ Wg, const uint8_t *__restrict__ Wu, size_t wrow,
                                  const uint8_t *__restrict__ A, size_t arow, float *__restrict__ Y, int64_t F,
                                  int64_t N, int64_t nunits) {
    const int lane = threadIdx.x & 31;
    const int64_t m = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (m >= F) return;   /* whole warps leave together */
    const uint8_t *gr = Wg + (size_t)m * wrow, *ur = Wu + (size_t)m * wrow;
    float ag[NC], au[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) ag[c] = au[c] = 0.0f;
    for (int64_t u = lane; u < nunits; u += 32) {
        wunit wg, wu;
        unit_unpack<WT>(gr, u, wg);
        unit_unpack<WT>(ur, u, wu);
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (c < N) {
                ag[c] += ffn_unit_dot<wtraits<WT>::act>(wg, A + (size_t)c * arow, u);
                au[c] += ffn_unit_dot<wtraits<WT>::act>(wu, A + (size_t)c * arow, u);
            }
    }
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const float g = warp_sum(ag[c]), v = warp_sum(au[c]);
        if (lane == 0 && c < N) Y[(size_t)c * F + m] = rn_swiglu(g, v);
    }
}

static int64_t block_of(mi_type wt) {
    switch (wt) {
    case MI_TYPE_Q4_0: case MI_TYPE_Q4_1: case MI_TYPE_Q5_0: case MI_TYPE_Q5_1: case MI_TYPE_Q8_0: return 32;
    case MI_TYPE_Q4_K: case MI_TYPE_Q5_K: case MI_TYPE_Q6_K: return 256;
    default: return 0;
    }
}

extern "C" bool mi7c_ffn_supported(mi_type wt, int64_t K, int64_t N) {
    const int64_t bk = block_of(wt);
    return bk > 0 && K > 0 && K % bk == 0 && N >= 1 && N <= MI7C_FUSE_MAX_N;
}

extern "C" size_t mi7c_ffn_workspace(mi_type wt, int64_t K, int64_t N) {
    if (!mi7c_ffn_supported(wt, K, N)) return 0;
    return block_of(wt) == 256 ? (size_t)N * (size_t)(K / 256) * AK_BYTES : (size_t)N * (size_t)(K / 32) * A8_BYTES;
}

template <int WT>
static mi_status launch_ffn(cudaStream_t st, const uint8_t *wg, const uint8_t *wu, const uint8_t *a, size_t arow,
                            float *y, int64_t K, int64_t F, int64_t N) {
    const size_t wrow = (size_t)(K / (32 * wtraits<WT>::units)) * wtraits<WT>::bytes;
    const int warps = 4;
    dim3 grid((unsigned)((F + warps - 1) / warps));
    if (N == 1) {
        kernel_ffn_swiglu<WT, 1><<<grid, 32 * warps, 0, st>>>(wg, wu, wrow, a, arow, y, F, N, K / 32);
        MI_CU_CHECK_LAUNCH("kernel_ffn_swiglu<NC=1>");
    } else {
        kernel_ffn_swiglu<WT, MI7C_FUSE_MAX_N><<<grid, 32 * warps, 0, st>>>(wg, wu, wrow, a, arow, y, F, N, K / 32);
        MI_CU_CHECK_LAUNCH("kernel_ffn_swiglu<NC=8>");
    }
    return MI_OK;
}

extern "C" mi_status mi7c_ffn_swiglu(void *stream, mi_type wt, const void *wg, const void *wu, const float *x,
                                     float *y, int64_t K, int64_t F, int64_t N, void *workspace) {
    if (!mi7c_ffn_supported(wt, K, N) || F <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7c_ffn_swiglu: type %s, K = %lld, N = %lld", mi_type_name(wt),
                      (long long)K, (long long)N);
    if (!workspace) return mi_err(MI_ERR_INTERNAL, "mi7c_ffn_swiglu: no workspace");
    cudaStream_t st = (cudaStream_t)stream;
    uint8_t *a = (uint8_t *)workspace;
    const bool kq = block_of(wt) == 256;
    const int64_t nblk = N * (K / (kq ? 256 : 32));
    const size_t arow = kq ? (size_t)(K / 256) * AK_BYTES : (size_t)(K / 32) * A8_BYTES;
    const unsigned qgrid = mi7b_blocks(nblk * 32, 256);
    if (kq) {
        kernel_ffn_quantk<<<qgrid, 256, 0, st>>>(x, a, K, nblk);
        MI_CU_CHECK_LAUNCH("kernel_ffn_quantk");
    } else {
        kernel_ffn_quant8<<<qgrid, 256, 0, st>>>(x, a, K, nblk);
        MI_CU_CHECK_LAUNCH("kernel_ffn_quant8");
    }
    const uint8_t *g = (const uint8_t *)wg, *u = (const uint8_t *)wu;
    switch (wt) {
    case MI_TYPE_Q4_0: return launch_ffn<MI_TYPE_Q4_0>(st, g, u, a, arow, y, K, F, N);
    case MI_TYPE_Q4_1: return launch_ffn<MI_TYPE_Q4_1>(st, g, u, a, arow, y, K, F, N);
    case MI_TYPE_Q5_0: return launch_ffn<MI_TYPE_Q5_0>(st, g, u, a, arow, y, K, F, N);
    case MI_TYPE_Q5_1: return launch_ffn<MI_TYPE_Q5_1>(st, g, u, a, arow, y, K, F, N);
    case MI_TYPE_Q8_0: return launch_ffn<MI_TYPE_Q8_0>(st, g, u, a, arow, y, K, F, N);
    case MI_TYPE_Q4_K: return launch_ffn<MI_TYPE_Q4_K>(st, g, u, a, arow, y, K, F, N);
    case MI_TYPE_Q5_K: return launch_ffn<MI_TYPE_Q5_K>(st, g, u, a, arow, y, K, F, N);
    case MI_TYPE_Q6_K: return launch_ffn<MI_TYPE_Q6_K>(st, g, u, a, arow, y, K, F, N);
    default: return mi_err(MI_ERR_UNSUPPORTED, "mi7c_ffn_swiglu: type %s", mi_type_name(wt));
    }
}

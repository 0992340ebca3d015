/* The fused FFN head for decode-sized batches: W_gate, W_up [K, F] @ x [K, N] ->
 * silu(gate) * up [F, N] in one pass over both weight rows, N <= 8. x is quantized once
 * (mi7b_quantize_act: the CPU reference's arithmetic), then one warp per output row walks
 * the gate and up rows unit by unit in the same order as the 7b matmul (lane l: units
 * l, l+32, ...; xor-butterfly), and applies SwiGLU with every float op pinned (_rn), so
 * the result matches matmul + matmul + swiglu and gate/up never touch memory. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7c_wiring/wiring7c.h"

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
                ag[c] += mi7b_unit_dot<wtraits<WT>::act>(wg, A + (size_t)c * arow, u);
                au[c] += mi7b_unit_dot<wtraits<WT>::act>(wu, A + (size_t)c * arow, u);
            }
    }
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const float g = warp_sum(ag[c]), v = warp_sum(au[c]);
        if (lane == 0 && c < N) Y[(size_t)c * F + m] = rn_swiglu(g, v);
    }
}

extern "C" bool mi7c_ffn_supported(mi_type wt, int64_t K, int64_t N) {
    return mi7b_act_row_bytes(wt, K) > 0 && N >= 1 && N <= MI7C_FUSE_MAX_N;
}

extern "C" size_t mi7c_ffn_workspace(mi_type wt, int64_t K, int64_t N) {
    if (!mi7c_ffn_supported(wt, K, N)) return 0;
    return mi7b_act_row_bytes(wt, K) * (size_t)N;
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
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, N, workspace));
    cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *a = (const uint8_t *)workspace;
    const size_t arow = mi7b_act_row_bytes(wt, K);
    const uint8_t *g = (const uint8_t *)wg, *u = (const uint8_t *)wu;
    MI_QTYPE_DISPATCH(wt, WT, return launch_ffn<WT>(st, g, u, a, arow, y, K, F, N));
}

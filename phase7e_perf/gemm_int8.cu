/* Tensor-core prefill matmul, W [K, M] (quantized) @ x F32 [K, N] (+ bias [M]) -> y F32 [M, N]
 * for N > 8. x is quantized once exactly as 7b and the CPU do (Q8_0/Q8_1/Q8_K,
 * mi7b_quantize_act); weight units are unpacked to int8 with 7b's unit_unpack into shared
 * memory; the integer block dots run on the int8 tensor cores (mma.sync m16n8k16 s8.s8.s32,
 * two per 32-element unit so Q6_K's 16-element scales apply), and each unit's int32 dot is
 * scaled in float as the CPU does. The integer dots are exact, so the result is within the
 * 7b matmul bound (NMSE <= 1e-6 vs the CPU).
 * Tile: 64 weight rows x 64 tokens x 4 units per stage, 4 warps (2 x 2), each 32 x 32. */
#include "phase7e_perf/gemm_int8_kernel.cuh"
#include "phase7e_perf/perf7e.h"
#include "phase7b_ops/ops7b.h"

/* ---------------- launchers ---------------- */

extern "C" bool mi7e_gemm_int8_supported(mi_type wt, int64_t K, int64_t N) {
    /* mi7b_act_row_bytes: the 8 quantized types of 7b's dot, K a whole number of blocks */
    return mi7b_act_row_bytes(wt, K) > 0 && N > MI7E_MATVEC_MAX_N && (N + MQ_BN - 1) / MQ_BN <= 65535;
}

extern "C" size_t mi7e_gemm_int8_workspace(mi_type wt, int64_t K, int64_t N) {
    return mi7b_act_row_bytes(wt, K) * (size_t)(N > 0 ? N : 0);
}

template <int WT>
static mi_status launch_gemm_int8(cudaStream_t st, const uint8_t *w, const uint8_t *a, size_t arow, const float *bias,
                                  float *y, int64_t K, int64_t M, int64_t N) {
    const size_t wrow = mi_row_size((mi_type)WT, K);
    const int64_t nunits = K / 32, gx = (M + MQ_BM - 1) / MQ_BM, gy = (N + MQ_BN - 1) / MQ_BN;
    if (gy > 65535 || gx > 0x7fffffff)
        return mi_err(MI_ERR_INVALID, "mi7e_gemm_int8: M = %lld, N = %lld too large", (long long)M, (long long)N);
    kernel_gemm_int8<WT><<<dim3((unsigned)gx, (unsigned)gy), 128, 0, st>>>(w, wrow, a, arow, bias, y, M, N, nunits);
    MI_CU_CHECK_LAUNCH("kernel_gemm_int8");
    return MI_OK;
}

extern "C" mi_status mi7e_gemm_int8(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                    float *y, int64_t K, int64_t M, int64_t N, void *workspace) {
    if (!mi7e_gemm_int8_supported(wt, K, N) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_gemm_int8: type %s, K = %lld, N = %lld", mi_type_name(wt),
                      (long long)K, (long long)N);
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, N, workspace));
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *wb = (const uint8_t *)w, *a = (const uint8_t *)workspace;
    const size_t arow = mi7b_act_row_bytes(wt, K);
    MI_QTYPE_DISPATCH(wt, WT, return launch_gemm_int8<WT>(st, wb, a, arow, bias, y, K, M, N));
}

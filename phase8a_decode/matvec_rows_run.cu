/* d13 on 7b's warp-per-row matmul: the rows of a run of one-token matmuls of one x (the 0.5B's
 * q, k and v) in one launch on x quantized once by 7b's quantizer. Each row runs 7b's row body
 * (phase7b_ops/mm_rows.cuh) with the run's row map (run_rows.cuh), in a file built as 7b's
 * mm_quant.cu is (default contraction), so every output equals 7b's kernel's bit for bit; the
 * launch is 7b's (4 warps a block, a warp a row, a programmatic dependent under d10). */
#include "phase7b_ops/mm_rows.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7a_skeleton/cuda_pdl.cuh"
#include "phase8a_decode/decode8a.h"
#include "phase8a_decode/run_rows.cuh"

template <int WT>
__global__ void kernel_mm_q_run(const run_rows rows, int64_t M, const uint8_t *__restrict__ A, int64_t nunits) {
    MI_PDL_ENTRY();
    const int64_t m = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (m >= M) return; /* whole warps leave together: no block barrier follows */
    mm_q_row<WT, 1>(rows, m, A, 0, 1, 0, nunits);
}

template <int WT>
static mi_status launch_run(cudaStream_t st, const run_rows &rows, int64_t M, const uint8_t *a, int64_t K) {
    const int warps = 4;
    const int64_t nb = (M + warps - 1) / warps;
    if (nb > 0x7fffffff) return mi_err(MI_ERR_INVALID, "mi8a_matmul_rows_run: %lld rows", (long long)M);
    MI_CU_CHECK(MI_PDL_LAUNCH((kernel_mm_q_run<WT>), (unsigned)nb, 32 * warps, 0, st, rows, M, a, K / 32));
    MI_CU_CHECK_LAUNCH("kernel_mm_q_run");
    return MI_OK;
}

extern "C" mi_status mi8a_matmul_rows_run(void *stream, mi_type wt, const mi8a_run_seg *seg, int n, const void *xq,
                                          int64_t K) {
    if (!mi7b_act_row_bytes(wt, K) || !mi7b_matmul_supported(wt, K) || n < 1 || n > MI8A_RUN_MAX)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_matmul_rows_run: type %s, K = %lld, %d weights", mi_type_name(wt),
                      (long long)K, n);
    if (!xq || !seg) return mi_err(MI_ERR_INTERNAL, "mi8a_matmul_rows_run: no quantized activations");
    run_rows rows;
    int64_t M = 0;
    if (!run_rows_make(&rows, seg, n, mi_row_size(wt, K), &M))
        return mi_err(MI_ERR_INVALID, "mi8a_matmul_rows_run: a weight null or without rows");
    MI_QTYPE_DISPATCH(wt, WT, return launch_run<WT>((cudaStream_t)stream, rows, M, (const uint8_t *)xq, K));
}

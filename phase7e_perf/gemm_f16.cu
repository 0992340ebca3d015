/* f16 tensor-core prefill matmul, mma.sync kernel (gemm_f16.h has the contract).
 *
 * Why: the int8 kernel (gemm_int8.cu) keeps the CPU's arithmetic (Q8 activations, exact
 * integer block dots, one float scale per 32-element unit), which ties its inner loop to
 * per-unit scaling and unpacking; on the 7B it runs at ~70 TOP/s, 10% of the prefill floor.
 * Dequantizing the weights of a call to f16 once costs one pass over 2 bytes per weight
 * (~3 ms for all of the 7B) and leaves a plain GEMM whose inner loop is ldmatrix + mma only.
 *
 * Three kernels per call:
 *   kernel_act_f16      x F32 [N, K] -> f16 [N, K] times 2^e per token, so the largest |x| of
 *                       the token lands in [2^14, 2^15): no f16 overflow, no flush of small
 *                       rows; the epilogue multiplies by 2^-e (exact).
 *   kernel_dequant_f16  weight rows [m0, m0 + Mc) -> f16 [Mc, K] (7b's unit_unpack, then the
 *                       unit's float formula), in chunks of at most MI7E_GEMM_F16_CHUNK bytes.
 *   kernel_gemm_f16     C [Mc, N] = Wh [Mc, K] . Xh [N, K]^T, f32 accumulation.
 * GEMM tile: 128 weight rows x 128 tokens (64 when 128 would not give two blocks per SM),
 * k depth 64 in three cp.async stages (32 in four where K % 64 != 0), 8 warps (2 x 4) of
 * 64 x 32 (gates/7e/gemm_f16_variants.cu also builds a 4-warp layout of 64 x 64 to time it against). Shared rows are BK
 * halves; chunk c of row r is stored at c ^ ((r >> 1) & 3) (64-byte rows) or c ^ (r & 7)
 * (128-byte rows), so the eight rows one ldmatrix phase reads hit eight distinct 16-byte
 * bank groups. Both operands are k-contiguous, so no ldmatrix needs .trans. Every variant
 * runs the same k16 steps in the same order per output: their results are bit-identical
 * (gate_7e checks it; gates/7e/emu_gemm_f16.py checks the order on the host). The wgmma
 * kernel (gemm_f16_wgmma_sm90a.cu) shares the first two kernels and the chunk loop. The device
 * code and the call are in gemm_f16_kernels.cuh, which the gate's variant runner shares. */
#include "phase7e_perf/gemm_f16_kernels.cuh"

extern "C" bool mi7e_gemm_f16_supported(mi_type wt, int64_t K, int64_t M, int64_t N) {
    /* F16, or a type with 7b's quantized dot (its 8 types; K-quants need K % 256) */
    if (wt != MI_TYPE_F16 && mi7b_act_row_bytes(wt, K) == 0) return false;
    if (K <= 0 || K % G_BK || M <= 0 || N <= 0) return false;
    return (N + 63) / 64 <= 0x7fffffff && K <= ((int64_t)1 << 30);
}

extern "C" size_t mi7e_gemm_f16_workspace(mi_type wt, int64_t K, int64_t M, int64_t N) {
    (void)wt;
    if (K <= 0 || M <= 0 || N <= 0) return 0;
    return al256((size_t)N * (size_t)K * 2) + al256((size_t)N * 4) + (size_t)chunk_rows(K, M, 0) * (size_t)K * 2;
}

/* the rule's variants: 8 warps per block, both tiles and depths (the 4-warp layout is the
 * gate's, gates/7e/gemm_f16_variants.cu) */
static gemm_variants g_variants = {{
    {kernel_gemm_f16<64, 32, 4, 8>, 8, G_SMEM(64, 32, 4)},   {NULL, 4, 0},
    {kernel_gemm_f16<64, 64, 3, 8>, 8, G_SMEM(64, 64, 3)},   {NULL, 4, 0},
    {kernel_gemm_f16<128, 32, 4, 8>, 8, G_SMEM(128, 32, 4)}, {NULL, 4, 0},
    {kernel_gemm_f16<128, 64, 3, 8>, 8, G_SMEM(128, 64, 3)}, {NULL, 4, 0},
}, false};

extern "C" mi_status mi7e_gemm_f16(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                                   int64_t K, int64_t M, int64_t N, void *workspace) {
    return gemm_f16_run(stream, wt, w, x, bias, y, K, M, N, workspace, NULL, false, &g_variants);
}

extern "C" bool mi7e_gemm_f16_wgmma_supported(mi_type wt, int64_t K, int64_t M, int64_t N) {
    return mi7e_gemm_f16_supported(wt, K, M, N) && K % 64 == 0 && mi7e_gemm_f16_wgmma_available();
}

extern "C" mi_status mi7e_gemm_f16_wgmma(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                         float *y, int64_t K, int64_t M, int64_t N, void *workspace) {
    return gemm_f16_run(stream, wt, w, x, bias, y, K, M, N, workspace, NULL, true, &g_variants);
}

/* Streaming one-token (N = 1) matmul for Q4_K weights and the fused FFN gate/up + SwiGLU.
 * Each warp streams whole rows straight from global memory with 16-byte loads, every load of
 * an iteration issued before the arithmetic that needs it; the Q8_K activation is staged once
 * per block in shared memory (the only barrier, and the first iteration's weight loads are
 * already in flight across it). Built with --fmad=false (_exact): per unit the expression of
 * mi7b_unit_dot, bit for bit (gates/7e/emu_matvec_q4k.py). The QX form quantizes the f32 x
 * into that shared row itself, with 7b's Q8_K arithmetic (quant_q8_k_warp of quant_act.cuh),
 * instead of reading a row mi7b_quantize_act wrote: one launch fewer per call, bit-identical
 * results. */
#include "phase7e_perf/matvec_q4k.h"
#include "phase7e_perf/matvec_q4k_kernel.cuh"

/* ---------------- launchers ---------------- */

extern "C" bool mi7e_matvec_q4k_supported(mi_type wt, int64_t K, int64_t N) {
    return wt == MI_TYPE_Q4_K && N == 1 && K > 0 && K % 256 == 0 && (size_t)(K / 256) * AK_BYTES <= Q4K_SMEM_MAX;
}

extern "C" size_t mi7e_matvec_q4k_workspace(mi_type wt, int64_t K) { return mi7b_act_row_bytes(wt, K); }

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

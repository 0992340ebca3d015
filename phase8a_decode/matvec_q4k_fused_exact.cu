/* The streaming one-token Q4_K matmul and fused FFN head of 7e (matvec_q4k_kernel.cuh) with
 * their neighbours folded in: the RMS norm that feeds them, applied while x is quantized in the
 * block (NORM), and the residual add after them (RES: y = r + W @ x). Same kernel, same
 * per-row order: the results equal 7e's _qx forms after a separate RMS norm and before a
 * separate add, bit for bit (built with --fmad=false, as they are). Every form is built to be
 * launched as a programmatic dependent, and is when item d6 is on (mi8a_pdl_on). */
#include "phase7e_perf/matvec_q4k.h"
#include "phase7e_perf/matvec_q4k_kernel.cuh"
#include "phase8a_decode/decode8a.h"

extern "C" bool mi8a_matvec_q4k_fused_supported(mi_type wt, int64_t K, bool norm) {
    return mi7e_matvec_q4k_supported(wt, K, 1) && q4k_smem(K, norm) <= Q4K_SMEM_MAX;
}

/* 16-byte loads of the weights and of x (and of the norm weight) need 16-byte aligned bases */
static bool aligned16(const void *p) { return !((uintptr_t)p & 15u); }

extern "C" mi_status mi8a_matvec_q4k_fused(void *stream, mi_type wt, const void *w, const float *x, const float *nw,
                                           float eps, const float *bias, const float *r, float *y, int64_t K,
                                           int64_t M) {
    if (!mi8a_matvec_q4k_fused_supported(wt, K, nw != NULL) || M <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_matvec_q4k_fused: type %s, K = %lld, M = %lld", mi_type_name(wt),
                      (long long)K, (long long)M);
    if (!w || !x || !y) return mi_err(MI_ERR_INVALID, "mi8a_matvec_q4k_fused: null pointer");
    if (!aligned16(w) || !aligned16(x) || (nw && !aligned16(nw)))
        return mi8a_matvec_fused(stream, wt, w, x, nw, eps, bias, r, y, K, M);
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *wb = (const uint8_t *)w;
    const bool pdl = mi8a_pdl_on();
    if (nw && r) return launch_q4k<false, true, true, true, true>(st, wb, wb, NULL, x, bias, y, K, M, nw, eps, r, pdl);
    if (nw) return launch_q4k<false, true, true, false, true>(st, wb, wb, NULL, x, bias, y, K, M, nw, eps, NULL, pdl);
    if (r) return launch_q4k<false, true, false, true, true>(st, wb, wb, NULL, x, bias, y, K, M, NULL, 0.0f, r, pdl);
    return launch_q4k<false, true, false, false, true>(st, wb, wb, NULL, x, bias, y, K, M, NULL, 0.0f, NULL, pdl);
}

extern "C" mi_status mi8a_ffn_q4k_fused(void *stream, mi_type wt, const void *wg, const void *wu, const float *x,
                                        const float *nw, float eps, float *y, int64_t K, int64_t F) {
    if (!mi8a_matvec_q4k_fused_supported(wt, K, true) || F <= 0 || !nw)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_ffn_q4k_fused: type %s, K = %lld, F = %lld", mi_type_name(wt),
                      (long long)K, (long long)F);
    if (!wg || !wu || !x || !y) return mi_err(MI_ERR_INVALID, "mi8a_ffn_q4k_fused: null pointer");
    if (!aligned16(wg) || !aligned16(wu) || !aligned16(x) || !aligned16(nw))
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_ffn_q4k_fused: base not 16-byte aligned");
    return launch_q4k<true, true, true, false, true>((cudaStream_t)stream, (const uint8_t *)wg, (const uint8_t *)wu, NULL,
                                                     x, NULL, y, K, F, nw, eps, NULL, mi8a_pdl_on());
}

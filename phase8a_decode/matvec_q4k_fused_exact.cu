/* The streaming one-token Q4_K matmul and fused FFN head of 7e (matvec_q4k_kernel.cuh) with
 * their neighbours folded in: the RMS norm that feeds them, applied while x is quantized in the
 * block (NORM), and the residual add after them (RES: y = r + W @ x). Same kernel, same
 * per-row order: the results equal 7e's _qx forms after a separate RMS norm and before a
 * separate add, bit for bit (built with --fmad=false, as they are). Every form is built to be
 * launched as a programmatic dependent, and is when item d6 is on (mi8a_pdl_on). */
#include "phase7e_perf/matvec_q4k.h"
#include "phase7e_perf/matvec_q4k_kernel.cuh"
#include "phase8a_decode/decode8a.h"
#include "phase8a_decode/run_rows.cuh"

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
    /* d40 (the downs), d41 (o): one block of 32 warps an SM, the rows over every SM */
    if (!nw && mi8a_launch_item_on(K >= MI8A_WIDE_K ? "d40" : "d41")) {
        if (r) return launch_q4k<false, true, false, true, true, Q4K_WIDE, true>(st, wb, wb, NULL, x, bias, y, K, M, NULL, 0.0f, r, pdl);
        return launch_q4k<false, true, false, false, true, Q4K_WIDE, true>(st, wb, wb, NULL, x, bias, y, K, M, NULL, 0.0f, NULL, pdl);
    }
    if (!nw && mi8a_wide_on(K)) {   /* d12: one block of 32 warps an SM */
        if (r) return launch_q4k<false, true, false, true, true, Q4K_WIDE>(st, wb, wb, NULL, x, bias, y, K, M, NULL, 0.0f, r, pdl);
        return launch_q4k<false, true, false, false, true, Q4K_WIDE>(st, wb, wb, NULL, x, bias, y, K, M, NULL, 0.0f, NULL, pdl);
    }
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
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *g = (const uint8_t *)wg, *u = (const uint8_t *)wu;
    if (mi8a_launch_item_on("d39"))   /* one block of 32 warps an SM, rows over every SM */
        return launch_q4k<true, true, true, false, true, Q4K_WIDE, true>(st, g, u, NULL, x, NULL, y, K, F, nw, eps, NULL,
                                                                        mi8a_pdl_on());
    return launch_q4k<true, true, true, false, true>(st, g, u, NULL, x, NULL, y, K, F, nw, eps, NULL, mi8a_pdl_on());
}

/* ---- d13: a run of one-token Q4_K matmuls of one x in one launch (run_rows.cuh) ----
 * Each row is computed exactly as a launch of its own weight computes it (the lane map and order
 * depend on K only), so the outputs equal separate launches bit for bit; x is quantized once a
 * block for all of them. TH, SPREAD: the block and row map (item d42: one block of 32 warps an
 * SM, the rows over every SM). */
template <int TH, bool SPREAD>
__global__ void __launch_bounds__(TH, Q4K_MIN_BLOCKS_OF(TH))
kernel_matvec_q4k_run(const run_rows rows, int64_t M, int nsb, const float *__restrict__ X) {
    matvec_q4k_rows<false, true, false, false, true, run_rows, TH, SPREAD>(rows, M, nsb, NULL, X, NULL, 0.0f, NULL);
}
/* d17: the same after the RMS norm of x (weight nw), applied while x is quantized in the block as
 * the NORM form of the single matmul applies it: the outputs equal a norm kernel followed by the
 * run above, bit for bit */
template <int TH, bool SPREAD>
__global__ void __launch_bounds__(TH, Q4K_MIN_BLOCKS_OF(TH))
kernel_matvec_q4k_run_norm(const run_rows rows, int64_t M, int nsb, const float *__restrict__ X,
                           const float *__restrict__ nw, float eps) {
    matvec_q4k_rows<false, true, true, false, true, run_rows, TH, SPREAD>(rows, M, nsb, NULL, X, nw, eps, NULL);
}

template <int TH, bool SPREAD>
static mi_status launch_q4k_run(cudaStream_t st, const run_rows &rows, int64_t M, int64_t K, const float *x,
                                const float *nw, float eps) {
    const size_t smem = q4k_smem(K, nw != NULL);
    if (nw) {
        static wave_cache occ_norm;
        const int64_t nb = wave_blocks(occ_norm, kernel_matvec_q4k_run_norm<TH, SPREAD>, TH, smem, M, SPREAD);
        MI_CU_CHECK(pdl_launch(mi8a_pdl_on(), kernel_matvec_q4k_run_norm<TH, SPREAD>, dim3((unsigned)nb), dim3(TH), smem,
                               st, rows, M, (int)(K / 256), x, nw, eps));
    } else {
        static wave_cache occ;
        const int64_t nb = wave_blocks(occ, kernel_matvec_q4k_run<TH, SPREAD>, TH, smem, M, SPREAD);
        MI_CU_CHECK(pdl_launch(mi8a_pdl_on(), kernel_matvec_q4k_run<TH, SPREAD>, dim3((unsigned)nb), dim3(TH), smem, st,
                               rows, M, (int)(K / 256), x));
    }
    MI_CU_CHECK_LAUNCH("kernel_matvec_q4k_run");
    return MI_OK;
}

extern "C" mi_status mi8a_matvec_q4k_run(void *stream, mi_type wt, const mi8a_run_seg *seg, int n, const float *x,
                                         const float *nw, float eps, int64_t K) {
    if (!mi8a_matvec_q4k_fused_supported(wt, K, nw != NULL) || n < 1 || n > MI8A_RUN_MAX)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_matvec_q4k_run: type %s, K = %lld, %d weights", mi_type_name(wt),
                      (long long)K, n);
    if (!x || !seg || !aligned16(x) || (nw && !aligned16(nw)))
        return mi_err(MI_ERR_INVALID, "mi8a_matvec_q4k_run: x or the norm weight null or not 16-byte aligned");
    run_rows rows;
    int64_t M = 0;
    bool ok = run_rows_make(&rows, seg, n, 0, &M);
    for (int i = 0; ok && i < n; i++) ok = aligned16(seg[i].w);
    if (!ok) return mi_err(MI_ERR_INVALID, "mi8a_matvec_q4k_run: a weight null, not 16-byte aligned or without rows");
    const cudaStream_t st = (cudaStream_t)stream;
    if (mi8a_launch_item_on("d42")) return launch_q4k_run<Q4K_WIDE, true>(st, rows, M, K, x, nw, eps);
    return launch_q4k_run<Q4K_THREADS, false>(st, rows, M, K, x, nw, eps);
}

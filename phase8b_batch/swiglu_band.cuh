/* A gate/up run's band pair through the SwiGLU: y = silu (g) u (mi_canon_swiglu) over the rows of
 * gate band bg and the same rows of up (band band0[1] + bg), read where the run wrote a band whole,
 * else summed from its cut band's pieces in kernel_f16s_fixup's order (the first piece, each later
 * one added, then the bias), and stored as y and y's f16 copy (x_f16_copy.cuh). Two callers: b42's
 * SwiGLU kernel after the run (swiglu_f16_exact.cu) and b45's run itself, whose block that finishes
 * a pair's last piece does the pair (gemm_f16_wgmma_sm90a.cu). The same operations in the same
 * order either way (mi_canon_swiglu keeps its bits in any build): the same y and the same halves.
 * The run's outputs are read past L1 (ld.global.cg): in b45 other blocks of the same kernel wrote
 * them. */
#ifndef MI_SWIGLU_BAND_CUH
#define MI_SWIGLU_BAND_CUH
#include <cuda_fp16.h>
#include "common/core/mi_canon.h"
#include "phase8b_batch/f16s_common.cuh"
#include "phase8b_batch/x_f16_copy.cuh"

/* band b's pieces: 1 where the run wrote it whole, else its cut pieces (f16s_band_cut) */
__device__ __forceinline__ int sb_pieces(const f16s_plan &pl, int64_t b) {
    int64_t p, hi;
    return f16s_band_cut<int64_t>(pl, b, p, hi) ? (int)(hi - p + 2) : 1;
}

/* the cut of band b in the plan's narrow or wide integers (f16s_plan_narrow) */
__device__ __forceinline__ bool sb_cut(const f16s_plan &pl, int64_t b, int64_t &p, int64_t &hi) {
    if (f16s_plan_narrow(pl)) {
        uint32_t a, c;
        const bool cut = f16s_band_cut<uint32_t>(pl, (uint32_t)b, a, c);
        p = a, hi = c;
        return cut;
    }
    return f16s_band_cut<int64_t>(pl, b, p, hi);
}

/* four consecutive values of segment s (gate 0, up 1), row m (a multiple of 4; r its row in the
 * band) of a band cut (p .. hi) or whole, token n */
__device__ __forceinline__ float4 sb_values(const f16s_fixup_rec &fx, int s, bool cut, int64_t p, int64_t hi, int r,
                                            int64_t m, int64_t n) {
    const float *Y = s ? fx.run.Y[1] : fx.run.Y[0];
    const float *bias = s ? fx.run.bias[1] : fx.run.bias[0];
    const int64_t M = s ? fx.run.M[1] : fx.run.M[0];
    if (!cut) return __ldcg((const float4 *)(Y + (size_t)n * M + m));
    const size_t slot = (size_t)fx.N * FS_BM, o = (size_t)n * FS_BM + r;
    float4 v = __ldcg((const float4 *)(fx.part + (size_t)(2 * p - 1) * slot + o));
    for (int64_t q = p; q <= hi; q++) {
        const float4 w = __ldcg((const float4 *)(fx.part + (size_t)(2 * q) * slot + o));
        v.x += w.x, v.y += w.y, v.z += w.z, v.w += w.w;
    }
    if (bias) v.x += bias[m], v.y += bias[m + 1], v.z += bias[m + 2], v.w += bias[m + 3];
    return v;
}

/* Gate band bg's pair, tokens n0, n0 + dn, .. below n1, by nthreads threads (a multiple of 32, the
 * caller's thread t): thread t rows 4 (t % 32) .. + 3 of the band, tokens n0 + t / 32 + k dn.
 * y [N][F], xh its copy in form eo. */
__device__ __forceinline__ void sb_pair(const f16s_fixup_rec &fx, int64_t bg, int64_t n0, int64_t n1, int64_t dn,
                                        int t, float *__restrict__ y, __half *__restrict__ xh, int64_t F, bool eo) {
    const int64_t bu = fx.run.band0[1] + bg;
    const int r = 4 * (t % 32);
    const int64_t m = bg * FS_BM + r;
    if (m >= F) return;
    int64_t pg = 0, hg = 0, pu = 0, hu = 0;
    const bool cg = sb_cut(fx.pl, bg, pg, hg), cu = sb_cut(fx.pl, bu, pu, hu);
    for (int64_t n = n0 + t / 32; n < n1; n += dn) {
        const float4 a = sb_values(fx, 0, cg, pg, hg, r, m, n), b = sb_values(fx, 1, cu, pu, hu, r, m, n);
        const float4 v = make_float4(mi_canon_swiglu(a.x, b.x), mi_canon_swiglu(a.y, b.y), mi_canon_swiglu(a.z, b.z),
                                     mi_canon_swiglu(a.w, b.w));
        const size_t e = (size_t)n * F + m;
        *(float4 *)(y + e) = v;
        x_f16_store4(xh, (int64_t)e, v, eo);
    }
}
#endif

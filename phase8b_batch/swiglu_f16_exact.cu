/* Item b35: a batch's FFN at 9..64 rows is its gate and up matmuls, 7b's SwiGLU (y = silu (g) u,
 * mi_canon_swiglu) and the down projection, which reads y as x's f16 copy made by its own copy
 * kernel. Here the
 * SwiGLU writes y and, beside it, that copy (x_f16_copy.cuh): the activation and the copy in one
 * launch. The same function on the same operands, built like 7b's (*_exact.cu: no contraction),
 * and each y rounded to f16 as the copy kernel rounds it: the same y and the same halves.
 * Item b42 (below): the same where the gate/up run before it left its cut bands, each summed here in
 * the fixup's order as the values are read. */
#include <cuda_fp16.h>
#include "common/core/mi_canon.h"
#include "phase7b_ops/dev7b.cuh"
#include "phase8b_batch/batch8b.h"
#include "phase8b_batch/x_f16_copy.cuh"
#include "phase8b_batch/f16s_common.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"

/* a thread four consecutive elements at a time (rows of F % 16 == 0 elements: no 16-element group of
 * the copy crosses a row) */
__global__ void __launch_bounds__(256)
kernel_swiglu_y_f16(const float4 *__restrict__ g, const float4 *__restrict__ u, float4 *__restrict__ y,
                    __half *__restrict__ xh, int64_t quads, bool eo) {
    MI_PDL_ENTRY();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 a = g[i], b = u[i];
        const float4 v = make_float4(mi_canon_swiglu(a.x, b.x), mi_canon_swiglu(a.y, b.y), mi_canon_swiglu(a.z, b.z),
                                     mi_canon_swiglu(a.w, b.w));
        y[i] = v;
        x_f16_store4(xh, 4 * i, v, eo);
    }
}

/* what both launchers take: rows of a multiple of 16 elements, 16-byte aligned operands */
static mi_status sw_check(const char *who, const float *g, const float *u, const float *y, const void *xh, int64_t F,
                          int64_t N) {
    if (F < 16 || F % 16 || N < 1) return mi_err(MI_ERR_UNSUPPORTED, "%s: rows of %lld", who, (long long)F);
    if (!g || !u || !y || !xh) return mi_err(MI_ERR_INVALID, "%s: null pointer", who);
    if (((uintptr_t)g | (uintptr_t)u | (uintptr_t)y | (uintptr_t)xh) & 15)
        return mi_err(MI_ERR_UNSUPPORTED, "%s: operands not 16-byte aligned", who);
    return MI_OK;
}

extern "C" mi_status mi8b_swiglu_y_f16(void *stream, const float *g, const float *u, float *y, void *xh, int64_t F,
                                       int64_t N, bool eo) {
    MI_TRY(sw_check("mi8b_swiglu_y_f16", g, u, y, xh, F, N));
    const int64_t quads = F * N / 4;
    const unsigned gb = (unsigned)((quads + 255) / 256 < 65535 ? (quads + 255) / 256 : 65535);
    (void)pdl_launch(mi8b_pdl_on(), kernel_swiglu_y_f16, dim3(gb), dim3(256), 0, (cudaStream_t)stream,
                     (const float4 *)g, (const float4 *)u, (float4 *)y, (__half *)xh, quads, eo);
    MI_CU_CHECK_LAUNCH("kernel_swiglu_y_f16");
    return MI_OK;
}

/* ---------------- b42: the SwiGLU that also sums the gate/up run's cut bands ---------------- */

#define SF_TOK 16   /* tokens a block: 32 quads (a band's 128 rows) x 8 token lanes x 2 tokens each, 256 threads */

/* four consecutive values of segment s (gate 0, up 1), row m (a multiple of 4) of band b of the
 * run, token n: read where the run wrote its band whole, else its pieces summed in
 * kernel_f16s_fixup's order (the first piece, each later one added, then the bias) */
__device__ __forceinline__ float4 sf_values(const f16s_fixup_rec &fx, int s, bool cut, int64_t p, int64_t hi, int r,
                                            int64_t m, int64_t n) {
    const float *Y = s ? fx.run.Y[1] : fx.run.Y[0];
    const float *bias = s ? fx.run.bias[1] : fx.run.bias[0];
    const int64_t M = s ? fx.run.M[1] : fx.run.M[0];
    if (!cut) return *(const float4 *)(Y + (size_t)n * M + m);
    const size_t slot = (size_t)fx.N * FS_BM, o = (size_t)n * FS_BM + r;
    float4 v = *(const float4 *)(fx.part + (size_t)(2 * p - 1) * slot + o);
    for (int64_t q = p; q <= hi; q++) {
        const float4 w = *(const float4 *)(fx.part + (size_t)(2 * q) * slot + o);
        v.x += w.x, v.y += w.y, v.z += w.z, v.w += w.w;
    }
    if (bias) v.x += bias[m], v.y += bias[m + 1], v.z += bias[m + 2], v.w += bias[m + 3];
    return v;
}

/* block (x, y): band x of the gate (and the same rows of up: band band0[1] + x), tokens SF_TOK y ..;
 * thread t: rows 4 (t % 32) .. + 3 of the band, tokens SF_TOK y + t / 32 and 8 after it, both
 * tokens' loads in flight together. Two tokens a thread keep the 7B's 64-row grid (148 x 4
 * blocks) inside one wave at the blocks a multiprocessor its registers allow; one a thread took
 * a second, short wave. */
__global__ void __launch_bounds__(256)
kernel_swiglu_fixup_f16(const f16s_fixup_rec fx, float *__restrict__ y, __half *__restrict__ xh, int64_t F, bool eo) {
    MI_PDL_ENTRY();
    const int64_t bg = blockIdx.x, bu = fx.run.band0[1] + bg;
    const int r = 4 * (threadIdx.x % 32);
    const int64_t m = bg * FS_BM + r, n0 = (int64_t)blockIdx.y * SF_TOK + threadIdx.x / 32;
    if (m >= F || n0 >= fx.N) return;
    int64_t pg = 0, hg = 0, pu = 0, hu = 0;
    bool cg, cu;
    if (f16s_plan_narrow(fx.pl)) {
        uint32_t a, b, c, d;
        cg = f16s_band_cut<uint32_t>(fx.pl, (uint32_t)bg, a, b);
        cu = f16s_band_cut<uint32_t>(fx.pl, (uint32_t)bu, c, d);
        pg = a, hg = b, pu = c, hu = d;
    } else {
        cg = f16s_band_cut<int64_t>(fx.pl, bg, pg, hg);
        cu = f16s_band_cut<int64_t>(fx.pl, bu, pu, hu);
    }
    const bool two = n0 + SF_TOK / 2 < fx.N;
    const int64_t n1 = two ? n0 + SF_TOK / 2 : n0;   /* a token past N reads token n0 again and stores nothing */
    const float4 a0 = sf_values(fx, 0, cg, pg, hg, r, m, n0), b0 = sf_values(fx, 1, cu, pu, hu, r, m, n0);
    const float4 a1 = sf_values(fx, 0, cg, pg, hg, r, m, n1), b1 = sf_values(fx, 1, cu, pu, hu, r, m, n1);
    const float4 v0 = make_float4(mi_canon_swiglu(a0.x, b0.x), mi_canon_swiglu(a0.y, b0.y), mi_canon_swiglu(a0.z, b0.z),
                                  mi_canon_swiglu(a0.w, b0.w));
    const size_t e0 = (size_t)n0 * F + m;
    *(float4 *)(y + e0) = v0;
    x_f16_store4(xh, (int64_t)e0, v0, eo);
    if (two) {
        const float4 v1 = make_float4(mi_canon_swiglu(a1.x, b1.x), mi_canon_swiglu(a1.y, b1.y),
                                      mi_canon_swiglu(a1.z, b1.z), mi_canon_swiglu(a1.w, b1.w));
        const size_t e1 = (size_t)n1 * F + m;
        *(float4 *)(y + e1) = v1;
        x_f16_store4(xh, (int64_t)e1, v1, eo);
    }
}

static uint64_t g_fused_launches;
extern "C" uint64_t mi8b_swiglu_fixup_launches(void) { return g_fused_launches; }

extern "C" mi_status mi8b_swiglu_fixup_f16(void *stream, const float *g, const float *u, float *y, void *xh, int64_t F,
                                           int64_t N, bool eo) {
    MI_TRY(sw_check("mi8b_swiglu_fixup_f16", g, u, y, xh, F, N));
    f16s_fixup_rec fx;
    bool taken;
    MI_TRY(f16s_fixup_take((cudaStream_t)stream, g, u, &fx, &taken));
    if (!taken) return mi_err(MI_ERR_UNSUPPORTED, "mi8b_swiglu_fixup_f16: no run left its cut bands for these operands");
    const int64_t bands = (F + FS_BM - 1) / FS_BM;
    if (fx.N != N || fx.run.M[0] != F || fx.run.M[1] != F || fx.run.band0[1] != bands)
        return mi_err(MI_ERR_INTERNAL, "mi8b_swiglu_fixup_f16: the run's shapes (%lld + %lld rows, %lld tokens) are not "
                      "the SwiGLU's (%lld, %lld)", (long long)fx.run.M[0], (long long)fx.run.M[1], (long long)fx.N,
                      (long long)F, (long long)N);
    const dim3 grid((unsigned)bands, (unsigned)((N + SF_TOK - 1) / SF_TOK));
    (void)pdl_launch(mi8b_pdl_on(), kernel_swiglu_fixup_f16, grid, dim3(256), 0, (cudaStream_t)stream, fx, y,
                     (__half *)xh, F, eo);
    MI_CU_CHECK_LAUNCH("kernel_swiglu_fixup_f16");
    g_fused_launches++;
    return MI_OK;
}

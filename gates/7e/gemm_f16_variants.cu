/* gates/7e/gemm_f16_variants.h: the library's GEMM call (phase7e_perf/gemm_f16_kernels.cuh)
 * over a table of all eight variants. */
#include "gates/7e/gemm_f16_variants.h"
#include "phase7e_perf/gemm_f16_kernels.cuh"

/* index (bn == 128) * 4 + (bk == 64) * 2 + (nw == 4) */
static gemm_variants g_all = {{
    {kernel_gemm_f16<64, 32, 4, 8>, 8, G_SMEM(64, 32, 4)},   {kernel_gemm_f16<64, 32, 4, 4>, 4, G_SMEM(64, 32, 4)},
    {kernel_gemm_f16<64, 64, 3, 8>, 8, G_SMEM(64, 64, 3)},   {kernel_gemm_f16<64, 64, 3, 4>, 4, G_SMEM(64, 64, 3)},
    {kernel_gemm_f16<128, 32, 4, 8>, 8, G_SMEM(128, 32, 4)}, {kernel_gemm_f16<128, 32, 4, 4>, 4, G_SMEM(128, 32, 4)},
    {kernel_gemm_f16<128, 64, 3, 8>, 8, G_SMEM(128, 64, 3)}, {kernel_gemm_f16<128, 64, 3, 4>, 4, G_SMEM(128, 64, 3)},
}, false};

extern "C" mi_status gate_gemm_f16_run(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                       float *y, int64_t K, int64_t M, int64_t N, void *workspace,
                                       const gate_gemm_f16_opts *o) {
    const gemm_f16_opts d = o ? gemm_f16_opts{o->tile, o->depth, o->warps, o->chunk} : gemm_f16_opts{0, 0, 0, 0};
    return gemm_f16_run(stream, wt, w, x, bias, y, K, M, N, workspace, &d, false, &g_all);
}

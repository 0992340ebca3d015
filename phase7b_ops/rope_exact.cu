/* RoPE, NORMAL (pairs 2i, 2i+1) and NEOX (pairs i, i + n_rot/2), with the angle of
 * docs/NUMERICS.md: inv_freq = (float)pow(base, -2i/n_rot) in double, theta = (float)pos
 * * inv_freq in float, cos/sin in double rounded to float; products rounded before the
 * add (built with --fmad=false), so it matches the CPU bit for bit but for rare 1-ulp
 * cases where double cos/sin land on a float rounding boundary. Dims >= n_rot pass. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "common/graph/graph.h"

/* x [hd*H, N], pos [N] -> y; thread per output element */
__global__ void kernel_rope(const float *__restrict__ x, const int32_t *__restrict__ pos,
                            float *__restrict__ y, int64_t hd, int64_t H, int64_t N, int neox,
                            int n_rot, float freq_base) {
    const int64_t total = hd * H * N;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t d = e % hd, n = e / (hd * H);
        const float *xh = x + (e - d);
        if (d >= n_rot) { y[e] = xh[d]; continue; }
        int64_t i, d0, d1;
        if (neox) {
            const int64_t half = n_rot / 2;
            i = d < half ? d : d - half;
            d0 = i;
            d1 = i + half;
        } else {
            i = d / 2;
            d0 = 2 * i;
            d1 = 2 * i + 1;
        }
        const float inv_freq = (float)pow((double)freq_base, -2.0 * (double)i / (double)n_rot);
        const float theta = (float)pos[n] * inv_freq;
        const float c = (float)cos((double)theta), s = (float)sin((double)theta);
        const float x0 = xh[d0], x1 = xh[d1];
        y[e] = d == d0 ? x0 * c - x1 * s : x0 * s + x1 * c;
    }
}

extern "C" mi_status mi7b_rope(void *stream, const float *x, const int32_t *pos, float *y,
                               int64_t hd, int64_t H, int64_t N, int mode, int n_rot, float freq_base) {
    if (hd <= 0 || H <= 0 || N <= 0 || n_rot <= 0 || n_rot > hd || (n_rot & 1))
        return mi_err(MI_ERR_INVALID, "mi7b_rope: hd %lld, n_rot %d", (long long)hd, n_rot);
    if (mode != MI_ROPE_NORMAL && mode != MI_ROPE_NEOX)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7b_rope: mode %d", mode);
    const int64_t total = hd * H * N;
    kernel_rope<<<mi7b_blocks(total, 256), 256, 0, (cudaStream_t)stream>>>(
        x, pos, y, hd, H, N, mode == MI_ROPE_NEOX, n_rot, freq_base);
    MI_CU_CHECK_LAUNCH("kernel_rope");
    return MI_OK;
}

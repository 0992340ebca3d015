/* RoPE with the angle of docs/NUMERICS.md (mi_canon_rope_cs), a thread per rotated pair
 * (item d8). 7b's kernel gives every output element a thread that computes the pair's
 * inverse frequency (a double pow), then cos and sin in double: at one token the launch is
 * a few blocks whose time is that chain of double-precision calls. Here the inverse
 * frequencies, which depend only on (base, n_rot), come with the launch, computed on the
 * host by the CPU's expression once per (base, n_rot); a thread takes one pair and
 * computes cos and sin once for both its elements. The products and the add are rounded
 * as 7b's (built without FMA contraction): bit-identical to 7b's kernel wherever the
 * host's pow and the device's round to the same float, which gate_8a checks for the
 * models' bases, and then equal to the CPU's. Dims >= n_rot are copied. */
#include "phase7b_ops/dev7b.cuh"
#include "phase8a_decode/decode8a.h"
#include "common/graph/graph.h"
#include <math.h>
#include <string.h>
#include "phase7a_skeleton/cuda_pdl.cuh"

typedef struct {
    float f[MI8A_ROPE_MAX_PAIRS];
} rope_freqs;

/* x [hd*H, N], pos [N] -> y. Thread t < pairs * H * N: pair t % half of head (t / half) % H of
 * token t / (half * H); threads past that copy the unrotated dims (hd - n_rot of each head). */
__global__ void kernel_rope_pairs(const float *__restrict__ x, const int32_t *__restrict__ pos,
                                  float *__restrict__ y, int64_t hd, int64_t H, int64_t N, int neox, int n_rot,
                                  const rope_freqs fq) {
    MI_PDL_ENTRY();
    const int64_t half = n_rot / 2, rot = half * H * N, pass = (hd - n_rot) * H * N;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < rot + pass; t += stride) {
        if (t >= rot) {
            const int64_t u = t - rot, w = hd - n_rot, d = n_rot + u % w, row = u / w;
            y[row * hd + d] = x[row * hd + d];
            continue;
        }
        const int64_t i = t % half, row = t / half, n = row / H;   /* row: head (token n, head row % H) */
        const int64_t d0 = neox ? i : 2 * i, d1 = neox ? i + half : 2 * i + 1;
        const float theta = (float)pos[n] * fq.f[i];
        double sd, cd;
        sincos((double)theta, &sd, &cd);
        const float c = (float)cd, s = (float)sd;
        const float *xh = x + row * hd;
        const float x0 = xh[d0], x1 = xh[d1];
        y[row * hd + d0] = x0 * c - x1 * s;
        y[row * hd + d1] = x0 * s + x1 * c;
    }
}

/* the table for (base, n_rot): the CPU's expression (mi_canon_rope_cs), kept for the last
 * pair of values this thread launched with */
static const rope_freqs *freqs_for(float base, int n_rot) {
    static thread_local rope_freqs tab;
    static thread_local float t_base = -1.0f;
    static thread_local int t_rot = 0;
    if (t_rot != n_rot || memcmp(&t_base, &base, sizeof base) != 0) {
        for (int i = 0; i < n_rot / 2; i++)
            tab.f[i] = (float)pow((double)base, -2.0 * (double)i / (double)n_rot);
        t_base = base;
        t_rot = n_rot;
    }
    return &tab;
}

extern "C" bool mi8a_rope_pairs_supported(int64_t hd, int n_rot, int mode) {
    return hd > 0 && n_rot > 0 && n_rot <= hd && n_rot % 2 == 0 && n_rot / 2 <= MI8A_ROPE_MAX_PAIRS &&
           (mode == MI_ROPE_NORMAL || mode == MI_ROPE_NEOX);
}

extern "C" mi_status mi8a_rope_pairs(void *stream, const float *x, const int32_t *pos, float *y, int64_t hd, int64_t H,
                                     int64_t N, int mode, int n_rot, float freq_base) {
    if (!mi8a_rope_pairs_supported(hd, n_rot, mode) || H <= 0 || N <= 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_rope_pairs: hd %lld, n_rot %d, mode %d", (long long)hd, n_rot, mode);
    const int64_t total = (int64_t)(n_rot / 2) * H * N + (hd - n_rot) * H * N;
    MI_CU_CHECK(MI_PDL_LAUNCH(kernel_rope_pairs, mi7b_blocks(total, 128), 128, 0, (cudaStream_t)stream, x, pos, y, hd,
                              H, N, mode == MI_ROPE_NEOX, n_rot, *freqs_for(freq_base, n_rot)));
    MI_CU_CHECK_LAUNCH("kernel_rope_pairs");
    return MI_OK;
}

/* d8's rotation of one RoPE pair, for every kernel that rotates q or k (rope_pairs_exact.cu's
 * kernels, the attention that does its step's RoPE in attn_step.cu). The angle is pos * the
 * pair's inverse frequency (computed on the host by the CPU's expression, mi8a_rope_freqs_for),
 * its cos and sin in double rounded to float, and every product and sum rounded on its own
 * (__fmul_rn, __fadd_rn: never contracted), so a file built with FMA contraction computes the
 * same bits as one built without (the double sincos is libdevice's explicit fma sequence under
 * either flag). */
#ifndef MI_ROPE_ROTATE_CUH
#define MI_ROPE_ROTATE_CUH
#include "phase8a_decode/decode8a.h"

typedef struct {
    float f[MI8A_ROPE_MAX_PAIRS];
} rope_freqs;

/* the inverse frequencies for (base, n_rot), the CPU's expression; the table is this host
 * thread's, kept for the last pair of values asked for */
const rope_freqs *mi8a_rope_freqs_for(float base, int n_rot);

/* elements d0, d1 of one head (xh) rotated by theta = pos * inv_freq */
__device__ __forceinline__ float2 rope_rotate_pair(const float *__restrict__ xh, int64_t d0, int64_t d1, float pos,
                                                   float inv_freq) {
    double sd, cd;
    sincos((double)__fmul_rn(pos, inv_freq), &sd, &cd);
    const float c = (float)cd, s = (float)sd;
    const float x0 = xh[d0], x1 = xh[d1];
    return make_float2(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)), __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c)));
}

/* element e of one head x at position pos as d8 rotates it: e < n_rot / 2 the pair e (dims d0, d1
 * by the mode), else the kept dim d0 = n_rot + e - n_rot / 2 (d1 = -1), copied */
struct rope_elem {
    int d0, d1;
    float y0, y1;
};
__device__ __forceinline__ rope_elem rope_head_elem(const float *__restrict__ x, int e, int n_rot, bool neox, float pos,
                                                    const rope_freqs &fq) {
    const int half = n_rot / 2;
    rope_elem r;
    r.d1 = -1, r.y1 = 0.0f;
    if (e < half) {
        r.d0 = neox ? e : 2 * e, r.d1 = neox ? e + half : 2 * e + 1;
        const float2 v = rope_rotate_pair(x, r.d0, r.d1, pos, fq.f[e]);
        r.y0 = v.x, r.y1 = v.y;
    } else {
        r.d0 = n_rot + (e - half);
        r.y0 = x[r.d0];
    }
    return r;
}

#endif

/* Query-tiled prefill attention. 7b's kernel gives every (query, head)
 * its own block, so each query re-reads all its keys and values from L2 (17 ms/layer at
 * 2048 tokens on the 7B). Here a block takes 16 consecutive queries of one head and walks
 * the keys in tiles of 32 staged in shared memory (F16 widened exactly to F32), so a tile
 * is read once for 16 queries. Same arithmetic as 7b per query: s_j = scale * dot(q, k_j)
 * in F32, online softmax with expf, out = sum p_j v_j / sum p_j; causal: query i (position
 * n_past + i) sees keys 0 .. n_past + i. Decode-sized batches keep the 7b/7d kernel. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7e_perf/perf7e.h"

#define AT_BQ 16     /* queries per block (4 per warp) */
#define AT_BK 32     /* keys per tile (one per lane) */
#define AT_HD 128    /* largest head_dim handled */

template <typename KT>
__device__ __forceinline__ float kv_ld(const KT *p, size_t i);
template <> __device__ __forceinline__ float kv_ld<float>(const float *p, size_t i) { return p[i]; }
template <> __device__ __forceinline__ float kv_ld<__half>(const __half *p, size_t i) { return __half2float(p[i]); }

/* q [hd*Hq, N], caches [hd*Hkv, n_ctx] -> o [hd*Hq, N]; grid (ceil(N/16), Hq), 128 threads */
template <typename KT, int DPL>
__global__ void __launch_bounds__(128)
kernel_attn_tiled(const float *__restrict__ q, const KT *__restrict__ kc, const KT *__restrict__ vc, float *__restrict__ o,
              int64_t N, int64_t n_past, int64_t Hq, int64_t Hkv, float scale) {
    constexpr int hd = 32 * DPL;
    __shared__ float sQ[AT_BQ][AT_HD];
    __shared__ float sK[AT_BK][AT_HD + 1];   /* +1: lane j reads row j, conflict-free */
    __shared__ float sV[AT_BK][AT_HD];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t i0 = (int64_t)blockIdx.x * AT_BQ, h = blockIdx.y;
    const int64_t kvh = h / (Hq / Hkv);
    const size_t qrow = (size_t)(hd * Hq), kvrow = (size_t)(hd * Hkv);
    for (int e = tid; e < AT_BQ * hd; e += 128) {
        const int qi = e / hd, d = e % hd;
        sQ[qi][d] = i0 + qi < N ? q[(size_t)(i0 + qi) * qrow + (size_t)h * hd + d] : 0.0f;
    }
    const int64_t i_last = (i0 + AT_BQ < N ? i0 + AT_BQ : N) - 1;
    const int64_t kv_len = n_past + i_last + 1;   /* keys any query of the block sees */
    float m[4], l[4], acc[4][DPL];
#pragma unroll
    for (int r = 0; r < 4; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < DPL; c++) acc[r][c] = 0.0f;
    }
    for (int64_t j0 = 0; j0 < kv_len; j0 += AT_BK) {
        __syncthreads();   /* previous tile consumed (and sQ written, first time) */
        for (int e = tid; e < AT_BK * hd; e += 128) {
            const int j = e / hd, d = e % hd;
            const int64_t kp = j0 + j;
            float kv = 0.0f, vv = 0.0f;
            if (kp < kv_len) {
                const size_t off = (size_t)kp * kvrow + (size_t)kvh * hd + d;
                kv = kv_ld<KT>(kc, off);
                vv = kv_ld<KT>(vc, off);
            }
            sK[j][d] = kv;
            sV[j][d] = vv;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int qi = warp * 4 + r;
            const int64_t i = i0 + qi;
            if (i >= N) continue;                 /* warp-uniform */
            const int64_t pos = n_past + i;
            if (j0 > pos) continue;               /* every key of the tile is in this query's future */
            float s = 0.0f;
#pragma unroll 8
            for (int d = 0; d < hd; d++) s += sQ[qi][d] * sK[lane][d];
            const bool vis = j0 + lane <= pos;
            s = vis ? scale * s : -INFINITY;
            const float mn = fmaxf(m[r], warp_max(s));   /* finite: key j0 is visible */
            const float p = vis ? expf(s - mn) : 0.0f;
            const float alpha = expf(m[r] - mn);          /* 0 on the first tile (m = -inf) */
            l[r] = l[r] * alpha + warp_sum(p);
#pragma unroll
            for (int c = 0; c < DPL; c++) acc[r][c] *= alpha;
#pragma unroll 4
            for (int jj = 0; jj < AT_BK; jj++) {
                const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
                for (int c = 0; c < DPL; c++) acc[r][c] += pj * sV[jj][lane + 32 * c];
            }
            m[r] = mn;
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int64_t i = i0 + warp * 4 + r;
        if (i >= N) continue;
        const float inv = 1.0f / l[r];
#pragma unroll
        for (int c = 0; c < DPL; c++) o[(size_t)i * qrow + (size_t)h * hd + lane + 32 * c] = acc[r][c] * inv;
    }
}

extern "C" bool mi7e_attn_tiled_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype, int64_t N) {
    return hd > 0 && hd <= AT_HD && hd % 32 == 0 && Hkv > 0 && Hq % Hkv == 0 && Hq <= 65535 &&
           (ctype == MI_TYPE_F16 || ctype == MI_TYPE_F32) && N >= MI7E_ATTN_MIN_N;
}

template <typename KT>
static mi_status launch_attn(cudaStream_t st, const float *q, const void *k, const void *v, float *o, int64_t N,
                             int64_t n_past, int64_t hd, int64_t Hq, int64_t Hkv, float scale) {
    const int64_t gx = (N + AT_BQ - 1) / AT_BQ;
    if (gx > 0x7fffffff) return mi_err(MI_ERR_INVALID, "mi7e_attn_tiled: N = %lld too large", (long long)N);
    dim3 grid((unsigned)gx, (unsigned)Hq);
    const KT *kc = (const KT *)k, *vc = (const KT *)v;
    switch (hd / 32) {
    case 1: kernel_attn_tiled<KT, 1><<<grid, 128, 0, st>>>(q, kc, vc, o, N, n_past, Hq, Hkv, scale); break;
    case 2: kernel_attn_tiled<KT, 2><<<grid, 128, 0, st>>>(q, kc, vc, o, N, n_past, Hq, Hkv, scale); break;
    case 3: kernel_attn_tiled<KT, 3><<<grid, 128, 0, st>>>(q, kc, vc, o, N, n_past, Hq, Hkv, scale); break;
    default: kernel_attn_tiled<KT, 4><<<grid, 128, 0, st>>>(q, kc, vc, o, N, n_past, Hq, Hkv, scale); break;
    }
    MI_CU_CHECK_LAUNCH("kernel_attn_tiled");
    return MI_OK;
}

extern "C" mi_status mi7e_attn_tiled(void *stream, const float *q, const void *k, const void *v, mi_type ctype,
                                     float *o, int64_t N, int64_t n_past, int64_t hd, int64_t Hq, int64_t Hkv,
                                     float scale) {
    if (!mi7e_attn_tiled_supported(hd, Hq, Hkv, ctype, N) || n_past < 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_attn_tiled: hd %lld, Hq %lld, Hkv %lld, N %lld", (long long)hd,
                      (long long)Hq, (long long)Hkv, (long long)N);
    cudaStream_t st = (cudaStream_t)stream;
    if (ctype == MI_TYPE_F16) return launch_attn<__half>(st, q, k, v, o, N, n_past, hd, Hq, Hkv, scale);
    return launch_attn<float>(st, q, k, v, o, N, n_past, hd, Hq, Hkv, scale);
}

/* One warp's part of a block of four on the tensor cores, for one query row's G heads (a GQA
 * group of up to 16) over tiles of keys: shared by d22's split decode attention
 * (attn_split_mma.cu) and 8b's paged attention (phase8b_batch/attn_paged.cu, item b7), which
 * differ only in where the K and V rows come from and where the result goes. A warp takes 16
 * keys of a 64-key tile:
 *   S[16 rows x 16 keys] = Q[16 x hd] K^T      m16n8k16, the heads as rows (the rest zero), K's
 *                                              rows from shared memory (ldmatrix)
 *   online softmax per row over the warp's keys (running max and sum in registers)
 *   O[16 x hd] += P[16 x 16 keys] V[16 x hd]   P from S's accumulators (the A layout is S's C
 *                                              layout), V's rows through ldmatrix.trans
 * q and P are f32 values: each is split into an f16 high part and an f16 remainder, and both
 * multiply the f16 cache (two mma a product), so the products carry about 22 bits; the sums are
 * the tensor cores' f32 accumulation. Tiles are MMA_TK rows of MMA_LD(HD) halves (rows padded by
 * 16 bytes so ldmatrix's eight row addresses fall in distinct banks). At the end the four warps'
 * states merge in warp order through shared memory. Fixed orders: bit-identical run to run.
 * Include from .cu files only. */
#ifndef MI_ATTN_MMA_TILE_CUH
#define MI_ATTN_MMA_TILE_CUH
#include <cuda_fp16.h>
#include <stdint.h>
#include "phase7e_perf/mma_f16.cuh"

#define MMA_THREADS 128             /* four warps */
#define MMA_TK 64                   /* keys a tile: 16 a warp */
#define MMA_LD(HD) ((HD) + 8)       /* halves a tile row */

/* 16 bytes global -> shared, or 16 zero bytes when !ok (nothing read) */
__device__ __forceinline__ void cp16_or_zero(void *smem, const void *gmem, bool ok) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gmem), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *(uint32_t *)&h; }
/* x0, x1 -> their f16 pair and the f16 pair of what that leaves */
__device__ __forceinline__ void split2(float x0, float x1, uint32_t &hi, uint32_t &lo) {
    const __half2 h = __floats2half2_rn(x0, x1);
    const float2 hf = __half22float2(h);
    hi = h2_bits(h);
    lo = h2_bits(__floats2half2_rn(x0 - hf.x, x1 - hf.y));
}

/* The fragments both layouts read from a tile: K's rows for k-step k (b[0..1] keys 0-7, b[2..3]
 * keys 8-15, as the B operand of S = Q K^T) and V's rows for n-tiles n, n + 1 (through
 * ldmatrix.trans, the B operand of O += P V); kt and vt point at the warp's first row */
template <int HD> __device__ __forceinline__ void mma_k_frag(uint32_t (&b)[4], const uint16_t *kt, int k) {
    const int lane = threadIdx.x & 31, mi = lane >> 3;
    ldsm_x4(b, kt + ((mi >> 1) * 8 + (lane & 7)) * MMA_LD(HD) + k * 16 + (mi & 1) * 8);
}
template <int HD> __device__ __forceinline__ void mma_v_frag(uint32_t (&b)[4], const uint16_t *vt, int n) {
    const int lane = threadIdx.x & 31, mi = lane >> 3;
    ldsm_x4_trans(b, vt + ((mi & 1) * 8 + (lane & 7)) * MMA_LD(HD) + n * 8 + (mi >> 1) * 8);
}

/* a warp's running state: o for rows g, g + 8 (heads) and its lane's columns, max and sum a row */
template <int HD> struct mma_state {
    uint32_t qh[HD / 16][4], ql[HD / 16][4];   /* q as A fragments, high and low halves */
    float o[HD / 8][4];
    float m_r[2], l_r[2];
};

/* q of the G heads (rows of HD floats from qb) as A fragments: rows g, g + 8 while < G; o, m, l
 * cleared */
template <int HD> __device__ __forceinline__ void mma_begin(mma_state<HD> &st, const float *qb, int G) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int k = 0; k < HD / 16; k++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int row = g + (j & 1) * 8, col = k * 16 + 2 * c + (j >> 1) * 8;
            const float *qr = qb + (size_t)row * HD + col;
            const float x0 = row < G ? qr[0] : 0.0f, x1 = row < G ? qr[1] : 0.0f;
            split2(x0, x1, st.qh[k][j], st.ql[k][j]);
        }
#pragma unroll
    for (int n = 0; n < HD / 8; n++) st.o[n][0] = st.o[n][1] = st.o[n][2] = st.o[n][3] = 0.0f;
    st.m_r[0] = st.m_r[1] = -INFINITY;
    st.l_r[0] = st.l_r[1] = 0.0f;
}

/* the warp's 16 keys of a tile: kt and vt point at the warp's first K and V rows in shared
 * memory, kw is its first key's index, keys from k1 on are masked */
template <int HD>
__device__ __forceinline__ void mma_keys(mma_state<HD> &st, const uint16_t *kt, const uint16_t *vt, int64_t kw,
                                         int64_t k1, float scale) {
    constexpr int KS = HD / 16, NT = HD / 8;
    const int lane = threadIdx.x & 31, c = lane & 3;
    /* scores of the warp's 16 keys: n-tile 0 keys 0-7, n-tile 1 keys 8-15 */
    float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int k = 0; k < KS; k++) {
        uint32_t b[4];
        mma_k_frag<HD>(b, kt, k);
        mma_f16_16816(sc[0], st.qh[k], b[0], b[1]);
        mma_f16_16816(sc[0], st.ql[k], b[0], b[1]);
        mma_f16_16816(sc[1], st.qh[k], b[2], b[3]);
        mma_f16_16816(sc[1], st.ql[k], b[2], b[3]);
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t key = kw + n * 8 + 2 * c + (j & 1);
            sc[n][j] = key < k1 ? scale * sc[n][j] : -INFINITY;
            mx[j >> 1] = fmaxf(mx[j >> 1], sc[n][j]);
        }
    float corr[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; r++) {   /* the four lanes of a quad hold one row's 16 keys */
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float mn = fmaxf(st.m_r[r], mx[r]);
        corr[r] = mn == -INFINITY ? 1.0f : expf(st.m_r[r] - mn);
        st.m_r[r] = mn;
    }
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float mn = st.m_r[j >> 1];
            sc[n][j] = mn == -INFINITY ? 0.0f : expf(sc[n][j] - mn);
            sum[j >> 1] += sc[n][j];
        }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
        st.l_r[r] = st.l_r[r] * corr[r] + sum[r];
    }
#pragma unroll
    for (int n = 0; n < NT; n++) {
        st.o[n][0] *= corr[0];
        st.o[n][1] *= corr[0];
        st.o[n][2] *= corr[1];
        st.o[n][3] *= corr[1];
    }
    /* P as the A fragment of 16 keys: a0 (g, keys 2c..), a1 (g+8, 2c..), a2 (g, 8+2c..), a3 (g+8, 8+2c..) */
    uint32_t ph[4], pl[4];
    split2(sc[0][0], sc[0][1], ph[0], pl[0]);
    split2(sc[0][2], sc[0][3], ph[1], pl[1]);
    split2(sc[1][0], sc[1][1], ph[2], pl[2]);
    split2(sc[1][2], sc[1][3], ph[3], pl[3]);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
        uint32_t b[4];
        mma_v_frag<HD>(b, vt, n);
        mma_f16_16816(st.o[n], ph, b[0], b[1]);
        mma_f16_16816(st.o[n], pl, b[0], b[1]);
        mma_f16_16816(st.o[n + 1], ph, b[2], b[3]);
        mma_f16_16816(st.o[n + 1], pl, b[2], b[3]);
    }
}

/* The four warps' states merged in warp order through shared memory sm (m, l [4][16], o
 * [4][16][HD] floats: the tiles' space, after the last tile's barrier), then for each of the G
 * heads and HD dims: out(h, d, M, L, acc) with the merged max, sum and unnormalized value. Every
 * thread of the block calls it, after its warp wrote its rows (both mma_merge). */
template <int HD, typename Out> __device__ __forceinline__ void mma_merge_rows(const float *sm, int G, Out out) {
    const int tid = threadIdx.x;
    const float *wm = sm, *wl = wm + 4 * 16, *wo = wl + 4 * 16;
    __syncthreads();
    for (int i = tid; i < G * HD; i += MMA_THREADS) {
        const int h = i / HD, d = i - h * HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, wm[w * 16 + h]);
        float L = 0.0f, acc = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            if (wl[w * 16 + h] == 0.0f) continue;   /* a warp that saw no key */
            const float e = expf(wm[w * 16 + h] - M);
            L += wl[w * 16 + h] * e;
            acc += wo[((size_t)w * 16 + h) * HD + d] * e;
        }
        out(h, d, M, L, acc);
    }
}

template <int HD, typename Out>
__device__ __forceinline__ void mma_merge(const mma_state<HD> &st, float *sm, int G, Out out) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    float *wm = sm, *wl = wm + 4 * 16, *wo = wl + 4 * 16;
    if (c == 0) {
        wm[warp * 16 + g] = st.m_r[0];
        wm[warp * 16 + g + 8] = st.m_r[1];
        wl[warp * 16 + g] = st.l_r[0];
        wl[warp * 16 + g + 8] = st.l_r[1];
    }
#pragma unroll
    for (int n = 0; n < HD / 8; n++) {
        float *r0 = wo + ((size_t)warp * 16 + g) * HD + n * 8 + 2 * c, *r1 = r0 + 8 * HD;
        r0[0] = st.o[n][0];
        r0[1] = st.o[n][1];
        r1[0] = st.o[n][2];
        r1[1] = st.o[n][3];
    }
    mma_merge_rows<HD>(sm, G, out);
}

/* ---- Packed (item d34; G <= 8 heads): the same products with q's and P's two f16 parts as
 * the mma's upper and lower 8 rows of one A fragment, where the layout above puts the heads in
 * rows 0-15 and needs two mma for the parts. A score tile is then one chain of HD / 16 mma:
 * rows g hold q_hi k, rows g + 8 q_lo k, added in the thread that holds both (c0 + c2, c1 + c3);
 * P V likewise accumulates P_hi V in rows g and P_lo V in rows g + 8 over all tiles, added at
 * the merge. Half the mma of a tile, and the softmax runs on one row a thread instead of two
 * (the layout above also exponentiates the 16 - G empty heads). mma_begin, mma_keys and
 * mma_merge take either state. ---- */
template <int HD> struct mma_state_packed {
    uint32_t qa[HD / 16][4];   /* a0, a2: q_hi of head g (columns 2c.., 8 + 2c..); a1, a3: q_lo */
    float o[HD / 8][4];        /* c0, c1: P_hi V of head g; c2, c3: P_lo V */
    float m_r, l_r;
};

template <int HD> __device__ __forceinline__ void mma_begin(mma_state_packed<HD> &st, const float *qb, int G) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int k = 0; k < HD / 16; k++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const float *qr = qb + (size_t)g * HD + k * 16 + 2 * c + half * 8;
            const float x0 = g < G ? qr[0] : 0.0f, x1 = g < G ? qr[1] : 0.0f;
            split2(x0, x1, st.qa[k][2 * half], st.qa[k][2 * half + 1]);
        }
#pragma unroll
    for (int n = 0; n < HD / 8; n++) st.o[n][0] = st.o[n][1] = st.o[n][2] = st.o[n][3] = 0.0f;
    st.m_r = -INFINITY;
    st.l_r = 0.0f;
}

template <int HD>
__device__ __forceinline__ void mma_keys(mma_state_packed<HD> &st, const uint16_t *kt, const uint16_t *vt,
                                                int64_t kw, int64_t k1, float scale) {
    constexpr int KS = HD / 16, NT = HD / 8;
    const int lane = threadIdx.x & 31, c = lane & 3;
    float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int k = 0; k < KS; k++) {
        uint32_t b[4];
        mma_k_frag<HD>(b, kt, k);
        mma_f16_16816(sc[0], st.qa[k], b[0], b[1]);
        mma_f16_16816(sc[1], st.qa[k], b[2], b[3]);
    }
    float s[2][2], mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int64_t key = kw + n * 8 + 2 * c + e;
            s[n][e] = key < k1 ? scale * (sc[n][e] + sc[n][e + 2]) : -INFINITY;
            mx = fmaxf(mx, s[n][e]);
        }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(st.m_r, mx);
    const float corr = mn == -INFINITY ? 1.0f : expf(st.m_r - mn);
    st.m_r = mn;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            s[n][e] = mn == -INFINITY ? 0.0f : expf(s[n][e] - mn);
            sum += s[n][e];
        }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    st.l_r = st.l_r * corr + sum;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        st.o[n][0] *= corr;
        st.o[n][1] *= corr;
        st.o[n][2] *= corr;
        st.o[n][3] *= corr;
    }
    /* P as the A fragment: a0 P_hi (keys 2c..), a1 P_lo (keys 2c..), a2 P_hi (8 + 2c..), a3 P_lo */
    uint32_t pa[4];
    split2(s[0][0], s[0][1], pa[0], pa[1]);
    split2(s[1][0], s[1][1], pa[2], pa[3]);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
        uint32_t b[4];
        mma_v_frag<HD>(b, vt, n);
        mma_f16_16816(st.o[n], pa, b[0], b[1]);
        mma_f16_16816(st.o[n + 1], pa, b[2], b[3]);
    }
}

/* mma_merge of the packed state: head g's row is the sum of the two parts' rows */
template <int HD, typename Out>
__device__ __forceinline__ void mma_merge(const mma_state_packed<HD> &st, float *sm, int G, Out out) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    float *wm = sm, *wl = wm + 4 * 16, *wo = wl + 4 * 16;
    if (c == 0) {
        wm[warp * 16 + g] = st.m_r;
        wl[warp * 16 + g] = st.l_r;
    }
#pragma unroll
    for (int n = 0; n < HD / 8; n++) {
        float *r0 = wo + ((size_t)warp * 16 + g) * HD + n * 8 + 2 * c;
        r0[0] = st.o[n][0] + st.o[n][2];
        r0[1] = st.o[n][1] + st.o[n][3];
    }
    mma_merge_rows<HD>(sm, G, out);
}

#endif

/* A batch's matmul at small K with f16 tensor cores: y [N, M] = W [K, M] (Q4_0) @ x [K, N] (+ bias)
 * for K <= 1024 and 9..64 rows (item b12): the 0.5B's q/k/v/o and gate/up (K = 896), which take
 * three launches each through b1's split int8 tile (the activations' quantizer, the tile, the split
 * sum) and are too short for b3's ring (under four stages a band) to fill. A run of such matmuls of
 * one x (item b13: q, k, v; gate, up) is one launch: its bands are numbered across the matmuls.
 * Q8_0 too (item b16: the 0.5B's output head, 151,936 x 896): its int8 elements in order, element j
 * of a unit at byte 2 + j. K past 1024 (item b15: Q4_0, the 0.5B's down) is cut into slices of 28
 * units, a block a slice, whose partial sums a second kernel adds in slice order.
 *
 * One launch after the activations' f16 copy (f16_frag.cuh): every token's whole K stays in a
 * block's shared memory; the block takes bands of BM = 16 RG weight rows (blockIdx.x, then every
 * gridDim.x-th), each loaded as one cp.async group (the aligned 16-byte windows that cover its rows,
 * stream_ring.cuh's gs_window) into one of two buffers while the band before is computed. Its 8 warps
 * are RG row groups of 16 rows x KP = 8 / RG parts of the K units; a warp dequantizes each unit of its
 * two rows per lane into f16 mma fragments (b6's fragment order: a Q4_0 word's low nibbles are
 * elements 4 tig .. 4 tig + 3, its high nibbles 16 + 4 tig ..), for every token. Every warp's sums go
 * to shared memory; the block's threads then add each output's parts in part order and write y (+
 * bias). Up to K = 1024 no split over blocks and no second kernel.
 * RG and the grid: sk_make_plan.
 *
 * Error: b6's f16 tier, the weights (L - 8) d rounded to f16 once and the activations rounded to
 * f16 (docs/NUMERICS.md); gate_8b_matmul_f16 compares it with the exact product. Fixed orders:
 * bit-identical run to run, and a matmul's outputs depend on RG alone (not on the run around it),
 * which a run takes as its matmuls would alone (sk_run_rg), so a run gives each matmul its own bits.
 * The index math is emulated by gates/8b/emu_gemm_f16_small.py. */
#include "common/core/mi_settings.h"
#include "phase7b_ops/dev7b.cuh"
#include "phase7e_perf/perf7e.h"
#include "phase8b_batch/batch8b.h"
#include "phase8b_batch/f16_frag.cuh"
#include "phase8b_batch/stream_ring.cuh"

#define SK_THREADS 256
/* bytes of a unit (32 elements): Q4_0 (d, 16 bytes of nibbles), Q8_0 (d, 32 int8) */
__host__ __device__ constexpr int sk_ub(bool q8) { return q8 ? 34 : 18; }

/* bytes of a weight row's slot (the windows covering it, an odd count: rows on distinct banks) */
__host__ __device__ __forceinline__ int sk_wslot(int64_t K, int ub) { return 16 * ((((int)(K / 32) * ub + 30) / 16) | 1); }
/* bytes of a token's row: 2K and a pad to 32 mod 128, so the 64-bit fragment loads of tokens
 * gid 0..3 (one half-warp) fall on 32 distinct banks */
__host__ __device__ __forceinline__ int sk_astride(int64_t K) { return (int)(2 * K) + (160 - (int)(2 * K) % 128) % 128; }
/* shared memory: every token's row (of a K slice), then two band buffers of 16 RG weight rows,
 * then the eight warps' sums ([part][row group][nt][i][lane] floats) */
__host__ __device__ __forceinline__ size_t sk_x_bytes(int64_t K, int NT) { return (size_t)8 * NT * sk_astride(K); }
__host__ __device__ __forceinline__ size_t sk_band_bytes(int64_t K, int RG, int ub) {
    return (size_t)16 * RG * sk_wslot(K, ub);
}
static size_t sk_smem(int64_t K, int RG, int NT, int ub) {
    return sk_x_bytes(K, NT) + 2 * sk_band_bytes(K, RG, ub) + (size_t)8 * NT * 4 * 32 * sizeof(float);
}

/* the matmuls of one launch: segment s owns bands band0[s] .. band0[s + 1] - 1 of 16 RG rows. K
 * split (one matmul): slice z of S takes K units [z ku, z ku + ku), its block writes y + z N M
 * (no bias) and a second kernel adds the slices. */
struct sk_run {
    int n, S, ku;
    int band0[MI8A_RUN_MAX + 1];
    const uint8_t *w[MI8A_RUN_MAX];
    const float *bias[MI8A_RUN_MAX];
    float *y[MI8A_RUN_MAX];
    int64_t M[MI8A_RUN_MAX];
};

/* the segment of band b and its first row */
__device__ __forceinline__ int sk_seg(const sk_run &run, int b, int64_t *m0, int BM) {
    int s = 0;
    while (s + 1 < run.n && b >= run.band0[s + 1]) s++;
    *m0 = (int64_t)(b - run.band0[s]) * BM;
    return s;
}

/* band b's rows (units [u0, u0 + nu) of each) as one cp.async group into buf; rows past M stay
 * unloaded (their outputs are not written, and an mma's output row reads only its own) */
__device__ __forceinline__ void sk_load_band(uint8_t *buf, const sk_run &run, int b, int BM, size_t wrow, int u0,
                                             int nu, int wslot, int ub) {
    int64_t m0;
    const int s = sk_seg(run, b, &m0, BM);
    const uint8_t *W = run.w[s], *wend = W + (size_t)run.M[s] * wrow;
    const int wch = wslot / 16;
    for (int i = threadIdx.x; i < BM * wch; i += SK_THREADS) {
        const int r = i / wch, c = i - r * wch;
        if (m0 + r < run.M[s])
            gs_window(buf + r * wslot, W + (size_t)(m0 + r) * wrow + (size_t)u0 * ub, nu * ub, c, W, wend);
    }
}

/* the int8 bytes 0 and 2 (sel 0x4240) or 1 and 3 (0x4341) of v (Q8_0) as f16 weights: q d */
__device__ __forceinline__ uint32_t deq_q80(uint32_t v, __half2 d, uint32_t sel) {
    uint32_t h = __byte_perm(v ^ 0x80808080u, 0x64646464u, sel);   /* 1024 + q + 128, exact */
    return h2_bits(__hmul2(__hsub2(*reinterpret_cast<__half2 *>(&h), __half2half2(__ushort_as_half(0x6480))), d));
}

template <int NT, int RG, bool Q8>
__global__ void __launch_bounds__(SK_THREADS, 1)
kernel_gemm_f16_small(const __grid_constant__ sk_run run, const uint8_t *__restrict__ X, const float *__restrict__ Xf,
                      int K, int N) {
    constexpr int KP = 8 / RG, BM = 16 * RG, UB = sk_ub(Q8);
    extern __shared__ __align__(16) uint8_t smem[];
    const int G = gridDim.x / run.S, z = blockIdx.x / G, u0 = z * run.ku;
    const int nu = min(run.ku, K / 32 - u0), Ks = 32 * run.ku;   /* this slice's units; the slices' length */
    const int wslot = sk_wslot(Ks, UB), astr = sk_astride(Ks), bands = run.band0[run.n];
    const size_t wrow = (size_t)(K / 32) * UB, band_bytes = sk_band_bytes(Ks, RG, UB);
    uint8_t *sa = smem, *sw0 = smem + sk_x_bytes(Ks, NT);
    float *red = (float *)(sw0 + 2 * band_bytes);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gid = lane >> 2, tig = lane & 3;

    /* the first band's rows (weights: no kernel writes them, so before b29's programmatic wait),
     * then every token's slice of K (x's f16 copy), one group; the second band the next group;
     * b19 (Xf): x's float slice converted here as kernel_act_f16 converts it (pairs), while the
     * bands' rows are on their way */
    int b = blockIdx.x - z * G;
    if (b < bands) sk_load_band(sw0, run, b, BM, wrow, u0, nu, wslot, UB);
    MI_PDL_ENTRY();
    if (!Xf) {
        const int ach = 2 * 32 * nu / 16;
        for (int i = tid; i < N * ach; i += SK_THREADS) {
            const int n = i / ach, c = i - n * ach;
            async_copy16(sa + n * astr + 16 * c, X + (size_t)n * 2 * K + (size_t)u0 * 64 + 16 * c);
        }
    }
    async_commit();
    if (b + G < bands) sk_load_band(sw0 + band_bytes, run, b + G, BM, wrow, u0, nu, wslot, UB);
    async_commit();
    if (Xf) {
        const int g4 = 8 * nu;   /* groups of four elements in a token's slice */
        for (int i = tid; i < N * g4; i += SK_THREADS) {
            const int n = i / g4, g = i - n * g4;
            const float4 v = __ldg((const float4 *)(Xf + (size_t)n * K + (size_t)u0 * 32) + g);
            __half2 *d = (__half2 *)(sa + n * astr + 8 * g);
            d[0] = __floats2half2_rn(v.x, v.z);
            d[1] = __floats2half2_rn(v.y, v.w);
        }
    }

    const int rg = warp % RG, kp = warp / RG;
    const int r0 = rg * 16 + gid;
    const int upp = (nu + KP - 1) / KP, ka = kp * upp, kb = ka + upp < nu ? ka + upp : nu;
    const uint8_t *xa = sa + gid * astr + 8 * tig;   /* token gid of n-tile 0, group tig */
    for (int it = 0; b < bands; it++, b += G) {
        async_wait<1>();   /* this band's group (and x) landed; the next band's may still fly */
        __syncthreads();
        uint8_t *sw = sw0 + (it & 1) * band_bytes;
        int64_t m0;
        const int s = sk_seg(run, b, &m0, BM);
        const uint8_t *W = run.w[s] + (size_t)u0 * UB;
        const uint8_t *w0 = sw + r0 * wslot + ((uintptr_t)(W + (size_t)(m0 + r0) * wrow) & 15);
        const uint8_t *w1 = sw + (r0 + 8) * wslot + ((uintptr_t)(W + (size_t)(m0 + r0 + 8) * wrow) & 15);
        float acc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[nt][i] = 0.0f;
        for (int k = ka; k < kb; k++) {
            const __half2 d0 = __half2half2(*(const __half *)(w0 + UB * k));
            const __half2 d1 = __half2half2(*(const __half *)(w1 + UB * k));
            uint32_t A1[4], A2[4];   /* elements 4 tig .. 4 tig + 3 and 16 + 4 tig .. 16 + 4 tig + 3 */
            if constexpr (Q8) {   /* int8 elements in order */
                const uint32_t l0 = ld_u32_a2(w0 + UB * k + 2 + 4 * tig), l1 = ld_u32_a2(w1 + UB * k + 2 + 4 * tig);
                const uint32_t h0 = ld_u32_a2(w0 + UB * k + 18 + 4 * tig), h1 = ld_u32_a2(w1 + UB * k + 18 + 4 * tig);
                A1[0] = deq_q80(l0, d0, 0x4240), A1[1] = deq_q80(l1, d1, 0x4240);
                A1[2] = deq_q80(l0, d0, 0x4341), A1[3] = deq_q80(l1, d1, 0x4341);
                A2[0] = deq_q80(h0, d0, 0x4240), A2[1] = deq_q80(h1, d1, 0x4240);
                A2[2] = deq_q80(h0, d0, 0x4341), A2[3] = deq_q80(h1, d1, 0x4341);
            } else {   /* Q4_0: element j's level in byte j's low nibble, 16 + j's in its high one */
                const uint32_t v0 = ld_u32_a2(w0 + UB * k + 2 + 4 * tig), v1 = ld_u32_a2(w1 + UB * k + 2 + 4 * tig);
                A1[0] = deq_q40<false>(v0, d0), A1[1] = deq_q40<false>(v1, d1);
                A1[2] = deq_q40<false>(v0 >> 8, d0), A1[3] = deq_q40<false>(v1 >> 8, d1);
                A2[0] = deq_q40<true>(v0, d0), A2[1] = deq_q40<true>(v1, d1);
                A2[2] = deq_q40<true>(v0 >> 8, d0), A2[3] = deq_q40<true>(v1 >> 8, d1);
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) mma_f16_unit(acc[nt], A1, A2, xa + nt * 8 * astr + 64 * k);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) red[((kp * RG + rg) * NT * 4 + nt * 4 + i) * 32 + lane] = acc[nt][i];
        __syncthreads();   /* every warp done with this band's rows and its sums handed over */
        if (b + 2 * G < bands) sk_load_band(sw, run, b + 2 * G, BM, wrow, u0, nu, wslot, UB);
        async_commit();   /* empty past the last band: the wait above counts one group a band */
        /* the parts added in part order, the outputs spread over the block's threads */
        const float *bias = run.bias[s];
        const int64_t M = run.M[s];
        float *Y = run.y[s] + (size_t)z * N * M;
        for (int e = tid; e < RG * NT * 4 * 32; e += SK_THREADS) {
            const int l = e & 31, i = (e >> 5) & 3, nt = (e >> 7) % NT, g = e / (NT * 128);
            const int64_t m = m0 + g * 16 + (l >> 2) + (i >> 1) * 8;
            const int n = nt * 8 + 2 * (l & 3) + (i & 1);
            if (m >= M || n >= N) continue;
            float v = red[(g * NT * 4 + nt * 4 + i) * 32 + l];
            for (int q = 1; q < KP; q++) v += red[(((q * RG + g) * NT * 4) + nt * 4 + i) * 32 + l];
            Y[(size_t)n * M + m] = bias ? v + bias[m] : v;
        }
    }
}

/* ---------------- launchers ---------------- */

#include "phase8b_batch/split_sum.cuh"

/* a K slice's units where K is split (b15): the 0.5B's own K = 896, whose x every block holds */
#define SK_SLICE_UNITS 28

static int sk_nt(int64_t N) { return N <= 16 ? 2 : N <= 32 ? 4 : 8; }

/* raises the kernel's shared memory limit to need (once per size reached); false when the device
 * cannot give it */
template <int NT, int RG, bool Q8> static bool sk_prepare(size_t need) {
    static size_t raised = 0;
    if (need <= raised) return true;
    if (cudaFuncSetAttribute(kernel_gemm_f16_small<NT, RG, Q8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    raised = need;
    return true;
}

/* the shared memory a block may opt in to on the current device (0 when unknown) */
static size_t sk_smem_limit(void) {
    static int lim = -1;
    if (lim < 0) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
            (void)cudaGetLastError();
            v = 0;
        }
        lim = v;
    }
    return (size_t)lim;
}

static int64_t sk_bands(const mi8a_run_seg *seg, int n, int RG) {
    int64_t b = 0;
    for (int s = 0; s < n; s++) b += (seg[s].M + 16 * RG - 1) / (16 * RG);
    return b;
}

typedef struct {
    int S, ku, RG, G;   /* K slices and units a slice, row groups, blocks a slice */
    bool q8;            /* Q8_0 weights, else Q4_0 */
} sk_plan;

/* units a K slice takes when K is cut in S */
static int sk_slice_units(int64_t K, int S) { return (int)((K / 32 + S - 1) / S); }
/* bytes of x's f16 copy (the workspace's start) */
static size_t sk_x_f16_bytes(int64_t K, int64_t N) { return ((size_t)K * (size_t)N * 2 + 255) & ~(size_t)255; }

/* The launch of a run (S = 1) or of one matmul split S ways over K. Row groups (1, 2 or 4): the
 * smallest whose bands fit one wave of each slice's blocks (one block a multiprocessor: the
 * shared memory of a slice of x); where none does, the one whose busiest block has the fewest K
 * units a warp (bands a block x units a part), ties to the larger. Only those whose shared memory
 * the device gives. MINFER_SMALL_ROWS (16, 32 or 64 rows a band) sets it for measurements where it
 * fits. */
static int sk_pick_rg(const mi8a_run_seg *seg, int n, int64_t Ks, int NT, int ub, int64_t per, int ku, long forced) {
    const size_t lim = sk_smem_limit();
    int best = 0;
    int64_t best_cost = INT64_MAX;
    for (int rg = 1; rg <= 4; rg *= 2) {
        if (sk_smem(Ks, rg, NT, ub) > lim) break;
        if (forced && rg != forced / 16) continue;
        const int64_t bands = sk_bands(seg, n, rg), kp = 8 / rg;
        if (bands <= per) return rg;
        const int64_t cost = (bands + per - 1) / per * ((ku + kp - 1) / kp);
        if (cost <= best_cost) best = rg, best_cost = cost;
    }
    return best;
}
/* The row groups of a run: the ones each of its matmuls takes alone, so a matmul's outputs are
 * the same bits in a run as alone (RG sets how a row's K units are cut among warps, and so the
 * order of its sums). 0 where they differ (the caller launches them one by one) or none fits. */
static int sk_run_rg(const mi8a_run_seg *seg, int n, int64_t Ks, int NT, int ub, int64_t per, int ku, long forced) {
    int rg = 0;
    for (int s = 0; s < n; s++) {
        int r = forced ? sk_pick_rg(seg + s, 1, Ks, NT, ub, per, ku, forced) : 0;
        if (!r) r = sk_pick_rg(seg + s, 1, Ks, NT, ub, per, ku, 0);
        if (!r || (s > 0 && r != rg)) return 0;
        rg = r;
    }
    return rg;
}
static bool sk_make_plan(const mi8a_run_seg *seg, int n, mi_type wt, int64_t K, int NT, int S, sk_plan *p) {
    static long rows = -1;
    const long set = mi_setting_int_once("MINFER_SMALL_ROWS", 0, 64, 0, &rows);
    const int64_t sms = mi7e_sm_count() > 0 ? mi7e_sm_count() : 1;
    p->S = S, p->ku = sk_slice_units(K, S), p->q8 = wt == MI_TYPE_Q8_0;
    const int ub = sk_ub(p->q8);
    const int64_t Ks = 32 * (int64_t)p->ku, per = sms / S > 0 ? sms / S : 1;
    const int rg = sk_run_rg(seg, n, Ks, NT, ub, per, p->ku, set == 16 || set == 32 || set == 64 ? set : 0);
    if (!rg) return false;
    const int64_t bands = sk_bands(seg, n, rg);
    p->RG = rg;
    p->G = (int)(bands < per ? bands : per);
    return true;
}

static bool sk_shape_ok(mi_type wt, int64_t K, int64_t N) {
    return (wt == MI_TYPE_Q4_0 || (wt == MI_TYPE_Q8_0 && mi8b_small_q8_on())) && K >= 32 && K % 32 == 0 &&
           N >= MI8B_F16_MIN_N && N <= MI8B_STREAM_MAX_N;
}
/* K slices for K (1 up to MI8B_SMALL_MAX_K) */
static int sk_slices(int64_t K) {
    return K <= MI8B_SMALL_MAX_K ? 1 : (int)((K / 32 + SK_SLICE_UNITS - 1) / SK_SLICE_UNITS);
}
static bool sk_fits(mi_type wt, int64_t K, int64_t N) {
    const int S = sk_slices(K);
    return sk_smem(32 * (int64_t)sk_slice_units(K, S), 1, sk_nt(N), sk_ub(wt == MI_TYPE_Q8_0)) <= sk_smem_limit();
}

extern "C" bool mi8b_gemm_f16_small_supported(mi_type wt, int64_t K, int64_t M, int64_t N) {
    return sk_shape_ok(wt, K, N) && K <= MI8B_SMALL_MAX_K && M >= 1 && M <= MI8B_SMALL_MAX_M && sk_fits(wt, K, N);
}

extern "C" size_t mi8b_gemm_f16_small_workspace(mi_type wt, int64_t K, int64_t M, int64_t N) {
    return mi8b_gemm_f16_small_supported(wt, K, M, N) ? sk_x_f16_bytes(K, N) : 0;
}

extern "C" int mi8b_gemm_f16_small_rows(mi_type wt, const mi8a_run_seg *seg, int n, int64_t K, int64_t N) {
    sk_plan p;
    return sk_make_plan(seg, n, wt, K, sk_nt(N), sk_slices(K), &p) ? 16 * p.RG : 0;
}

template <int NT, int RG, bool Q8>
static mi_status launch_small(cudaStream_t st, const mi8a_run_seg *seg, int n, const uint8_t *xh, const float *xf,
                              int64_t K, int64_t N, const sk_plan *p) {
    const size_t smem = sk_smem(32 * (int64_t)p->ku, RG, NT, sk_ub(Q8));
    if (!sk_prepare<NT, RG, Q8>(smem))
        return mi_err(MI_ERR_DEVICE, "mi8b_gemm_f16_small: %zu bytes of shared memory for K = %lld refused", smem,
                      (long long)K);
    sk_run run = {};
    run.n = n, run.S = p->S, run.ku = p->ku;
    for (int s = 0; s < n; s++) {
        run.band0[s + 1] = run.band0[s] + (int)((seg[s].M + 16 * RG - 1) / (16 * RG));
        run.w[s] = (const uint8_t *)seg[s].w, run.bias[s] = seg[s].bias, run.y[s] = seg[s].y, run.M[s] = seg[s].M;
    }
    (void)pdl_launch(mi8b_pdl_on(), kernel_gemm_f16_small<NT, RG, Q8>, dim3((unsigned)(p->G * p->S)), dim3(SK_THREADS),
                     smem, st, run, xh, xf, (int)K, (int)N);
    MI_CU_CHECK_LAUNCH("kernel_gemm_f16_small");
    return MI_OK;
}

template <int NT>
static mi_status launch_small_rg(cudaStream_t st, const mi8a_run_seg *seg, int n, const uint8_t *xh,
                                 const float *xf, int64_t K, int64_t N, const sk_plan *p) {
    switch (p->RG * 2 + p->q8) {
    case 2: return launch_small<NT, 1, false>(st, seg, n, xh, xf, K, N, p);
    case 3: return launch_small<NT, 1, true>(st, seg, n, xh, xf, K, N, p);
    case 4: return launch_small<NT, 2, false>(st, seg, n, xh, xf, K, N, p);
    case 5: return launch_small<NT, 2, true>(st, seg, n, xh, xf, K, N, p);
    case 8: return launch_small<NT, 4, false>(st, seg, n, xh, xf, K, N, p);
    default: return launch_small<NT, 4, true>(st, seg, n, xh, xf, K, N, p);
    }
}

/* the kernel over the plan's slices, reading x's f16 copy xh, or (b19) x's floats xf */
static mi_status sk_run(cudaStream_t st, mi_type wt, const mi8a_run_seg *seg, int n, const uint8_t *xh, const float *xf,
                        int64_t K, int64_t N, int S) {
    sk_plan p;
    if (!sk_make_plan(seg, n, wt, K, sk_nt(N), S, &p)) {
        if (n > 1) {   /* its matmuls take other row groups alone: each launched as it would be alone */
            for (int s = 0; s < n; s++) MI_TRY(sk_run(st, wt, seg + s, 1, xh, xf, K, N, S));
            return MI_OK;
        }
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_f16_small: no band fits shared memory at K = %lld", (long long)K);
    }
    switch (sk_nt(N)) {
    case 2: return launch_small_rg<2>(st, seg, n, xh, xf, K, N, &p);
    case 4: return launch_small_rg<4>(st, seg, n, xh, xf, K, N, &p);
    default: return launch_small_rg<8>(st, seg, n, xh, xf, K, N, &p);
    }
}

/* x's f16 copy, then the kernel; b19: the kernel alone, converting x's slices itself (x's rows
 * 16-byte aligned), up to MI8B_SMALL_XCONV_MAX_N rows */
static mi_status sk_launch(cudaStream_t st, mi_type wt, const mi8a_run_seg *seg, int n, const float *x, int64_t K,
                           int64_t N, int S, void *workspace) {
    const bool conv = mi8b_small_xconv_on() && N <= MI8B_SMALL_XCONV_MAX_N && ((uintptr_t)x & 15) == 0;
    if (!conv) MI_TRY(launch_act_f16(st, x, workspace, K, N, false));
    return sk_run(st, wt, seg, n, conv ? NULL : (const uint8_t *)workspace, conv ? x : NULL, K, N, S);
}

/* a run's matmuls and shape, as mi8b_gemm_f16_small_run takes them */
static mi_status sk_run_check(mi_type wt, const mi8a_run_seg *seg, int n, int64_t K, int64_t N) {
    int64_t rows = 0;
    for (int s = 0; s < n && n <= MI8A_RUN_MAX; s++) {
        if (!seg[s].w || !seg[s].y || seg[s].M < 1)
            return mi_err(MI_ERR_INVALID, "mi8b_gemm_f16_small: matmul %d of the run has no weight, output or rows", s);
        rows += seg[s].M;
    }
    if (n < 1 || n > MI8A_RUN_MAX || !sk_shape_ok(wt, K, N) || K > MI8B_SMALL_MAX_K || !sk_fits(wt, K, N) ||
        rows > MI8B_SMALL_MAX_M)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_f16_small: %d matmuls of type %s, K = %lld, %lld rows, N = %lld",
                      n, mi_type_name(wt), (long long)K, (long long)rows, (long long)N);
    return MI_OK;
}

extern "C" mi_status mi8b_gemm_f16_small_run(void *stream, mi_type wt, const mi8a_run_seg *seg, int n,
                                             const float *x, int64_t K, int64_t N, void *workspace) {
    MI_TRY(sk_run_check(wt, seg, n, K, N));
    if (!x || !workspace) return mi_err(MI_ERR_INVALID, "mi8b_gemm_f16_small: null pointer");
    return sk_launch((cudaStream_t)stream, wt, seg, n, x, K, N, 1, workspace);
}

extern "C" mi_status mi8b_gemm_f16_small_run_norm(void *stream, mi_type wt, const mi8a_run_seg *seg, int n,
                                                  const float *x0, const float *nw, float eps, int64_t K, int64_t N,
                                                  void *workspace) {
    MI_TRY(sk_run_check(wt, seg, n, K, N));
    if (!x0 || !nw || !workspace) return mi_err(MI_ERR_INVALID, "mi8b_gemm_f16_small: null pointer");
    MI_TRY(mi8b_rms_norm_f16_pairs(stream, x0, nw, eps, workspace, K, N));
    return sk_run((cudaStream_t)stream, wt, seg, n, (const uint8_t *)workspace, NULL, K, N, 1);
}

extern "C" mi_status mi8b_gemm_f16_small(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                         float *y, int64_t K, int64_t M, int64_t N, void *workspace) {
    const mi8a_run_seg seg = {w, bias, y, M};
    return mi8b_gemm_f16_small_run(stream, wt, &seg, 1, x, K, N, workspace);
}

/* ---------------- b15: K past MI8B_SMALL_MAX_K split over blocks ---------------- */

extern "C" bool mi8b_gemm_f16_ksplit_supported(mi_type wt, int64_t K, int64_t M, int64_t N) {
    return wt == MI_TYPE_Q4_0 && sk_shape_ok(wt, K, N) && K > MI8B_SMALL_MAX_K && K <= MI8B_KSPLIT_MAX_K && M >= 1 &&
           M <= MI8B_SMALL_MAX_M && sk_fits(wt, K, N);
}

extern "C" size_t mi8b_gemm_f16_ksplit_workspace(mi_type wt, int64_t K, int64_t M, int64_t N) {
    if (!mi8b_gemm_f16_ksplit_supported(wt, K, M, N)) return 0;
    return sk_x_f16_bytes(K, N) + (size_t)sk_slices(K) * (size_t)N * (size_t)M * sizeof(float);
}

extern "C" mi_status mi8b_gemm_f16_ksplit(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                          float *y, int64_t K, int64_t M, int64_t N, void *workspace) {
    if (!mi8b_gemm_f16_ksplit_supported(wt, K, M, N))
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_f16_ksplit: type %s, K = %lld, M = %lld, N = %lld",
                      mi_type_name(wt), (long long)K, (long long)M, (long long)N);
    if (!w || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi8b_gemm_f16_ksplit: null pointer");
    const cudaStream_t st = (cudaStream_t)stream;
    const int S = sk_slices(K);
    float *part = (float *)((uint8_t *)workspace + sk_x_f16_bytes(K, N));
    const mi8a_run_seg seg = {w, NULL, part, M};
    MI_TRY(sk_launch(st, wt, &seg, 1, x, K, N, S, workspace));
    (void)pdl_launch(mi8b_pdl_on(), kernel_split_sum, dim3(split_sum_blocks(M, N)), dim3(256), 0, st, part, bias, y, M,
                     N, S);
    MI_CU_CHECK_LAUNCH("kernel_split_sum");
    return MI_OK;
}

/* A batch's matmul at small K with f16 tensor cores: y [N, M] = W [K, M] (Q4_0) @ x [K, N] (+ bias)
 * for K <= 1024 and 9..64 rows (item b12): the 0.5B's q/k/v/o and gate/up (K = 896), which take
 * three launches each through b1's split int8 tile (the activations' quantizer, the tile, the split
 * sum) and are too short for b3's ring (under four stages a band) to fill. A run of such matmuls of
 * one x (item b13: q, k, v; gate, up) is one launch: its bands are numbered across the matmuls.
 *
 * One launch after the activations' f16 copy (f16_frag.cuh): every token's whole K stays in a
 * block's shared memory; the block takes bands of BM = 16 RG weight rows (blockIdx.x, then every
 * gridDim.x-th), each loaded as one cp.async group (the aligned 16-byte windows that cover its rows,
 * stream_ring.cuh's gs_window) into one of two buffers while the band before is computed. Its 8 warps
 * are RG row groups of 16 rows x KP = 8 / RG parts of the K units; a warp dequantizes each unit of its
 * two rows per lane into f16 mma fragments (b6's fragment order: a Q4_0 word's low nibbles are
 * elements 4 tig .. 4 tig + 3, its high nibbles 16 + 4 tig ..), for every token. Every warp's sums go
 * to shared memory; the block's threads then add each output's parts in part order and write y (+
 * bias). No K split over blocks, no second kernel. RG: launcher's rule (sk_rg).
 *
 * Error: b6's f16 tier, the weights (L - 8) d rounded to f16 once and the activations rounded to
 * f16 (docs/NUMERICS.md); gate_8b_matmul_f16 compares it with the exact product. Fixed orders:
 * bit-identical run to run, and a matmul's outputs depend on RG alone (not on the run around it).
 * The index math is emulated by gates/8b/emu_gemm_f16_small.py. */
#include "common/core/mi_settings.h"
#include "phase7b_ops/dev7b.cuh"
#include "phase7e_perf/perf7e.h"
#include "phase8b_batch/batch8b.h"
#include "phase8b_batch/f16_frag.cuh"
#include "phase8b_batch/stream_ring.cuh"

#define SK_THREADS 256
#define SK_UB 18   /* bytes of a Q4_0 unit (32 elements) */

/* bytes of a weight row's slot (the windows covering it, an odd count: rows on distinct banks) */
__host__ __device__ __forceinline__ int sk_wslot(int64_t K) { return 16 * ((((int)(K / 32) * SK_UB + 30) / 16) | 1); }
/* bytes of a token's row: 2K and a pad to 32 mod 128, so the 64-bit fragment loads of tokens
 * gid 0..3 (one half-warp) fall on 32 distinct banks */
__host__ __device__ __forceinline__ int sk_astride(int64_t K) { return (int)(2 * K) + (160 - (int)(2 * K) % 128) % 128; }
/* shared memory: every token's row, then two band buffers of 16 RG weight rows, then the eight
 * warps' sums ([part][row group][nt][i][lane] floats) */
__host__ __device__ __forceinline__ size_t sk_x_bytes(int64_t K, int NT) { return (size_t)8 * NT * sk_astride(K); }
__host__ __device__ __forceinline__ size_t sk_band_bytes(int64_t K, int RG) { return (size_t)16 * RG * sk_wslot(K); }
static size_t sk_smem(int64_t K, int RG, int NT) {
    return sk_x_bytes(K, NT) + 2 * sk_band_bytes(K, RG) + (size_t)8 * NT * 4 * 32 * sizeof(float);
}

/* the matmuls of one launch: segment s owns bands band0[s] .. band0[s + 1] - 1 of 16 RG rows */
struct sk_run {
    int n;
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

/* band b's rows as one cp.async group into buf; rows past M stay unloaded (their outputs are not
 * written, and an mma's output row reads only its own) */
__device__ __forceinline__ void sk_load_band(uint8_t *buf, const sk_run &run, int b, int BM, size_t wrow, int wslot) {
    int64_t m0;
    const int s = sk_seg(run, b, &m0, BM);
    const uint8_t *W = run.w[s], *wend = W + (size_t)run.M[s] * wrow;
    const int wch = wslot / 16;
    for (int i = threadIdx.x; i < BM * wch; i += SK_THREADS) {
        const int r = i / wch, c = i - r * wch;
        if (m0 + r < run.M[s]) gs_window(buf + r * wslot, W + (size_t)(m0 + r) * wrow, (int)wrow, c, W, wend);
    }
}

template <int NT, int RG>
__global__ void __launch_bounds__(SK_THREADS)
kernel_gemm_f16_small(const __grid_constant__ sk_run run, const uint8_t *__restrict__ X, int K, int N) {
    constexpr int KP = 8 / RG, BM = 16 * RG;
    extern __shared__ __align__(16) uint8_t smem[];
    const int wslot = sk_wslot(K), astr = sk_astride(K), nu = K / 32, bands = run.band0[run.n];
    const size_t wrow = (size_t)nu * SK_UB;
    uint8_t *sa = smem, *sw0 = smem + sk_x_bytes(K, NT);
    float *red = (float *)(sw0 + 2 * sk_band_bytes(K, RG));
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gid = lane >> 2, tig = lane & 3;

    /* every token's K and the first band (one group), the second band (the next group) */
    const int ach = 2 * K / 16;
    for (int i = tid; i < 8 * NT * ach; i += SK_THREADS) {
        const int n = i / ach, c = i - n * ach;
        if (n < N) async_copy16(sa + n * astr + 16 * c, X + (size_t)n * 2 * K + 16 * c);
    }
    int b = blockIdx.x;
    if (b < bands) sk_load_band(sw0, run, b, BM, wrow, wslot);
    async_commit();
    if (b + (int)gridDim.x < bands) sk_load_band(sw0 + sk_band_bytes(K, RG), run, b + gridDim.x, BM, wrow, wslot);
    async_commit();

    const int rg = warp % RG, kp = warp / RG;
    const int r0 = rg * 16 + gid;
    const int upp = (nu + KP - 1) / KP, ka = kp * upp, kb = ka + upp < nu ? ka + upp : nu;
    const uint8_t *xa = sa + gid * astr + 8 * tig;   /* token gid of n-tile 0, group tig */
    for (int it = 0; b < bands; it++, b += gridDim.x) {
        async_wait<1>();   /* this band's group (and x) landed; the next band's may still fly */
        __syncthreads();
        uint8_t *sw = sw0 + (it & 1) * sk_band_bytes(K, RG);
        int64_t m0;
        const int s = sk_seg(run, b, &m0, BM);
        const uint8_t *W = run.w[s];
        const uint8_t *w0 = sw + r0 * wslot + ((uintptr_t)(W + (size_t)(m0 + r0) * wrow) & 15);
        const uint8_t *w1 = sw + (r0 + 8) * wslot + ((uintptr_t)(W + (size_t)(m0 + r0 + 8) * wrow) & 15);
        float acc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[nt][i] = 0.0f;
        for (int k = ka; k < kb; k++) {
            const __half2 d0 = __half2half2(*(const __half *)(w0 + SK_UB * k));
            const __half2 d1 = __half2half2(*(const __half *)(w1 + SK_UB * k));
            const uint32_t v0 = ld_u32_a2(w0 + SK_UB * k + 2 + 4 * tig), v1 = ld_u32_a2(w1 + SK_UB * k + 2 + 4 * tig);
            uint32_t A1[4], A2[4];   /* elements 4 tig .. + 3 (low nibbles) and 16 + 4 tig .. + 3 (high) */
            A1[0] = deq_q40(v0, d0), A1[1] = deq_q40(v1, d1), A1[2] = deq_q40(v0 >> 8, d0), A1[3] = deq_q40(v1 >> 8, d1);
            A2[0] = deq_q40(v0 >> 4, d0), A2[1] = deq_q40(v1 >> 4, d1);
            A2[2] = deq_q40(v0 >> 12, d0), A2[3] = deq_q40(v1 >> 12, d1);
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const uint8_t *bp = xa + nt * 8 * astr + 64 * k;
                const uint2 bv = *(const uint2 *)bp, cv = *(const uint2 *)(bp + 32);
                mma_f16_16816(acc[nt], A1, bv.x, bv.y);
                mma_f16_16816(acc[nt], A2, cv.x, cv.y);
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) red[((kp * RG + rg) * NT * 4 + nt * 4 + i) * 32 + lane] = acc[nt][i];
        __syncthreads();   /* every warp done with this band's rows and its sums handed over */
        if (b + 2 * (int)gridDim.x < bands) sk_load_band(sw, run, b + 2 * gridDim.x, BM, wrow, wslot);
        async_commit();   /* empty past the last band: the wait above counts one group a band */
        /* the parts added in part order, the outputs spread over the block's threads */
        const float *bias = run.bias[s];
        float *Y = run.y[s];
        const int64_t M = run.M[s];
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

static int sk_nt(int64_t N) { return N <= 16 ? 2 : N <= 32 ? 4 : 8; }

/* raises the kernel's shared memory limit to what K needs (once per size reached); false when
 * the device cannot give it */
template <int NT, int RG> static bool sk_prepare(int64_t K) {
    static size_t raised = 0;
    const size_t need = sk_smem(K, RG, NT);
    if (need <= raised) return true;
    if (cudaFuncSetAttribute(kernel_gemm_f16_small<NT, RG>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need) !=
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

/* row groups a block (1, 2 or 4) for a run's rows: the smallest whose bands fit one wave (one
 * block a multiprocessor: the shared memory of the whole K); where none does, the one whose
 * busiest block has the fewest K units a warp (bands a block x units a part), ties to the larger.
 * Only those whose shared memory the device gives. MINFER_SMALL_ROWS (16, 32 or 64 rows a band)
 * sets it for measurements where it fits. */
static int sk_rg(const mi8a_run_seg *seg, int n, int64_t K, int NT) {
    static long rows = -1;
    const long set = mi_setting_int_once("MINFER_SMALL_ROWS", 0, 64, 0, &rows);
    const size_t lim = sk_smem_limit();
    if ((set == 16 || set == 32 || set == 64) && sk_smem(K, (int)(set / 16), NT) <= lim) return (int)(set / 16);
    const int64_t sms = mi7e_sm_count() > 0 ? mi7e_sm_count() : 1, nu = K / 32;
    int best = 1;
    int64_t best_cost = INT64_MAX;
    for (int rg = 1; rg <= 4; rg *= 2) {
        if (sk_smem(K, rg, NT) > lim) break;
        const int64_t bands = sk_bands(seg, n, rg), kp = 8 / rg;
        if (bands <= sms) return rg;
        const int64_t cost = (bands + sms - 1) / sms * ((nu + kp - 1) / kp);
        if (cost <= best_cost) best = rg, best_cost = cost;
    }
    return best;
}

static bool sk_shape_ok(mi_type wt, int64_t K, int64_t N) {
    return wt == MI_TYPE_Q4_0 && K >= 32 && K % 32 == 0 && K <= MI8B_SMALL_MAX_K && N >= MI8B_STREAM_MIN_N &&
           N <= MI8B_STREAM_MAX_N && sk_smem(K, 1, sk_nt(N)) <= sk_smem_limit();
}

extern "C" bool mi8b_gemm_f16_small_supported(mi_type wt, int64_t K, int64_t M, int64_t N) {
    return sk_shape_ok(wt, K, N) && M >= 1 && M <= MI8B_SMALL_MAX_M;
}

extern "C" size_t mi8b_gemm_f16_small_workspace(mi_type wt, int64_t K, int64_t M, int64_t N) {
    if (!mi8b_gemm_f16_small_supported(wt, K, M, N)) return 0;
    return ((size_t)K * (size_t)N * 2 + 255) & ~(size_t)255;   /* x in f16 */
}

extern "C" int mi8b_gemm_f16_small_rows(const mi8a_run_seg *seg, int n, int64_t K, int64_t N) {
    return 16 * sk_rg(seg, n, K, sk_nt(N));
}

template <int NT, int RG>
static mi_status launch_small(cudaStream_t st, const mi8a_run_seg *seg, int n, const uint8_t *xh, int64_t K,
                              int64_t N) {
    if (!sk_prepare<NT, RG>(K))
        return mi_err(MI_ERR_DEVICE, "mi8b_gemm_f16_small: %zu bytes of shared memory for K = %lld refused",
                      sk_smem(K, RG, NT), (long long)K);
    sk_run run = {};
    run.n = n;
    for (int s = 0; s < n; s++) {
        run.band0[s + 1] = run.band0[s] + (int)((seg[s].M + 16 * RG - 1) / (16 * RG));
        run.w[s] = (const uint8_t *)seg[s].w, run.bias[s] = seg[s].bias, run.y[s] = seg[s].y, run.M[s] = seg[s].M;
    }
    const int64_t sms = mi7e_sm_count() > 0 ? mi7e_sm_count() : 1;
    const unsigned grid = (unsigned)(run.band0[n] < sms ? run.band0[n] : sms);
    kernel_gemm_f16_small<NT, RG><<<grid, SK_THREADS, sk_smem(K, RG, NT), st>>>(run, xh, (int)K, (int)N);
    MI_CU_CHECK_LAUNCH("kernel_gemm_f16_small");
    return MI_OK;
}

template <int NT>
static mi_status launch_small_rg(cudaStream_t st, const mi8a_run_seg *seg, int n, const uint8_t *xh, int64_t K,
                                 int64_t N) {
    switch (sk_rg(seg, n, K, NT)) {
    case 1: return launch_small<NT, 1>(st, seg, n, xh, K, N);
    case 2: return launch_small<NT, 2>(st, seg, n, xh, K, N);
    default: return launch_small<NT, 4>(st, seg, n, xh, K, N);
    }
}

extern "C" mi_status mi8b_gemm_f16_small_run(void *stream, mi_type wt, const mi8a_run_seg *seg, int n,
                                             const float *x, int64_t K, int64_t N, void *workspace) {
    int64_t rows = 0;
    for (int s = 0; s < n && n <= MI8A_RUN_MAX; s++) {
        if (!seg[s].w || !seg[s].y || seg[s].M < 1)
            return mi_err(MI_ERR_INVALID, "mi8b_gemm_f16_small: matmul %d of the run has no weight, output or rows", s);
        rows += seg[s].M;
    }
    if (n < 1 || n > MI8A_RUN_MAX || !sk_shape_ok(wt, K, N) || rows > MI8B_SMALL_MAX_M)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_f16_small: %d matmuls of type %s, K = %lld, %lld rows, N = %lld",
                      n, mi_type_name(wt), (long long)K, (long long)rows, (long long)N);
    if (!x || !workspace) return mi_err(MI_ERR_INVALID, "mi8b_gemm_f16_small: null pointer");
    const cudaStream_t st = (cudaStream_t)stream;
    MI_TRY(launch_act_f16_pairs(st, x, workspace, K, N));
    const uint8_t *xh = (const uint8_t *)workspace;
    switch (sk_nt(N)) {
    case 2: return launch_small_rg<2>(st, seg, n, xh, K, N);
    case 4: return launch_small_rg<4>(st, seg, n, xh, K, N);
    default: return launch_small_rg<8>(st, seg, n, xh, K, N);
    }
}

extern "C" mi_status mi8b_gemm_f16_small(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                         float *y, int64_t K, int64_t M, int64_t N, void *workspace) {
    const mi8a_run_seg seg = {w, bias, y, M};
    return mi8b_gemm_f16_small_run(stream, wt, &seg, 1, x, K, N, workspace);
}

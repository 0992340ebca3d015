/* A batch's matmul at small K with f16 tensor cores: y [N, M] = W [K, M] (Q4_0) @ x [K, N] (+ bias)
 * for K <= 1024 and 9..64 rows (item b12): the 0.5B's q/k/v/o and gate/up (K = 896), which take
 * three launches each through b1's split int8 tile (the activations' quantizer, the tile, the split
 * sum) and are too short for b3's ring (under four stages a band) to fill.
 *
 * One launch after the activations' f16 copy (f16_frag.cuh): a block holds BM = 16 RG weight rows
 * and every token over the whole K in shared memory, loaded as one cp.async group (the weight rows
 * as the aligned 16-byte windows that cover them, stream_ring.cuh's gs_window). Its 8 warps are RG
 * row groups of 16 rows x KP = 8 / RG parts of the K units; a warp dequantizes each unit of its two
 * rows per lane into f16 mma fragments (b6's fragment order: a Q4_0 word's low nibbles are
 * elements 4 tig .. 4 tig + 3, its high nibbles 16 + 4 tig ..), for every token. The parts' sums
 * are added in part order through shared memory by part 0's warps, which write y (+ bias). No K
 * split over blocks, no second kernel; RG is the smallest that keeps the blocks within one wave,
 * so small weights get many short warps.
 *
 * Error: b6's f16 tier, the weights (L - 8) d rounded to f16 once and the activations rounded to
 * f16 (docs/NUMERICS.md); gate_8b_matmul_f16 compares it with the exact product. Fixed orders:
 * bit-identical run to run. The index math is emulated by gates/8b/emu_gemm_f16_small.py. */
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
static size_t sk_smem(int64_t K, int RG, int NT) {
    const size_t load = (size_t)16 * RG * sk_wslot(K) + (size_t)8 * NT * sk_astride(K);
    const size_t red = (size_t)(8 - RG) * NT * 4 * 32 * sizeof(float);   /* parts 1.. of the sums */
    return load > red ? load : red;
}

template <int NT, int RG>
__global__ void __launch_bounds__(SK_THREADS)
kernel_gemm_f16_small(const uint8_t *__restrict__ W, size_t wrow, int64_t M, const uint8_t *__restrict__ X, int K,
                      int N, const float *__restrict__ bias, float *__restrict__ Y) {
    constexpr int KP = 8 / RG;
    extern __shared__ __align__(16) uint8_t smem[];
    const int wslot = sk_wslot(K), astr = sk_astride(K), nu = K / 32;
    uint8_t *sw = smem, *sa = smem + (size_t)16 * RG * wslot;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gid = lane >> 2, tig = lane & 3;
    const int64_t m0 = (int64_t)blockIdx.x * 16 * RG;
    const uint8_t *wend = W + (size_t)M * wrow;

    /* the band's rows and every token's K, one group; rows past M and tokens past N stay unloaded
     * (their outputs are not written, and an mma's output row or column reads only its own) */
    const int wch = wslot / 16, ach = 2 * K / 16;
    for (int i = tid; i < 16 * RG * wch; i += SK_THREADS) {
        const int r = i / wch, c = i - r * wch;
        if (m0 + r < M) gs_window(sw + r * wslot, W + (size_t)(m0 + r) * wrow, (int)wrow, c, W, wend);
    }
    for (int i = tid; i < 8 * NT * ach; i += SK_THREADS) {
        const int n = i / ach, c = i - n * ach;
        if (n < N) async_copy16(sa + n * astr + 16 * c, X + (size_t)n * 2 * K + 16 * c);
    }
    async_commit();
    async_wait<0>();
    __syncthreads();

    const int rg = warp % RG, kp = warp / RG;
    const int r0 = rg * 16 + gid;
    const int upp = (nu + KP - 1) / KP, ka = kp * upp, kb = ka + upp < nu ? ka + upp : nu;
    const uint8_t *w0 = sw + r0 * wslot + ((uintptr_t)(W + (size_t)(m0 + r0) * wrow) & 15);
    const uint8_t *w1 = sw + (r0 + 8) * wslot + ((uintptr_t)(W + (size_t)(m0 + r0 + 8) * wrow) & 15);
    const uint8_t *xa = sa + gid * astr + 8 * tig;   /* token gid of n-tile 0, group tig */
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
            const uint2 b = *(const uint2 *)bp, c = *(const uint2 *)(bp + 32);
            mma_f16_16816(acc[nt], A1, b.x, b.y);
            mma_f16_16816(acc[nt], A2, c.x, c.y);
        }
    }

    /* parts 1 .. KP - 1 hand their sums to part 0 ([part - 1][row group][nt][i][lane]) */
    float *red = (float *)smem;
    __syncthreads();   /* every warp done with the loaded rows */
    if (kp > 0)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) red[(((kp - 1) * RG + rg) * NT * 4 + nt * 4 + i) * 32 + lane] = acc[nt][i];
    __syncthreads();
    if (kp > 0) return;
    for (int q = 1; q < KP; q++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[nt][i] += red[(((q - 1) * RG + rg) * NT * 4 + nt * 4 + i) * 32 + lane];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int64_t m = m0 + r0 + (i >> 1) * 8;
            const int n = nt * 8 + 2 * tig + (i & 1);
            if (m < M && n < N) Y[(size_t)n * M + m] = bias ? acc[nt][i] + bias[m] : acc[nt][i];
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

/* row groups a block: the smallest whose blocks fit one wave (one block a multiprocessor, the
 * shared memory of the whole K), else 4; MINFER_SMALL_ROWS (16, 32 or 64 rows a block) sets it
 * for measurements */
static int sk_rg(int64_t M) {
    static long rows = -1;
    const long set = mi_setting_int_once("MINFER_SMALL_ROWS", 0, 64, 0, &rows);
    if (set == 16 || set == 32 || set == 64) return (int)(set / 16);
    const int64_t sms = mi7e_sm_count();
    for (int rg = 1; rg < 4; rg *= 2)
        if ((M + 16 * rg - 1) / (16 * rg) <= sms) return rg;
    return 4;
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

extern "C" bool mi8b_gemm_f16_small_supported(mi_type wt, int64_t K, int64_t M, int64_t N) {
    return wt == MI_TYPE_Q4_0 && K >= 32 && K % 32 == 0 && K <= MI8B_SMALL_MAX_K && N >= MI8B_STREAM_MIN_N &&
           N <= MI8B_STREAM_MAX_N && M >= 1 && M <= 0x7fffffff && sk_smem(K, sk_rg(M), sk_nt(N)) <= sk_smem_limit();
}

extern "C" size_t mi8b_gemm_f16_small_workspace(mi_type wt, int64_t K, int64_t M, int64_t N) {
    if (!mi8b_gemm_f16_small_supported(wt, K, M, N)) return 0;
    return ((size_t)K * (size_t)N * 2 + 255) & ~(size_t)255;   /* x in f16 */
}

template <int NT, int RG>
static mi_status launch_small(cudaStream_t st, const uint8_t *w, const uint8_t *xh, const float *bias, float *y,
                              int64_t K, int64_t M, int64_t N) {
    if (!sk_prepare<NT, RG>(K))
        return mi_err(MI_ERR_DEVICE, "mi8b_gemm_f16_small: %zu bytes of shared memory for K = %lld refused",
                      sk_smem(K, RG, NT), (long long)K);
    kernel_gemm_f16_small<NT, RG><<<(unsigned)((M + 16 * RG - 1) / (16 * RG)), SK_THREADS, sk_smem(K, RG, NT), st>>>(
        w, mi_row_size(MI_TYPE_Q4_0, K), M, xh, (int)K, (int)N, bias, y);
    MI_CU_CHECK_LAUNCH("kernel_gemm_f16_small");
    return MI_OK;
}

template <int NT>
static mi_status launch_small_rg(cudaStream_t st, const uint8_t *w, const uint8_t *xh, const float *bias, float *y,
                                 int64_t K, int64_t M, int64_t N) {
    switch (sk_rg(M)) {
    case 1: return launch_small<NT, 1>(st, w, xh, bias, y, K, M, N);
    case 2: return launch_small<NT, 2>(st, w, xh, bias, y, K, M, N);
    default: return launch_small<NT, 4>(st, w, xh, bias, y, K, M, N);
    }
}

extern "C" mi_status mi8b_gemm_f16_small(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                         float *y, int64_t K, int64_t M, int64_t N, void *workspace) {
    if (!mi8b_gemm_f16_small_supported(wt, K, M, N))
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_f16_small: type %s, K = %lld, M = %lld, N = %lld",
                      mi_type_name(wt), (long long)K, (long long)M, (long long)N);
    if (!w || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi8b_gemm_f16_small: null pointer");
    const cudaStream_t st = (cudaStream_t)stream;
    MI_TRY(launch_act_f16_pairs(st, x, workspace, K, N));
    const uint8_t *xh = (const uint8_t *)workspace, *wb = (const uint8_t *)w;
    switch (sk_nt(N)) {
    case 2: return launch_small_rg<2>(st, wb, xh, bias, y, K, M, N);
    case 4: return launch_small_rg<4>(st, wb, xh, bias, y, K, M, N);
    default: return launch_small_rg<8>(st, wb, xh, bias, y, K, M, N);
    }
}

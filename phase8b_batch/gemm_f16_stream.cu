/* A batch's matmul at 9..64 rows with f16 tensor cores: y [N, M] = W [K, M] (Q4_K or Q6_K) @
 * x [K, N] (+ bias). The bands and the cp.async ring of gemm_int8_stream.cu (128 weight rows x
 * every token a block, one super-block of every row a stage), but each warp dequantizes its rows
 * in registers straight into f16 mma fragments and the activations are f16, so the float
 * accumulators run over the whole K: no int32 dot to scale per 32-element unit, which is what
 * holds the int8 kernel at 64 tokens (results/notes/PHASE8B.md).
 *
 * Fragments (mma.m16n8k16, f32 accumulators): a lane (gid, tig) holds, for its rows r0 = 16 (warp & 7) +
 * gid and r0 + 8, the elements 4 tig .. 4 tig + 3 of a unit for the first mma and 16 + 4 tig .. for
 * the second (one 32-bit load of the packed levels each). The k order inside an mma is free as long
 * as the weights and the activations agree: register a0 carries elements (4 tig, 4 tig + 2) and a2
 * (4 tig + 1, 4 tig + 3), which is how a level word splits into two f16 pairs with one mask, so
 * the activations are stored with every group of four elements as (e0, e2, e1, e3) and one 64-bit
 * shared load gives b0 and b1. A level L becomes the f16 1024 + L by OR-ing 0x6400 into its half
 * (exact for L < 1024); subtracting 1024 (Q6_K: 1056, its offset 32) is exact, then one f16
 * multiply-add applies the unit's scale and min, rounded once (f16_frag.cuh: a high nibble is read
 * in place as 1024 + 16 L, and (1024 + 16 L) / 16 - 64 is L exactly).
 *
 * Error: the weights rounded to f16 (scale, min and product) and the activations rounded to f16,
 * no 8-bit activation codes; gate_8b_matmul compares it with a double product of the exactly
 * dequantized weights and the float activations.
 *
 * Work split: the units are band x super-block, band-major (unit u: band u / nst, stage u % nst),
 * cut into P runs of consecutive units, one block a run (f16s_plan). Stream-K: P = the blocks the
 * GPU holds at once, runs differing by one unit at most, so every block streams about the same
 * bytes; it pays where whole bands leave a partial last wave (the 7B's gate/up: 148 bands on 132
 * multiprocessors, one block each, ran as two waves). K split: run p is a chunk of band p / S
 * (stream_chunk's S), which streams better where the bands are fewer than the multiprocessors.
 * A run's ring streams its units in order across band edges (the next band's first stages load
 * while the current band finishes). The accumulators cover a band-piece, the run's units of one
 * band: a piece over the band's whole K writes Y (+ bias); the others go to slots, which
 * kernel_f16s_fixup adds in unit order (run order) for each cut band, + bias. A fixed plan and
 * fixed orders: bit-identical run to run. */
#include <cuda_fp16.h>
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"
#include "phase8b_batch/batch8b.h"
#include "phase8b_batch/f16_frag.cuh"
#include "phase8b_batch/f16s_common.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"
#include "phase8b_batch/stream_ring.cuh"
#include <string.h>

/* 16 warps: warp w takes row group w & 7 for half the tokens (w >> 3). Each row group's weights
 * are dequantized by two warps, but a multiprocessor (one 176 KB block) gets 4 warps a scheduler
 * to hide the shared load -> dequantize -> mma chain instead of 2. */
#define FS_THREADS 512
/* bytes of a token's stage in the ring: 256 halves and 32 bytes more, so the 64-bit fragment
 * loads of tokens gid 0..3 (one half-warp) fall on 32 distinct banks */
#define FS_ASLOT 544

template <int WT, int NT> struct fs_smem {
    static constexpr size_t ring_w = (size_t)FS_NS * FS_BM * fs_fmt<WT>::wslot;
    static constexpr size_t ring_a = (size_t)FS_NS * NT * 8 * FS_ASLOT;
    static constexpr size_t scales = 2 * 8 * FS_BM * sizeof(__half2);   /* two per unit and row */
    static constexpr size_t bytes = ring_w + ring_a + scales;
};

/* Y [N, M] for the bands a run covers whole, part [slot][N][FS_BM] for its other pieces: block p
 * takes run p of the plan's P runs (units = bands x nst). A piece that begins inside its
 * band (the run's first) goes to slot 2p, one that begins at the band's first stage and ends
 * inside the band (the run's last) to slot 2p + 1: two slots a run at most. Warp w computes
 * rows 16 (w & 7) .. + 15 of the band: KH false, for tokens 4 NT (w >> 3) .. + 4 NT - 1 and all
 * 8 units of a stage (two warps dequantize the same rows); KH true (item b11), for every token
 * and units 4 (w >> 3) .. + 3 (each row's unit dequantized once, twice the independent mma
 * chains a warp), the two K halves added at each piece's end (warps 8..15 hand theirs to
 * warps 0..7 through the stage's activation slot). Each output and slot element is written
 * once. X: kernel_act_f16's copy in pairs. RN (item b40): the bands of a run of matmuls (run),
 * each band's weights, rows, bias and output its segment's (W, M, bias, Y unused). */
template <int WT, int NT, bool KH, bool RN = false>
__global__ void __launch_bounds__(FS_THREADS, 1)
kernel_gemm_f16s(const uint8_t *__restrict__ W, size_t wrow, int64_t M, const uint8_t *__restrict__ X, int64_t K,
                 int64_t N, const f16s_plan pl, const float *__restrict__ bias, float *__restrict__ Y,
                 float *__restrict__ part, const f16s_run run) {
    using F = fs_fmt<WT>;
    using SM = fs_smem<WT, NT>;
    constexpr int NTOK = NT * 8, NTW = KH ? NT : NT / 2;   /* n-tiles a warp */
    constexpr int KU = KH ? 4 : 8;                            /* units a warp computes of a stage */
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t *ring_w = smem, *ring_a = smem + SM::ring_w;
    /* per [unit][row]: Q4_K the scale d sc and -dmin m; Q6_K d sc of the unit's two halves */
    __half2 *sS = (__half2 *)(ring_a + SM::ring_a), *sM = sS + 8 * FS_BM;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gid = lane >> 2, tig = lane & 3;
    const int p = blockIdx.x;
    fs_walk wk(pl, p, K);

    /* band b's weights, rows and its first row in them (RN: its segment's) */
    auto band_of = [&](int64_t b, const uint8_t *&Wb, int64_t &Mb, int64_t &m0b) {
        Wb = W, Mb = M, m0b = b * FS_BM;
        if (RN) {
            const int sg = run.locate(b, &m0b);
            Wb = f16s_run::pick(run.W, sg), Mb = f16s_run::pick(run.M, sg);
        }
    };
    auto issue = [&](int64_t b, int st, int q) {   /* band b's stage st into ring slot q */
        const uint8_t *Wb;
        int64_t Mb, m0b;
        band_of(b, Wb, Mb, m0b);
        fs_copy_weights<WT>(ring_w + (size_t)q * FS_BM * F::wslot, Wb, wrow, Mb, m0b, (size_t)st * F::wbytes, tid,
                            FS_THREADS);
        uint8_t *ra = ring_a + (size_t)q * NTOK * FS_ASLOT;
        for (int i = tid; i < NTOK * (FS_SB * 2 / 16); i += FS_THREADS) {
            const int n = i >> 5, c = i & 31;
            if (n < N) async_copy16(ra + n * FS_ASLOT + 16 * c, X + ((size_t)n * K + (size_t)st * FS_SB) * 2 + 16 * c);
        }
    };
    auto issue_next = [&](int q) {
        issue(wk.ib, wk.is, q);
        wk.loaded();
    };

    float acc[NTW][4];
#pragma unroll
    for (int nt = 0; nt < NTW; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[nt][i] = 0.0f;

#pragma unroll
    for (int q = 0; q < FS_NS - 1; q++) {
        if (q < wk.len) issue_next(q);
        async_commit();
    }
    /* the warp's first row, token and unit of a stage */
    const int r0 = (warp & 7) * 16 + gid, n0 = KH ? 0 : (warp >> 3) * NTW * 8, k0 = KH ? (warp >> 3) * 4 : 0;
    for (int s = 0; s < wk.len; s++) {
        const int q = s % FS_NS;
        async_wait<FS_NS - 2>();   /* this thread's copies of unit s have landed */
        __syncthreads();            /* everyone's have; everyone is done with unit s - 1 */
        if (s + FS_NS - 1 < wk.len) issue_next((s + FS_NS - 1) % FS_NS);
        async_commit();

        const uint8_t *Wc;   /* the computed band's weights, rows and first row (RN: its segment's) */
        int64_t Mc, m0;
        band_of(wk.cb, Wc, Mc, m0);
        const uint8_t *rw = ring_w + (size_t)q * FS_BM * F::wslot, *ra = ring_a + (size_t)q * NTOK * FS_ASLOT;
        const size_t wo = (size_t)wk.cs * F::wbytes;
        fs_stage_scales<WT>(rw, Wc, wrow, m0, wo, Mc, sS, sM, tid, FS_THREADS);
        __syncthreads();

        const uint8_t *w0 = rw + r0 * F::wslot + ((uintptr_t)(Wc + (size_t)(m0 + r0) * wrow + wo) & 15);
        const uint8_t *w1 = rw + (r0 + 8) * F::wslot + ((uintptr_t)(Wc + (size_t)(m0 + r0 + 8) * wrow + wo) & 15);
        const uint8_t *xa = ra + (n0 + gid) * FS_ASLOT + 8 * tig;   /* token gid of the warp's n-tile 0, group tig */
#pragma unroll
        for (int kk = 0; kk < KU; kk++) {
            const int k = k0 + kk;
            uint32_t A1[4], A2[4];   /* elements 4 tig .. + 3 and 16 + 4 tig .. + 3 of unit k */
            fs_unit_frags<WT>(w0, w1, k, tig, sS[k * FS_BM + r0], sS[k * FS_BM + r0 + 8], sM[k * FS_BM + r0],
                              sM[k * FS_BM + r0 + 8], A1, A2);
#pragma unroll
            for (int nt = 0; nt < NTW; nt++) mma_f16_unit(acc[nt], A1, A2, xa + nt * 8 * FS_ASLOT + 64 * k);
        }

        if (wk.piece_ends(s)) {
            const bool whole = !wk.head && wk.cs == wk.nst - 1;
            if (KH) {   /* K half 1 (warps 8..15) to K half 0 through activation slot q, free until stage s + 3's copy */
                float *red = (float *)ra + (warp & 7) * (NTW * 4 * 32) + lane;   /* [warp][nt][i][lane]: 4 NT KB <= 4.25 NT */
                __syncthreads();   /* every warp done with slot q */
                if (warp >= 8)
#pragma unroll
                    for (int nt = 0; nt < NTW; nt++)
#pragma unroll
                        for (int i = 0; i < 4; i++) red[(nt * 4 + i) * 32] = acc[nt][i], acc[nt][i] = 0.0f;
                __syncthreads();
                if (warp < 8)
#pragma unroll
                    for (int nt = 0; nt < NTW; nt++)
#pragma unroll
                        for (int i = 0; i < 4; i++) acc[nt][i] += red[(nt * 4 + i) * 32];
            }
            float *slot = part + (size_t)(2 * p + (wk.head ? 0 : 1)) * (size_t)N * FS_BM;
            const float *bc = bias;
            float *Yc = Y;
            if (RN) {   /* the band's segment's bias and output (band_of gave its rows) */
                const int sg = run.seg(wk.cb);
                bc = f16s_run::pick(run.bias, sg), Yc = f16s_run::pick(run.Y, sg);
            }
#pragma unroll
            for (int nt = 0; nt < NTW; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int r = r0 + (i >> 1) * 8;
                    const int64_t m = m0 + r, n = n0 + nt * 8 + 2 * tig + (i & 1);
                    if ((!KH || warp < 8) && m < Mc && n < N) {
                        if (whole) Yc[(size_t)n * Mc + m] = bc ? acc[nt][i] + bc[m] : acc[nt][i];
                        else slot[(size_t)n * FS_BM + r] = acc[nt][i];
                    }
                    acc[nt][i] = 0.0f;
                }
            wk.head = false;
        }
        wk.computed();
    }
    async_wait<0>();   /* no copy outlives the block (the last commits are empty) */
}

/* The cut band whose fixup block x = p - 1 writes: the boundary of run p falls inside band b and
 * run p - 1 holds b's first unit (so each cut band has one block x); hi, the run holding b's last
 * unit (one division, f16s_run_of, not a scan of the run starts). False: block x writes nothing. */
template <typename I> __device__ __forceinline__ bool fixup_band(const f16s_plan &pl, I p, I &b, I &hi) {
    const I nst = (I)pl.nst, u = f16s_run_start_t<I>(pl, p);
    b = u / nst;
    const I bs = b * nst;
    if (u == bs) return false;                                /* a boundary on a band edge cuts nothing */
    if (f16s_run_start_t<I>(pl, p - 1) > bs) return false;   /* band b's first boundary is an earlier run's */
    hi = f16s_run_of_t<I>(pl, bs + nst - 1);
    return true;
}

/* tokens a fixup block sums: two a pass of its 256 threads (a thread's row r, tokens 2 j + its half) */
#define FX_TOK 32

/* Y for the cut bands: block (x, y) takes the band of run boundary x + 1 (fixup_band), tokens FX_TOK
 * y .. + FX_TOK - 1. Band b's pieces in unit order: run p - 1 holds its first unit (its piece begins
 * at the band's first stage: slot 2p - 1), each later run p <= q <= hi begins inside the band (slot
 * 2q); + bias. A thread's tokens are summed side by side, each in that order: its loads of a slot
 * all in flight at once. The plan's divisions in 32 bits where they fit (every real shape). */
template <bool RN>
__global__ void kernel_f16s_fixup(const float *__restrict__ part, const float *__restrict__ bias,
                                  const float *__restrict__ R, float *__restrict__ Y, int64_t M, int64_t N,
                                  const f16s_plan pl, const f16s_run run) {
    MI_PDL_ENTRY();   /* b29: every block, before its early returns */
    const int p = blockIdx.x + 1;
    int64_t b, hi;
    if (f16s_plan_narrow(pl)) {
        uint32_t b32, hi32;
        if (!fixup_band<uint32_t>(pl, (uint32_t)p, b32, hi32)) return;
        b = b32, hi = hi32;
    } else if (!fixup_band<int64_t>(pl, p, b, hi)) {
        return;
    }
    const int r = threadIdx.x % FS_BM;
    int64_t m = b * FS_BM + r;
    if (RN) {   /* b40: the band's segment's rows, bias and output (no residual in a run) */
        const int sg = run.locate(b, &m);
        m += r;
        M = f16s_run::pick(run.M, sg), bias = f16s_run::pick(run.bias, sg), Y = f16s_run::pick(run.Y, sg);
    }
    if (m >= M) return;
    const int64_t n0 = (int64_t)blockIdx.y * FX_TOK + threadIdx.x / FS_BM;
    constexpr int NJ = FX_TOK / 2;
    float s[NJ];
    const float *first = part + (size_t)(2 * p - 1) * (size_t)N * FS_BM + r;
#pragma unroll
    for (int j = 0; j < NJ; j++)
        if (n0 + 2 * j < N) s[j] = first[(size_t)(n0 + 2 * j) * FS_BM];
    for (int64_t q = p; q <= hi; q++) {
        const float *sl = part + (size_t)(2 * q) * (size_t)N * FS_BM + r;
#pragma unroll
        for (int j = 0; j < NJ; j++)
            if (n0 + 2 * j < N) s[j] += sl[(size_t)(n0 + 2 * j) * FS_BM];
    }
    const float bm = bias ? bias[m] : 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; j++)
        if (n0 + 2 * j < N) {
            const size_t o = (size_t)(n0 + 2 * j) * M + m;
            const float y = bias ? s[j] + bm : s[j];
            Y[o] = R ? y + R[o] : y;   /* b36: the residual add after the matmul, in its place */
        }
}

/* ---------------- launchers ---------------- */

static int f16s_nt(int64_t N) { return N <= 16 ? 2 : N <= 32 ? 4 : 8; }

/* blocks a multiprocessor holds; the first call raises the kernel's shared memory limit, once */
template <int WT, int NT, bool KH> static int f16s_occupancy_of(void) {
    int n = 0;
    if (cudaFuncSetAttribute(kernel_gemm_f16s<WT, NT, KH>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)fs_smem<WT, NT>::bytes) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel_gemm_f16s<WT, NT, KH>, FS_THREADS,
                                                      fs_smem<WT, NT>::bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    return n;
}
/* of both forms (b11 on and off: one plan for either) */
template <int WT, int NT> static int f16s_occupancy(void) {
    static int bps = 0;
    if (bps == 0) {
        const int a = f16s_occupancy_of<WT, NT, false>(), b = f16s_occupancy_of<WT, NT, true>();
        const int n = a < b ? a : b;
        bps = n < 1 ? -1 : n;   /* -1: the kernel cannot run here (no launch is attempted) */
    }
    return bps;
}
/* of the mma.sync forms and, where this build and device have it, b22's wgmma kernel: one plan
 * (and one workspace) whichever runs */
static int f16s_occ(mi_type wt, int64_t N) {
    const int nt = f16s_nt(N);
    int n;
    if (wt == MI_TYPE_Q4_K) n = nt == 2 ? f16s_occupancy<MI_TYPE_Q4_K, 2>() : nt == 4 ? f16s_occupancy<MI_TYPE_Q4_K, 4>() : f16s_occupancy<MI_TYPE_Q4_K, 8>();
    else n = nt == 2 ? f16s_occupancy<MI_TYPE_Q6_K, 2>() : nt == 4 ? f16s_occupancy<MI_TYPE_Q6_K, 4>() : f16s_occupancy<MI_TYPE_Q6_K, 8>();
    const int w = mi8b_gemm_f16w_occupancy(wt, N);
    return w >= 1 && w < n ? w : n;
}

extern "C" bool mi8b_gemm_f16s_supported(mi_type wt, int64_t K, int64_t M, int64_t N) {
    /* the units (bands x super-blocks) counted in an int: a run's length and stage are ints */
    return (wt == MI_TYPE_Q4_K || wt == MI_TYPE_Q6_K) && N >= MI8B_F16_MIN_N && N <= MI8B_STREAM_MAX_N &&
           K >= FS_SB && K % FS_SB == 0 && M >= 1 && (M + FS_BM - 1) / FS_BM <= 0x7fffffff / (K / FS_SB) &&
           f16s_occ(wt, N) >= 1;
}

/* whether a run boundary falls inside a band (the fixup has work); run 0 begins at unit 0 */
static bool f16s_cut(const f16s_plan &pl) {
    if (pl.S) return pl.S > 1;   /* a K split cuts every band in S chunks, whole bands none */
    for (int p = 1; p < pl.P; p++)
        if (f16s_run_start(pl, p) % pl.nst != 0) return true;
    return false;
}

/* Stream-K where whole bands leave a partial last wave and every run still streams enough
 * stages to keep its ring busy: more bands than resident blocks, not a multiple of them, and
 * at least FS_SK_MIN_RUN units a run (the 7B's gate/up at 33..64 rows: 148 bands on 132
 * multiprocessors). Elsewhere the K split of stream_chunk (stream_ring.cuh): on the H200 its
 * whole-band chunks beat stream-K's short runs for bands fewer than the multiprocessors (q/o,
 * k/v, down: results/notes/PHASE8B.md), and a band count that is a multiple of them (the
 * output head: 1,188 = 9 x 132) loses nothing to a last wave. */
#define FS_SK_MIN_RUN 4
static f16s_plan f16s_choose_plan(mi_type wt, int64_t K, int64_t M, int64_t N, int occ, bool clusters) {
    f16s_plan pl;
    const int64_t bands = (M + FS_BM - 1) / FS_BM, resident = (int64_t)mi7e_sm_count() * occ;
    pl.nst = K / FS_SB;
    pl.units = bands * pl.nst;
    if (bands > resident && bands % resident != 0 && pl.units >= FS_SK_MIN_RUN * resident) {
        pl.S = 0;
        pl.chunk = 0;
        pl.P = (int)resident;
        return pl;
    }
    /* b48: the splits whose bands b33 sums run in clusters, which may keep fewer blocks resident */
    int64_t cap[9] = {0};
    if (clusters) mi8b_gemm_f16s_cluster_blocks(wt, N, cap);
    int S = 1;
    pl.chunk = stream_chunk(M, N, pl.nst, resident, wt == MI_TYPE_Q4_K ? 144 : 210, FS_BM, &S, cap);
    pl.S = S;
    pl.P = (int)(bands * S);
    return pl;
}
static f16s_plan f16s_plan_for(mi_type wt, int64_t K, int64_t M, int64_t N) {
    return f16s_choose_plan(wt, K, M, N, f16s_occ(wt, N), mi8b_plan_clusters_on());
}

extern "C" int mi8b_gemm_f16s_blocks(mi_type wt, int64_t K, int64_t M, int64_t N) {
    if (!mi8b_gemm_f16s_supported(wt, K, M, N)) return 0;
    return f16s_plan_for(wt, K, M, N).P;
}
extern "C" int mi8b_gemm_f16s_split(mi_type wt, int64_t K, int64_t M, int64_t N) {
    if (!mi8b_gemm_f16s_supported(wt, K, M, N)) return -1;
    return f16s_plan_for(wt, K, M, N).S;
}

static uint64_t g_run_launches;   /* b40's run launches (for the gate) */
static size_t f16s_act_bytes(int64_t K, int64_t N) { return ((size_t)K * (size_t)N * 2 + 255) & ~(size_t)255; }
/* the workspace plan pl uses: x's copy, then two slots a run when a band is cut and the fixup
 * sums it (not b33's clusters: sums) */
static size_t f16s_ws_bytes(const f16s_plan &pl, int64_t K, int64_t N, bool sums) {
    return f16s_act_bytes(K, N) + (!sums && f16s_cut(pl) ? 2 * (size_t)pl.P * FS_BM * (size_t)N * sizeof(float) : 0);
}
/* whether N rows of wt take b22's wgmma kernel (else b6's mma.sync one): the form, and with it
 * the form of x's copy, of a matmul and of a run of them */
static bool f16s_on_wgmma(mi_type wt, int64_t N) { return mi8b_f16s_wgmma_on() && mi8b_gemm_f16w_occupancy(wt, N) >= 1; }

/* whichever kernel sums the bands, and either plan (b48 on or off: a workspace sized before the
 * item is set holds the plan of either) */
extern "C" size_t mi8b_gemm_f16s_workspace(mi_type wt, int64_t K, int64_t M, int64_t N) {
    if (!mi8b_gemm_f16s_supported(wt, K, M, N)) return 0;
    const int occ = f16s_occ(wt, N);
    const size_t a = f16s_ws_bytes(f16s_choose_plan(wt, K, M, N, occ, false), K, N, false);
    const size_t b = f16s_ws_bytes(f16s_choose_plan(wt, K, M, N, occ, true), K, N, false);
    return a > b ? a : b;
}
extern "C" void mi8b_gemm_f16s_cluster_blocks(mi_type wt, int64_t N, int64_t cap[9]) {
    if (f16s_on_wgmma(wt, N)) mi8b_gemm_f16w_cluster_blocks(wt, N, cap);
    else memset(cap, 0, 9 * sizeof *cap);
}

/* the RN form's shared memory limit raised once (the plain forms' by f16s_occupancy_of) */
template <int WT, int NT, bool KH> static bool f16s_run_prepare(void) {
    static int ok = -1;
    if (ok < 0) {
        ok = cudaFuncSetAttribute(kernel_gemm_f16s<WT, NT, KH, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)fs_smem<WT, NT>::bytes) == cudaSuccess;
        (void)cudaGetLastError();
    }
    return ok > 0;
}
/* run: b40's table (the bands of a run of matmuls; w, bias, y and M unused), else NULL */
template <int WT, int NT>
static mi_status launch_f16s(cudaStream_t st, const uint8_t *w, const uint8_t *xh, const float *bias, float *y,
                             int64_t K, int64_t M, int64_t N, const f16s_plan &pl, float *part, const f16s_run *run = NULL) {
    const size_t wrow = mi_row_size((mi_type)WT, K);
    static const f16s_run none = {};
    const dim3 g((unsigned)pl.P), b(FS_THREADS);
    const size_t sm = fs_smem<WT, NT>::bytes;
    const bool kh = mi8b_f16s_khalf_on();
    if (run) {   /* b40's runs are of Q4_K matmuls (install8b.c) */
        if constexpr (WT == MI_TYPE_Q4_K) {
            if (!(kh ? f16s_run_prepare<WT, NT, true>() : f16s_run_prepare<WT, NT, false>()))
                return mi_err(MI_ERR_DEVICE, "kernel_gemm_f16s (run): %zu bytes of shared memory refused", sm);
            if (kh) kernel_gemm_f16s<WT, NT, true, true><<<g, b, sm, st>>>(w, wrow, M, xh, K, N, pl, bias, y, part, *run);
            else kernel_gemm_f16s<WT, NT, false, true><<<g, b, sm, st>>>(w, wrow, M, xh, K, N, pl, bias, y, part, *run);
        } else {
            return mi_err(MI_ERR_UNSUPPORTED, "kernel_gemm_f16s: a run of %s matmuls", mi_type_name((mi_type)WT));
        }
    } else if (kh) {
        kernel_gemm_f16s<WT, NT, true><<<g, b, sm, st>>>(w, wrow, M, xh, K, N, pl, bias, y, part, none);
    } else {
        kernel_gemm_f16s<WT, NT, false><<<g, b, sm, st>>>(w, wrow, M, xh, K, N, pl, bias, y, part, none);
    }
    MI_CU_CHECK_LAUNCH("kernel_gemm_f16s");
    return MI_OK;
}

/* run: b40's table, whose segments the cut bands' outputs go to (NULL: one matmul, bias, res, y, M) */
static mi_status launch_f16s_fixup(cudaStream_t st, const float *bias, const float *res, float *y, int64_t M,
                                   int64_t N, const f16s_plan &pl, const float *part, const f16s_run *run = NULL) {
    if (!f16s_cut(pl)) return MI_OK;
    static const f16s_run none = {};
    const dim3 grid((unsigned)(pl.P - 1), (unsigned)((N + FX_TOK - 1) / FX_TOK));
    if (run)
        (void)pdl_launch(mi8b_pdl_on(), kernel_f16s_fixup<true>, grid, dim3(2 * FS_BM), 0, st, part, (const float *)NULL,
                         (const float *)NULL, (float *)NULL, M, N, pl, *run);
    else
        (void)pdl_launch(mi8b_pdl_on(), kernel_f16s_fixup<false>, grid, dim3(2 * FS_BM), 0, st, part, bias, res, y, M, N,
                         pl, none);
    MI_CU_CHECK_LAUNCH("kernel_f16s_fixup");
    return MI_OK;
}

template <int WT>
static mi_status launch_f16s_n(cudaStream_t st, const uint8_t *w, const uint8_t *xh, const float *bias, float *y,
                               int64_t K, int64_t M, int64_t N, const f16s_plan &pl, float *part,
                               const f16s_run *run = NULL) {
    switch (f16s_nt(N)) {
    case 2: return launch_f16s<WT, 2>(st, w, xh, bias, y, K, M, N, pl, part, run);
    case 4: return launch_f16s<WT, 4>(st, w, xh, bias, y, K, M, N, pl, part, run);
    default: return launch_f16s<WT, 8>(st, w, xh, bias, y, K, M, N, pl, part, run);
    }
}

/* Item b30: whether the workspace already holds x's f16 copy in the form this call makes. The
 * matmuls of one x (the 7B's q, k, v; gate, up) are nodes run one right after the other, and
 * between two of them only the first one's kernels run, its fixup writing the partials past the
 * copy: the dispatch's record of a copy at the workspace's start (mi_cuda_ws_copy_ready) says
 * whether this call may read it. A call outside a run (a gate's) always converts. */
static int f16s_form(bool wg) { return wg ? MI_WS_COPY_F16_EVENS_ODDS : MI_WS_COPY_F16_PAIRS; }
static bool f16s_x_ready(const float *x, const void *ws, int64_t K, int64_t N, bool wg) {
    return mi8b_x_reuse_on() && mi_cuda_ws_copy_ready(f16s_form(wg), x, ws, K, N);
}
/* after a matmul's launches went through: its copy is there for the next (a failed call leaves
 * no record, so nothing after it trusts a copy it did not make) */
extern "C" void mi8b_f16s_x_made(const float *x, const void *ws, int64_t K, int64_t N, bool wg) {
    mi_cuda_ws_copy_made(f16s_form(wg), x, ws, K, N);
}
extern "C" bool mi8b_f16s_x_form(int64_t N) {
    return mi8b_f16s_wgmma_on() && mi8b_gemm_f16w_occupancy(MI_TYPE_Q4_K, N) >= 1 &&
           mi8b_gemm_f16w_occupancy(MI_TYPE_Q6_K, N) >= 1;
}
extern "C" size_t mi8b_f16s_x_bytes(int64_t K, int64_t N) { return f16s_act_bytes(K, N); }

/* res (b36): y = res + W @ x (+ bias), the residual add after the matmul: in the wgmma kernel's and
 * the fixup's stores where b22 runs, else b6's matmul and then 7b's add in place (the same float
 * addition either way) */
static mi_status gemm_f16s(cudaStream_t st, mi_type wt, const void *w, const float *x, const float *bias,
                           const float *res, float *y, int64_t K, int64_t M, int64_t N, void *workspace) {
    if (!mi8b_gemm_f16s_supported(wt, K, M, N))
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_gemm_f16s: type %s, K = %lld, M = %lld, N = %lld", mi_type_name(wt),
                      (long long)K, (long long)M, (long long)N);
    if (!w || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi8b_gemm_f16s: null pointer");
    const f16s_plan pl = f16s_plan_for(wt, K, M, N);
    float *part = (float *)((uint8_t *)workspace + f16s_act_bytes(K, N));
    const bool wg = f16s_on_wgmma(wt, N);
    const bool ready = f16s_x_ready(x, workspace, K, N, wg);
    mi_cuda_ws_copy_clear();   /* no copy to trust until this call's launches went through */
    const bool sums = wg && mi8b_gemm_f16w_sums_bands(wt, N, pl);   /* b33: no fixup */
    if (wg) {
        MI_TRY(mi8b_gemm_f16w(st, wt, w, x, workspace, bias, res, y, K, M, N, pl, part, ready, sums));
    } else {
        if (!ready) MI_TRY(launch_act_f16(st, x, workspace, K, N, false));
        const uint8_t *xh = (const uint8_t *)workspace, *wb = (const uint8_t *)w;
        if (wt == MI_TYPE_Q4_K) MI_TRY(launch_f16s_n<MI_TYPE_Q4_K>(st, wb, xh, bias, y, K, M, N, pl, part));
        else MI_TRY(launch_f16s_n<MI_TYPE_Q6_K>(st, wb, xh, bias, y, K, M, N, pl, part));
    }
    if (!sums) MI_TRY(launch_f16s_fixup(st, bias, wg ? res : NULL, y, M, N, pl, part));
    if (res && !wg) MI_TRY(mi7b_binary(st, 0, y, res, y, M, N, N));
    mi8b_f16s_x_made(x, workspace, K, N, wg);
    return MI_OK;
}
extern "C" mi_status mi8b_gemm_f16s(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                    float *y, int64_t K, int64_t M, int64_t N, void *workspace) {
    return gemm_f16s((cudaStream_t)stream, wt, w, x, bias, NULL, y, K, M, N, workspace);
}
extern "C" mi_status mi8b_gemm_f16s_add(void *stream, mi_type wt, const void *w, const float *x, const float *res,
                                        float *y, int64_t K, int64_t M, int64_t N, void *workspace) {
    if (!res) return mi_err(MI_ERR_INVALID, "mi8b_gemm_f16s_add: null residual");
    return gemm_f16s((cudaStream_t)stream, wt, w, x, NULL, res, y, K, M, N, workspace);
}

/* b40: a run of Q4_K matmuls of one x (q, k and a Q4_K v; gate and up) in one launch of the wgmma
 * kernel (b6's where the wgmma kernel does not take the rows), one plan over the run's bands, its
 * cut bands summed by one fixup; x's f16 copy made once (or the one the node before left: b30). Where the run cannot be one launch (b40 off, another
 * form, a weight without a tensor map, or a plan whose partials exceed the workspace the split
 * holds: ws_bytes) its matmuls run one after the other as each would alone. Not bit for bit the
 * matmuls alone: the plan over the run cuts the bands' K in other chunks (the f16 tier's bound). */
/* b42: the run whose fixup the SwiGLU after it does (this thread's: a split's nodes run on one) */
static thread_local struct {
    bool on;
    cudaStream_t st;
    f16s_fixup_rec rec;
} t_fix;
mi_status f16s_fixup_take(cudaStream_t st, const float *g, const float *u, f16s_fixup_rec *out, bool *taken) {
    *taken = false;
    if (!t_fix.on) return MI_OK;
    if (t_fix.st != st || t_fix.rec.run.n != 2 || t_fix.rec.run.Y[0] != g || t_fix.rec.run.Y[1] != u)
        return mi_err(MI_ERR_INTERNAL, "b42: a run left its cut bands for other operands than this SwiGLU's");
    *out = t_fix.rec;
    t_fix.on = false;
    *taken = true;
    return MI_OK;
}
extern "C" mi_status mi8b_f16s_fixup_flush(void *stream, const float *g, const float *u) {
    f16s_fixup_rec r;
    bool taken;
    MI_TRY(f16s_fixup_take((cudaStream_t)stream, g, u, &r, &taken));
    if (!taken) return MI_OK;
    const int64_t Mt = r.run.band0[r.run.n] * FS_BM;
    return launch_f16s_fixup((cudaStream_t)stream, NULL, NULL, NULL, Mt, r.N, r.pl, r.part, &r.run);
}

/* a run's table (f16s_run) of its n matmuls, the first n_wt of type wt and the rest Q6_K (b49);
 * who names the caller in the error */
static mi_status f16s_run_make(const char *who, const mi8a_run_seg *seg, int n, mi_type wt, int n_wt, int64_t K,
                               int64_t N, f16s_run *run) {
    *run = f16s_run{};
    run->n = n;
    for (int s = 0; s < n; s++) {
        const mi_type t = s < n_wt ? wt : MI_TYPE_Q6_K;
        if (!seg[s].w || !seg[s].y || seg[s].M < 1 || !mi8b_gemm_f16s_supported(t, K, seg[s].M, N))
            return mi_err(MI_ERR_UNSUPPORTED, "%s: matmul %d: type %s, K = %lld, M = %lld, N = %lld", who, s,
                          mi_type_name(t), (long long)K, (long long)seg[s].M, (long long)N);
        run->W[s] = (const uint8_t *)seg[s].w, run->bias[s] = seg[s].bias, run->Y[s] = seg[s].y, run->M[s] = seg[s].M;
        run->band0[s + 1] = run->band0[s] + (seg[s].M + FS_BM - 1) / FS_BM;
    }
    for (int s = n + 1; s <= MI8A_RUN_MAX; s++) run->band0[s] = run->band0[n];
    return MI_OK;
}

extern "C" mi_status mi8b_gemm_f16s_run(void *stream, mi_type wt, const mi8a_run_seg *seg, int n, const float *x,
                                        int64_t K, int64_t N, void *workspace, size_t ws_bytes, bool fixup_next) {
    t_fix.on = false;   /* a record a failed step left behind is never summed into this one */
    if (n < 1 || n > MI8A_RUN_MAX || !seg || !x || !workspace)
        return mi_err(MI_ERR_INVALID, "mi8b_gemm_f16s_run: %d matmuls, or a null pointer", n);
    f16s_run run;
    MI_TRY(f16s_run_make("mi8b_gemm_f16s_run", seg, n, wt, n, K, N, &run));
    const cudaStream_t st = (cudaStream_t)stream;
    const int64_t Mt = run.band0[n] * FS_BM;
    /* b22's form where its b32 kernels run at these rows, else b6's (mma.sync, x's copy in pairs) */
    const bool wg = f16s_on_wgmma(wt, N);
    if (n >= 2 && mi8b_f16s_run_on() && mi8b_gemm_f16s_run_supported(wt, N) && mi8b_gemm_f16s_supported(wt, K, Mt, N)) {
        const f16s_plan pl = f16s_plan_for(wt, K, Mt, N);
        const bool sums = wg && mi8b_gemm_f16w_sums_bands(wt, N, pl);
        /* b42: the partials wait for the SwiGLU, which writes its f16 copy (F x N halves) at the
         * workspace's start: they go past both copies */
        const bool defer = fixup_next && n == 2 && !sums && f16s_cut(pl) && mi8b_f16s_fixup_next_on();
        size_t xa = f16s_act_bytes(K, N);
        if (defer && f16s_act_bytes(seg[0].M, N) > xa) xa = f16s_act_bytes(seg[0].M, N);
        if (xa + f16s_ws_bytes(pl, K, N, sums) - f16s_act_bytes(K, N) <= ws_bytes) {
            const bool ready = f16s_x_ready(x, workspace, K, N, wg);
            mi_cuda_ws_copy_clear();
            float *part = (float *)((uint8_t *)workspace + xa);
            mi_status r;
            if (wg) {
                r = mi8b_gemm_f16w_run(st, wt, run, x, workspace, K, N, pl, part, ready, sums);
            } else {
                r = ready ? MI_OK : launch_act_f16(st, x, workspace, K, N, false);
                if (r == MI_OK)
                    r = launch_f16s_n<MI_TYPE_Q4_K>(st, run.W[0], (const uint8_t *)workspace, NULL, NULL, K, Mt, N, pl,
                                                    part, &run);
            }
            if (r == MI_OK) {
                if (defer) t_fix.on = true, t_fix.st = st, t_fix.rec = f16s_fixup_rec{pl, run, part, N};
                else if (!sums) MI_TRY(launch_f16s_fixup(st, NULL, NULL, NULL, Mt, N, pl, part, &run));
                mi8b_f16s_x_made(x, workspace, K, N, wg);
                g_run_launches++;
                return MI_OK;
            }
            if (r != MI_ERR_UNSUPPORTED) return r;
            if (ready) mi8b_f16s_x_made(x, workspace, K, N, wg);   /* nothing launched: the copy stands */
        }
    }
    for (int s = 0; s < n; s++)
        MI_TRY(gemm_f16s(st, wt, seg[s].w, x, seg[s].bias, NULL, seg[s].y, K, seg[s].M, N, workspace));
    return MI_OK;
}
extern "C" uint64_t mi8b_gemm_f16s_run_launches(void) { return g_run_launches; }

/* b49: matmuls 0 .. n4 - 1 Q4_K, n4 .. n - 1 Q6_K, of one x, in one launch of the wgmma kernel
 * where it takes them (a K split of the run's bands, Q4_K's plan: the Q6_K bands are few), their
 * cut bands summed in clusters or by one fixup. Elsewhere (b49 off, fewer rows, stream-K, a
 * workspace too small) the Q4_K ones as their run (b40) and each Q6_K one alone. */
extern "C" mi_status mi8b_gemm_f16s_run_mixed(void *stream, const mi8a_run_seg *seg, int n4, int n, const float *x,
                                              int64_t K, int64_t N, void *workspace, size_t ws_bytes) {
    if (n4 < 1 || n <= n4 || n > MI8A_RUN_MAX || !seg || !x || !workspace)
        return mi_err(MI_ERR_INVALID, "mi8b_gemm_f16s_run_mixed: %d Q4_K of %d matmuls, or a null pointer", n4, n);
    f16s_run run;
    MI_TRY(f16s_run_make("mi8b_gemm_f16s_run_mixed", seg, n, MI_TYPE_Q4_K, n4, K, N, &run));
    const cudaStream_t st = (cudaStream_t)stream;
    const int64_t Mt = run.band0[n] * FS_BM;
    if (mi8b_gemm_f16s_mixed_supported(N) && mi8b_gemm_f16s_supported(MI_TYPE_Q4_K, K, Mt, N)) {
        const f16s_plan pl = f16s_plan_for(MI_TYPE_Q4_K, K, Mt, N);
        const bool sums = pl.S >= 1 && mi8b_gemm_f16w_mixed_sums_bands(N, pl);
        if (pl.S >= 1 && f16s_ws_bytes(pl, K, N, sums) <= ws_bytes) {
            const bool ready = f16s_x_ready(x, workspace, K, N, true);
            mi_cuda_ws_copy_clear();
            float *part = (float *)((uint8_t *)workspace + f16s_act_bytes(K, N));
            const mi_status r = mi8b_gemm_f16w_run_mixed(st, run, n4, x, workspace, K, N, pl, part, ready, sums);
            if (r == MI_OK) {
                if (!sums) MI_TRY(launch_f16s_fixup(st, NULL, NULL, NULL, Mt, N, pl, part, &run));
                mi8b_f16s_x_made(x, workspace, K, N, true);
                return MI_OK;
            }
            if (r != MI_ERR_UNSUPPORTED) return r;
            if (ready) mi8b_f16s_x_made(x, workspace, K, N, true);   /* nothing launched: the copy stands */
        }
    }
    MI_TRY(mi8b_gemm_f16s_run(stream, MI_TYPE_Q4_K, seg, n4, x, K, N, workspace, ws_bytes, false));
    for (int s = n4; s < n; s++)
        MI_TRY(gemm_f16s(st, MI_TYPE_Q6_K, seg[s].w, x, seg[s].bias, NULL, seg[s].y, K, seg[s].M, N, workspace));
    return MI_OK;
}
extern "C" uint64_t mi8b_gemm_f16s_mixed_launches(void) { return mi8b_gemm_f16w_mixed_launches(); }
extern "C" void mi8b_gemm_f16s_mixed_ready(void) { mi8b_gemm_f16w_mixed_ready(); }
extern "C" bool mi8b_gemm_f16s_mixed_supported(int64_t N) {
    return mi8b_f16s_mixed_on() && f16s_on_wgmma(MI_TYPE_Q4_K, N) && f16s_on_wgmma(MI_TYPE_Q6_K, N) &&
           mi8b_gemm_f16w_mixed_supported(N);
}
extern "C" bool mi8b_gemm_f16s_run_supported(mi_type wt, int64_t N) {
    if (wt != MI_TYPE_Q4_K || N < MI8B_RUN_MIN_N || N > MI8B_STREAM_MAX_N) return false;
    const bool wg = f16s_on_wgmma(wt, N);
    return !wg || mi8b_gemm_f16w_run_supported(wt, N);
}

/* b40: a node of a run that launches nothing (its rows go with the run's last) keeps b30's record
 * of x's copy alive for the last, which reads it one dispatch later */
extern "C" void mi8b_f16s_x_carry(const float *x, const void *ws, int64_t K, int64_t N) {
    const bool wg = f16s_on_wgmma(MI_TYPE_Q4_K, N);   /* as gemm_f16s decides for a run's Q4_K */
    if (f16s_x_ready(x, ws, K, N, wg)) mi8b_f16s_x_made(x, ws, K, N, wg);
}

/* One-token (N = 1) quantized matmul that streams the weight rows through a per-warp ring of
 * cp.async copies, on rows of K >= 2048 of the formats without a kernel of their own (every
 * quantized format but Q4_K) and on Q4_K's long rows (K >= 8192, where 7e's Q4_K kernel waits a
 * round trip per eight loads a lane), and on output heads of any K (M >= 32768 rows, where 7b's
 * warp-per-row kernel waits a round trip per row): the 7B's down projections, Q6_K output head
 * and v, the 0.5B's down projection and Q8_0 output head. 7e's staged kernel copies whole rows into shared memory
 * and waits at a block barrier before any warp computes, so HBM idles while the block computes;
 * here each warp keeps MVS_STAGES chunks of its own rows in flight and computes one while the
 * next ones arrive, with no block barrier at all.
 *
 * A warp's work is a flat sequence of chunks: its rows m = w, w + W, w + 2W, ... (w its global
 * warp index, W the grid's warps), each row cut into chunks of 32 units (one unit a lane), so a
 * short row (the output heads' K = 896 or 3584) still pipelines into the next. A chunk is copied
 * as the 16-byte pieces that cover it, from the 16-byte boundary at or below its first byte, so
 * its bytes keep their alignment mod 16 in shared memory and 7b's unit_unpack reads them there
 * as it reads them in global memory. A piece that would reach outside the tensor (its first or
 * last piece) is copied byte by byte, so no load leaves the allocation.
 *
 * The arithmetic is 7b's kernel_mm_q, in its order: lane l takes units l, l + 32, ... of the row
 * (here: unit l of each chunk, chunks in order), acc += mi7b_unit_dot, the xor butterfly, then
 * bias, then (RES) r + y as the ADD kernel. This file is built like mm_quant.cu (no
 * --fmad=false), so y equals 7b's matmul bit for bit; the gate holds it to that. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7e_perf/perf7e.h"
#include "phase8a_decode/decode8a.h"
#include "phase8a_decode/async_copy.cuh"

#define MVS_THREADS 256
#define MVS_WARPS (MVS_THREADS / 32)
#define MVS_STAGES 4    /* chunks a warp has in flight: 4 x 840 bytes of Q6_K */
#define MVS_UNITS 32    /* units a chunk: one a lane */

/* bytes of a chunk (32 units) and of its ring slot (the pieces from the 16-byte boundary below) */
template <int WT> struct mvs_geom {
    static constexpr int chunk = MVS_UNITS / wtraits<WT>::units * wtraits<WT>::bytes;
    static constexpr int slot = ((chunk + 15) / 16 + 1) * 16;
};

/* Copy chunk c of row m into slot (the chunk then starts at slot + (src & 15)); every lane calls it. */
template <int WT>
__device__ __forceinline__ void mvs_issue(uint8_t *slot, const uint8_t *W, size_t wrow, int64_t m, int c,
                                          const uint8_t *te, int lane) {
    constexpr int CH = mvs_geom<WT>::chunk;
    const uint8_t *src = W + (size_t)m * wrow + (size_t)c * CH;
    const size_t left = wrow - (size_t)c * CH, n = left < (size_t)CH ? left : (size_t)CH;
    const uintptr_t a0 = (uintptr_t)src & ~(uintptr_t)15, a1 = ((uintptr_t)src + n + 15) & ~(uintptr_t)15;
    const int pieces = (int)((a1 - a0) >> 4);
    for (int p = lane; p < pieces; p += 32) {
        const uint8_t *g = (const uint8_t *)(a0 + 16 * (uintptr_t)p);
        if (g >= W && g + 16 <= te) {
            async_copy16(slot + 16 * p, g);
        } else {   /* the tensor's first or last piece: only its own bytes */
            for (int b = 0; b < 16; b++) slot[16 * p + b] = (g + b >= W && g + b < te) ? g[b] : 0;
        }
    }
}

template <int WT, bool RES>
__global__ void __launch_bounds__(MVS_THREADS)
kernel_matvec_stream(const uint8_t *__restrict__ W, size_t wrow, int64_t M, int64_t nunits,
                     const uint8_t *__restrict__ A, const float *__restrict__ bias, const float *__restrict__ R,
                     float *__restrict__ Y) {
    constexpr int SL = mvs_geom<WT>::slot, CH = mvs_geom<WT>::chunk;
    extern __shared__ uint4 smem_mvs[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint8_t *ring = (uint8_t *)smem_mvs + (size_t)warp * MVS_STAGES * SL;
    const int64_t w0 = (int64_t)blockIdx.x * MVS_WARPS + warp, nw = (int64_t)gridDim.x * MVS_WARPS;
    if (w0 >= M) return;   /* whole warps leave together: no block barrier follows */
    const int cpr = (int)((nunits + MVS_UNITS - 1) / MVS_UNITS);   /* chunks a row */
    const uint8_t *te = W + (size_t)M * wrow;
    int64_t mx = w0;   /* the next chunk to copy: chunk cx of row mx, into slot sx */
    int cx = 0, sx = 0;
#pragma unroll
    for (int i = 0; i < MVS_STAGES - 1; i++) {
        if (mx < M) {
            mvs_issue<WT>(ring + sx * SL, W, wrow, mx, cx, te, lane);
            if (++cx == cpr) { cx = 0; mx += nw; }
        }
        async_commit();
        sx++;
    }
    constexpr int AT = wtraits<WT>::act;
    float acc = 0.0f;
    int c = 0, sc = 0;   /* the chunk computed: chunk c of row m, in slot sc */
    for (int64_t m = w0; m < M;) {   /* warp-uniform */
        if (mx < M) {
            mvs_issue<WT>(ring + sx * SL, W, wrow, mx, cx, te, lane);
            if (++cx == cpr) { cx = 0; mx += nw; }
        }
        async_commit();
        if (++sx == MVS_STAGES) sx = 0;
        async_wait<MVS_STAGES - 1>();   /* this lane's pieces of the chunk have landed */
        __syncwarp();                 /* ... and every lane's */
        const int64_t u = (int64_t)c * MVS_UNITS + lane;
        const uint8_t *src = W + (size_t)m * wrow + (size_t)c * CH;
        const uint8_t *chunk = ring + sc * SL + ((uintptr_t)src & 15);
        if (u < nunits) {
            wunit w;
            unit_unpack<WT>(chunk, lane, w);
            acc += mi7b_unit_dot<AT>(w, A, u);
        }
        if (c == cpr - 1) {
            const float s = warp_sum(acc);
            if (lane == 0) {
                const float y = bias ? s + bias[m] : s;
                Y[m] = RES ? R[m] + y : y;
            }
            acc = 0.0f;
            c = 0;
            m += nw;
        } else {
            c++;
        }
        if (++sc == MVS_STAGES) sc = 0;
        __syncwarp();   /* every lane is done with this chunk's slot before the next copy refills it */
    }
    async_wait<0>();
}

static size_t stream_smem(mi_type wt) {
    size_t slot = 0;
    switch (wt) {
#define MVS_SLOT_(T) case T: slot = mvs_geom<T>::slot; break;
        MVS_SLOT_(MI_TYPE_Q4_0) MVS_SLOT_(MI_TYPE_Q4_1) MVS_SLOT_(MI_TYPE_Q5_0) MVS_SLOT_(MI_TYPE_Q5_1)
        MVS_SLOT_(MI_TYPE_Q8_0) MVS_SLOT_(MI_TYPE_Q4_K) MVS_SLOT_(MI_TYPE_Q5_K) MVS_SLOT_(MI_TYPE_Q6_K)
#undef MVS_SLOT_
    default: return 0;
    }
    return slot * MVS_STAGES * MVS_WARPS;
}

extern "C" bool mi8a_matvec_stream_supported(mi_type wt, int64_t K, int64_t M) {
    return (wt != MI_TYPE_Q4_K || K >= MI8A_STREAM_Q4K_MIN_K) && stream_smem(wt) > 0 && mi7b_act_row_bytes(wt, K) > 0 &&
           (K >= MI8A_STREAM_MIN_K || M >= MI8A_STREAM_MIN_M) && M > 0 && M <= INT32_MAX;
}

extern "C" size_t mi8a_matvec_stream_workspace(mi_type wt, int64_t K) { return mi7b_act_row_bytes(wt, K); }

template <int WT, bool RES>
static mi_status launch_stream(cudaStream_t st, const uint8_t *w, const uint8_t *a, const float *bias, const float *r,
                               float *y, int64_t K, int64_t M) {
    static int occ = 0;   /* blocks a multiprocessor holds, per instantiation */
    const size_t smem = stream_smem((mi_type)WT);
    if (occ == 0) {
        int b = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel_matvec_stream<WT, RES>, MVS_THREADS, smem) !=
                cudaSuccess || b < 1)
            b = 1;   /* the launch itself reports a configuration that cannot run */
        (void)cudaGetLastError();
        occ = b;
    }
    int64_t nb = (M + MVS_WARPS - 1) / MVS_WARPS;
    const int64_t wave = (int64_t)mi7e_sm_count() * occ;
    if (nb > wave) nb = wave;   /* one resident wave; each warp walks its rows */
    kernel_matvec_stream<WT, RES><<<(unsigned)nb, MVS_THREADS, smem, st>>>(w, mi_row_size((mi_type)WT, K), M, K / 32, a,
                                                                          bias, r, y);
    MI_CU_CHECK_LAUNCH("kernel_matvec_stream");
    return MI_OK;
}

extern "C" mi_status mi8a_matvec_stream(void *stream, mi_type wt, const void *w, const float *x, const float *bias,
                                        const float *r, float *y, int64_t K, int64_t M, void *workspace) {
    if (!mi8a_matvec_stream_supported(wt, K, M))
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_matvec_stream: type %s, K = %lld, M = %lld", mi_type_name(wt),
                      (long long)K, (long long)M);
    if (!w || !x || !y || !workspace) return mi_err(MI_ERR_INVALID, "mi8a_matvec_stream: null pointer");
    MI_TRY(mi7b_quantize_act(stream, wt, x, K, 1, workspace));
    const cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *wb = (const uint8_t *)w, *a = (const uint8_t *)workspace;
    if (r) MI_QTYPE_DISPATCH(wt, WT, return launch_stream<WT, true>(st, wb, a, bias, r, y, K, M));
    MI_QTYPE_DISPATCH(wt, WT, return launch_stream<WT, false>(st, wb, a, bias, r, y, K, M));
}

/* MI_OP_ARGMAX on the device: per row of x [V, N] the index of the largest value, the first on
 * ties, NaN never wins; -1 when the row has no finite maximum (graph.h). One block per row (d3;
 * d45 below: a cluster of blocks per row): each
 * thread scans i = t, t + T, ... (increasing, so a strict > keeps its first maximum), then the
 * block combines pairs by the same rule (larger value; equal values: lower index). Integer
 * result, no arithmetic on the values: equal to the CPU's bit for bit. */
#include "phase7b_ops/dev7b.cuh"
#include "phase8a_decode/decode8a.h"
#include <math.h>
#include "phase7a_skeleton/cuda_pdl.cuh"
#include "phase7a_skeleton/cuda_dispatch.h"
#include <cooperative_groups.h>

#define AM_THREADS 1024

/* (v, i) pairs, i < 0: none yet */
__device__ __forceinline__ void am_take(float &bv, int &bi, float v, int i) {
    if (i < 0) return;
    if (bi < 0 || v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

/* The same rule over a warp's (v, i): every lane ends with the warp's */
__device__ __forceinline__ void am_warp(float &bv, int &bi) {
    for (int off = 16; off >= 1; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        am_take(bv, bi, ov, oi);
    }
}
/* a thread's candidate from one value: NaN skipped, a strict > keeps its first maximum (its
 * indices come in increasing order) */
__device__ __forceinline__ void am_scan(float &bv, int &bi, float v, int64_t i) {
    if (v == v && (bi < 0 || v > bv)) {
        bv = v;
        bi = (int)i;
    }
}

/* The block's (v, i) by the same rule: each warp's, then warp 0 over those; true in thread 0,
 * which holds the result (sv, si: a slot a warp) */
template <int T>
__device__ __forceinline__ bool am_block(float &bv, int &bi, float *sv, int *si) {
    am_warp(bv, bi);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (warp != 0) return false;
    bv = lane < T / 32 ? sv[lane] : 0.0f;
    bi = lane < T / 32 ? si[lane] : -1;
    am_warp(bv, bi);
    return lane == 0;
}

__global__ void __launch_bounds__(AM_THREADS) kernel_argmax(const float *__restrict__ x, int32_t *__restrict__ out,
                                                             int64_t V) {
    MI_PDL_ENTRY();
    __shared__ float sv[AM_THREADS / 32];
    __shared__ int si[AM_THREADS / 32];
    const float *row = x + (size_t)blockIdx.x * (size_t)V;
    float bv = 0.0f;
    int bi = -1;
    for (int64_t i = threadIdx.x; i < V; i += AM_THREADS) am_scan(bv, bi, __ldg(row + i), i);
    if (am_block<AM_THREADS>(bv, bi, sv, si)) out[blockIdx.x] = (bi >= 0 && isfinite(bv)) ? bi : -1;
}

/* d45: a row split over a cluster of AM_SPLIT blocks, each a contiguous chunk read as float4 where
 * aligned (a row of the 7B's or 0.5B's vocabulary is 600 KB: one block, one multiprocessor, read
 * it at ~25 GB/s). The chunks: [0, a0 + L), then L apiece from there (a0 the row's first 16-byte
 * aligned index, L a multiple of 4), the last to V. A thread's indices increase (the head's
 * below a0, the float4s', the tail's), and the combine is a total order (larger value; equal:
 * lower index), so the result is the one-block kernel's whatever the split. Block rank 0 reads
 * the others' results from their shared memory; the cluster waits again before any exits. */
#define AM_SPLIT 8
#define AM_SPLIT_THREADS 512
#define AM_UNROLL 4
__global__ void __launch_bounds__(AM_SPLIT_THREADS) kernel_argmax_split(const float *__restrict__ x,
                                                                        int32_t *__restrict__ out, int64_t V) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    MI_PDL_ENTRY();
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    __shared__ float sv[AM_SPLIT_THREADS / 32];
    __shared__ int si[AM_SPLIT_THREADS / 32];
    __shared__ float res_v;
    __shared__ int res_i;
    const float *row = x + (size_t)blockIdx.y * (size_t)V;
    const int r = (int)cl.block_rank(), t = threadIdx.x;
    const int64_t a0 = (int64_t)((0u - (unsigned)((uintptr_t)row >> 2)) & 3u);
    const int64_t L = (V + 4 * AM_SPLIT - 1) / (4 * AM_SPLIT) * 4;
    const int64_t s = r == 0 ? 0 : min(V, a0 + r * L), e = r == AM_SPLIT - 1 ? V : min(V, a0 + (r + 1) * L);
    float bv = 0.0f;
    int bi = -1;
    const int64_t sa = r == 0 ? min(a0, e) : s;   /* the chunk's aligned start */
    if (t < sa - s) am_scan(bv, bi, __ldg(row + s + t), s + t);
    const int64_t nv = e > sa ? (e - sa) / 4 : 0;
    const float4 *p4 = reinterpret_cast<const float4 *>(row + sa);
    for (int64_t j = t; j < nv; j += (int64_t)AM_SPLIT_THREADS * AM_UNROLL) {
        float4 v[AM_UNROLL];
#pragma unroll
        for (int u = 0; u < AM_UNROLL; u++)
            if (j + (int64_t)u * AM_SPLIT_THREADS < nv) v[u] = __ldg(p4 + j + (int64_t)u * AM_SPLIT_THREADS);
#pragma unroll
        for (int u = 0; u < AM_UNROLL; u++) {
            const int64_t q = j + (int64_t)u * AM_SPLIT_THREADS;
            if (q >= nv) break;
            const int64_t i = sa + 4 * q;
            am_scan(bv, bi, v[u].x, i);
            am_scan(bv, bi, v[u].y, i + 1);
            am_scan(bv, bi, v[u].z, i + 2);
            am_scan(bv, bi, v[u].w, i + 3);
        }
    }
    const int64_t tb = sa + 4 * nv;
    if (t < e - tb) am_scan(bv, bi, __ldg(row + tb + t), tb + t);
    if (am_block<AM_SPLIT_THREADS>(bv, bi, sv, si)) {
        res_v = bv;
        res_i = bi;
    }
    const int lane = t & 31, warp = t >> 5;
    cl.sync();
    if (r == 0 && warp == 0) {
        bv = 0.0f;
        bi = -1;
        if (lane < AM_SPLIT) {
            bv = *cl.map_shared_rank(&res_v, lane);
            bi = *cl.map_shared_rank(&res_i, lane);
        }
        am_warp(bv, bi);
        if (lane == 0) out[blockIdx.y] = (bi >= 0 && isfinite(bv)) ? bi : -1;
    }
    cl.sync();
#endif
}

/* d45 where this build has the kernel for this device (its body compiled for sm_90 or later:
 * elsewhere it is empty above) and its clusters fit; asked once, first where the node's workspace
 * is sized (mi8a_argmax_ready: before any capture), not at a launch inside one. The PTX version
 * too: an older target's PTX compiled by the driver for this device has a binary version of 90
 * but the empty body */
static bool am_split_fits(void) {
    static int fit = -1;
    if (fit < 0) {
        fit = 0;
        cudaFuncAttributes fa;
        if (cudaFuncGetAttributes(&fa, kernel_argmax_split) == cudaSuccess && fa.binaryVersion >= 90 &&
            fa.ptxVersion >= 90) {
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute a[1];
            a[0].id = cudaLaunchAttributeClusterDimension;
            a[0].val.clusterDim.x = AM_SPLIT, a[0].val.clusterDim.y = 1, a[0].val.clusterDim.z = 1;
            cfg.gridDim = dim3(AM_SPLIT), cfg.blockDim = dim3(AM_SPLIT_THREADS);
            cfg.attrs = a, cfg.numAttrs = 1;
            int n = 0;
            fit = cudaOccupancyMaxActiveClusters(&n, kernel_argmax_split, &cfg) == cudaSuccess && n >= 1;
        }
        (void)cudaGetLastError();
    }
    return fit > 0;
}

extern "C" void mi8a_argmax_ready(void) { (void)am_split_fits(); }

/* d45: the item read at each launch (a switch changes the dispatch epoch: no captured step outlives
 * it) */
static bool am_split_on(void) { return mi_cuda_item_on("d45") && am_split_fits(); }

extern "C" mi_status mi8a_argmax(void *stream, const float *x, int32_t *out, int64_t V, int64_t N) {
    if (V <= 0 || V > INT32_MAX || N <= 0 || N > 0x7fffffff)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_argmax: V = %lld, N = %lld", (long long)V, (long long)N);
    if (!x || !out) return mi_err(MI_ERR_INVALID, "mi8a_argmax: null pointer");
    if (N > 65535 || !am_split_on()) {   /* the split's rows are its grid's y */
        MI_CU_CHECK(MI_PDL_LAUNCH(kernel_argmax, (unsigned)N, AM_THREADS, 0, (cudaStream_t)stream, x, out, V));
        MI_CU_CHECK_LAUNCH("kernel_argmax");
        return MI_OK;
    }
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute a[2];
    a[0].id = cudaLaunchAttributeClusterDimension;
    a[0].val.clusterDim.x = AM_SPLIT, a[0].val.clusterDim.y = 1, a[0].val.clusterDim.z = 1;
    a[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(AM_SPLIT, (unsigned)N), cfg.blockDim = dim3(AM_SPLIT_THREADS);
    cfg.stream = (cudaStream_t)stream;
    cfg.attrs = a, cfg.numAttrs = mi_cuda_pdl_small() ? 2 : 1;
    MI_CU_CHECK(cudaLaunchKernelEx(&cfg, kernel_argmax_split, x, out, V));
    MI_CU_CHECK_LAUNCH("kernel_argmax_split");
    return MI_OK;
}

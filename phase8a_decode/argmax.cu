/* MI_OP_ARGMAX on the device: per row of x [V, N] the index of the largest value, the first on
 * ties, NaN never wins; -1 when the row has no finite maximum (graph.h). One block per row: each
 * thread scans i = t, t + T, ... (increasing, so a strict > keeps its first maximum), then the
 * block combines pairs by the same rule (larger value; equal values: lower index). Integer
 * result, no arithmetic on the values: equal to the CPU's bit for bit. */
#include "phase7b_ops/dev7b.cuh"
#include "phase8a_decode/decode8a.h"
#include <math.h>
#include "phase7a_skeleton/cuda_pdl.cuh"

#define AM_THREADS 1024

/* (v, i) pairs, i < 0: none yet */
__device__ __forceinline__ void am_take(float &bv, int &bi, float v, int i) {
    if (i < 0) return;
    if (bi < 0 || v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

__global__ void __launch_bounds__(AM_THREADS) kernel_argmax(const float *__restrict__ x, int32_t *__restrict__ out,
                                                             int64_t V) {
    MI_PDL_ENTRY();
    __shared__ float sv[AM_THREADS / 32];
    __shared__ int si[AM_THREADS / 32];
    const float *row = x + (size_t)blockIdx.x * (size_t)V;
    float bv = 0.0f;
    int bi = -1;
    for (int64_t i = threadIdx.x; i < V; i += AM_THREADS) {
        const float v = __ldg(row + i);
        if (v == v && (bi < 0 || v > bv)) {
            bv = v;
            bi = (int)i;
        }
    }
    for (int off = 16; off >= 1; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        am_take(bv, bi, ov, oi);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
        bv = lane < AM_THREADS / 32 ? sv[lane] : 0.0f;
        bi = lane < AM_THREADS / 32 ? si[lane] : -1;
        for (int off = 16; off >= 1; off >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
            am_take(bv, bi, ov, oi);
        }
        if (lane == 0) out[blockIdx.x] = (bi >= 0 && isfinite(bv)) ? bi : -1;
    }
}

extern "C" mi_status mi8a_argmax(void *stream, const float *x, int32_t *out, int64_t V, int64_t N) {
    if (V <= 0 || V > INT32_MAX || N <= 0 || N > 0x7fffffff)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8a_argmax: V = %lld, N = %lld", (long long)V, (long long)N);
    if (!x || !out) return mi_err(MI_ERR_INVALID, "mi8a_argmax: null pointer");
    MI_CU_CHECK(MI_PDL_LAUNCH(kernel_argmax, (unsigned)N, AM_THREADS, 0, (cudaStream_t)stream, x, out, V));
    MI_CU_CHECK_LAUNCH("kernel_argmax");
    return MI_OK;
}

/* Item b24: the RMS norm before a run of the batch's small-K f16 matmuls (b13), written straight
 * into the f16 copy of x the run reads (`kernel_act_f16`'s pairs: each group of four
 * elements as e0, e2, e1, e3), so a layer's norm and x's copy are one launch, not two.
 *
 * Bits: the norm is MI_OP_RMS_NORM's canonical arithmetic as 7e's kernel_rms_norm_wide computes
 * it (the row staged in shared memory, its scale by the same function, rms_row_scale_warp0,
 * y = (x scale) w with no contraction: this file is built
 * with --fmad=false, the *_exact.cu rule), and each y is rounded to f16 as the copy kernel rounds
 * the norm's output: the same halves as the two kernels. */
#include <cuda_fp16.h>
#include "phase7b_ops/dev7b.cuh"
#include "phase8b_batch/batch8b.h"
#include "phase7e_perf/rms_row_scale.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"
#include "phase8b_batch/x_f16_copy.cuh"

/* Threads a block: one a 16-byte piece of the row, so its loads and stores are one round each
 * (the loads wait on the kernel before and on L2: a round each costs a round trip), 32 at
 * least, NF_MAX_BLOCK at most */
#define NF_MAX_BLOCK 1024
static unsigned nf_block(int64_t G) {
    const int64_t t = (G / 4 + 31) / 32 * 32;
    return (unsigned)(t < 32 ? 32 : t > NF_MAX_BLOCK ? NF_MAX_BLOCK : t);
}

/* Row r of x staged in shared memory (sx) and its scale, as 7e's kernel_rms_norm_wide computes
 * them: every load in flight (16 bytes each where the row allows: a quarter of the loads, the
 * same values), then warp 0's sum in the canonical order. Every thread calls it. */
__device__ __forceinline__ float nf_row_scale(const float *__restrict__ x, float *sx, float *s_scale, int64_t r,
                                              int64_t G, float eps) {
    const int tid = threadIdx.x, lane = tid & 31, nt = blockDim.x;
    const float *xr = x + (size_t)r * G;
    if (G % 4 == 0 && ((uintptr_t)xr & 15) == 0)
        for (int64_t q = tid; q < G / 4; q += nt) ((float4 *)sx)[q] = ((const float4 *)xr)[q];
    else
        for (int64_t i = tid; i < G; i += nt) sx[i] = xr[i];
    __syncthreads();
    if (tid < 32) rms_row_scale_warp0(sx, G, eps, lane, s_scale);
    __syncthreads();
    return *s_scale;
}

/* 7e's kernel_rms_norm_wide (one block a row staged in shared memory, the same scale and
 * y = (x scale) w) writing y where given (b34; b24 writes only the copy) and y's f16 copy in form
 * eo (x_f16_copy.cuh): the norm and the copy kernel after it in one launch. A thread takes four
 * consecutive elements at a time, so a warp's loads and stores are contiguous. */
__global__ void __launch_bounds__(NF_MAX_BLOCK)
kernel_rms_norm_y_f16(const float *__restrict__ x, const float *__restrict__ w, float *__restrict__ y,
                      __half *__restrict__ xh, int64_t G, int64_t rows, float eps, bool eo) {
    extern __shared__ float nf_sx[];
    __shared__ float s_scale;
    MI_PDL_ENTRY();
    const int tid = threadIdx.x;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float scale = nf_row_scale(x, nf_sx, &s_scale, r, G, eps);
        for (int64_t q = tid; q < G / 4; q += blockDim.x) {
            const float4 s = ((const float4 *)nf_sx)[q];
            const float *wq = w + 4 * q;   /* the norm's weight: no alignment assumed */
            const float4 v = make_float4((s.x * scale) * wq[0], (s.y * scale) * wq[1], (s.z * scale) * wq[2],
                                         (s.w * scale) * wq[3]);
            if (y) ((float4 *)(y + (size_t)r * G))[q] = v;
            x_f16_store4(xh + (size_t)r * G, 4 * q, v, eo);
        }
        __syncthreads();   /* nf_sx and s_scale are reused by the next row */
    }
}

extern "C" mi_status mi8b_rms_norm_y_f16(void *stream, const float *x, const float *w, float eps, float *y, void *xh,
                                         int64_t G, int64_t rows, bool eo) {
    if (G < 16 || G % 16 || G > MI8B_NORM_F16_MAX_K || rows < 1)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_rms_norm_y_f16: rows of %lld, %lld rows", (long long)G, (long long)rows);
    if (!x || !w || !y || !xh) return mi_err(MI_ERR_INVALID, "mi8b_rms_norm_y_f16: null pointer");
    if (((uintptr_t)y | (uintptr_t)xh) & 15)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_rms_norm_y_f16: y or the copy not 16-byte aligned");
    const unsigned blocks = (unsigned)(rows < 65535 ? rows : 65535);
    (void)pdl_launch(mi8b_pdl_on(), kernel_rms_norm_y_f16, dim3(blocks), dim3(nf_block(G)), (size_t)G * sizeof(float),
                     (cudaStream_t)stream, x, w, y, (__half *)xh, G, rows, eps, eo);
    MI_CU_CHECK_LAUNCH("kernel_rms_norm_y_f16");
    return MI_OK;
}

extern "C" mi_status mi8b_rms_norm_f16_pairs(void *stream, const float *x, const float *w, float eps, void *xh,
                                             int64_t G, int64_t rows) {
    if (G < 4 || G % 4 || G > MI8B_NORM_F16_MAX_K || rows < 1)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_rms_norm_f16_pairs: rows of %lld, %lld rows", (long long)G, (long long)rows);
    if (!x || !w || !xh) return mi_err(MI_ERR_INVALID, "mi8b_rms_norm_f16_pairs: null pointer");
    const unsigned blocks = (unsigned)(rows < 65535 ? rows : 65535);
    (void)pdl_launch(mi8b_pdl_on(), kernel_rms_norm_y_f16, dim3(blocks), dim3(nf_block(G)), (size_t)G * sizeof(float),
                     (cudaStream_t)stream, x, w, (float *)NULL, (__half *)xh, G, rows, eps, false);
    MI_CU_CHECK_LAUNCH("kernel_rms_norm_y_f16");
    return MI_OK;
}

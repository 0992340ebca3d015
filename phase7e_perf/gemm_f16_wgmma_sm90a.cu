/* The f16 prefill GEMM on Hopper's warpgroup MMA (wgmma.mma_async, sm_90a).
 *
 * Why: the mma.sync kernel (gemm_f16.cu) peaks at ~330 TFLOP/s on the 7B's FFN shape (tensor
 * pipe 56%, issue slots 30%: Nsight Compute, results/); mma.sync cannot feed Hopper's tensor
 * cores at their rate, wgmma reads both operands from shared memory itself. Same operands and
 * contract as kernel_gemm_f16: Wh [Mc, K] f16 . Xh [N, K]^T f16 -> f32, times inv_s[n], plus
 * bias[m]. Not bit-identical to the mma.sync kernel (the order of the products inside one
 * wgmma is the hardware's): bound by the exact product like it.
 *
 * Tile: 128 weight rows x bn tokens (128 or 64: gemm_f16.cu's chunk loop chooses for both
 * kernels), k depth 64, 3 cp.async stages (32 KB each, 2 blocks an SM), 2 warpgroups of 64
 * rows, each one m64n128k16 (m64n64k16) wgmma per k16 step. Shared rows are
 * 128 bytes with chunk c of row r at c ^ (r & 7): the canonical 128-byte-swizzle K-major
 * layout of the wgmma matrix descriptor (stage bases 1024-byte aligned; 8-row groups 1024
 * bytes apart = SBO; k16 steps advance the start address by 32 bytes inside the atom).
 * Built for sm_90a only (Makefile: *_sm90a.cu); elsewhere the kernel body is empty and
 * mi7e_gemm_f16_wgmma_available() says no. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "phase7a_skeleton/cuda_check.h"
#include "phase7e_perf/gemm_f16.h"

#define W_BM 128
#define W_BK 64
#define W_ST 3
#define W_THREADS 256
#define W_STAGE_BYTES(bn) ((W_BM + (bn)) * W_BK * 2)        /* 32 KB at 128 tokens, 24 KB at 64 */
#define W_SMEM(bn) ((size_t)W_ST * W_STAGE_BYTES(bn) + 1024)  /* + room to align the base to 1024 */

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define W_HAVE_WGMMA 1
#endif

#ifdef W_HAVE_WGMMA   /* the device helpers exist only where the kernel body does */
static __device__ __forceinline__ void w_cp16(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
static __device__ __forceinline__ void w_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void w_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* shared-memory matrix descriptor: start >> 4, LBO 1 (unused by swizzled K-major), SBO 1024 B >> 4,
 * swizzle mode 1 (128 bytes) in bits 62-63 */
static __device__ __forceinline__ uint64_t w_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

static __device__ __forceinline__ void w_mma(float (&d)[64], uint64_t da, uint64_t db) {
    /* scale-d = true (d += a b), scale-a = scale-b = 1, both operands K-major (no transpose) */
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(1));
}
/* m64n64k16: the 64-token tile, 32 accumulators */
static __device__ __forceinline__ void w_mma(float (&d)[32], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(1));
}
#endif

template <int BN>
__global__ void __launch_bounds__(W_THREADS, 2)
kernel_gemm_f16_wgmma(const __half *__restrict__ Wh, const __half *__restrict__ Xh, const float *__restrict__ inv_s,
              const float *__restrict__ bias, float *__restrict__ Y, int64_t ldy, int64_t Mc, int64_t N, int64_t K) {
#ifdef W_HAVE_WGMMA
    extern __shared__ __align__(16) uint8_t w_sh[];
    const uint32_t base = ((uint32_t)__cvta_generic_to_shared(w_sh) + 1023u) & ~1023u;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wl = warp & 3;   /* warpgroup: weight rows wg*64 .. +63 */
    const int64_t n0 = (int64_t)blockIdx.x * BN, m0 = (int64_t)blockIdx.y * W_BM;
    const int KT = (int)(K / W_BK);

    constexpr int LB = BN / 32;   /* token rows staged per thread and stage */
    /* staging: chunk lc of rows lr + 32 i (i < 4, i < LB) of each operand; rows past the edge are
     * zero-filled (cp.async with 0 source bytes reads nothing) */
    const int lr = tid >> 3, lc = tid & 7;
    const __half *srcA = Wh + (size_t)(m0 + lr) * (size_t)K + lc * 8;
    const __half *srcB = Xh + (size_t)(n0 + lr) * (size_t)K + lc * 8;
    unsigned okA = 0, okB = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        okA |= (m0 + lr + 32 * i < Mc ? 1u : 0u) << i;
        if (i < LB) okB |= (n0 + lr + 32 * i < N ? 1u : 0u) << i;
    }
    auto load_stage = [&](int st, int kt) {
        const size_t k0 = (size_t)kt * W_BK;
        const uint32_t sa = base + (uint32_t)st * W_STAGE_BYTES(BN), sb = sa + W_BM * W_BK * 2;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = lr + 32 * i;
            const uint32_t off = (uint32_t)row * 128u + ((uint32_t)(lc ^ (row & 7)) << 4);
            const bool a = (okA >> i) & 1, b = (okB >> i) & 1;
            w_cp16(sa + off, a ? srcA + (size_t)(32 * i) * (size_t)K + k0 : (const __half *)Wh, a ? 16 : 0);
            if (i < LB) w_cp16(sb + off, b ? srcB + (size_t)(32 * i) * (size_t)K + k0 : (const __half *)Xh, b ? 16 : 0);
        }
    };

    constexpr int ND = BN / 2;   /* accumulators a thread: 64 rows x BN tokens over 128 threads */
    float d[ND];
#pragma unroll
    for (int i = 0; i < ND; i++) d[i] = 0.0f;

#pragma unroll
    for (int s = 0; s < W_ST - 1; s++) {
        if (s < KT) load_stage(s, s);
        w_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        w_wait<W_ST - 2>();
        /* this thread's copies of stage kt are in shared memory; make them visible to the
         * async proxy (wgmma) before the barrier publishes them to the other warps */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();   /* also: every wgmma of kt - 1 has completed (wait_group 0 below) */
        {
            const int nk = kt + W_ST - 1;
            if (nk < KT) load_stage(nk % W_ST, nk);
            w_commit();
        }
        const uint32_t sa = base + (uint32_t)(kt % W_ST) * W_STAGE_BYTES(BN), sb = sa + W_BM * W_BK * 2;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < W_BK / 16; kk++)
            w_mma(d, w_desc(sa + (uint32_t)wg * 64u * 128u + (uint32_t)kk * 32u), w_desc(sb + (uint32_t)kk * 32u));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        /* the accumulators are written asynchronously: tie every register to this point so
         * the compiler moves no use of them above the wait */
#pragma unroll
        for (int i = 0; i < ND; i++) asm volatile("" : "+f"(d[i])::"memory");
    }
    w_wait<0>();

    /* accumulator i of a thread: n8 block j = i / 4; rows (lane / 4) (+ 8 for i % 4 >= 2) of its
     * warp's 16; tokens 8 j + 2 (lane % 4) + (i % 2) */
    const int64_t mrow = m0 + wg * 64 + wl * 16 + (lane >> 2);
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int64_t n = n0 + j * 8 + (lane & 3) * 2 + c;
            if (n >= N) continue;
            const float is = inv_s[n];
            float *yr = Y + (size_t)n * (size_t)ldy;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t m = mrow + h * 8;
                if (m < Mc) {
                    const float v = d[j * 4 + h * 2 + c] * is;
                    yr[m] = bias ? v + bias[m] : v;
                }
            }
        }
#endif
}

extern "C" bool mi7e_gemm_f16_wgmma_available(void) {
    static int avail = -1;   /* read once: the kernel has an sm_90a image and the device is cc 9.0 */
    if (avail < 0) {
        avail = 0;
#ifdef MI_BUILT_SM90A
        int dev = 0, major = 0, minor = 0;
        cudaFuncAttributes fa;
        if (cudaGetDevice(&dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 &&
            minor == 0 && cudaFuncGetAttributes(&fa, kernel_gemm_f16_wgmma<128>) == cudaSuccess &&
            cudaFuncSetAttribute(kernel_gemm_f16_wgmma<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)W_SMEM(128)) ==
                cudaSuccess &&
            cudaFuncSetAttribute(kernel_gemm_f16_wgmma<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)W_SMEM(64)) ==
                cudaSuccess)
            avail = 1;
        (void)cudaGetLastError();
#endif
    }
    return avail == 1;
}

extern "C" mi_status mi7e_gemm_f16_wgmma_launch(void *stream, const void *wh, const void *xh, const float *inv_s,
                                        const float *bias, float *y, int64_t ldy, int64_t Mc, int64_t N, int64_t K,
                                        int bn) {
    if (!mi7e_gemm_f16_wgmma_available() || K % W_BK || (Mc + W_BM - 1) / W_BM > 65535 || (bn != 64 && bn != 128))
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_gemm_f16_wgmma: not available here or K = %lld, Mc = %lld, tile %d",
                      (long long)K, (long long)Mc, bn);
    const int64_t gm = (Mc + W_BM - 1) / W_BM;
    const dim3 grid((unsigned)((N + bn - 1) / bn), (unsigned)gm);
    if (bn == 128)
        kernel_gemm_f16_wgmma<128><<<grid, W_THREADS, W_SMEM(128), (cudaStream_t)stream>>>(
            (const __half *)wh, (const __half *)xh, inv_s, bias, y, ldy, Mc, N, K);
    else
        kernel_gemm_f16_wgmma<64><<<grid, W_THREADS, W_SMEM(64), (cudaStream_t)stream>>>(
            (const __half *)wh, (const __half *)xh, inv_s, bias, y, ldy, Mc, N, K);
    MI_CU_CHECK_LAUNCH("kernel_gemm_f16_wgmma");
    return MI_OK;
}

/* Hopper's asynchronous primitives as b22's wgmma kernel uses them (gemm_f16_wgmma_sm90a.cu): the
 * shared-memory matrix descriptor and wgmma.mma_async m64n64k16 with A from registers, the
 * mbarrier's init / expect / arrive / parity wait, and the bulk copies (plain and tensor-map 2D)
 * that complete on an mbarrier. Defined only where the sm_90a features exist (FW_HAVE_WGMMA): the
 * kernel body is empty elsewhere. */
#ifndef MI_HOPPER_ASYNC_CUH
#define MI_HOPPER_ASYNC_CUH
#include <cuda.h>   /* CUtensorMap */
#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FW_HAVE_WGMMA 1
#endif

#ifdef FW_HAVE_WGMMA
/* shared-memory matrix descriptor: start >> 4, LBO 1 (unused by swizzled K-major), SBO 1024 B >> 4,
 * swizzle mode 1 (128 bytes) in bits 62-63 */
static __device__ __forceinline__ uint64_t fw_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
/* d += A (registers, m64k16: a warp's 16 rows as mma.m16n8k16's A fragment) x B (the descriptor
 * whose low and high words are dlo, dhi: BN tokens K-major): scale-d true, A and B not negated, B
 * not transposed. The descriptor comes as two words so that stepping it is a 32-bit add. */
static __device__ __forceinline__ void fw_mma(float (&d)[32], const uint32_t (&a)[4], uint32_t dlo, uint32_t dhi) {
    asm volatile("{\n.reg .pred p;\n.reg .b64 db;\nsetp.ne.b32 p, %38, 0;\nmov.b64 db, {%36, %37};\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, db, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(dlo), "r"(dhi), "r"(1));
}
/* the mbarrier at shared address a: armed for n arrivals a phase, then waited for by parity */
static __device__ __forceinline__ void fw_bar_init(uint32_t a, uint32_t n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(a), "r"(n) : "memory");
}
static __device__ __forceinline__ void fw_bar_expect(uint32_t a, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(a), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void fw_bar_arrive(uint32_t a) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(a) : "memory");
}
static __device__ __forceinline__ void fw_bar_wait(uint32_t a, uint32_t parity) {
    uint32_t ok = 0;
    while (!ok)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok)
                     : "r"(a), "r"(parity)
                     : "memory");
}
/* n bytes (a multiple of 16) from global src to shared dst (both 16-byte aligned), counted on bar */
static __device__ __forceinline__ void fw_bulk(uint32_t dst, const void *src, uint32_t n, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"((uint64_t)src), "r"(n), "r"(bar)
                 : "memory");
}
/* the box of map tm at (x, y) into shared address dst, its bytes counted on mbarrier bar */
static __device__ __forceinline__ void fw_tma_2d(uint32_t dst, const CUtensorMap *tm, int x, int y, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"((uint64_t)tm), "r"(x), "r"(y), "r"(bar)
                 : "memory");
}
#endif
#endif

/* Item d46: a kernel prefetches into L2 the first bytes of weights that later kernels of the step
 * read (mi8a_l2_ahead's spans), so that memory the kernels in between leave idle (a latency-bound
 * run, RoPE, attention) streams them ahead. Each warp of the grid has lane 0 issue its share of the
 * spans' pieces of MI8A_L2_PIECE bytes (warp w the pieces w, w + warps, ... counted over all spans),
 * one bulk prefetch a piece: a hint that brings lines into L2 and nothing into the SM, so it may go
 * before the kernel's programmatic wait (weights are written by no kernel). Include from .cu files
 * only. */
#ifndef MI_L2_AHEAD_CUH
#define MI_L2_AHEAD_CUH
#include "phase8a_decode/decode8a.h"

#define MI8A_L2_PIECE (16u << 10)

/* the spans as the kernels take them: each 16-byte aligned and a multiple of 16 bytes long, up to
 * the first empty one (a launcher refuses anything else rather than trim it) */
static inline bool mi8a_l2_ahead_ok(const mi8a_l2_ahead &a) {
    bool end = false;
    for (int s = 0; s < MI8A_L2_AHEAD_SPANS; s++) {
        if (!a.n[s]) end = true;
        else if (end || !a.p[s] || ((uintptr_t)a.p[s] & 15u) || a.n[s] % 16) return false;
    }
    return true;
}

/* a function of its own, the spans passed in registers: inlined, its loop's registers would
 * count against the kernels it begins, some of which sit at their 64 */
static __device__ __noinline__ void l2_ahead_spans(const mi8a_l2_ahead a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x & 31) return;
    const uint32_t warps = gridDim.x * (blockDim.x >> 5), w = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    uint32_t base = 0;   /* the span's first piece among all spans' */
#pragma unroll
    for (int s = 0; s < MI8A_L2_AHEAD_SPANS; s++) {
        const uint32_t n = a.n[s], np = (n + MI8A_L2_PIECE - 1) / MI8A_L2_PIECE;
        if (!n) break;
        /* this warp's first piece of the span: the least i with (base + i) % warps == w */
        for (uint32_t i = (w + warps - base % warps) % warps; i < np; i += warps) {
            const uint32_t off = i * MI8A_L2_PIECE, len = n - off < MI8A_L2_PIECE ? n - off : MI8A_L2_PIECE;
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"((const char *)a.p[s] + off), "r"(len)
                         : "memory");
        }
        base += np;
    }
#else
    (void)a;
#endif
}
/* what a kernel calls first: nothing where the launcher gave no spans */
__device__ __forceinline__ void l2_ahead_issue(const mi8a_l2_ahead &a) {
    if (a.n[0]) l2_ahead_spans(a);
}
#endif

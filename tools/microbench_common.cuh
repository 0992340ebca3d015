/* What the standalone microbenchmarks in tools/ share (no minfer code): a checked runtime call, a
 * launch with its attribute, a grid-wide barrier for a cooperative kernel, a plain streaming read
 * (the read rate the forms are held against) and a timer of whole steps on one stream. */
#ifndef MI_TOOLS_MICROBENCH_COMMON_CUH
#define MI_TOOLS_MICROBENCH_COMMON_CUH
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

struct Bar { unsigned count, gen; };   /* zero before the first launch; every launch leaves count at 0 */

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
/* Every block of the grid arrives before any leaves, and every write before it is visible after
 * it: the block's writes, then thread 0's fence (cumulative) before its arrival. The generation is
 * read before arriving (it cannot move until this block has); the last block resets the count
 * before it moves the generation. A barrier that never completes traps rather than hangs. */
__device__ __forceinline__ void grid_sync(Bar *b) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned g = ld_acquire(&b->gen);
        if (atomicAdd(&b->count, 1u) == gridDim.x - 1) {
            atomicExch(&b->count, 0u);
            __threadfence();
            atomicAdd(&b->gen, 1u);
        } else {
            for (unsigned n = 0; ld_acquire(&b->gen) == g;)
                if (++n == 1u << 30) __trap();
        }
        __threadfence();
    }
    __syncthreads();
}

/* kernel<<<grid, block, smem, st>>>(args...) as a plain launch, a programmatic dependent (the
 * kernel calls griddepcontrol.wait before it reads what the one before wrote) or a cooperative
 * launch (every block resident at once, which grid_sync needs) */
enum LaunchAs { LAUNCH_PLAIN, LAUNCH_PROGRAMMATIC, LAUNCH_COOPERATIVE };
template <typename... KArgs, typename... Args>
static void launch_as(LaunchAs as, void (*kernel)(KArgs...), unsigned grid, unsigned block, size_t smem, cudaStream_t st,
                      Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    if (as == LAUNCH_PROGRAMMATIC) {
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
    } else {
        at[0].id = cudaLaunchAttributeCooperative;
        at[0].val.cooperative = 1;
    }
    cfg.attrs = at;
    cfg.numAttrs = as == LAUNCH_PLAIN ? 0 : 1;
    CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

/* n 16-byte words read once, four loads in flight a thread */
__global__ void k_stream(const uint4 *__restrict__ p, size_t n, uint32_t *out) {
    uint32_t acc = 0;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, st = (size_t)gridDim.x * blockDim.x;
    for (; i + 3 * st < n; i += 4 * st) {
        uint4 a = __ldg(p + i), b = __ldg(p + i + st), c = __ldg(p + i + 2 * st), d = __ldg(p + i + 3 * st);
        acc ^= a.x ^ b.y ^ c.z ^ d.w ^ a.w ^ b.x ^ c.y ^ d.z;
    }
    for (; i < n; i += st) acc ^= __ldg(p + i).x;
    if (acc == 0x12345678u) *out = acc;
}

/* us a step: two steps first, then reps steps between two events on st */
template <typename Fn>
static float time_steps(Fn step, int reps, cudaStream_t st) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 2; i++) step();
    CK(cudaEventRecord(e0, st));
    for (int i = 0; i < reps; i++) step();
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaGetLastError());
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return ms * 1000.f / reps;
}
#endif

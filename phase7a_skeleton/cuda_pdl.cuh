/* Programmatic dependent launch (sm_90). A kernel launched with the attribute may start while
 * the kernel before it in the stream still runs: once every block of that kernel has called
 * pdl_trigger() (or exited), the dependent's blocks are scheduled as SMs free up. The dependent
 * must call pdl_wait() before it reads anything an earlier kernel of the stream wrote, and must
 * write nothing before it (the earlier kernel may still read a buffer the allocator gave both);
 * before pdl_wait() it may only read what no kernel writes (weights), which is the point: its
 * weight loads are in flight while the kernel before it drains. pdl_wait() returns when the
 * earlier grid has completed and its writes are visible. Both are no-ops in a kernel launched
 * without the attribute. Under stream capture the launch becomes a programmatic edge of the
 * CUDA graph. Include from .cu files only. */
#ifndef MI_CUDA_PDL_CUH
#define MI_CUDA_PDL_CUH
#include <cuda_runtime.h>
#include "phase7a_skeleton/cuda_dispatch.h"

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
/* every block calls it once, early: the next kernel may then launch when SMs free up */
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/* When a kernel lets the next one launch. MI_PDL_TRIGGER (a build define; 1 by default):
 *   0  every kernel at its start (pdl_trigger_early; MI_PDL_ENTRY triggers, then waits), so a
 *      chain of programmatic kernels can become resident many kernels ahead of the one running;
 *   1  the small kernels (MI_PDL_ENTRY) only after their wait, 8a's kernels at their start (so
 *      the next one stages its weights while they run);
 *   2  every kernel after its wait (pdl_wait_trigger): at most one kernel ahead.
 * The order of the step's reads and writes is the same in all three. Measured
 * (results/bench-pdl-trigger-b5c7631.jsonl): 1 against 0, the 7B's tg128 +0.9%, the 0.5B's even,
 * and the 0.5B with every small kernel early (MINFER_PDL_MIN_EMBD=1) -1% where 0 lost 16%; 2 as 1.
 * Another value: `make NVDEFS=-DMI_PDL_TRIGGER=N` (tools/bench_builds.sh measures it). */
#ifndef MI_PDL_TRIGGER
#define MI_PDL_TRIGGER 1
#endif
__device__ __forceinline__ void pdl_trigger_early() {
    if (MI_PDL_TRIGGER < 2) pdl_trigger();
}
__device__ __forceinline__ void pdl_wait_trigger() {
    pdl_wait();
    if (MI_PDL_TRIGGER >= 2) pdl_trigger();
}

/* kernel<<<grid, block, smem, st>>>(args...), with the programmatic attribute when pdl. Only
 * for kernels that call pdl_wait() before their first read of an earlier kernel's output. */
template <typename... KArgs, typename... Args>
static inline cudaError_t pdl_launch(bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                     cudaStream_t st, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* the first two instructions of a small kernel that lower phases launch through
 * MI_PDL_LAUNCH: wait for the one before, then let the next kernel launch (every block, before
 * any other memory access, so the order of the step is the plain stream's) */
#define MI_PDL_ENTRY()                   \
    do {                                 \
        if (MI_PDL_TRIGGER >= 1) {       \
            pdl_wait();                  \
            pdl_trigger();               \
        } else {                         \
            pdl_trigger();               \
            pdl_wait();                  \
        }                                \
    } while (0)
/* kernel<<<grid, block, smem, st>>>(args...), a programmatic dependent when mi_cuda_pdl_small() */
#define MI_PDL_LAUNCH(kernel, grid, block, smem, st, ...) \
    pdl_launch(mi_cuda_pdl_small(), kernel, dim3(grid), dim3(block), (size_t)(smem), (cudaStream_t)(st), __VA_ARGS__)

#endif

/* Phase 7e: the one device fact the 7e launchers size their grids by, read once. Plain C. */
#include "phase7e_perf/perf7e.h"
#include <cuda_runtime_api.h>
#include <stdatomic.h>

/* Multiprocessors of the current device, read on the first call (132, an H200's, if the
 * runtime cannot say; the launch that follows reports any real device fault). */
int mi7e_sm_count(void) {
    static _Atomic int sms;
    int n = atomic_load(&sms);
    if (n > 0) return n;
    int dev = 0, v = 0;
    n = cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
                v > 0
            ? v
            : 132;
    (void)cudaGetLastError();
    atomic_store(&sms, n);
    return n;
}

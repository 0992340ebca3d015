/* cp.async (sm_80 and later): 16-byte copies from global to shared memory that proceed while
 * the thread goes on, grouped by commit and waited for by group count. Both addresses must be
 * 16-byte aligned. Used by the split-KV attention (attn_split_kv.cu) to stage V tiles. */
#ifndef MI_ASYNC_COPY_CUH
#define MI_ASYNC_COPY_CUH

__device__ __forceinline__ void async_copy16(void *smem, const void *gmem) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem));
}
/* close the group of this thread's copies issued since the last commit */
__device__ __forceinline__ void async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* wait until at most N of this thread's committed groups are still in flight */
template <int N> __device__ __forceinline__ void async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

#endif

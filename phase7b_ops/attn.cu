/* Causal GQA attention over the KV cache, any n_past, decode (N = 1) and prefill alike
 * (the kernel body is in attn_core.cuh, shared with phase 7d):
 * one block per (query head, query token), 128 threads; keys in tiles of 128 (thread t
 * scores key t0+t), an online softmax (running max and sum, rescaled per tile), then each
 * thread accumulates its output dims over the tile's keys in key order. Reductions are
 * fixed trees in shared memory: no atomics, repeated runs are bit-identical.
 * q [hd*Hq, N], K/V caches [hd*Hkv, n_ctx] (F16 | F32) -> o [hd*Hq, N]; query i sees keys
 * 0 .. n_past+i; KV head = h / (Hq/Hkv); score = scale * dot(q, k). */
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/ops7b.h"
#include "phase7b_ops/attn_core.cuh"

#define ATT_T MI7B_ATT_T
#define ATT_MAX_HD MI7B_ATT_MAX_HD

template <typename KT>
__global__ void __launch_bounds__(ATT_T) kernel_attn(const float *__restrict__ Q, const KT *__restrict__ Kc,
                                                     const KT *__restrict__ Vc, float *__restrict__ O,
                                                     int64_t n_past, int hd, int Hq, int Hkv, float scale) {
    mi7b_attn_body<KT>(Q, Kc, Vc, O, n_past + (int64_t)blockIdx.y + 1, hd, Hq, Hkv, scale);
}

extern "C" bool mi7b_attn_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype) {
    return hd > 0 && hd <= ATT_MAX_HD && hd % 2 == 0 && Hkv > 0 && Hq > 0 && Hq % Hkv == 0 &&
           Hq <= 65535 && (ctype == MI_TYPE_F16 || ctype == MI_TYPE_F32);
}

extern "C" mi_status mi7b_attn(void *stream, const float *q, const void *k, const void *v, mi_type ctype,
                               float *o, int64_t N, int64_t n_past, int64_t hd, int64_t Hq, int64_t Hkv,
                               float scale) {
    if (!mi7b_attn_supported(hd, Hq, Hkv, ctype) || N <= 0 || N > 65535 || n_past < 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7b_attn: hd %lld, Hq %lld, Hkv %lld, N %lld", (long long)hd,
                      (long long)Hq, (long long)Hkv, (long long)N);
    dim3 grid((unsigned)Hq, (unsigned)N);
    cudaStream_t st = (cudaStream_t)stream;
    if (ctype == MI_TYPE_F16)
        kernel_attn<uint16_t><<<grid, ATT_T, 0, st>>>(q, (const uint16_t *)k, (const uint16_t *)v, o, n_past,
                                                      (int)hd, (int)Hq, (int)Hkv, scale);
    else
        kernel_attn<float><<<grid, ATT_T, 0, st>>>(q, (const float *)k, (const float *)v, o, n_past,
                                                   (int)hd, (int)Hq, (int)Hkv, scale);
    MI_CU_CHECK_LAUNCH("kernel_attn");
    return MI_OK;
}

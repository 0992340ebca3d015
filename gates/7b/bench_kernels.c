/* Phase 7b kernel timings on the 7B shape (qwen2.5-7b: n_embd 3584, n_ff 18944, 28 heads,
 * 4 KV heads, head_dim 128): matmul per weight type for decode (N = 1) and prefill
 * (N = 512, 2048), and attention. CUDA events around 5 timed runs after 2 warm-ups,
 * median; prints ms, achieved GB/s (weight bytes) and TOP/s (2*K*M*N). Random inputs.
 * Not a gate (run_device_gates.sh runs only gate_*): prints tables, exits 0. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "common/quant/mi_types.h"
#include "phase7b_ops/ops7b.h"

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); exit(2); } } while (0)

static unsigned long long s_rng = 99;
static uint32_t rnd(void) { s_rng ^= s_rng << 13; s_rng ^= s_rng >> 7; s_rng ^= s_rng << 17; return (uint32_t)s_rng; }

static int cmpf(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* random weight bytes with finite fp16 scales: quantize a few rows, tile them */
static void *dev_weights(mi_type t, int64_t K, int64_t M, size_t *bytes) {
    const size_t rb = mi_row_size(t, K);
    const int64_t uniq = 16;
    uint8_t *h = malloc(rb * (size_t)uniq);
    float *row = malloc((size_t)K * 4);
    for (int64_t m = 0; m < uniq; m++) {
        for (int64_t k = 0; k < K; k++) row[k] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
        mi_quantize_row(t, row, h + rb * (size_t)m, K);
    }
    uint8_t *d = NULL;
    CK(cudaMalloc((void **)&d, rb * (size_t)M));
    for (int64_t m = 0; m < M; m += uniq) {
        const int64_t c = M - m < uniq ? M - m : uniq;
        CK(cudaMemcpy(d + rb * (size_t)m, h, rb * (size_t)c, cudaMemcpyHostToDevice));
    }
    free(h);
    free(row);
    *bytes = rb * (size_t)M;
    return d;
}

int main(void) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("skipped: no CUDA device\n");
        return 0;
    }
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int64_t Nmax = 2048;
    const int64_t shapes[][2] = {{3584, 18944}, {18944, 3584}, {3584, 3584}, {3584, 512}};
    const mi_type types[] = {MI_TYPE_Q4_K, MI_TYPE_Q6_K, MI_TYPE_Q4_0, MI_TYPE_Q8_0, MI_TYPE_Q5_0, MI_TYPE_F16};
    float *x = NULL, *y = NULL;
    void *ws = NULL;
    CK(cudaMalloc((void **)&x, (size_t)18944 * Nmax * 4));
    CK(cudaMalloc((void **)&y, (size_t)18944 * Nmax * 4));
    CK(cudaMalloc(&ws, (size_t)18944 * Nmax * 2));
    {
        float *h = malloc((size_t)18944 * Nmax * 4);
        for (size_t i = 0; i < (size_t)18944 * Nmax; i++) h[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
        CK(cudaMemcpy(x, h, (size_t)18944 * Nmax * 4, cudaMemcpyHostToDevice));
        free(h);
    }
    printf("%-6s %6s %6s %5s %10s %9s %9s\n", "type", "K", "M", "N", "ms", "GB/s", "TOP/s");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t K = shapes[si][0], M = shapes[si][1];
            size_t wb;
            void *w = dev_weights(types[ti], K, M, &wb);
            const int64_t Ns[] = {1, 512, 2048};
            for (int ni = 0; ni < 3; ni++) {
                const int64_t N = Ns[ni];
                float t[5];
                for (int r = 0; r < 7; r++) {
                    CK(cudaEventRecord(e0, st));
                    if (mi7b_matmul(st, types[ti], w, x, NULL, y, K, M, N, ws) != MI_OK) {
                        fprintf(stderr, "matmul: %s\n", mi_errmsg());
                        return 1;
                    }
                    CK(cudaEventRecord(e1, st));
                    CK(cudaEventSynchronize(e1));
                    if (r >= 2) CK(cudaEventElapsedTime(&t[r - 2], e0, e1));
                }
                qsort(t, 5, sizeof t[0], cmpf);
                const double ms = t[2];
                printf("%-6s %6lld %6lld %5lld %10.4f %9.1f %9.2f\n", mi_type_name(types[ti]), (long long)K,
                       (long long)M, (long long)N, ms, wb / ms / 1e6, 2.0 * K * M * N / ms / 1e9);
            }
            CK(cudaFree(w));
        }
    /* attention, 7B heads, F16 cache */
    {
        const int hd = 128, Hq = 28, Hkv = 4;
        const int64_t n_ctx = 4096, row = (int64_t)hd * Hkv;
        void *k = NULL, *v = NULL;
        CK(cudaMalloc(&k, (size_t)(n_ctx * row) * 2));
        CK(cudaMalloc(&v, (size_t)(n_ctx * row) * 2));
        CK(cudaMemset(k, 0x11, (size_t)(n_ctx * row) * 2));
        CK(cudaMemset(v, 0x22, (size_t)(n_ctx * row) * 2));
        const int64_t cases[][2] = {{1, 128}, {1, 2047}, {512, 0}, {2048, 0}};
        printf("%-10s %6s %6s %10s\n", "attn", "N", "n_past", "ms");
        for (int c = 0; c < 4; c++) {
            float t[5];
            for (int r = 0; r < 7; r++) {
                CK(cudaEventRecord(e0, st));
                if (mi7b_attn(st, x, k, v, MI_TYPE_F16, y, cases[c][0], cases[c][1], hd, Hq, Hkv, 0.088f) != MI_OK) {
                    fprintf(stderr, "attn: %s\n", mi_errmsg());
                    return 1;
                }
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                if (r >= 2) CK(cudaEventElapsedTime(&t[r - 2], e0, e1));
            }
            qsort(t, 5, sizeof t[0], cmpf);
            printf("%-10s %6lld %6lld %10.4f\n", "attn_f16", (long long)cases[c][0], (long long)cases[c][1], t[2]);
        }
        CK(cudaFree(k));
        CK(cudaFree(v));
    }
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(ws));
    return 0;
}

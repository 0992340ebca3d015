/* A one-token Q4_K matmul's fixed cost and its grid: 7e's streaming kernel itself (from its header,
 * so the kernel the dispatch runs), timed alone over its own weight copies (3 GB of copies: no L2
 * hits), back-to-back launches without PDL. Not built by make; no minfer library.
 *   nvcc -std=c++17 -O3 -arch=sm_90 --fmad=false -I. -o /tmp/q4k_fixed_cost tools/q4k_fixed_cost.cu
 * Part 1: the fused gate/up (K = 3,584) over F = 4,224 k rows (k rows a warp at one wave) in its
 * norm form and in its staged form (x quantized beforehand, no norm), against an empty kernel of the same
 * grid and a plain 16-byte streaming read of the same bytes: a line through the times gives each
 * form's fixed cost and its streaming rate. Part 2: the 7B's shapes with 256- and 1,024-thread
 * blocks, a block's rows consecutive or spread over every SM (SPREAD); the forms without a norm
 * quantize x in the kernel.
 * Results: results/mb-q4k-fixed-cost-*.txt, results/notes/PHASE8A.md. */
#include "phase7e_perf/matvec_q4k_kernel.cuh"
#include <cstdio>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
__global__ void __launch_bounds__(256, 4) k_empty(const uint8_t *w, float *y) { if (w == (const uint8_t *)1) y[0] = 1; }
__global__ void __launch_bounds__(256, 4) k_stream(const uint4 *__restrict__ p, size_t n, float *out) {
    uint32_t acc = 0;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, st = (size_t)gridDim.x * blockDim.x;
    for (; i + 3 * st < n; i += 4 * st) {
        uint4 a = __ldg(p + i), b = __ldg(p + i + st), c = __ldg(p + i + 2 * st), d = __ldg(p + i + 3 * st);
        acc ^= a.x ^ b.y ^ c.z ^ d.w ^ a.w ^ b.x ^ c.y ^ d.z;
    }
    for (; i < n; i += st) { uint4 a = __ldg(p + i); acc ^= a.x ^ a.w; }
    if (acc == 0x12345678u) *out = acc;
}
template <typename L>
static float timeit(L launch, int reps) {
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int r = -3; r < reps; r++) { if (r == 0) cudaEventRecord(e0); launch(r + 3); }
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    return ms * 1000.f / reps;
}
static uint8_t *buf, *aq;
static float *x, *nw, *y;
static const size_t total = (size_t)3 << 30;
static int sms;
template <bool FUSED, bool NORM, int TH, bool SPREAD>
static void one(const char *name, int64_t K, int64_t M) {
    const int nsb = (int)(K / 256);
    const size_t smem = q4k_smem(K, NORM);
    auto kern = kernel_matvec_q4k<FUSED, true, NORM, false, false, TH, SPREAD>;
    int b = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kern, TH, smem);
    const int64_t wave = (int64_t)sms * b, want = SPREAD ? M : (M + TH / 32 - 1) / (TH / 32);
    const int64_t nb = want < wave ? want : wave;
    const size_t mb = (size_t)M * nsb * 144 * (FUSED ? 2 : 1), copies = total / mb;
    float t = timeit([&](int r) {
        const uint8_t *w = buf + (size_t)(r % copies) * mb;
        kern<<<(unsigned)nb, TH, smem>>>(w, w + mb / 2, M, nsb, NULL, x, NULL, y, nw, 1e-6f, NULL);
    }, 30);
    printf("| %s | %d | %s | %lld | %.2f | %.0f |\n", name, TH, SPREAD ? "spread" : "contiguous", (long long)nb, t, mb / t / 1e3);
}

static void part1() {
    const int nsb = 14, K = 3584;
    const size_t smn = q4k_smem(K, true), smq = q4k_smem(K, false);
    printf("| rows a warp | F | MB | norm us | staged us | empty us | stream us | norm GB/s | stream GB/s |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int k : {1, 2, 3, 4, 5, 6, 8}) {
        const int64_t F = 4224 * k;
        const size_t mb = (size_t)F * nsb * 144 * 2, copies = total / mb;
        const int64_t nb = sms * 4;
        auto W = [&](int r) { return buf + (size_t)(r % copies) * mb; };
        float tn = timeit([&](int r) { kernel_matvec_q4k<true, true, true, false, false><<<nb, 256, smn>>>(W(r), W(r) + mb / 2, F, nsb, NULL, x, NULL, y, nw, 1e-6f, NULL); }, 20);
        float tq = timeit([&](int r) { kernel_matvec_q4k<true, false, false, false, false><<<nb, 256, smq>>>(W(r), W(r) + mb / 2, F, nsb, aq, NULL, NULL, y, NULL, 0.f, NULL); }, 20);
        float te = timeit([&](int r) { k_empty<<<nb, 256, smn>>>(W(r), y); }, 20);
        float ts = timeit([&](int r) { k_stream<<<sms * 4, 256>>>((const uint4 *)W(r), mb / 16, y); }, 20);
        printf("| %d | %lld | %.1f | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f |\n", k, (long long)F, mb / 1e6, tn, tq, te, ts, mb / tn / 1e3, mb / ts / 1e3);
    }
}
static void part2() {
    printf("\n| shape | threads | rows | blocks | us | GB/s |\n| --- | ---: | --- | ---: | ---: | ---: |\n");
    one<true, true, 256, false>("gate/up 3584x18944 +norm", 3584, 18944);
    one<true, true, 256, true>("gate/up 3584x18944 +norm", 3584, 18944);
    one<true, true, 1024, false>("gate/up 3584x18944 +norm", 3584, 18944);
    one<true, true, 1024, true>("gate/up 3584x18944 +norm", 3584, 18944);
    one<false, false, 1024, false>("down 18944x3584", 18944, 3584);
    one<false, false, 1024, true>("down 18944x3584", 18944, 3584);
    one<false, false, 256, false>("down 18944x3584", 18944, 3584);
    one<false, false, 256, true>("down 18944x3584", 18944, 3584);
    one<false, false, 256, false>("q/o 3584x3584", 3584, 3584);
    one<false, false, 256, true>("q/o 3584x3584", 3584, 3584);
    one<false, true, 256, false>("q/o 3584x3584 +norm", 3584, 3584);
    one<false, true, 256, true>("q/o 3584x3584 +norm", 3584, 3584);
    one<false, false, 1024, true>("q/o 3584x3584", 3584, 3584);
}
int main() {
    CK(cudaMalloc(&buf, total)); CK(cudaMemset(buf, 0x11, total));
    CK(cudaMalloc(&x, 18944 * 4)); CK(cudaMalloc(&nw, 18944 * 4)); CK(cudaMalloc(&y, 65536 * 4)); CK(cudaMalloc(&aq, 1 << 16));
    CK(cudaMemset(x, 0, 18944 * 4)); CK(cudaMemset(nw, 0, 18944 * 4)); CK(cudaMemset(aq, 0, 1 << 16));
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    for (int pass = 0; pass < 2; pass++) {
        printf("pass %d\n", pass + 1);
        part1();
        part2();
    }
    CK(cudaGetLastError());
    return 0;
}

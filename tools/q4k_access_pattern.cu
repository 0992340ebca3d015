/* Does the one-token Q4_K matmul's access pattern itself read at the HBM rate? A standalone
 * microbenchmark (not built by make; no minfer code): kernels that load the 7B's gate/up and down
 * weights (random bytes of the same sizes) exactly as 7e's streaming Q4_K kernel does (a warp a row
 * or a gate/up row pair, octet q of each group of 4 super-blocks taking one, lane t its 16-byte
 * header and qs bytes 16t..16t+15, the next loads issued after the current ones are used), but do
 * only a stand-in for the arithmetic: WORK dependent integer operations a unit, LDS the activation's
 * shared-memory reads of a unit, R rows a warp at once sharing them; and (k_span) the same bytes
 * laid out for the loads, a row as one contiguous span. Against a plain 16-byte streaming read
 * of 2 GB. Each call reads its own copy of the weights (2 GB of copies: no L2 hits).
 *   nvcc -std=c++17 -O3 -arch=sm_90 -I. -o /tmp/q4k_pattern tools/q4k_access_pattern.cu && /tmp/q4k_pattern
 * Results: results/mb-q4k-pattern-*.txt, results/notes/PHASE8A.md. */
#include "tools/microbench_common.cuh"   /* CK, k_stream */

// warp per row (pair when FUSED), the 7e lane map: iteration covers 4U super-blocks of 144 B
// HDR: each lane also loads the 16-byte header of its super-block. WORK: dummy dependent int ops per unit.
template <bool FUSED, int U, bool HDR, int WORK, int LDS = 0, int R = 1>
__global__ void __launch_bounds__(256, 4) k_rows(const uint8_t *__restrict__ W, const uint8_t *__restrict__ W2, int64_t M, int nsb, uint32_t *out) {
    constexpr int NS = (FUSED ? 2 : 1) * R;
    __shared__ uint4 sact[14 * 16 + 64];
    if (LDS) { for (int i = threadIdx.x; i < 14 * 16 + 64; i += 256) sact[i] = make_uint4(i, i * 3, i * 5, i * 7); __syncthreads(); }
    const int lane = threadIdx.x & 31, q = lane >> 3, t = lane & 7;
    const size_t wrow = (size_t)nsb * 144;
    const int nit = (nsb + 4 * U - 1) / (4 * U);
    const int64_t stride = (int64_t)gridDim.x * 8;
    M /= R;   /* row: a group of R rows */
    int64_t row = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    int it = 0;
    uint4 h[NS][U], v[NS][U];
    uint32_t acc = lane;
    auto load = [&]() {
#pragma unroll
        for (int g = 0; g < U; g++) {
            const int s = it * 4 * U + 4 * g + q;
#pragma unroll
            for (int k = 0; k < NS; k++) {
                const int kk = FUSED ? (k & 1) : 0, rr = FUSED ? k >> 1 : k;
                const uint8_t *sb = (kk ? W2 : W) + (size_t)(row * R + rr) * wrow + (size_t)s * 144;
                if (s < nsb) {
                    if (HDR) h[k][g] = __ldg((const uint4 *)sb); else h[k][g] = make_uint4(0,0,0,0);
                    v[k][g] = __ldg((const uint4 *)(sb + 16 + 16 * t));
                } else { h[k][g] = v[k][g] = make_uint4(0, 0, 0, 0); }
            }
        }
    };
    if (row < M) load();
    while (row < M) {
#pragma unroll
        for (int g = 0; g < U; g++) {
            uint4 a0 = make_uint4(0, 0, 0, 0), a1 = a0;
            uint32_t sdv = 0, sbv = 0;
            if (LDS) {   /* the activation reads of one unit (shared by the rows of the warp) */
                const int s = (it * 4 * U + 4 * g + q) % 14;
                volatile uint4 *vs = sact;
                a0 = ((uint4 *)vs)[s * 16 + (t ^ (s & 7))];
                a1 = ((uint4 *)vs)[s * 16 + ((t + 2) ^ (s & 7))];
                sdv = ((uint32_t *)vs)[14 * 64 + s];
                sbv = ((uint32_t *)vs)[14 * 64 + 16 + s * 8 + t];
            }
#pragma unroll
            for (int k = 0; k < NS; k++) {
                uint32_t x = v[k][g].x ^ v[k][g].y ^ v[k][g].z ^ v[k][g].w ^ h[k][g].x ^ h[k][g].y ^ a0.x ^ a1.y ^ sdv ^ sbv ^ a0.w ^ a1.z;
#pragma unroll
                for (int j = 0; j < WORK; j++) x = x * 1664525u + (x >> 7);
                acc += x;
                acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            }
        }
        if (++it == nit) { it = 0; row += stride; }
        if (row < M) load();
    }
    if (acc == 0x12345678u) *out = acc;
}

/* A layout made for these loads: a row (a gate/up row pair when FUSED) as one contiguous span of
 * its super-blocks' bytes (headers and quants repacked, the same bytes), read by the warp in
 * 512-byte instructions (lane l the 16 bytes at 16 l of each), every load of a row in flight at
 * once, then the next row's. CH: 16-byte chunks a lane holds (the row's span / 512, rounded up). */
template <bool FUSED, int CH, int WORK>
__global__ void __launch_bounds__(256, 4) k_span(const uint8_t *__restrict__ W, int64_t M, int nsb, uint32_t *out) {
    const int lane = threadIdx.x & 31;
    const size_t span = (size_t)nsb * 144 * (FUSED ? 2 : 1), n16 = span / 16;
    const int64_t stride = (int64_t)gridDim.x * 8;
    uint32_t acc = lane;
    for (int64_t row = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5); row < M; row += stride) {
        const uint4 *p = (const uint4 *)(W + (size_t)row * span);
        uint4 v[CH];
#pragma unroll
        for (int j = 0; j < CH; j++) {
            const size_t i = (size_t)j * 32 + lane;
            v[j] = i < n16 ? __ldg(p + i) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < CH; j++) {
            uint32_t x = v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
#pragma unroll
            for (int k = 0; k < WORK; k++) x = x * 1664525u + (x >> 7);
            acc += x;
        }
    }
    if (acc == 0x12345678u) *out = acc;
}

template <typename F>
static float time_it(F launch, int reps) {
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int i = 0; i < 3; i++) launch(i);
    cudaEventRecord(a);
    for (int i = 0; i < reps; i++) launch(i);
    cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b);
    return ms * 1000.f / reps;
}

int main() {
    const size_t total = (size_t)2 << 30;
    uint8_t *buf; uint32_t *out;
    CK(cudaMalloc(&buf, total)); CK(cudaMalloc(&out, 4));
    CK(cudaMemset(buf, 1, total));
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    // baseline streaming over 2 GB
    float us = time_it([&](int) { k_stream<<<sms * 4, 512>>>((const uint4 *)buf, total / 16, out); }, 9);
    printf("stream 2 GB: %.1f us, %.0f GB/s\n", us, total / us / 1e3);
    const int64_t K = 3584, F = 18944; const int nsb = K / 256;
    const size_t mb = (size_t)F * nsb * 144;   // one matrix
    const int copies = (int)(total / (2 * mb));
    auto rows = [&](const char *name, auto kern, bool fused, int64_t Mrows, int nsbx, int rgrp = 1) {
        const size_t one = (size_t)Mrows * nsbx * 144;
        const int ncp = (int)(total / ((fused ? 2 : 1) * one));
        int bpsm = 0; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bpsm, kern, 256, 0);
        int64_t nb = (Mrows / rgrp + 7) / 8; if (nb > (int64_t)sms * bpsm) nb = (int64_t)sms * bpsm;
        float t = time_it([&](int i) {
            const uint8_t *w = buf + (size_t)(i % ncp) * (fused ? 2 : 1) * one;
            kern<<<(unsigned)nb, 256>>>(w, w + one, Mrows, nsbx, out);
        }, 40);
        const double bytes = (double)(fused ? 2 : 1) * one;
        printf("%-44s %7.1f us %6.0f GB/s (%d blocks/SM, %lld blocks)\n", name, t, bytes / t / 1e3, bpsm, (long long)nb);
    };
    (void)copies;
    rows("fused U2 hdr work0", k_rows<true, 2, true, 0>, true, F, nsb);
    rows("fused U2 hdr work8 lds", k_rows<true, 2, true, 8, 1>, true, F, nsb);
    rows("fused U2 hdr work24 lds", k_rows<true, 2, true, 24, 1>, true, F, nsb);
    rows("fused U2 nohdr work24 lds", k_rows<true, 2, false, 24, 1>, true, F, nsb);
    rows("fused U1 R2 hdr work24 lds", k_rows<true, 1, true, 24, 1, 2>, true, F, nsb, 2);
    rows("fused U1 R2 hdr work8 lds", k_rows<true, 1, true, 8, 1, 2>, true, F, nsb, 2);
    rows("single U4 hdr work24 lds (down)", k_rows<false, 4, true, 24, 1>, false, 3584, 74);
    rows("single U2 R2 hdr work24 lds (down)", k_rows<false, 2, true, 24, 1, 2>, false, 3584, 74, 2);
    rows("fused U2 nohdr work0", k_rows<true, 2, false, 0>, true, F, nsb);
    rows("fused U2 hdr work8", k_rows<true, 2, true, 8>, true, F, nsb);
    rows("fused U2 hdr work24", k_rows<true, 2, true, 24>, true, F, nsb);
    rows("fused U2 hdr work48", k_rows<true, 2, true, 48>, true, F, nsb);
    rows("single U4 hdr work0 (gate)", k_rows<false, 4, true, 0>, false, F, nsb);
    rows("single U4 hdr work24 (gate)", k_rows<false, 4, true, 24>, false, F, nsb);
    rows("single U4 hdr work0 (down K=18944)", k_rows<false, 4, true, 0>, false, 3584, 74);
    rows("single U4 hdr work24 (down K=18944)", k_rows<false, 4, true, 24>, false, 3584, 74);
    auto spans = [&](const char *name, auto kern, bool fused, int64_t Mrows, int nsbx) {
        const size_t one = (size_t)Mrows * nsbx * 144 * (fused ? 2 : 1);
        const int ncp = (int)(total / one);
        int bpsm = 0; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bpsm, kern, 256, 0);
        int64_t nb = (Mrows + 7) / 8; if (nb > (int64_t)sms * bpsm) nb = (int64_t)sms * bpsm;
        float t = time_it([&](int i) { kern<<<(unsigned)nb, 256>>>(buf + (size_t)(i % ncp) * one, Mrows, nsbx, out); }, 40);
        printf("%-44s %7.1f us %6.0f GB/s (%d blocks/SM, %lld blocks)\n", name, t, one / t / 1e3, bpsm, (long long)nb);
    };
    /* the 7B's K = 3584: a row 2,016 bytes (4 chunks a lane), a fused pair 4,032 (8); K = 18,944: 10,656 (21) */
    spans("span fused work0", k_span<true, 8, 0>, true, F, nsb);
    spans("span fused work24", k_span<true, 8, 24>, true, F, nsb);
    spans("span single work0 (gate)", k_span<false, 4, 0>, false, F, nsb);
    spans("span single work0 (down K=18944)", k_span<false, 21, 0>, false, 3584, 74);
    rows("fused U1 hdr work0", k_rows<true, 1, true, 0>, true, F, nsb);
    rows("fused U4 hdr work0", k_rows<true, 4, true, 0>, true, F, nsb);
    return 0;
}

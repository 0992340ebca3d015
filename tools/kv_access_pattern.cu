/* Does the paged attention's access to the KV pool read at the HBM rate? A standalone
 * microbenchmark (not built by make; no minfer code). The 7B's decode step at 64 sequences: 4 KV
 * heads of 128 halves (a cache row: 1 KB of K, 1 KB of V), blocks of 16 rows, 640 keys a sequence,
 * the block tables as the pool hands them out in `minfer bench --batch 64 -p 512 -n 128` (each
 * prompt's 32 blocks in a run, then the generated tokens' blocks taken in turn by the sequences).
 * Every kernel reads the same bytes: K and V of every (sequence, head) once, 16-byte loads, two
 * 64-key tiles in flight a thread, the values folded so the loads are not dropped:
 *   rows    the pool as it is ([row][head][128]), a block of 128 threads a (sequence, head): a
 *           key's 256 bytes of one head, 1 KB apart (the paged attention's blocks today);
 *   heads   a head-major pool ([head][row][128]), the same blocks: a table block's 16 keys of one
 *           head are 4 KB in one span;
 *   wide    the pool as it is, a block of 512 threads a sequence's half of its keys (four heads, 128
 *           blocks): a key's 1 KB whole;
 *   rows3   rows with three tiles in flight a thread instead of two;
 *   span    rows' blocks and loads in flight over one contiguous span each (no table).
 * Four copies of the pool, one a call: no L2 hits.
 *   nvcc -std=c++17 -O3 -arch=sm_90 -o /tmp/kv_pattern tools/kv_access_pattern.cu && /tmp/kv_pattern
 * Results: results/mb-kv-pattern-*.txt, results/notes/PHASE8B.md. */
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

constexpr int HKV = 4, HD = 128, BLK = 16, SEQS = 64, KEYS = 640, TK = 64;
constexpr int NBLK = KEYS / BLK;                       /* blocks a sequence */
constexpr int ROWS = SEQS * KEYS;                      /* the pool's rows */
constexpr size_t ROWB = (size_t)HKV * HD * 2;          /* a cache row's bytes, K or V */

/* one 64-key tile of K and V of head h for thread t (of 128): keys t / 16 + 8 j, 16-byte chunk t % 16 */
template <bool HEADS>
__device__ __forceinline__ void tile_loads(const uint4 *K, const uint4 *V, const int *tab, int h, int t0, int t,
                                           uint4 (&k)[8], uint4 (&v)[8]) {
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int key = t0 + t / 16 + 8 * j, row = tab[key / BLK] * BLK + key % BLK;
        const size_t at = HEADS ? ((size_t)h * ROWS + row) * (HD / 8) + t % 16 : (size_t)row * (ROWB / 16) + h * (HD / 8) + t % 16;
        k[j] = __ldg(K + at);
        v[j] = __ldg(V + at);
    }
}

/* NT tiles in flight */
template <bool HEADS, int NT = 2>
__global__ void __launch_bounds__(128) k_heads(const uint4 *K, const uint4 *V, const int *tabs, uint32_t *out) {
    const int s = blockIdx.x / HKV, h = blockIdx.x % HKV, t = threadIdx.x;
    const int *tab = tabs + s * NBLK;
    uint32_t acc = 0;
    for (int t0 = 0; t0 < KEYS; t0 += NT * TK) {
        uint4 k[NT][8], v[NT][8];
#pragma unroll
        for (int i = 0; i < NT; i++)
            if (t0 + i * TK < KEYS) tile_loads<HEADS>(K, V, tab, h, t0 + i * TK, t, k[i], v[i]);
#pragma unroll
        for (int i = 0; i < NT; i++)
            if (t0 + i * TK < KEYS)
#pragma unroll
                for (int j = 0; j < 8; j++) acc ^= k[i][j].x ^ v[i][j].y;
    }
    if (acc == 0x12345678u) *out = acc;
}

/* the same bytes as one contiguous span a (sequence, head), the same blocks and loads in flight */
__global__ void __launch_bounds__(128) k_span(const uint4 *K, const uint4 *V, uint32_t *out) {
    const size_t per = (size_t)KEYS * HD / 8;   /* 16-byte chunks a (sequence, head) */
    const uint4 *k = K + blockIdx.x * per, *v = V + blockIdx.x * per;
    uint32_t acc = 0;
    for (size_t c = threadIdx.x; c < per; c += 2 * TK * 16) {
        uint4 a[16], b[16];
#pragma unroll
        for (int j = 0; j < 16; j++) a[j] = __ldg(k + c + j * 128), b[j] = __ldg(v + c + j * 128);
#pragma unroll
        for (int j = 0; j < 16; j++) acc ^= a[j].x ^ b[j].y;
    }
    if (acc == 0x12345678u) *out = acc;
}

__global__ void __launch_bounds__(512) k_wide(const uint4 *K, const uint4 *V, const int *tabs, uint32_t *out) {
    const int s = blockIdx.x / 2, h = threadIdx.x / 128, t = threadIdx.x % 128, k0 = (blockIdx.x % 2) * (KEYS / 2);
    const int *tab = tabs + s * NBLK;
    uint32_t acc = 0;
    int t0 = k0;
    for (; t0 + 2 * TK <= k0 + KEYS / 2; t0 += 2 * TK) {
        uint4 ka[8], va[8], kb[8], vb[8];
        tile_loads<false>(K, V, tab, h, t0, t, ka, va);
        tile_loads<false>(K, V, tab, h, t0 + TK, t, kb, vb);
#pragma unroll
        for (int j = 0; j < 8; j++) acc ^= ka[j].x ^ va[j].y ^ kb[j].z ^ vb[j].w;
    }
    if (t0 < k0 + KEYS / 2) {   /* the half's fifth tile */
        uint4 ka[8], va[8];
        tile_loads<false>(K, V, tab, h, t0, t, ka, va);
#pragma unroll
        for (int j = 0; j < 8; j++) acc ^= ka[j].x ^ va[j].y;
    }
    if (acc == 0x12345678u) *out = acc;
}

int main() {
    const size_t bytes = (size_t)ROWS * ROWB;   /* K or V of one copy */
    const int COPIES = 4;
    uint8_t *buf;
    CK(cudaMalloc(&buf, 2 * bytes * COPIES));
    CK(cudaMemset(buf, 0x5a, 2 * bytes * COPIES));
    /* the tables: each prompt's 32 blocks in a run, then the generated tokens' 8 blocks in turn */
    std::vector<int> tab(SEQS * NBLK);
    for (int s = 0; s < SEQS; s++)
        for (int b = 0; b < NBLK; b++) tab[s * NBLK + b] = b < 32 ? s * 32 + b : SEQS * 32 + (b - 32) * SEQS + s;
    int *dtab;
    uint32_t *dout;
    CK(cudaMalloc(&dtab, tab.size() * sizeof(int)));
    CK(cudaMalloc(&dout, 4));
    CK(cudaMemcpy(dtab, tab.data(), tab.size() * sizeof(int), cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const char *name[5] = {"rows  (the pool as it is, a block a sequence and head)",
                           "heads (a head-major pool, the same blocks)",
                           "wide  (the pool as it is, a block a sequence's half)",
                           "rows3 (rows, three tiles in flight a thread)",
                           "span  (a contiguous span a block, rows' blocks and loads in flight)"};
    for (int kind = 0; kind < 5; kind++) {
        float best = 1e30f, sum = 0;
        const int reps = 20;
        for (int r = 0; r < reps + 2; r++) {
            const int c = r % COPIES;
            const uint4 *K = (const uint4 *)(buf + (size_t)c * 2 * bytes), *V = (const uint4 *)(buf + ((size_t)c * 2 + 1) * bytes);
            cudaEventRecord(e0);
            if (kind == 0) k_heads<false><<<SEQS * HKV, 128>>>(K, V, dtab, dout);
            else if (kind == 1) k_heads<true><<<SEQS * HKV, 128>>>(K, V, dtab, dout);
            else if (kind == 2) k_wide<<<2 * SEQS, 512>>>(K, V, dtab, dout);
            else if (kind == 3) k_heads<false, 3><<<SEQS * HKV, 128>>>(K, V, dtab, dout);
            else k_span<<<SEQS * HKV, 128>>>(K, V, dout);
            cudaEventRecord(e1);
            CK(cudaEventSynchronize(e1));
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            if (r >= 2) {
                best = ms < best ? ms : best;
                sum += ms;
            }
        }
        printf("%s: best %.1f us, mean %.1f us, %.0f GB/s at the best\n", name[kind], 1e3f * best, 1e3f * sum / reps,
               2.0 * bytes / (best * 1e-3) / 1e9);
    }
    return 0;
}

/* The 7B's decode layers as 8a runs them against the same kernel bodies in one persistent kernel:
 * what a persistent layer kernel would win on the real arithmetic, and whether its bits hold.
 * A standalone prototype (not built by make; no minfer library): 8a's Q4_K kernel body itself
 * (phase7e_perf/matvec_q4k_kernel.cuh's matvec_q4k_rows, one block of 1,024 threads an SM, rows
 * spread: items d39-d42) for four phases a layer, 28 layers, all weights Q4_K of the 7B's shapes:
 *   run   q, k, v = W_qkv . rms_norm(h_l)                   (d17's run: 3,584 + 512 + 512 rows)
 *   o     h'_l = h_l + W_o . q_l                            (q standing in for the attention's output)
 *   ffn   a_l = silu(W_g . rms_norm(h'_l)) * (W_u . ...)    (d39's fused gate/up, 2 x 18,944 rows)
 *   down  h_l+1 = h'_l + W_d . a_l                          (d40's down, K = 18,944)
 * (the real 7B also has attention, RoPE and KV stores between run and o, and Q6_K v and downs in
 * half its layers: ~7 us and ~1.5 ms a step the prototype leaves out.)
 *   A: a kernel a phase, launched as programmatic dependents (8a's d6) in one CUDA graph;
 *      also plain launches.
 *      Also each kernel prefetching into L2, as it begins, the next phase's first bytes (the way
 *      8a's d46 did; measured slower, it was removed).
 *   B: one cooperative kernel: the same bodies one after another, a grid barrier between phases
 *      (an arrival counter and a generation word); optionally each warp prefetches into L2, before
 *      it arrives, its share of the next phase's first bytes (each row's first iteration: the
 *      body's own first loads come only after the barrier).
 * Every buffer is written once and read only after it is written (a layer's h, q, h', a of its
 * own), so the body's read-only (nc) loads of x stay valid inside one kernel; an engine form
 * would read x through L2 instead. h_28 of each form is compared byte for byte with A's plain
 * launches, before and after it is timed, every other activation poisoned (NaN) first.
 *   nvcc -std=c++17 -O3 -arch=sm_90 --fmad=false -I. -o /tmp/persistent_layer tools/persistent_layer.cu
 * Results: results/mb-persistent-layer-*.txt, results/notes/PHASE8A.md. */
#include "phase7e_perf/matvec_q4k_kernel.cuh"
#include "phase8a_decode/run_rows.cuh"
#include "tools/microbench_common.cuh"
#include <cstring>
#include <vector>

constexpr int L = 28, E = 3584, F = 18944, KV = 512;
constexpr float EPS = 1e-6f;
static size_t sb_bytes(int64_t K, int64_t M) { return (size_t)(K / 256) * 144 * (size_t)M; }

struct Layer {
    const uint8_t *wq, *wk, *wv, *wo, *wg, *wu, *wd;
    const float *nw_attn, *nw_ffn;
    float *h, *q, *k, *v, *h2, *a, *h_next;   /* h_next is the next layer's h */
};

/* the four phases: the body with PDL for A's kernels, without for B */
/* Each phase reads its layer's fields as it starts (B holds no layer in registers across phases). */
template <bool PDL, int TH>
__device__ __forceinline__ void ph_run(const Layer *lp) {
    const Layer &l = *lp;
    run_rows rr;
    rr.W[0] = l.wq, rr.W[1] = l.wk, rr.W[2] = l.wv, rr.W[3] = l.wq;
    rr.bias[0] = rr.bias[1] = rr.bias[2] = rr.bias[3] = NULL;
    rr.Y[0] = l.q, rr.Y[1] = l.k, rr.Y[2] = l.v, rr.Y[3] = l.q;
    rr.end[0] = E, rr.end[1] = E + KV, rr.end[2] = E + 2 * KV, rr.end[3] = INT64_MAX;
    rr.wrow = 0;
    matvec_q4k_rows<false, true, true, false, PDL, run_rows, TH, true>(rr, E + 2 * KV, E / 256, NULL, l.h, l.nw_attn, EPS, NULL);
}
template <bool PDL, int TH>
__device__ __forceinline__ void ph_o(const Layer *lp) {
    const Layer &l = *lp;
    const q4k_rows_one r = {l.wo, l.wo, NULL, l.h2};
    matvec_q4k_rows<false, true, false, true, PDL, q4k_rows_one, TH, true>(r, E, E / 256, NULL, l.q, NULL, 0.f, l.h);
}
template <bool PDL, int TH>
__device__ __forceinline__ void ph_ffn(const Layer *lp) {
    const Layer &l = *lp;
    const q4k_rows_one r = {l.wg, l.wu, NULL, l.a};
    matvec_q4k_rows<true, true, true, false, PDL, q4k_rows_one, TH, true>(r, F, E / 256, NULL, l.h2, l.nw_ffn, EPS, NULL);
}
template <bool PDL, int TH>
__device__ __forceinline__ void ph_down(const Layer *lp) {
    const Layer &l = *lp;
    const q4k_rows_one r = {l.wd, l.wd, NULL, l.h_next};
    matvec_q4k_rows<false, true, false, true, PDL, q4k_rows_one, TH, true>(r, E, F / 256, NULL, l.a, NULL, 0.f, l.h2);
}

/* The next phase's weights the body loads first: each row's first `first` bytes (its first
 * iteration's super-blocks: 16 of 144 bytes unfused, 8 of gate and of up fused), row after row up to
 * pf bytes in all (a fused phase: gate's and up's rows alike, half each); lane 0 of each warp takes
 * rows w, w + warps, ... (the body's SPREAD map). */
struct Next {
    const uint8_t *w, *w2;   /* w2: up, or NULL */
    int64_t M;
    uint32_t rb, first;
};
__device__ __forceinline__ void prefetch_next(const Next &n, uint32_t pf) {
    if ((threadIdx.x & 31) || !pf || !n.w) return;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32), wi = (int64_t)(threadIdx.x >> 5) * gridDim.x + blockIdx.x;
    const uint32_t first = n.first < n.rb ? n.first : n.rb;
    const int64_t rows = (int64_t)pf / (first * (n.w2 ? 2 : 1));
    for (int64_t r = wi; r < rows && r < n.M; r += warps) {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(n.w + (size_t)r * n.rb), "r"(first) : "memory");
        if (n.w2)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(n.w2 + (size_t)r * n.rb), "r"(first) : "memory");
    }
}
/* what a layer's phase p reads first */
__device__ __forceinline__ Next next_of(const Layer &l, int p) {
    constexpr uint32_t RE = (E / 256) * 144, RF = (F / 256) * 144;
    if (p == 0) return {l.wq, NULL, E, RE, 16 * 144};   /* the run: q's rows first */
    if (p == 1) return {l.wo, NULL, E, RE, 16 * 144};
    if (p == 2) return {l.wg, l.wu, F, RE, 8 * 144};
    return {l.wd, NULL, E, RF, 16 * 144};
}
/* A's kernels: TH threads, MINB blocks an SM (the engine's: 1,024 and one); nx: the next phase's
 * weights, pf bytes of them prefetched as the kernel begins (as 8a's removed d46 did), before its wait */
template <int P, bool PDL, int TH, int MINB>
__global__ void __launch_bounds__(TH, MINB) k_phase(const Layer l, const Next nx, uint32_t pf) {
    prefetch_next(nx, pf);
    if (P == 0) ph_run<PDL, TH>(&l);
    if (P == 1) ph_o<PDL, TH>(&l);
    if (P == 2) ph_ffn<PDL, TH>(&l);
    if (P == 3) ph_down<PDL, TH>(&l);
}

/* The layer index lives in shared memory and every other operand is a kernel parameter. Even so
 * the four bodies inlined into one kernel need more registers than each alone: at 1,024 threads
 * (64 registers) the kernel spills ~730 bytes, at 512 (one block an SM, 128 registers) 8; both
 * are timed, each beside A at the same block size and warps an SM. */
template <int TH>
__global__ void __launch_bounds__(TH, 1) k_persist(const Layer *ls, Bar *bar, uint32_t pf) {
    __shared__ volatile int s_layer;
    if (threadIdx.x == 0) s_layer = 0;
    __syncthreads();
    while (s_layer < L) {
        ph_run<false, TH>(ls + s_layer);
        prefetch_next(next_of(ls[s_layer], 1), pf);
        grid_sync(bar);
        ph_o<false, TH>(ls + s_layer);
        prefetch_next(next_of(ls[s_layer], 2), pf);
        grid_sync(bar);
        ph_ffn<false, TH>(ls + s_layer);
        prefetch_next(next_of(ls[s_layer], 3), pf);
        grid_sync(bar);
        ph_down<false, TH>(ls + s_layer);
        if (s_layer + 1 == L) break;   /* every block leaves at the same layer */
        prefetch_next(next_of(ls[s_layer + 1], 0), pf);
        grid_sync(bar);   /* also orders the index's update after every warp's last read of it */
        if (threadIdx.x == 0) s_layer = s_layer + 1;
        __syncthreads();
    }
}

/* valid Q4_K super-blocks: random quants and scales, d and dmin small finite halves */
__global__ void k_fill_q4k(uint8_t *w, size_t nsb, uint32_t seed) {
    for (size_t s = blockIdx.x * (size_t)blockDim.x + threadIdx.x; s < nsb; s += (size_t)gridDim.x * blockDim.x) {
        uint32_t *p = (uint32_t *)(w + s * 144), h = (uint32_t)s * 2654435761u ^ seed;
        for (int j = 1; j < 36; j++) {
            h ^= h << 13; h ^= h >> 17; h ^= h << 5;
            p[j] = h;
        }
        const uint16_t d = (uint16_t)(0x1000 + (h & 0x3FF)), dm = (uint16_t)(0x0C00 + ((h >> 10) & 0x3FF));
        p[0] = (uint32_t)d | ((uint32_t)dm << 16);
    }
}
__global__ void k_fill_f32(float *x, size_t n, float lo, float hi, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2246822519u ^ seed;
        h ^= h >> 15; h *= 2654435761u; h ^= h >> 13;
        x[i] = lo + (hi - lo) * (float)(h >> 8) / 16777216.f;
    }
}

static int sms;
static cudaStream_t st;
static size_t smem_max;

template <int P, int TH, int MINB>
static void launch_a(const Layer &l, const Next &nx, uint32_t pf, bool pdl) {
    const unsigned grid = (unsigned)(sms * MINB);
    if (pdl) launch_as(LAUNCH_PROGRAMMATIC, k_phase<P, true, TH, MINB>, grid, TH, smem_max, st, l, nx, pf);
    else launch_as(LAUNCH_PLAIN, k_phase<P, false, TH, MINB>, grid, TH, smem_max, st, l, nx, pf);
}
/* the host's copy of next_of */
static Next next_host(const Layer &l, int p) {
    const uint32_t RE = (E / 256) * 144, RF = (F / 256) * 144;
    if (p == 0) return {l.wq, NULL, E, RE, 16 * 144};
    if (p == 1) return {l.wo, NULL, E, RE, 16 * 144};
    if (p == 2) return {l.wg, l.wu, F, RE, 8 * 144};
    return {l.wd, NULL, E, RF, 16 * 144};
}
template <int TH, int MINB>
static cudaGraphExec_t graph_a(const std::vector<Layer> &ls, bool pdl, uint32_t pf = 0) {
    void (*ks[8])(const Layer, const Next, uint32_t) = {k_phase<0, true, TH, MINB>, k_phase<1, true, TH, MINB>, k_phase<2, true, TH, MINB>,
                                  k_phase<3, true, TH, MINB>, k_phase<0, false, TH, MINB>, k_phase<1, false, TH, MINB>,
                                  k_phase<2, false, TH, MINB>, k_phase<3, false, TH, MINB>};
    for (auto k : ks) CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_max));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    const Next none = {NULL, NULL, 0, 16, 16};
    for (size_t i = 0; i < ls.size(); i++) {
        const Layer &l = ls[i];
        launch_a<0, TH, MINB>(l, next_host(l, 1), pf, pdl);
        launch_a<1, TH, MINB>(l, next_host(l, 2), pf, pdl);
        launch_a<2, TH, MINB>(l, next_host(l, 3), pf, pdl);
        launch_a<3, TH, MINB>(l, i + 1 < ls.size() ? next_host(ls[i + 1], 0) : none, pf, pdl);
    }
    CK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphDestroy(g));
    return ge;
}
template <int TH>
static void launch_b(const Layer *d_ls, Bar *bar, uint32_t pf) {
    launch_as(LAUNCH_COOPERATIVE, k_persist<TH>, (unsigned)sms, TH, smem_max, st, d_ls, bar, pf);
}

int main() {
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    smem_max = q4k_smem(F, false) > q4k_smem(E, true) ? q4k_smem(F, false) : q4k_smem(E, true);
    int coop = 0, occ1024 = 0, occ512 = 0;
    CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    CK(cudaFuncSetAttribute(k_persist<1024>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_max));
    CK(cudaFuncSetAttribute(k_persist<512>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_max));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ1024, k_persist<1024>, 1024, smem_max));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ512, k_persist<512>, 512, smem_max));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s: %d SMs; persistent kernel blocks an SM: %d of 1,024 threads, %d of 512; %zu B shared; cooperative %s\n",
           prop.name, sms, occ1024, occ512, smem_max, coop ? "yes" : "no");
    if (!coop || occ1024 < 1 || occ512 < 1) return 1;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    /* weights: one arena, a layer's seven matrices */
    const size_t per = sb_bytes(E, E) + 2 * sb_bytes(E, KV) + sb_bytes(E, E) + 2 * sb_bytes(E, F) + sb_bytes(F, E);
    uint8_t *arena;
    CK(cudaMalloc(&arena, per * L));
    k_fill_q4k<<<sms * 8, 256, 0, st>>>(arena, per * L / 144, 0x5eed);
    const size_t nact = (size_t)L * (E + 2 * KV + E + F + E) + E;   /* q, k, v, h2, a, h_next a layer; h0 */
    float *act, *nw;
    CK(cudaMalloc(&act, nact * 4));
    CK(cudaMalloc(&nw, (size_t)L * 2 * E * 4));
    k_fill_f32<<<sms * 4, 256, 0, st>>>(nw, (size_t)L * 2 * E, 0.5f, 1.5f, 11);
    std::vector<Layer> ls(L);
    uint8_t *w = arena;
    float *a = act;
    auto take_w = [&](size_t b) { uint8_t *p = w; w += b; return p; };
    auto take_a = [&](size_t n) { float *p = a; a += n; return p; };
    float *h0 = take_a(E);
    for (int i = 0; i < L; i++) {
        Layer &l = ls[i];
        l.wq = take_w(sb_bytes(E, E)), l.wk = take_w(sb_bytes(E, KV)), l.wv = take_w(sb_bytes(E, KV));
        l.wo = take_w(sb_bytes(E, E)), l.wg = take_w(sb_bytes(E, F)), l.wu = take_w(sb_bytes(E, F));
        l.wd = take_w(sb_bytes(F, E));
        l.nw_attn = nw + (size_t)i * 2 * E, l.nw_ffn = nw + (size_t)i * 2 * E + E;
        l.h = i ? ls[i - 1].h_next : h0;
        l.q = take_a(E), l.k = take_a(KV), l.v = take_a(KV), l.h2 = take_a(E), l.a = take_a(F);
        l.h_next = take_a(E);
    }
    Layer *d_ls;
    CK(cudaMalloc(&d_ls, sizeof(Layer) * L));
    CK(cudaMemcpyAsync(d_ls, ls.data(), sizeof(Layer) * L, cudaMemcpyHostToDevice, st));
    Bar *bar;
    CK(cudaMalloc(&bar, sizeof(Bar)));
    CK(cudaMemsetAsync(bar, 0, sizeof(Bar), st));
    uint32_t *sink;
    CK(cudaMalloc(&sink, 4));
    CK(cudaStreamSynchronize(st));
    const size_t total = per * L;
    const float us_read = time_steps([&] { k_stream<<<sms * 4, 512, 0, st>>>((const uint4 *)arena, total / 16, sink); }, 5, st);
    const double gbs = total / (us_read * 1e3), ideal = us_read;
    printf("weights %.2f GB (%d layers: run, o, gate/up, down); a plain read %.1f us, %.0f GB/s\n", total / 1e9, L, us_read, gbs);

    std::vector<float> ref(E), got(E);
    float *h_last = ls[L - 1].h_next;
    /* every activation but h0 poisoned first (NaN), so a phase skipped or one that read before its
     * input was written shows in h_28 */
    auto one_step = [&](auto step, std::vector<float> &out) {
        CK(cudaMemsetAsync(act + E, 0xFF, (nact - E) * 4, st));
        k_fill_f32<<<8, 256, 0, st>>>(h0, E, -1.f, 1.f, 3);
        CK(cudaGetLastError());
        step();
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        CK(cudaMemcpy(out.data(), h_last, E * 4, cudaMemcpyDeviceToHost));
    };
    cudaGraphExec_t plain = graph_a<1024, 1>(ls, false), pdl = graph_a<1024, 1>(ls, true);
    cudaGraphExec_t pdl_pf = graph_a<1024, 1>(ls, true, 8u << 20);
    cudaGraphExec_t pdl512x2 = graph_a<512, 2>(ls, true), pdl512x1 = graph_a<512, 1>(ls, true);
    one_step([&] { CK(cudaGraphLaunch(plain, st)); }, ref);
    int finite = 0;
    for (float v : ref) finite += v == v && v - v == 0.f;
    printf("h_28 from the plain launches: %d of %d finite, h_28[0] = %g\n", finite, E, ref[0]);
    printf("| form | us a step (%d layers) | us a layer | GB/s | of the read rate | h_28 |\n| --- | ---: | ---: | ---: | ---: | --- |\n", L);
    int bad = finite != E;
    /* checked before and after its timed steps */
    auto row = [&](const char *name, auto step) {
        one_step(step, got);
        bool same = !memcmp(got.data(), ref.data(), E * 4);
        const float us = time_steps(step, 10, st);
        one_step(step, got);
        same = same && !memcmp(got.data(), ref.data(), E * 4);
        bad += !same;
        printf("| %s | %.1f | %.2f | %.0f | %.1f%% | %s |\n", name, us, us / L, total / (us * 1e3), 100.0 * ideal / us,
               same ? "same bits" : "DIFFERS");
        fflush(stdout);
    };
    for (int round = 0; round < 2; round++) {
        row("A 1024x1 (32 warps an SM): plain launches", [&] { CK(cudaGraphLaunch(plain, st)); });
        row("A 1024x1 (32 warps): programmatic dependents (8a's d6)", [&] { CK(cudaGraphLaunch(pdl, st)); });
        row("A 1024x1 (32 warps): + next phase's first bytes to L2 as each begins, 8 MB",
            [&] { CK(cudaGraphLaunch(pdl_pf, st)); });
        row("B 1024x1 (32 warps, spills): persistent, grid barriers", [&] { launch_b<1024>(d_ls, bar, 0); });
        row("B 1024x1 (32 warps, spills): + next first bytes to L2 before each barrier, 8 MB",
            [&] { launch_b<1024>(d_ls, bar, 8u << 20); });
        row("A 512x2 (32 warps): programmatic dependents", [&] { CK(cudaGraphLaunch(pdl512x2, st)); });
        row("A 512x1 (16 warps): programmatic dependents", [&] { CK(cudaGraphLaunch(pdl512x1, st)); });
        row("B 512x1 (16 warps): persistent, grid barriers", [&] { launch_b<512>(d_ls, bar, 0); });
        row("B 512x1 (16 warps): + next first bytes to L2, 8 MB", [&] { launch_b<512>(d_ls, bar, 8u << 20); });
        row("B 512x1 (16 warps): + next first bytes to L2, 16 MB", [&] { launch_b<512>(d_ls, bar, 16u << 20); });
    }
    printf("\n%s\n", bad ? "FAILED: a form's h_28 differs from the plain launches' (or is not finite)" : "every form's h_28 the same bits");
    return bad ? 1 : 0;
}

/* Would one persistent kernel a decode step read its weights closer to the HBM rate than a CUDA
 * graph of programmatic dependents, the way 8a runs a step now? A standalone microbenchmark (not
 * built by make; no minfer code). A step is the chain of matvec phases of the 7B's and the 0.5B's
 * one-token decode (q/k/v, attention, o, gate/up, down a layer, then the head), each reading its
 * weight rows once (the sizes of their formats, rows rounded up to 16 bytes) and the previous
 * phase's output x, and writing its own output: every phase depends on the one before it.
 * A phase's rows: a warp a row, lane l reading the row's 16-byte chunks l, l + 32, ... (8 a lane in
 * flight: 4 KB a warp), rows spread over the blocks (row w * grid + b); a stand-in for the
 * arithmetic per chunk: two 16-byte reads of x staged in shared memory, 8 dp4a and WORK dependent
 * integer operations (24 for the real Q4_K kernel's cost, tools/q4k_access_pattern.cu); x staged
 * into shared memory after the wait, as 8a's kernels stage their quantized activation.
 *   A:  a kernel a phase, in one CUDA graph: plain launches; or programmatic dependents (each
 *       lets the next launch at its start, loads its first weights, then waits: 8a's d6);
 *       optionally each kernel's warps prefetch into L2 the next phase's first rows of bytes
 *       after their own rows, or as the kernel begins (pf < 0, as 8a's d46 did; measured
 *       slower, it was removed).
 *   B:  one cooperative kernel a step, a grid-wide barrier between phases (an arrival counter and
 *       a generation word); optionally each warp loads its first weights of the next phase before
 *       it arrives (preload), and prefetches pf bytes of its next rows into L2
 *       (cp.async.bulk.prefetch.L2).
 * The same blocks in both (512 threads, two an SM; B's kernel spills a few loop variables at 64
 * registers, A's none). Each form's last output is compared with the
 * plain graph's, byte for byte, before it is timed (a barrier that let a phase read x early would
 * show). Also the boundaries alone: every phase 16 bytes a row.
 *   nvcc -std=c++17 -O3 -arch=sm_90 -I. -o /tmp/persistent_step tools/persistent_step.cu && /tmp/persistent_step
 * Results: results/mb-persistent-step-*.txt, results/notes/PHASE8A.md. */
#include "tools/microbench_common.cuh"
#include <cstring>
#include <vector>

constexpr int TH = 512, WARPS = TH / 32, G = 8, BPSM = 2;   /* G: 16-byte chunks a lane in flight */
constexpr int XMAX = 18944;                                  /* the longest x a phase stages (bytes) */

struct Phase {
    const uint8_t *w;   /* M rows of rb bytes, 16-byte aligned */
    int64_t M;
    int rb, K;          /* bytes a row; x's length staged (bytes) */
    int64_t xm;         /* the previous output's length (>= K) */
};

__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

__device__ __forceinline__ int ngroups(int rb) { return (rb / 16 + 32 * G - 1) / (32 * G); }
__device__ __forceinline__ void load_group(const Phase &p, int64_t row, int grp, uint4 (&v)[G]) {
    const uint4 *r = (const uint4 *)(p.w + (size_t)row * p.rb);
    const int n16 = p.rb / 16, lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < G; j++) {
        const int c = (grp * G + j) * 32 + lane;
        v[j] = c < n16 ? __ldg(r + c) : make_uint4(0, 0, 0, 0);
    }
}
template <int WORK>
__device__ __forceinline__ uint32_t dot_group(const uint4 (&v)[G], const int4 *xs, int xmask, int grp, uint32_t acc) {
    const int lane = threadIdx.x & 31;
    const uint32_t m = 0x0F0F0F0Fu;
#pragma unroll
    for (int j = 0; j < G; j++) {
        const int c = (grp * G + j) * 32 + lane;
        const int4 a = xs[(2 * c) & xmask], b = xs[(2 * c + 1) & xmask];
        /* the sums wrap in 32 bits (dp4a's); acc is unsigned so the stand-in's own wrapping is defined */
        acc = (uint32_t)__dp4a((int)(v[j].x & m), a.x, (int)acc);
        acc = (uint32_t)__dp4a((int)(v[j].y & m), a.y, (int)acc);
        acc = (uint32_t)__dp4a((int)(v[j].z & m), a.z, (int)acc);
        acc = (uint32_t)__dp4a((int)(v[j].w & m), a.w, (int)acc);
        acc = (uint32_t)__dp4a((int)((v[j].x >> 4) & m), b.x, (int)acc);
        acc = (uint32_t)__dp4a((int)((v[j].y >> 4) & m), b.y, (int)acc);
        acc = (uint32_t)__dp4a((int)((v[j].z >> 4) & m), b.z, (int)acc);
        acc = (uint32_t)__dp4a((int)((v[j].w >> 4) & m), b.w, (int)acc);
#pragma unroll
        for (int k = 0; k < WORK; k++) acc = acc * 1664525u + (acc >> 7);
    }
    return acc;
}
/* the largest power of two of 16-byte words of x, less one (the stand-in's index mask) */
__device__ __forceinline__ int x_mask(int K) {
    int n = K / 16, m = 1;
    while (2 * m <= n) m *= 2;
    return m - 1;
}
/* x [K] (K <= the previous output's length, checked on the host) into shared memory, read through
 * L2 (another block wrote it in this kernel in form B); then the words past the part the stand-in
 * indexes (x_mask) XORed into it, so every byte of x reaches the output. Ends on a barrier. */
__device__ __forceinline__ void stage_x(const Phase &p, const int8_t *x, int4 *xs) {
    uint32_t *xw = (uint32_t *)xs;
    const int nw = p.K / 4, head = 4 * (x_mask(p.K) + 1);
    for (int k = threadIdx.x; k < nw; k += TH) xw[k] = __ldcg((const uint32_t *)x + k);
    __syncthreads();
    for (int j = threadIdx.x; j < head; j += TH) {
        uint32_t v = xw[j];
        for (int k = j + head; k < nw; k += head) v ^= xw[k];
        xw[j] = v;
    }
    __syncthreads();
}
/* the warp's rows of one phase; v holds its first row's first group when pre */
template <int WORK>
__device__ __forceinline__ void run_rows(const Phase &p, const int4 *xs, int8_t *y, int64_t gw, int64_t tw,
                                         uint4 (&v)[G], bool pre) {
    const int lane = threadIdx.x & 31, ng = ngroups(p.rb), xmask = x_mask(p.K);
    for (int64_t row = gw; row < p.M; row += tw) {
        uint32_t acc = (uint32_t)row;
        for (int grp = 0; grp < ng; grp++) {
            if (!(pre && row == gw && grp == 0)) load_group(p, row, grp, v);
            acc = dot_group<WORK>(v, xs, xmask, grp, acc);
        }
#pragma unroll
        for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) y[row] = (int8_t)(acc ^ (acc >> 9) ^ (acc >> 17));
    }
}
/* lane 0 of each warp: up to pf bytes of its rows of phase p into L2, past the first group of its
 * first row (which the warp loads into registers before its wait or barrier) */
__device__ __forceinline__ void prefetch_rows(const Phase &p, int64_t gw, int64_t tw, int pf) {
    if ((threadIdx.x & 31) || pf <= 0) return;
    int skip = 32 * G * 16 < p.rb ? 32 * G * 16 : p.rb;
    for (int64_t row = gw; row < p.M && pf > 0; row += tw, skip = 0) {
        const int n = p.rb - skip < pf ? p.rb - skip : pf;
        if (n > 0)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p.w + (size_t)row * p.rb + skip), "r"(n)
                         : "memory");
        pf -= n;
    }
}

/* A: one phase */
template <int WORK>
__global__ void __launch_bounds__(TH, BPSM) k_phase(Phase p, Phase next, int pf, const int8_t *x, int8_t *y) {
    __shared__ int4 xs[XMAX / 16];
    pdl_trigger();
    const int64_t tw = (int64_t)gridDim.x * WARPS, gw = (int64_t)(threadIdx.x >> 5) * gridDim.x + blockIdx.x;
    uint4 v[G];
    const bool pre = gw < p.M;
    if (next.w && pf < 0) prefetch_rows(next, gw, tw, -pf);   /* as it begins */
    if (pre) load_group(p, gw, 0, v);
    pdl_wait();
    stage_x(p, x, xs);
    run_rows<WORK>(p, xs, y, gw, tw, v, pre);
    if (next.w && pf > 0) prefetch_rows(next, gw, tw, pf);   /* after its own rows */
}

/* B: every phase of a step, a grid barrier between them */
template <int WORK>
__global__ void __launch_bounds__(TH, BPSM) k_persist(const Phase *ph, int n, int8_t *b0, int8_t *b1, Bar *bar,
                                                      int preload, int pf) {
    __shared__ int4 xs[XMAX / 16];
    const int64_t tw = (int64_t)gridDim.x * WARPS, gw = (int64_t)(threadIdx.x >> 5) * gridDim.x + blockIdx.x;
    uint4 v[G];
    bool pre = false;
    for (int i = 0; i < n; i++) {
        const Phase p = ph[i];
        stage_x(p, (i & 1) ? b1 : b0, xs);
        run_rows<WORK>(p, xs, (i & 1) ? b0 : b1, gw, tw, v, pre);
        pre = false;
        if (i + 1 < n) {
            const Phase q = ph[i + 1];
            if (preload && gw < q.M) {
                load_group(q, gw, 0, v);
                pre = true;
            }
            prefetch_rows(q, gw, tw, pf);
            grid_sync(bar);
        }
    }
}

__global__ void k_fill(uint4 *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        p[i] = make_uint4(h, h * 3266489917u, h ^ 0x9E3779B9u, h * 668265263u);
    }
}

struct Shape { int K; int64_t M; int rb; };
struct Model {
    const char *name;
    std::vector<Shape> shapes;   /* a step's phases, in order */
};
static int r16(double b) { return (int)((b + 15) / 16) * 16; }
/* bytes a row: Q4_K 144 / 256, Q6_K 210 / 256, Q4_0 18 / 32, Q8_0 34 / 32 elements */
static Model model_7b() {
    Model m{"qwen2.5-7b Q4_K_M", {}};
    for (int l = 0; l < 28; l++) {
        m.shapes.push_back({3584, 3584 + 512 + 512, r16(3584 / 256 * 144)});   /* q, k, v */
        m.shapes.push_back({3584, 3584, 144});                                  /* attention: 516 KB of K/V */
        m.shapes.push_back({3584, 3584, r16(3584 / 256 * 144)});                /* o */
        m.shapes.push_back({3584, 2 * 18944, r16(3584 / 256 * 144)});           /* gate, up */
        m.shapes.push_back({18944, 3584, r16(18944 / 256 * (l % 2 ? 144 : 210))});   /* down: Q6_K in half the layers */
    }
    m.shapes.push_back({3584, 152064, r16(3584 / 256 * 210)});                  /* head, Q6_K */
    return m;
}
static Model model_05b() {
    Model m{"qwen2.5-0.5b Q4_0", {}};
    for (int l = 0; l < 24; l++) {
        m.shapes.push_back({896, 896 + 128 + 128, r16(896 / 32 * 18)});
        m.shapes.push_back({896, 896, 144});                                    /* attention: 129 KB */
        m.shapes.push_back({896, 896, r16(896 / 32 * 18)});
        m.shapes.push_back({896, 2 * 4864, r16(896 / 32 * 18)});
        m.shapes.push_back({4864, 896, r16(4864 / 32 * 18)});
    }
    m.shapes.push_back({896, 151936, r16(896 / 32 * 34)});                      /* head, Q8_0 */
    return m;
}
/* every phase 16 bytes a row, as many rows as the next phase's x: the boundaries alone */
static Model empty_of(const Model &full, const char *name) {
    Model m{name, {}};
    const size_t n = full.shapes.size();
    for (size_t i = 0; i < n; i++) m.shapes.push_back({full.shapes[i].K, i + 1 < n ? full.shapes[i + 1].K : 1, 16});
    return m;
}

static int sms;
static float read_gbs;

struct Run {
    std::vector<Phase> ph;
    Phase *d_ph = nullptr;
    int8_t *buf[2] = {nullptr, nullptr};
    size_t bytes = 0, buf_bytes = 0;
    int64_t x0 = 0;
};
static Run make_run(const Model &m, uint8_t *arena) {
    Run r;
    size_t off = 0;
    int64_t prev = m.shapes[0].K, ymax = prev;
    r.x0 = prev;
    for (const Shape &s : m.shapes) {
        if (prev < s.K || s.K % 64 || s.K > XMAX) {
            printf("%s: a phase of K = %d after an output of %lld (want K <= it, K %% 64 == 0, K <= %d)\n", m.name, s.K,
                   (long long)prev, XMAX);
            exit(1);
        }
        r.ph.push_back({arena + off, s.M, s.rb, s.K, prev});
        off += (size_t)s.M * s.rb;
        prev = s.M;
        if (s.M > ymax) ymax = s.M;
    }
    r.bytes = off;
    CK(cudaMalloc(&r.d_ph, r.ph.size() * sizeof(Phase)));
    CK(cudaMemcpy(r.d_ph, r.ph.data(), r.ph.size() * sizeof(Phase), cudaMemcpyHostToDevice));
    r.buf_bytes = (size_t)ymax + 16;
    for (int b = 0; b < 2; b++) CK(cudaMalloc(&r.buf[b], r.buf_bytes));
    return r;
}
static cudaStream_t g_st;   /* every launch, fills included: one stream, in order */
/* both buffers poisoned, then the first x: a step that skipped a phase cannot leave the last
 * run's output behind to be compared */
static void reset_x(const Run &r) {
    for (int b = 0; b < 2; b++) CK(cudaMemsetAsync(r.buf[b], 0xA5, r.buf_bytes, g_st));
    k_fill<<<64, 256, 0, g_st>>>((uint4 *)r.buf[0], (size_t)(r.x0 + 15) / 16, 7u);
    CK(cudaGetLastError());
}

template <int WORK>
static cudaGraphExec_t graph_a(const Run &r, bool pdl, int pf, cudaStream_t st) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    const int n = (int)r.ph.size();
    for (int i = 0; i < n; i++) {
        const Phase &p = r.ph[i];
        const Phase next = i + 1 < n ? r.ph[i + 1] : Phase{nullptr, 0, 16, 16, 1};
        const int64_t grid = p.M < (int64_t)sms * BPSM ? p.M : (int64_t)sms * BPSM;
        const int8_t *x = r.buf[i & 1];
        int8_t *y = r.buf[(i + 1) & 1];
        launch_as(pdl ? LAUNCH_PROGRAMMATIC : LAUNCH_PLAIN, k_phase<WORK>, (unsigned)grid, TH, 0, st, p, next, pf, x, y);
    }
    CK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphDestroy(g));
    return ge;
}
template <int WORK>
static void launch_b(const Run &r, Bar *bar, int preload, int pf, cudaStream_t st) {
    launch_as(LAUNCH_COOPERATIVE, k_persist<WORK>, (unsigned)(sms * BPSM), TH, 0, st, (const Phase *)r.d_ph,
              (int)r.ph.size(), r.buf[0], r.buf[1], bar, preload, pf);
}


static int failures;
/* one step from the same x, its last output against the reference's */
template <typename L>
static bool same_as(const Run &r, const std::vector<int8_t> &ref, L step, cudaStream_t st) {
    reset_x(r);
    CK(cudaDeviceSynchronize());
    step();
    CK(cudaStreamSynchronize(st));
    std::vector<int8_t> got(ref.size());
    CK(cudaMemcpy(got.data(), r.buf[r.ph.size() & 1], got.size(), cudaMemcpyDeviceToHost));
    return !memcmp(got.data(), ref.data(), ref.size());
}

template <int WORK>
static void bench_model(const Model &m, uint8_t *arena, Bar *bar, cudaStream_t st, int reps) {
    Run r = make_run(m, arena);
    const double ideal = r.bytes / (read_gbs * 1e3);   /* us at the read rate */
    printf("\n%s, WORK %d: %zu phases, %.1f MB a step, %.1f us at %.0f GB/s\n", m.name, WORK, r.ph.size(), r.bytes / 1e6,
           ideal, read_gbs);
    printf("| form | us a step | GB/s | of the read rate | (us - ideal) a boundary | same output |\n");
    printf("| --- | ---: | ---: | ---: | ---: | --- |\n");
    std::vector<int8_t> ref((size_t)r.ph.back().M);
    cudaGraphExec_t plain = graph_a<WORK>(r, false, 0, st);
    reset_x(r);
    CK(cudaGraphLaunch(plain, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(ref.data(), r.buf[r.ph.size() & 1], ref.size(), cudaMemcpyDeviceToHost));
    auto row = [&](const char *name, bool ok, float us) {
        if (!ok) failures++;
        printf("| %s | %.1f | %.0f | %.1f%% | %.2f | %s |\n", name, us, r.bytes / (us * 1e3), 100.0 * ideal / us,
               (us - ideal) / r.ph.size(), ok ? "yes" : "NO");
        fflush(stdout);
    };
    row("A: graph, plain launches", true, time_steps([&] { CK(cudaGraphLaunch(plain, st)); }, reps, st));
    struct { const char *name; bool pdl; int pf; } as[] = {
        {"A: graph, programmatic (8a's d6)", true, 0},
        {"A: programmatic + next rows to L2, 2 KB a warp", true, 2048},
        {"A: programmatic + next rows to L2, 8 KB a warp", true, 8192},
        {"A: programmatic + next rows to L2 as it begins, 2 KB a warp", true, -2048},
    };
    for (auto &a : as) {
        cudaGraphExec_t ge = graph_a<WORK>(r, a.pdl, a.pf, st);
        auto step = [&] { CK(cudaGraphLaunch(ge, st)); };
        const bool ok = same_as(r, ref, step, st);
        const float us = time_steps(step, reps, st);
        row(a.name, ok && same_as(r, ref, step, st), us);   /* checked after its timed steps too */
        CK(cudaGraphExecDestroy(ge));
    }
    struct { const char *name; int preload, pf; } bs[] = {
        {"B: persistent, barrier only", 0, 0},
        {"B: + first weights loaded before the barrier", 1, 0},
        {"B: + next rows to L2, 2 KB a warp", 1, 2048},
        {"B: + next rows to L2, 8 KB a warp", 1, 8192},
    };
    for (auto &b : bs) {
        auto step = [&] { launch_b<WORK>(r, bar, b.preload, b.pf, st); };
        const bool ok = same_as(r, ref, step, st);
        const float us = time_steps(step, reps, st);
        row(b.name, ok && same_as(r, ref, step, st), us);
    }
    CK(cudaGraphExecDestroy(plain));
    CK(cudaFree(r.d_ph));
    for (int b = 0; b < 2; b++) CK(cudaFree(r.buf[b]));
}

int main() {
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int coop = 0;
    CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    int occ_a = 0, occ_b = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_a, k_phase<24>, TH, 0));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_b, k_persist<24>, TH, 0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s: %d SMs, L2 %d MB; blocks of %d threads an SM: A %d, B %d (want %d); cooperative launch %s\n", prop.name,
           sms, prop.l2CacheSize >> 20, TH, occ_a, occ_b, BPSM, coop ? "yes" : "no");
    if (!coop || occ_b < BPSM) {
        printf("cannot run form B here\n");
        return 1;
    }
    const Model m7 = model_7b(), m05 = model_05b();
    size_t b7 = 0, b05 = 0;
    for (const Shape &s : m7.shapes) b7 += (size_t)s.M * s.rb;
    for (const Shape &s : m05.shapes) b05 += (size_t)s.M * s.rb;
    const size_t need = b7 > b05 ? b7 : b05;
    uint8_t *arena;
    uint32_t *sink;
    CK(cudaMalloc(&arena, need));
    CK(cudaMalloc(&sink, 4));
    Bar *bar;
    CK(cudaMalloc(&bar, sizeof(Bar)));
    CK(cudaMemset(bar, 0, sizeof(Bar)));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    g_st = st;
    k_fill<<<sms * 8, 256, 0, st>>>((uint4 *)arena, need / 16, 1u);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(st));
    const float us = time_steps([&] { k_stream<<<sms * 4, 512, 0, st>>>((const uint4 *)arena, need / 16, sink); }, 5, st);
    read_gbs = (float)(need / (us * 1e3));
    printf("plain 16-byte streaming read of %.2f GB: %.1f us, %.0f GB/s (the read rate below)\n", need / 1e9, us,
           read_gbs);
    bench_model<24>(m7, arena, bar, st, 10);
    bench_model<24>(m05, arena, bar, st, 20);
    bench_model<24>(empty_of(m7, "qwen2.5-7b's boundaries alone"), arena, bar, st, 20);
    bench_model<24>(empty_of(m05, "qwen2.5-0.5b's boundaries alone"), arena, bar, st, 20);
    bench_model<0>(m7, arena, bar, st, 10);
    bench_model<0>(m05, arena, bar, st, 20);
    printf("\n%s\n", failures ? "FAILED: a form's output differs from the plain graph's" : "every form's output equal");
    return failures ? 1 : 0;
}

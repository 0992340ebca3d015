/* Would fewer dependent phases a layer make one-token decode faster once the sum they need is
 * paid? A standalone microbenchmark (not built by make; no minfer code), the question left by
 * tools/persistent_step.cu (results/notes/PHASE8A.md): a chain of programmatic kernels costs
 * ~5.9 us a phase over its bytes on the 7B's sizes, and a layer has five phases.
 *
 * A layer here (attention left out: at short context it reads little), on the 7B's and the
 * 0.5B's sizes, its weights read once (row bytes of their formats, rounded up to 16), int32
 * activations, every sum wrapping in 32 bits (so every form's result is the same bits whatever
 * the order of its sums: the check below):
 *   F4: four phases, as 8a runs them: q/k/v (x = h) -> o (+ h: h_mid) -> gate/up (x = h_mid)
 *       -> down (x = the SwiGLU stand-in of gate and up; + h_mid: the next h).
 *   F3: three: q/k/v -> o -> the FFN as one phase: block s computes its slice of SL rows of gate
 *       and up, their SwiGLU stand-in, and multiplies it into down's matching columns (a K split
 *       of down; its weights laid out slice-major at upload, [s][row][slice bytes]), leaving a
 *       partial of the layer's output. The sum of the partials, in two forms:
 *       sum:  written as ns partial vectors, summed in a fixed order by the next q/k/v phase's
 *             prologue (every block of it reads all of them, through L2) before its norm;
 *       red:  added by each block into h_mid's copy with global atomics (in floats these would not
 *             be the same bits run to run; 64-bit fixed point would, at this cost); also with
 *             the FFN's blocks of 1,024 threads (32 warps a slice, one block a multiprocessor).
 * A stand-in dot: 16-byte weight chunks against the staged activation's bytes by dp4a, one row a
 * warp (q/k/v, o, gate/up, F4's down), or, for F3's down, every (row, chunk) of the slice spread
 * over the block's threads and summed into the row's shared word. No loads before the wait in
 * either form. Every phase is a programmatic dependent in one CUDA graph a step.
 * Each form's last h is compared with F4's, byte for byte, before and after its timed steps (its
 * buffers poisoned first); an activation's bytes that no weight chunk pairs with are folded into
 * those that do, so every value of x, o's output, gate and up reaches h (the q/k/v phase's k and v
 * rows do not: o reads its first H outputs, as attention reads q). No form loads weights before its wait (8a's
 * kernels do), so the cost a phase here is above the engine's; F3 sum's prologue reads every
 * partial in every block (the 7B: 148 x 14 KB a block), which is the cost of that form.
 *   nvcc -std=c++17 -O3 -arch=sm_90 -I. -o /tmp/fewer_phases tools/fewer_phases.cu && /tmp/fewer_phases
 * Results: results/mb-fewer-phases-*.txt, results/notes/PHASE8A.md. */
#include "tools/microbench_common.cuh"
#include <cstring>
#include <vector>

constexpr int TH = 512, WARPS = TH / 32, BPSM = 2, G = 4;
constexpr int HMAX = 4096, IMAX = 18944, SLMAX = 256;

__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

/* an activation word to the byte the stand-in's dot reads: every bit of it counts */
__device__ __forceinline__ uint8_t to8(uint32_t v) { return (uint8_t)(v ^ (v >> 8) ^ (v >> 16) ^ (v >> 24)); }
__device__ __forceinline__ uint32_t dot16(uint4 w, int4 a, uint32_t acc) {
    acc = __dp4a(w.x, (uint32_t)a.x, acc);
    acc = __dp4a(w.y, (uint32_t)a.y, acc);
    acc = __dp4a(w.z, (uint32_t)a.z, acc);
    return __dp4a(w.w, (uint32_t)a.w, acc);
}
/* x chunk (16 bytes) that weight chunk c of a row pairs with: c % kc for a row over x; for a down
 * row of slices (nsc chunks a slice, the slice's activations slc chunks), chunk c' of slice s
 * pairs with the slice's own activations */
__device__ __forceinline__ int x_chunk(int c, int kc, int nsc, int slc) {
    return nsc ? (c / nsc) * slc + (c % nsc) % slc : c % kc;
}
/* one row of rb bytes against x (kc chunks in shared memory), a warp, GG chunks a lane in flight;
 * the sum in every lane */
template <int GG>
__device__ __forceinline__ uint32_t row_dot(const uint8_t *row, int rb, const int4 *x, int kc, int nsc, int slc) {
    const int lane = threadIdx.x & 31, n = rb / 16;
    uint32_t acc = 0;
    for (int c0 = 0; c0 < n; c0 += 32 * GG) {
        uint4 v[GG];
#pragma unroll
        for (int j = 0; j < GG; j++) {
            const int c = c0 + j * 32 + lane;
            v[j] = c < n ? __ldg((const uint4 *)row + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < GG; j++) {
            const int c = c0 + j * 32 + lane;
            if (c < n) acc = dot16(v[j], x[x_chunk(c, kc, nsc, slc)], acc);
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    return acc;
}

__device__ __forceinline__ void add4(uint4 &v, uint4 q) { v.x += q.x, v.y += q.y, v.z += q.z, v.w += q.w; }
/* x's bytes from K words of src plus np partial vectors of K words (part[p][K], added in order);
 * glu: K words of gate then K of up, x[j] from gate[j] ^ up[j]. hout: the sums written back,
 * each 16 bytes by one block. 16-byte loads (K % 4 == 0). Ends on a barrier. */
__device__ __forceinline__ void stage(const uint32_t *src, const uint32_t *part, int np, int K, bool glu, uint8_t *x,
                                      uint32_t *hout) {
    const int K4 = K / 4;
#pragma unroll 4
    for (int k4 = threadIdx.x; k4 < K4; k4 += blockDim.x) {
        uint4 v = __ldcg((const uint4 *)src + k4);
        if (glu) {
            const uint4 u = __ldcg((const uint4 *)(src + K) + k4);
            v.x ^= u.x, v.y ^= u.y, v.z ^= u.z, v.w ^= u.w;
        }
#pragma unroll 8
        for (int p = 0; p < np; p++) add4(v, __ldcg((const uint4 *)(part + (size_t)p * K) + k4));
        ((uint32_t *)x)[k4] = to8(v.x) | (uint32_t)to8(v.y) << 8 | (uint32_t)to8(v.z) << 16 | (uint32_t)to8(v.w) << 24;
        if (hout && k4 % gridDim.x == blockIdx.x) ((uint4 *)hout)[k4] = v;
    }
    __syncthreads();
}

/* x's chunks that no weight chunk pairs with folded into those that do (each group of span
 * chunks: chunk j < used XORed with j + used, j + 2 used, ...), so every value reaches the output
 * and the check sees it. After a barrier; ends on one. */
__device__ __forceinline__ void fold(int4 *x, int groups, int span, int used) {
    if (used >= span) return;
    for (int t = threadIdx.x; t < groups * used; t += blockDim.x) {
        int4 *g = x + (t / used) * span;
        const int j = t % used;
        int4 v = g[j];
        for (int k = j + used; k < span; k += used) v.x ^= g[k].x, v.y ^= g[k].y, v.z ^= g[k].z, v.w ^= g[k].w;
        g[j] = v;
    }
    __syncthreads();
}

/* a phase of M rows, a warp a row: out[r] = res[r] + the row against x (and out2[r] the same) */
struct Rows {
    const uint8_t *w;
    int M, rb, K;                 /* rows, bytes a row, x's length */
    const uint32_t *src, *part;   /* x's words, and np partials added to them */
    int np;
    bool glu;
    int nsc, slc;                 /* a down row of slices (F4's down), else 0 */
    const uint32_t *res;
    uint32_t *out, *out2, *hout;
};
__global__ void __launch_bounds__(TH, BPSM) k_rows(Rows p) {
    __shared__ __align__(16) uint8_t x[IMAX];
    pdl_trigger();
    pdl_wait();
    stage(p.src, p.part, p.np, p.K, p.glu, x, p.hout);
    if (p.nsc) fold((int4 *)x, p.K / 16 / p.slc, p.slc, p.nsc);
    else fold((int4 *)x, 1, p.K / 16, p.rb / 16);
    const int tw = gridDim.x * WARPS, lane = threadIdx.x & 31;
    for (int r = (threadIdx.x >> 5) * gridDim.x + blockIdx.x; r < p.M; r += tw) {
        const uint32_t d = row_dot<G>(p.w + (size_t)r * p.rb, p.rb, (const int4 *)x, p.K / 16, p.nsc, p.slc);
        if (lane == 0) {
            const uint32_t v = (p.res ? p.res[r] : 0u) + d;
            p.out[r] = v;
            if (p.out2) p.out2[r] = v;
        }
    }
}

/* F3's FFN: block s its slice, T threads a block. gu: 2I rows of rb bytes (gate, then up); dsm:
 * down slice-major [ns][H][rbs]; x = h_mid. part: write the block's partial [s][H]; else add it
 * into acc. */
struct Ffn {
    const uint8_t *gu, *dsm;
    int H, I, rb, SL, rbs;
    const uint32_t *h_mid;
    uint32_t *part, *acc;
};
template <int T>
__global__ void __launch_bounds__(T, T == TH ? BPSM : 1) k_ffn(Ffn p) {
    __shared__ __align__(16) uint8_t x[HMAX];
    __shared__ __align__(16) uint8_t act[SLMAX];
    __shared__ uint32_t g[2 * SLMAX], sum[HMAX];
    pdl_trigger();
    for (int r = threadIdx.x; r < p.H; r += T) sum[r] = 0;
    pdl_wait();
    stage(p.h_mid, nullptr, 0, p.H, false, x, nullptr);
    fold((int4 *)x, 1, p.H / 16, p.rb / 16);
    const int s = blockIdx.x, lane = threadIdx.x & 31;
    for (int j = threadIdx.x >> 5; j < 2 * p.SL; j += T / 32) {
        const int row = (j < p.SL ? 0 : p.I - p.SL) + s * p.SL + j;
        const uint32_t d = row_dot<2 * G>(p.gu + (size_t)row * p.rb, p.rb, (const int4 *)x, p.H / 16, 0, 0);
        if (lane == 0) g[j] = d;
    }
    __syncthreads();
    for (int j = threadIdx.x; j < p.SL; j += T) act[j] = to8(g[j] ^ g[p.SL + j]);
    __syncthreads();
    const int nsc = p.rbs / 16, slc = p.SL / 16, n = p.H * nsc;
    fold((int4 *)act, 1, slc, nsc);
    const uint4 *w = (const uint4 *)(p.dsm + (size_t)s * p.H * p.rbs);
    const int4 *a = (const int4 *)act;
    for (int i0 = threadIdx.x; i0 < n; i0 += 2 * G * T) {   /* twice k_rows' loads in flight: half its blocks */
        uint4 v[2 * G];
#pragma unroll
        for (int u = 0; u < 2 * G; u++) v[u] = i0 + u * T < n ? __ldg(w + i0 + u * T) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 2 * G; u++) {
            const int i = i0 + u * T;
            if (i < n) atomicAdd(&sum[i / nsc], dot16(v[u], a[(i % nsc) % slc], 0u));
        }
    }
    __syncthreads();
    for (int r = threadIdx.x; r < p.H; r += T) {
        if (p.part) p.part[(size_t)s * p.H + r] = sum[r];
        else atomicAdd(p.acc + r, sum[r]);
    }
}

__device__ __forceinline__ uint4 hash4(uint64_t i, uint32_t seed) {
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 40503u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    return make_uint4(h, h * 3266489917u, h ^ 0x9E3779B9u, h * 668265263u);
}
__global__ void k_fill(uint4 *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = hash4(i, seed);
}
/* a down matrix's chunks from their place in the matrix (row r, slice s, chunk c of the slice),
 * laid out row-major (F4) or slice-major (F3): the same bytes in both */
__global__ void k_fill_down(uint4 *p, int H, int ns, int nsc, bool slice_major, uint32_t seed) {
    const size_t n = (size_t)H * ns * nsc;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r, s, c;
        if (slice_major) s = i / ((size_t)H * nsc), r = i / nsc % H, c = i % nsc;
        else r = i / ((size_t)ns * nsc), s = i / nsc % ns, c = i % nsc;
        p[i] = hash4((r * ns + s) * nsc + c, seed);
    }
}

struct Model { const char *name; int H, I, M, L; double bpw; int SL; };
static int r16(double b) { return (int)((b + 15) / 16) * 16; }

struct Layer { uint8_t *qkv, *o, *gu, *drm, *dsm; };
struct Bufs { uint32_t *h, *y, *h_mid, *gu, *acc, *part; };
static int sms;
static float read_gbs;
static cudaStream_t st;

int main() {
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    printf("%s: %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
    const Model models[] = {
        {"qwen2.5-7b Q4_K (144 bytes / 256)", 3584, 18944, 3584 + 512 + 512, 28, 144.0 / 256, 128},
        {"qwen2.5-0.5b Q4_0 (18 bytes / 32)", 896, 4864, 896 + 128 + 128, 24, 18.0 / 32, 32},
    };
    int failures = 0;
    for (const Model &m : models) {
        const int rb = r16(m.H * m.bpw), ns = m.I / m.SL, rbs = r16(m.SL * m.bpw), nsc = rbs / 16;
        if (m.H > HMAX || m.I > IMAX || m.SL > SLMAX || m.I % m.SL || m.SL % 16 || m.H % 16 || m.M < m.H ||
            nsc > m.SL / 16) {
            printf("%s: shape outside the kernels' limits\n", m.name);
            return 1;
        }
        const size_t b_qkv = (size_t)m.M * rb, b_o = (size_t)m.H * rb, b_gu = (size_t)2 * m.I * rb,
                     b_d = (size_t)m.H * ns * rbs, b_layer = b_qkv + b_o + b_gu + b_d;
        std::vector<Layer> L(m.L);
        uint8_t *arena;
        CK(cudaMalloc(&arena, (b_layer + b_d) * m.L));
        for (int l = 0; l < m.L; l++) {
            uint8_t *p = arena + (b_layer + b_d) * l;
            L[l] = {p, p + b_qkv, p + b_qkv + b_o, p + b_qkv + b_o + b_gu, p + b_layer};
            k_fill<<<sms * 4, 256, 0, st>>>((uint4 *)p, (b_qkv + b_o + b_gu) / 16, 100u + l);
            k_fill_down<<<sms * 4, 256, 0, st>>>((uint4 *)L[l].drm, m.H, ns, nsc, false, 900u + l);
            k_fill_down<<<sms * 4, 256, 0, st>>>((uint4 *)L[l].dsm, m.H, ns, nsc, true, 900u + l);
            CK(cudaGetLastError());
        }
        Bufs b;
        const size_t wb = 4;
        CK(cudaMalloc(&b.h, m.H * wb));
        CK(cudaMalloc(&b.y, m.M * wb));
        CK(cudaMalloc(&b.h_mid, m.H * wb));
        CK(cudaMalloc(&b.gu, 2 * (size_t)m.I * wb));
        CK(cudaMalloc(&b.acc, m.H * wb));
        CK(cudaMalloc(&b.part, (size_t)ns * m.H * wb));
        uint32_t *sink;
        CK(cudaMalloc(&sink, 4));
        const size_t step_bytes = b_layer * m.L;
        const float us_read = time_steps([&] { k_stream<<<sms * 4, 512, 0, st>>>((const uint4 *)arena, step_bytes / 16, sink); },
                                         5, st);
        read_gbs = (float)(step_bytes / (us_read * 1e3));
        const double ideal = step_bytes / (read_gbs * 1e3);
        printf("\n%s: %d layers, H %d, I %d, q/k/v rows %d; F3's FFN: slices of %d, a block each (%d blocks; "
               "F4's phases %d), a down row's slice %d bytes (its format's %.0f, rounded up to 16: both forms read "
               "the same bytes); %.1f MB a step read in %.1f us (%.0f GB/s)\n",
               m.name, m.L, m.H, m.I, m.M, m.SL, ns, sms * BPSM, rbs, m.SL * m.bpw, step_bytes / 1e6, ideal, read_gbs);

        const unsigned grid_rows = sms * BPSM;
        auto rows = [&](const uint8_t *w, int M, int K, const uint32_t *src, const uint32_t *part, int np, bool glu,
                        int dn, const uint32_t *res, uint32_t *out, uint32_t *out2, uint32_t *hout) {
            Rows p{w, M, dn ? ns * rbs : rb, K, src, part, np, glu, dn ? nsc : 0, dn ? m.SL / 16 : 0, res, out, out2, hout};
            launch_as(LAUNCH_PROGRAMMATIC, k_rows, M < (int)grid_rows ? (unsigned)M : grid_rows, TH, 0, st, p);
        };
        auto ffn = [&](const Layer &w, uint32_t *part, uint32_t *acc, bool wide) {
            Ffn p{w.gu, w.dsm, m.H, m.I, rb, m.SL, rbs, b.h_mid, part, acc};
            if (wide) launch_as(LAUNCH_PROGRAMMATIC, k_ffn<1024>, (unsigned)ns, 1024, 0, st, p);
            else launch_as(LAUNCH_PROGRAMMATIC, k_ffn<TH>, (unsigned)ns, TH, 0, st, p);
        };
        /* the forms' steps; after one, the next layer's input: F4 b.h, F3 sum b.h_mid + the
         * partials, F3 red (either width) b.acc */
        enum { F4, F3SUM, F3RED, F3RED_WIDE };
        auto step = [&](int form) {
            for (int l = 0; l < m.L; l++) {
                const Layer &w = L[l];
                if (form == F4) {
                    rows(w.qkv, m.M, m.H, b.h, nullptr, 0, false, 0, nullptr, b.y, nullptr, nullptr);
                    rows(w.o, m.H, m.H, b.y, nullptr, 0, false, 0, b.h, b.h_mid, nullptr, nullptr);
                    rows(w.gu, 2 * m.I, m.H, b.h_mid, nullptr, 0, false, 0, nullptr, b.gu, nullptr, nullptr);
                    rows(w.drm, m.H, m.I, b.gu, nullptr, 0, true, 1, b.h_mid, b.h, nullptr, nullptr);
                } else if (form == F3SUM) {
                    rows(w.qkv, m.M, m.H, b.h_mid, b.part, ns, false, 0, nullptr, b.y, nullptr, b.h);
                    rows(w.o, m.H, m.H, b.y, nullptr, 0, false, 0, b.h, b.h_mid, nullptr, nullptr);
                    ffn(w, b.part, nullptr, false);
                } else {
                    rows(w.qkv, m.M, m.H, b.acc, nullptr, 0, false, 0, nullptr, b.y, nullptr, nullptr);
                    rows(w.o, m.H, m.H, b.y, nullptr, 0, false, 0, b.acc, b.h_mid, b.acc, nullptr);
                    ffn(w, nullptr, b.acc, form == F3RED_WIDE);
                }
            }
        };
        auto graph = [&](int form) {
            cudaGraph_t g;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            step(form);
            CK(cudaStreamEndCapture(st, &g));
            cudaGraphExec_t ge;
            CK(cudaGraphInstantiate(&ge, g, 0));
            CK(cudaGraphDestroy(g));
            return ge;
        };
        /* every buffer poisoned, then the first h where the form reads it (F3 sum: h_mid and
         * zero partials) */
        auto reset = [&](int form) {
            for (uint32_t *p : {b.h, b.h_mid, b.acc}) CK(cudaMemsetAsync(p, 0xA5, m.H * wb, st));
            CK(cudaMemsetAsync(b.y, 0xA5, m.M * wb, st));
            CK(cudaMemsetAsync(b.gu, 0xA5, 2 * (size_t)m.I * wb, st));
            CK(cudaMemsetAsync(b.part, form == F3SUM ? 0 : 0xA5, (size_t)ns * m.H * wb, st));
            uint32_t *h0 = form == F4 ? b.h : form == F3SUM ? b.h_mid : b.acc;
            k_fill<<<8, 256, 0, st>>>((uint4 *)h0, (size_t)m.H * wb / 16, 7u);
            CK(cudaGetLastError());
        };
        auto result = [&](int form) {
            std::vector<uint32_t> h(m.H), part;
            CK(cudaStreamSynchronize(st));
            CK(cudaMemcpy(h.data(), form == F4 ? b.h : form == F3SUM ? b.h_mid : b.acc, m.H * wb, cudaMemcpyDeviceToHost));
            if (form == F3SUM) {
                part.resize((size_t)ns * m.H);
                CK(cudaMemcpy(part.data(), b.part, part.size() * wb, cudaMemcpyDeviceToHost));
                for (int s = 0; s < ns; s++)
                    for (int r = 0; r < m.H; r++) h[r] += part[(size_t)s * m.H + r];
            }
            return h;
        };
        const char *names[] = {"F4: four phases a layer (q/k/v, o, gate/up, down)",
                               "F3 sum: the FFN one phase, partials summed by the next q/k/v",
                               "F3 red: the FFN one phase, partials added by global atomics",
                               "F3 red, its FFN blocks of 1,024 threads (32 warps a slice)"};
        const int phases[] = {4, 3, 3, 3};
        std::vector<uint32_t> ref;
        printf("| form | us a step | GB/s | of the read rate | (us - read) a phase | last h |\n| --- | ---: | ---: | ---: | ---: | --- |\n");
        for (int f = F4; f <= F3RED_WIDE; f++) {
            cudaGraphExec_t ge = graph(f);
            reset(f);
            CK(cudaGraphLaunch(ge, st));
            std::vector<uint32_t> h = result(f);
            if (f == F4) ref = h;
            bool ok = h == ref;
            const float us = time_steps([&] { CK(cudaGraphLaunch(ge, st)); }, 10, st);
            reset(f);
            CK(cudaGraphLaunch(ge, st));
            ok = ok && result(f) == ref;   /* after its timed steps too */
            failures += !ok;
            printf("| %s | %.1f | %.0f | %.1f%% | %.2f | %s |\n", names[f], us, step_bytes / (us * 1e3),
                   100.0 * ideal / us, (us - ideal) / (phases[f] * m.L), ok ? "same bits" : "DIFFERS");
            fflush(stdout);
            CK(cudaGraphExecDestroy(ge));
        }
        for (uint32_t *p : {b.h, b.y, b.h_mid, b.gu, b.acc, b.part, sink}) CK(cudaFree(p));
        CK(cudaFree(arena));
    }
    printf("\n%s\n", failures ? "FAILED: a form's h differs from F4's" : "every form's h the same bits");
    return failures ? 1 : 0;
}

/* The f16 tensor-core GEMM's device code and its call (gemm_f16.cu has why and the layout):
 * the PTX wrappers, the activation and weight conversions, the mma.sync kernel template and
 * the chunked call over a table of the variants a build instantiates. Included by the
 * library's gemm_f16.cu (the variants the rule picks) and by gates/7e/gemm_f16_variants.cu
 * (every variant, for the gate's bit-identity and timing checks); everything here has
 * internal linkage, so both can be linked into one program. */
#ifndef MI_GEMM_F16_KERNELS_CUH
#define MI_GEMM_F16_KERNELS_CUH
#include "phase7b_ops/dev7b.cuh"
#include "phase7e_perf/gemm_f16.h"
#include "phase7e_perf/perf7e.h"
#include "phase7b_ops/ops7b.h"

#define G_BM 128
#define G_BN 128   /* tokens per tile; 64 for calls whose 128-token grid would not fill the GPU */
#define G_BK 32    /* the k granularity every shape must meet; BK = 64 where K allows */
#define G_SMEM(bn, bk, st) ((size_t)(st) * (G_BM + (bn)) * (bk) * 2)   /* 64 KB (128, 32, 4); 96 KB (128, 64, 3) */

#define GEMM_F16_DEFAULT_BK 64   /* set by the gate_7e timings (docs/PHASE7E.md) */
#define GEMM_F16_DEFAULT_NW 8

/* ---------------- small PTX wrappers ---------------- */
static __device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
static __device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
static __device__ __forceinline__ void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* half offset of (row, 16-byte chunk c) in a BK-half shared row, swizzled so that the eight
 * rows of one ldmatrix phase land in eight distinct 16-byte bank groups */
template <int BK> static __device__ __forceinline__ int swz(int row, int c) {
    return BK == 32 ? row * 32 + ((c ^ ((row >> 1) & 3)) << 3) : row * 64 + ((c ^ (row & 7)) << 3);
}

/* ---------------- x -> f16 with a power-of-two scale per token ---------------- */
static __global__ void __launch_bounds__(256) kernel_act_f16(const float *__restrict__ x, int64_t K, __half *__restrict__ xh,
                                                    float *__restrict__ inv_s) {
    const int64_t n = blockIdx.x;
    const float *row = x + (size_t)n * (size_t)K;
    float amax = 0.0f;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) amax = fmaxf(amax, fabsf(row[k]));
    __shared__ float red[8];
    amax = warp_max(amax);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = amax;
    __syncthreads();
    amax = red[0];
    for (int i = 1; i < (int)(blockDim.x >> 5); i++) amax = fmaxf(amax, red[i]);
    /* amax in [2^e, 2^(e+1)) -> scale 2^(14 - e); zero / inf rows keep scale 1 / a tiny one */
    int sh = 0;
    if (amax > 0.0f) {
        const int e = isfinite(amax) ? ilogbf(amax) : 127;
        sh = 14 - e;
        sh = sh < -120 ? -120 : (sh > 120 ? 120 : sh);
    }
    const float s = ldexpf(1.0f, sh);
    __half *out = xh + (size_t)n * (size_t)K;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) out[k] = __float2half_rn(row[k] * s);
    if (threadIdx.x == 0) inv_s[n] = ldexpf(1.0f, -sh);
}

/* ---------------- weight rows -> f16 [Mc, K], one thread per 32-element unit ---------------- */
/* unit u of a weight row as 32 halves: 7b's unit_unpack, then the unit's formula (dev7b.cuh) */
template <int WT>
static __device__ __forceinline__ void unit_to_f16(const uint8_t *row, int64_t u, __half (&h)[32]) {
    wunit w;
    unit_unpack<WT>(row, u, w);
#pragma unroll
    for (int e = 0; e < 32; e++) {
        const int q = (int)(int8_t)(w.q[e >> 2] >> (8 * (e & 3)));
        float v;
        if (WT == MI_TYPE_Q4_1 || WT == MI_TYPE_Q5_1) v = w.d * (float)q + w.m;
        else if (WT == MI_TYPE_Q4_K || WT == MI_TYPE_Q5_K) v = w.d * (float)q - w.m;
        else if (WT == MI_TYPE_Q6_K) v = w.d * (float)((e < 16 ? w.sc_lo : w.sc_hi) * q);
        else v = w.d * (float)q;
        h[e] = __float2half_rn(v);
    }
}
template <>
__device__ __forceinline__ void unit_to_f16<MI_TYPE_F16>(const uint8_t *row, int64_t u, __half (&h)[32]) {
    const uint16_t *src = (const uint16_t *)row + u * 32;   /* 2-byte aligned copy */
#pragma unroll
    for (int e = 0; e < 32; e++) h[e] = __ushort_as_half(src[e]);
}

template <int WT>
static __global__ void __launch_bounds__(256) kernel_dequant_f16(const uint8_t *__restrict__ W, size_t wrow, int64_t Mc,
                                                        int64_t nunits, __half *__restrict__ out) {
    const int64_t total = Mc * nunits;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = t / nunits, u = t - m * nunits;
        __align__(16) __half h[32];
        unit_to_f16<WT>(W + (size_t)m * wrow, u, h);
        uint4 *dst = (uint4 *)(out + (size_t)t * 32);   /* unit t of the chunk = row m, unit u */
        const uint4 *s4 = (const uint4 *)h;
#pragma unroll
        for (int i = 0; i < 4; i++) dst[i] = s4[i];
    }
}

/* ---------------- the GEMM: Y[n*ldy + m] = inv_s[n] * sum_k Wh[m,k] Xh[n,k] (+ bias[m]) ----------------
 * BN tokens x 128 rows per block, BK k per stage (32 or 64), ST stages, NW warps (8: 2 x 4 warps
 * of 64 x BN/4; 4: 2 x 2 warps of 64 x BN/2, half the shared-memory reads per mma). */
template <int BN, int BK, int ST, int NW>
static __global__ void __launch_bounds__(NW * 32, 2)
kernel_gemm_f16(const __half *__restrict__ Wh, const __half *__restrict__ Xh, const float *__restrict__ inv_s,
              const float *__restrict__ bias, float *__restrict__ Y, int64_t ldy, int64_t Mc, int64_t N, int64_t K) {
    extern __shared__ __align__(128) __half gemm_sh[];
    constexpr int CPR = BK / 8;                    /* 16-byte chunks per shared row */
    constexpr int RPP = NW * 32 / CPR;             /* rows one pass of the block stages */
    constexpr int LA = G_BM / RPP, LB = BN / RPP;  /* passes per stage: weights, tokens */
    constexpr int WNW = NW / 2;                    /* warps along the tokens */
    constexpr int WN = BN / WNW, NT = WN / 8, NP = NT / 2;   /* per warp: tokens, n8 tiles, ldmatrix pairs */
    __half *sA = gemm_sh;                            /* [ST][G_BM * BK] */
    __half *sB = gemm_sh + (size_t)ST * G_BM * BK;   /* [ST][BN * BK] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WNW, wn = warp % WNW;   /* warp tile: rows wm*64.., tokens wn*WN.. */
    const int64_t n0 = (int64_t)blockIdx.x * BN, m0 = (int64_t)blockIdx.y * G_BM;
    const int KT = (int)(K / BK);

    /* this thread stages chunk lc of rows lr + RPP*i; rows past the edge are zero-filled
     * (cp.async with 0 source bytes reads nothing) */
    const int lr = tid / CPR, lc = tid % CPR;
    const __half *srcA = Wh + (size_t)lr * (size_t)K + lc * 8, *srcB = Xh + (size_t)lr * (size_t)K + lc * 8;
    srcA += (size_t)m0 * (size_t)K;
    srcB += (size_t)n0 * (size_t)K;
    unsigned okA = 0, okB = 0;   /* bit i: row lr + RPP*i exists */
#pragma unroll
    for (int i = 0; i < LA; i++) okA |= (m0 + lr + RPP * i < Mc ? 1u : 0u) << i;
#pragma unroll
    for (int i = 0; i < LB; i++) okB |= (n0 + lr + RPP * i < N ? 1u : 0u) << i;
    const uint32_t sA0 = smem_u32(sA), sB0 = smem_u32(sB);
    auto load_stage = [&](int st, int kt) {
        const size_t k0 = (size_t)kt * BK;
#pragma unroll
        for (int i = 0; i < LA; i++) {
            const bool ok = (okA >> i) & 1;
            cp_async16(sA0 + 2u * (uint32_t)(st * G_BM * BK + swz<BK>(lr + RPP * i, lc)),
                     ok ? srcA + (size_t)RPP * i * (size_t)K + k0 : Wh, ok ? 16 : 0);
        }
#pragma unroll
        for (int i = 0; i < LB; i++) {
            const bool ok = (okB >> i) & 1;
            cp_async16(sB0 + 2u * (uint32_t)(st * BN * BK + swz<BK>(lr + RPP * i, lc)),
                     ok ? srcB + (size_t)RPP * i * (size_t)K + k0 : Xh, ok ? 16 : 0);
        }
    };

    float acc[4][NT][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < NT; b++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[a][b][i] = 0.0f;

#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < KT) load_stage(s, s);
        cp_async_commit();
    }
    /* ldmatrix lane addresses: A x4 = rows (lane & 15), chunk (lane >> 4) of the k16 step;
     * B x4 = tokens (lane & 7) + 8 (lane >> 4), chunk ((lane >> 3) & 1) */
    const int arow = wm * 64 + (lane & 15), achk = lane >> 4;
    const int brow = wn * WN + (lane & 7) + ((lane >> 4) << 3), bchk = (lane >> 3) & 1;
    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<ST - 2>();
        __syncthreads();   /* stage kt landed for every thread; stage kt - 1 is free */
        {
            const int nk = kt + ST - 1;
            if (nk < KT) load_stage(nk % ST, nk);
            cp_async_commit();
        }
        const int st = kt % ST;
        const uint32_t a_base = sA0 + 2u * (uint32_t)(st * G_BM * BK);
        const uint32_t b_base = sB0 + 2u * (uint32_t)(st * BN * BK);
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            uint32_t af[4][4], bf[NP][4];
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
                ldsm_x4(af[mt], a_base + 2u * (uint32_t)swz<BK>(arow + mt * 16, kk * 2 + achk));
#pragma unroll
            for (int np = 0; np < NP; np++)
                ldsm_x4(bf[np], b_base + 2u * (uint32_t)swz<BK>(brow + np * 16, kk * 2 + bchk));
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
                    mma_f16_16816(acc[mt][nt], af[mt], bf[nt >> 1][(nt & 1) * 2], bf[nt >> 1][(nt & 1) * 2 + 1]);
        }
    }
    cp_async_wait<0>();

    /* c0, c1: row gid, tokens 2 tig, 2 tig + 1; c2, c3: row gid + 8 */
    const int gid = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int64_t n = n0 + wn * WN + nt * 8 + tig * 2 + j;
            if (n >= N) continue;
            const float is = inv_s[n];
            float *yr = Y + (size_t)n * (size_t)ldy;
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t m = m0 + wm * 64 + mt * 16 + gid + h * 8;
                    if (m < Mc) {
                        const float v = acc[mt][nt][h * 2 + j] * is;
                        yr[m] = bias ? v + bias[m] : v;
                    }
                }
        }
}

/* ---------------- launchers ---------------- */

typedef void (*gemm_kernel_fn)(const __half *, const __half *, const float *, const float *, float *, int64_t,
                               int64_t, int64_t, int64_t);
struct gemm_variant {
    gemm_kernel_fn fn;
    int nw;
    size_t smem;
};
/* The variants one build of the call can launch, indexed (bn == 128) * 4 + (bk == 64) * 2 +
 * (nw == 4); an entry with no kernel is a variant that build leaves out. */
struct gemm_variants {
    gemm_variant v[8];
    bool attrs_done;
};

/* one opt-in per variant to more than 48 KB of dynamic shared memory (idempotent, so a race
 * between threads is harmless) */
static mi_status gemm_attrs(gemm_variants *t) {
    if (t->attrs_done) return MI_OK;
    for (int i = 0; i < 8; i++)
        if (t->v[i].fn)
            MI_CU_CHECK(cudaFuncSetAttribute(t->v[i].fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)t->v[i].smem));
    t->attrs_done = true;
    return MI_OK;
}

/* rows per chunk: a multiple of the 128-row tile within the chunk size (at least one tile),
 * or all of M when it fits */
static int64_t chunk_rows(int64_t K, int64_t M, size_t chunk) {
    const size_t cb = chunk && chunk < MI7E_GEMM_F16_CHUNK ? chunk : MI7E_GEMM_F16_CHUNK;
    int64_t r = (int64_t)(cb / ((size_t)K * 2)) / G_BM * G_BM;
    if (r < G_BM) r = G_BM;
    return r < M ? r : M;
}
static size_t al256(size_t b) { return (b + 255) & ~(size_t)255; }

template <int WT>
static mi_status launch_dequant(cudaStream_t st, const uint8_t *w, size_t wrow, int64_t mc, int64_t K, __half *out) {
    const int64_t units = mc * (K / 32);
    const int64_t b = (units + 255) / 256;
    kernel_dequant_f16<WT><<<(unsigned)(b < 16384 ? b : 16384), 256, 0, st>>>(w, wrow, mc, K / 32, out);
    MI_CU_CHECK_LAUNCH("kernel_dequant_f16");
    return MI_OK;
}

/* The weights of rows [m0, m0 + mc) as the GEMM's f16 operand: dequantized into wh, or (16-byte
 * aligned F16 weights, direct) the tensor itself */
static mi_status chunk_operand(cudaStream_t st, mi_type wt, const uint8_t *wc, size_t wrow, int64_t mc, int64_t K,
                               bool direct, __half *wh, const __half **op) {
    *op = wh;
    if (wt == MI_TYPE_F16) {
        if (direct) *op = (const __half *)wc;
        else MI_TRY(launch_dequant<MI_TYPE_F16>(st, wc, wrow, mc, K, wh));
        return MI_OK;
    }
    MI_QTYPE_DISPATCH(wt, WT, return launch_dequant<WT>(st, wc, wrow, mc, K, wh));
}

/* The mma.sync kernel's choices, 0 = the rule for each: tile (tokens per block tile, 64 or
 * 128; rule: 128 when that gives two blocks per SM), depth (k per stage, 32 or 64; 32 wherever
 * K % 64 != 0; rule: 64), warps (8 or 4; rule: 8), chunk (weight chunk bytes; rule and largest:
 * MI7E_GEMM_F16_CHUNK). Every choice runs the same k16 steps in the same order per output. */
struct gemm_f16_opts {
    int tile, depth, warps;
    size_t chunk;
};

/* The call of either GEMM: x to f16 once, then per weight chunk its f16 operand and the GEMM
 * (wgmma: the sm_90a kernel; else the mma.sync variant o selects from t, NULL: the rule). */
static mi_status gemm_f16_run(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                              int64_t K, int64_t M, int64_t N, void *workspace, const gemm_f16_opts *o,
                              bool wgmma, gemm_variants *t) {
    const char *fn = wgmma ? "mi7e_gemm_f16_wgmma" : "mi7e_gemm_f16";
    if (wgmma ? !mi7e_gemm_f16_wgmma_supported(wt, K, M, N) : !mi7e_gemm_f16_supported(wt, K, M, N))
        return mi_err(MI_ERR_UNSUPPORTED, "%s: type %s, K = %lld, M = %lld, N = %lld", fn, mi_type_name(wt),
                      (long long)K, (long long)M, (long long)N);
    const gemm_f16_opts dflt = {0, 0, 0, 0};
    if (!o) o = &dflt;
    if ((o->tile && o->tile != 64 && o->tile != 128) || (o->depth && o->depth != 32 && o->depth != 64) ||
        (o->warps && o->warps != 4 && o->warps != 8))
        return mi_err(MI_ERR_INVALID, "%s: tile %d, depth %d, warps %d (0, 64 | 128, 32 | 64, 4 | 8)", fn, o->tile,
                      o->depth, o->warps);
    if (((uintptr_t)workspace & 255) != 0) return mi_err(MI_ERR_INVALID, "%s: workspace not 256-byte aligned", fn);
    cudaStream_t st = (cudaStream_t)stream;
    MI_TRY(gemm_attrs(t));
    uint8_t *ws = (uint8_t *)workspace;
    __half *xh = (__half *)ws;
    float *inv_s = (float *)(ws + al256((size_t)N * (size_t)K * 2));
    __half *wh = (__half *)(ws + al256((size_t)N * (size_t)K * 2) + al256((size_t)N * 4));
    kernel_act_f16<<<(unsigned)N, 256, 0, st>>>(x, K, xh, inv_s);
    MI_CU_CHECK_LAUNCH("kernel_act_f16");

    const size_t wrow = mi_row_size(wt, K);
    const uint8_t *wb = (const uint8_t *)w;
    /* 16-byte aligned F16 weights are the GEMM operand as they are: one chunk, no copy */
    const bool direct = wt == MI_TYPE_F16 && ((uintptr_t)w & 15) == 0;
    const int64_t rows = direct ? M : chunk_rows(K, M, o->chunk);
    for (int64_t m0 = 0; m0 < M; m0 += rows) {
        const int64_t mc = M - m0 < rows ? M - m0 : rows;
        const __half *op = NULL;
        MI_TRY(chunk_operand(st, wt, wb + (size_t)m0 * wrow, wrow, mc, K, direct, wh, &op));
        const int64_t gm = (mc + G_BM - 1) / G_BM;
        if (gm > 65535) return mi_err(MI_ERR_INVALID, "%s: %lld rows in one chunk", fn, (long long)mc);
        /* 128-token tiles when they give two waves' worth of blocks (2 per SM), else 64; the
         * rule of both kernels */
        const int bn_rule = gm * ((N + 127) / 128) >= 2 * (int64_t)mi7e_sm_count() ? 128 : 64;
        if (wgmma) {
            MI_TRY(mi7e_gemm_f16_wgmma_launch(st, op, xh, inv_s, bias ? bias + m0 : NULL, y + m0, M, mc, N, K,
                                              bn_rule));
            continue;
        }
        const int bn = o->tile ? o->tile : bn_rule;
        /* k depth: 64 (3 stages) where K allows, else 32 (4 stages) */
        const int bk = K % 64 ? 32 : (o->depth ? o->depth : GEMM_F16_DEFAULT_BK);
        const int nw = o->warps ? o->warps : GEMM_F16_DEFAULT_NW;
        const gemm_variant &v = t->v[(bn == 128 ? 4 : 0) + (bk == 64 ? 2 : 0) + (nw == 4 ? 1 : 0)];
        if (!v.fn) return mi_err(MI_ERR_UNSUPPORTED, "%s: %d warps per block are not built here", fn, nw);
        const dim3 grid((unsigned)((N + bn - 1) / bn), (unsigned)gm);
        v.fn<<<grid, v.nw * 32, v.smem, st>>>(op, xh, inv_s, bias ? bias + m0 : NULL, y + m0, M, mc, N, K);
        MI_CU_CHECK_LAUNCH("kernel_gemm_f16");
    }
    return MI_OK;
}

#endif

/* FlashAttention-2-style prefill attention on the f16 tensor cores. The tiled kernel
 * (attn_tiled.cu) does the dots on the CUDA cores in f32; here a block of 4 warps takes
 * 64 queries of one head (16 per warp), walks the keys in tiles of 64 staged in shared
 * memory with cp.async (two stages), and runs S = Q K^T and O += P V as mma.sync m16n8k16
 * f16 x f16 -> f32. Softmax is online in f32 in base 2: s2 = s * scale * log2(e) and
 * p = exp2(s2 - max s2), which is the same softmax as exp(scale*s - max). Q is rounded to
 * f16 once, P before the P V product (l sums the rounded p, so O / l is exactly the
 * weighted mean the tensor cores computed); K and V are f16 already. */
#include "phase7b_ops/dev7b.cuh"
#include "phase7e_perf/perf7e.h"
#include "phase7e_perf/attn_flash.h"
#include "phase7e_perf/mma_f16.cuh"

#define FA_BQ 64       /* queries per block: 4 warps x 16 rows */
#define FA_BK 64       /* keys per tile */
#define FA_PAD 8       /* halfs of padding per staged row: the row stride is 4 words mod 32 banks */
#define FA_LOG2E 1.4426950408889634f

/* ---- Fragment layouts of mma.m16n8k16 .f16 (PTX ISA "Matrix Fragments for mma.m16n8k16
 * with floating point type"); g = lane >> 2 (groupID), t = lane & 3 (threadID_in_group).
 * Each .f16x2 register holds two elements, the lower index in the low 16 bits.
 *   A (16x16, row):  reg0 = A[g  ][2t, 2t+1]      reg1 = A[g+8][2t, 2t+1]
 *                    reg2 = A[g  ][2t+8, 2t+9]    reg3 = A[g+8][2t+8, 2t+9]
 *   B (16x8, col):   reg0 = B[2t, 2t+1][g]        reg1 = B[2t+8, 2t+9][g]
 *   C/D (16x8 f32):  c0, c1 = C[g][2t, 2t+1]      c2, c3 = C[g+8][2t, 2t+1]
 * ldmatrix.m8n8.x4.b16: lane l gives the address of row (l & 7) of matrix (l >> 3) (16
 * contiguous bytes); matrix i lands in register i. Without .trans lane l receives
 * M[l >> 2][2(l & 3), 2(l & 3)+1]; with .trans it receives M[2(l & 3)][l >> 2] and
 * M[2(l & 3)+1][l >> 2] (the transpose's row l >> 2).
 * Consequences used below:
 *   S's B operand is K^T: B[k = d][n = key] = K[key][d], i.e. reg0 = K[key g][d 2t, 2t+1]:
 *     ldmatrix without .trans on 8x8 blocks of the K tile (rows = keys) gives it directly.
 *   O's B operand is V: B[k = key][n = d], reg0 = V[key 2t, 2t+1][d g]: ldmatrix .trans on
 *     8x8 blocks of the V tile (rows = keys).
 *   P's A operand for keys 16kk .. 16kk+15 is S's accumulator of n-tiles 2kk and 2kk+1:
 *     reg0 = (c0,c1) of 2kk, reg1 = (c2,c3) of 2kk, reg2 = (c0,c1) of 2kk+1, reg3 = (c2,c3). */

__device__ __forceinline__ void cp_async16(__half *dst, const __half *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
}
__device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
/* wait until at most one committed group (the newest) is still in flight */
__device__ __forceinline__ void cp_async_wait1(void) { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

/* two floats -> f16x2 bits, lo in the low half */
__device__ __forceinline__ uint32_t fa_pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

template <int HD> struct fa_cfg {
    static constexpr int LD = HD + FA_PAD;                  /* staged row stride, halfs (16-byte multiple) */
    static constexpr int TILE = FA_BK * LD;                 /* halfs of one K or V tile */
    static constexpr size_t SMEM = (size_t)2 * 2 * TILE * sizeof(__half);   /* 2 stages x (K, V) */
};

/* Keys j0 .. j0+63 of kv head kvh -> one stage (K tile, then V tile). Rows at or past
 * kv_len (never visible, maybe past the cache) are zero-filled: P is 0 there and 0 * V must
 * not meet a NaN. */
template <int HD>
__device__ __forceinline__ void fa_stage(__half *dst, const __half *__restrict__ kc, const __half *__restrict__ vc,
                                         int64_t j0, int64_t kv_len, size_t kvrow, int64_t kvh, int tid) {
    constexpr int CPR = HD / 8;   /* 16-byte chunks per row */
    for (int c = tid; c < FA_BK * CPR; c += 128) {
        const int r = c / CPR, ch = c % CPR;
        __half *dk = dst + r * fa_cfg<HD>::LD + ch * 8, *dv = dk + fa_cfg<HD>::TILE;
        const int64_t kp = j0 + r;
        if (kp < kv_len) {
            const size_t off = (size_t)kp * kvrow + (size_t)kvh * HD + (size_t)ch * 8;
            cp_async16(dk, kc + off);
            cp_async16(dv, vc + off);
        } else {
            *reinterpret_cast<uint4 *>(dk) = make_uint4(0u, 0u, 0u, 0u);
            *reinterpret_cast<uint4 *>(dv) = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

/* q [hd*Hq, N] F32, caches [hd*Hkv, n_ctx] F16 -> o [hd*Hq, N] F32.
 * grid (Hq, ceil(N/64)), 128 threads; blockIdx.y counts query tiles from the last (the
 * longest causal rows start first, the short ones fill the tail of the grid). */
template <int HD>
__global__ void __launch_bounds__(128)
kernel_attn_flash(const float *__restrict__ q, const __half *__restrict__ kc, const __half *__restrict__ vc,
               float *__restrict__ o, int64_t N, int64_t n_past, int64_t Hq, int64_t Hkv, float sl2) {
    constexpr int LD = fa_cfg<HD>::LD, TILE = fa_cfg<HD>::TILE;
    constexpr int KS = HD / 16;   /* k-steps of S = Q K^T */
    constexpr int NO = HD / 8;    /* n-tiles of O */
    extern __shared__ __align__(16) unsigned char fa_smem[];
    __half *sm = reinterpret_cast<__half *>(fa_smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int64_t h = blockIdx.x;
    const int64_t i0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * FA_BQ;
    const int64_t kvh = h / (Hq / Hkv);
    const size_t qrow = (size_t)HD * (size_t)Hq, kvrow = (size_t)HD * (size_t)Hkv;
    const int64_t i_last = (i0 + FA_BQ < N ? i0 + FA_BQ : N) - 1;
    const int64_t kv_len = n_past + i_last + 1;   /* keys any query of the block sees */
    const int64_t ntiles = (kv_len + FA_BK - 1) / FA_BK;

    fa_stage<HD>(sm, kc, vc, 0, kv_len, kvrow, kvh, tid);   /* tile 0 flies while Q is read */
    cp_async_commit();

    /* Q rows of this warp as A fragments, f32 -> f16 once; rows past N are 0 */
    const int64_t wq0 = i0 + warp * 16;
    const int64_t r0 = wq0 + g, r1 = r0 + 8;
    uint32_t qa[KS][4];
    {
        const float *q0 = q + (size_t)r0 * qrow + (size_t)h * HD, *q1 = q + (size_t)r1 * qrow + (size_t)h * HD;
        const bool v0 = r0 < N, v1 = r1 < N;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            const int c = kk * 16 + 2 * t;
            qa[kk][0] = v0 ? fa_pack(q0[c], q0[c + 1]) : 0u;
            qa[kk][1] = v1 ? fa_pack(q1[c], q1[c + 1]) : 0u;
            qa[kk][2] = v0 ? fa_pack(q0[c + 8], q0[c + 9]) : 0u;
            qa[kk][3] = v1 ? fa_pack(q1[c + 8], q1[c + 9]) : 0u;
        }
    }
    const bool wactive = wq0 < N;                                  /* warp-uniform */
    const int64_t wpos_first = n_past + wq0;                       /* this warp's first row position */
    const int64_t wpos_last = n_past + (wq0 + 15 < N ? wq0 + 15 : N - 1);
    const int64_t pos0 = n_past + r0, pos1 = n_past + r1;          /* positions of this lane's rows */

    float oacc[NO][4];
#pragma unroll
    for (int nt = 0; nt < NO; nt++) oacc[nt][0] = oacc[nt][1] = oacc[nt][2] = oacc[nt][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY;   /* running max (base-2 logits) of rows g, g+8: quad-uniform */
    float l0 = 0.0f, l1 = 0.0f;             /* this lane's part of the row sums (quad-summed at the end) */

    /* ldmatrix addressing: lane l addresses row (l & 7) of 8x8 matrix (l >> 3) */
    const int lm = lane >> 3, lr = lane & 7;

    for (int64_t jt = 0; jt < ntiles; jt++) {
        if (jt + 1 < ntiles) fa_stage<HD>(sm + ((jt + 1) & 1) * 2 * TILE, kc, vc, (jt + 1) * FA_BK, kv_len, kvrow, kvh, tid);
        cp_async_commit();   /* possibly empty: the wait below always leaves exactly the newest group */
        cp_async_wait1();    /* this thread's copies of tile jt landed */
        __syncthreads();     /* ... and everyone's */
        const int64_t j0 = jt * FA_BK;
        if (wactive && j0 <= wpos_last) {   /* else every key of the tile is in this warp's future */
            const __half *sK = sm + (jt & 1) * 2 * TILE, *sV = sK + TILE;
            float s[8][4];
#pragma unroll
            for (int nt = 0; nt < 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
            /* S [16 rows, 64 keys] = Q K^T; matrices of one x4: (keys 8*(2np)+.., d lo), (same keys,
             * d hi), (keys 8*(2np+1)+.., d lo), (same, d hi) -> reg0/1 = B of n-tile 2np, reg2/3 of 2np+1 */
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t b[4];
                    ldsm_x4(b, sK + ((2 * np + (lm >> 1)) * 8 + lr) * LD + kk * 16 + (lm & 1) * 8);
                    mma_f16_16816(s[2 * np], qa[kk], b[0], b[1]);
                    mma_f16_16816(s[2 * np + 1], qa[kk], b[2], b[3]);
                }
            }
            /* base-2 logits; causal mask only where some key of the tile is past some row */
            const bool need_mask = j0 + FA_BK - 1 > wpos_first;
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int64_t key = j0 + nt * 8 + 2 * t + (e & 1);
                    const float v = s[nt][e] * sl2;
                    s[nt][e] = need_mask && key > (e < 2 ? pos0 : pos1) ? -INFINITY : v;
                }
            }
            float mx0 = m0, mx1 = m1;
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
                mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
            }
            /* a row lives in the 4 lanes of a quad */
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            /* a row with nothing visible yet (cannot happen: key 0 is always visible) keeps
             * m = -inf, p = 0, alpha = 0 instead of computing -inf - -inf */
            const float mu0 = mx0 == -INFINITY ? 0.0f : mx0, mu1 = mx1 == -INFINITY ? 0.0f : mx1;
            const float al0 = exp2f(m0 - mu0), al1 = exp2f(m1 - mu1);   /* 0 on the first tile */
            m0 = mx0;
            m1 = mx1;
            /* P (f16) as A fragments of the P V product, one per 16 keys */
            uint32_t pa[4][4];
            float ls0 = 0.0f, ls1 = 0.0f;
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int nt = 2 * kk + hf;
                    const __half2 p0 = __floats2half2_rn(exp2f(s[nt][0] - mu0), exp2f(s[nt][1] - mu0));
                    const __half2 p1 = __floats2half2_rn(exp2f(s[nt][2] - mu1), exp2f(s[nt][3] - mu1));
                    ls0 += __low2float(p0) + __high2float(p0);
                    ls1 += __low2float(p1) + __high2float(p1);
                    pa[kk][2 * hf] = *reinterpret_cast<const uint32_t *>(&p0);
                    pa[kk][2 * hf + 1] = *reinterpret_cast<const uint32_t *>(&p1);
                }
            }
            l0 = l0 * al0 + ls0;
            l1 = l1 * al1 + ls1;
#pragma unroll
            for (int nt = 0; nt < NO; nt++) {
                oacc[nt][0] *= al0;
                oacc[nt][1] *= al0;
                oacc[nt][2] *= al1;
                oacc[nt][3] *= al1;
            }
            /* O [16 rows, HD] += P V; matrices of one x4.trans: (keys 16kk+0..7, d 8*(2np)+..),
             * (keys 16kk+8..15, same d), (keys lo, d 8*(2np+1)+..), (keys hi, same d) */
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
#pragma unroll
                for (int np = 0; np < NO / 2; np++) {
                    uint32_t b[4];
                    ldsm_x4_trans(b, sV + (kk * 16 + (lm & 1) * 8 + lr) * LD + (2 * np + (lm >> 1)) * 8);
                    mma_f16_16816(oacc[2 * np], pa[kk], b[0], b[1]);
                    mma_f16_16816(oacc[2 * np + 1], pa[kk], b[2], b[3]);
                }
            }
        }
        __syncthreads();   /* stage jt & 1 is refilled at iteration jt + 1 */
    }

    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    float *o0 = o + (size_t)r0 * qrow + (size_t)h * HD, *o1 = o + (size_t)r1 * qrow + (size_t)h * HD;
#pragma unroll
    for (int nt = 0; nt < NO; nt++) {
        const int c = nt * 8 + 2 * t;
        if (r0 < N) {
            o0[c] = oacc[nt][0] * inv0;
            o0[c + 1] = oacc[nt][1] * inv0;
        }
        if (r1 < N) {
            o1[c] = oacc[nt][2] * inv1;
            o1[c + 1] = oacc[nt][3] * inv1;
        }
    }
}

extern "C" bool mi7e_attn_flash_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype, int64_t N) {
    return (hd == 64 || hd == 128) && Hkv > 0 && Hq > 0 && Hq % Hkv == 0 && Hq <= 0x7fffffff &&
           ctype == MI_TYPE_F16 && N >= MI7E_ATTN_MIN_N && N <= (int64_t)65535 * FA_BQ;
}

template <int HD>
static mi_status launch_attn_flash(cudaStream_t st, const float *q, const __half *k, const __half *v, float *o,
                                   int64_t N, int64_t n_past, int64_t Hq, int64_t Hkv, float scale) {
    const size_t smem = fa_cfg<HD>::SMEM;
    static bool attr_set = false;   /* once per instantiation, before any graph capture uses it */
    if (!attr_set) {
        MI_CU_CHECK(cudaFuncSetAttribute(kernel_attn_flash<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr_set = true;
    }
    dim3 grid((unsigned)Hq, (unsigned)((N + FA_BQ - 1) / FA_BQ));
    kernel_attn_flash<HD><<<grid, 128, smem, st>>>(q, k, v, o, N, n_past, Hq, Hkv, scale * FA_LOG2E);
    MI_CU_CHECK_LAUNCH("kernel_attn_flash");
    return MI_OK;
}

extern "C" mi_status mi7e_attn_flash(void *stream, const float *q, const void *k, const void *v, mi_type ctype,
                                     float *o, int64_t N, int64_t n_past, int64_t hd, int64_t Hq, int64_t Hkv,
                                     float scale) {
    if (!mi7e_attn_flash_supported(hd, Hq, Hkv, ctype, N) || n_past < 0)
        return mi_err(MI_ERR_UNSUPPORTED, "mi7e_attn_flash: hd %lld, Hq %lld, Hkv %lld, %s, N %lld, n_past %lld",
                      (long long)hd, (long long)Hq, (long long)Hkv, mi_type_name(ctype), (long long)N,
                      (long long)n_past);
    /* cp.async moves 16-byte chunks: a cache view off that alignment takes the tiled kernel */
    if ((((uintptr_t)k) | ((uintptr_t)v)) & 15u)
        return mi7e_attn_tiled(stream, q, k, v, ctype, o, N, n_past, hd, Hq, Hkv, scale);
    cudaStream_t st = (cudaStream_t)stream;
    const __half *kc = (const __half *)k, *vc = (const __half *)v;
    if (hd == 64) return launch_attn_flash<64>(st, q, kc, vc, o, N, n_past, Hq, Hkv, scale);
    return launch_attn_flash<128>(st, q, kc, vc, o, N, n_past, Hq, Hkv, scale);
}

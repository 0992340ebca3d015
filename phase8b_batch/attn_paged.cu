/* ATTN_PAGED: attention of a step of many sequences over a paged KV cache (phase 8b).
 * Row r of sequence s attends over s's positions 0 .. n_past_s + (r - first_s); position p
 * lives at cache row table_s[p / block] * block + p % block. One kernel takes decode rows
 * (one a sequence: the hot case of a batch) and prompt chunks alike: block (row r, KV head,
 * split) takes the G query heads of the KV head's group over one split of r's keys, so each
 * K and V row is read once for the group:
 *   lookup   the row's sequence by binary search over the first rows (rows come in sequence
 *            order), its fields and the block-table entries of the split checked (a bad one:
 *            NaN out, never a read outside the cache);
 *   scores   tiles of MI8B_PG_T keys, thread t takes key t: its cache row from the table (kept
 *            in shared memory for the values), G dots over hd (16-byte loads where the cache
 *            allows; q of the G heads from shared memory), scale * dot;
 *   softmax  online per head over the split's tiles (running max and sum, rescaled per tile);
 *   values   thread t accumulates dims t, t + T of the G heads over the tile's keys in key
 *            order; F16 caches with hd <= 128: the tile's V rows are copied to shared memory
 *            with cp.async, issued before the scores (the table's rows are 16-byte aligned);
 * On F16 caches of hd 64 or 128 the same blocks run on the tensor cores instead (item b7,
 * kernel_attn_paged_mma below), which on a decode step can also do the step's RoPE of q and k and
 * its K and V scatters first (item b47, pg_rkv_prologue). With S > 1 splits each block writes its
 * unnormalized partial (m, l, acc[hd]) per head and a second kernel merges each (row, head) in
 * split order. S comes
 * from the step's shape alone (rows, longest sequence, the device's SM count), so the arithmetic
 * of a row depends only on the step's shape: repeated runs are bit-identical. */
#include <cuda_fp16.h>
#include <type_traits>
#include "phase7b_ops/dev7b.cuh"
#include "phase7b_ops/attn_core.cuh"
#include "phase7e_perf/perf7e.h"
#include "phase8a_decode/attn_mma_tile.cuh"
#include "phase8a_decode/rope_rotate.cuh"
#include "phase8b_batch/batch8b.h"
#include "phase8b_batch/x_f16_copy.cuh"
#include "phase7a_skeleton/cuda_pdl.cuh"
#include "common/graph/graph.h"
#include "common/core/mi_settings.h"

#define PG_T MI8B_PG_T
#define PG_MAX_G MI8B_PG_MAX_G
#define PG_VS_MAX_HD 128
#define PG_SMEM_MAX (46u << 10)

__device__ __forceinline__ void pg_cp_async16(void *smem, const void *gmem) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem));
}
__device__ __forceinline__ void pg_cp_async_wait_all() {
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
}

/* the sequence that holds row r: the last one whose first row is <= r */
__device__ __forceinline__ int pg_find_seq(const int32_t *__restrict__ seqs, int n_seqs, int64_t r) {
    int lo = 0, hi = n_seqs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if ((int64_t)seqs[(size_t)mid * MI_PAGED_FIELDS + MI_PAGED_FIRST] <= r) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* A block's row and split: the row's sequence (its fields checked), its key count and the split's
 * keys [k0, k1); bad when a field or one of the split's table entries would read outside the
 * cache (then table points at the fields, never read). Every thread of the block calls it (a
 * barrier) and gets the same answer. */
struct pg_range {
    const int32_t *table;
    int64_t k0, k1;
    int64_t n_past;   /* the sequence's first position this step writes (its earlier ones: earlier steps') */
    bool bad;
};
__device__ __forceinline__ pg_range pg_row_range(const int32_t *__restrict__ seqs, int n_seqs, int64_t seqs_len,
                                                 int64_t n_rows, int B, int64_t max_kv, int64_t r, int S, int s,
                                                 int min_chunk) {
    const int sq = pg_find_seq(seqs, n_seqs, r);
    const int32_t *f = seqs + (size_t)sq * MI_PAGED_FIELDS;
    const int64_t first = f[MI_PAGED_FIRST], rows = f[MI_PAGED_ROWS], n_past = f[MI_PAGED_NPAST], toff = f[MI_PAGED_TABLE];
    bool bad = !(rows >= 1 && first <= r && r < first + rows && n_past >= 0 && toff >= (int64_t)n_seqs * MI_PAGED_FIELDS);
    const int64_t n_kv = bad ? 1 : n_past + (r - first) + 1;
    if (!bad && (n_kv > max_kv || toff + (n_kv + B - 1) / B > seqs_len)) bad = true;
    const int32_t *table = seqs + (bad ? 0 : toff);
    const int64_t chunk0 = (n_kv + S - 1) / S, chunk = chunk0 > min_chunk ? chunk0 : min_chunk, k0 = (int64_t)s * chunk;
    const int64_t k1 = k0 + chunk < n_kv ? k0 + chunk : n_kv;
    if (!bad && k0 < k1) {   /* the split's table entries: each block's last key inside the cache */
        int my_bad = 0;
        for (int64_t b = k0 / B + threadIdx.x; b <= (k1 - 1) / B; b += blockDim.x) {
            const int64_t e = table[b], last = ((b + 1) * B < k1 ? (b + 1) * B : k1) - 1;
            if (e < 0 || e * B + last % B >= n_rows) my_bad = 1;
        }
        bad = __syncthreads_or(my_bad) != 0;
    }
    return {table, k0, k1, bad ? 0 : n_past, bad};
}

/* A bad row's output (NaN), or an empty split's partial (weight 0 in the combine), for the G heads
 * from h0 of row r */
__device__ __forceinline__ void pg_write_unused(float *__restrict__ part, float *__restrict__ O, bool bad, int64_t r,
                                                int h0, int G, int hd, int Hq, int S, int s,
                                                __half *__restrict__ OH = nullptr, bool eo = false) {
    const size_t qrow = (size_t)hd * Hq, pstride = (size_t)hd + 2;
    const float m0 = bad ? NAN : -INFINITY, l0 = bad ? NAN : 0.0f;
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x) {
        const int g = i / hd, d = i - g * hd;
        if (S == 1) {
            O[(size_t)r * qrow + (size_t)(h0 + g) * hd + d] = NAN;
            if (OH) x_f16_store1(OH + (size_t)r * qrow, (size_t)(h0 + g) * hd + d, NAN, eo);
        } else {
            float *p = part + (((size_t)r * Hq + h0 + g) * S + s) * pstride;
            if (d == 0) {
                p[0] = m0;
                p[1] = l0;
            }
            p[2 + d] = bad ? NAN : 0.0f;
        }
    }
}

/* dot[g] += q_g[d] * k[d] over the K row kr, d in increasing order */
template <typename KT, bool VS>
__device__ __forceinline__ void pg_scores(const KT *__restrict__ kr, const float *qs, int hd, int G,
                                          float (&dot)[PG_MAX_G]) {
    if constexpr (VS) {   /* F16, 16-byte aligned rows: 8 halves a load */
        const uint4 *k4 = (const uint4 *)kr;
#pragma unroll 4
        for (int c = 0; c < hd / 8; c++) {
            const uint4 raw = __ldg(k4 + c);
            const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float2 kv = __half22float2(*(const __half2 *)&w[e]);
                const int d = 8 * c + 2 * e;
#pragma unroll
                for (int g = 0; g < PG_MAX_G; g++)
                    if (g < G) {
                        dot[g] += qs[g * hd + d] * kv.x;
                        dot[g] += qs[g * hd + d + 1] * kv.y;
                    }
            }
        }
    } else {
#pragma unroll 4
        for (int d = 0; d < hd; d += 2) {
            const float2 kv = mi7b_ld2(kr + d);
#pragma unroll
            for (int g = 0; g < PG_MAX_G; g++)
                if (g < G) {
                    dot[g] += qs[g * hd + d] * kv.x;
                    dot[g] += qs[g * hd + d + 1] * kv.y;
                }
        }
    }
}

/* NJ: dims a thread accumulates (hd <= NJ * PG_T). Five blocks a multiprocessor: the register
 * budget (96) every form used before the row set-up moved into pg_row_range, where the compiler
 * left alone picked 72-80 and spilled 4-12 bytes. */
template <typename KT, bool VS, int NJ>
__global__ void __launch_bounds__(PG_T, 5)
    kernel_attn_paged(const float *__restrict__ Q, const KT *__restrict__ Kc, const KT *__restrict__ Vc,
                      float *__restrict__ part, float *__restrict__ O, const int32_t *__restrict__ seqs, int n_seqs,
                      int64_t seqs_len, int64_t n_rows, int B, int64_t max_kv, int hd, int Hq, int Hkv, int S,
                      int min_chunk, float scale) {
    extern __shared__ uint4 pg_smem4[];
    const int G = Hq / Hkv;
    const int64_t r = blockIdx.x / Hkv;
    const int kvh = (int)(blockIdx.x - r * Hkv), h0 = kvh * G;
    const int s = blockIdx.y, tid = threadIdx.x;
    KT *vs = (KT *)pg_smem4;   /* VS: [PG_T][hd] V tile */
    float *qs = (float *)(pg_smem4 + (VS ? (size_t)PG_T * hd * sizeof(KT) / 16 : 0));   /* [G][hd] */
    float *ps = qs + (size_t)G * hd;       /* [G][PG_T] scores, then probabilities */
    float *mt = ps + (size_t)G * PG_T;     /* [G] tile max */
    float *lt = mt + PG_MAX_G;             /* [G] tile sum */
    int *rows_sh = (int *)(lt + PG_MAX_G); /* [PG_T] the tile's cache rows */
    const size_t qrow = (size_t)hd * Hq, kvrow = (size_t)hd * Hkv, pstride = (size_t)hd + 2;

    const pg_range R = pg_row_range(seqs, n_seqs, seqs_len, n_rows, B, max_kv, r, S, s, min_chunk);
    if (R.bad || R.k0 >= R.k1) {
        pg_write_unused(part, O, R.bad, r, h0, G, hd, Hq, S, s);
        return;
    }
    const int32_t *table = R.table;
    const int64_t k0 = R.k0, k1 = R.k1;

    for (int i = tid; i < G * hd; i += PG_T) qs[i] = Q[(size_t)r * qrow + (size_t)h0 * hd + i];
    float m[PG_MAX_G], l[PG_MAX_G], acc[PG_MAX_G][NJ];
#pragma unroll
    for (int g = 0; g < PG_MAX_G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int j = 0; j < NJ; j++) acc[g][j] = 0.0f;
    }
    const int lane = tid & 31, warp = tid >> 5, nw = PG_T / 32;
    for (int64_t t0 = k0; t0 < k1; t0 += PG_T) {
        const int64_t t = t0 + tid;
        const int tn = (int)(k1 - t0 < PG_T ? k1 - t0 : PG_T);
        if (tid < tn) rows_sh[tid] = (int)(table[t / B] * (int64_t)B + t % B);
        __syncthreads();   /* rows_sh for the V copy; qs on the first tile */
        if constexpr (VS) {   /* the tile's V rows -> vs, in flight during the scores */
            const int cpr = hd / 8;   /* 16-byte chunks a row */
            for (int i = tid; i < tn * cpr; i += PG_T) {
                const int k = i / cpr, c = i - k * cpr;
                pg_cp_async16(vs + (size_t)k * hd + 8 * c, Vc + (size_t)rows_sh[k] * kvrow + (size_t)kvh * hd + 8 * c);
            }
        }
        if (tid < tn) {
            float dot[PG_MAX_G];
#pragma unroll
            for (int g = 0; g < PG_MAX_G; g++) dot[g] = 0.0f;
            pg_scores<KT, VS>(Kc + (size_t)rows_sh[tid] * kvrow + (size_t)kvh * hd, qs, hd, G, dot);
#pragma unroll
            for (int g = 0; g < PG_MAX_G; g++)
                if (g < G) ps[g * PG_T + tid] = scale * dot[g];
        }
        __syncthreads();
        /* tile max and, after the probabilities, tile sum per head: warp w takes heads w, w + nw, ... */
        for (int g = warp; g < G; g += nw) {
            float v = -INFINITY;
            for (int k = lane; k < tn; k += 32) v = fmaxf(v, ps[g * PG_T + k]);
            for (int off = 16; off >= 1; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
            if (lane == 0) mt[g] = v;
        }
        __syncthreads();
        if (tid < tn) {
#pragma unroll
            for (int g = 0; g < PG_MAX_G; g++) {
                if (g >= G) break;
                ps[g * PG_T + tid] = expf(ps[g * PG_T + tid] - fmaxf(m[g], mt[g]));
            }
        }
        __syncthreads();
        for (int g = warp; g < G; g += nw) {
            float v = 0.0f;
            for (int k = lane; k < tn; k += 32) v += ps[g * PG_T + k];
            for (int off = 16; off >= 1; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            if (lane == 0) lt[g] = v;
        }
        if constexpr (VS) pg_cp_async_wait_all();
        __syncthreads();
#pragma unroll
        for (int g = 0; g < PG_MAX_G; g++) {
            if (g >= G) break;
            const float m_new = fmaxf(m[g], mt[g]), corr = expf(m[g] - m_new);
            l[g] = l[g] * corr + lt[g];
            m[g] = m_new;
#pragma unroll
            for (int j = 0; j < NJ; j++) acc[g][j] *= corr;
        }
        /* acc[g][j] += p_g[k] * V[k][d] in key order; each V value read once for the G heads */
#pragma unroll 4
        for (int k = 0; k < tn; k++) {
            float v[NJ];
            const KT *vr = VS ? vs + (size_t)k * hd : Vc + (size_t)rows_sh[k] * kvrow + (size_t)kvh * hd;
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                const int d = tid + j * PG_T;
                v[j] = d < hd ? mi7b_ld1(vr + d) : 0.0f;
            }
#pragma unroll
            for (int g = 0; g < PG_MAX_G; g++) {
                if (g >= G) break;
                const float p = ps[g * PG_T + k];
#pragma unroll
                for (int j = 0; j < NJ; j++) acc[g][j] += p * v[j];
            }
        }
        __syncthreads();   /* ps, mt, lt, rows_sh and vs are rewritten by the next tile */
    }
#pragma unroll
    for (int g = 0; g < PG_MAX_G; g++) {   /* unrolled: acc stays in registers */
        if (g >= G) break;
        if (S == 1) {
            float *o = O + (size_t)r * qrow + (size_t)(h0 + g) * hd;
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                const int d = tid + j * PG_T;
                if (d < hd) o[d] = acc[g][j] / l[g];
            }
        } else {
            float *p = part + (((size_t)r * Hq + h0 + g) * S + s) * pstride;
            if (tid == 0) {
                p[0] = m[g];
                p[1] = l[g];
            }
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                const int d = tid + j * PG_T;
                if (d < hd) p[2 + d] = acc[g][j];
            }
        }
    }
}

/* b47's part of a launch: the step's q, k and v, the RoPE's positions and the scatters' rows (b20's
 * record), the RoPE's mode, its rotated dims and inverse frequencies */
struct pg_rkv {
    mi8a_rope_kv_rows_io io;
    int neox, n_rot;
    rope_freqs fq;
};
/* the kernel's last parameter: b47's, or nothing (the plain kernel's launch carries no table) */
template <bool RKV> struct pg_rkv_param { pg_rkv r; };
template <> struct pg_rkv_param<false> { int none; };

/* b47 (a decode step: row r is its sequence's only row): row r's q heads h0 .. h0 + G - 1 rotated
 * into qs [G][HD] as b20's kernel rotates them (d8's pair, rope_rotate.cuh), and, by the split
 * that holds the row's own key (own), the KV head's rotated k and its v converted as the
 * scatters convert them (mi_f32_to_f16) into the caches at the scatters' row slots[r] (a slot
 * outside a cache is not written, as b20's kernel leaves it). Every value the attention then
 * reads is the one it read after b20. q's and k's RoPE outputs are not written: their only
 * readers are this attention and the K scatter, whose work this is. Ends with a barrier, after
 * which the block's copies of the own key's tile read the stored rows. */
template <int HD>
__device__ __forceinline__ void pg_rkv_prologue(const pg_rkv &p, int64_t r, int h0, int G, int kvh, int Hq, int Hkv,
                                                bool own, float *qs) {
    const mi8a_rope_kv_rows_io &io = p.io;
    const int half = p.n_rot / 2, per = HD - half;   /* a head's rotated pairs and kept dims */
    const float pos = (float)io.pos[r];
    const size_t krow = (size_t)HD * Hkv, kh = (size_t)kvh * HD;
    const float *q = io.q + (size_t)r * HD * Hq + (size_t)h0 * HD, *k = io.k + (size_t)r * krow + kh;
    const int64_t slot = own ? (int64_t)io.slots[r] : -1;
    uint16_t *kc = slot >= 0 && slot < io.n_rows_k ? (uint16_t *)io.cache_k + (size_t)slot * krow + kh : nullptr;
    const int n = (G + (kc ? 1 : 0)) * per;   /* q's heads, then k's where it is stored */
    for (int u = threadIdx.x; u < n; u += blockDim.x) {
        const int hh = u / per, e = u - hh * per;
        const rope_elem re = rope_head_elem(hh < G ? q + (size_t)hh * HD : k, e, p.n_rot, p.neox, pos, p.fq);
        const int d0 = re.d0, d1 = re.d1;
        const float y0 = re.y0, y1 = re.y1;
        if (hh < G) {
            qs[hh * HD + d0] = y0;
            if (d1 >= 0) qs[hh * HD + d1] = y1;
        } else {
            kc[d0] = mi_f32_to_f16(y0);
            if (d1 >= 0) kc[d1] = mi_f32_to_f16(y1);
        }
    }
    if (slot >= 0 && slot < io.n_rows_v) {
        uint16_t *vc = (uint16_t *)io.cache_v + (size_t)slot * krow + kh;
        const float *v = io.v + (size_t)r * krow + kh;
        for (int d = threadIdx.x; d < HD; d += blockDim.x) vc[d] = mi_f32_to_f16(v[d]);
    }
    __syncthreads();
}

/* ---------------- b7: the same blocks on the tensor cores (F16 caches, hd 64 or 128) ----------------
 * 8a's d22 tiling (phase8a_decode/attn_mma_tile.cuh) over the paged cache: a block of four warps
 * takes (row, KV head, split) as the scalar kernel does, 64-key tiles (16 keys a warp) whose K and
 * V rows come by cp.async from the rows the block table names, NB buffers; the scores and the
 * value sums as m16n8k16 mma with the group's heads as the rows, q and P in two f16 parts; the
 * partials and the combine are the scalar kernel's. Fixed orders: bit-identical run to run;
 * within the attention bound of the CPU, not the scalar kernel's bits.
 * RW (item b27): a tile's cache rows looked up once a key, not once a 16-byte copy. A thread's
 * copies of a tile are J = MMA_TK x CPR / MMA_THREADS rows of one 16-byte column; without RW each
 * computed its row as table[t / B] B + t % B in 64-bit arithmetic (a 64-bit division and modulo
 * and a dependent table load a copy: 16 a thread a tile at hd 128, several times the tile's mma
 * work). With RW lane l < 16 of a warp looks up one of the warp's 16 keys in 32-bit arithmetic
 * (positions and cache rows fit: the launcher holds n_rows to INT32_MAX) and each copy takes its
 * row from that lane by a shuffle. The same bytes land in the same places: the same bits out.
 * NB (item b43): three tile buffers, tiles t + 1 and t + 2 loading while tile t's products run,
 * the table entries read a tile ahead; two otherwise. PK (item b44): 8a's packed layout (G <= 8).
 * Blocks a multiprocessor: four at hd 64 (at most 128 registers, no spill); at hd 128 two for the
 * plain layout (a third leaves 168 registers and spills; measured slower, results/notes/PHASE8B.md)
 * and three for the packed one (164 registers), which two buffers' shared memory allows. The
 * bound changes the register allocation only (the same PTX), so the same bits.
 * RKV (item b47): the step's RoPEs and scatters first (pg_rkv_prologue above); q then comes
 * from shared memory. */
template <int HD, bool RW, int NB, bool PK, bool RKV>
__global__ void __launch_bounds__(MMA_THREADS, HD == 128 ? (PK ? 3 : 2) : 4)
    kernel_attn_paged_mma(const float *__restrict__ Q, const uint16_t *__restrict__ Kc, const uint16_t *__restrict__ Vc,
                          float *__restrict__ part, float *__restrict__ O, const int32_t *__restrict__ seqs, int n_seqs,
                          int64_t seqs_len, int64_t n_rows, int B, int64_t max_kv, int Hq, int Hkv, int S,
                          int min_chunk, float scale, __half *__restrict__ OH, bool eo,
                          const __grid_constant__ pg_rkv_param<RKV> rp) {
    static_assert(NB == 2 || NB == 3, "two or three tile buffers");
    static_assert(PG_MAX_G * HD * sizeof(float) <= MMA_TK * MMA_LD(HD) * sizeof(uint16_t), "b47: q's heads fit a K tile");
    constexpr int LD = MMA_LD(HD), CPR = HD / 8;
    extern __shared__ uint4 pm_smem4[];
    uint16_t *ks = (uint16_t *)pm_smem4;     /* [NB][MMA_TK][LD] */
    uint16_t *vs = ks + NB * MMA_TK * LD;    /* [NB][MMA_TK][LD] */
    const int G = Hq / Hkv;
    const int64_t r = blockIdx.x / Hkv;
    const int kvh = (int)(blockIdx.x - r * Hkv), h0 = kvh * G, s = blockIdx.y;
    const int tid = threadIdx.x, warp = tid >> 5;
    /* the scalar kernel's start, written out in each: moving these lines into a shared helper
     * changed the scalar kernel's register allocation, and it spilled */
    /* (before b29's wait: the sequence table is the step's input, which no kernel writes) */
    const pg_range R = pg_row_range(seqs, n_seqs, seqs_len, n_rows, B, max_kv, r, S, s, min_chunk);
    const bool unused = R.bad || R.k0 >= R.k1;
    const int32_t *table = R.table;
    const int64_t k0 = R.k0, k1 = R.k1;
    const size_t qrow = (size_t)HD * Hq, kvrow = (size_t)HD * Hkv, pstride = (size_t)HD + 2;
    const uint16_t *kb = Kc + (size_t)kvh * HD, *vb = Vc + (size_t)kvh * HD;
    /* RW: copy i = tid + MMA_THREADS j of a tile is key KPW warp + lane / CPR + KPI j, column
     * lane % CPR; lane l < KPW J of the warp looks up key KPW warp + l % KPW + KPI (l / KPW) */
    constexpr int KPW = 32 / CPR, KPI = MMA_THREADS / CPR, J = MMA_TK * CPR / MMA_THREADS;
    static_assert(KPW * J == 16 && 32 % CPR == 0, "a warp's keys of a tile: one a lane of 16");
    const int lane = tid & 31;
    /* RW: the block-table entry of this lane's key of tile t0, -1 past the split (the split's
     * entries were checked: none is negative), read apart from the copies that use it (b43 reads
     * the next tile's while a tile's products run) */
    auto lookup = [&](int64_t t0) -> int {
        const int64_t t = t0 + KPW * warp + lane % KPW + KPI * (lane / KPW);
        return RW && lane < KPW * J && t < k1 ? table[(int)t / B] : -1;
    };
    auto issue = [&](int buf, int64_t t0, int e) {
        if (RW) {
            const int tt = (int)(t0 + KPW * warp + lane % KPW + KPI * (lane / KPW));
            const int mine = e < 0 ? -1 : e * B + (tt - (tt / B) * B);   /* the key's cache row, -1 past the split */
            const int cc = lane % CPR;
#pragma unroll
            for (int j = 0; j < J; j++) {
                const int kr = KPW * warp + lane / CPR + KPI * j;
                const int row = __shfl_sync(0xffffffffu, mine, lane / CPR + KPW * j);
                const size_t off = (size_t)(row < 0 ? 0 : row) * kvrow + (size_t)cc * 8;
                cp16_or_zero(ks + (buf * MMA_TK + kr) * LD + cc * 8, kb + off, row >= 0);
                cp16_or_zero(vs + (buf * MMA_TK + kr) * LD + cc * 8, vb + off, row >= 0);
            }
        } else {
            for (int i = tid; i < MMA_TK * CPR; i += MMA_THREADS) {
                const int kr = i / CPR, cc = i - kr * CPR;
                const int64_t t = t0 + kr;
                const bool ok = t < k1;
                const size_t row = ok ? (size_t)table[t / B] * (size_t)B + (size_t)(t % B) : 0;
                const size_t off = row * kvrow + (size_t)cc * 8;
                cp16_or_zero(ks + (buf * MMA_TK + kr) * LD + cc * 8, kb + off, ok);
                cp16_or_zero(vs + (buf * MMA_TK + kr) * LD + cc * 8, vb + off, ok);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    auto load = [&](int buf, int64_t t0) { issue(buf, t0, lookup(t0)); };
    /* b43: the first two tiles' entries, and the copies of those whose keys all precede the
     * step's rows (earlier steps wrote them; the kernel before may still be writing the step's),
     * before b29's wait */
    int e0 = -1, e1 = -1, pre = 0;
    if (NB == 3 && !unused) {
        e0 = lookup(k0), e1 = lookup(k0 + MMA_TK);
        if ((k0 + MMA_TK < k1 ? k0 + MMA_TK : k1) <= R.n_past) {
            issue(0, k0, e0), pre = 1;
            if (k0 + MMA_TK < k1 && (k0 + 2 * MMA_TK < k1 ? k0 + 2 * MMA_TK : k1) <= R.n_past) issue(1, k0 + MMA_TK, e1), pre = 2;
        }
    }
    MI_PDL_ENTRY();   /* b29: every block, before its early return and its first write, or read of q or the step's rows */
    if (unused) {
        pg_write_unused(part, O, R.bad, r, h0, G, HD, Hq, S, s, OH, eo);
        return;
    }
    float *qs = (float *)(ks + (NB - 1) * MMA_TK * LD);   /* b47: q rotated into K buffer NB - 1, which no copy */
    if constexpr (RKV)                                      /* fills before the barrier after mma_begin */
        pg_rkv_prologue<HD>(rp.r, r, h0, G, kvh, Hq, Hkv, R.n_past >= k0 && R.n_past < k1, qs);
    if (NB == 2) load(0, k0);
    else if (pre < 1) issue(0, k0, e0);
    typename std::conditional<PK, mma_state_packed<HD>, mma_state<HD>>::type st;   /* b44: packed (G <= 8) */
    mma_begin<HD>(st, RKV ? qs : Q + (size_t)r * qrow + (size_t)h0 * HD, G);
    if (RKV) __syncthreads();   /* every warp has read qs before a copy refills its buffer */
    if constexpr (NB == 2) {
        int buf = 0;
        for (int64_t t0 = k0; t0 < k1; t0 += MMA_TK, buf ^= 1) {
            if (t0 + MMA_TK < k1) {
                load(buf ^ 1, t0 + MMA_TK);
                asm volatile("cp.async.wait_group 1;\n" ::);
            } else {
                asm volatile("cp.async.wait_group 0;\n" ::);
            }
            __syncthreads();
            mma_keys<HD>(st, ks + (buf * MMA_TK + warp * 16) * LD, vs + (buf * MMA_TK + warp * 16) * LD,
                         t0 + warp * 16, k1, scale);
            __syncthreads();   /* this buffer is refilled by the next iteration's load */
        }
    } else {   /* b43: tiles t + 1 and t + 2 in flight while tile t's products run; one barrier a tile */
        if (pre < 2 && k0 + MMA_TK < k1) issue(1, k0 + MMA_TK, e1);
        else if (pre < 2) asm volatile("cp.async.commit_group;\n" ::);   /* an empty group: one a tile, always */
        int e_next = lookup(k0 + 2 * MMA_TK);                 /* tile t + 2's entries, read a tile ahead */
        int buf = 0;
        for (int64_t t0 = k0; t0 < k1; t0 += MMA_TK, buf = buf == NB - 1 ? 0 : buf + 1) {
            asm volatile("cp.async.wait_group 1;\n" ::);   /* this thread's copies of tile t */
            /* everyone's have landed, and every warp is done with tile t - 1, whose buffer the
             * next load refills */
            __syncthreads();
            if (t0 + 2 * MMA_TK < k1) issue(buf == 0 ? NB - 1 : buf - 1, t0 + 2 * MMA_TK, e_next);
            else asm volatile("cp.async.commit_group;\n" ::);
            e_next = lookup(t0 + 3 * MMA_TK);
            mma_keys<HD>(st, ks + (buf * MMA_TK + warp * 16) * LD, vs + (buf * MMA_TK + warp * 16) * LD,
                         t0 + warp * 16, k1, scale);
        }
        __syncthreads();   /* the merge below writes over the tiles */
    }
    mma_merge<HD>(st, (float *)pm_smem4, G, [&](int h, int d, float M, float L, float acc) {
        if (S == 1) {
            const float y = acc / L;
            O[(size_t)r * qrow + (size_t)(h0 + h) * HD + d] = y;
            if (OH) x_f16_store1(OH + (size_t)r * qrow, (size_t)(h0 + h) * HD + d, y, eo);   /* b37 */
        } else {
            float *p = part + (((size_t)r * Hq + h0 + h) * S + s) * pstride;
            if (d == 0) {
                p[0] = M;
                p[1] = L;
            }
            p[2 + d] = acc;
        }
    });
}

/* (row, head) blockIdx.x = r * Hq + h: its S partials merged in split order, m* = max m_s,
 * l = sum l_s e^(m_s - m*), o = sum acc_s e^(m_s - m*) / l; an empty split (l = 0) is left out.
 * With one non-empty split the weight is e^0 = 1, so the result is acc / l, as one block writes it. */
__global__ void kernel_attn_paged_combine(const float *__restrict__ part, float *__restrict__ O, int hd, int S,
                                          __half *__restrict__ OH, int Hq, bool eo) {
    __shared__ float wsh[MI8B_PG_MAX_SPLITS], lsh[MI8B_PG_MAX_SPLITS];
    MI_PDL_ENTRY();
    const size_t rh = blockIdx.x, pstride = (size_t)hd + 2;
    const float *p = part + rh * (size_t)S * pstride;
    if (threadIdx.x == 0) {
        float ms = -INFINITY;   /* the max is exact in any order */
        for (int s = 0; s < S; s++) ms = fmaxf(ms, p[(size_t)s * pstride]);
        for (int s = 0; s < S; s++) {
            lsh[s] = p[(size_t)s * pstride + 1];
            wsh[s] = lsh[s] == 0.0f ? 0.0f : expf(p[(size_t)s * pstride] - ms);
        }
    }
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float l = 0.0f, o = 0.0f;
        for (int s = 0; s < S; s++) {
            if (lsh[s] == 0.0f) continue;
            const float w = wsh[s];
            l += lsh[s] * w;
            o += p[(size_t)s * pstride + 2 + d] * w;
        }
        O[rh * (size_t)hd + d] = o / l;
        if (OH) x_f16_store1(OH + rh / Hq * (size_t)hd * Hq, (rh % Hq) * (size_t)hd + d, o / l, eo);   /* b37 */
    }
}

extern "C" bool mi8b_attn_paged_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype) {
    return hd > 0 && hd <= MI7B_ATT_MAX_HD && hd % 2 == 0 && Hkv > 0 && Hq > 0 && Hq % Hkv == 0 &&
           Hq / Hkv <= PG_MAX_G && Hq <= 65535 && (ctype == MI_TYPE_F16 || ctype == MI_TYPE_F32);
}

/* MINFER_PAGED_MIN_SPLIT: the fewest keys a split takes (MI8B_PG_MIN_SPLIT by default; for the
 * A/B of the split rule: 128 a whole tile, the longest cache or more one split, no combine) */
static int pg_min_split(void) {
    static long v = -1;
    return (int)mi_setting_int_once("MINFER_PAGED_MIN_SPLIT", 16, 65536, MI8B_PG_MIN_SPLIT, &v);
}

/* Splits of T rows x Hkv heads. resident 0: enough blocks for about four a multiprocessor (the
 * scalar kernel's rule). resident > 0 (b17, the tensor-core kernel): as many splits as fit one
 * wave of `resident` blocks a multiprocessor, at least 1 (rounded down: a split more that spills
 * into a second wave costs a whole block's fixed start again, the lookups and the first tile's
 * load, for fewer keys each). Either way none narrower than MI8B_PG_MIN_SPLIT keys
 * (MINFER_PAGED_MIN_SPLIT) when the longest sequence is full, at most MI8B_PG_MAX_SPLITS. */
static int pg_splits(int64_t T, int64_t max_kv, int64_t Hkv, int resident) {
    const int64_t blocks = T * Hkv, sms = mi7e_sm_count() > 0 ? mi7e_sm_count() : 1;
    const int64_t want = (resident > 0 ? resident : 4) * sms;
    if (blocks <= 0 || blocks >= want) return 1;
    int64_t s = resident > 0 ? want / blocks : (want + blocks - 1) / blocks;
    const int64_t minc = pg_min_split();
    const int64_t cap = (max_kv + minc - 1) / minc;   /* no split narrower than minc keys when full */
    if (s > cap) s = cap;
    if (s > MI8B_PG_MAX_SPLITS) s = MI8B_PG_MAX_SPLITS;
    return s < 1 ? 1 : (int)s;
}

/* ---- the tensor-core kernel's forms: hd 64 or 128, b27 (RW) on or off, b43's three tile buffers
 * (NB 3) or two, b44's packed layout (PK) or the plain one ---- */
template <bool RKV>
using pm_fn = void (*)(const float *, const uint16_t *, const uint16_t *, float *, float *, const int32_t *, int, int64_t,
                       int64_t, int, int64_t, int, int, int, int, float, __half *, bool, pg_rkv_param<RKV>);
template <int HD, bool PK, bool RKV> static pm_fn<RKV> pm_kernel_hd(bool rw, int nb) {
    if (nb == 3) return rw ? kernel_attn_paged_mma<HD, true, 3, PK, RKV> : kernel_attn_paged_mma<HD, false, 3, PK, RKV>;
    return rw ? kernel_attn_paged_mma<HD, true, 2, PK, RKV> : kernel_attn_paged_mma<HD, false, 2, PK, RKV>;
}
template <bool RKV> static pm_fn<RKV> pm_kernel(int64_t hd, bool rw, int nb, bool pk) {
    if (hd == 64) return pk ? pm_kernel_hd<64, true, RKV>(rw, nb) : pm_kernel_hd<64, false, RKV>(rw, nb);
    return pk ? pm_kernel_hd<128, true, RKV>(rw, nb) : pm_kernel_hd<128, false, RKV>(rw, nb);
}
/* K and V tiles, nb buffers of each */
static size_t pm_smem(int64_t hd, int nb) { return (size_t)2 * nb * MMA_TK * (size_t)(hd + 8) * 2; }
/* A form's blocks a multiprocessor (the device's occupancy for its registers and shared memory),
 * 0 where its shared memory is refused. Asked once a form, before its first launch: the dynamic
 * shared memory limit raised first (every form but hd 64's two buffers takes more than 48 KB). */
template <bool RKV> static int pm_occupancy(int64_t hd, bool rw, int nb, bool pk) {
    const pm_fn<RKV> k = pm_kernel<RKV>(hd, rw, nb, pk);
    int n = 0;
    if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pm_smem(hd, nb)) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, MMA_THREADS, pm_smem(hd, nb)) != cudaSuccess)
        n = 0;
    return n;
}
/* rkv: b47's kernel of the form, asked before its first launch (the shared memory limit); the
 * splits come from the plain kernel's, so that b47 leaves a step's arithmetic as it was */
static int pm_resident_of(int64_t hd, bool rw, int nb, bool pk, bool rkv = false) {
    static int r[32];
    static bool asked[32];
    const int i = rkv * 16 + (hd == 128) * 8 + rw * 4 + (nb == 3) * 2 + pk;
    int &v = r[i];
    if (!asked[i]) {
        const int n = rkv ? pm_occupancy<true>(hd, rw, nb, pk) : pm_occupancy<false>(hd, rw, nb, pk);
        (void)cudaGetLastError();
        v = n;
        asked[i] = true;
    }
    return v;
}
/* The form that runs for heads of hd in groups of G over a step's T x Hkv (row, KV head) pairs:
 * b27 as switched, b44's packed layout where switched on and G <= 8, b43's three buffers where
 * switched on and they keep as many blocks a multiprocessor as two, or the pairs fit one wave of
 * them (a decode step's: more resident blocks would stay empty). The packed form at hd 128 holds
 * three blocks with two buffers, two with three: a prompt's many blocks take two. nb 0 where no
 * form fits. */
struct pm_form {
    bool rw, pk;
    int nb, resident;
};
static pm_form pm_form_for(int64_t hd, int64_t G, int64_t pairs) {
    pm_form f = {mi8b_paged_rows_once_on(), G <= 8 && mi8b_paged_packed_on(), 0, 0};
    const int two = pm_resident_of(hd, f.rw, 2, f.pk);
    f.nb = two > 0 ? 2 : 0;
    f.resident = two;
    if (mi8b_paged_ring3_on() && two > 0) {
        const int three = pm_resident_of(hd, f.rw, 3, f.pk);
        const int64_t sms = mi7e_sm_count() > 0 ? mi7e_sm_count() : 1;
        if (three > 0 && (three >= two || pairs <= three * sms)) f.nb = 3, f.resident = three;
    }
    /* b47's kernel of the form readied here, where the workspace is sized (before any capture),
     * not first at a launch */
    if (f.nb && mi8b_paged_rkv_on()) (void)pm_resident_of(hd, f.rw, f.nb, f.pk, true);
    return f;
}
extern "C" int mi8b_attn_paged_buffers(int64_t hd, int64_t G, int64_t pairs) {
    return hd == 64 || hd == 128 ? pm_form_for(hd, G, pairs).nb : 0;
}
static uint64_t g_ring3_launches, g_packed_launches;
extern "C" uint64_t mi8b_attn_paged_ring3_launches(void) { return g_ring3_launches; }
extern "C" uint64_t mi8b_attn_paged_packed_launches(void) { return g_packed_launches; }
/* the splits of a launch that runs the tensor-core kernel in form f (mma) or the scalar one */
static int pg_launch_splits(int64_t T, int64_t max_kv, int64_t Hkv, const pm_form *f) {
    const int resident = f && mi8b_paged_wave_on() ? (f->nb ? f->resident : 1) : 0;
    return pg_splits(T, max_kv, Hkv, resident);
}
static int pg_mma_splits(int64_t T, int64_t max_kv, int64_t hd, int64_t Hq, int64_t Hkv) {
    const pm_form f = pm_form_for(hd, Hq / Hkv, T * Hkv);
    return pg_launch_splits(T, max_kv, Hkv, &f);
}

extern "C" int mi8b_attn_paged_splits(int64_t T, int64_t max_kv, int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype) {
    return ctype == MI_TYPE_F16 && (hd == 64 || hd == 128) && mi8b_paged_mma_on() ? pg_mma_splits(T, max_kv, hd, Hq, Hkv)
                                                                                   : pg_launch_splits(T, max_kv, Hkv, NULL);
}

/* the partials of either kernel's splits (which one runs depends on the caches' alignment too) */
extern "C" size_t mi8b_attn_paged_workspace(int64_t T, int64_t max_kv, int64_t hd, int64_t Hq, int64_t Hkv) {
    int S = pg_launch_splits(T, max_kv, Hkv, NULL);
    if (hd == 64 || hd == 128) {
        const int Sm = pg_mma_splits(T, max_kv, hd, Hq, Hkv);
        S = Sm > S ? Sm : S;
    }
    return S == 1 ? 0 : (size_t)T * (size_t)Hq * (size_t)S * ((size_t)hd + 2) * sizeof(float);
}

/* b47's launch-time part (mi8b_attn_paged_rkv): the four's record and the RoPE's parameters */
struct pg_rkv_host {
    const mi8a_rope_kv_rows_io *io;
    int mode, n_rot;
    float freq_base;
};
static uint64_t g_rkv_launches;
extern "C" uint64_t mi8b_attn_paged_rkv_launches(void) { return g_rkv_launches; }

/* every launch of the op: rkv NULL, or b47's four done first (by the tensor-core kernel itself where
 * it runs and the step is one row a sequence, else by b20's kernel launched before it) */
static mi_status pg_launch(void *stream, const float *q, const void *k, const void *v, mi_type ctype, int64_t n_rows,
                           float *o, const int32_t *seqs, int64_t n_seqs, int64_t seqs_len, int64_t T, int64_t block,
                           int64_t max_kv, int64_t hd, int64_t Hq, int64_t Hkv, float scale, void *workspace, void *xh,
                           bool eo, bool *copied, const pg_rkv_host *rkv) {
    if (copied) *copied = false;
    if (!mi8b_attn_paged_supported(hd, Hq, Hkv, ctype) || T < 1 || n_seqs < 1 || n_seqs > INT32_MAX ||
        seqs_len < n_seqs * MI_PAGED_FIELDS || block < 1 || block > INT32_MAX || max_kv < 1 || n_rows < 1 ||
        n_rows > INT32_MAX || T * Hq > INT32_MAX)
        return mi_err(MI_ERR_UNSUPPORTED, "mi8b_attn_paged: hd %lld, Hq %lld, Hkv %lld, %lld rows of %lld sequences, "
                      "block %lld, cache %s of %lld rows", (long long)hd, (long long)Hq, (long long)Hkv, (long long)T,
                      (long long)n_seqs, (long long)block, mi_type_name(ctype), (long long)n_rows);
    if (!q || !k || !v || !o || !seqs) return mi_err(MI_ERR_INVALID, "mi8b_attn_paged: null pointer");
    const int G = (int)(Hq / Hkv);
    const size_t esz = ctype == MI_TYPE_F16 ? 2 : 4;
    const size_t smem_f = ((size_t)G * (size_t)hd + (size_t)G * PG_T + 2 * PG_MAX_G) * sizeof(float) + PG_T * sizeof(int);
    /* VS: F16, hd a multiple of 8 and at most 128, every row 16-byte aligned (cp.async and the
     * K loads), and the V tile fits beside the scores */
    const bool vs = ctype == MI_TYPE_F16 && hd % 8 == 0 && hd <= PG_VS_MAX_HD &&
                    (((uintptr_t)k | (uintptr_t)v) & 15u) == 0 && ((size_t)hd * Hkv * esz) % 16 == 0 &&
                    smem_f + (size_t)PG_T * hd * esz <= PG_SMEM_MAX;
    const size_t smem = (vs ? (size_t)PG_T * hd * esz : 0) + smem_f;
    if (smem > PG_SMEM_MAX) return mi_err(MI_ERR_UNSUPPORTED, "mi8b_attn_paged: %zu bytes of shared memory", smem);
    /* b7: F16 rows 16-byte aligned (as vs asks), hd 64 or 128 */
    const bool mma = vs && (hd == 64 || hd == 128) && mi8b_paged_mma_on();
    const pm_form f = mma ? pm_form_for(hd, G, T * Hkv) : pm_form{false, false, 0, 0};   /* the form the launch takes */
    const int S = pg_launch_splits(T, max_kv, Hkv, mma ? &f : NULL);
    if (S > 1 && !workspace) return mi_err(MI_ERR_INVALID, "mi8b_attn_paged: %d splits and no workspace", S);
    const cudaStream_t st = (cudaStream_t)stream;
    /* b47: in the kernel where it is the tensor-core one over one row a sequence, else b20's first */
    const bool rkv_in = rkv && mma && f.nb && T == n_seqs && rkv->io->N == T &&
                        pm_resident_of(hd, f.rw, f.nb, f.pk, true) > 0;
    if (rkv && !rkv_in)
        MI_TRY(mi8a_rope_kv_rows(stream, rkv->io, ctype, hd, Hq, Hkv, rkv->mode, rkv->n_rot, rkv->freq_base));
    float *part = (float *)workspace;
    const dim3 grid((unsigned)(T * Hkv), (unsigned)S);
#define PG_ARGS part, o, seqs, (int)n_seqs, seqs_len, n_rows, (int)block, max_kv, (int)hd, (int)Hq, (int)Hkv, S, pg_min_split(), scale
    const uint16_t *k16 = (const uint16_t *)k, *v16 = (const uint16_t *)v;
    const float *k32 = (const float *)k, *v32 = (const float *)v;
    const bool wide = hd > PG_T;
    __half *oh = mma ? (__half *)xh : nullptr;   /* b37: the tensor-core kernel and its combine write the copy */
#define PM_ARGS part, o, seqs, (int)n_seqs, seqs_len, n_rows, (int)block, max_kv, (int)Hq, (int)Hkv, S, pg_min_split(), scale, oh, eo
    const bool pdl = mi8b_pdl_on();
    if (mma) {
        if (!f.nb)
            return mi_err(MI_ERR_DEVICE, "mi8b_attn_paged: %zu bytes of shared memory for hd %lld refused",
                          pm_smem(hd, 2), (long long)hd);
        const int nb = f.nb;
        const bool pk = f.pk;
        if (rkv_in) {
            pg_rkv_param<true> rp;
            rp.r.io = *rkv->io;
            rp.r.neox = rkv->mode == MI_ROPE_NEOX;
            rp.r.n_rot = rkv->n_rot;
            rp.r.fq = *mi8a_rope_freqs_for(rkv->freq_base, rkv->n_rot);
            (void)pdl_launch(pdl, pm_kernel<true>(hd, f.rw, nb, pk), grid, dim3(MMA_THREADS), pm_smem(hd, nb), st, q, k16,
                             v16, PM_ARGS, rp);
            g_rkv_launches++;
        } else {
            const pg_rkv_param<false> none = {0};
            (void)pdl_launch(pdl, pm_kernel<false>(hd, f.rw, nb, pk), grid, dim3(MMA_THREADS), pm_smem(hd, nb), st, q,
                             k16, v16, PM_ARGS, none);
        }
        g_ring3_launches += nb == 3;
        g_packed_launches += pk;
    } else if (vs) kernel_attn_paged<uint16_t, true, 1><<<grid, PG_T, smem, st>>>(q, k16, v16, PG_ARGS);
    else if (ctype == MI_TYPE_F16 && !wide) kernel_attn_paged<uint16_t, false, 1><<<grid, PG_T, smem, st>>>(q, k16, v16, PG_ARGS);
    else if (ctype == MI_TYPE_F16) kernel_attn_paged<uint16_t, false, 2><<<grid, PG_T, smem, st>>>(q, k16, v16, PG_ARGS);
    else if (!wide) kernel_attn_paged<float, false, 1><<<grid, PG_T, smem, st>>>(q, k32, v32, PG_ARGS);
    else kernel_attn_paged<float, false, 2><<<grid, PG_T, smem, st>>>(q, k32, v32, PG_ARGS);
#undef PG_ARGS
#undef PM_ARGS
    MI_CU_CHECK_LAUNCH("kernel_attn_paged");
    if (S > 1) {
        (void)pdl_launch(mma && pdl, kernel_attn_paged_combine, dim3((unsigned)(T * Hq)), dim3(128), 0, st, part, o,
                         (int)hd, S, oh, (int)Hq, eo);
        MI_CU_CHECK_LAUNCH("kernel_attn_paged_combine");
    }
    if (copied) *copied = oh != nullptr;
    return MI_OK;
}
extern "C" mi_status mi8b_attn_paged_f16(void *stream, const float *q, const void *k, const void *v, mi_type ctype,
                                         int64_t n_rows, float *o, const int32_t *seqs, int64_t n_seqs,
                                         int64_t seqs_len, int64_t T, int64_t block, int64_t max_kv, int64_t hd,
                                         int64_t Hq, int64_t Hkv, float scale, void *workspace, void *xh, bool eo,
                                         bool *copied) {
    return pg_launch(stream, q, k, v, ctype, n_rows, o, seqs, n_seqs, seqs_len, T, block, max_kv, hd, Hq, Hkv, scale,
                     workspace, xh, eo, copied, NULL);
}
extern "C" mi_status mi8b_attn_paged_rkv(void *stream, const mi8a_rope_kv_rows_io *io, int mode, int n_rot,
                                         float freq_base, const float *q, const void *k, const void *v, mi_type ctype,
                                         int64_t n_rows, float *o, const int32_t *seqs, int64_t n_seqs,
                                         int64_t seqs_len, int64_t T, int64_t block, int64_t max_kv, int64_t hd,
                                         int64_t Hq, int64_t Hkv, float scale, void *workspace, void *xh, bool eo,
                                         bool *copied) {
    if (copied) *copied = false;
    if (!io || !io->q || !io->k || !io->v || !io->pos || !io->slots || io->q_rope != q || io->cache_k != k || io->cache_v != v ||
        io->N != T || io->n_rows_k != n_rows || io->n_rows_v != n_rows || !mi8a_rope_kv_supported(hd, Hq, Hkv, n_rot, mode, ctype))
        return mi_err(MI_ERR_INVALID, "mi8b_attn_paged_rkv: the step's RoPEs and scatters are not this attention's "
                      "(%lld rows, hd %lld, n_rot %d, cache %s)", (long long)T, (long long)hd, n_rot, mi_type_name(ctype));
    const pg_rkv_host rkv = {io, mode, n_rot, freq_base};
    return pg_launch(stream, q, k, v, ctype, n_rows, o, seqs, n_seqs, seqs_len, T, block, max_kv, hd, Hq, Hkv, scale,
                     workspace, xh, eo, copied, &rkv);
}
extern "C" mi_status mi8b_attn_paged(void *stream, const float *q, const void *k, const void *v, mi_type ctype,
                                     int64_t n_rows, float *o, const int32_t *seqs, int64_t n_seqs, int64_t seqs_len,
                                     int64_t T, int64_t block, int64_t max_kv, int64_t hd, int64_t Hq, int64_t Hkv,
                                     float scale, void *workspace) {
    return mi8b_attn_paged_f16(stream, q, k, v, ctype, n_rows, o, seqs, n_seqs, seqs_len, T, block, max_kv, hd, Hq, Hkv,
                               scale, workspace, NULL, false, NULL);
}

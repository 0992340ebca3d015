/* Phase 8b: many sequences in one step on the device. The C face of its kernels (extern "C"
 * launchers) and its install. Two graph ops of common/graph/graph.h get CUDA kernels, so a
 * batch's KV pool lives on the device and a step of many sequences runs there whole:
 *   MI_OP_KV_SCATTER  kv_scatter.cu   new K/V rows to their cache rows (7b's KV store conversion)
 *   MI_OP_ATTN_PAGED  attn_paged.cu   each row over its own sequence's positions, through the
 *                                     sequence's block table
 * docs/PHASE8B.md. Plain C. */
#ifndef MI_BATCH8B_H
#define MI_BATCH8B_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "common/core/mi_err.h"
#include "common/quant/mi_types.h"
#include "phase8a_decode/decode8a.h"   /* mi8a_run_seg */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- kv_scatter.cu: x F32 [row, N] -> cache rows slots[0 .. N-1] of a cache [row, n_rows]
 * (F16 by mi_f32_to_f16, the conversion of 7b's KV store, or an F32 copy): a batched cache
 * holds a session's bits. A slot outside [0, n_rows) writes nothing (the host checks the
 * slots first where it has them: install8b_attn.c). */
mi_status mi8b_kv_scatter(void *stream, const float *x, void *cache, mi_type ctype, int64_t row, int64_t N,
                          const int32_t *slots, int64_t n_rows);

/* ---- attn_paged.cu: q F32 [hd*Hq, T] -> o F32 [hd*Hq, T]. Row r of sequence s (the table
 * seqs I32 [seqs_len] of graph.h: per sequence first row, rows, n_past, offset of its block
 * table) attends over positions 0 .. n_past_s + (r - first_s) of s, position p at cache row
 * table_s[p / block] * block + p % block of K/V [hd*Hkv, n_rows] (F16 | F32). One block per
 * (row, KV head, split): the group's G query heads over a split of the row's keys, tiles of
 * MI8B_PG_T keys, online softmax; split partials merged per (row, head) in split order. Fixed
 * orders: run to run bit-identical; within the attention bound of docs/NUMERICS.md of the
 * CPU. A row whose sequence entry or block table is out of range gets NaN (never an
 * out-of-bounds read). */
#define MI8B_PG_T 128            /* keys per tile, threads per block */
#define MI8B_PG_MAX_G 8          /* query heads a KV head (GQA group): Qwen2.5 7, Llama 3 4 */
#define MI8B_PG_MAX_SPLITS 32
/* keys a split takes at least: a few sequences of a few hundred positions (the B = 1 and 4
 * steps) still fill the GPU; a split shorter than a tile runs its one tile part-full */
#define MI8B_PG_MIN_SPLIT 32
bool mi8b_attn_paged_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype);
/* b7 (install8b_attn.c, read at each launch): F16 caches of hd 64 or 128 on the tensor cores */
bool mi8b_paged_mma_on(void);
/* b17 (install8b_attn.c, read at each launch): the tensor-core kernel's splits fill one wave of the
 * blocks a multiprocessor holds, not four blocks a multiprocessor */
bool mi8b_paged_wave_on(void);
/* b27 (install8b_attn.c, read at each launch): the tensor-core kernel looks up a tile's cache rows once
 * a key (32-bit, shuffled to the copies), not once a 16-byte copy in 64-bit arithmetic */
bool mi8b_paged_rows_once_on(void);
/* b43 (install8b_attn.c, read at each launch): the tensor-core kernel's tiles through three buffers
 * (two loading while one is used), not two, where three keep the blocks a multiprocessor */
bool mi8b_paged_ring3_on(void);
/* b44 (install8b_attn.c, read at each launch): the tensor-core kernel with q's and P's two f16 parts as
 * one mma's upper and lower rows (8a's d34 layout) for groups of 8 heads or fewer */
bool mi8b_paged_packed_on(void);
/* the tile buffers the tensor-core kernel takes for heads of hd (64 or 128) in groups of G over
 * a step's `pairs` (rows x KV heads) as the switches stand (3: b43's, 2, 0: no form fits this
 * device; 0 for other hd), and its launches with three so far (for the gate) */
int mi8b_attn_paged_buffers(int64_t hd, int64_t G, int64_t pairs);
uint64_t mi8b_attn_paged_ring3_launches(void);
/* its launches in b44's packed form so far (for the gate) */
uint64_t mi8b_attn_paged_packed_launches(void);
/* Splits of a row's keys for rows of 16-byte aligned caches of type ctype: the scalar kernel's
 * enough blocks for about four a multiprocessor; b7's tensor-core kernel with b17 as many as fill
 * one wave of it; none narrower than MI8B_PG_MIN_SPLIT keys (MINFER_PAGED_MIN_SPLIT) when the
 * longest sequence is full; 1 for steps with rows enough. */
int mi8b_attn_paged_splits(int64_t T, int64_t max_kv, int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype);
size_t mi8b_attn_paged_workspace(int64_t T, int64_t max_kv, int64_t hd, int64_t Hq, int64_t Hkv);
mi_status mi8b_attn_paged(void *stream, const float *q, const void *k, const void *v, mi_type ctype, int64_t n_rows,
                          float *o, const int32_t *seqs, int64_t n_seqs, int64_t seqs_len, int64_t T, int64_t block,
                          int64_t max_kv, int64_t hd, int64_t Hq, int64_t Hkv, float scale, void *workspace);
/* item b37: the same with the output's f16 copy for the matmul after it (o's) written into xh in
 * form eo (mi8b_f16s_x_form) where the tensor-core kernel runs (b7), by it or its combine: each
 * output rounded as the copy kernel rounds it. *copied: whether it was. */
mi_status mi8b_attn_paged_f16(void *stream, const float *q, const void *k, const void *v, mi_type ctype, int64_t n_rows,
                              float *o, const int32_t *seqs, int64_t n_seqs, int64_t seqs_len, int64_t T, int64_t block,
                              int64_t max_kv, int64_t hd, int64_t Hq, int64_t Hkv, float scale, void *workspace,
                              void *xh, bool eo, bool *copied);

/* item b47: a decode step's (one row a sequence) attention doing the step's q and k RoPE and its K
 * and V scatters first (b20's four, whose record io is), where the tensor-core kernel runs: each
 * block rotates its row's q heads into shared memory, and the split holding the row's own key
 * stores its rotated k and its v to the caches, before the tiles that read them. Elsewhere b20's
 * kernel runs first. The same values as b20 followed by the attention: the same bits. q is the
 * q RoPE's output, which the fused form neither writes nor reads (nor k's RoPE output). */
bool mi8b_paged_rkv_on(void);
mi_status mi8b_attn_paged_rkv(void *stream, const mi8a_rope_kv_rows_io *io, int mode, int n_rot, float freq_base,
                              const float *q, const void *k, const void *v, mi_type ctype, int64_t n_rows, float *o,
                              const int32_t *seqs, int64_t n_seqs, int64_t seqs_len, int64_t T, int64_t block,
                              int64_t max_kv, int64_t hd, int64_t Hq, int64_t Hkv, float scale, void *workspace,
                              void *xh, bool eo, bool *copied);
/* its launches with the four inside the kernel so far (for the gate) */
uint64_t mi8b_attn_paged_rkv_launches(void);
/* b47's pass (fusion8b.c): whether the dispatch gives a V scatter marked MI_RKV_ROWS_ATTN (store)
 * and the paged attention after it holding the four's inputs (attn) b47's kernels */
struct mi_tensor;
bool mi8b_rkv_attn_takes(const struct mi_tensor *store, const struct mi_tensor *attn);

/* ---- gemm_int8_split.cu: y [M, N] = W [K, M] @ x [K, N] (+ bias) for 9 <= N <= 64 (a batch's
 * decode rows), 7e's int8 tensor-core tile with K split over MI8B_SPLIT_MAX blocks at most so
 * the grid fills the GPU, the parts summed in order by a second kernel (item b1). Supported
 * only where a split is needed (mi8b_gemm_split_count > 1). workspace: x quantized, then the
 * parts. Within 7b's matmul bound; bit-identical run to run. */
#define MI8B_SPLIT_MAX 32
#define MI8B_SPLIT_MAX_N 64
int mi8b_gemm_split_count(mi_type wt, int64_t K, int64_t M, int64_t N);
bool mi8b_gemm_split_supported(mi_type wt, int64_t K, int64_t M, int64_t N);
size_t mi8b_gemm_split_workspace(mi_type wt, int64_t K, int64_t M, int64_t N);
mi_status mi8b_gemm_split(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                          int64_t K, int64_t M, int64_t N, void *workspace);

/* ---- gemm_int8_stream.cu: y [M, N] = W [K, M] @ x [K, N] (+ bias) for MI8B_STREAM_MIN_N <= N <=
 * MI8B_STREAM_MAX_N (a batch's decode rows), Q4_K / Q6_K / Q4_0 / Q8_0 weights: bands of 128
 * weight rows x every token, the band's raw weight bytes streamed through a cp.async ring in
 * shared memory and unpacked per warp into int8 mma fragments (item b3); K split over blocks
 * (at most MI8B_SPLIT_MAX, parts summed in order) when the bands are too few for the GPU.
 * stages: the ring's, 3, or 2 at 33..64 tokens (item b5: two blocks a multiprocessor).
 * workspace: x quantized, then the parts. Within 7b's matmul bound; bit-identical run to run. */
#define MI8B_STREAM_MIN_N 9
#define MI8B_STREAM_MAX_N 64
/* the fewest rows b6's and b12's kernels take (rows past N are neither loaded nor written, in
 * tiles of 16); the dispatch gives them 2..8 (and b6 9..16) rows only with item b21 */
#define MI8B_F16_MIN_N 2
bool mi8b_gemm_stream_supported(mi_type wt, int64_t K, int64_t M, int64_t N, int stages);
int mi8b_gemm_stream_splits(mi_type wt, int64_t K, int64_t M, int64_t N, int stages);
size_t mi8b_gemm_stream_workspace(mi_type wt, int64_t K, int64_t M, int64_t N, int stages);
mi_status mi8b_gemm_stream(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                           int64_t K, int64_t M, int64_t N, int stages, void *workspace);

/* ---- gemm_f16_stream.cu: the same product for Q4_K / Q6_K weights with f16 tensor cores (item
 * b6): b3's bands and ring, each warp dequantizing its rows into f16 mma fragments, f16
 * activations, float accumulators over a band's K (no per-unit scaling). K a multiple of 256.
 * The band x super-block units are cut into P runs, one block each: stream-K (P resident
 * blocks, runs of equal length across band edges) where whole bands would leave a partial last
 * wave, else a K split of whole-band chunks; a band cut between runs is summed from its pieces
 * in unit order by a second kernel. Not in 7b's int8 tier: the activations are rounded to f16
 * instead of 8-bit codes, so it is compared with the exact product (docs/NUMERICS.md).
 * workspace: x in f16, then two slots of 128 x N floats a run when a band is cut. Bit-identical
 * run to run (the plan is fixed by the shape and the device). blocks: P (0 when not
 * supported); split: 0 for stream-K, else the K split S (1: whole bands), -1 when not supported. */
bool mi8b_gemm_f16s_supported(mi_type wt, int64_t K, int64_t M, int64_t N);
int mi8b_gemm_f16s_blocks(mi_type wt, int64_t K, int64_t M, int64_t N);
int mi8b_gemm_f16s_split(mi_type wt, int64_t K, int64_t M, int64_t N);
/* b48: cap[S], S = 2..8: the blocks resident at once when N rows of wt run a K split of S in
 * b33's clusters (0: that split takes no cluster sums here); cap[0], cap[1] 0 */
void mi8b_gemm_f16s_cluster_blocks(mi_type wt, int64_t N, int64_t cap[9]);
size_t mi8b_gemm_f16s_workspace(mi_type wt, int64_t K, int64_t M, int64_t N);
mi_status mi8b_gemm_f16s(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                         int64_t K, int64_t M, int64_t N, void *workspace);
/* item b36: y = res + W @ x (MI_OP_MATMUL_ADD: the residual add after the matmul), res [N][M] added
 * where the outputs are stored (the wgmma kernel's whole bands and cluster sums, the fixup), else
 * by 7b's add after b6's matmul: the same float addition as the add node's, so its bits */
mi_status mi8b_gemm_f16s_add(void *stream, mi_type wt, const void *w, const float *x, const float *res, float *y,
                             int64_t K, int64_t M, int64_t N, void *workspace);
/* x's f16 copy left in the workspace by the op that makes x (items b34, b35), for the next node's
 * b6 or b22 matmul of x to read instead of converting x itself (b30's rule, f16s_x_ready): its
 * form at N rows (true: b22's evens-then-odds, which b22 takes where its kernels fit both Q4_K
 * and Q6_K; false: b6's pairs), its bytes (K x N halves, the workspace's first), and the record
 * the producer leaves once its launches went through */
bool mi8b_f16s_x_form(int64_t N);
size_t mi8b_f16s_x_bytes(int64_t K, int64_t N);
void mi8b_f16s_x_made(const float *x, const void *ws, int64_t K, int64_t N, bool wg);
/* item b40: a run of such Q4_K matmuls of one x (the pass's d13 marks: q, k and a Q4_K v; gate and
 * up) in one launch of b22's kernel (b6's where b22's does not run), one plan over the run's bands (seg: each matmul's weights, bias,
 * output and rows; ws_bytes: the workspace the split holds, which the run's partials must fit),
 * else its matmuls one by one. In b6's f16 tier, not bit for bit the matmuls alone (the run's
 * plan cuts K in other chunks); bit-identical run to run. run_launches: its one-launch runs so far
 * (for the gate). x_carry: a node of the run that launches nothing keeps b30's record of x's
 * copy for the run's last node. */
mi_status mi8b_gemm_f16s_run(void *stream, mi_type wt, const mi8a_run_seg *seg, int n, const float *x, int64_t K,
                             int64_t N, void *workspace, size_t ws_bytes, bool fixup_next);
/* item b42: fixup_next (a gate/up run the SwiGLU after it takes: 8b's pass) leaves the run's cut
 * bands to that SwiGLU (mi8b_swiglu_fixup_f16) instead of launching the fixup, its partials past
 * the SwiGLU's f16 copy (the node's workspace holds that copy more); fixup_flush launches a fixup
 * left for g and u as the run would have (the SwiGLU's path without the fused kernel) */
bool mi8b_f16s_fixup_next_on(void);
mi_status mi8b_f16s_fixup_flush(void *stream, const float *g, const float *u);
uint64_t mi8b_gemm_f16s_run_launches(void);
bool mi8b_gemm_f16s_run_supported(mi_type wt, int64_t N);   /* one launch at N rows (Q4_K, in the form each takes) */
/* item b49 (gemm_f16_stream.cu; install8b.c's switch, read at each call): matmuls 0 .. n4 - 1
 * Q4_K and n4 .. n - 1 Q6_K of one x (the 7B's q, k and a Q6_K v) in one launch of the wgmma
 * kernel, each block in its band's format, under Q4_K's K split plan over the run's bands; where
 * it cannot (b49 off, 17..32 rows, stream-K, the workspace) the Q4_K ones as their b40 run, then
 * each Q6_K one alone. 8b's pass marks such runs where b49 and b40 are on
 * (mi8b_f16s_mixed_on).
 * mixed_launches: its one-launch runs so far. */
mi_status mi8b_gemm_f16s_run_mixed(void *stream, const mi8a_run_seg *seg, int n4, int n, const float *x, int64_t K,
                                   int64_t N, void *workspace, size_t ws_bytes);
uint64_t mi8b_gemm_f16s_mixed_launches(void);
bool mi8b_f16s_mixed_on(void);   /* b49 and b40 on */
bool mi8b_gemm_f16s_mixed_supported(int64_t N);   /* one launch at N rows here (b49 on, both formats' wgmma forms) */
void mi8b_gemm_f16s_mixed_ready(void);            /* its one-time device checks, where workspaces are sized */
/* b49 in graphs (install8b.c): whether the dispatch gives a run's last Q4_K node k the defer
 * role's kernel and the Q6_K matmul v after it the mixed run's last (probes with the roles set:
 * 8b's pass) */
bool mi8b_mixed_run_takes(const struct mi_tensor *k_defer, const struct mi_tensor *v_last);
/* b40's fewest rows: a step of 16 rows or fewer (small batches, a prompt's chunks such as gate_7c's)
 * keeps each matmul's own plan, so its graph's bits do not depend on the fusion passes */
#define MI8B_RUN_MIN_N 17
void mi8b_f16s_x_carry(const float *x, const void *ws, int64_t K, int64_t N);
/* b40 (install8b.c, read at each call) */
bool mi8b_f16s_run_on(void);
/* ---- gemm_f16_small.cu: the same product for Q4_0 (and, item b16, Q8_0) weights at K <=
 * MI8B_SMALL_MAX_K (item b12):
 * one launch after x's f16 copy, a block a band of 16..64 weight rows over the whole K and every
 * token in shared memory, its warps' K parts summed in order in the block. b6's f16 tier
 * (docs/NUMERICS.md); bit-identical run to run. workspace: x in f16. */
#define MI8B_SMALL_MAX_K 1024
#define MI8B_SMALL_MAX_M (1 << 24)   /* rows of a launch (its bands count in an int) */
bool mi8b_gemm_f16_small_supported(mi_type wt, int64_t K, int64_t M, int64_t N);
size_t mi8b_gemm_f16_small_workspace(mi_type wt, int64_t K, int64_t M, int64_t N);
mi_status mi8b_gemm_f16_small(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                              int64_t K, int64_t M, int64_t N, void *workspace);
/* item b13: the rows of up to MI8A_RUN_MAX such matmuls of one x in one launch (x's f16 copy made
 * once; the 0.5B's q, k, v and its gate, up), at most MI8B_SMALL_MAX_M rows in all, the workspace
 * of one of them. The rows a band (16, 32 or 64: mi8b_gemm_f16_small_rows) follow from the run's
 * rows; a matmul's outputs depend only on them, so they equal its launch alone bit for bit where
 * that takes the same. */
mi_status mi8b_gemm_f16_small_run(void *stream, mi_type wt, const mi8a_run_seg *seg, int n, const float *x, int64_t K,
                                  int64_t N, void *workspace);
int mi8b_gemm_f16_small_rows(mi_type wt, const mi8a_run_seg *seg, int n, int64_t K, int64_t N);
/* item b24: the same run with x = rms_norm(x0, nw, eps): the norm written straight into x's f16
 * copy (norm_f16_exact.cu: one launch for the norm and the copy), the same halves as the norm
 * kernel followed by the copy, so the same outputs bit for bit */
mi_status mi8b_gemm_f16_small_run_norm(void *stream, mi_type wt, const mi8a_run_seg *seg, int n, const float *x0,
                                       const float *nw, float eps, int64_t K, int64_t N, void *workspace);
/* norm_f16_exact.cu: rows x [rows][G] RMS-normalized (weight w [G], MI_OP_RMS_NORM's canonical
 * arithmetic) into xh as kernel_act_f16 writes x's f16 copy in pairs; G % 4 == 0 and at most
 * MI8B_NORM_F16_MAX_K (the row is staged in 48 KB of shared memory) */
#define MI8B_NORM_F16_MAX_K 12280
mi_status mi8b_rms_norm_f16_pairs(void *stream, const float *x, const float *w, float eps, void *xh, int64_t G,
                                  int64_t rows);
/* item b34: the same norm written to y as 7e's kernel writes it and, beside it, into xh as x's f16
 * copy in form eo (mi8b_f16s_x_form); G % 16 == 0 and at most MI8B_NORM_F16_MAX_K */
mi_status mi8b_rms_norm_y_f16(void *stream, const float *x, const float *w, float eps, float *y, void *xh, int64_t G,
                              int64_t rows, bool eo);
/* item b35 (swiglu_f16_exact.cu): y = silu (g) u over F x N elements (7b's SwiGLU, mi_canon_swiglu) and,
 * beside it, y's f16 copy in form eo into xh; rows of F elements, F % 16 == 0 */
mi_status mi8b_swiglu_y_f16(void *stream, const float *g, const float *u, float *y, void *xh, int64_t F, int64_t N,
                            bool eo);
/* item b42: the same, where g and u are a run's outputs whose cut bands the run left (fixup_next):
 * each cut value summed from the run's partials as its fixup sums it, the others read; the same
 * values, so the same y. MI_ERR_UNSUPPORTED (nothing launched) where no run left g and u or the
 * operands are not 16-byte aligned (the record kept: fixup_flush); launches: the fused kernel's so
 * far (for the gate) */
mi_status mi8b_swiglu_fixup_f16(void *stream, const float *g, const float *u, float *y, void *xh, int64_t F, int64_t N,
                                bool eo);
uint64_t mi8b_swiglu_fixup_launches(void);
/* b35's kernel takes this SWIGLU node (its shapes) */
struct mi_tensor;
struct mi_graph;
struct mi_backend;
bool mi8b_swiglu_f16_takes(const struct mi_tensor *n);
/* fusion8b.c: 8b's pass (b42's marks), registered with 7c's session pass after 8a's */
int mi8b_fuse_batch(struct mi_graph *g, struct mi_backend *cuda);
/* item b15: the same kernel for K past MI8B_SMALL_MAX_K (the 0.5B's down, K = 4864): K split into
 * slices of at most 28 units (896), a block a slice of x and bands of rows, the slices' partial
 * sums added in slice order by a second kernel (then the bias). workspace: x in f16, the partials. */
#define MI8B_KSPLIT_MAX_K 32768
bool mi8b_gemm_f16_ksplit_supported(mi_type wt, int64_t K, int64_t M, int64_t N);
size_t mi8b_gemm_f16_ksplit_workspace(mi_type wt, int64_t K, int64_t M, int64_t N);
mi_status mi8b_gemm_f16_ksplit(void *stream, mi_type wt, const void *w, const float *x, const float *bias, float *y,
                               int64_t K, int64_t M, int64_t N, void *workspace);
/* b19 (install8b.c, read at each launch): the small-K kernel converts x's float slices to f16
 * itself (no x copy kernel before it), at up to MI8B_SMALL_XCONV_MAX_N rows: every block converts
 * its slices of all the rows, so the 0.5B's step lost 3% to it at 32 rows and 10% at 64
 * (results/notes/PHASE8B.md) */
#define MI8B_SMALL_XCONV_MAX_N 16
bool mi8b_small_xconv_on(void);
/* b16 (install8b.c, read at each call): the small-K kernel takes Q8_0 weights too */
bool mi8b_small_q8_on(void);
/* b21 (install8b.c, read at each support check): b6's and b12's kernels from 2 rows, and a
 * batch's FFN_SWIGLU at 2..8 rows on them */
bool mi8b_f16_small_n_on(void);
/* b11 (install8b.c, read at each launch): a warp takes every token and half a stage's units */
bool mi8b_f16s_khalf_on(void);
/* b22 (install8b.c, read at each launch): b6's matmul on wgmma where the build and device have it */
bool mi8b_f16s_wgmma_on(void);
/* b25 (install8b.c, read at each launch): b22's scales computed by each quad for its rows and
 * shared by shuffles (no block-wide pass and barrier), Q4_K rows copied as whole chunks */
bool mi8b_f16w_quad_scales_on(void);
/* b28 (install8b.c, read at each launch): b25's stage fed by bulk tensor copies (TMA) on one
 * mbarrier a slot: the activations always, Q4_K weights of a 16-byte aligned tensor too */
bool mi8b_f16w_tma_on(void);
/* b29 (install8b.c, read at each launch): 8b's kernels of a node the pass flagged MI_T_EARLY
 * (every node of a batched step) launched as programmatic dependents, as 8a's d10 launches the
 * lower phases' small kernels (phase7a_skeleton/cuda_pdl.cuh) */
bool mi8b_pdl_on(void);
/* b30 (install8b.c, read at each call): b6's and b22's matmuls of one x in consecutive nodes
 * convert x to f16 once (gemm_f16_stream.cu, f16s_x_ready) */
bool mi8b_x_reuse_on(void);
/* b31 (install8b.c, read at each launch): with b28, Q6_K weight rows by one bulk copy a row */
bool mi8b_f16w_q6_bulk_on(void);
/* b32 (install8b.c, read at each launch): with b28, the products of a stage run on while the
 * next one dequantizes */
bool mi8b_f16w_overlap_on(void);
/* b33 (install8b.c, read at each call): with b28, a K split's band summed in its cluster */
bool mi8b_f16w_cluster_sum_on(void);
/* b48 (install8b.c, read at each plan): the K split's choice counts the blocks resident at once
 * by whole clusters where b33 sums the split's bands */
bool mi8b_plan_clusters_on(void);
/* b39 (install8b.c, read at each launch): with b32 and Q4_K weights by the bulk copy, a stage's
 * slot refilled once its 16 warps arrived on its empty mbarrier, no block-wide barrier a stage */
bool mi8b_f16w_empty_bars_on(void);
uint64_t mi8b_f16w_empty_bars_launches(void);   /* its kernel's launches so far (for the gate) */

/* The host's check of a step's tables (the CPU ops' rules): MI_OK, or MI_ERR_INVALID naming
 * the first bad entry. slots: every one in [0, n_rows). seqs: every sequence's rows inside
 * [0, T), n_past >= 0, n_kv <= max_kv, its table inside seqs and every block it uses inside
 * the cache. */
mi_status mi8b_check_slots(const char *name, const int32_t *slots, int64_t N, int64_t n_rows);
mi_status mi8b_check_seqs(const char *name, const int32_t *seqs, int64_t n_seqs, int64_t seqs_len, int64_t T,
                          int64_t block, int64_t max_kv, int64_t n_rows);

void mi_phase8b_install(void);

/* ---- topk.cu: MI_OP_TOPK, x F32 [V, N], scale F32 [N] -> y F32 [2K, N] (graph.h's rule, bit
 * for bit the CPU's), item b4 ---- */
#define MI8B_TOPK_MAX 64
bool mi8b_topk_supported(int64_t V, int64_t K);
mi_status mi8b_topk(void *stream, const float *x, const float *scale, float *y, int64_t V, int64_t K, int64_t N);

#ifdef __cplusplus
}
#endif
#endif

/* Phase 8a: decode at the memory roofline. The C face of its kernels (extern "C" launchers),
 * its fusion pass and its install. Each kernel is one more candidate for a fused op in the
 * CUDA dispatch (phase7a_skeleton/cuda_dispatch.h), switched by an item:
 *   d1  RMS norm folded into the matmuls it feeds (MI_OP_NORM_MATMUL, MI_OP_NORM_FFN_SWIGLU)
 *   d2  residual add folded into the matmul before it (MI_OP_MATMUL_ADD)
 *   d3  greedy argmax on the device (MI_OP_ARGMAX)
 *   d4  one-token attention split over the KV sequence (MI_OP_ATTN at depth)
 *   d6  8a's kernels launched as programmatic dependents: each lets the next one launch while
 *       it runs, and issues its weight loads before it waits for the one before it
 *   d8  RoPE a thread per pair, the inverse frequencies from the host (MI_OP_ROPE)
 *   d10 the small kernels of lower phases launched as programmatic dependents too
 *   d7  a run of one-token matmuls of one x on 7b's kernel quantizes x once (MI_OP_MATMUL
 *       marked by the pass, mi_matmul_shared_x)
 *   d11 one-token Q6_K matmuls, with or without the residual add, on streaming rows
 *       (MI_OP_MATMUL, MI_OP_MATMUL_ADD)
 *   d12 the long-row one-token Q4_K and Q6_K matmuls in one block of 32 warps an SM
 *   d13 a run of one-token matmuls of one x in one launch (MI_OP_MATMUL marked by the pass)
 *   d14 a step's RoPE of q and k and its K and V stores in one launch (MI_OP_ROPE and
 *       MI_OP_KV_STORE marked by the pass, mi_rope_kv_role)
 *   d15 the residual add after 7e's staged one-token matmul as its bias (MI_OP_MATMUL_ADD)
 *   d17 the norm before a d13 run in the run's kernel (MI_OP_NORM_MATMUL marked by the pass)
 *   d23 the norm and x's quantization in every block of 7e's staged FFN (MI_OP_NORM_FFN_SWIGLU)
 *   d29 that FFN writes its output's quantized row too, and the down projection after it
 *       (d15's MI_OP_MATMUL_ADD) reads it instead of launching 7b's quantizer
 *   d30 d14's RoPE and KV stores done by d20's attention after them (MI_OP_ATTN marked)
 *   d31 d20's attention writes its output's quantized row too, and the o projection after it
 *       (d2's MI_OP_MATMUL_ADD) reads it instead of quantizing x in each block
 *   d39-d42 one-token Q4_K and Q6_K matmuls in one block of 32 warps an SM, their rows spread
 *       over every SM (the fused gate/up, the downs, o, the q/k/v runs)
 *   d43 the norm folded into a one-token Q6_K matmul (MI_OP_NORM_MATMUL: the 7B's v, the head)
 *   d44 the Q6_K downs quantize x in the block (no quantizer launch before them)
 * The d-items without a line here (d5, d9, d16, d18, d19, d24-d28, d36, d38) were measured and
 * dropped (results/notes/PHASE8A.md); d20-d22, d32-d35 and d37 are attention and row details
 * listed with their kernels below and in docs/PHASE8A.md. The fused nodes exist only where a
 * candidate accepts them (fusion8a.c asks the CUDA backend's supports() before it rewrites a
 * node); MINFER_PERF_OFF=d1,d2 leaves the graph as 7e runs it.
 * docs/PHASE8A.md. Plain C. */
#ifndef MI_DECODE8A_H
#define MI_DECODE8A_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "common/core/mi_err.h"
#include "common/quant/mi_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- matvec_fused.cu: one token, any quantized format with a device dot (7b's):
 * y [M] = r [M] + (W [K, M] @ x' + bias), x' = rms_norm(x, nw, eps) when nw, else x; r and
 * bias may be NULL. Rows read 7b's way (warp per row), so it takes exactly the shapes 7b's
 * kernel runs unfused (K < MI8A_FUSED_MAX_K: 7e's staged kernel reads longer rows faster) and
 * M <= MI8A_FUSED_MAX_M (every block quantizes x again: an output head of 150k rows pays that
 * more often than it saves a launch). Bit-identical to 7b's matmul after 7b's RMS norm. */
#define MI8A_FUSED_MAX_K 2048
#define MI8A_FUSED_MAX_M 16384
bool mi8a_matvec_fused_supported(mi_type wt, int64_t K, int64_t M);
mi_status mi8a_matvec_fused(void *stream, mi_type wt, const void *w, const float *x, const float *nw, float eps,
                            const float *bias, const float *r, float *y, int64_t K, int64_t M);
/* item d31: the same rows on x already quantized (xq: 7b's quantizer's row, 4-byte aligned, as
 * the attention before it writes it), no norm; the same bits as from x */
mi_status mi8a_matvec_fused_qx(void *stream, mi_type wt, const void *w, const void *xq, const float *bias,
                               const float *r, float *y, int64_t K, int64_t M);

/* ---- matvec_q4k_fused_exact.cu: the same for Q4_K on 7e's streaming kernel (K % 256 == 0,
 * K <= 41,216; with the norm, whose sum reads x from shared memory, K <= 8,960), bit-identical to 7e's _qx forms; and the fused FFN head on norm-folded x:
 * y [F] = silu(Wg @ x') * (Wu @ x'). 16-byte aligned weights, x and nw (else the plain-7b-order
 * kernel above for the matmul; the FFN form needs them: its supports() checks the weights). */
bool mi8a_matvec_q4k_fused_supported(mi_type wt, int64_t K, bool norm);
mi_status mi8a_matvec_q4k_fused(void *stream, mi_type wt, const void *w, const float *x, const float *nw, float eps,
                                const float *bias, const float *r, float *y, int64_t K, int64_t M);
mi_status mi8a_ffn_q4k_fused(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, const float *nw,
                             float eps, float *y, int64_t K, int64_t F);

/* ---- ffn_staged_norm_exact.cu, item d23: the fused FFN head on norm-folded x with 7e's
 * staged rows, y [F] = swiglu(Wg @ x', Wu @ x'), x' = rms_norm(x, nw, eps), the norm and x's
 * quantization done in every block (formats of 32-element activation blocks: Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0), launched as a programmatic dependent (d6); bit-identical to 7e's RMS norm, 7b's
 * quantizer and 7e's staged FFN. x is copied into each block's shared memory (16-byte loads
 * where aligned), so the shared memory of a block's rows, the quantized x and x must fit
 * QX_SMEM_MAX; x and nw need 4-byte alignment only. */
/* yq (item d29, else NULL): y's row quantized as well, in 7b's quantizer's bytes for a weight of
 * 32-element blocks ((F / 32) 36-byte blocks, 4-byte aligned; y 16-byte aligned; F % 32 == 0),
 * so the down projection after it launches no quantizer; the kernel then takes 32 rows a block */
bool mi8a_ffn_staged_norm_supported(mi_type wt, int64_t K, int64_t F, bool yq);
mi_status mi8a_ffn_staged_norm(void *stream, mi_type wt, const void *wg, const void *wu, const float *x, const float *nw,
                               float eps, float *y, void *yq, int64_t K, int64_t F);

/* ---- matvec_q4k_fused_exact.cu, item d13: the rows of up to MI8A_RUN_MAX one-token Q4_K
 * matmuls of one x (the 7B's q, k and, where Q4_K, v) in one launch: y_i [M_i] = W_i @ x + b_i,
 * x quantized once a block for all; each output equals mi8a_matvec_q4k_fused's bit for bit. */
#define MI8A_RUN_MAX 4
typedef struct {
    const void *w;        /* W_i [K, M_i], 16-byte aligned */
    const float *bias;    /* b_i [M_i] or NULL */
    float *y;             /* y_i [M_i] */
    int64_t M;
} mi8a_run_seg;
/* nw: item d17, x RMS-normalized first (weight nw [K], eps) in every block, as the NORM forms do:
 * the outputs equal the norm's kernel followed by the run without it, bit for bit. NULL: no norm. */
mi_status mi8a_matvec_q4k_run(void *stream, mi_type wt, const mi8a_run_seg *seg, int n, const float *x,
                              const float *nw, float eps, int64_t K);
/* ---- matvec_rows_run.cu, item d13 on 7b's kernel: the same for any format 7b's warp-per-row
 * matmul takes (the 0.5B's Q4_0 q, k, v), on x already quantized by mi7b_quantize_act into xq;
 * each output equals mi7b_matmul_quantized's bit for bit. */
mi_status mi8a_matmul_rows_run(void *stream, mi_type wt, const mi8a_run_seg *seg, int n, const void *xq, int64_t K);
/* ---- matvec_fused.cu, item d13: the same in one kernel that quantizes x in every block, for the
 * shapes mi8a_matvec_fused takes (K < MI8A_FUSED_MAX_K, the run's rows <= MI8A_FUSED_MAX_M):
 * every output equals 7b's matmul's bit for bit. */
mi_status mi8a_matvec_fused_run(void *stream, mi_type wt, const mi8a_run_seg *seg, int n, const float *x,
                                const float *nw, float eps, int64_t K);

/* ---- matvec_q6k_exact.cu: one token, Q6_K (item d11): y [M] = r [M] + (W [K, M] @ x + bias),
 * r and bias may be NULL; x quantized by 7b's quantizer into ws (mi8a_matvec_q6k_workspace
 * bytes). Rows streamed into registers an octet of lanes a super-block (K % 256 == 0, K <=
 * 41,216: the Q8_K row in shared memory; weights 4-byte aligned). Integer unit dots equal the
 * CPU's; a row's units are added in another order than 7b's and 7e's, so within rounding of them. */
bool mi8a_matvec_q6k_supported(mi_type wt, int64_t K);
size_t mi8a_matvec_q6k_workspace(int64_t K);
mi_status mi8a_matvec_q6k(void *stream, const void *w, const float *x, const float *bias, const float *r, float *y,
                          int64_t K, int64_t M, void *ws);
/* item d43: the same after the RMS norm of x (weight nw, eps), applied in the block while x is
 * quantized: the outputs equal the norm kernel followed by mi8a_matvec_q6k bit for bit (x, nw
 * 16-byte aligned; K up to the shared memory the row and x's copy take) */
bool mi8a_matvec_q6k_norm_supported(int64_t K);
mi_status mi8a_matvec_q6k_norm(void *stream, const void *w, const float *x, const float *nw, float eps,
                               const float *bias, float *y, int64_t K, int64_t M);

/* ---- item d12: the one-token Q4_K and Q6_K matmuls of rows of MI8A_WIDE_K elements or more
 * (the down projections) launched as one block of MI8A_WIDE_THREADS threads an SM instead of four
 * of 256: the same 32 warps an SM, but each SM stages (Q4_K: quantizes) the long activation row
 * once, not four times. Results do not change (a row's order does not depend on the block). */
#define MI8A_WIDE_K 8192
#define MI8A_WIDE_THREADS 1024
bool mi8a_wide_on(int64_t K);   /* counts the launches it answered yes */
uint64_t mi8a_wide_launches(void);
/* ---- items d39-d42: one-token Q4_K and Q6_K matmuls as one block of MI8A_WIDE_THREADS an SM
 * whatever K, their rows spread over every SM (warp w of block b takes rows w * gridDim.x + b,
 * ...): d39 the fused gate/up with its norm, d40 d12's downs (Q4_K and Q6_K: 3,584 rows in
 * blocks of 32 had left 20 of 132 SMs without rows), d41 the Q4_K matmuls without a norm of
 * shorter rows (o), d42 d13's and d17's Q4_K runs. Four blocks an SM prepared x four times.
 * Results do not change (a row's order depends on neither the block nor the map). Item d44
 * (d12's Q6_K downs quantize x in the block, matvec_q6k_exact.cu) is read the same way. */
bool mi8a_launch_item_on(const char *item);   /* item on? counts the launches it answered yes, per item */
uint64_t mi8a_launch_item_count(const char *item);

/* ---- install8a.c: whether 8a's launchers use programmatic dependent launch (item d6), and
 * how many launches did (each call of mi8a_pdl_on that answered yes counts one) */
bool mi8a_pdl_on(void);
bool mi8a_skv_whole_row_on(void);   /* d21: d4's K row loaded whole (attn_split_kv.cu) */
bool mi8a_skv_mma_on(void);         /* d22: d4's split on the tensor cores (attn_split_mma.cu) */
bool mi8a_skv_wide_combine_on(void); /* d32: the split's merge with its partials' loads in flight */
bool mi8a_skv_one_wave_on(void);     /* d33: d22's splits as one wave of blocks */
bool mi8a_skv_packed_on(void);       /* d34: d22's q and P parts as the mma's upper and lower rows */
bool mi8a_skv_warp_pipe_on(void);    /* d35: d22's tiles in a pipeline a warp, three tiles deep */
bool mi8a_unit_ahead_on(void);       /* d37: matvec_fused's first unit a lane in registers before the wait */
uint64_t mi8a_unit_ahead_launches(void);   /* launches that asked it on (gates) */
uint64_t mi8a_pdl_launches(void);
/* d10's launches so far: the lower phases' small kernels launched as programmatic dependents
 * (phase7a_skeleton/cuda_dispatch.h, mi_cuda_pdl_small) */
uint64_t mi8a_pdl_small_launches(void);
/* the pass flags a graph's nodes MI_T_EARLY (d10 applies) unless it is a one-token step of a
 * model narrower than this (its first RMS norm's width) */
#define MI8A_PDL_MIN_EMBD 2048

/* ---- install8a.c: d7's MATMUL candidates, MI_MM_X_FIRST or MI_MM_X_NEXT (else NULL); the pass
 * marks a run only where the dispatch would give its nodes these in place of 7b's kernel */
struct mi_cuda_kernel;
const struct mi_cuda_kernel *mi8a_shared_x_kernel(int role);
/* d13: whether a node that the dispatch gives kernel k alone can be part of a run (8a's Q4_K
 * streaming matmul, 7b's warp-per-row matmul: one_token, the node's x one row; an added kernel,
 * below: any rows); the candidate a node of role MI_MM_RUN_DEFER /
 * MI_MM_RUN_LAST of such a run gets (else NULL); norm: the run's nodes as NORM_MATMUL (d17: the
 * norm of x folded into the run) */
bool mi8a_run_plain(const struct mi_cuda_kernel *k, bool one_token);
const struct mi_cuda_kernel *mi8a_run_kernel(int role, const struct mi_cuda_kernel *plain, bool norm);
/* An upper layer's matmul kernel that takes runs of any rows (8b's small-K batch matmul, b13):
 * the pass marks its runs as it marks d13's, where the dispatch gives the marked nodes defer
 * (role MI_MM_RUN_DEFER) and last (MI_MM_RUN_LAST); where it gives a run's nodes as NORM_MATMUL
 * defer_norm and last_norm (NULL: none), the run's x = rms_norm(x0, w) read by the run alone
 * is folded into it as d17 folds it. Their run()s keep the record as d13's do: defer calls
 * mi8a_run_record, last mi8a_run_take, which hands back the run's matmuls, its own last (*k of
 * them, valid until the next run starts). */
void mi8a_run_add(const struct mi_cuda_kernel *plain, const struct mi_cuda_kernel *defer,
                  const struct mi_cuda_kernel *last, const struct mi_cuda_kernel *defer_norm,
                  const struct mi_cuda_kernel *last_norm);
struct mi_cuda_ctx;
struct mi_tensor;
mi_status mi8a_run_record(struct mi_cuda_ctx *c, const struct mi_tensor *n);
mi_status mi8a_run_take(struct mi_cuda_ctx *c, const struct mi_tensor *n, const mi8a_run_seg **seg, int *k);
/* the same for a last node whose weights may be of another format than the run's (*run_type) */
mi_status mi8a_run_take_other(struct mi_cuda_ctx *c, const struct mi_tensor *n, const mi8a_run_seg **seg, int *k,
                              mi_type *run_type);

/* d14: the candidate a ROPE or KV_STORE node of role MI_RKV_DEFER / MI_RKV_LAST gets (else
 * NULL); d8's ROPE kernel, the one whose arithmetic d14's kernel repeats */
struct mi_tensor;
const struct mi_cuda_kernel *mi8a_rope_kv_kernel(const struct mi_tensor *n, int role);
const struct mi_cuda_kernel *mi8a_rope_pairs_kernel(void);
/* d30's candidate for a marked attention (mi_attn_does_rkv), for the pass's probe */
const struct mi_cuda_kernel *mi8a_attn_rkv_kernel(void);
/* d31's pair for the pass: d20's attention (plain or d30's) and d2's matmul + residual kernel */
const struct mi_cuda_kernel *mi8a_attn_step_kernel(void);
const struct mi_cuda_kernel *mi8a_add_fused_kernel(void);
/* d31's launches so far (attentions that wrote their output's quantized row) */
uint64_t mi8a_quant_out_launches(void);

/* ---- rope_pairs_exact.cu: MI_OP_ROPE with a thread per rotated pair and the inverse
 * frequencies computed once on the host by the CPU's expression (item d8); 7b's angle and
 * rounding (mi_canon_rope_cs), bit-identical to 7b's kernel where the host's and the device's
 * double pow round to the same float (gate_8a checks the models' bases). */
#define MI8A_ROPE_MAX_PAIRS 256
bool mi8a_rope_pairs_supported(int64_t hd, int n_rot, int mode);
mi_status mi8a_rope_pairs(void *stream, const float *x, const int32_t *pos, float *y, int64_t hd, int64_t H,
                          int64_t N, int mode, int n_rot, float freq_base);

/* ---- rope_pairs_exact.cu, item d14: one token's RoPE of q [hd*Hq] and k [hd*Hkv] (d8's
 * arithmetic), k's rotated row and v [hd*Hkv] stored to row n_past of the K and V caches (F16 by
 * mi_f32_to_f16, or F32), in one launch: every output equals what d8's RoPE and 7b's stores
 * write. n_past from the device where *_dev is set (7d's step params), else the value; a row at
 * or past n_ctx is not written. */
typedef struct {
    const float *q, *k, *v;
    float *q_rope, *k_rope;
    void *cache_k, *cache_v;          /* [hd*Hkv, n_ctx_*], of one type */
    const int32_t *pos;               /* [1] */
    const int32_t *n_past_k_dev, *n_past_v_dev;
    int64_t n_past_k, n_past_v, n_ctx_k, n_ctx_v;
} mi8a_rope_kv_io;
bool mi8a_rope_kv_supported(int64_t hd, int64_t Hq, int64_t Hkv, int n_rot, int mode, mi_type ctype);
mi_status mi8a_rope_kv(void *stream, const mi8a_rope_kv_io *io, mi_type ctype, int64_t hd, int64_t Hq, int64_t Hkv,
                       int mode, int n_rot, float freq_base);
/* The same over N rows (a step of many sequences, item b20 of 8b): row i's q and k rotated by
 * pos[i] (d8's arithmetic, as mi8a_rope_pairs over the N rows), its k and v rows stored to cache
 * row slots[i] (mi8b_kv_scatter's conversion; a slot outside [0, n_rows) writes nothing). */
typedef struct {
    const float *q, *k, *v;           /* [hd*Hq, N], [hd*Hkv, N], [hd*Hkv, N] */
    float *q_rope, *k_rope;
    void *cache_k, *cache_v;          /* [hd*Hkv, n_rows_*], of one type */
    const int32_t *pos, *slots;       /* [N] */
    int64_t N, n_rows_k, n_rows_v;
} mi8a_rope_kv_rows_io;
mi_status mi8a_rope_kv_rows(void *stream, const mi8a_rope_kv_rows_io *io, mi_type ctype, int64_t hd, int64_t Hq,
                            int64_t Hkv, int mode, int n_rot, float freq_base);
/* An upper layer's candidates for a step of many sequences' four (roles MI_RKV_ROWS_*): its q and
 * k RoPE (rope_defer), K scatter (store_defer) and V scatter (store_last); the pass marks such a
 * four where the dispatch gives them these (mi8a_rope_kv_kernel answers for the roles) */
void mi8a_rope_kv_rows_add(const struct mi_cuda_kernel *rope_defer, const struct mi_cuda_kernel *store_defer,
                           const struct mi_cuda_kernel *store_last);

/* ---- argmax.cu: MI_OP_ARGMAX, x F32 [V, N] -> out I32 [N] (graph.h's rule, bit for bit the
 * CPU's): greedy decoding returns a token id, not 600 KB of logits (item d3) */
mi_status mi8a_argmax(void *stream, const float *x, int32_t *out, int64_t V, int64_t N);
/* d45's one-time check of its clusters, made where the node's workspace is sized (no capture open) */
void mi8a_argmax_ready(void);

/* ---- attn_split_kv.cu: one-token attention split over the KV sequence (item d4): blocks of
 * (KV head, split) read each K/V row once for the GQA group, partials merged per head in split
 * order; within the attention bound of 7b, not bit-identical to it. n_past_dev: 7d's step
 * param (NULL: n_past). Used for caches of MI8A_SKV_MIN_CTX positions and more (shorter ones
 * take d20's single kernel: at a 256-position cache it is 6% (7B) to 15% (0.5B) faster than the
 * split and its merge, at 640 positions the split is 5-6% faster, at 1,152 21-36%;
 * results/notes/PHASE8A.md). */
#define MI8A_SKV_T 128            /* keys per tile, threads per block */
#define MI8A_SKV_MIN_KEYS 256     /* keys a split takes at least when the cache is full */
#define MI8A_SKV_MAX_SPLITS 128
/* Query heads a block takes of its GQA group (heads_a_block; 0: by the cache's length): each
 * thread computes that many dots a key, so fewer is less serial work a tile and more blocks, at
 * the price of reading each K/V tile once a block (the repeats come from L2). Measured on the
 * H200 (results/notes/PHASE8A.md): 2 a block is best for caches under 16k positions, the whole
 * group at depth in longer ones. */
#define MI8A_SKV_HEADS 2
#define MI8A_SKV_GROUP_CTX 16384  /* caches of this many positions: the whole group a block */
#define MI8A_SKV_MIN_CTX 512
/* ---- attn_step.cu: one-token attention, 7b's arithmetic (bit for bit) with a tile's
 * K rows, V rows and q loaded together (d20); F16 caches, hd 64 or 128, 16-byte aligned.
 * oq (item d31, else NULL): the output's row quantized as well, in 7b's quantizer's bytes for a
 * weight of 32-element blocks ((hd Hq / 32) 36-byte blocks, 4-byte aligned) ---- */
bool mi8a_attn_step_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype, const void *k, const void *v);
mi_status mi8a_attn_step(void *stream, const float *q, const void *k, const void *v, mi_type ctype, float *o, void *oq,
                         const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx, int64_t hd, int64_t Hq, int64_t Hkv,
                         float scale);
/* d30: the same attention doing its step's RoPE of q and k and its K and V stores first (what
 * mi8a_rope_kv computes from io; q read unrotated from io->q, the caches io's, n_ctx theirs):
 * q's and k's RoPE outputs, the two cache rows and the attention's output are the bits of
 * mi8a_rope_kv followed by mi8a_attn_step */
bool mi8a_attn_step_rkv_supported(int64_t hd, int64_t Hq, int64_t Hkv, int n_rot, int mode, mi_type ctype,
                                  const void *k, const void *v);
mi_status mi8a_attn_step_rkv(void *stream, const mi8a_rope_kv_io *io, int mode, int n_rot, float freq_base,
                             mi_type ctype, float *o, void *oq, const int32_t *n_past_dev, int64_t n_past,
                             int64_t n_ctx, int64_t hd, int64_t Hq, int64_t Hkv, float scale);

bool mi8a_attn_split_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype);
/* attn_split_mma.cu (d22): the split's blocks on the tensor cores, the same partials; F16 caches,
 * hd 64 or 128, GQA groups <= 16, 16-byte aligned. mi8a_attn_split calls it (and the combine). */
bool mi8a_attn_split_mma_supported(int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype, const void *k, const void *v);
/* whether mi8a_attn_split runs this shape on the tensor cores: d22 on, supported, and the whole
 * group a block (caches of MI8A_SKV_GROUP_CTX positions and more, or heads_a_block >= the group) */
bool mi8a_attn_split_on_mma(int64_t n_ctx, int64_t hd, int64_t Hq, int64_t Hkv, mi_type ctype, const void *k,
                            const void *v, int heads_a_block);
mi_status mi8a_attn_split_mma_launch(void *stream, const float *q, const void *k, const void *v, float *part, float *o,
                                     const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx, int64_t hd, int64_t Hq,
                                     int64_t Hkv, int S, float scale, bool pdl);
int mi8a_attn_split_count(int64_t n_ctx, int64_t Hkv);
/* d33: the splits d22's kernel takes (<= mi8a_attn_split_count): one wave of its blocks */
int mi8a_attn_split_mma_count(int64_t n_ctx, int64_t hd, int64_t Hkv);
int mi8a_attn_split_mma_blocks_per_sm(int64_t hd);
size_t mi8a_attn_split_workspace(int64_t n_ctx, int64_t hd, int64_t Hq, int64_t Hkv);
mi_status mi8a_attn_split(void *stream, const float *q, const void *k, const void *v, mi_type ctype, float *o,
                          const int32_t *n_past_dev, int64_t n_past, int64_t n_ctx, int64_t hd, int64_t Hq, int64_t Hkv,
                          float scale, int heads_a_block, void *workspace);

/* ---- fusion8a.c: the graph pass (registered with 7c's fusion list). Returns the number of
 * fusions made. Rewrites, for one-token graphs (N == 1) only:
 *   add(r, matmul(W, x))                 -> matmul_add(W, x, r)
 *   rms_norm(x, w) whose every reader is a matmul or FFN_SWIGLU, at most
 *   MINFER_NORM_FOLD_READERS of them (1)  -> each reader as norm_matmul / norm_ffn_swiglu of x
 * and marks runs of consecutive one-token matmuls of one x that 7b's kernel would run (d7):
 * the first quantizes x for all (mi_matmul_shared_x). Marks are not counted as fusions. */
struct mi_graph;
struct mi_backend;
int mi8a_fuse_decode(struct mi_graph *g, struct mi_backend *cuda);
/* the same with the most readers a norm is folded into given (the pass reads it from
 * MINFER_NORM_FOLD_READERS, default 1; the gate checks both rules) */
int mi8a_fuse_decode_with(struct mi_graph *g, struct mi_backend *cuda, int max_norm_readers);

void mi_phase8a_install(void);

#ifdef __cplusplus
}
#endif
#endif

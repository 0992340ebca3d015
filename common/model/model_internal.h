/* Private structures of the model module: the loaded model (hparams + weight leaves
 * bound into the GGUF mapping), the KV cache and the session. Shared by model.c,
 * kv_cache.c, build.c and session.c; nothing outside common/model includes it. */
#ifndef MI_MODEL_INTERNAL_H
#define MI_MODEL_INTERNAL_H
#include "mi.h"
#include "../graph/graph.h"
#include "../backend/backend.h"
#include "../backend/sched.h"
#include "../gguf/gguf.h"

/* One decoder block's weights. Shapes as [ne0, ne1] (ne0 = input length K). */
typedef struct {
    mi_tensor attn_norm;          /* F32 [E] */
    mi_tensor wq, wk, wv;         /* [E, hd*Hq], [E, hd*Hkv], [E, hd*Hkv] */
    mi_tensor bq, bk, bv;         /* qwen2: F32 [hd*Hq], [hd*Hkv], [hd*Hkv] */
    mi_tensor q_norm, k_norm;     /* qwen3: F32 [hd] */
    mi_tensor wo;                 /* [hd*Hq, E] */
    mi_tensor ffn_norm;           /* F32 [E] */
    mi_tensor w_gate, w_up;       /* [E, F] */
    mi_tensor w_down;             /* [F, E] */
} mi_layer;

struct mi_model {
    gguf_file *gguf;
    mi_hparams hp;
    mi_tensor tok_embd;           /* [E, V] */
    mi_tensor output_norm;        /* F32 [E] */
    mi_tensor output_own;         /* [E, V] when not tied */
    mi_tensor *output;            /* &output_own or &tok_embd (tied) */
    mi_layer *layers;             /* [n_layer] */
    mi_tensor **weights;          /* every bound leaf (read-only once loaded: sessions share it) */
    int n_weights;
    size_t weight_bytes;          /* bytes of all bound weights */
    size_t bytes_per_token;       /* bytes a decode step reads: all matmul weights + norms
                                     + one embedding row (tied output counted once, as the
                                     output matmul) */
    mi_type dominant_type;        /* type holding most weight bytes */
    bool cpu_only;                /* loaded with backend "cpu": no device placement */
};

/* KV cache: per layer K and V leaves [hd*Hkv, n_ctx] (F16 or F32), persistent. */
typedef struct {
    mi_type type;
    int64_t n_ctx, row;           /* row = hd*Hkv elements */
    int n_layer;
    mi_tensor *k, *v;             /* [n_layer] each */
    mi_buffer *buf;
    mi_backend *be;
} mi_kv_cache;

mi_status kv_cache_init(mi_kv_cache *kv, const mi_hparams *hp, mi_type type, int64_t n_ctx,
                        mi_backend *be);
void kv_cache_free(mi_kv_cache *kv);
/* Bytes kv_cache_init would allocate (SIZE_MAX on overflow), computed without allocating. */
size_t kv_cache_size(const mi_hparams *hp, mi_type type, int64_t n_ctx);
size_t kv_cache_bytes(const mi_kv_cache *kv);

/* Per-layer debug taps (MINFER_DEBUG_LAYERS=FILE): nodes marked as outputs and
 * written after compute, so a reference can find the first op that differs. */
#define MI_DEBUG_TAPS_MAX 4096

/* A step of many sequences (phase 8b, docs/PHASE8B.md), host arrays the graph's inputs read:
 * rows: each token's cache row (KV_SCATTER); seqs: ATTN_PAGED's table (n_seqs entries of
 * MI_PAGED_FIELDS, then the block tables; seqs_len ints); solo: each token's sequence's token
 * count (the CPU matmul's path, MATMUL src3); last: each sequence's last row; ones: n_seqs 1s
 * (the output head runs one row a sequence, as each sequence alone does). */
typedef struct {
    const int32_t *rows, *seqs, *solo, *last, *ones;
    int n_seqs;
    int64_t seqs_len, block, max_kv, max_rows;
} mi_batch_layout;

/* Graph build for n tokens at n_past. ids/pos point at host arrays of n I32 each.
 * all_logits: logits for every row, else only the last. batch: a step of many sequences
 * (pos per token, n_past unused, logits one row a sequence), with kv the pool's storage. */
typedef struct {
    const mi_batch_layout *batch;
    const int32_t *ids, *pos;
    int64_t n, n_past;
    bool all_logits;
    bool greedy;                  /* output: each logits row's argmax (I32), not the logits */
    int64_t top_k;                /* > 0: output each logits row's top_k candidates (MI_OP_TOPK) */
    const float *top_scale;       /* for them: each row's scale, one a logits row */
    bool debug_taps;              /* mark per-op outputs (debug) */
    mi_tensor **taps;             /* out: tapped nodes (cap MI_DEBUG_TAPS_MAX) */
    int n_taps;
} mi_build_args;

mi_status model_build_graph(const mi_model *m, const mi_kv_cache *kv, mi_build_args *a,
                            mi_graph **out);
/* The CUDA backend for a request "cuda" or "auto" (session.c): on "auto" a failure is one log
 * line and *out = NULL (the CPU); on "cuda" the error. MINFER_DISABLE_CUDA=1: NULL. */
mi_status model_open_cuda(const char *want, mi_backend **out);
int model_graph_max_nodes(const mi_model *m);
/* Whether a TOPK of k candidates a row runs on be, where the logits are (the CPU backend, or a
 * device whose kernels take it): only then does a top-k output save the logits' trip to the host. */
bool model_topk_where_logits(const mi_model *m, mi_backend *be, int64_t k);

#endif

/* The compute graph: tensors, node ops, and the builder helpers the model code uses.
 * Every activation is contiguous (no views); ops that need a head structure take it
 * as a parameter. A graph is built per batch (n tokens at position n_past), then the
 * scheduler assigns backends, cuts splits, allocates and executes it (sched.h). */
#ifndef MI_GRAPH_H
#define MI_GRAPH_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "../core/mi_err.h"
#include "../quant/mi_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MI_MAX_DIMS 4
#define MI_MAX_SRC 8   /* ATTN_PAGED doing its step's RoPE and scatters holds seven */
#define MI_MAX_PARAMS 8
#define MI_NAME_MAX 64
#define MI_TOPK_MAX 256   /* the most candidates MI_OP_TOPK keeps a row */

/* Shapes below: ne[0] is the innermost (row) length, [a, b] means ne0=a, ne1=b. */
typedef enum {
    MI_OP_NONE = 0,   /* leaf: weight or persistent region; data preset, never executed */
    MI_OP_INPUT,      /* data copied from host memory (t->host_src, nbytes) at execute */
    MI_OP_GET_ROWS,   /* src0 table [E, V] any type, src1 ids I32 [N] -> F32 [E, N] */
    MI_OP_MATMUL,     /* src0 W [K, M] any type, src1 x F32 [K, N], src2 bias F32 [M] or NULL -> F32 [M, N];
                         src3 I32 [N] or NULL: per row, the rows its own sequence has in a step of many (8b),
                         so a backend that picks its path by N can compute each row as that sequence alone;
                         p[0]: a hint of 8a's pass (mi_matmul_shared_x), ignored by the CPU */
    MI_OP_ADD,        /* src0 F32 [D, N] + src1 F32 [D, N] or [D, 1] (broadcast) -> [D, N] */
    MI_OP_MUL,        /* src0 F32 [D, N] * src1 F32 [D, N] or [D, 1] -> [D, N] */
    MI_OP_RMS_NORM,   /* src0 F32 [D, N], src1 weight F32 [G] -> [D, N]; rows of G = p[0]
                         elements (G = D for whole rows, head_dim for per-head q/k norm);
                         y = x * (1/sqrt(mean(x^2) + eps)) * w, eps = pf(1) */
    MI_OP_ROPE,       /* src0 F32 [hd*H, N], src1 positions I32 [N] -> same shape.
                         p[0] = head_dim, p[1] = mode (MI_ROPE_NORMAL|MI_ROPE_NEOX),
                         p[2] = n_rot, pf(3) = freq_base */
    MI_OP_SILU,       /* src0 F32 -> F32 */
    MI_OP_SWIGLU,     /* src0 gate F32 [F, N], src1 up F32 [F, N] -> silu(gate) * up */
    MI_OP_KV_STORE,   /* src0 new K or V F32 [hd*Hkv, N], src1 cache leaf (F16|F32) [hd*Hkv, n_ctx];
                         writes rows n_past..n_past+N-1 (p[0] = n_past). The node's own data
                         aliases the cache (flag MI_T_ALIAS): later readers depend on it. */
    MI_OP_ATTN,       /* src0 q F32 [hd*Hq, N], src1 K (KV_STORE node), src2 V (KV_STORE node)
                         -> F32 [hd*Hq, N]. Causal GQA over positions 0..n_past+i for query i.
                         p[0] = n_past, p[1] = head_dim, p[2] = Hq, p[3] = Hkv, pf(4) = scale,
                         p[5], p[6] = a device pass's marks (mi_attn_does_rkv, src3..5 with
                         it; mi_attn_quant_out) */
    MI_OP_SLICE_ROWS, /* src0 [D, N] -> [D, p[1]] copy of rows p[0]..p[0]+p[1]-1 */
    MI_OP_COPY,       /* src0 -> same shape/type; inserted by the scheduler at split
                         boundaries (cross-backend copy) */
    /* fused ops (made by the CUDA phases' fusion passes, only where a CUDA kernel accepts
       them; the CPU backend runs every one, so a fused node is never stranded) */
    MI_OP_FFN_SWIGLU, /* src0 W_gate [K, F], src1 W_up [K, F], src2 x F32 [K, N] -> F32 [F, N] */
    MI_OP_NORM_MATMUL,     /* src0 W [K, M], src1 x F32 [K, N], src2 bias F32 [M] or NULL, src3 norm
                              weight F32 [K] -> W @ rms_norm(x, w) (+ bias) [M, N]; pf(1) = eps;
                              the norm over whole rows, exactly MI_OP_RMS_NORM's arithmetic */
    MI_OP_NORM_FFN_SWIGLU, /* src0 W_gate, src1 W_up [K, F], src2 x F32 [K, N], src3 norm weight
                              F32 [K] -> FFN_SWIGLU of rms_norm(x, w); pf(1) = eps */
    MI_OP_MATMUL_ADD,      /* src0 W [K, M], src1 x F32 [K, N], src2 r F32 [M, N] -> r + W @ x:
                              a residual add in the matmul's epilogue */
    MI_OP_KV_SCATTER, /* src0 new K or V F32 [row, N], src1 cache leaf (F16|F32) [row, n_rows], src2 I32 [N]
                         cache rows: row i of src0 goes to cache row src2[i] (phase 8b's paged KV). Its data
                         aliases the cache, as KV_STORE's does */
    MI_OP_ATTN_PAGED, /* src0 q F32 [hd*Hq, N], src1 K, src2 V (KV_SCATTER nodes), src3 I32 sequences table
                         (mi_paged_seq): rows of sequence s attend over its positions 0 .. n_past_s + i through
                         its block table -> [hd*Hq, N]; p[0] = sequences, p[1..4] as ATTN, p[5] = block,
                         p[6] = the largest n_kv, p[7] = the most rows of one sequence */
    MI_OP_ARGMAX,     /* src0 F32 [V, N] -> I32 [1, N]: per row the index of the largest value, the
                         first on ties, NaN never wins (mi_sample_greedy's rule); -1 when the row
                         has no finite maximum (all NaN, or an infinite largest value) */
    MI_OP_TOPK,       /* src0 F32 [V, N], src1 F32 [1, N] (each row's scale: 1 / temperature) -> F32
                         [2K, N]: per row the K best of x * scale (NaN as -inf), larger first, then
                         lower index (mi_sample_top_k's order): their K values, then their K indices
                         (exact as floats: V <= 2^24); p[0] = K, 1 <= K <= 256, K < V */
    MI_OP_COUNT
} mi_op;

enum { MI_ROPE_NORMAL = 0, MI_ROPE_NEOX = 2 };

/* tensor flags */
#define MI_T_WEIGHT  0x01u  /* model weight (leaf) */
#define MI_T_INPUT   0x02u  /* op == MI_OP_INPUT */
#define MI_T_OUTPUT  0x04u  /* result read by the host after execute: never reused */
#define MI_T_PERSIST 0x08u  /* persistent region (KV cache): not allocated by the graph */
#define MI_T_ALIAS   0x10u  /* data aliases src[1] (KV_STORE): not allocated */
#define MI_T_EARLY   0x20u  /* a hint of 8a's pass (item d10): the node's kernels may be launched as
                               programmatic dependents; ignored by the CPU */
#define MI_T_FED     0x40u  /* MI_OP_INPUT whose bytes its owner already put in its data on the
                               backend (a copy queued there): sched_compute skips host_src */

struct mi_buffer;

typedef struct mi_tensor {
    mi_type type;
    int64_t ne[MI_MAX_DIMS];   /* elements per dim; unused dims = 1 */
    size_t nb[MI_MAX_DIMS];    /* byte strides; contiguous: nb[0] = type size, nb[1] = row size */
    mi_op op;
    int32_t p[MI_MAX_PARAMS];  /* op parameters; floats stored as bits (mi_tensor_pf) */
    struct mi_tensor *src[MI_MAX_SRC];
    uint32_t flags;
    int backend;               /* index into the scheduler's backend list; -1 = unassigned */
    void *data;                /* address in that backend's memory (host or device pointer) */
    const void *host_src;      /* MI_OP_INPUT: host bytes to copy in at execute */
    int id;                    /* index in its graph (-1 for tensors not in a graph) */
    char name[MI_NAME_MAX];
    /* backend private: the kernel its backend chose for this node and the dispatch epoch
     * of that choice (phase7a_skeleton/cuda_dispatch.h); zero until a choice is made */
    const void *kernel;
    uint64_t kernel_epoch;
} mi_tensor;

static inline float mi_tensor_pf(const mi_tensor *t, int i) {
    union { int32_t i; float f; } u; u.i = t->p[i]; return u.f;
}
static inline void mi_tensor_set_pf(mi_tensor *t, int i, float f) {
    union { int32_t i; float f; } u; u.f = f; t->p[i] = u.i;
}
static inline int64_t mi_nelements(const mi_tensor *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}
size_t mi_nbytes(const mi_tensor *t);       /* bytes of a contiguous tensor */
/* rows of a tensor: everything past ne[0] */
static inline int64_t mi_nrows(const mi_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

/* Node parameters by name (the layout per op is in mi_op above). */
static inline int64_t mi_node_n_past(const mi_tensor *n) { return n->p[0]; }      /* ATTN, KV_STORE */
static inline int64_t mi_attn_head_dim(const mi_tensor *n) { return n->p[1]; }   /* ATTN, ATTN_PAGED */
static inline int64_t mi_attn_n_head(const mi_tensor *n) { return n->p[2]; }
static inline int64_t mi_attn_n_head_kv(const mi_tensor *n) { return n->p[3]; }
static inline float mi_attn_scale(const mi_tensor *n) { return mi_tensor_pf(n, 4); }
static inline int64_t mi_norm_group(const mi_tensor *n) { return n->p[0]; }       /* RMS_NORM */
static inline float mi_norm_eps(const mi_tensor *n) { return mi_tensor_pf(n, 1); }
static inline float mi_fused_norm_eps(const mi_tensor *n) { return mi_tensor_pf(n, 1); } /* NORM_* */
/* the MATMUL a NORM_MATMUL applies to its normalized x (a kernel's own rule for the matmul part) */
static inline mi_tensor mi_norm_matmul_part(const mi_tensor *n) {
    mi_tensor mm = *n;
    mm.op = MI_OP_MATMUL;
    mm.src[3] = NULL;
    return mm;
}
static inline int64_t mi_rope_head_dim(const mi_tensor *n) { return n->p[0]; }    /* ROPE */
static inline int mi_rope_mode(const mi_tensor *n) { return n->p[1]; }
static inline int mi_rope_n_rot(const mi_tensor *n) { return n->p[2]; }
static inline float mi_rope_freq_base(const mi_tensor *n) { return mi_tensor_pf(n, 3); }
/* MATMUL p[0]: the node is the first (MI_MM_X_FIRST) or a later (MI_MM_X_NEXT) of a run of
 * consecutive one-token matmuls of the same x and activation format: the first may leave x
 * quantized in the backend's workspace for the rest. Or it belongs to a run whose last node
 * (MI_MM_RUN_LAST) computes every node's rows in one launch, the others (MI_MM_RUN_DEFER)
 * launching nothing. 0: no run. Hints of a device's pass: the CPU computes each node itself. */
enum { MI_MM_X_FIRST = 1, MI_MM_X_NEXT = 2, MI_MM_RUN_DEFER = 3, MI_MM_RUN_LAST = 4 };
static inline int mi_matmul_shared_x(const mi_tensor *n) { return (int)n->p[0]; }
/* MATMUL p[1] MI_MM_FIXUP_NEXT (on a run's last node) and SWIGLU p[0] MI_SWIGLU_FIXUP: a run of
 * two matmuls (gate, up) read only by the SWIGLU right after it, which may finish the run's
 * partial sums as it reads them. Hints of a device's pass: the CPU computes each node itself. */
enum { MI_MM_FIXUP_NEXT = 1, MI_SWIGLU_FIXUP = 1 };
static inline bool mi_matmul_fixup_next(const mi_tensor *n) { return n->p[1] == MI_MM_FIXUP_NEXT; }
static inline bool mi_swiglu_takes_fixup(const mi_tensor *n) { return n->p[0] == MI_SWIGLU_FIXUP; }
/* ROPE p[4], KV_STORE and KV_SCATTER p[1]: the node is one of a step's four that one launch can
 * do (q's RoPE, k's RoPE, the K store of k's RoPE, the V store, consecutive): the V store
 * (MI_RKV_LAST) does all four, the others (MI_RKV_DEFER) launch nothing; the V store then
 * has the two RoPEs' inputs as src[2] and src[3], so they stay allocated until it runs. A step
 * of many sequences (KV_SCATTER: src[2] its rows) is marked MI_RKV_ROWS_DEFER / _LAST, its V
 * scatter holding q's RoPE input as src[3] (k's needs none: nothing is allocated between the k
 * RoPE and the V scatter, which alias the caches). 0: none. Hints of a device's pass: the CPU
 * computes each node itself. */
enum { MI_RKV_DEFER = 1, MI_RKV_LAST = 2, MI_RKV_ROWS_DEFER = 3, MI_RKV_ROWS_LAST = 4, MI_RKV_ATTN = 5, MI_RKV_ROWS_ATTN = 6 };
static inline int mi_rope_kv_role(const mi_tensor *n) {
    return n->op == MI_OP_ROPE ? (int)n->p[4] : n->op == MI_OP_KV_STORE || n->op == MI_OP_KV_SCATTER ? (int)n->p[1] : 0;
}
static inline void mi_rope_kv_set_role(mi_tensor *n, int role) {
    if (n->op == MI_OP_ROPE) n->p[4] = role;
    else if (n->op == MI_OP_KV_STORE || n->op == MI_OP_KV_SCATTER) n->p[1] = role;
}
/* ATTN p[5]: the one-token attention right after such a four does their work too: the V store
 * is then MI_RKV_ATTN (it launches nothing either) and the attention holds the RoPEs' inputs and
 * v as src[3], src[4], src[5], and k's RoPE, which it writes, as src[6], so they stay allocated
 * until it runs. Its src[0..2] stay q's RoPE
 * and the two stores: a backend that ignores the mark computes the same by running every node.
 * A device pass's hint, like the roles above. */
static inline bool mi_attn_does_rkv(const mi_tensor *n) { return n->op == MI_OP_ATTN && n->p[5] == 1; }
static inline void mi_attn_set_rkv(mi_tensor *n) { n->p[5] = 1; }
/* ATTN_PAGED of a decode step (one row a sequence) right after such a four of many rows: the V
 * scatter is then MI_RKV_ROWS_ATTN (it launches nothing) and the attention does the four's work,
 * holding q's and k's RoPE inputs and v as src[4], src[5], src[6] so they stay allocated until it
 * runs. Its src[0..3] stay q's RoPE, the two scatters and the table: a backend that ignores the
 * mark computes the same by running every node. A device pass's hint. */
static inline bool mi_attn_paged_does_rkv(const mi_tensor *n) {
    return n->op == MI_OP_ATTN_PAGED && n->src[2] && n->src[2]->op == MI_OP_KV_SCATTER &&
           mi_rope_kv_role(n->src[2]) == MI_RKV_ROWS_ATTN;
}
/* ATTN p[6]: the node right after the attention is a one-token matmul of its output that can
 * read the output quantized, so the attention may write that row too. A device pass's hint. */
static inline bool mi_attn_quant_out(const mi_tensor *n) { return n->op == MI_OP_ATTN && n->p[6] == 1; }
static inline void mi_attn_set_quant_out(mi_tensor *n) { n->p[6] = 1; }
static inline int64_t mi_slice_first(const mi_tensor *n) { return n->p[0]; }      /* SLICE_ROWS */
static inline int64_t mi_slice_count(const mi_tensor *n) { return n->p[1]; }
const char *mi_op_name(mi_op op);

/* A graph owns its nodes (arena). Leaves (weights, KV regions) are owned elsewhere
 * (model / kv cache) and only referenced. Nodes are kept in build order, which is a
 * topological order. */
typedef struct mi_graph {
    mi_tensor **nodes;  /* [n_nodes] compute nodes incl. inputs, in execution order */
    int n_nodes, cap_nodes;
    mi_tensor *arena;   /* storage of the graph's own tensors */
    int n_arena, cap_arena;
    mi_tensor *output;  /* the logits node */
} mi_graph;

mi_graph *graph_new(int max_nodes);
void graph_free(mi_graph *g);

/* A tensor's name, cut to MI_NAME_MAX - 1 bytes; the _layer form writes "blk.<layer>.<what>". */
void mi_tensor_set_name(mi_tensor *t, const char *name);
void mi_tensor_set_name_layer(mi_tensor *t, int layer, const char *what);

/* Initialise a free-standing tensor (weights, KV regions). */
void tensor_init(mi_tensor *t, const char *name, mi_type type, int n_dims, const int64_t *ne);

/* Builders: each appends a node to g and returns it (NULL on a shape error, with
 * the message set). Shapes are checked here so execution never sees a bad one. */
mi_tensor *graph_input(mi_graph *g, const char *name, mi_type type, int64_t ne0, int64_t ne1, const void *host_src);
/* The graph's Input node that reads host_src, or NULL */
mi_tensor *graph_input_of(const mi_graph *g, const void *host_src);
mi_tensor *graph_get_rows(mi_graph *g, mi_tensor *table, mi_tensor *ids);
mi_tensor *graph_matmul(mi_graph *g, mi_tensor *w, mi_tensor *x, mi_tensor *bias);
mi_tensor *graph_add(mi_graph *g, mi_tensor *a, mi_tensor *b);
mi_tensor *graph_mul(mi_graph *g, mi_tensor *a, mi_tensor *b);
mi_tensor *graph_rms_norm(mi_graph *g, mi_tensor *x, mi_tensor *w, int64_t group, float eps);
mi_tensor *graph_rope(mi_graph *g, mi_tensor *x, mi_tensor *pos, int head_dim, int mode, int n_rot, float freq_base);
mi_tensor *graph_silu(mi_graph *g, mi_tensor *x);
mi_tensor *graph_swiglu(mi_graph *g, mi_tensor *gate, mi_tensor *up);
mi_tensor *graph_kv_store(mi_graph *g, mi_tensor *x, mi_tensor *cache, int64_t n_past);
mi_tensor *graph_attn(mi_graph *g, mi_tensor *q, mi_tensor *k, mi_tensor *v, int64_t n_past,
                      int head_dim, int n_head, int n_head_kv, float scale);
mi_tensor *graph_slice_rows(mi_graph *g, mi_tensor *x, int64_t first, int64_t count);
/* Phase 8b: a step of many sequences. ATTN_PAGED's sequences table, I32: for each of S
 * sequences MI_PAGED_FIELDS ints (first row in the step, rows, n_past, offset of its block table
 * in this table), then the block tables (block ids; position p of a sequence is in cache row
 * table[p / block] * block + p % block). */
enum { MI_PAGED_FIRST, MI_PAGED_ROWS, MI_PAGED_NPAST, MI_PAGED_TABLE, MI_PAGED_FIELDS };
mi_tensor *graph_kv_scatter(mi_graph *g, mi_tensor *x, mi_tensor *cache, mi_tensor *rows);
mi_tensor *graph_attn_paged(mi_graph *g, mi_tensor *q, mi_tensor *k, mi_tensor *v, mi_tensor *seqs, int n_seqs,
                            int64_t block, int64_t max_kv, int64_t max_rows, int head_dim, int n_head, int n_head_kv,
                            float scale);
mi_tensor *graph_argmax(mi_graph *g, mi_tensor *x);
mi_tensor *graph_topk(mi_graph *g, mi_tensor *x, mi_tensor *scale, int64_t k);
/* Generic append (used by the scheduler and the fusion pass). */
mi_tensor *graph_new_node(mi_graph *g, mi_op op, mi_type type, int n_dims, const int64_t *ne, const char *name);

/* Move a graph built for one step to position n_past: every node that carries n_past (ATTN,
 * KV_STORE) gets it, checked against its cache as the builders check it. The positions input
 * is the caller's. Used to run one decode graph for many steps. */
mi_status graph_set_n_past(mi_graph *g, int64_t n_past);

/* A number no state of any graph of this process has had before: new at graph_new and at
 * every graph_touch, which whatever changes a graph after its build calls (the hook pass, the
 * scheduler's assignment and allocation); graph_set_n_past and the Inputs' data leave it.
 * A backend may keep what it worked out about a graph under this number and use it again
 * while the number holds (7d's split key). */
uint64_t graph_version(const mi_graph *g);
void graph_touch(mi_graph *g);

/* Print nodes (op, type, shape, backend, srcs) to f; used by MINFER_DUMP_GRAPH=1. */
void graph_dump(const mi_graph *g, void *file /* FILE* */);

/* Bookkeeping the scheduler keeps with a graph (sched.c only; not for model code):
 * which scheduler inserted its boundary copies and which allocation its data
 * pointers belong to, so sched_compute knows which steps are still needed. */
typedef struct {
    const void *sched;       /* scheduler that assigned this graph, NULL if none */
    uint64_t alloc_epoch;    /* that scheduler's buffer epoch at allocation, 0 = not allocated */
} mi_graph_sched_state;
mi_graph_sched_state *graph_sched_state(mi_graph *g);

#ifdef __cplusplus
}
#endif
#endif

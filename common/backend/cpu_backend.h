/* Internal to the CPU backend: its context and the op entry points of the
 * cpu_ops_*.c files. Nothing outside common/backend includes this. */
#ifndef MI_CPU_BACKEND_H
#define MI_CPU_BACKEND_H
#include "backend.h"
#include "threadpool.h"

typedef struct {
    mi_threadpool *tp;
    int n_threads;
    mi_isa isa;               /* best SIMD level of this CPU (cpuid) */
    uint64_t generation;      /* bumped on every buffer alloc/free */
    /* Scratch, sized at split_begin (execute never allocates). */
    void *qbuf;               /* activations quantized to a weight's dot type */
    size_t qbuf_size;
    void *abuf;               /* attention: F32 copies of K/V + per-thread scores */
    size_t abuf_size;
    /* The last quantized activation, reused by the next matmul of the same input
     * (q/k/v and gate/up share their input). Reset at split_begin. */
    const mi_tensor *q_src;
    mi_type q_type;
    int q_pack;               /* weight type whose GEMM repack of it is there too, -1 none */
    bool no_gemm;             /* MINFER_NO_GEMM=1: per-call vec_dot only (A/B) */
    bool no_dot4;             /* MINFER_NO_DOT4=1: a token a vec_dot call, no four-token form (A/B) */
} mi_cpu_ctx;

/* Work below this many output elements runs on the calling thread alone: waking
 * the pool costs more than it saves. */
#define MI_CPU_PAR_MIN 8192

/* Scratch bytes a node needs (qbuf, abuf). */
void cpu_scratch_need(const mi_cpu_ctx *c, const mi_tensor *node, size_t *q, size_t *a);

mi_status cpu_op_input(mi_cpu_ctx *c, mi_tensor *t);
mi_status cpu_op_get_rows(mi_cpu_ctx *c, mi_tensor *t);
mi_status cpu_op_binary(mi_cpu_ctx *c, mi_tensor *t);       /* ADD, MUL */
mi_status cpu_op_rms_norm(mi_cpu_ctx *c, mi_tensor *t);
mi_status cpu_op_rope(mi_cpu_ctx *c, mi_tensor *t);
mi_status cpu_op_unary(mi_cpu_ctx *c, mi_tensor *t);        /* SILU, SWIGLU */
mi_status cpu_op_kv_store(mi_cpu_ctx *c, mi_tensor *t);
mi_status cpu_op_kv_scatter(mi_cpu_ctx *c, mi_tensor *t);
mi_status cpu_op_slice_rows(mi_cpu_ctx *c, mi_tensor *t);
mi_status cpu_op_copy(mi_cpu_ctx *c, mi_tensor *t);
mi_status cpu_op_argmax(mi_cpu_ctx *c, mi_tensor *t);
mi_status cpu_op_topk(mi_cpu_ctx *c, mi_tensor *t);
mi_status cpu_op_matmul(mi_cpu_ctx *c, mi_tensor *t);       /* MATMUL, FFN_SWIGLU */
mi_status cpu_op_matmul_fused(mi_cpu_ctx *c, mi_tensor *t); /* NORM_MATMUL, NORM_FFN_SWIGLU, MATMUL_ADD */
mi_status cpu_op_attn(mi_cpu_ctx *c, mi_tensor *t);
mi_status cpu_op_attn_paged(mi_cpu_ctx *c, mi_tensor *t);
size_t cpu_attn_scratch(const mi_cpu_ctx *c, const mi_tensor *t);
/* ATTN_PAGED: qbuf (the gathered K/V of the largest sequence) and abuf (its attention) bytes */
void cpu_attn_paged_scratch(const mi_cpu_ctx *c, const mi_tensor *t, size_t *q, size_t *a);
size_t cpu_matmul_scratch(const mi_tensor *t);

/* Row-wise RMS statistics in the canonical order (bit-identical to mi_canon_sumsq_host). */
float cpu_sumsq_canon(const float *x, int64_t n);

/* AVX-512 VNNI GEMM (cpu_gemm_avx512.c) for Q4_0 / Q5_0 / Q8_0 weights x Q8_0 activations,
 * Q4_1 / Q5_1 x Q8_1 and Q4_K / Q6_K x Q8_K, used for N >= 4. Activation rows (already in the dot type) are
 * repacked per token first; each thread repacks the weight rows of its chunk into
 * wscratch (cpu_gemm_w_scratch bytes). */
size_t cpu_gemm_act_bytes(mi_type wtype, int64_t K);                       /* per token */
size_t cpu_gemm_w_scratch(mi_type wtype, int64_t K);                       /* per thread */
void cpu_gemm_pack_act(mi_type wtype, const void *act_row, void *dst, int64_t K);
void cpu_gemm_tile(mi_type wtype, const void *w, size_t w_rb, int64_t r0, int64_t r1, const void *act,
                   size_t act_stride, int64_t t0, int64_t t1, int64_t K, float *y, int64_t M, const float *bias,
                   void *wscratch);
/* abuf bytes a GEMM matmul needs (0 if it takes the vec_dot path) */
size_t cpu_matmul_wscratch(const mi_cpu_ctx *c, const mi_tensor *t);

/* Canonical SiLU / SwiGLU, bit-identical to mi_canon_silu / mi_canon_swiglu (cpu_ops_avx512.c). */
void cpu_silu_avx512(const float *x, float *y, int64_t n);
void cpu_swiglu_avx512(const float *g, const float *u, float *y, int64_t n);

/* One attention (head, query) item on AVX-512: K transposed KT [hd][ld], V rows of
 * v_stride floats, n keys, sc scratch of n rounded up to 16; false if hd is not 64/128. */
bool cpu_attn_item_avx512(const float *q, const float *KT, int64_t ld, const float *V, int64_t v_stride, int64_t n,
                          int64_t hd, float scale, float *sc, float *out);

/* Decode item straight from an F16 cache (rows of `stride` halves); false if hd is not a
 * multiple of 16 up to 256. */
bool cpu_attn_item_f16_avx512(const float *q, const uint16_t *K, const uint16_t *V, int64_t stride, int64_t n,
                              int64_t hd, float scale, float *sc, float *out);
/* The same item with key j's row through a block table (table[j / B] * B + j % B): the same
 * operations in the same key order, so the same bits as on a contiguous copy of those rows. */
bool cpu_attn_item_f16_paged_avx512(const float *q, const uint16_t *K, const uint16_t *V, int64_t stride, int64_t n,
                                    int64_t hd, float scale, float *sc, float *out, const int32_t *table, int64_t B);

/* SIMD helpers (cpu_ops_avx2.c), used when c->isa >= MI_ISA_AVX2. */
void cpu_f16_to_f32_avx2(const uint16_t *src, float *dst, size_t n);
float cpu_dot_f32_avx2(const float *a, const float *b, int64_t n);
void cpu_axpy_f32_avx2(float *y, float a, const float *x, int64_t n);  /* y += a*x */

#endif

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
mi_status cpu_op_slice_rows(mi_cpu_ctx *c, mi_tensor *t);
mi_status cpu_op_copy(mi_cpu_ctx *c, mi_tensor *t);
mi_status cpu_op_matmul(mi_cpu_ctx *c, mi_tensor *t);       /* MATMUL, FFN_SWIGLU */
mi_status cpu_op_attn(mi_cpu_ctx *c, mi_tensor *t);
size_t cpu_attn_scratch(const mi_cpu_ctx *c, const mi_tensor *t);
size_t cpu_matmul_scratch(const mi_tensor *t);

/* Row-wise RMS statistics in the canonical order (bit-identical to mi_canon_sumsq_host). */
float cpu_sumsq_canon(const float *x, int64_t n);

/* SIMD helpers (cpu_ops_avx2.c), used when c->isa >= MI_ISA_AVX2. */
void cpu_f16_to_f32_avx2(const uint16_t *src, float *dst, size_t n);
float cpu_dot_f32_avx2(const float *a, const float *b, int64_t n);
void cpu_axpy_f32_avx2(float *y, float a, const float *x, int64_t n);  /* y += a*x */

#endif

/* CPU matmul W [K, M] @ x [K, N] (+ bias) -> [M, N], the fused FFN_SWIGLU, and the decode
 * fusions of the CUDA phases (NORM_MATMUL, NORM_FFN_SWIGLU, MATMUL_ADD), so a fused node is
 * never stranded on a CPU-only path.
 * Activations are quantized once per node (per token row) into the weight type's dot
 * type; the output is cut into (row block x token tile) chunks handed out by the
 * thread pool, so a block of weight rows stays in cache while it meets every token
 * of the tile, and each output element is computed by exactly one thread. */
#include "cpu_backend.h"
#include "../core/mi_canon.h"
#include <string.h>

#define MM_ROWS 16   /* weight rows per chunk, at least (the GEMM's row group) */
#define MM_TOKS 128  /* tokens per tile (prefill): the GEMM repacks a row block once per tile */
#define MM_GEMM_MIN_N 4   /* the GEMM from this many tokens on */

typedef struct {
    mi_tensor *t;
    const mi_tensor *w, *w2;   /* w2: W_up of FFN_SWIGLU */
    const float *x;
    const char *act;           /* [N] rows of act_rb bytes in the dot type */
    size_t act_rb;
    mi_quantize_fn quant;
    char *qdst;
    mi_vec_dot_fn dot, dot2;   /* dot2: W_up's kernel (FFN_SWIGLU) */
    mi_vec_dot4_fn dot4, dot4_2;   /* their four-token forms (NULL: none, or MINFER_NO_DOT4) */
    int64_t K, M, N, n_rb, n_tb;
    int64_t rows;              /* rows per chunk (a multiple of MM_ROWS) */
    bool gemm;                 /* row-interleaved AVX-512 GEMM path (cpu_gemm_avx512.c) */
    char *pack;                /* [N] packed rows of pack_rb bytes */
    size_t pack_rb;
    char *wscratch;            /* per-thread weight repack, wstride bytes each */
    size_t wstride;
    const int32_t *solo;       /* MATMUL src3 (8b): per token, its own sequence's tokens in the step */
} mm_task;

/* The GEMM path needs the AVX-512 level; it is worth it from a few tokens on. Decode stays on vec_dot: measured 20 GB/s vs 10.7 GB/s for a 4x1 block of
 * this kernel on a 151936 x 896 Q4_0 matrix (one thread). */
static bool plain_mm(mi_op op) { return op == MI_OP_MATMUL || op == MI_OP_NORM_MATMUL || op == MI_OP_MATMUL_ADD; }
static bool ffn_op(mi_op op) { return op == MI_OP_FFN_SWIGLU || op == MI_OP_NORM_FFN_SWIGLU; }

static bool gemm_shape(const mi_tensor *t, const mi_tensor *w, const mi_tensor *x) {
    mi_type ty = w->type;
    return plain_mm(t->op) && x->ne[1] >= MM_GEMM_MIN_N &&
           (ty == MI_TYPE_Q4_0 || ty == MI_TYPE_Q5_0 || ty == MI_TYPE_Q8_0 || ty == MI_TYPE_Q4_1 || ty == MI_TYPE_Q5_1 ||
            ty == MI_TYPE_Q4_K || ty == MI_TYPE_Q6_K);
}

static bool mm_types(const mi_tensor *t, const mi_tensor **w, const mi_tensor **w2, const mi_tensor **x) {
    if (ffn_op(t->op)) {
        *w = t->src[0];
        *w2 = t->src[1];
        *x = t->src[2];
        const mi_type_traits *a = mi_type_get((*w)->type), *b = mi_type_get((*w2)->type);
        return a && b && a->vec_dot_type == b->vec_dot_type;
    }
    *w = t->src[0];
    *w2 = NULL;
    *x = t->src[1];
    return mi_type_get((*w)->type) != NULL;
}

/* Q4_0 and Q5_0 share a repack (codes + offset term); Q8_0 weights need the +128 one;
 * Q4_1/Q5_1 share the Q8_1 one (codes, d, s); Q4_K and Q6_K share the Q8_K one */
static int pack_format(mi_type t) {
    if (t == MI_TYPE_Q4_K || t == MI_TYPE_Q6_K) return (int)MI_TYPE_Q8_K;
    if (t == MI_TYPE_Q4_1 || t == MI_TYPE_Q5_1) return (int)MI_TYPE_Q8_1;
    return t == MI_TYPE_Q8_0 ? (int)MI_TYPE_Q8_0 : (int)MI_TYPE_Q4_0;
}

size_t cpu_matmul_wscratch(const mi_cpu_ctx *c, const mi_tensor *t) {
    const mi_tensor *w, *w2, *x;
    if (!mm_types(t, &w, &w2, &x) || !gemm_shape(t, w, x)) return 0;
    return cpu_gemm_w_scratch(w->type, w->ne[0]) * (size_t)c->n_threads;
}

size_t cpu_matmul_scratch(const mi_tensor *t) {
    const mi_tensor *w, *w2, *x;
    if (!mm_types(t, &w, &w2, &x)) return 0;
    mi_type vdt = mi_type_get(w->type)->vec_dot_type;
    if (vdt == MI_TYPE_F32) return 0;
    size_t need = mi_row_size(vdt, w->ne[0]) * (size_t)x->ne[1];
    if (gemm_shape(t, w, x)) need += cpu_gemm_act_bytes(w->type, w->ne[0]) * (size_t)x->ne[1] + 64;
    return need;
}

static void mm_quantize(void *arg, int64_t r, int ith) {
    (void)ith;
    mm_task *k = arg;
    k->quant(k->x + (size_t)r * (size_t)k->K, k->qdst + (size_t)r * k->act_rb, k->K);
    if (k->gemm) cpu_gemm_pack_act(k->w->type, k->qdst + (size_t)r * k->act_rb, k->pack + (size_t)r * k->pack_rb, k->K);
}

/* y rows [r0, r1) of tokens [n0, n1) by vec_dot (MATMUL): four tokens a call where the type has
 * the four-token form (the weight row's blocks unpacked once for them; each token's bits those of
 * its own call, so a batch's decode rows still equal each sequence alone) */
static void mm_rows_vec(const mm_task *k, int64_t r0, int64_t r1, int64_t n0, int64_t n1, size_t wrb, const float *bias,
                        float *y) {
    for (int64_t r = r0; r < r1; r++) {
        const char *wr = (const char *)k->w->data + (size_t)r * wrb;
        int64_t n = n0;
        if (k->dot4)
            for (; n + 4 <= n1; n += 4) {
                float s4[4];
                k->dot4(k->K, s4, wr, k->act + (size_t)n * k->act_rb, k->act_rb);
                for (int j = 0; j < 4; j++) y[(size_t)(n + j) * (size_t)k->M + (size_t)r] = bias ? s4[j] + bias[r] : s4[j];
            }
        for (; n < n1; n++) {
            float s;
            k->dot(k->K, &s, wr, k->act + (size_t)n * k->act_rb);
            y[(size_t)n * (size_t)k->M + (size_t)r] = bias ? s + bias[r] : s;
        }
    }
}

/* a token of a step of many sequences (src3) takes the GEMM only if its sequence alone would */
static bool mm_token_gemm(const mm_task *k, int64_t n) { return !k->solo || k->solo[n] >= MM_GEMM_MIN_N; }

/* chunk = token tile x row block, tile-major: concurrent chunks share the activation tile */
static void mm_chunk(void *arg, int64_t c, int ith) {
    mm_task *k = arg;
    const mi_tensor *t = k->t;
    size_t wrb = mi_row_size(k->w->type, k->K);
    const float *bias = (t->op == MI_OP_MATMUL && t->src[2]) ? t->src[2]->data : NULL;
    float *y = t->data;
    {
        int64_t tile = c / k->n_rb, rblk = c % k->n_rb;
        int64_t r0 = rblk * k->rows, r1 = r0 + k->rows < k->M ? r0 + k->rows : k->M;
        int64_t t0 = tile * MM_TOKS, t1 = t0 + MM_TOKS < k->N ? t0 + MM_TOKS : k->N;
        if (k->gemm) {
            /* runs of tokens by path: the GEMM sums blocks in another float order than vec_dot,
             * so a token takes the path its sequence alone would (one run without src3) */
            for (int64_t a = t0; a < t1;) {
                const bool g = mm_token_gemm(k, a);
                int64_t e = a + 1;
                while (e < t1 && mm_token_gemm(k, e) == g) e++;
                if (g)
                    cpu_gemm_tile(k->w->type, k->w->data, wrb, r0, r1, k->pack, k->pack_rb, a, e, k->K, y, k->M, bias,
                                  k->wscratch + (size_t)ith * k->wstride);
                else
                    mm_rows_vec(k, r0, r1, a, e, wrb, bias, y);
                a = e;
            }
        } else if (t->op == MI_OP_MATMUL) {
            mm_rows_vec(k, r0, r1, t0, t1, wrb, bias, y);
        } else {
            size_t wrb2 = mi_row_size(k->w2->type, k->K);
            for (int64_t r = r0; r < r1; r++) {
                const char *wg = (const char *)k->w->data + (size_t)r * wrb;
                const char *wu = (const char *)k->w2->data + (size_t)r * wrb2;
                int64_t n = t0;
                if (k->dot4 && k->dot4_2)
                    for (; n + 4 <= t1; n += 4) {
                        float g[4], u[4];
                        const char *a = k->act + (size_t)n * k->act_rb;
                        k->dot4(k->K, g, wg, a, k->act_rb);
                        k->dot4_2(k->K, u, wu, a, k->act_rb);
                        for (int j = 0; j < 4; j++) y[(size_t)(n + j) * (size_t)k->M + (size_t)r] = mi_canon_swiglu(g[j], u[j]);
                    }
                for (; n < t1; n++) {
                    float g, u;
                    const char *a = k->act + (size_t)n * k->act_rb;
                    k->dot(k->K, &g, wg, a);
                    k->dot2(k->K, &u, wu, a);
                    y[(size_t)n * (size_t)k->M + (size_t)r] = mi_canon_swiglu(g, u);
                }
            }
        }
    }
}

mi_status cpu_op_matmul(mi_cpu_ctx *c, mi_tensor *t) {
    mm_task k;
    memset(&k, 0, sizeof k);
    const mi_tensor *x;
    if (!mm_types(t, &k.w, &k.w2, &x))
        return mi_err(MI_ERR_UNSUPPORTED, "%s %s: weight types differ in dot type", mi_op_name(t->op), t->name);
    k.t = t;
    k.solo = t->op == MI_OP_MATMUL && t->src[3] ? t->src[3]->data : NULL;
    k.K = k.w->ne[0];
    k.M = k.w->ne[1];
    k.N = x->ne[1];
    k.dot = mi_get_vec_dot(k.w->type, MI_ISA_BEST);
    k.dot2 = k.w2 ? mi_get_vec_dot(k.w2->type, MI_ISA_BEST) : NULL;
    k.dot4 = c->no_dot4 ? NULL : mi_get_vec_dot4(k.w->type, MI_ISA_BEST);
    k.dot4_2 = c->no_dot4 || !k.w2 ? NULL : mi_get_vec_dot4(k.w2->type, MI_ISA_BEST);
    if (!k.dot || (k.w2 && !k.dot2))
        return mi_err(MI_ERR_UNSUPPORTED, "matmul %s: no dot kernel for %s", t->name, mi_type_name(k.w->type));
    mi_type vdt = mi_type_get(k.w->type)->vec_dot_type;
    int64_t work = k.M * k.N * (k.K / 32 + 1);
    if (vdt == MI_TYPE_F32) {
        k.act = x->data;
        k.act_rb = (size_t)k.K * sizeof(float);
    } else {
        k.act_rb = mi_row_size(vdt, k.K);
        size_t need = k.act_rb * (size_t)k.N;
        if (need > c->qbuf_size)
            return mi_err(MI_ERR_INTERNAL, "matmul %s: scratch %zu B not reserved (have %zu)", t->name, need,
                          c->qbuf_size);
        k.act = c->qbuf;
        k.gemm = !c->no_gemm && c->isa >= MI_ISA_AVX512 && gemm_shape(t, k.w, x);
        if (k.gemm) {
            k.pack_rb = cpu_gemm_act_bytes(k.w->type, k.K);
            uintptr_t p = (uintptr_t)((char *)c->qbuf + need);
            k.pack = (char *)((p + 63) & ~(uintptr_t)63);
            k.wstride = cpu_gemm_w_scratch(k.w->type, k.K);
            k.wscratch = c->abuf;
            if ((size_t)(k.pack - (char *)c->qbuf) + k.pack_rb * (size_t)k.N > c->qbuf_size ||
                k.wstride * (size_t)c->n_threads > c->abuf_size)
                return mi_err(MI_ERR_INTERNAL, "matmul %s: GEMM scratch not reserved", t->name);
        }
        if (c->q_src != x || c->q_type != vdt || (k.gemm && c->q_pack != pack_format(k.w->type))) {
            k.quant = mi_get_quantize_act(vdt, MI_ISA_BEST);
            if (!k.quant)
                return mi_err(MI_ERR_UNSUPPORTED, "matmul %s: no activation quantizer for %s", t->name,
                              mi_type_name(vdt));
            k.x = x->data;
            k.qdst = c->qbuf;
            if (k.N == 1)
                mm_quantize(&k, 0, 0);
            else
                threadpool_chunks(c->tp, mm_quantize, &k, k.N);
            c->q_src = x;
            c->q_type = vdt;
            c->q_pack = k.gemm ? pack_format(k.w->type) : -1;
        }
    }
    /* Decode: about 8 chunks per thread. Claiming a chunk costs a shared-cache-line atomic
     * (~100 ns when threads alternate), which 16-row chunks paid ~28k times a token. */
    k.rows = MM_ROWS;
    if (k.N < 4) {
        int64_t want = (k.M + (int64_t)c->n_threads * 8 - 1) / ((int64_t)c->n_threads * 8);
        k.rows = (want + MM_ROWS - 1) / MM_ROWS * MM_ROWS;
    }
    k.n_rb = (k.M + k.rows - 1) / k.rows;
    k.n_tb = (k.N + MM_TOKS - 1) / MM_TOKS;
    int64_t chunks = k.n_rb * k.n_tb;
    if (work < MI_CPU_PAR_MIN) {
        for (int64_t ch = 0; ch < chunks; ch++) mm_chunk(&k, ch, 0);
    } else {
        threadpool_chunks(c->tp, mm_chunk, &k, chunks);
    }
    return MI_OK;
}

/* NORM_MATMUL, NORM_FFN_SWIGLU: x's RMS norm into a temporary buffer (cpu_op_rms_norm on a node
 * made for it), then the matmul on it; MATMUL_ADD: the matmul, then r + y. The unfused nodes'
 * arithmetic in their order, so the results are bit-identical to them. */
mi_status cpu_op_matmul_fused(mi_cpu_ctx *c, mi_tensor *t) {
    mi_tensor mm = *t;
    if (t->op == MI_OP_MATMUL_ADD) {
        mm.op = MI_OP_MATMUL;
        mm.src[2] = NULL;
        MI_TRY(cpu_op_matmul(c, &mm));
        const float *r = t->src[2]->data;
        float *y = t->data;
        for (int64_t i = 0; i < mi_nelements(t); i++) y[i] = r[i] + y[i];
        return MI_OK;
    }
    const int xi = t->op == MI_OP_NORM_FFN_SWIGLU ? 2 : 1;
    mi_tensor xn = *t->src[xi];
    xn.op = MI_OP_RMS_NORM;
    memset(xn.src, 0, sizeof xn.src);
    xn.src[0] = t->src[xi];
    xn.src[1] = t->src[3];
    memset(xn.p, 0, sizeof xn.p);
    xn.p[0] = (int32_t)xn.ne[0];
    xn.p[1] = t->p[1];   /* eps */
    xn.data = malloc(mi_nbytes(&xn));
    if (!xn.data) return mi_err(MI_ERR_NOMEM, "%s %s: no memory for the normalized input", mi_op_name(t->op), t->name);
    mi_status st = cpu_op_rms_norm(c, &xn);
    mm.op = xi == 2 ? MI_OP_FFN_SWIGLU : MI_OP_MATMUL;
    mm.src[xi] = &xn;
    mm.src[3] = NULL;
    if (st == MI_OK) st = cpu_op_matmul(c, &mm);
    c->q_src = NULL;   /* the quantized row cache must never match xn's address again */
    free(xn.data);
    return st;
}

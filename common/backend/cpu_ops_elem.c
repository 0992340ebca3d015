/* CPU ops other than matmul and attention: input, lookups, elementwise, norms, RoPE,
 * KV store, slices, argmax. All of them are in the bit-identical tier (docs/NUMERICS.md):
 * arithmetic goes through mi_canon.h in the documented order. */
#include "cpu_backend.h"
#include "../core/mi_canon.h"
#include "../sampler/sampler.h"
#include <string.h>

typedef void (*rows_fn)(mi_tensor *t, int64_t r0, int64_t r1);

typedef struct {
    mi_tensor *t;
    int64_t n_rows, per;
    rows_fn fn;
} rows_task;

static void rows_chunk(void *arg, int64_t chunk, int ith) {
    (void)ith;
    rows_task *k = arg;
    int64_t r0 = chunk * k->per, r1 = r0 + k->per;
    if (r1 > k->n_rows) r1 = k->n_rows;
    if (r0 < r1) k->fn(k->t, r0, r1);
}

/* Run fn over [0, n_rows) in a few chunks per thread when the work is worth it. */
static void par_rows(mi_cpu_ctx *c, mi_tensor *t, int64_t n_rows, int64_t work, rows_fn fn) {
    if (c->n_threads <= 1 || work < MI_CPU_PAR_MIN || n_rows < 2) {
        fn(t, 0, n_rows);
        return;
    }
    int64_t n_chunks = (int64_t)c->n_threads * 4;
    if (n_chunks > n_rows) n_chunks = n_rows;
    rows_task k = {t, n_rows, (n_rows + n_chunks - 1) / n_chunks, fn};
    threadpool_chunks(c->tp, rows_chunk, &k, (n_rows + k.per - 1) / k.per);
}

mi_status cpu_op_input(mi_cpu_ctx *c, mi_tensor *t) {
    (void)c;
    if (!t->host_src) return mi_err(MI_ERR_INVALID, "input %s: no host data set", t->name);
    memcpy(t->data, t->host_src, mi_nbytes(t));
    return MI_OK;
}

/* table [E, V] any type, ids I32 [N] -> F32 [E, N] */
static void get_rows_rows(mi_tensor *t, int64_t r0, int64_t r1) {
    const mi_tensor *tab = t->src[0];
    const int32_t *ids = t->src[1]->data;
    size_t rb = mi_row_size(tab->type, tab->ne[0]);
    for (int64_t r = r0; r < r1; r++)
        mi_dequantize_row(tab->type, (const char *)tab->data + (size_t)ids[r] * rb,
                          (float *)t->data + (size_t)r * (size_t)t->ne[0], tab->ne[0]);
}

mi_status cpu_op_get_rows(mi_cpu_ctx *c, mi_tensor *t) {
    const int32_t *ids = t->src[1]->data;
    for (int64_t r = 0; r < t->ne[1]; r++)
        if (ids[r] < 0 || ids[r] >= t->src[0]->ne[1])
            return mi_err(MI_ERR_INVALID, "get_rows %s: id %d at %lld outside table %s of %lld rows", t->name,
                          ids[r], (long long)r, t->src[0]->name, (long long)t->src[0]->ne[1]);
    par_rows(c, t, t->ne[1], mi_nelements(t), get_rows_rows);
    return MI_OK;
}

/* a [D, N] op b [D, N] or [D, 1] */
static void binary_rows(mi_tensor *t, int64_t r0, int64_t r1) {
    const mi_tensor *a = t->src[0], *b = t->src[1];
    size_t D = (size_t)t->ne[0];
    bool bc = b->ne[1] == 1;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = (const float *)a->data + (size_t)r * D;
        const float *y = (const float *)b->data + (bc ? 0 : (size_t)r * D);
        float *o = (float *)t->data + (size_t)r * D;
        if (t->op == MI_OP_ADD)
            for (size_t i = 0; i < D; i++) o[i] = x[i] + y[i];
        else
            for (size_t i = 0; i < D; i++) o[i] = x[i] * y[i];
    }
}

mi_status cpu_op_binary(mi_cpu_ctx *c, mi_tensor *t) {
    par_rows(c, t, t->ne[1], mi_nelements(t), binary_rows);
    return MI_OK;
}

/* Lanes laid out as in mi_canon_sumsq_host (lane j: i = j, j+32, ... increasing),
 * written block-wise so the compiler can vectorise across lanes; the tree is the same. */
float cpu_sumsq_canon(const float *x, int64_t n) {
    float p[MI_CANON_LANES];
    for (int j = 0; j < MI_CANON_LANES; j++) p[j] = 0.0f;
    int64_t i = 0;
    for (; i + MI_CANON_LANES <= n; i += MI_CANON_LANES)
        for (int j = 0; j < MI_CANON_LANES; j++) {
            float sq = x[i + j] * x[i + j];
            p[j] = p[j] + sq;
        }
    for (int j = 0; i + j < n; j++) {
        float sq = x[i + j] * x[i + j];
        p[j] = p[j] + sq;
    }
    for (int off = MI_CANON_LANES / 2; off >= 1; off /= 2)
        for (int j = 0; j < off; j++) p[j] = p[j] + p[j + off];
    return p[0];
}

/* x [D, N] viewed as rows of G = p[0] elements; y = (x * scale) * w */
static void rms_rows(mi_tensor *t, int64_t r0, int64_t r1) {
    size_t G = (size_t)mi_norm_group(t);
    float eps = mi_norm_eps(t);
    const float *w = t->src[1]->data;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = (const float *)t->src[0]->data + (size_t)r * G;
        float *y = (float *)t->data + (size_t)r * G;
        float scale = mi_canon_rms_scale(cpu_sumsq_canon(x, (int64_t)G), (int64_t)G, eps);
        for (size_t i = 0; i < G; i++) {
            float xs = x[i] * scale;
            y[i] = xs * w[i];
        }
    }
}

mi_status cpu_op_rms_norm(mi_cpu_ctx *c, mi_tensor *t) {
    par_rows(c, t, mi_nelements(t) / mi_norm_group(t), mi_nelements(t), rms_rows);
    return MI_OK;
}

/* x [hd*H, N], one token per row; pairs (2i, 2i+1) normal, (i, i+n_rot/2) NEOX */
#define ROPE_MAX_PAIRS 512
static void rope_rows(mi_tensor *t, int64_t r0, int64_t r1) {
    int hd = (int)mi_rope_head_dim(t), mode = mi_rope_mode(t), n_rot = mi_rope_n_rot(t);
    float base = mi_rope_freq_base(t);
    int64_t H = t->ne[0] / hd;
    const int32_t *pos = t->src[1]->data;
    float cs[ROPE_MAX_PAIRS], sn[ROPE_MAX_PAIRS];
    int half = n_rot / 2;
    for (int64_t r = r0; r < r1; r++) {
        for (int i = 0; i < half; i++) mi_canon_rope_cs(pos[r], i, n_rot, base, &cs[i], &sn[i]);
        for (int64_t h = 0; h < H; h++) {
            size_t off = (size_t)r * (size_t)t->ne[0] + (size_t)h * (size_t)hd;
            const float *x = (const float *)t->src[0]->data + off;
            float *y = (float *)t->data + off;
            for (int i = 0; i < half; i++) {
                int i0 = mode == MI_ROPE_NEOX ? i : 2 * i;
                int i1 = mode == MI_ROPE_NEOX ? i + half : 2 * i + 1;
                float x0 = x[i0], x1 = x[i1];
                float a = x0 * cs[i], b = x1 * sn[i], d = x0 * sn[i], e = x1 * cs[i];
                y[i0] = a - b;
                y[i1] = d + e;
            }
            for (int i = n_rot; i < hd; i++) y[i] = x[i];
        }
    }
}

mi_status cpu_op_rope(mi_cpu_ctx *c, mi_tensor *t) {
    if (mi_rope_n_rot(t) / 2 > ROPE_MAX_PAIRS)
        return mi_err(MI_ERR_UNSUPPORTED, "rope %s: n_rot %d above the CPU limit %d", t->name, mi_rope_n_rot(t),
                      2 * ROPE_MAX_PAIRS);
    par_rows(c, t, t->ne[1], mi_nelements(t) * 4, rope_rows);
    return MI_OK;
}

static void unary_rows(mi_tensor *t, int64_t r0, int64_t r1) {
    size_t D = (size_t)t->ne[0];
    if (mi_cpu_best_isa() >= MI_ISA_AVX512) {   /* same bits, 16 lanes at a time */
        size_t off = (size_t)r0 * D, n = (size_t)(r1 - r0) * D;
        if (t->op == MI_OP_SILU)
            cpu_silu_avx512((const float *)t->src[0]->data + off, (float *)t->data + off, (int64_t)n);
        else
            cpu_swiglu_avx512((const float *)t->src[0]->data + off, (const float *)t->src[1]->data + off,
                              (float *)t->data + off, (int64_t)n);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const float *g = (const float *)t->src[0]->data + (size_t)r * D;
        float *o = (float *)t->data + (size_t)r * D;
        if (t->op == MI_OP_SILU) {
            for (size_t i = 0; i < D; i++) o[i] = mi_canon_silu(g[i]);
        } else {
            const float *u = (const float *)t->src[1]->data + (size_t)r * D;
            for (size_t i = 0; i < D; i++) o[i] = mi_canon_swiglu(g[i], u[i]);
        }
    }
}

mi_status cpu_op_unary(mi_cpu_ctx *c, mi_tensor *t) {
    par_rows(c, t, t->ne[1], mi_nelements(t) * 4, unary_rows);
    return MI_OK;
}

/* new rows [row, N] -> cache rows n_past .. n_past+N-1 */
static void kv_rows(mi_tensor *t, int64_t r0, int64_t r1) {
    const mi_tensor *x = t->src[0], *cache = t->src[1];
    size_t D = (size_t)x->ne[0];
    size_t n_past = (size_t)mi_node_n_past(t);
    for (int64_t r = r0; r < r1; r++) {
        const float *s = (const float *)x->data + (size_t)r * D;
        if (cache->type == MI_TYPE_F16) {
            uint16_t *d = (uint16_t *)cache->data + (n_past + (size_t)r) * D;
            for (size_t i = 0; i < D; i++) d[i] = mi_f32_to_f16(s[i]);
        } else {
            memcpy((float *)cache->data + (n_past + (size_t)r) * D, s, D * sizeof(float));
        }
    }
}

mi_status cpu_op_kv_store(mi_cpu_ctx *c, mi_tensor *t) {
    if (!t->src[1]->data) return mi_err(MI_ERR_INVALID, "kv_store %s: cache %s has no memory", t->name, t->src[1]->name);
    par_rows(c, t, t->src[0]->ne[1], mi_nelements(t->src[0]) * 2, kv_rows);
    return MI_OK;
}

/* new rows [row, N] -> cache rows src2[0 .. N-1], converted as kv_rows converts */
static void kv_scatter_rows(mi_tensor *t, int64_t r0, int64_t r1) {
    const mi_tensor *x = t->src[0], *cache = t->src[1];
    const int32_t *dst = t->src[2]->data;
    const size_t D = (size_t)x->ne[0];
    for (int64_t r = r0; r < r1; r++) {
        const float *s = (const float *)x->data + (size_t)r * D;
        const size_t row = (size_t)dst[r];
        if (cache->type == MI_TYPE_F16) {
            uint16_t *d = (uint16_t *)cache->data + row * D;
            for (size_t i = 0; i < D; i++) d[i] = mi_f32_to_f16(s[i]);
        } else {
            memcpy((float *)cache->data + row * D, s, D * sizeof(float));
        }
    }
}

mi_status cpu_op_kv_scatter(mi_cpu_ctx *c, mi_tensor *t) {
    const mi_tensor *cache = t->src[1];
    if (!cache->data) return mi_err(MI_ERR_INVALID, "kv_scatter %s: cache %s has no memory", t->name, cache->name);
    const int32_t *dst = t->src[2]->data;
    for (int64_t r = 0; r < t->src[0]->ne[1]; r++)
        if (dst[r] < 0 || dst[r] >= cache->ne[1])
            return mi_err(MI_ERR_INVALID, "kv_scatter %s: row %lld goes to cache row %d of %lld", t->name, (long long)r,
                          dst[r], (long long)cache->ne[1]);
    par_rows(c, t, t->src[0]->ne[1], mi_nelements(t->src[0]) * 2, kv_scatter_rows);
    return MI_OK;
}

mi_status cpu_op_slice_rows(mi_cpu_ctx *c, mi_tensor *t) {
    (void)c;
    size_t rb = mi_row_size(t->type, t->ne[0]);
    memcpy(t->data, (const char *)t->src[0]->data + (size_t)mi_slice_first(t) * rb, rb * (size_t)mi_slice_count(t));
    return MI_OK;
}

mi_status cpu_op_copy(mi_cpu_ctx *c, mi_tensor *t) {
    (void)c;
    if (t->data != t->src[0]->data) memcpy(t->data, t->src[0]->data, mi_nbytes(t));
    return MI_OK;
}

/* x [V, N] -> I32 [1, N]: MI_OP_ARGMAX's rule (graph.h), row by row */
static void argmax_rows(mi_tensor *t, int64_t r0, int64_t r1) {
    const int64_t V = t->src[0]->ne[0];
    for (int64_t r = r0; r < r1; r++) {
        const float *x = (const float *)t->src[0]->data + (size_t)r * (size_t)V;
        int64_t best = -1;
        float bv = 0.0f;
        for (int64_t i = 0; i < V; i++)
            if (x[i] == x[i] && (best < 0 || x[i] > bv)) {
                bv = x[i];
                best = i;
            }
        ((int32_t *)t->data)[r] = (best >= 0 && isfinite(bv)) ? (int32_t)best : -1;
    }
}

mi_status cpu_op_argmax(mi_cpu_ctx *c, mi_tensor *t) {
    par_rows(c, t, t->ne[1], mi_nelements(t->src[0]), argmax_rows);
    return MI_OK;
}

/* x [V, N], scale [1, N] -> [2K, N]: MI_OP_TOPK (graph.h), the sampler's own selection
 * (mi_sample_top_k), so a draw from these candidates is the draw from the whole row */
static void topk_rows(mi_tensor *t, int64_t r0, int64_t r1) {
    const int64_t V = t->src[0]->ne[0], K = t->p[0];
    mi_cand cand[MI_TOPK_MAX];
    for (int64_t r = r0; r < r1; r++) {
        const float *x = (const float *)t->src[0]->data + (size_t)r * (size_t)V;
        const float scale = ((const float *)t->src[1]->data)[r];
        mi_sample_top_k_pack(x, V, scale, K, cand, (float *)t->data + (size_t)r * (size_t)(2 * K));
    }
}

mi_status cpu_op_topk(mi_cpu_ctx *c, mi_tensor *t) {
    par_rows(c, t, t->ne[1], mi_nelements(t->src[0]), topk_rows);
    return MI_OK;
}

/* CPU causal GQA attention over the KV cache (tolerance tier, docs/NUMERICS.md).
 * The K/V rows in use (0 .. n_past+N) are first copied to F32 scratch (converting an F16
 * cache), once per node; decode on an F16 cache with AVX-512 reads it in place instead
 * (a conversion pass would touch the whole context every token). Decode takes one dot
 * per key. Prefill on
 * AVX-512 (N >= 8, head_dim 64/128) stores K transposed per KV head, KT[kvh][d][j], so
 * 16 keys' scores come from head_dim FMAs with no horizontal sums. Work items are
 * (head, query) pairs handed out as pool chunks (causal rows differ in length). */
#include "cpu_backend.h"
#include "../core/mi_fp16.h"
#include <math.h>
#include <string.h>

#define KV_ROW_MAX 4096   /* conversion buffer for one cache row (hd * Hkv) on the stack */

typedef struct {
    mi_cpu_ctx *c;
    mi_tensor *t;
    const float *K, *V;        /* [row_kv, n_kv] F32 rows */
    float *KT;                 /* transposed path: [Hkv][hd][ld] */
    int64_t ld;
    float *thr;                /* per-thread [ld + hd + 16] */
    int64_t n_kv, row_kv;
    int64_t conv_per;          /* rows per conversion chunk */
    bool conv_k, conv_v, trans;
    bool direct16;             /* decode on an F16 cache read in place (AVX-512) */
} attn_task;


static bool use_trans(const mi_cpu_ctx *c, const mi_tensor *t) {
    int64_t hd = mi_attn_head_dim(t);
    return c->isa >= MI_ISA_AVX512 && t->ne[1] >= 8 && (hd == 64 || hd == 128) && hd * mi_attn_n_head_kv(t) <= KV_ROW_MAX;
}

static bool use_direct16(const mi_cpu_ctx *c, const mi_tensor *t) {
    int64_t hd = mi_attn_head_dim(t);
    return c->isa >= MI_ISA_AVX512 && !use_trans(c, t) && t->src[1]->type == MI_TYPE_F16 &&
           t->src[2]->type == MI_TYPE_F16 && hd % 16 == 0 && hd <= 256;
}

static int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }

size_t cpu_attn_scratch(const mi_cpu_ctx *c, const mi_tensor *t) {
    int64_t n_kv = mi_node_n_past(t) + t->ne[1], ld = pad16(n_kv);
    int64_t hd = mi_attn_head_dim(t), row_kv = hd * mi_attn_n_head_kv(t);
    size_t need = (size_t)c->n_threads * (size_t)(ld + hd + 16) * sizeof(float);
    if (use_trans(c, t)) return need + 2 * (size_t)ld * (size_t)row_kv * sizeof(float);
    if (use_direct16(c, t)) return need;
    if (t->src[1]->type == MI_TYPE_F16 || t->src[2]->type == MI_TYPE_F16)
        need += 2 * (size_t)n_kv * (size_t)row_kv * sizeof(float);
    return need;
}

static void convert_rows(const mi_cpu_ctx *c, const mi_tensor *src, size_t off, float *dst, size_t n) {
    if (src->type == MI_TYPE_F32) {
        memcpy(dst, (const float *)src->data + off, n * sizeof(float));
    } else if (c->isa >= MI_ISA_AVX2) {
        cpu_f16_to_f32_avx2((const uint16_t *)src->data + off, dst, n);
    } else {
        const uint16_t *s = (const uint16_t *)src->data + off;
        for (size_t i = 0; i < n; i++) dst[i] = mi_f16_to_f32(s[i]);
    }
}

static void attn_convert(void *arg, int64_t chunk, int ith) {
    (void)ith;
    attn_task *k = arg;
    const mi_tensor *t = k->t;
    int64_t r0 = chunk * k->conv_per, r1 = r0 + k->conv_per;
    if (r1 > k->n_kv) r1 = k->n_kv;
    if (r0 >= r1) return;
    size_t off = (size_t)r0 * (size_t)k->row_kv, n = (size_t)(r1 - r0) * (size_t)k->row_kv;
    if (k->conv_v) convert_rows(k->c, t->src[2], off, (float *)k->V + off, n);
    if (k->trans) {
        float row[KV_ROW_MAX];
        for (int64_t j = r0; j < r1; j++) {
            convert_rows(k->c, t->src[1], (size_t)j * (size_t)k->row_kv, row, (size_t)k->row_kv);
            /* KT[kvh][d][j]: element e = kvh*hd + d of the row goes to column j of line e */
            for (int64_t e = 0; e < k->row_kv; e++) k->KT[(size_t)e * (size_t)k->ld + (size_t)j] = row[e];
        }
        if (r1 == k->n_kv)   /* zero the padding columns (read, then masked, by the kernel) */
            for (int64_t e = 0; e < k->row_kv; e++)
                for (int64_t j = k->n_kv; j < k->ld; j++) k->KT[(size_t)e * (size_t)k->ld + (size_t)j] = 0.0f;
    } else if (k->conv_k) {
        convert_rows(k->c, t->src[1], off, (float *)k->K + off, n);
    }
}

static float dot_f32(const mi_cpu_ctx *c, const float *a, const float *b, int64_t n) {
    if (c->isa >= MI_ISA_AVX2) return cpu_dot_f32_avx2(a, b, n);
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_f32(const mi_cpu_ctx *c, float *y, float a, const float *x, int64_t n) {
    if (c->isa >= MI_ISA_AVX2) {
        cpu_axpy_f32_avx2(y, a, x, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* one (head, query) item per chunk; ith picks the thread's score scratch */
static void attn_item(void *arg, int64_t it, int ith) {
    attn_task *k = arg;
    const mi_tensor *t = k->t;
    int64_t n_past = mi_node_n_past(t), hd = mi_attn_head_dim(t), Hq = mi_attn_n_head(t), Hkv = mi_attn_n_head_kv(t);
    int64_t N = t->ne[1], group = Hq / Hkv;
    float scale = mi_attn_scale(t);
    float *sc = k->thr + (size_t)ith * (size_t)(k->ld + hd + 16);
    float *acc = sc + k->ld;
    int64_t h = it / N, i = it % N, kvh = h / group;
    const float *q = (const float *)t->src[0]->data + (size_t)i * (size_t)(Hq * hd) + (size_t)(h * hd);
    float *o = (float *)t->data + (size_t)i * (size_t)(Hq * hd) + (size_t)(h * hd);
    int64_t n = n_past + i + 1;
    if (k->direct16) {
        const uint16_t *K16 = (const uint16_t *)t->src[1]->data + (size_t)(kvh * hd);
        const uint16_t *V16 = (const uint16_t *)t->src[2]->data + (size_t)(kvh * hd);
        if (cpu_attn_item_f16_avx512(q, K16, V16, k->row_kv, n, hd, scale, sc, o)) return;
    }
    const float *vb = k->V + (size_t)(kvh * hd);
    if (k->trans &&
        cpu_attn_item_avx512(q, k->KT + (size_t)(kvh * hd) * (size_t)k->ld, k->ld, vb, k->row_kv, n, hd, scale, sc, o))
        return;
    const float *kb = k->K + (size_t)(kvh * hd);
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        float s = dot_f32(k->c, q, kb + (size_t)j * (size_t)k->row_kv, hd) * scale;
        sc[j] = s;
        if (s > m) m = s;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        float e = expf(sc[j] - m);
        sc[j] = e;
        sum += e;
    }
    for (int64_t d = 0; d < hd; d++) acc[d] = 0.0f;
    for (int64_t j = 0; j < n; j++) axpy_f32(k->c, acc, sc[j], vb + (size_t)j * (size_t)k->row_kv, hd);
    float inv = 1.0f / sum;
    for (int64_t d = 0; d < hd; d++) o[d] = acc[d] * inv;
}

/* q [hd*Hq, N], K/V [hd*Hkv, n_ctx] -> [hd*Hq, N] */
mi_status cpu_op_attn(mi_cpu_ctx *c, mi_tensor *t) {
    size_t need = cpu_attn_scratch(c, t);
    if (need > c->abuf_size)
        return mi_err(MI_ERR_INTERNAL, "attn %s: scratch %zu B not reserved (have %zu): split_begin not called",
                      t->name, need, c->abuf_size);
    attn_task k;
    memset(&k, 0, sizeof k);
    k.c = c;
    k.t = t;
    k.n_kv = mi_node_n_past(t) + t->ne[1];
    k.ld = pad16(k.n_kv);
    k.row_kv = mi_attn_head_dim(t) * mi_attn_n_head_kv(t);
    k.trans = use_trans(c, t);
    k.direct16 = use_direct16(c, t);
    float *base = c->abuf;
    if (k.direct16) {
        /* no conversion: items read the cache in place */
    } else if (k.trans) {
        k.KT = base;
        base += (size_t)k.ld * (size_t)k.row_kv;
        k.V = base;
        base += (size_t)k.ld * (size_t)k.row_kv;
        k.conv_v = true;
    } else {
        k.conv_k = t->src[1]->type == MI_TYPE_F16;
        k.conv_v = t->src[2]->type == MI_TYPE_F16;
        if (k.conv_k || k.conv_v) {
            k.K = k.conv_k ? base : t->src[1]->data;
            k.V = k.conv_v ? base + (size_t)(k.n_kv * k.row_kv) : t->src[2]->data;
            base += 2 * (size_t)(k.n_kv * k.row_kv);
        } else {
            k.K = t->src[1]->data;
            k.V = t->src[2]->data;
        }
    }
    if (k.trans || k.conv_k || k.conv_v) {
        int64_t work = k.n_kv * k.row_kv * 2;
        int64_t n_chunks = work < MI_CPU_PAR_MIN ? 1 : (int64_t)c->n_threads * 2;
        if (n_chunks > k.n_kv) n_chunks = k.n_kv;
        k.conv_per = (k.n_kv + n_chunks - 1) / n_chunks;
        threadpool_chunks(c->tp, attn_convert, &k, (k.n_kv + k.conv_per - 1) / k.conv_per);
    }
    k.thr = base;
    threadpool_chunks(c->tp, attn_item, &k, mi_attn_n_head(t) * t->ne[1]);
    return MI_OK;
}

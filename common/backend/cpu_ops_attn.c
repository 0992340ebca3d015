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
#include <stdlib.h>

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

/* ---------------- ATTN_PAGED (phase 8b) ----------------
 * Each sequence's rows take the path (decode in place, transposed K, converted rows) and the
 * arithmetic that the sequence alone would. Where that is the in-place decode item, its items read
 * the rows through the block table (paged16_item, all such sequences in one pool call); otherwise
 * its K and V rows 0 .. n_kv-1 are gathered into a contiguous copy (exact, in the cache's type)
 * and the single-sequence op above runs on that copy, with the sequence's rows of q and output. */

/* the ATTN node the sequence alone would run: t rows of q at n_past over caches of n_kv rows */
static void paged_node(const mi_tensor *t, mi_tensor *node, mi_tensor *q, mi_tensor *k, mi_tensor *v, int64_t first,
                       int64_t rows, int64_t n_past, void *kbuf, void *vbuf) {
    const int64_t row_q = t->ne[0], row_kv = mi_attn_head_dim(t) * mi_attn_n_head_kv(t), n_kv = n_past + rows;
    const int64_t qne[2] = {row_q, rows}, kne[2] = {row_kv, n_kv};
    tensor_init(q, "paged_q", MI_TYPE_F32, 2, qne);
    q->data = (float *)t->src[0]->data + (size_t)first * (size_t)row_q;
    tensor_init(k, "paged_k", t->src[1]->type, 2, kne);
    k->data = kbuf;
    tensor_init(v, "paged_v", t->src[2]->type, 2, kne);
    v->data = vbuf;
    tensor_init(node, t->name, MI_TYPE_F32, 2, qne);
    node->op = MI_OP_ATTN;
    node->data = (float *)t->data + (size_t)first * (size_t)row_q;
    node->src[0] = q;
    node->src[1] = k;
    node->src[2] = v;
    memcpy(node->p, t->p, sizeof node->p);
    node->p[0] = (int32_t)n_past;
}

/* abuf: the attention scratch of the largest sequence; qbuf: its gathered K and V */
void cpu_attn_paged_scratch(const mi_cpu_ctx *c, const mi_tensor *t, size_t *q, size_t *a) {
    const int64_t max_kv = t->p[6], max_rows = t->p[7];
    mi_tensor qt, kt, vt, node;
    *a = 0;
    const int64_t rows_to_try[3] = {1, max_rows < 8 ? max_rows : 8, max_rows};   /* every path the scratch can take */
    for (int i = 0; i < 3; i++) {
        const int64_t r = rows_to_try[i] < max_kv ? rows_to_try[i] : max_kv;
        paged_node(t, &node, &qt, &kt, &vt, 0, r, max_kv - r, NULL, NULL);
        const size_t need = cpu_attn_scratch(c, &node);
        if (need > *a) *a = need;
    }
    const size_t esz = t->src[1]->type == MI_TYPE_F16 ? 2 : 4;
    *q = 2 * (size_t)max_kv * (size_t)(mi_attn_head_dim(t) * mi_attn_n_head_kv(t)) * esz;
}

/* The sequences whose own node takes the in-place F16 decode item (use_direct16: a few rows on an
 * F16 cache, AVX-512) need no gathered copy: each (sequence, head, row) item reads its rows through
 * the sequence's block table, the same operations in the same key order (the same bits), and all
 * those items share one pool call. start[s]: the items before sequence s's (its own count 0
 * where it is not one of them, so the owner of an item is the last s with start[s] <= it). */
typedef struct {
    const mi_cpu_ctx *c;
    const mi_tensor *t;
    const int32_t *seqs;
    const int64_t *start;      /* [S + 1] items before each sequence (0 items for one not taken here) */
    int64_t S, B, hd, Hq, group, row_kv, ld;
    float scale;
} paged16_task;

static void paged16_item(void *arg, int64_t it, int ith) {
    const paged16_task *k = arg;
    int64_t lo = 0, hi = k->S - 1;   /* the sequence: the last one whose first item is <= it */
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (k->start[mid] <= it) lo = mid;
        else hi = mid - 1;
    }
    const int32_t *f = k->seqs + lo * MI_PAGED_FIELDS;
    const int64_t rows = f[MI_PAGED_ROWS], local = it - k->start[lo], h = local / rows, i = local % rows;
    const size_t qoff = (size_t)(f[MI_PAGED_FIRST] + i) * (size_t)(k->Hq * k->hd) + (size_t)(h * k->hd);
    const size_t kvoff = (size_t)((h / k->group) * k->hd);
    float *sc = (float *)k->c->abuf + (size_t)ith * (size_t)(k->ld + k->hd + 16);
    (void)cpu_attn_item_f16_paged_avx512((const float *)k->t->src[0]->data + qoff,
                                         (const uint16_t *)k->t->src[1]->src[1]->data + kvoff,
                                         (const uint16_t *)k->t->src[2]->src[1]->data + kvoff, k->row_kv,
                                         f[MI_PAGED_NPAST] + i + 1, k->hd, k->scale, sc, (float *)k->t->data + qoff,
                                         k->seqs + f[MI_PAGED_TABLE], k->B);
}

mi_status cpu_op_attn_paged(mi_cpu_ctx *c, mi_tensor *t) {
    c->q_src = NULL;   /* qbuf holds the gathered rows now, not a quantized activation */
    const int32_t *seqs = t->src[3]->data;
    const int64_t S = t->p[0], B = t->p[5], N = t->ne[1], row_kv = mi_attn_head_dim(t) * mi_attn_n_head_kv(t);
    const mi_tensor *kc = t->src[1]->src[1], *vc = t->src[2]->src[1];
    const size_t esz = kc->type == MI_TYPE_F16 ? 2 : 4, rb = (size_t)row_kv * esz;
    int64_t *start = malloc((size_t)(S + 1) * sizeof *start);
    if (!start) return mi_err(MI_ERR_NOMEM, "attn_paged %s: %lld sequences", t->name, (long long)S);
    mi_status st = MI_OK;
    start[0] = 0;
    for (int64_t s = 0; s < S && st == MI_OK; s++) {   /* every sequence's fields and blocks checked first */
        const int32_t *f = seqs + s * MI_PAGED_FIELDS;
        const int64_t first = f[MI_PAGED_FIRST], rows = f[MI_PAGED_ROWS], n_past = f[MI_PAGED_NPAST];
        const int64_t n_kv = n_past + rows, nblk = (n_kv + B - 1) / B;
        start[s + 1] = start[s];
        if (first < 0 || rows < 1 || n_past < 0 || first + rows > N || n_kv > t->p[6] ||
            f[MI_PAGED_TABLE] < S * MI_PAGED_FIELDS || f[MI_PAGED_TABLE] + nblk > t->src[3]->ne[0]) {
            st = mi_err(MI_ERR_INVALID, "attn_paged %s: sequence %lld (rows %lld+%lld, n_past %lld) outside the step",
                        t->name, (long long)s, (long long)first, (long long)rows, (long long)n_past);
            break;
        }
        const int32_t *table = seqs + f[MI_PAGED_TABLE];
        for (int64_t p = 0; p < n_kv && st == MI_OK; p += B) {
            const int64_t blk = table[p / B], n = n_kv - p < B ? n_kv - p : B;
            if (blk < 0 || blk * B + n > kc->ne[1])
                st = mi_err(MI_ERR_INVALID, "attn_paged %s: block %lld of sequence %lld outside the pool", t->name,
                            (long long)blk, (long long)s);
        }
        mi_tensor qt, kt, vt, node;
        paged_node(t, &node, &qt, &kt, &vt, first, rows, n_past, NULL, NULL);
        if (st == MI_OK && use_direct16(c, &node)) start[s + 1] += rows * mi_attn_n_head(t);
    }
    if (st == MI_OK && start[S] > 0) {
        const int64_t hd = mi_attn_head_dim(t), Hq = mi_attn_n_head(t);
        const paged16_task k = {c, t, seqs, start, S, B, hd, Hq, Hq / mi_attn_n_head_kv(t), row_kv, pad16(t->p[6]),
                                mi_attn_scale(t)};
        if ((size_t)c->n_threads * (size_t)(k.ld + hd + 16) * sizeof(float) > c->abuf_size)
            st = mi_err(MI_ERR_INTERNAL, "attn_paged %s: attention scratch not reserved", t->name);
        else
            threadpool_chunks(c->tp, paged16_item, (void *)&k, start[S]);
    }
    for (int64_t s = 0; s < S && st == MI_OK; s++) {   /* the others: their rows gathered, the op on the copy */
        if (start[s + 1] > start[s]) continue;
        const int32_t *f = seqs + s * MI_PAGED_FIELDS;
        const int64_t first = f[MI_PAGED_FIRST], rows = f[MI_PAGED_ROWS], n_past = f[MI_PAGED_NPAST];
        const int64_t n_kv = n_past + rows;
        if (2 * (size_t)n_kv * rb > c->qbuf_size) {
            st = mi_err(MI_ERR_INTERNAL, "attn_paged %s: gather scratch not reserved", t->name);
            break;
        }
        const int32_t *table = seqs + f[MI_PAGED_TABLE];
        char *kbuf = c->qbuf, *vbuf = (char *)c->qbuf + (size_t)n_kv * rb;
        for (int64_t p = 0; p < n_kv; p += B) {   /* positions p .. p + B - 1: cache rows table[p / B] * B on */
            const int64_t row = (int64_t)table[p / B] * B, n = n_kv - p < B ? n_kv - p : B;
            memcpy(kbuf + (size_t)p * rb, (const char *)kc->data + (size_t)row * rb, (size_t)n * rb);
            memcpy(vbuf + (size_t)p * rb, (const char *)vc->data + (size_t)row * rb, (size_t)n * rb);
        }
        mi_tensor qt, kt, vt, node;
        paged_node(t, &node, &qt, &kt, &vt, first, rows, n_past, kbuf, vbuf);
        st = cpu_op_attn(c, &node);
    }
    free(start);
    return st;
}

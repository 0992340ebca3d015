/* Phase 7d: which splits a wrapped backend captures, and the key a captured graph is found by:
 * a hash of the split's nodes (ops, types, shapes, parameters, data pointers) and the dispatch
 * epoch, with the nodes whose n_past the device step params carry (their slots) left out of
 * it. Called by graphs7d.c at a split's start where the split memo does not hold. */
#include "phase7d_graphs/split_key.h"
#include "phase7d_graphs/graphs7d.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "common/graph/graph.h"

/* ---------------- hashing ----------------
 * A split's key hashes ~40 values a node every step (a replayed 0.5B step: ~17k), so the
 * values are buffered and taken four at a time by four independent lanes, each an odd
 * multiply and a rotation (a bijection of the lane: one value changed always changes its
 * lane), which the CPU runs side by side; the lanes are mixed into the 128-bit key once at
 * the end. One full mix a value, as a single chain, took ~4 us a thousand values. */
#define G7_HBUF 64
typedef struct {
    uint64_t lane[4], n;
    uint64_t buf[G7_HBUF];
    int nb;
} g7_hasher;

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}
static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
#define G7_K 0x9E3779B97F4A7C15ULL
static void hflush(g7_hasher *h) {
    uint64_t a = h->lane[0], b = h->lane[1], c = h->lane[2], d = h->lane[3];
    const uint64_t *v = h->buf;
    int i = 0;
    for (; i + 4 <= h->nb; i += 4) {
        a = rotl64((a ^ v[i]) * G7_K, 31);
        b = rotl64((b ^ v[i + 1]) * G7_K, 31);
        c = rotl64((c ^ v[i + 2]) * G7_K, 31);
        d = rotl64((d ^ v[i + 3]) * G7_K, 31);
    }
    for (; i < h->nb; i++) a = rotl64((a ^ v[i]) * G7_K, 31);
    h->lane[0] = a, h->lane[1] = b, h->lane[2] = c, h->lane[3] = d;
    h->n += (uint64_t)h->nb;
    h->nb = 0;
}
static void hinit(g7_hasher *h) {
    h->lane[0] = 0x6a09e667f3bcc908ULL, h->lane[1] = 0xbb67ae8584caa73bULL;
    h->lane[2] = 0x3c6ef372fe94f82bULL, h->lane[3] = 0xa54ff53a5f1d36f1ULL;
    h->n = 0;
    h->nb = 0;
}
static inline void hput(g7_hasher *h, uint64_t v) {
    h->buf[h->nb++] = v;
    if (h->nb == G7_HBUF) hflush(h);
}
static inline void hptr(g7_hasher *h, const void *p) { hput(h, (uint64_t)(uintptr_t)p); }
static g7_hash hfinal(g7_hasher *h) {
    hflush(h);
    g7_hash r;
    r.a = mix64(h->lane[0] ^ rotl64(mix64(h->lane[1] + h->n), 17));
    r.b = mix64(h->lane[2] ^ rotl64(mix64(h->lane[3] ^ h->n), 29));
    return r;
}

static int64_t nrows(const mi_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

static bool is_head_node(const mi_tensor *t) {
    if (t->op == MI_OP_NONE || t->op == MI_OP_INPUT) return true;
    return t->op == MI_OP_COPY && t->src[0] && t->src[0]->backend != t->backend;   /* from another backend */
}

static void hash_tensor_ref(g7_hasher *h, const mi_tensor *t) {
    if (!t) {
        hput(h, 0);
        return;
    }
    hptr(h, t->data);
    hput(h, (uint64_t)t->type);
    for (int d = 0; d < MI_MAX_DIMS; d++) hput(h, (uint64_t)t->ne[d]);
}

/* Decide the split's slots, key and eligibility. A decode split (every ATTN / KV_STORE
 * of it on one token) gets step-param slots; a split of a step of many sequences (ATTN_PAGED
 * with a replayable kernel) needs none; either is eligible for capture when its head is the
 * only place with Inputs and boundary copies. */
bool g7_split_scan(const mi_graph *g, const mi_split *sp, const int32_t *dparams, const mi_tensor **slot_node,
                   int max_slots, g7_scan *out) {
    const int first = sp->first, end = sp->first + sp->n;
    int k = first;
    while (k < end && is_head_node(g->nodes[k])) k++;
    out->first_compute = k;
    out->n_compute = 0;
    bool hoistable = true, has_attn = false, one_token = true, has_paged = false, paged_replayable = true;
    for (int i = k; i < end; i++) {
        mi_tensor *t = g->nodes[i];
        if (t->op == MI_OP_NONE) continue;
        out->n_compute++;
        if (is_head_node(t)) hoistable = false;   /* an Input after compute: its bytes may reuse freed memory */
        if (t->op == MI_OP_ATTN || t->op == MI_OP_KV_STORE) {
            if (!t->src[0] || nrows(t->src[0]) != 1) one_token = false;
            if (t->op == MI_OP_ATTN) has_attn = true;
        }
        if (t->op == MI_OP_ATTN_PAGED) {   /* a step of many sequences: its tables are Inputs */
            const mi_cuda_kernel *kn = mi_cuda_choose(t);
            has_paged = true;
            /* decode steps only (one row a sequence, p[7]): their shape repeats step after step,
             * where a step with prompt chunks rarely comes again and would cost a capture */
            if (!kn || !(kn->flags & MI_CUDA_K_REPLAYABLE) || t->p[7] != 1) paged_replayable = false;
        }
    }
    /* A one-token decode split (ATTN reads n_past from the step params), or a step of many
     * sequences whose paged attention launches from its shape and params alone (every value a
     * step changes is Input data, copied in the head). Graphs off: no slots and no staging, so
     * a direct run is exactly the 7c engine. */
    const bool decode = (has_attn && one_token && !has_paged) || (has_paged && paged_replayable && !has_attn);
    const bool eligible = decode && hoistable && out->n_compute > 0 && mi_cuda_graph_enabled();
    out->n_slots = 0;
    out->npast_in_key = false;
    if (!eligible) return false;
    bool npast_in_key = false;
    g7_hasher h;
    hinit(&h);
    hput(&h, (uint64_t)sp->n);
    hput(&h, (uint64_t)(k - first));
    hptr(&h, dparams);
    hput(&h, mi_cuda_dispatch_epoch());   /* another kernel choice (an item switched) is another graph */
    for (int i = first; i < end; i++) {
        const mi_tensor *t = g->nodes[i];
        hput(&h, (uint64_t)t->op | (uint64_t)t->flags << 32);
        hash_tensor_ref(&h, t);
        if (t->op == MI_OP_NONE || i < k) continue;   /* head: only its pointers matter */
        mi_tensor *node = g->nodes[i];
        const mi_cuda_kernel *kn = mi_cuda_choose(node);   /* cached in the node: no second search */
        bool slot = false;
        if ((t->op == MI_OP_ATTN || t->op == MI_OP_KV_STORE) && kn && (kn->flags & MI_CUDA_K_STEP_PARAMS) &&
            out->n_slots < max_slots) {
            slot_node[out->n_slots++] = t;
            slot = true;
        } else if (t->op == MI_OP_ATTN || t->op == MI_OP_KV_STORE) {
            npast_in_key = true;
        }
        hput(&h, slot ? 1u : 0u);   /* with a slot the kernel reads n_past on the device: p[0] stays out */
        for (int p = slot ? 1 : 0; p < MI_MAX_PARAMS; p += 2)   /* two 32-bit params a value */
            hput(&h, (uint64_t)(uint32_t)t->p[p] | (uint64_t)(p + 1 < MI_MAX_PARAMS ? (uint32_t)t->p[p + 1] : 0u) << 32);
        for (int j = 0; j < MI_MAX_SRC; j++) hash_tensor_ref(&h, t->src[j]);
    }
    out->shape = hfinal(&h);
    out->npast_in_key = npast_in_key;
    return true;
}

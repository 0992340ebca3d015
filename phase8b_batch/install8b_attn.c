/* Phase 8b's kernels as the CUDA candidates of the two ops of a step of many sequences
 * (KV_SCATTER, ATTN_PAGED); mi_phase8b_install (install8b.c) adds them. They are the ops' only
 * CUDA kernels (b2 only adds a replayable twin of the attention; with none, a batch's pool and
 * its paged ops stay on the CPU, as below 8b). Each run() first checks the step's tables on the
 * host where the graph's Input still points at them (the CPU ops' rules, so a bad table is an
 * error of the step, as on the CPU); the kernels themselves never read or write outside the
 * cache whatever the tables say. */
#include "phase8b_batch/install8b.h"
#include "phase8b_batch/batch8b.h"
#include "phase7c_wiring/wiring7c.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "phase7b_ops/ops7b.h"
#include "common/graph/graph.h"
#include <stdint.h>
#include <string.h>

static bool is_kv(const mi_tensor *t) { return t && (t->type == MI_TYPE_F16 || t->type == MI_TYPE_F32); }
static bool i32_row(const mi_tensor *t) { return t && t->type == MI_TYPE_I32 && mi_nrows(t) == 1; }
/* the host copy of an Input's bytes (NULL for anything else: no check, the kernels' guards stay) */
static const int32_t *host_ints(const mi_tensor *t) {
    return t->op == MI_OP_INPUT && t->host_src ? (const int32_t *)t->host_src : NULL;
}

mi_status mi8b_check_slots(const char *name, const int32_t *slots, int64_t N, int64_t n_rows) {
    for (int64_t r = 0; r < N; r++)
        if (slots[r] < 0 || slots[r] >= n_rows)
            return mi_err(MI_ERR_INVALID, "kv_scatter %s: row %lld goes to cache row %d of %lld", name, (long long)r,
                          slots[r], (long long)n_rows);
    return MI_OK;
}

/* Every ATTN_PAGED node of a step reads the same table: the last table this thread found good (its
 * parameters and a copy of its ints, for tables of up to SEQS_MEMO ints) passes again without the
 * walk when it is the same to the byte. A replayed step of many layers then checks it once. */
#define SEQS_MEMO 4096
static _Thread_local struct {
    int64_t n_seqs, seqs_len, T, block, max_kv, n_rows;   /* seqs_len 0: nothing kept */
    int32_t tab[SEQS_MEMO];
} g_seqs_ok;

static mi_status check_seqs_walk(const char *name, const int32_t *seqs, int64_t n_seqs, int64_t seqs_len, int64_t T,
                                 int64_t block, int64_t max_kv, int64_t n_rows) {
    for (int64_t s = 0; s < n_seqs; s++) {
        const int32_t *f = seqs + s * MI_PAGED_FIELDS;
        const int64_t first = f[MI_PAGED_FIRST], rows = f[MI_PAGED_ROWS], n_past = f[MI_PAGED_NPAST];
        const int64_t n_kv = n_past + rows, nblk = (n_kv + block - 1) / block;
        if (first < 0 || rows < 1 || n_past < 0 || first + rows > T || n_kv > max_kv ||
            f[MI_PAGED_TABLE] < n_seqs * MI_PAGED_FIELDS || f[MI_PAGED_TABLE] + nblk > seqs_len)
            return mi_err(MI_ERR_INVALID, "attn_paged %s: sequence %lld (rows %lld+%lld, n_past %lld) outside the step",
                          name, (long long)s, (long long)first, (long long)rows, (long long)n_past);
        const int32_t *prev = f - MI_PAGED_FIELDS;   /* rows come in sequence order (the kernel's lookup) */
        if (s > 0 && first < (int64_t)prev[MI_PAGED_FIRST] + prev[MI_PAGED_ROWS])
            return mi_err(MI_ERR_INVALID, "attn_paged %s: sequence %lld starts at row %lld, inside the one before", name,
                          (long long)s, (long long)first);
        const int32_t *table = seqs + f[MI_PAGED_TABLE];
        const int64_t tail = (n_kv - 1) % block;   /* the last block's last row; the others' is block - 1 */
        for (int64_t b = 0; b < nblk; b++) {
            const int64_t last = b + 1 < nblk ? block - 1 : tail;
            if (table[b] < 0 || table[b] * block + last >= n_rows)
                return mi_err(MI_ERR_INVALID, "attn_paged %s: block %d of sequence %lld outside the pool", name,
                              table[b], (long long)s);
        }
    }
    return MI_OK;
}

mi_status mi8b_check_seqs(const char *name, const int32_t *seqs, int64_t n_seqs, int64_t seqs_len, int64_t T,
                          int64_t block, int64_t max_kv, int64_t n_rows) {
    const bool keep = seqs_len >= 1 && seqs_len <= SEQS_MEMO;
    if (keep && g_seqs_ok.seqs_len == seqs_len && g_seqs_ok.n_seqs == n_seqs && g_seqs_ok.T == T &&
        g_seqs_ok.block == block && g_seqs_ok.max_kv == max_kv && g_seqs_ok.n_rows == n_rows &&
        !memcmp(g_seqs_ok.tab, seqs, (size_t)seqs_len * sizeof *seqs))
        return MI_OK;
    MI_TRY(check_seqs_walk(name, seqs, n_seqs, seqs_len, T, block, max_kv, n_rows));
    if (keep) {
        g_seqs_ok.n_seqs = n_seqs, g_seqs_ok.seqs_len = seqs_len, g_seqs_ok.T = T, g_seqs_ok.block = block;
        g_seqs_ok.max_kv = max_kv, g_seqs_ok.n_rows = n_rows;
        memcpy(g_seqs_ok.tab, seqs, (size_t)seqs_len * sizeof *seqs);
    }
    return MI_OK;
}

/* ---------------- KV_SCATTER: x F32 [row, N], cache [row, n_rows], slots I32 [N] ---------------- */
static bool sup_kv_scatter(const mi_tensor *n) {
    const mi_tensor *x = n->src[0], *cache = n->src[1], *slots = n->src[2];
    return x && x->type == MI_TYPE_F32 && is_kv(cache) && n->type == cache->type && x->ne[0] == cache->ne[0] &&
           cache->ne[1] >= 1 && cache->ne[1] <= INT32_MAX && i32_row(slots) && slots->ne[0] == mi_nrows(x);
}
mi_status mi8b_chk_kv_scatter(const mi_tensor *n) {
    const int32_t *hs = host_ints(n->src[2]);
    return hs ? mi8b_check_slots(n->name, hs, mi_nrows(n->src[0]), n->src[1]->ne[1]) : MI_OK;
}
static mi_status run_kv_scatter(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    const mi_tensor *x = n->src[0], *cache = n->src[1], *slots = n->src[2];
    MI_TRY(mi8b_chk_kv_scatter(n));
    return mi8b_kv_scatter(mi_cuda_stream(c), x->data, cache->data, cache->type, x->ne[0], mi_nrows(x), slots->data,
                           cache->ne[1]);
}

/* ---------------- b20: a step's q and k RoPE and K and V scatters in one launch ----------------
 * The four marked by 8a's pass (roles MI_RKV_ROWS_*): the RoPEs and the K scatter launch nothing
 * and leave what they would do in a thread-local record; the V scatter checks it (same context,
 * its three predecessors in order, the K scatter reading the k RoPE and the same rows, its src[3]
 * q's RoPE input) and launches 8a's kernel over the step's rows, or fails the step rather than
 * leave an output unwritten. Every value is the one d8's RoPE and the two scatters write. */
static _Thread_local struct {
    const mi_cuda_ctx *c;
    int n, last_id;
    const mi_tensor *k_rope;
    mi8a_rope_kv_rows_io io;
    int64_t Hq;
} g_rkv;

static bool rkv_follows(const mi_cuda_ctx *c, const mi_tensor *n, int have) {
    return g_rkv.n == have && g_rkv.c == c && g_rkv.last_id == n->id - 1;
}
static bool sup_rkv_rope(const mi_tensor *n) {
    const mi_tensor *x = n->src[0];
    const int64_t hd = mi_rope_head_dim(n);
    return n->op == MI_OP_ROPE && mi_rope_kv_role(n) == MI_RKV_ROWS_DEFER && x && x->type == MI_TYPE_F32 &&
           n->src[1] && hd > 0 && x->ne[0] % hd == 0 && mi_nrows(x) == x->ne[1] &&
           mi8a_rope_kv_supported(hd, x->ne[0] / hd, 1, mi_rope_n_rot(n), mi_rope_mode(n), MI_TYPE_F16);
}
static bool sup_rkv_store(const mi_tensor *n) { return mi_rope_kv_role(n) == MI_RKV_ROWS_DEFER && sup_kv_scatter(n); }
static bool sup_rkv_last(const mi_tensor *n) {
    return mi_rope_kv_role(n) == MI_RKV_ROWS_LAST && sup_kv_scatter(n) && n->src[3] && n->src[3]->type == MI_TYPE_F32;
}
static mi_status run_rkv_rope(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    const bool is_k = rkv_follows(c, n, 1);
    if (!is_k) g_rkv.n = 0, g_rkv.c = c;   /* the q RoPE starts the record */
    if (is_k) g_rkv.io.k = n->src[0]->data, g_rkv.io.k_rope = n->data, g_rkv.k_rope = n;
    else g_rkv.io.q = n->src[0]->data, g_rkv.io.q_rope = n->data, g_rkv.io.pos = n->src[1]->data,
         g_rkv.io.N = mi_nrows(n->src[0]), g_rkv.Hq = n->src[0]->ne[0] / mi_rope_head_dim(n);
    g_rkv.n++;
    g_rkv.last_id = n->id;
    return MI_OK;
}
static mi_status run_rkv_store(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    MI_TRY(mi8b_chk_kv_scatter(n));
    if (!rkv_follows(c, n, 2) || n->src[0] != g_rkv.k_rope) {
        g_rkv.n = 0;
        return MI_OK;   /* the last finds the record incomplete and fails the step */
    }
    g_rkv.io.cache_k = n->src[1]->data;
    g_rkv.io.n_rows_k = n->src[1]->ne[1];
    g_rkv.io.slots = n->src[2]->data;
    g_rkv.n++;
    g_rkv.last_id = n->id;
    return MI_OK;
}
static mi_status run_rkv_last(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    MI_TRY(mi8b_chk_kv_scatter(n));
    const bool ok = rkv_follows(c, n, 3) && n->src[3]->data == g_rkv.io.q && n->src[2]->data == g_rkv.io.slots &&
                    mi_nrows(n->src[0]) == g_rkv.io.N;
    g_rkv.n = 0;
    if (!ok)
        return mi_err(MI_ERR_INTERNAL, "b20: the V scatter %s (#%d) found no record of the RoPEs and K scatter before it",
                      n->name, n->id);
    const mi_tensor *rope = g_rkv.k_rope;
    const int64_t hd = mi_rope_head_dim(rope);
    mi8a_rope_kv_rows_io io = g_rkv.io;
    io.v = n->src[0]->data;
    io.cache_v = n->src[1]->data;
    io.n_rows_v = n->src[1]->ne[1];
    return mi8a_rope_kv_rows(mi_cuda_stream(c), &io, n->src[1]->type, hd, g_rkv.Hq, rope->src[0]->ne[0] / hd,
                             mi_rope_mode(rope), mi_rope_n_rot(rope), mi_rope_freq_base(rope));
}

/* b47: the V scatter (MI_RKV_ROWS_ATTN) completes the record and launches nothing either; the paged
 * attention right after it (mi_attn_paged_does_rkv) launches the four with it */
static bool sup_rkv_attn_store(const mi_tensor *n) {
    return mi_rope_kv_role(n) == MI_RKV_ROWS_ATTN && sup_kv_scatter(n) && n->src[1]->type == MI_TYPE_F16 &&
           mi8b_paged_rkv_on();
}
static mi_status run_rkv_attn_store(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    (void)ws;
    MI_TRY(mi8b_chk_kv_scatter(n));
    if (!rkv_follows(c, n, 3) || n->src[2]->data != g_rkv.io.slots || mi_nrows(n->src[0]) != g_rkv.io.N) {
        g_rkv.n = 0;
        return MI_OK;   /* the attention finds the record incomplete and fails the step */
    }
    g_rkv.io.v = n->src[0]->data;
    g_rkv.io.cache_v = n->src[1]->data;
    g_rkv.io.n_rows_v = n->src[1]->ne[1];
    g_rkv.n++;
    g_rkv.last_id = n->id;
    return MI_OK;
}

/* ---------------- ATTN_PAGED: q [hd*Hq, T], K/V (KV_SCATTER nodes), seqs I32 ---------------- */
static bool sup_attn_paged_any(const mi_tensor *n) {
    const mi_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *seqs = n->src[3];
    const int64_t hd = mi_attn_head_dim(n), Hq = mi_attn_n_head(n), Hkv = mi_attn_n_head_kv(n), S = n->p[0];
    if (!q || q->type != MI_TYPE_F32 || n->type != MI_TYPE_F32 || !is_kv(k) || !is_kv(v) || k->type != v->type)
        return false;
    if (q->ne[0] != hd * Hq || k->ne[0] != hd * Hkv || v->ne[0] != hd * Hkv || k->ne[1] != v->ne[1] ||
        k->ne[1] > INT32_MAX || n->ne[1] != q->ne[1] || mi_nrows(q) != q->ne[1])
        return false;
    if (S < 1 || !i32_row(seqs) || seqs->ne[0] < S * MI_PAGED_FIELDS || n->p[5] < 1 || n->p[6] < 1) return false;
    return mi8b_attn_paged_supported(hd, Hq, Hkv, k->type) && q->ne[1] * Hq <= INT32_MAX;
}
/* a node the pass left to do its step's four (b47) gets only b47's kernels, which launch them */
static bool sup_attn_paged(const mi_tensor *n) { return sup_attn_paged_any(n) && !mi_attn_paged_does_rkv(n); }
/* b47: a decode step's (one row a sequence, p[7]), q's and k's RoPE inputs and v held as src[4..6] */
static bool sup_attn_paged_rkv(const mi_tensor *n) {
    const mi_tensor *xq = n->src[4], *xk = n->src[5], *xv = n->src[6];
    if (!sup_attn_paged_any(n) || !mi_attn_paged_does_rkv(n) || !mi8b_paged_rkv_on() || !xq || !xk || !xv) return false;
    const int64_t T = n->src[0]->ne[1], kw = mi_attn_head_dim(n) * mi_attn_n_head_kv(n);
    return n->p[7] == 1 && n->p[0] == T && xq->type == MI_TYPE_F32 && xk->type == MI_TYPE_F32 &&
           xv->type == MI_TYPE_F32 && xq->ne[0] == n->src[0]->ne[0] && mi_nrows(xq) == T && xk->ne[0] == kw &&
           mi_nrows(xk) == T && xv->ne[0] == kw && mi_nrows(xv) == T;
}
static size_t ws_attn_paged(const mi_tensor *n) {
    return mi8b_attn_paged_workspace(n->src[0]->ne[1], n->p[6], mi_attn_head_dim(n), mi_attn_n_head(n),
                                     mi_attn_n_head_kv(n));
}
mi_status mi8b_chk_attn_paged(const mi_tensor *n) {
    const int32_t *hs = host_ints(n->src[3]);
    return hs ? mi8b_check_seqs(n->name, hs, n->p[0], n->src[3]->ne[0], n->src[0]->ne[1], n->p[5], n->p[6],
                                n->src[1]->ne[1])
              : MI_OK;
}

/* b47: the record of the step's four, complete and ending right before the attention, with
 * src[4..6] the inputs it holds; else the step fails rather than read a q RoPE no kernel wrote */
static mi_status attn_rkv_take(const mi_cuda_ctx *c, const mi_tensor *n, mi8a_rope_kv_rows_io *io,
                               const mi_tensor **rope) {
    const bool ok = rkv_follows(c, n, 4) && n->src[4]->data == g_rkv.io.q && n->src[5]->data == g_rkv.io.k &&
                    n->src[6]->data == g_rkv.io.v && n->src[0]->data == g_rkv.io.q_rope &&
                    n->src[1]->data == g_rkv.io.cache_k && n->src[2]->data == g_rkv.io.cache_v;
    g_rkv.n = 0;
    if (!ok)
        return mi_err(MI_ERR_INTERNAL, "b47: the attention %s (#%d) found no record of the RoPEs and scatters before it",
                      n->name, n->id);
    *rope = g_rkv.k_rope;
    if (mi_rope_head_dim(*rope) != mi_attn_head_dim(n) || g_rkv.Hq != mi_attn_n_head(n))
        return mi_err(MI_ERR_INTERNAL, "b47: node %s (#%d): the RoPEs' heads are not the attention's", n->name, n->id);
    *io = g_rkv.io;
    return MI_OK;
}
/* the attention, b47's four first where the node does them; xh: b37's f16 copy of the output */
static mi_status attn_paged_launch(mi_cuda_ctx *c, const mi_tensor *n, void *part, void *xh, bool eo, bool *copied) {
    const mi_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *seqs = n->src[3];
    MI_TRY(mi8b_chk_attn_paged(n));
    if (!mi_attn_paged_does_rkv(n))
        return mi8b_attn_paged_f16(mi_cuda_stream(c), q->data, k->data, v->data, k->type, k->ne[1], n->data, seqs->data,
                                   n->p[0], seqs->ne[0], q->ne[1], n->p[5], n->p[6], mi_attn_head_dim(n),
                                   mi_attn_n_head(n), mi_attn_n_head_kv(n), mi_attn_scale(n), part, xh, eo, copied);
    mi8a_rope_kv_rows_io io;
    const mi_tensor *rope = NULL;
    MI_TRY(attn_rkv_take(c, n, &io, &rope));
    return mi8b_attn_paged_rkv(mi_cuda_stream(c), &io, mi_rope_mode(rope), mi_rope_n_rot(rope), mi_rope_freq_base(rope),
                               q->data, k->data, v->data, k->type, k->ne[1], n->data, seqs->data, n->p[0], seqs->ne[0],
                               q->ne[1], n->p[5], n->p[6], mi_attn_head_dim(n), mi_attn_n_head(n), mi_attn_n_head_kv(n),
                               mi_attn_scale(n), part, xh, eo, copied);
}
static mi_status run_attn_paged(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    return attn_paged_launch(c, n, ws, NULL, false, NULL);
}

const mi_cuda_kernel mi8b_k_kv_scatter = {"KV scatter: rows to their cache rows (7b's conversion)", NULL,
                                            sup_kv_scatter, run_kv_scatter, NULL, 0};
const mi_cuda_kernel mi8b_k_rkv_rope = {"RoPE, a step's rows: computed by its V scatter (b20)", "d8,b20",
                                          sup_rkv_rope, run_rkv_rope, NULL, 0};
const mi_cuda_kernel mi8b_k_rkv_store = {"K scatter, a step's rows: done by its V scatter (b20)", "d8,b20",
                                           sup_rkv_store, run_rkv_store, NULL, 0};
const mi_cuda_kernel mi8b_k_rkv_last = {"V scatter, a step's rows: q's and k's RoPE and both scatters in one launch",
                                          "d8,b20", sup_rkv_last, run_rkv_last, NULL, 0};
const mi_cuda_kernel mi8b_k_attn_paged = {"paged attention: block per (row, KV head, split) over its sequence", NULL,
                                            sup_attn_paged, run_attn_paged, ws_attn_paged, 0};
/* The same kernel, marked replayable (item b2): its grid comes from the step's rows and its
 * splits from p[6], the bucket of the longest sequence (batch.c), never from the tables, which
 * it reads on the device; so 7d captures a batched step's split once a bucket and replays it. */
const mi_cuda_kernel mi8b_k_attn_paged_replay = {"paged attention, replayable in a captured step of many sequences",
                                                   "b2", sup_attn_paged, run_attn_paged, ws_attn_paged,
                                                   MI_CUDA_K_REPLAYABLE};
const mi_cuda_kernel mi8b_k_rkv_attn_store = {"V scatter, a decode step's rows: done by the paged attention after it "
                                                "(b47)", "d8,b20,b47", sup_rkv_attn_store, run_rkv_attn_store, NULL, 0};
const mi_cuda_kernel mi8b_k_attn_paged_rkv = {"paged attention, a decode step's: its q and k RoPE and K and V scatters "
                                                "first, in the kernel (b47)", "b20,b47", sup_attn_paged_rkv,
                                                run_attn_paged, ws_attn_paged, 0};
const mi_cuda_kernel mi8b_k_attn_paged_rkv_replay = {"paged attention, a decode step's, its four in the kernel (b47), "
                                                       "replayable", "b2,b20,b47", sup_attn_paged_rkv, run_attn_paged,
                                                       ws_attn_paged, MI_CUDA_K_REPLAYABLE};

/* b7: read at each launch (a switch changes the dispatch epoch: no captured step outlives it) */
bool mi8b_paged_mma_on(void) { return mi_cuda_item_on("b7"); }
/* b17: read at each launch and by the workspace rule (a switch changes the dispatch epoch) */
bool mi8b_paged_wave_on(void) { return mi_cuda_item_on("b17"); }
/* b27: read at each launch and by the split rule (its form's occupancy) */
bool mi8b_paged_rows_once_on(void) { return mi_cuda_item_on("b27"); }
/* b43: read at each launch and by the split rule (its form's occupancy) */
bool mi8b_paged_ring3_on(void) { return mi_cuda_item_on("b43"); }
/* b44: read at each launch */
bool mi8b_paged_packed_on(void) { return mi_cuda_item_on("b44"); }

/* b37: a step's paged attention writing its output's f16 copy for the o projection after it (b6's
 * or b22's matmul at K = hd Hq >= 2,048): the copy first in the workspace, where that matmul
 * reads it, the attention's partials after it */
static bool attn_f16_shape(const mi_tensor *n) {
    const int64_t K = mi_attn_head_dim(n) * mi_attn_n_head(n), T = n->ne[1];
    return K >= MI8B_STREAM_MIN_K && K % 16 == 0 && T >= MI8B_F16_MIN_N && T <= MI8B_STREAM_MAX_N;
}
static bool sup_attn_paged_f16(const mi_tensor *n) { return sup_attn_paged(n) && attn_f16_shape(n); }
static bool sup_attn_paged_rkv_f16(const mi_tensor *n) { return sup_attn_paged_rkv(n) && attn_f16_shape(n); }
static size_t ws_attn_paged_f16(const mi_tensor *n) {
    return mi8b_f16s_x_bytes(mi_attn_head_dim(n) * mi_attn_n_head(n), n->ne[1]) + ws_attn_paged(n);
}
static mi_status run_attn_paged_f16(mi_cuda_ctx *c, const mi_tensor *n, void *ws) {
    const int64_t K = mi_attn_head_dim(n) * mi_attn_n_head(n), T = n->src[0]->ne[1];
    const bool eo = mi8b_f16s_x_form(T);
    bool copied = false;
    MI_TRY(attn_paged_launch(c, n, (uint8_t *)ws + mi8b_f16s_x_bytes(K, T), ws, eo, &copied));
    if (copied) mi8b_f16s_x_made(n->data, ws, K, T, eo);
    return MI_OK;
}
const mi_cuda_kernel mi8b_k_attn_paged_f16 = {
    "paged attention, with its output's f16 copy for the matmul after it", "b37", sup_attn_paged_f16,
    run_attn_paged_f16, ws_attn_paged_f16, 0};
const mi_cuda_kernel mi8b_k_attn_paged_f16_replay = {
    "paged attention, with its output's f16 copy for the matmul after it, replayable in a captured step", "b2,b37",
    sup_attn_paged_f16, run_attn_paged_f16, ws_attn_paged_f16, MI_CUDA_K_REPLAYABLE};
const mi_cuda_kernel mi8b_k_attn_paged_rkv_f16 = {
    "paged attention, a decode step's, its four in the kernel (b47), with its output's f16 copy", "b20,b37,b47",
    sup_attn_paged_rkv_f16, run_attn_paged_f16, ws_attn_paged_f16, 0};
const mi_cuda_kernel mi8b_k_attn_paged_rkv_f16_replay = {
    "paged attention, a decode step's, its four in the kernel (b47), with its output's f16 copy, replayable",
    "b2,b20,b37,b47", sup_attn_paged_rkv_f16, run_attn_paged_f16, ws_attn_paged_f16, MI_CUDA_K_REPLAYABLE};

/* b47's pass (fusion8b.c): whether the dispatch gives a V scatter probe marked MI_RKV_ROWS_ATTN and
 * the attention probe after it b47's kernels */
bool mi8b_rkv_attn_takes(const mi_tensor *store, const mi_tensor *attn) {
    const mi_cuda_kernel *ks = mi_cuda_choice(store), *ka = mi_cuda_choice(attn);
    return ks == &mi8b_k_rkv_attn_store && (ka == &mi8b_k_attn_paged_rkv || ka == &mi8b_k_attn_paged_rkv_replay ||
                                       ka == &mi8b_k_attn_paged_rkv_f16 || ka == &mi8b_k_attn_paged_rkv_f16_replay);
}
/* b47: read at each call */
bool mi8b_paged_rkv_on(void) { return mi_cuda_item_on("b47"); }


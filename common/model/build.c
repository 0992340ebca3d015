/* Graph build for one batch: n tokens at positions n_past.. of a llama / qwen2 / qwen3
 * decoder. Every node is named after the GGUF tensor it applies ("blk.3.attn_q"), so
 * graph dumps and the per-layer debug taps read like the model file. */
#include "model_internal.h"
#include <math.h>
#include <stdio.h>

bool model_topk_where_logits(const mi_model *m, mi_backend *be, int64_t k) {
    const int64_t V = m->hp.n_vocab;
    if (k < 1 || k > MI_TOPK_MAX || k >= V || V > (1 << 24)) return false;
    if (be->host_memory) return true;   /* the CPU backend runs every TOPK */
    mi_tensor x, scale, top;   /* stand-ins of the real shape: one row */
    const int64_t ne_x[2] = {V, 1}, ne_s[2] = {1, 1}, ne_t[2] = {2 * k, 1};
    tensor_init(&x, "probe_logits", MI_TYPE_F32, 2, ne_x);
    tensor_init(&scale, "probe_scale", MI_TYPE_F32, 2, ne_s);
    tensor_init(&top, "probe_topk", MI_TYPE_F32, 2, ne_t);
    x.op = MI_OP_MATMUL;
    scale.op = MI_OP_INPUT;
    top.op = MI_OP_TOPK;
    top.src[0] = &x;
    top.src[1] = &scale;
    top.p[0] = (int32_t)k;
    return be->iface->supports(be, &top);
}

int model_graph_max_nodes(const mi_model *m) {
    /* ~22 nodes per layer + a few; doubled for copies/fusions the scheduler may add */
    return (int)(m->hp.n_layer * 48 + 64);
}

/* the node named name, or "blk.<il>.<what>" (NULL passes through: the builder's error stays) */
static mi_tensor *named(mi_tensor *t, const char *name) {
    if (t) mi_tensor_set_name(t, name);
    return t;
}
static mi_tensor *named_l(mi_tensor *t, const char *what, int il) {
    if (t) mi_tensor_set_name_layer(t, il, what);
    return t;
}

static void tap(mi_build_args *a, mi_tensor *t) {
    if (!a->debug_taps || !t || a->n_taps >= MI_DEBUG_TAPS_MAX) return;
    t->flags |= MI_T_OUTPUT;   /* keep it alive: read back after compute */
    a->taps[a->n_taps++] = t;
}

#define CK(x) do { if (!(x)) goto fail; } while (0)

/* W @ x (+ bias); in a step of many sequences a matmul over the step's rows carries each row's
 * sequence size (MATMUL src3), so the CPU computes each row as its sequence alone would */
static mi_tensor *matmul(mi_graph *g, const mi_tensor *w, mi_tensor *x, const mi_tensor *bias, mi_tensor *solo) {
    mi_tensor *t = graph_matmul(g, (mi_tensor *)w, x, (mi_tensor *)bias);
    if (t && solo && solo->ne[0] == x->ne[1]) t->src[3] = solo;
    return t;
}

mi_status model_build_graph(const mi_model *m, const mi_kv_cache *kv, mi_build_args *a,
                            mi_graph **out) {
    const mi_hparams *hp = &m->hp;
    const int64_t n = a->n, n_past = a->n_past;
    const int hd = (int)hp->head_dim, Hq = (int)hp->n_head, Hkv = (int)hp->n_head_kv;
    const float scale = 1.0f / sqrtf((float)hd);
    *out = NULL;
    a->n_taps = 0;
    mi_graph *g = graph_new(model_graph_max_nodes(m));
    if (!g) return mi_err(MI_ERR_NOMEM, "out of memory for a graph");

    mi_tensor *ids = named(graph_input(g, "inp_tokens", MI_TYPE_I32, n, 1, a->ids), "inp_tokens");
    mi_tensor *pos = named(graph_input(g, "inp_pos", MI_TYPE_I32, n, 1, a->pos), "inp_pos");
    CK(ids && pos);
    const mi_batch_layout *b = a->batch;
    mi_tensor *rows = NULL, *seqs = NULL, *solo = NULL, *last = NULL, *ones = NULL;
    if (b) {
        CK(rows = graph_input(g, "inp_slots", MI_TYPE_I32, n, 1, b->rows));
        CK(seqs = graph_input(g, "inp_seqs", MI_TYPE_I32, b->seqs_len, 1, b->seqs));
        CK(last = graph_input(g, "inp_last", MI_TYPE_I32, b->n_seqs, 1, b->last));
        if (n >= 4) CK(solo = graph_input(g, "inp_solo", MI_TYPE_I32, n, 1, b->solo));
        if (b->n_seqs >= 4) CK(ones = graph_input(g, "inp_ones", MI_TYPE_I32, b->n_seqs, 1, b->ones));
    }
    /* token_embd [E, V] rows by ids [n] -> x [E, n] */
    mi_tensor *x = named(graph_get_rows(g, (mi_tensor *)&m->tok_embd, ids), "inp_embd");
    CK(x);
    tap(a, x);

    for (int il = 0; il < (int)hp->n_layer; il++) {
        const mi_layer *L = &m->layers[il];
        mi_tensor *cur = named_l(graph_rms_norm(g, x, (mi_tensor *)&L->attn_norm, hp->n_embd, hp->rms_eps),
                                 "attn_norm", il);
        CK(cur);
        tap(a, cur);
        /* W [E, hd*H] @ cur [E, n] (+ bias) -> [hd*H, n] */
        mi_tensor *q = named_l(matmul(g, &L->wq, cur, hp->qkv_bias ? &L->bq : NULL, solo), "attn_q", il);
        mi_tensor *k = named_l(matmul(g, &L->wk, cur, hp->qkv_bias ? &L->bk : NULL, solo), "attn_k", il);
        mi_tensor *v = named_l(matmul(g, &L->wv, cur, hp->qkv_bias ? &L->bv : NULL, solo), "attn_v", il);
        CK(q && k && v);
        tap(a, q);
        tap(a, k);
        tap(a, v);
        if (hp->qk_norm) {
            /* qwen3: RMS norm over each head's hd elements, before RoPE */
            q = named_l(graph_rms_norm(g, q, (mi_tensor *)&L->q_norm, hd, hp->rms_eps), "attn_q_norm", il);
            k = named_l(graph_rms_norm(g, k, (mi_tensor *)&L->k_norm, hd, hp->rms_eps), "attn_k_norm", il);
            CK(q && k);
            tap(a, q);
            tap(a, k);
        }
        q = named_l(graph_rope(g, q, pos, hd, hp->rope_mode, (int)hp->n_rot, hp->rope_freq_base), "attn_q_rope", il);
        k = named_l(graph_rope(g, k, pos, hd, hp->rope_mode, (int)hp->n_rot, hp->rope_freq_base), "attn_k_rope", il);
        CK(q && k);
        tap(a, q);
        tap(a, k);
        /* append rows n_past..n_past+n-1 of this layer's cache (many sequences: each token's row) */
        mi_tensor *ks = named_l(b ? graph_kv_scatter(g, k, &kv->k[il], rows) : graph_kv_store(g, k, &kv->k[il], n_past),
                                "cache_k", il);
        mi_tensor *vs = named_l(b ? graph_kv_scatter(g, v, &kv->v[il], rows) : graph_kv_store(g, v, &kv->v[il], n_past),
                                "cache_v", il);
        CK(ks && vs);
        /* causal GQA: q [hd*Hq, n] over cache rows 0..n_past+i -> [hd*Hq, n] (many sequences:
         * each over its own positions, through its block table) */
        mi_tensor *att = named_l(b ? graph_attn_paged(g, q, ks, vs, seqs, b->n_seqs, b->block, b->max_kv, b->max_rows, hd,
                                                      Hq, Hkv, scale)
                                   : graph_attn(g, q, ks, vs, n_past, hd, Hq, Hkv, scale),
                                 "attn", il);
        CK(att);
        tap(a, att);
        /* W_o [hd*Hq, E] @ att -> [E, n] */
        mi_tensor *o = named_l(matmul(g, &L->wo, att, NULL, solo), "attn_output", il);
        CK(o);
        tap(a, o);
        x = named_l(graph_add(g, x, o), "ffn_inp", il);
        CK(x);
        tap(a, x);

        cur = named_l(graph_rms_norm(g, x, (mi_tensor *)&L->ffn_norm, hp->n_embd, hp->rms_eps), "ffn_norm", il);
        CK(cur);
        tap(a, cur);
        /* W [E, F] @ cur [E, n] -> [F, n] twice; silu(gate) * up; W_down [F, E] -> [E, n] */
        mi_tensor *gate = named_l(matmul(g, &L->w_gate, cur, NULL, solo), "ffn_gate", il);
        mi_tensor *up = named_l(matmul(g, &L->w_up, cur, NULL, solo), "ffn_up", il);
        CK(gate && up);
        tap(a, gate);
        tap(a, up);
        mi_tensor *act = named_l(graph_swiglu(g, gate, up), "ffn_swiglu", il);
        CK(act);
        tap(a, act);
        mi_tensor *down = named_l(matmul(g, &L->w_down, act, NULL, solo), "ffn_down", il);
        CK(down);
        tap(a, down);
        x = named_l(graph_add(g, x, down), "out", il);
        CK(x);
        tap(a, x);
    }

    /* only the last row feeds sampling: cut before the norm and the big vocab matmul (many
     * sequences: the last row of each) */
    if (b) {
        x = named(graph_get_rows(g, x, last), "last_rows");
        CK(x);
    } else if (!a->all_logits && n > 1) {
        x = named(graph_slice_rows(g, x, n - 1, 1), "last_row");
        CK(x);
    }
    x = named(graph_rms_norm(g, x, (mi_tensor *)&m->output_norm, hp->n_embd, hp->rms_eps), "output_norm");
    CK(x);
    tap(a, x);
    /* output [E, V] @ x [E, rows] -> logits [V, rows] */
    mi_tensor *logits = named(matmul(g, m->output, x, NULL, ones), "result_output");
    CK(logits);
    mi_tensor *result = logits;
    if (a->greedy) CK(result = named(graph_argmax(g, logits), "result_argmax"));   /* only ids leave the logits' backend */
    else if (a->top_k > 0) {   /* only each row's best candidates leave it */
        mi_tensor *scale = graph_input(g, "inp_top_scale", MI_TYPE_F32, 1, logits->ne[1], a->top_scale);
        CK(scale);
        CK(result = named(graph_topk(g, logits, scale, a->top_k), "result_topk"));
    }
    result->flags |= MI_T_OUTPUT;
    g->output = result;
    *out = g;
    return MI_OK;
fail:
    graph_free(g);
    return mi_err_ctx(MI_ERR_INTERNAL, "building the graph");
}

/* Graph builders: output shapes and types, parameters, and rejection of impossible
 * shapes (NULL + a message naming the problem), arena growth with stable pointers. */
#include <criterion/criterion.h>
#include <string.h>
#include "common/graph/graph.h"

static mi_tensor mk(const char *name, mi_type t, int64_t ne0, int64_t ne1) {
    mi_tensor x;
    int64_t ne[2] = {ne0, ne1};
    tensor_init(&x, name, t, 2, ne);
    return x;
}

#define REJECT(expr, fragment)                                                                              \
    do {                                                                                                    \
        mi_err_clear();                                                                                     \
        mi_tensor *r_ = (expr);                                                                             \
        cr_assert_null(r_, "accepted: %s", #expr);                                                          \
        cr_assert(strstr(mi_errmsg(), fragment) != NULL, "%s: message '%s' lacks '%s'", #expr, mi_errmsg(), \
                  fragment);                                                                                \
    } while (0)

Test(graph, tensor_init_and_nbytes) {
    mi_tensor w = mk("w", MI_TYPE_Q4_0, 896, 10);
    cr_assert_eq(w.ne[2], 1);
    cr_assert_eq(w.nb[1], 896 / 32 * 18);
    cr_assert_eq(mi_nbytes(&w), (size_t)(896 / 32 * 18 * 10));
    cr_assert_eq(w.backend, -1);
    cr_assert_eq(w.op, MI_OP_NONE);
    mi_tensor f = mk("f", MI_TYPE_F16, 7, 3);
    cr_assert_eq(mi_nbytes(&f), 42u);
    cr_assert_str_eq(mi_op_name(MI_OP_ATTN), "attn");
    cr_assert_str_eq(mi_op_name(MI_OP_COUNT), "?");
}

Test(graph, builders_shapes) {
    mi_graph *g = graph_new(64);
    mi_tensor emb = mk("emb", MI_TYPE_Q8_0, 64, 100), wq = mk("wq", MI_TYPE_Q4_K, 256, 128),
              bq = mk("bq", MI_TYPE_F32, 128, 1), nw = mk("nw", MI_TYPE_F32, 64, 1), hw = mk("hw", MI_TYPE_F32, 16, 1),
              kc = mk("kc", MI_TYPE_F16, 32, 40);
    int32_t ids[3] = {1, 2, 3};
    mi_tensor *id = graph_input(g, "ids", MI_TYPE_I32, 3, 1, ids);
    cr_assert_not_null(id, "%s", mi_errmsg());
    cr_assert(id->flags & MI_T_INPUT);
    cr_assert_eq(id->host_src, ids);
    mi_tensor *x = graph_get_rows(g, &emb, id);
    cr_assert(x && x->type == MI_TYPE_F32 && x->ne[0] == 64 && x->ne[1] == 3);
    mi_tensor *n = graph_rms_norm(g, x, &nw, 64, 1e-5f);
    cr_assert(n && n->p[0] == 64 && mi_tensor_pf(n, 1) == 1e-5f);
    mi_tensor *ph = graph_rms_norm(g, x, &hw, 16, 1e-6f);   /* per-head: 4 heads of 16 */
    cr_assert(ph && ph->ne[0] == 64);
    mi_tensor xin = mk("xin", MI_TYPE_F32, 256, 3);
    mi_tensor *m = graph_matmul(g, &wq, &xin, &bq);
    cr_assert(m && m->ne[0] == 128 && m->ne[1] == 3 && m->src[2] == &bq);
    mi_tensor *a = graph_add(g, x, n);
    mi_tensor *bc = graph_mul(g, x, &nw);   /* [64,1] broadcasts over columns */
    cr_assert(a && bc && bc->ne[1] == 3);
    mi_tensor *pos = graph_input(g, "pos", MI_TYPE_I32, 3, 1, ids);
    mi_tensor *r = graph_rope(g, x, pos, 16, MI_ROPE_NEOX, 16, 1e6f);
    cr_assert(r && r->p[0] == 16 && r->p[1] == MI_ROPE_NEOX && r->p[2] == 16 && mi_tensor_pf(r, 3) == 1e6f);
    mi_tensor kin = mk("k", MI_TYPE_F32, 32, 3);
    mi_tensor *ks = graph_kv_store(g, &kin, &kc, 5);
    cr_assert(ks && (ks->flags & MI_T_ALIAS) && ks->type == MI_TYPE_F16 && ks->ne[1] == 40 && ks->p[0] == 5);
    mi_tensor *at = graph_attn(g, x, ks, ks, 5, 16, 4, 2, 0.25f);
    cr_assert(at && at->ne[0] == 64 && at->ne[1] == 3 && at->p[2] == 4 && at->p[3] == 2);
    mi_tensor *sl = graph_slice_rows(g, at, 2, 1);
    cr_assert(sl && sl->ne[1] == 1 && sl->p[0] == 2);
    mi_tensor *sw = graph_swiglu(g, x, n), *si = graph_silu(g, x);
    cr_assert(sw && si);
    /* nodes are in build order, ids match */
    for (int i = 0; i < g->n_nodes; i++) cr_assert_eq(g->nodes[i]->id, i);
    graph_free(g);
}

Test(graph, bad_shapes_rejected) {
    mi_graph *g = graph_new(16);
    mi_tensor x = mk("x", MI_TYPE_F32, 64, 3), x2 = mk("x2", MI_TYPE_F32, 63, 3), w = mk("w", MI_TYPE_Q4_0, 64, 8),
              wbad = mk("wbad", MI_TYPE_Q4_0, 48, 8), f16x = mk("f16x", MI_TYPE_F16, 64, 3),
              b = mk("b", MI_TYPE_F32, 9, 1), nw = mk("nw", MI_TYPE_F32, 64, 1), pos = mk("pos", MI_TYPE_I32, 3, 1),
              pos2 = mk("pos2", MI_TYPE_I32, 4, 1), kc = mk("kc", MI_TYPE_F16, 64, 10),
              kq = mk("kq", MI_TYPE_Q8_0, 64, 10), ids_f = mk("ids", MI_TYPE_F32, 3, 1);
    REJECT(graph_input(g, "i", MI_TYPE_F32, 0, 3, NULL), "must be > 0");
    REJECT(graph_input(g, "i", MI_TYPE_Q4_0, 33, 1, NULL), "row length");
    REJECT(graph_matmul(g, &w, &x2, NULL), "inner dims");
    REJECT(graph_matmul(g, &wbad, &x, NULL), "multiple");
    REJECT(graph_matmul(g, &w, &f16x, NULL), "must be F32");
    REJECT(graph_matmul(g, &w, &x, &b), "bias");
    REJECT(graph_add(g, &x, &x2), "broadcast");
    REJECT(graph_mul(g, &x, &f16x), "must be F32");
    REJECT(graph_rms_norm(g, &x, &nw, 48, 1e-6f), "group");
    REJECT(graph_rms_norm(g, &x, &nw, 32, 1e-6f), "elements");
    REJECT(graph_rope(g, &x, &pos2, 16, MI_ROPE_NEOX, 16, 1e4f), "positions");
    REJECT(graph_rope(g, &x, &pos, 24, MI_ROPE_NEOX, 16, 1e4f), "head_dim");
    REJECT(graph_rope(g, &x, &pos, 16, 1, 16, 1e4f), "mode");
    REJECT(graph_rope(g, &x, &pos, 16, MI_ROPE_NORMAL, 17, 1e4f), "n_rot");
    REJECT(graph_rope(g, &x, &pos, 16, MI_ROPE_NORMAL, 32, 1e4f), "n_rot");
    REJECT(graph_swiglu(g, &x, &x2), "differ");
    REJECT(graph_kv_store(g, &x, &kc, 8), "past the cache");
    REJECT(graph_kv_store(g, &x, &kc, -1), "past the cache");
    REJECT(graph_kv_store(g, &x, &kq, 0), "F16 or F32");
    REJECT(graph_kv_store(g, &x2, &kc, 0), "cache row");
    REJECT(graph_attn(g, &x, &kc, &kc, 0, 16, 4, 3, 1.0f), "GQA");
    REJECT(graph_attn(g, &x, &kc, &kc, 0, 16, 3, 3, 1.0f), "heads");
    REJECT(graph_attn(g, &x, &kc, &kc, 8, 16, 4, 4, 1.0f), "exceed");
    REJECT(graph_attn(g, &x, &kc, &kc, 0, 16, 4, 4, 0.0f), "scale");
    REJECT(graph_slice_rows(g, &x, 2, 2), "outside");
    REJECT(graph_slice_rows(g, &x, 0, 0), "outside");
    REJECT(graph_get_rows(g, &w, &ids_f), "I32");
    REJECT(graph_get_rows(g, &w, &x), "I32");
    REJECT(graph_matmul(g, NULL, &x, NULL), "NULL");
    cr_assert_eq(g->n_nodes, 0, "rejected builders must not append nodes");
    graph_free(g);
}

Test(graph, arena_grows_with_stable_pointers) {
    mi_graph *g = graph_new(16);
    mi_tensor x = mk("x", MI_TYPE_F32, 8, 2);
    mi_tensor *first = graph_silu(g, &x);
    mi_tensor *prev = first;
    for (int i = 0; i < 500; i++) {
        mi_tensor *t = graph_silu(g, prev);
        cr_assert_not_null(t, "%s", mi_errmsg());
        cr_assert_eq(t->src[0], prev);
        prev = t;
    }
    cr_assert_eq(g->n_nodes, 501);
    cr_assert_eq(g->nodes[0], first);
    cr_assert_eq(first->op, MI_OP_SILU);
    for (int i = 1; i < g->n_nodes; i++) cr_assert_eq(g->nodes[i]->src[0], g->nodes[i - 1]);
    graph_free(g);
}

Test(graph, node_names) {
    /* the names a step's nodes get, written without printf: the same bytes snprintf would write */
    mi_graph *g = graph_new(16);
    mi_tensor x = mk("x", MI_TYPE_F32, 8, 2);
    mi_tensor *a = graph_silu(g, &x), *b = graph_silu(g, a);
    char want[MI_NAME_MAX];
    snprintf(want, sizeof want, "%s-%d", mi_op_name(MI_OP_SILU), 1);
    cr_assert_str_eq(b->name, want);
    mi_tensor_set_name_layer(a, 27, "attn_q");
    cr_assert_str_eq(a->name, "blk.27.attn_q");
    mi_tensor_set_name_layer(a, 0, "ffn_down");
    cr_assert_str_eq(a->name, "blk.0.ffn_down");
    char longname[200];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    char full[256];
    mi_tensor_set_name(a, longname);   /* cut to MI_NAME_MAX - 1 bytes */
    cr_assert_eq(strlen(a->name), MI_NAME_MAX - 1);
    cr_assert(!strncmp(a->name, longname, MI_NAME_MAX - 1));
    mi_tensor_set_name_layer(a, 123456, longname);
    strcpy(full, "blk.123456.");
    strcat(full, longname);
    cr_assert_eq(strlen(a->name), MI_NAME_MAX - 1);
    cr_assert(!strncmp(a->name, full, MI_NAME_MAX - 1));
    mi_tensor_set_name(a, NULL);
    cr_assert_str_eq(a->name, "");
    graph_free(g);
}

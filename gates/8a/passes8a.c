/* gate_8a's host cases: 8a's graph passes on hand-built graphs, run by the CPU backend (no
 * device needed; CI's build runs them): which nodes each pass fuses or marks, which CUDA
 * candidates the marked nodes get, and the CPU output bit-identical to the unpassed graph's. */
#include "gates/8a/passes8a.h"
#include "phase8a_decode/decode8a.h"
#include "phase7c_wiring/wiring7c.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "common/backend/backend.h"
#include "common/backend/sched.h"
#include "common/graph/graph.h"
#include "common/quant/mi_types.h"
#include <stdlib.h>
#include <string.h>

static gu_run *g_r;
static unsigned long long *g_seed;

/* a CPU backend of `threads` threads, a scheduler on it and an empty graph: the frame of the cases
 * below; false when one could not be made (frame_close frees what was) */
typedef struct {
    mi_backend *cpu;
    mi_sched *sc;
    mi_graph *g;
} cpu_frame;
static bool frame_open(cpu_frame *f, int threads) {
    f->cpu = NULL, f->sc = NULL, f->g = graph_new(64);
    return f->g && mi_backend_cpu_new(threads, &f->cpu) == MI_OK && sched_new(&f->cpu, 1, &f->sc) == MI_OK;
}
static void frame_close(cpu_frame *f) {
    graph_free(f->g);
    if (f->sc) sched_free(f->sc);
    if (f->cpu) f->cpu->iface->destroy(f->cpu);
}

/* ---------------- the fusion pass on the CPU (runs without a device) ----------------
 * A hand-built layer: h = rms_norm(x), q = Wq h + b, k = Wk h, o = Wo q, y = (x + o) * k, and
 * (extra_reader) + h, a second reader of h that no fused form takes. Run by a [cpu] scheduler unfused and after
 * mi8a_fuse_decode with the CPU backend as the target (it runs the fused ops too): outputs
 * bit-identical; the norm folded into q and k and the add into o at N = 1; the norm kept when
 * a reader cannot take it; nothing fused at N = 3. Checks the graph rewrite, not a kernel. */
static mi_tensor *leaf_w(const char *name, mi_type t, int64_t K, int64_t M, void **mem) {
    mi_tensor *l = calloc(1, sizeof *l);
    int64_t ne[2] = {K, M};
    tensor_init(l, name, t, 2, ne);
    l->flags = MI_T_WEIGHT;
    *mem = t == MI_TYPE_F32 ? (void *)gu_rand_f32(g_seed, (size_t)(K * M), 0.5f, 1.5f)
                            : gu_make_weights(g_seed, t, K, M, 1.0f, NULL);
    l->data = *mem;
    return l;
}

/* fuse: 0 no pass, else the pass folding a norm into at most `fuse` readers */
static int fuse_layer(int64_t N, bool extra_reader, int fuse, float *out, int *n_fused) {
    enum { K = 256, M = 256 };
    void *mq, *mk, *mo, *mn, *mb;
    mi_tensor *wq = leaf_w("wq", MI_TYPE_Q4_0, K, M, &mq), *wk = leaf_w("wk", MI_TYPE_Q4_K, K, M, &mk);
    mi_tensor *wo = leaf_w("wo", MI_TYPE_Q8_0, M, K, &mo), *wn = leaf_w("norm", MI_TYPE_F32, K, 1, &mn);
    mi_tensor *bq = leaf_w("bq", MI_TYPE_F32, M, 1, &mb);
    float *xin = gu_rand_f32(g_seed, (size_t)(K * N), -1.f, 1.f);
    cpu_frame fr;
    int rc = 1;
    if (frame_open(&fr, 2)) {
        mi_graph *g = fr.g;
        mi_sched *sc = fr.sc;
        mi_backend *cpu = fr.cpu;
        mi_tensor *x = graph_input(g, "x", MI_TYPE_F32, K, N, xin);
        mi_tensor *h = graph_rms_norm(g, x, wn, K, 1e-6f);
        mi_tensor *q = graph_matmul(g, wq, h, bq), *k = graph_matmul(g, wk, h, NULL);
        mi_tensor *y = graph_add(g, x, graph_matmul(g, wo, q, NULL));
        y = graph_mul(g, y, k);   /* a reader of k that is no residual add */
        if (extra_reader) y = graph_add(g, y, h);
        y->flags |= MI_T_OUTPUT;
        g->output = y;
        *n_fused = fuse ? mi8a_fuse_decode_with(g, cpu, fuse) : 0;
        if (sched_compute(sc, g) == MI_OK && sched_read(sc, y, out, 0, mi_nbytes(y)) == MI_OK) rc = 0;
    }
    frame_close(&fr);
    free(mq); free(mk); free(mo); free(mn); free(mb); free(xin);
    free(wq); free(wk); free(wo); free(wn); free(bq);
    return rc;
}

static void test_fusion_pass_cpu(void) {
    if (!gu_begin(g_r, "fusion_pass_cpu")) return;
    static float a[256 * 3], b[256 * 3];
    int nf = 0, nf1 = 0, nf2 = 0, nf3 = 0;
    const unsigned long long seed = (*g_seed);
    const char *err = NULL;
    if (fuse_layer(1, false, 0, a, &nf) || ((*g_seed) = seed, fuse_layer(1, false, 8, b, &nf))) err = "run failed";
    else if (nf != 3) err = "want 3 fusions with up to 8 readers (norm into q and k, add into o)";
    else if (memcmp(a, b, sizeof(float) * 256)) err = "fused output differs from unfused";
    else if (((*g_seed) = seed, fuse_layer(1, false, 1, b, &nf1))) err = "run failed (one reader)";
    else if (nf1 != 1) err = "want only the add fused when a norm of two readers may go into one";
    else if (memcmp(a, b, sizeof(float) * 256)) err = "fused output differs from unfused (one reader)";
    else if (((*g_seed) = seed, fuse_layer(1, true, 0, a, &nf2)) || ((*g_seed) = seed, fuse_layer(1, true, 8, b, &nf2)))
        err = "run failed (extra reader)";
    else if (nf2 != 1) err = "want only the add fused when the norm has a reader no fused form takes";
    else if (memcmp(a, b, sizeof(float) * 256)) err = "fused output differs from unfused (extra reader)";
    else if (fuse_layer(3, false, 8, b, &nf3)) err = "run failed (N = 3)";
    else if (nf3 != 0) err = "fused a 3-token graph";
    if (err) gu_fail(g_r, "%s (%s; fusions %d / %d / %d / %d)", err, mi_errmsg(), nf, nf1, nf2, nf3);
    else gu_pass(g_r, "norm into 2 matmuls and 1 residual add fused at N = 1 (up to 8 readers), only the add with "
                     "one, output bit-identical on the CPU backend; the norm kept when another reader needs it; "
                     "nothing fused at N = 3");
}

/* The pass's run marks on a hand-built graph (no device needed: the dispatch answers from the
 * shapes): three one-token matmuls of type t of one x, then one of another x. d13 marks runs on
 * 8a's Q4_K kernel or 7b's kernel defer / defer / last; with d13 off, d7 marks the Q8_0 run (7b's
 * kernel) first / next / next; the fourth is alone. The CPU ignores the marks: its output equals
 * the unpassed graph's. */
static int marks_graph(mi_type t, bool pass, int marks[4], float *out) {
    enum { K = 256, M = 64 };
    void *mem[4];
    mi_tensor *w[4];
    for (int i = 0; i < 4; i++) w[i] = leaf_w("w", t, K, M, &mem[i]);
    float *xin = gu_rand_f32(g_seed, K, -1.f, 1.f), *x2in = gu_rand_f32(g_seed, K, -1.f, 1.f);
    cpu_frame fr;
    int rc = 1;
    if (frame_open(&fr, 1)) {
        mi_graph *g = fr.g;
        mi_sched *sc = fr.sc;
        mi_backend *cpu = fr.cpu;
        mi_tensor *x = graph_input(g, "x", MI_TYPE_F32, K, 1, xin), *x2 = graph_input(g, "x2", MI_TYPE_F32, K, 1, x2in);
        mi_tensor *mm[4];   /* in this order in the graph */
        for (int i = 0; i < 4; i++) mm[i] = graph_matmul(g, w[i], i < 3 ? x : x2, NULL);
        /* products, not sums: the pass would fold a sum into the matmul before it (d2) */
        mi_tensor *y = graph_mul(g, graph_mul(g, mm[0], mm[1]), graph_mul(g, mm[2], mm[3]));
        y->flags |= MI_T_OUTPUT;
        g->output = y;
        if (pass) mi8a_fuse_decode_with(g, cpu, 1);
        for (int i = 0; i < 4; i++) marks[i] = mi_matmul_shared_x(mm[i]);
        if (sched_compute(sc, g) == MI_OK && sched_read(sc, y, out, 0, mi_nbytes(y)) == MI_OK) rc = 0;
    }
    frame_close(&fr);
    for (int i = 0; i < 4; i++) free(mem[i]), free(w[i]);
    free(xin);
    free(x2in);
    return rc;
}

/* base: items off on both sides (the item under test is turned off on top of them) */
static void marks_case(const char *name, mi_type t, const char *base, const char *item, const int want[4],
                       const int want_off[4], const char *what) {
    if (!gu_begin(g_r, name)) return;
    float a[64], b[64], c[64];
    int m0[4], m1[4], m2[4];
    char off[64];
    snprintf(off, sizeof off, "%s%s%s", base, *base ? "," : "", item);
    const unsigned long long seed = (*g_seed);
    mi_status st = mi_cuda_items_set_off(base);
    int rc = st == MI_OK ? marks_graph(t, false, m0, a) : 1;
    (*g_seed) = seed;
    if (!rc) rc = marks_graph(t, true, m1, b);
    if (!rc) st = mi_cuda_items_set_off(off);
    (*g_seed) = seed;
    if (!rc && st == MI_OK) rc = marks_graph(t, true, m2, c);
    mi_cuda_items_set_off("");
    const bool marked = !memcmp(m1, want, sizeof m1), marked_off = !memcmp(m2, want_off, sizeof m2);
    if (rc || st != MI_OK) gu_fail(g_r, "run failed: %s", mi_errmsg());
    else if (!marked || !marked_off || memcmp(a, b, sizeof a))
        gu_fail(g_r, "marks %d %d %d %d (want %d %d %d %d), with %s off %d %d %d %d (want %d %d %d %d), CPU output %s",
                m1[0], m1[1], m1[2], m1[3], want[0], want[1], want[2], want[3], item, m2[0], m2[1], m2[2], m2[3],
                want_off[0], want_off[1], want_off[2], want_off[3], memcmp(a, b, sizeof a) ? "DIFFERS" : "bit-identical");
    else gu_pass(g_r, "%s; CPU output bit-identical to the unpassed graph", what);
}

static void test_marks_pass(void) {
    const int none[4] = {0, 0, 0, 0};
    const int xq[4] = {MI_MM_X_FIRST, MI_MM_X_NEXT, MI_MM_X_NEXT, 0};
    const int run[4] = {MI_MM_RUN_DEFER, MI_MM_RUN_DEFER, MI_MM_RUN_LAST, 0};
    marks_case("shared_x_pass", MI_TYPE_Q8_0, "d13", "d7", xq, none,
               "with d13 off: three Q8_0 matmuls of one x marked first / next / next, one of another x none; "
               "nothing with d7 off too");
    marks_case("run_pass", MI_TYPE_Q4_K, "", "d13", run, none,
               "three Q4_K matmuls of one x (8a's kernel) marked defer / defer / last, one of another x none; "
               "nothing with d13 off");
    marks_case("run_pass_d6_off", MI_TYPE_Q4_K, "d6", "d13", run, none,
               "with d6 off: three Q4_K matmuls of one x (7e's kernel) marked defer / defer / last, one of "
               "another x none; nothing with d13 off too");
    marks_case("run_rows_pass", MI_TYPE_Q8_0, "", "d13", run, xq,
               "three Q8_0 matmuls of one x (7b's kernel) marked defer / defer / last, one of another x none; "
               "with d13 off d7's marks");
}

/* d17 on a hand-built graph (no device needed): x -> rms_norm -> three one-token matmuls (a d13
 * run) -> their product. A norm read by the run (and by matmuls a NORM_MATMUL candidate takes) is
 * folded: they become NORM_MATMUL of x, the run still marked defer ... last, and the norm leaves
 * the graph; with d17 off, or with another kind of reader of the norm, the run stays MATMUL on
 * the norm's output. The CPU's output equals the unpassed graph's. */
static int run_norm_graph(mi_type t, mi_type t3, bool pass, bool extra_reader, int ops[3], int roles[3],
                          int *has_norm, float *out) {
    enum { K = 256, M = 64 };
    void *mem[5];
    mi_tensor *w[3];
    for (int i = 0; i < 3; i++) w[i] = leaf_w("w", i < 2 ? t : t3, K, M, &mem[i]);
    mi_tensor *wn = leaf_w("norm", MI_TYPE_F32, K, 1, &mem[3]), *wf = leaf_w("wf", MI_TYPE_F32, K, M, &mem[4]);
    float *xin = gu_rand_f32(g_seed, K, -1.f, 1.f);
    cpu_frame fr;
    int rc = 1;
    if (frame_open(&fr, 1)) {
        mi_graph *g = fr.g;
        mi_sched *sc = fr.sc;
        mi_backend *cpu = fr.cpu;
        mi_tensor *x = graph_input(g, "x", MI_TYPE_F32, K, 1, xin);
        mi_tensor *h = graph_rms_norm(g, x, wn, K, 1e-6f), *mm[3];
        for (int i = 0; i < 3; i++) mm[i] = graph_matmul(g, w[i], h, NULL);
        mi_tensor *y = graph_mul(g, graph_mul(g, mm[0], mm[1]), mm[2]);
        if (extra_reader) y = graph_mul(g, y, graph_matmul(g, wf, h, NULL));   /* another type: no part of the run */
        y->flags |= MI_T_OUTPUT;
        g->output = y;
        if (pass) mi8a_fuse_decode_with(g, cpu, 1);
        *has_norm = 0;
        for (int i = 0; i < g->n_nodes; i++) *has_norm |= g->nodes[i] == h;
        for (int i = 0; i < 3; i++) ops[i] = (int)mm[i]->op, roles[i] = mi_matmul_shared_x(mm[i]);
        if (sched_compute(sc, g) == MI_OK && sched_read(sc, y, out, 0, mi_nbytes(y)) == MI_OK) rc = 0;
    }
    frame_close(&fr);
    for (int i = 0; i < 5; i++) free(mem[i]);
    for (int i = 0; i < 3; i++) free(w[i]);
    free(wn), free(wf), free(xin);
    return rc;
}

/* t3: the third matmul's type (another type: v outside the q, k run). want: each matmul's op and
 * role after the pass, and whether the norm stays */
typedef struct {
    int op[3], role[3];
    bool norm_kept;
} run_norm_want;
static void run_norm_case(const char *name, mi_type t, mi_type t3, const char *off, bool extra_reader,
                          const run_norm_want *want) {
    if (!gu_begin(g_r, name)) return;
    float a[64], b[64];   /* y: M floats */
    int ops0[3], r0[3], n0, ops1[3], r1[3], n1;
    const unsigned long long seed = (*g_seed);
    mi_status st = mi_cuda_items_set_off(off);
    int rc = st == MI_OK ? run_norm_graph(t, t3, false, extra_reader, ops0, r0, &n0, a) : 1;
    (*g_seed) = seed;
    if (!rc) rc = run_norm_graph(t, t3, true, extra_reader, ops1, r1, &n1, b);
    mi_cuda_items_set_off("");
    bool ok = (n1 != 0) == want->norm_kept;
    for (int i = 0; i < 3; i++) ok = ok && ops1[i] == want->op[i] && r1[i] == want->role[i];
    if (rc || st != MI_OK) gu_fail(g_r, "run failed: %s", mi_errmsg());
    else if (!ok || memcmp(a, b, sizeof a))
        gu_fail(g_r, "ops %s %s %s, roles %d %d %d, norm %s (want %s %s %s, %d %d %d, %s); CPU output %s",
                mi_op_name((mi_op)ops1[0]), mi_op_name((mi_op)ops1[1]), mi_op_name((mi_op)ops1[2]), r1[0], r1[1], r1[2],
                n1 ? "kept" : "gone", mi_op_name((mi_op)want->op[0]), mi_op_name((mi_op)want->op[1]),
                mi_op_name((mi_op)want->op[2]), want->role[0], want->role[1], want->role[2],
                want->norm_kept ? "kept" : "gone", memcmp(a, b, sizeof a) ? "DIFFERS" : "bit-identical");
    else gu_pass(g_r, "ops %s %s %s, roles %d %d %d, the norm %s; CPU output bit-identical to the unpassed graph",
                 mi_op_name((mi_op)ops1[0]), mi_op_name((mi_op)ops1[1]), mi_op_name((mi_op)ops1[2]), r1[0], r1[1],
                 r1[2], n1 ? "kept" : "gone");
}

static void test_run_norm_pass(void) {
    enum { MM = MI_OP_MATMUL, NM = MI_OP_NORM_MATMUL, D = MI_MM_RUN_DEFER, L = MI_MM_RUN_LAST };
    const run_norm_want folded = {{NM, NM, NM}, {D, D, L}, false}, kept = {{MM, MM, MM}, {D, D, L}, true};
    const run_norm_want v_apart = {{MM, MM, MM}, {D, L, 0}, true}, v_norm = {{NM, NM, NM}, {D, L, 0}, false};
    run_norm_case("run_norm_pass_q4k", MI_TYPE_Q4_K, MI_TYPE_Q4_K, "", false, &folded);
    run_norm_case("run_norm_pass_rows", MI_TYPE_Q8_0, MI_TYPE_Q8_0, "", false, &folded);
    run_norm_case("run_norm_pass_d17_off", MI_TYPE_Q4_K, MI_TYPE_Q4_K, "d17", false, &kept);
    run_norm_case("run_norm_pass_other_reader", MI_TYPE_Q8_0, MI_TYPE_Q8_0, "", true, &kept);
    /* the 7B's layers whose v is Q6_K: d43's NORM_MATMUL takes v beside the q, k run, so the norm
     * goes; with d43 off no candidate takes v and the norm stays */
    run_norm_case("run_norm_pass_q6k_v", MI_TYPE_Q4_K, MI_TYPE_Q6_K, "", false, &v_norm);
    run_norm_case("run_norm_pass_q6k_v_d43_off", MI_TYPE_Q4_K, MI_TYPE_Q6_K, "d43", false, &v_apart);
}

/* d14's marks on a hand-built step (no device needed): q RoPE, k RoPE, the K store of that k, the
 * V store, then attention over the caches. One token: marked defer / defer / defer / last;
 * nothing with d14 off, nor with d8 off (d14 repeats d8's arithmetic), nor at two tokens. With q
 * normalized first (narrow: a one-row RMS norm of 256, so d10's rule leaves the graph's kernels
 * not programmatic) d30 takes the four into the attention: the V store marked MI_RKV_ATTN, the
 * attention marked with q's and k's RoPE inputs and v as src[3..5] (*attn 1; 0 unmarked, -1
 * marked with other sources). The CPU ignores the marks: its output equals the unpassed graph's. */
static int rkv_graph(int64_t N, bool pass, bool narrow, int marks[4], int *attn, float *out) {
    enum { HD = 64, HQ = 4, HKV = 2, CTX = 16, NP = 5 };
    const int64_t row = HD * HKV, cne[2] = {row, CTX};
    float *q = gu_rand_f32(g_seed, (size_t)(HD * HQ * N), -1.f, 1.f), *k = gu_rand_f32(g_seed, (size_t)(row * N), -1.f, 1.f),
          *v = gu_rand_f32(g_seed, (size_t)(row * N), -1.f, 1.f), *nw = gu_rand_f32(g_seed, (size_t)(HD * HQ), 0.5f, 1.5f);
    int32_t pos[2] = {NP, NP + 1};
    mi_tensor kc, vc;
    tensor_init(&kc, "cache_k", MI_TYPE_F16, 2, cne);
    tensor_init(&vc, "cache_v", MI_TYPE_F16, 2, cne);
    kc.flags = vc.flags = MI_T_PERSIST;
    kc.data = calloc((size_t)(row * CTX), 2);
    vc.data = calloc((size_t)(row * CTX), 2);
    cpu_frame fr;
    int rc = 1;
    if (kc.data && vc.data && frame_open(&fr, 1)) {
        mi_graph *g = fr.g;
        mi_sched *sc = fr.sc;
        mi_backend *cpu = fr.cpu;
        mi_tensor *xq = graph_input(g, "q", MI_TYPE_F32, HD * HQ, N, q), *xk = graph_input(g, "k", MI_TYPE_F32, row, N, k);
        mi_tensor *xv = graph_input(g, "v", MI_TYPE_F32, row, N, v), *xp = graph_input(g, "pos", MI_TYPE_I32, N, 1, pos);
        if (narrow) xq = graph_rms_norm(g, xq, graph_input(g, "nw", MI_TYPE_F32, HD * HQ, 1, nw), HD * HQ, 1e-6f);
        mi_tensor *n[4];
        n[0] = graph_rope(g, xq, xp, HD, MI_ROPE_NEOX, HD, 1000000.f);
        n[1] = graph_rope(g, xk, xp, HD, MI_ROPE_NEOX, HD, 1000000.f);
        n[2] = graph_kv_store(g, n[1], &kc, NP);
        n[3] = graph_kv_store(g, xv, &vc, NP);
        mi_tensor *y = graph_attn(g, n[0], n[2], n[3], NP, HD, HQ, HKV, 0.125f);
        if (y) {
            y->flags |= MI_T_OUTPUT;
            g->output = y;
            if (pass) mi8a_fuse_decode_with(g, cpu, 1);
            for (int i = 0; i < 4; i++) marks[i] = mi_rope_kv_role(n[i]);
            if (marks[3] == MI_RKV_LAST && (n[3]->src[2] != xq || n[3]->src[3] != xk)) marks[3] = -1;   /* sources */
            if (attn)
                *attn = !mi_attn_does_rkv(y) ? 0
                        : y->src[3] == xq && y->src[4] == xk && y->src[5] == xv && y->src[6] == n[1] ? 1 : -1;
            if (sched_compute(sc, g) == MI_OK && (!out || sched_read(sc, y, out, 0, mi_nbytes(y)) == MI_OK)) rc = 0;
        }
    }
    frame_close(&fr);
    free(kc.data), free(vc.data), free(q), free(k), free(v), free(nw);
    return rc;
}

static void test_rope_kv_pass(void) {
    if (!gu_begin(g_r, "rope_kv_pass")) return;
    const int want[4] = {MI_RKV_DEFER, MI_RKV_DEFER, MI_RKV_DEFER, MI_RKV_LAST}, none[4] = {0, 0, 0, 0};
    const int want30[4] = {MI_RKV_DEFER, MI_RKV_DEFER, MI_RKV_DEFER, MI_RKV_ATTN};
    float a[256], b[256], c[256];   /* attention's output: hd * Hq */
    int m0[4], m1[4], m_off[4], m_d8[4], m_n2[4], m30[4], m30off[4], at1 = -2, at30 = -2, at30off = -2;
    const unsigned long long seed = (*g_seed);
    int rc = rkv_graph(1, false, false, m0, NULL, a);
    (*g_seed) = seed;
    if (!rc) rc = rkv_graph(1, true, false, m1, &at1, b);
    mi_status st = mi_cuda_items_set_off("d14");
    (*g_seed) = seed;
    if (!rc && st == MI_OK) rc = rkv_graph(1, true, false, m_off, NULL, c);
    if (st == MI_OK) st = mi_cuda_items_set_off("d8");
    (*g_seed) = seed;
    if (!rc && st == MI_OK) rc = rkv_graph(1, true, false, m_d8, NULL, c);
    mi_cuda_items_set_off("");
    if (!rc && st == MI_OK) rc = rkv_graph(2, true, false, m_n2, NULL, NULL);   /* only its marks */
    /* d30: q normalized by a narrow norm first; the CPU output against the unpassed graph's */
    float d[256], e[256];
    (*g_seed) = seed;
    if (!rc && st == MI_OK) rc = rkv_graph(1, false, true, m0, NULL, d);
    (*g_seed) = seed;
    if (!rc && st == MI_OK) rc = rkv_graph(1, true, true, m30, &at30, e);
    if (st == MI_OK) st = mi_cuda_items_set_off("d30");
    if (!rc && st == MI_OK) rc = rkv_graph(1, true, true, m30off, &at30off, NULL);
    mi_cuda_items_set_off("");
    const bool ok = !memcmp(m1, want, sizeof m1) && at1 == 0 && !memcmp(m_off, none, sizeof m_off) &&
                    !memcmp(m_d8, none, sizeof m_d8) && !memcmp(m_n2, none, sizeof m_n2) &&
                    !memcmp(m30, want30, sizeof m30) && at30 == 1 && !memcmp(m30off, want, sizeof m30off) &&
                    at30off == 0;
    const bool same = !memcmp(a, b, sizeof a) && !memcmp(d, e, sizeof d);
    if (rc || st != MI_OK) gu_fail(g_r, "run failed: %s", mi_errmsg());
    else if (!ok || !same)
        gu_fail(g_r, "marks %d %d %d %d, attention %d (want %d %d %d %d, 0); d14 off %d %d %d %d, d8 off %d %d %d %d, two "
                    "tokens %d %d %d %d (want none); narrow q (d30) %d %d %d %d, attention %d (want V store %d, 1), d30 "
                    "off %d %d %d %d, attention %d; CPU output %s", m1[0], m1[1], m1[2], m1[3], at1, want[0], want[1],
                want[2], want[3], m_off[0], m_off[1], m_off[2], m_off[3], m_d8[0], m_d8[1], m_d8[2], m_d8[3], m_n2[0],
                m_n2[1], m_n2[2], m_n2[3], m30[0], m30[1], m30[2], m30[3], at30, MI_RKV_ATTN, m30off[0], m30off[1],
                m30off[2], m30off[3], at30off, same ? "bit-identical" : "DIFFERS");
    else gu_pass(g_r, "one token's q RoPE, k RoPE, K store, V store marked defer / defer / defer / last, the last "
                     "with q and k as sources; nothing with d14 or d8 off or at two tokens; after a narrow norm (d30) "
                     "the V store marked for the attention, which holds q, k, v and k's RoPE (d14's marks with d30 off); CPU "
                     "output bit-identical to the unpassed graph");
}

/* d15 on a hand-built one-token FFN and head in the 0.5B's shapes (no device needed: the dispatch
 * answers from the shapes): norm -> gate/up/SwiGLU, the down projection (K = 4864: 7e's staged
 * rows) + the residual add, the final norm -> a Q8_0 head. The pass (given the CPU backend, which
 * runs every fused form) makes the down's MATMUL_ADD; the CUDA dispatch gives it d15's candidate,
 * and none with d15 off (so on CUDA the pass leaves it unfused). The CPU's output equals the
 * unpassed graph's. */
static int staged_graph(bool pass, const char **kind, float *out) {
    enum { E = 896, F = 4864, V = 1000 };
    void *m[6];
    mi_tensor *wg = leaf_w("wg", MI_TYPE_Q4_0, E, F, &m[0]), *wu = leaf_w("wu", MI_TYPE_Q4_0, E, F, &m[1]);
    mi_tensor *wd = leaf_w("wd", MI_TYPE_Q4_0, F, E, &m[2]), *wh = leaf_w("wh", MI_TYPE_Q8_0, E, V, &m[3]);
    mi_tensor *n1 = leaf_w("n1", MI_TYPE_F32, E, 1, &m[4]), *n2 = leaf_w("n2", MI_TYPE_F32, E, 1, &m[5]);
    float *xin = gu_rand_f32(g_seed, E, -1.f, 1.f);
    cpu_frame fr;
    int rc = 1;
    if (frame_open(&fr, 2)) {
        mi_graph *g = fr.g;
        mi_sched *sc = fr.sc;
        mi_backend *cpu = fr.cpu;
        mi_tensor *x = graph_input(g, "x", MI_TYPE_F32, E, 1, xin);
        mi_tensor *h = graph_rms_norm(g, x, n1, E, 1e-6f);
        mi_tensor *f = graph_swiglu(g, graph_matmul(g, wg, h, NULL), graph_matmul(g, wu, h, NULL));
        mi_tensor *y = graph_add(g, x, graph_matmul(g, wd, f, NULL));
        mi_tensor *logits = graph_matmul(g, wh, graph_rms_norm(g, y, n2, E, 1e-6f), NULL);
        if (logits) {
            logits->flags |= MI_T_OUTPUT;
            g->output = logits;
            if (pass) {
                m7c_fuse_ffn(g, cpu);
                mi8a_fuse_decode_with(g, cpu, 1);
            }
            *kind = "none";
            for (int i = 0; i < g->n_nodes; i++) {
                const mi_tensor *t = g->nodes[i];
                const struct mi_cuda_kernel *kn = mi_cuda_choice(t);
                const char *it = !kn ? "no candidate" : kn->items ? kn->items : "";
                if (t->op == MI_OP_MATMUL_ADD) *kind = strstr(it, "d15") ? "d15" : it;
            }
            if (sched_compute(sc, g) == MI_OK && sched_read(sc, logits, out, 0, mi_nbytes(logits)) == MI_OK) rc = 0;
        }
    }
    frame_close(&fr);
    for (int i = 0; i < 6; i++) free(m[i]);
    free(wg), free(wu), free(wd), free(wh), free(n1), free(n2), free(xin);
    return rc;
}

static void test_staged_pass(void) {
    if (!gu_begin(g_r, "staged_pass")) return;
    static float a[1000], b[1000], c[1000];
    const char *k0, *k1, *k2;
    const unsigned long long seed = (*g_seed);
    int rc = staged_graph(false, &k0, a);
    (*g_seed) = seed;
    if (!rc) rc = staged_graph(true, &k1, b);
    mi_status st = mi_cuda_items_set_off("d15");
    (*g_seed) = seed;
    if (!rc && st == MI_OK) rc = staged_graph(true, &k2, c);
    mi_cuda_items_set_off("");
    if (rc || st != MI_OK) gu_fail(g_r, "run failed: %s", mi_errmsg());
    else if (strcmp(k1, "d15") || strcmp(k2, "no candidate") || memcmp(a, b, sizeof a) || memcmp(a, c, sizeof a))
        gu_fail(g_r, "matmul+add: %s (want d15); with d15 off: %s (want no candidate); CPU output %s", k1, k2,
                memcmp(a, b, sizeof a) || memcmp(a, c, sizeof a) ? "DIFFERS" : "bit-identical");
    else gu_pass(g_r, "the 0.5B's down + residual: d15's candidate takes the fused node, no CUDA candidate with it "
                     "off; CPU output bit-identical to the unpassed graph");
}

/* d10's flags: a one-token step narrower than MI8A_PDL_MIN_EMBD gets none, a wider one and a
 * step of several tokens get MI_T_EARLY on every node */
static int early_flags(int64_t K, int64_t N) {
    void *mn;
    mi_tensor *wn = leaf_w("norm", MI_TYPE_F32, K, 1, &mn);
    mi_backend *cpu = NULL;
    mi_graph *g = graph_new(16);
    int flagged = -1;
    if (mi_backend_cpu_new(1, &cpu) == MI_OK && g) {
        mi_tensor *x = graph_input(g, "x", MI_TYPE_F32, K, N, NULL);
        mi_tensor *y = graph_add(g, graph_rms_norm(g, x, wn, K, 1e-6f), x);
        y->flags |= MI_T_OUTPUT;
        g->output = y;
        mi8a_fuse_decode_with(g, cpu, 1);
        flagged = 0;
        for (int i = 0; i < g->n_nodes; i++) flagged += (g->nodes[i]->flags & MI_T_EARLY) != 0;
        flagged = flagged == 0 ? 0 : flagged == g->n_nodes ? 1 : 2;
    }
    graph_free(g);
    if (cpu) cpu->iface->destroy(cpu);
    free(mn);
    free(wn);
    return flagged;
}

static void test_early_flags(void) {
    if (!gu_begin(g_r, "early_flags_pass")) return;
    const int narrow = early_flags(896, 1), wide = early_flags(3584, 1), prompt = early_flags(896, 5);
    if (narrow != 0 || wide != 1 || prompt != 1)
        gu_fail(g_r, "flagged (0 none, 1 all, 2 some): one token at 896 %d (want 0), at 3584 %d (want 1), five tokens "
                    "at 896 %d (want 1)", narrow, wide, prompt);
    else gu_pass(g_r, "one token at 896: no node flagged; at 3584 and five tokens at 896: every node");
}


/* the dispatch's switch items past the first 64 (8a and 8b together declare more): each one
 * turned off alone reads off, and no other item does; "all" and "" as the lists say */
static void test_item_set(void) {
    if (!gu_begin(g_r, "perf_items_set")) return;
    const char *name = NULL;
    int n = 0, bad = -1;
    while (mi_cuda_item_at(n, &name, NULL)) n++;
    for (int i = 0; i < n && bad < 0; i++) {
        mi_cuda_item_at(i, &name, NULL);
        if (mi_cuda_items_set_off(name) != MI_OK) bad = i;
        for (int j = 0; j < n && bad < 0; j++) {
            const char *other = NULL;
            mi_cuda_item_at(j, &other, NULL);
            if (mi_cuda_item_on(other) != (i != j) || mi_cuda_items_on(other) != (i != j)) bad = i;
        }
    }
    char d[2048] = "";
    bool all = mi_cuda_items_set_off("all") == MI_OK;
    for (int i = 0; i < n && all; i++) {
        mi_cuda_item_at(i, &name, NULL);
        all = !mi_cuda_item_on(name);
    }
    if (all) mi_cuda_items_describe(d, sizeof d);
    mi_cuda_items_set_off("");
    bool none = true;
    for (int i = 0; i < n && none; i++) {
        mi_cuda_item_at(i, &name, NULL);
        none = mi_cuda_item_on(name);
    }
    if (bad >= 0 || !all || !none || !strstr(d, "on: none"))
        gu_fail(g_r, "%d items: item #%d turned off alone %s; \"all\" %s (%s); \"\" %s", n, bad,
                bad >= 0 ? "did not read as the only one off" : "fine", all ? "turned every one off" : "LEFT SOME ON",
                d, none ? "turned every one on" : "LEFT SOME OFF");
    else gu_pass(g_r, "%d items, each off alone, all, none", n);
}

void passes8a_run(gu_run *run, unsigned long long *seed) {
    g_r = run;
    g_seed = seed;
    test_fusion_pass_cpu();
    test_marks_pass();
    test_rope_kv_pass();
    test_run_norm_pass();
    test_staged_pass();
    test_early_flags();
    test_item_set();
}

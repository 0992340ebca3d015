/* gate_8b's op-level cases of a step of many sequences (docs/PHASE8B.md): the host's table checks,
 * the CPU reference of one paged step, and on the device KV_SCATTER + ATTN_PAGED as a graph
 * against the CPU and a double reference, then bad tables and calls, b20's RoPEs-and-scatters
 * launch against the four kernels, and b47's attention doing them against b20's then the
 * attention. The whole-model tests and
 * main are gate_8b.c. */
#include "gates/8b/paged8b.h"
#include "gates/7e/dev7e.h"
#include "phase8b_batch/batch8b.h"
#include "phase7e_perf/perf7e.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "common/backend/sched.h"
#include "common/graph/graph.h"
#include "common/core/mi_fp16.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static gu_run *g_r;
static cudaStream_t S;
static unsigned long long *g_seed;
static mi_backend *g_cpu, *g_cuda;
/* Switch sets whose tensor-core results must be the same bits (the same bytes copied to the same
 * places, the same tiles in the same order): every item on against b27 off and against b43 off;
 * b44 off (the plain layout, where hd 128 takes b43's three buffers) against b44 and b43 off */
static bool g_items_ab;
static const char *const g_ab_pairs[][2] = {{"", "b27"}, {"", "b43"}, {"b44", "b44,b43"}};
#define N_AB_PAIRS (int)(sizeof g_ab_pairs / sizeof g_ab_pairs[0])
#define BLOCK 16

static void bind(gu_run *run, cudaStream_t stream, unsigned long long *seed, mi_backend *cpu, mi_backend *cuda) {
    g_r = run;
    S = stream;
    g_seed = seed;
    g_cpu = cpu;
    g_cuda = cuda;
}
static void test_paged(void);
static void test_bad(void);
static void test_rope_kv_rows(int hd, int Hq, int Hkv, int n_rot, int mode, mi_type ct, int N);
static void rkv_case(const char *label, int n, int max_past, int hd, int Hq, int Hkv, const char *off, int mode, int n_rot);

/* ---------------- a step's layout: sequences over a pool of blocks in shuffled order ---------------- */
typedef struct {
    int rows, n_past;
} seq_spec;

typedef struct {
    int n_seqs;
    int64_t T, n_rows, seqs_len, max_kv, max_rows;
    int32_t *slots, *seqs;   /* [T], [seqs_len] */
} layout;

static void layout_make(layout *L, const seq_spec *sp, int n) {
    memset(L, 0, sizeof *L);
    int64_t nblk = 0, T = 0;
    for (int i = 0; i < n; i++) {
        nblk += (sp[i].n_past + sp[i].rows + BLOCK - 1) / BLOCK;
        T += sp[i].rows;
    }
    const int64_t pool = nblk + 3;   /* a few blocks nobody holds */
    int32_t *perm = malloc((size_t)pool * sizeof *perm);
    for (int64_t i = 0; i < pool; i++) perm[i] = (int32_t)i;
    for (int64_t i = pool - 1; i > 0; i--) {
        const int64_t j = (int64_t)(gu_rng(g_seed) % (unsigned long long)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    L->n_seqs = n;
    L->T = T;
    L->n_rows = pool * BLOCK;
    L->seqs_len = (int64_t)n * MI_PAGED_FIELDS + nblk;
    L->slots = malloc((size_t)T * sizeof *L->slots);
    L->seqs = malloc((size_t)L->seqs_len * sizeof *L->seqs);
    int64_t r = 0, off = (int64_t)n * MI_PAGED_FIELDS, used = 0;
    for (int i = 0; i < n; i++) {
        const int64_t n_kv = sp[i].n_past + sp[i].rows, nb = (n_kv + BLOCK - 1) / BLOCK;
        int32_t *f = L->seqs + (size_t)i * MI_PAGED_FIELDS, *table = L->seqs + off;
        f[MI_PAGED_FIRST] = (int32_t)r;
        f[MI_PAGED_ROWS] = sp[i].rows;
        f[MI_PAGED_NPAST] = sp[i].n_past;
        f[MI_PAGED_TABLE] = (int32_t)off;
        for (int64_t b = 0; b < nb; b++) table[b] = perm[used++];
        for (int j = 0; j < sp[i].rows; j++, r++) {
            const int64_t p = sp[i].n_past + j;
            L->slots[r] = (int32_t)(table[p / BLOCK] * BLOCK + p % BLOCK);
        }
        off += nb;
        if (n_kv > L->max_kv) L->max_kv = n_kv;
        if (sp[i].rows > L->max_rows) L->max_rows = sp[i].rows;
    }
    free(perm);
}

static void layout_free(layout *L) {
    free(L->slots);
    free(L->seqs);
}

/* ---------------- one step as a graph on one backend ----------------
 * caches K0/V0 (the pool before the step, host bytes of the cache type), new rows k/v F32
 * [hd*Hkv, T], q F32 [hd*Hq, T] -> out F32 [hd*Hq, T] and the caches after (kc, vc); runs the
 * graph `runs` times (the step's scatter writes the same rows again), out2 from the last run. */
typedef struct {
    const layout *L;
    mi_type ct;
    int hd, Hq, Hkv;
    const float *q, *k, *v;
    const void *k0, *v0;
} step_in;

static mi_status run_step(mi_backend *be, const step_in *in, const int32_t *slots, const int32_t *seqs, float *out,
                          float *out2, void *kc, void *vc, int *on_backend) {
    const layout *L = in->L;
    const size_t esz = in->ct == MI_TYPE_F16 ? 2 : 4, row_kv = (size_t)in->hd * in->Hkv;
    const size_t cbytes = row_kv * (size_t)L->n_rows * esz;
    mi_sched *sc = NULL;
    mi_buffer *bk = NULL, *bv = NULL;
    mi_graph *g = NULL;
    mi_status st = sched_new(&be, 1, &sc);
    if (st == MI_OK) st = be->iface->buffer_alloc(be, cbytes, &bk);
    if (st == MI_OK) st = be->iface->buffer_alloc(be, cbytes, &bv);
    if (st == MI_OK) st = be->iface->write(be, bk->base, in->k0, cbytes);
    if (st == MI_OK) st = be->iface->write(be, bv->base, in->v0, cbytes);
    if (st == MI_OK) st = be->iface->synchronize(be);
    mi_tensor kcache, vcache;
    const int64_t ne_c[2] = {(int64_t)row_kv, L->n_rows};
    tensor_init(&kcache, "pool_k", in->ct, 2, ne_c);
    tensor_init(&vcache, "pool_v", in->ct, 2, ne_c);
    kcache.flags = vcache.flags = MI_T_PERSIST;
    kcache.backend = vcache.backend = be->index;
    if (st == MI_OK) {
        kcache.data = bk->base;
        vcache.data = bv->base;
        g = graph_new(64);
        if (!g) st = mi_err(MI_ERR_NOMEM, "graph");
    }
    mi_tensor *att = NULL;
    if (st == MI_OK) {
        mi_tensor *q = graph_input(g, "q", MI_TYPE_F32, (int64_t)in->hd * in->Hq, L->T, in->q);
        mi_tensor *k = graph_input(g, "k", MI_TYPE_F32, (int64_t)row_kv, L->T, in->k);
        mi_tensor *v = graph_input(g, "v", MI_TYPE_F32, (int64_t)row_kv, L->T, in->v);
        mi_tensor *sl = graph_input(g, "inp_slots", MI_TYPE_I32, L->T, 1, slots);
        mi_tensor *sq = graph_input(g, "inp_seqs", MI_TYPE_I32, L->seqs_len, 1, seqs);
        mi_tensor *ks = q && k && v && sl && sq ? graph_kv_scatter(g, k, &kcache, sl) : NULL;
        mi_tensor *vs = ks ? graph_kv_scatter(g, v, &vcache, sl) : NULL;
        att = vs ? graph_attn_paged(g, q, ks, vs, sq, L->n_seqs, BLOCK, L->max_kv, L->max_rows, in->hd, in->Hq, in->Hkv,
                                    1.0f / sqrtf((float)in->hd))
                 : NULL;
        if (!att) st = mi_err(MI_ERR_INTERNAL, "building the step: %s", mi_errmsg());
    }
    if (st == MI_OK) {
        mi_tensor_set_name(att, "attn_paged");
        att->flags |= MI_T_OUTPUT;
        g->output = att;
        st = sched_compute(sc, g);
    }
    const size_t ob = mi_nbytes(att ? att : &kcache);
    if (st == MI_OK) st = sched_read(sc, att, out, 0, ob);
    if (st == MI_OK && on_backend) *on_backend = att->backend == be->index && att->src[1]->backend == be->index;
    if (st == MI_OK && out2) st = sched_compute(sc, g);   /* the same step again */
    if (st == MI_OK && out2) st = sched_read(sc, att, out2, 0, ob);
    if (st == MI_OK && kc) st = be->iface->read(be, kc, bk->base, cbytes);
    if (st == MI_OK && vc) st = be->iface->read(be, vc, bv->base, cbytes);
    graph_free(g);
    if (sc) sched_free(sc);
    if (bk) be->iface->buffer_free(be, bk);
    if (bv) be->iface->buffer_free(be, bv);
    return st;
}

/* attention of the step in double from the cache after the scatter (host bytes of type ct) */
static void ref_attn(const step_in *in, const void *kc, const void *vc, double *o) {
    const layout *L = in->L;
    const int hd = in->hd, Hq = in->Hq, Hkv = in->Hkv, G = Hq / Hkv;
    const size_t row_kv = (size_t)hd * Hkv;
    const double scale = 1.0f / sqrtf((float)hd);
    double *sc = malloc(sizeof(double) * (size_t)(L->max_kv + 1));
#define CV(base, i) (in->ct == MI_TYPE_F16 ? (double)mi_f16_to_f32(((const uint16_t *)(base))[i]) : (double)((const float *)(base))[i])
    for (int s = 0; s < L->n_seqs; s++) {
        const int32_t *f = L->seqs + (size_t)s * MI_PAGED_FIELDS, *table = L->seqs + f[MI_PAGED_TABLE];
        for (int j = 0; j < f[MI_PAGED_ROWS]; j++) {
            const int64_t r = f[MI_PAGED_FIRST] + j, n_kv = f[MI_PAGED_NPAST] + j + 1;
            for (int h = 0; h < Hq; h++) {
                const int kvh = h / G;
                const float *qr = in->q + (size_t)r * hd * Hq + (size_t)h * hd;
                double mx = -INFINITY, l = 0;
                for (int64_t p = 0; p < n_kv; p++) {
                    const size_t base = (size_t)(table[p / BLOCK] * BLOCK + p % BLOCK) * row_kv + (size_t)kvh * hd;
                    double d = 0;
                    for (int i = 0; i < hd; i++) d += (double)qr[i] * CV(kc, base + i);
                    sc[p] = d * scale;
                    if (sc[p] > mx) mx = sc[p];
                }
                double *orow = o + (size_t)r * hd * Hq + (size_t)h * hd;
                for (int i = 0; i < hd; i++) orow[i] = 0;
                for (int64_t p = 0; p < n_kv; p++) {
                    const double w = exp(sc[p] - mx);
                    const size_t base = (size_t)(table[p / BLOCK] * BLOCK + p % BLOCK) * row_kv + (size_t)kvh * hd;
                    l += w;
                    for (int i = 0; i < hd; i++) orow[i] += w * CV(vc, base + i);
                }
                for (int i = 0; i < hd; i++) orow[i] /= l;
            }
        }
    }
#undef CV
    free(sc);
}


/* host bytes of n cache values of type ct from uniform floats in [-1, 1) */
static void *cache_bytes(mi_type ct, size_t n) {
    float *f = gu_rand_f32(g_seed, n, -1.f, 1.f);
    if (ct == MI_TYPE_F32) return f;
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = mi_f32_to_f16(f[i]);
    free(f);
    return h;
}

static void paged_case(const char *label, const seq_spec *sp, int n, mi_type ct, int hd, int Hq, int Hkv) {
    char name[160];
    snprintf(name, sizeof name, "paged_%s_%s_hd%d_Hq%d_Hkv%d", label, mi_type_name(ct), hd, Hq, Hkv);
    if (!gu_selected(name)) return;
    gu_begin(g_r, name);
    layout L;
    layout_make(&L, sp, n);
    const size_t row_kv = (size_t)hd * Hkv, nq = (size_t)hd * Hq * (size_t)L.T, esz = ct == MI_TYPE_F16 ? 2 : 4;
    const size_t cells = row_kv * (size_t)L.n_rows, cb = cells * esz;
    step_in in = {.L = &L, .ct = ct, .hd = hd, .Hq = Hq, .Hkv = Hkv};
    float *q = gu_rand_f32(g_seed, nq, -1.f, 1.f);
    float *k = gu_rand_f32(g_seed, row_kv * (size_t)L.T, -1.f, 1.f), *v = gu_rand_f32(g_seed, row_kv * (size_t)L.T, -1.f, 1.f);
    void *k0 = cache_bytes(ct, cells), *v0 = cache_bytes(ct, cells);
    in.q = q; in.k = k; in.v = v; in.k0 = k0; in.v0 = v0;
    float *oc = malloc(nq * 4), *og = malloc(nq * 4), *og2 = malloc(nq * 4), *refd = malloc(nq * 4);
    double *ref = malloc(nq * sizeof(double));
    void *kcc = malloc(cb), *vcc = malloc(cb), *kcg = malloc(cb), *vcg = malloc(cb);
    int on_dev = 0;
    mi_status st = run_step(g_cpu, &in, L.slots, L.seqs, oc, NULL, kcc, vcc, NULL);
    const uint64_t ring3_0 = mi8b_attn_paged_ring3_launches(), packed_0 = mi8b_attn_paged_packed_launches();
    if (st == MI_OK) st = run_step(g_cuda, &in, L.slots, L.seqs, og, og2, kcg, vcg, &on_dev);
    /* b43's form, where it is the one this device takes: it ran */
    const bool ring3_due = ct == MI_TYPE_F16 && mi8b_paged_mma_on() && mi8b_attn_paged_buffers(hd, Hq / Hkv, L.T * Hkv) == 3;
    const bool ring3_ran = mi8b_attn_paged_ring3_launches() > ring3_0;
    /* b44's packed form for groups of 8 heads or fewer on the tensor cores: it ran */
    const bool packed_due = ct == MI_TYPE_F16 && mi8b_paged_mma_on() && (hd == 64 || hd == 128) && Hq / Hkv <= 8 &&
                            mi_cuda_item_on("b44");
    const bool packed_ran = mi8b_attn_paged_packed_launches() > packed_0;
    /* each A/B pair: the same step's attention under both switch sets (the caches are rebuilt
     * from k0, v0; "" is og, every item on) */
    const bool ab = g_items_ab && ct == MI_TYPE_F16 && (hd == 64 || hd == 128) && mi8b_paged_mma_on();
    float *og3 = ab ? malloc(nq * 4) : NULL, *og4 = ab ? malloc(nq * 4) : NULL;
    size_t d_ab = (size_t)-1;
    const char *ab_a = NULL, *ab_b = NULL;
    char ab_note[160] = "";
    for (int it = 0; ab && st == MI_OK && d_ab == (size_t)-1 && it < N_AB_PAIRS; it++) {
        ab_a = g_ab_pairs[it][0], ab_b = g_ab_pairs[it][1];
        /* the same bits only for the same splits: b43's form may hold another count of blocks a
         * multiprocessor, and b17's rule then splits the rows' keys otherwise */
        int sp[2] = {0, 0};
        for (int k = 0; k < 2 && st == MI_OK; k++) {
            st = mi_cuda_items_set_off(k ? ab_b : ab_a);
            sp[k] = mi8b_attn_paged_splits(L.T, L.max_kv, hd, Hq, Hkv, ct);
        }
        if (st == MI_OK) st = mi_cuda_items_set_off("");
        if (st != MI_OK) break;
        if (sp[0] != sp[1]) {
            snprintf(ab_note + strlen(ab_note), sizeof ab_note - strlen(ab_note), "; %s off: %d splits against %d, not compared",
                     ab_b, sp[1], sp[0]);
            continue;
        }
        float *oa = og;
        if (*ab_a) {
            oa = og4;
            st = mi_cuda_items_set_off(ab_a);
            if (st == MI_OK) st = run_step(g_cuda, &in, L.slots, L.seqs, og4, NULL, NULL, NULL, NULL);
        }
        if (st == MI_OK) st = mi_cuda_items_set_off(ab_b);
        if (st == MI_OK) st = run_step(g_cuda, &in, L.slots, L.seqs, og3, NULL, NULL, NULL, NULL);
        const mi_status st2 = mi_cuda_items_set_off("");
        if (st == MI_OK) st = st2;
        if (st == MI_OK) d_ab = gu_first_diff(oa, og3, nq * 4);
    }
    if (st != MI_OK) {
        gu_fail(g_r, "%s", mi_errmsg());
    } else {
        ref_attn(&in, kcc, vcc, ref);
        for (size_t i = 0; i < nq; i++) refd[i] = (float)ref[i];
        const size_t dk = gu_first_diff(kcg, kcc, cb), dv = gu_first_diff(vcg, vcc, cb);
        const double e_cpu = gu_nmse(og, oc, nq), e_ref = gu_nmse(og, refd, nq), e_cref = gu_nmse(oc, refd, nq);
        const bool rep = !memcmp(og, og2, nq * 4);
        double worst = 0;
        for (size_t i = 0; i < nq; i++) worst = fmax(worst, fabs((double)og[i] - oc[i]));
        const int splits = mi8b_attn_paged_splits(L.T, L.max_kv, hd, Hq, Hkv, ct);
        if (d_ab != (size_t)-1) {
            const size_t i = d_ab / 4;
            gu_fail(g_r, "%s off differs first from %s%s at row %zu head %zu dim %zu: %.9g", ab_b, *ab_a ? ab_a : "every item on",
                    *ab_a ? " off" : "", i / ((size_t)hd * Hq), (i % ((size_t)hd * Hq)) / (size_t)hd, i % (size_t)hd,
                    og3[i]);
        } else if ((ring3_due && !ring3_ran) || packed_due != packed_ran) {
            gu_fail(g_r, "hd %d, %d heads a group: b43's three tile buffers %s and ran %s; b44's packed form %s and ran %s",
                    hd, Hq / Hkv, ring3_due ? "due" : "not due", ring3_ran ? "yes" : "no",
                    packed_due ? "due" : "not due", packed_ran ? "yes" : "no");
        } else if (!on_dev || dk != (size_t)-1 || dv != (size_t)-1 || !(e_cpu <= 1e-6) || !(e_ref <= 1e-6) || !rep) {
            if (dk != (size_t)-1 || dv != (size_t)-1) {
                const size_t at = (dk != (size_t)-1 ? dk : dv) / esz;
                printf("    %s: cache %c differs first at row %zu element %zu\n", name, dk != (size_t)-1 ? 'K' : 'V',
                       at / row_kv, at % row_kv);
            }
            int shown = 0;
            for (size_t i = 0; i < nq && shown < 3; i++)
                if (!(fabs((double)og[i] - oc[i]) <= 1e-3 * (fabs((double)oc[i]) + 1e-2))) {
                    printf("    %s: row %zu head %zu dim %zu: cuda %.9g cpu %.9g double %.9g\n", name,
                           i / ((size_t)hd * Hq), (i % ((size_t)hd * Hq)) / (size_t)hd, i % (size_t)hd, og[i], oc[i],
                           ref[i]);
                    shown++;
                }
            gu_fail(g_r, "ran on the device %s; caches %s/%s; attention nmse vs cpu %.3g, vs double %.3g (bound 1e-6; "
                        "cpu vs double %.3g), max |diff| %.3g; repeat %s", on_dev ? "yes" : "NO",
                    dk == (size_t)-1 ? "bitwise" : "DIFFER", dv == (size_t)-1 ? "bitwise" : "DIFFER", e_cpu, e_ref,
                    e_cref, worst, rep ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(g_r, "%d sequences, %lld rows, n_kv <= %lld, %d split%s: caches bitwise; attention nmse vs cpu %.3g, "
                        "vs double %.3g (cpu %.3g), max |diff| %.3g; repeat bitwise%s%s%s%s", n, (long long)L.T,
                    (long long)L.max_kv, splits, splits == 1 ? "" : "s", e_cpu, e_ref, e_cref, worst,
                    ab ? "; b27 off, b43 off, b44 and b43 off against b44 off: bitwise where the splits agree" : "",
                    ab_note, ring3_ran ? "; b43's three tile buffers" : "", packed_ran ? "; b44's packed form" : "");
        }
    }
    free(q); free(k); free(v); free(k0); free(v0); free(oc); free(og); free(og2); free(og3); free(og4); free(refd); free(ref);
    free(kcc); free(vcc); free(kcg); free(vcg);
    layout_free(&L);
}

/* decode rows (one a sequence) with n_past from the generator, n of them */
static void decode_case(const char *label, int n, int max_past, mi_type ct, int hd, int Hq, int Hkv) {
    seq_spec *sp = malloc((size_t)n * sizeof *sp);
    const int fixed[] = {0, 15, 16, 17, 31, 100, 127, 128, 129, 639};
    for (int i = 0; i < n; i++) {
        sp[i].rows = 1;
        sp[i].n_past = i < (int)(sizeof fixed / sizeof fixed[0]) && fixed[i] <= max_past
                           ? fixed[i]
                           : (int)(gu_rng(g_seed) % (unsigned long long)(max_past + 1));
    }
    paged_case(label, sp, n, ct, hd, Hq, Hkv);
    free(sp);
}

void paged8b_device(gu_run *run, cudaStream_t stream, unsigned long long *seed, mi_backend *cpu,
                   mi_backend *cuda) {
    bind(run, stream, seed, cpu, cuda);
    test_paged();
    test_bad();
    test_rope_kv_rows(64, 14, 2, 64, MI_ROPE_NEOX, MI_TYPE_F16, 64);    /* the 0.5B */
    test_rope_kv_rows(128, 28, 4, 128, MI_ROPE_NEOX, MI_TYPE_F16, 17);  /* the 7B */
    test_rope_kv_rows(64, 8, 8, 32, MI_ROPE_NORMAL, MI_TYPE_F32, 5);    /* part of each head rotated */
    const int NX = MI_ROPE_NEOX;
    rkv_case("b4", 4, 200, 64, 14, 2, "", NX, 64);       /* many splits a row: the own key in the last */
    rkv_case("b64", 64, 700, 64, 14, 2, "", NX, 64);     /* the 0.5B's heads at 64 sequences */
    rkv_case("b17", 17, 3000, 128, 28, 4, "", NX, 128);  /* the 7B's */
    rkv_case("b4", 4, 200, 128, 28, 4, "b44", NX, 128);  /* the plain layout */
    rkv_case("b4", 4, 200, 128, 28, 4, "b7", NX, 128);   /* no tensor-core kernel: b20's launch first */
    rkv_case("b17", 17, 3000, 128, 28, 4, "b43", NX, 128);   /* two tile buffers, one tile in flight */
    rkv_case("b17", 17, 3000, 128, 28, 4, "b27", NX, 128);   /* cache rows looked up once a 16-byte copy */
    rkv_case("b4", 4, 200, 128, 32, 8, "", MI_ROPE_NORMAL, 128);   /* Llama's pairs (adjacent elements) */
    rkv_case("b4", 4, 200, 128, 28, 4, "", NX, 64);      /* half the dimensions rotated, the rest kept */
}

static void test_paged(void) {
    g_items_ab = true;
    /* decode only: the 0.5B's heads (hd 64, 14 / 2: G = 7) and the 7B's (hd 128, 28 / 4) */
    decode_case("decode_b1_past0", 1, 0, MI_TYPE_F16, 64, 14, 2);
    { seq_spec one = {1, 37}; paged_case("decode_b1_past37", &one, 1, MI_TYPE_F16, 64, 14, 2); }
    { seq_spec one = {1, 3000}; paged_case("decode_b1_past3000", &one, 1, MI_TYPE_F16, 128, 28, 4); }
    decode_case("decode_b4", 4, 200, MI_TYPE_F16, 64, 14, 2);
    decode_case("decode_b4", 4, 200, MI_TYPE_F16, 128, 28, 4);
    decode_case("decode_b64", 64, 700, MI_TYPE_F16, 64, 14, 2);
    decode_case("decode_b64", 64, 700, MI_TYPE_F16, 128, 28, 4);
    decode_case("decode_b64", 64, 700, MI_TYPE_F32, 128, 28, 4);
    decode_case("decode_b16_gqa2", 16, 300, MI_TYPE_F16, 128, 8, 4);
    decode_case("decode_b16_gqa1", 16, 300, MI_TYPE_F32, 64, 4, 4);
    decode_case("decode_b8_hd256", 8, 300, MI_TYPE_F16, 256, 4, 2);   /* two dims a thread */
    decode_case("decode_b8_hd36", 8, 300, MI_TYPE_F16, 36, 4, 1);     /* hd not a multiple of 8: V from global memory */
    /* prompt chunks and decode rows in one step */
    const seq_spec mixed[] = {{23, 0}, {1, 40}, {40, 17}, {1, 0}, {16, 16}, {1, 300}, {130, 0}, {5, 250}};
    const int nm = (int)(sizeof mixed / sizeof mixed[0]);
    paged_case("mixed", mixed, nm, MI_TYPE_F16, 64, 14, 2);
    paged_case("mixed", mixed, nm, MI_TYPE_F16, 128, 28, 4);
    paged_case("mixed", mixed, nm, MI_TYPE_F32, 64, 4, 4);
    paged_case("mixed", mixed, nm, MI_TYPE_F32, 128, 8, 4);
    const seq_spec prompts[] = {{512, 0}, {512, 0}, {300, 212}, {1, 511}};
    paged_case("prompts", prompts, 4, MI_TYPE_F16, 128, 28, 4);
    g_items_ab = false;
    /* the F16 cases above at hd 64 and 128 ran on the tensor cores (b7); the scalar kernel's F16
     * path on a few of them, b7 off */
    if (mi_cuda_items_set_off("b7") != MI_OK) {
        gu_begin(g_r, "paged_b7off");
        gu_fail(g_r, "%s", mi_errmsg());
        return;
    }
    decode_case("decode_b64_b7off", 64, 700, MI_TYPE_F16, 64, 14, 2);
    decode_case("decode_b64_b7off", 64, 700, MI_TYPE_F16, 128, 28, 4);
    paged_case("mixed_b7off", mixed, nm, MI_TYPE_F16, 128, 28, 4);
    mi_cuda_items_set_off("");
}

/* The harness itself without a device: the CPU op over a mixed layout against the double
 * reference (docs/NUMERICS.md: the CPU attention within 1e-10), and the scatter's rows where the
 * slots say, so a device failure above is the kernel's, not the layout's or the reference's. */
void paged8b_cpu_reference(gu_run *run, unsigned long long *seed, mi_backend *cpu) {
    bind(run, NULL, seed, cpu, NULL);
    gu_begin(g_r, "cpu_reference");
    const seq_spec sp[] = {{23, 0}, {1, 40}, {40, 17}, {1, 0}, {9, 300}};
    layout L;
    layout_make(&L, sp, 5);
    const int hd = 64, Hq = 14, Hkv = 2;
    const size_t row_kv = (size_t)hd * Hkv, nq = (size_t)hd * Hq * (size_t)L.T, cells = row_kv * (size_t)L.n_rows;
    step_in in = {.L = &L, .ct = MI_TYPE_F16, .hd = hd, .Hq = Hq, .Hkv = Hkv};
    float *q = gu_rand_f32(g_seed, nq, -1.f, 1.f), *k = gu_rand_f32(g_seed, row_kv * (size_t)L.T, -1.f, 1.f);
    float *v = gu_rand_f32(g_seed, row_kv * (size_t)L.T, -1.f, 1.f), *out = malloc(nq * 4), *refd = malloc(nq * 4);
    void *k0 = cache_bytes(MI_TYPE_F16, cells), *v0 = cache_bytes(MI_TYPE_F16, cells);
    uint16_t *kc = malloc(cells * 2), *vc = malloc(cells * 2);
    double *ref = malloc(nq * sizeof(double));
    in.q = q; in.k = k; in.v = v; in.k0 = k0; in.v0 = v0;
    mi_status st = run_step(g_cpu, &in, L.slots, L.seqs, out, NULL, kc, vc, NULL);
    size_t moved = 0, wrong = 0;
    if (st == MI_OK) {
        ref_attn(&in, kc, vc, ref);
        for (size_t i = 0; i < nq; i++) refd[i] = (float)ref[i];
        for (int64_t r = 0; r < L.T; r++)
            for (size_t e = 0; e < row_kv; e++)
                wrong += kc[(size_t)L.slots[r] * row_kv + e] != mi_f32_to_f16(k[(size_t)r * row_kv + e]);
        for (size_t i = 0; i < cells; i++) moved += kc[i] != ((uint16_t *)k0)[i];
    }
    const double e = st == MI_OK ? gu_nmse(out, refd, nq) : INFINITY;
    if (st != MI_OK) gu_fail(g_r, "%s", mi_errmsg());
    else if (!(e <= 1e-10) || wrong || moved > (size_t)L.T * row_kv)
        gu_fail(g_r, "cpu attention nmse vs double %.3g (1e-10); scattered rows wrong %zu, cells changed %zu", e, wrong, moved);
    else gu_pass(g_r, "5 sequences, %lld rows: cpu attention nmse vs double %.3g <= 1e-10; every scattered row in its "
                     "slot, nothing else written", (long long)L.T, e);
    free(q); free(k); free(v); free(out); free(refd); free(k0); free(v0); free(kc); free(vc); free(ref);
    layout_free(&L);
}

/* ---------------- the host's table checks (no device) ---------------- */
void paged8b_host_checks(gu_run *run, unsigned long long *seed) {
    bind(run, NULL, seed, NULL, NULL);
    gu_begin(g_r, "host_checks");
    const seq_spec sp[] = {{3, 0}, {1, 20}, {5, 30}};
    layout L;
    layout_make(&L, sp, 3);
    const char *err = NULL;
    char why[256] = "";
    if (mi8b_check_slots("x", L.slots, L.T, L.n_rows) != MI_OK) err = "good slots refused";
    else if (mi8b_check_seqs("x", L.seqs, 3, L.seqs_len, L.T, BLOCK, L.max_kv, L.n_rows) != MI_OK) err = "good table refused";
    if (!err) {
        L.slots[2] = (int32_t)L.n_rows;
        if (mi8b_check_slots("x", L.slots, L.T, L.n_rows) != MI_ERR_INVALID || !strstr(mi_errmsg(), "cache row"))
            err = "a slot past the cache passed";
        L.slots[2] = 0;
    }
    struct { int field, seq, value; const char *what; } bad[] = {
        {MI_PAGED_ROWS, 1, 0, "outside the step"},        /* no rows */
        {MI_PAGED_NPAST, 2, 1000, "outside the step"},    /* past the step's longest */
        {MI_PAGED_FIRST, 2, 2, "inside the one before"},  /* overlaps the one before */
        {MI_PAGED_TABLE, 0, 1, "outside the step"},       /* table inside the fields */
        {-1, 1, -1, "outside the pool"},                  /* a block id of -1 */
        {-1, 2, 1 << 20, "outside the pool"},             /* a block past the pool */
    };
    for (size_t i = 0; !err && i < sizeof bad / sizeof bad[0]; i++) {
        int32_t *cell = bad[i].field >= 0 ? &L.seqs[bad[i].seq * MI_PAGED_FIELDS + bad[i].field]
                                          : &L.seqs[L.seqs[bad[i].seq * MI_PAGED_FIELDS + MI_PAGED_TABLE]];
        const int32_t keep = *cell;
        *cell = bad[i].value;
        const mi_status st = mi8b_check_seqs("x", L.seqs, 3, L.seqs_len, L.T, BLOCK, L.max_kv, L.n_rows);
        if (st != MI_ERR_INVALID || !strstr(mi_errmsg(), bad[i].what)) {
            snprintf(why, sizeof why, "bad entry %zu passed or got another message: %s", i, mi_errmsg());
            err = why;
        }
        *cell = keep;
    }
    /* a table found good is kept (mi8b_check_seqs checks a step's table once for all its layers): the
     * same table passes again, but not against a smaller pool, nor once one of its ints changes */
    if (!err && mi8b_check_seqs("x", L.seqs, 3, L.seqs_len, L.T, BLOCK, L.max_kv, L.n_rows) != MI_OK)
        err = "the good table refused the second time";
    if (!err && mi8b_check_seqs("x", L.seqs, 3, L.seqs_len, L.T, BLOCK, L.max_kv, BLOCK) != MI_ERR_INVALID)
        err = "the good table passed against a one-block pool";
    if (!err) {
        int32_t *cell = &L.seqs[L.seqs[1 * MI_PAGED_FIELDS + MI_PAGED_TABLE]];
        const int32_t keep = *cell;
        (void)mi8b_check_seqs("x", L.seqs, 3, L.seqs_len, L.T, BLOCK, L.max_kv, L.n_rows);   /* kept again */
        *cell = (int32_t)(L.n_rows / BLOCK);   /* one block past the pool, the table otherwise the same */
        if (mi8b_check_seqs("x", L.seqs, 3, L.seqs_len, L.T, BLOCK, L.max_kv, L.n_rows) != MI_ERR_INVALID)
            err = "a changed block id passed after the table was kept";
        *cell = keep;
    }
    if (err) gu_fail(g_r, "%s", err);
    else gu_pass(g_r, "good slots and tables pass; a slot past the cache and 6 kinds of bad sequence entries are refused "
                     "with the CPU op's message; a kept table is checked again when the pool or an entry changes");
    layout_free(&L);
}

/* ---------------- bad calls on the device ---------------- */
static void test_bad(void) {
    gu_begin(g_r, "bad_tables_refused");
    const seq_spec sp[] = {{2, 5}, {1, 40}};
    layout L;
    layout_make(&L, sp, 2);
    const int hd = 64, Hq = 4, Hkv = 2;
    const size_t row_kv = (size_t)hd * Hkv, nq = (size_t)hd * Hq * (size_t)L.T, cells = row_kv * (size_t)L.n_rows;
    step_in in = {.L = &L, .ct = MI_TYPE_F16, .hd = hd, .Hq = Hq, .Hkv = Hkv};
    float *q = gu_rand_f32(g_seed, nq, -1.f, 1.f), *k = gu_rand_f32(g_seed, row_kv * (size_t)L.T, -1.f, 1.f);
    float *v = gu_rand_f32(g_seed, row_kv * (size_t)L.T, -1.f, 1.f), *out = malloc(nq * 4), *good = malloc(nq * 4);
    void *k0 = cache_bytes(MI_TYPE_F16, cells), *v0 = cache_bytes(MI_TYPE_F16, cells);
    in.q = q; in.k = k; in.v = v; in.k0 = k0; in.v0 = v0;
    int32_t *slots = malloc((size_t)L.T * 4), *seqs = malloc((size_t)L.seqs_len * 4);
    memcpy(slots, L.slots, (size_t)L.T * 4);
    memcpy(seqs, L.seqs, (size_t)L.seqs_len * 4);
    const char *err = NULL;
    char why[400] = "";
    slots[1] = (int32_t)L.n_rows;
    mi_status st = run_step(g_cuda, &in, slots, seqs, out, NULL, NULL, NULL, NULL);
    if (st != MI_ERR_INVALID || !strstr(mi_errmsg(), "goes to cache row")) {
        snprintf(why, sizeof why, "a slot past the pool: status %d, %s", st, mi_errmsg());
        err = why;
    }
    slots[1] = L.slots[1];
    seqs[seqs[MI_PAGED_FIELDS + MI_PAGED_TABLE]] = -1;
    st = err ? MI_OK : run_step(g_cuda, &in, slots, seqs, out, NULL, NULL, NULL, NULL);
    if (!err && (st != MI_ERR_INVALID || !strstr(mi_errmsg(), "outside the pool"))) {
        snprintf(why, sizeof why, "a block past the pool: status %d, %s", st, mi_errmsg());
        err = why;
    }
    if (err) gu_fail(g_r, "%s", err);
    else gu_pass(g_r, "a slot and a block past the pool: the step fails with the CPU op's message");

    /* the launchers straight, no host check: guards in the kernels */
    gu_begin(g_r, "bad_kernel_guards");
    err = NULL;
    const size_t cb = cells * 2;
    void *bq, *bk, *bv, *bt;
    float *dq = dev_up_at(q, nq * 4, 0, &bq);
    uint16_t *dk = dev_up_at(k0, cb, 0, &bk), *dv = dev_up_at(v0, cb, 0, &bv);
    int32_t *dt = dev_up_at(L.seqs, (size_t)L.seqs_len * 4, 0, &bt);
    float *dout = dev_poison(nq * 4);
    const size_t wsb = mi8b_attn_paged_workspace(L.T, L.max_kv, hd, Hq, Hkv) + 64;
    void *ws = dev_poison(wsb);
    uint16_t *after = malloc(cb);
    const int32_t bad_slots[3] = {(int32_t)L.n_rows, -1, 7};
    int32_t *dbs;
    void *bbs;
    dbs = dev_up_at(bad_slots, sizeof bad_slots, 0, &bbs);
    void *bx;
    float *dx = dev_up_at(k, row_kv * 3 * 4, 0, &bx);
    st = mi8b_kv_scatter(S, dx, dk, MI_TYPE_F16, (int64_t)row_kv, 3, dbs, L.n_rows);
    if (st == MI_OK) dev_down_on(S, after, dk, cb);
    size_t ndiff = 0, d_other = 0;
    for (size_t i = 0; st == MI_OK && i < cells; i++)
        if (after[i] != ((uint16_t *)k0)[i]) {
            ndiff++;
            if (i / row_kv != 7 || after[i] != mi_f32_to_f16(k[2 * row_kv + i % row_kv])) d_other++;
        }
    if (st != MI_OK || d_other || ndiff == 0) {
        snprintf(why, sizeof why, "scatter with slots past the cache: %s, %zu cells changed, %zu outside row 7",
                 st == MI_OK ? "ran" : mi_errmsg(), ndiff, d_other);
        err = why;
    }
    /* attention with one sequence's block -1: its rows NaN, the other's as a good run's */
    mi_status s1 = MI_OK, s2 = MI_OK;
    if (!err) {
        CK(cudaMemcpy(dk, k0, cb, cudaMemcpyHostToDevice));
        s1 = mi8b_attn_paged(S, dq, dk, dv, MI_TYPE_F16, L.n_rows, dout, dt, 2, L.seqs_len, L.T, BLOCK, L.max_kv, hd, Hq,
                             Hkv, 0.125f, ws);
        if (s1 == MI_OK) dev_down_on(S, good, dout, nq * 4);
        int32_t *bad_seqs = malloc((size_t)L.seqs_len * 4);
        memcpy(bad_seqs, L.seqs, (size_t)L.seqs_len * 4);
        bad_seqs[bad_seqs[MI_PAGED_TABLE]] = -1;   /* sequence 0's first block */
        CK(cudaMemcpy(dt, bad_seqs, (size_t)L.seqs_len * 4, cudaMemcpyHostToDevice));
        s2 = mi8b_attn_paged(S, dq, dk, dv, MI_TYPE_F16, L.n_rows, dout, dt, 2, L.seqs_len, L.T, BLOCK, L.max_kv, hd, Hq,
                             Hkv, 0.125f, ws);
        if (s2 == MI_OK) dev_down_on(S, out, dout, nq * 4);
        free(bad_seqs);
        const size_t row_q = (size_t)hd * Hq;
        size_t nan0 = 0;
        for (size_t i = 0; i < 2 * row_q; i++) nan0 += isnan(out[i]) != 0;   /* sequence 0: rows 0, 1 */
        const bool rest = !memcmp(out + 2 * row_q, good + 2 * row_q, row_q * 4);
        if (s1 != MI_OK || s2 != MI_OK || nan0 != 2 * row_q || !rest) {
            snprintf(why, sizeof why, "attention with a block of -1: launches %s / %s, %zu of %zu NaN in its rows, the "
                     "other sequence %s", s1 == MI_OK ? "ok" : "failed", s2 == MI_OK ? "ok" : mi_errmsg(), nan0,
                     2 * row_q, rest ? "bitwise as a good run" : "CHANGED");
            err = why;
        }
    }
    /* shapes the launchers do not take */
    if (!err) {
        const bool refused = mi8b_attn_paged(S, dq, dk, dv, MI_TYPE_F16, L.n_rows, dout, dt, 2, L.seqs_len, L.T, BLOCK,
                                             L.max_kv, 63, Hq, Hkv, 0.125f, ws) == MI_ERR_UNSUPPORTED &&
                             mi8b_attn_paged(S, dq, dk, dv, MI_TYPE_F16, L.n_rows, dout, dt, 2, L.seqs_len, L.T, BLOCK,
                                             L.max_kv, hd, 18, 2, 0.125f, ws) == MI_ERR_UNSUPPORTED &&
                             mi8b_attn_paged(S, dq, dk, dv, MI_TYPE_Q8_0, L.n_rows, dout, dt, 2, L.seqs_len, L.T, BLOCK,
                                             L.max_kv, hd, Hq, Hkv, 0.125f, ws) == MI_ERR_UNSUPPORTED &&
                             mi8b_kv_scatter(S, dx, dk, MI_TYPE_F16, (int64_t)row_kv, 0, dbs, L.n_rows) != MI_OK &&
                             !mi8b_attn_paged_supported(128, 36, 4, MI_TYPE_F16);   /* G = 9 */
        if (!refused) err = "a launcher took a shape it does not cover (hd 63, G 9, Q8_0 cache, 0 rows)";
    }
    (void)cudaGetLastError();
    if (err) gu_fail(g_r, "%s", err);
    else gu_pass(g_r, "slots past the cache write nothing; a block of -1 gives its sequence NaN rows and leaves the "
                     "other's bits; hd 63, a group of 9, a Q8_0 cache and 0 rows refused");
    cudaFree(bq); cudaFree(bk); cudaFree(bv); cudaFree(bt); cudaFree(dout); cudaFree(ws);
    cudaFree(bbs); cudaFree(bx);
    free(q); free(k); free(v); free(out); free(good); free(k0); free(v0); free(slots); free(seqs); free(after);
    layout_free(&L);
}

/* ---------------- b20: a step's RoPEs and scatters in one launch, against the four kernels ---------------- */
static void test_rope_kv_rows(int hd, int Hq, int Hkv, int n_rot, int mode, mi_type ct, int N) {
    char name[96];
    snprintf(name, sizeof name, "rope_kv_rows_hd%d_Hq%d_Hkv%d_rot%d_%s_%s_N%d", hd, Hq, Hkv, n_rot,
             mode == MI_ROPE_NEOX ? "neox" : "normal", mi_type_name(ct), N);
    gu_begin(g_r, name);
    const int64_t nrows = 3 * N + 7, row = (int64_t)hd * Hkv, esz = ct == MI_TYPE_F16 ? 2 : 4;
    const size_t nq = (size_t)hd * Hq * N, nk = (size_t)row * N, cb = (size_t)(nrows * row * esz);
    float *q = gu_rand_f32(g_seed, nq, -2.f, 2.f), *k = gu_rand_f32(g_seed, nk, -2.f, 2.f);
    float *v = gu_rand_f32(g_seed, nk, -2.f, 2.f), *cinit = gu_rand_f32(g_seed, cb / 4, -1.f, 1.f);
    int32_t *pos = malloc((size_t)N * 4), *slots = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++) {
        pos[i] = (int32_t)(gu_rng(g_seed) % 40000);
        slots[i] = (int32_t)(3 * i + (int)(gu_rng(g_seed) % 3));
    }
    if (N > 2) slots[1] = -1, slots[N - 1] = (int32_t)nrows;   /* outside: written nowhere */
    void *b[12];
    float *dq = dev_up_at(q, nq * 4, 0, &b[0]), *dk = dev_up_at(k, nk * 4, 0, &b[1]), *dv = dev_up_at(v, nk * 4, 0, &b[2]);
    int32_t *dpos = dev_up_at(pos, (size_t)N * 4, 0, &b[3]), *dslots = dev_up_at(slots, (size_t)N * 4, 0, &b[4]);
    void *ck1 = dev_up_at(cinit, cb, 0, &b[5]), *cv1 = dev_up_at(cinit, cb, 0, &b[6]);
    void *ck2 = dev_up_at(cinit, cb, 0, &b[7]), *cv2 = dev_up_at(cinit, cb, 0, &b[8]);
    float *qr1 = dev_poison(nq * 4), *kr1 = dev_poison(nk * 4), *qr2 = dev_poison(nq * 4), *kr2 = dev_poison(nk * 4);
    const float base = 1000000.0f;
    mi_status st = mi8a_rope_pairs(S, dq, dpos, qr1, hd, Hq, N, mode, n_rot, base);
    if (st == MI_OK) st = mi8a_rope_pairs(S, dk, dpos, kr1, hd, Hkv, N, mode, n_rot, base);
    if (st == MI_OK) st = mi8b_kv_scatter(S, kr1, ck1, ct, row, N, dslots, nrows);
    if (st == MI_OK) st = mi8b_kv_scatter(S, dv, cv1, ct, row, N, dslots, nrows);
    const mi8a_rope_kv_rows_io io = {dq, dk, dv, qr2, kr2, ck2, cv2, dpos, dslots, N, nrows, nrows};
    if (st == MI_OK) st = mi8a_rope_kv_rows(S, &io, ct, hd, Hq, Hkv, mode, n_rot, base);
    uint8_t *h[8];
    const size_t hn[8] = {nq * 4, nk * 4, nq * 4, nk * 4, cb, cb, cb, cb};
    const void *dsrc[8] = {qr1, kr1, qr2, kr2, ck1, cv1, ck2, cv2};
    for (int i = 0; i < 8; i++) h[i] = malloc(hn[i]);
    if (st == MI_OK && cudaStreamSynchronize(S) != cudaSuccess) st = mi_err(MI_ERR_DEVICE, "%s", cudaGetErrorString(cudaGetLastError()));
    for (int i = 0; i < 8 && st == MI_OK; i++)
        if (cudaMemcpy(h[i], dsrc[i], hn[i], cudaMemcpyDeviceToHost) != cudaSuccess) st = mi_err(MI_ERR_DEVICE, "copy back");
    if (st != MI_OK) {
        gu_fail(g_r, "%s", mi_errmsg());
    } else {
        static const char *what[4] = {"q's RoPE", "k's RoPE", "the K cache", "the V cache"};
        int bad = -1;
        size_t at = 0;
        for (int i = 0; i < 4 && bad < 0; i++) {   /* the four kernels' h[j] against b20's h[j + 2] */
            const int j = i < 2 ? i : i + 2;
            if ((at = gu_first_diff(h[j], h[j + 2], hn[j])) != (size_t)-1) bad = i;
        }
        if (bad < 0) gu_pass(g_r, "%d rows (two slots outside the cache): RoPEs and cache rows bit for bit the four kernels", N);
        else gu_fail(g_r, "%s differs from the four kernels' first at byte %zu", what[bad], at);
    }
    for (int i = 0; i < 8; i++) free(h[i]);
    for (int i = 0; i < 9; i++) cudaFree(b[i]);
    cudaFree(qr1), cudaFree(kr1), cudaFree(qr2), cudaFree(kr2);
    free(q), free(k), free(v), free(cinit), free(pos), free(slots);
}

/* ---------------- b47: a decode step's four inside the attention, against b20's launch then the attention ----------------
 * n sequences of one row each (n_past up to max_past) over shuffled blocks of F16 caches, two
 * rows' slots outside the cache (their keys stored nowhere, by either); `off`: items switched
 * off for both. The output and both caches bit for bit; the four inside the tensor-core kernel
 * unless b7 is off. */
static void rkv_case(const char *label, int n, int max_past, int hd, int Hq, int Hkv, const char *off, int mode, int n_rot) {
    char name[160], rot[32] = "";
    if (mode != MI_ROPE_NEOX || n_rot != hd) snprintf(rot, sizeof rot, "_%s_rot%d", mode == MI_ROPE_NEOX ? "neox" : "normal", n_rot);
    snprintf(name, sizeof name, "rkv_%s_hd%d_Hq%d_Hkv%d%s%s%s", label, hd, Hq, Hkv, rot, off[0] ? "_off_" : "", off);
    if (!gu_selected(name)) return;
    gu_begin(g_r, name);
    seq_spec *sp = malloc((size_t)n * sizeof *sp);
    for (int i = 0; i < n; i++) sp[i].rows = 1, sp[i].n_past = (int)(gu_rng(g_seed) % (unsigned long long)(max_past + 1));
    layout L;
    layout_make(&L, sp, n);
    int32_t *pos = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) pos[i] = L.seqs[i * MI_PAGED_FIELDS + MI_PAGED_NPAST];
    if (n > 2) L.slots[1] = -1, L.slots[n - 1] = (int32_t)L.n_rows;
    const size_t row = (size_t)hd * Hkv, nq = (size_t)hd * Hq * n, nk = row * n, cb = row * (size_t)L.n_rows * 2;
    float *q = gu_rand_f32(g_seed, nq, -2.f, 2.f), *k = gu_rand_f32(g_seed, nk, -2.f, 2.f), *v = gu_rand_f32(g_seed, nk, -2.f, 2.f);
    void *cinit = cache_bytes(MI_TYPE_F16, row * (size_t)L.n_rows);
    void *b[6], *cbase;   /* cbase: the caches' allocations are the pointers themselves (offset 0) */
    float *dq = dev_up_at(q, nq * 4, 0, &b[0]), *dk = dev_up_at(k, nk * 4, 0, &b[1]), *dv = dev_up_at(v, nk * 4, 0, &b[2]);
    int32_t *dpos = dev_up_at(pos, (size_t)n * 4, 0, &b[3]), *dsl = dev_up_at(L.slots, (size_t)n * 4, 0, &b[4]);
    int32_t *dseq = dev_up_at(L.seqs, (size_t)L.seqs_len * 4, 0, &b[5]);
    void *ck[2], *cv[2], *hk[2], *hv[2];
    float *qr[2], *kr[2], *o[2], *ho[2];
    for (int i = 0; i < 2; i++) {
        ck[i] = dev_up_at(cinit, cb, 0, &cbase), cv[i] = dev_up_at(cinit, cb, 0, &cbase);
        qr[i] = dev_poison(nq * 4), kr[i] = dev_poison(nk * 4), o[i] = dev_poison(nq * 4);
        hk[i] = malloc(cb), hv[i] = malloc(cb), ho[i] = malloc(nq * 4);
    }
    const size_t wsb = mi8b_attn_paged_workspace(n, L.max_kv, hd, Hq, Hkv);
    void *ws = NULL;
    mi_status st = mi_cuda_items_set_off(off);
    if (st == MI_OK && wsb && cudaMalloc(&ws, wsb) != cudaSuccess) st = mi_err(MI_ERR_DEVICE, "workspace");
    const float base = 1000000.0f, scale = 1.0f / sqrtf((float)hd);
    const mi8a_rope_kv_rows_io io0 = {dq, dk, dv, qr[0], kr[0], ck[0], cv[0], dpos, dsl, n, L.n_rows, L.n_rows};
    const mi8a_rope_kv_rows_io io1 = {dq, dk, dv, qr[1], kr[1], ck[1], cv[1], dpos, dsl, n, L.n_rows, L.n_rows};
    if (st == MI_OK) st = mi8a_rope_kv_rows(S, &io0, MI_TYPE_F16, hd, Hq, Hkv, mode, n_rot, base);
    if (st == MI_OK)
        st = mi8b_attn_paged(S, qr[0], ck[0], cv[0], MI_TYPE_F16, L.n_rows, o[0], dseq, n, L.seqs_len, n, BLOCK, L.max_kv,
                             hd, Hq, Hkv, scale, ws);
    const uint64_t k0 = mi8b_attn_paged_rkv_launches();
    if (st == MI_OK)
        st = mi8b_attn_paged_rkv(S, &io1, mode, n_rot, base, qr[1], ck[1], cv[1], MI_TYPE_F16, L.n_rows, o[1], dseq,
                                 n, L.seqs_len, n, BLOCK, L.max_kv, hd, Hq, Hkv, scale, ws, NULL, false, NULL);
    const uint64_t in_kernel = mi8b_attn_paged_rkv_launches() - k0;
    if (st == MI_OK && cudaStreamSynchronize(S) != cudaSuccess) st = mi_err(MI_ERR_DEVICE, "%s", cudaGetErrorString(cudaGetLastError()));
    for (int i = 0; i < 2 && st == MI_OK; i++)
        if (cudaMemcpy(hk[i], ck[i], cb, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(hv[i], cv[i], cb, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(ho[i], o[i], nq * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
            st = mi_err(MI_ERR_DEVICE, "copy back");
    mi_cuda_items_set_off("");
    const bool want_in = strcmp(off, "b7") != 0;
    size_t at_o = (size_t)-1, at_k = (size_t)-1, at_v = (size_t)-1;
    if (st == MI_OK) {
        at_o = gu_first_diff(ho[0], ho[1], nq * 4);
        at_k = gu_first_diff(hk[0], hk[1], cb);
        at_v = gu_first_diff(hv[0], hv[1], cb);
    }
    if (st != MI_OK) gu_fail(g_r, "%s", mi_errmsg());
    else if (at_o != (size_t)-1 || at_k != (size_t)-1 || at_v != (size_t)-1)
        gu_fail(g_r, "first byte differing from b20 + the attention: output %lld, K cache %lld, V cache %lld (-1: none)",
                (long long)at_o, (long long)at_k, (long long)at_v);
    else if ((in_kernel > 0) != want_in)
        gu_fail(g_r, "%llu launches with the four inside the kernel (want %s)", (unsigned long long)in_kernel,
                want_in ? "1" : "0");
    else gu_pass(g_r, "%d rows (n_past up to %d, %d splits a row, two slots outside the cache): output and caches bit for "
                      "bit b20's launch then the attention; the four %s", n, max_past,
                 mi8b_attn_paged_splits(n, L.max_kv, hd, Hq, Hkv, MI_TYPE_F16),
                 want_in ? "inside the tensor-core kernel" : "by b20's kernel first (b7 off)");
    for (int i = 0; i < 2; i++) {
        cudaFree(ck[i]), cudaFree(cv[i]), cudaFree(qr[i]), cudaFree(kr[i]), cudaFree(o[i]);
        free(hk[i]), free(hv[i]), free(ho[i]);
    }
    for (int i = 0; i < 6; i++) cudaFree(b[i]);
    cudaFree(ws);
    free(q), free(k), free(v), free(cinit), free(pos), free(sp);
    layout_free(&L);
}

/* gate_8b: phase 8b's kernels for a step of many sequences on the device (docs/PHASE8B.md).
 *  host_checks      runs without a device: the host's check of a step's tables (install8b.c)
 *                   accepts good ones and names the first bad entry
 *  paged_<layout>   op level: one step (KV_SCATTER of K and V, then ATTN_PAGED) as a graph on
 *                   a [cuda] scheduler and on a [cpu] one, over caches of random rows and
 *                   block tables in shuffled order: the caches after the scatter bit for bit
 *                   (every row, so nothing else was written), the attention within the
 *                   attention bound of the CPU (NMSE <= 1e-6, docs/NUMERICS.md) and of a
 *                   double-precision reference; a second run of the device graph bit for bit
 *  batch_<model>    model level: sequences joining and ending at different steps in a CUDA
 *                   batch (pool on the device), every sequence's logits at every step against
 *                   the same sequence in a CUDA session of its own: NMSE <= 1e-5 on the 0.5B
 *                   (gate 7e's bound), 1e-3 on the tiny shapes, and the same greedy token unless a near-tie (top-1
 *                   margin <= 2 x the largest logit difference: reported, not hidden)
 *  batch_no_logits   greedy steps that return only ids (the argmax on the device) give the argmax
 *                   of the logits a plain batch returns
 *  batch_replay_*   a CUDA batch decoding for hundreds of steps across KV blocks and buckets
 *                   (one sequence ending mid-way): its graph reused and its decode splits
 *                   replayed (b2) against the same batch building every step with b2 off and
 *                   against reuse without b2: every logit bit for bit (the same kernels in the
 *                   same order), most steps replayed, none without b2
 *  bad_*            a bad table or slot is an error of the step with the CPU op's message;
 *                   the launchers refuse shapes they do not take; the kernels called straight
 *                   with a bad table write NaN rows and never outside the cache; a full pool
 *                   refuses only the sequence that cannot grow
 * Every earlier gate runs at PHASE=8b too (make gate-8b). */
#include "gates/gate_util.h"
#include "gates/7e/dev7e.h"
#include "phase8b_batch/batch8b.h"
#include "phase7e_perf/perf7e.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "phase7d_graphs/graphs7d.h"
#include "common/model/mi.h"
#include "common/model/mi_batch.h"
#include "common/backend/backend.h"
#include "common/backend/sched.h"
#include "common/graph/graph.h"
#include "common/core/mi_fp16.h"
#include "common/sampler/sampler.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <string.h>

static gu_run R;
static cudaStream_t S;
static unsigned long long g_seed = 0x8b8b8b8bULL;
static char g_minfer[2048];
#define BLOCK 16

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
        const int64_t j = (int64_t)(gu_rng(&g_seed) % (unsigned long long)(i + 1));
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

static mi_backend *g_cpu, *g_cuda;

/* host bytes of n cache values of type ct from uniform floats in [-1, 1) */
static void *cache_bytes(mi_type ct, size_t n) {
    float *f = gu_rand_f32(&g_seed, n, -1.f, 1.f);
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
    gu_begin(&R, name);
    layout L;
    layout_make(&L, sp, n);
    const size_t row_kv = (size_t)hd * Hkv, nq = (size_t)hd * Hq * (size_t)L.T, esz = ct == MI_TYPE_F16 ? 2 : 4;
    const size_t cells = row_kv * (size_t)L.n_rows, cb = cells * esz;
    step_in in = {.L = &L, .ct = ct, .hd = hd, .Hq = Hq, .Hkv = Hkv};
    float *q = gu_rand_f32(&g_seed, nq, -1.f, 1.f);
    float *k = gu_rand_f32(&g_seed, row_kv * (size_t)L.T, -1.f, 1.f), *v = gu_rand_f32(&g_seed, row_kv * (size_t)L.T, -1.f, 1.f);
    void *k0 = cache_bytes(ct, cells), *v0 = cache_bytes(ct, cells);
    in.q = q; in.k = k; in.v = v; in.k0 = k0; in.v0 = v0;
    float *oc = malloc(nq * 4), *og = malloc(nq * 4), *og2 = malloc(nq * 4), *refd = malloc(nq * 4);
    double *ref = malloc(nq * sizeof(double));
    void *kcc = malloc(cb), *vcc = malloc(cb), *kcg = malloc(cb), *vcg = malloc(cb);
    int on_dev = 0;
    mi_status st = run_step(g_cpu, &in, L.slots, L.seqs, oc, NULL, kcc, vcc, NULL);
    if (st == MI_OK) st = run_step(g_cuda, &in, L.slots, L.seqs, og, og2, kcg, vcg, &on_dev);
    if (st != MI_OK) {
        gu_fail(&R, "%s", mi_errmsg());
    } else {
        ref_attn(&in, kcc, vcc, ref);
        for (size_t i = 0; i < nq; i++) refd[i] = (float)ref[i];
        const size_t dk = gu_first_diff(kcg, kcc, cb), dv = gu_first_diff(vcg, vcc, cb);
        const double e_cpu = gu_nmse(og, oc, nq), e_ref = gu_nmse(og, refd, nq), e_cref = gu_nmse(oc, refd, nq);
        const bool rep = !memcmp(og, og2, nq * 4);
        double worst = 0;
        for (size_t i = 0; i < nq; i++) worst = fmax(worst, fabs((double)og[i] - oc[i]));
        const int splits = mi8b_attn_paged_splits(L.T, L.max_kv, Hkv);
        if (!on_dev || dk != (size_t)-1 || dv != (size_t)-1 || !(e_cpu <= 1e-6) || !(e_ref <= 1e-6) || !rep) {
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
            gu_fail(&R, "ran on the device %s; caches %s/%s; attention nmse vs cpu %.3g, vs double %.3g (bound 1e-6; "
                        "cpu vs double %.3g), max |diff| %.3g; repeat %s", on_dev ? "yes" : "NO",
                    dk == (size_t)-1 ? "bitwise" : "DIFFER", dv == (size_t)-1 ? "bitwise" : "DIFFER", e_cpu, e_ref,
                    e_cref, worst, rep ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(&R, "%d sequences, %lld rows, n_kv <= %lld, %d split%s: caches bitwise; attention nmse vs cpu %.3g, "
                        "vs double %.3g (cpu %.3g), max |diff| %.3g; repeat bitwise", n, (long long)L.T,
                    (long long)L.max_kv, splits, splits == 1 ? "" : "s", e_cpu, e_ref, e_cref, worst);
        }
    }
    free(q); free(k); free(v); free(k0); free(v0); free(oc); free(og); free(og2); free(refd); free(ref);
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
                           : (int)(gu_rng(&g_seed) % (unsigned long long)(max_past + 1));
    }
    paged_case(label, sp, n, ct, hd, Hq, Hkv);
    free(sp);
}

static void test_paged(void) {
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
}

/* The harness itself without a device: the CPU op over a mixed layout against the double
 * reference (docs/NUMERICS.md: the CPU attention within 1e-10), and the scatter's rows where the
 * slots say, so a device failure above is the kernel's, not the layout's or the reference's. */
static void test_cpu_reference(void) {
    gu_begin(&R, "cpu_reference");
    const seq_spec sp[] = {{23, 0}, {1, 40}, {40, 17}, {1, 0}, {9, 300}};
    layout L;
    layout_make(&L, sp, 5);
    const int hd = 64, Hq = 14, Hkv = 2;
    const size_t row_kv = (size_t)hd * Hkv, nq = (size_t)hd * Hq * (size_t)L.T, cells = row_kv * (size_t)L.n_rows;
    step_in in = {.L = &L, .ct = MI_TYPE_F16, .hd = hd, .Hq = Hq, .Hkv = Hkv};
    float *q = gu_rand_f32(&g_seed, nq, -1.f, 1.f), *k = gu_rand_f32(&g_seed, row_kv * (size_t)L.T, -1.f, 1.f);
    float *v = gu_rand_f32(&g_seed, row_kv * (size_t)L.T, -1.f, 1.f), *out = malloc(nq * 4), *refd = malloc(nq * 4);
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
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (!(e <= 1e-10) || wrong || moved > (size_t)L.T * row_kv)
        gu_fail(&R, "cpu attention nmse vs double %.3g (1e-10); scattered rows wrong %zu, cells changed %zu", e, wrong, moved);
    else gu_pass(&R, "5 sequences, %lld rows: cpu attention nmse vs double %.3g <= 1e-10; every scattered row in its "
                     "slot, nothing else written", (long long)L.T, e);
    free(q); free(k); free(v); free(out); free(refd); free(k0); free(v0); free(kc); free(vc); free(ref);
    layout_free(&L);
}

/* ---------------- the host's table checks (no device) ---------------- */
static void test_host_checks(void) {
    gu_begin(&R, "host_checks");
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
    if (err) gu_fail(&R, "%s", err);
    else gu_pass(&R, "good slots and tables pass; a slot past the cache and 6 kinds of bad sequence entries are refused "
                     "with the CPU op's message");
    layout_free(&L);
}

/* ---------------- bad calls on the device ---------------- */
static void test_bad(void) {
    gu_begin(&R, "bad_tables_refused");
    const seq_spec sp[] = {{2, 5}, {1, 40}};
    layout L;
    layout_make(&L, sp, 2);
    const int hd = 64, Hq = 4, Hkv = 2;
    const size_t row_kv = (size_t)hd * Hkv, nq = (size_t)hd * Hq * (size_t)L.T, cells = row_kv * (size_t)L.n_rows;
    step_in in = {.L = &L, .ct = MI_TYPE_F16, .hd = hd, .Hq = Hq, .Hkv = Hkv};
    float *q = gu_rand_f32(&g_seed, nq, -1.f, 1.f), *k = gu_rand_f32(&g_seed, row_kv * (size_t)L.T, -1.f, 1.f);
    float *v = gu_rand_f32(&g_seed, row_kv * (size_t)L.T, -1.f, 1.f), *out = malloc(nq * 4), *good = malloc(nq * 4);
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
    if (err) gu_fail(&R, "%s", err);
    else gu_pass(&R, "a slot and a block past the pool: the step fails with the CPU op's message");

    /* the launchers straight, no host check: guards in the kernels */
    gu_begin(&R, "bad_kernel_guards");
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
    if (err) gu_fail(&R, "%s", err);
    else gu_pass(&R, "slots past the cache write nothing; a block of -1 gives its sequence NaN rows and leaves the "
                     "other's bits; hd 63, a group of 9, a Q8_0 cache and 0 rows refused");
    cudaFree(bq); cudaFree(bk); cudaFree(bv); cudaFree(bt); cudaFree(dout); cudaFree(ws);
    cudaFree(bbs); cudaFree(bx);
    free(q); free(k); free(v); free(out); free(good); free(k0); free(v0); free(slots); free(seqs); free(after);
    layout_free(&L);
}

/* ---------------- whole models: a CUDA batch against CUDA sessions ---------------- */
typedef struct {
    const char *shape, *type;
    int nseq, nopen, steps;
    bool many;          /* 64 sequences from step 0 (the bench's shape), else test_batch's schedule */
    mi_type kv_type;
} plan;

static int64_t plan_prompt(const plan *p, int i) { return p->many ? 1 + (i * 7) % 40 : 3 + 4 * (i % 6); }
static int plan_join(const plan *p, int i) { return p->many ? i % 3 : (i == 6 ? 6 : i / 2); }
static int plan_end(const plan *p, int i) { return p->many ? (i % 5 == 0 ? 2 : p->steps - 1) : (i == 1 ? 4 : p->steps - 1); }
static int32_t plan_tok(int i, int64_t j, int64_t V) { return (int32_t)((7 + 31 * i + 13 * j + (j * j) % 17) % V); }
static int64_t plan_chunk(const plan *p, int i, int step, int32_t *out, int64_t V) {
    const int k = step - plan_join(p, i);
    if (k < 0 || step > plan_end(p, i)) return 0;
    const int64_t off = k == 0 ? 0 : plan_prompt(p, i) + k - 1, n = k == 0 ? plan_prompt(p, i) : 1;
    for (int64_t j = 0; j < n; j++) out[j] = plan_tok(i, off + j, V);
    return n;
}

static double margin_of(const float *l, int64_t n) {
    const int32_t b = mi_sample_greedy(l, n);
    double second = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (i != b && l[i] > second) second = l[i];
    return (double)l[b] - second;
}

static uint64_t paged_runs(void) {
    const mi_cuda_kernel *k[8];
    uint64_t n = 0;
    const int c = mi_cuda_kernels(MI_OP_ATTN_PAGED, k, 8);
    for (int i = 0; i < c && i < 8; i++) n += mi_cuda_kernel_runs(k[i]);
    return n;
}

static void test_batch_model(const plan *p) {
    char path[2048], label[128];
    snprintf(label, sizeof label, "batch_%.30s_%.20s_%dseq%s", p->shape, p->type, p->nseq,
             p->kv_type == MI_TYPE_F32 ? "_f32kv" : "");
    if (!gu_selected(label)) return;
    if (gu_model_path(g_minfer, "8b", p->shape, p->type, path, sizeof path)) {
        gu_skip_named(&R, label, "model not available (synth failed or not given)");
        return;
    }
    gu_begin(&R, label);
    mi_model *m = NULL;
    if (mi_model_load(path, &m) != MI_OK) { gu_fail(&R, "load %s: %s", path, mi_errmsg()); return; }
    const int64_t V = mi_model_hparams(m)->n_vocab;
    const size_t per = (size_t)p->steps * (size_t)V;
    float *want = malloc((size_t)p->nseq * per * sizeof(float));
    int32_t toks[64];
    mi_status st = MI_OK;
    /* each sequence alone: a CUDA session fed the same chunks */
    for (int i = 0; st == MI_OK && i < p->nseq; i++) {
        mi_session_params sp;
        mi_session_params_default(&sp);
        sp.backend = "cuda";
        sp.n_ctx = 256;
        sp.kv_type = p->kv_type;
        mi_session *s = NULL;
        st = mi_session_new(m, &sp, &s);
        for (int step = 0; st == MI_OK && step < p->steps; step++) {
            const int64_t n = plan_chunk(p, i, step, toks, V);
            if (!n) continue;
            st = mi_session_decode(s, toks, n, false);
            if (st == MI_OK) memcpy(want + (size_t)i * per + (size_t)step * (size_t)V, mi_logits(s, NULL), (size_t)V * 4);
        }
        if (s) mi_session_free(s);
    }
    mi_batch_params bp;
    mi_batch_params_default(&bp);
    bp.n_seq_max = p->nopen;
    bp.kv_tokens = (int64_t)p->nopen * 80;
    bp.kv_type = p->kv_type;
    bp.backend = "cuda";
    mi_batch *b = NULL;
    if (st == MI_OK) st = mi_batch_new(m, &bp, &b);
    const uint64_t runs0 = paged_runs();
    int *id = calloc((size_t)p->nseq, sizeof *id);
    int compared = 0, same = 0, ties = 0, unexplained = 0, max_rows = 0;
    double worst = 0, noise_max = 0;
    char tie_note[256] = "";
    size_t tl = 0;
    for (int step = 0; st == MI_OK && step < p->steps; step++) {
        int expect = 0, rows = 0;
        for (int i = 0; st == MI_OK && i < p->nseq; i++) {
            const int64_t n = plan_chunk(p, i, step, toks, V);
            if (!n) continue;
            if (step == plan_join(p, i)) st = mi_batch_seq_new(b, NULL, &id[i]);
            if (st == MI_OK) st = mi_batch_seq_add(b, id[i], toks, n);
            expect++;
            rows += (int)n;
        }
        if (rows > max_rows) max_rows = rows;
        int ran = 0;
        if (st == MI_OK) st = mi_batch_step(b, 0, &ran);
        if (st == MI_OK && ran != expect) st = mi_err(MI_ERR_INTERNAL, "step %d: %d sequences ran, %d expected", step, ran, expect);
        for (int i = 0; st == MI_OK && i < p->nseq; i++) {
            if (step < plan_join(p, i) || step > plan_end(p, i)) continue;
            const float *got = mi_batch_seq_logits(b, id[i]), *w = want + (size_t)i * per + (size_t)step * (size_t)V;
            if (!got) { st = mi_err(MI_ERR_INTERNAL, "sequence %d has no logits at step %d", i, step); break; }
            const double e = gu_nmse(got, w, (size_t)V);
            if (e > worst || e != e) worst = e;
            double noise = 0;
            for (int64_t v = 0; v < V; v++) noise = fmax(noise, fabs((double)got[v] - w[v]));
            if (noise > noise_max) noise_max = noise;
            const int32_t tg = mi_sample_greedy(got, V), tw = mi_sample_greedy(w, V);
            if (tg == tw) same++;
            else {
                const double mg = margin_of(w, V);
                ties++;
                if (mg > 2 * noise) unexplained++;
                if (tl < sizeof tie_note - 60)
                    tl += (size_t)snprintf(tie_note + tl, sizeof tie_note - tl, "%sseq %d step %d margin %.2g noise %.2g",
                                           tl ? "; " : "", i, step, mg, noise);
            }
            compared++;
            if (step == plan_end(p, i) && step < p->steps - 1) mi_batch_seq_free(b, id[i]);   /* ends early */
        }
    }
    const uint64_t runs = paged_runs() - runs0;
    const bool on_dev = b && mi_batch_kv_on_device(b) && !strcmp(mi_batch_backend(b), "cuda");
    bool blocks_back = true;
    if (st == MI_OK) {
        for (int i = 0; i < p->nseq; i++)
            if (plan_end(p, i) == p->steps - 1) mi_batch_seq_free(b, id[i]);
        blocks_back = mi_batch_kv_free_blocks(b) == mi_batch_kv_blocks(b);
    }
    if (b) mi_batch_free(b);
    /* the model bound of gate 7e on the 0.5B; the tiny shapes' random weights magnify the other
     * summation order of a kernel picked for more rows (docs/NUMERICS.md) */
    const double bound = strncmp(p->shape, "tiny", 4) ? 1e-5 : 1e-3;
    if (st != MI_OK)
        gu_fail(&R, "%s", mi_errmsg());
    else if (!on_dev || !runs || !blocks_back || !(worst <= bound) || unexplained)
        gu_fail(&R, "pool on the device %s, paged attention kernel runs %llu, blocks back %s; %d comparisons: logits "
                    "nmse max %.3g (bound %.0e), max |dlogit| %.3g, greedy equal %d, differ %d (%d not near-ties: %s)",
                on_dev ? "yes" : "NO", (unsigned long long)runs, blocks_back ? "yes" : "NO", compared, worst, bound,
                noise_max, same, ties, unexplained, tie_note);
    else
        gu_pass(&R, "%d sequences (%d open at once, up to %d rows a step), pool on the device, %llu paged attention "
                    "runs; %d comparisons with a session alone: logits nmse max %.3g <= %.0e, max |dlogit| %.3g; greedy "
                    "equal %d%s%s", p->nseq, p->nopen, max_rows, (unsigned long long)runs, compared, worst, bound,
                noise_max, same, ties ? ", near-ties " : "", tie_note);
    free(id);
    free(want);
    mi_model_free(m);
}

/* a pool too small for everyone on the device: only the sequence that cannot grow waits */
static void test_full_pool(void) {
    char path[2048];
    if (!gu_selected("bad_full_pool")) return;
    if (gu_model_path(g_minfer, "8b", "tiny-qwen2", "q4_0", path, sizeof path)) {
        gu_skip_named(&R, "bad_full_pool", "model not available");
        return;
    }
    gu_begin(&R, "bad_full_pool");
    mi_model *m = NULL;
    if (mi_model_load(path, &m) != MI_OK) { gu_fail(&R, "load: %s", mi_errmsg()); return; }
    const int64_t V = mi_model_hparams(m)->n_vocab;
    mi_batch_params bp;
    mi_batch_params_default(&bp);
    bp.n_seq_max = 3;
    bp.kv_tokens = 64;   /* 4 blocks of 16 */
    bp.backend = "cuda";
    mi_batch *b = NULL;
    int32_t toks[48];
    for (int j = 0; j < 48; j++) toks[j] = (int32_t)((5 + 3 * j) % V);
    int a = -1, big = -1, c = -1, ran = 0;
    mi_status st = mi_batch_new(m, &bp, &b);
    if (st == MI_OK) st = mi_batch_seq_new(b, NULL, &a);
    if (st == MI_OK) st = mi_batch_seq_new(b, NULL, &big);
    if (st == MI_OK) st = mi_batch_seq_new(b, NULL, &c);
    if (st == MI_OK) st = mi_batch_seq_add(b, a, toks, 20);
    if (st == MI_OK) st = mi_batch_seq_add(b, big, toks, 40);
    if (st == MI_OK) st = mi_batch_seq_add(b, c, toks + 7, 10);
    if (st == MI_OK) st = mi_batch_step(b, 0, &ran);
    const char *err = NULL;
    if (st != MI_OK) err = mi_errmsg();
    else if (ran != 2 || mi_batch_seq_status(b, big) != MI_ERR_NOMEM || !strstr(mi_errmsg(), "KV pool is full") ||
             mi_batch_seq_n_past(b, a) != 20 || mi_batch_seq_n_past(b, c) != 10 || mi_batch_seq_n_past(b, big) != 0)
        err = "the full pool did not refuse exactly the sequence that could not grow";
    else if (!mi_batch_kv_on_device(b)) err = "the pool is not on the device";
    if (!err) {
        mi_batch_seq_free(b, a);
        st = mi_batch_step(b, 0, &ran);
        if (st != MI_OK || ran != 1 || mi_batch_seq_n_past(b, big) != 40) err = "after a ended, big did not run";
    }
    const bool bad_tok = !err && b && mi_batch_seq_add(b, c, (const int32_t[]){(int32_t)V}, 1) == MI_ERR_INVALID;
    if (!err && !bad_tok) err = "a token past the vocabulary was queued";
    if (err) gu_fail(&R, "%s", err);
    else gu_pass(&R, "4 blocks for 3 sequences on the device: the one that cannot grow waits with 'KV pool is full', "
                     "runs once a neighbour ends; a token past the vocabulary refused");
    if (b) mi_batch_free(b);
    mi_model_free(m);
}

/* no_logits on the device: greedy steps end in the argmax where the logits are (8a's d3), so
 * only S ids cross back; each id equals the argmax of the logits a plain batch returns */
static void test_no_logits(void) {
    char path[2048];
    if (!gu_selected("batch_no_logits")) return;
    if (gu_model_path(g_minfer, "8b", "tiny-qwen2", "q4_0", path, sizeof path)) {
        gu_skip_named(&R, "batch_no_logits", "model not available");
        return;
    }
    gu_begin(&R, "batch_no_logits");
    mi_model *m = NULL;
    if (mi_model_load(path, &m) != MI_OK) { gu_fail(&R, "load: %s", mi_errmsg()); return; }
    const int64_t V = mi_model_hparams(m)->n_vocab;
    mi_batch_params bp;
    mi_batch_params_default(&bp);
    bp.n_seq_max = 5;
    bp.kv_tokens = 512;
    bp.backend = "cuda";
    mi_batch *plain = NULL, *ids = NULL;
    mi_status st = mi_batch_new(m, &bp, &plain);
    bp.no_logits = true;
    if (st == MI_OK) st = mi_batch_new(m, &bp, &ids);
    int a[5], c[5], same = 0, n = 0, with_logits = 0;
    int32_t toks[32];
    const uint64_t d3 = mi_cuda_item_runs("d3");
    for (int i = 0; st == MI_OK && i < 5; i++) {
        for (int j = 0; j < 4 + 5 * i; j++) toks[j] = (int32_t)((11 + 7 * i + 5 * j) % V);
        st = mi_batch_seq_new(plain, NULL, &a[i]);
        if (st == MI_OK) st = mi_batch_seq_new(ids, NULL, &c[i]);
        if (st == MI_OK) st = mi_batch_seq_add(plain, a[i], toks, 4 + 5 * i);
        if (st == MI_OK) st = mi_batch_seq_add(ids, c[i], toks, 4 + 5 * i);
    }
    for (int step = 0; st == MI_OK && step < 6; step++) {
        int ran = 0;
        st = mi_batch_step(plain, 0, &ran);
        if (st == MI_OK) st = mi_batch_step(ids, 0, &ran);
        for (int i = 0; st == MI_OK && i < 5; i++) {
            int32_t tp = -1, ti = -2;
            st = mi_batch_seq_next(plain, a[i], &tp);
            if (st == MI_OK) st = mi_batch_seq_next(ids, c[i], &ti);
            same += ti == tp && tp == mi_sample_greedy(mi_batch_seq_logits(plain, a[i]), V);
            with_logits += mi_batch_seq_logits(ids, c[i]) != NULL;
            n++;
            if (st == MI_OK) st = mi_batch_seq_add(plain, a[i], &tp, 1);
            if (st == MI_OK) st = mi_batch_seq_add(ids, c[i], &tp, 1);   /* the plain stream drives both */
        }
    }
    const uint64_t d3_runs = mi_cuda_item_runs("d3") - d3;
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (same != n || with_logits || !d3_runs)
        gu_fail(&R, "%d of %d ids equal the plain batch's argmax; %d logits rows returned by no_logits steps; d3 runs %llu",
                same, n, with_logits, (unsigned long long)d3_runs);
    else gu_pass(&R, "5 sequences, 6 steps: every id equals the argmax of the plain batch's logits; no logits crossed; "
                     "device argmax runs %llu", (unsigned long long)d3_runs);
    if (plain) mi_batch_free(plain);
    if (ids) mi_batch_free(ids);
    mi_model_free(m);
}

/* ---------------- b2: a batch's decode steps reused on the host and replayed on the device ---------------- */
#define RP_STEPS 300
static int rp_prompt(int i) { return 1 + (i * 5) % 19; }
static int rp_end(int i, int nseq) { return i == nseq / 2 ? RP_STEPS / 2 : RP_STEPS - 1; }

/* a row of logits, bit for bit: a 64-bit hash of its bytes (the 0.5B's rows of a whole run
 * would take gigabytes) */
static uint64_t rp_hash(const float *x, int64_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        h = (h ^ u) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    return h;
}

/* a hash of each row of logits [nseq][RP_STEPS] (0: did not run): prompts at step 0, then one
 * token a step; *replays: the graph replays of the run, *bs: the batch's builds and reuses */
static mi_status rp_run(mi_model *m, int nseq, const char *off, bool reuse, uint64_t *out, uint64_t *replays,
                        mi_batch_stats *bs) {
    const int64_t V = mi_model_hparams(m)->n_vocab;
    mi_batch_params bp;
    mi_batch_params_default(&bp);
    bp.n_seq_max = nseq;
    bp.kv_tokens = (int64_t)nseq * (RP_STEPS + 32);
    bp.backend = "cuda";
    mi_status st = mi_cuda_items_set_off(off);
    mi_batch *b = NULL;
    if (!reuse) setenv("MINFER_NO_GRAPH_REUSE", "1", 1);
    if (st == MI_OK) st = mi_batch_new(m, &bp, &b);
    unsetenv("MINFER_NO_GRAPH_REUSE");
    mi_cuda_graph_counters c0, c1;
    mi_cuda_graph_stats(&c0);
    int id[64];
    int32_t toks[32];
    for (int step = 0; st == MI_OK && step < RP_STEPS; step++) {
        for (int i = 0; st == MI_OK && i < nseq; i++) {
            if (step > rp_end(i, nseq)) continue;
            const int64_t n = step == 0 ? rp_prompt(i) : 1;
            for (int64_t j = 0; j < n; j++) toks[j] = plan_tok(i, step == 0 ? j : rp_prompt(i) + step - 1, V);
            if (step == 0) st = mi_batch_seq_new(b, NULL, &id[i]);
            if (st == MI_OK) st = mi_batch_seq_add(b, id[i], toks, n);
        }
        int ran = 0;
        if (st == MI_OK) st = mi_batch_step(b, 0, &ran);
        for (int i = 0; st == MI_OK && i < nseq; i++) {
            if (step > rp_end(i, nseq)) continue;
            const float *got = mi_batch_seq_logits(b, id[i]);
            if (!got) st = mi_err(MI_ERR_INTERNAL, "sequence %d has no logits at step %d", i, step);
            else out[(size_t)i * RP_STEPS + (size_t)step] = rp_hash(got, V);
            if (step == rp_end(i, nseq) && step < RP_STEPS - 1) mi_batch_seq_free(b, id[i]);
        }
    }
    mi_cuda_graph_stats(&c1);
    *replays = c1.replays - c0.replays;
    if (b) {
        mi_batch_get_stats(b, bs);
        if (st == MI_OK && (!mi_batch_kv_on_device(b) || strcmp(mi_batch_backend(b), "cuda")))
            st = mi_err(MI_ERR_INTERNAL, "the batch does not run on the device");
        mi_batch_free(b);
    }
    mi_cuda_items_set_off("");
    return st;
}

static void test_batch_replay(const char *shape, const char *type, int nseq) {
    char path[2048], label[128];
    snprintf(label, sizeof label, "batch_replay_%.30s_%.20s_%dseq", shape, type, nseq);
    if (!gu_selected(label)) return;
    if (gu_model_path(g_minfer, "8b", shape, type, path, sizeof path)) {
        gu_skip_named(&R, label, "model not available (synth failed or not given)");
        return;
    }
    if (!mi_cuda_item_on("b2") || !mi_cuda_graph_enabled()) {
        gu_skip_named(&R, label, "b2 or CUDA graphs switched off (MINFER_PERF_OFF, MINFER_NO_CUDA_GRAPH)");
        return;
    }
    gu_begin(&R, label);
    mi_model *m = NULL;
    if (mi_model_load(path, &m) != MI_OK) { gu_fail(&R, "load %s: %s", path, mi_errmsg()); return; }
    const size_t n = (size_t)nseq * RP_STEPS;
    uint64_t *on = calloc(n, 8), *off = calloc(n, 8), *host = calloc(n, 8);
    uint64_t r_on = 0, r_off = 0, r_host = 0;
    mi_batch_stats s_on = {0}, s_off = {0}, s_host = {0};
    mi_status st = rp_run(m, nseq, "", true, on, &r_on, &s_on);            /* reused and replayed */
    if (st == MI_OK) st = rp_run(m, nseq, "b2", false, off, &r_off, &s_off);   /* built every step, direct */
    if (st == MI_OK) st = rp_run(m, nseq, "b2", true, host, &r_host, &s_host); /* reused, direct */
    size_t bad_off = 0, bad_host = 0, first = n;
    for (size_t j = 0; st == MI_OK && j < n; j++) {
        const bool d1 = on[j] != off[j], d2 = on[j] != host[j];
        bad_off += d1;
        bad_host += d2;
        if ((d1 || d2) && first == n) first = j;
    }
    /* decode steps: all but the first (prompts); a capture each (sequences, bucket) met */
    const int64_t decode_steps = RP_STEPS - 1;
    if (st != MI_OK) gu_fail(&R, "%s", mi_errmsg());
    else if (bad_off || bad_host)
        gu_fail(&R, "logits rows differ from the direct run built every step: %zu, from reuse without b2: %zu; first: "
                    "sequence %zu step %zu", bad_off, bad_host, first / RP_STEPS, first % RP_STEPS);
    else if ((int64_t)r_on < decode_steps - 16 || r_off || r_host || s_on.graph_builds > 16 ||
             s_off.graph_builds != RP_STEPS || s_host.graph_builds != s_on.graph_builds)
        gu_fail(&R, "replays %llu (want >= %lld), without b2 %llu and %llu (want 0); graphs built %lld, %lld (want %d), "
                    "%lld", (unsigned long long)r_on, (long long)(decode_steps - 16), (unsigned long long)r_off,
                (unsigned long long)r_host, (long long)s_on.graph_builds, (long long)s_off.graph_builds, RP_STEPS,
                (long long)s_host.graph_builds);
    else
        gu_pass(&R, "%d sequences (one ends at step %d), %d steps: %llu splits replayed, %lld graphs built (reused "
                    "%lld); every logits row bit-identical to the batch built every step without b2 and to reuse "
                    "without b2", nseq, RP_STEPS / 2, RP_STEPS, (unsigned long long)r_on, (long long)s_on.graph_builds,
                (long long)s_on.graph_reuses);
    free(on);
    free(off);
    free(host);
    mi_model_free(m);
}

int main(int argc, char **argv) {
    (void)argc;
    gu_init(&R, "gate-8b", "8b");
    gu_minfer_path(argv[0], g_minfer, sizeof g_minfer);
    mi_phases_install();
    test_host_checks();
    if (mi_backend_cpu_new(4, &g_cpu) != MI_OK) {
        gu_begin(&R, "backends");
        gu_fail(&R, "%s", mi_errmsg());
        return gu_finish(&R);
    }
    test_cpu_reference();
    if (!dev_gate_start(&R, "gate_8b", &S)) {
        g_cpu->iface->destroy(g_cpu);
        return gu_finish(&R);
    }
    if (mi_backend_create("cuda", &g_cuda) != MI_OK) {
        gu_begin(&R, "backends");
        gu_fail(&R, "%s", mi_errmsg());
        return gu_finish(&R);
    }
    test_paged();
    test_bad();
    test_full_pool();
    test_no_logits();
    const plan plans[] = {
        {"tiny-qwen2", "q4_0", 7, 6, 9, false, MI_TYPE_F16},
        {"tiny-llama", "q8_0", 7, 6, 9, false, MI_TYPE_F32},
        {"tiny-qwen3", "q4_k_m", 7, 6, 9, false, MI_TYPE_F16},
        {"qwen2.5-0.5b", "q4_0", 7, 6, 9, false, MI_TYPE_F16},
        {"qwen2.5-0.5b", "q4_0", 64, 64, 5, true, MI_TYPE_F16},
    };
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) test_batch_model(&plans[i]);
    test_batch_replay("tiny-qwen2", "q4_0", 5);
    test_batch_replay("qwen2.5-0.5b", "q4_0", 16);
    g_cuda->iface->destroy(g_cuda);
    g_cpu->iface->destroy(g_cpu);
    cudaStreamDestroy(S);
    return gu_finish(&R);
}

/* gate_8a's attention cases (kernels8a.h): d4's split over the sequence, d20's one-token kernel
 * and d30's form of it that does its step's RoPE and KV stores, each against the lower phases'
 * kernels, a double reference and itself. The other kernel cases are kernels8a.c. */
#include "gates/8a/kernels8a.h"
#include "gates/7e/dev7e.h"
#include "phase8a_decode/decode8a.h"
#include "phase7b_ops/ops7b.h"
#include "phase7d_graphs/graphs7d.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "common/graph/graph.h"
#include "common/core/mi_fp16.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static gu_run *g_r;
static cudaStream_t S;
static unsigned long long *g_seed;

static void bind(gu_run *run, cudaStream_t stream, unsigned long long *seed) {
    g_r = run, S = stream, g_seed = seed;
}
static void dev_down(void *h, const void *d, size_t n) { dev_down_on(S, h, d, n); }

/* ---------------- split-KV attention (d4) ----------------
 * One token against caches of random F16 (or F32) rows at several depths: against a host
 * reference in double (NMSE <= 1e-8), against 7b's kernel (NMSE <= 1e-8), against itself with
 * n_past from a device int (7d's step params): bit for bit, and on a second run: bit for bit. */
static void host_attn(const float *q, const float *K, const float *V, double *o, int64_t n_kv, int hd, int Hq, int Hkv,
                      float scale) {
    const int G = Hq / Hkv;
    double *sc = malloc(sizeof(double) * (size_t)n_kv);
    for (int h = 0; h < Hq; h++) {
        const int kvh = h / G;
        double mx = -INFINITY, l = 0;
        for (int64_t t = 0; t < n_kv; t++) {
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[h * hd + i] * K[t * (int64_t)hd * Hkv + kvh * hd + i];
            sc[t] = d * scale;
            if (sc[t] > mx) mx = sc[t];
        }
        for (int i = 0; i < hd; i++) o[h * hd + i] = 0;
        for (int64_t t = 0; t < n_kv; t++) {
            const double p = exp(sc[t] - mx);
            l += p;
            for (int i = 0; i < hd; i++) o[h * hd + i] += p * V[t * (int64_t)hd * Hkv + kvh * hd + i];
        }
        for (int i = 0; i < hd; i++) o[h * hd + i] /= l;
    }
    free(sc);
}

/* One token's attention data: q, K and V caches of random values (as the cache holds them),
 * the double reference over keys 0 .. n_past, and the device copies (the caches off bytes past
 * their allocations). */
typedef struct {
    size_t no, cells, esz;
    float scale, *q, *K, *V, *refd;
    void *kh, *vh;
    double *ref;
    float *dq, *dout;
    void *dk, *dv, *bq, *bk, *bv, *bnp;
    int32_t *dnp;
} attn_data;

static void attn_data_make(attn_data *a, mi_type ct, int hd, int Hq, int Hkv, int64_t n_ctx, int64_t n_past, size_t off) {
    const size_t row = (size_t)hd * Hkv;
    a->cells = row * (size_t)n_ctx;
    a->esz = ct == MI_TYPE_F16 ? 2 : 4;
    a->no = (size_t)hd * Hq;
    a->scale = 1.0f / sqrtf((float)hd);
    a->q = gu_rand_f32(g_seed, a->no, -1.f, 1.f);
    a->K = gu_rand_f32(g_seed, a->cells, -1.f, 1.f);
    a->V = gu_rand_f32(g_seed, a->cells, -1.f, 1.f);
    a->kh = malloc(a->cells * a->esz);
    a->vh = malloc(a->cells * a->esz);
    for (size_t i = 0; i < a->cells; i++) {   /* the cache's values, as the reference sees them */
        if (ct == MI_TYPE_F16) {
            ((uint16_t *)a->kh)[i] = mi_f32_to_f16(a->K[i]);
            ((uint16_t *)a->vh)[i] = mi_f32_to_f16(a->V[i]);
            a->K[i] = mi_f16_to_f32(((uint16_t *)a->kh)[i]);
            a->V[i] = mi_f16_to_f32(((uint16_t *)a->vh)[i]);
        } else {
            ((float *)a->kh)[i] = a->K[i];
            ((float *)a->vh)[i] = a->V[i];
        }
    }
    a->ref = malloc(sizeof(double) * a->no);
    host_attn(a->q, a->K, a->V, a->ref, n_past + 1, hd, Hq, Hkv, a->scale);
    a->refd = malloc(a->no * 4);
    for (size_t i = 0; i < a->no; i++) a->refd[i] = (float)a->ref[i];
    a->dq = dev_up_at(a->q, a->no * 4, 0, &a->bq);
    a->dk = dev_up_at(a->kh, a->cells * a->esz, off, &a->bk);
    a->dv = dev_up_at(a->vh, a->cells * a->esz, off, &a->bv);
    const int32_t np32 = (int32_t)n_past;
    a->dnp = dev_up_at(&np32, 4, 0, &a->bnp);
    a->dout = dev_poison(a->no * 4);
}

static void attn_data_free(attn_data *a) {
    free(a->q); free(a->K); free(a->V); free(a->kh); free(a->vh); free(a->ref); free(a->refd);
    cudaFree(a->bq); cudaFree(a->bk); cudaFree(a->bv); cudaFree(a->bnp); cudaFree(a->dout);
}

/* the output to host, then poisoned for the next run */
static void attn_take(attn_data *a, float *h) {
    dev_down(h, a->dout, a->no * 4);
    CK(cudaMemset(a->dout, 0xFF, a->no * 4));
}

/* one split case's shape, and its run with the items in `items` off (every item on: "") into h */
typedef struct {
    mi_type ct;
    int hd, Hq, Hkv, gb;
    int64_t n_ctx, n_past;
    void *ws;
} split_shape;
static mi_status split_run(attn_data *A, const split_shape *sh, const char *items, float *h) {
    mi_status st = mi_cuda_items_set_off(items);
    if (st == MI_OK)
        st = mi8a_attn_split(S, A->dq, A->dk, A->dv, sh->ct, A->dout, NULL, sh->n_past, sh->n_ctx, sh->hd, sh->Hq, sh->Hkv,
                             A->scale, sh->gb, sh->ws);
    if (st == MI_OK) attn_take(A, h);
    return st;
}

/* off: the K and V caches start off bytes past an allocation (4: not 16-byte aligned, so the
 * kernel reads V from global memory instead of staging it in shared memory) */
static void split_case(mi_type ct, int hd, int Hq, int Hkv, int64_t n_ctx, int64_t n_past, size_t off, int gb) {
    char name[128];
    snprintf(name, sizeof name, "attn_split_%s_hd%d_Hq%d_Hkv%d_ctx%lld_past%lld%s_gb%d", mi_type_name(ct), hd, Hq, Hkv,
             (long long)n_ctx, (long long)n_past, off ? "_unaligned" : "", gb);
    if (!gu_begin(g_r, name)) return;
    attn_data A;
    attn_data_make(&A, ct, hd, Hq, Hkv, n_ctx, n_past, off);
    const size_t no = A.no;
    float *a = malloc(no * 4), *b = malloc(no * 4), *c7 = malloc(no * 4), *dv = malloc(no * 4), *s1 = malloc(no * 4),
          *s2 = malloc(no * 4), *m1 = malloc(no * 4), *w1 = malloc(no * 4), *c1 = malloc(no * 4),
          *p0 = malloc(no * 4);
    void *ws = dev_poison(mi8a_attn_split_workspace(n_ctx, hd, Hq, Hkv));
    const split_shape sh = {ct, hd, Hq, Hkv, gb, n_ctx, n_past, ws};
    mi_status st = split_run(&A, &sh, "", a);
    if (st == MI_OK) st = split_run(&A, &sh, "", b);
    if (st == MI_OK) st = mi8a_attn_split(S, A.dq, A.dk, A.dv, ct, A.dout, A.dnp, 0, n_ctx, hd, Hq, Hkv, A.scale, gb, ws);
    if (st == MI_OK) attn_take(&A, dv);
    if (st == MI_OK) st = mi7b_attn(S, A.dq, A.dk, A.dv, ct, A.dout, 1, n_past, hd, Hq, Hkv, A.scale);
    if (st == MI_OK) attn_take(&A, c7);
    /* d22 off: the scalar kernel, against the reference too; and with d21 off as well (its K row
     * four chunks at a time): the same sums, the same bits */
    if (st == MI_OK) st = split_run(&A, &sh, "d22", s1);
    if (st == MI_OK) st = split_run(&A, &sh, "d21,d22", s2);
    /* d32 off (the merge a split after another), d33 off (the splits by the cache's length), d34
     * off (the heads as the mma's rows, two mma a product) */
    if (st == MI_OK) st = split_run(&A, &sh, "d32", m1);
    if (st == MI_OK) st = split_run(&A, &sh, "d33", w1);
    if (st == MI_OK) st = split_run(&A, &sh, "d34", c1);
    /* d35 off (the tiles in the block's pipeline): the same keys a warp in the same order, so the
     * same bits where the splits are as many (d33 counts the blocks an SM holds, which the stages'
     * shared memory sets) */
    const int n_on = mi8a_attn_split_mma_count(n_ctx, hd, Hkv);
    if (st == MI_OK) st = split_run(&A, &sh, "d35", p0);
    const int n_d35 = mi8a_attn_split_mma_count(n_ctx, hd, Hkv);
    mi_cuda_items_set_off("");
    if (st != MI_OK) {
        gu_fail(g_r, "launch: %s", mi_errmsg());
    } else {
        const double e_ref = gu_nmse(a, A.refd, no), e_7b = gu_nmse(a, c7, no), e_s = gu_nmse(s1, A.refd, no);
        const double e_m = gu_nmse(m1, A.refd, no), e_w = gu_nmse(w1, A.refd, no), e_c = gu_nmse(c1, A.refd, no);
        const bool rep = !memcmp(a, b, no * 4), devnp = !memcmp(a, dv, no * 4), d21 = !memcmp(s1, s2, no * 4);
        const bool pipes = n_d35 == n_on ? !memcmp(a, p0, no * 4) : gu_nmse(p0, A.refd, no) <= 1e-8;
        const bool near = e_ref <= 1e-8 && e_7b <= 1e-8 && e_s <= 1e-8 && e_m <= 1e-8 && e_w <= 1e-8 && e_c <= 1e-8;
        if (!near || !rep || !devnp || !d21 || !pipes) {
            const size_t i = first_bad(a, A.refd, no, 1e-4, 1e-3);
            if (i != (size_t)-1) printf("    %s: first mismatch %zu got %.9g want %.9g (7b %.9g)\n", name, i, a[i], A.refd[i], c7[i]);
            gu_fail(g_r, "nmse vs reference %.3g, vs 7b %.3g, scalar (d22 off) vs reference %.3g, d32 off %.3g, d33 off "
                    "%.3g, d34 off %.3g (bound 1e-8); repeat %s; device n_past %s; scalar with d21 off %s; d35 off (%d splits, %d on) %s",
                    e_ref, e_7b, e_s, e_m, e_w, e_c,
                    rep ? "bitwise" : "DIFFERS", devnp ? "bitwise" : "DIFFERS", d21 ? "bitwise" : "DIFFERS",
                    n_d35, n_on, pipes ? "bitwise where as many splits, else near" : "DIFFERS");
        } else {
            const bool mma = mi8a_attn_split_on_mma(n_ctx, hd, Hq, Hkv, ct, A.dk, A.dv, gb);
            gu_pass(g_r, "%d splits%s; nmse vs reference %.3g, vs 7b %.3g, scalar kernel vs reference %.3g, d32 off %.3g, "
                         "d33 off %.3g, d34 off %.3g; repeat, device n_past, scalar d21 off bitwise; d35 off (%d splits) %s",
                    mma ? mi8a_attn_split_mma_count(n_ctx, hd, Hkv) : mi8a_attn_split_count(n_ctx, Hkv),
                    mma ? ", tensor cores" : "", e_ref, e_7b, e_s, e_m, e_w, e_c, n_d35,
                    n_d35 == n_on ? "bitwise" : "near the reference");
        }
    }
    free(a); free(b); free(c7); free(dv); free(s1); free(s2); free(m1); free(w1); free(c1); free(p0);
    cudaFree(ws);
    attn_data_free(&A);
}

/* ---------------- one-token attention, loads in flight (d20) ----------------
 * 7b's arithmetic: bit for bit against 7b's kernel (n_past from the launch) and 7d's (n_past from
 * a device int), against itself on a second run and with n_past on the device; NMSE <= 1e-8
 * against the double reference. */
static void step_case(int hd, int Hq, int Hkv, int64_t n_ctx, int64_t n_past) {
    char name[128];
    snprintf(name, sizeof name, "attn_step_f16_hd%d_Hq%d_Hkv%d_ctx%lld_past%lld", hd, Hq, Hkv, (long long)n_ctx,
             (long long)n_past);
    if (!gu_begin(g_r, name)) return;
    attn_data A;
    attn_data_make(&A, MI_TYPE_F16, hd, Hq, Hkv, n_ctx, n_past, 0);
    const size_t no = A.no;
    float *a = malloc(no * 4), *b = malloc(no * 4), *dv = malloc(no * 4), *c7 = malloc(no * 4), *c7d = malloc(no * 4);
    const mi_type ct = MI_TYPE_F16;
    mi_status st = mi8a_attn_step(S, A.dq, A.dk, A.dv, ct, A.dout, NULL, NULL, n_past, n_ctx, hd, Hq, Hkv, A.scale);
    if (st == MI_OK) attn_take(&A, a);
    if (st == MI_OK) st = mi8a_attn_step(S, A.dq, A.dk, A.dv, ct, A.dout, NULL, NULL, n_past, n_ctx, hd, Hq, Hkv, A.scale);
    if (st == MI_OK) attn_take(&A, b);
    if (st == MI_OK) st = mi8a_attn_step(S, A.dq, A.dk, A.dv, ct, A.dout, NULL, A.dnp, 0, n_ctx, hd, Hq, Hkv, A.scale);
    if (st == MI_OK) attn_take(&A, dv);
    if (st == MI_OK) st = mi7b_attn(S, A.dq, A.dk, A.dv, ct, A.dout, 1, n_past, hd, Hq, Hkv, A.scale);
    if (st == MI_OK) attn_take(&A, c7);
    if (st == MI_OK) st = mi7d_attn(S, A.dq, A.dk, A.dv, ct, A.dout, 1, A.dnp, n_ctx, hd, Hq, Hkv, A.scale);
    if (st == MI_OK) attn_take(&A, c7d);
    /* d31: the output again with its quantized row, against 7b's quantizer of the output */
    const size_t qb = no / 32 * 36;
    uint8_t *oq = dev_poison(qb), *rq = dev_poison(qb), *hq = malloc(qb), *hr = malloc(qb);
    float *aq = malloc(no * 4);
    if (st == MI_OK) st = mi8a_attn_step(S, A.dq, A.dk, A.dv, ct, A.dout, oq, NULL, n_past, n_ctx, hd, Hq, Hkv, A.scale);
    if (st == MI_OK) st = mi7b_quantize_act(S, MI_TYPE_Q4_0, A.dout, (int64_t)no, 1, rq);
    if (st == MI_OK) {
        attn_take(&A, aq);
        dev_down(hq, oq, qb);
        dev_down(hr, rq, qb);
    }
    const bool q31 = st == MI_OK && !memcmp(aq, a, no * 4) && !memcmp(hq, hr, qb);
    free(aq); free(hq); free(hr); cudaFree(oq); cudaFree(rq);
    if (st != MI_OK) {
        gu_fail(g_r, "launch: %s", mi_errmsg());
    } else {
        const double e_ref = gu_nmse(a, A.refd, no);
        const bool rep = !memcmp(a, b, no * 4), devnp = !memcmp(a, dv, no * 4);
        const bool is7b = !memcmp(a, c7, no * 4), is7d = !memcmp(a, c7d, no * 4);
        if (!(e_ref <= 1e-8) || !rep || !devnp || !is7b || !is7d || !q31) {
            size_t i = 0;
            while (i < no && !memcmp(&a[i], &c7[i], 4)) i++;
            if (i < no) printf("    %s: first difference from 7b at %zu: %.9g, 7b %.9g\n", name, i, a[i], c7[i]);
            gu_fail(g_r, "nmse vs reference %.3g (bound 1e-8); vs 7b %s, vs 7d %s; repeat %s; device n_past %s; d31's "
                    "output and quantized row %s", e_ref, is7b ? "bitwise" : "DIFFERS", is7d ? "bitwise" : "DIFFERS",
                    rep ? "bitwise" : "DIFFERS", devnp ? "bitwise" : "DIFFERS", q31 ? "bitwise" : "DIFFER");
        } else {
            gu_pass(g_r, "bit for bit 7b's and 7d's kernels, itself again and with n_past on the device; d31's quantized "
                         "row byte for byte 7b's quantizer's of the output; nmse vs reference %.3g", e_ref);
        }
    }
    free(a); free(b); free(dv); free(c7); free(c7d);
    attn_data_free(&A);
}

/* d30: the attention doing its step's RoPE and KV stores against d14's kernel and then d20's:
 * the output, q's and k's RoPE outputs and both whole caches bit for bit, with n_past from the
 * launch and from the device (7d's step params) */
static uint16_t *f16_cache(int64_t n) {
    float *f = gu_rand_f32(g_seed, (size_t)n, -1.f, 1.f);
    uint16_t *h = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) h[i] = mi_f32_to_f16(f[i]);
    free(f);
    return h;
}
static void rkv_case(int hd, int Hq, int Hkv, int64_t n_ctx, int64_t n_past, int mode, int n_rot) {
    char name[128];
    snprintf(name, sizeof name, "attn_step_rkv_hd%d_Hq%d_Hkv%d_ctx%lld_past%lld_%s_rot%d", hd, Hq, Hkv,
             (long long)n_ctx, (long long)n_past, mode == MI_ROPE_NEOX ? "neox" : "normal", n_rot);
    if (!gu_begin(g_r, name)) return;
    const size_t nq = (size_t)hd * Hq, nk = (size_t)hd * Hkv, nc = nk * (size_t)n_ctx;
    float *q = gu_rand_f32(g_seed, nq, -2.f, 2.f), *k = gu_rand_f32(g_seed, nk, -2.f, 2.f), *v = gu_rand_f32(g_seed, nk, -2.f, 2.f);
    uint16_t *kc = f16_cache((int64_t)nc), *vc = f16_cache((int64_t)nc);
    const int32_t pos = (int32_t)n_past, np = (int32_t)n_past;
    void *b[12];
    float *dq = dev_up_at(q, nq * 4, 0, &b[0]), *dk = dev_up_at(k, nk * 4, 0, &b[1]), *dv = dev_up_at(v, nk * 4, 0, &b[2]);
    int32_t *dpos = dev_up_at(&pos, 4, 0, &b[3]), *dnp = dev_up_at(&np, 4, 0, &b[4]);
    void *kc1 = dev_up_at(kc, nc * 2, 0, &b[5]), *vc1 = dev_up_at(vc, nc * 2, 0, &b[6]);
    void *kc2 = dev_up_at(kc, nc * 2, 0, &b[7]), *vc2 = dev_up_at(vc, nc * 2, 0, &b[8]);
    float *qr1 = dev_poison(nq * 4), *kr1 = dev_poison(nk * 4), *o1 = dev_poison(nq * 4);
    float *qr2 = dev_poison(nq * 4), *kr2 = dev_poison(nk * 4), *o2 = dev_poison(nq * 4);
    const float scale = 1.0f / sqrtf((float)hd), base = 1000000.0f;
    mi8a_rope_kv_io io1 = {dq, dk, dv, qr1, kr1, kc1, vc1, dpos, NULL, NULL, n_past, n_past, n_ctx, n_ctx};
    mi8a_rope_kv_io io2 = io1;
    io2.q_rope = qr2, io2.k_rope = kr2, io2.cache_k = kc2, io2.cache_v = vc2;
    mi_status st = mi8a_rope_kv(S, &io1, MI_TYPE_F16, hd, Hq, Hkv, mode, n_rot, base);
    if (st == MI_OK) st = mi8a_attn_step(S, qr1, kc1, vc1, MI_TYPE_F16, o1, NULL, NULL, n_past, n_ctx, hd, Hq, Hkv, scale);
    if (st == MI_OK)
        st = mi8a_attn_step_rkv(S, &io2, mode, n_rot, base, MI_TYPE_F16, o2, NULL, NULL, n_past, n_ctx, hd, Hq, Hkv, scale);
    size_t bad[2][5];
    for (int round = 0; round < 2 && st == MI_OK; round++) {
        if (round == 1) {   /* again from the same caches, n_past read from the device */
            CK(cudaMemcpy(kc2, kc, nc * 2, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(vc2, vc, nc * 2, cudaMemcpyHostToDevice));
            CK(cudaMemset(o2, 0xFF, nq * 4));
            io2.n_past_k_dev = io2.n_past_v_dev = dnp;
            io2.n_past_k = io2.n_past_v = 0;
            st = mi8a_attn_step_rkv(S, &io2, mode, n_rot, base, MI_TYPE_F16, o2, NULL, dnp, 0, n_ctx, hd, Hq, Hkv, scale);
            if (st != MI_OK) break;
        }
        const void *a[5] = {o1, qr1, kr1, kc1, vc1}, *g[5] = {o2, qr2, kr2, kc2, vc2};
        const size_t n[5] = {nq * 4, nq * 4, nk * 4, nc * 2, nc * 2};
        for (int i = 0; i < 5; i++) {
            uint8_t *ha = malloc(n[i]), *hg = malloc(n[i]);
            dev_down(ha, a[i], n[i]);
            dev_down(hg, g[i], n[i]);
            bad[round][i] = gu_first_diff(ha, hg, n[i]);
            free(ha); free(hg);
        }
    }
    static const char *what[5] = {"output", "q's RoPE", "k's RoPE", "K cache", "V cache"};
    if (st != MI_OK) {
        gu_fail(g_r, "launch: %s", mi_errmsg());
    } else {
        int r = -1, i = -1;
        for (int rr = 0; rr < 2 && r < 0; rr++)
            for (int ii = 0; ii < 5 && r < 0; ii++)
                if (bad[rr][ii] != (size_t)-1) r = rr, i = ii;
        if (r >= 0) gu_fail(g_r, "%s differs from d14 + d20's at byte %zu (n_past from the %s)", what[i], bad[r][i],
                            r ? "device" : "launch");
        else gu_pass(g_r, "output, q's and k's RoPE and both caches bit for bit d14's kernel then d20's, n_past from the "
                          "launch and from the device");
    }
    free(q); free(k); free(v); free(kc); free(vc);
    for (int i = 0; i < 9; i++) cudaFree(b[i]);
    cudaFree(qr1); cudaFree(kr1); cudaFree(o1); cudaFree(qr2); cudaFree(kr2); cudaFree(o2);
}

void kernels8a_attn_step(gu_run *run, cudaStream_t stream, unsigned long long *seed) {
    bind(run, stream, seed);
    const int64_t past[] = {0, 1, 126, 127, 128, 300, 2047};
    for (size_t i = 0; i < sizeof past / sizeof past[0]; i++) {
        step_case(128, 28, 4, 2048, past[i]);   /* the 7B's heads */
        step_case(64, 14, 2, 2048, past[i]);    /* the 0.5B's */
    }
    step_case(128, 16, 16, 512, 200);   /* no GQA */
    step_case(64, 32, 4, 4096, 3000);   /* a cache past the split's threshold, longer n_kv */
    /* d30: the 0.5B's and the 7B's heads, NEOX and normal pairs, a partial rotation, the first, a
     * tile's last and the cache's last row, more than one tile */
    rkv_case(64, 14, 2, 512, 0, MI_ROPE_NEOX, 64);
    rkv_case(64, 14, 2, 512, 127, MI_ROPE_NEOX, 64);
    rkv_case(64, 14, 2, 512, 511, MI_ROPE_NEOX, 64);
    rkv_case(128, 28, 4, 1024, 300, MI_ROPE_NEOX, 128);
    rkv_case(128, 32, 8, 256, 200, MI_ROPE_NORMAL, 128);
    rkv_case(64, 8, 8, 256, 37, MI_ROPE_NEOX, 32);
    rkv_case(128, 16, 2, 640, 129, MI_ROPE_NORMAL, 96);
}

void kernels8a_attn_split(gu_run *run, cudaStream_t stream, unsigned long long *seed) {
    bind(run, stream, seed);
    const int64_t past7[] = {0, 1, 127, 128, 1000, 8191, 32767};
    for (size_t i = 0; i < sizeof past7 / sizeof past7[0]; i++) split_case(MI_TYPE_F16, 128, 28, 4, 32768, past7[i], 0, 0);
    split_case(MI_TYPE_F16, 128, 28, 4, 32768, 20000, 4, 0);   /* V from global memory */
    split_case(MI_TYPE_F16, 128, 28, 4, 32768, 9000, 0, 3);    /* head groups 3 + 3 + 1 */
    split_case(MI_TYPE_F16, 128, 28, 4, 32768, 9000, 0, 7);    /* the whole group a block */
    split_case(MI_TYPE_F16, 64, 14, 2, 8192, 5000, 0, 0);      /* the 0.5B's heads */
    split_case(MI_TYPE_F32, 64, 8, 8, 8192, 3000, 0, 0);       /* no GQA, F32 cache */
    split_case(MI_TYPE_F16, 256, 16, 1, 8192, 700, 0, 2);      /* one KV head, the widest head */
    split_case(MI_TYPE_F16, 128, 32, 2, 8192, 4000, 0, 16);    /* G = 16: no room to stage V */
    split_case(MI_TYPE_F16, 64, 14, 2, 4096, 63, 0, 0);        /* one split, a part tile */
    split_case(MI_TYPE_F16, 64, 14, 2, 32768, 30000, 0, 0);    /* the 0.5B at depth */
    split_case(MI_TYPE_F16, 128, 16, 16, 4096, 2500, 0, 0);    /* no GQA */
}


/* gate_8b's host case of 8b's pass (runs without a device; CI runs it): b47's marks on a
 * hand-built decode step of many sequences (q's and k's RoPE, the K and V scatters, the paged
 * attention), run by the CPU backend after 8a's pass and 8b's with the CPU as the target. */
#include "gates/8b/passes8b.h"
#include "phase8b_batch/split_cost.h"
#include "phase8a_decode/decode8a.h"
#include "phase8b_batch/batch8b.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "common/backend/sched.h"
#include "common/graph/graph.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static gu_run *g_r;
static unsigned long long *g_seed;
static mi_backend *g_cpu;

enum { HD = 64, HQ = 14, HKV = 2, BLOCK = 16, N_SEQ = 3, POOL = 16 };

/* what one run of the step shows: the four's roles, whether the attention holds q, k and v
 * (1), holds nothing (0) or something else (-1), and its output */
typedef struct {
    int roles[4], holds;
} marks;

/* One step of N_SEQ sequences (max_rows 1: one row each, at n_past 5, 17 and 40; 2: the first
 * sequence takes two rows, so N_SEQ + 1 rows) over F16 caches of POOL blocks; pass: 8a's pass
 * then 8b's, the CPU backend as the target. out: the attention's output. */
static int rkv_step(int max_rows, bool pass, marks *mk, float *out) {
    const int T = N_SEQ + (max_rows > 1), npast[N_SEQ] = {5, 17, 40};
    const int64_t row = HD * HKV, n_rows = POOL * BLOCK, cne[2] = {row, n_rows};
    int32_t pos[N_SEQ + 1], slots[N_SEQ + 1], seqs[N_SEQ * MI_PAGED_FIELDS + POOL];
    int r = 0, off = N_SEQ * MI_PAGED_FIELDS, blk = 0, max_kv = 0;
    for (int s = 0; s < N_SEQ; s++) {   /* blocks handed out in reverse, so no table is the identity */
        const int rows = s == 0 && max_rows > 1 ? 2 : 1, n_kv = npast[s] + rows, nb = (n_kv + BLOCK - 1) / BLOCK;
        int32_t *f = seqs + s * MI_PAGED_FIELDS;
        f[MI_PAGED_FIRST] = r, f[MI_PAGED_ROWS] = rows, f[MI_PAGED_NPAST] = npast[s], f[MI_PAGED_TABLE] = off;
        for (int b = 0; b < nb; b++) seqs[off + b] = POOL - 1 - blk++;
        for (int i = 0; i < rows; i++, r++) {
            const int p = npast[s] + i;
            pos[r] = p;
            slots[r] = seqs[off + p / BLOCK] * BLOCK + p % BLOCK;
        }
        off += nb;
        if (n_kv > max_kv) max_kv = n_kv;
    }
    float *q = gu_rand_f32(g_seed, (size_t)(HD * HQ * T), -1.f, 1.f), *k = gu_rand_f32(g_seed, (size_t)(row * T), -1.f, 1.f);
    float *v = gu_rand_f32(g_seed, (size_t)(row * T), -1.f, 1.f);
    mi_tensor kc, vc;
    tensor_init(&kc, "pool_k", MI_TYPE_F16, 2, cne);
    tensor_init(&vc, "pool_v", MI_TYPE_F16, 2, cne);
    kc.flags = vc.flags = MI_T_PERSIST;
    kc.data = calloc((size_t)(row * n_rows), 2);
    vc.data = calloc((size_t)(row * n_rows), 2);
    mi_graph *g = graph_new(64);
    mi_sched *sc = NULL;
    int rc = 1;
    if (g && kc.data && vc.data && sched_new(&g_cpu, 1, &sc) == MI_OK) {
        mi_tensor *xq = graph_input(g, "q", MI_TYPE_F32, HD * HQ, T, q), *xk = graph_input(g, "k", MI_TYPE_F32, row, T, k);
        mi_tensor *xv = graph_input(g, "v", MI_TYPE_F32, row, T, v), *xp = graph_input(g, "pos", MI_TYPE_I32, T, 1, pos);
        mi_tensor *xs = graph_input(g, "slots", MI_TYPE_I32, T, 1, slots);
        mi_tensor *xt = graph_input(g, "seqs", MI_TYPE_I32, off, 1, seqs);
        mi_tensor *n[4];
        n[0] = graph_rope(g, xq, xp, HD, MI_ROPE_NEOX, HD, 1000000.f);
        n[1] = graph_rope(g, xk, xp, HD, MI_ROPE_NEOX, HD, 1000000.f);
        n[2] = graph_kv_scatter(g, n[1], &kc, xs);
        n[3] = graph_kv_scatter(g, xv, &vc, xs);
        mi_tensor *y = graph_attn_paged(g, n[0], n[2], n[3], xt, N_SEQ, BLOCK, max_kv, max_rows, HD, HQ, HKV, 0.125f);
        if (y) {
            y->flags |= MI_T_OUTPUT;
            g->output = y;
            if (pass) {
                mi8a_fuse_decode_with(g, g_cpu, 1);
                mi8b_fuse_batch(g, g_cpu);
            }
            for (int i = 0; i < 4; i++) mk->roles[i] = mi_rope_kv_role(n[i]);
            mk->holds = !y->src[4] && !y->src[5] && !y->src[6] ? 0 : y->src[4] == xq && y->src[5] == xk && y->src[6] == xv ? 1 : -1;
            if (sched_compute(sc, g) == MI_OK && sched_read(sc, y, out, 0, mi_nbytes(y)) == MI_OK) rc = 0;
        }
    }
    if (sc) sched_free(sc);
    graph_free(g);
    free(kc.data), free(vc.data), free(q), free(k), free(v);
    return rc;
}

static bool roles_are(const marks *m, int last) {
    return m->roles[0] == MI_RKV_ROWS_DEFER && m->roles[1] == MI_RKV_ROWS_DEFER && m->roles[2] == MI_RKV_ROWS_DEFER &&
           m->roles[3] == last;
}

static void test_rkv_rows_pass(void) {
    if (!gu_begin(g_r, "rkv_rows_pass")) return;
    enum { OUT = HD * HQ * (N_SEQ + 1) };
    float *a = calloc(OUT, 4), *b = calloc(OUT, 4), *c = calloc(OUT, 4), *d = calloc(OUT, 4);
    marks m0, m1, m_off, m2a, m2b;
    const unsigned long long seed = *g_seed;
    int rc = rkv_step(1, false, &m0, a);
    *g_seed = seed;
    if (!rc) rc = rkv_step(1, true, &m1, b);
    mi_status st = mi_cuda_items_set_off("b47");
    *g_seed = seed;
    if (!rc && st == MI_OK) rc = rkv_step(1, true, &m_off, c);
    mi_cuda_items_set_off("");
    *g_seed = seed;
    if (!rc && st == MI_OK) rc = rkv_step(2, false, &m2a, c);
    *g_seed = seed;
    if (!rc && st == MI_OK) rc = rkv_step(2, true, &m2b, d);
    const bool ok = roles_are(&m1, MI_RKV_ROWS_ATTN) && m1.holds == 1 && roles_are(&m_off, MI_RKV_ROWS_LAST) &&
                    m_off.holds == 0 && roles_are(&m2b, MI_RKV_ROWS_LAST) && m2b.holds == 0;
    const bool same = !memcmp(a, b, (size_t)HD * HQ * N_SEQ * 4) && !memcmp(c, d, (size_t)OUT * 4);
    if (rc || st != MI_OK) gu_fail(g_r, "run failed: %s", mi_errmsg());
    else if (!ok || !same)
        gu_fail(g_r, "roles %d %d %d %d, attention holds %d (want %d %d %d %d, 1); b47 off %d %d %d %d, %d; a sequence "
                    "of two rows %d %d %d %d, %d (want V scatter %d, 0); CPU output %s", m1.roles[0], m1.roles[1],
                m1.roles[2], m1.roles[3], m1.holds, MI_RKV_ROWS_DEFER, MI_RKV_ROWS_DEFER, MI_RKV_ROWS_DEFER,
                MI_RKV_ROWS_ATTN, m_off.roles[0], m_off.roles[1], m_off.roles[2], m_off.roles[3], m_off.holds,
                m2b.roles[0], m2b.roles[1], m2b.roles[2], m2b.roles[3], m2b.holds, MI_RKV_ROWS_LAST,
                same ? "bit-identical" : "DIFFERS");
    else gu_pass(g_r, "a decode step's q RoPE, k RoPE, K scatter, V scatter marked defer / defer / defer / attention, "
                     "the attention holding q, k and v; b20's marks with b47 off and where a sequence has two rows; "
                     "CPU output bit-identical to the unpassed graph");
    free(a), free(b), free(c), free(d);
}

/* The K split's cost model (split_cost.h) on the 7B's shapes at 64 rows on 132 multiprocessors
 * (Q4_K's 144-byte stages), against its Python mirror (gates/8b/emu_gemm_stream.py, which
 * printed these splits): q/o 4, k 7, gate/up 1, down 4, q/o at 16 rows with 264 slots 7; and
 * b48's clusters: q + k's 32 bands split 4 ways while 32 clusters of 4 stay resident, 3 ways
 * when 31 do; a capacity no smaller than the slots changes nothing. */
static void test_split_cost(void) {
    if (!gu_begin(g_r, "split_cost")) return;
    static const struct { int64_t K, M, N, slots; int want; } c[] = {
        {3584, 3584, 64, 132, 4}, {3584, 512, 64, 132, 7}, {3584, 18944, 64, 132, 1}, {18944, 3584, 64, 132, 4},
        {3584, 3584, 16, 264, 7}};
    char d[256] = "";
    size_t dl = 0;
    int bad = 0;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int S = 0;
        (void)stream_chunk(c[i].M, c[i].N, c[i].K / 256, c[i].slots, 144, 128, &S, NULL);
        if (S != c[i].want && dl < sizeof d - 64)
            bad++, dl += (size_t)snprintf(d + dl, sizeof d - dl, " K %lld M %lld N %lld: split %d, want %d;", (long long)c[i].K,
                                          (long long)c[i].M, (long long)c[i].N, S, c[i].want);
    }
    int64_t cap[9] = {0};
    int s32 = 0, s31 = 0, sfull = 0, snone = 0;
    cap[4] = 4 * 32;
    (void)stream_chunk(4096, 64, 14, 132, 144, 128, &s32, cap);
    cap[4] = 4 * 31;
    (void)stream_chunk(4096, 64, 14, 132, 144, 128, &s31, cap);
    for (int s = 2; s <= 8; s++) cap[s] = 132;
    (void)stream_chunk(4096, 64, 14, 132, 144, 128, &sfull, cap);
    (void)stream_chunk(4096, 64, 14, 132, 144, 128, &snone, NULL);
    if (s32 != 4 || s31 != 3 || sfull != snone) bad++;
    if (bad)
        gu_fail(g_r, "%s q + k: split %d with 32 clusters of 4 (want 4), %d with 31 (want 3), %d with a full capacity "
                     "against %d without", d, s32, s31, sfull, snone);
    else gu_pass(g_r, "the 7B's splits at 64 and 16 rows as the Python mirror's; q + k split 4 ways with 32 clusters of 4 "
                      "resident, 3 ways with 31");
}

void passes8b_run(gu_run *run, unsigned long long *seed, mi_backend *cpu) {
    g_r = run;
    g_seed = seed;
    g_cpu = cpu;
    test_rkv_rows_pass();
    test_split_cost();
}

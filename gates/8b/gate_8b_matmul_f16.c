/* gate_8b_matmul_f16: item b6, a batch's Q4_K / Q6_K matmuls of 9..64 rows through f16 tensor
 * cores (phase8b_batch/gemm_f16_stream.cu, docs/PHASE8B.md).
 *  f16s_mm_*        against the exact product (each weight row dequantized by the CPU's
 *                   mi_dequantize_row, the float activations, double sums): NMSE <= 1e-5 (the f16
 *                   roundings of weights and activations; the host emulation measures ~1e-7);
 *                   against b3's int8 kernel (8-bit activation codes): NMSE <= 1e-4, the quantized
 *                   matmul tier of docs/NUMERICS.md; against itself on a second run (bitwise)
 *  f16s_mm_refused  what it leaves to the others
 *  small_mm_*       item b12 (gemm_f16_small.cu, Q4_0 at K <= 1024; b16: Q8_0): against the exact product
 *                   (NMSE <= 1e-5), b1's split int8 kernel where it runs (NMSE <= 1e-4) and itself
 *                   (bitwise)
 *  small_mm_refused what it leaves to the others
 *  ksplit_mm_*      item b15 (the same kernel past K = 1024, K split into slices): against the
 *                   exact product, b3's int8 kernel and itself, as small_mm_*
 *  small_run_*      item b13 (a run of b12's matmuls of one x in one launch): each output against
 *                   the exact product (NMSE <= 1e-5), itself (bitwise) and its launch alone (bitwise)
 *  f16s_mixed_*     item b49 (Q4_K matmuls then Q6_K ones of one x in one launch): one launch, each
 *                   output against the exact product and alone, repeat bitwise, b49 off none
 *  f16s_run_*       item b40 (a run of b22's Q4_K matmuls in one launch): one launch, each output
 *                   against the exact product and its launch alone (NMSE <= 1e-5), itself (bitwise);
 *                   with b40 off bit for bit alone
 * Runs at PHASE=8b with the other 8b gates (make gate-8b). */
#include "gates/gate_util.h"
#include "gates/7e/dev7e.h"
#include "phase8b_batch/batch8b.h"
#include "phase7e_perf/perf7e.h"
#include "common/core/mi_canon.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "common/quant/mi_types.h"
#include "common/backend/backend.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static gu_run R;
static cudaStream_t S;
static unsigned long long g_seed = 0x8b16f16bULL;

/* y [N][M] = dequantized W rows . x rows in double, + bias; rows [m0, m1) */
typedef struct {
    mi_type t;
    const uint8_t *w;
    const float *x, *bias;
    double *y;
    int64_t K, M, N, m0, m1;
} exact_job;

static void *exact_rows(void *arg) {
    const exact_job *j = arg;
    const size_t rb = mi_row_size(j->t, j->K);
    float *row = malloc((size_t)j->K * sizeof(float));
    for (int64_t m = j->m0; m < j->m1; m++) {
        mi_dequantize_row(j->t, j->w + (size_t)m * rb, row, j->K);
        for (int64_t n = 0; n < j->N; n++) {
            const float *xn = j->x + (size_t)n * j->K;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int64_t k = 0; k < j->K; k += 4) {
                s0 += (double)row[k] * xn[k];
                s1 += (double)row[k + 1] * xn[k + 1];
                s2 += (double)row[k + 2] * xn[k + 2];
                s3 += (double)row[k + 3] * xn[k + 3];
            }
            j->y[(size_t)n * j->M + m] = (s0 + s1) + (s2 + s3) + j->bias[m];
        }
    }
    free(row);
    return NULL;
}

/* exact_rows over up to 32 threads (each output computed by one, in one order) */
static void exact_matmul(mi_type t, const uint8_t *w, const float *x, const float *bias, double *y, int64_t K,
                         int64_t M, int64_t N) {
    enum { NT = 32 };
    pthread_t th[NT];
    exact_job jobs[NT];
    int started = 0;
    for (int i = 0; i < NT; i++) {
        jobs[i] = (exact_job){t, w, x, bias, y, K, M, N, M * i / NT, M * (i + 1) / NT};
        if (pthread_create(&th[i], NULL, exact_rows, &jobs[i]) == 0) th[started++] = th[i];
        else exact_rows(&jobs[i]);
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
}

/* A kernel under test and what it is compared with, each as run (stream S, the workspace ws):
 * the int8 kernel of the quantized matmul tier (NULL where it does not take the shape) and an
 * item switched off for a third run, held to the same bound against the exact product. */
typedef mi_status (*mm_fn)(mi_type t, const void *w, const float *x, const float *b, float *y, int64_t K, int64_t M,
                           int64_t N, void *ws);
typedef size_t (*ws_fn)(mi_type t, int64_t K, int64_t M, int64_t N);
typedef struct {
    mm_fn run;
    ws_fn ws;
    const char *item_off;   /* NULL: no third run */
    mm_fn i8_run;
    ws_fn i8_ws;            /* 0: the int8 kernel does not take the shape */
    const char *i8_name;
    bool off_bitwise;       /* the third run must equal the first bit for bit (an item that moves bytes only) */
} mm_variant;

/* one hash of a run's outputs (each matmul's FNV-1a, hashed in order) */
static uint32_t runs_fnv(float *const *y, const int64_t *ms, int n, int64_t N) {
    uint32_t h[MI8A_RUN_MAX];
    for (int s = 0; s < n; s++) h[s] = gu_fnv1a(y[s], (size_t)(ms[s] * N) * 4);
    return gu_fnv1a(h, (size_t)n * sizeof h[0]);
}

/* one shape of a variant: the weight at byte woff of its allocation (Q4_0 and Q6_K rows are
 * 2-byte aligned only); plan: what the case reports of the kernel's split */
static void mm_case(const char *name, const mm_variant *v, mi_type t, int64_t K, int64_t M, int64_t N, size_t woff,
                    const char *plan) {
    size_t wb;
    uint8_t *w = gu_make_weights(&g_seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(&g_seed, (size_t)(K * N), -1.f, 1.f), *bias = gu_rand_f32(&g_seed, (size_t)M, -0.5f, 0.5f);
    const size_t ny = (size_t)(M * N);
    double *ref = malloc(ny * sizeof(double));
    float *got = malloc(ny * 4), *got2 = malloc(ny * 4), *got3 = malloc(ny * 4), *i8 = malloc(ny * 4);
    exact_matmul(t, w, x, bias, ref, K, M, N);
    void *wbase, *xbase, *bbase;
    void *dw = dev_up_at(w, wb, woff, &wbase);
    float *dx = dev_up_at(x, (size_t)(K * N) * 4, 0, &xbase), *db = dev_up_at(bias, (size_t)M * 4, 0, &bbase);
    size_t wsa = v->ws(t, K, M, N);
    const size_t ws8 = v->i8_ws(t, K, M, N);
    const bool have8 = ws8 > 0, off = v->item_off != NULL;
    if (off && mi_cuda_items_set_off(v->item_off) == MI_OK) {   /* the third run's plan may need more (b48) */
        const size_t w3 = v->ws(t, K, M, N);
        wsa = w3 > wsa ? w3 : wsa;
    }
    if (off) mi_cuda_items_set_off("");
    void *ws = dev_poison(wsa > ws8 ? wsa : ws8);
    float *dy = dev_poison(ny * 4);
    mi_status st = v->run(t, dw, dx, db, dy, K, M, N, ws);
    if (st == MI_OK) st = dev_read_back(S, got, dy, ny);
    if (st == MI_OK) st = cudaMemset(dy, 0xFF, ny * 4) == cudaSuccess ? MI_OK : mi_err(MI_ERR_DEVICE, "memset");
    if (st == MI_OK) st = v->run(t, dw, dx, db, dy, K, M, N, ws);
    if (st == MI_OK) st = dev_read_back(S, got2, dy, ny);
    if (st == MI_OK && off) st = mi_cuda_items_set_off(v->item_off);
    if (st == MI_OK && off) st = cudaMemset(dy, 0xFF, ny * 4) == cudaSuccess ? MI_OK : mi_err(MI_ERR_DEVICE, "memset");
    if (st == MI_OK && off) st = v->run(t, dw, dx, db, dy, K, M, N, ws);
    if (st == MI_OK && off) st = dev_read_back(S, got3, dy, ny);
    if (off) mi_cuda_items_set_off("");
    if (st == MI_OK && have8) st = v->i8_run(t, dw, dx, db, dy, K, M, N, ws);
    if (st == MI_OK && have8) st = dev_read_back(S, i8, dy, ny);
    if (st != MI_OK) {
        gu_fail(&R, "%s", mi_errmsg());
    } else {
        const double e_ex = gu_nmse_d(got, ref, ny), e_i8 = have8 ? gu_nmse(got, i8, ny) : 0.0;
        const double e_off = off ? gu_nmse_d(got3, ref, ny) : 0.0;
        const bool rep = memcmp(got, got2, ny * 4) == 0;
        const size_t d_off = off && v->off_bitwise ? gu_first_diff(got, got3, ny * 4) : (size_t)-1;
        char offs[96] = "";
        if (off) snprintf(offs, sizeof offs, " (%s off %.3g%s)", v->item_off, e_off,
                          !v->off_bitwise ? "" : d_off == (size_t)-1 ? ", bitwise" : ", NOT BITWISE");
        if (d_off != (size_t)-1)
            printf("    %s: %s off differs first at index %zu (token %zu, row %zu): %.9g against %.9g\n", name,
                   v->item_off, d_off / 4, d_off / 4 / (size_t)M, d_off / 4 % (size_t)M, got3[d_off / 4], got[d_off / 4]);
        if (!(e_ex <= 1e-5) || !(e_off <= 1e-5) || !(e_i8 <= 1e-4) || !rep || d_off != (size_t)-1) {
            for (size_t i = 0; i < ny; i++)
                if (!(fabs((double)got[i] - ref[i]) <= 1e-2 * (fabs(ref[i]) + 1.0))) {
                    printf("    %s: first mismatch index %zu (token %zu, row %zu) got %.9g want %.9g (int8 %.9g)\n", name,
                           i, i / (size_t)M, i % (size_t)M, got[i], ref[i], have8 ? i8[i] : NAN);
                    break;
                }
            gu_fail(&R, "%s: nmse vs exact %.3g%s (bound 1e-5), vs %s %.3g (bound 1e-4), repeat %s", plan, e_ex, offs,
                    have8 ? v->i8_name : "no int8 kernel", e_i8, rep ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(&R, "%s: nmse vs exact %.3g%s, vs %s %.3g, repeat bitwise, output fnv %08x", plan, e_ex, offs,
                    have8 ? v->i8_name : "no int8 kernel", e_i8, gu_fnv1a(got, ny * 4));
        }
    }
    free(w); free(x); free(bias); free(ref); free(got); free(got2); free(got3); free(i8);
    cudaFree(wbase); cudaFree(xbase); cudaFree(bbase); cudaFree(ws); cudaFree(dy);
}

static mi_status run_f16s(mi_type t, const void *w, const float *x, const float *b, float *y, int64_t K, int64_t M,
                          int64_t N, void *ws) {
    return mi8b_gemm_f16s(S, t, w, x, b, y, K, M, N, ws);
}
static mi_status run_stream3(mi_type t, const void *w, const float *x, const float *b, float *y, int64_t K, int64_t M,
                             int64_t N, void *ws) {
    return mi8b_gemm_stream(S, t, w, x, b, y, K, M, N, 3, ws);
}
static size_t ws_stream3(mi_type t, int64_t K, int64_t M, int64_t N) {
    return mi8b_gemm_stream_supported(t, K, M, N, 3) ? mi8b_gemm_stream_workspace(t, K, M, N, 3) : 0;
}
static mi_status run_small(mi_type t, const void *w, const float *x, const float *b, float *y, int64_t K, int64_t M,
                           int64_t N, void *ws) {
    return mi8b_gemm_f16_small(S, t, w, x, b, y, K, M, N, ws);
}
static mi_status run_split(mi_type t, const void *w, const float *x, const float *b, float *y, int64_t K, int64_t M,
                           int64_t N, void *ws) {
    return mi8b_gemm_split(S, t, w, x, b, y, K, M, N, ws);
}
static size_t ws_split(mi_type t, int64_t K, int64_t M, int64_t N) {
    return mi8b_gemm_split_supported(t, K, M, N) ? mi8b_gemm_split_workspace(t, K, M, N) : 0;
}

/* a shape case selected (MINFER_GATE_ONLY) and begun; false, recorded as refused where it is
 * selected, when the kernel does not take the shape */
static bool case_begin(const char *name, bool supported) {
    if (!gu_selected(name)) return false;
    gu_begin(&R, name);
    if (!supported) gu_fail(&R, "refused");
    return supported;
}

/* b6 against b3's int8 kernel: as the items are (b22's wgmma kernel where the device has it), then
 * with the items of off as the third run (b22: b6's mma.sync kernel; b11,b22: its other warp split) */
static void f16s_case_off(const char *off, mi_type t, int64_t K, int64_t M, int64_t N, size_t woff) {
    /* items that move bytes or reorder waits only: the third run bit for bit the first */
    const bool b28 = !strcmp(off, "b28"), b32 = !strcmp(off, "b32"), b33 = !strcmp(off, "b33"), b39 = !strcmp(off, "b39");
    char name[112];
    snprintf(name, sizeof name, "f16s_mm_%s_K%lld_M%lld_N%lld%s%s", mi_type_name(t), (long long)K, (long long)M,
             (long long)N, woff ? "_unaligned" : "",
             !strcmp(off, "b22") ? "" : !strcmp(off, "b25") ? "_b25off" : b28 ? "_b28off" : b32 ? "_b32off" : b33 ? "_b33off" : b39 ? "_b39off" : "_b11off");
    if (!case_begin(name, mi8b_gemm_f16s_supported(t, K, M, N))) return;
    const int P = mi8b_gemm_f16s_blocks(t, K, M, N), Sp = mi8b_gemm_f16s_split(t, K, M, N);
    /* b48 prices a split by the clusters b33 sums it in (which b25, b28, b32 and b33 decide), so
     * an item off may take another plan: bit for bit only where both plans are one */
    bool same_plan = true;
    if ((b28 || b32 || b33 || b39) && mi_cuda_items_set_off(off) == MI_OK) {
        same_plan = mi8b_gemm_f16s_blocks(t, K, M, N) == P && mi8b_gemm_f16s_split(t, K, M, N) == Sp;
        mi_cuda_items_set_off("");
    }
    const mm_variant v = {run_f16s, mi8b_gemm_f16s_workspace, off, run_stream3, ws_stream3, "b3's int8 kernel",
                          (b28 || b32 || b33 || b39) && same_plan};
    char plan[96];
    if (Sp == 0) snprintf(plan, sizeof plan, "stream-K, %d runs", P);
    else snprintf(plan, sizeof plan, "K split %d, %d runs%s", Sp, P, same_plan ? "" : " (another plan with the item off)");
    mm_case(name, &v, t, K, M, N, woff, plan);
}

/* b48: the blocks b33's clusters of 2..8 keep resident at once at 64 rows (cudaOccupancyMaxActiveClusters)
 * and the 7B's plans with b48 on and off. Fails where b33 is on but no cluster of any size fits
 * (its sums would then be silently off) */
static void plan_clusters_case(void) {
    if (!gu_selected("f16s_plan_clusters")) return;
    gu_begin(&R, "f16s_plan_clusters");
    char d[640];
    int len = 0, fits = 0;
    for (int q = 0; q < 2; q++) {
        const mi_type t = q ? MI_TYPE_Q6_K : MI_TYPE_Q4_K;
        len += snprintf(d + len, sizeof d - (size_t)len, "%s%s blocks in clusters of 2..8:", q ? "; " : "", mi_type_name(t));
        int64_t cap[9];
        mi8b_gemm_f16s_cluster_blocks(t, 64, cap);
        for (int c = 2; c <= 8; c++) {
            fits += cap[c] > 0;
            len += snprintf(d + len, sizeof d - (size_t)len, " %lld", (long long)cap[c]);
        }
    }
    static const struct { const char *what; mi_type t; int64_t K, M; } shapes[] = {
        {"q+k", MI_TYPE_Q4_K, 3584, 4096}, {"q+k+v", MI_TYPE_Q4_K, 3584, 4608}, {"o", MI_TYPE_Q4_K, 3584, 3584},
        {"down", MI_TYPE_Q4_K, 18944, 3584}, {"down", MI_TYPE_Q6_K, 18944, 3584}, {"v", MI_TYPE_Q6_K, 3584, 512}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int on = mi8b_gemm_f16s_split(shapes[i].t, shapes[i].K, shapes[i].M, 64);
        mi_cuda_items_set_off("b48");
        const int was = mi8b_gemm_f16s_split(shapes[i].t, shapes[i].K, shapes[i].M, 64);
        mi_cuda_items_set_off("");
        len += snprintf(d + len, sizeof d - (size_t)len, "%s %s split %d (b48 off %d)", i ? "," : "; 64 rows:",
                        shapes[i].what, on, was);
    }
    if (!fits && mi_cuda_item_on("b33") && mi_cuda_item_on("b28") && mi_cuda_item_on("b25") && mi8b_f16s_x_form(64))
        gu_fail(&R, "b33 on but no cluster of 2..8 blocks fits: %s", d);
    else
        gu_pass(&R, "%s", d);
}
static void f16s_case(mi_type t, int64_t K, int64_t M, int64_t N, size_t woff) { f16s_case_off("b22", t, K, M, N, woff); }

/* b12 (Q4_0) against b1's split int8 kernel */
static void small_case_t(mi_type t, int64_t K, int64_t M, int64_t N, size_t woff) {
    static const mm_variant v = {run_small, mi8b_gemm_f16_small_workspace, "b19", run_split, ws_split,
                                 "b1's int8 kernel", false};
    char name[112];
    snprintf(name, sizeof name, "small_mm_%s_K%lld_M%lld_N%lld%s", mi_type_name(t), (long long)K, (long long)M,
             (long long)N, woff ? "_unaligned" : "");
    if (!case_begin(name, mi8b_gemm_f16_small_supported(t, K, M, N))) return;
    const mi8a_run_seg seg = {NULL, NULL, NULL, M};
    char plan[64];
    snprintf(plan, sizeof plan, "one launch after x's f16 copy, %d rows a band",
             mi8b_gemm_f16_small_rows(t, &seg, 1, K, N));
    mm_case(name, &v, t, K, M, N, woff, plan);
}
static void small_case(int64_t K, int64_t M, int64_t N, size_t woff) { small_case_t(MI_TYPE_Q4_0, K, M, N, woff); }

/* b15 (Q4_0 past K = 1024, K split) against b3's int8 kernel */
static mi_status run_ksplit(mi_type t, const void *w, const float *x, const float *b, float *y, int64_t K, int64_t M,
                            int64_t N, void *ws) {
    return mi8b_gemm_f16_ksplit(S, t, w, x, b, y, K, M, N, ws);
}
static void ksplit_case(int64_t K, int64_t M, int64_t N, size_t woff) {
    static const mm_variant v = {run_ksplit, mi8b_gemm_f16_ksplit_workspace, "b19", run_stream3, ws_stream3,
                                 "b3's int8 kernel", false};
    char name[112];
    snprintf(name, sizeof name, "ksplit_mm_Q4_0_K%lld_M%lld_N%lld%s", (long long)K, (long long)M, (long long)N,
             woff ? "_unaligned" : "");
    if (!case_begin(name, mi8b_gemm_f16_ksplit_supported(MI_TYPE_Q4_0, K, M, N))) return;
    mm_case(name, &v, MI_TYPE_Q4_0, K, M, N, woff, "K slices summed in order");
}

/* Segment s of a run over x [N][K]: Q4_0 weights of M rows and a bias made on the host (*w, *bias),
 * their exact product into a new *ref, both uploaded (the weights woff bytes past alignment; the
 * device bases into *wbase, *bbase) with a poisoned output (*dy): the segment a run is handed */
static mi8a_run_seg run_seg_make_t(mi_type t, int64_t K, int64_t M, int64_t N, const float *x, size_t woff, uint8_t **w,
                                   float **bias, double **ref, void **wbase, void **bbase, float **dy) {
    size_t wb;
    *w = gu_make_weights(&g_seed, t, K, M, 1.0f, &wb);
    *bias = gu_rand_f32(&g_seed, (size_t)M, -0.5f, 0.5f);
    *ref = malloc((size_t)(M * N) * sizeof(double));
    exact_matmul(t, *w, x, *bias, *ref, K, M, N);
    const void *dw = dev_up_at(*w, wb, woff, wbase);
    const float *db = dev_up_at(*bias, (size_t)M * 4, 0, bbase);
    *dy = dev_poison((size_t)(M * N) * 4);
    return (mi8a_run_seg){dw, db, *dy, M};
}
static mi8a_run_seg run_seg_make(int64_t K, int64_t M, int64_t N, const float *x, size_t woff, uint8_t **w, float **bias,
                                 double **ref, void **wbase, void **bbase, float **dy) {
    return run_seg_make_t(MI_TYPE_Q4_0, K, M, N, x, woff, w, bias, ref, wbase, bbase, dy);
}

/* b13: a run of matmuls of one x in one launch (mi8b_gemm_f16_small_run): each output against
 * the exact product (NMSE <= 1e-5), itself on a second run (bitwise) and its matmul launched
 * alone (bitwise: a run takes the rows a band its matmuls take alone, or launches them one by
 * one where those differ, band 0 below) */
static void run_case(int64_t K, int64_t N, const int64_t *ms, int n, size_t woff) {
    char name[112];
    int len = snprintf(name, sizeof name, "small_run_Q4_0_K%lld_N%lld_M", (long long)K, (long long)N);
    for (int s = 0; s < n; s++) len += snprintf(name + len, sizeof name - (size_t)len, "%s%lld", s ? "+" : "", (long long)ms[s]);
    if (woff) snprintf(name + len, sizeof name - (size_t)len, "_unaligned");
    if (!gu_selected(name)) return;
    gu_begin(&R, name);
    uint8_t *w[MI8A_RUN_MAX];
    float *bias[MI8A_RUN_MAX], *got[MI8A_RUN_MAX], *got2[MI8A_RUN_MAX], *alone[MI8A_RUN_MAX], *dy[MI8A_RUN_MAX];
    double *ref[MI8A_RUN_MAX];
    void *wbase[MI8A_RUN_MAX], *bbase[MI8A_RUN_MAX];
    mi8a_run_seg seg[MI8A_RUN_MAX];
    float *x = gu_rand_f32(&g_seed, (size_t)(K * N), -1.f, 1.f);
    void *xbase;
    float *dx = dev_up_at(x, (size_t)(K * N) * 4, 0, &xbase);
    int64_t rows = 0;
    for (int s = 0; s < n; s++) {
        const size_t ny = (size_t)(ms[s] * N);
        seg[s] = run_seg_make(K, ms[s], N, x, woff * (size_t)(s & 1), &w[s], &bias[s], &ref[s], &wbase[s], &bbase[s], &dy[s]);
        got[s] = malloc(ny * 4), got2[s] = malloc(ny * 4), alone[s] = malloc(ny * 4);
        rows += ms[s];
    }
    void *ws = dev_poison(mi8b_gemm_f16_small_workspace(MI_TYPE_Q4_0, K, rows, N));
    const int band = mi8b_gemm_f16_small_rows(MI_TYPE_Q4_0, seg, n, K, N);
    mi_status st = mi8b_gemm_f16_small_run(S, MI_TYPE_Q4_0, seg, n, dx, K, N, ws);
    for (int s = 0; s < n && st == MI_OK; s++) st = dev_read_back(S, got[s], dy[s], (size_t)(ms[s] * N));
    for (int s = 0; s < n && st == MI_OK; s++)
        st = cudaMemset(dy[s], 0xFF, (size_t)(ms[s] * N) * 4) == cudaSuccess ? MI_OK : mi_err(MI_ERR_DEVICE, "memset");
    if (st == MI_OK) st = mi8b_gemm_f16_small_run(S, MI_TYPE_Q4_0, seg, n, dx, K, N, ws);
    for (int s = 0; s < n && st == MI_OK; s++) st = dev_read_back(S, got2[s], dy[s], (size_t)(ms[s] * N));
    for (int s = 0; s < n && st == MI_OK; s++) {
        st = mi8b_gemm_f16_small(S, MI_TYPE_Q4_0, seg[s].w, dx, seg[s].bias, dy[s], K, ms[s], N, ws);
        if (st == MI_OK) st = dev_read_back(S, alone[s], dy[s], (size_t)(ms[s] * N));
    }
    if (st != MI_OK) {
        gu_fail(&R, "%s", mi_errmsg());
    } else {
        double worst = 0.0;
        bool ok = true, rep = true, same = true;
        int bitwise = 0;
        for (int s = 0; s < n; s++) {
            const size_t ny = (size_t)(ms[s] * N);
            const double e = gu_nmse_d(got[s], ref[s], ny), ea = gu_nmse_d(alone[s], ref[s], ny);
            worst = e > worst ? e : worst;
            const bool bw = memcmp(got[s], alone[s], ny * 4) == 0;
            rep = rep && memcmp(got[s], got2[s], ny * 4) == 0;
            bitwise += bw;
            same = same && bw;
            if (!(e <= 1e-5) || !(ea <= 1e-5) || !bw) {
                ok = false;
                for (size_t i = 0; i < ny; i++)
                    if (got[s][i] != alone[s][i] || !(fabs((double)got[s][i] - ref[s][i]) <= 1e-2 * (fabs(ref[s][i]) + 1.0))) {
                        printf("    %s: matmul %d, first mismatch index %zu (token %zu, row %zu) got %.9g alone %.9g want %.9g\n",
                               name, s, i, i / (size_t)ms[s], i % (size_t)ms[s], got[s][i], alone[s][i], ref[s][i]);
                        break;
                    }
            }
        }
        if (ok && rep)
            gu_pass(&R, "%d rows a band (0: its matmuls take other bands alone, launched one by one): nmse vs exact "
                        "<= %.3g, %d of %d matmuls bitwise their launch alone, repeat bitwise, output fnv %08x", band, worst,
                    bitwise, n, runs_fnv(got, ms, n, N));
        else
            gu_fail(&R, "%d rows a band: nmse vs exact up to %.3g (bound 1e-5), alone %s (%d of %d bitwise), repeat %s",
                    band, worst, same ? "bitwise" : "DIFFERS", bitwise, n, rep ? "bitwise" : "DIFFERS");
    }
    for (int s = 0; s < n; s++) {
        free(w[s]); free(bias[s]); free(ref[s]); free(got[s]); free(got2[s]); free(alone[s]);
        cudaFree(wbase[s]); cudaFree(bbase[s]); cudaFree(dy[s]);
    }
    free(x);
    cudaFree(xbase);
    cudaFree(ws);
}

/* b24: a run whose x = rms_norm(x0, w) (the 0.5B's q + k + v and gate + up): the norm written as
 * x's f16 copy by mi8b_gemm_f16_small_run_norm against 7e's norm kernel then the run on its
 * output, every matmul's outputs bit for bit; a second run bitwise; against the exact product of
 * the host's canonical norm (NMSE <= 1e-5) */
static void run_norm_case(int64_t K, int64_t N, const int64_t *ms, int n) {
    char name[112];
    int len = snprintf(name, sizeof name, "small_run_norm_Q4_0_K%lld_N%lld_M", (long long)K, (long long)N);
    for (int s = 0; s < n; s++) len += snprintf(name + len, sizeof name - (size_t)len, "%s%lld", s ? "+" : "", (long long)ms[s]);
    if (!gu_selected(name)) return;
    gu_begin(&R, name);
    const float eps = 1e-6f;
    float *x0 = gu_rand_f32(&g_seed, (size_t)(K * N), -2.f, 2.f), *nw = gu_rand_f32(&g_seed, (size_t)K, 0.5f, 1.5f);
    float *xn = malloc((size_t)(K * N) * 4);
    for (int64_t t = 0; t < N; t++) {   /* the host's canonical norm (common/core/mi_canon.h) */
        const float *xr = x0 + t * K;
        const float sc = mi_canon_rms_scale(mi_canon_sumsq_host(xr, K), K, eps);
        for (int64_t i = 0; i < K; i++) xn[t * K + i] = (xr[i] * sc) * nw[i];
    }
    void *b[4 + 3 * MI8A_RUN_MAX];
    int nb = 0;
    float *dx0 = dev_up_at(x0, (size_t)(K * N) * 4, 0, &b[nb++]), *dnw = dev_up_at(nw, (size_t)K * 4, 0, &b[nb++]);
    float *dxn = dev_poison((size_t)(K * N) * 4);
    b[nb++] = dxn;
    uint8_t *w[MI8A_RUN_MAX];
    float *bias[MI8A_RUN_MAX], *got[MI8A_RUN_MAX], *fused[MI8A_RUN_MAX], *fused2[MI8A_RUN_MAX];
    double *ref[MI8A_RUN_MAX];
    mi8a_run_seg seg[MI8A_RUN_MAX];
    int64_t rows = 0;
    for (int s = 0; s < n; s++) {
        const size_t ny = (size_t)(ms[s] * N);
        float *dy;
        seg[s] = run_seg_make(K, ms[s], N, xn, 0, &w[s], &bias[s], &ref[s], &b[nb], &b[nb + 1], &dy);
        b[nb + 2] = dy;
        nb += 3;
        got[s] = malloc(ny * 4), fused[s] = malloc(ny * 4), fused2[s] = malloc(ny * 4);
        rows += ms[s];
    }
    void *ws = dev_poison(mi8b_gemm_f16_small_workspace(MI_TYPE_Q4_0, K, rows, N));
    mi_status st = mi7e_rms_norm(S, dx0, dnw, dxn, K, N, eps);
    if (st == MI_OK) st = mi8b_gemm_f16_small_run(S, MI_TYPE_Q4_0, seg, n, dxn, K, N, ws);
    for (int s = 0; s < n && st == MI_OK; s++) st = dev_read_back(S, got[s], seg[s].y, (size_t)(ms[s] * N));
    for (int rep = 0; rep < 2; rep++) {
        for (int s = 0; s < n && st == MI_OK; s++)
            st = cudaMemset(seg[s].y, 0xFF, (size_t)(ms[s] * N) * 4) == cudaSuccess ? MI_OK : mi_err(MI_ERR_DEVICE, "memset");
        if (st == MI_OK) st = mi8b_gemm_f16_small_run_norm(S, MI_TYPE_Q4_0, seg, n, dx0, dnw, eps, K, N, ws);
        for (int s = 0; s < n && st == MI_OK; s++)
            st = dev_read_back(S, rep ? fused2[s] : fused[s], seg[s].y, (size_t)(ms[s] * N));
    }
    if (st != MI_OK) {
        gu_fail(&R, "%s", mi_errmsg());
    } else {
        double worst = 0.0;
        bool same = true, rep = true;
        for (int s = 0; s < n; s++) {
            const size_t ny = (size_t)(ms[s] * N);
            const double e = gu_nmse_d(fused[s], ref[s], ny);
            worst = e > worst ? e : worst;
            rep = rep && memcmp(fused[s], fused2[s], ny * 4) == 0;
            if (memcmp(fused[s], got[s], ny * 4) != 0) {
                same = false;
                for (size_t i = 0; i < ny; i++)
                    if (fused[s][i] != got[s][i]) {
                        printf("    %s: matmul %d, first mismatch index %zu (token %zu, row %zu) fused %.9g two kernels %.9g\n",
                               name, s, i, i / (size_t)ms[s], i % (size_t)ms[s], fused[s][i], got[s][i]);
                        break;
                    }
            }
        }
        if (same && rep && worst <= 1e-5)
            gu_pass(&R, "bit for bit the norm kernel then the run, repeat bitwise, nmse vs exact <= %.3g", worst);
        else
            gu_fail(&R, "against the norm kernel then the run %s, repeat %s, nmse vs exact %.3g (bound 1e-5)",
                    same ? "bitwise" : "DIFFERS", rep ? "bitwise" : "DIFFERS", worst);
    }
    for (int s = 0; s < n; s++) free(w[s]), free(bias[s]), free(ref[s]), free(got[s]), free(fused[s]), free(fused2[s]);
    for (int i = 0; i < nb; i++) cudaFree(b[i]);
    cudaFree(ws);
    free(x0), free(nw), free(xn);
}

/* b40: a run of Q4_K matmuls of one x as one launch of b22's kernel (mi8b_gemm_f16s_run); b49
 * where n4 < n: matmuls n4 .. n - 1 are Q6_K (mi8b_gemm_f16s_run_mixed). One launch (its
 * counter), each output against the exact product (NMSE <= 1e-5) and its matmul launched alone
 * (NMSE <= 1e-5: the run's plan cuts K in other chunks, so not bit for bit), itself on a second
 * run (bitwise); with the item off no such launch, the outputs against the exact product, and
 * bit for bit alone those launched alone then (b40: every one; b49: the Q6_K ones, its Q4_K ones
 * going as their b40 run) */
static mi_status run_of(const mi8a_run_seg *seg, int n4, int n, const float *dx, int64_t K, int64_t N, void *ws,
                        size_t ws_bytes) {
    return n4 < n ? mi8b_gemm_f16s_run_mixed(S, seg, n4, n, dx, K, N, ws, ws_bytes)
                  : mi8b_gemm_f16s_run(S, MI_TYPE_Q4_K, seg, n, dx, K, N, ws, ws_bytes, false);
}
/* the mean time of reps runs of a run (b49's cases: with the item as it is), after one warm-up;
 * information for the notes, no pass criterion */
static double run_us(const mi8a_run_seg *seg, int n4, int n, const float *dx, int64_t K, int64_t N, void *ws,
                     size_t ws_bytes, int reps) {
    cudaEvent_t e0, e1;
    float ms = 0.0f;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) return -1.0;
    mi_status st = run_of(seg, n4, n, dx, K, N, ws, ws_bytes);
    cudaEventRecord(e0, S);
    for (int i = 0; i < reps && st == MI_OK; i++) st = run_of(seg, n4, n, dx, K, N, ws, ws_bytes);
    cudaEventRecord(e1, S);
    if (st != MI_OK || cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) ms = -1.0f;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms < 0 ? -1.0 : 1000.0 * ms / reps;
}
static void f16s_run_case(int64_t K, int64_t N, const int64_t *ms, int n4, int n) {
    const bool mixed = n4 < n;
    char name[128];
    int len = snprintf(name, sizeof name, mixed ? "f16s_mixed_K%lld_N%lld_M" : "f16s_run_Q4_K_K%lld_N%lld_M", (long long)K,
                       (long long)N);
    for (int s = 0; s < n; s++)
        len += snprintf(name + len, sizeof name - (size_t)len, "%s%s%lld", s ? "+" : "", s < n4 ? "" : "q6:", (long long)ms[s]);
    if (!gu_selected(name)) return;
    gu_begin(&R, name);
    if (!mi8b_gemm_f16s_run_supported(MI_TYPE_Q4_K, N) || (mixed && !mi8b_f16s_x_form(N))) {
        gu_skip(&R, "no one-launch run here at these rows");
        return;
    }
    uint64_t (*launches)(void) = mixed ? mi8b_gemm_f16s_mixed_launches : mi8b_gemm_f16s_run_launches;
    const char *item = mixed ? "b49" : "b40";
    uint8_t *w[MI8A_RUN_MAX];
    float *bias[MI8A_RUN_MAX], *got[MI8A_RUN_MAX], *got2[MI8A_RUN_MAX], *alone[MI8A_RUN_MAX], *off[MI8A_RUN_MAX], *dy[MI8A_RUN_MAX];
    double *ref[MI8A_RUN_MAX];
    void *wbase[MI8A_RUN_MAX], *bbase[MI8A_RUN_MAX];
    mi8a_run_seg seg[MI8A_RUN_MAX];
    float *x = gu_rand_f32(&g_seed, (size_t)(K * N), -1.f, 1.f);
    void *xbase;
    float *dx = dev_up_at(x, (size_t)(K * N) * 4, 0, &xbase);
    int64_t bands = 0;
    size_t ws_bytes = 0;
    for (int s = 0; s < n; s++) {
        const mi_type t = s < n4 ? MI_TYPE_Q4_K : MI_TYPE_Q6_K;
        const size_t ny = (size_t)(ms[s] * N);
        seg[s] = run_seg_make_t(t, K, ms[s], N, x, 0, &w[s], &bias[s], &ref[s], &wbase[s], &bbase[s], &dy[s]);
        got[s] = malloc(ny * 4), got2[s] = malloc(ny * 4), alone[s] = malloc(ny * 4), off[s] = malloc(ny * 4);
        bands += (ms[s] + 127) / 128;
        const size_t one = mi8b_gemm_f16s_workspace(t, K, ms[s], N);
        ws_bytes = one > ws_bytes ? one : ws_bytes;
    }
    /* the workspace a split would hold: its largest matmul's alone, or the run's */
    const size_t all = mi8b_gemm_f16s_workspace(MI_TYPE_Q4_K, K, bands * 128, N);
    ws_bytes = all > ws_bytes ? all : ws_bytes;
    void *ws = dev_poison(ws_bytes);
    const uint64_t l0 = launches();
    mi_status st = run_of(seg, n4, n, dx, K, N, ws, ws_bytes);
    const uint64_t l1 = launches();
    for (int s = 0; s < n && st == MI_OK; s++) st = dev_read_back(S, got[s], dy[s], (size_t)(ms[s] * N));
    for (int s = 0; s < n && st == MI_OK; s++)
        st = cudaMemset(dy[s], 0xFF, (size_t)(ms[s] * N) * 4) == cudaSuccess ? MI_OK : mi_err(MI_ERR_DEVICE, "memset");
    if (st == MI_OK) st = run_of(seg, n4, n, dx, K, N, ws, ws_bytes);
    for (int s = 0; s < n && st == MI_OK; s++) st = dev_read_back(S, got2[s], dy[s], (size_t)(ms[s] * N));
    for (int s = 0; s < n && st == MI_OK; s++) {
        st = mi8b_gemm_f16s(S, s < n4 ? MI_TYPE_Q4_K : MI_TYPE_Q6_K, seg[s].w, dx, seg[s].bias, dy[s], K, ms[s], N, ws);
        if (st == MI_OK) st = dev_read_back(S, alone[s], dy[s], (size_t)(ms[s] * N));
    }
    uint64_t l2 = 0, l3 = 0;
    double t_on = mixed && st == MI_OK ? run_us(seg, n4, n, dx, K, N, ws, ws_bytes, 50) : 0.0, t_off = 0.0;
    if (st == MI_OK) st = mi_cuda_items_set_off(item);
    if (st == MI_OK) {
        l2 = launches();
        st = run_of(seg, n4, n, dx, K, N, ws, ws_bytes);
        l3 = launches();
        if (mixed && st == MI_OK) t_off = run_us(seg, n4, n, dx, K, N, ws, ws_bytes, 50);
        mi_cuda_items_set_off("");
    }
    if (mixed) printf("    %s: %.2f us a run in one launch, %.2f us with b49 off (50 back to back, information)\n", name, t_on, t_off);
    for (int s = 0; s < n && st == MI_OK; s++) st = dev_read_back(S, off[s], dy[s], (size_t)(ms[s] * N));
    if (st != MI_OK) {
        gu_fail(&R, "%s", mi_errmsg());
    } else {
        double worst = 0.0, worst_alone = 0.0, worst_off = 0.0;
        bool rep = true, off_bits = true;
        int bitwise = 0;
        for (int s = 0; s < n; s++) {
            const size_t ny = (size_t)(ms[s] * N);
            const double e = gu_nmse_d(got[s], ref[s], ny), ea = gu_nmse(got[s], alone[s], ny), eo = gu_nmse_d(off[s], ref[s], ny);
            worst = e > worst ? e : worst;
            worst_alone = ea > worst_alone ? ea : worst_alone;
            worst_off = eo > worst_off ? eo : worst_off;
            rep = rep && memcmp(got[s], got2[s], ny * 4) == 0;
            if (!mixed || s >= n4) off_bits = off_bits && memcmp(off[s], alone[s], ny * 4) == 0;
            bitwise += memcmp(got[s], alone[s], ny * 4) == 0;
            if (!(e <= 1e-5))
                for (size_t i = 0; i < ny; i++)
                    if (!(fabs((double)got[s][i] - ref[s][i]) <= 1e-2 * (fabs(ref[s][i]) + 1.0))) {
                        printf("    %s: matmul %d, first mismatch index %zu (token %zu, row %zu) got %.9g alone %.9g want %.9g\n",
                               name, s, i, i / (size_t)ms[s], i % (size_t)ms[s], got[s][i], alone[s][i], ref[s][i]);
                        break;
                    }
        }
        const bool one = l1 - l0 == 1 && l3 == l2;
        if (worst <= 1e-5 && worst_alone <= 1e-5 && worst_off <= 1e-5 && rep && off_bits && one)
            gu_pass(&R, "one launch (K split %d over %lld bands): nmse vs exact <= %.3g, vs each alone <= %.3g (%d of %d "
                        "bitwise), repeat bitwise; %s off: nmse vs exact <= %.3g, %s bit for bit alone; output fnv %08x",
                    mi8b_gemm_f16s_split(MI_TYPE_Q4_K, K, bands * 128, N), (long long)bands, worst, worst_alone, bitwise, n,
                    item, worst_off, mixed ? "the Q6_K ones" : "one by one,", runs_fnv(got, ms, n, N));
        else
            gu_fail(&R, "launches %llu (want 1) and %llu with %s off (want 0); nmse vs exact %.3g (bound 1e-5), vs alone "
                        "%.3g (bound 1e-5), %s off %.3g; repeat %s, %s off %s",
                    (unsigned long long)(l1 - l0), (unsigned long long)(l3 - l2), item, worst, worst_alone, item, worst_off,
                    rep ? "bitwise" : "DIFFERS", item, off_bits ? "bit for bit alone" : "DIFFERS from alone");
    }
    for (int s = 0; s < n; s++) {
        free(w[s]); free(bias[s]); free(ref[s]); free(got[s]); free(got2[s]); free(alone[s]); free(off[s]);
        cudaFree(wbase[s]); cudaFree(bbase[s]); cudaFree(dy[s]);
    }
    free(x);
    cudaFree(xbase);
    cudaFree(ws);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    gu_init(&R, "gate-8b-matmul-f16", "8b");
    mi_phases_install();
    if (!dev_gate_start(&R, "gate_8b_matmul_f16", &S)) return gu_finish(&R);
    static const int64_t ns[] = {17, 33, 64};
    for (int i = 0; i < 3; i++) f16s_case(MI_TYPE_Q4_K, 3584, 3584, ns[i], 0);   /* the 7B's q / o */
    f16s_case(MI_TYPE_Q4_K, 3584, 512, 64, 0);      /* k */
    f16s_case(MI_TYPE_Q6_K, 3584, 512, 33, 0);      /* v of the Q6_K layers */
    f16s_case(MI_TYPE_Q4_K, 3584, 18944, 64, 0);    /* gate / up: 148 bands, stream-K on 132 multiprocessors */
    f16s_case(MI_TYPE_Q4_K, 3584, 18944, 24, 0);
    f16s_case(MI_TYPE_Q4_K, 18944, 3584, 64, 0);    /* down: 28 bands, split over K */
    f16s_case(MI_TYPE_Q6_K, 18944, 3584, 64, 0);    /* down of the Q6_K layers */
    f16s_case(MI_TYPE_Q6_K, 18944, 3584, 17, 0);
    f16s_case(MI_TYPE_Q4_K, 256, 16896, 33, 0);     /* one stage a band, 132 bands: whole bands */
    /* stream-K with rows past M and unaligned tensors (134 bands on 132 multiprocessors) */
    f16s_case(MI_TYPE_Q4_K, 1024, 17029, 40, 4);
    f16s_case(MI_TYPE_Q6_K, 1280, 17029, 17, 2);
    /* edges: rows not a band multiple, odd N, tensors past alignment, N at 9 */
    f16s_case(MI_TYPE_Q4_K, 2560, 333, 40, 4);
    f16s_case(MI_TYPE_Q6_K, 3328, 200, 63, 6);
    f16s_case(MI_TYPE_Q6_K, 1280, 130, 9, 2);
    /* b21: from 2 rows (a batch step of 2..8 sequences): the 7B's q/o, gate/up and Q6_K down */
    f16s_case(MI_TYPE_Q4_K, 3584, 3584, 2, 0);
    f16s_case(MI_TYPE_Q4_K, 3584, 18944, 4, 0);
    f16s_case(MI_TYPE_Q6_K, 18944, 3584, 8, 2);
    /* b22's kernel with its block-wide scale pass and window copies (b25 off) as the third run */
    f16s_case_off("b25", MI_TYPE_Q4_K, 3584, 18944, 64, 0);
    f16s_case_off("b25", MI_TYPE_Q6_K, 3328, 200, 63, 6);
    f16s_case_off("b25", MI_TYPE_Q4_K, 1024, 17029, 40, 4);
    /* b28 off (b25's cp.async copies where b28's bulk copies ran): the same bits. The 7B's gate/up
     * (stream-K) and q/o (K split), both downs, Q6_K v at 33 rows, and the edges: rows past M and
     * N of 40 (the copies' zero rows), a tensor 4 bytes past alignment (Q4_K weights by cp.async) */
    f16s_case_off("b28", MI_TYPE_Q4_K, 3584, 18944, 64, 0);
    f16s_case_off("b28", MI_TYPE_Q4_K, 3584, 3584, 64, 0);
    f16s_case_off("b28", MI_TYPE_Q4_K, 18944, 3584, 64, 0);
    f16s_case_off("b28", MI_TYPE_Q6_K, 18944, 3584, 64, 0);
    f16s_case_off("b28", MI_TYPE_Q6_K, 3584, 512, 33, 0);
    f16s_case_off("b28", MI_TYPE_Q4_K, 2560, 333, 40, 0);
    f16s_case_off("b28", MI_TYPE_Q4_K, 1024, 17029, 40, 4);
    f16s_case_off("b28", MI_TYPE_Q6_K, 3328, 200, 63, 6);
    /* b32 off (every stage's products waited for before its barrier): the same bits. The 7B's
     * gate/up (stream-K: pieces ending inside a run), q/o and both downs (K split), Q6_K v at 33
     * rows, rows past M and N of 40, tensors past alignment (b25's copies, b32 on them too) */
    f16s_case_off("b32", MI_TYPE_Q4_K, 3584, 18944, 64, 0);
    f16s_case_off("b32", MI_TYPE_Q4_K, 3584, 3584, 64, 0);
    f16s_case_off("b32", MI_TYPE_Q4_K, 18944, 3584, 64, 0);
    f16s_case_off("b32", MI_TYPE_Q6_K, 18944, 3584, 64, 0);
    f16s_case_off("b32", MI_TYPE_Q6_K, 3584, 512, 33, 0);
    f16s_case_off("b32", MI_TYPE_Q4_K, 2560, 333, 40, 0);
    f16s_case_off("b32", MI_TYPE_Q4_K, 1024, 17029, 40, 4);
    f16s_case_off("b32", MI_TYPE_Q6_K, 3328, 200, 63, 6);
    /* b33 off (a K split's bands summed by the fixup launch, not in the kernel's clusters): the same
     * bits. q/o, both downs and k (the 7B's K splits of 4 and 7 chunks), Q6_K v at 33 rows, rows past
     * M and N of 40 (5 chunks), a Q6_K tensor past alignment; gate/up (stream-K: no cluster sum) */
    f16s_case_off("b33", MI_TYPE_Q4_K, 3584, 3584, 64, 0);
    f16s_case_off("b33", MI_TYPE_Q4_K, 18944, 3584, 64, 0);
    f16s_case_off("b33", MI_TYPE_Q6_K, 18944, 3584, 64, 0);
    f16s_case_off("b33", MI_TYPE_Q4_K, 3584, 512, 64, 0);
    f16s_case_off("b33", MI_TYPE_Q6_K, 3584, 512, 33, 0);
    f16s_case_off("b33", MI_TYPE_Q4_K, 2560, 333, 40, 0);
    f16s_case_off("b33", MI_TYPE_Q6_K, 3328, 200, 63, 6);
    f16s_case_off("b33", MI_TYPE_Q4_K, 3584, 18944, 64, 0);
    /* b39 off (the block-wide barrier a stage, not the slots' empty mbarriers): the same bits.
     * gate/up (stream-K), q/o and the Q4_K down (K splits in clusters), k, rows past M and N of 40;
     * a tensor past alignment (no weight map: b39's kernel keeps the barrier) */
    f16s_case_off("b39", MI_TYPE_Q4_K, 3584, 18944, 64, 0);
    f16s_case_off("b39", MI_TYPE_Q4_K, 3584, 3584, 64, 0);
    f16s_case_off("b39", MI_TYPE_Q4_K, 18944, 3584, 64, 0);
    f16s_case_off("b39", MI_TYPE_Q4_K, 3584, 512, 64, 0);
    f16s_case_off("b39", MI_TYPE_Q4_K, 2560, 333, 40, 0);
    f16s_case_off("b39", MI_TYPE_Q4_K, 1024, 17029, 40, 4);
    /* b11 off (the mma.sync kernel's warps each over half the tokens) */
    f16s_case_off("b11,b22", MI_TYPE_Q4_K, 3584, 18944, 64, 0);
    f16s_case_off("b11,b22", MI_TYPE_Q6_K, 18944, 3584, 17, 0);
    f16s_case_off("b11,b22", MI_TYPE_Q4_K, 1024, 17029, 40, 4);
    /* b40: the 7B's q + k + v (a K split of the run's 36 bands), q + k at 64 rows (32 bands: b48's
     * case) and 33, gate + up (stream-K over 296 bands), rows past a band in every segment at
     * N = 40 (b22's kernel) */
    static const int64_t r_qkv[] = {3584, 512, 512}, r_qk[] = {3584, 512}, r_gu[] = {18944, 18944},
                         r_edge[] = {333, 20, 130};
    plan_clusters_case();
    f16s_run_case(3584, 64, r_qkv, 3, 3);
    f16s_run_case(3584, 64, r_qk, 2, 2);
    f16s_run_case(3584, 33, r_qk, 2, 2);
    /* b49: the 7B's q + k + Q6_K v at 64 rows (36 bands, a K split), rows past a band in each
     * segment at 40, two Q6_K segments after one Q4_K one */
    static const int64_t x_qkv[] = {3584, 512, 512}, x_edge[] = {333, 20, 130}, x_two[] = {640, 200, 130};
    f16s_run_case(3584, 64, x_qkv, 2, 3);
    f16s_run_case(2560, 40, x_edge, 2, 3);
    f16s_run_case(3584, 48, x_two, 1, 3);
    f16s_run_case(3584, 64, r_gu, 2, 2);
    f16s_run_case(2560, 40, r_edge, 3, 3);
    /* the same on b6's mma.sync kernel: 17 and 24 rows (b22 takes 33..64) */
    f16s_run_case(3584, 17, r_qkv, 3, 3);
    f16s_run_case(3584, 24, r_gu, 2, 2);
    f16s_run_case(2560, 17, r_edge, 3, 3);
    gu_begin(&R, "f16s_mm_refused");
    if (mi8b_gemm_f16s_supported(MI_TYPE_Q4_0, 4864, 896, 64) || mi8b_gemm_f16s_supported(MI_TYPE_Q8_0, 4864, 896, 64) ||
        mi8b_gemm_f16s_supported(MI_TYPE_Q4_K, 3584, 512, 1) || mi8b_gemm_f16s_supported(MI_TYPE_Q4_K, 3584, 512, 65))
        gu_fail(&R, "took Q4_0, Q8_0, N = 1 or N = 65");
    else
        gu_pass(&R, "Q4_0, Q8_0, N = 1 and N = 65 refused");
    /* b12: the 0.5B's q / o, k / v, gate / up at K = 896; rows past a band, an unaligned tensor,
     * the largest K, one unit a part (K = 256 over 8 parts) */
    small_case(896, 896, 64, 0);
    small_case(896, 896, 17, 0);
    small_case(896, 128, 64, 0);
    small_case(896, 4864, 64, 0);
    small_case(896, 4864, 33, 0);
    small_case(896, 130, 9, 2);
    small_case(1024, 333, 40, 4);
    small_case(256, 2100, 24, 0);
    small_case(32, 20, 9, 0);
    small_case(896, 896, 2, 0);      /* b21: from 2 rows */
    small_case(896, 4864, 5, 2);
    /* b16: Q8_0, the 0.5B's output head at 64 and 16 rows, q/o, edges */
    small_case_t(MI_TYPE_Q8_0, 896, 151936, 64, 0);
    small_case_t(MI_TYPE_Q8_0, 896, 151936, 16, 0);
    small_case_t(MI_TYPE_Q8_0, 896, 896, 33, 0);
    small_case_t(MI_TYPE_Q8_0, 1024, 333, 40, 2);
    small_case_t(MI_TYPE_Q8_0, 32, 20, 9, 0);
    /* more bands than multiprocessors: a block takes band after band */
    small_case(896, 9728, 64, 0);
    small_case(1024, 9000, 40, 2);
    /* b13: the 0.5B's q, k, v and gate, up as runs; four matmuls of edge shapes */
    static const int64_t qkv[] = {896, 128, 128}, gu[] = {4864, 4864}, edge[] = {333, 20, 130, 2100};
    run_case(896, 64, qkv, 3, 0);
    run_case(896, 17, qkv, 3, 0);
    run_case(896, 64, gu, 2, 0);
    run_case(896, 33, gu, 2, 0);
    run_case(1024, 40, edge, 4, 2);
    /* b24: the norm folded into x's f16 copy: q + k + v at 64 and 9 rows, gate + up at 33 */
    run_norm_case(896, 64, qkv, 3);
    run_norm_case(896, 9, qkv, 3);
    run_norm_case(896, 33, gu, 2);
    /* b15: the 0.5B's down (K = 4864), the 1.5B's (8960), K just past 1024, a short last slice */
    ksplit_case(4864, 896, 64, 0);
    ksplit_case(4864, 896, 17, 0);
    ksplit_case(4864, 896, 33, 2);
    ksplit_case(8960, 1536, 64, 0);
    ksplit_case(1056, 333, 40, 4);
    ksplit_case(2080, 130, 9, 2);
    gu_begin(&R, "ksplit_mm_refused");
    if (mi8b_gemm_f16_ksplit_supported(MI_TYPE_Q4_0, 1024, 896, 64) || mi8b_gemm_f16_ksplit_supported(MI_TYPE_Q4_K, 4864, 896, 64) ||
        mi8b_gemm_f16_ksplit_supported(MI_TYPE_Q4_0, 4864, 896, 1) || mi8b_gemm_f16_ksplit_supported(MI_TYPE_Q4_0, 4880, 896, 64) ||
        mi8b_gemm_f16_ksplit_supported(MI_TYPE_Q4_0, MI8B_KSPLIT_MAX_K + 32, 896, 64))
        gu_fail(&R, "took K = 1024, Q4_K, N = 1, K = 4880 or K past its limit");
    else
        gu_pass(&R, "K = 1024, Q4_K, N = 1, K = 4880 and K past its limit refused");
    gu_begin(&R, "small_mm_refused");
    if (mi8b_gemm_f16_small_supported(MI_TYPE_Q4_K, 1024, 896, 64) || mi8b_gemm_f16_small_supported(MI_TYPE_Q4_1, 896, 896, 64) || mi8b_gemm_f16_small_supported(MI_TYPE_Q4_0, 1056, 896, 64) ||
        mi8b_gemm_f16_small_supported(MI_TYPE_Q4_0, 896, 896, 1) || mi8b_gemm_f16_small_supported(MI_TYPE_Q4_0, 896, 896, 65) ||
        mi8b_gemm_f16_small_supported(MI_TYPE_Q4_0, 880, 896, 64))
        gu_fail(&R, "took Q4_K, Q4_1, K = 1056, K = 880, N = 1 or N = 65");
    else
        gu_pass(&R, "Q4_K, Q4_1, K = 1056, K = 880, N = 1 and N = 65 refused");
    cudaStreamDestroy(S);
    return gu_finish(&R);
}

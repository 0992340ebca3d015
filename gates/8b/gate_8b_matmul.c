/* gate_8b_matmul: a batch's matmuls of 9..64 rows on the device (phase8b_batch/, docs/PHASE8B.md).
 *  split_mm_*       b1's int8 tile split over K against the CPU (7b's bound), 7e's unsplit kernel
 *                   and itself (bitwise)
 *  stream_mm_*      b3's weight-streaming matmul (b5: `_ring2`, its 2-stage ring) on the 7B's and
 *                   the 0.5B's shapes at 9..64 rows against the CPU, 7e's int8 kernel and itself
 *                   (bitwise); what it refuses
 * Runs at PHASE=8b with the other 8b gates (make gate-8b). */
#include "gates/gate_util.h"
#include "gates/7e/dev7e.h"
#include "phase8b_batch/batch8b.h"
#include "phase7e_perf/perf7e.h"
#include "common/backend/backend.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static gu_run R;
static cudaStream_t S;
static unsigned long long g_seed = 0x8b8b8b8bULL;

/* b1: the split int8 matmul vs the CPU (7b's bound), vs 7e's unsplit kernel (the same unit
 * dots, another float sum over units), and against itself on a second run (bitwise) */
static void split_case(mi_type t, int64_t K, int64_t M, int64_t N) {
    char name[96];
    snprintf(name, sizeof name, "split_mm_%s_K%lld_M%lld_N%lld", mi_type_name(t), (long long)K, (long long)M,
             (long long)N);
    gu_begin(&R, name);
    const int splits = mi8b_gemm_split_count(t, K, M, N);
    if (!mi8b_gemm_split_supported(t, K, M, N)) {
        gu_fail(&R, "refused (%d splits)", splits);
        return;
    }
    size_t wb;
    uint8_t *w = gu_make_weights(&g_seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(&g_seed, (size_t)(K * N), -1.f, 1.f), *bias = gu_rand_f32(&g_seed, (size_t)M, -0.5f, 0.5f);
    const size_t ny = (size_t)(M * N);
    float *ref = malloc(ny * 4), *got = malloc(ny * 4), *got2 = malloc(ny * 4), *old = malloc(ny * 4);
    cpu_matmul(t, w, x, bias, ref, K, M, N);
    void *wbase, *xbase, *bbase;
    void *dw = dev_up_at(w, wb, 0, &wbase);
    float *dx = dev_up_at(x, (size_t)(K * N) * 4, 0, &xbase), *db = dev_up_at(bias, (size_t)M * 4, 0, &bbase);
    const size_t wsa = mi8b_gemm_split_workspace(t, K, M, N), ws7 = mi7e_gemm_int8_workspace(t, K, N);
    void *ws = dev_poison(wsa > ws7 ? wsa : ws7);
    float *dy = dev_poison(ny * 4);
    mi_status st = mi8b_gemm_split(S, t, dw, dx, db, dy, K, M, N, ws);
    if (st == MI_OK) st = dev_read_back(S, got, dy, ny);
    if (st == MI_OK) st = cudaMemset(dy, 0xFF, ny * 4) == cudaSuccess ? MI_OK : mi_err(MI_ERR_DEVICE, "memset");
    if (st == MI_OK) st = mi8b_gemm_split(S, t, dw, dx, db, dy, K, M, N, ws);
    if (st == MI_OK) st = dev_read_back(S, got2, dy, ny);
    if (st == MI_OK) st = mi7e_gemm_int8(S, t, dw, dx, db, dy, K, M, N, ws);
    if (st == MI_OK) st = dev_read_back(S, old, dy, ny);
    if (st != MI_OK) {
        gu_fail(&R, "%s", mi_errmsg());
    } else {
        const double e_cpu = gu_nmse(got, ref, ny), e_old = gu_nmse(got, old, ny);
        const bool rep = memcmp(got, got2, ny * 4) == 0;
        if (!(e_cpu <= 1e-6) || !(e_old <= 1e-6) || !rep) {
            const size_t i = first_bad(got, ref, ny, 1e-3, 1.0);
            if (i != (size_t)-1) printf("    %s: first mismatch index %zu got %.9g want %.9g (7e %.9g)\n", name, i,
                                        got[i], ref[i], old[i]);
            gu_fail(&R, "%d splits: nmse vs cpu %.3g (bound 1e-6), vs 7e's unsplit kernel %.3g, repeat %s", splits, e_cpu,
                    e_old, rep ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(&R, "%d splits: nmse vs cpu %.3g, vs 7e's unsplit kernel %.3g, repeat bitwise", splits, e_cpu, e_old);
        }
    }
    free(w); free(x); free(bias); free(ref); free(got); free(got2); free(old);
    cudaFree(wbase); cudaFree(xbase); cudaFree(bbase); cudaFree(ws); cudaFree(dy);
}

static void test_split_matmul(void) {
    split_case(MI_TYPE_Q4_K, 3584, 3584, 16);    /* the 7B's q/o at 16 sequences */
    split_case(MI_TYPE_Q4_K, 3584, 512, 64);     /* k at 64 */
    split_case(MI_TYPE_Q6_K, 18944, 3584, 33);   /* a Q6_K down, a partial token tile */
    split_case(MI_TYPE_Q4_0, 896, 896, 9);       /* the 0.5B's q/o at the smallest N */
    split_case(MI_TYPE_Q8_0, 4864, 200, 40);     /* rows not a tile multiple */
    split_case(MI_TYPE_Q5_K, 2560, 333, 17);
}

/* b3's weight-streaming matmul (gemm_int8_stream.cu) through a ring of `stages` (3; 2 is b5) on
 * the weight at byte woff of its allocation (rows of Q6_K, Q4_0 and Q8_0 are 2-byte aligned
 * only): against the CPU (NMSE <= 1e-6), against 7e's unsplit int8 kernel, and against itself on
 * a second run (bitwise) */
static void stream_case_ring(mi_type t, int64_t K, int64_t M, int64_t N, size_t woff, int stages) {
    char name[112];
    snprintf(name, sizeof name, "stream_mm_%s_K%lld_M%lld_N%lld%s%s", mi_type_name(t), (long long)K, (long long)M,
             (long long)N, woff ? "_unaligned" : "", stages == 2 ? "_ring2" : "");
    gu_begin(&R, name);
    if (!mi8b_gemm_stream_supported(t, K, M, N, stages)) {
        gu_fail(&R, "refused");
        return;
    }
    const int splits = mi8b_gemm_stream_splits(t, K, M, N, stages);
    size_t wb;
    uint8_t *w = gu_make_weights(&g_seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(&g_seed, (size_t)(K * N), -1.f, 1.f), *bias = gu_rand_f32(&g_seed, (size_t)M, -0.5f, 0.5f);
    const size_t ny = (size_t)(M * N);
    float *ref = malloc(ny * 4), *got = malloc(ny * 4), *got2 = malloc(ny * 4), *old = malloc(ny * 4);
    cpu_matmul_par(t, w, x, bias, ref, K, M, N);
    void *wbase, *xbase, *bbase;
    void *dw = dev_up_at(w, wb, woff, &wbase);
    float *dx = dev_up_at(x, (size_t)(K * N) * 4, 0, &xbase), *db = dev_up_at(bias, (size_t)M * 4, 0, &bbase);
    const size_t wsa = mi8b_gemm_stream_workspace(t, K, M, N, stages), ws7 = mi7e_gemm_int8_workspace(t, K, N);
    void *ws = dev_poison(wsa > ws7 ? wsa : ws7);
    float *dy = dev_poison(ny * 4);
    mi_status st = mi8b_gemm_stream(S, t, dw, dx, db, dy, K, M, N, stages, ws);
    if (st == MI_OK) st = dev_read_back(S, got, dy, ny);
    if (st == MI_OK) st = cudaMemset(dy, 0xFF, ny * 4) == cudaSuccess ? MI_OK : mi_err(MI_ERR_DEVICE, "memset");
    if (st == MI_OK) st = mi8b_gemm_stream(S, t, dw, dx, db, dy, K, M, N, stages, ws);
    if (st == MI_OK) st = dev_read_back(S, got2, dy, ny);
    if (st == MI_OK) st = mi7e_gemm_int8(S, t, dw, dx, db, dy, K, M, N, ws);
    if (st == MI_OK) st = dev_read_back(S, old, dy, ny);
    if (st != MI_OK) {
        gu_fail(&R, "%s", mi_errmsg());
    } else {
        const double e_cpu = gu_nmse(got, ref, ny), e_old = gu_nmse(got, old, ny);
        const bool rep = memcmp(got, got2, ny * 4) == 0;
        if (!(e_cpu <= 1e-6) || !(e_old <= 1e-6) || !rep) {
            const size_t i = first_bad(got, ref, ny, 1e-3, 1.0);
            if (i != (size_t)-1) printf("    %s: first mismatch index %zu (token %zu, row %zu) got %.9g want %.9g (7e %.9g)\n",
                                        name, i, i / (size_t)M, i % (size_t)M, got[i], ref[i], old[i]);
            gu_fail(&R, "%d splits: nmse vs cpu %.3g (bound 1e-6), vs 7e's int8 kernel %.3g, repeat %s", splits, e_cpu,
                    e_old, rep ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(&R, "%d splits: nmse vs cpu %.3g, vs 7e's int8 kernel %.3g, repeat bitwise", splits, e_cpu, e_old);
        }
    }
    free(w); free(x); free(bias); free(ref); free(got); free(got2); free(old);
    cudaFree(wbase); cudaFree(xbase); cudaFree(bbase); cudaFree(ws); cudaFree(dy);
}

static void stream_case(mi_type t, int64_t K, int64_t M, int64_t N, size_t woff) {
    stream_case_ring(t, K, M, N, woff, 3);
}

static void test_stream_matmul(void) {
    static const int64_t ns[] = {9, 16, 33, 64};
    for (int i = 0; i < 4; i++) {
        stream_case(MI_TYPE_Q4_K, 3584, 3584, ns[i], 0);   /* the 7B's q / o */
        stream_case(MI_TYPE_Q4_K, 3584, 512, ns[i], 0);    /* k / v */
        stream_case(MI_TYPE_Q6_K, 3584, 512, ns[i], 0);    /* v of the Q6_K layers */
    }
    static const int64_t big[] = {16, 64};
    for (int i = 0; i < 2; i++) {
        stream_case(MI_TYPE_Q4_K, 3584, 18944, big[i], 0);   /* gate / up */
        stream_case(MI_TYPE_Q4_K, 18944, 3584, big[i], 0);   /* down */
        stream_case(MI_TYPE_Q6_K, 18944, 3584, big[i], 0);   /* down of the Q6_K layers */
    }
    stream_case(MI_TYPE_Q6_K, 18944, 3584, 33, 0);
    stream_case(MI_TYPE_Q6_K, 3584, 152064, 9, 0);    /* the output head */
    /* edges: rows not a band multiple, odd N, tensors 2 or 4 bytes past alignment, partial stages */
    stream_case(MI_TYPE_Q4_K, 2560, 333, 17, 4);
    stream_case(MI_TYPE_Q6_K, 3328, 200, 63, 6);       /* 13 super-blocks of 210 bytes: rows 2-byte aligned */
    stream_case(MI_TYPE_Q4_0, 896, 896, 9, 0);         /* the 0.5B's q / o */
    stream_case(MI_TYPE_Q4_0, 896, 4864, 64, 2);       /* 0.5B gate / up: 28 units, a half stage last */
    stream_case(MI_TYPE_Q4_0, 4864, 896, 40, 0);       /* 0.5B down: 152 units */
    stream_case(MI_TYPE_Q8_0, 4864, 200, 40, 10);
    stream_case(MI_TYPE_Q8_0, 896, 129, 12, 0);
    stream_case(MI_TYPE_Q8_0, 896, 151936, 64, 0);     /* the 0.5B's output head at 64 rows (b10) */
    stream_case(MI_TYPE_Q8_0, 896, 151936, 16, 0);
    /* b5: the 2-stage ring at 33..64 rows where two blocks fit a multiprocessor (Q4_K, Q4_0), a
     * tensor past alignment, a partial stage */
    stream_case_ring(MI_TYPE_Q4_K, 3584, 18944, 64, 0, 2);   /* gate / up */
    stream_case_ring(MI_TYPE_Q4_K, 3584, 3584, 33, 0, 2);    /* q / o, split over K */
    stream_case_ring(MI_TYPE_Q4_K, 18944, 3584, 64, 0, 2);   /* down */
    stream_case_ring(MI_TYPE_Q4_K, 2560, 333, 63, 4, 2);    /* 10 super-blocks, rows past the band */
    stream_case_ring(MI_TYPE_Q4_0, 4864, 896, 40, 2, 2);
    stream_case_ring(MI_TYPE_Q4_0, 2336, 129, 64, 10, 2);   /* 73 units: a partial last stage */
    /* what b3 leaves to the others */
    gu_begin(&R, "stream_mm_refused");
    if (mi8b_gemm_stream_supported(MI_TYPE_Q5_K, 2560, 333, 17, 3) ||
        mi8b_gemm_stream_supported(MI_TYPE_Q4_K, 3584, 512, 8, 3) ||
        mi8b_gemm_stream_supported(MI_TYPE_Q4_K, 3584, 512, 65, 3) ||
        mi8b_gemm_stream_supported(MI_TYPE_Q4_K, 3000, 512, 16, 3) ||
        mi8b_gemm_stream_supported(MI_TYPE_Q4_K, 3584, 512, 32, 2) || mi8b_gemm_stream_supported(MI_TYPE_Q4_K, 3584, 512, 16, 4))
        gu_fail(&R, "took Q5_K, N = 8, N = 65, K = 3000, a 2-stage ring at 32 rows or a 4-stage ring");
    else
        gu_pass(&R, "Q5_K, N = 8, N = 65, K = 3000 (not whole super-blocks), a 2-stage ring at 32 rows and a 4-stage "
                    "ring refused");
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    gu_init(&R, "gate-8b-matmul", "8b");
    mi_phases_install();
    if (!dev_gate_start(&R, "gate_8b_matmul", &S)) return gu_finish(&R);
    test_split_matmul();
    test_stream_matmul();
    cudaStreamDestroy(S);
    return gu_finish(&R);
}

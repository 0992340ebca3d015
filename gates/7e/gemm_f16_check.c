/* Device check of the f16 tensor-core prefill matmul (phase7e_perf/gemm_f16.cu, item e13; its
 * wgmma form, item e15) for gate_7e: against the EXACT product (f64 dot of the CPU-dequantized
 * weight row and the f32 activations; these kernels do not quantize x to Q8 as the CPU does):
 * NMSE <= MI7E_GEMM_F16_NMSE, no NaN (output and workspace poisoned first), repeat bitwise, for
 * the default choices and the forced tile / depth / warps options; activation rows past f16's
 * range, in its subnormal range and all zero; several weight chunks equal to one; refusals; and
 * timings against the int8 kernel (e7) on the 7B shapes (a measurement). */
#include <stddef.h>
#include "gates/7e/gemm_f16_check.h"
#include "gates/7e/dev7e.h"
#include "gates/7e/gemm_f16_variants.h"
#include "common/core/mi_err.h"
#include "common/core/mi_fp16.h"
#include "common/quant/mi_types.h"
#include "phase7e_perf/perf7e.h"
#include "phase7e_perf/gemm_f16.h"

/* What the cases share: the run record, the stream, this check's own seeded data stream */
typedef struct {
    gu_run *R;
    cudaStream_t S;
    unsigned long long seed;
} gf_ctx;

/* The reference: y[n*M+m] = sum_k deq(W)[m, k] * x[n*K+k] in f64 (+ bias[m]), the weights
 * dequantized by common/quant's scalar code, x as given (no f16, no Q8). */
static void gf_exact(mi_type t, const uint8_t *w, const float *x, const float *bias, float *y, int64_t K, int64_t M,
                      int64_t N) {
    const size_t rb = mi_row_size(t, K);
    float *wd = (float *)malloc((size_t)K * (size_t)M * 4);
    if (!wd) { fprintf(stderr, "gemm_f16_check: out of memory\n"); exit(2); }
    for (int64_t m = 0; m < M; m++) mi_dequantize_row(t, w + rb * (size_t)m, wd + (size_t)m * (size_t)K, K);
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            const float *a = wd + (size_t)m * (size_t)K, *b = x + (size_t)n * (size_t)K;
            double s = bias ? (double)bias[m] : 0.0;
            for (int64_t k = 0; k < K; k++) s += (double)a[k] * (double)b[k];
            y[(size_t)n * (size_t)M + (size_t)m] = (float)s;
        }
    free(wd);
}

static size_t gf_nonfinite(const float *v, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += !isfinite(v[i]);
    return c;
}

/* Print the first (up to 4) outputs off by more than 1% of the reference's rms (NaN included)
 * as index got want, or the largest difference when none stands out; and the first output
 * where a repeat run differs (rep may be NULL). */
static void gf_print_bad(const char *name, const float *got, const float *want, const float *rep, size_t n,
                          int64_t M) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)want[i] * want[i];
    const double tol = 1e-2 * sqrt(ss / (double)(n ? n : 1));
    int shown = 0;
    size_t worst = 0;
    double wd = -1;
    printf("    %s: first mismatches (index [token, row] got want):", name);
    for (size_t i = 0; i < n && shown < 4; i++) {
        const double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= tol)) {
            printf(" %zu [%zu, %zu] %.9g %.9g;", i, i / (size_t)M, i % (size_t)M, got[i], want[i]);
            shown++;
        }
        if (d > wd) { wd = d; worst = i; }
    }
    if (!shown) printf(" none past 1%% of rms; largest at %zu got %.9g want %.9g", worst, got[worst], want[worst]);
    printf("\n");
    if (rep) {
        const size_t b = gu_first_diff(got, rep, n * 4);
        if (b != (size_t)-1)
            printf("    %s: repeat differs first at index %zu: %.9g then %.9g\n", name, b / 4, got[b / 4], rep[b / 4]);
    }
}

/* One call into dy (re-poisoned first) with a fresh NaN-poisoned workspace: the mma.sync kernel
 * with options o (NULL: the defaults), or the wgmma kernel (wg); the result copied to out. */
static mi_status gf_run(cudaStream_t S, mi_type t, const void *dw, const float *dx, const float *db, float *dy,
                        int64_t K, int64_t M, int64_t N, float *out, const gate_gemm_f16_opts *o, bool wg) {
    const size_t ny = (size_t)M * (size_t)N, wsb = mi7e_gemm_f16_workspace(t, K, M, N);
    void *ws = NULL;
    CK(cudaMalloc(&ws, wsb ? wsb : 1));
    CK(cudaMemset(ws, 0xFF, wsb ? wsb : 1));   /* f16 NaN: a read of an unwritten workspace shows */
    CK(cudaMemset(dy, 0xFF, ny * 4));
    mi_status st = wg ? mi7e_gemm_f16_wgmma(S, t, dw, dx, db, dy, K, M, N, ws)
                      : gate_gemm_f16_run(S, t, dw, dx, db, dy, K, M, N, ws, o);
    if (st == MI_OK) dev_down_on(S, out, dy, ny * 4);
    CK(cudaStreamSynchronize(S));
    cudaFree(ws);
    return st;
}

/* 1: one type and shape: NMSE vs exact, no NaN, repeat bitwise; the CPU's NMSE for context.
 * o: the mma.sync kernel's options (NULL: the defaults; 64-token tiles at these sizes), named
 * by suffix (_t128, _k32, _w4 / _w8); wg: the wgmma kernel instead (_wg, e15). */
static void gf_case(gf_ctx *c, mi_type t, int64_t K, int64_t M, int64_t N, bool with_bias,
                    const gate_gemm_f16_opts *o, bool wg) {
    gu_run *R = c->R;
    cudaStream_t S = c->S;
    char name[96];
    const gate_gemm_f16_opts d0 = {0, 0, 0, 0}, *op = o ? o : &d0;
    snprintf(name, sizeof name, "e13_%s_K%lld_M%lld_N%lld%s%s%s%s%s", mi_type_name(t), (long long)K, (long long)M,
             (long long)N, with_bias ? "_bias" : "", op->tile == 128 ? "_t128" : "",
             op->depth == 32 ? "_k32" : "", op->warps == 4 ? "_w4" : op->warps == 8 ? "_w8" : "", wg ? "_wg" : "");
    if (!gu_selected(name)) return;
    gu_begin(R, name);
    if (wg ? !mi7e_gemm_f16_wgmma_supported(t, K, M, N) : !mi7e_gemm_f16_supported(t, K, M, N)) {
        gu_fail(R, "supported() refuses a shape it is meant to cover");
        return;
    }
    size_t wb = 0;
    uint8_t *w = (uint8_t *)gu_make_weights(&c->seed, t, K, M, 1.0f, &wb);
    const size_t nx = (size_t)K * (size_t)N, ny = (size_t)M * (size_t)N;
    float *x = gu_rand_f32(&c->seed, nx, -1.f, 1.f), *bias = gu_rand_f32(&c->seed, (size_t)M, -0.5f, 0.5f);
    const float *hb = with_bias ? bias : NULL;
    float *ref = (float *)malloc(ny * 4), *cpu = (float *)malloc(ny * 4), *got = (float *)malloc(ny * 4),
          *got2 = (float *)malloc(ny * 4);
    gf_exact(t, w, x, hb, ref, K, M, N);
    cpu_matmul(t, w, x, hb, cpu, K, M, N);
    void *b1, *b2, *b3;
    void *dw = dev_up_at(w, wb, 0, &b1);
    float *dx = (float *)dev_up_at(x, nx * 4, 0, &b2), *db = (float *)dev_up_at(bias, (size_t)M * 4, 0, &b3);
    float *dy = (float *)dev_poison(ny * 4);
    mi_status st = gf_run(S, t, dw, dx, with_bias ? db : NULL, dy, K, M, N, got, o, wg);
    if (st == MI_OK) st = gf_run(S, t, dw, dx, with_bias ? db : NULL, dy, K, M, N, got2, o, wg);
    if (st != MI_OK) {
        gu_fail(R, "launch: %s", mi_errmsg());
    } else {
        const double e = gu_nmse(got, ref, ny), e_cpu = gu_nmse(cpu, ref, ny);
        const size_t bad = gf_nonfinite(got, ny) + gf_nonfinite(got2, ny);
        const bool rep = memcmp(got, got2, ny * 4) == 0;
        if (!(e <= MI7E_GEMM_F16_NMSE) || bad || !rep) {
            gf_print_bad(name, got, ref, got2, ny, M);
            gu_fail(R, "nmse vs exact %.3g (bound %.0e), cpu's %.3g; %zu non-finite outputs (two runs); repeat %s", e,
                    MI7E_GEMM_F16_NMSE, e_cpu, bad, rep ? "bitwise" : "DIFFERS");
        } else {
            gu_pass(R, "nmse vs exact %.3g (bound %.0e), cpu backend's (Q8 x) %.3g; repeat bitwise", e,
                    MI7E_GEMM_F16_NMSE, e_cpu);
        }
    }
    free(w); free(x); free(bias); free(ref); free(cpu); free(got); free(got2);
    cudaFree(b1); cudaFree(b2); cudaFree(b3); cudaFree(dy);
}

/* 2: token rows of max |x| 1e5 (past f16's 65504), 1e-6 (f16 subnormal range) and all zero,
 * with and without bias: each row within the bound; the zero row exactly bias, or 0 */
static void gf_scale(gf_ctx *c) {
    gu_run *R = c->R;
    cudaStream_t S = c->S;
    const char *name = "e13_scale_rows_Q4_K_K512_M64_N3";
    if (!gu_selected(name)) return;
    gu_begin(R, name);
    const mi_type t = MI_TYPE_Q4_K;
    const int64_t K = 512, M = 64, N = 3;
    const size_t nx = (size_t)(K * N), ny = (size_t)(M * N);
    size_t wb = 0;
    uint8_t *w = (uint8_t *)gu_make_weights(&c->seed, t, K, M, 1.0f, &wb);
    float *x = (float *)calloc(nx, 4), *bias = gu_rand_f32(&c->seed, (size_t)M, -0.5f, 0.5f);
    for (int64_t k = 0; k < K; k++) {
        x[k] = gu_frand(&c->seed, -1e5f, 1e5f);
        x[K + k] = gu_frand(&c->seed, -1e-6f, 1e-6f);
    }
    x[5] = 1e5f;          /* the row maxima exactly */
    x[K + 9] = -1e-6f;
    float *ref[2], *cpu[2], *got[2];
    void *b1, *b2, *b3;
    void *dw = dev_up_at(w, wb, 0, &b1);
    float *dx = (float *)dev_up_at(x, nx * 4, 0, &b2), *db = (float *)dev_up_at(bias, (size_t)M * 4, 0, &b3);
    float *dy = (float *)dev_poison(ny * 4);
    mi_status st = MI_OK;
    for (int b = 0; b < 2; b++) {   /* 0: with bias, 1: without */
        ref[b] = (float *)malloc(ny * 4); cpu[b] = (float *)malloc(ny * 4); got[b] = (float *)malloc(ny * 4);
        gf_exact(t, w, x, b ? NULL : bias, ref[b], K, M, N);
        cpu_matmul(t, w, x, b ? NULL : bias, cpu[b], K, M, N);
        if (st == MI_OK) st = gf_run(S, t, dw, dx, b ? NULL : db, dy, K, M, N, got[b], NULL, false);
    }
    if (st != MI_OK) {
        gu_fail(R, "launch: %s", mi_errmsg());
    } else {
        double e[2][2], ec[2][2];
        size_t zero_bad = 0, nonfin = 0;
        int zb_b = 0;
        int64_t zb_m = 0;
        bool ok = true;
        for (int b = 0; b < 2; b++) {
            nonfin += gf_nonfinite(got[b], ny);
            for (int n = 0; n < 2; n++) {
                e[b][n] = gu_nmse(got[b] + n * M, ref[b] + n * M, (size_t)M);
                ec[b][n] = gu_nmse(cpu[b] + n * M, ref[b] + n * M, (size_t)M);
                if (!(e[b][n] <= MI7E_GEMM_F16_NMSE)) ok = false;
            }
            for (int64_t m = 0; m < M; m++) {   /* token 2: all zero */
                const float want = b ? 0.0f : bias[m];
                if (got[b][2 * M + m] != want) {
                    if (!zero_bad) { zb_b = b; zb_m = m; }
                    zero_bad++;
                }
            }
        }
        if (!ok || zero_bad || nonfin) {
            for (int b = 0; b < 2; b++) gf_print_bad(b ? "e13_scale (no bias)" : "e13_scale (bias)", got[b], ref[b],
                                                      NULL, ny, M);
            if (zero_bad)
                printf("    %s: all-zero token, %s: first mismatch index %lld got %.9g want %.9g\n", name,
                       zb_b ? "no bias" : "bias", (long long)(2 * M + zb_m), got[zb_b][2 * M + zb_m],
                       zb_b ? 0.0f : bias[zb_m]);
            gu_fail(R, "nmse vs exact, bias/no bias: max|x| 1e5 rows %.3g / %.3g, 1e-6 rows %.3g / %.3g (bound %.0e); "
                    "zero row: %zu outputs not exactly bias (0); %zu non-finite", e[0][0], e[1][0], e[0][1], e[1][1],
                    MI7E_GEMM_F16_NMSE, zero_bad, nonfin);
        } else {
            gu_pass(R, "nmse vs exact, bias/no bias: max|x| 1e5 row %.3g / %.3g, 1e-6 row %.3g / %.3g (cpu's %.3g / "
                    "%.3g, %.3g / %.3g); all-zero row exactly bias / 0", e[0][0], e[1][0], e[0][1], e[1][1],
                    ec[0][0], ec[1][0], ec[0][1], ec[1][1]);
        }
    }
    for (int b = 0; b < 2; b++) { free(ref[b]); free(cpu[b]); free(got[b]); }
    free(w); free(x); free(bias);
    cudaFree(b1); cudaFree(b2); cudaFree(b3); cudaFree(dy);
}

/* 3: weight chunks of 128 rows, 200 rows' worth and one row's worth (the one-tile floor) give
 * the single-chunk result bit for bit (gate_gemm_f16_opts.chunk) */
static void gf_chunks(gf_ctx *c) {
    gu_run *R = c->R;
    cudaStream_t S = c->S;
    const char *name = "e13_chunks_Q4_K_K512_M1000_N70_bias";
    if (!gu_selected(name)) return;
    gu_begin(R, name);
    const mi_type t = MI_TYPE_Q4_K;
    const int64_t K = 512, M = 1000, N = 70;
    const size_t nx = (size_t)(K * N), ny = (size_t)(M * N);
    const size_t chunks[3] = {(size_t)128 * (size_t)K * 2, (size_t)200 * (size_t)K * 2, 1};
    size_t wb = 0;
    uint8_t *w = (uint8_t *)gu_make_weights(&c->seed, t, K, M, 1.0f, &wb);
    float *x = gu_rand_f32(&c->seed, nx, -1.f, 1.f), *bias = gu_rand_f32(&c->seed, (size_t)M, -0.5f, 0.5f);
    float *ref = (float *)malloc(ny * 4), *one = (float *)malloc(ny * 4), *got = (float *)malloc(ny * 4);
    gf_exact(t, w, x, bias, ref, K, M, N);
    void *b1, *b2, *b3;
    void *dw = dev_up_at(w, wb, 0, &b1);
    float *dx = (float *)dev_up_at(x, nx * 4, 0, &b2), *db = (float *)dev_up_at(bias, (size_t)M * 4, 0, &b3);
    float *dy = (float *)dev_poison(ny * 4);
    mi_status st = gf_run(S, t, dw, dx, db, dy, K, M, N, one, NULL, false);
    int differs = -1;
    size_t nonfin = st == MI_OK ? gf_nonfinite(one, ny) : 0;
    for (int c = 0; c < 3 && st == MI_OK; c++) {
        const gate_gemm_f16_opts o = {0, 0, 0, chunks[c]};
        st = gf_run(S, t, dw, dx, db, dy, K, M, N, got, &o, false);
        if (st == MI_OK && differs < 0 && memcmp(got, one, ny * 4)) {
            differs = c;
            gf_print_bad(name, got, one, NULL, ny, M);
        }
    }
    if (st != MI_OK) {
        gu_fail(R, "launch: %s", mi_errmsg());
    } else {
        const double e = gu_nmse(one, ref, ny);
        if (!(e <= MI7E_GEMM_F16_NMSE) || nonfin || differs >= 0) {
            if (!(e <= MI7E_GEMM_F16_NMSE) || nonfin) gf_print_bad(name, one, ref, NULL, ny, M);
            gu_fail(R, "single chunk nmse vs exact %.3g (bound %.0e), %zu non-finite; chunked runs %s%zu bytes", e,
                    MI7E_GEMM_F16_NMSE, nonfin, differs >= 0 ? "DIFFER from one chunk at chunk " : "bitwise equal, last ",
                    differs >= 0 ? chunks[differs] : chunks[2]);
        } else {
            gu_pass(R, "chunks of 128 rows, 200 rows, 1 byte (one-tile floor) bit-identical to one chunk; nmse vs "
                    "exact %.3g", e);
        }
    }
    free(w); free(x); free(bias); free(ref); free(one); free(got);
    cudaFree(b1); cudaFree(b2); cudaFree(b3); cudaFree(dy);
}

/* 4: shapes and types e13 must refuse: supported() false, the call MI_ERR_UNSUPPORTED with
 * nothing written */
static void gf_refusals(gf_ctx *c) {
    gu_run *R = c->R;
    cudaStream_t S = c->S;
    const char *name = "e13_refusals";
    if (!gu_selected(name)) return;
    gu_begin(R, name);
    static const struct { mi_type t; int64_t K, M, N; const char *what; } bad[] = {
        {MI_TYPE_Q4_0, 300, 64, 4, "Q4_0 K=300"}, {MI_TYPE_F16, 300, 64, 4, "F16 K=300"},
        {MI_TYPE_Q4_K, 256, 64, 0, "N=0"},        {MI_TYPE_Q4_K, 256, 0, 4, "M=0"},
        {MI_TYPE_F32, 256, 64, 4, "F32"},         {MI_TYPE_BF16, 256, 64, 4, "BF16"},
        {MI_TYPE_Q2_K, 256, 64, 4, "Q2_K"},
    };
    const int nb = (int)(sizeof bad / sizeof bad[0]);
    const size_t big = (size_t)1 << 20, ny = 64 * 4;
    void *dw = NULL, *ws = NULL;
    float *dx = NULL, *db = NULL;
    CK(cudaMalloc(&dw, big));
    CK(cudaMemset(dw, 0, big));
    CK(cudaMalloc((void **)&dx, big));
    CK(cudaMemset(dx, 0, big));
    CK(cudaMalloc((void **)&db, big));
    CK(cudaMemset(db, 0, big));
    CK(cudaMalloc(&ws, 16 * big));
    float *dy = (float *)dev_poison(ny * 4);
    uint32_t *hy = (uint32_t *)malloc(ny * 4);
    char why[200] = "";
    for (int i = 0; i < nb && !why[0]; i++) {
        if (mi7e_gemm_f16_supported(bad[i].t, bad[i].K, bad[i].M, bad[i].N)) {
            snprintf(why, sizeof why, "supported() accepts %s", bad[i].what);
            break;
        }
        const mi_status st = mi7e_gemm_f16(S, bad[i].t, dw, dx, db, dy, bad[i].K, bad[i].M, bad[i].N, ws);
        mi_err_clear();
        CK(cudaStreamSynchronize(S));
        CK(cudaGetLastError());
        CK(cudaMemcpy(hy, dy, ny * 4, cudaMemcpyDeviceToHost));
        size_t written = 0;
        for (size_t k = 0; k < ny; k++) written += hy[k] != 0xFFFFFFFFu;
        if (st != MI_ERR_UNSUPPORTED)
            snprintf(why, sizeof why, "mi7e_gemm_f16 returned %d, not MI_ERR_UNSUPPORTED (%d), for %s", (int)st,
                     (int)MI_ERR_UNSUPPORTED, bad[i].what);
        else if (written)
            snprintf(why, sizeof why, "refused %s but wrote %zu outputs", bad[i].what, written);
    }
    if (why[0]) gu_fail(R, "%s", why);
    else gu_pass(R, "%d cases refused (Q4_0/F16 K=300, N=0, M=0, F32, BF16, Q2_K): supported() false, "
                 "MI_ERR_UNSUPPORTED, output untouched", nb);
    free(hy);
    cudaFree(dw); cudaFree(dx); cudaFree(db); cudaFree(ws); cudaFree(dy);
}

/* Timing weights: M rows of random Q4_K / Q6_K super-blocks (all quant and 6-bit scale bit
 * patterns), their f16 scales overwritten with small finite values so no product overflows.
 * Quantizing the 7B shapes' floats on the CPU would take the gate minutes. */
static uint8_t *gf_random_superblocks(unsigned long long *seed, mi_type t, int64_t K, int64_t M, size_t *bytes) {
    const size_t n = mi_row_size(t, K) * (size_t)M;
    const bool q4 = t == MI_TYPE_Q4_K;
    const size_t bs = q4 ? sizeof(mi_block_q4_k) : sizeof(mi_block_q6_k);
    uint8_t *w = (uint8_t *)malloc(n);
    if (!w) { fprintf(stderr, "gemm_f16_check: out of memory\n"); exit(2); }
    gu_fill(w, n, gu_rng(seed));
    for (size_t off = 0; off < n; off += bs) {
        if (q4) {
            mi_block_q4_k *b = (mi_block_q4_k *)(w + off);
            b->d = mi_f32_to_f16(gu_frand(seed, 1e-3f, 1e-2f));
            b->dmin = mi_f32_to_f16(gu_frand(seed, 0.0f, 1e-2f));
        } else {
            const uint16_t d = mi_f32_to_f16(gu_frand(seed, -1e-2f, 1e-2f));
            memcpy(w + off + offsetof(mi_block_q6_k, d), &d, 2);   /* d sits at 208: unaligned */
        }
    }
    *bytes = n;
    return w;
}

/* the timed call: which 0 the mma.sync kernel with options o, 1 the int8 kernel (e7), 2 wgmma (e15) */
typedef struct {
    int which;
    mi_type t;
    const void *w;
    const float *x;
    float *y;
    int64_t K, M, N;
    void *ws;
    const gate_gemm_f16_opts *o;
} gf_args;
static mi_status gf_call(cudaStream_t S, const void *p) {
    const gf_args *a = (const gf_args *)p;
    if (a->which == 1) return mi7e_gemm_int8(S, a->t, a->w, a->x, NULL, a->y, a->K, a->M, a->N, a->ws);
    if (a->which == 2) return mi7e_gemm_f16_wgmma(S, a->t, a->w, a->x, NULL, a->y, a->K, a->M, a->N, a->ws);
    return gate_gemm_f16_run(S, a->t, a->w, a->x, NULL, a->y, a->K, a->M, a->N, a->ws, a->o);
}

/* median ms of 5 timed calls after one warm-up; < 0 on an error */
static float gf_time(cudaStream_t S, int which, const gate_gemm_f16_opts *o, mi_type t, const void *w,
                     const float *x, float *y, int64_t K, int64_t M, int64_t N, void *ws) {
    const gf_args a = {which, t, w, x, y, K, M, N, ws, o};
    mi_status st;
    return dev_time_median(S, 1, 5, gf_call, &a, &st);
}

/* 5: e13 (default, depth 32, 4 and 8 warps), e15 and e7 on one 7B shape; x: K*N floats on the
 * device (shared by every shape). A measurement: fails only when a call errors or a variant's
 * bits differ from the default's. */
static void gf_timing(gf_ctx *c, const char *what, mi_type t, int64_t K, int64_t M, int64_t N, const float *dx) {
    gu_run *R = c->R;
    cudaStream_t S = c->S;
    char name[128];
    snprintf(name, sizeof name, "e13_time_%s_%s_K%lld_M%lld_N%lld", what, mi_type_name(t), (long long)K,
             (long long)M, (long long)N);
    if (!gu_selected(name)) return;
    gu_begin(R, name);
    if (!mi7e_gemm_f16_supported(t, K, M, N) || !mi7e_gemm_int8_supported(t, K, N)) {
        gu_fail(R, "refused: e13 %s, e7 %s", mi7e_gemm_f16_supported(t, K, M, N) ? "takes it" : "REFUSES",
                mi7e_gemm_int8_supported(t, K, N) ? "takes it" : "REFUSES");
        return;
    }
    size_t wb = 0;
    uint8_t *w = gf_random_superblocks(&c->seed, t, K, M, &wb);
    void *b1;
    void *dw = dev_up_at(w, wb, 0, &b1);
    free(w);
    size_t wsb = mi7e_gemm_f16_workspace(t, K, M, N), w7 = mi7e_gemm_int8_workspace(t, K, N);
    if (w7 > wsb) wsb = w7;
    void *ws = NULL;
    CK(cudaMalloc(&ws, wsb));
    const size_t ny = (size_t)M * (size_t)N;
    float *dy13 = (float *)dev_poison(ny * 4), *dy7 = (float *)dev_poison(ny * 4);
    const float t13 = gf_time(S, 0, NULL, t, dw, dx, dy13, K, M, N, ws);
    /* the other options (k depth 32 with 4 stages; 4 warps of 64 x tile/2, 8 of 64 x tile/4): the
     * same k16 steps in the same order per output, so each must equal the default bit for bit */
    static const gate_gemm_f16_opts vo[3] = {{0, 32, 0, 0}, {0, 0, 4, 0}, {0, 0, 8, 0}};
    static const char *const vname[3] = {"k32", "4 warps", "8 warps"};
    float tv[3] = {-1.0f, -1.0f, -1.0f};
    bool same[3] = {false, false, false};
    float *dyv = (float *)dev_poison(ny * 4);
    float *h1 = (float *)malloc(ny * 4), *h2 = (float *)malloc(ny * 4);
    if (t13 >= 0) dev_down_on(S, h1, dy13, ny * 4);
    for (int v = 0; v < 3 && t13 >= 0; v++) {
        CK(cudaMemset(dyv, 0xFF, ny * 4));
        tv[v] = gf_time(S, 0, &vo[v], t, dw, dx, dyv, K, M, N, ws);
        if (tv[v] < 0) break;
        dev_down_on(S, h2, dyv, ny * 4);
        same[v] = memcmp(h1, h2, ny * 4) == 0;
    }
    /* e15: the wgmma kernel (if this build and device have it), against the mma.sync default:
     * the same f32 sums in another order, so NMSE ~1e-12; 1e-8 catches any layout error */
    float t15 = 0.0f;
    double e15 = 0.0;
    const bool wg = t13 >= 0 && mi7e_gemm_f16_wgmma_supported(t, K, M, N);
    if (wg) {
        CK(cudaMemset(dyv, 0xFF, ny * 4));
        t15 = gf_time(S, 2, NULL, t, dw, dx, dyv, K, M, N, ws);
        if (t15 >= 0) {
            dev_down_on(S, h2, dyv, ny * 4);
            e15 = gf_nonfinite(h2, ny) ? 1.0 : gu_nmse(h2, h1, ny);
        }
    }
    free(h1);
    free(h2);
    cudaFree(dyv);
    const float t7 = t13 < 0 ? -1.0f : gf_time(S, 1, NULL, t, dw, dx, dy7, K, M, N, ws);
    if (t13 < 0 || tv[0] < 0 || tv[1] < 0 || tv[2] < 0 || t15 < 0 || t7 < 0) {
        gu_fail(R, "%s call: %s", t13 < 0 || tv[0] < 0 || tv[1] < 0 || tv[2] < 0 ? "e13" : t15 < 0 ? "e15" : "e7",
                mi_errmsg());
    } else {
        /* context, not a bound: e7 quantizes x to Q8, e13 does not */
        float *y13 = (float *)malloc(ny * 4), *y7 = (float *)malloc(ny * 4);
        dev_down_on(S, y13, dy13, ny * 4);
        dev_down_on(S, y7, dy7, ny * 4);
        const double e = gu_nmse(y13, y7, ny), fl = 2.0 * (double)K * (double)M * (double)N;
        const size_t nonfin = gf_nonfinite(y13, ny);
        free(y13);
        free(y7);
        char vs[192] = "";
        size_t vl = 0;
        for (int v = 0; v < 3; v++)
            vl += (size_t)snprintf(vs + vl, sizeof vs - vl, "%s%s %.3f ms %.1f TFLOP/s%s", v ? ", " : "", vname[v], tv[v],
                                   fl / (tv[v] * 1e9), same[v] ? "" : " (bits DIFFER)");
        char e15s[128] = "; e15 (wgmma) not available here";
        if (wg) snprintf(e15s, sizeof e15s, "; e15 (wgmma) %.3f ms %.1f TFLOP/s, nmse vs e13 %.3g (<= 1e-8)", t15,
                         fl / (t15 * 1e9), e15);
        printf("    %s: e13 %.3f ms %.1f TFLOP/s (%s), e7 %.3f ms %.1f TFLOP/s (e7/e13 %.2fx)%s\n", name, t13,
               fl / (t13 * 1e9), vs, t7, fl / (t7 * 1e9), t7 / t13, e15s);
        /* the only check of the 128-token tiles at full size: e13 and e7 differ by e7's Q8
         * rounding of x (~1e-5), so 1e-3 catches any indexing error, not arithmetic */
        if (nonfin || !(e <= 1e-3) || !same[0] || !same[1] || !same[2] || !(e15 <= 1e-8))
            gu_fail(R, "nmse e13 vs e7 %.3g > 1e-3, or %zu non-finite outputs, or an option's bits differ from the "
                    "default (%s; e13 %.3f ms, e7 %.3f ms)%s", e, nonfin, vs, t13, t7, e15s);
        else
            gu_pass(R, "e13 %.3f ms %.1f TFLOP/s (%s; all bit-identical), e7 %.3f ms %.1f TFLOP/s (e7/e13 %.2fx); "
                    "median of 5; nmse e13 vs e7 %.3g <= 1e-3%s", t13, fl / (t13 * 1e9), vs, t7, fl / (t7 * 1e9),
                    t7 / t13, e, e15s);
    }
    cudaFree(b1); cudaFree(ws); cudaFree(dy13); cudaFree(dy7);
}

void gemm_f16_check(gu_run *R, cudaStream_t S) {
    gf_ctx c = {R, S, 0xe13};
    static const mi_type types[9] = {MI_TYPE_Q4_0, MI_TYPE_Q4_1, MI_TYPE_Q5_0, MI_TYPE_Q5_1, MI_TYPE_Q8_0,
                                     MI_TYPE_Q4_K, MI_TYPE_Q5_K, MI_TYPE_Q6_K, MI_TYPE_F16};
    static const int64_t Ns[4] = {1, 7, 64, 129};
    for (int ti = 0; ti < 9; ti++) {
        const mi_type t = types[ti];
        const bool kq = mi_type_get(t)->blck_size == 256;
        for (int ki = 0; ki < (kq ? 1 : 2); ki++)
            for (int n = 0; n < 4; n++)   /* bias on one N per type and K, a different one each time */
                gf_case(&c, t, ki ? 96 : 256, 130, Ns[n], n == (ti + ki) % 4, NULL, false);
    }
    /* the 128-token tile on the same small shapes (M, N past a tile edge), at depth 64 (K = 256's
     * default) and 32 */
    const gate_gemm_f16_opts t128 = {128, 0, 0, 0}, t128_k32 = {128, 32, 0, 0};
    for (int ti = 0; ti < 9; ti++)
        if (types[ti] == MI_TYPE_Q4_0 || types[ti] == MI_TYPE_Q4_K || types[ti] == MI_TYPE_Q6_K || types[ti] == MI_TYPE_F16)
            for (int n = 2; n < 4; n++) {
                gf_case(&c, types[ti], 256, 130, Ns[n], n == 3, &t128, false);
                gf_case(&c, types[ti], 256, 130, Ns[n], n == 2, &t128_k32, false);
            }
    /* the 4-warp layout on edge shapes, both tile widths (8 warps is the default above) */
    const gate_gemm_f16_opts w4 = {0, 0, 4, 0}, w4_t128 = {128, 0, 4, 0};
    for (int ti = 0; ti < 9; ti++)
        if (types[ti] == MI_TYPE_Q4_K || types[ti] == MI_TYPE_Q6_K)
            for (int n = 2; n < 4; n++) {
                gf_case(&c, types[ti], 256, 130, Ns[n], n == 3, &w4, false);
                gf_case(&c, types[ti], 256, 130, Ns[n], n == 2, &w4_t128, false);
            }
    gf_case(&c, MI_TYPE_Q4_0, 96, 130, 129, true, &w4_t128, false);   /* k depth 32 (K % 64 != 0) */
    /* e15 (wgmma, K % 64 == 0): every type at the tile edges, and the scale extremes */
    if (mi7e_gemm_f16_wgmma_supported(MI_TYPE_Q4_K, 256, 130, 64)) {
        for (int ti = 0; ti < 9; ti++)
            for (int n = 0; n < 4; n++) gf_case(&c, types[ti], 256, 130, Ns[n], n == ti % 4, NULL, true);
        gf_case(&c, MI_TYPE_Q4_K, 512, 300, 300, true, NULL, true);
    } else {
        gu_skip_named(R, "e15_wgmma_cases", "no sm_90a image in this build, or not a cc 9.0 device");
    }
    gf_scale(&c);
    gf_chunks(&c);
    gf_refusals(&c);
    /* timings: 7B (Qwen2.5-7B Q4_K_M) prefill shapes, types as that file has them; one x for all */
    const int64_t xk = 18944, xn = 2048;
    float *x = gu_rand_f32(&c.seed, (size_t)(xk * xn), -1.f, 1.f);
    void *xb;
    float *dx = (float *)dev_up_at(x, (size_t)(xk * xn) * 4, 0, &xb);
    free(x);
    static const int64_t Nt[2] = {2048, 512};
    for (int i = 0; i < 2; i++) {
        gf_timing(&c, "attn_q_o", MI_TYPE_Q4_K, 3584, 3584, Nt[i], dx);
        gf_timing(&c, "attn_v", MI_TYPE_Q6_K, 3584, 512, Nt[i], dx);
        gf_timing(&c, "ffn_gate_up", MI_TYPE_Q4_K, 3584, 18944, Nt[i], dx);
        gf_timing(&c, "ffn_down", MI_TYPE_Q6_K, 18944, 3584, Nt[i], dx);
    }
    gf_timing(&c, "ffn_down", MI_TYPE_Q4_K, 18944, 3584, 2048, dx);
    /* where e13 starts to pay (MI7E_GEMM_F16_MIN_N = 64) */
    gf_timing(&c, "ffn_gate_up", MI_TYPE_Q4_K, 3584, 18944, 64, dx);
    gf_timing(&c, "ffn_gate_up", MI_TYPE_Q4_K, 3584, 18944, 128, dx);
    gf_timing(&c, "ffn_gate_up", MI_TYPE_Q4_K, 3584, 18944, 256, dx);
    cudaFree(xb);
}


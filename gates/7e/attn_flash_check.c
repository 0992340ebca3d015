/* Device check of the flash attention kernel (item e10, phase7e_perf/attn_flash.cu) for gate_7e:
 * the tensor-core attention against the query-tiled kernel of e8, mi7e_attn_tiled (verified
 * there against a double softmax) on random q and F16 caches,
 * NMSE <= 1e-5, no NaN (output poisoned first, cache rows past the context poisoned with NaN);
 * refusals of unsupported shapes; the misaligned-cache fallback; and a timing of both kernels
 * on the 7B shape at 2048 tokens (a measurement: always passes). */
#include "gates/7e/attn_flash_check.h"
#include "gates/7e/dev7e.h"
#include "common/core/mi_fp16.h"
#include "phase7e_perf/perf7e.h"
#include "phase7e_perf/attn_flash.h"

#define FC_NMSE_BOUND 1e-5
/* Device buffers of one shape: q [hd*Hq, N] F32, k/v [hd*Hkv, n_ctx] F16 with rows
 * n_past+N .. n_ctx-1 set to NaN (no kernel may read them), two outputs poisoned with NaN. */
typedef struct {
    int hd, Hq, Hkv;
    int64_t N, n_past, n_ctx;
    size_t nq, nkv;
    float *dq, *dy_ref, *dy;
    char *dkv_base;      /* one allocation: k at +koff, v after it */
    uint16_t *dk, *dv;
} fc_bufs;

static void fc_alloc(fc_bufs *b, unsigned long long *seed, int hd, int Hq, int Hkv, int64_t N, int64_t n_past,
                     size_t koff) {
    memset(b, 0, sizeof *b);
    b->hd = hd; b->Hq = Hq; b->Hkv = Hkv; b->N = N; b->n_past = n_past; b->n_ctx = n_past + N + 5;
    b->nq = (size_t)N * (size_t)hd * (size_t)Hq;
    b->nkv = (size_t)b->n_ctx * (size_t)hd * (size_t)Hkv;
    const size_t row = (size_t)hd * (size_t)Hkv, used = (size_t)(n_past + N) * row;
    float *q = gu_rand_f32(seed, b->nq, -1.f, 1.f);
    uint16_t *kv = malloc(2 * b->nkv * sizeof *kv);
    if (!kv) { fprintf(stderr, "attn_flash_check: out of memory\n"); exit(2); }
    for (size_t i = 0; i < 2 * b->nkv; i++) {
        const size_t j = i % b->nkv;
        kv[i] = j < used ? mi_f32_to_f16(gu_frand(seed, -1.f, 1.f)) : (uint16_t)0x7E00;   /* f16 NaN */
    }
    const size_t kvb = b->nkv * 2;
    CK(cudaMalloc((void **)&b->dq, b->nq * 4));
    CK(cudaMalloc((void **)&b->dy_ref, b->nq * 4));
    CK(cudaMalloc((void **)&b->dy, b->nq * 4));
    CK(cudaMalloc((void **)&b->dkv_base, koff + 2 * kvb + 16));
    b->dk = (uint16_t *)(b->dkv_base + koff);
    b->dv = (uint16_t *)(b->dkv_base + koff + kvb);
    /* v right after k keeps both aligned exactly when koff is (kvb is a multiple of 128) */
    CK(cudaMemcpy(b->dq, q, b->nq * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b->dk, kv, kvb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b->dv, kv + b->nkv, kvb, cudaMemcpyHostToDevice));
    CK(cudaMemset(b->dy_ref, 0xFF, b->nq * 4));
    CK(cudaMemset(b->dy, 0xFF, b->nq * 4));
    free(q);
    free(kv);
}

static void fc_free(fc_bufs *b) {
    cudaFree(b->dq); cudaFree(b->dy_ref); cudaFree(b->dy); cudaFree(b->dkv_base);
}

static mi_status fc_run(const fc_bufs *b, cudaStream_t S, int fast, float *out) {
    const float scale = 1.0f / sqrtf((float)b->hd);
    if (fast)
        return mi7e_attn_flash(S, b->dq, b->dk, b->dv, MI_TYPE_F16, out, b->N, b->n_past, b->hd, b->Hq, b->Hkv, scale);
    return mi7e_attn_tiled(S, b->dq, b->dk, b->dv, MI_TYPE_F16, out, b->N, b->n_past, b->hd, b->Hq, b->Hkv, scale);
}

/* Run e8 and e10 on b; got/ref: host copies (nq floats). Returns the e10 status. */
static mi_status fc_both(const fc_bufs *b, cudaStream_t S, float *got, float *ref) {
    mi_status st = fc_run(b, S, 0, b->dy_ref);
    if (st == MI_OK) st = fc_run(b, S, 1, b->dy);
    if (st != MI_OK) return st;
    CK(cudaStreamSynchronize(S));
    CK(cudaMemcpy(ref, b->dy_ref, b->nq * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got, b->dy, b->nq * 4, cudaMemcpyDeviceToHost));
    return MI_OK;
}

static void fc_case(gu_run *R, cudaStream_t S, unsigned long long *seed, int hd, int Hq, int Hkv, int64_t N,
                    int64_t n_past) {
    char name[96];
    snprintf(name, sizeof name, "e10_fattn_hd%d_%d_%d_N%lld_past%lld", hd, Hq, Hkv, (long long)N, (long long)n_past);
    if (!gu_selected(name)) return;
    gu_begin(R, name);
    if (!mi7e_attn_flash_supported(hd, Hq, Hkv, MI_TYPE_F16, N)) {
        gu_fail(R, "mi7e_attn_flash_supported refuses a shape it must take");
        return;
    }
    fc_bufs b;
    fc_alloc(&b, seed, hd, Hq, Hkv, N, n_past, 0);
    float *got = malloc(b.nq * 4), *ref = malloc(b.nq * 4);
    mi_status st = fc_both(&b, S, got, ref);
    if (st != MI_OK) {
        gu_fail(R, "launch: %s", mi_errmsg());
    } else {
        size_t nan = 0;
        double mx = 0;
        for (size_t i = 0; i < b.nq; i++) {
            if (got[i] != got[i]) nan++;
            const double d = fabs((double)got[i] - (double)ref[i]);
            if (d > mx) mx = d;
        }
        const double e = gu_nmse(got, ref, b.nq);
        if (nan || !(e <= FC_NMSE_BOUND)) {
            const size_t i = first_bad(got, ref, b.nq, 1e-2, 0.1);
            if (i != (size_t)-1)
                printf("    %s: first mismatch index %zu (token %zu, col %zu) got %.9g want %.9g\n", name, i,
                       i / ((size_t)hd * (size_t)Hq), i % ((size_t)hd * (size_t)Hq), got[i], ref[i]);
            gu_fail(R, "nmse vs e8 %.3g (bound %.0e), max abs diff %.3g, %zu NaN", e, FC_NMSE_BOUND, mx, nan);
        } else {
            gu_pass(R, "nmse vs e8 %.3g, max abs diff %.3g", e, mx);
        }
    }
    free(got);
    free(ref);
    fc_free(&b);
}

/* Shapes e10 must refuse (and mi7e_attn_flash must return MI_ERR_UNSUPPORTED for, not launch). */
static void fc_refusals(gu_run *R) {
    if (!gu_selected("e10_fattn_refusals")) return;
    gu_begin(R, "e10_fattn_refusals");
    static const struct { int64_t hd, Hq, Hkv; mi_type t; int64_t N; } bad[] = {
        {96, 4, 2, MI_TYPE_F16, 64}, {128, 4, 2, MI_TYPE_F32, 64}, {128, 4, 2, MI_TYPE_F16, 15},
        {64, 6, 4, MI_TYPE_F16, 64}, {64, 4, 0, MI_TYPE_F16, 64}, {32, 4, 4, MI_TYPE_F16, 64},
    };
    const int nb = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < nb; i++) {
        if (mi7e_attn_flash_supported(bad[i].hd, bad[i].Hq, bad[i].Hkv, bad[i].t, bad[i].N)) {
            gu_fail(R, "supported() accepts hd %lld Hq %lld Hkv %lld %s N %lld", (long long)bad[i].hd,
                    (long long)bad[i].Hq, (long long)bad[i].Hkv, mi_type_name(bad[i].t), (long long)bad[i].N);
            return;
        }
        /* null pointers: a refusal must come before any launch */
        mi_status st = mi7e_attn_flash(NULL, NULL, NULL, NULL, bad[i].t, NULL, bad[i].N, 0, bad[i].hd, bad[i].Hq,
                                  bad[i].Hkv, 1.0f);
        if (st != MI_ERR_UNSUPPORTED) {
            gu_fail(R, "mi7e_attn_flash returned %d, not MI_ERR_UNSUPPORTED, for refused case %d", (int)st, i);
            return;
        }
    }
    if (mi7e_attn_flash(NULL, NULL, NULL, NULL, MI_TYPE_F16, NULL, 64, -1, 128, 4, 2, 1.0f) != MI_ERR_UNSUPPORTED) {
        gu_fail(R, "mi7e_attn_flash accepts n_past = -1");
        return;
    }
    gu_pass(R, "%d unsupported shapes and n_past < 0 refused with MI_ERR_UNSUPPORTED", nb);
}

/* Caches at a 2-byte offset (not 16-byte aligned): e10 must hand the call to e8, bit for bit. */
static void fc_misaligned(gu_run *R, cudaStream_t S, unsigned long long *seed) {
    if (!gu_selected("e10_fattn_misaligned_fallback")) return;
    gu_begin(R, "e10_fattn_misaligned_fallback");
    fc_bufs b;
    fc_alloc(&b, seed, 128, 4, 2, 40, 3, 2);
    float *got = malloc(b.nq * 4), *ref = malloc(b.nq * 4);
    mi_status st = fc_both(&b, S, got, ref);
    if (st != MI_OK) gu_fail(R, "launch: %s", mi_errmsg());
    else if (memcmp(got, ref, b.nq * 4))
        gu_fail(R, "misaligned caches: e10 differs from e8 (nmse %.3g)", gu_nmse(got, ref, b.nq));
    else gu_pass(R, "caches at +2 bytes go to e8: bit-identical");
    free(got);
    free(ref);
    fc_free(&b);
}

/* median of 5 timed launches (after one warm-up) on the stream, in ms; < 0 on a launch error */
static float fc_time(const fc_bufs *b, cudaStream_t S, int fast, float *out) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[5], med = -1.0f;
    if (fc_run(b, S, fast, out) == MI_OK) {
        int k = 0;
        for (; k < 5; k++) {
            CK(cudaEventRecord(e0, S));
            if (fc_run(b, S, fast, out) != MI_OK) break;
            CK(cudaEventRecord(e1, S));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&t[k], e0, e1));
        }
        if (k == 5) {
            med = median_f(t, 5);
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return med;
}

static void fc_timing(gu_run *R, cudaStream_t S, unsigned long long *seed) {
    const char *name = "e10_fattn_time_7b_N2048";
    if (!gu_selected(name)) return;
    gu_begin(R, name);
    const int hd = 128, Hq = 28, Hkv = 4;
    const int64_t N = 2048;
    fc_bufs b;
    fc_alloc(&b, seed, hd, Hq, Hkv, N, 0, 0);
    const float t8 = fc_time(&b, S, 0, b.dy_ref), t10 = fc_time(&b, S, 1, b.dy);
    if (t8 < 0 || t10 < 0) {
        gu_fail(R, "launch: %s", mi_errmsg());
    } else {
        float *got = malloc(b.nq * 4), *ref = malloc(b.nq * 4);
        CK(cudaMemcpy(ref, b.dy_ref, b.nq * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(got, b.dy, b.nq * 4, cudaMemcpyDeviceToHost));
        /* causal: query i sees i + 1 keys; 2 flops per multiply-add, two products (Q K^T, P V) */
        const double flop = 4.0 * hd * Hq * ((double)N * (double)(N + 1) / 2.0);
        gu_pass(R, "7B shape (hd 128, Hq 28, Hkv 4), N 2048, n_past 0: e8 %.3f ms (%.1f TFLOP/s), e10 %.3f ms "
                "(%.1f TFLOP/s), e8/e10 %.2fx; nmse e10 vs e8 %.3g (median of 5)",
                t8, flop / (t8 * 1e9), t10, flop / (t10 * 1e9), t8 / t10, gu_nmse(got, ref, b.nq));
        free(got);
        free(ref);
    }
    fc_free(&b);
}

void attn_flash_check(gu_run *R, cudaStream_t S) {
    unsigned long long seed = 0xe10;
    static const int hds[2] = {64, 128};
    static const int heads[2][2] = {{7, 1}, {2, 2}};   /* GQA 7:1 and plain */
    static const int64_t Ns[4] = {16, 17, 100, 130}, pasts[2] = {0, 37};
    for (int a = 0; a < 2; a++)
        for (int hh = 0; hh < 2; hh++)
            for (int n = 0; n < 4; n++)
                for (int p = 0; p < 2; p++) fc_case(R, S, &seed, hds[a], heads[hh][0], heads[hh][1], Ns[n], pasts[p]);
    fc_case(R, S, &seed, 128, 28, 4, 512, 0);     /* qwen2.5-7b prefill */
    fc_case(R, S, &seed, 128, 28, 4, 64, 1000);   /* a later chunk: long past, masked tiles at the end only */
    fc_refusals(R);
    fc_misaligned(R, S, &seed);
    fc_timing(R, S, &seed);
}


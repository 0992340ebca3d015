/* Gate 7b: the GPU computes the same answer as the CPU. Each test builds the same graph
 * twice from common/graph builders and runs it through a scheduler over [cuda, cpu] and
 * one over [cpu] alone, on the same inputs, then compares (docs/PHASE7B.md):
 *   elementwise, RMS norm, GET_ROWS, KV cache bytes: bit-identical (first mismatches printed)
 *   RoPE: bit-identical but for <= 0.1% of elements within 2 ulp (double cos/sin rounding)
 *   matmul per weight type x shapes (odd M, N = 1, 7, 512): NMSE <= 1e-6, repeat bitwise (or, for a
 *     later phase's kernel with other activation arithmetic, closer than the CPU to the exact product)
 *   attention with n_past growing over steps, whole-layer chain: NMSE <= 1e-6 (chain7b.c; a chain
 *     step in a later phase's f16 tier: as close as the CPU to the chain with F32 weights)
 *   whole models (synth qwen2.5-0.5b Q4_0, qwen3-0.6b Q8_0, qwen2.5-7b Q4_K_M) through
 *   the public API, sessions "cuda" vs "cpu": logits NMSE <= 1e-5 and top-5 overlap,
 *   64 greedy steps (CPU token fed to both) identical wherever the CPU's top-1 margin
 *   exceeds the step's noise (2 x max |logit difference|); near-ties listed.
 * Every compared node must have run on the CUDA backend, else the test fails.
 * No device: "skipped: no CUDA device". Summary JSON: $MINFER_GATE_JSON. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <execinfo.h>
#include "gates/gate_util.h"
#include "common/backend/backend.h"
#include "common/backend/sched.h"
#include "common/graph/graph.h"
#include "common/model/mi.h"
#include "common/quant/mi_types.h"
#include "common/core/mi_fp16.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "gates/7b/chain7b.h"

static gu_run R;
static mi_backend *g_cuda, *g_cpu_a, *g_cpu_b;
static mi_sched *g_sg, *g_sc;   /* [cuda, cpu_a] and [cpu_b] */
static unsigned long long g_seed = 2024;
static int g_quick;
/* MINFER_GATE_SELFTEST=1: a second CPU backend stands in for CUDA, so the harness itself
 * (graphs, bookkeeping, references) can be exercised on a machine without a GPU. The
 * results then prove nothing about CUDA and the summary says so. */
static int g_self;
/* CPU threads of the reference backends and sessions. Default 1: the CPU thread pool
 * (common/backend/threadpool.c) can let a late worker run a newer task's function with a
 * stale argument when a run with few active threads is followed by one with many (seen
 * as a wrong matmul output and a crash on the 16-core GPU host, and as an FPE in
 * mm_worker under ASan with MINFER_ISA=scalar); one thread never takes that path.
 * MINFER_GATE_CPU_THREADS=N overrides. */
static int g_cpu_threads = 1;


static size_t cmp_bits(const char *what, const float *got, const float *want, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!memcmp(&got[i], &want[i], 4)) continue;
        if (bad < 3) printf("    %s: index %zu got %.9g want %.9g\n", what, i, got[i], want[i]);
        bad++;
    }
    return bad;
}

/* ---------------- elementwise, RMS norm, RoPE, GET_ROWS ---------------- */
typedef struct {
    int kind;              /* 0 add 1 add_b 2 mul 3 mul_b 4 silu 5 swiglu 6 rms 7 rms_head 8 rope_neox 9 rope_norm 10 get_rows */
    int64_t D, N, G;
    float *a, *b, *bc, *w;
    int32_t *pos;
    int hd, n_rot;
    mi_tensor *tab;
    int32_t *ids;
} ew_arg;

static mi_tensor *build_ew(mi_graph *g, void *p, int on_gpu) {
    ew_arg *a = p;
    (void)on_gpu;
    mi_tensor *x = graph_input(g, "x", MI_TYPE_F32, a->D, a->N, a->a);
    switch (a->kind) {
    case 0: case 2: {
        mi_tensor *y = graph_input(g, "y", MI_TYPE_F32, a->D, a->N, a->b);
        return a->kind == 0 ? graph_add(g, x, y) : graph_mul(g, x, y);
    }
    case 1: case 3: {
        mi_tensor *y = graph_input(g, "yb", MI_TYPE_F32, a->D, 1, a->bc);
        return a->kind == 1 ? graph_add(g, x, y) : graph_mul(g, x, y);
    }
    case 4: return graph_silu(g, x);
    case 5: return graph_swiglu(g, x, graph_input(g, "u", MI_TYPE_F32, a->D, a->N, a->b));
    case 6: case 7: return graph_rms_norm(g, x, graph_input(g, "w", MI_TYPE_F32, a->G, 1, a->w), a->G, 1e-6f);
    case 8: case 9: {
        mi_tensor *pos = graph_input(g, "pos", MI_TYPE_I32, a->N, 1, a->pos);
        return graph_rope(g, x, pos, a->hd, a->kind == 8 ? MI_ROPE_NEOX : MI_ROPE_NORMAL, a->n_rot, 1000000.f);
    }
    default: {
        mi_tensor *ids = graph_input(g, "ids", MI_TYPE_I32, a->N, 1, a->ids);
        return graph_get_rows(g, a->tab, ids);
    }
    }
}

static void test_ew(void) {
    static const char *names[] = {"add", "add_bcast", "mul", "mul_bcast", "silu", "swiglu", "rms_norm", "rms_norm_per_head",
                                  "rope_neox", "rope_normal"};
    const int64_t D = 896, N = 7;
    for (int k = 0; k < 10; k++) {
        ew_arg a = {0};
        a.kind = k;
        a.D = k >= 8 ? 128 * 6 : D;
        a.N = N;
        a.G = k == 6 ? a.D : 64;
        a.hd = 128;
        a.n_rot = k == 9 ? 64 : 128;
        const size_t n = (size_t)(a.D * N);
        a.a = gu_rand_f32(&g_seed, n, -20.f, 20.f);
        a.b = gu_rand_f32(&g_seed, n, -3.f, 3.f);
        a.bc = gu_rand_f32(&g_seed, (size_t)a.D, -3.f, 3.f);
        a.w = gu_rand_f32(&g_seed, (size_t)a.G, 0.5f, 1.5f);
        int32_t pos[7] = {0, 1, 2, 17, 300, 4095, 31999};
        a.pos = pos;
        float *gg = malloc(n * 4), *g2 = malloc(n * 4), *cc = malloc(n * 4);
        int nc = 0;
        gu_begin(&R, names[k]);
        if (gate7b_run_both(build_ew, &a, gg, g2, cc, n, &nc)) gu_fail(&R, "graph failed: %s", mi_errmsg());
        else if (nc) gu_fail(&R, "%d node(s) not on cuda", nc);
        else {
            size_t bad = cmp_bits(names[k], gg, cc, n), rep = gu_first_diff(gg, g2, n * 4);
            size_t far = 0;
            if (k >= 8)   /* RoPE tier: at most 2 ulp on <= 0.1% */
                for (size_t i = 0; i < n; i++)
                    if (llabs((long long)mi_f32_bits(gg[i]) - (long long)mi_f32_bits(cc[i])) > 2) far++;
            const bool ok = rep == (size_t)-1 && (k >= 8 ? (far == 0 && bad <= n / 1000 + 2) : bad == 0);
            if (ok) gu_pass(&R, "%zu elements: %zu bit-identical to the CPU backend%s; repeat bit-identical", n, n - bad,
                            k >= 8 && bad ? " (rest within 2 ulp)" : "");
            else gu_fail(&R, "%zu of %zu differ (%zu by > 2 ulp); repeat %s", bad, n, far,
                         rep == (size_t)-1 ? "identical" : "DIFFERS");
        }
        free(a.a); free(a.b); free(a.bc); free(a.w); free(gg); free(g2); free(cc);
    }
}


static const mi_type k_types[] = {MI_TYPE_F32, MI_TYPE_F16, MI_TYPE_BF16, MI_TYPE_Q4_0, MI_TYPE_Q4_1, MI_TYPE_Q5_0,
                                  MI_TYPE_Q5_1, MI_TYPE_Q8_0, MI_TYPE_Q4_K, MI_TYPE_Q5_K, MI_TYPE_Q6_K};
#define N_TYPES ((int)(sizeof k_types / sizeof k_types[0]))

static void test_get_rows(void) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int64_t E = 512, V = 41, N = 5;
        void *tab = gu_make_weights(&g_seed, k_types[ti], E, V, 1.f, NULL);
        int32_t ids[5] = {3, 40, 0, 3, 17};
        ew_arg a = {0};
        a.kind = 10;
        a.D = 4;
        a.N = N;
        a.a = gu_rand_f32(&g_seed, 4 * N, 0, 1);
        a.tab = gate7b_leaf("table", k_types[ti], E, V, tab);
        a.ids = ids;
        const size_t n = (size_t)(E * N);
        float *gg = malloc(n * 4), *g2 = malloc(n * 4), *cc = malloc(n * 4);
        int nc = 0;
        char name[64];
        snprintf(name, sizeof name, "get_rows_%s", mi_type_name(k_types[ti]));
        gu_begin(&R, name);
        if (gate7b_run_both(build_ew, &a, gg, g2, cc, n, &nc)) gu_fail(&R, "graph failed: %s", mi_errmsg());
        else if (nc) gu_fail(&R, "%d node(s) not on cuda", nc);
        else {
            size_t bad = cmp_bits(name, gg, cc, n);
            if (bad) gu_fail(&R, "%zu of %zu differ from the CPU backend", bad, n);
            else gu_pass(&R, "%zu elements bit-identical to the CPU backend", n);
        }
        free(tab); free(a.tab); free(a.a); free(gg); free(g2); free(cc);
    }
}

/* ---------------- matmul ---------------- */
typedef struct {
    mi_tensor *w, *bias;
    float *x;
    int64_t K, N;
} mm_arg;

static mi_tensor *build_mm(mi_graph *g, void *p, int on_gpu) {
    mm_arg *a = p;
    (void)on_gpu;
    return graph_matmul(g, a->w, graph_input(g, "x", MI_TYPE_F32, a->K, a->N, a->x), a->bias);
}

static double g_mm_worst[MI_TYPE_COUNT];

/* NMSE of the device (gg) and CPU (cc) results against the exact product: f64 dot of the
 * dequantized weight rows with x (+ bias) */
static void exact_errors(mi_type t, const void *w, const float *x, const float *bias, int64_t K, int64_t M,
                         int64_t N, const float *gg, const float *cc, double *e_dev, double *e_cpu) {
    const size_t rb = mi_row_size(t, K), n = (size_t)(M * N);
    float *wd = malloc((size_t)(K * M) * 4), *ex = malloc(n * 4);
    for (int64_t m = 0; m < M; m++) mi_dequantize_row(t, (const uint8_t *)w + rb * (size_t)m, wd + m * K, K);
    for (int64_t j = 0; j < N; j++)
        for (int64_t m = 0; m < M; m++) {
            double s = bias ? (double)bias[m] : 0.0;
            for (int64_t k = 0; k < K; k++) s += (double)wd[m * K + k] * (double)x[j * K + k];
            ex[j * M + m] = (float)s;
        }
    *e_dev = gu_nmse(gg, ex, n);
    *e_cpu = gu_nmse(cc, ex, n);
    free(wd);
    free(ex);
}

static void test_matmul(void) {
    const int64_t shapes[][3] = {{512, 7, 1}, {512, 129, 7}, {1024, 333, 512}, {2816, 65, 1}, {512, 1001, 7}};
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int si = 0; si < 5; si++) {
            const mi_type t = k_types[ti];
            const int64_t K = shapes[si][0], M = shapes[si][1], N = shapes[si][2];
            if (g_quick && N == 512) continue;
            const bool with_bias = si % 2 == 1;
            mm_arg a;
            a.K = K;
            a.N = N;
            void *wd = gu_make_weights(&g_seed, t, K, M, 1.f, NULL);
            float *bias = gu_rand_f32(&g_seed, (size_t)M, -0.5f, 0.5f);
            a.w = gate7b_leaf("w", t, K, M, wd);
            a.bias = with_bias ? gate7b_leaf("bias", MI_TYPE_F32, M, 1, bias) : NULL;
            a.x = gu_rand_f32(&g_seed, (size_t)(K * N), -1.f, 1.f);
            const size_t n = (size_t)(M * N);
            float *gg = malloc(n * 4), *g2 = malloc(n * 4), *cc = malloc(n * 4);
            int nc = 0;
            char name[96];
            snprintf(name, sizeof name, "matmul_%s_K%lld_M%lld_N%lld%s", mi_type_name(t), (long long)K, (long long)M,
                     (long long)N, with_bias ? "_bias" : "");
            gu_begin(&R, name);
            if (gate7b_run_both(build_mm, &a, gg, g2, cc, n, &nc)) gu_fail(&R, "graph failed: %s", mi_errmsg());
            else if (nc) gu_fail(&R, "%d node(s) not on cuda", nc);
            else {
                const double e = gu_nmse(gg, cc, n);
                const size_t rep = gu_first_diff(gg, g2, n * 4);
                size_t same = 0;
                for (size_t i = 0; i < n; i++) same += !memcmp(&gg[i], &cc[i], 4);
                /* A later phase may install a matmul that does not quantize x as the CPU does
                 * (7e's e13: f16 activations). It passes if it is closer than the CPU to the
                 * exact product of the dequantized weights and x, and within 4x the CPU's own
                 * error of the CPU. 7b's own kernel meets the first criterion. */
                double e_dev = -1, e_cpu = -1;
                if (e > 1e-6) exact_errors(t, wd, a.x, with_bias ? bias : NULL, K, M, N, gg, cc, &e_dev, &e_cpu);
                const bool closer = e_dev >= 0 && e_dev <= e_cpu && e <= 4 * e_cpu;
                if (!closer && e > g_mm_worst[t]) g_mm_worst[t] = e;   /* the worst of the CPU-arithmetic kernels */
                if (e <= 1e-6 && rep == (size_t)-1)
                    gu_pass(&R, "nmse %.3g (<= 1e-6), %zu/%zu bit-equal to the CPU; repeat bit-identical", e, same, n);
                else if (closer && rep == (size_t)-1)
                    gu_pass(&R, "nmse %.3g vs the CPU (> 1e-6: not the CPU's arithmetic), but vs the exact product "
                            "%.3g <= the CPU's %.3g, and <= 4x it vs the CPU; repeat bit-identical", e, e_dev, e_cpu);
                else {
                    for (size_t i = 0, shown = 0; i < n && shown < 3; i++)
                        if (fabsf(gg[i] - cc[i]) > 1e-4f * (fabsf(cc[i]) + 1e-3f)) {
                            printf("    %s: index %zu got %.9g want %.9g\n", name, i, gg[i], cc[i]);
                            shown++;
                        }
                    gu_fail(&R, "nmse %.3g (<= 1e-6); repeat %s", e, rep == (size_t)-1 ? "identical" : "DIFFERS");
                }
            }
            free(wd); free(bias); free(a.w); free(a.bias); free(a.x); free(gg); free(g2); free(cc);
        }
}

/* ---------------- whole models through the public API ---------------- */
static char g_minfer[1024];

static int ensure_model(const char *shape, const char *type, char *path, size_t n) {
    return gu_model_path(g_minfer, "7b", shape, type, path, n);
}

static void topk(const float *l, int64_t n, int k, int64_t *idx) {
    for (int j = 0; j < k; j++) idx[j] = -1;
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < k; j++)
            if (idx[j] < 0 || l[i] > l[idx[j]]) {
                for (int m = k - 1; m > j; m--) idx[m] = idx[m - 1];
                idx[j] = i;
                break;
            }
}

static int64_t cpu_noise_floor_one(const char *alt, const char *path, const int32_t *prompt, int n,
                                   const float *cpu_rows, int64_t V, double *floor, int *top5_floor) {
    char toks[400] = "", dump[128], cmd[3200];
    size_t tl = 0;
    for (int i = 0; i < n; i++) tl += (size_t)snprintf(toks + tl, sizeof toks - tl, "%s%d", i ? "," : "", prompt[i]);
    snprintf(dump, sizeof dump, "/tmp/minfer-gate7b-floor-%d.bin", (int)getpid());
    snprintf(cmd, sizeof cmd, "MINFER_LOG=0 MINFER_ISA=%s '%s' run -m '%s' --tokens %s -n 0 -t 2 --backend cpu "
             "-c 256 --dump-logits '%s' >/dev/null 2>&1", alt, g_minfer, path, toks, dump);
    if (system(cmd) != 0) return 0;
    FILE *f = fopen(dump, "rb");
    uint32_t hdr[4] = {0};
    int64_t got = 0;
    if (f && fread(hdr, 4, 4, f) == 4 && hdr[2] == (uint32_t)V && hdr[3] >= (uint32_t)n) {
        float *row = malloc((size_t)V * 4);
        for (int r = 0; r < n && fread(row, 4, (size_t)V, f) == (size_t)V; r++, got++) {
            const double e = gu_nmse(row, cpu_rows + (size_t)r * V, (size_t)V);
            if (e > floor[r]) floor[r] = e;
            int64_t ta[5], tb[5];
            topk(row, V, 5, ta);
            topk(cpu_rows + (size_t)r * V, V, 5, tb);
            int ov = 0;
            for (int i = 0; i < 5; i++)
                for (int j = 0; j < 5; j++) ov += ta[i] == tb[j];
            if (ov < *top5_floor) *top5_floor = ov;
        }
        free(row);
    }
    if (f) fclose(f);
    remove(dump);
    return got;
}

/* The CPU's own rounding sensitivity on this model: the prompt's logits from CPU runs with
 * other SIMD widths (every ISA below the best: avx2 and scalar), through `minfer run
 * --dump-logits`. Same reference arithmetic, other float summation orders. Random-weight
 * models amplify such last-bit differences layer after layer (measured: qwen2.5-7b Q4_K_M
 * ~1e-2 NMSE between two CPU ISAs), so the GPU is judged against this floor, not against an
 * absolute number alone. Two ISAs may share an order for a type (avx2 and avx512 agree
 * bit for bit on Q8_0), which is why every lower ISA is tried and the largest difference kept.
 * Returns rows read (0 if unavailable); floor[r] = max NMSE(cpu row r, other-ISA row r). */
static int64_t cpu_noise_floor(const char *path, const int32_t *prompt, int n, const float *cpu_rows, int64_t V,
                               double *floor, int *top5_floor, char *how, size_t how_n) {
    const mi_isa best = mi_cpu_best_isa();
    const char *alts[2];
    int n_alt = 0;
    if (best == MI_ISA_AVX512) alts[n_alt++] = "avx2";
    if (best >= MI_ISA_AVX2) alts[n_alt++] = "scalar";
    if (!n_alt) { snprintf(how, how_n, "no second CPU ISA"); return 0; }
    for (int r = 0; r < n; r++) floor[r] = 0;
    *top5_floor = 5;
    int64_t got = n;
    size_t hl = (size_t)snprintf(how, how_n, "cpu %s vs cpu", mi_isa_name(best));
    for (int a = 0; a < n_alt; a++) {
        int64_t g = cpu_noise_floor_one(alts[a], path, prompt, n, cpu_rows, V, floor, top5_floor);
        if (g < got) got = g;
        if (hl < how_n) hl += (size_t)snprintf(how + hl, how_n - hl, "%s %s%s", a ? "," : "", alts[a], g ? "" : " (failed)");
    }
    return got;
}

static void test_model(const char *shape, const char *type, int steps) {
    char name[96], path[512];
    snprintf(name, sizeof name, "model_%s_%s", shape, type);
    if (!gu_begin(&R, name)) return;   /* left out by MINFER_GATE_ONLY: minutes of work not to be recorded */
    if (ensure_model(shape, type, path, sizeof path)) {
        gu_skip(&R, "could not synthesize %s %s with '%s synth' (not built?)", shape, type, g_minfer);
        return;
    }
    mi_model *mg = NULL, *mc = NULL;
    mi_session *sg = NULL, *sc = NULL;
    /* two loads: a session sets its weights' backend index, and the index of the CPU
     * differs between [cuda, cpu] and [cpu] */
    if (mi_model_load(path, &mg) != MI_OK || mi_model_load(path, &mc) != MI_OK) {
        gu_fail(&R, "load %s: %s", path, mi_errmsg());
        mi_model_free(mg);
        return;
    }
    mi_session_params pg, pc;
    mi_session_params_default(&pg);
    mi_session_params_default(&pc);
    pg.backend = g_self ? "cpu" : "cuda";
    pc.backend = "cpu";
    pg.n_ctx = pc.n_ctx = 256;
    pg.n_threads = pc.n_threads = g_cpu_threads;
    if (mi_session_new(mg, &pg, &sg) != MI_OK || mi_session_new(mc, &pc, &sc) != MI_OK) {
        gu_fail(&R, "session: %s", mi_errmsg());
        goto done;
    }
    if (!g_self && strcmp(mi_session_backend(sg), "cuda")) {
        gu_fail(&R, "the cuda session runs on %s", mi_session_backend(sg));
        goto done;
    }
    {
        enum { NP = 16 };
        const int64_t V = mi_model_hparams(mc)->n_vocab;
        int32_t prompt[NP];
        for (int i = 0; i < NP; i++) prompt[i] = (int32_t)(gu_rng(&g_seed) % (unsigned long long)V);
        int32_t tok = 0;
        double worst_nmse = 0, worst_prompt = 0, noise_max = 0, min_margin = INFINITY, floor[NP], floor_max = 0;
        int top5_min = 5, top5_floor = 5, diverged = 0, unexplained = 0, prompt_over = 0;
        char ties[600] = "", how[160] = "";
        size_t tl = 0;
        int64_t n_floor = 0;
        for (int step = 0; step <= steps; step++) {
            const int32_t *in = step == 0 ? prompt : &tok;
            const int64_t nin = step == 0 ? NP : 1;
            if (mi_session_decode(sg, in, nin, step == 0) != MI_OK || mi_session_decode(sc, in, nin, step == 0) != MI_OK) {
                gu_fail(&R, "decode step %d: %s", step, mi_errmsg());
                goto done;
            }
            int64_t rows_g, rows_c;
            const float *lg = mi_logits(sg, &rows_g), *lc = mi_logits(sc, &rows_c);
            if (rows_g != rows_c || rows_g < 1) { gu_fail(&R, "logit rows %lld vs %lld", (long long)rows_g, (long long)rows_c); goto done; }
            if (step == 0) {
                /* every prompt position against the CPU, and the CPU against itself (other ISA) */
                n_floor = cpu_noise_floor(path, prompt, NP, lc, V, floor, &top5_floor, how, sizeof how);
                for (int64_t r = 0; r < rows_g; r++) {
                    const double e = gu_nmse(lg + (size_t)r * V, lc + (size_t)r * V, (size_t)V);
                    if (e > worst_prompt) worst_prompt = e;
                    if (r < n_floor && floor[r] > floor_max) floor_max = floor[r];
                    if (e > 1e-5 && (r >= n_floor || e > 4 * floor[r])) prompt_over++;
                }
                lg += (size_t)(rows_g - 1) * V;   /* the last position drives the greedy steps */
                lc += (size_t)(rows_c - 1) * V;
            }
            const double e = gu_nmse(lg, lc, (size_t)V);
            if (e > worst_nmse) worst_nmse = e;
            double noise = 0;
            for (int64_t i = 0; i < V; i++) noise = fmax(noise, fabs((double)lg[i] - lc[i]));
            if (noise > noise_max) noise_max = noise;
            int64_t tg[5], tc[5];
            topk(lg, V, 5, tg);
            topk(lc, V, 5, tc);
            int ov = 0;
            for (int i = 0; i < 5; i++)
                for (int j = 0; j < 5; j++) ov += tg[i] == tc[j];
            if (ov < top5_min) top5_min = ov;
            const double margin = (double)lc[tc[0]] - lc[tc[1]];
            if (margin < min_margin) min_margin = margin;
            /* the GPU can swap two logits only if their errors differ by more than the margin */
            const bool near_tie = margin <= 2 * noise;
            if (near_tie && tl < sizeof ties - 48)
                tl += (size_t)snprintf(ties + tl, sizeof ties - tl, "%sstep %d margin %.2g noise %.2g%s", tl ? "; " : "",
                                       step, margin, noise, tg[0] != tc[0] ? " (diverged)" : "");
            if (tg[0] != tc[0]) {
                diverged++;
                if (!near_tie) {
                    unexplained++;
                    printf("    step %d: gpu top-1 %lld, cpu top-1 %lld, margin %.3g > 2 x noise %.3g\n", step,
                           (long long)tg[0], (long long)tc[0], margin, noise);
                }
            }
            tok = (int32_t)tc[0];   /* the CPU's greedy token drives both */
        }
        /* NMSE: <= 1e-5, or within 4x the CPU's own cross-ISA floor (prompt rows: per row;
         * decode steps: against the largest prompt-row floor). top-5 overlap >= 4/5 is
         * required only where the model is well conditioned (floor <= 1e-6); else reported. */
        const double step_limit = fmax(1e-5, 4 * floor_max);
        const bool conditioned = n_floor > 0 && floor_max <= 1e-6;
        const bool ok = prompt_over == 0 && worst_nmse <= step_limit && unexplained == 0 &&
                        (!conditioned || top5_min >= 4) && (n_floor > 0 || worst_nmse <= 1e-5);
        char fl[200];
        if (n_floor > 0)
            snprintf(fl, sizeof fl, "CPU noise floor (%s, %lld prompt rows): nmse max %.3g, top-5 min %d/5", how,
                     (long long)n_floor, floor_max, top5_floor);
        else
            snprintf(fl, sizeof fl, "no CPU noise floor (%s): absolute 1e-5 applies", how);
        (ok ? gu_pass : gu_fail)(&R, "prompt %d + %d greedy steps: logits nmse prompt max %.3g (%d rows over limit), "
                                     "steps max %.3g (limit %.3g); %s; top-5 overlap min %d/5; top-1 identical %d/%d, "
                                     "%d divergence(s) not explained by a near-tie; max |dlogit| %.3g, min top-1 margin "
                                     "%.3g; near-ties (margin <= 2 x noise): %s",
                                 NP, steps, worst_prompt, prompt_over, worst_nmse, step_limit, fl, top5_min,
                                 steps + 1 - diverged, steps + 1, unexplained, noise_max, min_margin, tl ? ties : "none");
    }
done:
    mi_session_free(sg);
    mi_session_free(sc);
    mi_model_free(mg);
    mi_model_free(mc);
}

int main(int argc, char **argv) {
    (void)argc;
    gu_init(&R, "gate-7b", "7b");
    gu_catch_crashes(&R, "gate_7b", 0);
    const char *q = getenv("MINFER_GATE_QUICK");
    g_quick = q && *q && strcmp(q, "0") != 0;
    gu_minfer_path(argv[0], g_minfer, sizeof g_minfer);
    mi_phases_install();
    const char *se = getenv("MINFER_GATE_SELFTEST");
    g_self = se && *se && strcmp(se, "0") != 0;
    if (g_self) {
        printf("MINFER_GATE_SELFTEST: a CPU backend stands in for CUDA (harness check only)\n");
        if (mi_backend_cpu_new(1, &g_cuda) != MI_OK) return 2;
        gu_init(&R, "gate-7b-selftest-cpu-vs-cpu", "7b");
    } else if (mi_backend_create("cuda", &g_cuda) != MI_OK) {
        printf("skipped: no CUDA device (%s)\n", mi_errmsg());
        gu_skip_named(&R, "gate_7b", "skipped: no CUDA device");
        return gu_finish(&R);
    }
    if (!g_self) {
        const mi_cudev_props *pr = mi_cuda_props(mi_cuda_ctx_of(g_cuda));
        snprintf(R.gpu, sizeof R.gpu, "%s", pr->name);
        snprintf(R.driver, sizeof R.driver, "cuda %d.%d", pr->driver_version / 1000, (pr->driver_version % 1000) / 10);
    }
    mi_backend *lg[2];
    const char *ct = getenv("MINFER_GATE_CPU_THREADS");
    if (ct && *ct) g_cpu_threads = atoi(ct);
    if (mi_backend_cpu_new(g_cpu_threads, &g_cpu_a) != MI_OK || mi_backend_cpu_new(g_cpu_threads, &g_cpu_b) != MI_OK) {
        fprintf(stderr, "gate_7b: cpu backend: %s\n", mi_errmsg());
        return 2;
    }
    lg[0] = g_cuda;
    lg[1] = g_cpu_a;
    if (sched_new(lg, 2, &g_sg) != MI_OK || sched_new(&g_cpu_b, 1, &g_sc) != MI_OK) {
        fprintf(stderr, "gate_7b: sched: %s\n", mi_errmsg());
        return 2;
    }
    gate7b_env_set(&(gate7b_env){.r = &R, .cuda = g_cuda, .sg = g_sg, .sc = g_sc, .seed = &g_seed, .self = g_self});
    test_ew();
    test_get_rows();
    test_matmul();
    gate7b_kv_attn(MI_TYPE_F16, 128, 28, 4);
    gate7b_kv_attn(MI_TYPE_F16, 64, 14, 2);
    gate7b_layer_chain(MI_TYPE_Q4_K);
    gate7b_layer_chain(MI_TYPE_Q8_0);
    printf("worst matmul nmse vs the CPU backend per type:");
    for (int ti = 0; ti < N_TYPES; ti++) printf(" %s %.2g", mi_type_name(k_types[ti]), g_mm_worst[k_types[ti]]);
    printf("\n");
    {   /* the per-op backends stay alive meanwhile (selftest: both sessions on the CPU) */
        const char *st = getenv("MINFER_GATE_STEPS");
        const int steps = st && *st ? atoi(st) : 64;
        test_model("qwen2.5-0.5b", "q4_0", steps);
        test_model("qwen3-0.6b", "q8_0", steps);
        if (getenv("MINFER_GATE_NO_7B") == NULL) test_model("qwen2.5-7b", "q4_k_m", steps);
        else gu_skip_named(&R, "model_qwen2.5-7b_q4_k_m", "MINFER_GATE_NO_7B set");
    }
    gate7b_kv_attn(MI_TYPE_F32, 128, 16, 16);
    sched_free(g_sg);
    sched_free(g_sc);
    g_cuda->iface->destroy(g_cuda);
    g_cpu_a->iface->destroy(g_cpu_a);
    g_cpu_b->iface->destroy(g_cpu_b);
    return gu_finish(&R);
}

/* Micro-benchmark (not a test): weight GB/s of the matrix-vector dot for every
 * weight type and ISA, on 1 and 2 threads, beside the DRAM read bandwidth
 * measured in the same run just before each row (this guest's bandwidth drifts).
 *   bench_quant [-o results/bench-quant-cpu.txt] [-mb 256] [-reps 5]
 * Weights are random blocks with finite scales (speed does not depend on values). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>
#include "common/core/mi_fp16.h"
#include "common/quant/mi_types.h"

#define NTHREADS_MAX 2
#define ROW_N 4096 /* elements per row: a 4096-wide layer */

static clockid_t g_clock = CLOCK_MONOTONIC;
static double now(void) {
    struct timespec ts;
    clock_gettime(g_clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

/* ---- work split over threads: rows [r0, r1) each ---- */
typedef struct {
    int mode; /* 0 = memory read, 1 = dot rows */
    const uint8_t *buf;
    size_t r0, r1, row_bytes;
    int loops; /* passes over the rows (in-cache runs) */
    mi_vec_dot_fn dot;
    const void *act;
    float *out;
    double sink;
} job;

__attribute__((target("avx2"))) static double read_bytes(const uint8_t *p, size_t len) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= len; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    return (double)_mm256_extract_epi64(s, 0);
}

static void *run_job(void *arg) {
    job *j = arg;
    if (j->mode == 0) {
        j->sink += read_bytes(j->buf + j->r0 * j->row_bytes, (j->r1 - j->r0) * j->row_bytes);
    } else {
        for (int l = 0; l < j->loops; l++)
            for (size_t r = j->r0; r < j->r1; r++) j->dot(ROW_N, &j->out[r], j->buf + r * j->row_bytes, j->act);
    }
    return NULL;
}

/* best-of-reps seconds to run the job over all rows on nt threads */
static double timed(job base, size_t rows, int nt, int reps) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        pthread_t th[NTHREADS_MAX];
        job jobs[NTHREADS_MAX];
        const double t0 = now();
        for (int t = 0; t < nt; t++) {
            jobs[t] = base;
            jobs[t].r0 = rows * (size_t)t / (size_t)nt;
            jobs[t].r1 = rows * (size_t)(t + 1) / (size_t)nt;
            if (t) pthread_create(&th[t], NULL, run_job, &jobs[t]);
        }
        run_job(&jobs[0]);
        for (int t = 1; t < nt; t++) pthread_join(th[t], NULL);
        const double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

static void fill_weights(mi_type t, uint8_t *p, size_t bytes) {
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        const uint64_t v = rnd();
        memcpy(p + i, &v, 8);
    }
    const mi_type_traits *tr = mi_type_get(t);
    const uint16_t h = mi_f32_to_f16(0.01f);
    if (t == MI_TYPE_F32) for (size_t i = 0; i < bytes / 4; i++) ((float *)p)[i] = 0.01f;
    else if (t == MI_TYPE_F16 || t == MI_TYPE_BF16) for (size_t i = 0; i < bytes / 2; i++) ((uint16_t *)p)[i] = h;
    else
        for (size_t b = 0; b < bytes / tr->type_size; b++) { /* finite scales */
            uint8_t *blk = p + b * tr->type_size;
            if (t == MI_TYPE_Q6_K) memcpy(blk + 208, &h, 2);
            else memcpy(blk, &h, 2);
            if (t == MI_TYPE_Q4_1 || t == MI_TYPE_Q5_1 || t == MI_TYPE_Q4_K || t == MI_TYPE_Q5_K) memcpy(blk + 2, &h, 2);
        }
}

int main(int argc, char **argv) {
    const char *out_path = NULL;
    size_t mb = 256;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "-mb") && i + 1 < argc) mb = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "-reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_quant [-o FILE] [-mb MiB] [-reps N]\n");
            return 1;
        }
    }
    if (mb < 16 || reps < 1) {
        fprintf(stderr, "bench_quant: -mb must be >= 16 and -reps >= 1\n");
        return 1;
    }
    FILE *out = out_path ? fopen(out_path, "w") : NULL;
    if (out_path && !out) {
        fprintf(stderr, "bench_quant: cannot write %s\n", out_path);
        return 1;
    }
    const size_t bytes = mb << 20;
    uint8_t *buf = aligned_alloc(64, bytes);
    float *act_f = malloc(ROW_N * sizeof(float));
    void *act = malloc(ROW_N * sizeof(mi_block_q8_k)); /* room for any activation type */
    float *res = malloc((bytes / 64 + 1) * sizeof(float));
    if (!buf || !act_f || !act || !res) {
        fprintf(stderr, "bench_quant: out of memory\n");
        return 1;
    }
    memset(buf, 1, bytes);
    for (int i = 0; i < ROW_N; i++) act_f[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;

    char line[512];
#define EMIT(...) do { snprintf(line, sizeof line, __VA_ARGS__); fputs(line, stdout); if (out) fputs(line, out); fflush(stdout); } while (0)
    time_t tnow = time(NULL);
    char tbuf[64];
    strftime(tbuf, sizeof tbuf, "%Y-%m-%d %H:%M UTC", gmtime(&tnow));
    EMIT("# bench_quant %s: matrix-vector dot, rows of %d, %zu MiB of weights per type (L3 here: 32 MiB), best of %d\n",
         tbuf, ROW_N, mb, reps);
    char load[64] = "?";
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (!fgets(load, sizeof load, la)) strcpy(load, "?");
        fclose(la);
        load[strcspn(load, "\n")] = 0;
    }
    EMIT("# load average at start: %s (a shared machine: 2T figures suffer when the other core is busy)\n", load);
    EMIT("# best ISA on this CPU: %s. GB/s = weight bytes / time. mem = DRAM read GB/s (1T / 2T) measured just before\n",
         mi_isa_name(mi_cpu_best_isa()));
    EMIT("# w L2 1T = the same dot on 1 MiB of weights that stay in L2 (kernel speed, no DRAM; thread CPU time)\n");
    EMIT("# %-5s %-7s %9s %9s %9s %9s %7s %9s\n", "type", "isa", "w 1T", "w 2T", "mem 1T", "mem 2T", "2T/mem", "w L2 1T");
    const mi_type types[] = {MI_TYPE_F32, MI_TYPE_F16, MI_TYPE_BF16, MI_TYPE_Q4_0, MI_TYPE_Q4_1, MI_TYPE_Q5_0,
                             MI_TYPE_Q5_1, MI_TYPE_Q8_0, MI_TYPE_Q4_K, MI_TYPE_Q5_K, MI_TYPE_Q6_K};
    const mi_isa isas[] = {MI_ISA_SCALAR, MI_ISA_AVX2, MI_ISA_AVX512};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const mi_type t = types[ti];
        const mi_type_traits *tr = mi_type_get(t);
        const size_t row_bytes = mi_row_size(t, ROW_N), rows = bytes / row_bytes;
        fill_weights(t, buf, rows * row_bytes);
        mi_get_quantize_act(tr->vec_dot_type, MI_ISA_SCALAR)(act_f, act, ROW_N);
        for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
            mi_vec_dot_fn dot = mi_get_vec_dot(t, isas[ii]);
            if (!dot) continue;
            job mem = {.mode = 0, .buf = buf, .row_bytes = row_bytes};
            const double m1 = (double)(rows * row_bytes) / timed(mem, rows, 1, 3) / 1e9;
            const double m2 = (double)(rows * row_bytes) / timed(mem, rows, 2, 3) / 1e9;
            job dj = {.mode = 1, .buf = buf, .row_bytes = row_bytes, .dot = dot, .act = act, .out = res, .loops = 1};
            const int r = isas[ii] == MI_ISA_SCALAR ? 1 : reps;
            const double w1 = (double)(rows * row_bytes) / timed(dj, rows, 1, r) / 1e9;
            const double w2 = (double)(rows * row_bytes) / timed(dj, rows, 2, r) / 1e9;
            const size_t rows_l2 = ((size_t)1 << 20) / row_bytes;
            job dl2 = dj;
            dl2.loops = isas[ii] == MI_ISA_SCALAR ? 4 : 64;
            /* thread CPU time: the machine is shared, and this column is about the kernel */
            g_clock = CLOCK_THREAD_CPUTIME_ID;
            const double wl2 = (double)(rows_l2 * row_bytes) * dl2.loops / timed(dl2, rows_l2, 1, 5) / 1e9;
            g_clock = CLOCK_MONOTONIC;
            EMIT("  %-5s %-7s %9.2f %9.2f %9.2f %9.2f %6.0f%% %9.2f\n", tr->name, mi_isa_name(isas[ii]), w1, w2, m1, m2,
                 100.0 * w2 / m2, wl2);
        }
    }
    if (out) fclose(out);
    free(buf);
    free(act_f);
    free(act);
    free(res);
    return 0;
}

/* `minfer bench`: llama-bench-shaped throughput runs. ppN = N random (fixed-seed) tokens
 * fed as one batch; tgN = N single-token decodes; both into an empty cache, or with -d D
 * after D tokens already in it ("tg128 @ d4096": the context is filled once per depth,
 * untimed, and cut back to D before every repetition).
 * Prints a table (mean ± sd over -r reps; the header at once, each row as its test
 * finishes), peak RSS against model file + KV cache, the DRAM read bandwidth measured in
 * the same run (CPU), and one JSON line per test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <math.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <immintrin.h>
#include "common/model/mi.h"
#include "common/core/mi_progress.h"
#include "common/gguf/gguf.h"
#include "common/backend/backend.h"
#include "tools/cli.h"
#include "tools/bench_facts.h"

/* ---- DRAM read bandwidth: threads sum disjoint slices of a buffer much larger than L3 ---- */

typedef struct { const uint64_t *p; size_t n; uint64_t sum; } bw_slice;

__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 12)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, a0);
    uint64_t s = t[0] + t[1] + t[2] + t[3];
    for (; i < n; i++) s += p[i];
    return s;
}

static uint64_t sum_plain(const uint64_t *p, size_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) { s0 += p[i]; s1 += p[i + 1]; s2 += p[i + 2]; s3 += p[i + 3]; }
    for (; i < n; i++) s0 += p[i];
    return s0 + s1 + s2 + s3;
}

static void *bw_worker(void *arg) {
    bw_slice *s = arg;
    s->sum = __builtin_cpu_supports("avx2") ? sum_avx2(s->p, s->n) : sum_plain(s->p, s->n);
    return NULL;
}

/* Best of 5 passes over 512 MiB with n_threads threads, in GB/s. */
static double measure_bw(int n_threads) {
    const size_t bytes = (size_t)512 << 20, n = bytes / 8;
    uint64_t *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return 0.0;
    for (size_t i = 0; i < n; i++) buf[i] = i;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 64) n_threads = 64;
    double best = 0.0;
    uint64_t sink = 0;
    for (int pass = 0; pass < 5; pass++) {
        pthread_t th[64];
        bw_slice sl[64];
        size_t per = (n / (size_t)n_threads) & ~(size_t)15;
        double t0 = mi_now_s();
        for (int t = 0; t < n_threads; t++) {
            sl[t].p = buf + per * (size_t)t;
            sl[t].n = t == n_threads - 1 ? n - per * (size_t)t : per;
            pthread_create(&th[t], NULL, bw_worker, &sl[t]);
        }
        for (int t = 0; t < n_threads; t++) {
            pthread_join(th[t], NULL);
            sink += sl[t].sum;
        }
        double gb = (double)bytes / (mi_now_s() - t0) / 1e9;
        if (gb > best) best = gb;
    }
    munmap(buf, bytes);
    return sink == 42 ? best + 1e-9 : best;   /* keep the sums live */
}

/* In a child process, so the 512 MiB buffer never counts in our peak RSS. */
static double measure_bw_child(int n_threads) {
    int fd[2];
    if (pipe(fd)) return 0.0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) { close(fd[0]); close(fd[1]); return 0.0; }
    if (pid == 0) {
        close(fd[0]);
        double v = measure_bw(n_threads);
        ssize_t w = write(fd[1], &v, sizeof v);
        (void)w;
        _exit(0);
    }
    close(fd[1]);
    double v = 0.0;
    if (read(fd[0], &v, sizeof v) != (ssize_t)sizeof v) v = 0.0;
    close(fd[0]);
    waitpid(pid, NULL, 0);
    return v;
}

/* ---- run description ---- */

/* general.file_type (llama_ftype numbering) for the common mixes */
static const char *ftype_name(uint32_t ft) {
    switch (ft) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 14: return "Q4_K_S";
    case 15: return "Q4_K_M";
    case 16: return "Q5_K_S";
    case 17: return "Q5_K_M";
    case 18: return "Q6_K";
    case 32: return "BF16";
    }
    return NULL;
}

typedef struct {
    char test[32];
    int64_t depth;   /* tokens in the context before the test */
    int64_t step_kernels;   /* tg: kernels one decode step launched (captured graph), -1 unknown */
    double host_us[4];      /* tg: a step's host microseconds in the scheduler (mi_session_host_times) */
    double step_us;         /* tg: a step's wall microseconds over the timed repetitions */
    double mean, sd, gb_s;
    int reps;
} bench_row;

static void mean_sd(const double *v, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
}

static int bench_fail(const char *what) {
    fprintf(stderr, "minfer: %s\n", what);
    return 1;
}

static void bench_usage(FILE *f) {
    fprintf(f, "usage: minfer bench -m FILE [-p 512,2048] [-n 128] [-d 0,4096] [-r 5] [-t THREADS] [--backend cpu|cuda|auto]\n"
               "                    [--kv f16|f32] [--json PATH]\n"
               "  -p 0 or -n 0 skips that test; JSON lines go to --json PATH (appended), else to stdout\n"
               "  -d D,...: run every test after D tokens already in the context (default 0)\n"
               "  -t THREADS: CPU threads, 1..%d; 0 (the default) means one per online CPU\n"
               "       minfer bench --batch 1,4,16 -m FILE [-p 512] [-n 128] [-t N] [--ubatch 2048] [--pool shared|row] [--backend ...] [--json PATH]\n"
               "  many sequences in one step: llama-batched-bench's table (tools/cmd_bench_batch.c)\n",
            mi_cli_max_threads());
}

typedef struct {
    const char *model, *backend, *json;
    int n_gen, reps, n_threads, n_pp, n_depth;
    int64_t pp[16], depth[8];
    bool kv_f32;
} bench_args;

/* Returns -1 to go on, else the exit status (0 after --help). */
static int bench_parse(int argc, char **argv, bench_args *a) {
    const char *plist = "512", *dlist = "0";
    *a = (bench_args){.backend = "auto", .n_gen = 128, .reps = 5};
    static const char *const valued[] = {"-m", "-p", "-n", "-d", "-r", "-t", "--backend", "--kv", "--json"};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            bench_usage(stdout);
            return 0;
        }
        bool known = false;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= !strcmp(o, valued[k]);
        if (!known) {
            fprintf(stderr, o[0] == '-' ? "minfer: unknown option '%s'\n" : "minfer: unexpected argument '%s'\n", o);
            bench_usage(stderr);
            return 1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "minfer: option '%s' needs a value\n", o);
            return 1;
        }
        const char *v = argv[++i];
        char *end = NULL, err[256];
        if (!strcmp(o, "-m")) a->model = v;
        else if (!strcmp(o, "-p")) plist = v;
        else if (!strcmp(o, "-d")) dlist = v;
        else if (!strcmp(o, "--backend")) a->backend = v;
        else if (!strcmp(o, "--json")) a->json = v;
        else if (!strcmp(o, "-t")) {
            if (mi_cli_threads(v, &a->n_threads, err, sizeof err)) return bench_fail(err);
        } else if (!strcmp(o, "--kv") && (!strcmp(v, "f16") || !strcmp(v, "f32"))) a->kv_f32 = !strcmp(v, "f32");
        else if (!strcmp(o, "-n") && (a->n_gen = (int)strtol(v, &end, 10), *end == 0 && a->n_gen >= 0)) {}
        else if (!strcmp(o, "-r") && (a->reps = (int)strtol(v, &end, 10), *end == 0 && a->reps > 0 && a->reps <= 1000)) {}
        else {
            fprintf(stderr, "minfer: bad value for %s: '%s'\n", o, v);
            return 1;
        }
    }
    if (!a->model) return bench_fail("no model given (-m FILE)");
    for (const char *p = plist; *p;) {
        char *end;
        long long x = strtoll(p, &end, 10);
        if (end == p || (*end && *end != ',') || x < 0 || x > (1 << 20) || a->n_pp == 16)
            return bench_fail("-p wants a list like 512,2048");
        if (x > 0) a->pp[a->n_pp++] = x;
        p = *end ? end + 1 : end;
    }
    for (const char *p = dlist; *p;) {
        char *end;
        long long x = strtoll(p, &end, 10);
        if (end == p || (*end && *end != ',') || x < 0 || x > (1 << 20) || a->n_depth == 8)
            return bench_fail("-d wants up to 8 depths like 0,4096 (tokens already in the context)");
        a->depth[a->n_depth++] = x;
        p = *end ? end + 1 : end;
    }
    if (a->n_depth == 0) return bench_fail("-d wants up to 8 depths like 0,4096 (tokens already in the context)");
    return -1;
}

/* " @ d4096" for a test at depth 4096, "" at depth 0 (llama-bench's names) */
static const char *depth_label(int64_t d) {
    static _Thread_local char b[32];
    if (d <= 0) return "";
    snprintf(b, sizeof b, " @ d%lld", (long long)d);
    return b;
}

/* d tokens into an empty context, untimed, in pieces so a long fill shows its progress */
static mi_status fill_context(mi_session *s, const int32_t *ids, int64_t d) {
    mi_session_reset(s);
    mi_progress pg;
    const bool show = d >= 4096;
    if (show) mi_progress_start(&pg, "filling the context");
    mi_status st = MI_OK;
    for (int64_t done = 0; done < d && st == MI_OK;) {
        const int64_t n = d - done < 2048 ? d - done : 2048;
        st = mi_session_decode(s, ids + done, n, false);
        done += n;
        if (show && st == MI_OK) mi_progress_count(&pg, done, d, "tokens");
    }
    if (show) {
        if (st == MI_OK) mi_progress_end(&pg);
        else mi_progress_clear(&pg);   /* the error message starts on a clean line */
    }
    return st;
}

typedef struct {
    mi_session *s;
    mi_model *m;
    const int32_t *ids;
    double *tv;
    int reps;
    const char *mname, *type, *be;
    int threads;
} bench_ctx;

/* One test (ppN or tgN) at depth d: a warm-up and reps timed repetitions, each from the
 * context cut back to d tokens; prints its row. Returns 0, or 1 with the message printed. */
static int bench_one(const bench_ctx *b, bool is_tg, int64_t n, int64_t d, bench_row *row) {
    snprintf(row->test, sizeof row->test, "%s%lld", is_tg ? "tg" : "pp", (long long)n);
    row->depth = d;
    double bytes_total = 0, h0[4] = {0}, h1[4], t_timed = 0;
    for (int r = -1; r < b->reps; r++) {   /* r = -1: warm-up, not timed */
        if (r == 0) mi_session_host_times(b->s, h0);
        mi_status st = d > 0 ? mi_session_truncate(b->s, d) : MI_OK;
        if (d == 0) mi_session_reset(b->s);
        const int32_t *ids = b->ids + d;
        double t0 = mi_now_s();
        if (st == MI_OK && !is_tg) st = mi_session_decode(b->s, ids, n, false);
        for (int64_t i = 0; st == MI_OK && is_tg && i < n; i++) st = mi_session_decode(b->s, ids + i, 1, false);
        double dt = mi_now_s() - t0;
        if (st != MI_OK) {
            fprintf(stderr, "minfer: %s%s: %s\n", row->test, depth_label(d), mi_errmsg());
            return 1;
        }
        if (r < 0) continue;
        t_timed += dt;
        b->tv[r] = (double)n / dt;
        if (is_tg) {
            double bytes = 0;
            for (int64_t i = 0; i < n; i++)
                bytes += (double)mi_model_bytes_per_token(b->m) + (double)mi_session_kv_read_bytes(b->s, d + i + 1);
            bytes_total += bytes / dt;
        }
    }
    mean_sd(b->tv, b->reps, &row->mean, &row->sd);
    row->reps = b->reps;
    row->gb_s = is_tg ? bytes_total / b->reps / 1e9 : 0.0;
    row->step_kernels = is_tg ? mi_session_step_kernels(b->s) : -1;
    mi_session_host_times(b->s, h1);
    for (int i = 0; i < 4; i++) row->host_us[i] = is_tg ? 1e6 * (h1[i] - h0[i]) / ((double)b->reps * (double)n) : 0.0;
    row->step_us = 1e6 * t_timed / ((double)b->reps * (double)n);
    char gbs[32] = "";
    if (row->gb_s > 0) snprintf(gbs, sizeof gbs, "%.1f", row->gb_s);
    printf("| %s | %s | %.1f MiB | %s | %d | %s%s | %.2f ± %.2f | %s |\n", b->mname, b->type,
           mi_model_weight_bytes(b->m) / 1048576.0, b->be, b->threads, row->test, depth_label(d), row->mean, row->sd,
           gbs);
    fflush(stdout);
    return 0;
}

/* what every JSON record of one bench run shares */
typedef struct {
    const char *model, *shape, *arch, *type, *backend;
    int threads;
    double mem_bw, rss_mb, file_mb, kv_mb;
    const char *kv;
    int64_t n_ctx;
    const bench_facts *facts;
} bench_record;

/* one row's JSON record, a line (the fields llama-bench's records carry, and ours) */
static void write_record(FILE *jf, const bench_record *b, const bench_row *row) {
    const bench_facts *rf = b->facts;
    fprintf(jf, "{\"model\":");
    bench_json_str(jf, b->model);
    fprintf(jf, ",\"shape\":");
    bench_json_str(jf, b->shape);
    fprintf(jf, ",\"arch\":\"%s\",\"type\":\"%s\",\"backend\":\"%s\",\"threads\":%d,\"test\":\"%s\",\"depth\":%lld,"
                "\"tok_s\":%.3f,\"tok_s_sd\":%.3f,\"reps\":%d,\"gb_s\":%.3f,\"mem_bw_gb_s\":%.3f,"
                "\"peak_rss_mb\":%.1f,\"model_file_mb\":%.1f,\"kv_mb\":%.1f,\"kv\":\"%s\",\"n_ctx\":%lld,\"gpu\":",
            b->arch, b->type, b->backend, b->threads, row->test, (long long)row->depth, row->mean, row->sd, row->reps,
            row->gb_s, b->mem_bw, b->rss_mb, b->file_mb, b->kv_mb, b->kv, (long long)b->n_ctx);
    bench_json_str(jf, rf->gpu);
    fprintf(jf, ",\"driver\":");
    bench_json_str(jf, rf->driver);
    fprintf(jf, ",\"cpu\":");
    bench_json_str(jf, rf->cpu);
    if (row->step_kernels >= 0) fprintf(jf, ",\"kernels_per_step\":%lld", (long long)row->step_kernels);
    if (row->host_us[0] > 0)
        fprintf(jf, ",\"host_step_us\":{\"run\":%.1f,\"split_begin\":%.1f,\"nodes\":%.1f,\"split_end\":%.1f}",
                row->host_us[0], row->host_us[1], row->host_us[2], row->host_us[3]);
    fprintf(jf, ",\"commit\":\"%s\",\"phase\":\"%s\",\"switches\":", rf->commit, mi_build_phase);
    bench_json_str(jf, rf->switches);
    fprintf(jf, ",\"date\":\"%s\"}\n", rf->date);
}

int cmd_bench_batch(int argc, char **argv);

int cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--batch")) return cmd_bench_batch(argc, argv);   /* phase 8b's batched steps */
    bench_args ba;
    int prc = bench_parse(argc, argv, &ba);
    if (prc >= 0) return prc;
    const char *model = ba.model, *backend = ba.backend, *json = ba.json;
    const int n_gen = ba.n_gen, reps = ba.reps, n_threads = ba.n_threads, n_pp = ba.n_pp;
    const int64_t *pp = ba.pp;
    const bool kv_f32 = ba.kv_f32;

    mi_model *m = NULL;
    mi_model_params mp = {backend};
    if (mi_model_load_params(model, &mp, &m) != MI_OK) return bench_fail(mi_errmsg());
    const mi_hparams *hp = mi_model_hparams(m);
    gguf_file *gf = mi_model_gguf(m);
    int64_t n_ctx = n_gen, max_depth = 0;
    for (int i = 0; i < n_pp; i++) if (pp[i] > n_ctx) n_ctx = pp[i];
    for (int i = 0; i < ba.n_depth; i++) if (ba.depth[i] > max_depth) max_depth = ba.depth[i];
    n_ctx += max_depth;
    if (n_ctx < 16) n_ctx = 16;
    mi_session_params sp;
    mi_session_params_default(&sp);
    sp.backend = backend;
    sp.n_threads = n_threads;
    sp.n_ctx = n_ctx;
    sp.kv_type = kv_f32 ? MI_TYPE_F32 : MI_TYPE_F16;
    mi_session *s = NULL;
    if (mi_session_new(m, &sp, &s) != MI_OK) {
        fprintf(stderr, "minfer: %s\n", mi_errmsg());
        mi_model_free(m);
        return 1;
    }
    const char *be = mi_session_backend(s);
    int threads = n_threads > 0 ? n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);

    /* fixed pseudo-random ids: speed does not depend on them, reruns are identical */
    int64_t n_ids = n_ctx;
    int32_t *ids = malloc((size_t)n_ids * sizeof *ids);
    double *tv = malloc((size_t)reps * sizeof *tv);
    const int n_tests = n_pp + (n_gen > 0);
    bench_row *rows = calloc((size_t)(n_tests * ba.n_depth) + 1, sizeof *rows);
    if (!ids || !tv || !rows) {
        free(ids);
        free(tv);
        free(rows);
        mi_session_free(s);
        mi_model_free(m);
        return bench_fail("out of memory");
    }
    uint64_t st = 0x5eed;
    for (int64_t i = 0; i < n_ids; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((st >> 33) % (uint64_t)hp->n_vocab);
    }

    const char *slash = strrchr(model, '/');
    const char *mname = slash ? slash + 1 : model;
    char type[32];
    uint32_t ft = 0;
    const char *ftn = (gguf_find_key(gf, "general.file_type") >= 0 && gguf_get_u32(gf, "general.file_type", &ft) == MI_OK) ? ftype_name(ft) : NULL;
    snprintf(type, sizeof type, "%s", ftn ? ftn : mi_type_name(mi_model_dominant_type(m)));

    /* the table's header now and each row as its test ends, as llama-bench does: a long
     * run shows its first results while the rest are still measuring */
    printf("| model | type | size | backend | threads | test | t/s | GB/s |\n");
    printf("| --- | --- | ---: | --- | ---: | --- | ---: | ---: |\n");
    fflush(stdout);
    int n_rows = 0;
    double bw_before = 0, bw_after = 0;
    int rc = 0;
    bench_ctx bc = {s, m, ids, tv, reps, mname, type, be, threads};
    for (int di = 0; di < ba.n_depth && !rc; di++) {
        const int64_t d = ba.depth[di];
        if (d > 0 && fill_context(s, ids, d) != MI_OK) {
            fprintf(stderr, "minfer: filling the context to depth %lld: %s\n", (long long)d, mi_errmsg());
            rc = 1;
            break;
        }
        for (int ti = 0; ti < n_tests && !rc; ti++) {
            const bool is_tg = ti == n_pp;
            bench_row *row = &rows[n_rows++];
            if (is_tg && !strcmp(be, "cpu") && bw_before == 0) bw_before = measure_bw_child(threads);
            rc = bench_one(&bc, is_tg, is_tg ? n_gen : pp[ti], d, row);
            if (is_tg && !strcmp(be, "cpu")) bw_after = measure_bw_child(threads);
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_mb = ru.ru_maxrss / 1024.0;
    double file_mb = gguf_file_size(gf) / 1048576.0, kv_mb = mi_session_kv_bytes(s) / 1048576.0;
    double mem_bw = (bw_before > 0 && bw_after > 0) ? 0.5 * (bw_before + bw_after) : (bw_before > 0 ? bw_before : bw_after);

    bench_facts rf;
    bench_facts_gather(be, &rf);
    char shape[128];   /* the model's name, else its architecture */
    const char *gn;
    size_t gl;
    if (gguf_find_key(gf, "general.name") >= 0 && gguf_get_str(gf, "general.name", &gn, &gl) == MI_OK)
        snprintf(shape, sizeof shape, "%.*s", (int)(gl < 100 ? gl : 100), gn);
    else
        snprintf(shape, sizeof shape, "%s", hp->arch_name);

    if (!rc) {
        char nth[32];
        if (mem_bw > 0)
            printf("memory read bandwidth (same run, %s): %.1f GB/s before tg, %.1f GB/s after%s\n",
                   mi_cli_plural(threads, "thread", nth, sizeof nth), bw_before, bw_after, n_gen > 0 ? "" : " (no tg test)");
        for (int i = 0; i < n_rows; i++)
            if (rows[i].step_kernels >= 0)
                printf("%s%s: %lld kernels per decode step (its captured graph)\n", rows[i].test,
                       depth_label(rows[i].depth), (long long)rows[i].step_kernels);
        for (int i = 0; i < n_rows; i++)
            if (rows[i].host_us[0] > 0)
                printf("%s%s: a decode step's host time in the scheduler %.0f us (split set-up %.0f, nodes %.0f, split "
                       "ends %.0f) of %.0f us a token\n",
                       rows[i].test, depth_label(rows[i].depth), rows[i].host_us[0], rows[i].host_us[1], rows[i].host_us[2],
                       rows[i].host_us[3], rows[i].step_us);
        for (int i = 0; i < n_rows; i++)
            if (rows[i].gb_s > 0 && mem_bw > 0)
                printf("%s%s decode: %.1f GB/s = %.0f%% of the measured bandwidth\n", rows[i].test,
                       depth_label(rows[i].depth), rows[i].gb_s, 100.0 * rows[i].gb_s / mem_bw);
        printf("peak RSS %.1f MiB; model file %.1f MiB + KV cache %.1f MiB = %.1f MiB (+10%%: %.1f MiB)%s\n", rss_mb,
               file_mb, kv_mb, file_mb + kv_mb, 1.1 * (file_mb + kv_mb), rss_mb <= 1.1 * (file_mb + kv_mb) ? "" : "  ** over **");
    }

    FILE *jf = stdout;
    if (json && !rc) {
        jf = fopen(json, "a");
        if (!jf) {
            fprintf(stderr, "minfer: cannot append to '%s'\n", json);
            rc = 1;
        }
    }
    if (!rc) {
        const bench_record rec = {mname, shape, hp->arch_name, type, be, threads, mem_bw, rss_mb, file_mb, kv_mb,
                                  kv_f32 ? "f32" : "f16", mi_session_n_ctx(s), &rf};
        for (int i = 0; i < n_rows; i++) write_record(jf, &rec, &rows[i]);
    }
    if (jf && jf != stdout) fclose(jf);
    free(rows);
    free(ids);
    free(tv);
    mi_session_free(s);
    mi_model_free(m);
    return rc;
}

/* gates/gate_util.h: the gate programs' per-test records, closing line and JSON summary,
 * their crash handler, and the seeded test data and comparisons they share. */
#include "gates/gate_util.h"
#include "common/core/mi_settings.h"
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

double gu_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void gu_init(gu_run *r, const char *gate, const char *phase) {
    memset(r, 0, sizeof *r);
    r->gate = gate;
    r->phase = phase;
    snprintf(r->gpu, sizeof r->gpu, "none");
    snprintf(r->driver, sizeof r->driver, "none");
}

int gu_begin(gu_run *r, const char *name) {
    snprintf(r->cur, sizeof r->cur, "%s", name);
    r->t_begin = gu_now_ms();
    r->open = 1;
    return gu_selected(name);
}

static int g_record_all;   /* a crash is recorded whatever the selection */

void gu_vrecord(gu_run *r, const char *status, const char *fmt, va_list ap) {
    if (!g_record_all && !gu_selected(r->cur)) {   /* left out by MINFER_GATE_ONLY: not recorded at all */
        r->open = 0;
        return;
    }
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 32;
        gu_test *t = (gu_test *)realloc(r->tests, (size_t)cap * sizeof *t);
        if (!t) { fprintf(stderr, "gate: out of memory\n"); exit(2); }
        r->tests = t;
        r->cap = cap;
    }
    gu_test *t = &r->tests[r->n++];
    snprintf(t->name, sizeof t->name, "%s", r->cur);
    t->status = status;
    vsnprintf(t->detail, sizeof t->detail, fmt, ap);
    t->ms = r->open ? gu_now_ms() - r->t_begin : 0.0;
    r->open = 0;
    if (!strcmp(status, "pass")) r->passed++;
    else if (!strcmp(status, "fail")) r->failed++;
    else r->skipped++;
    printf("%-4s  %-34s %9.1f ms  %s\n", !strcmp(status, "pass") ? "ok" : !strcmp(status, "fail") ? "FAIL" : "skip",
           t->name, t->ms, t->detail);
    fflush(stdout);
}

void gu_pass(gu_run *r, const char *fmt, ...) { va_list ap; va_start(ap, fmt); gu_vrecord(r, "pass", fmt, ap); va_end(ap); }
void gu_fail(gu_run *r, const char *fmt, ...) { va_list ap; va_start(ap, fmt); gu_vrecord(r, "fail", fmt, ap); va_end(ap); }
void gu_skip(gu_run *r, const char *fmt, ...) { va_list ap; va_start(ap, fmt); gu_vrecord(r, "skip", fmt, ap); va_end(ap); }

void gu_skip_named(gu_run *r, const char *name, const char *why) {
    gu_begin(r, name);
    gu_skip(r, "%s", why);
}

int gu_env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0");
}

int gu_selected(const char *name) {
    const char *e = getenv("MINFER_GATE_ONLY");
    if (!e || !*e) return 1;
    const size_t l = strlen(name);
    for (const char *p = e; *p;) {
        const char *c = strchr(p, ',');
        const size_t n = c ? (size_t)(c - p) : strlen(p);
        if (n == l && !strncmp(p, name, l)) return 1;
        if (n > 0 && p[n - 1] == '*' && n - 1 <= l && !strncmp(p, name, n - 1)) return 1;   /* a prefix */
        p += n + (c ? 1 : 0);
    }
    return 0;
}

void gu_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void gu_commit(char *buf, size_t n) {
    const char *e = getenv("MINFER_COMMIT");
    if (e && *e) { snprintf(buf, n, "%s", e); return; }
    snprintf(buf, n, "unknown");
    FILE *p = popen(MI_COMMIT_FROM_GIT("--short=12"), "r");
    if (!p) return;
    char line[128];
    if (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0]) snprintf(buf, n, "%s", line);
    }
    pclose(p);
}

void gu_utc_now(char *buf, size_t n) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int gu_finish(gu_run *r) {
    printf("%d passed, %d failed, %d skipped\n", r->passed, r->failed, r->skipped);
    fflush(stdout);
    const char *path = getenv("MINFER_GATE_JSON");
    if (path && *path) {
        FILE *f = fopen(path, "w");
        if (!f) {
            fprintf(stderr, "gate: cannot write %s\n", path);
            return 2;
        }
        char commit[128], date[64];
        gu_commit(commit, sizeof commit);
        gu_utc_now(date, sizeof date);
        fputs("{\"gate\": ", f); gu_json_str(f, r->gate);
        fputs(", \"phase\": ", f); gu_json_str(f, r->phase);
        fputs(", \"commit\": ", f); gu_json_str(f, commit);
        fputs(", \"date\": ", f); gu_json_str(f, date);
        fputs(", \"gpu\": ", f); gu_json_str(f, r->gpu);
        fputs(", \"driver\": ", f); gu_json_str(f, r->driver);
        fprintf(f, ", \"passed\": %d, \"failed\": %d, \"skipped\": %d, \"tests\": [", r->passed, r->failed, r->skipped);
        for (int i = 0; i < r->n; i++) {
            gu_test *t = &r->tests[i];
            fputs(i ? ",\n  {\"name\": " : "\n  {\"name\": ", f); gu_json_str(f, t->name);
            fputs(", \"status\": ", f); gu_json_str(f, t->status);
            fputs(", \"detail\": ", f); gu_json_str(f, t->detail);
            fprintf(f, ", \"ms\": %.3f}", t->ms);
        }
        fputs("\n]}\n", f);
        fclose(f);
    }
    free(r->tests);
    return r->failed ? 1 : 0;
}

unsigned long long gu_rng(unsigned long long *s) {
    unsigned long long x = *s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

void gu_fill(void *p, size_t n, unsigned long long seed) {
    unsigned long long s = seed * 0x9E3779B97F4A7C15ULL + 1;
    unsigned char *b = (unsigned char *)p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { unsigned long long v = gu_rng(&s); memcpy(b + i, &v, 8); }
    if (i < n) { unsigned long long v = gu_rng(&s); memcpy(b + i, &v, n - i); }
}

uint32_t gu_fnv1a(const void *p, size_t n) {
    const uint8_t *b = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

size_t gu_first_diff(const void *a, const void *b, size_t n) {
    if (!memcmp(a, b, n)) return (size_t)-1;
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    size_t lo = 0;
    /* narrow with memcmp on blocks, then bytes */
    while (n - lo > 4096 && !memcmp(x + lo, y + lo, 4096)) lo += 4096;
    for (size_t i = lo; i < n; i++) if (x[i] != y[i]) return i;
    return (size_t)-1;
}

float gu_frand(unsigned long long *seed, float lo, float hi) {
    return lo + (hi - lo) * (float)((gu_rng(seed) >> 11) * (1.0 / 9007199254740992.0));
}

float *gu_rand_f32(unsigned long long *seed, size_t n, float lo, float hi) {
    float *p = (float *)malloc(n * sizeof *p);
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) p[i] = gu_frand(seed, lo, hi);
    return p;
}

/* rows [m0, m1) of gu_make_weights: the floats already drawn, quantized row by row */
typedef struct {
    mi_type t;
    const float *f;
    uint8_t *w;
    int64_t K, m0, m1;
} quant_job;
static void *quant_rows(void *arg) {
    const quant_job *j = (const quant_job *)arg;
    const size_t rb = mi_row_size(j->t, j->K);
    for (int64_t m = j->m0; m < j->m1; m++) mi_quantize_row(j->t, j->f + (size_t)m * (size_t)j->K, j->w + rb * (size_t)m, j->K);
    return NULL;
}

/* The floats are drawn in one sequence (row after row, as the seed runs) in blocks of rows, each
 * block quantized over up to 16 threads: the same bytes as quantizing each row as it is drawn,
 * in a fraction of the time for the 7B's shapes (the K-quant search dominates). */
void *gu_make_weights(unsigned long long *seed, mi_type t, int64_t K, int64_t M, float amp, size_t *bytes) {
    enum { NT = 16, BLOCK_ROWS = 4096 };
    const size_t rb = mi_row_size(t, K);
    uint8_t *w = (uint8_t *)malloc(rb * (size_t)M);
    const int64_t br = M < BLOCK_ROWS ? M : BLOCK_ROWS;
    float *f = (float *)malloc((size_t)K * (size_t)(br > 0 ? br : 1) * 4);
    if (!w || !f) { fprintf(stderr, "gate: out of memory\n"); exit(2); }
    for (int64_t b0 = 0; b0 < M; b0 += br) {
        const int64_t n = M - b0 < br ? M - b0 : br;
        for (int64_t m = 0; m < n; m++)
            for (int64_t k = 0; k < K; k++)
                f[(size_t)m * (size_t)K + (size_t)k] = amp * gu_frand(seed, -1.f, 1.f) * (k % 97 == 0 ? 4.f : 1.f);
        pthread_t th[NT];
        quant_job jobs[NT];
        const int nt = n < NT ? (int)n : NT;
        int started = 0;
        for (int i = 0; i < nt; i++) {
            jobs[i] = (quant_job){t, f, w + rb * (size_t)b0, K, n * i / nt, n * (i + 1) / nt};
            if (i > 0 && pthread_create(&th[started], NULL, quant_rows, &jobs[i]) == 0) started++;
            else if (i > 0) quant_rows(&jobs[i]);
        }
        quant_rows(&jobs[0]);   /* this thread's share */
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    }
    free(f);
    if (bytes) *bytes = rb * (size_t)M;
    return w;
}

double gu_nmse(const float *got, const float *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - (double)want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    if (num != num) return INFINITY;
    return den > 0 ? num / den : num;
}

double gu_nmse_d(const float *got, const double *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - want[i];
        num += d * d;
        den += want[i] * want[i];
    }
    if (num != num) return INFINITY;
    return den > 0 ? num / den : num;
}

void gu_minfer_path(const char *argv0, char *buf, size_t n) {
    const char *mb = getenv("MINFER_BIN");
    if (mb && *mb) {
        snprintf(buf, n, "%s", mb);
        return;
    }
    snprintf(buf, n, "%s", argv0);
    char *sl = strrchr(buf, '/');
    if (sl) snprintf(sl, n - (size_t)(sl - buf), "/../../minfer");
    else snprintf(buf, n, "../../minfer");
}

int gu_model_path(const char *minfer, const char *own, const char *shape, const char *type, char *path, size_t n) {
    const char *list = getenv("MINFER_GATE_MODELS");
    char want[160];
    snprintf(want, sizeof want, "%s-%s.gguf", shape, type);
    if (list && *list) {
        char buf[8192];
        snprintf(buf, sizeof buf, "%s", list);
        char *save = NULL;
        for (char *p = strtok_r(buf, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
            const char *b = strrchr(p, '/');
            if (!strcmp(b ? b + 1 : p, want) && access(p, R_OK) == 0) {
                snprintf(path, n, "%s", p);
                return 0;
            }
        }
    }
    static const char *const gates[] = {"7b", "7c", "7e", "8a", "8b"};
    for (size_t i = 0; i < sizeof gates / sizeof gates[0]; i++) {
        snprintf(path, n, "/tmp/minfer-%s-%s-%s.gguf", gates[i], shape, type);
        if (access(path, R_OK) == 0) return 0;
    }
    snprintf(path, n, "/tmp/minfer-%s-%s-%s.gguf", own, shape, type);
    char cmd[4600];
    snprintf(cmd, sizeof cmd, "'%s' synth --shape %s --type %s -o '%s' >/dev/null 2>&1", minfer, shape, type, path);
    return system(cmd) == 0 && access(path, R_OK) == 0 ? 0 : 1;
}

/* A crash names the running test, prints raw frames (addr2line -e GATE +OFFSET) and still
 * writes the summary with that test failed. Not async-signal-safe past the first write,
 * but the process is ending anyway, and a summary beats none. */
static gu_run *crash_run;
static const char *crash_gate;

static void on_crash(int sig) {
    char msg[200];
    int n = snprintf(msg, sizeof msg, "\n%s: signal %d during test '%s'\n", crash_gate, sig, crash_run->cur);
    if (write(2, msg, (size_t)n) < 0) _exit(3);
    void *fr[48];
    int k = backtrace(fr, 48);
    backtrace_symbols_fd(fr, k, 2);
    signal(sig, SIG_DFL);
    g_record_all = 1;
    if (!crash_run->open) gu_begin(crash_run, "crash");
    gu_fail(crash_run, "signal %d in this test: the gate stopped here", sig);
    gu_finish(crash_run);
    _exit(128 + sig);
}

void gu_catch_crashes(gu_run *r, const char *gate, int with_sigterm) {
    crash_run = r;
    crash_gate = gate;
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    signal(SIGABRT, on_crash);
    if (with_sigterm) signal(SIGTERM, on_crash);
}

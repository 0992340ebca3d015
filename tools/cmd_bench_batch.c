/* `minfer bench --batch 1,4,16 -p 512 -n 128 [--backend cpu|cuda|auto]`: llama-batched-bench's
 * table for phase 8b's batched steps. For each B: B sequences each get PP prompt tokens (fixed pseudo-random ids),
 * run as batched steps of at most --ubatch tokens (T_PP), then TG steps of one token per
 * sequence (T_TG, each token the one the sequence drew). Columns: PP, TG, B, N_KV = B * (PP +
 * TG), T_PP and S_PP = B * PP / T_PP, T_TG and S_TG = B * TG / T_TG, T and S = N_KV / T. Rows are
 * printed as each B ends, each followed by a line with the KV pool's size and where it lives and
 * the device memory in use at its fullest (sampled after every step, outside the timed time: a
 * device's memory query costs more than a small model's step); one JSON line a row (those
 * too: kv_mb, kv_tokens, kv_on_device, dev_mem_peak_mb, dev_mem_total_mb) to --json PATH
 * (appended) or stdout.
 * --pool shared (the default): one batch runs every row, its pool and sequence slots sized for the
 * largest B, each row's sequences freed at its end, as a server keeps one batch and
 * llama-batched-bench one context; --pool row: a batch of its own a row, its pool B x (PP + TG +
 * 16) positions, the pattern of a process that creates and frees batches (results/notes/PHASE8B.md:
 * what it costs the rows after). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "common/model/mi_batch.h"
#include "tools/cli.h"
#include "tools/bench_facts.h"
#include "common/backend/backend.h"

int cmd_bench_batch(int argc, char **argv);

typedef struct {
    const char *model, *json, *backend;
    int64_t pp, tg, ubatch;
    int nb, n_threads;
    int b[16];
    bool pool_per_row;   /* --pool row */
} batch_args;

static int fail(const char *msg) {
    fprintf(stderr, "minfer: %s\n", msg);
    return 1;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int parse(int argc, char **argv, batch_args *a) {
    *a = (batch_args){.pp = 512, .tg = 128, .ubatch = 2048, .backend = "auto"};
    const char *blist = NULL;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "minfer: option '%s' needs a value (bench --batch LIST -m FILE [-p PP] [-n TG] [-t N] [--ubatch N] [--pool shared|row] [--json PATH])\n", o);
            return 1;
        }
        const char *v = argv[++i];
        char *end = NULL, err[256];
        if (!strcmp(o, "-m")) a->model = v;
        else if (!strcmp(o, "--batch")) blist = v;
        else if (!strcmp(o, "--json")) a->json = v;
        else if (!strcmp(o, "--backend") && (!strcmp(v, "cpu") || !strcmp(v, "cuda") || !strcmp(v, "auto"))) a->backend = v;
        else if (!strcmp(o, "--pool") && (!strcmp(v, "shared") || !strcmp(v, "row"))) a->pool_per_row = !strcmp(v, "row");
        else if (!strcmp(o, "-t")) {
            if (mi_cli_threads(v, &a->n_threads, err, sizeof err)) return fail(err);
        } else if (!strcmp(o, "-p") && (a->pp = strtoll(v, &end, 10), *end == 0 && a->pp >= 1 && a->pp <= (1 << 20))) {}
        else if (!strcmp(o, "-n") && (a->tg = strtoll(v, &end, 10), *end == 0 && a->tg >= 0 && a->tg <= (1 << 20))) {}
        else if (!strcmp(o, "--ubatch") && (a->ubatch = strtoll(v, &end, 10), *end == 0 && a->ubatch >= 1)) {}
        else {
            fprintf(stderr, "minfer: bad option or value for bench --batch: %s '%s'\n", o, v);
            return 1;
        }
    }
    if (!a->model) return fail("no model given (-m FILE)");
    for (const char *p = blist ? blist : ""; *p;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || x < 1 || x > 4096 || a->nb == 16)
            return fail("--batch wants up to 16 sequence counts like 1,4,16,64 (1..4096)");
        a->b[a->nb++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (!a->nb) return fail("--batch wants up to 16 sequence counts like 1,4,16,64 (1..4096)");
    return -1;
}

/* a row's times, and what it held: the KV pool's bytes and positions, and the device memory in
 * use at its fullest (sampled after every step; 0 on the CPU); tg_us: a TG step's microseconds
 * in mi_batch_step's phases (prepare, compute, read, draw: mi_batch_stats), then compute's parts
 * (split set-up, nodes, split ends); tg_ahead: the share of TG steps queued ahead of the host's
 * read (MINFER_STEP_AHEAD); tg_first_us: the first TG step's host time (its graph built, and
 * on a device captured, and any first use of its kernels); tg_splits, tg_copies: a TG step's scheduler splits and
 * cross-backend copies (one and none where the whole step runs on one device) */
typedef struct {
    double t_pp, t_tg, tg_us[7], tg_splits, tg_copies, tg_ahead, tg_first_us;
    size_t kv_bytes, mem_peak, mem_total;
    int64_t kv_tokens;
    bool kv_dev;
} batch_times;

/* the device memory in use now into the row's peak; *spent += the seconds it took (taken out
 * of the timed phases: the step is over, the device idle, when it runs) */
static mi_status sample_memory(const mi_batch *b, batch_times *t, double *spent) {
    const double t0 = now_s();
    size_t used = 0, total = 0;
    MI_TRY(mi_batch_device_memory(b, &used, &total));
    if (used > t->mem_peak) t->mem_peak = used;
    t->mem_total = total;
    *spent += now_s() - t0;
    return MI_OK;
}

/* a batch for B sequences of PP + TG tokens */
static mi_status new_batch(mi_model *m, const batch_args *a, int B, mi_batch **b) {
    mi_batch_params bp;
    mi_batch_params_default(&bp);
    bp.n_seq_max = B;
    bp.kv_tokens = (int64_t)B * (a->pp + a->tg + 16);
    bp.n_threads = a->n_threads;
    bp.backend = a->backend;
    bp.no_logits = true;   /* greedy: the next tokens come back, not B rows of logits (as a server would run) */
    return mi_batch_new(m, &bp, b);
}

/* one row on batch b (no sequence open): B sequences, PP prompt tokens each, then TG tokens
 * each; the sequences freed at the end */
static mi_status run_b(mi_batch *b, mi_model *m, const batch_args *a, int B, batch_times *t, char *be, size_t be_cap) {
    snprintf(be, be_cap, "%s", mi_batch_backend(b));
    memset(t, 0, sizeof *t);
    t->kv_bytes = mi_batch_kv_bytes(b);
    t->kv_tokens = mi_batch_kv_tokens(b);
    t->kv_dev = mi_batch_kv_on_device(b);
    const int64_t V = mi_model_hparams(m)->n_vocab;
    int32_t *ids = malloc((size_t)a->pp * sizeof *ids);
    int *id = malloc((size_t)B * sizeof *id), opened = 0;
    mi_status st = ids && id ? MI_OK : mi_err(MI_ERR_NOMEM, "out of memory");
    uint64_t r = 0x5eed;
    for (int s = 0; st == MI_OK && s < B; s++) {
        for (int64_t j = 0; j < a->pp; j++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            ids[j] = (int32_t)((r >> 33) % (uint64_t)V);
        }
        st = mi_batch_seq_new(b, NULL, &id[s]);
        if (st == MI_OK) opened++, st = mi_batch_seq_add(b, id[s], ids, a->pp);
    }
    /* a sequence's first generated token comes from the prompt step that ended its prompt: with
     * B * PP over --ubatch the prompts take several steps, and only the last step's sequences
     * have a next token after it */
    int32_t *next = calloc((size_t)B, sizeof *next);
    if (st == MI_OK && !next) st = mi_err(MI_ERR_NOMEM, "out of memory");
    int ran = 0, done = 0;
    double t0 = now_s(), untimed = 0;
    while (st == MI_OK && done < B) {
        st = mi_batch_step(b, a->ubatch, &ran);
        if (st == MI_OK) st = sample_memory(b, t, &untimed);
        for (int s = done; st == MI_OK && s < B && mi_batch_seq_queued(b, id[s]) == 0; s++, done++)
            st = mi_batch_seq_next(b, id[s], &next[s]);   /* sequences run in id order */
        if (st == MI_OK && ran == 0) st = mi_err(MI_ERR_INTERNAL, "a prompt step ran no sequence");
    }
    t->t_pp = now_s() - t0 - untimed;
    mi_batch_stats s0, s1, sf;
    mi_batch_get_stats(b, &s0);
    sf = s0;
    t0 = now_s();
    untimed = 0;
    for (int64_t k = 0; st == MI_OK && k < a->tg; k++) {
        for (int s = 0; st == MI_OK && s < B; s++) {
            if (k > 0) st = mi_batch_seq_next(b, id[s], &next[s]);
            if (st == MI_OK) st = mi_batch_seq_add(b, id[s], &next[s], 1);
        }
        if (st == MI_OK) st = mi_batch_step(b, 0, &ran);
        if (k == 0) mi_batch_get_stats(b, &sf);
        if (st == MI_OK && ran != B) st = mi_err(MI_ERR_INTERNAL, "a generation step ran %d of %d sequences", ran, B);
        if (st == MI_OK) st = sample_memory(b, t, &untimed);
    }
    t->t_tg = now_s() - t0 - untimed;
    mi_batch_get_stats(b, &s1);
    const double n_steps = s1.steps > s0.steps ? (double)(s1.steps - s0.steps) : 1.0;
    t->tg_us[0] = 1e6 * (s1.s_prepare - s0.s_prepare) / n_steps;
    t->tg_us[1] = 1e6 * (s1.s_compute - s0.s_compute) / n_steps;
    t->tg_us[2] = 1e6 * (s1.s_read - s0.s_read) / n_steps;
    t->tg_us[3] = 1e6 * (s1.s_draw - s0.s_draw) / n_steps;
    t->tg_us[4] = 1e6 * (s1.s_split_begin - s0.s_split_begin) / n_steps;
    t->tg_us[5] = 1e6 * (s1.s_nodes - s0.s_nodes) / n_steps;
    t->tg_us[6] = 1e6 * (s1.s_split_end - s0.s_split_end) / n_steps;
    t->tg_splits = (double)(s1.splits - s0.splits) / n_steps;
    t->tg_copies = (double)(s1.copies - s0.copies) / n_steps;
    t->tg_ahead = (double)(s1.ahead_steps - s0.ahead_steps) / n_steps;
    t->tg_first_us = 1e6 * (sf.s_prepare + sf.s_compute + sf.s_read + sf.s_draw - s0.s_prepare - s0.s_compute - s0.s_read -
                            s0.s_draw);
    for (int s = 0; s < opened; s++) mi_batch_seq_free(b, id[s]);
    free(next);
    free(ids);
    free(id);
    return st;
}

int cmd_bench_batch(int argc, char **argv) {
    batch_args a;
    const int prc = parse(argc, argv, &a);
    if (prc >= 0) return prc;
    mi_model *m = NULL;
    mi_model_params mp = {a.backend};
    if (mi_model_load_params(a.model, &mp, &m) != MI_OK) return fail(mi_errmsg());
    FILE *jf = a.json ? fopen(a.json, "a") : stdout;
    if (!jf) {
        mi_model_free(m);
        return fail("cannot append to the --json file");
    }
    const char *slash = strrchr(a.model, '/'), *mname = slash ? slash + 1 : a.model;
    const int threads = a.n_threads > 0 ? a.n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    bench_facts rf;
    bench_facts_gather("cuda", &rf);   /* the GPU is named only on rows that ran on it */
    printf("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\n");
    printf("|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n");
    fflush(stdout);
    int rc = 0, bmax = 0;
    for (int i = 0; i < a.nb; i++) bmax = a.b[i] > bmax ? a.b[i] : bmax;
    mi_batch *shared = NULL;
    if (!a.pool_per_row && new_batch(m, &a, bmax, &shared) != MI_OK) {
        fprintf(stderr, "minfer: a batch of %d sequences: %s\n", bmax, mi_errmsg());
        rc = 1;
    }
    for (int i = 0; i < a.nb && !rc; i++) {
        const int B = a.b[i];
        batch_times t;
        char be[16] = "cpu";
        mi_batch *b = shared;
        mi_status st = b ? MI_OK : new_batch(m, &a, B, &b);
        if (st == MI_OK) st = run_b(b, m, &a, B, &t, be, sizeof be);
        if (b != shared) mi_batch_free(b);
        if (st != MI_OK) {
            fprintf(stderr, "minfer: B = %d: %s\n", B, mi_errmsg());
            rc = 1;
            break;
        }
        const double n_kv = (double)B * (double)(a.pp + a.tg), T = t.t_pp + t.t_tg;
        const double s_pp = B * (double)a.pp / t.t_pp, s_tg = a.tg ? B * (double)a.tg / t.t_tg : 0;
        printf("| %5lld | %6lld | %4d | %6.0f | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n", (long long)a.pp,
               (long long)a.tg, B, n_kv, t.t_pp, s_pp, t.t_tg, s_tg, T, n_kv / T);
        fflush(stdout);
        const double mib = 1048576.0;
        printf("  B = %d: KV pool %.1f MiB (%lld positions, %s, %s)", B, (double)t.kv_bytes / mib,
               (long long)t.kv_tokens, t.kv_dev ? "on the device" : "host memory",
               a.pool_per_row ? "this row's own" : "one batch for every row");
        if (t.mem_total) printf(", device memory in use at most %.0f of %.0f MiB", (double)t.mem_peak / mib, (double)t.mem_total / mib);
        printf("\n");
        if (a.tg)
            printf("  B = %d: a TG step %.0f us: prepare %.0f, compute %.0f (split set-up %.0f, nodes %.0f, split ends "
                   "%.0f), read %.0f, draw %.0f; %.3g split%s, %.3g cross-backend copies a step; %.0f%% queued ahead; "
                   "the first step %.0f us\n",
                   B, 1e6 * t.t_tg / (double)a.tg, t.tg_us[0], t.tg_us[1], t.tg_us[4], t.tg_us[5], t.tg_us[6],
                   t.tg_us[2], t.tg_us[3], t.tg_splits, t.tg_splits == 1.0 ? "" : "s", t.tg_copies, 100.0 * t.tg_ahead,
                   t.tg_first_us);
        fflush(stdout);
        fprintf(jf,
                "{\"bench\":\"batched\",\"model\":\"%s\",\"backend\":\"%s\",\"threads\":%d,\"pp\":%lld,\"tg\":%lld,"
                "\"B\":%d,\"n_kv\":%.0f,\"t_pp\":%.6f,\"s_pp\":%.3f,\"t_tg\":%.6f,\"s_tg\":%.3f,\"t\":%.6f,\"s\":%.3f,"
                "\"ubatch\":%lld,\"kv_tokens\":%lld,\"kv_mb\":%.1f,\"kv_on_device\":%s,\"dev_mem_peak_mb\":%.1f,"
                "\"dev_mem_total_mb\":%.1f,\"tg_step_us\":{\"prepare\":%.1f,\"compute\":%.1f,\"read\":%.1f,"
                "\"draw\":%.1f,\"split_begin\":%.1f,\"nodes\":%.1f,\"split_end\":%.1f},\"tg_splits\":%.3f,"
                "\"tg_copies\":%.3f,\"tg_ahead\":%.3f,\"tg_first_us\":%.1f,\"pool\":\"%s\",\"gpu\":",
                mname, be, threads, (long long)a.pp, (long long)a.tg, B, n_kv, t.t_pp, s_pp, t.t_tg, s_tg, T, n_kv / T,
                (long long)a.ubatch, (long long)t.kv_tokens, (double)t.kv_bytes / mib, t.kv_dev ? "true" : "false",
                (double)t.mem_peak / mib, (double)t.mem_total / mib, t.tg_us[0], t.tg_us[1], t.tg_us[2], t.tg_us[3],
                t.tg_us[4], t.tg_us[5], t.tg_us[6], t.tg_splits, t.tg_copies, t.tg_ahead, t.tg_first_us, a.pool_per_row ? "row" : "shared");
        bench_json_str(jf, strcmp(be, "cpu") ? rf.gpu : "none");
        fprintf(jf, ",\"phase\":\"%s\",\"commit\":", mi_build_phase);
        bench_json_str(jf, rf.commit);
        fprintf(jf, ",\"switches\":");
        bench_json_str(jf, rf.switches);
        fprintf(jf, ",\"date\":\"%s\"}\n", rf.date);
        fflush(jf);
    }
    if (shared) mi_batch_free(shared);
    if (jf != stdout) fclose(jf);
    mi_model_free(m);
    return rc;
}

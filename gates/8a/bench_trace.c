/* bench_trace: decode steps as the GPU ran them, CUDA graphs, programmatic launches and all.
 * Nsight Compute times each kernel alone (serialized, replayed), which hides what a captured step
 * loses between its kernels, and Nsight Systems is not on the lent H200. This records every
 * kernel's start and end through CUPTI's activity API (CONCURRENT_KERNEL: kernels launched from
 * a graph are reported node by node, concurrency kept) over n one-token steps after a p-token
 * prompt, then prints
 *   - a step: its span (first start to last end), the kernels' summed time, the time no kernel
 *     ran inside the span, and the time between steps (the host: logits, sampling, the next
 *     step's set-up and launch, and CUPTI's own work a step, which dominates it: 260-360 us here
 *     on the H200 where `minfer bench`'s untraced token is the span plus 30-100 us, so read the
 *     host's share as bench's token time minus the span);
 *   - per kernel, in step order, merged by name: launches a step, mean time, and the mean gap
 *     before it (its start minus the latest end before it: negative where it overlapped the one
 *     before, as a programmatic dependent may).
 * A step starts at the embedding row kernel (the first kernel recorded, a name holding "get_rows",
 * as tools/ncu_step_sum.py splits). With --batch B, B sequences of that prompt decode together
 * (mi_batch, greedy, the next tokens read back as `minfer bench --batch` does): the steps are
 * batched steps of B rows.
 * --before B,B,...: batches of those sizes run first, untraced, each as `minfer bench --batch`
 * runs a row (its prompts, n steps, freed), so the traced steps see the device and the allocator
 * as a table's later row does; --before-direct runs them without CUDA graphs (7d's capture off
 * while they run), so what the earlier rows leave behind can be told from what their graphs do.
 * --order K: also the first K kernels of a step in launch order, each one's time and the gap
 * before it averaged over the steps (a replayed step launches the same kernels in the same order:
 * one layer's q, k, v ... told apart where the merged table adds them up).
 * Not a gate (run_device_gates.sh runs gate_* only); built where CUPTI is found.
 *   usage: bench_trace MODEL [-p N (default 32)] [-n N (default 32)] [--top K (default 24)] [--batch B]
 *          [--before B,B,... [--before-direct]] [--order K] */
#include <cupti.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/model/mi.h"
#include "common/model/mi_batch.h"
#include "common/core/mi_err.h"
#include "phase7d_graphs/graphs7d.h"

typedef struct {
    uint64_t start, end;
    const char *name;   /* CUPTI's string, shared by the records of one kernel, kept for the process */
} krec;

static krec *g_rec;
static size_t g_n, g_cap;
static int g_on;          /* records outside the measured steps are dropped */
static size_t g_dropped;

#define BUF_BYTES (8u << 20)

static void CUPTIAPI buf_request(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUF_BYTES);
    *size = *buffer ? BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buf_complete(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    CUpti_Activity *r = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        if (!g_on) continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
        if (g_n == g_cap) {
            size_t cap = g_cap ? 2 * g_cap : 65536;
            krec *p = realloc(g_rec, cap * sizeof *p);
            if (!p) { g_dropped++; continue; }
            g_rec = p, g_cap = cap;
        }
        g_rec[g_n++] = (krec){k->start, k->end, k->name ? k->name : "?"};
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
    free(buffer);
}

static int by_start(const void *a, const void *b) {
    const krec *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

typedef struct {
    const char *name;
    double n, dur_ns, gap_ns;
    int first_pos;   /* where it first ran in a step: the table's order */
} kstat;

static void cupti_check(CUptiResult r, const char *what) {
    if (r == CUPTI_SUCCESS) return;
    const char *s = NULL;
    cuptiGetResultString(r, &s);
    fprintf(stderr, "bench_trace: %s: %s\n", what, s ? s : "CUPTI error");
    exit(1);
}

/* libstdc++'s demangler (the gate programs link it with the CUDA runtime) */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/* a kernel's name as Nsight Compute prints it: demangled, without its parameter list */
static void short_name(const char *n, char *out, size_t cap) {
    int status = -1;
    char *d = __cxa_demangle(n, NULL, NULL, &status);
    snprintf(out, cap, "%s", status == 0 && d ? d : n);
    free(d);
    int depth = 0;
    for (char *c = out; *c; c++) {
        if (*c == '<') depth++;
        else if (*c == '>') depth--;
        else if (*c == '(' && depth == 0) {
            *c = 0;
            break;
        }
    }
}

/* The steps to trace: n one-token steps of one session, or (B > 0) n decode steps of B
 * sequences. Each runs 8 steps first (graph captures), then switches the recording on for n. */
typedef struct {
    mi_session *s;
    mi_batch *b;
    int B, *id;
    int32_t *next;
} stepper;

static mi_status stepper_begin(stepper *r, mi_model *m, int B, long p, long n, const int32_t *ids) {
    if (!B) {
        mi_session_params sp;
        mi_session_params_default(&sp);
        sp.backend = "cuda";
        sp.n_ctx = p + n + 16;
        MI_TRY(mi_session_new(m, &sp, &r->s));
        return mi_session_decode(r->s, ids, p, false);
    }
    mi_batch_params bp;
    mi_batch_params_default(&bp);
    bp.n_seq_max = B;
    bp.kv_tokens = (int64_t)B * (p + n + 24);
    bp.backend = "cuda";
    bp.no_logits = true;
    MI_TRY(mi_batch_new(m, &bp, &r->b));
    r->B = B;
    r->id = calloc((size_t)B, sizeof *r->id);
    r->next = calloc((size_t)B, sizeof *r->next);
    if (!r->id || !r->next) return mi_err(MI_ERR_NOMEM, "out of memory");
    mi_status st = MI_OK;
    for (int q = 0; st == MI_OK && q < B; q++) {
        st = mi_batch_seq_new(r->b, NULL, &r->id[q]);
        if (st == MI_OK) st = mi_batch_seq_add(r->b, r->id[q], ids, p);
    }
    int ran = 0;
    for (int q = 0; st == MI_OK && q < B;) {   /* the prompts, as many steps as they take */
        st = mi_batch_step(r->b, 2048, &ran);
        for (; st == MI_OK && q < B && mi_batch_seq_queued(r->b, r->id[q]) == 0; q++)
            st = mi_batch_seq_next(r->b, r->id[q], &r->next[q]);   /* its first generated token */
    }
    return st;
}

/* one decode step: the session's token k, or every sequence's last token */
static mi_status stepper_step(stepper *r, const int32_t *ids, long k) {
    if (!r->B) return mi_session_decode(r->s, ids + k, 1, false);
    mi_status st = MI_OK;
    int ran = 0;
    for (int q = 0; st == MI_OK && q < r->B; q++) st = mi_batch_seq_add(r->b, r->id[q], &r->next[q], 1);
    if (st == MI_OK) st = mi_batch_step(r->b, 0, &ran);
    for (int q = 0; st == MI_OK && q < r->B; q++) st = mi_batch_seq_next(r->b, r->id[q], &r->next[q]);
    return st;
}

static void stepper_free(stepper *r) {
    mi_session_free(r->s);
    mi_batch_free(r->b);
    free(r->id);
    free(r->next);
}

/* --order K: the first K kernels of a step by position, averaged over the steps; only where every
 * step launched the same kernels in the same order */
static void print_order(const size_t *step0, size_t steps, long order) {
    if (order <= 0) return;
    const size_t len = step0[1] - step0[0];
    for (size_t t = 1; t < steps; t++) {
        bool same = step0[t + 1] - step0[t] == len;
        for (size_t i = 0; same && i < len; i++) same = !strcmp(g_rec[step0[t] + i].name, g_rec[step0[0] + i].name);
        if (!same) {
            printf("--order: the steps launched different kernels (step %zu); no order table\n", t);
            return;
        }
    }
    printf("| # | kernel | us | gap before, us |\n| ---: | --- | ---: | ---: |\n");
    for (size_t i = 0; i < len && i < (size_t)order; i++) {
        double dur = 0, gap = 0;
        for (size_t t = 0; t < steps; t++) {
            const krec *r = &g_rec[step0[t] + i];
            dur += (double)(r->end - r->start);
            if (i > 0) gap += (double)r->start - (double)g_rec[step0[t] + i - 1].end;
        }
        char nm[96];
        short_name(g_rec[step0[0] + i].name, nm, sizeof nm);
        printf("| %zu | %s | %.2f | %.2f |\n", i, nm, dur / (double)steps / 1e3, gap / (double)steps / 1e3);
    }
}

int main(int argc, char **argv) {
    const char *model = NULL;
    long p = 32, n = 32, top = 24, B = 0, order = 0;
    const char *before = "";
    int before_direct = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-p") && i + 1 < argc) p = atol(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atol(argv[++i]);
        else if (!strcmp(argv[i], "--top") && i + 1 < argc) top = atol(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) B = atol(argv[++i]);
        else if (!strcmp(argv[i], "--before") && i + 1 < argc) before = argv[++i];
        else if (!strcmp(argv[i], "--before-direct")) before_direct = 1;
        else if (!strcmp(argv[i], "--order") && i + 1 < argc) order = atol(argv[++i]);
        else if (argv[i][0] != '-' && !model) model = argv[i];
        else model = NULL, i = argc;
    }
    if (!model || p < 1 || p > 1 << 20 || n < 2 || n > 4096 || top < 1 || B < 0 || B > 1024 || order < 0) {
        fprintf(stderr, "usage: bench_trace MODEL [-p N (1..)] [-n N (2..4096)] [--top K] [--batch B (1..1024)] [--before B,B,... [--before-direct]] [--order K]\n");
        return 2;
    }
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
        printf("skipped: no CUDA device\n");
        return 0;
    }
    cupti_check(cuptiActivityRegisterCallbacks(buf_request, buf_complete), "cuptiActivityRegisterCallbacks");
    cupti_check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable CONCURRENT_KERNEL");

    mi_model *m = NULL;
    mi_model_params mp = {"cuda"};
    if (mi_model_load_params(model, &mp, &m) != MI_OK) {
        fprintf(stderr, "bench_trace: %s\n", mi_errmsg());
        return 1;
    }
    const int64_t V = mi_model_hparams(m)->n_vocab, total = p + n + 8;
    int32_t *ids = malloc((size_t)total * sizeof *ids);
    if (!ids) return 1;
    for (int64_t i = 0; i < total; i++) ids[i] = (int32_t)((i * 7919 + 13) % V);
    mi_status st = MI_OK;
    if (before_direct) mi_cuda_graph_set_enabled(false);
    for (const char *c = before; st == MI_OK && *c;) {   /* the earlier rows, untraced */
        char *end = NULL;
        const long b = strtol(c, &end, 10);
        if (end == c || b < 1 || b > 1024) {
            fprintf(stderr, "bench_trace: --before wants sizes 1..1024 separated by commas, not '%s'\n", before);
            return 2;
        }
        stepper pre = {0};
        st = stepper_begin(&pre, m, (int)b, p, n, ids);
        for (long i = 0; st == MI_OK && i < n; i++) st = stepper_step(&pre, ids, p + i);
        stepper_free(&pre);
        if (st != MI_OK) {
            fprintf(stderr, "bench_trace: the row of %ld before: %s\n", b, mi_errmsg());
            return 1;
        }
        c = *end == ',' ? end + 1 : end;
    }
    if (before_direct) mi_cuda_graph_set_enabled(true);
    mi_cuda_graph_counters gc0, gc1;
    mi_cuda_graph_stats(&gc0);
    stepper run = {0};
    if (st == MI_OK) st = stepper_begin(&run, m, (int)B, p, n, ids);
    if (st != MI_OK && !run.s && !run.b) {
        printf("skipped: %s\n", mi_errmsg());   /* no CUDA device: nothing to trace */
        stepper_free(&run);
        mi_model_free(m);
        return 0;
    }
    for (long i = 0; st == MI_OK && i < 8; i++) st = stepper_step(&run, ids, p + i);   /* captures */
    cuptiActivityFlushAll(1);
    g_on = 1;
    for (long i = 0; st == MI_OK && i < n; i++) st = stepper_step(&run, ids, p + 8 + i);
    cuptiActivityFlushAll(1);
    g_on = 0;
    const char *backend = run.s ? mi_session_backend(run.s) : mi_batch_backend(run.b);
    if (st != MI_OK) {
        fprintf(stderr, "bench_trace: %s\n", mi_errmsg());
        return 1;
    }
    qsort(g_rec, g_n, sizeof *g_rec, by_start);

    /* steps: from one embedding kernel to the next (the first row gather recorded: a batched step
     * gathers rows a second time, the last row of each sequence for the output head) */
    size_t *step0 = malloc((g_n + 1) * sizeof *step0), ns = 0;
    const char *embd = NULL;
    for (size_t i = 0; i < g_n; i++)
        if (strstr(g_rec[i].name, "get_rows")) {
            if (!embd) embd = g_rec[i].name;
            if (!strcmp(g_rec[i].name, embd)) step0[ns++] = i;
        }
    step0[ns] = g_n;
    if (ns < 2) {
        fprintf(stderr, "bench_trace: %zu kernels, %zu steps found (backend %s): nothing to show\n", g_n, ns, backend);
        return 1;
    }
    kstat *ks = calloc(256, sizeof *ks);
    int nk = 0;
    double span = 0, busy = 0, ksum = 0, between = 0;
    const size_t steps = ns - 1;   /* the last step's end is not followed by another: left out */
    for (size_t t = 0; t < steps; t++) {
        const size_t a = step0[t], b = step0[t + 1];
        uint64_t latest = g_rec[a].start, covered_to = g_rec[a].start;
        double cover = 0;
        for (size_t i = a; i < b; i++) {
            const krec *r = &g_rec[i];
            const double gap = (double)r->start - (double)latest;
            ksum += (double)(r->end - r->start);
            if (r->end > covered_to) {   /* union of the intervals */
                cover += (double)(r->end - (r->start > covered_to ? r->start : covered_to));
                covered_to = r->end;
            }
            int k = 0;
            while (k < nk && strcmp(ks[k].name, r->name)) k++;
            if (k == nk && nk < 256) ks[nk] = (kstat){r->name, 0, 0, 0, (int)(i - a)}, nk++;
            if (k < nk) {
                ks[k].n += 1;
                ks[k].dur_ns += (double)(r->end - r->start);
                ks[k].gap_ns += gap;
            }
            if (r->end > latest) latest = r->end;
        }
        span += (double)(latest - g_rec[a].start);
        busy += cover;
        between += (double)g_rec[b].start - (double)latest;
    }
    const double S = (double)steps;
    printf("%s, backend %s: %zu %s steps after a %ld-token prompt, %.1f kernels a step (CUPTI records "
           "dropped: %zu)\n", model, backend, steps, B ? "batched decode" : "one-token", p,
           (double)(step0[steps] - step0[0]) / S, g_dropped);
    if (B) printf("%ld sequences a step\n", B);
    mi_cuda_graph_stats(&gc1);
    printf("CUDA graphs: %llu captured and %llu destroyed before the traced row (in the process), %llu captured "
           "and %llu replayed in it\n", (unsigned long long)gc0.captures, (unsigned long long)gc0.evictions,
           (unsigned long long)(gc1.captures - gc0.captures), (unsigned long long)(gc1.replays - gc0.replays));
    printf("a step: span %.1f us, kernels summed %.1f us, no kernel running %.1f us; between steps %.1f us; "
           "%.1f us a token (%.1f tok/s)\n", span / S / 1e3, ksum / S / 1e3, (span - busy) / S / 1e3,
           between / S / 1e3, (span + between) / S / 1e3, 1e9 * S / (span + between));
    /* the kernels with the largest gaps before them, then the rest by time */
    for (int i = 0; i < nk; i++)
        for (int j = i + 1; j < nk; j++)
            if (ks[j].gap_ns + ks[j].dur_ns > ks[i].gap_ns + ks[i].dur_ns) {
                kstat x = ks[i];
                ks[i] = ks[j];
                ks[j] = x;
            }
    printf("| kernel | a step | us each | gap before, us each | us a step (time + gap) |\n"
           "| --- | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < nk && i < top; i++) {
        char nm[96];
        short_name(ks[i].name, nm, sizeof nm);
        printf("| %s | %.1f | %.2f | %.2f | %.1f |\n", nm, ks[i].n / S, ks[i].dur_ns / ks[i].n / 1e3,
               ks[i].gap_ns / ks[i].n / 1e3, (ks[i].dur_ns + ks[i].gap_ns) / S / 1e3);
    }
    free(ks);
    print_order(step0, steps, order);
    free(step0);
    free(ids);
    free(g_rec);
    stepper_free(&run);
    mi_model_free(m);
    return 0;
}

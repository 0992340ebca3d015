/* gates/7c/model_loads.h: many loads on many threads give the single-thread results and
 * leave the device as they found it; a CPU-only load never touches the device. */
#include "gates/7c/model_loads.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "common/model/mi.h"
#include "gates/7c/session_run.h"
#include "phase7a_skeleton/cuda_dev.h"
#include "phase7c_wiring/wiring7c.h"

/* ---------------- 8 threads, 100 loads ---------------- */
#define PAR_THREADS 8
#define PAR_LOADS 100
#define PAR_STEPS 2
typedef struct {
    const char *path[2];
    int32_t prompt[2][8];
    unsigned long long ref_cuda[2], ref_cpu[2];
    int64_t V[2];
} par_ref;
typedef struct {
    const par_ref *ref;
    int tid;
    int ok, bad, cuda_runs, cpu_runs;
    char err[300];
} par_arg;

static int par_run(const par_ref *ref, int k, const char *backend, unsigned long long *h, char *err, size_t n,
                   const char **be) {
    mi_model *m = NULL;
    mi_session *s = NULL;
    int rc = 1;
    float *last = malloc((size_t)ref->V[k] * sizeof(float));
    if (!last) return 1;
    if (mi_model_load(ref->path[k], &m) != MI_OK) snprintf(err, n, "load: %s", mi_errmsg());
    else if (gate_open_session(m, backend, 64, 2, &s) != MI_OK) snprintf(err, n, "session: %s", mi_errmsg());
    else if (gate_greedy(s, ref->prompt[k], 8, PAR_STEPS, NULL, last, ref->V[k]) != MI_OK) snprintf(err, n, "decode: %s", mi_errmsg());
    else {
        *h = gate_logits_hash(last, (size_t)ref->V[k]);
        if (be) *be = mi_session_backend(s);
        rc = 0;
    }
    mi_session_free(s);
    mi_model_free(m);
    free(last);
    return rc;
}

static void *par_thread(void *p) {
    par_arg *a = p;
    for (int i = a->tid; i < PAR_LOADS; i += PAR_THREADS) {
        const int k = (i / PAR_THREADS + a->tid) % 2;          /* same and different models at once */
        const bool cpu = i % 10 == 9;                          /* some CPU sessions among them */
        unsigned long long h = 0;
        const char *be = "";
        char err[256] = "";
        if (par_run(a->ref, k, cpu ? "cpu" : "auto", &h, err, sizeof err, &be)) {
            a->bad++;
            if (!a->err[0]) snprintf(a->err, sizeof a->err, "load %d: %s", i, err);
            continue;
        }
        const unsigned long long want = cpu ? a->ref->ref_cpu[k] : a->ref->ref_cuda[k];
        if (h != want || strcmp(be, cpu ? "cpu" : "cuda")) {
            a->bad++;
            if (!a->err[0]) snprintf(a->err, sizeof a->err, "load %d (model %d, %s): backend %s, logits hash %016llx, want %016llx", i, k,
                                     cpu ? "cpu" : "auto", be, h, want);
        } else {
            a->ok++;
            if (cpu) a->cpu_runs++;
            else a->cuda_runs++;
        }
    }
    return NULL;
}

void test_parallel_loads(gu_run *r, unsigned long long *seed, const char *p0, const char *p1) {
    gu_begin(r, "parallel_loads");
    par_ref ref;
    memset(&ref, 0, sizeof ref);
    ref.path[0] = p0;
    ref.path[1] = p1;
    mi_model *first[2] = {NULL, NULL};
    char err[300] = "";
    for (int k = 0; k < 2; k++) {
        if (mi_model_load(ref.path[k], &first[k]) != MI_OK) { gu_fail(r, "first load: %s", mi_errmsg()); goto done; }
        ref.V[k] = mi_model_hparams(first[k])->n_vocab;
        for (int i = 0; i < 8; i++) ref.prompt[k][i] = (int32_t)(gu_rng(seed) % (unsigned long long)ref.V[k]);
    }
    /* single-thread references (their loads reuse the first loads' copies) */
    for (int k = 0; k < 2; k++) {
        const char *be = "";
        if (par_run(&ref, k, "cuda", &ref.ref_cuda[k], err, sizeof err, &be) ||
            par_run(&ref, k, "cpu", &ref.ref_cpu[k], err, sizeof err, NULL)) {
            gu_fail(r, "reference run: %s", err);
            goto done;
        }
    }
    {
        /* Two bursts of PAR_LOADS loads on PAR_THREADS fresh threads. Device memory is read
         * after the first loads (used0), after burst 1 (used1) and after burst 2 (used2).
         * A registry leak grows with every load: it would show in the registry counters
         * and as used2 > used1. What a first burst of new threads and sessions costs once
         * (runtime per-thread state, cached graph execs of a session's first decode) shows as
         * used1 - used0 and is reported, not hidden; cudaMemGetInfo moves in 2 MiB pages. */
        mi7c_weight_stats w0, w1;
        mi7c_weights_stats(&w0);
        size_t live0 = 0, live_after[2] = {0, 0};
        long nlive0 = 0, nlive_after[2] = {0, 0};
        mi_cudev_live(&live0, &nlive0);
        const size_t used0 = gate_dev_used();
        size_t used_after[2] = {0, 0};
        int ok = 0, bad = 0, nc = 0, np = 0;
        const double t0 = gu_now_ms();
        for (int burst = 0; burst < 2; burst++) {
            pthread_t th[PAR_THREADS];
            par_arg args[PAR_THREADS];
            for (int t = 0; t < PAR_THREADS; t++) {
                memset(&args[t], 0, sizeof args[t]);
                args[t].ref = &ref;
                args[t].tid = t;
                pthread_create(&th[t], NULL, par_thread, &args[t]);
            }
            for (int t = 0; t < PAR_THREADS; t++) {
                pthread_join(th[t], NULL);
                ok += args[t].ok;
                bad += args[t].bad;
                nc += args[t].cuda_runs;
                np += args[t].cpu_runs;
                if (args[t].err[0] && !err[0]) snprintf(err, sizeof err, "%s", args[t].err);
            }
            used_after[burst] = gate_dev_used();
            mi_cudev_live(&live_after[burst], &nlive_after[burst]);
        }
        const double dt = gu_now_ms() - t0;
        mi7c_weights_stats(&w1);
        const long long once = (long long)used_after[0] - (long long)used0;
        const long long grow = (long long)used_after[1] - (long long)used_after[0];
        const bool reg_same = w1.n_entries == w0.n_entries && w1.bytes == w0.bytes && w1.n_uploads == w0.n_uploads;
        /* minfer's own device memory (every cudaMalloc it makes) must be back to the byte */
        const bool live_same = live_after[0] == live0 && live_after[1] == live0 && nlive_after[0] == nlive0 &&
                               nlive_after[1] == nlive0;
        if (bad == 0 && ok == 2 * PAR_LOADS && reg_same && live_same && llabs(grow) <= (2 << 20) &&
            llabs(once) <= (16 << 20))
            gu_pass(r, "%d loads on %d threads in 2 bursts, %.1f s (%d auto->cuda, %d cpu), every logits hash equal to the "
                        "single-thread run; registry %d entries %.2f GiB before and after, no upload; minfer's device "
                        "allocations %ld / %zu B after first loads and after each burst (equal); cudaMemGetInfo in use "
                        "%.1f MiB after first loads, %.1f after burst 1 (%+lld B, the CUDA runtime's own), %.1f after "
                        "burst 2 (%+lld B)",
                    ok, PAR_THREADS, dt / 1e3, nc, np, w1.n_entries, w1.bytes / 1073741824.0, nlive0, live0,
                    used0 / 1048576.0, used_after[0] / 1048576.0, once, used_after[1] / 1048576.0, grow);
        else
            gu_fail(r, "%d ok, %d bad (%s); registry %d/%zu -> %d/%zu (uploads %llu -> %llu); minfer allocations "
                        "%ld/%zu -> %ld/%zu -> %ld/%zu B; cudaMemGetInfo in use %.1f -> %.1f -> %.1f MiB",
                    ok, bad, err[0] ? err : "-", w0.n_entries, w0.bytes, w1.n_entries, w1.bytes,
                    (unsigned long long)w0.n_uploads, (unsigned long long)w1.n_uploads, nlive0, live0, nlive_after[0],
                    live_after[0], nlive_after[1], live_after[1], used0 / 1048576.0, used_after[0] / 1048576.0,
                    used_after[1] / 1048576.0);
    }
done:
    mi_model_free(first[0]);
    mi_model_free(first[1]);
}

/* ---------------- a model loaded for the CPU leaves the device alone ---------------- */
void test_cpu_load_no_upload(gu_run *r, const char *path) {
    gu_begin(r, "cpu_load_no_upload");
    mi7c_weight_stats w0, w1;
    mi7c_weights_stats(&w0);
    size_t live0 = 0, live1 = 0;
    mi_cudev_live(&live0, NULL);
    mi_model *m = NULL;
    mi_session *s = NULL, *sc = NULL;
    mi_model_params mp = {"cpu"};
    const char *be = "";
    char cuda_err[300] = "";
    mi_status st = mi_model_load_params(path, &mp, &m);
    if (st == MI_OK) {
        mi7c_weights_stats(&w1);
        mi_cudev_live(&live1, NULL);
        st = gate_open_session(m, "auto", 64, 0, &s);
        if (st == MI_OK) be = mi_session_backend(s);
    }
    if (st == MI_OK) {
        /* an explicit CUDA session on it is refused with a reason, not run half on the host */
        if (gate_open_session(m, "cuda", 64, 0, &sc) == MI_OK) snprintf(cuda_err, sizeof cuda_err, "(accepted)");
        else snprintf(cuda_err, sizeof cuda_err, "%s", mi_errmsg());
    }
    if (st != MI_OK) gu_fail(r, "%s", mi_errmsg());
    else if (w1.n_uploads != w0.n_uploads || w1.bytes != w0.bytes || live1 != live0)
        gu_fail(r, "loading with backend cpu touched the device: uploads %llu -> %llu, resident %zu -> %zu B, "
                    "minfer allocations %zu -> %zu B", (unsigned long long)w0.n_uploads, (unsigned long long)w1.n_uploads,
                w0.bytes, w1.bytes, live0, live1);
    else if (strcmp(be, "cpu"))
        gu_fail(r, "an auto session on a cpu-loaded model runs on '%s'", be);
    else if (sc || !strstr(cuda_err, "loaded with backend cpu"))
        gu_fail(r, "a cuda session on a cpu-loaded model: %s", cuda_err);
    else
        gu_pass(r, "no upload, minfer device allocations unchanged (%zu B); auto session runs on cpu; cuda session "
                    "refused: %s", live1, cuda_err);
    mi_session_free(sc);
    mi_session_free(s);
    mi_model_free(m);
}

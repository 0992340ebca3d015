/* bench_7e: every switch item on vs off and MINFER_NO_CUDA_GRAPH on vs off, in one process per
 * model so the switch is the only thing that changes: for each item the CUDA dispatch declares
 * (mi_cuda_item_at), A (all on) and B (that item off) alternate A B A B ... (-r pairs), prefill
 * and decode timed each time; medians and the ratio B/A are printed and appended as JSON lines
 * (--json PATH).
 *   usage: bench_7e [-p 512] [-n 64] [-r 3] [--only ITEMS] [--json PATH] MODEL.gguf [MODEL.gguf ...]
 * --only d1,d2: just those items, each off and all of them off together.
 * Not a gate (it never fails on speed); tools/bench_7e.sh runs it for `make bench-7e`. */
#include "gates/gate_util.h"
#include "phase7a_skeleton/cuda_dispatch.h"
#include "phase7d_graphs/graphs7d.h"
#include "common/model/mi.h"
#include <cuda_runtime_api.h>
#include <math.h>

typedef struct {
    char name[40];
    const char *off;   /* MINFER_PERF_OFF list for B */
    bool no_graph;     /* B: CUDA graphs off */
} ab_state;

/* "<item>_off" for every declared item, then "all_off" and "no_cuda_graph"; with only (a
 * comma list of items), "<item>_off" for each listed item and "<list>_off" for all of them */
#define MAX_STATES 72   /* every item (up to 64), all off, graphs off */
static int make_states(ab_state *st, const char *only) {
    int n = 0;
    if (only) {
        static char list[8][40];
        char buf[320];
        snprintf(buf, sizeof buf, "%s", only);
        int k = 0;
        for (char *t = strtok(buf, ","); t && k < 8; t = strtok(NULL, ","), k++) {
            snprintf(list[k], sizeof list[k], "%.38s", t);
            snprintf(st[n].name, sizeof st[n].name, "%.30s_off", list[k]);
            st[n].off = list[k];
            st[n++].no_graph = false;
        }
        if (k > 1) {
            snprintf(st[n].name, sizeof st[n].name, "%.30s_off", only);
            st[n].off = only;
            st[n++].no_graph = false;
        }
        return n;
    }
    const char *name, *what;
    for (int i = 0; n < MAX_STATES - 2 && mi_cuda_item_at(i, &name, &what); i++, n++) {
        snprintf(st[n].name, sizeof st[n].name, "%.30s_off", name);
        st[n].off = name;
        st[n].no_graph = false;
    }
    snprintf(st[n].name, sizeof st[n].name, "all_off");
    st[n].off = "all";
    st[n++].no_graph = false;
    snprintf(st[n].name, sizeof st[n].name, "no_cuda_graph");
    st[n].off = "";
    st[n++].no_graph = true;
    return n;
}

static double now_s(void) { return gu_now_ms() / 1e3; }

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    double t[64];
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* one timed run: prefill of pp tokens (tok/s), or tg single-token steps (tok/s) */
static mi_status run_once(mi_session *s, const int32_t *ids, int64_t n, bool tg, double *tok_s) {
    mi_session_reset(s);
    double t0 = now_s();
    if (!tg) {
        MI_TRY(mi_session_decode(s, ids, n, false));
        (void)mi_logits(s, NULL);   /* the logits read synchronizes */
    } else {
        for (int64_t i = 0; i < n; i++) MI_TRY(mi_session_decode(s, ids + i, 1, false));
    }
    *tok_s = (double)n / (now_s() - t0);
    return MI_OK;
}

static mi_status set_state(const ab_state *st, bool b) {
    mi_cuda_graph_set_enabled(!(b && st->no_graph));
    return mi_cuda_items_set_off(b ? st->off : "");
}

int main(int argc, char **argv) {
    int64_t pp = 512, tg = 64;
    int reps = 3;
    const char *json = NULL, *only = NULL;
    const char *models[8];
    int n_models = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-p") && i + 1 < argc) pp = atoll(argv[++i]);
        else if (!strcmp(o, "-n") && i + 1 < argc) tg = atoll(argv[++i]);
        else if (!strcmp(o, "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(o, "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(o, "--only") && i + 1 < argc) only = argv[++i];
        else if (o[0] == '-') {
            fprintf(stderr, "usage: bench_7e [-p 512] [-n 64] [-r 3] [--only ITEMS] [--json PATH] MODEL.gguf ...\n");
            return 1;
        } else if (n_models < 8) models[n_models++] = o;
    }
    if (!n_models || pp < 0 || tg < 0 || reps < 1 || reps > 32) {
        fprintf(stderr, "bench_7e: need a model, -p/-n >= 0 and 1 <= -r <= 32\n");
        return 1;
    }
    mi_phases_install();
    ab_state k_states[MAX_STATES];
    const int n_states = make_states(k_states, only);
    for (int i = 0; i < n_states; i++)
        if (mi_cuda_items_set_off(k_states[i].off) != MI_OK) {   /* an unknown item: say so now */
            fprintf(stderr, "bench_7e: %s\n", mi_errmsg());
            return 1;
        }
    mi_cuda_items_set_off("");
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("skipped: no CUDA device\n");
        return 0;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return 1;
    char commit[128], date[64];
    gu_commit(commit, sizeof commit);
    gu_utc_now(date, sizeof date);
    FILE *jf = json ? fopen(json, "a") : NULL;
    if (json && !jf) {
        fprintf(stderr, "bench_7e: cannot append to %s\n", json);
        return 1;
    }
    int rc = 0;
    printf("| model | test | state | A (all on) tok/s | B tok/s | B/A |\n| --- | --- | --- | ---: | ---: | ---: |\n");
    for (int mi = 0; mi < n_models && !rc; mi++) {
        mi_model *m = NULL;
        if (mi_model_load(models[mi], &m) != MI_OK) {
            fprintf(stderr, "bench_7e: %s\n", mi_errmsg());
            rc = 1;
            break;
        }
        const mi_hparams *hp = mi_model_hparams(m);
        mi_session_params sp;
        mi_session_params_default(&sp);
        sp.backend = "cuda";
        sp.n_ctx = (pp > tg ? pp : tg) + 16;
        mi_session *s = NULL;
        if (mi_session_new(m, &sp, &s) != MI_OK) {
            fprintf(stderr, "bench_7e: %s\n", mi_errmsg());
            mi_model_free(m);
            rc = 1;
            break;
        }
        const int64_t nid = sp.n_ctx;
        int32_t *ids = malloc((size_t)nid * sizeof *ids);
        unsigned long long seed = 0x5eed;
        for (int64_t i = 0; i < nid; i++) ids[i] = (int32_t)(gu_rng(&seed) % (unsigned long long)hp->n_vocab);
        const char *sl = strrchr(models[mi], '/');
        const char *mname = sl ? sl + 1 : models[mi];
        for (int ti = 0; ti < 2 && !rc; ti++) {
            const bool is_tg = ti == 1;
            const int64_t n = is_tg ? tg : pp;
            if (n <= 0) continue;
            char test[32];
            snprintf(test, sizeof test, "%s%lld", is_tg ? "tg" : "pp", (long long)n);
            for (int si = 0; si < n_states && !rc; si++) {
                const ab_state *st = &k_states[si];
                double a[32], b[32], w;
                mi_cuda_graph_counters g0, g1;
                mi_cuda_graph_stats(&g0);
                /* warm-up of both states: captures, workspace growth, first-touch */
                if (set_state(st, false) != MI_OK || run_once(s, ids, n, is_tg, &w) != MI_OK) rc = 1;
                if (!rc && (set_state(st, true) != MI_OK || run_once(s, ids, n, is_tg, &w) != MI_OK)) rc = 1;
                for (int r = 0; r < reps && !rc; r++) {
                    if (set_state(st, false) != MI_OK || run_once(s, ids, n, is_tg, &a[r]) != MI_OK) rc = 1;
                    if (!rc && (set_state(st, true) != MI_OK || run_once(s, ids, n, is_tg, &b[r]) != MI_OK)) rc = 1;
                }
                set_state(st, false);
                if (rc) {
                    fprintf(stderr, "bench_7e: %s %s %s: %s\n", mname, test, st->name, mi_errmsg());
                    break;
                }
                mi_cuda_graph_stats(&g1);
                /* graph activity of this state's runs: a state that keeps capturing shows here */
                fprintf(stderr, "bench_7e: %s %s %s: graphs %llu captures, %llu replays, %llu direct splits\n", mname,
                        test, st->name, (unsigned long long)(g1.captures - g0.captures),
                        (unsigned long long)(g1.replays - g0.replays),
                        (unsigned long long)(g1.direct_splits - g0.direct_splits));
                const double ma = median(a, reps), mb = median(b, reps);
                printf("| %s | %s | %s | %.1f | %.1f | %.3f |\n", mname, test, st->name, ma, mb, mb / ma);
                fflush(stdout);
                if (jf) {
                    fprintf(jf, "{\"bench\":\"bench-7e\",\"model\":");
                    gu_json_str(jf, mname);
                    double sd = 0;
                    for (int r = 0; r < reps; r++) sd += (b[r] - mb) * (b[r] - mb);
                    sd = reps > 1 ? sqrt(sd / (reps - 1)) : 0.0;
                    fprintf(jf, ",\"shape\":\"%s\",\"type\":\"%s\",\"backend\":\"cuda\",\"test\":\"%s\",\"item\":\"%s\","
                                "\"tok_s\":%.3f,\"tok_s_sd\":%.3f,\"tok_s_on\":%.3f,\"tok_s_off\":%.3f,\"ratio_off_on\":%.4f,"
                                "\"reps\":%d,\"a\":[",
                            hp->arch_name, mi_type_name(mi_model_dominant_type(m)), test, st->name, mb, sd, ma, mb,
                            mb / ma, reps);
                    for (int r = 0; r < reps; r++) fprintf(jf, "%s%.3f", r ? "," : "", a[r]);
                    fprintf(jf, "],\"b\":[");
                    for (int r = 0; r < reps; r++) fprintf(jf, "%s%.3f", r ? "," : "", b[r]);
                    fprintf(jf, "],\"gpu\":");
                    gu_json_str(jf, prop.name);
                    fprintf(jf, ",\"commit\":\"%s\",\"phase\":\"%s\",\"switches\":\"MINFER_PERF_OFF=%s%s\",\"date\":\"%s\"}\n",
                            commit, mi_build_phase, st->off, st->no_graph ? ",MINFER_NO_CUDA_GRAPH=1" : "", date);
                    fflush(jf);
                }
            }
        }
        free(ids);
        mi_session_free(s);
        mi_model_free(m);
    }
    if (jf) fclose(jf);
    return rc;
}

/* Gate 7d: decode steps replayed from CUDA graphs give the same bits as direct launches
 * (docs/PHASE7D.md). Through the public API, two CUDA sessions on one model run in
 * lockstep, one with graphs, one without (mi_cuda_graph_set_enabled around each call):
 *   step_ops_match_7b     7d's device-n_past ATTN / KV_STORE == 7b's kernels, bit for bit
 *                         (gates/7d/step_ops7d.c)
 *   replay_vs_direct_*    200 greedy steps (KV growing) on the three model shapes: logits
 *                         bit-identical every step, one capture, the rest replays
 *   generation_recapture  a pool-generation change mid-run: one recapture, still identical
 *   inject_begin|node     BeginCapture fails / a node fails mid-window: tokens still
 *                         identical, no stream left capturing, every cached graph one step
 *   two_threads           two sessions in two threads: both identical to their references,
 *                         each graph the node count of its own model's single-step graph
 *   ab_decode_*           decode tok/s graphs on / off (A B A B ..., medians, ratio) ->
 *                         bench JSON lines in $MINFER_BENCH_DIR (default results/)
 *   sanitizer_*           this gate (quick child run) under compute-sanitizer racecheck / synccheck
 *   inject_sync           a real CUDA error inside the window (last: it provokes CUDA)
 * No device: "skipped: no CUDA device". Summary JSON: $MINFER_GATE_JSON. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <pthread.h>
#include <execinfo.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "gates/gate_util.h"
#include "common/backend/backend.h"
#include "common/model/mi.h"
#include "common/core/mi_fp16.h"
#include "common/core/mi_settings.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "phase7b_ops/ops7b.h"
#include "phase7d_graphs/graphs7d.h"
#include "gates/7d/step_ops7d.h"

static gu_run R;
static char g_minfer[1024], g_self_exe[1024];
static int g_quick, g_child;
static unsigned long long g_seed = 7007;

typedef struct {
    const char *shape, *type;
    char path[512];
    mi_model *m;
    bool have;
    size_t clean_nodes;       /* graph nodes of this model's single-step decode capture (0 = unknown) */
} model_ent;


/* ---------------- models ---------------- */
static int model_find(model_ent *me) {
    char want[160];
    snprintf(want, sizeof want, "%s-%s.gguf", me->shape, me->type);
    const char *list = getenv("MINFER_GATE_MODELS");
    if (list && *list) {   /* device.sh names its files <shape>-<type>.gguf */
        char buf[4096];
        snprintf(buf, sizeof buf, "%s", list);
        for (char *save = NULL, *p = strtok_r(buf, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
            const char *base = strrchr(p, '/');
            base = base ? base + 1 : p;
            if (!strcmp(base, want) && access(p, R_OK) == 0) {
                snprintf(me->path, sizeof me->path, "%s", p);
                return 0;
            }
        }
    }
    static const char *pre[] = {"/tmp/minfer-7b-", "/tmp/minfer-7c-", "/tmp/minfer-7d-"};
    for (int i = 0; i < 3; i++) {   /* the earlier gates' copies, then ours */
        snprintf(me->path, sizeof me->path, "%s%s", pre[i], want);
        if (access(me->path, R_OK) == 0) return 0;
    }
    char cmd[4600];
    snprintf(cmd, sizeof cmd, "'%s' synth --shape %s --type %s -o '%s.tmp' >/dev/null 2>&1 && mv '%s.tmp' '%s'",
             g_minfer, me->shape, me->type, me->path, me->path, me->path);
    return system(cmd) == 0 && access(me->path, R_OK) == 0 ? 0 : 1;
}

static bool model_open(model_ent *me) {
    if (me->m) return true;
    if (!me->have) return false;
    if (mi_model_load(me->path, &me->m) != MI_OK) {
        printf("    load %s: %s\n", me->path, mi_errmsg());
        me->m = NULL;
        return false;
    }
    return true;
}

static void model_close(model_ent *me) {
    mi_model_free(me->m);
    me->m = NULL;
}

static mi_status open_session(mi_model *m, int64_t n_ctx, mi_session **s) {
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = "cuda";
    p.n_ctx = n_ctx;
    p.n_threads = 1;
    MI_TRY(mi_session_new(m, &p, s));
    if (strcmp(mi_session_backend(*s), "cuda")) {
        mi_session_free(*s);
        *s = NULL;
        return mi_err(MI_ERR_DEVICE, "the session runs on the CPU, not cuda (see the log for why)");
    }
    return MI_OK;
}

static int32_t argmax(const float *l, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return (int32_t)b;
}

/* first differing float, or -1 */
static int64_t first_diff(const float *a, const float *b, int64_t n) {
    size_t i = gu_first_diff(a, b, (size_t)n * sizeof(float));
    return i == (size_t)-1 ? -1 : (int64_t)(i / sizeof(float));
}

static mi_cuda_graph_counters stats_now(void) {
    mi_cuda_graph_counters c;
    mi_cuda_graph_stats(&c);
    return c;
}
#define D(f) ((unsigned long long)(s1.f - s0.f))

static void counters_str(const mi_cuda_graph_counters *a, const mi_cuda_graph_counters *b, char *out, size_t n) {
    snprintf(out, n, "captures %llu, recaptures %llu (generation %llu), replays %llu, aborted %llu, begin_failures "
             "%llu, end_failures %llu, multi_step_rejected %llu, direct_splits %llu, backoff %llu, npast_key_captures %llu, "
             "memo_splits %llu",
             (unsigned long long)(b->captures - a->captures), (unsigned long long)(b->recaptures - a->recaptures),
             (unsigned long long)(b->recaptures_generation - a->recaptures_generation),
             (unsigned long long)(b->replays - a->replays), (unsigned long long)(b->aborted_windows - a->aborted_windows),
             (unsigned long long)(b->begin_failures - a->begin_failures),
             (unsigned long long)(b->end_failures - a->end_failures),
             (unsigned long long)(b->multi_step_rejected - a->multi_step_rejected),
             (unsigned long long)(b->direct_splits - a->direct_splits),
             (unsigned long long)(b->backoff_splits - a->backoff_splits),
             (unsigned long long)(b->npast_key_captures - a->npast_key_captures),
             (unsigned long long)(b->memo_splits - a->memo_splits));
}

/* graph node counts of the last k captures must all equal want (0: report only) */
static int captures_single_step(uint64_t k, size_t want, char *out, size_t n) {
    mi_cuda_graph_capture_rec rec[256];
    int got = mi_cuda_graph_capture_log(rec, (int)(k < 256 ? k : 256));
    int bad = 0;
    size_t l = 0;
    out[0] = 0;
    for (int i = 0; i < got; i++) {
        if (want && rec[i].graph_nodes != want) bad++;
        if (l < n - 40) l += (size_t)snprintf(out + l, n - l, "%s%zu", i ? "," : "", rec[i].graph_nodes);
    }
    return bad;
}


/* ---------------- lockstep: graphs vs direct ---------------- */
typedef struct {
    int steps;
    bool bump_at_mid;          /* pool-generation change after step steps/2 */
    mi_graph_fail fail;
    int fail_count;
    /* out */
    int mismatched_steps, capturing_seen;
    int64_t step_kernels;      /* what session A reports for its last step (mi_session_step_kernels) */
    char first_bad[400];
    char err[600];
} lockstep_arg;

/* Sessions A (graphs) and B (direct) fed the same tokens (B's greedy choice). */
static int lockstep(model_ent *me, lockstep_arg *a) {
    mi_session *sa = NULL, *sb = NULL;
    a->mismatched_steps = a->capturing_seen = 0;
    a->first_bad[0] = a->err[0] = 0;
    if (open_session(me->m, 256, &sa) != MI_OK || open_session(me->m, 256, &sb) != MI_OK) {
        snprintf(a->err, sizeof a->err, "session: %s", mi_errmsg());
        mi_session_free(sa);
        return 1;
    }
    const int64_t V = mi_model_hparams(me->m)->n_vocab;
    int32_t prompt[8], tok = 0;
    for (int i = 0; i < 8; i++) prompt[i] = (int32_t)(gu_rng(&g_seed) % (unsigned long long)V);
    if (a->fail != MI_GRAPH_FAIL_NONE) mi_cuda_graph_set_fail(a->fail, a->fail_count);
    int rc = 0;
    for (int step = 0; step <= a->steps; step++) {
        const int32_t *in = step == 0 ? prompt : &tok;
        const int64_t n = step == 0 ? 8 : 1;
        mi_cuda_graph_set_enabled(true);
        mi_status st = mi_session_decode(sa, in, n, false);
        mi_cuda_graph_set_enabled(false);
        if (st == MI_OK) st = mi_session_decode(sb, in, n, false);
        mi_cuda_graph_set_enabled(true);
        if (st != MI_OK) {
            snprintf(a->err, sizeof a->err, "decode step %d: %s", step, mi_errmsg());
            rc = 1;
            break;
        }
        if (mi_cuda_graph_capturing_streams() != 0) a->capturing_seen++;
        const float *la = mi_logits(sa, NULL), *lb = mi_logits(sb, NULL);
        int64_t d = first_diff(la, lb, V);
        if (d >= 0) {
            if (!a->mismatched_steps)
                snprintf(a->first_bad, sizeof a->first_bad, "step %d (n_past %d): logit %lld got %.9g want %.9g", step,
                         step == 0 ? 0 : 7 + step, (long long)d, la[d], lb[d]);
            if (a->mismatched_steps < 3)
                printf("    step %d: first differing logit %lld: graph %.9g direct %.9g\n", step, (long long)d, la[d], lb[d]);
            a->mismatched_steps++;
        }
        tok = argmax(lb, V);
        if (a->bump_at_mid && step == a->steps / 2) {
            int nb = 0;
            if (mi_cuda_graph_bump_generation(&nb) != MI_OK || nb < 1) {
                snprintf(a->err, sizeof a->err, "could not change the pool generation (%d bumped): %s", nb, mi_errmsg());
                rc = 1;
                break;
            }
        }
    }
    mi_cuda_graph_set_fail(MI_GRAPH_FAIL_NONE, 0);
    a->step_kernels = sa ? mi_session_step_kernels(sa) : -1;
    mi_session_free(sa);
    mi_session_free(sb);
    if (mi_cuda_graph_capturing_streams() != 0) a->capturing_seen++;
    return rc;
}

static void test_replay(model_ent *me, int steps, bool bump) {
    if (steps < 4) bump = false;   /* a recapture needs steps on both sides of the change */
    char name[96], name_gen[96];
    snprintf(name, sizeof name, "replay_vs_direct_%s_%s", me->shape, me->type);
    snprintf(name_gen, sizeof name_gen, "generation_recapture_%s_%s", me->shape, me->type);
    gu_begin(&R, name);
    if (!model_open(me)) {
        gu_skip(&R, "model %s %s not available (synth with '%s' failed or load failed)", me->shape, me->type, g_minfer);
        if (bump) gu_skip_named(&R, name_gen, "model not available");
        return;
    }
    const bool dev_np = mi_cuda_graph_npast_on_device();
    mi_cuda_graph_counters s0 = stats_now();
    uint64_t log0 = s0.captures;
    lockstep_arg a = {.steps = steps, .bump_at_mid = bump};
    int rc = lockstep(me, &a);
    mi_cuda_graph_counters s1 = stats_now();
    char cs[600], nodes[300];
    counters_str(&s0, &s1, cs, sizeof cs);
    const uint64_t caps = s1.captures - log0;
    int64_t last_kernels = -1;
    if (caps >= 1) {   /* the first capture of a clean run is this model's single-step graph */
        mi_cuda_graph_capture_rec rec[256];
        int got = mi_cuda_graph_capture_log(rec, (int)(caps < 256 ? caps : 256));
        if (got > 0) me->clean_nodes = rec[0].graph_nodes;
        if (got > 0) last_kernels = (int64_t)rec[got - 1].kernels;
    }
    captures_single_step(caps, 0, nodes, sizeof nodes);
    const uint64_t want_caps = 1 + (bump ? 1 : 0);
    bool ok = rc == 0 && a.mismatched_steps == 0 && a.capturing_seen == 0 && D(aborted_windows) == 0 &&
              D(multi_step_rejected) == 0 && D(replays) > 0;
    char why[300] = "";
    /* the session reports the kernels of the graph its steps replay: the last capture's */
    if (caps >= 1 && a.step_kernels != last_kernels) {
        ok = false;
        snprintf(why, sizeof why, "; mi_session_step_kernels %lld, the last capture holds %lld kernels",
                 (long long)a.step_kernels, (long long)last_kernels);
    }
    if (dev_np && (caps != want_caps || D(replays) != (uint64_t)steps - want_caps)) {
        ok = false;
        snprintf(why, sizeof why, "; want %llu capture(s) and %llu replays (n_past is read on the device)",
                 (unsigned long long)want_caps, (unsigned long long)steps - want_caps);
    }
    /* the session runs its step graph again: after its first steps 7d takes the split's key from
     * its memo (so the bit-identity above covers replays found through it) */
    if (dev_np && steps >= 4 && D(memo_splits) == 0 && !mi_setting_on("MINFER_GRAPH_KEY_EACH_STEP") &&
        !mi_setting_on("MINFER_NO_GRAPH_REUSE")) {
        ok = false;
        snprintf(why, sizeof why, "; no split took its key from 7d's memo in %d steps of one step graph", steps);
    }
    if (rc) gu_fail(&R, "%s; %s", a.err, cs);
    else if (!ok)
        gu_fail(&R, "%d of %d steps differ (first: %s), streams left capturing %d; %s; graph nodes per capture %s%s",
                a.mismatched_steps, steps + 1, a.first_bad[0] ? a.first_bad : "none", a.capturing_seen, cs, nodes, why);
    else
        gu_pass(&R, "prompt 8 + %d greedy steps (KV 8..%d): logits bit-identical graph vs direct at every step; %s; "
                    "graph nodes per capture %s; %lld kernels per step (session = capture log); n_past on device: %s",
                steps, 8 + steps, cs, nodes, (long long)a.step_kernels, dev_np ? "yes" : "no");
    if (!bump) return;
    gu_begin(&R, name_gen);
    if (rc) gu_fail(&R, "the run failed: %s", a.err);
    else if (D(recaptures_generation) == 1 && D(recaptures) == 1 && a.mismatched_steps == 0)
        gu_pass(&R, "pool generation changed after step %d: recaptures %llu (generation %llu), logits bit-identical "
                    "before and after", steps / 2, D(recaptures), D(recaptures_generation));
    else
        gu_fail(&R, "after a pool generation change at step %d: recaptures %llu (generation %llu), want 1; %d "
                    "step(s) differ", steps / 2, D(recaptures), D(recaptures_generation), a.mismatched_steps);
}

static void test_inject(model_ent *me, mi_graph_fail mode, int count, int steps) {
    static const char *names[] = {"none", "begin", "node", "sync"};
    char name[64];
    snprintf(name, sizeof name, "inject_%s", names[mode]);
    gu_begin(&R, name);
    if (!model_open(me)) {
        gu_skip(&R, "model %s %s not available", me->shape, me->type);
        return;
    }
    mi_cuda_graph_counters s0 = stats_now();
    lockstep_arg a = {.steps = steps, .fail = mode, .fail_count = count};
    int rc = lockstep(me, &a);
    mi_cuda_graph_counters s1 = stats_now();
    char cs[600], nodes[300];
    counters_str(&s0, &s1, cs, sizeof cs);
    const uint64_t caps = s1.captures - s0.captures;
    int multi = captures_single_step(caps, me->clean_nodes, nodes, sizeof nodes);
    const uint64_t failed = mode == MI_GRAPH_FAIL_BEGIN ? D(begin_failures) : D(aborted_windows);
    const bool ok = rc == 0 && a.mismatched_steps == 0 && a.capturing_seen == 0 && failed == (uint64_t)count &&
                    multi == 0 && D(multi_step_rejected) == 0 && caps >= 1 && D(replays) > 0;
    if (rc) gu_fail(&R, "%s; %s", a.err, cs);
    else if (!ok)
        gu_fail(&R, "%llu of %d windows failed as injected; %d of %d steps differ (first: %s); streams left capturing %d; "
                    "%d graph(s) with a node count other than the single-step %zu (%s); %s",
                (unsigned long long)failed, count, a.mismatched_steps, steps + 1, a.first_bad[0] ? a.first_bad : "none",
                a.capturing_seen, multi, me->clean_nodes, nodes, cs);
    else
        gu_pass(&R, "%d injected %s failure(s): each step still bit-identical to direct launches over %d steps, no stream "
                    "left capturing, every cached graph single-step (%s nodes, clean %zu%s); %s", count, names[mode], steps,
                nodes, me->clean_nodes, me->clean_nodes ? "" : ": unknown, not compared", cs);
}

/* ---------------- two threads, two sessions ---------------- */
typedef struct {
    model_ent *me;
    int steps;
    int32_t prompt[8];
    int32_t *toks;            /* [steps] tokens fed (reference greedy) */
    float *ref;               /* [(steps+1) * V] direct logits */
    int64_t V;
    int mismatched;
    char msg[400];
    uint64_t wrap_serial;
} thr_arg;

static int make_reference(thr_arg *t) {
    mi_session *s = NULL;
    t->V = mi_model_hparams(t->me->m)->n_vocab;
    t->toks = calloc((size_t)t->steps + 1, sizeof *t->toks);
    t->ref = malloc((size_t)(t->steps + 1) * (size_t)t->V * sizeof(float));
    if (!t->toks || !t->ref) return 1;
    for (int i = 0; i < 8; i++) t->prompt[i] = (int32_t)(gu_rng(&g_seed) % (unsigned long long)t->V);
    mi_cuda_graph_set_enabled(false);
    int rc = open_session(t->me->m, 256, &s) != MI_OK;
    for (int step = 0; !rc && step <= t->steps; step++) {
        rc = mi_session_decode(s, step ? &t->toks[step - 1] : t->prompt, step ? 1 : 8, false) != MI_OK;
        if (rc) break;
        const float *l = mi_logits(s, NULL);
        memcpy(t->ref + (size_t)step * (size_t)t->V, l, (size_t)t->V * sizeof(float));
        t->toks[step] = argmax(l, t->V);
    }
    if (rc) snprintf(t->msg, sizeof t->msg, "reference: %s", mi_errmsg());
    mi_session_free(s);
    mi_cuda_graph_set_enabled(true);
    return rc;
}

static void *thr_main(void *p) {
    thr_arg *t = p;
    mi_session *s = NULL;
    if (open_session(t->me->m, 256, &s) != MI_OK) {
        snprintf(t->msg, sizeof t->msg, "session: %s", mi_errmsg());
        t->mismatched = -1;
        return NULL;
    }
    for (int step = 0; step <= t->steps; step++) {
        if (mi_session_decode(s, step ? &t->toks[step - 1] : t->prompt, step ? 1 : 8, false) != MI_OK) {
            snprintf(t->msg, sizeof t->msg, "decode step %d: %s", step, mi_errmsg());
            t->mismatched = -1;
            break;
        }
        const float *l = mi_logits(s, NULL), *r = t->ref + (size_t)step * (size_t)t->V;
        int64_t d = first_diff(l, r, t->V);
        if (d >= 0 && !t->mismatched++)
            snprintf(t->msg, sizeof t->msg, "step %d: logit %lld got %.9g want %.9g", step, (long long)d, l[d], r[d]);
    }
    mi_session_free(s);
    return NULL;
}

static void test_two_threads(model_ent *m1, model_ent *m2, int steps) {
    gu_begin(&R, "two_threads");
    if (!model_open(m1) || !model_open(m2)) {
        gu_skip(&R, "models %s / %s not available", m1->shape, m2->shape);
        return;
    }
    thr_arg t[2];
    memset(t, 0, sizeof t);
    t[0].me = m1;
    t[1].me = m2;
    for (int i = 0; i < 2; i++) {
        t[i].steps = steps;
        if (make_reference(&t[i])) {
            gu_fail(&R, "%s %s: %s", t[i].me->shape, t[i].me->type, t[i].msg);
            for (int j = 0; j <= i; j++) { free(t[j].toks); free(t[j].ref); }
            return;
        }
    }
    mi_cuda_graph_set_enabled(true);
    mi_cuda_graph_counters s0 = stats_now();
    pthread_t th[2];
    int started = 0;
    for (int i = 0; i < 2; i++)
        if (pthread_create(&th[i], NULL, thr_main, &t[i]) == 0) started++;
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    mi_cuda_graph_counters s1 = stats_now();
    char cs[600];
    counters_str(&s0, &s1, cs, sizeof cs);
    /* each capture must have the node count of its own model's single-step graph: work of
     * the other session recorded into it would add nodes */
    mi_cuda_graph_capture_rec rec[256];
    const uint64_t caps = s1.captures - s0.captures;
    int got = mi_cuda_graph_capture_log(rec, (int)(caps < 256 ? caps : 256));
    int foreign = 0, known = m1->clean_nodes && m2->clean_nodes;
    char nodes[300] = "";
    size_t nl = 0;
    for (int i = 0; i < got; i++) {
        if (known && rec[i].graph_nodes != m1->clean_nodes && rec[i].graph_nodes != m2->clean_nodes) foreign++;
        if (nl < sizeof nodes - 40) nl += (size_t)snprintf(nodes + nl, sizeof nodes - nl, "%s%zu", i ? "," : "", rec[i].graph_nodes);
    }
    const bool dev_np = mi_cuda_graph_npast_on_device();
    const bool ok = started == 2 && t[0].mismatched == 0 && t[1].mismatched == 0 && foreign == 0 &&
                    D(aborted_windows) == 0 && mi_cuda_graph_capturing_streams() == 0 && D(replays) > 0 &&
                    (!dev_np || caps == 2);
    if (ok)
        gu_pass(&R, "%s %s and %s %s decoding %d steps at once in two threads: both bit-identical to their direct "
                    "references; graph nodes per capture %s (single-step: %zu, %zu%s); %s", m1->shape, m1->type, m2->shape,
                m2->type, steps, nodes, m1->clean_nodes, m2->clean_nodes, known ? "" : ", unknown: not compared", cs);
    else
        gu_fail(&R, "threads %d; %s: %d step(s) differ%s%s; %s: %d step(s) differ%s%s; captures with a foreign node count "
                    "%d (%s; single-step %zu, %zu); %s", started, m1->shape, t[0].mismatched, t[0].msg[0] ? ": " : "",
                t[0].msg, m2->shape, t[1].mismatched, t[1].msg[0] ? ": " : "", t[1].msg, foreign, nodes,
                m1->clean_nodes, m2->clean_nodes, cs);
    for (int i = 0; i < 2; i++) { free(t[i].toks); free(t[i].ref); }
}

/* ---------------- A/B decode tok/s ---------------- */
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(const double *v, int n) {
    double t[64];
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}
static double stdev(const double *v, int n) {
    double m = 0, s = 0;
    for (int i = 0; i < n; i++) m += v[i];
    m /= n;
    for (int i = 0; i < n; i++) s += (v[i] - m) * (v[i] - m);
    return n > 1 ? sqrt(s / (n - 1)) : 0;
}

static double decode_run(mi_session *s, const int32_t *prompt, int ntok, int64_t V, mi_status *st) {
    mi_session_reset(s);
    *st = mi_session_decode(s, prompt, 16, false);
    double t0 = gu_now_ms();
    for (int i = 0; i < ntok && *st == MI_OK; i++) {
        int32_t tok = (int32_t)((1000 + 7 * i) % V);
        *st = mi_session_decode(s, &tok, 1, false);
    }
    double dt = gu_now_ms() - t0;
    return dt > 0 ? ntok / (dt / 1000.0) : 0;
}

static void bench_line(FILE *f, const model_ent *me, const char *test, const char *sw, double med, double sd, int reps,
                       const double *runs, double ratio) {
    char commit[128], date[64];
    gu_commit(commit, sizeof commit);
    gu_utc_now(date, sizeof date);
    const char *base = strrchr(me->path, '/');
    fprintf(f, "{\"model\": \"%s\", \"shape\": \"%s\", \"type\": \"%s\", \"backend\": \"cuda\", \"test\": \"%s\", "
               "\"tok_s\": %.3f, \"tok_s_sd\": %.3f, \"reps\": %d, \"gpu\": \"%s\", \"commit\": \"%s\", \"phase\": \"%s\", "
               "\"switches\": \"%s\", \"date\": \"%s\", \"median\": %.3f, \"ab_ratio_on_off\": %.4f, \"ab_order\": \"ABAB\", \"runs\": [",
            base ? base + 1 : me->path, me->shape, me->type, test, med, sd, reps, R.gpu, commit, mi_build_phase, sw, date, med,
            ratio);
    for (int i = 0; i < reps; i++) fprintf(f, "%s%.3f", i ? ", " : "", runs[i]);
    fputs("]}\n", f);
}

static void test_ab(model_ent *me, int reps, int ntok) {
    char name[96];
    snprintf(name, sizeof name, "ab_decode_%s_%s", me->shape, me->type);
    gu_begin(&R, name);
    if (!model_open(me)) {
        gu_skip(&R, "model %s %s not available", me->shape, me->type);
        return;
    }
    mi_session *s = NULL;
    if (open_session(me->m, 256, &s) != MI_OK) {
        gu_fail(&R, "session: %s", mi_errmsg());
        return;
    }
    const int64_t V = mi_model_hparams(me->m)->n_vocab;
    int32_t prompt[16];
    for (int i = 0; i < 16; i++) prompt[i] = (int32_t)((37 + 101 * i) % V);
    double on[32], off[32];
    if (reps > 32) reps = 32;
    if (reps < 1) reps = 1;
    mi_status st = MI_OK;
    mi_cuda_graph_counters s0 = stats_now();
    for (int w = 0; w < 2 && st == MI_OK; w++) {   /* warm-up: the capture, clocks */
        mi_cuda_graph_set_enabled(w == 0);
        decode_run(s, prompt, 8, V, &st);
    }
    for (int r = 0; r < reps && st == MI_OK; r++) {   /* A B A B ... */
        mi_cuda_graph_set_enabled(true);
        on[r] = decode_run(s, prompt, ntok, V, &st);
        mi_cuda_graph_set_enabled(false);
        if (st == MI_OK) off[r] = decode_run(s, prompt, ntok, V, &st);
    }
    mi_cuda_graph_set_enabled(true);
    mi_cuda_graph_counters s1 = stats_now();
    mi_session_free(s);
    if (st != MI_OK) {
        gu_fail(&R, "decode: %s", mi_errmsg());
        return;
    }
    const double mon = median(on, reps), moff = median(off, reps), ratio = moff > 0 ? mon / moff : 0;
    char test[32];
    snprintf(test, sizeof test, "tg%d", ntok);
    const char *dir = getenv("MINFER_BENCH_DIR");
    if (!dir || !*dir) dir = "results";
    char path[1200];
    snprintf(path, sizeof path, "%s/bench-7d-graphs.jsonl", dir);
    mkdir(dir, 0755);
    FILE *f = fopen(path, "a");
    for (int k = 0; k < 2; k++) {   /* the log gets the lines too (device runs bring logs back) */
        FILE *o = k == 0 ? stdout : f;
        if (!o) continue;
        if (k == 0) fputs("BENCH ", o);
        bench_line(o, me, test, "cuda_graph=on", mon, stdev(on, reps), reps, on, ratio);
        if (k == 0) fputs("BENCH ", o);
        bench_line(o, me, test, "cuda_graph=off", moff, stdev(off, reps), reps, off, ratio);
    }
    if (f) fclose(f);
    if (D(replays) == 0) {
        gu_fail(&R, "no graph was replayed in the 'on' runs: the A/B measures nothing (captures %llu, direct %llu)",
                D(captures), D(direct_splits));
        return;
    }
    gu_pass(&R, "tg%d decode, %d x (on, off) alternating: graphs on median %.1f tok/s (sd %.1f), off %.1f tok/s (sd %.1f), "
                "ratio on/off %.3f; %llu replays; lines appended to %s%s", ntok, reps, mon, stdev(on, reps), moff,
            stdev(off, reps), ratio, D(replays), path, f ? "" : " (could not open it: see BENCH lines in the log)");
}

/* ---------------- compute-sanitizer on a quick child run ---------------- */
static int find_tool(const char *name, char *out, size_t n) {
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s:/usr/local/cuda/bin", path ? path : "");
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, n, "%s/%s", d, name);
        if (access(out, X_OK) == 0) return 0;
    }
    return 1;
}

static void test_sanitizer(const char *tool) {
    char name[64];
    snprintf(name, sizeof name, "sanitizer_%s", tool);
    gu_begin(&R, name);
    char cs[1024];
    const char *ns = getenv("MINFER_GATE_NO_SANITIZER");
    if (ns && *ns && strcmp(ns, "0")) {
        gu_skip(&R, "MINFER_GATE_NO_SANITIZER set");
        return;
    }
    if (find_tool("compute-sanitizer", cs, sizeof cs)) {
        gu_skip(&R, "compute-sanitizer not found (PATH, /usr/local/cuda/bin)");
        return;
    }
    char tmo[1024] = "";
    if (find_tool("timeout", tmo, sizeof tmo) == 0) snprintf(tmo + strlen(tmo), sizeof tmo - strlen(tmo), " 240");
    else tmo[0] = 0;
    char log[256], cmd[4096];
    snprintf(log, sizeof log, "/tmp/gate7d-sanitizer-%s-%d.log", tool, (int)getpid());
    snprintf(cmd, sizeof cmd, "MINFER_GATE_CHILD=1 MINFER_GATE_JSON= MINFER_LOG=0 %s '%s' --tool %s --error-exitcode 9 "
             "'%s' >'%s' 2>&1", tmo, cs, tool, g_self_exe, log);
    int rc = system(cmd);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    FILE *f = fopen(log, "r");
    char line[1024], summ[1200] = "", gate[1100] = "";
    int fails = 0, n_summ = 0;
    long errors = -1, hazards = -1;
    unsigned gate_failed = 1;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        const char *e = strstr(line, "ERROR SUMMARY: "), *h = strstr(line, "RACECHECK SUMMARY: ");
        if (e) {
            long v = -1;
            if (sscanf(e + 15, "%ld error", &v) == 1) errors = errors < 0 ? v : errors + v;
        }
        if (h) {
            long v = -1;
            if (sscanf(h + 19, "%ld hazard", &v) == 1) hazards = hazards < 0 ? v : hazards + v;
        }
        if ((e || h) && n_summ++ < 2)
            snprintf(summ + strlen(summ), sizeof summ - strlen(summ), "%s%s", summ[0] ? "; " : "", e ? e : h);
        unsigned p = 0, fl = 0;
        if (sscanf(line, "%u passed, %u failed", &p, &fl) == 2) {
            snprintf(gate, sizeof gate, "%s", line);
            gate_failed = fl;
        }
        if (!strncmp(line, "FAIL", 4) && fails++ < 2) printf("    child: %s\n", line);
    }
    if (f) fclose(f);
    const bool clean = rc == 0 && gate[0] && gate_failed == 0 && (errors >= 0 || hazards >= 0) && errors <= 0 &&
                       hazards <= 0;
    if (clean) gu_pass(&R, "compute-sanitizer --tool %s on the quick run (tiny models: replay, injected node failure, "
                           "two threads): rc 0; %s; child: %s", tool, summ, gate);
    else gu_fail(&R, "compute-sanitizer --tool %s: rc %d; %s; child: %s (log %s)", tool, rc, summ[0] ? summ : "no summary",
                 gate[0] ? gate : "no result line", log);
}

int main(int argc, char **argv) {
    (void)argc;
    gu_init(&R, "gate-7d", "7d");
    gu_catch_crashes(&R, "gate_7d", 0);
    const char *q = getenv("MINFER_GATE_QUICK");
    g_quick = q && *q && strcmp(q, "0") != 0;
    const char *ch = getenv("MINFER_GATE_CHILD");
    g_child = ch && *ch && strcmp(ch, "0") != 0;
    if (g_child) g_quick = 1;
    ssize_t n = readlink("/proc/self/exe", g_self_exe, sizeof g_self_exe - 1);
    if (n > 0) g_self_exe[n] = 0;
    else snprintf(g_self_exe, sizeof g_self_exe, "%s", argv[0]);
    gu_minfer_path(g_self_exe, g_minfer, sizeof g_minfer);
    mi_phases_install();
    mi_backend *probe = NULL;
    if (mi_backend_create("cuda", &probe) != MI_OK) {
        printf("skipped: no CUDA device (%s)\n", mi_errmsg());
        gu_skip_named(&R, "gate_7d", "skipped: no CUDA device");
        return gu_finish(&R);
    }
    const mi_cudev_props *pr = mi_cuda_props(mi_cuda_ctx_of(probe));
    snprintf(R.gpu, sizeof R.gpu, "%s", pr->name);
    mi_cudev_driver_str(R.driver, sizeof R.driver);
    const bool wrapped = mi_cuda_graph_wrapped(probe);
    probe->iface->destroy(probe);
    printf("gate_7d: phase %s, %s, driver %s%s%s\n", mi_build_phase, R.gpu, R.driver, g_quick ? ", quick" : "",
           g_child ? " (sanitizer child)" : "");
    gu_begin(&R, "backend_wrapped");
    if (!wrapped) {
        gu_fail(&R, "mi_backend_create(\"cuda\") gave an unwrapped backend: 7d is not installed");
        return gu_finish(&R);
    }
    gu_pass(&R, "the registry's cuda backend carries the 7d wrapper; ATTN and KV_STORE read n_past on the device: %s",
            mi_cuda_graph_npast_on_device() ? "yes" : "no (the key holds n_past: recapture per step)");

    const char *st = getenv("MINFER_GATE_STEPS");
    const int steps = st && *st ? atoi(st) : g_quick ? 16 : 200;
    model_ent m05 = {"qwen2.5-0.5b", "q4_0", "", NULL, false, 0};
    model_ent m06 = {"qwen3-0.6b", "q8_0", "", NULL, false, 0};
    model_ent m7 = {"qwen2.5-7b", "q4_k_m", "", NULL, false, 0};
    model_ent t2 = {"tiny-qwen2", "q4_0", "", NULL, false, 0};
    model_ent t3 = {"tiny-qwen3", "q4_k_m", "", NULL, false, 0};

    step_ops7d_run(&R, &g_seed);
    if (g_quick) {
        t2.have = model_find(&t2) == 0;
        t3.have = model_find(&t3) == 0;
        test_replay(&t2, steps, true);
        test_replay(&t3, steps, false);
        test_inject(&t2, MI_GRAPH_FAIL_NODE, 1, 8);
        test_two_threads(&t2, &t3, 12);
        model_close(&t2);
        model_close(&t3);
        if (!g_child) {
            test_inject(&t3, MI_GRAPH_FAIL_BEGIN, 1, 8);
            test_inject(&t3, MI_GRAPH_FAIL_SYNC, 1, 8);
            model_close(&t3);
        }
    } else {
        m05.have = model_find(&m05) == 0;
        m06.have = model_find(&m06) == 0;
        test_replay(&m05, steps, true);
        test_replay(&m06, steps, false);
        test_inject(&m05, MI_GRAPH_FAIL_BEGIN, 2, 40);
        test_inject(&m05, MI_GRAPH_FAIL_NODE, 2, 40);
        test_two_threads(&m05, &m06, 64);
        model_close(&m06);
        const char *ar = getenv("MINFER_GATE_AB_REPS"), *at = getenv("MINFER_GATE_AB_TOKENS");
        const int ab_reps = ar && *ar ? atoi(ar) : 5, ab_tok = at && *at ? atoi(at) : 128;
        test_ab(&m05, ab_reps, ab_tok);
        if (getenv("MINFER_GATE_NO_7B") == NULL) {
            m7.have = model_find(&m7) == 0;
            test_replay(&m7, steps, false);
            test_ab(&m7, ab_reps > 3 ? 3 : ab_reps, ab_tok);
            model_close(&m7);
        } else {
            gu_skip_named(&R, "replay_vs_direct_qwen2.5-7b_q4_k_m", "MINFER_GATE_NO_7B set");
            gu_skip_named(&R, "ab_decode_qwen2.5-7b_q4_k_m", "MINFER_GATE_NO_7B set");
        }
        /* the sanitizer children need the tiny models */
        t2.have = model_find(&t2) == 0;
        t3.have = model_find(&t3) == 0;
        test_sanitizer("racecheck");
        test_sanitizer("synccheck");
        /* last: a real CUDA error inside a window */
        test_inject(&m05, MI_GRAPH_FAIL_SYNC, 1, 16);
        model_close(&m05);
    }
    gu_begin(&R, "counters");
    mi_cuda_graph_counters c = stats_now();
    mi_cuda_graph_counters z;
    memset(&z, 0, sizeof z);
    char cs[600];
    counters_str(&z, &c, cs, sizeof cs);
    mi_cuda_graph_flush();
    mi_cuda_graph_counters after = stats_now();
    if (after.cached != 0 || mi_cuda_graph_capturing_streams() != 0)
        gu_fail(&R, "after every session closed and a flush: %llu graphs still cached", (unsigned long long)after.cached);
    else
        gu_pass(&R, "whole run: %s; staged inputs %llu, step-param fills %llu, evictions %llu, max graph nodes %llu; "
                    "nothing cached or capturing at the end", cs, (unsigned long long)c.staged_inputs,
                (unsigned long long)c.param_fills, (unsigned long long)c.evictions, (unsigned long long)c.max_graph_nodes);
    return gu_finish(&R);
}

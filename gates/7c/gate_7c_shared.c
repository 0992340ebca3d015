/* Gate 7c, shared model: sessions on different backends over one loaded model keep their
 * own placement. A CPU session opened on a model that a CUDA session already uses (and
 * one opened concurrently, decoding in another thread) must not change where the CUDA
 * session's scheduler finds the weights: the CUDA session's logits stay bit-identical to
 * its lone run. Two placements are covered: resident weights (device copies), and a
 * model whose matmul type the CUDA op table lacks, run with an explicit "cuda" session
 * (weights in host memory, read across the boundary).
 * No device: "skipped: no CUDA device". Summary JSON: $MINFER_GATE_JSON. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gates/gate_util.h"
#include "gates/support/dispatch_mask.h"
#include "common/backend/backend.h"
#include "common/model/mi.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "phase7a_skeleton/cuda_dev.h"
#include "phase7c_wiring/wiring7c.h"

#define NP 8
#define STEPS 8

static gu_run R;
static char g_minfer[1024];

static mi_status open_session(mi_model *m, const char *backend, mi_session **s) {
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = backend;
    p.n_ctx = 64;
    p.n_threads = 2;
    return mi_session_new(m, &p, s);
}

/* prompt, then STEPS greedy tokens; out: [STEPS+1][V] logits after each step */
static mi_status greedy(mi_session *s, int64_t V, float *out) {
    int32_t prompt[NP];
    for (int i = 0; i < NP; i++) prompt[i] = (int32_t)((37 * i + 11) % V);
    mi_session_reset(s);
    MI_TRY(mi_session_decode(s, prompt, NP, false));
    for (int k = 0; k <= STEPS; k++) {
        const float *l = mi_logits(s, NULL);
        memcpy(out + (size_t)k * (size_t)V, l, (size_t)V * sizeof(float));
        if (k == STEPS) break;
        int32_t b = 0;
        for (int64_t v = 1; v < V; v++)
            if (l[v] > l[b]) b = (int32_t)v;
        MI_TRY(mi_session_decode(s, &b, 1, false));
    }
    return MI_OK;
}

typedef struct {
    mi_session *s;
    int64_t V;
    float *out;
    mi_status st;
} job;

static void *run_job(void *p) {
    job *j = p;
    j->st = greedy(j->s, j->V, j->out);
    return NULL;
}

static void check_shared(const char *name, const char *path, const char *cuda_want) {
    gu_begin(&R, name);
    mi_model *m = NULL;
    mi_session *g = NULL, *c = NULL;
    float *ref = NULL, *after = NULL, *conc = NULL, *cpu = NULL;
    const char *err = NULL;
    char why[400] = "";
    if (mi_model_load(path, &m) != MI_OK) {
        gu_fail(&R, "load %s: %s", path, mi_errmsg());
        return;
    }
    const int64_t V = mi_model_hparams(m)->n_vocab;
    const size_t n = (size_t)(STEPS + 1) * (size_t)V;
    ref = calloc(n, sizeof *ref), after = calloc(n, sizeof *after), conc = calloc(n, sizeof *conc), cpu = calloc(n, sizeof *cpu);
    bool resident = mi7c_model_on_cuda(m, why, sizeof why);
    if (!ref || !after || !conc || !cpu) err = "out of memory";
    else if (open_session(m, cuda_want, &g) != MI_OK) err = "cuda session";
    else if (strcmp(mi_session_backend(g), "cuda")) err = "the session is not on CUDA";
    else if (greedy(g, V, ref) != MI_OK) err = "cuda session alone";
    else if (open_session(m, "cpu", &c) != MI_OK) err = "cpu session";
    else if (greedy(g, V, after) != MI_OK) err = "cuda session after a CPU session opened";
    else if (memcmp(ref, after, n * sizeof *ref)) err = "the CUDA session's logits changed once a CPU session was opened";
    else {
        job jg = {g, V, conc, MI_OK}, jc = {c, V, cpu, MI_OK};
        pthread_t th;
        pthread_create(&th, NULL, run_job, &jc);
        run_job(&jg);
        pthread_join(th, NULL);
        if (jg.st != MI_OK || jc.st != MI_OK) err = "concurrent decode";
        else if (memcmp(ref, conc, n * sizeof *ref)) err = "the CUDA session's logits differ while a CPU session decodes";
    }
    if (err) gu_fail(&R, "%s (%s): %s", err, resident ? "resident" : why, mi_errmsg());
    else
        gu_pass(&R, "%s weights; %d steps bit-identical alone, after a CPU session opened, and concurrent with it; "
                    "CPU vs CUDA final-step nmse %.2e", resident ? "resident" : "host", STEPS + 1,
                gu_nmse(cpu + (size_t)STEPS * (size_t)V, ref + (size_t)STEPS * (size_t)V, (size_t)V));
    mi_session_free(g);
    mi_session_free(c);
    mi_model_free(m);
    free(ref);
    free(after);
    free(conc);
    free(cpu);
}

int main(int argc, char **argv) {
    (void)argc;
    gu_init(&R, "gate-7c-shared", "7c");
    gu_catch_crashes(&R, "gate_7c_shared", 1);
    gu_minfer_path(argv[0], g_minfer, sizeof g_minfer);
    mi_phases_install();
    int ndev = 0;
    if (mi_cudev_count(&ndev) != MI_OK || ndev == 0) {
        printf("skipped: no CUDA device (%s)\n", mi_errmsg());
        gu_skip_named(&R, "gate_7c_shared", "skipped: no CUDA device");
        return gu_finish(&R);
    }
    char path[600], cmd[2000];
    snprintf(path, sizeof path, "/tmp/minfer-7c-shared-%d.gguf", (int)getpid());
    snprintf(cmd, sizeof cmd, "'%s' synth --shape tiny-llama --type q8_0 -o '%s' >/dev/null 2>&1", g_minfer, path);
    if (system(cmd) != 0) {
        gu_skip_named(&R, "shared_model", "could not synthesize the model (minfer synth missing?)");
        return gu_finish(&R);
    }
    check_shared("shared_model_resident", path, "auto");
    /* a build whose matmul lacks Q8_0: the model stays in host memory, an explicit cuda
     * session places each op where the table allows and reads the weights across */
    gate_matmul_refuse(MI_TYPE_Q8_0);
    check_shared("shared_model_host_weights", path, "cuda");
    gate_matmul_restore();
    unlink(path);
    return gu_finish(&R);
}

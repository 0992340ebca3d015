/* gate_7a, whole models and failure paths: a model's logits are bit-identical with Input
 * on CUDA; MINFER_DISABLE_CUDA, no visible device and injected cudaMalloc failures end in a
 * CPU run or a clear error, never a crash. Child runs re-execute this program (--child). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "gates/7a/gate7a.h"
#include "common/model/mi.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "phase7a_skeleton/cuda_dev.h"

uint64_t gate7a_fnv64(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ULL; }
    return h;
}

/* Prompt of 7 tokens (all logits), then 3 single-token steps; logits concatenated. */
mi_status gate7a_model_logits(const char *path, const char *backend, float **out, size_t *n_out, char *used,
                              size_t used_n) {
    *out = NULL;
    *n_out = 0;
    mi_model *m = NULL;
    mi_session *s = NULL;
    float *acc = NULL;
    MI_TRY(mi_model_load(path, &m));
    const mi_hparams *hp = mi_model_hparams(m);
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = backend;
    p.n_ctx = 64;
    mi_status st = mi_session_new(m, &p, &s);
    size_t nv = (size_t)hp->n_vocab, total = nv * 10, have = 0;
    if (st == MI_OK) {
        snprintf(used, used_n, "%s", mi_session_backend(s));
        acc = malloc(total * sizeof *acc);
        if (!acc) st = mi_err(MI_ERR_NOMEM, "logits");
    }
    int32_t toks[7];
    for (int i = 0; i < 7; i++) toks[i] = (int32_t)((i * 37 + 11) % hp->n_vocab);
    if (st == MI_OK) st = mi_session_decode(s, toks, 7, true);
    for (int step = 0; step < 4 && st == MI_OK; step++) {
        int64_t rows = 0;
        const float *l = mi_logits(s, &rows);
        memcpy(acc + have, l, (size_t)rows * nv * sizeof *acc);
        have += (size_t)rows * nv;
        if (step < 3) {
            int32_t t = (int32_t)((step * 101 + 5) % hp->n_vocab);
            st = mi_session_decode(s, &t, 1, false);
        }
    }
    mi_session_free(s);
    mi_model_free(m);
    if (st != MI_OK) { free(acc); return st; }
    *out = acc;
    *n_out = have;
    return MI_OK;
}

/* Run self (this program) as a child with env_kv (name, value, ..., NULL) added to the
 * environment; out gets its output. Returns the exit code, or -signal if it died from one. */
extern char **environ;

static int run_child(const char *self, const char *const *env_kv, const char *mode, const char *model, char *out,
                     size_t out_n) {
    /* the environment is built before fork: between fork and exec a child of a threaded
     * process (CUDA runtime, CPU pool) may only make async-signal-safe calls */
    int n_env = 0, n_kv = 0;
    while (environ[n_env]) n_env++;
    while (env_kv[2 * n_kv]) n_kv++;
    char **envp = calloc((size_t)(n_env + n_kv + 1), sizeof *envp);
    char *kvbuf = calloc((size_t)n_kv + 1, 512);
    if (!envp || !kvbuf) { free(envp); free(kvbuf); return -1000; }
    int w = 0;
    for (int i = 0; i < n_env; i++) {
        int replaced = 0;
        for (int k = 0; k < n_kv; k++) {
            size_t l = strlen(env_kv[2 * k]);
            if (!strncmp(environ[i], env_kv[2 * k], l) && environ[i][l] == '=') replaced = 1;
        }
        if (!replaced) envp[w++] = environ[i];
    }
    for (int k = 0; k < n_kv; k++) {
        char *kv = kvbuf + 512 * (size_t)k;
        snprintf(kv, 512, "%s=%s", env_kv[2 * k], env_kv[2 * k + 1]);
        envp[w++] = kv;
    }
    envp[w] = NULL;
    char *const argv[] = {(char *)self, (char *)"--child", (char *)mode, (char *)(model ? model : ""), NULL};
    int pfd[2];
    out[0] = 0;
    if (pipe(pfd)) { free(envp); free(kvbuf); return -1000; }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { close(pfd[0]); close(pfd[1]); free(envp); free(kvbuf); return -1000; }
    if (pid == 0) {
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        close(pfd[0]);
        close(pfd[1]);
        execve(self, argv, envp);
        _exit(127);
    }
    close(pfd[1]);
    free(envp);
    free(kvbuf);
    size_t have = 0;
    for (;;) {
        char tmp[4096];
        ssize_t k = read(pfd[0], tmp, sizeof tmp);
        if (k <= 0) break;
        size_t take = (size_t)k < out_n - 1 - have ? (size_t)k : out_n - 1 - have;
        memcpy(out + have, tmp, take);
        have += take;
    }
    out[have] = 0;
    close(pfd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) return -WTERMSIG(status);
    return WEXITSTATUS(status);
}

static int count_str(const char *h, const char *n) {
    int c = 0;
    for (const char *p = h; (p = strstr(p, n)); p += strlen(n)) c++;
    return c;
}

static void last_line(const char *s, char *buf, size_t n) {
    size_t len = strlen(s);
    while (len && (s[len - 1] == '\n' || s[len - 1] == ' ')) len--;
    size_t b = len;
    while (b && s[b - 1] != '\n') b--;
    size_t k = len - b < n - 1 ? len - b : n - 1;
    memcpy(buf, s + b, k);
    buf[k] = 0;
}


void gate7a_whole_model(gate7a *ctx) {
    if (!ctx->n_models) { gu_skip_named(&ctx->run, "whole_model", "no model (MINFER_GATE_MODELS unset)"); return; }
    for (int mi = 0; mi < ctx->n_models; mi++) {
        char name[96];
        const char *base = strrchr(ctx->models[mi], '/');
        snprintf(name, sizeof name, "whole_model:%s", base ? base + 1 : ctx->models[mi]);
        gu_begin(&ctx->run, name);
        float *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        char ua[16], ub[16];
        double t0 = gu_now_ms();
        CHECK_OK(gate7a_model_logits(ctx->models[mi], "cpu", &a, &na, ua, sizeof ua), "cpu run");
        double t1 = gu_now_ms();
        CHECK_OK(gate7a_model_logits(ctx->models[mi], "cuda", &b, &nb, ub, sizeof ub), "cuda run");
        double t2 = gu_now_ms();
        ctx->cpu_hash[mi] = gate7a_fnv64(a, na * sizeof *a);
        ctx->cpu_n[mi] = na;
        CHECK(!strcmp(ua, "cpu") && !strcmp(ub, "cuda"), "sessions ran on %s and %s", ua, ub);
        CHECK(na == nb && na > 0, "logit counts %zu vs %zu", na, nb);
        {
            size_t nbad = 0, first = 0;
            for (size_t i = 0; i < na; i++) {
                uint32_t x, y;
                memcpy(&x, &a[i], 4);
                memcpy(&y, &b[i], 4);
                if (x != y) { if (!nbad) first = i; nbad++; }
            }
            CHECK(nbad == 0, "%zu of %zu logits differ; first [%zu]: got %.9g want %.9g", nbad, na, first,
                  b[first], a[first]);
        }
        gu_pass(&ctx->run, "%zu logits (7-token prompt + 3 steps) bit-identical, hash %016llx; cpu %.0f ms, cuda-enabled %.0f ms",
                na, (unsigned long long)ctx->cpu_hash[mi], t1 - t0, t2 - t1);
    done:
        free(a);
        free(b);
    }
}

void gate7a_disable_cuda(gate7a *ctx) {
    gu_begin(&ctx->run, "disable_cuda");
    mi_backend *be = NULL;
    float *l = NULL;
    setenv("MINFER_DISABLE_CUDA", "1", 1);
    mi_status st = mi_backend_create("cuda", &be);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", mi_errmsg());
    if (st == MI_OK) be->iface->destroy(be);
    CHECK(st == MI_ERR_DEVICE && strstr(msg, "MINFER_DISABLE_CUDA"), "create gave %s '%s'", mi_status_name(st), msg);
    if (ctx->n_models && ctx->cpu_n[0]) {
        size_t n = 0;
        char used[16];
        CHECK_OK(gate7a_model_logits(ctx->models[0], "auto", &l, &n, used, sizeof used), "auto session");
        CHECK(!strcmp(used, "cpu"), "auto session ran on %s", used);
        CHECK(n == ctx->cpu_n[0] && gate7a_fnv64(l, n * sizeof *l) == ctx->cpu_hash[0], "logits differ from the CPU run");
        gu_pass(&ctx->run, "create refused ('%s'); --backend auto ran on the CPU with the CPU logits", msg);
    } else {
        gu_pass(&ctx->run, "create refused ('%s'); no model for the session part", msg);
    }
done:
    unsetenv("MINFER_DISABLE_CUDA");
    free(l);
}

void gate7a_no_device(gate7a *ctx) {
    gu_begin(&ctx->run, "no_device");
    if (ctx->quick) { gu_skip(&ctx->run, "child processes not run in quick mode"); return; }
    static const char *const env[] = {"CUDA_VISIBLE_DEVICES", "", NULL};
    char out[16384], tail[512];
    int rc = run_child(ctx->self, env, "probe", NULL, out, sizeof out);
    last_line(out, tail, sizeof tail);
    CHECK(rc == 1 && strstr(out, "no CUDA device"), "probe without a device: rc %d, '%s'", rc, tail);
    if (ctx->n_models && ctx->cpu_n[0]) {
        char want[64];
        snprintf(want, sizeof want, "backend=cpu hash=%016llx", (unsigned long long)ctx->cpu_hash[0]);
        rc = run_child(ctx->self, env, "auto", ctx->models[0], out, sizeof out);
        last_line(out, tail, sizeof tail);
        CHECK(rc == 0 && strstr(out, want), "auto without a device: rc %d, '%s'", rc, tail);
        int says = count_str(out, "CUDA unavailable") + count_str(out, "no CUDA device");
        CHECK(says >= 1 && says <= 2 && count_str(out, "CUDA unavailable") <= 1,
              "auto without a device should say so once; said %d times", says);
        rc = run_child(ctx->self, env, "cuda", ctx->models[0], out, sizeof out);
        last_line(out, tail, sizeof tail);
        CHECK(rc == 1 && strstr(out, "no CUDA device"), "--backend cuda without a device: rc %d, '%s'", rc, tail);
        gu_pass(&ctx->run, "CUDA_VISIBLE_DEVICES='': create says 'no CUDA device'; auto runs on the CPU with the CPU "
                "logits, saying so once; cuda ends in a clear error: '%s'", tail);
    } else {
        gu_pass(&ctx->run, "CUDA_VISIBLE_DEVICES='': create says 'no CUDA device' (no model for the session part)");
    }
done:;
}

void gate7a_fail_malloc(gate7a *ctx) {
    gu_begin(&ctx->run, "fail_malloc");
    mi_backend *be = NULL;
    mi_buffer *b = NULL;
    mi_sched *s = NULL;
    int n_clean = 0, n_err = 0;
    float x[64 * 4];
    gate7a_input(x, 64 * 4, 3);
    CHECK_OK(mi_cuda_backend_new(ctx->dev, &be), "fresh backend");
    mi_cudev_fail_malloc_at(1);
    mi_status st = be->iface->buffer_alloc(be, 1000, &b);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", mi_errmsg());
    CHECK(st == MI_ERR_DEVICE && !b && strstr(msg, "cudaMalloc") && strstr(msg, "injected"),
          "injected failure gave %s '%s'", mi_status_name(st), msg);
    CHECK_OK(be->iface->buffer_alloc(be, 1000, &b), "the allocation after the injected failure");
    be->iface->buffer_free(be, b);
    b = NULL;
    be->iface->destroy(be);
    be = NULL;
    /* through the scheduler: the graph allocation fails cleanly, then works */
    {
        mi_backend *bes[2];
        CHECK_OK(mi_cuda_backend_new(ctx->dev, &be), "fresh backend");
        bes[0] = be;
        bes[1] = ctx->cpu;
        CHECK_OK(sched_new(bes, 2, &s), "sched_new");
        mi_cudev_fail_malloc_at(1);
        st = gate7a_run_shape(s, 64, 4, x, NULL);
        CHECK(st != MI_OK && strstr(mi_errmsg(), "cudaMalloc"), "graph run with a failing cudaMalloc: %s '%s'",
              mi_status_name(st), mi_errmsg());
        mi_cudev_fail_malloc_at(0);
        CHECK_OK(gate7a_run_shape(s, 64, 4, x, NULL), "graph run after the failure");
    }
    mi_cudev_fail_malloc_at(0);
    if (!ctx->quick && ctx->n_models && ctx->cpu_n[0]) {
        char want[64], out[16384], tail[512];
        snprintf(want, sizeof want, "hash=%016llx", (unsigned long long)ctx->cpu_hash[0]);
        for (int n = 1; n <= 3; n++) {
            char nstr[16];
            snprintf(nstr, sizeof nstr, "%d", n);
            const char *env[] = {"MINFER_CUDA_FAIL_MALLOC", nstr, NULL};
            int rc = run_child(ctx->self, env, "cuda", ctx->models[0], out, sizeof out);
            last_line(out, tail, sizeof tail);
            CHECK(rc >= 0, "MINFER_CUDA_FAIL_MALLOC=%d: the run died from signal %d: '%s'", n, -rc, tail);
            if (rc == 0) {
                CHECK(strstr(out, want), "MINFER_CUDA_FAIL_MALLOC=%d: clean exit but logits differ: '%s'", n, tail);
                n_clean++;
            } else {
                CHECK(rc == 1 && strstr(out, "cudaMalloc"), "MINFER_CUDA_FAIL_MALLOC=%d: rc %d without a clear "
                      "message: '%s'", n, rc, tail);
                n_err++;
            }
        }
        gu_pass(&ctx->run, "in-process: clear error then recovery (pool and scheduler); whole model with the 1st..3rd "
                "cudaMalloc failing: %d clear errors, %d clean runs, no crash ('%s')", n_err, n_clean, msg);
    } else {
        gu_pass(&ctx->run, "in-process: clear error then recovery (pool and scheduler): '%s'", msg);
    }
done:
    mi_cudev_fail_malloc_at(0);
    if (s) sched_free(s);
    if (b && be) be->iface->buffer_free(be, b);
    if (be) be->iface->destroy(be);
}

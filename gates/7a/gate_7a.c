/* Phase 7a device gate: the CUDA device layer, buffer pool, host<->device copies,
 * split boundaries, persistent (KV) regions, whole-model parity with Input on CUDA,
 * and the failure paths (MINFER_DISABLE_CUDA, no device, injected cudaMalloc failure).
 * This file sets up and runs the tests; their bodies are in device_pool_tests.c,
 * sched_tests.c and model_tests.c (gates/7a/gate7a.h).
 * Plain C; prints one line per test and "N passed, N failed, N skipped"; JSON summary
 * to $MINFER_GATE_JSON. Env: MINFER_GATE_MODELS=a.gguf:b.gguf, MINFER_GATE_QUICK=1 (sizes to
 * 64 MiB, no child processes), MINFER_GATE_SANITIZER=1, MINFER_GATE_ONLY=name,name. */
#include "gates/7a/gate7a.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "phase7a_skeleton/cuda_dev.h"
#include "common/model/mi.h"
#include <signal.h>
#include <unistd.h>

/* every test name, for the no-device summary */
static const char *const k_tests[] = {
    "device_props", "error_text", "supports_input_only", "pool_roundtrip", "pool_generation",
    "copy_across", "split_boundary", "dump_graph", "kv_persist", "whole_model", "disable_cuda",
    "no_device", "fail_malloc",
};

/* In run order. key: what MINFER_GATE_ONLY matches (as a substring of its list); the 7a
 * claims hold with the higher phases' kernels set aside, from pool_roundtrip on. */
typedef struct { const char *key; void (*run)(gate7a *ctx); bool input_only; } gate7a_test;
static const gate7a_test k_run[] = {
    {"device_props", gate7a_device_props, false},
    {"error_text", gate7a_error_text, false},
    {"supports", gate7a_supports, false},
    {"pool_roundtrip", gate7a_pool_roundtrip, true},
    {"pool_generation", gate7a_pool_generation, true},
    {"copy_across", gate7a_copy_across, true},
    {"split_boundary", gate7a_split_boundary, true},
    {"kv_persist", gate7a_kv_persist, true},
    {"whole_model", gate7a_whole_model, true},
    {"disable_cuda", gate7a_disable_cuda, true},
    {"no_device", gate7a_no_device, true},
    {"fail_malloc", gate7a_fail_malloc, true},
};

/* Higher phases add kernels; the 7a claims (Input on CUDA, everything else on the CPU)
 * are tested with the dispatch emptied again, so this gate means the same at 7b..7e. */
#define SAVED_MAX 64   /* above the dispatch's candidates per op: every one is set aside */
static const mi_cuda_kernel *g_saved[MI_OP_COUNT][SAVED_MAX];
static int g_n_saved[MI_OP_COUNT];
static int ops_input_only(void) {
    int n = 0;
    for (int op = MI_OP_INPUT + 1; op < MI_OP_COUNT; op++) {
        g_n_saved[op] = mi_cuda_kernels((mi_op)op, g_saved[op], SAVED_MAX);
        if (g_n_saved[op] > SAVED_MAX) {   /* a candidate left in place would run its op on CUDA */
            fprintf(stderr, "gate_7a: %d candidates of op %s, room for %d\n", g_n_saved[op], mi_op_name((mi_op)op),
                    SAVED_MAX);
            abort();
        }
        n += g_n_saved[op];
        for (int i = 0; i < g_n_saved[op]; i++) mi_cuda_remove_kernel((mi_op)op, g_saved[op][i]);
    }
    return n;
}
static void ops_restore(void) {
    for (int op = MI_OP_INPUT + 1; op < MI_OP_COUNT; op++)
        for (int i = g_n_saved[op] - 1; i >= 0; i--) mi_cuda_add_kernel((mi_op)op, g_saved[op][i]);
}

/* The child run of model_tests.c (--child MODE MODEL): "probe" creates a CUDA backend; any
 * other mode is a session backend whose logits hash it prints. */
static int child_main(const char *mode, const char *model) {
    mi_phases_install();
    ops_input_only();
    if (!strcmp(mode, "probe")) {
        mi_backend *be = NULL;
        mi_status st = mi_backend_create("cuda", &be);
        if (st != MI_OK) { fprintf(stderr, "error: %s\n", mi_errmsg()); return 1; }
        be->iface->destroy(be);
        printf("backend=cuda\n");
        return 0;
    }
    float *l = NULL;
    size_t n = 0;
    char used[16] = "?";
    mi_status st = gate7a_model_logits(model, mode, &l, &n, used, sizeof used);
    if (st != MI_OK) { fprintf(stderr, "error: %s\n", mi_errmsg()); return 1; }
    printf("backend=%s hash=%016llx n=%zu\n", used, (unsigned long long)gate7a_fnv64(l, n * sizeof *l), n);
    free(l);
    return 0;
}

/* The environment's settings into ctx (the models point into a static copy). */
static void read_env(gate7a *ctx, const char *argv0) {
    ssize_t k = readlink("/proc/self/exe", ctx->self, sizeof ctx->self - 1);
    if (k <= 0) snprintf(ctx->self, sizeof ctx->self, "%s", argv0);
    else ctx->self[k] = 0;
    const char *q = getenv("MINFER_GATE_QUICK");
    ctx->quick = q && *q && strcmp(q, "0");
    const char *ms = getenv("MINFER_GATE_MODELS");
    static char mbuf[4096];
    if (ms && *ms) {
        snprintf(mbuf, sizeof mbuf, "%s", ms);
        for (char *t = strtok(mbuf, ":"); t && ctx->n_models < GATE7A_MAX_MODELS; t = strtok(NULL, ":"))
            if (*t) ctx->models[ctx->n_models++] = t;
    }
    const char *dv = getenv("MINFER_CUDA_DEVICE");
    ctx->dev = dv && *dv ? atoi(dv) : 0;
}

/* The shared CUDA backend, or every test skipped with the reason (returns 0 then). */
static int open_cuda(gate7a *ctx) {
    int n = 0;
    mi_err_clear();
    mi_cudev_count(&n);
    mi_status st = MI_OK;
    if (n > 0) st = mi_backend_create("cuda", &ctx->cuda);
    if (n > 0 && st == MI_OK) return 1;
    char why[600];
    if (n == 0) {
        const char *reason = mi_errmsg();
        if (reason && *reason) snprintf(why, sizeof why, "no CUDA device (%s)", reason);
        else snprintf(why, sizeof why, "no CUDA device");
    } else {
        snprintf(why, sizeof why, "%s", mi_errmsg());
    }
    printf("skipped: %s\n", why);
    for (size_t i = 0; i < sizeof k_tests / sizeof k_tests[0]; i++) gu_skip_named(&ctx->run, k_tests[i], why);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "--child")) return child_main(argv[2], argc >= 4 ? argv[3] : "");
    signal(SIGPIPE, SIG_IGN);
    static gate7a ctx;
    read_env(&ctx, argv[0]);
    const char *only = getenv("MINFER_GATE_ONLY");   /* name[,name]: run only these tests (debugging) */
    if (only && !*only) only = NULL;
    gu_init(&ctx.run, "gate_7a", mi_build_phase);
    mi_phases_install();
    if (!open_cuda(&ctx)) return gu_finish(&ctx.run);
    mi_cudev_driver_str(ctx.run.driver, sizeof ctx.run.driver);
    snprintf(ctx.run.gpu, sizeof ctx.run.gpu, "%s", mi_cuda_props(mi_cuda_ctx_of(ctx.cuda))->name);
    if (mi_backend_cpu_new(0, &ctx.cpu) != MI_OK) {
        gu_begin(&ctx.run, "setup");
        gu_fail(&ctx.run, "CPU backend: %s", mi_errmsg());
        return gu_finish(&ctx.run);
    }
    /* the scheduler sets index; tests that use a backend outside a scheduler keep them apart */
    ctx.cuda->index = 0;
    ctx.cpu->index = 1;
    printf("gate_7a: phase %s, %s, driver %s%s\n", mi_build_phase, ctx.run.gpu, ctx.run.driver,
           ctx.quick ? ", quick" : "");

    bool cleared = false;
    for (size_t i = 0; i < sizeof k_run / sizeof k_run[0]; i++) {
        if (k_run[i].input_only && !cleared) {
            int n_cleared = ops_input_only();
            if (n_cleared) printf("gate_7a: %d op kernels of higher phases set aside: the 7a claims are tested\n", n_cleared);
            cleared = true;
        }
        if (!only || strstr(only, k_run[i].key)) k_run[i].run(&ctx);
    }
    if (cleared) ops_restore();
    ctx.cpu->iface->destroy(ctx.cpu);
    ctx.cuda->iface->destroy(ctx.cuda);
    return gu_finish(&ctx.run);
}

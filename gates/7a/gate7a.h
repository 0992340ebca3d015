/* gate_7a's tests, in three units by subject (device_pool_tests.c, sched_tests.c,
 * model_tests.c), and the state they share; gate_7a.c sets it up and runs them in order.
 * Each test records one result (split_boundary two: it also records dump_graph). */
#ifndef GATE_7A_H
#define GATE_7A_H
#include <stdint.h>
#include "gates/gate_util.h"
#include "common/backend/sched.h"

#define GATE7A_MAX_MODELS 8
typedef struct {
    gu_run run;
    mi_backend *cuda, *cpu;   /* shared (index 0 and 1), for the tests that need no fresh pool */
    int dev;                  /* CUDA device id (MINFER_CUDA_DEVICE, default 0) */
    int quick;                /* MINFER_GATE_QUICK: sizes to 64 MiB, no child processes */
    char self[4096];          /* this program, re-run as a child with another environment */
    char *models[GATE7A_MAX_MODELS];   /* MINFER_GATE_MODELS, split at ':' */
    int n_models;
    /* set by gate7a_whole_model, per model: the CPU run's logits hash and count (0: not run) */
    uint64_t cpu_hash[GATE7A_MAX_MODELS];
    size_t cpu_n[GATE7A_MAX_MODELS];
} gate7a;

/* In a test body (which has `gate7a *ctx` and a `done:` label): fail the test and jump. */
#define CHECK(cond, ...) do { if (!(cond)) { gu_fail(&ctx->run, __VA_ARGS__); goto done; } } while (0)
#define CHECK_OK(expr, what) do { mi_status st__ = (expr); \
    if (st__ != MI_OK) { gu_fail(&ctx->run, "%s: %s", (what), mi_errmsg()); goto done; } } while (0)

/* device_pool_tests.c: the device layer, the buffer pool, host<->device copies */
void gate7a_device_props(gate7a *ctx);
void gate7a_error_text(gate7a *ctx);
void gate7a_supports(gate7a *ctx);          /* records supports_input_only */
void gate7a_pool_roundtrip(gate7a *ctx);
void gate7a_pool_generation(gate7a *ctx);
void gate7a_copy_across(gate7a *ctx);

/* sched_tests.c: graphs split between CUDA and the CPU, persistent device memory */
void gate7a_split_boundary(gate7a *ctx);    /* records split_boundary and dump_graph */
void gate7a_kv_persist(gate7a *ctx);
/* x [n]: seeded uniform values in [-4, 4) with a signed zero and two subnormals first */
void gate7a_input(float *x, int64_t n, unsigned long long seed);
/* Input x (D, N) -> silu on a scheduler whose backend 0 is CUDA; *in_ptr (if non-NULL)
 * gets the Input's device address: one pool block of about D*N*4 bytes */
mi_status gate7a_run_shape(mi_sched *s, int64_t D, int64_t N, const float *x, void **in_ptr);

/* model_tests.c: whole models on CPU vs CUDA, and the failure paths */
void gate7a_whole_model(gate7a *ctx);
void gate7a_disable_cuda(gate7a *ctx);
void gate7a_no_device(gate7a *ctx);
void gate7a_fail_malloc(gate7a *ctx);
/* Load path, decode a 7-token prompt (all logits) then 3 single-token steps on backend;
 * *out (malloc'd, *n_out floats) the logits concatenated, used the backend that ran. */
mi_status gate7a_model_logits(const char *path, const char *backend, float **out, size_t *n_out, char *used,
                              size_t used_n);
uint64_t gate7a_fnv64(const void *p, size_t n);

#endif

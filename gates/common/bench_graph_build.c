/* Micro-benchmark (not a test): host time of building one decode step's graph (one token at
 * n_past 5, model_build_graph + graph_free), the work every decode step does on the host before
 * its kernels can start (docs/PHASE8A.md: the step is built, passed, assigned and replayed each
 * token). Median of -r rounds of -n builds each.
 *   bench_graph_build MODEL.gguf [-n 200] [-r 5] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/model/mi.h"
#include "common/model/model_internal.h"
#include "common/backend/backend.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int n = 200, rounds = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (argv[i][0] != '-') path = argv[i];
    }
    if (!path || n < 1 || rounds < 1 || rounds > 64) {
        fprintf(stderr, "usage: bench_graph_build MODEL.gguf [-n 200] [-r 5]\n");
        return 1;
    }
    mi_model *m = NULL;
    mi_backend *cpu = NULL;
    mi_kv_cache kv;
    if (mi_model_load(path, &m) != MI_OK || mi_backend_cpu_new(1, &cpu) != MI_OK ||
        kv_cache_init(&kv, mi_model_hparams(m), MI_TYPE_F16, 64, cpu) != MI_OK) {
        fprintf(stderr, "bench_graph_build: %s\n", mi_errmsg());
        return 1;
    }
    const int32_t id = 1, pos = 5;
    double t[64];
    int nodes = 0;
    for (int r = 0; r < rounds; r++) {
        const double t0 = now_us();
        for (int i = 0; i < n; i++) {
            mi_build_args a = {.ids = &id, .pos = &pos, .n = 1, .n_past = 5};
            mi_graph *g = NULL;
            if (model_build_graph(m, &kv, &a, &g) != MI_OK) {
                fprintf(stderr, "bench_graph_build: %s\n", mi_errmsg());
                return 1;
            }
            nodes = g->n_nodes;
            graph_free(g);
        }
        t[r] = (now_us() - t0) / n;
    }
    qsort(t, (size_t)rounds, sizeof t[0], cmp_d);
    printf("%s: one decode step's graph (%d nodes, %lld layers): %.1f us to build (median of %d rounds of %d; "
           "min %.1f, max %.1f)\n", path, nodes, (long long)mi_model_hparams(m)->n_layer, t[rounds / 2], rounds, n, t[0],
           t[rounds - 1]);
    kv_cache_free(&kv);
    cpu->iface->destroy(cpu);
    mi_model_free(m);
    return 0;
}

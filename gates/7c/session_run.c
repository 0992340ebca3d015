/* gates/7c/session_run.h: session helpers shared by gate_7c.c and its split-out tests. */
#include "gates/7c/session_run.h"
#include <string.h>
#include "phase7a_skeleton/cuda_dev.h"

int64_t gate_argmax(const float *l, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

unsigned long long gate_logits_hash(const float *l, size_t n) {
    unsigned long long h = 1469598103934665603ULL;
    const unsigned char *p = (const unsigned char *)l;
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

size_t gate_dev_used(void) {
    mi_cudev_props p;
    if (mi_cudev_props_get(0, &p) != MI_OK) return 0;
    return p.total_mem - p.free_mem;
}

mi_status gate_open_session(mi_model *m, const char *backend, int64_t n_ctx, int n_threads, mi_session **s) {
    mi_session_params p;
    mi_session_params_default(&p);
    p.backend = backend;
    p.n_ctx = n_ctx;
    p.n_threads = n_threads;
    return mi_session_new(m, &p, s);
}

mi_status gate_greedy(mi_session *s, const int32_t *prompt, int64_t np, int steps, int32_t *toks, float *last,
                      int64_t V) {
    MI_TRY(mi_session_decode(s, prompt, np, false));
    for (int i = 0; i < steps; i++) {
        const float *l = mi_logits(s, NULL);
        int32_t t = (int32_t)gate_argmax(l, V);
        if (toks) toks[i] = t;
        MI_TRY(mi_session_decode(s, &t, 1, false));
    }
    if (last) memcpy(last, mi_logits(s, NULL), (size_t)V * sizeof(float));
    return MI_OK;
}

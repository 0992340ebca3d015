/* gate_8b's model-level cases' shared parts (models8b.h). */
#include "gates/8b/models8b.h"
#include "common/sampler/sampler.h"
#include <math.h>

mi_model *models8b_open(gu_run *run, const char *minfer, const char *label, const char *shape, const char *type) {
    char path[2048];
    if (!gu_selected(label)) return NULL;
    if (gu_model_path(minfer, "8b", shape, type, path, sizeof path)) {
        gu_skip_named(run, label, "model not available (synth failed or not given)");
        return NULL;
    }
    gu_begin(run, label);
    mi_model *m = NULL;
    if (mi_model_load(path, &m) != MI_OK) {
        gu_fail(run, "load %s: %s", path, mi_errmsg());
        return NULL;
    }
    return m;
}

int32_t models8b_tok(int i, int64_t j, int64_t V) { return (int32_t)((7 + 31 * i + 13 * j + (j * j) % 17) % V); }

double models8b_margin(const float *l, int64_t n) {
    const int32_t b = mi_sample_greedy(l, n);
    double second = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (i != b && l[i] > second) second = l[i];
    return (double)l[b] - second;
}

/* The criterion tests' synthetic models: `minfer synth` of a named shape and weight type, run from
 * the build next to the test binary (build/tests/test_x -> build/minfer), loaded for the CPU and
 * its file removed. Include from one test file each (static). */
#ifndef MI_TEST_SYNTH_H
#define MI_TEST_SYNTH_H
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/model/mi.h"

static mi_model *test_synth(const char *shape, const char *type) {
    static char path[PATH_MAX + 64];
    char exe[PATH_MAX] = {0}, cmd[3 * PATH_MAX];
    cr_assert(readlink("/proc/self/exe", exe, sizeof exe - 1) > 0);
    char *slash = strrchr(exe, '/');
    cr_assert(slash);
    *slash = 0;
    snprintf(path, sizeof path, "/tmp/minfer_test_%d_%s_%s.gguf", (int)getpid(), shape, type);
    snprintf(cmd, sizeof cmd, "'%s/../minfer' synth --shape %s --type %s -o '%s' >/dev/null 2>&1", exe, shape, type, path);
    cr_assert_eq(system(cmd), 0, "minfer synth failed: %s", cmd);
    mi_model *m = NULL;
    mi_model_params mp = {.backend = "cpu"};
    cr_assert_eq(mi_model_load_params(path, &mp, &m), MI_OK, "%s", mi_errmsg());
    unlink(path);
    return m;
}
#endif

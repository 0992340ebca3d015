/* Settings (common/core/mi_settings.h): the readers' rules (flag, int range, unset and
 * empty values, values read at each call), an unknown name aborting, and the library's
 * readers returning a clear error that names the variable on a bad value. Which names the
 * table holds and whether docs/SETTINGS.md lists them: gates/common/py_settings.py. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include "common/core/mi_settings.h"
#include "common/backend/backend.h"
#include "common/backend/sched.h"

Test(settings, flag) {
    unsetenv("MINFER_NO_GEMM");
    cr_assert(!mi_setting_on("MINFER_NO_GEMM"));
    cr_assert_null(mi_setting("MINFER_NO_GEMM"));
    const char *off[] = {"", "0"}, *on[] = {"1", "2", "yes", "00"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        setenv("MINFER_NO_GEMM", off[i], 1);
        cr_assert(!mi_setting_on("MINFER_NO_GEMM"), "'%s' must read as off", off[i]);
    }
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
        setenv("MINFER_NO_GEMM", on[i], 1);   /* read again at each call: no caching */
        cr_assert(mi_setting_on("MINFER_NO_GEMM"), "'%s' must read as on", on[i]);
        cr_assert_str_eq(mi_setting("MINFER_NO_GEMM"), on[i]);
    }
}

Test(settings, int_range_and_default) {
    long v = -7;
    unsetenv("MINFER_UBATCH");
    cr_assert_eq(mi_setting_int("MINFER_UBATCH", 0, 100, 42, &v), MI_OK);
    cr_assert_eq(v, 42, "unset gives the default");
    setenv("MINFER_UBATCH", "", 1);
    cr_assert_eq(mi_setting_int("MINFER_UBATCH", 0, 100, 42, &v), MI_OK);
    cr_assert_eq(v, 42, "empty gives the default");
    setenv("MINFER_UBATCH", "100", 1);
    cr_assert_eq(mi_setting_int("MINFER_UBATCH", 0, 100, 42, &v), MI_OK);
    cr_assert_eq(v, 100);
    setenv("MINFER_UBATCH", "0", 1);
    cr_assert_eq(mi_setting_int("MINFER_UBATCH", 0, 100, 42, &v), MI_OK);
    cr_assert_eq(v, 0);
    const char *bad[] = {"101", "-1", "12x", "abc", "99999999999999999999999", " "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("MINFER_UBATCH", bad[i], 1);
        v = -7;
        cr_assert_eq(mi_setting_int("MINFER_UBATCH", 0, 100, 42, &v), MI_ERR_INVALID, "'%s' must be refused", bad[i]);
        cr_assert_eq(v, 42, "a refused value leaves the default");
        cr_assert(strstr(mi_errmsg(), "MINFER_UBATCH") && strstr(mi_errmsg(), "0..100"), "message: %s", mi_errmsg());
    }
    unsetenv("MINFER_UBATCH");
}

Test(settings, unknown_name_aborts, .signal = SIGABRT) {
    (void)mi_setting("MINFER_NOT_IN_THE_TABLE");
}

Test(settings, table_iterates) {
    const int n = mi_settings_count();
    cr_assert_gt(n, 10);
    cr_assert_null(mi_setting_at(-1));
    cr_assert_null(mi_setting_at(n));
    for (int i = 0; i < n; i++) {
        const mi_setting_info *si = mi_setting_at(i);
        cr_assert_not_null(si);
        cr_assert_eq(strncmp(si->name, "MINFER_", 7), 0, "%s", si->name);
        cr_assert(si->meaning && si->meaning[0], "%s has no meaning", si->name);
        cr_assert_neq(strcmp(mi_setting_kind_name(si->kind), "?"), 0, "%s", si->name);
        (void)mi_setting(si->name);   /* every entry is readable by its own name */
    }
}

/* The library's readers: a bad value is an error naming the variable, not a silent default. */
Test(settings, cpu_backend_threads) {
    mi_backend *be = NULL;
    setenv("MINFER_THREADS", "two", 1);
    cr_assert_eq(mi_backend_cpu_new(0, &be), MI_ERR_INVALID);
    cr_assert_null(be);
    cr_assert(strstr(mi_errmsg(), "MINFER_THREADS"), "message: %s", mi_errmsg());
    /* an explicit thread count does not consult the variable */
    cr_assert_eq(mi_backend_cpu_new(2, &be), MI_OK, "%s", mi_errmsg());
    be->iface->destroy(be);
    setenv("MINFER_THREADS", "3", 1);
    cr_assert_eq(mi_backend_cpu_new(0, &be), MI_OK, "%s", mi_errmsg());
    be->iface->destroy(be);
    unsetenv("MINFER_THREADS");
    setenv("MINFER_SPIN_US", "-5", 1);
    cr_assert_eq(mi_backend_cpu_new(1, &be), MI_ERR_INVALID);
    cr_assert(strstr(mi_errmsg(), "MINFER_SPIN_US"), "message: %s", mi_errmsg());
    unsetenv("MINFER_SPIN_US");
}

Test(settings, scheduler_profile_and_dump) {
    mi_backend *be = NULL;
    cr_assert_eq(mi_backend_cpu_new(1, &be), MI_OK, "%s", mi_errmsg());
    mi_sched *s = NULL;
    setenv("MINFER_PROFILE", "3", 1);
    cr_assert_eq(sched_new(&be, 1, &s), MI_ERR_INVALID);
    cr_assert_null(s);
    cr_assert(strstr(mi_errmsg(), "MINFER_PROFILE"), "message: %s", mi_errmsg());
    unsetenv("MINFER_PROFILE");
    setenv("MINFER_DUMP_GRAPH", "x", 1);
    cr_assert_eq(sched_new(&be, 1, &s), MI_ERR_INVALID);
    cr_assert(strstr(mi_errmsg(), "MINFER_DUMP_GRAPH"), "message: %s", mi_errmsg());
    unsetenv("MINFER_DUMP_GRAPH");
    setenv("MINFER_PROFILE", "0", 1);
    cr_assert_eq(sched_new(&be, 1, &s), MI_OK, "%s", mi_errmsg());
    sched_free(s);
    unsetenv("MINFER_PROFILE");
    be->iface->destroy(be);
}

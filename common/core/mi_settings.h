/* Settings: every MINFER_* environment variable the library and the minfer tool read,
 * in one table (name, kind, meaning), and the only code that reads them. Values are read
 * from the environment at each call (tests change them with setenv); a reader that caches
 * on purpose says so beside the call. docs/SETTINGS.md lists the table; `minfer info
 * --settings` prints it with the current values; gates/common/py_settings.py keeps the
 * three in step. */
#ifndef MI_SETTINGS_H
#define MI_SETTINGS_H
#include <stdbool.h>
#include <limits.h>
#include "mi_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MI_SETTING_FLAG,     /* on when set, non-empty and not "0" (mi_setting_on) */
    MI_SETTING_INT,      /* a decimal integer in a range the reader states (mi_setting_int) */
    MI_SETTING_STRING,   /* free text: a path, a name, a mode (mi_setting) */
    MI_SETTING_LIST,     /* a comma list of names (mi_setting; the reader parses it) */
} mi_setting_kind;

typedef struct {
    const char *name;      /* "MINFER_..." */
    mi_setting_kind kind;
    const char *meaning;   /* one line: values, default, when it is read */
} mi_setting_info;

/* The raw value, or NULL when unset. name must be in the table: any other name is a
 * broken internal invariant (a typo in the source) and aborts with a message. */
const char *mi_setting(const char *name);
/* Set, non-empty and not "0". */
bool mi_setting_on(const char *name);
/* The value as a decimal integer in [lo, hi]: 1 (*out set), 0 when unset or empty, -1 when
 * it is not a whole number in range. (No error text here: this file sits below mi_err.c,
 * which reads MINFER_LOG through it.) */
int mi_setting_parse_int(const char *name, long lo, long hi, long *out);
/* The same with def for unset or empty, and for a bad value MI_ERR_INVALID with a message
 * naming the variable (and *out = def). */
static inline mi_status mi_setting_int(const char *name, long lo, long hi, long def, long *out) {
    *out = def;
    const int r = mi_setting_parse_int(name, lo, hi, out);
    if (r >= 0) return MI_OK;
    *out = def;
    if (hi == LONG_MAX) return mi_err(MI_ERR_INVALID, "%s='%s': not a whole number >= %ld", name, mi_setting(name), lo);
    return mi_err(MI_ERR_INVALID, "%s='%s': not a whole number in %ld..%ld", name, mi_setting(name), lo, hi);
}
/* mi_setting_int read once into *cache (start it at -1, one static per reader): a tuning knob
 * read on a hot path. A bad value is logged once and def kept. */
static inline long mi_setting_int_once(const char *name, long lo, long hi, long def, long *cache) {
    if (*cache < 0) {
        long v = def;
        if (mi_setting_int(name, lo, hi, def, &v) != MI_OK) mi_log("%s; using %ld", mi_errmsg(), def);
        *cache = v;
    }
    return *cache;
}

/* The shell command whose output is the commit a record names where MINFER_COMMIT is unset:
 * HEAD (git rev-parse SHORT, "--short" or "--short=12"), with "-dirty" where the tracked files
 * differ from it (a device's copy of a tree over an older checkout, or uncommitted changes), so a
 * record never names a commit it was not built from. */
#define MI_COMMIT_FROM_GIT(SHORT)                                                                   \
    "h=$(git rev-parse " SHORT " HEAD 2>/dev/null) && { git diff --quiet HEAD -- 2>/dev/null && echo $h || " \
    "echo $h-dirty; }"
/* The table, in its order (grouped by the layer that reads each variable). */
int mi_settings_count(void);
const mi_setting_info *mi_setting_at(int i);   /* NULL outside 0 .. count-1 */
const char *mi_setting_kind_name(mi_setting_kind k);   /* "flag", "int", "string", "list" */

#ifdef __cplusplus
}
#endif
#endif

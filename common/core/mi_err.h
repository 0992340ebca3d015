/* Error reporting for the whole engine.
 * Every fallible function returns mi_status; on failure it has also stored a
 * one-line message (thread-local) that callers print or propagate.
 * abort() is reserved for broken internal invariants (MI_ASSERT). */
#ifndef MI_ERR_H
#define MI_ERR_H
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MI_OK = 0,
    MI_ERR_IO,          /* file missing, unreadable, short read */
    MI_ERR_FORMAT,      /* corrupt or unsupported file content */
    MI_ERR_UNSUPPORTED, /* valid input we do not handle (type, arch) */
    MI_ERR_INVALID,     /* bad argument / impossible shape / prompt past context */
    MI_ERR_NOMEM,       /* host allocation failed */
    MI_ERR_DEVICE,      /* device (CUDA) call failed */
    MI_ERR_INTERNAL,    /* should not happen; message says where */
} mi_status;

/* Record a printf-style message for the current thread and return `st`.
 * Use as: return mi_err(MI_ERR_FORMAT, "tensor %s: offset past end", name); */
mi_status mi_err(mi_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last message recorded on this thread ("" if none). */
const char *mi_errmsg(void);
/* Prefix the current message with context: "loading x: <old message>". Returns st. */
mi_status mi_err_ctx(mi_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mi_err_clear(void);
const char *mi_status_name(mi_status st);

/* Propagate: MI_TRY(f(x)); returns the status if not MI_OK. */
#define MI_TRY(expr) do { mi_status mi__st = (expr); if (mi__st != MI_OK) return mi__st; } while (0)

/* Internal invariant. Never for user input. */
#define MI_ASSERT(cond) do { if (!(cond)) { \
    fprintf(stderr, "minfer: internal invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
    abort(); } } while (0)

/* Logging to stderr; MINFER_LOG=0 silences info lines. */
void mi_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#ifdef __cplusplus
}
#endif
#endif

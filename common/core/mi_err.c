/* Thread-local error message store behind mi_err()/mi_errmsg(). */
#include "mi_err.h"
#include "mi_settings.h"
#include <stdarg.h>
#include <string.h>

static _Thread_local char g_msg[1024];

mi_status mi_err(mi_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return st;
}

mi_status mi_err_ctx(mi_status st, const char *fmt, ...) {
    char prefix[512], old[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_msg, sizeof old);
    /* a context chain longer than the buffer is cut, by design */
    int n = snprintf(g_msg, sizeof g_msg, "%s: ", prefix);
    if (n > 0 && (size_t)n < sizeof g_msg) {
        size_t room = sizeof g_msg - (size_t)n;
        size_t len = strnlen(old, room - 1);
        memcpy(g_msg + n, old, len);
        g_msg[(size_t)n + len] = 0;
    }
    return st;
}

const char *mi_errmsg(void) { return g_msg; }
void mi_err_clear(void) { g_msg[0] = 0; }

const char *mi_status_name(mi_status st) {
    switch (st) {
    case MI_OK: return "ok";
    case MI_ERR_IO: return "io error";
    case MI_ERR_FORMAT: return "format error";
    case MI_ERR_UNSUPPORTED: return "unsupported";
    case MI_ERR_INVALID: return "invalid argument";
    case MI_ERR_NOMEM: return "out of memory";
    case MI_ERR_DEVICE: return "device error";
    case MI_ERR_INTERNAL: return "internal error";
    }
    return "unknown";
}

void mi_log(const char *fmt, ...) {
    const char *e = mi_setting("MINFER_LOG");
    if (e && e[0] == '0') return;
    va_list ap;
    va_start(ap, fmt);
    fputs("minfer: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Value access in bytes and text: gguf_kv_data for exact values (minfer info --json)
 * and gguf_kv_format for the human summary (arrays shown as type, count, first few). */
#include "gguf.h"
#include "gguf_internal.h"
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

const void *gguf_kv_data(const gguf_file *f, int64_t id, size_t *len) {
    const gguf_node *n = gguf_node_get(f, id);
    if (!n || n->type == GGUF_VT_ARRAY) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = n->type == GGUF_VT_STRING ? (size_t)n->n : gguf_vt_size(n->type);
    return n->p;
}

/* appends to a bounded buffer, always NUL-terminated, silently truncating */
typedef struct { char *buf; size_t cap, len; } sbuf;
static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->len + 1 >= b->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n < b->cap - b->len ? (size_t)n : b->cap - b->len - 1;
}

static void sb_quoted(sbuf *b, const uint8_t *s, size_t n, size_t max) {
    sb_printf(b, "\"");
    for (size_t i = 0; i < n && i < max; i++) {
        uint8_t ch = s[i];
        if (ch == '"' || ch == '\\') sb_printf(b, "\\%c", ch);
        else if (ch == '\n') sb_printf(b, "\\n");
        else if (ch < 32 || ch == 127) sb_printf(b, "\\x%02x", ch);
        else sb_printf(b, "%c", ch);
    }
    sb_printf(b, n > max ? "\"..." : "\"");
}

static void sb_scalar(sbuf *b, gguf_vtype t, const uint8_t *p) {
    uint64_t u = 0;
    for (size_t i = gguf_vt_size(t); i-- > 0;) u = u << 8 | p[i];
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64:
        sb_printf(b, "%" PRIu64, u); break;
    case GGUF_VT_INT8: sb_printf(b, "%d", (int8_t)u); break;
    case GGUF_VT_INT16: sb_printf(b, "%d", (int16_t)u); break;
    case GGUF_VT_INT32: sb_printf(b, "%" PRId32, (int32_t)u); break;
    case GGUF_VT_INT64: sb_printf(b, "%" PRId64, (int64_t)u); break;
    case GGUF_VT_FLOAT32: { uint32_t w = (uint32_t)u; float x; memcpy(&x, &w, 4); sb_printf(b, "%.9g", x); break; }
    case GGUF_VT_FLOAT64: { double x; memcpy(&x, &u, 8); sb_printf(b, "%.17g", x); break; }
    case GGUF_VT_BOOL: sb_printf(b, "%s", u ? "true" : "false"); break;
    default: sb_printf(b, "?"); break;
    }
}

static void sb_value(const gguf_file *f, sbuf *b, int64_t id, int depth) {
    const gguf_node *n = gguf_node_get(f, id);
    if (!n) return;
    if (n->type == GGUF_VT_STRING) {
        sb_quoted(b, n->p, (size_t)n->n, 200);
        return;
    }
    if (n->type != GGUF_VT_ARRAY) {
        sb_scalar(b, n->type, n->p);
        return;
    }
    const uint64_t show = depth ? 3 : 6;
    sb_printf(b, "[%s x %" PRIu64 "]", gguf_vt_name(n->elem), n->n);
    if (n->n == 0) return;
    sb_printf(b, " [");
    for (uint64_t i = 0; i < n->n && i < show; i++) {
        if (i) sb_printf(b, ", ");
        if (n->elem == GGUF_VT_STRING) {
            size_t len;
            const char *s = gguf_arr_str(f, id, i, &len);
            sb_quoted(b, (const uint8_t *)s, len, 40);
        } else if (n->elem == GGUF_VT_ARRAY) {
            sb_value(f, b, gguf_arr_elem(f, id, i), depth + 1);
        } else {
            sb_scalar(b, n->elem, n->p + i * gguf_vt_size(n->elem));
        }
    }
    sb_printf(b, n->n > show ? ", ...]" : "]");
}

void gguf_kv_format(const gguf_file *f, int64_t id, char *buf, size_t bufsz) {
    if (!buf || bufsz == 0) return;
    buf[0] = 0;
    sbuf b = {buf, bufsz, 0};
    sb_value(f, &b, id, 0);
}

/* GGUF v3 writer. Values are encoded when set (so a setter cannot fail later); tensor
 * data is streamed at write time, either from caller memory or from a fill callback
 * one tensor at a time, so writing a multi-GB model needs one tensor's worth of RAM.
 * Setter misuse is recorded and reported by gguf_writer_write. */
#include "gguf.h"
#include "gguf_internal.h"
#include "../core/mi_file.h"
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

typedef struct {
    char *key;
    gguf_vtype type;
    uint8_t *val;   /* encoded value (after the type field) */
    size_t len;
} wkv;

typedef struct {
    char *name;
    mi_type type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data;   /* NULL: produced by the fill callback */
    size_t nbytes;
    uint64_t offset;    /* relative to the data section, set at write */
} wtensor;

struct gguf_writer {
    wkv *kv;
    int64_t n_kv, cap_kv;
    wtensor *t;
    int64_t n_t, cap_t;
    char err[512];      /* first misuse; "" if none */
};

static void w_fail(gguf_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void w_fail(gguf_writer *w, const char *fmt, ...) {
    if (w->err[0]) return;   /* keep the first: later ones are often consequences */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}

static bool w_grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return true;
    int64_t nc = *cap ? *cap * 2 : 16;
    if (nc < need) nc = need;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return false;
    *arr = p;
    *cap = nc;
    return true;
}

gguf_writer *gguf_writer_new(void) { return calloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (int64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* Takes ownership of val (freed on failure). */
static void set_kv(gguf_writer *w, const char *key, gguf_vtype type, uint8_t *val, size_t len) {
    if (!w) { free(val); return; }
    if (!key || !key[0]) { free(val); w_fail(w, "gguf writer: empty key"); return; }
    if (!val && len) { free(val); w_fail(w, "gguf writer: out of memory setting '%s'", key); return; }
    for (int64_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kv[i].key, key)) {
            free(w->kv[i].val);
            w->kv[i].type = type;
            w->kv[i].val = val;
            w->kv[i].len = len;
            return;
        }
    }
    char *k = strdup(key);
    if (!k || !w_grow((void **)&w->kv, &w->cap_kv, w->n_kv + 1, sizeof *w->kv)) {
        free(k);
        free(val);
        w_fail(w, "gguf writer: out of memory setting '%s'", key);
        return;
    }
    w->kv[w->n_kv++] = (wkv){k, type, val, len};
}

static void put_le(uint8_t *p, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void set_scalar(gguf_writer *w, const char *key, gguf_vtype t, uint64_t bits) {
    size_t n = gguf_vt_size(t);
    uint8_t *v = malloc(n);
    if (v) put_le(v, bits, n);
    set_kv(w, key, t, v, n);
}

void gguf_w_u8(gguf_writer *w, const char *key, uint8_t v) { set_scalar(w, key, GGUF_VT_UINT8, v); }
void gguf_w_i8(gguf_writer *w, const char *key, int8_t v) { set_scalar(w, key, GGUF_VT_INT8, (uint8_t)v); }
void gguf_w_u16(gguf_writer *w, const char *key, uint16_t v) { set_scalar(w, key, GGUF_VT_UINT16, v); }
void gguf_w_i16(gguf_writer *w, const char *key, int16_t v) { set_scalar(w, key, GGUF_VT_INT16, (uint16_t)v); }
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v) { set_scalar(w, key, GGUF_VT_UINT32, v); }
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v) { set_scalar(w, key, GGUF_VT_INT32, (uint32_t)v); }
void gguf_w_u64(gguf_writer *w, const char *key, uint64_t v) { set_scalar(w, key, GGUF_VT_UINT64, v); }
void gguf_w_i64(gguf_writer *w, const char *key, int64_t v) { set_scalar(w, key, GGUF_VT_INT64, (uint64_t)v); }
void gguf_w_bool(gguf_writer *w, const char *key, bool v) { set_scalar(w, key, GGUF_VT_BOOL, v ? 1 : 0); }
void gguf_w_f32(gguf_writer *w, const char *key, float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    set_scalar(w, key, GGUF_VT_FLOAT32, b);
}
void gguf_w_f64(gguf_writer *w, const char *key, double v) {
    uint64_t b;
    memcpy(&b, &v, 8);
    set_scalar(w, key, GGUF_VT_FLOAT64, b);
}

void gguf_w_str(gguf_writer *w, const char *key, const char *s) {
    size_t n = s ? strlen(s) : 0;
    uint8_t *v = malloc(8 + n);
    if (v) {
        put_le(v, n, 8);
        if (n) memcpy(v + 8, s, n);
    }
    set_kv(w, key, GGUF_VT_STRING, v, 8 + n);
}

void gguf_w_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data, uint64_t n) {
    size_t es = gguf_vt_size(elem);
    if (!w) return;
    if (!es) { w_fail(w, "gguf writer: key '%s': gguf_w_arr takes numeric elements, not %s", key ? key : "", gguf_vt_name(elem)); return; }
    if (n && !data) { w_fail(w, "gguf writer: key '%s': array data is NULL", key ? key : ""); return; }
    if (n > (SIZE_MAX - 12) / es) { w_fail(w, "gguf writer: key '%s': array too large", key ? key : ""); return; }
    /* host byte order is little-endian on every target we build for (x86-64, aarch64) */
    uint8_t *v = malloc(12 + (size_t)n * es);
    if (v) {
        put_le(v, elem, 4);
        put_le(v + 4, n, 8);
        if (n) memcpy(v + 12, data, (size_t)n * es);
    }
    set_kv(w, key, GGUF_VT_ARRAY, v, 12 + (size_t)n * es);
}

void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    if (!w) return;
    if (n && !strs) { w_fail(w, "gguf writer: key '%s': string array is NULL", key ? key : ""); return; }
    size_t len = 12;
    for (uint64_t i = 0; i < n; i++) len += 8 + (strs[i] ? strlen(strs[i]) : 0);
    uint8_t *v = malloc(len);
    if (v) {
        put_le(v, GGUF_VT_STRING, 4);
        put_le(v + 4, n, 8);
        size_t o = 12;
        for (uint64_t i = 0; i < n; i++) {
            size_t sl = strs[i] ? strlen(strs[i]) : 0;
            put_le(v + o, sl, 8);
            if (sl) memcpy(v + o + 8, strs[i], sl);
            o += 8 + sl;
        }
    }
    set_kv(w, key, GGUF_VT_ARRAY, v, len);
}

void gguf_w_raw(gguf_writer *w, const char *key, gguf_vtype type, const void *raw, size_t len) {
    if (!w) return;
    if ((unsigned)type >= GGUF_VT_COUNT) { w_fail(w, "gguf writer: key '%s': bad value type %d", key ? key : "", (int)type); return; }
    if (len && !raw) { w_fail(w, "gguf writer: key '%s': raw value is NULL", key ? key : ""); return; }
    uint8_t *v = malloc(len ? len : 1);
    if (v && len) memcpy(v, raw, len);
    set_kv(w, key, type, v, len);
}

void gguf_w_copy_kv(gguf_writer *w, const gguf_file *src) {
    if (!w || !src) return;
    for (int64_t i = 0; i < gguf_n_kv(src); i++) {
        const void *raw;
        size_t len;
        if (gguf_kv_raw(src, i, &raw, &len)) gguf_w_raw(w, gguf_kv_key(src, i), gguf_kv_type(src, i), raw, len);
    }
}

int64_t gguf_w_tensor(gguf_writer *w, const char *name, mi_type type, int n_dims, const int64_t *ne, const void *data) {
    if (!w) return -1;
    if (!name || !name[0]) { w_fail(w, "gguf writer: tensor with an empty name"); return -1; }
    if (strlen(name) >= 65536) { w_fail(w, "gguf writer: tensor name too long"); return -1; }
    const mi_type_traits *tr = mi_type_get((int)type);
    if (!tr) { w_fail(w, "gguf writer: tensor '%s': unknown type %d", name, (int)type); return -1; }
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS || !ne) { w_fail(w, "gguf writer: tensor '%s': n_dims %d, want 1..%d", name, n_dims, GGUF_MAX_DIMS); return -1; }
    for (int64_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) { w_fail(w, "gguf writer: duplicate tensor '%s'", name); return -1; }
    wtensor t = {0};
    t.type = type;
    t.n_dims = n_dims;
    t.data = data;
    int64_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 1 || nel > INT64_MAX / t.ne[d]) { w_fail(w, "gguf writer: tensor '%s': bad shape", name); return -1; }
        nel *= t.ne[d];
    }
    if (t.ne[0] % tr->blck_size) {
        w_fail(w, "gguf writer: tensor '%s': row length %" PRId64 " not a multiple of %s block size %" PRId64,
               name, t.ne[0], tr->name, tr->blck_size);
        return -1;
    }
    t.nbytes = (size_t)(nel / tr->blck_size) * tr->type_size;
    t.name = strdup(name);
    if (!t.name || !w_grow((void **)&w->t, &w->cap_t, w->n_t + 1, sizeof *w->t)) {
        free(t.name);
        w_fail(w, "gguf writer: out of memory adding tensor '%s'", name);
        return -1;
    }
    w->t[w->n_t] = t;
    return w->n_t++;
}

/* Alignment the file will declare: general.alignment if set (any integer type). */
static mi_status w_alignment(const gguf_writer *w, size_t *align) {
    *align = GGUF_DEFAULT_ALIGNMENT;
    for (int64_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment")) continue;
        size_t n = gguf_vt_size(w->kv[i].type);
        gguf_vtype t = w->kv[i].type;
        bool is_int = n && t != GGUF_VT_FLOAT32 && t != GGUF_VT_FLOAT64 && t != GGUF_VT_BOOL;
        bool is_signed = t == GGUF_VT_INT8 || t == GGUF_VT_INT16 || t == GGUF_VT_INT32 || t == GGUF_VT_INT64;
        uint64_t v = 0;
        for (size_t b = n; b-- > 0;) v = v << 8 | w->kv[i].val[b];
        bool negative = is_signed && (v >> (8 * n - 1)) != 0;
        if (!is_int || negative || v == 0 || (v & (v - 1)) || v > (1u << 30))
            return mi_err(MI_ERR_INVALID, "gguf writer: general.alignment must be a power-of-two integer");
        *align = (size_t)v;
    }
    return MI_OK;
}

typedef struct { mi_file_out *f; size_t done; } wout;

static mi_status out_bytes(wout *o, const void *p, size_t n) {
    MI_TRY(mi_file_out_write(o->f, p, n));
    o->done += n;
    return MI_OK;
}
static mi_status out_le(wout *o, uint64_t v, size_t n) {
    uint8_t b[8];
    put_le(b, v, n);
    return out_bytes(o, b, n);
}
static mi_status out_str(wout *o, const char *s) {
    size_t n = strlen(s);
    MI_TRY(out_le(o, n, 8));
    return out_bytes(o, s, n);
}
static mi_status out_pad(wout *o, size_t align) {
    static const uint8_t zeros[64];
    size_t pad = (align - o->done % align) % align;
    while (pad) {
        size_t k = pad < sizeof zeros ? pad : sizeof zeros;
        MI_TRY(out_bytes(o, zeros, k));
        pad -= k;
    }
    return MI_OK;
}

static mi_status write_all(gguf_writer *w, wout *o, size_t align, gguf_fill_fn fill, void *user,
                           void (*progress)(void *, size_t, size_t)) {
    uint64_t off = 0;
    size_t max_fill = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off += w->t[i].nbytes + (align - w->t[i].nbytes % align) % align;
        if (!w->t[i].data) {
            if (!fill) return mi_err(MI_ERR_INVALID, "gguf writer: tensor '%s' has no data and no fill callback", w->t[i].name);
            if (w->t[i].nbytes > max_fill) max_fill = w->t[i].nbytes;
        }
    }
    MI_TRY(out_le(o, 0x46554747u, 4));
    MI_TRY(out_le(o, 3, 4));
    MI_TRY(out_le(o, (uint64_t)w->n_t, 8));
    MI_TRY(out_le(o, (uint64_t)w->n_kv, 8));
    for (int64_t i = 0; i < w->n_kv; i++) {
        MI_TRY(out_str(o, w->kv[i].key));
        MI_TRY(out_le(o, (uint64_t)w->kv[i].type, 4));
        MI_TRY(out_bytes(o, w->kv[i].val, w->kv[i].len));
    }
    for (int64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        MI_TRY(out_str(o, t->name));
        MI_TRY(out_le(o, (uint64_t)t->n_dims, 4));
        for (int d = 0; d < t->n_dims; d++) MI_TRY(out_le(o, (uint64_t)t->ne[d], 8));
        MI_TRY(out_le(o, (uint64_t)t->type, 4));
        MI_TRY(out_le(o, t->offset, 8));
    }
    MI_TRY(out_pad(o, align));
    size_t total = o->done + (size_t)off;
    void *buf = NULL;
    if (max_fill && !(buf = malloc(max_fill)))
        return mi_err(MI_ERR_NOMEM, "gguf writer: out of memory for a %zu-byte tensor buffer", max_fill);
    mi_status st = MI_OK;
    for (int64_t i = 0; i < w->n_t && st == MI_OK; i++) {
        const wtensor *t = &w->t[i];
        const void *src = t->data;
        if (!src) {
            st = fill(user, i, buf, t->nbytes);
            if (st != MI_OK) { mi_err_ctx(st, "tensor '%s'", t->name); break; }
            src = buf;
        }
        st = out_bytes(o, src, t->nbytes);
        if (st == MI_OK) st = out_pad(o, align);
        if (st == MI_OK && progress) progress(user, o->done, total);
    }
    free(buf);
    return st;
}

mi_status gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *user,
                            void (*progress)(void *user, size_t done, size_t total)) {
    if (!w || !path) return mi_err(MI_ERR_INVALID, "gguf_writer_write: NULL writer or path");
    if (w->err[0]) return mi_err(MI_ERR_INVALID, "%s", w->err);
    size_t align;
    MI_TRY(w_alignment(w, &align));
    /* written beside the destination and renamed over it: an existing file is replaced
     * only by a complete one, and readers that have it mapped keep the old inode */
    mi_file_out f;
    MI_TRY(mi_file_out_open(&f, path));
    wout o = {&f, 0};
    mi_status st = write_all(w, &o, align, fill, user, progress);
    if (st == MI_OK) return mi_file_out_commit(&f);
    mi_file_out_abort(&f);
    return st;
}

/* GGUF reader: parses the header of a mapped (or caller-owned) image into a kv table,
 * a tensor table and lookup hashes. Nothing in the file is trusted: every count, length,
 * shape and offset is checked against the bytes that remain before it is used, and
 * tensor data stays in place in the mapping, except where the file's alignment leaves a
 * tensor short of the alignment its type needs (see align_tensor_data). */
#include "gguf.h"
#include "gguf_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bounds that no real file comes near; they keep hostile files from making us allocate
 * or recurse without limit. */
#define GGUF_MAX_DEPTH 8              /* nesting of arrays of arrays */
#define GGUF_MAX_NAME (1u << 16)      /* bytes in a key or tensor name */
#define GGUF_MAX_ALIGN (1u << 30)

size_t gguf_vt_size(gguf_vtype t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

const char *gguf_vt_name(gguf_vtype t) {
    static const char *names[GGUF_VT_COUNT] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                               "str", "arr", "u64", "i64", "f64"};
    return (unsigned)t < GGUF_VT_COUNT ? names[t] : "?";
}

/* ---- little-endian loads (the mapping has no alignment guarantees) ---- */
static uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t ld32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t ld64(const uint8_t *p) { return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32; }

/* ---- cursor over the image ---- */
typedef struct {
    const uint8_t *base;
    size_t off, size;
} cursor;

static size_t cur_left(const cursor *c) { return c->size - c->off; }

static mi_status cur_need(const cursor *c, size_t n, const char *what) {
    if (n > cur_left(c))
        return mi_err(MI_ERR_FORMAT, "truncated file: %s needs %zu bytes at offset %zu but only %zu remain",
                      what, n, c->off, cur_left(c));
    return MI_OK;
}
static mi_status cur_u32(cursor *c, uint32_t *v, const char *what) {
    MI_TRY(cur_need(c, 4, what));
    *v = ld32(c->base + c->off);
    c->off += 4;
    return MI_OK;
}
static mi_status cur_u64(cursor *c, uint64_t *v, const char *what) {
    MI_TRY(cur_need(c, 8, what));
    *v = ld64(c->base + c->off);
    c->off += 8;
    return MI_OK;
}
/* A length-prefixed string; *p points at the bytes (not NUL-terminated). */
static mi_status cur_str(cursor *c, const uint8_t **p, uint64_t *len, const char *what) {
    MI_TRY(cur_u64(c, len, what));
    if (*len > cur_left(c))
        return mi_err(MI_ERR_FORMAT, "%s: string length %" PRIu64 " at offset %zu exceeds the %zu bytes left in the file",
                      what, *len, c->off - 8, cur_left(c));
    *p = c->base + c->off;
    c->off += (size_t)*len;
    return MI_OK;
}

/* ---- growable tables (bounded by the file size through the count checks) ---- */
static mi_status grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return MI_OK;
    int64_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return mi_err(MI_ERR_NOMEM, "out of memory reading GGUF metadata (%" PRId64 " entries)", nc);
    *arr = p;
    *cap = nc;
    return MI_OK;
}

/* ---- open-addressing hash of names (keys, tensor names): duplicate detection and lookup ---- */
static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;          /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}
static mi_status htab_init(gguf_htab *h, int64_t n) {
    size_t cap = 16;
    while (cap < (size_t)n * 2) cap *= 2;
    h->slot = malloc(cap * sizeof *h->slot);
    if (!h->slot) return mi_err(MI_ERR_NOMEM, "out of memory for a %zu-entry name table", cap);
    for (size_t i = 0; i < cap; i++) h->slot[i] = -1;
    h->mask = cap - 1;
    return MI_OK;
}
/* Find name among names[]; returns its index or -1. If insert_id >= 0 and absent, inserts it. */
static int64_t htab_find(const gguf_htab *h, const char *const *names, const char *name, int64_t insert_id) {
    if (!h->slot) return -1;
    size_t len = strlen(name);
    for (size_t i = hash_bytes(name, len) & h->mask;; i = (i + 1) & h->mask) {
        int64_t id = h->slot[i];
        if (id < 0) {
            if (insert_id >= 0) h->slot[i] = insert_id;
            return -1;
        }
        if (!strcmp(names[id], name)) return id;
    }
}

/* A NUL-terminated copy of a name; names with a NUL inside are refused (they could not
 * be looked up and would alias a shorter name). */
static mi_status copy_name(const uint8_t *p, uint64_t len, const char *what, int64_t idx, char **out) {
    if (len == 0) return mi_err(MI_ERR_FORMAT, "%s %" PRId64 " has an empty name", what, idx);
    if (len > GGUF_MAX_NAME)
        return mi_err(MI_ERR_FORMAT, "%s %" PRId64 " name is %" PRIu64 " bytes (limit %u)", what, idx, len, GGUF_MAX_NAME);
    /* control bytes (NUL, newline, ...) are refused: a NUL would alias a shorter name and
     * a newline would break one-line error messages that quote the name */
    for (uint64_t i = 0; i < len; i++)
        if (p[i] < 0x20 || p[i] == 0x7f)
            return mi_err(MI_ERR_FORMAT, "%s %" PRId64 " name contains control byte 0x%02x", what, idx, p[i]);
    char *s = malloc((size_t)len + 1);
    if (!s) return mi_err(MI_ERR_NOMEM, "out of memory copying a name");
    memcpy(s, p, (size_t)len);
    s[len] = 0;
    *out = s;
    return MI_OK;
}

/* Parse one value of type t at the cursor into *out. Element tables (strings, nested
 * arrays) go into f->strs / f->ext; out must not point into f->ext (it may move). */
static mi_status parse_value(gguf_file *f, cursor *c, uint32_t t, gguf_node *out, int depth, const char *what) {
    memset(out, 0, sizeof *out);
    if (t >= GGUF_VT_COUNT) return mi_err(MI_ERR_FORMAT, "%s: unknown value type %u", what, t);
    out->type = (gguf_vtype)t;
    out->elem = GGUF_VT_COUNT;
    size_t sz = gguf_vt_size(out->type);
    if (sz) {
        MI_TRY(cur_need(c, sz, what));
        out->p = c->base + c->off;
        c->off += sz;
        return MI_OK;
    }
    if (t == GGUF_VT_STRING) {
        const uint8_t *s;
        uint64_t len;
        MI_TRY(cur_str(c, &s, &len, what));
        out->p = s;
        out->n = len;
        return MI_OK;
    }
    /* array: element type, count, elements */
    if (depth >= GGUF_MAX_DEPTH)
        return mi_err(MI_ERR_FORMAT, "%s: arrays nested deeper than %d levels", what, GGUF_MAX_DEPTH);
    uint32_t et;
    uint64_t n;
    MI_TRY(cur_u32(c, &et, what));
    MI_TRY(cur_u64(c, &n, what));
    if (et >= GGUF_VT_COUNT) return mi_err(MI_ERR_FORMAT, "%s: unknown array element type %u", what, et);
    out->elem = (gguf_vtype)et;
    out->n = n;
    out->p = c->base + c->off;
    size_t esz = gguf_vt_size(out->elem);
    /* every element takes at least min_sz bytes, so n is bounded by what is left */
    size_t min_sz = esz ? esz : et == GGUF_VT_STRING ? 8 : 12;
    if (n > cur_left(c) / min_sz)
        return mi_err(MI_ERR_FORMAT, "%s: array of %" PRIu64 " %s elements needs more than the %zu bytes left in the file",
                      what, n, gguf_vt_name(out->elem), cur_left(c));
    if (esz) {
        c->off += (size_t)n * esz;
        return MI_OK;
    }
    if (et == GGUF_VT_STRING) {
        int64_t first = f->n_strs;
        MI_TRY(grow((void **)&f->strs, &f->cap_strs, first + (int64_t)n, sizeof *f->strs));
        for (uint64_t i = 0; i < n; i++) {
            const uint8_t *s;
            uint64_t len;
            f->strs[first + (int64_t)i] = c->base + c->off;   /* points at the length prefix */
            MI_TRY(cur_str(c, &s, &len, what));
        }
        f->n_strs = first + (int64_t)n;
        out->child = first;
        return MI_OK;
    }
    /* array of arrays: reserve n consecutive ext nodes, then fill them (recursion may
     * append more nodes after them and move the table) */
    int64_t first = f->n_ext;
    MI_TRY(grow((void **)&f->ext, &f->cap_ext, first + (int64_t)n, sizeof *f->ext));
    f->n_ext = first + (int64_t)n;
    out->child = first;
    for (uint64_t i = 0; i < n; i++) {
        gguf_node tmp;
        MI_TRY(parse_value(f, c, et, &tmp, depth + 1, what));
        f->ext[first + (int64_t)i] = tmp;
    }
    return MI_OK;
}

/* Integer value of a scalar node: *neg tells which of u/s holds it. false if not an integer. */
bool gguf_node_int(const gguf_node *nd, uint64_t *u, int64_t *s, bool *neg) {
    int64_t sv = 0;
    uint64_t uv = 0;
    bool sgn = false;
    switch (nd->type) {
    case GGUF_VT_UINT8: uv = nd->p[0]; break;
    case GGUF_VT_UINT16: uv = ld16(nd->p); break;
    case GGUF_VT_UINT32: uv = ld32(nd->p); break;
    case GGUF_VT_UINT64: uv = ld64(nd->p); break;
    case GGUF_VT_INT8: sv = (int8_t)nd->p[0]; sgn = true; break;
    case GGUF_VT_INT16: sv = (int16_t)ld16(nd->p); sgn = true; break;
    case GGUF_VT_INT32: sv = (int32_t)ld32(nd->p); sgn = true; break;
    case GGUF_VT_INT64: sv = (int64_t)ld64(nd->p); sgn = true; break;
    default: return false;
    }
    if (sgn) {
        *neg = sv < 0;
        *s = sv;
        *u = sv < 0 ? 0 : (uint64_t)sv;
    } else {
        *neg = false;
        *u = uv;
        *s = uv > INT64_MAX ? INT64_MAX : (int64_t)uv;
    }
    return true;
}

static mi_status read_alignment(gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t id = gguf_find_key(f, "general.alignment");
    if (id < 0) return MI_OK;
    uint64_t u;
    int64_t s;
    bool neg;
    if (!gguf_node_int(&f->kv[id], &u, &s, &neg))
        return mi_err(MI_ERR_FORMAT, "general.alignment has type %s, want an integer", gguf_vt_name(f->kv[id].type));
    if (neg || u == 0 || (u & (u - 1)) || u > GGUF_MAX_ALIGN)
        return mi_err(MI_ERR_FORMAT, "general.alignment = %s%" PRIu64 " is not a power of two in 1..%u",
                      neg ? "-" : "", neg ? (uint64_t)0 - (uint64_t)s : u, GGUF_MAX_ALIGN);
    f->alignment = (size_t)u;
    return MI_OK;
}

static mi_status parse_tensor_info(gguf_file *f, cursor *c, int64_t i) {
    gguf_tensor_info *t = &f->ti[i];
    char what[48];
    snprintf(what, sizeof what, "tensor %" PRId64 " name", i);
    const uint8_t *np;
    uint64_t nlen;
    MI_TRY(cur_str(c, &np, &nlen, what));
    char *name;
    MI_TRY(copy_name(np, nlen, "tensor", i, &name));
    f->names[i] = name;
    t->name = name;
    t->name_len = (size_t)nlen;
    if (htab_find(&f->tensor_hash, (const char *const *)f->names, name, i) >= 0)
        return mi_err(MI_ERR_FORMAT, "duplicate tensor name '%s'", name);
    char twhat[96];
    snprintf(twhat, sizeof twhat, "tensor '%.80s'", name);
    uint32_t nd;
    MI_TRY(cur_u32(c, &nd, twhat));
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return mi_err(MI_ERR_FORMAT, "tensor '%s': n_dims = %u, want 1..%d", name, nd, GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t ne;
        MI_TRY(cur_u64(c, &ne, twhat));
        if (ne == 0 || ne > INT64_MAX)
            return mi_err(MI_ERR_FORMAT, "tensor '%s': dimension %u has size %" PRIu64 ", want 1..2^63-1", name, d, ne);
        t->ne[d] = (int64_t)ne;
    }
    uint32_t type;
    MI_TRY(cur_u32(c, &type, twhat));
    if (type > 0xffff || !mi_type_get((int)type))
        return mi_err(MI_ERR_FORMAT, "tensor '%s': unknown tensor type %u", name, type);
    t->type = (mi_type)type;
    MI_TRY(cur_u64(c, &t->offset, twhat));
    return MI_OK;
}

/* Shape, size and placement of one tensor, once the data offset is known. */
static mi_status check_tensor(gguf_file *f, gguf_tensor_info *t) {
    const mi_type_traits *tr = mi_type_get(t->type);
    int64_t nel = 1;
    for (int d = 0; d < t->n_dims; d++) {
        if (nel > INT64_MAX / t->ne[d])
            return mi_err(MI_ERR_FORMAT, "tensor '%s': element count overflows 64 bits", t->name);
        nel *= t->ne[d];
    }
    if (tr->blck_size <= 0 || tr->type_size == 0 || t->ne[0] % tr->blck_size)
        return mi_err(MI_ERR_FORMAT, "tensor '%s': row length %" PRId64 " is not a multiple of the %s block size %" PRId64,
                      t->name, t->ne[0], tr->name, tr->blck_size);
    uint64_t blocks = (uint64_t)(nel / tr->blck_size);
    if (blocks > SIZE_MAX / tr->type_size)
        return mi_err(MI_ERR_FORMAT, "tensor '%s': byte size overflows", t->name);
    t->nbytes = (size_t)blocks * tr->type_size;
    if (t->offset % f->alignment)
        return mi_err(MI_ERR_FORMAT, "tensor '%s': offset %" PRIu64 " is not a multiple of the alignment %zu",
                      t->name, t->offset, f->alignment);
    size_t room = f->size > f->data_off ? f->size - f->data_off : 0;
    if (t->offset > room || t->nbytes > room - t->offset)
        return mi_err(MI_ERR_FORMAT, "tensor '%s': data [%" PRIu64 ", +%zu) runs past the end of the file (%zu data bytes)",
                      t->name, t->offset, t->nbytes, room);
    t->data = f->base + f->data_off + t->offset;
    return MI_OK;
}

/* general.alignment may legally be 1 or 2, which puts tensor data at addresses the
 * kernels cannot read through their typed pointers (a misaligned uint16_t or float
 * load is undefined behaviour). Each such tensor gets an aligned copy here, once, so
 * that every consumer (model load, quantize, the device upload) sees aligned data and
 * no kernel needs a slow path; files at the usual alignment (32) copy nothing and stay
 * zero-copy. The copy costs the tensor's bytes again in memory, paid only by such files.
 * Tensors may legally share or overlap their data, so copies are made per extent:
 * tensors whose addresses agree modulo the largest alignment needed are merged where
 * their ranges overlap or touch and copied together to a 64-byte boundary, which keeps
 * every member aligned. That bounds the copy by (that alignment - 1) x the data section
 * (at most 7x, for overlapping hostile layouts), never by the tensor count. */
typedef struct {
    size_t cls;       /* address mod the largest alignment needed */
    uint64_t off;     /* offset in the data section */
    int64_t i;        /* tensor index */
} copy_ent;

static int copy_ent_cmp(const void *pa, const void *pb) {
    const copy_ent *a = pa, *b = pb;
    if (a->cls != b->cls) return a->cls < b->cls ? -1 : 1;
    if (a->off != b->off) return a->off < b->off ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

#define GGUF_COPY_ALIGN 64   /* start of each copied extent: a cache line, as the CPU backend's buffers */

/* Walk the sorted entries extent by extent; with dst == NULL only sum the bytes needed. */
static mi_status copy_extents(gguf_file *f, const copy_ent *e, int64_t n, uint8_t *dst, size_t *total) {
    size_t used = 0;
    for (int64_t a = 0; a < n;) {
        const uint64_t start = e[a].off;
        uint64_t end = start + f->ti[e[a].i].nbytes;
        int64_t b = a + 1;
        for (; b < n && e[b].cls == e[a].cls && e[b].off <= end; b++)
            if (e[b].off + f->ti[e[b].i].nbytes > end) end = e[b].off + f->ti[e[b].i].nbytes;
        const size_t len = (size_t)(end - start);
        if (dst) {
            memcpy(dst + used, f->base + f->data_off + start, len);
            for (int64_t k = a; k < b; k++) f->ti[e[k].i].data = dst + used + (size_t)(e[k].off - start);
        }
        const size_t padded = len + (GGUF_COPY_ALIGN - len % GGUF_COPY_ALIGN) % GGUF_COPY_ALIGN;
        if (padded < len || used > SIZE_MAX - padded)
            return mi_err(MI_ERR_NOMEM, "aligned copies of the tensor data overflow the address space");
        used += padded;
        a = b;
    }
    *total = used;
    return MI_OK;
}

static mi_status align_tensor_data(gguf_file *f) {
    size_t m = 1;
    int64_t n = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const size_t a = mi_type_align(f->ti[i].type);
        if ((uintptr_t)f->ti[i].data % a) {
            n++;
            if (a > m) m = a;
        }
    }
    if (n == 0) return MI_OK;
    copy_ent *e = malloc((size_t)n * sizeof *e);
    if (!e) return mi_err(MI_ERR_NOMEM, "out of memory listing %" PRId64 " misaligned tensors", n);
    int64_t k = 0;
    for (int64_t i = 0; i < f->n_tensors; i++)
        if ((uintptr_t)f->ti[i].data % mi_type_align(f->ti[i].type))
            e[k++] = (copy_ent){(uintptr_t)f->ti[i].data % m, f->ti[i].offset, i};
    qsort(e, (size_t)n, sizeof *e, copy_ent_cmp);
    size_t total = 0;
    mi_status st = copy_extents(f, e, n, NULL, &total);
    if (st == MI_OK) {
        f->copy = aligned_alloc(GGUF_COPY_ALIGN, total);
        if (!f->copy)
            st = mi_err(MI_ERR_NOMEM, "out of memory for %zu bytes of aligned tensor data (general.alignment = %zu "
                        "leaves %" PRId64 " tensors misaligned)", total, f->alignment, n);
    }
    if (st == MI_OK) st = copy_extents(f, e, n, f->copy, &total);
    free(e);
    return st;
}

static mi_status parse(gguf_file *f) {
    cursor c = {f->base, 0, f->size};
    uint32_t magic;
    MI_TRY(cur_u32(&c, &magic, "magic"));
    if (magic != 0x46554747u) {   /* "GGUF" */
        const uint8_t *m = f->base;
        char shown[5];
        for (int i = 0; i < 4; i++) shown[i] = m[i] >= 32 && m[i] < 127 ? (char)m[i] : '.';
        shown[4] = 0;
        return mi_err(MI_ERR_FORMAT, "not a GGUF file (magic '%s', want 'GGUF')", shown);
    }
    MI_TRY(cur_u32(&c, &f->version, "version"));
    if (f->version == 1)
        return mi_err(MI_ERR_UNSUPPORTED, "GGUF version 1 is not supported (32-bit counts); convert the file to v3");
    if (f->version != 2 && f->version != 3) {
        if ((f->version & 0xffff) == 0)
            return mi_err(MI_ERR_UNSUPPORTED, "GGUF version %u: big-endian files are not supported", f->version);
        return mi_err(MI_ERR_UNSUPPORTED, "unsupported GGUF version %u (want 2 or 3)", f->version);
    }
    uint64_t nt, nkv;
    MI_TRY(cur_u64(&c, &nt, "tensor count"));
    MI_TRY(cur_u64(&c, &nkv, "kv count"));
    /* a kv takes >= 13 bytes (key len, 1-byte key, type), a tensor info >= 33 */
    if (nkv > cur_left(&c) / 13)
        return mi_err(MI_ERR_FORMAT, "kv count %" PRIu64 " cannot fit in the %zu bytes left in the file", nkv, cur_left(&c));
    if (nt > cur_left(&c) / 33)
        return mi_err(MI_ERR_FORMAT, "tensor count %" PRIu64 " cannot fit in the %zu bytes left in the file", nt, cur_left(&c));
    f->n_kv = (int64_t)nkv;
    f->n_tensors = (int64_t)nt;
    f->kv = calloc(nkv ? nkv : 1, sizeof *f->kv);
    f->keys = calloc(nkv ? nkv : 1, sizeof *f->keys);
    f->kv_raw = calloc(nkv ? nkv : 1, sizeof *f->kv_raw);
    f->ti = calloc(nt ? nt : 1, sizeof *f->ti);
    f->names = calloc(nt ? nt : 1, sizeof *f->names);
    if (!f->kv || !f->keys || !f->kv_raw || !f->ti || !f->names) return mi_err(MI_ERR_NOMEM, "out of memory for the GGUF tables");
    MI_TRY(htab_init(&f->key_hash, f->n_kv));
    MI_TRY(htab_init(&f->tensor_hash, f->n_tensors));

    for (int64_t i = 0; i < f->n_kv; i++) {
        char what[40];
        snprintf(what, sizeof what, "key %" PRId64, i);
        const uint8_t *kp;
        uint64_t klen;
        MI_TRY(cur_str(&c, &kp, &klen, what));
        MI_TRY(copy_name(kp, klen, "key", i, &f->keys[i]));
        if (htab_find(&f->key_hash, (const char *const *)f->keys, f->keys[i], i) >= 0)
            return mi_err(MI_ERR_FORMAT, "duplicate key '%s'", f->keys[i]);
        char kwhat[96];   /* long keys are cut in messages, not in the table */
        snprintf(kwhat, sizeof kwhat, "key '%.80s'", f->keys[i]);
        uint32_t t;
        MI_TRY(cur_u32(&c, &t, kwhat));
        size_t start = c.off;
        MI_TRY(parse_value(f, &c, t, &f->kv[i], 0, kwhat));
        f->kv_raw[i] = (gguf_span){start, c.off - start};
    }
    for (int64_t i = 0; i < f->n_tensors; i++) MI_TRY(parse_tensor_info(f, &c, i));
    MI_TRY(read_alignment(f));
    f->data_off = c.off + (f->alignment - c.off % f->alignment) % f->alignment;
    if (f->n_tensors > 0 && f->data_off > f->size)
        return mi_err(MI_ERR_FORMAT, "truncated file: tensor data section starts at %zu but the file has %zu bytes",
                      f->data_off, f->size);
    for (int64_t i = 0; i < f->n_tensors; i++) MI_TRY(check_tensor(f, &f->ti[i]));
    return align_tensor_data(f);
}

static mi_status open_image(const uint8_t *data, size_t size, size_t map_len, gguf_file **out) {
    *out = NULL;
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) return mi_err(MI_ERR_NOMEM, "out of memory");
    f->base = data;
    f->size = size;
    f->map_len = map_len;
    mi_status st = parse(f);
    if (st != MI_OK) {
        f->map_len = 0;   /* the caller still owns the memory on failure */
        gguf_close(f);
        return st;
    }
    *out = f;
    return MI_OK;
}

mi_status gguf_open_mem(const void *data, size_t size, gguf_file **out) {
    if (!out) return mi_err(MI_ERR_INVALID, "gguf_open_mem: out is NULL");
    if (!data && size) return mi_err(MI_ERR_INVALID, "gguf_open_mem: data is NULL");
    static const uint8_t empty[1];
    return open_image(data ? data : empty, size, 0, out);
}

mi_status gguf_open(const char *path, gguf_file **out) {
    if (!out) return mi_err(MI_ERR_INVALID, "gguf_open: out is NULL");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mi_err(MI_ERR_IO, "cannot open: %s", strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return mi_err(MI_ERR_IO, "cannot stat: %s", strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return mi_err(MI_ERR_IO, "not a regular file");
    }
    if (sb.st_size == 0) {
        close(fd);
        return mi_err(MI_ERR_FORMAT, "empty file (0 bytes), not a GGUF file");
    }
    size_t size = (size_t)sb.st_size;
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) return mi_err(MI_ERR_IO, "cannot mmap %zu bytes: %s", size, strerror(e));
    mi_status st = open_image(m, size, size, out);
    if (st != MI_OK) munmap(m, size);
    return st;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->keys)
        for (int64_t i = 0; i < f->n_kv; i++) free(f->keys[i]);
    if (f->names)
        for (int64_t i = 0; i < f->n_tensors; i++) free(f->names[i]);
    free(f->keys);
    free(f->names);
    free(f->kv);
    free(f->kv_raw);
    free(f->ti);
    free(f->ext);
    free(f->strs);
    free(f->key_hash.slot);
    free(f->tensor_hash.slot);
    free(f->copy);
    if (f->map_len) munmap((void *)f->base, f->map_len);
    free(f);
}

/* ---- accessors ---- */
uint32_t gguf_version(const gguf_file *f) { return f->version; }
size_t gguf_alignment(const gguf_file *f) { return f->alignment; }
size_t gguf_file_size(const gguf_file *f) { return f->size; }
size_t gguf_data_offset(const gguf_file *f) { return f->data_off; }
int64_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }

/* key ids 0..n_kv-1 are top-level values; -2-j is nested element node j */
const gguf_node *gguf_node_get(const gguf_file *f, int64_t id) {
    if (id >= 0 && id < f->n_kv) return &f->kv[id];
    if (id <= -2 && -2 - id < f->n_ext) return &f->ext[-2 - id];
    return NULL;
}

const char *gguf_kv_key(const gguf_file *f, int64_t id) { return id >= 0 && id < f->n_kv ? f->keys[id] : ""; }
gguf_vtype gguf_kv_type(const gguf_file *f, int64_t id) {
    const gguf_node *n = gguf_node_get(f, id);
    return n ? n->type : GGUF_VT_COUNT;
}
int64_t gguf_find_key(const gguf_file *f, const char *key) {
    return key ? htab_find(&f->key_hash, (const char *const *)f->keys, key, -1) : -1;
}
gguf_vtype gguf_arr_type(const gguf_file *f, int64_t id) {
    const gguf_node *n = gguf_node_get(f, id);
    return n && n->type == GGUF_VT_ARRAY ? n->elem : GGUF_VT_COUNT;
}
uint64_t gguf_arr_n(const gguf_file *f, int64_t id) {
    const gguf_node *n = gguf_node_get(f, id);
    return n && n->type == GGUF_VT_ARRAY ? n->n : 0;
}
const void *gguf_arr_data(const gguf_file *f, int64_t id) {
    const gguf_node *n = gguf_node_get(f, id);
    return n && n->type == GGUF_VT_ARRAY && gguf_vt_size(n->elem) ? n->p : NULL;
}
const char *gguf_arr_str(const gguf_file *f, int64_t id, uint64_t i, size_t *len) {
    const gguf_node *n = gguf_node_get(f, id);
    if (!n || n->type != GGUF_VT_ARRAY || n->elem != GGUF_VT_STRING || i >= n->n) {
        if (len) *len = 0;
        return NULL;
    }
    const uint8_t *p = f->strs[n->child + (int64_t)i];
    if (len) *len = (size_t)ld64(p);
    return (const char *)p + 8;
}
int64_t gguf_arr_elem(const gguf_file *f, int64_t id, uint64_t i) {
    const gguf_node *n = gguf_node_get(f, id);
    if (!n || n->type != GGUF_VT_ARRAY || n->elem != GGUF_VT_ARRAY || i >= n->n) return -1;
    return -2 - (n->child + (int64_t)i);
}
bool gguf_kv_raw(const gguf_file *f, int64_t id, const void **raw, size_t *len) {
    if (id < 0 || id >= f->n_kv) return false;
    *raw = f->base + f->kv_raw[id].off;
    *len = f->kv_raw[id].len;
    return true;
}

/* ---- scalar getters ---- */
static mi_status get_node(const gguf_file *f, const char *key, const gguf_node **out) {
    int64_t id = gguf_find_key(f, key);
    if (id < 0) return mi_err(MI_ERR_FORMAT, "missing key '%s'", key ? key : "(null)");
    *out = &f->kv[id];
    return MI_OK;
}

static mi_status get_int(const gguf_file *f, const char *key, uint64_t *u, int64_t *s, bool *neg) {
    const gguf_node *n = NULL; /* gcc 14 -Wmaybe-uninitialized cannot see get_node set it */
    MI_TRY(get_node(f, key, &n));
    if (!gguf_node_int(n, u, s, neg))
        return mi_err(MI_ERR_FORMAT, "key '%s' has type %s, want an integer", key, gguf_vt_name(n->type));
    return MI_OK;
}

mi_status gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out) {
    uint64_t u;
    int64_t s;
    bool neg;
    MI_TRY(get_int(f, key, &u, &s, &neg));
    if (neg) return mi_err(MI_ERR_FORMAT, "key '%s' = %" PRId64 " is negative, want an unsigned value", key, s);
    *out = u;
    return MI_OK;
}
mi_status gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    uint64_t u;
    int64_t s;
    bool neg;
    MI_TRY(get_int(f, key, &u, &s, &neg));
    if (!neg && u > INT64_MAX) return mi_err(MI_ERR_FORMAT, "key '%s' = %" PRIu64 " does not fit in int64", key, u);
    *out = neg ? s : (int64_t)u;
    return MI_OK;
}
mi_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    uint64_t u;
    MI_TRY(gguf_get_u64(f, key, &u));
    if (u > UINT32_MAX) return mi_err(MI_ERR_FORMAT, "key '%s' = %" PRIu64 " does not fit in uint32", key, u);
    *out = (uint32_t)u;
    return MI_OK;
}
mi_status gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_node *n = NULL; /* gcc 14 -Wmaybe-uninitialized cannot see get_node set it */
    MI_TRY(get_node(f, key, &n));
    if (n->type == GGUF_VT_FLOAT32) {
        uint32_t b = ld32(n->p);
        memcpy(out, &b, 4);
    } else if (n->type == GGUF_VT_FLOAT64) {
        uint64_t b = ld64(n->p);
        double d;
        memcpy(&d, &b, 8);
        *out = (float)d;
    } else {
        return mi_err(MI_ERR_FORMAT, "key '%s' has type %s, want f32 or f64", key, gguf_vt_name(n->type));
    }
    return MI_OK;
}
mi_status gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_node *n = NULL; /* gcc 14 -Wmaybe-uninitialized cannot see get_node set it */
    MI_TRY(get_node(f, key, &n));
    if (n->type != GGUF_VT_BOOL) return mi_err(MI_ERR_FORMAT, "key '%s' has type %s, want bool", key, gguf_vt_name(n->type));
    *out = n->p[0] != 0;
    return MI_OK;
}
mi_status gguf_get_str(const gguf_file *f, const char *key, const char **s, size_t *len) {
    const gguf_node *n = NULL; /* gcc 14 -Wmaybe-uninitialized cannot see get_node set it */
    MI_TRY(get_node(f, key, &n));
    if (n->type != GGUF_VT_STRING) return mi_err(MI_ERR_FORMAT, "key '%s' has type %s, want str", key, gguf_vt_name(n->type));
    *s = (const char *)n->p;
    if (len) *len = (size_t)n->n;
    return MI_OK;
}

/* ---- tensors ---- */
int64_t gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }
const gguf_tensor_info *gguf_tensor(const gguf_file *f, int64_t i) {
    return i >= 0 && i < f->n_tensors ? &f->ti[i] : NULL;
}
const gguf_tensor_info *gguf_find_tensor(const gguf_file *f, const char *name) {
    int64_t i = name ? htab_find(&f->tensor_hash, (const char *const *)f->names, name, -1) : -1;
    return i >= 0 ? &f->ti[i] : NULL;
}

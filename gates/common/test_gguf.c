/* GGUF reader/writer tests: writer -> reader round trip of every value type (nested
 * arrays too), many tensors of several types at alignment 32 and 64, a byte-identical
 * rewrite through gguf_w_copy_kv; and hostile images built byte by byte here (an encoder
 * independent of the writer) that must each fail with a message, never crash. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "common/gguf/gguf.h"

/* ---- a tiny independent GGUF encoder ---- */
typedef struct { uint8_t *p; size_t n, cap; } buf;
static void b_put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void b_u32(buf *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(buf *b, uint64_t v) { b_put(b, &v, 8); }
static void b_str(buf *b, const char *s) { b_u64(b, strlen(s)); b_put(b, s, strlen(s)); }
static void b_head(buf *b, uint32_t version, uint64_t nt, uint64_t nkv) {
    b_u32(b, 0x46554747u);
    b_u32(b, version);
    b_u64(b, nt);
    b_u64(b, nkv);
}
static void b_kv_u32(buf *b, const char *k, uint32_t v) { b_str(b, k); b_u32(b, GGUF_VT_UINT32); b_u32(b, v); }
static void b_tensor(buf *b, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type, uint64_t off) {
    b_str(b, name);
    b_u32(b, nd);
    for (uint32_t i = 0; i < nd; i++) b_u64(b, ne[i]);
    b_u32(b, type);
    b_u64(b, off);
}
static void b_pad(buf *b, size_t align) {
    static const uint8_t z[256];
    b_put(b, z, (align - b->n % align) % align);
}
static void b_zeros(buf *b, size_t n) {
    for (size_t i = 0; i < n; i++) b_put(b, "", 1);
}

/* expect open to fail with a message containing `want` (and never crash) */
static void expect_fail(const buf *b, const char *want, const char *label) {
    gguf_file *f = NULL;
    mi_status st = gguf_open_mem(b->p, b->n, &f);
    cr_expect(st != MI_OK, "%s: opened, want an error containing '%s'", label, want);
    cr_expect(f == NULL, "%s: out set on failure", label);
    if (st == MI_OK) { gguf_close(f); return; }
    cr_expect(strstr(mi_errmsg(), want) != NULL, "%s: message '%s' lacks '%s'", label, mi_errmsg(), want);
    cr_expect(strchr(mi_errmsg(), '\n') == NULL, "%s: message has a newline", label);
}

/* ---- round trip ---- */
static char g_path[64];
static void mk_path(void) {
    snprintf(g_path, sizeof g_path, "/tmp/test_gguf_XXXXXX");
    int fd = mkstemp(g_path);
    cr_assert(fd >= 0);
    close(fd);
}

#define NT 24
static const mi_type TYPES[6] = {MI_TYPE_F32, MI_TYPE_F16, MI_TYPE_Q4_0, MI_TYPE_Q8_0, MI_TYPE_Q4_K, MI_TYPE_Q6_K};
static const size_t BLK[6] = {1, 1, 32, 32, 256, 256}, TSZ[6] = {4, 2, 18, 34, 144, 210};

static mi_status fill(void *user, int64_t i, void *dst, size_t n) {
    for (size_t j = 0; j < n; j++) ((uint8_t *)dst)[j] = (uint8_t)(j * 7 + (size_t)i * 13 + (uintptr_t)user);
    return MI_OK;
}

static void write_sample(const char *path, uint32_t align) {
    gguf_writer *w = gguf_writer_new();
    cr_assert(w);
    if (align) gguf_w_u32(w, "general.alignment", align);
    gguf_w_u8(w, "u8", 255); gguf_w_i8(w, "i8", -128); gguf_w_u16(w, "u16", 65535); gguf_w_i16(w, "i16", -32768);
    gguf_w_u32(w, "u32", UINT32_MAX); gguf_w_i32(w, "i32", INT32_MIN); gguf_w_u64(w, "u64", UINT64_MAX);
    gguf_w_i64(w, "i64", INT64_MIN); gguf_w_f32(w, "f32", -1.5e-7f); gguf_w_f64(w, "f64", 1e300);
    gguf_w_bool(w, "bool", true); gguf_w_str(w, "str", "h\xc3\xa9llo"); gguf_w_str(w, "empty", "");
    int16_t a16[4] = {-1, 2, -3, 4};
    gguf_w_arr(w, "arr_i16", GGUF_VT_INT16, a16, 4);
    double a64[2] = {0.25, -8};
    gguf_w_arr(w, "arr_f64", GGUF_VT_FLOAT64, a64, 2);
    const char *s[3] = {"one", "", "three"};
    gguf_w_arr_str(w, "arr_str", s, 3);
    /* [[ "a" ], [ ]] as arr of arr of str */
    buf n = {0};
    b_u32(&n, GGUF_VT_ARRAY); b_u64(&n, 2);
    b_u32(&n, GGUF_VT_STRING); b_u64(&n, 1); b_str(&n, "a");
    b_u32(&n, GGUF_VT_STRING); b_u64(&n, 0);
    gguf_w_raw(w, "nested", GGUF_VT_ARRAY, n.p, n.n);
    free(n.p);
    for (int i = 0; i < NT; i++) {
        char name[32];
        snprintf(name, sizeof name, "blk.%d.w", i);
        int ti = i % 6;
        int64_t ne[3] = {(int64_t)BLK[ti] * (1 + i % 3), 1 + i % 5, 1 + i % 2};
        cr_assert_eq(gguf_w_tensor(w, name, TYPES[ti], 1 + i % 3, ne, NULL), i);
    }
    cr_assert_eq(gguf_writer_write(w, path, fill, (void *)(uintptr_t)align, NULL), MI_OK, "%s", mi_errmsg());
    gguf_writer_free(w);
}

static void check_sample(const char *path, uint32_t align) {
    gguf_file *f;
    cr_assert_eq(gguf_open(path, &f), MI_OK, "%s", mi_errmsg());
    cr_expect_eq(gguf_version(f), 3);
    cr_expect_eq(gguf_alignment(f), align ? align : 32);
    cr_expect_eq(gguf_data_offset(f) % gguf_alignment(f), 0);
    uint64_t u; int64_t i64; uint32_t u32; float x; bool b; const char *str; size_t len;
    cr_expect(gguf_get_u64(f, "u8", &u) == MI_OK && u == 255);
    cr_expect(gguf_get_i64(f, "i8", &i64) == MI_OK && i64 == -128);
    cr_expect(gguf_get_u32(f, "u16", &u32) == MI_OK && u32 == 65535);
    cr_expect(gguf_get_i64(f, "i16", &i64) == MI_OK && i64 == -32768);
    cr_expect(gguf_get_u32(f, "u32", &u32) == MI_OK && u32 == UINT32_MAX);
    cr_expect(gguf_get_i64(f, "i32", &i64) == MI_OK && i64 == INT32_MIN);
    cr_expect(gguf_get_u64(f, "u64", &u) == MI_OK && u == UINT64_MAX);
    cr_expect(gguf_get_i64(f, "i64", &i64) == MI_OK && i64 == INT64_MIN);
    cr_expect(gguf_get_f32(f, "f32", &x) == MI_OK && x == -1.5e-7f);
    cr_expect(gguf_get_f32(f, "f64", &x) == MI_OK && x == (float)1e300);
    cr_expect(gguf_get_bool(f, "bool", &b) == MI_OK && b);
    cr_expect(gguf_get_str(f, "str", &str, &len) == MI_OK && len == 6 && !memcmp(str, "h\xc3\xa9llo", 6));
    cr_expect(gguf_get_str(f, "empty", &str, &len) == MI_OK && len == 0);
    /* conversions that must be refused */
    cr_expect_neq(gguf_get_u64(f, "i8", &u), MI_OK);             /* negative */
    cr_expect_neq(gguf_get_u32(f, "u64", &u32), MI_OK);          /* too big */
    cr_expect_neq(gguf_get_i64(f, "u64", &i64), MI_OK);
    cr_expect_neq(gguf_get_str(f, "u8", &str, &len), MI_OK);
    cr_expect_neq(gguf_get_u64(f, "absent", &u), MI_OK);
    cr_expect(strstr(mi_errmsg(), "absent") != NULL);
    int64_t id = gguf_find_key(f, "arr_i16");
    cr_assert_geq(id, 0);
    cr_expect_eq(gguf_arr_type(f, id), GGUF_VT_INT16);
    cr_expect_eq(gguf_arr_n(f, id), 4);
    cr_expect(!memcmp(gguf_arr_data(f, id), (int16_t[]){-1, 2, -3, 4}, 8));
    id = gguf_find_key(f, "arr_f64");
    cr_expect(!memcmp(gguf_arr_data(f, id), (double[]){0.25, -8}, 16));
    id = gguf_find_key(f, "arr_str");
    cr_expect_eq(gguf_arr_n(f, id), 3);
    str = gguf_arr_str(f, id, 2, &len);
    cr_expect(str && len == 5 && !memcmp(str, "three", 5));
    str = gguf_arr_str(f, id, 1, &len);
    cr_expect(str && len == 0);
    cr_expect_null(gguf_arr_str(f, id, 3, &len));                 /* out of range */
    id = gguf_find_key(f, "nested");
    cr_expect_eq(gguf_arr_type(f, id), GGUF_VT_ARRAY);
    int64_t e0 = gguf_arr_elem(f, id, 0), e1 = gguf_arr_elem(f, id, 1);
    cr_expect(e0 < -1 && e1 < -1);
    cr_expect_eq(gguf_arr_type(f, e0), GGUF_VT_STRING);
    str = gguf_arr_str(f, e0, 0, &len);
    cr_expect(str && len == 1 && str[0] == 'a');
    cr_expect_eq(gguf_arr_n(f, e1), 0);
    cr_expect_eq(gguf_arr_elem(f, id, 2), -1);
    cr_expect_eq(gguf_find_key(f, "missing"), -1);
    cr_expect_eq(gguf_n_tensors(f), NT);
    for (int i = 0; i < NT; i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        char name[32];
        snprintf(name, sizeof name, "blk.%d.w", i);
        int ti = i % 6;
        cr_expect_str_eq(t->name, name);
        cr_expect_eq(gguf_find_tensor(f, name), t);
        cr_expect_eq(t->type, TYPES[ti]);
        cr_expect_eq(t->n_dims, 1 + i % 3);
        int64_t ne[4] = {(int64_t)BLK[ti] * (1 + i % 3), t->n_dims > 1 ? 1 + i % 5 : 1, t->n_dims > 2 ? 1 + i % 2 : 1, 1};
        for (int d = 0; d < 4; d++) cr_expect_eq(t->ne[d], ne[d], "tensor %d dim %d", i, d);
        cr_expect_eq(t->nbytes, (size_t)(ne[0] * ne[1] * ne[2]) / BLK[ti] * TSZ[ti]);
        cr_expect_eq(t->offset % gguf_alignment(f), 0);
        int ok = 1;
        for (size_t j = 0; j < t->nbytes && ok; j++) ok = ((const uint8_t *)t->data)[j] == (uint8_t)(j * 7 + (size_t)i * 13 + align);
        cr_expect(ok, "tensor %d data", i);
    }
    cr_expect_null(gguf_tensor(f, NT));
    cr_expect_null(gguf_find_tensor(f, "nope"));
    gguf_close(f);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    cr_assert(fp);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc(*n);
    cr_assert(fread(p, 1, *n, fp) == *n);
    fclose(fp);
    return p;
}

Test(gguf, round_trip_align32) { mk_path(); write_sample(g_path, 0); check_sample(g_path, 0); unlink(g_path); }
Test(gguf, round_trip_align64) { mk_path(); write_sample(g_path, 64); check_sample(g_path, 64); unlink(g_path); }

/* read -> copy every kv and tensor -> write: the bytes must be identical */
Test(gguf, rewrite_identical) {
    for (uint32_t align = 0; align <= 64; align += 64) {
        mk_path();
        write_sample(g_path, align);
        gguf_file *f;
        cr_assert_eq(gguf_open(g_path, &f), MI_OK);
        gguf_writer *w = gguf_writer_new();
        gguf_w_copy_kv(w, f);
        for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor_info *t = gguf_tensor(f, i);
            gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
        }
        char p2[80];
        snprintf(p2, sizeof p2, "%s.copy", g_path);
        cr_assert_eq(gguf_writer_write(w, p2, NULL, NULL, NULL), MI_OK, "%s", mi_errmsg());
        gguf_writer_free(w);
        gguf_close(f);
        size_t n1, n2;
        uint8_t *a = slurp(g_path, &n1), *b = slurp(p2, &n2);
        cr_expect_eq(n1, n2);
        cr_expect(n1 == n2 && !memcmp(a, b, n1), "rewrite differs (align %u)", align);
        free(a); free(b);
        unlink(g_path); unlink(p2);
    }
}

/* every strict prefix of a valid file fails cleanly; the whole file opens */
Test(gguf, every_truncation_fails) {
    mk_path();
    write_sample(g_path, 0);
    size_t n;
    uint8_t *img = slurp(g_path, &n);
    unlink(g_path);
    gguf_file *f;
    cr_assert_eq(gguf_open_mem(img, n, &f), MI_OK);
    size_t end = 0;   /* end of the last tensor's data: only trailing padding may be cut */
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        size_t e = gguf_data_offset(f) + (size_t)t->offset + t->nbytes;
        if (e > end) end = e;
    }
    gguf_close(f);
    cr_expect_lt(end, n, "the writer pads after the last tensor");
    for (size_t len = 0; len < n; len++) {
        uint8_t *cut = malloc(len ? len : 1);   /* exact-size copy: ASan sees any over-read */
        memcpy(cut, img, len);
        mi_status st = gguf_open_mem(cut, len, &f);
        if (len >= end) cr_expect_eq(st, MI_OK, "prefix of %zu/%zu bytes (past the data) failed: %s", len, n, mi_errmsg());
        else cr_expect_neq(st, MI_OK, "prefix of %zu/%zu bytes opened", len, n);
        if (st == MI_OK) gguf_close(f);
        free(cut);
    }
    free(img);
}

/* single-byte corruptions anywhere in the header: any outcome but a crash; when the file
 * still opens, every accessor must stay in bounds */
Test(gguf, byte_flips_do_not_crash) {
    mk_path();
    write_sample(g_path, 0);
    size_t n;
    uint8_t *img = slurp(g_path, &n);
    unlink(g_path);
    gguf_file *f;
    cr_assert_eq(gguf_open_mem(img, n, &f), MI_OK);
    size_t hdr = gguf_data_offset(f);
    gguf_close(f);
    static const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    for (size_t i = 0; i < hdr; i++) {
        for (size_t v = 0; v < sizeof vals; v++) {
            uint8_t *m = malloc(n);
            memcpy(m, img, n);
            m[i] = vals[v];
            if (gguf_open_mem(m, n, &f) == MI_OK) {
                char s[256];
                for (int64_t k = 0; k < gguf_n_kv(f); k++) gguf_kv_format(f, k, s, sizeof s);
                for (int64_t t = 0; t < gguf_n_tensors(f); t++) {
                    const gguf_tensor_info *ti = gguf_tensor(f, t);
                    volatile uint8_t last = ti->nbytes ? ((const uint8_t *)ti->data)[ti->nbytes - 1] : 0;
                    (void)last;
                }
                gguf_close(f);
            }
            free(m);
        }
    }
    free(img);
}

/* ---- crafted hostile images ---- */
Test(gguf, bad_header) {
    buf b = {0};
    expect_fail(&b, "truncated", "empty");
    b_put(&b, "GGUF", 4);
    expect_fail(&b, "truncated", "magic only");
    b.n = 0; b_put(&b, "GGML", 4); b_u32(&b, 3); b_u64(&b, 0); b_u64(&b, 0);
    expect_fail(&b, "not a GGUF file", "bad magic");
    b.n = 0; b_head(&b, 1, 0, 0); expect_fail(&b, "version 1", "v1");
    b.n = 0; b_head(&b, 4, 0, 0); expect_fail(&b, "version 4", "v4");
    b.n = 0; b_head(&b, 0x03000000, 0, 0); expect_fail(&b, "big-endian", "big-endian");
    b.n = 0; b_head(&b, 3, 0, UINT64_MAX); expect_fail(&b, "kv count", "huge n_kv");
    b.n = 0; b_head(&b, 3, UINT64_MAX / 2, 0); expect_fail(&b, "tensor count", "huge n_tensors");
    b.n = 0; b_head(&b, 3, 0, 0);
    gguf_file *f;
    cr_expect_eq(gguf_open_mem(b.p, b.n, &f), MI_OK, "empty but valid: %s", mi_errmsg());
    if (f) { cr_expect_eq(gguf_n_kv(f), 0); gguf_close(f); }
    b.n = 0; b_head(&b, 2, 0, 1); b_kv_u32(&b, "a", 1);
    cr_expect_eq(gguf_open_mem(b.p, b.n, &f), MI_OK, "v2: %s", mi_errmsg());
    if (f) { cr_expect_eq(gguf_version(f), 2); gguf_close(f); }
    free(b.p);
}

Test(gguf, bad_kv) {
    buf b = {0};
    b_head(&b, 3, 0, 1); b_u64(&b, UINT64_MAX); b_zeros(&b, 16); expect_fail(&b, "string length", "huge key length");
    b.n = 0; b_head(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, 13); b_u32(&b, 0); expect_fail(&b, "unknown value type 13", "bad vtype");
    b.n = 0; b_head(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_VT_STRING); b_u64(&b, 1ull << 62);
    expect_fail(&b, "string length", "huge string");
    b.n = 0; b_head(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_VT_ARRAY); b_u32(&b, GGUF_VT_UINT32); b_u64(&b, 1ull << 62);
    expect_fail(&b, "array of", "array n*4 overflows");
    b.n = 0; b_head(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_VT_ARRAY); b_u32(&b, GGUF_VT_STRING); b_u64(&b, UINT64_MAX);
    expect_fail(&b, "array of", "huge string array");
    b.n = 0; b_head(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_VT_ARRAY); b_u32(&b, 99); b_u64(&b, 0);
    expect_fail(&b, "unknown array element type", "bad elem type");
    b.n = 0; b_head(&b, 3, 0, 2); b_kv_u32(&b, "k", 1); b_kv_u32(&b, "k", 2); expect_fail(&b, "duplicate key 'k'", "dup key");
    b.n = 0; b_head(&b, 3, 0, 1); b_kv_u32(&b, "", 1); expect_fail(&b, "empty name", "empty key");
    b.n = 0; b_head(&b, 3, 0, 1); b_u64(&b, 3); b_put(&b, "a\0b", 3); b_u32(&b, GGUF_VT_UINT8); b_put(&b, "x", 1);
    expect_fail(&b, "control byte", "NUL in key");
    /* arrays nested past the depth limit */
    b.n = 0; b_head(&b, 3, 0, 1); b_str(&b, "deep"); b_u32(&b, GGUF_VT_ARRAY);
    for (int i = 0; i < 40; i++) { b_u32(&b, GGUF_VT_ARRAY); b_u64(&b, 1); }
    b_u32(&b, GGUF_VT_UINT8); b_u64(&b, 0);
    expect_fail(&b, "nested deeper", "depth");
    /* alignment */
    b.n = 0; b_head(&b, 3, 0, 1); b_kv_u32(&b, "general.alignment", 0); expect_fail(&b, "power of two", "align 0");
    b.n = 0; b_head(&b, 3, 0, 1); b_kv_u32(&b, "general.alignment", 48); expect_fail(&b, "power of two", "align 48");
    b.n = 0; b_head(&b, 3, 0, 1); b_str(&b, "general.alignment"); b_u32(&b, GGUF_VT_STRING); b_str(&b, "32");
    expect_fail(&b, "want an integer", "align str");
    b.n = 0; b_head(&b, 3, 0, 1); b_str(&b, "general.alignment"); b_u32(&b, GGUF_VT_INT8); b_put(&b, "\xf0", 1);
    expect_fail(&b, "power of two", "align negative");
    free(b.p);
}

/* one tensor with the given fields after a valid header; data section of `data` bytes */
static void one_tensor(buf *b, uint32_t nd, const uint64_t *ne, uint32_t type, uint64_t off, size_t data) {
    b->n = 0;
    b_head(b, 3, 1, 0);
    b_tensor(b, "t", nd, ne, type, off);
    b_pad(b, 32);
    b_zeros(b, data);
}

Test(gguf, bad_tensors) {
    buf b = {0};
    uint64_t ne[5] = {32, 2, 1, 1, 1};
    one_tensor(&b, 2, ne, MI_TYPE_F32, 0, 256);
    gguf_file *f;
    cr_expect_eq(gguf_open_mem(b.p, b.n, &f), MI_OK, "valid tensor: %s", mi_errmsg());
    if (f) gguf_close(f);
    one_tensor(&b, 2, ne, MI_TYPE_F32, 0, 255); expect_fail(&b, "past the end", "data 1 byte short");
    one_tensor(&b, 5, ne, MI_TYPE_F32, 0, 256); expect_fail(&b, "n_dims = 5", "n_dims 5");
    one_tensor(&b, 0, ne, MI_TYPE_F32, 0, 256); expect_fail(&b, "n_dims = 0", "n_dims 0");
    one_tensor(&b, 2, ne, 4, 0, 256); expect_fail(&b, "unknown tensor type 4", "type 4 (removed Q4_2)");
    one_tensor(&b, 2, ne, 0xffffffffu, 0, 256); expect_fail(&b, "unknown tensor type", "type 2^32-1");
    one_tensor(&b, 2, ne, MI_TYPE_F32, 16, 256); expect_fail(&b, "alignment", "misaligned offset");
    one_tensor(&b, 2, ne, MI_TYPE_F32, 1024, 256); expect_fail(&b, "past the end", "offset past end");
    one_tensor(&b, 2, ne, MI_TYPE_F32, UINT64_MAX - 31, 256); expect_fail(&b, "past the end", "offset wraps");
    uint64_t zero[2] = {32, 0};
    one_tensor(&b, 2, zero, MI_TYPE_F32, 0, 256); expect_fail(&b, "has size 0", "ne = 0");
    uint64_t huge[4] = {1ull << 32, 1ull << 32, 1, 1};
    one_tensor(&b, 2, huge, MI_TYPE_F32, 0, 256); expect_fail(&b, "overflows", "element count overflow");
    uint64_t neg[1] = {1ull << 63};
    one_tensor(&b, 1, neg, MI_TYPE_F32, 0, 256); expect_fail(&b, "dimension 0", "ne > INT64_MAX");
    uint64_t bytes_ovf[2] = {1ull << 61, 1};
    one_tensor(&b, 1, bytes_ovf, MI_TYPE_F32, 0, 256); expect_fail(&b, "past the end", "nbytes huge");
    uint64_t odd[2] = {33, 1};
    one_tensor(&b, 2, odd, MI_TYPE_Q4_0, 0, 256); expect_fail(&b, "block size", "ne0 % 32");
    /* duplicate names */
    b.n = 0; b_head(&b, 3, 2, 0); b_tensor(&b, "t", 1, ne, MI_TYPE_F32, 0); b_tensor(&b, "t", 1, ne, MI_TYPE_F32, 128);
    b_pad(&b, 32); b_zeros(&b, 256);
    expect_fail(&b, "duplicate tensor name 't'", "dup tensor");
    /* overlapping tensors are allowed (both in bounds) */
    b.n = 0; b_head(&b, 3, 2, 0); b_tensor(&b, "a", 1, ne, MI_TYPE_F32, 0); b_tensor(&b, "b", 1, ne, MI_TYPE_F32, 0);
    b_pad(&b, 32); b_zeros(&b, 128);
    cr_expect_eq(gguf_open_mem(b.p, b.n, &f), MI_OK, "overlap: %s", mi_errmsg());
    if (f) gguf_close(f);
    /* data section start past the end of the file */
    b.n = 0; b_head(&b, 3, 1, 0); b_tensor(&b, "t", 1, ne, MI_TYPE_F32, 0);
    expect_fail(&b, "truncated", "no padding, no data");
    free(b.p);
}

Test(gguf, file_errors) {
    gguf_file *f;
    cr_expect_eq(gguf_open("/nonexistent/x.gguf", &f), MI_ERR_IO);
    cr_expect(strstr(mi_errmsg(), "No such file") != NULL, "%s", mi_errmsg());
    cr_expect_neq(gguf_open("/tmp", &f), MI_OK);
    mk_path();   /* empty file */
    cr_expect_eq(gguf_open(g_path, &f), MI_ERR_FORMAT);
    cr_expect(strstr(mi_errmsg(), "empty") != NULL, "%s", mi_errmsg());
    unlink(g_path);
}

Test(gguf, writer_misuse) {
    gguf_writer *w = gguf_writer_new();
    int64_t ne[2] = {33, 1};
    cr_expect_eq(gguf_w_tensor(w, "q", MI_TYPE_Q4_0, 2, ne, NULL), -1);
    mk_path();
    unlink(g_path);
    cr_expect_neq(gguf_writer_write(w, g_path, fill, NULL, NULL), MI_OK);
    cr_expect(strstr(mi_errmsg(), "block size") != NULL, "%s", mi_errmsg());
    cr_expect_neq(access(g_path, F_OK), 0, "failed write left a file");
    gguf_writer_free(w);
    w = gguf_writer_new();
    ne[0] = 32;
    cr_expect_eq(gguf_w_tensor(w, "a", MI_TYPE_F32, 1, ne, NULL), 0);
    cr_expect_eq(gguf_w_tensor(w, "a", MI_TYPE_F32, 1, ne, NULL), -1);
    gguf_writer_free(w);
    w = gguf_writer_new();
    gguf_w_u32(w, "general.alignment", 48);
    cr_expect_neq(gguf_writer_write(w, g_path, NULL, NULL, NULL), MI_OK);
    gguf_writer_free(w);
    w = gguf_writer_new();
    cr_expect_eq(gguf_w_tensor(w, "a", MI_TYPE_F32, 1, ne, NULL), 0);
    cr_expect_neq(gguf_writer_write(w, g_path, NULL, NULL, NULL), MI_OK);   /* no data, no fill */
    gguf_writer_free(w);
    unlink(g_path);
}

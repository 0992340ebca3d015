/* Writes a GGUF file with our writer so that an independent reader (the PyPI gguf
 * package, in py_gguf_info.py) can judge it: every value type, a nested array, tensors of
 * several types, given data and streamed (fill) data. Tensor i byte j = (31*i + j) & 255.
 *   gate_gguf_write OUT [ALIGN]   write OUT (ALIGN: general.alignment, default none = 32)
 *   gate_gguf_write               write a temp file, read it back with our reader, report */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/gguf/gguf.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
    printf(__VA_ARGS__); printf("\n"); } } while (0)

static mi_status fill(void *user, int64_t ti, void *dst, size_t n) {
    (void)user;
    for (size_t j = 0; j < n; j++) ((unsigned char *)dst)[j] = (unsigned char)((31 * ti + (int64_t)j) & 255);
    return MI_OK;
}

static const struct { const char *name; mi_type type; int nd; int64_t ne[4]; } TENSORS[] = {
    {"w.f32", MI_TYPE_F32, 2, {8, 3}},     {"w.f16", MI_TYPE_F16, 1, {40}},
    {"w.q4_0", MI_TYPE_Q4_0, 2, {64, 2}},  {"w.q8_0", MI_TYPE_Q8_0, 3, {32, 2, 2}},
    {"w.q4_k", MI_TYPE_Q4_K, 2, {256, 3}}, {"w.q6_k", MI_TYPE_Q6_K, 4, {256, 1, 2, 1}},
    {"w.bf16", MI_TYPE_BF16, 1, {7}},
};
#define N_TENSORS (int)(sizeof TENSORS / sizeof TENSORS[0])

static mi_status write_file(const char *path, int align) {
    gguf_writer *w = gguf_writer_new();
    if (!w) return mi_err(MI_ERR_NOMEM, "out of memory");
    gguf_w_str(w, "general.architecture", "llama");
    if (align) gguf_w_u32(w, "general.alignment", (uint32_t)align);
    gguf_w_u8(w, "v.u8", 200);
    gguf_w_i8(w, "v.i8", -100);
    gguf_w_u16(w, "v.u16", 60000);
    gguf_w_i16(w, "v.i16", -30000);
    gguf_w_u32(w, "v.u32", 4000000000u);
    gguf_w_i32(w, "v.i32", -2000000000);
    gguf_w_u64(w, "v.u64", UINT64_MAX);
    gguf_w_i64(w, "v.i64", INT64_MIN);
    gguf_w_f32(w, "v.f32", 0.1f);
    gguf_w_f64(w, "v.f64", -0.1);
    gguf_w_bool(w, "v.bool", true);
    gguf_w_str(w, "v.str", "caf\xc3\xa9 \"q\"\n");
    gguf_w_str(w, "v.str_empty", "");
    gguf_w_str(w, "v.replaced", "old");
    gguf_w_i32(w, "v.replaced", 42);   /* replacing keeps one key */
    int32_t ai[5] = {-2, -1, 0, 1, 2};
    gguf_w_arr(w, "v.arr_i32", GGUF_VT_INT32, ai, 5);
    float af[3] = {1.5f, -0.0f, 3e38f};
    gguf_w_arr(w, "v.arr_f32", GGUF_VT_FLOAT32, af, 3);
    uint8_t ab[2] = {1, 0};
    gguf_w_arr(w, "v.arr_bool", GGUF_VT_BOOL, ab, 2);
    gguf_w_arr(w, "v.arr_empty", GGUF_VT_UINT64, NULL, 0);
    const char *strs[3] = {"x", "", "\xe4\xb8\xad"};
    gguf_w_arr_str(w, "v.arr_str", strs, 3);
    /* nested: arr of 2 arrays of u16: [[1,2],[3]] in its file encoding */
    static const uint8_t nested[] = {9, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,            /* arr, n=2 */
                                     2, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, /* u16 x2: 1 2 */
                                     2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0};      /* u16 x1: 3 */
    gguf_w_raw(w, "v.arr_nested", GGUF_VT_ARRAY, nested, sizeof nested);
    /* the last tensor's data is given, the others are streamed through fill() */
    static unsigned char bf16_data[14];
    fill(NULL, N_TENSORS - 1, bf16_data, sizeof bf16_data);
    for (int i = 0; i < N_TENSORS; i++)
        if (gguf_w_tensor(w, TENSORS[i].name, TENSORS[i].type, TENSORS[i].nd, TENSORS[i].ne,
                          i == N_TENSORS - 1 ? bf16_data : NULL) != i) {
            gguf_writer_free(w);
            return mi_err(MI_ERR_INTERNAL, "gguf_w_tensor %s failed", TENSORS[i].name);
        }
    mi_status st = gguf_writer_write(w, path, fill, NULL, NULL);
    gguf_writer_free(w);
    return st;
}

static void self_check(const char *path) {
    gguf_file *f;
    mi_status st = gguf_open(path, &f);
    CHECK(st == MI_OK, "open: %s", mi_errmsg());
    if (st != MI_OK) return;
    uint64_t u;
    int64_t s;
    float x;
    bool b;
    const char *str;
    size_t len;
    CHECK(gguf_get_u64(f, "v.u64", &u) == MI_OK && u == UINT64_MAX, "v.u64");
    CHECK(gguf_get_i64(f, "v.i64", &s) == MI_OK && s == INT64_MIN, "v.i64");
    CHECK(gguf_get_i64(f, "v.replaced", &s) == MI_OK && s == 42, "v.replaced");
    CHECK(gguf_get_f32(f, "v.f32", &x) == MI_OK && x == 0.1f, "v.f32");
    CHECK(gguf_get_bool(f, "v.bool", &b) == MI_OK && b, "v.bool");
    CHECK(gguf_get_str(f, "v.str", &str, &len) == MI_OK && len == 10 && !memcmp(str, "caf\xc3\xa9 \"q\"\n", 10), "v.str");
    int64_t id = gguf_find_key(f, "v.arr_nested");
    CHECK(id >= 0 && gguf_arr_type(f, id) == GGUF_VT_ARRAY && gguf_arr_n(f, id) == 2, "nested");
    int64_t e1 = gguf_arr_elem(f, id, 1);
    CHECK(gguf_arr_n(f, e1) == 1 && ((const uint8_t *)gguf_arr_data(f, e1))[0] == 3, "nested[1]");
    CHECK(gguf_n_tensors(f) == N_TENSORS, "n_tensors %" PRId64, gguf_n_tensors(f));
    for (int i = 0; i < N_TENSORS && i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        int ok = !strcmp(t->name, TENSORS[i].name) && t->type == TENSORS[i].type && t->n_dims == TENSORS[i].nd;
        for (size_t j = 0; ok && j < t->nbytes; j++) ok = ((const unsigned char *)t->data)[j] == ((31 * i + (int)j) & 255);
        CHECK(ok, "tensor %d (%s)", i, TENSORS[i].name);
    }
    gguf_close(f);
}

int main(int argc, char **argv) {
    if (argc >= 2) {
        mi_status st = write_file(argv[1], argc >= 3 ? atoi(argv[2]) : 0);
        if (st != MI_OK) {
            fprintf(stderr, "gate_gguf_write: %s\n", mi_errmsg());
            return 1;
        }
        return 0;
    }
    char path[] = "/tmp/gate_gguf_write_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        printf("cannot create a temp file\n0 passed, 1 failed\n");
        return 1;
    }
    close(fd);
    int aligns[3] = {0, 64, 128};
    for (int a = 0; a < 3; a++) {
        mi_status st = write_file(path, aligns[a]);
        CHECK(st == MI_OK, "write (align %d): %s", aligns[a], mi_errmsg());
        if (st == MI_OK) self_check(path);
    }
    unlink(path);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail != 0;
}

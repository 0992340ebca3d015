/* libFuzzer target for the GGUF reader: any byte string goes through gguf_open_mem;
 * when it opens, every accessor is walked (keys, values, array elements, nested arrays,
 * tensors and the first and last byte of their data) so that ASan/UBSan see any read
 * the validation failed to bound. Lookups must agree with the tables (else trap). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "common/gguf/gguf.h"

static volatile uint8_t g_sink;

static void touch(const void *p, size_t n) {
    if (!n) return;
    g_sink ^= ((const uint8_t *)p)[0];
    g_sink ^= ((const uint8_t *)p)[n - 1];
}

static void walk_value(const gguf_file *f, int64_t id, int depth) {
    char buf[256];
    gguf_kv_format(f, id, buf, sizeof buf);
    size_t len;
    const void *d = gguf_kv_data(f, id, &len);
    if (d) touch(d, len);
    if (gguf_kv_type(f, id) != GGUF_VT_ARRAY) return;
    gguf_vtype et = gguf_arr_type(f, id);
    uint64_t n = gguf_arr_n(f, id);
    if (gguf_vt_size(et)) {
        touch(gguf_arr_data(f, id), (size_t)n * gguf_vt_size(et));
    } else if (et == GGUF_VT_STRING) {
        for (uint64_t i = 0; i < n; i++) {
            const char *s = gguf_arr_str(f, id, i, &len);
            if (!s) __builtin_trap();
            touch(s, len);
        }
    } else if (et == GGUF_VT_ARRAY) {
        if (depth > 64) __builtin_trap();   /* the reader limits nesting */
        for (uint64_t i = 0; i < n; i++) {
            int64_t e = gguf_arr_elem(f, id, i);
            if (e >= -1) __builtin_trap();
            walk_value(f, e, depth + 1);
        }
    }
    if (gguf_arr_str(f, id, n, &len) || gguf_arr_elem(f, id, n) != -1) __builtin_trap();   /* one past the end */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f;
    if (gguf_open_mem(data, size, &f) != MI_OK) return 0;
    if (gguf_data_offset(f) % gguf_alignment(f)) __builtin_trap();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const char *k = gguf_kv_key(f, i);
        if (gguf_find_key(f, k) != i) __builtin_trap();
        walk_value(f, i, 0);
        uint64_t u; int64_t s; uint32_t u32; float x; bool b; const char *str; size_t len;
        (void)gguf_get_u64(f, k, &u); (void)gguf_get_i64(f, k, &s); (void)gguf_get_u32(f, k, &u32);
        (void)gguf_get_f32(f, k, &x); (void)gguf_get_bool(f, k, &b);
        if (gguf_get_str(f, k, &str, &len) == MI_OK) touch(str, len);
        const void *raw;
        if (!gguf_kv_raw(f, i, &raw, &len)) __builtin_trap();
        touch(raw, len);
    }
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        if (gguf_find_tensor(f, t->name) != t || strlen(t->name) != t->name_len) __builtin_trap();
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS || t->nbytes == 0) __builtin_trap();
        /* the data lies in the image, or (a file aligned below what its type needs) in
         * an aligned copy of the same bytes */
        const uint8_t *in = data + gguf_data_offset(f) + t->offset, *p = t->data;
        if (in + t->nbytes > data + size) __builtin_trap();
        if (p != in && ((uintptr_t)p % mi_type_align(t->type) || memcmp(p, in, t->nbytes))) __builtin_trap();
        touch(p, t->nbytes);
    }
    gguf_close(f);
    return 0;
}

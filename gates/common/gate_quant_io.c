/* File-level access to the quant module for the Python gate (py_quant_ref.py):
 *   gate_quant_io dequant TYPE in.bin out.f32   raw blocks -> f32 (mi_dequantize_row)
 *   gate_quant_io quant   TYPE in.f32 out.bin   f32 -> raw blocks (mi_quantize_row)
 *   gate_quant_io info    TYPE                  prints "name blck_size type_size vec_dot_type"
 * TYPE is a name (Q4_K) or a GGUF id. Exit status 0 on success, 1 on bad input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/quant/mi_types.h"

static int fail(const char *msg, const char *arg) {
    fprintf(stderr, "gate_quant_io: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    return 1;
}

static void *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = realloc(buf, cap *= 2);
        if (!nb) { free(buf); buf = NULL; }
        else buf = nb;
    }
    if (buf && ferror(f)) { free(buf); buf = NULL; }
    fclose(f);
    *len = n;
    return buf;
}

static int write_all(const char *path, const void *p, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    const int ok = fwrite(p, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

static int parse_type(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    const int id = (*end == '\0' && end != s) ? (int)v : mi_type_from_name(s);
    const mi_type_traits *t = mi_type_get(id);
    return t && t->supported ? id : -1;
}

int main(int argc, char **argv) {
    if (argc < 3) return fail("usage: gate_quant_io dequant|quant|info TYPE [in out]", NULL);
    const int id = parse_type(argv[2]);
    if (id < 0) return fail("unknown or unsupported type", argv[2]);
    const mi_type_traits *t = mi_type_get(id);
    if (!strcmp(argv[1], "info")) {
        printf("%s %lld %zu %s\n", t->name, (long long)t->blck_size, t->type_size, mi_type_name(t->vec_dot_type));
        return 0;
    }
    if (argc != 5) return fail("need input and output paths", NULL);
    size_t len;
    void *in = read_all(argv[3], &len);
    if (!in) return fail("cannot read", argv[3]);
    void *out = NULL;
    size_t out_len = 0;
    if (!strcmp(argv[1], "dequant")) {
        if (len % t->type_size) { free(in); return fail("input is not a whole number of blocks", argv[3]); }
        const int64_t n = (int64_t)(len / t->type_size) * t->blck_size;
        out_len = (size_t)n * sizeof(float);
        out = malloc(out_len ? out_len : 1);
        if (out) mi_dequantize_row((mi_type)id, in, out, n);
    } else if (!strcmp(argv[1], "quant")) {
        const int64_t n = (int64_t)(len / sizeof(float));
        if (len % sizeof(float) || n % t->blck_size) {
            free(in);
            return fail("input is not a whole number of blocks of f32", argv[3]);
        }
        out_len = mi_row_size((mi_type)id, n);
        out = malloc(out_len ? out_len : 1);
        if (out) mi_quantize_row((mi_type)id, in, out, n);
    } else {
        free(in);
        return fail("unknown command", argv[1]);
    }
    free(in);
    if (!out) return fail("out of memory", NULL);
    const int ok = write_all(argv[4], out, out_len);
    free(out);
    return ok ? 0 : fail("cannot write", argv[4]);
}

/* `minfer info FILE`: what a GGUF file holds (header, every metadata key, the tensor
 * table, totals and bits per weight), as text or as JSON (--json) that the gates compare
 * with the PyPI gguf reader. Only the header pages of the mapping are touched.
 * `minfer info --settings`: every MINFER_* setting with its value in this environment. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "common/gguf/gguf.h"
#include "common/core/mi_settings.h"

#define INFO_SMALL_ARRAY 64   /* --json: arrays up to this length are listed, longer ones hashed */

static void usage_to(FILE *f) {
    fprintf(f, "usage: minfer info FILE [--json] [--require KEY]...\n"
               "       minfer info --settings [--json]\n"
               "  FILE's header, metadata, tensor table and totals (sizes in KiB/MiB/GiB)\n"
               "  --json           the same as one JSON object\n"
               "  --require KEY    fail (exit 1) unless the metadata holds KEY\n"
               "  --settings       every MINFER_* environment setting, its kind, its value here and\n"
               "                   its meaning (docs/SETTINGS.md)\n");
}

/* a usage error: exit status 2 */
static int usage(void) {
    usage_to(stderr);
    return 2;
}

/* ---- JSON output ---- */
static void json_str(FILE *o, const char *s, size_t n) {
    fputc('"', o);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(o, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) fprintf(o, "\\u%04x", c);
        else fputc(c, o);   /* UTF-8 passes through as bytes */
    }
    fputc('"', o);
}

/* CRC-32 (the zlib one: reflected, polynomial 0xEDB88320), continued across calls so a
 * whole array's encoding is checked without copying it; Python's zlib.crc32 matches. */
static uint32_t crc32_update(uint32_t crc, const void *p, size_t n) {
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    const unsigned char *b = p;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ b[i]) & 255] ^ (crc >> 8);
    return ~crc;
}

static void json_scalar(FILE *o, gguf_vtype t, const unsigned char *p) {
    uint64_t u = 0;
    for (size_t i = gguf_vt_size(t); i-- > 0;) u = u << 8 | p[i];
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64: fprintf(o, "%" PRIu64, u); break;
    case GGUF_VT_INT8: fprintf(o, "%d", (int8_t)u); break;
    case GGUF_VT_INT16: fprintf(o, "%d", (int16_t)u); break;
    case GGUF_VT_INT32: fprintf(o, "%" PRId32, (int32_t)u); break;
    case GGUF_VT_INT64: fprintf(o, "%" PRId64, (int64_t)u); break;
    case GGUF_VT_BOOL: fprintf(o, "%s", u ? "true" : "false"); break;
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64: {
        double x;
        if (t == GGUF_VT_FLOAT32) { uint32_t w = (uint32_t)u; float xf; memcpy(&xf, &w, 4); x = xf; }
        else memcpy(&x, &u, 8);
        if (x != x) fprintf(o, "NaN");
        else if (isinf(x)) fprintf(o, x > 0 ? "Infinity" : "-Infinity");
        else fprintf(o, t == GGUF_VT_FLOAT32 ? "%.9g" : "%.17g", x);
        break;
    }
    default: fprintf(o, "null"); break;
    }
}

/* value of key id (or nested pseudo id): scalars and strings as "value"; arrays as elem,
 * n, and either "values" (short) or "crc32" over the elements' file encoding */
static void json_value(FILE *o, const gguf_file *f, int64_t id) {
    gguf_vtype t = gguf_kv_type(f, id);
    fprintf(o, "\"type\":\"%s\"", gguf_vt_name(t));
    if (t != GGUF_VT_ARRAY) {
        size_t len;
        const void *p = gguf_kv_data(f, id, &len);
        fprintf(o, ",\"value\":");
        if (t == GGUF_VT_STRING) json_str(o, p, len);
        else json_scalar(o, t, p);
        return;
    }
    gguf_vtype et = gguf_arr_type(f, id);
    uint64_t n = gguf_arr_n(f, id);
    fprintf(o, ",\"elem\":\"%s\",\"n\":%" PRIu64, gguf_vt_name(et), n);
    size_t es = gguf_vt_size(et);
    if (n <= INFO_SMALL_ARRAY) {
        fprintf(o, ",\"values\":[");
        for (uint64_t i = 0; i < n; i++) {
            if (i) fputc(',', o);
            if (es) {
                json_scalar(o, et, (const unsigned char *)gguf_arr_data(f, id) + i * es);
            } else if (et == GGUF_VT_STRING) {
                size_t len;
                const char *s = gguf_arr_str(f, id, i, &len);
                json_str(o, s, len);
            } else {
                fputc('{', o);
                json_value(o, f, gguf_arr_elem(f, id, i));
                fputc('}', o);
            }
        }
        fputc(']', o);
        return;
    }
    uint32_t h = 0;
    if (es) {
        h = crc32_update(h, gguf_arr_data(f, id), (size_t)n * es);
    } else if (et == GGUF_VT_STRING) {
        for (uint64_t i = 0; i < n; i++) {
            size_t len;
            const char *s = gguf_arr_str(f, id, i, &len);
            uint64_t l64 = len;   /* little-endian host */
            h = crc32_update(crc32_update(h, &l64, 8), s, len);
        }
    } else {
        fprintf(o, ",\"crc32\":null");   /* long arrays of arrays: count only */
        return;
    }
    fprintf(o, ",\"crc32\":\"%08x\"", h);
}

static void totals(const gguf_file *f, uint64_t *params, uint64_t *bytes) {
    *params = *bytes = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        uint64_t nel = 1;
        for (int d = 0; d < t->n_dims; d++) nel *= (uint64_t)t->ne[d];
        *params += nel;
        *bytes += t->nbytes;
    }
}

static void print_json(FILE *o, const char *path, const gguf_file *f) {
    fprintf(o, "{\"file\":");
    json_str(o, path, strlen(path));
    fprintf(o, ",\"version\":%u,\"alignment\":%zu,\"data_offset\":%zu,\"file_size\":%zu,\"n_kv\":%" PRId64
               ",\"n_tensors\":%" PRId64 ",\n\"kv\":[",
            gguf_version(f), gguf_alignment(f), gguf_data_offset(f), gguf_file_size(f), gguf_n_kv(f), gguf_n_tensors(f));
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        fprintf(o, "%s\n{\"key\":", i ? "," : "");
        const char *k = gguf_kv_key(f, i);
        json_str(o, k, strlen(k));
        fputc(',', o);
        json_value(o, f, i);
        fputc('}', o);
    }
    fprintf(o, "],\n\"tensors\":[");
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        fprintf(o, "%s\n{\"name\":", i ? "," : "");
        json_str(o, t->name, t->name_len);
        fprintf(o, ",\"type\":\"%s\",\"type_id\":%d,\"shape\":[", mi_type_name(t->type), (int)t->type);
        uint64_t nel = 1;
        for (int d = 0; d < t->n_dims; d++) {
            fprintf(o, "%s%" PRId64, d ? "," : "", t->ne[d]);
            nel *= (uint64_t)t->ne[d];
        }
        fprintf(o, "],\"n_elements\":%" PRIu64 ",\"offset\":%" PRIu64 ",\"abs_offset\":%zu,\"nbytes\":%zu}",
                nel, t->offset, gguf_data_offset(f) + (size_t)t->offset, t->nbytes);
    }
    uint64_t params, bytes;
    totals(f, &params, &bytes);
    fprintf(o, "],\n\"totals\":{\"params\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"bpw\":%.6f}}\n", params, bytes,
            params ? 8.0 * (double)bytes / (double)params : 0.0);
}

/* ---- text output ---- */
static void human(char *buf, size_t n, double v, const char *const *units, double step) {
    int u = 0;
    while (v >= step && units[u + 1]) { v /= step; u++; }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f%s", v, units[u]);
}

static void print_text(FILE *o, const char *path, const gguf_file *f) {
    static const char *const count_units[] = {"", "K", "M", "B", "T", NULL};
    static const char *const byte_units[] = {" B", "KiB", "MiB", "GiB", "TiB", NULL};
    char a[32], b[32];
    fprintf(o, "file:      %s\n", path);
    human(b, sizeof b, (double)gguf_file_size(f), byte_units, 1024.0);
    fprintf(o, "gguf:      version %u, alignment %zu, data offset %zu, file size %zu (%s)\n", gguf_version(f),
            gguf_alignment(f), gguf_data_offset(f), gguf_file_size(f), b);
    fprintf(o, "metadata:  %" PRId64 " keys\n", gguf_n_kv(f));
    char val[400];
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        gguf_kv_format(f, i, val, sizeof val);
        fprintf(o, "  %-44s %-4s %s\n", gguf_kv_key(f, i), gguf_vt_name(gguf_kv_type(f, i)), val);
    }
    fprintf(o, "tensors:   %" PRId64 "\n", gguf_n_tensors(f));
    if (gguf_n_tensors(f) > 0)
        fprintf(o, "  %5s %-36s %-5s %-26s %12s %12s\n", "#", "name", "type", "shape", "bytes", "offset");
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        char shape[96];
        size_t l = 0;
        shape[0] = 0;
        for (int d = 0; d < t->n_dims && l < sizeof shape; d++)
            l += (size_t)snprintf(shape + l, sizeof shape - l, "%s%" PRId64, d ? " x " : "", t->ne[d]);
        fprintf(o, "  %5" PRId64 " %-36s %-5s %-26s %12zu %12" PRIu64 "\n", i, t->name, mi_type_name(t->type), shape,
                t->nbytes, t->offset);
    }
    uint64_t params, bytes;
    totals(f, &params, &bytes);
    human(a, sizeof a, (double)params, count_units, 1000.0);
    human(b, sizeof b, (double)bytes, byte_units, 1024.0);
    fprintf(o, "totals:    %" PRIu64 " params (%s), %" PRIu64 " tensor bytes (%s), %.3f bits per weight\n", params, a,
            bytes, b, params ? 8.0 * (double)bytes / (double)params : 0.0);
    /* per-type breakdown: mixes such as Q4_K_M are judged by it */
    for (int ty = 0; ty < MI_TYPE_COUNT; ty++) {
        uint64_t nt = 0, np = 0, nb = 0;
        for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor_info *t = gguf_tensor(f, i);
            if ((int)t->type != ty) continue;
            uint64_t nel = 1;
            for (int d = 0; d < t->n_dims; d++) nel *= (uint64_t)t->ne[d];
            nt++;
            np += nel;
            nb += t->nbytes;
        }
        if (!nt) continue;
        human(a, sizeof a, (double)np, count_units, 1000.0);
        human(b, sizeof b, (double)nb, byte_units, 1024.0);
        fprintf(o, "  %-5s %5" PRIu64 " tensors %12s params %12s\n", mi_type_name(ty), nt, a, b);
    }
}

/* The settings table with this environment's values: text, or JSON
 * {"settings": [{"name", "kind", "value" (null: unset), "meaning"}]}. */
static void print_settings(FILE *o, int json) {
    const int n = mi_settings_count();
    if (json) fprintf(o, "{\"settings\":[");
    else fprintf(o, "MINFER_* settings (docs/SETTINGS.md), with their values in this environment:\n");
    for (int i = 0; i < n; i++) {
        const mi_setting_info *si = mi_setting_at(i);
        const char *v = mi_setting(si->name);
        if (json) {
            fprintf(o, "%s\n{\"name\":\"%s\",\"kind\":\"%s\",\"value\":", i ? "," : "", si->name,
                    mi_setting_kind_name(si->kind));
            if (v) json_str(o, v, strlen(v));
            else fprintf(o, "null");
            fprintf(o, ",\"meaning\":");
            json_str(o, si->meaning, strlen(si->meaning));
            fputc('}', o);
        } else {
            char val[64];
            if (v) snprintf(val, sizeof val, "=%s", v);
            else snprintf(val, sizeof val, "unset");
            fprintf(o, "  %-24s %-6s %-10s %s\n", si->name, mi_setting_kind_name(si->kind), val, si->meaning);
        }
    }
    if (json) fprintf(o, "\n]}\n");
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    int json = 0, settings = 0;
    const char *require[32];
    int n_require = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--settings")) settings = 1;
        else if (!strcmp(argv[i], "--require") && i + 1 < argc && n_require < 32) require[n_require++] = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage_to(stdout);
            return 0;
        }
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "minfer: info: unknown option '%s'\n", argv[i]);
            return usage();
        } else if (!path) path = argv[i];
        else return usage();
    }
    if (settings) {
        if (path || n_require) return usage();
        print_settings(stdout, json);
        if (fflush(stdout) != 0) {
            fprintf(stderr, "minfer: info: cannot write output\n");
            return 1;
        }
        return 0;
    }
    if (!path) return usage();
    gguf_file *f;
    if (gguf_open(path, &f) != MI_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", mi_errmsg());
        for (char *c = msg; *c; c++)   /* one line, whatever the file held */
            if ((unsigned char)*c < 0x20) *c = '?';
        fprintf(stderr, "minfer: %s: %s\n", path, msg);
        return 1;
    }
    for (int i = 0; i < n_require; i++) {
        if (gguf_find_key(f, require[i]) < 0) {
            fprintf(stderr, "minfer: %s: missing required key '%s'\n", path, require[i]);
            gguf_close(f);
            return 1;
        }
    }
    if (json) print_json(stdout, path, f);
    else print_text(stdout, path, f);
    gguf_close(f);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "minfer: info: cannot write output\n");
        return 1;
    }
    return 0;
}

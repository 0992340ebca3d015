/* `minfer quantize IN OUT TYPE`: rewrites a GGUF with its weights in a type mix
 * (q4_k_m, q4_0, q8_0, f16, ...; the per-tensor rule is mi_mix_plan in
 * common/model/shapes.c). Each row is dequantized to F32 and requantized with
 * mi_quantize_row; tensors already in their target type are copied as they are.
 * Metadata is copied; general.file_type is updated. Output is streamed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include "common/core/mi_err.h"
#include "common/core/mi_progress.h"
#include "common/core/mi_fp16.h"
#include "common/gguf/gguf.h"
#include "common/quant/mi_types.h"
#include "common/model/shapes.h"

typedef struct {
    gguf_file *f;
    const gguf_tensor_info **src;
    mi_type *dst_type;
    int64_t n;
    int n_threads;
    mi_progress prog;
} quant_ctx;

static bool is_float_type(mi_type t) { return t == MI_TYPE_F32 || t == MI_TYPE_F16 || t == MI_TYPE_BF16; }

static void row_to_f32(mi_type t, const void *src, float *dst, int64_t n) {
    if (t == MI_TYPE_F32) memcpy(dst, src, (size_t)n * sizeof(float));
    else if (t == MI_TYPE_F16) for (int64_t i = 0; i < n; i++) dst[i] = mi_f16_to_f32(((const uint16_t *)src)[i]);
    else if (t == MI_TYPE_BF16) for (int64_t i = 0; i < n; i++) dst[i] = mi_bf16_to_f32(((const uint16_t *)src)[i]);
    else mi_dequantize_row(t, src, dst, n);
}

static void row_from_f32(mi_type t, const float *src, void *dst, int64_t n) {
    if (t == MI_TYPE_F32) memcpy(dst, src, (size_t)n * sizeof(float));
    else if (t == MI_TYPE_F16) for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = mi_f32_to_f16(src[i]);
    else if (t == MI_TYPE_BF16) for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = mi_f32_to_bf16(src[i]);
    else mi_quantize_row(t, src, dst, n);
}

typedef struct {
    const gguf_tensor_info *ti;
    mi_type dst;
    uint8_t *out;
    int64_t r0, r1;
    int status;      /* 0 ok, 1 out of memory */
} quant_job;

static void *quant_worker(void *arg) {
    quant_job *j = arg;
    int64_t ne0 = j->ti->ne[0];
    size_t src_row = mi_row_size(j->ti->type, ne0), dst_row = mi_row_size(j->dst, ne0);
    float *buf = malloc((size_t)ne0 * sizeof(float));
    if (!buf) { j->status = 1; return NULL; }
    for (int64_t r = j->r0; r < j->r1; r++) {
        row_to_f32(j->ti->type, (const uint8_t *)j->ti->data + (size_t)r * src_row, buf, ne0);
        row_from_f32(j->dst, buf, j->out + (size_t)r * dst_row, ne0);
    }
    free(buf);
    return NULL;
}

static mi_status quant_fill(void *user, int64_t idx, void *dst, size_t nbytes) {
    quant_ctx *c = user;
    if (idx < 0 || idx >= c->n) return mi_err(MI_ERR_INTERNAL, "quantize: fill for unknown tensor %lld", (long long)idx);
    const gguf_tensor_info *ti = c->src[idx];
    mi_type to = c->dst_type[idx];
    int64_t rows = ti->ne[1] * ti->ne[2] * ti->ne[3];
    size_t want = mi_row_size(to, ti->ne[0]) * (size_t)rows;
    if (nbytes != want)
        return mi_err(MI_ERR_INTERNAL, "quantize: %s: writer asks %zu bytes, expected %zu", ti->name, nbytes, want);
    if (to == ti->type) {                   /* already in its target type: copy, no requantization */
        memcpy(dst, ti->data, nbytes);
        return MI_OK;
    }
    int nt = c->n_threads;
    if (nt > rows) nt = (int)rows;
    if (nt < 1) nt = 1;
    quant_job jobs[16];
    pthread_t th[16];
    bool started[16] = {0};
    for (int i = 0; i < nt; i++) {
        jobs[i] = (quant_job){ti, to, dst, rows * i / nt, rows * (i + 1) / nt, 0};
        if (i > 0) started[i] = pthread_create(&th[i], NULL, quant_worker, &jobs[i]) == 0;
    }
    for (int i = 0; i < nt; i++) if (i == 0 || !started[i]) quant_worker(&jobs[i]);
    int bad = 0;
    for (int i = 0; i < nt; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        bad |= jobs[i].status;
    }
    return bad ? mi_err(MI_ERR_NOMEM, "quantize: %s: out of memory for a row buffer", ti->name) : MI_OK;
}

static void quant_progress(void *user, size_t done, size_t total) {
    mi_progress_bytes(&((quant_ctx *)user)->prog, done, total);
}

static void quantize_usage(FILE *f) {
    fprintf(f, "usage: minfer quantize [--pure] [--dry-run] [--threads N] IN.gguf OUT.gguf TYPE\n  TYPE:");
    for (int i = 0; i < mi_mix_count(); i++) fprintf(f, " %s", mi_mix_at(i)->name);
    fprintf(f, "\n  --pure: every 2D weight in TYPE (no q4_k_m layer picks, no Q6_K output)\n"
               "  --dry-run: print the type each tensor would get, write nothing\n");
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3];
    int npos = 0;
    bool pure = false, dry_run = false;
    long nthreads = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--pure")) pure = true;
        else if (!strcmp(argv[i], "--dry-run")) dry_run = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { quantize_usage(stdout); return 0; }
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) nthreads = atol(argv[++i]);
        else if (argv[i][0] == '-' && argv[i][1]) { fprintf(stderr, "quantize: unknown option '%s'\n", argv[i]); return 2; }
        else if (npos < 3) pos[npos++] = argv[i];
        else { fprintf(stderr, "quantize: too many arguments\n"); quantize_usage(stderr); return 2; }
    }
    if (npos != 3) { quantize_usage(stderr); return 2; }
    const mi_mix *mix = mi_mix_find(pos[2]);
    if (!mix) { fprintf(stderr, "quantize: unknown type '%s'\n", pos[2]); quantize_usage(stderr); return 2; }
    if (nthreads < 1) nthreads = 1;
    if (nthreads > 16) nthreads = 16;
    if (!strcmp(pos[0], pos[1])) { fprintf(stderr, "quantize: IN and OUT are the same file\n"); return 2; }

    gguf_file *f = NULL;
    if (gguf_open(pos[0], &f) != MI_OK) { fprintf(stderr, "quantize: %s\n", mi_errmsg()); return 1; }
    int64_t n = gguf_n_tensors(f);
    const gguf_tensor_info **src = calloc((size_t)(n ? n : 1), sizeof *src);
    const char **names = calloc((size_t)(n ? n : 1), sizeof *names);
    int *nd = calloc((size_t)(n ? n : 1), sizeof *nd);
    int64_t (*ne)[4] = calloc((size_t)(n ? n : 1), sizeof *ne);
    mi_type *types = calloc((size_t)(n ? n : 1), sizeof *types);
    gguf_writer *w = NULL;
    int rc = 1;
    if (!src || !names || !nd || !ne || !types) { fprintf(stderr, "quantize: out of memory\n"); goto done; }
    for (int64_t i = 0; i < n; i++) {
        const gguf_tensor_info *ti = gguf_tensor(f, i);
        const mi_type_traits *tr = mi_type_get((int)ti->type);
        if (!tr || (!tr->supported && !is_float_type(ti->type))) {
            fprintf(stderr, "quantize: %s: cannot read type %s\n", ti->name, mi_type_name((int)ti->type));
            goto done;
        }
        src[i] = ti;
        names[i] = ti->name;
        nd[i] = ti->n_dims;
        for (int d = 0; d < 4; d++) ne[i][d] = d < GGUF_MAX_DIMS ? ti->ne[d] : 1;
    }
    mi_mix_plan(mix, pure, n, names, nd, (const int64_t (*)[4])ne, types);
    if (dry_run) {                          /* the plan only: "name type" per tensor */
        for (int64_t i = 0; i < n; i++) printf("%s %s\n", names[i], mi_type_name((int)types[i]));
        rc = 0;
        goto done;
    }

    w = gguf_writer_new();
    if (!w) { fprintf(stderr, "quantize: out of memory\n"); goto done; }
    gguf_w_copy_kv(w, f);
    gguf_w_u32(w, "general.file_type", mix->ftype);
    gguf_w_u32(w, "general.quantization_version", 2);
    size_t total_in = 0, total_out = 0;
    int count[MI_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < n; i++) {
        if (mi_row_size(types[i], ne[i][0]) == 0) {
            fprintf(stderr, "quantize: %s: rows of %lld do not fit type %s\n", names[i], (long long)ne[i][0],
                    mi_type_name((int)types[i]));
            goto done;
        }
        total_in += src[i]->nbytes;
        total_out += mi_row_size(types[i], ne[i][0]) * (size_t)(ne[i][1] * ne[i][2] * ne[i][3]);
        if ((int)types[i] < MI_TYPE_COUNT) count[types[i]]++;
        if (gguf_w_tensor(w, names[i], types[i], nd[i], ne[i], NULL) != i) {
            fprintf(stderr, "quantize: writer refused tensor %s: %s\n", names[i], mi_errmsg());
            goto done;
        }
    }
    fprintf(stderr, "quantize: %s -> %s as %s%s: %lld tensors, %.2f GB -> %.2f GB:", pos[0], pos[1], mix->name,
            pure ? " (pure)" : "", (long long)n, (double)total_in / 1e9, (double)total_out / 1e9);
    for (int t = 0; t < MI_TYPE_COUNT; t++) if (count[t]) fprintf(stderr, " %s x%d", mi_type_name(t), count[t]);
    fprintf(stderr, "\n");
    quant_ctx ctx = {f, src, types, n, (int)nthreads, {0}};
    mi_progress_start(&ctx.prog, "quantize");
    mi_status st = gguf_writer_write(w, pos[1], quant_fill, &ctx, quant_progress);
    const double el = mi_progress_end(&ctx.prog);
    if (st != MI_OK) { fprintf(stderr, "quantize: writing %s: %s\n", pos[1], mi_errmsg()); goto done; }
    fprintf(stderr, "quantize: wrote %s in %.1f s\n", pos[1], el);
    rc = 0;
done:
    if (w) gguf_writer_free(w);
    gguf_close(f);
    free(src); free(names); free(nd); free(ne); free(types);
    return rc;
}

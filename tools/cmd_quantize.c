/* `minfer quantize IN OUT TYPE`: rewrites a GGUF with its weights in a type mix
 * (q4_k_m, q4_0, q8_0, f16, ...; the per-tensor rule is mi_mix_plan in
 * common/model/shapes.c). Each row is dequantized to F32 and requantized with
 * mi_quantize_row; tensors already in their target type are copied as they are.
 * Metadata is copied; general.file_type is updated. Output is streamed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include "common/core/mi_err.h"
#include "common/core/mi_file.h"
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
    const char *in_path;
    char bad[512];      /* the non-finite input value that stopped the write; "" if none */
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
    int status;      /* 0 ok, 1 out of memory, 2 non-finite value at bad_row, bad_col */
    int64_t bad_row, bad_col;
    float bad_val;
} quant_job;

/* Every row goes through F32, also when it is copied unchanged, so that NaN/Inf weights
 * (which would quantize into garbage blocks and run as silent nonsense) are caught. */
static void *quant_worker(void *arg) {
    quant_job *j = arg;
    int64_t ne0 = j->ti->ne[0];
    size_t src_row = mi_row_size(j->ti->type, ne0), dst_row = mi_row_size(j->dst, ne0);
    float *buf = malloc((size_t)ne0 * sizeof(float));
    if (!buf) { j->status = 1; return NULL; }
    for (int64_t r = j->r0; r < j->r1 && !j->status; r++) {
        const uint8_t *in = (const uint8_t *)j->ti->data + (size_t)r * src_row;
        row_to_f32(j->ti->type, in, buf, ne0);
        for (int64_t i = 0; i < ne0; i++) {
            if (!isfinite(buf[i])) {
                *j = (quant_job){j->ti, j->dst, j->out, j->r0, j->r1, 2, r, i, buf[i]};
                break;
            }
        }
        if (j->status) break;
        if (j->dst == j->ti->type) memcpy(j->out + (size_t)r * dst_row, in, dst_row);
        else row_from_f32(j->dst, buf, j->out + (size_t)r * dst_row, ne0);
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
    int nt = c->n_threads;
    if (nt > rows) nt = (int)rows;
    if (nt < 1) nt = 1;
    quant_job jobs[16];
    pthread_t th[16];
    bool started[16] = {0};
    for (int i = 0; i < nt; i++) {
        jobs[i] = (quant_job){ti, to, dst, rows * i / nt, rows * (i + 1) / nt, 0, 0, 0, 0.0f};
        if (i > 0) started[i] = pthread_create(&th[i], NULL, quant_worker, &jobs[i]) == 0;
    }
    for (int i = 0; i < nt; i++) if (i == 0 || !started[i]) quant_worker(&jobs[i]);
    int bad = 0;
    for (int i = 0; i < nt; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        bad |= jobs[i].status;
    }
    for (int i = 0; i < nt; i++) {       /* the first bad row in file order */
        if (jobs[i].status != 2) continue;
        snprintf(c->bad, sizeof c->bad, "%s: tensor '%s' holds a non-finite value (%s) at row %lld, column %lld",
                 c->in_path, ti->name, isnan(jobs[i].bad_val) ? "NaN" : jobs[i].bad_val > 0 ? "+Inf" : "-Inf",
                 (long long)jobs[i].bad_row, (long long)jobs[i].bad_col);
        return mi_err(MI_ERR_FORMAT, "%s", c->bad);
    }
    return bad ? mi_err(MI_ERR_NOMEM, "quantize: %s: out of memory for a row buffer", ti->name) : MI_OK;
}

static void quant_progress(void *user, size_t done, size_t total) {
    mi_progress_bytes(&((quant_ctx *)user)->prog, done, total);
}

/* Rows that do not fit the block of the type the mix wants make mi_mix_fallback pick
 * another type. What was wanted is the plan for rows that fit every block (ne0 * 256);
 * the user is told, since such a file is bigger or less uniform than the mix name says. */
static void fallback_notice(const mi_mix *mix, bool pure, int64_t n, const char *const *names, const int *nd,
                            const int64_t (*ne)[4], const mi_type *types) {
    int64_t (*wide)[4] = malloc((size_t)(n ? n : 1) * sizeof *wide);
    mi_type *want = malloc((size_t)(n ? n : 1) * sizeof *want);
    enum { MAXP = 16 };
    mi_type pf[MAXP], pt[MAXP];
    int pc[MAXP], np = 0;
    int64_t nfb = 0, first = -1;
    if (!wide || !want) goto out;
    for (int64_t i = 0; i < n; i++) {
        for (int d = 0; d < 4; d++) wide[i][d] = ne[i][d];
        if (ne[i][0] <= INT64_MAX / 256) wide[i][0] = ne[i][0] * 256;
    }
    mi_mix_plan(mix, pure, n, names, nd, (const int64_t (*)[4])wide, want);
    for (int64_t i = 0; i < n; i++) {
        if (want[i] == types[i]) continue;
        if (first < 0) first = i;
        nfb++;
        int k = 0;
        while (k < np && !(pf[k] == want[i] && pt[k] == types[i])) k++;
        if (k == np && np < MAXP) { pf[np] = want[i]; pt[np] = types[i]; pc[np++] = 0; }
        if (k < np) pc[k]++;
    }
    if (!nfb) goto out;
    fprintf(stderr, "quantize: note: %lld of %lld tensors fall back to other types (their rows do not fit the "
            "wanted type's blocks, e.g. %s with rows of %lld):", (long long)nfb, (long long)n, names[first],
            (long long)ne[first][0]);
    for (int k = 0; k < np; k++)
        fprintf(stderr, "%s %s->%s x%d", k ? "," : "", mi_type_name((int)pf[k]), mi_type_name((int)pt[k]), pc[k]);
    fprintf(stderr, "\n");
out:
    free(wide);
    free(want);
}

/* Quantizing a quantized file stacks a second rounding error on the first. */
static void requant_notice(const char *in, int64_t n, const gguf_tensor_info *const *src, const mi_type *types) {
    int from[MI_TYPE_COUNT] = {0};
    int64_t nreq = 0;
    for (int64_t i = 0; i < n; i++) {
        if (is_float_type(src[i]->type) || types[i] == src[i]->type) continue;
        nreq++;
        if ((int)src[i]->type < MI_TYPE_COUNT) from[src[i]->type]++;
    }
    if (!nreq) return;
    fprintf(stderr, "quantize: note: %s is already quantized; %lld tensors are requantized from", in, (long long)nreq);
    for (int t = 0, k = 0; t < MI_TYPE_COUNT; t++)
        if (from[t]) fprintf(stderr, "%s %s x%d", k++ ? "," : "", mi_type_name(t), from[t]);
    fprintf(stderr, ", which adds a second rounding error to the first; quantize the F32/F16/BF16 original "
            "where you have it\n");
}

static void quantize_usage(FILE *f) {
    fprintf(f, "usage: minfer quantize [--pure] [--dry-run] [--threads N] IN.gguf OUT.gguf TYPE\n  TYPE:");
    for (int i = 0; i < mi_mix_count(); i++) fprintf(f, " %s", mi_mix_at(i)->name);
    fprintf(f, "\n  --pure: every 2D weight in TYPE (no q4_k_m layer picks, no Q6_K output)\n"
               "  --dry-run: print the type each tensor would get, write nothing\n"
               "  OUT is written as .OUT.tmp.XXXXXX beside it and renamed into place when complete;\n"
               "  it must be another file than IN. NaN/Inf weights in IN are refused.\n");
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
    /* by device and inode: a symbolic link, a hard link or "dir/.." names the same file */
    if (!strcmp(pos[0], pos[1]) || mi_file_same(pos[0], pos[1])) {
        fprintf(stderr, "quantize: %s and %s are the same file; write the output to another path\n", pos[0], pos[1]);
        return 2;
    }

    gguf_file *f = NULL;
    if (gguf_open(pos[0], &f) != MI_OK) { fprintf(stderr, "quantize: %s: %s\n", pos[0], mi_errmsg()); return 1; }
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
    fallback_notice(mix, pure, n, names, nd, (const int64_t (*)[4])ne, types);
    requant_notice(pos[0], n, src, types);
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
    char sz_in[32], sz_out[32];
    fprintf(stderr, "quantize: %s -> %s as %s%s: %lld tensors, %s -> %s:", pos[0], pos[1], mix->name,
            pure ? " (pure)" : "", (long long)n, mi_fmt_bytes(sz_in, sizeof sz_in, (double)total_in),
            mi_fmt_bytes(sz_out, sizeof sz_out, (double)total_out));
    for (int t = 0; t < MI_TYPE_COUNT; t++) if (count[t]) fprintf(stderr, " %s x%d", mi_type_name(t), count[t]);
    fprintf(stderr, "\n");
    quant_ctx ctx = {f, src, types, n, (int)nthreads, {0}, pos[0], ""};
    mi_progress_start(&ctx.prog, "quantize");
    mi_status st = gguf_writer_write(w, pos[1], quant_fill, &ctx, quant_progress);
    const double el = mi_progress_end(&ctx.prog);
    if (st != MI_OK && ctx.bad[0]) {
        fprintf(stderr, "quantize: %s; refusing to quantize NaN/Inf weights (the model is broken); nothing written to %s\n",
                ctx.bad, pos[1]);
        goto done;
    }
    if (st != MI_OK) { fprintf(stderr, "quantize: writing %s: %s\n", pos[1], mi_errmsg()); goto done; }
    fprintf(stderr, "quantize: wrote %s in %.1f s\n", pos[1], el);
    rc = 0;
done:
    if (w) gguf_writer_free(w);
    gguf_close(f);
    free(src); free(names); free(nd); free(ne); free(types);
    return rc;
}

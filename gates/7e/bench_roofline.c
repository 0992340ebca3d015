/* The one-token matmul against the memory roofline, kernel by kernel: for every weight shape
 * of a decode step of the 7B (Q4_K_M) and the 0.5B (Q4_0), every candidate of the CUDA
 * dispatch that takes the node (MATMUL, and FFN_SWIGLU for the fused gate/up) is first
 * checked against the CPU reference (NMSE <= 1e-6, every output written, a repeat bitwise
 * equal; a kernel on f16 tensor cores, whose activations are rounded to f16 instead of the
 * CPU's 8-bit codes, within the quantized matmul tier's 1e-4 of docs/NUMERICS.md) and only
 * then timed alone: CUDA events around a run of back-to-back calls, each on
 * its own copy of the weights (copies enough for 256 MB, so no call finds its weights in the
 * 60 MB L2, as in a decode step, where every weight is read once), per call the median of 20
 * runs after 3 warm-ups. Prints per kernel µs, GB/s of weight bytes and the fraction of the HBM read rate
 * (measured first by a plain streaming kernel over 2 GB, read_rate.cu; --peak-gbs G instead
 * sets it); one JSON line each to
 * --json PATH. Not a gate (run_device_gates.sh runs gate_* only).
 * With --n N (2..64) every node has N rows instead of one (a batch's decode step: 8b's b3 and b1
 * against 7e's int8 and f16 kernels); the fused FFN shapes are left out there, and the CPU
 * reference runs its rows on threads.
 * --type T (a type name, "Q6_K"): only the shapes of that weight type.
 *   usage: bench_roofline [--json PATH] [--peak-gbs G] [--reps R] [--n N] [--type T] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include "gates/gate_util.h"
#include "gates/7e/dev7e.h"
#include "phase7a_skeleton/cuda_backend.h"
#include "common/core/mi_canon.h"
#include "common/graph/graph.h"

typedef struct {
    const char *model, *tensor;
    mi_type type;
    int64_t K, M;
    bool ffn;   /* gate and up, fused: two weights of K x M */
} shape;

/* the decode step's weights (per layer once; the output head once per step) */
static const shape k_shapes[] = {
    {"7B Q4_K_M", "attn_q / attn_output", MI_TYPE_Q4_K, 3584, 3584, false},
    {"7B Q4_K_M", "attn_k", MI_TYPE_Q4_K, 3584, 512, false},
    {"7B Q4_K_M", "attn_v (Q6_K layers)", MI_TYPE_Q6_K, 3584, 512, false},
    {"7B Q4_K_M", "ffn_gate / ffn_up", MI_TYPE_Q4_K, 3584, 18944, false},
    {"7B Q4_K_M", "ffn_gate + ffn_up fused", MI_TYPE_Q4_K, 3584, 18944, true},
    {"7B Q4_K_M", "ffn_down (Q4_K layers)", MI_TYPE_Q4_K, 18944, 3584, false},
    {"7B Q4_K_M", "ffn_down (Q6_K layers)", MI_TYPE_Q6_K, 18944, 3584, false},
    {"7B Q4_K_M", "output", MI_TYPE_Q6_K, 3584, 152064, false},
    {"0.5B Q4_0", "attn_q / attn_output", MI_TYPE_Q4_0, 896, 896, false},
    {"0.5B Q4_0", "attn_k / attn_v", MI_TYPE_Q4_0, 896, 128, false},
    {"0.5B Q4_0", "ffn_gate / ffn_up", MI_TYPE_Q4_0, 896, 4864, false},
    {"0.5B Q4_0", "ffn_gate + ffn_up fused", MI_TYPE_Q4_0, 896, 4864, true},
    {"0.5B Q4_0", "ffn_down", MI_TYPE_Q4_0, 4864, 896, false},
    {"0.5B Q4_0", "output", MI_TYPE_Q8_0, 896, 151936, false},
};

#define MAX_COPIES 32
#define COPY_BYTES ((size_t)256 << 20)   /* over 4x the L2: a copy is evicted before its next call */

/* one timed run: the kernel once on each copy of the weights, back to back */
typedef struct {
    mi_cuda_ctx *c;
    const mi_cuda_kernel *k;
    mi_tensor *node, *w, *w2;
    void *wcopy[MAX_COPIES], *w2copy[MAX_COPIES];
    int ncopy;
    void *ws;
} call_ctx;

static mi_status call_kernel(cudaStream_t S, const void *p) {
    (void)S;   /* the kernel enqueues on the backend's stream, which is S */
    const call_ctx *a = p;
    mi_status st = MI_OK;
    for (int i = 0; i < a->ncopy && st == MI_OK; i++) {
        a->w->data = a->wcopy[i];
        if (a->w2) a->w2->data = a->w2copy[i];
        st = a->k->run(a->c, a->node, a->ws);
    }
    a->w->data = a->wcopy[0];
    if (a->w2) a->w2->data = a->w2copy[0];
    return st;
}

/* CPU reference of the node: the matmul (N rows over threads), or silu(gate) * up for the fused FFN */
static void reference(const shape *sh, const uint8_t *w, const uint8_t *w2, const float *x, float *y, int N) {
    if (N > 1) {
        cpu_matmul_par(sh->type, w, x, NULL, y, sh->K, sh->M, N);
        return;
    }
    cpu_matmul(sh->type, w, x, NULL, y, sh->K, sh->M, 1);
    if (!sh->ffn) return;
    float *up = malloc((size_t)sh->M * 4);
    cpu_matmul(sh->type, w2, x, NULL, up, sh->K, sh->M, 1);
    for (int64_t i = 0; i < sh->M; i++) y[i] = mi_canon_swiglu(y[i], up[i]);
    free(up);
}

typedef struct {
    const char *json;
    double peak_gbs;
    int reps, n;
    char gpu[256], commit[64], date[32];
} bench_opts;

/* validate, then time, one kernel on one node; prints its row, appends its record */
static void ladder_row(call_ctx *a, const shape *sh, const float *ref, size_t wbytes, const bench_opts *o, FILE *jf) {
    mi_cuda_ctx *c = a->c;
    const mi_cuda_kernel *k = a->k;
    const mi_tensor *node = a->node;
    const size_t ny = (size_t)sh->M * (size_t)o->n;
    const size_t wsb = k->workspace ? k->workspace(node) : 0;
    void *ws = dev_poison(wsb ? wsb : 256);
    float *got = malloc(ny * 4), *got2 = malloc(ny * 4);
    cudaStream_t S = (cudaStream_t)mi_cuda_stream(c);
    CK(cudaMemset(node->data, 0xFF, ny * 4));
    mi_status st = k->run(c, node, ws);
    if (st == MI_OK) dev_down_on(S, got, node->data, ny * 4);
    if (st == MI_OK) {
        CK(cudaMemset(node->data, 0xFF, ny * 4));
        st = k->run(c, node, ws);
    }
    if (st == MI_OK) dev_down_on(S, got2, node->data, ny * 4);
    double nmse = st == MI_OK ? gu_nmse(got, ref, ny) : -1;
    const bool rep = st == MI_OK && memcmp(got, got2, ny * 4) == 0;
    const double bound = strstr(k->name, "f16 tensor cores") ? 1e-4 : 1e-6;
    const bool valid = st == MI_OK && nmse <= bound && rep;
    float ms = -1;
    if (valid) {
        a->ws = ws;
        ms = dev_time_median(S, 3, o->reps, call_kernel, a, &st);
        if (ms > 0) ms /= (float)a->ncopy;
    }
    const double us = ms * 1e3, gbs = ms > 0 ? (double)wbytes / (ms * 1e-3) / 1e9 : 0;
    if (!valid)
        printf("| %s | %s | %s | %s [%s] | INVALID: %s | | |\n", sh->model, sh->tensor, mi_type_name(sh->type), k->name,
               k->items ? k->items : "-",
               st != MI_OK ? mi_errmsg() : !rep ? "repeat differs" : bound > 1e-6 ? "nmse over 1e-4" : "nmse over 1e-6");
    else
        printf("| %s | %s | %s | %s [%s] | %.1f | %.0f | %.0f%% |\n", sh->model, sh->tensor, mi_type_name(sh->type),
               k->name, k->items ? k->items : "-",
               us, gbs, 100.0 * gbs / o->peak_gbs);
    fflush(stdout);
    if (jf)
        fprintf(jf,
                "{\"bench\":\"roofline\",\"model\":\"%s\",\"tensor\":\"%s\",\"type\":\"%s\",\"K\":%lld,\"M\":%lld,"
                "\"N\":%d,\"copies\":%d,\"fused_ffn\":%s,\"kernel\":\"%s\",\"items\":\"%s\",\"valid\":%s,\"nmse\":%.3g,\"us\":%.3f,"
                "\"weight_bytes\":%zu,\"gb_s\":%.1f,\"peak_gb_s\":%.0f,\"roofline_frac\":%.4f,\"gpu\":\"%s\","
                "\"commit\":\"%s\",\"date\":\"%s\"}\n",
                sh->model, sh->tensor, mi_type_name(sh->type), (long long)sh->K, (long long)sh->M, o->n, a->ncopy,
                sh->ffn ? "true" : "false", k->name, k->items ? k->items : "", valid ? "true" : "false", nmse,
                valid ? us : 0.0, wbytes, gbs, o->peak_gbs, gbs / o->peak_gbs, o->gpu, o->commit, o->date);
    free(got);
    free(got2);
    cudaFree(ws);
}

/* every candidate of the node's op that accepts it, in dispatch order */
static void ladder_shape(mi_cuda_ctx *c, const shape *sh, unsigned long long *seed, const bench_opts *o, FILE *jf) {
    size_t wb = 0, wb2 = 0;
    uint8_t *w = gu_make_weights(seed, sh->type, sh->K, sh->M, 1.0f, &wb);
    uint8_t *w2 = sh->ffn ? gu_make_weights(seed, sh->type, sh->K, sh->M, 1.0f, &wb2) : NULL;
    const int N = o->n;
    float *x = gu_rand_f32(seed, (size_t)sh->K * N, -1.f, 1.f), *ref = malloc((size_t)sh->M * N * 4);
    reference(sh, w, w2, x, ref, N);
    void *wbase, *w2base, *xbase;   /* dev_up_at's bases: offset 0, so the data pointers */
    mi_tensor tw, tw2, tx, node;
    const int64_t wne[2] = {sh->K, sh->M}, xne[2] = {sh->K, N}, yne[2] = {sh->M, N};
    tensor_init(&tw, "w", sh->type, 2, wne);
    tensor_init(&tw2, "w2", sh->type, 2, wne);
    tensor_init(&tx, "x", MI_TYPE_F32, 2, xne);
    tensor_init(&node, "y", MI_TYPE_F32, 2, yne);
    call_ctx a = {c, NULL, &node, &tw, w2 ? &tw2 : NULL, {0}, {0}, 0, NULL};
    a.ncopy = (int)((COPY_BYTES + wb + wb2 - 1) / (wb + wb2));
    if (a.ncopy > MAX_COPIES) a.ncopy = MAX_COPIES;
    for (int i = 0; i < a.ncopy; i++) {
        a.wcopy[i] = dev_up_at(w, wb, 0, &wbase);
        if (w2) a.w2copy[i] = dev_up_at(w2, wb2, 0, &w2base);
    }
    tw.data = a.wcopy[0];
    if (w2) tw2.data = a.w2copy[0];
    tx.data = dev_up_at(x, (size_t)sh->K * N * 4, 0, &xbase);
    node.data = dev_poison((size_t)sh->M * N * 4);
    node.op = sh->ffn ? MI_OP_FFN_SWIGLU : MI_OP_MATMUL;
    node.src[0] = &tw;
    node.src[1] = sh->ffn ? &tw2 : &tx;
    node.src[2] = sh->ffn ? &tx : NULL;
    const mi_cuda_kernel *ks[64];   /* above the dispatch's candidates per op: every one is measured */
    int nk = mi_cuda_kernels(node.op, ks, 64);
    if (nk > 64) nk = 64;
    int taken = 0;
    for (int i = 0; i < nk; i++) {
        if (!ks[i]->supports(&node)) continue;
        a.k = ks[i];
        ladder_row(&a, sh, ref, wb + wb2, o, jf);
        taken++;
    }
    if (!taken) printf("| %s | %s | %s | (no candidate takes this node) | | | |\n", sh->model, sh->tensor,
                       mi_type_name(sh->type));
    free(w);
    free(w2);
    free(x);
    free(ref);
    for (int i = 0; i < a.ncopy; i++) {
        cudaFree(a.wcopy[i]);
        if (w2) cudaFree(a.w2copy[i]);
    }
    cudaFree(xbase);
    cudaFree(node.data);
}

int main(int argc, char **argv) {
    bench_opts o = {NULL, 0.0, 20, 1, "", "", ""};
    const char *only_type = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) o.json = argv[++i];
        else if (!strcmp(argv[i], "--peak-gbs") && i + 1 < argc) o.peak_gbs = atof(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) o.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) o.n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--type") && i + 1 < argc) only_type = argv[++i];
        else {
            fprintf(stderr, "usage: bench_roofline [--json PATH] [--peak-gbs G] [--reps R (1..32)] [--n N (1..64)] "
                            "[--type T]\n");
            return 2;
        }
    }
    if (o.peak_gbs < 0 || o.reps < 1 || o.reps > 32 || o.n < 1 || o.n > 64) {
        fprintf(stderr, "bench_roofline: --peak-gbs must be > 0 (unset: measured), --reps 1..32 and --n 1..64\n");
        return 2;
    }
    mi_phases_install();
    mi_backend *be = NULL;
    if (mi_cuda_backend_new(0, &be) != MI_OK) {
        printf("skipped: no CUDA device (%s)\n", mi_errmsg());
        return 0;
    }
    mi_cuda_ctx *c = mi_cuda_ctx_of(be);
    snprintf(o.gpu, sizeof o.gpu, "%s", mi_cuda_props(c)->name);
    const char *cm = getenv("MINFER_COMMIT");
    snprintf(o.commit, sizeof o.commit, "%s", cm && *cm ? cm : "unknown");
    time_t now = time(NULL);
    strftime(o.date, sizeof o.date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    FILE *jf = o.json ? fopen(o.json, "a") : NULL;
    if (o.json && !jf) {
        fprintf(stderr, "bench_roofline: cannot append to '%s'\n", o.json);
        be->iface->destroy(be);
        return 1;
    }
    if (o.peak_gbs == 0) {   /* the ceiling measured on this device, now */
        o.peak_gbs = dev7e_read_rate_gbs((size_t)2 << 30, 9);
        if (o.peak_gbs <= 0) {
            fprintf(stderr, "bench_roofline: the read-rate kernel did not run: %s\n", cudaGetErrorString(cudaGetLastError()));
            if (jf) fclose(jf);
            be->iface->destroy(be);
            return 1;
        }
        printf("HBM read rate measured: %.0f GB/s (a plain streaming kernel over 2 GB, median of 9)\n", o.peak_gbs);
    }
    printf("matmul of %d row%s, each kernel alone, against %.0f GB/s of weights (%s)\n", o.n, o.n > 1 ? "s" : "",
           o.peak_gbs, o.gpu);
    printf("| model | tensor | type | kernel | us | GB/s | of roofline |\n| --- | --- | --- | --- | ---: | ---: | ---: |\n");
    unsigned long long seed = 0x8a;
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++)
        if ((o.n == 1 || !k_shapes[i].ffn) && (!only_type || !strcmp(only_type, mi_type_name(k_shapes[i].type))))
            ladder_shape(c, &k_shapes[i], &seed, &o, jf);
    if (jf) fclose(jf);
    be->iface->destroy(be);
    return 0;
}

/* gates/7e/dev7e.h: device buffers and copies for the 7e gate's checks, the CPU scalar matmul
 * reference, tolerance and median helpers, and a per-call kernel timing. */
#include <pthread.h>
#include <stdbool.h>
#include <math.h>
#include "gates/7e/dev7e.h"

void *dev_up_at(const void *h, size_t n, size_t off, void **base) {
    char *d = NULL;
    CK(cudaMalloc((void **)&d, n + off + 1));
    CK(cudaMemcpy(d + off, h, n, cudaMemcpyHostToDevice));
    *base = d;
    return d + off;
}

void *dev_poison(size_t n) {
    void *d = NULL;
    CK(cudaMalloc(&d, n ? n : 1));
    CK(cudaMemset(d, 0xFF, n ? n : 1));
    return d;
}

void dev_down_on(cudaStream_t s, void *h, const void *d, size_t n) {
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}

mi_status dev_read_back(cudaStream_t s, float *h, const float *d, size_t n) {
    return cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess &&
                   cudaStreamSynchronize(s) == cudaSuccess
               ? MI_OK
               : mi_err(MI_ERR_DEVICE, "copy back");
}

size_t first_bad(const float *got, const float *want, size_t n, double tol_rel, double floor) {
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= tol_rel * (fabs((double)want[i]) + floor))) return i;
    }
    return (size_t)-1;
}

void cpu_matmul(mi_type t, const uint8_t *w, const float *x, const float *bias, float *y, int64_t K, int64_t M,
                int64_t N) {
    const mi_type vt = mi_type_get(t)->vec_dot_type;
    mi_vec_dot_fn dot = mi_get_vec_dot(t, MI_ISA_SCALAR);
    mi_quantize_fn qa = mi_get_quantize_act(vt, MI_ISA_SCALAR);
    const size_t arow = mi_row_size(vt, K), wrb = mi_row_size(t, K);
    uint8_t *aq = (uint8_t *)malloc(arow * (size_t)N);
    for (int64_t n = 0; n < N; n++) qa(x + n * K, aq + arow * (size_t)n, K);
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            float s;
            dot(K, &s, w + wrb * (size_t)m, aq + arow * (size_t)n);
            y[n * M + m] = bias ? s + bias[m] : s;
        }
    free(aq);
}

typedef struct {
    mi_type t;
    const uint8_t *w;
    const float *x, *bias;
    float *y;
    int64_t K, M, n0, n1;
} mm_part;
static void *mm_part_run(void *p) {
    const mm_part *a = p;
    for (int64_t n = a->n0; n < a->n1; n++) cpu_matmul(a->t, a->w, a->x + n * a->K, a->bias, a->y + n * a->M, a->K, a->M, 1);
    return NULL;
}

void cpu_matmul_par(mi_type t, const uint8_t *w, const float *x, const float *bias, float *y, int64_t K, int64_t M,
                    int64_t N) {
    enum { MAXT = 64 };
    pthread_t th[MAXT];
    mm_part parts[MAXT];
    bool started[MAXT];
    const int64_t nt = N < MAXT ? N : MAXT;
    for (int64_t i = 0; i < nt; i++) {
        parts[i] = (mm_part){t, w, x, bias, y, K, M, N * i / nt, N * (i + 1) / nt};
        started[i] = pthread_create(&th[i], NULL, mm_part_run, &parts[i]) == 0;
        if (!started[i]) mm_part_run(&parts[i]);
    }
    for (int64_t i = 0; i < nt; i++)
        if (started[i]) pthread_join(th[i], NULL);
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

float median_f(float *v, int n) {
    qsort(v, (size_t)n, sizeof v[0], cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

float dev_time_median(cudaStream_t S, int warm, int reps, dev_call_fn call, const void *ctx, mi_status *st) {
    float ms[32];
    if (reps > 32) reps = 32;
    *st = MI_OK;
    for (int i = 0; i < warm && *st == MI_OK; i++) *st = call(S, ctx);
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < reps && *st == MI_OK; i++) {
        CK(cudaEventRecord(a, S));
        *st = call(S, ctx);
        CK(cudaEventRecord(b, S));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms[i], a, b));
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return *st == MI_OK ? median_f(ms, reps) : -1.0f;
}

bool dev_gate_start(gu_run *r, const char *gate, cudaStream_t *stream) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        (void)cudaGetLastError();
        printf("skipped: no CUDA device\n");
        gu_skip_named(r, gate, "skipped: no CUDA device");
        return false;
    }
    struct cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    snprintf(r->gpu, sizeof r->gpu, "%s", p.name);
    int drv = 0;
    cudaDriverGetVersion(&drv);
    snprintf(r->driver, sizeof r->driver, "cuda %d.%d", drv / 1000, (drv % 1000) / 10);
    CK(cudaStreamCreate(stream));
    return true;
}

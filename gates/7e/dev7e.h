/* Helpers the 7e device gates share (gate_7e.c and the *_check.c units): a CUDA call check,
 * device buffers (copied in at an offset, NaN-poisoned), copies back, the CPU scalar matmul
 * reference, the first element out of tolerance, a float median and a kernel timing. Plain C;
 * definitions: dev7e.c (in $(BUILD)/libgatesupport.a). */
#ifndef GATE_DEV7E_H
#define GATE_DEV7E_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include "gates/gate_util.h"
#include "common/core/mi_err.h"
#include "common/quant/mi_types.h"

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); exit(2); } } while (0)

/* device copy of h (n bytes) at byte offset `off` of its allocation *base (unaligned tensors) */
void *dev_up_at(const void *h, size_t n, size_t off, void **base);
/* n bytes of 0xFF on the device: NaN as floats, so an output a kernel never writes shows */
void *dev_poison(size_t n);
/* wait for stream s, then copy n bytes of d to h */
void dev_down_on(cudaStream_t s, void *h, const void *d, size_t n);
/* the same as a status (MI_ERR_DEVICE with a message on a failed copy), for a gate that reports
 * the failure as a failed test and goes on */
mi_status dev_read_back(cudaStream_t s, float *h, const float *d, size_t n);
/* first i with |got - want| > tol_rel * (|want| + floor) (NaN included), or (size_t)-1 */
size_t first_bad(const float *got, const float *want, size_t n, double tol_rel, double floor);
/* CPU reference: y[n*M+m] = scalar dot(W row m, quantized x row n) (+ bias); W (M rows, K), x (N, K) */
void cpu_matmul(mi_type t, const uint8_t *w, const float *x, const float *bias, float *y, int64_t K, int64_t M,
                int64_t N);
/* cpu_matmul with its N rows spread over up to 64 threads (the same values: each row alone) */
void cpu_matmul_par(mi_type t, const uint8_t *w, const float *x, const float *bias, float *y, int64_t K, int64_t M,
                    int64_t N);
/* median of n timings (sorts v in place) */
float median_f(float *v, int n);
/* GB/s a plain streaming kernel reads from a device buffer of `bytes` (the median of `passes`,
 * at most 32); 0 when it could not run (read_rate.cu) */
double dev7e_read_rate_gbs(size_t bytes, int passes);

/* A device gate's start: no CUDA device records "skipped: no CUDA device" under the gate's
 * name and returns false (the caller then returns gu_finish); else notes the GPU and driver in
 * the run's summary, creates *stream and returns true. */
bool dev_gate_start(gu_run *r, const char *gate, cudaStream_t *stream);

/* One call of the code under test, on stream S with the arguments in ctx (dev_time_median) */
typedef mi_status (*dev_call_fn)(cudaStream_t S, const void *ctx);

/* median ms of `reps` (<= 32) calls, each alone between two events on S, after `warm` untimed
 * ones; on a failed call, *st is its status and the result -1 */
float dev_time_median(cudaStream_t S, int warm, int reps, dev_call_fn call, const void *ctx, mi_status *st);

#endif

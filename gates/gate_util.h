/* Bookkeeping shared by the device gate programs (gates/7a ... gates/7e): per-test
 * status (pass|fail|skip), detail and time; the closing line "N passed, N failed,
 * N skipped"; and the JSON summary of DESIGN.md "Record shapes", written to the path
 * in MINFER_GATE_JSON. Also the seeded test data and comparisons the gates share.
 * Definitions: gates/support/gate_util.c (in $(BUILD)/libgatesupport.a). */
#ifndef MI_GATE_UTIL_H
#define MI_GATE_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "common/quant/mi_types.h"

typedef struct {
    char name[160];
    const char *status;        /* "pass" | "fail" | "skip" */
    char detail[1024];
    double ms;
} gu_test;

typedef struct {
    const char *gate, *phase;
    char gpu[256], driver[64];
    gu_test *tests;            /* [n], grown by doubling up to cap */
    int n, cap;
    int passed, failed, skipped;
    double t_begin;            /* of the running test */
    char cur[160];
    int open;
} gu_run;

/* ---- the run: one line per test, then the summary ---- */
double gu_now_ms(void);                                   /* CLOCK_MONOTONIC, ms */
void gu_init(gu_run *r, const char *gate, const char *phase);
/* Start timing a test; end it with gu_pass / gu_fail / gu_skip. */
/* Start test `name`; returns whether MINFER_GATE_ONLY selects it (a case that is not selected
 * should return before doing its work: its result would not be recorded). */
int gu_begin(gu_run *r, const char *name);
void gu_vrecord(gu_run *r, const char *status, const char *fmt, va_list ap);
void gu_pass(gu_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gu_fail(gu_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gu_skip(gu_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Report a named test as skipped without running it. */
void gu_skip_named(gu_run *r, const char *name, const char *why);
/* MINFER_GATE_ONLY=a,b: run only the named tests (a device call that re-checks one
 * thing; a name ending in '*' stands for every test that begins with it); unset: everything. A test left out is not recorded at all, neither passed
 * nor skipped, so a partial run's JSON never reads as the whole gate. */
int gu_selected(const char *name);
/* an environment switch of a gate (MINFER_GATE_NO_7B=1 ...): set, not empty and not "0" */
int gu_env_on(const char *name);
/* Print the closing line, write the JSON summary, return the exit status (1 on a failure). */
int gu_finish(gu_run *r);
/* SIGSEGV, SIGBUS, SIGABRT (and SIGTERM, sent by a timeout, when asked) end in a summary
 * that names the running test as failed. */
void gu_catch_crashes(gu_run *r, const char *gate, int with_sigterm);

/* ---- record fields ---- */
void gu_json_str(FILE *f, const char *s);                 /* s as a quoted JSON string */
/* The commit: MINFER_COMMIT if set (device.sh sets it), else git, else "unknown". */
void gu_commit(char *buf, size_t n);
/* Now in UTC, ISO 8601 (the "date" of every JSON record). */
void gu_utc_now(char *buf, size_t n);
/* BUILD/minfer for a gate at BUILD/gates/<phase>/<gate> (MINFER_BIN overrides). */
void gu_minfer_path(const char *argv0, char *buf, size_t n);
/* The synthetic model <shape> <type> a device gate runs: the file MINFER_GATE_MODELS (a colon
 * list; device.sh names them <shape>-<type>.gguf) names, else the copy a gate left in /tmp
 * (/tmp/minfer-<7b|7c|7e|8a>-<shape>-<type>.gguf: the files are seeded, so any copy is the
 * same), else `minfer synth` into /tmp/minfer-<own>-<shape>-<type>.gguf. 0 with path set;
 * 1 when no copy exists and synth failed. */
int gu_model_path(const char *minfer, const char *own, const char *shape, const char *type, char *path, size_t n);

/* ---- test data, independent of the code under test ---- */
/* Deterministic 64-bit stream (xorshift64*); *s is the state. */
unsigned long long gu_rng(unsigned long long *s);
void gu_fill(void *p, size_t n, unsigned long long seed);  /* n bytes from seed */
/* Uniform float in [lo, hi) from the gate's own seeded stream. */
float gu_frand(unsigned long long *seed, float lo, float hi);
/* n uniform floats in [lo, hi), malloc'd (NULL if out of memory) */
float *gu_rand_f32(unsigned long long *seed, size_t n, float lo, float hi);
/* M rows of K weights in type t, quantized by the CPU reference from uniform floats times
 * amp, with an outlier (x4) every 97th element; malloc'd (M rows of mi_row_size(t, K) bytes),
 * *bytes set when non-NULL */
void *gu_make_weights(unsigned long long *seed, mi_type t, int64_t K, int64_t M, float amp, size_t *bytes);

/* ---- comparisons ---- */
/* First mismatching byte index, or (size_t)-1 if equal. */
size_t gu_first_diff(const void *a, const void *b, size_t n);
/* FNV-1a of n bytes: printed with a kernel's output so that two builds' runs can be compared bit
 * for bit from their logs */
uint32_t gu_fnv1a(const void *p, size_t n);
/* NMSE = sum (got - want)^2 / sum want^2 (the plain sum of squares when want is all zero).
 * A NaN anywhere gives INFINITY, so no bound can pass it whichever way a gate compares. */
double gu_nmse(const float *got, const float *want, size_t n);
/* the same against a double reference */
double gu_nmse_d(const float *got, const double *want, size_t n);

#endif

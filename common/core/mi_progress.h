/* Wall clock and a throttled progress line on stderr, shared by the long-running
 * commands (synth, quantize, run's prefill): redrawn in place on a terminal at most every
 * 0.25 s, one line every 5 s into a log. */
#ifndef MI_PROGRESS_H
#define MI_PROGRESS_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <time.h>

static inline double mi_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const char *label;   /* "synth", "quantize" */
    double t0, t_last;
    bool tty;            /* stderr is a terminal */
} mi_progress;

void mi_progress_start(mi_progress *p, const char *label);
/* "label: X / Y GiB (P%)  Z GiB/s", throttled; always printed when done == total */
void mi_progress_bytes(mi_progress *p, size_t done, size_t total);
/* "label done/total unit (P%)  R unit/s", throttled like mi_progress_bytes */
void mi_progress_count(mi_progress *p, int64_t done, int64_t total, const char *unit);
/* Erase the in-place line (on a terminal), so what follows starts at column 0 of a clean
 * line; returns the seconds since start. */
double mi_progress_clear(mi_progress *p);
/* End the in-place line (on a terminal) and return the seconds since start. */
double mi_progress_end(mi_progress *p);

/* bytes as "12.3 MiB", "4.4 GiB" or "2.0 TiB" (binary units, as every size the tool and the
 * library's messages print); returns buf */
const char *mi_fmt_bytes(char *buf, size_t cap, double bytes);

#endif

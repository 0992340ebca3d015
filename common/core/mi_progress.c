/* Progress line behind mi_progress.h. */
#include "mi_progress.h"
#include <stdio.h>
#include <unistd.h>

void mi_progress_start(mi_progress *p, const char *label) {
    p->label = label;
    p->t0 = mi_now_s();
    p->t_last = 0.0;
    p->tty = isatty(2) != 0;
}

void mi_progress_bytes(mi_progress *p, size_t done, size_t total) {
    const double t = mi_now_s();
    if (done < total && t - p->t_last < (p->tty ? 0.25 : 5.0)) return;
    p->t_last = t;
    const double el = t - p->t0 > 1e-6 ? t - p->t0 : 1e-6;
    fprintf(stderr, "%s%s: %.2f / %.2f GB (%3.0f%%)  %.2f GB/s%s", p->tty ? "\r" : "", p->label, (double)done / 1e9,
            (double)total / 1e9, total ? 100.0 * (double)done / (double)total : 100.0, (double)done / 1e9 / el,
            p->tty ? "" : "\n");
    fflush(stderr);
}

double mi_progress_end(mi_progress *p) {
    if (p->tty) fputc('\n', stderr);
    return mi_now_s() - p->t0;
}

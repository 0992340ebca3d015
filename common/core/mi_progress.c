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
    char a[32], b[32], r[32];
    fprintf(stderr, "%s%s: %s / %s (%3.0f%%)  %s/s%s", p->tty ? "\r" : "", p->label,
            mi_fmt_bytes(a, sizeof a, (double)done), mi_fmt_bytes(b, sizeof b, (double)total),
            total ? 100.0 * (double)done / (double)total : 100.0, mi_fmt_bytes(r, sizeof r, (double)done / el),
            p->tty ? "\x1b[K" : "\n");
    fflush(stderr);
}

void mi_progress_count(mi_progress *p, int64_t done, int64_t total, const char *unit) {
    const double t = mi_now_s();
    if (done < total && p->t_last > 0 && t - p->t_last < (p->tty ? 0.25 : 5.0)) return;
    p->t_last = t;
    const double el = t - p->t0 > 1e-6 ? t - p->t0 : 1e-6;
    fprintf(stderr, "%s%s %lld/%lld %s (%3.0f%%)  %.0f %s/s%s", p->tty ? "\r\033[K" : "", p->label, (long long)done,
            (long long)total, unit, total ? 100.0 * (double)done / (double)total : 100.0, (double)done / el, unit,
            p->tty ? "" : "\n");
    fflush(stderr);
}

double mi_progress_clear(mi_progress *p) {
    if (p->tty) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    return mi_now_s() - p->t0;
}

double mi_progress_end(mi_progress *p) {
    if (p->tty) fputc('\n', stderr);
    return mi_now_s() - p->t0;
}

const char *mi_fmt_bytes(char *buf, size_t cap, double bytes) {
    const double mib = 1024.0 * 1024.0, gib = mib * 1024.0, tib = gib * 1024.0;
    if (bytes >= tib) snprintf(buf, cap, "%.1f TiB", bytes / tib);
    else if (bytes >= gib) snprintf(buf, cap, "%.1f GiB", bytes / gib);
    else snprintf(buf, cap, "%.1f MiB", bytes / mib);
    return buf;
}

/* What a bench record says about where it ran, for `minfer bench` and `minfer bench --batch`:
 * the machine (CPU, GPU and driver by nvidia-smi on the cuda backend), the commit (MINFER_COMMIT,
 * which gates/device.sh passes because the device's copy of the tree has no .git, else git), the
 * date, and every MINFER_* variable in force (the switches an A/B turned). */
#ifndef MI_BENCH_FACTS_H
#define MI_BENCH_FACTS_H
#include <stdio.h>

typedef struct {
    char cpu[128], gpu[128], driver[64], commit[64], date[32], switches[1024];
} bench_facts;

void bench_facts_gather(const char *backend, bench_facts *f);
/* s as a JSON string literal, quotes and escapes included */
void bench_json_str(FILE *f, const char *s);

#endif

/* What a bench record says about where it ran (tools/bench_facts.h). */
#include "tools/bench_facts.h"
#include "common/core/mi_settings.h"
#include <stdio.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

extern char **environ;

static void copy_str(char *out, size_t cap, const char *s) {
    size_t l = strlen(s);
    if (l >= cap) l = cap - 1;
    memcpy(out, s, l);
    out[l] = 0;
}

static void read_cmd(const char *cmd, char *out, size_t cap, const char *def) {
    copy_str(out, cap, def);
    FILE *p = popen(cmd, "r");
    if (!p) return;
    char buf[256];
    if (fgets(buf, sizeof buf, p)) {
        buf[strcspn(buf, "\r\n")] = 0;
        if (buf[0]) copy_str(out, cap, buf);
    }
    pclose(p);
}

static void cpu_name(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ') c++;
                c[strcspn(c, "\r\n")] = 0;
                copy_str(out, cap, c);
            }
            break;
        }
    }
    fclose(f);
}

void bench_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 32) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void bench_facts_gather(const char *be, bench_facts *f) {
    memset(f, 0, sizeof *f);
    cpu_name(f->cpu, sizeof f->cpu);
    snprintf(f->gpu, sizeof f->gpu, "none");
    snprintf(f->driver, sizeof f->driver, "none");
    if (!strcmp(be, "cuda")) {
        read_cmd("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null", f->gpu, sizeof f->gpu, "unknown");
        read_cmd("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null", f->driver, sizeof f->driver,
                 "unknown");
    }
    /* the device machine gets a copy of the tree whose git need not be its commit: gates/device.sh
     * passes the commit in MINFER_COMMIT; without it, HEAD with "-dirty" where the tracked files
     * differ from it (a copy over an older checkout, or uncommitted changes) */
    const char *env_commit = mi_setting("MINFER_COMMIT");
    if (env_commit && *env_commit) snprintf(f->commit, sizeof f->commit, "%s", env_commit);
    else read_cmd(MI_COMMIT_FROM_GIT("--short"), f->commit, sizeof f->commit, "unknown");
    time_t now = time(NULL);
    strftime(f->date, sizeof f->date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    /* the engine's switches; not the run's bookkeeping (its commit, the scripts' Python, where
     * records and gate results go) */
    static const char *const not_switches[] = {"MINFER_COMMIT=", "MINFER_PYTHON=", "MINFER_BENCH_DIR=", "MINFER_GATE_"};
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "MINFER_", 7)) continue;
        bool skip = false;
        for (size_t i = 0; i < sizeof not_switches / sizeof *not_switches; i++)
            if (!strncmp(*e, not_switches[i], strlen(not_switches[i]))) skip = true;
        if (skip) continue;
        size_t l = strlen(f->switches);
        snprintf(f->switches + l, sizeof f->switches - l, "%s%s", l ? "," : "", *e);
    }
}


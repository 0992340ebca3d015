/* The minfer command line: one program, subcommands in tools/cmd_*.c.
 * A subcommand's file may be absent in a partial build; it then says so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/backend/backend.h"
#include "tools/cli.h"

typedef int (*cmd_fn)(int argc, char **argv);
int cmd_info(int argc, char **argv) __attribute__((weak));
int cmd_quantize(int argc, char **argv) __attribute__((weak));
int cmd_synth(int argc, char **argv) __attribute__((weak));
int cmd_run(int argc, char **argv) __attribute__((weak));
int cmd_bench(int argc, char **argv) __attribute__((weak));
int cmd_tokenize(int argc, char **argv) __attribute__((weak));
int cmd_serve(int argc, char **argv) __attribute__((weak));

static const struct { const char *name; cmd_fn *fn; const char *help; } cmds[] = {
    {"run", NULL, "run -m FILE -p TEXT [-n N] [--chat] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed N] [-t THREADS] [--backend cpu|cuda|auto] [--tokens ID,..] [--dump-logits FILE]"},
    {"bench", NULL, "bench -m FILE [-p 512,2048] [-n 128] [-d 0,4096] [-r 5] [--backend ...] [--json PATH]"},
    {"info", NULL, "info FILE            metadata, tensor table, totals, bits per weight (--settings: MINFER_* settings)"},
    {"quantize", NULL, "quantize IN OUT TYPE   (q4_k_m, q4_0, q8_0, ...)"},
    {"synth", NULL, "synth --shape NAME --type MIX -o FILE [--seed N]"},
    {"tokenize", NULL, "tokenize -m FILE [-p TEXT | --stdin] [--special]   print token ids"},
    {"serve", NULL, "serve -m FILE [--host 127.0.0.1] [--port 8080] [--parallel N] [-c CTX] [--queue N] [--api-key KEY] [--metrics] [--backend ...]"},
};

int mi_cli_max_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    long m = 4 * (n > 0 ? n : 1);
    return m > 1024 ? 1024 : (int)m;
}

int mi_cli_threads(const char *v, int *out, char *err, size_t errsz) {
    char *end;
    long x = strtol(v, &end, 10);
    int max = mi_cli_max_threads();
    if (end == v || *end || x < 0 || x > max) {
        snprintf(err, errsz, "-t '%s': give 1..%d threads (4 x the %ld online CPUs, at most 1024), or 0 for one per CPU",
                 v, max, sysconf(_SC_NPROCESSORS_ONLN));
        return -1;
    }
    *out = (int)x;
    return 0;
}

const char *mi_cli_plural(long n, const char *word, char *buf, size_t cap) {
    snprintf(buf, cap, "%ld %s%s", n, word, n == 1 ? "" : "s");
    return buf;
}

static cmd_fn lookup(const char *name) {
    if (!strcmp(name, "run")) return cmd_run;
    if (!strcmp(name, "bench")) return cmd_bench;
    if (!strcmp(name, "info")) return cmd_info;
    if (!strcmp(name, "quantize")) return cmd_quantize;
    if (!strcmp(name, "synth")) return cmd_synth;
    if (!strcmp(name, "tokenize")) return cmd_tokenize;
    if (!strcmp(name, "serve")) return cmd_serve;
    return NULL;
}

static void usage(FILE *f) {
    fprintf(f, "usage: minfer COMMAND [ARGS]   (build phase: %s)\n", mi_build_phase);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) fprintf(f, "  minfer %s\n", cmds[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    int known = 0;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) known |= !strcmp(argv[1], cmds[i].name);
    if (!known) {
        fprintf(stderr, "minfer: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    cmd_fn fn = lookup(argv[1]);
    if (!fn) {
        fprintf(stderr, "minfer: command '%s' is not built into this binary\n", argv[1]);
        return 2;
    }
    mi_phases_install();
    return fn(argc - 1, argv + 1);
}

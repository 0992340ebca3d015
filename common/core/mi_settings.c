/* The settings table and its readers (mi_settings.h). A new MINFER_* variable is added
 * here first; gates/common/py_settings.py fails when a name read in the source is missing
 * from the table, when an entry is missing from docs/SETTINGS.md, or is read nowhere. */
#include "mi_settings.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Meanings are one line each and may not hold '|' unescaped: docs/SETTINGS.md is a
 * Markdown table checked against them, so "a or b" is written "a, b" or with "/". */
static const mi_setting_info g_settings[] = {
    /* ---- common: logging, CPU backend, scheduler, session ---- */
    {"MINFER_LOG", MI_SETTING_FLAG,
     "0: no info lines from the library on stderr (errors are printed either way); default on"},
    {"MINFER_THREADS", MI_SETTING_INT,
     "CPU threads when the caller asks for 0 (run/bench: no -t, or -t 0), 0..1024; 0 or unset: one per online CPU"},
    {"MINFER_ISA", MI_SETTING_STRING,
     "scalar, avx2 or avx512: the CPU kernels' SIMD level, at most what the CPU has (read once per process); default: the best"},
    {"MINFER_NO_DOT4", MI_SETTING_FLAG,
     "1: CPU matmuls on the per-row path take one token a dot call, not four tokens a call with the weight row unpacked once for them (the same bits either way; A/B)"},
    {"MINFER_NO_GEMM", MI_SETTING_FLAG,
     "1: CPU matmuls take the per-row vec_dot path only, no blocked GEMM (A/B)"},
    {"MINFER_SPIN_US", MI_SETTING_INT,
     "microseconds an idle CPU worker spins before it sleeps, 0..10000000 (read when a CPU backend is made); default 100"},
    {"MINFER_SCHED_NOREUSE", MI_SETTING_FLAG,
     "1: the scheduler gives every tensor its own bytes, no liveness reuse (A/B, debugging)"},
    {"MINFER_PROFILE", MI_SETTING_INT,
     "1: time per op, synchronizing after every node, printed when the scheduler is freed; 2: also per weight shape as GB/s"},
    {"MINFER_DUMP_GRAPH", MI_SETTING_INT,
     "1: print each graph's nodes, backends, splits and copies after it runs; 2: also at every allocation"},
    {"MINFER_NO_MEMCHECK", MI_SETTING_FLAG,
     "1: skip the check that refuses a KV cache or graph workspace larger than the free host/device memory"},
    {"MINFER_UBATCH", MI_SETTING_INT,
     "tokens per graph for a prompt (0: never split); default: a CPU session keeps a graph's activations near 3% of weights + KV cache, a device session runs the whole prompt"},
    {"MINFER_NO_GRAPH_REUSE", MI_SETTING_FLAG,
     "1: every one-token decode step builds its graph anew (read at session open), and every step of a batch (read at batch creation); default: a session runs its last one-token graph again at the new position, a batch its last step's graph when the step's bucket matches (A/B, debugging; MINFER_DUMP_GRAPH implies it for sessions)"},
    {"MINFER_STEP_AHEAD", MI_SETTING_INT,
     "1 or unset (the default): a batch, and a session's one-token greedy decode, queue the next step ahead where the backend reads the output behind queued work (a device); 2: on any backend (the CPU too: tests); 0: never (A/B); read at batch and session creation. The next step, each sequence fed its argmax on the device, is queued before the host reads the ids, so the device runs it while the host reads, draws and plans; taken when the caller feeds exactly the token drawn (docs/PHASE8B.md, docs/PHASE8A.md)"},
    {"MINFER_PAGEABLE_LOGITS", MI_SETTING_FLAG,
     "1: a session keeps its logits in plain host memory (read at session open); default: page-locked memory from the device backend for up to 64 rows, so a decode step's row crosses at the copy engine's rate (A/B)"},
    {"MINFER_DEBUG_LAYERS", MI_SETTING_STRING,
     "FILE (1: minfer-layers.bin): every forward appends per-op tap records there (read by gates/common/model_ref.py)"},
    {"MINFER_DISABLE_CUDA", MI_SETTING_FLAG,
     "1: never touch CUDA; every model and session runs on the CPU"},
    /* ---- the minfer tool ---- */
    {"MINFER_COMMIT", MI_SETTING_STRING,
     "the commit minfer bench and the gates record (default: HEAD from git, with -dirty where the tracked files differ from it: MI_COMMIT_FROM_GIT); gates/device.sh sets it"},
    {"MINFER_API_KEY", MI_SETTING_STRING,
     "the key `minfer serve` wants in 'Authorization: Bearer KEY' on every route but /health when --api-key is not given (read at start; empty: no key); compared in constant time"},
    /* ---- CUDA layers (phase 7a and up) ---- */
    {"MINFER_CUDA_DEVICE", MI_SETTING_INT,
     "the CUDA device to open and to hold the weights, 0..1024; default 0"},
    {"MINFER_CUDA_FAIL_MALLOC", MI_SETTING_INT,
     "test switch: the N-th device allocation of the process fails as if out of memory (read at the first allocation); 0: off"},
    {"MINFER_CUDA_FAIL_UPLOAD", MI_SETTING_INT,
     "test switch: the N-th weight upload of each model load fails (the model then runs on the CPU, a cuda session is refused); 0: off"},
    {"MINFER_NO_FUSION", MI_SETTING_FLAG,
     "1: CUDA sessions skip the fusion passes (7c's gate/up/SwiGLU, 8a's norm and residual folds)"},
    {"MINFER_NO_CUDA_GRAPH", MI_SETTING_FLAG,
     "1: no CUDA Graph capture/replay of decode steps (read once per process)"},
    {"MINFER_GRAPH_KEY_EACH_STEP", MI_SETTING_FLAG,
     "1: 7d scans and hashes a decode split at every step (read once per process); default: the scan and key of the split last seen are used again while its graph's version, pool generation, workspace and dispatch epoch hold (A/B)"},
    {"MINFER_CUDA_GRAPH_FAIL", MI_SETTING_STRING,
     "test switch: begin, node or sync, optionally :COUNT, injects that capture failure (read once per process)"},
    {"MINFER_PERF_OFF", MI_SETTING_LIST,
     "comma list of perf items to turn off, e.g. e2,e7, or all; empty or none: every item on; unset: the default set (items and defaults: docs/PHASE7E.md, docs/PHASE8A.md, docs/PHASE8B.md; read once per process)"},
    {"MINFER_SKV_MIN_CTX", MI_SETTING_INT,
     "KV cache length from which one-token attention is split over the sequence (8a's d4), 1..2147483647; default 512 (read once per process; for measurements)"},
    {"MINFER_SKV_GB", MI_SETTING_INT,
     "query heads a block of the split attention takes of its GQA group (d4), 1..64; default 2 under 16384 positions, the whole group from there (read once per process; for measurements)"},
    {"MINFER_PDL_MIN_EMBD", MI_SETTING_INT,
     "narrowest model (its first RMS norm's width) whose one-token steps launch the small kernels as programmatic dependents (8a's d10), 1..2^30; default 2048 (read once per process; for measurements)"},
    {"MINFER_PAGED_MIN_SPLIT", MI_SETTING_INT,
     "fewest keys a split of the paged attention of a step of many sequences takes (8b), 16..65536 (one at least that long: one split, no combine); default 32 (read once per process; for measurements)"},
    {"MINFER_SMALL_ROWS", MI_SETTING_INT,
     "weight rows a band of 8b's small-K matmul (b12, b13, b15), 16, 32 or 64, where its shared memory fits; default: the fewest rows whose bands fit one wave, else the rows whose busiest block has the fewest K units a warp (read once per process; for measurements)"},
    {"MINFER_NORM_FOLD_READERS", MI_SETTING_INT,
     "largest number of one-token matmuls an RMS norm is folded into (8a's d1), 1..8; default 1 (read once per process; for measurements)"},
};

enum { N_SETTINGS = (int)(sizeof g_settings / sizeof g_settings[0]) };

static const mi_setting_info *find(const char *name) {
    for (int i = 0; i < N_SETTINGS; i++)
        if (!strcmp(g_settings[i].name, name)) return &g_settings[i];
    /* a name outside the table is a typo in the source, never user input */
    fprintf(stderr, "minfer: internal invariant failed: setting '%s' is not in the table (common/core/mi_settings.c)\n",
            name ? name : "(null)");
    abort();
}

const char *mi_setting(const char *name) { return getenv(find(name)->name); }

bool mi_setting_on(const char *name) {
    const char *e = mi_setting(name);
    return e && *e && strcmp(e, "0") != 0;
}

int mi_setting_parse_int(const char *name, long lo, long hi, long *out) {
    const char *e = mi_setting(name);
    if (!e || !*e) return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(e, &end, 10);
    if (end == e || *end || errno == ERANGE || v < lo || v > hi) return -1;
    *out = v;
    return 1;
}

int mi_settings_count(void) { return N_SETTINGS; }

const mi_setting_info *mi_setting_at(int i) { return i >= 0 && i < N_SETTINGS ? &g_settings[i] : NULL; }

const char *mi_setting_kind_name(mi_setting_kind k) {
    switch (k) {
    case MI_SETTING_FLAG: return "flag";
    case MI_SETTING_INT: return "int";
    case MI_SETTING_STRING: return "string";
    case MI_SETTING_LIST: return "list";
    }
    return "?";
}

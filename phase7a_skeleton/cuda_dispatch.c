/* The CUDA dispatch (cuda_dispatch.h): per-op candidate lists, the switch items, and the
 * choice per node. The lists change only at install and in gates (single-threaded moments);
 * a choice is read on every execution, so it is one epoch compare on the node. */
#include "cuda_dispatch.h"
#include "common/core/mi_settings.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KERNELS 32   /* candidates per op (MATMUL has the most: 7b, 7e, 8a and 8b each add some) */
#define MAX_ITEMS 128   /* the item sets below: 64-bit words */
#define SET_WORDS (MAX_ITEMS / 64)

typedef struct {
    uint64_t w[SET_WORDS];   /* bit i of the set: w[i / 64] bit i % 64 */
} item_set;
static bool set_has(const item_set *m, int i) { return (m->w[i >> 6] >> (i & 63)) & 1ull; }
static void set_add(item_set *m, int i) { m->w[i >> 6] |= 1ull << (i & 63); }
static bool set_meets(const item_set *a, const item_set *b) {
    uint64_t x = 0;
    for (int i = 0; i < SET_WORDS; i++) x |= a->w[i] & b->w[i];
    return x != 0;
}
static bool set_equal(const item_set *a, const item_set *b) { return !memcmp(a->w, b->w, sizeof a->w); }
static bool set_empty(const item_set *m) {
    static const item_set none;
    return set_equal(m, &none);
}

typedef struct {
    const mi_cuda_kernel *k;
    item_set items;          /* item i must be on */
    _Atomic uint64_t runs;
} slot;

static slot g_ops[MI_OP_COUNT][MAX_KERNELS];
static int g_n[MI_OP_COUNT];
static mi_cuda_check_fn g_check[MI_OP_COUNT];
static struct {
    const char *name, *what;
} g_items[MAX_ITEMS];
static int g_n_items;
/* item i off; written only where the lists change (install, gates, the environment once), read
 * a word at a time */
static _Atomic uint64_t g_off[SET_WORDS];
static _Atomic uint64_t g_epoch = 1;
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;

static bool op_ok(mi_op op) { return (int)op > (int)MI_OP_INPUT && (int)op < (int)MI_OP_COUNT; }
static void bump(void) { atomic_fetch_add(&g_epoch, 1); }

static int item_index(const char *name, size_t len) {
    for (int i = 0; i < g_n_items; i++)
        if (strlen(g_items[i].name) == len && !strncmp(g_items[i].name, name, len)) return i;
    return -1;
}

void mi_cuda_item_declare(const char *name, const char *what) {
    if (item_index(name, strlen(name)) >= 0) return;
    if (g_n_items == MAX_ITEMS) {   /* a fixed, small set: more is a build mistake */
        fprintf(stderr, "minfer: internal error: item %s is one more than the %d the dispatch holds\n", name, MAX_ITEMS);
        abort();
    }
    g_items[g_n_items].name = name;
    g_items[g_n_items].what = what;
    g_n_items++;
}

bool mi_cuda_item_at(int i, const char **name, const char **what) {
    if (i < 0 || i >= g_n_items) return false;
    if (name) *name = g_items[i].name;
    if (what) *what = g_items[i].what;
    return true;
}

static mi_status parse_items(const char *list, item_set *out);

/* a kernel's "e12,e14" -> bits; an item a kernel names is declared by the install that adds it */
static item_set items_mask(const char *list) {
    item_set m = {{0}};
    if (parse_items(list, &m) != MI_OK) {
        fprintf(stderr, "minfer: internal error: %s (a kernel names an undeclared item)\n", mi_errmsg());
        abort();
    }
    return m;
}

void mi_cuda_add_kernel(mi_op op, const mi_cuda_kernel *k) {
    if (!op_ok(op) || !k || !k->run || !k->supports) abort();
    mi_cuda_remove_kernel(op, k);
    if (g_n[op] == MAX_KERNELS) abort();
    slot *s = g_ops[op];
    for (int i = g_n[op]; i > 0; i--) {
        s[i].k = s[i - 1].k;
        s[i].items = s[i - 1].items;
        atomic_store(&s[i].runs, atomic_load(&s[i - 1].runs));
    }
    s[0].k = k;
    s[0].items = items_mask(k->items);
    atomic_store(&s[0].runs, 0);
    g_n[op]++;
    bump();
}

void mi_cuda_remove_kernel(mi_op op, const mi_cuda_kernel *k) {
    if (!op_ok(op)) return;
    slot *s = g_ops[op];
    for (int i = 0; i < g_n[op]; i++) {
        if (s[i].k != k) continue;
        for (int j = i; j + 1 < g_n[op]; j++) {
            s[j].k = s[j + 1].k;
            s[j].items = s[j + 1].items;
            atomic_store(&s[j].runs, atomic_load(&s[j + 1].runs));
        }
        g_n[op]--;
        bump();
        return;
    }
}

void mi_cuda_set_op_check(mi_op op, mi_cuda_check_fn f) {
    if (!op_ok(op)) abort();
    g_check[op] = f;
}

mi_status mi_cuda_op_check(const mi_tensor *node) {
    const mi_cuda_check_fn f = op_ok(node->op) ? g_check[node->op] : NULL;
    return f ? f(node) : MI_OK;
}

int mi_cuda_kernels(mi_op op, const mi_cuda_kernel **out, int max) {
    if (!op_ok(op)) return 0;
    for (int i = 0; i < g_n[op] && i < max; i++) out[i] = g_ops[op][i].k;
    return g_n[op];
}

static item_set off_mask(void);
static void describe(const item_set *m, char *buf, size_t n);

static slot *pick(const mi_tensor *node) {
    if (!node || !op_ok(node->op)) return NULL;
    const item_set off = off_mask();
    slot *s = g_ops[node->op];
    for (int i = 0; i < g_n[node->op]; i++)
        if (!set_meets(&s[i].items, &off) && s[i].k->supports(node)) return &s[i];
    return NULL;
}

const mi_cuda_kernel *mi_cuda_choice(const mi_tensor *node) {
    const slot *s = pick(node);
    return s ? s->k : NULL;
}

static slot *choose(mi_tensor *node) {
    const uint64_t ep = atomic_load(&g_epoch);
    slot *s = (slot *)node->kernel;
    /* the op check: a node copied over another (the fusion pass) must not keep its choice */
    if (s && node->kernel_epoch == ep && op_ok(node->op) && s >= g_ops[node->op] && s < g_ops[node->op] + MAX_KERNELS)
        return s;
    s = pick(node);
    node->kernel = s;
    node->kernel_epoch = ep;
    return s;
}

const mi_cuda_kernel *mi_cuda_choose(mi_tensor *node) {
    const slot *s = choose(node);
    return s ? s->k : NULL;
}

static bool (*_Atomic g_pdl_policy)(const mi_tensor *);
static _Thread_local const mi_tensor *t_running;   /* the node mi_cuda_dispatch_run is running */
static _Thread_local uint64_t t_serial;            /* its number among this thread's runs */
void mi_cuda_pdl_set_policy(bool (*policy)(const mi_tensor *node)) { g_pdl_policy = policy; }
bool mi_cuda_pdl_small(void) {
    bool (*f)(const mi_tensor *) = g_pdl_policy;
    return f && f(t_running);
}

mi_status mi_cuda_dispatch_run(mi_cuda_ctx *c, mi_tensor *node, void *workspace) {
    slot *s = choose(node);
    if (!s)
        return mi_err(MI_ERR_UNSUPPORTED, "cuda: no kernel of this build runs %s '%s'", mi_op_name(node->op), node->name);
    atomic_fetch_add(&s->runs, 1);
    t_serial++;
    t_running = node;
    const mi_status st = s->k->run(c, node, workspace);
    t_running = NULL;
    return st;
}

uint64_t mi_cuda_dispatch_serial(void) { return t_running ? t_serial : 0; }

static _Thread_local struct {
    uint64_t serial;   /* 0: no copy */
    int form;
    const void *x, *ws;
    int64_t K, N;
} t_ws_copy;
void mi_cuda_ws_copy_made(int form, const void *x, const void *ws, int64_t K, int64_t N) {
    t_ws_copy.serial = mi_cuda_dispatch_serial();
    t_ws_copy.form = form;
    t_ws_copy.x = x;
    t_ws_copy.ws = ws;
    t_ws_copy.K = K;
    t_ws_copy.N = N;
}
bool mi_cuda_ws_copy_ready(int form, const void *x, const void *ws, int64_t K, int64_t N) {
    const uint64_t cur = mi_cuda_dispatch_serial();
    return cur != 0 && t_ws_copy.serial != 0 && (t_ws_copy.serial == cur || t_ws_copy.serial + 1 == cur) &&
           t_ws_copy.form == form && t_ws_copy.x == x && t_ws_copy.ws == ws && t_ws_copy.K == K && t_ws_copy.N == N;
}
void mi_cuda_ws_copy_clear(void) { t_ws_copy.serial = 0; }

uint64_t mi_cuda_dispatch_epoch(void) {
    off_mask();   /* MINFER_PERF_OFF applied before anyone keys on the epoch */
    return atomic_load(&g_epoch);
}

uint64_t mi_cuda_kernel_runs(const mi_cuda_kernel *k) {
    for (int op = 0; op < MI_OP_COUNT; op++)
        for (int i = 0; i < g_n[op]; i++)
            if (g_ops[op][i].k == k) return atomic_load(&g_ops[op][i].runs);
    return 0;
}

uint64_t mi_cuda_item_runs(const char *item) {
    const int want = item ? item_index(item, strlen(item)) : -1;
    if (item && want < 0) return 0;
    uint64_t n = 0;
    for (int op = 0; op < MI_OP_COUNT; op++)
        for (int i = 0; i < g_n[op]; i++) {
            const slot *s = &g_ops[op][i];
            if (item ? set_has(&s->items, want) : set_empty(&s->items)) n += atomic_load(&s->runs);
        }
    return n;
}

/* "e2,e7" | "all" | "none" | "" -> the off mask */
static mi_status parse_items(const char *list, item_set *out) {
    item_set m = {{0}};
    for (const char *p = list ? list : ""; *p;) {
        while (*p == ',' || *p == ' ') p++;
        size_t l = strcspn(p, ", ");
        if (!l) break;
        if (l == 3 && !strncmp(p, "all", 3)) {
            for (int i = 0; i < g_n_items; i++) set_add(&m, i);
        } else if (!(l == 4 && !strncmp(p, "none", 4))) {
            int i = item_index(p, l);
            if (i < 0) {
                char names[800] = "";
                for (int j = 0; j < g_n_items; j++) {
                    size_t u = strlen(names);
                    snprintf(names + u, sizeof names - u, "%s%s", j ? "," : "", g_items[j].name);
                }
                return mi_err(MI_ERR_INVALID, "MINFER_PERF_OFF: unknown item '%.*s' (items of this build: %s, all)",
                              (int)l, p, g_n_items ? names : "none");
            }
            set_add(&m, i);
        }
        p += l;
    }
    *out = m;
    return MI_OK;
}

static void store_off(const item_set *m) {
    for (int i = 0; i < SET_WORDS; i++) atomic_store(&g_off[i], m->w[i]);
}

/* MINFER_PERF_OFF, applied once, after every phase declared its items */
static void apply_env(void) {
    const char *e = mi_setting("MINFER_PERF_OFF");
    item_set m = {{0}};
    if (!e) return;
    if (parse_items(e, &m) != MI_OK) {
        mi_log("warning: %s; every performance item stays on", mi_errmsg());
        return;
    }
    store_off(&m);
    bump();
    if (!set_empty(&m)) {   /* the default state is not news: said only when asked for */
        char d[1400];
        describe(&m, d, sizeof d);
        mi_log("performance items: %s (MINFER_PERF_OFF=%s)", d, e);
    }
}

static item_set off_mask(void) {
    pthread_once(&g_env_once, apply_env);
    item_set m;
    for (int i = 0; i < SET_WORDS; i++) m.w[i] = atomic_load(&g_off[i]);
    return m;
}

mi_status mi_cuda_items_set_off(const char *list) {
    item_set m = {{0}};
    MI_TRY(parse_items(list, &m));
    pthread_once(&g_env_once, apply_env);   /* an explicit set wins over the environment */
    const item_set was = off_mask();
    store_off(&m);
    if (!set_equal(&was, &m)) bump();
    return MI_OK;
}

bool mi_cuda_item_on(const char *name) {
    const int i = item_index(name, strlen(name));
    const item_set off = off_mask();
    return i < 0 || !set_has(&off, i);
}

bool mi_cuda_items_on(const char *items) {
    const item_set want = items_mask(items), off = off_mask();
    return !set_meets(&want, &off);
}

void mi_cuda_items_describe(char *buf, size_t n) {
    const item_set off = off_mask();
    describe(&off, buf, n);
}

static void describe(const item_set *m, char *buf, size_t n) {
    char on[640] = "", off[640] = "";
    for (int i = 0; i < g_n_items; i++) {
        char *d = set_has(m, i) ? off : on;
        size_t l = strlen(d);
        snprintf(d + l, sizeof on - l, "%s%s", l ? "," : "", g_items[i].name);
    }
    snprintf(buf, n, "on: %s; off: %s", on[0] ? on : "none", off[0] ? off : "none");
}

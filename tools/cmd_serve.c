/* `minfer serve`: an OpenAI-compatible HTTP server over one model with continuous batching
 * (docs/SERVE.md). This file parses the options, loads the model and tokenizer, starts the
 * engine (server/engine.c) and the HTTP side (server/http.c), and on SIGINT or SIGTERM shuts
 * them down in order: no new connections, every request ended, connections closed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include "common/core/mi_settings.h"
#include "common/gguf/gguf.h"
#include "common/model/mi.h"
#include "common/tokenizer/tokenizer.h"
#include "server/api.h"
#include "server/engine.h"
#include "server/http.h"
#include "tools/cli.h"

#define SERVE_MAX_HEADER (32u << 10)   /* request line + headers: libmicrohttpd answers 431 past it */

typedef struct {
    const char *model, *host, *backend, *api_key, *alias;
    int port, parallel, queue, n_threads, idle_timeout;
    int64_t n_ctx, step_tokens;
    size_t max_body;
    bool metrics, kv_f32;
} serve_args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: minfer serve -m FILE [--host 127.0.0.1] [--port 8080] [--parallel N] [-c CTX] [--queue N]\n"
            "                    [--backend cpu|cuda|auto] [-t THREADS] [--api-key KEY] [--metrics] [--alias NAME]\n"
            "                    [--max-body BYTES] [--step-tokens N] [--kv f16|f32] [--idle-timeout S]\n"
            "  POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health (and GET /metrics\n"
            "  with --metrics); OpenAI's request and answer shapes, stream: true as server-sent events.\n"
            "  --parallel N: sequences generated at once (default 4); -c CTX: positions each may hold, prompt and\n"
            "  completion together (default min(trained context, 4096)); the KV pool holds N x CTX positions.\n"
            "  --queue N: requests that may wait for a sequence (default 64); one more is answered 503.\n"
            "  --api-key KEY (or MINFER_API_KEY): every route but /health wants 'Authorization: Bearer KEY'.\n"
            "  --alias NAME: the model id clients name (default: the file name without .gguf).\n"
            "  --max-body BYTES: largest request body (default 1048576; more: 413). Headers: at most %u bytes.\n"
            "  --step-tokens N: prompt tokens one step takes over all new requests (default 512).\n"
            "  --idle-timeout S: seconds a connection may stay silent, 0: no limit (default 600).\n"
            "  Sampling defaults are `minfer run`'s: greedy unless temperature > 0, then top_k 40, top_p 0.95,\n"
            "  min_p 0.05, seed 1234; the same prompt and settings give `minfer run`'s text.\n",
            SERVE_MAX_HEADER);
}

static bool parse_ll(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static int parse_args(int argc, char **argv, serve_args *a, char *err, size_t errsz) {
    memset(a, 0, sizeof *a);
    a->host = "127.0.0.1";
    a->port = 8080;
    a->parallel = 4;
    a->queue = 64;
    a->backend = "auto";
    a->max_body = 1 << 20;
    a->step_tokens = 512;
    a->idle_timeout = 600;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) { usage(stdout); exit(0); }
        if (!strcmp(o, "--metrics")) { a->metrics = true; continue; }
        static const char *const valued[] = {"-m", "--host", "--port", "--parallel", "-c", "--queue", "--backend", "-t",
                                             "--api-key", "--alias", "--max-body", "--step-tokens", "--kv",
                                             "--idle-timeout"};
        bool known = false;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= !strcmp(o, valued[k]);
        if (!known) {
            snprintf(err, errsz, o[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'", o);
            return -1;
        }
        if (i + 1 >= argc) { snprintf(err, errsz, "option '%s' needs a value", o); return -1; }
        const char *v = argv[++i];
        long long x;
        if (!strcmp(o, "-m")) a->model = v;
        else if (!strcmp(o, "--host")) a->host = v;
        else if (!strcmp(o, "--backend")) a->backend = v;
        else if (!strcmp(o, "--api-key")) a->api_key = v;
        else if (!strcmp(o, "--alias")) a->alias = v;
        else if (!strcmp(o, "-t")) { if (mi_cli_threads(v, &a->n_threads, err, errsz)) return -1; }
        else if (!strcmp(o, "--kv") && (!strcmp(v, "f16") || !strcmp(v, "f32"))) a->kv_f32 = !strcmp(v, "f32");
        else if (!strcmp(o, "--port") && parse_ll(v, 0, 65535, &x)) a->port = (int)x;
        else if (!strcmp(o, "--parallel") && parse_ll(v, 1, 4096, &x)) a->parallel = (int)x;
        else if (!strcmp(o, "--queue") && parse_ll(v, 0, 1 << 20, &x)) a->queue = (int)x;
        else if (!strcmp(o, "-c") && parse_ll(v, 1, 1LL << 31, &x)) a->n_ctx = x;
        else if (!strcmp(o, "--max-body") && parse_ll(v, 1, 1LL << 30, &x)) a->max_body = (size_t)x;
        else if (!strcmp(o, "--step-tokens") && parse_ll(v, 1, 1 << 20, &x)) a->step_tokens = x;
        else if (!strcmp(o, "--idle-timeout") && parse_ll(v, 0, 1 << 20, &x)) a->idle_timeout = (int)x;
        else { snprintf(err, errsz, "bad value for %s: '%s'", o, v); return -1; }
    }
    if (!a->model) { snprintf(err, errsz, "no model given (-m FILE)"); return -1; }
    if (a->api_key && !*a->api_key) { snprintf(err, errsz, "--api-key is empty"); return -1; }
    return 0;
}

/* The id clients name: --alias, else the file name without its directory and .gguf. */
static void model_id(const serve_args *a, char *out, size_t cap) {
    if (a->alias) {
        snprintf(out, cap, "%s", a->alias);
        return;
    }
    const char *base = strrchr(a->model, '/');
    snprintf(out, cap, "%s", base ? base + 1 : a->model);
    size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf")) out[n - 5] = 0;
}

static bool loopback(const char *host) {
    return !strcmp(host, "127.0.0.1") || !strcmp(host, "::1") || !strcmp(host, "localhost") || !strncmp(host, "127.", 4);
}

int cmd_serve(int argc, char **argv) {
    serve_args a;
    char err[512];
    if (parse_args(argc, argv, &a, err, sizeof err)) {
        fprintf(stderr, "minfer: %s\n", err);
        usage(stderr);
        return 1;
    }
    if (!a.api_key) {
        const char *k = mi_setting("MINFER_API_KEY");
        if (k && *k) a.api_key = k;
    }
    /* Signals go to sigwait below, not to whichever thread they hit: blocked before any
     * thread starts, so every thread inherits the mask. A closed socket must not kill us. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    mi_model *m = NULL;
    mi_tokenizer *tk = NULL;
    srv_engine *e = NULL;
    srv_http *h = NULL;
    mi_model_params mp = {a.backend};
    if (mi_model_load_params(a.model, &mp, &m) != MI_OK) {
        fprintf(stderr, "minfer: %s\n", mi_errmsg());
        return 1;
    }
    const mi_hparams *hp = mi_model_hparams(m);
    gguf_file *gf = mi_model_gguf(m);
    if (tok_load(gf, &tk) != MI_OK) {
        fprintf(stderr, "minfer: %s: %s\n", a.model, mi_errmsg());
        goto out;
    }
    if (!a.n_ctx) a.n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (a.n_ctx > hp->n_ctx_train) {
        fprintf(stderr, "minfer: -c %lld is past the model's trained context %lld\n", (long long)a.n_ctx,
                (long long)hp->n_ctx_train);
        goto out;
    }
    char id[256];
    model_id(&a, id, sizeof id);
    bool add_bos = false;   /* as `minfer run`: the file's flag, no pre-tokenizer default */
    if (gguf_find_key(gf, "tokenizer.ggml.add_bos_token") >= 0) gguf_get_bool(gf, "tokenizer.ggml.add_bos_token", &add_bos);
    api_ctx api = {.tk = tk, .chat = tok_chat_kind(gf), .add_bos = add_bos, .model = id, .n_ctx = a.n_ctx};
    srv_engine_params ep = {.parallel = a.parallel, .queue_max = a.queue, .n_ctx = a.n_ctx, .step_prompt = a.step_tokens,
                            .n_threads = a.n_threads, .backend = a.backend, .kv_type = a.kv_f32 ? MI_TYPE_F32 : MI_TYPE_F16};
    if (engine_new(m, tk, &ep, &e) != MI_OK) {
        fprintf(stderr, "minfer: %s\n", mi_errmsg());
        goto out;
    }
    srv_http_params hpp = {.host = a.host, .port = a.port, .api_key = a.api_key, .metrics = a.metrics,
                           .max_body = a.max_body, .max_header = SERVE_MAX_HEADER,
                           .max_conn = (unsigned)(a.parallel + a.queue + 64), .idle_timeout = (unsigned)a.idle_timeout};
    if (srv_http_start(&hpp, e, &api, &h) != MI_OK) {
        fprintf(stderr, "minfer: %s\n", mi_errmsg());
        goto out;
    }
    if (!loopback(a.host) && !a.api_key)
        fprintf(stderr, "minfer serve: warning: listening on %s without an API key (--api-key)\n", a.host);
    fprintf(stderr, "minfer serve: %s as '%s': %d sequences x %lld positions, queue %d, %s%s\n", a.model, id, a.parallel,
            (long long)a.n_ctx, a.queue, a.api_key ? "API key required" : "no API key", a.metrics ? ", /metrics" : "");
    fprintf(stderr, "minfer serve: listening on http://%s%s%s:%d\n", strchr(a.host, ':') ? "[" : "", a.host,
            strchr(a.host, ':') ? "]" : "", srv_http_port(h));
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "minfer serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
out:
    if (h) srv_http_quiesce(h);
    if (e) engine_stop(e);    /* every open request ends (503): their threads send the last word and return */
    if (h && !srv_http_drain(h, 5000)) fprintf(stderr, "minfer serve: some requests had not ended after 5 s: closing them\n");
    srv_http_stop(h);         /* then the connections close and their threads are joined */
    engine_free(e);
    tok_free(tk);
    mi_model_free(m);
    return rc;
}

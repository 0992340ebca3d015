/* libmicrohttpd glue (http.h): the route table, the API key, bounded bodies, JSON answers and
 * server-sent events. Each connection runs on its own thread: a handler may block on its
 * request's channel, and a stream's reader callback blocks until the engine has more text. */
#include "server/http.h"
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <time.h>
#include <unistd.h>

struct srv_http {
    srv_http_params p;
    srv_engine *e;
    const api_ctx *api;
    size_t key_len;
    struct MHD_Daemon *d;
    atomic_ullong next_id;
    unsigned long long id_salt;
    atomic_int in_flight;        /* requests begun and not completed (their last bytes not yet sent) */
};

typedef enum { R_HEALTH, R_MODELS, R_COMPLETIONS, R_CHAT, R_METRICS } route;

static const struct {
    const char *path, *method;
    route rt;
} ROUTES[] = {
    {"/health", "GET", R_HEALTH},
    {"/v1/models", "GET", R_MODELS},
    {"/v1/completions", "POST", R_COMPLETIONS},
    {"/v1/chat/completions", "POST", R_CHAT},
    {"/metrics", "GET", R_METRICS},
};

/* One request's state across libmicrohttpd's calls of the handler. */
typedef struct {
    route rt;
    char *body;
    size_t len, cap;
    bool too_big;   /* the body passed max_body: the rest is read and dropped, then 413 */
} conn_req;

bool srv_key_equal(const char *given, size_t given_len, const char *want, size_t want_len) {
    volatile unsigned char d = given_len != want_len;
    for (size_t i = 0; i < want_len; i++) d |= (unsigned char)(want[i] ^ (i < given_len ? given[i] : 0));
    return d == 0;
}

/* ---- answers ---- */

static enum MHD_Result send_body(struct MHD_Connection *c, int status, char *body, const char *type, const char *allow) {
    if (!body) return MHD_NO;   /* out of memory: drop the connection */
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, const api_err *e, const char *allow) {
    return send_body(c, e->status, api_error_json(e), "application/json", allow);
}

static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *code, const char *fmt, const char *arg) {
    api_err e;
    api_err_set(&e, status, code, NULL, fmt, arg);
    return send_error(c, &e, NULL);
}

static void make_id(srv_http *h, api_kind kind, char *out, size_t cap) {
    unsigned long long n = atomic_fetch_add(&h->next_id, 1) ^ h->id_salt;
    snprintf(out, cap, "%s-%016llx", kind == API_CHAT ? "chatcmpl" : "cmpl", n);
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* ---- streaming ---- */

typedef struct {
    srv_http *h;
    srv_req *r;
    api_kind kind;
    bool include_usage, began, ended;
    int sock;
    char id[48];
    long long created;
    size_t sent;                 /* bytes of the request's text already sent */
    char *out;                   /* events formatted, not yet handed to libmicrohttpd [out_off, out_len) */
    size_t out_len, out_off, out_cap;
} stream_ctx;

static bool out_put(stream_ctx *s, const char *p, size_t n) {
    if (s->out_len + n > s->out_cap) {
        size_t cap = s->out_cap ? s->out_cap : 1024;
        while (cap < s->out_len + n) cap *= 2;
        char *o = realloc(s->out, cap);
        if (!o) return false;
        s->out = o;
        s->out_cap = cap;
    }
    memcpy(s->out + s->out_len, p, n);
    s->out_len += n;
    return true;
}

/* "data: JSON\n\n" (takes json) */
static bool event(stream_ctx *s, char *json) {
    bool ok = json && out_put(s, "data: ", 6) && out_put(s, json, strlen(json)) && out_put(s, "\n\n", 2);
    free(json);
    return ok;
}

/* Wait for the engine and format what it made into s->out. false: the client went away or
 * memory ran out (the stream ends with an error: the connection closes). */
static bool stream_refill(stream_ctx *s) {
    s->out_len = s->out_off = 0;
    const char *model = s->h->api->model;
    if (!s->began) {   /* chat's first chunk names the role, as OpenAI's does */
        s->began = true;
        if (s->kind == API_CHAT) return event(s, api_chunk_json(s->kind, s->id, s->created, model, "", 0, true, NULL, 0, 0));
    }
    if (req_wait(s->r, s->sent, s->sock) < 0) {
        engine_cancel(s->h->e, s->r);
        return false;
    }
    srv_req *r = s->r;
    pthread_mutex_lock(&r->mu);
    const size_t len = r->len;
    char *delta = len > s->sent ? strndup(r->text + s->sent, len - s->sent) : NULL;
    const srv_finish f = r->finish;
    const int64_t n_gen = r->n_gen;
    api_err err = {0};
    if (f == SRV_FAILED) api_err_set(&err, r->error_status, r->error_status == 503 ? "unavailable" : "internal_error", NULL, "%s", r->error);
    pthread_mutex_unlock(&r->mu);
    bool ok = true;
    if (len > s->sent) {
        ok = delta && event(s, api_chunk_json(s->kind, s->id, s->created, model, delta, len - s->sent, false, NULL, 0, 0));
        free(delta);
        s->sent = len;
    }
    if (ok && f != SRV_RUNNING) {
        if (f == SRV_FAILED) {
            ok = event(s, api_error_json(&err));
        } else {
            const char *why = f == SRV_LENGTH ? "length" : "stop";
            ok = event(s, api_chunk_json(s->kind, s->id, s->created, model, "", 0, false, why, r->n_prompt, n_gen));
            if (ok && s->include_usage)
                ok = event(s, api_usage_chunk_json(s->kind, s->id, s->created, model, r->n_prompt, n_gen));
        }
        ok = ok && out_put(s, "data: [DONE]\n\n", 14);
        s->ended = true;
    }
    return ok;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *s = cls;
    while (s->out_off == s->out_len) {
        if (s->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!stream_refill(s)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = s->out_len - s->out_off;
    if (n > max) n = max;
    memcpy(buf, s->out + s->out_off, n);
    s->out_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_ctx *s = cls;
    if (!s->ended) engine_cancel(s->h->e, s->r);   /* closed before the end: its sequence goes */
    req_release(s->r);
    free(s->out);
    free(s);
}

/* ---- generation requests ---- */

static enum MHD_Result generate(srv_http *h, struct MHD_Connection *c, api_kind kind, conn_req *cr) {
    api_request q;
    api_err err;
    if (api_parse(kind, cr->body ? cr->body : "", cr->len, h->api, &q, &err)) return send_error(c, &err, NULL);
    srv_req *r = req_new();
    if (!r) {
        api_request_free(&q);
        return fail(c, 500, "internal_error", "%s", "out of memory or file descriptors");
    }
    /* the request takes the prompt and stop strings over */
    r->prompt = q.prompt;
    r->n_prompt = q.n_prompt;
    r->max_tokens = q.max_tokens;
    r->sp = q.sp;
    r->n_stop = q.n_stop;
    memcpy(r->stop, q.stop, sizeof r->stop);
    const int rc = engine_submit(h->e, r);
    if (rc) {
        req_release(r);
        return fail(c, rc, "queue_full", "%s", "the server's queue is full: try again later");
    }
    char id[48];
    make_id(h, kind, id, sizeof id);
    const long long created = (long long)time(NULL);
    const int sock = conn_fd(c);
    if (q.stream) {
        stream_ctx *s = calloc(1, sizeof *s);
        struct MHD_Response *resp = s ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free) : NULL;
        if (!resp) {
            engine_cancel(h->e, r);
            req_release(r);
            free(s);
            return MHD_NO;
        }
        *s = (stream_ctx){.h = h, .r = r, .kind = kind, .include_usage = q.include_usage, .sock = sock, .created = created};
        memcpy(s->id, id, sizeof id);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);   /* stream_free runs when libmicrohttpd is done with it */
        return ret;
    }
    /* a whole answer: wait for the end, or for the client to go */
    for (;;) {
        pthread_mutex_lock(&r->mu);
        const bool done = r->finish != SRV_RUNNING;
        const size_t len = r->len;
        pthread_mutex_unlock(&r->mu);
        if (done) break;
        if (req_wait(r, len, sock) < 0) {
            engine_cancel(h->e, r);
            req_release(r);
            return MHD_NO;
        }
    }
    enum MHD_Result ret;
    if (r->finish == SRV_FAILED) {
        ret = fail(c, r->error_status, r->error_status == 503 ? "unavailable" : "internal_error", "%s", r->error);
    } else {
        char *body = api_answer_json(kind, id, created, h->api->model, r->text ? r->text : "", r->len,
                                     r->finish == SRV_LENGTH ? "length" : "stop", r->n_prompt, r->n_gen);
        ret = send_body(c, 200, body, "application/json", NULL);
    }
    req_release(r);
    return ret;
}

/* ---- the handler ---- */

/* Route, method and key, from the header alone: these answers need no body. 0: go on. */
static int check_head(srv_http *h, struct MHD_Connection *c, const char *url, const char *method, conn_req *cr,
                      enum MHD_Result *ret) {
    int found = -1;
    const char *allow = NULL;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        if (strcmp(url, ROUTES[i].path)) continue;
        if (ROUTES[i].rt == R_METRICS && !h->p.metrics) continue;
        allow = ROUTES[i].method;
        if (!strcmp(method, ROUTES[i].method)) found = (int)i;
    }
    if (found < 0 && !allow) {
        *ret = fail(c, 404, "not_found", "no route %.200s", url);
        return 1;
    }
    if (found < 0) {
        api_err e;
        api_err_set(&e, 405, "method_not_allowed", NULL, "%.200s wants %s", url, allow);
        *ret = send_error(c, &e, allow);
        return 1;
    }
    cr->rt = ROUTES[found].rt;
    if (h->p.api_key && cr->rt != R_HEALTH) {
        const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        const bool bearer = a && !strncasecmp(a, "Bearer ", 7);
        const char *k = bearer ? a + 7 : "";
        if (!bearer || !srv_key_equal(k, strlen(k), h->p.api_key, h->key_len)) {
            *ret = fail(c, 401, "invalid_api_key", "%s", a ? "the API key is not valid" : "an API key is required (Authorization: Bearer KEY)");
            return 1;
        }
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {   /* refused before any of it is read */
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (*end || n > h->p.max_body) {
            char lim[32];
            snprintf(lim, sizeof lim, "%zu", h->p.max_body);
            *ret = fail(c, 413, "body_too_large", "the request body is over the limit of %s bytes", lim);
            return 1;
        }
    }
    return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv_http *h = cls;
    conn_req *cr = *con_cls;
    if (!cr) {   /* first call: the header is in, the body is not */
        cr = calloc(1, sizeof *cr);
        if (!cr) return MHD_NO;
        *con_cls = cr;
        atomic_fetch_add(&h->in_flight, 1);
        enum MHD_Result ret;
        if (check_head(h, c, url, method, cr, &ret)) return ret;
        if (cr->rt == R_COMPLETIONS || cr->rt == R_CHAT) return MHD_YES;   /* the body comes next */
    }
    if (*upload_size) {
        const size_t n = *upload_size;
        *upload_size = 0;
        if (cr->too_big || cr->len + n > h->p.max_body) {   /* a body without Content-Length (chunked) */
            cr->too_big = true;
            free(cr->body);
            cr->body = NULL;
            cr->len = cr->cap = 0;
            return MHD_YES;
        }
        if (cr->len + n + 1 > cr->cap) {
            size_t cap = cr->cap ? cr->cap : 4096;
            while (cap < cr->len + n + 1) cap *= 2;
            char *b = realloc(cr->body, cap);
            if (!b) return MHD_NO;
            cr->body = b;
            cr->cap = cap;
        }
        memcpy(cr->body + cr->len, upload, n);
        cr->len += n;
        return MHD_YES;
    }
    if (cr->too_big) {
        char lim[32];
        snprintf(lim, sizeof lim, "%zu", h->p.max_body);
        return fail(c, 413, "body_too_large", "the request body is over the limit of %s bytes", lim);
    }
    switch (cr->rt) {
    case R_HEALTH: return send_body(c, 200, strdup("{\"status\":\"ok\"}"), "application/json", NULL);
    case R_MODELS: return send_body(c, 200, api_models_json(h->api->model, (long long)time(NULL)), "application/json", NULL);
    case R_METRICS: {
        srv_metrics m;
        engine_metrics(h->e, &m);
        return send_body(c, 200, metrics_format(&m, srv_now(), h->api->model), "text/plain; version=0.0.4; charset=utf-8", NULL);
    }
    case R_COMPLETIONS: return generate(h, c, API_COMPLETION, cr);
    case R_CHAT: return generate(h, c, API_CHAT, cr);
    }
    return MHD_NO;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_http *h = cls;
    conn_req *cr = *con_cls;
    if (!cr) return;
    atomic_fetch_sub(&h->in_flight, 1);
    free(cr->body);
    free(cr);
    *con_cls = NULL;
}

static void on_log(void *cls, const char *fmt, va_list ap) {
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') line[--n] = 0;
    fprintf(stderr, "minfer serve: http: %s\n", line);
}

mi_status srv_http_start(const srv_http_params *p, srv_engine *e, const api_ctx *api, srv_http **out) {
    *out = NULL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", p->port);
    int gai = getaddrinfo(p->host, port, &hints, &ai);
    if (gai) return mi_err(MI_ERR_INVALID, "--host %s: %s", p->host, gai_strerror(gai));
    srv_http *h = calloc(1, sizeof *h);
    if (!h) {
        freeaddrinfo(ai);
        return mi_err(MI_ERR_NOMEM, "out of memory");
    }
    h->p = *p;
    h->e = e;
    h->api = api;
    h->key_len = p->api_key ? strlen(p->api_key) : 0;
    h->id_salt = (unsigned long long)time(NULL) * 0x9E3779B97F4A7C15ull ^ (unsigned long long)getpid();
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* the logger first: libmicrohttpd logs with its own until it has read that option */
    h->d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_log, h,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT, p->max_conn,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, p->max_header, MHD_OPTION_CONNECTION_TIMEOUT,
                            p->idle_timeout, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        free(h);
        return mi_err(MI_ERR_IO, "cannot listen on %s port %d (in use, or not an address of this host)", p->host, p->port);
    }
    *out = h;
    return MI_OK;
}

int srv_http_port(const srv_http *h) {
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    return di ? di->port : -1;
}

void srv_http_quiesce(srv_http *h) {
    MHD_socket s = MHD_quiesce_daemon(h->d);
    if (s != MHD_INVALID_SOCKET) close(s);
}

bool srv_http_drain(srv_http *h, int ms) {
    const struct timespec tick = {0, 10 * 1000 * 1000};
    for (int waited = 0; h && atomic_load(&h->in_flight) > 0; waited += 10) {
        if (waited >= ms) return false;
        nanosleep(&tick, NULL);
    }
    return true;
}

void srv_http_stop(srv_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->d);
    free(h);
}

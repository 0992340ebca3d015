/* The HTTP side of `minfer serve`, on libmicrohttpd: routes, the API key, body and header
 * bounds, JSON answers and server-sent events. A connection has its own thread (libmicrohttpd's
 * thread-per-connection mode), which waits on its request's channel (engine.h) and on its
 * socket, so a client that goes away cancels its request at once. */
#ifndef SRV_HTTP_H
#define SRV_HTTP_H
#include <stdbool.h>
#include <stddef.h>
#include "server/api.h"
#include "server/engine.h"

typedef struct {
    const char *host;            /* numeric address or name to listen on */
    int port;                    /* 0: any free port (srv_http_port says which) */
    const char *api_key;         /* NULL: no key; else every route but /health wants "Authorization: Bearer KEY" */
    bool metrics;                /* serve GET /metrics */
    size_t max_body;             /* bytes a request body may hold; more: 413 */
    size_t max_header;           /* bytes of a request's header block (libmicrohttpd's per-connection memory) */
    unsigned max_conn;           /* connections at once (each a thread) */
    unsigned idle_timeout;       /* seconds an idle connection is kept */
} srv_http_params;

typedef struct srv_http srv_http;

/* Listen and serve; the engine and api context must outlive the server. */
mi_status srv_http_start(const srv_http_params *p, srv_engine *e, const api_ctx *api, srv_http **out);
int srv_http_port(const srv_http *h);
/* Stop taking connections (the listening socket closes); open ones go on. */
void srv_http_quiesce(srv_http *h);
/* Wait until every request begun has completed (its last bytes sent: after engine_stop, the
 * 503 or the stream's error event and [DONE]), at most ms; false if some had not. */
bool srv_http_drain(srv_http *h, int ms);
/* Close every connection and join their threads. */
void srv_http_stop(srv_http *h);

/* Constant-time comparison of a presented key with the expected one: the time depends on the
 * expected key's length only. */
bool srv_key_equal(const char *given, size_t given_len, const char *want, size_t want_len);

#endif

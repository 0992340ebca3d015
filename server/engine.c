/* The engine thread (engine.h): admission from the wait queue, prompt pieces, one
 * mi_batch_step at a time, and per token: end-of-generation, stop strings, max_tokens, and
 * the text handed to the request's channel. Every mi_batch call is made on this thread. */
#include "server/engine.h"
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct srv_engine {
    mi_batch *b;
    const mi_tokenizer *tk;
    srv_engine_params p;
    pthread_t thread;
    bool started;
    char *piece;                 /* one token's text [piece_cap] */
    size_t piece_cap;
    /* engine thread only: the admitted requests, in admission order */
    srv_req **active;            /* [parallel] */
    int n_active;
    srv_req **cancelled;         /* [parallel + queue_max]: taken out of the queue, ended after unlocking */
    /* guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_req *q_head, *q_tail;    /* the wait queue */
    int q_len;
    int n_admitted;              /* requests holding or about to hold a sequence */
    bool wake;                   /* a cancel arrived: look at the queue and the batch */
    bool stopping;
    srv_metrics met;
};

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- requests and their channel ---- */

srv_req *req_new(void) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->efd < 0) {
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    atomic_init(&r->refs, 1);
    atomic_init(&r->cancel, false);
    r->seq = -1;
    return r;
}

void req_release(srv_req *r) {
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    close(r->efd);
    pthread_mutex_destroy(&r->mu);
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->text);
    free(r->gen);
    free(r);
}

static void req_signal(srv_req *r) {
    const uint64_t one = 1;
    /* the counter only saturates after 2^64 - 2 unread signals: a failed write loses nothing */
    ssize_t w = write(r->efd, &one, sizeof one);
    (void)w;
}

int req_wait(srv_req *r, size_t have, int sock) {
    for (;;) {
        pthread_mutex_lock(&r->mu);
        const bool ready = r->len > have || r->finish != SRV_RUNNING;
        pthread_mutex_unlock(&r->mu);
        if (ready) return 0;
        /* POLLRDHUP: the peer closed its side; data it sends (a pipelined request) is not a hang-up */
        struct pollfd fds[2] = {{.fd = r->efd, .events = POLLIN}, {.fd = sock, .events = POLLRDHUP}};
        int n = poll(fds, sock >= 0 ? 2 : 1, -1);
        if (n < 0 && errno != EINTR) return -1;
        if (sock >= 0 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) return -1;
        if (fds[0].revents & POLLIN) {
            uint64_t v;
            ssize_t rd = read(r->efd, &v, sizeof v);
            (void)rd;
        }
    }
}

/* append to the channel's text (engine thread) */
static bool chan_append(srv_req *r, const char *p, size_t n) {
    if (!n) return true;
    bool ok = true;
    pthread_mutex_lock(&r->mu);
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 256;
        while (cap < r->len + n + 1) cap *= 2;
        char *t = realloc(r->text, cap);
        if (t) {
            r->text = t;
            r->cap = cap;
        } else {
            ok = false;
        }
    }
    if (ok) {
        memcpy(r->text + r->len, p, n);
        r->len += n;
        r->text[r->len] = 0;
    }
    pthread_mutex_unlock(&r->mu);
    req_signal(r);
    return ok;
}

/* ---- stop strings ---- */

/* Earliest offset >= from where a stop string starts in gen, or SIZE_MAX. */
static size_t stop_find(const srv_req *r, size_t from) {
    size_t best = SIZE_MAX;
    if (from >= r->gen_len) return best;   /* gen may still be NULL: memmem wants a buffer */
    for (int i = 0; i < r->n_stop; i++) {
        const char *hit = memmem(r->gen + from, r->gen_len - from, r->stop[i], strlen(r->stop[i]));
        if (hit && (size_t)(hit - r->gen) < best) best = (size_t)(hit - r->gen);
    }
    return best;
}

/* Earliest offset >= from whose tail of gen is a proper prefix of a stop string: text from
 * there may still become a stop string, so it is held back until it cannot. */
static size_t stop_holdback(const srv_req *r, size_t from) {
    for (size_t p = from; p < r->gen_len; p++) {
        const size_t tail = r->gen_len - p;
        for (int i = 0; i < r->n_stop; i++) {
            const size_t sl = strlen(r->stop[i]);
            if (tail < sl && !memcmp(r->gen + p, r->stop[i], tail)) return p;
        }
    }
    return r->gen_len;
}

/* Hand the text that can no longer turn into a stop string to the channel (all of it when
 * final). Returns true when a stop string ended the text. */
static bool publish(srv_req *r, bool final, bool *oom) {
    size_t end = r->gen_len;
    bool hit = false;
    if (r->n_stop) {
        const size_t s = stop_find(r, r->published);
        if (s != SIZE_MAX) {
            end = s;
            hit = true;
        } else if (!final) {
            end = stop_holdback(r, r->published);
        }
    }
    if (end > r->published) {
        if (!chan_append(r, r->gen + r->published, end - r->published)) *oom = true;
        r->published = end;
    }
    return hit;
}

static bool gen_append(srv_req *r, const char *p, size_t n) {
    if (!n) return true;   /* a token may print nothing yet (half a character) */
    if (r->gen_len + n > r->gen_cap) {
        size_t cap = r->gen_cap ? r->gen_cap : 256;
        while (cap < r->gen_len + n) cap *= 2;
        char *g = realloc(r->gen, cap);
        if (!g) return false;
        r->gen = g;
        r->gen_cap = cap;
    }
    memcpy(r->gen + r->gen_len, p, n);
    r->gen_len += n;
    return true;
}

/* ---- the engine thread ---- */

static int end_index(srv_finish f) {
    switch (f) {
    case SRV_STOP: return SRV_END_STOP;
    case SRV_LENGTH: return SRV_END_LENGTH;
    case SRV_CANCELLED: return SRV_END_CANCELLED;
    default: return SRV_END_FAILED;
    }
}

/* The request's last word: its finish (and error) into the channel, its sequence back to
 * the pool, the engine's reference dropped. Engine thread; e->mu not held. */
static void req_end(srv_engine *e, srv_req *r, srv_finish f, int status, const char *why) {
    if (r->seq >= 0) mi_batch_seq_free(e->b, r->seq);   /* its KV blocks are free for the next step */
    r->seq = -1;
    pthread_mutex_lock(&r->mu);
    r->finish = f;
    if (f == SRV_FAILED) {
        r->error_status = status;
        snprintf(r->error, sizeof r->error, "%s", why ? why : "internal error");
    }
    pthread_mutex_unlock(&r->mu);
    req_signal(r);
    pthread_mutex_lock(&e->mu);
    e->met.finished[end_index(f)]++;
    pthread_mutex_unlock(&e->mu);
    req_release(r);
}

/* One generated token of r: returns the finish it caused (SRV_RUNNING: go on). */
static srv_finish on_token(srv_engine *e, srv_req *r, int32_t t) {
    bool oom = false;
    if (tok_is_eog(e->tk, t)) {   /* as `minfer run`: the end token is neither printed nor counted */
        size_t w = tok_detok_flush(&r->dt, e->piece, e->piece_cap);
        if (!gen_append(r, e->piece, w)) return SRV_FAILED;
        publish(r, true, &oom);
        return oom ? SRV_FAILED : SRV_STOP;
    }
    pthread_mutex_lock(&r->mu);   /* n_gen is part of the channel: the HTTP side reads it under mu */
    r->n_gen++;
    pthread_mutex_unlock(&r->mu);
    size_t w = tok_detok_push(e->tk, &r->dt, t, e->piece, e->piece_cap);
    if (!gen_append(r, e->piece, w)) return SRV_FAILED;
    const bool last = r->n_gen >= r->max_tokens;
    if (last) {   /* bytes of an unfinished character go out as they are, as `minfer run` prints them */
        w = tok_detok_flush(&r->dt, e->piece, e->piece_cap);
        if (!gen_append(r, e->piece, w)) return SRV_FAILED;
    }
    if (publish(r, last, &oom)) return SRV_STOP;
    if (oom) return SRV_FAILED;
    return last ? SRV_LENGTH : SRV_RUNNING;
}

/* Take cancelled requests out of the wait queue (their clients are gone: they must not hold
 * a place), then move queued requests into the batch while it has room. e->mu held; the
 * cancelled ones are ended by the caller outside the lock. */
static void admit(srv_engine *e, int *n_cancelled) {
    srv_req **pp = &e->q_head, *last = NULL;
    while (*pp) {
        srv_req *r = *pp;
        if (atomic_load(&r->cancel)) {
            *pp = r->next;
            r->next = NULL;
            e->q_len--;
            e->n_admitted--;
            e->cancelled[(*n_cancelled)++] = r;
        } else {
            last = r;
            pp = &r->next;
        }
    }
    e->q_tail = last;
    while (e->q_head && e->n_active < e->p.parallel) {
        srv_req *r = e->q_head;
        e->q_head = r->next;
        if (!e->q_head) e->q_tail = NULL;
        e->q_len--;
        r->next = NULL;
        e->active[e->n_active++] = r;
    }
}

static void drop_active(srv_engine *e, int i) {
    memmove(&e->active[i], &e->active[i + 1], (size_t)(e->n_active - i - 1) * sizeof *e->active);
    e->n_active--;
    pthread_mutex_lock(&e->mu);
    e->n_admitted--;
    pthread_mutex_unlock(&e->mu);
}

/* Open sequences for new requests, end cancelled ones, queue prompt pieces. */
static void prepare_step(srv_engine *e, int64_t *prompt_tokens) {
    for (int i = 0; i < e->n_active;) {
        srv_req *r = e->active[i];
        if (atomic_load(&r->cancel)) {
            drop_active(e, i);
            req_end(e, r, SRV_CANCELLED, 0, NULL);
            continue;
        }
        if (r->seq < 0 && mi_batch_seq_new(e->b, &r->sp, &r->seq) != MI_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", mi_errmsg());
            r->seq = -1;
            drop_active(e, i);
            req_end(e, r, SRV_FAILED, 500, why);
            continue;
        }
        i++;
    }
    /* Prompt pieces, oldest request first, at most step_prompt tokens in all (one piece always
     * goes, so a step is never empty while a prompt waits): a long prompt does not stall the
     * decode tokens of the others for more than one such step. */
    int64_t used = 0;
    for (int i = 0; i < e->n_active; i++) {
        srv_req *r = e->active[i];
        if (r->fed >= r->n_prompt || mi_batch_seq_queued(e->b, r->seq) > 0) continue;
        int64_t piece = r->n_prompt - r->fed;
        if (piece > e->p.step_prompt) piece = e->p.step_prompt;
        if (used > 0 && used + piece > e->p.step_prompt) break;
        if (mi_batch_seq_add(e->b, r->seq, r->prompt + r->fed, piece) != MI_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", mi_errmsg());
            drop_active(e, i);
            req_end(e, r, SRV_FAILED, 500, why);
            i--;
            continue;
        }
        r->fed += piece;
        used += piece;
    }
    *prompt_tokens = used;
}

/* One step and its tokens. Returns the completion tokens it made. */
static uint64_t run_step(srv_engine *e) {
    int64_t prompt_tokens = 0;
    prepare_step(e, &prompt_tokens);
    if (!e->n_active) return 0;
    int n_run = 0;
    if (mi_batch_step(e->b, 0, &n_run) != MI_OK) {   /* the whole step failed: so does each of its requests */
        char why[256];
        snprintf(why, sizeof why, "%s", mi_errmsg());
        fprintf(stderr, "minfer serve: %s\n", why);
        while (e->n_active) {
            srv_req *r = e->active[e->n_active - 1];
            drop_active(e, e->n_active - 1);
            req_end(e, r, SRV_FAILED, 500, why);
        }
        return 0;
    }
    uint64_t made = 0;
    for (int i = 0; i < e->n_active;) {
        srv_req *r = e->active[i];
        srv_finish f = SRV_RUNNING;
        char why[256] = "";
        int32_t t;
        if (mi_batch_seq_status(e->b, r->seq) != MI_OK) {
            snprintf(why, sizeof why, "%s", mi_errmsg());
            f = SRV_FAILED;
        } else if (r->fed < r->n_prompt || mi_batch_seq_next(e->b, r->seq, &t) != MI_OK) {
            mi_err_clear();   /* still in its prompt: nothing drawn yet */
        } else {
            const int64_t before = r->n_gen;
            f = on_token(e, r, t);
            made += (uint64_t)(r->n_gen - before);
            if (f == SRV_FAILED) snprintf(why, sizeof why, "out of memory for the answer's text");
            else if (f == SRV_RUNNING && mi_batch_seq_add(e->b, r->seq, &t, 1) != MI_OK) {
                snprintf(why, sizeof why, "%s", mi_errmsg());
                f = SRV_FAILED;
            }
        }
        if (f == SRV_RUNNING) {
            i++;
            continue;
        }
        drop_active(e, i);
        req_end(e, r, f, 500, why);
    }
    pthread_mutex_lock(&e->mu);
    e->met.steps++;
    e->met.prompt_tokens += (uint64_t)prompt_tokens;
    e->met.gen_tokens += made;
    metrics_add_tokens(&e->met, made, srv_now());
    pthread_mutex_unlock(&e->mu);
    return made;
}

static void *engine_main(void *arg) {
    srv_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        /* sleep while there is nothing to run: no busy waiting between requests */
        while (!e->stopping && !e->n_active && !e->q_head && !e->wake) pthread_cond_wait(&e->cv, &e->mu);
        e->wake = false;
        if (e->stopping) break;
        int n_cancelled = 0;
        admit(e, &n_cancelled);
        e->met.queue = e->q_len;
        pthread_mutex_unlock(&e->mu);
        for (int i = 0; i < n_cancelled; i++) req_end(e, e->cancelled[i], SRV_CANCELLED, 0, NULL);
        if (e->n_active) run_step(e);
        pthread_mutex_lock(&e->mu);
        e->met.running = e->n_active;
        e->met.queue = e->q_len;
        e->met.kv_used = mi_batch_kv_blocks(e->b) - mi_batch_kv_free_blocks(e->b);
    }
    /* shutting down: every request ends, queued ones first */
    srv_req *q = e->q_head;
    e->q_head = e->q_tail = NULL;
    e->q_len = 0;
    pthread_mutex_unlock(&e->mu);
    while (q) {
        srv_req *n = q->next;
        req_end(e, q, SRV_FAILED, 503, "the server is shutting down");
        q = n;
    }
    while (e->n_active) {
        srv_req *r = e->active[e->n_active - 1];
        drop_active(e, e->n_active - 1);
        req_end(e, r, SRV_FAILED, 503, "the server is shutting down");
    }
    return NULL;
}

mi_status engine_new(mi_model *m, const mi_tokenizer *tk, const srv_engine_params *p, srv_engine **out) {
    *out = NULL;
    srv_engine *e = calloc(1, sizeof *e);
    if (!e) return mi_err(MI_ERR_NOMEM, "out of memory");
    e->p = *p;
    e->tk = tk;
    e->piece_cap = tok_max_piece_len(tk) + 8;
    e->piece = malloc(e->piece_cap);
    e->active = calloc((size_t)p->parallel, sizeof *e->active);
    e->cancelled = calloc((size_t)p->parallel + (size_t)p->queue_max, sizeof *e->cancelled);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (!e->piece || !e->active || !e->cancelled) {
        engine_free(e);
        return mi_err(MI_ERR_NOMEM, "out of memory");
    }
    mi_batch_params bp;
    mi_batch_params_default(&bp);
    bp.n_seq_max = p->parallel;
    bp.kv_tokens = (int64_t)p->parallel * p->n_ctx;
    bp.kv_type = p->kv_type;
    bp.n_threads = p->n_threads;
    bp.backend = p->backend;
    bp.no_logits = true;   /* the server reads tokens, never logits: greedy and top-k steps end where the logits are */
    mi_status st = mi_batch_new(m, &bp, &e->b);
    if (st != MI_OK) {
        engine_free(e);
        return st;
    }
    e->met.parallel = p->parallel;
    e->met.queue_max = p->queue_max;
    e->met.n_ctx = p->n_ctx;
    e->met.block = bp.block;
    e->met.kv_total = mi_batch_kv_blocks(e->b);
    if (pthread_create(&e->thread, NULL, engine_main, e)) {
        engine_free(e);
        return mi_err(MI_ERR_NOMEM, "cannot start the engine thread");
    }
    e->started = true;
    *out = e;
    return MI_OK;
}

void engine_stop(srv_engine *e) {
    if (!e->started) return;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->started = false;
}

void engine_free(srv_engine *e) {
    if (!e) return;
    engine_stop(e);
    mi_batch_free(e->b);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e->active);
    free(e->cancelled);
    free(e->piece);
    free(e);
}

int engine_submit(srv_engine *e, srv_req *r) {
    pthread_mutex_lock(&e->mu);
    /* room: parallel sequences plus queue_max waiting */
    if (e->stopping || e->n_admitted >= e->p.parallel + e->p.queue_max) {
        if (!e->stopping) e->met.rejected++;
        pthread_mutex_unlock(&e->mu);
        return 503;
    }
    atomic_fetch_add(&r->refs, 1);
    r->next = NULL;
    if (e->q_tail) e->q_tail->next = r;
    else e->q_head = r;
    e->q_tail = r;
    e->q_len++;
    e->n_admitted++;
    e->met.queue = e->q_len;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void engine_cancel(srv_engine *e, srv_req *r) {
    atomic_store(&r->cancel, true);
    pthread_mutex_lock(&e->mu);
    e->wake = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void engine_metrics(srv_engine *e, srv_metrics *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->met;
    pthread_mutex_unlock(&e->mu);
}

/* The resident weight registry: one device copy per weight name, shared by every model
 * that registers the same name and size (a file loaded twice is uploaded once).
 * Entries are reference counted; a replaced entry goes to a retired list and is freed
 * only by mi7c_weights_free_retired(), never while a captured graph may use it. */
#include "phase7c_wiring/wiring7c.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

typedef struct wentry {
    char *name;
    void *dev;
    size_t size;
    int device;
    int refs;
    struct wentry *next;
} wentry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static wentry *g_active, *g_retired;
static mi7c_weight_stats g_st;

/* Upload in pieces so one call never pins the runtime's staging for a whole 1 GB tensor. */
#define UPLOAD_PIECE ((size_t)64 << 20)

static mi_status upload(void *dev, const void *host, size_t size, void *stream) {
    for (size_t off = 0; off < size; off += UPLOAD_PIECE) {
        size_t n = size - off < UPLOAD_PIECE ? size - off : UPLOAD_PIECE;
        MI_TRY(mi_cudev_h2d_async((char *)dev + off, (const char *)host + off, n, stream));
    }
    return mi_cudev_stream_sync(stream);
}

mi_status mi7c_weight_register(int device, const char *name, const void *host, size_t size, void *stream,
                               void **dev, bool *uploaded) {
    *dev = NULL;
    if (uploaded) *uploaded = false;
    if (!name || !*name || size == 0 || !host) return mi_err(MI_ERR_INVALID, "weight registry: bad entry '%s'", name ? name : "(null)");
    pthread_mutex_lock(&g_mu);
    wentry **pp = &g_active;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->device == device && !strcmp((*pp)->name, name)) break;
    wentry *e = *pp;
    if (e && e->size == size) {   /* idempotent: same name, same size */
        e->refs++;
        g_st.n_reuses++;
        *dev = e->dev;
        pthread_mutex_unlock(&g_mu);
        return MI_OK;
    }
    if (e) {   /* other size: the name moves to a new copy; the old one retires, unfreed */
        *pp = e->next;
        e->next = g_retired;
        g_retired = e;
        g_st.n_replaced++;
    }
    /* The upload runs under the registry lock: two threads registering the same new name
     * must not both upload it, and loads are serialized by the load guard anyway. */
    wentry *n = calloc(1, sizeof *n);
    mi_status st = n ? MI_OK : mi_err(MI_ERR_NOMEM, "weight registry: out of host memory");
    if (st == MI_OK) {
        n->name = strdup(name);
        if (!n->name) st = mi_err(MI_ERR_NOMEM, "weight registry: out of host memory");
    }
    if (st == MI_OK) st = mi_cudev_select(device);
    if (st == MI_OK) st = mi_cudev_malloc(&n->dev, size);
    if (st == MI_OK) {
        st = upload(n->dev, host, size, stream);
        if (st != MI_OK) {
            mi_cudev_free(n->dev);
            n->dev = NULL;
        }
    }
    if (st != MI_OK) {
        if (n) free(n->name);
        free(n);
        pthread_mutex_unlock(&g_mu);
        return mi_err_ctx(st, "uploading weight '%s' (%zu bytes)", name, size);
    }
    n->size = size;
    n->device = device;
    n->refs = 1;
    n->next = g_active;
    g_active = n;
    g_st.n_uploads++;
    g_st.bytes_uploaded += size;
    *dev = n->dev;
    if (uploaded) *uploaded = true;
    pthread_mutex_unlock(&g_mu);
    return MI_OK;
}

static void entry_free(wentry *e) {
    /* cudaFree waits for queued work on the device, so no kernel still reads it */
    mi_cudev_select(e->device);
    mi_cudev_free(e->dev);
    free(e->name);
    free(e);
}

void mi7c_weight_release(const char *name, void *dev) {
    if (!name || !dev) return;
    pthread_mutex_lock(&g_mu);
    for (wentry **pp = &g_active; *pp; pp = &(*pp)->next) {
        wentry *e = *pp;
        if (e->dev != dev || strcmp(e->name, name)) continue;
        if (--e->refs == 0) {
            *pp = e->next;
            entry_free(e);
        }
        pthread_mutex_unlock(&g_mu);
        return;
    }
    for (wentry *e = g_retired; e; e = e->next)
        if (e->dev == dev && !strcmp(e->name, name)) {
            if (e->refs > 0) e->refs--;   /* freed later, by mi7c_weights_free_retired */
            break;
        }
    pthread_mutex_unlock(&g_mu);
}

size_t mi7c_weights_free_retired(void) {
    size_t freed = 0;
    pthread_mutex_lock(&g_mu);
    for (wentry **pp = &g_retired; *pp;) {
        wentry *e = *pp;
        if (e->refs > 0) { pp = &e->next; continue; }
        *pp = e->next;
        freed += e->size;
        entry_free(e);
    }
    pthread_mutex_unlock(&g_mu);
    return freed;
}

void mi7c_weights_stats(mi7c_weight_stats *out) {
    pthread_mutex_lock(&g_mu);
    *out = g_st;
    out->n_entries = out->n_retired = 0;
    out->bytes = out->retired_bytes = 0;
    for (wentry *e = g_active; e; e = e->next) {
        out->n_entries++;
        out->bytes += e->size;
    }
    for (wentry *e = g_retired; e; e = e->next) {
        out->n_retired++;
        out->retired_bytes += e->size;
    }
    pthread_mutex_unlock(&g_mu);
}

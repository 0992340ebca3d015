/* Per-model CUDA placement, decided once when the model is loaded (hook model_loaded):
 * CUDA disabled, no device, or a model the CUDA op table cannot run wholly -> the model
 * runs on the CPU, with one log line that says why; otherwise every weight is uploaded
 * once into the resident registry (progress bar with GB/s) and the model holds one
 * reference to each copy until mi_model_free. */
#include "phase7c_wiring/wiring7c.h"
#include "common/core/mi_settings.h"
#include "common/core/mi_progress.h"
#include "common/gguf/gguf.h"
#include <pthread.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>
#include <time.h>
#include <sys/stat.h>

struct m7c_model {
    const mi_model *m;
    char label[128];
    bool on_cuda;
    bool upload_failed;       /* eligible, but the device did not take the weights */
    int device;
    char why[384];
    int n;
    char **names;             /* [n] GGUF tensor names */
    char **keys;              /* [n] registry names (file identity + tensor name) */
    void **dev;               /* [n] device copies */
    struct m7c_model *next;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static m7c_model *g_models;

m7c_model *m7c_model_find(const mi_model *m) {
    m7c_model *r = NULL;
    pthread_mutex_lock(&g_mu);
    for (m7c_model *x = g_models; x; x = x->next)
        if (x->m == m) { r = x; break; }
    pthread_mutex_unlock(&g_mu);
    return r;
}

bool m7c_model_resident(const m7c_model *ms, int *device, char *why, size_t n) {
    if (device) *device = ms->device;
    if (why && n) snprintf(why, n, "%s", ms->why);
    return ms->on_cuda;
}

void *m7c_model_weight(const m7c_model *ms, const char *name) {
    for (int i = 0; i < ms->n; i++)
        if (!strcmp(ms->names[i], name)) return ms->dev[i];
    return NULL;
}

const char *m7c_model_label(const m7c_model *ms) { return ms->label; }
bool m7c_model_upload_failed(const m7c_model *ms) { return ms->upload_failed; }

bool mi7c_model_on_cuda(const mi_model *m, char *why, size_t n) {
    m7c_model *ms = m7c_model_find(m);
    if (!ms) {
        if (why && n) snprintf(why, n, "no CUDA placement was made for this model");
        return false;
    }
    return m7c_model_resident(ms, NULL, why, n);
}

/* Tensors the graph can reference: every weight and bias (rope_freqs is ignored by the model). */
static bool wanted(const gguf_tensor_info *ti) {
    size_t l = strlen(ti->name);
    if (!strcmp(ti->name, "rope_freqs.weight")) return false;
    return (l > 7 && !strcmp(ti->name + l - 7, ".weight")) || (l > 5 && !strcmp(ti->name + l - 5, ".bias"));
}

static void release_all(m7c_model *ms) {
    for (int i = 0; i < ms->n; i++) {
        if (ms->dev && ms->dev[i]) mi7c_weight_release(ms->keys[i], ms->dev[i]);
        if (ms->names) free(ms->names[i]);
        if (ms->keys) free(ms->keys[i]);
    }
    free(ms->names);
    free(ms->keys);
    free(ms->dev);
    ms->names = ms->keys = NULL;
    ms->dev = NULL;
    ms->n = 0;
}

/* The progress bar: redrawn in place on a terminal, at most every 1%; a log file
 * gets only the closing summary line. */
static void progress(size_t done, size_t total, double t0, int *last_pct) {
    if (!isatty(2) || total == 0) return;
    int pct = (int)(100.0 * (double)done / (double)total);
    if (pct == *last_pct) return;
    *last_pct = pct;
    double dt = mi_now_s() - t0;
    char bar[31];
    int fill = pct * 30 / 100;
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\rcuda: weights [%s] %3d%%  %.2f/%.2f GiB  %.1f GB/s", bar, pct, done / 1073741824.0,
            total / 1073741824.0, dt > 0 ? done / dt / 1e9 : 0.0);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

static mi_status upload_all(m7c_model *ms, const mi_model *m, const char *path) {
    const gguf_file *f = mi_model_gguf(m);
    struct stat sb;
    char fid[96];
    if (stat(path, &sb) == 0)
        snprintf(fid, sizeof fid, "%llx:%llx:%llx:%llx.%lx", (unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino,
                 (unsigned long long)sb.st_size, (unsigned long long)sb.st_mtim.tv_sec, (unsigned long)sb.st_mtim.tv_nsec);
    else   /* no stat (odd path): the model's own identity; such a file is never shared */
        snprintf(fid, sizeof fid, "model-%p", (const void *)m);
    const int64_t nt = gguf_n_tensors(f);
    ms->names = calloc((size_t)nt + 1, sizeof *ms->names);
    ms->keys = calloc((size_t)nt + 1, sizeof *ms->keys);
    ms->dev = calloc((size_t)nt + 1, sizeof *ms->dev);
    if (!ms->names || !ms->keys || !ms->dev) return mi_err(MI_ERR_NOMEM, "out of host memory");
    size_t total = 0, fresh = 0;
    for (int64_t i = 0; i < nt; i++)
        if (wanted(gguf_tensor(f, i))) total += gguf_tensor(f, i)->nbytes;
    /* MINFER_CUDA_FAIL_UPLOAD=N: the N-th weight upload of each load fails (test switch) */
    long fail_at = 0;
    MI_TRY(mi_setting_int("MINFER_CUDA_FAIL_UPLOAD", 0, LONG_MAX, 0, &fail_at));
    void *stream = NULL;
    MI_TRY(mi_cudev_select(ms->device));
    MI_TRY(mi_cudev_stream_new(&stream));
    const double t0 = mi_now_s();
    size_t done = 0;
    int last_pct = -1;
    long n_up = 0;
    mi_status st = MI_OK;
    for (int64_t i = 0; i < nt && st == MI_OK; i++) {
        const gguf_tensor_info *ti = gguf_tensor(f, i);
        if (!wanted(ti)) continue;
        char key[MI_NAME_MAX + 128];
        snprintf(key, sizeof key, "%s/%s", fid, ti->name);
        ms->names[ms->n] = strdup(ti->name);
        ms->keys[ms->n] = strdup(key);
        if (!ms->names[ms->n] || !ms->keys[ms->n]) {
            st = mi_err(MI_ERR_NOMEM, "out of host memory");
            ms->n++;
            break;
        }
        if (fail_at > 0 && ++n_up == fail_at) {
            st = mi_err(MI_ERR_DEVICE, "injected failure of upload %ld ('%s', MINFER_CUDA_FAIL_UPLOAD=%ld)", fail_at,
                        ti->name, fail_at);
            ms->n++;
            break;
        }
        bool up = false;
        st = mi7c_weight_register(ms->device, key, ti->data, ti->nbytes, stream, &ms->dev[ms->n], &up);
        ms->n++;
        if (up) fresh += ti->nbytes;
        done += ti->nbytes;
        progress(done, total, t0, &last_pct);
    }
    mi_cudev_stream_free(stream);
    if (st != MI_OK) {
        if (isatty(2) && last_pct >= 0 && done < total) fputc('\n', stderr);
        return st;
    }
    const double dt = mi_now_s() - t0;
    mi_log("cuda: %s: %d weights resident on device %d, %.2f GiB (%.2f GiB uploaded in %.2f s, %.1f GB/s; %.2f GiB reused)",
           ms->label, ms->n, ms->device, total / 1073741824.0, fresh / 1073741824.0, dt,
           dt > 0 ? fresh / dt / 1e9 : 0.0, (total - fresh) / 1073741824.0);
    return MI_OK;
}

static int device_from_env(void) {
    long v = 0;
    if (mi_setting_int("MINFER_CUDA_DEVICE", 0, 1024, 0, &v) != MI_OK) {
        mi_err_clear();   /* the backend itself reports a bad value */
        return 0;
    }
    return (int)v;
}

void m7c_model_loaded(struct mi_model *m, const char *path) {
    m7c_model *ms = calloc(1, sizeof *ms);
    if (!ms) {
        mi_log("cuda: out of host memory: the model runs on the CPU");
        return;
    }
    ms->m = m;
    const char *base = strrchr(path, '/');
    snprintf(ms->label, sizeof ms->label, "%s", base ? base + 1 : path);
    ms->device = device_from_env();
    int ndev = 0;
    char err[256];
    /* loaded with backend cpu: asked for, not a fallback, so no log line and no device call */
    const bool cpu_only = mi_model_cpu_only(m);
    const bool disabled = !cpu_only && mi_setting_on("MINFER_DISABLE_CUDA");
    bool no_device = false;
    if (!cpu_only && !disabled) {
        mi_err_clear();   /* mi_cudev_count leaves its reason in the message */
        no_device = mi_cudev_count(&ndev) != MI_OK || ndev == 0;
    }
    if (cpu_only) {
        snprintf(ms->why, sizeof ms->why, "loaded with backend cpu (no weights uploaded)");
    } else if (disabled) {
        snprintf(ms->why, sizeof ms->why, "CUDA disabled by MINFER_DISABLE_CUDA=1");
    } else if (no_device) {
        snprintf(err, sizeof err, "%s", mi_errmsg());
        snprintf(ms->why, sizeof ms->why, "no CUDA device%s%s%s", err[0] ? " (" : "", err, err[0] ? ")" : "");
    } else if (ms->device >= ndev) {
        snprintf(ms->why, sizeof ms->why, "CUDA device %d does not exist (%d present)", ms->device, ndev);
    } else if (!mi7c_model_eligible(m, err, sizeof err)) {
        snprintf(ms->why, sizeof ms->why, "%s", err);
    } else {
        mi_status st = upload_all(ms, m, path);
        if (st == MI_OK) {
            ms->on_cuda = true;
        } else {
            snprintf(ms->why, sizeof ms->why, "weight upload failed: %s", mi_errmsg());
            ms->upload_failed = true;
            release_all(ms);
        }
    }
    mi_err_clear();
    /* one line says why; without a device the session's own "CUDA unavailable" line does */
    if (!ms->on_cuda && !no_device && !cpu_only) mi_log("cuda: %s runs wholly on the CPU: %s", ms->label, ms->why);
    pthread_mutex_lock(&g_mu);
    ms->next = g_models;
    g_models = ms;
    pthread_mutex_unlock(&g_mu);
}

void m7c_model_free(struct mi_model *m) {
    m7c_model *ms = NULL;
    pthread_mutex_lock(&g_mu);
    for (m7c_model **pp = &g_models; *pp; pp = &(*pp)->next)
        if ((*pp)->m == m) {
            ms = *pp;
            *pp = ms->next;
            break;
        }
    pthread_mutex_unlock(&g_mu);
    if (!ms) return;
    release_all(ms);
    free(ms);
}

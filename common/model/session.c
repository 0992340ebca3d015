/* A session: backends + scheduler + KV cache over one loaded model. Each decode call
 * builds the graph for its batch at the current position, runs it through the
 * scheduler and keeps the logits; later calls append to the same cache (multi-turn). */
#include "model_internal.h"
#include "../backend/hooks.h"
#include "../core/mi_progress.h"
#include "../core/mi_settings.h"
#include "../sampler/sampler.h"
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <stdio.h>
#include <stdint.h>
#include <limits.h>

/* A session's backends in priority order (the scheduler's): accelerators first, the host
 * (CPU) backend last, since leaves without an owner live in host memory and the scheduler
 * takes its last backend for them. Roles are found by host_memory, not by name. */
#define SESSION_MAX_BE 4

struct mi_session {
    mi_model *m;
    mi_backend *backends[SESSION_MAX_BE];   /* [n_backends], priority order; the last is the host */
    int n_backends;
    mi_sched *sched;
    mi_kv_cache kv;
    int64_t n_ctx, n_past;
    int32_t *ids, *pos;          /* [cap] host inputs of the current batch */
    int64_t cap;
    float *logits;               /* [n_vocab * logits_rows] */
    int64_t logits_rows, logits_cap_rows;
    mi_backend *logits_owner;    /* the backend whose host_alloc gave s->logits; NULL: malloc */
    bool pageable_logits;        /* MINFER_PAGEABLE_LOGITS */
    FILE *debug;                 /* MINFER_DEBUG_LAYERS: per-op tap records */
    mi_tensor **taps;
    void *hook_state;            /* a phase's per-session state (hooks.h) */
    int64_t n_ubatch;            /* params.n_ubatch (0: automatic, see ubatch_size) */
    size_t act_per_token;        /* graph activation bytes per token, learnt from the scheduler */
    /* The last one-token graph, built, passed, assigned and allocated once and run again by the
     * next decode steps at their n_past (building it is host time between a device step's
     * kernels); rebuilt when the hook epoch moves. NULL: none yet, or MINFER_NO_GRAPH_REUSE. */
    mi_graph *step_graph;
    uint64_t step_epoch;
    int64_t step_out;            /* the step graph's output: OUT_LOGITS, OUT_ARGMAX, or K (> 0: TOPK) */
    bool no_graph_reuse;
    int32_t next_token;          /* the last greedy decode's argmax */
    float top[2 * MI_TOPK_MAX];  /* the last top-k decode's candidates: K values, then K ids */
    int64_t top_k;               /* how many (0: the last decode kept none) */
    float top_scale;             /* its scale (TOPK's Input) */
    /* whether TOPK of top_probe_k candidates runs beside the logits, probed at the hook epoch
     * top_probe_epoch (a stand-in node through the device's supports(): not every token) */
    int64_t top_probe_k;
    uint64_t top_probe_epoch;
    bool top_probe_here;
    double host_s[4];            /* the scheduler's runs, summed: mi_session_host_times */
    /* The greedy step queued ahead of the host's read (MINFER_STEP_AHEAD, docs/PHASE8A.md): after
     * a one-token greedy step at n_past, the step at n_past + 1 fed that step's argmax on the
     * device, queued before the argmax is read back; the next greedy decode of exactly that token
     * takes it. ahead_ids: page-locked where the device gives it, the ids read back. */
    int ahead_mode;
    bool ahead_live, ahead_pinned, ahead_refused;   /* refused: the backend refused to queue one (said once) */
    int32_t *ahead_ids;
    int64_t ahead_steps;         /* greedy decodes that took a step queued ahead */
};

/* What a decode's graph ends in: the logits, their argmax, or (any value > 0) that many
 * candidates (TOPK) */
#define OUT_LOGITS 0
#define OUT_ARGMAX (-1)

void mi_session_params_default(mi_session_params *p) {
    memset(p, 0, sizeof *p);
    p->backend = "auto";
    p->n_threads = 0;
    p->n_ctx = 0;
    p->kv_type = MI_TYPE_F16;
}

static void ahead_release(mi_session *s);

/* The backend in host memory (the CPU): the last one, present in every session. */
static mi_backend *host_backend(const mi_session *s) {
    for (int i = s->n_backends - 1; i >= 0; i--)
        if (s->backends[i]->host_memory) return s->backends[i];
    return NULL;
}

/* The first backend with memory of its own (a device), NULL for a host-only session. */
static mi_backend *accel_backend(const mi_session *s) {
    for (int i = 0; i < s->n_backends; i++)
        if (!s->backends[i]->host_memory) return s->backends[i];
    return NULL;
}

/* Pick the CUDA backend per the request; on "auto" a failure is one log line and CPU. */
mi_status model_open_cuda(const char *want, mi_backend **out) {
    *out = NULL;
    bool is_auto = !strcmp(want, "auto");
    if (mi_setting_on("MINFER_DISABLE_CUDA")) {
        if (!is_auto) mi_log("MINFER_DISABLE_CUDA=1: the cuda backend is disabled, using the CPU");
        return MI_OK;
    }
    if (!mi_backend_available("cuda")) {
        if (is_auto) return MI_OK;   /* CPU-only build: nothing to say */
        return mi_err(MI_ERR_UNSUPPORTED, "backend 'cuda' is not built into this binary (no nvcc at build time)");
    }
    mi_status st = mi_backend_create("cuda", out);
    if (st != MI_OK) {
        *out = NULL;
        if (!is_auto) return mi_err_ctx(st, "backend 'cuda'");
        mi_log("%s: using the CPU", mi_errmsg());   /* e.g. "no CUDA device found (no NVIDIA driver installed)" */
        mi_err_clear();
    }
    return MI_OK;
}

/* The backend the scheduler would give an attention node: the KV cache lives there so
 * attention never crosses backends. Probed with a stand-in node of the real shape. */
static mi_backend *kv_backend(mi_session *s, mi_type kv_type) {
    const mi_hparams *hp = &s->m->hp;
    const int64_t row = hp->head_dim * hp->n_head_kv, qd = hp->head_dim * hp->n_head;
    mi_tensor cache, kn, vn, q, ks, vs, att;
    int64_t ne_c[2] = {row, s->n_ctx}, ne_k[2] = {row, 1}, ne_q[2] = {qd, 1};
    tensor_init(&cache, "probe_cache", kv_type, 2, ne_c);
    cache.flags = MI_T_PERSIST;
    tensor_init(&kn, "probe_k", MI_TYPE_F32, 2, ne_k);
    tensor_init(&vn, "probe_v", MI_TYPE_F32, 2, ne_k);
    tensor_init(&q, "probe_q", MI_TYPE_F32, 2, ne_q);
    kn.op = vn.op = q.op = MI_OP_ROPE;
    tensor_init(&ks, "probe_ks", kv_type, 2, ne_c);
    ks.op = MI_OP_KV_STORE;
    ks.flags = MI_T_ALIAS;
    ks.src[0] = &kn;
    ks.src[1] = &cache;
    vs = ks;
    vs.src[0] = &vn;
    tensor_init(&att, "probe_attn", MI_TYPE_F32, 2, ne_q);
    att.op = MI_OP_ATTN;
    att.src[0] = &q;
    att.src[1] = &ks;
    att.src[2] = &vs;
    att.p[0] = 0;
    att.p[1] = (int32_t)hp->head_dim;
    att.p[2] = (int32_t)hp->n_head;
    att.p[3] = (int32_t)hp->n_head_kv;
    mi_tensor_set_pf(&att, 4, 1.0f);
    for (int i = 0; i < s->n_backends; i++) {
        mi_backend *be = s->backends[i];
        if (be->iface->supports(be, &ks) && be->iface->supports(be, &att)) return be;
    }
    return host_backend(s);
}

/* Refuse a context whose KV cache cannot fit where it would live, before allocating (and
 * zeroing) it: a small file whose tensors share one data range can still claim many wide
 * layers. The need adds a one-token graph's workspace (a lower bound: the scheduler checks
 * each graph's real size before it allocates). */
static mi_status check_kv_fits(const mi_session *s, mi_type kv_type, mi_backend *kv_be) {
    const mi_hparams *hp = &s->m->hp;
    size_t need = kv_cache_size(hp, kv_type, s->n_ctx);
    const double ws = 4.0 * ((double)hp->n_vocab + (double)hp->n_head * (double)s->n_ctx +
                             2.5 * (double)(3 * hp->n_embd + 3 * hp->n_ff + 2 * hp->head_dim * hp->n_head +
                                            2 * hp->head_dim * hp->n_head_kv));
    if (need != SIZE_MAX) need = (double)(SIZE_MAX - need) > ws ? need + (size_t)ws : SIZE_MAX;
    char what[160], hint[200];
    snprintf(what, sizeof what, "the KV cache (%lld layers x %lld positions x %lld %s values, K and V) with a graph's workspace",
             (long long)hp->n_layer, (long long)s->n_ctx, (long long)(hp->head_dim * hp->n_head_kv),
             kv_type == MI_TYPE_F16 ? "f16" : "f32");
    snprintf(hint, sizeof hint, "use a shorter context (now %lld: -c N_CTX in run, -p/-n in bench)%s", (long long)s->n_ctx,
             kv_type == MI_TYPE_F16 ? "" : " or a half-size cache (--kv f16)");
    return sched_check_fit(kv_be, need, what, hint);
}

mi_status mi_session_new(mi_model *m, const mi_session_params *pp, mi_session **out) {
    *out = NULL;
    mi_session_params p;
    if (pp) p = *pp;
    else mi_session_params_default(&p);
    if (!p.backend) p.backend = "auto";
    if (strcmp(p.backend, "cpu") && strcmp(p.backend, "cuda") && strcmp(p.backend, "auto"))
        return mi_err(MI_ERR_INVALID, "unknown backend '%s' (use cpu, cuda or auto)", p.backend);
    if (p.kv_type != MI_TYPE_F16 && p.kv_type != MI_TYPE_F32)
        return mi_err(MI_ERR_INVALID, "KV cache type must be f16 or f32");

    mi_session *s = calloc(1, sizeof *s);
    if (!s) return mi_err(MI_ERR_NOMEM, "out of memory");
    s->m = m;
    const mi_hparams *hp = &m->hp;
    s->n_ubatch = p.n_ubatch;
    /* a dump of a reused graph would show the scheduler's records of another graph */
    s->no_graph_reuse = mi_setting_on("MINFER_NO_GRAPH_REUSE") || mi_setting_on("MINFER_DUMP_GRAPH");
    long ahead = 0;
    if (mi_setting_int("MINFER_STEP_AHEAD", 0, 2, 1, &ahead) != MI_OK) {
        free(s);
        return mi_err_ctx(MI_ERR_INVALID, "opening a session");
    }
    s->ahead_mode = (int)ahead;
    s->pageable_logits = mi_setting_on("MINFER_PAGEABLE_LOGITS");
    s->n_ctx = p.n_ctx > 0 ? p.n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (s->n_ctx > hp->n_ctx_train)
        mi_log("note: context %lld is longer than the trained context %lld", (long long)s->n_ctx, (long long)hp->n_ctx_train);
    if (s->n_ctx > ((int64_t)1 << 24)) {
        int64_t bad = s->n_ctx;
        free(s);
        return mi_err(MI_ERR_INVALID, "context length %lld is too large", (long long)bad);
    }

    mi_status st = MI_OK;
    bool guarded = false;
    mi_backend *cuda = NULL, *cpu = NULL;
    if (strcmp(p.backend, "cpu")) st = model_open_cuda(p.backend, &cuda);
    if (st == MI_OK) st = mi_backend_cpu_new(p.n_threads, &cpu);
    if (st == MI_OK) {
        /* backend choice and KV placement are one decision: no load in between (hooks.h) */
        mi_load_guard_lock();
        guarded = true;
        st = mi_hook_session_open(m, p.backend, &cuda, &s->hook_state);   /* may drop cuda */
    }
    /* owned by the session from here, whatever st says: mi_session_free destroys them */
    if (cuda) s->backends[s->n_backends++] = cuda;
    if (cpu) s->backends[s->n_backends++] = cpu;
    if (st != MI_OK) goto fail;
    st = sched_new(s->backends, s->n_backends, &s->sched);
    if (st != MI_OK) goto fail;
    /* Weight leaves keep backend -1 (host memory, the scheduler's last backend: this
     * session's CPU): the model is shared by sessions on different backends, so nothing
     * per session is written into it. A device session points its graphs at its own
     * device copies instead (the graph pass, hooks.h). */

    mi_backend *kv_be = kv_backend(s, p.kv_type);
    st = check_kv_fits(s, p.kv_type, kv_be);
    if (st == MI_OK) st = kv_cache_init(&s->kv, hp, p.kv_type, s->n_ctx, kv_be);
    mi_load_guard_unlock();
    guarded = false;
    if (st != MI_OK) goto fail;

    const char *dbg = mi_setting("MINFER_DEBUG_LAYERS");
    if (dbg && *dbg && strcmp(dbg, "0")) {
        const char *path = strcmp(dbg, "1") ? dbg : "minfer-layers.bin";
        s->debug = fopen(path, "wb");
        s->taps = calloc(MI_DEBUG_TAPS_MAX, sizeof *s->taps);
        if (!s->debug || !s->taps) {
            st = mi_err(MI_ERR_IO, "MINFER_DEBUG_LAYERS: cannot write '%s'", path);
            goto fail;
        }
    }
    *out = s;
    return MI_OK;
fail:
    if (guarded) mi_load_guard_unlock();
    mi_session_free(s);
    return st;
}

static void logits_release(mi_session *s) {
    if (s->logits_owner) s->logits_owner->iface->host_free(s->logits_owner, s->logits);
    else free(s->logits);
    s->logits = NULL;
    s->logits_owner = NULL;
    s->logits_cap_rows = 0;
    s->logits_rows = 0;
}

/* Room for rows of logits. Up to LOGITS_PINNED_ROWS rows live in page-locked memory from the
 * device backend where it gives some: a decode step's 600 KB row then crosses by DMA instead of
 * through the driver's pageable staging, which the host waits on between steps. Longer (prompt
 * logits) take plain memory: pinning hundreds of MB costs more than it saves. The contents are
 * not kept (every decode writes its rows anew). */
#define LOGITS_PINNED_ROWS 64
static mi_status logits_reserve(mi_session *s, int64_t rows) {
    if (rows <= s->logits_cap_rows) return MI_OK;
    logits_release(s);
    const size_t bytes = (size_t)rows * (size_t)s->m->hp.n_vocab * sizeof(float);
    mi_backend *dev = accel_backend(s);
    if (dev && !s->pageable_logits && rows <= LOGITS_PINNED_ROWS && dev->iface->host_alloc && dev->iface->host_free) {
        s->logits = dev->iface->host_alloc(dev, bytes);
        if (s->logits) s->logits_owner = dev;
    }
    if (!s->logits) s->logits = malloc(bytes);
    if (!s->logits) return mi_err(MI_ERR_NOMEM, "out of memory for %lld rows of logits", (long long)rows);
    s->logits_cap_rows = rows;
    return MI_OK;
}

void mi_session_free(mi_session *s) {
    if (!s) return;
    ahead_release(s);     /* waits for a step still queued */
    logits_release(s);   /* before the backend that may own it */
    graph_free(s->step_graph);
    kv_cache_free(&s->kv);
    mi_hook_session_close(s->hook_state);
    if (s->sched) sched_free(s->sched);
    for (int i = 0; i < s->n_backends; i++) s->backends[i]->iface->destroy(s->backends[i]);   /* devices first */
    if (s->debug) fclose(s->debug);
    free(s->taps);
    free(s->ids);
    free(s->pos);
    free(s);
}

/* One record per tapped node: u32 name_len, name, u32 ne0, u32 ne1, u32 n_past, f32 data. */
static mi_status write_taps(mi_session *s, mi_build_args *a) {
    float *buf = NULL;
    size_t cap = 0;
    mi_status st = MI_OK;
    for (int i = 0; i < a->n_taps && st == MI_OK; i++) {
        const mi_tensor *t = a->taps[i];
        size_t nb = (size_t)t->ne[0] * (size_t)t->ne[1] * sizeof(float);
        if (nb > cap) {
            float *nbuf = realloc(buf, nb);
            if (!nbuf) { st = mi_err(MI_ERR_NOMEM, "out of memory"); break; }
            buf = nbuf;
            cap = nb;
        }
        st = sched_read(s->sched, t, buf, 0, nb);
        if (st != MI_OK) break;
        uint32_t hdr[3] = {(uint32_t)t->ne[0], (uint32_t)t->ne[1], (uint32_t)a->n_past};
        uint32_t len = (uint32_t)strlen(t->name);
        fwrite(&len, 4, 1, s->debug);
        fwrite(t->name, 1, len, s->debug);
        fwrite(hdr, 4, 3, s->debug);
        fwrite(buf, 1, nb, s->debug);
    }
    fflush(s->debug);
    free(buf);
    return st;
}

/* Tokens per graph for a prompt. A CPU session caps the activation memory of one graph
 * at 3% of weights + KV cache (>= 2 MiB), so peak RSS stays near model file + KV cache;
 * the bytes per token come from the scheduler's last allocation (an estimate before the
 * first). Chunks give bit-identical logits (gates/common/py_session.py). A device session
 * keeps the whole prompt in one graph. MINFER_UBATCH=N (0: never split) overrides. */
static mi_status ubatch_size(mi_session *s, int64_t *out) {
    long v = -1;
    MI_TRY(mi_setting_int("MINFER_UBATCH", 0, LONG_MAX, -1, &v));
    if (v >= 0) {
        *out = v > 0 ? (int64_t)v : INT64_MAX;
        return MI_OK;
    }
    if (s->n_ubatch > 0) {
        *out = s->n_ubatch;
        return MI_OK;
    }
    if (accel_backend(s)) {
        *out = INT64_MAX;
        return MI_OK;
    }
    const mi_hparams *hp = &s->m->hp;
    size_t per = s->act_per_token;
    if (!per)   /* live set of a layer with the allocator's slack: measured ~2.5x the sum */
        per = (size_t)(2.5 * 4.0 * (double)(3 * hp->n_embd + 3 * hp->n_ff + 2 * hp->head_dim * hp->n_head +
                                          2 * hp->head_dim * hp->n_head_kv));
    size_t budget = (s->m->weight_bytes + kv_cache_bytes(&s->kv)) / 33;
    if (budget < ((size_t)2 << 20)) budget = (size_t)2 << 20;
    int64_t u = (int64_t)(budget / (per ? per : 1));
    if (u > 512) u = 512;
    if (u < 16) u = 16;
    *out = u - u % 16;
    return MI_OK;
}

/* Whether a forward went non-finite, judged from 64 logits spread over each row. A NaN
 * or Inf in the final hidden state reaches every logit through the output projection,
 * so a corrupt forward (NaN/Inf weights, an overflow) shows in any sample. Reading the
 * whole row instead cost 12% of the 0.5B's GPU decode step on the H200 (the row is
 * 600 KB, freshly copied from the device), which this check must not cost. A lone
 * non-finite logit from one bad vocabulary row is not looked for; greedy sampling never
 * picks a NaN. */
static bool logits_not_finite(const float *x, int64_t rows, int64_t n_vocab) {
    const int64_t n_samples = n_vocab < 64 ? n_vocab : 64;
    uint32_t bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < n_samples; k++) {
            uint32_t u;
            memcpy(&u, &x[(size_t)r * (size_t)n_vocab + (size_t)(k * (n_vocab - 1) / (n_samples > 1 ? n_samples - 1 : 1))],
                   sizeof u);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
    return bad != 0;
}

/* ---- the greedy step queued ahead ---- */
static void ahead_release(mi_session *s) {
    if (s->ahead_live)   /* its work reads the cache and writes the page-locked ids */
        for (int i = 0; i < s->n_backends; i++)
            if (s->backends[i]->iface->synchronize(s->backends[i]) != MI_OK) mi_log("warning: %s", mi_errmsg());
    s->ahead_live = false;
    mi_backend *dev = accel_backend(s);
    if (s->ahead_pinned && dev) dev->iface->host_free(dev, s->ahead_ids);
    else free(s->ahead_ids);
    s->ahead_ids = NULL;
}

/* whether the one-token greedy step in g may queue the next before its argmax is read */
static bool ahead_wanted(mi_session *s, const mi_graph *g, int64_t n) {
    if (s->ahead_mode == 0 || n != 1 || !g || g != s->step_graph || s->debug || s->n_past + 2 > s->n_ctx) return false;
    if (s->ahead_mode == 1 && !sched_reads_ahead(s->sched, g->output)) return false;
    if (!s->ahead_ids) {
        mi_backend *dev = accel_backend(s);
        s->ahead_ids = dev && dev->iface->host_alloc && dev->iface->host_free ? dev->iface->host_alloc(dev, 2 * sizeof(int32_t)) : NULL;
        s->ahead_pinned = s->ahead_ids != NULL;
        if (!s->ahead_ids) s->ahead_ids = malloc(2 * sizeof(int32_t));
    }
    return s->ahead_ids != NULL;
}

static void note_run(mi_session *s, double t_run) {
    const mi_sched_stats *ss = sched_stats(s->sched);
    s->host_s[0] += mi_now_s() - t_run;
    s->host_s[1] += ss->s_split_begin;
    s->host_s[2] += ss->s_nodes;
    s->host_s[3] += ss->s_split_end;
}

/* The step at s->n_past + 1 in g (the kept one-token greedy graph, whose step at s->n_past was just
 * queued and the read of its argmax behind it), its token that argmax copied on the device.
 * Not queued (false) where anything refuses: the next decode then runs as usual. */
static bool ahead_queue(mi_session *s, mi_graph *g) {
    const int64_t p = s->n_past + 1;
    mi_tensor *ids = graph_input_of(g, s->ids);
    if (!ids || graph_set_n_past(g, p) != MI_OK) {
        mi_err_clear();
        return false;
    }
    s->ids[0] = 0;   /* (not copied: MI_T_FED) */
    s->pos[0] = (int32_t)p;
    const double t_run = mi_now_s();
    if (sched_compute_fed(s->sched, g, ids, g->output, sizeof(int32_t)) != MI_OK) {
        /* the read that follows reports a device that failed; a refusal is said once, not hidden */
        if (!s->ahead_refused) mi_log("warning: a greedy step could not be queued ahead (%s); steps are read first", mi_errmsg());
        s->ahead_refused = true;
        mi_err_clear();
        return false;
    }
    note_run(s, t_run);
    s->ahead_live = true;
    return true;
}

/* The greedy decode of exactly the token the last one drew, whose step is queued already: its
 * argmax read behind it, the step after it queued first. */
static mi_status ahead_take(mi_session *s) {
    mi_graph *g = s->step_graph;
    s->ahead_live = false;
    mi_status st = sched_read_begin(s->sched, g->output, s->ahead_ids, 0, sizeof(int32_t));
    if (st == MI_OK && ahead_wanted(s, g, 1)) (void)ahead_queue(s, g);
    if (st == MI_OK) st = sched_read_wait(s->sched, g->output);
    if (st == MI_OK && s->ahead_ids[0] < 0)
        st = mi_err(MI_ERR_FORMAT, "logits are not finite (NaN/Inf) after the forward: the model's weights may be corrupt");
    if (st != MI_OK) {   /* as a failed decode: its graph is not run again */
        s->ahead_live = false;
        graph_free(s->step_graph);
        s->step_graph = NULL;
        return mi_err_ctx(st, "decoding 1 token at position %lld (queued ahead)", (long long)s->n_past);
    }
    s->next_token = s->ahead_ids[0];
    s->n_past += 1;
    s->logits_rows = 0;
    s->top_k = 0;
    s->ahead_steps++;
    return MI_OK;
}

/* One graph: n tokens at n_past; logits rows go to s->logits + row_off rows, or (OUT_ARGMAX) the
 * last row's argmax to s->next_token, or (out = K > 0) its K best candidates to s->top. */
static mi_status decode_chunk(mi_session *s, const int32_t *tokens, int64_t n, bool all_logits, int64_t out,
                              int64_t row_off) {
    const mi_hparams *hp = &s->m->hp;
    for (int64_t i = 0; i < n; i++) {
        s->ids[i] = tokens[i];
        s->pos[i] = (int32_t)(s->n_past + i);
    }
    int64_t rows = all_logits ? n : 1;
    const bool greedy = out == OUT_ARGMAX;
    mi_build_args a = {.ids = s->ids, .pos = s->pos, .n = n, .n_past = s->n_past, .all_logits = all_logits,
                       .greedy = greedy, .top_k = out > 0 ? out : 0, .top_scale = &s->top_scale,
                       .debug_taps = s->debug != NULL, .taps = s->taps};
    mi_graph *g = NULL;
    mi_status st = MI_OK;
    const bool reusable = n == 1 && !s->debug && !s->no_graph_reuse;
    const uint64_t epoch = reusable ? mi_hook_graph_epoch(s->hook_state) : 0;
    if (reusable && s->step_graph && s->step_epoch == epoch && s->step_out == out &&
        graph_set_n_past(s->step_graph, s->n_past) == MI_OK) {
        g = s->step_graph;   /* passed, assigned and allocated already: only n_past moves */
    } else {
        if (reusable && s->step_graph) {
            graph_free(s->step_graph);
            s->step_graph = NULL;
        }
        MI_TRY(model_build_graph(s->m, &s->kv, &a, &g));
        st = mi_hook_graph_pass(s->hook_state, g);
        if (reusable && st == MI_OK) {
            s->step_graph = g;
            s->step_epoch = epoch;
            s->step_out = out;
        }
    }
    const double t_run = mi_now_s();
    if (st == MI_OK) st = sched_compute(s->sched, g);
    if (st == MI_OK) {
        note_run(s, t_run);
        if (mi_setting_on("MINFER_DUMP_GRAPH")) sched_dump(s->sched, g, stderr);
        if (greedy && ahead_wanted(s, g, n)) {   /* the argmax read behind the step, the next step queued */
            st = sched_read_begin(s->sched, g->output, s->ahead_ids, 0, sizeof(int32_t));
            if (st == MI_OK) (void)ahead_queue(s, g);
            if (st == MI_OK) st = sched_read_wait(s->sched, g->output);
            if (st == MI_OK) s->next_token = s->ahead_ids[0];
            else s->ahead_live = false;
        } else if (greedy)
            st = sched_read(s->sched, g->output, &s->next_token, (size_t)(rows - 1) * sizeof(int32_t), sizeof(int32_t));
        else if (out > 0)
            st = sched_read(s->sched, g->output, s->top, (size_t)(rows - 1) * 2 * (size_t)out * sizeof(float),
                            2 * (size_t)out * sizeof(float));
        else
            st = sched_read(s->sched, g->output, s->logits + (size_t)row_off * (size_t)hp->n_vocab, 0,
                            (size_t)rows * (size_t)hp->n_vocab * sizeof(float));
    }
    if (st == MI_OK && s->debug) st = write_taps(s, &a);
    if (g == s->step_graph && st != MI_OK) s->step_graph = NULL;   /* a failed step is not run again */
    if (g != s->step_graph) graph_free(g);
    /* a sampler would silently pick token 0 from NaN logits: say what went wrong instead */
    /* (top-k: a forward gone NaN ranks every candidate -inf, one gone infinite puts inf first) */
    if (st == MI_OK && (greedy    ? s->next_token < 0
                        : out > 0 ? !isfinite(s->top[0])
                                  : logits_not_finite(s->logits + (size_t)row_off * (size_t)hp->n_vocab, rows, hp->n_vocab)))
        st = mi_err(MI_ERR_FORMAT, "logits are not finite (NaN/Inf) after the forward: the model's weights may be corrupt");
    if (st != MI_OK) return mi_err_ctx(st, "decoding %lld tokens at position %lld", (long long)n, (long long)s->n_past);
    if (n >= 16) {   /* learn the activation bytes per token of this model on this backend */
        const mi_sched_stats *ss = sched_stats(s->sched);
        size_t per = ss->alloc_bytes[host_backend(s)->index] / (size_t)n;
        if (per > s->act_per_token) s->act_per_token = per;
    }
    s->n_past += n;
    return MI_OK;
}

static mi_status decode_all(mi_session *s, const int32_t *tokens, int64_t n, bool all_logits, int64_t out) {
    const mi_hparams *hp = &s->m->hp;
    if (n <= 0) return mi_err(MI_ERR_INVALID, "nothing to decode (0 tokens)");
    if (s->n_past + n > s->n_ctx) {
        if (s->n_past == 0)
            return mi_err(MI_ERR_INVALID, "prompt of %lld tokens exceeds the context (%lld)", (long long)n, (long long)s->n_ctx);
        return mi_err(MI_ERR_INVALID, "cannot add %lld token(s) at position %lld: exceeds the context (%lld)",
                      (long long)n, (long long)s->n_past, (long long)s->n_ctx);
    }
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return mi_err(MI_ERR_INVALID, "token id %d at index %lld is outside the vocabulary (0..%lld)",
                          tokens[i], (long long)i, (long long)hp->n_vocab - 1);
    if (s->ahead_live) {   /* a step queued ahead: taken by exactly its token, else left to run unread */
        /* (not where the items switched since it was queued: it ran the kernels of before) */
        if (out == OUT_ARGMAX && n == 1 && !all_logits && tokens[0] == s->next_token && s->step_graph &&
            s->step_epoch == mi_hook_graph_epoch(s->hook_state))
            return ahead_take(s);
        s->ahead_live = false;
    }
    int64_t ub = 0;
    MI_TRY(ubatch_size(s, &ub));
    int64_t per_graph = n < ub ? n : ub;
    if (per_graph > s->cap) {
        graph_free(s->step_graph);   /* its inputs point at the arrays about to move */
        s->step_graph = NULL;
        int32_t *ids = realloc(s->ids, (size_t)per_graph * sizeof *ids);
        if (ids) s->ids = ids;
        int32_t *pos = realloc(s->pos, (size_t)per_graph * sizeof *pos);
        if (pos) s->pos = pos;
        if (!ids || !pos) return mi_err(MI_ERR_NOMEM, "out of memory for %lld tokens", (long long)per_graph);
        s->cap = per_graph;
    }
    int64_t rows = all_logits ? n : 1;
    if (out == OUT_LOGITS) MI_TRY(logits_reserve(s, rows));
    s->logits_rows = 0;
    s->top_k = 0;
    const int64_t n_past0 = s->n_past;
    for (int64_t off = 0; off < n;) {
        int64_t len = n - off < ub ? n - off : ub;
        /* without all_logits every chunk overwrites row 0: the last one stays */
        mi_status st = decode_chunk(s, tokens + off, len, all_logits, out, all_logits ? off : 0);
        if (st != MI_OK) {
            s->n_past = n_past0;   /* all or nothing: the cache rows past n_past0 are dead */
            return st;
        }
        off += len;
    }
    s->logits_rows = out == OUT_LOGITS ? rows : 0;
    s->top_k = out > 0 ? out : 0;
    return MI_OK;
}

mi_status mi_session_decode(mi_session *s, const int32_t *tokens, int64_t n, bool all_logits) {
    return decode_all(s, tokens, n, all_logits, OUT_LOGITS);
}

mi_status mi_session_decode_greedy(mi_session *s, const int32_t *tokens, int64_t n, int32_t *next) {
    MI_TRY(decode_all(s, tokens, n, false, OUT_ARGMAX));
    *next = s->next_token;
    return MI_OK;
}

mi_status mi_session_decode_top(mi_session *s, const int32_t *tokens, int64_t n, float scale, int64_t k) {
    if (k < 1 || k > MI_TOPK_MAX || k >= s->m->hp.n_vocab || !(scale > 0.0f) || !isfinite(scale))
        return mi_err(MI_ERR_INVALID, "top-k decode: k = %lld (1 .. %d, under the vocabulary), scale %g (finite, > 0)",
                      (long long)k, MI_TOPK_MAX, (double)scale);
    s->top_scale = scale;
    const uint64_t epoch = mi_hook_graph_epoch(s->hook_state);
    if (s->top_probe_k != k || s->top_probe_epoch != epoch) {
        s->top_probe_here = model_topk_where_logits(s->m, s->backends[0], k);
        s->top_probe_k = k;
        s->top_probe_epoch = epoch;
    }
    if (s->top_probe_here) return decode_all(s, tokens, n, false, k);
    /* TOPK would run on the host: the logits cross anyway, so the same selection runs here */
    MI_TRY(decode_all(s, tokens, n, false, OUT_LOGITS));
    mi_cand cand[MI_TOPK_MAX];
    mi_sample_top_k_pack(s->logits, s->m->hp.n_vocab, scale, k, cand, s->top);
    s->logits_rows = 0;   /* as from a top-k graph: candidates only */
    s->top_k = k;
    return MI_OK;
}

const float *mi_session_top(const mi_session *s, int64_t *k) {
    if (k) *k = s->top_k;
    return s->top_k ? s->top : NULL;
}

const float *mi_logits(const mi_session *s, int64_t *rows) {
    if (rows) *rows = s->logits_rows;
    return s->logits_rows ? s->logits : NULL;
}

int64_t mi_session_n_past(const mi_session *s) { return s->n_past; }
int64_t mi_session_n_ctx(const mi_session *s) { return s->n_ctx; }
void mi_session_reset(mi_session *s) {
    s->ahead_live = false;   /* its work writes row n_past + 1 of the cache, which a later step writes again */
    s->n_past = 0;   /* attention reads rows < n_past only: old contents need no clearing */
    s->logits_rows = 0;
    s->top_k = 0;
}
mi_status mi_session_truncate(mi_session *s, int64_t n_past) {
    if (n_past < 0 || n_past > s->n_past)
        return mi_err(MI_ERR_INVALID, "cannot truncate the session to %lld tokens (it holds %lld)",
                      (long long)n_past, (long long)s->n_past);
    s->ahead_live = false;
    s->n_past = n_past;
    s->logits_rows = 0;
    s->top_k = 0;
    return MI_OK;
}
/* The first backend in priority order: the device's name ("cuda") or "cpu". */
const char *mi_session_backend(const mi_session *s) { return s->backends[0]->iface->name(s->backends[0]); }

int64_t mi_session_steps_ahead(const mi_session *s) { return s->ahead_steps; }

void mi_session_host_times(const mi_session *s, double out[4]) {
    for (int i = 0; i < 4; i++) out[i] = s->host_s[i];
}

int64_t mi_session_step_kernels(const mi_session *s) {
    for (int i = 0; i < s->n_backends; i++) {
        mi_backend *be = s->backends[i];
        const int64_t k = be->iface->step_kernels ? be->iface->step_kernels(be) : -1;
        if (k >= 0) return k;
    }
    return -1;
}
size_t mi_session_kv_bytes(const mi_session *s) { return kv_cache_bytes(&s->kv); }

size_t mi_session_kv_read_bytes(const mi_session *s, int64_t n_past) {
    const size_t esz = s->kv.type == MI_TYPE_F16 ? 2 : 4;
    return 2 * (size_t)s->kv.n_layer * (size_t)s->kv.row * (size_t)n_past * esz;
}

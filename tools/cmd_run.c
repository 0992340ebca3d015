/* `minfer run`: load a model, feed a prompt (text, chat-rendered, or raw token ids),
 * stream the generated text, then print one stats line (prompt and generation tok/s,
 * achieved GB/s, a hash of the last logits, or of the chosen tokens when the session kept no logits:
 * greedy runs and top-k sampled ones). Several -p with --chat make a multi-turn
 * conversation that appends to the KV cache instead of recomputing it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "common/model/mi.h"
#include "common/core/mi_file.h"
#include "common/core/mi_progress.h"
#include "common/gguf/gguf.h"
#include "common/tokenizer/tokenizer.h"
#include "common/sampler/sampler.h"
#include "tools/cli.h"

#define MAX_TURNS 16

#define MI_RUN_TOP_K 64   /* the largest --top-k whose candidates the session computes */

typedef struct {
    const char *model, *prompts[MAX_TURNS], *tokens, *dump, *backend, *chunks;
    int n_prompts, n_gen, n_threads;
    int64_t n_ctx;
    bool chat, ignore_eos, kv_f32, verbose_prompt;
    mi_sampler_params sp;
} run_args;

typedef struct {
    mi_session *s;
    const mi_model *m;
    FILE *dump;
    uint32_t dump_rows;
    int64_t chunk[64];
    int n_chunk;
    bool progress;       /* stderr is a terminal and the session runs on the CPU */
    bool greedy;         /* temperature 0 and no dump: the session returns the argmax, not the logits */
    int32_t next;        /* greedy: the token the last feed chose */
    int top_k;           /* > 0: sampling with this top-k and no dump: the session returns the
                            candidates, not the logits (mi_session_decode_top) */
    float top_scale;     /* for them: the sampler's 1 / temperature */
    uint32_t tok_hash;   /* FNV-1a of every chosen token id (the stats line's hash when greedy) */
    double t_prompt, t_gen, gen_bytes;
    int64_t n_prompt_tok, n_gen_tok, n_gen_steps;
} run_state;

static int fail(const char *msg) {
    fprintf(stderr, "minfer: %s\n", msg);
    return 1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: minfer run -m FILE (-p TEXT ... | --tokens ID,ID,...) [-n N] [--chat] [--temp T] [--top-k K]\n"
            "                  [--top-p P] [--min-p P] [--seed N] [-t THREADS] [--backend cpu|cuda|auto]\n"
            "                  [-c N_CTX] [--kv f16|f32] [--dump-logits FILE] [--chunks N,N,...] [--ignore-eos]\n"
            "                  [--verbose-prompt]\n"
            "  -p may be repeated: with --chat each one is a new user turn of one conversation.\n"
            "  --chat: control-token texts inside -p (<|im_start|>, ...) stay plain text.\n"
            "  -t THREADS: CPU threads, 1..%d; 0 (the default) means one per online CPU.\n"
            "  Default sampling is greedy; --temp > 0 samples (top-k 40, top-p 0.95, min-p 0.05 unless set).\n"
            "  --dump-logits: 'MILG', u32 version=1, u32 n_vocab, u32 n_rows, then n_rows x n_vocab float32\n"
            "  (every prompt position, then one row per generated token fed back).\n"
            "  --chunks: feed each prompt in pieces of these sizes (the rest in one last piece).\n"
            "  --verbose-prompt: print each turn's prompt token ids to stderr before feeding them.\n",
            mi_cli_max_threads());
}

static bool parse_i64(const char *s, int64_t *out) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end) return false;
    *out = v;
    return true;
}

static bool parse_f(const char *s, float *out) {
    char *end;
    float v = strtof(s, &end);
    if (end == s || *end || v != v) return false;
    *out = v;
    return true;
}

/* comma-separated integers; *out malloc'd */
static int parse_list(const char *s, int64_t **out, int64_t *n) {
    int64_t cap = 16, k = 0;
    int64_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        char *end;
        long long x = strtoll(p, &end, 10);
        if (end == p || (*end && *end != ',')) {
            free(v);
            return -1;
        }
        if (k == cap) {
            cap *= 2;
            int64_t *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) { free(v); return -1; }
            v = nv;
        }
        v[k++] = x;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        free(v);
        return -1;
    }
    *out = v;
    *n = k;
    return 0;
}

/* Options that take a value; anything else starting with '-' is unknown, so the error names
 * the option itself rather than the option and the word after it. */
static const char *const VALUED[] = {"-m", "-p", "--tokens", "--dump-logits", "--backend", "--chunks", "--kv", "-n", "-t",
                                     "-c", "--seed", "--temp", "--top-k", "--top-p", "--min-p"};

static bool is_valued(const char *o) {
    for (size_t k = 0; k < sizeof VALUED / sizeof VALUED[0]; k++)
        if (!strcmp(o, VALUED[k])) return true;
    return false;
}

static int parse_args(int argc, char **argv, run_args *a, char *err, size_t errsz) {
    memset(a, 0, sizeof *a);
    a->n_gen = 64;
    a->backend = "auto";
    mi_sampler_params_default(&a->sp);
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) { usage(stdout); exit(0); }
        if (!strcmp(o, "--chat")) { a->chat = true; continue; }
        if (!strcmp(o, "--ignore-eos")) { a->ignore_eos = true; continue; }
        if (!strcmp(o, "--verbose-prompt")) { a->verbose_prompt = true; continue; }
        if (!is_valued(o)) {
            snprintf(err, errsz, o[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'", o);
            return -1;
        }
        if (i + 1 >= argc) { snprintf(err, errsz, "option '%s' needs a value", o); return -1; }
        const char *v = argv[++i];
        int64_t iv;
        float fv;
        if (!strcmp(o, "-m")) a->model = v;
        else if (!strcmp(o, "-p")) {
            if (a->n_prompts == MAX_TURNS) { snprintf(err, errsz, "at most %d prompts", MAX_TURNS); return -1; }
            a->prompts[a->n_prompts++] = v;
        } else if (!strcmp(o, "--tokens")) a->tokens = v;
        else if (!strcmp(o, "--dump-logits")) a->dump = v;
        else if (!strcmp(o, "--backend")) a->backend = v;
        else if (!strcmp(o, "--chunks")) a->chunks = v;
        else if (!strcmp(o, "--kv")) {
            if (!strcmp(v, "f32")) a->kv_f32 = true;
            else if (strcmp(v, "f16")) { snprintf(err, errsz, "--kv must be f16 or f32, not '%s'", v); return -1; }
        } else if (!strcmp(o, "-t")) {
            if (mi_cli_threads(v, &a->n_threads, err, errsz)) return -1;
        } else if (!strcmp(o, "-n") && parse_i64(v, &iv) && iv >= 0 && iv <= 1000000) a->n_gen = (int)iv;
        else if (!strcmp(o, "-c") && parse_i64(v, &iv) && iv > 0) a->n_ctx = iv;
        else if (!strcmp(o, "--seed") && parse_i64(v, &iv)) a->sp.seed = (uint64_t)iv;
        else if (!strcmp(o, "--temp") && parse_f(v, &fv) && fv >= 0) a->sp.temp = fv;
        else if (!strcmp(o, "--top-k") && parse_i64(v, &iv) && iv >= 0 && iv < (1 << 30)) a->sp.top_k = (int)iv;
        else if (!strcmp(o, "--top-p") && parse_f(v, &fv) && fv > 0 && fv <= 1) a->sp.top_p = fv;
        else if (!strcmp(o, "--min-p") && parse_f(v, &fv) && fv >= 0 && fv <= 1) a->sp.min_p = fv;
        else { snprintf(err, errsz, "bad value for %s: '%s'", o, v); return -1; }
    }
    if (!a->model) { snprintf(err, errsz, "no model given (-m FILE)"); return -1; }
    if (!a->n_prompts && !a->tokens) { snprintf(err, errsz, "no prompt given (-p TEXT or --tokens ID,...)"); return -1; }
    return 0;
}

/* Prompt tokens per decode call while a progress line is shown: the session splits a CPU
 * prompt into graphs of at most 512 tokens anyway, and chunked feeding gives bit-identical
 * logits, so the line costs nothing but a redraw. */
#define PROGRESS_PIECE 512

/* Feed tokens (in --chunks pieces), appending every row of logits to the dump. */
static mi_status feed(run_state *r, const int32_t *tok, int64_t n, bool is_prompt) {
    const int64_t nv = mi_model_hparams(r->m)->n_vocab;
    int64_t done = 0;
    int ci = 0;
    mi_progress pg;
    bool show = is_prompt && r->progress && r->n_chunk == 0 && n > PROGRESS_PIECE;
    if (show) {
        mi_progress_start(&pg, "prefill");
        mi_progress_count(&pg, 0, n, "tokens");
    }
    while (done < n) {
        int64_t piece = n - done;
        if (is_prompt && ci < r->n_chunk && r->chunk[ci] > 0 && r->chunk[ci] < piece) piece = r->chunk[ci];
        if (show && piece > PROGRESS_PIECE) piece = PROGRESS_PIECE;
        ci++;
        int64_t n_past = mi_session_n_past(r->s);
        double t0 = mi_now_s();
        mi_status st = r->greedy    ? mi_session_decode_greedy(r->s, tok + done, piece, &r->next)
                       : r->top_k ? mi_session_decode_top(r->s, tok + done, piece, r->top_scale, r->top_k)
                                  : mi_session_decode(r->s, tok + done, piece, r->dump != NULL);
        if (st != MI_OK) {
            if (show) mi_progress_clear(&pg);
            return st;
        }
        double dt = mi_now_s() - t0;
        if (is_prompt) {
            r->t_prompt += dt;
            r->n_prompt_tok += piece;
        } else {
            r->t_gen += dt;
            r->n_gen_steps += piece;
            r->gen_bytes += (double)mi_model_bytes_per_token(r->m) + (double)mi_session_kv_read_bytes(r->s, n_past + 1);
        }
        if (r->dump) {
            int64_t rows;
            const float *l = mi_logits(r->s, &rows);
            if (fwrite(l, sizeof(float), (size_t)(rows * nv), r->dump) != (size_t)(rows * nv)) {
                if (show) mi_progress_clear(&pg);
                return mi_err(MI_ERR_IO, "writing the logits dump failed");
            }
            r->dump_rows += (uint32_t)rows;
        }
        done += piece;
        if (show) mi_progress_count(&pg, done, n, "tokens");
    }
    if (show) mi_progress_clear(&pg);   /* the reply starts where the line was */
    return MI_OK;
}

#define FNV1A_START 2166136261u
/* FNV-1a of n bytes at p, continuing from h (FNV1A_START for a new hash) */
static uint32_t fnv1a(uint32_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

/* Generate up to n tokens after the current logits; the reply text is appended to *reply. */
static mi_status generate(run_state *r, mi_tokenizer *tk, mi_sampler *smp, int n, bool ignore_eos,
                          char **reply, size_t *reply_len, int32_t *cached, int64_t *n_cached) {
    mi_detok dt = {0};
    char buf[256];
    for (int i = 0; i < n; i++) {
        int32_t t = r->next;   /* greedy: the argmax the session computed where the logits are */
        if (r->top_k) {        /* the draw from the candidates the session computed there */
            t = mi_sampler_sample_top(smp, mi_session_top(r->s, NULL), r->top_k);
        } else if (!r->greedy) {
            int64_t rows;
            const float *l = mi_logits(r->s, &rows);
            l += (size_t)(rows - 1) * (size_t)mi_model_hparams(r->m)->n_vocab;   /* the last row */
            t = mi_sampler_sample(smp, l);
        }
        r->tok_hash = fnv1a(r->tok_hash, &t, sizeof t);
        if (tk && tok_is_eog(tk, t) && !ignore_eos) break;
        r->n_gen_tok++;
        size_t w;
        if (tk) w = tok_detok_push(tk, &dt, t, buf, sizeof buf);
        else w = (size_t)snprintf(buf, sizeof buf, " [%d]", t);
        if (w) {
            fwrite(buf, 1, w, stdout);
            fflush(stdout);
            char *nr = realloc(*reply, *reply_len + w + 1);
            if (nr) {
                memcpy(nr + *reply_len, buf, w);
                *reply_len += w;
                nr[*reply_len] = 0;
                *reply = nr;
            }
        }
        if (i + 1 < n && mi_session_n_past(r->s) >= mi_session_n_ctx(r->s)) {
            fflush(stdout);
            fprintf(stderr, "\nminfer: context full (%lld tokens): generation stopped\n",
                    (long long)mi_session_n_ctx(r->s));
            break;
        }
        if (i + 1 < n) {
            MI_TRY(feed(r, &t, 1, false));
            cached[(*n_cached)++] = t;   /* the cache holds it now: a next turn reuses it */
        }
    }
    size_t w = tok_detok_flush(&dt, buf, sizeof buf);
    if (w) fwrite(buf, 1, w, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    return MI_OK;
}

static int64_t common_prefix(const int32_t *a, int64_t na, const int32_t *b, int64_t nb) {
    int64_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* --chunks N,N,...: the prompt fed in pieces of these sizes (the last repeated) */
static int parse_chunks(const char *list, run_state *r) {
    int64_t *v, n;
    if (parse_list(list, &v, &n)) return fail("--chunks wants up to 64 comma-separated sizes");
    if (n > 64) {
        free(v);
        return fail("--chunks wants up to 64 comma-separated sizes");
    }
    for (int64_t i = 0; i < n; i++) r->chunk[i] = v[i];
    r->n_chunk = (int)n;
    free(v);
    return 0;
}

/* The whole token sequence of a turn (*full, n_full): the --tokens ids; with --chat the whole
 * conversation rendered (msgs gains the turn's user message); else the cached tokens followed by
 * the turn's text. 0, or 1 with the message printed. */
static int turn_tokens(const run_args *a, int turn, mi_tokenizer *tk, gguf_file *gf, int64_t n_vocab, bool add_bos,
                       mi_chat_msg *msgs, int *n_msgs, const int32_t *cached, int64_t n_cached, int32_t **full, int64_t *n_full) {
    mi_status st;
    if (a->tokens) {
        int64_t *v;
        if (parse_list(a->tokens, &v, n_full)) return fail("--tokens wants comma-separated token ids");
        *full = malloc((size_t)(*n_full > 0 ? *n_full : 1) * sizeof **full);
        if (!*full) {
            free(v);
            return fail("out of memory");
        }
        for (int64_t i = 0; i < *n_full; i++) {
            if (v[i] < 0 || v[i] >= n_vocab) {
                fprintf(stderr, "minfer: token id %lld is outside the vocabulary (0..%lld)\n", (long long)v[i],
                        (long long)n_vocab - 1);
                free(v);
                return 1;
            }
            (*full)[i] = (int32_t)v[i];
        }
        free(v);
        return 0;
    }
    if (a->chat) {
        /* render the whole conversation, feed only what the cache does not hold yet */
        msgs[*n_msgs].role = "user";
        msgs[*n_msgs].content = a->prompts[turn];
        (*n_msgs)++;
        st = tok_chat_encode(tk, tok_chat_kind(gf), msgs, *n_msgs, true, full, n_full);
        return st == MI_OK ? 0 : fail(mi_errmsg());
    }
    /* plain continuation: each -p appends its text */
    int32_t *part;
    int64_t np;
    st = tok_encode(tk, a->prompts[turn], strlen(a->prompts[turn]), false, &part, &np);
    if (st != MI_OK) return fail(mi_errmsg());
    const int64_t pre = (turn == 0 && add_bos && tok_bos(tk) >= 0) ? 1 : 0;
    *n_full = n_cached + pre + np;
    *full = malloc((size_t)(*n_full > 0 ? *n_full : 1) * sizeof **full);
    if (!*full) {
        free(part);
        return fail("out of memory");
    }
    if (n_cached) memcpy(*full, cached, (size_t)n_cached * sizeof **full);
    if (pre) (*full)[n_cached] = tok_bos(tk);
    if (np) memcpy(*full + n_cached + pre, part, (size_t)np * sizeof **full);
    free(part);
    return 0;
}

/* --dump-logits: the file's header, its row count patched at the end; replaced only when complete,
 * like every file the tool writes (common/core/mi_file.h). NULL with the message printed. */
static FILE *dump_open(mi_file_out *out, const char *path, int64_t n_vocab) {
    if (mi_file_out_open(out, path) != MI_OK) {
        fprintf(stderr, "minfer: cannot write %s: %s\n", path, mi_errmsg());
        return NULL;
    }
    uint32_t hdr[4];
    memcpy(hdr, "MILG", 4);
    hdr[1] = 1;
    hdr[2] = (uint32_t)n_vocab;
    hdr[3] = 0;   /* n_rows: patched at the end */
    fwrite(hdr, 4, 4, out->fp);
    return out->fp;
}

int cmd_run(int argc, char **argv) {
    run_args a;
    char err[512];
    if (parse_args(argc, argv, &a, err, sizeof err)) {
        fprintf(stderr, "minfer: %s\n", err);
        usage(stderr);
        return 1;
    }
    run_state r = {0};
    mi_file_out dump_out = {0};
    mi_model *m = NULL;
    mi_session *s = NULL;
    mi_tokenizer *tk = NULL;
    mi_sampler smp = {0};
    int32_t *cached = NULL, *full = NULL;
    int64_t n_cached = 0, n_full = 0;
    mi_chat_msg msgs[2 * MAX_TURNS];
    char *replies[MAX_TURNS] = {0};
    int n_msgs = 0, rc = 1;
    mi_status st;

    if (a.chunks && parse_chunks(a.chunks, &r)) return 1;
    mi_model_params mp = {a.backend};   /* --backend cpu: the device is never touched */
    if ((st = mi_model_load_params(a.model, &mp, &m)) != MI_OK) return fail(mi_errmsg());
    r.m = m;
    const mi_hparams *hp = mi_model_hparams(m);
    gguf_file *gf = mi_model_gguf(m);
    if (tok_load(gf, &tk) != MI_OK) {
        if (!a.tokens) {
            fprintf(stderr, "minfer: %s: %s\n", a.model, mi_errmsg());   /* the message starts "tokenizer: " */
            goto out;
        }
        mi_log("no usable tokenizer (%s): printing token ids", mi_errmsg());
        tk = NULL;
    }
    mi_session_params sp;
    mi_session_params_default(&sp);
    sp.backend = a.backend;
    sp.n_threads = a.n_threads;
    sp.n_ctx = a.n_ctx;
    sp.kv_type = a.kv_f32 ? MI_TYPE_F32 : MI_TYPE_F16;
    if ((st = mi_session_new(m, &sp, &s)) != MI_OK) {
        fprintf(stderr, "minfer: %s\n", mi_errmsg());
        goto out;
    }
    if ((st = mi_sampler_init(&smp, &a.sp, hp->n_vocab)) != MI_OK) {
        fprintf(stderr, "minfer: %s\n", mi_errmsg());
        goto out;
    }
    r.s = s;
    r.progress = isatty(2) && !strcmp(mi_session_backend(s), "cpu");
    r.greedy = a.sp.temp <= 0 && !a.dump;   /* the sampler's greedy rule is the session's argmax */
    /* a top-k sampler's first half where the logits are: the same token as from the whole row */
    r.top_scale = a.sp.temp > 0 ? 1.0f / a.sp.temp : 0.0f;
    if (!r.greedy && !a.dump && a.sp.top_k > 0 && a.sp.top_k <= MI_RUN_TOP_K && a.sp.top_k < hp->n_vocab &&
        isfinite(r.top_scale))
        r.top_k = a.sp.top_k;
    r.tok_hash = FNV1A_START;
    mi_log("%s: %s, %lld layers, %lld embd, %s, %.1f MiB | backend %s | ctx %lld, kv %s",
           a.model, hp->arch_name, (long long)hp->n_layer, (long long)hp->n_embd,
           mi_type_name(mi_model_dominant_type(m)), mi_model_weight_bytes(m) / 1048576.0,
           mi_session_backend(s), (long long)mi_session_n_ctx(s), a.kv_f32 ? "f32" : "f16");
    if (a.dump && !(r.dump = dump_open(&dump_out, a.dump, hp->n_vocab))) goto out;

    int n_turns = a.tokens ? 1 : a.n_prompts;
    bool add_bos = false;
    if (gguf_find_key(gf, "tokenizer.ggml.add_bos_token") >= 0) gguf_get_bool(gf, "tokenizer.ggml.add_bos_token", &add_bos);
    for (int turn = 0; turn < n_turns; turn++) {
        free(full);
        full = NULL;
        n_full = 0;
        if (turn_tokens(&a, turn, tk, gf, hp->n_vocab, add_bos, msgs, &n_msgs, cached, n_cached, &full, &n_full)) goto out;
        if (a.verbose_prompt) {
            fprintf(stderr, "prompt tokens (%lld):", (long long)n_full);
            for (int64_t i = 0; i < n_full; i++) fprintf(stderr, " %d", full[i]);
            fputc('\n', stderr);
        }
        int64_t k = common_prefix(cached, n_cached, full, n_full);
        if (k == n_full) k = n_full - 1;   /* at least one token to get fresh logits */
        if (n_full <= 0 || k < 0) {
            fprintf(stderr, "minfer: empty prompt\n");
            goto out;
        }
        if (k < mi_session_n_past(s) && (st = mi_session_truncate(s, k)) != MI_OK) {
            fprintf(stderr, "minfer: %s\n", mi_errmsg());
            goto out;
        }
        if ((st = feed(&r, full + k, n_full - k, true)) != MI_OK) {
            fprintf(stderr, "minfer: %s\n", mi_errmsg());
            goto out;
        }
        /* the cache now holds full; generated tokens are appended as they are fed */
        free(cached);
        cached = malloc((size_t)(n_full + a.n_gen + 1) * sizeof *cached);
        if (!cached) goto out;
        memcpy(cached, full, (size_t)n_full * sizeof *cached);
        n_cached = n_full;
        if (n_turns > 1 && a.chat) printf("> %s\n", a.prompts[turn]);
        size_t rl = 0;
        st = generate(&r, tk, &smp, a.n_gen, a.ignore_eos, &replies[turn], &rl, cached, &n_cached);
        if (st != MI_OK) {
            fprintf(stderr, "minfer: %s\n", mi_errmsg());
            goto out;
        }
        if (a.chat) {
            msgs[n_msgs].role = "assistant";
            msgs[n_msgs].content = replies[turn] ? replies[turn] : "";
            n_msgs++;
        }
    }

    int64_t last_rows;
    const float *last = mi_logits(s, &last_rows);
    if (last) last += (size_t)(last_rows - 1) * (size_t)hp->n_vocab;
    /* greedy and top-k runs keep no logits (the session returns the argmax or the candidates):
     * their hash is of the tokens */
    uint32_t h = last ? fnv1a(FNV1A_START, last, (size_t)hp->n_vocab * sizeof(float)) : r.tok_hash;
    printf("prompt: %lld tok, %.1f tok/s | gen: %lld tok, %.1f tok/s, %.1f GB/s | %s hash %08x\n",
           (long long)r.n_prompt_tok, r.t_prompt > 0 ? r.n_prompt_tok / r.t_prompt : 0.0,
           (long long)r.n_gen_tok, r.t_gen > 0 ? r.n_gen_steps / r.t_gen : 0.0,
           r.t_gen > 0 ? r.gen_bytes / r.t_gen / 1e9 : 0.0, last ? "logits" : "tokens", h);
    rc = 0;
out:
    if (r.dump) {
        fseek(r.dump, 12, SEEK_SET);
        fwrite(&r.dump_rows, 4, 1, r.dump);
        if (mi_file_out_commit(&dump_out) != MI_OK && rc == 0) {
            fprintf(stderr, "minfer: writing %s: %s\n", a.dump, mi_errmsg());
            rc = 1;
        }
    }
    for (int i = 0; i < MAX_TURNS; i++) free(replies[i]);
    free(cached);
    free(full);
    mi_sampler_free(&smp);
    mi_session_free(s);
    tok_free(tk);
    mi_model_free(m);
    return rc;
}

/* `minfer synth`: writes a valid GGUF of a real model's shape (common/model/shapes.c) in
 * a type mix, with a GPT-2 style byte-level BPE vocab and random weights. Quant blocks are
 * random bytes with finite, modest scales, streamed through the GGUF writer's fill callback
 * so a 7B file never sits in RAM; the same seed gives the same file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include "common/core/mi_err.h"
#include "common/core/mi_fp16.h"
#include "common/gguf/gguf.h"
#include "common/quant/mi_types.h"
#include "common/model/shapes.h"
#include "common/core/mi_progress.h"

/* ---------------- PRNG: splitmix64, one stream per (tensor, chunk) ---------------- */
static inline uint64_t sm64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline float rnd_u(uint64_t *s) { return (float)(sm64(s) >> 40) * (1.0f / 16777216.0f); } /* [0,1) */
/* approximately N(0,1): Irwin-Hall sum of four 16-bit uniforms (cheap; tails bounded at ~3.5) */
static inline float rnd_g(uint64_t *s) {
    uint64_t r = sm64(s);
    float u = (float)(r & 0xffff) + (float)((r >> 16) & 0xffff) + (float)((r >> 32) & 0xffff) + (float)(r >> 48);
    return (u * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}
static uint64_t hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* ---------------- GPT-2 byte-level BPE vocab ---------------- */
/* Built-in training text: merges learnt from it make ordinary English and C/Python text
 * tokenize into multi-byte tokens, so tokenizer tests on a synth model are not trivial. */
static const char train_text[] =
    "The quick brown fox jumps over the lazy dog. The capital of France is Paris, and the capital "
    "of Germany is Berlin. A language model reads a sequence of tokens and predicts the next token. "
    "Each layer of the transformer applies attention and then a feed forward network, with a residual "
    "connection around each of them. The attention heads share their keys and values in groups, which "
    "makes the cache smaller. Numbers such as 1, 2, 3, 10, 100, 2048 and 3.14159 appear in the text too. "
    "What is the weather like today? It is sunny and warm in the morning, and it will rain in the evening. "
    "I think that this is a good idea, but we should test it first. They went to the market to buy some "
    "bread, milk, eggs and cheese for the weekend. She said: \"Hello, world!\" and then she left the room. "
    "There are many ways to write a program; the best one is the one that you can read again next year. "
    "int main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++) {\n        printf(\"%s\\n\", argv[i]);\n"
    "    }\n    return 0;\n}\n"
    "def forward(self, x):\n    h = self.norm(x)\n    h = self.attention(h) + x\n    return self.ffn(self.norm2(h)) + h\n"
    "for token in tokens:\n    if token == eos:\n        break\n    output.append(decode(token))\n"
    "static inline float silu(float x) { return x / (1.0f + expf(-x)); }\n"
    "The quick brown fox jumps over the lazy dog again and again, because the dog is still lazy. "
    "Hello, how are you? I am fine, thank you. What would you like to do next? Let us write some code. "
    "the of and to in is that for it with as was on be at by this had not are but from or have an they "
    "which one you were her all she there would their we him been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may then do "
    "first any my now such like our over man me even most made after also did many before must through "
    "back years where much your way well down should because each just those people how too little state "
    "good very make world still own see men work long get here between both life being under never day "
    "same another know while last might us great old year off come since against go came right used take";

/* GPT-2's byte -> code point table: printable Latin-1 bytes map to themselves, the other 68
 * to 256.. in byte order, so no token text holds a space or a control character. */
static void byte_table(uint32_t cp[256], uint8_t order[256]) {
    int n = 0, k = 0;
    bool direct[256] = {0};
    for (int b = 33; b <= 126; b++) direct[b] = true;
    for (int b = 161; b <= 172; b++) direct[b] = true;
    for (int b = 174; b <= 255; b++) direct[b] = true;
    for (int b = 0; b < 256; b++) if (direct[b]) { cp[b] = (uint32_t)b; order[k++] = (uint8_t)b; }
    for (int b = 0; b < 256; b++) if (!direct[b]) { cp[b] = 256u + (uint32_t)n++; order[k++] = (uint8_t)b; }
}

static size_t put_utf8(char *o, uint32_t c) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xc0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3f)); return 2; }
    o[0] = (char)(0xe0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3f)); o[2] = (char)(0x80 | (c & 0x3f));
    return 3;
}

typedef struct { uint8_t *b; uint32_t len; } bytestr;

typedef struct {
    bytestr *tok; int64_t n, cap;      /* raw bytes of each non-special token */
    int64_t *slot; int64_t nslot;      /* hash set of token ids by bytes (-1 empty) */
    int64_t (*merge)[2]; int64_t n_merge;
} vocab_b;

static uint64_t hash_bytes(const uint8_t *b, uint32_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
static int64_t vb_find(const vocab_b *v, const uint8_t *b, uint32_t n) {
    for (uint64_t i = hash_bytes(b, n) & (uint64_t)(v->nslot - 1);; i = (i + 1) & (uint64_t)(v->nslot - 1)) {
        int64_t id = v->slot[i];
        if (id < 0) return -1;
        if (v->tok[id].len == n && !memcmp(v->tok[id].b, b, n)) return id;
    }
}
/* Adds a token (bytes not yet present); returns its id. Capacity is fixed up front. */
static int64_t vb_add(vocab_b *v, const uint8_t *b, uint32_t n) {
    int64_t id = v->n++;
    v->tok[id].b = malloc(n);
    memcpy(v->tok[id].b, b, n);
    v->tok[id].len = n;
    uint64_t i = hash_bytes(b, n) & (uint64_t)(v->nslot - 1);
    while (v->slot[i] >= 0) i = (i + 1) & (uint64_t)(v->nslot - 1);
    v->slot[i] = id;
    return id;
}
static int64_t vb_merge(vocab_b *v, int64_t a, int64_t b) {
    uint32_t la = v->tok[a].len, lb = v->tok[b].len;
    uint8_t buf[256];
    if (la + lb > sizeof buf) return -1;
    memcpy(buf, v->tok[a].b, la);
    memcpy(buf + la, v->tok[b].b, lb);
    if (vb_find(v, buf, la + lb) >= 0) return -1;
    int64_t id = vb_add(v, buf, la + lb);
    v->merge[v->n_merge][0] = a;
    v->merge[v->n_merge][1] = b;
    v->n_merge++;
    return id;
}

/* Learns BPE merges on train_text (words = optional leading space + run of non-spaces),
 * most frequent pair first, ties to the smallest ids; then pads with synthetic merges
 * (existing token + a letter) until n_target tokens. Every merge's pieces and result
 * are tokens, so the vocab is a valid BPE. */
static mi_status vocab_build(vocab_b *v, int64_t n_target, const uint8_t order[256]) {
    memset(v, 0, sizeof *v);
    v->cap = n_target;
    v->tok = calloc((size_t)n_target, sizeof *v->tok);
    v->nslot = 1;
    while (v->nslot < 2 * n_target + 16) v->nslot <<= 1;
    v->slot = malloc((size_t)v->nslot * sizeof *v->slot);
    v->merge = malloc((size_t)n_target * sizeof *v->merge);
    if (!v->tok || !v->slot || !v->merge) return mi_err(MI_ERR_NOMEM, "synth: vocab allocation failed");
    for (int64_t i = 0; i < v->nslot; i++) v->slot[i] = -1;
    int64_t byte_id[256];
    for (int k = 0; k < 256; k++) byte_id[order[k]] = vb_add(v, &order[k], 1);

    /* words as token-id sequences (all occurrences; the text is small) */
    size_t L = sizeof train_text - 1;
    int64_t *seq = malloc(L * sizeof *seq);
    size_t *wstart = malloc((L + 1) * sizeof *wstart);
    if (!seq || !wstart) { free(seq); free(wstart); return mi_err(MI_ERR_NOMEM, "synth: vocab allocation failed"); }
    size_t nw = 0;
    for (size_t i = 0; i < L; i++) {
        uint8_t c = (uint8_t)train_text[i];
        bool boundary = i == 0 || c == ' ' || c == '\n' || train_text[i - 1] == '\n';
        if (boundary) wstart[nw++] = i;
        seq[i] = byte_id[c];
    }
    wstart[nw] = L;
    size_t *wlen = malloc(nw * sizeof *wlen);
    if (!wlen) { free(seq); free(wstart); return mi_err(MI_ERR_NOMEM, "synth: vocab allocation failed"); }
    for (size_t w = 0; w < nw; w++) wlen[w] = wstart[w + 1] - wstart[w];

    int64_t max_learn = n_target - v->n < 4000 ? n_target - v->n : 4000;
    size_t nmap = 1;
    while (nmap < 2 * L + 16) nmap <<= 1;
    uint64_t *mkey = malloc(nmap * sizeof *mkey);
    int64_t *mcnt = malloc(nmap * sizeof *mcnt);
    if (!mkey || !mcnt) { free(seq); free(wstart); free(wlen); free(mkey); free(mcnt);
                          return mi_err(MI_ERR_NOMEM, "synth: vocab allocation failed"); }
    for (int64_t it = 0; it < max_learn; it++) {
        /* count adjacent pairs in one pass (hash map keyed by (a, b)) */
        memset(mkey, 0xff, nmap * sizeof *mkey);
        int64_t best_a = -1, best_b = -1, best_c = 1;
        for (size_t w = 0; w < nw; w++) {
            const int64_t *s = seq + wstart[w];
            for (size_t j = 0; j + 1 < wlen[w]; j++) {
                uint64_t key = ((uint64_t)s[j] << 32) | (uint64_t)s[j + 1];
                size_t h = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & (nmap - 1);
                while (mkey[h] != key && mkey[h] != UINT64_MAX) h = (h + 1) & (nmap - 1);
                if (mkey[h] == UINT64_MAX) { mkey[h] = key; mcnt[h] = 0; }
                int64_t c = ++mcnt[h], a = s[j], b = s[j + 1];
                if (c > best_c || (c == best_c && c > 1 && (a < best_a || (a == best_a && b < best_b)))) {
                    best_a = a; best_b = b; best_c = c;
                }
            }
        }
        if (best_a < 0) break;          /* no pair occurs twice any more */
        int64_t id = vb_merge(v, best_a, best_b);
        if (id < 0) { /* same bytes already a token by another split: reuse it, no new merge */
            uint8_t buf[256];
            uint32_t la = v->tok[best_a].len, lb = v->tok[best_b].len;
            if (la + lb > sizeof buf) break;
            memcpy(buf, v->tok[best_a].b, la);
            memcpy(buf + la, v->tok[best_b].b, lb);
            id = vb_find(v, buf, la + lb);
            if (id < 0) break;
        }
        for (size_t w = 0; w < nw; w++) {
            int64_t *s = seq + wstart[w];
            size_t o = 0;
            for (size_t j = 0; j < wlen[w]; j++) {
                if (j + 1 < wlen[w] && s[j] == best_a && s[j + 1] == best_b) { s[o++] = id; j++; }
                else s[o++] = s[j];
            }
            wlen[w] = o;
        }
    }
    free(mkey); free(mcnt);
    free(seq); free(wstart); free(wlen);

    /* synthetic padding: breadth-first over existing tokens, appending a lowercase letter */
    for (int64_t a = 0; v->n < n_target && a < v->n; a++)
        for (int c = 'a'; c <= 'z' && v->n < n_target; c++) vb_merge(v, a, byte_id[c]);
    if (v->n < n_target) return mi_err(MI_ERR_INTERNAL, "synth: could not build %lld tokens", (long long)n_target);
    return MI_OK;
}

static void vocab_free(vocab_b *v) {
    for (int64_t i = 0; i < v->n; i++) free(v->tok[i].b);
    free(v->tok); free(v->slot); free(v->merge);
}

/* ---------------- tensors ---------------- */
typedef enum { FILL_WEIGHT, FILL_NORM, FILL_BIAS } fill_kind;
typedef struct {
    char name[48];
    int n_dims;
    int64_t ne[4];
    mi_type type;
    fill_kind kind;
    uint64_t seed;
    size_t nbytes;
} synth_tensor;

typedef struct {
    synth_tensor *t; int64_t n, cap;
} tlist;

static void tl_add(tlist *l, fill_kind kind, int64_t ne0, int64_t ne1, const char *fmt, int layer) {
    if (l->n == l->cap) return;   /* capacity computed exactly by the caller */
    synth_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->kind = kind;
    t->n_dims = ne1 > 0 ? 2 : 1;
    t->ne[0] = ne0; t->ne[1] = ne1 > 0 ? ne1 : 1; t->ne[2] = t->ne[3] = 1;
}

/* GGUF names and shapes; a weight is [K, M]: ne[0] = K (input dim), ne[1] = M (outputs).
 * Layers in numeric order, so q4_k_m's file-order layer counter equals the layer index. */
static void build_tensors(const mi_shape *s, tlist *l) {
    int64_t E = s->n_embd, Q = s->n_head * s->head_dim, KV = s->n_head_kv * s->head_dim, F = s->n_ff;
    tl_add(l, FILL_WEIGHT, E, s->n_vocab, "token_embd.weight", 0);
    for (int i = 0; i < (int)s->n_layer; i++) {
        tl_add(l, FILL_NORM, E, 0, "blk.%d.attn_norm.weight", i);
        tl_add(l, FILL_WEIGHT, E, Q, "blk.%d.attn_q.weight", i);
        if (s->qkv_bias) tl_add(l, FILL_BIAS, Q, 0, "blk.%d.attn_q.bias", i);
        tl_add(l, FILL_WEIGHT, E, KV, "blk.%d.attn_k.weight", i);
        if (s->qkv_bias) tl_add(l, FILL_BIAS, KV, 0, "blk.%d.attn_k.bias", i);
        tl_add(l, FILL_WEIGHT, E, KV, "blk.%d.attn_v.weight", i);
        if (s->qkv_bias) tl_add(l, FILL_BIAS, KV, 0, "blk.%d.attn_v.bias", i);
        if (s->qk_norm) {
            tl_add(l, FILL_NORM, s->head_dim, 0, "blk.%d.attn_q_norm.weight", i);
            tl_add(l, FILL_NORM, s->head_dim, 0, "blk.%d.attn_k_norm.weight", i);
        }
        tl_add(l, FILL_WEIGHT, Q, E, "blk.%d.attn_output.weight", i);
        tl_add(l, FILL_NORM, E, 0, "blk.%d.ffn_norm.weight", i);
        tl_add(l, FILL_WEIGHT, E, F, "blk.%d.ffn_gate.weight", i);
        tl_add(l, FILL_WEIGHT, E, F, "blk.%d.ffn_up.weight", i);
        tl_add(l, FILL_WEIGHT, F, E, "blk.%d.ffn_down.weight", i);
    }
    tl_add(l, FILL_NORM, E, 0, "output_norm.weight", 0);
    if (!s->tied) tl_add(l, FILL_WEIGHT, E, s->n_vocab, "output.weight", 0);
}

/* ---------------- random fill ---------------- */
static inline void put_h(uint8_t *p, float v) { uint16_t h = mi_f32_to_f16(v); memcpy(p, &h, 2); }
static inline float urange(uint64_t *s, float lo, float hi) { return lo + (hi - lo) * rnd_u(s); }

/* Packs 8 six-bit scales and mins the way Q4_K/Q5_K store them (12 bytes). */
static void pack_k4_scales(uint8_t *q, const uint8_t sc[8], const uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
}

/* Random quant bytes, then every scale set to a finite normal fp16 value chosen so the
 * dequantized weights have std ~0.02 and mean ~0 (K-quants: min = scale * centre). */
static void fill_quant(mi_type t, uint8_t *p, size_t nblk, size_t bs, uint64_t *s) {
    size_t nb = nblk * bs, i = 0;
    for (; i + 8 <= nb; i += 8) { uint64_t r = sm64(s); memcpy(p + i, &r, 8); }
    if (i < nb) { uint64_t r = sm64(s); memcpy(p + i, &r, nb - i); }
    for (size_t b = 0; b < nblk; b++, p += bs) {
        switch (t) {
        case MI_TYPE_Q4_0: put_h(p, urange(s, 3e-3f, 6e-3f)); break;
        case MI_TYPE_Q5_0: put_h(p, urange(s, 1.5e-3f, 3e-3f)); break;
        case MI_TYPE_Q8_0: put_h(p, urange(s, 1.8e-4f, 3.6e-4f)); break;
        case MI_TYPE_Q4_1: case MI_TYPE_Q5_1: {
            float d = urange(s, t == MI_TYPE_Q4_1 ? 3e-3f : 1.5e-3f, t == MI_TYPE_Q4_1 ? 6e-3f : 3e-3f);
            put_h(p, d);
            put_h(p + 2, -d * (t == MI_TYPE_Q4_1 ? 7.5f : 15.5f));
            break;
        }
        case MI_TYPE_Q4_K: case MI_TYPE_Q5_K: {
            uint8_t sc[8];
            int lo = t == MI_TYPE_Q4_K ? 16 : 8, span = t == MI_TYPE_Q4_K ? 48 : 24;
            uint64_t r = sm64(s);
            for (int j = 0; j < 8; j++) sc[j] = (uint8_t)(lo + (int)((r >> (8 * j)) & 0xff) % span);
            float d = urange(s, 0.7e-4f, 1.4e-4f);
            put_h(p + offsetof(mi_block_q4_k, d), d);
            put_h(p + offsetof(mi_block_q4_k, dmin), d * (t == MI_TYPE_Q4_K ? 7.5f : 15.5f));
            pack_k4_scales(p + offsetof(mi_block_q4_k, scales), sc, sc);
            break;
        }
        case MI_TYPE_Q6_K: {
            uint64_t r0 = sm64(s), r1 = sm64(s);
            int8_t *sc = (int8_t *)(p + offsetof(mi_block_q6_k, scales));
            for (int j = 0; j < 16; j++) sc[j] = (int8_t)(4 + (int)(((j < 8 ? r0 : r1) >> (8 * (j & 7))) & 0xff) % 13);
            put_h(p + offsetof(mi_block_q6_k, d), urange(s, 0.7e-4f, 1.4e-4f));
            break;
        }
        default: break;
        }
    }
}

static void fill_float(mi_type t, fill_kind kind, uint8_t *p, size_t n, uint64_t *s) {
    for (size_t i = 0; i < n; i++) {
        float v = kind == FILL_NORM ? 1.0f + 0.05f * rnd_g(s) : 0.02f * rnd_g(s);
        if (t == MI_TYPE_F32) memcpy(p + 4 * i, &v, 4);
        else { uint16_t h = t == MI_TYPE_F16 ? mi_f32_to_f16(v) : mi_f32_to_bf16(v); memcpy(p + 2 * i, &h, 2); }
    }
}

#define CHUNK_BYTES ((size_t)1 << 18)

typedef struct {
    const synth_tensor *t;
    uint8_t *dst;
    size_t n_units, unit_bytes, units_per_chunk, n_chunks;
    int tid, n_threads;
} fill_job;

/* Chunk c of a tensor always gets the same stream, whatever the thread count. */
static void *fill_worker(void *arg) {
    fill_job *j = arg;
    const mi_type_traits *tr = mi_type_get((int)j->t->type);
    for (size_t c = (size_t)j->tid; c < j->n_chunks; c += (size_t)j->n_threads) {
        uint64_t s = j->t->seed ^ (0xd1b54a32d192ed03ull * (c + 1));
        sm64(&s);
        size_t u0 = c * j->units_per_chunk, nu = j->n_units - u0 < j->units_per_chunk ? j->n_units - u0 : j->units_per_chunk;
        uint8_t *p = j->dst + u0 * j->unit_bytes;
        if (tr->is_quantized) fill_quant(j->t->type, p, nu, j->unit_bytes, &s);
        else fill_float(j->t->type, j->t->kind, p, nu, &s);
    }
    return NULL;
}

typedef struct {
    const synth_tensor *t;
    int64_t n;
    int n_threads;
    mi_progress prog;
} synth_ctx;

static mi_status synth_fill(void *user, int64_t idx, void *dst, size_t nbytes) {
    synth_ctx *c = user;
    if (idx < 0 || idx >= c->n) return mi_err(MI_ERR_INTERNAL, "synth: fill for unknown tensor %lld", (long long)idx);
    const synth_tensor *t = &c->t[idx];
    if (nbytes != t->nbytes)
        return mi_err(MI_ERR_INTERNAL, "synth: %s: writer asks %zu bytes, expected %zu", t->name, nbytes, t->nbytes);
    const mi_type_traits *tr = mi_type_get((int)t->type);
    fill_job jobs[16];
    pthread_t th[16];
    size_t unit_bytes = tr->type_size;   /* one block, or one element of a float type */
    size_t n_units = nbytes / unit_bytes;
    size_t per = CHUNK_BYTES / unit_bytes ? CHUNK_BYTES / unit_bytes : 1;
    size_t n_chunks = (n_units + per - 1) / per;
    int nt = c->n_threads;
    if ((size_t)nt > n_chunks) nt = (int)n_chunks;
    if (nt < 1) nt = 1;
    for (int i = 0; i < nt; i++)
        jobs[i] = (fill_job){t, dst, n_units, unit_bytes, per, n_chunks, i, nt};
    int started = 0;
    for (int i = 1; i < nt; i++) {
        if (pthread_create(&th[i], NULL, fill_worker, &jobs[i]) != 0) break;
        started = i;
    }
    /* threads that failed to start: this thread does their share too */
    for (int i = started + 1; i < nt; i++) fill_worker(&jobs[i]);
    fill_worker(&jobs[0]);
    for (int i = 1; i <= started; i++) pthread_join(th[i], NULL);
    return MI_OK;
}

static void synth_progress(void *user, size_t done, size_t total) {
    mi_progress_bytes(&((synth_ctx *)user)->prog, done, total);
}

/* ---------------- metadata ---------------- */
static const char chatml_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static mi_status write_vocab(gguf_writer *w, const mi_shape *s) {
    static const char *specials[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    uint32_t cp[256];
    uint8_t order[256];
    byte_table(cp, order);
    int64_t V = s->n_vocab, n_norm = V - 3;
    if (n_norm < 256) return mi_err(MI_ERR_INVALID, "synth: shape %s: n_vocab %lld < 259", s->name, (long long)V);
    vocab_b vb;
    mi_status st = vocab_build(&vb, n_norm, order);
    if (st != MI_OK) { vocab_free(&vb); return st; }

    /* texts: byte-level tokens in GPT-2's code points (at most 3 UTF-8 bytes per byte) */
    size_t total = 64;
    for (int64_t i = 0; i < vb.n; i++) total += 3 * (size_t)vb.tok[i].len + 1;
    for (int64_t i = 0; i < vb.n_merge; i++)
        total += 3 * (size_t)(vb.tok[vb.merge[i][0]].len + vb.tok[vb.merge[i][1]].len) + 2;
    char *buf = malloc(total + 64);
    const char **tok = malloc((size_t)V * sizeof *tok);
    const char **mrg = malloc((size_t)(vb.n_merge ? vb.n_merge : 1) * sizeof *mrg);
    int32_t *ttype = malloc((size_t)V * sizeof *ttype);
    if (!buf || !tok || !mrg || !ttype) {
        free(buf); free(tok); free(mrg); free(ttype); vocab_free(&vb);
        return mi_err(MI_ERR_NOMEM, "synth: vocab allocation failed");
    }
    char *o = buf;
    int64_t base = s->specials_first ? 3 : 0, sp0 = s->specials_first ? 0 : n_norm;
    for (int64_t i = 0; i < vb.n; i++) {
        tok[base + i] = o;
        for (uint32_t k = 0; k < vb.tok[i].len; k++) o += put_utf8(o, cp[vb.tok[i].b[k]]);
        *o++ = 0;
        ttype[base + i] = 1;                                 /* NORMAL */
    }
    for (int k = 0; k < 3; k++) { tok[sp0 + k] = specials[k]; ttype[sp0 + k] = 3; }  /* CONTROL */
    for (int64_t i = 0; i < vb.n_merge; i++) {
        mrg[i] = o;
        for (int h = 0; h < 2; h++) {
            const bytestr *b = &vb.tok[vb.merge[i][h]];
            for (uint32_t k = 0; k < b->len; k++) o += put_utf8(o, cp[b->b[k]]);
            *o++ = h ? 0 : ' ';
        }
    }
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_w_str(w, "tokenizer.ggml.pre", s->tok_pre);
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", tok, (uint64_t)V);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, ttype, (uint64_t)V);
    gguf_w_arr_str(w, "tokenizer.ggml.merges", mrg, (uint64_t)vb.n_merge);
    /* Qwen: bos = pad = <|endoftext|>, eos = <|im_end|>; SmolLM: bos <|im_start|>, eos = pad <|im_end|> */
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)(s->specials_first ? sp0 + 1 : sp0));
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(sp0 + 2));
    gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)(s->specials_first ? sp0 + 2 : sp0));
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", false);
    gguf_w_str(w, "tokenizer.chat_template", chatml_template);
    free(buf); free(tok); free(mrg); free(ttype);
    vocab_free(&vb);
    return MI_OK;
}

static void write_hparams(gguf_writer *w, const mi_shape *s, const mi_mix *mix, uint64_t seed, bool pure) {
    char k[96];
    const char *a = s->arch;
    gguf_w_str(w, "general.architecture", a);
    gguf_w_str(w, "general.type", "model");
    gguf_w_str(w, "general.name", s->title);
    gguf_w_u32(w, "general.alignment", GGUF_DEFAULT_ALIGNMENT);
    gguf_w_u32(w, "general.file_type", mix->ftype);
    gguf_w_u32(w, "general.quantization_version", 2);
#define KEY(suffix) (snprintf(k, sizeof k, "%s." suffix, a), k)
    gguf_w_u32(w, KEY("context_length"), (uint32_t)s->n_ctx);
    gguf_w_u32(w, KEY("embedding_length"), (uint32_t)s->n_embd);
    gguf_w_u32(w, KEY("block_count"), (uint32_t)s->n_layer);
    gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff);
    gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head);
    gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv);
    gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), s->rms_eps);
    gguf_w_f32(w, KEY("rope.freq_base"), s->rope_freq_base);
    if (!strcmp(a, "qwen3") || s->head_dim * s->n_head != s->n_embd) {
        gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim);
        gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim);
    }
    if (!strcmp(a, "llama")) {
        gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)s->head_dim);
        gguf_w_u32(w, KEY("vocab_size"), (uint32_t)s->n_vocab);
    }
#undef KEY
    /* provenance, so benchmarks and tests can tell a synthetic file from a real one */
    gguf_w_str(w, "minfer.synth.shape", s->name);
    gguf_w_str(w, "minfer.synth.mix", mix->name);
    gguf_w_u64(w, "minfer.synth.seed", seed);
    gguf_w_bool(w, "minfer.synth.pure", pure);
}

/* ---------------- command ---------------- */
static void synth_usage(FILE *f) {
    fprintf(f, "usage: minfer synth --shape NAME --type MIX -o FILE [--seed N] [--pure] [--threads N]\n"
               "       minfer synth --list\n");
}

static void synth_list(void) {
    printf("shapes (arch, n_embd, n_layer, heads/kv, head_dim, n_ff, vocab, tied, params):\n");
    for (int i = 0; i < mi_shape_count(); i++) {
        const mi_shape *s = mi_shape_at(i);
        printf("  %-14s %-6s %5lld %3lld %3lld/%-3lld %4lld %6lld %7lld %-5s %.3fB\n", s->name, s->arch,
               (long long)s->n_embd, (long long)s->n_layer, (long long)s->n_head, (long long)s->n_head_kv,
               (long long)s->head_dim, (long long)s->n_ff, (long long)s->n_vocab, s->tied ? "tied" : "-",
               (double)mi_shape_n_params(s) / 1e9);
    }
    printf("mixes:");
    for (int i = 0; i < mi_mix_count(); i++) printf(" %s", mi_mix_at(i)->name);
    printf("\n");
}

int cmd_synth(int argc, char **argv) {
    const char *shape_name = NULL, *mix_name = NULL, *out = NULL;
    uint64_t seed = 1;
    bool pure = false;
    long nthreads = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--list")) { synth_list(); return 0; }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { synth_usage(stdout); return 0; }
        else if (!strcmp(a, "--pure")) pure = true;
        else if (!strcmp(a, "--shape") && has_val) shape_name = argv[++i];
        else if (!strcmp(a, "--type") && has_val) mix_name = argv[++i];
        else if (!strcmp(a, "-o") && has_val) out = argv[++i];
        else if (!strcmp(a, "--seed") && has_val) {
            char *e;
            seed = strtoull(argv[++i], &e, 0);
            if (*e || !argv[i][0]) { fprintf(stderr, "synth: bad --seed '%s'\n", argv[i]); return 2; }
        } else if (!strcmp(a, "--threads") && has_val) {
            nthreads = atol(argv[++i]);
        } else {
            fprintf(stderr, "synth: unknown or incomplete argument '%s'\n", a);
            synth_usage(stderr);
            return 2;
        }
    }
    if (!shape_name || !mix_name || !out) { synth_usage(stderr); return 2; }
    const mi_shape *s = mi_shape_find(shape_name);
    if (!s) { fprintf(stderr, "synth: unknown shape '%s' (minfer synth --list)\n", shape_name); return 2; }
    const mi_mix *mix = mi_mix_find(mix_name);
    if (!mix) { fprintf(stderr, "synth: unknown type mix '%s' (minfer synth --list)\n", mix_name); return 2; }
    if (nthreads < 1) nthreads = 1;
    if (nthreads > 16) nthreads = 16;

    int64_t cap = 3 + s->n_layer * 16;
    tlist tl = {calloc((size_t)cap, sizeof(synth_tensor)), 0, cap};
    const char **names = malloc((size_t)cap * sizeof *names);
    int *nd = malloc((size_t)cap * sizeof *nd);
    int64_t (*ne)[4] = malloc((size_t)cap * sizeof *ne);
    mi_type *types = malloc((size_t)cap * sizeof *types);
    gguf_writer *w = NULL;
    int rc = 1;
    if (!tl.t || !names || !nd || !ne || !types) { fprintf(stderr, "synth: out of memory\n"); goto done; }
    build_tensors(s, &tl);
    for (int64_t i = 0; i < tl.n; i++) {
        names[i] = tl.t[i].name;
        nd[i] = tl.t[i].n_dims;
        memcpy(ne[i], tl.t[i].ne, sizeof ne[i]);
    }
    mi_mix_plan(mix, pure, tl.n, names, nd, (const int64_t (*)[4])ne, types);

    w = gguf_writer_new();
    if (!w) { fprintf(stderr, "synth: out of memory\n"); goto done; }
    write_hparams(w, s, mix, seed, pure);
    if (write_vocab(w, s) != MI_OK) { fprintf(stderr, "%s\n", mi_errmsg()); goto done; }
    size_t total = 0;
    for (int64_t i = 0; i < tl.n; i++) {
        synth_tensor *t = &tl.t[i];
        t->type = types[i];
        const mi_type_traits *tr = mi_type_get((int)t->type);
        size_t row = mi_row_size(t->type, t->ne[0]);
        if (!tr || row == 0) {
            fprintf(stderr, "synth: %s: type %s cannot hold rows of %lld\n", t->name, mi_type_name((int)t->type),
                    (long long)t->ne[0]);
            goto done;
        }
        t->nbytes = row * (size_t)t->ne[1];
        t->seed = seed * 0x9e3779b97f4a7c15ull ^ hash_str(t->name);
        total += t->nbytes;
        if (gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, NULL) != i) {
            fprintf(stderr, "synth: writer refused tensor %s: %s\n", t->name, mi_errmsg());
            goto done;
        }
    }
    char sz[32], rate[32];
    fprintf(stderr, "synth: %s (%s, %.3f B params) as %s%s: %lld tensors, %s of weights -> %s\n", s->name, s->arch,
            (double)mi_shape_n_params(s) / 1e9, mix->name, pure ? " (pure)" : "", (long long)tl.n,
            mi_fmt_bytes(sz, sizeof sz, (double)total), out);
    synth_ctx ctx = {tl.t, tl.n, (int)nthreads, {0}};
    mi_progress_start(&ctx.prog, "synth");
    mi_status st = gguf_writer_write(w, out, synth_fill, &ctx, synth_progress);
    const double el = mi_progress_end(&ctx.prog);
    if (st != MI_OK) { fprintf(stderr, "synth: writing %s: %s\n", out, mi_errmsg()); goto done; }
    fprintf(stderr, "synth: wrote %s: %s in %.1f s (%s/s), %.2f bits/weight\n", out, sz, el,
            mi_fmt_bytes(rate, sizeof rate, (double)total / (el > 1e-6 ? el : 1e-6)),
            8.0 * (double)total / (double)mi_shape_n_params(s));
    rc = 0;
done:
    if (w) gguf_writer_free(w);
    free(tl.t); free(names); free(nd); free(ne); free(types);
    return rc;
}

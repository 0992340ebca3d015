/* GPT-2 byte-level BPE from a GGUF's tokenizer.ggml.* keys: loading (vocab, merges, token
 * types, special ids), encoding (special-token partition -> pre-tokenizer split -> BPE by
 * merge rank with a heap over a linked list of symbols) and the streaming detokenizer. */
#include <stdlib.h>
#include <string.h>
#include "common/tokenizer/tok_internal.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* Open-addressed hash of token ids keyed by a byte string held elsewhere (the arena). */
typedef struct { int32_t *slot; size_t mask; } idmap;
/* Merge (left id, right id) -> rank and merged id. */
typedef struct { uint64_t key; int32_t rank, id; } merge_ent;

struct mi_tokenizer {
    int64_t n_vocab;
    char *arena;                 /* each token's text, key and piece, NUL-terminated */
    size_t *text_off, *piece_off, *key_off;     /* [n_vocab] offsets into arena */
    uint32_t *text_len, *piece_len, *key_len;   /* [n_vocab]; key_len UINT32_MAX: no key */
    uint8_t *type;               /* [n_vocab] tokenizer.ggml.token_type */
    idmap by_text;               /* GGUF token text -> id */
    idmap by_key;                /* byte-level-decoded text -> id (decodable tokens only) */
    int32_t byte_id[256];        /* single-byte token of each byte, -1 if the vocab lacks it */
    merge_ent *merges;           /* [merge_mask + 1] open-addressed, key 0 = empty */
    size_t merge_mask;
    int32_t *special;            /* [n_special] control/user-defined ids matched in input */
    int64_t n_special;
    int32_t *eog;                /* [n_eog] */
    int n_eog;
    mi_pretok pretok;
    bool ignore_merges, add_bos;
    int32_t bos, eos, eot, unk;
    size_t max_piece;
};

/* ---- GPT-2 byte <-> code point map: printable Latin-1 bytes map to themselves, the other
 * 68 bytes to U+0100.. in byte order. ---- */
static bool byte_is_direct(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174); }

/* code point -> byte, -1 when cp is not in the byte-level alphabet */
static int bytelevel_decode_cp(uint32_t cp) {
    if (cp < 256) return byte_is_direct((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    int k = (int)cp - 256;
    for (int b = 0; b < 256; b++)
        if (!byte_is_direct(b) && k-- == 0) return b;
    return -1;
}

/* table[cp] for cp < 256 + 68: the byte cp stands for, or -1 */
static void bytelevel_table(int16_t table[256 + 68]) {
    for (uint32_t c = 0; c < 256 + 68; c++) table[c] = (int16_t)bytelevel_decode_cp(c);
}

/* Decode a byte-level string into dst (at most len bytes). Returns the byte count, or -1
 * when some character is outside the alphabet. */
static int64_t bytelevel_decode(const int16_t *table, const char *s, size_t len, char *dst) {
    size_t i = 0, n = 0;
    while (i < len) {
        uint32_t cp;
        i += utf8_decode((const unsigned char *)s + i, len - i, &cp);
        if (cp >= 256 + 68 || table[cp] < 0) return -1;
        dst[n++] = (char)table[cp];
    }
    return (int64_t)n;
}

/* ---- hashing ---- */
static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

static mi_status idmap_init(idmap *m, int64_t n) {
    size_t cap = pow2_at_least((size_t)n * 2 + 1);
    m->slot = malloc(cap * sizeof *m->slot);
    if (!m->slot) return mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");
    memset(m->slot, 0xff, cap * sizeof *m->slot);
    m->mask = cap - 1;
    return MI_OK;
}

static int32_t idmap_find(const idmap *m, const char *arena, const size_t *off, const uint32_t *len,
                          const char *key, size_t n) {
    for (size_t h = hash_bytes(key, n) & m->mask;; h = (h + 1) & m->mask) {
        int32_t id = m->slot[h];
        if (id < 0) return -1;
        if (len[id] == n && !memcmp(arena + off[id], key, n)) return id;
    }
}

/* Inserts id unless its key is present already (the first id of a duplicate text wins). */
static void idmap_put(idmap *m, const char *arena, const size_t *off, const uint32_t *len, int32_t id) {
    const char *key = arena + off[id];
    for (size_t h = hash_bytes(key, len[id]) & m->mask;; h = (h + 1) & m->mask) {
        int32_t o = m->slot[h];
        if (o < 0) { m->slot[h] = id; return; }
        if (len[o] == len[id] && !memcmp(arena + off[o], key, len[id])) return;
    }
}

static const merge_ent *merge_find(const mi_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;   /* +1: 0 marks empty */
    for (size_t h = hash_u64(key) & t->merge_mask;; h = (h + 1) & t->merge_mask) {
        const merge_ent *e = &t->merges[h];
        if (e->key == key) return e;
        if (e->key == 0) return NULL;
    }
}

/* ---- loading ---- */
/* A string from the file, as an error message may show it: at most 60 bytes, control
 * bytes as '?', so a hostile file cannot send escape sequences to the user's terminal. */
static const char *shown(const char *s, size_t len, char out[64]) {
    size_t n = len < 60 ? len : 60;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        out[i] = c < 32 || c == 127 ? '?' : (char)c;
    }
    strcpy(out + n, len > n ? "..." : "");
    return out;
}

static mi_status get_id(const gguf_file *f, const char *key, int64_t n_vocab, int32_t *out) {
    *out = -1;
    if (gguf_find_key(f, key) < 0) return MI_OK;
    uint32_t v;
    MI_TRY(gguf_get_u32(f, key, &v));
    if ((int64_t)v >= n_vocab) return mi_err(MI_ERR_FORMAT, "%s = %u is past the vocabulary (%lld tokens)",
                                             key, v, (long long)n_vocab);
    *out = (int32_t)v;
    return MI_OK;
}

static mi_status load_vocab(mi_tokenizer *t, const gguf_file *f) {
    int64_t kt = gguf_find_key(f, "tokenizer.ggml.tokens");
    if (kt < 0 || gguf_arr_type(f, kt) != GGUF_VT_STRING)
        return mi_err(MI_ERR_FORMAT, "tokenizer.ggml.tokens: missing or not a string array");
    uint64_t n = gguf_arr_n(f, kt);
    if (n == 0 || n > INT32_MAX / 2) return mi_err(MI_ERR_FORMAT, "tokenizer.ggml.tokens: bad count %llu",
                                                   (unsigned long long)n);
    t->n_vocab = (int64_t)n;
    t->type = malloc(n);
    t->text_off = malloc(n * sizeof(size_t));
    t->piece_off = malloc(n * sizeof(size_t));
    t->text_len = malloc(n * sizeof(uint32_t));
    t->piece_len = malloc(n * sizeof(uint32_t));
    t->key_off = malloc(n * sizeof(size_t));
    t->key_len = malloc(n * sizeof(uint32_t));
    if (!t->type || !t->text_off || !t->piece_off || !t->text_len || !t->piece_len || !t->key_off || !t->key_len)
        return mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");

    int64_t ky = gguf_find_key(f, "tokenizer.ggml.token_type");
    const unsigned char *types = NULL;   /* int32 LE, not necessarily aligned in the mapping */
    if (ky >= 0) {
        if (gguf_arr_type(f, ky) != GGUF_VT_INT32 || gguf_arr_n(f, ky) != n)
            return mi_err(MI_ERR_FORMAT, "tokenizer.ggml.token_type: not an int32 array of %llu entries",
                          (unsigned long long)n);
        types = gguf_arr_data(f, ky);
    }
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t len;
        if (!gguf_arr_str(f, kt, i, &len)) return mi_err(MI_ERR_FORMAT, "tokenizer.ggml.tokens[%llu] unreadable",
                                                         (unsigned long long)i);
        if (len > UINT32_MAX / 4) return mi_err(MI_ERR_FORMAT, "tokenizer.ggml.tokens[%llu] too long",
                                                (unsigned long long)i);
        total += 3 * (len + 1);   /* text, piece, key (decoding never lengthens a string) */
    }
    t->arena = malloc(total ? total : 1);
    if (!t->arena) return mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");
    int16_t table[256 + 68];
    bytelevel_table(table);
    size_t pos = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = gguf_arr_str(f, kt, i, &len);
        int32_t ty = TT_NORMAL;
        if (types) memcpy(&ty, types + 4 * i, 4);
        if (ty < 1 || ty > 6) return mi_err(MI_ERR_FORMAT, "tokenizer.ggml.token_type[%llu] = %d is not a known type",
                                            (unsigned long long)i, ty);
        t->type[i] = (uint8_t)ty;
        t->text_off[i] = pos;
        t->text_len[i] = (uint32_t)len;
        memcpy(t->arena + pos, s, len);
        t->arena[pos + len] = 0;
        pos += len + 1;
        /* key: the byte-level-decoded text. HF's BPE vocab is keyed by the byte-level
         * string, so a token whose text leaves that alphabet is unreachable by BPE. */
        int64_t dl = bytelevel_decode(table, s, len, t->arena + pos);
        t->key_off[i] = pos;
        t->key_len[i] = dl < 0 ? UINT32_MAX : (uint32_t)dl;
        if (dl >= 0) t->arena[pos + dl] = 0;
        pos += len + 1;
        /* piece (what it prints): normal tokens their decoded bytes; control, user-defined
         * and the rest their text as is (stored raw, not byte-level encoded) */
        t->piece_off[i] = pos;
        if (ty == TT_NORMAL && dl >= 0) {
            memcpy(t->arena + pos, t->arena + t->key_off[i], (size_t)dl);
            t->piece_len[i] = (uint32_t)dl;
        } else {
            memcpy(t->arena + pos, s, len);
            t->piece_len[i] = (uint32_t)len;
        }
        t->arena[pos + t->piece_len[i]] = 0;
        if (t->piece_len[i] > t->max_piece) t->max_piece = t->piece_len[i];
        pos += len + 1;
    }
    MI_TRY(idmap_init(&t->by_text, t->n_vocab));
    MI_TRY(idmap_init(&t->by_key, t->n_vocab));
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    for (int64_t i = 0; i < t->n_vocab; i++) {
        idmap_put(&t->by_text, t->arena, t->text_off, t->text_len, (int32_t)i);
        if (t->key_len[i] == UINT32_MAX) continue;
        idmap_put(&t->by_key, t->arena, t->key_off, t->key_len, (int32_t)i);
        if (t->key_len[i] == 1 && t->byte_id[(unsigned char)t->arena[t->key_off[i]]] < 0)
            t->byte_id[(unsigned char)t->arena[t->key_off[i]]] = (int32_t)i;
    }
    return MI_OK;
}

static mi_status load_merges(mi_tokenizer *t, const gguf_file *f) {
    int64_t km = gguf_find_key(f, "tokenizer.ggml.merges");
    uint64_t n = 0;
    if (km >= 0) {
        if (gguf_arr_type(f, km) != GGUF_VT_STRING)
            return mi_err(MI_ERR_FORMAT, "tokenizer.ggml.merges: not a string array");
        n = gguf_arr_n(f, km);
    }
    if (n > INT32_MAX / 4) return mi_err(MI_ERR_FORMAT, "tokenizer.ggml.merges: bad count");
    size_t cap = pow2_at_least((size_t)n * 2 + 1);
    t->merges = calloc(cap, sizeof *t->merges);
    if (!t->merges) return mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");
    t->merge_mask = cap - 1;
    char buf[1024];
    for (uint64_t r = 0; r < n; r++) {
        size_t len;
        const char *s = gguf_arr_str(f, km, r, &len);
        const char *sp = s ? memchr(s, ' ', len) : NULL;
        if (!sp) return mi_err(MI_ERR_FORMAT, "tokenizer.ggml.merges[%llu]: not \"LEFT RIGHT\"", (unsigned long long)r);
        size_t la = (size_t)(sp - s), lb = len - la - 1;
        int32_t a = idmap_find(&t->by_text, t->arena, t->text_off, t->text_len, s, la);
        int32_t b = idmap_find(&t->by_text, t->arena, t->text_off, t->text_len, sp + 1, lb);
        int32_t m = -1;
        if (la + lb < sizeof buf) {
            memcpy(buf, s, la);
            memcpy(buf + la, sp + 1, lb);
            m = idmap_find(&t->by_text, t->arena, t->text_off, t->text_len, buf, la + lb);
        }
        /* HF refuses such a file too (merge token out of vocabulary) */
        if (a < 0 || b < 0 || m < 0)
            return mi_err(MI_ERR_FORMAT, "tokenizer.ggml.merges[%llu] '%s': a part or the result is not in the vocabulary",
                          (unsigned long long)r, shown(s, len, buf));
        uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
        for (size_t h = hash_u64(key) & t->merge_mask;; h = (h + 1) & t->merge_mask) {
            if (t->merges[h].key == key) break;   /* a repeated pair keeps its first (lowest) rank */
            if (t->merges[h].key == 0) {
                t->merges[h] = (merge_ent){key, (int32_t)r, m};
                break;
            }
        }
    }
    return MI_OK;
}

static bool text_is(const mi_tokenizer *t, int32_t id, const char *s) {
    return t->text_len[id] == strlen(s) && !memcmp(t->arena + t->text_off[id], s, t->text_len[id]);
}

static mi_status load_specials(mi_tokenizer *t, const gguf_file *f) {
    MI_TRY(get_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos));
    MI_TRY(get_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos));
    MI_TRY(get_id(f, "tokenizer.ggml.eot_token_id", t->n_vocab, &t->eot));
    MI_TRY(get_id(f, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk));
    int32_t eom;
    MI_TRY(get_id(f, "tokenizer.ggml.eom_token_id", t->n_vocab, &eom));
    if (gguf_find_key(f, "tokenizer.ggml.add_bos_token") >= 0) MI_TRY(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos));

    int64_t ns = 0;
    for (int64_t i = 0; i < t->n_vocab; i++)
        ns += (t->type[i] == TT_CONTROL || t->type[i] == TT_USER) && t->text_len[i] > 0;
    t->special = malloc((size_t)(ns ? ns : 1) * sizeof *t->special);
    if (!t->special) return mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");
    for (int64_t i = 0; i < t->n_vocab; i++)
        if ((t->type[i] == TT_CONTROL || t->type[i] == TT_USER) && t->text_len[i] > 0) t->special[t->n_special++] = (int32_t)i;

    /* end of generation: the declared ids plus the control tokens that end a turn by name */
    static const char *eog_names[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>",
                                      "<end_of_turn>", "<|end|>", "<|return|>", "<EOT>"};
    int32_t cand[3] = {t->eos, t->eot, eom};
    t->eog = malloc((3 + (size_t)t->n_special) * sizeof *t->eog);
    if (!t->eog) return mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");
    for (int i = 0; i < 3; i++)
        if (cand[i] >= 0) t->eog[t->n_eog++] = cand[i];
    for (int64_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        if (t->type[id] != TT_CONTROL) continue;
        for (size_t j = 0; j < sizeof eog_names / sizeof eog_names[0]; j++)
            if (text_is(t, id, eog_names[j]) && !tok_is_eog(t, id)) t->eog[t->n_eog++] = id;
    }
    return MI_OK;
}

mi_status tok_load(const gguf_file *f, mi_tokenizer **out) {
    *out = NULL;
    const char *s;
    size_t len;
    if (gguf_find_key(f, "tokenizer.ggml.model") < 0)
        return mi_err(MI_ERR_FORMAT, "no tokenizer in this file (tokenizer.ggml.model missing)");
    MI_TRY(gguf_get_str(f, "tokenizer.ggml.model", &s, &len));
    if (len != 4 || memcmp(s, "gpt2", 4))
        return mi_err(MI_ERR_UNSUPPORTED, "tokenizer.ggml.model '%s': only 'gpt2' (byte-level BPE) is supported",
                      shown(s, len, (char[64]){0}));
    mi_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");
    mi_status st = MI_OK;
    if (gguf_find_key(f, "tokenizer.ggml.pre") < 0) {
        mi_log("tokenizer: tokenizer.ggml.pre missing, using the GPT-2 pre-tokenizer");
        t->pretok = MI_PRETOK_GPT2;
    } else {
        if ((st = gguf_get_str(f, "tokenizer.ggml.pre", &s, &len)) != MI_OK) goto fail;
        if (!pretok_from_name(s, len, &t->pretok, &t->ignore_merges)) {
            st = mi_err(MI_ERR_UNSUPPORTED, "tokenizer.ggml.pre '%s' is not supported (supported: gpt2, llama-bpe, qwen2, smollm and aliases)",
                        shown(s, len, (char[64]){0}));
            goto fail;
        }
    }
    t->add_bos = t->pretok == MI_PRETOK_LLAMA3;
    if ((st = load_vocab(t, f)) != MI_OK || (st = load_merges(t, f)) != MI_OK || (st = load_specials(t, f)) != MI_OK)
        goto fail;
    *out = t;
    return MI_OK;
fail:
    tok_free(t);
    return mi_err_ctx(st, "tokenizer");
}

void tok_free(mi_tokenizer *t) {
    if (!t) return;
    free(t->arena); free(t->text_off); free(t->piece_off); free(t->key_off);
    free(t->text_len); free(t->piece_len); free(t->key_len); free(t->type);
    free(t->by_text.slot); free(t->by_key.slot); free(t->merges); free(t->special); free(t->eog);
    free(t);
}

int64_t tok_n_vocab(const mi_tokenizer *t) { return t->n_vocab; }
mi_pretok tok_pretok(const mi_tokenizer *t) { return t->pretok; }
int32_t tok_bos(const mi_tokenizer *t) { return t->bos; }
int32_t tok_eos(const mi_tokenizer *t) { return t->eos; }
int32_t tok_eot(const mi_tokenizer *t) { return t->eot; }
bool tok_add_bos(const mi_tokenizer *t) { return t->add_bos && t->bos >= 0; }
size_t tok_max_piece_len(const mi_tokenizer *t) { return t->max_piece; }
int tok_type(const mi_tokenizer *t, int32_t id) { return id >= 0 && id < t->n_vocab ? t->type[id] : 0; }

bool tok_is_eog(const mi_tokenizer *t, int32_t id) {
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

int32_t tok_find(const mi_tokenizer *t, const char *piece) {
    return idmap_find(&t->by_text, t->arena, t->text_off, t->text_len, piece, strlen(piece));
}

const char *tok_piece(const mi_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) { if (len) *len = 0; return NULL; }
    if (len) *len = t->piece_len[id];
    return t->arena + t->piece_off[id];
}

/* ---- encoding ---- */
typedef struct { int32_t *v; int64_t n, cap; } ids_buf;

static bool ids_push(ids_buf *b, int32_t id) {
    if (b->n == b->cap) {
        int64_t nc = b->cap ? b->cap * 2 : 256;
        int32_t *nv = realloc(b->v, (size_t)nc * sizeof *nv);
        if (!nv) return false;
        b->v = nv;
        b->cap = nc;
    }
    b->v[b->n++] = id;
    return true;
}

typedef struct { int32_t id, prev, next; } bpe_sym;       /* id -1: merged into its left neighbour */
typedef struct { int32_t rank, pos, new_id; } bpe_cand;   /* merge candidate (pos, pos->next) */

typedef struct {
    bpe_sym *sym; size_t sym_cap;
    bpe_cand *heap; size_t heap_n, heap_cap;
} bpe_work;

static bool cand_less(const bpe_cand *a, const bpe_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);   /* lowest rank, then leftmost */
}

static bool heap_push(bpe_work *w, bpe_cand c) {
    if (w->heap_n == w->heap_cap) {
        size_t nc = w->heap_cap ? w->heap_cap * 2 : 64;
        bpe_cand *nh = realloc(w->heap, nc * sizeof *nh);
        if (!nh) return false;
        w->heap = nh;
        w->heap_cap = nc;
    }
    size_t i = w->heap_n++;
    while (i > 0 && cand_less(&c, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = c;
    return true;
}

static bpe_cand heap_pop(bpe_work *w) {
    bpe_cand top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!cand_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static bool push_pair(const mi_tokenizer *t, bpe_work *w, int32_t pos) {
    int32_t nx = w->sym[pos].next;
    if (nx < 0) return true;
    const merge_ent *m = merge_find(t, w->sym[pos].id, w->sym[nx].id);
    return m ? heap_push(w, (bpe_cand){m->rank, pos, m->id}) : true;
}

/* BPE of one pre-token (raw bytes): HF's merge order exactly (lowest rank first, leftmost
 * among equal ranks; a popped candidate is dropped if its pair changed meanwhile). */
static mi_status bpe_word(const mi_tokenizer *t, bpe_work *w, const char *s, size_t n, ids_buf *out) {
    if (t->ignore_merges) {
        int32_t id = idmap_find(&t->by_key, t->arena, t->key_off, t->key_len, s, n);
        if (id >= 0) return ids_push(out, id) ? MI_OK : mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");
    }
    if (n > w->sym_cap) {
        bpe_sym *ns = realloc(w->sym, n * sizeof *ns);
        if (!ns) return mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");
        w->sym = ns;
        w->sym_cap = n;
    }
    int32_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        /* a byte the vocabulary lacks (SmolLM2's has no 0x04, 0xF5.., ...) becomes the
         * unknown token when the file names one, else it is dropped: HF BPE's two behaviours */
        int32_t id = t->byte_id[(unsigned char)s[i]];
        if (id < 0) id = t->unk;
        if (id < 0) continue;
        w->sym[ns] = (bpe_sym){id, ns - 1, -1};
        if (ns > 0) w->sym[ns - 1].next = ns;
        ns++;
    }
    w->heap_n = 0;
    for (int32_t i = 0; i + 1 < ns; i++)
        if (!push_pair(t, w, i)) return mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");
    while (w->heap_n) {
        bpe_cand c = heap_pop(w);
        bpe_sym *a = &w->sym[c.pos];
        if (a->id < 0 || a->next < 0) continue;
        const merge_ent *m = merge_find(t, a->id, w->sym[a->next].id);
        if (!m || m->id != c.new_id) continue;
        int32_t gone = a->next;
        a->id = c.new_id;
        a->next = w->sym[gone].next;
        if (a->next >= 0) w->sym[a->next].prev = c.pos;
        w->sym[gone].id = -1;
        if ((a->prev >= 0 && !push_pair(t, w, a->prev)) || !push_pair(t, w, c.pos))
            return mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");
    }
    for (int32_t i = ns ? 0 : -1; i >= 0; i = w->sym[i].next)
        if (!ids_push(out, w->sym[i].id)) return mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");
    return MI_OK;
}

/* Pre-tokenize and BPE one span of ordinary text. */
static mi_status encode_text(const mi_tokenizer *t, bpe_work *w, const char *s, size_t len, ids_buf *out) {
    if (len == 0) return MI_OK;
    uint32_t *cps = malloc(len * sizeof *cps);
    size_t *offs = malloc((len + 1) * sizeof *offs), *ends = malloc(len * sizeof *ends);
    mi_status st = MI_OK;
    if (!cps || !offs || !ends) { st = mi_err(MI_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        offs[n] = i;
        i += utf8_decode((const unsigned char *)s + i, len - i, &cps[n]);
        n++;
    }
    offs[n] = len;
    size_t np = pretok_split(t->pretok, cps, n, ends);
    if (np == 0) { st = mi_err(MI_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
    for (size_t p = 0, start = 0; p < np && st == MI_OK; start = ends[p++])
        st = bpe_word(t, w, s + offs[start], offs[ends[p]] - offs[start], out);
done:
    free(cps); free(offs); free(ends);
    return st;
}

mi_status tok_pretokenize(const mi_tokenizer *t, const char *text, size_t len, size_t **ends, int64_t *n) {
    *ends = NULL;
    *n = 0;
    uint32_t *cps = malloc((len ? len : 1) * sizeof *cps);
    size_t *offs = malloc((len + 1) * sizeof *offs), *e = malloc((len ? len : 1) * sizeof *e);
    if (!cps || !offs || !e) { free(cps); free(offs); free(e); return mi_err(MI_ERR_NOMEM, "tokenizer: out of memory"); }
    size_t nc = 0;
    for (size_t i = 0; i < len;) {
        offs[nc] = i;
        i += utf8_decode((const unsigned char *)text + i, len - i, &cps[nc]);
        nc++;
    }
    offs[nc] = len;
    size_t np = nc ? pretok_split(t->pretok, cps, nc, e) : 0;
    for (size_t p = 0; p < np; p++) e[p] = offs[e[p]];
    free(cps);
    free(offs);
    *ends = e;
    *n = (int64_t)np;
    return MI_OK;
}

/* Longest special token starting at s[0..len), -1 if none. Control tokens only when they
 * fit in ctrl_len bytes (0: never); user-defined ones always (HF splits non-special added
 * tokens too, whatever its encode_special_tokens says). */
static int32_t match_special(const mi_tokenizer *t, const char *s, size_t len, size_t ctrl_len) {
    int32_t best = -1;
    uint32_t best_len = 0;
    for (int64_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        uint32_t l = t->text_len[id];
        const char *x = t->arena + t->text_off[id];
        if (l > len || l <= best_len || x[0] != s[0]) continue;
        if (t->type[id] == TT_CONTROL && l > ctrl_len) continue;
        if (!memcmp(x, s, l)) { best = id; best_len = l; }
    }
    return best;
}

/* ctrl == NULL with n_ctrl < 0: control tokens everywhere (tok_encode's parse_special). */
static mi_status encode_impl(const mi_tokenizer *t, const char *text, size_t len, const size_t *ctrl, int n_ctrl,
                             int32_t **out, int64_t *n_out) {
    *out = NULL;
    *n_out = 0;
    ids_buf b = {0};
    bpe_work w = {0};
    mi_status st = MI_OK;
    bool first_byte[256] = {0};
    for (int64_t k = 0; k < t->n_special; k++) first_byte[(unsigned char)t->arena[t->text_off[t->special[k]]]] = true;
    size_t start = 0;
    int r = 0;   /* the first control range that does not end at or before i */
    for (size_t i = 0; i < len && st == MI_OK;) {
        if (!first_byte[(unsigned char)text[i]]) { i++; continue; }
        while (r < n_ctrl && ctrl[2 * r + 1] <= i) r++;
        size_t ctrl_len = n_ctrl < 0 ? len - i : r < n_ctrl && ctrl[2 * r] <= i ? ctrl[2 * r + 1] - i : 0;
        int32_t id = match_special(t, text + i, len - i, ctrl_len);
        if (id < 0) { i++; continue; }
        st = encode_text(t, &w, text + start, i - start, &b);
        if (st == MI_OK && !ids_push(&b, id)) st = mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");
        i += t->text_len[id];
        start = i;
    }
    if (st == MI_OK) st = encode_text(t, &w, text + start, len - start, &b);
    free(w.sym);
    free(w.heap);
    if (st != MI_OK) { free(b.v); return st; }
    if (!b.v) b.v = malloc(sizeof(int32_t));   /* a valid pointer even for empty input */
    if (!b.v) return mi_err(MI_ERR_NOMEM, "tokenizer: out of memory");
    *out = b.v;
    *n_out = b.n;
    return MI_OK;
}

mi_status tok_encode(const mi_tokenizer *t, const char *text, size_t len, bool parse_special,
                     int32_t **out, int64_t *n_out) {
    return encode_impl(t, text, len, NULL, parse_special ? -1 : 0, out, n_out);
}

mi_status tok_encode_ranges(const mi_tokenizer *t, const char *text, size_t len, const size_t *ctrl, int n_ctrl,
                            int32_t **out, int64_t *n_out) {
    for (int k = 0; k < n_ctrl; k++)
        if (ctrl[2 * k] > ctrl[2 * k + 1] || ctrl[2 * k + 1] > len || (k && ctrl[2 * k] < ctrl[2 * k - 1]))
            return mi_err(MI_ERR_INVALID, "tokenizer: control ranges must be sorted, disjoint and inside the text");
    return encode_impl(t, text, len, ctrl, n_ctrl < 0 ? 0 : n_ctrl, out, n_out);
}

/* ---- streaming detokenizer ---- */
typedef struct { const char *a; size_t na; const char *b; size_t nb; } two;   /* pending ++ piece */
static unsigned char two_at(const two *x, size_t k) { return (unsigned char)(k < x->na ? x->a[k] : x->b[k - x->na]); }

size_t tok_detok_push(const mi_tokenizer *t, mi_detok *d, int32_t id, char *out, size_t cap) {
    size_t plen;
    const char *p = tok_piece(t, id, &plen);
    if (!p) return 0;
    char pend[sizeof d->pending];
    size_t np = d->n_pending > 0 && (size_t)d->n_pending <= sizeof pend ? (size_t)d->n_pending : 0;
    memcpy(pend, d->pending, np);
    d->n_pending = 0;
    two x = {pend, np, p, plen};
    size_t total = np + plen, k = 0, w = 0;
    while (k < total) {
        unsigned char c = two_at(&x, k);
        size_t L = (size_t)utf8_lead_len(c), ok = 1;
        if (L >= 2) {
            while (ok < L && k + ok < total && (two_at(&x, k + ok) & 0xC0) == 0x80) ok++;
            if (ok < L && k + ok == total) {   /* an incomplete character at the end: hold it */
                for (size_t j = 0; j < ok; j++) d->pending[j] = (char)two_at(&x, k + j);
                d->n_pending = (int)ok;
                break;
            }
            if (ok < L) ok = 1;   /* broken sequence: pass the lead byte through alone */
        }
        for (size_t j = 0; j < ok; j++)
            if (w < cap) out[w++] = (char)two_at(&x, k + j);
        k += ok;
    }
    return w;
}

size_t tok_detok_flush(mi_detok *d, char *out, size_t cap) {
    size_t w = 0;
    for (int j = 0; j < d->n_pending && j < (int)sizeof d->pending; j++)
        if (w < cap) out[w++] = d->pending[j];
    d->n_pending = 0;
    return w;
}

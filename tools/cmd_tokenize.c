/* `minfer tokenize`: text -> token ids with a GGUF's tokenizer, and a batch mode (JSON lines
 * in, JSON lines out) that is the tokenizer gate's way in: ids, the streaming detokenizer's
 * chunks, and chat-template renderings, for many strings in one process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/gguf/gguf.h"
#include "common/tokenizer/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: minfer tokenize -m FILE [-p TEXT | --stdin] [--special] [--json] [--chat] [--info]\n"
            "       minfer tokenize -m FILE --jsonl [--special]    batch: one JSON value per stdin line\n"
            "  -p TEXT     text to encode            --stdin   read the text from stdin\n"
            "  --special   match control-token texts (e.g. <|im_start|>) in the input\n"
            "  --json      print [ids] as JSON        --chat    wrap TEXT as a user turn in the chat template\n"
            "              (with --chat, control-token texts inside TEXT stay plain text; --special is ignored)\n"
            "  --info      print the tokenizer summary to stderr\n"
            "  --jsonl     each line: \"text\" or {\"text\": S, \"special\": B} -> {\"ids\": [..], \"chunks\": [hex..]}\n"
            "              or {\"text\": S, \"split\": true} -> {\"split\": [piece end byte offsets..]}\n"
            "              or {\"chat\": [{\"role\": R, \"content\": C}..], \"add_assistant\": B} -> {\"text\": S, \"ids\": [..]}\n"
            "              (chat ids: control tokens from the template only, never from a role or content)\n");
}

/* ---- a small JSON reader: enough for strings, bools, numbers, arrays and objects ---- */
typedef struct { const char *s, *e; const char *err; } jp;

static void ws(jp *p) { while (p->s < p->e && (*p->s == ' ' || *p->s == '\t' || *p->s == '\r' || *p->s == '\n')) p->s++; }

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
    return -1;
}

static bool hex4(jp *p, unsigned *v) {
    if (p->e - p->s < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexv(p->s[i]);
        if (h < 0) return false;
        *v = *v * 16 + (unsigned)h;
    }
    p->s += 4;
    return true;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* Parses a JSON string at p->s into a malloc'd buffer (may contain NULs; *len says). */
static char *jstring(jp *p, size_t *len) {
    ws(p);
    if (p->s >= p->e || *p->s != '"') { p->err = "expected a string"; return NULL; }
    p->s++;
    char *o = malloc((size_t)(p->e - p->s) + 1);   /* unescaping never lengthens */
    if (!o) { p->err = "out of memory"; return NULL; }
    size_t n = 0;
    while (p->s < p->e && *p->s != '"') {
        char c = *p->s++;
        if (c != '\\') { o[n++] = c; continue; }
        if (p->s >= p->e) break;
        c = *p->s++;
        switch (c) {
        case 'n': o[n++] = '\n'; break;
        case 't': o[n++] = '\t'; break;
        case 'r': o[n++] = '\r'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'u': {
            unsigned v, lo;
            if (!hex4(p, &v)) { p->err = "bad \\u escape"; free(o); return NULL; }
            if (v >= 0xD800 && v < 0xDC00 && p->e - p->s >= 6 && p->s[0] == '\\' && p->s[1] == 'u') {
                jp q = *p;
                q.s += 2;
                if (hex4(&q, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                    v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                    p->s = q.s;
                }
            }
            n += put_utf8(o + n, v);   /* a lone surrogate comes out as its (invalid) 3 bytes */
            break;
        }
        default: o[n++] = c; break;   /* \" \\ \/ */
        }
    }
    if (p->s >= p->e) { p->err = "unterminated string"; free(o); return NULL; }
    p->s++;
    o[n] = 0;
    *len = n;
    return o;
}

static bool jlit(jp *p, const char *lit) {
    ws(p);
    size_t n = strlen(lit);
    if ((size_t)(p->e - p->s) >= n && !memcmp(p->s, lit, n)) { p->s += n; return true; }
    return false;
}

static bool jbool(jp *p, bool *v) {
    if (jlit(p, "true")) { *v = true; return true; }
    if (jlit(p, "false")) { *v = false; return true; }
    return false;
}

/* Deepest nesting jskip follows: each level is a stack frame, and a line of a million '['
 * must be an error, not a stack overflow. */
#define JSKIP_MAX_DEPTH 64

static bool jskip_at(jp *p, int depth) {
    ws(p);
    if (p->s >= p->e) return false;
    if (*p->s == '"') { size_t l; char *s = jstring(p, &l); free(s); return s != NULL; }
    if (*p->s == '[' || *p->s == '{') {
        if (depth >= JSKIP_MAX_DEPTH) {
            p->err = "JSON nested more than 64 levels deep";
            return false;
        }
        char close = *p->s == '[' ? ']' : '}';
        p->s++;
        if (jlit(p, (char[]){close, 0})) return true;
        for (;;) {
            if (close == '}') {
                size_t l;
                char *k = jstring(p, &l);
                free(k);
                if (!k || !jlit(p, ":")) return false;
            }
            if (!jskip_at(p, depth + 1)) return false;
            if (jlit(p, ",")) continue;
            return jlit(p, (char[]){close, 0});
        }
    }
    while (p->s < p->e && *p->s != ',' && *p->s != ']' && *p->s != '}' && *p->s != ' ') p->s++;
    return true;
}

/* Skips any JSON value (for keys we do not use). */
static bool jskip(jp *p) { return jskip_at(p, 0); }


/* ---- output ---- */
static void print_ids(FILE *o, const int32_t *ids, int64_t n) {
    fputc('[', o);
    for (int64_t i = 0; i < n; i++) fprintf(o, i ? ",%d" : "%d", ids[i]);
    fputc(']', o);
}

static void print_jstring(FILE *o, const char *s, size_t n) {
    fputc('"', o);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(o, "\\%c", c);
        else if (c == '\n') fputs("\\n", o);
        else if (c < 0x20) fprintf(o, "\\u%04x", c);
        else fputc(c, o);
    }
    fputc('"', o);
}

/* {"error": MSG} with the parser's reason when it left one */
static void print_error(FILE *o, const jp *p, const char *fallback) {
    const char *m = p && p->err ? p->err : fallback;
    fprintf(o, "{\"error\": ");
    print_jstring(o, m, strlen(m));
    fprintf(o, "}\n");
}

static int split_line(const mi_tokenizer *t, FILE *o, const char *text, size_t len) {
    size_t *ends;
    int64_t n;
    if (tok_pretokenize(t, text, len, &ends, &n) != MI_OK) {
        fprintf(o, "{\"error\": \"out of memory\"}\n");
        return 1;
    }
    fprintf(o, "{\"split\": [");
    for (int64_t i = 0; i < n; i++) fprintf(o, i ? ",%zu" : "%zu", ends[i]);
    fprintf(o, "]}\n");
    free(ends);
    return 0;
}

static int encode_line(const mi_tokenizer *t, FILE *o, const char *text, size_t len, bool special, char *buf, size_t cap) {
    int32_t *ids;
    int64_t n;
    if (tok_encode(t, text, len, special, &ids, &n) != MI_OK) {
        fprintf(o, "{\"error\": ");
        print_jstring(o, mi_errmsg(), strlen(mi_errmsg()));
        fprintf(o, "}\n");
        return 1;
    }
    fprintf(o, "{\"ids\": ");
    print_ids(o, ids, n);
    /* every chunk the streaming detokenizer returns, one push per id, then the flush */
    fprintf(o, ", \"chunks\": [");
    mi_detok d = {0};
    for (int64_t i = 0; i <= n; i++) {
        size_t w = i < n ? tok_detok_push(t, &d, ids[i], buf, cap) : tok_detok_flush(&d, buf, cap);
        fprintf(o, i ? ", \"" : "\"");
        for (size_t j = 0; j < w; j++) fprintf(o, "%02x", (unsigned char)buf[j]);
        fputc('"', o);
    }
    fprintf(o, "]}\n");
    free(ids);
    return 0;
}

static int chat_line(jp *p, const mi_tokenizer *t, mi_chat_kind kind, FILE *o) {
    mi_chat_msg msgs[64];
    char *own[128];
    int n = 0, nown = 0, rc = 1;
    bool add_assistant = false;
    /* p is just past "chat": parse [{"role": .., "content": ..}, ..] then the other keys */
    if (!jlit(p, "[")) goto bad;
    if (!jlit(p, "]")) {
        for (;;) {
            if (n == 64 || !jlit(p, "{")) goto bad;
            msgs[n] = (mi_chat_msg){"user", ""};
            for (;;) {
                size_t l;
                char *k = jstring(p, &l);
                if (!k || !jlit(p, ":")) { free(k); goto bad; }
                if (!strcmp(k, "role") || !strcmp(k, "content")) {
                    char *v = jstring(p, &l);
                    if (!v) { free(k); goto bad; }
                    own[nown++] = v;
                    if (!strcmp(k, "role")) msgs[n].role = v;
                    else msgs[n].content = v;
                } else if (!jskip(p)) { free(k); goto bad; }
                free(k);
                if (nown > 126) goto bad;
                if (jlit(p, ",")) continue;
                if (jlit(p, "}")) break;
                goto bad;
            }
            n++;
            if (jlit(p, ",")) continue;
            if (jlit(p, "]")) break;
            goto bad;
        }
    }
    while (jlit(p, ",")) {
        size_t l;
        char *k = jstring(p, &l);
        if (!k || !jlit(p, ":")) { free(k); goto bad; }
        if (!(!strcmp(k, "add_assistant") ? jbool(p, &add_assistant) : jskip(p))) { free(k); goto bad; }
        free(k);
    }
    char *s = tok_chat_render(kind, msgs, n, add_assistant);
    if (!s) goto bad;
    int32_t *ids;
    int64_t n_ids;
    if (tok_chat_encode(t, kind, msgs, n, add_assistant, &ids, &n_ids) != MI_OK) {
        free(s);
        p->err = mi_errmsg();
        goto bad;
    }
    fprintf(o, "{\"text\": ");
    print_jstring(o, s, strlen(s));
    fprintf(o, ", \"ids\": ");
    print_ids(o, ids, n_ids);
    fprintf(o, "}\n");
    free(ids);
    free(s);
    rc = 0;
bad:
    if (rc) print_error(o, p, "bad chat line");
    for (int i = 0; i < nown; i++) free(own[i]);
    return rc;
}

static int run_jsonl(const mi_tokenizer *t, mi_chat_kind kind, bool special_default) {
    size_t cap = tok_max_piece_len(t) + 8;
    char *buf = malloc(cap);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t ll;
    int bad = 0;
    if (!buf) { fprintf(stderr, "minfer tokenize: out of memory\n"); return 1; }
    while ((ll = getline(&line, &lcap, stdin)) > 0) {
        jp p = {line, line + ll, NULL};
        ws(&p);
        if (p.s == p.e) continue;
        size_t len;
        if (*p.s == '"') {
            char *s = jstring(&p, &len);
            if (!s) { printf("{\"error\": \"bad JSON string\"}\n"); bad++; continue; }
            bad += encode_line(t, stdout, s, len, special_default, buf, cap);
            free(s);
            continue;
        }
        /* object: {"text": .., "special": ..} or {"chat": [..], "add_assistant": ..} */
        char *text = NULL;
        size_t tlen = 0;
        bool special = special_default, split = false, done = false;
        if (!jlit(&p, "{")) { printf("{\"error\": \"expected a JSON string or object\"}\n"); bad++; continue; }
        while (!done) {
            char *k = jstring(&p, &len);
            if (!k || !jlit(&p, ":")) { free(k); break; }
            if (!strcmp(k, "chat")) {
                free(k);
                bad += chat_line(&p, t, kind, stdout);
                done = true;
                break;
            }
            if (!strcmp(k, "text")) { free(text); text = jstring(&p, &tlen); if (!text) { free(k); break; } }
            else if (!strcmp(k, "special") || !strcmp(k, "split")) {
                if (!jbool(&p, !strcmp(k, "special") ? &special : &split)) { free(k); break; }
            } else if (!jskip(&p)) { free(k); break; }
            free(k);
            if (jlit(&p, ",")) continue;
            if (jlit(&p, "}")) {
                if (text && split) bad += split_line(t, stdout, text, tlen);
                else if (text) bad += encode_line(t, stdout, text, tlen, special, buf, cap);
                else { printf("{\"error\": \"no text\"}\n"); bad++; }
                done = true;
            }
            break;
        }
        if (!done) { print_error(stdout, &p, "bad JSON line"); bad++; }
        free(text);
        fflush(stdout);
    }
    free(line);
    free(buf);
    return bad ? 1 : 0;
}

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = realloc(b, cap * 2);
        if (!nb) { free(b); return NULL; }
        b = nb;
        cap *= 2;
    }
    *len = n;
    return b;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL;
    bool use_stdin = false, special = false, json = false, jsonl = false, chat = false, info = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(a, "-p") && i + 1 < argc) prompt = argv[++i];
        else if (!strcmp(a, "--stdin")) use_stdin = true;
        else if (!strcmp(a, "--special")) special = true;
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--jsonl")) jsonl = true;
        else if (!strcmp(a, "--chat")) chat = true;
        else if (!strcmp(a, "--info")) info = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else { fprintf(stderr, "minfer tokenize: unknown or incomplete argument '%s'\n", a); usage(stderr); return 2; }
    }
    if (!model) { fprintf(stderr, "minfer tokenize: -m FILE is required\n"); usage(stderr); return 2; }
    if (!jsonl && !info && !prompt == !use_stdin) {
        fprintf(stderr, "minfer tokenize: give exactly one of -p TEXT and --stdin (or --jsonl)\n");
        return 2;
    }
    gguf_file *f;
    if (gguf_open(model, &f) != MI_OK) { fprintf(stderr, "minfer tokenize: %s: %s\n", model, mi_errmsg()); return 1; }
    mi_tokenizer *t;
    if (tok_load(f, &t) != MI_OK) {
        fprintf(stderr, "minfer tokenize: %s: %s\n", model, mi_errmsg());
        gguf_close(f);
        return 1;
    }
    mi_chat_kind kind = tok_chat_kind(f);
    gguf_close(f);   /* the tokenizer keeps copies of everything it needs */
    static const char *kinds[] = {"chatml", "smollm", "qwen2"};
    if (info)
        fprintf(stderr, "tokenizer: %lld tokens, pre %s, bos %d, eos %d, eot %d, add_bos %d, chat %s\n",
                (long long)tok_n_vocab(t), tok_pretok_name(tok_pretok(t)), tok_bos(t), tok_eos(t), tok_eot(t),
                tok_add_bos(t), kinds[kind]);
    int rc = 0;
    if (jsonl) {
        rc = run_jsonl(t, kind, special);
    } else if (prompt || use_stdin) {
        size_t len;
        char *text = use_stdin ? read_all(stdin, &len) : strdup(prompt);
        if (text && !use_stdin) len = strlen(text);
        int32_t *ids = NULL;
        int64_t n = 0;
        mi_status st = MI_OK;
        if (text && chat) {
            /* a NUL inside --stdin text ends the message: the template API takes C strings */
            mi_chat_msg m = {"user", text};
            st = tok_chat_encode(t, kind, &m, 1, true, &ids, &n);
        } else if (text) {
            st = tok_encode(t, text, len, special, &ids, &n);
        }
        if (!text) { fprintf(stderr, "minfer tokenize: out of memory\n"); rc = 1; }
        else if (st != MI_OK) { fprintf(stderr, "minfer tokenize: %s\n", mi_errmsg()); rc = 1; }
        else if (json) { print_ids(stdout, ids, n); putchar('\n'); }
        else {
            for (int64_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
            putchar('\n');
        }
        free(ids);
        free(text);
    }
    tok_free(t);
    return rc;
}

/* Chat templates rendered in C (no Jinja): ChatML and the two ChatML-shaped templates that
 * differ from it only by a default system prompt (SmolLM2, Qwen2.5). The template strings
 * these reproduce are quoted in docs/TOKENIZER.md. */
#include <stdlib.h>
#include <string.h>
#include "common/tokenizer/tok_internal.h"

static const char SMOLLM_SYSTEM[] = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
static const char QWEN2_SYSTEM[] = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

static bool contains(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k)) return true;
    return false;
}

static bool contains_nocase(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++) {
        size_t j = 0;
        while (j < k && (s[i + j] | 0x20) == (needle[j] | 0x20)) j++;
        if (j == k) return true;
    }
    return false;
}

mi_chat_kind tok_chat_kind(const gguf_file *f) {
    const char *s;
    size_t n;
    if (gguf_find_key(f, "tokenizer.chat_template") >= 0 && gguf_get_str(f, "tokenizer.chat_template", &s, &n) == MI_OK) {
        if (contains(s, n, "You are Qwen, created by Alibaba Cloud")) return MI_CHAT_QWEN2;
        if (contains(s, n, "named SmolLM")) return MI_CHAT_SMOLLM;
        return MI_CHAT_CHATML;
    }
    mi_err_clear();
    if (gguf_find_key(f, "general.basename") >= 0 && gguf_get_str(f, "general.basename", &s, &n) == MI_OK &&
        contains_nocase(s, n, "smollm"))
        return MI_CHAT_SMOLLM;
    mi_err_clear();
    return MI_CHAT_CHATML;
}

/* The rendered text and which parts of it the template wrote: control tokens are matched
 * there only, so no message can open a turn of its own (see tok_chat_encode). */
typedef struct {
    char *buf;       /* NULL: only measure */
    size_t at;
    size_t *tmpl;    /* [2 * n_tmpl] byte ranges [start, end) of the template's own text */
    int n_tmpl;
} chat_sink;

/* Appends s; template text extends the last template range when the two touch. Always
 * advances the counts, so one pass measures and a second one writes. Without tmpl only
 * the ranges are counted (one per piece: an upper bound for the writing pass). */
static void put(chat_sink *k, const char *s, bool is_template) {
    size_t n = strlen(s);
    if (k->buf) memcpy(k->buf + k->at, s, n);
    if (is_template && n && !k->tmpl) {
        k->n_tmpl++;
    } else if (is_template && n && k->n_tmpl > 0 && k->tmpl[2 * k->n_tmpl - 1] == k->at) {
        k->tmpl[2 * k->n_tmpl - 1] = k->at + n;
    } else if (is_template && n) {
        k->tmpl[2 * k->n_tmpl] = k->at;
        k->tmpl[2 * k->n_tmpl + 1] = k->at + n;
        k->n_tmpl++;
    }
    k->at += n;
}

static void render(chat_sink *k, mi_chat_kind kind, const mi_chat_msg *msgs, int n, bool add_assistant) {
    const char *def = kind == MI_CHAT_SMOLLM ? SMOLLM_SYSTEM : kind == MI_CHAT_QWEN2 ? QWEN2_SYSTEM : NULL;
    /* SmolLM2 injects its system turn inside the message loop (so not for zero messages);
     * Qwen2.5 injects it before the loop whenever messages[0] is not a system turn. */
    bool first_is_system = n > 0 && msgs[0].role && !strcmp(msgs[0].role, "system");
    if (def && !first_is_system && (n > 0 || kind == MI_CHAT_QWEN2)) {
        put(k, "<|im_start|>system\n", true);
        put(k, def, true);
        put(k, "<|im_end|>\n", true);
    }
    for (int i = 0; i < n; i++) {
        /* the role comes from the caller too (tokenize --jsonl), so it is not template text */
        put(k, "<|im_start|>", true);
        put(k, msgs[i].role ? msgs[i].role : "user", false);
        put(k, "\n", true);
        put(k, msgs[i].content ? msgs[i].content : "", false);
        put(k, "<|im_end|>\n", true);
    }
    if (add_assistant) put(k, "<|im_start|>assistant\n", true);
}

/* Both passes; *tmpl (malloc'd) gets the template ranges when tmpl is non-NULL. */
static char *render_all(mi_chat_kind kind, const mi_chat_msg *msgs, int n, bool add_assistant, size_t *len,
                        size_t **tmpl, int *n_tmpl) {
    chat_sink k = {0};
    render(&k, kind, msgs, n, add_assistant);
    char *buf = malloc(k.at + 1);
    size_t *r = tmpl ? malloc((size_t)(2 * k.n_tmpl + 2) * sizeof *r) : NULL;
    if (!buf || (tmpl && !r)) { free(buf); free(r); return NULL; }
    k = (chat_sink){buf, 0, r, 0};
    render(&k, kind, msgs, n, add_assistant);
    buf[k.at] = 0;
    *len = k.at;
    if (tmpl) { *tmpl = r; *n_tmpl = k.n_tmpl; }
    return buf;
}

char *tok_chat_render(mi_chat_kind kind, const mi_chat_msg *msgs, int n, bool add_assistant) {
    size_t len;
    return render_all(kind, msgs, n, add_assistant, &len, NULL, NULL);
}

mi_status tok_chat_encode(const mi_tokenizer *t, mi_chat_kind kind, const mi_chat_msg *msgs, int n,
                          bool add_assistant, int32_t **out, int64_t *n_out) {
    *out = NULL;
    *n_out = 0;
    size_t len, *tmpl = NULL;
    int n_tmpl = 0;
    char *text = render_all(kind, msgs, n, add_assistant, &len, &tmpl, &n_tmpl);
    if (!text) return mi_err(MI_ERR_NOMEM, "chat template: out of memory");
    mi_status st = tok_encode_ranges(t, text, len, tmpl, n_tmpl, out, n_out);
    free(text);
    free(tmpl);
    return st;
}

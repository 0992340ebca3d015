/* Chat templates rendered in C (no Jinja): ChatML and the two ChatML-shaped templates that
 * differ from it only by a default system prompt (SmolLM2, Qwen2.5). The template strings
 * these reproduce are quoted in docs/TOKENIZER.md. */
#include <stdlib.h>
#include <string.h>
#include "common/tokenizer/tokenizer.h"

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

/* Appends to buf when it is non-NULL; always returns the new length, so one function
 * both measures and writes. */
static size_t put(char *buf, size_t at, const char *s) {
    size_t n = strlen(s);
    if (buf) memcpy(buf + at, s, n);
    return at + n;
}

static size_t render(char *buf, mi_chat_kind kind, const mi_chat_msg *msgs, int n, bool add_assistant) {
    size_t at = 0;
    const char *def = kind == MI_CHAT_SMOLLM ? SMOLLM_SYSTEM : kind == MI_CHAT_QWEN2 ? QWEN2_SYSTEM : NULL;
    /* SmolLM2 injects its system turn inside the message loop (so not for zero messages);
     * Qwen2.5 injects it before the loop whenever messages[0] is not a system turn. */
    bool first_is_system = n > 0 && msgs[0].role && !strcmp(msgs[0].role, "system");
    if (def && !first_is_system && (n > 0 || kind == MI_CHAT_QWEN2)) {
        at = put(buf, at, "<|im_start|>system\n");
        at = put(buf, at, def);
        at = put(buf, at, "<|im_end|>\n");
    }
    for (int i = 0; i < n; i++) {
        at = put(buf, at, "<|im_start|>");
        at = put(buf, at, msgs[i].role ? msgs[i].role : "user");
        at = put(buf, at, "\n");
        at = put(buf, at, msgs[i].content ? msgs[i].content : "");
        at = put(buf, at, "<|im_end|>\n");
    }
    if (add_assistant) at = put(buf, at, "<|im_start|>assistant\n");
    return at;
}

char *tok_chat_render(mi_chat_kind kind, const mi_chat_msg *msgs, int n, bool add_assistant) {
    size_t len = render(NULL, kind, msgs, n, add_assistant);
    char *buf = malloc(len + 1);
    if (!buf) return NULL;
    render(buf, kind, msgs, n, add_assistant);
    buf[len] = 0;
    return buf;
}

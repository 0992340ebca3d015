/* GPT-2 byte-level BPE tokenizer built from a GGUF's tokenizer.ggml.* metadata, with the
 * pre-tokenizer chosen by tokenizer.ggml.pre, special tokens, a streaming detokenizer
 * that never splits a UTF-8 character, and chat templates (ChatML, SmolLM). */
#ifndef MI_TOKENIZER_H
#define MI_TOKENIZER_H
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "../core/mi_err.h"
#include "../gguf/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_tokenizer mi_tokenizer;

typedef enum { MI_PRETOK_GPT2 = 0, MI_PRETOK_LLAMA3, MI_PRETOK_QWEN2, MI_PRETOK_SMOLLM } mi_pretok;

mi_status tok_load(const gguf_file *f, mi_tokenizer **out);
void tok_free(mi_tokenizer *t);
int64_t tok_n_vocab(const mi_tokenizer *t);
mi_pretok tok_pretok(const mi_tokenizer *t);
int32_t tok_bos(const mi_tokenizer *t);   /* -1 if none */
int32_t tok_eos(const mi_tokenizer *t);   /* -1 if none */
bool tok_is_eog(const mi_tokenizer *t, int32_t id);   /* eos, eot, <|im_end|>, <|endoftext|> ... */
int32_t tok_find(const mi_tokenizer *t, const char *piece);  /* exact token text; -1 if absent */

/* Encode UTF-8 text. parse_special: recognise special/control token texts
 * (e.g. "<|im_start|>") in the input. *out is malloc'd (caller frees). */
mi_status tok_encode(const mi_tokenizer *t, const char *text, size_t len, bool parse_special,
                     int32_t **out, int64_t *n_out);
/* Token's raw bytes (byte-level decoded), NULL for an invalid id. */
const char *tok_piece(const mi_tokenizer *t, int32_t id, size_t *len);

/* Streaming detokenizer: push ids, get back only complete UTF-8 characters. */
typedef struct { char pending[8]; int n_pending; } mi_detok;
/* Appends the printable bytes for id to out (cap bytes); returns bytes written. */
size_t tok_detok_push(const mi_tokenizer *t, mi_detok *d, int32_t id, char *out, size_t cap);
/* Flush leftover bytes of an incomplete character (as-is). */
size_t tok_detok_flush(mi_detok *d, char *out, size_t cap);

/* Chat templates. */
typedef struct { const char *role; const char *content; } mi_chat_msg;
typedef enum { MI_CHAT_CHATML = 0, MI_CHAT_SMOLLM } mi_chat_kind;
/* Pick from tokenizer.chat_template / architecture; ChatML unless SmolLM is detected. */
mi_chat_kind tok_chat_kind(const gguf_file *f);
/* Render messages (+ the assistant prefix when add_assistant); malloc'd NUL-terminated. */
char *tok_chat_render(mi_chat_kind kind, const mi_chat_msg *msgs, int n, bool add_assistant);

#ifdef __cplusplus
}
#endif
#endif

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
const char *tok_pretok_name(mi_pretok kind);   /* added: "gpt2", "llama3", "qwen2", "smollm" */
int32_t tok_bos(const mi_tokenizer *t);   /* -1 if none */
int32_t tok_eos(const mi_tokenizer *t);   /* -1 if none */
bool tok_is_eog(const mi_tokenizer *t, int32_t id);   /* eos, eot, <|im_end|>, <|endoftext|> ... */
int32_t tok_find(const mi_tokenizer *t, const char *piece);  /* exact token text; -1 if absent */
/* Added by the tokenizer owner: */
int32_t tok_eot(const mi_tokenizer *t);   /* tokenizer.ggml.eot_token_id, -1 if none */
/* Whether a prompt should start with BOS: tokenizer.ggml.add_bos_token, else the default of
 * the pre-tokenizer (llama3: yes, others: no). tok_encode never adds it; the caller does. */
bool tok_add_bos(const mi_tokenizer *t);
/* tokenizer.ggml.token_type of id (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
 * 6 byte); 0 for an invalid id. */
int tok_type(const mi_tokenizer *t, int32_t id);
/* Longest tok_piece in bytes: tok_detok_push never writes more than this + 3 bytes. */
size_t tok_max_piece_len(const mi_tokenizer *t);

/* Encode UTF-8 text. parse_special: recognise special/control token texts
 * (e.g. "<|im_start|>") in the input. *out is malloc'd (caller frees). */
mi_status tok_encode(const mi_tokenizer *t, const char *text, size_t len, bool parse_special,
                     int32_t **out, int64_t *n_out);
/* Added: the pre-tokenizer alone (no special tokens, no BPE): *ends (malloc'd) gets each
 * piece's end as a byte offset into text, for tests and tools. */
mi_status tok_pretokenize(const mi_tokenizer *t, const char *text, size_t len, size_t **ends, int64_t *n);
/* Token's raw bytes (byte-level decoded), NULL for an invalid id. */
const char *tok_piece(const mi_tokenizer *t, int32_t id, size_t *len);

/* Streaming detokenizer: push ids, get back only complete UTF-8 characters. */
typedef struct { char pending[8]; int n_pending; } mi_detok;
/* Appends the printable bytes for id to out (cap bytes); returns bytes written.
 * A trailing incomplete UTF-8 sequence is held back in d until the next push completes it;
 * malformed bytes are passed through as they are. Control/user-defined tokens print their
 * text; stopping at end-of-generation tokens is the caller's job (tok_is_eog).
 * cap >= tok_max_piece_len(t) + 4 never truncates; a smaller cap drops what does not fit.
 * Zero-initialise d (mi_detok d = {0}) before the first push. */
size_t tok_detok_push(const mi_tokenizer *t, mi_detok *d, int32_t id, char *out, size_t cap);
/* Flush leftover bytes of an incomplete character (as-is). */
size_t tok_detok_flush(mi_detok *d, char *out, size_t cap);

/* Chat templates. */
typedef struct { const char *role; const char *content; } mi_chat_msg;
/* CHATML: <|im_start|>role\ncontent<|im_end|>\n per message, no default system prompt
 * (Qwen3's shape without tools/thinking). SMOLLM: ChatML plus SmolLM2's default system
 * prompt when the first message is not a system one. QWEN2 (added): the same with
 * Qwen2.5's default system prompt. See docs/TOKENIZER.md. */
typedef enum { MI_CHAT_CHATML = 0, MI_CHAT_SMOLLM, MI_CHAT_QWEN2 } mi_chat_kind;
/* Pick from tokenizer.chat_template / general.basename; ChatML unless detected otherwise. */
mi_chat_kind tok_chat_kind(const gguf_file *f);
/* Render messages (+ the assistant prefix when add_assistant); malloc'd NUL-terminated.
 * For display and template tests only: encoding this string with parse_special would turn
 * control-token texts inside a message into control tokens. */
char *tok_chat_render(mi_chat_kind kind, const mi_chat_msg *msgs, int n, bool add_assistant);
/* The token ids of the rendered conversation (*out malloc'd). Control tokens are recognised
 * only in the template's own text (<|im_start|>, <|im_end|>, the newlines, a default system
 * prompt); inside a role or a message's content a control-token text is ordinary text, so a
 * message cannot open a turn. User-defined tokens (Qwen's <tool_call>) are matched everywhere,
 * as HF matches non-special added tokens. Between two control tokens, template text and
 * content encode as one span, so for content without control-token texts the ids equal
 * tok_encode(tok_chat_render(...), parse_special = true) and HF's apply_chat_template. */
mi_status tok_chat_encode(const mi_tokenizer *t, mi_chat_kind kind, const mi_chat_msg *msgs, int n,
                          bool add_assistant, int32_t **out, int64_t *n_out);

#ifdef __cplusplus
}
#endif
#endif

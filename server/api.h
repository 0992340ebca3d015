/* The OpenAI-compatible request and response bodies: a request's JSON checked field by field
 * (each fault a 4xx with its own message) and turned into prompt tokens and generation
 * settings; answers, stream chunks and errors written as JSON. No HTTP here (http.c). */
#ifndef SRV_API_H
#define SRV_API_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/sampler/sampler.h"
#include "common/tokenizer/tokenizer.h"
#include "server/engine.h"

typedef enum { API_COMPLETION, API_CHAT } api_kind;

/* An error answer: HTTP status, OpenAI's error type and code, the offending field. */
typedef struct {
    int status;
    const char *type, *code, *param;
    char message[320];
} api_err;

/* What the parser needs to know of the server. */
typedef struct {
    const mi_tokenizer *tk;
    mi_chat_kind chat;
    bool add_bos;               /* as `minfer run`: tokenizer.ggml.add_bos_token */
    const char *model;          /* the served model's id */
    int64_t n_ctx;              /* positions a request may use: prompt + max_tokens */
} api_ctx;

typedef struct {
    api_kind kind;
    bool stream, include_usage;
    int64_t max_tokens;
    mi_sampler_params sp;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    int32_t *prompt;            /* [n_prompt] */
    int64_t n_prompt;
} api_request;

/* Parse and check a request body (len bytes, not NUL-terminated). 0: *out filled (free with
 * api_request_free); -1: *err says why. Sampling defaults are `minfer run`'s (greedy; with a
 * temperature: top_k 40, top_p 0.95, min_p 0.05; seed 1234), so the same settings give the
 * same text. */
int api_parse(api_kind kind, const char *body, size_t len, const api_ctx *ctx, api_request *out, api_err *err);
void api_request_free(api_request *r);

void api_err_set(api_err *e, int status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* {"error":{"message","type","code","param"}} (malloc'd) */
char *api_error_json(const api_err *e);

/* A whole answer (non-streaming), usage included. finish: "stop" or "length". */
char *api_answer_json(api_kind kind, const char *id, long long created, const char *model, const char *text,
                      size_t len, const char *finish, int64_t n_prompt, int64_t n_gen);
/* One stream chunk: text (may be empty), and on the last one finish plus usage
 * (finish NULL: neither). role: chat's first chunk carries {"role":"assistant"}. */
char *api_chunk_json(api_kind kind, const char *id, long long created, const char *model, const char *text,
                     size_t len, bool role, const char *finish, int64_t n_prompt, int64_t n_gen);
/* The usage-only chunk of stream_options.include_usage (choices empty). */
char *api_usage_chunk_json(api_kind kind, const char *id, long long created, const char *model, int64_t n_prompt,
                           int64_t n_gen);
char *api_models_json(const char *model, long long created);

/* Replace every ill-formed UTF-8 subsequence of p[0..n) by U+FFFD (the maximal-subpart rule
 * Python's errors="replace" follows); *out malloc'd, NUL-terminated. Model output may hold
 * stray bytes and JSON strings may not. */
char *utf8_clean(const char *p, size_t n, size_t *out_len);

#endif

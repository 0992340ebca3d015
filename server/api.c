/* OpenAI request bodies in, answer bodies out (api.h), through jansson: a parse error, a
 * field of the wrong type or out of range, an unknown model and a prompt or max_tokens past
 * the context each get their own 4xx message naming the field. */
#include "server/api.h"
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void api_err_set(api_err *e, int status, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    e->code = code;
    e->param = param;
    e->type = status == 401 ? "authentication_error" : status >= 500 ? "server_error" : "invalid_request_error";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

/* ---- UTF-8 ---- */

/* Length of the well-formed character at p (Unicode table 3-7), or of its maximal ill-formed
 * subpart with *ok false. */
static size_t utf8_seq(const unsigned char *p, size_t n, bool *ok) {
    const unsigned c = p[0];
    *ok = true;
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if (c == 0xED) need = 2, hi = 0x9F;   /* no surrogates */
    else if (c >= 0xE1 && c <= 0xEF) need = 2;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F;   /* nothing past U+10FFFF */
    else {
        *ok = false;
        return 1;
    }
    size_t i = 1;
    for (int k = 0; k < need; k++, i++) {
        if (i >= n || p[i] < lo || p[i] > hi) {
            *ok = false;
            return i;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    return i;
}

char *utf8_clean(const char *s, size_t n, size_t *out_len) {
    const unsigned char *p = (const unsigned char *)s;
    char *o = malloc(3 * n + 1);   /* a bad byte becomes 3 bytes at most */
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        bool ok;
        size_t m = utf8_seq(p + i, n - i, &ok);
        if (ok) {
            memcpy(o + k, p + i, m);
            k += m;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
        }
        i += m;
    }
    o[k] = 0;
    if (out_len) *out_len = k;
    return o;
}

static json_t *jstr(const char *p, size_t n) {
    size_t k;
    char *c = utf8_clean(p, n, &k);
    if (!c) return NULL;
    json_t *j = json_stringn(c, k);
    free(c);
    return j;
}

/* ---- request fields ---- */

/* Each getter: 1 the field is present (and *out set), 0 absent or null, -1 wrong (err set). */
static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, api_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) {
        api_err_set(err, 400, "invalid_type", key, "'%s' must be an integer", key);
        return -1;
    }
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        api_err_set(err, 400, "invalid_value", key, "'%s' is %lld; it must be in %lld..%lld", key, x, lo, hi);
        return -1;
    }
    *out = x;
    return 1;
}

static int get_num(json_t *o, const char *key, double lo, double hi, bool lo_open, double *out, api_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) {
        api_err_set(err, 400, "invalid_type", key, "'%s' must be a number", key);
        return -1;
    }
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
        api_err_set(err, 400, "invalid_value", key, "'%s' is %g; it must be in %s%g, %g]", key, x, lo_open ? "(" : "[", lo,
                    hi);
        return -1;
    }
    *out = x;
    return 1;
}

static int get_bool(json_t *o, const char *key, bool *out, api_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) {
        api_err_set(err, 400, "invalid_type", key, "'%s' must be true or false", key);
        return -1;
    }
    *out = json_is_true(v);
    return 1;
}

static int parse_stop(json_t *o, api_request *r, api_err *err) {
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return 0;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > SRV_MAX_STOP) {
            api_err_set(err, 400, "invalid_value", "stop", "'stop' holds %zu strings; at most %d", n, SRV_MAX_STOP);
            return -1;
        }
    } else if (!json_is_string(v)) {
        api_err_set(err, 400, "invalid_type", "stop", "'stop' must be a string or an array of strings");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : items[i];
        if (!json_is_string(s)) {
            api_err_set(err, 400, "invalid_type", "stop", "'stop' must be a string or an array of strings");
            return -1;
        }
        if (json_string_length(s) == 0) continue;   /* an empty stop string would stop at once: ignored, as OpenAI does */
        r->stop[r->n_stop] = strdup(json_string_value(s));
        if (!r->stop[r->n_stop]) {
            api_err_set(err, 500, "internal_error", NULL, "out of memory");
            return -1;
        }
        r->n_stop++;
    }
    return 1;
}

/* A message's content: a string, or an array of {"type":"text","text":...} parts (joined). */
static char *content_text(json_t *c, size_t i, api_err *err) {
    if (json_is_string(c)) return strdup(json_string_value(c));
    if (!json_is_array(c)) {
        api_err_set(err, 400, "invalid_type", "messages", "messages[%zu].content must be a string or an array of text parts", i);
        return NULL;
    }
    size_t total = 0;
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *part = json_array_get(c, k), *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(text)) {
            api_err_set(err, 400, "invalid_type", "messages",
                        "messages[%zu].content[%zu] must be {\"type\": \"text\", \"text\": STRING}", i, k);
            return NULL;
        }
        total += json_string_length(text);
    }
    char *s = malloc(total + 1);
    if (!s) return NULL;
    size_t at = 0;
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *text = json_object_get(json_array_get(c, k), "text");
        memcpy(s + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    s[at] = 0;
    return s;
}

/* messages -> the chat template's token ids, as `minfer run --chat` renders them */
static int parse_messages(json_t *o, const api_ctx *ctx, api_request *r, api_err *err) {
    json_t *ms = json_object_get(o, "messages");
    if (!ms || json_is_null(ms)) {
        api_err_set(err, 400, "missing_field", "messages", "'messages' is required");
        return -1;
    }
    if (!json_is_array(ms) || json_array_size(ms) == 0) {
        api_err_set(err, 400, json_is_array(ms) ? "invalid_value" : "invalid_type", "messages",
                    "'messages' must be a non-empty array of {role, content}");
        return -1;
    }
    const size_t n = json_array_size(ms);
    mi_chat_msg *msgs = calloc(n, sizeof *msgs);
    char **texts = calloc(n, sizeof *texts);
    int rc = msgs && texts ? 0 : -1;
    if (rc) api_err_set(err, 500, "internal_error", NULL, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_t *m = json_array_get(ms, i), *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            api_err_set(err, 400, "invalid_type", "messages", "messages[%zu] must be an object with a string 'role'", i);
            rc = -1;
            break;
        }
        const char *rv = json_string_value(role);
        if (!strcmp(rv, "developer")) rv = "system";   /* OpenAI's newer name for the system role */
        if (strcmp(rv, "system") && strcmp(rv, "user") && strcmp(rv, "assistant")) {
            api_err_set(err, 400, "invalid_value", "messages", "messages[%zu].role must be system, user or assistant", i);
            rc = -1;
            break;
        }
        texts[i] = content_text(json_object_get(m, "content"), i, err);
        if (!texts[i]) {
            if (err->status == 0) api_err_set(err, 500, "internal_error", NULL, "out of memory");
            rc = -1;
            break;
        }
        msgs[i].role = rv;
        msgs[i].content = texts[i];
    }
    if (rc == 0 && tok_chat_encode(ctx->tk, ctx->chat, msgs, (int)n, true, &r->prompt, &r->n_prompt) != MI_OK) {
        api_err_set(err, 400, "invalid_value", "messages", "the messages cannot be encoded: %s", mi_errmsg());
        rc = -1;
    }
    for (size_t i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
    free(msgs);
    return rc;
}

/* prompt -> token ids as `minfer run -p` encodes its first turn: BOS when the file asks for it */
static int parse_prompt(json_t *o, const api_ctx *ctx, api_request *r, api_err *err) {
    json_t *p = json_object_get(o, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
    if (!p || json_is_null(p)) {
        api_err_set(err, 400, "missing_field", "prompt", "'prompt' is required");
        return -1;
    }
    if (!json_is_string(p)) {
        api_err_set(err, 400, "invalid_type", "prompt", "'prompt' must be a string (or an array of one string)");
        return -1;
    }
    int32_t *part = NULL;
    int64_t np = 0;
    if (tok_encode(ctx->tk, json_string_value(p), json_string_length(p), false, &part, &np) != MI_OK) {
        api_err_set(err, 400, "invalid_value", "prompt", "the prompt cannot be encoded: %s", mi_errmsg());
        return -1;
    }
    const int64_t pre = ctx->add_bos && tok_bos(ctx->tk) >= 0 ? 1 : 0;
    r->prompt = malloc((size_t)(np + pre + 1) * sizeof *r->prompt);
    if (!r->prompt) {
        free(part);
        api_err_set(err, 500, "internal_error", NULL, "out of memory");
        return -1;
    }
    if (pre) r->prompt[0] = tok_bos(ctx->tk);
    if (np) memcpy(r->prompt + pre, part, (size_t)np * sizeof *part);
    r->n_prompt = np + pre;
    free(part);
    return 0;
}

/* The generation settings; `minfer run`'s defaults for what is absent. */
static int parse_settings(json_t *o, api_kind kind, api_request *r, long long *max_tokens, api_err *err) {
    long long iv;
    double dv;
    int got;
    mi_sampler_params_default(&r->sp);
    if ((got = get_bool(o, "stream", &r->stream, err)) < 0) return -1;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            api_err_set(err, 400, "invalid_type", "stream_options", "'stream_options' must be an object");
            return -1;
        }
        if (get_bool(so, "include_usage", &r->include_usage, err) < 0) return -1;
    }
    *max_tokens = 0;
    if ((got = get_int(o, "max_tokens", 1, 1LL << 40, max_tokens, err)) < 0) return -1;
    if (!got && kind == API_CHAT && get_int(o, "max_completion_tokens", 1, 1LL << 40, max_tokens, err) < 0) return -1;
    if ((got = get_num(o, "temperature", 0.0, 2.0, false, &dv, err)) < 0) return -1;
    if (got) r->sp.temp = (float)dv;
    if ((got = get_num(o, "top_p", 0.0, 1.0, true, &dv, err)) < 0) return -1;
    if (got) r->sp.top_p = (float)dv;
    if ((got = get_num(o, "min_p", 0.0, 1.0, false, &dv, err)) < 0) return -1;
    if (got) r->sp.min_p = (float)dv;
    if ((got = get_int(o, "top_k", 0, 1 << 30, &iv, err)) < 0) return -1;
    if (got) r->sp.top_k = (int)iv;
    if ((got = get_int(o, "seed", INT64_MIN, INT64_MAX, &iv, err)) < 0) return -1;
    if (got) r->sp.seed = (uint64_t)iv;   /* as `minfer run --seed` */
    if ((got = get_int(o, "n", 1, 1, &iv, err)) < 0) return -1;
    if (parse_stop(o, r, err) < 0) return -1;
    return 0;
}

int api_parse(api_kind kind, const char *body, size_t len, const api_ctx *ctx, api_request *out, api_err *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->kind = kind;
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!o) {
        if (json_error_code(&je) == json_error_invalid_utf8)
            api_err_set(err, 400, "invalid_utf8", NULL, "the body is not valid UTF-8: %s", je.text);
        else
            api_err_set(err, 400, "invalid_json", NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text,
                        je.line, je.column);
        return -1;
    }
    int rc = -1;
    long long max_tokens = 0;
    json_t *model = json_object_get(o, "model");
    if (!json_is_object(o)) {
        api_err_set(err, 400, "invalid_type", NULL, "the body must be a JSON object");
    } else if (model && !json_is_null(model) && !json_is_string(model)) {
        api_err_set(err, 400, "invalid_type", "model", "'model' must be a string");
    } else if (json_is_string(model) && strcmp(json_string_value(model), ctx->model)) {
        api_err_set(err, 404, "model_not_found", "model", "the model '%.100s' is not served here (GET /v1/models: '%.100s')",
                    json_string_value(model), ctx->model);
    } else if (parse_settings(o, kind, out, &max_tokens, err) == 0 &&
               (kind == API_CHAT ? parse_messages(o, ctx, out, err) : parse_prompt(o, ctx, out, err)) == 0) {
        rc = 0;
    }
    json_decref(o);
    if (rc == 0 && out->n_prompt == 0) {
        api_err_set(err, 400, "invalid_value", kind == API_CHAT ? "messages" : "prompt", "the prompt is empty");
        rc = -1;
    } else if (rc == 0 && out->n_prompt >= ctx->n_ctx) {
        api_err_set(err, 400, "context_length_exceeded", kind == API_CHAT ? "messages" : "prompt",
                    "the prompt is %lld tokens; the context holds %lld (prompt and completion together)",
                    (long long)out->n_prompt, (long long)ctx->n_ctx);
        rc = -1;
    } else if (rc == 0 && max_tokens > ctx->n_ctx - out->n_prompt) {
        api_err_set(err, 400, "context_length_exceeded", "max_tokens",
                    "max_tokens %lld with a prompt of %lld tokens exceeds the context of %lld (at most %lld here)",
                    max_tokens, (long long)out->n_prompt, (long long)ctx->n_ctx, (long long)(ctx->n_ctx - out->n_prompt));
        rc = -1;
    }
    if (rc) {
        api_request_free(out);
        return -1;
    }
    out->max_tokens = max_tokens ? max_tokens : ctx->n_ctx - out->n_prompt;   /* default: the rest of the context */
    return 0;
}

void api_request_free(api_request *r) {
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

/* ---- answers ---- */

static char *dump(json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

char *api_error_json(const api_err *e) {
    json_t *inner = json_pack("{s:o, s:s, s:s, s:o}", "message", jstr(e->message, strlen(e->message)), "type",
                              e->type ? e->type : "invalid_request_error", "code", e->code ? e->code : "error", "param",
                              e->param ? json_string(e->param) : json_null());
    return dump(json_pack("{s:o}", "error", inner));
}

static json_t *usage(int64_t n_prompt, int64_t n_gen) {
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)n_prompt, "completion_tokens", (json_int_t)n_gen,
                     "total_tokens", (json_int_t)(n_prompt + n_gen));
}

static json_t *head(api_kind kind, const char *id, long long created, const char *model, bool chunk) {
    const char *obj = kind == API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return json_pack("{s:s, s:s, s:I, s:s}", "id", id, "object", obj, "created", (json_int_t)created, "model", model);
}

char *api_answer_json(api_kind kind, const char *id, long long created, const char *model, const char *text,
                      size_t len, const char *finish, int64_t n_prompt, int64_t n_gen) {
    json_t *o = head(kind, id, created, model, false), *choice;
    if (kind == API_CHAT)
        choice = json_pack("{s:i, s:{s:s, s:o}, s:n, s:s}", "index", 0, "message", "role", "assistant", "content",
                           jstr(text, len), "logprobs", "finish_reason", finish);
    else
        choice = json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "text", jstr(text, len), "logprobs", "finish_reason", finish);
    if (!o || !choice) {
        json_decref(o);
        json_decref(choice);
        return NULL;
    }
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    json_object_set_new(o, "usage", usage(n_prompt, n_gen));
    return dump(o);
}

char *api_chunk_json(api_kind kind, const char *id, long long created, const char *model, const char *text,
                     size_t len, bool role, const char *finish, int64_t n_prompt, int64_t n_gen) {
    json_t *o = head(kind, id, created, model, true), *choice;
    json_t *fin = finish ? json_string(finish) : json_null();
    if (kind == API_CHAT) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string("assistant"));
        if (len || role) json_object_set_new(delta, "content", jstr(text, len));
        choice = json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "delta", delta, "logprobs", "finish_reason", fin);
    } else {
        choice = json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "text", jstr(text, len), "logprobs", "finish_reason", fin);
    }
    if (!o || !choice) {
        json_decref(o);
        json_decref(choice);
        return NULL;
    }
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    if (finish) json_object_set_new(o, "usage", usage(n_prompt, n_gen));
    return dump(o);
}

char *api_usage_chunk_json(api_kind kind, const char *id, long long created, const char *model, int64_t n_prompt,
                           int64_t n_gen) {
    json_t *o = head(kind, id, created, model, true);
    if (!o) return NULL;
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage(n_prompt, n_gen));
    return dump(o);
}

char *api_models_json(const char *model, long long created) {
    return dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id", model, "object", "model",
                          "created", (json_int_t)created, "owned_by", "minfer"));
}

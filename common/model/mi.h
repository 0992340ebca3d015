/* Public C API of the engine: load a model, open a session (KV cache + scheduler),
 * feed tokens, read logits. Everything returns mi_status; messages via mi_errmsg(). */
#ifndef MI_H
#define MI_H
#include <stdint.h>
#include <stdbool.h>
#include "../core/mi_err.h"
#include "../quant/mi_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MI_ARCH_LLAMA = 0, MI_ARCH_QWEN2, MI_ARCH_QWEN3, MI_ARCH_COUNT } mi_arch;

/* Hyper-parameters, read from GGUF metadata. */
typedef struct {
    mi_arch arch;
    char arch_name[32];
    int64_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    float rms_eps, rope_freq_base;
    int rope_mode;           /* MI_ROPE_NEOX for qwen2/qwen3, MI_ROPE_NORMAL for llama */
    bool tied_output;        /* no output.weight: reuse token_embd.weight */
    bool qkv_bias;           /* qwen2 */
    bool qk_norm;            /* qwen3 */
    int64_t n_rot;           /* rotated dims per head: ARCH.rope.dimension_count, else head_dim */
} mi_hparams;

typedef struct mi_model mi_model;
typedef struct mi_session mi_session;

typedef struct {
    const char *backend;     /* "cpu", "cuda", "auto" (default: auto) */
    int n_threads;           /* CPU threads; <= 0: all cores */
    int64_t n_ctx;           /* KV length; <= 0: min(n_ctx_train, 4096) */
    mi_type kv_type;         /* MI_TYPE_F16 (default) or MI_TYPE_F32 */
    int64_t n_ubatch;        /* max tokens per graph when feeding a prompt; <= 0: automatic
                                (CPU: activation memory <= 4% of weights + KV; device: whole
                                prompt). Env MINFER_UBATCH overrides. */
} mi_session_params;
void mi_session_params_default(mi_session_params *p);

mi_status mi_model_load(const char *path, mi_model **out);
/* Load-time choices. backend "cpu": the model is meant for CPU sessions only, so a CUDA
 * phase leaves the device alone (no weight upload); "auto"/"cuda"/NULL: a CUDA phase
 * uploads the weights of an eligible model at load (the default, mi_model_load). */
typedef struct {
    const char *backend;
} mi_model_params;
mi_status mi_model_load_params(const char *path, const mi_model_params *p, mi_model **out);
bool mi_model_cpu_only(const mi_model *m);   /* loaded with backend "cpu" */
void mi_model_free(mi_model *m);
const mi_hparams *mi_model_hparams(const mi_model *m);
struct gguf_file *mi_model_gguf(const mi_model *m);

/* Sessions on one model may run concurrently, on any backends: a session keeps its own
 * placement and never writes the shared model. The KV cache is sized before it is
 * allocated: one that cannot fit in the memory of its backend (host: MemAvailable;
 * device: its free memory) is refused with MI_ERR_NOMEM, the message naming the bytes
 * needed and available and the setting to change (n_ctx, kv_type). Env
 * MINFER_NO_MEMCHECK=1 skips that check (and the scheduler's, per graph). */
mi_status mi_session_new(mi_model *m, const mi_session_params *p, mi_session **out);
void mi_session_free(mi_session *s);
/* Feed n tokens at the current position (appending to the KV cache). Logits of the
 * last token (or of every token if all_logits) are then available via mi_logits.
 * Logits that are not finite (NaN/Inf: corrupt weights) fail with MI_ERR_FORMAT. */
mi_status mi_session_decode(mi_session *s, const int32_t *tokens, int64_t n, bool all_logits);
/* Feed n tokens as mi_session_decode does and set *next to the greedy next token: the argmax
 * of the last token's logits (mi_sample_greedy's rule: the first on ties, NaN never wins),
 * computed on the backend that holds the logits, so only the id crosses back from a device.
 * No logits are kept (mi_logits has no rows). No finite largest logit: MI_ERR_FORMAT. */
mi_status mi_session_decode_greedy(mi_session *s, const int32_t *tokens, int64_t n, int32_t *next);
/* Feed n tokens as mi_session_decode does and keep, instead of the logits, the last token's k
 * best candidates of logits * scale (NaN as -inf; larger first, then lower id: the sampler's
 * mi_sample_top_k with scale = 1 / temperature), computed on the backend that holds the logits,
 * so only 2k floats cross back from a device. 1 <= k <= 256, k < n_vocab, scale finite and > 0.
 * A best candidate that is not finite: MI_ERR_FORMAT. */
mi_status mi_session_decode_top(mi_session *s, const int32_t *tokens, int64_t n, float scale, int64_t k);
/* The last mi_session_decode_top's candidates: [2k] floats, their k values, then their k ids
 * (exact as floats); *k = 0 and NULL after any other decode. Valid until the next decode. */
const float *mi_session_top(const mi_session *s, int64_t *k);
/* [n_vocab * rows] floats, valid until the next decode; rows = n if all_logits else 1. */
const float *mi_logits(const mi_session *s, int64_t *rows);
int64_t mi_session_n_past(const mi_session *s);
void mi_session_reset(mi_session *s);
/* Forget every position >= n_past (keep the first n_past cached tokens); n_past <= current. */
mi_status mi_session_truncate(mi_session *s, int64_t n_past);
const char *mi_session_backend(const mi_session *s);   /* "cpu" or "cuda" (+ why in log) */
/* Kernels the last decode step launched, from a backend that replays captured steps (CUDA
 * graphs); -1 when no backend of the session reports one. */
int64_t mi_session_step_kernels(const mi_session *s);
/* Host seconds the scheduler spends on a session's decode steps, summed over the session:
 * out[0] in total, then by part: the backends' split set-up, issuing the nodes, the split ends
 * (a captured step's launch). On a device a step's scheduler call queues work and returns, so
 * this against the decode's wall time is the host's share of a step. */
void mi_session_host_times(const mi_session *s, double out[4]);
/* Greedy decodes that took the step queued ahead of the host's read (MINFER_STEP_AHEAD: after a
 * one-token mi_session_decode_greedy, the step of the token it drew is queued on the device
 * before that token is read back; the next greedy decode of exactly that token takes it, any
 * other call leaves it to run unread). */
int64_t mi_session_steps_ahead(const mi_session *s);

/* Sizes for throughput figures (bench, run's stats line). */
size_t mi_model_weight_bytes(const mi_model *m);     /* all weight tensors */
size_t mi_model_bytes_per_token(const mi_model *m);  /* weight bytes one decode step reads */
mi_type mi_model_dominant_type(const mi_model *m);   /* type holding most weight bytes */
size_t mi_session_kv_bytes(const mi_session *s);     /* KV cache allocation */
int64_t mi_session_n_ctx(const mi_session *s);
/* KV bytes one decode step at position n_past reads (K and V of all layers). */
size_t mi_session_kv_read_bytes(const mi_session *s, int64_t n_past);

#ifdef __cplusplus
}
#endif
#endif

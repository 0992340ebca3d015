/* Table of real model shapes (hyper-parameters from each model's HF config.json) and
 * tiny test shapes, plus the tensor-type mix rule shared by `minfer synth` and
 * `minfer quantize` (llama.cpp-compatible q4_k_m selection, row-size fallbacks). */
#ifndef MI_SHAPES_H
#define MI_SHAPES_H
#include <stdint.h>
#include <stdbool.h>
#include "../quant/mi_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name;        /* "qwen2.5-0.5b", "tiny-qwen3", ... */
    const char *arch;        /* GGUF general.architecture: "llama", "qwen2", "qwen3" */
    const char *title;       /* general.name written by synth */
    const char *tok_pre;     /* tokenizer.ggml.pre: "qwen2", "smollm" */
    int64_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx;
    float rope_freq_base, rms_eps;
    bool tied;               /* no output.weight: the output reuses token_embd.weight */
    bool qkv_bias;           /* qwen2: attn_q/k/v.bias */
    bool qk_norm;            /* qwen3: attn_q_norm/attn_k_norm [head_dim] */
    bool specials_first;     /* special tokens at ids 0..2 (SmolLM) instead of the end (Qwen) */
} mi_shape;

int mi_shape_count(void);
const mi_shape *mi_shape_at(int i);              /* NULL past the end */
const mi_shape *mi_shape_find(const char *name); /* case-insensitive; NULL if unknown */
/* Weight element count (every tensor, output counted once if untied). */
int64_t mi_shape_n_params(const mi_shape *s);

/* ---- type mixes ---- */
typedef struct {
    const char *name;        /* "q4_k_m", "q4_0", "f16", ... */
    mi_type base;            /* type of the ordinary 2D weights */
    uint32_t ftype;          /* general.file_type (llama_ftype numbering) */
    bool more_bits;          /* q4_k_m/q5_k_m: Q6_K for attn_v/ffn_down in use_more_bits layers */
} mi_mix;

int mi_mix_count(void);
const mi_mix *mi_mix_at(int i);
const mi_mix *mi_mix_find(const char *name);     /* case-insensitive; NULL if unknown */

/* The layer pick of q4_k_m/q5_k_m: i is the index of this attn_v (or ffn_down) among
 * all attn_v (ffn_down) tensors in file order, n their count. First and last eighth,
 * and every third layer in between. */
bool mi_mix_use_more_bits(int i, int n);

/* Type for a type that needs 256-element rows when ne0 is not a multiple of 256
 * (Q4_K->Q5_0, Q5_K->Q5_1, Q6_K->Q8_0), and F16 when ne0 is not even a multiple of the
 * fallback's block. Types that fit are returned unchanged. */
mi_type mi_mix_fallback(mi_type t, int64_t ne0);

/* Per-tensor types for a whole model. names/n_dims/ne describe n tensors in file
 * order; out[i] gets each one's type. pure: every 2D weight gets the base type (only
 * row-size fallbacks), as llama-quantize --pure. Otherwise the llama.cpp rule:
 *   1D tensors (norms, biases)               -> F32
 *   output.weight, or token_embd.weight when there is no output.weight
 *                                            -> Q8_0 if ne0 % 256, else Q6_K (base Q8_0 and
 *                                               float bases keep the base)
 *   attn_v / ffn_down with more_bits         -> Q6_K where mi_mix_use_more_bits(i, n)
 *   everything else                          -> base
 * then mi_mix_fallback. Float bases (F32/F16/BF16) apply to every 2D weight. */
void mi_mix_plan(const mi_mix *mix, bool pure, int64_t n, const char *const *names,
                 const int *n_dims, const int64_t (*ne)[4], mi_type *out);

#ifdef __cplusplus
}
#endif
#endif

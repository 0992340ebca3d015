/* Real model shapes (from the models' HF config.json: hidden_size, num_hidden_layers,
 * num_attention_heads, num_key_value_heads, head_dim, intermediate_size, vocab_size,
 * rope_theta, rms_norm_eps, max_position_embeddings, tie_word_embeddings) and tiny
 * test shapes, and the per-tensor type rule of the quantization mixes. */
#include "shapes.h"
#include <string.h>
#include <strings.h>

/* name arch title pre | vocab embd layer head kv hdim ff ctx | theta eps | tied bias qknorm specials_first */
static const mi_shape shapes[] = {
    /* tiny shapes for the NumPy reference tests. tiny-llama and tiny-qwen3 have every row a
     * multiple of 256 (all K-quants apply); tiny-qwen2 has n_embd 128 so K-quants fall back
     * to Q5_0/Q8_0 like the 0.5B model, except ffn_down (row n_ff = 256). tiny-qwen3 has
     * n_head * head_dim != n_embd like the real Qwen3 models. */
    {"tiny-llama", "llama", "tiny llama (synthetic)", "smollm",
     512, 256, 4, 4, 2, 64, 512, 512, 10000.0f, 1e-5f, false, false, false, true},
    {"tiny-qwen2", "qwen2", "tiny qwen2 (synthetic)", "qwen2",
     384, 128, 4, 4, 2, 32, 256, 512, 1000000.0f, 1e-6f, true, true, false, false},
    {"tiny-qwen3", "qwen3", "tiny qwen3 (synthetic)", "qwen2",
     1000, 256, 4, 4, 2, 128, 512, 512, 1000000.0f, 1e-6f, true, false, true, false},
    /* SmolLM2 (llama architecture) */
    {"smollm2-135m", "llama", "SmolLM2 135M (synthetic)", "smollm",
     49152, 576, 30, 9, 3, 64, 1536, 8192, 100000.0f, 1e-5f, true, false, false, true},
    {"smollm2-360m", "llama", "SmolLM2 360M (synthetic)", "smollm",
     49152, 960, 32, 15, 5, 64, 2560, 8192, 100000.0f, 1e-5f, true, false, false, true},
    {"smollm2-1.7b", "llama", "SmolLM2 1.7B (synthetic)", "smollm",
     49152, 2048, 24, 32, 32, 64, 8192, 8192, 130000.0f, 1e-5f, true, false, false, true},
    /* Qwen2.5 (qwen2 architecture: QKV bias; NEOX rope) */
    {"qwen2.5-0.5b", "qwen2", "Qwen2.5 0.5B (synthetic)", "qwen2",
     151936, 896, 24, 14, 2, 64, 4864, 32768, 1000000.0f, 1e-6f, true, true, false, false},
    {"qwen2.5-1.5b", "qwen2", "Qwen2.5 1.5B (synthetic)", "qwen2",
     151936, 1536, 28, 12, 2, 128, 8960, 32768, 1000000.0f, 1e-6f, true, true, false, false},
    {"qwen2.5-3b", "qwen2", "Qwen2.5 3B (synthetic)", "qwen2",
     151936, 2048, 36, 16, 2, 128, 11008, 32768, 1000000.0f, 1e-6f, true, true, false, false},
    {"qwen2.5-7b", "qwen2", "Qwen2.5 7B (synthetic)", "qwen2",
     152064, 3584, 28, 28, 4, 128, 18944, 32768, 1000000.0f, 1e-6f, false, true, false, false},
    /* Qwen3 (per-head q/k RMS norm, head_dim 128 independent of n_embd, no bias) */
    {"qwen3-0.6b", "qwen3", "Qwen3 0.6B (synthetic)", "qwen2",
     151936, 1024, 28, 16, 8, 128, 3072, 40960, 1000000.0f, 1e-6f, true, false, true, false},
    {"qwen3-1.7b", "qwen3", "Qwen3 1.7B (synthetic)", "qwen2",
     151936, 2048, 28, 16, 8, 128, 6144, 40960, 1000000.0f, 1e-6f, true, false, true, false},
    {"qwen3-4b", "qwen3", "Qwen3 4B (synthetic)", "qwen2",
     151936, 2560, 36, 32, 8, 128, 9728, 40960, 1000000.0f, 1e-6f, true, false, true, false},
    {"qwen3-8b", "qwen3", "Qwen3 8B (synthetic)", "qwen2",
     151936, 4096, 36, 32, 8, 128, 12288, 40960, 1000000.0f, 1e-6f, false, false, true, false},
};

int mi_shape_count(void) { return (int)(sizeof shapes / sizeof shapes[0]); }

const mi_shape *mi_shape_at(int i) {
    return (i >= 0 && i < mi_shape_count()) ? &shapes[i] : NULL;
}

const mi_shape *mi_shape_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < mi_shape_count(); i++)
        if (!strcasecmp(shapes[i].name, name)) return &shapes[i];
    return NULL;
}

int64_t mi_shape_n_params(const mi_shape *s) {
    int64_t E = s->n_embd, q = s->n_head * s->head_dim, kv = s->n_head_kv * s->head_dim;
    int64_t layer = E                      /* attn_norm */
                  + E * q + 2 * E * kv     /* q, k, v */
                  + q * E                  /* attn_output */
                  + E + 3 * E * s->n_ff;   /* ffn_norm, gate, up, down */
    if (s->qkv_bias) layer += q + 2 * kv;
    if (s->qk_norm) layer += 2 * s->head_dim;
    int64_t n = s->n_layer * layer + s->n_vocab * E + E;
    if (!s->tied) n += s->n_vocab * E;
    return n;
}

/* name base ftype more_bits. ftype numbers are llama.cpp's llama_ftype values (what
 * general.file_type holds in the wild); whole-model K types carry the _S numbers. */
static const mi_mix mixes[] = {
    {"f32", MI_TYPE_F32, 0, false},
    {"f16", MI_TYPE_F16, 1, false},
    {"bf16", MI_TYPE_BF16, 32, false},
    {"q4_0", MI_TYPE_Q4_0, 2, false},
    {"q4_1", MI_TYPE_Q4_1, 3, false},
    {"q8_0", MI_TYPE_Q8_0, 7, false},
    {"q5_0", MI_TYPE_Q5_0, 8, false},
    {"q5_1", MI_TYPE_Q5_1, 9, false},
    {"q4_k", MI_TYPE_Q4_K, 14, false},
    {"q4_k_s", MI_TYPE_Q4_K, 14, false},
    {"q4_k_m", MI_TYPE_Q4_K, 15, true},
    {"q5_k", MI_TYPE_Q5_K, 16, false},
    {"q5_k_s", MI_TYPE_Q5_K, 16, false},
    {"q5_k_m", MI_TYPE_Q5_K, 17, true},
    {"q6_k", MI_TYPE_Q6_K, 18, false},
};

int mi_mix_count(void) { return (int)(sizeof mixes / sizeof mixes[0]); }
const mi_mix *mi_mix_at(int i) { return (i >= 0 && i < mi_mix_count()) ? &mixes[i] : NULL; }

const mi_mix *mi_mix_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < mi_mix_count(); i++)
        if (!strcasecmp(mixes[i].name, name)) return &mixes[i];
    return NULL;
}

bool mi_mix_use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static bool is_float(mi_type t) { return t == MI_TYPE_F32 || t == MI_TYPE_F16 || t == MI_TYPE_BF16; }

static int64_t blck(mi_type t) {
    switch (t) {
    case MI_TYPE_Q4_0: case MI_TYPE_Q4_1: case MI_TYPE_Q5_0: case MI_TYPE_Q5_1: case MI_TYPE_Q8_0: return 32;
    case MI_TYPE_Q4_K: case MI_TYPE_Q5_K: case MI_TYPE_Q6_K: return 256;
    default: return 1;
    }
}

mi_type mi_mix_fallback(mi_type t, int64_t ne0) {
    if (ne0 % blck(t) == 0) return t;
    switch (t) {
    case MI_TYPE_Q4_K: t = MI_TYPE_Q5_0; break;
    case MI_TYPE_Q5_K: t = MI_TYPE_Q5_1; break;
    case MI_TYPE_Q6_K: t = MI_TYPE_Q8_0; break;
    default: break;
    }
    return ne0 % blck(t) == 0 ? t : MI_TYPE_F16;
}

/* Name tests: GGUF names are "blk.N.<kind>.weight", "token_embd.weight", "output.weight". */
static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

void mi_mix_plan(const mi_mix *mix, bool pure, int64_t n, const char *const *names,
                 const int *n_dims, const int64_t (*ne)[4], mi_type *out) {
    bool has_output = false;
    int n_v = 0, n_down = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!strcmp(names[i], "output.weight")) has_output = true;
        if (ends_with(names[i], ".attn_v.weight")) n_v++;
        if (ends_with(names[i], ".ffn_down.weight")) n_down++;
    }
    /* counters run in file order, as llama.cpp's do: a file whose layers are stored in
     * name order (blk.0, blk.1, blk.10, ...) gets its Q6_K layers picked in that order */
    int i_v = 0, i_down = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *nm = names[i];
        bool is_v = ends_with(nm, ".attn_v.weight"), is_down = ends_with(nm, ".ffn_down.weight");
        mi_type t = mix->base;
        if (n_dims[i] < 2) {
            out[i] = MI_TYPE_F32;
        } else {
            if (!pure && !is_float(mix->base)) {
                bool is_out = !strcmp(nm, "output.weight") ||
                              (!has_output && !strcmp(nm, "token_embd.weight"));
                if (is_out) {
                    if (ne[i][0] % 256 != 0) t = MI_TYPE_Q8_0;
                    else if (mix->base != MI_TYPE_Q8_0) t = MI_TYPE_Q6_K;
                } else if (mix->more_bits && is_v && mi_mix_use_more_bits(i_v, n_v)) {
                    t = MI_TYPE_Q6_K;
                } else if (mix->more_bits && is_down && mi_mix_use_more_bits(i_down, n_down)) {
                    t = MI_TYPE_Q6_K;
                }
            }
            out[i] = mi_mix_fallback(t, ne[i][0]);
        }
        if (is_v) i_v++;
        if (is_down) i_down++;
    }
}

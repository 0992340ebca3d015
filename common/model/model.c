/* Model loading: read the hyper-parameters of a llama / qwen2 / qwen3 GGUF, then bind
 * every weight as a graph leaf pointing into the file mapping (no copy), checking each
 * expected tensor's presence, type and shape so the graph never sees a bad weight. */
#include "model_internal.h"
#include "../backend/hooks.h"
#include <string.h>
#include <stdlib.h>
#include <stdio.h>

static const char *const arch_names[MI_ARCH_COUNT] = {"llama", "qwen2", "qwen3"};

/* ---- metadata ---- */

static mi_status key_i64(const gguf_file *f, const char *arch, const char *suffix, bool required,
                         int64_t def, int64_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_find_key(f, key) < 0) {
        if (required) return mi_err(MI_ERR_FORMAT, "missing required metadata key '%s'", key);
        *out = def;
        return MI_OK;
    }
    if (gguf_get_i64(f, key, out) != MI_OK)
        return mi_err(MI_ERR_FORMAT, "metadata key '%s' is not an integer", key);
    return MI_OK;
}

static mi_status key_f32(const gguf_file *f, const char *arch, const char *suffix, bool required,
                         float def, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_find_key(f, key) < 0) {
        if (required) return mi_err(MI_ERR_FORMAT, "missing required metadata key '%s'", key);
        *out = def;
        return MI_OK;
    }
    if (gguf_get_f32(f, key, out) != MI_OK)
        return mi_err(MI_ERR_FORMAT, "metadata key '%s' is not a float", key);
    return MI_OK;
}

static mi_status read_hparams(const gguf_file *f, mi_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    const char *s;
    size_t len;
    if (gguf_find_key(f, "general.architecture") < 0)
        return mi_err(MI_ERR_FORMAT, "missing required metadata key 'general.architecture'");
    if (gguf_get_str(f, "general.architecture", &s, &len) != MI_OK)
        return mi_err(MI_ERR_FORMAT, "metadata key 'general.architecture' is not a string");
    if (len >= sizeof hp->arch_name) len = sizeof hp->arch_name - 1;
    memcpy(hp->arch_name, s, len);
    hp->arch_name[len] = 0;
    /* printable copy for the message: a garbled name must not spray bytes on the terminal */
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)hp->arch_name[i] < 32 || (unsigned char)hp->arch_name[i] > 126) hp->arch_name[i] = '?';
    int a = -1;
    for (int i = 0; i < MI_ARCH_COUNT; i++)
        if (!strcmp(hp->arch_name, arch_names[i])) a = i;
    if (a < 0)
        return mi_err(MI_ERR_UNSUPPORTED, "unknown architecture '%s' (supported: llama, qwen2, qwen3)",
                      hp->arch_name);
    hp->arch = (mi_arch)a;
    const char *an = hp->arch_name;

    MI_TRY(key_i64(f, an, "block_count", true, 0, &hp->n_layer));
    MI_TRY(key_i64(f, an, "embedding_length", true, 0, &hp->n_embd));
    MI_TRY(key_i64(f, an, "feed_forward_length", true, 0, &hp->n_ff));
    MI_TRY(key_i64(f, an, "attention.head_count", true, 0, &hp->n_head));
    MI_TRY(key_i64(f, an, "context_length", true, 0, &hp->n_ctx_train));
    MI_TRY(key_i64(f, an, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv));
    MI_TRY(key_f32(f, an, "attention.layer_norm_rms_epsilon", true, 0, &hp->rms_eps));
    MI_TRY(key_f32(f, an, "rope.freq_base", false, 10000.0f, &hp->rope_freq_base));

    if (hp->n_layer <= 0 || hp->n_layer > 4096) return mi_err(MI_ERR_FORMAT, "%s.block_count = %lld is out of range", an, (long long)hp->n_layer);
    if (hp->n_embd <= 0 || hp->n_embd > (1 << 20)) return mi_err(MI_ERR_FORMAT, "%s.embedding_length = %lld is out of range", an, (long long)hp->n_embd);
    if (hp->n_ff <= 0 || hp->n_ff > (1 << 22)) return mi_err(MI_ERR_FORMAT, "%s.feed_forward_length = %lld is out of range", an, (long long)hp->n_ff);
    if (hp->n_head <= 0 || hp->n_head > 4096) return mi_err(MI_ERR_FORMAT, "%s.attention.head_count = %lld is out of range", an, (long long)hp->n_head);
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv)
        return mi_err(MI_ERR_FORMAT, "%s.attention.head_count_kv = %lld does not divide head_count %lld",
                      an, (long long)hp->n_head_kv, (long long)hp->n_head);
    if (hp->n_ctx_train <= 0) return mi_err(MI_ERR_FORMAT, "%s.context_length = %lld is out of range", an, (long long)hp->n_ctx_train);
    if (!(hp->rms_eps > 0.0f && hp->rms_eps < 1.0f)) return mi_err(MI_ERR_FORMAT, "%s.attention.layer_norm_rms_epsilon = %g is out of range", an, (double)hp->rms_eps);
    if (!(hp->rope_freq_base > 0.0f)) return mi_err(MI_ERR_FORMAT, "%s.rope.freq_base = %g is out of range", an, (double)hp->rope_freq_base);

    /* qwen3 (and some llamas) decouple head_dim from n_embd / n_head */
    int64_t kl = -1;   /* -1: absent; a value in the file must be positive (range checked below) */
    char kl_key[128];
    snprintf(kl_key, sizeof kl_key, "%s.attention.key_length", an);
    if (gguf_find_key(f, kl_key) >= 0) {
        MI_TRY(key_i64(f, an, "attention.key_length", true, 0, &kl));
        if (kl <= 0) return mi_err(MI_ERR_FORMAT, "%s = %lld is out of range", kl_key, (long long)kl);
    }
    if (kl > 0) {
        hp->head_dim = kl;
    } else {
        if (hp->n_embd % hp->n_head)
            return mi_err(MI_ERR_FORMAT, "embedding_length %lld is not a multiple of head_count %lld and no %s.attention.key_length is given",
                          (long long)hp->n_embd, (long long)hp->n_head, an);
        hp->head_dim = hp->n_embd / hp->n_head;
    }
    int64_t vl = 0;
    MI_TRY(key_i64(f, an, "attention.value_length", false, hp->head_dim, &vl));
    if (vl != hp->head_dim)
        return mi_err(MI_ERR_UNSUPPORTED, "%s.attention.value_length %lld != key_length %lld is not supported",
                      an, (long long)vl, (long long)hp->head_dim);
    if (hp->head_dim <= 0 || hp->head_dim > 1024 || hp->head_dim % 2)
        return mi_err(MI_ERR_FORMAT, "head_dim %lld is out of range (must be even, <= 1024)", (long long)hp->head_dim);
    MI_TRY(key_i64(f, an, "rope.dimension_count", false, hp->head_dim, &hp->n_rot));
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return mi_err(MI_ERR_FORMAT, "%s.rope.dimension_count = %lld is out of range (even, <= head_dim %lld)",
                      an, (long long)hp->n_rot, (long long)hp->head_dim);

    /* GGUF llama files store Q/K rows permuted for interleaved (normal) RoPE; the
     * qwen converters keep the HF layout, which rotates halves (NEOX). */
    hp->rope_mode = hp->arch == MI_ARCH_LLAMA ? MI_ROPE_NORMAL : MI_ROPE_NEOX;
    hp->qkv_bias = hp->arch == MI_ARCH_QWEN2;
    hp->qk_norm = hp->arch == MI_ARCH_QWEN3;

    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", an);
    if (gguf_find_key(f, key) >= 0 && gguf_get_str(f, key, &s, &len) == MI_OK &&
        !(len == 4 && !memcmp(s, "none", 4)))
        mi_log("note: %s = %.*s is ignored (positions beyond the trained context are not scaled)",
               key, (int)(len < 32 ? len : 32), s);
    return MI_OK;
}

/* ---- tensors ---- */

static mi_status bind(mi_model *m, mi_tensor *t, const char *name, int n_dims, int64_t ne0, int64_t ne1,
                      bool f32_only, bool optional, bool *present) {
    const gguf_tensor_info *ti = gguf_find_tensor(m->gguf, name);
    if (present) *present = ti != NULL;
    if (!ti) {
        if (optional) return MI_OK;
        return mi_err(MI_ERR_FORMAT, "missing tensor '%s'", name);
    }
    int64_t want[4] = {ne0, n_dims > 1 ? ne1 : 1, 1, 1};
    for (int i = 0; i < 4; i++) {
        if (ti->ne[i] != want[i])
            return mi_err(MI_ERR_FORMAT, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                          name, (long long)ti->ne[0], (long long)ti->ne[1], (long long)ti->ne[2],
                          (long long)ti->ne[3], (long long)ne0, (long long)want[1]);
    }
    const mi_type_traits *tr = mi_type_get((int)ti->type);
    if (!tr || !tr->supported)
        return mi_err(MI_ERR_UNSUPPORTED, "tensor '%s' has type %s, which is not supported", name,
                      mi_type_name((int)ti->type));
    if (f32_only && ti->type != MI_TYPE_F32)
        return mi_err(MI_ERR_UNSUPPORTED, "tensor '%s' has type %s; norms and biases must be F32", name,
                      mi_type_name((int)ti->type));
    if (mi_row_size(ti->type, ti->ne[0]) == 0)
        return mi_err(MI_ERR_FORMAT, "tensor '%s': row length %lld is not a multiple of the %s block size",
                      name, (long long)ti->ne[0], tr->name);
    int64_t ne[4] = {ti->ne[0], ti->ne[1], 1, 1};
    tensor_init(t, name, ti->type, n_dims, ne);
    t->op = MI_OP_NONE;
    t->flags = MI_T_WEIGHT;
    t->backend = -1;
    t->id = -1;
    t->data = (void *)ti->data;
    if (mi_nbytes(t) != ti->nbytes)
        return mi_err(MI_ERR_FORMAT, "tensor '%s': %zu bytes in the file, %zu expected", name, ti->nbytes, mi_nbytes(t));
    m->weights[m->n_weights++] = t;
    m->weight_bytes += ti->nbytes;
    return MI_OK;
}

static mi_status bind_all(mi_model *m) {
    const mi_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff, hd = hp->head_dim;
    const int64_t q_dim = hd * hp->n_head, kv_dim = hd * hp->n_head_kv;
    const gguf_tensor_info *te = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te) return mi_err(MI_ERR_FORMAT, "missing tensor 'token_embd.weight'");
    hp = &m->hp;
    m->hp.n_vocab = te->ne[1];
    if (m->hp.n_vocab <= 0) return mi_err(MI_ERR_FORMAT, "token_embd.weight has no rows");

    m->weights = calloc((size_t)hp->n_layer * 16 + 8, sizeof *m->weights);
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->weights || !m->layers) return mi_err(MI_ERR_NOMEM, "out of memory for %lld layers", (long long)hp->n_layer);

    MI_TRY(bind(m, &m->tok_embd, "token_embd.weight", 2, E, hp->n_vocab, false, false, NULL));
    MI_TRY(bind(m, &m->output_norm, "output_norm.weight", 1, E, 1, true, false, NULL));
    bool has_out = false;
    MI_TRY(bind(m, &m->output_own, "output.weight", 2, E, hp->n_vocab, false, true, &has_out));
    m->hp.tied_output = !has_out;
    m->output = has_out ? &m->output_own : &m->tok_embd;

    char nm[MI_NAME_MAX];
#define BIND(field, suffix, nd, a, b, f32, opt)                                   \
    do {                                                                          \
        snprintf(nm, sizeof nm, "blk.%d.%s.weight", il, suffix);                  \
        MI_TRY(bind(m, &L->field, nm, nd, a, b, f32, opt, NULL));                 \
    } while (0)
#define BIND_BIAS(field, suffix, n)                                               \
    do {                                                                          \
        snprintf(nm, sizeof nm, "blk.%d.%s.bias", il, suffix);                    \
        MI_TRY(bind(m, &L->field, nm, 1, n, 1, true, false, NULL));               \
    } while (0)
    for (int il = 0; il < (int)hp->n_layer; il++) {
        mi_layer *L = &m->layers[il];
        BIND(attn_norm, "attn_norm", 1, E, 1, true, false);
        BIND(wq, "attn_q", 2, E, q_dim, false, false);
        BIND(wk, "attn_k", 2, E, kv_dim, false, false);
        BIND(wv, "attn_v", 2, E, kv_dim, false, false);
        if (hp->qkv_bias) {
            BIND_BIAS(bq, "attn_q", q_dim);
            BIND_BIAS(bk, "attn_k", kv_dim);
            BIND_BIAS(bv, "attn_v", kv_dim);
        }
        if (hp->qk_norm) {
            BIND(q_norm, "attn_q_norm", 1, hd, 1, true, false);
            BIND(k_norm, "attn_k_norm", 1, hd, 1, true, false);
        }
        BIND(wo, "attn_output", 2, q_dim, E, false, false);
        BIND(ffn_norm, "ffn_norm", 1, E, 1, true, false);
        BIND(w_gate, "ffn_gate", 2, E, F, false, false);
        BIND(w_up, "ffn_up", 2, E, F, false, false);
        BIND(w_down, "ffn_down", 2, F, E, false, false);
    }
#undef BIND
#undef BIND_BIAS
    if (gguf_find_tensor(m->gguf, "rope_freqs.weight"))
        mi_log("note: rope_freqs.weight (long-context RoPE scaling) is ignored");

    /* bytes a decode step reads, and the type that dominates them */
    size_t emb = mi_nbytes(&m->tok_embd);
    m->bytes_per_token = m->weight_bytes - emb + (m->hp.tied_output ? emb : mi_row_size(m->tok_embd.type, E));
    size_t by_type[MI_TYPE_COUNT] = {0};
    for (int i = 0; i < m->n_weights; i++)
        if ((int)m->weights[i]->type < MI_TYPE_COUNT) by_type[m->weights[i]->type] += mi_nbytes(m->weights[i]);
    int best = 0;
    for (int t = 0; t < MI_TYPE_COUNT; t++)
        if (by_type[t] > by_type[best]) best = t;
    m->dominant_type = (mi_type)best;
    return MI_OK;
}

mi_status mi_model_load(const char *path, mi_model **out) { return mi_model_load_params(path, NULL, out); }

bool mi_model_cpu_only(const mi_model *m) { return m && m->cpu_only; }

mi_status mi_model_load_params(const char *path, const mi_model_params *p, mi_model **out) {
    *out = NULL;
    if (!path || !*path) return mi_err(MI_ERR_INVALID, "no model path given");
    const char *be = p && p->backend ? p->backend : "auto";
    if (strcmp(be, "cpu") && strcmp(be, "cuda") && strcmp(be, "auto"))
        return mi_err(MI_ERR_INVALID, "unknown backend '%s' (cpu, cuda, auto)", be);
    mi_model *m = calloc(1, sizeof *m);
    if (!m) return mi_err(MI_ERR_NOMEM, "out of memory");
    m->cpu_only = !strcmp(be, "cpu");
    mi_status st = gguf_open(path, &m->gguf);
    if (st != MI_OK) {
        free(m);
        if (!strstr(mi_errmsg(), path)) mi_err_ctx(st, "%s", path);
        return st;
    }
    st = read_hparams(m->gguf, &m->hp);
    if (st == MI_OK) st = bind_all(m);
    if (st != MI_OK) {
        mi_err_ctx(st, "%s", path);
        mi_model_free(m);
        return st;
    }
    mi_hook_model_loaded(m, path);   /* a CUDA phase may place the weights on the device */
    *out = m;
    return MI_OK;
}

void mi_model_free(mi_model *m) {
    if (!m) return;
    mi_hook_model_free(m);
    free(m->layers);
    free(m->weights);
    if (m->gguf) gguf_close(m->gguf);
    free(m);
}

const mi_hparams *mi_model_hparams(const mi_model *m) { return &m->hp; }
struct gguf_file *mi_model_gguf(const mi_model *m) { return m->gguf; }
size_t mi_model_weight_bytes(const mi_model *m) { return m->weight_bytes; }
size_t mi_model_bytes_per_token(const mi_model *m) { return m->bytes_per_token; }
mi_type mi_model_dominant_type(const mi_model *m) { return m->dominant_type; }

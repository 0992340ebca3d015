/* CUDA eligibility of a model: its architecture is one the CUDA graph covers, and every
 * op its graph will contain is accepted by the CUDA dispatch for the weight types and
 * shapes actually present. Probed with stand-in nodes (no device memory, no launch),
 * so a type or shape the kernels lack is found here, before any upload. */
#include "phase7c_wiring/wiring7c.h"
#include "common/gguf/gguf.h"
#include <string.h>
#include <stdio.h>

static bool cuda_can(const mi_tensor *node) {
    if (node->op == MI_OP_INPUT) return true;
    return mi_cuda_choice(node) != NULL;
}

static void mk(mi_tensor *t, const char *name, mi_type type, int64_t ne0, int64_t ne1, mi_op op) {
    int64_t ne[2] = {ne0, ne1};
    tensor_init(t, name, type, 2, ne);
    t->op = op;
    t->backend = -1;
    t->id = -1;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

#define NO(...) do { snprintf(why, n, __VA_ARGS__); return false; } while (0)

bool mi7c_model_eligible(const mi_model *m, char *why, size_t n) {
    const mi_hparams *hp = mi_model_hparams(m);
    if (hp->arch != MI_ARCH_LLAMA && hp->arch != MI_ARCH_QWEN2 && hp->arch != MI_ARCH_QWEN3)
        NO("architecture '%s' has no CUDA graph", hp->arch_name);
    const gguf_file *f = mi_model_gguf(m);
    const int64_t E = hp->n_embd, hd = hp->head_dim, qd = hd * hp->n_head, kvd = hd * hp->n_head_kv;
    /* token counts the probes cover: decode (1) and a prefill batch (512) */
    static const int64_t NS[2] = {1, 512};
    mi_tensor x, y, w, b, ids, pos;
    char types[160] = "";
    size_t tl = 0;
    bool seen[MI_TYPE_COUNT] = {false};
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *ti = gguf_tensor(f, i);
        if (!ends_with(ti->name, ".weight") || !strcmp(ti->name, "rope_freqs.weight")) continue;
        if ((int)ti->type < MI_TYPE_COUNT && !seen[ti->type] && tl < sizeof types - 16) {
            seen[ti->type] = true;
            tl += (size_t)snprintf(types + tl, sizeof types - tl, "%s%s", tl ? "," : "", mi_type_name(ti->type));
        }
        mk(&w, ti->name, ti->type, ti->ne[0], ti->ne[1], MI_OP_NONE);
        w.flags = MI_T_WEIGHT;
        for (int k = 0; k < 2; k++) {
            const int64_t N = NS[k];
            if (ti->n_dims == 1) {
                /* norms: whole rows (G = E) or per head (q/k norm, G = head_dim) */
                const int64_t G = ti->ne[0], D = G == E ? E : (ends_with(ti->name, "attn_q_norm.weight") ? qd : kvd);
                mk(&x, "probe_x", MI_TYPE_F32, D, N, MI_OP_ADD);
                mk(&y, "probe_norm", MI_TYPE_F32, D, N, MI_OP_RMS_NORM);
                y.src[0] = &x;
                y.src[1] = &w;
                y.p[0] = (int32_t)G;
                mi_tensor_set_pf(&y, 1, hp->rms_eps);
                if (!cuda_can(&y))
                    NO("%s (%s [%lld]): no CUDA RMS norm for it", ti->name, mi_type_name(ti->type), (long long)G);
                continue;
            }
            if (!strcmp(ti->name, "token_embd.weight")) {
                mk(&ids, "probe_ids", MI_TYPE_I32, N, 1, MI_OP_INPUT);
                mk(&y, "probe_rows", MI_TYPE_F32, ti->ne[0], N, MI_OP_GET_ROWS);
                y.src[0] = &w;
                y.src[1] = &ids;
                if (!cuda_can(&y))
                    NO("%s: weight type %s has no CUDA row lookup (types in the file: %s)", ti->name,
                       mi_type_name(ti->type), types);
                if (gguf_find_tensor(f, "output.weight")) continue;   /* else tied: also the output matmul */
            }
            /* W [K, M] @ x [K, N] (+ bias [M]) -> [M, N] */
            char bn[MI_NAME_MAX + 8];
            snprintf(bn, sizeof bn, "%.*s.bias", (int)(strlen(ti->name) - 7), ti->name);
            const gguf_tensor_info *bi = gguf_find_tensor(f, bn);
            mk(&x, "probe_x", MI_TYPE_F32, ti->ne[0], N, MI_OP_ADD);
            mk(&y, "probe_mm", MI_TYPE_F32, ti->ne[1], N, MI_OP_MATMUL);
            y.src[0] = &w;
            y.src[1] = &x;
            if (bi) {
                mk(&b, bi->name, bi->type, bi->ne[0], 1, MI_OP_NONE);
                b.flags = MI_T_WEIGHT;
                y.src[2] = &b;
            }
            if (!cuda_can(&y))
                NO("%s: weight type %s [%lld, %lld] has no CUDA matmul kernel (types in the file: %s)", ti->name,
                   mi_type_name(ti->type), (long long)ti->ne[0], (long long)ti->ne[1], types);
        }
    }
    /* ops without weights, at the model's shapes */
    for (int k = 0; k < 2; k++) {
        const int64_t N = NS[k];
        mk(&pos, "probe_pos", MI_TYPE_I32, N, 1, MI_OP_INPUT);
        mk(&x, "probe_q", MI_TYPE_F32, qd, N, MI_OP_MATMUL);
        mk(&y, "probe_rope", MI_TYPE_F32, qd, N, MI_OP_ROPE);
        y.src[0] = &x;
        y.src[1] = &pos;
        y.p[0] = (int32_t)hd;
        y.p[1] = hp->rope_mode;
        y.p[2] = (int32_t)hp->n_rot;
        mi_tensor_set_pf(&y, 3, hp->rope_freq_base);
        if (!cuda_can(&y)) NO("RoPE with head_dim %lld, n_rot %lld has no CUDA kernel", (long long)hd, (long long)hp->n_rot);
        /* the KV cache (F16, the default) and attention over it */
        mi_tensor kn, cache, ks, vs, att;
        mk(&cache, "probe_cache", MI_TYPE_F16, kvd, 4096 > N ? 4096 : N, MI_OP_NONE);
        cache.flags = MI_T_PERSIST;
        mk(&kn, "probe_k", MI_TYPE_F32, kvd, N, MI_OP_ROPE);
        mk(&ks, "probe_ks", MI_TYPE_F16, kvd, cache.ne[1], MI_OP_KV_STORE);
        ks.flags = MI_T_ALIAS;
        ks.src[0] = &kn;
        ks.src[1] = &cache;
        vs = ks;
        mk(&att, "probe_attn", MI_TYPE_F32, qd, N, MI_OP_ATTN);
        att.src[0] = &y;
        att.src[1] = &ks;
        att.src[2] = &vs;
        att.p[1] = (int32_t)hd;
        att.p[2] = (int32_t)hp->n_head;
        att.p[3] = (int32_t)hp->n_head_kv;
        mi_tensor_set_pf(&att, 4, 1.0f);
        if (!cuda_can(&ks) || !cuda_can(&att))
            NO("attention with head_dim %lld, %lld/%lld heads has no CUDA kernel", (long long)hd,
               (long long)hp->n_head, (long long)hp->n_head_kv);
        mi_tensor a2, sw;
        mk(&x, "probe_x", MI_TYPE_F32, E, N, MI_OP_MATMUL);
        mk(&a2, "probe_add", MI_TYPE_F32, E, N, MI_OP_ADD);
        a2.src[0] = &x;
        a2.src[1] = &x;
        mk(&w, "probe_g", MI_TYPE_F32, hp->n_ff, N, MI_OP_MATMUL);
        mk(&sw, "probe_swiglu", MI_TYPE_F32, hp->n_ff, N, MI_OP_SWIGLU);
        sw.src[0] = &w;
        sw.src[1] = &w;
        if (!cuda_can(&a2) || !cuda_can(&sw)) NO("residual add or SwiGLU has no CUDA kernel");
        if (N > 1) {
            mk(&y, "probe_slice", MI_TYPE_F32, E, 1, MI_OP_SLICE_ROWS);
            y.src[0] = &x;
            y.p[0] = (int32_t)(N - 1);
            y.p[1] = 1;
            if (!cuda_can(&y)) NO("the last-row slice has no CUDA kernel");
        }
    }
    snprintf(why, n, "eligible (types: %s)", types);
    return true;
}

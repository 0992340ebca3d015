/* KV cache: per layer one K and one V region [hd*Hkv, n_ctx] (F16 by default, F32
 * selectable), allocated once through the backend that runs attention, and marked
 * persistent so the graph allocator never places activations in it. */
#include "model_internal.h"
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <stdint.h>

/* Bytes of one layer's K (or V) slot: 256-byte aligned, so vector loads on either
 * backend never straddle a slot. SIZE_MAX when the product overflows. */
static size_t kv_slot_bytes(const mi_hparams *hp, mi_type type, int64_t n_ctx) {
    const size_t esz = type == MI_TYPE_F16 ? 2 : 4;
    size_t per;
    if (hp->head_dim <= 0 || hp->n_head_kv <= 0 || n_ctx <= 0 ||
        __builtin_mul_overflow((size_t)hp->head_dim, (size_t)hp->n_head_kv, &per) ||
        __builtin_mul_overflow(per, (size_t)n_ctx, &per) || __builtin_mul_overflow(per, esz, &per) ||
        per > SIZE_MAX - 255)
        return SIZE_MAX;
    return (per + 255) & ~(size_t)255;
}

size_t kv_cache_size(const mi_hparams *hp, mi_type type, int64_t n_ctx) {
    size_t slot = kv_slot_bytes(hp, type, n_ctx), total;
    if (slot == SIZE_MAX || hp->n_layer <= 0 || __builtin_mul_overflow(slot, 2 * (size_t)hp->n_layer, &total))
        return SIZE_MAX;
    return total;
}

mi_status kv_cache_init(mi_kv_cache *kv, const mi_hparams *hp, mi_type type, int64_t n_ctx,
                        mi_backend *be) {
    memset(kv, 0, sizeof *kv);
    if (type != MI_TYPE_F16 && type != MI_TYPE_F32)
        return mi_err(MI_ERR_INVALID, "KV cache type must be f16 or f32, not %s", mi_type_name(type));
    if (n_ctx <= 0) return mi_err(MI_ERR_INVALID, "context length %lld is not positive", (long long)n_ctx);
    kv->type = type;
    kv->n_ctx = n_ctx;
    kv->row = hp->head_dim * hp->n_head_kv;
    kv->n_layer = (int)hp->n_layer;
    kv->be = be;
    kv->k = calloc((size_t)kv->n_layer, sizeof *kv->k);
    kv->v = calloc((size_t)kv->n_layer, sizeof *kv->v);
    if (!kv->k || !kv->v) {
        kv_cache_free(kv);
        return mi_err(MI_ERR_NOMEM, "out of memory for the KV cache descriptors");
    }
    const size_t slot = kv_slot_bytes(hp, type, n_ctx), total = kv_cache_size(hp, type, n_ctx);
    if (total == SIZE_MAX) {
        kv_cache_free(kv);
        return mi_err(MI_ERR_INVALID, "the KV cache for %lld positions does not fit in the address space",
                      (long long)n_ctx);
    }
    mi_status st = be->iface->buffer_alloc(be, total, &kv->buf);
    if (st != MI_OK) {
        kv_cache_free(kv);
        return mi_err_ctx(st, "allocating the KV cache (%.1f MiB on %s)", total / 1048576.0, be->iface->name(be));
    }
    int64_t ne[2] = {kv->row, n_ctx};
    for (int il = 0; il < kv->n_layer; il++) {
        char nm[MI_NAME_MAX];
        mi_tensor *pair[2] = {&kv->k[il], &kv->v[il]};
        for (int j = 0; j < 2; j++) {
            snprintf(nm, sizeof nm, "cache_%c_l%d", j ? 'v' : 'k', il);
            mi_tensor *t = pair[j];
            tensor_init(t, nm, type, 2, ne);
            t->op = MI_OP_NONE;
            t->flags = MI_T_PERSIST;
            t->backend = be->index;
            t->id = -1;
            t->data = (char *)kv->buf->base + slot * (size_t)(2 * il + j);
        }
    }
    /* Zero it so an attention kernel that reads a whole tile never sees NaN garbage. */
    if (be->host_memory) {
        memset(kv->buf->base, 0, total);
    } else {
        void *z = calloc(1, slot);
        if (!z) {
            kv_cache_free(kv);
            return mi_err(MI_ERR_NOMEM, "out of memory");
        }
        for (int i = 0; i < 2 * kv->n_layer && st == MI_OK; i++)
            st = be->iface->write(be, (char *)kv->buf->base + slot * (size_t)i, z, slot);
        if (st == MI_OK) st = be->iface->synchronize(be);
        free(z);
        if (st != MI_OK) {
            kv_cache_free(kv);
            return mi_err_ctx(st, "clearing the KV cache");
        }
    }
    return MI_OK;
}

void kv_cache_free(mi_kv_cache *kv) {
    if (kv->buf && kv->be) kv->be->iface->buffer_free(kv->be, kv->buf);
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}

size_t kv_cache_bytes(const mi_kv_cache *kv) { return kv->buf ? kv->buf->size : 0; }

/* Tensor data at a small general.alignment (1 and 2 are legal GGUF): the reader must
 * hand out pointers aligned for each type's typed loads, with the file's bytes, while
 * a file at the usual alignment stays zero-copy; tensors that share or overlap their
 * data (also legal) share one copy. Images are built by hand so that every offset and
 * overlap is exactly as intended. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "common/gguf/gguf.h"

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }

typedef struct {
    const char *name;
    mi_type type;
    int64_t ne0;
    uint64_t offset;
} tdesc;

/* header + general.alignment + tensor infos, padded to the alignment, then data_len
 * bytes of a pattern; the image is copied to a 64-byte aligned block at `shift` so the
 * data section's address residue is under the test's control. */
static uint8_t *build(uint32_t align, const tdesc *t, int nt, size_t data_len, size_t shift, size_t *data_off,
                      void **block) {
    buf b = {0};
    put(&b, "GGUF", 4);
    u32(&b, 3);
    u64(&b, (uint64_t)nt);
    u64(&b, 1);
    str(&b, "general.alignment");
    u32(&b, GGUF_VT_UINT32);
    u32(&b, align);
    for (int i = 0; i < nt; i++) {
        str(&b, t[i].name);
        u32(&b, 1);
        u64(&b, (uint64_t)t[i].ne0);
        u32(&b, (uint32_t)t[i].type);
        u64(&b, t[i].offset);
    }
    while (b.n % align) put(&b, "", 1);
    *data_off = b.n;
    for (size_t j = 0; j < data_len; j++) {
        uint8_t v = (uint8_t)(j * 37 + 11);
        put(&b, &v, 1);
    }
    uint8_t *blk = aligned_alloc(64, (b.n + shift + 63) / 64 * 64);
    cr_assert(blk);
    memcpy(blk + shift, b.p, b.n);
    free(b.p);
    *block = blk;
    return blk + shift;
}

static size_t need(mi_type t) { return t == MI_TYPE_F32 ? 4 : 2; }   /* float, or uint16_t fields */

static void check_all(const gguf_file *f, const uint8_t *img, size_t data_off) {
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *ti = gguf_tensor(f, i);
        cr_expect_eq((uintptr_t)ti->data % need(ti->type), 0, "tensor %s at %p is misaligned for %s", ti->name,
                     ti->data, mi_type_name((int)ti->type));
        cr_expect(!memcmp(ti->data, img + data_off + ti->offset, ti->nbytes), "tensor %s: bytes differ", ti->name);
    }
}

static const tdesc k_mixed[] = {
    {"f32_a", MI_TYPE_F32, 8, 0},    {"q8_0", MI_TYPE_Q8_0, 32, 32},  {"f16", MI_TYPE_F16, 4, 67},
    {"q4_k", MI_TYPE_Q4_K, 256, 75}, {"f32_b", MI_TYPE_F32, 4, 221}, {"q6_k", MI_TYPE_Q6_K, 256, 239},
    {"q4_0", MI_TYPE_Q4_0, 32, 449}, {"bf16", MI_TYPE_BF16, 2, 468}, {"q5_1", MI_TYPE_Q5_1, 32, 473},
};

/* open the file build() makes at each shift (0, step, .. < 4) and check every tensor */
static void open_and_check(uint32_t align, const tdesc *t, int n, size_t data, size_t step) {
    for (size_t shift = 0; shift < 4; shift += step) {
        size_t off;
        void *blk;
        const uint8_t *img = build(align, t, n, data, shift, &off, &blk);
        gguf_file *f;
        cr_assert_eq(gguf_open_mem(img, off + data, &f), MI_OK, "%s", mi_errmsg());
        check_all(f, img, off);
        gguf_close(f);
        free(blk);
    }
}

Test(gguf_align, alignment_1_every_type_aligned) { open_and_check(1, k_mixed, 9, 512, 1); }

Test(gguf_align, alignment_2_f32_aligned) {
    static const tdesc t[] = {{"w", MI_TYPE_F32, 16, 2}, {"h", MI_TYPE_F16, 8, 66}, {"q", MI_TYPE_Q8_0, 32, 82}};
    open_and_check(2, t, 3, 128, 2);
}

/* Overlapping and shared ranges: every tensor aligned with its own bytes, and tensors
 * with the same range get the same copy (the copy grows with the data, not with the
 * number of tensors that name it). */
Test(gguf_align, overlapping_ranges_share_copies) {
    enum { NT = 64 };
    tdesc t[NT + 3];
    char names[NT][16];
    for (int i = 0; i < NT; i++) {
        snprintf(names[i], sizeof names[i], "same.%d", i);
        t[i] = (tdesc){names[i], MI_TYPE_F32, 1024, 1};
    }
    t[NT] = (tdesc){"inside", MI_TYPE_F32, 16, 1 + 400};           /* inside the shared range, same residue */
    t[NT + 1] = (tdesc){"across", MI_TYPE_F32, 1024, 2};           /* overlapping, other residue */
    t[NT + 2] = (tdesc){"q", MI_TYPE_Q8_0, 64, 4095};              /* overlapping, odd */
    for (size_t shift = 0; shift < 4; shift++) {
        size_t off;
        void *blk;
        const uint8_t *img = build(1, t, NT + 3, 4200, shift, &off, &blk);
        gguf_file *f;
        cr_assert_eq(gguf_open_mem(img, off + 4200, &f), MI_OK, "%s", mi_errmsg());
        check_all(f, img, off);
        const gguf_tensor_info *t0 = gguf_find_tensor(f, "same.0");
        for (int i = 1; i < NT; i++)
            cr_expect_eq(gguf_find_tensor(f, names[i])->data, t0->data, "%s has its own copy", names[i]);
        cr_expect_eq((const uint8_t *)gguf_find_tensor(f, "inside")->data, (const uint8_t *)t0->data + 400);
        gguf_close(f);
        free(blk);
    }
}

/* The usual alignment costs nothing: every pointer is into the image itself. */
Test(gguf_align, alignment_32_zero_copy) {
    static const tdesc t[] = {{"a", MI_TYPE_F32, 8, 0}, {"b", MI_TYPE_Q8_0, 32, 32}, {"c", MI_TYPE_Q4_K, 256, 96}};
    size_t off;
    void *blk;
    const uint8_t *img = build(32, t, 3, 256, 0, &off, &blk);
    gguf_file *f;
    cr_assert_eq(gguf_open_mem(img, off + 256, &f), MI_OK, "%s", mi_errmsg());
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *ti = gguf_tensor(f, i);
        cr_expect_eq((const uint8_t *)ti->data, img + off + ti->offset, "tensor %s was copied", ti->name);
    }
    gguf_close(f);
    free(blk);
}

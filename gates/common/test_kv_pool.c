/* The KV block pool (common/model/kv_pool.c): blocks handed out and taken back with nothing
 * lost or shared (every held position maps to its own cache row, the free count returns to the
 * pool's size), reserve all or nothing (a sequence the pool cannot grow is left as it was and
 * its neighbours keep their rows), truncate and release give blocks back, the storage is the
 * size asked for, and bad arguments are refused. CPU backend, a small llama shape. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "common/model/kv_pool.h"

static mi_hparams shape(void) {
    mi_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layer = 2;
    hp.n_head = 4;
    hp.n_head_kv = 2;
    hp.head_dim = 16;
    return hp;
}

static mi_backend *g_cpu;
static void setup(void) { cr_assert_eq(mi_backend_cpu_new(1, &g_cpu), MI_OK); }
static void teardown(void) { g_cpu->iface->destroy(g_cpu); }
TestSuite(kv_pool, .init = setup, .fini = teardown);

/* every held position of the sequences has its own row, inside the pool */
static void rows_distinct(const mi_kv_pool *p, mi_kv_seq *const *seqs, int n) {
    const int64_t rows = p->block * p->n_blocks;
    char *seen = calloc((size_t)rows, 1);
    for (int i = 0; i < n; i++)
        for (int64_t pos = 0; pos < seqs[i]->n_pos; pos++) {
            const int64_t r = kv_seq_row(p, seqs[i], pos);
            cr_assert(r >= 0 && r < rows, "row %lld outside the pool", (long long)r);
            cr_assert(!seen[r], "row %lld held twice (sequence %d, position %lld)", (long long)r, i, (long long)pos);
            seen[r] = 1;
        }
    free(seen);
}

Test(kv_pool, grow_share_release) {
    const mi_hparams hp = shape();
    mi_kv_pool p;
    cr_assert_eq(kv_pool_init(&p, &hp, MI_TYPE_F16, 16, 10, g_cpu), MI_OK, "%s", mi_errmsg());
    cr_assert_eq(p.n_free, 10);
    cr_assert_eq(p.kv.n_ctx, 160);
    cr_assert_eq(kv_cache_bytes(&p.kv), kv_cache_size(&hp, MI_TYPE_F16, 160), "the storage is the size asked for");
    mi_kv_seq a = {0}, b = {0}, c = {0};
    mi_kv_seq *all[3] = {&a, &b, &c};
    /* interleaved growth: a 1 -> 17 -> 40, b 16 -> 33, c 5 */
    cr_assert_eq(kv_pool_reserve(&p, &a, 1), MI_OK);
    cr_assert_eq(kv_pool_reserve(&p, &b, 16), MI_OK);
    cr_assert_eq(kv_pool_reserve(&p, &a, 17), MI_OK);
    cr_assert_eq(kv_pool_reserve(&p, &c, 5), MI_OK);
    cr_assert_eq(kv_pool_reserve(&p, &b, 33), MI_OK);
    cr_assert_eq(kv_pool_reserve(&p, &a, 40), MI_OK);
    cr_assert_eq(a.n_blocks, 3);
    cr_assert_eq(b.n_blocks, 3);
    cr_assert_eq(c.n_blocks, 1);
    cr_assert_eq(p.n_free, 3);
    rows_distinct(&p, all, 3);
    /* reserving what is held already takes nothing */
    cr_assert_eq(kv_pool_reserve(&p, &a, 40), MI_OK);
    cr_assert_eq(kv_pool_reserve(&p, &a, 48), MI_OK);
    cr_assert_eq(p.n_free, 3);
    /* truncate gives back the blocks past the kept positions, keeps the rest in place */
    const int64_t row5 = kv_seq_row(&p, &b, 5);
    kv_pool_truncate(&p, &b, 10);
    cr_assert_eq(b.n_blocks, 1);
    cr_assert_eq(b.n_pos, 10);
    cr_assert_eq(kv_seq_row(&p, &b, 5), row5);
    cr_assert_eq(p.n_free, 5);
    kv_pool_release(&p, &c);
    cr_assert_eq(c.n_blocks, 0);
    cr_assert_eq(p.n_free, 6);
    /* released blocks are handed out again without clashing */
    cr_assert_eq(kv_pool_reserve(&p, &c, 96), MI_OK);
    cr_assert_eq(p.n_free, 0);
    rows_distinct(&p, all, 3);
    for (int i = 0; i < 3; i++) kv_pool_release(&p, all[i]);
    cr_assert_eq(p.n_free, 10, "every block back");
    kv_pool_free(&p);
}

Test(kv_pool, full_pool_refuses_one_sequence_only) {
    const mi_hparams hp = shape();
    mi_kv_pool p;
    cr_assert_eq(kv_pool_init(&p, &hp, MI_TYPE_F32, 8, 4, g_cpu), MI_OK, "%s", mi_errmsg());
    mi_kv_seq a = {0}, b = {0};
    cr_assert_eq(kv_pool_reserve(&p, &a, 20), MI_OK);   /* 3 blocks */
    cr_assert_eq(kv_pool_reserve(&p, &b, 8), MI_OK);    /* 1 block: the pool is full */
    const int64_t a_rows[3] = {kv_seq_row(&p, &a, 0), kv_seq_row(&p, &a, 9), kv_seq_row(&p, &a, 19)};
    mi_status st = kv_pool_reserve(&p, &b, 9);
    cr_assert_eq(st, MI_ERR_NOMEM);
    cr_assert(strstr(mi_errmsg(), "KV pool is full") && strstr(mi_errmsg(), "0 of 4 free"), "message: %s", mi_errmsg());
    cr_assert_eq(b.n_pos, 8, "the refused sequence is left as it was");
    cr_assert_eq(b.n_blocks, 1);
    cr_assert_eq(a.n_pos, 20, "its neighbour keeps its positions");
    cr_assert_eq(kv_seq_row(&p, &a, 0), a_rows[0]);
    cr_assert_eq(kv_seq_row(&p, &a, 9), a_rows[1]);
    cr_assert_eq(kv_seq_row(&p, &a, 19), a_rows[2]);
    /* all or nothing: a request for more than is free takes none */
    kv_pool_release(&p, &b);
    cr_assert_eq(kv_pool_reserve(&p, &b, 17), MI_ERR_NOMEM);
    cr_assert_eq(p.n_free, 1);
    cr_assert_eq(b.n_blocks, 0);
    cr_assert_eq(kv_pool_reserve(&p, &b, 8), MI_OK);
    kv_pool_release(&p, &a);
    kv_pool_release(&p, &b);
    cr_assert_eq(p.n_free, 4);
    kv_pool_free(&p);
}

Test(kv_pool, bad_arguments) {
    const mi_hparams hp = shape();
    mi_kv_pool p;
    cr_assert_eq(kv_pool_init(&p, &hp, MI_TYPE_F16, 0, 4, g_cpu), MI_ERR_INVALID);
    cr_assert_eq(kv_pool_init(&p, &hp, MI_TYPE_F16, 16, 0, g_cpu), MI_ERR_INVALID);
    cr_assert_eq(kv_pool_init(&p, &hp, MI_TYPE_F16, INT64_MAX / 2, 4, g_cpu), MI_ERR_INVALID);
    cr_assert_neq(kv_pool_init(&p, &hp, MI_TYPE_Q8_0, 16, 4, g_cpu), MI_OK, "quantized KV is not a pool type");
    cr_assert_eq(kv_pool_init(&p, &hp, MI_TYPE_F16, 16, 2, g_cpu), MI_OK);
    mi_kv_seq a = {0};
    cr_assert_eq(kv_pool_reserve(&p, &a, 20), MI_OK);
    cr_assert_eq(kv_pool_reserve(&p, &a, 10), MI_ERR_INVALID, "a reserve below what is held");
    cr_assert_eq(a.n_pos, 20);
    kv_pool_truncate(&p, &a, 30);   /* past the held positions: nothing */
    cr_assert_eq(a.n_pos, 20);
    kv_pool_release(&p, &a);
    kv_pool_free(&p);
}

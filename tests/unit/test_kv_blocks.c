/* test_kv_blocks.c - the KV block allocator: tables grow to cover positions,
 * all-or-nothing reservations, release returns blocks, no block is handed out
 * twice, double release is caught. */
#include "kv_blocks.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* 2 layers, 2 KV heads of 8 elements, bs positions per block */
static kern_kv_shape_t s_shape(int bs) {
    return (kern_kv_shape_t){2, 2, 8, bs};
}

START_TEST(reserve_release) {
    kern_kv_shape_t c = s_shape(16);
    kv_blocks_t *kv = kv_blocks_new(&c, KERN_F32, 8);
    ck_assert_ptr_nonnull(kv);
    ck_assert_int_eq(kv_blocks_total(kv), 8);
    ck_assert_int_eq(kv_blocks_block_size(kv), 16);
    ck_assert_int_eq(kv_blocks_pool(kv)->n_blocks, 8);
    ck_assert_int_eq(kv_blocks_needed(kv, 33), 3);
    kv_table_t a = {0}, b = {0};
    ck_assert_int_eq(kv_blocks_reserve(kv, &a, 1), 0);
    ck_assert_int_eq(a.n, 1);
    ck_assert_int_eq(kv_blocks_reserve(kv, &a, 16), 0); /* still one block */
    ck_assert_int_eq(a.n, 1);
    ck_assert_int_eq(kv_blocks_reserve(kv, &a, 80), 0);
    ck_assert_int_eq(a.n, 5);
    ck_assert_int_eq(kv_blocks_free_count(kv), 3);
    ck_assert_int_eq(kv_blocks_reserve(kv, &b, 64), -ENOSPC); /* 4 > 3: nothing taken */
    ck_assert_int_eq(b.n, 0);
    ck_assert_int_eq(kv_blocks_free_count(kv), 3);
    ck_assert_int_eq(kv_blocks_reserve(kv, &b, 48), 0);
    bool seen[8] = {0};
    for (int i = 0; i < a.n; i++) {
        ck_assert(!seen[a.blocks[i]]);
        seen[a.blocks[i]] = true;
    }
    for (int i = 0; i < b.n; i++) {
        ck_assert(!seen[b.blocks[i]]);
        seen[b.blocks[i]] = true;
    }
    ck_assert_int_eq(kv_blocks_free_count(kv), 0);
    ck_assert_int_eq(kv_blocks_release(kv, &a), 0);
    ck_assert_int_eq(a.n, 0);
    ck_assert_ptr_null(a.blocks);
    ck_assert_int_eq(kv_blocks_release(kv, &a), 0); /* safe twice */
    ck_assert_int_eq(kv_blocks_free_count(kv), 5);
    ck_assert_int_eq(kv_blocks_release(kv, &b), 0);
    ck_assert_int_eq(kv_blocks_free_count(kv), 8);
    kv_blocks_destroy(&kv);
    kv_blocks_destroy(&kv);
    ck_assert_ptr_null(kv);
}
END_TEST

START_TEST(double_free_caught) {
    kern_kv_shape_t c = s_shape(4);
    kv_blocks_t *kv = kv_blocks_new(&c, KERN_F16, 4);
    kv_table_t a = {0};
    ck_assert_int_eq(kv_blocks_reserve(kv, &a, 8), 0);
    kv_table_t copy = {0};
    ck_assert_int_eq(kv_blocks_reserve(kv, &copy, 0), 0);
    copy.blocks = malloc(2 * sizeof *copy.blocks);
    memcpy(copy.blocks, a.blocks, 2 * sizeof *copy.blocks);
    copy.n = copy.cap = 2;
    ck_assert_int_eq(kv_blocks_release(kv, &a), 0);
    ck_assert_int_eq(kv_blocks_release(kv, &copy), 2);
    ck_assert_int_eq(kv_blocks_free_count(kv), 4);
    c.block_size = 0;
    ck_assert_ptr_null(kv_blocks_new(&c, KERN_F32, 4));
    kv_blocks_destroy(&kv);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("kv_blocks");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, reserve_release);
    tcase_add_test(tc, double_free_caught);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

/* test_pool.c - the fork-join pool: every thread runs, barriers order phases,
 * splits cover ranges exactly. */
#include "base_pool.h"
#include "test_util.h"

#include <check.h>
#include <stdatomic.h>

typedef struct {
    base_pool_t *pool;
    atomic_int hits[8];
    int phase_a[8];
    int sums[8];
} job_t;

static void job(void *arg, int ith, int nth) {
    job_t *j = arg;
    atomic_fetch_add(&j->hits[ith], 1);
    for (int round = 0; round < 20; round++) {
        j->phase_a[ith] = round;
        base_pool_barrier(j->pool);
        int s = 0; /* every thread sees every other's write of this round */
        for (int t = 0; t < nth; t++)
            s += j->phase_a[t] == round;
        j->sums[ith] += s;
        base_pool_barrier(j->pool);
    }
}

START_TEST(run_and_barrier) {
    for (int n = 1; n <= 4; n++) {
        base_pool_t *p = base_pool_new(n);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(base_pool_size(p), n);
        job_t j = {.pool = p};
        for (int r = 0; r < 20; r++)
            base_pool_run(p, job, &j);
        for (int t = 0; t < n; t++) {
            ck_assert_int_eq(atomic_load(&j.hits[t]), 20);
            ck_assert_int_eq(j.sums[t], 20 * 20 * n);
        }
        base_pool_destroy(&p);
        ck_assert_ptr_null(p);
        base_pool_destroy(&p);
    }
}
END_TEST

START_TEST(split_covers) {
    int ns[] = {0, 1, 7, 16, 100, 576, 49152};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (int nth = 1; nth <= 5; nth++)
            for (int align = 1; align <= 16; align *= 4) {
                int next = 0;
                for (int t = 0; t < nth; t++) {
                    int lo, hi;
                    base_pool_split(ns[i], align, t, nth, &lo, &hi);
                    ck_assert_int_eq(lo, next);
                    ck_assert_int_ge(hi, lo);
                    ck_assert(lo % align == 0 || lo == ns[i]);
                    next = hi;
                }
                ck_assert_int_eq(next, ns[i]);
            }
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, run_and_barrier);
    tcase_add_test(tc, split_covers);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

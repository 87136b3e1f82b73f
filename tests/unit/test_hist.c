/* test_hist.c - base/base_hist: the 1-2-5 bounds of a range, observations against a
 * plain sorted-array reference, and the export as cumulative counters (names, order,
 * sum and count). */
#include "base_hist.h"
#include "test_util.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(bounds_are_1_2_5) {
    base_hist_t *h = base_hist_new("ttft_us", 1000, 60000000);
    ck_assert_ptr_nonnull(h);
    int64_t want[] = {1000,   2000,    5000,    10000,   20000,    50000,    100000,  200000,
                      500000, 1000000, 2000000, 5000000, 10000000, 20000000, 50000000};
    int n = (int)(sizeof want / sizeof want[0]);
    ck_assert_int_eq(base_hist_n_bounds(h), n);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(base_hist_bound(h, i), want[i]);
    base_hist_destroy(&h);
    base_hist_destroy(&h); /* safe twice */
    ck_assert_ptr_null(h);

    h = base_hist_new("batch", 3, 4); /* no 1-2-5 value inside: one bucket at hi */
    ck_assert_int_eq(base_hist_n_bounds(h), 1);
    ck_assert_int_eq(base_hist_bound(h, 0), 4);
    base_hist_destroy(&h);
    h = base_hist_new("wide", 1, INT64_MAX); /* 1 .. 5e18: 19 decades, too many bounds */
    ck_assert_ptr_null(h);
    h = base_hist_new("widest_ok", 1, 5000000000000ll); /* 1 .. 5e12: 39 bounds */
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(base_hist_n_bounds(h), 39);
    base_hist_destroy(&h);
}
END_TEST

START_TEST(bad_arguments) {
    ck_assert_ptr_null(base_hist_new("x", 0, 10));
    ck_assert_ptr_null(base_hist_new("x", 10, 5));
    ck_assert_ptr_null(base_hist_new("", 1, 10));
    ck_assert_ptr_null(base_hist_new(NULL, 1, 10));
    char long_name[BASE_HIST_NAME + 1];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[BASE_HIST_NAME] = 0;
    ck_assert_ptr_null(base_hist_new(long_name, 1, 10));
    base_hist_observe(NULL, 5); /* an unset histogram observes nothing */
}
END_TEST

START_TEST(observe_matches_reference) {
    base_hist_t *h = base_hist_new("v", 10, 100000);
    uint64_t rng = 11;
    int64_t sum = 0, n = 20000;
    static int64_t vals[20000];
    for (int i = 0; i < n; i++) {
        int64_t v = (int64_t)(test_rand_u64(&rng) % 300000) - 10; /* some < 0, some > max */
        vals[i] = v;
        base_hist_observe(h, v);
        sum += v < 0 ? 0 : v;
    }
    ck_assert_int_eq(base_hist_count(h), n);
    ck_assert_int_eq(base_hist_sum(h), sum);
    for (int b = 0; b < base_hist_n_bounds(h); b++) {
        int64_t le = 0;
        for (int i = 0; i < n; i++)
            le += (vals[i] < 0 ? 0 : vals[i]) <= base_hist_bound(h, b);
        ck_assert_int_eq(base_hist_cumulative(h, b), le);
    }
    /* a value on a bound belongs to that bound's bucket */
    base_hist_t *e = base_hist_new("edge", 1, 10);
    base_hist_observe(e, 2);
    ck_assert_int_eq(base_hist_cumulative(e, 0), 0); /* le 1 */
    ck_assert_int_eq(base_hist_cumulative(e, 1), 1); /* le 2 */
    base_hist_destroy(&e);
    base_hist_destroy(&h);
}
END_TEST

typedef struct {
    char names[64][96];
    int64_t vals[64];
    int n;
} s_sink_t;

static void s_put(void *user, const char *name, int64_t value) {
    s_sink_t *s = user;
    ck_assert_int_lt(s->n, 64);
    snprintf(s->names[s->n], sizeof s->names[s->n], "%s", name);
    s->vals[s->n++] = value;
}

START_TEST(export_is_cumulative) {
    base_hist_t *h = base_hist_new("batch_size", 1, 10); /* bounds 1, 2, 5, 10 */
    int64_t obs[] = {1, 1, 3, 7, 50};
    for (int i = 0; i < 5; i++)
        base_hist_observe(h, obs[i]);
    s_sink_t s = {0};
    base_hist_export(h, s_put, &s);
    const char *names[] = {"batch_size.bucket.le_1", "batch_size.bucket.le_2",
                           "batch_size.bucket.le_5", "batch_size.bucket.le_10",
                           "batch_size.sum",         "batch_size.count"};
    int64_t vals[] = {2, 2, 3, 4, 62, 5};
    ck_assert_int_eq(s.n, 6);
    for (int i = 0; i < 6; i++) {
        ck_assert_str_eq(s.names[i], names[i]);
        ck_assert_int_eq(s.vals[i], vals[i]);
    }
    base_hist_destroy(&h);
    base_hist_export(NULL, s_put, &s); /* nothing */
    ck_assert_int_eq(s.n, 6);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("hist");
    TCase *tc = tcase_create("hist");
    tcase_add_test(tc, bounds_are_1_2_5);
    tcase_add_test(tc, bad_arguments);
    tcase_add_test(tc, observe_matches_reference);
    tcase_add_test(tc, export_is_cumulative);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

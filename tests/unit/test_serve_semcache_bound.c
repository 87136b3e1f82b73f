/* test_serve_semcache_bound.c - the semantic cache's calibrated threshold
 * (serve/serve_semcache_bound.h).
 *
 * Clopper-Pearson bounds: the closed form at k = 0, and at k > 0 the binomial tail at the
 * bound equals alpha (summed here independently, in long double).  The threshold on
 * synthetic traffic whose correctness is known (P(correct | s) a logistic curve): with
 * too few observations nothing passes; with enough, the wrong-hit rate of fresh requests
 * at or above the threshold stays below delta in (nearly) every one of 40 seeded runs --
 * the guarantee is 1 - alpha = 95 % -- and a smaller delta never gives a lower threshold;
 * all-correct traffic passes low, all-wrong traffic never. */
#include "serve_semcache_bound.h"
#include "test_util.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>

static long double s_tail(int k, int n, long double p) {
    long double sum = 0;
    for (int i = 0; i <= k; i++) {
        long double c = 1;
        for (int j = 0; j < i; j++)
            c = c * (n - j) / (j + 1);
        sum += c * powl(p, i) * powl(1 - p, n - i);
    }
    return sum;
}

START_TEST(test_cp_upper) {
    ck_assert(fabs(serve_semcache_cp_upper(0, 10, 0.05) - (1 - pow(0.05, 0.1))) < 1e-12);
    ck_assert(fabs(serve_semcache_cp_upper(0, 299, 0.05) - 0.009969) < 1e-5);
    ck_assert(serve_semcache_cp_upper(3, 3, 0.05) == 1);
    ck_assert(serve_semcache_cp_upper(0, 0, 0.05) == 1);
    const int cases[][2] = {{1, 20}, {5, 100}, {12, 300}, {40, 1000}};
    for (int i = 0; i < 4; i++) {
        int k = cases[i][0], n = cases[i][1];
        double u = serve_semcache_cp_upper(k, n, 0.05);
        ck_assert(u > (double)k / n);
        ck_assert_msg(fabsl(s_tail(k, n, u) - 0.05L) < 1e-6, "k %d n %d: tail at %g is %Lg", k, n,
                      u, s_tail(k, n, u));
    }
}
END_TEST

/* Correct with probability 1 / (1 + e^(-40 (s - 0.85))): 50 % at 0.85, 98 % at 0.95. */
static bool s_correct(uint64_t *rng, float s) {
    double p = 1 / (1 + exp(-40 * (s - 0.85)));
    return (double)(test_rand_u64(rng) % 1000000) / 1e6 < p;
}

START_TEST(test_threshold_holds) {
    int over = 0, none = 0, runs = 40;
    double sum_t = 0;
    for (int run = 0; run < runs; run++) {
        uint64_t rng = 1000 + (uint64_t)run;
        serve_semcache_bound_t *b = serve_semcache_bound_new(4096, 50, 0.05);
        for (int i = 0; i < 40; i++) {
            float s = test_rand_f32(&rng, 0.5f, 1.0f);
            serve_semcache_bound_observe(b, s, s_correct(&rng, s));
        }
        if (run == 0) /* 40 observations: not enough anywhere */
            ck_assert(serve_semcache_bound_threshold(b, 0.05) > 1);
        for (int i = 0; i < 2960; i++) {
            float s = test_rand_f32(&rng, 0.5f, 1.0f);
            serve_semcache_bound_observe(b, s, s_correct(&rng, s));
        }
        double t = serve_semcache_bound_threshold(b, 0.05);
        ck_assert_msg(t > 0.85, "run %d: threshold %g", run, t); /* above the 50 % point */
        if (t > 1) { /* none passed in this run: allowed, but rarely (counted below) */
            none++;
            serve_semcache_bound_destroy(&b);
            continue;
        }
        ck_assert(serve_semcache_bound_threshold(b, 0.02) >= t); /* stricter: no lower */
        sum_t += t;
        /* fresh traffic: the wrong rate among hits */
        int hits = 0, wrong = 0;
        for (int i = 0; i < 20000; i++) {
            float s = test_rand_f32(&rng, 0.5f, 1.0f);
            if (s >= t) {
                hits++;
                wrong += !s_correct(&rng, s);
            }
        }
        ck_assert_int_gt(hits, 0);
        over += (double)wrong / hits > 0.05;
        serve_semcache_bound_destroy(&b);
    }
    /* at most alpha of the runs may exceed delta; 40 x 5 % = 2 expected at worst */
    ck_assert_msg(over <= 4, "%d of %d runs exceeded delta (mean threshold %.3f)", over, runs,
                  sum_t / (runs - none));
    ck_assert_msg(none <= 4, "%d of %d runs found no threshold", none, runs);
}
END_TEST

START_TEST(test_threshold_extremes) {
    uint64_t rng = 5;
    serve_semcache_bound_t *good = serve_semcache_bound_new(1000, 50, 0.05);
    serve_semcache_bound_t *bad = serve_semcache_bound_new(1000, 50, 0.05);
    for (int i = 0; i < 1000; i++) {
        float s = test_rand_f32(&rng, 0.6f, 1.0f);
        serve_semcache_bound_observe(good, s, true);
        serve_semcache_bound_observe(bad, s, false);
    }
    ck_assert(serve_semcache_bound_threshold(good, 0.01) <= 0.61);
    ck_assert(serve_semcache_bound_threshold(bad, 0.5) > 1);
    int wrong;
    ck_assert_int_eq(serve_semcache_bound_count(bad, &wrong), 1000);
    ck_assert_int_eq(wrong, 1000);
    /* the ring keeps the last 1000: 1000 correct ones replace the wrong ones */
    for (int i = 0; i < 1000; i++)
        serve_semcache_bound_observe(bad, test_rand_f32(&rng, 0.6f, 1.0f), true);
    ck_assert(serve_semcache_bound_threshold(bad, 0.01) <= 0.61);
    ck_assert(serve_semcache_bound_threshold(bad, 0) > 1); /* delta outside (0, 1) */
    ck_assert_ptr_null(serve_semcache_bound_new(0, 1, 0.05));
    ck_assert_ptr_null(serve_semcache_bound_new(10, 1, 1.5));
    serve_semcache_bound_destroy(&good);
    serve_semcache_bound_destroy(&bad);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("semcache_bound");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cp_upper);
    tcase_add_test(tc, test_threshold_holds);
    tcase_add_test(tc, test_threshold_extremes);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)

/* test_serve_parked.c - serve/serve_parked: the requests a worker holds back while their
 * prompt's KV blocks come up from T1/T2.  A request is parked under its id with a
 * deadline; the tier manager's "done" takes it out by id, and what is still there at its
 * deadline comes out of serve_parked_expired, the earliest deadline first.  A request
 * taken out early is never woken by its old deadline, even when it is parked again. */
#include "serve_parked.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>

START_TEST(done_before_the_deadline) {
    serve_parked_t *p = serve_parked_new();
    int a = 1, b = 2; /* stand-ins for the worker's requests */
    ck_assert_int_eq(serve_parked_add(p, 7, &a, 1000), 0);
    ck_assert_int_eq(serve_parked_add(p, 8, &b, 2000), 0);
    ck_assert_int_eq(serve_parked_add(p, 7, &b, 3000), -EEXIST); /* a duplicated frame */
    ck_assert_int_eq(serve_parked_count(p), 2);
    ck_assert_ptr_eq(serve_parked_find(p, 8), &b);
    ck_assert_ptr_null(serve_parked_find(p, 9));
    /* the tier manager is done promoting for 8: it runs now */
    ck_assert_ptr_eq(serve_parked_take(p, 8), &b);
    ck_assert_ptr_null(serve_parked_take(p, 8));
    ck_assert_int_eq(serve_parked_count(p), 1);
    /* nothing is due before 1000; then 7 is, and only 7 */
    ck_assert_ptr_null(serve_parked_expired(p, 999));
    ck_assert_ptr_eq(serve_parked_expired(p, 5000), &a);
    ck_assert_ptr_null(serve_parked_expired(p, 5000));
    ck_assert_int_eq(serve_parked_count(p), 0);
    serve_parked_destroy(&p);
    serve_parked_destroy(&p); /* safe twice */
    ck_assert_ptr_null(p);
}
END_TEST

START_TEST(earliest_deadline_first) {
    serve_parked_t *p = serve_parked_new();
    int r[100];
    uint64_t state = 5;
    for (int i = 0; i < 100; i++) /* deadlines in no order */
        ck_assert_int_eq(serve_parked_add(p, (uint64_t)i, &r[i], test_rand_u64(&state) % 10000), 0);
    for (int i = 0; i < 100; i += 3) /* a third are done early */
        ck_assert_ptr_eq(serve_parked_take(p, (uint64_t)i), &r[i]);
    uint64_t last = 0;
    int n = 0;
    for (uint64_t now = 0; now <= 10000; now += 100) {
        int *q;
        while ((q = serve_parked_expired(p, now))) {
            int i = (int)(q - r);
            ck_assert_int_ne(i % 3, 0); /* never one taken out */
            state = 5;                  /* its deadline, from the same sequence */
            uint64_t d = 0;
            for (int k = 0; k <= i; k++)
                d = test_rand_u64(&state) % 10000;
            ck_assert_uint_le(d, now);
            ck_assert_uint_ge(d, last);
            last = d;
            n++;
        }
    }
    ck_assert_int_eq(n, 66);
    serve_parked_destroy(&p);
}
END_TEST

START_TEST(parked_again_keeps_its_new_deadline) {
    serve_parked_t *p = serve_parked_new();
    int first = 1, again = 2;
    ck_assert_int_eq(serve_parked_add(p, 42, &first, 100), 0);
    ck_assert_ptr_eq(serve_parked_take(p, 42), &first);        /* promoted in time, ran, ... */
    ck_assert_int_eq(serve_parked_add(p, 42, &again, 900), 0); /* ... and came back */
    ck_assert_ptr_null(serve_parked_expired(p, 500));          /* the old deadline is gone */
    ck_assert_ptr_eq(serve_parked_expired(p, 900), &again);
    serve_parked_destroy(&p);
}
END_TEST

START_TEST(pop_empties_it) {
    serve_parked_t *p = serve_parked_new();
    int r[20];
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(serve_parked_add(p, 1000 + (uint64_t)i, &r[i], 50), 0);
    int n = 0;
    while (serve_parked_pop(p)) /* a worker stopping frees them all */
        n++;
    ck_assert_int_eq(n, 20);
    ck_assert_int_eq(serve_parked_count(p), 0);
    ck_assert_ptr_null(serve_parked_expired(p, 1000));
    serve_parked_destroy(&p);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_parked");
    TCase *tc = tcase_create("parked");
    tcase_add_test(tc, done_before_the_deadline);
    tcase_add_test(tc, earliest_deadline_first);
    tcase_add_test(tc, parked_again_keeps_its_new_deadline);
    tcase_add_test(tc, pop_empties_it);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)

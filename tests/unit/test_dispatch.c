/* test_dispatch.c - least-loaded dispatch: pending load between reports,
 * reports replacing estimates, dead workers skipped and their requests handed
 * back, a draining worker (planned restart) skipped while another is alive and
 * drained once it holds nothing, the rid table growing and shrinking. */
#include "router_dispatch.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>

START_TEST(least_loaded) {
    router_dispatch_t *d = router_dispatch_new(3);
    ck_assert_ptr_nonnull(d);
    /* equal loads spread by request count: 0, 1, 2 */
    ck_assert_int_eq(router_dispatch_assign(d, 1, 100), 0);
    ck_assert_int_eq(router_dispatch_assign(d, 2, 100), 1);
    ck_assert_int_eq(router_dispatch_assign(d, 3, 100), 2);
    ck_assert_int_eq(router_dispatch_assign(d, 3, 100), -EEXIST);
    /* worker 1 reports it finished its work: it is the least loaded */
    ck_assert_int_eq(router_dispatch_report(d, 1, 0, 10), 0);
    ck_assert_int_eq(router_dispatch_assign(d, 4, 50), 1);
    ck_assert_int_eq(router_dispatch_load(d, 1), 60);
    ck_assert_int_eq(router_dispatch_worker_of(d, 4), 1);
    ck_assert_int_eq(router_dispatch_finish(d, 4), 1);
    ck_assert_int_eq(router_dispatch_finish(d, 4), -ENOENT);
    ck_assert_int_eq(router_dispatch_worker_of(d, 4), -ENOENT);
    ck_assert_int_eq(router_dispatch_report(d, 7, 0, 0), -EINVAL);
    router_dispatch_destroy(&d);
    router_dispatch_destroy(&d);
    ck_assert_ptr_null(router_dispatch_new(0));
}
END_TEST

START_TEST(dead_worker) {
    router_dispatch_t *d = router_dispatch_new(2);
    for (uint64_t r = 1; r <= 10; r++)
        router_dispatch_assign(d, r, 10);
    ck_assert_int_eq(router_dispatch_count(d, 0), 5);
    uint64_t rids[16];
    ck_assert_int_eq(router_dispatch_down(d, 0, rids, 16), 5);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(rids[i] % 2, 1); /* odd rids went to worker 0 */
    ck_assert(!router_dispatch_alive(d, 0));
    for (uint64_t r = 11; r <= 14; r++)
        ck_assert_int_eq(router_dispatch_assign(d, r, 10), 1);
    ck_assert_int_eq(router_dispatch_down(d, 1, NULL, 0), 9);
    ck_assert_int_eq(router_dispatch_assign(d, 20, 10), -EHOSTDOWN);
    /* a load report brings a restarted worker back */
    router_dispatch_report(d, 0, 0, 0);
    ck_assert_int_eq(router_dispatch_assign(d, 20, 10), 0);
    router_dispatch_destroy(&d);
}
END_TEST

START_TEST(draining_worker) {
    router_dispatch_t *d = router_dispatch_new(2);
    ck_assert_int_eq(router_dispatch_assign(d, 1, 10), 0);
    ck_assert_int_eq(router_dispatch_set_draining(d, 0, true), 0);
    ck_assert_int_eq(router_dispatch_set_draining(d, 2, true), -EINVAL);
    ck_assert(router_dispatch_draining(d, 0));
    /* new requests go to the other worker, however loaded */
    router_dispatch_report(d, 1, 5000, 5000);
    for (uint64_t r = 2; r <= 5; r++)
        ck_assert_int_eq(router_dispatch_assign(d, r, 10), 1);
    /* not drained while rid 1 runs, nor while its last report still shows work */
    ck_assert(!router_dispatch_drained(d, 0));
    ck_assert_int_eq(router_dispatch_finish(d, 1), 0);
    ck_assert(!router_dispatch_drained(d, 0)); /* its pending 10 tokens: no report yet */
    router_dispatch_report(d, 0, 0, 0);
    ck_assert(router_dispatch_drained(d, 0));
    ck_assert(!router_dispatch_drained(d, 1)); /* not draining */
    /* with the other worker down, the draining one is all there is: it takes requests */
    router_dispatch_down(d, 1, NULL, 0);
    ck_assert_int_eq(router_dispatch_assign(d, 6, 10), 0);
    /* its own down (the restart) ends the drain */
    router_dispatch_down(d, 0, NULL, 0);
    ck_assert(!router_dispatch_draining(d, 0));
    router_dispatch_report(d, 0, 0, 0);
    router_dispatch_report(d, 1, 0, 0);
    ck_assert_int_eq(router_dispatch_assign(d, 7, 10), 0);
    router_dispatch_destroy(&d);
}
END_TEST

START_TEST(many_rids) {
    router_dispatch_t *d = router_dispatch_new(4);
    for (int round = 0; round < 5; round++) {
        for (uint64_t r = 1; r <= 5000; r++)
            ck_assert_int_ge(router_dispatch_assign(d, r * 7919 + round, 1), 0);
        for (uint64_t r = 1; r <= 5000; r++)
            ck_assert_int_ge(router_dispatch_finish(d, r * 7919 + round), 0);
    }
    for (int w = 0; w < 4; w++)
        ck_assert_int_eq(router_dispatch_count(d, w), 0);
    router_dispatch_destroy(&d);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("dispatch");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, least_loaded);
    tcase_add_test(tc, dead_worker);
    tcase_add_test(tc, draining_worker);
    tcase_add_test(tc, many_rids);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

/* test_dispatch.c - least-loaded dispatch: pending load between reports,
 * reports replacing estimates, dead workers skipped and their requests handed
 * back, a draining worker (planned restart) skipped while another is alive and
 * drained once it holds nothing, the rid table growing and shrinking; a cached prefix
 * weighed against load (router_dispatch_assign_bonus) and the prefix sets that give it,
 * fed by real encoded batches (serve_prefix over kv_events). */
#include "kv_events.h"
#include "kv_hash.h"
#include "router_dispatch.h"
#include "serve_prefix.h"
#include "test_util.h"

#include <msgpack.h>

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

START_TEST(cached_prefix_against_load) {
    router_dispatch_t *d = router_dispatch_new(3);
    ck_assert_int_eq(router_dispatch_report(d, 0, 100, 0), 0);
    ck_assert_int_eq(router_dispatch_report(d, 1, 300, 0), 0);
    ck_assert_int_eq(router_dispatch_report(d, 2, 200, 0), 0);
    int64_t none[3] = {0, 0, 0}, small[3] = {0, 150, 0}, big[3] = {0, 250, 0};
    ck_assert_int_eq(router_dispatch_assign_bonus(d, 1, 400, none), 0);
    ck_assert_int_eq(router_dispatch_load(d, 0), 500);
    /* worker1 holds 150 of the prompt: 300 - 150 = 150 beats 200 (worker2) and 500 */
    ck_assert_int_eq(router_dispatch_assign_bonus(d, 2, 400, small), 1);
    ck_assert_int_eq(router_dispatch_load(d, 1), 300 + 400 - 150); /* only the new work */
    /* worker1 is at 550 now: a 250-token prefix there (300) loses to worker2 (200) */
    ck_assert_int_eq(router_dispatch_assign_bonus(d, 3, 400, big), 2);
    ck_assert_int_eq(router_dispatch_assign_bonus(d, 4, 10, NULL), 0); /* 500 < 550, 600 */
    router_dispatch_destroy(&d);
}
END_TEST

/* Flush ev and apply the batch to p as worker w's; its sequence number. */
static int64_t s_feed(serve_prefix_t *p, int w, kv_events_t *ev) {
    int64_t q;
    const uint8_t *data;
    size_t n;
    ck_assert_int_eq(kv_events_flush(ev, 1.0, &q, &data, &n), 1);
    ck_assert_int_eq(serve_prefix_apply(p, w, q, data, n), q + 1);
    return q;
}

START_TEST(prefix_sets_from_events) {
    enum { BS = 4, NT = 14 };
    int32_t t[NT] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    uint64_t h[3];
    ck_assert_int_eq(kv_hash_chain(t, NT, BS, h), 3);
    kv_events_config_t c = {BS, 8, 0};
    kv_events_t *ev = kv_events_new(&c);
    ck_assert_ptr_nonnull(ev);
    serve_prefix_t *p = serve_prefix_new(2);
    int64_t cached[2];
    ck_assert_int_eq(serve_prefix_match(p, t, NT, cached), 0); /* no block size yet */
    /* worker 1 stores the first three blocks (one chained BlockStored) */
    kv_events_cleared(ev);
    for (int b = 0; b < 3; b++)
        kv_events_stored(ev, KV_EVENTS_T0, h[b], b ? h[b - 1] : 0, t + b * BS);
    ck_assert_int_eq(s_feed(p, 1, ev), 0);
    ck_assert_int_eq(serve_prefix_block_size(p), BS);
    ck_assert_int_eq(serve_prefix_match(p, t, NT, cached), 12);
    ck_assert(cached[0] == 0 && cached[1] == 12);
    ck_assert_int_eq(serve_prefix_match(p, t, 9, cached), 8); /* a shorter prompt: 2 blocks */
    /* its second block goes: only the first still counts (a chain from the start) */
    kv_events_removed(ev, KV_EVENTS_T0, h[1]);
    kv_events_stored(ev, KV_EVENTS_T1, h[1], h[0], t + BS); /* T1: not counted */
    ck_assert_int_eq(s_feed(p, 1, ev), 1);
    ck_assert_int_eq(serve_prefix_match(p, t, NT, cached), 4);
    /* a replayed duplicate is ignored; a batch past a gap is applied and the gap counted */
    ck_assert_int_eq(serve_prefix_apply(p, 1, 0, (const uint8_t *)"\x90", 1), 2);
    kv_events_cleared(ev);
    int64_t q;
    const uint8_t *body;
    size_t len;
    ck_assert_int_eq(kv_events_flush(ev, 3.0, &q, &body, &len), 1);
    ck_assert_int_eq(serve_prefix_apply(p, 1, 5, body, len), 6); /* as if 2..4 were lost */
    ck_assert_int_eq(serve_prefix_stats(p).gaps, 3);
    ck_assert_int_eq(serve_prefix_match(p, t, NT, cached), 0); /* AllBlocksCleared */
    /* what does not decode is skipped and counted */
    ck_assert_int_eq(serve_prefix_apply(p, 0, 0, (const uint8_t *)"\xc1", 1), -EPROTO);
    ck_assert_int_eq(serve_prefix_apply(p, 2, 0, body, len), -EINVAL);
    ck_assert_int_eq(serve_prefix_stats(p).bad, 1);
    serve_prefix_forget(p, 1);
    ck_assert_int_eq(serve_prefix_next_seq(p, 1), 0);
    serve_prefix_destroy(&p);
    kv_events_destroy(&ev);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("dispatch");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, least_loaded);
    tcase_add_test(tc, dead_worker);
    tcase_add_test(tc, draining_worker);
    tcase_add_test(tc, many_rids);
    tcase_add_test(tc, cached_prefix_against_load);
    tcase_add_test(tc, prefix_sets_from_events);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

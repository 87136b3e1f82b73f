/* test_serve_metrics.c - serve/serve_metrics: the histograms the frontend (per request)
 * and the workers (per step) keep, observed and exported as plain counters, with no
 * actor and no socket: export hands every counter to a callback, here a small table. */
#include "serve_metrics.h"
#include "test_util.h"

#include <check.h>
#include <string.h>

/* What export produced: name -> value. */
typedef struct {
    char name[256][48];
    int64_t value[256];
    int n;
} s_counters_t;

static void s_put(void *user, const char *name, int64_t value) {
    s_counters_t *c = user;
    ck_assert_int_lt(c->n, 256);
    snprintf(c->name[c->n], sizeof c->name[0], "%s", name);
    c->value[c->n++] = value;
}

/* The value of name, or -1 when export did not give it. */
static int64_t s_get(const s_counters_t *c, const char *name) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->name[i], name))
            return c->value[i];
    return -1;
}

/* A done of a request: tokens generated, ttft and decode times. */
static msg_done_t s_done(int completion, double ttft_ms, double decode_ms) {
    msg_done_t d;
    msg_done_init(&d);
    d.usage.completion_tokens = completion;
    d.timings.ttft_ms = ttft_ms;
    d.timings.decode_ms = decode_ms;
    d.timings.queued_ms = 2.0;
    return d;
}

START_TEST(request_ttft_tpot_queue) {
    serve_metrics_req_t *h = serve_metrics_req_new();
    ck_assert_ptr_nonnull(h);
    msg_done_t d = s_done(11, 40.0, 100.0); /* 10 ms per token after the first */
    serve_metrics_req_observe(h, &d);
    s_counters_t c = {0};
    serve_metrics_req_export(h, s_put, &c);
    ck_assert_int_eq(s_get(&c, "ttft_us.count"), 1);
    ck_assert_int_eq(s_get(&c, "ttft_us.sum"), 40000);
    ck_assert_int_eq(s_get(&c, "latency_us.sum"), 140000); /* ttft + decode */
    ck_assert_int_eq(s_get(&c, "tpot_us.sum"), 10000);
    ck_assert_int_eq(s_get(&c, "queue_us.sum"), 2000);
    ck_assert_int_eq(s_get(&c, "draft_accept_pct.count"), 0); /* no drafts: not observed */
    serve_metrics_req_destroy(&h);
    ck_assert_ptr_null(h);
    serve_metrics_req_destroy(&h); /* safe twice */
}
END_TEST

/* A request that produced no token has no TTFT and no latency; one token has no TPOT. */
START_TEST(request_without_tokens) {
    serve_metrics_req_t *h = serve_metrics_req_new();
    msg_done_t none = s_done(0, 0, 0), one = s_done(1, 25.0, 0);
    one.usage.draft_proposed = 4;
    one.usage.draft_accepted = 3;
    serve_metrics_req_observe(h, &none);
    serve_metrics_req_observe(h, &one);
    s_counters_t c = {0};
    serve_metrics_req_export(h, s_put, &c);
    ck_assert_int_eq(s_get(&c, "ttft_us.count"), 1);
    ck_assert_int_eq(s_get(&c, "latency_us.count"), 1);
    ck_assert_int_eq(s_get(&c, "tpot_us.count"), 0);
    ck_assert_int_eq(s_get(&c, "queue_us.count"), 2);
    ck_assert_int_eq(s_get(&c, "draft_accept_pct.sum"), 75);
    serve_metrics_req_destroy(&h);
}
END_TEST

START_TEST(step_histograms) {
    serve_metrics_step_t *h = serve_metrics_step_new();
    serve_metrics_step_observe(h, 3, 40);
    serve_metrics_step_observe(h, 8, 8);
    serve_metrics_step_prefix(h, 0);
    serve_metrics_step_prefix(h, 32);
    s_counters_t c = {0};
    serve_metrics_step_export(h, s_put, &c);
    ck_assert_int_eq(s_get(&c, "batch_size.count"), 2);
    ck_assert_int_eq(s_get(&c, "batch_size.bucket.le_5"), 1);
    ck_assert_int_eq(s_get(&c, "batch_size.bucket.le_10"), 2);
    ck_assert_int_eq(s_get(&c, "step_tokens.sum"), 48);
    ck_assert_int_eq(s_get(&c, "prefix_hit_tokens.bucket.le_1"), 1);
    ck_assert_int_eq(s_get(&c, "prefix_hit_tokens.count"), 2);
    serve_metrics_step_destroy(&h);
}
END_TEST

/* Out of memory at new gives NULL: every call then does nothing. */
START_TEST(null_does_nothing) {
    s_counters_t c = {0};
    serve_metrics_req_observe(NULL, NULL);
    serve_metrics_req_export(NULL, s_put, &c);
    serve_metrics_step_observe(NULL, 1, 1);
    serve_metrics_step_prefix(NULL, 1);
    serve_metrics_step_export(NULL, s_put, &c);
    ck_assert_int_eq(c.n, 0);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_metrics");
    TCase *tc = tcase_create("serve_metrics");
    tcase_add_test(tc, request_ttft_tpot_queue);
    tcase_add_test(tc, request_without_tokens);
    tcase_add_test(tc, step_histograms);
    tcase_add_test(tc, null_does_nothing);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)

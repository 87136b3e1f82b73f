/* test_metrics.c - serve/serve_prom: the Prometheus text of a stats_reply's counters
 * (families by actor kind with an actor label, counters _total, gauges by name, units as
 * seconds, counter triples as histograms with +Inf = count), and the request histograms
 * the frontend keeps (serve/serve_metrics; its own suite: test_serve_metrics.c), rendered
 * end to end. */
#include "actor_counters.h"
#include "serve_metrics.h"
#include "serve_prom.h"
#include "test_util.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static char *s_render(const msg_counter_t *c, int n) {
    char *out;
    size_t len;
    ck_assert_int_eq(serve_prom_render(c, n, &out, &len), 0);
    ck_assert_uint_eq(strlen(out), len);
    return out;
}

START_TEST(render_counters_gauges_units) {
    msg_counter_t c[] = {
        {"worker1.kv.free_blocks", 7},   {"worker0.kv.free_blocks", 9}, {"frontend.requests", 12},
        {"frontend.requests.active", 2}, {"draft.time.ngram_us", 1500}, {"router.load.worker0", 3},
    };
    char *out = s_render(c, 6);
    const char *want =
        "# HELP strata_draft_time_ngram_seconds_total from the stats counter draft.time.ngram_us\n"
        "# TYPE strata_draft_time_ngram_seconds_total counter\n"
        "strata_draft_time_ngram_seconds_total{actor=\"draft\"} 0.0015\n"
        "# HELP strata_frontend_requests_active from the stats counter frontend.requests.active\n"
        "# TYPE strata_frontend_requests_active gauge\n"
        "strata_frontend_requests_active{actor=\"frontend\"} 2\n"
        "# HELP strata_frontend_requests_total from the stats counter frontend.requests\n"
        "# TYPE strata_frontend_requests_total counter\n"
        "strata_frontend_requests_total{actor=\"frontend\"} 12\n"
        "# HELP strata_router_load_worker0 from the stats counter router.load.worker0\n"
        "# TYPE strata_router_load_worker0 gauge\n"
        "strata_router_load_worker0{actor=\"router\"} 3\n"
        "# HELP strata_worker_kv_free_blocks from the stats counter worker<N>.kv.free_blocks\n"
        "# TYPE strata_worker_kv_free_blocks gauge\n"
        "strata_worker_kv_free_blocks{actor=\"worker0\"} 9\n"
        "strata_worker_kv_free_blocks{actor=\"worker1\"} 7\n";
    ck_assert_str_eq(out, want);
    free(out);
    out = s_render(NULL, 0); /* nothing: an empty exposition */
    ck_assert_str_eq(out, "");
    free(out);
}
END_TEST

START_TEST(render_semcache) { /* the answer cache's gauges and counters */
    msg_counter_t c[] = {{"semcache.entries", 5},
                         {"semcache.threshold.milli", 930},
                         {"semcache.hits.exact", 2},
                         {"semcache.embed_us", 2500}};
    char *out = s_render(c, 4);
    ck_assert_ptr_nonnull(strstr(out, "# TYPE strata_semcache_entries gauge\n"));
    ck_assert_ptr_nonnull(strstr(out, "# TYPE strata_semcache_threshold_milli gauge\n"));
    ck_assert_ptr_nonnull(strstr(out, "# TYPE strata_semcache_hits_exact_total counter\n"));
    ck_assert_ptr_nonnull(
        strstr(out, "strata_semcache_embed_seconds_total{actor=\"semcache\"} 0.0025\n"));
    free(out);
}
END_TEST

START_TEST(render_histogram) {
    /* buckets in any order; an incomplete triple (no .sum) stays plain counters */
    msg_counter_t c[] = {
        {"frontend.ttft_us.count", 3},
        {"frontend.ttft_us.bucket.le_2000", 2},
        {"frontend.ttft_us.bucket.le_1000", 1},
        {"frontend.ttft_us.sum", 4500},
        {"worker0.odd.count", 1},
        {"worker0.odd.bucket.le_1", 1},
    };
    char *out = s_render(c, 6);
    const char *want =
        "# HELP strata_frontend_ttft_seconds from the stats counter frontend.ttft_us\n"
        "# TYPE strata_frontend_ttft_seconds histogram\n"
        "strata_frontend_ttft_seconds_bucket{actor=\"frontend\",le=\"0.001\"} 1\n"
        "strata_frontend_ttft_seconds_bucket{actor=\"frontend\",le=\"0.002\"} 2\n"
        "strata_frontend_ttft_seconds_bucket{actor=\"frontend\",le=\"+Inf\"} 3\n"
        "strata_frontend_ttft_seconds_count{actor=\"frontend\"} 3\n"
        "strata_frontend_ttft_seconds_sum{actor=\"frontend\"} 0.0045\n"
        "# HELP strata_worker_odd_bucket_le_1_total from the stats counter "
        "worker<N>.odd.bucket.le_1\n"
        "# TYPE strata_worker_odd_bucket_le_1_total counter\n"
        "strata_worker_odd_bucket_le_1_total{actor=\"worker0\"} 1\n"
        "# HELP strata_worker_odd_count_total from the stats counter worker<N>.odd.count\n"
        "# TYPE strata_worker_odd_count_total counter\n"
        "strata_worker_odd_count_total{actor=\"worker0\"} 1\n";
    ck_assert_str_eq(out, want);
    free(out);
}
END_TEST

/* The frontend's histograms, observed from done events and exported into counters,
 * render as histograms whose count is the number of requests. */
static void s_put(void *counters, const char *name, int64_t value) {
    actor_counters_set(counters, name, value);
}

START_TEST(request_histograms_end_to_end) {
    serve_metrics_req_t *h = serve_metrics_req_new();
    ck_assert_ptr_nonnull(h);
    for (int i = 0; i < 5; i++) {
        msg_done_t d;
        msg_done_init(&d);
        d.usage.completion_tokens = 11;
        d.usage.cached_tokens = 16 * i;
        d.usage.draft_proposed = i ? 10 : 0;
        d.usage.draft_accepted = i;
        d.timings.ttft_ms = 30.0 * (i + 1);
        d.timings.decode_ms = 100.0; /* 10 ms per token after the first */
        d.timings.queued_ms = 0.5;
        serve_metrics_req_observe(h, &d);
    }
    actor_counters_t *c = actor_counters_new();
    serve_metrics_req_export(h, s_put, c);
    ck_assert_int_eq(actor_counters_get(c, "ttft_us.count"), 5);
    ck_assert_int_eq(actor_counters_get(c, "ttft_us.sum"), 450000);
    ck_assert_int_eq(actor_counters_get(c, "ttft_us.bucket.le_50000"), 1);
    ck_assert_int_eq(actor_counters_get(c, "ttft_us.bucket.le_100000"), 3);
    ck_assert_int_eq(actor_counters_get(c, "tpot_us.bucket.le_10000"), 5);
    ck_assert_int_eq(actor_counters_get(c, "draft_accept_pct.count"), 4);
    ck_assert_int_eq(actor_counters_get(c, "cached_tokens.bucket.le_1"), 1); /* the 0 */
    /* as the frontend sends them: prefixed with its name */
    int n = actor_counters_count(c);
    msg_counter_t *mc = calloc((size_t)n, sizeof *mc);
    for (int i = 0; i < n; i++) {
        snprintf(mc[i].name, sizeof mc[i].name, "frontend.%s", actor_counters_name_at(c, i));
        mc[i].value = actor_counters_value_at(c, i);
    }
    char *out = s_render(mc, n);
    ck_assert_ptr_nonnull(strstr(out, "# TYPE strata_frontend_ttft_seconds histogram\n"));
    ck_assert_ptr_nonnull(
        strstr(out, "strata_frontend_ttft_seconds_count{actor=\"frontend\"} 5\n"));
    ck_assert_ptr_nonnull(
        strstr(out, "strata_frontend_ttft_seconds_sum{actor=\"frontend\"} 0.45\n"));
    ck_assert_ptr_nonnull(
        strstr(out, "strata_frontend_tpot_seconds_bucket{actor=\"frontend\",le=\"0.01\"} 5\n"));
    ck_assert_ptr_nonnull(strstr(out, "# TYPE strata_frontend_draft_accept_pct histogram\n"));
    free(out);
    free(mc);
    actor_counters_destroy(&c);
    serve_metrics_req_destroy(&h);
    serve_metrics_req_destroy(&h);         /* safe twice */
    serve_metrics_req_observe(NULL, NULL); /* an unset one does nothing */
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("metrics");
    tcase_add_test(tc, render_counters_gauges_units);
    tcase_add_test(tc, render_histogram);
    tcase_add_test(tc, render_semcache);
    tcase_add_test(tc, request_histograms_end_to_end);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

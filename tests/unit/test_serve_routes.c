/* test_serve_routes.c - serve/serve_routes: the http gateway's routes as one table.  A
 * request is looked up by path and method; a known path with another method is 405 with
 * the path's methods for Allow; an unknown path is 404; /health needs no API key. */
#include "serve_routes.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <string.h>

START_TEST(find_each_endpoint) {
    const serve_route_t *r = NULL;
    ck_assert_int_eq(serve_routes_find("/v1/chat/completions", "POST", &r), 0);
    ck_assert_int_eq(r->handler, SERVE_HANDLER_CHAT);
    ck_assert(r->auth);
    ck_assert_int_eq(serve_routes_find("/v1/completions", "POST", &r), 0);
    ck_assert_int_eq(r->handler, SERVE_HANDLER_COMPLETIONS);
    ck_assert_int_eq(serve_routes_find("/v1/models", "GET", &r), 0);
    ck_assert_int_eq(r->handler, SERVE_HANDLER_MODELS);
    ck_assert(r->auth);
    ck_assert_int_eq(serve_routes_find("/health", "GET", &r), 0);
    ck_assert_int_eq(r->handler, SERVE_HANDLER_HEALTH);
    ck_assert(!r->auth); /* probes carry no key */
    ck_assert_int_eq(serve_routes_find("/v1/cache/invalidate", "POST", &r), 0);
    ck_assert_int_eq(r->handler, SERVE_HANDLER_CACHE_INVALIDATE);
    ck_assert(r->auth); /* it drops what others cached: a key when there are keys */
    ck_assert_int_eq(serve_routes_find("/v1/cache/invalidate", "GET", &r), -EOPNOTSUPP);
}
END_TEST

/* OpenAI clients whose base URL lacks /v1 reach the same handlers. */
/* Embeddings, and one model by its id: the id is what follows /v1/models/ (it may hold
 * a slash); /v1/models/ alone is no model. */
START_TEST(embeddings_and_model_by_id) {
    const serve_route_t *r = NULL;
    ck_assert_int_eq(serve_routes_find("/v1/embeddings", "POST", &r), 0);
    ck_assert_int_eq(r->handler, SERVE_HANDLER_EMBEDDINGS);
    ck_assert_int_eq(serve_routes_find("/embeddings", "POST", &r), 0);
    ck_assert_int_eq(r->handler, SERVE_HANDLER_EMBEDDINGS);
    ck_assert_int_eq(serve_routes_find("/v1/models/SmolLM2.gguf", "GET", &r), 0);
    ck_assert_int_eq(r->handler, SERVE_HANDLER_MODEL);
    ck_assert_str_eq(serve_routes_arg(r, "/v1/models/SmolLM2.gguf"), "SmolLM2.gguf");
    ck_assert_int_eq(serve_routes_find("/v1/models/org/name", "GET", &r), 0);
    ck_assert_str_eq(serve_routes_arg(r, "/v1/models/org/name"), "org/name");
    ck_assert_int_eq(serve_routes_find("/v1/models/", "GET", &r), -ENOENT);
    ck_assert_int_eq(serve_routes_find("/v1/models", "GET", &r), 0); /* the list */
    ck_assert_int_eq(r->handler, SERVE_HANDLER_MODELS);
    ck_assert_str_eq(serve_routes_arg(r, "/v1/models"), "");
    ck_assert_int_eq(serve_routes_find("/v1/models/x", "DELETE", &r), -EOPNOTSUPP);
    char allow[32];
    serve_routes_allow("/v1/embeddings", allow, sizeof allow);
    ck_assert_str_eq(allow, "POST");
}
END_TEST

START_TEST(paths_without_v1) {
    const serve_route_t *r = NULL;
    ck_assert_int_eq(serve_routes_find("/chat/completions", "POST", &r), 0);
    ck_assert_int_eq(r->handler, SERVE_HANDLER_CHAT);
    ck_assert_int_eq(serve_routes_find("/completions", "POST", &r), 0);
    ck_assert_int_eq(r->handler, SERVE_HANDLER_COMPLETIONS);
    ck_assert_int_eq(serve_routes_find("/models", "GET", &r), 0);
    ck_assert_int_eq(r->handler, SERVE_HANDLER_MODELS);
    ck_assert_int_eq(serve_routes_find("/v1/health", "GET", &r), -ENOENT);
}
END_TEST

START_TEST(unknown_path_is_404) {
    const serve_route_t *r = NULL;
    ck_assert_int_eq(serve_routes_find("/nope", "GET", &r), -ENOENT);
    ck_assert_int_eq(serve_routes_find("/v1/chat/completions/", "POST", &r), -ENOENT);
    ck_assert_int_eq(serve_routes_find("/v1/models?x=1", "GET", &r), -ENOENT); /* exact */
    ck_assert_int_eq(serve_routes_find("", "GET", &r), -ENOENT);
    char allow[32] = "x";
    serve_routes_allow("/nope", allow, sizeof allow);
    ck_assert_str_eq(allow, "");
}
END_TEST

/* A known path with another method: -EOPNOTSUPP, the row says whose path it is, and
 * Allow lists the path's methods. */
START_TEST(wrong_method_is_405) {
    const serve_route_t *r = NULL;
    ck_assert_int_eq(serve_routes_find("/v1/chat/completions", "GET", &r), -EOPNOTSUPP);
    ck_assert_int_eq(r->handler, SERVE_HANDLER_CHAT);
    char allow[32];
    serve_routes_allow("/v1/chat/completions", allow, sizeof allow);
    ck_assert_str_eq(allow, "POST");
    ck_assert_int_eq(serve_routes_find("/v1/models", "POST", &r), -EOPNOTSUPP);
    serve_routes_allow("/v1/models", allow, sizeof allow);
    ck_assert_str_eq(allow, "GET");
    ck_assert_int_eq(serve_routes_find("/health", "HEAD", &r), -EOPNOTSUPP);
    ck_assert_int_eq(serve_routes_find("/health", "get", &r), -EOPNOTSUPP); /* case matters */
    serve_routes_allow("/health", allow, 2); /* truncated, still terminated */
    ck_assert_str_eq(allow, "G");
}
END_TEST

/* The table itself: every row is found by its own path and method, and every handler
 * has a row with a /v1 path or is a probe (no key). */
START_TEST(table_is_consistent) {
    int n;
    const serve_route_t *t = serve_routes(&n);
    ck_assert_int_ge(n, SERVE_HANDLER_N);
    bool seen[SERVE_HANDLER_N] = {0};
    for (int i = 0; i < n; i++) {
        const serve_route_t *r = NULL;
        char path[128]; /* a prefix row is found with something after its prefix */
        snprintf(path, sizeof path, "%s%s", t[i].path, t[i].prefix ? "some-model" : "");
        ck_assert_int_eq(serve_routes_find(path, t[i].method, &r), 0);
        ck_assert_ptr_eq(r, &t[i]); /* no duplicate (path, method) shadows another row */
        ck_assert_int_lt(t[i].handler, SERVE_HANDLER_N);
        if (!strncmp(t[i].path, "/v1/", 4) || !t[i].auth)
            seen[t[i].handler] = true;
    }
    for (int h = 0; h < SERVE_HANDLER_N; h++)
        ck_assert_msg(seen[h], "handler %d has no route", h);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_routes");
    TCase *tc = tcase_create("serve_routes");
    tcase_add_test(tc, find_each_endpoint);
    tcase_add_test(tc, paths_without_v1);
    tcase_add_test(tc, embeddings_and_model_by_id);
    tcase_add_test(tc, unknown_path_is_404);
    tcase_add_test(tc, wrong_method_is_405);
    tcase_add_test(tc, table_is_consistent);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)

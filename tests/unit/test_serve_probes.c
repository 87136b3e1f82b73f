/* test_serve_probes.c - serve/serve_probes: each probe's answer from the frontend's last
 * health: liveness always 200; startup, readiness and progress 503 before any health, when
 * the health is more than 2 s old (the frontend unreachable), or when their own fact is
 * false -- readiness says why (starting, draining, not_ready); ?verbose lists the checks
 * and the actors. */
#include "serve_probes.h"
#include "test_util.h"

#include <check.h>
#include <string.h>

static const char *s_status(const cJSON *o) {
    return cJSON_GetObjectItemCaseSensitive(o, "status")->valuestring;
}

static int s_ask(const serve_probes_t *p, serve_probe_t probe, uint64_t now, char *status) {
    cJSON *o = NULL;
    int code = serve_probes_answer(p, probe, false, now, &o);
    strcpy(status, s_status(o));
    cJSON_Delete(o);
    return code;
}

START_TEST(answers) {
    serve_probes_t p = {0};
    char st[32];
    const uint64_t t = 10000000;
    /* never heard: only liveness */
    ck_assert_int_eq(s_ask(&p, SERVE_PROBE_LIVE, t, st), 200);
    ck_assert_int_eq(s_ask(&p, SERVE_PROBE_READY, t, st), 503);
    ck_assert_str_eq(st, "unavailable");
    ck_assert_int_eq(s_ask(&p, SERVE_PROBE_STARTUP, t, st), 503);
    /* starting */
    msg_health_reply_t h;
    msg_health_reply_init(&h);
    serve_probes_take(&p, &h, t);
    ck_assert_int_eq(s_ask(&p, SERVE_PROBE_READY, t, st), 503);
    ck_assert_str_eq(st, "starting");
    ck_assert_int_eq(s_ask(&p, SERVE_PROBE_STARTUP, t, st), 503);
    ck_assert_str_eq(st, "starting");
    /* up */
    msg_health_reply_init(&h);
    h.ok = h.started = h.ready = h.progress = true;
    h.actors = calloc(2, sizeof *h.actors);
    h.n_actors = 2;
    strcpy(h.actors[0].name, "frontend");
    strcpy(h.actors[1].name, "worker0");
    h.actors[1].state = MSG_STATE_UNHEALTHY;
    h.actors[1].last_seen_ms = 1500;
    serve_probes_take(&p, &h, t);
    ck_assert_ptr_null(h.actors); /* taken over */
    for (serve_probe_t q = SERVE_PROBE_LIVE; q <= SERVE_PROBE_PROGRESS; q++)
        ck_assert_int_eq(s_ask(&p, q, t + 1999999, st), 200);
    /* stale: the frontend is unreachable */
    ck_assert_int_eq(s_ask(&p, SERVE_PROBE_READY, t + 2000001, st), 503);
    ck_assert_str_eq(st, "unavailable");
    ck_assert_int_eq(s_ask(&p, SERVE_PROBE_PROGRESS, t + 2000001, st), 503);
    ck_assert_int_eq(s_ask(&p, SERVE_PROBE_LIVE, t + 2000001, st), 200);
    /* stalled, draining */
    p.h.progress = false;
    ck_assert_int_eq(s_ask(&p, SERVE_PROBE_PROGRESS, t, st), 503);
    ck_assert_str_eq(st, "stalled");
    ck_assert_int_eq(s_ask(&p, SERVE_PROBE_READY, t, st), 200);
    p.h.ready = false;
    p.h.draining = true;
    ck_assert_int_eq(s_ask(&p, SERVE_PROBE_READY, t, st), 503);
    ck_assert_str_eq(st, "draining");
    p.h.draining = false;
    ck_assert_int_eq(s_ask(&p, SERVE_PROBE_READY, t, st), 503);
    ck_assert_str_eq(st, "not_ready");
    ck_assert_int_eq(s_ask(&p, SERVE_PROBE_STARTUP, t, st), 200); /* started stays */
    /* verbose */
    cJSON *o = NULL;
    ck_assert_int_eq(serve_probes_answer(&p, SERVE_PROBE_READY, true, t, &o), 503);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "checks");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "started")));
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(c, "progress")));
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "actors");
    ck_assert_int_eq(cJSON_GetArraySize(a), 2);
    const cJSON *w = cJSON_GetArrayItem(a, 1);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(w, "state")->valuestring, "unhealthy");
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(w, "last_seen_ms")->valueint, 1500);
    cJSON_Delete(o);
    serve_probes_clear(&p);
    serve_probes_clear(&p);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_probes");
    TCase *tc = tcase_create("probes");
    tcase_add_test(tc, answers);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)

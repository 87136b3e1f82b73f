/* test_serve_requests.c - serve/serve_requests: the frontend's request table and the
 * rules that make resume work, with no socket: a request is added, its attempt's events
 * come in (in order, duplicated, past the end, with a gap), attempts are lost and
 * started again from the delivered tokens under new rids, and the watch says what each
 * request needs as time passes. */
#include "serve_requests.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000ull /* microseconds */
static const serve_requests_cfg_t s_cfg = {
    .max_requests = 4, .accept_us = 2000 * MS, .probe_us = 1000 * MS, .give_up_us = 30000 * MS};
static const uint8_t s_alice[] = "alice", s_bob[] = "bob";

/* A generate as the frontend decodes it: id, max_tokens, a malloc'd prompt. */
static msg_generate_t s_gen(const char *id, int max_tokens, bool stream) {
    msg_generate_t g;
    msg_generate_init(&g);
    snprintf(g.id, sizeof g.id, "%s", id);
    g.prompt = strdup("Once upon a time");
    g.prompt_len = strlen(g.prompt);
    g.max_tokens = max_tokens;
    g.stream = stream;
    return g;
}

/* Add request id of alice at t = 0. */
static serve_request_t *s_add(serve_requests_t *t, const char *id, int max_tokens) {
    msg_generate_t g = s_gen(id, max_tokens, true);
    int err = 0;
    serve_request_t *r = serve_requests_add(t, s_alice, sizeof s_alice, &g, 0, NULL, 0, &err);
    ck_assert_msg(r, "add %s: %d", id, err);
    msg_generate_clear(&g);
    return r;
}

START_TEST(add_find_remove) {
    serve_requests_t *t = serve_requests_new(&s_cfg, 1000);
    ck_assert_int_eq(serve_requests_slots(t), 4);
    msg_generate_t g = s_gen("a", 8, true);
    int err = 0;
    serve_request_t *r = serve_requests_add(t, s_alice, sizeof s_alice, &g, 0, NULL, 5, &err);
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_null(g.prompt); /* taken over: the table owns it now */
    ck_assert_str_eq(r->gen.prompt, "Once upon a time");
    msg_generate_clear(&g);
    ck_assert_uint_eq(r->rid, 1000);
    ck_assert_int_eq(r->attempts, 1);
    ck_assert_uint_eq(r->t_arrival_us, 5);
    ck_assert_uint_eq(r->give_up_us, 5 + s_cfg.give_up_us);
    ck_assert_int_eq(serve_requests_count(t), 1);
    ck_assert_ptr_eq(serve_requests_find_rid(t, 1000), r);
    ck_assert_ptr_null(serve_requests_find_rid(t, 0));
    ck_assert_ptr_eq(serve_requests_find_client(t, s_alice, sizeof s_alice, "a"), r);
    ck_assert_ptr_null(serve_requests_find_client(t, s_bob, sizeof s_bob, "a"));
    /* the same id again from the same client: refused; from another: its own request */
    g = s_gen("a", 8, true);
    ck_assert_ptr_null(serve_requests_add(t, s_alice, sizeof s_alice, &g, 0, NULL, 6, &err));
    ck_assert_int_eq(err, -EEXIST);
    ck_assert_ptr_nonnull(g.prompt); /* not taken */
    serve_request_t *b = serve_requests_add(t, s_bob, sizeof s_bob, &g, 0, NULL, 6, &err);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(b->rid, 1001);
    msg_generate_clear(&g);
    /* a client that went away no longer owns its ids */
    r->gone = true;
    ck_assert_ptr_null(serve_requests_find_client(t, s_alice, sizeof s_alice, "a"));
    serve_requests_remove(t, r);
    ck_assert_int_eq(serve_requests_count(t), 1);
    ck_assert_ptr_null(serve_requests_find_rid(t, 1000));
    serve_requests_destroy(&t);
    ck_assert_ptr_null(t);
    serve_requests_destroy(&t); /* safe twice */
}
END_TEST

START_TEST(full_table_and_long_ident) {
    serve_requests_t *t = serve_requests_new(&s_cfg, 1);
    char id[8];
    for (int i = 0; i < s_cfg.max_requests; i++) {
        snprintf(id, sizeof id, "r%d", i);
        s_add(t, id, 4);
    }
    msg_generate_t g = s_gen("one-more", 4, true);
    int err = 0;
    ck_assert_ptr_null(serve_requests_add(t, s_alice, sizeof s_alice, &g, 0, NULL, 0, &err));
    ck_assert_int_eq(err, -ENOSPC);
    serve_requests_remove(t, serve_requests_find_client(t, s_alice, sizeof s_alice, "r2"));
    uint8_t big[SERVE_MAX_IDENT + 1] = {0};
    err = 0;
    ck_assert_ptr_null(serve_requests_add(t, big, sizeof big, &g, 0, NULL, 0, &err));
    ck_assert_int_eq(err, -ENOSPC);
    ck_assert_ptr_nonnull(serve_requests_add(t, s_alice, sizeof s_alice, &g, 0, NULL, 0, &err));
    msg_generate_clear(&g);
    serve_requests_destroy(&t);
}
END_TEST

/* rids count up and are never 0, even when the count wraps. */
START_TEST(rid_never_zero) {
    serve_requests_t *t = serve_requests_new(&s_cfg, UINT64_MAX);
    serve_request_t *a = s_add(t, "a", 4), *b = s_add(t, "b", 4);
    ck_assert_uint_eq(a->rid, UINT64_MAX);
    ck_assert_uint_eq(b->rid, 1);
    serve_requests_destroy(&t);
}
END_TEST

/* Events are delivered once, in index order; the last one counts the tokens. */
START_TEST(events_in_order_duplicate_invalid_gap) {
    serve_requests_t *t = serve_requests_new(&s_cfg, 1);
    serve_request_t *r = s_add(t, "a", 4);
    ck_assert_int_eq(serve_requests_event(t, r, 2, 0, 11, 0, 0, 10), SERVE_EVENT_ACCEPT);
    ck_assert_int_eq(r->worker, 2);
    ck_assert_uint_eq(r->t_heard_us, 10);
    ck_assert_uint_eq(r->give_up_us, 10 + s_cfg.give_up_us); /* progress */
    ck_assert_int_eq(serve_requests_event(t, r, 2, 1, 12, 0, 0, 20), SERVE_EVENT_ACCEPT);
    ck_assert_int_eq(serve_requests_event(t, r, 2, 1, 12, 0, 0, 30), SERVE_EVENT_DUPLICATE);
    ck_assert_uint_eq(r->t_heard_us, 30); /* still heard from */
    ck_assert_int_eq(serve_requests_event(t, r, 2, 4, 99, 0, 0, 40), SERVE_EVENT_INVALID);
    ck_assert_int_eq(serve_requests_event(t, r, 2, 3, 14, 0, 0, 50), SERVE_EVENT_GAP);
    ck_assert_int_eq(r->n_tokens, 2);
    ck_assert_int_eq(r->toks[0], 11);
    ck_assert_int_eq(r->toks[1], 12);
    /* the last event says 4 tokens but this side has 2 (+ its own): one was lost */
    ck_assert_int_eq(serve_requests_event(t, r, 2, 2, 13, MSG_FINISH_LENGTH, 4, 60),
                     SERVE_EVENT_GAP);
    ck_assert_int_eq(serve_requests_event(t, r, 2, 2, 13, MSG_FINISH_LENGTH, 3, 60),
                     SERVE_EVENT_ACCEPT);
    ck_assert_int_eq(r->n_tokens, 3);
    serve_requests_destroy(&t);
}
END_TEST

/* A last event with no token (index -1: held-back text, or just the end). */
START_TEST(event_without_token) {
    serve_requests_t *t = serve_requests_new(&s_cfg, 1);
    serve_request_t *r = s_add(t, "a", 4);
    ck_assert_int_eq(serve_requests_event(t, r, 0, 0, 5, 0, 0, 1), SERVE_EVENT_ACCEPT);
    uint64_t give_up = r->give_up_us;
    ck_assert_int_eq(serve_requests_event(t, r, 0, -1, 0, MSG_FINISH_STOP, 1, 99),
                     SERVE_EVENT_ACCEPT);
    ck_assert_int_eq(r->n_tokens, 1);
    ck_assert_uint_eq(r->give_up_us, give_up); /* no token: no progress */
    serve_requests_destroy(&t);
}
END_TEST

/* A resume with the client's token ids goes on after them; one without (have only)
 * regenerates them but the client does not get them twice. */
START_TEST(resume_with_and_without_tokens) {
    serve_requests_t *t = serve_requests_new(&s_cfg, 1);
    msg_generate_t g = s_gen("a", 8, true);
    const int32_t have[] = {7, 8, 9};
    int err;
    serve_request_t *r = serve_requests_add(t, s_alice, sizeof s_alice, &g, 3, have, 0, &err);
    ck_assert_int_eq(r->n_tokens, 3);
    ck_assert_int_eq(r->toks[2], 9);
    ck_assert_int_eq(r->skip, 0);
    ck_assert_int_eq(serve_requests_event(t, r, 0, 3, 10, 0, 0, 1), SERVE_EVENT_ACCEPT);
    ck_assert(serve_requests_to_client(r, 3));
    msg_generate_clear(&g);
    g = s_gen("b", 8, true);
    serve_request_t *s = serve_requests_add(t, s_alice, sizeof s_alice, &g, 2, NULL, 0, &err);
    msg_generate_clear(&g);
    ck_assert_int_eq(s->n_tokens, 0);
    ck_assert_int_eq(s->skip, 2);
    ck_assert(!serve_requests_to_client(s, 0)); /* the client has 0 and 1 */
    ck_assert(!serve_requests_to_client(s, 1));
    ck_assert(serve_requests_to_client(s, 2));
    s->stream = false; /* done carries the text instead */
    ck_assert(!serve_requests_to_client(s, 2));
    serve_requests_destroy(&t);
}
END_TEST

/* A lost attempt goes on under a new rid: the old rid's events find nothing. */
START_TEST(next_attempt_new_rid) {
    serve_requests_t *t = serve_requests_new(&s_cfg, 50);
    serve_request_t *r = s_add(t, "a", 8);
    r->worker = 1;
    bool now;
    ck_assert_int_eq(serve_requests_next_attempt(t, r, 0, 100, &now), 0);
    ck_assert(now);
    ck_assert_uint_eq(r->rid, 51);
    ck_assert_int_eq(r->attempts, 2);
    ck_assert_int_eq(r->worker, -1);
    ck_assert_ptr_null(serve_requests_find_rid(t, 50)); /* a late event of attempt 1 */
    ck_assert_ptr_eq(serve_requests_find_rid(t, 51), r);
    /* with a delay: the watch submits it when the delay is over */
    ck_assert_int_eq(serve_requests_next_attempt(t, r, 500, 200, &now), 0);
    ck_assert(!now);
    ck_assert_int_eq(serve_requests_due(t, r, 699), SERVE_DUE_NOTHING);
    ck_assert_int_eq(serve_requests_due(t, r, 700), SERVE_DUE_SUBMIT);
    /* no progress for give_up_us: it fails, and keeps its rid */
    ck_assert_int_eq(serve_requests_next_attempt(t, r, 0, r->give_up_us + 1, &now), -ETIMEDOUT);
    ck_assert_uint_eq(r->rid, 52);
    serve_requests_destroy(&t);
}
END_TEST

/* The tokenizer's queue was full: submitted again after a backoff that doubles. */
START_TEST(backoff_doubles) {
    serve_requests_t *t = serve_requests_new(&s_cfg, 1);
    serve_request_t *r = s_add(t, "a", 8);
    serve_requests_sent(t, r, false, 1000);
    ck_assert_uint_eq(r->retry_at_us, 1000 + SERVE_RETRY0_US);
    serve_requests_sent(t, r, false, 2000);
    ck_assert_uint_eq(r->retry_at_us, 2000 + 2 * SERVE_RETRY0_US);
    for (int i = 0; i < 10; i++)
        serve_requests_sent(t, r, false, 3000);
    ck_assert_uint_eq(r->retry_at_us, 3000 + SERVE_RETRY_MAX_US);
    serve_requests_sent(t, r, true, 4000);
    ck_assert_uint_eq(r->retry_at_us, 0);
    ck_assert_uint_eq(r->t_sent_us, 4000);
    ck_assert_int_eq(r->worker, -1);
    serve_requests_destroy(&t);
}
END_TEST

/* Worker errors: a new request may be refused for want of room; a started one waits;
 * a restarting worker (internal) never fails a request; anything else does. */
START_TEST(retry_error_rules) {
    serve_requests_t *t = serve_requests_new(&s_cfg, 1);
    serve_request_t *r = s_add(t, "a", 8);
    uint64_t wait = 0;
    ck_assert(!serve_requests_retry_error(r, MSG_CODE_OVERLOADED, &wait));
    ck_assert(!serve_requests_retry_error(r, MSG_CODE_BAD_REQUEST, &wait));
    ck_assert(serve_requests_retry_error(r, MSG_CODE_INTERNAL, &wait));
    ck_assert_uint_eq(wait, SERVE_RETRY0_US);
    serve_requests_event(t, r, 0, 0, 1, 0, 0, 1); /* started */
    ck_assert(serve_requests_retry_error(r, MSG_CODE_OVERLOADED, &wait));
    ck_assert_uint_eq(wait, 2 * SERVE_RETRY0_US);
    serve_requests_destroy(&t);
}
END_TEST

/* The watch: unaccepted after accept_us, probed when silent, lost after the probes. */
START_TEST(watch_accept_probe_silent) {
    serve_requests_t *t = serve_requests_new(&s_cfg, 1);
    serve_request_t *r = s_add(t, "a", 8);
    serve_requests_sent(t, r, true, 0);
    ck_assert_int_eq(serve_requests_due(t, r, s_cfg.accept_us), SERVE_DUE_NOTHING);
    ck_assert_int_eq(serve_requests_due(t, r, s_cfg.accept_us + 1), SERVE_DUE_UNACCEPTED);
    /* a worker holds it: quiet for probe_us, then probed SERVE_MAX_PROBES times */
    serve_requests_held(t, r, 3, 10 * MS);
    ck_assert_int_eq(r->worker, 3);
    ck_assert_uint_eq(r->give_up_us, 10 * MS + s_cfg.give_up_us);
    uint64_t now = 10 * MS;
    ck_assert_int_eq(serve_requests_due(t, r, now + s_cfg.probe_us - 1), SERVE_DUE_NOTHING);
    for (int i = 0; i < SERVE_MAX_PROBES; i++) {
        now += s_cfg.probe_us;
        ck_assert_int_eq(serve_requests_due(t, r, now), SERVE_DUE_PROBE);
        ck_assert_int_eq(serve_requests_due(t, r, now), SERVE_DUE_NOTHING); /* just probed */
    }
    now += s_cfg.probe_us;
    ck_assert_int_eq(serve_requests_due(t, r, now), SERVE_DUE_SILENT);
    /* an event resets the count */
    serve_requests_event(t, r, 3, 0, 1, 0, 0, now);
    ck_assert_int_eq(r->probes, 0);
    ck_assert_int_eq(serve_requests_due(t, r, now + s_cfg.probe_us), SERVE_DUE_PROBE);
    r->final_due_us = now; /* a slow reader's final error waits: nothing else matters */
    ck_assert_int_eq(serve_requests_due(t, r, now), SERVE_DUE_FINAL);
    serve_requests_destroy(&t);
}
END_TEST

START_TEST(keep_text_and_logprobs) {
    serve_requests_t *t = serve_requests_new(&s_cfg, 1);
    serve_request_t *r = s_add(t, "a", 8);
    ck_assert_int_eq(serve_requests_keep_text(r, "Hel", 3), 0);
    ck_assert_int_eq(serve_requests_keep_text(r, "lo", 2), 0);
    ck_assert_str_eq(r->text, "Hello");
    ck_assert_uint_eq(r->text_len, 5);
    char big[600];
    memset(big, 'x', sizeof big);
    ck_assert_int_eq(serve_requests_keep_text(r, big, sizeof big), 0); /* grows */
    ck_assert_uint_eq(r->text_len, 605);
    serve_requests_event(t, r, 0, 0, 42, 0, 0, 1);
    msg_top_t top[2] = {{.token = 42, .logprob = -0.1f}, {.token = 7, .logprob = -2.0f}};
    char piece[MSG_MAX_PIECE_BYTES + 1] = "Hel";
    serve_requests_keep_logprob(r, -0.1f, piece, top, 2);
    ck_assert_ptr_nonnull(r->lps);
    ck_assert_int_eq(r->lps[0].token, 42);
    ck_assert_str_eq(r->lps[0].piece, "Hel");
    ck_assert_int_eq(r->lps[0].n_top, 2);
    ck_assert_int_eq(r->lps[0].top[1].token, 7);
    serve_requests_destroy(&t); /* frees text, tokens, logprobs */
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_requests");
    TCase *tc = tcase_create("serve_requests");
    tcase_add_test(tc, add_find_remove);
    tcase_add_test(tc, full_table_and_long_ident);
    tcase_add_test(tc, rid_never_zero);
    tcase_add_test(tc, events_in_order_duplicate_invalid_gap);
    tcase_add_test(tc, event_without_token);
    tcase_add_test(tc, resume_with_and_without_tokens);
    tcase_add_test(tc, next_attempt_new_rid);
    tcase_add_test(tc, backoff_doubles);
    tcase_add_test(tc, retry_error_rules);
    tcase_add_test(tc, watch_accept_probe_silent);
    tcase_add_test(tc, keep_text_and_logprobs);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)

/* test_serve_emit.c - serve/serve_emit: the worker's text events.  Each token's event
 * carries its text (held back while it may begin a stop string), the count of completion
 * tokens so far and, when asked, its log-probability with the most likely alternatives;
 * a completed stop string ends the request with finish "stop"; the final event flushes
 * what was held back and carries the timings, the cached and draft counts and the trace,
 * and the router's work_event repeats it.  The vocabulary is a small synthetic model's
 * ("t3", "t4", ...). */
#include "serve_emit.h"

#include "model.h"
#include "test_util.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static test_synth_fixture_t FIX; /* the synthetic model, opened by main */
static model_t *MODEL;
static model_tokenizer_t *TOK;

/* A request of prompt t3 t4 t5 t6 with room for 8 tokens, stop string stop (or none). */
static void s_work(serve_work_t *w, int32_t *tokens, const char *stop, bool logprobs) {
    msg_work_request_t q;
    msg_work_request_init(&q);
    for (int i = 0; i < 4; i++)
        tokens[i] = 3 + i;
    q.rid = 5;
    q.tokens = tokens;
    q.n_tokens = 4;
    q.max_tokens = 8;
    q.sampling = msg_sampling_defaults();
    q.t_arrival_us = 1000;
    q.top_logprobs = logprobs ? 2 : 0;
    if (stop) {
        snprintf(q.stop[0], sizeof q.stop[0], "%s", stop);
        q.n_stop = 1;
    }
    serve_work_config_t cfg = {.tok = TOK, .n_vocab = 64, .context = 100, .max_ctx = 100};
    serve_work_refusal_t no;
    ck_assert_int_eq(serve_work_init(w, &q, &cfg, &no), 0);
}

/* The step sampled token t for w: appended to its history. */
static void s_sampled(serve_work_t *w, int32_t t) {
    w->seq.hist[w->seq.n_hist++] = t;
}

START_TEST(token_events_and_stop_string) {
    serve_emit_t *e = serve_emit_new(TOK, 64, 2, "worker2");
    serve_work_t w = {0};
    int32_t tokens[4];
    s_work(&w, tokens, "t8t9", false);
    msg_text_event_t te;
    s_sampled(&w, 7);
    ck_assert_int_eq(serve_emit_event(e, &w, 0, 7, MSG_FINISH_NONE, 2000, &te), 0);
    ck_assert_uint_eq(te.rid, 5);
    ck_assert_int_eq(te.worker, 2);
    ck_assert_int_eq(te.index, 0);
    ck_assert_int_eq(te.count, 1);
    ck_assert_int_eq(te.prompt_tokens, 4);
    ck_assert_str_eq(te.text, "t7");
    ck_assert(!te.has_logprob);
    s_sampled(&w, 8);
    ck_assert_int_eq(serve_emit_event(e, &w, 1, 8, MSG_FINISH_NONE, 2100, &te), 0);
    ck_assert_str_eq(te.text, ""); /* "t8" may begin the stop string: held back */
    s_sampled(&w, 9);
    ck_assert_int_eq(serve_emit_event(e, &w, 2, 9, MSG_FINISH_NONE, 2200, &te), MSG_FINISH_STOP);
    ck_assert_str_eq(te.text, ""); /* the stop string is not part of the text */
    ck_assert_int_eq(te.finish, MSG_FINISH_STOP);
    serve_work_clear(&w);
    serve_emit_destroy(&e);
    serve_emit_destroy(&e);
}
END_TEST

START_TEST(final_event) {
    serve_emit_t *e = serve_emit_new(TOK, 64, 0, "worker0");
    serve_work_t w = {0};
    int32_t tokens[4];
    s_work(&w, tokens, "t8t9", false);
    w.seq.trace = true;
    w.seq.t_prefill = 1500; /* arrived at 1000 */
    w.seq.t_first = 1800;
    w.seq.n_cached = 2;
    w.seq.proposed = 6;
    w.seq.accepted = 4;
    msg_text_event_t te;
    s_sampled(&w, 8);
    serve_emit_event(e, &w, 0, 8, MSG_FINISH_NONE, 1800, &te);
    ck_assert_str_eq(te.text, "");
    w.seq.t_last = 2600;
    s_sampled(&w, 3);
    ck_assert_int_eq(serve_emit_event(e, &w, 1, 3, MSG_FINISH_LENGTH, 3000, &te),
                     MSG_FINISH_LENGTH);
    ck_assert_str_eq(te.text, "t8t3"); /* the held-back text comes out at the end */
    ck_assert_int_eq(te.timings.queued_us, 500);
    ck_assert_int_eq(te.timings.prefill_us, 300);
    ck_assert_int_eq(te.timings.ttft_us, 800);
    ck_assert_int_eq(te.timings.decode_us, 800);
    ck_assert_int_eq(te.cached_tokens, 2);
    ck_assert_int_eq(te.draft_proposed, 6);
    ck_assert_int_eq(te.draft_accepted, 4);
    ck_assert_int_eq(te.n_steps, 1); /* the trace ends with why it finished */
    ck_assert_str_eq(te.steps[0].what, "finish");
    ck_assert_str_eq(te.steps[0].why, "max_tokens reached after 2 tokens");
    msg_work_event_t ev; /* the router forgets the request */
    serve_emit_work_event(&te, &ev);
    ck_assert_uint_eq(ev.rid, 5);
    ck_assert_int_eq(ev.finish, MSG_FINISH_LENGTH);
    ck_assert_int_eq(ev.timings.ttft_us, 800);
    /* a cancelled request: no token, nothing held */
    serve_work_clear(&w);
    s_work(&w, tokens, NULL, false);
    ck_assert_int_eq(serve_emit_event(e, &w, -1, -1, MSG_FINISH_CANCELLED, 3000, &te),
                     MSG_FINISH_CANCELLED);
    ck_assert_uint_eq(te.text_len, 0);
    ck_assert_int_eq(te.count, 0);
    serve_work_clear(&w);
    serve_emit_destroy(&e);
}
END_TEST

START_TEST(log_probabilities) {
    serve_emit_t *e = serve_emit_new(TOK, 64, 0, "worker0");
    serve_work_t w = {0};
    int32_t tokens[4];
    s_work(&w, tokens, NULL, true); /* two alternatives */
    float lsm[64];
    for (int i = 0; i < 64; i++)
        lsm[i] = -INFINITY;
    lsm[9] = -0.5f;
    lsm[12] = -1.5f;
    lsm[11] = -1.5f; /* a tie with 12: the lower id first */
    lsm[4] = -3.0f;
    s_sampled(&w, 12);
    serve_emit_logprobs(e, &w, lsm, 12);
    msg_text_event_t te;
    serve_emit_event(e, &w, 0, 12, MSG_FINISH_NONE, 2000, &te);
    ck_assert(te.has_logprob);
    ck_assert_float_eq(te.logprob, -1.5f);
    ck_assert_str_eq(te.piece, "t12");
    ck_assert_int_eq(te.n_top, 2);
    ck_assert_int_eq(te.top[0].token, 9);
    ck_assert_str_eq(te.top[0].text, "t9");
    ck_assert_int_eq(te.top[1].token, 11);
    /* kept for one event only */
    s_sampled(&w, 5);
    serve_emit_event(e, &w, 1, 5, MSG_FINISH_NONE, 2100, &te);
    ck_assert(!te.has_logprob);
    serve_work_clear(&w);
    serve_emit_destroy(&e);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_emit");
    TCase *tc = tcase_create("events");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, token_events_and_stop_string);
    tcase_add_test(tc, final_event);
    tcase_add_test(tc, log_probabilities);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) {
    test_synth_t sc = {.seed = 3};
    if (test_synth_open(&FIX, "emit", &sc))
        return 1;
    MODEL = FIX.model;
    TOK = FIX.tok;
    int rc = test_run_suite(argc, argv, s_suite(), CK_NOFORK);
    test_synth_close(&FIX);
    return rc;
}

/* test_serve_events.c - serve/serve_events: the client events the frontend assembles from a
 * worker's text events.  A token event carries the text event's token, text and
 * log-probability under the client's id; done carries the whole text when not streamed and
 * only the held-back piece when streamed, the usage (completion tokens counted by the
 * frontend, the rest from the worker) and the timings in milliseconds; under tools the calls
 * of the text; a trace is the frontend's steps, the worker's, and a delivery step, with the
 * spans of the completion copied from the input. */
#include "serve_events.h"
#include "test_util.h"

#include <check.h>
#include <string.h>

static serve_request_t s_req(bool stream, char *text) {
    serve_request_t r;
    memset(&r, 0, sizeof r);
    snprintf(r.id, sizeof r.id, "req-7");
    r.stream = stream;
    r.text = text;
    r.text_len = text ? strlen(text) : 0;
    r.n_tokens = 5;
    return r;
}

static msg_text_event_t s_final(char *text) {
    msg_text_event_t te;
    memset(&te, 0, sizeof te);
    te.index = -1;
    te.token = -1;
    te.finish = MSG_FINISH_LENGTH;
    te.text = text;
    te.text_len = text ? strlen(text) : 0;
    te.prompt_tokens = 11;
    te.cached_tokens = 8;
    te.draft_proposed = 4;
    te.draft_accepted = 3;
    te.timings.queued_us = 1500;
    te.timings.ttft_us = 20250;
    return te;
}

START_TEST(token_event) {
    serve_request_t r = s_req(true, NULL);
    msg_top_t top[1] = {{.token = 9, .logprob = -0.25f, .text = "x"}};
    msg_text_event_t te = s_final(NULL);
    te.index = 3;
    te.token = 42;
    te.text = "ab";
    te.text_len = 2;
    te.has_logprob = true;
    te.logprob = -1.5f;
    te.top = top;
    te.n_top = 1;
    snprintf(te.piece, sizeof te.piece, "ab");
    msg_token_t t;
    serve_events_token(&r, &te, &t);
    ck_assert_str_eq(t.id, "req-7");
    ck_assert_int_eq(t.index, 3);
    ck_assert_int_eq(t.token, 42);
    ck_assert_uint_eq(t.text_len, 2);
    ck_assert(t.has_logprob);
    ck_assert_float_eq(t.logprob, -1.5f);
    ck_assert_ptr_eq(t.top, top);
    ck_assert_str_eq(t.piece, "ab");
}
END_TEST

START_TEST(done_event) {
    char text[] = "Once upon a time";
    serve_request_t r = s_req(false, text);
    msg_text_event_t te = s_final(NULL);
    msg_done_t d;
    ck_assert_int_eq(serve_events_done(&r, &te, &d), 0);
    ck_assert_str_eq(d.id, "req-7");
    ck_assert_int_eq(d.finish_reason, MSG_FINISH_LENGTH);
    ck_assert_str_eq(d.text, text); /* not streamed: all of it */
    ck_assert_int_eq(d.usage.prompt_tokens, 11);
    ck_assert_int_eq(d.usage.completion_tokens, 5); /* the frontend's count */
    ck_assert_int_eq(d.usage.cached_tokens, 8);
    ck_assert_int_eq(d.usage.draft_accepted, 3);
    ck_assert_double_eq_tol(d.timings.queued_ms, 1.5, 1e-9);
    ck_assert_double_eq_tol(d.timings.ttft_ms, 20.25, 1e-9);
    ck_assert_int_eq(d.n_tool_calls, 0);
    serve_events_done_clear(&d);
    /* streamed: only the held-back text of the final event */
    r = s_req(true, text);
    te = s_final("held");
    ck_assert_int_eq(serve_events_done(&r, &te, &d), 0);
    ck_assert_str_eq(d.text, "held");
    te = s_final(NULL);
    ck_assert_int_eq(serve_events_done(&r, &te, &d), 0);
    ck_assert_ptr_null(d.text);
}
END_TEST

START_TEST(done_tool_calls) {
    char text[] = " [{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", \"argu";
    serve_request_t r = s_req(true, text);
    r.tools = SERVE_OPENAI_TOOLS_FORCED;
    msg_text_event_t te = s_final(NULL);
    msg_done_t d;
    ck_assert_int_eq(serve_events_done(&r, &te, &d), 0);
    ck_assert_int_eq(d.n_tool_calls, 1); /* the call cut at the limit is left out */
    ck_assert_str_eq(d.tool_calls[0].name, "f");
    ck_assert_str_eq(d.tool_calls[0].arguments, "{\"a\": 1}");
    ck_assert_str_eq(d.tool_calls[0].id, "call_7_0");
    serve_events_done_clear(&d);
    ck_assert_ptr_null(d.tool_calls);
    char plain[] = "Sure, here it is.";
    r = s_req(true, plain);
    r.tools = SERVE_OPENAI_TOOLS_AUTO;
    ck_assert_int_eq(serve_events_done(&r, &te, &d), 0);
    ck_assert_int_eq(d.n_tool_calls, 0); /* text: no calls */
}
END_TEST

START_TEST(trace) {
    char prompt[] = "Please repeat: the quick brown fox jumps over the lazy dog. Thanks.";
    char text[] = "Sure: the quick brown fox jumps over the lazy dog.";
    serve_request_t r = s_req(false, text);
    r.gen.prompt = prompt;
    r.gen.prompt_len = strlen(prompt);
    r.t_arrival_us = 1000000;
    msg_trace_step_t own[1], worker[2];
    msg_trace_step_fill(&own[0], "frontend", "resume", 0, 100, "attempt 1 lost");
    msg_trace_step_fill(&worker[0], "worker0", "prefill", 100, 3000, "11 tokens");
    msg_trace_step_fill(&worker[1], "worker0", "decode", 3000, 9000, "5 tokens");
    r.steps = own;
    r.n_steps = 1;
    msg_text_event_t te = s_final(NULL);
    te.steps = worker;
    te.n_steps = 2;
    msg_trace_t t;
    ck_assert_int_eq(serve_events_trace(&r, &te, 1012000, &t), 0);
    ck_assert_str_eq(t.id, "req-7");
    ck_assert_int_eq(t.n_steps, 4);
    ck_assert_str_eq(t.steps[0].what, "resume");
    ck_assert_str_eq(t.steps[2].what, "decode");
    ck_assert_str_eq(t.steps[3].what, "deliver");
    ck_assert_int_eq(t.steps[3].t_us, 9000); /* from the worker's last step to now */
    ck_assert_int_eq(t.steps[3].dur_us, 12000 - 9000);
    ck_assert_double_eq_tol(t.total_ms, 12.0, 1e-9);
    ck_assert_int_eq(t.n_sources, 1);
    const msg_source_t *sp = &t.sources[0];
    ck_assert_int_eq(sp->msg, -1); /* the prompt */
    ck_assert_int_ge(sp->out_end - sp->out_start, 24);
    ck_assert(!memcmp(text + sp->out_start, prompt + sp->in_start,
                      (size_t)(sp->out_end - sp->out_start)));
    serve_events_trace_clear(&t);
    ck_assert_ptr_null(t.steps);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_events");
    TCase *tc = tcase_create("serve_events");
    tcase_add_test(tc, token_event);
    tcase_add_test(tc, done_event);
    tcase_add_test(tc, done_tool_calls);
    tcase_add_test(tc, trace);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)

/* test_serve_answer.c - serve/serve_answer: the events of a generate said as OpenAI says
 * them, chunk by chunk, against the shapes of OpenAI's API reference (written here from the
 * reference, not from the module): a chat stream opens with a role chunk, says content
 * deltas, ends with finish_reason, the usage chunk and [DONE]; under tools the text is held
 * until its first byte decides, a call goes out as a first delta {index, id, type, function:
 * {name, arguments: ""}} then {index, function: {arguments}}, only once complete, and a
 * call cut at max_tokens never begins; the deprecated functions say function_call; legacy
 * completions chunks carry text and text_offset; a Responses stream is created,
 * in_progress, item added, part added, deltas, text done, part done, item done, completed,
 * numbered 0, 1, 2, ...; an error mid-stream is an error chunk and [DONE]. */
#include "serve_answer.h"
#include "test_util.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static serve_answer_req_t s_req(serve_answer_api_t api, bool stream) {
    serve_answer_req_t q = {
        .api = api, .model = "m", .fingerprint = "fp_1", .created = 1700000000, .stream = stream};
    snprintf(q.id, sizeof q.id, "%s",
             api == SERVE_ANSWER_RESPONSES ? "resp_ab12"
             : api == SERVE_ANSWER_CHAT    ? "chatcmpl-ab12"
                                           : "cmpl-ab12");
    return q;
}

/* A token event of text (no log-probability). */
static void s_token(serve_answer_t *a, int index, const char *text, base_buf_t *out) {
    msg_token_t t = {
        .index = index, .token = 100 + index, .text = (char *)text, .text_len = strlen(text)};
    ck_assert_int_eq(serve_answer_token(a, &t, out), 0);
}

static void s_done(serve_answer_t *a, int finish, base_buf_t *out) {
    msg_done_t d = {.finish_reason = finish, .usage = {.prompt_tokens = 7, .completion_tokens = 3}};
    ck_assert_int_eq(serve_answer_done(a, &d, out), 0);
}

/* The SSE events in out, parsed: data[i] (cJSON, or NULL for [DONE]) and, for Responses,
 * the event names; out is emptied. */
#define S_MAX_EVENTS 64
typedef struct {
    int n;
    char type[S_MAX_EVENTS][64];
    cJSON *data[S_MAX_EVENTS];
    bool done; /* a [DONE] was the last */
} s_events_t;

static void s_events_free(s_events_t *e) {
    for (int i = 0; i < e->n; i++)
        cJSON_Delete(e->data[i]);
    memset(e, 0, sizeof *e);
}

static void s_parse(base_buf_t *out, s_events_t *e) {
    s_events_free(e);
    char *p = out->p ? out->p : (char *)"";
    while (*p) {
        char *end = strstr(p, "\n\n");
        ck_assert_msg(end != NULL, "an event without its blank line: %s", p);
        *end = 0;
        ck_assert_int_lt(e->n, S_MAX_EVENTS);
        if (!strncmp(p, "event: ", 7)) {
            char *nl = strchr(p, '\n');
            ck_assert_ptr_nonnull(nl);
            snprintf(e->type[e->n], sizeof e->type[e->n], "%.*s", (int)(nl - p - 7), p + 7);
            p = nl + 1;
        }
        ck_assert_msg(!strncmp(p, "data: ", 6), "not a data line: %s", p);
        ck_assert_msg(!e->done, "an event after [DONE]");
        if (!strcmp(p + 6, "[DONE]")) {
            e->done = true;
        } else {
            e->data[e->n] = cJSON_Parse(p + 6);
            ck_assert_msg(e->data[e->n] != NULL, "not JSON: %s", p + 6);
            e->n++;
        }
        p = end + 2;
    }
    base_buf_reset(out);
}

static const cJSON *s_get(const cJSON *o, const char *path) {
    /* "a.b.0.c": members and array indexes */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *v = o;
    for (char *k = strtok(buf, "."); k && v; k = strtok(NULL, "."))
        v = (*k >= '0' && *k <= '9') ? cJSON_GetArrayItem(v, atoi(k))
                                     : cJSON_GetObjectItemCaseSensitive(v, k);
    return v;
}

static const char *s_str(const cJSON *o, const char *path) {
    const cJSON *v = s_get(o, path);
    ck_assert_msg(cJSON_IsString(v), "%s is not a string", path);
    return v->valuestring;
}

static int s_int(const cJSON *o, const char *path) {
    const cJSON *v = s_get(o, path);
    ck_assert_msg(cJSON_IsNumber(v), "%s is not a number", path);
    return v->valueint;
}

static bool s_null(const cJSON *o, const char *path) {
    return cJSON_IsNull(s_get(o, path));
}

static int s_keys(const cJSON *o) {
    return cJSON_GetArraySize(o);
}

/* ---- chat */

START_TEST(chat_stream) {
    serve_answer_req_t q = s_req(SERVE_ANSWER_CHAT, true);
    q.include_usage = true;
    serve_answer_t *a = serve_answer_new(&q, 0);
    base_buf_t out = {0};
    s_events_t e = {0};
    s_token(a, 0, "Hel", &out);
    s_parse(&out, &e);
    ck_assert_int_eq(e.n, 2); /* the role chunk, then the content */
    for (int i = 0; i < e.n; i++) {
        ck_assert_str_eq(s_str(e.data[i], "id"), "chatcmpl-ab12");
        ck_assert_str_eq(s_str(e.data[i], "object"), "chat.completion.chunk");
        ck_assert_str_eq(s_str(e.data[i], "model"), "m");
        ck_assert_str_eq(s_str(e.data[i], "system_fingerprint"), "fp_1");
        ck_assert(s_null(e.data[i], "usage")); /* include_usage: null until the last chunk */
        ck_assert_int_eq(s_int(e.data[i], "choices.0.index"), 0);
        ck_assert(s_null(e.data[i], "choices.0.finish_reason"));
        ck_assert(s_null(e.data[i], "choices.0.logprobs"));
    }
    ck_assert_str_eq(s_str(e.data[0], "choices.0.delta.role"), "assistant");
    ck_assert_str_eq(s_str(e.data[0], "choices.0.delta.content"), "");
    ck_assert_str_eq(s_str(e.data[1], "choices.0.delta.content"), "Hel");
    ck_assert_ptr_null(s_get(e.data[1], "choices.0.delta.role"));
    s_token(a, 1, "", &out); /* an incomplete UTF-8 character: nothing to say */
    s_parse(&out, &e);
    ck_assert_int_eq(e.n, 0);
    s_token(a, 2, "lo", &out);
    s_done(a, MSG_FINISH_LENGTH, &out);
    msg_usage_t u = {.prompt_tokens = 7, .completion_tokens = 3};
    ck_assert_int_eq(serve_answer_stream_end(&a, 1, &u, &out), 0);
    s_parse(&out, &e);
    ck_assert_int_eq(e.n, 3);
    ck_assert_str_eq(s_str(e.data[0], "choices.0.delta.content"), "lo");
    ck_assert_int_eq(s_keys(s_get(e.data[1], "choices.0.delta")), 0); /* {} */
    ck_assert_str_eq(s_str(e.data[1], "choices.0.finish_reason"), "length");
    ck_assert_int_eq(s_keys(s_get(e.data[2], "choices")), 0); /* the usage chunk */
    ck_assert_int_eq(s_int(e.data[2], "usage.prompt_tokens"), 7);
    ck_assert_int_eq(s_int(e.data[2], "usage.total_tokens"), 10);
    ck_assert(e.done);
    s_events_free(&e);
    base_buf_free(&out);
    serve_answer_destroy(&a);
    ck_assert_ptr_null(a);
    serve_answer_destroy(&a);
}
END_TEST

/* Under tools (auto): white space decides nothing; a '[' makes it calls, said each once
 * complete; then finish_reason tool_calls. */
START_TEST(chat_tool_call_deltas) {
    serve_answer_req_t q = s_req(SERVE_ANSWER_CHAT, true);
    q.tools = SERVE_OPENAI_TOOLS_AUTO;
    serve_answer_t *a = serve_answer_new(&q, 0);
    base_buf_t out = {0};
    s_events_t e = {0};
    s_token(a, 0, " \n", &out);
    s_parse(&out, &e);
    ck_assert_int_eq(e.n, 1); /* the role chunk only: the blank decides nothing */
    const char *pieces[] = {"[{\"name\": \"get_", "weather\", \"arguments\": {\"city\": \"Paris\"}",
                            "}, {\"name\": \"f\", ", "\"arguments\": {}}]"};
    int said[4];
    for (int i = 0; i < 4; i++) {
        s_token(a, i + 1, pieces[i], &out);
        s_parse(&out, &e);
        said[i] = e.n;
        if (i == 1) { /* the first call is complete: its two deltas */
            ck_assert_int_eq(s_int(e.data[0], "choices.0.delta.tool_calls.0.index"), 0);
            ck_assert_str_eq(s_str(e.data[0], "choices.0.delta.tool_calls.0.id"), "call_ab12_0");
            ck_assert_str_eq(s_str(e.data[0], "choices.0.delta.tool_calls.0.type"), "function");
            ck_assert_str_eq(s_str(e.data[0], "choices.0.delta.tool_calls.0.function.name"),
                             "get_weather");
            ck_assert_str_eq(s_str(e.data[0], "choices.0.delta.tool_calls.0.function.arguments"),
                             "");
            ck_assert_ptr_null(s_get(e.data[0], "choices.0.delta.content"));
            ck_assert_ptr_null(s_get(e.data[1], "choices.0.delta.tool_calls.0.id"));
            ck_assert_ptr_null(s_get(e.data[1], "choices.0.delta.tool_calls.0.function.name"));
            ck_assert_str_eq(s_str(e.data[1], "choices.0.delta.tool_calls.0.function.arguments"),
                             "{\"city\": \"Paris\"}");
        }
        if (i == 3) {
            ck_assert_int_eq(s_int(e.data[0], "choices.0.delta.tool_calls.0.index"), 1);
            ck_assert_str_eq(s_str(e.data[1], "choices.0.delta.tool_calls.0.function.arguments"),
                             "{}");
        }
    }
    ck_assert_int_eq(said[0], 0); /* the name is not complete */
    ck_assert_int_eq(said[1], 2);
    ck_assert_int_eq(said[2], 0);
    ck_assert_int_eq(said[3], 2);
    s_done(a, MSG_FINISH_STOP, &out);
    s_parse(&out, &e);
    ck_assert_int_eq(e.n, 1);
    ck_assert_str_eq(s_str(e.data[0], "choices.0.finish_reason"), "tool_calls");
    /* not streamed: the same calls as message.tool_calls, content null */
    serve_answer_req_t q2 = s_req(SERVE_ANSWER_CHAT, false);
    q2.tools = SERVE_OPENAI_TOOLS_AUTO;
    serve_answer_t *b = serve_answer_new(&q2, 0);
    char all[256];
    snprintf(all, sizeof all, " \n%s%s%s%s", pieces[0], pieces[1], pieces[2], pieces[3]);
    msg_done_t d = {.finish_reason = MSG_FINISH_STOP, .text = strdup(all), .text_len = strlen(all)};
    ck_assert_int_eq(serve_answer_done(b, &d, &out), 0);
    ck_assert_ptr_null(d.text); /* taken */
    msg_usage_t u = {0};
    cJSON *o = serve_answer_json(&b, 1, &u);
    ck_assert_str_eq(s_str(o, "object"), "chat.completion");
    ck_assert(s_null(o, "choices.0.message.content"));
    ck_assert_str_eq(s_str(o, "choices.0.message.tool_calls.1.function.name"), "f");
    ck_assert_str_eq(s_str(o, "choices.0.finish_reason"), "tool_calls");
    cJSON_Delete(o);
    s_events_free(&e);
    base_buf_free(&out);
    serve_answer_destroy(&a);
    serve_answer_destroy(&b);
}
END_TEST

/* A call array cut at max_tokens: the call begun is never said; finish "length". Text
 * under tools auto: what was held, then as it comes. */
START_TEST(chat_tool_cut_and_text) {
    serve_answer_req_t q = s_req(SERVE_ANSWER_CHAT, true);
    q.tools = SERVE_OPENAI_TOOLS_FORCED;
    serve_answer_t *a = serve_answer_new(&q, 0);
    base_buf_t out = {0};
    s_events_t e = {0};
    s_token(a, 0, "[{\"name\": \"f\", \"arguments\": {\"a\": 1", &out);
    s_done(a, MSG_FINISH_LENGTH, &out);
    s_parse(&out, &e);
    ck_assert_int_eq(e.n, 2); /* role, finish */
    ck_assert_str_eq(s_str(e.data[1], "choices.0.finish_reason"), "length");
    ck_assert_ptr_null(s_get(e.data[1], "choices.0.delta.tool_calls"));
    serve_answer_destroy(&a);
    q.tools = SERVE_OPENAI_TOOLS_AUTO;
    a = serve_answer_new(&q, 0);
    s_token(a, 0, "  ", &out);
    s_token(a, 1, "Sure", &out);
    s_token(a, 2, "!", &out);
    s_parse(&out, &e);
    ck_assert_int_eq(e.n, 3);
    ck_assert_str_eq(s_str(e.data[1], "choices.0.delta.content"), "  Sure");
    ck_assert_str_eq(s_str(e.data[2], "choices.0.delta.content"), "!");
    s_events_free(&e);
    base_buf_free(&out);
    serve_answer_destroy(&a);
}
END_TEST

/* The deprecated functions: delta.function_call {name, arguments ""}, then {arguments};
 * finish_reason function_call; not streamed: message.function_call. */
START_TEST(chat_functions) {
    serve_answer_req_t q = s_req(SERVE_ANSWER_CHAT, true);
    q.tools = SERVE_OPENAI_TOOLS_FORCED;
    q.functions = true;
    serve_answer_t *a = serve_answer_new(&q, 0);
    base_buf_t out = {0};
    s_events_t e = {0};
    s_token(a, 0, "[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]", &out);
    s_done(a, MSG_FINISH_STOP, &out);
    s_parse(&out, &e);
    ck_assert_int_eq(e.n, 4);
    ck_assert_str_eq(s_str(e.data[1], "choices.0.delta.function_call.name"), "f");
    ck_assert_str_eq(s_str(e.data[1], "choices.0.delta.function_call.arguments"), "");
    ck_assert_ptr_null(s_get(e.data[1], "choices.0.delta.tool_calls"));
    ck_assert_str_eq(s_str(e.data[2], "choices.0.delta.function_call.arguments"), "{\"a\": 1}");
    ck_assert_str_eq(s_str(e.data[3], "choices.0.finish_reason"), "function_call");
    serve_answer_destroy(&a);
    q.stream = false;
    a = serve_answer_new(&q, 0);
    msg_done_t d = {.finish_reason = MSG_FINISH_STOP,
                    .text = strdup("[{\"name\": \"f\", "
                                   "\"arguments\": {}}]")};
    d.text_len = strlen(d.text);
    serve_answer_done(a, &d, &out);
    msg_usage_t u = {0};
    cJSON *o = serve_answer_json(&a, 1, &u);
    ck_assert_str_eq(s_str(o, "choices.0.message.function_call.name"), "f");
    ck_assert_str_eq(s_str(o, "choices.0.message.function_call.arguments"), "{}");
    ck_assert_ptr_null(s_get(o, "choices.0.message.tool_calls"));
    ck_assert_str_eq(s_str(o, "choices.0.finish_reason"), "function_call");
    cJSON_Delete(o);
    s_events_free(&e);
    base_buf_free(&out);
    serve_answer_destroy(&a);
}
END_TEST

/* Log-probabilities under tools: the tokens held go out with the next chunk; every token
 * once, in order. */
START_TEST(chat_logprobs_under_tools) {
    serve_answer_req_t q = s_req(SERVE_ANSWER_CHAT, true);
    q.tools = SERVE_OPENAI_TOOLS_AUTO;
    q.logprobs = true;
    serve_answer_t *a = serve_answer_new(&q, 0);
    base_buf_t out = {0};
    s_events_t e = {0};
    const char *toks[] = {" ", "Hi", " there"};
    for (int i = 0; i < 3; i++) {
        msg_token_t t = {.index = i,
                         .text = (char *)toks[i],
                         .text_len = strlen(toks[i]),
                         .has_logprob = true,
                         .logprob = -0.5f * (float)(i + 1)};
        snprintf(t.piece, sizeof t.piece, "%s", toks[i]);
        ck_assert_int_eq(serve_answer_token(a, &t, &out), 0);
    }
    s_parse(&out, &e);
    ck_assert_int_eq(e.n, 3); /* role; " Hi" with two tokens; " there" */
    ck_assert_str_eq(s_str(e.data[1], "choices.0.delta.content"), " Hi");
    ck_assert_int_eq(cJSON_GetArraySize(s_get(e.data[1], "choices.0.logprobs.content")), 2);
    ck_assert_str_eq(s_str(e.data[1], "choices.0.logprobs.content.1.token"), "Hi");
    ck_assert_double_eq_tol(s_get(e.data[1], "choices.0.logprobs.content.1.logprob")->valuedouble,
                            -1.0, 1e-6);
    ck_assert_int_eq(cJSON_GetArraySize(s_get(e.data[2], "choices.0.logprobs.content")), 1);
    s_events_free(&e);
    base_buf_free(&out);
    serve_answer_destroy(&a);
}
END_TEST

/* ---- legacy completions */

START_TEST(completions_stream) {
    serve_answer_req_t q = s_req(SERVE_ANSWER_COMPLETIONS, true);
    q.logprobs = true;
    serve_answer_t *a = serve_answer_new(&q, 0);
    base_buf_t out = {0};
    s_events_t e = {0};
    const char *toks[] = {"Once", " upon"};
    for (int i = 0; i < 2; i++) {
        msg_token_t t = {.index = i,
                         .text = (char *)toks[i],
                         .text_len = strlen(toks[i]),
                         .has_logprob = true,
                         .logprob = -1};
        snprintf(t.piece, sizeof t.piece, "%s", toks[i]);
        serve_answer_token(a, &t, &out);
    }
    s_done(a, MSG_FINISH_STOP, &out);
    msg_usage_t u = {0};
    serve_answer_stream_end(&a, 1, &u, &out);
    s_parse(&out, &e);
    ck_assert_int_eq(e.n, 3); /* no role chunk; two texts; the finish */
    ck_assert_str_eq(s_str(e.data[0], "object"), "text_completion");
    ck_assert_str_eq(s_str(e.data[1], "choices.0.text"), " upon");
    ck_assert_int_eq(s_int(e.data[1], "choices.0.logprobs.text_offset.0"), 4);
    ck_assert_str_eq(s_str(e.data[2], "choices.0.finish_reason"), "stop");
    ck_assert(e.done);
    s_events_free(&e);
    base_buf_free(&out);
    serve_answer_destroy(&a);
}
END_TEST

START_TEST(stream_error) {
    serve_answer_req_t q = s_req(SERVE_ANSWER_CHAT, true);
    serve_answer_t *a = serve_answer_new(&q, 0);
    base_buf_t out = {0};
    s_events_t e = {0};
    s_token(a, 0, "x", &out);
    ck_assert_int_eq(serve_answer_stream_error(a, MSG_CODE_OVERLOADED, "too busy", &out), 0);
    s_parse(&out, &e);
    ck_assert_int_eq(e.n, 3);
    ck_assert_str_eq(s_str(e.data[2], "error.message"), "too busy");
    ck_assert_str_eq(s_str(e.data[2], "error.type"), "rate_limit_error");
    ck_assert_str_eq(s_str(e.data[2], "error.code"), "overloaded");
    ck_assert(e.done);
    serve_answer_destroy(&a);
    q = s_req(SERVE_ANSWER_RESPONSES, true);
    a = serve_answer_new(&q, 0);
    s_token(a, 0, "x", &out);
    ck_assert_int_eq(serve_answer_stream_error(a, MSG_CODE_INTERNAL, "worker lost", &out), 0);
    s_parse(&out, &e);
    ck_assert_str_eq(e.type[e.n - 1], "response.failed");
    ck_assert_str_eq(s_str(e.data[e.n - 1], "response.status"), "failed");
    ck_assert_str_eq(s_str(e.data[e.n - 1], "response.error.message"), "worker lost");
    ck_assert(!e.done); /* Responses streams have no [DONE] */
    s_events_free(&e);
    base_buf_free(&out);
    serve_answer_destroy(&a);
}
END_TEST

/* ---- Responses */

START_TEST(responses_stream_order) {
    cJSON *echo = cJSON_Parse("{\"instructions\": \"Be brief.\", \"tools\": []}");
    serve_answer_req_t q = s_req(SERVE_ANSWER_RESPONSES, true);
    q.echo = echo;
    serve_answer_t *a = serve_answer_new(&q, 0);
    base_buf_t out = {0};
    s_events_t e = {0};
    s_token(a, 0, "Hi", &out);
    s_token(a, 1, " you", &out);
    s_done(a, MSG_FINISH_STOP, &out);
    msg_usage_t u = {.prompt_tokens = 5, .completion_tokens = 2, .cached_tokens = 1};
    ck_assert_int_eq(serve_answer_stream_end(&a, 1, &u, &out), 0);
    s_parse(&out, &e);
    const char *want[] = {"response.created",           "response.in_progress",
                          "response.output_item.added", "response.content_part.added",
                          "response.output_text.delta", "response.output_text.delta",
                          "response.output_text.done",  "response.content_part.done",
                          "response.output_item.done",  "response.completed"};
    ck_assert_int_eq(e.n, 10);
    for (int i = 0; i < e.n; i++) {
        ck_assert_str_eq(e.type[i], want[i]);
        ck_assert_str_eq(s_str(e.data[i], "type"), want[i]); /* the data says it too */
        ck_assert_int_eq(s_int(e.data[i], "sequence_number"), i);
    }
    ck_assert_str_eq(s_str(e.data[0], "response.status"), "in_progress");
    ck_assert_int_eq(cJSON_GetArraySize(s_get(e.data[0], "response.output")), 0);
    ck_assert_str_eq(s_str(e.data[0], "response.instructions"), "Be brief.");
    ck_assert_str_eq(s_str(e.data[2], "item.type"), "message");
    ck_assert_str_eq(s_str(e.data[2], "item.id"), "msg_ab12");
    ck_assert_str_eq(s_str(e.data[3], "part.type"), "output_text");
    ck_assert_str_eq(s_str(e.data[4], "delta"), "Hi");
    ck_assert_str_eq(s_str(e.data[4], "item_id"), "msg_ab12");
    ck_assert_str_eq(s_str(e.data[5], "delta"), " you");
    ck_assert_str_eq(s_str(e.data[6], "text"), "Hi you");
    ck_assert_str_eq(s_str(e.data[8], "item.status"), "completed");
    ck_assert_str_eq(s_str(e.data[8], "item.content.0.text"), "Hi you");
    const cJSON *r = s_get(e.data[9], "response");
    ck_assert_str_eq(s_str(r, "id"), "resp_ab12");
    ck_assert_str_eq(s_str(r, "object"), "response");
    ck_assert_str_eq(s_str(r, "status"), "completed");
    ck_assert(s_null(r, "error"));
    ck_assert(s_null(r, "incomplete_details"));
    ck_assert_str_eq(s_str(r, "output.0.content.0.text"), "Hi you");
    ck_assert_int_eq(s_int(r, "usage.input_tokens"), 5);
    ck_assert_int_eq(s_int(r, "usage.input_tokens_details.cached_tokens"), 1);
    ck_assert_int_eq(s_int(r, "usage.output_tokens"), 2);
    ck_assert_int_eq(s_int(r, "usage.total_tokens"), 7);
    ck_assert(!e.done);
    /* the assistant turn it leaves for previous_response_id */
    cJSON *m = serve_answer_message(a);
    ck_assert_str_eq(s_str(m, "role"), "assistant");
    ck_assert_str_eq(s_str(m, "content"), "Hi you");
    cJSON_Delete(m);
    s_events_free(&e);
    base_buf_free(&out);
    serve_answer_destroy(&a);
    cJSON_Delete(echo);
}
END_TEST

/* Calls: each a function_call item (added in progress, its arguments, done); cut at
 * max_output_tokens: incomplete, with the reason. */
START_TEST(responses_calls_and_incomplete) {
    serve_answer_req_t q = s_req(SERVE_ANSWER_RESPONSES, true);
    q.tools = SERVE_OPENAI_TOOLS_FORCED;
    serve_answer_t *a = serve_answer_new(&q, 0);
    base_buf_t out = {0};
    s_events_t e = {0};
    s_token(a, 0, "[{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\"", &out);
    s_done(a, MSG_FINISH_LENGTH, &out);
    msg_usage_t u = {0};
    serve_answer_stream_end(&a, 1, &u, &out);
    s_parse(&out, &e);
    const char *want[] = {"response.created",
                          "response.in_progress",
                          "response.output_item.added",
                          "response.function_call_arguments.delta",
                          "response.function_call_arguments.done",
                          "response.output_item.done",
                          "response.incomplete"};
    ck_assert_int_eq(e.n, 7);
    for (int i = 0; i < e.n; i++)
        ck_assert_str_eq(e.type[i], want[i]);
    ck_assert_str_eq(s_str(e.data[2], "item.type"), "function_call");
    ck_assert_str_eq(s_str(e.data[2], "item.status"), "in_progress");
    ck_assert_str_eq(s_str(e.data[2], "item.call_id"), "call_ab12_0");
    ck_assert_str_eq(s_str(e.data[2], "item.arguments"), "");
    ck_assert_str_eq(s_str(e.data[3], "delta"), "{\"a\": 1}");
    ck_assert_str_eq(s_str(e.data[4], "arguments"), "{\"a\": 1}");
    ck_assert_str_eq(s_str(e.data[5], "item.status"), "completed");
    const cJSON *r = s_get(e.data[6], "response");
    ck_assert_str_eq(s_str(r, "status"), "incomplete");
    ck_assert_str_eq(s_str(r, "incomplete_details.reason"), "max_output_tokens");
    ck_assert_int_eq(cJSON_GetArraySize(s_get(r, "output")), 1); /* g was cut: not said */
    ck_assert_str_eq(s_str(r, "output.0.name"), "f");
    s_events_free(&e);
    base_buf_free(&out);
    serve_answer_destroy(&a);
}
END_TEST

/* ---- the answer cache (docs/HTTP.md, "The answer cache") */

/* A non-streamed answer of text whose done says cache kind (entry, similarity). */
static void s_done_cached(serve_answer_t *a, const char *text, int kind, const char *entry,
                          float sim) {
    msg_done_t d = {.finish_reason = MSG_FINISH_EOS,
                    .text = strdup(text),
                    .text_len = strlen(text),
                    .cache = kind,
                    .cache_similarity = sim};
    snprintf(d.cache_entry, sizeof d.cache_entry, "%s", entry);
    ck_assert_int_eq(serve_answer_done(a, &d, NULL), 0);
    ck_assert_ptr_null(d.text); /* taken */
}

/* An answer from the cache says so in strata_cache and the header; a generated one has
 * no strata_cache, and its header says miss only when the request asked for the cache. */
START_TEST(cache_hit_said) {
    serve_answer_req_t q = s_req(SERVE_ANSWER_CHAT, false);
    q.cache = MSG_CACHE_ONLY_EXACT;
    serve_answer_t *a = serve_answer_new(&q, 0);
    s_done_cached(a, "Paris.", MSG_CACHE_EXACT, "chatcmpl-x1", 1.0f);
    msg_usage_t u = {0};
    cJSON *o = serve_answer_json(&a, 1, &u);
    ck_assert_str_eq(s_str(o, "choices.0.message.content"), "Paris.");
    ck_assert_str_eq(s_str(o, "strata_cache.hit"), "exact");
    ck_assert_str_eq(s_str(o, "strata_cache.entry"), "chatcmpl-x1");
    ck_assert(s_get(o, "strata_cache.similarity")->valuedouble == 1.0);
    ck_assert_ptr_null(s_get(o, "choices.0.strata_cache")); /* n = 1: at the top only */
    ck_assert_str_eq(serve_answer_cache_header(&a, 1), "exact");
    cJSON_Delete(o);
    serve_answer_destroy(&a);
    /* semantic: the similarity in 4 decimals */
    a = serve_answer_new(&q, 0);
    s_done_cached(a, "Paris.", MSG_CACHE_SEMANTIC, "chatcmpl-x2", 0.97f);
    o = serve_answer_json(&a, 1, &u);
    ck_assert_str_eq(s_str(o, "strata_cache.hit"), "semantic");
    ck_assert(s_get(o, "strata_cache.similarity")->valuedouble == 0.97);
    ck_assert_str_eq(serve_answer_cache_header(&a, 1), "semantic");
    cJSON_Delete(o);
    serve_answer_destroy(&a);
    /* generated: no strata_cache; miss when asked for, else no header */
    a = serve_answer_new(&q, 0);
    s_done_cached(a, "Paris.", MSG_CACHE_MISS, "", -2);
    o = serve_answer_json(&a, 1, &u);
    ck_assert_ptr_null(s_get(o, "strata_cache"));
    ck_assert_str_eq(serve_answer_cache_header(&a, 1), "miss");
    cJSON_Delete(o);
    q.cache = MSG_CACHE_DEFAULT;
    ck_assert_ptr_null(serve_answer_cache_header(&a, 1));
    q.cache = MSG_CACHE_OFF;
    ck_assert_ptr_null(serve_answer_cache_header(&a, 1));
    serve_answer_destroy(&a);
}
END_TEST

/* n > 1: the top says the first choice's, each choice its own; legacy completions and
 * Responses say it the same way. */
START_TEST(cache_choices_and_apis) {
    serve_answer_req_t q = s_req(SERVE_ANSWER_COMPLETIONS, false);
    serve_answer_t *a[2] = {serve_answer_new(&q, 0), serve_answer_new(&q, 1)};
    s_done_cached(a[0], "x", MSG_CACHE_MISS, "", -2);
    s_done_cached(a[1], "y", MSG_CACHE_KB, "faq-1", 0.9f);
    msg_usage_t u = {0};
    cJSON *o = serve_answer_json(a, 2, &u);
    ck_assert_ptr_null(s_get(o, "strata_cache"));
    ck_assert_ptr_null(s_get(o, "choices.0.strata_cache"));
    ck_assert_str_eq(s_str(o, "choices.1.strata_cache.hit"), "kb");
    ck_assert_str_eq(s_str(o, "choices.1.strata_cache.entry"), "faq-1");
    ck_assert_ptr_null(serve_answer_cache_header(a, 2));
    cJSON_Delete(o);
    serve_answer_destroy(&a[0]);
    serve_answer_destroy(&a[1]);
    q = s_req(SERVE_ANSWER_RESPONSES, false);
    a[0] = serve_answer_new(&q, 0);
    s_done_cached(a[0], "Paris.", MSG_CACHE_EXACT, "resp_x", 1.0f);
    o = serve_answer_json(a, 1, &u);
    ck_assert_str_eq(s_str(o, "object"), "response");
    ck_assert_str_eq(s_str(o, "strata_cache.hit"), "exact");
    cJSON_Delete(o);
    serve_answer_destroy(&a[0]);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_answer");
    TCase *tc = tcase_create("serve_answer");
    tcase_add_test(tc, chat_stream);
    tcase_add_test(tc, chat_tool_call_deltas);
    tcase_add_test(tc, chat_tool_cut_and_text);
    tcase_add_test(tc, chat_functions);
    tcase_add_test(tc, chat_logprobs_under_tools);
    tcase_add_test(tc, completions_stream);
    tcase_add_test(tc, stream_error);
    tcase_add_test(tc, responses_stream_order);
    tcase_add_test(tc, responses_calls_and_incomplete);
    tcase_add_test(tc, cache_hit_said);
    tcase_add_test(tc, cache_choices_and_apis);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)

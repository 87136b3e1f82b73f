/* test_serve_openai.c - serve/serve_openai: OpenAI request bodies turned into the client
 * protocol's generate, field by field: what each implemented field sets, the defaults
 * when it is absent, the 400 (naming the field) of a wrong type, a value out of range, an
 * unsupported value or an unknown field, and the fields accepted because they cannot
 * change the answer.  No HTTP, no sockets: JSON text in, a msg_generate_t out. */
#include "grammar.h"
#include "serve_openai.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CHAT SERVE_OPENAI_CHAT
#define COMPL SERVE_OPENAI_COMPLETIONS
#define SEED 12345u /* the "random" seed the gateway would draw */

static const serve_openai_defaults_t s_def = {.max_tokens = 256, .top_k = 0, .min_p = 0};
static serve_openai_request_t s_req;
static serve_openai_bad_t s_why;

/* Parse json (a C string) as a request of api into s_req / s_why. */
static int s_parse(serve_openai_api_t api, const char *json) {
    serve_openai_request_clear(&s_req);
    return serve_openai_request_parse(&s_req, api, json, strlen(json), &s_def, SEED, &s_why);
}

/* A chat body: one user message "hi" and the given extra fields ("" or `, "k": v`). */
static int s_chat(const char *extra) {
    char json[2048];
    snprintf(json, sizeof json, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]%s}",
             extra);
    return s_parse(CHAT, json);
}

static int s_compl(const char *extra) {
    char json[2048];
    snprintf(json, sizeof json, "{\"prompt\": \"Once\"%s}", extra);
    return s_parse(COMPL, json);
}

/* The body was refused with 400 naming param. */
static void s_refused(int rc, const char *param) {
    ck_assert_msg(rc == -EINVAL, "expected -EINVAL naming '%s', got %d", param, rc);
    ck_assert_str_eq(s_why.param, param);
    ck_assert_msg(strlen(s_why.msg) > 0, "no message");
}

static void s_teardown(void) {
    serve_openai_request_clear(&s_req);
}

/* ---- the prompt */

START_TEST(chat_defaults) {
    ck_assert_int_eq(s_chat(""), 0);
    const msg_generate_t *g = &s_req.gen;
    ck_assert_int_eq(g->n_messages, 1);
    ck_assert_str_eq(g->messages[0].role, "user");
    ck_assert_str_eq(g->messages[0].content, "hi");
    ck_assert_uint_eq(g->messages[0].content_len, 2);
    ck_assert_ptr_null(g->prompt);
    /* OpenAI's defaults, not the protocol's: until the context ends (the worker lowers the
     * gateway's ceiling to what the context leaves after the prompt) */
    ck_assert_int_eq(g->max_tokens, s_def.max_tokens);
    ck_assert(g->fit_context);
    ck_assert_float_eq(g->sampling.temperature, 1.0f);
    ck_assert_float_eq(g->sampling.top_p, 1.0f);
    ck_assert_int_eq(g->sampling.top_k, 0);
    ck_assert_float_eq(g->sampling.min_p, 0.0f);
    ck_assert_float_eq(g->sampling.repeat_penalty, 1.0f);
    ck_assert(g->has_seed);
    ck_assert_uint_eq(g->sampling.seed, SEED);
    ck_assert(!g->stream);
    ck_assert(!g->logprobs);
    ck_assert_int_eq(g->n_stop, 0);
    ck_assert(!s_req.include_usage);
}
END_TEST

START_TEST(chat_messages) {
    ck_assert_int_eq(s_parse(CHAT, "{\"messages\": [{\"role\": \"developer\", \"content\": \"be "
                                   "brief\"}, {\"role\": \"user\", \"content\": [{\"type\": "
                                   "\"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": "
                                   "\"b\"}]}, {\"role\": \"assistant\", \"content\": null}]}"),
                     0);
    const msg_generate_t *g = &s_req.gen;
    ck_assert_int_eq(g->n_messages, 3);
    ck_assert_str_eq(g->messages[0].role, "system"); /* developer is OpenAI's newer name */
    ck_assert_str_eq(g->messages[1].content, "ab");  /* text parts joined */
    ck_assert_str_eq(g->messages[2].content, "");    /* null content: empty */
    s_refused(s_parse(CHAT, "{}"), "messages");
    s_refused(s_parse(CHAT, "{\"messages\": []}"), "messages");
    s_refused(s_parse(CHAT, "{\"messages\": \"hi\"}"), "messages");
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"function\", \"content\": \"x\"}]}"),
              "messages[0].role");
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"user\"}]}"), "messages[0].content");
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
                            "\"image_url\"}]}]}"),
              "messages[0].content");
    /* a message key strata does not know is refused, naming it, not dropped */
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", "
                            "\"weight\": 2}]}"),
              "messages[0].weight");
}
END_TEST

/* The standard keys of a message (OpenAI's request schema): each rendered, dropped where it
 * cannot change the answer, or refused naming it. */
START_TEST(message_keys) {
    /* name: accepted and dropped (the chat templates have no place for it) */
    ck_assert_int_eq(s_parse(CHAT, "{\"messages\": [{\"role\": \"system\", \"content\": \"s\", "
                                   "\"name\": \"ops\"}, {\"role\": \"user\", \"content\": "
                                   "\"x\", \"name\": \"bob\"}]}"),
                     0);
    ck_assert_int_eq(s_req.gen.n_messages, 2);
    ck_assert_str_eq(s_req.gen.messages[0].content, "s");
    ck_assert_str_eq(s_req.gen.messages[1].content, "x");
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", "
                            "\"name\": 5}]}"),
              "messages[0].name");
    /* an assistant message as the openai SDK returns it (model_dump), replayed as history */
    ck_assert_int_eq(s_parse(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                                   "{\"content\": \"Hello!\", \"refusal\": null, \"role\": "
                                   "\"assistant\", \"annotations\": [], \"audio\": null, "
                                   "\"function_call\": null, \"tool_calls\": []}, {\"role\": "
                                   "\"user\", \"content\": \"and?\"}]}"),
                     0);
    ck_assert_int_eq(s_req.gen.n_messages, 3);
    ck_assert_str_eq(s_req.gen.messages[1].role, "assistant");
    ck_assert_str_eq(s_req.gen.messages[1].content, "Hello!"); /* tool_calls [] is no call */
    /* a refusal is the turn's text (after its content, if any); refusal parts too */
    ck_assert_int_eq(s_parse(CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": "
                                   "null, \"refusal\": \"I can't.\"}]}"),
                     0);
    ck_assert_str_eq(s_req.gen.messages[0].content, "I can't.");
    ck_assert_int_eq(s_parse(CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": "
                                   "[{\"type\": \"text\", \"text\": \"a\"}, {\"type\": "
                                   "\"refusal\", \"refusal\": \"b\"}], \"refusal\": \"c\"}]}"),
                     0);
    ck_assert_str_eq(s_req.gen.messages[0].content, "ab\nc");
    /* the deprecated function_call renders as a call array of one */
    ck_assert_int_eq(s_parse(CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": "
                                   "null, \"function_call\": {\"name\": \"f\", \"arguments\": "
                                   "\"{\\\"a\\\": 1}\"}}]}"),
                     0);
    ck_assert_str_eq(s_req.gen.messages[0].content, "[{\"name\":\"f\",\"arguments\":{\"a\":1}}]");
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"assistant\", \"function_call\": "
                            "{\"name\": \"f\"}}]}"),
              "messages[0].function_call");
    /* what would change the answer and cannot be rendered: refused, naming it */
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\", "
                            "\"audio\": {\"id\": \"audio_1\"}}]}"),
              "messages[0].audio");
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\", "
                            "\"annotations\": 5}]}"),
              "messages[0].annotations");
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", "
                            "\"refusal\": \"no\"}]}"),
              "messages[0].refusal"); /* an assistant's key */
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", "
                            "\"tool_call_id\": \"c\"}]}"),
              "messages[0].tool_call_id"); /* a tool's key */
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
                            "\"refusal\", \"refusal\": \"no\"}]}]}"),
              "messages[0].content"); /* refusal parts are an assistant's */
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": {}}]}"),
              "messages[0].content");
}
END_TEST

/* ---- tools */

/* A conversation with a call and its result renders, turn by turn, exactly as docs/HTTP.md
 * says: the assistant's text, a newline, its calls as the answer format; the tool's result
 * as a user turn naming the call. */
START_TEST(tool_turns_rendered) {
    ck_assert_int_eq(
        s_parse(CHAT,
                "{\"messages\": ["
                "{\"role\": \"user\", \"content\": \"Weather in Paris and Rome?\"},"
                "{\"role\": \"assistant\", \"content\": \"Let me look.\", \"tool_calls\": ["
                "{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": "
                "\"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}},"
                "{\"id\": \"call_2\", \"type\": \"function\", \"function\": {\"name\": "
                "\"get_weather\", \"arguments\": \"not json\"}}]},"
                "{\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"sunny, 21 C\"},"
                "{\"role\": \"tool\", \"tool_call_id\": \"call_2\", \"content\": [{\"type\": "
                "\"text\", \"text\": \"rain, \"}, {\"type\": \"text\", \"text\": \"14 C\"}]}]}"),
        0);
    const msg_generate_t *g = &s_req.gen;
    ck_assert_int_eq(g->n_messages, 4); /* no tools: no system turn */
    ck_assert_str_eq(g->messages[0].role, "user");
    ck_assert_str_eq(g->messages[1].role, "assistant");
    ck_assert_str_eq(g->messages[1].content,
                     "Let me look.\n"
                     "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}},"
                     "{\"name\":\"get_weather\",\"arguments\":\"not json\"}]");
    ck_assert_str_eq(g->messages[2].role, "user");
    ck_assert_str_eq(g->messages[2].content, "Result of tool call call_1:\nsunny, 21 C");
    ck_assert_str_eq(g->messages[3].role, "user");
    ck_assert_str_eq(g->messages[3].content, "Result of tool call call_2:\nrain, 14 C");
    for (int i = 0; i < g->n_messages; i++)
        ck_assert_uint_eq(g->messages[i].content_len, strlen(g->messages[i].content));
    /* a call with no text: the calls alone */
    ck_assert_int_eq(s_parse(CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": "
                                   "null, \"tool_calls\": [{\"id\": \"c\", \"type\": "
                                   "\"function\", \"function\": {\"name\": \"f\", "
                                   "\"arguments\": \"{}\"}}]}]}"),
                     0);
    ck_assert_str_eq(s_req.gen.messages[0].content, "[{\"name\":\"f\",\"arguments\":{}}]");
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}"),
              "messages[0].tool_call_id");
    s_refused(s_parse(CHAT, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": "
                            "[{\"id\": \"c\", \"function\": {\"name\": \"f\"}}]}]}"),
              "messages[0].tool_calls");
}
END_TEST

/* The tools' grammar holds the answer to exactly one call when parallel_tool_calls is false,
 * to 1..8 when it is true (the default). */
static const char s_one_tool[] =
    ", \"tool_choice\": \"required\", \"tools\": [{\"type\": \"function\", \"function\": "
    "{\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}]";

/* Whether the request's grammar takes text as a whole answer. */
static bool s_grammar_takes(const char *text) {
    char err[256];
    grammar_t *gr = grammar_new(s_req.gen.grammar, err, sizeof err);
    ck_assert_msg(gr != NULL, "%s", err);
    grammar_state_t *st = grammar_state_new(gr);
    bool ok =
        grammar_state_accept_bytes(st, text, strlen(text)) == 0 && grammar_state_accepting(st);
    grammar_state_destroy(&st);
    grammar_destroy(&gr);
    return ok;
}

START_TEST(parallel_tool_calls_limit) {
    static const char one[] = "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}]";
    static const char two[] = "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}},"
                              "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}]";
    char extra[1024];
    snprintf(extra, sizeof extra, "%s, \"parallel_tool_calls\": false", s_one_tool);
    ck_assert_int_eq(s_chat(extra), 0);
    ck_assert_int_eq(s_req.tools, SERVE_OPENAI_TOOLS_FORCED);
    ck_assert_ptr_nonnull(s_req.gen.grammar);
    ck_assert(s_grammar_takes(one));
    ck_assert(!s_grammar_takes(two));
    ck_assert_ptr_nonnull(strstr(s_req.gen.messages[0].content, "exactly one"));
    ck_assert_int_eq(s_chat(s_one_tool), 0); /* parallel_tool_calls: true by default */
    ck_assert(s_grammar_takes(one));
    ck_assert(s_grammar_takes(two));
}
END_TEST

/* The deprecated functions / function_call: the same tools, one call at most. */
START_TEST(functions_as_tools) {
    static const char fn[] = ", \"functions\": [{\"name\": \"get_weather\", \"parameters\": "
                             "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
                             "\"string\"}}, \"required\": [\"city\"]}}]";
    static const char one[] = "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}]";
    static const char two[] = "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}},"
                              "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}]";
    char extra[1024];
    ck_assert_int_eq(s_chat(fn), 0); /* function_call auto by default, as tools */
    ck_assert(s_req.functions);
    ck_assert_int_eq(s_req.tools, SERVE_OPENAI_TOOLS_AUTO);
    ck_assert(s_grammar_takes(one));
    ck_assert(!s_grammar_takes(two)); /* parallel_tool_calls false */
    snprintf(extra, sizeof extra, "%s, \"function_call\": {\"name\": \"get_weather\"}", fn);
    ck_assert_int_eq(s_chat(extra), 0);
    ck_assert_int_eq(s_req.tools, SERVE_OPENAI_TOOLS_FORCED);
    snprintf(extra, sizeof extra, "%s, \"function_call\": \"none\"", fn);
    ck_assert_int_eq(s_chat(extra), 0);
    ck_assert_int_eq(s_req.tools, SERVE_OPENAI_TOOLS_NONE);
    ck_assert_ptr_null(s_req.gen.grammar);
    snprintf(extra, sizeof extra, "%s%s", fn, s_one_tool);
    s_refused(s_chat(extra), "functions"); /* both forms at once */
    s_refused(s_chat(", \"function_call\": {\"name\": \"f\"}"), "function_call");
    snprintf(extra, sizeof extra, "%s, \"function_call\": \"required\"", fn);
    s_refused(s_chat(extra), "function_call");
    /* tools together with logprobs: accepted */
    snprintf(extra, sizeof extra, "%s, \"logprobs\": true", s_one_tool);
    ck_assert_int_eq(s_chat(extra), 0);
    ck_assert(s_req.gen.logprobs);
}
END_TEST

/* The calls of an answer, as message.tool_calls: all of a closed array; of an array cut at
 * max_tokens, those whose name and arguments are complete; text is not calls. */
START_TEST(tool_calls_of_answer) {
    static const char full[] = "[{\"name\": \"f\", \"arguments\": {\"a\": [1, \"]\"]}}, "
                               "{\"name\": \"g\", \"arguments\": {}}]";
    bool complete;
    cJSON *c = serve_openai_tool_calls(full, strlen(full), "chatcmpl-abc", &complete);
    ck_assert_ptr_nonnull(c);
    ck_assert(complete);
    char *js = cJSON_PrintUnformatted(c);
    ck_assert_str_eq(js,
                     "[{\"id\":\"call_abc_0\",\"type\":\"function\",\"function\":{\"name\":"
                     "\"f\",\"arguments\":\"{\\\"a\\\": [1, \\\"]\\\"]}\"}},{\"id\":\"call_abc_1\","
                     "\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]");
    free(js);
    cJSON_Delete(c);
    /* cut anywhere: the calls complete before the cut, never a piece of the next */
    const size_t f_end = (size_t)(strstr(full, "]}") + 2 - full); /* f's arguments end */
    const size_t g_end = strlen(full) - 2;                        /* g's: {}}] */
    for (size_t cut = 0; cut < strlen(full); cut++) {
        c = serve_openai_tool_calls(full, cut, "chatcmpl-abc", &complete);
        ck_assert_msg(c != NULL || cut == 0, "cut at %zu: not a call array", cut);
        int n = c ? cJSON_GetArraySize(c) : 0;
        int want = cut >= g_end ? 2 : cut >= f_end ? 1 : 0;
        ck_assert_msg(n == want, "cut at %zu: %d calls, expected %d", cut, n, want);
        ck_assert(!complete);
        if (n)
            ck_assert_str_eq(
                cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(c, 0), "function"),
                                    "arguments")
                    ->valuestring,
                "{\"a\": [1, \"]\"]}");
        cJSON_Delete(c);
    }
    /* text (tool_choice auto) is the content */
    ck_assert_ptr_null(serve_openai_tool_calls("It is sunny.", 12, "chatcmpl-abc", &complete));
    ck_assert_ptr_null(serve_openai_tool_calls("[]", 2, "chatcmpl-abc", &complete));
}
END_TEST

START_TEST(completions_prompt) {
    ck_assert_int_eq(s_compl(""), 0);
    ck_assert_str_eq(s_req.gen.prompt, "Once");
    ck_assert_uint_eq(s_req.gen.prompt_len, 4);
    ck_assert_ptr_null(s_req.gen.messages);
    ck_assert_int_eq(s_parse(COMPL, "{\"prompt\": [\"Twice\"]}"), 0);
    ck_assert_str_eq(s_req.gen.prompt, "Twice");
    s_refused(s_parse(COMPL, "{}"), "prompt");
    s_refused(s_parse(COMPL, "{\"prompt\": [\"a\", \"b\"]}"), "prompt");
    s_refused(s_parse(COMPL, "{\"prompt\": [1, 2, 3]}"), "prompt"); /* token ids */
    s_refused(s_parse(COMPL, "{\"prompt\": \"\"}"), "prompt");
}
END_TEST

/* ---- length and sampling */

START_TEST(max_tokens) {
    ck_assert_int_eq(s_chat(", \"max_tokens\": 7"), 0);
    ck_assert_int_eq(s_req.gen.max_tokens, 7);
    ck_assert(!s_req.gen.fit_context); /* given: exactly that ceiling, or 400 */
    ck_assert_int_eq(s_chat(", \"max_tokens\": 7, \"max_completion_tokens\": 9"), 0);
    ck_assert_int_eq(s_req.gen.max_tokens, 9);             /* the newer name wins */
    ck_assert_int_eq(s_chat(", \"max_tokens\": null"), 0); /* null: absent */
    ck_assert_int_eq(s_req.gen.max_tokens, s_def.max_tokens);
    ck_assert(s_req.gen.fit_context);
    /* the gateway's option at 0 (its default): the protocol's limit is the only ceiling */
    const serve_openai_defaults_t open = {.max_tokens = 0};
    const char *body = "{\"prompt\": \"Once\"}";
    serve_openai_request_clear(&s_req);
    ck_assert_int_eq(
        serve_openai_request_parse(&s_req, COMPL, body, strlen(body), &open, SEED, &s_why), 0);
    ck_assert_int_eq(s_req.gen.max_tokens, MSG_MAX_TOKENS);
    ck_assert(s_req.gen.fit_context);
    s_refused(s_chat(", \"max_tokens\": 1.5"), "max_tokens");
    s_refused(s_chat(", \"max_tokens\": 0"), "max_tokens");
    s_refused(s_chat(", \"max_tokens\": 8193"), "max_tokens");
    s_refused(s_chat(", \"max_completion_tokens\": \"9\""), "max_completion_tokens");
}
END_TEST

START_TEST(sampling_fields) {
    ck_assert_int_eq(s_chat(", \"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 40, \"min_p\": "
                            "0.05, \"repeat_penalty\": 1.1, \"seed\": 7"),
                     0);
    const msg_sampling_t *p = &s_req.gen.sampling;
    ck_assert_float_eq_tol(p->temperature, 0.5f, 1e-6);
    ck_assert_float_eq_tol(p->top_p, 0.9f, 1e-6);
    ck_assert_int_eq(p->top_k, 40);
    ck_assert_float_eq_tol(p->min_p, 0.05f, 1e-6);
    ck_assert_float_eq_tol(p->repeat_penalty, 1.1f, 1e-6);
    ck_assert_uint_eq(p->seed, 7);
    /* OpenAI's penalties and logit_bias (token ids as strings), to the generate */
    ck_assert_int_eq(s_chat(", \"presence_penalty\": -1.5, \"frequency_penalty\": 2, "
                            "\"logit_bias\": {\"15\": -100, \"0\": 100, \"49151\": 0.5}"),
                     0);
    p = &s_req.gen.sampling;
    ck_assert_float_eq(p->presence_penalty, -1.5f);
    ck_assert_float_eq(p->frequency_penalty, 2.0f);
    ck_assert_int_eq(s_req.gen.n_logit_bias, 3);
    ck_assert_int_eq(s_req.gen.logit_bias[0].token, 15);
    ck_assert_float_eq(s_req.gen.logit_bias[0].bias, -100.0f);
    ck_assert_int_eq(s_req.gen.logit_bias[1].token, 0);
    ck_assert_float_eq(s_req.gen.logit_bias[2].bias, 0.5f);
    ck_assert_int_eq(s_compl(", \"logit_bias\": {}, \"presence_penalty\": 0"), 0);
    ck_assert_int_eq(s_req.gen.n_logit_bias, 0);
    ck_assert_float_eq(s_req.gen.sampling.presence_penalty, 0.0f);
    s_refused(s_chat(", \"presence_penalty\": 2.5"), "presence_penalty");
    s_refused(s_chat(", \"frequency_penalty\": -3"), "frequency_penalty");
    s_refused(s_chat(", \"logit_bias\": {\"15\": -101}"), "logit_bias");
    s_refused(s_chat(", \"logit_bias\": {\"abc\": 1}"), "logit_bias");
    s_refused(s_chat(", \"logit_bias\": {\"-3\": 1}"), "logit_bias");
    s_refused(s_chat(", \"logit_bias\": {\"7\": \"1\"}"), "logit_bias");
    s_refused(s_chat(", \"logit_bias\": {\"7\": 1, \"07\": 2}"), "logit_bias");
    s_refused(s_chat(", \"logit_bias\": [1]"), "logit_bias");
    {
        /* 1024 entries are accepted, 1025 are not */
        char *many = malloc(1025 * 16 + 128), *q = many;
        q += sprintf(q, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                        "\"logit_bias\": {");
        char *at1024 = NULL;
        for (int i = 0; i < 1025; i++) {
            if (i == 1024)
                at1024 = q;
            q += sprintf(q, "%s\"%d\": 1", i ? ", " : "", i);
        }
        sprintf(q, "}}");
        s_refused(s_parse(CHAT, many), "logit_bias");
        sprintf(at1024, "}}");
        ck_assert_int_eq(s_parse(CHAT, many), 0);
        ck_assert_int_eq(s_req.gen.n_logit_bias, 1024);
        free(many);
    }
    /* top_p 0 keeps the most likely token only: greedy */
    ck_assert_int_eq(s_chat(", \"top_p\": 0"), 0);
    ck_assert_float_eq(s_req.gen.sampling.temperature, 0.0f);
    ck_assert_int_eq(s_chat(", \"seed\": 18446744073709551615"), 0);
    ck_assert_uint_eq(s_req.gen.sampling.seed, UINT64_MAX);
    s_refused(s_chat(", \"temperature\": \"hot\""), "temperature");
    s_refused(s_chat(", \"temperature\": 2.5"), "temperature");
    s_refused(s_chat(", \"top_p\": -0.1"), "top_p");
    s_refused(s_chat(", \"top_k\": 1.5"), "top_k");
    s_refused(s_chat(", \"min_p\": 2"), "min_p");
    s_refused(s_chat(", \"repeat_penalty\": 0"), "repeat_penalty");
    s_refused(s_chat(", \"seed\": -1"), "seed");
}
END_TEST

START_TEST(stop_strings) {
    ck_assert_int_eq(s_chat(", \"stop\": \"\\n\""), 0);
    ck_assert_int_eq(s_req.gen.n_stop, 1);
    ck_assert_str_eq(s_req.gen.stop[0], "\n");
    ck_assert_int_eq(s_chat(", \"stop\": [\"a\", \"bc\"]"), 0);
    ck_assert_int_eq(s_req.gen.n_stop, 2);
    ck_assert_str_eq(s_req.gen.stop[1], "bc");
    s_refused(s_chat(", \"stop\": 5"), "stop");
    s_refused(s_chat(", \"stop\": [5]"), "stop");
    s_refused(s_chat(", \"stop\": [\"\"]"), "stop");
    s_refused(s_chat(", \"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]"),
              "stop");
    char big[200];
    snprintf(big, sizeof big, ", \"stop\": \"%0*d\"", MSG_MAX_STOP_BYTES + 1, 0);
    s_refused(s_chat(big), "stop");
}
END_TEST

/* ---- the answer's shape */

START_TEST(stream_and_usage) {
    ck_assert_int_eq(s_chat(", \"stream\": true, \"stream_options\": {\"include_usage\": true}"),
                     0);
    ck_assert(s_req.gen.stream);
    ck_assert(s_req.include_usage);
    s_refused(s_chat(", \"stream\": 1"), "stream");
    s_refused(s_chat(", \"stream_options\": true"), "stream_options");
    s_refused(s_chat(", \"stream_options\": {\"include_usage\": 1}"),
              "stream_options.include_usage");
    s_refused(s_chat(", \"stream_options\": {\"chunk_size\": 3}"), "stream_options.chunk_size");
    /* obfuscation pads the chunks, it does not change them: accepted */
    ck_assert_int_eq(s_chat(", \"stream\": true, \"stream_options\": {\"include_obfuscation\": "
                            "false}"),
                     0);
    ck_assert(!s_req.include_usage);
    s_refused(s_chat(", \"stream_options\": {\"include_obfuscation\": \"no\"}"),
              "stream_options.include_obfuscation");
}
END_TEST

START_TEST(logprobs_chat_and_legacy) {
    ck_assert_int_eq(s_chat(", \"logprobs\": true, \"top_logprobs\": 3"), 0);
    ck_assert(s_req.gen.logprobs);
    ck_assert_int_eq(s_req.gen.top_logprobs, 3);
    ck_assert_int_eq(s_chat(", \"logprobs\": true"), 0);
    ck_assert_int_eq(s_req.gen.top_logprobs, 0);
    s_refused(s_chat(", \"top_logprobs\": 2"), "top_logprobs"); /* needs logprobs true */
    s_refused(s_chat(", \"logprobs\": true, \"top_logprobs\": 21"), "top_logprobs");
    s_refused(s_chat(", \"logprobs\": 2"), "logprobs"); /* chat: a boolean */
    /* legacy completions: logprobs is the number of alternatives */
    ck_assert_int_eq(s_compl(", \"logprobs\": 2"), 0);
    ck_assert(s_req.gen.logprobs);
    ck_assert_int_eq(s_req.gen.top_logprobs, 2);
    ck_assert_int_eq(s_compl(", \"logprobs\": 0"), 0);
    ck_assert(s_req.gen.logprobs);
    s_refused(s_compl(", \"logprobs\": 6"), "logprobs");
    s_refused(s_compl(", \"top_logprobs\": 2"), "top_logprobs"); /* a chat field */
}
END_TEST

/* ---- the fields that are not implemented: each one accepted only where it cannot
 * change the answer.  This list is the test's own, written from OpenAI's API reference;
 * it must cover every ACCEPT, ONLY and REFUSE row of the module's table. */

typedef struct {
    const char *name;
    unsigned api;
    const char *ok;  /* a value accepted (NULL: none is) */
    const char *bad; /* a value refused with 400 naming the field (NULL: none is) */
} s_case_t;

static const s_case_t s_cases[] = {
    {"model", CHAT | COMPL, "\"gpt-4o\"", "5"},
    {"user", CHAT | COMPL, "\"u-1\"", "{}"},
    {"safety_identifier", CHAT | COMPL, "\"u-1\"", "1"},
    {"metadata", CHAT | COMPL, "{\"k\": \"v\"}", "\"k\""},
    {"service_tier", CHAT | COMPL, "\"auto\"", "1"},
    {"prompt_cache_key", CHAT | COMPL, "\"k\"", "true"},
    {"cache_prompt", CHAT | COMPL, "true", "\"yes\""},
    {"parallel_tool_calls", CHAT, "false", "0"},
    {"n", CHAT | COMPL, "2", "17"},
    {"best_of", COMPL, "1", "3"},
    {"echo", COMPL, "false", "true"},
    {"prompt_cache_retention", CHAT | COMPL, "\"24h\"", "24"},
    {"prompt_cache_options", CHAT | COMPL, "{\"mode\": \"implicit\", \"ttl\": \"30m\"}", "\"30m\""},
    {"store", CHAT | COMPL, "true", "1"},
    {"prediction", CHAT, "{\"type\": \"content\", \"content\": \"x\"}", "\"x\""},
    {"tools", CHAT, "[]",
     "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
     "{\"type\": \"object\", \"properties\": {\"a\": {\"not\": {}}}}}}]"},
    {"tool_choice", CHAT, "\"none\"", "\"required\""},
    {"functions", CHAT, "[]", "[1]"},
    {"function_call", CHAT, "\"auto\"", "{\"name\": \"f\"}"},
    {"response_format", CHAT, "{\"type\": \"text\"}",
     "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"n\", \"schema\": {\"not\": {}}}}"},
    {"modalities", CHAT, "[\"text\"]", "[\"text\", \"audio\"]"},
    {"suffix", COMPL, NULL, "\"end\""},
    {"audio", CHAT, NULL, "{\"voice\": \"alloy\", \"format\": \"wav\"}"},
    {"moderation", CHAT, NULL, "{\"model\": \"omni-moderation-latest\"}"},
    {"reasoning_effort", CHAT, NULL, "\"low\""},
    {"verbosity", CHAT, NULL, "\"low\""},
    {"web_search_options", CHAT, NULL, "{}"},
};
#define N_CASES (int)(sizeof s_cases / sizeof s_cases[0])

/* The generate of a body is the same as that of the minimal body (the field changed
 * nothing). */
static void s_same_as_minimal(serve_openai_api_t api) {
    msg_generate_t g = s_req.gen;
    char prompt0[64] = "";
    if (g.n_messages)
        snprintf(prompt0, sizeof prompt0, "%s", g.messages[0].content);
    ck_assert_int_eq(api == CHAT ? s_chat("") : s_compl(""), 0);
    const msg_generate_t *m = &s_req.gen;
    ck_assert_int_eq(g.max_tokens, m->max_tokens);
    ck_assert_float_eq(g.sampling.temperature, m->sampling.temperature);
    ck_assert_float_eq(g.sampling.top_p, m->sampling.top_p);
    ck_assert_int_eq(g.sampling.top_k, m->sampling.top_k);
    ck_assert_uint_eq(g.sampling.seed, m->sampling.seed);
    ck_assert_int_eq(g.stream, m->stream);
    ck_assert_int_eq(g.logprobs, m->logprobs);
    ck_assert_int_eq(g.n_stop, m->n_stop);
    ck_assert_int_eq(g.n_messages, m->n_messages);
    if (m->n_messages)
        ck_assert_str_eq(prompt0, m->messages[0].content);
}

START_TEST(response_format_mapped) {
    /* text: nothing; json_object: the flag */
    ck_assert_int_eq(s_chat(", \"response_format\": {\"type\": \"text\"}"), 0);
    ck_assert_ptr_null(s_req.gen.json_schema);
    ck_assert(!s_req.gen.json_object);
    ck_assert_int_eq(s_chat(", \"response_format\": {\"type\": \"json_object\"}"), 0);
    ck_assert(s_req.gen.json_object);
    ck_assert_ptr_null(s_req.gen.json_schema);
    /* json_schema: the schema's text, which the engine compiles */
    ck_assert_int_eq(s_chat(", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                            "{\"name\": \"p\", \"strict\": true, \"schema\": {\"type\": "
                            "\"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}"),
                     0);
    ck_assert(!s_req.gen.json_object);
    ck_assert_ptr_nonnull(s_req.gen.json_schema);
    ck_assert_uint_eq(s_req.gen.json_schema_len, strlen(s_req.gen.json_schema));
    char err[256];
    char *gbnf =
        grammar_schema_to_gbnf(s_req.gen.json_schema, s_req.gen.json_schema_len, err, sizeof err);
    ck_assert_msg(gbnf != NULL, "%s", err);
    free(gbnf);
    ck_assert_ptr_nonnull(strstr(s_req.gen.json_schema, "\"a\""));
    /* what the engine cannot enforce: 400 naming the path and keyword */
    ck_assert_int_eq(s_chat(", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                            "{\"name\": \"p\", \"schema\": {\"type\": \"object\", \"properties\": "
                            "{\"n\": {\"type\": \"integer\", \"multipleOf\": 3}}}}}"),
                     -EINVAL);
    ck_assert_str_eq(s_why.param, "response_format");
    ck_assert_ptr_nonnull(strstr(s_why.msg, "#/properties/n"));
    ck_assert_ptr_nonnull(strstr(s_why.msg, "multipleOf"));
    /* other shapes */
    ck_assert_int_eq(s_chat(", \"response_format\": {\"type\": \"xml\"}"), -EINVAL);
    ck_assert_int_eq(s_chat(", \"response_format\": {\"type\": \"json_schema\"}"), -EINVAL);
    ck_assert_int_eq(s_chat(", \"response_format\": {\"type\": \"json_object\", \"x\": 1}"),
                     -EINVAL);
    ck_assert_int_eq(s_chat(", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                            "{\"name\": \"p\", \"schema\": 5}}"),
                     -EINVAL);
    /* the legacy completions API does not know it */
    ck_assert_int_ne(s_parse(COMPL, "{\"prompt\": \"a\", \"response_format\": {\"type\": "
                                    "\"json_object\"}}"),
                     0);
}
END_TEST

START_TEST(unimplemented_fields_one_by_one) {
    for (int i = 0; i < N_CASES; i++) {
        const s_case_t *c = &s_cases[i];
        for (serve_openai_api_t api = CHAT; api <= COMPL; api++) {
            if (!(c->api & api))
                continue;
            char extra[512];
            if (c->ok) {
                snprintf(extra, sizeof extra, ", \"%s\": %s", c->name, c->ok);
                int rc = api == CHAT ? s_chat(extra) : s_compl(extra);
                ck_assert_msg(rc == 0, "%s = %s refused: %s", c->name, c->ok, s_why.msg);
                s_same_as_minimal(api);
            }
            if (c->bad) {
                snprintf(extra, sizeof extra, ", \"%s\": %s", c->name, c->bad);
                s_refused(api == CHAT ? s_chat(extra) : s_compl(extra), c->name);
            }
            /* JSON null is absent, whatever the field */
            snprintf(extra, sizeof extra, ", \"%s\": null", c->name);
            ck_assert_int_eq(api == CHAT ? s_chat(extra) : s_compl(extra), 0);
        }
    }
}
END_TEST

/* n: the choices (1 when absent), 1..SERVE_CHOICES_MAX on both endpoints; the generate
 * is the one of every choice (the gateway sets each one's id and seed). */
START_TEST(n_choices) {
    ck_assert_int_eq(s_chat(""), 0);
    ck_assert_int_eq(s_req.n, 1);
    ck_assert_int_eq(s_chat(", \"n\": 16, \"seed\": 5"), 0);
    ck_assert_int_eq(s_req.n, 16);
    ck_assert(s_req.gen.has_seed);
    ck_assert_uint_eq(s_req.gen.sampling.seed, 5);
    ck_assert_int_eq(s_compl(", \"n\": 3"), 0);
    ck_assert_int_eq(s_req.n, 3);
    s_refused(s_chat(", \"n\": 17"), "n");
    s_refused(s_compl(", \"n\": 0"), "n");
    s_refused(s_chat(", \"n\": 1.5"), "n");
}
END_TEST

/* Every row of the module's table that is not implemented has a case above, with the
 * same endpoints, and every implemented row is known to the endpoints it says. */
START_TEST(table_covered) {
    int n;
    const serve_openai_field_t *t = serve_openai_fields(&n);
    ck_assert_int_gt(n, 20);
    for (int i = 0; i < n; i++) {
        for (unsigned api = CHAT; api <= COMPL; api <<= 1)
            if (t[i].api & api)
                ck_assert_ptr_eq(serve_openai_field(api, t[i].name), &t[i]);
        ck_assert_ptr_nonnull(t[i].does);
        if (t[i].rule == SERVE_OPENAI_ONLY)
            ck_assert_ptr_nonnull(t[i].only);
        if (t[i].rule == SERVE_OPENAI_MAP)
            continue;
        int found = -1;
        for (int k = 0; k < N_CASES; k++)
            if (!strcmp(s_cases[k].name, t[i].name))
                found = k;
        ck_assert_msg(found >= 0, "the field '%s' of the table has no test case", t[i].name);
        ck_assert_uint_eq(s_cases[found].api, t[i].api);
        ck_assert_int_eq(s_cases[found].ok != NULL, t[i].rule != SERVE_OPENAI_REFUSE);
    }
}
END_TEST

/* ---- the answer cache's extension fields (docs/HTTP.md, "The answer cache") */

START_TEST(cache_fields) {
    /* absent: the server's mode, delta and TTL, no tags */
    ck_assert_int_eq(s_chat(", \"temperature\": 0"), 0);
    const msg_generate_t *g = &s_req.gen;
    ck_assert_int_eq(g->cache, MSG_CACHE_DEFAULT);
    ck_assert(g->cache_delta == 0);
    ck_assert(!g->has_cache_ttl);
    ck_assert_str_eq(g->cache_tags, "");
    ck_assert(!g->cache_sampled);
    /* each one, on both endpoints */
    ck_assert_int_eq(s_chat(", \"temperature\": 0, \"cache\": \"exact\", \"cache_delta\": 0.02, "
                            "\"cache_ttl\": 3600, \"cache_tags\": \"faq,en\""),
                     0);
    ck_assert_int_eq(g->cache, MSG_CACHE_ONLY_EXACT);
    ck_assert_double_eq_tol(g->cache_delta, 0.02, 1e-12);
    ck_assert(g->has_cache_ttl);
    ck_assert_int_eq(g->cache_ttl_s, 3600);
    ck_assert_str_eq(g->cache_tags, "faq,en");
    ck_assert_int_eq(s_compl(", \"temperature\": 0, \"cache\": \"semantic\", \"cache_ttl\": 0"), 0);
    ck_assert_int_eq(g->cache, MSG_CACHE_ON_SEMANTIC);
    ck_assert(g->has_cache_ttl); /* 0: never expires, not "the server's" */
    ck_assert_int_eq(g->cache_ttl_s, 0);
    ck_assert_int_eq(s_chat(", \"cache\": \"off\", \"cache_delta\": 0.5"), 0);
    ck_assert_int_eq(g->cache, MSG_CACHE_OFF);
    ck_assert(g->cache_delta == 0.5);
    /* tags as an array: joined with commas */
    ck_assert_int_eq(s_chat(", \"cache_tags\": [\"faq\", \"en\", \"v2\"]"), 0);
    ck_assert_str_eq(g->cache_tags, "faq,en,v2");
    ck_assert_int_eq(s_chat(", \"cache_tags\": []"), 0);
    ck_assert_str_eq(g->cache_tags, "");
    char tags[256]; /* 128 bytes joined: the limit */
    snprintf(tags, sizeof tags, ", \"cache_tags\": [\"%063d\", \"%064d\"]", 0, 0);
    ck_assert_int_eq(s_chat(tags), 0);
    ck_assert_uint_eq(strlen(g->cache_tags), MSG_MAX_CACHE_TAGS_BYTES);
    ck_assert_int_eq(s_chat(", \"cache_sampled\": true"), 0);
    ck_assert(g->cache_sampled);
}
END_TEST

/* A bad value of each one: 400 naming it. */
START_TEST(cache_fields_refused) {
    s_refused(s_chat(", \"cache\": \"bogus\""), "cache");
    s_refused(s_chat(", \"cache\": \"default\""), "cache"); /* absent is the default */
    s_refused(s_chat(", \"cache\": true"), "cache");
    s_refused(s_compl(", \"cache\": \"EXACT\""), "cache");
    s_refused(s_chat(", \"cache_delta\": 0"), "cache_delta");
    s_refused(s_chat(", \"cache_delta\": 0.6"), "cache_delta");
    s_refused(s_chat(", \"cache_delta\": -0.1"), "cache_delta");
    s_refused(s_chat(", \"cache_delta\": \"0.1\""), "cache_delta");
    s_refused(s_chat(", \"cache_ttl\": -1"), "cache_ttl");
    s_refused(s_chat(", \"cache_ttl\": 31536001"), "cache_ttl");
    s_refused(s_chat(", \"cache_ttl\": 1.5"), "cache_ttl");
    s_refused(s_compl(", \"cache_ttl\": \"60\""), "cache_ttl");
    s_refused(s_chat(", \"cache_tags\": 7"), "cache_tags");
    s_refused(s_chat(", \"cache_tags\": [\"a,b\"]"), "cache_tags");
    s_refused(s_chat(", \"cache_tags\": [\"a\", \"\"]"), "cache_tags");
    s_refused(s_chat(", \"cache_tags\": [\"a\", 1]"), "cache_tags");
    char tags[256];
    snprintf(tags, sizeof tags, ", \"cache_tags\": \"%0129d\"", 0);
    s_refused(s_chat(tags), "cache_tags");
    snprintf(tags, sizeof tags, ", \"cache_tags\": [\"%064d\", \"%064d\"]", 0, 0);
    s_refused(s_chat(tags), "cache_tags"); /* 129 bytes joined */
    s_refused(s_chat(", \"cache_sampled\": 1"), "cache_sampled");
}
END_TEST

/* The seed the gateway draws would make two equal requests two cache keys: a greedy
 * request and one with cache_sampled go without one; another sampled request without a
 * seed is never cached. */
START_TEST(cache_and_seed) {
    const msg_generate_t *g = &s_req.gen;
    ck_assert_int_eq(s_chat(", \"temperature\": 0, \"cache\": \"exact\""), 0);
    ck_assert(!g->has_seed);
    ck_assert_uint_eq(g->sampling.seed, 0);
    ck_assert_int_eq(g->cache, MSG_CACHE_ONLY_EXACT);
    ck_assert_int_eq(s_chat(", \"top_p\": 0"), 0); /* greedy too */
    ck_assert(!g->has_seed);
    ck_assert_int_eq(s_chat(", \"temperature\": 0.7, \"cache_sampled\": true"), 0);
    ck_assert(!g->has_seed);
    ck_assert_int_eq(g->cache, MSG_CACHE_DEFAULT);
    ck_assert_int_eq(s_chat(", \"temperature\": 0.7, \"cache\": \"exact\""), 0);
    ck_assert(g->has_seed);
    ck_assert_uint_eq(g->sampling.seed, SEED);
    ck_assert_int_eq(g->cache, MSG_CACHE_OFF);
    /* a seed given: kept, and the cache as asked */
    ck_assert_int_eq(s_chat(", \"temperature\": 0.7, \"seed\": 9, \"cache\": \"exact\""), 0);
    ck_assert(g->has_seed);
    ck_assert_uint_eq(g->sampling.seed, 9);
    ck_assert_int_eq(g->cache, MSG_CACHE_ONLY_EXACT);
    ck_assert_int_eq(s_chat(", \"temperature\": 0, \"seed\": 9"), 0);
    ck_assert(g->has_seed);
}
END_TEST

/* POST /v1/cache/invalidate's body: prefix, tag, all; at least one. */
START_TEST(cache_invalidate_body) {
    msg_cache_invalidate_t v;
    msg_cache_invalidate_init(&v);
    snprintf(v.id, sizeof v.id, "op1");
    const char *ok = "{\"prefix\": \"chatcmpl-\", \"tag\": \"faq\"}";
    ck_assert_int_eq(serve_openai_invalidate_parse(ok, strlen(ok), &v, &s_why), 0);
    ck_assert_str_eq(v.prefix, "chatcmpl-");
    ck_assert_str_eq(v.tag, "faq");
    ck_assert(!v.all);
    ck_assert_str_eq(v.id, "op1"); /* the caller's */
    ok = "{\"all\": true, \"tag\": null}";
    ck_assert_int_eq(serve_openai_invalidate_parse(ok, strlen(ok), &v, &s_why), 0);
    ck_assert(v.all);
    ck_assert_str_eq(v.prefix, "");
    ck_assert_str_eq(v.tag, "");
    static const struct {
        const char *body, *param;
    } bad[] = {
        {"{}", ""}, /* nothing to drop */
        {"{\"all\": false}", ""},
        {"[1]", ""},
        {"{\"all\": 1}", "all"},
        {"{\"prefix\": \"\"}", "prefix"},
        {"{\"prefix\": 3}", "prefix"},
        {"{\"tag\": [\"a\"]}", "tag"},
        {"{\"all\": true, \"everything\": true}", "everything"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = serve_openai_invalidate_parse(bad[i].body, strlen(bad[i].body), &v, &s_why);
        ck_assert_msg(rc == -EINVAL, "%s: %d", bad[i].body, rc);
        ck_assert_str_eq(s_why.param, bad[i].param);
    }
    char big[160];
    snprintf(big, sizeof big, "{\"prefix\": \"%065d\"}", 0); /* 65 bytes: an id has 64 */
    s_refused(serve_openai_invalidate_parse(big, strlen(big), &v, &s_why), "prefix");
    ck_assert_int_eq(serve_openai_invalidate_parse("{", 1, &v, &s_why), -EBADMSG);
}
END_TEST

/* A field strata does not know could change the answer: refused, naming it. */
START_TEST(unknown_fields_refused) {
    s_refused(s_chat(", \"ignore_eos\": true"), "ignore_eos");
    s_refused(s_chat(", \"min_tokens\": 3"), "min_tokens");
    s_refused(s_compl(", \"messages\": []"), "messages"); /* the other endpoint's field */
    s_refused(s_chat(", \"prompt\": \"x\""), "prompt");
    ck_assert_int_eq(s_chat(", \"ignore_eos\": null"), 0); /* null: absent */
}
END_TEST

/* ---- the body itself */

START_TEST(not_json_or_not_object) {
    ck_assert_int_eq(s_parse(CHAT, "{not json"), -EBADMSG);
    ck_assert_str_eq(s_why.param, "");
    ck_assert_int_eq(s_parse(CHAT, "{\"messages\": []} x"), -EBADMSG); /* trailing bytes */
    ck_assert_int_eq(s_parse(CHAT, ""), -EBADMSG);
    s_refused(s_parse(CHAT, "[1, 2]"), "");
    /* a NUL inside the body: not the JSON text it claims to be */
    serve_openai_request_clear(&s_req);
    ck_assert_int_eq(serve_openai_request_parse(&s_req, CHAT, "{}\0{}", 5, &s_def, 1, &s_why),
                     -EBADMSG);
}
END_TEST

/* The first error is the same whatever the order of the keys: the table's order. */
START_TEST(first_error_by_table_order) {
    s_refused(s_chat(", \"n\": 2, \"temperature\": 9"), "temperature");
    s_refused(s_chat(", \"temperature\": 9, \"n\": 2"), "temperature");
}
END_TEST

START_TEST(answers) {
    ck_assert_str_eq(serve_openai_finish(MSG_FINISH_LENGTH), "length");
    ck_assert_str_eq(serve_openai_finish(MSG_FINISH_STOP), "stop");
    msg_usage_t u = {0};
    u.prompt_tokens = 5;
    u.completion_tokens = 3;
    u.cached_tokens = 2;
    cJSON *o = serve_openai_usage(&u);
    char *s = cJSON_PrintUnformatted(o);
    ck_assert_str_eq(s, "{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8,"
                        "\"prompt_tokens_details\":{\"cached_tokens\":2}}");
    free(s);
    cJSON_Delete(o);
    serve_openai_request_clear(&s_req);
    serve_openai_request_clear(&s_req); /* safe twice */
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_openai");
    TCase *tc = tcase_create("serve_openai");
    tcase_add_checked_fixture(tc, NULL, s_teardown);
    tcase_add_test(tc, chat_defaults);
    tcase_add_test(tc, chat_messages);
    tcase_add_test(tc, message_keys);
    tcase_add_test(tc, tool_turns_rendered);
    tcase_add_test(tc, parallel_tool_calls_limit);
    tcase_add_test(tc, functions_as_tools);
    tcase_add_test(tc, tool_calls_of_answer);
    tcase_add_test(tc, completions_prompt);
    tcase_add_test(tc, max_tokens);
    tcase_add_test(tc, sampling_fields);
    tcase_add_test(tc, stop_strings);
    tcase_add_test(tc, stream_and_usage);
    tcase_add_test(tc, logprobs_chat_and_legacy);
    tcase_add_test(tc, response_format_mapped);
    tcase_add_test(tc, unimplemented_fields_one_by_one);
    tcase_add_test(tc, table_covered);
    tcase_add_test(tc, n_choices);
    tcase_add_test(tc, cache_fields);
    tcase_add_test(tc, cache_fields_refused);
    tcase_add_test(tc, cache_and_seed);
    tcase_add_test(tc, cache_invalidate_body);
    tcase_add_test(tc, unknown_fields_refused);
    tcase_add_test(tc, not_json_or_not_object);
    tcase_add_test(tc, first_error_by_table_order);
    tcase_add_test(tc, answers);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)

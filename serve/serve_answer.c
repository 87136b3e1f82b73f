/* serve_answer.c - see serve_answer.h.  The shapes are OpenAI's, as docs/HTTP.md gives
 * them: chat chunks {id, object, created, model, system_fingerprint, choices: [{index,
 * delta, logprobs, finish_reason}]}; legacy chunks with choices[].text; Responses events
 * "event: <type>" + {type, ..., sequence_number}.
 *
 * A streamed answer under tools is held until its first byte that is not white space
 * says text or calls; text then goes out as content as it comes, and each call once its
 * name and arguments are complete (chat: a first delta with its id and name, then one with
 * its arguments; Responses: a function_call item added, its arguments, done), so that a
 * call cut at max_tokens is never begun and the stream says what the non-streamed answer
 * says (serve_openai_tool_calls).  Log-probabilities of tokens held that way go out with
 * the next chunk of the choice. */
#include "serve_answer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct serve_answer_t {
    const serve_answer_req_t *req; /* borrowed */
    int index;                     /* the choice */
    bool started;                  /* stream: opened (role chunk / response.created) */
    base_buf_t text;               /* the completion so far (stream), or all of it (done) */
    size_t said;                   /* stream: bytes of text said as content (tool_mode 1) */
    int tool_mode;                 /* stream under tools: 0 undecided, 1 text, 2 calls */
    int n_calls;                   /* stream: calls said (each whole) */
    cJSON *lp;      /* logprobs: not streamed, the choice's; streamed, the tokens' not yet said */
    int finish;     /* msg_finish_t of done (MSG_FINISH_NONE before) */
    bool done;      /* done seen */
    uint64_t seq;   /* Responses: sequence_number of the next event */
    bool item_open; /* Responses: the message item and its text part were added */
    bool failed;    /* Responses: the stream ended with response.failed */
    bool oom;       /* an allocation failed: the caller ends the request */
    int cache;      /* done.cache: msg_cache_kind_t (0: generated) */
    char cache_entry[MSG_MAX_ID_BYTES + 1]; /* done.cache_entry */
    float cache_similarity;                 /* done.cache_similarity */
};

serve_answer_t *serve_answer_new(const serve_answer_req_t *req, int index) {
    serve_answer_t *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->req = req;
    a->index = index;
    a->finish = MSG_FINISH_NONE;
    return a;
}

void serve_answer_destroy(serve_answer_t **self_p) {
    serve_answer_t *a = self_p ? *self_p : NULL;
    if (!a)
        return;
    base_buf_free(&a->text);
    cJSON_Delete(a->lp);
    free(a);
    *self_p = NULL;
}

/* ---- ids: every one a function of the response id, so a resume gives the same */

/* What follows the response id's prefix (chatcmpl-, resp_). */
static const char *s_tail(const char *id) {
    const char *t = strpbrk(id, "-_");
    return t ? t + 1 : id;
}

static void s_item_id(const serve_answer_t *a, const char *kind, int i, char *out, size_t len) {
    if (i < 0)
        snprintf(out, len, "%s_%s", kind, s_tail(a->req->id));
    else
        snprintf(out, len, "%s_%s_%d", kind, s_tail(a->req->id), i);
}

/* ---- pieces shared by the APIs */

cJSON *serve_answer_error_obj(const char *message, const char *type, const char *param,
                              const char *code) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    if (param && *param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    if (code)
        cJSON_AddStringToObject(e, "code", code);
    else
        cJSON_AddNullToObject(e, "code");
    return o;
}

const char *serve_answer_error_type(int code) {
    return code == MSG_CODE_OVERLOADED                                ? "rate_limit_error"
           : code == MSG_CODE_BAD_REQUEST || code == MSG_CODE_CONTEXT ? "invalid_request_error"
                                                                      : "server_error";
}

/* A string of len bytes (not NUL-terminated) as a JSON string member. */
static void s_add_strn(cJSON *o, const char *key, const char *s, size_t len) {
    char *t = malloc(len + 1);
    if (t) {
        memcpy(t, s, len);
        t[len] = 0;
    }
    cJSON_AddStringToObject(o, key, t ? t : "");
    free(t);
}

/* The UTF-8 bytes of s as a JSON array of numbers (OpenAI's "bytes"). */
static cJSON *s_bytes(const char *s) {
    cJSON *arr = cJSON_CreateArray();
    for (const unsigned char *p = (const unsigned char *)s; arr && *p; p++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(*p));
    return arr;
}

/* Append one token's log-probabilities to the logprobs object lp, in the API's shape:
 * chat {"content": [{token, logprob, bytes, top_logprobs}]}; completions {"tokens",
 * "token_logprobs", "top_logprobs": [{text: logprob}], "text_offset"}. */
static void s_lp_add(const serve_answer_t *a, cJSON *lp, const char *piece, float logprob,
                     const msg_top_t *top, int n_top, size_t offset) {
    if (a->req->api != SERVE_ANSWER_COMPLETIONS) {
        cJSON *content = cJSON_GetObjectItem(lp, "content");
        if (!content)
            content = cJSON_AddArrayToObject(lp, "content");
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "token", piece);
        cJSON_AddNumberToObject(e, "logprob", logprob);
        cJSON_AddItemToObject(e, "bytes", s_bytes(piece));
        cJSON *tl = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int i = 0; i < n_top; i++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "token", top[i].text);
            cJSON_AddNumberToObject(x, "logprob", top[i].logprob);
            cJSON_AddItemToObject(x, "bytes", s_bytes(top[i].text));
            cJSON_AddItemToArray(tl, x);
        }
        cJSON_AddItemToArray(content, e);
        return;
    }
    const char *keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    cJSON *arr[4];
    for (int i = 0; i < 4; i++)
        if (!(arr[i] = cJSON_GetObjectItem(lp, keys[i])))
            arr[i] = cJSON_AddArrayToObject(lp, keys[i]);
    cJSON_AddItemToArray(arr[0], cJSON_CreateString(piece));
    cJSON_AddItemToArray(arr[1], cJSON_CreateNumber(logprob));
    cJSON *alts = cJSON_CreateObject();
    for (int i = 0; i < n_top; i++)
        if (!cJSON_GetObjectItem(alts, top[i].text))
            cJSON_AddNumberToObject(alts, top[i].text, top[i].logprob);
    cJSON_AddItemToArray(arr[2], alts);
    cJSON_AddItemToArray(arr[3], cJSON_CreateNumber((double)offset));
}

/* Whether the answer (text so far, or all of it) is a call array. */
static cJSON *s_calls(const serve_answer_t *a, bool *complete) {
    *complete = false;
    if (!a->req->tools)
        return NULL;
    return serve_openai_tool_calls(a->text.p ? a->text.p : "", a->text.len, a->req->id, complete);
}

/* Append "data: JSON\n\n" (chat, completions) or "event: TYPE\ndata: JSON\n\n" (Responses;
 * type NULL otherwise) to out; obj taken. */
static int s_sse(serve_answer_t *a, const char *type, cJSON *obj, base_buf_t *out) {
    char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    int rc = -ENOMEM;
    if (s && !(type && base_buf_printf(out, "event: %s\n", type)) &&
        !base_buf_printf(out, "data: %s\n\n", s))
        rc = 0;
    free(s);
    if (rc)
        a->oom = true;
    return rc;
}

/* ---- chat and completions */

static cJSON *s_head(const serve_answer_t *a, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", a->req->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)a->req->created);
    cJSON_AddStringToObject(o, "model", a->req->model);
    cJSON_AddStringToObject(o, "system_fingerprint", a->req->fingerprint);
    return o;
}

static const char *s_chunk_object(const serve_answer_t *a) {
    return a->req->api == SERVE_ANSWER_CHAT ? "chat.completion.chunk" : "text_completion";
}

/* A chunk of one choice with its delta (chat; taken) or text (completions), the
 * log-probabilities held so far, and finish ("": none). */
static int s_chunk(serve_answer_t *a, cJSON *delta, const char *text, size_t len,
                   const char *finish, base_buf_t *out) {
    bool chat = a->req->api == SERVE_ANSWER_CHAT;
    cJSON *o = s_head(a, s_chunk_object(a));
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", a->index);
    if (chat)
        cJSON_AddItemToObject(c, "delta", delta ? delta : cJSON_CreateObject());
    else
        s_add_strn(c, "text", text ? text : "", text ? len : 0);
    if (a->lp) {
        cJSON_AddItemToObject(c, "logprobs", a->lp);
        a->lp = NULL;
    } else {
        cJSON_AddNullToObject(c, "logprobs");
    }
    if (*finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    if (a->req->include_usage)
        cJSON_AddNullToObject(o, "usage");
    return s_sse(a, NULL, o, out);
}

/* A chunk of content (text, len bytes; chat: {"content"}, completions: text). */
static int s_chunk_text(serve_answer_t *a, const char *text, size_t len, base_buf_t *out) {
    cJSON *delta = NULL;
    if (a->req->api == SERVE_ANSWER_CHAT) {
        delta = cJSON_CreateObject();
        s_add_strn(delta, "content", text, len);
    }
    return s_chunk(a, delta, text, len, "", out);
}

/* ---- Responses */

static int s_event(serve_answer_t *a, const char *type, cJSON *o, base_buf_t *out) {
    cJSON_AddNumberToObject(o, "sequence_number", (double)a->seq++);
    return s_sse(a, type, o, out);
}

static cJSON *s_event_obj(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static cJSON *s_text_part(const char *text, size_t len) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    s_add_strn(p, "text", text, len);
    cJSON_AddArrayToObject(p, "annotations");
    cJSON_AddArrayToObject(p, "logprobs");
    return p;
}

/* The message item of the text said so far (done: the whole text). */
static cJSON *s_message_item(const serve_answer_t *a, const char *status, bool with_text) {
    char id[MSG_MAX_ID_BYTES + 16];
    s_item_id(a, "msg", -1, id, sizeof id);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "status", status);
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON *content = cJSON_AddArrayToObject(m, "content");
    if (with_text)
        cJSON_AddItemToArray(content, s_text_part(a->text.p ? a->text.p : "", a->text.len));
    return m;
}

/* The function_call item of call i (name, args: JSON text). */
static cJSON *s_call_item(const serve_answer_t *a, int i, const char *name, const char *args,
                          const char *status) {
    char id[MSG_MAX_ID_BYTES + 32];
    cJSON *m = cJSON_CreateObject();
    s_item_id(a, "fc", i, id, sizeof id);
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "type", "function_call");
    cJSON_AddStringToObject(m, "status", status);
    serve_openai_call_id(a->req->id, i, id, sizeof id);
    cJSON_AddStringToObject(m, "call_id", id);
    cJSON_AddStringToObject(m, "name", name);
    cJSON_AddStringToObject(m, "arguments", args);
    return m;
}

/* The output items of a finished answer: its calls, or one message. */
static cJSON *s_output(const serve_answer_t *a) {
    bool complete;
    cJSON *calls = s_calls(a, &complete), *items = cJSON_CreateArray();
    const char *status = a->finish == MSG_FINISH_LENGTH ? "incomplete" : "completed";
    if (!calls) {
        cJSON_AddItemToArray(items, s_message_item(a, status, true));
        return items;
    }
    int i = 0;
    for (cJSON *c = calls->child; c; c = c->next, i++) {
        const cJSON *fn = cJSON_GetObjectItem(c, "function");
        cJSON_AddItemToArray(items, s_call_item(a, i, cJSON_GetObjectItem(fn, "name")->valuestring,
                                                cJSON_GetObjectItem(fn, "arguments")->valuestring,
                                                "completed"));
    }
    cJSON_Delete(calls);
    return items;
}

static cJSON *s_response_usage(const msg_usage_t *u) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "input_tokens_details"), "cached_tokens",
                            u->cached_tokens);
    cJSON_AddNumberToObject(o, "output_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "output_tokens_details"), "reasoning_tokens",
                            0);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    return o;
}

/* The response object: status "in_progress" (no output yet), "completed", "incomplete"
 * (cut at max_output_tokens) or "failed" (err: the error object's inner part, taken). */
static cJSON *s_response(const serve_answer_t *a, const char *status, const msg_usage_t *u,
                         cJSON *err) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", a->req->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)a->req->created);
    cJSON_AddStringToObject(o, "status", status);
    if (err)
        cJSON_AddItemToObject(o, "error", err);
    else
        cJSON_AddNullToObject(o, "error");
    if (!strcmp(status, "incomplete"))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason",
                                "max_output_tokens");
    else
        cJSON_AddNullToObject(o, "incomplete_details");
    cJSON_AddStringToObject(o, "model", a->req->model);
    for (const cJSON *e = a->req->echo ? a->req->echo->child : NULL; e; e = e->next)
        cJSON_AddItemToObject(o, e->string, cJSON_Duplicate(e, true));
    bool finished = !strcmp(status, "completed") || !strcmp(status, "incomplete");
    cJSON_AddItemToObject(o, "output", finished ? s_output(a) : cJSON_CreateArray());
    if (u)
        cJSON_AddItemToObject(o, "usage", s_response_usage(u));
    else
        cJSON_AddNullToObject(o, "usage");
    return o;
}

static const char *s_status(const serve_answer_t *a) {
    return a->finish == MSG_FINISH_LENGTH ? "incomplete" : "completed";
}

/* Responses: the message item and its text part, added once. */
static int s_open_item(serve_answer_t *a, base_buf_t *out) {
    if (a->item_open)
        return 0;
    a->item_open = true;
    char id[MSG_MAX_ID_BYTES + 16];
    s_item_id(a, "msg", -1, id, sizeof id);
    cJSON *o = s_event_obj("response.output_item.added");
    cJSON_AddNumberToObject(o, "output_index", 0);
    cJSON_AddItemToObject(o, "item", s_message_item(a, "in_progress", false));
    if (s_event(a, "response.output_item.added", o, out))
        return -ENOMEM;
    o = s_event_obj("response.content_part.added");
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", 0);
    cJSON_AddNumberToObject(o, "content_index", 0);
    cJSON_AddItemToObject(o, "part", s_text_part("", 0));
    return s_event(a, "response.content_part.added", o, out);
}

/* Responses: the end of the message item (its text whole). */
static int s_close_item(serve_answer_t *a, base_buf_t *out) {
    if (s_open_item(a, out))
        return -ENOMEM;
    char id[MSG_MAX_ID_BYTES + 16];
    s_item_id(a, "msg", -1, id, sizeof id);
    const char *text = a->text.p ? a->text.p : "";
    cJSON *o = s_event_obj("response.output_text.done");
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", 0);
    cJSON_AddNumberToObject(o, "content_index", 0);
    cJSON_AddStringToObject(o, "text", text);
    cJSON_AddArrayToObject(o, "logprobs");
    if (s_event(a, "response.output_text.done", o, out))
        return -ENOMEM;
    o = s_event_obj("response.content_part.done");
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", 0);
    cJSON_AddNumberToObject(o, "content_index", 0);
    cJSON_AddItemToObject(o, "part", s_text_part(text, a->text.len));
    if (s_event(a, "response.content_part.done", o, out))
        return -ENOMEM;
    o = s_event_obj("response.output_item.done");
    cJSON_AddNumberToObject(o, "output_index", 0);
    cJSON_AddItemToObject(o, "item", s_message_item(a, s_status(a), true));
    return s_event(a, "response.output_item.done", o, out);
}

/* ---- saying text and calls, per API */

/* Content: text (len bytes) as it comes. */
static int s_say_text(serve_answer_t *a, const char *text, size_t len, base_buf_t *out) {
    a->said += len;
    if (a->req->api != SERVE_ANSWER_RESPONSES)
        return s_chunk_text(a, text, len, out);
    if (s_open_item(a, out))
        return -ENOMEM;
    char id[MSG_MAX_ID_BYTES + 16];
    s_item_id(a, "msg", -1, id, sizeof id);
    cJSON *o = s_event_obj("response.output_text.delta");
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", 0);
    cJSON_AddNumberToObject(o, "content_index", 0);
    s_add_strn(o, "delta", text, len);
    cJSON_AddArrayToObject(o, "logprobs");
    return s_event(a, "response.output_text.delta", o, out);
}

/* A chat tool-call delta: {index, (id, type when first), function: {name when first,
 * arguments}}; or, under functions, the deprecated {function_call: {name, arguments}}. */
static int s_chat_call(serve_answer_t *a, int i, const char *name, const char *args,
                       base_buf_t *out) {
    cJSON *delta = cJSON_CreateObject(), *fn;
    if (a->req->functions) {
        fn = cJSON_AddObjectToObject(delta, "function_call");
    } else {
        cJSON *calls = cJSON_AddArrayToObject(delta, "tool_calls"), *call = cJSON_CreateObject();
        cJSON_AddItemToArray(calls, call);
        cJSON_AddNumberToObject(call, "index", i);
        if (name) {
            char id[MSG_MAX_ID_BYTES + 32];
            serve_openai_call_id(a->req->id, i, id, sizeof id);
            cJSON_AddStringToObject(call, "id", id);
            cJSON_AddStringToObject(call, "type", "function");
        }
        fn = cJSON_AddObjectToObject(call, "function");
    }
    if (name)
        cJSON_AddStringToObject(fn, "name", name);
    cJSON_AddStringToObject(fn, "arguments", args);
    return s_chunk(a, delta, NULL, 0, "", out);
}

/* Call i, whole: its name and its arguments (JSON text). */
static int s_say_call(serve_answer_t *a, int i, const char *name, const char *args,
                      base_buf_t *out) {
    if (a->req->api != SERVE_ANSWER_RESPONSES)
        return s_chat_call(a, i, name, "", out) || s_chat_call(a, i, NULL, args, out) ? -ENOMEM : 0;
    char id[MSG_MAX_ID_BYTES + 32];
    s_item_id(a, "fc", i, id, sizeof id);
    cJSON *o = s_event_obj("response.output_item.added");
    cJSON_AddNumberToObject(o, "output_index", i);
    cJSON_AddItemToObject(o, "item", s_call_item(a, i, name, "", "in_progress"));
    if (s_event(a, "response.output_item.added", o, out))
        return -ENOMEM;
    /* the arguments come whole: one delta with all of them, then done */
    static const char *const ev[2][2] = {{"response.function_call_arguments.delta", "delta"},
                                         {"response.function_call_arguments.done", "arguments"}};
    for (int k = 0; k < 2; k++) {
        o = s_event_obj(ev[k][0]);
        cJSON_AddStringToObject(o, "item_id", id);
        cJSON_AddNumberToObject(o, "output_index", i);
        cJSON_AddStringToObject(o, ev[k][1], args);
        if (s_event(a, ev[k][0], o, out))
            return -ENOMEM;
    }
    o = s_event_obj("response.output_item.done");
    cJSON_AddNumberToObject(o, "output_index", i);
    cJSON_AddItemToObject(o, "item", s_call_item(a, i, name, args, "completed"));
    return s_event(a, "response.output_item.done", o, out);
}

/* Stream text that was appended to a->text (len bytes at its end): said at once, or under
 * tools decided, held and said as the answer's form needs. */
static int s_stream_text(serve_answer_t *a, size_t len, base_buf_t *out) {
    const char *all = a->text.p ? a->text.p : "";
    if (!a->req->tools || a->tool_mode == 1)
        return len ? s_say_text(a, all + a->text.len - len, len, out) : 0;
    if (a->tool_mode == 0) {
        size_t p = 0;
        while (p < a->text.len && strchr(" \t\r\n", all[p]))
            p++;
        if (p == a->text.len)
            return 0; /* nothing that decides yet */
        a->tool_mode = all[p] == '[' || a->req->tools == SERVE_OPENAI_TOOLS_FORCED ? 2 : 1;
        if (a->tool_mode == 1) /* text: what was held, then as it comes */
            return s_say_text(a, all, a->text.len, out);
    }
    serve_openai_call_t calls[SERVE_OPENAI_MAX_CALLS];
    int n = 0;
    bool complete;
    serve_openai_scan_calls(all, a->text.len, calls, SERVE_OPENAI_MAX_CALLS, &n, &complete);
    for (; a->n_calls < n; a->n_calls++) {
        const serve_openai_call_t *c = &calls[a->n_calls];
        if (!c->named || !c->args_done)
            break;
        char *name = strndup(all + c->name_at, c->name_len);
        char *args = strndup(all + c->args_at, c->args_end - c->args_at);
        int rc = name && args ? s_say_call(a, a->n_calls, name, args, out) : -ENOMEM;
        free(name);
        free(args);
        if (rc)
            return rc;
    }
    return 0;
}

/* The stream's head, once per choice: chat's role chunk; Responses' response.created and
 * response.in_progress. */
static int s_open(serve_answer_t *a, base_buf_t *out) {
    if (a->started)
        return 0;
    a->started = true;
    if (a->req->api == SERVE_ANSWER_CHAT) {
        cJSON *delta = cJSON_CreateObject();
        cJSON_AddStringToObject(delta, "role", "assistant");
        cJSON_AddStringToObject(delta, "content", "");
        return s_chunk(a, delta, NULL, 0, "", out);
    }
    if (a->req->api == SERVE_ANSWER_RESPONSES) {
        cJSON *o = s_event_obj("response.created");
        cJSON_AddItemToObject(o, "response", s_response(a, "in_progress", NULL, NULL));
        if (s_event(a, "response.created", o, out))
            return -ENOMEM;
        o = s_event_obj("response.in_progress");
        cJSON_AddItemToObject(o, "response", s_response(a, "in_progress", NULL, NULL));
        return s_event(a, "response.in_progress", o, out);
    }
    return 0;
}

/* ---- events */

int serve_answer_token(serve_answer_t *a, const msg_token_t *t, base_buf_t *out) {
    if (!a->req->stream)
        return 0;
    if (s_open(a, out))
        return -ENOMEM;
    size_t offset = a->text.len; /* legacy text_offset: where this token's text starts */
    if (base_buf_add(&a->text, t->text, t->text_len))
        return -ENOMEM;
    if (t->has_logprob && a->req->api != SERVE_ANSWER_RESPONSES) {
        if (!a->lp && !(a->lp = cJSON_CreateObject()))
            return -ENOMEM;
        s_lp_add(a, a->lp, t->piece, t->logprob, t->top, t->n_top, offset);
        if (!a->req->tools) /* every token gets its chunk, text or not */
            return s_chunk_text(a, t->text, t->text_len, out);
    }
    int rc = s_stream_text(a, t->text_len, out);
    return rc || a->oom ? -ENOMEM : 0;
}

int serve_answer_done(serve_answer_t *a, msg_done_t *d, base_buf_t *out) {
    a->finish = d->finish_reason;
    a->done = true;
    a->cache = d->cache > MSG_CACHE_MISS && d->cache <= MSG_CACHE_KB ? d->cache : MSG_CACHE_MISS;
    memcpy(a->cache_entry, d->cache_entry, sizeof a->cache_entry);
    a->cache_similarity = d->cache_similarity;
    if (!a->req->stream) {
        if (d->text && base_buf_add(&a->text, d->text, d->text_len))
            return -ENOMEM;
        free(d->text);
        d->text = NULL;
        if (a->req->logprobs && a->req->api != SERVE_ANSWER_RESPONSES &&
            (a->lp = cJSON_CreateObject())) {
            size_t off = 0; /* text offsets: where each token's piece would start */
            for (int i = 0; i < d->n_logprobs; i++) {
                const msg_logprob_t *x = &d->logprobs[i];
                s_lp_add(a, a->lp, x->piece, x->logprob, x->top, x->n_top, off);
                off += strlen(x->piece);
            }
        }
        return 0;
    }
    if (s_open(a, out))
        return -ENOMEM;
    if (d->text && d->text_len) {
        if (base_buf_add(&a->text, d->text, d->text_len) || s_stream_text(a, d->text_len, out))
            return -ENOMEM;
    }
    bool complete = false;
    if (a->tool_mode == 2) /* cut short (length): the calls said are what there is */
        cJSON_Delete(s_calls(a, &complete));
    if (a->req->api == SERVE_ANSWER_RESPONSES) {
        if (a->tool_mode != 2 && s_close_item(a, out))
            return -ENOMEM;
        return a->oom ? -ENOMEM : 0;
    }
    const char *finish = serve_openai_finish(d->finish_reason);
    if (complete)
        finish = a->req->functions ? "function_call" : "tool_calls";
    int rc = s_chunk(a, NULL, NULL, 0, finish, out);
    return rc || a->oom ? -ENOMEM : 0;
}

int serve_answer_stream_end(serve_answer_t *const *a, int n, const msg_usage_t *u,
                            base_buf_t *out) {
    if (n < 1)
        return -EINVAL;
    serve_answer_t *first = a[0];
    if (first->req->api == SERVE_ANSWER_RESPONSES) {
        const char *status = s_status(first);
        char type[32];
        snprintf(type, sizeof type, "response.%s", status);
        cJSON *o = s_event_obj(type);
        cJSON_AddItemToObject(o, "response", s_response(first, status, u, NULL));
        return s_event(first, type, o, out);
    }
    if (first->req->include_usage) {
        cJSON *o = s_head(first, s_chunk_object(first));
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", serve_openai_usage(u));
        if (s_sse(first, NULL, o, out))
            return -ENOMEM;
    }
    return base_buf_adds(out, "data: [DONE]\n\n");
}

int serve_answer_stream_error(serve_answer_t *a, int code, const char *message, base_buf_t *out) {
    const char *name = msg_code_name(code);
    if (!name)
        name = "internal";
    if (a->req->api == SERVE_ANSWER_RESPONSES) {
        cJSON *err = cJSON_CreateObject();
        cJSON_AddStringToObject(err, "code", name);
        cJSON_AddStringToObject(err, "message", message);
        cJSON *o = s_event_obj("response.failed");
        cJSON_AddItemToObject(o, "response", s_response(a, "failed", NULL, err));
        a->failed = true;
        return s_event(a, "response.failed", o, out);
    }
    if (s_sse(a, NULL, serve_answer_error_obj(message, serve_answer_error_type(code), NULL, name),
              out))
        return -ENOMEM;
    return base_buf_adds(out, "data: [DONE]\n\n");
}

/* ---- whole answers */

/* strata_cache of a cached answer into o; nothing for a generated one. */
static void s_cache_info(const serve_answer_t *a, cJSON *o) {
    if (a->cache == MSG_CACHE_MISS)
        return;
    cJSON *c = cJSON_AddObjectToObject(o, "strata_cache");
    cJSON_AddStringToObject(c, "hit", msg_cache_kind_names[a->cache]);
    cJSON_AddStringToObject(c, "entry", a->cache_entry);
    /* a float: 4 decimals say it (0.97, not 0.9700000286102295) */
    cJSON_AddNumberToObject(c, "similarity", round((double)a->cache_similarity * 1e4) / 1e4);
}

const char *serve_answer_cache_header(serve_answer_t *const *a, int n) {
    if (n < 1)
        return NULL;
    if (a[0]->cache != MSG_CACHE_MISS)
        return msg_cache_kind_names[a[0]->cache];
    int asked = a[0]->req->cache;
    return asked == MSG_CACHE_ONLY_EXACT || asked == MSG_CACHE_ON_SEMANTIC ? "miss" : NULL;
}

/* The choice object of a (chat: message; completions: text). */
static cJSON *s_choice(serve_answer_t *a) {
    bool chat = a->req->api == SERVE_ANSWER_CHAT;
    const char *text = a->text.p ? a->text.p : "";
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", a->index);
    const char *finish = serve_openai_finish(a->finish);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        bool complete = false;
        cJSON *calls = s_calls(a, &complete);
        if (calls) { /* a call array, maybe cut at max_tokens: the calls complete before */
            cJSON_AddNullToObject(m, "content");
            if (a->req->functions && calls->child) { /* the first (parallel calls are off) */
                cJSON *fn = cJSON_DetachItemFromObject(calls->child, "function");
                cJSON_AddItemToObject(m, "function_call", fn);
                cJSON_Delete(calls);
            } else if (cJSON_GetArraySize(calls)) {
                cJSON_AddItemToObject(m, "tool_calls", calls);
            } else {
                cJSON_Delete(calls);
            }
            if (complete)
                finish = a->req->functions ? "function_call" : "tool_calls";
        } else {
            cJSON_AddStringToObject(m, "content", text);
        }
    } else {
        cJSON_AddStringToObject(c, "text", text);
    }
    if (a->lp) {
        cJSON_AddItemToObject(c, "logprobs", a->lp);
        a->lp = NULL; /* the answer owns it */
    } else {
        cJSON_AddNullToObject(c, "logprobs");
    }
    cJSON_AddStringToObject(c, "finish_reason", finish);
    return c;
}

cJSON *serve_answer_json(serve_answer_t *const *a, int n, const msg_usage_t *u) {
    if (n < 1)
        return NULL;
    if (a[0]->req->api == SERVE_ANSWER_RESPONSES) {
        cJSON *o = s_response(a[0], s_status(a[0]), u, NULL);
        s_cache_info(a[0], o);
        return o;
    }
    bool chat = a[0]->req->api == SERVE_ANSWER_CHAT;
    cJSON *o = s_head(a[0], chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < n; i++) {
        cJSON *c = s_choice(a[i]);
        if (n > 1)
            s_cache_info(a[i], c);
        cJSON_AddItemToArray(choices, c);
    }
    cJSON_AddItemToObject(o, "usage", serve_openai_usage(u));
    s_cache_info(a[0], o);
    return o;
}

cJSON *serve_answer_message(const serve_answer_t *a) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    bool complete;
    cJSON *calls = s_calls(a, &complete);
    if (calls && cJSON_GetArraySize(calls)) {
        cJSON_AddNullToObject(m, "content");
        cJSON_AddItemToObject(m, "tool_calls", calls);
    } else {
        cJSON_Delete(calls);
        cJSON_AddStringToObject(m, "content", a->text.p ? a->text.p : "");
    }
    return m;
}

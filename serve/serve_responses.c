/* serve_responses.c - see serve_responses.h.  The request side only: the answer's shapes
 * (the response object, its output items and stream events) are serve_answer's. */
#include "serve_responses.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the store: a ring of the last max responses, looked up by id (a linear scan: a
 * lookup costs a few microseconds next to the generation it starts) */

typedef struct {
    char *id;
    cJSON *messages; /* the conversation, answer included */
    cJSON *response; /* the response object */
} s_kept_t;

struct serve_responses_store_t {
    s_kept_t *ring; /* (max) */
    int max;        /* slots */
    int n;          /* kept */
    int next;       /* the slot the next put fills (the oldest when full) */
};

serve_responses_store_t *serve_responses_store_new(int max) {
    if (max < 1 || max > SERVE_RESPONSES_KEEP * 16)
        return NULL;
    serve_responses_store_t *s = calloc(1, sizeof *s);
    if (!s || !(s->ring = calloc((size_t)max, sizeof *s->ring))) {
        free(s);
        return NULL;
    }
    s->max = max;
    return s;
}

static void s_forget(s_kept_t *k) {
    free(k->id);
    cJSON_Delete(k->messages);
    cJSON_Delete(k->response);
    *k = (s_kept_t){0};
}

void serve_responses_store_destroy(serve_responses_store_t **self_p) {
    serve_responses_store_t *s = self_p ? *self_p : NULL;
    if (!s)
        return;
    for (int i = 0; i < s->max; i++)
        s_forget(&s->ring[i]);
    free(s->ring);
    free(s);
    *self_p = NULL;
}

static s_kept_t *s_find(const serve_responses_store_t *s, const char *id) {
    for (int i = 0; s && i < s->max; i++)
        if (s->ring[i].id && !strcmp(s->ring[i].id, id))
            return &s->ring[i];
    return NULL;
}

int serve_responses_store_put(serve_responses_store_t *s, const char *id, cJSON **messages,
                              cJSON **response) {
    s_kept_t k = {strdup(id), *messages, *response};
    *messages = *response = NULL;
    if (!k.id || !k.messages || !k.response) {
        s_forget(&k);
        return -ENOMEM;
    }
    s_kept_t *old = s_find(s, id);
    if (old) { /* replaced where it is */
        s_forget(old);
        *old = k;
        return 0;
    }
    if (s->ring[s->next].id) /* full: the oldest goes */
        s_forget(&s->ring[s->next]);
    else
        s->n++;
    s->ring[s->next] = k;
    s->next = (s->next + 1) % s->max;
    return 0;
}

const cJSON *serve_responses_store_response(const serve_responses_store_t *s, const char *id) {
    const s_kept_t *k = s_find(s, id);
    return k ? k->response : NULL;
}

bool serve_responses_store_delete(serve_responses_store_t *s, const char *id) {
    s_kept_t *k = s_find(s, id);
    if (!k)
        return false;
    s_forget(k);
    s->n--;
    return true;
}

int serve_responses_store_count(const serve_responses_store_t *s) {
    return s->n;
}

/* ---- the request */

/* A field given as JSON null counts as absent. */
static const cJSON *s_field(const cJSON *o, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

/* What happens to a field of the body. */
typedef enum {
    S_INPUT,   /* read by the translation below */
    S_CHAT,    /* passed to the chat body as it is (its rules are serve_openai's) */
    S_ACCEPT,  /* read and dropped: it cannot change the answer */
    S_REFUSE,  /* 400 with `why` whatever its value */
    S_DEFAULT, /* accepted at its default (false, [], "disabled", {} ...), else 400 */
} s_rule_t;

typedef struct {
    const char *name;
    s_rule_t rule;
    const char *why; /* S_REFUSE, S_DEFAULT: the 400's sentence */
} s_row_t;

/* Every field strata knows in a Responses body. */
static const s_row_t s_rows[] = {
    {"model", S_INPUT, NULL},
    {"input", S_INPUT, NULL},
    {"instructions", S_INPUT, NULL},
    {"previous_response_id", S_INPUT, NULL},
    {"tools", S_INPUT, NULL},
    {"tool_choice", S_INPUT, NULL},
    {"text", S_INPUT, NULL},
    {"max_output_tokens", S_INPUT, NULL},
    {"store", S_INPUT, NULL},
    {"stream", S_INPUT, NULL},
    {"parallel_tool_calls", S_CHAT, NULL},
    {"temperature", S_CHAT, NULL},
    {"top_p", S_CHAT, NULL},
    {"seed", S_CHAT, NULL},  /* strata's extension, as in chat */
    {"cache", S_CHAT, NULL}, /* the answer cache's extensions, as in chat */
    {"cache_delta", S_CHAT, NULL},
    {"cache_ttl", S_CHAT, NULL},
    {"cache_tags", S_CHAT, NULL},
    {"cache_sampled", S_CHAT, NULL},
    {"metadata", S_ACCEPT, NULL},
    {"user", S_ACCEPT, NULL},
    {"safety_identifier", S_ACCEPT, NULL},
    {"prompt_cache_key", S_ACCEPT, NULL},
    {"service_tier", S_ACCEPT, NULL},
    {"stream_options", S_ACCEPT, NULL},
    {"truncation", S_DEFAULT,
     "only \"disabled\" is supported (a conversation that does not fit is "
     "a 400, never cut)"},
    {"reasoning", S_DEFAULT, "reasoning is not supported (only null or {})"},
    {"include", S_DEFAULT, "no extra output can be included (only [])"},
    {"background", S_DEFAULT, "background responses are not supported (only false)"},
    {"top_logprobs", S_DEFAULT, "log-probabilities are not supported on /v1/responses (only 0)"},
    {"max_tool_calls", S_REFUSE, "max_tool_calls is not supported"},
    {"prompt", S_REFUSE, "stored prompts are not supported"},
    {"conversation", S_REFUSE,
     "conversation objects are not supported: continue with previous_response_id"},
};

static bool s_is_default(const char *name, const cJSON *v) {
    if (!strcmp(name, "truncation"))
        return cJSON_IsString(v) && !strcmp(v->valuestring, "disabled");
    if (!strcmp(name, "reasoning")) {
        const cJSON *e;
        if (!cJSON_IsObject(v))
            return false;
        cJSON_ArrayForEach(e, v) if (!cJSON_IsNull(e)) return false;
        return true;
    }
    if (!strcmp(name, "include"))
        return cJSON_IsArray(v) && !v->child;
    if (!strcmp(name, "background"))
        return cJSON_IsFalse(v);
    if (!strcmp(name, "top_logprobs"))
        return cJSON_IsNumber(v) && v->valuedouble == 0;
    return false;
}

static int s_check_fields(const cJSON *root, serve_openai_bad_t *b) {
    const cJSON *f;
    cJSON_ArrayForEach(f, root) {
        const s_row_t *row = NULL;
        for (size_t i = 0; i < sizeof s_rows / sizeof *s_rows; i++)
            if (!strcmp(s_rows[i].name, f->string))
                row = &s_rows[i];
        if (!row)
            return serve_openai_bad(b, f->string,
                                    "'%.64s' is not a field of /v1/responses that strata knows",
                                    f->string);
        if (cJSON_IsNull(f))
            continue;
        if (row->rule == S_REFUSE || (row->rule == S_DEFAULT && !s_is_default(row->name, f)))
            return serve_openai_bad(b, row->name, "'%s': %s", row->name, row->why);
    }
    return 0;
}

/* The text of a content (a string, or parts of input_text / output_text / text) as a new
 * string; NULL with b set when a part is not text. */
static char *s_text(const cJSON *c, const char *param, serve_openai_bad_t *b) {
    if (cJSON_IsString(c))
        return strdup(c->valuestring);
    if (!cJSON_IsArray(c)) {
        serve_openai_bad(b, param, "'%s': expected a string or an array of text parts", param);
        return NULL;
    }
    size_t n = 1;
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(t) || !cJSON_IsString(x) ||
            (strcmp(t->valuestring, "input_text") && strcmp(t->valuestring, "output_text") &&
             strcmp(t->valuestring, "text"))) {
            serve_openai_bad(b, param,
                             "'%s': only text parts are supported (input_text, output_text), "
                             "not %.32s",
                             param, cJSON_IsString(t) ? t->valuestring : "a part without a type");
            return NULL;
        }
        n += strlen(x->valuestring);
    }
    char *out = malloc(n), *o = out;
    if (!out)
        return NULL;
    cJSON_ArrayForEach(p, c) {
        const char *x = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        size_t l = strlen(x);
        memcpy(o, x, l);
        o += l;
    }
    *o = 0;
    return out;
}

static cJSON *s_message(const char *role, char *content /* taken */) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    free(content);
    return m;
}

/* The input items as chat messages appended to msgs. */
static int s_input(cJSON *msgs, const cJSON *input, serve_openai_bad_t *b) {
    if (cJSON_IsString(input)) {
        char *t = strdup(input->valuestring);
        if (!t)
            return -ENOMEM;
        cJSON_AddItemToArray(msgs, s_message("user", t));
        return 0;
    }
    if (!cJSON_IsArray(input))
        return serve_openai_bad(b, "input", "'input': expected a string or an array of items");
    cJSON *calls = NULL; /* the assistant turn consecutive function_call items make */
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, input) {
        char param[48];
        snprintf(param, sizeof param, "input[%d]", i++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        const char *ty = cJSON_IsString(type) ? type->valuestring : "message";
        if (!cJSON_IsObject(it))
            return serve_openai_bad(b, "input", "'%s': expected an object", param);
        if (!strcmp(ty, "function_call")) {
            const cJSON *id = s_field(it, "call_id"), *nm = s_field(it, "name");
            const cJSON *args = s_field(it, "arguments");
            if (!cJSON_IsString(id) || !cJSON_IsString(nm) || !cJSON_IsString(args))
                return serve_openai_bad(b, "input",
                                        "'%s': a function_call needs call_id, name, arguments "
                                        "(strings)",
                                        param);
            if (!calls) {
                cJSON *m = cJSON_CreateObject();
                cJSON_AddStringToObject(m, "role", "assistant");
                cJSON_AddNullToObject(m, "content");
                calls = cJSON_AddArrayToObject(m, "tool_calls");
                cJSON_AddItemToArray(msgs, m);
            }
            cJSON *c = cJSON_CreateObject(), *fn;
            cJSON_AddStringToObject(c, "id", id->valuestring);
            cJSON_AddStringToObject(c, "type", "function");
            fn = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(fn, "name", nm->valuestring);
            cJSON_AddStringToObject(fn, "arguments", args->valuestring);
            cJSON_AddItemToArray(calls, c);
            continue;
        }
        calls = NULL;
        if (!strcmp(ty, "function_call_output")) {
            const cJSON *id = s_field(it, "call_id");
            if (!cJSON_IsString(id))
                return serve_openai_bad(b, "input", "'%s': a function_call_output needs call_id",
                                        param);
            char *t = s_text(s_field(it, "output"), param, b);
            if (!t)
                return b->msg[0] ? -EINVAL : -ENOMEM;
            cJSON *m = s_message("tool", t);
            cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
            cJSON_AddItemToArray(msgs, m);
            continue;
        }
        if (strcmp(ty, "message"))
            return serve_openai_bad(b, "input",
                                    "'%s': items of type '%.32s' are not supported (message, "
                                    "function_call, function_call_output)",
                                    param, ty);
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        if (!strcmp(r, "developer"))
            r = "system";
        if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "assistant"))
            return serve_openai_bad(b, "input",
                                    "'%s': role '%.32s' is not user, assistant, system or "
                                    "developer",
                                    param, r);
        char *t = s_text(s_field(it, "content"), param, b);
        if (!t)
            return b->msg[0] ? -EINVAL : -ENOMEM;
        cJSON_AddItemToArray(msgs, s_message(r, t));
    }
    return 0;
}

/* Flat tools ({type, name, description, parameters, strict}) as chat tools. */
static int s_tools(cJSON *chat, const cJSON *tools, serve_openai_bad_t *b) {
    if (!cJSON_IsArray(tools))
        return serve_openai_bad(b, "tools", "'tools': expected an array");
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return serve_openai_bad(b, "tools",
                                    "'tools[%d]': only function tools are supported (not %.32s)", i,
                                    cJSON_IsString(type) ? type->valuestring : "an untyped tool");
        cJSON *c = cJSON_CreateObject(), *fn;
        cJSON_AddStringToObject(c, "type", "function");
        fn = cJSON_AddObjectToObject(c, "function");
        const cJSON *k;
        cJSON_ArrayForEach(k, t) {
            if (strcmp(k->string, "type"))
                cJSON_AddItemToObject(fn, k->string, cJSON_Duplicate(k, true));
        }
        cJSON_AddItemToArray(out, c);
        i++;
    }
    return 0;
}

/* tool_choice: none, auto, required, or {type: function, name}. */
static int s_tool_choice(cJSON *chat, const cJSON *c, serve_openai_bad_t *b) {
    if (cJSON_IsString(c)) {
        cJSON_AddStringToObject(chat, "tool_choice", c->valuestring);
        return 0;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(c, "name");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(nm))
        return serve_openai_bad(b, "tool_choice",
                                "'tool_choice': expected none, auto, required or "
                                "{type: function, name}");
    cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", nm->valuestring);
    return 0;
}

/* text.format: text, json_object, or json_schema {name, schema, strict, description}. */
static int s_format(cJSON *chat, const cJSON *text, serve_openai_bad_t *b) {
    const cJSON *k;
    cJSON_ArrayForEach(k, text) {
        if (strcmp(k->string, "format") && strcmp(k->string, "verbosity"))
            return serve_openai_bad(b, "text", "'text.%.32s' is not supported (format)", k->string);
    }
    const cJSON *f = s_field(text, "format");
    if (!f)
        return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(f, "type");
    if (!cJSON_IsString(type))
        return serve_openai_bad(b, "text.format", "'text.format.type' must be a string");
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    cJSON_AddStringToObject(rf, "type", type->valuestring);
    if (strcmp(type->valuestring, "json_schema"))
        return 0; /* text, json_object; anything else: serve_openai's 400 */
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON_ArrayForEach(k, f) {
        if (strcmp(k->string, "type"))
            cJSON_AddItemToObject(js, k->string, cJSON_Duplicate(k, true));
    }
    return 0;
}

/* The echo: the request's fields as the response object repeats them (OpenAI's defaults
 * where not given). */
static cJSON *s_echo(const cJSON *root, bool store) {
    cJSON *e = cJSON_CreateObject();
    const struct {
        const char *name;
        const char *dflt; /* JSON */
    } keys[] = {
        {"instructions", "null"},
        {"max_output_tokens", "null"},
        {"metadata", "{}"},
        {"parallel_tool_calls", "true"},
        {"previous_response_id", "null"},
        {"reasoning", "{\"effort\":null,\"summary\":null}"},
        {"temperature", "1"},
        {"text", "{\"format\":{\"type\":\"text\"}}"},
        {"tool_choice", "\"auto\""},
        {"tools", "[]"},
        {"top_p", "1"},
        {"truncation", "\"disabled\""},
        {"user", "null"},
    };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const cJSON *v = s_field(root, keys[i].name);
        if (!strcmp(keys[i].name, "reasoning"))
            v = NULL; /* only null or {} get here: say what it is */
        cJSON_AddItemToObject(e, keys[i].name,
                              v ? cJSON_Duplicate(v, true) : cJSON_Parse(keys[i].dflt));
    }
    cJSON_AddBoolToObject(e, "store", store);
    return e;
}

/* A 400 of the chat translation, named in the Responses API's terms. */
static void s_rename(serve_openai_bad_t *b) {
    static const char *const map[][2] = {
        {"max_tokens", "max_output_tokens"},
        {"max_completion_tokens", "max_output_tokens"},
        {"messages", "input"},
        {"response_format", "text.format"},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strncmp(b->param, map[i][0], strlen(map[i][0]))) {
            char rest[64];
            snprintf(rest, sizeof rest, "%s", b->param + strlen(map[i][0]));
            snprintf(b->param, sizeof b->param, "%s%s", map[i][1], rest);
            return;
        }
}

int serve_responses_request_parse(serve_responses_request_t *req, const char *body, size_t len,
                                  const serve_responses_store_t *store,
                                  const serve_openai_defaults_t *def, uint64_t seed,
                                  serve_openai_bad_t *b) {
    memset(req, 0, sizeof *req);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false), *chat = NULL;
    int rc;
    if (!root) {
        serve_openai_bad(b, "", "the body is not JSON (at byte %td)",
                         end ? end - body : (ptrdiff_t)0);
        return -EBADMSG;
    }
    if (!cJSON_IsObject(root)) {
        rc = serve_openai_bad(b, "", "the body must be a JSON object");
        goto out;
    }
    if ((rc = s_check_fields(root, b)))
        goto out;
    const cJSON *f;
    req->store = !(f = s_field(root, "store")) || cJSON_IsTrue(f);
    if (!(req->history = cJSON_CreateArray()) || !(chat = cJSON_CreateObject())) {
        rc = -ENOMEM;
        goto out;
    }
    /* the conversation: the previous response's, then this input */
    if ((f = s_field(root, "previous_response_id"))) {
        const s_kept_t *k = cJSON_IsString(f) ? s_find(store, f->valuestring) : NULL;
        if (!k) {
            serve_openai_bad(b, "previous_response_id",
                             "Previous response with id '%.80s' not found",
                             cJSON_IsString(f) ? f->valuestring : "(not a string)");
            rc = cJSON_IsString(f) ? -ENOENT : -EINVAL;
            goto out;
        }
        const cJSON *m;
        cJSON_ArrayForEach(m, k->messages)
            cJSON_AddItemToArray(req->history, cJSON_Duplicate(m, true));
    }
    if (!(f = s_field(root, "input"))) {
        rc = serve_openai_bad(b, "input", "'input' is required");
        goto out;
    }
    if ((rc = s_input(req->history, f, b)))
        goto out;
    /* the chat body */
    cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
    if ((f = s_field(root, "instructions"))) {
        if (!cJSON_IsString(f)) {
            rc = serve_openai_bad(b, "instructions", "'instructions' must be a string");
            goto out;
        }
        cJSON_AddItemToArray(msgs, s_message("system", strdup(f->valuestring)));
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, req->history) cJSON_AddItemToArray(msgs, cJSON_Duplicate(m, true));
    if ((f = s_field(root, "tools")) && (rc = s_tools(chat, f, b)))
        goto out;
    if ((f = s_field(root, "tool_choice")) && (rc = s_tool_choice(chat, f, b)))
        goto out;
    if ((f = s_field(root, "text")) &&
        (rc = cJSON_IsObject(f) ? s_format(chat, f, b)
                                : serve_openai_bad(b, "text", "'text' must be an object")))
        goto out;
    if ((f = s_field(root, "max_output_tokens")))
        cJSON_AddItemToObject(chat, "max_tokens", cJSON_Duplicate(f, true));
    if ((f = s_field(root, "stream")))
        cJSON_AddItemToObject(chat, "stream", cJSON_Duplicate(f, true));
    for (size_t i = 0; i < sizeof s_rows / sizeof *s_rows; i++)
        if (s_rows[i].rule == S_CHAT && (f = s_field(root, s_rows[i].name)))
            cJSON_AddItemToObject(chat, s_rows[i].name, cJSON_Duplicate(f, true));
    char *text = cJSON_PrintUnformatted(chat);
    if (!text) {
        rc = -ENOMEM;
        goto out;
    }
    rc =
        serve_openai_request_parse(&req->chat, SERVE_OPENAI_CHAT, text, strlen(text), def, seed, b);
    free(text);
    if (rc) {
        s_rename(b);
        if (rc == -EBADMSG) /* cannot happen: cJSON printed it */
            rc = -EINVAL;
        goto out;
    }
    if (!(req->echo = s_echo(root, req->store)))
        rc = -ENOMEM;
out:
    cJSON_Delete(chat);
    cJSON_Delete(root);
    return rc;
}

void serve_responses_request_clear(serve_responses_request_t *req) {
    serve_openai_request_clear(&req->chat);
    cJSON_Delete(req->echo);
    cJSON_Delete(req->history);
    req->echo = req->history = NULL;
}

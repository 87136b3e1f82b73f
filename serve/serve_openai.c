/* serve_openai.c - OpenAI request bodies -> generate, driven by one table of fields
 * (serve_openai.h): the table first, then the check every body goes through (each key
 * known, of its type and range, allowed by its rule), then the mapping of the fields
 * that are implemented. */
#include "serve_openai.h"

#include "grammar.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHAT SERVE_OPENAI_CHAT
#define COMPL SERVE_OPENAI_COMPLETIONS
#define BOTH (SERVE_OPENAI_CHAT | SERVE_OPENAI_COMPLETIONS)
#define S_SEED_MAX 18446744073709551615.0 /* 2^64 - 1 */

/* ---- the values an ONLY field is accepted at */

static bool s_only_one(const cJSON *v) {
    return v->valuedouble == 1;
}
static bool s_only_zero(const cJSON *v) {
    return v->valuedouble == 0;
}
static bool s_only_false(const cJSON *v) {
    return cJSON_IsFalse(v);
}
static bool s_only_empty(const cJSON *v) { /* [] or {} */
    return !v->child;
}
/* "none" or "auto": with no tools, both mean "answer with text" */
static bool s_only_no_tool(const cJSON *v) {
    return cJSON_IsString(v) &&
           (!strcmp(v->valuestring, "none") || !strcmp(v->valuestring, "auto"));
}
/* ["text"] */
static bool s_only_text_modality(const cJSON *v) {
    return cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child) &&
           !strcmp(v->child->valuestring, "text");
}

/* ---- the table: every field strata knows, in the order the checks run */

static const serve_openai_field_t s_fields[] = {
    /* the prompt */
    {"messages", CHAT, SERVE_OPENAI_ARRAY, 0, 0, SERVE_OPENAI_MAP, NULL,
     "messages: 1..256 of {role: system|user|assistant (developer = system), content: a "
     "string or text parts}"},
    {"prompt", COMPL, SERVE_OPENAI_STRING_OR_ARRAY, 0, 0, SERVE_OPENAI_MAP, NULL,
     "prompt: one non-empty string (or an array of exactly one)"},
    /* length */
    {"max_tokens", BOTH, SERVE_OPENAI_INTEGER, 1, MSG_MAX_TOKENS, SERVE_OPENAI_MAP, NULL,
     "max_tokens (default: the gateway's max_tokens option)"},
    {"max_completion_tokens", BOTH, SERVE_OPENAI_INTEGER, 1, MSG_MAX_TOKENS, SERVE_OPENAI_MAP, NULL,
     "max_tokens (wins over max_tokens)"},
    /* sampling */
    {"temperature", BOTH, SERVE_OPENAI_NUMBER, 0, 2, SERVE_OPENAI_MAP, NULL,
     "sampling.temperature (default 1; 0: greedy)"},
    {"top_p", BOTH, SERVE_OPENAI_NUMBER, 0, 1, SERVE_OPENAI_MAP, NULL,
     "sampling.top_p (default 1; 0: greedy)"},
    {"top_k", BOTH, SERVE_OPENAI_INTEGER, 0, MSG_MAX_TOP_K, SERVE_OPENAI_MAP, NULL,
     "sampling.top_k (an extension; default: the gateway's top_k option)"},
    {"min_p", BOTH, SERVE_OPENAI_NUMBER, 0, 1, SERVE_OPENAI_MAP, NULL,
     "sampling.min_p (an extension; default: the gateway's min_p option)"},
    {"repeat_penalty", BOTH, SERVE_OPENAI_NUMBER, 0.01, 10, SERVE_OPENAI_MAP, NULL,
     "sampling.repeat_penalty (an extension; default 1)"},
    {"seed", BOTH, SERVE_OPENAI_INTEGER, 0, S_SEED_MAX, SERVE_OPENAI_MAP, NULL,
     "sampling.seed (default: a random one per request)"},
    {"stop", BOTH, SERVE_OPENAI_STRING_OR_ARRAY, 0, 0, SERVE_OPENAI_MAP, NULL,
     "stop: at most 8 strings of 1..64 bytes"},
    /* the answer's shape */
    {"stream", BOTH, SERVE_OPENAI_BOOL, 0, 0, SERVE_OPENAI_MAP, NULL, "stream: server-sent events"},
    {"stream_options", BOTH, SERVE_OPENAI_OBJECT, 0, 0, SERVE_OPENAI_MAP, NULL,
     "include_usage (the only key): a last chunk with the usage"},
    {"logprobs", CHAT, SERVE_OPENAI_BOOL, 0, 0, SERVE_OPENAI_MAP, NULL, "logprobs"},
    {"top_logprobs", CHAT, SERVE_OPENAI_INTEGER, 0, MSG_MAX_TOP_LOGPROBS, SERVE_OPENAI_MAP, NULL,
     "top_logprobs (more than 0 needs logprobs true)"},
    {"logprobs", COMPL, SERVE_OPENAI_INTEGER, 0, 5, SERVE_OPENAI_MAP, NULL,
     "logprobs true, top_logprobs = the value"},
    /* harmless: they cannot change the answer */
    {"model", BOTH, SERVE_OPENAI_STRING, 0, 0, SERVE_OPENAI_ACCEPT, NULL,
     "one model is served; the answer names it"},
    {"user", BOTH, SERVE_OPENAI_STRING, 0, 0, SERVE_OPENAI_ACCEPT, NULL,
     "an end-user id for abuse monitoring"},
    {"safety_identifier", BOTH, SERVE_OPENAI_STRING, 0, 0, SERVE_OPENAI_ACCEPT, NULL,
     "an end-user id for abuse monitoring"},
    {"metadata", BOTH, SERVE_OPENAI_OBJECT, 0, 0, SERVE_OPENAI_ACCEPT, NULL,
     "tags for the caller's own bookkeeping"},
    {"service_tier", BOTH, SERVE_OPENAI_STRING, 0, 0, SERVE_OPENAI_ACCEPT, NULL,
     "a latency / price class; one tier is served"},
    {"prompt_cache_key", BOTH, SERVE_OPENAI_STRING, 0, 0, SERVE_OPENAI_ACCEPT, NULL,
     "a cache-routing hint; the prefix cache never changes the answer"},
    {"cache_prompt", BOTH, SERVE_OPENAI_BOOL, 0, 0, SERVE_OPENAI_ACCEPT, NULL,
     "llama-server's cache hint; the prefix cache is always on and never changes the answer"},
    {"parallel_tool_calls", CHAT, SERVE_OPENAI_BOOL, 0, 0, SERVE_OPENAI_ACCEPT, NULL,
     "means nothing without tools (which are refused)"},
    /* accepted at their default only */
    {"n", BOTH, SERVE_OPENAI_INTEGER, 1, 128, SERVE_OPENAI_ONLY, s_only_one,
     "only 1 choice per request is supported"},
    {"best_of", COMPL, SERVE_OPENAI_INTEGER, 1, 20, SERVE_OPENAI_ONLY, s_only_one,
     "only 1 is supported"},
    {"presence_penalty", BOTH, SERVE_OPENAI_NUMBER, -2, 2, SERVE_OPENAI_ONLY, s_only_zero,
     "only 0 is supported (repeat_penalty is)"},
    {"frequency_penalty", BOTH, SERVE_OPENAI_NUMBER, -2, 2, SERVE_OPENAI_ONLY, s_only_zero,
     "only 0 is supported (repeat_penalty is)"},
    {"logit_bias", BOTH, SERVE_OPENAI_OBJECT, 0, 0, SERVE_OPENAI_ONLY, s_only_empty,
     "token biases are not supported (only {})"},
    {"echo", COMPL, SERVE_OPENAI_BOOL, 0, 0, SERVE_OPENAI_ONLY, s_only_false,
     "echoing the prompt is not supported (only false)"},
    {"store", BOTH, SERVE_OPENAI_BOOL, 0, 0, SERVE_OPENAI_ONLY, s_only_false,
     "strata stores no completion (only false)"},
    {"tools", CHAT, SERVE_OPENAI_ARRAY, 0, 0, SERVE_OPENAI_ONLY, s_only_empty,
     "function calling is not supported (only [])"},
    {"tool_choice", CHAT, SERVE_OPENAI_STRING_OR_OBJECT, 0, 0, SERVE_OPENAI_ONLY, s_only_no_tool,
     "function calling is not supported (only \"none\" or \"auto\")"},
    {"functions", CHAT, SERVE_OPENAI_ARRAY, 0, 0, SERVE_OPENAI_ONLY, s_only_empty,
     "function calling is not supported (only [])"},
    {"function_call", CHAT, SERVE_OPENAI_STRING_OR_OBJECT, 0, 0, SERVE_OPENAI_ONLY, s_only_no_tool,
     "function calling is not supported (only \"none\" or \"auto\")"},
    {"response_format", CHAT, SERVE_OPENAI_OBJECT, 0, 0, SERVE_OPENAI_MAP, NULL,
     "{type: text} (the default); {type: json_object}: json_object; {type: json_schema, "
     "json_schema: {name, description, schema, strict}}: json_schema (enforced whatever strict "
     "says; a schema the grammar engine cannot enforce is a 400 naming its path and keyword)"},
    {"modalities", CHAT, SERVE_OPENAI_ARRAY, 0, 0, SERVE_OPENAI_ONLY, s_only_text_modality,
     "only text is produced (only [\"text\"])"},
    /* refused whatever their value */
    {"suffix", COMPL, SERVE_OPENAI_STRING, 0, 0, SERVE_OPENAI_REFUSE, NULL,
     "insertion (a suffix) is not supported"},
    {"audio", CHAT, SERVE_OPENAI_OBJECT, 0, 0, SERVE_OPENAI_REFUSE, NULL,
     "audio output is not supported"},
    {"prediction", CHAT, SERVE_OPENAI_OBJECT, 0, 0, SERVE_OPENAI_REFUSE, NULL,
     "predicted outputs are not supported"},
    {"reasoning_effort", CHAT, SERVE_OPENAI_STRING, 0, 0, SERVE_OPENAI_REFUSE, NULL,
     "the served model is not a reasoning model"},
    {"verbosity", CHAT, SERVE_OPENAI_STRING, 0, 0, SERVE_OPENAI_REFUSE, NULL,
     "verbosity is not supported"},
    {"web_search_options", CHAT, SERVE_OPENAI_OBJECT, 0, 0, SERVE_OPENAI_REFUSE, NULL,
     "web search is not supported"},
};
#define S_N_FIELDS (int)(sizeof s_fields / sizeof s_fields[0])

const serve_openai_field_t *serve_openai_fields(int *n) {
    *n = S_N_FIELDS;
    return s_fields;
}

const serve_openai_field_t *serve_openai_field(serve_openai_api_t api, const char *name) {
    for (int i = 0; i < S_N_FIELDS; i++)
        if ((s_fields[i].api & api) && !strcmp(s_fields[i].name, name))
            return &s_fields[i];
    return NULL;
}

/* ---- small helpers */

const char *serve_openai_json_type(const cJSON *v) {
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    return "null";
}

static int s_bad(serve_openai_bad_t *b, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int s_bad(serve_openai_bad_t *b, const char *param, const char *fmt, ...) {
    snprintf(b->param, sizeof b->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, sizeof b->msg, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* Field name of obj, or NULL when absent or null. */
static const cJSON *s_field(const cJSON *obj, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

static const char *s_type_name(serve_openai_type_t t) {
    switch (t) {
    case SERVE_OPENAI_STRING:
        return "a string";
    case SERVE_OPENAI_NUMBER:
        return "a number";
    case SERVE_OPENAI_INTEGER:
        return "an integer";
    case SERVE_OPENAI_BOOL:
        return "a boolean";
    case SERVE_OPENAI_ARRAY:
        return "an array";
    case SERVE_OPENAI_OBJECT:
        return "an object";
    case SERVE_OPENAI_STRING_OR_ARRAY:
        return "a string or an array";
    case SERVE_OPENAI_STRING_OR_OBJECT:
        return "a string or an object";
    }
    return "?";
}

static bool s_type_ok(serve_openai_type_t t, const cJSON *v) {
    switch (t) {
    case SERVE_OPENAI_STRING:
        return cJSON_IsString(v);
    case SERVE_OPENAI_NUMBER:
    case SERVE_OPENAI_INTEGER:
        return cJSON_IsNumber(v);
    case SERVE_OPENAI_BOOL:
        return cJSON_IsBool(v);
    case SERVE_OPENAI_ARRAY:
        return cJSON_IsArray(v);
    case SERVE_OPENAI_OBJECT:
        return cJSON_IsObject(v);
    case SERVE_OPENAI_STRING_OR_ARRAY:
        return cJSON_IsString(v) || cJSON_IsArray(v);
    case SERVE_OPENAI_STRING_OR_OBJECT:
        return cJSON_IsString(v) || cJSON_IsObject(v);
    }
    return false;
}

/* v (given, not null) against its row: type, range, rule.  0 or -EINVAL with b. */
static int s_check(const serve_openai_field_t *row, const cJSON *v, serve_openai_bad_t *b) {
    const char *name = row->name;
    if (!s_type_ok(row->type, v))
        return s_bad(b, name, "'%s': expected %s, got %s", name, s_type_name(row->type),
                     serve_openai_json_type(v));
    if (row->type == SERVE_OPENAI_NUMBER || row->type == SERVE_OPENAI_INTEGER) {
        double x = v->valuedouble;
        if (row->type == SERVE_OPENAI_INTEGER && x != floor(x))
            return s_bad(b, name, "'%s': expected an integer, got %g", name, x);
        if (!(x >= row->lo && x <= row->hi))
            return s_bad(b, name, "'%s': %g is out of range [%g, %g]", name, x, row->lo, row->hi);
    }
    if (row->rule == SERVE_OPENAI_REFUSE || (row->rule == SERVE_OPENAI_ONLY && !row->only(v)))
        return s_bad(b, name, "'%s': %s", name, row->does);
    return 0;
}

/* Every key of root: known to api, of its type and range, allowed by its rule.  Rows are
 * checked in table order (so the first error is the same whatever the key order), then
 * the keys no row knows. */
static int s_check_all(serve_openai_api_t api, const cJSON *root, serve_openai_bad_t *b) {
    for (int i = 0; i < S_N_FIELDS; i++) {
        const cJSON *v;
        if ((s_fields[i].api & api) && (v = s_field(root, s_fields[i].name)) &&
            s_check(&s_fields[i], v, b))
            return -EINVAL;
    }
    const cJSON *k;
    cJSON_ArrayForEach(k, root) {
        if (cJSON_IsNull(k) || serve_openai_field(api, k->string))
            continue;
        const serve_openai_api_t other = api == CHAT ? COMPL : CHAT;
        if (serve_openai_field(other, k->string))
            return s_bad(b, k->string, "'%s' is a field of /v1/%s, not of /v1/%s", k->string,
                         other == CHAT ? "chat/completions" : "completions",
                         api == CHAT ? "chat/completions" : "completions");
        return s_bad(b, k->string,
                     "'%s' is not supported (an unknown field is refused, never ignored: "
                     "docs/HTTP.md)",
                     k->string);
    }
    return 0;
}

/* The value of a numeric field (checked by s_check_all).  1 when given, 0 when absent. */
static int s_number(const cJSON *root, const char *name, double *out) {
    const cJSON *f = s_field(root, name);
    if (!f)
        return 0;
    *out = f->valuedouble;
    return 1;
}

static int s_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 1024;
        while (c < *len + n + 1)
            c *= 2;
        char *p = realloc(*buf, c);
        if (!p)
            return -ENOMEM;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

/* The text of a message's content: a string, or an array of {"type": "text", "text"}
 * parts (joined; *owned gets the malloc'd join). */
static int s_content(const cJSON *c, const char *param, const char **text, char **owned,
                     serve_openai_bad_t *b) {
    if (cJSON_IsString(c)) {
        *text = c->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(c))
        return s_bad(b, param, "'%s': expected a string or an array of text parts, got %s", param,
                     serve_openai_json_type(c));
    size_t len = 0, cap = 0;
    char *s = NULL;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(t)) {
            free(s);
            return s_bad(b, param,
                         "'%s': only parts {\"type\": \"text\", \"text\": ...} are supported",
                         param);
        }
        if (s_append(&s, &len, &cap, t->valuestring, strlen(t->valuestring))) {
            free(s);
            return -ENOMEM;
        }
    }
    *owned = s;
    *text = s ? s : "";
    return 0;
}

/* ---- the mapping, field group by field group (types and ranges already checked) */

static int s_messages(serve_openai_request_t *req, const cJSON *ms, serve_openai_bad_t *b) {
    msg_generate_t *g = &req->gen;
    int n = cJSON_GetArraySize(ms);
    if (n < 1 || n > MSG_MAX_MESSAGES)
        return s_bad(b, "messages", "'messages': %d messages, expected 1..%d", n, MSG_MAX_MESSAGES);
    if (!(g->messages = calloc((size_t)n, sizeof *g->messages)))
        return -ENOMEM;
    g->n_messages = n;
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) {
        char param[64];
        snprintf(param, sizeof param, "messages[%d].role", i);
        if (!cJSON_IsObject(m))
            return s_bad(b, param, "'messages[%d]': expected an object, got %s", i,
                         serve_openai_json_type(m));
        const cJSON *k;
        cJSON_ArrayForEach(k, m) { /* name, tool_calls, ... would change the prompt */
            if (strcmp(k->string, "role") && strcmp(k->string, "content") && !cJSON_IsNull(k)) {
                snprintf(param, sizeof param, "messages[%d].%s", i, k->string);
                return s_bad(b, param, "'%s' is not supported (a message has role and content)",
                             param);
            }
        }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role))
            return s_bad(b, param, "'%s': expected a string", param);
        const char *rs = role->valuestring;
        if (!strcmp(rs, "developer"))
            rs = "system"; /* OpenAI's newer name for it */
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant"))
            return s_bad(b, param, "'%s': '%s' is not supported (system, user, assistant)", param,
                         role->valuestring);
        snprintf(g->messages[i].role, sizeof g->messages[i].role, "%s", rs);
        snprintf(param, sizeof param, "messages[%d].content", i);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!c)
            return s_bad(b, param, "'%s' is required", param);
        const char *text = "";
        int rc;
        if (!cJSON_IsNull(c) && (rc = s_content(c, param, &text, &req->owned[i], b)))
            return rc;
        g->messages[i].content = (char *)text;
        g->messages[i].content_len = strlen(text);
        i++;
    }
    return 0;
}

static int s_prompt(msg_generate_t *g, const cJSON *p, serve_openai_bad_t *b) {
    if (cJSON_IsArray(p)) {
        if (cJSON_GetArraySize(p) != 1)
            return s_bad(b, "prompt",
                         "'prompt': an array of %d prompts (only one prompt per request is "
                         "supported)",
                         cJSON_GetArraySize(p));
        p = cJSON_GetArrayItem(p, 0);
    }
    if (!cJSON_IsString(p))
        return s_bad(b, "prompt",
                     "'prompt': expected a string (token ids are not supported), got %s",
                     serve_openai_json_type(p));
    if (!*p->valuestring)
        return s_bad(b, "prompt", "'prompt' is empty");
    g->prompt = p->valuestring;
    g->prompt_len = strlen(p->valuestring);
    return 0;
}

static int s_stop(msg_generate_t *g, const cJSON *f, serve_openai_bad_t *b) {
    const cJSON *one = cJSON_IsString(f) ? f : NULL, *s;
    if (!one && cJSON_GetArraySize(f) > MSG_MAX_STOP)
        return s_bad(b, "stop", "'stop': at most %d strings", MSG_MAX_STOP);
    for (s = one ? one : f->child; s; s = one ? NULL : s->next) {
        if (!cJSON_IsString(s))
            return s_bad(b, "stop", "'stop': expected strings, got %s", serve_openai_json_type(s));
        size_t n = strlen(s->valuestring);
        if (n < 1 || n > MSG_MAX_STOP_BYTES)
            return s_bad(b, "stop", "'stop': each string must have 1..%d bytes",
                         MSG_MAX_STOP_BYTES);
        memcpy(g->stop[g->n_stop++], s->valuestring, n + 1);
    }
    return 0;
}

/* OpenAI's defaults (temperature 1, top_p 1), top_k / min_p from the gateway. */
static void s_sampling(msg_generate_t *g, const cJSON *root, const serve_openai_defaults_t *def,
                       uint64_t seed) {
    double v;
    g->sampling.temperature = 1.0f;
    g->sampling.top_p = 1.0f;
    g->sampling.top_k = def->top_k;
    g->sampling.min_p = (float)def->min_p;
    g->sampling.repeat_penalty = 1.0f;
    if (s_number(root, "temperature", &v))
        g->sampling.temperature = (float)v;
    if (s_number(root, "top_p", &v) && v > 0)
        g->sampling.top_p = (float)v;
    else if (s_field(root, "top_p")) /* top_p 0 keeps the most likely token only */
        g->sampling.temperature = 0;
    if (s_number(root, "top_k", &v))
        g->sampling.top_k = (int)v;
    if (s_number(root, "min_p", &v))
        g->sampling.min_p = (float)v;
    if (s_number(root, "repeat_penalty", &v))
        g->sampling.repeat_penalty = (float)v;
    g->has_seed = true;
    g->sampling.seed = seed;
    if (s_number(root, "seed", &v))
        g->sampling.seed = v >= S_SEED_MAX ? UINT64_MAX : (uint64_t)v;
}

/* response_format (an object, checked by its row): text, json_object or json_schema. */
static int s_response_format(serve_openai_request_t *req, const cJSON *f, serve_openai_bad_t *b) {
    msg_generate_t *g = &req->gen;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "type"), *k;
    if (!cJSON_IsString(t))
        return s_bad(b, "response_format", "'response_format.type' must be a string");
    const char *type = t->valuestring;
    bool schema = !strcmp(type, "json_schema");
    if (strcmp(type, "text") && strcmp(type, "json_object") && !schema)
        return s_bad(b, "response_format",
                     "'response_format.type': '%.64s' is not one of text, json_object, json_schema",
                     type);
    cJSON_ArrayForEach(k, f) {
        if (strcmp(k->string, "type") && !(schema && !strcmp(k->string, "json_schema")))
            return s_bad(b, "response_format", "'response_format.%.64s' is not supported with %s",
                         k->string, type);
    }
    if (!strcmp(type, "json_object"))
        g->json_object = true;
    if (!schema)
        return 0;
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(f, "json_schema");
    if (!cJSON_IsObject(js))
        return s_bad(b, "response_format", "'response_format.json_schema' must be an object");
    cJSON_ArrayForEach(k, js) {
        if (strcmp(k->string, "name") && strcmp(k->string, "description") &&
            strcmp(k->string, "schema") && strcmp(k->string, "strict"))
            return s_bad(b, "response_format",
                         "'response_format.json_schema.%.64s' is not supported", k->string);
    }
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (sc && !cJSON_IsObject(sc) && !cJSON_IsBool(sc))
        return s_bad(b, "response_format",
                     "'response_format.json_schema.schema' must be an object, got %s",
                     serve_openai_json_type(sc));
    /* no schema: any JSON value (the engine's "{}") */
    req->schema = sc ? cJSON_PrintUnformatted(sc) : strdup("{}");
    if (!req->schema)
        return -ENOMEM;
    size_t len = strlen(req->schema);
    if (len > MSG_MAX_GRAMMAR_BYTES)
        return s_bad(b, "response_format", "the schema is %zu bytes, limit %u", len,
                     MSG_MAX_GRAMMAR_BYTES);
    char why[256];
    char *gbnf = grammar_schema_to_gbnf(req->schema, len, why, sizeof why);
    if (!gbnf) /* fail-closed: the frontend would refuse it too; here it is a 400 at once */
        return s_bad(b, "response_format", "the schema cannot be enforced: %s", why);
    free(gbnf);
    g->json_schema = req->schema;
    g->json_schema_len = len;
    return 0;
}

static int s_translate(serve_openai_request_t *req, serve_openai_api_t api,
                       const serve_openai_defaults_t *def, uint64_t seed, serve_openai_bad_t *b) {
    const cJSON *root = req->root, *f;
    msg_generate_t *g = &req->gen;
    double v = 0;
    int rc;
    if (!cJSON_IsObject(root))
        return s_bad(b, "", "the body must be a JSON object, not %s", serve_openai_json_type(root));
    if ((rc = s_check_all(api, root, b)))
        return rc;
    /* log-probabilities: chat has logprobs (bool) + top_logprobs (0..20); the legacy
     * completions API has logprobs (int 0..5: the alternatives) */
    if (api == CHAT) {
        g->logprobs = (f = s_field(root, "logprobs")) && cJSON_IsTrue(f);
        if (s_number(root, "top_logprobs", &v) && v > 0 && !g->logprobs)
            return s_bad(b, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        if (s_field(root, "top_logprobs"))
            g->top_logprobs = (int)v;
    } else if (s_number(root, "logprobs", &v)) {
        g->logprobs = true;
        g->top_logprobs = (int)v;
    }
    /* the prompt */
    if (api == CHAT) {
        if (!(f = s_field(root, "messages")))
            return s_bad(b, "messages", "'messages' is required");
        if ((rc = s_messages(req, f, b)))
            return rc;
    } else {
        if (!(f = s_field(root, "prompt")))
            return s_bad(b, "prompt", "'prompt' is required");
        if ((rc = s_prompt(g, f, b)))
            return rc;
    }
    /* length */
    g->max_tokens = def->max_tokens;
    if (s_number(root, "max_tokens", &v))
        g->max_tokens = (int)v;
    if (s_number(root, "max_completion_tokens", &v))
        g->max_tokens = (int)v;
    s_sampling(g, root, def, seed);
    if ((f = s_field(root, "stop")) && (rc = s_stop(g, f, b)))
        return rc;
    if (api == CHAT && (f = s_field(root, "response_format")) &&
        (rc = s_response_format(req, f, b)))
        return rc;
    /* the answer's shape */
    g->stream = (f = s_field(root, "stream")) && cJSON_IsTrue(f);
    if ((f = s_field(root, "stream_options"))) {
        const cJSON *k;
        cJSON_ArrayForEach(k, f) {
            if (cJSON_IsNull(k))
                continue;
            char param[64];
            snprintf(param, sizeof param, "stream_options.%s", k->string);
            if (strcmp(k->string, "include_usage"))
                return s_bad(b, param, "'%s' is not supported (only include_usage)", param);
            if (!cJSON_IsBool(k))
                return s_bad(b, param, "'%s': expected a boolean, got %s", param,
                             serve_openai_json_type(k));
            req->include_usage = cJSON_IsTrue(k);
        }
    }
    return 0;
}

int serve_openai_request_parse(serve_openai_request_t *req, serve_openai_api_t api,
                               const char *body, size_t len, const serve_openai_defaults_t *def,
                               uint64_t seed, serve_openai_bad_t *bad) {
    memset(req, 0, sizeof *req);
    msg_generate_init(&req->gen);
    memset(bad, 0, sizeof *bad);
    const char *end = NULL;
    /* the body is NUL-terminated: the NUL must follow the value (nothing after it) */
    req->root =
        body && strlen(body) == len ? cJSON_ParseWithLengthOpts(body, len + 1, &end, true) : NULL;
    if (!req->root) {
        size_t at = end && body ? (size_t)(end - body) : 0;
        s_bad(bad, "", "the body is not valid JSON (at byte %zu of %zu)", at, len);
        return -EBADMSG;
    }
    int rc = s_translate(req, api, def, seed, bad);
    if (rc == -ENOMEM)
        s_bad(bad, "", "out of memory");
    return rc;
}

void serve_openai_request_clear(serve_openai_request_t *req) {
    for (int i = 0; i < MSG_MAX_MESSAGES + 1; i++) {
        free(req->owned[i]);
        req->owned[i] = NULL;
    }
    free(req->schema);
    req->schema = NULL;
    req->gen.json_schema = NULL;
    req->gen.json_schema_len = 0;
    free(req->gen.messages); /* the rest points into root */
    req->gen.messages = NULL;
    req->gen.n_messages = 0;
    cJSON_Delete(req->root);
    req->root = NULL;
}

/* ---- answers */

const char *serve_openai_finish(int finish) {
    return finish == MSG_FINISH_LENGTH ? "length" : "stop";
}

cJSON *serve_openai_usage(const msg_usage_t *u) {
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(o, "completion_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    cJSON *d = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", u->cached_tokens);
    return o;
}

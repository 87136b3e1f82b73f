/* serve_openai.c - OpenAI request bodies -> generate, driven by one table of fields
 * (serve_openai.h): the table first, then the check every body goes through (each key
 * known, of its type and range, allowed by its rule), then the mapping of the fields
 * that are implemented. */
#include "serve_openai.h"

#include "base_buf.h"

#include "grammar.h"
#include "kv_compress.h"
#include "serve_choices.h"

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
static bool s_only_false(const cJSON *v) {
    return cJSON_IsFalse(v);
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
     "messages: 1..256 of {role: system|user|assistant|tool (developer = system), content: a "
     "string or text parts, name (dropped); assistant: tool_calls, function_call, refusal, "
     "annotations (dropped); tool: tool_call_id}"},
    {"prompt", COMPL, SERVE_OPENAI_STRING_OR_ARRAY, 0, 0, SERVE_OPENAI_MAP, NULL,
     "prompt: one non-empty string (or an array of exactly one)"},
    /* length */
    {"max_tokens", BOTH, SERVE_OPENAI_INTEGER, 1, MSG_MAX_TOKENS, SERVE_OPENAI_MAP, NULL,
     "max_tokens (default: until the context ends, fit_context)"},
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
    {"presence_penalty", BOTH, SERVE_OPENAI_NUMBER, -2, 2, SERVE_OPENAI_MAP, NULL,
     "sampling.presence_penalty (default 0): minus once from every token the completion "
     "already holds"},
    {"frequency_penalty", BOTH, SERVE_OPENAI_NUMBER, -2, 2, SERVE_OPENAI_MAP, NULL,
     "sampling.frequency_penalty (default 0): minus per occurrence in the completion so far"},
    {"logit_bias", BOTH, SERVE_OPENAI_OBJECT, 0, 0, SERVE_OPENAI_MAP, NULL,
     "logit_bias: at most 1024 of \"token id\": bias in [-100, 100], added to the logit "
     "(ids outside the vocabulary: 400)"},
    {"seed", BOTH, SERVE_OPENAI_INTEGER, 0, S_SEED_MAX, SERVE_OPENAI_MAP, NULL,
     "sampling.seed (default: a random one per request)"},
    {"n", BOTH, SERVE_OPENAI_INTEGER, 1, SERVE_CHOICES_MAX, SERVE_OPENAI_MAP, NULL,
     "n: the choices, 1..16 (choice i is generated with seed + i; serve_choices)"},
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
    {"priority", BOTH, SERVE_OPENAI_INTEGER, -MSG_PRIORITY_MAX, MSG_PRIORITY_MAX, SERVE_OPENAI_MAP,
     NULL, "priority (an extension, as vLLM's: lower runs sooner, and may preempt)"},
    {"kv_compress", BOTH, SERVE_OPENAI_STRING, 0, 0, SERVE_OPENAI_MAP, NULL,
     "kv_compress (an extension): in-sequence KV compression, none | window:B | h2o:B | "
     "snapkv:B, B rows or a percentage (docs/KV_COMPRESSION.md); default: the worker's"},
    /* the answer cache (docs/SEMCACHE.md; extensions, docs/HTTP.md "The answer cache") */
    {"cache", BOTH, SERVE_OPENAI_STRING, 0, 0, SERVE_OPENAI_MAP, NULL,
     "cache: exact | semantic | off (default: the server's --semcache mode)"},
    {"cache_delta", BOTH, SERVE_OPENAI_NUMBER, 0, 0.5, SERVE_OPENAI_MAP, NULL,
     "cache_delta: the wrong-hit rate a semantic hit may have, (0, 0.5] (default: the server's)"},
    {"cache_ttl", BOTH, SERVE_OPENAI_INTEGER, 0, MSG_MAX_CACHE_TTL_S, SERVE_OPENAI_MAP, NULL,
     "cache_ttl_s: seconds the answer stays in the cache, 0 never expires (default: the "
     "server's rule)"},
    {"cache_tags", BOTH, SERVE_OPENAI_STRING_OR_ARRAY, 0, 0, SERVE_OPENAI_MAP, NULL,
     "cache_tags: the entry's tags, comma-separated or an array of strings without commas, "
     "at most 128 bytes joined"},
    {"cache_sampled", BOTH, SERVE_OPENAI_BOOL, 0, 0, SERVE_OPENAI_MAP, NULL,
     "cache_sampled: a sampled request without a seed may be cached (it is then generated "
     "with seed 0, as a native generate without one)"},
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
    {"prompt_cache_retention", BOTH, SERVE_OPENAI_STRING, 0, 0, SERVE_OPENAI_ACCEPT, NULL,
     "how long a cached prefix is kept; the prefix cache never changes the answer"},
    {"prompt_cache_options", BOTH, SERVE_OPENAI_OBJECT, 0, 0, SERVE_OPENAI_ACCEPT, NULL,
     "cache breakpoints and lifetime; the prefix cache never changes the answer"},
    {"store", BOTH, SERVE_OPENAI_BOOL, 0, 0, SERVE_OPENAI_ACCEPT, NULL,
     "keep the completion for later retrieval: strata keeps none (the answer is the same)"},
    {"prediction", CHAT, SERVE_OPENAI_OBJECT, 0, 0, SERVE_OPENAI_ACCEPT, NULL,
     "a predicted output only speeds decoding up; the answer is the same without it"},
    /* accepted at their default only */
    {"best_of", COMPL, SERVE_OPENAI_INTEGER, 1, 20, SERVE_OPENAI_ONLY, s_only_one,
     "only 1 is supported"},
    {"echo", COMPL, SERVE_OPENAI_BOOL, 0, 0, SERVE_OPENAI_ONLY, s_only_false,
     "echoing the prompt is not supported (only false)"},
    {"functions", CHAT, SERVE_OPENAI_ARRAY, 0, 0, SERVE_OPENAI_MAP, NULL,
     "the deprecated form of tools: each {name, description, parameters} is a tool, "
     "parallel_tool_calls false; the answer says message.function_call and finish_reason "
     "function_call"},
    {"function_call", CHAT, SERVE_OPENAI_STRING_OR_OBJECT, 0, 0, SERVE_OPENAI_MAP, NULL,
     "the deprecated tool_choice: none, auto or {name} (without functions: none or auto)"},
    {"tools", CHAT, SERVE_OPENAI_ARRAY, 0, 0, SERVE_OPENAI_MAP, NULL,
     "tools: 0..32 of {type: function, function: {name, description, parameters, strict}}; "
     "described in the system turn, the calls' arguments constrained by parameters (a schema "
     "the grammar engine cannot enforce is a 400 naming its path and keyword)"},
    {"tool_choice", CHAT, SERVE_OPENAI_STRING_OR_OBJECT, 0, 0, SERVE_OPENAI_MAP, NULL,
     "none (text), auto (text or calls; the default with tools), required (calls), "
     "{type: function, function: {name}} (calls of that function)"},
    {"parallel_tool_calls", CHAT, SERVE_OPENAI_BOOL, 0, 0, SERVE_OPENAI_MAP, NULL,
     "true (the default): 1..8 calls per answer; false: exactly 1"},
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
    {"moderation", CHAT, SERVE_OPENAI_OBJECT, 0, 0, SERVE_OPENAI_REFUSE, NULL,
     "moderation (which may block the answer) is not supported"},
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

int serve_openai_bad(serve_openai_bad_t *b, const char *param, const char *fmt, ...) {
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
        return serve_openai_bad(b, name, "'%s': expected %s, got %s", name, s_type_name(row->type),
                                serve_openai_json_type(v));
    if (row->type == SERVE_OPENAI_NUMBER || row->type == SERVE_OPENAI_INTEGER) {
        double x = v->valuedouble;
        if (row->type == SERVE_OPENAI_INTEGER && x != floor(x))
            return serve_openai_bad(b, name, "'%s': expected an integer, got %g", name, x);
        if (!(x >= row->lo && x <= row->hi))
            return serve_openai_bad(b, name, "'%s': %g is out of range [%g, %g]", name, x, row->lo,
                                    row->hi);
    }
    if (row->rule == SERVE_OPENAI_REFUSE || (row->rule == SERVE_OPENAI_ONLY && !row->only(v)))
        return serve_openai_bad(b, name, "'%s': %s", name, row->does);
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
            return serve_openai_bad(b, k->string, "'%s' is a field of /v1/%s, not of /v1/%s",
                                    k->string, other == CHAT ? "chat/completions" : "completions",
                                    api == CHAT ? "chat/completions" : "completions");
        return serve_openai_bad(
            b, k->string,
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

/* ---- the keys of a message (messages[i]), one row each, checked as the body's fields are:
 * known to the message's role, of its type, allowed by its rule */

enum { S_SYSTEM = 1, S_USER = 2, S_ASSISTANT = 4, S_TOOL = 8, S_ANY_ROLE = 15 };

typedef struct {
    const char *key;
    unsigned roles;           /* S_* bits: the roles that may carry it */
    serve_openai_type_t type; /* its JSON (null: absent, whatever the key) */
    serve_openai_rule_t rule; /* MAP: rendered; ACCEPT: dropped; REFUSE: 400 */
    const char *does;         /* MAP / ACCEPT: what becomes of it; REFUSE: the 400's sentence */
} s_msg_key_t;

static const s_msg_key_t s_msg_keys[] = {
    {"role", S_ANY_ROLE, SERVE_OPENAI_STRING, SERVE_OPENAI_MAP,
     "system, user, assistant, tool (developer = system)"},
    {"content", S_ANY_ROLE, SERVE_OPENAI_STRING_OR_ARRAY, SERVE_OPENAI_MAP,
     "the turn's text: a string or text parts (joined)"},
    {"name", S_ANY_ROLE, SERVE_OPENAI_STRING, SERVE_OPENAI_ACCEPT,
     "a participant's name: the chat templates have no place for it"},
    {"tool_calls", S_ASSISTANT, SERVE_OPENAI_ARRAY, SERVE_OPENAI_MAP,
     "rendered after the content as the call array ([] is none)"},
    {"function_call", S_ASSISTANT, SERVE_OPENAI_OBJECT, SERVE_OPENAI_MAP,
     "the deprecated single call: rendered as a call array of one"},
    {"refusal", S_ASSISTANT, SERVE_OPENAI_STRING, SERVE_OPENAI_MAP,
     "rendered after the content, as text"},
    {"annotations", S_ASSISTANT, SERVE_OPENAI_ARRAY, SERVE_OPENAI_ACCEPT,
     "citations of the content's text (URLs), not text of the turn"},
    {"audio", S_ASSISTANT, SERVE_OPENAI_OBJECT, SERVE_OPENAI_REFUSE,
     "an earlier audio answer cannot be rendered (strata answers with text only)"},
    {"tool_call_id", S_TOOL, SERVE_OPENAI_STRING, SERVE_OPENAI_MAP,
     "the call this turn answers: named in the rendered user turn"},
};
#define S_N_MSG_KEYS (int)(sizeof s_msg_keys / sizeof s_msg_keys[0])

/* Every key of message m (role bit role, index i): known, for its role, of its type, not
 * refused.  0 or -EINVAL with b naming messages[i].<key>. */
static int s_check_message(const cJSON *m, unsigned role, int i, serve_openai_bad_t *b) {
    const cJSON *k;
    cJSON_ArrayForEach(k, m) {
        if (cJSON_IsNull(k))
            continue;
        char param[64];
        snprintf(param, sizeof param, "messages[%d].%.32s", i, k->string);
        const s_msg_key_t *row = NULL;
        for (int r = 0; r < S_N_MSG_KEYS && !row; r++)
            if (!strcmp(s_msg_keys[r].key, k->string))
                row = &s_msg_keys[r];
        if (!row)
            return serve_openai_bad(b, param,
                                    "'%s' is not supported (an unknown message key is refused, "
                                    "never ignored: docs/HTTP.md)",
                                    param);
        if (!(row->roles & role))
            return serve_openai_bad(b, param, "'%s': only %s messages carry it", param,
                                    row->roles == S_TOOL ? "tool" : "assistant");
        if (!s_type_ok(row->type, k))
            return serve_openai_bad(b, param, "'%s': expected %s, got %s", param,
                                    s_type_name(row->type), serve_openai_json_type(k));
        if (row->rule == SERVE_OPENAI_REFUSE)
            return serve_openai_bad(b, param, "'%s': %s", param, row->does);
    }
    return 0;
}

/* The text of a message's content: a string, or an array of {"type": "text", "text"}
 * parts (and, for an assistant, {"type": "refusal", "refusal"}), joined; *owned gets the
 * malloc'd join. */
static int s_content(const cJSON *c, const char *param, bool assistant, const char **text,
                     char **owned, serve_openai_bad_t *b) {
    if (cJSON_IsString(c)) {
        *text = c->valuestring;
        return 0;
    }
    base_buf_t s = {0};
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
        const char *type = cJSON_IsString(ty) ? ty->valuestring : "";
        const char *key = !strcmp(type, "text")                   ? "text"
                          : assistant && !strcmp(type, "refusal") ? "refusal"
                                                                  : NULL;
        const cJSON *t = key ? cJSON_GetObjectItemCaseSensitive(part, key) : NULL;
        if (!cJSON_IsString(t)) {
            base_buf_free(&s);
            return serve_openai_bad(
                b, param, "'%s': only parts {\"type\": \"text\", \"text\": ...} are supported%s",
                param, assistant ? " (and {\"type\": \"refusal\", \"refusal\": ...})" : "");
        }
        if (base_buf_adds(&s, t->valuestring)) {
            base_buf_free(&s);
            return -ENOMEM;
        }
    }
    *owned = base_buf_take(&s);
    *text = *owned ? *owned : "";
    return 0;
}

/* ---- the mapping, field group by field group (types and ranges already checked) */

/* a, a newline, b (either may be empty: then no newline), malloc'd; NULL when out of
 * memory. */
static char *s_join_lines(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    char *o = malloc(n + m + 2);
    if (!o)
        return NULL;
    memcpy(o, a, n);
    if (n && m)
        o[n++] = '\n';
    memcpy(o + n, b, m + 1);
    return o;
}

/* fn ({name, arguments: a string}) appended to arr as a call of the answer format,
 * {"name": ..., "arguments": <the arguments' JSON>}.  false when fn is not that shape. */
static bool s_add_call(cJSON *arr, const cJSON *fn) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    if (!cJSON_IsString(name) || !cJSON_IsString(args))
        return false;
    cJSON *one = cJSON_CreateObject(), *parsed = cJSON_Parse(args->valuestring);
    cJSON_AddItemToArray(arr, one);
    cJSON_AddStringToObject(one, "name", name->valuestring);
    /* arguments are a JSON text: rendered as that JSON (as the model writes them) */
    cJSON_AddItemToObject(one, "arguments",
                          parsed ? parsed : cJSON_CreateString(args->valuestring));
    return true;
}

/* The generic rendering of an assistant turn's calls (docs/HTTP.md): its text, a newline,
 * then the calls as the answer format, [{"name": ..., "arguments": ...}].  calls: the
 * tool_calls array; or NULL, and fc the deprecated function_call {name, arguments}. */
static int s_render_calls(const char *text, const cJSON *calls, const cJSON *fc, const char *param,
                          char **out, serve_openai_bad_t *b) {
    cJSON *arr = cJSON_CreateArray();
    if (!arr)
        return -ENOMEM;
    if (!calls && !s_add_call(arr, fc)) {
        cJSON_Delete(arr);
        return serve_openai_bad(b, param, "'%s': expected {name, arguments: a string}", param);
    }
    int j = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        if (!cJSON_IsObject(c) ||
            !s_add_call(arr, cJSON_GetObjectItemCaseSensitive(c, "function"))) {
            cJSON_Delete(arr);
            return serve_openai_bad(
                b, param,
                "'%s[%d]': expected {id, type: function, function: {name, arguments: a "
                "string}}",
                param, j);
        }
        j++;
    }
    char *js = cJSON_PrintUnformatted(arr);
    cJSON_Delete(arr);
    if (!js)
        return -ENOMEM;
    *out = s_join_lines(text, js);
    free(js);
    return *out ? 0 : -ENOMEM;
}

/* The generic rendering of a role "tool" turn: a user turn that names the call. */
static int s_render_result(const char *id, const char *text, char **out) {
    static const char head[] = "Result of tool call ";
    size_t n = strlen(head) + strlen(id) + strlen(text) + 4;
    if (!(*out = malloc(n)))
        return -ENOMEM;
    snprintf(*out, n, "%s%s:\n%s", head, id, text);
    return 0;
}

/* req->owned[i] = s (taken), freeing what was there; *text = s.  -ENOMEM when s is NULL. */
static int s_own(serve_openai_request_t *req, int i, char *s, const char **text) {
    if (!s)
        return -ENOMEM;
    free(req->owned[i]);
    req->owned[i] = s;
    *text = s;
    return 0;
}

/* Message m (index i) into g->messages[i]: its role, and its content rendered with what
 * else it carries (a refusal, calls, the call a tool turn answers). */
static int s_message(serve_openai_request_t *req, const cJSON *m, int i, serve_openai_bad_t *b) {
    msg_generate_t *g = &req->gen;
    char param[64];
    snprintf(param, sizeof param, "messages[%d].role", i);
    if (!cJSON_IsObject(m))
        return serve_openai_bad(b, param, "'messages[%d]': expected an object, got %s", i,
                                serve_openai_json_type(m));
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (!cJSON_IsString(role))
        return serve_openai_bad(b, param, "'%s': expected a string", param);
    const char *rs = role->valuestring;
    if (!strcmp(rs, "developer"))
        rs = "system"; /* OpenAI's newer name for it */
    unsigned bit = !strcmp(rs, "system")      ? S_SYSTEM
                   : !strcmp(rs, "user")      ? S_USER
                   : !strcmp(rs, "assistant") ? S_ASSISTANT
                   : !strcmp(rs, "tool")      ? S_TOOL
                                              : 0;
    if (!bit)
        return serve_openai_bad(b, param,
                                "'%s': '%s' is not supported (system, user, assistant, tool)",
                                param, role->valuestring);
    int rc = s_check_message(m, bit, i, b);
    if (rc)
        return rc;
    snprintf(g->messages[i].role, sizeof g->messages[i].role, "%s", bit == S_TOOL ? "user" : rs);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    const cJSON *calls = s_field(m, "tool_calls"), *fc = s_field(m, "function_call");
    const cJSON *refusal = s_field(m, "refusal");
    if (calls && !calls->child)
        calls = NULL; /* tool_calls: [] is no call */
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (!c && !calls && !fc && !refusal)
        return serve_openai_bad(b, param, "'%s' is required", param);
    if (calls && fc)
        return serve_openai_bad(b, "messages",
                                "'messages[%d]': tool_calls or function_call, not both", i);
    const char *text = "";
    if (c && !cJSON_IsNull(c) &&
        (rc = s_content(c, param, bit == S_ASSISTANT, &text, &req->owned[i], b)))
        return rc;
    if (refusal && *refusal->valuestring &&
        (rc = s_own(req, i, s_join_lines(text, refusal->valuestring), &text)))
        return rc;
    char *rendered = NULL;
    if (calls || fc) {
        snprintf(param, sizeof param, "messages[%d].%s", i, calls ? "tool_calls" : "function_call");
        if ((rc = s_render_calls(text, calls, fc, param, &rendered, b)) ||
            (rc = s_own(req, i, rendered, &text)))
            return rc;
    } else if (bit == S_TOOL) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
        snprintf(param, sizeof param, "messages[%d].tool_call_id", i);
        if (!cJSON_IsString(id))
            return serve_openai_bad(b, param, "'%s' is required (a string)", param);
        if ((rc = s_render_result(id->valuestring, text, &rendered)) ||
            (rc = s_own(req, i, rendered, &text)))
            return rc;
    }
    g->messages[i].content = (char *)text;
    g->messages[i].content_len = strlen(text);
    return 0;
}

static int s_messages(serve_openai_request_t *req, const cJSON *ms, serve_openai_bad_t *b) {
    msg_generate_t *g = &req->gen;
    int n = cJSON_GetArraySize(ms);
    if (n < 1 || n > MSG_MAX_MESSAGES)
        return serve_openai_bad(b, "messages", "'messages': %d messages, expected 1..%d", n,
                                MSG_MAX_MESSAGES);
    if (!(g->messages = calloc((size_t)n + 1, sizeof *g->messages))) /* + the tools' turn */
        return -ENOMEM;
    g->n_messages = n;
    int i = 0, rc;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) {
        if ((rc = s_message(req, m, i, b)))
            return rc;
        i++;
    }
    return 0;
}

static int s_prompt(msg_generate_t *g, const cJSON *p, serve_openai_bad_t *b) {
    if (cJSON_IsArray(p)) {
        if (cJSON_GetArraySize(p) != 1)
            return serve_openai_bad(
                b, "prompt",
                "'prompt': an array of %d prompts (only one prompt per request is "
                "supported)",
                cJSON_GetArraySize(p));
        p = cJSON_GetArrayItem(p, 0);
    }
    if (!cJSON_IsString(p))
        return serve_openai_bad(b, "prompt",
                                "'prompt': expected a string (token ids are not supported), got %s",
                                serve_openai_json_type(p));
    if (!*p->valuestring)
        return serve_openai_bad(b, "prompt", "'prompt' is empty");
    g->prompt = p->valuestring;
    g->prompt_len = strlen(p->valuestring);
    return 0;
}

static int s_stop(msg_generate_t *g, const cJSON *f, serve_openai_bad_t *b) {
    const cJSON *one = cJSON_IsString(f) ? f : NULL, *s;
    if (!one && cJSON_GetArraySize(f) > MSG_MAX_STOP)
        return serve_openai_bad(b, "stop", "'stop': at most %d strings", MSG_MAX_STOP);
    for (s = one ? one : f->child; s; s = one ? NULL : s->next) {
        if (!cJSON_IsString(s))
            return serve_openai_bad(b, "stop", "'stop': expected strings, got %s",
                                    serve_openai_json_type(s));
        size_t n = strlen(s->valuestring);
        if (n < 1 || n > MSG_MAX_STOP_BYTES)
            return serve_openai_bad(b, "stop", "'stop': each string must have 1..%d bytes",
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
    if (s_number(root, "presence_penalty", &v))
        g->sampling.presence_penalty = (float)v;
    if (s_number(root, "frequency_penalty", &v))
        g->sampling.frequency_penalty = (float)v;
    g->has_seed = true; /* choice i of n uses it + i (serve_choices); s_cache may drop it */
    g->sampling.seed = seed;
    if (s_number(root, "seed", &v))
        g->sampling.seed = v >= S_SEED_MAX ? UINT64_MAX : (uint64_t)v;
}

/* logit_bias (an object, checked by its row): {"token id": bias}, as OpenAI sends it.
 * The ids are checked against the vocabulary by the worker (which knows it). */
static int s_logit_bias(serve_openai_request_t *req, const cJSON *f, serve_openai_bad_t *b) {
    int n = cJSON_GetArraySize(f);
    if (n > MSG_MAX_LOGIT_BIAS)
        return serve_openai_bad(b, "logit_bias", "'logit_bias': %d entries, at most %d", n,
                                MSG_MAX_LOGIT_BIAS);
    if (n == 0)
        return 0;
    req->bias = malloc((size_t)n * sizeof *req->bias);
    if (!req->bias)
        return -ENOMEM;
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, f) {
        const char *key = e->string, *c = key;
        while (*c >= '0' && *c <= '9')
            c++;
        long id = c > key && !*c && c - key <= 10 ? strtol(key, NULL, 10) : -1;
        if (id < 0 || id > INT32_MAX)
            return serve_openai_bad(
                b, "logit_bias", "'logit_bias': key '%.32s' is not a token id (a decimal integer)",
                key);
        if (!cJSON_IsNumber(e))
            return serve_openai_bad(b, "logit_bias",
                                    "'logit_bias.%.32s': expected a number, got %s", key,
                                    serve_openai_json_type(e));
        if (!(e->valuedouble >= -100 && e->valuedouble <= 100))
            return serve_openai_bad(b, "logit_bias",
                                    "'logit_bias.%.32s': %g is out of range [-100, 100]", key,
                                    e->valuedouble);
        for (int j = 0; j < k; j++)
            if (req->bias[j].token == (int32_t)id)
                return serve_openai_bad(b, "logit_bias", "'logit_bias': token %ld is given twice",
                                        id);
        req->bias[k++] = (msg_logit_bias_t){(int32_t)id, (float)e->valuedouble};
    }
    req->gen.logit_bias = req->bias;
    req->gen.n_logit_bias = k;
    return 0;
}

/* response_format (an object, checked by its row): text, json_object or json_schema. */
static int s_response_format(serve_openai_request_t *req, const cJSON *f, serve_openai_bad_t *b) {
    msg_generate_t *g = &req->gen;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "type"), *k;
    if (!cJSON_IsString(t))
        return serve_openai_bad(b, "response_format", "'response_format.type' must be a string");
    const char *type = t->valuestring;
    bool schema = !strcmp(type, "json_schema");
    if (strcmp(type, "text") && strcmp(type, "json_object") && !schema)
        return serve_openai_bad(
            b, "response_format",
            "'response_format.type': '%.64s' is not one of text, json_object, json_schema", type);
    cJSON_ArrayForEach(k, f) {
        if (strcmp(k->string, "type") && !(schema && !strcmp(k->string, "json_schema")))
            return serve_openai_bad(b, "response_format",
                                    "'response_format.%.64s' is not supported with %s", k->string,
                                    type);
    }
    if (!strcmp(type, "json_object"))
        g->json_object = true;
    if (!schema)
        return 0;
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(f, "json_schema");
    if (!cJSON_IsObject(js))
        return serve_openai_bad(b, "response_format",
                                "'response_format.json_schema' must be an object");
    cJSON_ArrayForEach(k, js) {
        if (strcmp(k->string, "name") && strcmp(k->string, "description") &&
            strcmp(k->string, "schema") && strcmp(k->string, "strict"))
            return serve_openai_bad(b, "response_format",
                                    "'response_format.json_schema.%.64s' is not supported",
                                    k->string);
    }
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (sc && !cJSON_IsObject(sc) && !cJSON_IsBool(sc))
        return serve_openai_bad(b, "response_format",
                                "'response_format.json_schema.schema' must be an object, got %s",
                                serve_openai_json_type(sc));
    /* no schema: any JSON value (the engine's "{}") */
    req->schema = sc ? cJSON_PrintUnformatted(sc) : strdup("{}");
    if (!req->schema)
        return -ENOMEM;
    size_t len = strlen(req->schema);
    if (len > MSG_MAX_GRAMMAR_BYTES)
        return serve_openai_bad(b, "response_format", "the schema is %zu bytes, limit %u", len,
                                MSG_MAX_GRAMMAR_BYTES);
    char why[256];
    char *gbnf = grammar_schema_to_gbnf(req->schema, len, why, sizeof why);
    if (!gbnf) /* fail-closed: the frontend would refuse it too; here it is a 400 at once */
        return serve_openai_bad(b, "response_format", "the schema cannot be enforced: %s", why);
    free(gbnf);
    g->json_schema = req->schema;
    g->json_schema_len = len;
    return 0;
}

/* ---- tools (docs/HTTP.md, tool calls) */

/* The first "$ref" under v (a tool's parameters are compiled inside the call schema, where
 * a local pointer would mean something else), its path in path. */
static bool s_has_ref(const cJSON *v, char *path, size_t len) {
    const cJSON *k;
    int i = 0;
    cJSON_ArrayForEach(k, v) {
        size_t at = strlen(path);
        if (k->string && !strcmp(k->string, "$ref") && cJSON_IsObject(v))
            return true;
        if (cJSON_IsObject(k) || cJSON_IsArray(k)) {
            if (k->string)
                snprintf(path + at, len - at, "/%s", k->string);
            else
                snprintf(path + at, len - at, "/%d", i);
            if (s_has_ref(k, path, len))
                return true;
            path[at] = 0;
        }
        i++;
    }
    return false;
}

/* The system turn's description of the tools. */
static char *s_tools_text(cJSON *fns, bool auto_, bool parallel) {
    char *list = cJSON_PrintUnformatted(fns);
    if (!list)
        return NULL;
    const char *fmt = "# Tools\n"
                      "You can call these functions:\n%s\n"
                      "To call %s, answer with nothing but a JSON array of calls: "
                      "[{\"name\": \"<function name>\", \"arguments\": {<its parameters>}}].%s";
    const char *how = parallel ? "functions (one or more)" : "a function (exactly one)";
    const char *tail = auto_ ? "\nWhen no call is needed, answer with text instead." : "";
    size_t n = strlen(fmt) + strlen(list) + strlen(how) + strlen(tail) + 1;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, fmt, list, how, tail);
    free(list);
    return out;
}

/* The tool turn: prepended to the first system message, or a system message of its own. */
static int s_tools_turn(serve_openai_request_t *req, char *text, serve_openai_bad_t *b) {
    msg_generate_t *g = &req->gen;
    if (g->n_messages > 0 && !strcmp(g->messages[0].role, "system")) {
        size_t n = strlen(text), m = g->messages[0].content_len;
        char *o = realloc(text, n + 2 + m + 1);
        if (!o) {
            free(text);
            return -ENOMEM;
        }
        memcpy(o + n, "\n\n", 2);
        memcpy(o + n + 2, g->messages[0].content, m);
        o[n + 2 + m] = 0;
        req->owned[MSG_MAX_MESSAGES] = o;
        g->messages[0].content = o;
        g->messages[0].content_len = n + 2 + m;
        return 0;
    }
    req->owned[MSG_MAX_MESSAGES] = text;
    if (g->n_messages >= MSG_MAX_MESSAGES)
        return serve_openai_bad(b, "messages",
                                "'messages': %d messages and the tools' system turn pass %d",
                                g->n_messages, MSG_MAX_MESSAGES);
    memmove(g->messages + 1, g->messages, (size_t)g->n_messages * sizeof *g->messages);
    memset(&g->messages[0], 0, sizeof g->messages[0]);
    snprintf(g->messages[0].role, sizeof g->messages[0].role, "system");
    g->messages[0].content = text;
    g->messages[0].content_len = strlen(text);
    g->n_messages++;
    return 0;
}

/* functions and function_call, the deprecated form of tools: rewritten in root as tools,
 * tool_choice and parallel_tool_calls false (one call, as the old API answers). */
static int s_functions(serve_openai_request_t *req, cJSON *root, serve_openai_bad_t *b) {
    const cJSON *fns = s_field(root, "functions"), *fc = s_field(root, "function_call");
    if (!fns || !cJSON_GetArraySize(fns)) {
        if (fc && !s_only_no_tool(fc))
            return serve_openai_bad(b, "function_call",
                                    "'function_call' names a function: it needs 'functions'");
        return 0;
    }
    if (s_field(root, "tools") || s_field(root, "tool_choice"))
        return serve_openai_bad(b, "functions",
                                "'functions' and 'tools': give one (functions is the "
                                "deprecated form of tools)");
    cJSON *tools = cJSON_CreateArray(), *choice = NULL;
    const cJSON *f;
    int i = 0;
    cJSON_ArrayForEach(f, fns) {
        if (!cJSON_IsObject(f)) {
            cJSON_Delete(tools);
            return serve_openai_bad(b, "functions",
                                    "'functions[%d]': expected {name, description, parameters}", i);
        }
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "type", "function");
        cJSON_AddItemToObject(t, "function", cJSON_Duplicate(f, true));
        cJSON_AddItemToArray(tools, t);
        i++;
    }
    if (cJSON_IsString(fc)) {
        if (strcmp(fc->valuestring, "none") && strcmp(fc->valuestring, "auto")) {
            cJSON_Delete(tools);
            return serve_openai_bad(b, "function_call",
                                    "'function_call': '%.64s' is not none, auto or {name}",
                                    fc->valuestring);
        }
        choice = cJSON_CreateString(fc->valuestring);
    } else if (fc) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fc, "name");
        if (!cJSON_IsString(nm)) {
            cJSON_Delete(tools);
            return serve_openai_bad(b, "function_call",
                                    "'function_call': expected none, auto or {name}");
        }
        choice = cJSON_CreateObject();
        cJSON_AddStringToObject(choice, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(choice, "function"), "name",
                                nm->valuestring);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, "parallel_tool_calls");
    cJSON_AddItemToObject(root, "tools", tools);
    if (choice)
        cJSON_AddItemToObject(root, "tool_choice", choice);
    cJSON_AddFalseToObject(root, "parallel_tool_calls");
    req->functions = true;
    return 0;
}

int serve_openai_tools_compile(const cJSON *tools, const cJSON *choice, const cJSON *par,
                               serve_openai_tools_t *tools_mode, char **grammar, char **turn,
                               serve_openai_bad_t *b) {
    *tools_mode = SERVE_OPENAI_TOOLS_NONE;
    *grammar = *turn = NULL;
    if (tools && !cJSON_IsArray(tools))
        return serve_openai_bad(b, "tools", "'tools' must be an array");
    if (par && !cJSON_IsBool(par))
        return serve_openai_bad(b, "parallel_tool_calls",
                                "'parallel_tool_calls' must be a boolean");
    int nt = tools ? cJSON_GetArraySize(tools) : 0;
    bool parallel = !par || cJSON_IsTrue(par);
    const char *named = NULL, *mode = nt ? "auto" : "none";
    if (nt > SERVE_OPENAI_MAX_TOOLS)
        return serve_openai_bad(b, "tools", "'tools': %d tools, at most %d", nt,
                                SERVE_OPENAI_MAX_TOOLS);
    if (cJSON_IsString(choice)) {
        mode = choice->valuestring;
        if (strcmp(mode, "none") && strcmp(mode, "auto") && strcmp(mode, "required"))
            return serve_openai_bad(b, "tool_choice",
                                    "'tool_choice': '%.64s' is not one of none, auto, required or "
                                    "{type: function, function: {name}}",
                                    mode);
    } else if (choice) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(choice, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(choice, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "function") || !cJSON_IsString(nm))
            return serve_openai_bad(b, "tool_choice",
                                    "'tool_choice': expected {type: function, function: {name}}");
        named = nm->valuestring;
        mode = "required";
    }
    if (!nt && strcmp(mode, "none"))
        return serve_openai_bad(b, "tool_choice", "'tool_choice': '%s' needs tools",
                                named ? named : mode);
    if (!strcmp(mode, "none"))
        return 0; /* text: the tools are not described (their history still is) */
    /* check each tool; the call schema: an array of {name: const, arguments: parameters} */
    cJSON *fns = cJSON_CreateArray(), *alts = cJSON_CreateArray();
    cJSON *sch = cJSON_CreateObject();
    int rc = 0, i = 0, found = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char param[64], path[256] = "";
        snprintf(param, sizeof param, "tools[%d]", i);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function"), *k;
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *desc = s_field(fn, "description"), *pars = s_field(fn, "parameters");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
            !cJSON_IsObject(fn) || !cJSON_IsString(nm)) {
            rc = serve_openai_bad(b, "tools",
                                  "'%s': expected {type: function, function: {name, ...}}", param);
            goto out;
        }
        cJSON_ArrayForEach(k, fn) {
            if (strcmp(k->string, "name") && strcmp(k->string, "description") &&
                strcmp(k->string, "parameters") && strcmp(k->string, "strict")) {
                rc = serve_openai_bad(b, "tools", "'%s.function.%.32s' is not supported", param,
                                      k->string);
                goto out;
            }
        }
        size_t nl = strlen(nm->valuestring);
        if (nl < 1 || nl > 64 ||
            strspn(nm->valuestring, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                    "0123456789_-") != nl) {
            rc = serve_openai_bad(b, "tools", "'%s.function.name' must be 1..64 of a-z A-Z 0-9 _ -",
                                  param);
            goto out;
        }
        for (const cJSON *u = tools->child; u != t; u = u->next)
            if (!strcmp(cJSON_GetObjectItemCaseSensitive(
                            cJSON_GetObjectItemCaseSensitive(u, "function"), "name")
                            ->valuestring,
                        nm->valuestring)) {
                rc = serve_openai_bad(b, "tools", "'%s': the name '%s' is used twice", param,
                                      nm->valuestring);
                goto out;
            }
        if (desc && !cJSON_IsString(desc)) {
            rc = serve_openai_bad(b, "tools", "'%s.function.description' must be a string", param);
            goto out;
        }
        if (pars && !cJSON_IsObject(pars)) {
            rc = serve_openai_bad(b, "tools", "'%s.function.parameters' must be an object", param);
            goto out;
        }
        if (pars && s_has_ref(pars, path, sizeof path)) {
            rc = serve_openai_bad(
                b, "tools",
                "'%s.function.parameters' cannot be enforced: #%s: $ref: not supported in "
                "tool parameters",
                param, path);
            goto out;
        }
        /* compiled alone first, so that a refusal names the path inside parameters */
        char *ptext = pars ? cJSON_PrintUnformatted(pars) : strdup("{\"type\":\"object\"}");
        char why[256];
        char *gb = ptext ? grammar_schema_to_gbnf(ptext, strlen(ptext), why, sizeof why) : NULL;
        bool oom = !ptext;
        free(ptext);
        if (!gb) {
            rc = !oom ? serve_openai_bad(b, "tools",
                                         "'%s.function.parameters' cannot be enforced: %s", param,
                                         why)
                      : -ENOMEM;
            goto out;
        }
        free(gb);
        cJSON *d = cJSON_CreateObject(); /* its description for the system turn */
        cJSON_AddItemToArray(fns, d);
        cJSON_AddStringToObject(d, "name", nm->valuestring);
        if (desc)
            cJSON_AddStringToObject(d, "description", desc->valuestring);
        cJSON_AddItemToObject(d, "parameters",
                              pars ? cJSON_Duplicate(pars, true) : cJSON_CreateObject());
        if (!named || !strcmp(named, nm->valuestring)) {
            cJSON *alt = cJSON_CreateObject(), *props;
            cJSON_AddItemToArray(alts, alt);
            cJSON_AddStringToObject(alt, "type", "object");
            props = cJSON_AddObjectToObject(alt, "properties");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "name"), "const",
                                    nm->valuestring);
            cJSON_AddItemToObject(props, "arguments",
                                  pars ? cJSON_Duplicate(pars, true)
                                       : cJSON_Parse("{\"type\":\"object\"}"));
            cJSON *req_ = cJSON_AddArrayToObject(alt, "required");
            cJSON_AddItemToArray(req_, cJSON_CreateString("name"));
            cJSON_AddItemToArray(req_, cJSON_CreateString("arguments"));
            cJSON_AddFalseToObject(alt, "additionalProperties");
            found++;
        }
        i++;
    }
    if (named && !found) {
        rc = serve_openai_bad(b, "tool_choice", "'tool_choice': no tool is named '%.64s'", named);
        goto out;
    }
    cJSON_AddStringToObject(sch, "type", "array");
    cJSON *items = cJSON_AddObjectToObject(sch, "items");
    cJSON_AddItemToObject(items, "anyOf", alts);
    alts = NULL;
    cJSON_AddNumberToObject(sch, "minItems", 1);
    cJSON_AddNumberToObject(sch, "maxItems", parallel ? SERVE_OPENAI_MAX_CALLS : 1);
    char *text = cJSON_PrintUnformatted(sch), why[256];
    char *gb = text ? grammar_schema_to_gbnf(text, strlen(text), why, sizeof why) : NULL;
    bool oom = !text;
    free(text);
    if (!gb) {
        rc = !oom ? serve_openai_bad(b, "tools", "the tools cannot be enforced: %s", why) : -ENOMEM;
        goto out;
    }
    bool auto_ = !strcmp(mode, "auto");
    if (auto_) { /* root ::= calls | text, text: a first character no call starts with */
        static const char text_rule[] = "tools-text ::= [^ \\t\\n\\[{] .*\n";
        char *nl = strchr(gb, '\n');
        size_t head = (size_t)(nl - gb), n = strlen(gb);
        char *o = malloc(n + sizeof text_rule + 16);
        if (!o) {
            free(gb);
            rc = -ENOMEM;
            goto out;
        }
        memcpy(o, gb, head);
        memcpy(o + head, " | tools-text", 13);
        memcpy(o + head + 13, gb + head, n - head);
        memcpy(o + 13 + n, text_rule, sizeof text_rule);
        free(gb);
        gb = o;
    }
    if (strlen(gb) > MSG_MAX_GRAMMAR_BYTES) {
        rc = serve_openai_bad(b, "tools", "the tools' grammar is %zu bytes, limit %u", strlen(gb),
                              MSG_MAX_GRAMMAR_BYTES);
        free(gb);
        goto out;
    }
    if (!(*turn = s_tools_text(fns, auto_, parallel))) {
        free(gb);
        rc = -ENOMEM;
        goto out;
    }
    *grammar = gb;
    *tools_mode = auto_ ? SERVE_OPENAI_TOOLS_AUTO : SERVE_OPENAI_TOOLS_FORCED;
out:
    cJSON_Delete(fns);
    cJSON_Delete(alts);
    cJSON_Delete(sch);
    return rc;
}

/* tools, tool_choice, parallel_tool_calls: the mode, the system turn and the grammar. */
static int s_tools(serve_openai_request_t *req, const cJSON *root, serve_openai_bad_t *b) {
    msg_generate_t *g = &req->gen;
    serve_openai_tools_t mode;
    char *gb, *turn;
    int rc = serve_openai_tools_compile(s_field(root, "tools"), s_field(root, "tool_choice"),
                                        s_field(root, "parallel_tool_calls"), &mode, &gb, &turn, b);
    if (rc || mode == SERVE_OPENAI_TOOLS_NONE)
        return rc;
    if (g->json_object || g->json_schema) {
        free(gb);
        free(turn);
        return serve_openai_bad(b, "response_format",
                                "'response_format' together with tools is not supported");
    }
    req->grammar = gb;
    g->grammar = gb;
    g->grammar_len = strlen(gb);
    req->tools = mode;
    return s_tools_turn(req, turn, b);
}

/* cache_tags (a string or an array, checked by its row): comma-separated into g. */
static int s_cache_tags(msg_generate_t *g, const cJSON *f, serve_openai_bad_t *b) {
    char *o = g->cache_tags;
    size_t n = 0, cap = sizeof g->cache_tags;
    if (cJSON_IsString(f)) {
        if ((n = strlen(f->valuestring)) >= cap)
            return serve_openai_bad(b, "cache_tags", "'cache_tags' is longer than %d bytes",
                                    MSG_MAX_CACHE_TAGS_BYTES);
        memcpy(o, f->valuestring, n + 1);
        return 0;
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, f) {
        if (!cJSON_IsString(t) || !t->valuestring[0] || strchr(t->valuestring, ','))
            return serve_openai_bad(b, "cache_tags",
                                    "'cache_tags': expected non-empty strings without commas, "
                                    "got %s",
                                    cJSON_IsString(t) ? "one empty or with a comma"
                                                      : serve_openai_json_type(t));
        size_t len = strlen(t->valuestring);
        if (n + (n > 0) + len >= cap)
            return serve_openai_bad(b, "cache_tags", "'cache_tags' is longer than %d bytes joined",
                                    MSG_MAX_CACHE_TAGS_BYTES);
        if (n)
            o[n++] = ',';
        memcpy(o + n, t->valuestring, len + 1);
        n += len;
    }
    return 0;
}

/* The answer cache's fields, after s_sampling (its seed).  The gateway draws a seed when
 * the body gives none (OpenAI: a fresh sample each time), and a drawn seed would make two
 * equal requests two keys (serve_semcache_req): a greedy request, whose answer no seed
 * changes, and one with cache_sampled go without one (seed 0, as a native generate
 * without a seed), and another sampled request without a seed is never cached (cache
 * off: its answer could be found again by no one). */
static int s_cache(msg_generate_t *g, const cJSON *root, serve_openai_bad_t *b) {
    const cJSON *f;
    double v;
    int rc;
    if ((f = s_field(root, "cache"))) { /* a string (the table's type check) */
        g->cache = -1;
        for (int m = MSG_CACHE_OFF; m <= MSG_CACHE_ON_SEMANTIC; m++)
            if (!strcmp(f->valuestring, msg_cache_mode_names[m]))
                g->cache = m;
        if (g->cache < 0)
            return serve_openai_bad(b, "cache",
                                    "'cache': expected \"exact\", \"semantic\" or \"off\", "
                                    "got \"%.32s\"",
                                    f->valuestring);
    }
    if (s_number(root, "cache_delta", &v)) {
        if (!(v > 0))
            return serve_openai_bad(b, "cache_delta", "'cache_delta': %g is out of range (0, 0.5]",
                                    v);
        g->cache_delta = v;
    }
    if (s_number(root, "cache_ttl", &v)) {
        g->has_cache_ttl = true;
        g->cache_ttl_s = (int64_t)v;
    }
    if ((f = s_field(root, "cache_tags")) && (rc = s_cache_tags(g, f, b)))
        return rc;
    g->cache_sampled = (f = s_field(root, "cache_sampled")) && cJSON_IsTrue(f);
    if (s_field(root, "seed"))
        return 0;
    if (g->sampling.temperature <= 0 || g->cache_sampled) {
        g->has_seed = false; /* n > 1: serve_choices gives each choice its seed 0 + i */
        g->sampling.seed = 0;
    } else {
        g->cache = MSG_CACHE_OFF;
    }
    return 0;
}

static int s_translate(serve_openai_request_t *req, serve_openai_api_t api,
                       const serve_openai_defaults_t *def, uint64_t seed, serve_openai_bad_t *b) {
    const cJSON *root = req->root, *f;
    msg_generate_t *g = &req->gen;
    double v = 0;
    int rc;
    if (!cJSON_IsObject(root))
        return serve_openai_bad(b, "", "the body must be a JSON object, not %s",
                                serve_openai_json_type(root));
    if ((rc = s_check_all(api, root, b)))
        return rc;
    /* log-probabilities: chat has logprobs (bool) + top_logprobs (0..20); the legacy
     * completions API has logprobs (int 0..5: the alternatives) */
    if (s_number(root, "priority", &v))
        g->priority = (int)v;
    if ((f = s_field(root, "kv_compress"))) { /* a string (the table's type check) */
        kv_compress_t kc;
        char why[160];
        if (strlen(f->valuestring) > MSG_MAX_KV_COMPRESS_BYTES)
            return serve_openai_bad(b, "kv_compress", "'kv_compress' is longer than %d bytes",
                                    MSG_MAX_KV_COMPRESS_BYTES);
        if (kv_compress_parse(f->valuestring, &kc, why, sizeof why))
            return serve_openai_bad(b, "kv_compress", "'kv_compress': %s", why);
        snprintf(g->kv_compress, sizeof g->kv_compress, "%s", f->valuestring);
    }
    if (api == CHAT) {
        g->logprobs = (f = s_field(root, "logprobs")) && cJSON_IsTrue(f);
        if (s_number(root, "top_logprobs", &v) && v > 0 && !g->logprobs)
            return serve_openai_bad(b, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        if (s_field(root, "top_logprobs"))
            g->top_logprobs = (int)v;
    } else if (s_number(root, "logprobs", &v)) {
        g->logprobs = true;
        g->top_logprobs = (int)v;
    }
    /* the prompt */
    if (api == CHAT) {
        if (!(f = s_field(root, "messages")))
            return serve_openai_bad(b, "messages", "'messages' is required");
        if ((rc = s_messages(req, f, b)))
            return rc;
    } else {
        if (!(f = s_field(root, "prompt")))
            return serve_openai_bad(b, "prompt", "'prompt' is required");
        if ((rc = s_prompt(g, f, b)))
            return rc;
    }
    /* length */
    /* neither given: OpenAI's "until the context ends", the gateway's option (0: the
     * protocol's limit) as a ceiling that the worker lowers to what its context leaves */
    g->max_tokens = def->max_tokens > 0 ? def->max_tokens : MSG_MAX_TOKENS;
    g->fit_context = true;
    if (s_number(root, "max_tokens", &v))
        g->max_tokens = (int)v, g->fit_context = false;
    if (s_number(root, "max_completion_tokens", &v))
        g->max_tokens = (int)v, g->fit_context = false;
    s_sampling(g, root, def, seed);
    if ((rc = s_cache(g, root, b)))
        return rc;
    double n = 1;
    s_number(root, "n", &n);
    req->n = (int)n;
    if ((f = s_field(root, "logit_bias")) && (rc = s_logit_bias(req, f, b)))
        return rc;
    if ((f = s_field(root, "stop")) && (rc = s_stop(g, f, b)))
        return rc;
    if (api == CHAT && (f = s_field(root, "response_format")) &&
        (rc = s_response_format(req, f, b)))
        return rc;
    if (api == CHAT && ((rc = s_functions(req, req->root, b)) || (rc = s_tools(req, root, b))))
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
            bool usage = !strcmp(k->string, "include_usage");
            /* include_obfuscation pads chunks against size side channels: not the answer */
            if (!usage && strcmp(k->string, "include_obfuscation"))
                return serve_openai_bad(
                    b, param, "'%s' is not supported (only include_usage, include_obfuscation)",
                    param);
            if (!cJSON_IsBool(k))
                return serve_openai_bad(b, param, "'%s': expected a boolean, got %s", param,
                                        serve_openai_json_type(k));
            if (usage)
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
        serve_openai_bad(bad, "", "the body is not valid JSON (at byte %zu of %zu)", at, len);
        return -EBADMSG;
    }
    int rc = s_translate(req, api, def, seed, bad);
    if (rc == -ENOMEM)
        serve_openai_bad(bad, "", "out of memory");
    return rc;
}

void serve_openai_request_clear(serve_openai_request_t *req) {
    for (int i = 0; i < MSG_MAX_MESSAGES + 1; i++) {
        free(req->owned[i]);
        req->owned[i] = NULL;
    }
    free(req->schema);
    req->schema = NULL;
    free(req->grammar);
    req->grammar = NULL;
    free(req->bias);
    req->bias = NULL;
    req->gen.logit_bias = NULL;
    req->gen.n_logit_bias = 0;
    req->gen.grammar = NULL;
    req->gen.grammar_len = 0;
    req->gen.json_schema = NULL;
    req->gen.json_schema_len = 0;
    free(req->gen.messages); /* the rest points into root */
    req->gen.messages = NULL;
    req->gen.n_messages = 0;
    cJSON_Delete(req->root);
    req->root = NULL;
}

/* ---- POST /v1/cache/invalidate */

/* One key of the body into out: prefix and tag non-empty strings that fit, all a boolean. */
static int s_invalidate_key(const cJSON *k, msg_cache_invalidate_t *out, serve_openai_bad_t *b) {
    const char *name = k->string;
    char *dst = !strcmp(name, "prefix") ? out->prefix : !strcmp(name, "tag") ? out->tag : NULL;
    size_t cap = dst == out->prefix ? sizeof out->prefix : sizeof out->tag;
    if (!dst && strcmp(name, "all"))
        return serve_openai_bad(
            b, name, "'%.64s' is not a field of /v1/cache/invalidate (prefix, tag, all)", name);
    if (cJSON_IsNull(k))
        return 0;
    if (!dst) {
        if (!cJSON_IsBool(k))
            return serve_openai_bad(b, name, "'all': expected a boolean, got %s",
                                    serve_openai_json_type(k));
        out->all = cJSON_IsTrue(k);
        return 0;
    }
    if (!cJSON_IsString(k) || !k->valuestring[0] || strlen(k->valuestring) >= cap)
        return serve_openai_bad(b, name, "'%s': expected a string of 1..%zu bytes", name, cap - 1);
    memcpy(dst, k->valuestring, strlen(k->valuestring) + 1);
    return 0;
}

int serve_openai_invalidate_parse(const char *body, size_t len, msg_cache_invalidate_t *out,
                                  serve_openai_bad_t *bad) {
    memset(bad, 0, sizeof *bad);
    out->prefix[0] = out->tag[0] = 0;
    out->all = false;
    cJSON *root = body && strlen(body) == len ? cJSON_ParseWithLength(body, len) : NULL;
    if (!root) {
        serve_openai_bad(bad, "", "the body is not valid JSON");
        return -EBADMSG;
    }
    int rc = cJSON_IsObject(root) ? 0 : serve_openai_bad(bad, "", "the body must be a JSON object");
    const cJSON *k;
    for (k = rc ? NULL : root->child; k && !rc; k = k->next)
        rc = s_invalidate_key(k, out, bad);
    if (!rc && !out->prefix[0] && !out->tag[0] && !out->all)
        rc = serve_openai_bad(bad, "", "give at least one of prefix, tag, all (true)");
    cJSON_Delete(root);
    return rc;
}

/* ---- answers */

const char *serve_openai_finish(int finish) {
    return finish == MSG_FINISH_LENGTH ? "length" : "stop";
}

/* ---- reading tool calls from the answer's text */

static size_t s_ws(const char *s, size_t len, size_t p) {
    while (p < len && (s[p] == ' ' || s[p] == '\t' || s[p] == '\n' || s[p] == '\r'))
        p++;
    return p;
}

/* The end of the JSON string that starts at s[p] ('"'), or SIZE_MAX when cut. */
static size_t s_string_end(const char *s, size_t len, size_t p) {
    for (p++; p < len; p++) {
        if (s[p] == '\\')
            p++;
        else if (s[p] == '"')
            return p + 1;
    }
    return SIZE_MAX;
}

/* The end of the JSON value that starts at s[p], or SIZE_MAX when cut. */
static size_t s_value_end(const char *s, size_t len, size_t p) {
    if (s[p] == '"')
        return s_string_end(s, len, p);
    if (s[p] == '{' || s[p] == '[') {
        int depth = 0;
        while (p < len) {
            if (s[p] == '"') {
                if ((p = s_string_end(s, len, p)) == SIZE_MAX)
                    return SIZE_MAX;
                continue;
            }
            if (s[p] == '{' || s[p] == '[')
                depth++;
            else if ((s[p] == '}' || s[p] == ']') && --depth == 0)
                return p + 1;
            p++;
        }
        return SIZE_MAX;
    }
    while (p < len && !strchr(",}] \t\r\n", s[p])) /* a scalar: it ends at what follows */
        p++;
    return p < len ? p : SIZE_MAX;
}

int serve_openai_scan_calls(const char *s, size_t len, serve_openai_call_t *calls, int max, int *n,
                            bool *complete) {
    *n = 0;
    *complete = false;
    size_t p = s_ws(s, len, 0);
    if (p == len)
        return 0;
    if (s[p++] != '[')
        return -EINVAL;
    for (;;) {
        if ((p = s_ws(s, len, p)) == len)
            return 0;
        if (s[p] == ']') {
            *complete = true;
            return 0;
        }
        if (*n && s[p++] != ',') /* between calls */
            return -EINVAL;
        if ((p = s_ws(s, len, p)) == len)
            return 0;
        if (s[p++] != '{' || *n == max)
            return -EINVAL;
        serve_openai_call_t *c = &calls[(*n)++];
        memset(c, 0, sizeof *c);
        for (;;) { /* the call's keys */
            if ((p = s_ws(s, len, p)) == len)
                return 0;
            if (s[p] == '}') {
                p++;
                break;
            }
            if (s[p] == ',' && (p = s_ws(s, len, p + 1)) == len)
                return 0;
            if (s[p] != '"')
                return -EINVAL;
            size_t k = p, e = s_string_end(s, len, p);
            if (e == SIZE_MAX || (p = s_ws(s, len, e)) == len)
                return 0;
            if (s[p++] != ':')
                return -EINVAL;
            if ((p = s_ws(s, len, p)) == len)
                return 0;
            bool is_name = e - k == 6 && !memcmp(s + k, "\"name\"", 6);
            bool is_args = e - k == 11 && !memcmp(s + k, "\"arguments\"", 11);
            if (is_args) {
                c->args_begun = true;
                c->args_at = p;
            }
            size_t v = s_value_end(s, len, p);
            if (v == SIZE_MAX) {
                if (is_args)
                    c->args_end = len;
                return 0;
            }
            if (is_name) {
                if (s[p] != '"')
                    return -EINVAL;
                c->named = true;
                c->name_at = p + 1;
                c->name_len = v - p - 2;
            } else if (is_args) {
                c->args_end = v;
                c->args_done = true;
            }
            p = v;
        }
    }
}

void serve_openai_call_id(const char *resp_id, int i, char *out, size_t len) {
    const char *tail = strpbrk(resp_id, "-_");
    snprintf(out, len, "call_%s_%d", tail ? tail + 1 : resp_id, i);
}

cJSON *serve_openai_tool_calls(const char *text, size_t len, const char *resp_id, bool *complete) {
    serve_openai_call_t calls[SERVE_OPENAI_MAX_CALLS];
    int n = 0;
    *complete = false;
    size_t p = s_ws(text, len, 0);
    if (p == len || text[p] != '[' ||
        serve_openai_scan_calls(text, len, calls, SERVE_OPENAI_MAX_CALLS, &n, complete) ||
        (*complete && !n))
        return NULL;
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < n && calls[i].named && calls[i].args_done; i++) {
        const serve_openai_call_t *c = &calls[i];
        cJSON *call = cJSON_CreateObject(), *fn;
        cJSON_AddItemToArray(arr, call);
        char buf[MSG_MAX_ID_BYTES + 32];
        serve_openai_call_id(resp_id, i, buf, sizeof buf);
        cJSON_AddStringToObject(call, "id", buf);
        cJSON_AddStringToObject(call, "type", "function");
        fn = cJSON_AddObjectToObject(call, "function");
        snprintf(buf, sizeof buf, "%.*s", (int)c->name_len, text + c->name_at);
        cJSON_AddStringToObject(fn, "name", buf);
        char *a = strndup(text + c->args_at, c->args_end - c->args_at);
        cJSON_AddStringToObject(fn, "arguments", a ? a : "");
        free(a);
    }
    return arr;
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

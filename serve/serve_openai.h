/* serve_openai.h - the OpenAI schema of the http gateway (docs/HTTP.md): the JSON body of
 * /v1/chat/completions and /v1/completions turned into the client protocol's generate
 * (msgs/msg_client.h), and the pieces of the answers that come from wire structs.
 *
 * Every field's rule is one row of one table (serve_openai_fields): its name, the
 * endpoints that know it, its JSON type and range, and what happens to it: mapped onto
 * generate, accepted because it cannot change the answer, accepted only at its default
 * value, or refused.  A field that is not in the table is refused too: a field that could
 * change the answer is answered 400 naming it, never silently ignored.  A field given as
 * JSON null counts as absent.  Library code: no sockets, no HTTP. */
#ifndef SERVE_OPENAI_H
#define SERVE_OPENAI_H

#include "msg_client.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The endpoints (a bit set in a field's row). */
typedef enum {
    SERVE_OPENAI_CHAT = 1,        /* POST /v1/chat/completions */
    SERVE_OPENAI_COMPLETIONS = 2, /* POST /v1/completions (legacy) */
} serve_openai_api_t;

/* The JSON a field takes. */
typedef enum {
    SERVE_OPENAI_STRING,
    SERVE_OPENAI_NUMBER,  /* in [lo, hi] */
    SERVE_OPENAI_INTEGER, /* whole, in [lo, hi] */
    SERVE_OPENAI_BOOL,
    SERVE_OPENAI_ARRAY,
    SERVE_OPENAI_OBJECT,
    SERVE_OPENAI_STRING_OR_ARRAY,
    SERVE_OPENAI_STRING_OR_OBJECT,
} serve_openai_type_t;

/* What happens to a field that is given (and has the right type and range). */
typedef enum {
    SERVE_OPENAI_MAP,    /* implemented: it sets what `does` names */
    SERVE_OPENAI_ACCEPT, /* read and dropped: it cannot change the answer (`does` says why) */
    SERVE_OPENAI_ONLY,   /* accepted at one value (only() true), else 400 with `does` */
    SERVE_OPENAI_REFUSE, /* any value: 400 with `does` */
} serve_openai_rule_t;

/* One field of a request body. */
typedef struct {
    const char *name;
    unsigned api;             /* serve_openai_api_t bits: the endpoints that know it */
    serve_openai_type_t type; /* its JSON */
    double lo, hi;            /* numbers: the range (outside: 400) */
    serve_openai_rule_t rule;
    bool (*only)(const cJSON *v); /* ONLY: true for the accepted value(s) */
    const char *does;             /* MAP: what it maps to; ACCEPT: why it is harmless;
                                     ONLY / REFUSE: the sentence of the 400 */
} serve_openai_field_t;

/* The table, n rows (*n set). */
const serve_openai_field_t *serve_openai_fields(int *n);
/* The row of name for api, or NULL when api does not know it. */
const serve_openai_field_t *serve_openai_field(serve_openai_api_t api, const char *name);

/* The defaults that come from the gateway's options, not from OpenAI. */
typedef struct {
    int max_tokens; /* neither max_tokens nor max_completion_tokens given: generate until the
                       context ends (fit_context), at most this many (0: MSG_MAX_TOKENS) */
    int top_k;      /* top_k not given (0: off, as OpenAI) */
    double min_p;   /* min_p not given (0: off) */
} serve_openai_defaults_t;

/* Why a body was refused: the field (OpenAI's error.param; "" for the whole body) and
 * one line. */
typedef struct {
    char param[64];
    char msg[512];
} serve_openai_bad_t;

/* Set b (param, and the message printf'd) and return -EINVAL: a 400 naming param. */
int serve_openai_bad(serve_openai_bad_t *b, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* What a chat request does with its tools (docs/HTTP.md, tool calls). */
typedef enum {
    SERVE_OPENAI_TOOLS_NONE,   /* no tools, or tool_choice "none": the answer is text */
    SERVE_OPENAI_TOOLS_AUTO,   /* the answer is text or a call array (its first byte says) */
    SERVE_OPENAI_TOOLS_FORCED, /* "required" or a named function: the answer is a call array */
} serve_openai_tools_t;

#define SERVE_OPENAI_MAX_TOOLS 32 /* tools per request */
#define SERVE_OPENAI_MAX_CALLS 8  /* calls per answer (parallel_tool_calls) */

/* A translated request.  gen's strings point into root or into owned (the joins of text
 * parts, the rendered tool turns); serve_openai_request_clear frees all of it. */
typedef struct {
    msg_generate_t gen;                /* everything but gen.id (the caller's) */
    int n;                             /* choices (1..SERVE_CHOICES_MAX; serve_choices) */
    bool include_usage;                /* stream_options.include_usage */
    serve_openai_tools_t tools;        /* how the answer is read */
    bool functions;                    /* the tools came as the deprecated functions */
    cJSON *root;                       /* the parsed body (owned) */
    char *owned[MSG_MAX_MESSAGES + 1]; /* malloc'd contents; [MSG_MAX_MESSAGES]: the system
                                          turn that describes the tools */
    char *schema;                      /* response_format's schema as text (gen.json_schema) */
    char *grammar;                     /* the tool calls' GBNF (gen.grammar) */
    msg_logit_bias_t *bias;            /* logit_bias's entries (gen.logit_bias) */
} serve_openai_request_t;

/* One call of an answer under tools, as far as the text goes: spans of the text. */
typedef struct {
    size_t name_at, name_len; /* the function's name (valid when named) */
    bool named;
    size_t args_at;  /* where the arguments' JSON starts (valid when args_begun) */
    size_t args_end; /* where it ends (args_done), else the end of the text so far */
    bool args_begun, args_done;
} serve_openai_call_t;

/* Scan text (len bytes, possibly cut anywhere) as the answer format of tool calls,
 * [{"name": ..., "arguments": ...}, ...].  The calls begun so far go to calls (at most max,
 * *n set); *complete is set when the array is closed.  0; -EINVAL when the text is not a
 * call array (its first byte other than whitespace is not '[', or it breaks the format). */
int serve_openai_scan_calls(const char *text, size_t len, serve_openai_call_t *calls, int max,
                            int *n, bool *complete);

/* The id of call i of the response resp_id (chatcmpl-..., resp_...): call_<resp_id's tail>_<i>,
 * stable across a resume (the calls are a function of the request).  out: len bytes. */
void serve_openai_call_id(const char *resp_id, int i, char *out, size_t len);

/* The answer text (len bytes, all of it) under tools as OpenAI's message.tool_calls,
 * [{"id", "type": "function", "function": {"name", "arguments": <its JSON text>}}]: the calls
 * whose name and arguments are complete, in order, so that an array cut at max_tokens keeps
 * the calls before the cut (possibly none: an empty array) and no piece of the one cut.
 * *complete is set when the array is closed.  NULL when the text is not a call array
 * (text under tool_choice auto, or a closed array of no call): the text is the content;
 * or when out of memory.  The caller owns the array. */
cJSON *serve_openai_tool_calls(const char *text, size_t len, const char *resp_id, bool *complete);

/* OpenAI's tools (an array of {type: function, function: {name, description, parameters,
 * strict}}), tool_choice (none, auto, required, {type: function, function: {name}}) and
 * parallel_tool_calls (a boolean), each NULL when not given, as what the generate needs:
 * *tools_mode, and unless it is NONE the call array's GBNF (*grammar) and the system turn
 * that describes the tools (*turn), both malloc'd for the caller (docs/HTTP.md, "Tool
 * calls").  0; -EINVAL with b (param: tools, tool_choice or parallel_tool_calls); -ENOMEM. */
int serve_openai_tools_compile(const cJSON *tools, const cJSON *choice, const cJSON *par,
                               serve_openai_tools_t *tools_mode, char **grammar, char **turn,
                               serve_openai_bad_t *b);

/* Parse body (len bytes; body[len] must be its NUL) as a request of api and translate it
 * into req->gen.  seed: the seed to use when the body gives none (OpenAI draws a fresh
 * sample every time: the caller passes a random one); a greedy request, or one with
 * cache_sampled, goes without one (seed 0), so that equal requests are equal generates and
 * the answer cache can find them (docs/HTTP.md, "The answer cache").  0; -EBADMSG when the body is
 * not JSON (bad says at which byte); -EINVAL when a field is wrong, unsupported or unknown (bad
 * names it); -ENOMEM.  req is cleared first, and must be cleared after whatever the result. */
int serve_openai_request_parse(serve_openai_request_t *req, serve_openai_api_t api,
                               const char *body, size_t len, const serve_openai_defaults_t *def,
                               uint64_t seed, serve_openai_bad_t *bad);
/* Frees what parse made; safe twice, and on a zeroed request. */
void serve_openai_request_clear(serve_openai_request_t *req);

/* The body of POST /v1/cache/invalidate (docs/HTTP.md, "The answer cache"): {prefix?, tag?,
 * all?}, at least one of them, into out (out->id is the caller's, left as it was).  0;
 * -EBADMSG when the body is not JSON; -EINVAL with bad naming the field. */
int serve_openai_invalidate_parse(const char *body, size_t len, msg_cache_invalidate_t *out,
                                  serve_openai_bad_t *bad);

/* The body of POST /v1/cache/invalidate (body[len] must be its NUL; docs/HTTP.md, "The answer
 * cache"), {prefix?, tag?, all?} with at least one of them, into out (out->id is the
 * caller's, left as it was).  0; -EBADMSG when the body is not JSON; -EINVAL with bad. */
int serve_openai_invalidate_parse(const char *body, size_t len, msg_cache_invalidate_t *out,
                                  serve_openai_bad_t *bad);

/* OpenAI's finish_reason of a msg_finish_t: "length" or "stop". */
const char *serve_openai_finish(int finish);
/* OpenAI's usage object of u: prompt_tokens, completion_tokens, total_tokens,
 * prompt_tokens_details.cached_tokens.  NULL when out of memory. */
cJSON *serve_openai_usage(const msg_usage_t *u);
/* "a string", "a number", ...: the JSON type of v, for error messages. */
const char *serve_openai_json_type(const cJSON *v);

#endif

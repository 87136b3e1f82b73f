/* serve_answer.h - the answer half of the OpenAI translation (docs/HTTP.md): the events of
 * one generate (token, done, error: msgs/msg_client.h) turned into OpenAI's JSON, for chat
 * completions, legacy completions and Responses.  Streamed, each event appends its SSE
 * chunks to a byte buffer the caller sends; not streamed, the answer is kept until the end
 * and given as one JSON object.  Under tools the answer text is read as a call array and
 * said as OpenAI says calls: chat's tool_calls deltas (or the deprecated function_call),
 * Responses' function_call items.
 *
 * One serve_answer_t per choice; the choices of one request share a serve_answer_req_t
 * (borrowed: it must outlive them).  Library code: no sockets, no HTTP. */
#ifndef SERVE_ANSWER_H
#define SERVE_ANSWER_H

#include "base_buf.h"
#include "msg_client.h"
#include "serve_openai.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

/* Which OpenAI API the answer speaks. */
typedef enum {
    SERVE_ANSWER_CHAT,        /* chat.completion / chat.completion.chunk */
    SERVE_ANSWER_COMPLETIONS, /* text_completion */
    SERVE_ANSWER_RESPONSES,   /* response and its stream events (one choice) */
} serve_answer_api_t;

/* What the choices of one request share. */
typedef struct {
    serve_answer_api_t api;
    char id[MSG_MAX_ID_BYTES + 1]; /* chatcmpl-.. / cmpl-.. / resp_..: the response id */
    const char *model;             /* the model id (borrowed) */
    const char *fingerprint;       /* system_fingerprint (borrowed; chat and completions) */
    int64_t created;               /* unix seconds */
    bool stream;                   /* SSE chunks, else one JSON object at the end */
    bool include_usage;            /* stream_options.include_usage (chat, completions) */
    bool logprobs;                 /* each token's log-probability was asked for */
    serve_openai_tools_t tools;    /* how the answer is read */
    bool functions;    /* chat: the request used the deprecated functions: the call is said as
                          message.function_call and finish_reason "function_call" */
    const cJSON *echo; /* Responses: the request's fields the response object repeats
                          (instructions, tools, temperature, ...; serve_responses), or NULL */
    int cache;         /* msg_cache_mode_t of the generate (serve_answer_cache_header) */
} serve_answer_req_t;

typedef struct serve_answer_t serve_answer_t;

/* The answer of choice index of req.  NULL when out of memory. */
serve_answer_t *serve_answer_new(const serve_answer_req_t *req, int index);
/* Free it and NULL the caller's pointer; safe on NULL and twice. */
void serve_answer_destroy(serve_answer_t **self_p);

/* A token event.  Streamed: its chunks go to out (the first token of a choice opens it:
 * chat's role chunk, Responses' response.created and response.in_progress); not streamed:
 * nothing (the answer comes whole with done).  0, or -ENOMEM. */
int serve_answer_token(serve_answer_t *a, const msg_token_t *t, base_buf_t *out);
/* The done event.  Streamed: this choice's last chunks go to out (chat and completions: the
 * chunk with finish_reason; Responses: the items' .done events; the stream's own end is
 * serve_answer_stream_end); not streamed: the text and log-probabilities are kept (d->text
 * is taken: NULL after).  0, or -ENOMEM. */
int serve_answer_done(serve_answer_t *a, msg_done_t *d, base_buf_t *out);

/* The end of a stream of n choices (all done; u: the request's usage): chat and
 * completions: the usage chunk when include_usage, then "data: [DONE]"; Responses:
 * response.completed (or response.incomplete, cut at max_output_tokens).  0, or -ENOMEM. */
int serve_answer_stream_end(serve_answer_t *const *a, int n, const msg_usage_t *u, base_buf_t *out);
/* A stream that fails after it began (a: any choice of it; code: a msg_code_t): chat and
 * completions: a chunk in OpenAI's error shape and [DONE]; Responses: response.failed with
 * the error.  0, or -ENOMEM. */
int serve_answer_stream_error(serve_answer_t *a, int code, const char *message, base_buf_t *out);

/* The whole non-streamed answer of n choices (all done): chat.completion,
 * text_completion, or the response object.  An answer the cache gave (done.cache) says so
 * in strata_cache, {hit: exact|semantic|kb, entry, similarity}: the first choice's at the
 * top, and with n > 1 each cached choice's in its choice object (docs/HTTP.md, "The answer
 * cache").  NULL when out of memory. */
cJSON *serve_answer_json(serve_answer_t *const *a, int n, const msg_usage_t *u);

/* The X-Strata-Cache header of a non-streamed answer of n choices (the first choice's):
 * "exact", "semantic" or "kb" when the cache gave it; "miss" when it was generated and the
 * request asked for the cache (exact or semantic); NULL otherwise (no header). */
const char *serve_answer_cache_header(serve_answer_t *const *a, int n);

/* The answer of a (done) as the assistant's turn of a chat: {"role": "assistant",
 * "content": text} or {"role": "assistant", "tool_calls": [...]} (Responses keeps it for a
 * later previous_response_id).  NULL when out of memory. */
cJSON *serve_answer_message(const serve_answer_t *a);

/* OpenAI's error object {"error": {message, type, param, code}}: type from the HTTP status
 * (invalid_request_error, authentication_error, rate_limit_error, ...). */
cJSON *serve_answer_error_obj(const char *message, const char *type, const char *param,
                              const char *code);
/* The error type of a msg_code_t (rate_limit_error, invalid_request_error, server_error). */
const char *serve_answer_error_type(int code);

#endif

/* serve_responses.h - OpenAI's Responses API (POST /v1/responses, docs/HTTP.md) on top
 * of the chat translation: a Responses body becomes a chat completion body (its input
 * items as messages, its instructions as the system turn, its flat tools as chat tools,
 * text.format as response_format), which serve_openai turns into a generate; the answer
 * is said by serve_answer (SERVE_ANSWER_RESPONSES).  The conversations of finished
 * responses are kept in a store, so a later request can continue one by its
 * previous_response_id, and GET /v1/responses/{id} can give it again.
 *
 * As every OpenAI route of strata: a field that could change the answer and is not
 * supported is a 400 naming it, never silently dropped.  Library code: no sockets. */
#ifndef SERVE_RESPONSES_H
#define SERVE_RESPONSES_H

#include "serve_openai.h"

#include <cjson/cJSON.h>
#include <stdbool.h>

/* Responses kept for previous_response_id and GET: the last this many (the oldest goes). */
#define SERVE_RESPONSES_KEEP 512

/* The conversations of finished responses, by response id. */
typedef struct serve_responses_store_t serve_responses_store_t;

/* An empty store that keeps at most max responses (1..SERVE_RESPONSES_KEEP*16).  NULL
 * when out of memory or max is out of range. */
serve_responses_store_t *serve_responses_store_new(int max);
void serve_responses_store_destroy(serve_responses_store_t **self_p);
/* Keep response id: its conversation (chat messages: the history it saw, instructions
 * left out as OpenAI does, then its answer) and its response object; both taken (the
 * caller's pointers NULLed), also on error.  An id kept already is replaced; when full, the
 * oldest goes.  0 or -ENOMEM. */
int serve_responses_store_put(serve_responses_store_t *s, const char *id, cJSON **messages,
                              cJSON **response);
/* The response object of id, or NULL (borrowed: valid until the next put or delete). */
const cJSON *serve_responses_store_response(const serve_responses_store_t *s, const char *id);
/* Forget id; true when it was kept. */
bool serve_responses_store_delete(serve_responses_store_t *s, const char *id);
/* Responses kept now. */
int serve_responses_store_count(const serve_responses_store_t *s);

/* A translated Responses request. */
typedef struct {
    serve_openai_request_t chat; /* the chat request it became (gen, tools, ...) */
    cJSON *echo;                 /* the request's fields the response object repeats (instructions,
                                    max_output_tokens, metadata, parallel_tool_calls, previous_response_id,
                                    reasoning, store, temperature, text, tool_choice, tools, top_p,
                                    truncation, user) */
    cJSON *history;              /* the conversation as chat messages, instructions left out: the
                                    previous response's, then this input; the answer is added when done */
    bool store;                  /* keep it (store, default true) */
} serve_responses_request_t;

/* Parse body (len bytes, NUL after) as a Responses request and translate it (store: the
 * responses a previous_response_id may name; def, seed: as serve_openai_request_parse).
 * 0; -EBADMSG (not JSON), -EINVAL (a field wrong or unsupported; bad names it in the
 * Responses API's terms: input, max_output_tokens, text.format, ...), -ENOENT (no such
 * previous_response_id; bad says which), -ENOMEM.  req must be cleared whatever the
 * result. */
int serve_responses_request_parse(serve_responses_request_t *req, const char *body, size_t len,
                                  const serve_responses_store_t *store,
                                  const serve_openai_defaults_t *def, uint64_t seed,
                                  serve_openai_bad_t *bad);
/* Frees what parse made; safe twice and on a zeroed request. */
void serve_responses_request_clear(serve_responses_request_t *req);

#endif

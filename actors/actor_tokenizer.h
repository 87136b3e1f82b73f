/* actor_tokenizer.h - the tokenizer: owns the vocabulary, merges and chat
 * template.  Turns a client's prompt or messages into token ids exactly as
 * `strata generate` does (chat template + special tokens for messages, BOS from
 * the tokenizer's metadata).  Token streams are detokenized by the worker that
 * produces them (one hop per token instead of two; see actor_worker.h), with the
 * same library code.
 *
 * Options: actor_tokenizer_opts in actor_tokenizer.c (`strata actor --help`).
 *
 * Command / reply table (inbound PULL socket):
 *   tok_request (frontend) -> work_request to the router; empty prompt or no
 *                             chat template: work_error "bad_request" to the
 *                             frontend; router queue full: "overloaded"
 *   work_cancel (frontend) -> to the router (same path as the request, so it
 *                             never overtakes it)
 *   work_error  (worker, router) -> forwarded to the frontend
 *   ping / stats_query     -> pong / stats_answer to the frontend
 *   stop                   -> ends the actor
 */
#ifndef ACTOR_TOKENIZER_H
#define ACTOR_TOKENIZER_H

#include "actor_runtime.h"

/* The options of tokenizer, loaded by the runtime through actor_tokenizer_opts (one
 * field per option, named after its key): actor_env_cfg(env) in the actor. */
typedef struct {
    const char *model; /* GGUF path (vocabulary and chat template) */
} actor_tokenizer_cfg_t;

int actor_tokenizer_main(actor_env_t *env);
/* Its options (topology line "tokenizer" or "defaults"). */
extern const actor_opt_t actor_tokenizer_opts[];

#endif

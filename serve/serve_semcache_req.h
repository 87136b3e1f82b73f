/* serve_semcache_req.h - what the semantic cache keys a request by (issue 28,
 * docs/SEMCACHE.md), computed by the frontend from the client's generate:
 *   context   everything that changes the answer besides the question: the conversation
 *             before the last turn (the system prompt included), max_tokens, the sampling
 *             parameters and a sampled request's seed, stop strings, logit bias, the
 *             grammar or schema, the KV compression policy (the semcache actor adds the
 *             served model);
 *   exact     the context and the question, byte for byte: the exact layer;
 *   kb_exact  a single-turn chat's question, normalised (case, spacing, final punctuation):
 *             what a knowledge-base record's question is keyed by (0: not single-turn);
 *   text      the question itself (the last turn, or the prompt): what is embedded.
 * And the rules of what is not cached, and of when two answers are the same. */
#ifndef SERVE_SEMCACHE_REQ_H
#define SERVE_SEMCACHE_REQ_H

#include "msg_client.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t context, exact, kb_exact;
    const char *text; /* borrowed from the generate */
    size_t text_len;
} serve_semcache_req_t;

/* g's key into *k, or why g is not cached (a short phrase for counters and traces): tools
 * ("tools"), log-probabilities ("logprobs"), a sampled request without a seed unless it
 * says cache_sampled ("sampled without a seed").  A streamed request is cached (its hit
 * is one done event carrying the text). */
const char *serve_semcache_req_key(const msg_generate_t *g, serve_semcache_req_t *k);

/* The hash of an answer with its whitespace normalised (runs of spaces, tabs and newlines
 * are one space; none at either end): two answers are the same when these are equal --
 * what a verification compares.  Never 0. */
uint64_t serve_semcache_answer_hash(const char *s, size_t n);
/* The hash of a question normalised for the knowledge base: ASCII case folded, spacing
 * as above, trailing '?', '.', '!' dropped.  Never 0. */
uint64_t serve_semcache_question_hash(const char *s, size_t n);
/* The context of knowledge-base records (every single-turn question shares it). */
#define SERVE_SEMCACHE_KB_CONTEXT 0x6b6e6f776c656467ull

#endif

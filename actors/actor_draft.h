/* actor_draft.h - the draft worker: proposes k tokens that continue a request's
 * history, for the target workers to verify (model/model_spec.h).  Two
 * drafters behind one interface (serve/serve_drafter.h): n-gram lookup in the
 * history itself (no model), or greedy decoding with a small draft model that
 * shares the target's vocabulary, keeping per (worker, rid) KV in its own paged
 * pool so that each request only prefills what changed since the last one.
 *
 * Options: actor_draft_opts in actor_draft.c (`strata actor --help`).
 *
 * Command / reply table (inbound PULL socket):
 *   draft_request (worker N) -> draft_reply to worker N (PUSH to the endpoint of
 *                               "worker<N>", connected on first use): rid and seq
 *                               echoed, base = the history length, tokens = the
 *                               proposals (k, or fewer: 0 when the n-gram drafter
 *                               finds no match).  Requests waiting together are
 *                               drafted in one batch; an older request of the
 *                               same (worker, rid) in that batch is answered
 *                               with no tokens.  An unknown worker index is
 *                               counted and dropped.
 *   draft_end     (worker)   -> frees the request's state (KV blocks)
 *   ping / stats_query       -> pong / stats_answer to the frontend
 *   stop                     -> ends the actor
 * Counters: requests, tokens.proposed, tokens.prefill (model), time.ngram_us,
 * time.model_us, ends, states (held now), states.evicted, fallback.ngram (model
 * mode answered by n-gram lookup), replies.dropped (the worker's queue stayed
 * full ~10 ms), bad_worker, draft.failed, malformed, unexpected.
 */
#ifndef ACTOR_DRAFT_H
#define ACTOR_DRAFT_H

#include "actor_runtime.h"

#include <stdint.h>

/* The options of draft, loaded by the runtime through actor_draft_opts (one
 * field per option, named after its key): actor_env_cfg(env) in the actor. */
typedef struct {
    int draft;               /* ngram|model (its index): drafter: ngram (prompt lookup) or model */
    const char *draft_model; /* draft GGUF (same vocabulary as model, checked at start) */
    const char *model;       /* the target's GGUF (draft=model: to check the vocabularies) */
    int threads;             /* threads of the draft model's forward pass */
    int ngram_min;           /* shortest n-gram tried */
    int ngram_max;           /* longest n-gram tried (tried first) */
    int kv_blocks;           /* the draft model's KV pool, in blocks */
    int block_size;          /* positions per KV block */
    int max_ctx;             /* longest history drafted with the model (longer: n-gram) */
    int step_tokens;         /* tokens per draft forward pass */
} actor_draft_cfg_t;

int actor_draft_main(actor_env_t *env);
/* Its options, declared once (name, type, default, range, help). */
extern const actor_opt_t actor_draft_opts[];

#endif

/* actor_draft.h - the draft worker: proposes k tokens that continue a request's
 * history, for the target workers to verify (model/model_spec.h).  Two
 * drafters: n-gram lookup in the history itself (no model), or greedy decoding
 * with a small draft model that shares the target's vocabulary, keeping per
 * (worker, rid) KV in its own paged pool so that each request only prefills
 * what changed since the last one.
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
#include "model_gguf.h"

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

/* ---- the drafter, without sockets (what the actor runs; usable from tests) */

typedef enum { ACTOR_DRAFT_NGRAM = 0, ACTOR_DRAFT_MODEL = 1 } actor_draft_mode_t;

typedef struct {
    actor_draft_mode_t mode;    /* n-gram lookup or a draft model */
    const char *draft_model;    /* GGUF of the draft model (MODEL) */
    const char *target_model;   /* GGUF of the target, for the vocabulary check; NULL: none */
    int threads;                /* forward-pass threads (1) */
    int ngram_min, ngram_max;   /* n-gram lengths tried, longest first (1, 4) */
    int kv_blocks, block_size;  /* the draft model's KV pool (256 blocks of 16) */
    int max_ctx;                /* longest history drafted with the model (4096); longer
                                 * histories fall back to n-gram lookup */
    int step_tokens;            /* tokens per forward pass (256) */
    actor_counters_t *counters; /* borrowed; NULL: no stats */
} actor_draft_config_t;

/* One request to draft for. */
typedef struct {
    int worker;            /* target worker index (state key with rid) */
    uint64_t rid;          /* request id */
    const int32_t *tokens; /* (n) history, borrowed */
    int n;                 /* history length */
    int k;                 /* proposals wanted, 1..MODEL_SPEC_MAX_K */
    int32_t *out;          /* (k) proposals */
    int n_out;             /* set: proposals written, 0..k */
    actor_draft_mode_t by; /* set: the drafter that answered (NGRAM: also a model fallback) */
} actor_draft_job_t;

typedef struct actor_draft_t actor_draft_t;

/* Zero fields of cfg take the defaults above.  For MODEL: loads the draft
 * model and, when target_model is set, checks the vocabularies
 * (actor_draft_check_vocab).  NULL with a one-line reason in err. */
actor_draft_t *actor_draft_new(const actor_draft_config_t *cfg, char *err, size_t errlen);
void actor_draft_destroy(actor_draft_t **self_p);

/* Draft for n_jobs requests (at most one job per (worker, rid)): fills each
 * job's out and n_out.  MODEL: greedy decoding with the draft model, batched
 * across the jobs; each (worker, rid) keeps the KV of the tokens it has seen,
 * rolled back to the longest common prefix with the new history, so only the
 * difference is prefilled; when the pool is full the least recently used
 * states are dropped; a job that still does not fit (or whose history is
 * longer than max_ctx) falls back to n-gram lookup.  0, or a negative errno
 * (-EINVAL: bad arguments or a repeated (worker, rid); a forward-pass failure
 * leaves the jobs it did not finish with n_out 0). */
int actor_draft_run(actor_draft_t *self, actor_draft_job_t *jobs, int n_jobs);
/* Forget (worker, rid): its KV blocks return to the pool.  Unknown: no-op. */
void actor_draft_end(actor_draft_t *self, int worker, uint64_t rid);
/* States held (requests with KV in the pool). */
int actor_draft_states(const actor_draft_t *self);

/* 0 when draft and target have the same vocabulary: the same number of token
 * embeddings and tokenizer.ggml.tokens, and every token string equal (both
 * tokenizers must load).  Otherwise -EINVAL with one line in err naming both
 * files and the first difference. */
int actor_draft_check_vocab(const model_gguf_t *target, const model_gguf_t *draft, char *err,
                            size_t errlen);

#endif

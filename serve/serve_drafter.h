/* serve_drafter.h - the drafters of speculative decoding behind one interface: they
 * propose k tokens that continue a request's history, for the target to verify
 * (model/model_spec.h).  Two implementations: n-gram lookup in the history itself (no
 * model, no state), and greedy decoding with a small draft model that shares the
 * target's vocabulary, keeping per (worker, rid) KV in its own paged pool so that each
 * request only prefills what changed since the last one.  No sockets: the draft actor
 * (actors/actor_draft.c) decodes draft_request frames into jobs and answers with
 * draft_reply; tests call it directly. */
#ifndef SERVE_DRAFTER_H
#define SERVE_DRAFTER_H

#include "model_gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { SERVE_DRAFTER_NGRAM = 0, SERVE_DRAFTER_MODEL = 1 } serve_drafter_mode_t;

/* A counter update: add value to name (set: replace it).  The actor passes its
 * counters; NULL: no stats. */
typedef void (*serve_drafter_count_fn)(void *arg, const char *name, int64_t value, bool set);

typedef struct {
    serve_drafter_mode_t mode;    /* n-gram lookup or a draft model */
    const char *draft_model;      /* GGUF of the draft model (MODEL) */
    const char *target_model;     /* GGUF of the target, for the vocabulary check; NULL: none */
    int threads;                  /* forward-pass threads (1) */
    int ngram_min, ngram_max;     /* n-gram lengths tried, longest first (1, 4) */
    int kv_blocks, block_size;    /* the draft model's KV pool (256 blocks of 16) */
    int max_ctx;                  /* longest history drafted with the model (4096); longer
                                   * histories fall back to n-gram lookup */
    int step_tokens;              /* tokens per forward pass (256) */
    serve_drafter_count_fn count; /* counters (requests drafted, time, states), or NULL */
    void *count_arg;              /* count's first argument */
} serve_drafter_config_t;

/* One request to draft for. */
typedef struct {
    int worker;              /* target worker index (state key with rid) */
    uint64_t rid;            /* request id */
    const int32_t *tokens;   /* (n) history, borrowed */
    int n;                   /* history length */
    int k;                   /* proposals wanted, 1..MODEL_SPEC_MAX_K */
    int32_t *out;            /* (k) proposals */
    int n_out;               /* set: proposals written, 0..k */
    serve_drafter_mode_t by; /* set: the drafter that answered (NGRAM: also a model fallback) */
} serve_drafter_job_t;

typedef struct serve_drafter_t serve_drafter_t;

/* Zero fields of cfg take the defaults above.  For MODEL: loads the draft model and,
 * when target_model is set, checks the vocabularies (serve_drafter_check_vocab).  NULL
 * with a one-line reason in err. */
serve_drafter_t *serve_drafter_new(const serve_drafter_config_t *cfg, char *err, size_t errlen);
/* Frees the drafter and every state it holds, nulls *self_p; safe twice. */
void serve_drafter_destroy(serve_drafter_t **self_p);
/* The implementation: "ngram" or "model". */
const char *serve_drafter_name(const serve_drafter_t *self);

/* Propose for n_jobs requests (at most one job per (worker, rid)): fills each job's out
 * and n_out.  NGRAM: the longest n-gram of the history's tail that occurred before, and
 * what followed it (0 tokens when none did).  MODEL: greedy decoding with the draft
 * model, batched across the jobs; each (worker, rid) keeps the KV of the tokens it has
 * seen, rolled back to the longest common prefix with the new history, so only the
 * difference is prefilled; when the pool is full the least recently used states are
 * dropped; a job that still does not fit (or whose history is longer than max_ctx)
 * falls back to n-gram lookup.  0, or a negative errno (-EINVAL: bad arguments, a token
 * out of the vocabulary or a repeated (worker, rid); a forward-pass failure leaves the
 * jobs it did not finish with n_out 0). */
int serve_drafter_propose(serve_drafter_t *self, serve_drafter_job_t *jobs, int n_jobs);
/* The target accepted n_accepted of the last proposals for (worker, rid): MODEL rolls
 * the state's KV back to the history plus those drafts, so that the rejected positions
 * are computed again from the next history.  Optional (the next propose finds the common
 * prefix by itself); NGRAM, or an unknown (worker, rid): no-op. */
void serve_drafter_accept(serve_drafter_t *self, int worker, uint64_t rid, int n_accepted);
/* Forget (worker, rid): its KV blocks return to the pool.  Unknown: no-op. */
void serve_drafter_reset(serve_drafter_t *self, int worker, uint64_t rid);
/* States held (requests with KV in the pool; 0 for NGRAM). */
int serve_drafter_states(const serve_drafter_t *self);
/* Positions of (worker, rid) whose KV the drafter holds (0: none, or NGRAM). */
int serve_drafter_cached(const serve_drafter_t *self, int worker, uint64_t rid);

/* 0 when draft and target have the same vocabulary: the same number of token embeddings
 * and tokenizer.ggml.tokens, and every token string equal (both tokenizers must load).
 * Otherwise -EINVAL with one line in err naming both files and the first difference. */
int serve_drafter_check_vocab(const model_gguf_t *target, const model_gguf_t *draft, char *err,
                              size_t errlen);

#endif

/* serve_step.h - the target worker's step: what one batched forward pass computes and in
 * which order.  The scheduler (sched/sched_batch) picks the items (decode tokens first,
 * then prefill chunks; waiting requests are admitted when they fit); a request that runs
 * for the first time attaches its cached prompt prefix (kvstore/kv_cache); every item
 * reserves its KV; a decode item with drafts verifies them in the same pass; after the
 * forward pass computed blocks are published (and written through to the lower tiers),
 * the next token is sampled (or the drafts verified, the KV of rejected positions rolled
 * back), and a request ends on end-of-generation or max_tokens.  No sockets and no text:
 * what the worker sends (token events, the final event, errors, draft requests, trace
 * steps) goes through the callbacks of serve_step_sink_t, in the order it happens. */
#ifndef SERVE_STEP_H
#define SERVE_STEP_H

#include "grammar_mask.h"
#include "kv_cache.h"
#include "kv_compress.h"
#include "model.h"
#include "model_device.h"
#include "model_sampler.h"
#include "model_spec.h"
#include "model_tokenizer.h"
#include "sched_batch.h"
#include "serve_metrics.h"

#include <stdbool.h>
#include <stdint.h>

/* The words of the refusal of an input longer than the context (the HTTP actor answers
 * it as context_length_exceeded). */
#define SERVE_STEP_NO_ROOM "does not fit in the context"

/* Why a request ends (the values of msg_finish: none, eos, length). */
enum { SERVE_STEP_NONE = 0, SERVE_STEP_EOS = 1, SERVE_STEP_LENGTH = 2 };

/* What the step reads and writes of one request: plain data, embedded in the worker's
 * request (the user pointer it submits is the seq's address).  The caller owns hist. */
typedef struct {
    uint64_t rid;              /* request id (the scheduler's key) */
    int32_t *hist;             /* (n_prompt + max_tokens) prompt then generated tokens */
    int n_prompt;              /* positions prefilled: the prompt, then the n_carried
                                  completion tokens a resumed request arrived with */
    int n_carried;             /* completion tokens delivered before it came here, or
                                  before it was preempted here (then recomputed) */
    int n_hist;                /* tokens in hist */
    int max_tokens;            /* generation limit (carried tokens included) */
    int pin_tokens;            /* leading tokens that are the system prompt */
    int priority;              /* lower runs sooner (sched_batch); 0 by default */
    int preemptions;           /* times it was preempted here (its tokens then became
                                  prompt: counted in n_prompt and n_carried) */
    model_sampler_params_t sp; /* sampling */
    bool logprobs;             /* pass each token's log-softmax row to the sink */
    bool trace;                /* describe each step to the sink */
    /* structured output: the grammar state (a function of the completion tokens so far)
     * and its grammar's token index, both owned by the caller; NULL: unconstrained.  The
     * step masks the logits with it before sampling, advances it with each token, ends
     * the request (SERVE_STEP_EOS) when the grammar allows nothing more, and gives such a
     * request no drafts. */
    grammar_state_t *grammar;
    const grammar_index_t *gindex;
    kv_seq_t kv; /* its blocks: KV rows, which are its positions until kvc drops some */
    /* in-sequence KV compression (kvstore/kv_compress.h): the policy and its attention
     * weights (policy.kind KV_COMPRESS_NONE: off), owned by the caller (init it before
     * admission, kv_compress_seq_free after); kv_dropped: the positions whose rows it has
     * dropped, so position p >= n_computed lands in row p - kv_dropped.  Not for a
     * backend's pool (a GPU worker). */
    kv_compress_seq_t kvc;
    int kv_dropped;
    int n_cached;   /* prompt positions attached from the prefix cache */
    int n_computed; /* positions whose KV is computed (cached ones included) */
    bool fresh;     /* not run yet: its cached prefix is attached when it first runs */
    int skip;       /* positions of this step's item that came from the cache */
    /* speculative decoding */
    model_spec_adapt_t adapt;        /* depth from observed acceptance */
    int32_t draft[MODEL_SPEC_MAX_K]; /* proposals continuing hist[0..draft_base) */
    int n_draft;                     /* proposals held (the step verifies them) */
    int draft_base;                  /* history length they continue */
    int proposed, accepted;          /* totals */
    char spec_why[96];               /* how the depth of its last draft was chosen (trace) */
    /* embeddings: the request pools its prompt's final hidden states (model.h,
     * model_ctx_forward_hidden) instead of generating: no prefix cache (every position
     * is computed), no logits, nothing published; when its last prompt position ran, the
     * mean, L2-normalised, goes to sink.embedded.  NULL: a generation. */
    double *embed_sum; /* (d_model) sum over the positions computed so far; owned by the
                          caller, zeroed before admission */
    /* timings (base_now_us) */
    uint64_t t_prefill; /* first prefill chunk started */
    uint64_t t_first;   /* first token sampled */
    uint64_t t_last;    /* last token sampled */
} serve_step_seq_t;

/* Completion tokens of s so far (carried ones included): the next one's index. */
static inline int serve_step_done(const serve_step_seq_t *s) {
    return s->n_hist - s->n_prompt + s->n_carried;
}

/* Where the step's results go (the worker sends them; a test collects them).  arg is
 * the first argument of each.  token, finish, ended and error are required; the others
 * may be NULL. */
typedef struct {
    void *arg;
    /* Token `index` of s was sampled (already appended to s->hist); lsm: its row of
     * log-probabilities (n_vocab) when s->logprobs, else NULL.  Returns true when that
     * token ended the request (a stop string): the step then takes it out of the
     * scheduler and calls ended. */
    bool (*token)(void *arg, serve_step_seq_t *s, int index, int32_t token, const float *lsm);
    /* s ends (SERVE_STEP_EOS: index and token -1, the end-of-generation token is not
     * part of the text; SERVE_STEP_LENGTH: with its last token, appended to hist, and
     * lsm as for token).  s is out of the scheduler: the callee frees it. */
    void (*finish)(void *arg, serve_step_seq_t *s, int index, int32_t token, int why,
                   const float *lsm);
    /* s ended in token (a stop string) and is out of the scheduler: the callee frees it. */
    void (*ended)(void *arg, serve_step_seq_t *s);
    /* s failed (a negative errno and a reason) and is out of the scheduler: the callee
     * reports and frees it. */
    void (*error)(void *arg, serve_step_seq_t *s, int rc, const char *why);
    /* s produced its tokens of this step and goes on: the time to ask for drafts. */
    void (*decoded)(void *arg, serve_step_seq_t *s);
    /* A trace step of s ("admit", "prefill", "decode"): called only when s->trace. */
    void (*note)(void *arg, serve_step_seq_t *s, const char *what, const char *why);
    /* A counter: add value to name. */
    void (*count)(void *arg, const char *name, int64_t value);
    /* With write_through: a full block of a running request, for the lower tiers. */
    kv_cache_evict_fn written;
    /* An embedding request s (s->embed_sum set) is done: vec (dim = d_model) is the mean
     * of its final hidden states over its n_prompt positions, L2-normalised (valid during
     * the call).  s is out of the scheduler: the callee frees it.  Required when embedding
     * requests are admitted. */
    void (*embedded)(void *arg, serve_step_seq_t *s, const float *vec, int dim);
} serve_step_sink_t;

/* What the step runs on: all borrowed, they outlive the step. */
typedef struct {
    const model_t *model;         /* weights (n_vocab) */
    const model_tokenizer_t *tok; /* end-of-generation tokens (NULL: none end it) */
    model_ctx_t *ctx;             /* forward scratch: room for max_tokens() tokens */
    model_dev_t *dev;         /* or the forward pass on a backend (a GPU worker; ctx unused): made
                                 for max_tokens() tokens, max_batch sequences, kv's pool in its
                                 memory */
    kv_cache_t *kv;           /* T0 */
    sched_batch_t *sched;     /* what runs */
    model_sampler_t *sampler; /* sampling scratch */
    serve_metrics_step_t *metrics; /* per-step histograms, or NULL */
    bool spec;                     /* decode items may carry drafts (room for them) */
    bool write_through;            /* full blocks go to sink.written as they fill */
} serve_step_config_t;

typedef struct serve_step_t serve_step_t;

/* The step buffers for cfg (max_batch and step_tokens from the scheduler's config).
 * NULL when out of memory. */
serve_step_t *serve_step_new(const serve_step_config_t *cfg, const serve_step_sink_t *sink);
/* Frees the buffers (not what cfg lent), nulls *self_p; safe twice. */
void serve_step_destroy(serve_step_t **self_p);
/* Tokens one forward pass must take for cfg: step_tokens, plus max_batch *
 * MODEL_SPEC_MAX_K drafts with spec (what model_ctx_new needs). */
int serve_step_max_tokens(const sched_batch_config_t *sc, bool spec);

/* Hand s to the scheduler (it runs when it fits; its cached prefix is attached when it
 * first runs, so a waiting request holds no blocks).  0, or sched_batch_submit's error:
 * -EAGAIN (queue full: overloaded), -E2BIG (never fits), -EEXIST, -EINVAL; *why says
 * which in words. */
int serve_step_admit(serve_step_t *self, serve_step_seq_t *s, const char **why);
/* The KV positions s holds at most once its prompt has run (its compression policy's
 * budget and the rows between compactions), or 0 without a policy: what the scheduler
 * reserves for it beyond its prompt (sched_batch_submit_capped). */
int serve_step_kv_cap(const serve_step_t *self, const serve_step_seq_t *s);
/* Drafts for s continuing its first base tokens: kept for its next decode when base is
 * still its history length.  0; -ESTALE (the history moved on); -EINVAL (more than
 * MODEL_SPEC_MAX_K, or a token out of the vocabulary). */
int serve_step_draft(serve_step_t *self, serve_step_seq_t *s, int base, const int32_t *tokens,
                     int n);
/* Publish s's computed positions [0, upto) in the prefix index: the system prompt's
 * blocks with a high pin, the rest with none; last_partial: the partial block at the
 * end too (when s is done writing). */
void serve_step_publish(serve_step_t *self, serve_step_seq_t *s, int upto, bool last_partial);

/* One forward step over everything the scheduler picks, its results through the sink.
 * Requests the scheduler preempted to make room for a better priority (sched_batch.h) are
 * put back first: their computed positions published for the prefix cache (where a
 * KV tier manager keeps them: write-through sent their full blocks to T1 already, and an
 * eviction from T0 demotes a block there), their blocks released, their tokens so far
 * turned into prompt; when they run again their prefix is attached and the rest
 * recomputed, and their next token is sampled at the same position as it would have
 * been: the output does not change.
 * The number of items run (0: nothing to do), or a negative errno: -ENOSPC (a KV
 * reservation failed: the scheduler's accounting is off), or the forward pass's error
 * (every item of the step then fails through sink.error). */
int serve_step_run(serve_step_t *self);
/* Moving average of a forward pass's wall time (us; 0 before the first). */
double serve_step_us(const serve_step_t *self);

#endif

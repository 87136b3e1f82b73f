/* sched_batch.h - the continuous-batching scheduler of a target worker, as
 * pure policy (no sockets, no model): which requests run in the next forward
 * step, how many prompt tokens each prefills (chunked prefill under a per-step
 * token budget), and admission of waiting requests against the batch cap and
 * the KV-memory cap.
 *
 * Policy.  A request that arrives while nobody waits and there is room runs
 * from the next step (it never occupies the queue).  Every step: (1) admit waiting requests,
 * best first, while the batch has room and the KV pool can hold the request's whole
 * footprint (prompt + max_tokens positions, reserved up front so a running request never
 * runs out of KV); the best waiting request blocks the rest.  "Best": the lowest
 * priority value (as vLLM's: lower runs sooner; default 0), less one for every aging_ms it
 * has waited, then the earliest arrival -- so a low-priority request is never passed over
 * for ever (no starvation).  With preempt, when the best waiting request does not fit and
 * running requests of a worse (higher) priority would make room, the worst of them (the
 * latest admitted among equals) are preempted: they go back to the queue, keeping their
 * arrival time, with what they generated so far as part of their prompt (the caller
 * releases their KV, published for the prefix cache, and recomputes it -- mostly from the
 * cache -- when they run again; sched_batch_take_preempted).  Aging orders the queue only:
 * it never lets a request preempt one of a better priority.
 * (2) every running request that is decoding gets one token; (3) the rest of
 * the budget goes to prefill chunks in admission order.  A request's positions
 * only ever grow, so its tokens are computed exactly as a lone run would
 * compute them.  Not thread-safe: one worker thread owns it.
 *
 * Why sched/: it decides what a worker computes in each step, not where a
 * request goes (that is router/, pure routing policy), and it knows neither
 * models nor KV bytes (so not model/ or kvstore/).  Its only user is the
 * target worker (actors/actor_worker.c); its tests are test_sched_batch.
 */
#ifndef SCHED_BATCH_H
#define SCHED_BATCH_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int max_batch;   /* requests running at once (>= 1) */
    int max_queue;   /* requests waiting at most (>= 0); beyond: -EAGAIN ("overloaded") */
    int kv_blocks;   /* blocks in the worker's KV pool */
    int block_size;  /* positions per block */
    int step_tokens; /* tokens per forward step (decode + prefill); raised to max_batch */
    int max_ctx;     /* positions one request may use (prompt + max_tokens) */
    int aging_ms;    /* a waiting request's priority improves by 1 per aging_ms (0: never) */
    bool preempt;    /* a better-priority request may preempt worse running ones */
} sched_batch_config_t;

/* One request's share of a step: tokens [pos0, pos0 + n) of its sequence. */
typedef struct {
    uint64_t rid; /* request id */
    void *user;   /* what the caller gave sched_batch_submit */
    int pos0;     /* first position run this step */
    int n;        /* tokens run this step (>= 1) */
    bool sample;  /* the step ends on the last known token: sample the next one */
    bool prefill; /* the tokens are (part of) the prompt */
} sched_batch_item_t;

/* Counters of the scheduler's state (for load reports and stats). */
typedef struct {
    int n_waiting;         /* requests in the queue */
    int n_running;         /* requests admitted */
    int64_t queued_tokens; /* prompt + max_tokens of the waiting requests */
    int64_t active_tokens; /* tokens still to compute for the running requests */
    int kv_free_blocks;    /* blocks not reserved by a running request */
    int64_t preempted;     /* preemptions so far */
} sched_batch_load_t;

typedef struct sched_batch_t sched_batch_t;

/* NULL on bad configuration (max_batch < 1, kv_blocks < 1, ...) or no memory. */
sched_batch_t *sched_batch_new(const sched_batch_config_t *cfg);
void sched_batch_destroy(sched_batch_t **self_p);
const sched_batch_config_t *sched_batch_config(const sched_batch_t *self);
/* The positions one request can ever hold (prompt + max_tokens): max_ctx, or what the
 * whole KV pool holds when that is less.  A request longer than this is -E2BIG. */
int sched_batch_context(const sched_batch_t *self);

/* Admit (when nothing waits and it fits) or queue a request of n_prompt prompt
 * tokens that generates at most max_tokens.
 * 0; -EINVAL (n_prompt < 1 or max_tokens < 1); -EEXIST (rid already known);
 * -E2BIG (it can never fit: more positions than max_ctx or more blocks than the
 * pool); -EAGAIN (the queue is full: answer "overloaded"). */
int sched_batch_submit(sched_batch_t *self, uint64_t rid, int n_prompt, int max_tokens, void *user);
/* sched_batch_submit for a request whose KV is compressed once its prompt has run
 * (kvstore/kv_compress.h): it reserves the blocks of max(prompt, cap) positions (at most
 * prompt + max_tokens) instead of prompt + max_tokens.  cap 0: sched_batch_submit. */
int sched_batch_submit_capped(sched_batch_t *self, uint64_t rid, int n_prompt, int max_tokens,
                              int cap, void *user);
/* Set rid's priority (waiting or running; lower runs sooner, default 0).  0 or -ENOENT. */
int sched_batch_set_priority(sched_batch_t *self, uint64_t rid, int priority);
/* The rids preempted since the last call (at most cap into rids; the rest stay listed).
 * Each is waiting again, its generated tokens now part of its prompt: the caller must
 * release its KV before running the next plan's items.  Returns how many were written. */
int sched_batch_take_preempted(sched_batch_t *self, uint64_t *rids, int cap);
/* The clock aging reads (microseconds); NULL: base_now_us.  For tests. */
void sched_batch_set_clock(sched_batch_t *self, uint64_t (*now_us)(void *arg), void *arg);

/* Take a request out (finished or cancelled), waiting or running, releasing its
 * KV reservation.  Returns its user pointer, or NULL when rid is unknown. */
void *sched_batch_remove(sched_batch_t *self, uint64_t rid);
/* Take out any one request (for shutdown); its user pointer, NULL when empty. */
void *sched_batch_pop(sched_batch_t *self);
/* The user pointer of rid (waiting or running), or NULL. */
void *sched_batch_find(const sched_batch_t *self, uint64_t rid);
/* Running requests, and the user pointer of the i-th (admission order). */
int sched_batch_count(const sched_batch_t *self);
void *sched_batch_user_at(const sched_batch_t *self, int i);
/* True when rid is waiting or running. */
bool sched_batch_has(const sched_batch_t *self, uint64_t rid);

/* Plan the next step: admit what fits, then write at most cap items (cap >=
 * max_batch is enough) into items.  Returns the number of items (0: nothing to
 * run).  The caller runs them all in one forward pass, then calls
 * sched_batch_advance for each. */
int sched_batch_plan(sched_batch_t *self, sched_batch_item_t *items, int cap);
/* Record that n tokens of rid were computed; generated: a new token was sampled
 * (it becomes the next token to run).  0, or -ENOENT / -EINVAL. */
int sched_batch_advance(sched_batch_t *self, uint64_t rid, int n, bool generated);
/* Speculative decoding: a decode item was run with drafts appended and
 * n_generated tokens (1..) were accepted; n_computed positions (the last
 * known token plus the accepted drafts, = n_generated) keep their KV.
 * 0, or -ENOENT / -EINVAL (more than max_tokens, or positions not known). */
int sched_batch_advance_spec(sched_batch_t *self, uint64_t rid, int n_computed, int n_generated);
/* Tokens rid has generated so far (-ENOENT if unknown). */
int sched_batch_generated(const sched_batch_t *self, uint64_t rid);

sched_batch_load_t sched_batch_load(const sched_batch_t *self);

#endif

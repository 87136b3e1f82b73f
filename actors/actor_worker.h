/* actor_worker.h - the target worker: owns the model weights, its KV pool
 * (kvstore/kv_cache) and a continuous-batching scheduler (sched/sched_batch).
 * New requests join the running batch at every step; prefill chunks and decode
 * tokens of different requests share one model_ctx_forward call.  Sampling is
 * per request with model_sampler (seeded per position), so a request's tokens
 * do not depend on what else is in the batch.
 *
 * Options: actor_worker_opts in actor_worker.c (`strata actor --help`).
 *
 * Command / reply table (inbound PULL socket):
 *   work_request  (router)   -> queued; then a text_event per token straight to the
 *                               frontend (detokenized here, UTF-8 safe, stop strings
 *                               applied: a completed stop string ends the request
 *                               with finish "stop"); the final one is also sent to
 *                               the router as a work_event.  Queue full: work_error
 *                               "overloaded"; does not fit or bad ids: work_error
 *                               "bad_request" (relayed by the tokenizer).
 *   work_cancel   (router)   -> frees the request and its KV; text_event finish
 *                               "cancelled" to the frontend, work_event to the router
 *   ping / stats_query       -> pong / stats_answer to the frontend
 *   stop                     -> ends the actor
 * Every ~100 ms (and after steps): load_report to the router.
 */
#ifndef ACTOR_WORKER_H
#define ACTOR_WORKER_H

#include "actor_runtime.h"

/* The options of worker, loaded by the runtime through actor_worker_opts (one
 * field per option, named after its key): actor_env_cfg(env) in the actor. */
typedef struct {
    const char *model;     /* GGUF path */
    const char *device;    /* cpu | cpu-seam | cuda | cuda:N (serve_device.h) */
    int threads;           /* threads of the forward pass */
    int max_batch;         /* requests running at once */
    int kv_blocks;         /* KV blocks (of block_size positions) in the worker's pool */
    int block_size;        /* positions per KV block */
    int queue;             /* requests waiting for admission before overloaded */
    int step_tokens;       /* tokens per forward step: decode tokens first */
    int max_ctx;           /* positions per request (prompt + max_tokens) */
    int kv_type;           /* f32|f16|int8 = kv_fmt_t: T0 KV format */
    int kv_policy;         /* lru|lfu|scored = kv_policy_kind_t: T0 eviction order */
    bool prefix_cache;     /* share cached prompt prefixes (0: every prompt computed) */
    bool write_through;    /* with a KV tier manager */
    int prefetch_wait_ms;  /* how long a request waits for its promotions from T1/T2 before it */
    bool spec;             /* with a draft actor: 0 turns speculation off for this worker */
    int spec_k;            /* fixed draft depth; 0: adaptive (from acceptance and load) */
    int spec_k_max;        /* adaptive: the largest depth */
    int spec_wait_us;      /* longest wait for a draft before a step runs without it */
    int expert_dtype;      /* f32|f16 (its index): with expert actors and an MoE model */
    int expert_timeout_ms; /* with expert actors */
    bool preempt;          /* better-priority requests preempt worse running ones */
    int priority_aging_ms; /* a waiting request's priority improves by 1 per this many ms */
    const char *kv_events; /* PUB endpoint of KV events ("": off; worker i: port + i) */
    const char *kv_events_replay; /* ROUTER endpoint answering replays ("": none) */
    int kv_events_keep;           /* batches kept for replay */
    const char *kv_compress;      /* in-sequence KV compression of requests naming none */
} actor_worker_cfg_t;

int actor_worker_main(actor_env_t *env);
/* Its options, declared once (name, type, default, range, help). */
extern const actor_opt_t actor_worker_opts[];

#endif

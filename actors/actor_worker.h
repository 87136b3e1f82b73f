/* actor_worker.h - the target worker: owns the model weights, its KV pool
 * (kvstore/kv_blocks) and a continuous-batching scheduler (sched/sched_batch).
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

int actor_worker_main(actor_env_t *env);
/* Its options, declared once (name, type, default, range, help). */
extern const actor_opt_t actor_worker_opts[];

#endif

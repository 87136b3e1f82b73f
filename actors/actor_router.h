/* actor_router.h - the router: sends each tokenized request to the least
 * loaded live target worker (router/router_dispatch), forwards cancels to the
 * worker that holds the request, and fails the requests of a dead worker.
 *
 * Command / reply table (inbound PULL socket):
 *   work_request (tokenizer) -> to the chosen worker; no live worker or its
 *                               queue full: work_error "internal"/"overloaded"
 *                               to the tokenizer (which forwards it)
 *   work_cancel  (tokenizer) -> to the request's worker (unknown rid: counted)
 *   work_event   (worker, finish != 0), work_error (worker) -> forgets the rid
 *   load_report  (worker)    -> updates the worker's load (and marks it alive)
 *   worker_down  (supervisor)-> marks it dead and forgets its requests (the
 *                               frontend resumes them elsewhere); ends its drain
 *   worker_drain (supervisor)-> a planned restart: no new request to that worker
 *                               while another is alive; worker_idle to the
 *                               supervisor once it holds none (finish events
 *                               and an empty load report)
 *   (SUB) the workers' KV events, with kv_events_from (actor_router_kv.h): the
 *                               dispatch then weighs each worker's cached prefix
 *   ping / stats_query       -> pong / stats_answer to the frontend
 *   stop                     -> ends the actor
 */
#ifndef ACTOR_ROUTER_H
#define ACTOR_ROUTER_H

#include "actor_runtime.h"

/* The options of router, loaded by the runtime through actor_router_opts (one
 * field per option, named after its key): actor_env_cfg(env) in the actor. */
typedef struct {
    int moe_dispatch;                  /* load|static (its index): MoE expert dispatch: load */
    double moe_capacity;               /* load dispatch: capacity factor */
    double moe_capacity_max;           /* load dispatch */
    int moe_capacity_min;              /* load dispatch: rows a replica always takes in a step */
    double moe_hot;                    /* load dispatch */
    const char *kv_events_from;        /* the workers' KV events: pattern or list; NULL: off */
    const char *kv_events_replay_from; /* their replay sockets, the same way */
    double prefix_weight;              /* cached prompt tokens count this much off a load */
} actor_router_cfg_t;

int actor_router_main(actor_env_t *env);
/* Its options, declared once (name, type, default, range, help). */
extern const actor_opt_t actor_router_opts[];

#endif

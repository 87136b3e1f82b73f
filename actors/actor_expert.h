/* actor_expert.h - the expert actor (MoE): computes the FFN of the experts it
 * hosts for the rows target workers send it, one expert_request per MoE layer
 * per step (docs/MOE.md, "Expert actors and dispatch").  Every expert actor
 * maps the whole GGUF (the page cache shares it), so hosting an expert is a
 * permission: its static set (option experts=, or round-robin placement) plus
 * the replicas the router's dispatch table gives it.
 *
 * Options: actor_expert_opts in actor_expert.c (`strata actor --help`).
 *
 * Command / reply table (inbound PULL socket):
 *   expert_request (worker N) -> expert_reply to worker N with the y rows (raw
 *                                frame, the request's dtype): status ok; a bad
 *                                layer, expert, d_model or payload size: status
 *                                bad_request (counted bad_request); an expert it
 *                                may not serve (not in its set, not granted by a
 *                                table at least as new as the request's): status
 *                                not_hosted.  An unknown worker is counted and
 *                                dropped.
 *   expert_table   (router)   -> the replicas granted to it (the newest version wins)
 *   ping / stats_query        -> pong / stats_answer to the frontend
 *   stop                      -> ends the actor
 * Every ~150 ms: expert_load to the router (rows served per expert, frames, the
 * backlog, busy time).
 * Counters: requests, rows, rows.expert<E>, busy_us, bad_request, not_hosted,
 * failed, bad_worker, replies.dropped, table.version, hosted (experts it may
 * serve now), malformed, unexpected.
 */
#ifndef ACTOR_EXPERT_H
#define ACTOR_EXPERT_H

#include "actor_runtime.h"

#include <stdint.h>

/* The options of expert, loaded by the runtime through actor_expert_opts (one
 * field per option, named after its key): actor_env_cfg(env) in the actor. */
typedef struct {
    const char *model;   /* GGUF path (an MoE model) */
    int threads;         /* threads of the expert computation */
    const char *experts; /* the experts it hosts in every MoE layer, e.g. 0-3 or 0,5; unset */
    int expert_slots;    /* how many experts it may host with the replicas the router gives it */
} actor_expert_cfg_t;

int actor_expert_main(actor_env_t *env);
/* Its options, declared once (name, type, default, range, help). */
extern const actor_opt_t actor_expert_opts[];

#endif

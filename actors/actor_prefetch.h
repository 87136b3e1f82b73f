/* actor_prefetch.h - the prefetcher: turns request arrivals into promotions
 * before the worker's prefill needs the blocks, and keeps recently active
 * chat sessions warm between turns.
 *
 * Command / reply table (inbound PULL socket):
 *   kv_hint (router)  -> kv_promote {rid, worker, tokens} to the tier manager,
 *                        which sends the prompt's prefix found in T1/T2 to the
 *                        worker; a hint with a session id also records the
 *                        session's latest prompt and its time
 *   (every warm_ms)   -> kv_promote {warm} for each of the warm_sessions most
 *                        recently active sessions (active within warm_s
 *                        seconds): their T2 blocks are lifted into T1, so the
 *                        next turn is a DRAM hit, not a disk read
 *   ping / stats_query -> pong / stats_answer to the frontend
 *   stop              -> ends the actor
 *
 * Options: actor_prefetch_opts in actor_prefetch.c (`strata actor --help`).
 */
#ifndef ACTOR_PREFETCH_H
#define ACTOR_PREFETCH_H

#include "actor_runtime.h"

/* The options of prefetch, loaded by the runtime through actor_prefetch_opts (one
 * field per option, named after its key): actor_env_cfg(env) in the actor. */
typedef struct {
    int sessions;      /* chat sessions tracked (LRU) */
    int warm_sessions; /* most recent sessions kept warm (T2 -> T1); 0: none */
    int warm_ms;       /* how often sessions are warmed */
    int warm_s;        /* how long after its last turn a session is kept warm */
} actor_prefetch_cfg_t;

int actor_prefetch_main(actor_env_t *env);
/* Its options, declared once (name, type, default, range, help). */
extern const actor_opt_t actor_prefetch_opts[];

#endif

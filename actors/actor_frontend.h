/* actor_frontend.h - the frontend: owns the client ROUTER socket and the
 * request table.  Validates every client frame (msgs/ decoders), answers a
 * malformed one with an error (counted by reason, "frontend.malformed.<kind>"),
 * streams token events, and ends every accepted request with exactly one done
 * or error.  Heartbeats the other actors (ping every 250 ms) and collects their
 * counters (stats_query), so it can answer health and stats at once.  A client
 * that goes away (socket monitor DISCONNECTED on the connection its request
 * came from, or an EHOSTUNREACH reply) gets its requests cancelled, which
 * frees their KV.
 *
 * Options: actor_frontend_opts in actor_frontend.c (`strata actor --help`).
 *
 * Client socket (ROUTER; frames [identity][payload] or [identity][""][payload],
 * the reply uses the same envelope):
 *   generate  -> token* (stream) then done, or error
 *   cancel    -> the request's done "cancelled"; unknown id: error "not_found"
 *   stats     -> stats_reply (flat counters of every actor, "<actor>.<name>"),
 *                fresh: sent when every actor answered a new stats_query (<= 200 ms)
 *   health    -> health_reply (actor is "unhealthy" after 1 s without an answer)
 *   malformed / not a request -> error "bad_request" (id when it can be read)
 * Internal inbound socket (PULL):
 *   text_event (tokenizer) -> token / done to the client
 *   work_error (any)       -> error to the client
 *   pong, stats_answer     -> liveness and counters of that actor
 *   worker_down (supervisor) -> that worker is "restarting" until it answers again
 *   stop                   -> ends the actor
 */
#ifndef ACTOR_FRONTEND_H
#define ACTOR_FRONTEND_H

#include "actor_runtime.h"

#define ACTOR_FRONTEND_DEFAULT_ENDPOINT ACTOR_TOPO_CLIENT_ENDPOINT

/* The options of frontend, loaded by the runtime through actor_frontend_opts (one
 * field per option, named after its key): actor_env_cfg(env) in the actor. */
typedef struct {
    const char *client;        /* client endpoint (ROUTER) */
    int max_requests;          /* requests in flight before overloaded */
    const char *client_secret; /* CURVE key pair of the client endpoint */
    const char *client_allow;  /* directory of client public keys admitted by CURVE */
    int accept_ms;             /* a request no worker has accepted after this is submitted again */
    int probe_ms;              /* a running request silent this long is checked with its worker */
    int resume_timeout_ms;     /* a request that gets no new token for this long */
    const char *audit_dir;     /* append a hash-chained record of every finished request to */
    int audit_fsync;           /* interval|always = AUDIT_FSYNC_*: audit log durability */
    bool audit_text;           /* keep prompt and completion text in audit records */
    int hang_timeout_ms;       /* a worker that answers no heartbeat for this long is hung */
    int progress_ms;           /* a worker holding requests without a token this long stalls */
    int cache_wait_ms;         /* how long a request waits for the semcache's answer */
} actor_frontend_cfg_t;

int actor_frontend_main(actor_env_t *env);
/* Its options, declared once (name, type, default, range, help). */
extern const actor_opt_t actor_frontend_opts[];

#endif

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

#include "serve_endpoints.h"

/* Its client endpoint unless told otherwise (one constant: serve/serve_endpoints.h). */
#define ACTOR_FRONTEND_DEFAULT_ENDPOINT SERVE_CLIENT_ENDPOINT

int actor_frontend_main(actor_env_t *env);
/* Its options, declared once (name, type, default, range, help). */
extern const actor_opt_t actor_frontend_opts[];

#endif

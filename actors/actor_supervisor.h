/* actor_supervisor.h - process mode: runs every actor of a topology (or of
 * one of its hosts) as its own process (fork + exec of `strata actor NAME
 * --topology FILE`), waits until each one reports ready, SIGKILLs one whose
 * heartbeats stop for hang_timeout_ms after it was ready, restarts a process
 * that dies (exponential backoff, 0.2 s doubling to 10 s, reset after 30 s of
 * good health), and tells the router and the frontend when a target worker
 * dies (worker_down).  Children die with it (PR_SET_PDEATHSIG SIGKILL).  Used
 * by `strata serve --topology FILE [--host NAME]`.
 *
 * Its control endpoint (actor_supervisor_ctl, `strata ctl`; docs/OPERATIONS.md):
 *   ctl status            -> one ctl_reply: every actor's state, pid, restarts
 *   ctl restart NAME|all  -> a ctl_reply per phase (drain, stop, start) of each actor,
 *                            keep-alives each second, then the final one; a worker is
 *                            drained first (worker_drain to the router, wait for its
 *                            worker_idle or the grace), every actor is stopped (SIGTERM,
 *                            SIGKILL after 5 s) and started again at once, the next one
 *                            only when it is ready; one restart at a time (else "busy")
 *   ctl drain             -> final ctl_reply at once; actor_supervisor_stop_asked says so
 *   anything malformed    -> a final ctl_reply with ok false and the reason
 */
#ifndef ACTOR_SUPERVISOR_H
#define ACTOR_SUPERVISOR_H

#include "actor_topology.h"

#include <stdint.h>

typedef struct actor_supervisor_t actor_supervisor_t;

/* topo (borrowed) must have a "supervisor ENDPOINT" line (where the actors
 * report ready and send heartbeats); path is the file the children re-read;
 * exe the strata binary; host: run only the actors with host=HOST (NULL:
 * every actor).  NULL on failure with a reason in err. */
actor_supervisor_t *actor_supervisor_new(const actor_topology_t *topo, const char *path,
                                         const char *exe, const char *host, char *err,
                                         size_t errlen);
/* SIGTERM to every child, SIGKILL after 5 s; reaps them; nulls *self_p. */
void actor_supervisor_destroy(actor_supervisor_t **self_p);
/* Spawn every actor (workers first, frontend last) and wait until all are
 * ready.  0, or -ETIMEDOUT / -ECHILD (one exited before it was ready) with err. */
int actor_supervisor_start(actor_supervisor_t *self, int timeout_ms, char *err, size_t errlen);
/* One round of supervision, waiting up to timeout_ms for events: read ready
 * reports and heartbeats, kill hung children, reap dead ones, notify the
 * router and the frontend, restart what is due.  Returns 0. */
int actor_supervisor_poll(actor_supervisor_t *self, int timeout_ms);
/* Drain (docs/OPERATIONS.md): a drain message to this host's frontend, then the actors
 * kept running (and restarted, all but the frontend) until the frontend ends -- when
 * nothing is in flight, or at the end of grace_ms -- or 5 s past the grace.  0, -ETIMEDOUT,
 * or -EIO (the message could not be sent); 0 at once on a host without the frontend. */
int actor_supervisor_drain(actor_supervisor_t *self, int grace_ms);
/* Restarts so far (all actors). */
int actor_supervisor_restarts(const actor_supervisor_t *self);
/* Open the control endpoint (a ROUTER socket; MessagePack ctl / ctl_reply, no checksum
 * trailer: docs/PROTOCOL.md) at endpoint: ipc:// gets a socket file of mode 0600 (the
 * owner alone may connect); tcp:// is refused when the topology has CURVE keys (it would
 * be an unauthenticated way in).  drain_ms: the grace of a planned worker drain when the
 * command gives none (serve's --drain-timeout).  0, or -EINVAL / -EADDRINUSE with err. */
int actor_supervisor_ctl(actor_supervisor_t *self, const char *endpoint, int64_t drain_ms,
                         char *err, size_t errlen);
/* The checks of actor_supervisor_ctl that need no socket (before the actors start):
 * 0, or -EINVAL with the reason in err. */
int actor_supervisor_ctl_check(const actor_topology_t *topo, const char *endpoint, char *err,
                               size_t errlen);
/* The grace `strata ctl drain` asked for (ms), or -1 when it did not ask. */
int64_t actor_supervisor_stop_asked(const actor_supervisor_t *self);
/* Actors killed for a missed heartbeat so far. */
int actor_supervisor_hangs(const actor_supervisor_t *self);
/* Actors this supervisor runs. */
int actor_supervisor_count(const actor_supervisor_t *self);

#endif

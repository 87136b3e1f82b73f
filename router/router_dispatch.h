/* router_dispatch.h - which target worker gets a request: the least loaded of
 * the live workers, where load = queued + active tokens from the worker's last
 * load report plus the tokens dispatched to it since that report (less, with KV
 * events, the prompt tokens the worker already has cached).  Also keeps
 * the request -> worker table so a cancel reaches the right worker and a dead
 * worker's requests can be failed (or re-dispatched).  Pure policy, no sockets;
 * not thread-safe (the router actor owns it).
 */
#ifndef ROUTER_DISPATCH_H
#define ROUTER_DISPATCH_H

#include <stdbool.h>
#include <stdint.h>

typedef struct router_dispatch_t router_dispatch_t;

/* n_workers >= 1 workers, all alive with load 0.  NULL on bad n or no memory. */
router_dispatch_t *router_dispatch_new(int n_workers);
void router_dispatch_destroy(router_dispatch_t **self_p);
int router_dispatch_workers(const router_dispatch_t *self);

/* Pick a worker for a request of `tokens` tokens (prompt + max_tokens), record
 * rid -> worker and add the tokens to that worker's pending load: the least loaded
 * alive worker that is not draining, else (every alive one drains) the least loaded
 * alive one.  Returns the worker, -EHOSTDOWN when no worker is alive, -EEXIST for a
 * known rid, -ENOMEM. */
int router_dispatch_assign(router_dispatch_t *self, uint64_t rid, int64_t tokens);
/* The same, weighing what each worker already holds: bonus[w] tokens (the request's
 * prompt positions cached there, weighted; serve/serve_prefix.h) are taken off w's load when
 * choosing, and off the tokens added to the chosen worker's pending load.  bonus NULL:
 * router_dispatch_assign. */
int router_dispatch_assign_bonus(router_dispatch_t *self, uint64_t rid, int64_t tokens,
                                 const int64_t *bonus);
/* The worker of rid, or -ENOENT. */
int router_dispatch_worker_of(const router_dispatch_t *self, uint64_t rid);
/* Forget rid (finished, failed or cancelled).  Returns its worker or -ENOENT. */
int router_dispatch_finish(router_dispatch_t *self, uint64_t rid);

/* A load report from worker w: its load becomes queued + active tokens and the
 * pending tokens are cleared; a report from a dead worker marks it alive again.
 * -EINVAL for a bad w. */
int router_dispatch_report(router_dispatch_t *self, int w, int64_t queued_tokens,
                           int64_t active_tokens);
/* Worker w died: mark it dead and move the ids of its requests into rids
 * (capacity cap; the table forgets them all).  Returns how many it had (may
 * exceed cap: the extra ids are forgotten too), or -EINVAL. */
int router_dispatch_down(router_dispatch_t *self, int w, uint64_t *rids, int cap);
bool router_dispatch_alive(const router_dispatch_t *self, int w);
/* A planned restart of w (docs/OPERATIONS.md): draining, it gets new requests only when
 * no other alive worker is left; router_dispatch_down ends the drain.  -EINVAL for a
 * bad w. */
int router_dispatch_set_draining(router_dispatch_t *self, int w, bool draining);
bool router_dispatch_draining(const router_dispatch_t *self, int w);
/* Whether draining worker w holds nothing: no request assigned here, and its last load
 * report (a worker knows what it holds, also what a router before this one sent it)
 * was empty with nothing dispatched since.  false for a bad w or one not draining. */
bool router_dispatch_drained(const router_dispatch_t *self, int w);
/* Current load estimate of w (report + pending), or -EINVAL. */
int64_t router_dispatch_load(const router_dispatch_t *self, int w);
/* Requests currently assigned to w. */
int router_dispatch_count(const router_dispatch_t *self, int w);

#endif

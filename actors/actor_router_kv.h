/* actor_router_kv.h - the router's view of the workers' KV caches: a SUB socket on each
 * worker's KV events (options kv_events_from / kv_events_replay_from; docs/KV_EVENTS.md),
 * a replay request when a sequence number is missed, and serve_prefix's sets, which
 * turn a prompt into a bonus per worker (cached prompt tokens x prefix_weight) that
 * router_dispatch_assign_bonus takes off its load.  Owned by the router actor's thread. */
#ifndef ACTOR_ROUTER_KV_H
#define ACTOR_ROUTER_KV_H

#include "actor_runtime.h"

#include <stdint.h>

typedef struct actor_router_kv_t actor_router_kv_t;

/* With `from` set (option kv_events_from): one SUB (and, with replay_from, one DEALER)
 * per worker, connected; weight: option prefix_weight.  NULL with err "" when from is
 * NULL or "" (routing by load only); NULL with the reason in err on a bad endpoint or no
 * memory. */
actor_router_kv_t *actor_router_kv_new(const char *from, const char *replay_from, double weight,
                                       int n_workers, actor_counters_t *counters, char *err,
                                       size_t errlen);
void actor_router_kv_destroy(actor_router_kv_t **self_p);
/* The sockets to poll (n into *n): pass each readable one to actor_router_kv_read. */
zsock_t **actor_router_kv_sockets(actor_router_kv_t *self, int *n);
/* Read what waits on sock (a batch, or a replay's answer) and apply it. */
void actor_router_kv_read(actor_router_kv_t *self, zsock_t *sock);
/* cached[0..n_workers): the prompt tokens of tokens[0..n) each worker has cached;
 * bonus[0..n_workers): the same x prefix_weight.  Returns the most any worker has. */
int64_t actor_router_kv_bonus(actor_router_kv_t *self, const int32_t *tokens, int n,
                              int64_t *cached, int64_t *bonus);
/* Worker w went down: what it had is gone. */
void actor_router_kv_forget(actor_router_kv_t *self, int w);

#endif

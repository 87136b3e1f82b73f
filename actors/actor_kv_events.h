/* actor_kv_events.h - the sockets of a KV event queue (kvstore/kv_events.h;
 * docs/KV_EVENTS.md), for the actors that publish one: a target worker (its T0) and the KV
 * tier manager (T1, T2).  A PUB socket sends each flushed batch as
 * topic ("") | sequence number (8 bytes, big-endian) | EventBatch; a ROUTER socket, when
 * asked for, answers [identity, "", start (8 bytes)] with [identity, "", seq, payload] for
 * every batch still kept from start on, then [identity, "", -1 (8 bytes), ""] (a malformed
 * request is ignored and counted).  Runtime-level code: no actor's header. */
#ifndef ACTOR_KV_EVENTS_H
#define ACTOR_KV_EVENTS_H

#include "actor_runtime.h"
#include "kv_events.h"

typedef struct actor_kv_events_t actor_kv_events_t;

typedef struct {
    const char *endpoint; /* the PUB endpoint as configured (NULL or "": off) */
    const char *replay;   /* the ROUTER endpoint as configured (NULL or "": none) */
    int index;            /* the publisher's number: it binds the port + index (ipc: .index) */
    int block_size;       /* tokens per block */
    int keep;             /* batches kept for replay */
    const char *name;     /* the actor, for its log line */
} actor_kv_events_config_t;

/* The queue and its sockets, bound; the replay socket read by loop; the counters
 * (kv_events.*) in counters; AllBlocksCleared queued (what a subscriber knew of this
 * publisher's earlier life is gone).  NULL with err "" when c->endpoint is unset; NULL with
 * the reason in err on a bad endpoint, one that cannot be bound, no memory. */
actor_kv_events_t *actor_kv_events_new(const actor_kv_events_config_t *c, actor_loop_t *loop,
                                       actor_counters_t *counters, char *err, size_t errlen);
/* Close the sockets, free the queue, null *self_p; safe on NULL and twice. */
void actor_kv_events_destroy(actor_kv_events_t **self_p);
/* The queue to feed (kv_events_stored / _removed). */
kv_events_t *actor_kv_events_queue(actor_kv_events_t *self);
/* Send what was queued since the last call as one batch (nothing when none was). */
void actor_kv_events_flush(actor_kv_events_t *self);

#endif

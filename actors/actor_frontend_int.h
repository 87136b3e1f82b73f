/* actor_frontend_int.h - what the three files of the frontend actor share (not an actor's
 * header: only they include it).  actor_frontend.c is the request table's side (attempts,
 * the workers' events, the loop); actor_frontend_clients.c the clients' (their frames, the
 * replies, closed connections); actor_frontend_peers.c the other actors' (heartbeats, hung
 * and restarted actors, the stats and health answers).  All run on the actor's one
 * thread. */
#ifndef ACTOR_FRONTEND_INT_H
#define ACTOR_FRONTEND_INT_H

#include "actor_runtime.h"
#include "audit_log.h"
#include "serve_metrics.h"
#include "serve_requests.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ACTOR_FRONTEND_TAG "frontend"
#define ACTOR_FRONTEND_PING_US 250000       /* heartbeat period */
#define ACTOR_FRONTEND_UNHEALTHY_US 1000000 /* a peer silent this long is not ready */
#define ACTOR_FRONTEND_MAX_PENDING_STATS 64 /* stats requests answered at once */
#define ACTOR_FRONTEND_STATS_WAIT_US 200000 /* how long a stats answer waits for the peers */
#define ACTOR_FRONTEND_MAX_FD 65536         /* client connections' fds tracked */

/* One accepted request: what it keeps, and the rules of its attempts and events, are
 * serve/serve_requests.h. */

/* Another actor as the frontend sees it. */
typedef struct {
    char name[ACTOR_TOPO_NAME]; /* tokenizer, router, worker0, ... */
    zsock_t *push;              /* where its pings go */
    uint64_t last_seen_us;      /* last pong or stats_answer; 0 = never */
    bool restarting;            /* the supervisor reported it dead; no answer since */
    bool hung;                  /* silent for hang_timeout_ms: its requests moved away */
    int worker;                 /* worker index, or -1 for other actors */
    uint64_t last_token_us;     /* a worker: when it last produced a token (0: never) */
    uint64_t last_stats_us;     /* when its last stats_answer arrived */
    msg_counter_t *counters;    /* its last stats_answer */
    int n_counters;
} actor_frontend_peer_t;

/* A stats request waiting for fresh counters from every peer. */
typedef struct {
    uint8_t ident[SERVE_MAX_IDENT]; /* client */
    size_t ident_len;
    uint64_t t_us; /* when it arrived; 0 = free slot */
} actor_frontend_pending_t;

typedef struct {
    actor_env_t *env; /* runtime */
    actor_frontend_pending_t
        pending[ACTOR_FRONTEND_MAX_PENDING_STATS]; /* stats requests being answered */
    zsock_t *clients;                              /* ROUTER for clients */
    zsock_t *monitor;                              /* PAIR: socket events of clients */
    zsock_t *in;                                   /* inbound PULL (internal) */
    zsock_t *to_tok;                               /* PUSH to the tokenizer */
    zsock_t *to_cache;            /* PUSH to the semcache actor (a peer's), or NULL: none */
    uint64_t cache_wait_us;       /* a request waits this long for the semcache's answer */
    actor_frontend_peer_t *peers; /* (n_peers) */
    int n_peers;
    serve_requests_t *reqs; /* the request table */
    uint64_t accept_us;     /* an attempt not accepted by a worker by then is resubmitted */
    uint64_t probe_us;      /* a silent attempt is probed after this */
    uint64_t give_up_us;    /* a request without a new token for this long fails */
    uint64_t hang_us;       /* a peer silent this long is hung */
    uint64_t progress_us;   /* a worker holding requests without a token this long stalls */
    bool started;           /* every peer has answered once (latched) */
    bool draining;          /* a drain is under way: no new requests */
    uint64_t drain_end_us;  /* then what is still in flight ends with error draining */
    audit_log_t *audit;     /* the audit log, or NULL (no audit_dir) */
    bool curve_clients;     /* the client endpoint uses CURVE: a client's key is its name */
    char model_sha256[AUDIT_HASH_HEX];  /* the served model file's, for the audit records */
    uint64_t ping_seq;                  /* heartbeat sequence */
    actor_loop_t *loop;                 /* polling, control messages, timers, counters */
    actor_counters_t *counters;         /* the loop's */
    serve_metrics_req_t *metrics;       /* per-request histograms (docs/METRICS.md) */
    char endpoint[ACTOR_TOPO_ENDPOINT]; /* client endpoint */
    uint32_t *fd_gen; /* (ACTOR_FRONTEND_MAX_FD) connections accepted on each fd so far: a closed
                         connection's fd is reused by the next one, and its
                         DISCONNECTED event must not cancel the newer requests */
} actor_frontend_t;

/* ---- the request table's side (actor_frontend.c) */

/* Take r out of the table (its final event was sent, or it can never be). */
void actor_frontend_remove(actor_frontend_t *f, serve_request_t *r);

/* The socket towards worker w (its pings go there too), or NULL. */
zsock_t *actor_frontend_worker_push(actor_frontend_t *f, int w);

/* The client wants r over (or is gone).  r stays in the table until its final
 * event: a lost cancel is sent again when a probe finds the attempt still held. */
void actor_frontend_cancel(actor_frontend_t *f, serve_request_t *r, const char *why);

/* The final event of a slow reader's request: an error, sent when there is room
 * (retried from actor_frontend_watch for SERVE_FINAL_WAIT_US).  True when r may be removed. */
bool actor_frontend_final_slow(actor_frontend_t *f, serve_request_t *r);

/* Send r's current attempt to the tokenizer: the client's generate and the
 * completion tokens delivered so far.  A full queue is retried after a backoff. */
void actor_frontend_submit(actor_frontend_t *f, serve_request_t *r);

/* r's current attempt is lost (why: a counter name): stop it and go on under a new
 * rid from the tokens delivered.  delay_us: wait that long first (0: at once). */
void actor_frontend_resubmit(actor_frontend_t *f, serve_request_t *r, const char *why,
                             uint64_t delay_us);

/* Send r's final event (done or error) and remove r.  A slow reader gets an error
 * instead, and r stays until it could be queued. */
void actor_frontend_end(actor_frontend_t *f, serve_request_t *r, int type, const void *m);

/* A traced request's final event came (te: the final attempt's, or NULL): send its
 * `trace` (the frontend's steps, the final attempt's chain, the delivery). */
void actor_frontend_trace(actor_frontend_t *f, serve_request_t *r, const msg_text_event_t *te);

/* ---- the answer cache's side (actor_frontend_cache.c, docs/SEMCACHE.md) */

/* Ask the semcache about r before it is submitted: true when asked (r then waits for
 * cache_answer, at most cache_wait_us, and is submitted when none comes); false when r
 * is not cached (no semcache, cache off, not cacheable): submit it. */
bool actor_frontend_cache_lookup(actor_frontend_t *f, serve_request_t *r);
/* r's lookup got no answer in time: it is generated (and nothing kept); a trace step. */
void actor_frontend_cache_timeout(actor_frontend_t *f, serve_request_t *r);
/* The semcache's answer: a hit ends r with the cached answer; a miss submits it. */
void actor_frontend_on_cache_answer(void *self, const msg_cache_answer_t *m);
/* r finished (te: its final event): keep its answer when the semcache asked for it. */
void actor_frontend_cache_store(actor_frontend_t *f, serve_request_t *r,
                                const msg_text_event_t *te);
/* A client's cache_put (a knowledge-base record) or cache_invalidate, passed on. */
void actor_frontend_on_cache_op(actor_frontend_t *f, const uint8_t *ident, size_t ident_len,
                                const msg_any_t *m);
/* The semcache's answer to a client's operation. */
void actor_frontend_on_cache_done(void *self, const msg_cache_done_t *m);

/* ---- the clients' side (actor_frontend_clients.c) */

/* Send one encoded message to a client (after an empty delimiter frame when delim:
 * only the refusal of a REQ-framed message uses it).  0, -EHOSTUNREACH (client gone),
 * -EAGAIN (its queue is full), or an encoder error. */
int actor_frontend_reply(actor_frontend_t *f, const uint8_t *ident, size_t ident_len, bool delim,
                         int type, const void *m);

/* Send an error event.  Whatever id and message it is given, the event is one the
 * encoder accepts: an id that is not UTF-8 becomes nil, a message is cut before its
 * first byte that is not (a message cut at the size limit can end inside a character). */
void actor_frontend_reply_error(actor_frontend_t *f, const uint8_t *ident, size_t ident_len,
                                bool delim, const char *id, int code, const char *message);

/* The client behind ident is gone: stop sending to it, cancel its requests. */
void actor_frontend_client_gone(actor_frontend_t *f, const uint8_t *ident, size_t ident_len);

/* Read one client message (identity, optional delimiter, payload) and act on it. */
void actor_frontend_on_client(void *self, zsock_t *sock);

/* A socket event of the client endpoint: a closed connection cancels its requests. */
void actor_frontend_on_monitor(void *self, zsock_t *sock);

/* ---- the other actors' side (actor_frontend_peers.c) */

/* Ask every peer for fresh counters; the reply goes out when all answered (or
 * after ACTOR_FRONTEND_STATS_WAIT_US with what is known). */
void actor_frontend_on_stats(actor_frontend_t *f, const uint8_t *ident, size_t ident_len);

/* Answer the stats requests whose counters are all in, or whose wait is over. */
void actor_frontend_stats_flush(actor_frontend_t *f);

/* Answer a health request: every peer and its state. */
void actor_frontend_on_health(actor_frontend_t *f, const uint8_t *ident, size_t ident_len);

/* Every 100 ms: attempts not accepted in time, silent ones probed, backoffs over. */
void actor_frontend_watch(void *self);
/* Worker w produced a token (forward progress). */
void actor_frontend_produced(actor_frontend_t *f, int w);
/* A drain (docs/OPERATIONS.md): no new requests; the actor ends when none is in flight, or
 * at the grace's end after ending the rest with error draining (actor_frontend_drained). */
void actor_frontend_on_drain(void *self, const msg_drain_t *m);
/* Every 100 ms while draining: end what must end, and the actor when nothing is left. */
void actor_frontend_drained(actor_frontend_t *f);

/* A peer answered a ping: it is alive (and no longer hung or restarting). */
void actor_frontend_on_pong(void *self, const msg_pong_t *m);

/* Untyped (actor_loop_on): it takes the counters array of the message over. */
void actor_frontend_on_stats_answer(void *self, msg_any_t *m, zmq_msg_t *raw);

/* The supervisor says a worker died: its requests go on elsewhere. */
void actor_frontend_on_worker_down(void *self, const msg_worker_down_t *m);

/* Every ACTOR_FRONTEND_PING_US: a ping and a stats query to every peer. */
void actor_frontend_heartbeat(void *self);

#endif

/* actor_runtime.h - the actor runtime: an actor is a function that owns its
 * state and talks to others only through MessagePack frames over ZeroMQ.  The
 * same function runs as a thread of any process (actor_new, over a CZMQ zactor
 * pipe) or as the body of its own process (actor_process_run, which runs it
 * as a thread and reports to the supervisor).  Endpoints come from the
 * topology, so inproc://, ipc:// and tcp:// are the same code.
 *
 * Lifecycle (parent <-> actor over the pipe, plain strings):
 *   actor -> parent  "READY"           after it loaded what it owns
 *   actor -> parent  "FAIL <why>"      it could not start (then it returns)
 *   actor -> parent  "EXIT <rc>"       its function returned (rc != 0: failure)
 *   parent -> actor  "$TERM"           stop now (actor_destroy sends it)
 * Heartbeats, stats and stop travel as control messages (msgs/msg_ctl.h) on
 * the actor's inbound socket; actor_ctl_handle answers them the same way in
 * every actor.
 */
#ifndef ACTOR_RUNTIME_H
#define ACTOR_RUNTIME_H

#include "actor_topology.h"
#include "msgs/msg_any.h"

#include <czmq.h>
#include "base/base_log.h"
#include <stdbool.h>
#include <stdint.h>

/* ---- what an actor's code sees */

typedef struct actor_env_t actor_env_t;
typedef int (*actor_fn_t)(actor_env_t *env);

const char *actor_env_name(const actor_env_t *env);
const actor_topology_t *actor_env_topology(const actor_env_t *env);
/* The pipe to the parent: poll it; a message on it means "$TERM". */
zsock_t *actor_env_pipe(actor_env_t *env);
/* Tell the parent the actor is ready.  0 or -EIO. */
int actor_env_ready(actor_env_t *env);
/* Tell the parent the actor could not start (the function then returns non-zero). */
void actor_env_fail(actor_env_t *env, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The function of actor `name` (frontend, tokenizer, router, worker<N>), or NULL. */
actor_fn_t actor_lookup(const char *name);

/* ---- an actor running as a thread, seen from its parent */

typedef struct actor_t actor_t;

/* Start actor name of topo (borrowed: it must outlive the actor) as a thread
 * and wait until it is ready (timeout_ms; <= 0: forever).  NULL with a reason
 * in err when it failed to start, timed out or name is unknown. */
actor_t *actor_new(const char *name, const actor_topology_t *topo, int timeout_ms, char *err,
                   size_t errlen);
/* Send "$TERM", wait for the thread to end; nulls *self_p; safe twice. */
void actor_destroy(actor_t **self_p);
const char *actor_name(const actor_t *self);
/* The parent's end of the pipe (readable when the actor exited). */
zsock_t *actor_pipe(actor_t *self);
/* Non-blocking: true when the actor's function has returned; *rc gets its status. */
bool actor_exited(actor_t *self, int *rc);

/* Body of `strata actor NAME`: run the actor as a thread of this process, send
 * `ready` to the supervisor endpoint of the topology (if any), and wait until
 * SIGTERM/SIGINT or until the actor ends.  Returns the process exit status:
 * 0 on a clean stop, 1 when the actor failed or could not start. */
int actor_process_run(const char *name, const actor_topology_t *topo);

/* ---- sockets */

/* Inbound socket of an actor: PULL bound at endpoint, ZMQ_MAXMSGSIZE set to
 * max_msg, receive high-water mark rcvhwm.  NULL on failure (endpoint in use...). */
zsock_t *actor_sock_inbound(const char *endpoint, int64_t max_msg, int rcvhwm);
/* Outbound: PUSH connected to endpoint, send high-water mark sndhwm, linger 0. */
zsock_t *actor_sock_outbound(const char *endpoint, int sndhwm);
/* Encode m (a msg_<type>_t) and send it as one frame without blocking.
 * 0; -EAGAIN when the peer's queue is full (answer "overloaded"); -EINVAL
 * (encoder refused) / -ENOMEM / -EIO. */
int actor_send(zsock_t *sock, int type, const void *m);
/* Receive one frame (non-blocking) and decode it into m.  0; -EAGAIN when
 * nothing is waiting; -EPROTO for a multi-part frame; a decoder error with err
 * (then m is empty).  On success the caller msg_any_clear()s m. */
int actor_recv(zsock_t *sock, msg_any_t *m, msg_err_t *err);

/* Like actor_send, followed by a second frame of len raw bytes (a KV block):
 * the bulk payload never goes through MessagePack.  Blocking for at most
 * timeout_ms when the peer's queue is full (0: never).  0, -EAGAIN, ... */
int actor_send_raw(zsock_t *sock, int type, const void *m, const void *raw, size_t len,
                   int timeout_ms);
/* Like actor_recv, but a message may carry one raw frame after its header: it
 * is moved into *raw (zmq_msg_init'ed by this call; the caller zmq_msg_close()s
 * it; size 0 when there was none).  More than two frames: -EPROTO. */
int actor_recv_raw(zsock_t *sock, msg_any_t *m, msg_err_t *err, zmq_msg_t *raw);

/* ---- counters (for stats) */

typedef struct actor_counters_t actor_counters_t;

actor_counters_t *actor_counters_new(void);
void actor_counters_destroy(actor_counters_t **self_p);
/* counter name += delta (created at 0).  Names are short dotted words. */
void actor_counters_add(actor_counters_t *self, const char *name, int64_t delta);
void actor_counters_set(actor_counters_t *self, const char *name, int64_t value);
int64_t actor_counters_get(const actor_counters_t *self, const char *name);
int actor_counters_count(const actor_counters_t *self);
const char *actor_counters_name_at(const actor_counters_t *self, int i);
int64_t actor_counters_value_at(const actor_counters_t *self, int i);

/* Answer a control message: ping -> pong, stats_query -> stats_answer (both
 * sent to reply, normally the frontend).  Returns 1 for stop (the actor should
 * end), 0 when m was a control message it answered, -1 when m is not one. */
int actor_ctl_handle(actor_env_t *env, const msg_any_t *m, zsock_t *reply,
                     const actor_counters_t *counters);

/* Monotonic microseconds (the clock of t_arrival_us and every timing). */
uint64_t actor_now_us(void);

#endif

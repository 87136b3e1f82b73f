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
 * the actor's inbound socket; the actor loop (actor_loop_*) answers them the
 * same way in every actor.  An actor is its state, its handlers and its option
 * table (a row of actor_registry.h, which the runtime is given, never looks
 * up); the loop owns polling, draining and timers.
 */
#ifndef ACTOR_RUNTIME_H
#define ACTOR_RUNTIME_H

#include "actor_counters.h"
#include "actor_opts.h"
#include "actor_topology.h"
#include "base_clock.h"
#include "msg_any.h"

#include "base_log.h"
#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- what an actor's code sees */

const char *actor_env_name(const actor_env_t *env);
const actor_topology_t *actor_env_topology(const actor_env_t *env);
/* The pipe to the parent: poll it; a message on it means "$TERM". */
zsock_t *actor_env_pipe(actor_env_t *env);
/* Tell the parent the actor is ready.  0 or -EIO. */
int actor_env_ready(actor_env_t *env);
/* Tell the parent the actor could not start (the function then returns non-zero). */
void actor_env_fail(actor_env_t *env, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The options of this actor, loaded into its config struct (the type its
 * registry row sizes, e.g. actor_worker_cfg_t) through its option table
 * (ACTOR_OPT_FIELD, actor_opts.h): each value from its topology line, else the
 * "defaults" line, else the table's default, parsed and checked once before
 * the actor started (actor_new refuses an invalid one).  Read-only; it lives
 * as long as the actor. */
const void *actor_env_cfg(const actor_env_t *env);

/* Check the options actor name (of row info; NULL: unknown) would read from
 * topo (its line and the defaults its table declares).  0, or -EINVAL with
 * "name: key=value: why". */
int actor_env_check(const actor_info_t *info, const actor_topology_t *topo, const char *name,
                    char *err, size_t errlen);

/* ---- an actor running as a thread, seen from its parent */

typedef struct actor_t actor_t;

/* Start actor name of topo (borrowed: it must outlive the actor) as a thread
 * running the body of info, its registry row (actor_info_find(name); the
 * runtime does not know the table of actors), and wait until it is ready
 * (timeout_ms; <= 0: forever).  NULL with a reason in err when it failed to
 * start, timed out, info is NULL, name has no endpoint or one of its options
 * is invalid (actor_env_check). */
actor_t *actor_new(const actor_info_t *info, const char *name, const actor_topology_t *topo,
                   int timeout_ms, char *err, size_t errlen);
/* Send "$TERM", wait for the thread to end; nulls *self_p; safe twice. */
void actor_destroy(actor_t **self_p);
const char *actor_name(const actor_t *self);
/* The parent's end of the pipe (readable when the actor exited). */
zsock_t *actor_pipe(actor_t *self);
/* Non-blocking: true when the actor's function has returned; *rc gets its status. */
bool actor_exited(actor_t *self, int *rc);

/* How often an actor's loop sends `heartbeat` to its supervisor (process mode). */
#define ACTOR_HEARTBEAT_MS 200

/* Body of `strata actor NAME`: run the actor as a thread of this process, send
 * `ready` to the supervisor endpoint of the topology (if any; then the actor's
 * loop sends it `heartbeat` every ACTOR_HEARTBEAT_MS from the loop's thread,
 * so a stuck loop goes quiet), and wait until SIGTERM/SIGINT, until the actor
 * ends or until the parent is gone.  Returns the process exit status:
 * 0 on a clean stop, 1 when the actor failed or could not start. */
int actor_process_run(const actor_info_t *info, const char *name, const actor_topology_t *topo);

/* ---- sockets
 *
 * Frames between actors carry a checksum (an XXH3-64 trailer on the first
 * frame, actor_runtime.c): actor_send* add it, actor_recv* check it and refuse
 * a frame that fails with -EBADMSG.  Only these functions read and write
 * internal frames; the frontend's client socket does not use them.
 *
 * Fault injection (actor_faults.h, docs/FAULTS.md): when an actor's "faults"
 * option is set, the outbound sockets its thread makes with
 * actor_sock_outbound are covered (to=NAME: only the one to NAME), and
 * actor_send* on them drop, duplicate, delay, reorder or corrupt frames as the
 * spec decides; the actor loop sends held frames when due, stalls, and counts
 * faults.* in its stats.  crash_after kills an actor process (SIGKILL); in
 * thread mode the actor sends nothing more, its loop ends and it exits 134. */

/* The limits of the links between actors, in one place.  A high-water mark
 * is named after what travels on the link; a full queue answers "overloaded"
 * (actor_send: -EAGAIN), so the mark is how much a peer may fall behind. */
#define ACTOR_HWM_STREAM 100000 /* the request and token path: inboxes, tokenizer, router */
#define ACTOR_HWM_BULK 10000    /* peers that exchange batches: experts, draft, KV tier, tokens */
#define ACTOR_HWM_CTL 1000      /* control: stats, health, load and ready reports, worker_down */
#define ACTOR_HWM_ADMIT 100     /* the frontend's dispatch: a busy router says so at once */
#define ACTOR_HWM_SPILL 256     /* a worker's KV blocks to the tier manager (large raw frames) */
#define ACTOR_HWM_READY 16      /* process mode: the ready report to the supervisor */
#define ACTOR_HWM_BEAT 2        /* heartbeats: at most two queue while the supervisor is away */
/* ZMQ_MAXMSGSIZE of an inbox: an internal frame and its checksum trailer, with room. */
#define ACTOR_MAX_FRAME (MSG_MAX_INTERNAL_FRAME + 4096)
/* ZMQ_MAXMSGSIZE of an inbox that takes raw bulk frames (KV blocks, expert rows). */
#define ACTOR_MAX_BULK_FRAME ((int64_t)64 << 20)

/* Inbound socket of actor name of topo: PULL bound at its endpoint,
 * ZMQ_MAXMSGSIZE set to max_msg, receive high-water mark rcvhwm.  On tcp://
 * with a key directory it is a CURVE server (docs/SECURITY.md): name's key
 * pair, peers admitted by the process's ZAP handler (actor_curve.h), which
 * must be running.  NULL on failure (endpoint in use, key unreadable...). */
zsock_t *actor_sock_inbound(const actor_topology_t *topo, const char *name, int64_t max_msg,
                            int rcvhwm);
/* Outbound of actor name to actor peer of topo: PUSH connected to peer's
 * endpoint, send high-water mark sndhwm, linger 0.  On tcp:// with a key
 * directory it is a CURVE client: name's key pair, peer's public key.  NULL
 * on failure. */
zsock_t *actor_sock_outbound(const actor_topology_t *topo, const char *name, const char *peer,
                             int sndhwm);

/* An actor's sockets declared as data: one row per socket, the runtime opens
 * them all (actor_socks_open) before the actor's own set-up goes on.  A table
 * ends with a row whose field is 0. */
typedef enum {
    ACTOR_SOCK_IN,  /* its inbound PULL (actor_sock_inbound) */
    ACTOR_SOCK_OUT, /* a PUSH to peer (actor_sock_outbound) */
} actor_sock_dir_t;

typedef struct {
    size_t field;         /* ACTOR_SOCK_FIELD(S, member): where the zsock_t * goes in the state */
    actor_sock_dir_t dir; /* in or out */
    const char *peer;     /* OUT: the actor it connects to (IN: NULL) */
    int hwm;              /* ACTOR_HWM_*: the receive (IN) or send (OUT) high-water mark */
    int64_t max_msg;      /* IN: ZMQ_MAXMSGSIZE, ACTOR_MAX_FRAME or ACTOR_MAX_BULK_FRAME */
    bool optional;        /* OUT: only when the topology has peer (else the field stays NULL) */
} actor_sock_decl_t;

/* Where a socket goes in an actor's state struct S (1 + offsetof: 0 ends a table). */
#define ACTOR_SOCK_FIELD(S, member) (offsetof(S, member) + 1)

/* Open every socket of decls for the actor of env, storing each in self at its
 * field.  0, or -EIO with "cannot open its inbox" / "cannot connect to PEER"
 * in err; the sockets opened so far stay in self (actor_socks_close). */
int actor_socks_open(const actor_env_t *env, const actor_sock_decl_t *decls, void *self, char *err,
                     size_t errlen);
/* Close (zsock_destroy) every socket of decls in self; safe twice. */
void actor_socks_close(const actor_sock_decl_t *decls, void *self);

/* Encode m (a msg_<type>_t) and send it as one frame without blocking.
 * 0; -EAGAIN when the peer's queue is full (answer "overloaded"); -EINVAL
 * (encoder refused) / -ENOMEM / -EIO. */
int actor_send(zsock_t *sock, int type, const void *m);
/* Receive one frame (non-blocking) and decode it into m.  0; -EAGAIN when
 * nothing is waiting; -EPROTO for a multi-part frame; -EBADMSG when its
 * checksum fails; a decoder error with err (then m is empty).  On success the
 * caller msg_any_clear()s m. */
int actor_recv(zsock_t *sock, msg_any_t *m, msg_err_t *err);

/* Like actor_send, followed by a second frame of len raw bytes (a KV block):
 * the bulk payload never goes through MessagePack.  Blocking for at most
 * timeout_ms when the peer's queue is full (0: never).  0, -EAGAIN, ... */
int actor_send_raw(zsock_t *sock, int type, const void *m, const void *raw, size_t len,
                   int timeout_ms);
/* Like actor_recv, but a message may carry one raw frame after its header: it
 * is moved into *raw (zmq_msg_init'ed by this call; the caller zmq_msg_close()s
 * it; size 0 when there was none).  More than two frames: -EPROTO; a checksum
 * (of either frame) that fails: -EBADMSG.  On an error raw is empty. */
int actor_recv_raw(zsock_t *sock, msg_any_t *m, msg_err_t *err, zmq_msg_t *raw);

/* ---- the actor loop (one per actor, as CZMQ's zloop)
 *
 * Each wakeup: poll the pipe and every registered socket (with a real
 * timeout), stop on the pipe ($TERM), drain each socket with at most `budget`
 * messages (so no socket starves the others; a socket left with messages makes
 * the next poll not wait), run the timers that are due, then the idle hook,
 * which returns how long the next poll may wait.  An inbox that is a CURVE
 * server is monitored: a handshake the ZAP handler refused counts
 * "curve.refused".  The inbox decodes frames,
 * counts malformed ones (counter "malformed"; a frame whose checksum failed
 * also "malformed.checksum") and dispatches them by type to
 * the handlers of actor_loop_on; ping, stats_query and stop are answered here
 * (pong / stats_answer to the reply socket; stop ends the loop after the
 * current message); any other type without a handler counts "unexpected".
 * In process mode the loop also sends `heartbeat` to the supervisor every
 * ACTOR_HEARTBEAT_MS (its own PUSH socket, never blocking): a handler or idle
 * hook that blocks the loop longer than the supervisor's hang_timeout_ms gets
 * the process killed and restarted (docs/TOPOLOGY.md).
 */

typedef struct actor_loop_t actor_loop_t;

/* A decoded message of the inbox.  m may be taken over (then set m->type =
 * MSG_NONE); raw is its second frame (size 0: none), NULL for an inbox
 * without raw frames.  The loop clears both afterwards. */
typedef void (*actor_msg_fn)(void *self, msg_any_t *m, zmq_msg_t *raw);
/* A socket the actor reads itself: called while it is readable; reads one message. */
typedef void (*actor_reader_fn)(void *self, zsock_t *sock);
/* Periodic work, or the hook before a stats answer. */
typedef void (*actor_timer_fn)(void *self);
/* After every wakeup: the actor's own work (a batch step).  Returns the next
 * poll's wait in ms: 0 = there is more work (poll without waiting), < 0 = the
 * loop's default wait. */
typedef int (*actor_idle_fn)(void *self);

/* A loop for the actor of env; self is passed to every handler.  It owns a
 * counters set (actor_loop_counters).  NULL when out of memory. */
actor_loop_t *actor_loop_new(actor_env_t *env, void *self);
/* Nulls *self_p; safe twice.  The sockets stay the actor's. */
void actor_loop_destroy(actor_loop_t **self_p);
/* The counters reported in stats_answer (owned by the loop). */
actor_counters_t *actor_loop_counters(actor_loop_t *self);
/* Bring the runtime's own counters in that set (faults.*) up to date: done before
 * every stats_answer; an actor that answers stats itself (the frontend) calls it. */
void actor_loop_refresh_counters(actor_loop_t *self);

/* The actor's inbound socket (borrowed).  reply: where pong and stats_answer
 * go (NULL: nowhere).  raw: frames may carry a raw second frame.  prefix:
 * prepended to the malformed / unexpected counter names ("" or "internal.").
 * 0, or -ENOSPC when too many sockets are registered. */
int actor_loop_inbox(actor_loop_t *self, zsock_t *sock, zsock_t *reply, bool raw,
                     const char *prefix);
/* Another socket (borrowed) whose messages fn reads itself.  0 or -ENOSPC. */
int actor_loop_reader(actor_loop_t *self, zsock_t *sock, actor_reader_fn fn);
/* The same, fn getting arg as its self (a module of the actor that owns the socket). */
int actor_loop_reader_arg(actor_loop_t *self, zsock_t *sock, actor_reader_fn fn, void *arg);
/* A plain file descriptor (borrowed; an epoll fd, a pipe, a listening
 * socket) polled with the sockets: fn(self, fd) is called once per wakeup in
 * which fd is readable; it must not block.  0 or -ENOSPC. */
typedef void (*actor_fd_fn)(void *self, int fd);
int actor_loop_fd(actor_loop_t *self, int fd, actor_fd_fn fn);
/* Handler of message type on the inbox.  0 or -ENOSPC / -EINVAL. */
int actor_loop_on(actor_loop_t *self, int type, actor_msg_fn fn);

/* ---- typed handlers, one pair per message type, generated from MSG_TYPES
 * (msgs/msg_types.h):
 *   actor_loop_handle_<name>(loop, fn)      fn(self, const msg_<name>_t *m)
 *   actor_loop_handle_<name>_raw(loop, fn)  fn(self, const msg_<name>_t *m, zmq_msg_t *raw)
 * The loop decodes the frame and calls fn with the message's own struct,
 * borrowed (the loop clears it afterwards).  The _raw variant is for a
 * message that carries a second, raw frame (a KV block, expert rows): raw is
 * it (size 0: none; NULL on an inbox without raw frames), and fn may move it
 * out (zmq_msg_move).  A handler that takes the decoded message itself over
 * (keeps its arrays: the frontend's stats_answer, the draft's queued
 * requests) registers untyped, with actor_loop_on (actor_msg_fn); every other
 * handler is typed.  0, or -ENOSPC / -EINVAL, as actor_loop_on. */
typedef void (*actor_typed_fn)(void); /* a typed handler, stored: cast back to call it */
int actor_loop_on_typed_(actor_loop_t *self, int type, actor_typed_fn fn, bool raw);
#define ACTOR_X_ON(name, NAME, id, version, family)                                                \
    typedef void (*actor_on_##name##_fn)(void *self, const msg_##name##_t *m);                     \
    typedef void (*actor_on_##name##_raw_fn)(void *self, const msg_##name##_t *m, zmq_msg_t *raw); \
    static inline int actor_loop_handle_##name(actor_loop_t *l, actor_on_##name##_fn fn) {         \
        return actor_loop_on_typed_(l, MSG_##NAME, (actor_typed_fn)fn, false);                     \
    }                                                                                              \
    static inline int actor_loop_handle_##name##_raw(actor_loop_t *l,                              \
                                                     actor_on_##name##_raw_fn fn) {                \
        return actor_loop_on_typed_(l, MSG_##NAME, (actor_typed_fn)fn, true);                      \
    }
MSG_TYPES(ACTOR_X_ON)
#undef ACTOR_X_ON

/* fn every interval_ms (first after one interval).  0 or -ENOSPC / -EINVAL. */
int actor_loop_timer(actor_loop_t *self, int interval_ms, actor_timer_fn fn);
/* The hook after every wakeup (NULL: none). */
void actor_loop_idle(actor_loop_t *self, actor_idle_fn fn);
/* Called before every stats_answer, to refresh the counters. */
void actor_loop_on_stats(actor_loop_t *self, actor_timer_fn fn);
/* Messages drained from one socket per wakeup (default 1000). */
void actor_loop_budget(actor_loop_t *self, int budget);
/* Make actor_loop_run return after the current message. */
void actor_loop_stop(actor_loop_t *self);
/* For an actor that reads its inbox itself while it waits inside a handler or
 * the idle hook (the worker waiting for its expert replies in the middle of a
 * forward pass): queue a message it read from inbox (registered with
 * actor_loop_inbox) but cannot handle now.  The loop dispatches the queued
 * messages in order, as if just read from inbox, at its next wakeup, before it
 * reads any socket.  Takes m (m->type becomes MSG_NONE) and raw (NULL or a
 * zmq_msg_t that is moved: it is left empty).  0, -ENOMEM (then m and raw are
 * freed and the message counts as malformed) or -EINVAL (inbox unknown). */
int actor_loop_defer(actor_loop_t *self, zsock_t *inbox, msg_any_t *m, zmq_msg_t *raw);
/* For the same long waits: send the heartbeat when due (process mode) and the
 * frames fault injection holds that are due.  Returns the ms until the next
 * held frame is due, or -1 when none is held. */
int actor_loop_pulse(actor_loop_t *self);
/* Run until $TERM or stop.  wait_ms: the poll's wait when the idle hook does
 * not say (> 0).  Returns 0. */
int actor_loop_run(actor_loop_t *self, int wait_ms);

#endif

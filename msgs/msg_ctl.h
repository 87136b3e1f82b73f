/* msg_ctl.h - the control family (supervisor / parent <-> actor): readiness,
 * liveness (ping/pong, heartbeat), stop, stats, drain; the planned restart of one
 * worker (worker_drain, worker_idle); and `strata ctl`'s commands to the supervisor
 * (ctl, ctl_reply).  Plain structs; same ownership rules as msg_client.h.
 */
#ifndef MSG_CTL_H
#define MSG_CTL_H

#include "msg_client.h"
#include "msg_types.h"

/* 40 ready (actor -> parent): loaded what it owns, serving */
typedef struct {
    char name[MSG_MAX_NAME_BYTES + 1]; /* required, non-empty */
    int64_t pid;                       /* >= 0 (the thread's process for thread actors) */
} msg_ready_t;

/* 41 ping (parent -> actor) */
typedef struct {
    uint64_t seq;
} msg_ping_t;

/* 42 pong (actor -> parent): answers ping seq */
typedef struct {
    uint64_t seq;
    char name[MSG_MAX_NAME_BYTES + 1];
} msg_pong_t;

/* 43 stop, 44 stats_query: no fields */
typedef struct {
    int unused_;
} msg_stop_t;
typedef struct {
    int unused_;
} msg_stats_query_t;

/* 45 stats_answer (actor -> parent) */
typedef struct {
    char name[MSG_MAX_NAME_BYTES + 1];
    msg_counter_t *counters; /* (n_counters) */
    int n_counters;          /* 0..MSG_MAX_COUNTERS */
} msg_stats_answer_t;

/* 46 heartbeat (actor process -> supervisor): sent every ~200 ms from the
 * actor's loop thread, so a loop that is stuck (or a stopped process) stops
 * sending it; the same fields as ready */
typedef msg_ready_t msg_heartbeat_t;

/* 51 drain (parent -> frontend): stop taking requests (health says draining, not ready;
 * new ones get error draining), let those in flight finish, and end the actor when none is
 * left -- or after grace_ms, ending the rest with error draining (their clients resume
 * them elsewhere). */
typedef struct {
    int64_t grace_ms; /* 0..3600000 */
} msg_drain_t;

/* 52 ctl (`strata ctl` -> the supervisor's control endpoint, docs/OPERATIONS.md): one
 * command; the answers are ctl_reply messages, the last with final set. */
typedef enum {
    MSG_CTL_STATUS = 0,  /* "status": every actor's state, pid and restarts */
    MSG_CTL_RESTART = 1, /* "restart": drain then restart name (all: every actor in turn) */
    MSG_CTL_DRAIN = 2    /* "drain": the whole server, as SIGTERM */
} msg_ctl_cmd_t;

typedef struct {
    int cmd;                           /* msg_ctl_cmd_t */
    char name[MSG_MAX_NAME_BYTES + 1]; /* restart: the actor ("" with all) */
    bool all;                          /* restart: every actor, one at a time */
    int64_t grace_ms; /* restart, drain: -1 (the default): serve's --drain-timeout */
} msg_ctl_t;

/* an actor's state in a ctl_reply (the supervisor's view of its process) */
typedef enum {
    MSG_CTL_READY = 0,      /* "ready": running, reported ready */
    MSG_CTL_STARTING = 1,   /* "starting": running, loading */
    MSG_CTL_DRAINING = 2,   /* "draining": a planned restart waits for its requests */
    MSG_CTL_STOPPING = 3,   /* "stopping": SIGTERM sent, not exited yet */
    MSG_CTL_RESTARTING = 4, /* "restarting": exited, its restart is due (backoff) */
    MSG_CTL_STOPPED = 5     /* "stopped": not running, no restart due */
} msg_ctl_state_t;
const char *msg_ctl_state_name(int state); /* NULL if invalid */

typedef struct {
    char name[MSG_MAX_NAME_BYTES + 1];
    int state;        /* msg_ctl_state_t */
    int64_t pid;      /* 0 when not running */
    int64_t restarts; /* restarts of this actor (planned ones too), >= 0 */
    int64_t up_ms;    /* since its last start, >= 0 (0 when not running) */
} msg_ctl_actor_t;

/* 53 ctl_reply (supervisor -> `strata ctl`): a progress line of a restart (final
 * false: a phase of an actor ended, or a keep-alive with an empty message at least every
 * second) or the command's outcome (final true: ok, or an error in message). */
typedef struct {
    bool ok;                                /* false: the command failed (message says why) */
    bool final;                             /* the last reply to the command */
    char message[MSG_MAX_ERRMSG_BYTES + 1]; /* one line, or "" (a keep-alive) */
    char actor[MSG_MAX_NAME_BYTES + 1];     /* the actor a phase is of, or "" */
    char phase[MSG_MAX_WHAT_BYTES + 1];     /* "drain", "stop", "start", or "" */
    int64_t ms;                             /* how long that phase took, >= 0 */
    msg_ctl_actor_t *actors;                /* (n_actors) status: every actor */
    int n_actors;                           /* 0..MSG_MAX_ACTORS */
} msg_ctl_reply_t;

/* 54 worker_drain (supervisor -> router): drain true: dispatch no new request to the
 * worker (unless no other worker is alive), and send worker_idle once it holds none;
 * false: it takes requests again (a worker_down or its restart clears it too). */
typedef struct {
    int worker; /* 0..4095 */
    bool drain;
} msg_worker_drain_t;

/* 55 worker_idle (router -> supervisor): a draining worker holds no request now */
typedef struct {
    int worker; /* 0..4095 */
} msg_worker_idle_t;

MSG_DECLARE_CODEC(ready)
MSG_DECLARE_CODEC(ping)
MSG_DECLARE_CODEC(pong)
MSG_DECLARE_CODEC(stop)
MSG_DECLARE_CODEC(stats_query)
MSG_DECLARE_CODEC(stats_answer)
MSG_DECLARE_CODEC(heartbeat)
MSG_DECLARE_CODEC(drain)
MSG_DECLARE_CODEC(ctl)
MSG_DECLARE_CODEC(ctl_reply)
MSG_DECLARE_CODEC(worker_drain)
MSG_DECLARE_CODEC(worker_idle)

#endif

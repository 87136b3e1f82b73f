/* msg_ctl.h - the control family (supervisor / parent <-> actor): readiness,
 * liveness (ping/pong, heartbeat), stop, stats.  Plain structs; same ownership
 * rules as msg_client.h.
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

MSG_DECLARE_CODEC(ready)
MSG_DECLARE_CODEC(ping)
MSG_DECLARE_CODEC(pong)
MSG_DECLARE_CODEC(stop)
MSG_DECLARE_CODEC(stats_query)
MSG_DECLARE_CODEC(stats_answer)
MSG_DECLARE_CODEC(heartbeat)
MSG_DECLARE_CODEC(drain)

#endif

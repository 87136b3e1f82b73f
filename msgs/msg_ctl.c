/* msg_ctl.c - the control family (supervisor / parent <-> actor, `strata ctl` <-> the
 * supervisor) as schemas. */
#include "msg_ctl.h"
#include "msg_codec.h"

#include <errno.h>
#include <stddef.h>

#define REQ MSG_FF_REQUIRED
#define S_NAME(T)                                                                                  \
    {                                                                                              \
        .key = "name", .kind = MSG_F_STR_FIX, .flags = REQ, .off = offsetof(T, name), .min = 1,    \
        .max = MSG_MAX_NAME_BYTES                                                                  \
    }

static const msg_field_t s_ready_fields[] = {
    S_NAME(msg_ready_t),
    {.key = "pid",
     .kind = MSG_F_I64,
     .flags = REQ,
     .off = offsetof(msg_ready_t, pid),
     .lo = 0,
     .hi = INT64_MAX},
};
const msg_schema_t msg_schema_ready = {
    "ready", sizeof(msg_ready_t), s_ready_fields, MSG_NFIELDS(s_ready_fields), NULL, NULL};
/* heartbeat: msg_heartbeat_t is msg_ready_t, so the same fields */
const msg_schema_t msg_schema_heartbeat = {
    "heartbeat", sizeof(msg_heartbeat_t), s_ready_fields, MSG_NFIELDS(s_ready_fields), NULL, NULL};

static const msg_field_t s_ping_fields[] = {
    {.key = "seq", .kind = MSG_F_U64, .flags = REQ, .off = offsetof(msg_ping_t, seq)},
};
const msg_schema_t msg_schema_ping = {
    "ping", sizeof(msg_ping_t), s_ping_fields, MSG_NFIELDS(s_ping_fields), NULL, NULL};

static const msg_field_t s_pong_fields[] = {
    {.key = "seq", .kind = MSG_F_U64, .flags = REQ, .off = offsetof(msg_pong_t, seq)},
    S_NAME(msg_pong_t),
};
const msg_schema_t msg_schema_pong = {
    "pong", sizeof(msg_pong_t), s_pong_fields, MSG_NFIELDS(s_pong_fields), NULL, NULL};

const msg_schema_t msg_schema_stop = {"stop", sizeof(msg_stop_t), NULL, 0, NULL, NULL};
const msg_schema_t msg_schema_stats_query = {
    "stats_query", sizeof(msg_stats_query_t), NULL, 0, NULL, NULL};

static const msg_field_t s_drain_fields[] = {
    {.key = "grace_ms",
     .kind = MSG_F_I64,
     .flags = REQ,
     .off = offsetof(msg_drain_t, grace_ms),
     .lo = 0,
     .hi = 3600000},
};
const msg_schema_t msg_schema_drain = {
    "drain", sizeof(msg_drain_t), s_drain_fields, MSG_NFIELDS(s_drain_fields), NULL, NULL};

static const msg_field_t s_stats_answer_fields[] = {
    S_NAME(msg_stats_answer_t),
    {.key = "counters",
     .kind = MSG_F_COUNTERS,
     .flags = REQ,
     .off = offsetof(msg_stats_answer_t, counters),
     .off2 = offsetof(msg_stats_answer_t, n_counters),
     .max = MSG_MAX_COUNTERS},
};
const msg_schema_t msg_schema_stats_answer = {"stats_answer",
                                              sizeof(msg_stats_answer_t),
                                              s_stats_answer_fields,
                                              MSG_NFIELDS(s_stats_answer_fields),
                                              NULL,
                                              NULL};

/* ---- 52 ctl, 53 ctl_reply: `strata ctl` and the supervisor */

static const char *const s_ctl_cmd_names[3] = {"status", "restart", "drain"};
static const char *const s_ctl_state_names[6] = {"ready",    "starting",   "draining",
                                                 "stopping", "restarting", "stopped"};

const char *msg_ctl_state_name(int state) {
    return state >= 0 && state <= MSG_CTL_STOPPED ? s_ctl_state_names[state] : NULL;
}

static void s_ctl_init(void *p) {
    ((msg_ctl_t *)p)->grace_ms = -1;
}

/* restart names one actor or says all, not both; status and drain name none */
static int s_ctl_check(const void *p, msg_err_t *err) {
    const msg_ctl_t *m = p;
    if (m->cmd == MSG_CTL_RESTART && !m->name[0] == !m->all)
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "name",
                           "restart takes a name or all, exactly one of them");
    if (m->cmd != MSG_CTL_RESTART && (m->name[0] || m->all))
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "name", "only restart takes a name or all");
    return 0;
}

static const msg_field_t s_ctl_fields[] = {
    {.key = "cmd",
     .kind = MSG_F_ENUM,
     .flags = REQ,
     .off = offsetof(msg_ctl_t, cmd),
     .names = s_ctl_cmd_names,
     .n_names = 3},
    {.key = "name",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_ctl_t, name),
     .max = MSG_MAX_NAME_BYTES},
    {.key = "all", .kind = MSG_F_BOOL, .flags = MSG_FF_OMIT_EMPTY, .off = offsetof(msg_ctl_t, all)},
    {.key = "grace_ms",
     .kind = MSG_F_I64,
     .off = offsetof(msg_ctl_t, grace_ms),
     .lo = -1,
     .hi = 3600000},
};
const msg_schema_t msg_schema_ctl = {
    "ctl", sizeof(msg_ctl_t), s_ctl_fields, MSG_NFIELDS(s_ctl_fields), s_ctl_init, s_ctl_check};

static const msg_field_t s_ctl_actor_fields[] = {
    S_NAME(msg_ctl_actor_t),
    {.key = "state",
     .kind = MSG_F_ENUM,
     .flags = REQ,
     .off = offsetof(msg_ctl_actor_t, state),
     .names = s_ctl_state_names,
     .n_names = 6},
    {.key = "pid",
     .kind = MSG_F_I64,
     .flags = REQ,
     .off = offsetof(msg_ctl_actor_t, pid),
     .lo = 0,
     .hi = INT64_MAX},
    {.key = "restarts",
     .kind = MSG_F_I64,
     .flags = REQ,
     .off = offsetof(msg_ctl_actor_t, restarts),
     .lo = 0,
     .hi = INT64_MAX},
    {.key = "up_ms",
     .kind = MSG_F_I64,
     .off = offsetof(msg_ctl_actor_t, up_ms),
     .lo = 0,
     .hi = INT64_MAX},
};
static const msg_schema_t s_ctl_actor_schema = {
    "", sizeof(msg_ctl_actor_t), s_ctl_actor_fields, MSG_NFIELDS(s_ctl_actor_fields), NULL, NULL};

static const msg_field_t s_ctl_reply_fields[] = {
    {.key = "ok", .kind = MSG_F_BOOL, .flags = REQ, .off = offsetof(msg_ctl_reply_t, ok)},
    {.key = "final", .kind = MSG_F_BOOL, .flags = REQ, .off = offsetof(msg_ctl_reply_t, final)},
    {.key = "message",
     .kind = MSG_F_STR_FIX,
     .off = offsetof(msg_ctl_reply_t, message),
     .max = MSG_MAX_ERRMSG_BYTES},
    {.key = "actor",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_ctl_reply_t, actor),
     .max = MSG_MAX_NAME_BYTES},
    {.key = "phase",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_ctl_reply_t, phase),
     .max = MSG_MAX_WHAT_BYTES},
    {.key = "ms",
     .kind = MSG_F_I64,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_ctl_reply_t, ms),
     .lo = 0,
     .hi = INT64_MAX},
    {.key = "actors",
     .kind = MSG_F_ARRAY,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_ctl_reply_t, actors),
     .off2 = offsetof(msg_ctl_reply_t, n_actors),
     .max = MSG_MAX_ACTORS,
     .sub = &s_ctl_actor_schema},
};
const msg_schema_t msg_schema_ctl_reply = {
    "ctl_reply", sizeof(msg_ctl_reply_t), s_ctl_reply_fields, MSG_NFIELDS(s_ctl_reply_fields), NULL,
    NULL};

/* ---- 54 worker_drain, 55 worker_idle: a worker's planned restart */

static const msg_field_t s_worker_drain_fields[] = {
    {.key = "worker",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_worker_drain_t, worker),
     .lo = 0,
     .hi = 4095},
    {.key = "drain", .kind = MSG_F_BOOL, .flags = REQ, .off = offsetof(msg_worker_drain_t, drain)},
};
const msg_schema_t msg_schema_worker_drain = {"worker_drain",
                                              sizeof(msg_worker_drain_t),
                                              s_worker_drain_fields,
                                              MSG_NFIELDS(s_worker_drain_fields),
                                              NULL,
                                              NULL};

static const msg_field_t s_worker_idle_fields[] = {
    {.key = "worker",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_worker_idle_t, worker),
     .lo = 0,
     .hi = 4095},
};
const msg_schema_t msg_schema_worker_idle = {"worker_idle",
                                             sizeof(msg_worker_idle_t),
                                             s_worker_idle_fields,
                                             MSG_NFIELDS(s_worker_idle_fields),
                                             NULL,
                                             NULL};

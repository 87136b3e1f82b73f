/* msg_ctl.c - the control family (supervisor / parent <-> actor) as schemas. */
#include "msg_ctl.h"
#include "msg_codec.h"

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

/* msg_moe.c - the MoE expert family as schemas, with the rules across fields
 * (a table's arrays sized by its E and A). */
#include "msg_moe.h"
#include "msg_codec.h"

#include <errno.h>
#include <stddef.h>

#define REQ MSG_FF_REQUIRED

const char *const msg_dtype_names[2] = {"f32", "f16"};
const char *const msg_expert_status_names[4] = {"ok", "bad_request", "not_hosted", "failed"};

static const msg_field_t s_expert_request_fields[] = {
    {.key = "seq", .kind = MSG_F_U64, .flags = REQ, .off = offsetof(msg_expert_request_t, seq)},
    {.key = "worker",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_expert_request_t, worker),
     .lo = 0,
     .hi = 65535},
    {.key = "layer",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_expert_request_t, layer),
     .lo = 0,
     .hi = 65535},
    {.key = "d_model",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_expert_request_t, d_model),
     .lo = 1,
     .hi = MSG_MAX_EXPERT_DMODEL},
    {.key = "dtype",
     .kind = MSG_F_ENUM,
     .flags = REQ,
     .off = offsetof(msg_expert_request_t, dtype),
     .names = msg_dtype_names,
     .n_names = 2},
    {.key = "experts",
     .kind = MSG_F_BIN_I32,
     .flags = REQ,
     .off = offsetof(msg_expert_request_t, experts),
     .off2 = offsetof(msg_expert_request_t, n_rows),
     .min = 1,
     .max = MSG_MAX_EXPERT_ROWS,
     .lo = 0,
     .hi = MSG_MAX_EXPERTS - 1},
    {.key = "table", .kind = MSG_F_U64, .off = offsetof(msg_expert_request_t, table)},
};
const msg_schema_t msg_schema_expert_request = {"expert_request",
                                                sizeof(msg_expert_request_t),
                                                s_expert_request_fields,
                                                MSG_NFIELDS(s_expert_request_fields),
                                                NULL,
                                                NULL};

static const msg_field_t s_expert_reply_fields[] = {
    {.key = "seq", .kind = MSG_F_U64, .flags = REQ, .off = offsetof(msg_expert_reply_t, seq)},
    {.key = "expert",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_expert_reply_t, expert),
     .lo = 0,
     .hi = MSG_MAX_EXPERT_ACTORS - 1},
    {.key = "layer",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_expert_reply_t, layer),
     .lo = 0,
     .hi = 65535},
    {.key = "n_rows",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_expert_reply_t, n_rows),
     .lo = 1,
     .hi = MSG_MAX_EXPERT_ROWS},
    {.key = "dtype",
     .kind = MSG_F_ENUM,
     .flags = REQ,
     .off = offsetof(msg_expert_reply_t, dtype),
     .names = msg_dtype_names,
     .n_names = 2},
    {.key = "status",
     .kind = MSG_F_ENUM,
     .flags = REQ,
     .off = offsetof(msg_expert_reply_t, status),
     .names = msg_expert_status_names,
     .n_names = 4},
    {.key = "busy_us",
     .kind = MSG_F_I64,
     .off = offsetof(msg_expert_reply_t, busy_us),
     .lo = 0,
     .hi = INT64_MAX},
};
const msg_schema_t msg_schema_expert_reply = {"expert_reply",
                                              sizeof(msg_expert_reply_t),
                                              s_expert_reply_fields,
                                              MSG_NFIELDS(s_expert_reply_fields),
                                              NULL,
                                              NULL};

static int s_expert_load_check(const void *p, msg_err_t *err) {
    const msg_expert_load_t *m = p;
    if (m->n_rows_n != m->n_expert)
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "rows",
                           "field 'rows': %d entries for n_expert %d", m->n_rows_n, m->n_expert);
    return 0;
}

static const msg_field_t s_expert_load_fields[] = {
    {.key = "expert",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_expert_load_t, expert),
     .lo = 0,
     .hi = MSG_MAX_EXPERT_ACTORS - 1},
    {.key = "n_expert",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_expert_load_t, n_expert),
     .lo = 1,
     .hi = MSG_MAX_EXPERTS},
    {.key = "rows",
     .kind = MSG_F_BIN_I32,
     .flags = REQ,
     .off = offsetof(msg_expert_load_t, rows),
     .off2 = offsetof(msg_expert_load_t, n_rows_n),
     .min = 1,
     .max = MSG_MAX_EXPERTS,
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "frames",
     .kind = MSG_F_INT,
     .off = offsetof(msg_expert_load_t, frames),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "queue",
     .kind = MSG_F_INT,
     .off = offsetof(msg_expert_load_t, queue),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "busy_us",
     .kind = MSG_F_I64,
     .off = offsetof(msg_expert_load_t, busy_us),
     .lo = 0,
     .hi = INT64_MAX},
    {.key = "period_us",
     .kind = MSG_F_I64,
     .off = offsetof(msg_expert_load_t, period_us),
     .lo = 0,
     .hi = INT64_MAX},
    {.key = "table", .kind = MSG_F_U64, .off = offsetof(msg_expert_load_t, table)},
};
const msg_schema_t msg_schema_expert_load = {"expert_load",
                                             sizeof(msg_expert_load_t),
                                             s_expert_load_fields,
                                             MSG_NFIELDS(s_expert_load_fields),
                                             NULL,
                                             s_expert_load_check};

static int s_expert_table_check(const void *p, msg_err_t *err) {
    const msg_expert_table_t *m = p;
    if (m->n_hosts != m->n_expert * m->n_actors)
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "hosts",
                           "field 'hosts': %d entries for %d experts x %d actors", m->n_hosts,
                           m->n_expert, m->n_actors);
    if (m->n_cap != m->n_expert)
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "cap",
                           "field 'cap': %d entries for %d experts", m->n_cap, m->n_expert);
    if (m->n_load != m->n_actors || m->n_alive != m->n_actors)
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, m->n_load != m->n_actors ? "load" : "alive",
                           "fields 'load' and 'alive': one entry per actor (%d)", m->n_actors);
    for (int i = 0; i < m->n_hosts; i++)
        if (m->hosts[i] > 1)
            return msg_err_set(err, -ERANGE, MSG_E_RANGE, "hosts", "field 'hosts': not 0 or 1");
    for (int i = 0; i < m->n_alive; i++)
        if (m->alive[i] > 1)
            return msg_err_set(err, -ERANGE, MSG_E_RANGE, "alive", "field 'alive': not 0 or 1");
    return 0;
}

#define S_BIN(T, k, p, n, lo_n, hi_n, hi_v)                                                        \
    {                                                                                              \
        .key = k, .kind = MSG_F_BIN_I32, .flags = REQ, .off = offsetof(T, p),                      \
        .off2 = offsetof(T, n), .min = lo_n, .max = hi_n, .lo = 0, .hi = hi_v                      \
    }

static const msg_field_t s_expert_table_fields[] = {
    {.key = "version",
     .kind = MSG_F_U64,
     .flags = REQ,
     .off = offsetof(msg_expert_table_t, version)},
    {.key = "n_expert",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_expert_table_t, n_expert),
     .lo = 1,
     .hi = MSG_MAX_EXPERTS},
    {.key = "n_actors",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_expert_table_t, n_actors),
     .lo = 1,
     .hi = MSG_MAX_EXPERT_ACTORS},
    {.key = "load_aware", .kind = MSG_F_BOOL, .off = offsetof(msg_expert_table_t, load_aware)},
    S_BIN(msg_expert_table_t, "hosts", hosts, n_hosts, 1, MSG_MAX_EXPERTS *MSG_MAX_EXPERT_ACTORS,
          1),
    S_BIN(msg_expert_table_t, "cap", cap, n_cap, 1, MSG_MAX_EXPERTS, 1000000),
    S_BIN(msg_expert_table_t, "load", load, n_load, 1, MSG_MAX_EXPERT_ACTORS, INT32_MAX),
    S_BIN(msg_expert_table_t, "alive", alive, n_alive, 1, MSG_MAX_EXPERT_ACTORS, 1),
    {.key = "cap_min",
     .kind = MSG_F_INT,
     .off = offsetof(msg_expert_table_t, cap_min),
     .lo = 0,
     .hi = MSG_MAX_EXPERT_ROWS},
};
const msg_schema_t msg_schema_expert_table = {"expert_table",
                                              sizeof(msg_expert_table_t),
                                              s_expert_table_fields,
                                              MSG_NFIELDS(s_expert_table_fields),
                                              NULL,
                                              s_expert_table_check};

static const msg_field_t s_expert_down_fields[] = {
    {.key = "expert",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_expert_down_t, expert),
     .lo = 0,
     .hi = MSG_MAX_EXPERT_ACTORS - 1},
};
const msg_schema_t msg_schema_expert_down = {"expert_down",
                                             sizeof(msg_expert_down_t),
                                             s_expert_down_fields,
                                             MSG_NFIELDS(s_expert_down_fields),
                                             NULL,
                                             NULL};

/* msg_spec.c - the speculative-decoding family as schemas. */
#include "msg_spec.h"
#include "msg_codec.h"

#include <stddef.h>

#define REQ MSG_FF_REQUIRED
#define S_RID(T)                                                                                   \
    { .key = "rid", .kind = MSG_F_U64, .flags = REQ, .off = offsetof(T, rid) }
#define S_WORKER(T)                                                                                \
    {                                                                                              \
        .key = "worker", .kind = MSG_F_INT, .flags = REQ, .off = offsetof(T, worker), .lo = 0,     \
        .hi = 65535                                                                                \
    }

static const msg_field_t s_draft_request_fields[] = {
    S_RID(msg_draft_request_t),
    S_WORKER(msg_draft_request_t),
    {.key = "seq", .kind = MSG_F_U64, .flags = REQ, .off = offsetof(msg_draft_request_t, seq)},
    {.key = "tokens",
     .kind = MSG_F_BIN_I32,
     .flags = REQ,
     .off = offsetof(msg_draft_request_t, tokens),
     .off2 = offsetof(msg_draft_request_t, n_tokens),
     .min = 1,
     .max = MSG_MAX_SEQ_TOKENS,
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "k",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_draft_request_t, k),
     .lo = 1,
     .hi = MSG_MAX_DRAFT},
};
const msg_schema_t msg_schema_draft_request = {"draft_request",
                                               sizeof(msg_draft_request_t),
                                               s_draft_request_fields,
                                               MSG_NFIELDS(s_draft_request_fields),
                                               NULL,
                                               NULL};

static const msg_field_t s_draft_reply_fields[] = {
    S_RID(msg_draft_reply_t),
    {.key = "seq", .kind = MSG_F_U64, .flags = REQ, .off = offsetof(msg_draft_reply_t, seq)},
    {.key = "base",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_draft_reply_t, base),
     .lo = 0,
     .hi = MSG_MAX_SEQ_TOKENS},
    {.key = "tokens",
     .kind = MSG_F_BIN_I32,
     .flags = REQ,
     .off = offsetof(msg_draft_reply_t, tokens),
     .off2 = offsetof(msg_draft_reply_t, n_tokens),
     .min = 0,
     .max = MSG_MAX_DRAFT,
     .lo = 0,
     .hi = INT32_MAX},
};
const msg_schema_t msg_schema_draft_reply = {"draft_reply",
                                             sizeof(msg_draft_reply_t),
                                             s_draft_reply_fields,
                                             MSG_NFIELDS(s_draft_reply_fields),
                                             NULL,
                                             NULL};

static const msg_field_t s_draft_end_fields[] = {S_RID(msg_draft_end_t), S_WORKER(msg_draft_end_t)};
const msg_schema_t msg_schema_draft_end = {
    "draft_end", sizeof(msg_draft_end_t), s_draft_end_fields, MSG_NFIELDS(s_draft_end_fields), NULL,
    NULL};

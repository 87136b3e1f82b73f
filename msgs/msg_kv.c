/* msg_kv.c - the KV store family as schemas. */
#include "msg_kv.h"
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
#define S_TOKENS(T, lo_n, hi_n)                                                                    \
    {                                                                                              \
        .key = "tokens", .kind = MSG_F_BIN_I32, .flags = REQ, .off = offsetof(T, tokens),          \
        .off2 = offsetof(T, n_tokens), .min = lo_n, .max = hi_n, .lo = 0, .hi = INT32_MAX          \
    }

static const msg_field_t s_kv_hint_fields[] = {
    S_RID(msg_kv_hint_t),
    S_WORKER(msg_kv_hint_t),
    S_TOKENS(msg_kv_hint_t, 1, MSG_MAX_SEQ_TOKENS),
    {.key = "session",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_kv_hint_t, session),
     .max = MSG_MAX_SESSION_BYTES},
};
const msg_schema_t msg_schema_kv_hint = {
    "kv_hint", sizeof(msg_kv_hint_t), s_kv_hint_fields, MSG_NFIELDS(s_kv_hint_fields), NULL, NULL};

static const msg_field_t s_kv_promote_fields[] = {
    S_RID(msg_kv_promote_t),
    S_WORKER(msg_kv_promote_t),
    S_TOKENS(msg_kv_promote_t, 1, MSG_MAX_SEQ_TOKENS),
    {.key = "warm", .kind = MSG_F_BOOL, .off = offsetof(msg_kv_promote_t, warm)},
};
const msg_schema_t msg_schema_kv_promote = {"kv_promote",
                                            sizeof(msg_kv_promote_t),
                                            s_kv_promote_fields,
                                            MSG_NFIELDS(s_kv_promote_fields),
                                            NULL,
                                            NULL};

static const msg_field_t s_kv_block_fields[] = {
    S_RID(msg_kv_block_t),
    S_WORKER(msg_kv_block_t),
    {.key = "hash", .kind = MSG_F_U64, .flags = REQ, .off = offsetof(msg_kv_block_t, hash)},
    {.key = "parent", .kind = MSG_F_U64, .flags = REQ, .off = offsetof(msg_kv_block_t, parent)},
    S_TOKENS(msg_kv_block_t, 1, MSG_MAX_BLOCK_TOKENS),
    {.key = "fmt",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_kv_block_t, fmt),
     .lo = 0,
     .hi = 15},
    {.key = "pin", .kind = MSG_F_INT, .off = offsetof(msg_kv_block_t, pin), .lo = 0, .hi = 255},
};
const msg_schema_t msg_schema_kv_block = {
    "kv_block", sizeof(msg_kv_block_t), s_kv_block_fields, MSG_NFIELDS(s_kv_block_fields), NULL,
    NULL};

static const msg_field_t s_kv_promote_done_fields[] = {
    S_RID(msg_kv_promote_done_t),
    {.key = "sent",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_kv_promote_done_t, sent),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "missing",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_kv_promote_done_t, missing),
     .lo = 0,
     .hi = INT32_MAX},
};
const msg_schema_t msg_schema_kv_promote_done = {"kv_promote_done",
                                                 sizeof(msg_kv_promote_done_t),
                                                 s_kv_promote_done_fields,
                                                 MSG_NFIELDS(s_kv_promote_done_fields),
                                                 NULL,
                                                 NULL};

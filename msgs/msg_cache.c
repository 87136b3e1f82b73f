/* msg_cache.c - the answer cache family as schemas (msg_cache.h). */
#include "msg_cache.h"
#include "msg_codec.h"

#include <errno.h>
#include <stddef.h>

#define REQ MSG_FF_REQUIRED
#define OPT MSG_FF_OMIT_EMPTY

const char *const msg_cache_kind_names[4] = {"miss", "exact", "semantic", "kb"};
const char *const msg_cache_mode_names[4] = {"default", "off", "exact", "semantic"};

/* a fixed string field of struct T, 1..max bytes, required or optional */
#define S_STR(T, k, m, fl, mx)                                                                     \
    { .key = k, .kind = MSG_F_STR_FIX, .flags = fl, .off = offsetof(T, m), .min = 1, .max = mx }
#define S_TEXT(T, k, m, fl, mx)                                                                    \
    {                                                                                              \
        .key = k, .kind = MSG_F_STR_HEAP, .flags = fl, .off = offsetof(T, m),                      \
        .off2 = offsetof(T, m##_len), .min = 1, .max = mx                                          \
    }
#define S_U64(T, k, m, fl)                                                                         \
    { .key = k, .kind = MSG_F_U64, .flags = fl, .off = offsetof(T, m) }
#define S_COUNT(T, k, m)                                                                           \
    { .key = k, .kind = MSG_F_INT, .off = offsetof(T, m), .lo = 0, .hi = INT32_MAX }
/* how a kept answer ended: eos, length or stop (0: eos) */
#define S_FINISH(T)                                                                                \
    {                                                                                              \
        .key = "finish", .kind = MSG_F_INT, .flags = OPT, .off = offsetof(T, finish), .lo = 0,     \
        .hi = MSG_FINISH_STOP                                                                      \
    }
#define S_SCHEMA(name, T, fields, check)                                                           \
    const msg_schema_t msg_schema_##name = {#name, sizeof(T), fields, MSG_NFIELDS(fields),         \
                                            NULL,  check}

/* ---- 14 cache_put */

static const msg_field_t s_put_fields[] = {
    S_STR(msg_cache_put_t, "id", id, REQ, MSG_MAX_ID_BYTES),
    S_TEXT(msg_cache_put_t, "question", question, REQ, MSG_MAX_PROMPT_BYTES),
    S_TEXT(msg_cache_put_t, "answer", answer, REQ, MSG_MAX_TEXT_BYTES),
    S_STR(msg_cache_put_t, "name", name, OPT, MSG_MAX_ID_BYTES),
    S_STR(msg_cache_put_t, "tags", tags, OPT, MSG_MAX_CACHE_TAGS_BYTES),
    {.key = "ttl_s",
     .kind = MSG_F_I64,
     .flags = OPT,
     .off = offsetof(msg_cache_put_t, ttl_s),
     .lo = 0,
     .hi = MSG_MAX_CACHE_TTL_S},
};
S_SCHEMA(cache_put, msg_cache_put_t, s_put_fields, NULL);

/* ---- 15 cache_invalidate */

static const msg_field_t s_invalidate_fields[] = {
    S_STR(msg_cache_invalidate_t, "id", id, REQ, MSG_MAX_ID_BYTES),
    S_STR(msg_cache_invalidate_t, "prefix", prefix, OPT, MSG_MAX_ID_BYTES),
    S_STR(msg_cache_invalidate_t, "tag", tag, OPT, MSG_MAX_CACHE_TAGS_BYTES),
    {.key = "all", .kind = MSG_F_BOOL, .flags = OPT, .off = offsetof(msg_cache_invalidate_t, all)},
};
static int s_invalidate_check(const void *p, msg_err_t *err) {
    const msg_cache_invalidate_t *m = p;
    if (!m->prefix[0] && !m->tag[0] && !m->all)
        return msg_err_set(err, -EPROTO, MSG_E_MISSING, "prefix",
                           "missing required field 'prefix' (or 'tag', or 'all': true): which "
                           "entries to drop");
    return 0;
}
S_SCHEMA(cache_invalidate, msg_cache_invalidate_t, s_invalidate_fields, s_invalidate_check);

/* ---- 16 cache_reply */

static const msg_field_t s_reply_fields[] = {
    S_STR(msg_cache_reply_t, "id", id, REQ, MSG_MAX_ID_BYTES),
    S_COUNT(msg_cache_reply_t, "count", count),
    S_COUNT(msg_cache_reply_t, "entries", entries),
};
S_SCHEMA(cache_reply, msg_cache_reply_t, s_reply_fields, NULL);

/* ---- 56 cache_lookup */

static const msg_field_t s_lookup_fields[] = {
    S_U64(msg_cache_lookup_t, "rid", rid, REQ),
    S_U64(msg_cache_lookup_t, "context", context, REQ),
    S_U64(msg_cache_lookup_t, "exact", exact, REQ),
    S_U64(msg_cache_lookup_t, "kb_exact", kb_exact, OPT),
    S_TEXT(msg_cache_lookup_t, "text", text, REQ, MSG_MAX_PROMPT_BYTES),
    {.key = "delta",
     .kind = MSG_F_DOUBLE,
     .flags = OPT,
     .off = offsetof(msg_cache_lookup_t, delta),
     .flo = 0,
     .fhi = 0.5},
    {.key = "mode",
     .kind = MSG_F_ENUM,
     .flags = OPT,
     .off = offsetof(msg_cache_lookup_t, mode),
     .names = msg_cache_mode_names,
     .n_names = 4},
};
S_SCHEMA(cache_lookup, msg_cache_lookup_t, s_lookup_fields, NULL);

/* ---- 57 cache_answer */

static const msg_field_t s_answer_fields[] = {
    S_U64(msg_cache_answer_t, "rid", rid, REQ),
    {.key = "kind",
     .kind = MSG_F_ENUM,
     .flags = REQ,
     .off = offsetof(msg_cache_answer_t, kind),
     .names = msg_cache_kind_names,
     .n_names = 4},
    S_TEXT(msg_cache_answer_t, "answer", answer, OPT, MSG_MAX_TEXT_BYTES),
    S_STR(msg_cache_answer_t, "name", name, OPT, MSG_MAX_ID_BYTES),
    {.key = "similarity",
     .kind = MSG_F_FLOAT,
     .off = offsetof(msg_cache_answer_t, similarity),
     .flo = -2,
     .fhi = 2},
    {.key = "threshold",
     .kind = MSG_F_DOUBLE,
     .off = offsetof(msg_cache_answer_t, threshold),
     .flo = -2,
     .fhi = 3},
    {.key = "verify",
     .kind = MSG_F_BOOL,
     .flags = OPT,
     .off = offsetof(msg_cache_answer_t, verify)},
    {.key = "store", .kind = MSG_F_BOOL, .flags = OPT, .off = offsetof(msg_cache_answer_t, store)},
    S_FINISH(msg_cache_answer_t),
    S_U64(msg_cache_answer_t, "nearest_hash", nearest_hash, OPT),
    {.key = "lookup_us",
     .kind = MSG_F_I64,
     .off = offsetof(msg_cache_answer_t, lookup_us),
     .lo = 0,
     .hi = INT64_MAX},
};
static int s_answer_check(const void *p, msg_err_t *err) {
    const msg_cache_answer_t *m = p;
    if (m->kind != MSG_CACHE_MISS && !m->answer)
        return msg_err_set(err, -EPROTO, MSG_E_MISSING, "answer",
                           "missing required field 'answer' (a hit carries it)");
    return 0;
}
S_SCHEMA(cache_answer, msg_cache_answer_t, s_answer_fields, s_answer_check);

/* ---- 58 cache_store */

static const msg_field_t s_store_fields[] = {
    S_STR(msg_cache_store_t, "client", client, OPT, MSG_MAX_CLIENT_HEX),
    S_STR(msg_cache_store_t, "id", id, OPT, MSG_MAX_ID_BYTES),
    S_U64(msg_cache_store_t, "rid", rid, OPT),
    S_U64(msg_cache_store_t, "context", context, OPT),
    S_U64(msg_cache_store_t, "exact", exact, REQ),
    {.key = "kb", .kind = MSG_F_BOOL, .flags = OPT, .off = offsetof(msg_cache_store_t, kb)},
    S_TEXT(msg_cache_store_t, "text", text, REQ, MSG_MAX_PROMPT_BYTES),
    S_TEXT(msg_cache_store_t, "answer", answer, REQ, MSG_MAX_TEXT_BYTES),
    S_STR(msg_cache_store_t, "name", name, REQ, MSG_MAX_ID_BYTES),
    S_STR(msg_cache_store_t, "tags", tags, OPT, MSG_MAX_CACHE_TAGS_BYTES),
    {.key = "ttl_s",
     .kind = MSG_F_I64,
     .off = offsetof(msg_cache_store_t, ttl_s),
     .lo = -1,
     .hi = MSG_MAX_CACHE_TTL_S},
    S_FINISH(msg_cache_store_t),
    {.key = "mode",
     .kind = MSG_F_ENUM,
     .flags = OPT,
     .off = offsetof(msg_cache_store_t, mode),
     .names = msg_cache_mode_names,
     .n_names = 4},
    S_U64(msg_cache_store_t, "verify_hash", verify_hash, OPT),
    {.key = "verify_sim",
     .kind = MSG_F_FLOAT,
     .flags = OPT,
     .off = offsetof(msg_cache_store_t, verify_sim),
     .flo = -2,
     .fhi = 2},
};
S_SCHEMA(cache_store, msg_cache_store_t, s_store_fields, NULL);

/* ---- 59 cache_drop */

static const msg_field_t s_drop_fields[] = {
    S_STR(msg_cache_drop_t, "client", client, OPT, MSG_MAX_CLIENT_HEX),
    S_STR(msg_cache_drop_t, "id", id, OPT, MSG_MAX_ID_BYTES),
    S_STR(msg_cache_drop_t, "prefix", prefix, OPT, MSG_MAX_ID_BYTES),
    S_STR(msg_cache_drop_t, "tag", tag, OPT, MSG_MAX_CACHE_TAGS_BYTES),
    {.key = "all", .kind = MSG_F_BOOL, .flags = OPT, .off = offsetof(msg_cache_drop_t, all)},
};
S_SCHEMA(cache_drop, msg_cache_drop_t, s_drop_fields, NULL);

/* ---- 60 cache_done */

static const msg_field_t s_done_fields[] = {
    S_STR(msg_cache_done_t, "client", client, OPT, MSG_MAX_CLIENT_HEX),
    S_STR(msg_cache_done_t, "id", id, OPT, MSG_MAX_ID_BYTES),
    S_COUNT(msg_cache_done_t, "count", count),
    S_COUNT(msg_cache_done_t, "entries", entries),
    {.key = "code",
     .kind = MSG_F_INT,
     .flags = OPT,
     .off = offsetof(msg_cache_done_t, code),
     .lo = 0,
     .hi = 5},
    S_STR(msg_cache_done_t, "message", message, OPT, MSG_MAX_ERRMSG_BYTES),
};
S_SCHEMA(cache_done, msg_cache_done_t, s_done_fields, NULL);

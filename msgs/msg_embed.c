/* msg_embed.c - the embeddings family as schemas (msg_embed.h). */
#include "msg_embed.h"
#include "msg_codec.h"

#include <errno.h>
#include <stddef.h>

#define REQ MSG_FF_REQUIRED

/* prompt and tokens of embed and embed_request (struct T) */
#define S_INPUT_FIELDS(T)                                                                          \
    {.key = "prompt",                                                                              \
     .kind = MSG_F_STR_HEAP,                                                                       \
     .flags = MSG_FF_OMIT_EMPTY,                                                                   \
     .off = offsetof(T, prompt),                                                                   \
     .off2 = offsetof(T, prompt_len),                                                              \
     .min = 1,                                                                                     \
     .max = MSG_MAX_PROMPT_BYTES},                                                                 \
    {                                                                                              \
        .key = "tokens", .kind = MSG_F_BIN_I32, .off = offsetof(T, tokens),                        \
        .off2 = offsetof(T, n_tokens), .max = MSG_MAX_EMBED_TOKENS, .lo = 0, .hi = INT32_MAX       \
    }

#define S_VECTOR_FIELDS(T)                                                                         \
    {.key = "embedding",                                                                           \
     .kind = MSG_F_BIN_F32,                                                                        \
     .flags = REQ,                                                                                 \
     .off = offsetof(T, embedding),                                                                \
     .off2 = offsetof(T, dim),                                                                     \
     .min = 1,                                                                                     \
     .max = MSG_MAX_EMBED_DIM},                                                                    \
    {                                                                                              \
        .key = "prompt_tokens", .kind = MSG_F_INT, .flags = REQ,                                   \
        .off = offsetof(T, prompt_tokens), .lo = 0, .hi = MSG_MAX_SEQ_TOKENS                       \
    }

/* exactly one input: text, or token ids (an empty bin counts as none) */
static int s_check_input(const char *prompt, int n_tokens, msg_err_t *err) {
    if (!prompt && !n_tokens)
        return msg_err_set(err, -EPROTO, MSG_E_MISSING, "prompt",
                           "missing required field 'prompt' (or 'tokens')");
    if (prompt && n_tokens)
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "tokens",
                           "give either 'prompt' or 'tokens', not both");
    return 0;
}

/* ---- 12 embed */

static const msg_field_t s_embed_fields[] = {
    {.key = "id",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_embed_t, id),
     .min = 1,
     .max = MSG_MAX_ID_BYTES},
    S_INPUT_FIELDS(msg_embed_t),
};
static int s_embed_check(const void *p, msg_err_t *err) {
    const msg_embed_t *m = p;
    return s_check_input(m->prompt, m->n_tokens, err);
}
const msg_schema_t msg_schema_embed = {
    "embed", sizeof(msg_embed_t), s_embed_fields, MSG_NFIELDS(s_embed_fields), NULL, s_embed_check};

/* ---- 13 embedding */

static const msg_field_t s_embedding_fields[] = {
    {.key = "id",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_embedding_t, id),
     .min = 1,
     .max = MSG_MAX_ID_BYTES},
    S_VECTOR_FIELDS(msg_embedding_t),
};
const msg_schema_t msg_schema_embedding = {
    "embedding", sizeof(msg_embedding_t), s_embedding_fields, MSG_NFIELDS(s_embedding_fields), NULL,
    NULL};

/* ---- 49 embed_request */

static const msg_field_t s_embed_request_fields[] = {
    {.key = "rid", .kind = MSG_F_U64, .flags = REQ, .off = offsetof(msg_embed_request_t, rid)},
    S_INPUT_FIELDS(msg_embed_request_t),
    {.key = "t_arrival_us",
     .kind = MSG_F_U64,
     .flags = REQ,
     .off = offsetof(msg_embed_request_t, t_arrival_us)},
};
static int s_embed_request_check(const void *p, msg_err_t *err) {
    const msg_embed_request_t *m = p;
    return s_check_input(m->prompt, m->n_tokens, err);
}
const msg_schema_t msg_schema_embed_request = {"embed_request",
                                               sizeof(msg_embed_request_t),
                                               s_embed_request_fields,
                                               MSG_NFIELDS(s_embed_request_fields),
                                               NULL,
                                               s_embed_request_check};

/* ---- 50 work_embedding */

static const msg_field_t s_work_embedding_fields[] = {
    {.key = "rid", .kind = MSG_F_U64, .flags = REQ, .off = offsetof(msg_work_embedding_t, rid)},
    {.key = "worker",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_work_embedding_t, worker),
     .lo = 0,
     .hi = 65535},
    S_VECTOR_FIELDS(msg_work_embedding_t),
};
const msg_schema_t msg_schema_work_embedding = {"work_embedding",
                                                sizeof(msg_work_embedding_t),
                                                s_work_embedding_fields,
                                                MSG_NFIELDS(s_work_embedding_fields),
                                                NULL,
                                                NULL};

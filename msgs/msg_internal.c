/* msg_internal.c - the internal family (actor <-> actor) as schemas: the request as
 * it travels frontend -> tokenizer -> router -> worker and the events coming back.
 */
#include "msg_internal.h"
#include "msg_codec.h"

#include <errno.h>
#include <stddef.h>

#define REQ MSG_FF_REQUIRED
#define S_RID(T)                                                                                   \
    { .key = "rid", .kind = MSG_F_U64, .flags = REQ, .off = offsetof(T, rid) }

/* ---- 20 tok_request: the generate keys inline, plus rid and t_arrival_us */

static const msg_field_t s_tok_request_fields[] = {
    S_RID(msg_tok_request_t),
    {.key = "",
     .kind = MSG_F_INLINE,
     .off = offsetof(msg_tok_request_t, gen),
     .sub = &msg_schema_generate},
    {.key = "t_arrival_us",
     .kind = MSG_F_U64,
     .flags = REQ,
     .off = offsetof(msg_tok_request_t, t_arrival_us)},
    {.key = "gen_tokens",
     .kind = MSG_F_BIN_I32,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_tok_request_t, gen_tokens),
     .off2 = offsetof(msg_tok_request_t, n_gen),
     .max = MSG_MAX_TOKENS,
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "trace_t_us",
     .kind = MSG_F_I64,
     .off = offsetof(msg_tok_request_t, trace_t_us),
     .lo = 0,
     .hi = INT64_MAX},
};
const msg_schema_t msg_schema_tok_request = {"tok_request",
                                             sizeof(msg_tok_request_t),
                                             s_tok_request_fields,
                                             MSG_NFIELDS(s_tok_request_fields),
                                             NULL,
                                             NULL};

/* ---- 21 work_request */

static void s_work_request_init(void *p) {
    msg_work_request_t *m = p;
    m->max_tokens = MSG_DEFAULT_MAX_TOKENS;
    m->sampling = msg_sampling_defaults();
    m->stream = true;
}

static const msg_field_t s_work_request_fields[] = {
    S_RID(msg_work_request_t),
    {.key = "tokens",
     .kind = MSG_F_BIN_I32,
     .flags = REQ,
     .off = offsetof(msg_work_request_t, tokens),
     .off2 = offsetof(msg_work_request_t, n_tokens),
     .min = 1,
     .max = MSG_MAX_SEQ_TOKENS,
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "n_gen",
     .kind = MSG_F_INT,
     .off = offsetof(msg_work_request_t, n_gen),
     .lo = 0,
     .hi = MSG_MAX_TOKENS},
    MSG_SAMPLING_FIELDS(msg_work_request_t),
    {.key = "seed", .kind = MSG_F_U64, .off = offsetof(msg_work_request_t, sampling.seed)},
    {.key = "t_arrival_us",
     .kind = MSG_F_U64,
     .flags = REQ,
     .off = offsetof(msg_work_request_t, t_arrival_us)},
    {.key = "session",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_work_request_t, session),
     .max = MSG_MAX_SESSION_BYTES},
    {.key = "pin_tokens",
     .kind = MSG_F_INT,
     .off = offsetof(msg_work_request_t, pin_tokens),
     .lo = 0,
     .hi = MSG_MAX_SEQ_TOKENS},
    {.key = "trace", .kind = MSG_F_BOOL, .off = offsetof(msg_work_request_t, trace)},
    {.key = "fit_context",
     .kind = MSG_F_BOOL,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_work_request_t, fit_context)},
    {.key = "priority",
     .kind = MSG_F_INT,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_work_request_t, priority),
     .lo = -MSG_PRIORITY_MAX,
     .hi = MSG_PRIORITY_MAX},
    {.key = "kv_compress",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_work_request_t, kv_compress),
     .min = 1,
     .max = MSG_MAX_KV_COMPRESS_BYTES},
    {.key = "logprobs", .kind = MSG_F_BOOL, .off = offsetof(msg_work_request_t, logprobs)},
    {.key = "top_logprobs",
     .kind = MSG_F_INT,
     .off = offsetof(msg_work_request_t, top_logprobs),
     .lo = 0,
     .hi = MSG_MAX_TOP_LOGPROBS},
    {.key = "steps",
     .kind = MSG_F_ARRAY,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_work_request_t, steps),
     .off2 = offsetof(msg_work_request_t, n_steps),
     .max = MSG_MAX_TRACE_STEPS,
     .sub = &msg_schema_trace_step},
    {.key = "grammar",
     .kind = MSG_F_STR_HEAP,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_work_request_t, grammar),
     .off2 = offsetof(msg_work_request_t, grammar_len),
     .min = 1,
     .max = MSG_MAX_GRAMMAR_BYTES},
    {.key = "embed", .kind = MSG_F_BOOL, .off = offsetof(msg_work_request_t, embed)},
};
static int s_work_request_check(const void *p, msg_err_t *err) {
    const msg_work_request_t *m = p;
    if (m->n_gen >= m->n_tokens || m->n_gen > m->max_tokens)
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "n_gen",
                           "field 'n_gen': %d carried tokens of %d (max_tokens %d)", m->n_gen,
                           m->n_tokens, m->max_tokens);
    return msg_logit_bias_check(m->logit_bias, m->n_logit_bias, err);
}

const msg_schema_t msg_schema_work_request = {
    "work_request",        sizeof(msg_work_request_t),
    s_work_request_fields, MSG_NFIELDS(s_work_request_fields),
    s_work_request_init,   s_work_request_check};

/* ---- 22 work_event, 23 text_event */

#define S_US(k)                                                                                    \
    { .key = #k, .kind = MSG_F_U64, .flags = REQ, .off = offsetof(msg_timings_us_t, k) }
static const msg_field_t s_timings_us_fields[] = {S_US(queued_us), S_US(prefill_us),
                                                  S_US(decode_us), S_US(ttft_us)};
static const msg_schema_t s_timings_us_schema = {
    "",  sizeof(msg_timings_us_t), s_timings_us_fields, MSG_NFIELDS(s_timings_us_fields), NULL,
    NULL};

/* an event carries a token (index >= 0, token >= 0) or, only when finishing, none (-1, -1) */
static int s_event_check(int index, int32_t token, int finish, msg_err_t *err) {
    if ((index < 0) != (token < 0))
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "index",
                           "fields 'index' and 'token' must both be -1 or both be >= 0");
    if (index < 0 && finish == MSG_FINISH_NONE)
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "index",
                           "an event without a token (index -1) must finish");
    return 0;
}

static int s_work_event_check(const void *p, msg_err_t *err) {
    const msg_work_event_t *m = p;
    return s_event_check(m->index, m->token, m->finish, err);
}

static int s_text_event_check(const void *p, msg_err_t *err) {
    const msg_text_event_t *m = p;
    return s_event_check(m->index, m->token, m->finish, err);
}

#define S_EVENT_FIELDS(T)                                                                          \
    S_RID(T),                                                                                      \
        {.key = "index",                                                                           \
         .kind = MSG_F_INT,                                                                        \
         .flags = REQ,                                                                             \
         .off = offsetof(T, index),                                                                \
         .lo = -1,                                                                                 \
         .hi = INT32_MAX},                                                                         \
        {.key = "token",                                                                           \
         .kind = MSG_F_I32,                                                                        \
         .flags = REQ,                                                                             \
         .off = offsetof(T, token),                                                                \
         .lo = -1,                                                                                 \
         .hi = INT32_MAX},                                                                         \
        {.key = "finish",                                                                          \
         .kind = MSG_F_INT,                                                                        \
         .flags = REQ,                                                                             \
         .off = offsetof(T, finish),                                                               \
         .lo = 0,                                                                                  \
         .hi = MSG_FINISH_CANCELLED},                                                              \
        {.key = "prompt_tokens",                                                                   \
         .kind = MSG_F_INT,                                                                        \
         .off = offsetof(T, prompt_tokens),                                                        \
         .lo = 0,                                                                                  \
         .hi = INT32_MAX},                                                                         \
    {                                                                                              \
        .key = "timings", .kind = MSG_F_STRUCT, .off = offsetof(T, timings),                       \
        .sub = &s_timings_us_schema                                                                \
    }

static const msg_field_t s_work_event_fields[] = {S_EVENT_FIELDS(msg_work_event_t)};
const msg_schema_t msg_schema_work_event = {
    "work_event", sizeof(msg_work_event_t), s_work_event_fields, MSG_NFIELDS(s_work_event_fields),
    NULL,         s_work_event_check};

static const msg_field_t s_text_event_fields[] = {
    S_EVENT_FIELDS(msg_text_event_t),
    {.key = "worker",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_text_event_t, worker),
     .lo = 0,
     .hi = 65535},
    {.key = "count",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_text_event_t, count),
     .lo = 0,
     .hi = MSG_MAX_TOKENS},
    {.key = "text",
     .kind = MSG_F_STR_HEAP,
     .flags = REQ,
     .off = offsetof(msg_text_event_t, text),
     .off2 = offsetof(msg_text_event_t, text_len),
     .max = MSG_MAX_TEXT_BYTES},
    {.key = "cached_tokens",
     .kind = MSG_F_INT,
     .off = offsetof(msg_text_event_t, cached_tokens),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "draft_proposed",
     .kind = MSG_F_INT,
     .off = offsetof(msg_text_event_t, draft_proposed),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "draft_accepted",
     .kind = MSG_F_INT,
     .off = offsetof(msg_text_event_t, draft_accepted),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "logprob",
     .kind = MSG_F_FLOAT,
     .flags = MSG_FF_HAS,
     .off = offsetof(msg_text_event_t, logprob),
     .off2 = offsetof(msg_text_event_t, has_logprob),
     .flo = -1e30,
     .fhi = 0},
    {.key = "top",
     .kind = MSG_F_ARRAY,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_text_event_t, top),
     .off2 = offsetof(msg_text_event_t, n_top),
     .max = MSG_MAX_TOP_LOGPROBS,
     .sub = &msg_schema_top},
    {.key = "piece",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_text_event_t, piece),
     .max = MSG_MAX_PIECE_BYTES},
    {.key = "steps",
     .kind = MSG_F_ARRAY,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_text_event_t, steps),
     .off2 = offsetof(msg_text_event_t, n_steps),
     .max = MSG_MAX_TRACE_STEPS,
     .sub = &msg_schema_trace_step},
};
const msg_schema_t msg_schema_text_event = {
    "text_event", sizeof(msg_text_event_t), s_text_event_fields, MSG_NFIELDS(s_text_event_fields),
    NULL,         s_text_event_check};

/* ---- 24 work_cancel */

static const msg_field_t s_work_cancel_fields[] = {S_RID(msg_work_cancel_t)};
const msg_schema_t msg_schema_work_cancel = {"work_cancel",
                                             sizeof(msg_work_cancel_t),
                                             s_work_cancel_fields,
                                             MSG_NFIELDS(s_work_cancel_fields),
                                             NULL,
                                             NULL};

/* ---- 25 load_report */

#define S_LOAD(k, K)                                                                               \
    {                                                                                              \
        .key = #k, .kind = K, .flags = REQ, .off = offsetof(msg_load_report_t, k), .lo = 0,        \
        .hi = (K == MSG_F_INT ? INT32_MAX : INT64_MAX)                                             \
    }
static const msg_field_t s_load_report_fields[] = {
    {.key = "worker",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_load_report_t, worker),
     .lo = 0,
     .hi = 65535},
    S_LOAD(queued_tokens, MSG_F_I64),
    S_LOAD(active_tokens, MSG_F_I64),
    S_LOAD(n_queued, MSG_F_INT),
    S_LOAD(n_active, MSG_F_INT),
    S_LOAD(kv_free_blocks, MSG_F_I64),
};
const msg_schema_t msg_schema_load_report = {"load_report",
                                             sizeof(msg_load_report_t),
                                             s_load_report_fields,
                                             MSG_NFIELDS(s_load_report_fields),
                                             NULL,
                                             NULL};

/* ---- 26 work_error */

static const msg_field_t s_work_error_fields[] = {
    S_RID(msg_work_error_t),
    {.key = "code",
     .kind = MSG_F_ENUM,
     .flags = REQ,
     .off = offsetof(msg_work_error_t, code),
     .names = msg_code_names,
     .n_names = 6},
    {.key = "message",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_work_error_t, message),
     .max = MSG_MAX_ERRMSG_BYTES},
};
const msg_schema_t msg_schema_work_error = {"work_error",
                                            sizeof(msg_work_error_t),
                                            s_work_error_fields,
                                            MSG_NFIELDS(s_work_error_fields),
                                            NULL,
                                            NULL};

/* ---- 27 worker_down */

static const msg_field_t s_worker_down_fields[] = {
    {.key = "worker",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_worker_down_t, worker),
     .lo = 0,
     .hi = 65535},
};
const msg_schema_t msg_schema_worker_down = {"worker_down",
                                             sizeof(msg_worker_down_t),
                                             s_worker_down_fields,
                                             MSG_NFIELDS(s_worker_down_fields),
                                             NULL,
                                             NULL};

/* ---- 35 work_status, 36 work_probe */

static const msg_field_t s_work_status_fields[] = {
    S_RID(msg_work_status_t),
    {.key = "worker",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_work_status_t, worker),
     .lo = 0,
     .hi = 65535},
    {.key = "held", .kind = MSG_F_BOOL, .flags = REQ, .off = offsetof(msg_work_status_t, held)},
};
const msg_schema_t msg_schema_work_status = {"work_status",
                                             sizeof(msg_work_status_t),
                                             s_work_status_fields,
                                             MSG_NFIELDS(s_work_status_fields),
                                             NULL,
                                             NULL};

static const msg_field_t s_work_probe_fields[] = {S_RID(msg_work_probe_t)};
const msg_schema_t msg_schema_work_probe = {"work_probe",
                                            sizeof(msg_work_probe_t),
                                            s_work_probe_fields,
                                            MSG_NFIELDS(s_work_probe_fields),
                                            NULL,
                                            NULL};

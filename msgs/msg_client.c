/* msg_client.c - the client protocol family as schemas: one field table per message
 * (key, kind, limits) from which msg_codec.c decodes, validates and encodes.  The
 * tables are the normative list of fields; docs/PROTOCOL.md describes the same.
 */
#include "msg_client.h"
#include "msg_codec.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define REQ MSG_FF_REQUIRED

/* ---- 1 generate */

static const msg_field_t s_chat_fields[] = {
    {.key = "role",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_chat_t, role),
     .min = 1,
     .max = MSG_MAX_ROLE_BYTES},
    {.key = "content",
     .kind = MSG_F_STR_HEAP,
     .flags = REQ,
     .off = offsetof(msg_chat_t, content),
     .off2 = offsetof(msg_chat_t, content_len),
     .max = MSG_MAX_PROMPT_BYTES},
};
static const msg_schema_t s_chat_schema = {
    "", sizeof(msg_chat_t), s_chat_fields, MSG_NFIELDS(s_chat_fields), NULL, NULL};

static const msg_field_t s_logit_bias_fields[] = {
    {.key = "token",
     .kind = MSG_F_I32,
     .flags = REQ,
     .off = offsetof(msg_logit_bias_t, token),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "bias",
     .kind = MSG_F_FLOAT,
     .flags = REQ,
     .off = offsetof(msg_logit_bias_t, bias),
     .flo = -100,
     .fhi = 100},
};
const msg_schema_t msg_schema_logit_bias = {
    "",  sizeof(msg_logit_bias_t), s_logit_bias_fields, MSG_NFIELDS(s_logit_bias_fields), NULL,
    NULL};

int msg_logit_bias_check(const msg_logit_bias_t *b, int n, msg_err_t *err) {
    for (int i = 1; i < n; i++)
        for (int j = 0; j < i; j++)
            if (b[i].token == b[j].token)
                return msg_err_set(err, -EPROTO, MSG_E_INVALID, "logit_bias",
                                   "field 'logit_bias': token %d appears twice", (int)b[i].token);
    return 0;
}

static void s_generate_init(void *p) {
    msg_generate_t *m = p;
    m->max_tokens = MSG_DEFAULT_MAX_TOKENS;
    m->sampling = msg_sampling_defaults();
    m->stream = true;
    m->parallel_tool_calls = true;
}

static int s_generate_check(const void *p, msg_err_t *err) {
    const msg_generate_t *m = p;
    if (m->prompt && m->n_messages > 0)
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "messages",
                           "give either 'prompt' or 'messages', not both");
    if (!m->prompt && m->n_messages <= 0)
        return msg_err_set(err, -EPROTO, MSG_E_MISSING, "prompt",
                           "missing required field 'prompt' (or 'messages')");
    size_t total = 0;
    for (int i = 0; i < m->n_messages; i++)
        total += m->messages[i].content_len;
    if (total > MSG_MAX_PROMPT_BYTES)
        return msg_err_set(err, -EPROTO, MSG_E_TOO_LONG, "messages",
                           "field 'messages': %zu content bytes in all, limit %u", total,
                           MSG_MAX_PROMPT_BYTES);
    if ((m->grammar != NULL) + (m->json_schema != NULL) + m->json_object > 1)
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "grammar",
                           "give at most one of 'grammar', 'json_schema' and 'json_object'");
    if (m->tools && !m->n_messages)
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "tools",
                           "'tools' needs 'messages' (the tools are described in a system turn)");
    if (m->tools && (m->grammar || m->json_schema || m->json_object))
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "tools",
                           "'tools' together with 'grammar', 'json_schema' or 'json_object' is "
                           "not supported");
    if (m->tool_choice[0] && !m->tools && strcmp(m->tool_choice, "none") &&
        strcmp(m->tool_choice, "auto"))
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "tool_choice",
                           "'tool_choice' '%s' needs 'tools'", m->tool_choice);
    return msg_logit_bias_check(m->logit_bias, m->n_logit_bias, err);
}

static const msg_field_t s_generate_fields[] = {
    {.key = "id",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_generate_t, id),
     .min = 1,
     .max = MSG_MAX_ID_BYTES},
    {.key = "prompt",
     .kind = MSG_F_STR_HEAP,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_generate_t, prompt),
     .off2 = offsetof(msg_generate_t, prompt_len),
     .min = 1,
     .max = MSG_MAX_PROMPT_BYTES},
    {.key = "messages",
     .kind = MSG_F_ARRAY,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_generate_t, messages),
     .off2 = offsetof(msg_generate_t, n_messages),
     .min = 1,
     .max = MSG_MAX_MESSAGES,
     .sub = &s_chat_schema},
    MSG_SAMPLING_FIELDS(msg_generate_t),
    {.key = "seed",
     .kind = MSG_F_U64,
     .flags = MSG_FF_HAS,
     .off = offsetof(msg_generate_t, sampling.seed),
     .off2 = offsetof(msg_generate_t, has_seed)},
    {.key = "session",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_generate_t, session),
     .min = 1,
     .max = MSG_MAX_SESSION_BYTES},
    {.key = "trace", .kind = MSG_F_BOOL, .off = offsetof(msg_generate_t, trace)},
    {.key = "fit_context",
     .kind = MSG_F_BOOL,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_generate_t, fit_context)},
    {.key = "priority",
     .kind = MSG_F_INT,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_generate_t, priority),
     .lo = -MSG_PRIORITY_MAX,
     .hi = MSG_PRIORITY_MAX},
    {.key = "kv_compress",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_generate_t, kv_compress),
     .min = 1,
     .max = MSG_MAX_KV_COMPRESS_BYTES},
    {.key = "logprobs", .kind = MSG_F_BOOL, .off = offsetof(msg_generate_t, logprobs)},
    {.key = "top_logprobs",
     .kind = MSG_F_INT,
     .off = offsetof(msg_generate_t, top_logprobs),
     .lo = 0,
     .hi = MSG_MAX_TOP_LOGPROBS},
    {.key = "grammar",
     .kind = MSG_F_STR_HEAP,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_generate_t, grammar),
     .off2 = offsetof(msg_generate_t, grammar_len),
     .min = 1,
     .max = MSG_MAX_GRAMMAR_BYTES},
    {.key = "json_schema",
     .kind = MSG_F_STR_HEAP,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_generate_t, json_schema),
     .off2 = offsetof(msg_generate_t, json_schema_len),
     .min = 1,
     .max = MSG_MAX_GRAMMAR_BYTES},
    {.key = "json_object", .kind = MSG_F_BOOL, .off = offsetof(msg_generate_t, json_object)},
    {.key = "tools",
     .kind = MSG_F_STR_HEAP,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_generate_t, tools),
     .off2 = offsetof(msg_generate_t, tools_len),
     .min = 1,
     .max = MSG_MAX_GRAMMAR_BYTES},
    {.key = "tool_choice",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_generate_t, tool_choice),
     .min = 1,
     .max = MSG_MAX_TOOL_NAME_BYTES},
    {.key = "parallel_tool_calls",
     .kind = MSG_F_BOOL,
     .off = offsetof(msg_generate_t, parallel_tool_calls)},
    {.key = "cache",
     .kind = MSG_F_ENUM,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_generate_t, cache),
     .names = msg_cache_mode_names,
     .n_names = 4},
    {.key = "cache_delta",
     .kind = MSG_F_DOUBLE,
     .flags = MSG_FF_OMIT_EMPTY | MSG_FF_LO_OPEN,
     .off = offsetof(msg_generate_t, cache_delta),
     .flo = 0,
     .fhi = 0.5},
    {.key = "cache_ttl_s",
     .kind = MSG_F_I64,
     .flags = MSG_FF_HAS,
     .off = offsetof(msg_generate_t, cache_ttl_s),
     .off2 = offsetof(msg_generate_t, has_cache_ttl),
     .lo = 0,
     .hi = MSG_MAX_CACHE_TTL_S},
    {.key = "cache_tags",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_generate_t, cache_tags),
     .min = 1,
     .max = MSG_MAX_CACHE_TAGS_BYTES},
    {.key = "cache_sampled",
     .kind = MSG_F_BOOL,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_generate_t, cache_sampled)},
};
const msg_schema_t msg_schema_generate = {"generate",        sizeof(msg_generate_t),
                                          s_generate_fields, MSG_NFIELDS(s_generate_fields),
                                          s_generate_init,   s_generate_check};

/* ---- 2 cancel, 3 stats, 4 health */

static const msg_field_t s_cancel_fields[] = {
    {.key = "id",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_cancel_t, id),
     .min = 1,
     .max = MSG_MAX_ID_BYTES},
};
const msg_schema_t msg_schema_cancel = {
    "cancel", sizeof(msg_cancel_t), s_cancel_fields, MSG_NFIELDS(s_cancel_fields), NULL, NULL};
const msg_schema_t msg_schema_stats = {"stats", sizeof(msg_stats_t), NULL, 0, NULL, NULL};
const msg_schema_t msg_schema_health = {"health", sizeof(msg_health_t), NULL, 0, NULL, NULL};

/* ---- shared nested maps: a trace step, an alternative token */

static const msg_field_t s_trace_step_fields[] = {
    {.key = "actor",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_trace_step_t, actor),
     .max = MSG_MAX_NAME_BYTES},
    {.key = "what",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_trace_step_t, what),
     .max = MSG_MAX_WHAT_BYTES},
    {.key = "why",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_trace_step_t, why),
     .max = MSG_MAX_WHY_BYTES},
    {.key = "t_us",
     .kind = MSG_F_I64,
     .flags = REQ,
     .off = offsetof(msg_trace_step_t, t_us),
     .lo = 0,
     .hi = INT64_MAX},
    {.key = "dur_us",
     .kind = MSG_F_I64,
     .flags = REQ,
     .off = offsetof(msg_trace_step_t, dur_us),
     .lo = 0,
     .hi = INT64_MAX},
};
const msg_schema_t msg_schema_trace_step = {
    "",  sizeof(msg_trace_step_t), s_trace_step_fields, MSG_NFIELDS(s_trace_step_fields), NULL,
    NULL};

static const msg_field_t s_top_fields[] = {
    {.key = "token",
     .kind = MSG_F_I32,
     .flags = REQ,
     .off = offsetof(msg_top_t, token),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "logprob",
     .kind = MSG_F_FLOAT,
     .flags = REQ,
     .off = offsetof(msg_top_t, logprob),
     .flo = -1e30,
     .fhi = 0},
    {.key = "text",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_top_t, text),
     .max = MSG_MAX_PIECE_BYTES},
};
const msg_schema_t msg_schema_top = {
    "", sizeof(msg_top_t), s_top_fields, MSG_NFIELDS(s_top_fields), NULL, NULL};

/* ---- 5 token */

static const msg_field_t s_token_fields[] = {
    {.key = "id",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_token_t, id),
     .min = 1,
     .max = MSG_MAX_ID_BYTES},
    {.key = "index",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_token_t, index),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "token",
     .kind = MSG_F_I32,
     .flags = REQ,
     .off = offsetof(msg_token_t, token),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "text",
     .kind = MSG_F_STR_HEAP,
     .flags = REQ,
     .off = offsetof(msg_token_t, text),
     .off2 = offsetof(msg_token_t, text_len),
     .max = MSG_MAX_TEXT_BYTES},
    {.key = "logprob",
     .kind = MSG_F_FLOAT,
     .flags = MSG_FF_HAS,
     .off = offsetof(msg_token_t, logprob),
     .off2 = offsetof(msg_token_t, has_logprob),
     .flo = -1e30,
     .fhi = 0},
    {.key = "top",
     .kind = MSG_F_ARRAY,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_token_t, top),
     .off2 = offsetof(msg_token_t, n_top),
     .max = MSG_MAX_TOP_LOGPROBS,
     .sub = &msg_schema_top},
    {.key = "piece",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_token_t, piece),
     .max = MSG_MAX_PIECE_BYTES},
};
const msg_schema_t msg_schema_token = {
    "token", sizeof(msg_token_t), s_token_fields, MSG_NFIELDS(s_token_fields), NULL, NULL};

/* ---- 6 done */

static const msg_field_t s_usage_fields[] = {
    {.key = "prompt_tokens",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_usage_t, prompt_tokens),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "completion_tokens",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_usage_t, completion_tokens),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "cached_tokens",
     .kind = MSG_F_INT,
     .off = offsetof(msg_usage_t, cached_tokens),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "draft_proposed",
     .kind = MSG_F_INT,
     .off = offsetof(msg_usage_t, draft_proposed),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "draft_accepted",
     .kind = MSG_F_INT,
     .off = offsetof(msg_usage_t, draft_accepted),
     .lo = 0,
     .hi = INT32_MAX},
};
static const msg_schema_t s_usage_schema = {
    "", sizeof(msg_usage_t), s_usage_fields, MSG_NFIELDS(s_usage_fields), NULL, NULL};

#define S_MS(k)                                                                                    \
    {                                                                                              \
        .key = #k, .kind = MSG_F_DOUBLE, .flags = REQ, .off = offsetof(msg_timings_ms_t, k),       \
        .flo = 0, .fhi = 1e12                                                                      \
    }
static const msg_field_t s_timings_ms_fields[] = {S_MS(queued_ms), S_MS(prefill_ms),
                                                  S_MS(decode_ms), S_MS(ttft_ms)};
static const msg_schema_t s_timings_ms_schema = {
    "",  sizeof(msg_timings_ms_t), s_timings_ms_fields, MSG_NFIELDS(s_timings_ms_fields), NULL,
    NULL};

static const msg_field_t s_logprob_fields[] = {
    {.key = "token",
     .kind = MSG_F_I32,
     .flags = REQ,
     .off = offsetof(msg_logprob_t, token),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "logprob",
     .kind = MSG_F_FLOAT,
     .flags = REQ,
     .off = offsetof(msg_logprob_t, logprob),
     .flo = -1e30,
     .fhi = 0},
    {.key = "top",
     .kind = MSG_F_ARRAY,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_logprob_t, top),
     .off2 = offsetof(msg_logprob_t, n_top),
     .max = MSG_MAX_TOP_LOGPROBS,
     .sub = &msg_schema_top},
    {.key = "piece",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_logprob_t, piece),
     .max = MSG_MAX_PIECE_BYTES},
};
static const msg_schema_t s_logprob_schema = {
    "", sizeof(msg_logprob_t), s_logprob_fields, MSG_NFIELDS(s_logprob_fields), NULL, NULL};

static const msg_field_t s_tool_call_fields[] = {
    {.key = "id",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_tool_call_t, id),
     .min = 1,
     .max = MSG_MAX_ID_BYTES + 31},
    {.key = "name",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_tool_call_t, name),
     .min = 1,
     .max = MSG_MAX_TOOL_NAME_BYTES},
    {.key = "arguments",
     .kind = MSG_F_STR_HEAP,
     .flags = REQ,
     .off = offsetof(msg_tool_call_t, arguments),
     .off2 = offsetof(msg_tool_call_t, arguments_len),
     .max = MSG_MAX_TEXT_BYTES},
};
static const msg_schema_t s_tool_call_schema = {
    "", sizeof(msg_tool_call_t), s_tool_call_fields, MSG_NFIELDS(s_tool_call_fields), NULL, NULL};

static void s_done_init(void *p) {
    ((msg_done_t *)p)->finish_reason = MSG_FINISH_EOS;
}

static const msg_field_t s_done_fields[] = {
    {.key = "id",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_done_t, id),
     .min = 1,
     .max = MSG_MAX_ID_BYTES},
    {.key = "finish_reason",
     .kind = MSG_F_ENUM,
     .flags = REQ,
     .off = offsetof(msg_done_t, finish_reason),
     .names = msg_finish_names,
     .n_names = 5},
    {.key = "text",
     .kind = MSG_F_STR_HEAP,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_done_t, text),
     .off2 = offsetof(msg_done_t, text_len),
     .max = MSG_MAX_TEXT_BYTES},
    {.key = "usage",
     .kind = MSG_F_STRUCT,
     .flags = REQ,
     .off = offsetof(msg_done_t, usage),
     .sub = &s_usage_schema},
    {.key = "timings",
     .kind = MSG_F_STRUCT,
     .flags = REQ,
     .off = offsetof(msg_done_t, timings),
     .sub = &s_timings_ms_schema},
    {.key = "logprobs",
     .kind = MSG_F_ARRAY,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_done_t, logprobs),
     .off2 = offsetof(msg_done_t, n_logprobs),
     .max = MSG_MAX_TOKENS,
     .sub = &s_logprob_schema},
    {.key = "tool_calls",
     .kind = MSG_F_ARRAY,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_done_t, tool_calls),
     .off2 = offsetof(msg_done_t, n_tool_calls),
     .max = MSG_MAX_TOOL_CALLS,
     .sub = &s_tool_call_schema},
    {.key = "cache",
     .kind = MSG_F_ENUM,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_done_t, cache),
     .names = msg_cache_kind_names,
     .n_names = 4},
    {.key = "cache_entry",
     .kind = MSG_F_STR_FIX,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_done_t, cache_entry),
     .min = 1,
     .max = MSG_MAX_ID_BYTES},
    {.key = "cache_similarity",
     .kind = MSG_F_FLOAT,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_done_t, cache_similarity),
     .flo = -2,
     .fhi = 2},
};
const msg_schema_t msg_schema_done = {
    "done", sizeof(msg_done_t), s_done_fields, MSG_NFIELDS(s_done_fields), s_done_init, NULL};

/* ---- 7 error */

static const msg_field_t s_error_fields[] = {
    {.key = "id",
     .kind = MSG_F_STR_FIX,
     .flags = REQ | MSG_FF_NIL_OK,
     .off = offsetof(msg_error_t, id),
     .max = MSG_MAX_ID_BYTES},
    {.key = "code",
     .kind = MSG_F_ENUM,
     .flags = REQ,
     .off = offsetof(msg_error_t, code),
     .names = msg_code_names,
     .n_names = 6},
    {.key = "message",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_error_t, message),
     .max = MSG_MAX_ERRMSG_BYTES},
};
const msg_schema_t msg_schema_error = {
    "error", sizeof(msg_error_t), s_error_fields, MSG_NFIELDS(s_error_fields), NULL, NULL};

/* ---- 8 stats_reply */

static const msg_field_t s_stats_reply_fields[] = {
    {.key = "counters",
     .kind = MSG_F_COUNTERS,
     .flags = REQ,
     .off = offsetof(msg_stats_reply_t, counters),
     .off2 = offsetof(msg_stats_reply_t, n_counters),
     .max = MSG_MAX_COUNTERS},
};
const msg_schema_t msg_schema_stats_reply = {"stats_reply",
                                             sizeof(msg_stats_reply_t),
                                             s_stats_reply_fields,
                                             MSG_NFIELDS(s_stats_reply_fields),
                                             NULL,
                                             NULL};

/* ---- 9 health_reply */

static const msg_field_t s_actor_fields[] = {
    {.key = "name",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_actor_health_t, name),
     .min = 1,
     .max = MSG_MAX_NAME_BYTES},
    {.key = "state",
     .kind = MSG_F_ENUM,
     .flags = REQ,
     .off = offsetof(msg_actor_health_t, state),
     .names = msg_state_names,
     .n_names = 4},
    {.key = "last_seen_ms",
     .kind = MSG_F_I64,
     .flags = REQ,
     .off = offsetof(msg_actor_health_t, last_seen_ms),
     .lo = 0,
     .hi = INT64_MAX},
};
static const msg_schema_t s_actor_schema = {
    "", sizeof(msg_actor_health_t), s_actor_fields, MSG_NFIELDS(s_actor_fields), NULL, NULL};

static const msg_field_t s_health_reply_fields[] = {
    {.key = "ok", .kind = MSG_F_BOOL, .flags = REQ, .off = offsetof(msg_health_reply_t, ok)},
    {.key = "actors",
     .kind = MSG_F_ARRAY,
     .flags = REQ,
     .off = offsetof(msg_health_reply_t, actors),
     .off2 = offsetof(msg_health_reply_t, n_actors),
     .max = MSG_MAX_ACTORS,
     .sub = &s_actor_schema},
    {.key = "started", .kind = MSG_F_BOOL, .off = offsetof(msg_health_reply_t, started)},
    {.key = "ready", .kind = MSG_F_BOOL, .off = offsetof(msg_health_reply_t, ready)},
    {.key = "progress", .kind = MSG_F_BOOL, .off = offsetof(msg_health_reply_t, progress)},
    {.key = "draining", .kind = MSG_F_BOOL, .off = offsetof(msg_health_reply_t, draining)},
    {.key = "in_flight",
     .kind = MSG_F_I64,
     .off = offsetof(msg_health_reply_t, in_flight),
     .lo = 0,
     .hi = INT64_MAX},
};
const msg_schema_t msg_schema_health_reply = {"health_reply",
                                              sizeof(msg_health_reply_t),
                                              s_health_reply_fields,
                                              MSG_NFIELDS(s_health_reply_fields),
                                              NULL,
                                              NULL};

/* ---- 10 resume: the generate keys inline, plus have and tokens */

static int s_resume_check(const void *p, msg_err_t *err) {
    const msg_resume_t *m = p; /* the generate's own rules ran already (INLINE) */
    if (m->have > m->gen.max_tokens)
        return msg_err_set(err, -EPROTO, MSG_E_RANGE, "have",
                           "field 'have': %d is more than max_tokens (%d)", m->have,
                           m->gen.max_tokens);
    if (m->have > 0 && !m->gen.stream)
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "have",
                           "field 'have': a request with stream false has no token events");
    if (m->n_tokens && m->n_tokens != m->have)
        return msg_err_set(err, -EPROTO, MSG_E_INVALID, "tokens",
                           "field 'tokens': %d ids for %d events ('have')", m->n_tokens, m->have);
    return 0;
}

static const msg_field_t s_resume_fields[] = {
    {.key = "",
     .kind = MSG_F_INLINE,
     .off = offsetof(msg_resume_t, gen),
     .sub = &msg_schema_generate},
    {.key = "have",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_resume_t, have),
     .lo = 0,
     .hi = MSG_MAX_TOKENS},
    {.key = "tokens",
     .kind = MSG_F_BIN_I32,
     .flags = MSG_FF_OMIT_EMPTY,
     .off = offsetof(msg_resume_t, tokens),
     .off2 = offsetof(msg_resume_t, n_tokens),
     .max = MSG_MAX_TOKENS,
     .lo = 0,
     .hi = INT32_MAX},
};
const msg_schema_t msg_schema_resume = {
    "resume", sizeof(msg_resume_t), s_resume_fields, MSG_NFIELDS(s_resume_fields),
    NULL,     s_resume_check};

/* ---- helpers */

int msg_set_str(char *dst, size_t cap, const char *s) {
    if (!dst || !cap)
        return -EINVAL;
    size_t n = s ? strlen(s) : 0;
    if (n >= cap) {
        dst[0] = 0;
        return -EINVAL;
    }
    memcpy(dst, s ? s : "", n + 1);
    return 0;
}

int msg_counters_add(msg_counter_t **counters, int *n, const char *name, int64_t value) {
    if (!name || !*name || strlen(name) > MSG_MAX_COUNTER_NAME_BYTES || *n >= MSG_MAX_COUNTERS)
        return -EINVAL;
    msg_counter_t *c = realloc(*counters, (size_t)(*n + 1) * sizeof *c);
    if (!c)
        return -ENOMEM;
    *counters = c;
    msg_set_str(c[*n].name, sizeof c[*n].name, name);
    c[*n].value = value;
    (*n)++;
    return 0;
}

/* ---- 11 trace */

static const msg_field_t s_source_fields[] = {
    {.key = "out_start",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_source_t, out_start),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "out_end",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_source_t, out_end),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "msg",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_source_t, msg),
     .lo = -1,
     .hi = MSG_MAX_MESSAGES},
    {.key = "in_start",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_source_t, in_start),
     .lo = 0,
     .hi = INT32_MAX},
    {.key = "in_end",
     .kind = MSG_F_INT,
     .flags = REQ,
     .off = offsetof(msg_source_t, in_end),
     .lo = 0,
     .hi = INT32_MAX},
};
static const msg_schema_t s_source_schema = {
    "", sizeof(msg_source_t), s_source_fields, MSG_NFIELDS(s_source_fields), NULL, NULL};

static const msg_field_t s_trace_fields[] = {
    {.key = "id",
     .kind = MSG_F_STR_FIX,
     .flags = REQ,
     .off = offsetof(msg_trace_t, id),
     .min = 1,
     .max = MSG_MAX_ID_BYTES},
    {.key = "steps",
     .kind = MSG_F_ARRAY,
     .flags = REQ,
     .off = offsetof(msg_trace_t, steps),
     .off2 = offsetof(msg_trace_t, n_steps),
     .max = MSG_MAX_TRACE_STEPS,
     .sub = &msg_schema_trace_step},
    {.key = "total_ms",
     .kind = MSG_F_DOUBLE,
     .flags = REQ,
     .off = offsetof(msg_trace_t, total_ms),
     .flo = 0,
     .fhi = 1e12},
    {.key = "sources",
     .kind = MSG_F_ARRAY,
     .flags = REQ,
     .off = offsetof(msg_trace_t, sources),
     .off2 = offsetof(msg_trace_t, n_sources),
     .max = MSG_MAX_SOURCES,
     .sub = &s_source_schema},
};
const msg_schema_t msg_schema_trace = {
    "trace", sizeof(msg_trace_t), s_trace_fields, MSG_NFIELDS(s_trace_fields), NULL, NULL};

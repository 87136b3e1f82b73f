/* msg_types.h - the one list of strata message types (id, name, version, family),
 * the limits every decoder enforces, the error model shared by all decoders,
 * and the small enums that travel as strings on the wire.
 *
 * Wire format (docs/PROTOCOL.md): every message is ONE MessagePack map with
 *   "type": str  - the message name from MSG_TYPES below ("generate", "token", ...)
 *   "v":    int  - the message version (optional on input, default 1; always written)
 * plus the message's own keys.  Unknown keys are ignored.
 *
 * Adding a message: one line in MSG_TYPES, a struct + MSG_DECLARE_CODEC in the family
 * header, a field table in the family source.
 */
#ifndef MSG_TYPES_H
#define MSG_TYPES_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the message list
 * X(name, NAME, id, version, family)
 * ids are stable; the enum value of MSG_<NAME> is the id. */
#define MSG_TYPES(X)                                                                               \
    /* client protocol: client DEALER <-> frontend ROUTER */                                       \
    X(generate, GENERATE, 1, 1, MSG_FAMILY_CLIENT)                                                 \
    X(cancel, CANCEL, 2, 1, MSG_FAMILY_CLIENT)                                                     \
    X(stats, STATS, 3, 1, MSG_FAMILY_CLIENT)                                                       \
    X(health, HEALTH, 4, 1, MSG_FAMILY_CLIENT)                                                     \
    X(token, TOKEN, 5, 1, MSG_FAMILY_CLIENT)                                                       \
    X(done, DONE, 6, 1, MSG_FAMILY_CLIENT)                                                         \
    X(error, ERROR, 7, 1, MSG_FAMILY_CLIENT)                                                       \
    X(stats_reply, STATS_REPLY, 8, 1, MSG_FAMILY_CLIENT)                                           \
    X(health_reply, HEALTH_REPLY, 9, 1, MSG_FAMILY_CLIENT)                                         \
    X(resume, RESUME, 10, 1, MSG_FAMILY_CLIENT)                                                    \
    X(trace, TRACE, 11, 1, MSG_FAMILY_CLIENT)                                                      \
    X(embed, EMBED, 12, 1, MSG_FAMILY_CLIENT)                                                      \
    X(embedding, EMBEDDING, 13, 1, MSG_FAMILY_CLIENT)                                              \
    X(cache_put, CACHE_PUT, 14, 1, MSG_FAMILY_CLIENT)                                              \
    X(cache_invalidate, CACHE_INVALIDATE, 15, 1, MSG_FAMILY_CLIENT)                                \
    X(cache_reply, CACHE_REPLY, 16, 1, MSG_FAMILY_CLIENT)                                          \
    /* internal: actor <-> actor */                                                                \
    X(tok_request, TOK_REQUEST, 20, 1, MSG_FAMILY_INTERNAL)                                        \
    X(work_request, WORK_REQUEST, 21, 1, MSG_FAMILY_INTERNAL)                                      \
    X(work_event, WORK_EVENT, 22, 1, MSG_FAMILY_INTERNAL)                                          \
    X(text_event, TEXT_EVENT, 23, 1, MSG_FAMILY_INTERNAL)                                          \
    X(work_cancel, WORK_CANCEL, 24, 1, MSG_FAMILY_INTERNAL)                                        \
    X(load_report, LOAD_REPORT, 25, 1, MSG_FAMILY_INTERNAL)                                        \
    X(work_error, WORK_ERROR, 26, 1, MSG_FAMILY_INTERNAL)                                          \
    X(worker_down, WORKER_DOWN, 27, 1, MSG_FAMILY_INTERNAL)                                        \
    X(work_status, WORK_STATUS, 35, 1, MSG_FAMILY_INTERNAL)                                        \
    X(work_probe, WORK_PROBE, 36, 1, MSG_FAMILY_INTERNAL)                                          \
    /* KV store (msg_kv.h) and speculative decoding (msg_spec.h) */                                \
    X(kv_hint, KV_HINT, 28, 1, MSG_FAMILY_INTERNAL)                                                \
    X(kv_promote, KV_PROMOTE, 29, 1, MSG_FAMILY_INTERNAL)                                          \
    X(kv_block, KV_BLOCK, 30, 1, MSG_FAMILY_INTERNAL)                                              \
    X(kv_promote_done, KV_PROMOTE_DONE, 31, 1, MSG_FAMILY_INTERNAL)                                \
    X(draft_request, DRAFT_REQUEST, 32, 1, MSG_FAMILY_INTERNAL)                                    \
    X(draft_reply, DRAFT_REPLY, 33, 1, MSG_FAMILY_INTERNAL)                                        \
    X(draft_end, DRAFT_END, 34, 1, MSG_FAMILY_INTERNAL)                                            \
    /* MoE experts (msg_moe.h) */                                                                  \
    X(expert_request, EXPERT_REQUEST, 37, 1, MSG_FAMILY_INTERNAL)                                  \
    X(expert_reply, EXPERT_REPLY, 38, 1, MSG_FAMILY_INTERNAL)                                      \
    X(expert_load, EXPERT_LOAD, 39, 1, MSG_FAMILY_INTERNAL)                                        \
    X(expert_table, EXPERT_TABLE, 47, 1, MSG_FAMILY_INTERNAL)                                      \
    X(expert_down, EXPERT_DOWN, 48, 1, MSG_FAMILY_INTERNAL)                                        \
    /* embeddings (msg_embed.h) */                                                                 \
    X(embed_request, EMBED_REQUEST, 49, 1, MSG_FAMILY_INTERNAL)                                    \
    X(work_embedding, WORK_EMBEDDING, 50, 1, MSG_FAMILY_INTERNAL)                                  \
    /* the answer cache (msg_cache.h) */                                                           \
    X(cache_lookup, CACHE_LOOKUP, 56, 1, MSG_FAMILY_INTERNAL)                                      \
    X(cache_answer, CACHE_ANSWER, 57, 1, MSG_FAMILY_INTERNAL)                                      \
    X(cache_store, CACHE_STORE, 58, 1, MSG_FAMILY_INTERNAL)                                        \
    X(cache_drop, CACHE_DROP, 59, 1, MSG_FAMILY_INTERNAL)                                          \
    X(cache_done, CACHE_DONE, 60, 1, MSG_FAMILY_INTERNAL)                                          \
    /* control: supervisor/parent <-> actor */                                                     \
    X(ready, READY, 40, 1, MSG_FAMILY_CTL)                                                         \
    X(ping, PING, 41, 1, MSG_FAMILY_CTL)                                                           \
    X(pong, PONG, 42, 1, MSG_FAMILY_CTL)                                                           \
    X(stop, STOP, 43, 1, MSG_FAMILY_CTL)                                                           \
    X(stats_query, STATS_QUERY, 44, 1, MSG_FAMILY_CTL)                                             \
    X(stats_answer, STATS_ANSWER, 45, 1, MSG_FAMILY_CTL)                                           \
    X(heartbeat, HEARTBEAT, 46, 1, MSG_FAMILY_CTL)                                                 \
    X(drain, DRAIN, 51, 1, MSG_FAMILY_CTL)                                                         \
    X(ctl, CTL, 52, 1, MSG_FAMILY_CTL)                                                             \
    X(ctl_reply, CTL_REPLY, 53, 1, MSG_FAMILY_CTL)                                                 \
    X(worker_drain, WORKER_DRAIN, 54, 1, MSG_FAMILY_CTL)                                           \
    X(worker_idle, WORKER_IDLE, 55, 1, MSG_FAMILY_CTL)

typedef enum {
    MSG_NONE = 0, /* not a message type; msg_peek_type never returns it with 0 */
#define MSG_X_ENUM(name, NAME, id, version, family) MSG_##NAME = id,
    MSG_TYPES(MSG_X_ENUM)
#undef MSG_X_ENUM
        MSG_TYPE_MAX = 64 /* every id is < MSG_TYPE_MAX */
} msg_type_t;

typedef enum { MSG_FAMILY_CLIENT = 1, MSG_FAMILY_INTERNAL = 2, MSG_FAMILY_CTL = 3 } msg_family_t;

/* "generate" for MSG_GENERATE; NULL for an unknown id. */
const char *msg_type_name(int type);
/* The id of a name (length n, not necessarily NUL-terminated); MSG_NONE if unknown. */
int msg_type_from_name(const char *name, size_t n);
/* The version this build speaks for a type; 0 for an unknown id. */
int msg_type_version(int type);
/* The family of a type; 0 for an unknown id. */
int msg_type_family(int type);
/* The largest encoded frame a decoder of this type accepts (depends on the family). */
size_t msg_type_max_frame(int type);

/* ---- limits (every decoder enforces them; encoders refuse to exceed them) */
#define MSG_MAX_CLIENT_FRAME (1u << 20)     /* 1 MiB: any client-protocol frame */
#define MSG_MAX_INTERNAL_FRAME (4u << 20)   /* 4 MiB: internal and control frames */
#define MSG_MAX_ID_BYTES 64                 /* client request id */
#define MSG_MAX_PROMPT_BYTES (512u << 10)   /* prompt, and the sum of all message contents */
#define MSG_MAX_GRAMMAR_BYTES (256u * 1024) /* grammar / json_schema text */
#define MSG_MAX_MESSAGES 256                /* chat messages in one generate */
#define MSG_MAX_ROLE_BYTES 32               /* "system", "user", "assistant", ... */
#define MSG_MAX_TOKENS 8192                 /* max_tokens per request */
#define MSG_DEFAULT_MAX_TOKENS 256
#define MSG_MAX_STOP 8                  /* stop strings per request */
#define MSG_MAX_STOP_BYTES 64           /* bytes per stop string */
#define MSG_MAX_TEXT_BYTES (512u << 10) /* text of a token event or of done */
#define MSG_MAX_ERRMSG_BYTES 512        /* error message text */
#define MSG_MAX_SESSION_BYTES 64        /* chat session id (prefix warmth) */
#define MSG_MAX_NAME_BYTES 32           /* actor names */
#define MSG_MAX_COUNTERS 4096           /* entries in a counters map */
#define MSG_MAX_COUNTER_NAME_BYTES 96   /* bytes per counter name */
#define MSG_MAX_ACTORS 256              /* entries in health_reply.actors */
#define MSG_MAX_SEQ_TOKENS (256 * 1024) /* token ids in a work_request */
#define MSG_MAX_TRACE_STEPS 2048        /* decisions in a trace */
#define MSG_MAX_WHAT_BYTES 32           /* a decision's name */
#define MSG_MAX_WHY_BYTES 240           /* a decision's inputs, one line */
#define MSG_MAX_TOP_LOGPROBS 20         /* alternatives per token (top_logprobs) */
#define MSG_PRIORITY_MAX 100            /* generate.priority: -100..100 */
#define MSG_MAX_KV_COMPRESS_BYTES 64    /* generate.kv_compress: a policy spec */
#define MSG_MAX_PIECE_BYTES 48          /* text of one alternative token */
#define MSG_MAX_SOURCES 256             /* copied spans in a trace */
#define MSG_MAX_TOP_K (1 << 24)
#define MSG_MAX_REPEAT_LAST_N 65536
#define MSG_MAX_LOGIT_BIAS 1024    /* entries of logit_bias */
#define MSG_MAX_TOOL_NAME_BYTES 64 /* a function's name (tool_choice, tool_calls) */
#define MSG_MAX_TOOL_CALLS 8       /* calls in done.tool_calls */
#define MSG_MAX_EMBED_TOKENS 65536 /* token ids of one embed input */
#define MSG_MAX_EMBED_DIM 65536    /* floats of one embedding */
#define MSG_MAX_DEPTH 16           /* nesting depth a decoder walks (skipping unknown values too) */

/* ---- sampling parameters as they travel (generate, work_request).  The wire
 * carries its own type so msgs/ needs nothing from model/; the worker turns it
 * into the sampler's parameters.  Ranges are checked by the decoders. */
typedef struct {
    float temperature;       /* <= 0: greedy (argmax); 0..100 */
    int top_k;               /* keep the k most likely; 0: off */
    float top_p;             /* nucleus mass in (0, 1]; 1: off */
    float min_p;             /* drop tokens below min_p * p(top), [0, 1]; 0: off */
    float repeat_penalty;    /* penalty on recent tokens, (0, 10]; 1: off */
    int repeat_last_n;       /* how many recent tokens the penalty looks at */
    uint64_t seed;           /* per-request seed */
    float presence_penalty;  /* OpenAI's, over the completion so far, [-2, 2]; 0: off */
    float frequency_penalty; /* OpenAI's, per occurrence in the completion, [-2, 2]; 0: off */
} msg_sampling_t;

/* one entry of logit_bias (generate, work_request): added to the token's logit */
typedef struct {
    int32_t token; /* >= 0; the worker checks it is in the vocabulary */
    float bias;    /* [-100, 100] */
} msg_logit_bias_t;

/* The protocol's defaults (docs/PROTOCOL.md), the same as the sampler's and
 * llama.cpp's: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05,
 * repeat_penalty 1.0 (off), repeat_last_n 64, seed 0, presence_penalty and
 * frequency_penalty 0 (off). */
msg_sampling_t msg_sampling_defaults(void);

/* ---- error model
 * Every decoder and msg_peek_type return 0 or a negative errno:
 *   -EMSGSIZE        frame larger than the family's limit
 *   -EBADMSG         not valid MessagePack (truncated, bad byte, trailing bytes, too deep)
 *   -EPROTO          valid MessagePack but not this message: not a map, missing "type",
 *                    unknown or different type, missing required field, wrong field type,
 *                    string/array longer than its limit, cross-field rule broken, and
 *                    (client family only, anywhere in the frame, known keys or not) a
 *                    str that is not UTF-8, a key that is not a str, a key twice in a map
 *   -ERANGE          a number outside its range (e.g. max_tokens 0)
 *   -EPROTONOSUPPORT "v" is not the version this build speaks
 *   -ENOMEM          allocation failed
 * and, when err is not NULL, fill *err: the same code, a kind (for counters such as
 * "frontend.malformed.bad_type"), the field's dotted path, and one readable line such as
 *   field 'max_tokens': expected int, got str
 * Encoders return 0, -EINVAL (the struct breaks a limit or rule; *err says which) or -ENOMEM. */
typedef enum {
    MSG_E_OK = 0,
    MSG_E_TOO_BIG,      /* "too_big": frame over the size limit */
    MSG_E_MALFORMED,    /* "malformed": not MessagePack, truncated, trailing bytes, too deep */
    MSG_E_NOT_MAP,      /* "not_map": the top-level object is not a map */
    MSG_E_UNKNOWN_TYPE, /* "unknown_type": "type" missing, not a str, or not in MSG_TYPES */
    MSG_E_WRONG_TYPE,   /* "wrong_type": a known type, but not the one this decoder reads */
    MSG_E_VERSION,      /* "bad_version": "v" not an int or not supported */
    MSG_E_MISSING,      /* "missing_field": a required key is absent */
    MSG_E_BAD_TYPE,     /* "bad_type": a field has the wrong MessagePack type */
    MSG_E_RANGE,        /* "out_of_range": a number outside its range */
    MSG_E_TOO_LONG,     /* "too_long": a string, bin or array over its limit */
    MSG_E_INVALID,      /* "invalid": a rule across fields (prompt XOR messages, ...) */
    MSG_E_NOMEM,        /* "nomem" */
    MSG_E_UTF8,         /* "bad_utf8": a str (value or key) is not well-formed UTF-8 */
    MSG_E_DUPLICATE,    /* "duplicate_key": a key appears twice in one map */
    MSG_E_COUNT
} msg_err_kind_t;

typedef struct {
    int code;       /* the negative errno the call returned (0 when ok) */
    int kind;       /* msg_err_kind_t */
    char field[64]; /* dotted path of the offending field ("messages[2].role"), or "" */
    char msg[192];  /* one line, e.g. "field 'max_tokens': expected int, got str" */
} msg_err_t;

/* "bad_type" etc.; "ok" for MSG_E_OK; "?" out of range. */
const char *msg_err_kind_name(int kind);

/* ---- enums that travel as strings */

/* why a generation ended; MSG_FINISH_NONE (0) = still running (work_event/text_event) */
typedef enum {
    MSG_FINISH_NONE = 0,
    MSG_FINISH_EOS = 1,      /* "eos": the model emitted end-of-sequence */
    MSG_FINISH_LENGTH = 2,   /* "length": max_tokens reached (or the context is full) */
    MSG_FINISH_STOP = 3,     /* "stop": a stop string matched */
    MSG_FINISH_CANCELLED = 4 /* "cancelled": the client cancelled */
} msg_finish_t;
const char *msg_finish_name(int finish); /* "eos"...; "" for NONE; NULL if invalid */

/* error codes of the error / work_error messages */
typedef enum {
    MSG_CODE_BAD_REQUEST = 0, /* "bad_request": the request failed validation */
    MSG_CODE_OVERLOADED = 1,  /* "overloaded": a queue is full; retry later */
    MSG_CODE_NOT_FOUND = 2,   /* "not_found": cancel of an unknown id */
    MSG_CODE_INTERNAL = 3,    /* "internal": a server-side failure */
    MSG_CODE_CONTEXT = 4,     /* "context_length_exceeded": the prompt (+ max_tokens) does not
                                 fit in the worker's context */
    MSG_CODE_DRAINING = 5     /* "draining": the server is shutting down and takes no new
                                 request (retry on another server; a stream cut by the drain
                                 resumes there with `resume`) */
} msg_code_t;
const char *msg_code_name(int code); /* NULL if invalid */

/* actor states in health_reply */
typedef enum {
    MSG_STATE_READY = 0,     /* "ready" */
    MSG_STATE_STARTING = 1,  /* "starting" */
    MSG_STATE_UNHEALTHY = 2, /* "unhealthy" */
    MSG_STATE_RESTARTING = 3 /* "restarting" */
} msg_state_t;
const char *msg_state_name(int state); /* NULL if invalid */

/* Whether the n bytes at p are well-formed UTF-8 (Unicode table 3-7): no overlong
 * forms, no surrogates (U+D800..DFFF), nothing above U+10FFFF, no truncated sequence.
 * When not, and bad_at is not NULL, *bad_at is the offset of the first ill-formed byte. */
bool msg_utf8_valid(const void *p, size_t n, size_t *bad_at);

/* ---- generic, type-dispatched API (the typed msg_<name>_* functions wrap these)
 * m points to the struct of that type (msg_<name>_t). */

/* Read only the "type" (and "v") of a frame so a receiver can dispatch.  Checks the
 * frame size against the type's family limit and the version.  0 and *type set, or a
 * negative errno as above (*type = MSG_NONE). */
int msg_peek_type(const void *buf, size_t len, int *type, msg_err_t *err);
/* Copy the client request "id" (a str of 1..MSG_MAX_ID_BYTES bytes of UTF-8 without NUL,
 * appearing once in the top map) of a frame into id (cap >= MSG_MAX_ID_BYTES + 1), to
 * answer a malformed request with its id.  0, or -EPROTO (no such id, or one that could
 * not be echoed back; id set to "").  Never fails worse than that. */
int msg_peek_id(const void *buf, size_t len, char *id, size_t cap);

/* Set m to the type's defaults (zeros, plus e.g. max_tokens 256, stream true). */
int msg_init(int type, void *m);
/* Free what a decoder allocated in m and reset it to defaults.  Only for structs filled
 * by a decoder (or whose pointers the caller malloc'd). Safe twice. */
void msg_clear(int type, void *m);
/* Encode m as a new malloc'd buffer (*buf, *len); the caller free()s it. */
int msg_encode(int type, const void *m, void **buf, size_t *len, msg_err_t *err);
/* Decode and validate; on success m owns its allocations (msg_clear frees them); on
 * failure m is left cleared (nothing to free). */
int msg_decode(int type, const void *buf, size_t len, void *m, msg_err_t *err);

/* Declares the typed wrappers of one message type:
 *   void msg_<name>_init(msg_<name>_t *m);
 *   void msg_<name>_clear(msg_<name>_t *m);
 *   int  msg_<name>_encode(const msg_<name>_t *m, void **buf, size_t *len, msg_err_t *err);
 *   int  msg_<name>_decode(const void *buf, size_t len, msg_<name>_t *m, msg_err_t *err); */
/* One decision of a traced request (docs/PROTOCOL.md, `trace`): which actor decided
 * what, why (its inputs), and when: the step started t_us after the request reached
 * the frontend and took dur_us; the steps of a chain follow each other, so their
 * durations add up to the request's latency. */
typedef struct {
    char actor[MSG_MAX_NAME_BYTES + 1]; /* "frontend", "worker1", ... */
    char what[MSG_MAX_WHAT_BYTES + 1];  /* "dispatch", "prefill", "decode", ... */
    char why[MSG_MAX_WHY_BYTES + 1];    /* the inputs of the decision, one line */
    int64_t t_us;                       /* start, after the arrival (>= 0) */
    int64_t dur_us;                     /* >= 0 */
} msg_trace_step_t;

/* Fill st (zeroed first): the decision what of actor, why printf'd (cut to fit), from
 * start_us to end_us after the arrival (end_us below start_us counts as start_us). */
void msg_trace_step_fill(msg_trace_step_t *st, const char *actor, const char *what,
                         int64_t start_us, int64_t end_us, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The same with a va_list (a caller that is itself variadic). */
void msg_trace_step_vfill(msg_trace_step_t *st, const char *actor, const char *what,
                          int64_t start_us, int64_t end_us, const char *fmt, va_list ap);

/* An alternative token at one position, with its log-probability under the model. */
typedef struct {
    int32_t token;                      /* >= 0 */
    float logprob;                      /* <= 0 */
    char text[MSG_MAX_PIECE_BYTES + 1]; /* its text alone (invalid UTF-8 as U+FFFD) */
} msg_top_t;

#define MSG_DECLARE_CODEC(name)                                                                    \
    void msg_##name##_init(msg_##name##_t *m);                                                     \
    void msg_##name##_clear(msg_##name##_t *m);                                                    \
    int msg_##name##_encode(const msg_##name##_t *m, void **buf, size_t *len, msg_err_t *err);     \
    int msg_##name##_decode(const void *buf, size_t len, msg_##name##_t *m, msg_err_t *err);

#endif

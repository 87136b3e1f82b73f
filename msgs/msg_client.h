/* msg_client.h - the client protocol family (client DEALER <-> frontend ROUTER):
 * generate, cancel, stats, health (client -> server); token, done, error, stats_reply,
 * health_reply (server -> client).  Plain structs; docs/PROTOCOL.md is the wire spec.
 *
 * Ownership: a decoder mallocs the pointer members (prompt, messages, text, counters,
 * actors) and msg_<name>_clear frees them.  An encoder only reads the struct: pointer
 * members may point anywhere (they are borrowed).  Fixed char arrays are NUL-terminated.
 */
#ifndef MSG_CLIENT_H
#define MSG_CLIENT_H

#include "msg_cache.h"
#include "msg_types.h"

/* one chat message of generate.messages */
typedef struct {
    char role[MSG_MAX_ROLE_BYTES + 1]; /* non-empty */
    char *content;                     /* NUL-terminated, content_len bytes */
    size_t content_len;
} msg_chat_t;

/* 1 generate: start a generation.  Exactly one of prompt / messages. */
typedef struct {
    char id[MSG_MAX_ID_BYTES + 1]; /* required, 1..64 bytes: the client's request id */
    char *prompt;                  /* NULL when messages are used; raw prompt text */
    size_t prompt_len;             /* 1..MSG_MAX_PROMPT_BYTES (an empty prompt is refused) */
    msg_chat_t *messages;          /* (n_messages) chat; NULL when prompt is used */
    int n_messages;                /* 1..MSG_MAX_MESSAGES when used */
    int max_tokens;                /* 1..MSG_MAX_TOKENS, default 256 */
    bool fit_context;              /* max_tokens is a ceiling: the worker lowers it to what its
                                      context leaves after the prompt (docs/PROTOCOL.md) */
    int priority; /* -MSG_PRIORITY_MAX..MSG_PRIORITY_MAX, default 0: lower runs sooner, and may
                     preempt running requests of a higher value (docs/PROTOCOL.md) */
    char kv_compress[MSG_MAX_KV_COMPRESS_BYTES + 1]; /* in-sequence KV compression
                                                        ("h2o:25%", kvstore/kv_compress.h;
                                                        checked by the frontend), or "":
                                                        the worker's default */
    msg_sampling_t sampling;                         /* defaults: msg_sampling_defaults() */
    msg_logit_bias_t *logit_bias; /* (n_logit_bias) token -> bias, each token once; or NULL */
    int n_logit_bias;             /* 0..MSG_MAX_LOGIT_BIAS */
    bool has_seed;                /* "seed" was given (else the server picks 0) */
    char stop[MSG_MAX_STOP][MSG_MAX_STOP_BYTES + 1]; /* stop strings, each 1..64 bytes */
    int n_stop;                                      /* 0..MSG_MAX_STOP */
    bool stream;                                     /* default true: token events */
    char session[MSG_MAX_SESSION_BYTES + 1];         /* optional chat session id, 1..64 bytes ("" =
                                                        none): the server keeps the session's KV
                                                        warm between turns */
    bool trace;                                      /* a `trace` event before `done` */
    bool logprobs;                                   /* each token's log-probability */
    int top_logprobs; /* 0..MSG_MAX_TOP_LOGPROBS alternatives per token (implies logprobs) */
    /* structured output: at most one of grammar / json_schema / json_object
     * (docs/PROTOCOL.md).  The frontend compiles json_schema and json_object to GBNF
     * in grammar (and clears them), so a resume re-sends the compiled grammar. */
    char *grammar;      /* GBNF text (docs/GRAMMAR.md), or NULL */
    size_t grammar_len; /* 1..MSG_MAX_GRAMMAR_BYTES when given */
    char *json_schema;  /* JSON Schema text, or NULL */
    size_t json_schema_len;
    bool json_object; /* any JSON object */
    /* tool calls (docs/PROTOCOL.md, "Tool calls"): OpenAI's function tools.  The frontend
     * describes them in the system turn and constrains the answer with their grammar (and
     * clears these, so a resume re-sends what they became); done.tool_calls says the calls */
    char *tools;      /* JSON text: [{"type": "function", "function": {name, description,
                         parameters, strict}}, ...], or NULL; needs messages */
    size_t tools_len; /* 1..MSG_MAX_GRAMMAR_BYTES when given */
    char tool_choice[MSG_MAX_TOOL_NAME_BYTES + 1]; /* "" (auto), "none", "auto", "required",
                                                      or the name of the function to call */
    bool parallel_tool_calls; /* default true: 1..8 calls; false: exactly one */
    /* the answer cache (docs/SEMCACHE.md) */
    int cache;           /* msg_cache_mode_t: default (the server's), off, exact, semantic */
    double cache_delta;  /* the wrong-hit rate allowed a semantic hit, (0, 0.5]; 0: the server's */
    bool has_cache_ttl;  /* cache_ttl_s was given */
    int64_t cache_ttl_s; /* how long this answer stays valid (0: never expires) */
    char cache_tags[MSG_MAX_CACHE_TAGS_BYTES + 1]; /* comma-separated tags of the entry */
    bool cache_sampled; /* a sampled request without a seed may be cached (off: it is not) */
} msg_generate_t;

/* 2 cancel: stop the generation with this id (answered by its done, "cancelled") */
typedef struct {
    char id[MSG_MAX_ID_BYTES + 1]; /* required */
} msg_cancel_t;

/* 3 stats, 4 health: no fields */
typedef struct {
    int unused_;
} msg_stats_t;
typedef struct {
    int unused_;
} msg_health_t;

/* 5 token: one generated token (stream = true only) */
typedef struct {
    char id[MSG_MAX_ID_BYTES + 1]; /* the request id */
    int index;                     /* 0-based position in the completion */
    int32_t token;                 /* the token id (>= 0) */
    char *text;                    /* the text piece; "" while a UTF-8 char is incomplete */
    size_t text_len;
    float logprob; /* with logprobs: of this token under the model */
    bool has_logprob;
    msg_top_t *top; /* (n_top) with top_logprobs: the most likely tokens */
    int n_top;
    char piece[MSG_MAX_PIECE_BYTES + 1]; /* with logprobs: the token's own text (as in top) */
} msg_token_t;

/* A completion token with its log-probability (done.logprobs, stream false). */
typedef struct {
    int32_t token;
    float logprob;
    msg_top_t *top; /* (n_top) */
    int n_top;
    char piece[MSG_MAX_PIECE_BYTES + 1]; /* the token's own text */
} msg_logprob_t;

/* A span of the completion copied from the input: completion bytes [out_start,
 * out_end) equal bytes [in_start, in_end) of the prompt, or of messages[msg].content. */
typedef struct {
    int out_start, out_end;
    int msg; /* -1: the prompt; else the index of the chat message */
    int in_start, in_end;
} msg_source_t;

/* 11 trace: the decisions made for a request with trace = true, before its done */
typedef struct {
    char id[MSG_MAX_ID_BYTES + 1];
    msg_trace_step_t *steps; /* (n_steps) in order */
    int n_steps;
    double total_ms;       /* arrival -> final event: what the steps account for */
    msg_source_t *sources; /* (n_sources) spans of the completion copied from the input */
    int n_sources;
} msg_trace_t;

typedef struct {
    int prompt_tokens;     /* >= 0 */
    int completion_tokens; /* >= 0 */
    int cached_tokens;     /* prompt tokens whose KV came from the cache (T0..T2), not computed */
    int draft_proposed;    /* speculative decoding: draft tokens proposed */
    int draft_accepted;    /* ... and accepted by the target */
} msg_usage_t;

typedef struct {
    double queued_ms;  /* arrival -> start of prefill */
    double prefill_ms; /* prefill */
    double decode_ms;  /* first token -> last token */
    double ttft_ms;    /* arrival -> first token */
} msg_timings_ms_t;

/* A call of done.tool_calls. */
typedef struct {
    char id[MSG_MAX_ID_BYTES + 32];         /* call_<request id's tail>_<i> */
    char name[MSG_MAX_TOOL_NAME_BYTES + 1]; /* the function */
    char *arguments;                        /* its arguments: JSON text, as generated */
    size_t arguments_len;
} msg_tool_call_t;

/* 6 done: the last event of every generate that was accepted */
typedef struct {
    char id[MSG_MAX_ID_BYTES + 1];
    int finish_reason; /* msg_finish_t, never MSG_FINISH_NONE */
    char *text;        /* the whole completion when stream = false; else NULL */
    size_t text_len;
    msg_usage_t usage;
    msg_timings_ms_t timings;
    msg_logprob_t *logprobs; /* (n_logprobs) stream false with logprobs: per token */
    int n_logprobs;
    msg_tool_call_t *tool_calls; /* (n_tool_calls) a generate with tools answered by calls */
    int n_tool_calls;            /* 0..MSG_MAX_TOOL_CALLS */
    int cache;                   /* msg_cache_kind_t: answered from the cache (0: generated) */
    char cache_entry[MSG_MAX_ID_BYTES + 1]; /* then the entry: a request id or a KB record */
    float cache_similarity;                 /* and the similarity it matched with */
} msg_done_t;

/* 7 error: a request failed (it ends that request: no done follows) */
typedef struct {
    char id[MSG_MAX_ID_BYTES + 1]; /* "" = nil on the wire (the request had no usable id) */
    int code;                      /* msg_code_t */
    char message[MSG_MAX_ERRMSG_BYTES + 1];
} msg_error_t;

/* a counter of stats_reply / stats_answer */
typedef struct {
    char name[MSG_MAX_COUNTER_NAME_BYTES + 1]; /* dotted, e.g. "frontend.requests" */
    int64_t value;
} msg_counter_t;

/* 8 stats_reply */
typedef struct {
    msg_counter_t *counters; /* (n_counters), order as on the wire */
    int n_counters;          /* 0..MSG_MAX_COUNTERS */
} msg_stats_reply_t;

typedef struct {
    char name[MSG_MAX_NAME_BYTES + 1];
    int state;            /* msg_state_t */
    int64_t last_seen_ms; /* ms since the last heartbeat answer, >= 0 */
} msg_actor_health_t;

/* 9 health_reply */
typedef struct {
    bool ok;                    /* every actor ready */
    msg_actor_health_t *actors; /* (n_actors) */
    int n_actors;               /* 0..MSG_MAX_ACTORS */
    /* the probes (docs/OPERATIONS.md); optional on input (absent: false, 0) */
    bool started;      /* every actor has answered once (the models are loaded) */
    bool ready;        /* takes traffic: not draining, the tokenizer, the router and at least
                          one worker ready */
    bool progress;     /* no request in flight is stalled: its worker answers heartbeats and
                          produced a token within the progress window */
    bool draining;     /* a drain is under way */
    int64_t in_flight; /* requests held, >= 0 */
} msg_health_reply_t;

/* 10 resume: continue a generate after a lost connection (the client reconnected, or
 * the frontend restarted).  The generate's own keys, unchanged, plus what the client
 * already has: `have` token events (indexes 0..have-1) and, optionally, their token
 * ids.  With the ids the server continues after them; without, it generates the
 * completion again (sampling is seeded per position: the same tokens) and sends only
 * the events from index `have` on. */
typedef struct {
    msg_generate_t gen; /* as sent the first time */
    int have;           /* 0..max_tokens: token events the client has */
    int32_t *tokens;    /* (n_tokens) their token ids, or NULL; bin of int32 LE */
    int n_tokens;       /* 0 or have */
} msg_resume_t;

MSG_DECLARE_CODEC(generate)
MSG_DECLARE_CODEC(cancel)
MSG_DECLARE_CODEC(stats)
MSG_DECLARE_CODEC(health)
MSG_DECLARE_CODEC(token)
MSG_DECLARE_CODEC(done)
MSG_DECLARE_CODEC(error)
MSG_DECLARE_CODEC(stats_reply)
MSG_DECLARE_CODEC(health_reply)
MSG_DECLARE_CODEC(resume)
MSG_DECLARE_CODEC(trace)

/* nested schemas the internal family shares */
extern const struct msg_schema_s msg_schema_trace_step;
extern const struct msg_schema_s msg_schema_top;

/* Helpers for building messages (0, -EINVAL if too long, or -ENOMEM). */
/* Copy s into a fixed char array field (id, name, ...) of capacity cap (incl. NUL). */
int msg_set_str(char *dst, size_t cap, const char *s);
/* Append a counter to a malloc'd counters array (stats_reply / stats_answer). */
int msg_counters_add(msg_counter_t **counters, int *n, const char *name, int64_t value);

#endif

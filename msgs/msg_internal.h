/* msg_internal.h - the internal family (actor <-> actor): the request as it flows
 * frontend -> tokenizer -> router -> worker, the events flowing back, load reports and
 * worker failure notices.  Plain structs; same ownership rules as msg_client.h.
 *
 * rid is the server-side request id (the frontend assigns it); times are microseconds
 * (t_arrival_us on the frontend's clock, CLOCK_MONOTONIC).
 */
#ifndef MSG_INTERNAL_H
#define MSG_INTERNAL_H

#include "msg_client.h"
#include "msg_types.h"

typedef struct {
    uint64_t queued_us;  /* arrival -> start of prefill */
    uint64_t prefill_us; /* prefill */
    uint64_t decode_us;  /* first token -> last token */
    uint64_t ttft_us;    /* arrival -> first token */
} msg_timings_us_t;

/* 20 tok_request (frontend -> tokenizer): the client's generate plus server fields.
 * On the wire: the generate keys (id, prompt|messages, max_tokens, ...) + rid,
 * t_arrival_us, and for a resumed request the completion tokens already delivered. */
typedef struct {
    uint64_t rid;
    msg_generate_t gen; /* the validated client request (owns prompt / messages) */
    uint64_t t_arrival_us;
    int32_t *gen_tokens; /* (n_gen) completion tokens already delivered, or NULL */
    int n_gen;           /* 0..max_tokens */
    int64_t trace_t_us;  /* with gen.trace: where the chain of decisions ends so far (us
                            after the arrival; > 0 for a resumed request) */
} msg_tok_request_t;

/* 21 work_request (tokenizer -> router -> worker).  A resumed request carries the
 * completion tokens already delivered at the end of `tokens` (n_gen of them): the
 * worker computes their KV with the prompt's and goes on at completion index n_gen. */
typedef struct {
    uint64_t rid;
    int32_t *tokens;  /* (n_tokens) prompt then n_gen completion token ids,
                         >= 0; "bin" int32 LE */
    int n_tokens;     /* 1..MSG_MAX_SEQ_TOKENS */
    int n_gen;        /* 0..min(n_tokens - 1, max_tokens) */
    int max_tokens;   /* 1..MSG_MAX_TOKENS */
    bool fit_context; /* generate.fit_context: max_tokens is a ceiling */
    int priority;     /* generate.priority: lower runs sooner */
    char kv_compress[MSG_MAX_KV_COMPRESS_BYTES + 1]; /* generate.kv_compress, or "" */
    msg_sampling_t sampling;                         /* seed included */
    msg_logit_bias_t *logit_bias;                    /* (n_logit_bias) as in generate, or NULL */
    int n_logit_bias;
    char stop[MSG_MAX_STOP][MSG_MAX_STOP_BYTES + 1];
    int n_stop;
    bool stream;
    uint64_t t_arrival_us;
    char session[MSG_MAX_SESSION_BYTES + 1]; /* chat session id, or "" */
    int pin_tokens;   /* leading tokens that are the system prompt (kept longer in the KV tiers) */
    bool trace;       /* record the decisions (msg_trace_step_t) */
    bool logprobs;    /* each token's log-probability */
    int top_logprobs; /* 0..MSG_MAX_TOP_LOGPROBS alternatives */
    msg_trace_step_t *steps; /* (n_steps) decisions so far (tokenizer, router) */
    int n_steps;
    char *grammar; /* GBNF text the output must follow (compiled by the frontend), or NULL */
    size_t grammar_len;
    bool embed; /* an embed (msg_embed.h): pool the prompt's hidden states, generate nothing */
} msg_work_request_t;

/* 22 work_event (worker -> tokenizer): one token, or the end.  When finish != 0 the
 * event may carry a last token (index >= 0) or none (index = -1, token = -1). */
typedef struct {
    uint64_t rid;
    int index;                /* 0-based position in the completion, or -1 = no token */
    int32_t token;            /* >= 0, or -1 with index -1 */
    int finish;               /* msg_finish_t: 0 = running */
    int prompt_tokens;        /* >= 0 */
    msg_timings_us_t timings; /* meaningful when finish != 0 */
} msg_work_event_t;

/* 23 text_event (worker -> frontend): work_event plus its detokenized text piece. */
typedef struct {
    uint64_t rid;
    int worker;    /* the sending worker's index, >= 0 */
    int count;     /* completion tokens after this event (carried ones included): the
                      frontend's check that none was lost before it */
    int index;     /* as in work_event */
    int32_t token; /* as in work_event */
    char *text;    /* UTF-8-safe piece ("" while incomplete) */
    size_t text_len;
    int finish;
    int prompt_tokens;
    msg_timings_us_t timings;
    int cached_tokens;  /* with finish: prompt tokens served from the KV cache */
    int draft_proposed; /* with finish: speculative tokens proposed / accepted */
    int draft_accepted;
    float logprob; /* with logprobs and a token */
    bool has_logprob;
    msg_top_t *top; /* (n_top) with top_logprobs */
    int n_top;
    char piece[MSG_MAX_PIECE_BYTES + 1]; /* with logprobs: the token's own text */
    msg_trace_step_t *steps; /* (n_steps) with trace, on the final event: every decision */
    int n_steps;
} msg_text_event_t;

/* 24 work_cancel (frontend -> router -> worker) */
typedef struct {
    uint64_t rid;
} msg_work_cancel_t;

/* 25 load_report (worker -> router) */
typedef struct {
    int worker;             /* worker index, >= 0 */
    int64_t queued_tokens;  /* prompt tokens waiting for prefill */
    int64_t active_tokens;  /* tokens held by running sequences */
    int n_queued;           /* requests waiting */
    int n_active;           /* requests running */
    int64_t kv_free_blocks; /* free KV blocks in the worker's own tier */
} msg_load_report_t;

/* 26 work_error (any -> frontend): request rid failed */
typedef struct {
    uint64_t rid;
    int code; /* msg_code_t */
    char message[MSG_MAX_ERRMSG_BYTES + 1];
} msg_work_error_t;

/* 27 worker_down (supervisor -> router) */
typedef struct {
    int worker; /* >= 0 */
} msg_worker_down_t;

/* 35 work_status (worker -> frontend): the worker holds request rid (on arrival, and
 * in answer to a work_probe), or does not (answer to a probe). */
typedef struct {
    uint64_t rid;
    int worker; /* >= 0 */
    bool held;  /* waiting or running there */
} msg_work_status_t;

/* 36 work_probe (frontend -> worker): does the worker still hold rid?  Sent when a
 * request it accepted has been silent for a while: its events may have been lost. */
typedef struct {
    uint64_t rid;
} msg_work_probe_t;

MSG_DECLARE_CODEC(tok_request)
MSG_DECLARE_CODEC(work_request)
MSG_DECLARE_CODEC(work_event)
MSG_DECLARE_CODEC(text_event)
MSG_DECLARE_CODEC(work_cancel)
MSG_DECLARE_CODEC(load_report)
MSG_DECLARE_CODEC(work_error)
MSG_DECLARE_CODEC(worker_down)
MSG_DECLARE_CODEC(work_status)
MSG_DECLARE_CODEC(work_probe)

#endif

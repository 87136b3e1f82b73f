/* serve_requests.h - the frontend's request table and the rules that make resume work
 * (docs/PROTOCOL.md "resume", docs/FAULTS.md): what is kept per request (the client's
 * generate and every completion token delivered so far), which events of an attempt are
 * delivered (in index order, once), when an attempt counts as lost (not accepted in
 * time, silent through its probes, a gap in its indexes) and what the next attempt
 * starts from (the delivered tokens, under a fresh rid, after a backoff when the worker
 * was overloaded).  Plain data and decisions: the frontend actor does the sending. */
#ifndef SERVE_REQUESTS_H
#define SERVE_REQUESTS_H

#include "audit_log.h"
#include "msg_client.h"
#include "serve_openai.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SERVE_MAX_IDENT 256          /* bytes of a client's ROUTER identity */
#define SERVE_RETRY0_US 100000       /* first backoff before an attempt is submitted again */
#define SERVE_RETRY_MAX_US 2000000   /* longest backoff */
#define SERVE_MAX_PROBES 3           /* unanswered probes before an attempt counts as lost */
#define SERVE_FINAL_WAIT_US 60000000 /* how long a slow reader's final error waits for room */

/* One accepted request: plain data, read and written by the frontend; the table owns
 * the pointer members. */
typedef struct {
    uint64_t rid;                   /* server-side id of its current attempt; 0 = free slot */
    uint8_t ident[SERVE_MAX_IDENT]; /* client's ROUTER identity */
    size_t ident_len;
    int fd;                        /* connection it came from (disconnect detection) */
    uint32_t fd_gen;               /* that fd's accept generation when the request came */
    char id[MSG_MAX_ID_BYTES + 1]; /* client's request id */
    bool stream;                   /* token events wanted */
    bool gone;                     /* client went away: nothing more is sent */
    bool cancel_sent;              /* work_cancel sent */
    char *text;                    /* (text_cap) completion text when !stream (or traced) */
    size_t text_len, text_cap;
    int n_tokens; /* completion tokens so far */
    /* what a new attempt needs, and how the current one is doing */
    msg_generate_t gen;     /* the client's request (owned) */
    int32_t *toks;          /* (gen.max_tokens) the completion tokens so far */
    int skip;               /* events the client has already (a resume without token ids) */
    uint64_t t_arrival_us;  /* the first attempt's arrival */
    int worker;             /* the worker that holds the current attempt, or -1 */
    int attempts;           /* attempts so far (1 = never resumed) */
    uint64_t t_sent_us;     /* when the current attempt was submitted */
    uint64_t t_heard_us;    /* last event or status of the current attempt */
    int probes;             /* probes sent since then */
    uint64_t retry_at_us;   /* submit again then (0: not waiting to) */
    uint64_t retry_wait_us; /* the next backoff */
    uint64_t give_up_us;    /* no token by then: the request fails */
    bool slow;              /* an event found the client's queue full and was dropped */
    uint64_t final_due_us;  /* since then its final error waits for room (0: not) */
    /* explainability */
    msg_trace_step_t *steps; /* (n_steps) with trace: the frontend's own steps (resumes) */
    int n_steps;
    int64_t trace_end_us; /* where the chain ends so far, after the arrival */
    msg_logprob_t *lps;   /* (n_tokens) stream false with logprobs: per token */
    /* the audit record (docs/AUDIT.md) */
    audit_digest_t out;  /* the completion text, as it came */
    char client_key[41]; /* the client's CURVE key (Z85), or "" */
    void *trace;         /* (trace_len) the trace event as sent, or NULL */
    size_t trace_len;
    /* an embed (docs/PROTOCOL.md): gen carries its id and text (prompt, or NULL when the
     * input is token ids); its attempts are embed_requests, its answer an embedding */
    bool embed;
    int32_t *embed_ids; /* (n_embed_ids) the input's token ids, or NULL; owned */
    int n_embed_ids;
    serve_openai_tools_t tools; /* a generate with tools: its text is kept, done says the calls */
    /* the answer cache (docs/SEMCACHE.md) */
    int cache_state;            /* SERVE_CACHE_* */
    uint64_t cache_verify_hash; /* the nearest entry's answer hash, checked against this one's */
    float cache_verify_sim;     /* and its similarity */
} serve_request_t;

enum {
    SERVE_CACHE_NONE = 0,   /* not cached: generated, nothing kept */
    SERVE_CACHE_LOOKUP = 1, /* waiting for the semcache's answer (retry_at_us: the deadline) */
    SERVE_CACHE_STORE = 2,  /* missed (or a hit being verified): the answer is kept when done */
};

/* The timing rules, from the frontend's options. */
typedef struct {
    int max_requests;    /* slots: more in flight are refused (overloaded) */
    uint64_t accept_us;  /* an attempt no worker accepted by then is lost */
    uint64_t probe_us;   /* an attempt silent this long is probed */
    uint64_t give_up_us; /* a request with no new token for this long fails */
} serve_requests_cfg_t;

typedef struct serve_requests_t serve_requests_t;

/* A table of cfg->max_requests slots; rids count up from first_rid (a random start, so
 * that a restarted frontend never reuses an id whose events may still be on the way;
 * never 0).  NULL when out of memory. */
serve_requests_t *serve_requests_new(const serve_requests_cfg_t *cfg, uint64_t first_rid);
/* Frees every request and the table, nulls *self_p; safe twice. */
void serve_requests_destroy(serve_requests_t **self_p);

/* Slots (max_requests), and requests in them now. */
int serve_requests_slots(const serve_requests_t *self);
int serve_requests_count(const serve_requests_t *self);
/* Slot i (0..slots-1): a request when its rid is not 0, else a free slot. */
serve_request_t *serve_requests_at(serve_requests_t *self, int i);

/* The request whose current attempt is rid, or NULL (an attempt that was replaced, or
 * one of a frontend before this one). */
serve_request_t *serve_requests_find_rid(serve_requests_t *self, uint64_t rid);
/* The live (not gone) request of client ident with the client's id, or NULL. */
serve_request_t *serve_requests_find_client(serve_requests_t *self, const uint8_t *ident,
                                            size_t ident_len, const char *id);

/* Take a new request of client ident: g's prompt / messages are taken over (g keeps the
 * rest; the caller clears it).  have: the token events the client has already (a
 * resume), with their ids in tokens, or tokens NULL (those events are then skipped, not
 * sent again).  The request gets its first rid, arrival now_us, attempts 1.  NULL with
 * *err: -EEXIST (this client runs a request with this id), -ENOSPC (every slot is
 * taken, or ident is longer than SERVE_MAX_IDENT), -ENOMEM. */
serve_request_t *serve_requests_add(serve_requests_t *self, const uint8_t *ident, size_t ident_len,
                                    msg_generate_t *g, int have, const int32_t *tokens,
                                    uint64_t now_us, int *err);
/* Free r's slot (its rid is forgotten). */
void serve_requests_remove(serve_requests_t *self, serve_request_t *r);

/* ---- attempts */

/* r's current attempt was handed to the tokenizer at now_us (queued), or could not be
 * (its queue was full): then it is submitted again after a backoff (doubling, at most
 * SERVE_RETRY_MAX_US). */
void serve_requests_sent(serve_requests_t *self, serve_request_t *r, bool queued, uint64_t now_us);

/* r's current attempt is lost: may it go on?  -ETIMEDOUT when it made no progress for
 * give_up_us (it fails); else 0: r gets a new rid (events of the old one are dropped
 * from now on), attempts + 1, no worker; delay_us > 0: it waits that long before it is
 * submitted (*submit_now false), else *submit_now true. */
int serve_requests_next_attempt(serve_requests_t *self, serve_request_t *r, uint64_t delay_us,
                                uint64_t now_us, bool *submit_now);

/* A worker error of r's attempt (code: msg_code_t): true when the request waits and
 * tries again (*wait_us: the backoff, which doubles), false when it fails with it.  A
 * request the client already saw start is not refused for want of room, and no request
 * fails because a worker is restarting (internal). */
bool serve_requests_retry_error(serve_request_t *r, int code, uint64_t *wait_us);

/* A worker says it holds r's attempt: heard from, and queued at a live worker is
 * progress enough (give-up timer restarted). */
void serve_requests_held(serve_requests_t *self, serve_request_t *r, int worker, uint64_t now_us);

/* ---- events of an attempt */

typedef enum {
    SERVE_EVENT_ACCEPT,    /* in order: delivered (a token index >= 0 is recorded) */
    SERVE_EVENT_DUPLICATE, /* an index already delivered (a duplicated frame): dropped */
    SERVE_EVENT_INVALID,   /* an index past max_tokens (no worker sends that): dropped */
    SERVE_EVENT_GAP,       /* an event is missing before this one: the attempt is lost */
} serve_event_t;

/* An event of r's current attempt from worker: token index (-1: no token, text or the
 * end only), the token id, finish (msg_finish_t, 0: not the last) and count (the last
 * event: the completion tokens the worker counts).  Every event counts as hearing from
 * the attempt; an accepted token is recorded and restarts the give-up timer. */
serve_event_t serve_requests_event(serve_requests_t *self, serve_request_t *r, int worker,
                                   int index, int32_t token, int finish, int count,
                                   uint64_t now_us);
/* Whether the client gets token event index: r streams, and the client does not have it
 * already (a resume without token ids). */
bool serve_requests_to_client(const serve_request_t *r, int index);
/* Keep len bytes of completion text (stream false, or traced): 0 or -ENOMEM (the text
 * is then cut there). */
int serve_requests_keep_text(serve_request_t *r, const char *text, size_t len);
/* Stream false with logprobs: keep the log-probabilities of the token just recorded. */
void serve_requests_keep_logprob(serve_request_t *r, float logprob, const char *piece,
                                 const msg_top_t *top, int n_top);

/* ---- the watch, every 100 ms */

typedef enum {
    SERVE_DUE_NOTHING,
    SERVE_DUE_FINAL,      /* a slow reader's final error waits: try to send it */
    SERVE_DUE_SUBMIT,     /* its backoff is over: submit the attempt */
    SERVE_DUE_UNACCEPTED, /* no worker accepted the attempt in accept_us: lost */
    SERVE_DUE_SILENT,     /* SERVE_MAX_PROBES probes went unanswered: lost */
    SERVE_DUE_PROBE,      /* silent for probe_us: ask its worker (counted as sent) */
} serve_due_t;

/* What r needs at now_us. */
serve_due_t serve_requests_due(serve_requests_t *self, serve_request_t *r, uint64_t now_us);

/* Structured output of g (msgs/msg_client.h): json_schema or json_object compiled to GBNF
 * in g->grammar (malloc'd; json_schema freed and cleared, json_object cleared), and the
 * grammar checked by building it.  0 (also when g asks for none), -EINVAL with the reason in
 * err ("PATH: keyword: why" for a schema the engine cannot enforce), -ENOMEM. */
int serve_requests_grammar(msg_generate_t *g, char *err, size_t errlen);

/* Tool calls of g (docs/PROTOCOL.md, "Tool calls"): its tools, tool_choice and
 * parallel_tool_calls turned into a system turn (prepended to g's first message when that
 * is a system one, else a message of its own) and the call array's grammar in g->grammar,
 * as the http gateway does (serve_openai_tools_compile); tools and tool_choice cleared, so
 * g is what a resume sends again.  *mode: how the answer is read (NONE: no tools, or
 * tool_choice "none").  0, -EINVAL with the reason in err, -ENOMEM. */
int serve_requests_tools(msg_generate_t *g, serve_openai_tools_t *mode, char *err, size_t errlen);
/* The calls of an answer under tools (text, len bytes, all of it; id: the request's) as
 * done.tool_calls: the complete ones, in order (*calls malloc'd, *n of them; NULL and 0 when
 * the text is not a call array).  0 or -ENOMEM.  msg_done_clear-style ownership: free each
 * arguments, then the array (serve_requests_tool_calls_free). */
int serve_requests_tool_calls(const char *text, size_t len, const char *id, msg_tool_call_t **calls,
                              int *n);
void serve_requests_tool_calls_free(msg_tool_call_t *calls, int n);

#endif

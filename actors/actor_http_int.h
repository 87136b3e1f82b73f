/* actor_http_int.h - what the two halves of the http actor share: the request table and
 * its rows.  actor_http.c is the frontend's side (the generate / embed / cancel / resume it
 * sends, the events it receives, the actor's loop); actor_http_server.c is the HTTP side
 * (libmicrohttpd's callbacks, the routes' handlers, the answers' bytes).  Both run on the
 * actor's one thread.  Not an actor's header: only those two files include it. */
#ifndef ACTOR_HTTP_INT_H
#define ACTOR_HTTP_INT_H

#include "actor_runtime.h"
#include "base_buf.h"
#include "serve_access.h"
#include "serve_answer.h"
#include "serve_choices.h"
#include "serve_conns.h"
#include "serve_embed.h"
#include "serve_json.h"
#include "serve_models.h"
#include "serve_openai.h"
#include "serve_probes.h"
#include "serve_responses.h"
#include "serve_routes.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ACTOR_HTTP_TAG "http"

typedef enum {
    ACTOR_HTTP_READING,   /* headers seen, body arriving */
    ACTOR_HTTP_WAITING,   /* generate sent, suspended until its first event (stream) or done */
    ACTOR_HTTP_RESPONDED, /* a response is queued (a stream goes on through the content reader) */
} actor_http_state_t;

typedef struct actor_http_t actor_http_t;

/* One HTTP request (MHD's per-request context). */
typedef struct actor_http_req_t {
    actor_http_t *h;
    struct MHD_Connection *conn;
    struct actor_http_req_t *prev, *next; /* every live request, for the peek timer and shutdown */
    serve_handler_t route;                /* what answers it (serve_routes) */
    char allow[32];                       /* a 405's Allow header */
    actor_http_state_t state;
    char id[MSG_MAX_ID_BYTES + 1]; /* chatcmpl-... / cmpl-...: the response id and the
                                      request id towards the frontend */
    base_buf_t body;               /* the upload so far (a prefix route: its argument) */
    bool too_big;                  /* the body passed max_body */
    enum MHD_Result refusal;       /* s_body_refused's queued answer */
    bool in_flight;                /* generate sent, no done / error yet */
    bool suspended;                /* MHD_suspend_connection in force */
    bool peer_gone;                /* the client closed its side: end the connection */
    bool stream;                   /* SSE */
    bool started;                  /* the stream's first chunk is in out */
    bool finished;                 /* done / error seen: out holds all that is left */
    bool failed;                   /* an error event: code and message below */
    int code;                      /* msg_code_t of the error */
    char emsg[MSG_MAX_ERRMSG_BYTES + 1];
    base_buf_t out; /* stream: SSE bytes not yet handed to MHD (from out_off) */
    size_t out_off;
    /* what a resume needs after the frontend restarts (docs/PROTOCOL.md, resume) */
    void *gen; /* (gen_len) the generate frame as sent */
    size_t gen_len;
    int32_t *toks; /* (n_toks, cap_toks) the token ids received, in index order */
    int n_toks, cap_toks;
    /* the answer (serve_answer): what the choices share (the parent's), this one's */
    serve_answer_req_t areq;
    serve_answer_t *ans;
    msg_usage_t usage;
    /* Responses (serve_responses): the request's fields its answer repeats (areq.echo), the
     * conversation so far, and whether to keep it for previous_response_id */
    cJSON *echo, *history;
    bool keep;
    bool del;           /* DELETE (a kept response) */
    const char *origin; /* CORS: the request's Origin when it is allowed (MHD's), or NULL */
    /* embeddings: one `embed` per input, ids "<id>.<i>" */
    serve_embed_request_t *embq; /* the inputs (kept for a resume), or NULL */
    float *emb;                  /* (n_inputs, dim) the vectors as they come */
    bool *emb_got;               /* (n_inputs) */
    int n_emb_got;
    int emb_tokens; /* prompt tokens of all inputs */
    /* n > 1: the parent holds the choices, each child one of them */
    serve_choices_t *choices;         /* parent: the merge, or NULL (n = 1) */
    struct actor_http_req_t **kids;   /* parent: (n) the children, choice order */
    struct actor_http_req_t *parent;  /* child: the request it is a choice of (conn is NULL) */
    int choice;                       /* child: its index; else 0 */
    int cache_dropped, cache_entries; /* POST /v1/cache/invalidate: its cache_reply */
} actor_http_req_t;

struct actor_http_t {
    actor_env_t *env;
    zsock_t *in;       /* inbound PULL: ping, stats, stop */
    zsock_t *to_front; /* PUSH to the frontend's internal endpoint (pong, stats) */
    zsock_t *up;       /* DEALER to the frontend's client endpoint */
    actor_loop_t *loop;
    actor_counters_t *counters; /* the loop's */
    struct MHD_Daemon *d;
    zhashx_t *by_id;        /* id -> actor_http_req_t (borrowed): requests in flight */
    actor_http_req_t *reqs; /* every live request (list head) */
    serve_access_t *access; /* API keys and CORS origins */
    serve_models_t model;   /* the model's id, names, fingerprint, embedding size */
    size_t max_body;
    int max_tokens, top_k;
    double min_p;
    uint64_t seq;                   /* request ids */
    char boot[12];                  /* a random prefix of the ids of this run */
    zsock_t *mon;                   /* PAIR: the upstream DEALER's connection events */
    int connections;                /* handshakes with the frontend so far */
    serve_probes_t probes;          /* the frontend's last health_reply, for the probes */
    serve_conns_t *conns;           /* the connections' header and body deadlines */
    base_buf_t tls_cert, tls_key;   /* HTTPS: the PEM texts, kept while the daemon runs */
    serve_responses_store_t *store; /* finished responses, for previous_response_id and GET */
};

/* ---- the frontend's side (actor_http.c) */

/* Link r into the live requests. */
void actor_http_link(actor_http_t *h, actor_http_req_t *r);
/* Parse r's body (chat, completions or Responses) and send its generate(s).  0, or an HTTP
 * status to answer with (and b). */
unsigned actor_http_submit(actor_http_t *h, actor_http_req_t *r, serve_openai_bad_t *b);
/* Cancel r's generate (in flight): the worker frees its KV; later events are orphans. */
void actor_http_cancel(actor_http_t *h, actor_http_req_t *r);
/* Cancel r's choices still running (n > 1).  How many were. */
int actor_http_cancel_kids(actor_http_t *h, actor_http_req_t *r);
/* The id of input i of an embeddings request r towards the frontend. */
void actor_http_embed_id(const actor_http_req_t *r, int i, char *out, size_t cap);
/* Send the embed of input i of r.  0, -EINVAL (too long for the protocol), or -EAGAIN (the
 * queue to the frontend is full). */
int actor_http_embed_send(actor_http_t *h, actor_http_req_t *r, int i);
/* Forget r's embeds in flight (cancel: tell the frontend too). */
void actor_http_embed_forget(actor_http_t *h, actor_http_req_t *r, bool cancel);
/* The answers of r's choices, in index order, into a (SERVE_CHOICES_MAX); how many. */
int actor_http_answers(actor_http_req_t *r, serve_answer_t **a);

/* ---- the answer cache's route (actor_http_cache.c) */

/* Parse r's body as POST /v1/cache/invalidate's and send its cache_invalidate (r->id set).
 * 0, or an HTTP status to answer with (and b). */
unsigned actor_http_invalidate_submit(actor_http_t *h, actor_http_req_t *r, serve_openai_bad_t *b);
/* A cache_reply came: its request ends (woken).  True: handled (an orphan is counted). */
bool actor_http_on_cache_reply(actor_http_t *h, const msg_cache_reply_t *m);
/* The answer of a finished invalidation: {"dropped", "entries"}.  NULL when out of memory. */
cJSON *actor_http_invalidate_answer(const actor_http_req_t *r);

/* ---- the HTTP side (actor_http_server.c) */

/* Resume r's connection when it is suspended (an event came, or its client is gone). */
void actor_http_wake(actor_http_req_t *r);
/* The listener's limits (the http actor's options). */
typedef struct {
    int max_conn;         /* connections open at once */
    int max_per_ip;       /* of them from one peer address */
    int timeout_s;        /* idle */
    int header_timeout_s; /* a request's headers must be in this long after it may start */
    int body_timeout_s;   /* its body this long after its headers */
    const char *tls_cert; /* HTTPS with these two PEM files (both or neither) */
    const char *tls_key;
} actor_http_limits_t;

/* Start libmicrohttpd on listen ("HOST:PORT", "[V6]:PORT") in external epoll mode with lim:
 * h->d and its epoll fd (*epoll_fd).  0, or -1 with why. */
int actor_http_server_start(actor_http_t *h, const char *listen, const actor_http_limits_t *lim,
                            int *epoll_fd, char *why, size_t whylen);
/* The loop's idle hook: run MHD; the loop's next wait (ms). */
int actor_http_server_idle(void *self);
/* Notice clients gone from suspended requests (a peek at their sockets), and shut the
 * connections past their header or body deadline (serve_conns). */
void actor_http_server_peek(actor_http_t *h);
/* End every suspended request and stop MHD. */
void actor_http_server_stop(actor_http_t *h);

#endif

/* actor_http.c - the http gateway actor: OpenAI's /v1/chat/completions,
 * /v1/completions, /v1/embeddings, /v1/models[/{id}] and /health over libmicrohttpd
 * (with CORS when origins are configured), turned into
 * client-protocol requests on one DEALER to the frontend.  It owns the HTTP
 * daemon, the table of HTTP requests and the DEALER.
 *
 * Threads: one.  libmicrohttpd runs in "external polling" mode with epoll:
 * its epoll fd is one more source of the actor loop (actor_loop_fd), and the
 * idle hook calls MHD_run after every wakeup and returns MHD's next timeout as
 * the loop's wait.  So every MHD callback runs on the actor's thread, the same
 * thread that owns the DEALER: no state is shared and nothing crosses threads.
 * A request that waits for the frontend is suspended (MHD_suspend_connection:
 * MHD stops polling it); an event from the frontend appends to the request's
 * output buffer and resumes it.  A streaming response is a chunked response
 * whose content reader hands out what is buffered, or suspends the connection
 * and returns 0 when nothing is.  Suspended connections are not watched by
 * MHD, so a timer peeks their sockets (recv MSG_PEEK: 0 = the client closed)
 * every 500 ms; a client gone mid-request, or one whose write fails, ends its
 * connection, and the completion callback sends `cancel` for a request still
 * in flight, which frees its KV in the worker.
 *
 * n > 1 (serve_choices): the request sends one generate per choice, each from a child
 * request with no connection of its own (in the table, so a resume sends it again); a
 * child's events go into its parent: its chunks into the parent's stream (with its
 * index), its answer into the parent's choices; the first error, or the client leaving,
 * cancels the children still running.
 *
 * Limits: max_body (413), max_connections (MHD refuses more), timeout_s
 * (MHD_OPTION_CONNECTION_TIMEOUT: a connection that sends nothing for that
 * long, headers or body, is closed), MHD's 32 KiB header memory per connection.
 */
#include "actor_http.h"

#include "actor_curve.h"
#include "base_buf.h"
#include "base_log.h"
#include "serve_access.h"
#include "serve_answer.h"
#include "serve_choices.h"
#include "serve_embed.h"
#include "serve_models.h"
#include "serve_openai.h"
#include "serve_responses.h"
#include "serve_routes.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#define TAG "http"

const actor_opt_t actor_http_opts[] = {
    {"listen", ACTOR_OPT_STRING, "127.0.0.1:8080", 0, 0, NULL,
     "HOST:PORT of the OpenAI-compatible HTTP API (docs/HTTP.md)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, listen)},
    {"upstream", ACTOR_OPT_STRING, NULL, 0, 0, NULL,
     "the frontend's client endpoint it connects to (default: the frontend's client option)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, upstream)},
    {"client_key", ACTOR_OPT_PATH, NULL, 0, 0, NULL,
     "CURVE key pair (zcert file) it connects to the frontend with when the frontend has "
     "client_secret; its public key must be in client_allow",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, client_key)},
    {"api_key_file", ACTOR_OPT_PATH, NULL, 0, 0, NULL,
     "API keys, one per line: requests need 'Authorization: Bearer KEY' (default: none needed)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, api_key_file)},
    {"model_name", ACTOR_OPT_STRING, NULL, 0, 0, NULL,
     "model id in /v1/models and responses (default: the model's file name)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, model_name)},
    {"max_body", ACTOR_OPT_INT, "1048576", 1024, 64 << 20, NULL,
     "largest request body in bytes (413 above)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, max_body)},
    {"max_connections", ACTOR_OPT_INT, "256", 1, 65536, NULL,
     "HTTP connections open at once (more are refused)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, max_connections)},
    {"timeout_s", ACTOR_OPT_INT, "30", 1, 3600, NULL,
     "an HTTP connection that sends nothing this long (headers, body, next request) is closed",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, timeout_s)},
    {"max_tokens", ACTOR_OPT_INT, "0", 0, MSG_MAX_TOKENS, NULL,
     "a request that gives neither max_tokens nor max_completion_tokens generates until the "
     "context ends (as OpenAI), and at most this many tokens (0: the protocol's 8192)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, max_tokens)},
    {"top_k", ACTOR_OPT_INT, "0", 0, MSG_MAX_TOP_K, NULL,
     "top_k of a request that gives none (0: off, as OpenAI)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, top_k)},
    {"min_p", ACTOR_OPT_DOUBLE, "0", 0, 1, NULL,
     "min_p of a request that gives none (0: off, as OpenAI)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, min_p)},
    {"cors_origin", ACTOR_OPT_STRING, NULL, 0, 0, NULL,
     "CORS: the browser origins allowed to call the API (comma-separated, e.g. "
     "https://app.example.com, or * for any); default: none (no CORS headers, OPTIONS is 405)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, cors_origin)},
    {NULL},
};

typedef enum {
    S_READING,   /* headers seen, body arriving */
    S_WAITING,   /* generate sent, suspended until its first event (stream) or done */
    S_RESPONDED, /* a response is queued (a stream goes on through the content reader) */
} s_state_t;

typedef struct s_http_t s_http_t;

/* One HTTP request (MHD's per-request context). */
typedef struct s_req_t {
    s_http_t *h;
    struct MHD_Connection *conn;
    struct s_req_t *prev, *next; /* every live request, for the peek timer and shutdown */
    serve_handler_t route;       /* what answers it (serve_routes) */
    char allow[32];              /* a 405's Allow header */
    s_state_t state;
    char id[MSG_MAX_ID_BYTES + 1]; /* chatcmpl-... / cmpl-...: the response id and the
                                      request id towards the frontend */
    base_buf_t body;               /* the upload so far (a prefix route: its argument) */
    bool too_big;                  /* the body passed max_body */
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
    serve_choices_t *choices; /* parent: the merge, or NULL (n = 1) */
    struct s_req_t **kids;    /* parent: (n) the children, choice order */
    struct s_req_t *parent;   /* child: the request it is a choice of (conn is NULL) */
    int choice;               /* child: its index; else 0 */
} s_req_t;

struct s_http_t {
    actor_env_t *env;
    zsock_t *in;       /* inbound PULL: ping, stats, stop */
    zsock_t *to_front; /* PUSH to the frontend's internal endpoint (pong, stats) */
    zsock_t *up;       /* DEALER to the frontend's client endpoint */
    actor_loop_t *loop;
    actor_counters_t *counters; /* the loop's */
    struct MHD_Daemon *d;
    zhashx_t *by_id;        /* id -> s_req_t (borrowed): requests in flight */
    s_req_t *reqs;          /* every live request (list head) */
    serve_access_t *access; /* API keys and CORS origins */
    serve_models_t model;   /* the model's id, names, fingerprint, embedding size */
    size_t max_body;
    int max_tokens, top_k;
    double min_p;
    uint64_t seq;                   /* request ids */
    char boot[12];                  /* a random prefix of the ids of this run */
    zsock_t *mon;                   /* PAIR: the upstream DEALER's connection events */
    int connections;                /* handshakes with the frontend so far */
    bool healthy;                   /* the last health_reply said ok */
    uint64_t health_us;             /* when it came */
    serve_responses_store_t *store; /* finished responses, for previous_response_id and GET */
};

/* the gateway's sockets between actors (its DEALER to the frontend's client endpoint is its own) */
static const actor_sock_decl_t s_socks[] = {
    {ACTOR_SOCK_FIELD(s_http_t, in), ACTOR_SOCK_IN, NULL, ACTOR_HWM_CTL, ACTOR_MAX_FRAME, false},
    {ACTOR_SOCK_FIELD(s_http_t, to_front), ACTOR_SOCK_OUT, "frontend", ACTOR_HWM_CTL, 0, false},
    {0},
};

/* ---- small helpers */

/* Resume r when it is suspended (an event came, or its client is gone). */
static void s_wake(s_req_t *r) {
    if (r->parent)
        r = r->parent;
    if (r->suspended) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    }
}

static void s_suspend(s_req_t *r) {
    if (!r->suspended) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
    }
}

static void s_count_status(s_http_t *h, unsigned status) {
    char name[32];
    snprintf(name, sizeof name, "status.%u", status);
    actor_counters_add(h->counters, name, 1);
}

/* CORS (docs/HTTP.md): whether origin is one of the allowed ones. */
/* The CORS headers of a response to an allowed origin. */
static void s_cors_headers(const s_req_t *r, struct MHD_Response *resp) {
    if (!r->origin)
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->origin);
    MHD_add_response_header(resp, "Vary", "Origin");
}

/* Queue body (malloc'd, taken) as r's response with status. */
static enum MHD_Result s_queue(s_req_t *r, unsigned status, char *body, const char *ctype,
                               const char *hdr, const char *hdr_value) {
    struct MHD_Response *resp =
        body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (hdr)
        MHD_add_response_header(resp, hdr, hdr_value);
    s_cors_headers(r, resp);
    enum MHD_Result rc = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->state = S_RESPONDED;
    s_count_status(r->h, status);
    return rc;
}

static enum MHD_Result s_queue_json(s_req_t *r, unsigned status, cJSON *obj, const char *hdr,
                                    const char *hdr_value) {
    char *body = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    return s_queue(r, status, body, "application/json", hdr, hdr_value);
}

static enum MHD_Result s_error(s_req_t *r, unsigned status, const char *param, const char *code,
                               const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result s_error(s_req_t *r, unsigned status, const char *param, const char *code,
                               const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *type = status == 401   ? "authentication_error"
                       : status == 429 ? "rate_limit_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    const char *hdr = NULL, *val = NULL;
    if (status == 429)
        hdr = MHD_HTTP_HEADER_RETRY_AFTER, val = "1";
    else if (status == 401)
        hdr = MHD_HTTP_HEADER_WWW_AUTHENTICATE, val = "Bearer";
    else if (status == 405)
        hdr = MHD_HTTP_HEADER_ALLOW, val = r->allow;
    return s_queue_json(r, status, serve_answer_error_obj(msg, type, param, code), hdr, val);
}

/* The HTTP answer to a frontend error code. */
static enum MHD_Result s_error_from_code(s_req_t *r) {
    switch (r->code) {
    case MSG_CODE_BAD_REQUEST:
        if (r->route == SERVE_HANDLER_EMBEDDINGS && strstr(r->emsg, "fit in the context"))
            return s_error(r, 400, "input", "context_length_exceeded", "%s", r->emsg);
        return s_error(r, 400, NULL, "bad_request", "%s", r->emsg);
    case MSG_CODE_CONTEXT:
        return s_error(r, 400, r->route == SERVE_HANDLER_CHAT ? "messages" : "prompt",
                       "context_length_exceeded", "%s", r->emsg);
    case MSG_CODE_OVERLOADED:
        return s_error(r, 429, NULL, "overloaded", "%s", r->emsg);
    default:
        return s_error(r, 500, NULL, "internal", "%s", r->emsg);
    }
}

/* ---- request bodies: OpenAI fields -> generate (serve/serve_openai.c) */

/* Link r into the live requests. */
static void s_link(s_http_t *h, s_req_t *r) {
    r->next = h->reqs;
    if (h->reqs)
        h->reqs->prev = r;
    h->reqs = r;
}

/* Send g as r's generate (the frame kept: a resume after a frontend restart sends it
 * again).  0, or an HTTP status to answer with (and b). */
static unsigned s_send(s_http_t *h, s_req_t *r, const msg_generate_t *g, serve_openai_bad_t *b) {
    void *buf = NULL;
    size_t len = 0;
    msg_err_t err;
    if (msg_encode(MSG_GENERATE, g, &buf, &len, &err)) { /* a protocol limit (prompt size) */
        snprintf(b->param, sizeof b->param, "%s", err.field);
        snprintf(b->msg, sizeof b->msg, "%s", err.msg);
        return 400;
    }
    int sent = zmq_send(zsock_resolve(h->up), buf, len, ZMQ_DONTWAIT);
    free(r->gen);
    r->gen = buf;
    r->gen_len = len;
    if (sent < 0) {
        snprintf(b->msg, sizeof b->msg,
                 "the server is overloaded (its queue to the frontend is full)");
        return 429;
    }
    r->in_flight = true;
    zhashx_insert(h->by_id, r->id, r);
    return 0;
}

/* n > 1: a child of r per choice, each sent as its own generate (serve_choices).  0, or
 * an HTTP status (and b); the children sent are cancelled when r completes. */
static unsigned s_send_choices(s_http_t *h, s_req_t *r, const msg_generate_t *g, int n,
                               serve_openai_bad_t *b) {
    if (!(r->choices = serve_choices_new(r->id, n)) ||
        !(r->kids = calloc((size_t)n, sizeof *r->kids))) {
        snprintf(b->msg, sizeof b->msg, "out of memory");
        return 500;
    }
    for (int i = 0; i < n; i++) {
        s_req_t *k = r->kids[i] = calloc(1, sizeof *k);
        if (!k) {
            snprintf(b->msg, sizeof b->msg, "out of memory");
            return 500;
        }
        *k = (s_req_t){.h = h,
                       .parent = r,
                       .choice = i,
                       .route = r->route,
                       .stream = r->stream,
                       .ans = serve_answer_new(&r->areq, i)};
        s_link(h, k); /* in the table: a resume sends it again */
        if (!k->ans) {
            snprintf(b->msg, sizeof b->msg, "out of memory");
            return 500;
        }
        msg_generate_t cg;
        serve_choices_generate(r->choices, i, g, &cg);
        memcpy(k->id, cg.id, sizeof k->id);
        unsigned status = s_send(h, k, &cg, b);
        if (status)
            return status;
    }
    return 0;
}

/* Cancel r's generate (in flight): the worker frees its KV; later events are orphans. */
static void s_cancel(s_http_t *h, s_req_t *r) {
    msg_cancel_t c;
    msg_cancel_init(&c);
    memcpy(c.id, r->id, sizeof c.id);
    void *buf;
    size_t len;
    msg_err_t err;
    if (!msg_encode(MSG_CANCEL, &c, &buf, &len, &err)) {
        zmq_send(zsock_resolve(h->up), buf, len, ZMQ_DONTWAIT);
        free(buf);
    }
    zhashx_delete(h->by_id, r->id);
    r->in_flight = false;
    actor_counters_add(h->counters, "cancelled", 1);
}

/* Cancel r's choices still running (n > 1).  How many were. */
static int s_cancel_kids(s_http_t *h, s_req_t *r) {
    int n = 0;
    for (int i = 0; r->kids && i < serve_choices_n(r->choices); i++)
        if (r->kids[i] && r->kids[i]->in_flight) {
            s_cancel(h, r->kids[i]);
            n++;
        }
    return n;
}

/* Parse r's body (chat, completions or Responses) and send its generate.  0, or an HTTP
 * status to answer with (and b). */
static unsigned s_submit(s_http_t *h, s_req_t *r, serve_openai_bad_t *b) {
    static const struct {
        serve_answer_api_t api;
        const char *prefix; /* of the response id */
    } apis[SERVE_HANDLER_N] = {
        [SERVE_HANDLER_CHAT] = {SERVE_ANSWER_CHAT, "chatcmpl-"},
        [SERVE_HANDLER_COMPLETIONS] = {SERVE_ANSWER_COMPLETIONS, "cmpl-"},
        [SERVE_HANDLER_RESPONSES] = {SERVE_ANSWER_RESPONSES, "resp_"},
    };
    serve_answer_api_t api = apis[r->route].api;
    serve_responses_request_t rq = {0};
    serve_openai_request_t *q = &rq.chat;
    const serve_openai_defaults_t def = {h->max_tokens, h->top_k, h->min_p};
    uint64_t seed; /* OpenAI: a fresh sample every time */
    if (getrandom(&seed, sizeof seed, 0) != sizeof seed)
        seed = base_now_us() ^ h->seq;
    unsigned status = 0;
    snprintf(r->id, sizeof r->id, "%s%s%llx", apis[r->route].prefix, h->boot,
             (unsigned long long)++h->seq);
    int rc =
        api == SERVE_ANSWER_RESPONSES
            ? serve_responses_request_parse(&rq, r->body.p, r->body.len, h->store, &def, seed, b)
            : serve_openai_request_parse(
                  q, api == SERVE_ANSWER_CHAT ? SERVE_OPENAI_CHAT : SERVE_OPENAI_COMPLETIONS,
                  r->body.p, r->body.len, &def, seed, b);
    if (rc) {
        if (rc == -EBADMSG)
            actor_counters_add(h->counters, "bad_json", 1);
        status = rc == -ENOMEM ? 500 : 400;
        goto out;
    }
    msg_generate_t *g = &q->gen;
    r->stream = g->stream;
    r->echo = rq.echo; /* taken */
    r->history = rq.history;
    r->keep = rq.store;
    rq.echo = rq.history = NULL;
    r->areq = (serve_answer_req_t){.api = api,
                                   .model = h->model.id,
                                   .fingerprint = h->model.fingerprint,
                                   .created = time(NULL),
                                   .stream = g->stream,
                                   .include_usage = q->include_usage,
                                   .logprobs = g->logprobs,
                                   .tools = q->tools,
                                   .functions = q->functions,
                                   .echo = r->echo};
    memcpy(r->areq.id, r->id, sizeof r->areq.id);
    memcpy(g->id, r->id, sizeof g->id);
    if (q->n == 1 && !(r->ans = serve_answer_new(&r->areq, 0))) {
        snprintf(b->msg, sizeof b->msg, "out of memory");
        status = 500;
        goto out;
    }
    status = q->n > 1 ? s_send_choices(h, r, g, q->n, b) : s_send(h, r, g, b);
    if (!status)
        actor_counters_add(h->counters, r->stream ? "generate.stream" : "generate.json", 1);
out:
    serve_responses_request_clear(&rq);
    return status;
}

/* Responses: keep r's conversation and response for a later previous_response_id. */
static void s_keep(s_http_t *h, s_req_t *r, const msg_usage_t *u) {
    cJSON *m = serve_answer_message(r->ans), *resp = serve_answer_json(&r->ans, 1, u);
    if (m && r->history)
        cJSON_AddItemToArray(r->history, m);
    else
        cJSON_Delete(m);
    if (m && serve_responses_store_put(h->store, r->id, &r->history, &resp))
        LOG_W(TAG, "%s: out of memory: the response is not kept", r->id);
    cJSON_Delete(resp);
}

/* ---- model names and embeddings */

/* The 404 of a model name no one serves here. */
static enum MHD_Result s_model_not_found(s_req_t *r, const char *name) {
    return s_error(r, 404, "model", "model_not_found",
                   "The model '%s' does not exist: this server serves '%s'", name, r->h->model.id);
}

/* The id of input i of r towards the frontend. */
static void s_embed_id(const s_req_t *r, int i, char *out, size_t cap) {
    snprintf(out, cap, "%.48s.%d", r->id, i);
}

/* Send the embed of input i of r.  0, or -EAGAIN (the queue to the frontend is full). */
static int s_embed_send(s_http_t *h, s_req_t *r, int i) {
    const serve_embed_input_t *in = &r->embq->inputs[i];
    msg_embed_t e;
    msg_embed_init(&e);
    s_embed_id(r, i, e.id, sizeof e.id);
    e.prompt = in->text; /* borrowed */
    e.prompt_len = in->text ? strlen(in->text) : 0;
    e.tokens = in->ids;
    e.n_tokens = in->n_ids;
    void *buf = NULL;
    size_t len = 0;
    msg_err_t err;
    if (msg_encode(MSG_EMBED, &e, &buf, &len, &err)) /* a protocol limit */
        return -EINVAL;
    int sent = zmq_send(zsock_resolve(h->up), buf, len, ZMQ_DONTWAIT);
    free(buf);
    return sent < 0 ? -EAGAIN : 0;
}

/* Forget r's inputs still in flight (cancel them when cancel). */
static void s_embed_forget(s_http_t *h, s_req_t *r, bool cancel) {
    for (int i = 0; r->embq && i < r->embq->n_inputs; i++) {
        if (r->emb_got[i])
            continue;
        char id[MSG_MAX_ID_BYTES + 1];
        s_embed_id(r, i, id, sizeof id);
        if (!zhashx_lookup(h->by_id, id))
            continue;
        zhashx_delete(h->by_id, id);
        msg_cancel_t c;
        msg_cancel_init(&c);
        memcpy(c.id, id, sizeof c.id);
        void *buf;
        size_t len;
        msg_err_t err;
        if (cancel && !msg_encode(MSG_CANCEL, &c, &buf, &len, &err)) {
            zmq_send(zsock_resolve(h->up), buf, len, ZMQ_DONTWAIT);
            free(buf);
        }
    }
}

/* The vector of one input came. */
static void s_on_embedding(s_http_t *h, const msg_embedding_t *e) {
    s_req_t *r = zhashx_lookup(h->by_id, e->id);
    const char *dot = strrchr(e->id, '.');
    int i = dot ? atoi(dot + 1) : -1;
    if (!r || !r->embq || i < 0 || i >= r->embq->n_inputs || r->emb_got[i] ||
        e->dim != h->model.dim) {
        actor_counters_add(h->counters, r ? "upstream.malformed" : "events.orphan", 1);
        return;
    }
    zhashx_delete(h->by_id, e->id);
    memcpy(r->emb + (size_t)i * h->model.dim, e->embedding, (size_t)h->model.dim * sizeof *r->emb);
    r->emb_got[i] = true;
    r->emb_tokens += e->prompt_tokens;
    if (++r->n_emb_got == r->embq->n_inputs) {
        r->in_flight = false;
        r->finished = true;
        s_wake(r);
    }
}

/* POST /v1/embeddings: read the inputs, send one embed each, wait for all. */
static enum MHD_Result s_respond_embeddings(s_req_t *r) {
    s_http_t *h = r->h;
    if (r->too_big)
        return s_error(r, 413, NULL, "body_too_large", "the body is larger than %zu bytes",
                       h->max_body);
    if (!h->model.dim)
        return s_error(r, 500, NULL, "internal", "the model's embedding size is not known");
    serve_openai_bad_t b = {{0}, {0}};
    serve_embed_request_t q;
    int rc = serve_embed_parse(&q, r->body.p ? r->body.p : "", r->body.len, h->model.dim, &b);
    base_buf_free(&r->body);
    if (rc) {
        if (rc == -EBADMSG)
            actor_counters_add(h->counters, "bad_json", 1);
        return s_error(r, rc == -ENOMEM ? 500 : 400, b.param,
                       rc == -ENOMEM ? "internal" : "invalid_request", "%s", b.msg);
    }
    if (q.model && !serve_models_known(&h->model, q.model)) {
        enum MHD_Result x = s_model_not_found(r, q.model);
        serve_embed_clear(&q);
        return x;
    }
    r->embq = malloc(sizeof *r->embq);
    r->emb = malloc((size_t)q.n_inputs * h->model.dim * sizeof *r->emb);
    r->emb_got = calloc((size_t)q.n_inputs, sizeof *r->emb_got);
    if (!r->embq || !r->emb || !r->emb_got) {
        serve_embed_clear(&q);
        return s_error(r, 500, NULL, "internal", "out of memory");
    }
    *r->embq = q; /* taken */
    snprintf(r->id, sizeof r->id, "embd-%s%llx", h->boot, (unsigned long long)++h->seq);
    for (int i = 0; i < q.n_inputs; i++) {
        rc = s_embed_send(h, r, i);
        if (rc) {
            s_embed_forget(h, r, true);
            return s_error(r, rc == -EINVAL ? 400 : 429, rc == -EINVAL ? "input" : NULL,
                           rc == -EINVAL ? "invalid_request" : "overloaded", "%s",
                           rc == -EINVAL ? "an input is longer than the protocol allows"
                                         : "the server is overloaded (its queue to the "
                                           "frontend is full)");
        }
        char id[MSG_MAX_ID_BYTES + 1];
        s_embed_id(r, i, id, sizeof id);
        zhashx_insert(h->by_id, id, r);
    }
    r->in_flight = true;
    actor_counters_add(h->counters, "embeddings", 1);
    actor_counters_add(h->counters, "embeddings.inputs", q.n_inputs);
    r->state = S_WAITING;
    s_suspend(r);
    return MHD_YES;
}

static enum MHD_Result s_respond_embedded(s_req_t *r) {
    const serve_embed_request_t *q = r->embq;
    cJSON *o = serve_embed_response(r->emb, q->n_inputs, r->h->model.dim, q->base64, r->h->model.id,
                                    r->emb_tokens);
    if (!o)
        return s_error(r, 500, NULL, "internal", "out of memory");
    return s_queue_json(r, 200, o, NULL, NULL);
}

/* ---- answers (serve_answer) */

/* The stream r's chunks go to: its own, or its parent's (a choice). */
static base_buf_t *s_stream_of(s_req_t *r) {
    return r->parent ? &r->parent->out : &r->out;
}

/* The answers of r's choices, in index order (n set), into a (SERVE_CHOICES_MAX). */
static int s_answers(s_req_t *r, serve_answer_t **a) {
    int n = r->kids ? serve_choices_n(r->choices) : 1;
    for (int i = 0; i < n; i++)
        a[i] = r->kids ? r->kids[i]->ans : r->ans;
    return n;
}

static void s_on_token(s_http_t *h, const msg_token_t *t) {
    s_req_t *r = zhashx_lookup(h->by_id, t->id);
    if (!r) {
        actor_counters_add(h->counters, "events.orphan", 1);
        return;
    }
    if (t->index < r->n_toks) /* sent again after a resume: delivered already */
        return;
    if (r->n_toks == r->cap_toks) {
        int cap = r->cap_toks ? 2 * r->cap_toks : 64;
        int32_t *x = realloc(r->toks, (size_t)cap * sizeof *x);
        if (x) {
            r->toks = x;
            r->cap_toks = cap;
        }
    }
    if (r->n_toks < r->cap_toks && t->index == r->n_toks)
        r->toks[r->n_toks++] = t->token;
    if (!r->stream)
        return;
    r->started = true;
    if (r->parent)
        r->parent->started = true;
    if (serve_answer_token(r->ans, t, s_stream_of(r)))
        r->peer_gone = true; /* out of memory: end this connection */
    s_wake(r);
}

static void s_end(s_http_t *h, s_req_t *r) {
    zhashx_delete(h->by_id, r->id);
    r->in_flight = false;
    r->finished = true;
    s_req_t *p = r->parent;
    if (p && !p->finished && serve_choices_all_done(p->choices)) { /* the last choice */
        serve_choices_usage(p->choices, &p->usage);
        serve_answer_t *a[SERVE_CHOICES_MAX];
        int n = s_answers(p, a);
        if (p->stream && serve_answer_stream_end(a, n, &p->usage, &p->out))
            p->peer_gone = true;
        p->finished = true;
    }
    s_wake(r);
}

static void s_on_done(s_http_t *h, msg_done_t *d) {
    s_req_t *r = zhashx_lookup(h->by_id, d->id);
    if (!r) {
        actor_counters_add(h->counters, "events.orphan", 1);
        return;
    }
    r->usage = d->usage;
    if (r->stream) {
        r->started = true;
        if (r->parent)
            r->parent->started = true;
    }
    base_buf_t *out = s_stream_of(r);
    if (serve_answer_done(r->ans, d, out) ||
        (r->stream && !r->parent && serve_answer_stream_end(&r->ans, 1, &d->usage, out)))
        r->peer_gone = true; /* out of memory: end this connection */
    if (r->parent)           /* a choice's parent ends when all have (s_end) */
        serve_choices_done(r->parent->choices, r->choice, d->finish_reason, &d->usage);
    if (r->keep)
        s_keep(h, r, &d->usage);
    s_end(h, r);
}

static void s_on_error(s_http_t *h, const msg_error_t *e) {
    s_req_t *r = e->id[0] ? zhashx_lookup(h->by_id, e->id) : NULL;
    if (!r) {
        if (e->code != MSG_CODE_NOT_FOUND) /* not_found: a cancel raced the end */
            LOG_W(TAG, "frontend error for %s: %s", e->id[0] ? e->id : "(no id)", e->message);
        return;
    }
    serve_answer_t *ans = r->ans;
    if (r->parent) { /* one choice failed: the request fails, the others are cancelled */
        zhashx_delete(h->by_id, e->id);
        r->in_flight = false;
        r = r->parent;
        s_cancel_kids(h, r);
    }
    r->failed = true;
    r->code = e->code;
    snprintf(r->emsg, sizeof r->emsg, "%s", e->message);
    if (r->embq) { /* one input failed: the request fails, the others are cancelled */
        const char *dot = strrchr(e->id, '.');
        if (dot && r->embq->n_inputs > 1)
            snprintf(r->emsg, sizeof r->emsg, "input[%.8s]: %.480s", dot + 1, e->message);
        zhashx_delete(h->by_id, e->id);
        s_embed_forget(h, r, true);
        r->in_flight = false;
        r->finished = true;
        s_wake(r);
        return;
    }
    /* a stream that began (its chunks buffered, whether or not MHD has asked for them yet)
     * ends with an error chunk; one that did not is answered with the HTTP error */
    if (r->stream && r->started && serve_answer_stream_error(ans, e->code, e->message, &r->out))
        r->peer_gone = true;
    s_end(h, r);
}

/* Content reader of a stream: what is buffered, else suspend until there is more. */
static ssize_t s_read_stream(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    s_req_t *r = cls;
    if (r->peer_gone)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (r->out_off < r->out.len) {
        size_t n = r->out.len - r->out_off;
        if (n > max)
            n = max;
        memcpy(buf, r->out.p + r->out_off, n);
        r->out_off += n;
        if (r->out_off == r->out.len) {
            base_buf_reset(&r->out);
            r->out_off = 0;
        }
        return (ssize_t)n;
    }
    if (r->finished)
        return MHD_CONTENT_READER_END_OF_STREAM;
    s_suspend(r);
    return 0;
}

static enum MHD_Result s_respond_stream(s_req_t *r) {
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, s_read_stream, r, NULL);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    s_cors_headers(r, resp);
    enum MHD_Result rc = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    r->state = S_RESPONDED;
    s_count_status(r->h, 200);
    return rc;
}

/* The answer: one choice, or n (a child each, in index order). */
static enum MHD_Result s_respond_json(s_req_t *r) {
    serve_answer_t *a[SERVE_CHOICES_MAX];
    int n = s_answers(r, a);
    cJSON *o = serve_answer_json(a, n, &r->usage);
    if (!o)
        return s_error(r, 500, NULL, "internal", "out of memory");
    return s_queue_json(r, 200, o, NULL, NULL);
}

static enum MHD_Result s_respond_models(s_req_t *r) {
    return s_queue_json(r, 200, serve_models_list(&r->h->model), NULL, NULL);
}

/* GET /v1/models/{id}: the model object when id is one of its names. */
static enum MHD_Result s_respond_model(s_req_t *r) {
    const char *id = r->body.p ? r->body.p : ""; /* the route's argument, put there */
    if (!serve_models_known(&r->h->model, id))
        return s_model_not_found(r, id);
    return s_queue_json(r, 200, serve_models_object(&r->h->model), NULL, NULL);
}

/* GET /v1/responses/{id}: a kept response; DELETE: forget it. */
static enum MHD_Result s_respond_response(s_req_t *r) {
    const char *id = r->body.p ? r->body.p : ""; /* the route's argument, put there */
    const cJSON *kept = serve_responses_store_response(r->h->store, id);
    if (!kept)
        return s_error(r, 404, "response_id", "not_found", "No response with id '%.80s' is kept",
                       id);
    if (!r->del)
        return s_queue_json(r, 200, cJSON_Duplicate(kept, true), NULL, NULL);
    serve_responses_store_delete(r->h->store, id);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "response.deleted");
    cJSON_AddBoolToObject(o, "deleted", true);
    return s_queue_json(r, 200, o, NULL, NULL);
}

static enum MHD_Result s_respond_health(s_req_t *r) {
    s_http_t *h = r->h;
    bool fresh = h->health_us && base_now_us() - h->health_us < 2000000;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status",
                            fresh && h->healthy ? "ok"
                            : fresh             ? "starting"
                                                : "unavailable");
    return s_queue_json(r, fresh && h->healthy ? 200 : 503, o, NULL, NULL);
}

/* ---- MHD callbacks */

/* A chat or legacy completion: parse, send the generate, wait for its events. */
static enum MHD_Result s_respond_generate(s_req_t *r) {
    s_http_t *h = r->h;
    if (r->too_big)
        return s_error(r, 413, NULL, "body_too_large", "the body is larger than %zu bytes",
                       h->max_body);
    cJSON *body = r->body.p ? cJSON_ParseWithLength(r->body.p, r->body.len) : NULL;
    const cJSON *model =
        cJSON_IsObject(body) ? cJSON_GetObjectItemCaseSensitive(body, "model") : NULL;
    if (cJSON_IsString(model) && !serve_models_known(&h->model, model->valuestring)) {
        enum MHD_Result x = s_model_not_found(r, model->valuestring);
        cJSON_Delete(body);
        return x;
    }
    cJSON_Delete(body);
    serve_openai_bad_t b = {{0}, {0}};
    unsigned status = s_submit(h, r, &b);
    base_buf_free(&r->body);
    if (status)
        return s_error(r, status, status == 400 ? b.param : NULL,
                       !strcmp(b.param, "previous_response_id") ? "previous_response_not_found"
                       : status == 400                          ? "invalid_request"
                       : status == 429                          ? "overloaded"
                                                                : "internal",
                       "%s", b.msg);
    r->state = S_WAITING;
    s_suspend(r);
    return MHD_YES;
}

/* The function of each handler of serve_routes' table. */
static enum MHD_Result (*const s_handlers[SERVE_HANDLER_N])(s_req_t *r) = {
    [SERVE_HANDLER_CHAT] = s_respond_generate,
    [SERVE_HANDLER_COMPLETIONS] = s_respond_generate,
    [SERVE_HANDLER_MODELS] = s_respond_models,
    [SERVE_HANDLER_MODEL] = s_respond_model,
    [SERVE_HANDLER_EMBEDDINGS] = s_respond_embeddings,
    [SERVE_HANDLER_HEALTH] = s_respond_health,
    [SERVE_HANDLER_RESPONSES] = s_respond_generate,
    [SERVE_HANDLER_RESPONSE] = s_respond_response,
};

/* A CORS preflight (OPTIONS with CORS on): 204 with the Access-Control-Allow-* headers
 * when the origin is allowed, without them when not (the browser then refuses); 404 for
 * a path no route has. */
static enum MHD_Result s_preflight(s_req_t *r, const char *url) {
    char allow[48];
    serve_routes_allow(url, allow, sizeof allow);
    if (!allow[0])
        return s_error(r, 404, NULL, "not_found", "no such path: %s", url);
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    if (r->origin) {
        char methods[64];
        snprintf(methods, sizeof methods, "%s, OPTIONS", allow);
        const char *want =
            MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        s_cors_headers(r, resp);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", methods);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                want && *want ? want : "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    } else {
        MHD_add_response_header(resp, "Vary", "Origin");
    }
    enum MHD_Result rc = MHD_queue_response(r->conn, 204, resp);
    MHD_destroy_response(resp);
    r->state = S_RESPONDED;
    s_count_status(r->h, 204);
    return rc;
}

static enum MHD_Result s_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version, const char *upload,
                                    size_t *upload_size, void **ctx) {
    (void)version;
    s_http_t *h = cls;
    s_req_t *r = *ctx;
    if (!r) { /* headers are in: route, method, key, declared size */
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        r->h = h;
        r->conn = conn;
        s_link(h, r);
        *ctx = r;
        actor_counters_add(h->counters, "requests", 1);
        const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
        r->origin = serve_access_origin(h->access, origin) ? origin : NULL;
        if (serve_access_cors(h->access) && !strcmp(method, "OPTIONS")) /* no key: a preflight */
            return s_preflight(r, url);
        const serve_route_t *route;
        int rc = serve_routes_find(url, method, &route);
        if (rc == -ENOENT)
            return s_error(r, 404, NULL, "not_found", "no such path: %s", url);
        r->route = route->handler;
        r->del = !strcmp(method, "DELETE");
        if (rc) {
            serve_routes_allow(url, r->allow, sizeof r->allow);
            return s_error(r, 405, NULL, "method_not_allowed", "%s %s: use %s", method, url,
                           r->allow);
        }
        if (route->auth &&
            !serve_access_authorized(
                h->access, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization")))
            return s_error(r, 401, NULL, "invalid_api_key",
                           "a valid API key is needed: 'Authorization: Bearer KEY'");
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > h->max_body)
            return s_error(r, 413, NULL, "body_too_large",
                           "the body has %s bytes, more than the limit of %zu", cl, h->max_body);
        if (route->prefix) /* the route's argument (a model id), for its handler */
            if (base_buf_adds(&r->body, serve_routes_arg(route, url)))
                return MHD_NO;
        return MHD_YES;
    }
    if (*upload_size) {
        if (r->state == S_READING && !r->too_big) {
            if (r->body.len + *upload_size > h->max_body) {
                r->too_big = true;
            } else {
                if (base_buf_add(&r->body, upload, *upload_size))
                    return MHD_NO;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    switch (r->state) {
    case S_READING: /* the body is in: the route's handler answers */
        return s_handlers[r->route](r);
    case S_WAITING: /* resumed: an event came, or the client left */
        if (r->peer_gone)
            return MHD_NO;
        if (r->failed && !r->started)
            return s_error_from_code(r);
        if (r->embq && r->finished)
            return s_respond_embedded(r);
        if (r->stream && (r->started || r->finished))
            return s_respond_stream(r);
        if (!r->stream && r->finished)
            return s_respond_json(r);
        s_suspend(r); /* nothing to answer yet */
        return MHD_YES;
    case S_RESPONDED:
        return MHD_YES;
    }
    return MHD_NO;
}

/* Unlink r and free it, with its choices. */
static void s_free(s_http_t *h, s_req_t *r) {
    for (int i = 0; r->kids && i < serve_choices_n(r->choices); i++)
        if (r->kids[i])
            s_free(h, r->kids[i]);
    free(r->kids);
    serve_choices_destroy(&r->choices);
    if (r->prev)
        r->prev->next = r->next;
    else
        h->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    base_buf_free(&r->body);
    base_buf_free(&r->out);
    serve_answer_destroy(&r->ans);
    cJSON_Delete(r->echo);
    cJSON_Delete(r->history);
    free(r->gen);
    free(r->toks);
    if (r->embq)
        serve_embed_clear(r->embq);
    free(r->embq);
    free(r->emb);
    free(r->emb_got);
    free(r);
}

/* The request ended (answered, or the connection closed): cancel it if it still runs. */
static void s_on_completed(void *cls, struct MHD_Connection *conn, void **ctx,
                           enum MHD_RequestTerminationCode why) {
    (void)conn;
    s_http_t *h = cls;
    s_req_t *r = *ctx;
    if (!r)
        return;
    if (r->in_flight && r->embq) {
        s_embed_forget(h, r, true);
        actor_counters_add(h->counters, "cancelled", 1);
        r->in_flight = false;
    }
    bool running = r->in_flight;
    if (r->in_flight)
        s_cancel(h, r);
    if (s_cancel_kids(h, r) || running)
        LOG_I(TAG, "%s: the client left (%d): cancelled", r->id, (int)why);
    s_free(h, r);
    *ctx = NULL;
}

static void s_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n')
        line[n - 1] = 0;
    LOG_D(TAG, "libmicrohttpd: %s", line);
}

/* ---- the actor's loop */

/* Every wakeup: let MHD do its work; wait at most until its next timeout. */
static int s_idle(void *self) {
    s_http_t *h = self;
    MHD_run(h->d);
    MHD_UNSIGNED_LONG_LONG to = 0;
    if (MHD_get_timeout(h->d, &to) == MHD_YES)
        return to < 100 ? (int)to : 100;
    return 100;
}

static void s_on_epoll(void *self, int fd) {
    (void)self;
    (void)fd; /* s_idle runs MHD after this wakeup */
}

/* The upstream connection came back (a new frontend, or the same one after a cut):
 * every request in flight is sent again as `resume`, with the token events it has. */
static void s_resume_all(s_http_t *h) {
    for (s_req_t *r = h->reqs; r; r = r->next) {
        for (int i = 0; r->in_flight && r->embq && i < r->embq->n_inputs; i++)
            if (!r->emb_got[i]) /* an embed is computed again from its input */
                actor_counters_add(h->counters, s_embed_send(h, r, i) ? "resume.failed" : "resumed",
                                   1);
        if (!r->in_flight || !r->gen)
            continue;
        msg_resume_t q;
        msg_resume_init(&q);
        msg_err_t err;
        if (msg_generate_decode(r->gen, r->gen_len, &q.gen, &err)) {
            actor_counters_add(h->counters, "resume.failed", 1);
            continue;
        }
        q.have = r->stream ? r->n_toks : 0;
        q.tokens = q.have ? r->toks : NULL;
        q.n_tokens = q.have;
        void *buf = NULL;
        size_t len = 0;
        if (!msg_encode(MSG_RESUME, &q, &buf, &len, &err) &&
            zmq_send(zsock_resolve(h->up), buf, len, ZMQ_DONTWAIT) >= 0)
            actor_counters_add(h->counters, "resumed", 1);
        else
            actor_counters_add(h->counters, "resume.failed", 1);
        free(buf);
        q.tokens = NULL; /* borrowed */
        q.n_tokens = 0;
        msg_resume_clear(&q);
    }
}

static void s_on_monitor(void *self, zsock_t *sock) {
    s_http_t *h = self;
    zmsg_t *msg = zmsg_recv(sock);
    zframe_t *ev = msg ? zmsg_first(msg) : NULL;
    if (ev && zframe_size(ev) >= 2) {
        const uint8_t *d = zframe_data(ev);
        if ((uint16_t)(d[0] | d[1] << 8) == ZMQ_EVENT_HANDSHAKE_SUCCEEDED && ++h->connections > 1) {
            LOG_W(TAG, "the frontend connection came back: resuming the requests in flight");
            s_resume_all(h);
        }
    }
    zmsg_destroy(&msg);
}

static void s_on_upstream(void *self, zsock_t *sock) {
    s_http_t *h = self;
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    if (zmq_msg_recv(&frame, zsock_resolve(sock), ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&frame);
        return;
    }
    msg_any_t m;
    msg_err_t err;
    if (zmq_msg_more(&frame) ||
        msg_any_decode(zmq_msg_data(&frame), zmq_msg_size(&frame), &m, &err) < 0) {
        actor_counters_add(h->counters, "upstream.malformed", 1);
        zmq_msg_close(&frame);
        return;
    }
    zmq_msg_close(&frame);
    switch (m.type) {
    case MSG_TOKEN:
        s_on_token(h, &m.u.token);
        break;
    case MSG_DONE:
        s_on_done(h, &m.u.done);
        break;
    case MSG_ERROR:
        s_on_error(h, &m.u.error);
        break;
    case MSG_EMBEDDING:
        s_on_embedding(h, &m.u.embedding);
        break;
    case MSG_HEALTH_REPLY:
        h->healthy = m.u.health_reply.ok;
        h->health_us = base_now_us();
        break;
    default:
        actor_counters_add(h->counters, "upstream.unexpected", 1);
    }
    msg_any_clear(&m);
}

/* Every 500 ms: ask the frontend's health; notice clients gone from suspended requests. */
static void s_tick(void *self) {
    s_http_t *h = self;
    msg_health_t q;
    msg_health_init(&q);
    void *buf;
    size_t len;
    msg_err_t err;
    if (!msg_encode(MSG_HEALTH, &q, &buf, &len, &err)) {
        zmq_send(zsock_resolve(h->up), buf, len, ZMQ_DONTWAIT);
        free(buf);
    }
    int active = 0;
    for (s_req_t *r = h->reqs; r; r = r->next) {
        active += r->in_flight;
        if (!r->suspended)
            continue;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        char c;
        if (ci && recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
            r->peer_gone = true;
            s_wake(r);
        }
    }
    actor_counters_set(h->counters, "active", active);
}

/* The frontend's client endpoint as a place to connect to ("*" and 0.0.0.0: loopback). */
static void s_upstream(const actor_env_t *env, char *ep, size_t len) {
    const char *u = ((const actor_http_cfg_t *)actor_env_cfg(env))->upstream;
    if (!u)
        u = actor_topology_opt(actor_env_topology(env), "frontend", "client",
                               ACTOR_TOPO_CLIENT_ENDPOINT);
    const char *host = strstr(u, "://");
    host = host ? host + 3 : u;
    if (!strncmp(host, "*:", 2) || !strncmp(host, "0.0.0.0:", 8))
        snprintf(ep, len, "%.*s127.0.0.1%s", (int)(host - u), u, strchr(host, ':'));
    else
        snprintf(ep, len, "%s", u);
}

/* Start MHD on listen ("HOST:PORT", "[V6]:PORT").  NULL with why. */
static struct MHD_Daemon *s_start(s_http_t *h, const char *listen, int max_conn, int timeout_s,
                                  char *why, size_t whylen) {
    char host[256];
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || !colon[1]) {
        snprintf(why, whylen, "listen=%s: expected HOST:PORT", listen);
        return NULL;
    }
    const char *hs = listen, *he = colon;
    if (*hs == '[' && he[-1] == ']')
        hs++, he--;
    snprintf(host, sizeof host, "%.*s", (int)(he - hs), hs);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE},
                    *ai = NULL;
    int rc = getaddrinfo(!strcmp(host, "*") ? NULL : host, colon + 1, &hints, &ai);
    if (rc || !ai) {
        snprintf(why, whylen, "listen=%s: %s", listen, gai_strerror(rc));
        return NULL;
    }
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d =
        MHD_start_daemon(flags, 0, NULL, NULL, s_on_request, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_conn,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)timeout_s,
                         MHD_OPTION_NOTIFY_COMPLETED, s_on_completed, h, MHD_OPTION_EXTERNAL_LOGGER,
                         s_mhd_log, NULL, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d)
        snprintf(why, whylen, "cannot listen on %s (in use, or not an address of this host)",
                 listen);
    return d;
}

static void s_cleanup(s_http_t *h) {
    if (h->d) { /* end the suspended requests, then stop */
        for (s_req_t *r = h->reqs; r; r = r->next) {
            r->peer_gone = true;
            s_wake(r);
        }
        MHD_run(h->d);
        MHD_stop_daemon(h->d);
        h->d = NULL;
    }
    zhashx_destroy(&h->by_id);
    serve_responses_store_destroy(&h->store);
    serve_access_destroy(&h->access);
    zsock_destroy(&h->mon);
    zsock_destroy(&h->up);
    actor_socks_close(s_socks, h);
    actor_loop_destroy(&h->loop);
}

/* The names a request may give as `model` (docs/HTTP.md, "Model names"), and the
 * embedding size, from the GGUF at path (its header only; NULL: the id alone). */

int actor_http_main(actor_env_t *env) {
    const actor_http_cfg_t *conf = actor_env_cfg(env);
    const actor_topology_t *topo = actor_env_topology(env);
    const char *me = actor_env_name(env);
    s_http_t h = {0};
    char why[512], ep[256];
    h.env = env;
    h.max_body = (size_t)conf->max_body;
    h.max_tokens = conf->max_tokens;
    h.top_k = conf->top_k;
    h.min_p = conf->min_p;
    uint32_t boot;
    if (getrandom(&boot, sizeof boot, 0) != sizeof boot)
        boot = (uint32_t)base_now_us();
    snprintf(h.boot, sizeof h.boot, "%08x", boot);
    if (serve_models_init(&h.model, conf->model_name,
                          actor_topology_opt(topo, "worker0", "model", NULL), STRATA_VERSION, why,
                          sizeof why))
        LOG_W(TAG, "cannot read the model's header (%s): no embeddings", why);
    if (!(h.access = serve_access_new(conf->api_key_file, conf->cors_origin, why, sizeof why))) {
        actor_env_fail(env, "%s: %s", me, why);
        s_cleanup(&h);
        return 1;
    }
    s_upstream(env, ep, sizeof ep);
    h.loop = actor_loop_new(env, &h);
    h.counters = h.loop ? actor_loop_counters(h.loop) : NULL;
    h.by_id = zhashx_new();
    h.store = serve_responses_store_new(SERVE_RESPONSES_KEEP);
    char serr[128];
    int socks = actor_socks_open(env, s_socks, &h, serr, sizeof serr);
    h.up = zsock_new(ZMQ_DEALER);
    if (socks || !h.loop || !h.by_id || !h.up || !h.store) {
        actor_env_fail(env, "%s: cannot set up (%s)", me, socks ? serr : "sockets or memory");
        s_cleanup(&h);
        return 1;
    }
    zsock_set_linger(h.up, 0);
    zsock_set_sndhwm(h.up, 100000);
    zsock_set_rcvhwm(h.up, 100000);
    zsock_set_maxmsgsize(h.up, MSG_MAX_INTERNAL_FRAME);
    zsock_set_heartbeat_ivl(h.up, 1000);
    zsock_set_heartbeat_timeout(h.up, 3000);
    /* CURVE when the frontend's client endpoint has it: this actor is then a client
     * with its own key pair, on the frontend's client_allow list */
    if (actor_curve_frontend_client(h.up, topo, conf->client_key, "docs/HTTP.md", why,
                                    sizeof why)) {
        actor_env_fail(env, "%s: %s", me, why);
        s_cleanup(&h);
        return 1;
    }
    char mon[128]; /* watched before connect, so the first handshake is seen too */
    snprintf(mon, sizeof mon, "inproc://strata-http-monitor-%p", (void *)h.up);
    if (zmq_socket_monitor(zsock_resolve(h.up), mon, ZMQ_EVENT_HANDSHAKE_SUCCEEDED) == 0 &&
        (h.mon = zsock_new(ZMQ_PAIR)) && zsock_connect(h.mon, "%s", mon) < 0)
        zsock_destroy(&h.mon);
    if (zsock_connect(h.up, "%s", ep) < 0) {
        actor_env_fail(env, "%s: cannot connect to the frontend at %s", me, ep);
        s_cleanup(&h);
        return 1;
    }
    const char *listen = conf->listen;
    h.d = s_start(&h, listen, conf->max_connections, conf->timeout_s, why, sizeof why);
    const union MHD_DaemonInfo *di =
        h.d ? MHD_get_daemon_info(h.d, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
    if (!h.d || !di) {
        actor_env_fail(env, "%s: %s", me, h.d ? "no epoll fd from libmicrohttpd" : why);
        s_cleanup(&h);
        return 1;
    }
    actor_loop_inbox(h.loop, h.in, h.to_front, false, "");
    actor_loop_reader(h.loop, h.up, s_on_upstream);
    if (h.mon)
        actor_loop_reader(h.loop, h.mon, s_on_monitor);
    else
        LOG_W(TAG, "%s: no monitor on the frontend connection: no resume after it restarts", me);
    actor_loop_fd(h.loop, di->epoll_fd, s_on_epoll);
    actor_loop_timer(h.loop, 500, s_tick);
    actor_loop_idle(h.loop, s_idle);
    LOG_I(TAG, "%s: OpenAI API on http://%s/v1 (model %s, frontend %s%s%s%s)", me, listen,
          h.model.id, ep, serve_access_keys(h.access) ? ", API keys" : "",
          serve_access_cors(h.access) ? ", CORS " : "", serve_access_cors_list(h.access));
    actor_env_ready(env);
    actor_loop_run(h.loop, 100);
    s_cleanup(&h);
    return 0;
}

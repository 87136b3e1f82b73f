/* actor_http.c - the http gateway actor: OpenAI's /v1/chat/completions,
 * /v1/completions, /v1/responses, /v1/embeddings, /v1/models[/{id}] and /health over
 * libmicrohttpd (with CORS when origins are configured), turned into
 * client-protocol requests on one DEALER to the frontend.  It owns the HTTP
 * daemon, the table of HTTP requests and the DEALER.  This file is the frontend's side
 * (what is sent, the events that come back, resume, the loop); actor_http_server.c is the
 * HTTP side (libmicrohttpd's callbacks and the answers' bytes); actor_http_int.h what they
 * share; actor_http_cache.c the answer cache's route.
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
#include "actor_http_int.h"

#include "actor_curve.h"
#include "base_log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define TAG ACTOR_HTTP_TAG

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
    {"tls_cert", ACTOR_OPT_PATH, NULL, 0, 0, NULL,
     "HTTPS: the certificate chain (PEM); with tls_key (default: plain HTTP)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, tls_cert)},
    {"tls_key", ACTOR_OPT_PATH, NULL, 0, 0, NULL, "HTTPS: the certificate's private key (PEM)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, tls_key)},
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
    {"max_per_ip", ACTOR_OPT_INT, "32", 1, 65536, NULL,
     "HTTP connections open at once from one address (more are refused)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, max_per_ip)},
    {"header_timeout_s", ACTOR_OPT_INT, "10", 1, 3600, NULL,
     "a request's headers must be in this long after the connection opens or its last request "
     "ends, however slowly they trickle (else the connection is closed)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, header_timeout_s)},
    {"body_timeout_s", ACTOR_OPT_INT, "60", 1, 3600, NULL,
     "a request's body must be in this long after its headers (else the connection is closed)",
     .field = ACTOR_OPT_FIELD(actor_http_cfg_t, body_timeout_s)},
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

/* the gateway's sockets between actors (its DEALER to the frontend's client endpoint is its own) */
static const actor_sock_decl_t s_socks[] = {
    {ACTOR_SOCK_FIELD(actor_http_t, in), ACTOR_SOCK_IN, NULL, ACTOR_HWM_CTL, ACTOR_MAX_FRAME,
     false},
    {ACTOR_SOCK_FIELD(actor_http_t, to_front), ACTOR_SOCK_OUT, "frontend", ACTOR_HWM_CTL, 0, false},
    {0},
};

/* Link r into the live requests. */
void actor_http_link(actor_http_t *h, actor_http_req_t *r) {
    r->next = h->reqs;
    if (h->reqs)
        h->reqs->prev = r;
    h->reqs = r;
}

/* Send g as r's generate (the frame kept: a resume after a frontend restart sends it
 * again).  0, or an HTTP status to answer with (and b). */
static unsigned s_send(actor_http_t *h, actor_http_req_t *r, const msg_generate_t *g,
                       serve_openai_bad_t *b) {
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
static unsigned s_send_choices(actor_http_t *h, actor_http_req_t *r, const msg_generate_t *g, int n,
                               serve_openai_bad_t *b) {
    if (!(r->choices = serve_choices_new(r->id, n)) ||
        !(r->kids = calloc((size_t)n, sizeof *r->kids))) {
        snprintf(b->msg, sizeof b->msg, "out of memory");
        return 500;
    }
    for (int i = 0; i < n; i++) {
        actor_http_req_t *k = r->kids[i] = calloc(1, sizeof *k);
        if (!k) {
            snprintf(b->msg, sizeof b->msg, "out of memory");
            return 500;
        }
        *k = (actor_http_req_t){.h = h,
                                .parent = r,
                                .choice = i,
                                .route = r->route,
                                .stream = r->stream,
                                .ans = serve_answer_new(&r->areq, i)};
        actor_http_link(h, k); /* in the table: a resume sends it again */
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
void actor_http_cancel(actor_http_t *h, actor_http_req_t *r) {
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
int actor_http_cancel_kids(actor_http_t *h, actor_http_req_t *r) {
    int n = 0;
    for (int i = 0; r->kids && i < serve_choices_n(r->choices); i++)
        if (r->kids[i] && r->kids[i]->in_flight) {
            actor_http_cancel(h, r->kids[i]);
            n++;
        }
    return n;
}

/* Parse r's body (chat, completions or Responses) and send its generate.  0, or an HTTP
 * status to answer with (and b). */
unsigned actor_http_submit(actor_http_t *h, actor_http_req_t *r, serve_openai_bad_t *b) {
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
                                   .echo = r->echo,
                                   .cache = g->cache};
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
static void s_keep(actor_http_t *h, actor_http_req_t *r, const msg_usage_t *u) {
    cJSON *m = serve_answer_message(r->ans), *resp = serve_answer_json(&r->ans, 1, u);
    if (m && r->history)
        cJSON_AddItemToArray(r->history, m);
    else
        cJSON_Delete(m);
    if (m && serve_responses_store_put(h->store, r->id, &r->history, &resp))
        LOG_W(TAG, "%s: out of memory: the response is not kept", r->id);
    cJSON_Delete(resp);
}

/* The id of input i of r towards the frontend. */
void actor_http_embed_id(const actor_http_req_t *r, int i, char *out, size_t cap) {
    snprintf(out, cap, "%.48s.%d", r->id, i);
}

/* Send the embed of input i of r.  0, or -EAGAIN (the queue to the frontend is full). */
int actor_http_embed_send(actor_http_t *h, actor_http_req_t *r, int i) {
    const serve_embed_input_t *in = &r->embq->inputs[i];
    msg_embed_t e;
    msg_embed_init(&e);
    actor_http_embed_id(r, i, e.id, sizeof e.id);
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
void actor_http_embed_forget(actor_http_t *h, actor_http_req_t *r, bool cancel) {
    for (int i = 0; r->embq && i < r->embq->n_inputs; i++) {
        if (r->emb_got[i])
            continue;
        char id[MSG_MAX_ID_BYTES + 1];
        actor_http_embed_id(r, i, id, sizeof id);
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
static void s_on_embedding(actor_http_t *h, const msg_embedding_t *e) {
    actor_http_req_t *r = zhashx_lookup(h->by_id, e->id);
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
        actor_http_wake(r);
    }
}

/* The stream r's chunks go to: its own, or its parent's (a choice). */
static base_buf_t *s_stream_of(actor_http_req_t *r) {
    return r->parent ? &r->parent->out : &r->out;
}

/* The answers of r's choices, in index order (n set), into a (SERVE_CHOICES_MAX). */
int actor_http_answers(actor_http_req_t *r, serve_answer_t **a) {
    int n = r->kids ? serve_choices_n(r->choices) : 1;
    for (int i = 0; i < n; i++)
        a[i] = r->kids ? r->kids[i]->ans : r->ans;
    return n;
}

static void s_on_token(actor_http_t *h, const msg_token_t *t) {
    actor_http_req_t *r = zhashx_lookup(h->by_id, t->id);
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
    actor_http_wake(r);
}

static void s_end(actor_http_t *h, actor_http_req_t *r) {
    zhashx_delete(h->by_id, r->id);
    r->in_flight = false;
    r->finished = true;
    actor_http_req_t *p = r->parent;
    if (p && !p->finished && serve_choices_all_done(p->choices)) { /* the last choice */
        serve_choices_usage(p->choices, &p->usage);
        serve_answer_t *a[SERVE_CHOICES_MAX];
        int n = actor_http_answers(p, a);
        if (p->stream && serve_answer_stream_end(a, n, &p->usage, &p->out))
            p->peer_gone = true;
        p->finished = true;
    }
    actor_http_wake(r);
}

static void s_on_done(actor_http_t *h, msg_done_t *d) {
    actor_http_req_t *r = zhashx_lookup(h->by_id, d->id);
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

static void s_on_error(actor_http_t *h, const msg_error_t *e) {
    actor_http_req_t *r = e->id[0] ? zhashx_lookup(h->by_id, e->id) : NULL;
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
        actor_http_cancel_kids(h, r);
    }
    r->failed = true;
    r->code = e->code;
    snprintf(r->emsg, sizeof r->emsg, "%s", e->message);
    if (r->embq) { /* one input failed: the request fails, the others are cancelled */
        const char *dot = strrchr(e->id, '.');
        if (dot && r->embq->n_inputs > 1)
            snprintf(r->emsg, sizeof r->emsg, "input[%.8s]: %.480s", dot + 1, e->message);
        zhashx_delete(h->by_id, e->id);
        actor_http_embed_forget(h, r, true);
        r->in_flight = false;
        r->finished = true;
        actor_http_wake(r);
        return;
    }
    /* a stream that began (its chunks buffered, whether or not MHD has asked for them yet)
     * ends with an error chunk; one that did not is answered with the HTTP error */
    if (r->stream && r->started && serve_answer_stream_error(ans, e->code, e->message, &r->out))
        r->peer_gone = true;
    s_end(h, r);
}

static void s_on_epoll(void *self, int fd) {
    (void)self;
    (void)fd; /* actor_http_server_idle runs MHD after this wakeup */
}

/* The upstream connection came back (a new frontend, or the same one after a cut):
 * every request in flight is sent again as `resume`, with the token events it has. */
static void s_resume_all(actor_http_t *h) {
    for (actor_http_req_t *r = h->reqs; r; r = r->next) {
        for (int i = 0; r->in_flight && r->embq && i < r->embq->n_inputs; i++)
            if (!r->emb_got[i]) /* an embed is computed again from its input */
                actor_counters_add(h->counters,
                                   actor_http_embed_send(h, r, i) ? "resume.failed" : "resumed", 1);
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
    actor_http_t *h = self;
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
    actor_http_t *h = self;
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
        serve_probes_take(&h->probes, &m.u.health_reply, base_now_us());
        break;
    default: /* POST /v1/cache/invalidate's answer, or unexpected */
        if (m.type != MSG_CACHE_REPLY || !actor_http_on_cache_reply(h, &m.u.cache_reply))
            actor_counters_add(h->counters, "upstream.unexpected", 1);
    }
    msg_any_clear(&m);
}

/* Every 500 ms: ask the frontend's health; notice clients gone from suspended requests. */
static void s_tick(void *self) {
    actor_http_t *h = self;
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
    for (actor_http_req_t *r = h->reqs; r; r = r->next)
        active += r->in_flight;
    actor_counters_set(h->counters, "active", active);
    actor_http_server_peek(h);
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

static void s_cleanup(actor_http_t *h) {
    actor_http_server_stop(h);
    zhashx_destroy(&h->by_id);
    serve_responses_store_destroy(&h->store);
    serve_access_destroy(&h->access);
    zsock_destroy(&h->mon);
    zsock_destroy(&h->up);
    actor_socks_close(s_socks, h);
    actor_loop_destroy(&h->loop);
    serve_probes_clear(&h->probes);
}

int actor_http_main(actor_env_t *env) {
    const actor_http_cfg_t *conf = actor_env_cfg(env);
    const actor_topology_t *topo = actor_env_topology(env);
    const char *me = actor_env_name(env);
    actor_http_t h = {0};
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
    int epoll_fd;
    actor_http_limits_t lim = {conf->max_connections,  conf->max_per_ip,     conf->timeout_s,
                               conf->header_timeout_s, conf->body_timeout_s, conf->tls_cert,
                               conf->tls_key};
    if (actor_http_server_start(&h, listen, &lim, &epoll_fd, why, sizeof why)) {
        actor_env_fail(env, "%s: %s", me, why);
        s_cleanup(&h);
        return 1;
    }
    actor_loop_inbox(h.loop, h.in, h.to_front, false, "");
    actor_loop_reader(h.loop, h.up, s_on_upstream);
    if (h.mon)
        actor_loop_reader(h.loop, h.mon, s_on_monitor);
    else
        LOG_W(TAG, "%s: no monitor on the frontend connection: no resume after it restarts", me);
    actor_loop_fd(h.loop, epoll_fd, s_on_epoll);
    actor_loop_timer(h.loop, 500, s_tick);
    actor_loop_idle(h.loop, actor_http_server_idle);
    LOG_I(TAG, "%s: OpenAI API on http://%s/v1 (model %s, frontend %s%s%s%s)", me, listen,
          h.model.id, ep, serve_access_keys(h.access) ? ", API keys" : "",
          serve_access_cors(h.access) ? ", CORS " : "", serve_access_cors_list(h.access));
    actor_env_ready(env);
    actor_loop_run(h.loop, 100);
    s_cleanup(&h);
    return 0;
}

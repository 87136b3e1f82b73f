/* actor_frontend.c - the frontend actor: client envelope handling, the request
 * table, heartbeats and the stats / health answers.
 *
 * The request table is the one place that knows what a request still needs: the
 * client's generate and every completion token delivered so far.  Whatever is lost
 * downstream (a worker, the tokenizer or the router dies or hangs; a frame is
 * dropped) is noticed here (a worker_down, a gap in the indexes, a silent request
 * that its worker no longer holds, an attempt never accepted) and the request is
 * submitted again under a fresh rid with the delivered tokens: the worker goes on
 * after them, and sampling seeded per position makes the rest what it would have
 * been.  Events of an old rid are dropped, so nothing reaches a client twice. */
#include "actor_frontend.h"

#include "actor_curve.h"
#include "audit_log.h"
#include "base_log.h"
#include "serve_events.h"
#include "serve_metrics.h"
#include "serve_requests.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define TAG "frontend"
#define PING_US 250000
#define UNHEALTHY_US 1000000
#define MAX_IDENT SERVE_MAX_IDENT

/* One accepted request: what it keeps, and the rules of its attempts and events, are
 * serve/serve_requests.h. */
typedef serve_request_t s_req_t;

/* Another actor as the frontend sees it. */
typedef struct {
    char name[ACTOR_TOPO_NAME]; /* tokenizer, router, worker0, ... */
    zsock_t *push;              /* where its pings go */
    uint64_t last_seen_us;      /* last pong or stats_answer; 0 = never */
    bool restarting;            /* the supervisor reported it dead; no answer since */
    bool hung;                  /* silent for hang_timeout_ms: its requests moved away */
    int worker;                 /* worker index, or -1 for other actors */
    uint64_t last_stats_us;     /* when its last stats_answer arrived */
    msg_counter_t *counters;    /* its last stats_answer */
    int n_counters;
} s_peer_t;

/* A stats request waiting for fresh counters from every peer. */
typedef struct {
    uint8_t ident[MAX_IDENT]; /* client */
    size_t ident_len;
    uint64_t t_us; /* when it arrived; 0 = free slot */
} s_pending_stats_t;

#define MAX_PENDING_STATS 64
#define STATS_WAIT_US 200000

typedef struct {
    actor_env_t *env;                             /* runtime */
    s_pending_stats_t pending[MAX_PENDING_STATS]; /* stats requests being answered */
    zsock_t *clients;                             /* ROUTER for clients */
    zsock_t *monitor;                             /* PAIR: socket events of clients */
    zsock_t *in;                                  /* inbound PULL (internal) */
    zsock_t *to_tok;                              /* PUSH to the tokenizer */
    s_peer_t *peers;                              /* (n_peers) */
    int n_peers;
    serve_requests_t *reqs; /* the request table */
    uint64_t accept_us;     /* an attempt not accepted by a worker by then is resubmitted */
    uint64_t probe_us;      /* a silent attempt is probed after this */
    uint64_t give_up_us;    /* a request without a new token for this long fails */
    uint64_t hang_us;       /* a peer silent this long is hung */
    audit_log_t *audit;     /* the audit log, or NULL (no audit_dir) */
    bool curve_clients;     /* the client endpoint uses CURVE: a client's key is its name */
    char model_sha256[AUDIT_HASH_HEX];  /* the served model file's, for the audit records */
    uint64_t ping_seq;                  /* heartbeat sequence */
    actor_loop_t *loop;                 /* polling, control messages, timers, counters */
    actor_counters_t *counters;         /* the loop's */
    serve_metrics_req_t *metrics;       /* per-request histograms (docs/METRICS.md) */
    char endpoint[ACTOR_TOPO_ENDPOINT]; /* client endpoint */
    uint32_t *fd_gen; /* (S_MAX_FD) connections accepted on each fd so far: a closed
                         connection's fd is reused by the next one, and its
                         DISCONNECTED event must not cancel the newer requests */
} s_front_t;

#define S_MAX_FD 65536

const actor_opt_t actor_frontend_opts[] = {
    {"client", ACTOR_OPT_STRING, ACTOR_FRONTEND_DEFAULT_ENDPOINT, 0, 0, NULL,
     "client endpoint (ROUTER)", .field = ACTOR_OPT_FIELD(actor_frontend_cfg_t, client)},
    {"max_requests", ACTOR_OPT_INT, "1024", 1, 1 << 20, NULL,
     "requests in flight before overloaded",
     .field = ACTOR_OPT_FIELD(actor_frontend_cfg_t, max_requests)},
    {"client_secret", ACTOR_OPT_PATH, NULL, 0, 0, NULL,
     "CURVE key pair of the client endpoint (zcert file; with client_allow)",
     .field = ACTOR_OPT_FIELD(actor_frontend_cfg_t, client_secret)},
    {"client_allow", ACTOR_OPT_PATH, NULL, 0, 0, NULL,
     "directory of client public keys admitted by CURVE (with client_secret)",
     .field = ACTOR_OPT_FIELD(actor_frontend_cfg_t, client_allow)},
    {"accept_ms", ACTOR_OPT_INT, "2000", 10, 600000, NULL,
     "a request no worker has accepted after this is submitted again",
     .field = ACTOR_OPT_FIELD(actor_frontend_cfg_t, accept_ms)},
    {"probe_ms", ACTOR_OPT_INT, "1000", 10, 600000, NULL,
     "a running request silent this long is checked with its worker (3 unanswered checks: "
     "submitted again)",
     .field = ACTOR_OPT_FIELD(actor_frontend_cfg_t, probe_ms)},
    {"resume_timeout_ms", ACTOR_OPT_INT, "30000", 100, 3600000, NULL,
     "a request that gets no new token for this long, despite resumes, fails (internal)",
     .field = ACTOR_OPT_FIELD(actor_frontend_cfg_t, resume_timeout_ms)},
    {"audit_dir", ACTOR_OPT_PATH, NULL, 0, 0, NULL,
     "append a hash-chained record of every finished request to files in DIR "
     "(docs/AUDIT.md); unset: no audit log",
     .field = ACTOR_OPT_FIELD(actor_frontend_cfg_t, audit_dir)},
    {"audit_fsync", ACTOR_OPT_ENUM, "interval", 0, 0, "interval|always",
     "audit log durability: fsync every second or 100 records (interval), or every record",
     .field = ACTOR_OPT_FIELD(actor_frontend_cfg_t, audit_fsync), .parse = audit_fsync_parse},
    {"audit_text", ACTOR_OPT_BOOL, "0", 0, 0, NULL,
     "keep prompt and completion text in audit records (0: their hashes only)",
     .field = ACTOR_OPT_FIELD(actor_frontend_cfg_t, audit_text)},
    {"hang_timeout_ms", ACTOR_OPT_INT, "2000", 0, 600000, NULL,
     "a worker that answers no heartbeat for this long is hung: its requests move to the "
     "others (0: never)",
     .field = ACTOR_OPT_FIELD(actor_frontend_cfg_t, hang_timeout_ms)},
    {NULL},
};

/* ---- sending to clients */

/* Send one encoded message to a client (after an empty delimiter frame when delim:
 * only the refusal of a REQ-framed message uses it).  0, -EHOSTUNREACH (client gone),
 * -EAGAIN (its queue is full), or an encoder error. */
static int s_reply(s_front_t *f, const uint8_t *ident, size_t ident_len, bool delim, int type,
                   const void *m) {
    void *buf = NULL;
    size_t len = 0;
    msg_err_t err;
    int rc = msg_encode(type, m, &buf, &len, &err);
    if (rc) {
        LOG_W(TAG, "cannot encode %s: %s", msg_type_name(type), err.msg);
        actor_counters_add(f->counters, "send.encode_failed", 1);
        return rc;
    }
    void *h = zsock_resolve(f->clients);
    rc = zmq_send(h, ident, ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ? -zmq_errno() : 0;
    if (!rc && delim)
        rc = zmq_send(h, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ? -zmq_errno() : 0;
    if (!rc)
        rc = zmq_send(h, buf, len, ZMQ_DONTWAIT) < 0 ? -zmq_errno() : 0;
    free(buf);
    if (rc == -EAGAIN)
        actor_counters_add(f->counters, "send.client_full", 1);
    return rc;
}

/* Send an error event.  Whatever id and message it is given, the event is one the
 * encoder accepts: an id that is not UTF-8 becomes nil, a message is cut before its
 * first byte that is not (a message cut at the size limit can end inside a character). */
static void s_reply_error(s_front_t *f, const uint8_t *ident, size_t ident_len, bool delim,
                          const char *id, int code, const char *message) {
    msg_error_t e;
    msg_error_init(&e);
    msg_set_str(e.id, sizeof e.id, id ? id : "");
    if (!msg_utf8_valid(e.id, strlen(e.id), NULL))
        e.id[0] = 0;
    e.code = code;
    msg_set_str(e.message, sizeof e.message, message);
    size_t bad;
    if (!msg_utf8_valid(e.message, strlen(e.message), &bad))
        e.message[bad] = 0;
    if (!e.message[0])
        msg_set_str(e.message, sizeof e.message, "request refused");
    if (s_reply(f, ident, ident_len, delim, MSG_ERROR, &e))
        actor_counters_add(f->counters, "errors.undelivered", 1);
}

/* ---- the request table */

static s_req_t *s_find_rid(s_front_t *f, uint64_t rid) {
    return serve_requests_find_rid(f->reqs, rid);
}

static void s_remove(s_front_t *f, s_req_t *r) {
    serve_requests_remove(f->reqs, r);
}

/* The socket towards worker w (its pings go there too), or NULL. */
static zsock_t *s_worker_push(s_front_t *f, int w) {
    for (int i = 0; i < f->n_peers; i++)
        if (f->peers[i].worker == w && w >= 0)
            return f->peers[i].push;
    return NULL;
}

/* Stop attempt rid: straight to its worker when known, else through the tokenizer
 * and the router (which asks every worker when it does not know the rid).  0 when
 * the cancel went out. */
static int s_cancel_rid(s_front_t *f, uint64_t rid, int worker) {
    msg_work_cancel_t c = {rid};
    zsock_t *to = s_worker_push(f, worker);
    return actor_send(to ? to : f->to_tok, MSG_WORK_CANCEL, &c);
}

/* The client wants r over (or is gone).  r stays in the table until its final
 * event: a lost cancel is sent again when a probe finds the attempt still held. */
static void s_cancel(s_front_t *f, s_req_t *r, const char *why) {
    if (r->cancel_sent)
        return;
    r->cancel_sent = true;
    char name[64];
    snprintf(name, sizeof name, "cancelled.%s", why);
    actor_counters_add(f->counters, name, 1);
    if (s_cancel_rid(f, r->rid, r->worker))
        actor_counters_add(f->counters, "cancel.unsent", 1);
}

/* The client behind ident is gone: stop sending to it, cancel its requests. */
static void s_client_gone(s_front_t *f, const uint8_t *ident, size_t ident_len) {
    for (int i = 0; i < serve_requests_slots(f->reqs); i++) {
        s_req_t *r = serve_requests_at(f->reqs, i);
        if (r->rid && r->ident_len == ident_len && !memcmp(r->ident, ident, ident_len)) {
            r->gone = true;
            s_cancel(f, r, "unreachable");
        }
    }
}

/* Send to the client of r; a vanished client cancels its requests.  An event the
 * encoder refuses (e.g. text that is not UTF-8) is never dropped in silence: the
 * request ends there with an `internal` error and is cancelled.  An event that
 * finds the client's queue full (a client that does not read) is dropped, and the
 * request is cancelled: it ends with the error s_end gives a slow reader. */
static void s_to_client(s_front_t *f, s_req_t *r, int type, const void *m) {
    if (r->gone || r->slow)
        return;
    int rc = s_reply(f, r->ident, r->ident_len, false, type, m);
    if (rc == -EAGAIN) {
        r->slow = true;
        actor_counters_add(f->counters, "clients.slow", 1);
        s_cancel(f, r, "slow_reader");
        return;
    }
    if (rc == -EINVAL && type != MSG_ERROR) {
        s_reply_error(f, r->ident, r->ident_len, false, r->id, MSG_CODE_INTERNAL,
                      "the server could not encode an event of this request");
        r->gone = true;
        s_cancel(f, r, "unencodable");
        return;
    }
    if (rc == -EHOSTUNREACH) {
        uint8_t ident[MAX_IDENT];
        size_t n = r->ident_len;
        memcpy(ident, r->ident, n);
        s_client_gone(f, ident, n);
    }
}

/* The final event of a slow reader's request: an error, sent when there is room
 * (retried from s_watch for SERVE_FINAL_WAIT_US).  True when r may be removed. */
static bool s_final_slow(s_front_t *f, s_req_t *r) {
    if (r->gone)
        return true;
    msg_error_t x;
    msg_error_init(&x);
    msg_set_str(x.id, sizeof x.id, r->id);
    x.code = MSG_CODE_OVERLOADED;
    msg_set_str(x.message, sizeof x.message,
                "events of this request were dropped: the client did not read them fast "
                "enough (its queue was full)");
    int rc = s_reply(f, r->ident, r->ident_len, false, MSG_ERROR, &x);
    if (rc == -EAGAIN &&
        (!r->final_due_us || base_now_us() - r->final_due_us < SERVE_FINAL_WAIT_US)) {
        if (!r->final_due_us)
            r->final_due_us = base_now_us();
        return false;
    }
    actor_counters_add(f->counters, rc ? "final.undeliverable" : "failed.slow_reader", 1);
    return true;
}

/* Send r's final event (done or error) and remove r.  A slow reader gets an error
 * instead (see s_to_client), and r stays until it could be queued. */
static void s_end(s_front_t *f, s_req_t *r, int type, const void *m) {
    if (f->audit) {
        const msg_done_t *d = type == MSG_DONE ? m : NULL;
        const msg_error_t *e = type == MSG_ERROR ? m : NULL;
        audit_record_t a = {.gen = &r->gen,
                            .rid = r->rid,
                            .client_ident = r->ident,
                            .client_ident_len = r->ident_len,
                            .client_key = r->client_key[0] ? r->client_key : NULL,
                            .model_sha256 = f->model_sha256[0] ? f->model_sha256 : NULL,
                            .output = &r->out,
                            .is_error = e != NULL,
                            .finish = d ? d->finish_reason : 0,
                            .error_code = e ? e->code : 0,
                            .error_message = e ? e->message : NULL,
                            .usage = d ? d->usage : (msg_usage_t){.completion_tokens = r->n_tokens},
                            .timings = d ? &d->timings : NULL,
                            .trace = r->trace,
                            .trace_len = r->trace_len,
                            .resumes = r->attempts - 1};
        if (audit_log_append(f->audit, &a))
            actor_counters_add(f->counters, "audit.failed", 1);
        else
            actor_counters_add(f->counters, "audit.records", 1);
    }
    s_to_client(f, r, type, m);
    if (!r->slow || s_final_slow(f, r))
        s_remove(f, r);
}

/* ---- attempts: submit, resubmit, give up */

/* Send r's current attempt to the tokenizer: the client's generate and the
 * completion tokens delivered so far.  A full queue is retried after a backoff. */
static void s_submit(s_front_t *f, s_req_t *r) {
    if (r->embed) {
        msg_embed_request_t e;
        msg_embed_request_init(&e);
        e.rid = r->rid;
        e.prompt = r->gen.prompt; /* borrowed */
        e.prompt_len = r->gen.prompt_len;
        e.tokens = r->embed_ids;
        e.n_tokens = r->n_embed_ids;
        e.t_arrival_us = r->t_arrival_us;
        bool queued = actor_send(f->to_tok, MSG_EMBED_REQUEST, &e) == 0;
        if (!queued)
            actor_counters_add(f->counters, "submit.retried", 1);
        serve_requests_sent(f->reqs, r, queued, base_now_us());
        return;
    }
    msg_tok_request_t q;
    msg_tok_request_init(&q);
    q.rid = r->rid;
    q.gen = r->gen; /* borrowed */
    q.t_arrival_us = r->t_arrival_us;
    q.gen_tokens = r->n_tokens ? r->toks : NULL;
    q.n_gen = r->n_tokens;
    q.trace_t_us = r->trace_end_us;
    bool queued = actor_send(f->to_tok, MSG_TOK_REQUEST, &q) == 0;
    if (!queued)
        actor_counters_add(f->counters, "submit.retried", 1);
    serve_requests_sent(f->reqs, r, queued, base_now_us());
}

/* End r with an error event. */
static void s_fail(s_front_t *f, s_req_t *r, int code, const char *message) {
    msg_error_t x;
    msg_error_init(&x);
    msg_set_str(x.id, sizeof x.id, r->id);
    x.code = code;
    msg_set_str(x.message, sizeof x.message, message);
    char name[48];
    snprintf(name, sizeof name, "failed.%s", msg_code_name(code) ? msg_code_name(code) : "?");
    actor_counters_add(f->counters, name, 1);
    s_end(f, r, MSG_ERROR, &x);
}

/* End r here with done "cancelled" (its attempt is gone, and it was cancelled). */
static void s_done_cancelled(s_front_t *f, s_req_t *r) {
    msg_done_t d;
    msg_done_init(&d);
    msg_set_str(d.id, sizeof d.id, r->id);
    d.finish_reason = MSG_FINISH_CANCELLED;
    if (!r->stream) {
        d.text = r->text ? r->text : "";
        d.text_len = r->text_len;
    }
    d.usage.completion_tokens = r->n_tokens;
    actor_counters_add(f->counters, "finished.cancelled", 1);
    s_end(f, r, MSG_DONE, &d);
}

/* r's current attempt is lost (why: a counter name): stop it and go on under a new
 * rid from the tokens delivered.  delay_us: wait that long first (0: at once). */
static void s_resubmit(s_front_t *f, s_req_t *r, const char *why, uint64_t delay_us) {
    if (r->cancel_sent) { /* nothing more is wanted */
        s_done_cancelled(f, r);
        return;
    }
    uint64_t now = base_now_us(), rid = r->rid;
    int worker = r->worker;
    bool submit_now;
    if (serve_requests_next_attempt(f->reqs, r, delay_us, now, &submit_now)) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "the request made no progress for %.1f s despite %d resumes (last: %s)",
                 (double)f->give_up_us / 1e6, r->attempts - 1, why);
        s_fail(f, r, MSG_CODE_INTERNAL, msg);
        return;
    }
    s_cancel_rid(f, rid, worker); /* it may be alive after all (a lost frame) */
    if (r->gen.trace) {           /* the lost attempt's time, as one step */
        msg_trace_step_t *x = realloc(r->steps, (size_t)(r->n_steps + 1) * sizeof *x);
        if (x && r->n_steps < MSG_MAX_TRACE_STEPS / 2) {
            r->steps = x;
            int64_t end = (int64_t)(now - r->t_arrival_us);
            msg_trace_step_fill(&r->steps[r->n_steps++], "frontend", "resume",
                                r->trace_end_us < end ? r->trace_end_us : end, end,
                                "attempt %d lost (%s) on %s%d after %d tokens: submitted again "
                                "from them",
                                r->attempts - 1, why, worker >= 0 ? "worker" : "no worker yet",
                                worker, r->n_tokens);
            r->trace_end_us = end;
        } else if (x) {
            r->steps = x;
        }
    }
    char name[64];
    snprintf(name, sizeof name, "resumed.%s", why);
    actor_counters_add(f->counters, name, 1);
    actor_counters_add(f->counters, "resumed", 1);
    if (submit_now)
        s_submit(f, r);
}

/* ---- client frames */

static void s_malformed(s_front_t *f, const char *kind) {
    char name[96];
    snprintf(name, sizeof name, "malformed.%s", kind);
    actor_counters_add(f->counters, name, 1);
    actor_counters_add(f->counters, "malformed", 1);
}

/* A generate, or a resume (resume: the client has `have` token events, with their
 * token ids when tokens is not NULL).  Takes g's prompt / messages over. */
static void s_on_generate(s_front_t *f, const uint8_t *ident, size_t ident_len, int fd,
                          const char *client_key, msg_generate_t *g, bool resume, int have,
                          const int32_t *tokens) {
    actor_counters_add(f->counters, resume ? "resumes" : "requests", 1);
    char gwhy[256];
    serve_openai_tools_t tools;
    int trc = serve_requests_tools(g, &tools, gwhy, sizeof gwhy);
    if (trc) {
        actor_counters_add(f->counters, "rejected.tools", 1);
        s_reply_error(f, ident, ident_len, false, g->id,
                      trc == -ENOMEM ? MSG_CODE_INTERNAL : MSG_CODE_BAD_REQUEST,
                      trc == -ENOMEM ? "out of memory" : gwhy);
        return;
    }
    if (serve_requests_grammar(g, gwhy, sizeof gwhy)) { /* fail-closed: never unconstrained */
        actor_counters_add(f->counters, "rejected.grammar", 1);
        s_reply_error(f, ident, ident_len, false, g->id, MSG_CODE_BAD_REQUEST, gwhy);
        return;
    }
    if (g->grammar)
        actor_counters_add(f->counters, "requests.constrained", 1);
    int err = 0;
    s_req_t *r =
        serve_requests_add(f->reqs, ident, ident_len, g, have, tokens, base_now_us(), &err);
    if (err == -EEXIST && resume) {
        /* the client's first send of this request was still queued when its
         * connection dropped and went out on the new one before this resume:
         * that one runs; the client drops the events it has (by index) */
        actor_counters_add(f->counters, "resumes.running", 1);
        return;
    }
    if (err == -EEXIST) {
        actor_counters_add(f->counters, "rejected.duplicate_id", 1);
        s_reply_error(f, ident, ident_len, false, g->id, MSG_CODE_BAD_REQUEST,
                      "a request with this id is already running");
        return;
    }
    if (!r) {
        actor_counters_add(f->counters, "rejected.overloaded", 1);
        s_reply_error(f, ident, ident_len, false, g->id, MSG_CODE_OVERLOADED,
                      err == -ENOMEM ? "out of memory" : "too many requests in flight");
        return;
    }
    r->tools = tools;
    r->fd = fd;
    r->fd_gen = fd >= 0 && fd < S_MAX_FD && f->fd_gen ? f->fd_gen[fd] : 0;
    if (client_key)
        snprintf(r->client_key, sizeof r->client_key, "%s", client_key);
    s_submit(f, r);
}

/* An embed: a request of the table like a generate (so that a lost worker or a cancel
 * is handled the same way), submitted as embed_requests.  Takes e's prompt and tokens
 * over. */
static void s_on_embed(s_front_t *f, const uint8_t *ident, size_t ident_len, int fd,
                       const char *client_key, msg_embed_t *e) {
    actor_counters_add(f->counters, "requests.embed", 1);
    msg_generate_t g;
    msg_generate_init(&g);
    snprintf(g.id, sizeof g.id, "%s", e->id);
    g.prompt = e->prompt; /* taken over by the table */
    g.prompt_len = e->prompt_len;
    e->prompt = NULL;
    g.max_tokens = 1;
    g.stream = false;
    int err = 0;
    s_req_t *r = serve_requests_add(f->reqs, ident, ident_len, &g, 0, NULL, base_now_us(), &err);
    msg_generate_clear(&g);
    if (!r) {
        actor_counters_add(f->counters,
                           err == -EEXIST ? "rejected.duplicate_id" : "rejected.overloaded", 1);
        s_reply_error(f, ident, ident_len, false, e->id,
                      err == -EEXIST ? MSG_CODE_BAD_REQUEST : MSG_CODE_OVERLOADED,
                      err == -EEXIST   ? "a request with this id is already running"
                      : err == -ENOMEM ? "out of memory"
                                       : "too many requests in flight");
        return;
    }
    r->embed = true;
    r->embed_ids = e->tokens; /* taken over */
    r->n_embed_ids = e->n_tokens;
    e->tokens = NULL;
    e->n_tokens = 0;
    r->fd = fd;
    r->fd_gen = fd >= 0 && fd < S_MAX_FD && f->fd_gen ? f->fd_gen[fd] : 0;
    if (client_key)
        snprintf(r->client_key, sizeof r->client_key, "%s", client_key);
    s_submit(f, r);
}

/* serve_metrics' export into the actor's counters (base_hist_put_fn). */
static void s_put_counter(void *counters, const char *name, int64_t value) {
    actor_counters_set(counters, name, value);
}

static void s_stats_reply(s_front_t *f, const uint8_t *ident, size_t ident_len) {
    msg_stats_reply_t s;
    msg_stats_reply_init(&s);
    char name[MSG_MAX_COUNTER_NAME_BYTES + ACTOR_TOPO_NAME + 2];
    actor_counters_set(f->counters, "requests.active", serve_requests_count(f->reqs));
    serve_metrics_req_export(f->metrics, s_put_counter, f->counters);
    actor_loop_refresh_counters(f->loop);
    for (int i = 0; i < actor_counters_count(f->counters); i++) {
        snprintf(name, sizeof name, "frontend.%s", actor_counters_name_at(f->counters, i));
        msg_counters_add(&s.counters, &s.n_counters, name, actor_counters_value_at(f->counters, i));
    }
    for (int p = 0; p < f->n_peers; p++)
        for (int i = 0; i < f->peers[p].n_counters; i++) {
            snprintf(name, sizeof name, "%s.%s", f->peers[p].name, f->peers[p].counters[i].name);
            msg_counters_add(&s.counters, &s.n_counters, name, f->peers[p].counters[i].value);
        }
    s_reply(f, ident, ident_len, false, MSG_STATS_REPLY, &s);
    free(s.counters);
}

/* Ask every peer for fresh counters; the reply goes out when all answered (or
 * after STATS_WAIT_US with what is known). */
static void s_on_stats(s_front_t *f, const uint8_t *ident, size_t ident_len) {
    s_pending_stats_t *p = NULL;
    for (int i = 0; i < MAX_PENDING_STATS && !p; i++)
        if (!f->pending[i].t_us)
            p = &f->pending[i];
    if (!p || ident_len > MAX_IDENT) { /* too many at once: answer from the cache */
        s_stats_reply(f, ident, ident_len);
        return;
    }
    memcpy(p->ident, ident, ident_len);
    p->ident_len = ident_len;
    p->t_us = base_now_us();
    msg_stats_query_t q = {0};
    for (int i = 0; i < f->n_peers; i++)
        actor_send(f->peers[i].push, MSG_STATS_QUERY, &q);
}

static void s_stats_flush(s_front_t *f) {
    uint64_t now = base_now_us();
    for (int i = 0; i < MAX_PENDING_STATS; i++) {
        s_pending_stats_t *p = &f->pending[i];
        if (!p->t_us)
            continue;
        bool fresh = true;
        for (int k = 0; k < f->n_peers && fresh; k++)
            fresh = f->peers[k].last_stats_us >= p->t_us;
        if (fresh || now - p->t_us > STATS_WAIT_US) {
            s_stats_reply(f, p->ident, p->ident_len);
            p->t_us = 0;
        }
    }
}

static void s_on_health(s_front_t *f, const uint8_t *ident, size_t ident_len) {
    msg_health_reply_t h;
    msg_health_reply_init(&h);
    h.actors = calloc((size_t)f->n_peers + 1, sizeof *h.actors);
    if (!h.actors)
        return;
    uint64_t now = base_now_us();
    h.ok = true;
    msg_set_str(h.actors[0].name, sizeof h.actors[0].name, "frontend");
    h.actors[0].state = MSG_STATE_READY;
    h.n_actors = 1;
    for (int p = 0; p < f->n_peers; p++) {
        msg_actor_health_t *a = &h.actors[h.n_actors++];
        const s_peer_t *x = &f->peers[p];
        msg_set_str(a->name, sizeof a->name, x->name);
        if (!x->last_seen_us) {
            a->state = MSG_STATE_STARTING;
            a->last_seen_ms = 0;
        } else {
            a->last_seen_ms = (int64_t)((now - x->last_seen_us) / 1000);
            a->state = now - x->last_seen_us > UNHEALTHY_US ? MSG_STATE_UNHEALTHY : MSG_STATE_READY;
        }
        if (x->restarting) {
            a->state = MSG_STATE_RESTARTING;
        }
        if (a->state != MSG_STATE_READY)
            h.ok = false;
    }
    s_reply(f, ident, ident_len, false, MSG_HEALTH_REPLY, &h);
    free(h.actors);
}

/* ---- socket monitor: a closed client connection cancels what came from it */

static void s_on_monitor(void *self, zsock_t *sock);

/* Read one client message (identity, optional delimiter, payload) and act on it. */
static void s_on_client(void *self, zsock_t *sock) {
    s_front_t *f = self;
    /* the socket events of a connection precede its messages: read them
     * first, every time, so each request gets its own fd_gen */
    while (zsock_events(f->monitor) & ZMQ_POLLIN)
        s_on_monitor(f, f->monitor);
    void *h = zsock_resolve(sock);
    zmq_msg_t part[4];
    int n = 0;
    bool more = true, ok = true;
    int fd = -1;
    while (more) {
        zmq_msg_t x;
        zmq_msg_init(&x);
        if (zmq_msg_recv(&x, h, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&x);
            break;
        }
        more = zmq_msg_more(&x);
        if (n == 1)
            fd = zmq_msg_get(&x, ZMQ_SRCFD);
        if (n < 4)
            part[n++] = x;
        else {
            zmq_msg_close(&x);
            ok = false;
        }
    }
    if (n == 0)
        return;
    const uint8_t *ident = zmq_msg_data(&part[0]);
    size_t ident_len = zmq_msg_size(&part[0]);
    /* a message is exactly one frame (docs/PROTOCOL.md).  Anything else is refused
     * with one error: its id read from the last frame when that one has a readable
     * id, else nil.  A REQ socket's empty delimiter is echoed, so that a REQ client
     * can read why it was refused; nothing it sends is ever served. */
    bool delim = n >= 3 && zmq_msg_size(&part[1]) == 0;
    if (!ok || n != 2) {
        char id[MSG_MAX_ID_BYTES + 1] = "";
        if (n >= 2)
            msg_peek_id(zmq_msg_data(&part[n - 1]), zmq_msg_size(&part[n - 1]), id, sizeof id);
        s_malformed(f, "envelope");
        s_reply_error(f, ident, ident_len, delim, id, MSG_CODE_BAD_REQUEST,
                      n == 3 && delim ? "an empty delimiter frame before the message: REQ "
                                        "sockets are not supported, use a DEALER"
                                      : "a message must be one single-part frame");
        goto done;
    }
    {
        const void *buf = zmq_msg_data(&part[1]);
        size_t len = zmq_msg_size(&part[1]);
        const char *user_id = f->curve_clients ? zmq_msg_gets(&part[1], "User-Id") : NULL;
        msg_any_t m;
        msg_err_t err;
        if (msg_any_decode(buf, len, &m, &err) < 0) {
            char id[MSG_MAX_ID_BYTES + 1] = "";
            msg_peek_id(buf, len, id, sizeof id); /* bounded: a frame here is <= 4 MiB */
            s_malformed(f, msg_err_kind_name(err.kind));
            s_reply_error(f, ident, ident_len, false, id, MSG_CODE_BAD_REQUEST, err.msg);
            goto done;
        }
        switch (m.type) {
        case MSG_GENERATE:
            s_on_generate(f, ident, ident_len, fd, user_id, &m.u.generate, false, 0, NULL);
            break;
        case MSG_RESUME:
            s_on_generate(f, ident, ident_len, fd, user_id, &m.u.resume.gen, true, m.u.resume.have,
                          m.u.resume.n_tokens ? m.u.resume.tokens : NULL);
            break;
        case MSG_EMBED:
            s_on_embed(f, ident, ident_len, fd, user_id, &m.u.embed);
            break;
        case MSG_CANCEL: {
            s_req_t *r = serve_requests_find_client(f->reqs, ident, ident_len, m.u.cancel.id);
            if (r)
                s_cancel(f, r, "client");
            else
                s_reply_error(f, ident, ident_len, false, m.u.cancel.id, MSG_CODE_NOT_FOUND,
                              "no running request with this id");
            break;
        }
        case MSG_STATS:
            s_on_stats(f, ident, ident_len);
            break;
        case MSG_HEALTH:
            s_on_health(f, ident, ident_len);
            break;
        default: {
            char id[MSG_MAX_ID_BYTES + 1] = "";
            msg_peek_id(buf, len, id, sizeof id);
            s_malformed(f, "not_a_request");
            char why[128];
            snprintf(why, sizeof why, "'%s' is not a client request", msg_type_name(m.type));
            s_reply_error(f, ident, ident_len, false, id, MSG_CODE_BAD_REQUEST, why);
        }
        }
        msg_any_clear(&m);
    }
done:
    for (int i = 0; i < n; i++)
        zmq_msg_close(&part[i]);
}

static void s_on_monitor(void *self, zsock_t *sock) {
    s_front_t *f = self;
    zmsg_t *msg = zmsg_recv(sock);
    if (!msg)
        return;
    zframe_t *ev = zmsg_first(msg);
    if (ev && zframe_size(ev) >= 6) {
        const uint8_t *d = zframe_data(ev);
        uint16_t event = (uint16_t)(d[0] | d[1] << 8);
        int32_t value = (int32_t)((uint32_t)d[2] | (uint32_t)d[3] << 8 | (uint32_t)d[4] << 16 |
                                  (uint32_t)d[5] << 24);
        bool tracked = value >= 0 && value < S_MAX_FD && f->fd_gen;
        if (event == ZMQ_EVENT_DISCONNECTED) {
            actor_counters_add(f->counters, "clients.disconnected", 1);
            uint32_t gen = tracked ? f->fd_gen[value] : 0;
            for (int i = 0; i < serve_requests_slots(f->reqs); i++) {
                s_req_t *r = serve_requests_at(f->reqs, i);
                if (r->rid && r->fd == value && r->fd_gen == gen) {
                    r->gone = true;
                    s_cancel(f, r, "disconnect");
                }
            }
        } else if (event == ZMQ_EVENT_ACCEPTED) {
            actor_counters_add(f->counters, "clients.accepted", 1);
            if (tracked)
                f->fd_gen[value]++;
        }
    }
    zmsg_destroy(&msg);
}

/* ---- internal events */

/* A traced request's final event came: send its `trace` (the frontend's steps, the
 * final attempt's chain, the delivery) with the spans of the completion copied from
 * the prompt or the messages. */
static void s_send_trace(s_front_t *f, s_req_t *r, const msg_text_event_t *te) {
    msg_trace_t t;
    if (serve_events_trace(r, te, base_now_us(), &t))
        return;
    s_to_client(f, r, MSG_TRACE, &t);
    actor_counters_add(f->counters, "traces", 1);
    if (f->audit) { /* the record keeps the trace as the client got it */
        msg_err_t err;
        free(r->trace);
        r->trace = NULL;
        if (msg_encode(MSG_TRACE, &t, &r->trace, &r->trace_len, &err))
            r->trace_len = 0;
    }
    serve_events_trace_clear(&t);
}

static void s_on_text(void *self, const msg_text_event_t *te) {
    s_front_t *f = self;
    s_req_t *r = s_find_rid(f, te->rid);
    if (!r) {
        /* an attempt that was replaced, or one a frontend before this one started:
         * nobody waits for it, stop it */
        actor_counters_add(f->counters, "events.unknown_rid", 1);
        if (!te->finish)
            s_cancel_rid(f, te->rid, te->worker);
        return;
    }
    if (r->final_due_us) /* over: only its final error waits for room */
        return;
    switch (serve_requests_event(f->reqs, r, te->worker, te->index, te->token, te->finish,
                                 te->count, base_now_us())) {
    case SERVE_EVENT_DUPLICATE: /* a duplicated frame */
        actor_counters_add(f->counters, "events.duplicate", 1);
        return;
    case SERVE_EVENT_INVALID: /* no worker sends that: drop it */
        actor_counters_add(f->counters, "events.invalid", 1);
        return;
    case SERVE_EVENT_GAP:
        actor_counters_add(f->counters, "events.gap", 1); /* a lost event: go on from here */
        s_resubmit(f, r, "gap", 0);
        return;
    case SERVE_EVENT_ACCEPT:
        break;
    }
    if (te->index >= 0) {
        actor_counters_add(f->counters, "tokens", 1);
        /* below skip: the client has it already (a resume without token ids) */
        if (serve_requests_to_client(r, te->index)) {
            msg_token_t t;
            serve_events_token(r, te, &t);
            s_to_client(f, r, MSG_TOKEN, &t);
        }
        if (!r->stream && te->has_logprob)
            serve_requests_keep_logprob(r, te->logprob, te->piece, te->top, te->n_top);
    }
    if (f->audit && te->text_len)
        audit_digest_update(&r->out, te->text, te->text_len);
    if ((!r->stream || r->gen.trace || r->tools) && te->text_len)
        serve_requests_keep_text(r, te->text, te->text_len); /* out of memory: cut there */
    if (!te->finish)
        return;
    if (r->gen.trace)
        s_send_trace(f, r, te);
    msg_done_t d;
    if (serve_events_done(r, te, &d))
        actor_counters_add(f->counters, "tool_calls.oom", 1); /* said as text only */
    char name[48];
    snprintf(name, sizeof name, "finished.%s", msg_finish_name(te->finish));
    actor_counters_add(f->counters, name, 1);
    serve_metrics_req_observe(f->metrics, &d);
    s_end(f, r, MSG_DONE, &d);
    serve_events_done_clear(&d);
}

/* The vector of an embed: its answer, and its end. */
static void s_on_embedding(void *self, const msg_work_embedding_t *m) {
    s_front_t *f = self;
    s_req_t *r = s_find_rid(f, m->rid);
    if (!r || r->final_due_us || !r->embed) {
        actor_counters_add(f->counters, "events.unknown_rid", 1);
        return;
    }
    msg_embedding_t e;
    msg_embedding_init(&e);
    msg_set_str(e.id, sizeof e.id, r->id);
    e.embedding = m->embedding; /* borrowed */
    e.dim = m->dim;
    e.prompt_tokens = m->prompt_tokens;
    actor_counters_add(f->counters, "finished.embed", 1);
    s_end(f, r, MSG_EMBEDDING, &e);
}

static void s_on_work_error(void *self, const msg_work_error_t *e) {
    s_front_t *f = self;
    s_req_t *r = s_find_rid(f, e->rid);
    if (!r || r->final_due_us) {
        actor_counters_add(f->counters, "events.unknown_rid", 1);
        return;
    }
    /* a request the client already saw start (a resumed one) is not refused for
     * want of room, and no request fails because a worker is restarting: both
     * wait and try again, up to resume_timeout_ms without progress */
    uint64_t wait;
    if (serve_requests_retry_error(r, e->code, &wait)) {
        s_resubmit(f, r, e->code == MSG_CODE_OVERLOADED ? "overloaded" : "internal", wait);
        return;
    }
    s_fail(f, r, e->code, e->message);
}

/* A worker says whether it holds attempt rid. */
static void s_on_status(void *self, const msg_work_status_t *st) {
    s_front_t *f = self;
    s_req_t *r = s_find_rid(f, st->rid);
    if (!r) {
        if (st->held) { /* a replaced attempt that reached a worker late */
            actor_counters_add(f->counters, "orphans.cancelled", 1);
            s_cancel_rid(f, st->rid, st->worker);
        }
        return;
    }
    if (r->final_due_us)
        return;
    if (!st->held) {
        s_resubmit(f, r, "not_held", 0);
        return;
    }
    serve_requests_held(f->reqs, r, st->worker, base_now_us());
    if (r->cancel_sent) /* the cancel was lost */
        s_cancel_rid(f, r->rid, r->worker);
}

/* Every attempt on worker w is lost (it died, or hangs). */
static void s_worker_lost(s_front_t *f, int w, const char *why) {
    for (int i = 0; i < serve_requests_slots(f->reqs); i++) {
        s_req_t *r = serve_requests_at(f->reqs, i);
        if (r->rid && r->worker == w && !r->retry_at_us && !r->final_due_us)
            s_resubmit(f, r, why, 0);
    }
}

/* Every 100 ms: attempts not accepted in time, silent ones probed, backoffs over. */
static void s_watch(void *self) {
    s_front_t *f = self;
    uint64_t now = base_now_us();
    for (int i = 0; i < serve_requests_slots(f->reqs); i++) {
        s_req_t *r = serve_requests_at(f->reqs, i);
        if (!r->rid)
            continue;
        switch (serve_requests_due(f->reqs, r, now)) {
        case SERVE_DUE_NOTHING:
            break;
        case SERVE_DUE_FINAL:
            if (s_final_slow(f, r))
                s_remove(f, r);
            break;
        case SERVE_DUE_SUBMIT:
            s_submit(f, r);
            break;
        case SERVE_DUE_UNACCEPTED:
            s_resubmit(f, r, "unaccepted", 0);
            break;
        case SERVE_DUE_SILENT:
            s_resubmit(f, r, "silent", 0);
            break;
        case SERVE_DUE_PROBE: {
            msg_work_probe_t p = {r->rid};
            zsock_t *to = s_worker_push(f, r->worker);
            if (to && actor_send(to, MSG_WORK_PROBE, &p) == 0)
                actor_counters_add(f->counters, "probes", 1);
            break;
        }
        }
    }
}

static s_peer_t *s_peer(s_front_t *f, const char *name) {
    for (int i = 0; i < f->n_peers; i++)
        if (!strcmp(f->peers[i].name, name))
            return &f->peers[i];
    return NULL;
}

static void s_on_pong(void *self, const msg_pong_t *m) {
    s_peer_t *p = s_peer(self, m->name);
    if (p) {
        p->last_seen_us = base_now_us();
        p->restarting = false;
        if (p->hung)
            LOG_I(TAG, "%s answers again", p->name);
        p->hung = false;
    }
}

/* Untyped (actor_loop_on): it takes the counters array of the message over. */
static void s_on_stats_answer(void *self, msg_any_t *m, zmq_msg_t *raw) {
    (void)raw;
    msg_stats_answer_t *a = &m->u.stats_answer;
    s_peer_t *p = s_peer(self, a->name);
    if (p) {
        p->last_seen_us = p->last_stats_us = base_now_us();
        p->restarting = false;
        free(p->counters);
        p->counters = a->counters; /* take it over */
        p->n_counters = a->n_counters;
        a->counters = NULL;
        a->n_counters = 0;
    }
}

static void s_on_worker_down(void *self, const msg_worker_down_t *m) {
    s_front_t *f = self;
    char name[32];
    snprintf(name, sizeof name, "worker%d", m->worker);
    s_peer_t *p = s_peer(f, name);
    if (p)
        p->restarting = true;
    actor_counters_add(f->counters, "workers_down", 1);
    s_worker_lost(f, m->worker, "worker_down");
}

/* Every PING_US: a ping and a stats query to every peer. */
static void s_heartbeat(void *self) {
    s_front_t *f = self;
    if (f->audit && audit_log_tick(f->audit))
        actor_counters_add(f->counters, "audit.sync_failed", 1);
    msg_ping_t p = {++f->ping_seq};
    msg_stats_query_t q = {0};
    uint64_t now = base_now_us();
    for (int i = 0; i < f->n_peers; i++) {
        s_peer_t *x = &f->peers[i];
        if (f->hang_us && x->worker >= 0 && x->last_seen_us && !x->hung && !x->restarting &&
            now - x->last_seen_us > f->hang_us) {
            /* a hung worker: its requests go on elsewhere, the router stops sending
             * it new ones (until its next load report); a supervisor, where there
             * is one, kills and restarts it */
            x->hung = true;
            LOG_W(TAG, "%s answers no heartbeat for %.1f s: moving its requests", x->name,
                  (double)(now - x->last_seen_us) / 1e6);
            actor_counters_add(f->counters, "workers_hung", 1);
            msg_worker_down_t d = {x->worker};
            s_peer_t *router = s_peer(f, "router");
            if (router && actor_send(router->push, MSG_WORKER_DOWN, &d))
                actor_counters_add(f->counters, "send.failed", 1);
            s_worker_lost(f, x->worker, "hung");
        }
    }
    for (int i = 0; i < f->n_peers; i++) {
        if (actor_send(f->peers[i].push, MSG_PING, &p) ||
            actor_send(f->peers[i].push, MSG_STATS_QUERY, &q))
            actor_counters_add(f->counters, "heartbeat.unsent", 1);
    }
}

/* After every wakeup: answer the stats requests whose counters are fresh;
 * while some wait, wake up every 10 ms. */
static int s_idle(void *self) {
    s_front_t *f = self;
    s_stats_flush(f);
    for (int i = 0; i < MAX_PENDING_STATS; i++)
        if (f->pending[i].t_us)
            return 10;
    return -1;
}

static void s_cleanup(s_front_t *f) {
    serve_requests_destroy(&f->reqs);
    free(f->fd_gen);
    for (int i = 0; f->peers && i < f->n_peers; i++) {
        if (f->peers[i].push != f->to_tok)
            zsock_destroy(&f->peers[i].push);
        free(f->peers[i].counters);
    }
    free(f->peers);
    zsock_destroy(&f->monitor);
    zsock_destroy(&f->clients);
    zsock_destroy(&f->in);
    zsock_destroy(&f->to_tok);
    audit_log_destroy(&f->audit);
    actor_loop_destroy(&f->loop);
    serve_metrics_req_destroy(&f->metrics);
}

int actor_frontend_main(actor_env_t *env) {
    const actor_frontend_cfg_t *conf = actor_env_cfg(env);
    const actor_topology_t *t = actor_env_topology(env);
    s_front_t f = {0};
    f.env = env;
    uint64_t first_rid; /* a random start: a restarted frontend never reuses a rid */
    if (getrandom(&first_rid, sizeof first_rid, 0) != sizeof first_rid)
        first_rid = base_now_us() << 20;
    first_rid &= (UINT64_C(1) << 62) - 1; /* room to count up */
    f.accept_us = (uint64_t)conf->accept_ms * 1000 * BASE_TIMEOUT_SCALE;
    f.probe_us = (uint64_t)conf->probe_ms * 1000 * BASE_TIMEOUT_SCALE;
    f.give_up_us = (uint64_t)conf->resume_timeout_ms * 1000 * BASE_TIMEOUT_SCALE;
    f.hang_us = (uint64_t)conf->hang_timeout_ms * 1000 * BASE_TIMEOUT_SCALE;
    snprintf(f.endpoint, sizeof f.endpoint, "%s", conf->client);
    const serve_requests_cfg_t cfg = {conf->max_requests, f.accept_us, f.probe_us, f.give_up_us};
    f.reqs = serve_requests_new(&cfg, first_rid); /* NULL: reported below with the rest */
    f.fd_gen = calloc(S_MAX_FD, sizeof *f.fd_gen);
    f.loop = actor_loop_new(env, &f);
    f.counters = f.loop ? actor_loop_counters(f.loop) : NULL;
    f.metrics = serve_metrics_req_new(); /* NULL (out of memory): no histograms */
    int nw = actor_topology_workers(t);
    f.peers = calloc((size_t)t->n + 2, sizeof *f.peers); /* at most every entry */
    f.in = actor_sock_inbound(t, "frontend", ACTOR_MAX_FRAME, ACTOR_HWM_STREAM);
    f.to_tok = actor_sock_outbound(t, "frontend", "tokenizer", ACTOR_HWM_BULK);
    if (!f.reqs || !f.fd_gen || !f.loop || !f.peers || !f.in || !f.to_tok) {
        actor_env_fail(env, "frontend: cannot set up (sockets or memory)");
        s_cleanup(&f);
        return 1;
    }
    /* peers: the tokenizer shares the request socket; the others get their own */
    for (int i = 0; i < t->n + 2; i++)
        f.peers[i].worker = -1;
    snprintf(f.peers[0].name, sizeof f.peers[0].name, "tokenizer");
    f.peers[0].push = f.to_tok;
    snprintf(f.peers[1].name, sizeof f.peers[1].name, "router");
    f.peers[1].push = actor_sock_outbound(t, "frontend", "router", ACTOR_HWM_ADMIT);
    f.n_peers = 2;
    for (int i = 0; i < nw; i++) {
        s_peer_t *p = &f.peers[f.n_peers++];
        p->worker = i;
        snprintf(p->name, sizeof p->name, "worker%d", i);
        p->push = actor_sock_outbound(t, "frontend", p->name, ACTOR_HWM_ADMIT);
    }
    /* every other actor of the topology (kvtier, prefetcher, draft, ...) */
    for (int i = 0; i < t->n; i++) {
        const char *n = t->entries[i].name;
        if (actor_topology_reserved(n) || !actor_topology_endpoint(t, n) ||
            !strcmp(n, "frontend") || !strcmp(n, "tokenizer") || !strcmp(n, "router") ||
            (!strncmp(n, "worker", 6) && n[6] >= '0' && n[6] <= '9'))
            continue;
        s_peer_t *p = &f.peers[f.n_peers++];
        snprintf(p->name, sizeof p->name, "%s", n);
        p->push = actor_sock_outbound(t, "frontend", n, ACTOR_HWM_ADMIT);
    }
    for (int i = 0; i < f.n_peers; i++)
        if (!f.peers[i].push) {
            actor_env_fail(env, "frontend: cannot connect to %s", f.peers[i].name);
            s_cleanup(&f);
            return 1;
        }
    /* the client socket: bounded frames (frames above the protocol limit but
     * below this one get a "too_big" error; bigger ones drop the connection),
     * unroutable replies reported, dead peers found by ZMTP heartbeats */
    f.clients = zsock_new(ZMQ_ROUTER);
    if (f.clients) {
        zsock_set_maxmsgsize(f.clients, (int)(4 * MSG_MAX_CLIENT_FRAME));
        zsock_set_router_mandatory(f.clients, 1);
        zsock_set_sndhwm(f.clients, 100000);
        zsock_set_rcvhwm(f.clients, 10000);
        zsock_set_linger(f.clients, 0);
        zsock_set_heartbeat_ivl(f.clients, 1000);
        zsock_set_heartbeat_timeout(f.clients, 3000);
        const char *secret = conf->client_secret;
        char why[512];
        if (secret &&
            actor_curve_server(f.clients, secret, ACTOR_CURVE_CLIENT_DOMAIN, why, sizeof why)) {
            actor_env_fail(env, "frontend: %s", why);
            s_cleanup(&f);
            return 1;
        }
        f.curve_clients = secret != NULL;
        char mon[128];
        snprintf(mon, sizeof mon, "inproc://strata-frontend-monitor-%d-%p", (int)getpid(),
                 (void *)f.clients);
        if (zmq_socket_monitor(zsock_resolve(f.clients), mon,
                               ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPTED) == 0)
            f.monitor = zsock_new(ZMQ_PAIR);
        if (f.monitor && zsock_connect(f.monitor, "%s", mon) < 0)
            zsock_destroy(&f.monitor);
    }
    if (!f.clients || !f.monitor || zsock_bind(f.clients, "%s", f.endpoint) < 0) {
        actor_env_fail(env, "frontend: cannot listen on %s: %s", f.endpoint,
                       zmq_strerror(zmq_errno()));
        s_cleanup(&f);
        return 1;
    }
    const char *audit_dir = conf->audit_dir;
    if (audit_dir && *audit_dir) {
        /* the model every worker serves: worker0's (a topology gives them all one) */
        const char *model = actor_topology_opt(t, "worker0", "model", NULL);
        int rc = model ? audit_sha256_file(model, f.model_sha256) : -ENOENT;
        if (rc)
            LOG_W(TAG, "audit: cannot hash the model %s (%s): records carry no model hash",
                  model ? model : "(none)", strerror(-rc));
        audit_config_t cfg = {0}; /* zero fields: the defaults */
        cfg.fsync = conf->audit_fsync;
        cfg.store_text = conf->audit_text;
        if (!(f.audit = audit_log_new(audit_dir, &cfg))) {
            actor_env_fail(env,
                           "frontend: cannot open the audit log in %s (strata audit verify "
                           "%s says why)",
                           audit_dir, audit_dir);
            s_cleanup(&f);
            return 1;
        }
        LOG_I(TAG, "audit log in %s", audit_dir);
    }
    LOG_I(TAG, "listening on %s", f.endpoint);
    actor_env_ready(env);

    /* disconnects first, so a reused fd cannot cancel a newer request */
    actor_loop_reader(f.loop, f.monitor, s_on_monitor);
    actor_loop_inbox(f.loop, f.in, NULL, false, "internal.");
    actor_loop_reader(f.loop, f.clients, s_on_client);
    actor_loop_handle_text_event(f.loop, s_on_text);
    actor_loop_handle_work_error(f.loop, s_on_work_error);
    actor_loop_handle_work_embedding(f.loop, s_on_embedding);
    actor_loop_handle_pong(f.loop, s_on_pong);
    actor_loop_on(f.loop, MSG_STATS_ANSWER, s_on_stats_answer);
    actor_loop_handle_worker_down(f.loop, s_on_worker_down);
    actor_loop_handle_work_status(f.loop, s_on_status);
    actor_loop_timer(f.loop, PING_US / 1000, s_heartbeat);
    actor_loop_timer(f.loop, 100, s_watch);
    actor_loop_idle(f.loop, s_idle);
    s_heartbeat(&f); /* the first one at once: health knows every peer soon */
    actor_loop_run(f.loop, 100);
    s_cleanup(&f);
    return 0;
}

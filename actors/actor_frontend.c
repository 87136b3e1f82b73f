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
#include "actor_frontend_int.h"

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

#define TAG ACTOR_FRONTEND_TAG

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
    {"cache_wait_ms", ACTOR_OPT_INT, "250", 1, 60000, NULL,
     "a cacheable request waits this long for the semcache's answer, then is generated "
     "(docs/SEMCACHE.md)",
     .field = ACTOR_OPT_FIELD(actor_frontend_cfg_t, cache_wait_ms)},
    {"progress_ms", ACTOR_OPT_INT, "10000", 100, 3600000, NULL,
     "forward progress (health, /progressz): a worker that holds requests and produced no "
     "token for this long has stalled (docs/OPERATIONS.md)",
     .field = ACTOR_OPT_FIELD(actor_frontend_cfg_t, progress_ms)},
    {NULL},
};

static serve_request_t *s_find_rid(actor_frontend_t *f, uint64_t rid) {
    return serve_requests_find_rid(f->reqs, rid);
}

void actor_frontend_remove(actor_frontend_t *f, serve_request_t *r) {
    serve_requests_remove(f->reqs, r);
}

/* The socket towards worker w (its pings go there too), or NULL. */
zsock_t *actor_frontend_worker_push(actor_frontend_t *f, int w) {
    for (int i = 0; i < f->n_peers; i++)
        if (f->peers[i].worker == w && w >= 0)
            return f->peers[i].push;
    return NULL;
}

/* Stop attempt rid: straight to its worker when known, else through the tokenizer
 * and the router (which asks every worker when it does not know the rid).  0 when
 * the cancel went out. */
static int s_cancel_rid(actor_frontend_t *f, uint64_t rid, int worker) {
    msg_work_cancel_t c = {rid};
    zsock_t *to = actor_frontend_worker_push(f, worker);
    return actor_send(to ? to : f->to_tok, MSG_WORK_CANCEL, &c);
}

/* The client wants r over (or is gone).  r stays in the table until its final
 * event: a lost cancel is sent again when a probe finds the attempt still held. */
void actor_frontend_cancel(actor_frontend_t *f, serve_request_t *r, const char *why) {
    if (r->cancel_sent)
        return;
    r->cancel_sent = true;
    char name[64];
    snprintf(name, sizeof name, "cancelled.%s", why);
    actor_counters_add(f->counters, name, 1);
    if (s_cancel_rid(f, r->rid, r->worker))
        actor_counters_add(f->counters, "cancel.unsent", 1);
}

/* Send to the client of r; a vanished client cancels its requests.  An event the
 * encoder refuses (e.g. text that is not UTF-8) is never dropped in silence: the
 * request ends there with an `internal` error and is cancelled.  An event that
 * finds the client's queue full (a client that does not read) is dropped, and the
 * request is cancelled: it ends with the error actor_frontend_end gives a slow reader. */
static void s_to_client(actor_frontend_t *f, serve_request_t *r, int type, const void *m) {
    if (r->gone || r->slow)
        return;
    int rc = actor_frontend_reply(f, r->ident, r->ident_len, false, type, m);
    if (rc == -EAGAIN) {
        r->slow = true;
        actor_counters_add(f->counters, "clients.slow", 1);
        actor_frontend_cancel(f, r, "slow_reader");
        return;
    }
    if (rc == -EINVAL && type != MSG_ERROR) {
        actor_frontend_reply_error(f, r->ident, r->ident_len, false, r->id, MSG_CODE_INTERNAL,
                                   "the server could not encode an event of this request");
        r->gone = true;
        actor_frontend_cancel(f, r, "unencodable");
        return;
    }
    if (rc == -EHOSTUNREACH) {
        uint8_t ident[SERVE_MAX_IDENT];
        size_t n = r->ident_len;
        memcpy(ident, r->ident, n);
        actor_frontend_client_gone(f, ident, n);
    }
}

/* The final event of a slow reader's request: an error, sent when there is room
 * (retried from actor_frontend_watch for SERVE_FINAL_WAIT_US).  True when r may be removed. */
bool actor_frontend_final_slow(actor_frontend_t *f, serve_request_t *r) {
    if (r->gone)
        return true;
    msg_error_t x;
    msg_error_init(&x);
    msg_set_str(x.id, sizeof x.id, r->id);
    x.code = MSG_CODE_OVERLOADED;
    msg_set_str(x.message, sizeof x.message,
                "events of this request were dropped: the client did not read them fast "
                "enough (its queue was full)");
    int rc = actor_frontend_reply(f, r->ident, r->ident_len, false, MSG_ERROR, &x);
    if (rc == -EAGAIN &&
        (!r->final_due_us || base_now_us() - r->final_due_us < SERVE_FINAL_WAIT_US)) {
        if (!r->final_due_us)
            r->final_due_us = base_now_us();
        return false;
    }
    actor_counters_add(f->counters, rc ? "final.undeliverable" : "failed.slow_reader", 1);
    return true;
}

void actor_frontend_end(actor_frontend_t *f, serve_request_t *r, int type, const void *m) {
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
                            .resumes = r->attempts - 1,
                            .cache_kind = d && d->cache ? msg_cache_kind_names[d->cache] : NULL,
                            .cache_entry = d && d->cache ? d->cache_entry : NULL};
        if (audit_log_append(f->audit, &a))
            actor_counters_add(f->counters, "audit.failed", 1);
        else
            actor_counters_add(f->counters, "audit.records", 1);
    }
    s_to_client(f, r, type, m);
    if (!r->slow || actor_frontend_final_slow(f, r))
        actor_frontend_remove(f, r);
}

/* Send r's current attempt to the tokenizer: the client's generate and the
 * completion tokens delivered so far.  A full queue is retried after a backoff. */
static void s_done_cancelled(actor_frontend_t *f, serve_request_t *r);

void actor_frontend_submit(actor_frontend_t *f, serve_request_t *r) {
    if (r->cache_state == SERVE_CACHE_LOOKUP) { /* the semcache did not answer in time */
        actor_frontend_cache_timeout(f, r);
        if (r->cancel_sent) {
            s_done_cancelled(f, r);
            return;
        }
    }
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
static void s_fail(actor_frontend_t *f, serve_request_t *r, int code, const char *message) {
    msg_error_t x;
    msg_error_init(&x);
    msg_set_str(x.id, sizeof x.id, r->id);
    x.code = code;
    msg_set_str(x.message, sizeof x.message, message);
    char name[48];
    snprintf(name, sizeof name, "failed.%s", msg_code_name(code) ? msg_code_name(code) : "?");
    actor_counters_add(f->counters, name, 1);
    actor_frontend_end(f, r, MSG_ERROR, &x);
}

/* End r here with done "cancelled" (its attempt is gone, and it was cancelled). */
static void s_done_cancelled(actor_frontend_t *f, serve_request_t *r) {
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
    actor_frontend_end(f, r, MSG_DONE, &d);
}

/* r's current attempt is lost (why: a counter name): stop it and go on under a new
 * rid from the tokens delivered.  delay_us: wait that long first (0: at once). */
void actor_frontend_resubmit(actor_frontend_t *f, serve_request_t *r, const char *why,
                             uint64_t delay_us) {
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
        actor_frontend_submit(f, r);
}

/* A traced request's final event came: send its `trace` (the frontend's steps, the
 * final attempt's chain, the delivery) with the spans of the completion copied from
 * the prompt or the messages. */
void actor_frontend_trace(actor_frontend_t *f, serve_request_t *r, const msg_text_event_t *te) {
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
    actor_frontend_t *f = self;
    serve_request_t *r = s_find_rid(f, te->rid);
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
        actor_frontend_resubmit(f, r, "gap", 0);
        return;
    case SERVE_EVENT_ACCEPT:
        break;
    }
    if (te->index >= 0) {
        actor_counters_add(f->counters, "tokens", 1);
        actor_frontend_produced(f, te->worker);
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
    if ((!r->stream || r->gen.trace || r->tools || r->cache_state == SERVE_CACHE_STORE) &&
        te->text_len)
        serve_requests_keep_text(r, te->text, te->text_len); /* out of memory: cut there */
    if (!te->finish)
        return;
    if (r->gen.trace)
        actor_frontend_trace(f, r, te);
    msg_done_t d;
    if (serve_events_done(r, te, &d))
        actor_counters_add(f->counters, "tool_calls.oom", 1); /* said as text only */
    actor_frontend_cache_store(f, r, te);
    char name[48];
    snprintf(name, sizeof name, "finished.%s", msg_finish_name(te->finish));
    actor_counters_add(f->counters, name, 1);
    serve_metrics_req_observe(f->metrics, &d);
    actor_frontend_end(f, r, MSG_DONE, &d);
    serve_events_done_clear(&d);
}

/* The vector of an embed: its answer, and its end. */
static void s_on_embedding(void *self, const msg_work_embedding_t *m) {
    actor_frontend_t *f = self;
    serve_request_t *r = s_find_rid(f, m->rid);
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
    actor_frontend_end(f, r, MSG_EMBEDDING, &e);
}

static void s_on_work_error(void *self, const msg_work_error_t *e) {
    actor_frontend_t *f = self;
    serve_request_t *r = s_find_rid(f, e->rid);
    if (!r || r->final_due_us) {
        actor_counters_add(f->counters, "events.unknown_rid", 1);
        return;
    }
    /* a request the client already saw start (a resumed one) is not refused for
     * want of room, and no request fails because a worker is restarting: both
     * wait and try again, up to resume_timeout_ms without progress */
    uint64_t wait;
    if (serve_requests_retry_error(r, e->code, &wait)) {
        actor_frontend_resubmit(f, r, e->code == MSG_CODE_OVERLOADED ? "overloaded" : "internal",
                                wait);
        return;
    }
    s_fail(f, r, e->code, e->message);
}

/* A worker says whether it holds attempt rid. */
static void s_on_status(void *self, const msg_work_status_t *st) {
    actor_frontend_t *f = self;
    serve_request_t *r = s_find_rid(f, st->rid);
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
        actor_frontend_resubmit(f, r, "not_held", 0);
        return;
    }
    serve_requests_held(f->reqs, r, st->worker, base_now_us());
    if (r->cancel_sent) /* the cancel was lost */
        s_cancel_rid(f, r->rid, r->worker);
}

/* After every wakeup: answer the stats requests whose counters are fresh;
 * while some wait, wake up every 10 ms. */
static int s_idle(void *self) {
    actor_frontend_t *f = self;
    actor_frontend_stats_flush(f);
    for (int i = 0; i < ACTOR_FRONTEND_MAX_PENDING_STATS; i++)
        if (f->pending[i].t_us)
            return 10;
    return -1;
}

static void s_cleanup(actor_frontend_t *f) {
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
    actor_frontend_t f = {0};
    f.env = env;
    uint64_t first_rid; /* a random start: a restarted frontend never reuses a rid */
    if (getrandom(&first_rid, sizeof first_rid, 0) != sizeof first_rid)
        first_rid = base_now_us() << 20;
    first_rid &= (UINT64_C(1) << 62) - 1; /* room to count up */
    f.accept_us = (uint64_t)conf->accept_ms * 1000 * BASE_TIMEOUT_SCALE;
    f.probe_us = (uint64_t)conf->probe_ms * 1000 * BASE_TIMEOUT_SCALE;
    f.give_up_us = (uint64_t)conf->resume_timeout_ms * 1000 * BASE_TIMEOUT_SCALE;
    f.hang_us = (uint64_t)conf->hang_timeout_ms * 1000 * BASE_TIMEOUT_SCALE;
    f.progress_us = (uint64_t)conf->progress_ms * 1000 * BASE_TIMEOUT_SCALE;
    snprintf(f.endpoint, sizeof f.endpoint, "%s", conf->client);
    const serve_requests_cfg_t cfg = {conf->max_requests, f.accept_us, f.probe_us, f.give_up_us};
    f.reqs = serve_requests_new(&cfg, first_rid); /* NULL: reported below with the rest */
    f.fd_gen = calloc(ACTOR_FRONTEND_MAX_FD, sizeof *f.fd_gen);
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
        actor_frontend_peer_t *p = &f.peers[f.n_peers++];
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
        actor_frontend_peer_t *p = &f.peers[f.n_peers++];
        snprintf(p->name, sizeof p->name, "%s", n);
        p->push = actor_sock_outbound(t, "frontend", n, ACTOR_HWM_ADMIT);
    }
    for (int i = 0; i < f.n_peers; i++)
        if (!strcmp(f.peers[i].name, "semcache"))
            f.to_cache = f.peers[i].push;
    f.cache_wait_us = (uint64_t)conf->cache_wait_ms * 1000 * BASE_TIMEOUT_SCALE;
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
    actor_loop_reader(f.loop, f.monitor, actor_frontend_on_monitor);
    actor_loop_inbox(f.loop, f.in, NULL, false, "internal.");
    actor_loop_reader(f.loop, f.clients, actor_frontend_on_client);
    actor_loop_handle_text_event(f.loop, s_on_text);
    actor_loop_handle_work_error(f.loop, s_on_work_error);
    actor_loop_handle_work_embedding(f.loop, s_on_embedding);
    actor_loop_handle_pong(f.loop, actor_frontend_on_pong);
    actor_loop_on(f.loop, MSG_STATS_ANSWER, actor_frontend_on_stats_answer);
    actor_loop_handle_worker_down(f.loop, actor_frontend_on_worker_down);
    actor_loop_handle_work_status(f.loop, s_on_status);
    actor_loop_handle_drain(f.loop, actor_frontend_on_drain);
    actor_loop_handle_cache_answer(f.loop, actor_frontend_on_cache_answer);
    actor_loop_handle_cache_done(f.loop, actor_frontend_on_cache_done);
    actor_loop_timer(f.loop, ACTOR_FRONTEND_PING_US / 1000, actor_frontend_heartbeat);
    actor_loop_timer(f.loop, 100, actor_frontend_watch);
    actor_loop_idle(f.loop, s_idle);
    actor_frontend_heartbeat(&f); /* the first one at once: health knows every peer soon */
    actor_loop_run(f.loop, 100);
    s_cleanup(&f);
    return 0;
}

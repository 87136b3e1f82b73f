/* actor_frontend_peers.c - the other actors as the frontend sees them (actor_frontend_int.h):
 * heartbeats (ping / pong), hung and restarted actors and what happens to their requests,
 * and the stats and health answers the clients ask for. */
#include "actor_frontend_int.h"

#include "actor_curve.h"
#include "base_clock.h"
#include "base_log.h"
#include "serve_events.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG ACTOR_FRONTEND_TAG

/* serve_metrics' export into the actor's counters (base_hist_put_fn). */
static void s_put_counter(void *counters, const char *name, int64_t value) {
    actor_counters_set(counters, name, value);
}

static void s_stats_reply(actor_frontend_t *f, const uint8_t *ident, size_t ident_len) {
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
    actor_frontend_reply(f, ident, ident_len, false, MSG_STATS_REPLY, &s);
    free(s.counters);
}

/* Ask every peer for fresh counters; the reply goes out when all that can answer
 * have (see actor_frontend_stats_flush), or after ACTOR_FRONTEND_STATS_WAIT_US with
 * what is known. */
void actor_frontend_on_stats(actor_frontend_t *f, const uint8_t *ident, size_t ident_len) {
    actor_frontend_pending_t *p = NULL;
    for (int i = 0; i < ACTOR_FRONTEND_MAX_PENDING_STATS && !p; i++)
        if (!f->pending[i].t_us)
            p = &f->pending[i];
    if (!p || ident_len > SERVE_MAX_IDENT) { /* too many at once: answer from the cache */
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

void actor_frontend_stats_flush(actor_frontend_t *f) {
    uint64_t now = base_now_us();
    for (int i = 0; i < ACTOR_FRONTEND_MAX_PENDING_STATS; i++) {
        actor_frontend_pending_t *p = &f->pending[i];
        if (!p->t_us)
            continue;
        /* fresh when every peer that can answer has: one the supervisor reported dead
         * (restarting) or one silent past the unhealthy window is not waited for --
         * its last counters are in the reply, and health says what state it is in */
        bool fresh = true;
        for (int k = 0; k < f->n_peers && fresh; k++) {
            const actor_frontend_peer_t *x = &f->peers[k];
            fresh = x->last_stats_us >= p->t_us || x->restarting ||
                    now - x->last_seen_us > ACTOR_FRONTEND_UNHEALTHY_US * BASE_TIMEOUT_SCALE;
        }
        if (fresh || now - p->t_us > ACTOR_FRONTEND_STATS_WAIT_US) {
            s_stats_reply(f, p->ident, p->ident_len);
            p->t_us = 0;
        }
    }
}

/* The peer of worker w, or NULL. */
static actor_frontend_peer_t *s_worker_peer(actor_frontend_t *f, int w) {
    for (int p = 0; p < f->n_peers; p++)
        if (f->peers[p].worker == w)
            return &f->peers[p];
    return NULL;
}

void actor_frontend_produced(actor_frontend_t *f, int w) {
    actor_frontend_peer_t *p = s_worker_peer(f, w);
    if (p)
        p->last_token_us = base_now_us();
}

/* Forward progress: no request in flight is stalled -- one a worker holds stalls when
 * that worker answers no heartbeat, or has produced no token for progress_us since the
 * request was sent to it; one no worker holds yet stalls after progress_us. */
static bool s_progress(actor_frontend_t *f, uint64_t now) {
    for (int i = 0; i < serve_requests_slots(f->reqs); i++) {
        const serve_request_t *r = serve_requests_at(f->reqs, i);
        if (!r->rid || r->final_due_us || r->retry_at_us)
            continue;
        uint64_t since = r->t_sent_us;
        const actor_frontend_peer_t *p = r->worker >= 0 ? s_worker_peer(f, r->worker) : NULL;
        if (p && now - p->last_seen_us > ACTOR_FRONTEND_UNHEALTHY_US * BASE_TIMEOUT_SCALE)
            return false;
        if (p && p->last_token_us > since)
            since = p->last_token_us;
        if (now > since && now - since > f->progress_us)
            return false;
    }
    return true;
}

void actor_frontend_on_health(actor_frontend_t *f, const uint8_t *ident, size_t ident_len) {
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
    bool seen_all = true, tok = false, router = false, worker = false;
    for (int p = 0; p < f->n_peers; p++) {
        msg_actor_health_t *a = &h.actors[h.n_actors++];
        const actor_frontend_peer_t *x = &f->peers[p];
        msg_set_str(a->name, sizeof a->name, x->name);
        if (!x->last_seen_us) {
            a->state = MSG_STATE_STARTING;
            a->last_seen_ms = 0;
            seen_all = false;
        } else {
            a->last_seen_ms = (int64_t)((now - x->last_seen_us) / 1000);
            a->state = now - x->last_seen_us > ACTOR_FRONTEND_UNHEALTHY_US * BASE_TIMEOUT_SCALE
                           ? MSG_STATE_UNHEALTHY
                           : MSG_STATE_READY;
        }
        if (x->restarting) {
            a->state = MSG_STATE_RESTARTING;
        }
        if (a->state != MSG_STATE_READY)
            h.ok = false;
        bool up = a->state == MSG_STATE_READY;
        tok |= up && !strcmp(x->name, "tokenizer");
        router |= up && !strcmp(x->name, "router");
        worker |= up && x->worker >= 0;
    }
    f->started |= seen_all;
    h.started = f->started;
    h.draining = f->draining;
    h.ready = !f->draining && tok && router && worker;
    h.progress = s_progress(f, now);
    h.in_flight = serve_requests_count(f->reqs);
    actor_frontend_reply(f, ident, ident_len, false, MSG_HEALTH_REPLY, &h);
    free(h.actors);
}

void actor_frontend_on_drain(void *self, const msg_drain_t *m) {
    actor_frontend_t *f = self;
    uint64_t end = base_now_us() + (uint64_t)m->grace_ms * 1000;
    if (!f->draining || end < f->drain_end_us)
        f->drain_end_us = end; /* a second drain may shorten the grace, never lengthen it */
    if (!f->draining)
        LOG_I(ACTOR_FRONTEND_TAG, "draining: %d requests in flight, grace %lld ms",
              serve_requests_count(f->reqs), (long long)m->grace_ms);
    f->draining = true;
    actor_counters_add(f->counters, "drains", 1);
    actor_frontend_drained(f);
}

void actor_frontend_drained(actor_frontend_t *f) {
    if (serve_requests_count(f->reqs) && base_now_us() < f->drain_end_us)
        return;
    int cut = 0;
    for (int i = 0; i < serve_requests_slots(f->reqs); i++) {
        serve_request_t *r = serve_requests_at(f->reqs, i);
        if (!r->rid)
            continue;
        if (!r->gone)
            actor_frontend_reply_error(f, r->ident, r->ident_len, false, r->gen.id,
                                       MSG_CODE_DRAINING,
                                       "the server drained before this request ended: resume it "
                                       "on another server");
        actor_frontend_cancel(f, r, "draining");
        actor_frontend_remove(f, r);
        cut++;
    }
    actor_counters_add(f->counters, "drain.cut", cut);
    LOG_I(ACTOR_FRONTEND_TAG, "drained (%d requests cut at the grace's end): stopping", cut);
    actor_loop_stop(f->loop);
}

/* Every attempt on worker w is lost (it died, or hangs). */
static void s_worker_lost(actor_frontend_t *f, int w, const char *why) {
    for (int i = 0; i < serve_requests_slots(f->reqs); i++) {
        serve_request_t *r = serve_requests_at(f->reqs, i);
        if (r->rid && r->worker == w && !r->retry_at_us && !r->final_due_us)
            actor_frontend_resubmit(f, r, why, 0);
    }
}

/* Every 100 ms: attempts not accepted in time, silent ones probed, backoffs over. */
void actor_frontend_watch(void *self) {
    actor_frontend_t *f = self;
    uint64_t now = base_now_us();
    for (int i = 0; i < serve_requests_slots(f->reqs); i++) {
        serve_request_t *r = serve_requests_at(f->reqs, i);
        if (!r->rid)
            continue;
        switch (serve_requests_due(f->reqs, r, now)) {
        case SERVE_DUE_NOTHING:
            break;
        case SERVE_DUE_FINAL:
            if (actor_frontend_final_slow(f, r))
                actor_frontend_remove(f, r);
            break;
        case SERVE_DUE_SUBMIT:
            actor_frontend_submit(f, r);
            break;
        case SERVE_DUE_UNACCEPTED:
            actor_frontend_resubmit(f, r, "unaccepted", 0);
            break;
        case SERVE_DUE_SILENT:
            actor_frontend_resubmit(f, r, "silent", 0);
            break;
        case SERVE_DUE_PROBE: {
            msg_work_probe_t p = {r->rid};
            zsock_t *to = actor_frontend_worker_push(f, r->worker);
            if (to && actor_send(to, MSG_WORK_PROBE, &p) == 0)
                actor_counters_add(f->counters, "probes", 1);
            break;
        }
        }
    }
    if (f->draining)
        actor_frontend_drained(f);
}

static actor_frontend_peer_t *s_peer(actor_frontend_t *f, const char *name) {
    for (int i = 0; i < f->n_peers; i++)
        if (!strcmp(f->peers[i].name, name))
            return &f->peers[i];
    return NULL;
}

void actor_frontend_on_pong(void *self, const msg_pong_t *m) {
    actor_frontend_peer_t *p = s_peer(self, m->name);
    if (p) {
        p->last_seen_us = base_now_us();
        p->restarting = false;
        if (p->hung)
            LOG_I(TAG, "%s answers again", p->name);
        p->hung = false;
    }
}

/* Untyped (actor_loop_on): it takes the counters array of the message over. */
void actor_frontend_on_stats_answer(void *self, msg_any_t *m, zmq_msg_t *raw) {
    (void)raw;
    msg_stats_answer_t *a = &m->u.stats_answer;
    actor_frontend_peer_t *p = s_peer(self, a->name);
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

void actor_frontend_on_worker_down(void *self, const msg_worker_down_t *m) {
    actor_frontend_t *f = self;
    char name[32];
    snprintf(name, sizeof name, "worker%d", m->worker);
    actor_frontend_peer_t *p = s_peer(f, name);
    if (p)
        p->restarting = true;
    actor_counters_add(f->counters, "workers_down", 1);
    s_worker_lost(f, m->worker, "worker_down");
}

/* Every ACTOR_FRONTEND_PING_US: a ping and a stats query to every peer. */
void actor_frontend_heartbeat(void *self) {
    actor_frontend_t *f = self;
    if (f->audit && audit_log_tick(f->audit))
        actor_counters_add(f->counters, "audit.sync_failed", 1);
    msg_ping_t p = {++f->ping_seq};
    msg_stats_query_t q = {0};
    uint64_t now = base_now_us();
    for (int i = 0; i < f->n_peers; i++) {
        actor_frontend_peer_t *x = &f->peers[i];
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
            actor_frontend_peer_t *router = s_peer(f, "router");
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

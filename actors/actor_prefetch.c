/* actor_prefetch.c - the prefetcher actor: request hints become promotions;
 * an LRU table of chat sessions (id -> latest prompt) drives warming. */
#include "actor_prefetch.h"

#include "base/base_log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One chat session: its latest prompt. */
typedef struct {
    char id[MSG_MAX_SESSION_BYTES + 1];
    int32_t *tokens; /* (n_tokens) */
    int n_tokens;
    uint64_t last_us; /* last turn's arrival; 0 = free entry */
} s_session_t;

typedef struct {
    actor_env_t *env;
    zsock_t *in;       /* inbound PULL */
    zsock_t *to_tier;  /* PUSH to the tier manager */
    zsock_t *to_front; /* PUSH to the frontend (pong, stats) */
    s_session_t *sessions;
    int n_sessions; /* capacity */
    int warm_sessions, warm_ms, warm_s;
    actor_counters_t *counters;
} s_prefetch_t;

/* Remember the latest prompt of session id (the oldest entry makes room). */
static void s_session_note(s_prefetch_t *p, const msg_kv_hint_t *h) {
    s_session_t *slot = NULL, *oldest = &p->sessions[0];
    for (int i = 0; i < p->n_sessions; i++) {
        s_session_t *s = &p->sessions[i];
        if (s->last_us && !strcmp(s->id, h->session)) {
            slot = s;
            break;
        }
        if (s->last_us < oldest->last_us)
            oldest = s;
    }
    if (!slot) {
        slot = oldest;
        if (slot->last_us)
            actor_counters_add(p->counters, "sessions.dropped", 1);
        memcpy(slot->id, h->session, sizeof slot->id);
        actor_counters_add(p->counters, "sessions.new", 1);
    }
    int32_t *t = realloc(slot->tokens, (size_t)h->n_tokens * sizeof *t);
    if (!t)
        return;
    memcpy(t, h->tokens, (size_t)h->n_tokens * sizeof *t);
    slot->tokens = t;
    slot->n_tokens = h->n_tokens;
    slot->last_us = actor_now_us();
}

static void s_on_hint(s_prefetch_t *p, const msg_kv_hint_t *h) {
    actor_counters_add(p->counters, "hints", 1);
    msg_kv_promote_t q;
    msg_kv_promote_init(&q);
    q.rid = h->rid;
    q.worker = h->worker;
    q.tokens = h->tokens;
    q.n_tokens = h->n_tokens;
    q.warm = false;
    if (actor_send(p->to_tier, MSG_KV_PROMOTE, &q))
        actor_counters_add(p->counters, "promote.dropped", 1); /* the worker times out */
    else
        actor_counters_add(p->counters, "promote.sent", 1);
    if (h->session[0])
        s_session_note(p, h);
}

/* Lift the blocks of the most recently active sessions into T1. */
static void s_warm(s_prefetch_t *p) {
    uint64_t now = actor_now_us(), horizon = (uint64_t)p->warm_s * 1000000;
    int done = 0, active = 0;
    uint64_t after = UINT64_MAX; /* walk sessions newest first */
    while (done < p->warm_sessions) {
        s_session_t *best = NULL;
        for (int i = 0; i < p->n_sessions; i++) {
            s_session_t *s = &p->sessions[i];
            if (s->last_us && s->last_us < after && now - s->last_us <= horizon &&
                (!best || s->last_us > best->last_us))
                best = s;
        }
        if (!best)
            break;
        after = best->last_us;
        msg_kv_promote_t q;
        msg_kv_promote_init(&q);
        q.tokens = best->tokens;
        q.n_tokens = best->n_tokens;
        q.warm = true;
        if (actor_send(p->to_tier, MSG_KV_PROMOTE, &q) == 0)
            actor_counters_add(p->counters, "warm.sent", 1);
        done++;
    }
    for (int i = 0; i < p->n_sessions; i++)
        active += p->sessions[i].last_us && now - p->sessions[i].last_us <= horizon;
    actor_counters_set(p->counters, "sessions.active", active);
}

static void s_cleanup(s_prefetch_t *p) {
    for (int i = 0; p->sessions && i < p->n_sessions; i++)
        free(p->sessions[i].tokens);
    free(p->sessions);
    zsock_destroy(&p->in);
    zsock_destroy(&p->to_tier);
    zsock_destroy(&p->to_front);
    actor_counters_destroy(&p->counters);
}

int actor_prefetch_main(actor_env_t *env) {
    const actor_topology_t *topo = actor_env_topology(env);
    const char *me = actor_env_name(env);
    s_prefetch_t p = {0};
    p.env = env;
    p.n_sessions = (int)actor_topology_opt_int(topo, me, "sessions", 256);
    p.warm_sessions = (int)actor_topology_opt_int(topo, me, "warm_sessions", 16);
    p.warm_ms = (int)actor_topology_opt_int(topo, me, "warm_ms", 250);
    p.warm_s = (int)actor_topology_opt_int(topo, me, "warm_s", 600);
    if (p.n_sessions < 1 || p.warm_sessions < 0 || p.warm_ms < 1 || p.warm_s < 1) {
        actor_env_fail(env, "%s: bad option value (sessions, warm_sessions, warm_ms, warm_s)", me);
        return 1;
    }
    if (!actor_topology_endpoint(topo, "kvtier")) {
        actor_env_fail(env, "%s: the topology has no kvtier actor to promote from", me);
        return 1;
    }
    p.sessions = calloc((size_t)p.n_sessions, sizeof *p.sessions);
    p.counters = actor_counters_new();
    p.in = actor_sock_inbound(actor_topology_endpoint(topo, me), MSG_MAX_INTERNAL_FRAME + 4096,
                              10000);
    p.to_tier = actor_sock_outbound(actor_topology_endpoint(topo, "kvtier"), 10000);
    p.to_front = actor_sock_outbound(actor_topology_endpoint(topo, "frontend"), 1000);
    if (!p.sessions || !p.counters || !p.in || !p.to_tier || !p.to_front) {
        actor_env_fail(env, "%s: cannot set up (sockets or memory)", me);
        s_cleanup(&p);
        return 1;
    }
    actor_env_ready(env);
    zpoller_t *poller = zpoller_new(actor_env_pipe(env), p.in, NULL);
    zpoller_set_nonstop(poller, true);
    uint64_t last_warm = actor_now_us();
    bool stop = false;
    while (!stop) {
        void *which = zpoller_wait(poller, p.warm_ms);
        if (which == actor_env_pipe(env))
            break;
        msg_any_t m;
        msg_err_t e;
        int rc;
        while (!stop && (rc = actor_recv(p.in, &m, &e)) != -EAGAIN) {
            if (rc < 0) {
                actor_counters_add(p.counters, "malformed", 1);
                continue;
            }
            if (m.type == MSG_KV_HINT)
                s_on_hint(&p, &m.u.kv_hint);
            else if (actor_ctl_handle(env, &m, p.to_front, p.counters) == 1)
                stop = true;
            else if (m.type != MSG_PING && m.type != MSG_STATS_QUERY)
                actor_counters_add(p.counters, "unexpected", 1);
            msg_any_clear(&m);
        }
        if (p.warm_sessions > 0 && actor_now_us() - last_warm >= (uint64_t)p.warm_ms * 1000) {
            s_warm(&p);
            last_warm = actor_now_us();
        }
    }
    zpoller_destroy(&poller);
    s_cleanup(&p);
    return 0;
}

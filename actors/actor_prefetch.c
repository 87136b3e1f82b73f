/* actor_prefetch.c - the prefetcher actor: request hints become promotions;
 * an LRU table of chat sessions (id -> latest prompt) drives warming. */
#include "actor_prefetch.h"

#include "base_log.h"

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
    int warm_sessions, warm_s;
    actor_loop_t *loop;         /* polling, control messages, timers, counters */
    actor_counters_t *counters; /* the loop's */
} s_prefetch_t;

/* the prefetcher's sockets */
static const actor_sock_decl_t s_socks[] = {
    {ACTOR_SOCK_FIELD(s_prefetch_t, in), ACTOR_SOCK_IN, NULL, ACTOR_HWM_BULK, ACTOR_MAX_FRAME,
     false},
    {ACTOR_SOCK_FIELD(s_prefetch_t, to_tier), ACTOR_SOCK_OUT, "kvtier", ACTOR_HWM_BULK, 0, false},
    {ACTOR_SOCK_FIELD(s_prefetch_t, to_front), ACTOR_SOCK_OUT, "frontend", ACTOR_HWM_CTL, 0, false},
    {0},
};

const actor_opt_t actor_prefetch_opts[] = {
    {"sessions", ACTOR_OPT_INT, "256", 1, 1 << 20, NULL, "chat sessions tracked (LRU)",
     .field = ACTOR_OPT_FIELD(actor_prefetch_cfg_t, sessions)},
    {"warm_sessions", ACTOR_OPT_INT, "16", 0, 1 << 20, NULL,
     "most recent sessions kept warm (T2 -> T1); 0: none",
     .field = ACTOR_OPT_FIELD(actor_prefetch_cfg_t, warm_sessions)},
    {"warm_ms", ACTOR_OPT_INT, "250", 1, 3600000, NULL, "how often sessions are warmed",
     .field = ACTOR_OPT_FIELD(actor_prefetch_cfg_t, warm_ms)},
    {"warm_s", ACTOR_OPT_INT, "600", 1, 31536000, NULL,
     "how long after its last turn a session is kept warm",
     .field = ACTOR_OPT_FIELD(actor_prefetch_cfg_t, warm_s)},
    {NULL},
};

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
    slot->last_us = base_now_us();
}

static void s_on_hint(void *self, const msg_kv_hint_t *h) {
    s_prefetch_t *p = self;
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

/* Lift the blocks of the most recently active sessions into T1 (a timer). */
static void s_warm(void *self) {
    s_prefetch_t *p = self;
    uint64_t now = base_now_us(), horizon = (uint64_t)p->warm_s * 1000000;
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
    actor_socks_close(s_socks, p);
    actor_loop_destroy(&p->loop);
}

int actor_prefetch_main(actor_env_t *env) {
    const actor_prefetch_cfg_t *conf = actor_env_cfg(env);
    const actor_topology_t *topo = actor_env_topology(env);
    const char *me = actor_env_name(env);
    s_prefetch_t p = {0};
    p.env = env;
    p.n_sessions = conf->sessions;
    p.warm_sessions = conf->warm_sessions;
    int warm_ms = conf->warm_ms;
    p.warm_s = conf->warm_s;
    if (!actor_topology_endpoint(topo, "kvtier")) {
        actor_env_fail(env, "%s: the topology has no kvtier actor to promote from", me);
        return 1;
    }
    p.sessions = calloc((size_t)p.n_sessions, sizeof *p.sessions);
    p.loop = actor_loop_new(env, &p);
    p.counters = p.loop ? actor_loop_counters(p.loop) : NULL;
    char serr[128];
    int socks = actor_socks_open(env, s_socks, &p, serr, sizeof serr);
    if (socks || !p.sessions || !p.loop) {
        actor_env_fail(env, "%s: cannot set up (%s)", me, socks ? serr : "out of memory");
        s_cleanup(&p);
        return 1;
    }
    actor_loop_inbox(p.loop, p.in, p.to_front, false, "");
    actor_loop_handle_kv_hint(p.loop, s_on_hint);
    if (p.warm_sessions > 0)
        actor_loop_timer(p.loop, warm_ms, s_warm);
    actor_env_ready(env);
    actor_loop_run(p.loop, 500);
    s_cleanup(&p);
    return 0;
}

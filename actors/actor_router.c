/* actor_router.c - the router actor: decode, ask router_dispatch, forward. */
#include "actor_router.h"

#include "actor_placement.h"
#include "actor_router_kv.h"
#include "base_log.h"
#include "router_dispatch.h"
#include "router_moe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    actor_env_t *env;     /* runtime */
    zsock_t *in;          /* inbound PULL */
    zsock_t *to_tok;      /* PUSH to the tokenizer (errors) */
    zsock_t *to_front;    /* PUSH to the frontend (pong, stats) */
    zsock_t **to_worker;  /* (n_workers) PUSH to each worker */
    zsock_t *to_prefetch; /* PUSH to the prefetcher, or NULL when the topology has none */
    zsock_t *to_sup;      /* PUSH to the supervisor (worker_idle), or NULL in thread mode */
    bool *idle_told;      /* (n_workers) worker_idle sent for the current drain */
    int n_workers;
    router_dispatch_t *dispatch; /* load table + rid -> worker */
    actor_loop_t *loop;          /* polling, control messages, counters */
    actor_counters_t *counters;  /* the loop's */
    /* MoE control plane (docs/MOE.md): with expert actors in the topology */
    const actor_topology_t *topo;
    int n_experts;               /* expert actors (A) */
    zsock_t **to_expert;         /* (A) PUSH to each expert actor: expert_table */
    router_moe_t *moe;           /* made at the first expert_load (it says E) */
    router_moe_config_t moe_cfg; /* from the options */
    actor_router_kv_t *kv;       /* the workers' KV events, or NULL: by load only */
    int64_t *cached, *bonus;     /* (n_workers) a prompt's cached tokens per worker */
    int64_t *loads;              /* (n_workers) the loads a traced dispatch chose among */
} s_router_t;

/* the router's own sockets (one more per worker and expert actor, opened in its start-up) */
static const actor_sock_decl_t s_socks[] = {
    {ACTOR_SOCK_FIELD(s_router_t, in), ACTOR_SOCK_IN, NULL, ACTOR_HWM_STREAM, ACTOR_MAX_FRAME,
     false},
    {ACTOR_SOCK_FIELD(s_router_t, to_tok), ACTOR_SOCK_OUT, "tokenizer", ACTOR_HWM_STREAM, 0, false},
    {ACTOR_SOCK_FIELD(s_router_t, to_front), ACTOR_SOCK_OUT, "frontend", ACTOR_HWM_CTL, 0, false},
    {ACTOR_SOCK_FIELD(s_router_t, to_prefetch), ACTOR_SOCK_OUT, "prefetcher", ACTOR_HWM_BULK, 0,
     true},
    {ACTOR_SOCK_FIELD(s_router_t, to_sup), ACTOR_SOCK_OUT, "supervisor", ACTOR_HWM_CTL, 0, true},
    {0},
};

/* moe_dispatch=load|static loads as its index */
enum { S_MOE_LOAD = 0, S_MOE_STATIC = 1 };

const actor_opt_t actor_router_opts[] = {
    {"moe_dispatch", ACTOR_OPT_ENUM, "load", 0, 0, "load|static",
     "MoE expert dispatch: load (replicas of hot experts, capacity from the observed load) or "
     "static (each expert on its own actor, no capacity: the baseline)",
     .field = ACTOR_OPT_FIELD(actor_router_cfg_t, moe_dispatch)},
    {"moe_capacity", ACTOR_OPT_DOUBLE, "0", 0, 1000, NULL,
     "load dispatch: capacity factor; a replica takes factor x its expected rows of a step, "
     "rows beyond every replica's capacity move to another expert (changes the output; "
     "e.g. 1.25); 0 (the default): no limit, the output is the local forward's",
     .field = ACTOR_OPT_FIELD(actor_router_cfg_t, moe_capacity)},
    {"moe_capacity_max", ACTOR_OPT_DOUBLE, "4", 0, 1000, NULL,
     "load dispatch: the largest capacity factor relative to the mean expert",
     .field = ACTOR_OPT_FIELD(actor_router_cfg_t, moe_capacity_max)},
    {"moe_capacity_min", ACTOR_OPT_INT, "4", 0, 65536, NULL,
     "load dispatch: rows a replica always takes in a step",
     .field = ACTOR_OPT_FIELD(actor_router_cfg_t, moe_capacity_min)},
    {"moe_hot", ACTOR_OPT_DOUBLE, "1.5", 1, 1000, NULL,
     "load dispatch: an expert whose load per replica exceeds this x the mean gets a replica",
     .field = ACTOR_OPT_FIELD(actor_router_cfg_t, moe_hot)},
    {"kv_events_from", ACTOR_OPT_STRING, NULL, 0, 0, NULL,
     "the workers' KV events (their kv_events): tcp://HOST:PORT (worker i at PORT + i) or a "
     "comma-separated endpoint per worker; set, a request goes where its prompt's prefix is "
     "cached unless the load says otherwise (docs/KV_EVENTS.md); unset: by load only",
     .field = ACTOR_OPT_FIELD(actor_router_cfg_t, kv_events_from)},
    {"kv_events_replay_from", ACTOR_OPT_STRING, NULL, 0, 0, NULL,
     "the workers' replay sockets (their kv_events_replay), the same way: a missed batch is "
     "asked for again",
     .field = ACTOR_OPT_FIELD(actor_router_cfg_t, kv_events_replay_from)},
    {"prefix_weight", ACTOR_OPT_DOUBLE, "1", 0, 1000, NULL,
     "with kv_events_from: a cached prompt token counts this many tokens off the worker's "
     "load (tokens queued and running) when choosing",
     .field = ACTOR_OPT_FIELD(actor_router_cfg_t, prefix_weight)},
    {NULL},
};

#define S_MOE_PUBLISH_MS 200
#define S_MOE_STALE_US (2000000ull * BASE_TIMEOUT_SCALE)

static void s_fail(s_router_t *r, uint64_t rid, int code, const char *what) {
    msg_work_error_t e;
    msg_work_error_init(&e);
    e.rid = rid;
    e.code = code;
    msg_set_str(e.message, sizeof e.message, what);
    if (actor_send(r->to_tok, MSG_WORK_ERROR, &e))
        actor_counters_add(r->counters, "send.failed", 1);
}

/* A traced request: append the dispatch decision (the loads it was made among) to a
 * copy of q's chain; the caller frees *steps. */
static void s_trace_dispatch(s_router_t *r, const msg_work_request_t *q, int w, bool scored,
                             msg_work_request_t *out, msg_trace_step_t **steps) {
    *steps = malloc((size_t)(q->n_steps + 1) * sizeof **steps);
    if (!*steps || q->n_steps >= MSG_MAX_TRACE_STEPS)
        return;
    memcpy(*steps, q->steps, (size_t)q->n_steps * sizeof **steps);
    char loads[MSG_MAX_WHY_BYTES + 1] = "";
    for (int i = 0, n = 0; i < r->n_workers && n >= 0 && (size_t)n < sizeof loads; i++)
        n += snprintf(loads + n, sizeof loads - (size_t)n, " worker%d=%lld%s", i,
                      (long long)r->loads[i],
                      router_dispatch_alive(r->dispatch, i) ? "" : " (down)");
    if (scored)
        for (int i = 0, n = (int)strlen(loads);
             i < r->n_workers && n >= 0 && (size_t)n < sizeof loads; i++)
            n += snprintf(loads + n, sizeof loads - (size_t)n, "%s worker%d=%lld",
                          i ? "" : "; prompt tokens cached:", i, (long long)r->cached[i]);
    uint64_t now = base_now_us();
    int64_t end = now > q->t_arrival_us ? (int64_t)(now - q->t_arrival_us) : 0;
    int64_t start =
        q->n_steps ? q->steps[q->n_steps - 1].t_us + q->steps[q->n_steps - 1].dur_us : 0;
    msg_trace_step_fill(&(*steps)[q->n_steps], "router", "dispatch", start < end ? start : end, end,
                        "worker%d, the least loaded alive%s (tokens:%s)", w,
                        scored ? " less its cached prefix" : "", loads);
    out->steps = *steps;
    out->n_steps = q->n_steps + 1;
}

/* A draining worker (a planned restart) that holds nothing now: tell the supervisor,
 * once per drain (a lost worker_idle only makes it wait for its grace). */
static void s_check_drained(s_router_t *r, int w) {
    if (w < 0 || w >= r->n_workers || r->idle_told[w] || !router_dispatch_drained(r->dispatch, w))
        return;
    r->idle_told[w] = true;
    msg_worker_idle_t m = {w};
    if (!r->to_sup || actor_send(r->to_sup, MSG_WORKER_IDLE, &m))
        actor_counters_add(r->counters, "worker_idle.unsent", 1);
    LOG_I("router", "worker%d is drained", w);
}

/* worker_drain (the supervisor, before a planned restart of the worker): no new request
 * goes to it while another worker is alive; worker_idle when it holds none. */
static void s_on_worker_drain(void *self, const msg_worker_drain_t *m) {
    s_router_t *r = self;
    if (router_dispatch_set_draining(r->dispatch, m->worker, m->drain)) {
        actor_counters_add(r->counters, "worker_drain.bad", 1);
        return;
    }
    LOG_I("router", "worker%d %s", m->worker,
          m->drain ? "drains: no new request while another worker is alive" : "takes requests");
    actor_counters_add(r->counters, m->drain ? "worker_drain" : "worker_undrain", 1);
    r->idle_told[m->worker] = false;
    s_check_drained(r, m->worker);
}

static void s_on_request(void *self, const msg_work_request_t *q) {
    s_router_t *r = self;
    bool scored =
        r->kv && actor_router_kv_bonus(r->kv, q->tokens, q->n_tokens, r->cached, r->bonus) > 0;
    for (int i = 0; q->trace && i < r->n_workers; i++) /* before this request adds to one */
        r->loads[i] = router_dispatch_load(r->dispatch, i);
    int w = router_dispatch_assign_bonus(r->dispatch, q->rid, (int64_t)q->n_tokens + q->max_tokens,
                                         scored ? r->bonus : NULL);
    if (w == -EEXIST) { /* a duplicated frame: the request was dispatched once */
        actor_counters_add(r->counters, "duplicates", 1);
        return;
    }
    if (w < 0) {
        actor_counters_add(r->counters, "rejected.no_worker", 1);
        s_fail(r, q->rid, MSG_CODE_INTERNAL,
               w == -EHOSTDOWN ? "no target worker is alive" : "cannot dispatch");
        return;
    }
    msg_work_request_t traced;
    msg_trace_step_t *steps = NULL;
    if (q->trace) {
        traced = *q;
        s_trace_dispatch(r, q, w, scored, &traced, &steps);
        q = &traced;
    }
    int rc = actor_send(r->to_worker[w], MSG_WORK_REQUEST, q);
    free(steps);
    if (rc) {
        router_dispatch_finish(r->dispatch, q->rid);
        actor_counters_add(r->counters, "rejected.overloaded", 1);
        s_fail(r, q->rid, rc == -EAGAIN ? MSG_CODE_OVERLOADED : MSG_CODE_INTERNAL,
               rc == -EAGAIN ? "the worker's queue is full" : "cannot reach the worker");
        return;
    }
    if (r->to_prefetch) {
        /* the prefetcher starts promoting the prompt's cached prefix towards the
         * worker while the request travels there; a lost hint only costs a miss */
        msg_kv_hint_t h;
        msg_kv_hint_init(&h);
        h.rid = q->rid;
        h.worker = w;
        h.tokens = q->tokens;
        h.n_tokens = q->n_tokens;
        memcpy(h.session, q->session, sizeof h.session);
        if (actor_send(r->to_prefetch, MSG_KV_HINT, &h))
            actor_counters_add(r->counters, "hint.dropped", 1);
        else
            actor_counters_add(r->counters, "hint.sent", 1);
    }
    char name[32];
    snprintf(name, sizeof name, "dispatched.worker%d", w);
    actor_counters_add(r->counters, name, 1);
    actor_counters_add(r->counters, "dispatched", 1);
    if (scored)
        actor_counters_add(r->counters, "prefix.routed_cached_tokens", r->cached[w]);
}

static void s_on_down(s_router_t *r, int w) {
    if (w < 0 || w >= r->n_workers) {
        actor_counters_add(r->counters, "worker_down.bad", 1);
        return;
    }
    /* its requests are not failed: the frontend, which tracks every request and
     * heard the same notice, resumes them on the workers that are alive */
    int n = router_dispatch_down(r->dispatch, w, NULL, 0); /* ends a drain too */
    r->idle_told[w] = false;
    if (r->kv)
        actor_router_kv_forget(r->kv, w);
    LOG_W("router", "worker%d is down: its %d requests go elsewhere", w, n);
    actor_counters_add(r->counters, "worker_down", 1);
    actor_counters_add(r->counters, "forgotten.worker_down", n);
}

static void s_on_cancel(void *self, const msg_work_cancel_t *m) {
    s_router_t *r = self;
    int w = router_dispatch_worker_of(r->dispatch, m->rid);
    if (w >= 0) {
        if (actor_send(r->to_worker[w], MSG_WORK_CANCEL, m))
            actor_counters_add(r->counters, "cancel.unrouted", 1);
        else
            actor_counters_add(r->counters, "cancel.forwarded", 1);
        return;
    }
    /* not known here (not dispatched yet, already over, or dispatched by a router
     * that died): every worker hears it; a worker that does not hold it ignores it */
    for (int i = 0; i < r->n_workers; i++)
        actor_send(r->to_worker[i], MSG_WORK_CANCEL, m);
    actor_counters_add(r->counters, "cancel.broadcast", 1);
}

static void s_on_event(void *self, const msg_work_event_t *m) {
    s_router_t *r = self;
    if (m->finish)
        s_check_drained(r, router_dispatch_finish(r->dispatch, m->rid));
}

static void s_on_error(void *self, const msg_work_error_t *m) {
    s_router_t *r = self;
    s_check_drained(r, router_dispatch_finish(r->dispatch, m->rid));
}

static void s_on_load(void *self, const msg_load_report_t *m) {
    s_router_t *r = self;
    const msg_load_report_t *l = m;
    bool was_alive = router_dispatch_alive(r->dispatch, l->worker);
    if (router_dispatch_report(r->dispatch, l->worker, l->queued_tokens, l->active_tokens) == 0 &&
        !was_alive)
        LOG_I("router", "worker%d is back", l->worker);
    s_check_drained(r, l->worker);
}

static void s_on_worker_down(void *self, const msg_worker_down_t *m) {
    s_on_down(self, m->worker);
}

/* Send the dispatch table to every worker and expert actor (a lost one is
 * replaced at the next publication). */
static void s_moe_publish(s_router_t *r) {
    router_moe_view_t v = router_moe_view(r->moe);
    msg_expert_table_t m;
    msg_expert_table_init(&m);
    m.version = router_moe_version(r->moe);
    m.n_expert = v.n_expert;
    m.n_actors = v.n_actors;
    m.load_aware = v.load_aware;
    m.hosts = (int32_t *)v.hosts;
    m.n_hosts = v.n_expert * v.n_actors;
    m.cap = (int32_t *)v.cap;
    m.n_cap = v.n_expert;
    m.load = (int32_t *)v.load;
    m.n_load = v.n_actors;
    m.alive = (int32_t *)v.alive;
    m.n_alive = v.n_actors;
    m.cap_min = v.cap_min;
    for (int i = 0; i < r->n_workers; i++)
        if (actor_send(r->to_worker[i], MSG_EXPERT_TABLE, &m))
            actor_counters_add(r->counters, "moe.table.dropped", 1);
    for (int a = 0; a < r->n_experts; a++)
        if (actor_send(r->to_expert[a], MSG_EXPERT_TABLE, &m))
            actor_counters_add(r->counters, "moe.table.dropped", 1);
    actor_counters_add(r->counters, "moe.table.published", 1);
    actor_counters_set(r->counters, "moe.table.version", (int64_t)m.version);
}

static void s_on_expert_load(void *self, const msg_expert_load_t *m) {
    s_router_t *r = self;
    const msg_expert_load_t *l = m;
    if (l->expert >= r->n_experts) {
        actor_counters_add(r->counters, "moe.load.bad", 1);
        return;
    }
    if (!r->moe) {
        char why[256];
        uint8_t *owners = calloc((size_t)r->n_experts * l->n_expert, 1);
        int *slots = calloc((size_t)r->n_experts, sizeof *slots);
        r->moe_cfg.n_expert = l->n_expert;
        for (int a = 0; slots && a < r->n_experts; a++)
            slots[a] = actor_placement_slots(r->topo, a);
        if (owners && slots &&
            actor_placement_owners(r->topo, l->n_expert, owners, why, sizeof why))
            LOG_E("router", "MoE placement: %s", why);
        else if (owners && slots)
            r->moe = router_moe_new(&r->moe_cfg, owners, slots);
        free(owners);
        free(slots);
        if (!r->moe) {
            actor_counters_add(r->counters, "moe.load.bad", 1);
            return;
        }
        LOG_I("router", "MoE: %d experts on %d expert actors, %s dispatch", l->n_expert,
              r->n_experts, r->moe_cfg.load_aware ? "load-aware" : "static");
    }
    if (l->n_expert != r->moe_cfg.n_expert) {
        actor_counters_add(r->counters, "moe.load.bad", 1);
        return;
    }
    bool was = router_moe_alive(r->moe, l->expert);
    router_moe_report(r->moe, l->expert, l->rows, l->frames, l->queue, l->period_us, base_now_us());
    actor_counters_add(r->counters, "moe.load.reports", 1);
    if (!was) { /* back: publish at once */
        LOG_I("router", "expert%d is back", l->expert);
        router_moe_plan(r->moe);
        s_moe_publish(r);
    }
}

static void s_on_expert_down(void *self, const msg_expert_down_t *m) {
    s_router_t *r = self;
    int a = m->expert;
    actor_counters_add(r->counters, "moe.expert_down", 1);
    if (!r->moe || a >= r->n_experts)
        return;
    LOG_W("router", "expert%d is down: its experts go to the others", a);
    router_moe_down(r->moe, a);
    router_moe_plan(r->moe); /* publish at once: workers waiting on it resend */
    s_moe_publish(r);
}

/* Every S_MOE_PUBLISH_MS: silent actors are down, the table follows the loads. */
static void s_moe_tick(void *self) {
    s_router_t *r = self;
    if (!r->moe)
        return;
    int n = router_moe_expire(r->moe, base_now_us(), S_MOE_STALE_US);
    if (n)
        actor_counters_add(r->counters, "moe.expired", n);
    router_moe_plan(r->moe);
    s_moe_publish(r);
}

/* Before a stats answer: the load table as counters. */
static void s_stats(void *self) {
    s_router_t *r = self;
    for (int i = 0; i < r->n_workers; i++) {
        char name[48];
        snprintf(name, sizeof name, "load.worker%d", i);
        actor_counters_set(r->counters, name, router_dispatch_load(r->dispatch, i));
        snprintf(name, sizeof name, "alive.worker%d", i);
        actor_counters_set(r->counters, name, router_dispatch_alive(r->dispatch, i));
    }
    if (!r->moe)
        return;
    router_moe_view_t v = router_moe_view(r->moe);
    for (int a = 0; a < v.n_actors; a++) {
        char name[64];
        int hosted = 0;
        for (int e = 0; e < v.n_expert; e++)
            hosted += v.hosts[(size_t)a * v.n_expert + e];
        snprintf(name, sizeof name, "moe.alive.expert%d", a);
        actor_counters_set(r->counters, name, v.alive[a]);
        snprintf(name, sizeof name, "moe.hosted.expert%d", a);
        actor_counters_set(r->counters, name, hosted);
        snprintf(name, sizeof name, "moe.backlog.expert%d", a);
        actor_counters_set(r->counters, name, v.load[a]);
    }
    for (int e = 0; e < v.n_expert; e++) {
        char name[64];
        snprintf(name, sizeof name, "moe.replicas.e%d", e);
        actor_counters_set(r->counters, name, router_moe_replicas(r->moe, e));
        snprintf(name, sizeof name, "moe.capacity_permille.e%d", e);
        actor_counters_set(r->counters, name, v.cap[e]);
        snprintf(name, sizeof name, "moe.load_rows_per_s.e%d", e);
        actor_counters_set(r->counters, name, (int64_t)router_moe_expert_load(r->moe, e));
    }
}

static void s_cleanup(s_router_t *r) {
    for (int i = 0; r->to_worker && i < r->n_workers; i++)
        zsock_destroy(&r->to_worker[i]);
    free(r->to_worker);
    free(r->idle_told);
    actor_socks_close(s_socks, r);
    for (int a = 0; r->to_expert && a < r->n_experts; a++)
        zsock_destroy(&r->to_expert[a]);
    free(r->to_expert);
    router_moe_destroy(&r->moe);
    router_dispatch_destroy(&r->dispatch);
    actor_router_kv_destroy(&r->kv);
    free(r->cached);
    free(r->bonus);
    free(r->loads);
    actor_loop_destroy(&r->loop);
}

/* actor_reader_fn: a KV event batch or a replay's answer from a worker. */
static void s_on_kv(void *self, zsock_t *sock) {
    actor_router_kv_read(((s_router_t *)self)->kv, sock);
}

/* With kv_events_from: subscribe to the workers' KV events.  0, or -1 with the reason in
 * err. */
static int s_kv_start(s_router_t *r, const actor_router_cfg_t *conf, char *err, size_t errlen) {
    r->kv = actor_router_kv_new(conf->kv_events_from, conf->kv_events_replay_from,
                                conf->prefix_weight, r->n_workers, r->counters, err, errlen);
    if (!r->kv)
        return *err ? -1 : 0;
    r->cached = calloc((size_t)r->n_workers, sizeof *r->cached);
    r->bonus = calloc((size_t)r->n_workers, sizeof *r->bonus);
    if (!r->cached || !r->bonus) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int n;
    zsock_t **socks = actor_router_kv_sockets(r->kv, &n);
    for (int i = 0; i < n; i++)
        if (socks[i] && actor_loop_reader(r->loop, socks[i], s_on_kv)) {
            snprintf(err, errlen, "kv_events_from: too many sockets for the router's loop");
            return -1;
        }
    LOG_I("router", "KV events from %s: dispatch weighs cached prefixes (weight %g)",
          conf->kv_events_from, conf->prefix_weight);
    return 0;
}

int actor_router_main(actor_env_t *env) {
    const actor_router_cfg_t *conf = actor_env_cfg(env);
    const actor_topology_t *t = actor_env_topology(env);
    s_router_t r = {0};
    r.env = env;
    r.n_workers = actor_topology_workers(t);
    r.dispatch = router_dispatch_new(r.n_workers > 0 ? r.n_workers : 1);
    r.loop = actor_loop_new(env, &r);
    r.counters = r.loop ? actor_loop_counters(r.loop) : NULL;
    r.to_worker = calloc((size_t)(r.n_workers > 0 ? r.n_workers : 1), sizeof *r.to_worker);
    r.loads = calloc((size_t)(r.n_workers > 0 ? r.n_workers : 1), sizeof *r.loads);
    r.idle_told = calloc((size_t)(r.n_workers > 0 ? r.n_workers : 1), sizeof *r.idle_told);
    char serr[128];
    int socks = actor_socks_open(env, s_socks, &r, serr, sizeof serr);
    bool ok = !socks && r.dispatch && r.loop && r.to_worker && r.idle_told && r.n_workers > 0;
    for (int i = 0; ok && i < r.n_workers; i++) {
        char name[32];
        snprintf(name, sizeof name, "worker%d", i);
        /* the worker's queue is the bound (sched_batch); this HWM only absorbs bursts */
        r.to_worker[i] = actor_sock_outbound(t, "router", name, ACTOR_HWM_BULK);
        ok = r.to_worker[i] != NULL;
    }
    r.topo = t;
    r.n_experts = actor_placement_experts(t);
    if (r.n_experts > MSG_MAX_EXPERT_ACTORS)
        r.n_experts = MSG_MAX_EXPERT_ACTORS;
    if (ok && r.n_experts) {
        r.moe_cfg = (router_moe_config_t){
            .n_actors = r.n_experts,
            .load_aware = conf->moe_dispatch == S_MOE_LOAD,
            .cf_permille = (int)(1000 * conf->moe_capacity + 0.5),
            .cf_max_permille = (int)(1000 * conf->moe_capacity_max + 0.5),
            .cap_min = conf->moe_capacity_min,
            .hot_ratio = conf->moe_hot,
        };
        ok = (r.to_expert = calloc((size_t)r.n_experts, sizeof *r.to_expert)) != NULL;
        for (int a = 0; ok && a < r.n_experts; a++) {
            char name[32];
            snprintf(name, sizeof name, "expert%d", a);
            ok = (r.to_expert[a] = actor_sock_outbound(t, "router", name, ACTOR_HWM_CTL)) != NULL;
        }
    }
    if (!ok) {
        actor_env_fail(env, "router: cannot set up (sockets or memory)");
        s_cleanup(&r);
        return 1;
    }
    actor_loop_inbox(r.loop, r.in, r.to_front, false, "");
    actor_loop_handle_work_request(r.loop, s_on_request);
    actor_loop_handle_work_cancel(r.loop, s_on_cancel);
    actor_loop_handle_work_event(r.loop, s_on_event);
    actor_loop_handle_work_error(r.loop, s_on_error);
    actor_loop_handle_load_report(r.loop, s_on_load);
    actor_loop_handle_worker_down(r.loop, s_on_worker_down);
    actor_loop_handle_worker_drain(r.loop, s_on_worker_drain);
    actor_loop_handle_expert_load(r.loop, s_on_expert_load);
    actor_loop_handle_expert_down(r.loop, s_on_expert_down);
    if (r.n_experts)
        actor_loop_timer(r.loop, S_MOE_PUBLISH_MS, s_moe_tick);
    actor_loop_on_stats(r.loop, s_stats);
    char kerr[600];
    if (s_kv_start(&r, conf, kerr, sizeof kerr)) { /* after the inbox: it is polled first */
        actor_env_fail(env, "router: %s", kerr);
        s_cleanup(&r);
        return 1;
    }
    actor_env_ready(env);
    actor_loop_run(r.loop, 500);
    s_cleanup(&r);
    return 0;
}

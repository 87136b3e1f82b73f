/* actor_router.c - the router actor: decode, ask router_dispatch, forward. */
#include "actor_router.h"

#include "base/base_log.h"
#include "router/router_dispatch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    actor_env_t *env;    /* runtime */
    zsock_t *in;         /* inbound PULL */
    zsock_t *to_tok;     /* PUSH to the tokenizer (errors) */
    zsock_t *to_front;   /* PUSH to the frontend (pong, stats) */
    zsock_t **to_worker; /* (n_workers) PUSH to each worker */
    zsock_t *to_prefetch; /* PUSH to the prefetcher, or NULL when the topology has none */
    int n_workers;
    router_dispatch_t *dispatch; /* load table + rid -> worker */
    actor_loop_t *loop;          /* polling, control messages, counters */
    actor_counters_t *counters;  /* the loop's */
} s_router_t;

const actor_opt_t actor_router_opts[] = {{NULL}}; /* none: it follows its workers' reports */

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
static void s_trace_dispatch(s_router_t *r, const msg_work_request_t *q, int w,
                             msg_work_request_t *out, msg_trace_step_t **steps) {
    *steps = malloc((size_t)(q->n_steps + 1) * sizeof **steps);
    if (!*steps || q->n_steps >= MSG_MAX_TRACE_STEPS)
        return;
    memcpy(*steps, q->steps, (size_t)q->n_steps * sizeof **steps);
    char loads[MSG_MAX_WHY_BYTES + 1] = "";
    for (int i = 0, n = 0; i < r->n_workers && n >= 0 && (size_t)n < sizeof loads; i++)
        n += snprintf(loads + n, sizeof loads - (size_t)n, " worker%d=%lld%s", i,
                      (long long)router_dispatch_load(r->dispatch, i),
                      router_dispatch_alive(r->dispatch, i) ? "" : " (down)");
    uint64_t now = base_now_us();
    int64_t end = now > q->t_arrival_us ? (int64_t)(now - q->t_arrival_us) : 0;
    int64_t start =
        q->n_steps ? q->steps[q->n_steps - 1].t_us + q->steps[q->n_steps - 1].dur_us : 0;
    msg_trace_step_fill(&(*steps)[q->n_steps], "router", "dispatch", start < end ? start : end,
                        end, "worker%d, the least loaded alive (tokens:%s)", w, loads);
    out->steps = *steps;
    out->n_steps = q->n_steps + 1;
}

static void s_on_request(s_router_t *r, const msg_work_request_t *q) {
    int w = router_dispatch_assign(r->dispatch, q->rid, (int64_t)q->n_tokens + q->max_tokens);
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
        s_trace_dispatch(r, q, w, &traced, &steps);
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
}

static void s_on_down(s_router_t *r, int w) {
    if (w < 0 || w >= r->n_workers) {
        actor_counters_add(r->counters, "worker_down.bad", 1);
        return;
    }
    /* its requests are not failed: the frontend, which tracks every request and
     * heard the same notice, resumes them on the workers that are alive */
    int n = router_dispatch_down(r->dispatch, w, NULL, 0);
    LOG_W("router", "worker%d is down: its %d requests go elsewhere", w, n);
    actor_counters_add(r->counters, "worker_down", 1);
    actor_counters_add(r->counters, "forgotten.worker_down", n);
}

static void s_on_work_request(void *self, msg_any_t *m, zmq_msg_t *raw) {
    (void)raw;
    s_on_request(self, &m->u.work_request);
}

static void s_on_cancel(void *self, msg_any_t *m, zmq_msg_t *raw) {
    (void)raw;
    s_router_t *r = self;
    int w = router_dispatch_worker_of(r->dispatch, m->u.work_cancel.rid);
    if (w >= 0) {
        if (actor_send(r->to_worker[w], MSG_WORK_CANCEL, &m->u.work_cancel))
            actor_counters_add(r->counters, "cancel.unrouted", 1);
        else
            actor_counters_add(r->counters, "cancel.forwarded", 1);
        return;
    }
    /* not known here (not dispatched yet, already over, or dispatched by a router
     * that died): every worker hears it; a worker that does not hold it ignores it */
    for (int i = 0; i < r->n_workers; i++)
        actor_send(r->to_worker[i], MSG_WORK_CANCEL, &m->u.work_cancel);
    actor_counters_add(r->counters, "cancel.broadcast", 1);
}

static void s_on_event(void *self, msg_any_t *m, zmq_msg_t *raw) {
    (void)raw;
    s_router_t *r = self;
    if (m->u.work_event.finish)
        router_dispatch_finish(r->dispatch, m->u.work_event.rid);
}

static void s_on_error(void *self, msg_any_t *m, zmq_msg_t *raw) {
    (void)raw;
    s_router_t *r = self;
    router_dispatch_finish(r->dispatch, m->u.work_error.rid);
}

static void s_on_load(void *self, msg_any_t *m, zmq_msg_t *raw) {
    (void)raw;
    s_router_t *r = self;
    const msg_load_report_t *l = &m->u.load_report;
    bool was_alive = router_dispatch_alive(r->dispatch, l->worker);
    if (router_dispatch_report(r->dispatch, l->worker, l->queued_tokens, l->active_tokens) == 0 &&
        !was_alive)
        LOG_I("router", "worker%d is back", l->worker);
}

static void s_on_worker_down(void *self, msg_any_t *m, zmq_msg_t *raw) {
    (void)raw;
    s_on_down(self, m->u.worker_down.worker);
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
}

static void s_cleanup(s_router_t *r) {
    for (int i = 0; r->to_worker && i < r->n_workers; i++)
        zsock_destroy(&r->to_worker[i]);
    free(r->to_worker);
    zsock_destroy(&r->in);
    zsock_destroy(&r->to_tok);
    zsock_destroy(&r->to_front);
    zsock_destroy(&r->to_prefetch);
    router_dispatch_destroy(&r->dispatch);
    actor_loop_destroy(&r->loop);
}

int actor_router_main(actor_env_t *env) {
    const actor_topology_t *t = actor_env_topology(env);
    s_router_t r = {0};
    r.env = env;
    r.n_workers = actor_topology_workers(t);
    r.dispatch = router_dispatch_new(r.n_workers > 0 ? r.n_workers : 1);
    r.loop = actor_loop_new(env, &r);
    r.counters = r.loop ? actor_loop_counters(r.loop) : NULL;
    r.to_worker = calloc((size_t)(r.n_workers > 0 ? r.n_workers : 1), sizeof *r.to_worker);
    r.in = actor_sock_inbound(t, "router", MSG_MAX_INTERNAL_FRAME + 4096,
                              100000);
    r.to_tok = actor_sock_outbound(t, "router", "tokenizer", 100000);
    r.to_front = actor_sock_outbound(t, "router", "frontend", 1000);
    if (actor_topology_endpoint(t, "prefetcher"))
        r.to_prefetch = actor_sock_outbound(t, "router", "prefetcher", 10000);
    bool ok =
        r.dispatch && r.loop && r.to_worker && r.in && r.to_tok && r.to_front && r.n_workers > 0;
    for (int i = 0; ok && i < r.n_workers; i++) {
        char name[32];
        snprintf(name, sizeof name, "worker%d", i);
        /* the worker's queue is the bound (sched_batch); this HWM only absorbs bursts */
        r.to_worker[i] = actor_sock_outbound(t, "router", name, 10000);
        ok = r.to_worker[i] != NULL;
    }
    if (!ok) {
        actor_env_fail(env, "router: cannot set up (sockets or memory)");
        s_cleanup(&r);
        return 1;
    }
    actor_loop_inbox(r.loop, r.in, r.to_front, false, "");
    actor_loop_on(r.loop, MSG_WORK_REQUEST, s_on_work_request);
    actor_loop_on(r.loop, MSG_WORK_CANCEL, s_on_cancel);
    actor_loop_on(r.loop, MSG_WORK_EVENT, s_on_event);
    actor_loop_on(r.loop, MSG_WORK_ERROR, s_on_error);
    actor_loop_on(r.loop, MSG_LOAD_REPORT, s_on_load);
    actor_loop_on(r.loop, MSG_WORKER_DOWN, s_on_worker_down);
    actor_loop_on_stats(r.loop, s_stats);
    actor_env_ready(env);
    actor_loop_run(r.loop, 500);
    s_cleanup(&r);
    return 0;
}

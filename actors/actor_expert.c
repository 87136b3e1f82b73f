/* actor_expert.c - the expert actor: decode an expert_request, run
 * model_moe_expert_rows over each run of rows of one expert, reply with the y
 * rows; report the load per expert to the router; apply its dispatch tables. */
#include "actor_expert.h"

#include "actor_placement.h"

#include "base_log.h"
#include "kern_ops.h"
#include "model.h"
#include "router_moe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "expert"
#define S_REPORT_MS 150

const actor_opt_t actor_expert_opts[] = {
    {"model", ACTOR_OPT_PATH, NULL, 0, 0, NULL, "GGUF path (an MoE model)",
     .field = ACTOR_OPT_FIELD(actor_expert_cfg_t, model)},
    {"threads", ACTOR_OPT_INT, "1", 1, 256, NULL, "threads of the expert computation",
     .field = ACTOR_OPT_FIELD(actor_expert_cfg_t, threads)},
    {"experts", ACTOR_OPT_STRING, NULL, 0, 0, NULL,
     "the experts it hosts in every MoE layer, e.g. 0-3 or 0,5; unset: round-robin over the "
     "expert actors (expert e on expert actor e % A)",
     .field = ACTOR_OPT_FIELD(actor_expert_cfg_t, experts)},
    {"expert_slots", ACTOR_OPT_INT, "0", 0, 65536, NULL,
     "how many experts it may host with the replicas the router gives it (0: only its own "
     "set); a replica costs no copy, only page cache",
     .field = ACTOR_OPT_FIELD(actor_expert_cfg_t, expert_slots)},
    {NULL},
};

typedef struct {
    actor_env_t *env;    /* runtime */
    const char *name;    /* "expert0" */
    int index;           /* its number */
    zsock_t *in;         /* inbound PULL */
    zsock_t **to_worker; /* (n_workers) PUSH to each target worker */
    int n_workers;
    zsock_t *to_router; /* PUSH: expert_load */
    zsock_t *to_front;  /* PUSH: pong, stats */
    model_t *model;     /* weights (mapped) */
    model_ctx_t *ctx;   /* scratch and threads for model_moe_expert_rows */
    int n_expert, d_model;
    uint8_t *own;   /* (n_expert) static set */
    uint8_t *grant; /* (n_expert) replicas of the newest table */
    uint64_t table; /* that table's version (0: none yet) */
    float *h, *y;   /* (cap_rows, d_model) */
    uint16_t *half; /* (cap_rows, d_model) f16 staging */
    int cap_rows;
    int32_t *period_rows; /* (n_expert) rows since the last report */
    int frames, queue, wake_frames;
    int64_t busy_us;
    uint64_t last_report_us;
    actor_loop_t *loop;
    actor_counters_t *counters;
} s_expert_t;

static int s_reserve(s_expert_t *x, int n) {
    if (n <= x->cap_rows)
        return 0;
    size_t m = (size_t)n * x->d_model;
    float *h = realloc(x->h, m * sizeof *h);
    if (h)
        x->h = h;
    float *y = realloc(x->y, m * sizeof *y);
    if (y)
        x->y = y;
    uint16_t *f = realloc(x->half, m * sizeof *f);
    if (f)
        x->half = f;
    if (!h || !y || !f)
        return -ENOMEM;
    x->cap_rows = n;
    return 0;
}

static void s_reply(s_expert_t *x, const msg_expert_request_t *q, int status, int64_t busy,
                    const void *y, size_t len) {
    msg_expert_reply_t r;
    msg_expert_reply_init(&r);
    r.seq = q->seq;
    r.expert = x->index;
    r.layer = q->layer;
    r.n_rows = q->n_rows;
    r.dtype = q->dtype;
    r.status = status;
    r.busy_us = busy;
    if (status != MSG_EXPERT_OK)
        actor_counters_add(x->counters, msg_expert_status_names[status], 1);
    /* the worker waits for this reply: a full queue is waited on briefly */
    if (actor_send_raw(x->to_worker[q->worker], MSG_EXPERT_REPLY, &r, y, y ? len : 0, 100))
        actor_counters_add(x->counters, "replies.dropped", 1);
}

static void s_on_request(void *self, const msg_expert_request_t *m, zmq_msg_t *raw) {
    s_expert_t *x = self;
    const msg_expert_request_t *q = m;
    if (q->worker >= x->n_workers) {
        actor_counters_add(x->counters, "bad_worker", 1);
        return;
    }
    x->wake_frames++;
    size_t esz = q->dtype == MSG_DTYPE_F16 ? 2 : 4;
    size_t n = (size_t)q->n_rows * x->d_model;
    if (q->d_model != x->d_model || !raw || zmq_msg_size(raw) != n * esz) {
        s_reply(x, q, MSG_EXPERT_BAD, 0, NULL, 0);
        return;
    }
    for (int r = 0; r < q->n_rows; r++) {
        int e = q->experts[r];
        if (e >= x->n_expert) {
            s_reply(x, q, MSG_EXPERT_BAD, 0, NULL, 0);
            return;
        }
        if (!x->own[e] && !x->grant[e] && q->table <= x->table) {
            s_reply(x, q, MSG_EXPERT_NOT_HOSTED, 0, NULL, 0);
            return;
        }
    }
    if (s_reserve(x, q->n_rows)) {
        s_reply(x, q, MSG_EXPERT_FAILED, 0, NULL, 0);
        return;
    }
    const void *in = zmq_msg_data(raw);
    if (q->dtype == MSG_DTYPE_F16) {
        memcpy(x->half, in, n * 2); /* the frame need not be aligned */
        for (size_t i = 0; i < n; i++)
            x->h[i] = kern_f16_to_f32(x->half[i]);
    } else {
        memcpy(x->h, in, n * 4);
    }
    uint64_t t0 = base_now_us();
    int rc = 0;
    for (int r0 = 0, r1; r0 < q->n_rows && !rc; r0 = r1) { /* one run per expert */
        int e = q->experts[r0];
        for (r1 = r0 + 1; r1 < q->n_rows && q->experts[r1] == e;)
            r1++;
        size_t off = (size_t)r0 * x->d_model;
        rc = model_moe_expert_rows(x->ctx, q->layer, e, r1 - r0, x->h + off, x->y + off);
        x->period_rows[e] += r1 - r0;
    }
    int64_t busy = (int64_t)(base_now_us() - t0);
    if (rc) {
        s_reply(x, q, rc == -EINVAL ? MSG_EXPERT_BAD : MSG_EXPERT_FAILED, busy, NULL, 0);
        return;
    }
    x->busy_us += busy;
    x->frames++;
    actor_counters_add(x->counters, "requests", 1);
    actor_counters_add(x->counters, "rows", q->n_rows);
    actor_counters_add(x->counters, "busy_us", busy);
    if (q->dtype == MSG_DTYPE_F16) {
        for (size_t i = 0; i < n; i++)
            x->half[i] = kern_f32_to_f16(x->y[i]);
        s_reply(x, q, MSG_EXPERT_OK, busy, x->half, n * 2);
    } else {
        s_reply(x, q, MSG_EXPERT_OK, busy, x->y, n * 4);
    }
}

static void s_on_table(void *self, const msg_expert_table_t *m) {
    s_expert_t *x = self;
    const msg_expert_table_t *t = m;
    if (t->n_expert != x->n_expert || x->index >= t->n_actors) {
        actor_counters_add(x->counters, "table.mismatch", 1);
        return;
    }
    if (t->version <= x->table)
        return;
    x->table = t->version;
    int hosted = 0;
    for (int e = 0; e < x->n_expert; e++) {
        x->grant[e] = t->hosts[(size_t)x->index * t->n_expert + e] != 0;
        hosted += x->grant[e] || x->own[e];
    }
    actor_counters_set(x->counters, "table.version", (int64_t)x->table);
    actor_counters_set(x->counters, "hosted", hosted);
}

/* Every S_REPORT_MS: what it served to the router. */
static void s_report(void *self) {
    s_expert_t *x = self;
    uint64_t now = base_now_us();
    msg_expert_load_t l;
    msg_expert_load_init(&l);
    l.expert = x->index;
    l.n_expert = x->n_expert;
    l.rows = x->period_rows;
    l.n_rows_n = x->n_expert;
    l.frames = x->frames;
    l.queue = x->queue;
    l.busy_us = x->busy_us;
    l.period_us = (int64_t)(now - x->last_report_us);
    l.table = x->table;
    if (x->to_router)
        actor_send(x->to_router, MSG_EXPERT_LOAD, &l); /* a lost report is replaced soon */
    for (int e = 0; e < x->n_expert; e++) {
        if (x->period_rows[e]) {
            char name[48];
            snprintf(name, sizeof name, "rows.expert%d", e);
            actor_counters_add(x->counters, name, x->period_rows[e]);
        }
        x->period_rows[e] = 0;
    }
    x->frames = x->queue = 0;
    x->busy_us = 0;
    x->last_report_us = now;
}

/* After every wakeup: the requests that waited behind another one. */
static int s_idle(void *self) {
    s_expert_t *x = self;
    if (x->wake_frames > 1 && x->wake_frames - 1 > x->queue)
        x->queue = x->wake_frames - 1;
    x->wake_frames = 0;
    return -1;
}

static void s_cleanup(s_expert_t *x) {
    for (int i = 0; x->to_worker && i < x->n_workers; i++)
        zsock_destroy(&x->to_worker[i]);
    free(x->to_worker);
    zsock_destroy(&x->in);
    zsock_destroy(&x->to_router);
    zsock_destroy(&x->to_front);
    actor_loop_destroy(&x->loop);
    model_ctx_destroy(&x->ctx);
    model_destroy(&x->model);
    free(x->own);
    free(x->grant);
    free(x->h);
    free(x->y);
    free(x->half);
    free(x->period_rows);
}

int actor_expert_main(actor_env_t *env) {
    const actor_expert_cfg_t *conf = actor_env_cfg(env);
    const actor_topology_t *t = actor_env_topology(env);
    const char *name = actor_env_name(env);
    s_expert_t x = {0};
    x.env = env;
    x.name = name;
    x.index = atoi(name + 6);
    char err[512];
    const char *path = conf->model;
    if (!path) {
        actor_env_fail(env, "%s: no model= option in the topology", name);
        return 1;
    }
    x.model = model_load(path, err, sizeof err);
    if (!x.model) {
        actor_env_fail(env, "%s: %s", name, err);
        return 1;
    }
    const model_config_t *cfg = model_config(x.model);
    if (cfg->n_expert < 1) {
        actor_env_fail(env, "%s: %s is not an MoE model (no llama.expert_count)", name, path);
        s_cleanup(&x);
        return 1;
    }
    x.n_expert = cfg->n_expert;
    x.d_model = cfg->d_model;
    int A = actor_placement_experts(t);
    uint8_t *owners = calloc((size_t)(A > 0 ? A : 1) * x.n_expert, 1);
    x.own = calloc((size_t)x.n_expert, 1);
    x.grant = calloc((size_t)x.n_expert, 1);
    x.period_rows = calloc((size_t)x.n_expert, sizeof *x.period_rows);
    if (!owners || !x.own || !x.grant || !x.period_rows ||
        actor_placement_owners(t, x.n_expert, owners, err, sizeof err)) {
        actor_env_fail(env, "%s: %s", name, owners ? err : "out of memory");
        free(owners);
        s_cleanup(&x);
        return 1;
    }
    memcpy(x.own, owners + (size_t)x.index * x.n_expert, (size_t)x.n_expert);
    free(owners);
    x.ctx = model_ctx_new(x.model, 64, 16, conf->threads, NULL);
    x.loop = actor_loop_new(env, &x);
    x.counters = x.loop ? actor_loop_counters(x.loop) : NULL;
    x.n_workers = actor_topology_workers(t);
    x.to_worker = calloc((size_t)(x.n_workers > 0 ? x.n_workers : 1), sizeof *x.to_worker);
    x.in = actor_sock_inbound(t, name, ACTOR_MAX_BULK_FRAME, ACTOR_HWM_BULK);
    x.to_front = actor_sock_outbound(t, name, "frontend", ACTOR_HWM_CTL);
    if (actor_topology_endpoint(t, "router"))
        x.to_router = actor_sock_outbound(t, name, "router", ACTOR_HWM_CTL);
    bool ok = x.ctx && x.loop && x.to_worker && x.in && x.to_front && !s_reserve(&x, 64);
    for (int i = 0; ok && i < x.n_workers; i++) {
        char peer[32];
        snprintf(peer, sizeof peer, "worker%d", i);
        ok = (x.to_worker[i] = actor_sock_outbound(t, name, peer, ACTOR_HWM_BULK)) != NULL;
    }
    if (!ok) {
        actor_env_fail(env, "%s: cannot set up (sockets or memory)", name);
        s_cleanup(&x);
        return 1;
    }
    int hosted = 0;
    char set[256] = "";
    for (int e = 0, k = 0; e < x.n_expert; e++)
        if (x.own[e]) {
            hosted++;
            if (k >= 0 && (size_t)k < sizeof set)
                k += snprintf(set + k, sizeof set - (size_t)k, "%s%d", k ? "," : "", e);
        }
    actor_counters_set(x.counters, "hosted", hosted);
    actor_counters_set(x.counters, "table.version", 0);
    LOG_I(name, "ready: experts %s of %d, d_model %d, %d threads", set, x.n_expert, x.d_model,
          model_ctx_threads(x.ctx));
    x.last_report_us = base_now_us();
    actor_env_ready(env);
    actor_loop_inbox(x.loop, x.in, x.to_front, true, "");
    actor_loop_handle_expert_request_raw(x.loop, s_on_request);
    actor_loop_handle_expert_table(x.loop, s_on_table);
    actor_loop_timer(x.loop, S_REPORT_MS, s_report);
    actor_loop_idle(x.loop, s_idle);
    actor_loop_run(x.loop, 100);
    LOG_I(name, "stopping");
    s_cleanup(&x);
    return 0;
}

/* actor_expert_client.c - the worker's MoE exec over expert actors (see the
 * header): assignment, one frame per (actor, part), the wait with failover,
 * and the local fallback. */
#include "actor_expert_client.h"

#include "actor_placement.h"
#include "base_log.h"
#include "kern_ops.h"
#include "router_moe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* rows of one frame: its payload stays well inside an inbox's frame limit */
#define S_FRAME_BYTES (3u << 20)
/* an actor that timed out is avoided this long (or until a table says it is back) */
#define S_SUSPECT_US 3000000

/* One frame sent and not answered yet. */
typedef struct {
    uint64_t seq; /* its id (the reply echoes it) */
    int actor;    /* where it went */
    int *rows;    /* (n) the call's rows it carries, grouped by expert */
    int n;
    bool pending; /* no reply yet */
    int tries;    /* actors it was sent to */
} s_part_t;

struct actor_expert_client_t {
    const char *name; /* the worker's */
    int index;        /* the worker's */
    const model_t *model;
    actor_loop_t *loop; /* the worker's (counters, pulse, defer) */
    actor_counters_t *counters;
    zsock_t *inbox;      /* the worker's inbound (borrowed) */
    zsock_t **to_expert; /* (A) PUSH to each expert actor */
    int A, E, d_model;
    int dtype;      /* msg_dtype_t */
    int timeout_ms; /* scaled */
    /* the dispatch table: the router's newest, or the static placement */
    uint64_t version;
    bool load_aware;
    int32_t *hosts, *cap, *load, *alive; /* (A*E), (E), (A), (A) */
    int cap_min;
    uint64_t *suspect_until; /* (A) */
    uint8_t *skip;           /* (A) scratch */
    /* per call scratch */
    int cap_rows;
    int *actor;        /* (cap_rows) */
    int32_t *used;     /* (cap_rows) */
    int *order;        /* (cap_rows) */
    int64_t *overflow; /* (E) since the last export */
    s_part_t *parts;
    int n_parts, cap_parts;
    float *buf;     /* (rows per frame, d_model) staging */
    uint16_t *half; /* (rows per frame, d_model) */
    int frame_rows;
    uint64_t seq;
    model_ctx_t *local; /* the fallback's own context (the worker's is busy) */
};

static void s_count(actor_expert_client_t *c, const char *fmt, int a, int b, int64_t v) {
    char name[64];
    snprintf(name, sizeof name, fmt, a, b);
    actor_counters_add(c->counters, name, v);
}

actor_expert_client_t *actor_expert_client_new(const actor_topology_t *topo, const char *name,
                                               int index, const model_t *model, actor_loop_t *loop,
                                               zsock_t *inbox, int dtype, int timeout_ms, char *err,
                                               size_t errlen) {
    const model_config_t *cfg = model_config(model);
    actor_expert_client_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->name = name;
    c->index = index;
    c->model = model;
    c->loop = loop;
    c->counters = actor_loop_counters(loop);
    c->inbox = inbox;
    c->A = actor_placement_experts(topo);
    c->E = cfg->n_expert;
    c->d_model = cfg->d_model;
    c->dtype = dtype;
    c->timeout_ms = timeout_ms * BASE_TIMEOUT_SCALE;
    size_t ae = (size_t)c->A * c->E;
    uint8_t *owners = calloc(ae ? ae : 1, 1);
    c->to_expert = calloc((size_t)c->A, sizeof *c->to_expert);
    c->hosts = calloc(ae ? ae : 1, sizeof *c->hosts);
    c->cap = calloc((size_t)c->E, sizeof *c->cap);
    c->load = calloc((size_t)c->A, sizeof *c->load);
    c->alive = calloc((size_t)c->A, sizeof *c->alive);
    c->suspect_until = calloc((size_t)c->A, sizeof *c->suspect_until);
    c->skip = calloc((size_t)c->A, 1);
    c->overflow = calloc((size_t)c->E, sizeof *c->overflow);
    c->frame_rows = (int)(S_FRAME_BYTES / ((size_t)c->d_model * sizeof(float)));
    if (c->frame_rows < 1)
        c->frame_rows = 1;
    c->buf = malloc((size_t)c->frame_rows * c->d_model * sizeof *c->buf);
    c->half = malloc((size_t)c->frame_rows * c->d_model * sizeof *c->half);
    if (!owners || !c->to_expert || !c->hosts || !c->cap || !c->load || !c->alive ||
        !c->suspect_until || !c->skip || !c->overflow || !c->buf || !c->half) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (actor_placement_owners(topo, c->E, owners, err, errlen))
        goto fail;
    for (size_t i = 0; i < ae; i++)
        c->hosts[i] = owners[i];
    for (int a = 0; a < c->A; a++) {
        char peer[32];
        snprintf(peer, sizeof peer, "expert%d", a);
        c->alive[a] = 1;
        if (!(c->to_expert[a] = actor_sock_outbound(topo, name, peer, ACTOR_HWM_BULK))) {
            snprintf(err, errlen, "cannot connect to %s", peer);
            goto fail;
        }
    }
    free(owners);
    actor_counters_set(c->counters, "moe.table.version", 0);
    actor_counters_set(c->counters, "moe.overflow", 0);
    actor_counters_set(c->counters, "moe.timeouts", 0);
    actor_counters_set(c->counters, "moe.local_rows", 0);
    return c;
fail:
    free(owners);
    actor_expert_client_destroy(&c);
    return NULL;
}

void actor_expert_client_destroy(actor_expert_client_t **self_p) {
    if (!self_p || !*self_p)
        return;
    actor_expert_client_t *c = *self_p;
    for (int a = 0; c->to_expert && a < c->A; a++)
        zsock_destroy(&c->to_expert[a]);
    for (int i = 0; i < c->cap_parts; i++)
        free(c->parts[i].rows);
    free(c->parts);
    free(c->to_expert);
    free(c->hosts);
    free(c->cap);
    free(c->load);
    free(c->alive);
    free(c->suspect_until);
    free(c->skip);
    free(c->overflow);
    free(c->actor);
    free(c->used);
    free(c->order);
    free(c->buf);
    free(c->half);
    model_ctx_destroy(&c->local);
    free(c);
    *self_p = NULL;
}

void actor_expert_client_table(actor_expert_client_t *c, const msg_expert_table_t *t) {
    if (t->n_expert != c->E || t->n_actors != c->A) {
        actor_counters_add(c->counters, "moe.table.mismatch", 1);
        return;
    }
    if (t->version <= c->version)
        return;
    c->version = t->version;
    c->load_aware = t->load_aware;
    c->cap_min = t->cap_min;
    memcpy(c->hosts, t->hosts, (size_t)c->A * c->E * sizeof *c->hosts);
    memcpy(c->cap, t->cap, (size_t)c->E * sizeof *c->cap);
    memcpy(c->load, t->load, (size_t)c->A * sizeof *c->load);
    for (int a = 0; a < c->A; a++) {
        if (t->alive[a] && !c->alive[a])
            c->suspect_until[a] = 0; /* back: no longer avoided */
        c->alive[a] = t->alive[a];
    }
    actor_counters_set(c->counters, "moe.table.version", (int64_t)c->version);
}

static int s_reserve(actor_expert_client_t *c, int n) {
    if (n <= c->cap_rows)
        return 0;
    int *a = realloc(c->actor, (size_t)n * sizeof *a);
    if (a)
        c->actor = a;
    int32_t *u = realloc(c->used, (size_t)n * sizeof *u);
    if (u)
        c->used = u;
    int *o = realloc(c->order, (size_t)n * sizeof *o);
    if (o)
        c->order = o;
    if (!a || !u || !o)
        return -ENOMEM;
    c->cap_rows = n;
    return 0;
}

static s_part_t *s_new_part(actor_expert_client_t *c, int n) {
    if (c->n_parts == c->cap_parts) {
        int cap = c->cap_parts ? 2 * c->cap_parts : 16;
        s_part_t *p = realloc(c->parts, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        memset(p + c->cap_parts, 0, (size_t)(cap - c->cap_parts) * sizeof *p);
        c->parts = p;
        c->cap_parts = cap;
    }
    s_part_t *p = &c->parts[c->n_parts];
    int *rows = realloc(p->rows, (size_t)(n > 0 ? n : 1) * sizeof *rows);
    if (!rows)
        return NULL;
    p->rows = rows;
    p->n = 0;
    p->tries = 0;
    p->pending = false;
    c->n_parts++;
    return p;
}

/* Send part p to actor a.  0, or a negative errno (then the caller retries elsewhere). */
static int s_send(actor_expert_client_t *c, const model_moe_call_t *call, s_part_t *p, int a) {
    int D = c->d_model;
    int32_t experts[p->n > 0 ? p->n : 1];
    for (int i = 0; i < p->n; i++) {
        int r = p->rows[i];
        experts[i] = c->used[r];
        const float *h = call->h + (size_t)call->token[r] * D;
        if (c->dtype == MSG_DTYPE_F16)
            for (int j = 0; j < D; j++)
                c->half[(size_t)i * D + j] = kern_f32_to_f16(h[j]);
        else
            memcpy(c->buf + (size_t)i * D, h, (size_t)D * sizeof *h);
    }
    msg_expert_request_t q;
    msg_expert_request_init(&q);
    q.seq = ++c->seq;
    q.worker = c->index;
    q.layer = call->layer;
    q.d_model = D;
    q.dtype = c->dtype;
    q.experts = experts;
    q.n_rows = p->n;
    q.table = c->version;
    const void *raw = c->dtype == MSG_DTYPE_F16 ? (const void *)c->half : (const void *)c->buf;
    size_t len = (size_t)p->n * D * (c->dtype == MSG_DTYPE_F16 ? 2 : 4);
    p->seq = q.seq;
    p->actor = a;
    p->tries++;
    p->pending = true;
    int rc = actor_send_raw(c->to_expert[a], MSG_EXPERT_REQUEST, &q, raw, len, 0);
    if (rc) {
        p->pending = false;
        actor_counters_add(c->counters, "moe.send_failed", 1);
        return rc;
    }
    actor_counters_add(c->counters, "moe.frames", 1);
    s_count(c, "moe.rows.actor%d", a, 0, p->n);
    return 0;
}

/* Compute rows[0..n) of the call here: the last resort. */
static int s_local(actor_expert_client_t *c, const model_moe_call_t *call, const int *rows, int n) {
    if (!n)
        return 0;
    if (!c->local && !(c->local = model_ctx_new(c->model, 64, 16, 1, NULL)))
        return -ENOMEM;
    int D = c->d_model;
    float *h = malloc((size_t)n * D * sizeof *h), *y = malloc((size_t)n * D * sizeof *y);
    int rc = h && y ? 0 : -ENOMEM;
    for (int i = 0; !rc && i < n; i++)
        memcpy(h + (size_t)i * D, call->h + (size_t)call->token[rows[i]] * D, (size_t)D * 4);
    for (int i0 = 0, i1; !rc && i0 < n; i0 = i1) { /* runs of one expert */
        for (i1 = i0 + 1; i1 < n && c->used[rows[i1]] == c->used[rows[i0]];)
            i1++;
        rc = model_moe_expert_rows(c->local, call->layer, c->used[rows[i0]], i1 - i0,
                                   h + (size_t)i0 * D, y + (size_t)i0 * D);
    }
    for (int i = 0; !rc && i < n; i++)
        memcpy(call->y + (size_t)rows[i] * D, y + (size_t)i * D, (size_t)D * 4);
    free(h);
    free(y);
    if (!rc)
        actor_counters_add(c->counters, "moe.local_rows", n);
    return rc;
}

/* Another actor for part p (the one it failed on avoided), or -1.  The least
 * loaded alive host of every expert in it. */
static int s_other(actor_expert_client_t *c, const s_part_t *p, uint64_t now) {
    int best = -1;
    for (int a = 0; a < c->A; a++) {
        if (!c->alive[a] || now < c->suspect_until[a] || a == p->actor)
            continue;
        bool all = true;
        for (int i = 0; i < p->n && all; i++)
            all = c->hosts[(size_t)a * c->E + c->used[p->rows[i]]] != 0;
        if (all && (best < 0 || c->load[a] < c->load[best]))
            best = a;
    }
    return best;
}

/* Part p failed on its actor: resend it elsewhere, or compute it here. */
static int s_retry(actor_expert_client_t *c, const model_moe_call_t *call, s_part_t *p) {
    uint64_t now = base_now_us();
    p->pending = false;
    while (p->tries <= c->A) {
        int a = s_other(c, p, now);
        if (a < 0)
            break;
        actor_counters_add(c->counters, "moe.resent", 1);
        if (!s_send(c, call, p, a))
            return 0;
        c->suspect_until[a] = now + S_SUSPECT_US;
    }
    return s_local(c, call, p->rows, p->n);
}

/* A reply: copy its rows in.  true when it answered a pending part. */
static bool s_on_reply(actor_expert_client_t *c, const model_moe_call_t *call,
                       const msg_expert_reply_t *m, zmq_msg_t *raw, int *rc) {
    s_part_t *p = NULL;
    for (int i = 0; i < c->n_parts && !p; i++)
        if (c->parts[i].pending && c->parts[i].seq == m->seq)
            p = &c->parts[i];
    if (!p) { /* a late answer to a part resent elsewhere, or a duplicate */
        actor_counters_add(c->counters, "moe.stale_replies", 1);
        return false;
    }
    int D = c->d_model;
    size_t esz = m->dtype == MSG_DTYPE_F16 ? 2 : 4;
    if (m->status != MSG_EXPERT_OK || m->n_rows != p->n || m->dtype != c->dtype ||
        m->layer != call->layer || zmq_msg_size(raw) != (size_t)p->n * D * esz) {
        actor_counters_add(c->counters, "moe.failed_replies", 1);
        if (m->status == MSG_EXPERT_NOT_HOSTED)
            c->suspect_until[p->actor] = base_now_us() + S_SUSPECT_US / 10;
        int e = s_retry(c, call, p);
        if (e)
            *rc = e;
        return true;
    }
    const uint8_t *src = zmq_msg_data(raw);
    for (int i = 0; i < p->n; i++) {
        float *y = call->y + (size_t)p->rows[i] * D;
        if (esz == 2)
            for (int j = 0; j < D; j++) {
                uint16_t hv;
                memcpy(&hv, src + ((size_t)i * D + j) * 2, 2);
                y[j] = kern_f16_to_f32(hv);
            }
        else
            memcpy(y, src + (size_t)i * D * 4, (size_t)D * 4);
    }
    p->pending = false;
    return true;
}

/* Wait until every part is answered, resending what times out.  0 or an error. */
static int s_wait(actor_expert_client_t *c, const model_moe_call_t *call) {
    int rc = 0;
    uint64_t t0 = base_now_us();
    uint64_t deadline = t0 + (uint64_t)c->timeout_ms * 1000;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < c->n_parts; i++)
            pending += c->parts[i].pending;
        if (!pending)
            break;
        uint64_t now = base_now_us();
        if (now >= deadline) {
            for (int i = 0; i < c->n_parts; i++) {
                s_part_t *p = &c->parts[i];
                if (!p->pending)
                    continue;
                actor_counters_add(c->counters, "moe.timeouts", 1);
                LOG_W(c->name,
                      "expert%d did not answer layer %d within %d ms: its rows go "
                      "elsewhere",
                      p->actor, call->layer, c->timeout_ms);
                c->suspect_until[p->actor] = now + S_SUSPECT_US;
                int e = s_retry(c, call, p);
                if (e)
                    rc = e;
            }
            deadline = base_now_us() + (uint64_t)c->timeout_ms * 1000;
            continue;
        }
        int wait = (int)((deadline - now + 999) / 1000);
        int held = actor_loop_pulse(c->loop);
        if (held >= 0 && held < wait)
            wait = held;
        if (wait > ACTOR_HEARTBEAT_MS)
            wait = ACTOR_HEARTBEAT_MS;
        zmq_pollitem_t it = {zsock_resolve(c->inbox), 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, wait) <= 0 || !(it.revents & ZMQ_POLLIN))
            continue;
        msg_any_t m;
        msg_err_t err;
        zmq_msg_t raw;
        int r = actor_recv_raw(c->inbox, &m, &err, &raw);
        if (r == -EAGAIN)
            continue;
        if (r < 0) {
            actor_counters_add(c->counters, "malformed", 1);
            if (r == -EBADMSG)
                actor_counters_add(c->counters, "malformed.checksum", 1);
        } else if (m.type == MSG_EXPERT_REPLY) {
            s_on_reply(c, call, &m.u.expert_reply, &raw, &rc);
        } else if (m.type == MSG_EXPERT_TABLE) {
            actor_expert_client_table(c, &m.u.expert_table);
            /* a part on an actor the router now calls down goes elsewhere at once */
            for (int i = 0; i < c->n_parts; i++)
                if (c->parts[i].pending && !c->alive[c->parts[i].actor]) {
                    int e = s_retry(c, call, &c->parts[i]);
                    if (e)
                        rc = e;
                }
        } else {
            actor_loop_defer(c->loop, c->inbox, &m, &raw);
        }
        msg_any_clear(&m);
        zmq_msg_close(&raw);
    }
    actor_counters_add(c->counters, "moe.wait_us", (int64_t)(base_now_us() - t0));
    return rc;
}

int actor_expert_client_exec(void *user, const model_moe_call_t *call) {
    actor_expert_client_t *c = user;
    int n = call->n_rows;
    if (n <= 0)
        return 0;
    if (s_reserve(c, n))
        return -ENOMEM;
    uint64_t now = base_now_us();
    for (int a = 0; a < c->A; a++)
        c->skip[a] = now < c->suspect_until[a];
    router_moe_view_t view = {c->E,   c->A,    c->load_aware, c->hosts,
                              c->cap, c->load, c->alive,      c->cap_min};
    int64_t *over = c->overflow;
    memset(over, 0, (size_t)c->E * sizeof *over);
    const float *logits = call->n_expert == c->E ? call->logits : NULL;
    int moved = router_moe_assign(&view, n, call->token, call->expert, logits, c->skip, c->actor,
                                  c->used, over);
    actor_counters_add(c->counters, "moe.calls", 1);
    actor_counters_add(c->counters, "moe.rows", n);
    if (moved) {
        actor_counters_add(c->counters, "moe.overflow", moved);
        for (int e = 0; e < c->E; e++)
            if (over[e])
                s_count(c, "moe.overflow.expert%d", e, 0, over[e]);
    }
    /* rows of each actor, grouped by the expert that computes them (counting sort) */
    c->n_parts = 0;
    int rc = 0, n_local = 0;
    for (int a = -1; a < c->A; a++) {
        int k = 0;
        for (int e = 0; e < c->E; e++)
            for (int r = 0; r < n; r++)
                if (c->actor[r] == a && c->used[r] == e)
                    c->order[k++] = r;
        if (!k)
            continue;
        if (a < 0) { /* no actor alive for them: here */
            n_local = k;
            rc = s_local(c, call, c->order, k);
            if (rc)
                return rc;
            continue;
        }
        for (int i0 = 0; i0 < k; i0 += c->frame_rows) {
            int m = k - i0 < c->frame_rows ? k - i0 : c->frame_rows;
            s_part_t *p = s_new_part(c, m);
            if (!p)
                return -ENOMEM;
            memcpy(p->rows, c->order + i0, (size_t)m * sizeof *p->rows);
            p->n = m;
            if (s_send(c, call, p, a) && (rc = s_retry(c, call, p)))
                return rc;
        }
    }
    (void)n_local;
    return s_wait(c, call);
}

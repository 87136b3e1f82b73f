/* actor_runtime.c - actors as zactor threads, the process-mode body, socket
 * helpers, counters and the common control-message answers. */
#include "actor_runtime.h"

#include "actor_draft.h"
#include "actor_frontend.h"
#include "actor_kvtier.h"
#include "actor_prefetch.h"
#include "actor_router.h"
#include "actor_tokenizer.h"
#include "actor_worker.h"
#include "base/base_log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG "actor"

struct actor_env_t {
    char name[ACTOR_TOPO_NAME];   /* the actor's name */
    const actor_topology_t *topo; /* borrowed from the parent */
    actor_fn_t fn;                /* the actor's body */
    zsock_t *pipe;                /* the actor's end of the zactor pipe */
    bool answered;                /* READY or FAIL sent */
};

struct actor_t {
    char name[ACTOR_TOPO_NAME]; /* the actor's name */
    zactor_t *zactor;           /* the thread and the parent's end of the pipe */
    bool exited;                /* its function returned */
    int rc;                     /* what it returned */
};

uint64_t actor_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

const char *actor_env_name(const actor_env_t *env) {
    return env->name;
}
const actor_topology_t *actor_env_topology(const actor_env_t *env) {
    return env->topo;
}
zsock_t *actor_env_pipe(actor_env_t *env) {
    return env->pipe;
}

int actor_env_ready(actor_env_t *env) {
    env->answered = true;
    return zstr_send(env->pipe, "READY") ? -EIO : 0;
}

void actor_env_fail(actor_env_t *env, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    LOG_E(env->name, "%s", why);
    if (!env->answered)
        zstr_sendf(env->pipe, "FAIL %s", why);
    env->answered = true;
}

actor_fn_t actor_lookup(const char *name) {
    if (!strcmp(name, "frontend"))
        return actor_frontend_main;
    if (!strcmp(name, "tokenizer"))
        return actor_tokenizer_main;
    if (!strcmp(name, "router"))
        return actor_router_main;
    if (!strcmp(name, "draft"))
        return actor_draft_main;
    if (!strcmp(name, "kvtier"))
        return actor_kvtier_main;
    if (!strcmp(name, "prefetcher"))
        return actor_prefetch_main;
    if (!strncmp(name, "worker", 6) && name[6] >= '0' && name[6] <= '9')
        return actor_worker_main;
    return NULL;
}

/* The zactor body: signal zactor_new at once, run the actor, report its end. */
static void s_shim(zsock_t *pipe, void *args) {
    actor_env_t *env = args;
    env->pipe = pipe;
    zsock_signal(pipe, 0);
    int rc = env->fn(env);
    if (!env->answered && rc)
        zstr_sendf(pipe, "FAIL exited with %d before it was ready", rc);
    zstr_sendf(pipe, "EXIT %d", rc);
    free(env);
}

actor_t *actor_new(const char *name, const actor_topology_t *topo, int timeout_ms, char *err,
                   size_t errlen) {
    actor_fn_t fn = actor_lookup(name);
    if (!fn || !actor_topology_endpoint(topo, name)) {
        snprintf(err, errlen, "no actor called '%s' in the topology", name);
        return NULL;
    }
    actor_t *self = calloc(1, sizeof *self);
    actor_env_t *env = calloc(1, sizeof *env);
    if (!self || !env) {
        free(self);
        free(env);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(self->name, sizeof self->name, "%s", name);
    snprintf(env->name, sizeof env->name, "%s", name);
    env->topo = topo;
    env->fn = fn;
    self->zactor = zactor_new(s_shim, env); /* env now belongs to the thread */
    if (!self->zactor) {
        snprintf(err, errlen, "cannot start the thread of '%s'", name);
        free(self);
        return NULL;
    }
    zsock_t *pipe = zactor_sock(self->zactor);
    zsock_set_rcvtimeo(pipe, timeout_ms > 0 ? timeout_ms : -1);
    char *s = zstr_recv(pipe);
    zsock_set_rcvtimeo(pipe, -1);
    if (s && !strcmp(s, "READY")) {
        zstr_free(&s);
        return self;
    }
    if (!s)
        snprintf(err, errlen, "'%s' was not ready within %d ms", name, timeout_ms);
    else if (!strncmp(s, "FAIL ", 5))
        snprintf(err, errlen, "%s", s + 5);
    else
        snprintf(err, errlen, "'%s' ended before it was ready (%s)", name, s);
    zstr_free(&s);
    actor_destroy(&self);
    return NULL;
}

void actor_destroy(actor_t **self_p) {
    if (!self_p || !*self_p)
        return;
    actor_t *self = *self_p;
    zactor_destroy(&self->zactor);
    free(self);
    *self_p = NULL;
}

const char *actor_name(const actor_t *self) {
    return self->name;
}
zsock_t *actor_pipe(actor_t *self) {
    return zactor_sock(self->zactor);
}

bool actor_exited(actor_t *self, int *rc) {
    zsock_t *pipe = zactor_sock(self->zactor);
    while (!self->exited && (zsock_events(pipe) & ZMQ_POLLIN)) {
        char *s = zstr_recv(pipe);
        if (!s)
            break;
        if (!strncmp(s, "EXIT ", 5)) {
            self->exited = true;
            self->rc = atoi(s + 5);
        }
        zstr_free(&s);
    }
    if (self->exited && rc)
        *rc = self->rc;
    return self->exited;
}

int actor_process_run(const char *name, const actor_topology_t *topo) {
    char err[512];
    actor_t *a = actor_new(name, topo, 300000, err, sizeof err);
    if (!a) {
        LOG_E(TAG, "%s: %s", name, err);
        return 1;
    }
    const char *sup = actor_topology_endpoint(topo, "supervisor");
    zsock_t *ctl = NULL;
    if (sup) {
        ctl = actor_sock_outbound(sup, 16);
        msg_ready_t r;
        msg_ready_init(&r);
        msg_set_str(r.name, sizeof r.name, name);
        r.pid = getpid();
        /* the supervisor may still be connecting: retry a full queue briefly */
        for (int i = 0; ctl && i < 50 && actor_send(ctl, MSG_READY, &r) == -EAGAIN; i++)
            zclock_sleep(20);
    }
    LOG_I(TAG, "%s: ready (pid %d)", name, (int)getpid());
    int rc = 0;
    zpoller_t *poller = zpoller_new(actor_pipe(a), NULL);
    while (!zsys_interrupted) {
        zpoller_wait(poller, 200);
        if (actor_exited(a, &rc))
            break;
        if (getppid() == 1) { /* the supervisor is gone */
            LOG_W(TAG, "%s: parent gone, stopping", name);
            break;
        }
    }
    zpoller_destroy(&poller);
    if (rc)
        LOG_E(TAG, "%s: failed (%d)", name, rc);
    actor_destroy(&a);
    zsock_destroy(&ctl);
    return rc ? 1 : 0;
}

/* ---- sockets */

zsock_t *actor_sock_inbound(const char *endpoint, int64_t max_msg, int rcvhwm) {
    zsock_t *s = zsock_new(ZMQ_PULL);
    if (!s)
        return NULL;
    zsock_set_maxmsgsize(s, (int)max_msg);
    zsock_set_rcvhwm(s, rcvhwm);
    zsock_set_linger(s, 0);
    if (zsock_bind(s, "%s", endpoint) < 0) {
        LOG_E(TAG, "cannot bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
        zsock_destroy(&s);
    }
    return s;
}

zsock_t *actor_sock_outbound(const char *endpoint, int sndhwm) {
    zsock_t *s = zsock_new(ZMQ_PUSH);
    if (!s)
        return NULL;
    zsock_set_sndhwm(s, sndhwm);
    zsock_set_linger(s, 0);
    if (zsock_connect(s, "%s", endpoint) < 0) {
        LOG_E(TAG, "cannot connect %s: %s", endpoint, zmq_strerror(zmq_errno()));
        zsock_destroy(&s);
    }
    return s;
}

int actor_send(zsock_t *sock, int type, const void *m) {
    void *buf = NULL;
    size_t len = 0;
    msg_err_t err;
    int rc = msg_encode(type, m, &buf, &len, &err);
    if (rc) {
        LOG_W(TAG, "cannot encode %s: %s", msg_type_name(type), err.msg);
        return rc;
    }
    rc = zmq_send(zsock_resolve(sock), buf, len, ZMQ_DONTWAIT);
    free(buf);
    if (rc < 0)
        return zmq_errno() == EAGAIN ? -EAGAIN : -EIO;
    return 0;
}

int actor_recv(zsock_t *sock, msg_any_t *m, msg_err_t *err) {
    void *h = zsock_resolve(sock);
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    m->type = MSG_NONE;
    if (zmq_msg_recv(&msg, h, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&msg);
        return -EAGAIN;
    }
    bool more = zmq_msg_more(&msg);
    int rc;
    if (more) {
        rc = -EPROTO;
        if (err) {
            memset(err, 0, sizeof *err);
            err->code = rc;
            err->kind = MSG_E_MALFORMED;
            snprintf(err->msg, sizeof err->msg, "multi-part frame");
        }
        while (more) { /* drain the rest of it */
            zmq_msg_close(&msg);
            zmq_msg_init(&msg);
            if (zmq_msg_recv(&msg, h, 0) < 0)
                break;
            more = zmq_msg_more(&msg);
        }
    } else {
        rc = msg_any_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), m, err);
    }
    zmq_msg_close(&msg);
    return rc;
}

int actor_send_raw(zsock_t *sock, int type, const void *m, const void *raw, size_t len,
                   int timeout_ms) {
    void *buf = NULL;
    size_t blen = 0;
    msg_err_t err;
    int rc = msg_encode(type, m, &buf, &blen, &err);
    if (rc) {
        LOG_W(TAG, "cannot encode %s: %s", msg_type_name(type), err.msg);
        return rc;
    }
    void *h = zsock_resolve(sock);
    /* a multi-part message is queued atomically: once the first part is in, the
     * second goes too (ZeroMQ guarantees it), so only the first may see EAGAIN */
    uint64_t t0 = actor_now_us();
    for (;;) {
        rc = zmq_send(h, buf, blen, ZMQ_DONTWAIT | ZMQ_SNDMORE);
        if (rc >= 0 || zmq_errno() != EAGAIN ||
            actor_now_us() - t0 >= (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000)
            break;
        zclock_sleep(1);
    }
    free(buf);
    if (rc < 0)
        return zmq_errno() == EAGAIN ? -EAGAIN : -EIO;
    rc = zmq_send(h, raw, len, 0);
    return rc < 0 ? -EIO : 0;
}

int actor_recv_raw(zsock_t *sock, msg_any_t *m, msg_err_t *err, zmq_msg_t *raw) {
    void *h = zsock_resolve(sock);
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    zmq_msg_init(raw);
    m->type = MSG_NONE;
    if (zmq_msg_recv(&msg, h, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&msg);
        return -EAGAIN;
    }
    int rc = 0;
    if (zmq_msg_more(&msg)) {
        zmq_msg_recv(raw, h, 0); /* the rest of a multi-part message is already here */
        if (zmq_msg_more(raw)) {
            rc = -EPROTO;
            bool more = true;
            while (more) {
                zmq_msg_close(raw);
                zmq_msg_init(raw);
                if (zmq_msg_recv(raw, h, 0) < 0)
                    break;
                more = zmq_msg_more(raw);
            }
            zmq_msg_close(raw);
            zmq_msg_init(raw);
            if (err) {
                memset(err, 0, sizeof *err);
                err->code = rc;
                err->kind = MSG_E_MALFORMED;
                snprintf(err->msg, sizeof err->msg, "more than two frames");
            }
        }
    }
    if (!rc)
        rc = msg_any_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), m, err);
    zmq_msg_close(&msg);
    return rc;
}

/* ---- counters */

typedef struct {
    char name[MSG_MAX_COUNTER_NAME_BYTES + 1];
    int64_t value;
} s_counter_t;

struct actor_counters_t {
    s_counter_t *items; /* (cap) first n valid */
    int n, cap;
};

actor_counters_t *actor_counters_new(void) {
    return calloc(1, sizeof(actor_counters_t));
}

void actor_counters_destroy(actor_counters_t **self_p) {
    if (!self_p || !*self_p)
        return;
    free((*self_p)->items);
    free(*self_p);
    *self_p = NULL;
}

static s_counter_t *s_counter(actor_counters_t *self, const char *name) {
    for (int i = 0; i < self->n; i++)
        if (!strcmp(self->items[i].name, name))
            return &self->items[i];
    if (self->n == self->cap) {
        int cap = self->cap ? self->cap * 2 : 16;
        if (cap > MSG_MAX_COUNTERS)
            return NULL;
        s_counter_t *it = realloc(self->items, (size_t)cap * sizeof *it);
        if (!it)
            return NULL;
        self->items = it;
        self->cap = cap;
    }
    s_counter_t *c = &self->items[self->n++];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->value = 0;
    return c;
}

void actor_counters_add(actor_counters_t *self, const char *name, int64_t delta) {
    s_counter_t *c = s_counter(self, name);
    if (c)
        c->value += delta;
}

void actor_counters_set(actor_counters_t *self, const char *name, int64_t value) {
    s_counter_t *c = s_counter(self, name);
    if (c)
        c->value = value;
}

int64_t actor_counters_get(const actor_counters_t *self, const char *name) {
    for (int i = 0; i < self->n; i++)
        if (!strcmp(self->items[i].name, name))
            return self->items[i].value;
    return 0;
}

int actor_counters_count(const actor_counters_t *self) {
    return self->n;
}
const char *actor_counters_name_at(const actor_counters_t *self, int i) {
    return self->items[i].name;
}
int64_t actor_counters_value_at(const actor_counters_t *self, int i) {
    return self->items[i].value;
}

int actor_ctl_handle(actor_env_t *env, const msg_any_t *m, zsock_t *reply,
                     const actor_counters_t *counters) {
    switch (m->type) {
    case MSG_PING: {
        msg_pong_t p;
        msg_pong_init(&p);
        p.seq = m->u.ping.seq;
        msg_set_str(p.name, sizeof p.name, env->name);
        if (reply)
            actor_send(reply, MSG_PONG, &p);
        return 0;
    }
    case MSG_STATS_QUERY: {
        msg_stats_answer_t a;
        msg_stats_answer_init(&a);
        msg_set_str(a.name, sizeof a.name, env->name);
        a.counters =
            counters && counters->n ? malloc((size_t)counters->n * sizeof *a.counters) : NULL;
        if (a.counters) {
            for (int i = 0; i < counters->n; i++) {
                snprintf(a.counters[i].name, sizeof a.counters[i].name, "%s",
                         counters->items[i].name);
                a.counters[i].value = counters->items[i].value;
            }
            a.n_counters = counters->n;
        }
        if (reply)
            actor_send(reply, MSG_STATS_ANSWER, &a);
        free(a.counters);
        return 0;
    }
    case MSG_STOP:
        return 1;
    default:
        return -1;
    }
}

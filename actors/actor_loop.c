/* actor_loop.c - the loop every actor runs (actor_runtime.h, actor_loop_*): its sockets
 * polled, each inbox drained (a budget per wakeup), control messages answered (ping, stats,
 * stop), typed handlers called, timers and an idle hook, the heartbeat of process mode, and
 * the fault injection's held frames and stalls.  tests/unit/test_actor_loop.c is its
 * self-test and its example. */
#include "actor_runtime.h"
#include "actor_runtime_int.h"

#include "actor_curve.h"
#include "actor_faults.h"
#include "base_fifo.h"
#include "base_log.h"

#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#endif

#define TAG ACTOR_RT_TAG

#define S_MAX_SOCKS                                                                                \
    160 /* the inbox and readers: a router with 64 workers follows 128 KV event sockets */
#define S_MAX_HANDLERS 32
#define S_MAX_TIMERS 8

typedef struct {
    zsock_t *sock;      /* borrowed; a monitor: owned */
    actor_reader_fn fn; /* reader: reads one message itself; NULL: an inbox */
    void *arg;          /* reader: what fn gets as self (NULL: the actor's self) */
    bool monitor;       /* the PAIR end of a CURVE inbox's monitor */
    zsock_t *reply;     /* inbox: where pong / stats_answer go */
    bool raw;           /* inbox: a raw second frame may follow */
    char malformed[48]; /* inbox: counter names, with the prefix */
    char checksum[48];  /* (a frame whose checksum failed counts both) */
    char unexpected[48];
    actor_fd_fn fd_fn; /* a plain fd (sock is NULL): called when it is readable */
    int fd;
} s_sock_t;

/* A message an actor read from its inbox itself and queued (actor_loop_defer). */
typedef struct s_deferred_t {
    msg_any_t m;           /* decoded, owned */
    zmq_msg_t raw;         /* its raw frame (size 0: none), owned */
    int sock;              /* index of its inbox in socks */
    base_fifo_link_t link; /* in the loop's deferred queue */
} s_deferred_t;

typedef struct {
    uint64_t every_us; /* interval */
    uint64_t next_us;  /* when it is due next */
    actor_timer_fn fn;
} s_timer_t;

struct actor_loop_t {
    actor_env_t *env;           /* the actor's runtime */
    void *self;                 /* the actor's state, passed to every handler */
    actor_counters_t *counters; /* owned: what stats_answer reports */
    s_sock_t socks[S_MAX_SOCKS];
    int n_socks;
    struct {
        int type;
        actor_msg_fn fn;      /* untyped (actor_loop_on), or NULL */
        actor_typed_fn typed; /* typed (actor_loop_handle_<name>[_raw]), or NULL */
        bool raw;             /* typed: it takes the raw frame too */
    } on[S_MAX_HANDLERS];     /* per-type handlers of the inbox */
    int n_on;
    s_timer_t timers[S_MAX_TIMERS];
    int n_timers;
    actor_idle_fn idle;        /* after every wakeup, or NULL */
    actor_timer_fn stats_hook; /* before every stats_answer, or NULL */
    int budget;                /* messages per socket per wakeup */
    bool stop;                 /* end after the current message */
    zsock_t *beat;             /* process mode: PUSH to the supervisor, owned; else NULL */
    uint64_t beat_next_us;     /* when the next heartbeat is due */
    base_fifo_t deferred;      /* s_deferred_t queued by actor_loop_defer, oldest first */
};

actor_loop_t *actor_loop_new(actor_env_t *env, void *self) {
    actor_loop_t *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->env = env;
    l->self = self;
    l->budget = 1000;
    l->counters = actor_counters_new();
    if (!l->counters) {
        free(l);
        return NULL;
    }
    if (actor_rt_faults) /* reported from the start */
        actor_faults_report(actor_rt_faults, l->counters);
    /* this thread's own socket (the process's ready report has another): a
     * heartbeat never waits, and at most two queue while the supervisor is away */
    if (env->beat &&
        !(l->beat = actor_sock_outbound(env->topo, env->name, "supervisor", ACTOR_HWM_BEAT)))
        LOG_W(TAG, "%s: no heartbeat socket: the supervisor will see it as hung", env->name);
    return l;
}

void actor_loop_destroy(actor_loop_t **self_p) {
    if (!self_p || !*self_p)
        return;
    s_deferred_t *d;
    while ((d = BASE_FIFO_ENTRY(base_fifo_pop(&(*self_p)->deferred), s_deferred_t, link))) {
        msg_any_clear(&d->m);
        zmq_msg_close(&d->raw);
        free(d);
    }
    for (int i = 0; i < (*self_p)->n_socks; i++)
        if ((*self_p)->socks[i].monitor)
            zsock_destroy(&(*self_p)->socks[i].sock);
    zsock_destroy(&(*self_p)->beat);
    actor_counters_destroy(&(*self_p)->counters);
    free(*self_p);
    *self_p = NULL;
}

void actor_loop_refresh_counters(actor_loop_t *self) {
    if (actor_rt_faults)
        actor_faults_report(actor_rt_faults, self->counters);
}

actor_counters_t *actor_loop_counters(actor_loop_t *self) {
    return self->counters;
}

/* Watch the handshakes of CURVE server sock: a PAIR socket, read by the loop,
 * gets the ZAP refusals.  0, -ENOSPC, or -EIO when libzmq cannot monitor. */
static int s_monitor(actor_loop_t *self, zsock_t *sock) {
    if (self->n_socks == S_MAX_SOCKS)
        return -ENOSPC;
    char ep[96];
    snprintf(ep, sizeof ep, "inproc://strata-curve-monitor-%p", (void *)sock);
    if (zmq_socket_monitor(zsock_resolve(sock), ep, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH))
        return -EIO;
    zsock_t *pair = zsock_new(ZMQ_PAIR);
    if (!pair || zsock_connect(pair, "%s", ep) < 0) {
        zsock_destroy(&pair);
        return -EIO;
    }
    self->socks[self->n_socks++] = (s_sock_t){.sock = pair, .monitor = true};
    actor_counters_set(self->counters, "curve.refused", 0); /* reported from the start */
    return 0;
}

/* Read one monitor event (two frames: event id and value, then the
 * endpoint) and count a refused handshake.  false when none was waiting. */
static bool s_monitor_one(actor_loop_t *self, s_sock_t *s) {
    void *h = zsock_resolve(s->sock);
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, h, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&msg);
        return false;
    }
    uint16_t event = 0;
    if (zmq_msg_size(&msg) >= sizeof event)
        memcpy(&event, zmq_msg_data(&msg), sizeof event);
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        actor_counters_add(self->counters, "curve.refused", 1);
    while (zmq_msg_more(&msg)) { /* the endpoint frame */
        zmq_msg_close(&msg);
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, h, 0) < 0)
            break;
    }
    zmq_msg_close(&msg);
    return true;
}

int actor_loop_inbox(actor_loop_t *self, zsock_t *sock, zsock_t *reply, bool raw,
                     const char *prefix) {
    if (self->n_socks == S_MAX_SOCKS)
        return -ENOSPC;
    s_sock_t *s = &self->socks[self->n_socks++];
    *s = (s_sock_t){.sock = sock, .reply = reply, .raw = raw};
    snprintf(s->malformed, sizeof s->malformed, "%smalformed", prefix ? prefix : "");
    snprintf(s->checksum, sizeof s->checksum, "%smalformed.checksum", prefix ? prefix : "");
    snprintf(s->unexpected, sizeof s->unexpected, "%sunexpected", prefix ? prefix : "");
    if (zsock_mechanism(sock) == ZMQ_CURVE && zsock_curve_server(sock))
        return s_monitor(self, sock);
    return 0;
}

int actor_loop_reader(actor_loop_t *self, zsock_t *sock, actor_reader_fn fn) {
    return actor_loop_reader_arg(self, sock, fn, NULL);
}

int actor_loop_reader_arg(actor_loop_t *self, zsock_t *sock, actor_reader_fn fn, void *arg) {
    if (self->n_socks == S_MAX_SOCKS)
        return -ENOSPC;
    self->socks[self->n_socks++] = (s_sock_t){.sock = sock, .fn = fn, .arg = arg};
    return 0;
}

int actor_loop_fd(actor_loop_t *self, int fd, actor_fd_fn fn) {
    if (self->n_socks == S_MAX_SOCKS)
        return -ENOSPC;
    if (fd < 0 || !fn)
        return -EINVAL;
    self->socks[self->n_socks++] = (s_sock_t){.fd_fn = fn, .fd = fd};
    return 0;
}

int actor_loop_on(actor_loop_t *self, int type, actor_msg_fn fn) {
    if (!fn)
        return -EINVAL;
    if (self->n_on == S_MAX_HANDLERS)
        return -ENOSPC;
    self->on[self->n_on].type = type;
    self->on[self->n_on].typed = NULL;
    self->on[self->n_on++].fn = fn;
    return 0;
}

int actor_loop_on_typed_(actor_loop_t *self, int type, actor_typed_fn fn, bool raw) {
    if (!fn || !msg_type_name(type))
        return -EINVAL;
    if (self->n_on == S_MAX_HANDLERS)
        return -ENOSPC;
    self->on[self->n_on].type = type;
    self->on[self->n_on].fn = NULL;
    self->on[self->n_on].raw = raw;
    self->on[self->n_on++].typed = fn;
    return 0;
}

/* Call typed handler fn (registered for m->type) with m's own struct: the
 * pointer goes back to the type it was registered with before the call. */
static void s_call_typed(actor_typed_fn fn, bool with_raw, void *self, msg_any_t *m,
                         zmq_msg_t *raw) {
    switch (m->type) {
#define S_X_CALL(name, NAME, id, version, family)                                                  \
    case MSG_##NAME:                                                                               \
        if (with_raw)                                                                              \
            ((actor_on_##name##_raw_fn)fn)(self, &m->u.name, raw);                                 \
        else                                                                                       \
            ((actor_on_##name##_fn)fn)(self, &m->u.name);                                          \
        break;
        MSG_TYPES(S_X_CALL)
#undef S_X_CALL
    default:
        break;
    }
}

int actor_loop_timer(actor_loop_t *self, int interval_ms, actor_timer_fn fn) {
    if (interval_ms < 1 || !fn)
        return -EINVAL;
    if (self->n_timers == S_MAX_TIMERS)
        return -ENOSPC;
    uint64_t every = (uint64_t)interval_ms * 1000;
    self->timers[self->n_timers++] = (s_timer_t){every, base_now_us() + every, fn};
    return 0;
}

void actor_loop_idle(actor_loop_t *self, actor_idle_fn fn) {
    self->idle = fn;
}
void actor_loop_on_stats(actor_loop_t *self, actor_timer_fn fn) {
    self->stats_hook = fn;
}
void actor_loop_budget(actor_loop_t *self, int budget) {
    self->budget = budget > 0 ? budget : 1;
}
void actor_loop_stop(actor_loop_t *self) {
    self->stop = true;
}

/* Answer ping / stats_query / stop.  true when m was one of them. */
static bool s_ctl(actor_loop_t *self, const msg_any_t *m, zsock_t *reply) {
    const actor_env_t *env = self->env;
    const actor_counters_t *counters = self->counters;
    switch (m->type) {
    case MSG_PING: {
        msg_pong_t p;
        msg_pong_init(&p);
        p.seq = m->u.ping.seq;
        msg_set_str(p.name, sizeof p.name, env->name);
        if (reply)
            actor_send(reply, MSG_PONG, &p);
        return true;
    }
    case MSG_STATS_QUERY: {
        if (self->stats_hook)
            self->stats_hook(self->self);
        actor_loop_refresh_counters(self);
        msg_stats_answer_t a;
        msg_stats_answer_init(&a);
        msg_set_str(a.name, sizeof a.name, env->name);
        int n = actor_counters_count(counters);
        a.counters = n ? malloc((size_t)n * sizeof *a.counters) : NULL;
        if (a.counters) {
            for (int i = 0; i < n; i++) {
                snprintf(a.counters[i].name, sizeof a.counters[i].name, "%s",
                         actor_counters_name_at(counters, i));
                a.counters[i].value = actor_counters_value_at(counters, i);
            }
            a.n_counters = n;
        }
        if (reply)
            actor_send(reply, MSG_STATS_ANSWER, &a);
        free(a.counters);
        return true;
    }
    case MSG_STOP:
        self->stop = true;
        return true;
    default:
        return false;
    }
}

static void s_heartbeat(actor_loop_t *self, uint64_t now);

/* Dispatch decoded message m of inbox s to its handler (or answer it here). */
static void s_dispatch(actor_loop_t *self, s_sock_t *s, msg_any_t *m, zmq_msg_t *raw) {
    int h = -1;
    for (int i = 0; i < self->n_on && h < 0; i++)
        if (self->on[i].type == m->type)
            h = i;
    if (h >= 0 && self->on[h].fn)
        self->on[h].fn(self->self, m, s->raw ? raw : NULL);
    else if (h >= 0)
        s_call_typed(self->on[h].typed, self->on[h].raw, self->self, m, s->raw ? raw : NULL);
    else if (!s_ctl(self, m, s->reply))
        actor_counters_add(self->counters, s->unexpected, 1);
    msg_any_clear(m);
}

/* Receive, decode and dispatch one message of inbox s.  false when none was waiting. */
static bool s_inbox_one(actor_loop_t *self, s_sock_t *s) {
    msg_any_t m;
    msg_err_t e;
    zmq_msg_t raw;
    int rc = s->raw ? actor_recv_raw(s->sock, &m, &e, &raw) : actor_recv(s->sock, &m, &e);
    if (rc == -EAGAIN)
        return false;
    if (rc < 0) {
        actor_counters_add(self->counters, s->malformed, 1);
        if (rc == -EBADMSG)
            actor_counters_add(self->counters, s->checksum, 1);
    } else {
        s_dispatch(self, s, &m, &raw);
    }
    if (s->raw)
        zmq_msg_close(&raw);
    return true;
}

int actor_loop_defer(actor_loop_t *self, zsock_t *inbox, msg_any_t *m, zmq_msg_t *raw) {
    int k = -1;
    for (int i = 0; i < self->n_socks && k < 0; i++)
        if (self->socks[i].sock == inbox && !self->socks[i].fn && !self->socks[i].monitor)
            k = i;
    s_deferred_t *d = k >= 0 ? calloc(1, sizeof *d) : NULL;
    if (!d) {
        msg_any_clear(m);
        if (raw) {
            zmq_msg_close(raw);
            zmq_msg_init(raw);
        }
        if (k >= 0)
            actor_counters_add(self->counters, self->socks[k].malformed, 1);
        return k >= 0 ? -ENOMEM : -EINVAL;
    }
    d->m = *m;
    m->type = MSG_NONE;
    zmq_msg_init(&d->raw);
    if (raw) {
        zmq_msg_move(&d->raw, raw);
        zmq_msg_close(raw);
        zmq_msg_init(raw);
    }
    d->sock = k;
    base_fifo_push(&self->deferred, &d->link);
    return 0;
}

/* Dispatch every deferred message, oldest first.  true when there were some. */
static bool s_run_deferred(actor_loop_t *self) {
    bool any = !base_fifo_empty(&self->deferred);
    while (!self->stop && !base_fifo_empty(&self->deferred)) {
        s_deferred_t *d = BASE_FIFO_ENTRY(base_fifo_pop(&self->deferred), s_deferred_t, link);
        s_dispatch(self, &self->socks[d->sock], &d->m, &d->raw);
        zmq_msg_close(&d->raw);
        free(d);
    }
    return any;
}

int actor_loop_pulse(actor_loop_t *self) {
    s_heartbeat(self, base_now_us());
    return actor_rt_faults ? actor_faults_flush(actor_rt_faults) : -1;
}

/* Drain s: at most budget messages, fewer when the loop stops.  true when it
 * stopped at the budget (messages may be left). */
static bool s_drain(actor_loop_t *self, s_sock_t *s) {
    for (int n = 0; n < self->budget; n++) {
        if (self->stop)
            return false;
        if (s->monitor) {
            if (!s_monitor_one(self, s))
                return false;
        } else if (s->fn) {
            if (!(zsock_events(s->sock) & ZMQ_POLLIN))
                return false;
            s->fn(s->arg ? s->arg : self->self, s->sock);
        } else if (!s_inbox_one(self, s)) {
            return false;
        }
    }
    return true;
}

/* Process mode: tell the supervisor this loop still turns, every
 * ACTOR_HEARTBEAT_MS (never blocking: a full queue drops the beat). */
static void s_heartbeat(actor_loop_t *self, uint64_t now) {
    if (!self->beat || now < self->beat_next_us)
        return;
    msg_heartbeat_t h;
    msg_heartbeat_init(&h);
    msg_set_str(h.name, sizeof h.name, self->env->name);
    h.pid = getpid();
    actor_send(self->beat, MSG_HEARTBEAT, &h);
    self->beat_next_us = now + ACTOR_HEARTBEAT_MS * 1000;
}

int actor_loop_run(actor_loop_t *self, int wait_ms) {
    zmq_pollitem_t items[1 + S_MAX_SOCKS];
    items[0] = (zmq_pollitem_t){zsock_resolve(self->env->pipe), 0, ZMQ_POLLIN, 0};
    for (int i = 0; i < self->n_socks; i++)
        items[1 + i] = self->socks[i].fd_fn
                           ? (zmq_pollitem_t){NULL, self->socks[i].fd, ZMQ_POLLIN, 0}
                           : (zmq_pollitem_t){zsock_resolve(self->socks[i].sock), 0, ZMQ_POLLIN, 0};
    int timeout = wait_ms > 0 ? wait_ms : 100;
    while (!self->stop && !actor_rt_crashed) {
        if (actor_rt_faults) { /* send the held frames that are due; wake for the next one */
            int held = actor_faults_flush(actor_rt_faults);
            if (held >= 0 && held < timeout)
                timeout = held;
        }
        uint64_t now = base_now_us();
        s_heartbeat(self, now);
        if (self->beat) {
            uint64_t due = self->beat_next_us;
            int ms = due > now ? (int)((due - now + 999) / 1000) : 0;
            if (ms < timeout)
                timeout = ms;
        }
        for (int i = 0; i < self->n_timers; i++) {
            uint64_t due = self->timers[i].next_us;
            int ms = due > now ? (int)((due - now + 999) / 1000) : 0;
            if (ms < timeout)
                timeout = ms;
        }
        if (!base_fifo_empty(&self->deferred))
            timeout = 0;
        if (zmq_poll(items, 1 + self->n_socks, timeout) < 0 && zmq_errno() != EINTR)
            break; /* the context is terminating */
        if (items[0].revents & ZMQ_POLLIN)
            break; /* $TERM */
        if (actor_rt_faults)
            actor_faults_stall(actor_rt_faults); /* a hang, when the spec says so */
        bool more = s_run_deferred(self);
        for (int i = 0; i < self->n_socks && !self->stop; i++) {
            if (self->socks[i].fd_fn) {
                if (items[1 + i].revents & ZMQ_POLLIN)
                    self->socks[i].fd_fn(self->self, self->socks[i].fd);
                continue;
            }
            more |= s_drain(self, &self->socks[i]);
        }
        if (self->stop)
            break;
        now = base_now_us();
        for (int i = 0; i < self->n_timers; i++) {
            s_timer_t *t = &self->timers[i];
            if (now >= t->next_us) {
                t->fn(self->self);
                t->next_us = now + t->every_us;
            }
        }
        timeout = self->idle ? self->idle(self->self) : -1;
        if (timeout < 0)
            timeout = wait_ms > 0 ? wait_ms : 100;
        if (more)
            timeout = 0;
    }
    return 0;
}

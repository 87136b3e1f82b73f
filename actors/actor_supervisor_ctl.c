/* actor_supervisor_ctl.c - the supervisor's control endpoint (`strata ctl`, a ROUTER
 * socket speaking ctl / ctl_reply): status, drain, and planned restarts -- one actor, or
 * every actor in turn, each drained first (a worker), stopped, started again and waited
 * for before the next.  Owns the planned restart under way (actor_sup_op_t). */
#include "actor_supervisor_int.h"

#include "base_log.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAG "supervisor"
#define S_STOP_US 5000000ull    /* SIGTERM, then SIGKILL this much later */
#define S_START_US 300000000ull /* a restarted actor not ready this long fails the command */
#define S_ALIVE_US 1000000ull   /* a keep-alive reply at least this often */
#define S_MAX_CMD 65536         /* ZMQ_MAXMSGSIZE of the endpoint: a command is small */

static bool s_is_worker(const char *name) {
    return !strncmp(name, "worker", 6);
}

/* Encode r and send it to the client ident (behind an empty delimiter for a REQ
 * client, which takes the final reply only).  A reply that cannot go (the client left,
 * its queue is full) is dropped: a ROUTER never blocks. */
static void s_send(actor_supervisor_t *self, const uint8_t *ident, size_t ident_len, bool req,
                   const msg_ctl_reply_t *r) {
    if (req && !r->final)
        return;
    void *buf;
    size_t len;
    msg_err_t e;
    if (msg_ctl_reply_encode(r, &buf, &len, &e)) {
        LOG_E(TAG, "ctl: cannot encode a reply: %s", e.msg);
        return;
    }
    zmsg_t *m = zmsg_new();
    zmsg_addmem(m, ident, ident_len);
    if (req)
        zmsg_addmem(m, "", 0);
    zmsg_addmem(m, buf, len);
    free(buf);
    if (zmsg_send(&m, self->cmd))
        zmsg_destroy(&m);
}

/* A reply to the client of the restart under way (logged too): a phase of actor that
 * took ms, or (final) the outcome. */
static void s_say(actor_supervisor_t *self, bool ok, bool final, const char *actor,
                  const char *phase, uint64_t us, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static void s_say(actor_supervisor_t *self, bool ok, bool final, const char *actor,
                  const char *phase, uint64_t us, const char *fmt, ...) {
    msg_ctl_reply_t r;
    msg_ctl_reply_init(&r);
    r.ok = ok;
    r.final = final;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r.message, sizeof r.message, fmt, ap);
    va_end(ap);
    msg_set_str(r.actor, sizeof r.actor, actor ? actor : "");
    msg_set_str(r.phase, sizeof r.phase, phase ? phase : "");
    r.ms = (int64_t)(us / 1000);
    if (r.message[0]) {
        if (ok)
            LOG_I(TAG, "ctl: %s", r.message);
        else
            LOG_W(TAG, "ctl: %s", r.message);
    }
    actor_sup_op_t *op = &self->op;
    s_send(self, op->ident, op->ident_len, op->req, &r);
    op->said_us = base_now_us();
}

/* A one-off final answer to a client that is not the restart's. */
static void s_answer(actor_supervisor_t *self, const uint8_t *ident, size_t ident_len, bool req,
                     bool ok, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void s_answer(actor_supervisor_t *self, const uint8_t *ident, size_t ident_len, bool req,
                     bool ok, const char *fmt, ...) {
    msg_ctl_reply_t r;
    msg_ctl_reply_init(&r);
    r.ok = ok;
    r.final = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r.message, sizeof r.message, fmt, ap);
    va_end(ap);
    s_send(self, ident, ident_len, req, &r);
}

static double s_s(uint64_t us) {
    return (double)us / 1e6;
}

/* ---- status */

static int s_state(const actor_supervisor_t *self, int i) {
    const actor_sup_child_t *c = &self->kids[i];
    const actor_sup_op_t *op = &self->op;
    bool current = op->phase != ACTOR_SUP_IDLE && op->order[op->at] == i;
    if (c->pid > 0) {
        if (current && op->phase == ACTOR_SUP_DRAIN)
            return MSG_CTL_DRAINING;
        if (current && op->phase == ACTOR_SUP_STOP && c->pid == op->old_pid)
            return MSG_CTL_STOPPING;
        return c->ready ? MSG_CTL_READY : MSG_CTL_STARTING;
    }
    return c->restart_at_us ? MSG_CTL_RESTARTING : MSG_CTL_STOPPED;
}

static void s_status(actor_supervisor_t *self, const uint8_t *ident, size_t ident_len, bool req) {
    msg_ctl_reply_t r;
    msg_ctl_reply_init(&r);
    r.actors = calloc((size_t)self->n, sizeof *r.actors);
    if (!r.actors) {
        s_answer(self, ident, ident_len, req, false, "out of memory");
        return;
    }
    uint64_t now = base_now_us();
    int ready = 0;
    for (int i = 0; i < self->n; i++) {
        const actor_sup_child_t *c = &self->kids[i];
        msg_ctl_actor_t *a = &r.actors[i];
        msg_set_str(a->name, sizeof a->name, c->name);
        a->state = s_state(self, i);
        a->pid = c->pid > 0 ? c->pid : 0;
        a->restarts = c->restarts;
        a->up_ms = c->pid > 0 ? (int64_t)((now - c->started_us) / 1000) : 0;
        ready += a->state == MSG_CTL_READY;
    }
    r.n_actors = self->n;
    r.ok = r.final = true;
    snprintf(r.message, sizeof r.message, "%d of %d actors ready%s%s", ready, self->n,
             self->draining || self->stop_ms >= 0 ? ", draining" : "",
             self->op.phase != ACTOR_SUP_IDLE ? ", a restart under way" : "");
    s_send(self, ident, ident_len, req, &r);
    free(r.actors);
}

/* ---- planned restarts */

/* SIGTERM to the current actor (SIGCONT: a stopped one acts on it only then); the reap
 * restarts it at once (planned), SIGKILL if it has not exited in S_STOP_US. */
static void s_stop(actor_supervisor_t *self, actor_sup_child_t *c) {
    actor_sup_op_t *op = &self->op;
    op->phase = ACTOR_SUP_STOP;
    op->phase_us = base_now_us();
    op->kill_at_us = op->phase_us + S_STOP_US;
    c->planned = true;
    kill(c->pid, SIGTERM);
    kill(c->pid, SIGCONT);
}

/* Begin the restart of op->order[op->at]. */
static void s_begin(actor_supervisor_t *self) {
    actor_sup_op_t *op = &self->op;
    actor_sup_child_t *c = &self->kids[op->order[op->at]];
    op->actor_us = op->phase_us = base_now_us();
    op->old_pid = c->pid;
    op->idle = false;
    if (c->pid <= 0) { /* down already (a crash, its backoff): wait for its restart */
        op->phase = ACTOR_SUP_START;
        return;
    }
    if (s_is_worker(c->name) && op->grace_ms > 0) {
        msg_worker_drain_t d = {atoi(c->name + 6), true};
        op->phase = ACTOR_SUP_DRAIN;
        if (actor_send(self->to_router, MSG_WORKER_DRAIN, &d))
            LOG_W(TAG, "ctl: cannot tell the router to drain %s: it drains for its grace", c->name);
        return;
    }
    s_stop(self, c);
}

static void s_end(actor_supervisor_t *self) {
    self->op.phase = ACTOR_SUP_IDLE;
}

/* One step of the restart under way. */
static void s_advance(actor_supervisor_t *self) {
    actor_sup_op_t *op = &self->op;
    if (op->phase == ACTOR_SUP_IDLE)
        return;
    actor_sup_child_t *c = &self->kids[op->order[op->at]];
    uint64_t now = base_now_us();
    if (self->draining || self->stop_ms >= 0) {
        s_say(self, false, true, c->name, "", 0, "restart stopped at %s: the server drains",
              c->name);
        s_end(self);
        return;
    }
    switch (op->phase) {
    case ACTOR_SUP_DRAIN:
        if (c->pid != op->old_pid) { /* it died while draining: the fault path has it */
            s_say(self, true, false, c->name, "drain", now - op->phase_us,
                  "%s: exited during its drain after %.2f s", c->name, s_s(now - op->phase_us));
            op->phase = ACTOR_SUP_START;
            op->phase_us = now;
        } else if (op->idle || now - op->phase_us >= (uint64_t)op->grace_ms * 1000) {
            if (op->idle)
                s_say(self, true, false, c->name, "drain", now - op->phase_us,
                      "%s: drained in %.2f s (its requests finished, new ones went to the "
                      "other workers)",
                      c->name, s_s(now - op->phase_us));
            else
                s_say(self, true, false, c->name, "drain", now - op->phase_us,
                      "%s: drain grace of %.1f s over: the requests it still holds resume on "
                      "the other workers",
                      c->name, (double)op->grace_ms / 1000);
            s_stop(self, c);
        }
        break;
    case ACTOR_SUP_STOP:
        if (c->pid != op->old_pid) {
            s_say(self, true, false, c->name, "stop", now - op->phase_us,
                  "%s: stopped in %.2f s (%s)", c->name, s_s(now - op->phase_us),
                  op->kill_at_us ? "SIGTERM" : "SIGKILL after 5 s");
            op->phase = ACTOR_SUP_START;
            op->phase_us = now;
        } else if (op->kill_at_us && now >= op->kill_at_us) {
            LOG_W(TAG, "ctl: %s did not stop in 5 s: killed", c->name);
            kill(c->pid, SIGKILL);
            op->kill_at_us = 0;
        }
        break;
    case ACTOR_SUP_START:
        if (c->pid > 0 && c->pid != op->old_pid && c->ready) {
            if (s_is_worker(c->name)) { /* the router's drain ended at its worker_down */
                msg_worker_drain_t d = {atoi(c->name + 6), false};
                actor_send(self->to_router, MSG_WORKER_DRAIN, &d);
            }
            s_say(self, true, false, c->name, "start", now - op->phase_us,
                  "%s: started and ready in %.2f s (pid %d, was %d); restarted in %.2f s", c->name,
                  s_s(now - op->phase_us), (int)c->pid, (int)op->old_pid, s_s(now - op->actor_us));
            if (++op->at < op->n) {
                s_begin(self);
            } else {
                s_say(self, true, true, "", "", now - op->op_us, "restarted %d actor%s in %.2f s",
                      op->n, op->n == 1 ? "" : "s", s_s(now - op->op_us));
                s_end(self);
            }
        } else if (now - op->phase_us > S_START_US) {
            s_say(self, false, true, c->name, "start", now - op->phase_us,
                  "%s: not ready %.0f s after its restart; the restart stops here", c->name,
                  s_s(now - op->phase_us));
            s_end(self);
        }
        break;
    case ACTOR_SUP_IDLE:
        break;
    }
    if (op->phase != ACTOR_SUP_IDLE && now - op->said_us >= S_ALIVE_US)
        s_say(self, true, false, "", "", 0, "%s", ""); /* keep-alive */
}

/* The actors of this supervisor, as "a, b, c", into buf. */
static const char *s_names(const actor_supervisor_t *self, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < self->n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", i ? ", " : "", self->kids[i].name);
    return buf;
}

/* restart NAME, or every actor in turn: the workers first (each drained while the
 * others take its load), then the rest in the start order, which ends with the router,
 * the tokenizer and the frontend (whose restart clients see: last, once everything
 * behind it has been restarted) and a gateway after it. */
static void s_restart(actor_supervisor_t *self, const msg_ctl_t *m, const uint8_t *ident,
                      size_t ident_len, bool req) {
    actor_sup_op_t *op = &self->op;
    char names[1024];
    if (self->draining || self->stop_ms >= 0) {
        s_answer(self, ident, ident_len, req, false, "the server is draining: no restart");
        return;
    }
    if (op->phase != ACTOR_SUP_IDLE) {
        s_answer(self, ident, ident_len, req, false, "busy: a restart is under way (%s, %d of %d)",
                 self->kids[op->order[op->at]].name, op->at + 1, op->n);
        return;
    }
    int n = 0;
    if (m->all) {
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < self->n; i++)
                if (s_is_worker(self->kids[i].name) == (pass == 0))
                    op->order[n++] = i;
    } else {
        for (int i = 0; i < self->n && !n; i++)
            if (!strcmp(self->kids[i].name, m->name))
                op->order[n++] = i;
        if (!n) {
            s_answer(self, ident, ident_len, req, false, "no actor '%s' here (its actors: %s)",
                     m->name, s_names(self, names, sizeof names));
            return;
        }
    }
    memcpy(op->ident, ident, ident_len);
    op->ident_len = ident_len;
    op->req = req;
    op->n = n;
    op->at = 0;
    op->grace_ms = m->grace_ms >= 0 ? m->grace_ms : self->drain_ms;
    op->op_us = base_now_us();
    s_say(self, true, false, "", "", 0, "restarting %s (drain grace %.1f s)",
          m->all ? "every actor, one at a time" : m->name, (double)op->grace_ms / 1000);
    s_begin(self);
}

/* Read one command from the endpoint and act on it. */
static void s_command(actor_supervisor_t *self) {
    zmsg_t *m = zmsg_recv(self->cmd);
    if (!m)
        return;
    zframe_t *id = zmsg_first(m), *body = zmsg_next(m);
    size_t n = zmsg_size(m);
    bool req = n == 3 && body && zframe_size(body) == 0; /* a REQ client's envelope */
    if (req)
        body = zmsg_next(m);
    if (!id || zframe_size(id) > ACTOR_SUP_IDENT) {
        zmsg_destroy(&m);
        return;
    }
    const uint8_t *ident = zframe_data(id);
    size_t ident_len = zframe_size(id);
    msg_ctl_t c;
    msg_err_t e;
    if (!body || n != (req ? 3u : 2u)) {
        s_answer(self, ident, ident_len, req, false, "bad command: one frame expected, got %zu",
                 n - 1);
    } else if (msg_ctl_decode(zframe_data(body), zframe_size(body), &c, &e)) {
        s_answer(self, ident, ident_len, req, false, "bad command: %s", e.msg);
    } else if (c.cmd == MSG_CTL_STATUS) {
        s_status(self, ident, ident_len, req);
    } else if (c.cmd == MSG_CTL_DRAIN) {
        if (self->stop_ms < 0)
            self->stop_ms = c.grace_ms >= 0 ? c.grace_ms : self->drain_ms;
        s_answer(self, ident, ident_len, req, true,
                 "draining: new requests refused, those in flight get up to %.1f s, then the "
                 "server stops",
                 (double)self->stop_ms / 1000);
        s_advance(self); /* a restart under way ends */
    } else {
        s_restart(self, &c, ident, ident_len, req);
    }
    zmsg_destroy(&m);
}

void actor_sup_ctl_poll(actor_supervisor_t *self) {
    for (int k = 0; self->cmd && k < 16 && (zsock_events(self->cmd) & ZMQ_POLLIN); k++)
        s_command(self);
    s_advance(self);
}

void actor_sup_ctl_idle(actor_supervisor_t *self, int w) {
    actor_sup_op_t *op = &self->op;
    if (op->phase != ACTOR_SUP_DRAIN)
        return;
    const char *name = self->kids[op->order[op->at]].name;
    if (s_is_worker(name) && atoi(name + 6) == w)
        op->idle = true;
}

int actor_supervisor_ctl_check(const actor_topology_t *topo, const char *endpoint, char *err,
                               size_t errlen) {
    bool ipc = !strncmp(endpoint, "ipc://", 6), tcp = !strncmp(endpoint, "tcp://", 6);
    if (!ipc && !tcp) {
        snprintf(err, errlen, "--ctl %s: ipc://PATH or tcp://HOST:PORT expected", endpoint);
        return -EINVAL;
    }
    if (tcp && actor_curve_keys(topo)) {
        snprintf(err, errlen,
                 "--ctl %s: the topology has CURVE keys, and a tcp:// control endpoint would "
                 "let anyone who reaches it restart or stop the server: use ipc://PATH (a "
                 "socket file only its owner may open)",
                 endpoint);
        return -EINVAL;
    }
    return 0;
}

int actor_supervisor_ctl(actor_supervisor_t *self, const char *endpoint, int64_t drain_ms,
                         char *err, size_t errlen) {
    int rc = actor_supervisor_ctl_check(self->topo, endpoint, err, errlen);
    if (rc)
        return rc;
    bool ipc = !strncmp(endpoint, "ipc://", 6);
    zsock_t *s = zsock_new(ZMQ_ROUTER);
    if (!s) {
        snprintf(err, errlen, "cannot make the control socket");
        return -ENOMEM;
    }
    zsock_set_maxmsgsize(s, S_MAX_CMD);
    zsock_set_linger(s, 0);
    zsock_set_sndhwm(s, ACTOR_HWM_CTL);
    mode_t old = umask(0177); /* the socket file is born 0600 */
    rc = zsock_bind(s, "%s", endpoint);
    umask(old);
    if (rc < 0) {
        snprintf(err, errlen, "--ctl %s: cannot bind: %s", endpoint, zmq_strerror(zmq_errno()));
        zsock_destroy(&s);
        return -EADDRINUSE;
    }
    if (ipc && chmod(endpoint + 6, 0600))
        LOG_W(TAG, "ctl: cannot chmod 0600 %s: %s", endpoint + 6, strerror(errno));
    zsock_destroy(&self->cmd);
    self->cmd = s;
    snprintf(self->cmd_file, sizeof self->cmd_file, "%s", ipc ? endpoint + 6 : "");
    self->drain_ms = drain_ms;
    return 0;
}

int64_t actor_supervisor_stop_asked(const actor_supervisor_t *self) {
    return self->stop_ms;
}

/* actor_supervisor.c - fork/exec, ready reports and heartbeats over a PULL
 * socket, waitpid reaping, SIGKILL of a hung actor, restart with exponential
 * backoff (at once after a planned stop), worker_down to the router and the
 * frontend.  The control endpoint and planned restarts: actor_supervisor_ctl.c. */
#include "actor_supervisor_int.h"

#include "actor_curve.h"
#include "actor_registry.h"
#include "actor_runtime.h"
#include "base_log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define TAG "supervisor"
#define BACKOFF0_US 200000
#define BACKOFF_MAX_US 10000000
#define STABLE_US 30000000

static pid_t s_spawn(actor_supervisor_t *self, actor_sup_child_t *c) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* never outlive the supervisor, even stopped (SIGTERM would wait for a
         * SIGCONT); it fires when this (the main) thread of the supervisor ends */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) /* it died before prctl */
            _exit(127);
        char *argv[] = {"strata", "actor", c->name, "--topology", self->path, NULL};
        execv(self->exe, argv);
        _exit(127);
    }
    if (pid < 0) {
        LOG_E(TAG, "cannot fork for %s: %s", c->name, strerror(errno));
        return -1;
    }
    c->pid = pid;
    c->ready = false;
    c->hung = false;
    c->started_us = base_now_us();
    c->restart_at_us = 0;
    LOG_I(TAG, "started %s (pid %d)", c->name, (int)pid);
    return pid;
}

actor_supervisor_t *actor_supervisor_new(const actor_topology_t *topo, const char *path,
                                         const char *exe, const char *host, char *err,
                                         size_t errlen) {
    const char *sup = actor_topology_endpoint(topo, "supervisor");
    if (!sup) {
        snprintf(err, errlen, "the topology needs a 'supervisor ENDPOINT' line for process mode");
        return NULL;
    }
    actor_supervisor_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    self->topo = topo;
    self->stop_ms = -1;
    snprintf(self->path, sizeof self->path, "%s", path);
    snprintf(self->exe, sizeof self->exe, "%s", exe);
    self->kids = calloc((size_t)topo->n, sizeof *self->kids);
    self->hang_timeout_ms = (int)actor_opt_parse_int(
        actor_topology_opt(topo, "supervisor", "hang_timeout_ms", ACTOR_TOPO_HANG_TIMEOUT_MS));
    /* every actor's keys are checked here, so a missing one stops the start at
     * once; on one host of several only the supervisor's own (the others are
     * on their hosts: a child that lacks its pair fails before it is ready) */
    self->curve = actor_curve_new(topo, host ? "supervisor" : NULL, err, errlen);
    if (!self->curve) {
        actor_supervisor_destroy(&self);
        return NULL;
    }
    self->ctl = actor_sock_inbound(topo, "supervisor", ACTOR_MAX_FRAME, ACTOR_HWM_CTL);
    self->to_router = actor_sock_outbound(topo, "supervisor", "router", ACTOR_HWM_CTL);
    self->to_front = actor_sock_outbound(topo, "supervisor", "frontend", ACTOR_HWM_CTL);
    if (!self->kids || !self->ctl || !self->to_router || !self->to_front) {
        snprintf(err, errlen, "cannot set up the supervisor (bind %s)", sup);
        actor_supervisor_destroy(&self);
        return NULL;
    }
    /* the one start order of the registry (the frontend after everything behind it) */
    const char *order[ACTOR_TOPO_MAX_ACTORS];
    int n = actor_info_start_order(topo, host, order, ACTOR_TOPO_MAX_ACTORS, err, errlen);
    if (n < 0) {
        actor_supervisor_destroy(&self);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        actor_sup_child_t *c = &self->kids[self->n++];
        snprintf(c->name, sizeof c->name, "%s", order[i]);
        c->backoff_us = BACKOFF0_US;
    }
    return self;
}

void actor_supervisor_destroy(actor_supervisor_t **self_p) {
    if (!self_p || !*self_p)
        return;
    actor_supervisor_t *self = *self_p;
    /* stop in reverse start order: the frontend first */
    for (int i = self->n - 1; i >= 0; i--)
        if (self->kids[i].pid > 0) {
            kill(self->kids[i].pid, SIGTERM);
            kill(self->kids[i].pid, SIGCONT); /* a stopped one acts on SIGTERM only then */
        }
    uint64_t deadline = base_now_us() + 5000000;
    for (;;) {
        int alive = 0;
        for (int i = 0; i < self->n; i++) {
            if (self->kids[i].pid <= 0)
                continue;
            int st;
            pid_t p = waitpid(self->kids[i].pid, &st, WNOHANG);
            if (p == self->kids[i].pid || (p < 0 && errno == ECHILD))
                self->kids[i].pid = 0;
            else
                alive++;
        }
        if (!alive)
            break;
        if (base_now_us() > deadline) {
            for (int i = 0; i < self->n; i++)
                if (self->kids[i].pid > 0) {
                    LOG_W(TAG, "%s did not stop: killing it", self->kids[i].name);
                    kill(self->kids[i].pid, SIGKILL);
                    waitpid(self->kids[i].pid, NULL, 0);
                    self->kids[i].pid = 0;
                }
            break;
        }
        zclock_sleep(20);
    }
    zsock_destroy(&self->ctl);
    zsock_destroy(&self->cmd);
    if (self->cmd_file[0]) /* libzmq leaves an ipc:// file behind */
        unlink(self->cmd_file);
    zsock_destroy(&self->to_router);
    zsock_destroy(&self->to_front);
    actor_curve_destroy(&self->curve);
    free(self->kids);
    free(self);
    *self_p = NULL;
}

static actor_sup_child_t *s_by_name(actor_supervisor_t *self, const char *name) {
    for (int i = 0; i < self->n; i++)
        if (!strcmp(self->kids[i].name, name))
            return &self->kids[i];
    return NULL;
}

/* Read the ready reports and heartbeats waiting on the control socket (from
 * the current process of a child; a late one of a dead process is ignored). */
static void s_read_ctl(actor_supervisor_t *self) {
    msg_any_t m;
    msg_err_t e;
    int rc;
    while ((rc = actor_recv(self->ctl, &m, &e)) != -EAGAIN) {
        if (rc == 0 && m.type == MSG_WORKER_IDLE)
            actor_sup_ctl_idle(self, m.u.worker_idle.worker);
        /* msg_heartbeat_t is msg_ready_t: the same name and pid */
        const msg_ready_t *r = m.type == MSG_READY ? &m.u.ready : &m.u.heartbeat;
        actor_sup_child_t *c = rc == 0 && (m.type == MSG_READY || m.type == MSG_HEARTBEAT)
                                   ? s_by_name(self, r->name)
                                   : NULL;
        if (c && c->pid > 0 && c->pid == (pid_t)r->pid) {
            c->beat_us = base_now_us();
            if (m.type == MSG_READY && !c->ready) {
                c->ready = true;
                LOG_I(TAG, "%s is ready (pid %d)", c->name, (int)c->pid);
            }
        }
        msg_any_clear(&m);
    }
}

/* SIGKILL (which also ends a stopped process) every ready child whose
 * heartbeats stopped for hang_timeout_ms; s_reap then restarts it.  Start-up
 * (before ready) never counts. */
static void s_kill_hung(actor_supervisor_t *self) {
    if (self->hang_timeout_ms <= 0)
        return;
    uint64_t now = base_now_us();
    for (int i = 0; i < self->n; i++) {
        actor_sup_child_t *c = &self->kids[i];
        if (c->pid <= 0 || !c->ready || c->hung ||
            now - c->beat_us <= (uint64_t)self->hang_timeout_ms * 1000 * BASE_TIMEOUT_SCALE)
            continue;
        LOG_W(TAG, "%s hung (no heartbeat for %.1f s): killed", c->name,
              (double)(now - c->beat_us) / 1e6);
        kill(c->pid, SIGKILL);
        c->hung = true;
        self->hangs++;
    }
}

/* Reap children that exited; schedule their restart. */
static int s_reap(actor_supervisor_t *self) {
    int died = 0;
    for (int i = 0; i < self->n; i++) {
        actor_sup_child_t *c = &self->kids[i];
        if (c->pid <= 0)
            continue;
        int st;
        if (waitpid(c->pid, &st, WNOHANG) != c->pid)
            continue;
        died++;
        if (WIFSIGNALED(st))
            LOG_W(TAG, "%s (pid %d) was killed by signal %d", c->name, (int)c->pid, WTERMSIG(st));
        else
            LOG_W(TAG, "%s (pid %d) exited with status %d", c->name, (int)c->pid, WEXITSTATUS(st));
        c->pid = 0;
        c->ready = false;
        if (self->draining && !strcmp(c->name, "frontend"))
            continue; /* it ended its drain */
        uint64_t now = base_now_us();
        if (c->planned) { /* a planned restart: at once, the backoff as it was */
            c->planned = false;
            c->restart_at_us = now;
        } else {
            if (now - c->started_us > STABLE_US)
                c->backoff_us = BACKOFF0_US;
            c->restart_at_us = now + c->backoff_us;
            c->backoff_us = c->backoff_us * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US : c->backoff_us * 2;
        }
        if (!strncmp(c->name, "worker", 6)) {
            msg_worker_down_t d = {atoi(c->name + 6)};
            if (actor_send(self->to_router, MSG_WORKER_DOWN, &d))
                LOG_E(TAG, "cannot tell the router that %s is down", c->name);
            actor_send(self->to_front, MSG_WORKER_DOWN, &d);
        } else if (!strncmp(c->name, "expert", 6)) { /* the router re-plans without it */
            msg_expert_down_t d = {atoi(c->name + 6)};
            if (actor_send(self->to_router, MSG_EXPERT_DOWN, &d))
                LOG_E(TAG, "cannot tell the router that %s is down", c->name);
        }
    }
    return died;
}

int actor_supervisor_start(actor_supervisor_t *self, int timeout_ms, char *err, size_t errlen) {
    for (int i = 0; i < self->n; i++)
        if (s_spawn(self, &self->kids[i]) < 0) {
            snprintf(err, errlen, "cannot start %s", self->kids[i].name);
            return -ECHILD;
        }
    uint64_t deadline = base_now_us() + (uint64_t)timeout_ms * 1000;
    zpoller_t *poller = zpoller_new(self->ctl, NULL);
    zpoller_set_nonstop(poller, true);
    int rc = 0;
    for (;;) {
        s_read_ctl(self);
        int ready = 0;
        for (int i = 0; i < self->n; i++)
            ready += self->kids[i].ready;
        if (ready == self->n)
            break;
        for (int i = 0; i < self->n; i++) {
            int st;
            if (self->kids[i].pid > 0 &&
                waitpid(self->kids[i].pid, &st, WNOHANG) == self->kids[i].pid) {
                snprintf(err, errlen, "%s exited before it was ready", self->kids[i].name);
                self->kids[i].pid = 0;
                rc = -ECHILD;
                goto out;
            }
        }
        if (zsys_interrupted) {
            snprintf(err, errlen, "interrupted");
            rc = -EINTR;
            goto out;
        }
        if (base_now_us() > deadline) {
            snprintf(err, errlen, "not every actor was ready within %d ms", timeout_ms);
            rc = -ETIMEDOUT;
            goto out;
        }
        zpoller_wait(poller, 100);
    }
out:
    zpoller_destroy(&poller);
    return rc;
}

int actor_supervisor_poll(actor_supervisor_t *self, int timeout_ms) {
    zpoller_t *poller = zpoller_new(self->ctl, self->cmd, NULL);
    zpoller_set_nonstop(poller, true);
    zpoller_wait(poller, timeout_ms);
    zpoller_destroy(&poller);
    s_read_ctl(self);
    s_kill_hung(self);
    s_reap(self);
    uint64_t now = base_now_us();
    for (int i = 0; i < self->n; i++) {
        actor_sup_child_t *c = &self->kids[i];
        if (c->pid == 0 && c->restart_at_us && now >= c->restart_at_us) {
            LOG_W(TAG, "restarting %s", c->name);
            self->restarts++;
            c->restarts++;
            s_spawn(self, c);
        }
    }
    actor_sup_ctl_poll(self);
    return 0;
}

int actor_supervisor_drain(actor_supervisor_t *self, int grace_ms) {
    self->draining = true; /* ends a planned restart under way (actor_supervisor_ctl.c) */
    actor_sup_child_t *front = s_by_name(self, "frontend");
    if (!front || front->pid <= 0 || !self->to_front)
        return 0; /* no frontend on this host: nothing takes requests here */
    msg_drain_t d = {grace_ms};
    if (actor_send(self->to_front, MSG_DRAIN, &d))
        return -EIO;
    uint64_t deadline = base_now_us() + ((uint64_t)grace_ms + 5000) * 1000;
    while (base_now_us() < deadline) {
        actor_supervisor_poll(self, 100);
        if (front->pid == 0)
            return 0;
    }
    return -ETIMEDOUT;
}

int actor_supervisor_restarts(const actor_supervisor_t *self) {
    return self->restarts;
}

int actor_supervisor_hangs(const actor_supervisor_t *self) {
    return self->hangs;
}

int actor_supervisor_count(const actor_supervisor_t *self) {
    return self->n;
}

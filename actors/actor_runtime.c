/* actor_runtime.c - actors as zactor threads, the process-mode body, and typed options.
 * The socket helpers and the framing of internal messages are actor_frames.c, the loop every
 * actor runs actor_loop.c; actor_runtime_int.h is what the three share. */
#include "actor_runtime.h"
#include "actor_runtime_int.h"

#include "actor_curve.h"
#include "actor_faults.h"
#include "base_fifo.h"
#include "base_log.h"
#include "base_notify.h"

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

_Thread_local actor_faults_t *actor_rt_faults;
_Thread_local bool actor_rt_crashed;
bool actor_rt_process_mode;

struct actor_t {
    char name[ACTOR_TOPO_NAME]; /* the actor's name */
    zactor_t *zactor;           /* the thread and the parent's end of the pipe */
    bool exited;                /* its function returned */
    int rc;                     /* what it returned */
};

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

/* ---- options */

/* The value of o for env: set in the topology, else the table's default. */
static const char *s_value(const actor_env_t *env, const actor_opt_t *o) {
    const char *v = actor_topology_opt(env->topo, env->name, o->key, NULL);
    return v ? v : o->def;
}

/* s_value as actor_opts_load asks for it. */
static const char *s_opt_text(const actor_opt_t *o, const void *env) {
    return s_value(env, o);
}

const void *actor_env_cfg(const actor_env_t *env) {
    return env->cfg;
}

/* Whether e's line sets key. */
static bool s_opt_line(const actor_topo_entry_t *e, const char *key) {
    for (int i = 0; i < e->n_opts; i++)
        if (!strcmp(e->opts[i].key, key))
            return true;
    return false;
}

int actor_env_check(const actor_info_t *info, const actor_topology_t *topo, const char *name,
                    char *err, size_t errlen) {
    const actor_topo_entry_t *e = actor_topology_find(topo, name);
    if (!info || !e) {
        snprintf(err, errlen, "no actor called '%s' in the topology", name);
        return -EINVAL;
    }
    char why[256];
    for (int i = 0; i < e->n_opts; i++) {
        const actor_opt_t *o = actor_info_opt(info, e->opts[i].key);
        if (!o) {
            snprintf(err, errlen, "%s: %s=%s: unknown option", name, e->opts[i].key,
                     e->opts[i].value);
            return -EINVAL;
        }
        if (actor_opt_check(o, e->opts[i].value, why, sizeof why)) {
            snprintf(err, errlen, "%s: %s=%s: %s", name, o->key, e->opts[i].value, why);
            return -EINVAL;
        }
    }
    /* the environment's values of the options the line does not set (docs/OPERATIONS.md) */
    const actor_opt_t *tables[2] = {info->opts, actor_runtime_opts};
    for (int k = 0; k < 2; k++)
        for (const actor_opt_t *o = tables[k]; o && o->key; o++) {
            char var[160];
            const char *v =
                s_opt_line(e, o->key) || actor_topology_opt(topo, "defaults", o->key, NULL)
                    ? NULL
                    : actor_topology_env(name, o->key, var, sizeof var);
            if (v && actor_opt_check(o, v, why, sizeof why)) {
                snprintf(err, errlen, "%s: %s=%s (the environment's): %s", name, var, v, why);
                return -EINVAL;
            }
        }
    const actor_topo_entry_t *d = actor_topology_find(topo, "defaults");
    for (int i = 0; d && i < d->n_opts; i++) {
        const actor_opt_t *o = actor_info_opt(info, d->opts[i].key);
        if (o && actor_opt_check(o, d->opts[i].value, why, sizeof why)) {
            snprintf(err, errlen, "%s: %s=%s (from defaults): %s", name, o->key, d->opts[i].value,
                     why);
            return -EINVAL;
        }
    }
    return 0;
}

/* The zactor body: signal zactor_new at once, set up the actor's faults, run
 * the actor, report its end (a crash injected in thread mode: status 134, as
 * an abort). */
static void s_shim(zsock_t *pipe, void *args) {
    actor_env_t *env = args;
    env->pipe = pipe;
    zsock_signal(pipe, 0);
    const char *spec = s_value(env, actor_info_opt(env->info, "faults"));
    char err[256];
    if (spec && *spec) {
        actor_rt_faults =
            actor_faults_new(spec, env->name, err, sizeof err); /* checked: cannot fail */
        if (actor_rt_faults && actor_faults_active(actor_rt_faults))
            LOG_W(env->name, "fault injection on: %s", spec);
        else
            actor_faults_destroy(&actor_rt_faults);
    }
    int rc = env->info->fn(env);
    if (actor_rt_crashed)
        rc = 134;
    actor_faults_destroy(&actor_rt_faults);
    actor_rt_crashed = false;
    if (!env->answered && rc)
        zstr_sendf(pipe, "FAIL exited with %d before it was ready", rc);
    zstr_sendf(pipe, "EXIT %d", rc);
    free(env->cfg);
    free(env);
}

/* actor_new; beat: the actor's loop sends heartbeats to the topology's
 * supervisor (process mode). */
static actor_t *s_actor_new(const actor_info_t *info, const char *name,
                            const actor_topology_t *topo, int timeout_ms, bool beat, char *err,
                            size_t errlen) {
    if (!info || !actor_topology_endpoint(topo, name)) {
        snprintf(err, errlen, "no actor called '%s' in the topology", name);
        return NULL;
    }
    if (actor_env_check(info, topo, name, err, errlen))
        return NULL;
    actor_t *self = calloc(1, sizeof *self);
    actor_env_t *env = calloc(1, sizeof *env);
    void *cfg = calloc(1, info->cfg_size ? info->cfg_size : 1);
    if (!self || !env || !cfg) {
        free(self);
        free(env);
        free(cfg);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(self->name, sizeof self->name, "%s", name);
    snprintf(env->name, sizeof env->name, "%s", name);
    env->topo = topo;
    env->info = info;
    env->beat = beat;
    env->cfg = cfg;
    /* every option parsed once, checked above: the actor gets them filled */
    actor_opts_load(info->opts, s_opt_text, env, cfg);
    self->zactor = zactor_new(s_shim, env); /* env now belongs to the thread */
    if (!self->zactor) {
        snprintf(err, errlen, "cannot start the thread of '%s'", name);
        free(cfg);
        free(env);
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

actor_t *actor_new(const actor_info_t *info, const char *name, const actor_topology_t *topo,
                   int timeout_ms, char *err, size_t errlen) {
    return s_actor_new(info, name, topo, timeout_ms, false, err, errlen);
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

/* A SIGTERM or SIGINT waits for this process (strata actor blocks both in every
 * thread and takes them here, see cmd_actor.c). */
static bool s_stop_pending(void) {
    sigset_t p;
    return sigpending(&p) == 0 && (sigismember(&p, SIGTERM) == 1 || sigismember(&p, SIGINT) == 1);
}

int actor_process_run(const actor_info_t *info, const char *name, const actor_topology_t *topo) {
    char err[512];
    actor_rt_process_mode = true;
    /* started by a service manager itself (strata serve keeps $NOTIFY_SOCKET to itself);
     * read before the actor's threads exist, as it unsets the variable */
    base_notify_t *notify = base_notify_new();
    actor_curve_t *curve = actor_curve_new(topo, name, err, sizeof err); /* before any socket */
    const char *sup = actor_topology_endpoint(topo, "supervisor");
    actor_t *a = curve ? s_actor_new(info, name, topo, 300000, sup != NULL, err, sizeof err) : NULL;
    if (!a) {
        LOG_E(TAG, "%s: %s", name, err);
        actor_curve_destroy(&curve);
        base_notify_destroy(&notify);
        return 1;
    }
    zsock_t *ctl = NULL;
    if (sup) {
        ctl = actor_sock_outbound(topo, name, "supervisor", ACTOR_HWM_READY);
        msg_ready_t r;
        msg_ready_init(&r);
        msg_set_str(r.name, sizeof r.name, name);
        r.pid = getpid();
        /* the supervisor may still be connecting: retry a full queue briefly */
        for (int i = 0; ctl && i < 50 && actor_send(ctl, MSG_READY, &r) == -EAGAIN; i++)
            zclock_sleep(20);
    }
    LOG_I(TAG, "%s: ready (pid %d)", name, (int)getpid());
    base_notify_send(notify, "READY=1\nSTATUS=%s ready", name);
    pid_t parent = getppid();
    int rc = 0;
    zpoller_t *poller = zpoller_new(actor_pipe(a), NULL);
    while (!zsys_interrupted && !s_stop_pending()) {
        zpoller_wait(poller, 200);
        if (actor_exited(a, &rc))
            break;
        if (getppid() != parent) { /* the supervisor is gone (reparented to 1 or a subreaper) */
            LOG_W(TAG, "%s: parent gone, stopping", name);
            break;
        }
    }
    zpoller_destroy(&poller);
    base_notify_send(notify, "STOPPING=1");
    base_notify_destroy(&notify);
    if (rc)
        LOG_E(TAG, "%s: failed (%d)", name, rc);
    actor_destroy(&a);
    zsock_destroy(&ctl);
    actor_curve_destroy(&curve);
    return rc ? 1 : 0;
}

/* actor_runtime.c - actors as zactor threads, the process-mode body, typed
 * options, socket helpers (with the checksum of internal frames and the fault
 * injection of actor_faults.h) and the actor loop every actor runs
 * (polling, draining, control messages, timers). */
#include "actor_runtime.h"

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

#define TAG "actor"

/* The faults of the actor running in this thread (its "faults" option), or
 * NULL: none.  Sockets belong to the thread that made them, so the state of
 * the links they cover is per thread too, and nothing here is shared. */
static _Thread_local actor_faults_t *s_faults;
/* The actor of this thread reached crash_after (thread mode): it sends nothing
 * more and its loop ends. */
static _Thread_local bool s_crashed;
/* This process is one actor's (actor_process_run): a crash kills it. */
static bool s_process_mode;

struct actor_env_t {
    char name[ACTOR_TOPO_NAME];   /* the actor's name */
    const actor_topology_t *topo; /* borrowed from the parent */
    const actor_info_t *info;     /* its registry entry: body and options */
    void *cfg;                    /* owned: its options, loaded (info->cfg_size bytes) */
    zsock_t *pipe;                /* the actor's end of the zactor pipe */
    bool answered;                /* READY or FAIL sent */
    bool beat;                    /* process mode: its loop heartbeats to the supervisor */
};

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
        s_faults = actor_faults_new(spec, env->name, err, sizeof err); /* checked: cannot fail */
        if (s_faults && actor_faults_active(s_faults))
            LOG_W(env->name, "fault injection on: %s", spec);
        else
            actor_faults_destroy(&s_faults);
    }
    int rc = env->info->fn(env);
    if (s_crashed)
        rc = 134;
    actor_faults_destroy(&s_faults);
    s_crashed = false;
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
    s_process_mode = true;
    actor_curve_t *curve = actor_curve_new(topo, name, err, sizeof err); /* before any socket */
    const char *sup = actor_topology_endpoint(topo, "supervisor");
    actor_t *a = curve ? s_actor_new(info, name, topo, 300000, sup != NULL, err, sizeof err) : NULL;
    if (!a) {
        LOG_E(TAG, "%s: %s", name, err);
        actor_curve_destroy(&curve);
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
    if (rc)
        LOG_E(TAG, "%s: failed (%d)", name, rc);
    actor_destroy(&a);
    zsock_destroy(&ctl);
    actor_curve_destroy(&curve);
    return rc ? 1 : 0;
}

/* ---- sockets */

int actor_socks_open(const actor_env_t *env, const actor_sock_decl_t *decls, void *self, char *err,
                     size_t errlen) {
    for (const actor_sock_decl_t *d = decls; d->field; d++) {
        zsock_t **at = (zsock_t **)((char *)self + (d->field - 1));
        if (d->dir == ACTOR_SOCK_IN) {
            if (!(*at = actor_sock_inbound(env->topo, env->name, d->max_msg, d->hwm))) {
                snprintf(err, errlen, "cannot open its inbox");
                return -EIO;
            }
            continue;
        }
        if (d->optional && !actor_topology_endpoint(env->topo, d->peer))
            continue;
        if (!(*at = actor_sock_outbound(env->topo, env->name, d->peer, d->hwm))) {
            snprintf(err, errlen, "cannot connect to %s", d->peer);
            return -EIO;
        }
    }
    return 0;
}

void actor_socks_close(const actor_sock_decl_t *decls, void *self) {
    for (const actor_sock_decl_t *d = decls; d->field; d++)
        zsock_destroy((zsock_t **)((char *)self + (d->field - 1)));
}

zsock_t *actor_sock_inbound(const actor_topology_t *topo, const char *name, int64_t max_msg,
                            int rcvhwm) {
    const char *endpoint = actor_topology_endpoint(topo, name);
    if (!endpoint) {
        LOG_E(TAG, "%s has no endpoint in the topology", name);
        return NULL;
    }
    zsock_t *s = zsock_new(ZMQ_PULL);
    if (!s)
        return NULL;
    zsock_set_maxmsgsize(s, (int)max_msg);
    zsock_set_rcvhwm(s, rcvhwm);
    zsock_set_linger(s, 0);
    char err[512], cert[1024];
    if (actor_curve_needed(topo, endpoint)) {
        snprintf(cert, sizeof cert, "%s/%s.key", actor_curve_keys(topo), name);
        if (actor_curve_server(s, cert, ACTOR_CURVE_DOMAIN, err, sizeof err)) {
            LOG_E(TAG, "%s: %s", name, err);
            zsock_destroy(&s);
            return NULL;
        }
    }
    if (zsock_bind(s, "%s", endpoint) < 0) {
        LOG_E(TAG, "cannot bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
        zsock_destroy(&s);
    }
    return s;
}

zsock_t *actor_sock_outbound(const actor_topology_t *topo, const char *name, const char *peer,
                             int sndhwm) {
    const char *endpoint = actor_topology_endpoint(topo, peer);
    if (!endpoint) {
        LOG_E(TAG, "%s has no endpoint in the topology", peer);
        return NULL;
    }
    zsock_t *s = zsock_new(ZMQ_PUSH);
    if (!s)
        return NULL;
    zsock_set_sndhwm(s, sndhwm);
    zsock_set_linger(s, 0);
    char err[512], cert[1024], server[1024];
    if (actor_curve_needed(topo, endpoint)) {
        snprintf(cert, sizeof cert, "%s/%s.key", actor_curve_keys(topo), name);
        snprintf(server, sizeof server, "%s/%s.key", actor_curve_keys(topo), peer);
        if (actor_curve_client(s, cert, server, err, sizeof err)) {
            LOG_E(TAG, "%s -> %s: %s", name, peer, err);
            zsock_destroy(&s);
            return NULL;
        }
    }
    if (zsock_connect(s, "%s", endpoint) < 0) {
        LOG_E(TAG, "cannot connect %s: %s", endpoint, zmq_strerror(zmq_errno()));
        zsock_destroy(&s);
    }
    /* made by the actor of this thread: its faults cover the link */
    if (s && s_faults && actor_faults_link(s_faults, s, peer))
        LOG_W(TAG, "%s -> %s: out of memory: no faults on this link", name, peer);
    return s;
}

/* ---- the checksum of internal frames
 *
 * The first frame of every message between actors ends with 8 bytes: the
 * XXH3-64 (little-endian) of every byte before them.  A message with a raw
 * second frame (a KV block) carries that frame's XXH3-64 just before them, so
 * the bulk frame itself goes unchanged:
 *     one frame:   msgpack | sum(msgpack)
 *     two frames:  msgpack | sum(raw) | sum(msgpack | sum(raw)),   raw
 * The sender sums before the fault injector may corrupt the frame; the
 * receiver checks and drops a frame that fails (-EBADMSG, counted
 * "malformed" and "malformed.checksum" by the loop). */

#define S_SUM 8 /* bytes of one sum */

/* XXH3-64 of len bytes.  On x86-64 libxxhash picks its widest SIMD variant at
 * run time (AVX2 / AVX-512: about twice the SSE2 default on a KV block); the
 * value is the same everywhere. */
static uint64_t s_sum(const void *p, size_t len) {
#if defined(__x86_64__)
    return XXH3_64bits_dispatch(p, len);
#else
    return XXH3_64bits(p, len);
#endif
}

static void s_put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t s_get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Make the parts of a message: buf (len bytes) with its trailer, then raw
 * (rawlen bytes) when raw is not NULL.  Returns the number of parts (1 or 2),
 * or -ENOMEM (then no part needs closing). */
static int s_frames(zmq_msg_t *parts, const void *buf, size_t len, const void *raw, size_t rawlen) {
    size_t sums = raw ? 2 * S_SUM : S_SUM;
    if (zmq_msg_init_size(&parts[0], len + sums))
        return -ENOMEM;
    uint8_t *p = zmq_msg_data(&parts[0]);
    memcpy(p, buf, len);
    if (raw)
        s_put64(p + len, s_sum(raw, rawlen));
    s_put64(p + len + sums - S_SUM, s_sum(p, len + sums - S_SUM));
    if (!raw)
        return 1;
    if (zmq_msg_init_size(&parts[1], rawlen)) {
        zmq_msg_close(&parts[0]);
        return -ENOMEM;
    }
    if (rawlen)
        memcpy(zmq_msg_data(&parts[1]), raw, rawlen);
    return 2;
}

/* A frame refused before decoding: code (-EPROTO, -EBADMSG) and what in err.
 * Returns code. */
static int s_frame_error(msg_err_t *err, int code, const char *what) {
    if (err) {
        memset(err, 0, sizeof *err);
        err->code = code;
        err->kind = MSG_E_MALFORMED;
        snprintf(err->msg, sizeof err->msg, "%s", what);
    }
    return code;
}

/* Check the trailer of the first frame msg (and raw, the second, or NULL).
 * The length of its MessagePack in *len.  0, or -EBADMSG with err. */
static int s_check(zmq_msg_t *msg, zmq_msg_t *raw, size_t *len, msg_err_t *err) {
    size_t n = zmq_msg_size(msg), sums = raw ? 2 * S_SUM : S_SUM;
    const uint8_t *p = zmq_msg_data(msg);
    bool ok = n >= sums && s_sum(p, n - S_SUM) == s_get64(p + n - S_SUM);
    if (ok && raw)
        ok = s_sum(zmq_msg_data(raw), zmq_msg_size(raw)) == s_get64(p + n - sums);
    if (ok) {
        *len = n - sums;
        return 0;
    }
    char what[64];
    snprintf(what, sizeof what, "bad checksum (a frame of %zu bytes)", n);
    return s_frame_error(err, -EBADMSG, what);
}

/* The actor of this thread reached crash_after: a process dies at once (as
 * if killed); a thread goes quiet and its loop ends. */
static void s_crash(void) {
    if (s_process_mode) {
        LOG_E(TAG, "faults: crash_after reached: killing this process");
        raise(SIGKILL);
    }
    LOG_E(TAG, "faults: crash_after reached: the actor's thread stops");
    s_crashed = true;
}

/* Send the n parts of a message (taken) on sock, through the faults when they
 * cover it.  A full queue is waited for up to timeout_ms (0: not at all).
 * 0, -EAGAIN (still full), -EIO. */
static int s_send(zsock_t *sock, zmq_msg_t *parts, int n, int timeout_ms) {
    uint64_t t0 = base_now_us(), limit = (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000;
    int rc = 0;
    if (s_crashed) {
        /* a crashed actor sends nothing */
    } else if (s_faults && actor_faults_covers(s_faults, sock)) {
        while (!(zsock_events(sock) & ZMQ_POLLOUT) && base_now_us() - t0 < limit)
            zclock_sleep(1);
        rc = actor_faults_send(s_faults, sock, parts, n); /* takes the parts */
        if (actor_faults_crash_due(s_faults))
            s_crash();
        return rc;
    } else {
        /* a multi-part message is queued atomically: once the first part is in, the
         * second goes too (ZeroMQ guarantees it), so only the first may see EAGAIN */
        void *h = zsock_resolve(sock);
        for (;;) {
            rc = zmq_msg_send(&parts[0], h, ZMQ_DONTWAIT | (n > 1 ? ZMQ_SNDMORE : 0));
            if (rc >= 0 || zmq_errno() != EAGAIN || base_now_us() - t0 >= limit)
                break;
            zclock_sleep(1);
        }
        if (rc < 0)
            rc = zmq_errno() == EAGAIN ? -EAGAIN : -EIO;
        else if (n > 1)
            rc = zmq_msg_send(&parts[1], h, 0) < 0 ? -EIO : 0;
        else
            rc = 0;
    }
    for (int i = 0; i < n; i++)
        zmq_msg_close(&parts[i]);
    return rc;
}

/* Encode m and send it, with raw as a second frame when not NULL. */
static int s_encode_send(zsock_t *sock, int type, const void *m, const void *raw, size_t len,
                         int timeout_ms) {
    void *buf = NULL;
    size_t blen = 0;
    msg_err_t err;
    int rc = msg_encode(type, m, &buf, &blen, &err);
    if (rc) {
        LOG_W(TAG, "cannot encode %s: %s", msg_type_name(type), err.msg);
        return rc;
    }
    zmq_msg_t parts[2];
    int n = s_frames(parts, buf, blen, raw, len);
    free(buf);
    return n < 0 ? n : s_send(sock, parts, n, timeout_ms);
}

int actor_send(zsock_t *sock, int type, const void *m) {
    return s_encode_send(sock, type, m, NULL, 0, 0);
}

int actor_send_raw(zsock_t *sock, int type, const void *m, const void *raw, size_t len,
                   int timeout_ms) {
    static const char none; /* a raw frame of 0 bytes still is a frame */
    return s_encode_send(sock, type, m, raw ? raw : &none, raw ? len : 0, timeout_ms);
}

/* Read and drop what is left of a multi-part message after msg (closed). */
static void s_drain_rest(void *h, zmq_msg_t *msg) {
    bool more = zmq_msg_more(msg);
    while (more) {
        zmq_msg_close(msg);
        zmq_msg_init(msg);
        if (zmq_msg_recv(msg, h, 0) < 0)
            break;
        more = zmq_msg_more(msg);
    }
    zmq_msg_close(msg);
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
    if (zmq_msg_more(&msg)) {
        s_drain_rest(h, &msg);
        return s_frame_error(err, -EPROTO, "multi-part frame");
    }
    size_t len = 0;
    int rc = s_check(&msg, NULL, &len, err);
    if (!rc)
        rc = msg_any_decode(zmq_msg_data(&msg), len, m, err);
    zmq_msg_close(&msg);
    return rc;
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
    bool two = zmq_msg_more(&msg);
    if (two) {
        zmq_msg_recv(raw, h, 0); /* the rest of a multi-part message is already here */
        if (zmq_msg_more(raw)) {
            s_drain_rest(h, raw);
            zmq_msg_init(raw);
            zmq_msg_close(&msg);
            return s_frame_error(err, -EPROTO, "more than two frames");
        }
    }
    size_t len = 0;
    int rc = s_check(&msg, two ? raw : NULL, &len, err);
    if (!rc)
        rc = msg_any_decode(zmq_msg_data(&msg), len, m, err);
    if (rc) { /* the caller gets no raw frame with a bad message */
        zmq_msg_close(raw);
        zmq_msg_init(raw);
    }
    zmq_msg_close(&msg);
    return rc;
}

/* ---- the actor loop */

#define S_MAX_SOCKS 8
#define S_MAX_HANDLERS 32
#define S_MAX_TIMERS 8

typedef struct {
    zsock_t *sock;      /* borrowed; a monitor: owned */
    actor_reader_fn fn; /* reader: reads one message itself; NULL: an inbox */
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
    if (s_faults) /* reported from the start */
        actor_faults_report(s_faults, l->counters);
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
    if (s_faults)
        actor_faults_report(s_faults, self->counters);
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
    if (self->n_socks == S_MAX_SOCKS)
        return -ENOSPC;
    self->socks[self->n_socks++] = (s_sock_t){.sock = sock, .fn = fn};
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
    return s_faults ? actor_faults_flush(s_faults) : -1;
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
            s->fn(self->self, s->sock);
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
    while (!self->stop && !s_crashed) {
        if (s_faults) { /* send the held frames that are due; wake for the next one */
            int held = actor_faults_flush(s_faults);
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
        if (s_faults)
            actor_faults_stall(s_faults); /* a hang, when the spec says so */
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

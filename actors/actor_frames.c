/* actor_frames.c - the runtime's sockets: the inbound and outbound sockets of the topology's
 * links (with CURVE and the fault injection of actor_faults.h), and the framing of internal
 * messages: a checksum frame after the MessagePack one, checked on receipt. */
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

/* tcp://NAME:PORT where NAME is a DNS name (a Kubernetes Service, an /etc/hosts entry),
 * which libzmq does not bind (it binds addresses and interfaces: ENODEV): the name is
 * where the peers find this actor, so it listens on every interface of its host at PORT.
 * True when that bind worked. */
static bool s_bind_any(zsock_t *s, const char *endpoint) {
    const char *port = strrchr(endpoint, ':');
    if (zmq_errno() != ENODEV || strncmp(endpoint, "tcp://", 6) || !port || port < endpoint + 6)
        return false;
    if (zsock_bind(s, "tcp://*%s", port) < 0)
        return false;
    LOG_I(TAG, "%s: a host name: bound tcp://*%s", endpoint, port);
    return true;
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
    if (zsock_bind(s, "%s", endpoint) < 0 && !s_bind_any(s, endpoint)) {
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
    if (s && actor_rt_faults && actor_faults_link(actor_rt_faults, s, peer))
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
    if (actor_rt_process_mode) {
        LOG_E(TAG, "faults: crash_after reached: killing this process");
        raise(SIGKILL);
    }
    LOG_E(TAG, "faults: crash_after reached: the actor's thread stops");
    actor_rt_crashed = true;
}

/* Send the n parts of a message (taken) on sock, through the faults when they
 * cover it.  A full queue is waited for up to timeout_ms (0: not at all).
 * 0, -EAGAIN (still full), -EIO. */
static int s_send(zsock_t *sock, zmq_msg_t *parts, int n, int timeout_ms) {
    uint64_t t0 = base_now_us(), limit = (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000;
    int rc = 0;
    if (actor_rt_crashed) {
        /* a crashed actor sends nothing */
    } else if (actor_rt_faults && actor_faults_covers(actor_rt_faults, sock)) {
        while (!(zsock_events(sock) & ZMQ_POLLOUT) && base_now_us() - t0 < limit)
            zclock_sleep(1);
        rc = actor_faults_send(actor_rt_faults, sock, parts, n); /* takes the parts */
        if (actor_faults_crash_due(actor_rt_faults))
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

/* actor_kv_events.c - a KV event queue's PUB and replay sockets (actor_kv_events.h). */
#include "actor_kv_events.h"

#include "base_log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define S_PUB_HWM 100000 /* batches a slow subscriber may lag before it loses some */

struct actor_kv_events_t {
    kv_events_t *q;             /* the queue and its replay ring */
    zsock_t *pub;               /* PUB, bound */
    zsock_t *replay;            /* ROUTER, bound, or NULL */
    actor_counters_t *counters; /* the owning actor's */
};

static void s_seq_bytes(int64_t seq, uint8_t out[8]) {
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)seq >> (56 - 8 * i));
}

/* [identity, "", seq, payload] on the replay socket (not waiting: a slow reader loses). */
static void s_send_replay(void *sock, zframe_t *id, int64_t seq, const void *data, size_t len) {
    uint8_t sb[8];
    s_seq_bytes(seq, sb);
    zmq_send(sock, zframe_data(id), zframe_size(id), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(sock, sb, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(sock, data, len, ZMQ_DONTWAIT);
}

/* actor_reader_fn (self: the publisher): one replay request. */
static void s_on_replay(void *self_, zsock_t *sock) {
    actor_kv_events_t *self = self_;
    zmsg_t *req = zmsg_recv_nowait(sock);
    if (!req)
        return;
    zframe_t *id = zmsg_pop(req), *delim = zmsg_pop(req), *start = zmsg_pop(req);
    if (id && delim && start && zframe_size(delim) == 0 && zframe_size(start) == 8 &&
        zmsg_size(req) == 0) {
        uint64_t from = 0;
        for (int i = 0; i < 8; i++)
            from = from << 8 | zframe_data(start)[i];
        void *s = zsock_resolve(sock);
        int64_t seq, next = from > INT64_MAX ? INT64_MAX : (int64_t)from;
        const uint8_t *payload;
        size_t len;
        while (next < INT64_MAX && kv_events_kept(self->q, next, &seq, &payload, &len) == 1) {
            s_send_replay(s, id, seq, payload, len);
            next = seq + 1;
        }
        s_send_replay(s, id, -1, "", 0);
        actor_counters_add(self->counters, "kv_events.replays", 1);
    } else {
        actor_counters_add(self->counters, "kv_events.bad_replays", 1);
    }
    zframe_destroy(&id);
    zframe_destroy(&delim);
    zframe_destroy(&start);
    zmsg_destroy(&req);
}

/* A bound socket of this type at endpoint; NULL with the reason in err. */
static zsock_t *s_bind(int type, const char *endpoint, char *err, size_t errlen) {
    zsock_t *s = zsock_new(type);
    if (!s) {
        snprintf(err, errlen, "kv_events: cannot make a socket");
        return NULL;
    }
    zsock_set_linger(s, 0);
    if (type == ZMQ_PUB)
        zsock_set_sndhwm(s, S_PUB_HWM);
    if (zsock_bind(s, "%s", endpoint) < 0) {
        snprintf(err, errlen, "kv_events: cannot bind %s: %s", endpoint, zmq_strerror(errno));
        zsock_destroy(&s);
    }
    return s;
}

actor_kv_events_t *actor_kv_events_new(const actor_kv_events_config_t *c, actor_loop_t *loop,
                                       actor_counters_t *counters, char *err, size_t errlen) {
    if (errlen)
        err[0] = '\0';
    if (!c->endpoint || !*c->endpoint)
        return NULL;
    char pub[512], replay[512] = "";
    if (kv_events_endpoint_for(c->endpoint, c->index, pub, sizeof pub) ||
        (c->replay && *c->replay &&
         kv_events_endpoint_for(c->replay, c->index, replay, sizeof replay))) {
        snprintf(err, errlen, "kv_events: '%s' / '%s' is not tcp://HOST:PORT, ipc:// or inproc://",
                 c->endpoint, c->replay ? c->replay : "");
        return NULL;
    }
    actor_kv_events_t *self = calloc(1, sizeof *self);
    kv_events_config_t ec = {c->block_size, c->keep, 0};
    if (!self || !(self->q = kv_events_new(&ec))) {
        snprintf(err, errlen, "kv_events: out of memory");
        goto fail;
    }
    self->counters = counters;
    if (!(self->pub = s_bind(ZMQ_PUB, pub, err, errlen)) ||
        (*replay && !(self->replay = s_bind(ZMQ_ROUTER, replay, err, errlen))))
        goto fail;
    if (self->replay && actor_loop_reader_arg(loop, self->replay, s_on_replay, self)) {
        snprintf(err, errlen, "kv_events: too many sockets for the actor's loop");
        goto fail;
    }
    kv_events_cleared(self->q);
    LOG_I(c->name, "KV events on %s%s%s", pub, *replay ? ", replay on " : "", replay);
    return self;
fail:
    actor_kv_events_destroy(&self);
    return NULL;
}

void actor_kv_events_destroy(actor_kv_events_t **self_p) {
    if (!self_p || !*self_p)
        return;
    actor_kv_events_t *self = *self_p;
    zsock_destroy(&self->replay);
    zsock_destroy(&self->pub);
    kv_events_destroy(&self->q);
    free(self);
    *self_p = NULL;
}

kv_events_t *actor_kv_events_queue(actor_kv_events_t *self) {
    return self->q;
}

void actor_kv_events_flush(actor_kv_events_t *self) {
    if (!self || !kv_events_pending(self->q))
        return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    int64_t seq;
    const uint8_t *payload;
    size_t len;
    if (kv_events_flush(self->q, (double)tv.tv_sec + tv.tv_usec * 1e-6, &seq, &payload, &len) ==
        1) {
        uint8_t sb[8];
        s_seq_bytes(seq, sb);
        void *s = zsock_resolve(self->pub);
        if (zmq_send(s, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
            zmq_send(s, sb, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
            zmq_send(s, payload, len, ZMQ_DONTWAIT) < 0)
            actor_counters_add(self->counters, "kv_events.send_failed", 1);
    }
    kv_events_stats_t st = kv_events_stats(self->q);
    actor_counters_set(self->counters, "kv_events.batches", st.batches);
    actor_counters_set(self->counters, "kv_events.events", st.events);
    actor_counters_set(self->counters, "kv_events.bytes", st.bytes);
    if (st.dropped)
        actor_counters_set(self->counters, "kv_events.dropped", st.dropped);
}

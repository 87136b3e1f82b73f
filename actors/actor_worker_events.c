/* actor_worker_events.c - the worker's KV events (option kv_events; kvstore/kv_events.h,
 * docs/KV_EVENTS.md): every full block entering or leaving T0's index is queued as it
 * happens and published once per loop turn, after the step, on a PUB socket as
 * topic | sequence number (8 bytes, big-endian) | EventBatch; AllBlocksCleared first, as
 * a (re)started worker's cache is empty.  A ROUTER socket (kv_events_replay) answers
 * [identity, "", start (8 bytes)] with [identity, "", seq, payload] for every batch kept
 * from start on, then [identity, "", -1 (8 bytes), ""]. */
#include "actor_worker_int.h"

#include "base_log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#define S_PUB_HWM 100000 /* batches a slow subscriber may lag before it loses some */

/* kv_cache_change_fn: T0's index changed. */
static void s_on_change(void *arg, kv_cache_change_t what, uint64_t hash, uint64_t parent,
                        const int32_t *tokens, int n_tokens) {
    actor_worker_t *w = arg;
    (void)n_tokens; /* a full block: block_size tokens */
    if (what == KV_CACHE_STORED)
        kv_events_stored(w->events, KV_EVENTS_T0, hash, parent, tokens);
    else
        kv_events_removed(w->events, KV_EVENTS_T0, hash);
}

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

/* actor_reader_fn: a replay request on the ROUTER socket (a malformed one is ignored). */
static void s_on_replay(void *self, zsock_t *sock) {
    actor_worker_t *w = self;
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
        while (next < INT64_MAX && kv_events_kept(w->events, next, &seq, &payload, &len) == 1) {
            s_send_replay(s, id, seq, payload, len);
            next = seq + 1;
        }
        s_send_replay(s, id, -1, "", 0);
        actor_counters_add(w->counters, "kv_events.replays", 1);
    } else {
        actor_counters_add(w->counters, "kv_events.bad_replays", 1);
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

int actor_worker_events_start(actor_worker_t *w, const char *endpoint, const char *replay_ep,
                              int keep, char *err, size_t errlen) {
    if (!endpoint || !*endpoint)
        return 0;
    char pub[512], replay[512] = "";
    if (kv_events_endpoint_for(endpoint, w->index, pub, sizeof pub) ||
        (replay_ep && *replay_ep &&
         kv_events_endpoint_for(replay_ep, w->index, replay, sizeof replay))) {
        snprintf(err, errlen, "kv_events: '%s' / '%s' is not tcp://HOST:PORT, ipc:// or inproc://",
                 endpoint, replay_ep ? replay_ep : "");
        return -EINVAL;
    }
    kv_events_config_t ec = {w->block_size, keep, 0};
    if (!(w->events = kv_events_new(&ec))) {
        snprintf(err, errlen, "kv_events: out of memory");
        return -ENOMEM;
    }
    if (!(w->events_pub = s_bind(ZMQ_PUB, pub, err, errlen)) ||
        (*replay && !(w->events_replay = s_bind(ZMQ_ROUTER, replay, err, errlen))))
        return -EINVAL;
    kv_cache_on_change(w->kv, s_on_change, w);
    kv_events_cleared(w->events);
    if (w->events_replay)
        actor_loop_reader(w->loop, w->events_replay, s_on_replay);
    LOG_I(w->name, "KV events on %s%s%s", pub, *replay ? ", replay on " : "", replay);
    return 0;
}

void actor_worker_events_flush(actor_worker_t *w) {
    if (!w->events || !kv_events_pending(w->events))
        return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    int64_t seq;
    const uint8_t *payload;
    size_t len;
    if (kv_events_flush(w->events, (double)tv.tv_sec + tv.tv_usec * 1e-6, &seq, &payload, &len) ==
        1) {
        uint8_t sb[8];
        s_seq_bytes(seq, sb);
        void *s = zsock_resolve(w->events_pub);
        if (zmq_send(s, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
            zmq_send(s, sb, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
            zmq_send(s, payload, len, ZMQ_DONTWAIT) < 0)
            actor_counters_add(w->counters, "kv_events.send_failed", 1);
    }
    kv_events_stats_t st = kv_events_stats(w->events);
    actor_counters_set(w->counters, "kv_events.batches", st.batches);
    actor_counters_set(w->counters, "kv_events.events", st.events);
    actor_counters_set(w->counters, "kv_events.bytes", st.bytes);
    if (st.dropped)
        actor_counters_set(w->counters, "kv_events.dropped", st.dropped);
}

void actor_worker_events_stop(actor_worker_t *w) {
    if (w->kv)
        kv_cache_on_change(w->kv, NULL, NULL);
    zsock_destroy(&w->events_replay);
    zsock_destroy(&w->events_pub);
    kv_events_destroy(&w->events);
}

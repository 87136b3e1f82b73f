/* actor_worker_events.c - the worker's KV events (option kv_events; kvstore/kv_events.h,
 * docs/KV_EVENTS.md): every full block entering or leaving T0's index is queued as it
 * happens and published once per loop turn, after the step; AllBlocksCleared first, as
 * a (re)started worker's cache is empty. */
#include "actor_worker_int.h"

#include "base_log.h"

#include <errno.h>
#include <stdio.h>
#include <sys/time.h>

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

/* actor_reader_fn: a replay request on the ROUTER socket. */
static void s_on_replay(void *self, zsock_t *sock) {
    actor_worker_t *w = self;
    (void)sock;
    kv_events_replay(w->events);
}

int actor_worker_events_start(actor_worker_t *w, const actor_worker_cfg_t *c, char *err,
                              size_t errlen) {
    if (!c->kv_events || !*c->kv_events)
        return 0;
    char pub[512], replay[512] = "";
    if (kv_events_endpoint_for(c->kv_events, w->index, pub, sizeof pub) ||
        (c->kv_events_replay && *c->kv_events_replay &&
         kv_events_endpoint_for(c->kv_events_replay, w->index, replay, sizeof replay))) {
        snprintf(err, errlen, "kv_events: '%s' / '%s' is not tcp://HOST:PORT, ipc:// or inproc://",
                 c->kv_events, c->kv_events_replay ? c->kv_events_replay : "");
        return -EINVAL;
    }
    kv_events_config_t ec = {pub, replay, "", w->block_size, c->kv_events_keep, 0};
    if (!(w->events = kv_events_new(&ec, err, errlen)))
        return -EINVAL;
    kv_cache_on_change(w->kv, s_on_change, w);
    kv_events_cleared(w->events);
    if (kv_events_replay_socket(w->events))
        actor_loop_reader(w->loop, kv_events_replay_socket(w->events), s_on_replay);
    LOG_I(w->name, "KV events on %s%s%s", pub, *replay ? ", replay on " : "", replay);
    return 0;
}

void actor_worker_events_flush(actor_worker_t *w) {
    if (!w->events || !kv_events_pending(w->events))
        return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    kv_events_flush(w->events, (double)tv.tv_sec + tv.tv_usec * 1e-6);
    kv_events_stats_t st = kv_events_stats(w->events);
    actor_counters_set(w->counters, "kv_events.batches", st.batches);
    actor_counters_set(w->counters, "kv_events.events", st.events);
    actor_counters_set(w->counters, "kv_events.bytes", st.bytes);
    actor_counters_set(w->counters, "kv_events.replays", st.replays);
    if (st.dropped)
        actor_counters_set(w->counters, "kv_events.dropped", st.dropped);
}

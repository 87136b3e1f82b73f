/* actor_worker_events.c - the worker's KV events (option kv_events; docs/KV_EVENTS.md):
 * every full block entering or leaving T0's index is queued as it happens
 * (kv_cache_on_change) and published once per loop turn, after the step, through the
 * sockets of actor_kv_events.h. */
#include "actor_worker_int.h"

#include <errno.h>

/* kv_cache_change_fn: T0's index changed. */
static void s_on_change(void *arg, kv_cache_change_t what, uint64_t hash, uint64_t parent,
                        const int32_t *tokens, int n_tokens) {
    actor_worker_t *w = arg;
    kv_events_t *q = actor_kv_events_queue(w->events);
    (void)n_tokens; /* a full block: block_size tokens */
    if (what == KV_CACHE_STORED)
        kv_events_stored(q, KV_EVENTS_T0, hash, parent, tokens);
    else
        kv_events_removed(q, KV_EVENTS_T0, hash);
}

int actor_worker_events_start(actor_worker_t *w, const char *endpoint, const char *replay_ep,
                              int keep, char *err, size_t errlen) {
    actor_kv_events_config_t c = {endpoint, replay_ep, w->index, w->block_size, keep, w->name};
    w->events = actor_kv_events_new(&c, w->loop, w->counters, err, errlen);
    if (!w->events)
        return *err ? -EINVAL : 0;
    kv_cache_on_change(w->kv, s_on_change, w);
    return 0;
}

void actor_worker_events_flush(actor_worker_t *w) {
    actor_kv_events_flush(w->events);
}

void actor_worker_events_stop(actor_worker_t *w) {
    if (w->kv)
        kv_cache_on_change(w->kv, NULL, NULL);
    actor_kv_events_destroy(&w->events);
}

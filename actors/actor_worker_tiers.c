/* actor_worker_tiers.c - the target worker and the KV tier manager: full blocks go down
 * to T1 (evicted from T0, or written through as a running request fills them), promoted
 * blocks come up into T0, and a request whose prompt may lie in T1/T2 is parked
 * (serve/serve_parked) until the tier manager is done or its wait runs out. */
#include "actor_worker_int.h"

#include "base_clock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Send a full block to the tier manager (what: "demoted" or "written").  Never
 * waits: a full queue drops it (the block is recomputed if needed again). */
static void s_to_tier(actor_worker_t *w, const kv_cache_evicted_t *b, const char *what) {
    if (!w->to_tier || b->in_lower || b->meta->n_tokens != w->block_size)
        return;
    msg_kv_block_t m;
    msg_kv_block_init(&m);
    m.worker = w->index;
    m.hash = b->meta->hash;
    m.parent = b->meta->parent;
    m.tokens = (int32_t *)b->meta->tokens;
    m.n_tokens = b->meta->n_tokens;
    m.fmt = b->fmt;
    m.pin = b->meta->pin;
    char name[48];
    if (actor_send_raw(w->to_tier, MSG_KV_BLOCK, &m, b->data, b->bytes, 0)) {
        snprintf(name, sizeof name, "kv.%s.dropped", what);
        actor_counters_add(w->counters, name, 1);
    } else {
        snprintf(name, sizeof name, "kv.%s", what);
        actor_counters_add(w->counters, name, 1);
        snprintf(name, sizeof name, "kv.bytes.%s", what);
        actor_counters_add(w->counters, name, (int64_t)b->bytes);
    }
}

/* Evicted from T0: demote to the tier manager unless it has the block already. */
void actor_worker_on_evict(void *arg, const kv_cache_evicted_t *b) {
    s_to_tier(arg, b, "demoted");
}

/* Write-through: a running request's block just filled goes to T1 at once, so
 * that the request, resumed elsewhere after this worker dies, promotes it there
 * instead of computing it again. */
void actor_worker_on_written(void *arg, const kv_cache_evicted_t *b) {
    s_to_tier(arg, b, "written");
}

void actor_worker_on_block(void *self, const msg_kv_block_t *b, zmq_msg_t *raw) {
    actor_worker_t *w = self;
    kv_meta_t meta;
    meta.hash = b->hash;
    meta.parent = b->parent;
    meta.n_tokens = b->n_tokens;
    meta.pin = b->pin;
    if (b->n_tokens > KV_MAX_BLOCK_TOKENS ||
        kv_hash_block(b->parent, b->tokens, b->n_tokens) != b->hash) {
        actor_counters_add(w->counters, "kv.promoted.refused", 1);
        return;
    }
    memcpy(meta.tokens, b->tokens, (size_t)b->n_tokens * sizeof *meta.tokens);
    int rc = kv_cache_insert(w->kv, &meta, b->fmt, zmq_msg_data(raw), zmq_msg_size(raw));
    actor_worker_req_t *parked = serve_parked_find(w->parked, b->rid);
    if (parked && !rc)
        parked->promoted++;
    actor_counters_add(w->counters,
                       rc == -EEXIST ? "kv.promoted.redundant"
                       : rc          ? "kv.promoted.refused"
                       : parked      ? "kv.promoted.in_time"
                                     : "kv.promoted.late",
                       1);
    if (!rc)
        actor_counters_add(w->counters, "kv.bytes.promoted", (int64_t)zmq_msg_size(raw));
}

void actor_worker_on_promote_done(void *self, const msg_kv_promote_done_t *m) {
    actor_worker_t *w = self;
    actor_worker_req_t *r = serve_parked_take(w->parked, m->rid);
    if (r) {
        actor_worker_trace(
            w, r, "promote",
            "the tier manager sent %d blocks from T1/T2 (%d of them new here), %d not there",
            m->sent, r->promoted, m->missing);
        actor_worker_admit(w, r);
    }
}

bool actor_worker_park(actor_worker_t *w, actor_worker_req_t *r) {
    serve_step_seq_t *s = &r->work.seq;
    /* make what T0 has now the most recently used, so that the promoted blocks evict
     * other blocks before this prompt's head (nothing is held: only running requests hold
     * blocks, which the scheduler accounts for) */
    kv_cache_attach_prefix(w->kv, &s->kv, s->hist, s->n_prompt);
    kv_cache_release(w->kv, &s->kv);
    uint64_t deadline = base_now_us() + (uint64_t)w->prefetch_wait_ms * 1000;
    if (serve_parked_add(w->parked, s->rid, r, deadline))
        return false; /* out of memory: it runs now */
    actor_counters_add(w->counters, "kv.prefetch.waits", 1);
    if (w->self_promote) { /* no prefetcher in this deployment: ask directly */
        msg_kv_promote_t p;
        msg_kv_promote_init(&p);
        p.rid = s->rid;
        p.worker = w->index;
        p.tokens = s->hist;
        p.n_tokens = s->n_prompt;
        if (actor_send(w->to_tier, MSG_KV_PROMOTE, &p))
            actor_counters_add(w->counters, "kv.promote.dropped", 1);
    }
    return true;
}

void actor_worker_check_parked(actor_worker_t *w) {
    uint64_t now = base_now_us();
    actor_worker_req_t *r;
    while ((r = serve_parked_expired(w->parked, now))) {
        actor_counters_add(w->counters, "kv.prefetch.timeouts", 1);
        actor_worker_trace(w, r, "promote",
                           "waited %d ms (prefetch_wait_ms) for T1/T2: %d blocks came in time, "
                           "the rest is computed",
                           w->prefetch_wait_ms, r->promoted);
        actor_worker_admit(w, r);
    }
}

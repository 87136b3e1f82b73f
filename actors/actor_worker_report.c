/* actor_worker_report.c - what the worker tells the others about itself: the load
 * report to the router (its queue, its running requests, T0's free blocks) and the
 * counters behind stats and /metrics (T0's, the step histograms', the grammar cache's). */
#include "actor_worker_int.h"

#include "base_clock.h"

/* T0's counters (kv.*) from kv_cache_stats. */
static void s_report_kv(actor_worker_t *w) {
    kv_cache_stats_t ks = kv_cache_stats(w->kv);
    actor_counters_t *c = w->counters;
    actor_counters_set(c, "kv.free_blocks", kv_cache_available(w->kv));
    actor_counters_set(c, "kv.total_blocks", kv_cache_total(w->kv));
    actor_counters_set(c, "kv.t0.hit_blocks", ks.hit_blocks);
    actor_counters_set(c, "kv.t0.hit_tokens", ks.hit_tokens);
    actor_counters_set(c, "kv.t0.miss_blocks", ks.miss_blocks);
    actor_counters_set(c, "kv.t0.cow_copies", ks.cow_copies);
    actor_counters_set(c, "kv.t0.evictions", ks.evictions);
    actor_counters_set(c, "kv.t0.inserted", ks.inserted);
    actor_counters_set(c, "kv.t0.blocks_used", ks.n_used);
    actor_counters_set(c, "kv.t0.blocks_cached", ks.n_cached);
    actor_counters_set(c, "kv.t0.blocks_free", ks.n_free);
    actor_counters_set(c, "kv.t0.bytes",
                       (int64_t)kv_cache_total(w->kv) * (int64_t)kv_cache_pool(w->kv)->block_bytes);
}

/* A load_report to the router, and the load counters. */
void actor_worker_report(actor_worker_t *w) {
    sched_batch_load_t l = sched_batch_load(w->sched);
    msg_load_report_t m;
    msg_load_report_init(&m);
    m.worker = w->index;
    m.queued_tokens = l.queued_tokens;
    m.active_tokens = l.active_tokens;
    m.n_queued = l.n_waiting;
    m.n_active = l.n_running;
    m.kv_free_blocks = kv_cache_available(w->kv);
    actor_send(w->to_router, MSG_LOAD_REPORT, &m); /* a lost report is replaced soon */
    actor_counters_set(w->counters, "running", l.n_running);
    actor_counters_set(w->counters, "waiting", l.n_waiting);
    s_report_kv(w);
    w->last_report_us = base_now_us();
    w->dirty = false;
}

/* serve_metrics' export into the actor's counters (base_hist_put_fn). */
static void s_put_counter(void *counters, const char *name, int64_t value) {
    actor_counters_set(counters, name, value);
}

/* Before every stats_answer: the histograms' counters, the KV held by compressed
 * requests and the grammar cache's. */
void actor_worker_on_stats(void *self) {
    actor_worker_t *w = self;
    serve_metrics_step_export(w->metrics, s_put_counter, w->counters);
    /* the running requests under KV compression: the KV they hold and would hold whole */
    int64_t n = 0, rows = 0, positions = 0;
    for (int i = 0; i < sched_batch_count(w->sched); i++) {
        const serve_step_seq_t *s = sched_batch_user_at(w->sched, i);
        if (s->kvc.policy.kind == KV_COMPRESS_NONE)
            continue;
        n++;
        rows += s->n_computed - s->kv_dropped;
        positions += s->n_computed;
    }
    const kern_kv_pool_t *pool = kv_cache_pool(w->kv);
    int64_t row_bytes = (int64_t)(pool->block_bytes / (size_t)pool->block_size);
    actor_counters_set(w->counters, "kv_compress.running", n);
    actor_counters_set(w->counters, "kv_compress.bytes_held", rows * row_bytes);
    actor_counters_set(w->counters, "kv_compress.bytes_uncompressed", positions * row_bytes);
    serve_grammars_stats_t gs = serve_grammars_stats(w->grammars);
    if (gs.hits)
        actor_counters_set(w->counters, "grammar.cache_hits", gs.hits);
    if (gs.compiled) {
        actor_counters_set(w->counters, "grammar.compiled", gs.compiled);
        actor_counters_set(w->counters, "grammar.compile_us", gs.compile_us);
    }
}

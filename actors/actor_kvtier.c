/* actor_kvtier.c - the KV tier manager actor: a thin shell around kv_tiers
 * (T1 DRAM + T2 SSD).  Promotions are asynchronous: gets are queued to
 * kv_tiers and answered as they complete, so a slow disk never stalls puts. */
#include "actor_kvtier.h"

#include "actor_kv_events.h"
#include "base_log.h"
#include "kv_tiers.h"
#include "model.h"
#include "model_gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TAG "kvtier"
#define S_MAX_PROMOS 256 /* promotions in flight */

/* One promotion in flight: blocks of rid's prompt being fetched for worker. */
typedef struct {
    bool used;
    uint64_t rid;
    int worker;
    int pending; /* gets not completed */
    int sent;    /* blocks sent to the worker */
    int missing; /* blocks not found (or failed their checksum) */
} s_promo_t;

typedef struct {
    actor_env_t *env;
    zsock_t *in;         /* inbound PULL */
    zsock_t *to_front;   /* PUSH to the frontend (pong, stats) */
    zsock_t **to_worker; /* (n_workers) PUSH to each worker, for promotions */
    int n_workers;
    kv_tiers_t *tiers;     /* T1 + T2 */
    kern_kv_shape_t shape; /* block shape */
    s_promo_t promos[S_MAX_PROMOS];
    uint64_t *hashes; /* (max_blocks) scratch: a prompt's chained hashes */
    int max_blocks;
    actor_loop_t *loop;         /* polling, control messages, counters */
    actor_counters_t *counters; /* the loop's */
    actor_kv_events_t *events;  /* T1/T2 KV events (option tier_events), or NULL: off */
} s_kvtier_t;

const actor_opt_t actor_kvtier_opts[] = {
    {"model", ACTOR_OPT_PATH, NULL, 0, 0, NULL, "GGUF path (read for the KV block shape only)",
     .field = ACTOR_OPT_FIELD(actor_kvtier_cfg_t, model)},
    {"block_size", ACTOR_OPT_INT, "16", 1, KV_MAX_BLOCK_TOKENS, NULL, "positions per KV block",
     .field = ACTOR_OPT_FIELD(actor_kvtier_cfg_t, block_size)},
    {"t1_blocks", ACTOR_OPT_INT, "256", 1, 1 << 24, NULL, "T1 DRAM pool, in blocks",
     .field = ACTOR_OPT_FIELD(actor_kvtier_cfg_t, t1_blocks)},
    {"t1_fmt", ACTOR_OPT_ENUM, "f16", 0, 0, "f32|f16|int8|int4", "T1 block format",
     .field = ACTOR_OPT_FIELD(actor_kvtier_cfg_t, t1_fmt), .parse = kv_fmt_parse},
    {"t2_dir", ACTOR_OPT_PATH, "~/.cache/strata/kv", 0, 0, NULL,
     "T2 SSD files (O_DIRECT, io_uring); none: no T2 (strata serve sets none unless --t2-dir)",
     .field = ACTOR_OPT_FIELD(actor_kvtier_cfg_t, t2_dir)},
    {"t2_blocks", ACTOR_OPT_INT, "1024", 1, 1 << 26, NULL, "T2 capacity in blocks",
     .field = ACTOR_OPT_FIELD(actor_kvtier_cfg_t, t2_blocks)},
    {"t2_fmt", ACTOR_OPT_ENUM, "f16", 0, 0, "f32|f16|int8|int4", "T2 block format",
     .field = ACTOR_OPT_FIELD(actor_kvtier_cfg_t, t2_fmt), .parse = kv_fmt_parse},
    {"policy", ACTOR_OPT_ENUM, "scored", 0, 0, "lru|lfu|scored", "eviction order in T1 and T2",
     .field = ACTOR_OPT_FIELD(actor_kvtier_cfg_t, policy), .parse = kv_policy_parse},
    {"queue_depth", ACTOR_OPT_INT, "64", 1, 4096, NULL, "io_uring entries and registered buffers",
     .field = ACTOR_OPT_FIELD(actor_kvtier_cfg_t, queue_depth)},
    {"tier_events", ACTOR_OPT_STRING, NULL, 0, 0, NULL,
     "publish T1/T2 KV events (vLLM's EventBatch; media CPU and DISK) on a ZeroMQ PUB socket "
     "bound here, e.g. tcp://*:5600 (docs/KV_EVENTS.md); unset: off",
     .field = ACTOR_OPT_FIELD(actor_kvtier_cfg_t, tier_events)},
    {"tier_events_replay", ACTOR_OPT_STRING, NULL, 0, 0, NULL,
     "with tier_events: a ROUTER socket bound here answers replay requests",
     .field = ACTOR_OPT_FIELD(actor_kvtier_cfg_t, tier_events_replay)},
    {"tier_events_keep", ACTOR_OPT_INT, "10000", 1, 1 << 20, NULL,
     "with tier_events_replay: event batches kept for replay",
     .field = ACTOR_OPT_FIELD(actor_kvtier_cfg_t, tier_events_keep)},
    {"nice", ACTOR_OPT_INT, "10", 0, 19, NULL,
     "CPU priority lowered by this much for its thread (demotions are background work)",
     .field = ACTOR_OPT_FIELD(actor_kvtier_cfg_t, nice)},
    {NULL},
};

/* Block shape from the model's GGUF header (no weights are loaded). */
static int s_shape(const char *path, int block_size, kern_kv_shape_t *s, char *err, size_t errlen) {
    model_gguf_t *g = model_gguf_open(path, err, errlen);
    if (!g)
        return -EINVAL;
    model_config_t cfg;
    int rc = model_config_read(g, &cfg, err, errlen);
    if (!rc)
        *s = model_kv_shape(&cfg, block_size);
    model_gguf_destroy(&g);
    return rc;
}

static s_promo_t *s_promo_new(s_kvtier_t *t, uint64_t rid, int worker, int *slot) {
    for (int i = 0; i < S_MAX_PROMOS; i++)
        if (!t->promos[i].used) {
            t->promos[i] = (s_promo_t){true, rid, worker, 0, 0, 0};
            *slot = i;
            return &t->promos[i];
        }
    return NULL;
}

static void s_promo_done(s_kvtier_t *t, s_promo_t *p) {
    msg_kv_promote_done_t d;
    msg_kv_promote_done_init(&d);
    d.rid = p->rid;
    d.sent = p->sent;
    d.missing = p->missing;
    if (actor_send(t->to_worker[p->worker], MSG_KV_PROMOTE_DONE, &d))
        actor_counters_add(t->counters, "send.failed", 1);
    actor_counters_add(t->counters, "promotions.done", 1);
    p->used = false;
}

static void s_on_promote(void *self, const msg_kv_promote_t *q) {
    s_kvtier_t *t = self;
    if (q->worker >= t->n_workers) {
        actor_counters_add(t->counters, "promote.bad_worker", 1);
        return;
    }
    int bs = t->shape.block_size;
    int nf = q->n_tokens / bs;
    if (nf > t->max_blocks) {
        uint64_t *h = realloc(t->hashes, (size_t)nf * sizeof *h);
        if (!h) {
            actor_counters_add(t->counters, "promote.nomem", 1);
            return;
        }
        t->hashes = h;
        t->max_blocks = nf;
    }
    kv_hash_chain(q->tokens, q->n_tokens, bs, t->hashes);
    if (q->warm) {
        int lifted = 0;
        for (int b = 0; b < nf; b++) {
            int where = kv_tiers_where(t->tiers, t->hashes[b]);
            if (!where)
                break;
            if (where == 2 && kv_tiers_warm(t->tiers, t->hashes[b]) == 0)
                lifted++;
        }
        actor_counters_add(t->counters, "warm.requests", 1);
        actor_counters_add(t->counters, "warm.blocks", lifted);
        return;
    }
    actor_counters_add(t->counters, "promote.requests", 1);
    int slot;
    s_promo_t *p = s_promo_new(t, q->rid, q->worker, &slot);
    if (!p) {
        actor_counters_add(t->counters, "promote.busy", 1);
        s_promo_t tmp = {true, q->rid, q->worker, 0, 0, nf};
        s_promo_done(t, &tmp); /* the worker stops waiting and recomputes */
        return;
    }
    /* every block of the chain found here goes: the ones missing here are
     * often the ones the worker still holds (its T0 keeps a prefix's head) */
    for (int b = 0; b < nf; b++) {
        uint64_t tag = (uint64_t)slot << 32 | (uint32_t)b;
        if (!kv_tiers_where(t->tiers, t->hashes[b]) || kv_tiers_get(t->tiers, t->hashes[b], tag))
            p->missing++;
        else
            p->pending++;
    }
    if (!p->pending)
        s_promo_done(t, p);
}

static void s_on_completions(s_kvtier_t *t, int wait_us) {
    kv_tiers_done_t done[64];
    int n;
    while ((n = kv_tiers_poll(t->tiers, done, 64, wait_us)) > 0) {
        wait_us = 0;
        for (int i = 0; i < n; i++) {
            const kv_tiers_done_t *d = &done[i];
            int slot = (int)(d->tag >> 32);
            if (slot < 0 || slot >= S_MAX_PROMOS || !t->promos[slot].used)
                continue;
            s_promo_t *p = &t->promos[slot];
            p->pending--;
            if (d->status == 0) {
                msg_kv_block_t b;
                msg_kv_block_init(&b);
                b.rid = p->rid;
                b.worker = p->worker;
                b.hash = d->hash;
                b.parent = d->meta->parent;
                b.tokens = (int32_t *)d->meta->tokens;
                b.n_tokens = d->meta->n_tokens;
                b.fmt = d->fmt;
                b.pin = d->meta->pin;
                /* promotions are worth a short wait: the worker is waiting for them */
                if (actor_send_raw(t->to_worker[p->worker], MSG_KV_BLOCK, &b, d->data, d->bytes,
                                   50) == 0) {
                    p->sent++;
                    actor_counters_add(t->counters, d->tier == 1 ? "promoted.t1" : "promoted.t2",
                                       1);
                    actor_counters_add(t->counters, "bytes.promoted", (int64_t)d->bytes);
                } else {
                    p->missing++;
                    actor_counters_add(t->counters, "send.failed", 1);
                }
            } else {
                p->missing++;
                actor_counters_add(t->counters,
                                   d->status == -EBADMSG  ? "promote.checksum_failed"
                                   : d->status == -ENOENT ? "promote.gone"
                                                          : "promote.io_error",
                                   1);
            }
            if (!p->pending)
                s_promo_done(t, p);
        }
    }
}

static void s_on_completions(s_kvtier_t *t, int wait_us);

static void s_on_put(void *self, const msg_kv_block_t *b, zmq_msg_t *raw) {
    s_kvtier_t *t = self;
    /* a burst of demotions must not outrun the disk: a put whose T1 victim
     * finds no free write request would drop it, so wait for one (bounded) */
    uint64_t t0 = base_now_us();
    while (kv_tiers_free_io(t->tiers) < 2 && base_now_us() - t0 < 2000000)
        s_on_completions(t, 1000);
    size_t len = zmq_msg_size((zmq_msg_t *)raw);
    size_t want = kv_fmt_block_bytes(&t->shape, b->fmt);
    if (b->n_tokens > t->shape.block_size || !want || len != want ||
        kv_hash_block(b->parent, b->tokens, b->n_tokens) != b->hash) {
        actor_counters_add(t->counters, "put.refused", 1);
        return;
    }
    kv_meta_t meta;
    meta.hash = b->hash;
    meta.parent = b->parent;
    meta.n_tokens = b->n_tokens;
    meta.pin = b->pin;
    memcpy(meta.tokens, b->tokens, (size_t)b->n_tokens * sizeof *meta.tokens);
    if (kv_tiers_put(t->tiers, &meta, b->fmt, zmq_msg_data((zmq_msg_t *)raw), len))
        actor_counters_add(t->counters, "put.failed", 1);
    else
        actor_counters_add(t->counters, "bytes.demoted_in", (int64_t)len);
}

/* Before a stats answer: kv_tiers' statistics as counters. */
static void s_stats(void *self) {
    s_kvtier_t *t = self;
    kv_tiers_stats_t s = kv_tiers_stats(t->tiers);
    actor_counters_t *c = t->counters;
    actor_counters_set(c, "t1.hits", s.t1_hits);
    actor_counters_set(c, "t1.misses", s.t1_misses);
    actor_counters_set(c, "t2.hits", s.t2_hits);
    actor_counters_set(c, "t2.misses", s.t2_misses);
    actor_counters_set(c, "puts", s.puts);
    actor_counters_set(c, "puts.duplicate", s.put_dups);
    actor_counters_set(c, "demoted.t1_to_t2", s.t1_to_t2);
    actor_counters_set(c, "promoted.t2_to_t1", s.t2_to_t1);
    actor_counters_set(c, "t2.dropped", s.t2_dropped);
    actor_counters_set(c, "t2.bytes_written", s.bytes_written);
    actor_counters_set(c, "t2.bytes_read", s.bytes_read);
    actor_counters_set(c, "t2.checksum_failures", s.checksum_failures);
    actor_counters_set(c, "t2.io_errors", s.io_errors);
    actor_counters_set(c, "t1.blocks", s.t1_used);
    actor_counters_set(c, "t2.blocks", s.t2_used);
    actor_counters_set(c, "t1.bytes", s.t1_bytes);
    actor_counters_set(c, "t2.bytes", s.t2_bytes);
    actor_counters_set(c, "t2.recovered", s.t2_recovered);
}

/* After every wakeup: completed reads go out; with I/O in flight, wait for
 * the disk a little (here, not in the poll) and come back at once. */
static int s_idle(void *self) {
    s_kvtier_t *t = self;
    bool io = kv_tiers_pending(t->tiers) > 0;
    s_on_completions(t, io ? 500 : 0);
    actor_kv_events_flush(t->events);
    return kv_tiers_pending(t->tiers) > 0 ? 0 : -1;
}

/* kv_tiers_change_fn: a full block entered or left T1 or T2. */
static void s_on_change(void *arg, bool stored, int tier, uint64_t hash, const kv_meta_t *meta) {
    kv_events_t *q = actor_kv_events_queue(((s_kvtier_t *)arg)->events);
    kv_events_medium_t medium = tier == 1 ? KV_EVENTS_T1 : KV_EVENTS_T2;
    if (stored)
        kv_events_stored(q, medium, hash, meta->parent, meta->tokens);
    else
        kv_events_removed(q, medium, hash);
}

static void s_cleanup(s_kvtier_t *t) {
    if (t->tiers)
        kv_tiers_on_change(t->tiers, NULL, NULL);
    actor_kv_events_destroy(&t->events);
    kv_tiers_destroy(&t->tiers);
    for (int i = 0; t->to_worker && i < t->n_workers; i++)
        zsock_destroy(&t->to_worker[i]);
    free(t->to_worker);
    free(t->hashes);
    zsock_destroy(&t->in);
    zsock_destroy(&t->to_front);
    actor_loop_destroy(&t->loop);
}

int actor_kvtier_main(actor_env_t *env) {
    const actor_kvtier_cfg_t *conf = actor_env_cfg(env);
    const actor_topology_t *topo = actor_env_topology(env);
    const char *me = actor_env_name(env);
    s_kvtier_t t = {0};
    t.env = env;
    char err[512];
    const char *model = conf->model;
    int bs = conf->block_size;
    if (!model) {
        actor_env_fail(env, "%s: needs model= (for the block shape)", me);
        return 1;
    }
    if (s_shape(model, bs, &t.shape, err, sizeof err)) {
        actor_env_fail(env, "%s: %s", me, err);
        return 1;
    }
    char dir[1024];
    const char *t2 = conf->t2_dir;
    if (!strncmp(t2, "~/", 2)) {
        const char *home = getenv("HOME");
        snprintf(dir, sizeof dir, "%s/%s", home ? home : "/tmp", t2 + 2);
        t2 = dir;
    } else if (!strcmp(t2, "none")) {
        t2 = NULL;
    }
    kv_tiers_config_t c = {
        .shape = t.shape,
        .t1_blocks = conf->t1_blocks,
        .t1_fmt = conf->t1_fmt,
        .t2_dir = t2,
        .t2_blocks = conf->t2_blocks,
        .t2_fmt = conf->t2_fmt,
        .policy = conf->policy,
        .queue_depth = conf->queue_depth,
    };
    if (t2) {
        char cmd[1100];
        snprintf(cmd, sizeof cmd, "%s", t2); /* create the directory chain */
        for (char *p = cmd + 1; *p; p++)
            if (*p == '/') {
                *p = 0;
                mkdir(cmd, 0755);
                *p = '/';
            }
        mkdir(cmd, 0755);
    }
    t.tiers = kv_tiers_new(&c, err, sizeof err);
    if (!t.tiers) {
        actor_env_fail(env, "%s: %s", me, err);
        return 1;
    }
    t.n_workers = actor_topology_workers(topo);
    t.loop = actor_loop_new(env, &t);
    t.counters = t.loop ? actor_loop_counters(t.loop) : NULL;
    t.to_worker = calloc((size_t)(t.n_workers > 0 ? t.n_workers : 1), sizeof *t.to_worker);
    t.in = actor_sock_inbound(topo, me, ACTOR_MAX_BULK_FRAME, ACTOR_HWM_BULK);
    t.to_front = actor_sock_outbound(topo, me, "frontend", ACTOR_HWM_CTL);
    bool ok = t.loop && t.to_worker && t.in && t.to_front;
    for (int i = 0; ok && i < t.n_workers; i++) {
        char name[32];
        snprintf(name, sizeof name, "worker%d", i);
        t.to_worker[i] = actor_sock_outbound(topo, me, name, ACTOR_HWM_CTL);
        ok = t.to_worker[i] != NULL;
    }
    if (!ok) {
        actor_env_fail(env, "%s: cannot set up (sockets or memory)", me);
        s_cleanup(&t);
        return 1;
    }
    actor_kv_events_config_t ec = {
        conf->tier_events, conf->tier_events_replay, 0, bs, conf->tier_events_keep, me};
    if (!(t.events = actor_kv_events_new(&ec, t.loop, t.counters, err, sizeof err)) && *err) {
        actor_env_fail(env, "%s: %s", me, err);
        s_cleanup(&t);
        return 1;
    }
    if (t.events)
        kv_tiers_on_change(t.tiers, s_on_change, &t);
    /* demotions (copy, convert, write) are background work: on a machine with
     * few cores they must not take CPU from the workers' forward passes.  A
     * lower priority for this thread only (Linux: per-thread nice). */
    int nice_v = conf->nice;
    if (nice_v && setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice_v))
        LOG_W(me, "cannot lower its priority (nice %d)", nice_v);
    kv_tiers_stats_t st = kv_tiers_stats(t.tiers);
    LOG_I(me, "ready: T1 %d blocks (%s), T2 %s (%d blocks, %s, %d found from before), policy %s",
          c.t1_blocks, kv_fmt_name(c.t1_fmt), t2 ? t2 : "off", t2 ? c.t2_blocks : 0,
          kv_fmt_name(c.t2_fmt), st.t2_recovered, kv_policy_name(c.policy));
    s_stats(&t);
    actor_env_ready(env);

    actor_loop_inbox(t.loop, t.in, t.to_front, true, "");
    actor_loop_handle_kv_block_raw(t.loop, s_on_put);
    actor_loop_handle_kv_promote(t.loop, s_on_promote);
    actor_loop_on_stats(t.loop, s_stats);
    actor_loop_idle(t.loop, s_idle);
    actor_loop_run(t.loop, 100);
    LOG_I(me, "stopping");
    s_cleanup(&t);
    return 0;
}

/* actor_semcache.c - the semcache actor: the answer cache in front of the router
 * (actor_semcache.h).  A thin shell over serve/serve_semcache (the store and its error
 * bound) and model/model_embedder (the question's embedding). */
#include "actor_semcache.h"

#include "base_clock.h"
#include "base_log.h"
#include "model_embedder.h"
#include "serve_semcache.h"
#include "serve_semcache_req.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#define TAG "semcache"
#define S_MEMO 16 /* embeddings of recent questions: a store re-uses its lookup's */

typedef struct {
    uint64_t key; /* the question's hash; 0: free */
    float *emb;   /* (dim) */
    bool ok;      /* it could be embedded */
} s_memo_t;

typedef struct {
    actor_env_t *env;
    zsock_t *in, *to_front;
    const actor_semcache_cfg_t *cfg;
    model_t *model;
    model_tokenizer_t *tok;
    model_embedder_t *emb;
    serve_semcache_bound_t *bound;
    serve_semcache_t *cache;
    uint64_t salt; /* the model's identity, mixed into every context */
    s_memo_t memo[S_MEMO];
    int memo_next;
    uint64_t rng;
    bool dirty; /* changed since the last save */
    actor_loop_t *loop;
    actor_counters_t *counters;
} s_cache_t;

static const actor_sock_decl_t s_socks[] = {
    {ACTOR_SOCK_FIELD(s_cache_t, in), ACTOR_SOCK_IN, NULL, ACTOR_HWM_BULK, ACTOR_MAX_FRAME, false},
    {ACTOR_SOCK_FIELD(s_cache_t, to_front), ACTOR_SOCK_OUT, "frontend", ACTOR_HWM_STREAM, 0, false},
    {0},
};

static int s_mode_parse(const char *v) {
    for (int i = 1; i < 4; i++) /* "default" is a request's, not the server's */
        if (!strcmp(v, msg_cache_mode_names[i]))
            return i;
    return -1;
}

const actor_opt_t actor_semcache_opts[] = {
    {"model", ACTOR_OPT_PATH, NULL, 0, 0, NULL,
     "GGUF the questions are embedded with (pooled final hidden state); unset: worker0's",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, model)},
    {"mode", ACTOR_OPT_ENUM, "off", 0, 0, "off|exact|semantic",
     "what a request that names no cache mode gets",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, mode), .parse = s_mode_parse},
    {"delta", ACTOR_OPT_DOUBLE, "0.05", 0.001, 0.5, NULL,
     "the wrong-hit rate a semantic hit may have, unless the request says (cache_delta)",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, delta)},
    {"alpha", ACTOR_OPT_DOUBLE, "0.05", 0.001, 0.5, NULL,
     "1 - the confidence with which the wrong-hit rate stays under delta",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, alpha)},
    {"min_obs", ACTOR_OPT_INT, "30", 1, 1000000, NULL,
     "verified outcomes at or above a threshold before it may pass",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, min_obs)},
    {"keep", ACTOR_OPT_INT, "20000", 100, 10000000, NULL,
     "verified outcomes kept for the bound (the most recent)",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, keep)},
    {"verify", ACTOR_OPT_DOUBLE, "0.1", 0, 1, NULL,
     "share of semantic hits checked by generating anyway (the outcome feeds the bound)",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, verify)},
    {"entries", ACTOR_OPT_INT, "100000", 1, 10000000, NULL,
     "answers kept; the least recently used goes beyond",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, entries)},
    {"ann_min", ACTOR_OPT_INT, "0", 0, 10000000, NULL,
     "> 0: keep an approximate (HNSW) index of the embedded entries and search it instead of "
     "scanning them all once there are this many (docs/SEMCACHE.md: costs and recall); 0: "
     "always the exact scan",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, ann_min)},
    {"ttl_s", ACTOR_OPT_INT, "86400", 0, 31536000, NULL,
     "how long an answer stays valid unless the request says (0: never expires)",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, ttl_s)},
    {"short_ttl_s", ACTOR_OPT_INT, "300", 0, 31536000, NULL,
     "how long the answer to a time-sensitive question stays valid (docs/SEMCACHE.md)",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, short_ttl_s)},
    {"path", ACTOR_OPT_PATH, NULL, 0, 0, NULL,
     "file the cache persists in (loaded at start, saved every save_s and at stop); unset: "
     "none",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, path)},
    {"save_s", ACTOR_OPT_INT, "30", 1, 86400, NULL, "how often a changed cache is saved",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, save_s)},
    {"embed_max_tokens", ACTOR_OPT_INT, "512", 16, 65536, NULL,
     "longest question embedded (longer ones: the exact layers only)",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, embed_max_tokens)},
    {"embed_threads", ACTOR_OPT_INT, "1", 1, 256, NULL, "threads of the embedding pass",
     .field = ACTOR_OPT_FIELD(actor_semcache_cfg_t, embed_threads)},
    {NULL},
};

static uint64_t s_ctx(const s_cache_t *c, uint64_t context) {
    uint64_t v[2] = {context, c->salt};
    return XXH64(v, sizeof v, 0);
}

/* The embedding of text (memoised), or NULL when it cannot be embedded. */
static const float *s_embed(s_cache_t *c, const char *text, size_t len) {
    uint64_t key = XXH64(text, len, 0) | 1;
    for (int i = 0; i < S_MEMO; i++)
        if (c->memo[i].key == key)
            return c->memo[i].ok ? c->memo[i].emb : NULL;
    s_memo_t *m = &c->memo[c->memo_next];
    c->memo_next = (c->memo_next + 1) % S_MEMO;
    uint64_t t0 = base_now_us();
    int rc = model_embedder_text(c->emb, text, len, m->emb);
    actor_counters_add(c->counters, "embed_us", (int64_t)(base_now_us() - t0));
    actor_counters_add(c->counters, rc > 0 ? "embed.done" : "embed.failed", 1);
    m->key = key;
    m->ok = rc > 0;
    return m->ok ? m->emb : NULL;
}

static double s_uniform(s_cache_t *c) {
    c->rng ^= c->rng << 13; /* xorshift64 */
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return (double)(c->rng >> 11) / (double)(1ull << 53);
}

static void s_on_lookup(void *self, const msg_cache_lookup_t *q) {
    s_cache_t *c = self;
    uint64_t t0 = base_now_us();
    msg_cache_answer_t a;
    msg_cache_answer_init(&a);
    a.rid = q->rid;
    a.similarity = -2;
    a.threshold = 2;
    int mode = q->mode == MSG_CACHE_DEFAULT ? c->cfg->mode : q->mode;
    actor_counters_add(c->counters, "lookups", 1);
    if (mode == MSG_CACHE_OFF) {
        actor_counters_add(c->counters, "lookups.off", 1);
        a.lookup_us = (int64_t)(base_now_us() - t0);
        if (actor_send(c->to_front, MSG_CACHE_ANSWER, &a))
            actor_counters_add(c->counters, "answers.dropped", 1); /* the frontend times out */
        return;
    }
    a.store = true;
    bool semantic = mode == MSG_CACHE_ON_SEMANTIC;
    double delta = q->delta > 0 ? q->delta : c->cfg->delta;
    const float *emb = semantic ? s_embed(c, q->text, q->text_len) : NULL;
    serve_semcache_key_t key = {s_ctx(c, q->context), q->exact, emb};
    serve_semcache_hit_t h, kb;
    int kind = serve_semcache_lookup(c->cache, &key, semantic ? delta : 0, t0, &h);
    a.threshold = h.threshold;
    a.similarity = h.similarity;
    if (kind == SERVE_SEMCACHE_MISS && q->kb_exact) {
        serve_semcache_key_t kk = {s_ctx(c, SERVE_SEMCACHE_KB_CONTEXT), q->kb_exact, emb};
        if (serve_semcache_lookup(c->cache, &kk, semantic ? delta : 0, t0, &kb) !=
            SERVE_SEMCACHE_MISS) {
            kind = MSG_CACHE_KB;
            a.similarity = kb.similarity;
            h = kb;
        }
    }
    if (h.answer) {
        a.answer = (char *)h.answer; /* borrowed until the send */
        a.answer_len = h.answer_len;
        snprintf(a.name, sizeof a.name, "%s", h.name ? h.name : "");
    }
    a.kind = kind;
    a.finish = kind != MSG_CACHE_MISS ? h.meta : 0;
    if (kind == SERVE_SEMCACHE_SEMANTIC && s_uniform(c) < c->cfg->verify) {
        a.verify = true; /* answered by generation; the fresh answer is compared */
        actor_counters_add(c->counters, "verify.sampled", 1);
    }
    if ((kind == MSG_CACHE_MISS || a.verify) && h.answer)
        a.nearest_hash = serve_semcache_answer_hash(h.answer, h.answer_len);
    if (kind == MSG_CACHE_MISS) { /* a miss says nothing but what a verification needs */
        a.answer = NULL;
        a.answer_len = 0;
        a.name[0] = 0;
    }
    static const char *const names[] = {"misses", "hits.exact", "hits.semantic", "hits.kb"};
    actor_counters_add(c->counters, names[kind], 1);
    a.lookup_us = (int64_t)(base_now_us() - t0);
    actor_counters_add(c->counters, "lookup_us", a.lookup_us);
    if (actor_send(c->to_front, MSG_CACHE_ANSWER, &a))
        actor_counters_add(c->counters, "answers.dropped", 1);
}

static void s_done(s_cache_t *c, const char *client, const char *id, int count, int code,
                   const char *message) {
    if (!client[0])
        return;
    msg_cache_done_t d;
    msg_cache_done_init(&d);
    snprintf(d.client, sizeof d.client, "%s", client);
    snprintf(d.id, sizeof d.id, "%s", id);
    d.count = count;
    d.entries = serve_semcache_count(c->cache);
    d.code = code;
    snprintf(d.message, sizeof d.message, "%s", message ? message : "");
    if (actor_send(c->to_front, MSG_CACHE_DONE, &d))
        actor_counters_add(c->counters, "answers.dropped", 1);
}

static void s_on_store(void *self, const msg_cache_store_t *m) {
    s_cache_t *c = self;
    uint64_t now = base_now_us();
    if (m->verify_hash) { /* a verification: was the nearest entry's answer this one? */
        bool same = serve_semcache_answer_hash(m->answer, m->answer_len) == m->verify_hash;
        serve_semcache_bound_observe(c->bound, m->verify_sim, same);
        actor_counters_add(c->counters, same ? "verified.same" : "verified.different", 1);
    }
    int64_t ttl_us =
        m->ttl_s >= 0 ? m->ttl_s * 1000000
                      : serve_semcache_ttl(m->text, m->text_len, (int64_t)c->cfg->ttl_s * 1000000,
                                           (int64_t)c->cfg->short_ttl_s * 1000000);
    /* embedded when the semantic layer may look for it: a record, or the answer to a request
     * that asked for that layer (an exact-only entry costs no embedding pass) */
    int mode = m->mode == MSG_CACHE_DEFAULT ? c->cfg->mode : m->mode;
    bool embed = m->kb || mode == MSG_CACHE_ON_SEMANTIC;
    serve_semcache_key_t key = {s_ctx(c, m->kb ? SERVE_SEMCACHE_KB_CONTEXT : m->context), m->exact,
                                embed ? s_embed(c, m->text, m->text_len) : NULL};
    int rc = serve_semcache_put(c->cache, &key, m->name, m->tags[0] ? m->tags : NULL, m->answer,
                                m->answer_len, ttl_us, now);
    if (rc >= 0)
        rc = serve_semcache_set_meta(c->cache, rc, m->finish); /* how it ended, for its hits */
    if (rc < 0) {
        actor_counters_add(c->counters, "stores.failed", 1);
        s_done(c, m->client, m->id, 0, MSG_CODE_INTERNAL, strerror(-rc));
        return;
    }
    c->dirty = true;
    actor_counters_add(c->counters, m->kb ? "stores.kb" : "stores", 1);
    s_done(c, m->client, m->id, 1, 0, NULL);
}

static void s_on_drop(void *self, const msg_cache_drop_t *m) {
    s_cache_t *c = self;
    int n = serve_semcache_invalidate(c->cache, m->prefix[0] ? m->prefix : NULL,
                                      m->tag[0] ? m->tag : NULL);
    if (!m->all && !m->prefix[0] && !m->tag[0])
        n = 0; /* never reached: the frontend checks; nothing is dropped by accident */
    c->dirty |= n > 0;
    actor_counters_add(c->counters, "invalidated", n);
    s_done(c, m->client, m->id, n, 0, NULL);
}

static void s_save(s_cache_t *c) {
    if (!c->cfg->path || !c->dirty)
        return;
    int rc = serve_semcache_save(c->cache, c->cfg->path, base_now_us());
    if (rc) {
        LOG_W(TAG, "cannot save the cache to %s: %s", c->cfg->path, strerror(-rc));
        actor_counters_add(c->counters, "save.failed", 1);
        return;
    }
    c->dirty = false;
    actor_counters_add(c->counters, "saves", 1);
}

static void s_on_timer(void *self) {
    s_save(self);
}

static void s_on_stats(void *self) {
    s_cache_t *c = self;
    int wrong = 0, n = serve_semcache_bound_count(c->bound, &wrong);
    actor_counters_set(c->counters, "entries", serve_semcache_count(c->cache));
    actor_counters_set(c->counters, "ann.entries", serve_semcache_indexed(c->cache));
    actor_counters_set(c->counters, "observations", n);
    actor_counters_set(c->counters, "observations.different", wrong);
    double t = serve_semcache_bound_threshold(c->bound, c->cfg->delta);
    /* the threshold at the default delta, in thousandths (above 1000: none passes yet) */
    actor_counters_set(c->counters, "threshold.milli", (int64_t)(t * 1000 + 0.5));
}

static void s_cleanup(s_cache_t *c) {
    for (int i = 0; i < S_MEMO; i++)
        free(c->memo[i].emb);
    serve_semcache_destroy(&c->cache);
    serve_semcache_bound_destroy(&c->bound);
    model_embedder_destroy(&c->emb);
    model_tokenizer_destroy(&c->tok);
    model_destroy(&c->model);
    actor_socks_close(s_socks, c);
    actor_loop_destroy(&c->loop);
}

/* The model, its tokenizer, the embedder, the store and its bound, the saved entries. */
static int s_open(s_cache_t *c, const char *path, char *err, size_t errlen) {
    char e[512];
    if (!(c->model = model_load(path, e, sizeof e)) ||
        !(c->tok = model_tokenizer_new(model_file(c->model), e, sizeof e)) ||
        !(c->emb = model_embedder_new(c->model, c->tok, c->cfg->embed_max_tokens,
                                      c->cfg->embed_threads, e, sizeof e))) {
        snprintf(err, errlen, "%s", e);
        return -EINVAL;
    }
    int dim = model_embedder_dim(c->emb);
    for (int i = 0; i < S_MEMO; i++)
        if (!(c->memo[i].emb = malloc((size_t)dim * sizeof(float))))
            return snprintf(err, errlen, "out of memory"), -ENOMEM;
    serve_semcache_config_t sc = {dim, c->cfg->entries, c->cfg->ann_min};
    c->bound = serve_semcache_bound_new(c->cfg->keep, c->cfg->min_obs, c->cfg->alpha);
    c->cache = c->bound ? serve_semcache_new(&sc, c->bound) : NULL;
    if (!c->cache)
        return snprintf(err, errlen, "out of memory"), -ENOMEM;
    const model_config_t *mc = model_config(c->model);
    struct stat st;
    uint64_t size = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    c->salt = XXH64(mc->name, strlen(mc->name), size) ^ (uint64_t)mc->d_model;
    c->rng = 0x9e3779b97f4a7c15ull ^ base_now_us();
    if (c->cfg->path) {
        int n = serve_semcache_load(c->cache, c->cfg->path, base_now_us());
        if (n == -ENOENT)
            LOG_I(TAG, "no saved cache at %s yet", c->cfg->path);
        else if (n < 0) /* refused whole: start empty, keep the damaged file aside */
            LOG_W(TAG, "the saved cache %s is refused (%s): starting empty", c->cfg->path,
                  strerror(-n));
        else
            LOG_I(TAG, "loaded %d entries from %s", n, c->cfg->path);
        actor_counters_set(c->counters, "loaded", n > 0 ? n : 0);
    }
    return 0;
}

int actor_semcache_main(actor_env_t *env) {
    const actor_topology_t *topo = actor_env_topology(env);
    const char *me = actor_env_name(env);
    s_cache_t c = {0};
    c.env = env;
    c.cfg = actor_env_cfg(env);
    const char *path =
        c.cfg->model ? c.cfg->model : actor_topology_opt(topo, "worker0", "model", NULL);
    if (!path) {
        actor_env_fail(env, "%s: no model= option, and no worker0 to take one from", me);
        return 1;
    }
    c.loop = actor_loop_new(env, &c);
    c.counters = c.loop ? actor_loop_counters(c.loop) : NULL;
    char err[600];
    if (!c.loop || s_open(&c, path, err, sizeof err)) {
        actor_env_fail(env, "%s: %s", me, c.loop ? err : "out of memory");
        s_cleanup(&c);
        return 1;
    }
    char serr[128];
    if (actor_socks_open(env, s_socks, &c, serr, sizeof serr)) {
        actor_env_fail(env, "%s: cannot set up (%s)", me, serr);
        s_cleanup(&c);
        return 1;
    }
    actor_loop_inbox(c.loop, c.in, c.to_front, false, "");
    actor_loop_handle_cache_lookup(c.loop, s_on_lookup);
    actor_loop_handle_cache_store(c.loop, s_on_store);
    actor_loop_handle_cache_drop(c.loop, s_on_drop);
    actor_loop_on_stats(c.loop, s_on_stats);
    actor_loop_timer(c.loop, c.cfg->save_s * 1000, s_on_timer);
    LOG_I(me, "ready: %s mode, delta %.3g, %d entries at most, embedding with %s",
          msg_cache_mode_names[c.cfg->mode], c.cfg->delta, c.cfg->entries, path);
    actor_env_ready(env);
    actor_loop_run(c.loop, 500);
    s_save(&c);
    s_cleanup(&c);
    return 0;
}

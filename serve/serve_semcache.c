/* serve_semcache.c - the semantic cache's store (serve_semcache.h): entries in a fixed
 * array, the exact layer in a hash map, the semantic layer an exact scan of the context's
 * entries. */
#include "serve_semcache.h"

#include "base_map.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    bool used;
    uint64_t context, exact;
    char *name, *tags, *answer;
    size_t answer_len;
    uint64_t expires_us; /* 0: never */
    uint64_t last_us;    /* last stored or answered from: the LRU order */
    bool has_emb;
} s_entry_t;

struct serve_semcache_t {
    serve_semcache_config_t cfg;
    serve_semcache_bound_t *bound; /* borrowed */
    s_entry_t *e;                  /* (max_entries) */
    float *emb;                    /* (max_entries, dim) */
    base_map_t by_exact;           /* exact hash -> entry */
    int n;                         /* entries used */
};

serve_semcache_t *serve_semcache_new(const serve_semcache_config_t *cfg,
                                     serve_semcache_bound_t *bound) {
    if (!cfg || cfg->dim < 1 || cfg->max_entries < 1 || !bound)
        return NULL;
    serve_semcache_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->cfg = *cfg;
    c->bound = bound;
    c->e = calloc((size_t)cfg->max_entries, sizeof *c->e);
    c->emb = malloc((size_t)cfg->max_entries * cfg->dim * sizeof *c->emb);
    if (!c->e || !c->emb || base_map_init(&c->by_exact, (size_t)cfg->max_entries))
        serve_semcache_destroy(&c);
    return c;
}

static void s_drop(serve_semcache_t *c, int i) {
    s_entry_t *e = &c->e[i];
    if (!e->used)
        return;
    uint64_t v;
    if (base_map_get(&c->by_exact, e->exact, &v) && (int)v == i)
        base_map_del(&c->by_exact, e->exact);
    free(e->name), free(e->tags), free(e->answer);
    memset(e, 0, sizeof *e);
    c->n--;
}

void serve_semcache_destroy(serve_semcache_t **self_p) {
    if (!self_p || !*self_p)
        return;
    serve_semcache_t *c = *self_p;
    for (int i = 0; c->e && i < c->cfg.max_entries; i++)
        s_drop(c, i);
    free(c->e);
    free(c->emb);
    base_map_free(&c->by_exact);
    free(c);
    *self_p = NULL;
}

int serve_semcache_count(const serve_semcache_t *self) {
    return self->n;
}

static bool s_expired(const s_entry_t *e, uint64_t now) {
    return e->expires_us && now >= e->expires_us;
}

/* A slot for a new entry: a free one, else an expired one, else the least recently used. */
static int s_slot(serve_semcache_t *c, uint64_t now) {
    int lru = -1;
    for (int i = 0; i < c->cfg.max_entries; i++) {
        const s_entry_t *e = &c->e[i];
        if (!e->used || s_expired(e, now))
            return i;
        if (lru < 0 || e->last_us < c->e[lru].last_us)
            lru = i;
    }
    return lru;
}

static char *s_dup(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

int serve_semcache_put(serve_semcache_t *c, const serve_semcache_key_t *key, const char *name,
                       const char *tags, const char *answer, size_t answer_len, int64_t ttl_us,
                       uint64_t now_us) {
    if (!key || !name || (!answer && answer_len) || ttl_us < 0)
        return -EINVAL;
    uint64_t v;
    int i = base_map_get(&c->by_exact, key->exact, &v) ? (int)v : s_slot(c, now_us);
    s_drop(c, i);
    s_entry_t *e = &c->e[i];
    e->name = s_dup(name, strlen(name));
    e->tags = tags ? s_dup(tags, strlen(tags)) : NULL;
    e->answer = s_dup(answer ? answer : "", answer_len);
    if (!e->name || (tags && !e->tags) || !e->answer) {
        free(e->name), free(e->tags), free(e->answer);
        memset(e, 0, sizeof *e);
        return -ENOMEM;
    }
    e->used = true;
    e->context = key->context;
    e->exact = key->exact;
    e->answer_len = answer_len;
    e->expires_us = ttl_us ? now_us + (uint64_t)ttl_us : 0;
    e->last_us = now_us;
    e->has_emb = key->emb != NULL;
    if (key->emb)
        memcpy(c->emb + (size_t)i * c->cfg.dim, key->emb, (size_t)c->cfg.dim * sizeof *c->emb);
    base_map_put(&c->by_exact, key->exact, (uint64_t)i); /* sized for every entry: no growth */
    c->n++;
    return i;
}

/* x . y over n floats, eight partial sums (the compiler keeps them in vector lanes). */
static float s_dot(const float *x, const float *y, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += x[i + j] * y[i + j];
    float s = 0;
    for (int j = 0; j < 8; j++)
        s += acc[j];
    for (; i < n; i++)
        s += x[i] * y[i];
    return s;
}

static void s_answer(serve_semcache_t *c, int i, int kind, uint64_t now, serve_semcache_hit_t *h) {
    s_entry_t *e = &c->e[i];
    e->last_us = now;
    h->kind = kind;
    h->entry = i;
    h->answer = e->answer;
    h->answer_len = e->answer_len;
    h->name = e->name;
}

int serve_semcache_lookup(serve_semcache_t *c, const serve_semcache_key_t *key, double delta,
                          uint64_t now_us, serve_semcache_hit_t *hit) {
    memset(hit, 0, sizeof *hit);
    hit->entry = -1;
    hit->similarity = -2;
    hit->threshold = 2;
    uint64_t v;
    if (base_map_get(&c->by_exact, key->exact, &v)) {
        int i = (int)v;
        if (s_expired(&c->e[i], now_us)) {
            s_drop(c, i);
        } else if (c->e[i].context == key->context) {
            hit->similarity = 1;
            s_answer(c, i, SERVE_SEMCACHE_EXACT, now_us, hit);
            return hit->kind;
        }
    }
    if (!key->emb)
        return SERVE_SEMCACHE_MISS;
    int best = -1;
    float best_s = -2;
    for (int i = 0; i < c->cfg.max_entries; i++) {
        const s_entry_t *e = &c->e[i];
        if (!e->used || !e->has_emb || e->context != key->context)
            continue;
        if (s_expired(e, now_us)) {
            s_drop(c, i);
            continue;
        }
        float s = s_dot(key->emb, c->emb + (size_t)i * c->cfg.dim, c->cfg.dim);
        if (s > best_s)
            best_s = s, best = i;
    }
    hit->entry = best;
    hit->similarity = best_s;
    if (best < 0 || !(delta > 0 && delta < 1))
        return SERVE_SEMCACHE_MISS;
    hit->threshold = serve_semcache_bound_threshold(c->bound, delta);
    if (best_s >= hit->threshold)
        s_answer(c, best, SERVE_SEMCACHE_SEMANTIC, now_us, hit);
    return hit->kind;
}

/* tag is one of the comma-separated tags. */
static bool s_has_tag(const char *tags, const char *tag) {
    size_t n = strlen(tag);
    for (const char *p = tags; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !memcmp(p, tag, n))
            return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

int serve_semcache_invalidate(serve_semcache_t *c, const char *prefix, const char *tag) {
    int n = 0;
    for (int i = 0; i < c->cfg.max_entries; i++) {
        const s_entry_t *e = &c->e[i];
        if (!e->used || (prefix && strncmp(e->name, prefix, strlen(prefix))) ||
            (tag && !s_has_tag(e->tags, tag)))
            continue;
        s_drop(c, i);
        n++;
    }
    return n;
}

/* Whole words (ASCII letters and digits) that make a question time-sensitive. */
static const char *const s_volatile[] = {
    "today", "tonight", "now",      "current",   "currently", "latest", "recent",   "recently",
    "price", "prices",  "weather",  "score",     "scores",    "news",   "stock",    "stocks",
    "rate",  "rates",   "tomorrow", "yesterday", "week",      "live",   "trending", NULL};

int64_t serve_semcache_ttl(const char *text, size_t len, int64_t default_us, int64_t short_us) {
    size_t i = 0;
    while (i < len) {
        while (i < len && !isalnum((unsigned char)text[i]))
            i++;
        size_t j = i;
        while (j < len && isalnum((unsigned char)text[j]))
            j++;
        size_t n = j - i;
        int year = 0; /* a year from 2020 on */
        for (size_t k = i; n == 4 && k < j && year >= 0; k++)
            year = isdigit((unsigned char)text[k]) ? year * 10 + (text[k] - '0') : -1;
        if (year >= 2020 && year <= 2099)
            return short_us;
        for (int w = 0; s_volatile[w]; w++)
            if (strlen(s_volatile[w]) == n && !strncasecmp(text + i, s_volatile[w], n))
                return short_us;
        i = j;
    }
    return default_us;
}

/* serve_semcache.c - the semantic cache's store (serve_semcache.h): entries in a fixed
 * array, the exact layer in a hash map, the semantic layer an exact scan of the context's
 * entries. */
#include "serve_semcache.h"

#include "base_map.h"
#include "kern_ops.h"
#include "serve_semcache_ann.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <xxhash.h>

#define S_CHUNK 1024  /* rows a scan scores at once */
#define S_ANN_K 32    /* candidates the approximate index is asked for */
#define S_ANN_EF 128  /* its search beam */
#define S_ANN_M 16    /* its graph's degree */
#define S_ANN_EFC 100 /* its build beam */

typedef struct {
    bool used;
    uint64_t context, exact;
    char *name, *tags, *answer;
    size_t answer_len;
    uint64_t expires_us; /* 0: never */
    uint64_t last_us;    /* last stored or answered from: the LRU order */
    bool has_emb;
    uint8_t meta; /* the caller's (serve_semcache_set_meta) */
} s_entry_t;

struct serve_semcache_t {
    serve_semcache_config_t cfg;
    serve_semcache_bound_t *bound; /* borrowed */
    s_entry_t *e;                  /* (max_entries) */
    uint16_t *emb;                 /* (max_entries, dim) F16: half the bytes a scan reads */
    float *sims;                   /* (S_CHUNK) a scan's similarities */
    const kern_ops_t *ops;         /* the CPU's kernels: the scan is their F16 gemm */
    int hi;                        /* 1 + the highest slot ever used: the scan's end */
    int n_emb;                     /* entries with an embedding */
    serve_semcache_ann_t *ann;     /* the approximate index, once n_emb reached ann_min */
    float *row;                    /* (dim) an embedding back in F32 */
    base_map_t by_exact;           /* exact hash -> entry */
    int n;                         /* entries used */
    int hint;                      /* where the search for a free slot starts */
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
    c->sims = malloc(S_CHUNK * sizeof *c->sims);
    c->row = malloc((size_t)cfg->dim * sizeof *c->row);
    if (cfg->ann_min > 0) /* kept from the first entry on, searched from ann_min on */
        c->ann = serve_semcache_ann_new(cfg->dim, cfg->max_entries, S_ANN_M, S_ANN_EFC);
    c->ops = kern_ops_best();
    if (!c->e || !c->emb || !c->sims || !c->row || cfg->ann_min < 0 ||
        (cfg->ann_min > 0 && !c->ann) || base_map_init(&c->by_exact, (size_t)cfg->max_entries))
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
    if (e->has_emb) {
        c->n_emb--;
        if (c->ann)
            serve_semcache_ann_remove(c->ann, i);
    }
    memset(e, 0, sizeof *e);
    c->n--;
}

/* Index entry i's embedding (the F16 row back in F32) in the approximate index.  A
 * failure (no memory) drops the index: the exact scan answers from then on. */
static void s_ann_note(serve_semcache_t *c, int i) {
    int dim = c->cfg.dim;
    c->ops->dequant_row(KERN_F16, c->emb + (size_t)i * dim, c->row, dim);
    if (serve_semcache_ann_add(c->ann, i, c->row))
        serve_semcache_ann_destroy(&c->ann);
}

void serve_semcache_destroy(serve_semcache_t **self_p) {
    if (!self_p || !*self_p)
        return;
    serve_semcache_t *c = *self_p;
    for (int i = 0; c->e && i < c->cfg.max_entries; i++)
        s_drop(c, i);
    free(c->e);
    free(c->emb);
    free(c->sims);
    free(c->row);
    serve_semcache_ann_destroy(&c->ann);
    base_map_free(&c->by_exact);
    free(c);
    *self_p = NULL;
}

int serve_semcache_count(const serve_semcache_t *self) {
    return self->n;
}

int serve_semcache_indexed(const serve_semcache_t *c) {
    return c->ann ? serve_semcache_ann_count(c->ann) : 0;
}

static bool s_expired(const s_entry_t *e, uint64_t now) {
    return e->expires_us && now >= e->expires_us;
}

/* A slot for a new entry: a free one (searched from the hint on, so that filling the cache
 * costs O(1) a put, not a scan of the entries before it), else an expired one, else the
 * least recently used. */
static int s_slot(serve_semcache_t *c, uint64_t now) {
    const int max = c->cfg.max_entries;
    for (int k = 0; c->n < max && k < max; k++) {
        int i = (c->hint + k) % max;
        if (!c->e[i].used) {
            c->hint = (i + 1) % max;
            return i;
        }
    }
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
    if (i >= c->hi)
        c->hi = i + 1;
    if (key->emb) {
        c->ops->quant_row(KERN_F16, key->emb, c->emb + (size_t)i * c->cfg.dim, c->cfg.dim);
        c->n_emb++;
        if (c->ann)
            s_ann_note(c, i);
    }
    base_map_put(&c->by_exact, key->exact, (uint64_t)i); /* sized for every entry: no growth */
    c->n++;
    return i;
}

int serve_semcache_set_meta(serve_semcache_t *c, int entry, int meta) {
    if (entry < 0 || entry >= c->cfg.max_entries || !c->e[entry].used || meta < 0 || meta > 255)
        return -EINVAL;
    c->e[entry].meta = (uint8_t)meta;
    return 0;
}

static void s_answer(serve_semcache_t *c, int i, int kind, uint64_t now, serve_semcache_hit_t *h) {
    s_entry_t *e = &c->e[i];
    e->last_us = now;
    h->kind = kind;
    h->entry = i;
    h->answer = e->answer;
    h->answer_len = e->answer_len;
    h->name = e->name;
    h->meta = e->meta;
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
    int best = -1, dim = c->cfg.dim;
    float best_s = -2;
    if (c->ann && c->n_emb >= c->cfg.ann_min) { /* approximate: the best candidate of the
                                                   request's context, if any */
        int labels[S_ANN_K];
        float sims[S_ANN_K];
        int n = serve_semcache_ann_search(c->ann, key->emb, S_ANN_K, S_ANN_EF, labels, sims);
        for (int j = 0; j < n; j++) {
            const s_entry_t *e = &c->e[labels[j]];
            if (e->used && e->has_emb && e->context == key->context && !s_expired(e, now_us) &&
                sims[j] > best_s)
                best_s = sims[j], best = labels[j];
        }
    }
    for (int r0 = 0; best < 0 && r0 < c->hi; r0 += S_CHUNK) { /* exact: a chunk at a time */
        int nr = c->hi - r0 < S_CHUNK ? c->hi - r0 : S_CHUNK, any = 0;
        for (int i = r0; i < r0 + nr; i++) {
            const s_entry_t *e = &c->e[i];
            if (e->used && e->has_emb && e->context == key->context && s_expired(e, now_us))
                s_drop(c, i);
            any += e->used && e->has_emb && e->context == key->context;
        }
        if (!any)
            continue;
        c->ops->gemm(KERN_F16, dim, nr, 1, c->emb + (size_t)r0 * dim, (size_t)dim * 2, key->emb,
                     (size_t)dim * sizeof(float), c->sims, (size_t)nr);
        for (int i = r0; i < r0 + nr; i++) {
            const s_entry_t *e = &c->e[i];
            if (e->used && e->has_emb && e->context == key->context && c->sims[i - r0] > best_s)
                best_s = c->sims[i - r0], best = i;
        }
    }
    hit->entry = best;
    hit->similarity = best_s;
    if (best >= 0) { /* the nearest's answer, for a verification (LRU order unchanged) */
        hit->answer = c->e[best].answer;
        hit->answer_len = c->e[best].answer_len;
        hit->name = c->e[best].name;
        hit->meta = c->e[best].meta;
    }
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

/* ---- persistence: "SMC1", dim, entries, observations; each entry: context, exact,
 * expires, has_emb, three string lengths, the strings, the embedding; each observation:
 * similarity, correct; then the XXH64 of all that.  Little-endian, as the host writes it
 * (the file is the host's own). */

#define S_MAGIC 0x31434d53u /* "SMC1" */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} s_buf_t;

static int s_put(s_buf_t *b, const void *x, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q)
            return -ENOMEM;
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
    return 0;
}

int serve_semcache_save(const serve_semcache_t *c, const char *path, uint64_t now_us) {
    s_buf_t b = {0};
    float *row = malloc((size_t)c->cfg.dim * sizeof *row);
    if (!row)
        return -ENOMEM;
    uint32_t head[4] = {S_MAGIC, (uint32_t)c->cfg.dim, 0, 0};
    int rc = s_put(&b, head, sizeof head);
    uint32_t n_entries = 0;
    for (int i = 0; !rc && i < c->cfg.max_entries; i++) {
        const s_entry_t *e = &c->e[i];
        if (!e->used || s_expired(e, now_us))
            continue;
        uint64_t f[3] = {e->context, e->exact, e->expires_us};
        uint32_t l[4] = {e->has_emb | (uint32_t)e->meta << 1, (uint32_t)strlen(e->name),
                         e->tags ? (uint32_t)strlen(e->tags) : 0, (uint32_t)e->answer_len};
        if (e->has_emb) /* the file keeps F32 (the format does not depend on the store's) */
            c->ops->dequant_row(KERN_F16, c->emb + (size_t)i * c->cfg.dim, row, c->cfg.dim);
        rc = s_put(&b, f, sizeof f) || s_put(&b, l, sizeof l) || s_put(&b, e->name, l[1]) ||
             s_put(&b, e->tags ? e->tags : "", l[2]) || s_put(&b, e->answer, l[3]) ||
             (e->has_emb && s_put(&b, row, (size_t)c->cfg.dim * sizeof(float)));
        n_entries++;
    }
    float s;
    bool ok;
    uint32_t n_obs = 0;
    for (int i = 0; !rc && serve_semcache_bound_at(c->bound, i, &s, &ok); i++, n_obs++) {
        uint8_t o = ok;
        rc = s_put(&b, &s, sizeof s) || s_put(&b, &o, 1);
    }
    if (!rc) {
        memcpy(b.p + 8, &n_entries, 4);
        memcpy(b.p + 12, &n_obs, 4);
        uint64_t h = XXH64(b.p, b.n, 0);
        rc = s_put(&b, &h, sizeof h);
    }
    free(row);
    if (rc) {
        free(b.p);
        return -ENOMEM;
    }
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        free(b.p);
        return -ENAMETOOLONG;
    }
    FILE *f = fopen(tmp, "wb");
    rc = !f ? -errno : fwrite(b.p, 1, b.n, f) != b.n ? -EIO : 0;
    if (f && (fflush(f) || fsync(fileno(f))) && !rc)
        rc = -EIO;
    if (f && fclose(f) && !rc)
        rc = -EIO;
    if (!rc && rename(tmp, path))
        rc = -errno;
    if (rc)
        unlink(tmp);
    free(b.p);
    return rc;
}

/* Take n bytes at *at of the file's body (end: where the checksum starts). */
static const uint8_t *s_take(const uint8_t *p, size_t end, size_t *at, size_t n) {
    if (n > end - *at)
        return NULL;
    const uint8_t *q = p + *at;
    *at += n;
    return q;
}

int serve_semcache_load(serve_semcache_t *c, const char *path, uint64_t now_us) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    uint8_t *p = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 65536;
            uint8_t *q = realloc(p, cap);
            if (!q) {
                free(p);
                fclose(f);
                return -ENOMEM;
            }
            p = q;
        }
        size_t got = fread(p + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    int rc = -EBADMSG;
    uint64_t h;
    uint32_t head[4];
    if (n < sizeof head + sizeof h)
        goto out;
    size_t end = n - sizeof h, at = sizeof head;
    memcpy(&h, p + end, sizeof h);
    memcpy(head, p, sizeof head);
    if (XXH64(p, end, 0) != h || head[0] != S_MAGIC)
        goto out;
    if ((int)head[1] != c->cfg.dim) {
        rc = -EINVAL;
        goto out;
    }
    /* check every record fits before loading any */
    for (int pass = 0; pass < 2; pass++) {
        at = sizeof head;
        int loaded = 0;
        for (uint32_t i = 0; i < head[2]; i++) {
            const uint8_t *fx = s_take(p, end, &at, 24), *lx = s_take(p, end, &at, 16);
            if (!fx || !lx)
                goto out;
            uint64_t fv[3];
            uint32_t l[4];
            memcpy(fv, fx, sizeof fv);
            memcpy(l, lx, sizeof l);
            const uint8_t *name = s_take(p, end, &at, l[1]), *tags = s_take(p, end, &at, l[2]);
            const uint8_t *ans = s_take(p, end, &at, l[3]);
            bool has_emb = l[0] & 1; /* and the meta byte above it */
            const uint8_t *emb =
                has_emb ? s_take(p, end, &at, (size_t)c->cfg.dim * sizeof(float)) : NULL;
            if (!name || !tags || !ans || (has_emb && !emb) || l[0] > 511)
                goto out;
            if (pass == 0 || (fv[2] && now_us >= fv[2]))
                continue;
            char *nm = s_dup((const char *)name, l[1]), *tg = s_dup((const char *)tags, l[2]);
            float *e = NULL;
            if (emb && (e = malloc((size_t)c->cfg.dim * sizeof *e)))
                memcpy(e, emb, (size_t)c->cfg.dim * sizeof *e);
            serve_semcache_key_t k = {fv[0], fv[1], e};
            int64_t ttl = fv[2] ? (int64_t)(fv[2] - now_us) : 0;
            int r = nm && tg && (e || !emb)
                        ? serve_semcache_put(c, &k, nm, l[2] ? tg : NULL, (const char *)ans, l[3],
                                             ttl, now_us)
                        : -ENOMEM;
            free(nm), free(tg), free(e);
            if (r < 0) {
                rc = r;
                goto out;
            }
            serve_semcache_set_meta(c, r, (int)(l[0] >> 1));
            loaded++;
        }
        for (uint32_t i = 0; i < head[3]; i++) {
            const uint8_t *ox = s_take(p, end, &at, 5);
            if (!ox)
                goto out;
            float s;
            memcpy(&s, ox, 4);
            if (pass == 1)
                serve_semcache_bound_observe(c->bound, s, ox[4] != 0);
        }
        if (at != end)
            goto out;
        rc = loaded;
    }
out:
    free(p);
    return rc;
}

/* serve_semcache.h - the semantic cache's store (issue 28), as pure policy: no sockets, no
 * model.  Entries are answers keyed by
 *   context  a hash of everything that changes the answer besides the last user turn:
 *            the model, the system prompt, the conversation before that turn, the
 *            parameters that change the answer (a request only ever matches entries of its
 *            own context: the same question after another conversation is a miss);
 *   exact    a hash of the whole rendered request (context included): the exact layer;
 *   emb      an L2-normalised embedding of the request (the semantic layer; optional).
 * A lookup tries the exact layer, then the nearest entry of the same context by cosine
 * similarity (an exact search: a dot product per entry; past ann_min embedded entries an
 * approximate one, falling back to the exact search when none of the approximate
 * candidates is of the request's context), which answers only
 * when its similarity reaches the error bound's threshold for the caller's delta
 * (serve_semcache_bound.h).  Entries expire (a TTL each, from serve_semcache_ttl: shorter
 * for time-sensitive questions), are invalidated by name prefix or tag, and the least
 * recently used goes when the cache is full.  Not thread-safe: one actor owns it. */
#ifndef SERVE_SEMCACHE_H
#define SERVE_SEMCACHE_H

#include "serve_semcache_bound.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct serve_semcache_t serve_semcache_t;

typedef struct {
    int dim;         /* embedding width (> 0) */
    int max_entries; /* the size bound (> 0) */
    int ann_min;     /* > 0: every embedded entry is also put in an approximate index (HNSW,
                        serve_semcache_ann.h), which the semantic layer searches instead of
                        scanning them all once there are ann_min of them; 0: none, always
                        the exact scan */
} serve_semcache_config_t;

typedef struct {
    uint64_t context;
    uint64_t exact;
    const float *emb; /* (dim), L2-normalised; NULL: the exact layer only */
} serve_semcache_key_t;

enum { SERVE_SEMCACHE_MISS = 0, SERVE_SEMCACHE_EXACT = 1, SERVE_SEMCACHE_SEMANTIC = 2 };

typedef struct {
    int kind;           /* SERVE_SEMCACHE_MISS / _EXACT / _SEMANTIC */
    int entry;          /* the entry answered from; on a miss the nearest one (-1: none) */
    float similarity;   /* to the nearest entry of the context (-2 when there is none) */
    double threshold;   /* the threshold the semantic layer used (> 1: none yet) */
    const char *answer; /* the answer (valid until the cache next changes); on a miss the
                           nearest entry's (what a verification compares), or NULL */
    size_t answer_len;
    const char *name; /* the entry's name (a request id or a knowledge-base record), or NULL */
    int meta;         /* the entry's meta (serve_semcache_set_meta) */
} serve_semcache_hit_t;

/* bound: the error bound the semantic layer asks (borrowed; outlives the cache).  NULL on
 * bad arguments or no memory. */
serve_semcache_t *serve_semcache_new(const serve_semcache_config_t *cfg,
                                     serve_semcache_bound_t *bound);
void serve_semcache_destroy(serve_semcache_t **self_p);

/* Store answer under key, named name (a request id or a knowledge-base record: what the
 * trace cites), with tags (comma-separated, or NULL) and a time to live (0: never
 * expires).  Replaces an entry with the same exact hash.  The least recently used entry
 * goes when the cache is full.  Returns the entry, or -EINVAL / -ENOMEM. */
int serve_semcache_put(serve_semcache_t *self, const serve_semcache_key_t *key, const char *name,
                       const char *tags, const char *answer, size_t answer_len, int64_t ttl_us,
                       uint64_t now_us);
/* Keep a small value (0..255) with entry (what put returned): the actor keeps how the
 * answer ended.  Saved and loaded with the entry.  0 or -EINVAL. */
int serve_semcache_set_meta(serve_semcache_t *self, int entry, int meta);
/* Look key up with a wrong-hit rate of at most delta for semantic hits (0 < delta < 1;
 * delta 0: the exact layer only).  Expired entries are dropped on the way.  The kind. */
int serve_semcache_lookup(serve_semcache_t *self, const serve_semcache_key_t *key, double delta,
                          uint64_t now_us, serve_semcache_hit_t *hit);
/* Drop the entries whose name starts with prefix (NULL: any) and that carry tag (NULL:
 * any); both NULL drops everything.  Returns how many went. */
int serve_semcache_invalidate(serve_semcache_t *self, const char *prefix, const char *tag);
/* Entries held (expired ones not yet dropped included). */
int serve_semcache_count(const serve_semcache_t *self);
/* Entries in the approximate index (0 without one). */
int serve_semcache_indexed(const serve_semcache_t *self);

/* Persistence: every live entry and the error bound's observations to path, written to
 * path.tmp and renamed over it, ending with an XXH64 checksum of everything before it.
 * 0 or -errno. */
int serve_semcache_save(const serve_semcache_t *self, const char *path, uint64_t now_us);
/* Read what serve_semcache_save wrote into an empty cache (entries, and the observations
 * into its bound).  A file whose checksum, magic or sizes do not match is refused whole
 * (-EBADMSG, nothing loaded); another embedding width is -EINVAL; a missing file -ENOENT.
 * Entries expired by now_us are skipped.  Returns the entries loaded. */
int serve_semcache_load(serve_semcache_t *self, const char *path, uint64_t now_us);

/* The time to live of an answer to question text (len bytes): short_us when the question
 * is time-sensitive -- it names a moment or a fast-changing quantity ("today", "now",
 * "current", "latest", "this week", "price", "weather", "score", "news", "stock", a year
 * from 2020 on, ... matched case-insensitively as whole words) -- else default_us. */
int64_t serve_semcache_ttl(const char *text, size_t len, int64_t default_us, int64_t short_us);

#endif

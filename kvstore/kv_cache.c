/* kv_cache.c - T0: a worker's paged KV pool, block tables with reference
 * counts, a prefix index over published blocks, copy-on-write and eviction of
 * unreferenced cached blocks in policy order.  Owns the pool and the index.
 *
 * The index is a radix tree at block granularity: a node is a block, an edge
 * from a parent is the chained hash kv_hash_block(parent, next B tokens), so
 * the tree needs no explicit child pointers: `by_hash` maps every published
 * block's hash to its slot (full and partial blocks), and `partials` maps a
 * parent hash (0 for the root) to a list of that node's partial children,
 * which a lookup compares token by token (longest prefix of the request
 * wins).  A published block is immutable until evicted.
 *
 * Block states:  FREE (on the free stack)  --take-->  USED (refs >= 1)
 *   USED --last unref--> CACHED if published (a policy candidate), else FREE
 *   CACHED --attach--> USED;  CACHED --evict (callback first)--> taken.
 */
#include "kv_cache.h"

#include "base_clock.h"
#include "base_log.h"
#include "base_map.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "kv_cache"

typedef enum { S_FREE = 0, S_USED = 1, S_CACHED = 2 } s_state_t;

/* Per-block bookkeeping; the block's tokens live in kv_cache_t.tokens. */
typedef struct {
    uint64_t hash;    /* chained hash of the content: published blocks, and the full
                         blocks below a table's n_published; 0 when unknown */
    uint64_t parent;  /* hash of the block before it (0 for the first) */
    int32_t refs;     /* tables holding the block */
    int32_t p_next;   /* next partial child of the same parent, -1 at the end */
    int32_t p_prev;   /* previous one, -1 at the head */
    int16_t n_tokens; /* tokens named by hash (block_size: a full block) */
    uint8_t state;    /* s_state_t */
    uint8_t pin;      /* importance 0..255 */
    bool published;   /* in the index (read-only until evicted) */
    bool in_lower;    /* a lower tier holds it already */
} s_block_t;

struct kv_cache_t {
    kv_cache_config_t cfg;      /* as given */
    kern_kv_shape_t shape;      /* block shape */
    kern_kv_pool_t pool;        /* (n_blocks, block_bytes) the blocks' data, T0 format */
    s_block_t *blk;             /* (n_blocks) */
    int32_t *tokens;            /* (n_blocks, block_size) tokens of each block's meta */
    int32_t *free_ids;          /* (n_blocks) stack of FREE blocks; first n_free valid */
    int n_free;                 /* FREE blocks */
    int n_cached;               /* CACHED blocks (== policy candidates) */
    int n_used;                 /* USED blocks */
    kv_policy_t *policy;        /* eviction order of the CACHED blocks */
    base_map_t by_hash;         /* hash -> published block */
    base_map_t partials;        /* parent hash -> first published partial child */
    int32_t *scratch;           /* (n_blocks) block ids during one call */
    kv_cache_evict_fn on_evict; /* or NULL */
    void *evict_arg;
    kv_cache_change_fn on_change; /* or NULL */
    void *change_arg;
    uint64_t (*clock)(void *arg); /* microseconds; NULL: CLOCK_MONOTONIC */
    void *clock_arg;
    kv_cache_stats_t st; /* counters (the n_* fields are filled on request) */
    uint8_t *stage;      /* backend pool: one block's bytes on the host (host_alloc) */
};

/* ---- the two indexes: base_map from a hash to a block id */

/* The block id of k, or -1. */
static int32_t s_map_get(const base_map_t *m, uint64_t k) {
    uint64_t v;
    return base_map_get(m, k, &v) ? (int32_t)v : -1;
}

/* Insert or overwrite.  Never grows: at most n_blocks entries, and the maps
 * are sized for n_blocks (kv_cache_new). */
static void s_map_put(base_map_t *m, uint64_t k, int32_t v) {
    int rc = base_map_put(m, k, (uint64_t)v);
    assert(rc == 0);
    (void)rc;
}

/* ---- helpers */

static uint64_t s_now(const kv_cache_t *self) {
    return self->clock ? self->clock(self->clock_arg) : base_now_us();
}

static int32_t *s_tokens(const kv_cache_t *self, int id) {
    return self->tokens + (size_t)id * self->cfg.block_size;
}

static uint8_t *s_data(const kv_cache_t *self, int id) {
    return self->pool.base + (size_t)id * self->pool.block_bytes;
}

/* Block id's bytes where the host can read them: the pool itself, or with a backend
 * pool the staging buffer after the block moved out into it; NULL (counted) when the move
 * failed. */
static const uint8_t *s_host_view(kv_cache_t *self, int id) {
    kern_backend_t *be = self->cfg.backend;
    if (!be)
        return s_data(self, id);
    if (be->block_out(be, self->stage, s_data(self, id), self->pool.block_bytes)) {
        self->st.move_errors++;
        return NULL;
    }
    return self->stage;
}

/* Copy block src's bytes over block dst's (copy-on-write). */
static void s_copy_block(kv_cache_t *self, int dst, int src) {
    kern_backend_t *be = self->cfg.backend;
    if (!be)
        memcpy(s_data(self, dst), s_data(self, src), self->pool.block_bytes);
    else if (be->copy(be, s_data(self, dst), s_data(self, src), self->pool.block_bytes))
        self->st.move_errors++; /* the backend's error fails the next forward pass too */
}

/* Block id's bytes from data in format fmt (converted to the T0 format): 0 or -errno. */
static int s_fill_block(kv_cache_t *self, int id, int fmt, const void *data, int n_tokens) {
    kern_backend_t *be = self->cfg.backend;
    uint8_t *dst = be ? self->stage : s_data(self, id);
    int rc = kv_codec_convert(&self->shape, fmt, data, self->cfg.fmt, dst, n_tokens);
    if (rc)
        return rc < 0 ? rc : -EINVAL;
    if (be && be->block_in(be, s_data(self, id), self->stage, self->pool.block_bytes)) {
        self->st.move_errors++;
        return -EIO;
    }
    return 0;
}

/* The pool: host memory (kern_kv_pool_init), or the backend's.  0 or -errno. */
static int s_pool_init(kv_cache_t *self, const kern_kv_shape_t *s, kern_type_t type, int n) {
    kern_backend_t *be = self->cfg.backend;
    if (!be)
        return kern_kv_pool_init(&self->pool, s, type, n);
    size_t bb = kern_kv_block_bytes(s, type);
    if (bb == 0 || (size_t)n > SIZE_MAX / bb || !be->alloc || !be->copy || !be->host_alloc ||
        !be->block_out || !be->block_in)
        return -EINVAL;
    void *base = NULL;
    int rc = be->alloc(be, &base, bb * (size_t)n);
    if (rc)
        return rc;
    self->pool = (kern_kv_pool_t){type, s->block_size, bb, n, base};
    return be->host_alloc(be, (void **)&self->stage, bb);
}

static void s_pool_free(kv_cache_t *self) {
    kern_backend_t *be = self->cfg.backend;
    if (!be) {
        kern_kv_pool_free(&self->pool);
        return;
    }
    be->free(be, self->pool.base);
    be->host_free(be, self->stage);
    self->pool.base = self->stage = NULL;
}

static int s_blocks_for(const kv_cache_t *self, int n_positions) {
    if (n_positions <= 0)
        return 0;
    return (n_positions + self->cfg.block_size - 1) / self->cfg.block_size;
}

/* Make room for n entries in seq's table.  0 or -ENOMEM (table unchanged). */
static int s_grow(kv_seq_t *seq, int n) {
    if (n <= seq->cap)
        return 0;
    int cap = seq->cap > 0 ? seq->cap : 8;
    while (cap < n)
        cap *= 2;
    int32_t *b = realloc(seq->blocks, (size_t)cap * sizeof *b);
    if (!b)
        return -ENOMEM;
    seq->blocks = b;
    seq->cap = cap;
    return 0;
}

static bool s_seq_ok(const kv_cache_t *self, const kv_seq_t *seq) {
    if (!seq || seq->n < 0 || seq->n > seq->cap || (seq->n > 0 && !seq->blocks))
        return false;
    if (seq->n_published < 0 || seq->n_published > seq->n)
        return false;
    for (int i = 0; i < seq->n; i++)
        if (seq->blocks[i] < 0 || seq->blocks[i] >= self->cfg.n_blocks)
            return false;
    return true;
}

/* Reset n_published to k (<= the current one) and its tail hash. */
static void s_set_published(const kv_cache_t *self, kv_seq_t *seq, int k) {
    seq->n_published = k;
    seq->tail_hash = k > 0 ? self->blk[seq->blocks[k - 1]].hash : 0;
}

/* ---- the index */

static void s_index_add(kv_cache_t *self, int id) {
    s_block_t *b = &self->blk[id];
    assert(!b->published && s_map_get(&self->by_hash, b->hash) < 0);
    s_map_put(&self->by_hash, b->hash, id);
    if (self->on_change && b->n_tokens == self->cfg.block_size)
        self->on_change(self->change_arg, KV_CACHE_STORED, b->hash, b->parent, s_tokens(self, id),
                        b->n_tokens);
    b->p_next = b->p_prev = -1;
    if (b->n_tokens < self->cfg.block_size) {
        int32_t head = s_map_get(&self->partials, b->parent);
        b->p_next = head;
        if (head >= 0)
            self->blk[head].p_prev = id;
        s_map_put(&self->partials, b->parent, id);
    }
    b->published = true;
}

static void s_index_del(kv_cache_t *self, int id) {
    s_block_t *b = &self->blk[id];
    if (!b->published)
        return;
    assert(s_map_get(&self->by_hash, b->hash) == id);
    base_map_del(&self->by_hash, b->hash);
    if (self->on_change && b->n_tokens == self->cfg.block_size)
        self->on_change(self->change_arg, KV_CACHE_REMOVED, b->hash, b->parent, s_tokens(self, id),
                        b->n_tokens);
    if (b->n_tokens < self->cfg.block_size) {
        if (b->p_prev >= 0)
            self->blk[b->p_prev].p_next = b->p_next;
        else if (b->p_next >= 0)
            s_map_put(&self->partials, b->parent, b->p_next);
        else
            base_map_del(&self->partials, b->parent);
        if (b->p_next >= 0)
            self->blk[b->p_next].p_prev = b->p_prev;
    }
    b->p_next = b->p_prev = -1;
    b->published = false;
}

/* The published full block with this hash holding exactly these tokens, or -1. */
static int s_find_full(const kv_cache_t *self, uint64_t h, const int32_t *tokens) {
    int id = s_map_get(&self->by_hash, h);
    if (id < 0 || self->blk[id].n_tokens != self->cfg.block_size)
        return -1;
    if (memcmp(s_tokens(self, id), tokens, (size_t)self->cfg.block_size * sizeof *tokens))
        return -1; /* a 64-bit collision: treat as absent */
    return id;
}

/* Walk the tree along tokens[0..n): full blocks by chained hash, then the
 * longest partial child whose tokens are a prefix of the rest.  The blocks go
 * to ids (n_blocks entries suffice); *n_ids gets their count.  Returns the
 * positions covered. */
static int s_lookup(const kv_cache_t *self, const int32_t *tokens, int n, int32_t *ids,
                    int *n_ids) {
    const int B = self->cfg.block_size;
    uint64_t h = 0;
    int f = 0;
    while ((f + 1) * B <= n) {
        uint64_t hh = kv_hash_block(h, tokens + (size_t)f * B, B);
        int id = s_find_full(self, hh, tokens + (size_t)f * B);
        if (id < 0)
            break;
        ids[f++] = id;
        h = hh;
    }
    int rest = n - f * B, best = -1, best_len = 0;
    int32_t id = s_map_get(&self->partials, h);
    for (; id >= 0; id = self->blk[id].p_next) {
        int m = self->blk[id].n_tokens;
        if (m <= rest && m > best_len && self->blk[id].parent == h &&
            !memcmp(s_tokens(self, id), tokens + (size_t)f * B, (size_t)m * sizeof *tokens)) {
            best = id;
            best_len = m;
        }
    }
    *n_ids = f;
    if (best >= 0)
        ids[(*n_ids)++] = best;
    return f * B + best_len;
}

/* ---- block life cycle */

/* Hand a cached block to the evict callback and drop it from the index and
 * the policy; the caller reuses its slot. */
static void s_meta_of(const kv_cache_t *self, int id, kv_meta_t *meta) {
    const s_block_t *b = &self->blk[id];
    meta->hash = b->hash;
    meta->parent = b->parent;
    meta->n_tokens = b->n_tokens;
    meta->pin = b->pin;
    memcpy(meta->tokens, s_tokens(self, id), (size_t)b->n_tokens * sizeof *meta->tokens);
}

static void s_evict(kv_cache_t *self, int id) {
    s_block_t *b = &self->blk[id];
    assert(b->state == S_CACHED && b->refs == 0);
    const uint8_t *data = self->on_evict ? s_host_view(self, id) : NULL;
    if (data) {
        kv_meta_t meta;
        s_meta_of(self, id, &meta);
        kv_cache_evicted_t ev = {&meta, self->cfg.fmt, data, self->pool.block_bytes, b->in_lower};
        self->on_evict(self->evict_arg, &ev);
    }
    s_index_del(self, id);
    kv_policy_remove(self->policy, id);
    self->n_cached--;
    self->st.evictions++;
}

/* A slot for new content: a free block, else the policy's victim (evicted).
 * The caller has checked n_free + n_cached > 0.  Returns it USED, refs 1,
 * meta cleared. */
static int s_take(kv_cache_t *self) {
    int id;
    if (self->n_free > 0) {
        id = self->free_ids[--self->n_free];
    } else {
        id = kv_policy_victim(self->policy);
        assert(id >= 0);
        s_evict(self, id);
    }
    s_block_t *b = &self->blk[id];
    memset(b, 0, sizeof *b);
    b->p_next = b->p_prev = -1;
    b->state = S_USED;
    b->refs = 1;
    self->n_used++;
    return id;
}

/* One table reference fewer.  The last one makes a published block cached (a
 * candidate, keeping its use count) and a private one free. */
static void s_unref(kv_cache_t *self, int id, uint64_t now) {
    s_block_t *b = &self->blk[id];
    if (b->refs <= 0) {
        LOG_W(TAG, "block %d released with no reference", id);
        return;
    }
    if (--b->refs > 0)
        return;
    self->n_used--;
    if (b->published) {
        b->state = S_CACHED;
        self->n_cached++;
        kv_policy_insert(self->policy, id, now, b->pin, false);
    } else {
        b->state = S_FREE;
        b->hash = 0;
        self->free_ids[self->n_free++] = id;
    }
}

/* Take a reference on a published block found by a lookup. */
static void s_ref(kv_cache_t *self, int id, uint64_t now) {
    s_block_t *b = &self->blk[id];
    if (b->refs++ == 0) {
        assert(b->state == S_CACHED);
        kv_policy_remove(self->policy, id);
        b->state = S_USED;
        self->n_cached--;
        self->n_used++;
    }
    kv_policy_touch(self->policy, id, now);
}

/* seq may not write into this block. */
static bool s_shared(const kv_cache_t *self, int id) {
    return self->blk[id].refs > 1 || self->blk[id].published;
}

/* Publish seq's block id under its meta (set by the caller): new content for
 * the policy (use count 1, not a candidate while referenced). */
static void s_publish_block(kv_cache_t *self, int id, int pin, uint64_t now) {
    self->blk[id].pin = (uint8_t)(pin < 0 ? 0 : pin > 255 ? 255 : pin);
    s_index_add(self, id);
    kv_policy_insert(self->policy, id, now, pin, true);
    kv_policy_remove(self->policy, id);
}

/* ---- construction */

kv_cache_t *kv_cache_new(const kern_kv_shape_t *s, const kv_cache_config_t *c) {
    if (!kern_kv_shape_ok(s) || !c || s->block_size != c->block_size || c->block_size < 1 ||
        c->block_size > KV_MAX_BLOCK_TOKENS || c->n_blocks < 1 || c->n_blocks > (1 << 28))
        return NULL;
    int type = kv_fmt_pool_type(c->fmt);
    if (type < 0)
        return NULL;
    kv_cache_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->cfg = *c;
    self->shape = *s;
    size_t n = (size_t)c->n_blocks;
    if (s_pool_init(self, s, (kern_type_t)type, c->n_blocks))
        goto fail;
    self->blk = calloc(n, sizeof *self->blk);
    self->tokens = calloc(n * (size_t)c->block_size, sizeof *self->tokens);
    self->free_ids = malloc(n * sizeof *self->free_ids);
    self->scratch = malloc(n * sizeof *self->scratch);
    self->policy = kv_policy_new(c->policy, c->n_blocks);
    if (!self->blk || !self->tokens || !self->free_ids || !self->scratch || !self->policy)
        goto fail;
    if (base_map_init(&self->by_hash, (size_t)c->n_blocks) ||
        base_map_init(&self->partials, (size_t)c->n_blocks))
        goto fail;
    for (int i = 0; i < c->n_blocks; i++) { /* hand out low ids first */
        self->free_ids[i] = c->n_blocks - 1 - i;
        self->blk[i].p_next = self->blk[i].p_prev = -1;
    }
    self->n_free = c->n_blocks;
    return self;
fail:
    kv_cache_destroy(&self);
    return NULL;
}

void kv_cache_destroy(kv_cache_t **self_p) {
    if (!self_p || !*self_p)
        return;
    kv_cache_t *self = *self_p;
    s_pool_free(self);
    free(self->blk);
    free(self->tokens);
    free(self->free_ids);
    free(self->scratch);
    kv_policy_destroy(&self->policy);
    base_map_free(&self->by_hash);
    base_map_free(&self->partials);
    free(self);
    *self_p = NULL;
}

void kv_cache_on_evict(kv_cache_t *self, kv_cache_evict_fn fn, void *arg) {
    self->on_evict = fn;
    self->evict_arg = arg;
}

void kv_cache_on_change(kv_cache_t *self, kv_cache_change_fn fn, void *arg) {
    self->on_change = fn;
    self->change_arg = arg;
}

void kv_cache_set_clock(kv_cache_t *self, uint64_t (*now_us)(void *arg), void *arg) {
    self->clock = now_us;
    self->clock_arg = arg;
}

const kern_kv_pool_t *kv_cache_pool(const kv_cache_t *self) {
    return &self->pool;
}
const kern_kv_shape_t *kv_cache_shape(const kv_cache_t *self) {
    return &self->shape;
}
int kv_cache_fmt(const kv_cache_t *self) {
    return self->cfg.fmt;
}
int kv_cache_block_size(const kv_cache_t *self) {
    return self->cfg.block_size;
}
int kv_cache_total(const kv_cache_t *self) {
    return self->cfg.n_blocks;
}
int kv_cache_available(const kv_cache_t *self) {
    return self->n_free + self->n_cached;
}
int kv_cache_needed(const kv_cache_t *self, int n_positions) {
    return s_blocks_for(self, n_positions);
}

kv_cache_stats_t kv_cache_stats(const kv_cache_t *self) {
    kv_cache_stats_t s = self->st;
    s.n_free = self->n_free;
    s.n_cached = self->n_cached;
    s.n_used = self->n_used;
    return s;
}

int kv_cache_refs(const kv_cache_t *self, int block) {
    if (block < 0 || block >= self->cfg.n_blocks)
        return -EINVAL;
    return self->blk[block].refs;
}

/* ---- prefix lookup and attach */

int kv_cache_match(const kv_cache_t *self, const int32_t *tokens, int n) {
    if (!self->cfg.prefix_sharing || !tokens || n <= 0)
        return 0;
    int n_ids;
    return s_lookup(self, tokens, n, self->scratch, &n_ids);
}

int kv_cache_attach_prefix(kv_cache_t *self, kv_seq_t *seq, const int32_t *tokens, int n) {
    if (!seq || seq->n != 0 || n < 0 || (n > 0 && !tokens))
        return -EINVAL;
    self->st.lookups++;
    if (!self->cfg.prefix_sharing || n <= 1) {
        self->st.miss_blocks += s_blocks_for(self, n);
        return 0;
    }
    int n_ids;
    int covered = s_lookup(self, tokens, n, self->scratch, &n_ids);
    if (covered >= n)
        covered = n - 1;                  /* the last token is computed (for its logits) */
    int nb = s_blocks_for(self, covered); /* drops a partial block left with nothing */
    if (s_grow(seq, nb))
        return -ENOMEM;
    uint64_t now = s_now(self);
    for (int i = 0; i < nb; i++) {
        s_ref(self, self->scratch[i], now);
        seq->blocks[i] = self->scratch[i];
    }
    seq->n = nb;
    s_set_published(self, seq, covered / self->cfg.block_size);
    self->st.hit_blocks += nb;
    self->st.hit_tokens += covered;
    self->st.miss_blocks += s_blocks_for(self, n) - nb;
    return covered;
}

/* ---- reserve (grow + copy-on-write) */

int kv_cache_reserve(kv_cache_t *self, kv_seq_t *seq, int pos0, int n_positions) {
    if (!s_seq_ok(self, seq) || pos0 < 0 || n_positions < 0)
        return -EINVAL;
    const int B = self->cfg.block_size;
    int need = s_blocks_for(self, n_positions);
    int grow = need > seq->n ? need - seq->n : 0;
    /* blocks of seq that hold positions of [pos0, n_positions) */
    int b0 = pos0 / B, b1 = need < seq->n ? need : seq->n;
    bool writes = pos0 < n_positions;
    int cow = 0;
    if (writes)
        for (int b = b0; b < b1; b++)
            cow += s_shared(self, seq->blocks[b]);
    int want = grow + cow;
    if (want > self->n_free + self->n_cached)
        return -ENOSPC; /* nothing taken */
    if (s_grow(seq, need))
        return -ENOMEM;
    /* Take every slot before any copy releases a block: a source block that
     * becomes cached must not be evicted from under the copy. */
    for (int i = 0; i < want; i++)
        self->scratch[i] = s_take(self);
    int k = 0;
    uint64_t now = s_now(self);
    if (writes) {
        for (int b = b0; b < b1; b++) {
            int old = seq->blocks[b];
            if (!s_shared(self, old))
                continue;
            int id = self->scratch[k++];
            s_copy_block(self, id, old);
            s_unref(self, old, now);
            seq->blocks[b] = id;
            self->st.cow_copies++;
        }
    }
    while (k < want)
        seq->blocks[seq->n++] = self->scratch[k++];
    /* Blocks from b0 on may be rewritten: they no longer count as published. */
    if (writes && seq->n_published > b0)
        s_set_published(self, seq, b0);
    return 0;
}

/* ---- publish */

int kv_cache_publish(kv_cache_t *self, kv_seq_t *seq, const int32_t *tokens, int n_computed,
                     bool last_partial, int pin) {
    const int B = self->cfg.block_size;
    if (seq && seq->compacted && n_computed >= seq->n_exact * B) {
        n_computed = seq->n_exact * B; /* rows past n_exact are not positions */
        last_partial = false;
    }
    if (!s_seq_ok(self, seq) || n_computed < 0 || n_computed > seq->n * B ||
        (n_computed > 0 && !tokens))
        return -EINVAL;
    if (!self->cfg.prefix_sharing)
        return 0;
    uint64_t now = s_now(self);
    int nf = n_computed / B;
    uint64_t h = seq->tail_hash;
    for (int i = seq->n_published; i < nf; i++) {
        uint64_t parent = h;
        const int32_t *t = tokens + (size_t)i * B;
        h = kv_hash_block(parent, t, B);
        int id = seq->blocks[i];
        s_block_t *b = &self->blk[id];
        if (b->published) {
            /* Attached (or published earlier): immutable, named by its own hash. */
            if (b->hash != h)
                LOG_W(TAG, "publish: block %d of a table holds other tokens", i);
            continue;
        }
        /* Name the private block (truncate and a later publish chain from it). */
        b->hash = h;
        b->parent = parent;
        b->n_tokens = (int16_t)B;
        memcpy(s_tokens(self, id), t, (size_t)B * sizeof *t);
        if (s_map_get(&self->by_hash, h) >= 0)
            continue; /* computed twice: ours stays private, the chain goes on */
        s_publish_block(self, id, pin, now);
    }
    if (nf > seq->n_published) {
        seq->n_published = nf;
        seq->tail_hash = h;
    }
    int p = n_computed % B;
    if (last_partial && p > 0) {
        int id = seq->blocks[nf];
        s_block_t *b = &self->blk[id];
        uint64_t parent = nf > 0 ? self->blk[seq->blocks[nf - 1]].hash : 0;
        const int32_t *t = tokens + (size_t)nf * B;
        uint64_t hp = kv_hash_block(parent, t, p);
        if (!b->published && s_map_get(&self->by_hash, hp) < 0) {
            b->hash = hp;
            b->parent = parent;
            b->n_tokens = (int16_t)p;
            memcpy(s_tokens(self, id), t, (size_t)p * sizeof *t);
            s_publish_block(self, id, pin, now);
        }
    }
    return 0;
}

/* ---- compaction */

/* The bytes of row r of slab `slab` of seq (block r / B): values, and for KERN_I8 the
 * scale at *scale (else NULL). */
static uint8_t *s_row(const kv_cache_t *self, const kv_seq_t *seq, size_t slab_bytes, int slab,
                      int r, size_t row_bytes, uint8_t **scale) {
    const int B = self->cfg.block_size;
    uint8_t *base = s_data(self, seq->blocks[r / B]) + (size_t)slab * slab_bytes;
    *scale = self->pool.type == KERN_I8
                 ? base + (size_t)B * self->shape.head_dim + 4 * (size_t)(r % B)
                 : NULL;
    return base + (size_t)(r % B) * row_bytes;
}

int kv_cache_compact(kv_cache_t *self, kv_seq_t *seq, int rows, int keep,
                     const int32_t *keep_rows) {
    const int B = self->cfg.block_size, L = self->shape.n_layer, H = self->shape.n_head_kv;
    if (!s_seq_ok(self, seq) || rows < 1 || rows > seq->n * B || keep < 1 || keep > rows ||
        !keep_rows)
        return -EINVAL;
    if (self->cfg.backend)
        return -ENOTSUP;
    int first = keep; /* the first row that changes in any group */
    for (int g = 0; g < L * H; g++) {
        const int32_t *k = keep_rows + (size_t)g * keep;
        for (int i = 0; i < keep; i++) {
            if (k[i] < i || k[i] >= rows || (i > 0 && k[i] <= k[i - 1]))
                return -EINVAL;
            if (k[i] != i && i < first)
                first = i;
        }
    }
    if (first < keep) {
        /* Rows are written into blocks first / B .. (keep - 1) / B only (the later ones
         * are read, then released).  Those must be private: a block shared with another
         * sequence is copied; one only the index holds is copied while free blocks last,
         * else taken back from the index (the prefix cache loses it, memory stays put). */
        const int b0 = first / B, b1 = (keep - 1) / B;
        int shared = 0;
        for (int b = b0; b <= b1; b++)
            shared += s_shared(self, seq->blocks[b]);
        if (shared > self->n_free)
            for (int b = b0; b <= b1; b++) {
                s_block_t *blk = &self->blk[seq->blocks[b]];
                if (blk->refs == 1 && blk->published)
                    s_index_del(self, seq->blocks[b]);
            }
        int rc = kv_cache_reserve(self, seq, first, keep); /* copy what is still shared */
        if (rc)
            return rc;
        const kern_type_t type = self->pool.type;
        const int D = self->shape.head_dim;
        const size_t row_bytes = (size_t)D * (type == KERN_F32 ? 4 : type == KERN_F16 ? 2 : 1);
        const size_t slab_bytes = kern_kv_slab_bytes(type, B, D);
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                const int32_t *k = keep_rows + ((size_t)l * H + h) * keep;
                for (int kv = 0; kv < 2; kv++) {
                    int slab = (l * 2 + kv) * H + h;
                    for (int i = first; i < keep; i++) {
                        if (k[i] == i)
                            continue;
                        uint8_t *ds, *ss;
                        uint8_t *d = s_row(self, seq, slab_bytes, slab, i, row_bytes, &ds);
                        uint8_t *src = s_row(self, seq, slab_bytes, slab, k[i], row_bytes, &ss);
                        memcpy(d, src, row_bytes);
                        if (ds)
                            memcpy(ds, ss, 4);
                    }
                }
            }
        int exact = first / B;
        if (!seq->compacted || exact < seq->n_exact)
            seq->n_exact = exact;
        seq->compacted = true;
        if (seq->n_published > seq->n_exact)
            s_set_published(self, seq, seq->n_exact);
    }
    return kv_cache_truncate(self, seq, keep);
}

/* ---- truncate, release */

int kv_cache_truncate(kv_cache_t *self, kv_seq_t *seq, int n_positions) {
    if (!s_seq_ok(self, seq) || n_positions < 0 || n_positions > seq->n * self->cfg.block_size)
        return -EINVAL;
    int keep = s_blocks_for(self, n_positions);
    uint64_t now = s_now(self);
    while (seq->n > keep)
        s_unref(self, seq->blocks[--seq->n], now);
    int full = n_positions / self->cfg.block_size;
    if (seq->n_published > full)
        s_set_published(self, seq, full);
    return 0;
}

void kv_cache_release(kv_cache_t *self, kv_seq_t *seq) {
    if (!seq)
        return;
    /* Block i is released i us "earlier" than the first one, so among blocks
     * released together (equal recency) a chain's tail is the older and goes
     * first: its head is what later prompts can still reach, and a tail
     * without its head is useless. */
    uint64_t now = s_now(self);
    for (int i = 0; i < seq->n; i++) {
        int id = seq->blocks[i];
        uint64_t back = (uint64_t)i;
        if (id >= 0 && id < self->cfg.n_blocks)
            s_unref(self, id, now > back ? now - back : 0);
    }
    free(seq->blocks);
    memset(seq, 0, sizeof *seq);
}

/* ---- lower tiers */

int kv_cache_insert(kv_cache_t *self, const kv_meta_t *meta, int fmt, const void *data,
                    size_t len) {
    if (!meta || !data || meta->n_tokens < 1 || meta->n_tokens > self->cfg.block_size ||
        meta->pin < 0 || meta->pin > 255)
        return -EINVAL;
    size_t bytes = kv_fmt_block_bytes(&self->shape, fmt);
    if (bytes == 0 || len != bytes)
        return -EINVAL;
    if (kv_hash_block(meta->parent, meta->tokens, meta->n_tokens) != meta->hash)
        return -EINVAL; /* the name does not match the tokens */
    if (s_map_get(&self->by_hash, meta->hash) >= 0)
        return -EEXIST;
    if (self->n_free + self->n_cached == 0)
        return -ENOSPC;
    int id = s_take(self);
    s_block_t *b = &self->blk[id];
    int rc = s_fill_block(self, id, fmt, data, meta->n_tokens);
    if (rc) {
        b->refs = 0;
        b->state = S_FREE;
        self->n_used--;
        self->free_ids[self->n_free++] = id;
        return rc;
    }
    b->hash = meta->hash;
    b->parent = meta->parent;
    b->n_tokens = (int16_t)meta->n_tokens;
    memcpy(s_tokens(self, id), meta->tokens, (size_t)meta->n_tokens * sizeof *meta->tokens);
    b->pin = (uint8_t)meta->pin;
    s_index_add(self, id);
    b->in_lower = true;
    b->refs = 0;
    b->state = S_CACHED;
    self->n_used--;
    self->n_cached++;
    kv_policy_insert(self->policy, id, s_now(self), b->pin, true);
    self->st.inserted++;
    return 0;
}

int kv_cache_write_through(kv_cache_t *self, kv_seq_t *seq, kv_cache_evict_fn fn, void *arg) {
    if (!s_seq_ok(self, seq) || !fn)
        return -EINVAL;
    int n = 0;
    for (; seq->n_written < seq->n_published; seq->n_written++) {
        int id = seq->blocks[seq->n_written];
        s_block_t *b = &self->blk[id];
        if (b->in_lower || b->n_tokens != self->cfg.block_size)
            continue;
        const uint8_t *data = s_host_view(self, id);
        if (!data)
            break; /* the next call tries this block again */
        kv_meta_t meta;
        s_meta_of(self, id, &meta);
        kv_cache_evicted_t ev = {&meta, self->cfg.fmt, data, self->pool.block_bytes, false};
        fn(arg, &ev);
        b->in_lower = true;
        n++;
    }
    return n;
}

void kv_cache_mark_lower(kv_cache_t *self, uint64_t hash) {
    int id = s_map_get(&self->by_hash, hash);
    if (id >= 0)
        self->blk[id].in_lower = true;
}

bool kv_cache_contains(const kv_cache_t *self, uint64_t hash) {
    return s_map_get(&self->by_hash, hash) >= 0;
}

/* ---- invariants */

#define S_FAIL(...)                                                                                \
    do {                                                                                           \
        if (err && errlen)                                                                         \
            snprintf(err, errlen, __VA_ARGS__);                                                    \
        rc = -EPROTO;                                                                              \
        goto out;                                                                                  \
    } while (0)

int kv_cache_check(const kv_cache_t *self, const kv_seq_t *const *seqs, int n_seqs, char *err,
                   size_t errlen) {
    const int N = self->cfg.n_blocks, B = self->cfg.block_size;
    int rc = 0;
    int32_t *cnt = calloc((size_t)N, sizeof *cnt);
    if (!cnt)
        return -ENOMEM;
    /* states and counts: free + cached + used == total */
    int nf = 0, nc = 0, nu = 0, npub = 0, npart = 0;
    for (int i = 0; i < N; i++) {
        const s_block_t *b = &self->blk[i];
        if (b->state == S_FREE) {
            nf++;
            if (b->refs || b->published)
                S_FAIL("free block %d has refs %d / published %d", i, b->refs, b->published);
        } else if (b->state == S_CACHED) {
            nc++;
            if (b->refs || !b->published)
                S_FAIL("cached block %d has refs %d / published %d", i, b->refs, b->published);
        } else if (b->state == S_USED) {
            nu++;
            if (b->refs < 1)
                S_FAIL("used block %d has refs %d", i, b->refs);
        } else {
            S_FAIL("block %d in state %d", i, b->state);
        }
        if (kv_policy_is_candidate(self->policy, i) != (b->state == S_CACHED))
            S_FAIL("block %d: policy candidate %d, state %d", i,
                   kv_policy_is_candidate(self->policy, i), b->state);
        if (b->published) {
            npub++;
            if (b->n_tokens < 1 || b->n_tokens > B)
                S_FAIL("published block %d has %d tokens", i, b->n_tokens);
            if (kv_hash_block(b->parent, s_tokens(self, i), b->n_tokens) != b->hash)
                S_FAIL("published block %d: hash does not match its tokens", i);
            if (s_map_get(&self->by_hash, b->hash) != i)
                S_FAIL("published block %d not indexed under its hash", i);
            if (b->n_tokens < B) {
                npart++;
                int32_t id = s_map_get(&self->partials, b->parent);
                int steps = 0;
                while (id >= 0 && id != i && steps++ < N)
                    id = self->blk[id].p_next;
                if (id != i)
                    S_FAIL("partial block %d not in its parent's list", i);
            }
        }
    }
    if (nf != self->n_free || nc != self->n_cached || nu != self->n_used || nf + nc + nu != N)
        S_FAIL("counts: free %d/%d cached %d/%d used %d/%d of %d", nf, self->n_free, nc,
               self->n_cached, nu, self->n_used, N);
    if (kv_policy_count(self->policy) != nc)
        S_FAIL("policy holds %d candidates, %d cached", kv_policy_count(self->policy), nc);
    if (self->by_hash.n != (size_t)npub)
        S_FAIL("index holds %zu hashes, %d published", self->by_hash.n, npub);
    /* the partial lists hold exactly the published partial blocks */
    int in_lists = 0;
    for (size_t s = 0; s < self->partials.cap; s++) {
        if (!self->partials.used[s])
            continue;
        int32_t id = (int32_t)self->partials.vals[s];
        if (self->blk[id].p_prev != -1)
            S_FAIL("partial list head %d has a predecessor", id);
        for (int steps = 0; id >= 0; id = self->blk[id].p_next) {
            if (steps++ > N || !self->blk[id].published || self->blk[id].n_tokens >= B ||
                self->blk[id].parent != self->partials.keys[s])
                S_FAIL("partial list of %016llx is broken at block %d",
                       (unsigned long long)self->partials.keys[s], id);
            in_lists++;
        }
    }
    if (in_lists != npart)
        S_FAIL("partial lists hold %d blocks, %d published partials", in_lists, npart);
    /* the free stack holds each free block once */
    for (int i = 0; i < self->n_free; i++) {
        int id = self->free_ids[i];
        if (id < 0 || id >= N || self->blk[id].state != S_FREE || cnt[id]++)
            S_FAIL("free stack entry %d (block %d) is wrong", i, id);
    }
    /* refcounts == table references; published prefix of each table chains */
    if (seqs) {
        memset(cnt, 0, (size_t)N * sizeof *cnt);
        for (int s = 0; s < n_seqs; s++) {
            const kv_seq_t *q = seqs[s];
            if (!q)
                continue;
            if (!s_seq_ok(self, q))
                S_FAIL("table %d is malformed", s);
            for (int i = 0; i < q->n; i++)
                cnt[q->blocks[i]]++;
            uint64_t h = 0;
            for (int i = 0; i < q->n_published; i++) {
                const s_block_t *b = &self->blk[q->blocks[i]];
                if (b->n_tokens != B || b->parent != h ||
                    kv_hash_block(h, s_tokens(self, q->blocks[i]), B) != b->hash)
                    S_FAIL("table %d: block %d below n_published does not chain", s, i);
                h = b->hash;
            }
            if (q->tail_hash != h)
                S_FAIL("table %d: tail hash is not block %d's", s, q->n_published - 1);
        }
        for (int i = 0; i < N; i++)
            if (cnt[i] != self->blk[i].refs)
                S_FAIL("block %d: refs %d, %d table references", i, self->blk[i].refs, cnt[i]);
    }
out:
    free(cnt);
    return rc;
}

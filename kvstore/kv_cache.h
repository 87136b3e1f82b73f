/* kv_cache.h - T0: a worker's paged KV with prefix sharing.
 *
 * The cache owns one kern_kv_pool_t (what the forward pass reads and writes)
 * and hands out blocks to sequences through block tables (kv_seq_t).  Blocks
 * whose tokens are known are published in a radix index at block granularity:
 * a node is a block, named by its chained hash (kv_hash.h); its children are
 * the blocks that continue it (found by hashing the next block_size tokens),
 * plus partial children (a last block of fewer tokens, matched by token
 * comparison).  Every block has a reference count (the sequences using it).
 *
 * A later sequence whose tokens start with a published prefix attaches those
 * blocks (kv_cache_attach_prefix) instead of computing them.  A sequence never
 * writes into a block that another sequence or the index can see: writing
 * positions of a shared block copies it first (copy-on-write), which is what
 * happens to a shared partial last block, or to the last block when the whole
 * prompt was cached (its last token is recomputed to get logits).
 *
 * An unreferenced published block stays cached until its slot is needed;
 * then the eviction policy (kv_policy.h) picks the victim and the evict
 * callback sees its data first (the worker demotes it to the tier manager).
 * Blocks can also arrive from lower tiers (kv_cache_insert) as cached,
 * unreferenced, published blocks.  Not thread-safe: one worker thread owns it.
 */
#ifndef KV_CACHE_H
#define KV_CACHE_H

#include "kern_backend.h"
#include "kv_codec.h"
#include "kv_hash.h"
#include "kv_policy.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct kv_cache_t kv_cache_t;

typedef struct {
    int fmt;                 /* T0 format: KV_FMT_F32, KV_FMT_F16 or KV_FMT_I8 */
    int block_size;          /* positions per block (1..KV_MAX_BLOCK_TOKENS) */
    int n_blocks;            /* blocks in the pool (the T0 cap) */
    kv_policy_kind_t policy; /* eviction order of cached blocks */
    bool prefix_sharing;     /* false: never publish or attach (every block private) */
    /* NULL: the pool in host memory.  Else the pool in this backend's memory (a GPU
     * worker's T0; kv_fmt F16 for CUDA), borrowed, outliving the cache: copy-on-write
     * copies run on the backend, and a block the evict or write-through callback sees, or
     * that kv_cache_insert brings, moves through one host buffer of the backend's
     * (host_alloc: pinned for CUDA) by block_out / block_in. */
    kern_backend_t *backend;
} kv_cache_config_t;

/* A sequence's block table: plain data owned by the caller (zero-initialise it). */
typedef struct {
    int32_t *blocks;    /* (cap) block ids in position order; first n valid */
    int n;              /* blocks held */
    int cap;            /* allocated entries */
    int n_published;    /* leading blocks already in the index (kv_cache_publish) */
    int n_written;      /* leading blocks handed to a lower tier (kv_cache_write_through) */
    uint64_t tail_hash; /* hash of block n_published - 1 (0 if none) */
    bool compacted;     /* kv_cache_compact dropped rows: from block n_exact on, rows are no
                           longer positions, and those blocks are never published */
    int n_exact;        /* compacted: leading blocks whose rows are still positions 0.. */
} kv_seq_t;

/* What the evict callback and stats see of a block. */
typedef struct {
    const kv_meta_t *meta; /* hash, parent, tokens, pin */
    int fmt;               /* format of data (the T0 format) */
    const void *data;      /* the block's bytes (valid during the callback only) */
    size_t bytes;
    bool in_lower; /* kv_cache_mark_lower was called: a lower tier has it already */
} kv_cache_evicted_t;
typedef void (*kv_cache_evict_fn)(void *arg, const kv_cache_evicted_t *b);

/* What the index-change callback sees (kv_cache_on_change): a full block entering the
 * index (published, or inserted from a lower tier) or leaving it (evicted).  Partial
 * blocks are not reported: other engines' prefix indexes name full blocks only. */
typedef enum { KV_CACHE_STORED, KV_CACHE_REMOVED } kv_cache_change_t;
typedef void (*kv_cache_change_fn)(void *arg, kv_cache_change_t what, uint64_t hash,
                                   uint64_t parent, const int32_t *tokens, int n_tokens);

typedef struct {
    int64_t lookups;     /* attach_prefix calls */
    int64_t hit_blocks;  /* blocks attached from the cache (full + partial) */
    int64_t hit_tokens;  /* positions attached */
    int64_t miss_blocks; /* blocks of looked-up prompts that were not cached */
    int64_t cow_copies;  /* copy-on-write copies */
    int64_t evictions;   /* cached blocks evicted */
    int64_t inserted;    /* blocks inserted from lower tiers */
    int64_t move_errors; /* backend pool: blocks that failed to move (an evicted or
                            written-through block not handed over, an insert refused,
                            a copy-on-write whose copy failed) */
    int n_free;          /* never-used or freed blocks */
    int n_cached;        /* unreferenced published blocks (evictable) */
    int n_used;          /* blocks referenced by sequences */
} kv_cache_stats_t;

/* A cache of blocks of shape s (kernels/kern_kv.h; s->block_size must equal
 * c->block_size).  NULL on bad arguments or no memory (host or backend). */
kv_cache_t *kv_cache_new(const kern_kv_shape_t *s, const kv_cache_config_t *c);
void kv_cache_destroy(kv_cache_t **self_p);
/* fn sees each evicted block just before its slot is reused; it must not call
 * back into the cache. */
void kv_cache_on_evict(kv_cache_t *self, kv_cache_evict_fn fn, void *arg);

/* fn sees every full block entering or leaving the index (tokens valid during the
 * call only; for REMOVED they are the block's too); it must not call back into the
 * cache.  What a KV event publisher (kv_events.h) listens to. */
void kv_cache_on_change(kv_cache_t *self, kv_cache_change_fn fn, void *arg);

const kern_kv_pool_t *kv_cache_pool(const kv_cache_t *self);
const kern_kv_shape_t *kv_cache_shape(const kv_cache_t *self);
int kv_cache_fmt(const kv_cache_t *self);
int kv_cache_block_size(const kv_cache_t *self);
int kv_cache_total(const kv_cache_t *self);
/* Blocks a new allocation can get: free + cached (evictable). */
int kv_cache_available(const kv_cache_t *self);
int kv_cache_needed(const kv_cache_t *self, int n_positions);
kv_cache_stats_t kv_cache_stats(const kv_cache_t *self);

/* Positions of tokens[0..n) found in the index (full blocks, then at most one
 * partial block), without attaching anything. */
int kv_cache_match(const kv_cache_t *self, const int32_t *tokens, int n);
/* Attach the longest cached prefix of tokens[0..n) to the empty seq (refcounts
 * + 1; counted as hits/misses).  Covers at most n - 1 positions, so the last
 * prompt token is always computed.  Returns the positions covered (0..n-1);
 * those positions need no computing.  -EINVAL if seq is not empty. */
int kv_cache_attach_prefix(kv_cache_t *self, kv_seq_t *seq, const int32_t *tokens, int n);
/* Make seq cover n_positions and make positions [pos0, n_positions) writable:
 * new blocks are taken from the free list or by evicting cached blocks (the
 * evict callback sees each first); shared blocks in that range are copied
 * (copy-on-write).  All or nothing: 0, or -ENOSPC (seq unchanged) / -ENOMEM. */
int kv_cache_reserve(kv_cache_t *self, kv_seq_t *seq, int pos0, int n_positions);
/* Publish seq's blocks covering tokens[0..n_computed) (positions whose KV is
 * computed): every full block not yet published, and, if last_partial, the
 * partial block at the end as a partial child (a shared partial block is then
 * copied on the next write).  pin: importance for eviction.  Published blocks
 * already in the index under the same hash (computed twice concurrently) stay
 * private to seq.  0 or -errno. */
int kv_cache_publish(kv_cache_t *self, kv_seq_t *seq, const int32_t *tokens, int n_computed,
                     bool last_partial, int pin);
/* Keep only positions [0, n_positions) of seq (speculative decoding rolls
 * back rejected positions): blocks past the end are released.  0 or -EINVAL. */
int kv_cache_truncate(kv_cache_t *self, kv_seq_t *seq, int n_positions);
/* In-sequence compression (kvstore/kv_compress.h): of seq's first `rows` rows, each
 * (layer, KV head) group g (g = layer * n_head_kv + head) keeps the rows
 * keep_rows[g * keep .. g * keep + keep) (ascending, each < rows), moved to its rows
 * 0 .. keep-1 (K and V alike); the table then holds keep rows.  A block the moves write
 * into that another sequence holds is copied first, so it still sees every position; one
 * that only the prefix index holds is copied too while free blocks last, else taken out
 * of the index (no memory needed).  seq's blocks from the first changed one on are never
 * published after (seq->compacted, n_exact).  Host pools only.  0; -EINVAL; -ENOSPC (no
 * block for a copy: nothing moved); -ENOTSUP (a backend pool). */
int kv_cache_compact(kv_cache_t *self, kv_seq_t *seq, int rows, int keep, const int32_t *keep_rows);
/* Drop seq's references and free its table (seq left empty; safe twice).
 * Published blocks stay cached; private ones are freed. */
void kv_cache_release(kv_cache_t *self, kv_seq_t *seq);

/* A block from a lower tier: meta (hash chained from meta->parent) and data in
 * format fmt (converted to the T0 format).  It becomes a cached, unreferenced,
 * published block, marked as present in a lower tier.  Its parent need not be
 * in T0 (a later attach walks the chain from the first block, so it is used
 * once its ancestors are present too).  0; -EEXIST (already cached); -ENOSPC
 * (no free or evictable block: nothing evicted for it beyond cached blocks);
 * -EINVAL (bad format or size). */
int kv_cache_insert(kv_cache_t *self, const kv_meta_t *meta, int fmt, const void *data, size_t len);
/* Write-through: hand each full published block of seq that no lower tier holds
 * yet to fn (as an eviction would, the data valid during the call), then mark it
 * as held by a lower tier (it is not sent again, on eviction either).  Blocks are
 * taken in position order, each once per seq (seq->n_written).  Returns the
 * number handed over. */
int kv_cache_write_through(kv_cache_t *self, kv_seq_t *seq, kv_cache_evict_fn fn, void *arg);
/* Remember that a lower tier holds hash (no need to send it again on eviction). */
void kv_cache_mark_lower(kv_cache_t *self, uint64_t hash);
/* True when a block with this hash is in T0. */
bool kv_cache_contains(const kv_cache_t *self, uint64_t hash);

/* ---- for tests and debugging */

/* The clock the policy sees (microseconds); NULL: CLOCK_MONOTONIC. */
void kv_cache_set_clock(kv_cache_t *self, uint64_t (*now_us)(void *arg), void *arg);
/* Reference count of a block (tables holding it), or -EINVAL. */
int kv_cache_refs(const kv_cache_t *self, int block);
/* Check the invariants: free + cached + used == total, states agree with
 * refcounts and the policy's candidates, the index holds exactly the published
 * blocks (hashes match their tokens, partial children listed under their
 * parent), the free stack has no duplicates; with seqs (n_seqs tables, all the
 * live ones): every refcount equals its table references and each table's
 * published prefix chains to its tail_hash.  O(n_blocks).  0, or -EPROTO with
 * the first violation in err. */
int kv_cache_check(const kv_cache_t *self, const kv_seq_t *const *seqs, int n_seqs, char *err,
                   size_t errlen);

#endif

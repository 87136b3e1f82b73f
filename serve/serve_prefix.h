/* serve_prefix.h - which target worker holds how much of a prompt in its KV cache, learned
 * from the workers' KV events (kvstore/kv_events.h, vLLM's EventBatch): one set of block
 * hashes per worker, kept by BlockStored / BlockRemoved / AllBlocksCleared, and the
 * prompt's chained block hashes (kv_hash.h) walked against each set.  The router weighs
 * the cached tokens against the load (router_dispatch_assign's bonus).  Pure policy, no
 * sockets; not thread-safe (the router actor owns it).
 */
#ifndef SERVE_PREFIX_H
#define SERVE_PREFIX_H

#include <stddef.h>
#include <stdint.h>

typedef struct serve_prefix_t serve_prefix_t;

typedef struct {
    int64_t batches;    /* batches applied */
    int64_t stored;     /* blocks stored */
    int64_t removed;    /* blocks removed */
    int64_t cleared;    /* AllBlocksCleared */
    int64_t bad;        /* batches or events that did not decode (skipped) */
    int64_t gaps;       /* sequence numbers missed (before replay filled them) */
    int64_t lookups;    /* serve_prefix_match calls */
    int64_t hit_blocks; /* blocks the best worker held, summed over lookups */
} serve_prefix_stats_t;

/* n_workers >= 1 workers, nothing known.  NULL on bad n or no memory. */
serve_prefix_t *serve_prefix_new(int n_workers);
void serve_prefix_destroy(serve_prefix_t **self_p);

/* Apply one published batch of worker w (seq: its sequence number; payload: the
 * MessagePack EventBatch).  A batch at or below the last applied one is ignored (a
 * replayed duplicate); one past a gap is applied and the gap counted.  Returns the next
 * sequence number expected from w, or -EINVAL (bad w) / -EPROTO (the batch did not
 * decode: skipped, counted). */
int64_t serve_prefix_apply(serve_prefix_t *self, int w, int64_t seq, const uint8_t *payload,
                           size_t len);
/* The next sequence number expected from w (0 before its first batch). */
int64_t serve_prefix_next_seq(const serve_prefix_t *self, int w);
/* Worker w is gone (down, restarted): forget its blocks and its sequence. */
void serve_prefix_forget(serve_prefix_t *self, int w);
/* For each worker, the prompt positions of tokens[0..n) its cache holds (whole blocks
 * from the first: the longest chain of the prompt's block hashes present) into
 * cached[0..n_workers).  Returns the most any worker holds (0 before any BlockStored
 * told the block size). */
int serve_prefix_match(serve_prefix_t *self, const int32_t *tokens, int n, int64_t *cached);
/* The block size the events use (0: not yet known). */
int serve_prefix_block_size(const serve_prefix_t *self);
serve_prefix_stats_t serve_prefix_stats(const serve_prefix_t *self);

#endif

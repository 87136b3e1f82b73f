/* kv_blocks.h - a simple paged-KV block allocator: it owns one kern_kv_pool_t
 * (the worker's device tier) and a free list over its blocks, and grows or
 * releases per-sequence block tables.  No prefix sharing yet: every block has
 * exactly one owner.  Not thread-safe (one worker thread owns it).
 */
#ifndef KV_BLOCKS_H
#define KV_BLOCKS_H

#include "kern_kv.h"
#include <stdint.h>

typedef struct kv_blocks_t kv_blocks_t;

/* A sequence's block table: plain data owned by the caller, grown by
 * kv_blocks_reserve and emptied by kv_blocks_release. */
typedef struct {
    int32_t *blocks; /* (cap) block ids in position order; first n valid */
    int n;           /* blocks held */
    int cap;         /* allocated entries */
} kv_table_t;

/* A pool of n_blocks blocks of shape s (kernels/kern_kv.h), with elements of
 * type (KERN_F32, KERN_F16 or KERN_I8).  NULL on bad arguments or no memory. */
kv_blocks_t *kv_blocks_new(const kern_kv_shape_t *s, kern_type_t type, int n_blocks);
/* Frees the pool; nulls *self_p; safe on NULL and twice. */
void kv_blocks_destroy(kv_blocks_t **self_p);

/* The pool the forward pass reads and writes (borrowed). */
const kern_kv_pool_t *kv_blocks_pool(const kv_blocks_t *self);
int kv_blocks_block_size(const kv_blocks_t *self);
int kv_blocks_total(const kv_blocks_t *self);
int kv_blocks_free_count(const kv_blocks_t *self);
/* Blocks needed to hold n_positions. */
int kv_blocks_needed(const kv_blocks_t *self, int n_positions);

/* Grow t so that it covers at least n_positions.  All or nothing: 0, or
 * -ENOSPC (not enough free blocks; t unchanged) / -ENOMEM / -EINVAL. */
int kv_blocks_reserve(kv_blocks_t *self, kv_table_t *t, int n_positions);
/* Return every block of t to the free list and free the table; t is left empty
 * (safe twice).  A block that is already free is not freed again: returns the
 * number of such double frees (0 normally). */
int kv_blocks_release(kv_blocks_t *self, kv_table_t *t);

#endif

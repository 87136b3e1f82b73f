/* kern_kv.h - the paged KV layout, declared once: the shape of a block, the
 * bytes of one slab and one block in each T0 element type, and the pool of
 * blocks the forward pass reads and writes.  model/ (the attention) and
 * kvstore/ (allocation, caching, tier formats) both use it; neither redefines it.
 *
 * Layout.  Block b of a pool starts at base + b * block_bytes and holds
 * block_size positions of K and V for every layer and KV head, as
 * (n_layer, 2 [K, V], n_head_kv) slabs in that order; a slab is
 * (block_size, head_dim) elements of the pool's type, and for KERN_I8 (int8
 * values) then (block_size) float scales, one per row (x = q * scale; see
 * kern_i8_quant_row in kern_ops.h).  The lower tiers' formats (INT4 and the
 * codecs between them) are kvstore/kv_codec.h's.
 */
#ifndef KERN_KV_H
#define KERN_KV_H

#include "kern_blocks.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The shape of a KV block: what a KV store needs to know of a model. */
typedef struct {
    int n_layer;    /* transformer blocks */
    int n_head_kv;  /* KV heads per layer */
    int head_dim;   /* elements per head */
    int block_size; /* positions per block */
} kern_kv_shape_t;

/* A pool of KV blocks: plain data, owned by whoever called kern_kv_pool_init. */
typedef struct {
    kern_type_t type;   /* KERN_F32, KERN_F16 or KERN_I8 */
    int block_size;     /* positions per block */
    size_t block_bytes; /* bytes per block (kern_kv_block_bytes) */
    int n_blocks;       /* blocks in the pool */
    uint8_t *base;      /* (n_blocks, block_bytes), 64-byte aligned */
} kern_kv_pool_t;

/* True when s is non-NULL and every field is positive. */
bool kern_kv_shape_ok(const kern_kv_shape_t *s);
/* Bytes of one (layer, K|V, head) slab: (block_size, head_dim) elements of
 * type, and for KERN_I8 then (block_size) float row scales.  0 for a type a
 * pool cannot hold (anything but F32, F16, I8) or a non-positive size. */
size_t kern_kv_slab_bytes(kern_type_t type, int block_size, int head_dim);
/* Bytes of one block of shape s in type; 0 when the shape or type is invalid
 * or the product does not fit in size_t. */
size_t kern_kv_block_bytes(const kern_kv_shape_t *s, kern_type_t type);
/* Allocate a pool of n_blocks blocks of shape s in type (64-byte aligned, not
 * zeroed: every position is written before it is read, and untouched pages of
 * a large pool cost no memory).  0, -EINVAL (bad shape, type or count, or a
 * size that overflows) or -ENOMEM; on error *pool is zeroed. */
int kern_kv_pool_init(kern_kv_pool_t *pool, const kern_kv_shape_t *s, kern_type_t type,
                      int n_blocks);
/* Free the blocks and zero *pool; safe on a zeroed pool and twice. */
void kern_kv_pool_free(kern_kv_pool_t *pool);

#endif

/* kern_kv.c - sizes of the paged KV layout (kern_kv.h) and its pool's
 * allocation. */
#include "kern_kv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bool kern_kv_shape_ok(const kern_kv_shape_t *s) {
    return s != NULL && s->n_layer > 0 && s->n_head_kv > 0 && s->head_dim > 0 && s->block_size > 0;
}

size_t kern_kv_slab_bytes(kern_type_t type, int block_size, int head_dim) {
    if (block_size <= 0 || head_dim <= 0)
        return 0;
    size_t n = (size_t)block_size * (size_t)head_dim;
    switch (type) {
    case KERN_F32:
        return 4 * n;
    case KERN_F16:
        return 2 * n;
    case KERN_I8:
        return n + 4 * (size_t)block_size;
    default:
        return 0;
    }
}

size_t kern_kv_block_bytes(const kern_kv_shape_t *s, kern_type_t type) {
    if (!kern_kv_shape_ok(s))
        return 0;
    size_t slab = kern_kv_slab_bytes(type, s->block_size, s->head_dim), slabs, bytes;
    if (slab == 0 || __builtin_mul_overflow((size_t)s->n_layer * 2, (size_t)s->n_head_kv, &slabs) ||
        __builtin_mul_overflow(slabs, slab, &bytes))
        return 0;
    return bytes;
}

int kern_kv_pool_init(kern_kv_pool_t *pool, const kern_kv_shape_t *s, kern_type_t type,
                      int n_blocks) {
    memset(pool, 0, sizeof *pool);
    size_t bb = kern_kv_block_bytes(s, type), total;
    if (bb == 0 || n_blocks < 1 || __builtin_mul_overflow(bb, (size_t)n_blocks, &total) ||
        total > SIZE_MAX - 63)
        return -EINVAL;
    total = (total + 63) & ~(size_t)63;
    uint8_t *base = aligned_alloc(64, total);
    if (!base)
        return -ENOMEM;
    *pool = (kern_kv_pool_t){type, s->block_size, bb, n_blocks, base};
    return 0;
}

void kern_kv_pool_free(kern_kv_pool_t *pool) {
    free(pool->base);
    memset(pool, 0, sizeof *pool);
}

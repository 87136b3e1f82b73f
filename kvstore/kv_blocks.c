/* kv_blocks.c - free list over a kern_kv_pool_t and per-sequence block tables.
 * The free list is a stack of block ids; a per-block flag catches double frees. */
#include "kv_blocks.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

struct kv_blocks_t {
    kern_kv_pool_t pool; /* the blocks themselves */
    int32_t *free_ids;   /* (n_blocks) stack of free block ids; first n_free valid */
    int n_free;          /* blocks on the stack */
    bool *in_use;        /* (n_blocks) true while a table holds the block */
};

kv_blocks_t *kv_blocks_new(const kern_kv_shape_t *s, kern_type_t type, int n_blocks) {
    if (!kern_kv_shape_ok(s) || n_blocks < 1)
        return NULL;
    kv_blocks_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    if (kern_kv_pool_init(&self->pool, s, type, n_blocks))
        goto fail;
    self->free_ids = malloc((size_t)n_blocks * sizeof *self->free_ids);
    self->in_use = calloc((size_t)n_blocks, sizeof *self->in_use);
    if (!self->free_ids || !self->in_use)
        goto fail;
    /* Hand out low ids first: push in reverse. */
    for (int i = 0; i < n_blocks; i++)
        self->free_ids[i] = n_blocks - 1 - i;
    self->n_free = n_blocks;
    return self;
fail:
    kv_blocks_destroy(&self);
    return NULL;
}

void kv_blocks_destroy(kv_blocks_t **self_p) {
    if (!self_p || !*self_p)
        return;
    kv_blocks_t *self = *self_p;
    kern_kv_pool_free(&self->pool);
    free(self->free_ids);
    free(self->in_use);
    free(self);
    *self_p = NULL;
}

const kern_kv_pool_t *kv_blocks_pool(const kv_blocks_t *self) {
    return &self->pool;
}
int kv_blocks_block_size(const kv_blocks_t *self) {
    return self->pool.block_size;
}
int kv_blocks_total(const kv_blocks_t *self) {
    return self->pool.n_blocks;
}
int kv_blocks_free_count(const kv_blocks_t *self) {
    return self->n_free;
}

int kv_blocks_needed(const kv_blocks_t *self, int n_positions) {
    if (n_positions <= 0)
        return 0;
    return (n_positions + self->pool.block_size - 1) / self->pool.block_size;
}

int kv_blocks_reserve(kv_blocks_t *self, kv_table_t *t, int n_positions) {
    if (!t || n_positions < 0 || t->n < 0 || t->n > t->cap)
        return -EINVAL;
    int need = kv_blocks_needed(self, n_positions);
    if (need <= t->n)
        return 0;
    int more = need - t->n;
    if (more > self->n_free)
        return -ENOSPC;
    if (need > t->cap) {
        int cap = t->cap ? t->cap : 4;
        while (cap < need)
            cap *= 2;
        int32_t *b = realloc(t->blocks, (size_t)cap * sizeof *b);
        if (!b)
            return -ENOMEM;
        t->blocks = b;
        t->cap = cap;
    }
    for (int i = 0; i < more; i++) {
        int32_t id = self->free_ids[--self->n_free];
        self->in_use[id] = true;
        t->blocks[t->n++] = id;
    }
    return 0;
}

int kv_blocks_release(kv_blocks_t *self, kv_table_t *t) {
    if (!t)
        return 0;
    int doubles = 0;
    for (int i = 0; i < t->n; i++) {
        int32_t id = t->blocks[i];
        if (id < 0 || id >= self->pool.n_blocks || !self->in_use[id]) {
            doubles++;
            continue;
        }
        self->in_use[id] = false;
        self->free_ids[self->n_free++] = id;
    }
    free(t->blocks);
    t->blocks = NULL;
    t->n = t->cap = 0;
    return doubles;
}

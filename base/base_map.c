/* base_map.c - uint64 -> uint64 open-addressing map (base_map.h). */
#include "base_map.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Fibonacci hashing: the top bits of k * 2^64/phi, so sequential keys spread. */
static size_t s_home(const base_map_t *m, uint64_t k) {
    return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 32) & (m->cap - 1);
}

static int s_alloc(base_map_t *m, size_t cap) {
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->used = calloc(cap, 1);
    if (!m->keys || !m->vals || !m->used) {
        base_map_free(m);
        return -ENOMEM;
    }
    m->cap = cap;
    m->n = 0;
    return 0;
}

int base_map_init(base_map_t *m, size_t n_max) {
    memset(m, 0, sizeof *m);
    size_t cap = 16;
    while (cap < 2 * n_max) {
        if (cap > SIZE_MAX / 4)
            return -ENOMEM;
        cap *= 2;
    }
    return s_alloc(m, cap);
}

void base_map_free(base_map_t *m) {
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof *m);
}

/* The slot holding k, or the empty slot that ends its probe run. */
static size_t s_slot(const base_map_t *m, uint64_t k) {
    size_t i = s_home(m, k);
    while (m->used[i] && m->keys[i] != k)
        i = (i + 1) & (m->cap - 1);
    return i;
}

bool base_map_get(const base_map_t *m, uint64_t k, uint64_t *v) {
    if (m->cap == 0)
        return false;
    size_t i = s_slot(m, k);
    if (!m->used[i])
        return false;
    if (v)
        *v = m->vals[i];
    return true;
}

static int s_grow(base_map_t *m) {
    base_map_t g;
    if (m->cap > SIZE_MAX / 2 || s_alloc(&g, m->cap ? 2 * m->cap : 16))
        return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i]) {
            size_t j = s_slot(&g, m->keys[i]);
            g.used[j] = 1;
            g.keys[j] = m->keys[i];
            g.vals[j] = m->vals[i];
            g.n++;
        }
    base_map_free(m);
    *m = g;
    return 0;
}

int base_map_put(base_map_t *m, uint64_t k, uint64_t v) {
    if (m->cap) {
        size_t i = s_slot(m, k);
        if (m->used[i]) {
            m->vals[i] = v;
            return 0;
        }
    }
    /* at most half full, so every probe run ends at an empty slot */
    if (2 * (m->n + 1) > m->cap && s_grow(m))
        return -ENOMEM;
    size_t i = s_slot(m, k);
    m->used[i] = 1;
    m->keys[i] = k;
    m->vals[i] = v;
    m->n++;
    return 0;
}

bool base_map_del(base_map_t *m, uint64_t k) {
    if (m->cap == 0)
        return false;
    size_t mask = m->cap - 1, i = s_slot(m, k);
    if (!m->used[i])
        return false;
    /* Backward shift: an entry later in the run moves into the hole at i unless
     * its home lies cyclically in (i, j] (then it would move before its home). */
    for (size_t j = i;;) {
        j = (j + 1) & mask;
        if (!m->used[j])
            break;
        size_t h = s_home(m, m->keys[j]);
        if (((j - h) & mask) >= ((j - i) & mask)) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->used[i] = 0;
    m->n--;
    return true;
}

size_t base_map_del_if(base_map_t *m, bool (*pred)(uint64_t k, uint64_t v, void *ctx), void *ctx) {
    size_t gone = 0;
    /* A deletion at i shifts only entries of i's run that lie after it into i
     * (the map is at most half full, so no run wraps back to i): slot i is
     * looked at again, nothing unseen moves before it.  An entry that wrapped
     * from the start of the table to its end was seen and kept already (and is
     * asked again). */
    for (size_t i = 0; i < m->cap;) {
        if (m->used[i] && pred(m->keys[i], m->vals[i], ctx)) {
            base_map_del(m, m->keys[i]);
            gone++;
        } else {
            i++;
        }
    }
    return gone;
}

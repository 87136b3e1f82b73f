/* base_strmap.c - byte string -> uint64 open-addressing map (base_strmap.h). */
#include "base_strmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static const char s_empty[1] = ""; /* the bytes of a zero-length key given as NULL */

static uint32_t s_hash(const char *key, size_t len) {
    return (uint32_t)XXH3_64bits(key, len);
}

/* The slot holding key (hash h), or the empty slot that ends its probe run. */
static size_t s_slot(const base_strmap_t *m, const char *key, size_t len, uint32_t h) {
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        const base_strmap_slot_t *s = &m->slots[i];
        if (!s->key || (s->hash == h && s->len == len && !memcmp(s->key, key, len)))
            return i;
    }
}

int base_strmap_init(base_strmap_t *m, size_t n_max) {
    memset(m, 0, sizeof *m);
    size_t cap = 16;
    while (cap < 2 * n_max) {
        if (cap > SIZE_MAX / 4 / sizeof *m->slots)
            return -ENOMEM;
        cap *= 2;
    }
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots)
        return -ENOMEM;
    m->cap = cap;
    return 0;
}

void base_strmap_free(base_strmap_t *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

bool base_strmap_get(const base_strmap_t *m, const char *key, size_t len, uint64_t *v) {
    if (m->cap == 0 || len > UINT32_MAX)
        return false;
    if (!key)
        key = s_empty;
    size_t i = s_slot(m, key, len, s_hash(key, len));
    if (!m->slots[i].key)
        return false;
    if (v)
        *v = m->slots[i].val;
    return true;
}

static int s_grow(base_strmap_t *m) {
    base_strmap_t g;
    if (m->cap > SIZE_MAX / 4 / sizeof *m->slots || base_strmap_init(&g, m->cap ? m->cap : 8))
        return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        const base_strmap_slot_t *s = &m->slots[i];
        if (!s->key)
            continue;
        size_t mask = g.cap - 1, j = s->hash & mask;
        while (g.slots[j].key)
            j = (j + 1) & mask;
        g.slots[j] = *s;
        g.n++;
    }
    base_strmap_free(m);
    *m = g;
    return 0;
}

/* put and add: overwrite says what a present key gets. */
static int s_insert(base_strmap_t *m, const char *key, size_t len, uint64_t v, bool overwrite,
                    uint64_t *old) {
    if (len > UINT32_MAX)
        return -EINVAL;
    if (!key)
        key = s_empty;
    uint32_t h = s_hash(key, len);
    if (m->cap) {
        base_strmap_slot_t *s = &m->slots[s_slot(m, key, len, h)];
        if (s->key) {
            if (!overwrite) {
                if (old)
                    *old = s->val;
                return -EEXIST;
            }
            s->val = v;
            return 0;
        }
    }
    /* at most half full, so every probe run ends at an empty slot */
    if (2 * (m->n + 1) > m->cap && s_grow(m))
        return -ENOMEM;
    base_strmap_slot_t *s = &m->slots[s_slot(m, key, len, h)];
    *s = (base_strmap_slot_t){key, (uint32_t)len, h, v};
    m->n++;
    return 0;
}

int base_strmap_put(base_strmap_t *m, const char *key, size_t len, uint64_t v) {
    return s_insert(m, key, len, v, true, NULL);
}

int base_strmap_add(base_strmap_t *m, const char *key, size_t len, uint64_t v, uint64_t *old) {
    return s_insert(m, key, len, v, false, old);
}

bool base_strmap_del(base_strmap_t *m, const char *key, size_t len) {
    if (m->cap == 0 || len > UINT32_MAX)
        return false;
    if (!key)
        key = s_empty;
    size_t mask = m->cap - 1, i = s_slot(m, key, len, s_hash(key, len));
    if (!m->slots[i].key)
        return false;
    /* Backward shift (as base_map_del): an entry later in the run moves into the hole at i
     * unless its home lies cyclically in (i, j] (then it would move before its home). */
    for (size_t j = i;;) {
        j = (j + 1) & mask;
        if (!m->slots[j].key)
            break;
        size_t home = m->slots[j].hash & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i] = (base_strmap_slot_t){0};
    m->n--;
    return true;
}

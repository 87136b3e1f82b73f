/* base_strmap.h - the one string-keyed map of strata: byte strings (any bytes, NUL
 * included, given with their length) to uint64 values, open addressing with linear
 * probing and backward-shift deletion, as base_map.  The map does not copy its keys: a
 * key's bytes are borrowed and must stay valid and unchanged while the key is in the map
 * (a vocabulary blob, a mapped file).  It grows at half load; a map sized with
 * base_strmap_init(n) never grows while it holds at most n entries.  Plain data owned by
 * the caller; not thread-safe.
 */
#ifndef BASE_STRMAP_H
#define BASE_STRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One slot: a key (borrowed) and its value. */
typedef struct {
    const char *key; /* the key's bytes, borrowed; NULL while the slot is empty */
    uint32_t len;    /* its length */
    uint32_t hash;   /* its hash (low 32 bits): compared before the bytes, kept for growing */
    uint64_t val;    /* its value */
} base_strmap_slot_t;

typedef struct {
    base_strmap_slot_t *slots; /* (cap) */
    size_t cap;                /* slots, a power of two (0 before init) */
    size_t n;                  /* entries */
} base_strmap_t;

/* Room for n_max entries without growing.  0 or -ENOMEM (then *m is zeroed). */
int base_strmap_init(base_strmap_t *m, size_t n_max);
/* Free the slots and zero *m (the keys are the caller's); safe on a zeroed map and twice. */
void base_strmap_free(base_strmap_t *m);
/* True when key[0..len) is present; its value goes to *v (v may be NULL). */
bool base_strmap_get(const base_strmap_t *m, const char *key, size_t len, uint64_t *v);
/* Insert key[0..len) (borrowed) or overwrite its value.  0, -ENOMEM when the map had to
 * grow and could not, -EINVAL for a key of 4 GiB or more (the map is then unchanged). */
int base_strmap_put(base_strmap_t *m, const char *key, size_t len, uint64_t v);
/* Insert key[0..len) only if absent: 0, or -EEXIST when present (its value goes to *old,
 * old may be NULL, and the map is unchanged), or put's errors. */
int base_strmap_add(base_strmap_t *m, const char *key, size_t len, uint64_t v, uint64_t *old);
/* Remove key[0..len); true when it was present.  Other entries may move. */
bool base_strmap_del(base_strmap_t *m, const char *key, size_t len);

#endif

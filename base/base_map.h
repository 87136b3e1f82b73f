/* base_map.h - the one hash map of strata: uint64 keys to uint64 values, open
 * addressing with linear probing and backward-shift deletion (no tombstones),
 * so lookups stay short however many deletes a long-running cache makes.
 * Any key is valid, 0 included.  It grows at half load; a map sized with
 * base_map_init(n) never grows while it holds at most n entries.  Plain data
 * owned by the caller; not thread-safe.
 */
#ifndef BASE_MAP_H
#define BASE_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t *keys; /* (cap) */
    uint64_t *vals; /* (cap) */
    uint8_t *used;  /* (cap) 1 where the slot holds an entry */
    size_t cap;     /* slots, a power of two (0 before init) */
    size_t n;       /* entries */
} base_map_t;

/* Room for n_max entries without growing.  0 or -ENOMEM (then *m is zeroed). */
int base_map_init(base_map_t *m, size_t n_max);
/* Free the slots and zero *m; safe on a zeroed map and twice. */
void base_map_free(base_map_t *m);
/* True when k is present; its value goes to *v (v may be NULL). */
bool base_map_get(const base_map_t *m, uint64_t k, uint64_t *v);
/* Insert k or overwrite its value.  0, or -ENOMEM when the map had to grow and
 * could not (then the map is unchanged). */
int base_map_put(base_map_t *m, uint64_t k, uint64_t v);
/* Remove k; true when it was present.  Other entries may move. */
bool base_map_del(base_map_t *m, uint64_t k);
/* Remove every entry for which pred(k, v, ctx) is true, in slot order.  pred
 * must not change m; it sees an entry it removes once, one it keeps at least
 * once (a kept entry may move past the scan and be asked again: keep pred a
 * function of k and v, with side effects only where it says true).  Returns
 * how many went. */
size_t base_map_del_if(base_map_t *m, bool (*pred)(uint64_t k, uint64_t v, void *ctx), void *ctx);

#endif

/* kv_policy.h - eviction order for a tier: which unreferenced block goes
 * first.  Entries are ids 0..capacity-1 (block slots of the tier); the tier
 * tells the policy when an entry becomes a candidate (insert), is used
 * (touch) and stops being one (remove).  O(log n) per operation (an indexed
 * binary heap on a key computed at touch/insert time).
 *
 *   LRU     key = time of last use
 *   LFU     key = uses, ties broken by time of last use
 *   SCORED  key = time of last use + KV_POLICY_FREQ_US * log2(1 + uses)
 *                 + KV_POLICY_PIN_US * pin
 *           (recency, plus a bonus for frequency and for pinned importance
 *           such as system prompts; a block pinned 255 outlives hours of idle)
 * The candidate with the smallest key is evicted first.
 */
#ifndef KV_POLICY_H
#define KV_POLICY_H

#include <stdbool.h>
#include <stdint.h>

typedef enum { KV_POLICY_LRU = 0, KV_POLICY_LFU = 1, KV_POLICY_SCORED = 2 } kv_policy_kind_t;

#define KV_POLICY_FREQ_US 2000000ll /* 2 s of recency per doubling of uses */
#define KV_POLICY_PIN_US 60000000ll /* 60 s of recency per pin level */

typedef struct kv_policy_t kv_policy_t;

/* "lru" / "lfu" / "scored" -> kind; -1 if unknown. */
int kv_policy_parse(const char *name);
const char *kv_policy_name(int kind);

/* NULL on bad arguments or no memory. */
kv_policy_t *kv_policy_new(kv_policy_kind_t kind, int capacity);
void kv_policy_destroy(kv_policy_t **self_p);
kv_policy_kind_t kv_policy_kind(const kv_policy_t *self);

/* id becomes an eviction candidate at time now_us with importance pin (0..255).
 * fresh: new content in this slot (its use count restarts at 1); otherwise the
 * entry keeps its use count (a block that was in use and is released).
 * Inserting a candidate again just updates it. */
void kv_policy_insert(kv_policy_t *self, int id, uint64_t now_us, int pin, bool fresh);
/* id was used at now_us (candidate or not): count + 1, recency now. */
void kv_policy_touch(kv_policy_t *self, int id, uint64_t now_us);
/* id is no longer a candidate (taken into use, or freed).  No-op if it is not one. */
void kv_policy_remove(kv_policy_t *self, int id);
/* The candidate to evict first (it stays a candidate), or -1 when none. */
int kv_policy_victim(const kv_policy_t *self);
bool kv_policy_is_candidate(const kv_policy_t *self, int id);
int kv_policy_count(const kv_policy_t *self);

#endif

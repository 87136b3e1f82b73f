/* kv_policy.c - eviction order for a tier: an indexed binary min-heap of the
 * candidate ids, keyed at insert/touch time.  Per-id use count, last use and
 * pin are kept for every id, candidate or not (a block in use keeps counting). */
#include "kv_policy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The eviction key of one id: compared (k1, k2, id) lexicographically,
 * smallest first out. */
typedef struct {
    int64_t k1;  /* LRU: last use; LFU: uses; SCORED: the score */
    uint64_t k2; /* tie-break: last use (LFU, SCORED); 0 (LRU) */
} s_key_t;

struct kv_policy_t {
    kv_policy_kind_t kind; /* LRU / LFU / SCORED */
    int capacity;          /* ids are 0..capacity-1 */
    int n;                 /* candidates in the heap */
    int32_t *heap;         /* (capacity) candidate ids; first n valid, heap[0] the victim */
    int32_t *pos;          /* (capacity) index of id in heap, -1 when not a candidate */
    s_key_t *key;          /* (capacity) key of id, as of its last insert/touch */
    uint64_t *last;        /* (capacity) time of last use, us */
    uint32_t *uses;        /* (capacity) uses since the slot got its content */
    uint8_t *pin;          /* (capacity) importance 0..255 */
};

int kv_policy_parse(const char *name) {
    if (!name)
        return -1;
    if (!strcmp(name, "lru"))
        return KV_POLICY_LRU;
    if (!strcmp(name, "lfu"))
        return KV_POLICY_LFU;
    if (!strcmp(name, "scored"))
        return KV_POLICY_SCORED;
    return -1;
}

const char *kv_policy_name(int kind) {
    switch (kind) {
    case KV_POLICY_LRU:
        return "lru";
    case KV_POLICY_LFU:
        return "lfu";
    case KV_POLICY_SCORED:
        return "scored";
    default:
        return NULL;
    }
}

kv_policy_t *kv_policy_new(kv_policy_kind_t kind, int capacity) {
    if (capacity < 1 || !kv_policy_name((int)kind))
        return NULL;
    kv_policy_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->kind = kind;
    self->capacity = capacity;
    size_t n = (size_t)capacity;
    self->heap = malloc(n * sizeof *self->heap);
    self->pos = malloc(n * sizeof *self->pos);
    self->key = calloc(n, sizeof *self->key);
    self->last = calloc(n, sizeof *self->last);
    self->uses = calloc(n, sizeof *self->uses);
    self->pin = calloc(n, sizeof *self->pin);
    if (!self->heap || !self->pos || !self->key || !self->last || !self->uses || !self->pin) {
        kv_policy_destroy(&self);
        return NULL;
    }
    for (int i = 0; i < capacity; i++)
        self->pos[i] = -1;
    return self;
}

void kv_policy_destroy(kv_policy_t **self_p) {
    if (!self_p || !*self_p)
        return;
    kv_policy_t *self = *self_p;
    free(self->heap);
    free(self->pos);
    free(self->key);
    free(self->last);
    free(self->uses);
    free(self->pin);
    free(self);
    *self_p = NULL;
}

kv_policy_kind_t kv_policy_kind(const kv_policy_t *self) {
    return self->kind;
}

/* ---- keys */

static s_key_t s_key_of(const kv_policy_t *self, int id) {
    s_key_t k = {0, 0};
    uint64_t last = self->last[id];
    switch (self->kind) {
    case KV_POLICY_LRU:
        k.k1 = (int64_t)last;
        break;
    case KV_POLICY_LFU:
        k.k1 = self->uses[id];
        k.k2 = last;
        break;
    case KV_POLICY_SCORED:
        /* recency + 2 s per doubling of uses + 60 s per pin level, in us */
        k.k1 = (int64_t)last + llround((double)KV_POLICY_FREQ_US * log2(1.0 + self->uses[id])) +
               KV_POLICY_PIN_US * self->pin[id];
        k.k2 = last;
        break;
    }
    return k;
}

/* a evicted before b? */
static bool s_less(const kv_policy_t *self, int a, int b) {
    const s_key_t *x = &self->key[a], *y = &self->key[b];
    if (x->k1 != y->k1)
        return x->k1 < y->k1;
    if (x->k2 != y->k2)
        return x->k2 < y->k2;
    return a < b;
}

/* ---- the heap: heap[i]'s children are heap[2i+1], heap[2i+2]; pos mirrors heap */

static void s_place(kv_policy_t *self, int i, int id) {
    self->heap[i] = id;
    self->pos[id] = i;
}

static void s_sift_up(kv_policy_t *self, int i) {
    int id = self->heap[i];
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!s_less(self, id, self->heap[p]))
            break;
        s_place(self, i, self->heap[p]);
        i = p;
    }
    s_place(self, i, id);
}

static void s_sift_down(kv_policy_t *self, int i) {
    int id = self->heap[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= self->n)
            break;
        if (c + 1 < self->n && s_less(self, self->heap[c + 1], self->heap[c]))
            c++;
        if (!s_less(self, self->heap[c], id))
            break;
        s_place(self, i, self->heap[c]);
        i = c;
    }
    s_place(self, i, id);
}

/* id's key changed: restore the heap order around it. */
static void s_fix(kv_policy_t *self, int id) {
    int i = self->pos[id];
    if (i < 0)
        return;
    s_sift_up(self, i);
    s_sift_down(self, self->pos[id]);
}

static bool s_valid(const kv_policy_t *self, int id) {
    return self && id >= 0 && id < self->capacity;
}

void kv_policy_insert(kv_policy_t *self, int id, uint64_t now_us, int pin, bool fresh) {
    if (!s_valid(self, id))
        return;
    if (fresh)
        self->uses[id] = 1;
    self->last[id] = now_us;
    self->pin[id] = (uint8_t)(pin < 0 ? 0 : pin > 255 ? 255 : pin);
    self->key[id] = s_key_of(self, id);
    if (self->pos[id] < 0) {
        s_place(self, self->n++, id);
        s_sift_up(self, self->n - 1);
    } else {
        s_fix(self, id);
    }
}

void kv_policy_touch(kv_policy_t *self, int id, uint64_t now_us) {
    if (!s_valid(self, id))
        return;
    if (self->uses[id] < UINT32_MAX)
        self->uses[id]++;
    self->last[id] = now_us;
    self->key[id] = s_key_of(self, id);
    s_fix(self, id);
}

void kv_policy_remove(kv_policy_t *self, int id) {
    if (!s_valid(self, id) || self->pos[id] < 0)
        return;
    int i = self->pos[id];
    self->pos[id] = -1;
    int last = self->heap[--self->n];
    if (i == self->n)
        return; /* it was the last leaf */
    s_place(self, i, last);
    s_fix(self, last);
}

int kv_policy_victim(const kv_policy_t *self) {
    return self && self->n > 0 ? self->heap[0] : -1;
}

bool kv_policy_is_candidate(const kv_policy_t *self, int id) {
    return s_valid(self, id) && self->pos[id] >= 0;
}

int kv_policy_count(const kv_policy_t *self) {
    return self ? self->n : 0;
}

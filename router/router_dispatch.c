/* router_dispatch.c - least-loaded dispatch over a small worker table and an
 * open-addressing hash table rid -> worker. */
#include "router_dispatch.h"

#include <errno.h>
#include <stdlib.h>

typedef struct {
    bool alive;       /* false after worker_down until its next load report */
    int64_t reported; /* queued + active tokens of the last load report */
    int64_t pending;  /* tokens dispatched since that report */
    int count;        /* requests assigned */
} s_worker_t;

typedef struct {
    uint64_t rid;   /* key; 0 with state 0 = empty */
    int worker;     /* value */
    int64_t tokens; /* what assign added */
    int state;      /* 0 empty, 1 used, 2 deleted */
} s_slot_t;

struct router_dispatch_t {
    int n_workers;
    s_worker_t *workers; /* (n_workers) */
    s_slot_t *slots;     /* (cap) hash table */
    int cap;             /* power of two */
    int used;            /* slots in state 1 */
    int tomb;            /* slots in state 2 */
};

router_dispatch_t *router_dispatch_new(int n_workers) {
    if (n_workers < 1 || n_workers > 4096)
        return NULL;
    router_dispatch_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->n_workers = n_workers;
    self->workers = calloc((size_t)n_workers, sizeof *self->workers);
    self->cap = 64;
    self->slots = calloc((size_t)self->cap, sizeof *self->slots);
    if (!self->workers || !self->slots) {
        router_dispatch_destroy(&self);
        return NULL;
    }
    for (int i = 0; i < n_workers; i++)
        self->workers[i].alive = true;
    return self;
}

void router_dispatch_destroy(router_dispatch_t **self_p) {
    if (!self_p || !*self_p)
        return;
    free((*self_p)->workers);
    free((*self_p)->slots);
    free(*self_p);
    *self_p = NULL;
}

int router_dispatch_workers(const router_dispatch_t *self) {
    return self->n_workers;
}

static uint64_t s_hash(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

/* Slot holding rid, or -1. */
static int s_lookup(const router_dispatch_t *self, uint64_t rid) {
    int mask = self->cap - 1;
    for (int i = (int)(s_hash(rid) & (uint64_t)mask), k = 0; k < self->cap;
         i = (i + 1) & mask, k++) {
        if (self->slots[i].state == 0)
            return -1;
        if (self->slots[i].state == 1 && self->slots[i].rid == rid)
            return i;
    }
    return -1;
}

static int s_insert(router_dispatch_t *self, uint64_t rid, int worker, int64_t tokens);

static int s_grow(router_dispatch_t *self) {
    int ncap = (self->used + 1) * 4 > self->cap ? self->cap * 2 : self->cap;
    s_slot_t *old = self->slots;
    int ocap = self->cap;
    s_slot_t *ns = calloc((size_t)ncap, sizeof *ns);
    if (!ns)
        return -ENOMEM;
    self->slots = ns;
    self->cap = ncap;
    self->used = self->tomb = 0;
    for (int i = 0; i < ocap; i++)
        if (old[i].state == 1)
            s_insert(self, old[i].rid, old[i].worker, old[i].tokens);
    free(old);
    return 0;
}

static int s_insert(router_dispatch_t *self, uint64_t rid, int worker, int64_t tokens) {
    if ((self->used + self->tomb + 1) * 2 > self->cap) {
        int rc = s_grow(self);
        if (rc)
            return rc;
    }
    int mask = self->cap - 1;
    int i = (int)(s_hash(rid) & (uint64_t)mask);
    while (self->slots[i].state == 1)
        i = (i + 1) & mask;
    if (self->slots[i].state == 2)
        self->tomb--;
    self->slots[i] = (s_slot_t){rid, worker, tokens, 1};
    self->used++;
    return 0;
}

int router_dispatch_assign(router_dispatch_t *self, uint64_t rid, int64_t tokens) {
    if (s_lookup(self, rid) >= 0)
        return -EEXIST;
    int best = -1;
    int64_t best_load = 0;
    for (int w = 0; w < self->n_workers; w++) {
        const s_worker_t *x = &self->workers[w];
        if (!x->alive)
            continue;
        int64_t load = x->reported + x->pending;
        /* ties go to the worker with fewer requests, then the lower index */
        if (best < 0 || load < best_load ||
            (load == best_load && x->count < self->workers[best].count)) {
            best = w;
            best_load = load;
        }
    }
    if (best < 0)
        return -EHOSTDOWN;
    int rc = s_insert(self, rid, best, tokens);
    if (rc)
        return rc;
    self->workers[best].pending += tokens;
    self->workers[best].count++;
    return best;
}

int router_dispatch_worker_of(const router_dispatch_t *self, uint64_t rid) {
    int i = s_lookup(self, rid);
    return i < 0 ? -ENOENT : self->slots[i].worker;
}

int router_dispatch_finish(router_dispatch_t *self, uint64_t rid) {
    int i = s_lookup(self, rid);
    if (i < 0)
        return -ENOENT;
    int w = self->slots[i].worker;
    self->slots[i].state = 2;
    self->used--;
    self->tomb++;
    if (self->workers[w].count > 0)
        self->workers[w].count--;
    return w;
}

int router_dispatch_report(router_dispatch_t *self, int w, int64_t queued_tokens,
                           int64_t active_tokens) {
    if (w < 0 || w >= self->n_workers || queued_tokens < 0 || active_tokens < 0)
        return -EINVAL;
    s_worker_t *x = &self->workers[w];
    x->alive = true;
    x->reported = queued_tokens + active_tokens;
    x->pending = 0;
    return 0;
}

int router_dispatch_down(router_dispatch_t *self, int w, uint64_t *rids, int cap) {
    if (w < 0 || w >= self->n_workers)
        return -EINVAL;
    int n = 0;
    for (int i = 0; i < self->cap; i++) {
        s_slot_t *s = &self->slots[i];
        if (s->state != 1 || s->worker != w)
            continue;
        if (n < cap && rids)
            rids[n] = s->rid;
        n++;
        s->state = 2;
        self->used--;
        self->tomb++;
    }
    s_worker_t *x = &self->workers[w];
    x->alive = false;
    x->reported = x->pending = 0;
    x->count = 0;
    return n;
}

bool router_dispatch_alive(const router_dispatch_t *self, int w) {
    return w >= 0 && w < self->n_workers && self->workers[w].alive;
}

int64_t router_dispatch_load(const router_dispatch_t *self, int w) {
    if (w < 0 || w >= self->n_workers)
        return -EINVAL;
    return self->workers[w].reported + self->workers[w].pending;
}

int router_dispatch_count(const router_dispatch_t *self, int w) {
    if (w < 0 || w >= self->n_workers)
        return -EINVAL;
    return self->workers[w].count;
}

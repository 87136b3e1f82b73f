/* router_dispatch.c - least-loaded dispatch over a small worker table and a
 * map rid -> worker (base_map). */
#include "router_dispatch.h"

#include "base_map.h"

#include <errno.h>
#include <stdlib.h>

typedef struct {
    bool alive;       /* false after worker_down until its next load report */
    int64_t reported; /* queued + active tokens of the last load report */
    int64_t pending;  /* tokens dispatched since that report */
    int count;        /* requests assigned */
    bool draining;    /* a planned restart: new requests only when no other is alive */
} s_worker_t;

struct router_dispatch_t {
    int n_workers;
    s_worker_t *workers; /* (n_workers) */
    base_map_t rids;     /* rid -> the worker it was assigned to */
};

router_dispatch_t *router_dispatch_new(int n_workers) {
    if (n_workers < 1 || n_workers > 4096)
        return NULL;
    router_dispatch_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->n_workers = n_workers;
    self->workers = calloc((size_t)n_workers, sizeof *self->workers);
    if (!self->workers || base_map_init(&self->rids, 32)) {
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
    base_map_free(&(*self_p)->rids);
    free(*self_p);
    *self_p = NULL;
}

int router_dispatch_workers(const router_dispatch_t *self) {
    return self->n_workers;
}

int router_dispatch_assign(router_dispatch_t *self, uint64_t rid, int64_t tokens) {
    return router_dispatch_assign_bonus(self, rid, tokens, NULL);
}

int router_dispatch_assign_bonus(router_dispatch_t *self, uint64_t rid, int64_t tokens,
                                 const int64_t *bonus) {
    if (base_map_get(&self->rids, rid, NULL))
        return -EEXIST;
    int best = -1;
    int64_t best_load = 0;
    bool spare = false; /* an alive worker that is not draining */
    for (int w = 0; w < self->n_workers; w++)
        spare |= self->workers[w].alive && !self->workers[w].draining;
    for (int w = 0; w < self->n_workers; w++) {
        const s_worker_t *x = &self->workers[w];
        if (!x->alive || (spare && x->draining))
            continue;
        int64_t load = x->reported + x->pending - (bonus ? bonus[w] : 0);
        /* ties go to the worker with fewer requests, then the lower index */
        if (best < 0 || load < best_load ||
            (load == best_load && x->count < self->workers[best].count)) {
            best = w;
            best_load = load;
        }
    }
    if (best < 0)
        return -EHOSTDOWN;
    int rc = base_map_put(&self->rids, rid, (uint64_t)best);
    if (rc)
        return rc;
    int64_t saved = bonus && bonus[best] > 0 ? bonus[best] : 0;
    self->workers[best].pending += tokens > saved ? tokens - saved : 0;
    self->workers[best].count++;
    return best;
}

int router_dispatch_worker_of(const router_dispatch_t *self, uint64_t rid) {
    uint64_t w;
    return base_map_get(&self->rids, rid, &w) ? (int)w : -ENOENT;
}

int router_dispatch_finish(router_dispatch_t *self, uint64_t rid) {
    uint64_t x;
    if (!base_map_get(&self->rids, rid, &x))
        return -ENOENT;
    int w = (int)x;
    base_map_del(&self->rids, rid);
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

/* base_map_del_if's choice for router_dispatch_down: the rids of one worker,
 * the first cap of them kept in rids. */
typedef struct {
    uint64_t worker;
    uint64_t *rids; /* (cap) or NULL */
    int cap, n;
} s_down_t;

static bool s_on_worker(uint64_t rid, uint64_t worker, void *ctx) {
    s_down_t *d = ctx;
    if (worker != d->worker)
        return false;
    if (d->rids && d->n < d->cap)
        d->rids[d->n] = rid;
    d->n++;
    return true;
}

int router_dispatch_down(router_dispatch_t *self, int w, uint64_t *rids, int cap) {
    if (w < 0 || w >= self->n_workers)
        return -EINVAL;
    s_down_t d = {(uint64_t)w, rids, cap, 0};
    int n = (int)base_map_del_if(&self->rids, s_on_worker, &d);
    s_worker_t *x = &self->workers[w];
    x->alive = false;
    x->draining = false;
    x->reported = x->pending = 0;
    x->count = 0;
    return n;
}

int router_dispatch_set_draining(router_dispatch_t *self, int w, bool draining) {
    if (w < 0 || w >= self->n_workers)
        return -EINVAL;
    self->workers[w].draining = draining;
    return 0;
}

bool router_dispatch_draining(const router_dispatch_t *self, int w) {
    return w >= 0 && w < self->n_workers && self->workers[w].draining;
}

bool router_dispatch_drained(const router_dispatch_t *self, int w) {
    if (!router_dispatch_draining(self, w))
        return false;
    const s_worker_t *x = &self->workers[w];
    return x->count == 0 && x->reported == 0 && x->pending == 0;
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

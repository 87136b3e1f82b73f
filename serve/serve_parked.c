/* serve_parked.c - see serve_parked.h.  A map from request id to a slot (the request,
 * its deadline, a ticket), and a min-heap of (deadline, id, ticket).  Taking a request
 * out by id leaves its heap entry behind; the entry is dropped when it comes to the top
 * and its ticket no longer matches (a request parked again under the same id has a new
 * ticket, so an old deadline never wakes it). */
#include "serve_parked.h"

#include "base_map.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

typedef struct {
    void *req;         /* the caller's request */
    uint64_t deadline; /* base_now_us when it stops waiting */
    uint64_t ticket;   /* which parking this is */
} s_slot_t;

typedef struct {
    uint64_t deadline; /* the slot's, when pushed */
    uint64_t rid;      /* its key */
    uint64_t ticket;   /* stale when the slot's differs (or the slot is gone) */
} s_due_t;

struct serve_parked_t {
    base_map_t by_rid; /* rid -> (s_slot_t *) */
    s_due_t *heap;     /* (cap) deadlines, earliest on top; may hold stale entries */
    int n_heap;        /* entries in heap */
    int cap;           /* room in heap */
    uint64_t tickets;  /* the last ticket given */
};

serve_parked_t *serve_parked_new(void) {
    serve_parked_t *self = calloc(1, sizeof *self);
    if (self && base_map_init(&self->by_rid, 16)) {
        free(self);
        return NULL;
    }
    return self;
}

void serve_parked_destroy(serve_parked_t **self_p) {
    serve_parked_t *self = *self_p;
    if (!self)
        return;
    while (serve_parked_pop(self))
        ;
    base_map_free(&self->by_rid);
    free(self->heap);
    free(self);
    *self_p = NULL;
}

static s_slot_t *s_slot(const serve_parked_t *self, uint64_t rid) {
    uint64_t v;
    return base_map_get(&self->by_rid, rid, &v) ? (s_slot_t *)(uintptr_t)v : NULL;
}

static bool s_before(const s_due_t *a, const s_due_t *b) {
    return a->deadline < b->deadline || (a->deadline == b->deadline && a->ticket < b->ticket);
}

static void s_swap(s_due_t *a, s_due_t *b) {
    s_due_t t = *a;
    *a = *b;
    *b = t;
}

/* The heap without its top. */
static void s_heap_pop(serve_parked_t *self) {
    s_due_t *h = self->heap;
    h[0] = h[--self->n_heap];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < self->n_heap && s_before(&h[l], &h[m]))
            m = l;
        if (r < self->n_heap && s_before(&h[r], &h[m]))
            m = r;
        if (m == i)
            break;
        s_swap(&h[i], &h[m]);
        i = m;
    }
}

/* Drop stale entries from the top: after it the top (if any) is a held request's. */
static void s_heap_clean(serve_parked_t *self) {
    while (self->n_heap) {
        s_slot_t *s = s_slot(self, self->heap[0].rid);
        if (s && s->ticket == self->heap[0].ticket)
            return;
        s_heap_pop(self);
    }
}

int serve_parked_add(serve_parked_t *self, uint64_t rid, void *req, uint64_t deadline_us) {
    if (s_slot(self, rid))
        return -EEXIST;
    s_heap_clean(self); /* what was taken out by id leaves room here */
    if (self->n_heap == self->cap) {
        int cap = self->cap ? 2 * self->cap : 16;
        s_due_t *h = realloc(self->heap, (size_t)cap * sizeof *h);
        if (!h)
            return -ENOMEM;
        self->heap = h;
        self->cap = cap;
    }
    s_slot_t *s = malloc(sizeof *s);
    if (!s || base_map_put(&self->by_rid, rid, (uint64_t)(uintptr_t)s)) {
        free(s);
        return -ENOMEM;
    }
    *s = (s_slot_t){req, deadline_us, ++self->tickets};
    s_due_t *h = self->heap;
    int i = self->n_heap++;
    h[i] = (s_due_t){deadline_us, rid, s->ticket};
    for (; i > 0 && s_before(&h[i], &h[(i - 1) / 2]); i = (i - 1) / 2)
        s_swap(&h[i], &h[(i - 1) / 2]);
    return 0;
}

void *serve_parked_find(const serve_parked_t *self, uint64_t rid) {
    s_slot_t *s = s_slot(self, rid);
    return s ? s->req : NULL;
}

void *serve_parked_take(serve_parked_t *self, uint64_t rid) {
    s_slot_t *s = s_slot(self, rid);
    if (!s)
        return NULL;
    void *req = s->req;
    base_map_del(&self->by_rid, rid);
    free(s);
    return req;
}

void *serve_parked_expired(serve_parked_t *self, uint64_t now_us) {
    s_heap_clean(self);
    if (!self->n_heap || self->heap[0].deadline > now_us)
        return NULL;
    uint64_t rid = self->heap[0].rid;
    s_heap_pop(self);
    return serve_parked_take(self, rid);
}

void *serve_parked_pop(serve_parked_t *self) {
    s_heap_clean(self);
    return self->n_heap ? serve_parked_take(self, self->heap[0].rid) : NULL;
}

int serve_parked_count(const serve_parked_t *self) {
    return (int)self->by_rid.n;
}

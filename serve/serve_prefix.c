/* serve_prefix.c - per-worker sets of cached block hashes from KV events, and the
 * longest cached prefix of a prompt on each worker (serve_prefix.h). */
#include "serve_prefix.h"

#include "base_map.h"
#include "kv_hash.h"

#include <errno.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define S_SET_INIT 1024 /* blocks a worker's set holds before it first grows */

typedef struct {
    base_map_t blocks; /* hash -> 1: the blocks of T0 ("GPU") the worker holds */
    int64_t next_seq;  /* the next sequence number expected */
} s_worker_t;

struct serve_prefix_t {
    s_worker_t *w; /* (n_workers) */
    int n_workers;
    int block_size;  /* from the first BlockStored; 0: unknown */
    uint64_t *chain; /* (chain_cap) a prompt's block hashes during a match */
    int chain_cap;
    serve_prefix_stats_t st;
};

serve_prefix_t *serve_prefix_new(int n_workers) {
    if (n_workers < 1)
        return NULL;
    serve_prefix_t *self = calloc(1, sizeof *self);
    if (!self || !(self->w = calloc((size_t)n_workers, sizeof *self->w))) {
        free(self);
        return NULL;
    }
    self->n_workers = n_workers;
    for (int i = 0; i < n_workers; i++)
        if (base_map_init(&self->w[i].blocks, S_SET_INIT)) {
            serve_prefix_destroy(&self);
            return NULL;
        }
    return self;
}

void serve_prefix_destroy(serve_prefix_t **self_p) {
    if (!self_p || !*self_p)
        return;
    serve_prefix_t *self = *self_p;
    for (int i = 0; i < self->n_workers; i++)
        base_map_free(&self->w[i].blocks);
    free(self->w);
    free(self->chain);
    free(self);
    *self_p = NULL;
}

/* ---- decoding (msgspec's array-like tagged form, kv_events.h) */

static bool s_is(const msgpack_object *o, const char *s) {
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
           !memcmp(o->via.str.ptr, s, o->via.str.size);
}

static bool s_u64(const msgpack_object *o, uint64_t *v) {
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        *v = o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *v = (uint64_t)o->via.i64; /* a producer that sends signed 64-bit hashes */
    else
        return false;
    return true;
}

/* The medium of an event (nil: the engine's own pool) is T0. */
static bool s_t0(const msgpack_object *medium) {
    return medium->type == MSGPACK_OBJECT_NIL || s_is(medium, "GPU");
}

/* Apply one event to worker w's set; false when it does not decode. */
static bool s_event(serve_prefix_t *self, s_worker_t *w, const msgpack_object *e) {
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size < 1)
        return false;
    const msgpack_object *f = e->via.array.ptr;
    uint32_t n = e->via.array.size;
    if (s_is(&f[0], "AllBlocksCleared")) {
        base_map_free(&w->blocks);
        self->st.cleared++;
        return base_map_init(&w->blocks, S_SET_INIT) == 0;
    }
    bool stored = s_is(&f[0], "BlockStored");
    if (!stored && !s_is(&f[0], "BlockRemoved"))
        return false;
    if (n < (stored ? 7u : 3u) || f[1].type != MSGPACK_OBJECT_ARRAY)
        return false;
    const msgpack_object *medium = &f[stored ? 6 : 2];
    if (stored) {
        uint64_t bs;
        if (!s_u64(&f[4], &bs) || bs < 1 || bs > KV_MAX_BLOCK_TOKENS)
            return false;
        if (!self->block_size)
            self->block_size = (int)bs;
        else if ((int)bs != self->block_size)
            return false; /* workers with another block size cannot be matched */
    }
    if (!s_t0(medium))
        return true; /* T1/T2: not counted as cached for routing */
    for (uint32_t i = 0; i < f[1].via.array.size; i++) {
        uint64_t h;
        if (!s_u64(&f[1].via.array.ptr[i], &h))
            return false;
        if (stored) {
            if (base_map_put(&w->blocks, h, 1))
                return false;
            self->st.stored++;
        } else if (base_map_del(&w->blocks, h)) {
            self->st.removed++;
        }
    }
    return true;
}

int64_t serve_prefix_apply(serve_prefix_t *self, int wi, int64_t seq, const uint8_t *payload,
                           size_t len) {
    if (wi < 0 || wi >= self->n_workers)
        return -EINVAL;
    s_worker_t *w = &self->w[wi];
    if (seq < w->next_seq)
        return w->next_seq; /* seen already (a replay overlapping the stream) */
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    bool ok = msgpack_unpack_next(&u, (const char *)payload, len, NULL) == MSGPACK_UNPACK_SUCCESS;
    const msgpack_object *b = &u.data;
    ok = ok && b->type == MSGPACK_OBJECT_ARRAY && b->via.array.size >= 2 &&
         b->via.array.ptr[1].type == MSGPACK_OBJECT_ARRAY;
    if (ok) {
        if (seq > w->next_seq)
            self->st.gaps += seq - w->next_seq;
        const msgpack_object_array *ev = &b->via.array.ptr[1].via.array;
        for (uint32_t i = 0; i < ev->size; i++)
            if (!s_event(self, w, &ev->ptr[i]))
                self->st.bad++;
        self->st.batches++;
        w->next_seq = seq + 1;
    } else {
        self->st.bad++;
    }
    msgpack_unpacked_destroy(&u);
    return ok ? w->next_seq : -EPROTO;
}

int64_t serve_prefix_next_seq(const serve_prefix_t *self, int w) {
    return w >= 0 && w < self->n_workers ? self->w[w].next_seq : 0;
}

void serve_prefix_forget(serve_prefix_t *self, int w) {
    if (w < 0 || w >= self->n_workers)
        return;
    base_map_free(&self->w[w].blocks);
    base_map_init(&self->w[w].blocks, S_SET_INIT); /* -ENOMEM: an empty, zeroed map */
    self->w[w].next_seq = 0;
}

int serve_prefix_match(serve_prefix_t *self, const int32_t *tokens, int n, int64_t *cached) {
    for (int i = 0; i < self->n_workers; i++)
        cached[i] = 0;
    const int B = self->block_size;
    if (B < 1 || n < B)
        return 0;
    int nb = n / B;
    if (nb > self->chain_cap) {
        uint64_t *c = realloc(self->chain, (size_t)nb * sizeof *c);
        if (!c)
            return 0;
        self->chain = c;
        self->chain_cap = nb;
    }
    kv_hash_chain(tokens, n, B, self->chain);
    self->st.lookups++;
    int best = 0;
    for (int i = 0; i < self->n_workers; i++) {
        int k = 0;
        while (k < nb && base_map_get(&self->w[i].blocks, self->chain[k], NULL))
            k++;
        cached[i] = (int64_t)k * B;
        if (k * B > best)
            best = k * B;
    }
    self->st.hit_blocks += best / B;
    return best;
}

int serve_prefix_block_size(const serve_prefix_t *self) {
    return self->block_size;
}

serve_prefix_stats_t serve_prefix_stats(const serve_prefix_t *self) {
    return self->st;
}

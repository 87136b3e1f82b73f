/* kv_events.c - KV events (kv_events.h): events queued between flushes, encoded as one
 * vLLM EventBatch per flush, a ring of the last batches for replay. */
#include "kv_events.h"

#include <errno.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

typedef enum { S_STORED, S_REMOVED, S_CLEARED } s_kind_t;

/* One queued event; its hashes and tokens live in the publisher's arrays. */
typedef struct {
    uint8_t kind;     /* s_kind_t */
    uint8_t medium;   /* kv_events_medium_t */
    uint64_t parent;  /* BlockStored: parent of its first block (0: none) */
    int first_hash;   /* index into hashes */
    int n_hashes;     /* blocks named */
    size_t first_tok; /* BlockStored: index into tokens (block_size per block) */
} s_event_t;

/* A published batch kept for replay. */
typedef struct {
    int64_t seq;   /* its sequence number; -1: empty slot */
    uint8_t *data; /* (len) its payload */
    size_t len;
} s_kept_t;

struct kv_events_t {
    kv_events_config_t cfg; /* as given */
    s_event_t *ev;          /* (ev_cap) queued events; n_ev valid */
    int n_ev, ev_cap;
    uint64_t *hashes; /* (h_cap) their block hashes; n_h valid */
    int n_h, h_cap;
    int32_t *tokens; /* (t_cap) BlockStored tokens; n_t valid */
    size_t n_t, t_cap;
    s_kept_t *kept; /* (cfg.keep) ring of the last batches, by seq % keep */
    kv_events_stats_t st;
};

static const char *s_media[KV_EVENTS_MEDIA] = {"GPU", "CPU", "DISK"};

const char *kv_events_medium_name(kv_events_medium_t medium) {
    return medium >= 0 && medium < KV_EVENTS_MEDIA ? s_media[medium] : "GPU";
}

int kv_events_endpoint_for(const char *endpoint, int index, char *out, size_t len) {
    int n = -1;
    if (!strncmp(endpoint, "tcp://", 6)) {
        const char *colon = strrchr(endpoint, ':');
        char *end;
        long port = colon && colon > endpoint + 5 ? strtol(colon + 1, &end, 10) : -1;
        if (port <= 0 || *end || port + index > 65535)
            return -EINVAL;
        n = snprintf(out, len, "%.*s:%ld", (int)(colon - endpoint), endpoint, port + index);
    } else if (!strncmp(endpoint, "ipc://", 6) || !strncmp(endpoint, "inproc://", 9)) {
        n = index ? snprintf(out, len, "%s.%d", endpoint, index)
                  : snprintf(out, len, "%s", endpoint);
    }
    return n < 0 || (size_t)n >= len ? -EINVAL : 0;
}

/* Grow *p (elements of size sz, capacity *cap) to hold need; 0 or -ENOMEM. */
static int s_reserve(void **p, size_t *cap, size_t need, size_t sz) {
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * sz);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

static int s_reserve_int(void **p, int *cap, int need, size_t sz) {
    size_t c = (size_t)*cap;
    int rc = s_reserve(p, &c, (size_t)need, sz);
    *cap = (int)c;
    return rc;
}

kv_events_t *kv_events_new(const kv_events_config_t *c) {
    if (!c || c->block_size < 1 || c->keep < 1)
        return NULL;
    kv_events_t *self = calloc(1, sizeof *self);
    if (!self || !(self->kept = calloc((size_t)c->keep, sizeof *self->kept))) {
        free(self);
        return NULL;
    }
    self->cfg = *c;
    for (int i = 0; i < c->keep; i++)
        self->kept[i].seq = -1;
    return self;
}

void kv_events_destroy(kv_events_t **self_p) {
    if (!self_p || !*self_p)
        return;
    kv_events_t *self = *self_p;
    for (int i = 0; i < self->cfg.keep; i++)
        free(self->kept[i].data);
    free(self->kept);
    free(self->ev);
    free(self->hashes);
    free(self->tokens);
    free(self);
    *self_p = NULL;
}

/* ---- queueing */

/* A new event of this kind; NULL (counted as dropped) without memory. */
static s_event_t *s_push(kv_events_t *self, s_kind_t kind, kv_events_medium_t medium) {
    if (s_reserve_int((void **)&self->ev, &self->ev_cap, self->n_ev + 1, sizeof *self->ev)) {
        self->st.dropped++;
        return NULL;
    }
    s_event_t *e = &self->ev[self->n_ev++];
    *e = (s_event_t){(uint8_t)kind, (uint8_t)medium, 0, self->n_h, 0, self->n_t};
    return e;
}

static int s_add_hash(kv_events_t *self, uint64_t hash) {
    if (s_reserve_int((void **)&self->hashes, &self->h_cap, self->n_h + 1, sizeof *self->hashes))
        return -ENOMEM;
    self->hashes[self->n_h++] = hash;
    return 0;
}

void kv_events_stored(kv_events_t *self, kv_events_medium_t medium, uint64_t hash, uint64_t parent,
                      const int32_t *tokens) {
    size_t B = (size_t)self->cfg.block_size;
    if (s_reserve((void **)&self->tokens, &self->t_cap, self->n_t + B, sizeof *self->tokens) ||
        s_reserve_int((void **)&self->hashes, &self->h_cap, self->n_h + 1, sizeof *self->hashes)) {
        self->st.dropped++;
        return;
    }
    s_event_t *last = self->n_ev ? &self->ev[self->n_ev - 1] : NULL;
    bool chained = last && last->kind == S_STORED && last->medium == medium &&
                   self->hashes[last->first_hash + last->n_hashes - 1] == parent;
    s_event_t *e = chained ? last : s_push(self, S_STORED, medium);
    if (!e)
        return;
    if (!chained)
        e->parent = parent;
    s_add_hash(self, hash); /* room reserved above */
    e->n_hashes++;
    memcpy(self->tokens + self->n_t, tokens, B * sizeof *tokens);
    self->n_t += B;
}

void kv_events_removed(kv_events_t *self, kv_events_medium_t medium, uint64_t hash) {
    if (s_reserve_int((void **)&self->hashes, &self->h_cap, self->n_h + 1, sizeof *self->hashes)) {
        self->st.dropped++;
        return;
    }
    s_event_t *last = self->n_ev ? &self->ev[self->n_ev - 1] : NULL;
    bool same = last && last->kind == S_REMOVED && last->medium == medium;
    s_event_t *e = same ? last : s_push(self, S_REMOVED, medium);
    if (!e)
        return;
    s_add_hash(self, hash);
    e->n_hashes++;
}

void kv_events_cleared(kv_events_t *self) {
    s_push(self, S_CLEARED, KV_EVENTS_T0);
}

int kv_events_pending(const kv_events_t *self) {
    return self->n_ev;
}

/* ---- publishing */

static void s_pack_hashes(msgpack_packer *pk, const kv_events_t *self, const s_event_t *e) {
    msgpack_pack_array(pk, (size_t)e->n_hashes);
    for (int i = 0; i < e->n_hashes; i++)
        msgpack_pack_uint64(pk, self->hashes[e->first_hash + i]);
}

static void s_pack_str(msgpack_packer *pk, const char *s) {
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

/* One event in msgspec's array-like tagged form (kv_events.h). */
static void s_pack_event(msgpack_packer *pk, const kv_events_t *self, const s_event_t *e) {
    const char *medium = kv_events_medium_name((kv_events_medium_t)e->medium);
    switch (e->kind) {
    case S_STORED: {
        msgpack_pack_array(pk, 8);
        s_pack_str(pk, "BlockStored");
        s_pack_hashes(pk, self, e);
        if (e->parent)
            msgpack_pack_uint64(pk, e->parent);
        else
            msgpack_pack_nil(pk);
        size_t n = (size_t)e->n_hashes * (size_t)self->cfg.block_size;
        msgpack_pack_array(pk, n);
        for (size_t i = 0; i < n; i++)
            msgpack_pack_int32(pk, self->tokens[e->first_tok + i]);
        msgpack_pack_int(pk, self->cfg.block_size);
        msgpack_pack_nil(pk); /* lora_id */
        s_pack_str(pk, medium);
        msgpack_pack_nil(pk); /* lora_name */
        break;
    }
    case S_REMOVED:
        msgpack_pack_array(pk, 3);
        s_pack_str(pk, "BlockRemoved");
        s_pack_hashes(pk, self, e);
        s_pack_str(pk, medium);
        break;
    default:
        msgpack_pack_array(pk, 1);
        s_pack_str(pk, "AllBlocksCleared");
        break;
    }
}

int kv_events_flush(kv_events_t *self, double ts, int64_t *seq, const uint8_t **payload,
                    size_t *len) {
    if (!self->n_ev)
        return 0;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, ts);
    msgpack_pack_array(&pk, (size_t)self->n_ev);
    for (int i = 0; i < self->n_ev; i++)
        s_pack_event(&pk, self, &self->ev[i]);
    msgpack_pack_int(&pk, self->cfg.dp_rank);
    int n_ev = self->n_ev;
    self->n_ev = self->n_h = 0;
    self->n_t = 0;
    if (!sb.data) { /* msgpack-c could not allocate */
        self->st.dropped += n_ev;
        return -ENOMEM;
    }
    int64_t q = self->st.batches++;
    self->st.events += n_ev;
    self->st.bytes += (int64_t)sb.size;
    s_kept_t *k = &self->kept[q % self->cfg.keep]; /* the buffer moves into the ring */
    free(k->data);
    k->seq = q;
    k->data = (uint8_t *)sb.data;
    k->len = sb.size;
    *seq = q;
    *payload = k->data;
    *len = k->len;
    return 1;
}

int kv_events_kept(const kv_events_t *self, int64_t from, int64_t *seq, const uint8_t **payload,
                   size_t *len) {
    int64_t first = self->st.batches - self->cfg.keep;
    if (from < first)
        from = first;
    if (from < 0)
        from = 0;
    for (int64_t q = from; q < self->st.batches; q++) {
        const s_kept_t *k = &self->kept[q % self->cfg.keep];
        if (k->seq == q && k->data) {
            *seq = q;
            *payload = k->data;
            *len = k->len;
            return 1;
        }
    }
    return 0;
}

kv_events_stats_t kv_events_stats(const kv_events_t *self) {
    return self->st;
}

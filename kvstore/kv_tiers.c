/* kv_tiers.c - T1 (a DRAM pool of blocks) and T2 (kv_ssd) under one index by
 * block hash, eviction by kv_policy, format conversion by kv_codec (see
 * kv_tiers.h).  Owns the pool, the kv_ssd, both policies, the index and the
 * records of gets not yet answered.
 *
 * Invariants (checked by the asserts beside them):
 *   - an index entry exists iff its block is in T1 (t1 >= 0) or T2 (t2 >= 0),
 *     possibly both (a promoted block keeps its T2 copy; a demoted one keeps
 *     its T1 copy until the write completes);
 *   - a T1 slot is an eviction candidate iff it is used, not held by an
 *     answer and not being demoted;
 *   - a T2 slot is a candidate iff it holds a block that is written and has
 *     no read or write in flight (so kv_ssd_free frees it at once).
 */
#include "kv_tiers.h"

#include "base_clock.h"
#include "base_fifo.h"
#include "base_log.h"
#include "base_map.h"
#include "kv_ssd.h"

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define TAG "kv_tiers"
#define S_POLL_BATCH 32 /* kv_ssd completions taken per kv_ssd_poll */

/* ---- the index: block hash -> where the block lives.  A base_map whose
 * value packs the T1 and the T2 slot (-1: not in that tier); a block in
 * neither tier is not in the index. */

typedef struct {
    int32_t t1; /* T1 slot or -1 */
    int32_t t2; /* T2 slot or -1 */
} s_loc_t;

static uint64_t s_pack(s_loc_t l) {
    return (uint64_t)(uint32_t)l.t1 << 32 | (uint32_t)l.t2;
}

static s_loc_t s_unpack(uint64_t v) {
    return (s_loc_t){(int32_t)(uint32_t)(v >> 32), (int32_t)(uint32_t)v};
}

/* ---- state */

typedef struct {
    kv_meta_t meta; /* the block's meta */
    bool used;      /* holds a block */
    bool demoting;  /* its write to T2 is queued or in flight */
    bool keep;      /* asked for during its demotion: stays in T1 after it */
    int hold;       /* answers pointing into this slot, not yet released */
} s_t1_t;

typedef struct {
    uint64_t hash; /* 0: free */
    int pin;       /* importance, for the policy */
    bool clean;    /* written (or found at start): readable */
    bool writing;  /* its write is in flight */
    int reading;   /* reads in flight */
    bool told;     /* on_change saw it stored (a full block written here, not found at start) */
} s_t2_t;

/* A get (or a warm) not yet released. */
typedef struct s_rec_t {
    kv_tiers_done_t done;  /* the answer */
    kv_meta_t meta;        /* the block's meta when the answer is not in T1 */
    void *copy;            /* the block's bytes when no T1 slot could take it */
    int t1;                /* T1 slot held by the answer, or -1 */
    int t2;                /* T2 slot to read (t2 wait list), or -1 */
    bool warm;             /* a warm: promote, answer no one */
    struct s_rec_t *next;  /* free list link */
    base_fifo_link_t link; /* ready, delivered or t2_wait queue */
} s_rec_t;

typedef base_fifo_t s_rlist_t; /* of s_rec_t, through link */

struct kv_tiers_t {
    kern_kv_shape_t shape; /* block shape */
    int t1_fmt, t2_fmt;    /* storage formats */
    size_t t1_bb, t2_bb;   /* bytes of a block in each */
    int t1_n;              /* T1 capacity */
    uint8_t *t1_data;      /* (t1_n, t1_bb) */
    s_t1_t *t1;            /* (t1_n) */
    int *t1_free;          /* (t1_n) stack of free T1 slots */
    int t1_n_free;
    int t1_reserve;      /* demote ahead until free + demoting >= this */
    int t1_demoting;     /* T1 slots being demoted */
    kv_policy_t *t1_pol; /* over T1 slots */
    kv_ssd_t *ssd;       /* NULL: no T2 */
    int t2_n;            /* T2 capacity */
    s_t2_t *t2;          /* (t2_n) */
    kv_policy_t *t2_pol; /* over T2 slots */
    base_map_t ix;       /* hash -> s_loc_t, packed (s_pack) */
    s_rlist_t ready;     /* answers to deliver */
    s_rlist_t delivered; /* answers returned by the last poll */
    s_rlist_t t2_wait;   /* reads waiting for a free kv_ssd request */
    s_rec_t *rec_free;   /* records to reuse */
    int recs_open;       /* records not yet delivered (or warms not finished) */
    int writes;          /* T2 writes in flight */
    kv_tiers_stats_t st;
    kv_tiers_change_fn on_change; /* or NULL */
    void *change_arg;
};

/* Where block h lives: true (and *l, when l is not NULL) when it is indexed. */
static bool s_find(const kv_tiers_t *self, uint64_t h, s_loc_t *l) {
    uint64_t v;
    if (!base_map_get(&self->ix, h, &v))
        return false;
    if (l)
        *l = s_unpack(v);
    return true;
}

/* Record where block h lives; in neither tier, it leaves the index.  The map
 * has room for every slot of both tiers (kv_tiers_new), so it never grows. */
static void s_set(kv_tiers_t *self, uint64_t h, s_loc_t l) {
    if (l.t1 < 0 && l.t2 < 0) {
        base_map_del(&self->ix, h);
    } else {
        int rc = base_map_put(&self->ix, h, s_pack(l));
        assert(rc == 0); /* never grows: see above */
        (void)rc;
    }
}

static void s_rpush(s_rlist_t *l, s_rec_t *r) {
    base_fifo_push(l, &r->link);
}

static s_rec_t *s_rpop(s_rlist_t *l) {
    return BASE_FIFO_ENTRY(base_fifo_pop(l), s_rec_t, link);
}

static uint8_t *s_t1_ptr(const kv_tiers_t *self, int slot) {
    return self->t1_data + (size_t)slot * self->t1_bb;
}

/* ---- T1 slots */

static void s_t1_hold(kv_tiers_t *self, int slot) {
    if (self->t1[slot].hold++ == 0)
        kv_policy_remove(self->t1_pol, slot);
}

static void s_t1_unhold(kv_tiers_t *self, int slot) {
    s_t1_t *t = &self->t1[slot];
    assert(t->hold > 0);
    if (--t->hold == 0 && t->used && !t->demoting)
        kv_policy_insert(self->t1_pol, slot, base_now_us(), t->meta.pin, false);
}

/* Forget the T1 copy in slot (not held): the slot goes back to the free stack
 * and the index entry loses its t1 (and goes if no T2 copy is left). */
static void s_t1_release(kv_tiers_t *self, int slot) {
    s_t1_t *t = &self->t1[slot];
    assert(t->used && t->hold == 0);
    kv_policy_remove(self->t1_pol, slot);
    if (t->demoting) {
        t->demoting = false;
        self->t1_demoting--;
    }
    s_loc_t e;
    bool found = s_find(self, t->meta.hash, &e);
    assert(found && e.t1 == slot);
    (void)found;
    e.t1 = -1;
    s_set(self, t->meta.hash, e);
    if (self->on_change && t->meta.n_tokens == self->shape.block_size)
        self->on_change(self->change_arg, false, 1, t->meta.hash, &t->meta);
    t->used = false;
    t->keep = false;
    self->t1_free[self->t1_n_free++] = slot;
    self->st.t1_used--;
}

/* ---- T2 slots */

/* Drop the block in T2 slot s (a candidate, or already freed by kv_ssd). */
static void s_t2_forget(kv_tiers_t *self, int s, bool ssd_free) {
    s_t2_t *t = &self->t2[s];
    assert(t->hash != 0);
    kv_policy_remove(self->t2_pol, s);
    if (ssd_free)
        kv_ssd_free(self->ssd, s);
    s_loc_t e;
    bool found = s_find(self, t->hash, &e);
    assert(found && e.t2 == s);
    (void)found;
    e.t2 = -1;
    s_set(self, t->hash, e);
    if (self->on_change && t->told)
        self->on_change(self->change_arg, false, 2, t->hash, NULL);
    t->hash = 0;
    t->clean = false;
    t->writing = false;
    self->st.t2_used--;
}

/* A free T2 slot, evicting the policy's victim if T2 is full; -ENOSPC when
 * every T2 block has I/O in flight. */
static int s_t2_alloc(kv_tiers_t *self) {
    int s = kv_ssd_alloc(self->ssd);
    if (s != -ENOSPC)
        return s;
    int v = kv_policy_victim(self->t2_pol);
    if (v < 0)
        return -ENOSPC;
    s_t2_forget(self, v, true);
    self->st.t2_dropped++;
    return kv_ssd_alloc(self->ssd); /* v had no I/O in flight: it is free now */
}

/* Queue a write of a block to T2, converting src (format fmt) into the T2
 * format straight into the request's buffer.  The T2 slot is recorded in
 * the index entry of meta->hash (which must exist).  0, -ENOSPC, -EBUSY. */
static int s_t2_write(kv_tiers_t *self, const kv_meta_t *meta, int fmt, const void *src) {
    if (kv_ssd_free_requests(self->ssd) == 0)
        return -EBUSY;
    int s = s_t2_alloc(self);
    if (s < 0)
        return s;
    void *dst;
    int rc = kv_ssd_write_prep(self->ssd, s, meta, self->t2_fmt, self->t2_bb, 0, &dst);
    assert(rc == 0); /* a free slot, a free request, a checked meta */
    rc = kv_codec_convert(&self->shape, fmt, src, self->t2_fmt, dst, meta->n_tokens);
    assert(rc == 0); /* formats and shape checked in kv_tiers_new */
    (void)rc;
    self->t2[s] = (s_t2_t){.hash = meta->hash, .pin = meta->pin, .writing = true};
    /* a new block in s: restart its use count, then keep it out of the order
     * until the write completes */
    kv_policy_insert(self->t2_pol, s, base_now_us(), meta->pin, true);
    kv_policy_remove(self->t2_pol, s);
    s_loc_t e = {-1, -1}; /* a put straight to T2 is not indexed yet */
    s_find(self, meta->hash, &e);
    assert(e.t2 < 0);
    e.t2 = s;
    s_set(self, meta->hash, e);
    self->t2[s].told = self->on_change && meta->n_tokens == self->shape.block_size;
    if (self->t2[s].told)
        self->on_change(self->change_arg, true, 2, meta->hash, meta);
    self->writes++;
    self->st.t2_used++;
    self->st.t1_to_t2++;
    self->st.bytes_written += (int64_t)self->t2_bb;
    return 0;
}

/* ---- demotion and T1 allocation */

/* Start writing the block in T1 slot v (a candidate) to T2; the T1 copy
 * stays, out of the policy, until the write completes.  0 or -errno. */
static int s_demote(kv_tiers_t *self, int v) {
    s_t1_t *t = &self->t1[v];
    int rc = s_t2_write(self, &t->meta, self->t1_fmt, s_t1_ptr(self, v));
    if (rc < 0)
        return rc;
    kv_policy_remove(self->t1_pol, v);
    t->demoting = true;
    t->keep = false;
    self->t1_demoting++;
    return 0;
}

/* Make T1 slot v (a candidate) free now: a block with a T2 copy just loses
 * its T1 copy; one without is written to T2 (its bytes go with the request)
 * or, failing that, dropped. */
static void s_t1_evict(kv_tiers_t *self, int v) {
    s_loc_t e;
    bool found = s_find(self, self->t1[v].meta.hash, &e);
    assert(found && e.t1 == v);
    (void)found;
    if (e.t2 < 0 && !(self->ssd && s_demote(self, v) == 0))
        self->st.t2_dropped++; /* no T2, or T2 cannot take it now */
    s_t1_release(self, v);
}

/* A free T1 slot: a free one, else a block being demoted (its bytes are
 * safe in the write request), else the policy's victim.  -1 when every
 * slot is held by an answer. */
static int s_t1_alloc(kv_tiers_t *self) {
    if (self->t1_n_free == 0 && self->t1_demoting > 0) {
        for (int i = 0; i < self->t1_n; i++) {
            if (self->t1[i].used && self->t1[i].demoting && self->t1[i].hold == 0) {
                s_t1_release(self, i);
                break;
            }
        }
    }
    if (self->t1_n_free == 0) {
        int v = kv_policy_victim(self->t1_pol);
        if (v < 0)
            return -1;
        s_t1_evict(self, v);
    }
    assert(self->t1_n_free > 0);
    int slot = self->t1_free[--self->t1_n_free];
    s_t1_t *t = &self->t1[slot];
    assert(!t->used && t->hold == 0);
    t->used = true;
    t->demoting = t->keep = false;
    self->st.t1_used++;
    return slot;
}

/* Demote ahead of need, so that a put finds a free slot while the T1 copies
 * of the blocks on their way to T2 still answer gets. */
static void s_t1_rebalance(kv_tiers_t *self) {
    if (!self->ssd)
        return;
    while (self->t1_n_free + self->t1_demoting < self->t1_reserve) {
        int v = kv_policy_victim(self->t1_pol);
        if (v < 0)
            return;
        s_loc_t e = {-1, -1};
        s_find(self, self->t1[v].meta.hash, &e);
        if (e.t2 >= 0)
            s_t1_release(self, v); /* already in T2: nothing to write */
        else if (s_demote(self, v) < 0)
            return; /* T2 busy: try again at the next put */
    }
}

/* Store a block (format fmt) in a fresh T1 slot (it becomes a candidate with
 * a new use count); its entry exists. */
static void s_t1_fill(kv_tiers_t *self, int slot, const kv_meta_t *meta, int fmt, const void *src) {
    s_t1_t *t = &self->t1[slot];
    int rc = kv_codec_convert(&self->shape, fmt, src, self->t1_fmt, s_t1_ptr(self, slot),
                              meta->n_tokens);
    assert(rc == 0);
    (void)rc;
    t->meta.hash = meta->hash;
    t->meta.parent = meta->parent;
    t->meta.n_tokens = meta->n_tokens;
    t->meta.pin = meta->pin;
    memcpy(t->meta.tokens, meta->tokens, (size_t)meta->n_tokens * sizeof meta->tokens[0]);
    s_loc_t e = {-1, -1}; /* a new block is not indexed yet */
    s_find(self, meta->hash, &e);
    assert(e.t1 < 0);
    e.t1 = slot;
    s_set(self, meta->hash, e);
    if (self->on_change && meta->n_tokens == self->shape.block_size)
        self->on_change(self->change_arg, true, 1, meta->hash, &t->meta);
    kv_policy_insert(self->t1_pol, slot, base_now_us(), meta->pin, true);
}

/* ---- records */

static s_rec_t *s_rec_new(kv_tiers_t *self, uint64_t hash, uint64_t tag) {
    s_rec_t *r = self->rec_free;
    if (r)
        self->rec_free = r->next;
    else if (!(r = malloc(sizeof *r)))
        return NULL;
    r->done = (kv_tiers_done_t){.tag = tag, .hash = hash};
    r->copy = NULL;
    r->t1 = r->t2 = -1;
    r->warm = false;
    r->next = NULL;
    self->recs_open++;
    return r;
}

static void s_rec_free(kv_tiers_t *self, s_rec_t *r) {
    if (r->t1 >= 0)
        s_t1_unhold(self, r->t1);
    free(r->copy);
    r->copy = NULL;
    r->next = self->rec_free;
    self->rec_free = r;
}

/* The answer is the block in T1 slot (held until the answer is released). */
static void s_rec_answer_t1(kv_tiers_t *self, s_rec_t *r, int slot, int tier) {
    s_t1_hold(self, slot);
    r->t1 = slot;
    r->done.status = 0;
    r->done.tier = tier;
    r->done.meta = &self->t1[slot].meta;
    r->done.fmt = self->t1_fmt;
    r->done.data = s_t1_ptr(self, slot);
    r->done.bytes = self->t1_bb;
    s_rpush(&self->ready, r);
}

static void s_rec_fail(kv_tiers_t *self, s_rec_t *r, int status, int tier) {
    r->done.status = status;
    r->done.tier = tier;
    if (r->warm) {
        self->recs_open--;
        s_rec_free(self, r);
    } else {
        s_rpush(&self->ready, r);
    }
}

/* Queue the T2 read of r (slot r->t2 is out of the T2 policy already). */
static void s_issue_waiting(kv_tiers_t *self) {
    while (self->t2_wait.head && kv_ssd_free_requests(self->ssd) > 0) {
        s_rec_t *r = s_rpop(&self->t2_wait);
        int rc = kv_ssd_read(self->ssd, r->t2, (uint64_t)(uintptr_t)r);
        assert(rc == 0); /* the slot holds a block with no way out while reading */
        (void)rc;
    }
}

/* ---- completions */

static void s_on_write(kv_tiers_t *self, const kv_ssd_done_t *d) {
    s_t2_t *t = &self->t2[d->slot];
    assert(t->hash != 0 && t->writing);
    t->writing = false;
    self->writes--;
    s_loc_t e;
    bool found = s_find(self, t->hash, &e);
    assert(found && e.t2 == d->slot);
    (void)found;
    int t1 = e.t1;
    if (d->status == 0) {
        t->clean = true;
        if (t->reading == 0)
            kv_policy_insert(self->t2_pol, d->slot, base_now_us(), t->pin, false);
    } else {
        LOG_W(TAG, "T2 write failed: %d", d->status);
        self->st.io_errors++;
        self->st.t1_to_t2--;
        self->st.bytes_written -= (int64_t)self->t2_bb;
        /* reads queued behind it fail (kv_ssd keeps the slot until they finish) */
        s_t2_forget(self, d->slot, true);
    }
    if (t1 >= 0 && self->t1[t1].demoting) {
        s_t1_t *s = &self->t1[t1];
        s->demoting = false;
        self->t1_demoting--;
        if (d->status == 0 && !s->keep && s->hold == 0) {
            s_t1_release(self, t1); /* on T2 now: the T1 slot is free */
        } else {
            s->keep = false;
            if (s->hold == 0)
                kv_policy_insert(self->t1_pol, t1, base_now_us(), s->meta.pin, false);
        }
    }
}

static void s_on_read(kv_tiers_t *self, const kv_ssd_done_t *d) {
    s_rec_t *r = (s_rec_t *)(uintptr_t)d->tag;
    s_t2_t *t = &self->t2[d->slot];
    assert(t->reading > 0);
    t->reading--;
    int status = d->status;
    bool ssd_free = false; /* kv_ssd frees a slot that failed its own checks */
    if (status == 0 && t->hash == 0) {
        status = -ENOENT; /* forgotten while the read was in flight (a failed write) */
    } else if (status == 0 &&
               (d->meta->hash != t->hash || d->fmt != self->t2_fmt || d->bytes != self->t2_bb ||
                d->meta->n_tokens > self->shape.block_size)) {
        status = -EBADMSG;
        ssd_free = true;
    }
    if (status < 0) {
        if (status == -EBADMSG)
            self->st.checksum_failures++;
        else if (status != -ENOENT)
            self->st.io_errors++;
        if (!r->warm)
            self->st.t2_misses++;
        if (t->hash && status == -EBADMSG)
            s_t2_forget(self, d->slot, ssd_free); /* other reads of it fail the same way */
        else if (t->hash && t->reading == 0 && !t->writing)
            kv_policy_insert(self->t2_pol, d->slot, base_now_us(), t->pin, false);
        s_rec_fail(self, r, status, 2);
        return;
    }
    self->st.bytes_read += (int64_t)d->bytes;
    if (!r->warm)
        self->st.t2_hits++;
    /* promotion: into T1 unless a T1 copy exists already (another get) */
    uint64_t hash = t->hash;
    s_loc_t e = {-1, -1};
    s_find(self, hash, &e);
    int slot = e.t1;
    if (slot < 0) {
        slot = s_t1_alloc(self); /* may evict, demote, drop T2 blocks: not this one */
        if (slot >= 0) {
            s_t1_fill(self, slot, d->meta, self->t2_fmt, d->data);
            self->st.t2_to_t1++;
        }
    } else if (!r->warm) {
        kv_policy_touch(self->t1_pol, slot, base_now_us());
    }
    if (t->reading == 0 && !t->writing) /* back into T2's eviction order, after the touch */
        kv_policy_insert(self->t2_pol, d->slot, base_now_us(), t->pin, false);
    if (r->warm) {
        self->recs_open--;
        s_rec_free(self, r);
    } else if (slot >= 0) {
        s_rec_answer_t1(self, r, slot, 2);
    } else { /* every T1 slot is held by answers: answer from a copy */
        r->copy = malloc(d->bytes);
        if (!r->copy) {
            s_rec_fail(self, r, -ENOMEM, 2);
            return;
        }
        memcpy(r->copy, d->data, d->bytes);
        r->meta = *d->meta;
        r->done.status = 0;
        r->done.tier = 2;
        r->done.meta = &r->meta;
        r->done.fmt = self->t2_fmt;
        r->done.data = r->copy;
        r->done.bytes = d->bytes;
        s_rpush(&self->ready, r);
    }
    s_t1_rebalance(self);
}

static void s_process(kv_tiers_t *self, const kv_ssd_done_t *d, int n) {
    for (int i = 0; i < n; i++) {
        if (d[i].op == KV_SSD_WRITE)
            s_on_write(self, &d[i]);
        else
            s_on_read(self, &d[i]);
    }
}

/* ---- open and close */

static uint64_t s_cookie(const kern_kv_shape_t *s, int fmt) {
    int32_t v[6] = {0x5354524b /* "STRK" */, 1, s->n_layer, s->n_head_kv, s->head_dim, 0};
    v[5] = s->block_size * 16 + fmt;
    return XXH3_64bits(v, sizeof v);
}

static int s_cmp_seq(const void *a, const void *b) {
    const uint64_t *x = a, *y = b; /* (seq, slot) pairs */
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Index the blocks kv_ssd found, oldest write first (so the oldest go first). */
static int s_recover(kv_tiers_t *self) {
    uint64_t(*v)[2] = malloc((size_t)self->t2_n * sizeof *v);
    if (!v)
        return -ENOMEM;
    int n = 0;
    for (int s = 0; s < self->t2_n; s++) {
        kv_ssd_info_t info;
        if (!kv_ssd_slot_info(self->ssd, s, &info))
            continue;
        v[n][0] = info.seq;
        v[n][1] = (uint64_t)s;
        n++;
    }
    qsort(v, (size_t)n, sizeof *v, s_cmp_seq);
    uint64_t now = base_now_us();
    int kept = 0;
    for (int k = 0; k < n; k++) {
        int s = (int)v[k][1];
        kv_ssd_info_t info;
        kv_ssd_slot_info(self->ssd, s, &info);
        if (info.fmt != self->t2_fmt || info.bytes != self->t2_bb ||
            info.n_tokens > self->shape.block_size || s_find(self, info.hash, NULL)) {
            kv_ssd_free(self->ssd, s); /* not a block of this layout (or a copy) */
            continue;
        }
        s_set(self, info.hash, (s_loc_t){-1, s});
        self->t2[s] = (s_t2_t){.hash = info.hash, .pin = info.pin, .clean = true};
        kv_policy_insert(self->t2_pol, s, now - (uint64_t)(n - k), info.pin, true);
        kept++;
    }
    free(v);
    self->st.t2_used = kept;
    self->st.t2_recovered = kept;
    return 0;
}

kv_tiers_t *kv_tiers_new(const kv_tiers_config_t *c, char *err, size_t errlen) {
    if (err && errlen)
        err[0] = '\0';
    const char *why = NULL;
    bool has_t2 = c && c->t2_dir && c->t2_dir[0];
    if (!c)
        why = "no configuration";
    else if (c->shape.block_size < 1 || c->shape.block_size > KV_MAX_BLOCK_TOKENS ||
             kv_fmt_block_bytes(&c->shape, KV_FMT_F32) == 0)
        why = "bad block shape";
    else if (c->t1_blocks < 1)
        why = "t1_blocks must be >= 1";
    else if (kv_fmt_block_bytes(&c->shape, c->t1_fmt) == 0)
        why = "bad t1 format";
    else if (has_t2 && (c->t2_blocks < 1 || kv_fmt_block_bytes(&c->shape, c->t2_fmt) == 0))
        why = "bad t2 size or format";
    else if (c->policy < KV_POLICY_LRU || c->policy > KV_POLICY_SCORED)
        why = "bad policy";
    else if (c->queue_depth < 0 || c->queue_depth > 4096)
        why = "bad queue depth";
    if (why) {
        if (err && errlen)
            snprintf(err, errlen, "kv_tiers: %s", why);
        return NULL;
    }
    kv_tiers_t *self = calloc(1, sizeof *self);
    if (!self)
        goto nomem;
    self->shape = c->shape;
    self->t1_fmt = c->t1_fmt;
    self->t2_fmt = c->t2_fmt;
    self->t1_bb = kv_fmt_block_bytes(&c->shape, c->t1_fmt);
    self->t2_bb = has_t2 ? kv_fmt_block_bytes(&c->shape, c->t2_fmt) : 0;
    self->t1_n = c->t1_blocks;
    self->t2_n = has_t2 ? c->t2_blocks : 0;
    int qd = c->queue_depth ? c->queue_depth : 64;
    self->t1_reserve = 0;
    if (has_t2 && self->t1_n >= 2) {
        self->t1_reserve = self->t1_n / 8;
        if (self->t1_reserve > qd / 4)
            self->t1_reserve = qd / 4;
        if (self->t1_reserve < 1)
            self->t1_reserve = 1;
    }
    self->t1 = calloc((size_t)self->t1_n, sizeof *self->t1);
    self->t1_free = malloc((size_t)self->t1_n * sizeof *self->t1_free);
    self->t1_data = aligned_alloc(64, (self->t1_n * self->t1_bb + 63) / 64 * 64);
    self->t1_pol = kv_policy_new(c->policy, self->t1_n);
    int ix_rc = base_map_init(&self->ix, (size_t)self->t1_n + (size_t)self->t2_n + 1);
    if (!self->t1 || !self->t1_free || !self->t1_data || !self->t1_pol || ix_rc)
        goto nomem;
    for (int i = self->t1_n - 1; i >= 0; i--)
        self->t1_free[self->t1_n_free++] = i;

    if (has_t2) {
        self->t2 = calloc((size_t)self->t2_n, sizeof *self->t2);
        self->t2_pol = kv_policy_new(c->policy, self->t2_n);
        if (!self->t2 || !self->t2_pol)
            goto nomem;
        kv_ssd_config_t sc = {.dir = c->t2_dir,
                              .n_slots = self->t2_n,
                              .payload_max = self->t2_bb,
                              .queue_depth = qd,
                              .cookie = s_cookie(&c->shape, c->t2_fmt)};
        self->ssd = kv_ssd_new(&sc, err, errlen);
        if (!self->ssd)
            goto fail;
        if (s_recover(self) < 0)
            goto nomem;
    }
    return self;

nomem:
    if (err && errlen)
        snprintf(err, errlen, "kv_tiers: out of memory");
fail:
    kv_tiers_destroy(&self);
    return NULL;
}

/* Process kv_ssd completions until nothing is in flight. */
static void s_drain(kv_tiers_t *self) {
    for (int spins = 0; spins < 100000; spins++) {
        s_issue_waiting(self);
        if (kv_ssd_pending(self->ssd) == 0 && !self->t2_wait.head)
            return;
        kv_ssd_done_t d[S_POLL_BATCH];
        int n = kv_ssd_poll(self->ssd, d, S_POLL_BATCH, 100000);
        if (n < 0)
            return;
        s_process(self, d, n);
    }
    LOG_E(TAG, "I/O still pending at close");
}

static void s_rlist_free(s_rlist_t *l) {
    s_rec_t *r;
    while ((r = s_rpop(l))) {
        free(r->copy);
        free(r);
    }
}

void kv_tiers_destroy(kv_tiers_t **self_p) {
    if (!self_p || !*self_p)
        return;
    kv_tiers_t *self = *self_p;
    if (self->ssd && self->t2_pol) /* finish every read and write (records travel in tags) */
        s_drain(self);
    kv_ssd_destroy(&self->ssd);
    s_rlist_free(&self->ready);
    s_rlist_free(&self->delivered);
    s_rlist_free(&self->t2_wait);
    while (self->rec_free) {
        s_rec_t *r = self->rec_free;
        self->rec_free = r->next;
        free(r);
    }
    kv_policy_destroy(&self->t1_pol);
    kv_policy_destroy(&self->t2_pol);
    base_map_free(&self->ix);
    free(self->t1_data);
    free(self->t1_free);
    free(self->t1);
    free(self->t2);
    free(self);
    *self_p = NULL;
}

/* ---- operations */

static bool s_meta_ok(const kv_tiers_t *self, const kv_meta_t *m) {
    return m && m->n_tokens >= 1 && m->n_tokens <= self->shape.block_size && m->pin >= 0 &&
           m->pin <= 255 && m->hash != 0 &&
           m->hash == kv_hash_block(m->parent, m->tokens, m->n_tokens);
}

int kv_tiers_put(kv_tiers_t *self, const kv_meta_t *meta, int fmt, const void *data, size_t len) {
    if (!s_meta_ok(self, meta) || !data || kv_fmt_block_bytes(&self->shape, fmt) == 0 ||
        len != kv_fmt_block_bytes(&self->shape, fmt))
        return -EINVAL;
    uint64_t now = base_now_us();
    s_loc_t e;
    if (s_find(self, meta->hash, &e)) {
        self->st.puts++;
        self->st.put_dups++;
        if (e.t1 >= 0)
            kv_policy_touch(self->t1_pol, e.t1, now);
        else if (e.t2 >= 0)
            kv_policy_touch(self->t2_pol, e.t2, now);
        return 0;
    }
    int slot = s_t1_alloc(self);
    if (slot < 0) { /* every T1 slot holds an answer: straight to T2 */
        if (!self->ssd)
            return -ENOSPC;
        if (s_t2_write(self, meta, fmt, data) < 0)
            return -ENOSPC;
        self->st.puts++;
        return 0;
    }
    s_t1_fill(self, slot, meta, fmt, data);
    s_t1_rebalance(self);
    self->st.puts++;
    return 0;
}

int kv_tiers_get(kv_tiers_t *self, uint64_t hash, uint64_t tag) {
    s_rec_t *r = s_rec_new(self, hash, tag);
    if (!r)
        return -ENOMEM;
    uint64_t now = base_now_us();
    s_loc_t e;
    bool found = hash && s_find(self, hash, &e);
    if (found && e.t1 >= 0) {
        self->st.t1_hits++;
        s_t1_t *t = &self->t1[e.t1];
        if (t->demoting)
            t->keep = true; /* it was wanted: keep the T1 copy after the write */
        kv_policy_touch(self->t1_pol, e.t1, now);
        s_rec_answer_t1(self, r, e.t1, 1);
        return 0;
    }
    self->st.t1_misses++;
    if (!found) {
        self->st.t2_misses++;
        r->done.status = -ENOENT;
        s_rpush(&self->ready, r);
        return 0;
    }
    s_t2_t *t = &self->t2[e.t2];
    kv_policy_touch(self->t2_pol, e.t2, now);
    kv_policy_remove(self->t2_pol, e.t2); /* no eviction while reading */
    t->reading++;
    r->t2 = e.t2;
    s_rpush(&self->t2_wait, r);
    s_issue_waiting(self);
    return 0;
}

int kv_tiers_warm(kv_tiers_t *self, uint64_t hash) {
    s_loc_t e;
    if (!hash || !s_find(self, hash, &e))
        return -ENOENT;
    if (e.t1 >= 0)
        return 0;
    s_rec_t *r = s_rec_new(self, hash, 0);
    if (!r)
        return -ENOMEM;
    r->warm = true;
    s_t2_t *t = &self->t2[e.t2];
    kv_policy_remove(self->t2_pol, e.t2);
    t->reading++;
    r->t2 = e.t2;
    s_rpush(&self->t2_wait, r);
    s_issue_waiting(self);
    return 0;
}

int kv_tiers_where(const kv_tiers_t *self, uint64_t hash) {
    s_loc_t e;
    if (!hash || !s_find(self, hash, &e))
        return 0;
    return e.t1 >= 0 ? 1 : 2;
}

int kv_tiers_poll(kv_tiers_t *self, kv_tiers_done_t *out, int max, int wait_us) {
    s_rec_t *r;
    while ((r = s_rpop(&self->delivered)))
        s_rec_free(self, r);
    if (self->ssd) {
        int wait = self->ready.head ? 0 : wait_us;
        for (;;) {
            s_issue_waiting(self);
            kv_ssd_done_t d[S_POLL_BATCH];
            int n = kv_ssd_poll(self->ssd, d, S_POLL_BATCH, wait);
            if (n < 0) {
                LOG_E(TAG, "kv_ssd_poll: %d", n);
                self->st.io_errors++;
                break;
            }
            s_process(self, d, n);
            if (n == 0)
                break;
            wait = 0;
        }
    }
    int n = 0;
    while (n < max && (r = s_rpop(&self->ready))) {
        out[n++] = r->done;
        self->recs_open--;
        s_rpush(&self->delivered, r);
    }
    return n;
}

int kv_tiers_free_io(const kv_tiers_t *self) {
    return self->ssd ? kv_ssd_free_requests(self->ssd) : INT32_MAX;
}

int kv_tiers_pending(const kv_tiers_t *self) {
    return self->recs_open + self->writes;
}

void kv_tiers_on_change(kv_tiers_t *self, kv_tiers_change_fn fn, void *arg) {
    self->on_change = fn;
    self->change_arg = arg;
}

kv_tiers_stats_t kv_tiers_stats(const kv_tiers_t *self) {
    kv_tiers_stats_t s = self->st;
    s.t1_bytes = (int64_t)s.t1_used * (int64_t)self->t1_bb;
    s.t2_bytes = (int64_t)s.t2_used * (int64_t)self->t2_bb;
    return s;
}

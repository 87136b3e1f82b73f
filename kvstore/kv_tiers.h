/* kv_tiers.h - the lower tiers of the KV store, as the KV tier manager actor
 * owns them: T1, a DRAM pool of blocks, and T2, SSD files written and read
 * with io_uring (kv_ssd.h).  One global index by block hash over both tiers.
 *
 * put   a block demoted from a worker's T0 is stored in T1 (converted to the
 *       T1 format); when T1 is full, the policy's victim is demoted to T2
 *       (converted to the T2 format, written asynchronously); when T2 is full,
 *       its victim is dropped.
 * get   asks for a block: a T1 hit completes at the next poll; a T2 hit is
 *       read asynchronously (checksum verified; a block that fails it is
 *       dropped from the index and reported -EBADMSG); a miss completes with
 *       -ENOENT.  A T2 block read by get is also kept in T1 (promotion).
 * warm  lifts a T2 block into T1 (no answer to anyone).
 * No call blocks on the disk except kv_tiers_new (which rebuilds the T2
 * index from the files) and kv_tiers_destroy (which waits for writes).
 * Not thread-safe: one actor thread owns it.
 *
 * Details of the implementation (kv_tiers.c):
 * - T1 demotes ahead of need: when free + demoting T1 slots fall below a small
 *   reserve (t1_blocks / 8, at least 1, at most queue_depth / 4), the policy's
 *   victims start their T2 writes; their T1 copies answer gets until the write
 *   completes, then their slots are freed (kept, if a get asked for them
 *   meanwhile).  Under a burst, a put takes a slot whose write is in flight
 *   (its bytes are in the write request; a get then reads T2 after the write).
 * - A block can be in both tiers: a promoted block keeps its T2 copy, so
 *   evicting it from T1 again writes nothing.
 * - An answer pointing into T1 keeps that slot from eviction until the next
 *   poll.  A T2 hit is answered from its promoted T1 copy (fmt = t1_fmt); when
 *   every T1 slot is held by answers, from a copy in the T2 format.
 * - T2 is a kv_ssd (kv_ssd.h) in t2_dir, its layout cookie made from the shape
 *   and t2_fmt: blocks written under another shape or T2 format are not found.
 */
#ifndef KV_TIERS_H
#define KV_TIERS_H

#include "kv_codec.h"
#include "kv_hash.h"
#include "kv_policy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kv_tiers_t kv_tiers_t;

typedef struct {
    kern_kv_shape_t shape;   /* block shape */
    int t1_blocks;           /* DRAM pool capacity in blocks (>= 1) */
    int t1_fmt;              /* T1 storage format (KV_FMT_*) */
    const char *t2_dir;      /* directory of the SSD files; NULL or "": no T2 */
    int t2_blocks;           /* SSD capacity in blocks */
    int t2_fmt;              /* T2 storage format */
    kv_policy_kind_t policy; /* eviction order in both tiers */
    int queue_depth;         /* io_uring entries (and registered buffers); 0: 64 */
} kv_tiers_config_t;

/* One finished get. */
typedef struct {
    uint64_t tag; /* as given to kv_tiers_get */
    uint64_t hash;
    int status;            /* 0; -ENOENT (not in T1/T2); -EBADMSG (checksum failed); -EIO */
    int tier;              /* 1 or 2: where it was found */
    const kv_meta_t *meta; /* status 0: parent, tokens, pin */
    int fmt;               /* format of data */
    const void *data;      /* status 0: the block; valid until the next kv_tiers_poll */
    size_t bytes;
} kv_tiers_done_t;

typedef struct {
    int64_t t1_hits, t1_misses;        /* gets answered from T1 / not in T1 */
    int64_t t2_hits, t2_misses;        /* gets read from T2 / in neither (or the read
                                          failed: checksum or I/O error) */
    int64_t puts, put_dups;            /* blocks put (accepted); of which already present */
    int64_t t1_to_t2, t2_dropped;      /* demotions T1 -> T2 (T2 writes); blocks that left
                                          the store: evicted out of T2, or T1 victims with
                                          no T2 (or none free for them) */
    int64_t t2_to_t1;                  /* promotions T2 -> T1 (get or warm) */
    int64_t bytes_written, bytes_read; /* to / from T2 */
    int64_t checksum_failures;         /* T2 blocks that failed their checksum */
    int64_t io_errors;
    int t1_used, t2_used;       /* blocks held */
    int64_t t1_bytes, t2_bytes; /* bytes held (payloads) */
    int t2_recovered;           /* blocks found in T2 files at start */
} kv_tiers_stats_t;

/* What the change callback sees (kv_tiers_on_change): a full block entering tier 1 or 2
 * (meta: its hash, parent and tokens) or leaving it (meta: T1's; NULL for T2, whose slots
 * keep only the hash). */
typedef void (*kv_tiers_change_fn)(void *arg, bool stored, int tier, uint64_t hash,
                                   const kv_meta_t *meta);

/* Open (creating the T2 files, or finding the blocks already in them).  NULL
 * with a one-line reason in err. */
kv_tiers_t *kv_tiers_new(const kv_tiers_config_t *c, char *err, size_t errlen);
/* Waits for pending writes, closes files; nulls *self_p; safe twice. */
void kv_tiers_destroy(kv_tiers_t **self_p);

/* fn sees every full block (block_size tokens) entering or leaving T1 (put, promotion /
 * eviction) and T2 (its write queued / its eviction or a failed read), a removal only after
 * its store; not the T2 blocks found at start (their tokens are not read).  It must not
 * call back into the store.  NULL: none. */
void kv_tiers_on_change(kv_tiers_t *self, kv_tiers_change_fn fn, void *arg);

/* 0; -EINVAL (bad meta, fmt or size; meta->hash must be kv_hash_block of its
 * parent and tokens); -ENOSPC (every T1 slot holds an answer not yet released
 * and T2 cannot take the block now: poll, then retry).  A block already held
 * is only touched.  data is copied (converted) before the return. */
int kv_tiers_put(kv_tiers_t *self, const kv_meta_t *meta, int fmt, const void *data, size_t len);
/* 0 (queued: completes in kv_tiers_poll) or -ENOMEM. */
int kv_tiers_get(kv_tiers_t *self, uint64_t hash, uint64_t tag);
/* 0 (queued or already in T1), -ENOENT. */
int kv_tiers_warm(kv_tiers_t *self, uint64_t hash);
/* 1 (T1), 2 (T2) or 0. */
int kv_tiers_where(const kv_tiers_t *self, uint64_t hash);
/* Submit queued I/O, reap completions and return up to max finished gets.
 * wait_us > 0: wait that long for at least one completion when I/O is pending. */
int kv_tiers_poll(kv_tiers_t *self, kv_tiers_done_t *out, int max, int wait_us);
/* I/O requests T2 can still take now (INT32_MAX without T2).  A put may need
 * one to demote T1's victim: with none free, the victim is dropped, so a
 * caller that must not lose blocks polls until one is free. */
int kv_tiers_free_io(const kv_tiers_t *self);
/* Gets and writes in flight. */
int kv_tiers_pending(const kv_tiers_t *self);
kv_tiers_stats_t kv_tiers_stats(const kv_tiers_t *self);

#endif

/* kv_events.h - KV cache events in vLLM's wire format, for the cluster routers that
 * already consume it (Dynamo's KV router, llm-d's prefix-cache scorer, ...) and for
 * strata's own router.
 *
 * A queue collects what changed in a worker's KV index (full blocks stored, blocks
 * removed, everything cleared); a flush (a worker flushes after each step) encodes it
 * as one numbered EventBatch, in msgspec's array-like tagged form as vLLM's
 * ZmqEventPublisher sends it, and keeps the last `keep` batches for replay.  The
 * sockets are the worker's (actors/actor_worker_events.c: PUB frames
 * topic | sequence number (8 bytes, big-endian) | payload, and a ROUTER answering
 * replays; docs/KV_EVENTS.md).  This is library code: no sockets here.
 *
 *
 *     EventBatch       [ts (float seconds), [event, ...], data_parallel_rank]
 *     BlockStored      ["BlockStored", [hash, ...], parent hash | nil, [token, ...],
 *                       block_size, lora_id (nil), medium, lora_name (nil)]
 *     BlockRemoved     ["BlockRemoved", [hash, ...], medium]
 *     AllBlocksCleared ["AllBlocksCleared"]
 *
 * Hashes are strata's chained 64-bit block hashes (kv_hash.h; unsigned); a
 * BlockStored lists consecutive blocks of one chain, its tokens block_size per block.
 * Media: T0 (the worker's own pool) "GPU" -- vLLM's name for the pool the engine
 * computes from, whatever memory it is in --, T1 "CPU", T2 "DISK".
 *
 * Not thread-safe: the worker thread that owns the cache owns its queue.
 */
#ifndef KV_EVENTS_H
#define KV_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kv_events_t kv_events_t;

typedef enum { KV_EVENTS_T0, KV_EVENTS_T1, KV_EVENTS_T2, KV_EVENTS_MEDIA } kv_events_medium_t;

typedef struct {
    int block_size; /* tokens per block (BlockStored's block_size) */
    int keep;       /* batches kept for replay (>= 1) */
    int dp_rank;    /* EventBatch's data_parallel_rank */
} kv_events_config_t;

typedef struct {
    int64_t batches; /* batches published (the next sequence number) */
    int64_t events;  /* events in them */
    int64_t bytes;   /* payload bytes */
    int64_t dropped; /* events lost: no memory to hold them */
} kv_events_stats_t;

/* An empty queue.  NULL on a bad config (block size, keep < 1) or no memory. */
kv_events_t *kv_events_new(const kv_events_config_t *c);
/* Free it (unflushed events are dropped) and null *self_p; safe twice. */
void kv_events_destroy(kv_events_t **self_p);

/* Queue one full block stored in `medium`: hash chained from parent (0: the first
 * block of a sequence, sent as nil), tokens[0..block_size).  Consecutive blocks of one
 * chain in one medium merge into one BlockStored. */
void kv_events_stored(kv_events_t *self, kv_events_medium_t medium, uint64_t hash, uint64_t parent,
                      const int32_t *tokens);
/* Queue one block removed from `medium` (consecutive removals merge). */
void kv_events_removed(kv_events_t *self, kv_events_medium_t medium, uint64_t hash);
/* Queue AllBlocksCleared: what this publisher said before no longer holds (a worker
 * sends it when it starts: a restarted worker's cache is empty). */
void kv_events_cleared(kv_events_t *self);
/* Events queued and not yet flushed. */
int kv_events_pending(const kv_events_t *self);
/* Encode the queued events as the next batch, stamped ts (seconds since the epoch), and
 * keep it: its sequence number into *seq, its payload into *payload / *len (valid until
 * the batch leaves the ring, `keep` flushes later).  1: a batch was made; 0: nothing was
 * queued; -ENOMEM: the events were dropped (counted). */
int kv_events_flush(kv_events_t *self, double ts, int64_t *seq, const uint8_t **payload,
                    size_t *len);
/* The kept batch with the smallest sequence number >= from (a replay walks them with
 * from = *seq + 1).  1 found; 0 none left. */
int kv_events_kept(const kv_events_t *self, int64_t from, int64_t *seq, const uint8_t **payload,
                   size_t *len);
kv_events_stats_t kv_events_stats(const kv_events_t *self);
/* The endpoint of publisher `index` (a worker's number) from a shared one, as vLLM
 * offsets by data-parallel rank: tcp://HOST:PORT -> tcp://HOST:(PORT + index);
 * ipc://PATH and inproc://NAME -> PATH.index / NAME.index (index 0 unchanged).  0, or
 * -EINVAL (a tcp endpoint without a numeric port, another transport, or too long). */
int kv_events_endpoint_for(const char *endpoint, int index, char *out, size_t len);
/* The medium's name on the wire ("GPU", "CPU", "DISK"). */
const char *kv_events_medium_name(kv_events_medium_t medium);

#endif

/* msg_kv.h - the KV store family: prefetch hints, promotions and KV blocks
 * moving between the target workers (T0), the KV tier manager (T1 DRAM, T2
 * SSD) and the prefetcher.  A block's data never travels inside MessagePack:
 * it follows the kv_block header as a second, raw frame (actor_send_raw /
 * actor_recv_raw), in the format named by "fmt" (kvstore/kv_codec.h).
 *
 * A block is named by its chained hash (kvstore/kv_hash.h): the same prefix
 * has the same name in every worker, tier and process.
 */
#ifndef MSG_KV_H
#define MSG_KV_H

#include "msg_types.h"

#define MSG_MAX_BLOCK_TOKENS 256 /* tokens per KV block */

/* 28 kv_hint (router -> prefetcher): request rid with this prompt goes to worker. */
typedef struct {
    uint64_t rid;
    int worker;      /* target worker index */
    int32_t *tokens; /* (n_tokens) prompt token ids */
    int n_tokens;
    char session[MSG_MAX_SESSION_BYTES + 1]; /* chat session id, or "" */
} msg_kv_hint_t;

/* 29 kv_promote (prefetcher -> tier manager): send worker every block of the
 * prompt's prefix found in T1/T2 (warm = false), or only lift T2 blocks into T1
 * (warm = true: keep a session warm).  The tier manager chains the hashes
 * itself from the tokens and its block size. */
typedef struct {
    uint64_t rid;
    int worker;
    int32_t *tokens; /* (n_tokens) prompt token ids */
    int n_tokens;
    bool warm;
} msg_kv_promote_t;

/* 30 kv_block (worker -> tier manager: a demoted block, rid 0; tier manager ->
 * worker: a promoted block for request rid).  Followed by one raw frame. */
typedef struct {
    uint64_t rid;    /* promotion for this request, or 0 */
    int worker;      /* sender (puts) or destination (promotions) */
    uint64_t hash;   /* chained hash of this block */
    uint64_t parent; /* chained hash of the block before it (0 for the first) */
    int32_t *tokens; /* (n_tokens) the block's token ids, 1..MSG_MAX_BLOCK_TOKENS */
    int n_tokens;
    int fmt; /* kv_fmt_t of the raw frame */
    int pin; /* importance 0..255 (system prompt > 0): eviction keeps it longer */
} msg_kv_block_t;

/* 31 kv_promote_done (tier manager -> worker): all blocks found for rid were sent. */
typedef struct {
    uint64_t rid;
    int sent;    /* blocks sent */
    int missing; /* blocks of the prompt not in T1/T2 (first miss ends the chain) */
} msg_kv_promote_done_t;

MSG_DECLARE_CODEC(kv_hint)
MSG_DECLARE_CODEC(kv_promote)
MSG_DECLARE_CODEC(kv_block)
MSG_DECLARE_CODEC(kv_promote_done)

#endif

/* actor_kvtier.h - the KV tier manager: owns T1 (a DRAM pool shared by every
 * worker of the deployment) and T2 (SSD files over io_uring), both behind one
 * global index by block hash (kvstore/kv_tiers).  Workers demote evicted T0
 * blocks to it; the prefetcher asks it to promote a prompt's cached prefix to
 * the worker that will run the prompt.  Block data travels as a raw frame
 * after the kv_block header.
 *
 * Command / reply table (inbound PULL socket):
 *   kv_block   (worker, + raw frame) -> stored in T1 (demoting T1's victim to T2);
 *                                       a block whose hash does not match its
 *                                       parent and tokens, or whose size is not
 *                                       its format's, is refused and counted
 *   kv_promote (prefetcher, warm=0) -> every block of the prompt's chain found in
 *                                       T1/T2 to the worker
 *                                       as kv_block + raw frame, then
 *                                       kv_promote_done {sent, missing}
 *   kv_promote (warm=1)             -> lifts the chain's T2 blocks into T1; no reply
 *   ping / stats_query              -> pong / stats_answer to the frontend
 *   stop                            -> ends the actor (pending writes complete)
 *
 * Options: actor_kvtier_opts in actor_kvtier.c (`strata actor --help`).
 */
#ifndef ACTOR_KVTIER_H
#define ACTOR_KVTIER_H

#include "actor_runtime.h"

/* The options of kvtier, loaded by the runtime through actor_kvtier_opts (one
 * field per option, named after its key): actor_env_cfg(env) in the actor. */
typedef struct {
    const char *model;       /* GGUF path (read for the KV block shape only) */
    int block_size;          /* positions per KV block */
    int t1_blocks;           /* T1 DRAM pool, in blocks */
    int t1_fmt;              /* f32|f16|int8|int4 = kv_fmt_t: T1 block format */
    const char *t2_dir;      /* T2 SSD files (O_DIRECT, io_uring); none: no T2 */
    int t2_blocks;           /* T2 capacity in blocks */
    int t2_fmt;              /* f32|f16|int8|int4 = kv_fmt_t: T2 block format */
    int policy;              /* lru|lfu|scored = kv_policy_kind_t: eviction order in T1 and T2 */
    int queue_depth;         /* io_uring entries and registered buffers */
    int nice;                /* CPU priority lowered by this much for its thread */
    const char *tier_events; /* PUB endpoint of T1/T2 KV events (NULL: off) */
    const char *tier_events_replay; /* ROUTER endpoint answering replays (NULL: none) */
    int tier_events_keep;           /* batches kept for replay */
} actor_kvtier_cfg_t;

int actor_kvtier_main(actor_env_t *env);
/* Its options, declared once (name, type, default, range, help). */
extern const actor_opt_t actor_kvtier_opts[];

#endif

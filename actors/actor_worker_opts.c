/* actor_worker_opts.c - the target worker's options (actor_worker.h): one entry per
 * field of actor_worker_cfg_t, with its default, range and help (`strata actor --help`,
 * docs/TOPOLOGY.md). */
#include "actor_worker.h"

#include "kv_codec.h"
#include "kv_hash.h"
#include "kv_policy.h"
#include "model_spec.h"
#include "msg_moe.h"

_Static_assert(MSG_DTYPE_F32 == 0 && MSG_DTYPE_F16 == 1,
               "expert_dtype=f32|f16 loads as its index, a msg_dtype_t");

const actor_opt_t actor_worker_opts[] = {
    {"model", ACTOR_OPT_PATH, NULL, 0, 0, NULL, "GGUF path",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, model)},
    {"device", ACTOR_OPT_STRING, "cpu", 0, 0, NULL,
     "where the forward pass runs: cpu, cuda:N (T0 KV f16 in device memory), or cpu-seam "
     "(the GPU worker's code path on the CPU, one thread) (docs/GPU.md)",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, device)},
    {"threads", ACTOR_OPT_INT, "1", 1, 256, NULL, "threads of the forward pass (device=cpu)",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, threads)},
    {"max_batch", ACTOR_OPT_INT, "16", 1, 4096, NULL, "requests running at once",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, max_batch)},
    {"kv_blocks", ACTOR_OPT_INT, "512", 1, 1 << 24, NULL,
     "KV blocks (of block_size positions) in the worker's pool",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, kv_blocks)},
    {"block_size", ACTOR_OPT_INT, "16", 1, KV_MAX_BLOCK_TOKENS, NULL, "positions per KV block",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, block_size)},
    {"queue", ACTOR_OPT_INT, "64", 0, 1 << 20, NULL,
     "requests waiting for admission before overloaded",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, queue)},
    {"step_tokens", ACTOR_OPT_INT, "256", 1, 1 << 16, NULL,
     "tokens per forward step: decode tokens first, the rest prefill chunks",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, step_tokens)},
    {"max_ctx", ACTOR_OPT_INT, "2048", 2, 1 << 20, NULL,
     "positions per request (prompt + max_tokens)",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, max_ctx)},
    {"kv_type", ACTOR_OPT_ENUM, "f16", 0, 0, "f32|f16|int8", "T0 KV format",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, kv_type), .parse = kv_fmt_parse},
    {"kv_policy", ACTOR_OPT_ENUM, "scored", 0, 0, "lru|lfu|scored", "T0 eviction order",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, kv_policy), .parse = kv_policy_parse},
    {"prefix_cache", ACTOR_OPT_BOOL, "1", 0, 0, NULL,
     "share cached prompt prefixes (0: every prompt computed)",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, prefix_cache)},
    {"write_through", ACTOR_OPT_BOOL, "1", 0, 0, NULL,
     "with a KV tier manager: send each full KV block of a running request to T1 at once "
     "(a request resumed after this worker dies promotes them instead of recomputing)",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, write_through)},
    {"prefetch_wait_ms", ACTOR_OPT_INT, "200", 0, 60000, NULL,
     "how long a request waits for its promotions from T1/T2 before it recomputes",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, prefetch_wait_ms)},
    {"spec", ACTOR_OPT_BOOL, "1", 0, 0, NULL,
     "with a draft actor: 0 turns speculation off for this worker",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, spec)},
    {"spec_k", ACTOR_OPT_INT, "0", 0, MODEL_SPEC_MAX_K, NULL,
     "fixed draft depth; 0: adaptive (from acceptance and load)",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, spec_k)},
    {"spec_k_max", ACTOR_OPT_INT, "8", 1, MODEL_SPEC_MAX_K, NULL, "adaptive: the largest depth",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, spec_k_max)},
    {"spec_wait_us", ACTOR_OPT_INT, "20000", 0, 60000000, NULL,
     "longest wait for a draft before a step runs without it",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, spec_wait_us)},
    {"expert_dtype", ACTOR_OPT_ENUM, "f32", 0, 0, "f32|f16",
     "with expert actors and an MoE model: the rows sent to them (f32: bitwise the local "
     "forward; f16: half the bytes)",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, expert_dtype)},
    {"expert_timeout_ms", ACTOR_OPT_INT, "1000", 1, 600000, NULL,
     "with expert actors: the wait for an expert actor's reply before its rows go to "
     "another actor hosting the expert (or are computed here)",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, expert_timeout_ms)},
    {"kv_events", ACTOR_OPT_STRING, NULL, 0, 0, NULL,
     "publish KV cache events (vLLM's EventBatch) on a ZeroMQ PUB socket bound here, e.g. "
     "tcp://*:5557; worker i binds the port + i (ipc: the path + '.i'); unset: off "
     "(docs/KV_EVENTS.md)",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, kv_events)},
    {"kv_events_replay", ACTOR_OPT_STRING, NULL, 0, 0, NULL,
     "with kv_events: a ROUTER socket bound here answers replay requests (the port + i too)",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, kv_events_replay)},
    {"kv_events_keep", ACTOR_OPT_INT, "10000", 1, 1 << 20, NULL,
     "with kv_events_replay: event batches kept for replay",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, kv_events_keep)},
    {NULL},
};

/* actor_expert_client.h - the target worker's side of the expert actors: the
 * MoE exec hook (model_ctx_set_moe_exec) that sends one MoE layer's routed rows
 * to the expert actors chosen from the newest dispatch table (router_moe_assign),
 * waits for every reply (one round trip per MoE layer per step), and writes y.
 * A reply that does not come within the timeout, or an actor the router marks
 * down meanwhile, has its rows resent to another actor hosting the expert; the
 * last resort computes them here (model_moe_expert_rows, bitwise the same).
 * While it waits it reads the worker's inbox itself: expert replies and tables
 * are handled at once, anything else is deferred to the worker's loop
 * (actor_loop_defer).  Counters (the worker's): moe.calls, moe.rows,
 * moe.frames, moe.wait_us, moe.timeouts, moe.resent, moe.local_rows,
 * moe.failed_replies, moe.stale_replies, moe.overflow, moe.overflow.expert<E>,
 * moe.rows.expert<E>.actor<A>, moe.table.version.
 */
#ifndef ACTOR_EXPERT_CLIENT_H
#define ACTOR_EXPERT_CLIENT_H

#include "actor_runtime.h"
#include "model.h"

typedef struct actor_expert_client_t actor_expert_client_t;

/* For worker `index` (named name) of topo with model (borrowed; an MoE model)
 * whose inbox (borrowed, registered with loop) receives the replies.  dtype:
 * MSG_DTYPE_F32 or MSG_DTYPE_F16; timeout_ms: the wait for one reply before
 * its rows go elsewhere.  NULL with err when the placement is invalid or
 * sockets or memory fail. */
actor_expert_client_t *actor_expert_client_new(const actor_topology_t *topo, const char *name,
                                               int index, const model_t *model, actor_loop_t *loop,
                                               zsock_t *inbox, int dtype, int timeout_ms, char *err,
                                               size_t errlen);
void actor_expert_client_destroy(actor_expert_client_t **self_p);

/* The model_moe_exec_fn: user is the client.  0, or -ENOMEM / -EIO (rows
 * that could be computed nowhere). */
int actor_expert_client_exec(void *user, const model_moe_call_t *call);
/* A dispatch table from the router (newer versions replace older ones). */
void actor_expert_client_table(actor_expert_client_t *self, const msg_expert_table_t *t);

#endif

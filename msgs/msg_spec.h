/* msg_spec.h - the speculative-decoding family: target worker <-> draft worker.
 *
 * A draft_request carries the whole token history of a request (prompt plus the
 * tokens accepted so far) so the draft worker needs no other state to stay in
 * step: its drafter rolls its own KV back to the longest common prefix.  The
 * proposals are deterministic (argmax of the draft model, or an n-gram match),
 * i.e. the draft distribution q is one-hot, which the target's rejection
 * sampling rule handles exactly (model/model_spec.h).
 */
#ifndef MSG_SPEC_H
#define MSG_SPEC_H

#include "msg_types.h"

#define MSG_MAX_DRAFT 16 /* proposals per draft_reply */

/* 32 draft_request (target worker -> draft worker) */
typedef struct {
    uint64_t rid;
    int worker;      /* reply to this target worker */
    uint64_t seq;    /* echoed in the reply: the target ignores stale replies */
    int32_t *tokens; /* (n_tokens) history: prompt + accepted tokens */
    int n_tokens;
    int k; /* proposals wanted, 1..MSG_MAX_DRAFT */
} msg_draft_request_t;

/* 33 draft_reply (draft worker -> target worker) */
typedef struct {
    uint64_t rid;
    uint64_t seq;
    int base;        /* the history length the proposals continue */
    int32_t *tokens; /* (n_tokens) proposed tokens, 0..MSG_MAX_DRAFT */
    int n_tokens;
} msg_draft_reply_t;

/* 34 draft_end (target worker -> draft worker): rid finished; free its state. */
typedef struct {
    uint64_t rid;
    int worker;
} msg_draft_end_t;

MSG_DECLARE_CODEC(draft_request)
MSG_DECLARE_CODEC(draft_reply)
MSG_DECLARE_CODEC(draft_end)

#endif

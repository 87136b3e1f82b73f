/* actor_worker_int.h - what the three files of the target worker actor share (not an
 * actor's header: only they include it).  actor_worker.c is the requests' side (intake,
 * the step's results as events, cancels, load reports, the loop); actor_worker_spec.c the
 * draft worker's (draft requests and replies, how long a step waits for them);
 * actor_worker_tiers.c the KV tier manager's (blocks demoted and written through, blocks
 * promoted, requests parked while their prompt comes up from T1/T2).  What they decide is
 * serve/ (serve_step, serve_work, serve_emit, serve_parked, serve_grammars); all run on
 * the actor's one thread. */
#ifndef ACTOR_WORKER_INT_H
#define ACTOR_WORKER_INT_H

#include "actor_expert_client.h"
#include "actor_kv_events.h"
#include "actor_runtime.h"

#include "kv_cache.h"
#include "model.h"
#include "model_device.h"
#include "sched_batch.h"
#include "serve_emit.h"
#include "serve_grammars.h"
#include "serve_metrics.h"
#include "serve_parked.h"
#include "serve_step.h"
#include "serve_work.h"

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One request the worker holds (waiting, parked or running). */
typedef struct {
    serve_work_t work;      /* the request (first: the step's user pointer, the seq's
                               address, is the request's) */
    uint64_t draft_seq;     /* last draft_request sent (0: none yet) */
    bool draft_pending;     /* its reply has not arrived */
    uint64_t draft_sent_us; /* when it was sent */
    int draft_k;            /* proposals it asked for */
    int promoted;           /* blocks promoted for it while it was parked */
} actor_worker_req_t;
static_assert(offsetof(actor_worker_req_t, work) == 0, "work must come first");
static_assert(offsetof(serve_work_t, seq) == 0, "seq must come first");

typedef struct {
    actor_env_t *env;               /* runtime */
    const char *name;               /* "worker0" */
    int index;                      /* worker number */
    zsock_t *in;                    /* inbound PULL */
    zsock_t *to_tok;                /* PUSH to the tokenizer */
    zsock_t *to_router;             /* PUSH to the router */
    zsock_t *to_front;              /* PUSH to the frontend (events, pong, stats) */
    zsock_t *to_tier;               /* PUSH to the KV tier manager, or NULL */
    zsock_t *to_draft;              /* PUSH to the draft worker, or NULL: no speculation */
    model_t *model;                 /* weights */
    model_tokenizer_t *tok;         /* end-of-generation tokens, detokenization */
    model_ctx_t *ctx;               /* forward scratch and threads (device=cpu), or */
    kern_backend_t *be;             /* (another device) the backend, borrowed by kv, and */
    model_dev_t *dev;               /* the forward pass on it */
    kv_cache_t *kv;                 /* T0: KV pool, prefix index, allocator */
    actor_kv_events_t *events;      /* KV events (option kv_events), or NULL: off */
    sched_batch_t *sched;           /* continuous batching policy */
    model_sampler_t *sampler;       /* scratch shared by all requests (one thread) */
    serve_step_t *step;             /* the step: what a forward pass computes, in order */
    serve_work_config_t intake;     /* what a request is checked against and built with */
    serve_grammars_t *grammars;     /* compiled grammars (at least max_batch of them) */
    serve_emit_t *emit;             /* text events: detokenizer, stop strings, logprobs */
    serve_parked_t *parked;         /* requests waiting for promotions */
    serve_metrics_step_t *metrics;  /* per-step histograms (docs/METRICS.md) */
    actor_expert_client_t *experts; /* MoE layers over expert actors, or NULL: in process */
    actor_loop_t *loop;             /* polling, control messages, counters */
    actor_counters_t *counters;     /* the loop's */
    int block_size;                 /* option block_size: positions per KV block */
    int prefetch_wait_ms;           /* option prefetch_wait_ms: longest wait for promotions */
    int spec_wait_us;               /* option spec_wait_us: longest wait for a draft */
    bool self_promote;              /* a tier manager but no prefetcher: ask for promotions */
    bool write_through;             /* a tier manager, and full blocks go there at once */
    int n_pending_drafts;           /* draft replies outstanding */
    double draft_us_per_token;      /* EMA of a draft reply's latency per proposed token */
    uint64_t last_report_us;        /* last load_report */
    bool dirty;                     /* state changed since the last report */
} actor_worker_t;

/* ---- the requests' side (actor_worker.c) */

/* Append a decision to r's trace (serve_work_trace, now). */
void actor_worker_trace(actor_worker_t *w, actor_worker_req_t *r, const char *what, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));
/* Hand r to the scheduler (serve_step_admit), or refuse it (and free it). */
void actor_worker_admit(actor_worker_t *w, actor_worker_req_t *r);
/* Free r: its computed prompt published for later requests, its KV released, the draft
 * worker told; nulls *rp. */
void actor_worker_req_free(actor_worker_t *w, actor_worker_req_t **rp);

/* ---- the draft worker's side (actor_worker_spec.c) */

/* Ask the draft worker for proposals continuing r's history (when speculation is on and
 * the adaptive depth says it pays). */
void actor_worker_want_draft(actor_worker_t *w, actor_worker_req_t *r);
/* A draft_reply: its proposals go to the step. */
void actor_worker_on_draft(void *self, const msg_draft_reply_t *m);
/* True while a step should wait for draft replies still on their way. */
bool actor_worker_wait_drafts(actor_worker_t *w);
/* r ends: its draft state goes (a reply outstanding, the drafter's copy). */
void actor_worker_draft_end(actor_worker_t *w, actor_worker_req_t *r);

/* ---- reports (actor_worker_report.c) */

/* A load_report to the router, and the load and T0 counters; clears dirty. */
void actor_worker_report(actor_worker_t *w);
/* actor_timer_fn, before every stats_answer: the histograms' and grammar cache's counters. */
void actor_worker_on_stats(void *self);

/* ---- KV events (actor_worker_events.c) */

/* With a kv_events endpoint: the publisher (actor_kv_events.h), fed by T0's index
 * changes, bound at worker i's port (+ i), AllBlocksCleared queued.  0 (also when endpoint is NULL
 * or ""), or a negative errno with the reason in err (a bad endpoint, one that cannot be bound, no
 * memory). */
int actor_worker_events_start(actor_worker_t *w, const char *endpoint, const char *replay_ep,
                              int keep, char *err, size_t errlen);
/* Publish what T0's index did since the last call, as one batch (nothing when idle). */
void actor_worker_events_flush(actor_worker_t *w);
/* Close the sockets and free the queue (before the cache it listens to); safe twice. */
void actor_worker_events_stop(actor_worker_t *w);

/* ---- the KV tier manager's side (actor_worker_tiers.c) */

/* kv_cache_evict_fn: a block evicted from T0 is demoted to the tier manager. */
void actor_worker_on_evict(void *arg, const kv_cache_evicted_t *b);
/* kv_cache_evict_fn: write-through of a running request's block just filled. */
void actor_worker_on_written(void *arg, const kv_cache_evicted_t *b);
/* A block promoted from T1/T2 (for a parked request, or late). */
void actor_worker_on_block(void *self, const msg_kv_block_t *b, zmq_msg_t *raw);
/* The tier manager is done promoting for a request: it runs now. */
void actor_worker_on_promote_done(void *self, const msg_kv_promote_done_t *m);
/* Park r while its prompt's blocks come up from T1/T2 (asking for them when no
 * prefetcher does).  False when it could not be parked (it runs at once). */
bool actor_worker_park(actor_worker_t *w, actor_worker_req_t *r);
/* Parked requests whose promotions did not finish in time run now. */
void actor_worker_check_parked(actor_worker_t *w);

#endif

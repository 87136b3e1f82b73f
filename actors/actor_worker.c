/* actor_worker.c - the target worker actor: a thin loop around serve_step (what a
 * batched step computes and in which order: sched_batch, kv_cache with prefix
 * sharing, model_ctx_forward, sampling and draft verification), emitting a
 * text_event per generated token.  This file is the requests' side: intake
 * (serve_work), the step's results as events (serve_emit), cancels, probes, load
 * reports, set-up and the loop; the draft worker's side is actor_worker_spec.c, the
 * KV tier manager's actor_worker_tiers.c (actor_worker_int.h). */
#include "actor_worker.h"
#include "actor_worker_int.h"

#include "actor_placement.h"

#include "base_clock.h"
#include "base_log.h"
#include "kv_compress.h"
#include "model_sampler.h"
#include "model_spec.h"
#include "model_tokenizer.h"
#include "serve_device.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_GRAMMARS_MIN 8 /* grammars cached at least (else max_batch of them) */

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
    {"preempt", ACTOR_OPT_BOOL, "1", 0, 0, NULL,
     "a waiting request of a better priority preempts running ones of a worse priority when "
     "it does not fit (their KV stays cached; they resume with the same output; "
     "docs/OPERATIONS.md, Priorities)",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, preempt)},
    {"priority_aging_ms", ACTOR_OPT_INT, "1000", 0, 3600000, NULL,
     "a waiting request's priority improves by 1 for every this many ms it waits, so a "
     "low-priority request is not passed over for ever (0: no aging)",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, priority_aging_ms)},
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
    {"kv_compress", ACTOR_OPT_STRING, "none", 0, 0,
     "none|window:B|h2o:B|snapkv:B (B: rows or a percentage; docs/KV_COMPRESSION.md)",
     "in-sequence KV compression of the requests that name none (CPU worker, full-attention "
     "models): none, window:B, h2o:B or snapkv:B",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, kv_compress), .parse = kv_compress_valid},
    {NULL},
};

/* The worker's options (actor_env_cfg). */
static const actor_worker_cfg_t *s_conf(const actor_worker_t *w) {
    return actor_env_cfg(w->env);
}

/* ---- requests */

void actor_worker_trace(actor_worker_t *w, actor_worker_req_t *r, const char *what, const char *fmt,
                        ...) {
    if (!r->work.seq.trace)
        return;
    va_list ap;
    va_start(ap, fmt);
    serve_work_vtrace(&r->work, w->name, base_now_us(), what, fmt, ap);
    va_end(ap);
}

void actor_worker_req_free(actor_worker_t *w, actor_worker_req_t **rp) {
    actor_worker_req_t *r = *rp;
    if (!r)
        return;
    serve_step_seq_t *s = &r->work.seq;
    if (s->kv.n && !s->embed_sum) /* what it computed serves later requests */
        serve_step_publish(w->step, s, s->n_computed, true);
    actor_worker_draft_end(w, r);
    kv_cache_release(w->kv, &s->kv);
    serve_work_clear(&r->work);
    free(r);
    *rp = NULL;
}

/* Internal event streams must not lose messages: wait up to a second for room. */
static int s_send(actor_worker_t *w, zsock_t *s, int type, const void *m) {
    int rc;
    for (int i = 0; (rc = actor_send(s, type, m)) == -EAGAIN && i < 1000; i++)
        zclock_sleep(1);
    if (rc)
        actor_counters_add(w->counters, "send.failed", 1);
    return rc;
}

static void s_error(actor_worker_t *w, uint64_t rid, int code, const char *what) {
    msg_work_error_t e;
    msg_work_error_init(&e);
    e.rid = rid;
    e.code = code;
    msg_set_str(e.message, sizeof e.message, what);
    s_send(w, w->to_tok, MSG_WORK_ERROR, &e);
    s_send(w, w->to_router, MSG_WORK_ERROR, &e);
    actor_counters_add(w->counters,
                       code == MSG_CODE_OVERLOADED ? "rejected.overloaded" : "rejected.bad_request",
                       1);
}

/* Stream a token (index, token; -1, -1 for none) of r to the frontend as a text_event
 * (serve_emit_event: detokenized, stop strings applied); the final one goes to the
 * router too, so it forgets the request.  Returns the effective finish reason:
 * MSG_FINISH_STOP when a stop string completed. */
static int s_event(actor_worker_t *w, actor_worker_req_t *r, int index, int32_t token, int finish) {
    msg_text_event_t te;
    serve_emit_event(w->emit, &r->work, index, token, finish, base_now_us(), &te);
    s_send(w, w->to_front, MSG_TEXT_EVENT, &te);
    if (te.finish) {
        msg_work_event_t ev;
        serve_emit_work_event(&te, &ev);
        s_send(w, w->to_router, MSG_WORK_EVENT, &ev);
    }
    return te.finish;
}

/* Tell the frontend whether this worker holds rid (on arrival and when probed). */
static void s_status(actor_worker_t *w, uint64_t rid, bool held) {
    msg_work_status_t m = {rid, w->index, held};
    if (actor_send(w->to_front, MSG_WORK_STATUS, &m))
        actor_counters_add(w->counters, "status.unsent", 1);
}

static bool s_holds(actor_worker_t *w, uint64_t rid) {
    return serve_parked_find(w->parked, rid) || sched_batch_has(w->sched, rid);
}

void actor_worker_admit(actor_worker_t *w, actor_worker_req_t *r) {
    const char *why = "";
    serve_step_seq_t *s = &r->work.seq;
    int rc = serve_step_admit(w->step, s, &why);
    if (rc == -E2BIG) {
        char text[320];
        serve_work_context_error(text, sizeof text, sched_batch_context(w->sched),
                                 s->n_prompt - s->n_carried, s->max_tokens);
        s_error(w, s->rid, MSG_CODE_CONTEXT, text);
    } else if (rc) {
        s_error(w, s->rid, rc == -EAGAIN ? MSG_CODE_OVERLOADED : MSG_CODE_BAD_REQUEST, why);
    } else {
        w->dirty = true;
        return;
    }
    actor_worker_req_free(w, &r);
}

/* A new request of q (serve_work_init, or _init_embed): NULL when refused (the error
 * sent).  A duplicated frame runs once: NULL too. */
static actor_worker_req_t *s_take_in(actor_worker_t *w, const msg_work_request_t *q) {
    actor_counters_add(w->counters, q->embed ? "requests.embed" : "requests", 1);
    if (s_holds(w, q->rid)) { /* a duplicated frame: the request runs once */
        actor_counters_add(w->counters, "requests.duplicate", 1);
        s_status(w, q->rid, true);
        return NULL;
    }
    serve_work_refusal_t no = {MSG_CODE_INTERNAL, false, "out of memory"};
    actor_worker_req_t *r = calloc(1, sizeof *r);
    int rc = !r         ? -ENOMEM
             : q->embed ? serve_work_init_embed(&r->work, q, &w->intake, &no)
                        : serve_work_init(&r->work, q, &w->intake, &no);
    if (rc) {
        if (no.grammar)
            actor_counters_add(w->counters, "rejected.grammar", 1);
        s_error(w, q->rid, no.code, no.why);
        free(r);
        return NULL;
    }
    return r;
}

/* A resumed request whose carried tokens already end it (its final event was lost):
 * ended here.  True when it did. */
static bool s_resume_ended(actor_worker_t *w, actor_worker_req_t *r) {
    actor_counters_add(w->counters, "requests.resumed", 1);
    actor_counters_add(w->counters, "tokens.carried", r->work.seq.n_carried);
    int fin = serve_work_replay(&r->work);
    if (!fin)
        return false;
    s_status(w, r->work.seq.rid, true);
    s_event(w, r, -1, -1, fin);
    actor_worker_req_free(w, &r);
    return true;
}

/* A work_request: taken in, then parked while its prompt comes up from T1/T2, or
 * admitted.  An embedding request (docs/PROTOCOL.md, embed) runs through the step like
 * any prefill, every position computed, and its pooled vector goes to the frontend
 * (s_step_embedded). */
static void s_on_request(void *self, const msg_work_request_t *q) {
    actor_worker_t *w = self;
    actor_worker_req_t *r = s_take_in(w, q);
    if (!r)
        return;
    serve_step_seq_t *s = &r->work.seq;
    if (s->grammar)
        actor_counters_add(w->counters, "requests.constrained", 1);
    if (s->n_carried && s_resume_ended(w, r))
        return;
    s_status(w, s->rid, true);
    if (q->embed) {
        actor_worker_admit(w, r);
        return;
    }
    int in_t0 = kv_cache_match(w->kv, s->hist, s->n_prompt);
    sched_batch_load_t l = sched_batch_load(w->sched);
    actor_worker_trace(w, r, "arrive",
                       "%d prompt tokens%s%.0d%s; the prefix cache (T0) holds %d of them; %d "
                       "requests running, %d waiting here",
                       s->n_prompt - s->n_carried, s->n_carried ? " + " : "", s->n_carried,
                       s->n_carried ? " completion tokens carried (a resumed request)" : "", in_t0,
                       l.n_running, l.n_waiting);
    /* part of the prompt may be in T1/T2: the prefetcher is having it sent here; run it
     * when the tier manager says it is done (or at the deadline) */
    if (w->to_tier && serve_work_park_wanted(s->n_prompt, in_t0, w->block_size) &&
        actor_worker_park(w, r))
        return;
    actor_worker_admit(w, r);
}

static void s_on_work_cancel(void *self, const msg_work_cancel_t *m) {
    actor_worker_t *w = self;
    actor_worker_req_t *r = serve_parked_take(w->parked, m->rid);
    if (!r)
        r = sched_batch_remove(w->sched, m->rid);
    if (!r) {
        actor_counters_add(w->counters, "cancel.unknown", 1);
        return;
    }
    actor_counters_add(w->counters, "cancelled", 1);
    s_event(w, r, -1, -1, MSG_FINISH_CANCELLED);
    actor_worker_req_free(w, &r);
    w->dirty = true;
}

static void s_on_work_probe(void *self, const msg_work_probe_t *m) {
    actor_worker_t *w = self;
    actor_counters_add(w->counters, "probes", 1);
    s_status(w, m->rid, s_holds(w, m->rid));
}

static void s_on_expert_table(void *self, const msg_expert_table_t *m) {
    actor_worker_t *w = self;
    if (w->experts)
        actor_expert_client_table(w->experts, m);
}

/* ---- the step's results (serve_step_sink_t): events to the frontend and router */

static bool s_step_token(void *arg, serve_step_seq_t *seq, int index, int32_t token,
                         const float *lsm) {
    actor_worker_t *w = arg;
    actor_worker_req_t *r = (actor_worker_req_t *)seq;
    if (lsm)
        serve_emit_logprobs(w->emit, &r->work, lsm, token);
    return s_event(w, r, index, token, MSG_FINISH_NONE) == MSG_FINISH_STOP;
}

static void s_step_finish(void *arg, serve_step_seq_t *seq, int index, int32_t token, int why,
                          const float *lsm) {
    actor_worker_t *w = arg;
    actor_worker_req_t *r = (actor_worker_req_t *)seq;
    if (lsm)
        serve_emit_logprobs(w->emit, &r->work, lsm, token);
    s_event(w, r, index, token, why == SERVE_STEP_EOS ? MSG_FINISH_EOS : MSG_FINISH_LENGTH);
    actor_counters_add(w->counters, "completed", 1);
    actor_worker_req_free(w, &r);
}

static void s_step_embedded(void *arg, serve_step_seq_t *seq, const float *vec, int dim) {
    actor_worker_t *w = arg;
    actor_worker_req_t *r = (actor_worker_req_t *)seq;
    msg_work_embedding_t m;
    msg_work_embedding_init(&m);
    m.rid = seq->rid;
    m.worker = w->index;
    m.embedding = (float *)vec; /* borrowed by the encoder */
    m.dim = dim;
    m.prompt_tokens = seq->n_prompt;
    s_send(w, w->to_front, MSG_WORK_EMBEDDING, &m);
    msg_work_event_t ev; /* the router forgets it */
    msg_work_event_init(&ev);
    ev.rid = seq->rid;
    ev.index = -1;
    ev.token = -1;
    ev.finish = MSG_FINISH_LENGTH;
    ev.prompt_tokens = seq->n_prompt;
    s_send(w, w->to_router, MSG_WORK_EVENT, &ev);
    actor_counters_add(w->counters, "completed.embed", 1);
    actor_worker_req_free(w, &r);
}

static void s_step_ended(void *arg, serve_step_seq_t *seq) {
    actor_worker_req_t *r = (actor_worker_req_t *)seq;
    actor_worker_req_free(arg, &r);
}

static void s_step_error(void *arg, serve_step_seq_t *seq, int rc, const char *why) {
    actor_worker_t *w = arg;
    actor_worker_req_t *r = (actor_worker_req_t *)seq;
    LOG_E(w->name, "%s (%d): failing request %llu", why, rc, (unsigned long long)seq->rid);
    s_error(w, seq->rid, MSG_CODE_INTERNAL, why);
    actor_worker_req_free(w, &r);
}

static void s_step_decoded(void *arg, serve_step_seq_t *seq) {
    /* under a grammar the step cuts the drafts it refuses */
    actor_worker_want_draft(arg, (actor_worker_req_t *)seq);
}

static void s_step_note(void *arg, serve_step_seq_t *seq, const char *what, const char *why) {
    actor_worker_trace(arg, (actor_worker_req_t *)seq, what, "%s", why);
}

static void s_step_count(void *arg, const char *name, int64_t value) {
    actor_worker_t *w = arg;
    actor_counters_add(w->counters, name, value);
}

/* ---- the loop: steps, load reports, stats */

/* One forward step over everything the scheduler picked (serve_step_run). */
static int s_step(actor_worker_t *w) {
    int n = serve_step_run(w->step);
    if (n == -ENOSPC)
        LOG_E(w->name, "KV reservation failed: the scheduler's accounting is off");
    if (n > 0)
        w->dirty = true;
    return n;
}

/* After every wakeup: one batch step when there is work.  0 (poll without
 * waiting) while steps run; 1 ms while a draft is on its way; otherwise block
 * in the poll (2 ms with requests waiting for promotions, else 100 ms). */
static int s_idle(void *self) {
    actor_worker_t *w = self;
    actor_worker_check_parked(w);
    if (actor_worker_wait_drafts(w))
        return 1;
    bool busy = s_step(w) > 0;
    actor_worker_events_flush(w);
    uint64_t now = base_now_us();
    if ((w->dirty && now - w->last_report_us > 20000) || now - w->last_report_us > 100000)
        actor_worker_report(w);
    return busy ? 0 : serve_parked_count(w->parked) ? 2 : 100;
}

/* ---- set-up */

/* The worker's sockets (the draft's is opened only with speculation on). */
static const actor_sock_decl_t s_socks[] = {
    {ACTOR_SOCK_FIELD(actor_worker_t, in), ACTOR_SOCK_IN, NULL, ACTOR_HWM_STREAM, ACTOR_MAX_FRAME,
     false},
    {ACTOR_SOCK_FIELD(actor_worker_t, to_tok), ACTOR_SOCK_OUT, "tokenizer", ACTOR_HWM_STREAM, 0,
     false},
    {ACTOR_SOCK_FIELD(actor_worker_t, to_router), ACTOR_SOCK_OUT, "router", ACTOR_HWM_STREAM, 0,
     false},
    {ACTOR_SOCK_FIELD(actor_worker_t, to_front), ACTOR_SOCK_OUT, "frontend", ACTOR_HWM_CTL, 0,
     false},
    {ACTOR_SOCK_FIELD(actor_worker_t, to_tier), ACTOR_SOCK_OUT, "kvtier", ACTOR_HWM_SPILL, 0, true},
    {0},
};

static void s_cleanup(actor_worker_t *w) {
    /* free every request still held */
    actor_worker_req_t *r;
    while (w->sched && (r = sched_batch_pop(w->sched)))
        actor_worker_req_free(w, &r);
    sched_batch_destroy(&w->sched);
    while (w->parked && (r = serve_parked_pop(w->parked)))
        actor_worker_req_free(w, &r);
    serve_parked_destroy(&w->parked);
    serve_step_destroy(&w->step);
    serve_grammars_destroy(&w->grammars); /* no request holds one any more */
    serve_emit_destroy(&w->emit);
    actor_worker_events_stop(w); /* before the cache it listens to */
    kv_cache_destroy(&w->kv);
    actor_expert_client_destroy(&w->experts);
    zsock_destroy(&w->to_tier);
    zsock_destroy(&w->to_draft);
    model_ctx_destroy(&w->ctx);
    model_dev_destroy(&w->dev);
    kern_backend_destroy(&w->be); /* after kv, whose pool it held */
    model_sampler_destroy(&w->sampler);
    model_tokenizer_destroy(&w->tok);
    model_destroy(&w->model);
    actor_loop_destroy(&w->loop);
    serve_metrics_step_destroy(&w->metrics);
    actor_socks_close(s_socks, w);
}

/* Speculative decoding: on when the topology has a draft worker and spec is not 0. */
static bool s_spec(const actor_worker_t *w) {
    return actor_topology_endpoint(actor_env_topology(w->env), "draft") != NULL && s_conf(w)->spec;
}

/* The scheduler's configuration (a step takes at least one token per running request). */
static sched_batch_config_t s_sched_config(const actor_worker_cfg_t *c) {
    int step = c->step_tokens < c->max_batch ? c->max_batch : c->step_tokens;
    return (sched_batch_config_t){c->max_batch, c->queue,   c->kv_blocks,         c->block_size,
                                  step,         c->max_ctx, c->priority_aging_ms, c->preempt};
}

/* The forward pass: the threaded CPU one, or the seam's on the device's backend (its T0
 * format checked).  0, or -1 with the reason in err. */
static int s_forward(actor_worker_t *w, const sched_batch_config_t *sc, char *err, size_t errlen) {
    const actor_worker_cfg_t *c = s_conf(w);
    int room = serve_step_max_tokens(sc, s_spec(w));
    serve_device_t d;
    char name[32];
    if (serve_device_parse(c->device, &d, err, errlen))
        return -1;
    if (d.kind == SERVE_DEVICE_CPU) {
        if (!(w->ctx = model_ctx_new(w->model, room, c->max_ctx, c->threads, NULL)))
            snprintf(err, errlen, "cannot set up (out of memory)");
        return w->ctx ? 0 : -1;
    }
    if (!serve_device_kv_ok(&d, c->kv_type)) {
        snprintf(err, errlen, "device=%s keeps T0 KV as f16, not kv_type=%s",
                 serve_device_name(&d, name, sizeof name), kv_fmt_name(c->kv_type));
        return -1;
    }
    if (!(w->be = serve_device_backend(&d, err, errlen)))
        return -1;
    /* a sequence's positions: max_ctx, and the drafts of its last decode step */
    int max_blocks = (c->max_ctx + MODEL_SPEC_MAX_K + c->block_size - 1) / c->block_size;
    char why[256];
    w->dev = model_dev_new(w->model, w->be, room, c->max_batch, max_blocks, why, sizeof why);
    if (!w->dev)
        snprintf(err, errlen, "device=%s: %s", serve_device_name(&d, name, sizeof name), why);
    return w->dev ? 0 : -1;
}

/* The model, its KV pool, the scheduler and the request side.  0, or -1 with the reason
 * in err. */
static int s_load(actor_worker_t *w, char *err, size_t errlen) {
    const actor_worker_cfg_t *c = s_conf(w);
    if (!c->model) {
        snprintf(err, errlen, "no model= option in the topology");
        return -1;
    }
    if (!(w->model = model_load(c->model, err, errlen)))
        return -1;
    const model_config_t *cfg = model_config(w->model);
    char terr[256];
    w->tok = model_tokenizer_new(model_file(w->model), terr, sizeof terr);
    /* with speculation a decode item carries up to MODEL_SPEC_MAX_K drafts */
    sched_batch_config_t sc = s_sched_config(c);
    if (s_forward(w, &sc, err, errlen))
        return -1;
    kv_cache_config_t kc = {c->kv_type,   c->block_size,   c->kv_blocks,
                            c->kv_policy, c->prefix_cache, w->be};
    kern_kv_shape_t shape = model_kv_shape(cfg, c->block_size);
    if ((w->kv = kv_cache_new(&shape, &kc)))
        kv_cache_on_evict(w->kv, actor_worker_on_evict, w);
    w->sched = sched_batch_new(&sc);
    w->sampler = model_sampler_new(cfg->n_vocab);
    w->metrics = serve_metrics_step_new(); /* NULL (out of memory): no histograms */
    int n_grammars = c->max_batch > S_GRAMMARS_MIN ? c->max_batch : S_GRAMMARS_MIN;
    w->grammars = w->tok ? serve_grammars_new(w->tok, cfg->n_vocab, n_grammars) : NULL;
    w->emit = w->tok ? serve_emit_new(w->tok, cfg->n_vocab, w->index, w->name) : NULL;
    w->parked = serve_parked_new();
    if (!w->tok || !w->kv || !w->sched || !w->sampler || !w->grammars || !w->emit || !w->parked) {
        snprintf(err, errlen, "cannot set up (%s)",
                 !w->tok  ? terr
                 : !w->kv ? "KV pool too large"
                          : "out of memory");
        return -1;
    }
    w->intake = (serve_work_config_t){.tok = w->tok,
                                      .n_vocab = cfg->n_vocab,
                                      .context = sched_batch_context(w->sched),
                                      .max_ctx = c->max_ctx,
                                      .d_model = cfg->d_model,
                                      .spec_k = c->spec_k,
                                      .spec_k_max = c->spec_k_max,
                                      .grammars = w->grammars};
    return serve_work_kv_compress(&w->intake, c->kv_compress, cfg, w->dev != NULL, err, errlen);
}

/* The sockets: the declared ones, the draft worker's with speculation.  0, or -1 with
 * the reason in err. */
static int s_open(actor_worker_t *w, char *err, size_t errlen) {
    if (actor_socks_open(w->env, s_socks, w, err, errlen))
        return -1;
    const actor_topology_t *t = actor_env_topology(w->env);
    if (s_spec(w) && !(w->to_draft = actor_sock_outbound(t, w->name, "draft", ACTOR_HWM_BULK))) {
        snprintf(err, errlen, "cannot connect to draft");
        return -1;
    }
    if (w->to_tier) { /* with a KV tier manager */
        w->self_promote = actor_topology_endpoint(t, "prefetcher") == NULL;
        w->write_through = s_conf(w)->write_through;
    }
    return 0;
}

/* MoE over expert actors: every MoE layer's experts run there.  0, or -1 with the reason
 * in err. */
static int s_experts(actor_worker_t *w, char *err, size_t errlen) {
    const actor_topology_t *t = actor_env_topology(w->env);
    int n_expert = model_config(w->model)->n_expert;
    if (actor_placement_experts(t) > 0 && n_expert > 0) {
        const actor_worker_cfg_t *c = s_conf(w);
        w->experts = actor_expert_client_new(t, w->name, w->index, w->model, w->loop, w->in,
                                             (msg_dtype_t)c->expert_dtype, c->expert_timeout_ms,
                                             err, errlen);
        if (!w->experts)
            return -1;
        model_ctx_set_moe_exec(w->ctx, actor_expert_client_exec, w->experts);
        LOG_I(w->name, "MoE: %d experts per layer on %d expert actors (%s rows)", n_expert,
              actor_placement_experts(t), c->expert_dtype == MSG_DTYPE_F16 ? "f16" : "f32");
    } else if (actor_placement_experts(t) > 0) {
        LOG_W(w->name, "the topology has expert actors but the model is dense: they stay idle");
    }
    return 0;
}

/* The step, its results going to this actor's handlers.  0 or -ENOMEM. */
static int s_start_step(actor_worker_t *w) {
    serve_step_config_t stc = {w->model, w->tok,     w->ctx,     w->dev,    w->kv,
                               w->sched, w->sampler, w->metrics, s_spec(w), w->write_through};
    serve_step_sink_t sink = {w,
                              s_step_token,
                              s_step_finish,
                              s_step_ended,
                              s_step_error,
                              s_step_decoded,
                              s_step_note,
                              s_step_count,
                              actor_worker_on_written,
                              s_step_embedded};
    return (w->step = serve_step_new(&stc, &sink)) ? 0 : -ENOMEM;
}

/* Where the forward pass runs, for the ready line: "2 threads" or "device cuda:0". */
static const char *s_where(const actor_worker_t *w, char *buf, size_t len) {
    if (w->dev)
        snprintf(buf, len, "device %s (%s backend)", s_conf(w)->device, w->be->name);
    else
        snprintf(buf, len, "%d threads", s_conf(w)->threads);
    return buf;
}

int actor_worker_main(actor_env_t *env) {
    actor_worker_t w = {0};
    w.env = env;
    const actor_worker_cfg_t *c = s_conf(&w);
    w.block_size = c->block_size; /* what actor_worker_spec.c and _tiers.c read */
    w.prefetch_wait_ms = c->prefetch_wait_ms;
    w.spec_wait_us = c->spec_wait_us;
    w.name = actor_env_name(env);
    w.index = atoi(w.name + 6);
    char err[512], what[512];
    if (s_load(&w, err, sizeof err))
        goto fail;
    if (!(w.loop = actor_loop_new(env, &w))) {
        snprintf(err, sizeof err, "cannot set up (out of memory)");
        goto fail;
    }
    w.counters = actor_loop_counters(w.loop);
    if (s_open(&w, err, sizeof err))
        goto fail;
    if (s_experts(&w, what, sizeof what)) {
        snprintf(err, sizeof err, "expert actors: %.480s", what);
        goto fail;
    }
    if (s_start_step(&w)) {
        snprintf(err, sizeof err, "cannot set up (out of memory)");
        goto fail;
    }
    if (actor_worker_events_start(&w, c->kv_events, c->kv_events_replay, c->kv_events_keep, err,
                                  sizeof err))
        goto fail;
    actor_counters_set(w.counters, "kv.total_blocks", c->kv_blocks);
    LOG_I(w.name,
          "ready: %s, batch %d, %d KV blocks of %d (%s, %s%s), queue %d, step %d "
          "tokens",
          s_where(&w, what, sizeof what), c->max_batch, c->kv_blocks, c->block_size,
          kv_fmt_name(c->kv_type), kv_policy_name(c->kv_policy),
          c->prefix_cache ? ", prefix cache" : "", c->queue, s_sched_config(c).step_tokens);
    actor_env_ready(env);
    actor_worker_report(&w);

    actor_loop_inbox(w.loop, w.in, w.to_front, true, "");
    actor_loop_handle_kv_block_raw(w.loop, actor_worker_on_block);
    actor_loop_handle_draft_reply(w.loop, actor_worker_on_draft);
    actor_loop_handle_kv_promote_done(w.loop, actor_worker_on_promote_done);
    actor_loop_handle_work_request(w.loop, s_on_request);
    actor_loop_handle_work_cancel(w.loop, s_on_work_cancel);
    actor_loop_handle_work_probe(w.loop, s_on_work_probe);
    actor_loop_handle_expert_table(w.loop, s_on_expert_table);
    actor_loop_idle(w.loop, s_idle);
    actor_loop_on_stats(w.loop, actor_worker_on_stats);
    actor_loop_run(w.loop, 100);
    LOG_I(w.name, "stopping");
    s_cleanup(&w);
    return 0;
fail:
    actor_env_fail(env, "%s: %s", w.name, err);
    s_cleanup(&w);
    return 1;
}

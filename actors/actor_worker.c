/* actor_worker.c - the target worker actor: a thin loop around sched_batch
 * (what runs), kv_cache (where its KV lives: T0, with prefix sharing) and
 * model_ctx_forward (one batched step), emitting a text_event per generated
 * token.  With a KV tier manager in the topology it demotes evicted blocks to
 * it and takes in the blocks the prefetcher has it promote. */
#include "actor_worker.h"

#include "actor_expert_client.h"
#include "actor_placement.h"

#include "base_log.h"
#include "kv_cache.h"
#include "model.h"
#include "model_sampler.h"
#include "model_spec.h"
#include "model_tokenizer.h"
#include "sched_batch.h"
#include "serve_metrics.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One request the worker holds (waiting or running). */
typedef struct s_req_t {
    uint64_t rid;                /* server-side request id */
    int32_t *hist;               /* (n_prompt + max_tokens) prompt then generated tokens */
    int n_prompt;                /* positions prefilled: the prompt, then the n_carried
                                    completion tokens a resumed request arrived with */
    int n_carried;               /* completion tokens delivered before it came here */
    int n_hist;                  /* tokens in hist */
    int max_tokens;              /* generation limit */
    model_sampler_params_t sp;   /* sampling */
    kv_seq_t kv;                 /* its blocks */
    int n_cached;                /* prompt positions attached from the prefix cache */
    int n_computed;              /* positions whose KV is computed (cached ones included) */
    int pin_tokens;              /* leading tokens that are the system prompt */
    bool parked;                 /* waiting for promotions (not yet in the scheduler) */
    bool fresh;                  /* not run yet: its cached prefix is attached when it first runs */
    int skip;                    /* positions of this step's item that came from the cache */
    uint64_t park_deadline;      /* stop waiting then (us) */
    struct s_req_t *next_parked; /* parked list */
    /* speculative decoding */
    model_spec_adapt_t adapt;        /* depth from observed acceptance */
    uint64_t draft_seq;              /* last draft_request sent (0: none yet) */
    bool draft_pending;              /* its reply has not arrived */
    uint64_t draft_sent_us;          /* when it was sent */
    int draft_k;                     /* proposals it asked for */
    int32_t draft[MODEL_SPEC_MAX_K]; /* proposals continuing hist[0..draft_base) */
    int n_draft;
    int draft_base;
    int proposed, accepted;  /* totals for the final event */
    uint64_t t_arrival;      /* frontend arrival (us) */
    uint64_t t_prefill;      /* first prefill chunk started */
    uint64_t t_first;        /* first token sampled */
    uint64_t t_last;         /* last token sampled */
    model_detok_t detok;     /* UTF-8-safe incremental decoding of its tokens */
    model_stopper_t stopper; /* its stop strings (n_stops may be 0) */
    /* explainability (docs/PROTOCOL.md, trace and logprobs) */
    bool logprobs;           /* each token's log-probability */
    int top_logprobs;        /* alternatives per token */
    bool trace;              /* record the decisions */
    msg_trace_step_t *steps; /* (cap_steps) the chain: the tokenizer's and router's, then ours */
    int n_steps, cap_steps;
    int64_t trace_end_us; /* where the chain ends, after the arrival */
    int n_more;           /* steps summed up in the last one once the trace is full */
    int promoted;         /* blocks promoted for it while it waited */
    char spec_why[96];    /* how the depth of its last draft request was chosen */
} s_req_t;

typedef struct {
    actor_env_t *env;          /* runtime */
    const char *name;          /* "worker0" */
    int index;                 /* worker number */
    zsock_t *in;               /* inbound PULL */
    zsock_t *to_tok;           /* PUSH to the tokenizer */
    zsock_t *to_router;        /* PUSH to the router */
    zsock_t *to_front;         /* PUSH to the frontend (pong, stats) */
    model_t *model;            /* weights */
    model_tokenizer_t *tok;    /* for end-of-generation tokens */
    model_ctx_t *ctx;          /* forward scratch and threads */
    kv_cache_t *kv;            /* T0: KV pool, prefix index, allocator */
    zsock_t *to_tier;          /* PUSH to the KV tier manager, or NULL */
    s_req_t *parked;           /* requests waiting for promotions */
    int prefetch_wait_ms;      /* longest wait for promotions */
    bool self_promote;         /* a tier manager but no prefetcher: ask for promotions */
    bool write_through;        /* a tier manager, and full blocks go there at once */
    zsock_t *to_draft;         /* PUSH to the draft worker, or NULL: no speculation */
    int spec_k;                /* fixed depth, or 0: adaptive */
    int spec_k_max;            /* adaptive: the largest depth */
    int spec_wait_us;          /* longest wait for a draft before a step runs without it */
    int n_pending_drafts;      /* draft replies outstanding */
    double step_us;            /* EMA of a forward step's wall time */
    double draft_us_per_token; /* EMA of a draft reply's latency per proposed token */
    int block_size;
    sched_batch_t *sched;       /* continuous batching policy */
    model_sampler_t *sampler;   /* scratch shared by all requests (one thread) */
    actor_loop_t *loop;         /* polling, control messages, counters */
    actor_counters_t *counters; /* the loop's */
    int n_vocab;
    char *piece; /* (S_SCRATCH) one token's text */
    char *text;  /* (S_SCRATCH) text of one event */
    int max_batch, step_tokens;
    /* step buffers */
    sched_batch_item_t *items;      /* (max_batch) */
    int32_t *b_tok, *b_pos, *b_seq; /* (step_tokens) */
    bool *b_want;                   /* (step_tokens) */
    model_seq_view_t *b_seqs;       /* (max_batch) */
    float *logits;                  /* (max_batch, n_vocab) */
    uint64_t last_report_us;        /* last load_report */
    bool dirty;                     /* state changed since the last report */
    /* the log-probabilities of the token s_event sends next (set by s_logprobs) */
    float lp;                               /* of the token */
    msg_top_t lp_top[MSG_MAX_TOP_LOGPROBS]; /* the most likely tokens */
    int lp_n_top;
    char lp_piece[MSG_MAX_PIECE_BYTES + 1]; /* the token's own text */
    bool lp_valid;
    float *lp_rows;                 /* ((1 + MODEL_SPEC_MAX_K), n_vocab) log-softmax rows */
    serve_metrics_step_t *metrics;  /* per-step histograms (docs/METRICS.md) */
    actor_expert_client_t *experts; /* MoE layers over expert actors, or NULL: in process */
} s_worker_t;

#define TAG "worker"

/* Completion tokens of r so far (carried ones included): the next one's index. */
static int s_done(const s_req_t *r) {
    return r->n_hist - r->n_prompt + r->n_carried;
}

/* Append a decision to r's trace: it ends now and began where the chain ended, so
 * the steps' durations add up to the request's latency.  Past MSG_MAX_TRACE_STEPS - 8
 * steps, the last one grows instead (its why says how many it stands for). */
static void s_trace(s_worker_t *w, s_req_t *r, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void s_trace(s_worker_t *w, s_req_t *r, const char *what, const char *fmt, ...) {
    if (!r->trace)
        return;
    uint64_t now = base_now_us();
    int64_t end = now > r->t_arrival ? (int64_t)(now - r->t_arrival) : r->trace_end_us;
    if (end < r->trace_end_us)
        end = r->trace_end_us;
    if (r->n_steps >= MSG_MAX_TRACE_STEPS - 8) {
        /* full: the last step becomes a summary of it and every step after it */
        msg_trace_step_t *last = &r->steps[r->n_steps - 1];
        r->n_more = r->n_more ? r->n_more + 1 : 2;
        msg_trace_step_fill(last, w->name, "more", last->t_us, end,
                            "%d further steps (the trace holds %d)", r->n_more,
                            MSG_MAX_TRACE_STEPS - 8);
        r->trace_end_us = end;
        return;
    }
    if (r->n_steps == r->cap_steps) {
        int cap = r->cap_steps ? 2 * r->cap_steps : 16;
        msg_trace_step_t *x = realloc(r->steps, (size_t)cap * sizeof *x);
        if (!x)
            return;
        r->steps = x;
        r->cap_steps = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    msg_trace_step_vfill(&r->steps[r->n_steps++], w->name, what, r->trace_end_us, end, fmt, ap);
    va_end(ap);
    r->trace_end_us = end;
}

/* The text of token t alone, for an alternative (bytes that are not UTF-8 on their
 * own, e.g. half a character, become U+FFFD). */
static void s_piece(s_worker_t *w, int32_t t, char *out, size_t cap) {
    size_t n = 0, o = 0;
    const char *raw = model_tokenizer_piece(w->tok, t, true, &n);
    for (size_t i = 0; raw && i < n && o + 4 < cap;) {
        size_t len = 0; /* the valid UTF-8 character starting at i, 1..4 bytes */
        for (size_t k = 1; k <= 4 && i + k <= n && !len; k++)
            if (msg_utf8_valid(raw + i, k, NULL))
                len = k;
        if (len) {
            memcpy(out + o, raw + i, len);
            o += len;
            i += len;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3); /* U+FFFD */
            o += 3;
            i++;
        }
    }
    out[o] = 0;
}

/* Log-softmax of a row of raw logits (the model's own distribution, before any
 * sampling transform) into out (n_vocab). */
static void s_log_softmax(const float *logits, float *out, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)(logits[i] - mx));
    float lse = mx + (float)log(sum);
    for (int i = 0; i < n; i++)
        out[i] = logits[i] - lse;
}

/* Set what s_event sends with the next token: token t's log-probability in the row
 * lsm (log-softmax) and r's top_logprobs most likely alternatives. */
static void s_logprobs(s_worker_t *w, const s_req_t *r, const float *lsm, int32_t t) {
    w->lp_valid = r->logprobs;
    if (!r->logprobs)
        return;
    w->lp = lsm[t] > -1e30f ? lsm[t] : -1e30f;
    s_piece(w, t, w->lp_piece, sizeof w->lp_piece);
    /* one pass keeping the k best in order (k <= 20: an insertion into a short list) */
    int k = r->top_logprobs, n = 0;
    for (int i = 0; i < w->n_vocab && k > 0; i++) {
        float v = lsm[i];
        if (v <= -1e30f || (n == k && v <= w->lp_top[n - 1].logprob))
            continue;
        int j = n < k ? n++ : n - 1; /* ties keep the lower id first */
        for (; j > 0 && w->lp_top[j - 1].logprob < v; j--)
            w->lp_top[j] = w->lp_top[j - 1];
        w->lp_top[j].token = i;
        w->lp_top[j].logprob = v;
    }
    for (int j = 0; j < n; j++)
        s_piece(w, w->lp_top[j].token, w->lp_top[j].text, sizeof w->lp_top[j].text);
    w->lp_n_top = n;
}

_Static_assert(MSG_DTYPE_F32 == 0 && MSG_DTYPE_F16 == 1,
               "expert_dtype=f32|f16 loads as its index, a msg_dtype_t");

const actor_opt_t actor_worker_opts[] = {
    {"model", ACTOR_OPT_PATH, NULL, 0, 0, NULL, "GGUF path",
     .field = ACTOR_OPT_FIELD(actor_worker_cfg_t, model)},
    {"threads", ACTOR_OPT_INT, "1", 1, 256, NULL, "threads of the forward pass",
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
    {NULL},
};

/* Publish r's computed positions [0, upto) in the prefix index: the system
 * prompt's blocks with a high pin, the rest with none.  last_partial: also the
 * partial block at the end (when r is done writing). */
static void s_publish(s_worker_t *w, s_req_t *r, int upto, bool last_partial) {
    if (upto > r->n_hist)
        upto = r->n_hist;
    int pin_end = r->pin_tokens / w->block_size * w->block_size;
    if (pin_end > upto)
        pin_end = upto / w->block_size * w->block_size;
    if (pin_end > 0)
        kv_cache_publish(w->kv, &r->kv, r->hist, pin_end, false, 200);
    kv_cache_publish(w->kv, &r->kv, r->hist, upto, last_partial, 0);
}

static void s_req_free(s_worker_t *w, s_req_t **rp) {
    s_req_t *r = *rp;
    if (!r)
        return;
    if (r->kv.n)
        s_publish(w, r, r->n_computed, true); /* what it computed serves later requests */
    if (r->draft_pending)
        w->n_pending_drafts--;
    if (w->to_draft && r->draft_seq) {
        msg_draft_end_t e = {r->rid, w->index};
        actor_send(w->to_draft, MSG_DRAFT_END, &e); /* a lost one ages out of the drafter */
    }
    kv_cache_release(w->kv, &r->kv);
    model_stopper_free(&r->stopper);
    free(r->steps);
    free(r->hist);
    free(r);
    *rp = NULL;
}

/* Internal event streams must not lose messages: wait up to a second for room. */
static int s_send(s_worker_t *w, zsock_t *s, int type, const void *m) {
    int rc;
    for (int i = 0; (rc = actor_send(s, type, m)) == -EAGAIN && i < 1000; i++)
        zclock_sleep(1);
    if (rc)
        actor_counters_add(w->counters, "send.failed", 1);
    return rc;
}

static void s_error(s_worker_t *w, uint64_t rid, int code, const char *what) {
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

#define S_SCRATCH 8192 /* a token's bytes plus held-back stop-string prefixes fit easily */

/* Stream a token (index, token; -1, -1 for none) of r to the frontend as a
 * text_event: detokenized here, UTF-8 safe, with stop strings applied, so a
 * token costs one hop (worker -> frontend) instead of two through the
 * tokenizer actor.  finish: why the request ends, or MSG_FINISH_NONE.  At the
 * end, whatever the detokenizer and the stopper still hold is flushed, and the
 * router hears the final work_event so it forgets the request.  Returns the
 * effective finish reason: MSG_FINISH_STOP when a stop string completed. */
static int s_event(s_worker_t *w, s_req_t *r, int index, int32_t token, int finish) {
    msg_text_event_t te;
    msg_text_event_init(&te);
    te.rid = r->rid;
    te.worker = w->index;
    te.index = index;
    te.token = token;
    te.count = s_done(r);
    te.finish = finish;
    te.prompt_tokens = r->n_prompt - r->n_carried;
    size_t n = 0;
    if (index >= 0 && token >= 0) {
        int pl = model_detok_push(&r->detok, token, w->piece, S_SCRATCH);
        n = model_stopper_push(&r->stopper, w->piece, (size_t)(pl > 0 ? pl : 0), w->text,
                               S_SCRATCH);
        if (r->stopper.stopped)
            te.finish = MSG_FINISH_STOP;
    }
    if (te.finish && te.finish != MSG_FINISH_STOP) {
        int pl = model_detok_flush(&r->detok, w->piece, S_SCRATCH);
        n += model_stopper_push(&r->stopper, w->piece, (size_t)(pl > 0 ? pl : 0), w->text + n,
                                S_SCRATCH - n);
        if (r->stopper.stopped)
            te.finish = MSG_FINISH_STOP;
        else
            n += model_stopper_flush(&r->stopper, w->text + n, S_SCRATCH - n);
    }
    w->text[n] = 0;
    te.text = w->text;
    te.text_len = n;
    if (w->lp_valid && index >= 0) {
        te.logprob = w->lp;
        te.has_logprob = true;
        te.top = w->lp_n_top ? w->lp_top : NULL;
        te.n_top = w->lp_n_top;
        memcpy(te.piece, w->lp_piece, sizeof te.piece);
    }
    w->lp_valid = false;
    if (te.finish && r->trace) {
        static const char *const why[] = {"", "the model ended the text (end of generation)",
                                          "max_tokens reached", "a stop string matched",
                                          "cancelled"};
        s_trace(w, r, "finish", "%s after %d tokens",
                te.finish > 0 && te.finish <= MSG_FINISH_CANCELLED ? why[te.finish] : "?",
                s_done(r));
        te.steps = r->steps;
        te.n_steps = r->n_steps;
    }
    if (te.finish) {
        uint64_t now = base_now_us();
        uint64_t tp = r->t_prefill ? r->t_prefill : now, tf = r->t_first ? r->t_first : now;
        te.timings.queued_us = tp > r->t_arrival ? tp - r->t_arrival : 0;
        te.timings.prefill_us = tf - tp;
        te.timings.ttft_us = tf > r->t_arrival ? tf - r->t_arrival : 0;
        te.timings.decode_us = r->t_last > tf ? r->t_last - tf : 0;
        te.cached_tokens = r->n_cached < te.prompt_tokens ? r->n_cached : te.prompt_tokens;
        te.draft_proposed = r->proposed;
        te.draft_accepted = r->accepted;
    }
    s_send(w, w->to_front, MSG_TEXT_EVENT, &te);
    if (te.finish) {
        msg_work_event_t ev;
        msg_work_event_init(&ev);
        ev.rid = r->rid;
        ev.index = index;
        ev.token = token;
        ev.finish = te.finish;
        ev.prompt_tokens = te.prompt_tokens;
        ev.timings = te.timings;
        s_send(w, w->to_router, MSG_WORK_EVENT, &ev);
    }
    return te.finish;
}

static void s_admit(s_worker_t *w, s_req_t *r);

/* Take r out of the parked list; true if it was there. */
static bool s_unpark(s_worker_t *w, s_req_t *r) {
    for (s_req_t **p = &w->parked; *p; p = &(*p)->next_parked)
        if (*p == r) {
            *p = r->next_parked;
            r->parked = false;
            r->next_parked = NULL;
            return true;
        }
    return false;
}

static s_req_t *s_find_parked(s_worker_t *w, uint64_t rid) {
    for (s_req_t *r = w->parked; r; r = r->next_parked)
        if (r->rid == rid)
            return r;
    return NULL;
}

/* Tell the frontend whether this worker holds rid (on arrival and when probed). */
static void s_status(s_worker_t *w, uint64_t rid, bool held) {
    msg_work_status_t m = {rid, w->index, held};
    if (actor_send(w->to_front, MSG_WORK_STATUS, &m))
        actor_counters_add(w->counters, "status.unsent", 1);
}

static bool s_holds(s_worker_t *w, uint64_t rid) {
    return s_find_parked(w, rid) || sched_batch_has(w->sched, rid);
}

/* A resumed request: run its carried completion tokens through the detokenizer and
 * the stopper as if they had been generated here, so that the text of the next
 * token continues exactly where the client's text ends.  The finish reason when the
 * carried tokens already end the request (its final event was lost), else 0. */
static int s_replay_carried(s_worker_t *w, s_req_t *r) {
    for (int i = r->n_prompt - r->n_carried; i < r->n_prompt; i++) {
        int pl = model_detok_push(&r->detok, r->hist[i], w->piece, S_SCRATCH);
        model_stopper_push(&r->stopper, w->piece, (size_t)(pl > 0 ? pl : 0), w->text, S_SCRATCH);
    }
    if (r->stopper.stopped)
        return MSG_FINISH_STOP;
    if (r->n_carried >= r->max_tokens)
        return MSG_FINISH_LENGTH;
    return 0;
}

static void s_on_request(void *self, const msg_work_request_t *q) {
    s_worker_t *w = self;
    actor_counters_add(w->counters, "requests", 1);
    if (s_holds(w, q->rid)) { /* a duplicated frame: the request runs once */
        actor_counters_add(w->counters, "requests.duplicate", 1);
        s_status(w, q->rid, true);
        return;
    }
    for (int i = 0; i < q->n_tokens; i++)
        if (q->tokens[i] >= w->n_vocab) {
            s_error(w, q->rid, MSG_CODE_BAD_REQUEST, "token id out of the vocabulary");
            return;
        }
    char why[128];
    const model_sampler_params_t sp = {
        q->sampling.temperature,    q->sampling.top_k,         q->sampling.top_p, q->sampling.min_p,
        q->sampling.repeat_penalty, q->sampling.repeat_last_n, q->sampling.seed};
    if (model_sampler_check(&sp, why, sizeof why)) {
        s_error(w, q->rid, MSG_CODE_BAD_REQUEST, why);
        return;
    }
    s_req_t *r = calloc(1, sizeof *r);
    if (r)
        r->hist = malloc(((size_t)q->n_tokens + q->max_tokens) * sizeof *r->hist);
    if (!r || !r->hist) {
        free(r);
        s_error(w, q->rid, MSG_CODE_INTERNAL, "out of memory");
        return;
    }
    r->rid = q->rid;
    memcpy(r->hist, q->tokens, (size_t)q->n_tokens * sizeof *r->hist);
    r->n_prompt = r->n_hist = q->n_tokens;
    r->n_carried = q->n_gen;
    r->max_tokens = q->max_tokens;
    r->sp = sp;
    r->t_arrival = q->t_arrival_us;
    model_detok_init(&r->detok, w->tok);
    const char *stops[MSG_MAX_STOP];
    for (int i = 0; i < q->n_stop && i < MSG_MAX_STOP; i++)
        stops[i] = q->stop[i];
    if (model_stopper_init(&r->stopper, stops,
                           q->n_stop < MSG_MAX_STOP ? q->n_stop : MSG_MAX_STOP)) {
        s_error(w, q->rid, MSG_CODE_BAD_REQUEST, "invalid stop strings");
        s_req_free(w, &r);
        return;
    }
    r->pin_tokens = q->pin_tokens < r->n_prompt ? q->pin_tokens : r->n_prompt;
    r->logprobs = q->logprobs || q->top_logprobs > 0;
    r->top_logprobs = q->top_logprobs;
    r->trace = q->trace;
    if (r->trace && q->n_steps) { /* the chain so far: tokenizer, router */
        r->steps = malloc((size_t)q->n_steps * sizeof *r->steps);
        if (r->steps) {
            memcpy(r->steps, q->steps, (size_t)q->n_steps * sizeof *r->steps);
            r->n_steps = r->cap_steps = q->n_steps;
            r->trace_end_us = q->steps[q->n_steps - 1].t_us + q->steps[q->n_steps - 1].dur_us;
        }
    }
    model_spec_adapt_init(&r->adapt, w->spec_k, w->spec_k_max);
    if (r->n_carried) {
        actor_counters_add(w->counters, "requests.resumed", 1);
        actor_counters_add(w->counters, "tokens.carried", r->n_carried);
        int fin = s_replay_carried(w, r);
        if (fin) { /* nothing left to generate: end it here */
            s_status(w, r->rid, true);
            s_event(w, r, -1, -1, fin);
            s_req_free(w, &r);
            return;
        }
    }
    s_status(w, r->rid, true);
    int in_t0 = kv_cache_match(w->kv, r->hist, r->n_prompt);
    s_trace(w, r, "arrive",
            "%d prompt tokens%s%.0d%s; the prefix cache (T0) holds %d of them; %d requests "
            "running, %d waiting here",
            r->n_prompt - r->n_carried, r->n_carried ? " + " : "", r->n_carried,
            r->n_carried ? " completion tokens carried (a resumed request)" : "", in_t0,
            sched_batch_load(w->sched).n_running, sched_batch_load(w->sched).n_waiting);
    if (w->to_tier && in_t0 / w->block_size < (r->n_prompt - 1) / w->block_size) {
        /* part of the prompt may be in T1/T2: the prefetcher is having it sent
         * here; run it when the tier manager says it is done (or at the deadline) */
        /* make what T0 has now the most recently used, so that the promoted
         * blocks evict other blocks before this prompt's head (nothing is held:
         * only running requests hold blocks, which the scheduler accounts for) */
        kv_cache_attach_prefix(w->kv, &r->kv, r->hist, r->n_prompt);
        kv_cache_release(w->kv, &r->kv);
        r->parked = true;
        r->park_deadline = base_now_us() + (uint64_t)w->prefetch_wait_ms * 1000;
        r->next_parked = w->parked;
        w->parked = r;
        actor_counters_add(w->counters, "kv.prefetch.waits", 1);
        if (w->self_promote) { /* no prefetcher in this deployment: ask directly */
            msg_kv_promote_t p;
            msg_kv_promote_init(&p);
            p.rid = r->rid;
            p.worker = w->index;
            p.tokens = r->hist;
            p.n_tokens = r->n_prompt;
            if (actor_send(w->to_tier, MSG_KV_PROMOTE, &p))
                actor_counters_add(w->counters, "kv.promote.dropped", 1);
        }
        return;
    }
    s_admit(w, r);
}

/* Hand r to the scheduler.  Its cached prefix is attached when it first runs
 * (s_attach): a request waiting in the queue holds no blocks, so the
 * scheduler's reservations (running requests only) stay a true bound. */
static void s_admit(s_worker_t *w, s_req_t *r) {
    r->fresh = true;
    int rc = sched_batch_submit(w->sched, r->rid, r->n_prompt, r->max_tokens - r->n_carried, r);
    if (rc) {
        s_error(w, r->rid, rc == -EAGAIN ? MSG_CODE_OVERLOADED : MSG_CODE_BAD_REQUEST,
                rc == -EAGAIN   ? "the worker's queue is full"
                : rc == -E2BIG  ? "prompt + max_tokens do not fit in the context or KV pool"
                : rc == -EEXIST ? "duplicate request id"
                                : "invalid request");
        s_req_free(w, &r);
        return;
    }
    w->dirty = true;
}

static void s_on_cancel(s_worker_t *w, uint64_t rid) {
    s_req_t *r = s_find_parked(w, rid);
    if (r)
        s_unpark(w, r);
    else
        r = sched_batch_remove(w->sched, rid);
    if (!r) {
        actor_counters_add(w->counters, "cancel.unknown", 1);
        return;
    }
    actor_counters_add(w->counters, "cancelled", 1);
    s_event(w, r, -1, -1, MSG_FINISH_CANCELLED);
    s_req_free(w, &r);
    w->dirty = true;
}

/* Finish r (already out of the scheduler). */
static void s_finish(s_worker_t *w, s_req_t *r, int index, int32_t token, int finish) {
    sched_batch_remove(w->sched, r->rid);
    s_event(w, r, index, token, finish);
    actor_counters_add(w->counters, "completed", 1);
    s_req_free(w, &r);
}

/* Ask the draft worker for proposals continuing r's history (when
 * speculation is on and the adaptive depth says it pays). */
static void s_want_draft(s_worker_t *w, s_req_t *r) {
    r->n_draft = 0;
    if (!w->to_draft || r->draft_pending)
        return;
    int left = r->max_tokens - s_done(r); /* tokens it may still emit */
    /* drafting is serial with the target's step: its measured latency per
     * token, in target steps, is part of what a deeper k costs */
    if (w->step_us > 0)
        r->adapt.draft_cost = (float)(w->draft_us_per_token / w->step_us);
    int k = model_spec_adapt_next_k(&r->adapt, sched_batch_count(w->sched));
    if (r->trace)
        snprintf(r->spec_why, sizeof r->spec_why,
                 "k %d %s (acceptance %.2f, draft cost %.2f steps/token, %d running)", k,
                 r->adapt.k_fixed ? "fixed" : "adaptive", r->adapt.rate, r->adapt.draft_cost,
                 sched_batch_count(w->sched));
    if (k > left - 1)
        k = left - 1; /* every verified position stays inside the request's reservation */
    if (k < 1)
        return;
    msg_draft_request_t q;
    msg_draft_request_init(&q);
    q.rid = r->rid;
    q.worker = w->index;
    q.seq = ++r->draft_seq;
    q.tokens = r->hist;
    q.n_tokens = r->n_hist;
    q.k = k;
    if (actor_send(w->to_draft, MSG_DRAFT_REQUEST, &q)) {
        actor_counters_add(w->counters, "spec.request_dropped", 1);
        return;
    }
    r->draft_pending = true;
    r->draft_k = k;
    r->draft_sent_us = base_now_us();
    w->n_pending_drafts++;
}

static void s_on_draft(void *self, const msg_draft_reply_t *m) {
    s_worker_t *w = self;
    s_req_t *r = sched_batch_find(w->sched, m->rid);
    if (!r || !r->draft_pending || m->seq != r->draft_seq) {
        actor_counters_add(w->counters, "spec.reply_stale", 1);
        return;
    }
    r->draft_pending = false;
    w->n_pending_drafts--;
    double per = (double)(base_now_us() - r->draft_sent_us) / (r->draft_k > 0 ? r->draft_k : 1);
    w->draft_us_per_token =
        w->draft_us_per_token > 0 ? 0.8 * w->draft_us_per_token + 0.2 * per : per;
    if (m->base != r->n_hist || m->n_tokens > MODEL_SPEC_MAX_K) {
        actor_counters_add(w->counters, "spec.reply_stale", 1);
        return;
    }
    for (int i = 0; i < m->n_tokens; i++)
        if (m->tokens[i] >= w->n_vocab)
            return;
    memcpy(r->draft, m->tokens, (size_t)m->n_tokens * sizeof *r->draft);
    r->n_draft = m->n_tokens;
    r->draft_base = m->base;
    if (!m->n_tokens)
        actor_counters_add(w->counters, "spec.reply_empty", 1);
}

/* True while a step should wait for draft replies still on their way. */
static bool s_wait_drafts(s_worker_t *w) {
    if (!w->n_pending_drafts)
        return false;
    /* the oldest outstanding request decides: wait at most spec_wait_us for it */
    uint64_t now = base_now_us(), oldest = now;
    int n = 0, kmax = 1;
    for (int i = 0; i < sched_batch_count(w->sched); i++) {
        s_req_t *r = sched_batch_user_at(w->sched, i);
        if (r && r->draft_pending) {
            n++;
            kmax = r->draft_k > kmax ? r->draft_k : kmax;
            if (r->draft_sent_us < oldest)
                oldest = r->draft_sent_us;
        }
    }
    if (!n) {
        w->n_pending_drafts = 0;
        return false;
    }
    /* the wait: spec_wait_us; but when every running request is waiting for
     * its draft the step has nothing else to do, so wait as long as drafts
     * have been taking (up to 10x the configured wait) */
    uint64_t wait = (uint64_t)w->spec_wait_us;
    if (n == sched_batch_count(w->sched)) {
        uint64_t expect = (uint64_t)(2.0 * w->draft_us_per_token * kmax);
        uint64_t cap = 10 * (uint64_t)w->spec_wait_us;
        if (expect > wait)
            wait = expect < cap ? expect : cap;
    }
    if (now - oldest < wait)
        return true;
    actor_counters_add(w->counters, "spec.wait_timeouts", 1);
    for (int i = 0; i < sched_batch_count(w->sched); i++) {
        s_req_t *r = sched_batch_user_at(w->sched, i);
        if (r && r->draft_pending) { /* a late reply is then stale: the seq moves on */
            r->draft_pending = false;
            w->n_pending_drafts--;
            /* a draft that misses the wait is a failed attempt, and its latency
             * (at least the wait) makes deep drafts look as costly as they are */
            model_spec_adapt_observe(&r->adapt, r->draft_k, 0);
            double per = (double)w->spec_wait_us / (r->draft_k > 0 ? r->draft_k : 1);
            w->draft_us_per_token = 0.8 * w->draft_us_per_token + 0.2 * per;
        }
    }
    return false;
}

/* A decode item ran with nd drafts: verify them (model_spec_verify), emit the
 * accepted tokens and the target's own next one, roll the KV of the rejected
 * positions back.  lg: (nd + 1, n_vocab) logits. */
static void s_emit_verified(s_worker_t *w, s_req_t *r, const sched_batch_item_t *it, float *lg,
                            int nd) {
    int32_t out[MODEL_SPEC_MAX_K + 1];
    int h = r->n_hist;                           /* position of the first new token */
    for (int i = 0; r->logprobs && i <= nd; i++) /* before verify changes the rows */
        s_log_softmax(lg + (size_t)i * w->n_vocab, w->lp_rows + (size_t)i * w->n_vocab, w->n_vocab);
    int e = model_spec_verify(w->sampler, &r->sp, lg, r->draft, nd, r->hist, r->n_hist, h, out);
    r->n_draft = 0;
    if (e < 1) {
        LOG_E(w->name, "verification failed (%d)", e);
        sched_batch_remove(w->sched, r->rid);
        s_error(w, r->rid, MSG_CODE_INTERNAL, "speculative verification failed");
        s_req_free(w, &r);
        return;
    }
    int acc = e - 1;
    model_spec_adapt_observe(&r->adapt, nd, acc);
    r->proposed += nd;
    r->accepted += acc;
    actor_counters_add(w->counters, "spec.proposed", nd);
    actor_counters_add(w->counters, "spec.accepted", acc);
    actor_counters_add(w->counters, "spec.steps", 1);
    /* positions it->pos0 .. it->pos0 + acc hold valid KV; the rest is rolled back */
    r->n_computed = it->pos0 + 1 + acc;
    kv_cache_truncate(w->kv, &r->kv, r->n_computed);
    int n_emit = 0;
    for (int i = 0; i < e; i++) {
        int index = s_done(r);
        int32_t t = out[i];
        if (r->logprobs)
            s_logprobs(w, r, w->lp_rows + (size_t)i * w->n_vocab, t);
        if (model_tokenizer_is_eog(w->tok, t)) {
            s_finish(w, r, -1, -1, MSG_FINISH_EOS);
            return;
        }
        r->hist[r->n_hist++] = t;
        n_emit++;
        actor_counters_add(w->counters, "tokens.generated", 1);
        if (index + 1 >= r->max_tokens) {
            s_finish(w, r, index, t, MSG_FINISH_LENGTH);
            return;
        }
        if (s_event(w, r, index, t, MSG_FINISH_NONE) == MSG_FINISH_STOP) {
            sched_batch_remove(w->sched, r->rid);
            actor_counters_add(w->counters, "stopped", 1);
            actor_counters_add(w->counters, "completed", 1);
            s_req_free(w, &r);
            return;
        }
    }
    sched_batch_advance_spec(w->sched, r->rid, 1 + acc, n_emit);
    s_want_draft(w, r);
}

/* A request runs for the first time: attach its cached prefix and start its
 * first prefill chunk after it (the positions skipped are reported to the
 * scheduler with the chunk, in r->skip). */
static void s_attach(s_worker_t *w, s_req_t *r, sched_batch_item_t *it) {
    r->fresh = false;
    r->skip = 0;
    if (!it->prefill || it->pos0 != 0)
        return;
    int c = kv_cache_attach_prefix(w->kv, &r->kv, r->hist, r->n_prompt);
    s_trace(w, r, "admit",
            "a batch slot and KV room (its reservation: prompt + max_tokens); %d of %d positions "
            "attached from the prefix cache",
            c > 0 ? c : 0, r->n_prompt);
    serve_metrics_step_prefix(w->metrics, c > 0 ? c : 0);
    if (c <= 0)
        return;
    r->n_cached = r->n_computed = r->skip = c;
    actor_counters_add(w->counters, "kv.cached_tokens", c);
    it->pos0 = c;
    if (it->n > r->n_prompt - c)
        it->n = r->n_prompt - c;
    it->sample = it->pos0 + it->n == r->n_prompt;
}

static void s_on_written(void *arg, const kv_cache_evicted_t *b);

/* One forward step over everything the scheduler picked. */
static int s_step(s_worker_t *w) {
    int n_items = sched_batch_plan(w->sched, w->items, w->max_batch);
    if (n_items <= 0)
        return 0;
    uint64_t now = base_now_us();
    int nt = 0;
    for (int k = 0; k < n_items; k++) {
        sched_batch_item_t *it = &w->items[k];
        s_req_t *r = it->user;
        if (r->fresh)
            s_attach(w, r, it);
        if (kv_cache_reserve(w->kv, &r->kv, it->pos0, it->pos0 + it->n)) {
            /* cannot happen while the scheduler's accounting holds: every
             * block in use belongs to a running request's reservation */
            actor_counters_add(w->counters, "kv.reserve_failed", 1);
            LOG_E(w->name, "KV reservation failed: the scheduler's accounting is off");
            return -ENOSPC;
        }
        if (it->prefill && !r->t_prefill)
            r->t_prefill = now;
        /* a decode item verifies its drafts in the same pass: the last known
         * token then draft[0..nd) at the following positions, logits for all */
        int nd = 0;
        if (!it->prefill && it->sample && r->n_draft > 0 && r->draft_base == r->n_hist) {
            nd = r->n_draft;
            if (kv_cache_reserve(w->kv, &r->kv, it->pos0, it->pos0 + 1 + nd))
                nd = 0; /* no room: plain decode this step */
        }
        r->n_draft = nd; /* what this step verifies */
        w->b_seqs[k] = (model_seq_view_t){r->kv.blocks, r->kv.n};
        for (int j = 0; j < it->n; j++, nt++) {
            w->b_tok[nt] = r->hist[it->pos0 + j];
            w->b_pos[nt] = it->pos0 + j;
            w->b_seq[nt] = k;
            w->b_want[nt] = it->sample && j == it->n - 1;
        }
        for (int j = 0; j < nd; j++, nt++) {
            w->b_tok[nt] = r->draft[j];
            w->b_pos[nt] = it->pos0 + 1 + j;
            w->b_seq[nt] = k;
            w->b_want[nt] = true;
        }
        if (nd)
            actor_counters_add(w->counters, "tokens.verified", nd);
        actor_counters_add(w->counters, it->prefill ? "tokens.prefill" : "tokens.decode", it->n);
    }
    model_batch_t b = {nt, w->b_tok, w->b_pos, w->b_seq, w->b_want, n_items, w->b_seqs};
    uint64_t t_fwd = base_now_us();
    int got = model_ctx_forward(w->ctx, &b, kv_cache_pool(w->kv), w->logits);
    double dt = (double)(base_now_us() - t_fwd);
    w->step_us = w->step_us > 0 ? 0.9 * w->step_us + 0.1 * dt : dt;
    actor_counters_add(w->counters, "steps", 1);
    serve_metrics_step_observe(w->metrics, n_items, nt);
    if (got < 0) {
        LOG_E(w->name, "forward pass failed (%d): failing the batch", got);
        for (int k = 0; k < n_items; k++) {
            s_req_t *r = sched_batch_remove(w->sched, w->items[k].rid);
            s_error(w, r->rid, MSG_CODE_INTERNAL, "forward pass failed");
            s_req_free(w, &r);
        }
        return got;
    }
    now = base_now_us();
    int row = 0;
    for (int k = 0; k < n_items; k++) {
        sched_batch_item_t *it = &w->items[k];
        s_req_t *r = it->user;
        if (r->trace && it->prefill)
            s_trace(w, r, "prefill", "positions %d..%d of %d in a step of %d requests, %d tokens",
                    it->pos0, it->pos0 + it->n, r->n_prompt, n_items, nt);
        else if (r->trace)
            s_trace(w, r, "decode",
                    "token %d in a step of %d requests, %d tokens; %d drafts verified%s%s",
                    s_done(r), n_items, nt, r->n_draft, r->n_draft ? ": " : "",
                    r->n_draft ? r->spec_why : "");
        r->n_computed = it->pos0 + it->n;
        /* full blocks are shareable as soon as they are computed; with write-through
         * they go to T1 then too */
        if (it->prefill || (w->write_through && r->n_computed % w->block_size == 0))
            s_publish(w, r, r->n_computed, false);
        if (w->write_through)
            kv_cache_write_through(w->kv, &r->kv, s_on_written, w);
        int skip = r->skip; /* cached positions before this chunk (first chunk only) */
        r->skip = 0;
        if (!it->sample) {
            sched_batch_advance(w->sched, r->rid, skip + it->n, false);
            continue;
        }
        float *lg = w->logits + (size_t)row * w->n_vocab;
        int nd = it->prefill ? 0 : r->n_draft;
        row += 1 + nd;
        int pos = it->pos0 + it->n;
        if (!r->t_first)
            r->t_first = now;
        r->t_last = now;
        if (nd > 0) {
            s_emit_verified(w, r, it, lg, nd);
            continue;
        }
        int index = s_done(r);
        if (r->logprobs)
            s_log_softmax(lg, w->lp_rows, w->n_vocab);
        int32_t next = model_sampler_sample(w->sampler, &r->sp, lg, r->hist, r->n_hist, pos);
        if (r->logprobs)
            s_logprobs(w, r, w->lp_rows, next);
        if (model_tokenizer_is_eog(w->tok, next)) {
            s_finish(w, r, -1, -1, MSG_FINISH_EOS);
            continue;
        }
        r->hist[r->n_hist++] = next;
        actor_counters_add(w->counters, "tokens.generated", 1);
        if (index + 1 >= r->max_tokens) {
            s_finish(w, r, index, next, MSG_FINISH_LENGTH);
            continue;
        }
        sched_batch_advance(w->sched, r->rid, skip + it->n, true);
        if (s_event(w, r, index, next, MSG_FINISH_NONE) == MSG_FINISH_STOP) {
            sched_batch_remove(w->sched, r->rid);
            actor_counters_add(w->counters, "stopped", 1);
            actor_counters_add(w->counters, "completed", 1);
            s_req_free(w, &r);
            continue;
        }
        if (!it->prefill || it->sample)
            s_want_draft(w, r);
    }
    w->dirty = true;
    return n_items;
}

/* Send a full block to the tier manager (what: "demoted" or "written").  Never
 * waits: a full queue drops it (the block is recomputed if needed again). */
static void s_to_tier(s_worker_t *w, const kv_cache_evicted_t *b, const char *what) {
    if (!w->to_tier || b->in_lower || b->meta->n_tokens != w->block_size)
        return;
    msg_kv_block_t m;
    msg_kv_block_init(&m);
    m.worker = w->index;
    m.hash = b->meta->hash;
    m.parent = b->meta->parent;
    m.tokens = (int32_t *)b->meta->tokens;
    m.n_tokens = b->meta->n_tokens;
    m.fmt = b->fmt;
    m.pin = b->meta->pin;
    char name[48];
    if (actor_send_raw(w->to_tier, MSG_KV_BLOCK, &m, b->data, b->bytes, 0)) {
        snprintf(name, sizeof name, "kv.%s.dropped", what);
        actor_counters_add(w->counters, name, 1);
    } else {
        snprintf(name, sizeof name, "kv.%s", what);
        actor_counters_add(w->counters, name, 1);
        snprintf(name, sizeof name, "kv.bytes.%s", what);
        actor_counters_add(w->counters, name, (int64_t)b->bytes);
    }
}

/* Evicted from T0: demote to the tier manager unless it has the block already. */
static void s_on_evict(void *arg, const kv_cache_evicted_t *b) {
    s_to_tier(arg, b, "demoted");
}

/* Write-through: a running request's block just filled goes to T1 at once, so
 * that the request, resumed elsewhere after this worker dies, promotes it there
 * instead of computing it again. */
static void s_on_written(void *arg, const kv_cache_evicted_t *b) {
    s_to_tier(arg, b, "written");
}

/* A block promoted from T1/T2 for request rid. */
static void s_on_block(void *self, const msg_kv_block_t *b, zmq_msg_t *raw) {
    s_worker_t *w = self;
    kv_meta_t meta;
    meta.hash = b->hash;
    meta.parent = b->parent;
    meta.n_tokens = b->n_tokens;
    meta.pin = b->pin;
    if (b->n_tokens > KV_MAX_BLOCK_TOKENS ||
        kv_hash_block(b->parent, b->tokens, b->n_tokens) != b->hash) {
        actor_counters_add(w->counters, "kv.promoted.refused", 1);
        return;
    }
    memcpy(meta.tokens, b->tokens, (size_t)b->n_tokens * sizeof *meta.tokens);
    int rc = kv_cache_insert(w->kv, &meta, b->fmt, zmq_msg_data(raw), zmq_msg_size(raw));
    s_req_t *parked = s_find_parked(w, b->rid);
    bool waiting = parked != NULL;
    if (parked && !rc)
        parked->promoted++;
    actor_counters_add(w->counters,
                       rc == -EEXIST ? "kv.promoted.redundant"
                       : rc          ? "kv.promoted.refused"
                       : waiting     ? "kv.promoted.in_time"
                                     : "kv.promoted.late",
                       1);
    if (!rc)
        actor_counters_add(w->counters, "kv.bytes.promoted", (int64_t)zmq_msg_size(raw));
}

/* Parked requests whose promotions did not finish in time run now (what is
 * missing is recomputed). */
static void s_check_parked(s_worker_t *w) {
    uint64_t now = base_now_us();
    s_req_t **p = &w->parked;
    while (*p) {
        s_req_t *r = *p;
        if (now < r->park_deadline) {
            p = &r->next_parked;
            continue;
        }
        *p = r->next_parked;
        r->parked = false;
        r->next_parked = NULL;
        actor_counters_add(w->counters, "kv.prefetch.timeouts", 1);
        s_trace(w, r, "promote",
                "waited %d ms (prefetch_wait_ms) for T1/T2: %d blocks came in time, the rest "
                "is computed",
                w->prefetch_wait_ms, r->promoted);
        s_admit(w, r);
    }
}

static void s_report(s_worker_t *w) {
    sched_batch_load_t l = sched_batch_load(w->sched);
    msg_load_report_t m;
    msg_load_report_init(&m);
    m.worker = w->index;
    m.queued_tokens = l.queued_tokens;
    m.active_tokens = l.active_tokens;
    m.n_queued = l.n_waiting;
    m.n_active = l.n_running;
    m.kv_free_blocks = kv_cache_available(w->kv);
    actor_send(w->to_router, MSG_LOAD_REPORT, &m); /* a lost report is replaced soon */
    actor_counters_set(w->counters, "running", l.n_running);
    actor_counters_set(w->counters, "waiting", l.n_waiting);
    kv_cache_stats_t ks = kv_cache_stats(w->kv);
    actor_counters_t *c = w->counters;
    actor_counters_set(c, "kv.free_blocks", kv_cache_available(w->kv));
    actor_counters_set(c, "kv.total_blocks", kv_cache_total(w->kv));
    actor_counters_set(c, "kv.t0.hit_blocks", ks.hit_blocks);
    actor_counters_set(c, "kv.t0.hit_tokens", ks.hit_tokens);
    actor_counters_set(c, "kv.t0.miss_blocks", ks.miss_blocks);
    actor_counters_set(c, "kv.t0.cow_copies", ks.cow_copies);
    actor_counters_set(c, "kv.t0.evictions", ks.evictions);
    actor_counters_set(c, "kv.t0.inserted", ks.inserted);
    actor_counters_set(c, "kv.t0.blocks_used", ks.n_used);
    actor_counters_set(c, "kv.t0.blocks_cached", ks.n_cached);
    actor_counters_set(c, "kv.t0.blocks_free", ks.n_free);
    actor_counters_set(c, "kv.t0.bytes",
                       (int64_t)kv_cache_total(w->kv) * (int64_t)kv_cache_pool(w->kv)->block_bytes);
    w->last_report_us = base_now_us();
    w->dirty = false;
}

/* serve_metrics' export into the actor's counters (base_hist_put_fn). */
static void s_put_counter(void *counters, const char *name, int64_t value) {
    actor_counters_set(counters, name, value);
}

/* Before every stats_answer: the histograms' counters. */
static void s_on_stats(void *self) {
    s_worker_t *w = self;
    serve_metrics_step_export(w->metrics, s_put_counter, w->counters);
}

static void s_on_promote_done(void *self, const msg_kv_promote_done_t *m) {
    s_worker_t *w = self;
    s_req_t *r = s_find_parked(w, m->rid);
    if (r) {
        s_unpark(w, r);
        s_trace(w, r, "promote",
                "the tier manager sent %d blocks from T1/T2 (%d of them new here), %d not there",
                m->sent, r->promoted, m->missing);
        s_admit(w, r);
    }
}

static void s_on_work_probe(void *self, const msg_work_probe_t *m) {
    s_worker_t *w = self;
    actor_counters_add(w->counters, "probes", 1);
    s_status(w, m->rid, s_holds(w, m->rid));
}

static void s_on_expert_table(void *self, const msg_expert_table_t *m) {
    s_worker_t *w = self;
    if (w->experts)
        actor_expert_client_table(w->experts, m);
}

static void s_on_work_cancel(void *self, const msg_work_cancel_t *m) {
    s_on_cancel(self, m->rid);
}

/* After every wakeup: one batch step when there is work.  0 (poll without
 * waiting) while steps run; 1 ms while a draft is on its way; otherwise block
 * in the poll (2 ms with requests waiting for promotions, else 100 ms). */
static int s_idle(void *self) {
    s_worker_t *w = self;
    s_check_parked(w);
    if (s_wait_drafts(w))
        return 1;
    bool busy = s_step(w) > 0;
    uint64_t now = base_now_us();
    if ((w->dirty && now - w->last_report_us > 20000) || now - w->last_report_us > 100000)
        s_report(w);
    return busy ? 0 : w->parked ? 2 : 100;
}

/* The worker's sockets (the draft's is opened only with speculation on). */
static const actor_sock_decl_t s_socks[] = {
    {ACTOR_SOCK_FIELD(s_worker_t, in), ACTOR_SOCK_IN, NULL, ACTOR_HWM_STREAM, ACTOR_MAX_FRAME,
     false},
    {ACTOR_SOCK_FIELD(s_worker_t, to_tok), ACTOR_SOCK_OUT, "tokenizer", ACTOR_HWM_STREAM, 0, false},
    {ACTOR_SOCK_FIELD(s_worker_t, to_router), ACTOR_SOCK_OUT, "router", ACTOR_HWM_STREAM, 0, false},
    {ACTOR_SOCK_FIELD(s_worker_t, to_front), ACTOR_SOCK_OUT, "frontend", ACTOR_HWM_CTL, 0, false},
    {ACTOR_SOCK_FIELD(s_worker_t, to_tier), ACTOR_SOCK_OUT, "kvtier", ACTOR_HWM_SPILL, 0, true},
    {0},
};

static void s_cleanup(s_worker_t *w) {
    /* free every request still held */
    s_req_t *r;
    while (w->sched && (r = sched_batch_pop(w->sched)))
        s_req_free(w, &r);
    sched_batch_destroy(&w->sched);
    while (w->parked) {
        r = w->parked;
        s_unpark(w, r);
        s_req_free(w, &r);
    }
    kv_cache_destroy(&w->kv);
    actor_expert_client_destroy(&w->experts);
    zsock_destroy(&w->to_tier);
    zsock_destroy(&w->to_draft);
    model_ctx_destroy(&w->ctx);
    model_sampler_destroy(&w->sampler);
    model_tokenizer_destroy(&w->tok);
    model_destroy(&w->model);
    actor_loop_destroy(&w->loop);
    serve_metrics_step_destroy(&w->metrics);
    actor_socks_close(s_socks, w);
    free(w->items);
    free(w->b_tok);
    free(w->b_pos);
    free(w->b_seq);
    free(w->b_want);
    free(w->b_seqs);
    free(w->logits);
    free(w->lp_rows);
    free(w->piece);
    free(w->text);
}

int actor_worker_main(actor_env_t *env) {
    const actor_worker_cfg_t *conf = actor_env_cfg(env);
    const actor_topology_t *t = actor_env_topology(env);
    const char *name = actor_env_name(env);
    s_worker_t w = {0};
    w.env = env;
    w.name = name;
    w.index = atoi(name + 6);
    char err[512];
    const char *path = conf->model;
    if (!path) {
        actor_env_fail(env, "%s: no model= option in the topology", name);
        goto fail;
    }
    int threads = conf->threads;
    w.max_batch = conf->max_batch;
    int n_blocks = conf->kv_blocks;
    int queue = conf->queue;
    w.step_tokens = conf->step_tokens;
    int max_ctx = conf->max_ctx;
    int bs = conf->block_size;
    int kv_fmt = conf->kv_type;
    int policy = conf->kv_policy;
    bool sharing = conf->prefix_cache;
    w.prefetch_wait_ms = conf->prefetch_wait_ms;
    w.block_size = bs;
    /* speculative decoding: on when the topology has a draft worker */
    bool spec = actor_topology_endpoint(t, "draft") != NULL && conf->spec;
    w.spec_k = conf->spec_k;
    w.spec_k_max = conf->spec_k_max;
    w.spec_wait_us = conf->spec_wait_us;
    if (w.step_tokens < w.max_batch)
        w.step_tokens = w.max_batch;
    w.model = model_load(path, err, sizeof err);
    if (!w.model) {
        actor_env_fail(env, "%s: %s", name, err);
        goto fail;
    }
    const model_config_t *cfg = model_config(w.model);
    w.n_vocab = cfg->n_vocab;
    w.tok = model_tokenizer_new(model_file(w.model), err, sizeof err);
    /* with speculation a decode item carries up to MODEL_SPEC_MAX_K drafts */
    int room = w.step_tokens + (spec ? w.max_batch * MODEL_SPEC_MAX_K : 0);
    int rows = w.max_batch * (spec ? 1 + MODEL_SPEC_MAX_K : 1);
    w.ctx = model_ctx_new(w.model, spec ? room : w.step_tokens, max_ctx, threads, NULL);
    kv_cache_config_t kc = {kv_fmt, bs, n_blocks, (kv_policy_kind_t)policy, sharing};
    kern_kv_shape_t shape = model_kv_shape(cfg, bs);
    w.kv = kv_cache_new(&shape, &kc);
    if (w.kv)
        kv_cache_on_evict(w.kv, s_on_evict, &w);
    sched_batch_config_t sc = {w.max_batch, queue, n_blocks, bs, w.step_tokens, max_ctx};
    w.sched = sched_batch_new(&sc);
    w.sampler = model_sampler_new(cfg->n_vocab);
    w.loop = actor_loop_new(env, &w);
    w.counters = w.loop ? actor_loop_counters(w.loop) : NULL;
    w.metrics = serve_metrics_step_new(); /* NULL (out of memory): no histograms */
    w.items = malloc((size_t)w.max_batch * sizeof *w.items);
    w.b_tok = malloc((size_t)room * sizeof *w.b_tok);
    w.b_pos = malloc((size_t)room * sizeof *w.b_pos);
    w.b_seq = malloc((size_t)room * sizeof *w.b_seq);
    w.b_want = malloc((size_t)room * sizeof *w.b_want);
    w.b_seqs = malloc((size_t)w.max_batch * sizeof *w.b_seqs);
    w.logits = malloc((size_t)rows * cfg->n_vocab * sizeof *w.logits);
    w.lp_rows = malloc((size_t)(1 + MODEL_SPEC_MAX_K) * cfg->n_vocab * sizeof *w.lp_rows);
    w.piece = malloc(S_SCRATCH);
    w.text = malloc(S_SCRATCH);
    if (!w.tok || !w.ctx || !w.kv || !w.sched || !w.sampler || !w.loop || !w.items || !w.b_tok ||
        !w.b_pos || !w.b_seq || !w.b_want || !w.b_seqs || !w.logits || !w.lp_rows || !w.piece ||
        !w.text) {
        actor_env_fail(env, "%s: cannot set up (%s)", name,
                       !w.tok  ? err
                       : !w.kv ? "KV pool too large"
                               : "out of memory");
        goto fail;
    }
    int rc = actor_socks_open(env, s_socks, &w, err, sizeof err);
    if (!rc && spec && !(w.to_draft = actor_sock_outbound(t, name, "draft", ACTOR_HWM_BULK))) {
        snprintf(err, sizeof err, "cannot connect to draft");
        rc = -EIO;
    }
    if (rc) {
        actor_env_fail(env, "%s: %s", name, err);
        goto fail;
    }
    if (w.to_tier) { /* with a KV tier manager */
        w.self_promote = actor_topology_endpoint(t, "prefetcher") == NULL;
        w.write_through = conf->write_through;
    }
    if (actor_placement_experts(t) > 0 && cfg->n_expert > 0) {
        /* MoE: every MoE layer's experts run on the expert actors */
        w.experts = actor_expert_client_new(t, name, w.index, w.model, w.loop, w.in,
                                            (msg_dtype_t)conf->expert_dtype,
                                            conf->expert_timeout_ms, err, sizeof err);
        if (!w.experts) {
            actor_env_fail(env, "%s: expert actors: %s", name, err);
            goto fail;
        }
        model_ctx_set_moe_exec(w.ctx, actor_expert_client_exec, w.experts);
        LOG_I(name, "MoE: %d experts per layer on %d expert actors (%s rows)", cfg->n_expert,
              actor_placement_experts(t), conf->expert_dtype == MSG_DTYPE_F16 ? "f16" : "f32");
    } else if (actor_placement_experts(t) > 0) {
        LOG_W(name, "the topology has expert actors but the model is dense: they stay idle");
    }
    actor_counters_set(w.counters, "kv.total_blocks", n_blocks);
    LOG_I(name,
          "ready: %d threads, batch %d, %d KV blocks of %d (%s, %s%s), queue %d, step %d "
          "tokens",
          threads, w.max_batch, n_blocks, bs, kv_fmt_name(kv_fmt), kv_policy_name(policy),
          sharing ? ", prefix cache" : "", queue, w.step_tokens);
    actor_env_ready(env);
    s_report(&w);

    actor_loop_inbox(w.loop, w.in, w.to_front, true, "");
    actor_loop_handle_kv_block_raw(w.loop, s_on_block);
    actor_loop_handle_draft_reply(w.loop, s_on_draft);
    actor_loop_handle_kv_promote_done(w.loop, s_on_promote_done);
    actor_loop_handle_work_request(w.loop, s_on_request);
    actor_loop_handle_work_cancel(w.loop, s_on_work_cancel);
    actor_loop_handle_work_probe(w.loop, s_on_work_probe);
    actor_loop_handle_expert_table(w.loop, s_on_expert_table);
    actor_loop_idle(w.loop, s_idle);
    actor_loop_on_stats(w.loop, s_on_stats);
    actor_loop_run(w.loop, 100);
    LOG_I(name, "stopping");
    s_cleanup(&w);
    return 0;
fail:
    s_cleanup(&w);
    return 1;
}

/* actor_worker.c - the target worker actor: a thin loop around serve_step (what a
 * batched step computes and in which order: sched_batch, kv_cache with prefix
 * sharing, model_ctx_forward, sampling and draft verification), emitting a
 * text_event per generated token.  With a KV tier manager in the topology it
 * demotes evicted blocks to it and takes in the blocks the prefetcher has it
 * promote. */
#include "actor_worker.h"

#include "actor_expert_client.h"
#include "actor_placement.h"

#include "base_log.h"
#include "grammar_mask.h"
#include "kv_cache.h"
#include "model.h"
#include "model_sampler.h"
#include "model_spec.h"
#include "model_tokenizer.h"
#include "sched_batch.h"
#include "serve_metrics.h"
#include "serve_step.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One request the worker holds (waiting or running). */
/* A compiled grammar and its token index, shared by the requests that use the same GBNF
 * text (the worker's bounded cache; one freed when no cache slot and no request holds it). */
typedef struct {
    char *text; /* its GBNF */
    grammar_t *g;
    grammar_index_t *ix; /* over the worker's vocabulary */
    int refs;            /* requests using it */
    bool cached;         /* in the cache */
    uint64_t used;       /* last use (LRU) */
} s_gram_t;
#define S_GRAM_CACHE 8 /* compiled grammars kept */

typedef struct s_req_t {
    serve_step_seq_t seq;        /* what the step reads and writes (first: the scheduler's
                                    user pointer is the request's address) */
    bool parked;                 /* waiting for promotions (not yet in the scheduler) */
    uint64_t park_deadline;      /* stop waiting then (us) */
    struct s_req_t *next_parked; /* parked list */
    /* speculative decoding */
    uint64_t draft_seq;      /* last draft_request sent (0: none yet) */
    bool draft_pending;      /* its reply has not arrived */
    uint64_t draft_sent_us;  /* when it was sent */
    int draft_k;             /* proposals it asked for */
    uint64_t t_arrival;      /* frontend arrival (us) */
    model_detok_t detok;     /* UTF-8-safe incremental decoding of its tokens */
    model_stopper_t stopper; /* its stop strings (n_stops may be 0) */
    /* explainability (docs/PROTOCOL.md, trace and logprobs) */
    int top_logprobs;        /* alternatives per token */
    msg_trace_step_t *steps; /* (cap_steps) the chain: the tokenizer's and router's, then ours */
    int n_steps, cap_steps;
    int64_t trace_end_us;     /* where the chain ends, after the arrival */
    int n_more;               /* steps summed up in the last one once the trace is full */
    int promoted;             /* blocks promoted for it while it waited */
    s_gram_t *gram;           /* its grammar (seq.grammar follows it), or NULL */
    model_logit_bias_t *bias; /* (seq.sp.n_bias) its logit_bias (seq.sp.bias points here) */
} s_req_t;
/* the step hands back &r->seq: the request itself */
static_assert(offsetof(s_req_t, seq) == 0, "seq must come first");

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
    serve_step_t *step;      /* the step: what a forward pass computes, in order */
    uint64_t last_report_us; /* last load_report */
    bool dirty;              /* state changed since the last report */
    /* the log-probabilities of the token s_event sends next (set by s_logprobs) */
    float lp;                               /* of the token */
    msg_top_t lp_top[MSG_MAX_TOP_LOGPROBS]; /* the most likely tokens */
    int lp_n_top;
    char lp_piece[MSG_MAX_PIECE_BYTES + 1]; /* the token's own text */
    bool lp_valid;
    serve_metrics_step_t *metrics;  /* per-step histograms (docs/METRICS.md) */
    actor_expert_client_t *experts; /* MoE layers over expert actors, or NULL: in process */
    grammar_vocab_t *gvocab;        /* the vocabulary as bytes (built at the first grammar) */
    s_gram_t *grams[S_GRAM_CACHE];  /* compiled grammars by GBNF text (LRU) */
    uint64_t gram_clock;            /* LRU ticks */
} s_worker_t;

#define TAG "worker"

/* Completion tokens of r so far (carried ones included): the next one's index. */
static int s_done(const s_req_t *r) {
    return serve_step_done(&r->seq);
}

/* Append a decision to r's trace: it ends now and began where the chain ended, so
 * the steps' durations add up to the request's latency.  Past MSG_MAX_TRACE_STEPS - 8
 * steps, the last one grows instead (its why says how many it stands for). */
static void s_trace(s_worker_t *w, s_req_t *r, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void s_trace(s_worker_t *w, s_req_t *r, const char *what, const char *fmt, ...) {
    if (!r->seq.trace)
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

/* Set what s_event sends with the next token: token t's log-probability in the row
 * lsm (log-softmax) and r's top_logprobs most likely alternatives. */
static void s_logprobs(s_worker_t *w, const s_req_t *r, const float *lsm, int32_t t) {
    w->lp_valid = r->seq.logprobs;
    if (!r->seq.logprobs)
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

/* ---- structured output: the vocabulary as bytes, the grammar cache */

static void s_gram_free(s_gram_t **gp) {
    s_gram_t *g = *gp;
    if (!g)
        return;
    grammar_index_destroy(&g->ix);
    grammar_destroy(&g->g);
    free(g->text);
    free(g);
    *gp = NULL;
}

static void s_gram_release(s_gram_t **gp) {
    s_gram_t *g = *gp;
    *gp = NULL;
    if (g && --g->refs == 0 && !g->cached)
        s_gram_free(&g);
}

/* The model's pieces as a grammar vocabulary (end-of-generation tokens end a sentence). */
static grammar_vocab_t *s_gram_vocab(s_worker_t *w) {
    if (w->gvocab)
        return w->gvocab;
    int n = w->n_vocab, n_eog = 0;
    const char **p = malloc((size_t)n * sizeof *p);
    uint32_t *len = malloc((size_t)n * sizeof *len);
    int32_t *eog = model_tokenizer_eog_ids(w->tok, n, &n_eog);
    if (p && len && eog) {
        for (int i = 0; i < n; i++) {
            size_t l = 0;
            const char *s = model_tokenizer_piece(w->tok, i, false, &l);
            p[i] = s ? s : "";
            len[i] = s && !model_tokenizer_is_eog(w->tok, i) ? (uint32_t)l : 0;
        }
        w->gvocab = grammar_vocab_new(n, p, len, eog, n_eog);
    }
    free(p);
    free(len);
    free(eog);
    return w->gvocab;
}

/* The compiled grammar of GBNF text (from the cache, or built and cached), with one
 * reference for the caller.  NULL with the reason in err. */
static s_gram_t *s_gram_get(s_worker_t *w, const char *text, char *err, size_t errlen) {
    int lru = 0;
    for (int i = 0; i < S_GRAM_CACHE; i++) {
        s_gram_t *g = w->grams[i];
        if (g && !strcmp(g->text, text)) {
            g->refs++;
            g->used = ++w->gram_clock;
            actor_counters_add(w->counters, "grammar.cache_hits", 1);
            return g;
        }
        if (!g || (w->grams[lru] && g->used < w->grams[lru]->used))
            lru = i;
    }
    grammar_vocab_t *v = s_gram_vocab(w);
    s_gram_t *g = calloc(1, sizeof *g);
    if (!v || !g || !(g->text = strdup(text))) {
        snprintf(err, errlen, "out of memory");
        free(g);
        return NULL;
    }
    uint64_t t0 = base_now_us();
    g->g = grammar_new(text, err, errlen);
    g->ix = g->g ? grammar_index_new(g->g, v, err, errlen) : NULL;
    if (!g->ix) {
        s_gram_free(&g);
        return NULL;
    }
    actor_counters_add(w->counters, "grammar.compiled", 1);
    actor_counters_add(w->counters, "grammar.compile_us", (int64_t)(base_now_us() - t0));
    if (w->grams[lru]) { /* evict: freed now, or by its last request */
        w->grams[lru]->cached = false;
        if (w->grams[lru]->refs == 0)
            s_gram_free(&w->grams[lru]);
    }
    g->cached = true;
    g->refs = 1;
    g->used = ++w->gram_clock;
    w->grams[lru] = g;
    return g;
}

/* r follows GBNF text: its grammar, and a fresh state replayed over the completion
 * tokens it carries (the state is a function of them, so a resumed request goes on
 * exactly as the uninterrupted one).  0, or -1 with the reason in err. */
static int s_gram_attach(s_worker_t *w, s_req_t *r, const char *text, char *err, size_t errlen) {
    r->gram = s_gram_get(w, text, err, errlen);
    if (!r->gram)
        return -1;
    r->seq.gindex = r->gram->ix;
    r->seq.grammar = grammar_state_new(r->gram->g);
    if (!r->seq.grammar) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = r->seq.n_prompt - r->seq.n_carried; i < r->seq.n_prompt; i++)
        if (grammar_state_accept_token(r->seq.grammar, r->seq.gindex, r->seq.hist[i])) {
            snprintf(err, errlen, "completion token %d does not follow the grammar",
                     i - (r->seq.n_prompt - r->seq.n_carried));
            return -1;
        }
    return 0;
}

static void s_req_free(s_worker_t *w, s_req_t **rp) {
    s_req_t *r = *rp;
    if (!r)
        return;
    if (r->seq.kv.n && !r->seq.embed_sum) /* what it computed serves later requests */
        serve_step_publish(w->step, &r->seq, r->seq.n_computed, true);
    if (r->draft_pending)
        w->n_pending_drafts--;
    if (w->to_draft && r->draft_seq) {
        msg_draft_end_t e = {r->seq.rid, w->index};
        actor_send(w->to_draft, MSG_DRAFT_END, &e); /* a lost one ages out of the drafter */
    }
    kv_cache_release(w->kv, &r->seq.kv);
    model_stopper_free(&r->stopper);
    grammar_state_destroy(&r->seq.grammar);
    s_gram_release(&r->gram);
    free(r->bias);
    free(r->steps);
    free(r->seq.hist);
    free(r->seq.embed_sum);
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
    te.rid = r->seq.rid;
    te.worker = w->index;
    te.index = index;
    te.token = token;
    te.count = s_done(r);
    te.finish = finish;
    te.prompt_tokens = r->seq.n_prompt - r->seq.n_carried;
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
    if (te.finish && r->seq.trace) {
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
        uint64_t tp = r->seq.t_prefill ? r->seq.t_prefill : now,
                 tf = r->seq.t_first ? r->seq.t_first : now;
        te.timings.queued_us = tp > r->t_arrival ? tp - r->t_arrival : 0;
        te.timings.prefill_us = tf - tp;
        te.timings.ttft_us = tf > r->t_arrival ? tf - r->t_arrival : 0;
        te.timings.decode_us = r->seq.t_last > tf ? r->seq.t_last - tf : 0;
        te.cached_tokens = r->seq.n_cached < te.prompt_tokens ? r->seq.n_cached : te.prompt_tokens;
        te.draft_proposed = r->seq.proposed;
        te.draft_accepted = r->seq.accepted;
    }
    s_send(w, w->to_front, MSG_TEXT_EVENT, &te);
    if (te.finish) {
        msg_work_event_t ev;
        msg_work_event_init(&ev);
        ev.rid = r->seq.rid;
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
        if (r->seq.rid == rid)
            return r;
    return NULL;
}

/* rid's n_prompt tokens (+ max_tokens; 0: the prompt alone) do not fit in the context this
 * worker can hold: context_length_exceeded, in OpenAI's words. */
static void s_error_context(s_worker_t *w, uint64_t rid, int n_prompt, int max_tokens) {
    char why[256];
    int ctx = sched_batch_context(w->sched);
    if (max_tokens)
        snprintf(why, sizeof why,
                 "This model's maximum context length is %d tokens. However, you requested %d "
                 "tokens (%d in the messages, %d in the completion). Please reduce the length "
                 "of the messages or completion.",
                 ctx, n_prompt + max_tokens, n_prompt, max_tokens);
    else
        snprintf(why, sizeof why,
                 "This model's maximum context length is %d tokens. However, your messages "
                 "resulted in %d tokens. Please reduce the length of the messages.",
                 ctx, n_prompt);
    s_error(w, rid, MSG_CODE_CONTEXT, why);
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
    for (int i = r->seq.n_prompt - r->seq.n_carried; i < r->seq.n_prompt; i++) {
        int pl = model_detok_push(&r->detok, r->seq.hist[i], w->piece, S_SCRATCH);
        model_stopper_push(&r->stopper, w->piece, (size_t)(pl > 0 ? pl : 0), w->text, S_SCRATCH);
    }
    if (r->stopper.stopped)
        return MSG_FINISH_STOP;
    if (r->seq.n_carried >= r->seq.max_tokens)
        return MSG_FINISH_LENGTH;
    return 0;
}

static void s_on_embed(s_worker_t *w, const msg_work_request_t *q);

static void s_on_request(void *self, const msg_work_request_t *q) {
    s_worker_t *w = self;
    if (q->embed) {
        s_on_embed(w, q);
        return;
    }
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
    for (int i = 0; i < q->n_logit_bias; i++)
        if (q->logit_bias[i].token >= w->n_vocab) {
            snprintf(why, sizeof why, "logit_bias: token %d is not in the vocabulary (0..%d)",
                     (int)q->logit_bias[i].token, w->n_vocab - 1);
            s_error(w, q->rid, MSG_CODE_BAD_REQUEST, why);
            return;
        }
    model_sampler_params_t sp = {.temperature = q->sampling.temperature,
                                 .top_k = q->sampling.top_k,
                                 .top_p = q->sampling.top_p,
                                 .min_p = q->sampling.min_p,
                                 .repeat_penalty = q->sampling.repeat_penalty,
                                 .repeat_last_n = q->sampling.repeat_last_n,
                                 .seed = q->sampling.seed,
                                 .presence_penalty = q->sampling.presence_penalty,
                                 .frequency_penalty = q->sampling.frequency_penalty,
                                 /* the completion starts after the prompt: carried tokens
                                    are completion tokens */
                                 .gen_start = q->n_tokens - q->n_gen,
                                 .bias = (const model_logit_bias_t *)q->logit_bias,
                                 .n_bias = q->n_logit_bias};
    if (model_sampler_check(&sp, why, sizeof why)) {
        s_error(w, q->rid, MSG_CODE_BAD_REQUEST, why);
        return;
    }
    /* fit_context: max_tokens is a ceiling, lowered to what the context leaves after the
     * prompt (carried completion tokens count as completion) */
    int max_tokens = q->max_tokens, n_prompt = q->n_tokens - q->n_gen;
    int room = sched_batch_context(w->sched) - n_prompt;
    if (q->fit_context && room < max_tokens) {
        if (room < 1 || room < q->n_gen) {
            s_error_context(w, q->rid, n_prompt, 0);
            return;
        }
        max_tokens = room;
    }
    s_req_t *r = calloc(1, sizeof *r);
    if (r)
        r->seq.hist = malloc(((size_t)q->n_tokens + max_tokens) * sizeof *r->seq.hist);
    if (r && sp.n_bias) { /* the request outlives q: its own copy */
        r->bias = malloc((size_t)sp.n_bias * sizeof *r->bias);
        if (r->bias)
            for (int i = 0; i < sp.n_bias; i++)
                r->bias[i] = (model_logit_bias_t){q->logit_bias[i].token, q->logit_bias[i].bias};
        sp.bias = r->bias;
    }
    if (!r || !r->seq.hist || (sp.n_bias && !r->bias)) {
        if (r)
            free(r->seq.hist);
        free(r);
        s_error(w, q->rid, MSG_CODE_INTERNAL, "out of memory");
        return;
    }
    r->seq.rid = q->rid;
    memcpy(r->seq.hist, q->tokens, (size_t)q->n_tokens * sizeof *r->seq.hist);
    r->seq.n_prompt = r->seq.n_hist = q->n_tokens;
    r->seq.n_carried = q->n_gen;
    r->seq.max_tokens = max_tokens;
    r->seq.sp = sp;
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
    r->seq.pin_tokens = q->pin_tokens < r->seq.n_prompt ? q->pin_tokens : r->seq.n_prompt;
    r->seq.logprobs = q->logprobs || q->top_logprobs > 0;
    r->top_logprobs = q->top_logprobs;
    r->seq.trace = q->trace;
    if (r->seq.trace && q->n_steps) { /* the chain so far: tokenizer, router */
        r->steps = malloc((size_t)q->n_steps * sizeof *r->steps);
        if (r->steps) {
            memcpy(r->steps, q->steps, (size_t)q->n_steps * sizeof *r->steps);
            r->n_steps = r->cap_steps = q->n_steps;
            r->trace_end_us = q->steps[q->n_steps - 1].t_us + q->steps[q->n_steps - 1].dur_us;
        }
    }
    model_spec_adapt_init(&r->seq.adapt, w->spec_k, w->spec_k_max);
    char gerr[256];
    if (q->grammar && s_gram_attach(w, r, q->grammar, gerr, sizeof gerr)) {
        actor_counters_add(w->counters, "rejected.grammar", 1);
        s_error(w, q->rid, MSG_CODE_BAD_REQUEST, gerr);
        s_req_free(w, &r);
        return;
    }
    if (r->seq.grammar)
        actor_counters_add(w->counters, "requests.constrained", 1);
    if (r->seq.n_carried) {
        actor_counters_add(w->counters, "requests.resumed", 1);
        actor_counters_add(w->counters, "tokens.carried", r->seq.n_carried);
        int fin = s_replay_carried(w, r);
        if (!fin && r->seq.grammar && !grammar_state_can_continue(r->seq.grammar))
            fin = MSG_FINISH_EOS; /* the carried tokens complete the grammar */
        if (fin) {                /* nothing left to generate: end it here */
            s_status(w, r->seq.rid, true);
            s_event(w, r, -1, -1, fin);
            s_req_free(w, &r);
            return;
        }
    }
    s_status(w, r->seq.rid, true);
    int in_t0 = kv_cache_match(w->kv, r->seq.hist, r->seq.n_prompt);
    s_trace(w, r, "arrive",
            "%d prompt tokens%s%.0d%s; the prefix cache (T0) holds %d of them; %d requests "
            "running, %d waiting here",
            r->seq.n_prompt - r->seq.n_carried, r->seq.n_carried ? " + " : "", r->seq.n_carried,
            r->seq.n_carried ? " completion tokens carried (a resumed request)" : "", in_t0,
            sched_batch_load(w->sched).n_running, sched_batch_load(w->sched).n_waiting);
    if (w->to_tier && in_t0 / w->block_size < (r->seq.n_prompt - 1) / w->block_size) {
        /* part of the prompt may be in T1/T2: the prefetcher is having it sent
         * here; run it when the tier manager says it is done (or at the deadline) */
        /* make what T0 has now the most recently used, so that the promoted
         * blocks evict other blocks before this prompt's head (nothing is held:
         * only running requests hold blocks, which the scheduler accounts for) */
        kv_cache_attach_prefix(w->kv, &r->seq.kv, r->seq.hist, r->seq.n_prompt);
        kv_cache_release(w->kv, &r->seq.kv);
        r->parked = true;
        r->park_deadline = base_now_us() + (uint64_t)w->prefetch_wait_ms * 1000;
        r->next_parked = w->parked;
        w->parked = r;
        actor_counters_add(w->counters, "kv.prefetch.waits", 1);
        if (w->self_promote) { /* no prefetcher in this deployment: ask directly */
            msg_kv_promote_t p;
            msg_kv_promote_init(&p);
            p.rid = r->seq.rid;
            p.worker = w->index;
            p.tokens = r->seq.hist;
            p.n_tokens = r->seq.n_prompt;
            if (actor_send(w->to_tier, MSG_KV_PROMOTE, &p))
                actor_counters_add(w->counters, "kv.promote.dropped", 1);
        }
        return;
    }
    s_admit(w, r);
}

/* Hand r to the scheduler (serve_step_admit), or refuse it. */
static void s_admit(s_worker_t *w, s_req_t *r) {
    const char *why = "";
    int rc = serve_step_admit(w->step, &r->seq, &why);
    if (rc == -E2BIG) {
        s_error_context(w, r->seq.rid, r->seq.n_prompt - r->seq.n_carried, r->seq.max_tokens);
        s_req_free(w, &r);
        return;
    }
    if (rc) {
        s_error(w, r->seq.rid, rc == -EAGAIN ? MSG_CODE_OVERLOADED : MSG_CODE_BAD_REQUEST, why);
        s_req_free(w, &r);
        return;
    }
    w->dirty = true;
}

/* An embedding request (docs/PROTOCOL.md, embed): its prompt runs through the step like
 * any prefill, in batches with the others, every position computed (no prefix cache),
 * and its pooled vector goes to the frontend (s_step_embedded). */
static void s_on_embed(s_worker_t *w, const msg_work_request_t *q) {
    actor_counters_add(w->counters, "requests.embed", 1);
    if (s_holds(w, q->rid)) {
        actor_counters_add(w->counters, "requests.duplicate", 1);
        s_status(w, q->rid, true);
        return;
    }
    for (int i = 0; i < q->n_tokens; i++)
        if (q->tokens[i] >= w->n_vocab) {
            char why[96];
            snprintf(why, sizeof why, "token id %d is out of the vocabulary (%d tokens)",
                     q->tokens[i], w->n_vocab);
            s_error(w, q->rid, MSG_CODE_BAD_REQUEST, why);
            return;
        }
    int max_ctx = sched_batch_config(w->sched)->max_ctx;
    if (q->n_tokens + 1 > max_ctx) {
        char why[160];
        snprintf(why, sizeof why, "the input has %d tokens: it " SERVE_STEP_NO_ROOM " (%d tokens)",
                 q->n_tokens, max_ctx - 1);
        s_error(w, q->rid, MSG_CODE_BAD_REQUEST, why);
        return;
    }
    s_req_t *r = calloc(1, sizeof *r);
    if (r) {
        r->seq.hist = malloc(((size_t)q->n_tokens + 1) * sizeof *r->seq.hist);
        r->seq.embed_sum = calloc((size_t)model_config(w->model)->d_model, sizeof(double));
    }
    if (!r || !r->seq.hist || !r->seq.embed_sum) {
        if (r)
            s_req_free(w, &r);
        s_error(w, q->rid, MSG_CODE_INTERNAL, "out of memory");
        return;
    }
    r->seq.rid = q->rid;
    memcpy(r->seq.hist, q->tokens, (size_t)q->n_tokens * sizeof *r->seq.hist);
    r->seq.n_prompt = r->seq.n_hist = q->n_tokens;
    r->seq.max_tokens = 1; /* the scheduler's unit; nothing is generated */
    r->t_arrival = q->t_arrival_us;
    model_detok_init(&r->detok, w->tok);
    s_status(w, r->seq.rid, true);
    s_admit(w, r);
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

/* Ask the draft worker for proposals continuing r's history (when
 * speculation is on and the adaptive depth says it pays). */
static void s_want_draft(s_worker_t *w, s_req_t *r) {
    r->seq.n_draft = 0;
    if (!w->to_draft || r->draft_pending)
        return;
    int left = r->seq.max_tokens - s_done(r); /* tokens it may still emit */
    /* drafting is serial with the target's step: its measured latency per
     * token, in target steps, is part of what a deeper k costs */
    double step_us = serve_step_us(w->step);
    if (step_us > 0)
        r->seq.adapt.draft_cost = (float)(w->draft_us_per_token / step_us);
    int k = model_spec_adapt_next_k(&r->seq.adapt, sched_batch_count(w->sched));
    if (r->seq.trace)
        snprintf(r->seq.spec_why, sizeof r->seq.spec_why,
                 "k %d %s (acceptance %.2f, draft cost %.2f steps/token, %d running)", k,
                 r->seq.adapt.k_fixed ? "fixed" : "adaptive", r->seq.adapt.rate,
                 r->seq.adapt.draft_cost, sched_batch_count(w->sched));
    if (k > left - 1)
        k = left - 1; /* every verified position stays inside the request's reservation */
    if (k < 1)
        return;
    msg_draft_request_t q;
    msg_draft_request_init(&q);
    q.rid = r->seq.rid;
    q.worker = w->index;
    q.seq = ++r->draft_seq;
    q.tokens = r->seq.hist;
    q.n_tokens = r->seq.n_hist;
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
    int rc = serve_step_draft(w->step, &r->seq, m->base, m->tokens, m->n_tokens);
    if (rc == -ESTALE || (rc && m->n_tokens > MODEL_SPEC_MAX_K))
        actor_counters_add(w->counters, "spec.reply_stale", 1);
    else if (!rc && !m->n_tokens)
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
            model_spec_adapt_observe(&r->seq.adapt, r->draft_k, 0);
            double per = (double)w->spec_wait_us / (r->draft_k > 0 ? r->draft_k : 1);
            w->draft_us_per_token = 0.8 * w->draft_us_per_token + 0.2 * per;
        }
    }
    return false;
}

/* ---- the step's results (serve_step_sink_t): events to the frontend and router */

static bool s_step_token(void *arg, serve_step_seq_t *seq, int index, int32_t token,
                         const float *lsm) {
    s_worker_t *w = arg;
    s_req_t *r = (s_req_t *)seq;
    if (lsm)
        s_logprobs(w, r, lsm, token);
    return s_event(w, r, index, token, MSG_FINISH_NONE) == MSG_FINISH_STOP;
}

static void s_step_finish(void *arg, serve_step_seq_t *seq, int index, int32_t token, int why,
                          const float *lsm) {
    s_worker_t *w = arg;
    s_req_t *r = (s_req_t *)seq;
    if (lsm)
        s_logprobs(w, r, lsm, token);
    s_event(w, r, index, token, why == SERVE_STEP_EOS ? MSG_FINISH_EOS : MSG_FINISH_LENGTH);
    actor_counters_add(w->counters, "completed", 1);
    s_req_free(w, &r);
}

static void s_step_embedded(void *arg, serve_step_seq_t *seq, const float *vec, int dim) {
    s_worker_t *w = arg;
    s_req_t *r = (s_req_t *)seq;
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
    s_req_free(w, &r);
}

static void s_step_ended(void *arg, serve_step_seq_t *seq) {
    s_req_t *r = (s_req_t *)seq;
    s_req_free(arg, &r);
}

static void s_step_error(void *arg, serve_step_seq_t *seq, int rc, const char *why) {
    s_worker_t *w = arg;
    s_req_t *r = (s_req_t *)seq;
    LOG_E(w->name, "%s (%d): failing request %llu", why, rc, (unsigned long long)seq->rid);
    s_error(w, seq->rid, MSG_CODE_INTERNAL, why);
    s_req_free(w, &r);
}

static void s_step_decoded(void *arg, serve_step_seq_t *seq) {
    s_want_draft(arg, (s_req_t *)seq); /* under a grammar the step cuts the drafts it refuses */
}

static void s_step_note(void *arg, serve_step_seq_t *seq, const char *what, const char *why) {
    s_trace(arg, (s_req_t *)seq, what, "%s", why);
}

static void s_step_count(void *arg, const char *name, int64_t value) {
    s_worker_t *w = arg;
    actor_counters_add(w->counters, name, value);
}

static void s_on_written(void *arg, const kv_cache_evicted_t *b);

/* One forward step over everything the scheduler picked (serve_step_run). */
static int s_step(s_worker_t *w) {
    int n = serve_step_run(w->step);
    if (n == -ENOSPC)
        LOG_E(w->name, "KV reservation failed: the scheduler's accounting is off");
    if (n > 0)
        w->dirty = true;
    return n;
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
    serve_step_destroy(&w->step);
    for (int i = 0; i < S_GRAM_CACHE; i++) /* no request holds one any more */
        s_gram_free(&w->grams[i]);
    grammar_vocab_destroy(&w->gvocab);
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
    sched_batch_config_t sc = {w.max_batch, queue, n_blocks, bs, w.step_tokens, max_ctx};
    w.ctx = model_ctx_new(w.model, serve_step_max_tokens(&sc, spec), max_ctx, threads, NULL);
    kv_cache_config_t kc = {kv_fmt, bs, n_blocks, (kv_policy_kind_t)policy, sharing};
    kern_kv_shape_t shape = model_kv_shape(cfg, bs);
    w.kv = kv_cache_new(&shape, &kc);
    if (w.kv)
        kv_cache_on_evict(w.kv, s_on_evict, &w);
    w.sched = sched_batch_new(&sc);
    w.sampler = model_sampler_new(cfg->n_vocab);
    w.loop = actor_loop_new(env, &w);
    w.counters = w.loop ? actor_loop_counters(w.loop) : NULL;
    w.metrics = serve_metrics_step_new(); /* NULL (out of memory): no histograms */
    w.piece = malloc(S_SCRATCH);
    w.text = malloc(S_SCRATCH);
    if (!w.tok || !w.ctx || !w.kv || !w.sched || !w.sampler || !w.loop || !w.piece || !w.text) {
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
    serve_step_config_t stc = {w.model,   w.tok,     w.ctx, w.kv,           w.sched,
                               w.sampler, w.metrics, spec,  w.write_through};
    serve_step_sink_t sink = {&w,           s_step_token,   s_step_finish, s_step_ended,
                              s_step_error, s_step_decoded, s_step_note,   s_step_count,
                              s_on_written, s_step_embedded};
    if (!(w.step = serve_step_new(&stc, &sink))) {
        actor_env_fail(env, "%s: cannot set up (out of memory)", name);
        s_cleanup(&w);
        return 1;
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

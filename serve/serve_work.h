/* serve_work.h - the target worker's request and how it comes in.  A work_request
 * (msgs/msg_internal.h) is checked against what the worker can do (token ids and
 * logit_bias in the vocabulary, sampling parameters, stop strings, the context: with
 * fit_context max_tokens is lowered to the room left), then becomes a serve_work_t: the
 * step's seq (serve_step.h), its detokenizer and stop strings, its trace chain, its
 * grammar.  A resumed request arrives with completion tokens already delivered: they are
 * replayed through the grammar (at intake) and through the detokenizer and the stopper
 * (serve_work_replay), so that it goes on exactly as the uninterrupted one would have,
 * or ends at once when they already end it.  A request whose prompt may lie in the lower
 * KV tiers waits for them first (serve_work_park_wanted; serve_parked holds it).  No
 * sockets: the worker sends what these decide. */
#ifndef SERVE_WORK_H
#define SERVE_WORK_H

#include "model_sampler.h"
#include "model_tokenizer.h"
#include "msg_internal.h"
#include "serve_grammars.h"
#include "serve_step.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One request the worker holds (waiting or running): plain data, embedded first in the
 * worker's own request struct (the step's user pointer is the seq's address). */
typedef struct {
    serve_step_seq_t seq;     /* what the step reads and writes (first) */
    uint64_t t_arrival;       /* frontend arrival (us, base_now_us) */
    model_detok_t detok;      /* UTF-8-safe incremental decoding of its tokens */
    model_stopper_t stopper;  /* its stop strings (n_stops may be 0) */
    int top_logprobs;         /* alternatives per token */
    msg_trace_step_t *steps;  /* (cap_steps) the chain: the tokenizer's and router's, then ours */
    int n_steps;              /* steps in the chain */
    int cap_steps;            /* room in steps */
    int64_t trace_end_us;     /* where the chain ends, after the arrival */
    int n_more;               /* steps summed up in the last one once the trace is full */
    serve_grammar_t *gram;    /* its grammar (seq.grammar follows it), or NULL */
    model_logit_bias_t *bias; /* (seq.sp.n_bias) its logit_bias (seq.sp.bias points here) */
} serve_work_t;

/* What a request is checked against and built with: all borrowed. */
typedef struct {
    const model_tokenizer_t *tok; /* the detokenizer's */
    int n_vocab;                  /* token ids and logit_bias keys below this */
    int context;                  /* positions a request may use (sched_batch_context) */
    int max_ctx;                  /* positions per request (an embedding's limit) */
    int d_model;                  /* an embedding's width */
    int spec_k;                   /* fixed draft depth, or 0: adaptive */
    int spec_k_max;               /* adaptive: the largest depth */
    serve_grammars_t *grammars;   /* compiled grammars (NULL: a grammar is refused) */
    /* in-sequence KV compression (serve_work_kv_compress sets these) */
    kv_compress_t kv_compress;   /* of the requests that name none (kind none: off) */
    int kv_groups;               /* the model's (layer, KV head) groups */
    const char *kv_compress_off; /* why no request may compress here, or NULL */
} serve_work_config_t;

/* Why a request was refused: the work_error to send. */
typedef struct {
    int code;      /* msg_code: MSG_CODE_BAD_REQUEST, _CONTEXT, _INTERNAL (out of memory) */
    bool grammar;  /* the grammar was refused (the worker counts it apart) */
    char why[320]; /* in words, for the client */
} serve_work_refusal_t;

/* The worker's KV compression: its default policy (the kv_compress option's spec) and
 * whether requests may compress at all: not on a model with sliding-window layers (their
 * window counts positions, which compaction no longer maps to rows) nor with the KV on a
 * device (on_device: the GPU worker's pool).  0, or -1 with the reason in err when the
 * spec is bad or names a policy that cannot run here. */
int serve_work_kv_compress(serve_work_config_t *cfg, const char *spec, const model_config_t *mc,
                           bool on_device, char *err, size_t errlen);

/* Take in q as w (zeroed by the caller; q is not kept: w copies what it needs), its
 * grammar attached and replayed over the carried completion tokens.  0, or -EINVAL
 * (refused: no says why, code bad_request or context_length), -ENOMEM (code internal);
 * on error w is cleared. */
int serve_work_init(serve_work_t *w, const msg_work_request_t *q, const serve_work_config_t *cfg,
                    serve_work_refusal_t *no);
/* Take in an embedding request (q->embed): its prompt only, nothing generated, every
 * position computed.  As serve_work_init. */
int serve_work_init_embed(serve_work_t *w, const msg_work_request_t *q,
                          const serve_work_config_t *cfg, serve_work_refusal_t *no);
/* Frees what w holds (its history, stop strings, grammar, trace; not its KV, which the
 * worker releases), zeroes it; safe twice. */
void serve_work_clear(serve_work_t *w);

/* A resumed request (seq.n_carried > 0): run its carried tokens through the detokenizer
 * and the stopper as if they had been generated here, so that the text of the next token
 * continues exactly where the client's text ends.  The finish reason when they already
 * end the request (its final event was lost: MSG_FINISH_STOP, _LENGTH, or _EOS when they
 * complete its grammar), else 0. */
int serve_work_replay(serve_work_t *w);

/* Should a request with n_prompt positions, of which the prefix cache (T0) holds in_t0,
 * wait for promotions from the lower tiers (a KV tier manager is there)?  Yes when a
 * whole block past what T0 holds could come from them (the last position is always
 * computed, for its logits). */
bool serve_work_park_wanted(int n_prompt, int in_t0, int block_size);

/* Append a decision by actor `who` to w's trace (when w->seq.trace): it ends at now_us
 * and began where the chain ended, so the steps' durations add up to the request's
 * latency.  Past MSG_MAX_TRACE_STEPS - 8 steps, the last one grows instead (its why says
 * how many it stands for).  Out of memory: the step is left out. */
void serve_work_trace(serve_work_t *w, const char *who, uint64_t now_us, const char *what,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* serve_work_trace with a va_list. */
void serve_work_vtrace(serve_work_t *w, const char *who, uint64_t now_us, const char *what,
                       const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

/* OpenAI's context_length_exceeded in words: n_prompt tokens (+ max_tokens; 0: the
 * prompt alone) do not fit in context positions. */
void serve_work_context_error(char *why, size_t cap, int context, int n_prompt, int max_tokens);

#endif

/* model_sampler.h - choosing the next token from logits, and deciding when to stop.
 * Sampling is seeded per request and per position: the random draw at position p
 * depends only on (seed, p), so a generation resumed at p continues exactly as
 * the uninterrupted one would have.
 */
#ifndef MODEL_SAMPLER_H
#define MODEL_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One entry of logit_bias: added to the token's logit before anything else. */
typedef struct {
    int32_t token; /* 0..n_vocab-1 */
    float bias;    /* -100..100 */
} model_logit_bias_t;

#define MODEL_MAX_LOGIT_BIAS 1024

typedef struct {
    float temperature;    /* <= 0: greedy (argmax) */
    int top_k;            /* keep the k most likely; <= 0: off */
    float top_p;          /* nucleus: smallest set with mass >= top_p; >= 1: off */
    float min_p;          /* drop tokens below min_p * p(top); <= 0: off */
    float repeat_penalty; /* CTRL-style penalty on recent tokens; 1: off */
    int repeat_last_n;    /* how many recent tokens the penalty looks at */
    uint64_t seed;        /* per-request seed */
    /* OpenAI's penalties over the tokens generated so far, history[gen_start ..
     * n_history): logit[t] -= frequency_penalty * count[t] + presence_penalty *
     * (count[t] > 0).  Not the prompt: gen_start is where the completion starts in
     * history (a resumed request's carried tokens are part of the completion, so
     * the counts are a function of the request's tokens alone). */
    float presence_penalty;         /* [-2, 2]; 0: off */
    float frequency_penalty;        /* [-2, 2]; 0: off */
    int gen_start;                  /* index in history of the first generated token */
    const model_logit_bias_t *bias; /* (n_bias) borrowed: logit[token] += bias, first of all
                                       transforms (-100 bans a token, +100 forces it, in
                                       practice); distinct tokens */
    int n_bias;                     /* 0..MODEL_MAX_LOGIT_BIAS */
} model_sampler_params_t;

/* temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1.0 (off),
 * repeat_last_n 64, seed 0; presence and frequency penalties 0, no logit bias */
model_sampler_params_t model_sampler_defaults(void);
/* 0, or -EINVAL with a reason in err when a parameter is out of range
 * (temperature < 0 or > 100, top_p outside (0, 1], min_p outside [0, 1],
 * repeat_penalty outside (0, 10], repeat_last_n < 0, a penalty outside [-2, 2],
 * more than MODEL_MAX_LOGIT_BIAS biases, a bias outside [-100, 100] or a negative
 * token).  Token ids past the vocabulary are the caller's check (it knows n_vocab);
 * the sampler skips them. */
int model_sampler_check(const model_sampler_params_t *p, char *err, size_t errlen);

typedef struct model_sampler_t model_sampler_t;

model_sampler_t *model_sampler_new(int n_vocab);
void model_sampler_destroy(model_sampler_t **self_p);

/* Pick the token at position pos.  logits (n_vocab) is modified (logit bias,
 * penalties; then temperature).  history: the tokens so far (prompt and generated),
 * for the repetition penalty and, from p->gen_start on, the presence and frequency
 * penalties.  Order: logit bias, repetition penalty, presence/frequency penalties,
 * then greedy, or temperature, top-k, top-p, min-p and the (seed, pos) draw. */
int32_t model_sampler_sample(model_sampler_t *self, const model_sampler_params_t *p, float *logits,
                             const int32_t *history, int n_history, int pos);

/* The distribution model_sampler_sample draws from at a position (same
 * arguments, same transforms: logit bias, penalties, temperature, top-k, top-p,
 * min-p): writes the m tokens it can pick into ids[0..m) and their
 * probabilities, summing to 1, into probs[0..m), most likely first (ties:
 * lower id first), and returns m (1..n_vocab).  Greedy (temperature <= 0):
 * m = 1, the argmax with probability 1.  logits is modified as by
 * model_sampler_sample; ids and probs need room for n_vocab entries.  Every
 * token not in ids has probability 0. */
int model_sampler_dist(model_sampler_t *self, const model_sampler_params_t *p, float *logits,
                       const int32_t *history, int n_history, int32_t *ids, float *probs);

/* The n_vocab the sampler was made for (logits per call). */
int model_sampler_n_vocab(const model_sampler_t *self);

/* Index of the largest of n values (first on ties). */
int32_t model_argmax(const float *x, int n);

/* Set logits[ids[i]] to -INFINITY for each of the n ids: no transform above can
 * bring such a token back, so it is never sampled (how --ignore-eos bans the
 * end-of-generation tokens, as llama.cpp does).  Call it before sampling. */
void model_logits_ban(float *logits, const int32_t *ids, int n);

/* ---- stop strings over a stream of text pieces */

#define MODEL_MAX_STOP 8

typedef struct {
    char *stops[MODEL_MAX_STOP]; /* owned copies */
    int n_stops;
    char *held; /* text withheld: it may be the start of a stop string */
    size_t n_held, cap_held;
    bool stopped; /* a stop string was seen */
} model_stopper_t;

/* 0 or -EINVAL (too many or empty stop strings) / -ENOMEM. */
int model_stopper_init(model_stopper_t *s, const char *const *stops, int n);
void model_stopper_free(model_stopper_t *s);
/* Feed a piece; writes into out (cap >= n_piece + longest stop + 1) the text that
 * is now safe to emit, NUL-terminated; returns its length.  After a stop string
 * is seen, s->stopped is true and the text from the stop string on is dropped. */
size_t model_stopper_push(model_stopper_t *s, const char *piece, size_t n_piece, char *out,
                          size_t cap);
/* End of stream: emit whatever is held (no stop string was completed). */
size_t model_stopper_flush(model_stopper_t *s, char *out, size_t cap);

#endif

/* model_spec.h - speculative decoding as library code (no sockets): the n-gram
 * (prompt lookup) drafter, the verification rule that turns the target's logits
 * at k+1 positions into the tokens to emit, and the per-request choice of the
 * draft depth k from the observed acceptance.
 *
 * How a target worker uses it, per request and step:
 *
 *     k = model_spec_adapt_next_k(&r->adapt, n_running);        0: plain decode
 *     n = drafts from the draft worker or model_spec_ngram(hist, n_hist, ..., k, draft)
 *     forward [hist[n_hist-1], draft[0..n)) at positions n_hist-1 .. n_hist-1+n,
 *         logits wanted for all n+1 tokens -> logits (n+1, n_vocab)
 *     e = model_spec_verify(sampler, &sp, logits, draft, n, hist, n_hist, n_hist, out);
 *     model_spec_adapt_observe(&r->adapt, n, e - 1);
 *     append out[0..e) (stopping at an end-of-generation token or max_tokens);
 *     the KV of positions >= the new n_hist - 1 is stale: it is overwritten the
 *     next time those positions run (no copy, no free needed).
 */
#ifndef MODEL_SPEC_H
#define MODEL_SPEC_H

#include "model_sampler.h"

#include <stdbool.h>
#include <stdint.h>

#define MODEL_SPEC_MAX_K 16 /* draft depth limit (= MSG_MAX_DRAFT) */

/* ---- n-gram (prompt lookup) drafter */

/* Propose up to k tokens that continue tokens[0..n): find the longest suffix
 * n-gram of length g in [min_ngram, max_ngram] (g <= n - 1) that also occurs
 * earlier in the history, ending at some j < n, take its most recent such
 * occurrence, and copy what followed it: out[t] = tokens[j + t], reading on
 * into out itself past the end of the history (so a repeating pattern keeps
 * repeating).  Returns the number of proposals written: k when a match exists,
 * 0 when none does or on bad arguments (n < 2, k < 1, min_ngram < 1,
 * max_ngram < min_ngram).  Cost: one backward scan, O(n * max_ngram) compares
 * at worst and about n typically (a few microseconds for 8k tokens). */
int model_spec_ngram(const int32_t *tokens, int n, int min_ngram, int max_ngram, int k,
                     int32_t *out);

/* ---- verification */

/* The tokens to emit after a verification pass.  The drafts are deterministic
 * (q is one-hot on draft[i]).  logits (k+1, n_vocab): row i is the target's
 * output at the position that draft[i] (row k: the bonus token) would occupy,
 * i.e. at position pos0 + i, having seen hist[0..n_hist) and draft[0..i).
 * hist is what model_sampler_sample would get as history (prompt + accepted
 * tokens; read for the repetition penalty); pos0 is the position of the first
 * new token (normally n_hist: the sampler's seeding position).
 *
 * Rule, per i = 0, 1, ...: let p_i be the distribution the sampler draws from
 * at position pos0 + i (model_sampler_dist: after penalty, temperature, top-k,
 * top-p, min-p, with history hist + draft[0..i)).  Accept draft[i] with
 * probability min(1, p_i(x) / q_i(x)) = p_i(draft[i]); on rejection emit a
 * token from normalize(max(0, p_i - q_i)) = p_i without draft[i], renormalised,
 * and stop; when all k are accepted, emit the bonus token from p_k.  Greedy
 * (temperature <= 0): accept the longest prefix of drafts equal to the argmax,
 * then the argmax at the first mismatch (or the bonus argmax).
 *
 * It is implemented with the sampler's own seeded draw: t_i =
 * model_sampler_sample(.., pos0 + i) is drawn with the uniform of (seed,
 * pos0 + i); draft[i] is accepted iff t_i == draft[i] (probability p_i(draft[i]))
 * and on a mismatch t_i is emitted (given t_i != draft[i], t_i is distributed
 * as p_i without draft[i], renormalised) - the rule above, with the
 * acceptance test and the residual draw sharing one uniform.  Hence:
 *   - the emitted tokens' distribution is exactly the target's;
 *   - more: the tokens are the SAME, seed for seed, as plain one-token-at-a-time
 *     decoding with model_sampler_sample would produce, provided the logits are
 *     bitwise the ones plain decoding computes (the CPU kernels are
 *     batch-invariant, test_forward; a backend that is not gives the same
 *     distribution but may differ per seed).  Greedy output equals plain
 *     greedy decoding.
 *
 * out receives the e emitted tokens: draft[0..e-1) accepted, then the target's
 * own token (rejection replacement or bonus).  Returns e in 1..k+1 (k = 0 is
 * plain sampling of one token from row 0), or -EINVAL (bad arguments) /
 * -ENOMEM.  logits rows 0..e-1 are modified (as model_sampler_sample does). */
int model_spec_verify(model_sampler_t *s, const model_sampler_params_t *sp, float *logits,
                      const int32_t *draft, int k, const int32_t *hist, int n_hist, int pos0,
                      int32_t *out);

/* ---- adaptive depth
 *
 * Per request: an exponential moving average of the per-position acceptance
 * rate a (the chance a draft token is accepted given the previous one was).
 * With depth k a step emits E(k) = (1 - a^(k+1)) / (1 - a) tokens on average,
 * and costs about 1 + (c(n) + draft_cost) * k plain decode steps, where c(n)
 * is the marginal cost of one more verified position with n requests running:
 * cost0 when alone (a forward pass is memory-bound: extra positions ride
 * along), rising to 1 at n_saturate running requests (compute-bound: every
 * extra position costs a full token).  next_k picks the k in 1..cap(n) that
 * maximises E(k) / cost(k) (a capped at 0.98), where cap(n) = max(1, k_max * 4
 * / (n + 3)) shrinks as the batch grows (k_max alone, k_max / 2 at 5 running,
 * k_max / 4 at 13), or 0 (plain decoding) when no k beats 1 token per step -
 * but never 0 before min_obs positions were observed.  While at 0 no
 * acceptance is observed, so every probe_every steps it probes with k = 2; a
 * probe not fully accepted doubles the interval (up to 256 steps), a fully
 * accepted one resets it to 16 (and its observations may turn speculation back
 * on).  Plain data: embed it in the request; the fields may be tuned after
 * init. */
typedef struct {
    int k_fixed;      /* > 0: fixed mode, always min(k_fixed, MODEL_SPEC_MAX_K); 0: adaptive */
    int k_max;        /* adaptive: the largest k (1..MODEL_SPEC_MAX_K) */
    float rate;       /* EMA of the per-position acceptance rate, in [0, 1] */
    float alpha;      /* EMA weight of one observed position (0.1) */
    float cost0;      /* marginal cost of a verified position when alone (0.1) */
    int n_saturate;   /* running requests at which that cost reaches 1 (32) */
    float draft_cost; /* cost of drafting one token, in target steps (0 for n-gram) */
    int n_obs;        /* positions observed so far */
    int min_obs;      /* observations before speculation may be turned off (8) */
    int idle;         /* steps at k = 0 since speculation was turned off or last probed */
    int probe_every;  /* steps at k = 0 between probes (16, doubling to 256) */
    bool probing;     /* the last next_k was a probe */
} model_spec_adapt_t;

/* Adaptive (k_fixed 0, up to k_max) or fixed (k_fixed > 0) mode; prior rate 0.5.
 * k_max is clamped to 1..MODEL_SPEC_MAX_K. */
void model_spec_adapt_init(model_spec_adapt_t *a, int k_fixed, int k_max);
/* The depth for this step given n_running requests in the worker's batch
 * (itself included): 0 (do not draft) .. k_max. */
int model_spec_adapt_next_k(model_spec_adapt_t *a, int n_running);
/* A step verified k proposals (0..MODEL_SPEC_MAX_K; k = 0 observes nothing)
 * and accepted n_accepted of them (0..k, i.e. model_spec_verify's result - 1). */
void model_spec_adapt_observe(model_spec_adapt_t *a, int k, int n_accepted);

#endif

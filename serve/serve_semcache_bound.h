/* serve_semcache_bound.h - the semantic cache's error bound (issue 28): when may a cached
 * answer be returned for a request that is only similar to the one it answered?
 *
 * Not a fixed similarity threshold: a threshold calibrated from verified outcomes so that
 * the rate of wrong hits stays below a caller's delta with confidence 1 - alpha.
 *
 * Observations.  Each time the cache's nearest entry for a request was checked against a
 * real generation (a request that missed but had a neighbour, or a sampled fraction of
 * hits), the pair (similarity s, correct) is recorded: correct when the fresh answer
 * equals the cached one (after whitespace normalisation -- a conservative test: a
 * paraphrased answer counts as wrong).  The last `keep` observations are kept.
 *
 * Threshold (Learn-then-Test with fixed-sequence testing, Angelopoulos et al. 2021).
 * Candidate thresholds t_1 > t_2 > ... on a fixed grid (1.00, 0.99, ..., step 0.01) are
 * tested in that order; for each, the n observations with s >= t and the k wrong among
 * them give the Clopper-Pearson upper confidence bound U(k, n; alpha) of the wrong rate;
 * a t with too few observations (n < min_obs, or n < 3 n0 where n0 is the fewest that
 * could pass with none wrong, (1 - delta)^n0 <= alpha) is not tested and the walk goes on
 * down; testing stops at the first t tested
 * with U > delta, and the threshold is the last t that passed (none: no semantic hit).
 * Fixed-sequence testing needs no multiplicity correction, so: if the observations and future
 * requests are exchangeable (drawn alike from the same traffic), then with probability at least 1 -
 * alpha the chosen threshold's wrong-hit rate is at most delta.  What it does not cover: traffic
 * that drifts away from what was verified (the verified fraction of hits keeps feeding it),
 * and "wrong" as the exact-match test defines it.  One bound is shared by all entries (a
 * per-entry estimate, as vCache's, needs many verifications per entry before it allows a
 * hit; the global rule allows hits as soon as the traffic as a whole supports them). */
#ifndef SERVE_SEMCACHE_BOUND_H
#define SERVE_SEMCACHE_BOUND_H

#include <stdbool.h>
#include <stdint.h>

typedef struct serve_semcache_bound_t serve_semcache_bound_t;

/* keep: observations kept (the most recent); min_obs: observations at or above a threshold
 * before it can pass; alpha: 1 - the confidence (e.g. 0.05).  NULL on bad arguments or no
 * memory. */
serve_semcache_bound_t *serve_semcache_bound_new(int keep, int min_obs, double alpha);
void serve_semcache_bound_destroy(serve_semcache_bound_t **self_p);

/* Record one verified outcome at similarity s (-1..1). */
void serve_semcache_bound_observe(serve_semcache_bound_t *self, float s, bool correct);
/* The threshold for a wrong-hit rate of at most delta (0 < delta < 1): a hit needs a
 * similarity >= the returned value; above 1 when no threshold passes yet. */
double serve_semcache_bound_threshold(serve_semcache_bound_t *self, double delta);
/* Observation i (0: the oldest held) into *s and *correct; false past the last. */
bool serve_semcache_bound_at(const serve_semcache_bound_t *self, int i, float *s, bool *correct);
/* Observations held, and the wrong ones among them. */
int serve_semcache_bound_count(const serve_semcache_bound_t *self, int *wrong);

/* The Clopper-Pearson upper (1 - alpha) confidence bound of a binomial proportion with k
 * successes in n trials (1 when n is 0). */
double serve_semcache_cp_upper(int k, int n, double alpha);

#endif

/* base_hist.h - a histogram of integer observations with fixed log-spaced buckets
 * (1-2-5 per decade: 1, 2, 5, 10, 20, 50, ...), exported as plain counters so that it
 * travels in a stats_answer's counters map like any other counter:
 *
 *     <name>.bucket.le_<B>   observations <= B, cumulative, one per bound B
 *     <name>.sum             the sum of the observations
 *     <name>.count           how many (the +Inf bucket)
 *
 * The metrics actor turns every such triple back into a Prometheus histogram
 * (docs/METRICS.md).  Values carry their unit in the name: "ttft_us" holds
 * microseconds (exported as seconds).  Plain data owned by one thread; no sockets.
 */
#ifndef BASE_HIST_H
#define BASE_HIST_H

#include <stdint.h>

typedef struct base_hist_t base_hist_t;

/* Longest name (the bucket suffixes come on top) and most bounds of one histogram. */
#define BASE_HIST_NAME 48
#define BASE_HIST_MAX_BOUNDS 40

/* A histogram called name (dotted words, < BASE_HIST_NAME bytes) whose bucket bounds are
 * every 1-2-5 value in [lo, hi] (1 <= lo <= hi, at most BASE_HIST_MAX_BOUNDS of them:
 * 13 decades).  NULL when the arguments are out of range or out of memory. */
base_hist_t *base_hist_new(const char *name, int64_t lo, int64_t hi);
/* Nulls *self_p; safe on NULL and twice. */
void base_hist_destroy(base_hist_t **self_p);

/* Count value v in the first bucket whose bound is >= v (above the last bound: only in
 * count and sum).  A negative v counts as 0.  NULL self: nothing (an unset histogram). */
void base_hist_observe(base_hist_t *self, int64_t v);

const char *base_hist_name(const base_hist_t *self);
int base_hist_n_bounds(const base_hist_t *self);
/* Bound i (0 <= i < n_bounds), increasing. */
int64_t base_hist_bound(const base_hist_t *self, int i);
/* Observations <= bound i (cumulative). */
int64_t base_hist_cumulative(const base_hist_t *self, int i);
int64_t base_hist_count(const base_hist_t *self);
int64_t base_hist_sum(const base_hist_t *self);

/* Where export puts one counter: name (a stack buffer, copy it) and value. */
typedef void (*base_hist_put_fn)(void *user, const char *name, int64_t value);
/* Call put for every counter of the histogram: the buckets (increasing bound), then sum
 * and count.  NULL self: nothing. */
void base_hist_export(const base_hist_t *self, base_hist_put_fn put, void *user);

#endif

/* serve_semcache_bound.c - the semantic cache's calibrated threshold (serve_semcache_bound.h):
 * verified (similarity, correct) pairs, Clopper-Pearson bounds, fixed-sequence testing
 * down a grid of thresholds. */
#include "serve_semcache_bound.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_GRID_STEP 0.01 /* thresholds 1.00, 0.99, ..., 0.00 */

typedef struct {
    float s;
    bool ok;
} s_obs_t;

struct serve_semcache_bound_t {
    int keep, min_obs;
    double alpha;
    float *s;                      /* (keep) ring of similarities */
    uint8_t *ok;                   /* (keep) their outcomes */
    int n, head;                   /* held; next slot */
    s_obs_t *sorted;               /* (keep) scratch: the observations, similarity descending */
    uint64_t version;              /* observations recorded so far */
    uint64_t cached_version;       /* of the cached answer */
    double cached_delta, cached_t; /* the last threshold asked for */
};

serve_semcache_bound_t *serve_semcache_bound_new(int keep, int min_obs, double alpha) {
    if (keep < 1 || min_obs < 1 || !(alpha > 0 && alpha < 1))
        return NULL;
    serve_semcache_bound_t *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->keep = keep, b->min_obs = min_obs, b->alpha = alpha;
    b->s = malloc((size_t)keep * sizeof *b->s);
    b->ok = malloc((size_t)keep);
    b->sorted = malloc((size_t)keep * sizeof *b->sorted);
    b->cached_version = UINT64_MAX;
    if (!b->s || !b->ok || !b->sorted)
        serve_semcache_bound_destroy(&b);
    return b;
}

void serve_semcache_bound_destroy(serve_semcache_bound_t **self_p) {
    if (!self_p || !*self_p)
        return;
    serve_semcache_bound_t *b = *self_p;
    free(b->s), free(b->ok), free(b->sorted);
    free(b);
    *self_p = NULL;
}

void serve_semcache_bound_observe(serve_semcache_bound_t *b, float s, bool correct) {
    if (!isfinite(s))
        return;
    b->s[b->head] = s;
    b->ok[b->head] = correct;
    b->head = (b->head + 1) % b->keep;
    if (b->n < b->keep)
        b->n++;
    b->version++;
}

bool serve_semcache_bound_at(const serve_semcache_bound_t *b, int i, float *s, bool *correct) {
    if (i < 0 || i >= b->n)
        return false;
    int at = b->n < b->keep ? i : (b->head + i) % b->keep; /* full: the oldest is at head */
    *s = b->s[at];
    *correct = b->ok[at];
    return true;
}

int serve_semcache_bound_count(const serve_semcache_bound_t *b, int *wrong) {
    int w = 0;
    for (int i = 0; i < b->n; i++)
        w += !b->ok[i];
    if (wrong)
        *wrong = w;
    return b->n;
}

/* P(X <= k) for X ~ Binomial(n, p). */
static double s_binom_cdf(int k, int n, double p) {
    if (p <= 0)
        return 1;
    if (p >= 1)
        return k >= n ? 1 : 0;
    double lp = log(p), lq = log1p(-p), sum = 0, ln = lgamma(n + 1.0);
    for (int i = 0; i <= k; i++)
        sum += exp(ln - lgamma(i + 1.0) - lgamma(n - i + 1.0) + i * lp + (n - i) * lq);
    return sum < 1 ? sum : 1;
}

double serve_semcache_cp_upper(int k, int n, double alpha) {
    if (n <= 0 || k >= n)
        return 1;
    if (k <= 0)
        return 1 - pow(alpha, 1.0 / n); /* closed form: (1 - p)^n = alpha */
    double lo = (double)k / n, hi = 1;  /* the cdf falls as p rises: find cdf = alpha */
    for (int it = 0; it < 60; it++) {
        double mid = (lo + hi) / 2;
        if (s_binom_cdf(k, n, mid) > alpha)
            lo = mid;
        else
            hi = mid;
    }
    return hi;
}

static int s_desc(const void *x, const void *y) {
    float a = ((const s_obs_t *)x)->s, b = ((const s_obs_t *)y)->s;
    return (a < b) - (a > b);
}

double serve_semcache_bound_threshold(serve_semcache_bound_t *b, double delta) {
    if (!(delta > 0 && delta < 1))
        return 2;
    if (b->cached_version == b->version && b->cached_delta == delta)
        return b->cached_t;
    for (int i = 0; i < b->n; i++)
        b->sorted[i] = (s_obs_t){b->s[i], b->ok[i]};
    qsort(b->sorted, (size_t)b->n, sizeof *b->sorted, s_desc);
    double passed = 2; /* none yet */
    int n = 0, k = 0;
    /* The fewest observations whose bound can be below delta is n0 with (1 - delta)^n0 <=
     * alpha; a level is tested from 3 n0 on, so that one or two wrong ones among the
     * closest requests do not end the walk at its first step. */
    int min_n = 3 * (int)ceil(log(b->alpha) / log1p(-delta));
    if (min_n < b->min_obs)
        min_n = b->min_obs;
    for (int g = 0; g <= (int)lround(1 / S_GRID_STEP); g++) {
        double t = 1 - g * S_GRID_STEP;
        while (n < b->n && b->sorted[n].s >= t - 1e-9) {
            k += !b->sorted[n].ok;
            n++;
        }
        /* too few observations at this level to pass even with none wrong: not tested, go
         * lower (n depends on the similarities only, not on the outcomes, so the sequence
         * stays fixed given them) */
        if (n < min_n)
            continue;
        if (serve_semcache_cp_upper(k, n, b->alpha) > delta)
            break; /* the first failure ends the sequence */
        passed = t;
    }
    b->cached_version = b->version, b->cached_delta = delta, b->cached_t = passed;
    return passed;
}

/* base_hist.c - log-spaced histograms kept as per-bucket counts and exported as
 * cumulative counters (base_hist.h). */
#include "base_hist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct base_hist_t {
    char name[BASE_HIST_NAME];            /* "ttft_us" */
    int n;                                /* bounds */
    int64_t bound[BASE_HIST_MAX_BOUNDS];  /* (n) increasing */
    int64_t in[BASE_HIST_MAX_BOUNDS + 1]; /* (n + 1) observations in (bound[i-1], bound[i]];
                                             in[n]: above the last bound */
    int64_t count;                        /* every observation */
    int64_t sum;                          /* of the observations */
};

base_hist_t *base_hist_new(const char *name, int64_t lo, int64_t hi) {
    if (!name || !name[0] || strlen(name) >= BASE_HIST_NAME || lo < 1 || hi < lo)
        return NULL;
    base_hist_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    snprintf(self->name, sizeof self->name, "%s", name);
    static const int mant[] = {1, 2, 5};
    /* decades from 1 up; 10^18 is the largest power of ten an int64 holds */
    for (int64_t dec = 1; self->n <= BASE_HIST_MAX_BOUNDS; dec *= 10) {
        for (int k = 0; k < 3; k++) {
            int64_t b = dec * mant[k];
            if (b < lo || b > hi)
                continue;
            if (self->n == BASE_HIST_MAX_BOUNDS) {
                free(self);
                return NULL; /* too many bounds: a narrower range is wanted */
            }
            self->bound[self->n++] = b;
        }
        if (dec > hi / 10)
            break;
    }
    if (self->n == 0) { /* [lo, hi] holds no 1-2-5 value (e.g. [3, 4]): one bucket at hi */
        self->bound[self->n++] = hi;
    }
    return self;
}

void base_hist_destroy(base_hist_t **self_p) {
    if (!self_p || !*self_p)
        return;
    free(*self_p);
    *self_p = NULL;
}

void base_hist_observe(base_hist_t *self, int64_t v) {
    if (!self)
        return;
    if (v < 0)
        v = 0;
    int lo = 0, hi = self->n; /* the first bound >= v, or n */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (self->bound[mid] >= v)
            hi = mid;
        else
            lo = mid + 1;
    }
    self->in[lo]++;
    self->count++;
    self->sum += v;
}

const char *base_hist_name(const base_hist_t *self) {
    return self->name;
}
int base_hist_n_bounds(const base_hist_t *self) {
    return self->n;
}
int64_t base_hist_bound(const base_hist_t *self, int i) {
    return self->bound[i];
}
int64_t base_hist_cumulative(const base_hist_t *self, int i) {
    int64_t c = 0;
    for (int k = 0; k <= i; k++)
        c += self->in[k];
    return c;
}
int64_t base_hist_count(const base_hist_t *self) {
    return self->count;
}
int64_t base_hist_sum(const base_hist_t *self) {
    return self->sum;
}

void base_hist_export(const base_hist_t *self, base_hist_put_fn put, void *user) {
    if (!self)
        return;
    char name[BASE_HIST_NAME + 40];
    int64_t c = 0;
    for (int i = 0; i < self->n; i++) {
        c += self->in[i];
        snprintf(name, sizeof name, "%s.bucket.le_%lld", self->name, (long long)self->bound[i]);
        put(user, name, c);
    }
    snprintf(name, sizeof name, "%s.sum", self->name);
    put(user, name, self->sum);
    snprintf(name, sizeof name, "%s.count", self->name);
    put(user, name, self->count);
}

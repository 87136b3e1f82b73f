/* serve_semcache_ann.h - the semantic cache's approximate index: a thin C face over
 * hnswlib's HNSW graph (Debian's libhnswlib-dev, header-only C++; Malkov & Yashunin 2016)
 * with the inner product as similarity.  Labels are the store's entry slots: adding a
 * label that is in the index replaces its vector (a reused slot), removing one hides it
 * from searches.  hnswlib 0.6 has no filtered search: the store asks for k candidates and
 * keeps those of the request's context (serve_semcache.c).  Not thread-safe. */
#ifndef SERVE_SEMCACHE_ANN_H
#define SERVE_SEMCACHE_ANN_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct serve_semcache_ann_t serve_semcache_ann_t;

/* An index of at most max_labels labels (0..max_labels-1) of dim floats; m: the graph's
 * degree (16), ef_construction: the build's beam (200).  It holds room for 1024 at first
 * and doubles it as it fills.  NULL on bad arguments or no memory. */
serve_semcache_ann_t *serve_semcache_ann_new(int dim, int max_labels, int m, int ef_construction);
void serve_semcache_ann_destroy(serve_semcache_ann_t **self_p);

/* Index v (dim floats, unit length) under label (its vector replaced when present).
 * 0, -EINVAL or -ENOMEM. */
int serve_semcache_ann_add(serve_semcache_ann_t *self, int label, const float *v);
/* Hide label from searches (no-op when absent). */
void serve_semcache_ann_remove(serve_semcache_ann_t *self, int label);
/* Labels indexed and not removed. */
int serve_semcache_ann_count(const serve_semcache_ann_t *self);

/* The (at most) k labels nearest to q by inner product, with a beam of ef (>= k), most
 * similar first, into labels[] and sims[] (the inner products).  Returns how many. */
int serve_semcache_ann_search(const serve_semcache_ann_t *self, const float *q, int k, int ef,
                              int *labels, float *sims);

#ifdef __cplusplus
}
#endif

#endif

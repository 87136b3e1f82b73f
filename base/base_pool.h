/* base_pool.h - a small fork-join thread pool for the forward pass.
 * base_pool_run() runs fn on every thread (the caller is thread 0) and returns
 * when all are done; inside fn, base_pool_barrier() synchronises all threads,
 * so a whole forward pass is one run with a barrier between dependent steps.
 * Idle workers spin briefly, then sleep on a condition variable.
 */
#ifndef BASE_POOL_H
#define BASE_POOL_H

typedef struct base_pool_t base_pool_t;

/* fn(arg, ith, nth): ith in [0, nth). */
typedef void (*base_pool_fn)(void *arg, int ith, int nth);

/* A pool of n_threads (>= 1; the caller counts as one).  NULL on failure. */
base_pool_t *base_pool_new(int n_threads);
/* Stops and joins the workers; nulls *self_p; safe on NULL. */
void base_pool_destroy(base_pool_t **self_p);
int base_pool_size(const base_pool_t *self);
/* Run fn on all threads; not reentrant (one run at a time per pool). */
void base_pool_run(base_pool_t *self, base_pool_fn fn, void *arg);
/* Inside fn only: wait until every thread of the run reaches the barrier. */
void base_pool_barrier(base_pool_t *self);

/* Split [0, n) into nth parts, rounding part boundaries to multiples of align;
 * thread ith gets [*lo, *hi) (possibly empty). */
void base_pool_split(int n, int align, int ith, int nth, int *lo, int *hi);

#endif

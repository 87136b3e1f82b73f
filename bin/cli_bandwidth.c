/* cli_bandwidth.c - the read-bandwidth probe of `strata bench-model --bandwidth`:
 * the bound that decode is measured against (a memory-bound token reads every
 * weight once, so tokens/s <= bandwidth / bytes read per token). */
#include "base_pool.h"
#include "cli.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint64_t *buf;
    size_t n;               /* uint64 words in buf */
    volatile uint64_t sink; /* keeps the sums alive */
} s_bw_t;

/* This thread's contiguous share of buf, summed with 8 independent chains
 * (enough loads in flight for the memory system, not a compute test). */
static void s_bw_worker(void *arg, int ith, int nth) {
    s_bw_t *b = arg;
    const size_t per = b->n / (size_t)nth / 8 * 8, lo = per * (size_t)ith, hi = lo + per;
    uint64_t a[8] = {0};
    for (size_t i = lo; i < hi; i += 8)
        for (int j = 0; j < 8; j++)
            a[j] += b->buf[i + j];
    uint64_t s = 0;
    for (int j = 0; j < 8; j++)
        s += a[j];
    b->sink += s;
}

double cli_read_bandwidth(int threads, size_t bytes, int passes) {
    base_pool_t *pool = base_pool_new(threads);
    uint64_t *buf = malloc(bytes);
    double best = 0;
    if (pool && buf) {
        memset(buf, 1, bytes); /* fault every page in before timing */
        s_bw_t b = {buf, bytes / sizeof *buf, 0};
        for (int p = 0; p < passes; p++) {
            const double t0 = cli_now();
            base_pool_run(pool, s_bw_worker, &b);
            const double gbs = (double)bytes / (cli_now() - t0) / 1e9;
            best = gbs > best ? gbs : best;
        }
    }
    free(buf);
    base_pool_destroy(&pool);
    return best;
}

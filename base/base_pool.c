/* base_pool.c - fork-join pool: a generation counter wakes workers, a
 * sense-reversing counter barrier syncs them inside a run.  All shared words
 * are atomics with sequentially consistent ordering, which the sleep/wake
 * handshake relies on (see s_worker_wait). */
#include "base_pool.h"

#include "base_clock.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define S_PAUSE() _mm_pause()
#else
#define S_PAUSE() ((void)0)
#endif

/* How long an idle worker spins before it sleeps: long enough to span the gap
 * between two forward passes of a decode loop (sampling, sending an event),
 * short enough not to take a core from the other actors of a service that
 * share the machine.  STRATA_POOL_SPIN_US overrides. */
#define S_SPIN_US_DEFAULT 200
/* How long a thread spins at a barrier before it sleeps on the futex. */
#define S_BARRIER_SPIN_NS 30000ull

typedef struct {
    base_pool_t *pool; /* owner */
    int ith;           /* this worker's index (1..n-1) */
} s_worker_t;

struct base_pool_t {
    int n;                   /* threads including the caller */
    uint64_t spin_ns;        /* idle spin before sleeping */
    pthread_t *threads;      /* (n - 1) workers */
    s_worker_t *workers;     /* (n - 1) worker args */
    base_pool_fn fn;         /* current run */
    void *arg;               /* its argument */
    atomic_uint gen;         /* bumped once per run */
    atomic_int n_done;       /* workers finished with the current run */
    atomic_int sleeping;     /* workers blocked on cv */
    atomic_bool stop;        /* set by destroy */
    atomic_int bar_count;    /* threads arrived at the barrier */
    atomic_uint bar_gen;     /* barrier generation (also the futex word) */
    atomic_int bar_sleepers; /* threads asleep in the barrier */
    pthread_mutex_t mu;      /* guards the cv wait */
    pthread_cond_t cv;       /* wakes sleeping workers */
};

/* Wait for a generation other than last.  The worker announces itself in
 * `sleeping` before re-checking gen under the mutex; the runner bumps gen and
 * then reads `sleeping`: with seq_cst one of the two sees the other. */
static unsigned s_worker_wait(base_pool_t *p, unsigned last) {
    uint64_t deadline = base_now_ns() + p->spin_ns;
    for (int i = 1;; i++) {
        unsigned g = atomic_load(&p->gen);
        if (g != last || atomic_load(&p->stop))
            return g;
        S_PAUSE();
        if ((i & 63) == 0 && base_now_ns() > deadline)
            break;
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleeping, 1);
    unsigned g;
    while ((g = atomic_load(&p->gen)) == last && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->sleeping, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *s_worker_main(void *arg) {
    s_worker_t *w = arg;
    base_pool_t *p = w->pool;
    unsigned last = 0;
    for (;;) {
        last = s_worker_wait(p, last);
        if (atomic_load(&p->stop))
            break;
        p->fn(p->arg, w->ith, p->n);
        atomic_fetch_add(&p->n_done, 1);
    }
    return NULL;
}

base_pool_t *base_pool_new(int n_threads) {
    if (n_threads < 1)
        n_threads = 1;
    base_pool_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n_threads;
    const char *e = getenv("STRATA_POOL_SPIN_US");
    long us = e ? strtol(e, NULL, 10) : S_SPIN_US_DEFAULT;
    p->spin_ns = (uint64_t)(us < 0 ? 0 : us) * 1000ull;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->threads || !p->workers)
            goto fail;
        for (int i = 0; i < n_threads - 1; i++) {
            p->workers[i] = (s_worker_t){p, i + 1};
            if (pthread_create(&p->threads[i], NULL, s_worker_main, &p->workers[i]) != 0) {
                p->n = i + 1; /* join only those started */
                goto fail;
            }
        }
    }
    return p;
fail:
    base_pool_destroy(&p);
    return NULL;
}

void base_pool_destroy(base_pool_t **self_p) {
    if (!self_p || !*self_p)
        return;
    base_pool_t *p = *self_p;
    atomic_store(&p->stop, true);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; p->threads && i < p->n - 1; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p->workers);
    free(p);
    *self_p = NULL;
}

int base_pool_size(const base_pool_t *self) {
    return self->n;
}

void base_pool_run(base_pool_t *p, base_pool_fn fn, void *arg) {
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->n_done, 0);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(arg, 0, p->n);
    for (int spins = 0; atomic_load(&p->n_done) < p->n - 1;) {
        S_PAUSE();
        if (++spins > 2000) {
            sched_yield();
            spins = 0;
        }
    }
}

/* Linux futex on a 32-bit atomic: sleep while *addr == val / wake all sleepers. */
static void s_futex_wait(atomic_uint *addr, unsigned val) {
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void s_futex_wake(atomic_uint *addr) {
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Spin briefly (balanced work arrives within microseconds), then sleep on a
 * futex.  Sleeping matters when the machine has no spare core: a spinning
 * waiter would keep its core while the peer it waits for sits preempted
 * behind another actor's thread; asleep, it frees the core for that thread.
 * The sleeper counts itself before re-checking the generation in the kernel;
 * the releaser bumps the generation before reading the count (seq_cst), so a
 * wake-up is never lost. */
void base_pool_barrier(base_pool_t *p) {
    if (p->n == 1)
        return;
    unsigned g = atomic_load(&p->bar_gen);
    if (atomic_fetch_add(&p->bar_count, 1) == p->n - 1) {
        atomic_store(&p->bar_count, 0);
        atomic_fetch_add(&p->bar_gen, 1);
        if (atomic_load(&p->bar_sleepers) > 0)
            s_futex_wake(&p->bar_gen);
        return;
    }
    uint64_t deadline = 0;
    for (int i = 1; atomic_load(&p->bar_gen) == g; i++) {
        S_PAUSE();
        if ((i & 63) == 0) {
            uint64_t now = base_now_ns();
            if (!deadline) {
                deadline = now + S_BARRIER_SPIN_NS;
            } else if (now > deadline) {
                atomic_fetch_add(&p->bar_sleepers, 1);
                while (atomic_load(&p->bar_gen) == g)
                    s_futex_wait(&p->bar_gen, g);
                atomic_fetch_sub(&p->bar_sleepers, 1);
                return;
            }
        }
    }
}

void base_pool_split(int n, int align, int ith, int nth, int *lo, int *hi) {
    if (align < 1)
        align = 1;
    int units = (n + align - 1) / align;
    int u0 = (int)((long long)units * ith / nth);
    int u1 = (int)((long long)units * (ith + 1) / nth);
    *lo = u0 * align < n ? u0 * align : n;
    *hi = u1 * align < n ? u1 * align : n;
}

/* base_clock.h - the one monotonic clock of strata: every timing, deadline and
 * t_arrival_us reads CLOCK_MONOTONIC through these two functions. */
#ifndef BASE_CLOCK_H
#define BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic nanoseconds since an arbitrary origin (never goes back). */
static inline uint64_t base_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Monotonic microseconds, same origin. */
static inline uint64_t base_now_us(void) {
    return base_now_ns() / 1000u;
}

/* A sanitizer build (STRATA_SANITIZE=1) runs the model 5-10x slower: the timeouts that
 * tell a hung or lost actor from a slow one are multiplied by this there. */
#if defined(__SANITIZE_ADDRESS__)
#define BASE_TIMEOUT_SCALE 10
#else
#define BASE_TIMEOUT_SCALE 1
#endif

#endif

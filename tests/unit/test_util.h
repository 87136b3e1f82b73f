/* test_util.h - helpers shared by the Check suites. */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <stdint.h>

/* Path of the default model (STRATA_MODEL, else the fetch cache), or NULL if absent. */
const char *test_model_path(void);
/* Deterministic pseudo-random numbers for tests (xorshift64*). */
uint64_t test_rand_u64(uint64_t *state);
/* Uniform float in [lo, hi). */
float test_rand_f32(uint64_t *state, float lo, float hi);

#endif

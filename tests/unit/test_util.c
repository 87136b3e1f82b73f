/* test_util.c - helpers shared by the Check suites. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char *test_model_path(void) {
    static char buf[4096];
    const char *e = getenv("STRATA_MODEL");
    if (e && *e)
        return access(e, R_OK) == 0 ? e : NULL;
    const char *dir = getenv("STRATA_MODEL_DIR");
    if (dir && *dir)
        snprintf(buf, sizeof buf, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else
        snprintf(buf, sizeof buf, "%s/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : "/root");
    return access(buf, R_OK) == 0 ? buf : NULL;
}

uint64_t test_rand_u64(uint64_t *s) {
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

float test_rand_f32(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)((test_rand_u64(s) >> 40) * (1.0 / 16777216.0));
}

/* test_util.h - helpers shared by the Check suites. */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Path of the default model (STRATA_MODEL, else the fetch cache), or NULL if absent. */
const char *test_model_path(void);
/* Deterministic pseudo-random numbers for tests (xorshift64*). */
uint64_t test_rand_u64(uint64_t *state);
/* Uniform float in [lo, hi). */
float test_rand_f32(uint64_t *state, float lo, float hi);

/* A small synthetic llama model with random F32 weights and a minimal
 * SentencePiece-style vocabulary ("<unk>", "<s>", "</s>", then "<tag>3",
 * "<tag>4", ...), for tests that need a real forward pass without the default
 * model.  Zero fields take the defaults in brackets. */
typedef struct {
    int n_layer;           /* [2] */
    int d_model;           /* [64] */
    int n_head;            /* [4] */
    int n_head_kv;         /* [2] */
    int d_ff;              /* [128] */
    int n_vocab;           /* [64] */
    uint64_t seed;         /* weights [1] */
    const char *vocab_tag; /* token text prefix ["t"]: another tag, another vocabulary */
    float out_std;         /* std of the output matrix: spread of the logits [0.2] */
} test_synth_t;

/* Write the model to path.  0, or a negative errno with a reason in err. */
int test_synth_model(const char *path, const test_synth_t *cfg, char *err, size_t errlen);

#endif

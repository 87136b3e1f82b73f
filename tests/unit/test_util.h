/* test_util.h - helpers shared by the Check suites: the runner every suite's main() uses,
 * skipping (exit 77, CTest's SKIP_RETURN_CODE) a test that cannot run, the default model,
 * deterministic random numbers and a small synthetic model. */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include "msg_any.h"

#include "model_synth.h"

#include <check.h>
#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- running and skipping
 *
 * A test that cannot run exits TEST_SKIP (CTest reports it as skipped), never 0.  Under
 * CI=true a missing model or test tool is a failure instead (exit 1, saying what is
 * missing): CI must have them.  What CI may lack (a GPU) still skips there.
 *
 * A suite whose cases all need the default model calls test_model_path_or_skip() first
 * thing in main().  A suite that mixes model and no-model cases puts the model ones in
 * tcases made by test_tcase_model(); CTest then runs the binary twice (CMakeLists.txt
 * finds test_tcase_model in the source): "--no-model" runs the other tcases, which always
 * run, and "--model" runs the model tcases, or skips when the model is absent.  Without an
 * argument (by hand) everything runs; if the model is absent the model tcases are left
 * out and a passing run exits TEST_SKIP. */

#define TEST_SKIP 77

/* True when the environment says CI (CI=true, 1 or yes, in any case). */
bool test_in_ci(void);

/* Stop here: prints "SKIP: why" and exits TEST_SKIP; if ci_fails and test_in_ci(), prints
 * "FAIL: why (required under CI=true)" and exits 1 instead. */
_Noreturn void test_skip(bool ci_fails, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Path of the default model (STRATA_MODEL, else STRATA_MODEL_DIR/<default file>, else
 * ~/.cache/strata/models/<default file>), or NULL if it is not readable. */
const char *test_model_path(void);

/* The default model's path; exits through test_skip (ci_fails) naming the missing path
 * when it is not readable. */
const char *test_model_path_or_skip(void);

/* A new tcase, added to s, for cases that need the default model (tagged "model"). */
TCase *test_tcase_model(Suite *s, const char *name);

/* Run the suite (takes it) as argv asks (see above); fork is the Check fork mode
 * (CK_FORK_GETENV: Check's default, CK_NOFORK: run in this process).  Returns main's exit
 * status: 0 all passed, 1 a failure or a bad argument, TEST_SKIP nothing could run. */
int test_run_suite(int argc, char **argv, Suite *s, enum fork_status fork);

/* main() of a suite made by make_suite(), run with Check's default fork mode. */
#define TEST_MAIN(make_suite)                                                                      \
    int main(int argc, char **argv) {                                                              \
        return test_run_suite(argc, argv, make_suite(), CK_FORK_GETENV);                           \
    }

/* Wait up to ms for a message on an actor socket (actor_recv): 0 with m
 * filled (the caller msg_any_clear()s it), actor_recv's error, or -ETIMEDOUT. */
int test_recv_wait(zsock_t *s, msg_any_t *m, int ms);

/* Deterministic pseudo-random numbers for tests (xorshift64*). */
uint64_t test_rand_u64(uint64_t *state);
/* Uniform float in [lo, hi). */
float test_rand_f32(uint64_t *state, float lo, float hi);

/* KL(softmax(p) || softmax(q)) in nats of two rows of n logits (a forward against its
 * reference: p the reference's). */
double test_kl(const float *p, const float *q, int n);

/* A small synthetic llama model with random F32 weights and a minimal
 * SentencePiece-style vocabulary, for tests that need a real forward pass without the
 * default model: model/model_synth.h's (zero fields take its defaults). */
typedef model_synth_t test_synth_t;

/* Write the model to path.  0, or a negative errno with a reason in err. */
int test_synth_model(const char *path, const test_synth_t *cfg, char *err, size_t errlen);

/* A synthetic model written to a fresh temporary folder ($TMPDIR or /tmp, named after tag)
 * and loaded with its tokenizer: what the suites that need a vocabulary share. */
typedef struct {
    char dir[256];                 /* the folder */
    char path[300];                /* the GGUF in it */
    struct model_t *model;         /* loaded */
    struct model_tokenizer_t *tok; /* its tokenizer */
} test_synth_fixture_t;

/* 0, or -1 with the reason on stderr. */
int test_synth_open(test_synth_fixture_t *f, const char *tag, const test_synth_t *cfg);
/* Free the model and remove the folder; safe twice. */
void test_synth_close(test_synth_fixture_t *f);

#endif

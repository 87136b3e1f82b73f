/* test_util.c - helpers shared by the Check suites: the suite runner and skip rules
 * (test_util.h says what they mean), the default model, random numbers, a synthetic model. */
#include "test_util.h"

#include "actor_runtime.h"
#include "model.h"
#include "model_synth.h"
#include "model_tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ---- running and skipping */

#define S_MODEL_TAG "model"

static bool s_has_model_cases; /* test_tcase_model was called */

bool test_in_ci(void) {
    const char *e = getenv("CI");
    return e && (!strcasecmp(e, "true") || !strcmp(e, "1") || !strcasecmp(e, "yes"));
}

void test_skip(bool ci_fails, const char *fmt, ...) {
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (ci_fails && test_in_ci()) {
        fprintf(stderr, "FAIL: %s (required under CI=true)\n", why);
        exit(1);
    }
    fprintf(stderr, "SKIP: %s\n", why);
    exit(TEST_SKIP);
}

/* The path the default model should be at (readable or not). */
static const char *s_model_candidate(void) {
    static char buf[4096];
    const char *e = getenv("STRATA_MODEL");
    if (e && *e)
        return e;
    const char *dir = getenv("STRATA_MODEL_DIR");
    if (dir && *dir)
        snprintf(buf, sizeof buf, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else
        snprintf(buf, sizeof buf, "%s/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : "/root");
    return buf;
}

const char *test_model_path(void) {
    const char *p = s_model_candidate();
    return access(p, R_OK) == 0 ? p : NULL;
}

const char *test_model_path_or_skip(void) {
    const char *p = test_model_path();
    if (!p)
        test_skip(true, "model not found: %s (set STRATA_MODEL, or run scripts/fetch-model)",
                  s_model_candidate());
    return p;
}

TCase *test_tcase_model(Suite *s, const char *name) {
    TCase *tc = tcase_create(name);
    tcase_set_tags(tc, S_MODEL_TAG);
    suite_add_tcase(s, tc);
    s_has_model_cases = true;
    return tc;
}

int test_run_suite(int argc, char **argv, Suite *s, enum fork_status fork) {
    const char *include = NULL, *exclude = NULL; /* NULL: Check reads CK_*_TAGS */
    bool skipped = false;                        /* the model cases were left out */
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "--model") && strcmp(argv[1], "--no-model"))) {
        fprintf(stderr, "usage: %s [--model | --no-model]\n", argv[0]);
        return 1;
    }
    if (argc == 2 && !strcmp(argv[1], "--model")) {
        if (!s_has_model_cases) {
            fprintf(stderr, "%s: --model: this suite has no model cases\n", argv[0]);
            return 1;
        }
        test_model_path_or_skip();
        include = S_MODEL_TAG;
    } else if (argc == 2 || s_has_model_cases) {
        exclude = argc == 2 || !test_model_path() ? S_MODEL_TAG : NULL;
        if (argc < 2 && exclude) {
            if (test_in_ci())
                test_model_path_or_skip(); /* fails, saying what is missing */
            printf("model not found: %s; the model cases are skipped\n", s_model_candidate());
            skipped = true;
        }
    }
    SRunner *sr = srunner_create(s);
    if (fork != CK_FORK_GETENV)
        srunner_set_fork_status(sr, fork);
    srunner_run_tagged(sr, NULL, NULL, include, exclude, CK_NORMAL);
    int run = srunner_ntests_run(sr), failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (failed)
        return 1;
    if (run == 0) {
        fprintf(stderr, "%s: no test ran (CK_RUN_CASE or CK_*_TAGS select none?)\n", argv[0]);
        return 1;
    }
    return skipped ? TEST_SKIP : 0;
}

/* ---- random numbers */

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

/* ---- synthetic model */

int test_synth_model(const char *path, const test_synth_t *cfg, char *err, size_t errlen) {
    return model_synth_write(path, cfg, err, errlen);
}

int test_recv_wait(zsock_t *s, msg_any_t *m, int ms) {
    msg_err_t e;
    for (int i = 0; i < ms; i++) {
        int rc = actor_recv(s, m, &e);
        if (rc != -EAGAIN)
            return rc;
        zclock_sleep(1);
    }
    return -ETIMEDOUT;
}

int test_synth_open(test_synth_fixture_t *f, const char *tag, const test_synth_t *cfg) {
    char err[256];
    memset(f, 0, sizeof *f);
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(f->dir, sizeof f->dir, "%s/strata-test-%s-XXXXXX", tmp, tag);
    if (!mkdtemp(f->dir)) {
        fprintf(stderr, "mkdtemp %s: %s\n", f->dir, strerror(errno));
        f->dir[0] = 0;
        return -1;
    }
    snprintf(f->path, sizeof f->path, "%s/synth.gguf", f->dir);
    if (test_synth_model(f->path, cfg, err, sizeof err) ||
        !(f->model = model_load(f->path, err, sizeof err)) ||
        !(f->tok = model_tokenizer_new(model_file(f->model), err, sizeof err))) {
        fprintf(stderr, "%s\n", err);
        test_synth_close(f);
        return -1;
    }
    return 0;
}

void test_synth_close(test_synth_fixture_t *f) {
    model_tokenizer_destroy(&f->tok);
    model_destroy(&f->model);
    if (f->path[0])
        unlink(f->path);
    if (f->dir[0])
        rmdir(f->dir);
    f->path[0] = f->dir[0] = 0;
}

double test_kl(const float *p, const float *q, int n) {
    double mp = -INFINITY, mq = -INFINITY, sp = 0, sq = 0, kl = 0;
    for (int i = 0; i < n; i++) {
        mp = fmax(mp, p[i]);
        mq = fmax(mq, q[i]);
    }
    for (int i = 0; i < n; i++) {
        sp += exp(p[i] - mp);
        sq += exp(q[i] - mq);
    }
    for (int i = 0; i < n; i++) {
        double lp = p[i] - mp - log(sp), lq = q[i] - mq - log(sq);
        kl += exp(lp) * (lp - lq);
    }
    return kl;
}

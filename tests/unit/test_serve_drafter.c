/* test_serve_drafter.c - serve/serve_drafter: the n-gram and model drafters behind one
 * interface (propose, accept, reset).  The n-gram drafter proposes what followed the
 * history's tail before and holds no state; the model drafter proposes the model's
 * greedy continuation (checked against a token-at-a-time greedy decode from scratch),
 * keeps the KV of what it has seen, rolls it back when drafts are rejected (accept) and
 * forgets a request on reset.  Runs on a small synthetic model (test_synth_model). */
#include "serve_drafter.h"

#include "kern_kv.h"
#include "model.h"
#include "model_spec.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char DIR_[256], MODEL[300];

/* Counters the drafter reports, by name (serve_drafter_count_fn). */
typedef struct {
    int64_t prefill, states, evicted;
} s_counts_t;

static void s_count(void *arg, const char *name, int64_t value, bool set) {
    s_counts_t *c = arg;
    if (!strcmp(name, "tokens.prefill"))
        c->prefill += value;
    else if (!strcmp(name, "states"))
        c->states = set ? value : c->states + value;
    else if (!strcmp(name, "states.evicted"))
        c->evicted += value;
}

/* The model's greedy continuation of hist (k tokens), one position per forward pass
 * from an empty cache: the oracle of the model drafter. */
static void s_greedy(const int32_t *hist, int n, int k, int32_t *out) {
    char err[256];
    model_t *m = model_load(MODEL, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    const model_config_t *cfg = model_config(m);
    kern_kv_shape_t shape = model_kv_shape(cfg, 16);
    kern_kv_pool_t kv;
    ck_assert_int_eq(kern_kv_pool_init(&kv, &shape, KERN_F32, 16), 0);
    int32_t blocks[16];
    for (int i = 0; i < 16; i++)
        blocks[i] = i;
    model_ctx_t *ctx = model_ctx_new(m, 1, 256, 1, NULL);
    float *logits = malloc((size_t)cfg->n_vocab * sizeof *logits);
    ck_assert(ctx && logits);
    int32_t seq[256], zero = 0;
    memcpy(seq, hist, (size_t)n * sizeof *seq);
    for (int p = 0; p < n + k - 1; p++) {
        bool want = p >= n - 1;
        model_seq_view_t sv = {blocks, 16, NULL, 0, 0};
        model_batch_t b = {1, &seq[p], &p, &zero, &want, 1, &sv, NULL};
        ck_assert_int_eq(model_ctx_forward(ctx, &b, &kv, logits), want ? 1 : 0);
        if (want)
            seq[p + 1] = out[p + 1 - n] = model_argmax(logits, cfg->n_vocab);
    }
    free(logits);
    model_ctx_destroy(&ctx);
    kern_kv_pool_free(&kv);
    model_destroy(&m);
}

START_TEST(ngram_proposes_what_followed) {
    char err[256];
    serve_drafter_config_t cfg = {.mode = SERVE_DRAFTER_NGRAM};
    serve_drafter_t *d = serve_drafter_new(&cfg, err, sizeof err);
    ck_assert_msg(d != NULL, "%s", err);
    ck_assert_str_eq(serve_drafter_name(d), "ngram");
    /* "1 2" occurred at the start, followed by 3 4 1 */
    const int32_t hist[] = {1, 2, 3, 4, 1, 2};
    int32_t out[3];
    serve_drafter_job_t j = {0, 7, hist, 6, 3, out, 0, 0};
    ck_assert_int_eq(serve_drafter_propose(d, &j, 1), 0);
    ck_assert_int_eq(j.n_out, 3);
    ck_assert_int_eq(j.by, SERVE_DRAFTER_NGRAM);
    ck_assert_int_eq(out[0], 3);
    ck_assert_int_eq(out[1], 4);
    ck_assert_int_eq(out[2], 1);
    /* no state: accept and reset change nothing */
    serve_drafter_accept(d, 0, 7, 1);
    serve_drafter_reset(d, 0, 7);
    ck_assert_int_eq(serve_drafter_states(d), 0);
    ck_assert_int_eq(serve_drafter_propose(d, &j, 1), 0);
    ck_assert_int_eq(j.n_out, 3);
    /* nothing recurs: no proposals */
    const int32_t fresh[] = {1, 2, 3, 4};
    serve_drafter_job_t f = {0, 8, fresh, 4, 3, out, 0, 0};
    ck_assert_int_eq(serve_drafter_propose(d, &f, 1), 0);
    ck_assert_int_eq(f.n_out, 0);
    /* bad arguments: k out of range, a repeated (worker, rid) */
    serve_drafter_job_t bad = {0, 9, hist, 6, MODEL_SPEC_MAX_K + 1, out, 0, 0};
    ck_assert_int_eq(serve_drafter_propose(d, &bad, 1), -EINVAL);
    serve_drafter_job_t two[2] = {{0, 9, hist, 6, 2, out, 0, 0}, {0, 9, hist, 6, 2, out, 0, 0}};
    ck_assert_int_eq(serve_drafter_propose(d, two, 2), -EINVAL);
    serve_drafter_destroy(&d);
    serve_drafter_destroy(&d); /* safe twice */
    ck_assert_ptr_null(d);
}
END_TEST

START_TEST(model_proposes_greedy_and_rolls_back) {
    char err[256];
    s_counts_t c = {0};
    serve_drafter_config_t cfg = {.mode = SERVE_DRAFTER_MODEL,
                                  .draft_model = MODEL,
                                  .target_model = MODEL,
                                  .count = s_count,
                                  .count_arg = &c};
    serve_drafter_t *d = serve_drafter_new(&cfg, err, sizeof err);
    ck_assert_msg(d != NULL, "%s", err);
    ck_assert_str_eq(serve_drafter_name(d), "model");
    int32_t hist[64] = {1, 5, 9, 3, 7, 11, 4, 8, 20, 6};
    int n = 10, k = 4;
    int32_t out[MODEL_SPEC_MAX_K], want[MODEL_SPEC_MAX_K];
    serve_drafter_job_t j = {0, 42, hist, n, k, out, 0, 0};
    ck_assert_int_eq(serve_drafter_propose(d, &j, 1), 0);
    ck_assert_int_eq(j.n_out, k);
    ck_assert_int_eq(j.by, SERVE_DRAFTER_MODEL);
    s_greedy(hist, n, k, want);
    for (int i = 0; i < k; i++)
        ck_assert_int_eq(out[i], want[i]);
    ck_assert_int_eq(c.prefill, n); /* the whole history, once */
    ck_assert_int_eq(serve_drafter_states(d), 1);
    ck_assert_int_eq(c.states, 1);
    /* the history and all drafts but the last have KV */
    ck_assert_int_eq(serve_drafter_cached(d, 0, 42), n + k - 1);

    /* the target accepts one draft and samples a token of its own (not draft 1): the
     * drafter keeps the history and draft 0, and prefills only the new token */
    serve_drafter_accept(d, 0, 42, 1);
    ck_assert_int_eq(serve_drafter_cached(d, 0, 42), n + 1);
    hist[n] = out[0];
    hist[n + 1] = out[1] == 2 ? 3 : 2;
    n += 2;
    int64_t before = c.prefill;
    j = (serve_drafter_job_t){0, 42, hist, n, k, out, 0, 0};
    ck_assert_int_eq(serve_drafter_propose(d, &j, 1), 0);
    ck_assert_int_eq(c.prefill - before, 1);
    s_greedy(hist, n, k, want);
    for (int i = 0; i < k; i++)
        ck_assert_int_eq(out[i], want[i]);

    /* reset: the state and its KV go; the next propose starts from scratch */
    serve_drafter_reset(d, 0, 42);
    ck_assert_int_eq(serve_drafter_states(d), 0);
    ck_assert_int_eq(c.states, 0);
    ck_assert_int_eq(serve_drafter_cached(d, 0, 42), 0);
    before = c.prefill;
    ck_assert_int_eq(serve_drafter_propose(d, &j, 1), 0);
    ck_assert_int_eq(c.prefill - before, n);
    for (int i = 0; i < k; i++)
        ck_assert_int_eq(out[i], want[i]);
    /* a token out of the vocabulary is refused */
    hist[0] = 1 << 20;
    ck_assert_int_eq(serve_drafter_propose(d, &j, 1), -EINVAL);
    serve_drafter_destroy(&d);
}
END_TEST

int main(int argc, char **argv) {
    char err[512];
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(DIR_, sizeof DIR_, "%s/strata-test-drafter-XXXXXX", tmp);
    if (!mkdtemp(DIR_)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(MODEL, sizeof MODEL, "%s/model.gguf", DIR_);
    test_synth_t sc = {.seed = 5};
    if (test_synth_model(MODEL, &sc, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        rmdir(DIR_);
        return 1;
    }
    Suite *s = suite_create("serve_drafter");
    TCase *tc = tcase_create("drafter");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, ngram_proposes_what_followed);
    tcase_add_test(tc, model_proposes_greedy_and_rolls_back);
    suite_add_tcase(s, tc);
    int rc = test_run_suite(argc, argv, s, CK_NOFORK);
    unlink(MODEL);
    rmdir(DIR_);
    return rc;
}

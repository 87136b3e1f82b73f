/* test_sampler_penalties.c - OpenAI's logit_bias, presence_penalty and frequency_penalty in
 * the sampler: the adjusted logits against the formula written out here, counted over the
 * completion only (history from gen_start), a bias of -100 that bans a token and one of
 * +100 that forces it (greedy and sampled), and a resumed generation that continues as the
 * uninterrupted one. */
#include "model_sampler.h"
#include "test_util.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NV 512

static void fill(float *l, uint64_t seed) {
    uint64_t s = seed;
    for (int i = 0; i < NV; i++)
        l[i] = test_rand_f32(&s, -6, 6);
}

/* OpenAI's definition, written out: logit[t] += bias[t]; then
 * logit[t] -= frequency * count[t] + presence * (count[t] > 0), count over the
 * completion hist[gen_start .. n). */
static void reference(float *l, const model_sampler_params_t *p, const int32_t *hist, int n) {
    for (int i = 0; i < p->n_bias; i++)
        l[p->bias[i].token] += p->bias[i].bias;
    for (int t = 0; t < NV; t++) {
        int count = 0;
        for (int i = p->gen_start; i < n; i++)
            count += hist[i] == t;
        if (count) {
            float f = p->frequency_penalty * (float)count;
            l[t] = l[t] - (f + p->presence_penalty);
        }
    }
}

START_TEST(counts_the_completion_only) {
    model_sampler_t *s = model_sampler_new(NV);
    model_sampler_params_t p = model_sampler_defaults();
    p.temperature = 0;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 1.25f;
    /* prompt: 7 7 7 9; completion: 3 3 3 9 4 */
    int32_t hist[] = {7, 7, 7, 9, 3, 3, 3, 9, 4};
    p.gen_start = 4;
    float l[NV], want[NV];
    fill(l, 1);
    memcpy(want, l, sizeof l);
    reference(want, &p, hist, 9);
    model_sampler_sample(s, &p, l, hist, 9, 9);
    ck_assert_mem_eq(l, want, sizeof l);
    /* spelled out for three tokens */
    float o[NV];
    fill(o, 1);
    ck_assert_float_eq(l[3], o[3] - (3 * 1.25f + 0.5f));
    ck_assert_float_eq(l[9], o[9] - (1.25f + 0.5f)); /* once in the completion */
    ck_assert_float_eq(l[7], o[7]);                  /* the prompt's only */
    /* negative penalties encourage repetition; the sampler keeps no state between calls */
    p.presence_penalty = -2;
    p.frequency_penalty = -2;
    fill(l, 1);
    memcpy(want, l, sizeof l);
    reference(want, &p, hist, 9);
    model_sampler_sample(s, &p, l, hist, 9, 9);
    ck_assert_mem_eq(l, want, sizeof l);
    /* random histories against the formula, greedy choice = argmax of the formula */
    uint64_t st = 5;
    for (int it = 0; it < 200; it++) {
        int32_t h[64];
        int n = 1 + (int)(test_rand_u64(&st) % 64);
        for (int i = 0; i < n; i++)
            h[i] = (int32_t)(test_rand_u64(&st) % 16); /* many repeats */
        p.gen_start = (int)(test_rand_u64(&st) % (uint64_t)n);
        p.presence_penalty = test_rand_f32(&st, -2, 2);
        p.frequency_penalty = test_rand_f32(&st, -2, 2);
        fill(l, 100 + it);
        for (int t = 0; t < 16; t++)
            l[t] += 3; /* the repeated tokens are the contenders */
        memcpy(want, l, sizeof l);
        reference(want, &p, h, n);
        ck_assert_int_eq(model_sampler_sample(s, &p, l, h, n, n), model_argmax(want, NV));
        ck_assert_mem_eq(l, want, sizeof l);
    }
    model_sampler_destroy(&s);
}
END_TEST

START_TEST(bias_bans_and_forces) {
    model_sampler_t *s = model_sampler_new(NV);
    model_sampler_params_t p = model_sampler_defaults();
    float l[NV], c[NV];
    fill(l, 2);
    int32_t top = model_argmax(l, NV);
    /* -100 on the argmax: never chosen, greedy or sampled */
    model_logit_bias_t ban = {top, -100};
    p.bias = &ban;
    p.n_bias = 1;
    p.temperature = 0;
    memcpy(c, l, sizeof l);
    ck_assert_int_ne(model_sampler_sample(s, &p, c, NULL, 0, 0), top);
    ck_assert_float_eq(c[top], l[top] - 100);
    p.temperature = 1;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    for (int pos = 0; pos < 500; pos++) {
        memcpy(c, l, sizeof l);
        ck_assert_int_ne(model_sampler_sample(s, &p, c, NULL, 0, pos), top);
    }
    /* +100 on the least likely token: always chosen */
    int32_t low = 0;
    for (int i = 1; i < NV; i++)
        if (l[i] < l[low])
            low = i;
    model_logit_bias_t force[] = {{top, -3}, {low, 100}};
    p.bias = force;
    p.n_bias = 2;
    for (int pos = 0; pos < 200; pos++) {
        p.temperature = pos % 2 ? 1.0f : 0.0f;
        memcpy(c, l, sizeof l);
        ck_assert_int_eq(model_sampler_sample(s, &p, c, NULL, 0, pos), low);
    }
    /* the distribution is the biased one too */
    int32_t ids[NV];
    float probs[NV];
    p.temperature = 1;
    memcpy(c, l, sizeof l);
    int m = model_sampler_dist(s, &p, c, NULL, 0, ids, probs);
    ck_assert_int_ge(m, 1);
    ck_assert_int_eq(ids[0], low);
    ck_assert_float_gt(probs[0], 0.999f);
    /* an id past the vocabulary is skipped (the worker refuses it before) */
    model_logit_bias_t far = {NV + 5, 50};
    p.bias = &far;
    p.n_bias = 1;
    p.temperature = 0;
    memcpy(c, l, sizeof l);
    ck_assert_int_eq(model_sampler_sample(s, &p, c, NULL, 0, 0), top);
    model_sampler_destroy(&s);
}
END_TEST

/* A generation with penalties, interrupted after k tokens and resumed from its tokens
 * (as another worker does after a crash) continues with the same tokens: the counts are
 * a function of the completion, which travels with the request. */
START_TEST(resume_continues_the_same) {
    model_sampler_t *s = model_sampler_new(NV);
    model_sampler_params_t p = model_sampler_defaults();
    p.temperature = 0.9f;
    p.seed = 42;
    p.presence_penalty = 0.8f;
    p.frequency_penalty = 0.6f;
    model_logit_bias_t b[] = {{17, 4}, {18, -100}};
    p.bias = b;
    p.n_bias = 2;
    enum { PROMPT = 5, GEN = 40 };
    int32_t full[PROMPT + GEN] = {1, 2, 3, 17, 17};
    p.gen_start = PROMPT;
    float l[NV];
    int repeats = 0;
    for (int i = 0; i < GEN; i++) {
        fill(l, 1000 + (uint64_t)i); /* the "model": logits a function of the position */
        for (int t = 0; t < 8; t++)
            l[t] += 4;
        full[PROMPT + i] = model_sampler_sample(s, &p, l, full, PROMPT + i, PROMPT + i);
        ck_assert_int_ne(full[PROMPT + i], 18);
    }
    for (int i = PROMPT; i < PROMPT + GEN; i++)
        for (int j = PROMPT; j < i; j++)
            repeats += full[i] == full[j];
    int32_t resumed[PROMPT + GEN];
    memcpy(resumed, full, (PROMPT + 12) * sizeof *full); /* prompt + 12 carried tokens */
    for (int i = 12; i < GEN; i++) {
        fill(l, 1000 + (uint64_t)i);
        for (int t = 0; t < 8; t++)
            l[t] += 4;
        resumed[PROMPT + i] = model_sampler_sample(s, &p, l, resumed, PROMPT + i, PROMPT + i);
    }
    ck_assert_mem_eq(resumed, full, sizeof full);
    /* and the frequency penalty did its work: without it, more repeats */
    model_sampler_params_t q = p;
    q.presence_penalty = q.frequency_penalty = 0;
    int32_t plain[PROMPT + GEN] = {1, 2, 3, 17, 17};
    int plain_repeats = 0;
    for (int i = 0; i < GEN; i++) {
        fill(l, 1000 + (uint64_t)i);
        for (int t = 0; t < 8; t++)
            l[t] += 4;
        plain[PROMPT + i] = model_sampler_sample(s, &q, l, plain, PROMPT + i, PROMPT + i);
    }
    for (int i = PROMPT; i < PROMPT + GEN; i++)
        for (int j = PROMPT; j < i; j++)
            plain_repeats += plain[i] == plain[j];
    ck_assert_int_lt(repeats, plain_repeats);
    model_sampler_destroy(&s);
}
END_TEST

START_TEST(ranges_are_checked) {
    model_sampler_params_t p = model_sampler_defaults();
    char err[128];
    ck_assert_int_eq(model_sampler_check(&p, err, sizeof err), 0);
    p.presence_penalty = 2.5f;
    ck_assert_int_ne(model_sampler_check(&p, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "presence_penalty"));
    p.presence_penalty = 0;
    p.frequency_penalty = -2.01f;
    ck_assert_int_ne(model_sampler_check(&p, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "frequency_penalty"));
    p.frequency_penalty = NAN;
    ck_assert_int_ne(model_sampler_check(&p, err, sizeof err), 0);
    p.frequency_penalty = 0;
    model_logit_bias_t b[] = {{3, 100}, {4, -100.5f}};
    p.bias = b;
    p.n_bias = 1;
    ck_assert_int_eq(model_sampler_check(&p, err, sizeof err), 0);
    p.n_bias = 2;
    ck_assert_int_ne(model_sampler_check(&p, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "logit_bias"));
    b[1] = (model_logit_bias_t){-1, 0};
    ck_assert_int_ne(model_sampler_check(&p, err, sizeof err), 0);
    p.n_bias = MODEL_MAX_LOGIT_BIAS + 1;
    ck_assert_int_ne(model_sampler_check(&p, err, sizeof err), 0);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("sampler_penalties");
    TCase *tc = tcase_create("penalties");
    tcase_add_test(tc, counts_the_completion_only);
    tcase_add_test(tc, bias_bans_and_forces);
    tcase_add_test(tc, resume_continues_the_same);
    tcase_add_test(tc, ranges_are_checked);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

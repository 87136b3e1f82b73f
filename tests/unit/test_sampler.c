/* test_sampler.c - the sampler and the stop-string filter. */
#include "model_sampler.h"
#include "msg_types.h"
#include "test_util.h"

#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define NV 1000

static void fill(float *l, uint64_t seed) {
    uint64_t s = seed;
    for (int i = 0; i < NV; i++)
        l[i] = test_rand_f32(&s, -5, 5);
}

START_TEST(greedy_is_argmax) {
    model_sampler_t *s = model_sampler_new(NV);
    float l[NV];
    fill(l, 1);
    l[123] = 50;
    model_sampler_params_t p = model_sampler_defaults();
    p.temperature = 0;
    ck_assert_int_eq(model_sampler_sample(s, &p, l, NULL, 0, 0), 123);
    /* top_k = 1 at any temperature is greedy too */
    fill(l, 2);
    int am = model_argmax(l, NV);
    p.temperature = 1.5f;
    p.top_k = 1;
    for (int pos = 0; pos < 20; pos++) {
        float c[NV];
        memcpy(c, l, sizeof c);
        ck_assert_int_eq(model_sampler_sample(s, &p, c, NULL, 0, pos), am);
    }
    model_sampler_destroy(&s);
    ck_assert_ptr_null(s);
    /* argmax: the first of equal maxima, at any position (also the tail past
     * the 8-wide main loop); NaN never wins */
    float t[13] = {1, 3, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    ck_assert_int_eq(model_argmax(t, 13), 1);
    t[12] = 7;
    t[11] = NAN;
    ck_assert_int_eq(model_argmax(t, 13), 12);
    ck_assert_int_eq(model_argmax(t, 3), 1);
}
END_TEST

START_TEST(seeded_per_position) {
    model_sampler_t *s = model_sampler_new(NV);
    model_sampler_params_t p = model_sampler_defaults();
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.temperature = 2;
    float l[NV], c[NV];
    fill(l, 3);
    int a[64], b[64], diff = 0;
    for (int pos = 0; pos < 64; pos++) {
        memcpy(c, l, sizeof c);
        a[pos] = model_sampler_sample(s, &p, c, NULL, 0, pos);
    }
    /* same seed and position: same draw, in any order */
    for (int pos = 63; pos >= 0; pos--) {
        memcpy(c, l, sizeof c);
        b[pos] = model_sampler_sample(s, &p, c, NULL, 0, pos);
    }
    for (int i = 0; i < 64; i++)
        ck_assert_int_eq(a[i], b[i]);
    p.seed = 99;
    for (int pos = 0; pos < 64; pos++) {
        memcpy(c, l, sizeof c);
        diff += model_sampler_sample(s, &p, c, NULL, 0, pos) != a[pos];
    }
    ck_assert_int_gt(diff, 32);
    model_sampler_destroy(&s);
}
END_TEST

/* With 3 candidates and known probabilities, the empirical frequencies of many
 * seeded draws match softmax(logits / T) (chi-square, 2 dof, p=0.001 cut). */
START_TEST(distribution_matches_softmax) {
    model_sampler_t *s = model_sampler_new(3);
    model_sampler_params_t p = model_sampler_defaults();
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.temperature = 0.7f;
    const float base[3] = {1.0f, 0.5f, -0.3f};
    double pr[3], z = 0;
    for (int i = 0; i < 3; i++)
        z += pr[i] = exp(base[i] / 0.7);
    int cnt[3] = {0};
    const int N = 20000;
    for (int pos = 0; pos < N; pos++) {
        float c[3] = {base[0], base[1], base[2]};
        cnt[model_sampler_sample(s, &p, c, NULL, 0, pos)]++;
    }
    double chi = 0;
    for (int i = 0; i < 3; i++) {
        double e = N * pr[i] / z;
        chi += (cnt[i] - e) * (cnt[i] - e) / e;
    }
    ck_assert_msg(chi < 13.8, "chi-square %.2f (counts %d %d %d)", chi, cnt[0], cnt[1], cnt[2]);
    model_sampler_destroy(&s);
}
END_TEST

START_TEST(top_p_min_p_cut) {
    model_sampler_t *s = model_sampler_new(4);
    model_sampler_params_t p = model_sampler_defaults();
    p.top_k = 0;
    p.temperature = 1;
    p.min_p = 0;
    p.top_p = 0.5f; /* token 0 alone has mass > 0.5 */
    for (int pos = 0; pos < 200; pos++) {
        float c[4] = {5, 3, 2, 1};
        ck_assert_int_eq(model_sampler_sample(s, &p, c, NULL, 0, pos), 0);
    }
    p.top_p = 1;
    p.min_p = 0.2f; /* e^-2 = 0.135 < 0.2: only token 0 survives */
    for (int pos = 0; pos < 200; pos++) {
        float c[4] = {5, 3, 2, 1};
        ck_assert_int_eq(model_sampler_sample(s, &p, c, NULL, 0, pos), 0);
    }
    model_sampler_destroy(&s);
}
END_TEST

START_TEST(repetition_penalty) {
    model_sampler_t *s = model_sampler_new(3);
    model_sampler_params_t p = model_sampler_defaults();
    p.temperature = 0;
    p.repeat_penalty = 2.0f;
    int32_t hist[] = {0, 0, 0};
    float c[3] = {4, 3, -1}; /* 4/2 = 2 < 3 */
    ck_assert_int_eq(model_sampler_sample(s, &p, c, hist, 3, 0), 1);
    ck_assert_float_eq(c[0], 2.0f); /* penalised once, not three times */
    char err[128];
    p.repeat_penalty = 0;
    ck_assert_int_ne(model_sampler_check(&p, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "repeat_penalty"));
    model_sampler_destroy(&s);
}
END_TEST

START_TEST(stop_strings_hold_back) {
    const char *stops[] = {"</end>", "STOP"};
    model_stopper_t st;
    ck_assert_int_eq(model_stopper_init(&st, stops, 2), 0);
    char out[128], all[512] = "";
    const char *pieces[] = {"Hello ", "wor", "ld </", "en", "d> never"};
    for (int i = 0; i < 5; i++) {
        model_stopper_push(&st, pieces[i], strlen(pieces[i]), out, sizeof out);
        strcat(all, out);
    }
    model_stopper_flush(&st, out, sizeof out);
    strcat(all, out);
    ck_assert(st.stopped);
    ck_assert_str_eq(all, "Hello world ");
    model_stopper_free(&st);

    /* a partial match that never completes is released at the end */
    ck_assert_int_eq(model_stopper_init(&st, stops, 2), 0);
    all[0] = 0;
    model_stopper_push(&st, "abc </e", 7, out, sizeof out);
    strcat(all, out);
    ck_assert_str_eq(all, "abc ");
    model_stopper_push(&st, "x", 1, out, sizeof out);
    strcat(all, out);
    model_stopper_flush(&st, out, sizeof out);
    strcat(all, out);
    ck_assert(!st.stopped);
    ck_assert_str_eq(all, "abc </ex");
    model_stopper_free(&st);

    const char *bad[] = {""};
    ck_assert_int_eq(model_stopper_init(&st, bad, 1), -22);
}
END_TEST

/* The protocol's defaults (msgs/, which knows nothing of model/) are the sampler's. */
START_TEST(wire_defaults_are_the_samplers) {
    model_sampler_params_t m = model_sampler_defaults();
    msg_sampling_t w = msg_sampling_defaults();
    ck_assert_float_eq(w.temperature, m.temperature);
    ck_assert_int_eq(w.top_k, m.top_k);
    ck_assert_float_eq(w.top_p, m.top_p);
    ck_assert_float_eq(w.min_p, m.min_p);
    ck_assert_float_eq(w.repeat_penalty, m.repeat_penalty);
    ck_assert_int_eq(w.repeat_last_n, m.repeat_last_n);
    ck_assert_uint_eq(w.seed, m.seed);
    ck_assert_float_eq(w.presence_penalty, m.presence_penalty);
    ck_assert_float_eq(w.frequency_penalty, m.frequency_penalty);
    ck_assert_int_eq(m.n_bias, 0); /* logit_bias travels beside msg_sampling_t */
    /* a new wire field must be added to both: the wire struct is the sampler's up to
     * the fields that are not on the wire (gen_start, bias) */
    ck_assert_uint_eq(sizeof w, offsetof(model_sampler_params_t, gen_start));
    ck_assert_uint_eq(sizeof(msg_logit_bias_t), sizeof(model_logit_bias_t));
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("sampler");
    tcase_add_test(tc, greedy_is_argmax);
    tcase_add_test(tc, seeded_per_position);
    tcase_add_test(tc, distribution_matches_softmax);
    tcase_add_test(tc, top_p_min_p_cut);
    tcase_add_test(tc, repetition_penalty);
    tcase_add_test(tc, stop_strings_hold_back);
    tcase_add_test(tc, wire_defaults_are_the_samplers);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

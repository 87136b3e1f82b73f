/* test_serve_choices.c - serve/serve_choices: OpenAI's n fanned out as n generates (ids
 * "<id>.<i>", seeds seed + i) and their ends merged: each event finds its choice, each choice
 * keeps its own finish_reason, the usage counts the prompt once and sums the completions. */
#include "serve_choices.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

START_TEST(new_limits) {
    serve_choices_t *c = serve_choices_new("chatcmpl-1", 0);
    ck_assert_ptr_null(c);
    ck_assert_ptr_null(serve_choices_new("chatcmpl-1", SERVE_CHOICES_MAX + 1));
    ck_assert_ptr_null(serve_choices_new("", 2));
    char long_id[MSG_MAX_ID_BYTES + 1];
    memset(long_id, 'a', MSG_MAX_ID_BYTES - 2);
    long_id[MSG_MAX_ID_BYTES - 2] = 0; /* no room for ".15" */
    ck_assert_ptr_null(serve_choices_new(long_id, 2));
    long_id[MSG_MAX_ID_BYTES - 3] = 0;
    c = serve_choices_new(long_id, SERVE_CHOICES_MAX);
    ck_assert_ptr_nonnull(c);
    serve_choices_destroy(&c);
    ck_assert_ptr_null(c);
    serve_choices_destroy(&c); /* safe twice */
}
END_TEST

/* Choice i is the request's generate with its own id and seed + i; the rest is shared. */
START_TEST(generates_ids_and_seeds) {
    serve_choices_t *c = serve_choices_new("cmpl-ab", 3);
    msg_generate_t g, out;
    msg_generate_init(&g);
    strcpy(g.id, "cmpl-ab");
    char prompt[] = "Once upon a time";
    g.prompt = prompt;
    g.prompt_len = strlen(prompt);
    g.max_tokens = 17;
    g.sampling.seed = UINT64_MAX - 1; /* the last choice wraps */
    g.has_seed = false;               /* the gateway's own draw */
    const uint64_t want[3] = {UINT64_MAX - 1, UINT64_MAX, 0};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(serve_choices_generate(c, i, &g, &out), 0);
        char id[16];
        snprintf(id, sizeof id, "cmpl-ab.%d", i);
        ck_assert_str_eq(out.id, id);
        ck_assert_uint_eq(out.sampling.seed, want[i]);
        ck_assert(out.has_seed);
        ck_assert_ptr_eq(out.prompt, prompt); /* borrowed */
        ck_assert_int_eq(out.max_tokens, 17);
        ck_assert_int_eq(serve_choices_index(c, out.id), i); /* its events find it */
    }
    ck_assert_int_eq(serve_choices_generate(c, 3, &g, &out), -EINVAL);
    ck_assert_int_eq(serve_choices_generate(c, -1, &g, &out), -EINVAL);
    ck_assert_str_eq(g.id, "cmpl-ab"); /* untouched */
    serve_choices_destroy(&c);
}
END_TEST

/* An event id that is not "<id>.<i>" with i a choice belongs to none. */
START_TEST(index_of_event_ids) {
    serve_choices_t *c = serve_choices_new("chatcmpl-9", 12);
    ck_assert_int_eq(serve_choices_index(c, "chatcmpl-9.0"), 0);
    ck_assert_int_eq(serve_choices_index(c, "chatcmpl-9.11"), 11);
    const char *none[] = {"chatcmpl-9",
                          "chatcmpl-9.",
                          "chatcmpl-9.12",
                          "chatcmpl-9.01",
                          "chatcmpl-9.1x",
                          "chatcmpl-90.1",
                          "chatcmpl-.1",
                          "chatcmpl-9.-1",
                          "chatcmpl-9.1.1",
                          "chatcmpl-9.0001",
                          ""};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        ck_assert_msg(serve_choices_index(c, none[i]) == -1, "%s", none[i]);
    serve_choices_destroy(&c);
}
END_TEST

/* The ends, in any order: each choice's own finish, once; the usage merged. */
START_TEST(done_and_usage) {
    serve_choices_t *c = serve_choices_new("chatcmpl-7", 3);
    msg_usage_t u;
    serve_choices_usage(c, &u);
    ck_assert_int_eq(u.prompt_tokens + u.completion_tokens + u.cached_tokens, 0);
    const msg_usage_t u2 = {.prompt_tokens = 30, .completion_tokens = 5, .cached_tokens = 16};
    const msg_usage_t u0 = {.prompt_tokens = 30,
                            .completion_tokens = 20,
                            .cached_tokens = 0,
                            .draft_proposed = 4,
                            .draft_accepted = 3};
    const msg_usage_t u1 = {.prompt_tokens = 30, .completion_tokens = 20, .cached_tokens = 16};
    ck_assert_int_eq(serve_choices_done(c, 2, MSG_FINISH_EOS, &u2), 0);
    ck_assert(!serve_choices_all_done(c));
    ck_assert(serve_choices_ended(c, 2) && !serve_choices_ended(c, 0));
    ck_assert_int_eq(serve_choices_finish(c, 0), MSG_FINISH_NONE); /* still running */
    ck_assert_int_eq(serve_choices_done(c, 0, MSG_FINISH_LENGTH, &u0), 0);
    ck_assert_int_eq(serve_choices_done(c, 0, MSG_FINISH_EOS, &u0), -EALREADY); /* once */
    ck_assert_int_eq(serve_choices_done(c, 3, MSG_FINISH_EOS, &u0), -EINVAL);
    ck_assert_int_eq(serve_choices_done(c, 1, MSG_FINISH_NONE, &u1), -EINVAL);
    serve_choices_usage(c, &u); /* so far: choices 0 and 2 */
    ck_assert_int_eq(u.prompt_tokens, 30);
    ck_assert_int_eq(u.completion_tokens, 25);
    ck_assert_int_eq(serve_choices_done(c, 1, MSG_FINISH_STOP, &u1), 0);
    ck_assert(serve_choices_all_done(c));
    ck_assert_int_eq(serve_choices_finish(c, 0), MSG_FINISH_LENGTH);
    ck_assert_int_eq(serve_choices_finish(c, 1), MSG_FINISH_STOP);
    ck_assert_int_eq(serve_choices_finish(c, 2), MSG_FINISH_EOS);
    serve_choices_usage(c, &u);
    ck_assert_int_eq(u.prompt_tokens, 30);     /* once, not 90 */
    ck_assert_int_eq(u.completion_tokens, 45); /* 20 + 20 + 5 */
    ck_assert_int_eq(u.cached_tokens, 0);      /* choice 0 computed the prompt */
    ck_assert_int_eq(u.draft_proposed, 4);
    ck_assert_int_eq(u.draft_accepted, 3);
    serve_choices_destroy(&c);
}
END_TEST

/* n = 1 is the plain request: one choice, "<id>.0", the seed unchanged. */
START_TEST(one_choice) {
    serve_choices_t *c = serve_choices_new("cmpl-1", 1);
    msg_generate_t g, out;
    msg_generate_init(&g);
    g.sampling.seed = 42;
    ck_assert_int_eq(serve_choices_generate(c, 0, &g, &out), 0);
    ck_assert_uint_eq(out.sampling.seed, 42);
    ck_assert_int_eq(serve_choices_n(c), 1);
    const msg_usage_t u = {.prompt_tokens = 3, .completion_tokens = 4, .cached_tokens = 2};
    ck_assert_int_eq(serve_choices_done(c, 0, MSG_FINISH_LENGTH, &u), 0);
    msg_usage_t m;
    serve_choices_usage(c, &m);
    ck_assert_mem_eq(&m, &u, sizeof m);
    serve_choices_destroy(&c);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_choices");
    TCase *tc = tcase_create("serve_choices");
    tcase_add_test(tc, new_limits);
    tcase_add_test(tc, generates_ids_and_seeds);
    tcase_add_test(tc, index_of_event_ids);
    tcase_add_test(tc, done_and_usage);
    tcase_add_test(tc, one_choice);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)

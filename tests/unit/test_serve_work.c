/* test_serve_work.c - serve/serve_work: how a work_request becomes the worker's request.
 * Token ids, logit_bias and sampling are checked first (a refusal says why, in the
 * client's words); with fit_context max_tokens is lowered to what the context leaves, and
 * a prompt that leaves nothing is context_length_exceeded.  A resumed request carries the
 * completion tokens already delivered: they are replayed through its grammar at intake
 * and through its detokenizer and stop strings (serve_work_replay), so that it either
 * goes on exactly where the client's text ends or ends at once (its final event was
 * lost).  A request waits for promotions from the lower tiers only when a whole block of
 * its prompt could come from them.  The vocabulary is a small synthetic model's ("t3",
 * "t4", ..., "</s>" = 2 ending the text). */
#include "serve_work.h"

#include "model.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static test_synth_fixture_t FIX; /* the synthetic model, opened by main */
static model_t *MODEL;
static model_tokenizer_t *TOK;

/* A worker of a 64-token vocabulary, 100 positions per request. */
static serve_work_config_t s_cfg(serve_grammars_t *gs) {
    return (serve_work_config_t){.tok = TOK,
                                 .n_vocab = 64,
                                 .context = 100,
                                 .max_ctx = 101,
                                 .d_model = 64,
                                 .spec_k = 0,
                                 .spec_k_max = 8,
                                 .grammars = gs};
}

/* A request of n tokens 3, 4, 5, ... of which the last n_gen are carried completion
 * tokens. */
static msg_work_request_t s_request(int32_t *tokens, int n, int n_gen, int max_tokens) {
    msg_work_request_t q;
    msg_work_request_init(&q);
    for (int i = 0; i < n; i++)
        tokens[i] = 3 + i;
    q.rid = 77;
    q.tokens = tokens;
    q.n_tokens = n;
    q.n_gen = n_gen;
    q.max_tokens = max_tokens;
    q.sampling = msg_sampling_defaults();
    q.t_arrival_us = 1000;
    return q;
}

START_TEST(taken_in) {
    int32_t tokens[8];
    msg_work_request_t q = s_request(tokens, 8, 0, 20);
    msg_logit_bias_t bias[1] = {{.token = 9, .bias = -5}};
    q.logit_bias = bias;
    q.n_logit_bias = 1;
    q.pin_tokens = 50; /* more than the prompt: the prompt */
    q.top_logprobs = 2;
    serve_work_config_t cfg = s_cfg(NULL);
    serve_work_t w = {0};
    serve_work_refusal_t no;
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), 0);
    ck_assert_uint_eq(w.seq.rid, 77);
    ck_assert_int_eq(w.seq.n_prompt, 8);
    ck_assert_int_eq(w.seq.n_hist, 8);
    ck_assert_int_eq(w.seq.max_tokens, 20);
    ck_assert_int_eq(w.seq.hist[7], 10);
    ck_assert_int_eq(w.seq.pin_tokens, 8);
    ck_assert(w.seq.logprobs); /* top_logprobs implies logprobs */
    ck_assert_int_eq(w.top_logprobs, 2);
    ck_assert_int_eq(w.seq.sp.gen_start, 8);
    ck_assert_ptr_ne(w.seq.sp.bias, bias); /* its own copy: q is gone after intake */
    ck_assert_int_eq(w.seq.sp.bias[0].token, 9);
    ck_assert_uint_eq(w.t_arrival, 1000);
    serve_work_clear(&w);
    serve_work_clear(&w); /* safe twice */
}
END_TEST

START_TEST(refused_with_reasons) {
    int32_t tokens[8];
    serve_work_config_t cfg = s_cfg(NULL);
    serve_work_t w = {0};
    serve_work_refusal_t no;
    msg_work_request_t q = s_request(tokens, 8, 0, 20);
    tokens[2] = 64; /* past the vocabulary */
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), -EINVAL);
    ck_assert_int_eq(no.code, MSG_CODE_BAD_REQUEST);
    ck_assert_str_eq(no.why, "token id out of the vocabulary");

    q = s_request(tokens, 8, 0, 20);
    msg_logit_bias_t bias[1] = {{.token = 70, .bias = 1}};
    q.logit_bias = bias;
    q.n_logit_bias = 1;
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), -EINVAL);
    ck_assert_str_eq(no.why, "logit_bias: token 70 is not in the vocabulary (0..63)");

    q = s_request(tokens, 8, 0, 20);
    q.sampling.temperature = -1;
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), -EINVAL);
    ck_assert_str_eq(no.why, "temperature must be in [0, 100]");

    q = s_request(tokens, 8, 0, 20);
    q.n_stop = 1; /* an empty stop string */
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), -EINVAL);
    ck_assert_str_eq(no.why, "invalid stop strings");
    ck_assert_ptr_null(w.seq.hist); /* a refused request holds nothing */
}
END_TEST

START_TEST(fit_context) {
    int32_t tokens[8];
    serve_work_config_t cfg = s_cfg(NULL);
    cfg.context = 20;
    serve_work_t w = {0};
    serve_work_refusal_t no;
    msg_work_request_t q = s_request(tokens, 8, 0, 50);
    q.fit_context = true; /* 50 is a ceiling: 12 positions are left */
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), 0);
    ck_assert_int_eq(w.seq.max_tokens, 12);
    serve_work_clear(&w);

    cfg.context = 8; /* the prompt fills the context */
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), -EINVAL);
    ck_assert_int_eq(no.code, MSG_CODE_CONTEXT);
    ck_assert_str_eq(no.why, "This model's maximum context length is 8 tokens. However, your "
                             "messages resulted in 8 tokens. Please reduce the length of the "
                             "messages.");
    /* the words of a request that does not fit with its max_tokens (refused at admission) */
    char why[320];
    serve_work_context_error(why, sizeof why, 100, 80, 30);
    ck_assert_str_eq(why, "This model's maximum context length is 100 tokens. However, you "
                          "requested 110 tokens (80 in the messages, 30 in the completion). "
                          "Please reduce the length of the messages or completion.");
}
END_TEST

/* The text the next token (id) adds after w's replayed history. */
static void s_next_text(serve_work_t *w, int32_t id, char *out, size_t cap) {
    char piece[256];
    int n = model_detok_push(&w->detok, id, piece, sizeof piece);
    size_t m = model_stopper_push(&w->stopper, piece, (size_t)(n > 0 ? n : 0), out, cap - 1);
    out[m] = 0;
}

START_TEST(resume_replays_carried_tokens) {
    int32_t tokens[8]; /* prompt t3 t4 t5 t6 t7, then t8 t9 t10 delivered before */
    serve_work_config_t cfg = s_cfg(NULL);
    serve_work_t w = {0};
    serve_work_refusal_t no;
    msg_work_request_t q = s_request(tokens, 8, 3, 20);
    snprintf(q.stop[0], sizeof q.stop[0], "t10t11");
    q.n_stop = 1;
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), 0);
    ck_assert_int_eq(w.seq.n_carried, 3);
    ck_assert_int_eq(w.seq.sp.gen_start, 5); /* carried tokens are completion tokens */
    ck_assert_int_eq(serve_step_done(&w.seq), 3);
    ck_assert_int_eq(serve_work_replay(&w), 0); /* goes on */
    char text[64];
    s_next_text(&w, 11, text, sizeof text); /* "t10" was held back: t11 completes the stop */
    ck_assert(w.stopper.stopped);
    serve_work_clear(&w);

    q = s_request(tokens, 8, 3, 20);
    snprintf(q.stop[0], sizeof q.stop[0], "t9t10"); /* the carried tokens hold the stop */
    q.n_stop = 1;
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), 0);
    ck_assert_int_eq(serve_work_replay(&w), MSG_FINISH_STOP);
    serve_work_clear(&w);

    q = s_request(tokens, 8, 3, 3); /* all of max_tokens delivered */
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), 0);
    ck_assert_int_eq(serve_work_replay(&w), MSG_FINISH_LENGTH);
    serve_work_clear(&w);
}
END_TEST

START_TEST(resume_under_a_grammar) {
    serve_grammars_t *gs = serve_grammars_new(TOK, 64, 4);
    serve_work_config_t cfg = s_cfg(gs);
    serve_work_t w = {0};
    serve_work_refusal_t no;
    int32_t tokens[8];
    /* carried t8 t9 t10 follow the grammar and complete it: the request is over */
    msg_work_request_t q = s_request(tokens, 8, 3, 20);
    q.grammar = "root ::= \"t8\" \"t9\" \"t10\"";
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), 0);
    ck_assert_ptr_nonnull(w.seq.grammar);
    ck_assert_int_eq(serve_work_replay(&w), MSG_FINISH_EOS);
    serve_work_clear(&w);
    /* two of them, the grammar wants a third: it goes on */
    q = s_request(tokens, 7, 2, 20);
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), 0);
    ck_assert_int_eq(serve_work_replay(&w), 0);
    serve_work_clear(&w);
    /* carried tokens the grammar refuses */
    q = s_request(tokens, 8, 3, 20);
    q.grammar = "root ::= \"t8\" \"t3\"";
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), -EINVAL);
    ck_assert(no.grammar);
    ck_assert_str_eq(no.why, "completion token 1 does not follow the grammar");
    /* a grammar that does not compile */
    q.grammar = "root ::= (";
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), -EINVAL);
    ck_assert(no.grammar);
    ck_assert_int_eq(serve_grammars_stats(gs).compiled, 2); /* each text once */
    serve_grammars_destroy(&gs);
}
END_TEST

START_TEST(park_or_admit) {
    /* blocks of 16: a prompt waits only when a whole block past what T0 holds could come
     * from T1/T2 (its last position is computed anyway, for its logits) */
    ck_assert(serve_work_park_wanted(40, 0, 16));   /* blocks 0 and 1 may be below */
    ck_assert(serve_work_park_wanted(40, 16, 16));  /* block 1 may be */
    ck_assert(!serve_work_park_wanted(40, 32, 16)); /* T0 has all the full blocks */
    ck_assert(!serve_work_park_wanted(16, 0, 16));  /* no full block before the last position */
    ck_assert(serve_work_park_wanted(17, 0, 16));
    ck_assert(!serve_work_park_wanted(17, 16, 16));
}
END_TEST

START_TEST(trace_chain) {
    int32_t tokens[4];
    msg_work_request_t q = s_request(tokens, 4, 0, 8);
    msg_trace_step_t steps[2];
    msg_trace_step_fill(&steps[0], "tokenizer", "tokenize", 0, 300, "4 tokens");
    msg_trace_step_fill(&steps[1], "router", "route", 300, 500, "worker0");
    q.trace = true;
    q.steps = steps;
    q.n_steps = 2;
    serve_work_config_t cfg = s_cfg(NULL);
    serve_work_t w = {0};
    serve_work_refusal_t no;
    ck_assert_int_eq(serve_work_init(&w, &q, &cfg, &no), 0);
    ck_assert_int_eq(w.n_steps, 2);
    ck_assert_int_eq(w.trace_end_us, 500); /* the router's step ends at 300 + 200 */
    /* arrival at 1000 us: a step at 1900 ends 900 us after it, and begins at 500 */
    serve_work_trace(&w, "worker0", 1900, "arrive", "%d prompt tokens", 4);
    ck_assert_int_eq(w.n_steps, 3);
    ck_assert_str_eq(w.steps[2].actor, "worker0");
    ck_assert_str_eq(w.steps[2].why, "4 prompt tokens");
    ck_assert_int_eq(w.steps[2].t_us, 500);
    ck_assert_int_eq(w.steps[2].dur_us, 400);
    /* a full trace sums the rest up in its last step */
    for (int i = 0; i < MSG_MAX_TRACE_STEPS; i++)
        serve_work_trace(&w, "worker0", 2000 + (uint64_t)i, "decode", "step %d", i);
    ck_assert_int_eq(w.n_steps, MSG_MAX_TRACE_STEPS - 8);
    ck_assert_str_eq(w.steps[w.n_steps - 1].what, "more");
    serve_work_clear(&w);
}
END_TEST

START_TEST(embedding_intake) {
    int32_t tokens[8];
    msg_work_request_t q = s_request(tokens, 8, 0, 1);
    q.embed = true;
    serve_work_config_t cfg = s_cfg(NULL);
    serve_work_t w = {0};
    serve_work_refusal_t no;
    ck_assert_int_eq(serve_work_init_embed(&w, &q, &cfg, &no), 0);
    ck_assert_ptr_nonnull(w.seq.embed_sum); /* pools, generates nothing */
    ck_assert_int_eq(w.seq.max_tokens, 1);
    serve_work_clear(&w);
    cfg.max_ctx = 8; /* 8 tokens need 9 positions */
    ck_assert_int_eq(serve_work_init_embed(&w, &q, &cfg, &no), -EINVAL);
    ck_assert_str_eq(no.why, "the input has 8 tokens: it does not fit in the context (7 tokens)");
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_work");
    TCase *tc = tcase_create("intake");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, taken_in);
    tcase_add_test(tc, refused_with_reasons);
    tcase_add_test(tc, fit_context);
    tcase_add_test(tc, resume_replays_carried_tokens);
    tcase_add_test(tc, resume_under_a_grammar);
    tcase_add_test(tc, park_or_admit);
    tcase_add_test(tc, trace_chain);
    tcase_add_test(tc, embedding_intake);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) {
    test_synth_t sc = {.seed = 3};
    if (test_synth_open(&FIX, "work", &sc))
        return 1;
    MODEL = FIX.model;
    TOK = FIX.tok;
    int rc = test_run_suite(argc, argv, s_suite(), CK_NOFORK);
    test_synth_close(&FIX);
    return rc;
}

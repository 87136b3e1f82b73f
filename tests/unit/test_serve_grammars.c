/* test_serve_grammars.c - serve/serve_grammars: a worker compiles a GBNF text once and
 * every request that brings the same text shares it.  The cache keeps `capacity`
 * grammars, the least recently used going first; one pushed out while a request holds it
 * stays usable until that request releases it.  A batch of as many different grammars as
 * the cache holds compiles each once however often they come back.  The vocabulary is a
 * small synthetic model's ("t3", "t4", ... and "</s>" ending a sentence). */
#include "serve_grammars.h"

#include "model.h"
#include "test_util.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static test_synth_fixture_t FIX; /* the synthetic model, opened by main */
static model_t *MODEL;
static model_tokenizer_t *TOK;

/* The grammar of a text of one token: t<id>. */
static void s_gbnf(char *out, size_t cap, int id) {
    snprintf(out, cap, "root ::= \"t%d\"", id);
}

START_TEST(compiled_once_shared) {
    serve_grammars_t *gs = serve_grammars_new(TOK, 64, 4);
    char err[256];
    serve_grammar_t *a = serve_grammars_get(gs, "root ::= \"t3\" \"t4\"", err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    serve_grammar_t *b = serve_grammars_get(gs, "root ::= \"t3\" \"t4\"", err, sizeof err);
    ck_assert_ptr_eq(a, b); /* the second request shares the first one's */
    serve_grammars_stats_t st = serve_grammars_stats(gs);
    ck_assert_int_eq(st.compiled, 1);
    ck_assert_int_eq(st.hits, 1);
    ck_assert_int_eq(st.cached, 1);
    /* a request follows it with its own state over the shared index */
    grammar_state_t *s = grammar_state_new(serve_grammar_grammar(a));
    ck_assert_int_eq(grammar_state_accept_token(s, serve_grammar_index(a), 3), 0);
    ck_assert(grammar_state_can_continue(s));
    ck_assert_int_ne(grammar_state_accept_token(s, serve_grammar_index(a), 5), 0); /* not t5 */
    ck_assert_int_eq(grammar_state_accept_token(s, serve_grammar_index(a), 4), 0);
    ck_assert(!grammar_state_can_continue(s)); /* complete */
    grammar_state_destroy(&s);
    serve_grammar_release(&a);
    serve_grammar_release(&b);
    ck_assert_ptr_null(a);
    serve_grammar_release(&a); /* safe on NULL */
    serve_grammars_destroy(&gs);
    ck_assert_ptr_null(gs);
}
END_TEST

START_TEST(least_recently_used_goes) {
    serve_grammars_t *gs = serve_grammars_new(TOK, 64, 2);
    char err[256], x[64], y[64], z[64];
    s_gbnf(x, sizeof x, 3);
    s_gbnf(y, sizeof y, 4);
    s_gbnf(z, sizeof z, 5);
    serve_grammar_t *g;
    g = serve_grammars_get(gs, x, err, sizeof err);
    serve_grammar_release(&g);
    g = serve_grammars_get(gs, y, err, sizeof err);
    serve_grammar_release(&g);
    g = serve_grammars_get(gs, x, err, sizeof err); /* x used last: y goes for z */
    serve_grammar_release(&g);
    g = serve_grammars_get(gs, z, err, sizeof err);
    serve_grammar_release(&g);
    ck_assert_int_eq(serve_grammars_stats(gs).compiled, 3);
    g = serve_grammars_get(gs, x, err, sizeof err); /* still there */
    serve_grammar_release(&g);
    ck_assert_int_eq(serve_grammars_stats(gs).compiled, 3);
    g = serve_grammars_get(gs, y, err, sizeof err); /* compiled again */
    serve_grammar_release(&g);
    ck_assert_int_eq(serve_grammars_stats(gs).compiled, 4);
    ck_assert_int_eq(serve_grammars_stats(gs).cached, 2);
    serve_grammars_destroy(&gs);
}
END_TEST

START_TEST(pushed_out_while_held) {
    serve_grammars_t *gs = serve_grammars_new(TOK, 64, 1);
    char err[256], x[64], y[64];
    s_gbnf(x, sizeof x, 3);
    s_gbnf(y, sizeof y, 4);
    serve_grammar_t *held = serve_grammars_get(gs, x, err, sizeof err);
    serve_grammar_t *other = serve_grammars_get(gs, y, err, sizeof err); /* x leaves */
    /* the request holding x goes on with it (ASan would see a use after free) */
    grammar_state_t *s = grammar_state_new(serve_grammar_grammar(held));
    ck_assert_int_eq(grammar_state_accept_token(s, serve_grammar_index(held), 3), 0);
    grammar_state_destroy(&s);
    serve_grammar_release(&held); /* freed now */
    serve_grammar_release(&other);
    serve_grammars_destroy(&gs);
}
END_TEST

/* A batch of 16 requests with 16 different grammars, each generating 10 tokens, on a
 * cache sized to the batch: 16 compiles.  (A cache of 8 under this batch compiled
 * grammars over and over.) */
START_TEST(a_batch_of_different_grammars) {
    enum { BATCH = 16 };
    serve_grammars_t *gs = serve_grammars_new(TOK, 64, BATCH);
    char err[256], text[64];
    for (int round = 0; round < 10; round++)
        for (int i = 0; i < BATCH; i++) {
            s_gbnf(text, sizeof text, 3 + i);
            serve_grammar_t *g = serve_grammars_get(gs, text, err, sizeof err);
            ck_assert_msg(g != NULL, "%s", err);
            serve_grammar_release(&g);
        }
    ck_assert_int_eq(serve_grammars_stats(gs).compiled, BATCH);
    ck_assert_int_eq(serve_grammars_stats(gs).hits, 9 * BATCH);
    serve_grammars_destroy(&gs);
}
END_TEST

START_TEST(refused_text) {
    serve_grammars_t *gs = serve_grammars_new(TOK, 64, 2);
    char err[256] = "";
    ck_assert_ptr_null(serve_grammars_get(gs, "root ::= (", err, sizeof err));
    ck_assert_str_ne(err, ""); /* says why */
    ck_assert_int_eq(serve_grammars_stats(gs).compiled, 0);
    ck_assert_int_eq(serve_grammars_stats(gs).cached, 0);
    ck_assert_ptr_null(serve_grammars_new(TOK, 64, 0));
    serve_grammars_destroy(&gs);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_grammars");
    TCase *tc = tcase_create("cache");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, compiled_once_shared);
    tcase_add_test(tc, least_recently_used_goes);
    tcase_add_test(tc, pushed_out_while_held);
    tcase_add_test(tc, a_batch_of_different_grammars);
    tcase_add_test(tc, refused_text);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) {
    test_synth_t sc = {.seed = 3};
    if (test_synth_open(&FIX, "grammars", &sc))
        return 1;
    MODEL = FIX.model;
    TOK = FIX.tok;
    int rc = test_run_suite(argc, argv, s_suite(), CK_NOFORK);
    test_synth_close(&FIX);
    return rc;
}

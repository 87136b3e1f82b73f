/* test_spans.c - base_spans_find: copied spans of an output in its sources, against
 * spans planted by hand. */
#include "base_spans.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <string.h>

START_TEST(finds_planted_spans) {
    const char *a = "The quick brown fox jumps over the lazy dog near the river bank.";
    const char *b = "Second source: a completely different sentence about lighthouses.";
    const char *srcs[] = {a, b};
    size_t lens[] = {strlen(a), strlen(b)};
    /* output: a copy from b, new words, a copy from a */
    const char *out = "Summary: a completely different sentence, and then jumps over the lazy "
                      "dog, done.";
    base_span_t sp[8];
    int n = base_spans_find(out, strlen(out), srcs, lens, 2, 12, sp, 8);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(sp[0].src, 1);
    ck_assert_int_eq((int)sp[0].out_start, (int)(strstr(out, ": a completely") - out));
    ck_assert_int_eq((int)sp[0].src_start, (int)(strstr(b, ": a completely") - b));
    ck_assert(!memcmp(out + sp[0].out_start, b + sp[0].src_start, sp[0].out_end - sp[0].out_start));
    ck_assert_int_eq(sp[1].src, 0);
    ck_assert(!memcmp(out + sp[1].out_start, a + sp[1].src_start, sp[1].out_end - sp[1].out_start));
    ck_assert(strstr(out + sp[1].out_start, " jumps over the lazy dog") == out + sp[1].out_start);
    ck_assert_int_eq((int)(sp[1].out_end - sp[1].out_start),
                     (int)strlen(" jumps over the lazy dog"));
}
END_TEST

START_TEST(nothing_copied_and_bad_args) {
    const char *a = "abcdefghijklmnopqrstuvwxyz";
    const char *srcs[] = {a};
    size_t lens[] = {strlen(a)};
    base_span_t sp[4];
    ck_assert_int_eq(base_spans_find("zyxwvutsrqponmlkjihgfedcba", 26, srcs, lens, 1, 8, sp, 4), 0);
    ck_assert_int_eq(base_spans_find("abc", 3, srcs, lens, 1, 8, sp, 4), 0); /* shorter */
    ck_assert_int_eq(base_spans_find(a, 26, srcs, lens, 1, 2, sp, 4), -EINVAL);
    ck_assert_int_eq(base_spans_find(a, 26, srcs, lens, 1, 8, sp, 4), 1); /* itself */
    ck_assert_int_eq((int)sp[0].out_end, 26);
    /* max_spans bounds the answer */
    const char *twice = "abcdefghijkl--abcdefghijkl";
    ck_assert_int_eq(base_spans_find(twice, strlen(twice), srcs, lens, 1, 8, sp, 1), 1);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("spans");
    TCase *tc = tcase_create("spans");
    tcase_add_test(tc, finds_planted_spans);
    tcase_add_test(tc, nothing_copied_and_bad_args);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

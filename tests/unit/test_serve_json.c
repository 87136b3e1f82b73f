/* test_serve_json.c - serve/serve_json: a key twice (at the top, in a nested object, in an
 * object inside an array: the path names where) and a \u0000 escape are refused; an escaped
 * backslash before "u0000", the same key in two objects, and a body that is not JSON are
 * not (the last is the parser's to refuse). */
#include "serve_json.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <string.h>

static int s_check(const char *body, char *why) {
    why[0] = 0;
    return serve_json_check(body, strlen(body), why, 256);
}

START_TEST(refusals) {
    char why[256];
    ck_assert_int_eq(s_check("{\"a\": 1, \"a\": 2}", why), -EINVAL);
    ck_assert_msg(strstr(why, "'a'"), "%s", why);
    ck_assert_int_eq(s_check("{\"m\": [{\"r\": 1}, {\"r\": 1, \"c\": 2, \"c\": 3}]}", why),
                     -EINVAL);
    ck_assert_msg(strstr(why, "'c'") && strstr(why, "m[1]"), "%s", why);
    ck_assert_int_eq(s_check("{\"o\": {\"x\": {\"k\": 1, \"k\": 1}}}", why), -EINVAL);
    ck_assert_msg(strstr(why, "o.x"), "%s", why);
    ck_assert_int_eq(s_check("{\"c\": \"a\\u0000b\"}", why), -EINVAL);
    ck_assert_msg(strstr(why, "NUL"), "%s", why);
    ck_assert_int_eq(s_check("{\"c\": \"\\\"\\u0000\"}", why),
                     -EINVAL); /* after an escaped quote */
}
END_TEST

START_TEST(accepted) {
    char why[256];
    ck_assert_int_eq(s_check("{\"c\": \"a\\\\u0000b\"}", why), 0); /* a backslash, then text */
    ck_assert_int_eq(s_check("{\"a\": {\"k\": 1}, \"b\": {\"k\": 2}}", why), 0);
    ck_assert_int_eq(s_check("[{\"k\": 1}, {\"k\": 2}]", why), 0);
    ck_assert_int_eq(s_check("{\"c\": \"\\u0001\"}", why), 0);
    ck_assert_int_eq(s_check("not json", why), 0);
    ck_assert_int_eq(serve_json_check(NULL, 0, why, sizeof why), 0);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_json");
    TCase *tc = tcase_create("json");
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, accepted);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)

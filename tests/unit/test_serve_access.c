/* test_serve_access.c - serve/serve_access: API keys from a key file (comments and blank
 * lines skipped, "Bearer KEY" with spaces around KEY, case-insensitive scheme, every other
 * header refused; a missing, empty or overfull file refused with a reason) and the CORS
 * origins (a list matched exactly, "*" for any, off when not configured). */
#include "serve_access.h"
#include "test_util.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char s_path[64];

/* A key file with text; its path in s_path. */
static void s_file(const char *text) {
    snprintf(s_path, sizeof s_path, "/tmp/strata-keys-XXXXXX");
    int fd = mkstemp(s_path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

START_TEST(keys) {
    char why[256] = "";
    s_file("# keys of the team\n\n  sk-one  \nsk-two\r\n\t# sk-not\n");
    serve_access_t *a = serve_access_new(s_path, NULL, why, sizeof why);
    unlink(s_path);
    ck_assert_msg(a != NULL, "%s", why);
    ck_assert_int_eq(serve_access_keys(a), 2);
    ck_assert(serve_access_authorized(a, "Bearer sk-one"));
    ck_assert(serve_access_authorized(a, "bearer   sk-two  "));
    ck_assert(!serve_access_authorized(a, "Bearer sk-not"));
    ck_assert(!serve_access_authorized(a, "Bearer sk-on"));   /* a prefix */
    ck_assert(!serve_access_authorized(a, "Bearer sk-onee")); /* longer */
    ck_assert(!serve_access_authorized(a, "Basic sk-one"));
    ck_assert(!serve_access_authorized(a, "sk-one"));
    ck_assert(!serve_access_authorized(a, NULL));
    ck_assert(!serve_access_cors(a));
    serve_access_destroy(&a);
    ck_assert_ptr_null(a);
    serve_access_destroy(&a);
    /* no key file: anyone */
    a = serve_access_new(NULL, NULL, why, sizeof why);
    ck_assert(serve_access_authorized(a, NULL));
    ck_assert_int_eq(serve_access_keys(a), 0);
    serve_access_destroy(&a);
}
END_TEST

START_TEST(bad_key_files) {
    char why[256] = "";
    ck_assert_ptr_null(serve_access_new("/nonexistent/keys", NULL, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "cannot read"));
    s_file("# only a comment\n\n");
    ck_assert_ptr_null(serve_access_new(s_path, NULL, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "has no key"));
    unlink(s_path);
    char *many = malloc(16 * (SERVE_ACCESS_MAX_KEYS + 2));
    many[0] = 0;
    for (int i = 0; i <= SERVE_ACCESS_MAX_KEYS; i++)
        sprintf(many + strlen(many), "k%d\n", i);
    s_file(many);
    free(many);
    ck_assert_ptr_null(serve_access_new(s_path, NULL, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "more than"));
    unlink(s_path);
}
END_TEST

START_TEST(cors) {
    char why[256];
    serve_access_t *a =
        serve_access_new(NULL, "https://app.example.com,http://localhost:3000", why, sizeof why);
    ck_assert(serve_access_cors(a));
    ck_assert(serve_access_origin(a, "https://app.example.com"));
    ck_assert(serve_access_origin(a, "http://localhost:3000"));
    ck_assert(!serve_access_origin(a, "https://app.example.co"));
    ck_assert(!serve_access_origin(a, "https://evil.example.com"));
    ck_assert(!serve_access_origin(a, ""));
    ck_assert(!serve_access_origin(a, NULL));
    serve_access_destroy(&a);
    a = serve_access_new(NULL, "*", why, sizeof why);
    ck_assert(serve_access_origin(a, "https://anything.example"));
    ck_assert_str_eq(serve_access_cors_list(a), "*");
    serve_access_destroy(&a);
    a = serve_access_new(NULL, "", why, sizeof why);
    ck_assert(!serve_access_cors(a));
    ck_assert(!serve_access_origin(a, "https://app.example.com"));
    serve_access_destroy(&a);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_access");
    TCase *tc = tcase_create("serve_access");
    tcase_add_test(tc, keys);
    tcase_add_test(tc, bad_key_files);
    tcase_add_test(tc, cors);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)

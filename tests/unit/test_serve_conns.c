/* test_serve_conns.c - serve/serve_conns: a connection waiting for headers is overdue at
 * header_us, one reading a body at body_us after its headers, one being answered never;
 * keep-alive starts the header deadline again; each overdue fd is reported once; closed
 * connections are forgotten. */
#include "serve_conns.h"
#include "test_util.h"

#include <check.h>

START_TEST(deadlines) {
    serve_conns_t *s = serve_conns_new(10, 100);
    ck_assert_ptr_nonnull(s);
    serve_conn_t *a = serve_conns_open(s, 3, 0), *b = serve_conns_open(s, 4, 0),
                 *c = serve_conns_open(s, 5, 0);
    ck_assert_int_eq(serve_conns_count(s), 3);
    serve_conns_headers(s, b, 5); /* body due at 105 */
    serve_conns_headers(s, c, 5);
    serve_conns_body(s, c); /* being answered: no deadline */
    int fds[8], sh, sb;
    ck_assert_int_eq(serve_conns_overdue(s, 9, fds, 8, &sh, &sb), 0);
    ck_assert_int_eq(serve_conns_overdue(s, 10, fds, 8, &sh, &sb), 1);
    ck_assert_int_eq(fds[0], 3);
    ck_assert_int_eq(sh, 1);
    ck_assert_int_eq(serve_conns_overdue(s, 50, fds, 8, &sh, &sb), 0); /* reported once */
    ck_assert_int_eq(serve_conns_overdue(s, 105, fds, 8, &sh, &sb), 1);
    ck_assert_int_eq(fds[0], 4);
    ck_assert_int_eq(sb, 1);
    ck_assert_int_eq(serve_conns_overdue(s, 100000, fds, 8, &sh, &sb), 0);
    serve_conns_idle(s, c, 200); /* its request ended: headers due at 210 */
    ck_assert_int_eq(serve_conns_overdue(s, 209, fds, 8, &sh, &sb), 0);
    ck_assert_int_eq(serve_conns_overdue(s, 210, fds, 8, &sh, &sb), 1);
    ck_assert_int_eq(fds[0], 5);
    serve_conns_close(s, a);
    serve_conns_close(s, c);
    serve_conns_close(s, NULL);
    ck_assert_int_eq(serve_conns_count(s), 1);
    serve_conns_destroy(&s); /* frees b */
    ck_assert_ptr_null(s);
    serve_conns_destroy(&s);
    serve_conns_t *none = serve_conns_new(0, 0); /* no deadlines */
    serve_conns_open(none, 7, 0);
    ck_assert_int_eq(serve_conns_overdue(none, 1u << 30, fds, 8, &sh, &sb), 0);
    serve_conns_destroy(&none);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("serve_conns");
    TCase *tc = tcase_create("conns");
    tcase_add_test(tc, deadlines);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)

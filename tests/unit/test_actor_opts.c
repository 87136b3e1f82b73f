/* test_actor_opts.c - option tables and the registry: values are checked
 * against their declaration, every actor is registered with its options, and
 * the topology parser refuses a bad option with its line, actor, key and value. */
#include "actor_opts.h"
#include "actor_registry.h"
#include "actor_topology.h"

#include "test_util.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static const actor_opt_t s_table[] = {
    {"threads", ACTOR_OPT_INT, "1", 1, 256, NULL, "threads"},
    {"ratio", ACTOR_OPT_DOUBLE, "0.5", 0, 1, NULL, "a ratio"},
    {"on", ACTOR_OPT_BOOL, "1", 0, 0, NULL, "a switch"},
    {"fmt", ACTOR_OPT_ENUM, "f32", 0, 0, "f32|f16|int8", "a format"},
    {"dir", ACTOR_OPT_PATH, NULL, 0, 0, NULL, "a path"},
    {NULL},
};

START_TEST(check_values) {
    char why[256];
    const actor_opt_t *t = actor_opts_find(s_table, "threads");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(actor_opts_count(s_table), 5);
    ck_assert_ptr_null(actor_opts_find(s_table, "thread"));
    ck_assert_int_eq(actor_opt_check(t, "8", why, sizeof why), 0);
    ck_assert_int_ne(actor_opt_check(t, "abc", why, sizeof why), 0);
    ck_assert_str_eq(why, "not an integer (1..256)");
    ck_assert_int_ne(actor_opt_check(t, "", why, sizeof why), 0);
    ck_assert_int_ne(actor_opt_check(t, "8x", why, sizeof why), 0);
    ck_assert_int_ne(actor_opt_check(t, "0", why, sizeof why), 0);
    ck_assert_str_eq(why, "out of range (1..256)");
    ck_assert_int_ne(actor_opt_check(t, "99999999999999999999", why, sizeof why), 0);
    const actor_opt_t *r = actor_opts_find(s_table, "ratio");
    ck_assert_int_eq(actor_opt_check(r, "0.25", why, sizeof why), 0);
    ck_assert_int_ne(actor_opt_check(r, "1.5", why, sizeof why), 0);
    ck_assert_int_ne(actor_opt_check(r, "nan", why, sizeof why), 0);
    const actor_opt_t *b = actor_opts_find(s_table, "on");
    ck_assert_int_eq(actor_opt_check(b, "off", why, sizeof why), 0);
    ck_assert(!actor_opt_parse_bool("off") && actor_opt_parse_bool("1"));
    ck_assert_int_ne(actor_opt_check(b, "maybe", why, sizeof why), 0);
    const actor_opt_t *e = actor_opts_find(s_table, "fmt");
    ck_assert_int_eq(actor_opt_check(e, "int8", why, sizeof why), 0);
    ck_assert_int_ne(actor_opt_check(e, "int", why, sizeof why), 0); /* a prefix is not a value */
    ck_assert_str_eq(why, "expected f32|f16|int8");
    const actor_opt_t *p = actor_opts_find(s_table, "dir");
    ck_assert_int_eq(actor_opt_check(p, "/tmp", why, sizeof why), 0);
    ck_assert_int_ne(actor_opt_check(p, "", why, sizeof why), 0);
}
END_TEST

/* Every registered actor has a function, a purpose and a table whose defaults
 * pass their own checks. */
START_TEST(registry) {
    const char *names[] = {"frontend", "tokenizer",  "router",  "worker<N>", "draft",
                           "kvtier",   "prefetcher", "metrics", "http",      "expert<N>"};
    const int n_names = (int)(sizeof names / sizeof names[0]);
    int n = 0;
    char why[256];
    for (; actor_info_at(n); n++) {
        const actor_info_t *a = actor_info_at(n);
        ck_assert_ptr_nonnull(a->fn);
        ck_assert(a->purpose && *a->purpose);
        for (const actor_opt_t *o = a->opts; o->key; o++) {
            ck_assert_msg(!o->def || !actor_opt_check(o, o->def, why, sizeof why), "%s.%s: %s",
                          a->name, o->key, why);
            ck_assert(o->help && *o->help);
        }
    }
    ck_assert_int_eq(n, n_names);
    for (int i = 0; i < n_names; i++)
        ck_assert_ptr_nonnull(actor_info_find(names[i]));
    ck_assert_ptr_eq(actor_info_find("worker12"), actor_info_find("worker<N>"));
    ck_assert_ptr_null(actor_info_find("worker"));
    ck_assert_ptr_null(actor_info_find("worker1x"));
    ck_assert_ptr_null(actor_info_find("planner"));
}
END_TEST

static int s_parse(const char *text, char *err, size_t errlen) {
    actor_topology_t *t = calloc(1, sizeof *t);
    int rc = actor_topology_parse(t, text, err, errlen);
    free(t);
    return rc;
}

#define S_HEAD                                                                                     \
    "frontend inproc://f\n"                                                                        \
    "tokenizer inproc://t\n"                                                                       \
    "router inproc://r\n"

START_TEST(topology_checks) {
    char err[512];
    ck_assert_int_eq(s_parse(S_HEAD "worker0 inproc://w0 threads=4 kv_type=f16\n"
                                    "defaults - kv_blocks=64 t1_fmt=int4\n",
                             err, sizeof err),
                     0);
    ck_assert_int_ne(s_parse(S_HEAD "worker0 inproc://w0 threads=abc\n", err, sizeof err), 0);
    ck_assert_str_eq(err, "topology line 4: worker0: threads=abc: not an integer (1..256)");
    ck_assert_int_ne(s_parse(S_HEAD "worker0 inproc://w0 spec_k=17\n", err, sizeof err), 0);
    ck_assert_str_eq(err, "topology line 4: worker0: spec_k=17: out of range (0..16)");
    ck_assert_int_ne(s_parse(S_HEAD "worker0 inproc://w0 treads=2\n", err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "worker0: treads=2: unknown option (model, threads"));
    ck_assert_int_ne(
        s_parse("defaults - kv_type=int4\n" S_HEAD "worker0 inproc://w0\n", err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "topology line 1: defaults: kv_type=int4"));
    ck_assert_int_ne(s_parse("defaults - nope=1\n" S_HEAD "worker0 inproc://w0\n", err, sizeof err),
                     0);
    ck_assert_ptr_nonnull(strstr(err, "no actor has an option 'nope'"));
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("actor_opts");
    TCase *tc = tcase_create("actor_opts");
    tcase_add_test(tc, check_values);
    tcase_add_test(tc, registry);
    tcase_add_test(tc, topology_checks);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

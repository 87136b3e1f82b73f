/* test_actor_opts.c - option tables and the registry: values are checked
 * against their declaration, every actor is registered with its options, and
 * the topology parser refuses a bad option with its line, actor, key and value. */
#include "actor_opts.h"
#include "actor_registry.h"
#include "actor_topology.h"
#include "kv_codec.h"

#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const actor_opt_t s_table[] = {
    {"threads", ACTOR_OPT_INT, "1", 1, 256, NULL, "threads", .field = 0},
    {"ratio", ACTOR_OPT_DOUBLE, "0.5", 0, 1, NULL, "a ratio", .field = 0},
    {"on", ACTOR_OPT_BOOL, "1", 0, 0, NULL, "a switch", .field = 0},
    {"fmt", ACTOR_OPT_ENUM, "f32", 0, 0, "f32|f16|int8", "a format", .field = 0},
    {"dir", ACTOR_OPT_PATH, NULL, 0, 0, NULL, "a path", .field = 0},
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

/* Options load into a config struct through the table's field column: typed,
 * an enum through its library's parser (one parser for the table, the CLI
 * and the kvstore) or as its index. */
typedef struct {
    int threads;
    double ratio;
    bool on;
    int fmt;  /* kv_fmt_t, by kv_fmt_parse */
    int mode; /* its index */
    const char *dir;
} s_cfg_t;

static const actor_opt_t s_cfg_table[] = {
    {"threads", ACTOR_OPT_INT, "1", 1, 256, NULL, "threads",
     .field = ACTOR_OPT_FIELD(s_cfg_t, threads)},
    {"ratio", ACTOR_OPT_DOUBLE, "0.5", 0, 1, NULL, "a ratio",
     .field = ACTOR_OPT_FIELD(s_cfg_t, ratio)},
    {"on", ACTOR_OPT_BOOL, "1", 0, 0, NULL, "a switch", .field = ACTOR_OPT_FIELD(s_cfg_t, on)},
    {"fmt", ACTOR_OPT_ENUM, "f16", 0, 0, "f32|f16|int8", "a format",
     .field = ACTOR_OPT_FIELD(s_cfg_t, fmt), .parse = kv_fmt_parse},
    {"mode", ACTOR_OPT_ENUM, "a", 0, 0, "a|b|c", "a mode", .field = ACTOR_OPT_FIELD(s_cfg_t, mode)},
    {"dir", ACTOR_OPT_PATH, NULL, 0, 0, NULL, "a path", .field = ACTOR_OPT_FIELD(s_cfg_t, dir)},
    {"other", ACTOR_OPT_INT, "7", 0, 9, NULL, "read by someone else", .field = 0},
    {NULL},
};

/* The values of a topology line: "fmt=int8 mode=c on=off", the rest defaults. */
static const char *s_line(const actor_opt_t *o, const void *ctx) {
    (void)ctx;
    if (!strcmp(o->key, "fmt"))
        return "int8";
    if (!strcmp(o->key, "mode"))
        return "c";
    if (!strcmp(o->key, "on"))
        return "off";
    return o->def;
}

START_TEST(load_config) {
    s_cfg_t c;
    memset(&c, 0x5a, sizeof c);
    actor_opts_load(s_cfg_table, s_line, NULL, &c);
    ck_assert_int_eq(c.threads, 1);
    ck_assert(c.ratio == 0.5);
    ck_assert(!c.on);
    ck_assert_int_eq(c.fmt, KV_FMT_I8);
    ck_assert_int_eq(c.mode, 2);
    ck_assert_ptr_null(c.dir); /* unset, no default */
    const actor_opt_t *fmt = actor_opts_find(s_cfg_table, "fmt");
    ck_assert_int_eq(actor_opt_enum(fmt, "f32"), KV_FMT_F32);
    ck_assert_int_eq(actor_opt_enum(fmt, "q8"), -1); /* the parser's alias is not a value */
    ck_assert_int_eq(actor_opt_enum(actor_opts_find(s_cfg_table, "mode"), "b"), 1);
    ck_assert_int_eq(actor_opt_enum(actor_opts_find(s_cfg_table, "mode"), "d"), -1);
}
END_TEST

/* Every registered actor has a function, a purpose and a table whose defaults
 * pass their own checks. */
START_TEST(registry) {
    const char *names[] = {"frontend",   "tokenizer", "router",  "worker<N>", "draft",    "kvtier",
                           "prefetcher", "semcache",  "metrics", "http",      "expert<N>"};
    const int n_names = (int)(sizeof names / sizeof names[0]);
    int n = 0;
    char why[256];
    for (; actor_info_at(n); n++) {
        const actor_info_t *a = actor_info_at(n);
        ck_assert_ptr_nonnull(a->fn);
        ck_assert(a->purpose && *a->purpose);
        ck_assert(a->rank > 0);
        for (const actor_opt_t *o = a->opts; o->key; o++) {
            ck_assert_msg(!o->def || !actor_opt_check(o, o->def, why, sizeof why), "%s.%s: %s",
                          a->name, o->key, why);
            ck_assert(o->help && *o->help);
            /* every option loads into the actor's config, and an int fits an int */
            ck_assert_msg(o->field > 0 && o->field - 1 < a->cfg_size, "%s.%s: no field", a->name,
                          o->key);
            ck_assert(o->type != ACTOR_OPT_INT || (o->min >= INT_MIN && o->max <= INT_MAX));
            /* a parser names an enum's values, or checks a string's own syntax */
            ck_assert(o->type == ACTOR_OPT_ENUM || o->type == ACTOR_OPT_STRING || !o->parse);
            if (o->type == ACTOR_OPT_STRING && o->parse) /* and its syntax is described */
                ck_assert(o->values && actor_opt_check(o, "?bad", why, sizeof why) == -EINVAL &&
                          strstr(why, o->values));
        }
        for (int j = 0; j < n; j++) /* one start order: no two actors share a rank */
            ck_assert_int_ne(actor_info_at(j)->rank, a->rank);
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
    int rc = actor_topology_parse(t, text, actor_info_check_opt, err, errlen);
    free(t);
    return rc;
}

/* The one start order (thread mode and the supervisor both use it): by rank,
 * whatever order the topology lists the actors in; ties keep that order. */
START_TEST(start_order) {
    actor_topology_t *t = calloc(1, sizeof *t);
    char err[512];
    const char *given[] = {"http",       "frontend",   "worker0", "router",
                           "tokenizer",  "supervisor", "worker1", "expert0",
                           "prefetcher", "metrics",    "draft",   "kvtier"};
    const char *want[] = {"kvtier",  "prefetcher", "draft",     "metrics",  "expert0", "worker0",
                          "worker1", "router",     "tokenizer", "frontend", "http"};
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++)
        ck_assert_ptr_nonnull(actor_topology_add(t, given[i], "inproc://x"));
    const char *order[ACTOR_TOPO_MAX_ACTORS];
    int n = actor_info_start_order(t, NULL, order, ACTOR_TOPO_MAX_ACTORS, err, sizeof err);
    ck_assert_int_eq(n, (int)(sizeof want / sizeof want[0]));
    for (int i = 0; i < n; i++)
        ck_assert_str_eq(order[i], want[i]);
    /* one host's share, in the same order */
    strcpy(((actor_topo_entry_t *)actor_topology_find(t, "worker1"))->host, "b");
    strcpy(((actor_topo_entry_t *)actor_topology_find(t, "frontend"))->host, "b");
    ck_assert_int_eq(actor_info_start_order(t, "b", order, ACTOR_TOPO_MAX_ACTORS, err, sizeof err),
                     2);
    ck_assert_str_eq(order[0], "worker1");
    ck_assert_str_eq(order[1], "frontend");
    ck_assert_int_eq(actor_info_start_order(t, NULL, order, 3, err, sizeof err), -ENOSPC);
    ck_assert_ptr_nonnull(actor_topology_add(t, "planner", "inproc://p"));
    ck_assert_int_eq(actor_info_start_order(t, NULL, order, ACTOR_TOPO_MAX_ACTORS, err, sizeof err),
                     -EINVAL);
    ck_assert_str_eq(err, "unknown actor 'planner' in the topology");
    free(t);
}
END_TEST

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
    ck_assert_ptr_nonnull(strstr(err, "worker0: treads=2: unknown option (model, device, threads"));
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
    tcase_add_test(tc, load_config);
    tcase_add_test(tc, registry);
    tcase_add_test(tc, start_order);
    tcase_add_test(tc, topology_checks);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

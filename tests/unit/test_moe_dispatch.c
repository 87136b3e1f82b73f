/* test_moe_dispatch.c - router/router_moe.h: expert sets, static placement,
 * the control plane (replicas within the slot budget, capacity factors,
 * failures), the per-step row assignment, and the msg_moe.h codecs (strict
 * decoding of every field and the rules across fields). */
#include "msg_any.h"
#include "router_moe.h"
#include "test_util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

START_TEST(parse_sets) {
    uint8_t set[8];
    char why[128];
    ck_assert_int_eq(router_moe_parse_set("0-3", 8, set, why, sizeof why), 0);
    ck_assert(set[0] && set[3] && !set[4]);
    ck_assert_int_eq(router_moe_parse_set("0,5", 8, set, why, sizeof why), 0);
    ck_assert(set[0] && set[5] && !set[1]);
    ck_assert_int_eq(router_moe_parse_set("1-2,7", 8, set, why, sizeof why), 0);
    ck_assert(set[1] && set[2] && set[7] && !set[3]);
    ck_assert_int_eq(router_moe_parse_set("9", 8, set, why, sizeof why), -EINVAL);
    ck_assert_str_eq(why, "'9': expert out of range 0..7");
    ck_assert_int_eq(router_moe_parse_set("3-1", 8, set, why, sizeof why), -EINVAL);
    ck_assert_str_eq(why, "'3-1': empty range");
    const char *bad[] = {"", "a", "1,", ",1", "1-", "-1", "1--2", "1;2", "1 2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(router_moe_parse_set(bad[i], 8, set, why, sizeof why) == -EINVAL, "%s",
                      bad[i]);
}
END_TEST

START_TEST(static_placement) {
    uint8_t own[3 * 8];
    char why[160];
    ck_assert_int_eq(router_moe_static_owners(8, 3, NULL, own, why, sizeof why), 0);
    for (int e = 0; e < 8; e++)
        for (int a = 0; a < 3; a++)
            ck_assert_int_eq(own[a * 8 + e], e % 3 == a); /* round-robin */
    const char *specs[2] = {"0-3", "4-7"};
    ck_assert_int_eq(router_moe_static_owners(8, 2, specs, own, why, sizeof why), 0);
    ck_assert(own[0] && own[3] && own[8 + 5] && !own[8 + 3] && !own[4]);
    /* actor 1 automatic (the odd experts) leaves 4 and 6 to nobody */
    const char *half[2] = {"0-3", NULL};
    ck_assert_int_eq(router_moe_static_owners(8, 2, half, own, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "expert 4 is hosted by no expert actor"));
    const char *bad[2] = {"0-3", "4-6"};
    ck_assert_int_eq(router_moe_static_owners(8, 2, bad, own, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "expert 7 is hosted by no expert actor"));
}
END_TEST

/* A control plane for E experts on A actors, round-robin, slots each. */
static router_moe_t *s_plane(int E, int A, bool load, int cf, int slots) {
    uint8_t *own = malloc((size_t)E * A);
    char why[64];
    ck_assert_int_eq(router_moe_static_owners(E, A, NULL, own, why, sizeof why), 0);
    int sl[16];
    for (int a = 0; a < A; a++)
        sl[a] = slots;
    router_moe_config_t cfg = {E, A, load, cf, 4000, 4, 1.5};
    router_moe_t *m = router_moe_new(&cfg, own, sl);
    free(own);
    ck_assert_ptr_nonnull(m);
    return m;
}

static int s_hosted(router_moe_view_t v, int a) {
    int n = 0;
    for (int e = 0; e < v.n_expert; e++)
        n += v.hosts[a * v.n_expert + e];
    return n;
}

START_TEST(replicas_for_hot_experts) {
    router_moe_t *m = s_plane(8, 4, true, 1250, 3);
    int32_t rows[8] = {800, 100, 100, 100, 100, 100, 100, 100}; /* expert 0 is hot */
    for (int a = 0; a < 4; a++) { /* every actor reports what it served of its own experts */
        int32_t r[8] = {0};
        for (int e = a; e < 8; e += 4)
            r[e] = rows[e];
        router_moe_report(m, a, r, 10, 0, 1000000, 1000);
    }
    uint64_t v0 = router_moe_version(m);
    ck_assert_uint_gt(router_moe_plan(m), v0);
    router_moe_view_t v = router_moe_view(m);
    ck_assert_int_gt(router_moe_replicas(m, 0), 1);
    for (int e = 1; e < 8; e++)
        ck_assert_int_eq(router_moe_replicas(m, e), 1);
    for (int a = 0; a < 4; a++) /* the budget: 3 experts per actor */
        ck_assert_int_le(s_hosted(v, a), 3);
    ck_assert_int_eq(v.hosts[0 * 8 + 0], 1); /* the owner keeps it */
    /* the hot expert's capacity factor grows (its share x E / replicas), cold ones keep cf */
    ck_assert_int_gt(v.cap[0], 1250);
    ck_assert_int_le(v.cap[0], 4000);
    ck_assert_int_eq(v.cap[1], 1250);
    /* deterministic: the same inputs give the same table */
    router_moe_t *m2 = s_plane(8, 4, true, 1250, 3);
    for (int a = 0; a < 4; a++) {
        int32_t r[8] = {0};
        for (int e = a; e < 8; e += 4)
            r[e] = rows[e];
        router_moe_report(m2, a, r, 10, 0, 1000000, 1000);
    }
    router_moe_plan(m2);
    router_moe_view_t v2 = router_moe_view(m2);
    ck_assert_mem_eq(v.hosts, v2.hosts, 32 * sizeof *v.hosts);
    ck_assert_mem_eq(v.cap, v2.cap, 8 * sizeof *v.cap);
    router_moe_destroy(&m);
    router_moe_destroy(&m2);
    ck_assert_ptr_null(m);
}
END_TEST

START_TEST(budget_and_static_mode) {
    /* slots 0: only the own set, no replica however hot */
    router_moe_t *m = s_plane(8, 4, true, 1250, 0);
    int32_t r[8] = {5000, 0, 0, 0, 0, 0, 0, 0};
    router_moe_report(m, 0, r, 10, 0, 1000000, 1000);
    router_moe_plan(m);
    ck_assert_int_eq(router_moe_replicas(m, 0), 1);
    router_moe_destroy(&m);
    /* static: no replicas, no capacity */
    m = s_plane(8, 4, false, 1250, 8);
    router_moe_report(m, 0, r, 10, 0, 1000000, 1000);
    router_moe_plan(m);
    router_moe_view_t v = router_moe_view(m);
    ck_assert_int_eq(router_moe_replicas(m, 0), 1);
    ck_assert(!v.load_aware);
    ck_assert_int_eq(v.cap[0], 0);
    ck_assert_int_eq(router_moe_capacity(&v, 0, 1000), INT32_MAX);
    router_moe_destroy(&m);
}
END_TEST

START_TEST(down_and_back) {
    router_moe_t *m = s_plane(8, 2, false, 0, 0);
    router_moe_down(m, 1);
    router_moe_plan(m);
    router_moe_view_t v = router_moe_view(m);
    ck_assert(!v.alive[1]);
    for (int e = 0; e < 8; e++) /* actor 1's experts are orphans: actor 0 takes them */
        ck_assert_int_eq(v.hosts[e], 1);
    ck_assert_int_eq(s_hosted(v, 1), 0);
    int32_t r[8] = {0};
    router_moe_report(m, 1, r, 0, 0, 150000, 5000000); /* it reports again: back */
    router_moe_plan(m);
    v = router_moe_view(m);
    ck_assert(v.alive[1]);
    ck_assert_int_eq(v.hosts[1], 0); /* expert 1 back on its owner only */
    ck_assert_int_eq(v.hosts[8 + 1], 1);
    /* silent too long: expired */
    ck_assert_int_eq(router_moe_expire(m, 5000000 + 3000000, 2000000), 1);
    ck_assert(!router_moe_alive(m, 1));
    ck_assert_int_eq(router_moe_report(m, 2, r, 0, 0, 1, 1), -EINVAL);
    router_moe_destroy(&m);
}
END_TEST

START_TEST(assign_static) {
    int32_t hosts[2 * 4] = {1, 0, 1, 0, /* actor 0: experts 0, 2 */ 0, 1, 0, 1};
    int32_t cap[4] = {0}, load[2] = {0}, alive[2] = {1, 1};
    router_moe_view_t v = {4, 2, false, hosts, cap, load, alive, 0};
    int32_t token[6] = {0, 1, 0, 2, 1, 2}, expert[6] = {0, 0, 1, 2, 3, 3};
    int actor[6];
    int32_t used[6];
    int64_t over[4] = {0};
    ck_assert_int_eq(router_moe_assign(&v, 6, token, expert, NULL, NULL, actor, used, over), 0);
    int want[6] = {0, 0, 1, 0, 1, 1};
    for (int r = 0; r < 6; r++) {
        ck_assert_int_eq(actor[r], want[r]);
        ck_assert_int_eq(used[r], expert[r]);
    }
    uint8_t skip[2] = {0, 1}; /* actor 1 timed out: its experts have no one else: -1 (local) */
    router_moe_assign(&v, 6, token, expert, NULL, skip, actor, used, over);
    ck_assert_int_eq(actor[2], -1);
    ck_assert_int_eq(actor[0], 0);
}
END_TEST

START_TEST(assign_load_replicas_and_overflow) {
    /* expert 0 on both actors; experts 1..3 on one each */
    int32_t hosts[2 * 4] = {1, 1, 0, 1, 1, 0, 1, 0};
    int32_t cap[4] = {1000, 1000, 1000, 1000}, load[2] = {0, 0}, alive[2] = {1, 1};
    router_moe_view_t v = {4, 2, true, hosts, cap, load, alive, 1};
    /* 8 tokens, K = 1: all on expert 0 -> capacity per replica ceil(1.0 * 8 / 4) = 2 */
    int32_t token[8], expert[8];
    for (int r = 0; r < 8; r++)
        token[r] = r, expert[r] = 0;
    ck_assert_int_eq(router_moe_capacity(&v, 0, 8), 2);
    int actor[8];
    int32_t used[8];
    int64_t over[4] = {0};
    int moved = router_moe_assign(&v, 8, token, expert, NULL, NULL, actor, used, over);
    int per[2] = {0}, per_expert[4] = {0};
    for (int r = 0; r < 8; r++) {
        ck_assert_int_ge(actor[r], 0);
        ck_assert(hosts[actor[r] * 4 + used[r]]); /* every row goes to a host of its expert */
        per[actor[r]]++;
        per_expert[used[r]]++;
    }
    ck_assert_int_eq(per_expert[0], 4); /* two replicas x capacity 2 */
    ck_assert_int_eq(moved, 4);         /* the rest moved to other experts */
    ck_assert_int_eq(over[0], 4);
    for (int e = 1; e < 4; e++)
        ck_assert_int_le(per_expert[e], 2);
    /* unlimited: nothing moves, the replicas share the rows evenly */
    int32_t nocap[4] = {0};
    v.cap = nocap;
    memset(over, 0, sizeof over);
    ck_assert_int_eq(router_moe_assign(&v, 8, token, expert, NULL, NULL, actor, used, over), 0);
    per[0] = per[1] = 0;
    for (int r = 0; r < 8; r++) {
        per[actor[r]]++;
        ck_assert_int_eq(used[r], 0);
    }
    ck_assert_int_eq(per[0], 4);
    ck_assert_int_eq(per[1], 4);
    /* a reported backlog steers rows to the other replica */
    load[0] = 100;
    router_moe_assign(&v, 8, token, expert, NULL, NULL, actor, used, over);
    for (int r = 0; r < 8; r++)
        ck_assert_int_eq(actor[r], 1);
}
END_TEST

START_TEST(assign_never_picks_a_selected_expert) {
    int32_t hosts[1 * 4] = {1, 1, 1, 1};
    int32_t cap[4] = {1000, 1000, 1000, 1000}, load[1] = {0}, alive[1] = {1};
    router_moe_view_t v = {4, 1, true, hosts, cap, load, alive, 1};
    /* K = 2: tokens 0..3 all pick experts 0 and 1; capacity ceil(8 / 4) = 2 */
    int32_t token[8] = {0, 1, 2, 3, 0, 1, 2, 3}, expert[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    int actor[8];
    int32_t used[8];
    int64_t over[4] = {0};
    /* by load (no logits), then by logit: the selected experts have the largest */
    float logits[4 * 4] = {9, 8, 1, 2, 9, 8, 2, 1, 8, 9, 1, 1, 8, 9, 3, 3};
    for (int pass = 0; pass < 2; pass++) {
        router_moe_assign(&v, 8, token, expert, pass ? logits : NULL, NULL, actor, used, over);
        for (int r = 0; r < 8; r++) {
            ck_assert_int_ge(actor[r], 0);
            for (int q = 0; q < 8; q++)
                if (q != r && token[q] == token[r])
                    ck_assert_int_ne(used[q], used[r]); /* a token never gets one expert twice */
        }
    }
}
END_TEST

START_TEST(overflow_goes_to_the_next_best_expert) {
    int32_t hosts[1 * 4] = {1, 1, 1, 1};
    int32_t cap[4] = {1000, 1000, 1000, 1000}, load[1] = {0}, alive[1] = {1};
    router_moe_view_t v = {4, 1, true, hosts, cap, load, alive, 1};
    /* K = 1: 4 tokens all pick expert 0; capacity ceil(1.0 * 4 / 4) = 1 per expert */
    int32_t token[4] = {0, 1, 2, 3}, expert[4] = {0, 0, 0, 0};
    float logits[4 * 4] = {
        9, 0, 0, 0, /* token 0 keeps expert 0 */
        9, 2, 7, 7, /* experts 2 and 3 tie: the lower index, 2 */
        9, 1, 5, 3, /* 2 is full: 3 */
        9, 6, 8, 0, /* 2 and 3 are full: 1 */
    };
    int actor[4];
    int32_t used[4];
    int64_t over[4] = {0};
    ck_assert_int_eq(router_moe_assign(&v, 4, token, expert, logits, NULL, actor, used, over), 3);
    int want[4] = {0, 2, 3, 1};
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(used[r], want[r]);
        ck_assert_int_eq(actor[r], 0);
    }
    ck_assert_int_eq(over[0], 3);
    /* without logits: the least filled expert (ties: the lower index) */
    memset(over, 0, sizeof over);
    ck_assert_int_eq(router_moe_assign(&v, 4, token, expert, NULL, NULL, actor, used, over), 3);
    int by_fill[4] = {0, 1, 2, 3};
    for (int r = 0; r < 4; r++)
        ck_assert_int_eq(used[r], by_fill[r]);
}
END_TEST

/* ---- codecs */

START_TEST(codec_request_roundtrip) {
    int32_t ex[3] = {0, 0, 5};
    msg_expert_request_t q;
    msg_expert_request_init(&q);
    q.seq = 42, q.worker = 1, q.layer = 3, q.d_model = 64, q.dtype = MSG_DTYPE_F16;
    q.experts = ex, q.n_rows = 3, q.table = 7;
    void *buf;
    size_t len;
    msg_err_t err;
    ck_assert_int_eq(msg_expert_request_encode(&q, &buf, &len, &err), 0);
    msg_any_t m;
    ck_assert_int_eq(msg_any_decode(buf, len, &m, &err), 0);
    ck_assert_int_eq(m.type, MSG_EXPERT_REQUEST);
    ck_assert_int_eq(m.u.expert_request.n_rows, 3);
    ck_assert_int_eq(m.u.expert_request.experts[2], 5);
    ck_assert_int_eq(m.u.expert_request.dtype, MSG_DTYPE_F16);
    ck_assert_uint_eq(m.u.expert_request.table, 7);
    msg_any_clear(&m);
    /* every truncation is refused, never a crash */
    for (size_t n = 0; n < len; n++)
        ck_assert_int_lt(msg_any_decode(buf, n, &m, &err), 0);
    free(buf);
    /* an expert id out of range, no rows: the encoder refuses */
    ex[1] = MSG_MAX_EXPERTS;
    ck_assert_int_eq(msg_expert_request_encode(&q, &buf, &len, &err), -EINVAL);
    ex[1] = 0;
    q.n_rows = 0;
    ck_assert_int_eq(msg_expert_request_encode(&q, &buf, &len, &err), -EINVAL);
}
END_TEST

START_TEST(codec_reply_and_load) {
    msg_expert_reply_t r;
    msg_expert_reply_init(&r);
    r.seq = 9, r.expert = 2, r.layer = 1, r.n_rows = 4, r.status = MSG_EXPERT_NOT_HOSTED;
    void *buf;
    size_t len;
    msg_err_t err;
    ck_assert_int_eq(msg_expert_reply_encode(&r, &buf, &len, &err), 0);
    msg_expert_reply_t d;
    ck_assert_int_eq(msg_expert_reply_decode(buf, len, &d, &err), 0);
    ck_assert_int_eq(d.status, MSG_EXPERT_NOT_HOSTED);
    free(buf);
    int32_t rows[3] = {1, 2, 3};
    msg_expert_load_t l;
    msg_expert_load_init(&l);
    l.expert = 0, l.n_expert = 3, l.rows = rows, l.n_rows_n = 3;
    ck_assert_int_eq(msg_expert_load_encode(&l, &buf, &len, &err), 0);
    free(buf);
    l.n_expert = 4; /* rows must have one entry per expert */
    ck_assert_int_eq(msg_expert_load_encode(&l, &buf, &len, &err), -EINVAL);
    ck_assert_int_eq(err.kind, MSG_E_INVALID);
}
END_TEST

START_TEST(codec_table_rules) {
    int32_t hosts[4] = {1, 0, 0, 1}, cap[2] = {1250, 1250}, load[2] = {0, 3}, alive[2] = {1, 1};
    msg_expert_table_t t;
    msg_expert_table_init(&t);
    t.version = 5, t.n_expert = 2, t.n_actors = 2, t.load_aware = true;
    t.hosts = hosts, t.n_hosts = 4, t.cap = cap, t.n_cap = 2, t.load = load, t.n_load = 2;
    t.alive = alive, t.n_alive = 2, t.cap_min = 4;
    void *buf;
    size_t len;
    msg_err_t err;
    ck_assert_int_eq(msg_expert_table_encode(&t, &buf, &len, &err), 0);
    msg_expert_table_t d;
    ck_assert_int_eq(msg_expert_table_decode(buf, len, &d, &err), 0);
    ck_assert_int_eq(d.hosts[3], 1);
    ck_assert_int_eq(d.load[1], 3);
    msg_expert_table_clear(&d);
    free(buf);
    t.n_hosts = 3; /* not E x A */
    ck_assert_int_eq(msg_expert_table_encode(&t, &buf, &len, &err), -EINVAL);
    t.n_hosts = 4;
    hosts[0] = 2; /* not 0/1 */
    ck_assert_int_eq(msg_expert_table_encode(&t, &buf, &len, &err), -EINVAL);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("moe_dispatch");
    TCase *tc = tcase_create("policy");
    tcase_add_test(tc, parse_sets);
    tcase_add_test(tc, static_placement);
    tcase_add_test(tc, replicas_for_hot_experts);
    tcase_add_test(tc, budget_and_static_mode);
    tcase_add_test(tc, down_and_back);
    tcase_add_test(tc, assign_static);
    tcase_add_test(tc, assign_load_replicas_and_overflow);
    tcase_add_test(tc, assign_never_picks_a_selected_expert);
    tcase_add_test(tc, overflow_goes_to_the_next_best_expert);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("codecs");
    tcase_add_test(tm, codec_request_roundtrip);
    tcase_add_test(tm, codec_reply_and_load);
    tcase_add_test(tm, codec_table_rules);
    suite_add_tcase(s, tm);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

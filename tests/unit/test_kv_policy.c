/* test_kv_policy.c - eviction order: LRU, LFU (recency breaks ties) and SCORED
 * (recency + frequency bonus + pin bonus) on constructed histories; pins
 * protect; remove / re-insert; and random operations against a brute-force
 * model that recomputes every key and scans for the minimum. */
#include "kv_policy.h"
#include "test_util.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>

#define S 1000000ull /* one second in us */

/* Pop every candidate in eviction order into out; returns how many. */
static int s_drain(kv_policy_t *p, int *out) {
    int n = 0, id;
    while ((id = kv_policy_victim(p)) >= 0) {
        out[n++] = id;
        kv_policy_remove(p, id);
        ck_assert(!kv_policy_is_candidate(p, id));
    }
    ck_assert_int_eq(kv_policy_count(p), 0);
    return n;
}

START_TEST(names) {
    ck_assert_int_eq(kv_policy_parse("lru"), KV_POLICY_LRU);
    ck_assert_int_eq(kv_policy_parse("lfu"), KV_POLICY_LFU);
    ck_assert_int_eq(kv_policy_parse("scored"), KV_POLICY_SCORED);
    ck_assert_int_eq(kv_policy_parse("fifo"), -1);
    ck_assert_int_eq(kv_policy_parse(NULL), -1);
    ck_assert_str_eq(kv_policy_name(KV_POLICY_SCORED), "scored");
    ck_assert_ptr_null(kv_policy_name(7));
    ck_assert_ptr_null(kv_policy_new(KV_POLICY_LRU, 0));
    ck_assert_ptr_null(kv_policy_new((kv_policy_kind_t)9, 4));
    kv_policy_t *p = kv_policy_new(KV_POLICY_LFU, 4);
    ck_assert_int_eq(kv_policy_kind(p), KV_POLICY_LFU);
    ck_assert_int_eq(kv_policy_victim(p), -1);
    kv_policy_destroy(&p);
    kv_policy_destroy(&p);
    ck_assert_ptr_null(p);
}
END_TEST

/* LRU: the least recently used goes first, whatever the use counts. */
START_TEST(lru_order) {
    kv_policy_t *p = kv_policy_new(KV_POLICY_LRU, 8);
    kv_policy_insert(p, 3, 10 * S, 0, true);
    kv_policy_insert(p, 1, 20 * S, 0, true);
    kv_policy_insert(p, 5, 30 * S, 0, true);
    kv_policy_insert(p, 0, 40 * S, 0, true);
    for (int i = 0; i < 9; i++)
        kv_policy_touch(p, 0, 41 * S); /* many uses, still most recent */
    kv_policy_touch(p, 3, 50 * S);     /* 3 becomes the most recent */
    ck_assert_int_eq(kv_policy_count(p), 4);
    int out[8];
    ck_assert_int_eq(s_drain(p, out), 4);
    int want[] = {1, 5, 0, 3};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(out[i], want[i]);
    kv_policy_destroy(&p);
}
END_TEST

/* LFU: fewest uses first; equal uses: least recent first. */
START_TEST(lfu_order) {
    kv_policy_t *p = kv_policy_new(KV_POLICY_LFU, 8);
    kv_policy_insert(p, 0, 10 * S, 0, true); /* uses 1 */
    kv_policy_insert(p, 1, 20 * S, 0, true);
    kv_policy_touch(p, 1, 21 * S); /* uses 2 */
    kv_policy_insert(p, 2, 30 * S, 0, true);
    kv_policy_touch(p, 2, 31 * S);
    kv_policy_touch(p, 2, 32 * S); /* uses 3 */
    kv_policy_insert(p, 3, 5 * S, 0, true);
    kv_policy_touch(p, 3, 6 * S);            /* uses 2, older than 1 */
    kv_policy_insert(p, 4, 99 * S, 0, true); /* uses 1, newest */
    int out[8];
    ck_assert_int_eq(s_drain(p, out), 5);
    int want[] = {0, 4, 3, 1, 2};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(out[i], want[i]);
    kv_policy_destroy(&p);
}
END_TEST

/* SCORED: recency plus 2 s per doubling of uses plus 60 s per pin level. */
START_TEST(scored_order) {
    kv_policy_t *p = kv_policy_new(KV_POLICY_SCORED, 8);
    /* a: used once at 100 s:         100 + 2*log2(2) = 102 s */
    kv_policy_insert(p, 0, 100 * S, 0, true);
    /* b: 7 uses, last at 98 s:        98 + 2*log2(8) = 104 s (older, but kept longer) */
    kv_policy_insert(p, 1, 90 * S, 0, true);
    for (int i = 0; i < 6; i++)
        kv_policy_touch(p, 1, (92 + i) * S);
    kv_policy_touch(p, 1, 98 * S);
    ck_assert_int_eq(kv_policy_victim(p), 0);
    /* c: pinned 1, used once at 50 s: 50 + 2 + 60 = 112 s */
    kv_policy_insert(p, 2, 50 * S, 1, true);
    /* d: unpinned, used once at 109 s: 111 s */
    kv_policy_insert(p, 3, 109 * S, 0, true);
    int out[8];
    ck_assert_int_eq(s_drain(p, out), 4);
    int want[] = {0, 1, 3, 2};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(out[i], want[i]);
    kv_policy_destroy(&p);
}
END_TEST

/* A block pinned at 255 outlives hours of idleness under SCORED. */
START_TEST(pin_protects) {
    kv_policy_t *p = kv_policy_new(KV_POLICY_SCORED, 4);
    kv_policy_insert(p, 0, 0, 255, true);          /* system prompt at t = 0 */
    kv_policy_insert(p, 1, 3600 * S, 0, true);     /* an hour later */
    kv_policy_insert(p, 2, 4 * 3600 * S, 0, true); /* four hours later */
    ck_assert_int_eq(kv_policy_victim(p), 1);
    kv_policy_remove(p, 1);
    ck_assert_int_eq(kv_policy_victim(p), 2);
    kv_policy_remove(p, 2);
    ck_assert_int_eq(kv_policy_victim(p), 0);
    /* re-inserting with pin 0 takes the protection away */
    kv_policy_insert(p, 3, 10, 0, true);
    ck_assert_int_eq(kv_policy_victim(p), 3);
    kv_policy_insert(p, 0, 0, 0, false);
    ck_assert_int_eq(kv_policy_victim(p), 0);
    kv_policy_destroy(&p);
}
END_TEST

/* Insert / remove / touch of non-candidates; fresh restarts the count. */
START_TEST(remove_insert) {
    kv_policy_t *p = kv_policy_new(KV_POLICY_LFU, 4);
    kv_policy_remove(p, 2);  /* not a candidate: no-op */
    kv_policy_remove(p, 99); /* out of range: ignored */
    kv_policy_insert(p, 99, 0, 0, true);
    kv_policy_touch(p, -1, 0);
    ck_assert_int_eq(kv_policy_count(p), 0);
    kv_policy_insert(p, 0, 1 * S, 0, true);
    kv_policy_insert(p, 1, 2 * S, 0, true);
    kv_policy_insert(p, 1, 3 * S, 0, true); /* again: updates, not a duplicate */
    ck_assert_int_eq(kv_policy_count(p), 2);
    /* 0 is taken into use and used three more times while not a candidate */
    kv_policy_remove(p, 0);
    ck_assert(!kv_policy_is_candidate(p, 0));
    for (int i = 0; i < 3; i++)
        kv_policy_touch(p, 0, (4 + i) * S);
    ck_assert_int_eq(kv_policy_victim(p), 1);
    /* released (not fresh): it keeps its 4 uses, 1 goes first */
    kv_policy_insert(p, 0, 10 * S, 0, false);
    ck_assert_int_eq(kv_policy_victim(p), 1);
    /* new content in 0 (fresh): its count restarts at 1; with 1 use each,
     * recency decides: 1 (3 s) before 0 (11 s) */
    kv_policy_insert(p, 0, 11 * S, 0, true);
    ck_assert_int_eq(kv_policy_victim(p), 1);
    kv_policy_touch(p, 1, 12 * S); /* 1 now has 2 uses */
    ck_assert_int_eq(kv_policy_victim(p), 0);
    kv_policy_remove(p, 0);
    kv_policy_remove(p, 1);
    ck_assert_int_eq(kv_policy_victim(p), -1);
    kv_policy_destroy(&p);
}
END_TEST

/* ---- brute force: every key recomputed, minimum found by a scan */

typedef struct {
    uint32_t uses;
    uint64_t last;
    int pin;
    bool cand;
} s_ref_t;

static bool s_ref_less(int kind, const s_ref_t *r, int a, int b) {
    double ka, kb;
    uint64_t ta = r[a].last, tb = r[b].last;
    switch (kind) {
    case KV_POLICY_LRU:
        ka = (double)ta, kb = (double)tb;
        ta = tb = 0;
        break;
    case KV_POLICY_LFU:
        ka = r[a].uses, kb = r[b].uses;
        break;
    default:
        ka = (double)ta + llround(2e6 * log2(1.0 + r[a].uses)) + 6e7 * r[a].pin;
        kb = (double)tb + llround(2e6 * log2(1.0 + r[b].uses)) + 6e7 * r[b].pin;
        break;
    }
    if (ka != kb)
        return ka < kb;
    if (ta != tb)
        return ta < tb;
    return a < b;
}

static void s_random_vs_model(int kind) {
    enum { N = 61 };
    kv_policy_t *p = kv_policy_new(kind, N);
    s_ref_t r[N] = {0};
    uint64_t rng = 0x1234 + kind, now = 1000;
    for (int step = 0; step < 40000; step++) {
        int id = (int)(test_rand_u64(&rng) % N);
        int op = (int)(test_rand_u64(&rng) % 10);
        now += test_rand_u64(&rng) % 3 * 250000; /* repeats of the same time too */
        if (op < 4) {
            bool fresh = test_rand_u64(&rng) % 2;
            int pin = test_rand_u64(&rng) % 4 == 0 ? (int)(test_rand_u64(&rng) % 3) : 0;
            kv_policy_insert(p, id, now, pin, fresh);
            if (fresh)
                r[id].uses = 1;
            r[id].last = now;
            r[id].pin = pin;
            r[id].cand = true;
        } else if (op < 7) {
            kv_policy_touch(p, id, now);
            r[id].uses++;
            r[id].last = now;
        } else if (op < 9) {
            kv_policy_remove(p, id);
            r[id].cand = false;
        } else { /* evict the victim */
            int v = kv_policy_victim(p);
            if (v >= 0) {
                kv_policy_remove(p, v);
                r[v].cand = false;
            }
        }
        /* plain ifs: a passing ck_assert costs a pipe write in fork mode */
        int best = -1, count = 0;
        for (int i = 0; i < N; i++) {
            if (kv_policy_is_candidate(p, i) != r[i].cand)
                ck_abort_msg("%s step %d: id %d candidate %d, model %d", kv_policy_name(kind), step,
                             i, kv_policy_is_candidate(p, i), r[i].cand);
            if (!r[i].cand)
                continue;
            count++;
            if (best < 0 || s_ref_less(kind, r, i, best))
                best = i;
        }
        if (kv_policy_count(p) != count || kv_policy_victim(p) != best)
            ck_abort_msg("%s step %d: victim %d of %d, model %d of %d", kv_policy_name(kind), step,
                         kv_policy_victim(p), kv_policy_count(p), best, count);
    }
    kv_policy_destroy(&p);
}

START_TEST(random_vs_model) {
    s_random_vs_model(_i);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("kv_policy");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, names);
    tcase_add_test(tc, lru_order);
    tcase_add_test(tc, lfu_order);
    tcase_add_test(tc, scored_order);
    tcase_add_test(tc, pin_protects);
    tcase_add_test(tc, remove_insert);
    tcase_add_loop_test(tc, random_vs_model, KV_POLICY_LRU, KV_POLICY_SCORED + 1);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

/* test_base.c - base/: the u64 map and the string map against a plain array as
 * reference (random puts, overwrites and deletes across growth, key 0 and the empty
 * string included), the intrusive FIFO, the monotonic clock, and the byte buffer. */
#include "base_buf.h"
#include "base_clock.h"
#include "base_fifo.h"
#include "base_map.h"
#include "base_strmap.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reference: a key space of N small keys (spread into u64 by a multiplier so
 * they collide in the map's low bits) and a present flag + value per key. */
#define N 2048
static uint64_t s_key(int i) {
    return (uint64_t)i * 0x100000000ull; /* low 32 bits all zero: probe runs form */
}

START_TEST(map_matches_reference) {
    base_map_t m;
    ck_assert_int_eq(base_map_init(&m, 4), 0); /* small: it must grow */
    static bool present[N];
    static uint64_t val[N];
    uint64_t rng = 7;
    for (int step = 0; step < 200000; step++) {
        int i = (int)(test_rand_u64(&rng) % N);
        uint64_t k = s_key(i), v;
        switch (test_rand_u64(&rng) % 3) {
        case 0:
        case 1:
            v = test_rand_u64(&rng);
            ck_assert_int_eq(base_map_put(&m, k, v), 0);
            present[i] = true;
            val[i] = v;
            break;
        default:
            ck_assert_int_eq(base_map_del(&m, k), present[i]);
            present[i] = false;
        }
        if (step % 4096 == 0) {
            size_t n = 0;
            for (int j = 0; j < N; j++) {
                bool got = base_map_get(&m, s_key(j), &v);
                ck_assert_int_eq(got, present[j]);
                if (got)
                    ck_assert_uint_eq(v, val[j]);
                n += present[j];
            }
            ck_assert_uint_eq(m.n, n);
            ck_assert_uint_le(2 * m.n, m.cap); /* at most half full */
        }
    }
    base_map_free(&m);
    base_map_free(&m); /* safe twice */
    ck_assert(!base_map_get(&m, 0, NULL));
}
END_TEST

START_TEST(map_sized_never_grows) {
    base_map_t m;
    ck_assert_int_eq(base_map_init(&m, 1000), 0);
    size_t cap = m.cap;
    for (uint64_t k = 0; k < 1000; k++) /* key 0 is a key like any other */
        ck_assert_int_eq(base_map_put(&m, k * 16, k), 0);
    ck_assert_uint_eq(m.cap, cap);
    uint64_t v = 1;
    ck_assert(base_map_get(&m, 0, &v) && v == 0);
    ck_assert(!base_map_get(&m, 1, NULL));
    base_map_free(&m);
}
END_TEST

typedef struct {
    int id;
    base_fifo_link_t link;
} s_item_t;

/* What base_map_del_if removes: exactly the entries its predicate picks, each
 * once, on a map crowded with long probe runs that wrap around its end. */
static bool s_odd_value(uint64_t k, uint64_t v, void *ctx) {
    (void)k;
    if (!(v & 1))
        return false;
    (*(size_t *)ctx)++;
    return true;
}

START_TEST(map_del_if) {
    base_map_t m;
    ck_assert_int_eq(base_map_init(&m, N), 0);
    size_t odd = 0;
    for (int i = 0; i < N; i++) {
        /* keys that collide: runs form, and the last ones wrap to slot 0 */
        ck_assert_int_eq(base_map_put(&m, s_key(i) | (uint64_t)(i % 7), (uint64_t)i * 3), 0);
        odd += i * 3 % 2;
    }
    size_t seen = 0;
    ck_assert_uint_eq(base_map_del_if(&m, s_odd_value, &seen), odd);
    ck_assert_uint_eq(seen, odd); /* once per removed entry */
    ck_assert_uint_eq(m.n, (size_t)N - odd);
    for (int i = 0; i < N; i++) {
        uint64_t v;
        bool got = base_map_get(&m, s_key(i) | (uint64_t)(i % 7), &v);
        ck_assert_int_eq(got, !(i * 3 % 2));
        if (got)
            ck_assert_uint_eq(v, (uint64_t)i * 3);
    }
    seen = 0;
    ck_assert_uint_eq(base_map_del_if(&m, s_odd_value, &seen), 0);
    base_map_free(&m);
    ck_assert_uint_eq(base_map_del_if(&m, s_odd_value, &seen), 0); /* a zeroed map */
}
END_TEST

/* The string map's reference: NS keys that are prefixes of one another ("", "k", "k0",
 * ...), hold NUL bytes, or differ in their last byte; a present flag and value per key. */
#define NS 1500
static char s_keys[NS][24];
static size_t s_lens[NS];

static void s_make_keys(void) {
    for (int i = 0; i < NS; i++) {
        int n = snprintf(s_keys[i], sizeof s_keys[i], "k%d", i / 3);
        if (i % 3 == 0)
            n = i / 3 % 7; /* a prefix: "", "k", "k1", ... (up to 6 bytes) */
        else if (i % 3 == 2)
            s_keys[i][n++] = '\0'; /* the same text with a NUL byte after it */
        s_lens[i] = (size_t)n;
    }
    /* prefixes repeat: two tag bytes (>= 0x80, which no text has) make them distinct */
    for (int i = 3; i < NS; i += 3) { /* key 0 stays the empty string */
        s_keys[i][s_lens[i]++] = (char)(0x80 | (i / 3 % 64));
        s_keys[i][s_lens[i]++] = (char)(0x80 | (i / 3 / 64));
    }
}

/* qsort order of key indexes: by length, then bytes. */
static int s_key_cmp(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (s_lens[i] != s_lens[j])
        return s_lens[i] < s_lens[j] ? -1 : 1;
    return memcmp(s_keys[i], s_keys[j], s_lens[i]);
}

START_TEST(strmap_matches_reference) {
    s_make_keys();
    static int order[NS]; /* the keys are distinct: sorted, no two neighbours are equal */
    for (int i = 0; i < NS; i++)
        order[i] = i;
    qsort(order, NS, sizeof order[0], s_key_cmp);
    for (int i = 1; i < NS; i++)
        ck_assert(s_key_cmp(&order[i - 1], &order[i]) != 0);
    base_strmap_t m;
    ck_assert_int_eq(base_strmap_init(&m, 2), 0); /* small: it must grow */
    static bool present[NS];
    static uint64_t val[NS];
    uint64_t rng = 11;
    for (int step = 0; step < 40000; step++) {
        int i = (int)(test_rand_u64(&rng) % NS);
        const char *k = s_keys[i];
        size_t len = s_lens[i];
        uint64_t v = test_rand_u64(&rng), old = 0;
        switch (test_rand_u64(&rng) % 4) {
        case 0:
            ck_assert_int_eq(base_strmap_put(&m, k, len, v), 0);
            present[i] = true;
            val[i] = v;
            break;
        case 1: /* add keeps what is there */
            if (present[i]) {
                ck_assert_int_eq(base_strmap_add(&m, k, len, v, &old), -EEXIST);
                ck_assert_uint_eq(old, val[i]);
            } else {
                ck_assert_int_eq(base_strmap_add(&m, k, len, v, &old), 0);
                present[i] = true;
                val[i] = v;
            }
            break;
        default:
            ck_assert_int_eq(base_strmap_del(&m, k, len), present[i]);
            present[i] = false;
        }
        if (step % 2048 == 0) {
            size_t n = 0;
            for (int j = 0; j < NS; j++) {
                bool got = base_strmap_get(&m, s_keys[j], s_lens[j], &v);
                ck_assert_int_eq(got, present[j]);
                if (got)
                    ck_assert_uint_eq(v, val[j]);
                n += present[j];
            }
            ck_assert_uint_eq(m.n, n);
            ck_assert_uint_le(2 * m.n, m.cap); /* at most half full */
        }
    }
    base_strmap_free(&m);
    base_strmap_free(&m); /* safe twice */
    ck_assert(!base_strmap_get(&m, "k", 1, NULL));
}
END_TEST

START_TEST(strmap_borrows_keys) {
    /* a vocabulary: the texts live in one blob, the map points into it */
    static const char blob[] = "the\0cat\0sat\0the"; /* "the" twice: the first id stays */
    base_strmap_t m;
    ck_assert_int_eq(base_strmap_init(&m, 4), 0);
    size_t cap = m.cap;
    for (uint64_t id = 0, off = 0; off < sizeof blob - 1; id++) {
        size_t len = strlen(blob + off);
        int rc = base_strmap_add(&m, blob + off, len, id, NULL);
        ck_assert_int_eq(rc, id == 3 ? -EEXIST : 0);
        off += len + 1;
    }
    ck_assert_uint_eq(m.cap, cap); /* sized for 4: never grew */
    ck_assert_uint_eq(m.n, 3);
    uint64_t v = 99;
    ck_assert(base_strmap_get(&m, "the", 3, &v));
    ck_assert_uint_eq(v, 0);
    ck_assert(base_strmap_get(&m, "sat!", 3, &v)); /* the length says where a key ends */
    ck_assert_uint_eq(v, 2);
    ck_assert(!base_strmap_get(&m, "ca", 2, NULL));
    ck_assert(!base_strmap_get(&m, NULL, 0, NULL)); /* "" was never put */
    ck_assert_int_eq(base_strmap_put(&m, NULL, 0, 7), 0);
    ck_assert(base_strmap_get(&m, "", 0, &v));
    ck_assert_uint_eq(v, 7);
    base_strmap_free(&m);
}
END_TEST

START_TEST(fifo_order) {
    s_item_t it[5];
    base_fifo_t q = {0};
    ck_assert(base_fifo_empty(&q));
    ck_assert_ptr_null(BASE_FIFO_ENTRY(base_fifo_pop(&q), s_item_t, link));
    for (int i = 0; i < 5; i++) {
        it[i].id = i;
        base_fifo_push(&q, &it[i].link);
    }
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(BASE_FIFO_ENTRY(base_fifo_pop(&q), s_item_t, link)->id, i);
    base_fifo_push(&q, &it[0].link); /* a popped link can go in again */
    int want[] = {3, 4, 0};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(BASE_FIFO_ENTRY(base_fifo_pop(&q), s_item_t, link)->id, want[i]);
    ck_assert(base_fifo_empty(&q));
    ck_assert_ptr_null(q.tail);
}
END_TEST

START_TEST(clock_monotonic) {
    uint64_t a = base_now_ns(), b = base_now_us();
    ck_assert_uint_le(a / 1000, b);
    ck_assert_uint_le(b, base_now_us());
}
END_TEST

START_TEST(buf_appends) {
    base_buf_t b = {0};
    ck_assert_int_eq(base_buf_adds(&b, "data: "), 0);
    ck_assert_int_eq(base_buf_printf(&b, "{\"n\":%d}", 42), 0);
    ck_assert_str_eq(b.p, "data: {\"n\":42}");
    ck_assert_uint_eq(b.len, 14);
    /* grown far past the first allocation: every byte kept, NUL after the last */
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(base_buf_add(&b, "0123456789", i % 11), 0);
    size_t want = 14;
    for (int i = 0; i < 1000; i++)
        want += (size_t)(i % 11);
    ck_assert_uint_eq(b.len, want);
    ck_assert_uint_eq(strlen(b.p), want);
    base_buf_consume(&b, 6);
    ck_assert(strncmp(b.p, "{\"n\":42}00", 10) == 0);
    ck_assert_uint_eq(b.len, want - 6);
    base_buf_consume(&b, b.len + 5);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(b.p, "");
    ck_assert_int_eq(base_buf_add(&b, "x", 1), 0);
    char *p = base_buf_take(&b);
    ck_assert_str_eq(p, "x");
    ck_assert_ptr_null(b.p);
    free(p);
    base_buf_free(&b);
    base_buf_free(&b);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("base");
    TCase *tc = tcase_create("base");
    tcase_add_test(tc, map_matches_reference);
    tcase_add_test(tc, map_sized_never_grows);
    tcase_add_test(tc, map_del_if);
    tcase_add_test(tc, strmap_matches_reference);
    tcase_add_test(tc, strmap_borrows_keys);
    tcase_add_test(tc, fifo_order);
    tcase_add_test(tc, clock_monotonic);
    tcase_add_test(tc, buf_appends);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

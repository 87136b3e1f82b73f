/* test_base.c - base/: the u64 map against a plain array as reference (random
 * puts, overwrites and deletes across growth, key 0 included), the intrusive
 * FIFO, the monotonic clock, and the byte buffer. */
#include "base_buf.h"
#include "base_clock.h"
#include "base_fifo.h"
#include "base_map.h"
#include "test_util.h"

#include <check.h>
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
    tcase_add_test(tc, fifo_order);
    tcase_add_test(tc, clock_monotonic);
    tcase_add_test(tc, buf_appends);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}

/* test_kv_events.c - KV events (kvstore/kv_events.h): endpoints per worker, the batch
 * layout as msgpack-c unpacks it (chains merged into one BlockStored, removals merged,
 * AllBlocksCleared), sequence numbers, the replay ring, and bad configs.  The format
 * against vLLM's schema, the sockets and the replay protocol are checked by
 * tests/integration/test_kv_events.py with a decoder written from that schema. */
#include "kv_events.h"

#include "test_util.h"

#include <msgpack.h>
#include <string.h>

START_TEST(endpoints_per_worker) {
    char out[128];
    ck_assert_int_eq(kv_events_endpoint_for("tcp://*:5557", 0, out, sizeof out), 0);
    ck_assert_str_eq(out, "tcp://*:5557");
    ck_assert_int_eq(kv_events_endpoint_for("tcp://10.0.0.1:5557", 3, out, sizeof out), 0);
    ck_assert_str_eq(out, "tcp://10.0.0.1:5560");
    ck_assert_int_eq(kv_events_endpoint_for("ipc:///run/kv", 2, out, sizeof out), 0);
    ck_assert_str_eq(out, "ipc:///run/kv.2");
    ck_assert_int_eq(kv_events_endpoint_for("inproc://kv", 1, out, sizeof out), 0);
    ck_assert_str_eq(out, "inproc://kv.1");
    ck_assert_int_eq(kv_events_endpoint_for("tcp://*:x", 0, out, sizeof out), -EINVAL);
    ck_assert_int_eq(kv_events_endpoint_for("tcp://host", 0, out, sizeof out), -EINVAL);
    ck_assert_int_eq(kv_events_endpoint_for("tcp://*:65535", 1, out, sizeof out), -EINVAL);
    ck_assert_int_eq(kv_events_endpoint_for("udp://*:1", 0, out, sizeof out), -EINVAL);
    ck_assert_int_eq(kv_events_endpoint_for("tcp://*:5557", 0, out, 8), -EINVAL);
}
END_TEST

/* Flush ev and unpack the batch into *u; its sequence number. */
static int64_t s_flush(kv_events_t *ev, double ts, msgpack_unpacked *u) {
    int64_t q;
    const uint8_t *p;
    size_t n;
    ck_assert_int_eq(kv_events_flush(ev, ts, &q, &p, &n), 1);
    msgpack_unpacked_init(u);
    ck_assert(msgpack_unpack_next(u, (const char *)p, n, NULL) == MSGPACK_UNPACK_SUCCESS);
    return q;
}

static bool s_str_is(msgpack_object o, const char *s) {
    return o.type == MSGPACK_OBJECT_STR && o.via.str.size == strlen(s) &&
           !memcmp(o.via.str.ptr, s, o.via.str.size);
}

START_TEST(batches_as_unpacked) {
    kv_events_config_t c = {2, 4, 0};
    kv_events_t *ev = kv_events_new(&c);
    ck_assert_ptr_nonnull(ev);
    int32_t t[6] = {5, 6, 7, 8, 9, 10};
    kv_events_cleared(ev);
    kv_events_stored(ev, KV_EVENTS_T0, 100, 0, t); /* a chain of three: one event */
    kv_events_stored(ev, KV_EVENTS_T0, 101, 100, t + 2);
    kv_events_stored(ev, KV_EVENTS_T0, 102, 101, t + 4);
    kv_events_stored(ev, KV_EVENTS_T1, 103, 102, t); /* another medium: a new event */
    kv_events_removed(ev, KV_EVENTS_T0, 100);
    kv_events_removed(ev, KV_EVENTS_T0, 101);
    kv_events_stored(ev, KV_EVENTS_T0, 104, 777, t); /* not chained to the last: new */
    ck_assert_int_eq(kv_events_pending(ev), 5);
    msgpack_unpacked u;
    ck_assert_int_eq(s_flush(ev, 1234.5, &u), 0);
    ck_assert_int_eq(kv_events_pending(ev), 0);
    int64_t q;
    const uint8_t *p;
    size_t n;
    ck_assert_int_eq(kv_events_flush(ev, 1235.0, &q, &p, &n), 0); /* nothing queued */
    msgpack_object b = u.data;
    ck_assert(b.type == MSGPACK_OBJECT_ARRAY && b.via.array.size == 3);
    ck_assert(b.via.array.ptr[0].type == MSGPACK_OBJECT_FLOAT64 &&
              b.via.array.ptr[0].via.f64 == 1234.5);
    ck_assert_int_eq(b.via.array.ptr[2].via.u64, 0); /* data_parallel_rank */
    msgpack_object_array evs = b.via.array.ptr[1].via.array;
    ck_assert_int_eq(evs.size, 5);
    ck_assert(evs.ptr[0].via.array.size == 1 &&
              s_str_is(evs.ptr[0].via.array.ptr[0], "AllBlocksCleared"));
    msgpack_object *s = evs.ptr[1].via.array.ptr;
    ck_assert_int_eq(evs.ptr[1].via.array.size, 8);
    ck_assert(s_str_is(s[0], "BlockStored"));
    ck_assert_int_eq(s[1].via.array.size, 3);
    ck_assert(s[1].via.array.ptr[0].via.u64 == 100 && s[1].via.array.ptr[2].via.u64 == 102);
    ck_assert(s[2].type == MSGPACK_OBJECT_NIL); /* the first block has no parent */
    ck_assert_int_eq(s[3].via.array.size, 6);
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(s[3].via.array.ptr[i].via.u64, t[i]);
    ck_assert_int_eq(s[4].via.u64, 2);
    ck_assert(s[5].type == MSGPACK_OBJECT_NIL && s_str_is(s[6], "GPU") &&
              s[7].type == MSGPACK_OBJECT_NIL);
    s = evs.ptr[2].via.array.ptr;
    ck_assert(s[2].via.u64 == 102 && s_str_is(s[6], "CPU"));
    s = evs.ptr[3].via.array.ptr;
    ck_assert_int_eq(evs.ptr[3].via.array.size, 3);
    ck_assert(s_str_is(s[0], "BlockRemoved") && s[1].via.array.size == 2 && s_str_is(s[2], "GPU"));
    s = evs.ptr[4].via.array.ptr;
    ck_assert(s[1].via.array.size == 1 && s[1].via.array.ptr[0].via.u64 == 104 &&
              s[2].via.u64 == 777);
    msgpack_unpacked_destroy(&u);
    kv_events_stats_t st = kv_events_stats(ev);
    ck_assert(st.batches == 1 && st.events == 5 && st.bytes > 0 && st.dropped == 0);
    kv_events_destroy(&ev);
    ck_assert_ptr_null(ev);
    kv_events_destroy(&ev); /* safe twice */
}
END_TEST

START_TEST(replay_ring) {
    kv_events_config_t c = {1, 2, 0};
    kv_events_t *ev = kv_events_new(&c);
    int32_t t = 1;
    int64_t q;
    const uint8_t *p, *third = NULL;
    size_t n;
    for (int i = 0; i < 3; i++) { /* three batches; the ring keeps two */
        kv_events_stored(ev, KV_EVENTS_T0, 50 + (uint64_t)i, 0, &t);
        ck_assert_int_eq(kv_events_flush(ev, 1.0, &q, &p, &n), 1);
        ck_assert_int_eq(q, i);
        third = p;
    }
    ck_assert_int_eq(kv_events_kept(ev, 0, &q, &p, &n), 1); /* 0 is gone: 1 comes first */
    ck_assert_int_eq(q, 1);
    ck_assert_int_eq(kv_events_kept(ev, q + 1, &q, &p, &n), 1);
    ck_assert(q == 2 && p == third);
    ck_assert_int_eq(kv_events_kept(ev, q + 1, &q, &p, &n), 0);
    ck_assert_int_eq(kv_events_kept(ev, 9, &q, &p, &n), 0);
    ck_assert_int_eq(kv_events_stats(ev).batches, 3);
    kv_events_destroy(&ev);
}
END_TEST

START_TEST(bad_configs) {
    kv_events_config_t zero = {0, 8, 0}, nokeep = {16, 0, 0};
    ck_assert_ptr_null(kv_events_new(&zero));
    ck_assert_ptr_null(kv_events_new(&nokeep));
    ck_assert_ptr_null(kv_events_new(NULL));
    ck_assert_str_eq(kv_events_medium_name(KV_EVENTS_T2), "DISK");
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("kv_events");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, endpoints_per_worker);
    tcase_add_test(tc, batches_as_unpacked);
    tcase_add_test(tc, replay_ring);
    tcase_add_test(tc, bad_configs);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_NOFORK);
}

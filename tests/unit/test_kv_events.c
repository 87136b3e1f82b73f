/* test_kv_events.c - the KV event publisher (kvstore/kv_events.h): endpoints per worker,
 * the batch layout as msgpack-c unpacks it (chains merged into one BlockStored, removals
 * merged, AllBlocksCleared), sequence numbers, the replay ring, and bad configs.  The
 * format against vLLM's schema is checked by tests/integration/test_kv_events.py with a
 * decoder written from that schema. */
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

/* The next message on sub: its sequence number and unpacked payload (in *u). */
static int64_t s_recv(zsock_t *sub, msgpack_unpacked *u) {
    zmsg_t *m = zmsg_recv(sub);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(zmsg_size(m), 3);
    zframe_t *topic = zmsg_pop(m), *seq = zmsg_pop(m), *body = zmsg_pop(m);
    ck_assert_int_eq(zframe_size(topic), 3);
    ck_assert(!memcmp(zframe_data(topic), "kv/", 3));
    ck_assert_int_eq(zframe_size(seq), 8);
    int64_t q = 0;
    for (int i = 0; i < 8; i++)
        q = q << 8 | zframe_data(seq)[i];
    msgpack_unpacked_init(u);
    ck_assert(msgpack_unpack_next(u, (const char *)zframe_data(body), zframe_size(body), NULL) ==
              MSGPACK_UNPACK_SUCCESS);
    zframe_destroy(&topic);
    zframe_destroy(&seq);
    zframe_destroy(&body);
    zmsg_destroy(&m);
    return q;
}

static bool s_str_is(msgpack_object o, const char *s) {
    return o.type == MSGPACK_OBJECT_STR && o.via.str.size == strlen(s) &&
           !memcmp(o.via.str.ptr, s, o.via.str.size);
}

START_TEST(batches_as_unpacked) {
    char err[256];
    kv_events_config_t c = {"inproc://kv-test-1", NULL, "kv/", 2, 4, 0};
    kv_events_t *ev = kv_events_new(&c, err, sizeof err);
    ck_assert_msg(ev != NULL, "%s", err);
    zsock_t *sub = zsock_new_sub("inproc://kv-test-1", "");
    ck_assert_ptr_nonnull(sub);
    zclock_sleep(50); /* the subscription reaches the publisher */
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
    ck_assert_int_eq(kv_events_flush(ev, 1234.5), 0);
    ck_assert_int_eq(kv_events_pending(ev), 0);
    ck_assert_int_eq(kv_events_flush(ev, 1235.0), 0); /* nothing queued: nothing sent */
    msgpack_unpacked u;
    ck_assert_int_eq(s_recv(sub, &u), 0);
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
    zsock_destroy(&sub);
    kv_events_destroy(&ev);
    ck_assert_ptr_null(ev);
    kv_events_destroy(&ev); /* safe twice */
}
END_TEST

/* [(seq)] the replay socket answers from start; the end marker checked. */
static int s_replay(zsock_t *req, int64_t start, int64_t *seqs, int cap, kv_events_t *ev) {
    uint8_t sb[8];
    for (int i = 0; i < 8; i++)
        sb[i] = (uint8_t)((uint64_t)start >> (56 - 8 * i));
    zsock_send(req, "zb", sb, (size_t)8);
    ck_assert_int_eq(kv_events_replay(ev), 0);
    int n = 0;
    for (;;) {
        zmsg_t *m = zmsg_recv(req);
        ck_assert_ptr_nonnull(m);
        ck_assert_int_eq(zmsg_size(m), 3);
        zframe_t *delim = zmsg_pop(m), *seq = zmsg_pop(m), *body = zmsg_pop(m);
        ck_assert_int_eq(zframe_size(delim), 0);
        int64_t q = 0;
        for (int i = 0; i < 8; i++)
            q = q << 8 | zframe_data(seq)[i];
        bool end = q == -1;
        if (end)
            ck_assert_int_eq(zframe_size(body), 0);
        else if (n < cap)
            seqs[n++] = q;
        zframe_destroy(&delim);
        zframe_destroy(&seq);
        zframe_destroy(&body);
        zmsg_destroy(&m);
        if (end)
            return n;
    }
}

START_TEST(replay_ring) {
    char err[256];
    kv_events_config_t c = {"inproc://kv-test-2", "inproc://kv-test-2r", NULL, 1, 2, 0};
    kv_events_t *ev = kv_events_new(&c, err, sizeof err);
    ck_assert_msg(ev != NULL, "%s", err);
    ck_assert_ptr_nonnull(kv_events_replay_socket(ev));
    zsock_t *req = zsock_new_dealer("inproc://kv-test-2r");
    int32_t t = 1;
    for (int i = 0; i < 3; i++) { /* three batches; the ring keeps two */
        kv_events_stored(ev, KV_EVENTS_T0, 50 + (uint64_t)i, 0, &t);
        ck_assert_int_eq(kv_events_flush(ev, 1.0), 0);
    }
    int64_t q[4];
    ck_assert_int_eq(s_replay(req, 0, q, 4, ev), 2);
    ck_assert(q[0] == 1 && q[1] == 2);
    ck_assert_int_eq(s_replay(req, 2, q, 4, ev), 1);
    ck_assert_int_eq(q[0], 2);
    ck_assert_int_eq(s_replay(req, 9, q, 4, ev), 0);
    zsock_send(req, "z"); /* malformed (no sequence frame): ignored, no answer */
    ck_assert_int_eq(kv_events_replay(ev), -EPROTO);
    ck_assert_int_eq(s_replay(req, 1, q, 4, ev), 2);
    ck_assert_int_eq(kv_events_stats(ev).replays, 4);
    zsock_destroy(&req);
    kv_events_destroy(&ev);
}
END_TEST

START_TEST(bad_configs) {
    char err[256] = "";
    kv_events_config_t c = {"inproc://kv-test-3", NULL, NULL, 16, 8, 0};
    kv_events_t *a = kv_events_new(&c, err, sizeof err);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_null(kv_events_new(&c, err, sizeof err)); /* bound already */
    ck_assert_msg(strstr(err, "cannot bind inproc://kv-test-3"), "%s", err);
    kv_events_destroy(&a);
    kv_events_config_t bad = {"nonsense", NULL, NULL, 16, 8, 0};
    ck_assert_ptr_null(kv_events_new(&bad, err, sizeof err));
    ck_assert_msg(strstr(err, "cannot bind nonsense"), "%s", err);
    kv_events_config_t zero = {"inproc://kv-test-4", NULL, NULL, 0, 8, 0};
    ck_assert_ptr_null(kv_events_new(&zero, err, sizeof err));
    ck_assert_ptr_null(kv_events_new(NULL, err, sizeof err));
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

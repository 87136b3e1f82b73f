/* test_actor_loop.c - the actor loop (actors/actor_loop.c) on its own, in the manner of
 * CZMQ's zloop_test, and written to be read as its example.  A small actor, "looper", runs
 * as a thread of this test (actor_new): its inbox gets a typed handler (work_cancel, answered
 * with a work_status), a second socket is read by a reader function, a timer ticks, and the
 * idle hook counts wakeups.  The test, on the other end of inproc sockets, checks that the
 * loop answers ping and stats itself, dispatches by type, calls the reader and the timer,
 * counts what it cannot use (a malformed frame, a frame whose checksum fails, a type without
 * a handler) and goes on, and ends on `stop` and on $TERM. */
#include "actor_runtime.h"
#include "test_util.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* ---- the actor under test */

typedef struct {
    actor_loop_t *loop;
    zsock_t *inbox; /* its PULL: control messages and work_cancel */
    zsock_t *out;   /* PUSH to "tester": pong, stats_answer, work_status */
    zsock_t *side;  /* another PULL, read by s_on_side */
    int ticks;      /* timer calls */
    int wakeups;    /* idle hook calls */
} s_looper_t;

static const actor_sock_decl_t s_socks[] = {
    {ACTOR_SOCK_FIELD(s_looper_t, inbox), ACTOR_SOCK_IN, NULL, ACTOR_HWM_CTL, ACTOR_MAX_FRAME,
     false},
    {ACTOR_SOCK_FIELD(s_looper_t, out), ACTOR_SOCK_OUT, "tester", ACTOR_HWM_CTL, 0, false},
    {0},
};

/* A typed handler: the message's own struct, borrowed. */
static void s_on_cancel(void *self, const msg_work_cancel_t *m) {
    s_looper_t *l = self;
    msg_work_status_t st;
    msg_work_status_init(&st);
    st.rid = m->rid;
    st.held = true;
    actor_send(l->out, MSG_WORK_STATUS, &st);
}

/* A reader: one message of its socket per call (a plain frame: its length comes back). */
static void s_on_side(void *self, zsock_t *sock) {
    s_looper_t *l = self;
    char *s = zstr_recv(sock);
    msg_work_status_t st;
    msg_work_status_init(&st);
    st.rid = 1000 + (s ? strlen(s) : 0);
    actor_send(l->out, MSG_WORK_STATUS, &st);
    free(s);
}

static void s_tick(void *self) {
    s_looper_t *l = self;
    l->ticks++;
    actor_counters_set(actor_loop_counters(l->loop), "ticks", l->ticks);
}

static int s_idle(void *self) {
    ((s_looper_t *)self)->wakeups++;
    return -1; /* the loop's default wait */
}

static int s_looper_main(actor_env_t *env) {
    s_looper_t l = {0};
    char err[128];
    l.side = zsock_new_pull("@inproc://test-loop-side");
    if (actor_socks_open(env, s_socks, &l, err, sizeof err) || !l.side ||
        !(l.loop = actor_loop_new(env, &l))) {
        actor_env_fail(env, "looper: %s", err);
        actor_socks_close(s_socks, &l);
        zsock_destroy(&l.side);
        return 1;
    }
    actor_loop_inbox(l.loop, l.inbox, l.out, false, "");
    actor_loop_handle_work_cancel(l.loop, s_on_cancel);
    actor_loop_reader(l.loop, l.side, s_on_side);
    actor_loop_timer(l.loop, 20, s_tick);
    actor_loop_idle(l.loop, s_idle);
    actor_env_ready(env);
    actor_loop_run(l.loop, 50); /* until stop or $TERM */
    actor_loop_destroy(&l.loop);
    actor_socks_close(s_socks, &l);
    zsock_destroy(&l.side);
    return 0;
}

static const actor_opt_t s_no_opts[] = {{NULL}};
static const actor_info_t s_looper = {
    "looper", s_looper_main, s_no_opts, 0, 0, "the actor loop's self-test"};

/* ---- the test's side */

typedef struct {
    actor_topology_t *topo; /* looper, tester */
    zsock_t *in;            /* the tester's PULL: what the looper sends */
    zsock_t *to;            /* PUSH to the looper's inbox */
    zsock_t *side;          /* PUSH to its side socket */
    actor_t *looper;
} s_fixture_t;

static void s_start(s_fixture_t *x, const char *tag) {
    char ep[64], err[256];
    x->topo = calloc(1, sizeof *x->topo);
    snprintf(ep, sizeof ep, "inproc://%s-looper", tag);
    actor_topology_add(x->topo, "looper", ep);
    snprintf(ep, sizeof ep, "inproc://%s-tester", tag);
    actor_topology_add(x->topo, "tester", ep);
    x->in = actor_sock_inbound(x->topo, "tester", ACTOR_MAX_FRAME, 1000);
    x->looper = actor_new(&s_looper, "looper", x->topo, 5000, err, sizeof err);
    ck_assert_msg(x->looper != NULL, "%s", err);
    x->to = actor_sock_outbound(x->topo, "tester", "looper", 1000);
    x->side = zsock_new_push(">inproc://test-loop-side");
    ck_assert_ptr_nonnull(x->in);
    ck_assert_ptr_nonnull(x->to);
}

static void s_stop(s_fixture_t *x) {
    actor_destroy(&x->looper);
    zsock_destroy(&x->to);
    zsock_destroy(&x->side);
    zsock_destroy(&x->in);
    free(x->topo);
}

/* The next message from the looper (waits up to 2 s). */
static void s_next(s_fixture_t *x, msg_any_t *m) {
    msg_err_t err;
    zpoller_t *p = zpoller_new(x->in, NULL);
    ck_assert_msg(zpoller_wait(p, 2000) == x->in, "the looper said nothing");
    zpoller_destroy(&p);
    ck_assert_int_eq(actor_recv(x->in, m, &err), 0);
}

/* A counter of the looper's stats_answer (-1: absent). */
static int64_t s_counter(s_fixture_t *x, const char *name) {
    msg_stats_query_t q;
    msg_stats_query_init(&q);
    ck_assert_int_eq(actor_send(x->to, MSG_STATS_QUERY, &q), 0);
    msg_any_t m;
    s_next(x, &m);
    ck_assert_int_eq(m.type, MSG_STATS_ANSWER);
    int64_t v = -1;
    for (int i = 0; i < m.u.stats_answer.n_counters; i++)
        if (!strcmp(m.u.stats_answer.counters[i].name, name))
            v = m.u.stats_answer.counters[i].value;
    msg_any_clear(&m);
    return v;
}

START_TEST(dispatch_reader_timer) {
    s_fixture_t x;
    s_start(&x, "loop-a");
    /* ping: answered by the loop itself, to the inbox's reply socket */
    msg_ping_t p;
    msg_ping_init(&p);
    p.seq = 5;
    ck_assert_int_eq(actor_send(x.to, MSG_PING, &p), 0);
    msg_any_t m;
    s_next(&x, &m);
    ck_assert_int_eq(m.type, MSG_PONG);
    ck_assert_uint_eq(m.u.pong.seq, 5);
    ck_assert_str_eq(m.u.pong.name, "looper");
    msg_any_clear(&m);
    /* a typed handler */
    msg_work_cancel_t c;
    msg_work_cancel_init(&c);
    c.rid = 42;
    ck_assert_int_eq(actor_send(x.to, MSG_WORK_CANCEL, &c), 0);
    s_next(&x, &m);
    ck_assert_int_eq(m.type, MSG_WORK_STATUS);
    ck_assert_uint_eq(m.u.work_status.rid, 42);
    ck_assert(m.u.work_status.held);
    msg_any_clear(&m);
    /* the reader of another socket */
    ck_assert_int_eq(zstr_send(x.side, "abc"), 0);
    s_next(&x, &m);
    ck_assert_int_eq(m.type, MSG_WORK_STATUS);
    ck_assert_uint_eq(m.u.work_status.rid, 1003);
    msg_any_clear(&m);
    /* the timer: every 20 ms */
    zclock_sleep(150);
    int64_t ticks = s_counter(&x, "ticks");
    ck_assert_msg(ticks >= 3 && ticks <= 9, "%lld ticks in ~150 ms", (long long)ticks);
    s_stop(&x);
}
END_TEST

/* What the loop cannot use is counted, and it goes on. */
START_TEST(bad_frames_counted) {
    s_fixture_t x;
    s_start(&x, "loop-b");
    ck_assert_int_eq(zstr_send(x.to, "not msgpack"), 0); /* no checksum trailer either */
    msg_work_probe_t pr;
    msg_work_probe_init(&pr); /* a type the looper has no handler for */
    pr.rid = 7;
    ck_assert_int_eq(actor_send(x.to, MSG_WORK_PROBE, &pr), 0);
    zclock_sleep(50);
    ck_assert_int_ge(s_counter(&x, "malformed"), 1);
    ck_assert_int_eq(s_counter(&x, "unexpected"), 1);
    msg_work_cancel_t c; /* still serving */
    msg_work_cancel_init(&c);
    c.rid = 9;
    ck_assert_int_eq(actor_send(x.to, MSG_WORK_CANCEL, &c), 0);
    msg_any_t m;
    s_next(&x, &m);
    ck_assert_uint_eq(m.u.work_status.rid, 9);
    msg_any_clear(&m);
    s_stop(&x);
}
END_TEST

/* `stop` ends the loop after the current message: the body returns 0 (EXIT 0). */
START_TEST(stop_ends_the_loop) {
    s_fixture_t x;
    s_start(&x, "loop-c");
    msg_stop_t st;
    msg_stop_init(&st);
    ck_assert_int_eq(actor_send(x.to, MSG_STOP, &st), 0);
    int rc = -1;
    uint64_t t0 = base_now_us();
    while (!actor_exited(x.looper, &rc) && base_now_us() - t0 < 2000000)
        zclock_sleep(10);
    ck_assert_msg(actor_exited(x.looper, &rc), "stop did not end the loop");
    ck_assert_int_eq(rc, 0);
    s_stop(&x);
}
END_TEST

/* $TERM on the pipe (actor_destroy) ends a loop that is waiting, at once. */
START_TEST(term_ends_a_waiting_loop) {
    s_fixture_t x;
    s_start(&x, "loop-d");
    uint64_t t0 = base_now_us();
    actor_destroy(&x.looper);
    ck_assert_ptr_null(x.looper);
    ck_assert_int_lt(base_now_us() - t0, 1000000);
    s_stop(&x);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("actor_loop");
    TCase *tc = tcase_create("actor_loop");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, dispatch_reader_timer);
    tcase_add_test(tc, bad_frames_counted);
    tcase_add_test(tc, stop_ends_the_loop);
    tcase_add_test(tc, term_ends_a_waiting_loop);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)
